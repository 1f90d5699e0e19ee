/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The extent lookup (gpunvme_extent_lookup, include/gpunvme/extents.h) in a
 * CUDA kernel gives the same answers as on the host: a random sorted table
 * with holes and unwritten ranges, a million random offsets. Exits 77
 * without a GPU.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "../harness/check.h"
#include "gpunvme/extents.h"

__global__ void k_lookup(const struct gpunvme_extent *ext, size_t n, const uint64_t *off, int64_t *addr,
			 uint64_t *contig, int m)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < m)
		addr[i] = gpunvme_extent_lookup(ext, n, off[i], &contig[i]);
}

int main(void)
{
	int ndev = 0;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		printf("SKIP: no CUDA device\n");
		return 77;
	}
	const size_t n = 100000;
	const int m = 1 << 20;
	struct gpunvme_extent *ext = (struct gpunvme_extent *)malloc(n * sizeof(*ext));
	uint64_t *off = (uint64_t *)malloc(m * sizeof(uint64_t)), *contig = (uint64_t *)malloc(m * sizeof(uint64_t));
	int64_t *addr = (int64_t *)malloc(m * sizeof(int64_t));
	srand(1);
	uint64_t lo = 0, phys = 1ull << 30;
	for (size_t i = 0; i < n; i++) {
		lo += (rand() % 4 == 0) ? (uint64_t)(rand() % 64 + 1) * 4096 : 0; /* holes */
		uint64_t len = (uint64_t)(rand() % 256 + 1) * 4096;
		ext[i].logical = lo;
		ext[i].physical = phys + (uint64_t)(rand() % 16) * 4096;
		ext[i].length = len;
		ext[i].flags = rand() % 10 == 0 ? GPUNVME_EXTENT_UNWRITTEN : 0;
		lo += len;
		phys = ext[i].physical + len;
	}
	for (int i = 0; i < m; i++)
		off[i] = ((uint64_t)rand() << 20 ^ (uint64_t)rand()) % (lo + (1u << 20));
	struct gpunvme_extent *d_ext;
	uint64_t *d_off, *d_contig;
	int64_t *d_addr;
	cudaMalloc(&d_ext, n * sizeof(*ext));
	cudaMalloc(&d_off, m * sizeof(uint64_t));
	cudaMalloc(&d_contig, m * sizeof(uint64_t));
	cudaMalloc(&d_addr, m * sizeof(int64_t));
	cudaMemcpy(d_ext, ext, n * sizeof(*ext), cudaMemcpyHostToDevice);
	cudaMemcpy(d_off, off, m * sizeof(uint64_t), cudaMemcpyHostToDevice);
	k_lookup<<<(m + 255) / 256, 256>>>(d_ext, n, d_off, d_addr, d_contig, m);
	REQUIRE_CUDA(cudaDeviceSynchronize());
	cudaMemcpy(addr, d_addr, m * sizeof(int64_t), cudaMemcpyDeviceToHost);
	cudaMemcpy(contig, d_contig, m * sizeof(uint64_t), cudaMemcpyDeviceToHost);
	int holes = 0;
	for (int i = 0; i < m; i++) {
		uint64_t c;
		int64_t a = gpunvme_extent_lookup(ext, n, off[i], &c);
		holes += a < 0;
		CHECK(a == addr[i] && c == contig[i], "offset %llu: host %lld/%llu, device %lld/%llu",
		      (unsigned long long)off[i], (long long)a, (unsigned long long)c, (long long)addr[i],
		      (unsigned long long)contig[i]);
	}
	printf("%d offsets over %zu extents (%d in holes or unwritten ranges): %u mismatches\n", m, n, holes,
	       check_failures());
	return check_finish("test_gpu_extents");
}
