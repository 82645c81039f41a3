/* probe_gpu: measures this rank's GPU for the cost model, the way a CUDA
 * plan uses it, and writes the cuda target zinfprobe saves
 * (docs/schedule.md, "Probing the machine").
 *
 * The driver is opened with dlopen (runtime/cudrv); without a driver or a
 * device nothing is measured and the probe stays a host one (ProbeGpu.on
 * false, .why says why). Each rank takes the GPU of its node-local rank, as
 * the CUDA executor does (runtime/gpu/cuexec.c), and all ranks measure at once,
 * so shared links are shared as in training:
 *  - PCIe: pinned (cuMemHostAlloc) host<->device copies on a stream, 64 KiB
 *    to 64 MiB, each timed by events around it; latency + bandwidth fitted
 *    (probe_fit) per direction and over both (the target's one figure);
 *  - HBM: a device-to-device copy of a large buffer, read + write counted;
 *  - GEMMs: through cuBLASLt (runtime/cublaslt, the plan's own path) at a
 *    few shapes in bf16 (the peak: the best rate; the gemm efficiency: the
 *    median over it) and f32 (reported only), counted as 2 M N K;
 *  - launch: a 4-byte memset between two event records, back to back, as
 *    the executor issues an instruction (NVRTC, which the plan's kernels
 *    need, is not the runtime's to call);
 *  - collectives (more than one rank): NCCL all-gather and reduce-scatter
 *    through runtime/gpucomm, fitted like the host probe's to the ring model.
 * Attention, norm and elementwise rates need the plan's NVRTC kernels: not
 * measured, so the target leaves their efficiencies out (the cost model
 * then takes 1). Errors are values; nothing here prints or exits. */
#ifndef ZINF_PROBE_GPU_H
#define ZINF_PROBE_GPU_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "comm.h"
#include "probe.h"

enum { PROBE_GPU_SIZES = 6, PROBE_GPU_GEMMS = 10 };

typedef struct ProbeGpu {
    bool on;                 /* a GPU was measured (else a host target, for .why) */
    char why[384];           /* when !on: "no CUDA driver: libcuda.so.1: cannot open ..." */
    char name[128], arch[16];
    char lt[128];            /* "libcublasLt.so.13 13.1.0" */
    int ranks;               /* GPUs the target is for (the ranks on this node) */
    int ordinal, sms, ndevices;
    uint64_t memory;         /* usable: free when the probe began, the least over ranks */
    ProbeFit h2d, d2h, pcie; /* per GPU, all ranks at once; pcie: both directions fitted together */
    double copy_bytes[PROBE_GPU_SIZES], h2d_secs[PROBE_GPU_SIZES], d2h_secs[PROBE_GPU_SIZES];
    int ncopy;
    double hbm;              /* bytes/s, read + write */
    double hbm_bytes;        /* the copy's size */
    double launch;           /* seconds per instruction */
    ProbeRate gemm[PROBE_GPU_GEMMS]; /* .what: "bf16 4096x4096x4096" */
    bool gemm_f32[PROBE_GPU_GEMMS];
    int ngemm;
    double flops, flops_f32; /* the best bf16 and f32 rates */
    double eff_gemm;         /* median bf16 rate / flops */
    bool net;                /* measured (more than one rank) */
    ProbeFit coll;           /* per ring step, per rank's link */
    double coll_secs[2][PROBE_GPU_SIZES], coll_bytes[PROBE_GPU_SIZES]; /* all-gather, reduce-scatter */
    int ncoll;
    double seconds;
} ProbeGpu;

/* Measures the GPU of each rank (every rank calls it). 0 with g->on when
 * measured, 0 with !g->on and g->why when no rank has a driver and a
 * device; -1 with the failing call in err (a driver, cuBLASLt or NCCL
 * error, some ranks without a GPU, more ranks on a node than GPUs). The
 * result is the same on every rank. */
int probe_gpu_run(Comm *c, const ProbeOptions *o, ProbeGpu *g, char *err, size_t n);
/* flops, flops_f32 and eff_gemm from g->gemm. */
void probe_gpu_summarise(ProbeGpu *g);

/* The cuda target for g with the host figures of h (cpu memory, bandwidth
 * and cores, nvme): `target probe_HOST { backend = "cuda"; nodes = 1;
 * gpus_per_node; gpu { memory; flops; hbm; pcie; arch; sms;
 * pcie_latency_us; launch_us }; cpu { ... }; efficiency { gemm }; nvme;
 * net }`. Returns the length (as snprintf). */
int probe_gpu_target_text(const ProbeResult *h, const ProbeGpu *g, char *buf, size_t n);
/* What was measured, in lines a person reads; for !g->on the one line
 * "gpu: not measured (WHY): a host target". */
void probe_gpu_report(const ProbeGpu *g, FILE *out);

#endif
