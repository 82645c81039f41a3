/* emu_wrap: turns a kernel unit (the CUDA C++ text cuda_gen specialises)
 * into a shared object for the host emulator (emu.h, emu.c). Shared by the
 * kernel harness (tests/gpu/check_kernels.c --emu) and the fake CUDA
 * driver's unit builder (tests/fakecuda/fakecuda_prep.c), so both call the
 * kernels the same way.
 *
 * For every extern "C" __global__ entry NAME of the unit it adds
 *   extern "C" void emu_tramp_NAME(void **p);      NAME(*(T0 *)p[0], ...)
 *   extern "C" const unsigned emu_psize_NAME[];    sizeof(T0), ..., 0
 * The trampoline takes cuLaunchKernel's kernelParams (one pointer to each
 * argument's value); the size table, computed by the C++ compiler from the
 * parsed signature, lets a driver copy the argument VALUES at launch time
 * as CUDA does (0 ends it: no parameter has size 0). */
#ifndef ZINF_EMU_WRAP_H
#define ZINF_EMU_WRAP_H
#include <stddef.h>

/* The wrapper text for src (malloc'd, the caller frees), NULL when out of memory. */
char *emu_wrappers(const char *src);

/* Writes cu_path (src, then its wrappers) and compiles it with $CXX (c++ when
 * unset): -std=c++17 -O1 -fPIC -shared -DZK_EMU -include emu_header, into
 * so_path through so_path.tmp and a rename, so a reader never sees half an
 * object and a failed build leaves no so_path. Returns 0, or -1 with why in
 * err (the compiler's own messages went to stderr). */
int emu_compile_unit(const char *src, const char *cu_path, const char *so_path, const char *emu_header, char *err,
                     size_t nerr);

#endif
