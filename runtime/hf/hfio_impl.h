/* hfio_impl: what the files of runtime/hf share. Private to them. Calls go
 * down: hfio.c (import) and hfio_export.c (export) -> hfio_lora.c
 * (adapters) -> hfio_gather.c (a block, a tensor whole on rank 0); the two
 * -> hfio_layout.c (the mapping's layout); all -> hfio_common.c (staging,
 * segments, runs, homes, agreement). No loop. Errors: errorf
 * (runtime/base/errorf.h) into err, -1. */
#ifndef ZINF_HFIO_IMPL_H
#define ZINF_HFIO_IMPL_H
#include "hfio.h"
#include "exec_impl.h"
#include "safetensors.h"

/* A piece of the mapping, with its geometry: parameter P seen as a
 * [rows, cols] matrix (cols its last axis); the piece is P's rows [row0,
 * row0 + nrows) (all of them; a stacked piece: those of its slice P[index])
 * x columns [pc, pc + w), taken from columns [src_col, src_col + w) of the
 * HF tensor in zinf layout. P's element (i, j) is the HF tensor's element
 *   (i - row0) * hstride + src_col + (j - pc)   not transposed (hstride: the HF last axis)
 *   (src_col + j - pc) * hstride + i - row0     transposed (hstride = nrows)
 * and, for a piece of PEFT's expert layout PLAN_HF_EXPERT_COLS (P [E, O, r]
 * whole, the HF tensor [O, r E]; plan.h), with i = e O + o,
 *   o r E + j E + e                             (hf_expert_col)
 * (PLAN_HF_EXPERT_ROWS is the first form: P [E, r, I] is [E r, I] as it is). */
typedef struct HfPiece {
    int tensor;
    int64_t rows, cols, pc, w, src_col, hstride;
    int64_t row0, nrows;
    int layout;             /* PLAN_HF_PLAIN or an expert layout */
    int64_t experts, per;   /* an expert layout: E, and O (PLAN_HF_EXPERT_COLS's rows per expert) */
    bool transpose, stacked;
    int group;
    bool exported;          /* it writes its group's columns (not a repeat of the same columns, not an alias) */
} HfPiece;

/* One HF tensor: the pieces that name it with the transpose of the first
 * define its shape; pieces of the other orientation (a tied weight read
 * both ways) only read it. */
typedef struct HfGroup {
    const char *name;
    bool transpose;
    int first;
    int rank;
    int64_t shape[ST_MAX_RANK];
    uint64_t numel;
    int dtype;              /* plan DType of the first piece's parameter: the exported dtype */
    bool adapter;           /* a LoRA adapter in PEFT's names (hf_is_adapter) */
} HfGroup;

typedef struct HfLayout {
    HfPiece *pieces;
    int npieces;
    HfGroup *groups;
    int ngroups;
} HfLayout;

/* hfio_common.c */
/* "[2, 3]" */
const char *hf_shape_str(const int64_t *shape, int rank, char *buf, size_t n);

/* The HF element of P's (i, j) for a PLAN_HF_EXPERT_COLS piece. */
static inline int64_t hf_expert_col(const HfPiece *x, int64_t i, int64_t j) {
    return (i % x->per) * x->cols * x->experts + j * x->experts + i / x->per;
}

/* hfio_layout.c */
/* Whether the plan has a Hugging Face mapping (an hf block). */
bool hf_has_mapping(const Plan *p);
/* The layout of the plan's mapping (an error when it has none). */
int hf_layout_build(const Plan *p, HfLayout *l, char *err, size_t n);
/* The layout of the plan's own names: each parameter zinfrun --export
 * writes is the tensor of its own name, whole. */
int hf_layout_by_names(const Plan *p, HfLayout *l, char *err, size_t n);
void hf_layout_free(HfLayout *l);
/* Whether checkpoint s uses the plan's own parameter names (*own of them)
 * rather than the mapping's. */
bool hf_uses_own_names(const Plan *p, const StSet *s, uint32_t *own);

/* hfio_common.c, the machinery of import and export */

/* The staging memory: ch elements of up to 4 bytes in a and b, ch floats in f. */
typedef struct HfStage {
    int64_t ch;
    uint8_t *a, *b;
    float *f;
} HfStage;
int hf_stage_init(HfStage *s, const HfioOptions *o, char *err, size_t n);
void hf_stage_free(HfStage *s);

/* Block sizes for a [nrows, ncols] region with ch elements per block: whole
 * rows where they fit; for a transposed piece square-ish blocks, so that
 * both its strided side and its contiguous side move long runs. */
void hf_block_dims(bool transposed, int64_t nrows, int64_t ncols, int64_t ch, int64_t *h, int64_t *w);

/* The segment of P's flat elements [x, y) starting at x that one rank
 * holds: returns its end; *owner is that rank (-1: every rank holds the
 * tensor whole) and *off the element offset in the owner's shard. */
