/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A GPU drives the embedded emulator with no CPU in the I/O path: the host
 * only brings the controller up and creates one I/O queue pair (control
 * plane); then GPU threads build Read/Write SQEs in host-pinned queue
 * memory, ring the SQ tail doorbell in the emulator's BAR0 (pinned, mapped
 * into the GPU), and poll the CQ. Covers Tier 1 (data in pinned host memory)
 * and the emulator's GPU-memory path (Tier 2: data moved by the copy
 * engine through gpunvme_emu_dma_map_gpu). Exits 77 without a GPU.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpunvme/emu.h"

#define CHECK(x)                                                                   \
	do {                                                                       \
		cudaError_t err_ = (x);                                            \
		if (err_ != cudaSuccess) {                                         \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, \
				cudaGetErrorString(err_));                         \
			exit(1);                                                   \
		}                                                                  \
	} while (0)

#define FAIL(...)                                      \
	do {                                           \
		fprintf(stderr, "FAIL: " __VA_ARGS__); \
		exit(1);                               \
	} while (0)

static const uint64_t IOVA = 0x2000000000ull;
static const size_t ARENA = 16u << 20;
static const uint32_t QD = 64;
static const uint32_t BLK = 4096;

/* Arena layout (offsets) */
enum : uint64_t {
	OFF_ASQ = 0,
	OFF_ACQ = 4096,
	OFF_IOSQ = 8192,                 /* QD * 64 = 4 KiB */
	OFF_IOCQ = 12288,                /* QD * 16 */
	OFF_DATA = 1u << 20,             /* Tier 1 data */
};

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

/* ---- host control plane: raw register writes and admin SQEs ------------- */

static volatile uint8_t *bar;
static uint8_t *arena;
static uint32_t asq_tail, acq_head, acq_phase = 1;

