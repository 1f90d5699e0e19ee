/* SPDX-License-Identifier: BSD-2-Clause */
/* Raw mini-driver for the emulator: arena, registers, queues, admin commands.
 * Deliberately an independent oracle: it keeps its own queue, phase and PRP
 * code rather than the library's queue core (gpunvme/spec/queue.h), so that the
 * emulator's conformance tests do not share the driver's mistakes. */
#include "harness.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/* ---- time ------------------------------------------------------------------ */

uint64_t h_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t h_now_ms(void) { return h_now_us() / 1000u; }

void h_sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000u, .tv_nsec = (long)(ms % 1000u) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ---- arena ------------------------------------------------------------------ */

int h_arena_init(struct h_arena *a, struct gpunvme_emu *emu, uint64_t iova, size_t len)
{
	memset(a, 0, sizeof(*a));
	len = (len + H_PAGE - 1) & ~(size_t)(H_PAGE - 1);
	/* Guard pages on both sides: a controller that translates an address
	 * outside the mapped window onto neighbouring host memory faults here
	 * instead of silently corrupting the test. */
	size_t map_len = len + 2 * H_PAGE;
	void *m = mmap(NULL, map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return -errno;
	if (mprotect((uint8_t *)m + H_PAGE, len, PROT_READ | PROT_WRITE) != 0) {
		int e = -errno;
		munmap(m, map_len);
		return e;
	}
	a->map = m;
	a->map_len = map_len;
	a->base = (uint8_t *)m + H_PAGE;
	a->len = len;
	a->iova = iova;
	a->emu = emu;
	int rc = gpunvme_emu_dma_map(emu, iova, a->base, len);
	if (rc != 0) {
		munmap(m, map_len);
		memset(a, 0, sizeof(*a));
		return rc;
	}
	return 0;
}

void h_arena_fini(struct h_arena *a)
{
	if (!a->map)
		return;
	if (a->emu)
		gpunvme_emu_dma_unmap(a->emu, a->iova);
	munmap(a->map, a->map_len);
	memset(a, 0, sizeof(*a));
}

struct h_buf h_alloc(struct h_arena *a, size_t len, size_t align)
{
	if (align == 0)
		align = H_PAGE;
	size_t off = (a->used + align - 1) & ~(align - 1);
	if (len == 0 || off + len > a->len) {
		fprintf(stderr, "harness: arena out of space (%zu + %zu > %zu)\n", off, len, a->len);
		abort();
	}
	a->used = off + len;
	struct h_buf b = { .va = a->base + off, .iova = a->iova + off, .len = len };
	return b;
}

uint64_t h_iova_of(const struct h_arena *a, const void *va)
{
	return a->iova + (uint64_t)((const uint8_t *)va - a->base);
}

/* ---- registers ---------------------------------------------------------------- */

uint32_t h_rd32(struct h_ctrl *c, uint32_t off)
{
	return __atomic_load_n((volatile uint32_t *)(c->bar + off), __ATOMIC_ACQUIRE);
}

void h_wr32(struct h_ctrl *c, uint32_t off, uint32_t v)
{
	__atomic_store_n((volatile uint32_t *)(c->bar + off), v, __ATOMIC_RELEASE);
}

uint64_t h_rd64(struct h_ctrl *c, uint32_t off)
{
	uint64_t lo = h_rd32(c, off);
	uint64_t hi = h_rd32(c, off + 4);
	return lo | (hi << 32);
}

void h_wr64(struct h_ctrl *c, uint32_t off, uint64_t v)
{
	h_wr32(c, off, (uint32_t)v);
	h_wr32(c, off + 4, (uint32_t)(v >> 32));
}

void h_idle(struct h_ctrl *c, unsigned *spins)
{
	if (c->threadless) {
		gpunvme_emu_poll(c->emu);
		return;
	}
	/* Spin briefly, then yield, then sleep: only 2 cores, and under TSan a
	 * spinning host would starve the emulator's workers. */
	unsigned s = (*spins)++;
	if (s < 64)
		return;
	if (s < 256) {
		sched_yield();
		return;
	}
	struct timespec ts = { 0, 20000 };
	nanosleep(&ts, NULL);
}

int h_wait_reg(struct h_ctrl *c, uint32_t off, uint32_t mask, uint32_t val, unsigned timeout_ms)
{
	uint64_t end = h_now_ms() + timeout_ms;
	unsigned spins = 0;
	for (;;) {
		if ((h_rd32(c, off) & mask) == val)
			return 0;
		if (h_now_ms() > end)
			return -ETIMEDOUT;
		h_idle(c, &spins);
	}
}

/* ---- controller --------------------------------------------------------------- */

static struct h_ctrl *h_open_list;

int h_ctrl_open(struct h_ctrl **out, const struct gpunvme_emu_config *cfg, size_t arena_len)
{
	struct h_ctrl *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->cfg = *cfg;
	int rc = gpunvme_emu_create(cfg, &c->emu);
	if (rc != 0) {
		free(c);
		return rc;
	}
	c->bar = gpunvme_emu_bar0(c->emu);
	c->threadless = cfg->workers == 0;
	rc = h_arena_init(&c->arena, c->emu, H_IOVA_BASE, arena_len ? arena_len : H_ARENA_DEFAULT);
	if (rc != 0) {
		gpunvme_emu_destroy(c->emu);
		free(c);
		return rc;
	}
	c->cap = h_rd64(c, GPUNVME_REG_CAP);
	c->dstrd = gpunvme_cap_dstrd(c->cap);
	c->scratch = h_alloc(&c->arena, 2 * H_PAGE, H_PAGE);
	c->next = h_open_list;
	h_open_list = c;
	*out = c;
	return 0;
}

void h_ctrl_close(struct h_ctrl *c)
{
	if (!c)
		return;
	for (struct h_ctrl **p = &h_open_list; *p; p = &(*p)->next) {
		if (*p == c) {
			*p = c->next;
			break;
		}
	}
	/* Destroy first: it stops the threads, so nothing touches the arena
	 * while it is unmapped. */
	struct gpunvme_emu *emu = c->emu;
	c->arena.emu = NULL;
	gpunvme_emu_destroy(emu);
	h_arena_fini(&c->arena);
	free(c);
}

void h_close_all(void)
{
	while (h_open_list)
		h_ctrl_close(h_open_list);
}

/* A REQUIRE that fails returns from its case early, leaving controllers
 * open: the case runner (check.h) closes them after every case. */
__attribute__((constructor)) static void h_hook_runner(void)
{
	check_after_case = h_close_all;
}

int h_ctrl_up(struct h_ctrl **out, const struct gpunvme_emu_config *cfg)
{
	int rc = h_ctrl_open(out, cfg, 0);
	if (rc != 0)
		return rc;
	rc = h_enable(*out, 0);
	if (rc != 0) {
		h_ctrl_close(*out);
		*out = NULL;
	}
	return rc;
}

void h_cfg(struct gpunvme_emu_config *cfg)
{
	gpunvme_emu_config_init(cfg);
	cfg->idle_sleep_max_us = 100;
}

void h_enable_start(struct h_ctrl *c, uint32_t entries)
{
	if (entries == 0)
		entries = H_ADMIN_ENTRIES;
	if (!c->admin_mem.va || entries > c->admin_entries) {
		size_t sq_bytes = ((size_t)entries * 64 + H_PAGE - 1) & ~(size_t)(H_PAGE - 1);
		size_t cq_bytes = ((size_t)entries * 16 + H_PAGE - 1) & ~(size_t)(H_PAGE - 1);
		c->admin_mem = h_alloc(&c->arena, sq_bytes + cq_bytes, H_PAGE);
		c->admin_entries = entries;
	}
	struct h_qp *q = &c->admin;
	size_t sq_bytes = ((size_t)c->admin_entries * 64 + H_PAGE - 1) & ~(size_t)(H_PAGE - 1);
	q->c = c;
	q->sqid = q->cqid = 0;
	q->sq_entries = q->cq_entries = entries;
	q->sq = c->admin_mem.va;
	q->sq_iova = c->admin_mem.iova;
	q->cq = (struct gpunvme_cqe *)((uint8_t *)c->admin_mem.va + sq_bytes);
	q->cq_iova = c->admin_mem.iova + sq_bytes;
	h_qp_reset(q);

	h_wr32(c, GPUNVME_REG_AQA, GPUNVME_AQA(entries - 1, entries - 1));
	h_wr64(c, GPUNVME_REG_ASQ, q->sq_iova);
	h_wr64(c, GPUNVME_REG_ACQ, q->cq_iova);
	h_wr32(c, GPUNVME_REG_CC, H_CC_DEFAULT | GPUNVME_CC_EN);
}

int h_enable(struct h_ctrl *c, uint32_t entries)
{
	h_enable_start(c, entries);
	/* §7.6.1: wait for RDY; a controller that cannot start reports CFS. */
	uint64_t end = h_now_ms() + H_TIMEOUT_MS + c->cfg.ready_delay_ms;
	unsigned spins = 0;
	for (;;) {
		uint32_t csts = h_rd32(c, GPUNVME_REG_CSTS);
		if (csts == 0xffffffffu)
			return -ENODEV;
		if (gpunvme_csts_cfs(csts))
			return -EIO;
		if (gpunvme_csts_rdy(csts))
			return 0;
		if (h_now_ms() > end)
			return -ETIMEDOUT;
		h_idle(c, &spins);
	}
}

int h_disable(struct h_ctrl *c)
{
	uint32_t cc = h_rd32(c, GPUNVME_REG_CC);
	h_wr32(c, GPUNVME_REG_CC, cc & ~(GPUNVME_CC_EN | GPUNVME_CC_SHN_MASK));
	return h_wait_reg(c, GPUNVME_REG_CSTS, GPUNVME_CSTS_RDY, 0, H_TIMEOUT_MS);
}

int h_shutdown(struct h_ctrl *c)
{
	uint32_t cc = h_rd32(c, GPUNVME_REG_CC) & ~GPUNVME_CC_SHN_MASK;
	h_wr32(c, GPUNVME_REG_CC, cc | (GPUNVME_CC_SHN_NORMAL << GPUNVME_CC_SHN_SHIFT));
	return h_wait_reg(c, GPUNVME_REG_CSTS, GPUNVME_CSTS_SHST_MASK,
			  GPUNVME_SHST_COMPLETE << GPUNVME_CSTS_SHST_SHIFT, H_TIMEOUT_MS);
}

/* ---- queues --------------------------------------------------------------------- */

void h_qp_reset(struct h_qp *q)
{
	memset(q->cq, 0, (size_t)q->cq_entries * sizeof(struct gpunvme_cqe));
	q->sq_tail = q->sq_head = q->cq_head = 0;
	q->phase = 1; /* §4.6: the controller's first pass writes phase 1 */
	q->next_cid = 0;
	q->nstash = 0;
}

int h_sq_push(struct h_qp *q, const struct gpunvme_sqe *sqe)
{
	uint32_t next = (q->sq_tail + 1) % q->sq_entries;
	if (next == q->sq_head) /* §4.1.2: full when tail + 1 == head */
		return -EBUSY;
	memcpy(&q->sq[q->sq_tail], sqe, sizeof(*sqe));
	q->sq_tail = next;
	return 0;
}

void h_sq_ring(struct h_qp *q)
{
	/* RELEASE: the SQE stores above happen-before the controller's fetch. */
	h_wr32(q->c, gpunvme_sq_doorbell(q->sqid, q->c->dstrd), q->sq_tail);
}

int h_submit(struct h_qp *q, struct gpunvme_sqe *sqe)
{
	sqe->cid = q->next_cid++;
	int rc = h_sq_push(q, sqe);
	if (rc != 0)
		return rc;
	h_sq_ring(q);
	return sqe->cid;
}

static inline uint32_t h_cqe_dw3(const struct gpunvme_cqe *e)
{
	/* The phase tag lives in the status word at byte 14. The load covers the
	 * whole dword 3 (bytes 12-15) because that is the unit the controller
	 * release-stores last; an ACQUIRE of the same address is what gives
	 * the happens-before edge (also for ThreadSanitizer, which pairs
	 * atomics by address). */
	return __atomic_load_n((const uint32_t *)(const void *)e + 3, __ATOMIC_ACQUIRE);
}

int h_cq_peek(struct h_qp *q, struct gpunvme_cqe *out)
{
	struct gpunvme_cqe *e = &q->cq[q->cq_head];
	uint32_t dw3 = h_cqe_dw3(e);
	uint16_t status = (uint16_t)(dw3 >> 16);
	if (gpunvme_cqe_phase(status) != q->phase)
		return 0;
	out->dw0 = e->dw0;
	out->dw1 = e->dw1;
	out->sqhd = e->sqhd;
	out->sqid = e->sqid;
	out->cid = (uint16_t)dw3;
	out->status = status;
	if (out->sqid == q->sqid && out->sqhd < q->sq_entries)
		q->sq_head = out->sqhd;
	if (++q->cq_head == q->cq_entries) {
		q->cq_head = 0;
		q->phase ^= 1;
	}
	h_wr32(q->c, gpunvme_cq_doorbell(q->cqid, q->c->dstrd), q->cq_head);
	return 1;
}

unsigned h_cq_pending(struct h_qp *q)
{
	unsigned n = 0;
	uint32_t h = q->cq_head;
	uint16_t ph = q->phase;
	for (uint32_t i = 0; i < q->cq_entries; i++) {
		uint16_t st = (uint16_t)(h_cqe_dw3(&q->cq[h]) >> 16);
		if (gpunvme_cqe_phase(st) != ph)
			break;
		n++;
		if (++h == q->cq_entries) {
			h = 0;
			ph ^= 1;
		}
	}
	return n;
}

int h_cq_wait(struct h_qp *q, struct gpunvme_cqe *out, unsigned timeout_ms)
{
	if (q->nstash) {
		*out = q->stash[0];
		memmove(&q->stash[0], &q->stash[1], (q->nstash - 1) * sizeof(q->stash[0]));
		q->nstash--;
		return 0;
	}
	uint64_t end = h_now_ms() + timeout_ms;
	unsigned spins = 0;
	for (;;) {
		if (h_cq_peek(q, out))
			return 0;
		if (h_now_ms() > end)
			return -ETIMEDOUT;
		h_idle(q->c, &spins);
	}
}

int h_wait_cid(struct h_qp *q, uint16_t cid, struct gpunvme_cqe *out, unsigned timeout_ms)
{
	for (unsigned i = 0; i < q->nstash; i++) {
		if (q->stash[i].cid == cid) {
			*out = q->stash[i];
			memmove(&q->stash[i], &q->stash[i + 1], (q->nstash - i - 1) * sizeof(q->stash[0]));
			q->nstash--;
			return 0;
		}
	}
	uint64_t end = h_now_ms() + timeout_ms;
	unsigned spins = 0;
	for (;;) {
		struct gpunvme_cqe e;
		if (h_cq_peek(q, &e)) {
			if (e.cid == cid) {
				*out = e;
				return 0;
			}
			if (q->nstash == H_STASH) {
				fprintf(stderr, "harness: completion stash overflow on queue %u\n", q->sqid);
				return -ENOSPC;
			}
			q->stash[q->nstash++] = e;
			continue;
		}
		if (h_now_ms() > end)
			return -ETIMEDOUT;
		h_idle(q->c, &spins);
	}
}

int h_cmd(struct h_qp *q, struct gpunvme_sqe *sqe, struct gpunvme_cqe *out)
{
	int cid = h_submit(q, sqe);
	if (cid < 0)
		return cid;
	return h_wait_cid(q, (uint16_t)cid, out, H_TIMEOUT_MS);
}

int h_expect_silence(struct h_qp *q, unsigned ms)
{
	uint64_t end = h_now_ms() + ms;
	unsigned spins = 0;
	while (h_now_ms() <= end) {
		struct gpunvme_cqe e;
		if (h_cq_peek(q, &e)) {
			if (q->nstash < H_STASH)
				q->stash[q->nstash++] = e;
			return 0;
		}
		h_idle(q->c, &spins);
	}
	return 1;
}

/* ---- admin commands ---------------------------------------------------------------- */

static int h_admin(struct h_ctrl *c, struct gpunvme_sqe *s, struct gpunvme_cqe *cqe)
{
	struct gpunvme_cqe dummy;
	return h_cmd(&c->admin, s, cqe ? cqe : &dummy);
}

int h_identify(struct h_ctrl *c, uint8_t cns, uint32_t nsid, uint64_t prp1, struct gpunvme_cqe *cqe)
{
	struct gpunvme_sqe s = { .opc = GPUNVME_ADM_IDENTIFY, .nsid = nsid, .prp1 = prp1 };
	s.identify.cns = cns;
	return h_admin(c, &s, cqe);
}

int h_create_cq(struct h_ctrl *c, uint16_t qid, uint16_t qsize0, uint64_t prp1, uint16_t qflags,
		uint16_t iv, struct gpunvme_cqe *cqe)
{
	struct gpunvme_sqe s = { .opc = GPUNVME_ADM_CREATE_CQ, .prp1 = prp1 };
	s.queue.qid = qid;
	s.queue.qsize = qsize0;
	s.queue.qflags = qflags;
	s.queue.cqid_iv = iv;
	return h_admin(c, &s, cqe);
}

int h_create_sq(struct h_ctrl *c, uint16_t qid, uint16_t qsize0, uint64_t prp1, uint16_t qflags,
		uint16_t cqid, struct gpunvme_cqe *cqe)
{
	struct gpunvme_sqe s = { .opc = GPUNVME_ADM_CREATE_SQ, .prp1 = prp1 };
	s.queue.qid = qid;
	s.queue.qsize = qsize0;
	s.queue.qflags = qflags;
	s.queue.cqid_iv = cqid;
	return h_admin(c, &s, cqe);
}

int h_delete_sq(struct h_ctrl *c, uint16_t qid, struct gpunvme_cqe *cqe)
{
	struct gpunvme_sqe s = { .opc = GPUNVME_ADM_DELETE_SQ };
	s.queue.qid = qid;
	return h_admin(c, &s, cqe);
}

int h_delete_cq(struct h_ctrl *c, uint16_t qid, struct gpunvme_cqe *cqe)
{
	struct gpunvme_sqe s = { .opc = GPUNVME_ADM_DELETE_CQ };
	s.queue.qid = qid;
	return h_admin(c, &s, cqe);
}

int h_get_features(struct h_ctrl *c, uint8_t fid, uint8_t sel, uint32_t cdw11, struct gpunvme_cqe *cqe)
{
	struct gpunvme_sqe s = { .opc = GPUNVME_ADM_GET_FEATURES, .prp1 = c->scratch.iova };
	s.cdw[0] = fid | ((uint32_t)(sel & 7) << 8);
	s.cdw[1] = cdw11;
	return h_admin(c, &s, cqe);
}

int h_set_features(struct h_ctrl *c, uint8_t fid, uint32_t cdw11, struct gpunvme_cqe *cqe)
{
	struct gpunvme_sqe s = { .opc = GPUNVME_ADM_SET_FEATURES, .prp1 = c->scratch.iova };
	s.cdw[0] = fid;
	s.cdw[1] = cdw11;
	return h_admin(c, &s, cqe);
}

int h_get_log(struct h_ctrl *c, uint8_t lid, uint32_t nsid, bool rae, uint32_t len, uint64_t offset,
	      uint64_t prp1, uint64_t prp2, struct gpunvme_cqe *cqe)
{
	/* §5.14: NUMD is a 0's based dword count split into NUMDL (cdw10
	 * 31:16) and NUMDU (cdw11 15:0); the offset is LPOL/LPOU. */
	uint32_t numd = len / 4 - 1;
	struct gpunvme_sqe s = { .opc = GPUNVME_ADM_GET_LOG_PAGE, .nsid = nsid, .prp1 = prp1, .prp2 = prp2 };
	s.cdw[0] = lid | (rae ? 1u << 15 : 0) | ((numd & 0xffff) << 16);
	s.cdw[1] = numd >> 16;
	s.cdw[2] = (uint32_t)offset;
	s.cdw[3] = (uint32_t)(offset >> 32);
	return h_admin(c, &s, cqe);
}

int h_abort(struct h_ctrl *c, uint16_t sqid, uint16_t cid, struct gpunvme_cqe *cqe)
{
	struct gpunvme_sqe s = { .opc = GPUNVME_ADM_ABORT };
	s.cdw[0] = sqid | ((uint32_t)cid << 16);
	return h_admin(c, &s, cqe);
}

int h_aer_submit(struct h_ctrl *c)
{
	struct gpunvme_sqe s = { .opc = GPUNVME_ADM_ASYNC_EVENT };
	return h_submit(&c->admin, &s);
}

int h_id_ctrl(struct h_ctrl *c, struct gpunvme_id_ctrl *out)
{
	struct gpunvme_cqe e;
	memset(c->scratch.va, 0xa5, H_PAGE);
	int rc = h_identify(c, GPUNVME_CNS_CTRL, 0, c->scratch.iova, &e);
	if (rc)
		return rc;
	if (h_st(&e))
		return h_st(&e);
	memcpy(out, c->scratch.va, sizeof(*out));
	return 0;
}

int h_id_ns(struct h_ctrl *c, uint32_t nsid, struct gpunvme_id_ns *out)
{
	struct gpunvme_cqe e;
	memset(c->scratch.va, 0xa5, H_PAGE);
	int rc = h_identify(c, GPUNVME_CNS_NS, nsid, c->scratch.iova, &e);
	if (rc)
		return rc;
	if (h_st(&e))
		return h_st(&e);
	memcpy(out, c->scratch.va, sizeof(*out));
	return 0;
}

int h_smart(struct h_ctrl *c, struct gpunvme_smart_log *out)
{
	struct gpunvme_cqe e;
	memset(c->scratch.va, 0xa5, sizeof(*out));
	int rc = h_get_log(c, GPUNVME_LOG_SMART, GPUNVME_NSID_ALL, false, sizeof(*out), 0, c->scratch.iova, 0, &e);
	if (rc)
		return rc;
	if (h_st(&e))
		return h_st(&e);
	memcpy(out, c->scratch.va, sizeof(*out));
	return 0;
}

int h_qp_create(struct h_ctrl *c, struct h_qp *q, uint16_t qid, uint32_t entries)
{
	memset(q, 0, sizeof(*q));
	size_t sq_bytes = ((size_t)entries * 64 + H_PAGE - 1) & ~(size_t)(H_PAGE - 1);
	size_t cq_bytes = ((size_t)entries * 16 + H_PAGE - 1) & ~(size_t)(H_PAGE - 1);
	struct h_buf sqm = h_alloc(&c->arena, sq_bytes, H_PAGE);
	struct h_buf cqm = h_alloc(&c->arena, cq_bytes, H_PAGE);
	q->c = c;
	q->sqid = q->cqid = qid;
	q->sq_entries = q->cq_entries = entries;
	q->sq = sqm.va;
	q->sq_iova = sqm.iova;
	q->cq = cqm.va;
	q->cq_iova = cqm.iova;
	q->prp_lists = h_alloc(&c->arena, 4 * H_PAGE, H_PAGE);
	h_qp_reset(q);
	struct gpunvme_cqe e;
	int rc = h_create_cq(c, qid, (uint16_t)(entries - 1), q->cq_iova, GPUNVME_Q_PC, 0, &e);
	if (rc)
		return rc;
	if (h_st(&e))
		return h_st(&e);
	rc = h_create_sq(c, qid, (uint16_t)(entries - 1), q->sq_iova, GPUNVME_Q_PC, qid, &e);
	if (rc)
		return rc;
	if (h_st(&e))
		return h_st(&e);
	return 0;
}

int h_qp_delete(struct h_ctrl *c, struct h_qp *q)
{
	struct gpunvme_cqe e;
	int rc = h_delete_sq(c, q->sqid, &e);
	if (rc)
		return rc;
	if (h_st(&e))
		return h_st(&e);
	rc = h_delete_cq(c, q->cqid, &e);
	if (rc)
		return rc;
	return h_st(&e);
}

/* ---- PRPs ---------------------------------------------------------------------------- */

int h_prp_build(uint64_t data_iova, size_t len, void *list_va, uint64_t list_iova, size_t list_len,
		const struct h_prp_knobs *k, uint64_t *prp1, uint64_t *prp2)
{
	static const struct h_prp_knobs none;
	if (!k)
		k = &none;
	*prp1 = data_iova;
	*prp2 = 0;
	size_t first = H_PAGE - (size_t)(data_iova & (H_PAGE - 1));
	if (len <= first)
		return 0;
	size_t rest = len - first;
	uint64_t next = data_iova + first; /* page aligned from here on */
	if (rest <= H_PAGE) {
		/* §4.3: transfer ends in the second page: PRP2 is a data pointer. */
		*prp2 = next + k->prp2_data_add;
		return 0;
	}
	size_t n = (rest + H_PAGE - 1) / H_PAGE;
	uint32_t off = k->list_offset;
	size_t page = 0;
	uint64_t *slot = (uint64_t *)(void *)((uint8_t *)list_va + off);
	*prp2 = list_iova + off;
	uint32_t idx = 0;
	bool chained = false;
	for (;;) {
		if ((page + 1) * H_PAGE > list_len)
			return -ENOSPC;
		size_t cap = (H_PAGE - off) / 8;
		if (n <= cap) {
			for (size_t i = 0; i < n; i++) {
				slot[i] = next + (++idx == k->bad_entry ? k->bad_entry_add : 0);
				next += H_PAGE;
			}
			return (int)page + 1;
		}
		/* §4.3: the last entry of a full list page points to the next
		 * list page. */
		for (size_t i = 0; i + 1 < cap; i++) {
			slot[i] = next + (++idx == k->bad_entry ? k->bad_entry_add : 0);
			next += H_PAGE;
		}
		n -= cap - 1;
		page++;
		slot[cap - 1] = list_iova + page * H_PAGE + (chained ? 0 : k->chain_add);
		chained = true;
		off = 0;
		slot = (uint64_t *)(void *)((uint8_t *)list_va + page * H_PAGE);
	}
}

void h_io_sqe(struct gpunvme_sqe *s, uint8_t opc, uint32_t nsid, uint64_t slba, uint32_t nlb)
{
	memset(s, 0, sizeof(*s));
	s->opc = opc;
	s->nsid = nsid;
	if (opc != GPUNVME_CMD_FLUSH) {
		s->rw.slba = slba;
		s->rw.nlb = (uint16_t)(nlb - 1);
	}
}

int h_io(struct h_qp *q, uint8_t opc, uint32_t nsid, uint64_t slba, uint32_t nlb, uint64_t data_iova,
	 size_t len, struct gpunvme_cqe *cqe)
{
	struct gpunvme_sqe s;
	h_io_sqe(&s, opc, nsid, slba, nlb);
	if (len) {
		int rc = h_prp_build(data_iova, len, q->prp_lists.va, q->prp_lists.iova, q->prp_lists.len,
				     NULL, &s.prp1, &s.prp2);
		if (rc < 0)
			return rc;
	}
	return h_cmd(q, &s, cqe);
}

/* ---- data helpers ----------------------------------------------------------------------- */

static uint32_t h_crc_table[256];
static pthread_once_t h_crc_once = PTHREAD_ONCE_INIT;

static void h_crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t v = i;
		for (int j = 0; j < 8; j++)
			v = (v & 1) ? (v >> 1) ^ 0xedb88320u : v >> 1;
		h_crc_table[i] = v;
	}
}

/* CRC-32 (IEEE 802.3, reflected), usable from several host threads. */
uint32_t h_crc32(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&h_crc_once, h_crc_init);
	const uint8_t *p = buf;
	crc = ~crc;
	for (size_t i = 0; i < len; i++)
		crc = h_crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
	return ~crc;
}

uint64_t h_rand(uint64_t *s)
{
	/* splitmix64: deterministic, seedable, good enough for data patterns. */
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void h_fill(void *buf, size_t len, uint64_t seed)
{
	uint8_t *p = buf;
	uint64_t s = seed;
	while (len >= 8) {
		uint64_t v = h_rand(&s);
		memcpy(p, &v, 8);
		p += 8;
		len -= 8;
	}
	if (len) {
		uint64_t v = h_rand(&s);
		memcpy(p, &v, len);
	}
}

int h_all(const void *buf, size_t len, uint8_t b)
{
	const uint8_t *p = buf;
	for (size_t i = 0; i < len; i++)
		if (p[i] != b)
			return 0;
	return 1;
}
