/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Host side of the GPU data path: queue pairs the GPU drives (created
 * through the control plane, memory in host pinned pages mapped into the
 * GPU), BAR0 mapped for the GPU, buffer registration (Tier 1 host memory,
 * Tier 2 GPU memory: through the bus's device-memory DMA engine where it
 * has one (ctrl_gpu.h, gpunvme_ctrl_devmem_*), or on the kmod: bus
 * exported as a dma-buf, else pinned with nvidia_p2p, and mapped by the
 * kernel module), and an asynchronous read on a CUDA stream.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/stream_wait.cuh"
#include "gpunvme/device.cuh"
#include "gpunvme/gpu.h"
#include "base/base.h"
#include "ctrl/ctrl_gpu.h"

struct gpunvme_gpu_queues {
	struct gpunvme_ctrl *c;
	struct gpunvme_dev_queues desc;  /* host copy, device pointers inside */
	struct gpunvme_dq_pair *qp_host;  /* host copy of the qp array */
	uint16_t *qids;
	uint32_t nq, depth, lp;
	uint8_t *mem;                    /* DMA memory: SQs, CQs, list pages */
	size_t mem_len;
	size_t ring_len, q_per;          /* SQ + CQ bytes of a queue pair; its whole run */
	size_t sq_len;                   /* SQ bytes: the CQ follows */
	void *dev_state;                 /* cudaMalloc: counters and slot arrays */
	uint64_t *dev_list_iova;
	volatile void *bar;
	size_t bar_len;
	bool bar_registered;
	void *engine;                    /* the bus's device-memory DMA engine, NULL when it has none */
	void *pinned;                    /* the engine's backing memory, when we pinned it */
	void (*unpin)(void *p);          /* ... and how to unpin it */
	bool pin_tried;
	cudaStream_t aux;                /* buffer tables: a stream that waits for no one */
};

struct gpunvme_gpu_buf {
	struct gpunvme_gpu_queues *g;
	struct gpunvme_dev_buf desc;
	uint64_t *dev_tab;
	void *dev_ptr;
	void *host;                      /* Tier 1 */
	bool host_registered;
	uint64_t gpu_iova;               /* Tier 2 */
	void *vram;
};

static int cuda_err(cudaError_t e, const char *what)
{
	return gpunvme_set_error(-EIO, "%s: %s", what, cudaGetErrorString(e));
}

/*
 * Read kernels may wait for a device-memory DMA engine's copies (bus.h),
 * which are CUDA calls from the controller's own threads; nothing those
 * calls queue behind may wait for the read kernels, or both sides wait
 * until the commands time out:
 *  - CUDA multiplexes streams onto CUDA_DEVICE_MAX_CONNECTIONS hardware
 *    queues (8 by default): an engine's copy stream sharing a queue with a
 *    bounce copy that follows a read kernel waits for that kernel. Ask for
 *    32.
 *  - Lazy module loading (the default since CUDA 12) loads a module at its
 *    first launch and may wait for running kernels meanwhile: a second
 *    stream's first kernel launch during a read deadlocked double-buffered
 *    loads on an H100. Load modules eagerly.
 * Both are read once when the CUDA runtime starts, so they are set before
 * main; values the user set are kept.
 */
__attribute__((constructor)) static void gpunvme_cuda_env(void)
{
	setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
	setenv("CUDA_MODULE_LOADING", "EAGER", 0);
}

/* ---- queues -------------------------------------------------------------------- */

static size_t align_up(size_t x, size_t a)
{
	return (x + a - 1) & ~(a - 1);
}

/*
 * Host ranges this library registered with CUDA, counted. A range is
 * registered once for the process: a second cudaHostRegister of it fails
 * (AlreadyRegistered) and the caller uses the first one's mapping. A queue
 * set that unregistered the doorbells when it went, because it had
 * registered them first, unmapped them under every other queue set of the
 * controller still in use: their next doorbell write faulted (an illegal
 * address, H200: gpu.loader.first_loader_freed, a loader outliving the
 * first loader of its controller; bench/results/emu-multi-2026-11-28-s15). The same holds for DMA memory several
 * queue sets register (md members, Tier 1). The last user unregisters. A
 * range registered by someone else (the application) is theirs: not
 * counted, never unregistered here.
 */
struct host_reg {
	void *p;
	size_t len;
	unsigned refs;
};
static pthread_mutex_t host_regs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct host_reg *host_regs; /* n_host_regs in use, unordered */
static size_t n_host_regs, cap_host_regs;

/* cudaSuccess: the range is registered and counted for this caller (who
 * must call host_unregister_counted); AlreadyRegistered: registered by
 * someone else, usable, not ours; anything else: not registered */
static cudaError_t host_register_counted(void *p, size_t len, unsigned flags)
{
	pthread_mutex_lock(&host_regs_lock);
	for (size_t i = 0; i < n_host_regs; i++)
		/* a longer range at the same start is not covered: CUDA says
		 * AlreadyRegistered for it, as before */
		if (host_regs[i].p == p && len <= host_regs[i].len) {
			host_regs[i].refs++;
			pthread_mutex_unlock(&host_regs_lock);
			return cudaSuccess;
		}
	cudaError_t ce = cudaSuccess;
	if (n_host_regs == cap_host_regs) {
		size_t cap = cap_host_regs ? 2 * cap_host_regs : 16;
		struct host_reg *r = (struct host_reg *)realloc(host_regs, cap * sizeof(*r));
		if (!r)
			ce = cudaErrorMemoryAllocation;
		else {
			host_regs = r;
			cap_host_regs = cap;
		}
	}
	if (ce == cudaSuccess && (ce = cudaHostRegister(p, len, flags)) == cudaSuccess)
		host_regs[n_host_regs++] = { p, len, 1 };
	pthread_mutex_unlock(&host_regs_lock);
	return ce;
}

static void host_unregister_counted(void *p)
{
	pthread_mutex_lock(&host_regs_lock);
	for (size_t i = 0; i < n_host_regs; i++)
		if (host_regs[i].p == p) {
			if (--host_regs[i].refs == 0) {
				cudaHostUnregister(p);
				host_regs[i] = host_regs[--n_host_regs];
			}
			break;
		}
	pthread_mutex_unlock(&host_regs_lock);
}

/* The doorbells mapped into the GPU's address space: *dbar is their
 * device address. BAR0: device MMIO on PCIe (GPUNVME_CAP_DOORBELL_MMIO),
 * ordinary host memory on a bus without that bit; over NVMe/TCP a host page
 * the CPU proxies read (gpunvme_ctrl_doorbells). */
static int map_bar(struct gpunvme_gpu_queues *g, const struct gpunvme_ctrl_info *ci, uint8_t **dbar)
{
	g->bar = gpunvme_ctrl_doorbells(g->c, &g->bar_len);
	unsigned flags = cudaHostRegisterMapped;
	if (ci->caps & GPUNVME_CAP_DOORBELL_MMIO)
		flags |= cudaHostRegisterIoMemory; /* MMIO: uncached, PCIe writes */
	cudaError_t ce = host_register_counted((void *)g->bar, g->bar_len, flags);
	if (ce == cudaSuccess)
		g->bar_registered = true;
	else if (ce == cudaErrorHostMemoryAlreadyRegistered)
		cudaGetLastError();
	else
		return gpunvme_set_error(-EIO, "cannot map BAR0 for the GPU (cudaHostRegister%s: %s)%s",
					 flags & cudaHostRegisterIoMemory ? " IoMemory" : "", cudaGetErrorString(ce),
					 flags & cudaHostRegisterIoMemory
						 ? "; see docs/hardware.md (the NVIDIA driver must allow IoMemory)" : "");
	if ((ce = cudaHostGetDevicePointer((void **)dbar, (void *)g->bar, 0)) != cudaSuccess)
		return cuda_err(ce, "BAR0 device pointer");
	return 0;
}

