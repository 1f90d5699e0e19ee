/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The GPU data path (src/cuda, include/gpunvme/device.cuh) against the
 * embedded emulator: GPU threads submit and complete NVMe commands over
 * many queue pairs. Cases (argv[1], none = all):
 *   random_rw      random offsets and sizes (1 block .. several MiB), writes
 *                  then reads, 1 and 8 queues, compared with a host reference
 *   many_threads   65,536 threads, one 4 KiB read each, 16 queues
 *   tier2          GPU memory as the DMA target: warp-cooperative reads and
 *                  gpunvme_gpu_read_async on a stream
 *   faults         media error and dropped command seen as statuses in the
 *                  kernel, which returns within its timeout
 *   relaunch       the same queues over 200 kernel launches
 *   lanes          warp-batched submission (gpunvme_dev_rw_lanes), idle lanes
 *   recover        gpunvme_gpu_queues_recover after a dropped command (abort,
 *                  queues deleted), a slow device, a fatal status (reset) and
 *                  a removal and return, Tier 1 and Tier 2: failed commands
 *                  never succeed, their buffers stay untouched after the
 *                  recovery, the same descriptor works at the next launch
 *   tier2_image_staged  Tier 2 reads from an image file (the copy engine's
 *                  pinned staging rings): 96 threads on one queue of 3
 *                  free slots, 1 block to 3 MiB each (commands of 1 MiB
 *                  over 512 KiB chunks), every byte of each range and of
 *                  the 8 KiB guards between them checked; the image not
 *                  pinned whole
 *   process_lanes_exhausted  the DMA process out of lanes: the refused
 *                  queue set copies in this process and says why, every
 *                  byte and guard of tier2_image_staged's reads compared,
 *                  then the same once the lanes are back (in the process)
 *   strided_segments  strided segments (gpu.h) through the scattered read
 *                  into two buffers, from a RAM namespace and an image
 *                  file, on queues of 64 and 4 entries, every byte of both
 *                  buffers; bad geometries refused
 *   devmem_engine  the emu: bus's device-memory DMA engine (src/emu_cuda)
 *                  is linked into a program of the GPU data path and reached
 *                  through the controller's generic hooks (ctrl_gpu.h)
 * Exits 77 without a GPU.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpunvme/device.cuh"
#include "ctrl/ctrl_emu.h" /* the emulator behind the controller */
#include "ctrl/ctrl_gpu.h" /* the bus's device-memory DMA engine */
#include "gpunvme/emu.h"
#include "gpunvme/gpu.h"
#include "gpunvme/gpunvme.h"

#include "../harness/check.h"
#include "../harness/emu_faults.h"

static const uint64_t SEC = 1000000000ull;

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

struct range {
	uint64_t slba, nlb, off;
};

/* Thread i does range i on queue i % nq. */
__global__ void k_ranges(struct gpunvme_dev_queues q, struct gpunvme_dev_buf b, const struct range *r, int n,
			 uint8_t opc, int *st, uint64_t tmo)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	st[i] = gpunvme_dev_rw(&q, (uint32_t)(i % q.nq), opc, r[i].slba, r[i].nlb, &b, r[i].off, tmo);
}

/* Each warp reads one range cooperatively. */
__global__ void k_warp(struct gpunvme_dev_queues q, struct gpunvme_dev_buf b, const struct range *r, int n, int *st,
		       uint64_t tmo)
{
	int w = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
	if (w >= n)
		return;
	int rc = gpunvme_dev_rw_warp(&q, (uint32_t)(w % q.nq), GPUNVME_CMD_READ, r[w].slba, r[w].nlb, &b, r[w].off, tmo);
	if ((threadIdx.x & 31) == 0)
		st[w] = rc;
}

/* Warp batches: lane l of warp w reads block perm(w * 32 + l) into its slot;
 * every 7th lane sits the round out (inactive lanes must be fine). */
__global__ void k_lanes(struct gpunvme_dev_queues q, struct gpunvme_dev_buf b, int n, int rounds, int *st, uint64_t tmo)
{
	int t = blockIdx.x * blockDim.x + threadIdx.x;
	int w = t / 32;
	for (int r = 0; r < rounds; r++) {
		int i = (w * rounds + r) * 32 + (t & 31);
		bool active = i < n && (i % 7) != 3;
		uint64_t p = ((uint64_t)i * 40503u) % (uint64_t)n;
		int rc = gpunvme_dev_rw_lanes(&q, (uint32_t)(w % q.nq), GPUNVME_CMD_READ, p, 1, &b, p * 4096, active, tmo);
		if (active && rc)
			atomicCAS(st, 0, rc);
	}
}

static struct gpunvme_ctrl *open_emu(const char *uri)
{
	struct gpunvme_ctrl *c = NULL;
	struct gpunvme_opts o;
	gpunvme_opts_init(&o);
	o.nr_io_queues = 32;
	if (gpunvme_open(uri, &o, &c))
		fprintf(stderr, "open %s: %s\n", uri, gpunvme_last_error());
	return c;
}

static int run_ranges(struct gpunvme_gpu_queues *g, struct gpunvme_gpu_buf *b, const struct range *hr, int n,
		      uint8_t opc, uint64_t tmo)
{
	struct range *dr;
	int *dst;
	REQUIRE_CUDA(cudaMalloc(&dr, n * sizeof(*dr)));
	REQUIRE_CUDA(cudaMallocManaged(&dst, n * sizeof(int)));
	REQUIRE_CUDA(cudaMemcpy(dr, hr, n * sizeof(*dr), cudaMemcpyHostToDevice));
	k_ranges<<<(n + 127) / 128, 128>>>(*gpunvme_gpu_queues_desc(g), *gpunvme_gpu_buf_desc(b), dr, n, opc, dst, tmo);
	REQUIRE_CUDA(cudaGetLastError());
	REQUIRE_CUDA(cudaDeviceSynchronize());
	for (int i = 0; i < n; i++)
		if (dst[i])
			FAIL("range %d (slba %llu nlb %llu): status %d", i, (unsigned long long)hr[i].slba,
			     (unsigned long long)hr[i].nlb, dst[i]);
	cudaFree(dr);
	cudaFree(dst);
	return 0;
}

TEST_CASE(random_rw)
{
	struct gpunvme_ctrl *c = open_emu("emu:ram:256M?lbads=12&mdts=6&workers=4");
	if (!c)
		return 1;
	for (int nq = 1; nq <= 8; nq *= 8) {
		struct gpunvme_gpu_queues *g;
		REQUIRE_OK(gpunvme_gpu_queues_create(c, 1, (uint32_t)nq, 256, &g));
		const int n = 256;
		size_t len = 96u << 20;
		uint8_t *w = (uint8_t *)gpunvme_dma_alloc(c, len), *r = (uint8_t *)gpunvme_dma_alloc(c, len);
		struct gpunvme_gpu_buf *bw, *br;
		REQUIRE_OK(gpunvme_gpu_buf_host(g, w, len, &bw, NULL));
		REQUIRE_OK(gpunvme_gpu_buf_host(g, r, len, &br, NULL));
		fill(w, len, (uint64_t)nq);
		memset(r, 0, len);
		/* disjoint random ranges: slot i owns blocks [i*96, i*96+96) on
		 * disk and the same span of the buffer, at a random 4-byte
		 * aligned start within its first block */
		struct range hr[n];
		srand(7 + nq);
		for (int i = 0; i < n; i++) {
			uint64_t nlb = 1 + (uint64_t)(rand() % ((i % 8) == 0 ? 90 : 8)); /* 4 KiB .. 360 KiB */
			/* a spare block after the range absorbs the sub-block buffer shift */
			uint64_t start = (uint64_t)(rand() % (int)(96 - nlb));
			hr[i].slba = (uint64_t)i * 96 + start;
			hr[i].nlb = nlb;
			hr[i].off = ((uint64_t)i * 96 + start) * 4096 + (uint64_t)(rand() % 1024) * 4;
			if (hr[i].off + nlb * 4096 > len)
				hr[i].off = (uint64_t)i * 96 * 4096;
		}
		if (run_ranges(g, bw, hr, n, GPUNVME_CMD_WRITE, 10 * SEC) ||
		    run_ranges(g, br, hr, n, GPUNVME_CMD_READ, 10 * SEC))
			return 1;
		for (int i = 0; i < n; i++)
			if (memcmp(w + hr[i].off, r + hr[i].off, hr[i].nlb * 4096))
				FAIL("nq %d range %d: data mismatch", nq, i);
		/* and the CPU path reads what the GPU wrote */
		struct gpunvme_qpair *qp;
		REQUIRE_OK(gpunvme_qpair_create(c, 32, &qp));
		uint8_t *x = (uint8_t *)gpunvme_dma_alloc(c, 96 * 4096);
		REQUIRE_OK(gpunvme_read_sync(qp, 1, x, hr[5].slba, hr[5].nlb, NULL));
		if (memcmp(x, w + hr[5].off, hr[5].nlb * 4096))
			FAIL("CPU read of GPU-written data differs");
		gpunvme_qpair_destroy(qp);
		gpunvme_gpu_buf_free(bw);
		gpunvme_gpu_buf_free(br);
		gpunvme_gpu_queues_destroy(g);
		gpunvme_dma_free(c, w);
		gpunvme_dma_free(c, r);
		gpunvme_dma_free(c, x);
		printf("random_rw: %d threads x random 4 KiB..360 KiB writes+reads on %d queue(s): ok\n", n, nq);
	}
	gpunvme_close(c);
	return 0;
}

