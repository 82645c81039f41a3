/* target: descriptions of the machines a plan is for.
 *
 * A target is a PlanTarget (runtime/plan/plan.h: the plan carries a copy). It
 * comes from a `target NAME { ... }` declaration (keys in docs/tuning.md),
 * from a built-in description (target_builtin), or from this machine
 * (target_detect). Strings are allocated in the given Arena.
 *
 *   target dgx2 {
 *     nodes = 1; gpus_per_node = 16
 *     gpu  { memory = 32 GiB; flops = 125 T; hbm = 900 GB/s; pcie = 12 GB/s; arch = "sm_70"; sms = 80 }
 *     cpu  { memory = 1.5 TiB; bandwidth = 100 GB/s; cores = 48 }
 *     nvme { paths = ["/local_nvme"]; read = 25 GB/s; write = 12 GB/s; capacity = 30 TB }
 *     net  { bandwidth = 150 GB/s; inter = 12.5 GB/s; latency_us = 5 }
 *   }
 *   target host { backend = "host"; ranks = 4; budget = 2 GiB; cpu { memory = 16 GiB; ... } }
 */
#ifndef ZINF_TARGET_H
#define ZINF_TARGET_H
#include <stdbool.h>
#include "arena.h"
#include "ast.h"
#include "diag.h"
#include "plan.h"

typedef PlanTarget Target;

/* Evaluates a target declaration's settings. Every problem (unknown key,
 * with a did-you-mean hint; a number of the wrong unit; a missing required
 * key) goes to d; returns false if there was any. */
bool target_from_decl(const Decl *decl, Arena *a, DiagSink *d, Target *out);
/* The target declaration named name in the program (any target if name is
 * NULL); NULL when there is none. */
const Decl *target_find(const Program *prog, const char *name);
/* target_find + target_from_decl; an error (no location) when the program
 * declares no such target. */
bool target_from_program(const Program *prog, const char *name, Arena *a, DiagSink *d, Target *out);

/* Built-in descriptions: "dgx2", "dgx-a100", "dgx-h100", "h200", "host".
 * Returns false for an unknown name. */
bool target_builtin(const char *name, Target *out);
extern const char *const target_builtin_names[];
extern const int target_nbuiltins;

/* This machine: the GPUs libcuda reports (loaded with dlopen), else a host
 * target from sysconf. *how says which, in words (arena-allocated). */
bool target_detect(Arena *a, Target *out, const char **how);

/* Data-parallel ranks: nodes * gpus_per_node. */
int target_ranks(const Target *t);
/* Host memory per rank: the node's CPU memory over its ranks. */
uint64_t target_cpu_per_rank(const Target *t);

#endif
