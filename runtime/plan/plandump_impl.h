/* plandump's private declarations, shared by its files: plandump.c (the
 * summary, schedule, memory, trace, kernels and Hugging Face views) and
 * plandump_time.c (the step in time: --compare and the SVG). */
#ifndef ZINF_PLANDUMP_IMPL_H
#define ZINF_PLANDUMP_IMPL_H
#include <stddef.h>
#include <stdint.h>
#include "plan.h"

/* What an instruction works on, in words ("fwd linear @h.0 -> h.0.y", a tensor's name, "input 0"). */
const char *pd_instr_what(const Plan *p, const PlanInstr *s, char *buf, size_t n);
/* Each buffer's first and last instruction (-1: never used); arrays of p->nbuffers. */
void pd_lifetimes(const Plan *p, int32_t *first, int32_t *last);

#endif