TEST_CASE(many_threads)
{
	struct gpunvme_ctrl *c = open_emu("emu:ram:512M?lbads=12&workers=4");
	if (!c)
		return 1;
	const int n = 65536;
	size_t len = (size_t)n * 4096;
	/* reference data through the CPU path */
	uint8_t *src = (uint8_t *)gpunvme_dma_alloc(c, len);
	fill(src, len, 42);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 64, &qp));
	REQUIRE_OK(gpunvme_write_sync(qp, 1, src, 0, (uint64_t)n, NULL));
	gpunvme_qpair_destroy(qp);
	struct gpunvme_gpu_queues *g;
	REQUIRE_OK(gpunvme_gpu_queues_create(c, 1, 16, 1024, &g));
	uint8_t *dst = (uint8_t *)gpunvme_dma_alloc(c, len);
	struct gpunvme_gpu_buf *b;
	REQUIRE_OK(gpunvme_gpu_buf_host(g, dst, len, &b, NULL));
	struct range *hr = (struct range *)malloc(n * sizeof(*hr));
	for (int i = 0; i < n; i++) {
		/* a permutation: thread i reads block p(i) into slot p(i) */
		uint64_t p = ((uint64_t)i * 40503u) % (uint64_t)n;
		hr[i].slba = p;
		hr[i].nlb = 1;
		hr[i].off = p * 4096;
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (run_ranges(g, b, hr, n, GPUNVME_CMD_READ, 30 * SEC))
		return 1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (memcmp(src, dst, len))
		FAIL("65536-thread read: data mismatch");
	double s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
	printf("many_threads: 65536 threads, one 4 KiB read each, 16 queues x 1024: ok (%.3f s, %.0f IOPS incl. launch)\n",
	       s, n / s);
	free(hr);
	gpunvme_gpu_buf_free(b);
	gpunvme_gpu_queues_destroy(g);
	gpunvme_close(c);
	return 0;
}

TEST_CASE(lanes)
{
	struct gpunvme_ctrl *c = open_emu("emu:ram:256M?lbads=12&workers=4");
	if (!c)
		return 1;
	const int n = 32768;
	size_t len = (size_t)n * 4096;
	uint8_t *src = (uint8_t *)gpunvme_dma_alloc(c, len);
	fill(src, len, 77);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 64, &qp));
	REQUIRE_OK(gpunvme_write_sync(qp, 1, src, 0, (uint64_t)n, NULL));
	gpunvme_qpair_destroy(qp);
	struct gpunvme_gpu_queues *g;
	REQUIRE_OK(gpunvme_gpu_queues_create(c, 1, 8, 256, &g));
	uint8_t *dst = (uint8_t *)gpunvme_dma_alloc(c, len);
	memset(dst, 0, len);
	struct gpunvme_gpu_buf *b;
	REQUIRE_OK(gpunvme_gpu_buf_host(g, dst, len, &b, NULL));
	int *st;
	REQUIRE_CUDA(cudaMallocManaged(&st, sizeof(int)));
	*st = 0;
	const int rounds = 4;
	int warps = (n + 32 * rounds - 1) / (32 * rounds);
	k_lanes<<<(warps * 32 + 127) / 128, 128>>>(*gpunvme_gpu_queues_desc(g), *gpunvme_gpu_buf_desc(b), n, rounds, st,
						   10 * SEC);
	REQUIRE_CUDA(cudaDeviceSynchronize());
	if (*st)
		FAIL("lanes: status %d", *st);
	for (int i = 0; i < n; i++) {
		uint64_t p = ((uint64_t)i * 40503u) % (uint64_t)n;
		int active = (i % 7) != 3;
		for (int k = 0; k < 4096; k += 512) {
			uint8_t want = active ? src[p * 4096 + k] : 0;
			if (dst[p * 4096 + k] != want)
				FAIL("lanes: block %llu byte %d", (unsigned long long)p, k);
		}
	}
	printf("lanes: %d warp-batched reads (1 in 7 lanes idle) over 8 queues: ok\n", n);
	cudaFree(st);
	gpunvme_gpu_buf_free(b);
	gpunvme_gpu_queues_destroy(g);
	gpunvme_close(c);
	return 0;
}

TEST_CASE(tier2)
{
	struct gpunvme_ctrl *c = open_emu("emu:ram:128M?mdts=5&workers=2");
	if (!c)
		return 1;
	size_t len = 48u << 20;
	uint8_t *src = (uint8_t *)gpunvme_dma_alloc(c, len);
	fill(src, len, 9);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 64, &qp));
	REQUIRE_OK(gpunvme_write_sync(qp, 1, src, 0, len / 512, NULL));
	gpunvme_qpair_destroy(qp);
	struct gpunvme_gpu_queues *g;
	REQUIRE_OK(gpunvme_gpu_queues_create(c, 1, 4, 256, &g));
	struct gpunvme_gpu_buf *b;
	void *vram;
	REQUIRE_OK(gpunvme_gpu_buf_device(g, len, &b, &vram));
	/* warp-cooperative: 8 warps, 6 MiB each, odd-sized tails */
	struct range hr[8];
	for (int i = 0; i < 8; i++) {
		hr[i].slba = (uint64_t)i * 12288;
		hr[i].nlb = 12288 - (uint64_t)i * 7;
		hr[i].off = (uint64_t)i * 12288 * 512;
	}
	struct range *dr;
	int *dst;
	REQUIRE_CUDA(cudaMalloc(&dr, sizeof(hr)));
	REQUIRE_CUDA(cudaMallocManaged(&dst, 8 * sizeof(int)));
	REQUIRE_CUDA(cudaMemcpy(dr, hr, sizeof(hr), cudaMemcpyHostToDevice));
	REQUIRE_CUDA(cudaMemset(vram, 0, len));
	k_warp<<<2, 128>>>(*gpunvme_gpu_queues_desc(g), *gpunvme_gpu_buf_desc(b), dr, 8, dst, 10 * SEC);
	REQUIRE_CUDA(cudaDeviceSynchronize());
	uint8_t *back = (uint8_t *)malloc(len);
	REQUIRE_CUDA(cudaMemcpy(back, vram, len, cudaMemcpyDeviceToHost));
	for (int i = 0; i < 8; i++) {
		if (dst[i])
			FAIL("warp %d: status %d", i, dst[i]);
		if (memcmp(back + hr[i].off, src + hr[i].off, hr[i].nlb * 512))
			FAIL("warp %d: data mismatch in GPU memory", i);
	}
	printf("tier2: 8 warps read 6 MiB each into GPU memory (emulator copy engine): ok\n");
	/* the stream API */
	cudaStream_t s;
	REQUIRE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	REQUIRE_CUDA(cudaMemsetAsync(vram, 0, len, s));
	*dst = 0;
	REQUIRE_OK(gpunvme_gpu_read_async(g, 1, len / 512 - 2, b, 512, dst, s, 10 * SEC));
	REQUIRE_CUDA(cudaStreamSynchronize(s));
	if (*dst)
		FAIL("read_async: status %d", *dst);
	REQUIRE_CUDA(cudaMemcpy(back, vram, len, cudaMemcpyDeviceToHost));
	if (memcmp(back + 512, src + 512, len - 1024))
		FAIL("read_async: data mismatch");
	printf("tier2: gpunvme_gpu_read_async of %zu MiB on a stream: ok\n", len >> 20);
	cudaStreamDestroy(s);
	cudaFree(dr);
	cudaFree(dst);
	free(back);
	gpunvme_gpu_buf_free(b);
	gpunvme_gpu_queues_destroy(g);
	gpunvme_close(c);
	return 0;
}

