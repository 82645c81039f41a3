/* target_zl: a plan's target written back as a .zl target block, the
 * inverse of compiler/target.c's reading (docs/tuning.md, "Targets"): what
 * zinfc reads from the text is the PlanTarget it was written from, every
 * figure to the last bit (plain numbers in the fewest digits that read
 * back exactly: bytes, bytes/s, FLOP/s, microseconds), so a target can be taken from a plan, changed (zinfdump
 * --calibrate puts a run's kernel times in it) and planned with again.
 * Figures at 0 (not given) are left out, as the reader leaves them 0. */
#ifndef ZINF_TARGET_ZL_H
#define ZINF_TARGET_ZL_H
#include <stdbool.h>
#include <stdio.h>
#include "plan.h"

/* Writes `target NAME { ... }` for t (name: t->name when NULL, "machine"
 * when that is empty; characters outside [A-Za-z0-9_] become '_'); false
 * when f reports a write error. A net latency of 0 cannot be written (the
 * reader takes a missing one as 10 us). */
bool plan_target_write(FILE *f, const PlanTarget *t, const char *name);

#endif
