/* outpath: the files and directories a run writes at its end (--export,
 * --export-hf, --trace, checkpoints), checked before its first step, so
 * that a run is never lost to a path that could not be written: the
 * parent directories are made (as --checkpoint-dir's are), the place is
 * probed for writing, an existing file is refused where writing over it
 * would destroy a previous result, and the free space of each file system
 * is set against what the run will write there.
 *
 * Nothing here prints; every failure is one line in the caller's buffer:
 *   --export out/m.safetensors already exists: zinfrun does not write over
 *   an export (remove it or choose another name) */
#ifndef ZINF_OUTPATH_H
#define ZINF_OUTPATH_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A file the run writes at its end (flag names the option, for messages).
 * Its parent directories are made; the parent must take a new file; path
 * must not be a directory, nor an existing file when refuse_existing.
 * 0, or -1 with err. */
int outpath_prepare_file(const char *flag, const char *path, bool refuse_existing, char *err, size_t errlen);

/* A directory the run creates at its end by renaming a temporary one
 * beside it (--export-hf): its parent directories are made and must take
 * a new entry. Whether dir itself may exist is the caller's rule.
 * 0, or -1 with err. */
int outpath_prepare_dir(const char *flag, const char *dir, char *err, size_t errlen);

/* What the run will write, per file system: outpath_need adds `bytes`
 * under `path` (a file or directory that may not exist yet: its nearest
 * existing ancestor names the file system); outpath_check then refuses
 * when any file system has less free space than the sum of its needs. */
enum { OUTPATH_MAX_NEEDS = 8 };
typedef struct OutNeed {
    const char *what[OUTPATH_MAX_NEEDS]; /* "--export m.safetensors", ... (pointers kept, not copied) */
    uint64_t bytes[OUTPATH_MAX_NEEDS];
    uint64_t dev[OUTPATH_MAX_NEEDS];
    uint64_t free_bytes[OUTPATH_MAX_NEEDS];
    int n;
} OutNeed;
int outpath_need(OutNeed *nd, const char *what, const char *path, uint64_t bytes, char *err, size_t errlen);
int outpath_check(const OutNeed *nd, char *err, size_t errlen);

#endif
