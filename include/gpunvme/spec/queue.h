/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The queue core: what every user of an NVMe submission/completion queue
 * pair does the same way (NVMe 1.4 §4.1 queues, §4.6 completion entries,
 * §3.1.24-25 doorbells). No allocation, no callbacks, no locks.
 *
 *  - Decoders of completion dword 3 (command id, phase tag, status), for
 *    host and GPU code alike: pollers read dword 3 alone, with acquire
 *    ordering, and decode it with these.
 *  - The PRP builder (§4.3), driven by an address table, for host DMA
 *    memory, pinned memory and GPU memory alike.
 *  - struct gpunvme_ring: one owner's view of a queue pair (tail, head,
 *    phase, doorbells at the controller's stride) and the host's ring
 *    operations, each memory-ordering rule written once here. The admin
 *    queue (src/ctrl) and the CPU queue pairs (src/io) are rings; the GPU
 *    queues (device.cuh) keep tail and head in shared words for many
 *    threads, with the same decoders and doorbell layout.
 *  - The admin queue's part of a controller enable (§7.6.1): what the
 *    library and every test or benchmark that drives a controller by hand
 *    write to AQA/ASQ/ACQ and CC.
 */
#ifndef GPUNVME_QUEUE_H
#define GPUNVME_QUEUE_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "gpunvme/spec/nvme.h"

/* ---- completion dword 3 (§4.6.1, Figure 124): CID 15:0, P 16, SF 31:17 ---- */

GPUNVME_HD uint16_t gpunvme_dw3_cid(uint32_t dw3)
{
	return (uint16_t)dw3;
}

GPUNVME_HD uint32_t gpunvme_dw3_phase(uint32_t dw3)
{
	return (dw3 >> 16) & 1u;
}

/* The status value (Status Field without the phase tag; nvme.h layout). */
GPUNVME_HD uint16_t gpunvme_dw3_status(uint32_t dw3)
{
	return (uint16_t)(dw3 >> 17);
}

/* §4.6: the controller inverts the Phase Tag on each pass through the
 * queue; an entry is new when its tag equals the one the consumer expects
 * (1 on the first pass over zeroed memory). */
GPUNVME_HD bool gpunvme_dw3_new(uint32_t dw3, uint32_t phase)
{
	return gpunvme_dw3_phase(dw3) == phase;
}

/* ---- PRPs (§4.3): the one builder, for host and GPU ----------------------- */

/*
 * Where a buffer's bytes are on the bus: contiguous from iova0 (table NULL),
 * or through a table holding the bus address of each 2^shift-byte piece of
 * the allocation (hugepages on UIO; 64 KiB pieces of pinned host or GPU
 * memory on the GPU path). A piece holds whole memory pages, aligned, so a
 * page never straddles two pieces. base: where the buffer's byte 0 lies in
 * the table's span (a small allocation inside a larger mapping).
 */
struct gpunvme_prp_addr {
	uint64_t iova0;
	const uint64_t *table;
	uint64_t base;
	uint32_t shift;
};

GPUNVME_HD uint64_t gpunvme_prp_addr_of(const struct gpunvme_prp_addr *a, uint64_t off)
{
	if (!a->table)
		return a->iova0 + off;
	uint64_t o = a->base + off;
	return a->table[o >> a->shift] + (o & ((1ull << a->shift) - 1));
}

/* List pages a transfer of len bytes starting at page offset first_off
 * needs (0 when PRP1/PRP2 suffice): a full page holds page/8 - 1 data
 * entries and a chain pointer, the last one page/8. */
GPUNVME_HD uint32_t gpunvme_prp_list_pages(uint64_t first_off, uint64_t len, uint32_t page_size)
{
	if (len == 0 || len <= page_size - first_off)
		return 0;
	uint64_t ents = (len - (page_size - first_off) + page_size - 1) / page_size;
	if (ents <= 1)
		return 0; /* PRP2 is the data pointer */
	uint64_t per = page_size / 8;
	if (ents <= per)
		return 1;
	return (uint32_t)(1 + (ents - per + (per - 1) - 1) / (per - 1));
}

/*
 * PRP1/PRP2, and list pages where needed, for len bytes of the buffer from
 * byte off, whose bus address p the caller found already (the GPU path
 * checks its alignment before it takes a queue ticket). List page k is at list_va + k * page_size / 8 entries, bus
 * address list_iova[k]. Returns 0; -EINVAL for len 0 or a start that is not
 * dword aligned (§4.3: a PRP entry's offset has bits 1:0 clear); -E2BIG
 * when more than nlists list pages are needed.
 */