/* GPU memory mapped page by page at scattered bus addresses, as the kmod:
 * bus maps a dma-buf (emulator option gpu_pages=1: a hole after every 4 KiB
 * page): the buffer's table has 4 KiB pieces (shift 12) and the GPU builds
 * every PRP and PRP list from it. */
TEST_CASE(tier2_pages4k)
{
	struct gpunvme_ctrl *c = open_emu("emu:ram:64M?mdts=9&workers=2&gpu_pages=1");
	if (!c)
		return 1;
	size_t len = 12u << 20;
	uint8_t *src = (uint8_t *)gpunvme_dma_alloc(c, len);
	fill(src, len, 11);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 64, &qp));
	REQUIRE_OK(gpunvme_write_sync(qp, 1, src, 0, len / 512, NULL));
	gpunvme_qpair_destroy(qp);
	struct gpunvme_gpu_queues *g;
	REQUIRE_OK(gpunvme_gpu_queues_create(c, 1, 4, 256, &g));
	struct gpunvme_gpu_buf *b;
	void *vram;
	REQUIRE_OK(gpunvme_gpu_buf_device(g, len, &b, &vram));
	REQUIRE_EQ(gpunvme_gpu_buf_desc(b)->shift, 12u);
	/* 8 warps, 1.5 MiB each minus odd tails: 2 MiB commands (MDTS 9) need
	 * a PRP list page each; tails end mid-page */
	struct range hr[8];
	for (int i = 0; i < 8; i++) {
		hr[i].slba = (uint64_t)i * 3072;
		hr[i].nlb = 3072 - (uint64_t)i * 5;
		hr[i].off = (uint64_t)i * 3072 * 512;
	}
	struct range *dr;
	int *dst;
	REQUIRE_CUDA(cudaMalloc(&dr, sizeof(hr)));
	REQUIRE_CUDA(cudaMallocManaged(&dst, 8 * sizeof(int)));
	REQUIRE_CUDA(cudaMemcpy(dr, hr, sizeof(hr), cudaMemcpyHostToDevice));
	REQUIRE_CUDA(cudaMemset(vram, 0, len));
	k_warp<<<2, 128>>>(*gpunvme_gpu_queues_desc(g), *gpunvme_gpu_buf_desc(b), dr, 8, dst, 20 * SEC);
	REQUIRE_CUDA(cudaDeviceSynchronize());
	uint8_t *back = (uint8_t *)malloc(len);
	REQUIRE_CUDA(cudaMemcpy(back, vram, len, cudaMemcpyDeviceToHost));
	for (int i = 0; i < 8; i++) {
		if (dst[i])
			FAIL("warp %d: status %d", i, dst[i]);
		if (memcmp(back + hr[i].off, src + hr[i].off, hr[i].nlb * 512))
			FAIL("warp %d: data mismatch in GPU memory", i);
	}
	/* the stream API, from an offset that is not page aligned */
	cudaStream_t s;
	REQUIRE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	REQUIRE_CUDA(cudaMemsetAsync(vram, 0, len, s));
	*dst = 0;
	REQUIRE_OK(gpunvme_gpu_read_async(g, 1, len / 512 - 2, b, 512, dst, s, 20 * SEC));
	REQUIRE_CUDA(cudaStreamSynchronize(s));
	if (*dst)
		FAIL("read_async: status %d", *dst);
	REQUIRE_CUDA(cudaMemcpy(back, vram, len, cudaMemcpyDeviceToHost));
	if (memcmp(back + 512, src + 512, len - 1024))
		FAIL("read_async: data mismatch");
	printf("tier2_pages4k: %zu MiB into GPU memory mapped per 4 KiB page (scattered bus addresses): ok\n", len >> 20);
	cudaStreamDestroy(s);
	cudaFree(dr);
	cudaFree(dst);
	free(back);
	gpunvme_gpu_buf_free(b);
	gpunvme_gpu_queues_destroy(g);
	gpunvme_close(c);
	return 0;
}

TEST_CASE(faults)
{
	struct gpunvme_ctrl *c = open_emu("emu:ram:64M?lbads=12&workers=1");
	if (!c)
		return 1;
	struct gpunvme_gpu_queues *g;
	REQUIRE_OK(gpunvme_gpu_queues_create(c, 1, 2, 64, &g));
	size_t len = 1u << 20;
	uint8_t *buf = (uint8_t *)gpunvme_dma_alloc(c, len);
	struct gpunvme_gpu_buf *b;
	REQUIRE_OK(gpunvme_gpu_buf_host(g, buf, len, &b, NULL));
	REQUIRE_OK(emu_fault_media(gpunvme_ctrl_emu(c), 1, 77, 1));
	struct range hr[64];
	for (int i = 0; i < 64; i++) {
		hr[i].slba = 64 + (uint64_t)i;
		hr[i].nlb = 1;
		hr[i].off = (uint64_t)i * 4096;
	}
	struct range *dr;
	int *dst;
	REQUIRE_CUDA(cudaMalloc(&dr, sizeof(hr)));
	REQUIRE_CUDA(cudaMallocManaged(&dst, 64 * sizeof(int)));
	REQUIRE_CUDA(cudaMemcpy(dr, hr, sizeof(hr), cudaMemcpyHostToDevice));
	k_ranges<<<1, 64>>>(*gpunvme_gpu_queues_desc(g), *gpunvme_gpu_buf_desc(b), dr, 64, GPUNVME_CMD_READ, dst, 5 * SEC);
	REQUIRE_CUDA(cudaDeviceSynchronize());
	for (int i = 0; i < 64; i++) {
		int want = i == 13 ? GPUNVME_SC_UNRECOVERED_READ : 0;
		if (dst[i] != want)
			FAIL("media: thread %d status %d, want %d", i, dst[i], want);
	}
	printf("faults: media error on LBA 77 seen by thread 13 as status 0x%x, the others succeed\n",
	       GPUNVME_SC_UNRECOVERED_READ);
	gpunvme_emu_clear_faults(gpunvme_ctrl_emu(c));
	REQUIRE_OK(emu_fault_drops(gpunvme_ctrl_emu(c), 1));
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	k_ranges<<<1, 8>>>(*gpunvme_gpu_queues_desc(g), *gpunvme_gpu_buf_desc(b), dr, 8, GPUNVME_CMD_READ, dst, SEC / 4);
	REQUIRE_CUDA(cudaDeviceSynchronize());
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
	int timeouts = 0;
	for (int i = 0; i < 8; i++)
		timeouts += dst[i] == GPUNVME_DEV_ETIMEDOUT || dst[i] == GPUNVME_DEV_EIO;
	if (timeouts < 1 || s > 3.0)
		FAIL("drop: %d threads reported the timeout, kernel took %.2f s", timeouts, s);
	printf("faults: dropped command -> %d thread(s) got a timeout status; kernel returned after %.2f s (limit 0.25 s "
	       "per wait)\n", timeouts, s);
	cudaFree(dr);
	cudaFree(dst);
	gpunvme_gpu_buf_free(b);
	gpunvme_gpu_queues_destroy(g);
	gpunvme_close(c);
	return 0;
}

