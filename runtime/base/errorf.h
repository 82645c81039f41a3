/* errorf: the error convention of every module that reports into a
 * caller's buffer: format the message into err (when err and errlen are
 * given) and return -1, so that `return errorf(err, n, "...", ...);` is the
 * whole of a failure path. Only a main() prints. */
#ifndef ZINF_ERRORF_H
#define ZINF_ERRORF_H
#include <stdarg.h>
#include <stddef.h>
int errorf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* errorf with the arguments as a va_list: for a module's own error
 * function that adds something of its own (a prefix, a struct's fields)
 * around the message. */
int verrorf(char *err, size_t errlen, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));
#endif
