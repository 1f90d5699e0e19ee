// SPDX-License-Identifier: BSD-2-Clause
// What the CUDA driver demands of a dma-buf export of cudaMalloc'ed memory
// (cuMemGetHandleForAddressRange, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD): the
// route the kmod: bus takes to GPU memory (src/cuda/gpu_queues.cu,
// export_dmabuf). For sizes x offsets inside one allocation it prints one CSV
// line each: size,offset,CUresult,dma-buf size (lseek),exporter (fdinfo).
// Also the whole-allocation fallback the library uses, the device attributes,
// and the smallest alignment the driver accepts.
//   kmod_dmabuf_probe [DEVICE]
#include <cuda.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef CUresult (*get_handle_fn)(void *, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long);
typedef CUresult (*get_range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);
typedef CUresult (*get_attr_fn)(int *, CUdevice_attribute, CUdevice);

static void *entry(const char *name)
{
	void *fn = nullptr;
	cudaDriverEntryPointQueryResult q;
	if (cudaGetDriverEntryPointByVersion(name, &fn, 11070, cudaEnableDefault, &q) != cudaSuccess ||
	    q != cudaDriverEntryPointSuccess)
		return nullptr;
	return fn;
}

static void exporter(int fd, char *out, size_t len)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	snprintf(out, len, "?");
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "exp_name:", 9)) {
			line[strcspn(line, "\n")] = 0;
			snprintf(out, len, "%s", line + 9 + strspn(line + 9, " \t"));
		}
	fclose(f);
}

int main(int argc, char **argv)
{
	int dev = argc > 1 ? atoi(argv[1]) : 0;
	if (cudaSetDevice(dev) != cudaSuccess) {
		printf("no CUDA device %d\n", dev);
		return 2;
	}
	get_handle_fn get = (get_handle_fn)entry("cuMemGetHandleForAddressRange");
	get_range_fn range = (get_range_fn)entry("cuMemGetAddressRange");
	get_attr_fn attr = (get_attr_fn)entry("cuDeviceGetAttribute");
	printf("# cuMemGetHandleForAddressRange %s\n", get ? "present" : "MISSING (driver before R515)");
	if (attr) {
		int v = -1;
		attr(&v, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev);
		printf("# CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED %d\n", v);
		v = -1;
		attr(&v, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, dev);
		printf("# CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED %d\n", v);
	}
	if (!get)
		return 1;
	static const size_t sizes[] = { 4096, 8192, 65536, 1u << 20, 2u << 20, (2u << 20) + 4096, 64u << 20, 1u << 30 };
	static const size_t offs[] = { 0, 256, 4096, 65536, 1u << 20 };
	int ok = 0, refused = 0;
	printf("size,offset,cuda_result,dmabuf_bytes,exporter\n");
	for (size_t s : sizes) {
		for (size_t o : offs) {
			void *p = nullptr;
			if (cudaMalloc(&p, s + o) != cudaSuccess) {
				cudaGetLastError();
				printf("%zu,%zu,cudaMalloc-failed,,\n", s, o);
				continue;
			}
			int fd = -1;
			CUresult r = get(&fd, (CUdeviceptr)(uintptr_t)p + o, s, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
			char name[64] = "";
			long long bytes = -1;
			if (r == CUDA_SUCCESS && fd >= 0) {
				bytes = (long long)lseek(fd, 0, SEEK_END);
				exporter(fd, name, sizeof(name));
				close(fd);
				ok++;
			} else {
				refused++;
			}
			printf("%zu,%zu,%d,%lld,%s\n", s, o, (int)r, bytes, name);
			cudaFree(p);
		}
	}
	// the library's fallback: the whole allocation around an unaligned pointer
	void *p = nullptr;
	if (range && cudaMalloc(&p, 3u << 20) == cudaSuccess) {
		CUdeviceptr base = 0;
		size_t size = 0;
		CUresult r = range(&base, &size, (CUdeviceptr)(uintptr_t)p + 12345);
		int fd = -1;
		CUresult r2 = r == CUDA_SUCCESS ? get(&fd, base, size, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0) : r;
		printf("# whole allocation: cuMemGetAddressRange %d (base %% 64 KiB = %llu, size %zu), export %d\n", (int)r,
		       (unsigned long long)(base & 0xffff), size, (int)r2);
		if (fd >= 0)
			close(fd);
		cudaFree(p);
	}
	printf("# exports accepted %d, refused %d\n", ok, refused);
	return 0;
}