/* hold the legacy stream for about `ns` (globaltimer) */
static __global__ void k_hold(uint64_t ns)
{
	uint64_t t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	while (t - t0 < ns);
}

/* Queues created while the GPU is busy (work on the legacy stream, as when
 * other processes' kernels time-share it): the zeroing of the queue state
 * must not land after the CQ words' seed. It did (a legacy-stream memset
 * against the seed on a non-blocking stream): the CQ words kept phase 0,
 * zeroed CQ entries read as completions of CID 0 with status 0, and the
 * first command, here a read of a media error, reported success. */
TEST_CASE(create_while_busy)
{
	struct gpunvme_ctrl *c = open_emu("emu:ram:16M?lbads=12&workers=1");
	if (!c)
		return 1;
	REQUIRE_OK(emu_fault_media(gpunvme_ctrl_emu(c), 1, 5, 1));
	k_hold<<<1, 1>>>(SEC / 4);
	REQUIRE_CUDA(cudaGetLastError());
	struct gpunvme_gpu_queues *g;
	REQUIRE_OK(gpunvme_gpu_queues_create(c, 1, 1, 16, &g));
	size_t len = 1u << 16;
	uint8_t *buf = (uint8_t *)gpunvme_dma_alloc(c, len);
	struct gpunvme_gpu_buf *b;
	REQUIRE(buf);
	REQUIRE_OK(gpunvme_gpu_buf_host(g, buf, len, &b, NULL));
	struct range hr[2] = { { 5, 1, 0 }, { 6, 1, 4096 } }, *dr;
	int *dst;
	REQUIRE_CUDA(cudaMalloc(&dr, sizeof(hr)));
	REQUIRE_CUDA(cudaMallocManaged(&dst, 2 * sizeof(int)));
	REQUIRE_CUDA(cudaMemcpy(dr, hr, sizeof(hr), cudaMemcpyHostToDevice));
	/* one thread: ticket 0 is the media error, ticket 1 a good read */
	k_ranges<<<1, 1>>>(*gpunvme_gpu_queues_desc(g), *gpunvme_gpu_buf_desc(b), dr, 1, GPUNVME_CMD_READ, dst, 5 * SEC);
	REQUIRE_CUDA(cudaDeviceSynchronize());
	if (dst[0] != GPUNVME_SC_UNRECOVERED_READ)
		FAIL("the first command on queues made while the GPU was busy: status %d, want %d (media error)", dst[0],
		     GPUNVME_SC_UNRECOVERED_READ);
	k_ranges<<<1, 1>>>(*gpunvme_gpu_queues_desc(g), *gpunvme_gpu_buf_desc(b), dr + 1, 1, GPUNVME_CMD_READ, dst, 5 * SEC);
	REQUIRE_CUDA(cudaDeviceSynchronize());
	REQUIRE_EQ(dst[0], 0);
	cudaFree(dr);
	cudaFree(dst);
	gpunvme_gpu_buf_free(b);
	gpunvme_gpu_queues_destroy(g);
	gpunvme_close(c);
	return 0;
}

/* One thread, one queue: more than 2^16 commands, so tickets wrap the
 * 16-bit CID. Every completion is found by its own waiter (nothing is
 * published), so before release marked the slot, ticket 65535 met a done
 * word still 0 and took it as its own completion: success, no read. Each
 * read's first bytes are checked against the namespace. */
static __global__ void k_many(struct gpunvme_dev_queues q, struct gpunvme_dev_buf b, uint32_t n, uint32_t nsblocks,
			      const uint8_t *buf, int *st, uint32_t *bad)
{
	for (uint32_t i = 0; i < n; i++) {
		uint64_t lba = (i * 2654435761u) % nsblocks;
		int rc = gpunvme_dev_read(&q, 0, lba, 1, &b, 0, 5 * SEC);
		if (rc) {
			*st = rc;
			*bad = i;
			return;
		}
		/* the namespace was filled with the LBA in every block's first
		 * 8 bytes (fill below) */
		if (*(const volatile uint64_t *)buf != lba + 1) {
			*st = -1;
			*bad = i;
			return;
		}
		*(volatile uint64_t *)buf = 0;
		__threadfence_system();
	}
}

TEST_CASE(cid_wrap)
{
	struct gpunvme_ctrl *c = open_emu("emu:ram:4M?lbads=12&workers=1");
	if (!c)
		return 1;
	size_t ns_len = 0;
	void *nsp = NULL;
	REQUIRE_OK(gpunvme_emu_ns_memory(gpunvme_ctrl_emu(c), 1, &nsp, &ns_len));
	uint8_t *ns = (uint8_t *)nsp;
	REQUIRE(ns_len >= 4096);
	uint32_t nsblocks = (uint32_t)(ns_len / 4096);
	for (uint32_t k = 0; k < nsblocks; k++) {
		uint64_t v = (uint64_t)k + 1;
		memcpy(ns + (size_t)k * 4096, &v, 8);
	}
	struct gpunvme_gpu_queues *g;
	REQUIRE_OK(gpunvme_gpu_queues_create(c, 1, 1, 4, &g));
	uint8_t *buf = (uint8_t *)gpunvme_dma_alloc(c, 1u << 16);
	REQUIRE(buf);
	memset(buf, 0, 4096);
	struct gpunvme_gpu_buf *b;
	void *dbuf = NULL;
	REQUIRE_OK(gpunvme_gpu_buf_host(g, buf, 1u << 16, &b, &dbuf));
	int *st;
	uint32_t *bad;
	REQUIRE_CUDA(cudaMallocManaged(&st, sizeof(int)));
	REQUIRE_CUDA(cudaMallocManaged(&bad, sizeof(uint32_t)));
	*st = 0;
	*bad = 0;
	const uint32_t n = 65536 + 300;
	k_many<<<1, 1>>>(*gpunvme_gpu_queues_desc(g), *gpunvme_gpu_buf_desc(b), n, nsblocks, (const uint8_t *)dbuf, st, bad);
	REQUIRE_CUDA(cudaDeviceSynchronize());
	if (*st)
		FAIL("read %u of %u: %s (%d)", *bad, n, *st == -1 ? "success without the data" : "failed", *st);
	printf("cid_wrap: %u reads on one queue of depth 4, every one's data checked\n", n);
	cudaFree(st);
	cudaFree(bad);
	gpunvme_gpu_buf_free(b);
	gpunvme_gpu_queues_destroy(g);
	gpunvme_close(c);
	return 0;
}

TEST_CASE(relaunch)
{
	struct gpunvme_ctrl *c = open_emu("emu:ram:64M?lbads=12&workers=2");
	if (!c)
		return 1;
	size_t len = 8u << 20;
	uint8_t *src = (uint8_t *)gpunvme_dma_alloc(c, len), *dst = (uint8_t *)gpunvme_dma_alloc(c, len);
	fill(src, len, 3);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 64, &qp));
	REQUIRE_OK(gpunvme_write_sync(qp, 1, src, 0, len / 4096, NULL));
	gpunvme_qpair_destroy(qp);
	struct gpunvme_gpu_queues *g;
	REQUIRE_OK(gpunvme_gpu_queues_create(c, 1, 4, 64, &g));
	struct gpunvme_gpu_buf *b;
	REQUIRE_OK(gpunvme_gpu_buf_host(g, dst, len, &b, NULL));
	struct range hr[256];
	for (int i = 0; i < 256; i++) {
		hr[i].slba = (uint64_t)i * 8;
		hr[i].nlb = 8;
		hr[i].off = (uint64_t)i * 8 * 4096;
	}
	for (int it = 0; it < 200; it++) {
		memset(dst, 0, len);
		if (run_ranges(g, b, hr, 256, GPUNVME_CMD_READ, 10 * SEC))
			FAIL("launch %d", it);
		if (memcmp(src, dst, len))
			FAIL("launch %d: mismatch", it);
	}
	printf("relaunch: 200 launches x 256 threads on the same 4 queues: ok\n");
	gpunvme_gpu_buf_free(b);
	gpunvme_gpu_queues_destroy(g);
	gpunvme_close(c);
	return 0;
}