GPUNVME_HD int gpunvme_prp_fill_at(const struct gpunvme_prp_addr *a, uint64_t off, uint64_t p, uint64_t len,
				   uint32_t page_size, uint64_t *list_va, const uint64_t *list_iova, uint32_t nlists,
				   uint64_t *prp1, uint64_t *prp2)
{
	const uint64_t ps = page_size;
	if (len == 0)
		return -EINVAL;
	if (p & 3)
		return -EINVAL;
	*prp1 = p;
	*prp2 = 0;
	uint64_t first = ps - (p & (ps - 1));
	if (len <= first)
		return 0;
	uint64_t o = off + first, rest = len - first;
	if (rest <= ps) {
		/* the transfer ends in the second page: PRP2 points at it */
		*prp2 = gpunvme_prp_addr_of(a, o);
		return 0;
	}
	/* PRP2 points to a list; when more entries remain than a page holds,
	 * its last entry chains to the next list page */
	if (nlists == 0)
		return -E2BIG;
	const uint32_t per = page_size / 8;
	uint32_t page = 0, i = 0;
	uint64_t *list = list_va;
	*prp2 = list_iova[0];
	while (rest > 0) {
		if (i == per - 1 && rest > ps) {
			if (++page >= nlists)
				return -E2BIG;
			list[i] = list_iova[page];
			list = list_va + (uint64_t)page * per;
			i = 0;
		}
		list[i++] = gpunvme_prp_addr_of(a, o);
		uint64_t chunk = rest < ps ? rest : ps;
		o += chunk;
		rest -= chunk;
	}
	return 0;
}

/* The same, finding the bus address of byte off itself. */
GPUNVME_HD int gpunvme_prp_fill(const struct gpunvme_prp_addr *a, uint64_t off, uint64_t len, uint32_t page_size,
				uint64_t *list_va, const uint64_t *list_iova, uint32_t nlists, uint64_t *prp1,
				uint64_t *prp2)
{
	return gpunvme_prp_fill_at(a, off, gpunvme_prp_addr_of(a, off), len, page_size, list_va, list_iova, nlists,
				   prp1, prp2);
}

/* ---- a queue pair driven by one owner (host) ---------------------------- */

#if !defined(__CUDA_ARCH__)

struct gpunvme_ring {
	struct gpunvme_sqe *sq;
	struct gpunvme_cqe *cq;
	volatile uint32_t *sq_db, *cq_db;
	uint32_t depth;
	uint32_t sq_tail, cq_head, cq_phase;
};

/* Queue memory must be zeroed before the controller learns of it (the
 * first pass expects phase 1 over phase-0 memory). */
static inline void gpunvme_ring_init(struct gpunvme_ring *r, struct gpunvme_sqe *sq, struct gpunvme_cqe *cq,
				     volatile uint8_t *bar0, uint16_t qid, uint32_t dstrd, uint32_t depth)
{
	r->sq = sq;
	r->cq = cq;
	r->sq_db = (volatile uint32_t *)(bar0 + gpunvme_sq_doorbell(qid, dstrd));
	r->cq_db = (volatile uint32_t *)(bar0 + gpunvme_cq_doorbell(qid, dstrd));
	r->depth = depth;
	r->sq_tail = r->cq_head = 0;
	r->cq_phase = 1;
}

/* After a controller reset or queue re-creation: empty again. */
static inline void gpunvme_ring_reset(struct gpunvme_ring *r)
{
	memset(r->sq, 0, (size_t)r->depth * sizeof(*r->sq));
	memset(r->cq, 0, (size_t)r->depth * sizeof(*r->cq));
	r->sq_tail = r->cq_head = 0;
	r->cq_phase = 1;
}

/* The SQ slot at the tail, to fill before gpunvme_ring_sq_push. The caller
 * keeps at most depth - 1 entries outstanding (§4.1.1: a full queue leaves
 * one slot empty). */
static inline struct gpunvme_sqe *gpunvme_ring_sqe(struct gpunvme_ring *r)
{
	return &r->sq[r->sq_tail];
}

static inline void gpunvme_ring_sq_push(struct gpunvme_ring *r)
{
	if (++r->sq_tail == r->depth)
		r->sq_tail = 0;
}

