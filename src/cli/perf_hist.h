/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Latency histogram of `gpunvme perf` (the CLI's own, not library API),
 * shared by the CPU path (cmd_perf.c) and the GPU kernels of `perf --gpu`
 * (perf_gpu.cu), so both report through one bucket layout: values below 2^GPUNVME_PERF_HSUB_BITS have a bucket each,
 * above that every power of two is cut into 2^GPUNVME_PERF_HSUB_BITS linear
 * sub-buckets (< 1.6 % error). min/max/sum are exact. Also the random
 * offsets both draw, from the same generator.
 */
#ifndef GPUNVME_PERF_HIST_H
#define GPUNVME_PERF_HIST_H

#include <stdint.h>

#include "gpunvme/spec/nvme.h" /* GPUNVME_HD */

#define GPUNVME_PERF_HSUB_BITS 6
#define GPUNVME_PERF_HSUB (1u << GPUNVME_PERF_HSUB_BITS)
#define GPUNVME_PERF_HBUCKETS ((64 - GPUNVME_PERF_HSUB_BITS + 1) * GPUNVME_PERF_HSUB)

struct gpunvme_perf_hist {
	uint64_t count, sum, min, max;
	uint64_t b[GPUNVME_PERF_HBUCKETS];
};

GPUNVME_HD unsigned gpunvme_perf_hist_index(uint64_t v)
{
	if (v < GPUNVME_PERF_HSUB)
		return (unsigned)v;
#if defined(__CUDA_ARCH__)
	unsigned msb = 63u - (unsigned)__clzll((long long)v);
#else
	unsigned msb = 63u - (unsigned)__builtin_clzll(v);
#endif
	unsigned shift = msb - GPUNVME_PERF_HSUB_BITS;
	return (shift + 1) * GPUNVME_PERF_HSUB + (unsigned)((v >> shift) - GPUNVME_PERF_HSUB);
}

/* xorshift64*: the offsets and the read/write mix of perf workloads */
GPUNVME_HD uint64_t gpunvme_perf_rnd(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

#endif