/* Where each queue pair's pieces lie: in the DMA memory (SQ, CQ, PRP list
 * pages, one run per queue) and in device memory (counters and slot
 * arrays, st_per bytes per queue, then the descriptor array). */
struct qlayout {
	size_t sq, cq, lists, per;   /* DMA memory */
	size_t st_per, st_len;       /* device memory */
	uint8_t *dmem;               /* g->mem as the GPU sees it */
};

/* The queues' DMA memory, one allocation (its own bus mapping: >= 2 MiB)
 * mapped into the GPU, and their device state, zeroed. */
static int alloc_queue_memory(struct gpunvme_gpu_queues *g, uint32_t ps, struct qlayout *L)
{
	const uint32_t d = g->depth, nq = g->nq;
	L->sq = align_up((size_t)d * 64, 4096);
	L->cq = align_up((size_t)d * 16, 4096);
	L->lists = (size_t)d * g->lp * ps;
	L->per = L->sq + L->cq + L->lists;
	g->sq_len = L->sq;
	g->ring_len = L->sq + L->cq;
	g->q_per = L->per;
	g->mem_len = align_up(L->per * nq, 2u << 20);
	g->mem = (uint8_t *)gpunvme_dma_alloc(g->c, g->mem_len);
	if (!g->mem)
		return -ENOMEM; /* the message is gpunvme_dma_alloc's */
	cudaError_t ce = cudaHostRegister(g->mem, g->mem_len, cudaHostRegisterMapped);
	if (ce != cudaSuccess)
		return cuda_err(ce, "cudaHostRegister of queue memory");
	if ((ce = cudaHostGetDevicePointer((void **)&L->dmem, g->mem, 0)) != cudaSuccess)
		return cuda_err(ce, "queue memory device pointer");
	/* per queue: the counters and three slot arrays (mark, done, freed) */
	L->st_per = align_up(sizeof(struct gpunvme_dq_state) + (size_t)d * 3 * sizeof(unsigned), 256);
	L->st_len = L->st_per * nq + sizeof(struct gpunvme_dq_pair) * nq;
	/* Zeroed on the auxiliary stream, where seed_cq_words writes the CQ
	 * words next: a cudaMemset on the legacy stream returns before it runs
	 * and is not ordered before work on the non-blocking aux stream. With
	 * many processes time-sharing the GPU it ran after the seed and left
	 * every CQ word at phase 0, so the zeroed CQ entries read as new
	 * completions of CID 0 with status 0: ticket 0's command reported
	 * success whatever the controller said (a media error lost, data
	 * never read; issue 30). */
	if ((ce = cudaMalloc(&g->dev_state, L->st_len)) != cudaSuccess ||
	    (ce = cudaMemsetAsync(g->dev_state, 0, L->st_len, g->aux)) != cudaSuccess ||
	    (ce = cudaMalloc((void **)&g->dev_list_iova, (size_t)nq * d * g->lp * sizeof(uint64_t))) != cudaSuccess)
		return cuda_err(ce, "device memory for queue state");
	return 0;
}

/* Queue pair i: its descriptor (device addresses, doorbells at the
 * controller's stride), the bus addresses of its list pages into li, and
 * the queue pair created on the controller. */
static int create_queue_pair(struct gpunvme_gpu_queues *g, uint32_t i, const struct qlayout *L, uint8_t *dbar,
			     uint32_t dstrd, uint32_t ps, uint64_t *li)
{
	const uint32_t d = g->depth;
	uint8_t *base = g->mem + i * L->per;
	struct gpunvme_dq_pair *qp = &g->qp_host[i];
	int rc = gpunvme_ctrl_reserve_qid(g->c, &g->qids[i]);
	if (rc)
		return rc;
	qp->qid = g->qids[i];
	qp->depth = d;
	qp->lp = g->lp;
	qp->sq = (struct gpunvme_sqe *)(L->dmem + (base - g->mem));
	qp->cq = (uint32_t *)(L->dmem + (base + L->sq - g->mem));
	qp->lists = (uint64_t *)(L->dmem + (base + L->sq + L->cq - g->mem));
	for (size_t k = 0; k < (size_t)d * g->lp; k++)
		li[(size_t)i * d * g->lp + k] = gpunvme_dma_iova(g->c, base + L->sq + L->cq + k * ps);
	qp->list_iova = g->dev_list_iova + (size_t)i * d * g->lp;
	qp->sq_db = (volatile uint32_t *)(dbar + gpunvme_sq_doorbell(qp->qid, dstrd));
	qp->cq_db = (volatile uint32_t *)(dbar + gpunvme_cq_doorbell(qp->qid, dstrd));
	uint8_t *s = (uint8_t *)g->dev_state + i * L->st_per;
	qp->s = (struct gpunvme_dq_state *)s;
	qp->mark = (unsigned *)(s + sizeof(struct gpunvme_dq_state));
	qp->done = qp->mark + d;
	qp->freed = qp->done + d;
	rc = gpunvme_ctrl_create_qpair_raw(g->c, qp->qid, gpunvme_dma_iova(g->c, base),
					   gpunvme_dma_iova(g->c, base + L->sq), d);
	if (rc) {
		gpunvme_ctrl_release_qid(g->c, g->qids[i]);
		g->qids[i] = 0;
	}
	return rc;
}

/* The CQ phase starts at 1 (§4.6): each queue's CQ word is head 0,
 * nothing rung, phase 1, unlocked (device_queue.cuh). On the auxiliary
 * stream, which waits for no kernel (see upload_table), after the state's
 * zeroing on the same stream (alloc_queue_memory, recover). */
static cudaError_t seed_cq_words(struct gpunvme_gpu_queues *g)
{
	static const unsigned long long cqw = 1ull << 1;
	cudaError_t ce = cudaSuccess;
	for (uint32_t i = 0; i < g->nq && ce == cudaSuccess; i++)
		ce = cudaMemcpyAsync(&g->qp_host[i].s->cqw, &cqw, sizeof(cqw), cudaMemcpyHostToDevice, g->aux);
	return ce == cudaSuccess ? gpunvme_stream_wait(g->aux, GPUNVME_STREAM_WAIT_NS) : ce;
}

/* Every queue pair, then what the device needs of them: seeded CQ words,
 * the list pages' bus addresses and the descriptor array. */