static uint32_t rd32(uint32_t off) { return __atomic_load_n((uint32_t *)(bar + off), __ATOMIC_ACQUIRE); }
static void wr32(uint32_t off, uint32_t v) { __atomic_store_n((uint32_t *)(bar + off), v, __ATOMIC_RELEASE); }

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint16_t admin(struct gpunvme_sqe *c)
{
	static uint16_t cid = 1;
	struct gpunvme_sqe *sq = (struct gpunvme_sqe *)(arena + OFF_ASQ);
	struct gpunvme_cqe *cq = (struct gpunvme_cqe *)(arena + OFF_ACQ);
	c->cid = cid++;
	sq[asq_tail] = *c;
	asq_tail = (asq_tail + 1) % 32;
	wr32(gpunvme_sq_doorbell(0, 0), asq_tail);
	double t0 = now_s();
	for (;;) {
		uint16_t st = __atomic_load_n(&cq[acq_head].status, __ATOMIC_ACQUIRE);
		if ((st & 1) == acq_phase) {
			if (++acq_head == 32) {
				acq_head = 0;
				acq_phase ^= 1;
			}
			wr32(gpunvme_cq_doorbell(0, 0), acq_head);
			return st >> 1;
		}
		if (now_s() - t0 > 5)
			FAIL("admin command %u timed out\n", c->opc);
	}
}

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
	 * entries, bounded by the timeout */
	uint64_t t0 = gtime();
	uint16_t found = 0xffff;
	while (found == 0xffff) {
		for (uint32_t k = 0; k < n; k++) {
			uint32_t slot = (head0 + k) % QD;
			uint32_t ph = phase0 ^ ((head0 + k) / QD);
			/* dword 3 (CID | status << 16) is written by the
			 * controller in one store: read it in one load */
			uint32_t dw3 = ((volatile uint32_t *)&q.cq[slot])[3];
			uint16_t st = (uint16_t)(dw3 >> 16);
			if ((st & 1) == ph && (dw3 & 0xffff) == 0x100 + i) {
				found = st >> 1;
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

int main(void)
{
	int ndev = 0;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		printf("SKIP: no CUDA device\n");
		return 77;
	}
	CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));

	struct gpunvme_emu_config cfg;
	const char *err = NULL;
	if (gpunvme_emu_config_parse(&cfg, "ram:64M?lbads=12&workers=1", &err))
		FAIL("config: %s\n", err);
	cfg.bar.alloc = bar_alloc;
	cfg.bar.free = bar_free;
	struct gpunvme_emu *emu;
	if (gpunvme_emu_create(&cfg, &emu))
		FAIL("emu create\n");
	bar = (volatile uint8_t *)gpunvme_emu_bar0(emu);
	CHECK(cudaHostAlloc((void **)&arena, ARENA, cudaHostAllocMapped));
	memset(arena, 0, ARENA);
	if (gpunvme_emu_dma_map(emu, IOVA, arena, ARENA))
		FAIL("dma map\n");

	/* enable: admin queues of 32 entries, 4 KiB pages, 64/16-byte entries */
	wr32(GPUNVME_REG_AQA, GPUNVME_AQA(31, 31));
	wr32(GPUNVME_REG_ASQ, (uint32_t)(IOVA + OFF_ASQ));
	wr32(GPUNVME_REG_ASQ + 4, (uint32_t)((IOVA + OFF_ASQ) >> 32));
	wr32(GPUNVME_REG_ACQ, (uint32_t)(IOVA + OFF_ACQ));
	wr32(GPUNVME_REG_ACQ + 4, (uint32_t)((IOVA + OFF_ACQ) >> 32));
	wr32(GPUNVME_REG_CC, GPUNVME_CC_EN | (6u << GPUNVME_CC_IOSQES_SHIFT) | (4u << GPUNVME_CC_IOCQES_SHIFT));
	double t0 = now_s();
	while (!(rd32(GPUNVME_REG_CSTS) & GPUNVME_CSTS_RDY))
		if (now_s() - t0 > 5)
			FAIL("CSTS.RDY never set\n");

	struct gpunvme_sqe c;
	memset(&c, 0, sizeof(c));
	c.opc = GPUNVME_ADM_CREATE_CQ;
	c.prp1 = IOVA + OFF_IOCQ;
	c.queue.qid = 1;
	c.queue.qsize = QD - 1;
	c.queue.qflags = GPUNVME_Q_PC;
	if (admin(&c))
		FAIL("create cq\n");
	memset(&c, 0, sizeof(c));
	c.opc = GPUNVME_ADM_CREATE_SQ;
	c.prp1 = IOVA + OFF_IOSQ;
	c.queue.qid = 1;
	c.queue.qsize = QD - 1;
	c.queue.qflags = GPUNVME_Q_PC;
	c.queue.cqid_iv = 1;
	if (admin(&c))
		FAIL("create sq\n");

	struct devq q;
	uint8_t *dbar;
	CHECK(cudaHostGetDevicePointer((void **)&dbar, (void *)bar, 0));
	CHECK(cudaHostGetDevicePointer((void **)&q.sq, arena + OFF_IOSQ, 0));
	CHECK(cudaHostGetDevicePointer((void **)&q.cq, arena + OFF_IOCQ, 0));
	q.sq_db = (volatile uint32_t *)(dbar + gpunvme_sq_doorbell(1, 0));
	q.cq_db = (volatile uint32_t *)(dbar + gpunvme_cq_doorbell(1, 0));
	uint16_t *dstat;
	CHECK(cudaMallocManaged((void **)&dstat, QD * sizeof(uint16_t)));

	uint32_t tail = 0, head = 0, phase = 1;
	const uint32_t n = QD - 1; /* a full queue holds QD - 1 commands */
	const uint64_t tmo = 5ull * 1000000000ull;
	/* advance host-side mirrors of the device queue state */
#define ADVANCE()                                         \
	do {                                              \
		tail = (tail + n) % QD;                   \
		phase ^= (head + n) / QD;                 \
		head = (head + n) % QD;                   \
	} while (0)

	/* Tier 1 write: pattern in pinned host memory -> LBAs 100.. */
	uint8_t *data = arena + OFF_DATA;
	for (size_t i = 0; i < (size_t)n * BLK; i++)
		data[i] = (uint8_t)(i * 131 + (i >> 12));
	io_batch<<<1, QD>>>(q, GPUNVME_CMD_WRITE, 100, IOVA + OFF_DATA, n, tail, head, phase, dstat, tmo);
	CHECK(cudaDeviceSynchronize());
	for (uint32_t i = 0; i < n; i++)
		if (dstat[i])
			FAIL("tier1 write %u: status 0x%x\n", i, dstat[i]);
	ADVANCE();

	/* Tier 1 read back into a second buffer */
	uint8_t *back = data + (size_t)QD * BLK;
	memset(back, 0, (size_t)n * BLK);
	io_batch<<<1, QD>>>(q, GPUNVME_CMD_READ, 100, IOVA + OFF_DATA + (uint64_t)QD * BLK, n, tail, head, phase,
			    dstat, tmo);
	CHECK(cudaDeviceSynchronize());
	for (uint32_t i = 0; i < n; i++)
		if (dstat[i])
			FAIL("tier1 read %u: status 0x%x\n", i, dstat[i]);
	if (memcmp(data, back, (size_t)n * BLK))
		FAIL("tier1 read data mismatch\n");
	ADVANCE();
	printf("tier 1: %u x 4 KiB written and read back by GPU threads\n", n);

	/* Tier 2 (emulated): the controller "DMAs" into GPU memory */
	struct gpu_dma g;
	for (unsigned i = 0; i < gpunvme_emu_lanes(emu); i++)
		CHECK(cudaStreamCreateWithFlags(&g.s[i], cudaStreamNonBlocking));
	struct gpunvme_emu_gpu_ops ops = { gpu_copy, gpu_sync, &g };
	uint8_t *vram;
	CHECK(cudaMalloc((void **)&vram, (size_t)QD * BLK));
	CHECK(cudaMemset(vram, 0, (size_t)QD * BLK));
	const uint64_t GPU_IOVA = 0x4000000000ull;
	if (gpunvme_emu_dma_map_gpu(emu, GPU_IOVA, (uint64_t)(uintptr_t)vram, (size_t)QD * BLK, &ops))
		FAIL("map gpu\n");
	io_batch<<<1, QD>>>(q, GPUNVME_CMD_READ, 100, GPU_IOVA, n, tail, head, phase, dstat, tmo);
	CHECK(cudaDeviceSynchronize());
	for (uint32_t i = 0; i < n; i++)
		if (dstat[i])
			FAIL("tier2 read %u: status 0x%x\n", i, dstat[i]);
	ADVANCE();
	memset(back, 0, (size_t)n * BLK);
	CHECK(cudaMemcpy(back, vram, (size_t)n * BLK, cudaMemcpyDeviceToHost));
	if (memcmp(data, back, (size_t)n * BLK))
		FAIL("tier2 data mismatch\n");
	printf("tier 2 (emulated DMA into VRAM): %u x 4 KiB read by GPU threads\n", n);

	/* An injected media error is a status inside the kernel, not a hang */
	struct gpunvme_emu_fault f;
	memset(&f, 0, sizeof(f));
	f.kind = GPUNVME_EMU_FAULT_MEDIA;
	f.nsid = 1;
	f.slba = 110;
	f.nlb = 1;
	if (gpunvme_emu_inject(emu, &f))
		FAIL("inject\n");
	io_batch<<<1, QD>>>(q, GPUNVME_CMD_READ, 100, IOVA + OFF_DATA, n, tail, head, phase, dstat, tmo);
	CHECK(cudaDeviceSynchronize());
	for (uint32_t i = 0; i < n; i++) {
		uint16_t want = i == 10 ? GPUNVME_SC_UNRECOVERED_READ : 0;
		if (dstat[i] != want)
			FAIL("media fault %u: status 0x%x, want 0x%x\n", i, dstat[i], want);
	}
	ADVANCE();
	printf("media error on LBA 110 seen by GPU thread 10 as status 0x%x\n", GPUNVME_SC_UNRECOVERED_READ);

	if (gpunvme_emu_dma_unmap(emu, GPU_IOVA))
		FAIL("unmap gpu\n");
	unsigned lanes = gpunvme_emu_lanes(emu);
	gpunvme_emu_destroy(emu);
	for (unsigned i = 0; i < lanes; i++)
		cudaStreamDestroy(g.s[i]);
	cudaFree(vram);
	cudaFree(dstat);
	cudaFreeHost(arena);
	printf("PASS\n");
	return 0;
}
