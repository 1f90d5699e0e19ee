// SPDX-License-Identifier: BSD-2-Clause
// The CUDA probes of gpunvme doctor --probe (doctor_gpu.h). The driver API
// entry point for dma-buf export is looked up at run time
// (cudaGetDriverEntryPointByVersion), so the tool links only the runtime and
// still starts on machines without libcuda.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <unistd.h>

#include "doctor_gpu.h"

static int pick(const char *bdf, char *text, size_t len)
{
	int dev = -1;
	cudaError_t e = cudaDeviceGetByPCIBusId(&dev, bdf);
	if (e != cudaSuccess) {
		snprintf(text, len, "not run, because CUDA does not see GPU %s (%s)", bdf, cudaGetErrorString(e));
		return -1;
	}
	e = cudaSetDevice(dev);
	if (e != cudaSuccess) {
		snprintf(text, len, "not run, because cudaSetDevice(%d) failed: %s", dev, cudaGetErrorString(e));
		return -1;
	}
	return dev;
}

typedef CUresult (*get_handle_fn)(void *, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long);

extern "C" int doctor_gpu_dmabuf(const char *bdf, uint64_t *memory_bytes, char *text, size_t len)
{
	int dev = pick(bdf, text, len);
	if (dev < 0)
		return -1;
	size_t fr = 0, total = 0;
	if (cudaMemGetInfo(&fr, &total) == cudaSuccess)
		*memory_bytes = total;
	void *fn = nullptr;
	cudaDriverEntryPointQueryResult q;
	if (cudaGetDriverEntryPointByVersion("cuMemGetHandleForAddressRange", &fn, 11070, cudaEnableDefault, &q) !=
		    cudaSuccess ||
	    q != cudaDriverEntryPointSuccess || !fn) {
		snprintf(text, len, "the driver has no cuMemGetHandleForAddressRange (R515 or later needed)");
		return 1;
	}
	const size_t sz = 2u << 20;
	void *p = nullptr;
	cudaError_t e = cudaMalloc(&p, sz);
	if (e != cudaSuccess) {
		snprintf(text, len, "not run, because cudaMalloc(2 MiB) failed: %s", cudaGetErrorString(e));
		return -1;
	}
	int fd = -1;
	CUresult r = ((get_handle_fn)fn)(&fd, (CUdeviceptr)(uintptr_t)p, sz, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
	cudaFree(p);
	if (r != CUDA_SUCCESS || fd < 0) {
		snprintf(text, len, "cuMemGetHandleForAddressRange(DMA_BUF_FD) returned %d (needs the open kernel module)",
			 (int)r);
		return 1;
	}
	close(fd);
	snprintf(text, len, "exported 2 MiB of GPU memory as dma-buf");
	return 0;
}

__global__ void read_cap(const volatile uint32_t *bar, volatile uint32_t *out)
{
	out[0] = bar[0];
	out[1] = bar[1];
	__threadfence_system();
	out[2] = 1;
}

extern "C" int doctor_gpu_register_io(const char *bdf, volatile void *bar0, size_t len, unsigned timeout_ms,
				      int *read_rc, uint64_t *cap, char *text, size_t tlen, char *rtext, size_t rlen)
{
	*read_rc = -1;
	snprintf(rtext, rlen, "not run, because BAR0 is not registered with CUDA");
	if (pick(bdf, text, tlen) < 0)
		return -1;
	void *b = (void *)bar0;
	cudaError_t e = cudaHostRegister(b, len, cudaHostRegisterIoMemory | cudaHostRegisterMapped);
	if (e != cudaSuccess) {
		snprintf(text, tlen, "%s", cudaGetErrorString(e));
		cudaGetLastError();
		return 1;
	}
	snprintf(text, tlen, "BAR0 registered (cudaHostRegisterIoMemory)");
	void *dbar = nullptr;
	volatile uint32_t *res = nullptr;
	if (cudaHostGetDevicePointer(&dbar, b, 0) != cudaSuccess ||
	    cudaHostAlloc((void **)&res, 16, cudaHostAllocMapped) != cudaSuccess) {
		snprintf(rtext, rlen, "not run, because no device pointer for BAR0 or the result");
		cudaGetLastError();
		cudaHostUnregister(b);
		return 0;
	}
	res[0] = res[1] = res[2] = 0;
	void *dres = nullptr;
	cudaHostGetDevicePointer(&dres, (void *)res, 0);
	// One read only: repeated peer reads a root complex drops can take
	// the SSD's link down (the RTX 3090 investigation).
	read_cap<<<1, 1>>>((const volatile uint32_t *)dbar, (volatile uint32_t *)dres);
	unsigned waited = 0;
	while (res[2] == 0 && waited < timeout_ms) {
		usleep(1000);
		waited++;
	}
	if (res[2] == 0) {
		*read_rc = 1;
		snprintf(rtext, rlen, "timed out after %u ms", timeout_ms);
		return 0; // leave the registration: the kernel may still run
	}
	cudaDeviceSynchronize();
	*cap = (uint64_t)res[0] | (uint64_t)res[1] << 32;
	if (res[0] == 0xffffffffu && res[1] == 0xffffffffu) {
		*read_rc = 1;
		snprintf(rtext, rlen, "read all ones (completion timeout: peer reads dropped)");
	} else {
		*read_rc = 0;
		snprintf(rtext, rlen, "GPU read CAP 0x%016llx", (unsigned long long)*cap);
	}
	cudaFreeHost((void *)res);
	cudaHostUnregister(b);
	return 0;
}