int64_t hf_segment(const PlanShard *s, int nranks, int64_t x, int64_t y, int *owner, int64_t *off);

/* Runs of bytes to move, merged while they continue each other on both
 * sides: fn(ctx, off, buf, len) moves one. */
typedef int (*HfRunFn)(void *ctx, uint64_t off, uint8_t *buf, uint64_t len, char *err, size_t n);
typedef struct HfRuns {
    HfRunFn fn;
    void *ctx;
    uint64_t off, len, total;
    uint8_t *buf;
} HfRuns;
int hf_runs_add(HfRuns *r, uint64_t off, uint8_t *buf, uint64_t len, char *err, size_t n);
int hf_runs_flush(HfRuns *r, char *err, size_t n);

/* A shard's home as a run target. */
typedef struct HfHome {
    Rt *r;
    int buffer;
} HfHome;
int hf_home_read(void *ctx, uint64_t off, uint8_t *buf, uint64_t len, char *err, size_t n);
int hf_home_write(void *ctx, uint64_t off, uint8_t *buf, uint64_t len, char *err, size_t n);

/* Collective: 0 when every rank's rc is 0, else 1 + the highest failing
 * rank (-1 when the agreement itself failed: err says why). */
int hf_agree(Rt *r, int rc, char *err, size_t n);

/* hfio_gather.c: rows [r0, r1) x columns [c0, c1) of tensor t (a [rows,
 * cols] matrix) into st->f (f32) on rank 0; collective when t is
 * partitioned. */
int hf_gather_block(Rt *r, HfStage *st, int t, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1, char *err, size_t n);

/* ---- LoRA adapters (runtime/hf/hfio_lora.c; docs/huggingface.md "LoRA") ----
 * An adapter's HF name is PEFT's: HF_PEFT_PREFIX + the module's path +
 * ".lora_A.weight" ([r, in]) or ".lora_B.weight" ([out, r]); the module's
 * base weight is the path + ".weight". A plan with adapters exports them
 * as a PEFT adapter directory, or (merge_lora) the base model with
 * W + A B scale in the base names. */
#define HF_PEFT_PREFIX "base_model.model."
bool hf_is_adapter(const char *hf_name); /* hfio_common.c */
typedef struct HfLora {
    int a, b;               /* the parameters A [in, r] and B [r, out] */
    int64_t rank;
    double scale;           /* alpha / rank: the `by` of the scale op B's product feeds */
    /* LoRA on the experts (PEFT's ParamWrapper; stdlib/moe.zl): A [E, r, I]
     * and B [E, BO, r], the base W [E, WO, I]; W[e]'s rows are B[e]'s rows
     * [brow0, brow0 + WO) (gate and up share B, gate's rows first). */
    int64_t experts, wper, bper, brow0;
} HfLora;
/* The adapter of base group g: 1 and *lo when it has one, 0 when not, -1
 * (err) when it is incomplete or its scale cannot be found. */
int hf_lora_of(const Plan *p, const HfLayout *l, int g, HfLora *lo, char *err, size_t n);
/* The merge of one block: f (the base weight W's rows [r0, r1) x columns
 * [c0, c1), zinf's [in, out] layout, row-major) += A[r0:r1] B[:, c0:c1]
 * scale, with A [in, r] and B [r, out] (out columns) whole, in double; on
 * the experts (lo->experts), W [E, WO, I] as a matrix, row i = e WO + o:
 * += B[e, brow0 + o, :] A[e, :, c0:c1] scale. */
void hf_lora_add(const HfLora *lo, const float *A, const float *B, int64_t out, float *f, int64_t r0, int64_t r1, int64_t c0,
                 int64_t c1);
/* adapter_config.json for the plan's adapters (malloc'd, NULL: err): r,
 * lora_alpha (scale * r), target_modules (PEFT's short names when they
 * adapt exactly these modules, else the modules' paths), fan_in_fan_out
 * (a base weight kept [in, out], GPT-2's Conv1D); adapters of different
 * ranks or alphas are refused. */
char *hf_adapter_config(const Plan *p, const HfLayout *l, char *err, size_t n);
/* The PEFT target parameter of expert adapter A (a group whose piece has
 * the layout PLAN_HF_EXPERT_ROWS) into buf: "experts.gate_up_proj" (its B
 * feeds gate and up through a split) or "experts.down_proj", the module's
 * last name from its HF name; -1 (err) when the plan's ops do not show it. */
int hf_expert_target(const Plan *p, const HfLayout *l, int ga, char *buf, size_t bn, char *err, size_t n);
/* Collective: A and B whole, as f32, on rank 0 (*fa, *fb malloc'd there, NULL elsewhere). */
int hf_lora_fetch(Rt *r, const HfLora *lo, float **fa, float **fb, char *err, size_t n);

#endif