static int create_queue_pairs(struct gpunvme_gpu_queues *g, const struct qlayout *L, uint8_t *dbar, uint32_t dstrd,
			      uint32_t ps)
{
	const size_t nli = (size_t)g->nq * g->depth * g->lp;
	uint64_t *li = (uint64_t *)malloc(nli * sizeof(uint64_t));
	if (!li)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	int rc = 0;
	for (uint32_t i = 0; i < g->nq && !rc; i++)
		rc = create_queue_pair(g, i, L, dbar, dstrd, ps, li);
	/* The list pages' bus addresses and the descriptors go up on the aux
	 * stream, after the state's zeroing and the seed, and are waited for
	 * there: a cudaMemcpy from pageable memory may return before its DMA
	 * lands, and only the legacy stream is ordered after it, not the
	 * non-blocking streams the read kernels run on. */
	struct gpunvme_dq_pair *dqp = (struct gpunvme_dq_pair *)((uint8_t *)g->dev_state + L->st_per * g->nq);
	cudaError_t ce = cudaSuccess;
	if (!rc) {
		ce = cudaMemcpyAsync(g->dev_list_iova, li, nli * sizeof(uint64_t), cudaMemcpyHostToDevice, g->aux);
		if (ce == cudaSuccess)
			ce = cudaMemcpyAsync(dqp, g->qp_host, sizeof(*dqp) * g->nq, cudaMemcpyHostToDevice, g->aux);
		if (ce == cudaSuccess)
			ce = seed_cq_words(g); /* on aux too; it waits for the stream */
	}
	free(li);
	if (rc)
		return rc;
	if (ce != cudaSuccess)
		return cuda_err(ce, "queue descriptors");
	g->desc.qp = dqp;
	g->desc.qstate = (unsigned char *)g->dev_state; /* queue i's state at qstate + i * st_per */
	g->desc.qstate_stride = (uint32_t)L->st_per;
	return 0;
}

int gpunvme_gpu_queues_create(struct gpunvme_ctrl *c, uint32_t nsid, uint32_t nq, uint32_t depth,
			      struct gpunvme_gpu_queues **out)
{
	struct gpunvme_ns_info ni;
	struct gpunvme_ctrl_info ci;
	cudaError_t ce;
	int rc;
	if (!c || !out || nq == 0)
		return gpunvme_set_error(-EINVAL, "gpu queues: bad arguments");
	if ((rc = gpunvme_ns_info(c, nsid, &ni)))
		return rc;
	gpunvme_ctrl_info(c, &ci);
	if (ni.ms)
		return gpunvme_set_error(-ENOTSUP, "namespace %u has metadata: not supported", nsid);
	/* a power of two (slot = ticket % depth), at most what the caller
	 * asked, CAP.MQES + 1 allows and the protocol's ticket ids can tell */
	uint32_t d = 2;
	while (d * 2 <= depth && d * 2 <= ci.mqes && d * 2 <= GPUNVME_DEV_MAX_DEPTH)
		d *= 2;
	const uint32_t ps = gpunvme_ctrl_page_size(c);
	/* list pages per command for the worst start offset, as the CPU path
	 * counts them; at least one (the slot's list page is always there) */
	uint32_t lp = gpunvme_prp_list_pages(ps - 4, gpunvme_ctrl_max_xfer(c), ps);
	if (lp == 0)
		lp = 1;
	if (lp > GPUNVME_DEV_MAX_LISTS)
		return gpunvme_set_error(-EINVAL, "transfer size needs %u PRP list pages per command (at most %u)", lp,
					 GPUNVME_DEV_MAX_LISTS);
	struct gpunvme_gpu_queues *g = (struct gpunvme_gpu_queues *)calloc(1, sizeof(*g));
	if (!g)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	g->c = c;
	g->nq = nq;
	g->depth = d;
	g->lp = lp;
	if ((ce = cudaStreamCreateWithFlags(&g->aux, cudaStreamNonBlocking)) != cudaSuccess) {
		free(g);
		return cuda_err(ce, "creating a stream");
	}
	g->qids = (uint16_t *)calloc(nq, sizeof(uint16_t));
	g->qp_host = (struct gpunvme_dq_pair *)calloc(nq, sizeof(*g->qp_host));
	uint8_t *dbar = NULL;
	struct qlayout L;
	if (!g->qids || !g->qp_host)
		rc = gpunvme_set_error(-ENOMEM, "out of memory");
	else if (!(rc = map_bar(g, &ci, &dbar)) && !(rc = alloc_queue_memory(g, ps, &L)))
		rc = create_queue_pairs(g, &L, dbar, ci.dstrd, ps);
	if (rc) {
		gpunvme_gpu_queues_destroy(g);
		return rc;
	}
	g->desc.nq = nq;
	g->desc.nsid = nsid;
	g->desc.lba_shift = ni.lba_shift;
	g->desc.max_blocks = ni.max_blocks;
	g->desc.nsze = ni.nsze;
	g->desc.page_size = ps;
	/* only where CSTS is memory the GPU can read (GPUNVME_CAP_CSTS_GPU): a
	 * real BAR read from the GPU may not complete on every root complex
	 * (seed 004) */
	g->desc.csts = ci.caps & GPUNVME_CAP_CSTS_GPU ? (const volatile uint32_t *)(dbar + GPUNVME_REG_CSTS) : NULL;
	/* A bus whose controller has device memory's bytes moved for it: its
	 * engine for this queue set, in this thread's GPU context (e.g. one
	 * copy stream per controller thread) */
	if ((rc = gpunvme_ctrl_devmem_attach(c, &g->engine))) {
		gpunvme_gpu_queues_destroy(g);
		return rc;
	}
	*out = g;
	return 0;
}

void gpunvme_gpu_queues_destroy(struct gpunvme_gpu_queues *g)
{
	if (!g)
		return;
	for (uint32_t i = 0; g->qids && i < g->nq; i++) {
		if (!g->qids[i])
			continue;
		gpunvme_ctrl_delete_qpair_raw(g->c, g->qids[i]);
		gpunvme_ctrl_release_qid(g->c, g->qids[i]);
	}
	if (g->mem) {
		cudaHostUnregister(g->mem);
		gpunvme_dma_free(g->c, g->mem);
	}
	if (g->bar_registered)
		host_unregister_counted((void *)g->bar);
	cudaFree(g->dev_state);
	cudaFree(g->dev_list_iova);
	gpunvme_ctrl_devmem_detach(g->c, g->engine);
	if (g->pinned)
		g->unpin(g->pinned);
	if (g->aux)
		cudaStreamDestroy(g->aux);
	free(g->qids);
	free(g->qp_host);
	free(g);
}

const struct gpunvme_dev_queues *gpunvme_gpu_queues_desc(const struct gpunvme_gpu_queues *g)
{
	return &g->desc;
}

/* ---- recovery ------------------------------------------------------------------ */

static uint32_t host_csts(const struct gpunvme_gpu_queues *g)
{
	return ((const volatile uint32_t *)g->bar)[GPUNVME_REG_CSTS / 4];
}

/* Commands still in a slot with no completion seen: a slot's last command
 * (mark = ticket + 1) not consumed (freed[] has not counted its lap,
 * device_queue.cuh gpunvme_dq_slot_free) and not published (done[]). Fills
 * cids (qid << 16 | cid; room for nq * depth) when given. The device state
 * is read on the auxiliary stream: no kernel may be using the queues. */
