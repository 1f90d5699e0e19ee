/* SPDX-License-Identifier: BSD-2-Clause */
/* Bringing the emulator's controller up by hand on the queue core
 * (emu_bringup.h). */
#include "emu_bringup.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static uint64_t eb_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One step of a bounded wait: a controller pass when the controller is
 * threadless (counted against max_polls), else a short sleep until the
 * deadline. Only bring-up and admin commands wait here, never a hot path.
 * 0: look again; -ETIMEDOUT: give up. */
static int eb_step(struct eb_ctrl *c, unsigned *polls, uint64_t deadline)
{
	if (c->poll) {
		if (*polls >= c->max_polls || c->poll(c->poll_ctx) < 0)
			return -ETIMEDOUT;
		++*polls;
		return 0;
	}
	if (eb_now_ns() > deadline)
		return -ETIMEDOUT;
	struct timespec ts = { 0, 10000 };
	nanosleep(&ts, NULL);
	return 0;
}

uint32_t eb_rd32(const struct eb_ctrl *c, uint32_t off)
{
	return __atomic_load_n((const volatile uint32_t *)(c->bar + off), __ATOMIC_ACQUIRE);
}

void eb_wr32(const struct eb_ctrl *c, uint32_t off, uint32_t v)
{
	__atomic_store_n((volatile uint32_t *)(c->bar + off), v, __ATOMIC_RELEASE);
}

void eb_attach(struct eb_ctrl *c, struct gpunvme_emu *emu)
{
	memset(c, 0, sizeof(*c));
	c->emu = emu;
	c->bar = gpunvme_emu_bar0(emu);
	c->bar_size = gpunvme_emu_bar0_size(emu);
	/* 64-bit CAP as two dwords, low first (§3.1: always allowed) */
	c->cap = (uint64_t)eb_rd32(c, GPUNVME_REG_CAP) | (uint64_t)eb_rd32(c, GPUNVME_REG_CAP + 4) << 32;
	c->dstrd = gpunvme_cap_dstrd(c->cap);
	/* CAP.TO is in 500 ms units; 0 would make every wait fail at once */
	c->timeout_ns = (uint64_t)(gpunvme_cap_to(c->cap) ? gpunvme_cap_to(c->cap) : 1) * 500000000ull;
}

int eb_mem_map(struct eb_ctrl *c, void *mem, uint64_t iova, size_t len)
{
	int rc = gpunvme_emu_dma_map(c->emu, iova, mem, len);
	if (rc) {
		fprintf(stderr, "gpunvme_emu_dma_map: %s\n", strerror(-rc));
		return rc;
	}
	c->mem = (uint8_t *)mem;
	c->iova = iova;
	c->mem_len = len;
	c->mem_used = 0;
	return 0;
}

void *eb_alloc(struct eb_ctrl *c, size_t len, size_t align, uint64_t *iova)
{
	if (!align)
		align = EB_PAGE;
	size_t at = (c->mem_used + align - 1) & ~(align - 1);
	if (at > c->mem_len || len > c->mem_len - at)
		return NULL;
	c->mem_used = at + len;
	/* zeroed even when the region was not: queue memory must start in
	 * phase 0 (§4.6), and a reused region holds old entries */
	memset(c->mem + at, 0, len);
	if (iova)
		*iova = c->iova + at;
	return c->mem + at;
}

uint64_t eb_iova_of(const struct eb_ctrl *c, const void *p)
{
	return c->iova + (uint64_t)((const uint8_t *)p - c->mem);
}

int eb_wait_csts(struct eb_ctrl *c, uint32_t mask, uint32_t want)
{
	uint64_t deadline = eb_now_ns() + c->timeout_ns;
	unsigned polls = 0;
	for (;;) {
		uint32_t csts = eb_rd32(c, GPUNVME_REG_CSTS);
		if ((csts & mask) == want)
			return 0;
		if (want && (csts & GPUNVME_CSTS_CFS))
			return -EIO;
		int rc = eb_step(c, &polls, deadline);
		if (rc)
			return rc;
	}
}

int eb_enable(struct eb_ctrl *c, uint32_t depth)
{
	eb_wr32(c, GPUNVME_REG_CC, 0);
	int rc = eb_wait_csts(c, GPUNVME_CSTS_RDY, 0);
	if (rc) {
		fprintf(stderr, "CSTS.RDY did not clear: %s\n", strerror(-rc));
		return rc;
	}
	uint64_t sq_iova = 0, cq_iova = 0; /* set by eb_alloc when it returns non-NULL */
	struct gpunvme_sqe *sq = (struct gpunvme_sqe *)eb_alloc(c, (size_t)depth * sizeof(*sq), 0, &sq_iova);
	struct gpunvme_cqe *cq = (struct gpunvme_cqe *)eb_alloc(c, (size_t)depth * sizeof(*cq), 0, &cq_iova);
	if (!sq || !cq) {
		fprintf(stderr, "eb_enable: no room for an admin queue of %u entries\n", depth);
		return -ENOMEM;
	}
	gpunvme_ring_init(&c->admin, sq, cq, c->bar, 0, c->dstrd, depth);
	c->cc = gpunvme_admin_enable(c->bar, sq_iova, cq_iova, depth, 12);
	rc = eb_wait_csts(c, GPUNVME_CSTS_RDY, GPUNVME_CSTS_RDY);
	if (rc)
		fprintf(stderr, "CSTS.RDY did not set: %s\n", rc == -EIO ? "controller fatal status" : strerror(-rc));
	return rc;
}