/* ---- recovery ---------------------------------------------------------------- */

/* One launch of k_ranges; statuses into st (managed), no judgement. */
static int launch_ranges(struct gpunvme_gpu_queues *g, struct gpunvme_gpu_buf *b, const struct range *dr, int n,
			 uint8_t opc, int *st, uint64_t tmo)
{
	memset(st, 0, n * sizeof(int));
	k_ranges<<<(n + 63) / 64, 64>>>(*gpunvme_gpu_queues_desc(g), *gpunvme_gpu_buf_desc(b), dr, n, opc, st, tmo);
	REQUIRE_CUDA(cudaGetLastError());
	REQUIRE_CUDA(cudaDeviceSynchronize());
	return 0;
}

/* Read buffer contents (Tier 1: the host mapping; Tier 2: copied back). */
static void buf_get(uint8_t *out, const uint8_t *host, void *vram, size_t len)
{
	if (vram)
		cudaMemcpy(out, vram, len, cudaMemcpyDeviceToHost);
	else
		memcpy(out, host, len);
}

static void buf_set(uint8_t *host, void *vram, int v, size_t len)
{
	if (vram) {
		cudaMemset(vram, v, len);
		cudaDeviceSynchronize(); /* before reads on other streams */
	} else {
		memset(host, v, len);
	}
}

enum { R_DROP, R_SLOW, R_CFS, R_REMOVE, R_NKINDS };
static const char *const r_name[] = { "drop", "slow", "cfs", "remove+return" };

/* One fault kind: fault, launch (some commands fail, none succeeds with
 * wrong data), check says recover, recover, poison every buffer, wait past
 * any late completion, poison intact, relaunch on the same descriptor:
 * every range right. */
static int recover_case(struct gpunvme_ctrl *c, struct gpunvme_gpu_queues *g, struct gpunvme_gpu_buf *b,
			uint8_t *host, void *vram, const uint8_t *ref, size_t len, struct range *dr,
			const struct range *hr, int n, int kind)
{
	struct gpunvme_emu *emu = gpunvme_ctrl_emu(c);
	uint8_t *back = (uint8_t *)malloc(len);
	int *st;
	REQUIRE_CUDA(cudaMallocManaged(&st, n * sizeof(int)));
	struct gpunvme_emu_fault f;
	memset(&f, 0, sizeof(f));
	f.kind = kind == R_DROP ? GPUNVME_EMU_FAULT_DROP : kind == R_SLOW ? GPUNVME_EMU_FAULT_SLOW
			 : kind == R_CFS ? GPUNVME_EMU_FAULT_CFS : GPUNVME_EMU_FAULT_REMOVE;
	f.sqid = GPUNVME_EMU_SQID_ANY;
	f.count = 3;
	f.latency_us = 400000; /* 0.4 s against a 0.1 s timeout */
	buf_set(host, vram, 0, len);
	REQUIRE_OK(gpunvme_emu_inject(emu, &f));
	if (launch_ranges(g, b, dr, n, GPUNVME_CMD_READ, st, SEC / 10))
		return 1;
	int failed = 0;
	buf_get(back, host, vram, len);
	for (int i = 0; i < n; i++) {
		if (st[i] == 0) {
			if (memcmp(back + hr[i].off, ref + hr[i].slba * 4096, hr[i].nlb * 4096))
				FAIL("%s: range %d reported success with wrong data", r_name[kind], i);
			continue;
		}
		failed++;
		if (st[i] != GPUNVME_DEV_ETIMEDOUT && st[i] != GPUNVME_DEV_EIO && st[i] != GPUNVME_DEV_ENODEV)
			FAIL("%s: range %d: unexpected status %d (%s)", r_name[kind], i, st[i], gpunvme_gpu_status_str(st[i]));
	}
	if (!failed)
		FAIL("%s: no command failed", r_name[kind]);
	struct gpunvme_gpu_health h;
	int crc = gpunvme_gpu_queues_check(g, &h);
	if (kind == R_REMOVE) {
		if (crc != -ENODEV)
			FAIL("remove: check returned %d, want -ENODEV", crc);
		struct gpunvme_gpu_recovery r0;
		if (gpunvme_gpu_queues_recover(g, 0, &r0) != -ENODEV)
			FAIL("remove: recover of a removed device must say -ENODEV");
		f.kind = GPUNVME_EMU_FAULT_RETURN;
		REQUIRE_OK(gpunvme_emu_inject(emu, &f));
	} else if (crc != -EIO) {
		FAIL("%s: check returned %d (broken %u stuck %u csts 0x%x), want -EIO", r_name[kind], crc, h.broken,
		     h.stuck, h.csts);
	}
	struct gpunvme_gpu_recovery r;
	if (gpunvme_gpu_queues_recover(g, 0, &r))
		FAIL("%s: recover: %s", r_name[kind], gpunvme_last_error());
	gpunvme_emu_clear_faults(emu);
	const bool want_reset = kind == R_CFS || kind == R_REMOVE;
	if (r.reset != want_reset)
		FAIL("%s: reset %d, want %d", r_name[kind], r.reset, want_reset);
	if (kind == R_DROP && r.aborted < 1)
		FAIL("drop: %u of %u aborts honoured, want at least one (the dropped commands)", r.aborted, r.abort_sent);
	/* after recovery nothing of the old commands may land */
	buf_set(host, vram, 0xa5, len);
	struct timespec ts = { 0, 500000000 }; /* past the slow fault's 0.4 s */
	nanosleep(&ts, NULL);
	buf_get(back, host, vram, len);
	for (size_t k = 0; k < len; k++)
		if (back[k] != 0xa5)
			FAIL("%s: buffer byte %zu changed after the recovery", r_name[kind], k);
	if (gpunvme_gpu_queues_check(g, &h))
		FAIL("%s: check after recovery: %s", r_name[kind], gpunvme_last_error());
	if (launch_ranges(g, b, dr, n, GPUNVME_CMD_READ, st, 10 * SEC))
		return 1;
	buf_get(back, host, vram, len);
	for (int i = 0; i < n; i++) {
		if (st[i])
			FAIL("%s: after recovery range %d: %s", r_name[kind], i, gpunvme_gpu_status_str(st[i]));
		if (memcmp(back + hr[i].off, ref + hr[i].slba * 4096, hr[i].nlb * 4096))
			FAIL("%s: after recovery range %d: wrong data", r_name[kind], i);
		/* the rest of the range's 16 KiB slot still holds the poison */
		for (uint64_t k = hr[i].off + hr[i].nlb * 4096; k < hr[i].off + 4 * 4096; k++)
			if (back[k] != 0xa5)
				FAIL("%s: after recovery range %d: byte %llu past its end was written", r_name[kind], i,
				     (unsigned long long)k);
	}
	printf("recover %s (%s): %d of %d commands failed, none succeeded wrongly; %u stuck, %u/%u aborted, "
	       "reset %s, %.1f ms; buffers untouched afterwards; relaunch on the same descriptor: ok\n",
	       r_name[kind], vram ? "tier 2" : "tier 1", failed, n, r.stuck, r.aborted, r.abort_sent,
	       r.reset ? "yes" : "no", r.ns / 1e6);
	cudaFree(st);
	free(back);
	return 0;
}