/* Release: the SQEs written before are visible to the controller before it
 * can observe the new tail (as Linux's writel; MMIO stores stay in order on
 * x86, and the emulator reads the doorbell with an acquire load). */
static inline void gpunvme_ring_sq_doorbell(struct gpunvme_ring *r)
{
	__atomic_store_n(r->sq_db, r->sq_tail, __ATOMIC_RELEASE);
}

/* Dword 3 of the entry at the head when it is new (true), read with
 * acquire ordering: the rest of the entry, written by the controller
 * before dword 3, is then valid to read. */
static inline bool gpunvme_ring_cq_peek(const struct gpunvme_ring *r, uint32_t *dw3)
{
	const volatile uint32_t *dw = (const volatile uint32_t *)&r->cq[r->cq_head];
	uint32_t v = __atomic_load_n(&dw[3], __ATOMIC_ACQUIRE);
	if (!gpunvme_dw3_new(v, r->cq_phase))
		return false;
	*dw3 = v;
	return true;
}

/* Dword 0 (command specific) of the entry at the head, after a peek. */
static inline uint32_t gpunvme_ring_cq_dw0(const struct gpunvme_ring *r)
{
	return ((const volatile uint32_t *)&r->cq[r->cq_head])[0];
}

/* Consume the entry at the head (not yet told to the controller). */
static inline void gpunvme_ring_cq_pop(struct gpunvme_ring *r)
{
	if (++r->cq_head == r->depth) {
		r->cq_head = 0;
		r->cq_phase ^= 1;
	}
}

/* Release: our reads of the consumed entries complete before the
 * controller may reuse their slots. */
static inline void gpunvme_ring_cq_doorbell(struct gpunvme_ring *r)
{
	__atomic_store_n(r->cq_db, r->cq_head, __ATOMIC_RELEASE);
}

/* ---- bringing a controller up (§7.6.1 steps 3-6) ------------------------- */

/* CC for an enable: NVM command set, host pages of 2^page_shift bytes,
 * round robin, 64-byte SQEs and 16-byte CQEs (the sizes §4.2/§4.6 fix). */
static inline uint32_t gpunvme_cc_enable(uint32_t page_shift)
{
	return GPUNVME_CC_EN | (0u << GPUNVME_CC_CSS_SHIFT) | ((page_shift - 12) << GPUNVME_CC_MPS_SHIFT) |
	       (0u << GPUNVME_CC_AMS_SHIFT) | (6u << GPUNVME_CC_IOSQES_SHIFT) | (4u << GPUNVME_CC_IOCQES_SHIFT);
}

/*
 * With CC.EN = 0 and CSTS.RDY = 0: the admin queue's size and bus
 * addresses, then CC.EN = 1 (returned, so the caller can keep it for the
 * shutdown). The caller then waits, bounded by CAP.TO, for CSTS.RDY = 1 or
 * CSTS.CFS. The ring's memory must be zeroed (gpunvme_ring_reset).
 */
static inline uint32_t gpunvme_admin_enable(volatile uint8_t *bar0, uint64_t asq, uint64_t acq, uint32_t depth,
					    uint32_t page_shift)
{
	volatile uint32_t *r = (volatile uint32_t *)bar0;
	__atomic_store_n(&r[GPUNVME_REG_AQA / 4], GPUNVME_AQA(depth - 1, depth - 1), __ATOMIC_RELAXED);
	/* 64-bit registers as two 32-bit writes, low first (§3.1: 32-bit
	 * accesses are always allowed; not every root complex does 64) */
	__atomic_store_n(&r[GPUNVME_REG_ASQ / 4], (uint32_t)asq, __ATOMIC_RELAXED);
	__atomic_store_n(&r[GPUNVME_REG_ASQ / 4 + 1], (uint32_t)(asq >> 32), __ATOMIC_RELAXED);
	__atomic_store_n(&r[GPUNVME_REG_ACQ / 4], (uint32_t)acq, __ATOMIC_RELAXED);
	__atomic_store_n(&r[GPUNVME_REG_ACQ / 4 + 1], (uint32_t)(acq >> 32), __ATOMIC_RELAXED);
	uint32_t cc = gpunvme_cc_enable(page_shift);
	/* release: the zeroed queue memory and the registers above are visible
	 * before the controller can see EN (it reads them on the 0 -> 1 edge) */
	__atomic_store_n(&r[GPUNVME_REG_CC / 4], cc, __ATOMIC_RELEASE);
	return cc;
}

#endif /* !__CUDA_ARCH__ */

#endif
