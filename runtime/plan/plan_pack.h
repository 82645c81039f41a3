/* plan_pack: the compact form of a plan file's large sections (format
 * versions 5 and 10, docs/plan-format.md).
 *
 * A plan for a deep model repeats itself: each layer's instructions,
 * operands and buffers differ from the previous layer's by the same
 * offsets, so the file grew with the layer count (zi-100t on 2,048 ranks:
 * 2.3 M instructions, 320 MB). A section of PLAN_PACK_MIN bytes or more is
 * stored packed: when its payload is a table of fixed-size records (a u32
 * count, then the records, as the schedule, operands and deps sections
 * are) it is first turned into columns, each field a difference from the
 * same field of the record before (so a regular schedule becomes long runs
 * of the same few values), then compressed: one zstd frame (version 10) or
 * a zlib stream (version 5). The packed payload is a u64 unpacked length,
 * then the frame or stream. Readers treat it as untrusted: the unpacked
 * length is bounded (PLAN_PACK_MAX_RATIO times the packed bytes for zlib,
 * PLAN_PACK_MAX_RATIO_ZSTD for zstd, whose frames cannot exceed it, and
 * 2^40), the frame or stream must end exactly there, its checksum must
 * hold, and the table must have the declared count of records.
 *
 * Nothing here prints; errors come back as false with a reason. */
#ifndef ZINF_PLAN_PACK_H
#define ZINF_PLAN_PACK_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { PLAN_PACK_MIN = 16 << 10, PLAN_PACK_MAX_RATIO = 4096, PLAN_PACK_MAX_RATIO_ZSTD = 32768, PLAN_PACK_MAX_FIELDS = 16 };

/* How a packed payload is compressed: the section header's form word. */
typedef enum PlanPackForm { PLAN_PACK_DEFLATE = 1, PLAN_PACK_ZSTD = 2 } PlanPackForm;

/* A table's record: the widths of its little-endian fields in bytes (1, 2,
 * 4 or 8), nfields of them; nfields 0: not a table, deflate only. */
typedef struct PlanPackLayout {
    int nfields;
    uint8_t width[PLAN_PACK_MAX_FIELDS];
} PlanPackLayout;

/* Whether this build writes and reads that form (zlib and libzstd are
 * found by their headers). */
bool plan_pack_has(PlanPackForm form);
/* raw[0..len) packed in that form into a malloc'd *out of *outlen bytes. A
 * payload that is not exactly a table of the layout's records is
 * compressed as it is. False on out of memory or a form this build lacks
 * (why says so). */
bool plan_pack(const uint8_t *raw, size_t len, const PlanPackLayout *l, PlanPackForm form, uint8_t **out, size_t *outlen,
               const char **why);
/* The inverse: *raw malloc'd, *rawlen bytes. False with why on a payload
 * that does not unpack (bad length, a corrupt frame or stream, a table
 * whose count does not match its bytes, a form this build lacks, out of
 * memory). */
bool plan_unpack(const uint8_t *in, size_t len, const PlanPackLayout *l, PlanPackForm form, uint8_t **raw, size_t *rawlen,
                 const char **why);

#endif
