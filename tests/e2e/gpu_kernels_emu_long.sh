#!/bin/sh
# The kernels of Gemma's and long context's attributes RUN without a GPU:
# tests/gpu/check_kernels.sh --emu executes, on the host emulator of
# tests/gpu/emu.c, against the host's generic entries (runtime/hostk,
# hk_run_fwd/bwd with every attribute), in f32 (SIMT) and bf16 (tensor cores):
#   attention with a sliding window (1, shorter than a key tile, across
#     tiles, as long as T and longer than T), GQA, head dims 32, 40 (padded),
#     64, 72, 128 and 256 (the smaller tiles), packed rows with a window;
#   the scores' scale (query_pre_attn_scalar) and soft-capping, alone and
#     with a window;
#   rmsnorm scaling by offset + g (whole rows and per head), the softcap
#     primitive, rope with YaRN's frequencies (beta_fast/beta_slow default
#     and set).
# Exit code is the verdict. $1: the build directory (the harness is built under it).
set -u
B=${1:-build}
. tests/e2e/lib.sh
e2e_kernels_emu gpu_kernels_emu_long 44 40 "attention window,attention softcap,rmsnorm offset,softcap [,rope yarn,linxent"
