/* fuzz_common: what the fuzz harnesses share (tests/fuzz, docs/testing.md).
 *
 * Each harness defines LLVMFuzzerTestOneInput; it is linked either with
 * libFuzzer (make fuzz: build/fuzz/fuzz_NAME) or with tests/fuzz/replay_main.c
 * (the replay binaries of every build, which run it once per file). */
#ifndef ZINF_FUZZ_COMMON_H
#define ZINF_FUZZ_COMMON_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* The plan target's structural mutator (tests/fuzz/plan_mutator.c). */
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);
size_t LLVMFuzzerCustomCrossOver(const uint8_t *data1, size_t size1, const uint8_t *data2, size_t size2, uint8_t *out,
                                 size_t max_out_size, unsigned int seed);
/* libFuzzer's own byte mutator (replay_main.c has a simple stand-in). */
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

/* Where the harnesses print what the tools would print: /dev/null, opened
 * once and kept for the life of the process (NULL if it cannot be); stdout
 * when ZINF_FUZZ_SHOW is set (to see what an input does). */
static inline FILE *fuzz_sink(void) {
    static FILE *sink;
    if (!sink) sink = getenv("ZINF_FUZZ_SHOW") ? stdout : fopen("/dev/null", "w");
    return sink;
}

#endif
