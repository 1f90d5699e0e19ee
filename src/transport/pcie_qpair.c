/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The PCIe transport, queue pairs: an SQ and a CQ ring in DMA memory (or
 * in the caller's, gpunvme_qpair_create_in), created on the controller by
 * admin command; commands go into the SQ with PRPs (NVMe 1.4 §4.3) and one
 * tail doorbell write per batch, completions are polled from the CQ by
 * phase tag and released with one head doorbell write (§4.6, §7.2).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "io/qpair.h"
#include "transport/pcie.h"

struct pcie_qpair {
	struct gpunvme_qpair qp;  /* first: the generic queue pair */
	struct gpunvme_ring ring; /* SQ/CQ on the queue core (gpunvme/spec/queue.h) */
	bool ext_rings;           /* SQ/CQ in the caller's memory (gpunvme_qpair_create_in) */
};

static inline struct pcie_qpair *pq_of(struct gpunvme_qpair *qp)
{
	return (struct pcie_qpair *)qp;
}

/* Bytes of [p, p + len) contiguous on the bus from p: the controller reads a
 * queue created with PC=1 (physically contiguous) as one range. */
static bool bus_contiguous(struct gpunvme_ctrl *c, const uint8_t *p, size_t len)
{
	uint64_t a = gpunvme_dma_iova(c, p);
	for (size_t off = 4096 - ((uintptr_t)p & 4095); off < len; off += 4096)
		if (gpunvme_dma_iova(c, p + off) != a + off)
			return false;
	return a != 0;
}

static int pcie_qp_init(struct gpunvme_qpair *qp, void *rings, size_t rings_len)
{
	struct pcie_qpair *pq = pq_of(qp);
	struct gpunvme_ctrl *c = qp->c;
	uint32_t depth = qp->depth;
	size_t sq_len = (size_t)depth * sizeof(struct gpunvme_sqe);
	size_t cq_len = (size_t)depth * sizeof(struct gpunvme_cqe);
	pq->ring.depth = depth;
	if (rings) {
		/* Tier 3 placement: both rings in memory the caller imported
		 * (device memory), the CQ on the next 4 KiB boundary (queue
		 * base addresses are page aligned, NVMe 2.0 5.4 / 5.5) */
		size_t cq_off = (sq_len + 4095) & ~(size_t)4095;
		uint8_t *r = rings;
		if ((uintptr_t)rings & 4095 || rings_len < cq_off + cq_len)
			return gpunvme_set_error(-EINVAL, "queue pair of depth %u in caller memory: needs %zu bytes "
							  "at a 4 KiB aligned address (got %zu at %p)",
						 depth, cq_off + cq_len, rings_len, rings);
		if (!bus_contiguous(c, r, sq_len) || !bus_contiguous(c, r + cq_off, cq_len))
			return gpunvme_set_error(-EINVAL, "queue memory at %p is not DMA memory contiguous on the "
							  "bus (gpunvme_dma_import it first)",
						 rings);
		memset(r, 0, cq_off + cq_len); /* CQ phase tags start at 0 */
		pq->ring.sq = (void *)r;
		pq->ring.cq = (void *)(r + cq_off);
		pq->ext_rings = true;
		return 0;
	}
	pq->ring.sq = gpunvme_dma_alloc(c, sq_len);
	pq->ring.cq = gpunvme_dma_alloc(c, cq_len);
	if (!pq->ring.sq || !pq->ring.cq) {
		gpunvme_dma_free(c, pq->ring.sq);
		gpunvme_dma_free(c, pq->ring.cq);
		return gpunvme_set_error(-ENOMEM, "cannot allocate a queue pair of depth %u", depth);
	}
	return 0;
}

static int pcie_qp_connect(struct gpunvme_qpair *qp)
{
	struct pcie_qpair *pq = pq_of(qp);
	struct gpunvme_ctrl *c = qp->c;
	gpunvme_ring_init(&pq->ring, pq->ring.sq, pq->ring.cq, c->bus.bar0, qp->qid, c->dstrd, qp->depth);
	return pcie_create_io_queues(c, qp->qid, gpunvme_dma_iova(c, pq->ring.sq), gpunvme_dma_iova(c, pq->ring.cq),
				     qp->depth);
}

static void pcie_qp_disconnect(struct gpunvme_qpair *qp)
{
	if (ctrl_check_alive(qp->c, "delete queue pair") == 0)
		pcie_delete_io_queues(qp->c, qp->qid);
}

static void pcie_qp_release(struct gpunvme_qpair *qp)
{
	struct pcie_qpair *pq = pq_of(qp);
	if (!pq->ext_rings) {
		gpunvme_dma_free(qp->c, pq->ring.sq);
		gpunvme_dma_free(qp->c, pq->ring.cq);
	}
}

static void pcie_qp_reset(struct gpunvme_qpair *qp)
{
	struct pcie_qpair *pq = pq_of(qp);
	if (pq->ring.sq)
		gpunvme_ring_reset(&pq->ring);
}

static int pcie_qp_recreate(struct gpunvme_qpair *qp)
{
	struct pcie_qpair *pq = pq_of(qp);
	return pcie_create_io_queues(qp->c, qp->qid, gpunvme_dma_iova(qp->c, pq->ring.sq),
				     gpunvme_dma_iova(qp->c, pq->ring.cq), qp->depth);
}

/* The SQE into the tail slot; the doorbell waits for the batch (kick). */
static int pcie_qp_submit(struct gpunvme_qpair *qp, struct gpunvme_sqe *e, const struct qpair_data *d)
{
	struct pcie_qpair *pq = pq_of(qp);
	struct gpunvme_ctrl *c = qp->c;
	if (d->req) {
		/* PRPs into the request's mapping, through this command's list
		 * pages (lp of them, contiguous) when two entries do not do */
		struct io_req *r = d->req;
		int rc = qpair_req_mapping(qp, r);
		if (rc)
			return rc;
		uint16_t cid = e->cid;
		uint64_t *list_va = (uint64_t *)(void *)(qp->lists + (size_t)cid * qp->lp * c->page_size);
		struct gpunvme_prp_addr src;
		dma_prp_addr(&r->dma, (size_t)((uint8_t *)d->buf - r->dma.va), &src);
		rc = gpunvme_prp_fill(&src, 0, d->len, c->page_size, list_va, &qp->list_iova[(size_t)cid * qp->lp], qp->lp,
				      &e->prp1, &e->prp2);
		if (rc)
			return rc;
	} else if (d->buf) {
		e->prp1 = d->iova; /* within one page: PRP1 alone */
	}
	*gpunvme_ring_sqe(&pq->ring) = *e;
	gpunvme_ring_sq_push(&pq->ring);
	return 0;
}

/* One tail doorbell for the batch: a release store (queue.h), so every SQE
 * written by submit is visible before the controller can see the new tail
 * (the emulator reads the doorbell with an acquire load; MMIO stores stay
 * in order on x86). */
static void pcie_qp_kick(struct gpunvme_qpair *qp)
{
	gpunvme_ring_sq_doorbell(&pq_of(qp)->ring);
}

/*
 * Fast path: a read or write that fits in one command and in at most two
 * memory pages of bus-contiguous DMA memory the queue pair has seen before,
 * on the namespace it used last (qpair_single_ok). PRP1 and PRP2 are then
 * enough, the SQE is built in its slot and the callback rides in the
 * command slot (no io_req). Anything else, including every error, goes
 * through qpair_submit_rw(), which checks and explains.
 * Returns 0 when submitted, 1 to take the general path.
 */
static inline int rw_fast(struct gpunvme_qpair *qp, uint8_t opc, uint32_t nsid, const void *buf, uint64_t slba,
			  uint64_t nlb, gpunvme_cb cb, void *arg)
{
	uint64_t iova;
	size_t len;
	if (!qpair_single_ok(qp, nsid, buf, slba, nlb, &iova, &len))
		return 1;
	/* PRP1 and PRP2 only, no list page: within two memory pages */
	uint64_t prp1, prp2;
	const struct gpunvme_prp_addr src = { iova, NULL, 0, 0 };
	if (gpunvme_prp_fill(&src, 0, len, qp->c->page_size, NULL, NULL, 0, &prp1, &prp2))
		return 1;
	struct gpunvme_ring *ring = &pq_of(qp)->ring;
	uint16_t cid = qpair_single_start(qp, cb, arg);
	struct gpunvme_sqe *e = gpunvme_ring_sqe(ring);
	memset(e, 0, sizeof(*e));
	e->opc = opc;
	e->cid = cid;
	e->nsid = nsid;
	e->prp1 = prp1;
	e->prp2 = prp2;
	e->rw.slba = slba;
	e->rw.nlb = (uint16_t)(nlb - 1);
	gpunvme_ring_sq_push(ring);
	/* release: the SQE above before the tail, as in pcie_qp_kick */
	gpunvme_ring_sq_doorbell(ring);
	return 0;
}

static int pcie_qp_read(struct gpunvme_qpair *qp, uint32_t nsid, void *buf, uint64_t slba, uint64_t nlb,
			gpunvme_cb cb, void *arg)
{
	if (rw_fast(qp, GPUNVME_CMD_READ, nsid, buf, slba, nlb, cb, arg) == 0)
		return 0;
	return qpair_submit_rw(qp, GPUNVME_CMD_READ, nsid, buf, slba, nlb, cb, arg);
}

static int pcie_qp_write(struct gpunvme_qpair *qp, uint32_t nsid, const void *buf, uint64_t slba, uint64_t nlb,
			 gpunvme_cb cb, void *arg)
{
	if (rw_fast(qp, GPUNVME_CMD_WRITE, nsid, buf, slba, nlb, cb, arg) == 0)
		return 0;
	return qpair_submit_rw(qp, GPUNVME_CMD_WRITE, nsid, buf, slba, nlb, cb, arg);
}

/* New CQ entries by phase tag: the peek's acquire load of dword 3 pairs
 * with the controller writing that dword last (§4.6: the phase tag marks
 * the entry new), so the rest of the entry is valid to read. One head
 * doorbell for all of them, a release store: our reads of the consumed
 * entries complete before the controller may reuse their slots. */
static int pcie_qp_reap(struct gpunvme_qpair *qp, uint32_t max)
{
	struct gpunvme_ring *ring = &pq_of(qp)->ring;
	int done = 0;
	uint32_t reaped = 0;
	for (;;) {
		uint32_t dw3;
		if (!gpunvme_ring_cq_peek(ring, &dw3))
			break;
		uint32_t dw0 = gpunvme_ring_cq_dw0(ring);
		gpunvme_ring_cq_pop(ring);
		reaped++;
		if (qpair_complete(qp, gpunvme_dw3_cid(dw3), gpunvme_dw3_status(dw3), dw0, 0) && ++done == (int)max && max)
			break;
	}
	if (reaped)
		gpunvme_ring_cq_doorbell(ring);
	return done;
}

const struct gpunvme_qpair_ops pcie_qpair_ops = {
	.qp_size = sizeof(struct pcie_qpair),
	.init = pcie_qp_init,
	.connect = pcie_qp_connect,
	.disconnect = pcie_qp_disconnect,
	.release = pcie_qp_release,
	.recreate = pcie_qp_recreate,
	.reset = pcie_qp_reset,
	.stop = NULL,    /* the controller was disabled (reset) or is gone */
	.ready = NULL,
	.read = pcie_qp_read,
	.write = pcie_qp_write,
	.submit = pcie_qp_submit,
	.kick = pcie_qp_kick,
	.reap = pcie_qp_reap,
	.timeouts = NULL, /* each command on its own: it may still DMA */
	.wait = NULL,
};
