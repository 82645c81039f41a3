/* loader: the main file and its imports -> Program.
 * `import "nn"` looks for nn.zl (or the name as written if it ends in .zl)
 * in the importing file's directory, then in each -I directory in order,
 * then in the stdlib directory, passing over the importing file itself (an
 * absolute path is used as is; a name starting with ./ or ../ is relative to
 * the importing file only). A file outside the stdlib that shadows a stdlib
 * module is an error naming both. Each file is parsed once; import cycles
 * are harmless. A missing import is an error at the import's string, with a
 * note listing where it looked. */
#ifndef ZINF_LOADER_H
#define ZINF_LOADER_H
#include <stdbool.h>
#include "arena.h"
#include "ast.h"
#include "diag.h"

typedef struct LoadOptions {
    const char *const *include_dirs;
    int ninclude;
    const char *stdlib_dir;   /* ZINF_STDLIB_DIR by default */
} LoadOptions;

/* Loads main_path and everything it imports into src and out. Returns false
 * if the main file cannot be read (error recorded in d, without location);
 * syntax errors are recorded in d and do not make it return false. */
bool program_load(Arena *a, SourceSet *src, DiagSink *d, const char *main_path,
                  const LoadOptions *opt, Program *out);
/* The same for a main file given as text (a model zinfc made), named path in
 * diagnostics; its imports are looked for relative to path's directory, then
 * as above. */
bool program_load_text(Arena *a, SourceSet *src, DiagSink *d, const char *path, const char *text,
                       const LoadOptions *opt, Program *out);

#endif
