#!/bin/sh
# The CUDA kernels RUN without a GPU: tests/gpu/check_kernels.sh --emu builds
# the kernel harness and executes a few families (tensor-core and SIMT GEMM
# with its backward, odd sizes too; flash attention forward/backward with
# grouped kv heads and head dims 32, 40, 72, 80, 96, 100, 112, 200, 256 and 7, padded
# to a multiple of 32 inside the kernels; layernorm, odd sizes too; rope with
# llama3 frequency scaling, rmsnorm per head, scale; a linear whose weight is
# stored nf4 or int8 (its dequantized weight equal to the host's decoding bit
# for bit); attention and rope on
# packed rows, several samples a row, against the host's packed kernels;
# Phi-4-mini's rope: partial rotary, attention_factor, longrope with its
# short and long lists, the choice by the longest packed sample too) on the host emulator of
# tests/gpu/emu.c, each against the host reference (runtime/hostk) in f32, bf16 and f16
# (normwise relative error under 1e-5 in f32, 1e-2 in bf16 and f16). Exit code is the verdict.
# $1: the build directory (the harness is built under it).
set -u
B=${1:-build}
. tests/e2e/lib.sh
e2e_kernels_emu gpu_kernels_emu 63 16 "linear nf4,linear int8,attention B1 T33,attention B1 T20,attention B1 T17,linear 300x200x130+b,linear 37x7x33,layernorm,rope llama3,rope partial,rope af,rope longrope,rmsnorm heads,scale [7,packed"