TEST_CASE(recover)
{
	struct gpunvme_ctrl *c = open_emu("emu:ram:64M?lbads=12&workers=2");
	if (!c)
		return 1;
	const int n = 64;
	const size_t len = (size_t)n * 4 * 4096;
	uint8_t *ref = (uint8_t *)malloc(16u << 20);
	fill(ref, 16u << 20, 19);
	/* a CPU queue pair: it must keep working across every recovery */
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 64, &qp));
	uint8_t *io = (uint8_t *)gpunvme_dma_alloc(c, 16u << 20);
	memcpy(io, ref, 16u << 20);
	REQUIRE_OK(gpunvme_write_sync(qp, 1, io, 0, (16u << 20) / 4096, NULL));
	struct gpunvme_gpu_queues *g;
	REQUIRE_OK(gpunvme_gpu_queues_create(c, 1, 4, 32, &g));
	struct range hr[64];
	for (int i = 0; i < n; i++) {
		hr[i].slba = (uint64_t)((i * 37) % 1000) * 4;
		hr[i].nlb = 1 + i % 4;
		hr[i].off = (uint64_t)i * 4 * 4096;
	}
	struct range *dr;
	REQUIRE_CUDA(cudaMalloc(&dr, sizeof(hr)));
	REQUIRE_CUDA(cudaMemcpy(dr, hr, sizeof(hr), cudaMemcpyHostToDevice));
	uint8_t *host = (uint8_t *)gpunvme_dma_alloc(c, len);
	struct gpunvme_gpu_buf *b1, *b2;
	void *vram = NULL;
	REQUIRE_OK(gpunvme_gpu_buf_host(g, host, len, &b1, NULL));
	REQUIRE_OK(gpunvme_gpu_buf_device(g, len, &b2, &vram));
	for (int kind = 0; kind < R_NKINDS; kind++) {
		if (recover_case(c, g, b1, host, NULL, ref, len, dr, hr, n, kind) ||
		    recover_case(c, g, b2, NULL, vram, ref, len, dr, hr, n, kind))
			return 1;
		/* the CPU queue pair after this recovery */
		memset(io, 0, 1u << 20);
		REQUIRE_OK(gpunvme_read_sync(qp, 1, io, 0, (1u << 20) / 4096, NULL));
		if (memcmp(io, ref, 1u << 20))
			FAIL("%s: CPU queue pair reads wrong data after the recovery", r_name[kind]);
	}
	printf("recover: CPU queue pair fine after every recovery\n");
	gpunvme_gpu_buf_free(b1);
	gpunvme_gpu_buf_free(b2);
	gpunvme_gpu_queues_destroy(g);
	gpunvme_qpair_destroy(qp);
	cudaFree(dr);
	free(ref);
	gpunvme_close(c);
	return 0;
}

/* 96 reads of 1 block to 3 MiB from an image of flen bytes (src) on one
 * queue of depth 4 (3 commands in flight), each into its own range of GPU
 * memory between 8 KiB guards; every byte of each range and guard checked.
 * The queue set is made and freed here: its copy lanes with it. */
static int staged_reads(struct gpunvme_ctrl *c, const uint8_t *src, size_t flen, const char *what)
{
	enum { N = 96 };
	static const uint64_t sizes[] = { 1, 7, 1000, 2048, 2049, 6144 }; /* blocks of 512 B */
	const uint64_t GUARD = 8192, nblocks = flen / 512;
	struct range hr[N];
	uint64_t off = GUARD, rng = 0x5eed;
	for (int i = 0; i < N; i++) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		hr[i].nlb = sizes[i % 6];
		hr[i].slba = (rng >> 20) % (nblocks - hr[i].nlb + 1);
		hr[i].off = off;
		off += (hr[i].nlb * 512 + 4095) / 4096 * 4096 + GUARD;
	}
	const size_t len = off;
	struct gpunvme_gpu_queues *g;
	REQUIRE_OK(gpunvme_gpu_queues_create(c, 1, 1, 4, &g)); /* depth 4: 3 commands in flight */
	struct gpunvme_gpu_buf *b;
	void *vram;
	REQUIRE_OK(gpunvme_gpu_buf_device(g, len, &b, &vram));
	REQUIRE_CUDA(cudaMemset(vram, 0xA5, len));
	REQUIRE_CUDA(cudaDeviceSynchronize());
	int rc = run_ranges(g, b, hr, N, GPUNVME_CMD_READ, 10 * SEC);
	uint8_t *back = (uint8_t *)malloc(len);
	REQUIRE(back);
	REQUIRE_CUDA(cudaMemcpy(back, vram, len, cudaMemcpyDeviceToHost));
	uint64_t end = 0;
	for (int i = 0; i < N && !rc; i++) {
		for (uint64_t k = end; k < hr[i].off; k++)
			if (back[k] != 0xA5)
				FAIL("%s: byte %llu before range %d changed: 0x%02x", what, (unsigned long long)k, i, back[k]);
		if (memcmp(back + hr[i].off, src + hr[i].slba * 512, hr[i].nlb * 512))
			FAIL("%s: range %d (slba %llu, %llu blocks): data mismatch", what, i,
			     (unsigned long long)hr[i].slba, (unsigned long long)hr[i].nlb);
		end = hr[i].off + hr[i].nlb * 512;
	}
	for (uint64_t k = end; k < len && !rc; k++)
		if (back[k] != 0xA5)
			FAIL("%s: byte %llu after the last range changed: 0x%02x", what, (unsigned long long)k, back[k]);
	printf("%s: %d reads (%.1f MiB) from an image through 3 queue slots, every byte and guard: %s\n", what, N,
	       (double)len / 1048576, rc ? "FAILED" : "ok");
	free(back);
	gpunvme_gpu_buf_free(b);
	gpunvme_gpu_queues_destroy(g);
	return rc;
}

/* an image file of flen bytes of fill(seed) at a new path; *src gets them */
static int make_image(char *path, size_t flen, uint64_t seed, uint8_t **src)
{
	int fd = mkstemp(path);
	REQUIRE(fd >= 0);
	*src = (uint8_t *)malloc(flen);
	REQUIRE(*src);
	fill(*src, flen, seed);
	REQUIRE(pwrite(fd, *src, flen, 0) == (ssize_t)flen);
	close(fd);
	return 0;
}

/* Tier 2 from an image file: the emulator's copies go through its lanes'
 * pinned staging rings (src/emu_cuda/copy_engine.cu), which wrap many times
 * here, with commands larger than a chunk, many more requests than queue
 * slots, each into its own range between guards. */
TEST_CASE(tier2_image_staged)
{
	char path[] = "/tmp/gpunvme-staged.XXXXXX";
	const size_t flen = 32u << 20;
	uint8_t *src = NULL;
	REQUIRE_OK(make_image(path, flen, 21, &src));
	char uri[128];
	snprintf(uri, sizeof(uri), "emu:%s?mdts=8&workers=2", path);
	struct gpunvme_ctrl *c = open_emu(uri);
	unlink(path); /* the mapping keeps the data */
	REQUIRE(c);
	/* an image file is not pinned whole: its reads are staged */
	void *pin = NULL;
	void (*unpin)(void *) = NULL;
	gpunvme_ctrl_devmem_pin(c, 1, &pin, &unpin);
	CHECK(pin == NULL, "the image file's mapping was pinned (%p)", pin);
	int rc = staged_reads(c, src, flen, "tier2_image_staged");
	free(src);
	gpunvme_close(c);
	return rc;
}

/* What this process wrote to stderr since `from` (stderr goes to file fd
 * err_fd): a new string, or NULL. */
static char *stderr_since(int err_fd, off_t from)
{
	fflush(stderr);
	off_t end = lseek(err_fd, 0, SEEK_END);
	if (end < from)
		return NULL;
	char *t = (char *)calloc(1, (size_t)(end - from) + 1);
	if (t && pread(err_fd, t, (size_t)(end - from), from) != end - from) {
		free(t);
		return NULL;
	}
	return t;
}

/*
 * The DMA process out of lanes (emu_cuda/dma_proto.h, EDMA_LANES): a queue
 * set it cannot take copies in this process instead, says so under
 * GPUNVME_EMU_ERRORS=1, and its reads land whole; once the lanes are given
 * back, the next set goes to the process again. One emulator's set takes
 * every lane but two (253 workers and its admin lane), so the image's set
 * (2 workers + admin: 3) is refused. The hog's workers sleep 100 ms between
 * idle polls (idle_us), so they take no CPU from tests beside this one.
 */
