/* tbevents: TensorBoard event files, written in C (zinfrun --tensorboard DIR).
 *
 * A file is a sequence of records in the TFRecord framing
 *     uint64 length (little-endian)
 *     uint32 masked CRC-32C of those 8 bytes
 *     length bytes of data
 *     uint32 masked CRC-32C of the data
 * (masked: ((crc >> 15) | (crc << 17)) + 0xa282ead8), each data one Event
 * protobuf: wall_time (field 1, double), step (2, int64), then either
 * file_version (3, "brain.Event:2") in the first record or a summary (5)
 * of one Value per scalar: tag (1, string) and simple_value (2, float).
 * That is what TensorBoard's readers (and W&B's, which import them)
 * decode; no Python and no protobuf library at run time.
 *
 * The file is DIR/events.out.tfevents.<unix seconds>.<host>.<pid>.zinf.
 * TensorBoard reads every event file of a directory as one run in the
 * order of their names, so a resumed run writes a new file whose steps
 * continue the old ones. Each event is flushed when written: a run killed
 * mid-way leaves every step it finished readable.
 *
 * Nothing here prints; errors come back as one line in the caller's
 * buffer. */
#ifndef ZINF_TBEVENTS_H
#define ZINF_TBEVENTS_H
#include <stddef.h>
#include <stdint.h>

typedef struct TbWriter TbWriter;

/* One scalar of an event: its tag (e.g. "train/loss") and value. */
typedef struct TbScalar {
    const char *tag;
    double value;
} TbScalar;

/* Makes DIR (and its parents) when missing, creates the event file and
 * writes its version record. NULL with the reason in err. */
TbWriter *tb_open(const char *dir, char *err, size_t n);
/* The path of the file being written (owned by w). */
const char *tb_path(const TbWriter *w);
/* One event at `step` holding the scalars v[0..nv), stamped with the
 * wall-clock time now; flushed. 0, or -1 with err. */
int tb_scalars(TbWriter *w, int64_t step, const TbScalar *v, int nv, char *err, size_t n);
/* Closes the file (NULL is fine); -1 with err when the last bytes could
 * not be written. */
int tb_close(TbWriter *w, char *err, size_t n);

/* CRC-32C (Castagnoli) of data, and the TFRecord masking of a CRC:
 * exposed for the tests, which check them against known values. */
uint32_t tb_crc32c(const void *data, size_t len);
uint32_t tb_masked_crc(uint32_t crc);

#endif