static int find_stuck(struct gpunvme_gpu_queues *g, uint32_t *broken, uint32_t *stuck, uint32_t *cids)
{
	const uint32_t d = g->depth, mask = d - 1;
	uint8_t *st = (uint8_t *)malloc((size_t)g->desc.qstate_stride * g->nq);
	if (!st)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	cudaError_t ce = cudaMemcpyAsync(st, g->dev_state, (size_t)g->desc.qstate_stride * g->nq, cudaMemcpyDeviceToHost, g->aux);
	if (ce == cudaSuccess)
		ce = cudaStreamSynchronize(g->aux);
	if (ce != cudaSuccess) {
		free(st);
		return cuda_err(ce, "reading the GPU queues' state");
	}
	*broken = *stuck = 0;
	for (uint32_t i = 0; i < g->nq; i++) {
		const uint8_t *q = st + (size_t)i * g->desc.qstate_stride;
		struct gpunvme_dq_state s;
		memcpy(&s, q, sizeof(s));
		const unsigned *mark = (const unsigned *)(q + sizeof(s)), *done = mark + d, *freed = done + d;
		*broken += s.broken != 0;
		for (uint32_t k = 0; k < d; k++) {
			if (!mark[k])
				continue;
			const unsigned t = mark[k] - 1u;
			const bool consumed = freed[k] * d != (t & ~mask);
			const bool published = (done[k] >> 16) == ((t + 1u) & 0xffffu);
			if (consumed || published)
				continue;
			if (cids)
				cids[*stuck] = (uint32_t)g->qids[i] << 16 | (t & 0xffffu);
			(*stuck)++;
		}
	}
	free(st);
	return 0;
}

int gpunvme_gpu_queues_check(struct gpunvme_gpu_queues *g, struct gpunvme_gpu_health *h)
{
	struct gpunvme_gpu_health tmp;
	if (!g)
		return gpunvme_set_error(-EINVAL, "gpu queues check: no queues");
	if (!h)
		h = &tmp;
	memset(h, 0, sizeof(*h));
	h->csts = host_csts(g);
	if (h->csts == 0xffffffffu)
		return gpunvme_set_error(-ENODEV, "GPU queues: device gone (registers read all ones); close it and "
						  "open it again once it is back");
	int rc = find_stuck(g, &h->broken, &h->stuck, NULL);
	if (rc)
		return rc;
	if (h->csts & GPUNVME_CSTS_CFS)
		return gpunvme_set_error(-EIO, "GPU queues: controller fatal status (CSTS.CFS): recover "
					 "(gpunvme_gpu_queues_recover resets it)");
	if (!(h->csts & GPUNVME_CSTS_RDY))
		return gpunvme_set_error(-EIO, "GPU queues: controller not ready (CSTS 0x%x: reset or came back): "
					 "recover", h->csts);
	if (h->broken || h->stuck)
		return gpunvme_set_error(-EIO, "GPU queues: %u queue pair(s) broken, %u command(s) without a "
					 "completion: recover (gpunvme_gpu_queues_recover)", h->broken, h->stuck);
	return 0;
}

/* Abort every stuck command (best effort: the queues are deleted or the
 * controller reset afterwards either way). Returns -1 when the admin queue
 * itself failed, which calls for a reset. */
static int abort_stuck(struct gpunvme_gpu_queues *g, const uint32_t *cids, uint32_t n, struct gpunvme_gpu_recovery *r)
{
	for (uint32_t k = 0; k < n; k++) {
		bool ok = false;
		int rc = gpunvme_abort(g->c, (uint16_t)(cids[k] >> 16), (uint16_t)cids[k], &ok);
		if (rc == -EAGAIN)
			return 0; /* Abort Command Limit: the delete aborts the rest */
		if (rc && rc != -EIO)
			return -1; /* timeout or gone: the admin queue is not trusted */
		r->abort_sent++;
		r->aborted += ok;
	}
	return 0;
}

int gpunvme_gpu_queues_recover(struct gpunvme_gpu_queues *g, unsigned flags, struct gpunvme_gpu_recovery *r)
{
	struct gpunvme_gpu_recovery tmp;
	if (!g || (flags & ~GPUNVME_GPU_RECOVER_RESET))
		return gpunvme_set_error(-EINVAL, "gpu queues recover: bad arguments");
	if (!r)
		r = &tmp;
	memset(r, 0, sizeof(*r));
	const uint64_t t0 = gpunvme_now_ns();
	/* Tier 2 through a device-memory DMA engine: copies it queued must
	 * land before we look (bounded: a copy that never lands leaves nothing
	 * to recover into; the engine says why) */
	int rc = gpunvme_ctrl_devmem_sync(g->c, g->engine);
	if (rc)
		return rc;
	uint32_t csts = host_csts(g);
	if (csts == 0xffffffffu)
		return gpunvme_set_error(-ENODEV, "GPU queues: device gone (registers read all ones); close it and "
						  "open it again once it is back");
	uint32_t *cids = (uint32_t *)malloc((size_t)g->nq * g->depth * sizeof(uint32_t));
	if (!cids)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	uint32_t broken = 0;
	rc = find_stuck(g, &broken, &r->stuck, cids);
	if (rc) {
		free(cids);
		return rc;
	}
	/* a fatal or stopped controller (reset by someone, or a device that
	 * came back) has lost its queues: only a reset brings it back */
	bool reset = (flags & GPUNVME_GPU_RECOVER_RESET) || (csts & GPUNVME_CSTS_CFS) || !(csts & GPUNVME_CSTS_RDY);
	if (!reset && abort_stuck(g, cids, r->stuck, r))
		reset = true;
	free(cids);
	/* NVMe 1.4 §5.7: once Delete I/O SQ completes, the controller has
	 * aborted that queue's commands and posts nothing more for them; the
	 * CQ (§5.6) goes after its SQ. Then no DMA of an old command remains. */
	for (uint32_t i = 0; i < g->nq && !reset; i++)
		if (gpunvme_ctrl_delete_qpair_raw(g->c, g->qids[i]))
			reset = true;
	if (reset) {
		/* CC.EN = 0 and CSTS.RDY = 0 first (gpunvme_reset): every queue,
		 * ours too, is gone and nothing moves data any more */
		if ((rc = gpunvme_reset(g->c)))
			return rc;
		r->reset = true;
	}
	/* Fresh rings: zeroed CQ entries carry phase 0, which the first lap
	 * (phase 1) does not take for new entries (§4.6). Device state zeroed
	 * (tickets, locks, slot words) and the CQ words seeded again. */
	for (uint32_t i = 0; i < g->nq; i++)
		memset(g->mem + i * g->q_per, 0, g->ring_len);
	cudaError_t ce = cudaMemsetAsync(g->dev_state, 0, (size_t)g->desc.qstate_stride * g->nq, g->aux);
	if (ce == cudaSuccess)
		ce = seed_cq_words(g);
	if (ce != cudaSuccess)
		return cuda_err(ce, "resetting the GPU queues' state");
	for (uint32_t i = 0; i < g->nq; i++) {
		uint8_t *base = g->mem + i * g->q_per;
		rc = gpunvme_ctrl_create_qpair_raw(g->c, g->qids[i], gpunvme_dma_iova(g->c, base),
						   gpunvme_dma_iova(g->c, base + g->sq_len), g->depth);
		if (rc)
			return rc;
	}
	r->ns = gpunvme_now_ns() - t0;
	return 0;
}

/* ---- buffers ----------------------------------------------------------------- */

/* Registration may happen while read kernels run (a loader registering the
 * next destination): nothing here may wait for them. cudaMalloc/cudaMemcpy
 * on the legacy stream would wait for every blocking stream, and so for a
 * kernel that waits for a device-memory DMA engine's copies: a deadlock,
 * seen as reads timing out. Stream-ordered allocation and a copy on our own non-blocking
 * stream wait for nothing else. */
