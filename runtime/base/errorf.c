/* errorf: a message into the caller's buffer, and -1. */
#include "errorf.h"
#include <stdio.h>

int verrorf(char *err, size_t errlen, const char *fmt, va_list ap) {
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    return -1;
}

int errorf(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    verrorf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}