TEST_CASE(process_lanes_exhausted)
{
	const char *m = getenv("GPUNVME_EMU_DMA");
	if (m && !strcmp(m, "inproc"))
		FAIL("GPUNVME_EMU_DMA=inproc keeps every copy here: this case needs the DMA process (unset it)");
	const enum gpunvme_emu_copies was = gpunvme_emu_copies();
	gpunvme_emu_set_copies(GPUNVME_EMU_COPIES_PROCESS);
	/* read at each queue set's attach; put back as it was at the end, so
	 * the cases after this one (all of them in one run) keep their own */
	const char *ee = getenv("GPUNVME_EMU_ERRORS");
	char *errs_was = ee ? strdup(ee) : NULL;
	setenv("GPUNVME_EMU_ERRORS", "1", 1);
	char epath[] = "/tmp/gpunvme-lanes-err.XXXXXX";
	const int efd = mkstemp(epath);
	REQUIRE(efd >= 0);
	unlink(epath);
	fflush(stderr);
	const int saved = dup(2);
	REQUIRE(saved >= 0 && dup2(efd, 2) == 2);
	char path[] = "/tmp/gpunvme-lanes.XXXXXX";
	const size_t flen = 32u << 20;
	uint8_t *src = NULL;
	int rc = make_image(path, flen, 33, &src);
	char uri[128];
	snprintf(uri, sizeof(uri), "emu:%s?mdts=8&workers=2", path);
	struct gpunvme_ctrl *c = rc ? NULL : open_emu(uri);
	unlink(path);
	struct gpunvme_ctrl *hog = c ? open_emu("emu:ram:1M?workers=253&idle_us=100000") : NULL;
	struct gpunvme_gpu_queues *hq = NULL;
	const char *said = "copies in this process";
	char *t = NULL;
	off_t mark = 0;
	if (!c || !hog) {
		rc = 1;
		printf("process_lanes_exhausted: could not open the emulators\n");
	} else if (gpunvme_gpu_queues_create(hog, 1, 1, 4, &hq)) {
		rc = 1;
		printf("process_lanes_exhausted: the hog's queue set: %s\n", gpunvme_last_error());
	} else if ((t = stderr_since(efd, 0)) && strstr(t, said)) {
		rc = 1; /* the process took none: the test would prove nothing */
		printf("process_lanes_exhausted: the hog's own set copies in this process:\n%s\n", t);
	} else {
		free(t);
		mark = lseek(efd, 0, SEEK_END);
		rc = staged_reads(c, src, flen, "refused by the DMA process, copies here");
		t = stderr_since(efd, mark);
		if (!rc && !(t && strstr(t, said) && strstr(t, "lanes"))) {
			rc = 1;
			printf("process_lanes_exhausted: the refused set did not say why it copies here:\n%s\n",
			       t ? t : "");
		}
		free(t);
		t = NULL;
		gpunvme_gpu_queues_destroy(hq); /* its lanes go back */
		hq = NULL;
		mark = lseek(efd, 0, SEEK_END);
		if (!rc)
			rc = staged_reads(c, src, flen, "lanes given back, copies in the DMA process");
		t = stderr_since(efd, mark);
		if (!rc && t && strstr(t, said)) {
			rc = 1;
			printf("process_lanes_exhausted: lanes given back, yet the set copies here:\n%s\n", t);
		}
	}
	free(t);
	if (hq)
		gpunvme_gpu_queues_destroy(hq);
	if (hog)
		gpunvme_close(hog);
	if (c)
		gpunvme_close(c);
	free(src);
	/* stderr back, with what it got, for the log */
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	char *all = stderr_since(efd, 0);
	if (all && *all)
		fprintf(stderr, "%s", all);
	free(all);
	close(efd);
	gpunvme_emu_set_copies(was);
	if (errs_was)
		setenv("GPUNVME_EMU_ERRORS", errs_was, 1);
	else
		unsetenv("GPUNVME_EMU_ERRORS");
	free(errs_was);
	return rc;
}

/*
 * Strided segments through the public scattered read (gpu.h,
 * gpunvme_gpu_read_segs_async): rows of a full command, of a few blocks, a
 * short last row, beside contiguous segments, into two buffers (segments
 * alternate between them), from a RAM namespace (pinned: the emulator's 2D
 * copies from its memory) and from an image file (staged: the ring's 2D
 * runs), on queues of 64 entries and of 4 (3 free slots: a 32-row segment
 * goes in batches of 3). Every byte of both buffers is checked: the rows,
 * and every byte between and around them left as it was. Then each bad
 * geometry (a row over MDTS, rows that overlap, pitch 0) fails with
 * GPUNVME_DEV_EINVAL and writes nothing.
 */
static int strided_on(struct gpunvme_ctrl *c, const uint8_t *src, size_t flen, const char *what, uint32_t depth)
{
	struct gpunvme_gpu_queues *g;
	REQUIRE_OK(gpunvme_gpu_queues_create(c, 1, 4, depth, &g));
	const uint32_t mb = gpunvme_gpu_queues_desc(g)->max_blocks;
	const size_t len = 16u << 20;
	struct gpunvme_gpu_buf *b[2];
	void *vram[2];
	for (int j = 0; j < 2; j++) {
		REQUIRE_OK(gpunvme_gpu_buf_device(g, len, &b[j], &vram[j]));
		REQUIRE_CUDA(cudaMemset(vram[j], 0xA5, len));
	}
	enum { NS = 8 };
	struct gpunvme_gpu_seg hs[NS] = {
		/* 20 rows of a whole command, pitch 3 rows + 4 KiB */
		{ 100, 8192, 20 * mb, 0, mb, 0, 3ull * mb * 512 + 4096 },
		/* 32 rows of 7 blocks, 8 KiB apart */
		{ 9000, 8192, 32 * 7, 1, 7, 0, 8192 },
		/* 5 rows and a short sixth (3 blocks) */
		{ 20000, 8u << 20, 5 * mb + 3, 0, mb, 0, 2ull * mb * 512 },
		/* contiguous */
		{ 30000, 1u << 20, 3 * mb + 1, 1, 0, 0, 0 },
		/* rows of one block, 1 MiB apart */
		{ 40000, 11u << 20, 4, 0, 1, 0, 1u << 20 },
		/* 32 whole-command rows, 2 rows apart */
		{ 41000, 2u << 20, 32 * mb, 1, mb, 0, 2ull * mb * 512 },
		/* contiguous, odd length */
		{ 52000, 15u << 20, 777, 0, 0, 0, 0 },
		/* 9 rows of 64 blocks */
		{ 60000, 12u << 20, 9 * 64, 1, 64, 0, 64 * 512 + 512 },
	};
	/* each buffer's segments never overlap (each byte has one writer, so
	 * what it ends as is known), and they lie in the file and the buffer */
	uint8_t *want[2], *back = (uint8_t *)malloc(len);
	want[0] = (uint8_t *)malloc(len);
	want[1] = (uint8_t *)malloc(len);
	REQUIRE(back && want[0] && want[1]);
	memset(want[0], 0xA5, len);
	memset(want[1], 0xA5, len);
	unsigned rows = 0;
	for (int i = 0; i < NS; i++) {
		const uint64_t row = hs[i].row ? hs[i].row : hs[i].nlb, pitch = hs[i].row ? hs[i].pitch : 0;
		REQUIRE((hs[i].slba + hs[i].nlb) * 512 <= flen);
		REQUIRE(hs[i].off + ((hs[i].nlb + row - 1) / row - 1) * pitch + row * 512 <= len);
		for (uint64_t k = 0; k * row < hs[i].nlb; k++, rows++) {
			const uint64_t n = hs[i].nlb - k * row < row ? hs[i].nlb - k * row : row;
			uint8_t *w = want[hs[i].buf] + hs[i].off + k * pitch;
			for (uint64_t x = 0; x < n * 512; x++)
				REQUIRE(w[x] == 0xA5); /* no byte written twice */
			memcpy(w, src + (hs[i].slba + k * row) * 512, n * 512);
		}
	}
	struct gpunvme_gpu_seg *ds;
	int *st;
	REQUIRE_CUDA(cudaMalloc(&ds, sizeof(hs)));
	REQUIRE_CUDA(cudaMallocManaged(&st, sizeof(int)));
	REQUIRE_CUDA(cudaMemcpy(ds, hs, sizeof(hs), cudaMemcpyHostToDevice));
	*st = 0;
	REQUIRE_CUDA(cudaDeviceSynchronize());
	REQUIRE_OK(gpunvme_gpu_read_segs_async(g, ds, NS, b[0], b[1], st, NULL, 10 * SEC));
	REQUIRE_CUDA(cudaDeviceSynchronize());
	if (*st)
		FAIL("%s, depth %u: status %d (%s)", what, depth, *st, gpunvme_gpu_status_str(*st));
	for (int j = 0; j < 2; j++) {
		REQUIRE_CUDA(cudaMemcpy(back, vram[j], len, cudaMemcpyDeviceToHost));
		for (size_t k = 0; k < len; k++)
			if (back[k] != want[j][k])
				FAIL("%s, depth %u: buffer %d byte %zu is 0x%02x, want 0x%02x (a row, or a byte "
				     "between or around rows)", what, depth, j, k, back[k], want[j][k]);
	}
	printf("strided_segments %s, depth %u: %d segments, %u rows (MDTS %u blocks) into 2 buffers, every byte "
	       "of 2 x 16 MiB: ok\n", what, depth, NS, rows, mb);
	/* bad geometries: refused before anything is sent */
	const struct gpunvme_gpu_seg bad[3] = {
		{ 100, 0, 4 * (mb + 1), 0, mb + 1, 0, 8ull * mb * 512 }, /* a row over MDTS */
		{ 100, 0, 4 * 8, 0, 8, 0, 8 * 512 - 512 },               /* rows overlap */
		{ 100, 0, 8, 0, 8, 0, 0 },                                /* pitch 0 */
	};
	for (int i = 0; i < 3; i++) {
		REQUIRE_CUDA(cudaMemcpy(ds, &bad[i], sizeof(bad[i]), cudaMemcpyHostToDevice));
		REQUIRE_CUDA(cudaMemset(vram[0], 0xA5, 1u << 20));
		*st = 0;
		REQUIRE_CUDA(cudaDeviceSynchronize());
		REQUIRE_OK(gpunvme_gpu_read_segs_async(g, ds, 1, b[0], NULL, st, NULL, 10 * SEC));
		REQUIRE_CUDA(cudaDeviceSynchronize());
		if (*st != GPUNVME_DEV_EINVAL)
			FAIL("%s: bad geometry %d: status %d, want GPUNVME_DEV_EINVAL", what, i, *st);
		REQUIRE_CUDA(cudaMemcpy(back, vram[0], 1u << 20, cudaMemcpyDeviceToHost));
		for (size_t k = 0; k < (1u << 20); k++)
			if (back[k] != 0xA5)
				FAIL("%s: bad geometry %d wrote byte %zu", what, i, k);
	}
	printf("strided_segments %s, depth %u: 3 bad geometries refused, nothing written: ok\n", what, depth);
	free(back);
	free(want[0]);
	free(want[1]);
	cudaFree(ds);
	cudaFree(st);
	gpunvme_gpu_buf_free(b[0]);
	gpunvme_gpu_buf_free(b[1]);
	gpunvme_gpu_queues_destroy(g);
	return 0;
}

