#include "cudrv.h"
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static int fail(char *err, size_t n, const char *what, const char *detail) {
    snprintf(err, n, "%s%s%s", what, detail ? ": " : "", detail ? detail : "");
    return -1;
}

int cudrv_fail(const CudaDrv *d, CUresult rc, const char *call, const char *file, int line, int rank, char *err,
               size_t n) {
    const char *name = NULL, *text = NULL;
    if (d && d->GetErrorName) d->GetErrorName(rc, &name);
    if (d && d->GetErrorString) d->GetErrorString(rc, &text);
    char ctx[32] = "";
    if (rank >= 0) snprintf(ctx, sizeof ctx, "rank %d: ", rank);
    snprintf(err, n, "%s%.80s failed at %s:%d: %s %d (%s)", ctx, call, file, line, name ? name : "CUresult", (int)rc,
             text ? text : "no description");
    return -1;
}

#define SYM(field, name)                                                 \
    do {                                                                 \
        *(void **)&d->field = dlsym(d->lib, name);                       \
        if (!d->field) { missing = name; goto bad; }                     \
    } while (0)

int cudrv_open(CudaDrv *d, char *err, size_t n) {
    memset(d, 0, sizeof *d);
    static const char *const names[] = {"libcuda.so.1", "libcuda.so"};
    char why[256] = "";
    for (size_t i = 0; i < sizeof names / sizeof *names && !d->lib; i++) {
        d->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        const char *e = d->lib ? NULL : dlerror(); /* valid only until the next dl call: copy it */
        if (d->lib) snprintf(d->path, sizeof d->path, "%s", names[i]);
        else if (!why[0]) snprintf(why, sizeof why, "%s", e ? e : "libcuda.so.1 not found");
    }
    if (!d->lib) return fail(err, n, "no CUDA driver", why);
    const char *missing = NULL;
    SYM(Init, "cuInit");
    SYM(DriverGetVersion, "cuDriverGetVersion");
    SYM(DeviceGetCount, "cuDeviceGetCount");
    SYM(DeviceGet, "cuDeviceGet");
    SYM(DeviceGetName, "cuDeviceGetName");
    SYM(DeviceTotalMem, "cuDeviceTotalMem_v2");
    SYM(DeviceGetAttribute, "cuDeviceGetAttribute");
    SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
    SYM(CtxSetCurrent, "cuCtxSetCurrent");
    SYM(MemAlloc, "cuMemAlloc_v2");
    SYM(MemFree, "cuMemFree_v2");
    SYM(MemHostAlloc, "cuMemHostAlloc");
    SYM(MemFreeHost, "cuMemFreeHost");
    SYM(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
    SYM(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
    SYM(StreamCreate, "cuStreamCreate");
    SYM(StreamDestroy, "cuStreamDestroy_v2");
    SYM(StreamSynchronize, "cuStreamSynchronize");
    SYM(StreamWaitEvent, "cuStreamWaitEvent");
    SYM(EventCreate, "cuEventCreate");
    SYM(EventDestroy, "cuEventDestroy_v2");
    SYM(EventRecord, "cuEventRecord");
    SYM(ModuleLoadData, "cuModuleLoadData");
    SYM(ModuleUnload, "cuModuleUnload");
    SYM(ModuleGetFunction, "cuModuleGetFunction");
    SYM(LaunchKernel, "cuLaunchKernel");
    SYM(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
    SYM(MemsetD8Async, "cuMemsetD8Async");
    SYM(MemGetInfo, "cuMemGetInfo_v2");
    SYM(CtxSynchronize, "cuCtxSynchronize");
    SYM(EventSynchronize, "cuEventSynchronize");
    SYM(EventQuery, "cuEventQuery");
    /* v1 in every driver; CUDA 13 headers name the _v2 (same signature) */
    *(void **)&d->EventElapsedTime = dlsym(d->lib, "cuEventElapsedTime");
    if (!d->EventElapsedTime) SYM(EventElapsedTime, "cuEventElapsedTime_v2");
    SYM(StreamQuery, "cuStreamQuery");
    SYM(GetErrorName, "cuGetErrorName");
    SYM(GetErrorString, "cuGetErrorString");
    CUresult rc = d->Init(0);
    if (rc != CUDA_SUCCESS) {
        const char *name = NULL, *text = NULL;
        d->GetErrorName(rc, &name);
        d->GetErrorString(rc, &text);
        char b[256];
        snprintf(b, sizeof b, "%s%s%d (%s)%s", name ? name : "CUresult", name ? " = " : " ", (int)rc, text ? text : "no description",
                 rc == CUDA_ERROR_STUB_LIBRARY ? ": this is the toolkit's stub library, not a driver" : "");
        cudrv_close(d);
        return fail(err, n, "the CUDA driver did not start: cuInit failed", b);
    }
    d->DriverGetVersion(&d->version);
    rc = d->DeviceGetCount(&d->ndevices);
    if (rc != CUDA_SUCCESS || d->ndevices == 0) {
        cudrv_close(d);
        return fail(err, n, "the CUDA driver found no device", NULL);
    }
    return 0;
bad:
    snprintf(err, n, "the CUDA driver %s lacks %s (driver too old?)", d->path, missing);
    cudrv_close(d);
    return -1;
}

void cudrv_close(CudaDrv *d) {
    if (d->lib) dlclose(d->lib);
    memset(d, 0, sizeof *d);
}

int cudrv_describe(CudaDrv *d, int i, char *name, size_t nn, size_t *mem, char *arch, size_t an, char *err, size_t n) {
    CUdevice dev;
    CUDRV_CHECK(d, -1, d->DeviceGet(&dev, i), err, n);
    CUDRV_CHECK(d, -1, d->DeviceGetName(name, (int)nn, dev), err, n);
    CUDRV_CHECK(d, -1, d->DeviceTotalMem(mem, dev), err, n);
    int major = 0, minor = 0;
    CUDRV_CHECK(d, -1, d->DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), err, n);
    CUDRV_CHECK(d, -1, d->DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), err, n);
    snprintf(arch, an, "sm_%d%d", major, minor);
    return 0;
}
