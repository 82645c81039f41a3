/* cudrv: the CUDA driver API, loaded at run time.
 *
 * zinfrun is one binary for machines with and without GPUs: libcuda.so.1 is
 * opened with dlopen and the entry points the CUDA backend needs are looked
 * up by their versioned names (cuMemAlloc_v2, ...). Without a driver, or
 * with only the toolkit's stub library, cudrv_open fails with a message that
 * says which, and the caller falls back to (or suggests) the host backend.
 * Every failing call is reported with the call's name, the caller's file and
 * line, and the driver's own error name and text (cudrv_fail). This is the
 * first piece of the CUDA backend (docs/runtime.md, "Backends"). */
#ifndef ZINF_CUDRV_H
#define ZINF_CUDRV_H
#include <stddef.h>
#include <cuda.h>

typedef struct CudaDrv {
    void *lib;
    char path[64];           /* the library name that was opened */
    int ndevices;
    int version;             /* cuDriverGetVersion: 12040 = 12.4 */
    CUresult (*Init)(unsigned);
    CUresult (*DriverGetVersion)(int *);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);
    CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemHostAlloc)(void **, size_t, unsigned);
    CUresult (*MemFreeHost)(void *);
    CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void **, void **);
    CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*MemGetInfo)(size_t *, size_t *);
    CUresult (*CtxSynchronize)(void);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventQuery)(CUevent);
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*StreamQuery)(CUstream);
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*GetErrorString)(CUresult, const char **);
} CudaDrv;

/* Opens the driver and counts devices. Returns 0, or -1 with why in err
 * ("no CUDA driver: libcuda.so.1: cannot open shared object file", "the CUDA
 * driver found no device (CUDA_ERROR_NO_DEVICE: no CUDA-capable device is
 * detected)"). On failure nothing stays open. */
int cudrv_open(CudaDrv *d, char *err, size_t errlen);
void cudrv_close(CudaDrv *d);
/* Device i's name, memory and compute capability ("sm_90"). */
int cudrv_describe(CudaDrv *d, int i, char *name, size_t nn, size_t *mem, char *arch, size_t an, char *err, size_t errlen);
/* "rank 0: cuMemAlloc_v2 failed at runtime/exec/exec_cuda.c:120: CUDA_ERROR_OUT_OF_MEMORY (out of memory)" */
int cudrv_fail(const CudaDrv *d, CUresult rc, const char *call, const char *file, int line, int rank, char *err,
               size_t errlen);
#define CUDRV_CHECK(d, rank, call, err, n)                                                            \
    do {                                                                                              \
        CUresult rc_ = (call);                                                                        \
        if (rc_ != CUDA_SUCCESS) return cudrv_fail((d), rc_, #call, __FILE__, __LINE__, (rank), err, n); \
    } while (0)

#endif