/* both queue depths on one controller */
static int strided_depths(struct gpunvme_ctrl *c, const uint8_t *src, size_t flen, const char *what)
{
	int rc = strided_on(c, src, flen, what, 64);
	return rc ? rc : strided_on(c, src, flen, what, 4);
}

TEST_CASE(strided_segments)
{
	const size_t flen = 32u << 20;
	uint8_t *src = (uint8_t *)malloc(flen);
	REQUIRE(src);
	fill(src, flen, 33);
	/* a RAM namespace, written through the controller */
	struct gpunvme_ctrl *c = open_emu("emu:ram:32M?mdts=5&workers=2");
	REQUIRE(c);
	uint8_t *dma = (uint8_t *)gpunvme_dma_alloc(c, flen);
	REQUIRE(dma);
	memcpy(dma, src, flen);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 64, &qp));
	REQUIRE_OK(gpunvme_write_sync(qp, 1, dma, 0, flen / 512, NULL));
	gpunvme_qpair_destroy(qp);
	gpunvme_dma_free(c, dma);
	int rc = strided_depths(c, src, flen, "RAM namespace");
	gpunvme_close(c);
	/* an image file: staged */
	char path[] = "/tmp/gpunvme-strided.XXXXXX";
	int fd = mkstemp(path);
	REQUIRE(fd >= 0);
	REQUIRE(pwrite(fd, src, flen, 0) == (ssize_t)flen);
	close(fd);
	char uri[128];
	snprintf(uri, sizeof(uri), "emu:%s?mdts=5&workers=2", path);
	c = open_emu(uri);
	unlink(path);
	REQUIRE(c);
	if (!rc)
		rc = strided_depths(c, src, flen, "image file");
	gpunvme_close(c);
	free(src);
	return rc;
}

/* The seam between the GPU queues and the emulator's copy engine: the emu:
 * bus refers to the engine weakly and gpunvme_cuda pulls it in
 * (--undefined=gpunvme_emu_cuda_engine), so a program of the GPU data path
 * has it; attach, sync and detach through the controller, and the
 * namespace memory pinned (a null namespace has none). */
TEST_CASE(devmem_engine)
{
	struct gpunvme_ctrl *c = open_emu("emu:ram:16M?workers=2&ns=null:64M");
	if (!c)
		return 1;
	void *e = NULL;
	REQUIRE_OK(gpunvme_ctrl_devmem_attach(c, &e));
	if (!e)
		FAIL("no device-memory DMA engine on the emu: bus (the emulator's copy engine, src/emu_cuda, "
		     "was not linked in: --undefined=gpunvme_emu_cuda_engine)");
	CHECK_OK(gpunvme_ctrl_devmem_sync(c, e));
	void *p = NULL;
	void (*unpin)(void *) = NULL;
	void *nsmem = NULL;
	size_t nslen = 0;
	REQUIRE_OK(gpunvme_emu_ns_memory(gpunvme_ctrl_emu(c), 1, &nsmem, &nslen));
	gpunvme_ctrl_devmem_pin(c, 1, &p, &unpin);
	if (p != nsmem || !unpin)
		FAIL("namespace 1 not pinned (%p, namespace memory at %p)", p, nsmem);
	unpin(p);
	gpunvme_ctrl_devmem_pin(c, 2, &p, &unpin);
	if (p)
		FAIL("a null namespace has no memory to pin, got %p", p);
	gpunvme_ctrl_devmem_detach(c, e);
	/* a queue set attaches its own engine; Tier 2 data moves through it,
	 * and a recovery waits for its lanes first */
	struct gpunvme_gpu_queues *g;
	REQUIRE_OK(gpunvme_gpu_queues_create(c, 1, 2, 64, &g));
	struct gpunvme_gpu_buf *b;
	void *vram;
	REQUIRE_OK(gpunvme_gpu_buf_device(g, 1u << 20, &b, &vram));
	int *dst;
	cudaStream_t s;
	REQUIRE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	REQUIRE_CUDA(cudaMallocManaged(&dst, sizeof(int)));
	*dst = 0;
	REQUIRE_OK(gpunvme_gpu_read_async(g, 0, (1u << 20) / 512, b, 0, dst, s, 10 * SEC));
	REQUIRE_CUDA(cudaStreamSynchronize(s));
	CHECK_EQ(*dst, 0);
	CHECK_OK(gpunvme_gpu_queues_recover(g, 0, NULL));
	cudaStreamDestroy(s);
	cudaFree(dst);
	gpunvme_gpu_buf_free(b);
	gpunvme_gpu_queues_destroy(g);
	gpunvme_close(c);
	printf("devmem_engine: the emulator's copy engine attached, synced, pinned and detached: ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	int ndev = 0;
	bool gpu = cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0;
	return check_main_skip(argc, argv, gpu ? NULL : "no CUDA device");
}
