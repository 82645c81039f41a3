/* hfmap: the program's hf blocks -> Graph.hf, the Hugging Face mapping.
 *
 *   hf "LlamaForCausalLM" {
 *     config = "{...}"                                  # config.json written on export
 *     "tok" = "model.embed_tokens.weight"
 *     "llama_block.{i}.rope_attn.wq" = transpose("model.layers.{i}.self_attn.q_proj.weight")
 *     "x.w13" = cat(transpose("gate.weight"), transpose("up.weight"))
 *     "x.wk" = cols(transpose("qkv.weight"), 512, 256)
 *   }
 *
 * The hf block of the model's file names the architecture and makes the
 * mapping; the hf blocks of the other files (the stdlib's layers carry
 * theirs) add entries when they name no architecture or the same one. Every
 * entry's pattern is matched against every parameter: `{name}` matches a
 * decimal number, substituted in the HF names. The model file's entries win
 * over the others'; two matching entries of one block are an error, and so
 * is a model-file pattern matching nothing; parameters left unmapped are a
 * warning. Syntax and rules:
 * docs/language.md ("The hf block"). Diagnostics go to the sink; nothing is
 * printed; everything lives in the graph's arena.
 */
#ifndef ZINF_HFMAP_H
#define ZINF_HFMAP_H
#include <stdbool.h>
#include "ast.h"
#include "diag.h"
#include "graph.h"
#include "sema.h"

enum { HFMAP_MAX_PIECES = 16, HFMAP_MAX_HOLES = 8, HFMAP_MAX_STACK = 65536 /* tensors one stack() makes a parameter of */ };

/* Fills g->hf from prog's hf blocks (after sema_check built g's parameters;
 * constants in the blocks are evaluated by s in the main file's scope).
 * Returns false when it reported an error. No hf block in the model's file:
 * g->hf stays empty and it returns true. */
bool hfmap_build(Sema *s, const Program *prog, Graph *g, DiagSink *d);

/* Matches a parameter name against a pattern ("block.{i}.attn.wq"): true
 * when it matches, with each hole's decimal text in vals[k] (arena) for the
 * pattern's k-th distinct hole name in names[k]; *nholes of them. The
 * pattern must be valid (hfmap_pattern_error returns NULL). */
bool hfmap_match(Arena *a, const char *pattern, const char *name, const char **names, const char **vals, int *nholes);
/* What is wrong with a pattern ("a placeholder '{i}' must be followed by ..."),
 * or NULL when it is valid. */
const char *hfmap_pattern_error(Arena *a, const char *pattern);
/* tmpl with every {name} replaced by its value; NULL (and *bad the unknown
 * name) when a placeholder is not among names. */
const char *hfmap_subst(Arena *a, const char *tmpl, const char *const *names, const char *const *vals, int n,
                        const char **bad);

#endif