int eb_shutdown(struct eb_ctrl *c)
{
	uint32_t cc = eb_rd32(c, GPUNVME_REG_CC);
	eb_wr32(c, GPUNVME_REG_CC, (cc & ~GPUNVME_CC_SHN_MASK) | GPUNVME_CC_SHN_NORMAL << GPUNVME_CC_SHN_SHIFT);
	return eb_wait_csts(c, GPUNVME_CSTS_SHST_MASK, GPUNVME_SHST_COMPLETE << GPUNVME_CSTS_SHST_SHIFT);
}

int eb_admin(struct eb_ctrl *c, struct gpunvme_sqe *s, uint32_t *dw0)
{
	struct gpunvme_ring *r = &c->admin;
	uint16_t cid = c->next_cid++;
	s->cid = cid;
	*gpunvme_ring_sqe(r) = *s;
	gpunvme_ring_sq_push(r);
	gpunvme_ring_sq_doorbell(r);

	uint64_t deadline = eb_now_ns() + EB_ADMIN_TIMEOUT_NS;
	unsigned polls = 0;
	uint32_t dw3;
	while (!gpunvme_ring_cq_peek(r, &dw3)) {
		if (eb_step(c, &polls, deadline)) {
			fprintf(stderr, "admin %s: no completion\n", gpunvme_opcode_str(1, s->opc));
			return -ETIMEDOUT;
		}
	}
	if (dw0)
		*dw0 = gpunvme_ring_cq_dw0(r);
	gpunvme_ring_cq_pop(r);
	gpunvme_ring_cq_doorbell(r);
	if (gpunvme_dw3_cid(dw3) != cid) {
		fprintf(stderr, "admin %s: completion for CID %u, expected %u\n", gpunvme_opcode_str(1, s->opc),
			gpunvme_dw3_cid(dw3), cid);
		return -EPROTO;
	}
	uint16_t st = gpunvme_dw3_status(dw3);
	if (st)
		fprintf(stderr, "admin %s: %s\n", gpunvme_opcode_str(1, s->opc), gpunvme_status_str(st));
	return st;
}

void eb_sqe_create_cq(struct gpunvme_sqe *s, uint16_t qid, uint32_t depth, uint64_t iova)
{
	memset(s, 0, sizeof(*s));
	s->opc = GPUNVME_ADM_CREATE_CQ;
	s->prp1 = iova;
	s->queue.qid = qid;
	s->queue.qsize = (uint16_t)(depth - 1);
	s->queue.qflags = GPUNVME_Q_PC; /* no IEN: polled */
}

void eb_sqe_create_sq(struct gpunvme_sqe *s, uint16_t qid, uint32_t depth, uint64_t iova, uint16_t cqid)
{
	memset(s, 0, sizeof(*s));
	s->opc = GPUNVME_ADM_CREATE_SQ;
	s->prp1 = iova;
	s->queue.qid = qid;
	s->queue.qsize = (uint16_t)(depth - 1);
	s->queue.qflags = GPUNVME_Q_PC;
	s->queue.cqid_iv = cqid;
}

int eb_create_qp(struct eb_ctrl *c, uint16_t qid, uint32_t depth, struct gpunvme_ring *r)
{
	uint64_t sq_iova = 0, cq_iova = 0; /* set by eb_alloc when it returns non-NULL */
	/* whole pages: PC=1 queues are contiguous from a page start (§5.3) */
	size_t sq_len = ((size_t)depth * sizeof(struct gpunvme_sqe) + EB_PAGE - 1) & ~(size_t)(EB_PAGE - 1);
	size_t cq_len = ((size_t)depth * sizeof(struct gpunvme_cqe) + EB_PAGE - 1) & ~(size_t)(EB_PAGE - 1);
	struct gpunvme_sqe *sq = (struct gpunvme_sqe *)eb_alloc(c, sq_len, 0, &sq_iova);
	struct gpunvme_cqe *cq = (struct gpunvme_cqe *)eb_alloc(c, cq_len, 0, &cq_iova);
	if (!sq || !cq) {
		fprintf(stderr, "eb_create_qp: no room for queue pair %u of %u entries\n", qid, depth);
		return -ENOMEM;
	}
	struct gpunvme_sqe s;
	eb_sqe_create_cq(&s, qid, depth, cq_iova);
	int rc = eb_admin(c, &s, NULL);
	if (rc)
		return rc;
	eb_sqe_create_sq(&s, qid, depth, sq_iova, qid);
	rc = eb_admin(c, &s, NULL);
	if (rc)
		return rc;
	gpunvme_ring_init(r, sq, cq, c->bar, qid, c->dstrd, depth);
	return 0;
}
