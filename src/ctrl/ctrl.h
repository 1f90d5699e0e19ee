/* SPDX-License-Identifier: BSD-2-Clause */
/* Controller state shared by the control plane (src/ctrl) and the CPU data
 * path (src/io). */
#ifndef GPUNVME_CTRL_H
#define GPUNVME_CTRL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "bus/bus.h"
#include "gpunvme/gpunvme.h"

/* Longest transfer per command we build, whatever MDTS allows: bounds the
 * PRP list pages reserved per command (2 MiB = 2 list pages of 4 KiB). */
#define GPUNVME_MAX_XFER (2u << 20)

/* Small allocations (under 1 MiB) are carved from 2 MiB heap chunks at
 * 4 KiB granularity: on UIO every bus allocation costs a whole hugepage. */
#define DMA_CHUNK (2u << 20)
#define DMA_PAGE 4096u
#define DMA_CHUNK_PAGES (DMA_CHUNK / DMA_PAGE)

struct dma_heap_chunk {
	uint16_t run[DMA_CHUNK_PAGES];  /* pages of the allocation starting here, 0 = free */
	uint8_t used[DMA_CHUNK_PAGES];  /* page in use */
	uint32_t nused;
};

struct dma_alloc {
	uint8_t *va;
	size_t len;
	void *handle;
	size_t contig;         /* bytes contiguous in bus space from any chunk start */
	uint64_t iova0;        /* bus address of va when contig == len */
	struct dma_heap_chunk *heap; /* non-NULL: a heap chunk holding small allocations */
	size_t handle_off;     /* offset of va within the bus allocation `handle` */
};

struct gpunvme_ns {
	struct gpunvme_ns_info info;
	struct gpunvme_id_ns id;
};

struct gpunvme_ctrl {
	struct gpunvme_bus bus;
	struct gpunvme_opts opts;
	uint64_t cap;
	uint32_t vs;
	uint32_t dstrd;
	uint32_t page_shift, page_size;
	uint32_t mqes;           /* 1-based */
	uint64_t max_xfer;       /* what we send per command */
	uint64_t mdts_bytes;     /* what the controller allows (0 = no limit) */
	uint32_t nr_io_queues;
	uint32_t cc;             /* CC as written at enable */
	struct gpunvme_id_ctrl id;

	struct gpunvme_ns *ns;   /* active namespaces, NSID order */
	uint32_t nns;

	/* admin queue; admin commands are serialised by admin_lock */
	pthread_mutex_t admin_lock;
	struct gpunvme_sqe *asq;
	struct gpunvme_cqe *acq;
	uint32_t adepth, asq_tail, acq_head, acq_phase;
	uint16_t acid;
	uint8_t *abuf;           /* 4 KiB bounce buffer for admin data */

	/* DMA allocations, sorted by address, for va -> iova */
	pthread_mutex_t dma_lock;
	struct dma_alloc *dma;
	size_t ndma, dma_cap;

	/* I/O queue pairs */
	pthread_mutex_t qp_lock;
	struct gpunvme_qpair **qps;  /* indexed by qid, [0] unused */
	uint8_t *qid_gpu;            /* qid owned by GPU queues (src/cuda) */
};

/* Register access. BAR0 is MMIO on hardware and shared memory with the
 * emulator: atomic 32-bit accesses are plain loads/stores on x86 (ordered
 * with respect to other stores, as MMIO needs), and tell the compiler and
 * ThreadSanitizer that another agent reads and writes these words. */
static inline uint32_t ctrl_rd32(const struct gpunvme_ctrl *c, uint32_t off)
{
	return __atomic_load_n((volatile uint32_t *)(c->bus.bar0 + off), __ATOMIC_ACQUIRE);
}
static inline void ctrl_wr32(struct gpunvme_ctrl *c, uint32_t off, uint32_t v)
{
	__atomic_store_n((volatile uint32_t *)(c->bus.bar0 + off), v, __ATOMIC_RELEASE);
}

uint64_t gpunvme_now_ns(void);
int ctrl_check_alive(struct gpunvme_ctrl *c, const char *what);

/* DMA registry (src/dma/dma.c) */
int dma_register(struct gpunvme_ctrl *c, uint8_t *va, size_t len, void *handle);
struct dma_alloc *dma_lookup(struct gpunvme_ctrl *c, const void *p, size_t len);
/* The allocation the caller made that holds [p, p + len): for a heap chunk,
 * narrowed to the small allocation inside it. Caller holds dma_lock. */
int dma_lookup_user(struct gpunvme_ctrl *c, const void *p, size_t len, struct dma_alloc *out);
extern uint64_t gpunvme_dma_gen;
void dma_free_all(struct gpunvme_ctrl *c);

/* queue pairs (src/io/qpair.c) */
int qpair_recreate(struct gpunvme_qpair *qp);
void qpair_fail_all(struct gpunvme_qpair *qp, int err);
int ctrl_create_io_queues(struct gpunvme_ctrl *c, uint16_t qid, uint64_t sq_iova, uint64_t cq_iova,
			  uint32_t depth);
int ctrl_delete_io_queues(struct gpunvme_ctrl *c, uint16_t qid);

#endif