static int upload_table(struct gpunvme_gpu_buf *b, const uint64_t *tab, size_t n, uint32_t shift)
{
	/* a controller page never spans two pieces (device_queue.cuh) */
	if (b->g->desc.page_size > (1u << shift))
		return gpunvme_set_error(-EINVAL, "buffer mapped in %u-byte pieces, smaller than the controller's page "
						  "size %u",
					 1u << shift, b->g->desc.page_size);
	b->desc.shift = shift;
	cudaStream_t st = b->g->aux;
	cudaError_t ce = cudaMallocAsync((void **)&b->dev_tab, n * sizeof(uint64_t), st);
	if (ce == cudaSuccess)
		ce = cudaMemcpyAsync(b->dev_tab, tab, n * sizeof(uint64_t), cudaMemcpyHostToDevice, st);
	if (ce == cudaSuccess)
		ce = cudaStreamSynchronize(st);
	if (ce != cudaSuccess)
		return cuda_err(ce, "buffer address table");
	b->desc.iova64k = b->dev_tab;
	return 0;
}

int gpunvme_gpu_buf_host(struct gpunvme_gpu_queues *g, void *dma_mem, size_t len, struct gpunvme_gpu_buf **out,
			 void **dev_ptr)
{
	int rc;
	if (!g || !dma_mem || !len || !out)
		return gpunvme_set_error(-EINVAL, "gpu buffer: bad arguments");
	size_t n = (len + 0xffff) >> 16;
	uint64_t *tab = (uint64_t *)malloc(n * sizeof(uint64_t));
	struct gpunvme_gpu_buf *b = (struct gpunvme_gpu_buf *)calloc(1, sizeof(*b));
	if (!tab || !b) {
		free(tab);
		free(b);
		return gpunvme_set_error(-ENOMEM, "out of memory");
	}
	b->g = g;
	b->host = dma_mem;
	b->desc.len = len;
	/* each 64 KiB piece contiguous in bus space; else (the kmod: bus maps
	 * 4 KiB pages where the IOMMU is off) each 4 KiB page */
	uint32_t shift = 16;
	for (size_t k = 0; k < n; k++) {
		uint8_t *p = (uint8_t *)dma_mem + (k << 16);
		size_t plen = len - (k << 16) < 0x10000 ? len - (k << 16) : 0x10000;
		tab[k] = gpunvme_dma_iova(g->c, p);
		if (!tab[k] || gpunvme_dma_iova(g->c, p + plen - 1) != tab[k] + plen - 1) {
			shift = 12;
			break;
		}
	}
	if (shift == 12) {
		n = (len + 4095) >> 12;
		uint64_t *t4 = (uint64_t *)realloc(tab, n * sizeof(uint64_t));
		if (!t4) {
			free(tab);
			free(b);
			return gpunvme_set_error(-ENOMEM, "out of memory");
		}
		tab = t4;
		for (size_t k = 0; k < n; k++) {
			uint8_t *p = (uint8_t *)dma_mem + (k << 12);
			size_t plen = len - (k << 12) < 4096 ? len - (k << 12) : 4096;
			tab[k] = gpunvme_dma_iova(g->c, p);
			if ((uintptr_t)dma_mem & 4095 || !tab[k] ||
			    gpunvme_dma_iova(g->c, p + plen - 1) != tab[k] + plen - 1) {
				free(tab);
				free(b);
				return gpunvme_set_error(-EINVAL, "buffer %p is not DMA memory contiguous in 64 KiB "
								  "pieces or 4 KiB pages (allocate it with "
								  "gpunvme_dma_alloc, 64 KiB aligned)",
							 dma_mem);
			}
		}
	}
	cudaError_t ce = host_register_counted(dma_mem, len, cudaHostRegisterMapped);
	if (ce == cudaSuccess)
		b->host_registered = true;
	else if (ce == cudaErrorHostMemoryAlreadyRegistered)
		cudaGetLastError();
	else {
		free(tab);
		free(b);
		return cuda_err(ce, "cudaHostRegister of the buffer");
	}
	cudaHostGetDevicePointer(&b->dev_ptr, dma_mem, 0);
	rc = upload_table(b, tab, n, shift);
	free(tab);
	if (rc) {
		gpunvme_gpu_buf_free(b);
		return rc;
	}
	if (dev_ptr)
		*dev_ptr = b->dev_ptr;
	*out = b;
	return 0;
}

/* Tier 2 registration through a device-memory DMA engine: the bus learns
 * the GPU range (the engine moves the data); the buffer's 64 KiB table is
 * just consecutive IOVAs of that range. */
/* The engine's copies from pageable host memory would go through the
 * driver's staging buffers at a fraction of the link rate, so the first GPU
 * buffer has the bus pin the memory they copy from (best effort, done by
 * the engine: gpunvme_ctrl_devmem_pin). The pin is kept by the controller
 * (gpunvme_ctrl_keep_pinned), so that every loader after the first finds
 * it pinned; only when the controller keeps another range (a second
 * namespace) is the pin this queue set's own. */
static void pin_backing(struct gpunvme_gpu_queues *g)
{
	void *p;
	void (*unpin)(void *p);
	if (g->pin_tried)
		return;
	g->pin_tried = true;
	gpunvme_ctrl_devmem_pin(g->c, g->desc.nsid, &p, &unpin);
	if (!p)
		return;
	if (gpunvme_ctrl_keep_pinned(g->c, p, unpin)) {
		g->pinned = p;
		g->unpin = unpin;
	}
}

typedef CUresult (*get_handle_fn)(void *, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long);
typedef CUresult (*get_range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);

static void *driver_entry(const char *name)
{
	void *fn = nullptr;
	cudaDriverEntryPointQueryResult q;
	if (cudaGetDriverEntryPointByVersion(name, &fn, 11070, cudaEnableDefault, &q) != cudaSuccess ||
	    q != cudaDriverEntryPointSuccess) {
		cudaGetLastError();
		return nullptr;
	}
	return fn;
}

/* "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15 ..."
 * (open) or "... NVIDIA UNIX x86_64 Kernel Module  570.86.15 ..."
 * (proprietary): which flavour decides whether dma-buf export exists. */
static void driver_flavour(char *out, size_t len)
{
	FILE *f = fopen("/proc/driver/nvidia/version", "re");
	char line[256] = "";
	if (!f || !fgets(line, sizeof(line), f)) {
		snprintf(out, len, "no /proc/driver/nvidia/version");
		if (f)
			fclose(f);
		return;
	}
	fclose(f);
	line[strcspn(line, "\n")] = 0;
	const char *v = strstr(line, "Kernel Module");
	snprintf(out, len, "%s, %s", strstr(line, "Open Kernel Module") ? "open kernel module" : "proprietary kernel module",
		 v ? v + strlen("Kernel Module") + strspn(v + strlen("Kernel Module"), " ") : line);
}

/*
 * GPU memory [dptr, dptr + len) as a dma-buf fd, *off the offset of dptr in
 * it. The exact 4 KiB-rounded range first (cuMemGetHandleForAddressRange
 * wants host-page alignment), then the whole allocation holding it (a
 * driver that demands more alignment). 0, or -errno with the reason in why.
 */
