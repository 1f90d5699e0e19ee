/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A GPU drives the embedded emulator with no CPU in the I/O path: the host
 * only brings the controller up and creates one I/O queue pair (control
 * plane: tests/harness/emu_bringup.h, on the queue core's
 * gpunvme_admin_enable and struct gpunvme_ring); then GPU threads build
 * Read/Write SQEs in host-pinned queue memory, ring the SQ tail doorbell in
 * the emulator's BAR0 (pinned, mapped into the GPU), and poll the CQ. Covers Tier 1 (data in pinned host memory)
 * and the emulator's GPU-memory path (Tier 2: data moved by the copy
 * engine through gpunvme_emu_dma_map_gpu). Exits 77 without a GPU.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "emu_bringup.h"
#include "gpunvme/emu.h"
#include "gpunvme/spec/queue.h"

static const uint32_t QD = 64;
static const uint32_t BLK = 4096;

/* ---- device side ------------------------------------------------------------ */

__device__ static uint64_t gtime(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

struct devq {
	struct gpunvme_sqe *sq;
	struct gpunvme_cqe *cq;
	volatile uint32_t *sq_db, *cq_db;
};

/* One thread per command, QD threads: each claims slot = its lane, so one
 * batch fills the queue; thread 0 rings the doorbell once for the batch
 * (coalesced), then every thread polls its own completion by CID. */
__global__ void io_batch(struct devq q, uint8_t opc, uint64_t slba0, uint64_t iova0, uint32_t n,
			 uint32_t tail0, uint32_t head0, uint32_t phase0, uint16_t *status, uint64_t timeout_ns)
{
	uint32_t i = threadIdx.x;
	if (i < n) {
		struct gpunvme_sqe c;
		memset(&c, 0, sizeof(c));
		c.opc = opc;
		c.cid = (uint16_t)(0x100 + i);
		c.nsid = 1;
		c.rw.slba = slba0 + i;
		c.rw.nlb = 0;
		c.prp1 = iova0 + (uint64_t)i * BLK;
		q.sq[(tail0 + i) % QD] = c;
	}
	/* The SQEs must be visible to the controller (here: a host thread
	 * reading pinned memory) before it can see the new tail. */
	__threadfence_system();
	__syncthreads();
	if (i == 0)
		*q.sq_db = (tail0 + n) % QD;
	if (i >= n)
		return;
	/* completions arrive in any order: look for ours among the n new
	 * entries, bounded by the timeout; past the end of the queue the
	 * expected phase is inverted (§4.6) */
	uint64_t t0 = gtime();
	uint16_t found = 0xffff;
	while (found == 0xffff) {
		for (uint32_t k = 0; k < n; k++) {
			uint32_t slot = (head0 + k) % QD;
			uint32_t ph = phase0 ^ ((head0 + k) / QD);
			/* dword 3 (CID | status << 16) is written by the
			 * controller in one store: read it in one load */
			uint32_t dw3 = ((volatile uint32_t *)&q.cq[slot])[3];
			if (gpunvme_dw3_new(dw3, ph) && gpunvme_dw3_cid(dw3) == 0x100 + i) {
				found = gpunvme_dw3_status(dw3);
				break;
			}
		}
		if (gtime() - t0 > timeout_ns) {
			found = 0xfffe; /* timed out: reported, never a hang */
			break;
		}
	}
	status[i] = found;
	__syncthreads();
	__threadfence_system();
	if (i == 0)
		*q.cq_db = (head0 + n) % QD;
}

/* ---- host side -------------------------------------------------------------- */
/* Left out of nvcc's device pass, which parses host code too: the queue
 * core's ring (emu_bringup.h) does not exist there. */
#if !defined(__CUDA_ARCH__)

static const uint64_t IOVA = 0x2000000000ull;
static const size_t ARENA = 16u << 20; /* queues and Tier 1 data, pinned and mapped */
static const uint32_t ADMIN_QD = 32;

static void *bar_alloc(void *ctx, size_t len)
{
	(void)ctx;
	void *p = NULL;
	/* BAR0 in pinned memory mapped into the GPU: the emulator's stand-in
	 * for cudaHostRegisterIoMemory on a real controller's BAR */
	if (cudaHostAlloc(&p, len, cudaHostAllocMapped) != cudaSuccess)
		return NULL;
	memset(p, 0, len);
	return p;
}

static void bar_free(void *ctx, void *p, size_t len)
{
	(void)ctx;
	(void)len;
	cudaFreeHost(p);
}

/* GPU-memory DMA for the emulator: one stream per emulator lane. */
struct gpu_dma {
	cudaStream_t s[64];
};

static int gpu_copy(void *ctx, unsigned lane, uint64_t dev, void *host, size_t len, int to_gpu)
{
	struct gpu_dma *g = (struct gpu_dma *)ctx;
	cudaError_t e = to_gpu ? cudaMemcpyAsync((void *)dev, host, len, cudaMemcpyHostToDevice, g->s[lane])
			       : cudaMemcpyAsync(host, (void *)dev, len, cudaMemcpyDeviceToHost, g->s[lane]);
	return e == cudaSuccess ? 0 : -5;
}

static int gpu_sync(void *ctx, unsigned lane)
{
	struct gpu_dma *g = (struct gpu_dma *)ctx;
	return cudaStreamSynchronize(g->s[lane]) == cudaSuccess ? 0 : -5;
}

/* The host's view of the I/O queue while GPU threads drive it: a batch of n
 * commands took n SQ slots and n CQ entries, which the ring follows so the
 * next batch starts at the right tail, head and phase. */
static void advance(struct gpunvme_ring *r, uint32_t n)
{
	for (uint32_t k = 0; k < n; k++) {
		gpunvme_ring_sq_push(r);
		gpunvme_ring_cq_pop(r);
	}
}

int main(void)
{
	int ndev = 0;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		printf("SKIP: no CUDA device\n");
		return TEST_SKIP;
	}
	REQUIRE_CUDA(cudaSetDeviceFlags(cudaDeviceMapHost));

	struct gpunvme_emu_config cfg;
	const char *err = NULL;
	REQUIRE(gpunvme_emu_config_parse(&cfg, "ram:64M?lbads=12&workers=1", &err) == 0, "config: %s", err);
	cfg.bar.alloc = bar_alloc;
	cfg.bar.free = bar_free;
	struct gpunvme_emu *emu;
	REQUIRE_OK(gpunvme_emu_create(&cfg, &emu));
	struct eb_ctrl c;
	eb_attach(&c, emu);
	uint8_t *arena;
	REQUIRE_CUDA(cudaHostAlloc((void **)&arena, ARENA, cudaHostAllocMapped));
	REQUIRE_OK(eb_mem_map(&c, arena, IOVA, ARENA));

	/* enable with admin queues of 32 entries, then one I/O queue pair */
	REQUIRE_OK(eb_enable(&c, ADMIN_QD));
	struct gpunvme_ring io;
	REQUIRE_OK(eb_create_qp(&c, 1, QD, &io));
	uint64_t data_iova;
	uint8_t *data = (uint8_t *)eb_alloc(&c, 2 * (size_t)QD * BLK, 0, &data_iova); /* Tier 1 data */
	REQUIRE(data != NULL);

	struct devq q;
	uint8_t *dbar;
	REQUIRE_CUDA(cudaHostGetDevicePointer((void **)&dbar, (void *)c.bar, 0));
	REQUIRE_CUDA(cudaHostGetDevicePointer((void **)&q.sq, io.sq, 0));
	REQUIRE_CUDA(cudaHostGetDevicePointer((void **)&q.cq, io.cq, 0));
	q.sq_db = (volatile uint32_t *)(dbar + gpunvme_sq_doorbell(1, c.dstrd));
	q.cq_db = (volatile uint32_t *)(dbar + gpunvme_cq_doorbell(1, c.dstrd));
	uint16_t *dstat;
	REQUIRE_CUDA(cudaMallocManaged((void **)&dstat, QD * sizeof(uint16_t)));

	const uint32_t n = QD - 1; /* a full queue holds QD - 1 commands */
	const uint64_t tmo = 5ull * 1000000000ull;

	/* Tier 1 write: pattern in pinned host memory -> LBAs 100.. */
	for (size_t i = 0; i < (size_t)n * BLK; i++)
		data[i] = (uint8_t)(i * 131 + (i >> 12));
	io_batch<<<1, QD>>>(q, GPUNVME_CMD_WRITE, 100, data_iova, n, io.sq_tail, io.cq_head, io.cq_phase, dstat,
			    tmo);
	REQUIRE_CUDA(cudaDeviceSynchronize());
	for (uint32_t i = 0; i < n; i++)
		REQUIRE(dstat[i] == 0, "tier1 write %u: status 0x%x", i, dstat[i]);
	advance(&io, n);

	/* Tier 1 read back into a second buffer */
	uint8_t *back = data + (size_t)QD * BLK;
	memset(back, 0, (size_t)n * BLK);
	io_batch<<<1, QD>>>(q, GPUNVME_CMD_READ, 100, data_iova + (uint64_t)QD * BLK, n, io.sq_tail, io.cq_head,
			    io.cq_phase, dstat, tmo);
	REQUIRE_CUDA(cudaDeviceSynchronize());
	for (uint32_t i = 0; i < n; i++)
		REQUIRE(dstat[i] == 0, "tier1 read %u: status 0x%x", i, dstat[i]);
	REQUIRE(!memcmp(data, back, (size_t)n * BLK), "tier1 read data mismatch");
	advance(&io, n);
	printf("tier 1: %u x 4 KiB written and read back by GPU threads\n", n);

	/* Tier 2 (emulated): the controller "DMAs" into GPU memory */
	struct gpu_dma g;
	for (unsigned i = 0; i < gpunvme_emu_lanes(emu); i++)
		REQUIRE_CUDA(cudaStreamCreateWithFlags(&g.s[i], cudaStreamNonBlocking));
	struct gpunvme_emu_gpu_ops ops = { gpu_copy, gpu_sync, &g, NULL, NULL };
	uint8_t *vram;
	REQUIRE_CUDA(cudaMalloc((void **)&vram, (size_t)QD * BLK));
	REQUIRE_CUDA(cudaMemset(vram, 0, (size_t)QD * BLK));
	const uint64_t GPU_IOVA = 0x4000000000ull;
	REQUIRE_OK(gpunvme_emu_dma_map_gpu(emu, GPU_IOVA, (uint64_t)(uintptr_t)vram, (size_t)QD * BLK, &ops));
	io_batch<<<1, QD>>>(q, GPUNVME_CMD_READ, 100, GPU_IOVA, n, io.sq_tail, io.cq_head, io.cq_phase, dstat, tmo);
	REQUIRE_CUDA(cudaDeviceSynchronize());
	for (uint32_t i = 0; i < n; i++)
		REQUIRE(dstat[i] == 0, "tier2 read %u: status 0x%x", i, dstat[i]);
	advance(&io, n);
	memset(back, 0, (size_t)n * BLK);
	REQUIRE_CUDA(cudaMemcpy(back, vram, (size_t)n * BLK, cudaMemcpyDeviceToHost));
	REQUIRE(!memcmp(data, back, (size_t)n * BLK), "tier2 data mismatch");
	printf("tier 2 (emulated DMA into VRAM): %u x 4 KiB read by GPU threads\n", n);

	/* An injected media error is a status inside the kernel, not a hang */
	struct gpunvme_emu_fault f;
	memset(&f, 0, sizeof(f));
	f.kind = GPUNVME_EMU_FAULT_MEDIA;
	f.nsid = 1;
	f.slba = 110;
	f.nlb = 1;
	REQUIRE_OK(gpunvme_emu_inject(emu, &f));
	io_batch<<<1, QD>>>(q, GPUNVME_CMD_READ, 100, data_iova, n, io.sq_tail, io.cq_head, io.cq_phase, dstat, tmo);
	REQUIRE_CUDA(cudaDeviceSynchronize());
	for (uint32_t i = 0; i < n; i++) {
		uint16_t want = i == 10 ? GPUNVME_SC_UNRECOVERED_READ : 0;
		REQUIRE(dstat[i] == want, "media fault %u: status 0x%x, want 0x%x", i, dstat[i], want);
	}
	advance(&io, n);
	printf("media error on LBA 110 seen by GPU thread 10 as status 0x%x\n", GPUNVME_SC_UNRECOVERED_READ);

	REQUIRE_OK(gpunvme_emu_dma_unmap(emu, GPU_IOVA));
	unsigned lanes = gpunvme_emu_lanes(emu);
	gpunvme_emu_destroy(emu);
	for (unsigned i = 0; i < lanes; i++)
		cudaStreamDestroy(g.s[i]);
	cudaFree(vram);
	cudaFree(dstat);
	cudaFreeHost(arena);
	return check_finish("test_gpu_emu");
}
#endif