static int export_dmabuf(void *dptr, size_t len, int *fd, uint64_t *off, char *why, size_t wlen)
{
	get_handle_fn get = (get_handle_fn)driver_entry("cuMemGetHandleForAddressRange");
	if (!get) {
		snprintf(why, wlen, "the CUDA driver has no cuMemGetHandleForAddressRange (R515 or later needed)");
		return -EOPNOTSUPP;
	}
	size_t rlen = (len + 4095) & ~(size_t)4095;
	*fd = -1;
	CUresult r = get(fd, (CUdeviceptr)(uintptr_t)dptr, rlen, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
	if (r == CUDA_SUCCESS && *fd >= 0) {
		*off = 0;
		return 0;
	}
	CUresult r1 = r;
	get_range_fn range = (get_range_fn)driver_entry("cuMemGetAddressRange");
	CUdeviceptr base = 0;
	size_t size = 0;
	if (range && range(&base, &size, (CUdeviceptr)(uintptr_t)dptr) == CUDA_SUCCESS) {
		*fd = -1;
		r = get(fd, base, size, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
		if (r == CUDA_SUCCESS && *fd >= 0) {
			*off = (uint64_t)(uintptr_t)dptr - base;
			return 0;
		}
	}
	snprintf(why, wlen, "cuMemGetHandleForAddressRange(DMA_BUF_FD) refused %zu bytes at %p (CUresult %d) and the "
			    "whole allocation (CUresult %d)",
		 rlen, dptr, (int)r1, (int)r);
	return -EOPNOTSUPP;
}

/* A 4 KiB table from the bus (kmod:), or consecutive addresses of a range
 * the bus maps contiguously (a device-memory DMA engine's), uploaded for
 * the device. */
static int device_table(struct gpunvme_gpu_queues *g, struct gpunvme_gpu_buf *b, size_t len)
{
	const uint64_t *t4 = nullptr;
	size_t n4 = 0;
	if (gpunvme_ctrl_device_table(g->c, b->gpu_iova, &t4, &n4) == 0) {
		if (n4 < (len + 4095) >> 12)
			return gpunvme_set_error(-EIO, "GPU memory mapped for %zu pages, %zu needed", n4,
						 (len + 4095) >> 12);
		return upload_table(b, t4, (len + 4095) >> 12, 12);
	}
	size_t n = (len + 0xffff) >> 16;
	uint64_t *tab = (uint64_t *)malloc(n * sizeof(uint64_t));
	for (size_t k = 0; tab && k < n; k++)
		tab[k] = b->gpu_iova + (k << 16);
	int rc = tab ? upload_table(b, tab, n, 16) : gpunvme_set_error(-ENOMEM, "out of memory");
	free(tab);
	return rc;
}

static int buf_map_vram(struct gpunvme_gpu_queues *g, struct gpunvme_gpu_buf *b, void *dev_ptr, size_t len)
{
	pin_backing(g);
	struct gpunvme_devmem m = {(uint64_t)(uintptr_t)dev_ptr, len, g->engine, 0, -1, 0};
	char why[256] = "";
	int rc;
	if (!g->engine) {
		/* a real controller: the bus needs the pages' bus addresses;
		 * dma-buf export first (any IOMMU mode), else the bus tries
		 * nvidia_p2p with the device address */
		int fd = -1;
		uint64_t off = 0;
		if (export_dmabuf(dev_ptr, len, &fd, &off, why, sizeof(why)) == 0) {
			m.has_dmabuf = 1;
			m.dmabuf_fd = fd;
			m.dmabuf_off = off;
		}
		rc = gpunvme_ctrl_map_device(g->c, &m, &b->gpu_iova);
		if (fd >= 0)
			close(fd); /* the kernel module holds its own reference */
		if (rc && !m.has_dmabuf && rc != -EOPNOTSUPP) {
			char nv[160], p2p[512];
			driver_flavour(nv, sizeof(nv));
			snprintf(p2p, sizeof(p2p), "%s", gpunvme_last_error());
			return gpunvme_set_error(rc, "GPU memory as a DMA target: no route. dma-buf: %s; nvidia_p2p: %s. "
						     "Driver: %s. Fix: NVIDIA's open kernel modules (R515+) export "
						     "dma-bufs; with the proprietary module, nvidia_p2p needs nvidia.ko "
						     "loaded and a kernel before 6.6 (docs/hardware.md, Tier 2)",
						 why, p2p, nv);
		}
	} else {
		rc = gpunvme_ctrl_map_device(g->c, &m, &b->gpu_iova);
	}
	if (rc)
		return rc;
	rc = device_table(g, b, len);
	b->dev_ptr = dev_ptr;
	return rc;
}

int gpunvme_gpu_buf_device(struct gpunvme_gpu_queues *g, size_t len, struct gpunvme_gpu_buf **out, void **dev_ptr)
{
	if (!g || !len || !out)
		return gpunvme_set_error(-EINVAL, "gpu buffer: bad arguments");
	struct gpunvme_gpu_buf *b = (struct gpunvme_gpu_buf *)calloc(1, sizeof(*b));
	if (!b)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	b->g = g;
	b->desc.len = len;
	/* A real controller reaches GPU memory in 4 KiB pages (kmod:) and
	 * nvidia_p2p pins 64 KiB pages: the buffer starts on a 64 KiB boundary
	 * and spans whole pages (cudaMalloc only promises 256 bytes). A
	 * device-memory DMA engine copies any range. */
	bool real = g->engine == NULL;
	size_t alen = real ? ((len + 0xffff) & ~(size_t)0xffff) + 0x10000 : len;
	cudaError_t ce = cudaMalloc(&b->vram, alen);
	if (ce != cudaSuccess) {
		free(b);
		return cuda_err(ce, "cudaMalloc of the buffer");
	}
	void *p = real ? (void *)(((uintptr_t)b->vram + 0xffff) & ~(uintptr_t)0xffff) : b->vram;
	int rc = buf_map_vram(g, b, p, real ? (len + 0xffff) & ~(size_t)0xffff : len);
	if (rc) {
		gpunvme_gpu_buf_free(b);
		return rc;
	}
	b->desc.len = len;
	if (dev_ptr)
		*dev_ptr = p;
	*out = b;
	return 0;
}

int gpunvme_gpu_buf_register(struct gpunvme_gpu_queues *g, void *dev_ptr, size_t len, struct gpunvme_gpu_buf **out)
{
	if (!g || !dev_ptr || !len || !out)
		return gpunvme_set_error(-EINVAL, "gpu buffer: bad arguments");
	cudaPointerAttributes pa;
	if (cudaPointerGetAttributes(&pa, dev_ptr) != cudaSuccess || pa.type != cudaMemoryTypeDevice) {
		cudaGetLastError();
		return gpunvme_set_error(-EINVAL, "%p is not GPU memory (cudaMalloc it, or use Tier 1 for host memory)",
					 dev_ptr);
	}
	struct gpunvme_gpu_buf *b = (struct gpunvme_gpu_buf *)calloc(1, sizeof(*b));
	if (!b)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	b->g = g;
	b->desc.len = len;
	int rc = buf_map_vram(g, b, dev_ptr, len);
	if (rc) {
		gpunvme_gpu_buf_free(b);
		return rc;
	}
	*out = b;
	return 0;
}

void gpunvme_gpu_buf_free(struct gpunvme_gpu_buf *b)
{
	if (!b)
		return;
	if (b->gpu_iova)
		gpunvme_ctrl_unmap_device(b->g->c, b->gpu_iova);
	if (b->vram)
		cudaFree(b->vram);
	if (b->host_registered)
		host_unregister_counted(b->host);
	if (b->dev_tab) /* stream-ordered: no device-wide wait (the queues may be gone) */
		cudaFreeAsync(b->dev_tab, 0);
	free(b);
}

const struct gpunvme_dev_buf *gpunvme_gpu_buf_desc(const struct gpunvme_gpu_buf *b)
{
	return &b->desc;
}

const char *gpunvme_gpu_status_str(int st)
{
	if (st > 0 && st <= 0xffff)
		return gpunvme_status_str((uint16_t)st);
	switch (st) {
	case 0:
		return "success";
	case GPUNVME_DEV_ETIMEDOUT:
		return "no completion within the timeout (the queue pair is now broken)";
	case GPUNVME_DEV_EIO:
		return "queue pair broken by an earlier timeout, or controller fatal status (CSTS.CFS)";
	case GPUNVME_DEV_ENODEV:
		return "device gone (registers read all ones)";
	case GPUNVME_DEV_EINVAL:
		return "invalid command arguments (range, size or buffer alignment)";
	default:
		return "unknown device result (neither an NVMe status nor a GPUNVME_DEV_E* code)";
	}
}

/* ---- asynchronous read on a stream --------------------------------------------- */

/* Each warp takes a contiguous slice of the range and reads it with the
 * warp-cooperative call on queue pair (warp % nq). */
__global__ void gpunvme_read_kernel(struct gpunvme_dev_queues q, uint64_t slba, uint64_t nlb,
				    struct gpunvme_dev_buf b, uint64_t off, uint64_t per_warp, int *status,
				    uint64_t timeout_ns)
{
	uint64_t w = (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) / 32;
	uint64_t s0 = w * per_warp;
	if (s0 >= nlb)
		return;
	uint64_t n = nlb - s0 < per_warp ? nlb - s0 : per_warp;
	int rc = gpunvme_dev_rw_warp(&q, (uint32_t)(w % q.nq), GPUNVME_CMD_READ, slba + s0, n, &b,
				     off + (s0 << q.lba_shift), timeout_ns);
	if (rc && (threadIdx.x & 31) == 0)
		atomicCAS(status, 0, rc);
}

int gpunvme_gpu_read_async(struct gpunvme_gpu_queues *g, uint64_t slba, uint64_t nlb, struct gpunvme_gpu_buf *b,
			   uint64_t off, int *d_status, void *stream, uint64_t timeout_ns)
{
	const struct gpunvme_dev_queues *q = &g->desc;
	if (!nlb || slba >= q->nsze || nlb > q->nsze - slba)
		return gpunvme_set_error(-ERANGE, "blocks %llu+%llu are outside the namespace (%llu blocks)",
					 (unsigned long long)slba, (unsigned long long)nlb, (unsigned long long)q->nsze);
	if (off > b->desc.len || (nlb << q->lba_shift) > b->desc.len - off)
		return gpunvme_set_error(-EINVAL, "%llu blocks do not fit the buffer (%llu bytes) at offset %llu",
					 (unsigned long long)nlb, (unsigned long long)b->desc.len,
					 (unsigned long long)off);
	/* enough warps to keep every queue busy, each with whole commands */
	uint64_t chunks = (nlb + q->max_blocks - 1) / q->max_blocks;
	uint64_t warps = (uint64_t)q->nq * (g->depth / 32 > 0 ? g->depth / 32 : 1);
	if (warps > chunks)
		warps = chunks;
	uint64_t per_warp = ((chunks + warps - 1) / warps) * q->max_blocks;
	warps = (nlb + per_warp - 1) / per_warp;
	unsigned threads = 128;
	unsigned blocks = (unsigned)((warps * 32 + threads - 1) / threads);
	gpunvme_read_kernel<<<blocks, threads, 0, (cudaStream_t)stream>>>(*q, slba, nlb, b->desc, off, per_warp,
									  d_status, timeout_ns);
	cudaError_t ce = cudaGetLastError();
	return ce == cudaSuccess ? 0 : cuda_err(ce, "launching the read kernel");
}

/* ---- scattered reads ------------------------------------------------------------ */

/*
 * A warp's range as batches of one command per lane (gpunvme_dev_rw_lanes:
 * one admission and one doorbell per batch; the warp polls the CQ, 32
 * entries per round trip, and publishes everything it finds). In
 * gpunvme_dev_rw_warp each lane waits for its own completion, and a poller
 * stops at its own entry: the emulator completes a pass of up to 64
 * commands at once, and the entries after each poller's wait for the next
 * waiter's pause to end (up to 16 us). Image loads showed the workers'
 * queues empty 17 % of each load (GPUNVME_EMU_PROFILE's bursts,
 * bench/results/emu-load-2026-11-28b). GPUNVME_GPU_WARP_BATCH=1 picks this
 * path, for the same-run comparison; a batch is admitted whole, so at most
 * depth - 1 commands.
 *
 * Command k covers blocks [k * row, (k + 1) * row) of the range and lands at
 * off + k * pitch: row = max_blocks and pitch = its bytes for a range
 * contiguous in the buffer, or rows apart (a strided segment, an md
 * member's chunks). A batch's tickets go in lane order, so its commands sit
 * in consecutive SQ entries in row order: the embedded emulator then moves
 * a strided segment's rows with one 2D copy (src/emu_cuda/stage_ring.h).
 */
__device__ static int rw_warp_rows(const struct gpunvme_dev_queues *q, uint32_t qi, uint8_t opc, uint64_t slba,
				   uint64_t nlb, uint64_t per, uint64_t pitch, const struct gpunvme_dev_buf *b, uint64_t off,
				   uint64_t timeout_ns)
{
	const unsigned int full = 0xffffffffu, lane = threadIdx.x & 31u;
	/* rows that overlap in the buffer, or that no command can carry */
	if (qi >= q->nq || !per || per > q->max_blocks || pitch < (per << q->lba_shift))
		return GPUNVME_DEV_EINVAL;
	const uint64_t deadline = gpunvme_dev_now() + timeout_ns;
	const uint64_t nchunks = (nlb + per - 1) / per;
	const uint32_t depth = q->qp[qi].depth;
	const uint64_t batch = depth <= 2u ? 1u : depth - 1u < 32u ? depth - 1u : 32u;
	int err = 0;
	for (uint64_t base = 0; base < nchunks && !err; base += batch) {
		uint64_t now = lane == 0 ? gpunvme_dev_now() : 0;
		now = __shfl_sync(full, now, 0);
		if (now >= deadline)
			return GPUNVME_DEV_ETIMEDOUT; /* nothing of this batch was sent */
		const uint64_t k = base + lane;
		const bool mine = lane < batch && k < nchunks;
		const uint64_t s0 = mine ? k * per : 0;
		const uint32_t n = mine ? (uint32_t)(nlb - s0 < per ? nlb - s0 : per) : 0;
		int rc = gpunvme_dev_rw_lanes(q, qi, opc, slba + s0, n, b, off + (mine ? k * pitch : 0), mine,
					      deadline - now);
		/* the first failure of the batch, by lane order */
		unsigned int bad = __ballot_sync(full, mine && rc != 0);
		if (bad)
			err = __shfl_sync(full, rc, __ffs(bad) - 1);
	}
	return err;
}

static pthread_once_t warp_batch_once = PTHREAD_ONCE_INIT;
static bool warp_batch_on;

static void warp_batch_read(void)
{
	const char *v = getenv("GPUNVME_GPU_WARP_BATCH");
	warp_batch_on = v && !strcmp(v, "1");
}

/* GPUNVME_GPU_WARP_BATCH=1, read once (not at every launch) */
static bool warp_batch(void)
{
	pthread_once(&warp_batch_once, warp_batch_read);
	return warp_batch_on;
}

/* A segment: contiguous (row 0) one lane a command, batched or not; strided
 * always batched, for its rows' order in the SQ (rw_warp_rows). */
__device__ static void read_seg(const struct gpunvme_dev_queues *q, uint64_t w, const struct gpunvme_gpu_seg *sg,
				const struct gpunvme_dev_buf *b, int *status, uint64_t timeout_ns, bool batched)
{
	const uint32_t qi = (uint32_t)(w % q->nq);
	const uint64_t per = q->max_blocks;
	int rc = sg->row ? rw_warp_rows(q, qi, GPUNVME_CMD_READ, sg->slba, sg->nlb, sg->row, sg->pitch, b, sg->off,
					timeout_ns)
		 : batched ? rw_warp_rows(q, qi, GPUNVME_CMD_READ, sg->slba, sg->nlb, per, per << q->lba_shift, b,
					  sg->off, timeout_ns)
			   : gpunvme_dev_rw_warp(q, qi, GPUNVME_CMD_READ, sg->slba, sg->nlb, b, sg->off, timeout_ns);
	if (rc && (threadIdx.x & 31) == 0)
		atomicCAS(status, 0, rc);
}

/* Warps take segments in turn; each segment is at most 32 commands, one per
 * lane (the host cuts them), read with the warp-cooperative call on queue
 * pair (warp % nq). A failed warp goes on with its next segment: the first
 * failure is kept, and the rest of the data still lands. */
__global__ void gpunvme_read_segs_kernel(struct gpunvme_dev_queues q, const struct gpunvme_gpu_seg *segs,
					 uint32_t nseg, struct gpunvme_dev_buf b0, struct gpunvme_dev_buf b1,
					 int *status, uint64_t timeout_ns, bool batched)
{
	uint64_t w = (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) / 32;
	uint64_t nw = (gridDim.x * (uint64_t)blockDim.x) / 32;
	for (uint64_t i = w; i < nseg; i += nw) {
		struct gpunvme_gpu_seg sg = segs[i];
		read_seg(&q, w, &sg, sg.buf ? &b1 : &b0, status, timeout_ns, batched);
	}
}

/* The same with the buffers in a table (bufs[seg.buf]); an index past it
 * is the host's bug, reported rather than read through. */
__global__ void gpunvme_read_segs_table_kernel(struct gpunvme_dev_queues q, const struct gpunvme_gpu_seg *segs,
					       uint32_t nseg, const struct gpunvme_dev_buf *bufs, uint32_t nbuf,
					       int *status, uint64_t timeout_ns, bool batched)
{
	uint64_t w = (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) / 32;
	uint64_t nw = (gridDim.x * (uint64_t)blockDim.x) / 32;
	for (uint64_t i = w; i < nseg; i += nw) {
		struct gpunvme_gpu_seg sg = segs[i];
		if (sg.buf >= nbuf) {
			if ((threadIdx.x & 31) == 0)
				atomicCAS(status, 0, GPUNVME_DEV_EINVAL);
			continue;
		}
		const struct gpunvme_dev_buf b = bufs[sg.buf];
		read_seg(&q, w, &sg, &b, status, timeout_ns, batched);
	}
}

#define SEGS_THREADS 128u

/* Blocks of SEGS_THREADS for a scattered read: one warp per 32 queue
 * entries keeps every queue full; more would only wait for admission. */
static unsigned segs_blocks(const struct gpunvme_gpu_queues *g, uint32_t nseg)
{
	uint64_t warps = (uint64_t)g->nq * (g->depth / 32 > 0 ? g->depth / 32 : 1);
	if (warps > nseg)
		warps = nseg;
	return (unsigned)((warps * 32 + SEGS_THREADS - 1) / SEGS_THREADS);
}

int gpunvme_gpu_read_segs_async(struct gpunvme_gpu_queues *g, const struct gpunvme_gpu_seg *d_segs, uint32_t nseg,
				struct gpunvme_gpu_buf *buf0, struct gpunvme_gpu_buf *buf1, int *d_status, void *stream,
				uint64_t timeout_ns)
{
	if (!g || !buf0 || !d_status || (nseg && !d_segs))
		return gpunvme_set_error(-EINVAL, "scattered read: bad arguments");
	if (!nseg)
		return 0;
	gpunvme_read_segs_kernel<<<segs_blocks(g, nseg), SEGS_THREADS, 0, (cudaStream_t)stream>>>(
		g->desc, d_segs, nseg, buf0->desc, buf1 ? buf1->desc : buf0->desc, d_status, timeout_ns,
		warp_batch());
	cudaError_t ce = cudaGetLastError();
	return ce == cudaSuccess ? 0 : cuda_err(ce, "launching the scattered read kernel");
}

int gpunvme_gpu_read_segs_table_async(struct gpunvme_gpu_queues *g, const struct gpunvme_gpu_seg *d_segs,
				      uint32_t nseg, struct gpunvme_gpu_buf *const *bufs, uint32_t nbuf, int *d_status,
				      void *stream, uint64_t timeout_ns)
{
	if (!g || !bufs || !nbuf || !d_status || (nseg && !d_segs))
		return gpunvme_set_error(-EINVAL, "scattered read: bad arguments");
	if (!nseg)
		return 0;
	struct gpunvme_dev_buf *h = (struct gpunvme_dev_buf *)malloc(nbuf * sizeof(*h));
	if (!h)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	for (uint32_t i = 0; i < nbuf; i++) {
		if (!bufs[i]) {
			free(h);
			return gpunvme_set_error(-EINVAL, "scattered read: buffer %u of %u missing", i, nbuf);
		}
		h[i] = bufs[i]->desc;
	}
	/* the table in stream order, as the segments: a pageable source is
	 * staged by the driver before cudaMemcpyAsync returns, so h may go at
	 * once; the allocation is freed after the kernel, in stream order */
	cudaStream_t s = (cudaStream_t)stream;
	struct gpunvme_dev_buf *d = NULL;
	cudaError_t ce = cudaMallocAsync((void **)&d, nbuf * sizeof(*d), s);
	if (ce == cudaSuccess)
		ce = cudaMemcpyAsync(d, h, nbuf * sizeof(*d), cudaMemcpyHostToDevice, s);
	free(h);
	if (ce != cudaSuccess) {
		if (d)
			cudaFreeAsync(d, s);
		return cuda_err(ce, "uploading the scattered read's buffer table");
	}
	gpunvme_read_segs_table_kernel<<<segs_blocks(g, nseg), SEGS_THREADS, 0, s>>>(g->desc, d_segs, nseg, d, nbuf,
										      d_status, timeout_ns, warp_batch());
	ce = cudaGetLastError();
	cudaFreeAsync(d, s);
	return ce == cudaSuccess ? 0 : cuda_err(ce, "launching the scattered read kernel");
}
