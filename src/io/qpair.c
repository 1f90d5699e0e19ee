/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * CPU data path: one queue pair per thread, no locks. User requests of any
 * size are split into commands of at most max_xfer bytes (MDTS); command
 * ids come from a free list and index a table holding each command's PRP
 * list pages; completions are reaped in bulk with one head doorbell write.
 *
 * Over NVMe/TCP (c->fab) the same commands are built; instead of the SQ
 * ring and doorbell they go to the queue's connection as capsules
 * (nvmf_queue_submit, data by SGL from the request's buffer), and
 * completions come from nvmf_queue_reap instead of the CQ ring. A command
 * past its deadline there kills the connection (nothing can land later),
 * every command in flight fails, and the next submission reconnects.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "ctrl/ctrl.h"

#define MAX_LIST_PAGES 4  /* per command: 2 MiB at 4 KiB pages needs 2 */

struct io_req {
	gpunvme_cb cb;
	void *arg;
	int err;
	uint16_t status;
	uint32_t dw0;
	uint32_t inflight;       /* commands submitted and not completed */
	uint8_t opc;
	uint32_t nsid;
	uint8_t *buf;            /* what remains to submit */
	uint64_t slba, nlb;
	uint32_t lba_shift, max_blocks;
	/* The buffer's mapping, owned by the request for its whole life: its
	 * later commands (waiting for free ids) build PRPs from it, never from
	 * a cache another request may have replaced since. Looked up again
	 * when an allocation was freed meanwhile (dma_gen moved). */
	struct dma_alloc dma;
	uint64_t dma_gen;
	bool waiting;            /* linked in the wait FIFO */
	struct io_req *next;     /* free list or wait FIFO */
};

/* A command in flight: either a whole request that fit in one command (the
 * fast path: callback kept here, no io_req) or one part of an io_req. */
enum { CMD_FREE = 0, CMD_SINGLE, CMD_PART };

struct io_cmd {
	uint8_t state;
	bool timed_out;
	struct io_req *req;      /* CMD_PART */
	gpunvme_cb cb;           /* CMD_SINGLE */
	void *arg;
	uint64_t deadline;       /* ticks */
};

struct gpunvme_qpair {
	struct gpunvme_ctrl *c;
	uint16_t qid;
	uint32_t depth;
	struct gpunvme_ring ring; /* SQ/CQ on the queue core (gpunvme/queue.h) */
	struct nvmf_queue *fq;    /* fabrics: the connection instead of the ring */
	uint64_t rx_seen, rx_tick; /* fabrics: bytes received at the last check, and when they moved */
	uint16_t *free_cids;
	uint32_t nfree;
	struct io_cmd *cmds;
	uint8_t *lists;          /* list pages: lp per command */
	uint64_t *list_iova;
	uint32_t lp;
	struct io_req *reqs, *free_reqs, *wait_head, *wait_tail;
	uint32_t outstanding;
	uint64_t timeout_ticks, next_check;
	uint32_t timeout_ms;
	struct dma_alloc cache;  /* last DMA allocation looked up, valid for cache_gen;
				  * only a lookup shortcut: requests keep copies */
	uint64_t cache_gen;
	const struct gpunvme_ns *ns_cache;
	bool ext_rings;          /* SQ/CQ in the caller's memory (gpunvme_qpair_create_in) */
};

/* ---- time ----------------------------------------------------------------------- */

/* Command deadlines use the TSC where there is one: a few instructions per
 * submit instead of a clock_gettime call. Calibrated once per process. */
static uint64_t ticks_per_ms = 1000000;

static inline uint64_t ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
	return __rdtsc();
#else
	return gpunvme_now_ns();
#endif
}

static void calibrate(void)
{
#if defined(__x86_64__) || defined(__i386__)
	uint64_t t0 = gpunvme_now_ns(), c0 = __rdtsc();
	struct timespec ts = { 0, 2000000 };
	nanosleep(&ts, NULL);
	uint64_t t1 = gpunvme_now_ns(), c1 = __rdtsc();
	if (t1 > t0 && c1 > c0)
		ticks_per_ms = (c1 - c0) * 1000000ull / (t1 - t0);
#endif
}

static pthread_once_t calib_once = PTHREAD_ONCE_INIT;

/* ---- create / destroy ---------------------------------------------------------- */

static void reset_ring_state(struct gpunvme_qpair *qp)
{
	if (qp->ring.sq)
		gpunvme_ring_reset(&qp->ring);
	/* at most depth - 1 commands in flight: a full SQ keeps one slot
	 * empty (§4.1.1), so CIDs never outnumber usable SQ slots */
	qp->nfree = 0;
	for (uint32_t i = qp->depth - 1; i-- > 0;)
		qp->free_cids[qp->nfree++] = (uint16_t)i;
	for (uint32_t i = 0; i < qp->depth; i++)
		qp->cmds[i] = (struct io_cmd){ 0 };
}

static void free_mem(struct gpunvme_qpair *qp)
{
	struct gpunvme_ctrl *c = qp->c;
	nvmf_queue_close(qp->fq);
	if (!qp->ext_rings) {
		gpunvme_dma_free(c, qp->ring.sq);
		gpunvme_dma_free(c, qp->ring.cq);
	}
	gpunvme_dma_free(c, qp->lists);
	free(qp->list_iova);
	free(qp->free_cids);
	free(qp->cmds);
	free(qp->reqs);
	free(qp);
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

static int qpair_create(struct gpunvme_ctrl *c, uint32_t depth, void *rings, size_t rings_len,
			struct gpunvme_qpair **out);

int gpunvme_qpair_create(struct gpunvme_ctrl *c, uint32_t depth, struct gpunvme_qpair **out)
{
	return qpair_create(c, depth, NULL, 0, out);
}

int gpunvme_qpair_create_in(struct gpunvme_ctrl *c, uint32_t depth, void *rings, size_t len,
			    struct gpunvme_qpair **out)
{
	if (!rings)
		return gpunvme_set_error(-EINVAL, "qpair_create_in: no ring memory");
	return qpair_create(c, depth, rings, len, out);
}

static int qpair_create(struct gpunvme_ctrl *c, uint32_t depth, void *rings, size_t rings_len,
			struct gpunvme_qpair **out)
{
	int rc;
	if (!c || !out)
		return gpunvme_set_error(-EINVAL, "qpair_create: bad arguments");
	pthread_once(&calib_once, calibrate);
	if (depth == 0)
		depth = c->mqes < 1024 ? c->mqes : 1024;
	if (depth < 2 || depth > c->mqes)
		return gpunvme_set_error(-EINVAL, "queue depth %u: must be 2..%u (CAP.MQES + 1)", depth, c->mqes);
	struct gpunvme_qpair *qp = calloc(1, sizeof(*qp));
	if (!qp)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	qp->c = c;
	qp->depth = depth;
	qp->lp = gpunvme_prp_list_pages(c->page_size - 4, c->max_xfer, c->page_size);
	if (qp->lp == 0)
		qp->lp = 1; /* Dataset Management ranges live there too */
	if (qp->lp > MAX_LIST_PAGES) {
		uint32_t lp = qp->lp;
		free(qp);
		return gpunvme_set_error(-EINVAL, "transfer size needs %u PRP list pages", lp);
	}
	size_t sq_len = (size_t)depth * sizeof(struct gpunvme_sqe);
	size_t cq_len = (size_t)depth * sizeof(struct gpunvme_cqe);
	if (rings && c->fab) {
		free(qp);
		return gpunvme_set_error(-EOPNOTSUPP, "queue rings in caller memory: a fabrics controller has no "
					 "rings in memory (NVMe/TCP carries commands in capsules)");
	}
	if (rings) {
		/* Tier 3 placement: both rings in memory the caller imported
		 * (device memory), the CQ on the next 4 KiB boundary (queue
		 * base addresses are page aligned, NVMe 2.0 5.4 / 5.5) */
		size_t cq_off = (sq_len + 4095) & ~(size_t)4095;
		uint8_t *r = rings;
		if ((uintptr_t)rings & 4095 || rings_len < cq_off + cq_len) {
			free(qp);
			return gpunvme_set_error(-EINVAL, "queue pair of depth %u in caller memory: needs %zu bytes "
							  "at a 4 KiB aligned address (got %zu at %p)",
						 depth, cq_off + cq_len, rings_len, rings);
		}
		if (!bus_contiguous(c, r, sq_len) || !bus_contiguous(c, r + cq_off, cq_len)) {
			free(qp);
			return gpunvme_set_error(-EINVAL, "queue memory at %p is not DMA memory contiguous on the "
							  "bus (gpunvme_dma_import it first)",
						 rings);
		}
		memset(r, 0, cq_off + cq_len); /* CQ phase tags start at 0 */
		qp->ring.sq = (void *)r;
		qp->ring.cq = (void *)(r + cq_off);
		qp->ext_rings = true;
	} else if (!c->fab) {
		qp->ring.sq = gpunvme_dma_alloc(c, sq_len);
		qp->ring.cq = gpunvme_dma_alloc(c, cq_len);
	}
	qp->ring.depth = depth;
	qp->lists = gpunvme_dma_alloc(c, (size_t)depth * qp->lp * c->page_size);
	qp->list_iova = calloc((size_t)depth * qp->lp, sizeof(uint64_t));
	qp->free_cids = calloc(depth, sizeof(uint16_t));
	qp->cmds = calloc(depth, sizeof(struct io_cmd));
	uint32_t nreqs = depth * 4;
	qp->reqs = calloc(nreqs, sizeof(struct io_req));
	if ((!c->fab && (!qp->ring.sq || !qp->ring.cq)) || !qp->lists || !qp->list_iova || !qp->free_cids || !qp->cmds || !qp->reqs) {
		free_mem(qp);
		return gpunvme_set_error(-ENOMEM, "cannot allocate a queue pair of depth %u", depth);
	}
	for (size_t i = 0; i < (size_t)depth * qp->lp; i++)
		qp->list_iova[i] = gpunvme_dma_iova(c, qp->lists + i * c->page_size);
	for (uint32_t i = 0; i < nreqs; i++) {
		qp->reqs[i].next = qp->free_reqs;
		qp->free_reqs = &qp->reqs[i];
	}
	qp->timeout_ms = c->opts.io_timeout_ms;
	qp->timeout_ticks = (uint64_t)qp->timeout_ms * ticks_per_ms;
	reset_ring_state(qp);

	pthread_mutex_lock(&c->qp_lock);
	uint16_t qid = 0;
	for (uint32_t i = 0; i < c->nr_io_queues; i++) {
		uint32_t q = 1 + (i + (c->fab ? c->qid_next : 0)) % c->nr_io_queues;
		if (!c->qps[q] && !c->qid_gpu[q]) {
			qid = (uint16_t)q;
			c->qid_next = q; /* next search starts after this one */
			break;
		}
	}
	if (!qid) {
		pthread_mutex_unlock(&c->qp_lock);
		free_mem(qp);
		return gpunvme_set_error(-EBUSY, "all %u I/O queue pairs granted by the controller are in use",
					 c->nr_io_queues);
	}
	c->qps[qid] = qp;
	pthread_mutex_unlock(&c->qp_lock);
	qp->qid = qid;
	if (c->fab) {
		/* one TCP connection per queue, Connect to our controller ID */
		rc = nvmf_queue_open(&c->fab->p, qid, depth, c->fab->cntlid, 0, c->fab->ioccsz, &qp->fq, NULL);
	} else {
		gpunvme_ring_init(&qp->ring, qp->ring.sq, qp->ring.cq, c->bus.bar0, qid, c->dstrd, depth);
		rc = ctrl_create_io_queues(c, qid, gpunvme_dma_iova(c, qp->ring.sq), gpunvme_dma_iova(c, qp->ring.cq),
					   depth);
	}
	if (rc) {
		pthread_mutex_lock(&c->qp_lock);
		c->qps[qid] = NULL;
		pthread_mutex_unlock(&c->qp_lock);
		free_mem(qp);
		return rc;
	}
	*out = qp;
	return 0;
}

uint32_t gpunvme_io_queues_free(struct gpunvme_ctrl *c)
{
	uint32_t n = 0;
	if (!c)
		return 0;
	pthread_mutex_lock(&c->qp_lock);
	for (uint32_t q = 1; q <= c->nr_io_queues; q++)
		n += !c->qps[q] && !c->qid_gpu[q];
	pthread_mutex_unlock(&c->qp_lock);
	return n;
}

/* Fabrics: the queue's connection again, to the current association
 * (a new one when the controller went away with the old). */
static int fabric_reconnect(struct gpunvme_qpair *qp)
{
	struct gpunvme_ctrl *c = qp->c;
	int rc = nvmf_queue_reconnect(qp->fq, c->fab->cntlid);
	if (rc == -ECONNREFUSED || rc == -ECONNRESET) {
		/* Connect refused or the connection dropped at once: the
		 * controller may be gone with its admin association */
		if (ctrl_fabric_reassociate(c) == 0)
			rc = nvmf_queue_reconnect(qp->fq, c->fab->cntlid);
	}
	return rc;
}

int qpair_recreate(struct gpunvme_qpair *qp)
{
	reset_ring_state(qp);
	if (qp->fq)
		return fabric_reconnect(qp);
	return ctrl_create_io_queues(qp->c, qp->qid, gpunvme_dma_iova(qp->c, qp->ring.sq), gpunvme_dma_iova(qp->c, qp->ring.cq),
				     qp->depth);
}

/* ---- completion of user requests ---------------------------------------------- */

static void req_finish(struct gpunvme_qpair *qp, struct io_req *r)
{
	struct gpunvme_cpl cpl = { .err = r->err, .status = r->status, .dw0 = r->dw0 };
	gpunvme_cb cb = r->cb;
	void *arg = r->arg;
	r->next = qp->free_reqs;
	qp->free_reqs = r;
	qp->outstanding--;
	if (cb)
		cb(arg, &cpl);
}

/* Fail every command and request (device gone, controller reset). */
void qpair_fail_all(struct gpunvme_qpair *qp, int err)
{
	/* fabrics: close the connection first, so that no data of a command
	 * failed here can land in its buffer afterwards */
	if (qp->fq && qp->outstanding && !nvmf_queue_dead(qp->fq))
		nvmf_queue_kill(qp->fq, err, "commands in flight failed");
	for (uint32_t cid = 0; cid < qp->depth; cid++) {
		struct io_cmd *cmd = &qp->cmds[cid];
		if (cmd->state == CMD_SINGLE && !cmd->timed_out) {
			struct gpunvme_cpl cpl = { .err = err };
			cmd->state = CMD_FREE;
			qp->outstanding--;
			if (cmd->cb)
				cmd->cb(cmd->arg, &cpl);
			continue;
		}
		if (cmd->state != CMD_PART) {
			cmd->state = CMD_FREE;
			cmd->timed_out = false;
			continue;
		}
		struct io_req *r = cmd->req;
		cmd->state = CMD_FREE;
		cmd->req = NULL;
		if (!cmd->timed_out) {
			if (!r->err)
				r->err = err;
			r->nlb = 0;
			if (--r->inflight == 0 && !r->waiting)
				req_finish(qp, r);
		}
		cmd->timed_out = false;
	}
	while (qp->wait_head) {
		struct io_req *r = qp->wait_head;
		qp->wait_head = r->next;
		r->waiting = false;
		if (!r->err)
			r->err = err;
		r->nlb = 0;
		if (r->inflight == 0)
			req_finish(qp, r);
	}
	qp->wait_tail = NULL;
	reset_ring_state(qp);
}

void gpunvme_qpair_destroy(struct gpunvme_qpair *qp)
{
	if (!qp)
		return;
	struct gpunvme_ctrl *c = qp->c;
	/* fabrics: closing the connection deletes the queue (NVMe-oF §3.3) */
	if (!qp->fq && ctrl_check_alive(c, "delete queue pair") == 0)
		ctrl_delete_io_queues(c, qp->qid);
	qpair_fail_all(qp, -ECANCELED);
	pthread_mutex_lock(&c->qp_lock);
	c->qps[qp->qid] = NULL;
	pthread_mutex_unlock(&c->qp_lock);
	free_mem(qp);
}

int gpunvme_qpair_set_timeout(struct gpunvme_qpair *qp, uint32_t ms)
{
	if (!qp || ms == 0)
		return gpunvme_set_error(-EINVAL, "queue pair timeout: %u ms (at least 1)", ms);
	qp->timeout_ms = ms;
	qp->timeout_ticks = (uint64_t)ms * ticks_per_ms;
	return 0;
}

static uint32_t count_expired(const struct gpunvme_qpair *qp)
{
	uint32_t n = 0;
	for (uint32_t cid = 0; cid < qp->depth; cid++)
		n += qp->cmds[cid].state != CMD_FREE && qp->cmds[cid].timed_out;
	return n;
}

int gpunvme_qpair_abort_expired(struct gpunvme_qpair *qp)
{
	if (!qp)
		return gpunvme_set_error(-EINVAL, "abort expired: no queue pair");
	int rc = ctrl_check_alive(qp->c, "abort");
	if (rc)
		return rc;
	for (uint32_t cid = 0; cid < qp->depth; cid++) {
		const struct io_cmd *cmd = &qp->cmds[cid];
		if (cmd->state == CMD_FREE || !cmd->timed_out)
			continue;
		rc = gpunvme_abort(qp->c, qp->qid, (uint16_t)cid, NULL);
		if (rc == -EAGAIN)
			break; /* the Abort Command Limit: the rest is left to a reset */
		if (rc && rc != -EIO)
			return rc; /* the admin queue failed: gone, fatal, timed out */
	}
	/* An Abort's completion says only that the controller will end the
	 * command (§5.1); the command's own completion comes on this queue
	 * pair, which the poll below reaps (freeing its id). */
	const uint64_t deadline = gpunvme_now_ns() + (uint64_t)qp->c->opts.admin_timeout_ms * 1000000u;
	uint32_t left;
	while ((left = count_expired(qp)) > 0 && gpunvme_now_ns() < deadline) {
		rc = gpunvme_qpair_poll(qp, 0);
		if (rc < 0)
			return rc;
		if (rc == 0) {
			struct timespec ts = { 0, 50000 };
			nanosleep(&ts, NULL);
		}
	}
	return (int)left;
}

void gpunvme_qpair_wait(struct gpunvme_qpair *qp, uint32_t max_us)
{
	if (qp && qp->fq && qp->outstanding)
		nvmf_queue_wait(qp->fq, max_us);
}

uint32_t gpunvme_qpair_outstanding(const struct gpunvme_qpair *qp)
{
	return qp->outstanding;
}

/* ---- submission ------------------------------------------------------------------ */

/* The allocation holding [buf, buf + len), copied to *out with the DMA
 * generation it is valid for. Returns 0 or -EFAULT. */
static int lookup_dma(struct gpunvme_qpair *qp, const void *buf, size_t len, struct dma_alloc *out, uint64_t *gen_out)
{
	/* acquire pairs with the release increment in gpunvme_dma_free: an
	 * unchanged generation means no allocation went away since */
	uint64_t gen = __atomic_load_n(&gpunvme_dma_gen, __ATOMIC_ACQUIRE);
	const uint8_t *p = buf;
	*gen_out = gen;
	/* offset first: p beyond the allocation must not wrap the length test */
	if (gen == qp->cache_gen && qp->cache.va && p >= qp->cache.va &&
	    (size_t)(p - qp->cache.va) < qp->cache.len && len <= qp->cache.len - (size_t)(p - qp->cache.va)) {
		*out = qp->cache;
		return 0;
	}
	struct gpunvme_ctrl *c = qp->c;
	pthread_mutex_lock(&c->dma.lock);
	int rc = dma_lookup_user(&c->dma, buf, len, out);
	pthread_mutex_unlock(&c->dma.lock);
	if (rc)
		return -EFAULT;
	qp->cache = *out;
	qp->cache_gen = gen;
	return 0;
}

/* Build and place the next command of r in the SQ. Returns 0 or -errno
 * (the request is then failed by the caller). */
static int submit_one(struct gpunvme_qpair *qp, struct io_req *r, uint64_t now)
{
	struct gpunvme_ctrl *c = qp->c;
	uint16_t cid = qp->free_cids[--qp->nfree];
	struct io_cmd *cmd = &qp->cmds[cid];
	struct gpunvme_sqe capsule;
	struct gpunvme_sqe *e = qp->fq ? &capsule : gpunvme_ring_sqe(&qp->ring);
	uint64_t nlb = r->nlb;
	void *data = NULL;   /* fabrics: the data's host address, length, direction */
	uint32_t data_len = 0;
	int dir = NVMF_DIR_NONE;

	memset(e, 0, sizeof(*e));
	e->opc = r->opc;
	e->cid = cid;
	e->nsid = r->nsid;
	switch (r->opc) {
	case GPUNVME_CMD_READ:
	case GPUNVME_CMD_WRITE: {
		if (nlb > r->max_blocks)
			nlb = r->max_blocks;
		size_t len = (size_t)nlb << r->lba_shift;
		if (qp->fq) {
			/* SGL set by the transport; max_blocks keeps len <= 2 MiB */
			data = r->buf;
			data_len = (uint32_t)len;
			dir = r->opc == GPUNVME_CMD_READ ? NVMF_DIR_C2H : NVMF_DIR_H2C;
			e->rw.slba = r->slba;
			e->rw.nlb = (uint16_t)(nlb - 1);
			r->buf += len;
			break;
		}
		if (__atomic_load_n(&gpunvme_dma_gen, __ATOMIC_ACQUIRE) != r->dma_gen) {
			/* an allocation was freed while this request waited:
			 * never build PRPs from a mapping that may be gone */
			if (lookup_dma(qp, r->buf, (size_t)r->nlb << r->lba_shift, &r->dma, &r->dma_gen)) {
				qp->free_cids[qp->nfree++] = cid;
				return gpunvme_set_error(-EFAULT,
							 "buffer %p was freed while a request on it was queued: free DMA memory only after its I/O completed",
							 (void *)r->buf);
			}
		}
		/* this command's list pages: lp of them, contiguous */
		uint64_t *list_va = (uint64_t *)(void *)(qp->lists + (size_t)cid * qp->lp * c->page_size);
		struct gpunvme_prp_addr src;
		dma_prp_addr(&r->dma, (size_t)(r->buf - r->dma.va), &src);
		int rc = gpunvme_prp_fill(&src, 0, len, c->page_size, list_va, &qp->list_iova[(size_t)cid * qp->lp], qp->lp,
					  &e->prp1, &e->prp2);
		if (rc) {
			qp->free_cids[qp->nfree++] = cid;
			return rc;
		}
		e->rw.slba = r->slba;
		e->rw.nlb = (uint16_t)(nlb - 1);
		r->buf += len;
		break;
	}
	case GPUNVME_CMD_WRITE_ZEROES:
		if (nlb > 65536) /* NLB is a 16-bit 0's based field */
			nlb = 65536;
		e->rw.slba = r->slba;
		e->rw.nlb = (uint16_t)(nlb - 1);
		break;
	case GPUNVME_CMD_DSM: {
		if (nlb > 0xffffffffull) /* a range's length is 32 bits */
			nlb = 0xffffffffull;
		struct gpunvme_dsm_range *rg = (void *)(qp->lists + (size_t)cid * qp->lp * c->page_size);
		rg->cattr = 0;
		rg->nlb = (uint32_t)nlb;
		rg->slba = r->slba;
		e->prp1 = qp->list_iova[(size_t)cid * qp->lp];
		data = rg;
		data_len = sizeof(*rg);
		dir = NVMF_DIR_H2C;
		e->dsm.nr = 0; /* one range */
		e->dsm.attr = GPUNVME_DSM_AD;
		break;
	}
	default: /* Flush: one command, no blocks (r->nlb was set to 1) */
		break;
	}
	if (r->opc != GPUNVME_CMD_FLUSH)
		r->slba += nlb;
	r->nlb -= nlb;
	r->inflight++;
	cmd->state = CMD_PART;
	cmd->req = r;
	cmd->deadline = now + qp->timeout_ticks;
	cmd->timed_out = false;
	if (qp->fq) {
		int rc = nvmf_queue_submit(qp->fq, e, data, data_len, dir);
		if (rc) {
			/* not sent: the request fails here; what else is in
			 * flight on the dead connection fails at the next poll */
			cmd->state = CMD_FREE;
			cmd->req = NULL;
			r->inflight--;
			qp->free_cids[qp->nfree++] = cid;
			return rc;
		}
		return 0;
	}
	gpunvme_ring_sq_push(&qp->ring);
	return 0;
}

/* Submit as much of r as free command ids allow. Returns true when all of
 * it is in the SQ (or it failed and needs no more submissions). */
static bool submit_req(struct gpunvme_qpair *qp, struct io_req *r, uint64_t now)
{
	do {
		if (qp->nfree == 0)
			return false;
		int rc = submit_one(qp, r, now);
		if (rc) {
			r->err = rc;
			r->nlb = 0;
			break;
		}
	} while (r->nlb > 0);
	return true;
}

static inline void ring_sq(struct gpunvme_qpair *qp)
{
	if (qp->fq)
		return; /* capsules went out as they were built */
	gpunvme_ring_sq_doorbell(&qp->ring);
}

static const struct gpunvme_ns *lookup_ns(struct gpunvme_qpair *qp, uint32_t nsid)
{
	const struct gpunvme_ns *ns = qp->ns_cache;
	if (ns && ns->info.nsid == nsid)
		return ns;
	for (uint32_t i = 0; i < qp->c->nns; i++) {
		if (qp->c->ns[i].info.nsid == nsid) {
			qp->ns_cache = &qp->c->ns[i];
			return qp->ns_cache;
		}
	}
	return NULL;
}

static int io_submit(struct gpunvme_qpair *qp, uint8_t opc, uint32_t nsid, const void *buf, uint64_t slba,
		     uint64_t nlb, gpunvme_cb cb, void *arg)
{
	if (!qp)
		return gpunvme_set_error(-EINVAL, "no queue pair");
	const struct gpunvme_ns *ns = NULL;
	struct dma_alloc dma = { 0 };
	uint64_t dma_gen = 0;
	if (opc != GPUNVME_CMD_FLUSH || nsid != GPUNVME_NSID_ALL) {
		ns = lookup_ns(qp, nsid);
		if (!ns)
			return gpunvme_set_error(-ENODEV, "namespace %u does not exist", nsid);
	}
	if (opc != GPUNVME_CMD_FLUSH) {
		if (nlb == 0)
			return gpunvme_set_error(-EINVAL, "a transfer of 0 blocks");
		if (slba >= ns->info.nsze || nlb > ns->info.nsze - slba)
			/* start and count: slba + nlb may not fit 64 bits */
			return gpunvme_set_error(-ERANGE, "%llu blocks at LBA %llu run past the end of namespace %u (%llu blocks)",
						 (unsigned long long)nlb, (unsigned long long)slba, nsid,
						 (unsigned long long)ns->info.nsze);
		if (ns->info.ms)
			return gpunvme_set_error(-ENOTSUP, "namespace %u has metadata (%u bytes per block): not supported",
						 nsid, ns->info.ms);
	}
	if (opc == GPUNVME_CMD_READ || opc == GPUNVME_CMD_WRITE) {
		if (!buf || ((uintptr_t)buf & 3))
			return gpunvme_set_error(-EINVAL, "buffer %p is not dword aligned (NVMe PRPs need 4-byte alignment)",
						 buf);
		if (nlb > (SIZE_MAX >> ns->info.lba_shift))
			return gpunvme_set_error(-EINVAL, "transfer too large");
		if (lookup_dma(qp, buf, (size_t)nlb << ns->info.lba_shift, &dma, &dma_gen))
			return gpunvme_set_error(-EFAULT, "buffer %p + %llu bytes is not inside memory from gpunvme_dma_alloc",
						 buf, (unsigned long long)(nlb << ns->info.lba_shift));
	}
	if (qp->fq && nvmf_queue_dead(qp->fq)) {
		/* the connection dropped: its commands are failed by the
		 * next poll; once none is left, connect again */
		if (qp->outstanding)
			return gpunvme_set_error(nvmf_queue_dead(qp->fq), "%s (poll to fail the %u commands in flight, then "
									   "submit again to reconnect)",
						 nvmf_queue_why(qp->fq), qp->outstanding);
		int rc = fabric_reconnect(qp);
		if (rc)
			return rc;
		reset_ring_state(qp);
	}
	struct io_req *r = qp->free_reqs;
	if (!r)
		return gpunvme_set_error(-EAGAIN, "queue pair has %u requests outstanding: poll first", qp->outstanding);
	qp->free_reqs = r->next;
	r->cb = cb;
	r->arg = arg;
	r->err = 0;
	r->status = 0;
	r->dw0 = 0;
	r->inflight = 0;
	r->opc = opc;
	r->nsid = nsid;
	r->buf = (uint8_t *)(uintptr_t)buf;
	r->slba = slba;
	r->nlb = opc == GPUNVME_CMD_FLUSH ? 1 : nlb;
	r->lba_shift = ns ? ns->info.lba_shift : 0;
	r->max_blocks = ns ? ns->info.max_blocks : 0;
	r->dma = dma;
	r->dma_gen = dma_gen;
	r->waiting = false;
	r->next = NULL;
	qp->outstanding++;
	uint64_t now = ticks();
	uint32_t tail0 = qp->ring.sq_tail;
	if (!qp->wait_head && submit_req(qp, r, now)) {
		if (r->inflight == 0) {
			/* failed before anything went out */
			int rc = r->err;
			r->next = qp->free_reqs;
			qp->free_reqs = r;
			qp->outstanding--;
			return gpunvme_set_error(rc, "cannot build the command's PRPs");
		}
	} else {
		/* keep order: behind earlier waiting requests */
		r->waiting = true;
		if (qp->wait_tail)
			qp->wait_tail->next = r;
		else
			qp->wait_head = r;
		qp->wait_tail = r;
	}
	if (qp->ring.sq_tail != tail0)
		ring_sq(qp);
	return 0;
}

/*
 * Fast path: a read or write that fits in one command and in at most two
 * memory pages of bus-contiguous DMA memory the queue pair has seen before,
 * on the namespace it used last. PRP1 and PRP2 are then enough and the
 * callback rides in the command slot (no io_req). Anything else, including
 * every error, goes through io_submit(), which checks and explains.
 * Returns 0 when submitted, 1 to take the general path.
 */
static inline int rw_fast(struct gpunvme_qpair *qp, uint8_t opc, uint32_t nsid, const void *buf, uint64_t slba,
			  uint64_t nlb, gpunvme_cb cb, void *arg)
{
	if (!qp || qp->fq)
		return 1;
	const struct gpunvme_ns *ns = qp->ns_cache;
	const uint8_t *p = buf;
	if (!ns || ns->info.nsid != nsid || ns->info.ms || nlb - 1 >= ns->info.max_blocks ||
	    slba >= ns->info.nsze || nlb > ns->info.nsze - slba || ((uintptr_t)p & 3) || !qp->nfree || qp->wait_head)
		return 1;
	size_t len = (size_t)nlb << ns->info.lba_shift;
	const struct dma_alloc *a = &qp->cache;
	if (__atomic_load_n(&gpunvme_dma_gen, __ATOMIC_ACQUIRE) != qp->cache_gen || !a->va || p < a->va ||
	    (size_t)(p - a->va) >= a->len || len > a->len - (size_t)(p - a->va) || a->contig < a->len)
		return 1;
	/* PRP1 and PRP2 only, no list page: within two memory pages */
	uint64_t prp1, prp2;
	const struct gpunvme_prp_addr src = { a->iova0 + (uint64_t)(p - a->va), NULL, 0, 0 };
	if (gpunvme_prp_fill(&src, 0, len, qp->c->page_size, NULL, NULL, 0, &prp1, &prp2))
		return 1;
	uint16_t cid = qp->free_cids[--qp->nfree];
	struct io_cmd *cmd = &qp->cmds[cid];
	struct gpunvme_sqe *e = gpunvme_ring_sqe(&qp->ring);
	cmd->state = CMD_SINGLE;
	cmd->cb = cb;
	cmd->arg = arg;
	cmd->deadline = ticks() + qp->timeout_ticks;
	memset(e, 0, sizeof(*e));
	e->opc = opc;
	e->cid = cid;
	e->nsid = nsid;
	e->prp1 = prp1;
	e->prp2 = prp2;
	e->rw.slba = slba;
	e->rw.nlb = (uint16_t)(nlb - 1);
	gpunvme_ring_sq_push(&qp->ring);
	qp->outstanding++;
	ring_sq(qp);
	return 0;
}

int gpunvme_read(struct gpunvme_qpair *qp, uint32_t nsid, void *buf, uint64_t slba, uint64_t nlb, gpunvme_cb cb,
		 void *arg)
{
	if (rw_fast(qp, GPUNVME_CMD_READ, nsid, buf, slba, nlb, cb, arg) == 0)
		return 0;
	return io_submit(qp, GPUNVME_CMD_READ, nsid, buf, slba, nlb, cb, arg);
}

int gpunvme_write(struct gpunvme_qpair *qp, uint32_t nsid, const void *buf, uint64_t slba, uint64_t nlb,
		  gpunvme_cb cb, void *arg)
{
	if (rw_fast(qp, GPUNVME_CMD_WRITE, nsid, buf, slba, nlb, cb, arg) == 0)
		return 0;
	return io_submit(qp, GPUNVME_CMD_WRITE, nsid, buf, slba, nlb, cb, arg);
}

int gpunvme_flush(struct gpunvme_qpair *qp, uint32_t nsid, gpunvme_cb cb, void *arg)
{
	return io_submit(qp, GPUNVME_CMD_FLUSH, nsid, NULL, 0, 0, cb, arg);
}

int gpunvme_write_zeroes(struct gpunvme_qpair *qp, uint32_t nsid, uint64_t slba, uint64_t nlb, gpunvme_cb cb,
			 void *arg)
{
	return io_submit(qp, GPUNVME_CMD_WRITE_ZEROES, nsid, NULL, slba, nlb, cb, arg);
}

int gpunvme_deallocate(struct gpunvme_qpair *qp, uint32_t nsid, uint64_t slba, uint64_t nlb, gpunvme_cb cb,
		       void *arg)
{
	return io_submit(qp, GPUNVME_CMD_DSM, nsid, NULL, slba, nlb, cb, arg);
}

/* ---- completion ---------------------------------------------------------------------- */

static int periodic_check(struct gpunvme_qpair *qp, uint64_t now)
{
	qp->next_check = now + ticks_per_ms;
	int rc = ctrl_check_alive(qp->c, "I/O queue");
	if (rc) {
		qpair_fail_all(qp, rc);
		return rc;
	}
	int done = 0;
	if (qp->fq) {
		/* progress of the connection, for the stall test below */
		uint64_t rx = nvmf_queue_rx_bytes(qp->fq);
		if (rx != qp->rx_seen) {
			qp->rx_seen = rx;
			qp->rx_tick = now;
		}
	}
	for (uint32_t cid = 0; cid < qp->depth; cid++) {
		struct io_cmd *cmd = &qp->cmds[cid];
		if (cmd->state == CMD_FREE || cmd->timed_out || cmd->deadline > now)
			continue;
		if (qp->fq) {
			/* Fabrics: a command waits behind the data of every
			 * command before it on its connection and on the target's
			 * other connections (eight clients sharing one slow link
			 * wait minutes for a whole model), so it times out only
			 * when the connection also moved no byte for
			 * io_timeout_ms: a stalled target, not a busy one. */
			if (now - qp->rx_tick < qp->timeout_ticks)
				return done;
			/* fabrics: end the connection, so no data can land
			 * later, and fail everything that was on it */
			char why[96];
			snprintf(why, sizeof(why), "I/O command timed out after %u ms", qp->c->opts.io_timeout_ms);
			nvmf_queue_kill(qp->fq, -ETIMEDOUT, why);
			uint32_t before = qp->outstanding;
			qpair_fail_all(qp, -ETIMEDOUT);
			gpunvme_set_error(-ETIMEDOUT, "%s", nvmf_queue_why(qp->fq));
			return (int)(before - qp->outstanding);
		}
		/* The command keeps its id (and list pages) until the
		 * controller answers after all: it may still DMA. */
		cmd->timed_out = true;
		if (cmd->state == CMD_SINGLE) {
			struct gpunvme_cpl cpl = { .err = -ETIMEDOUT };
			qp->outstanding--;
			done++;
			if (cmd->cb)
				cmd->cb(cmd->arg, &cpl);
			continue;
		}
		struct io_req *r = cmd->req;
		if (!r->err)
			r->err = -ETIMEDOUT;
		r->nlb = 0;
		if (--r->inflight == 0 && !r->waiting) {
			req_finish(qp, r);
			done++;
		}
	}
	if (done)
		gpunvme_set_error(-ETIMEDOUT, "I/O command timed out after %u ms", qp->timeout_ms);
	return done;
}

/* One completion, from the CQ ring or a connection: 1 when a user request
 * finished with it. err: a transport failure (fabrics), else 0. */
static int on_cpl(struct gpunvme_qpair *qp, uint16_t cid, uint16_t st, uint32_t dw0, int err)
{
	struct io_cmd *cmd = cid < qp->depth ? &qp->cmds[cid] : NULL;
	if (!cmd || cmd->state == CMD_FREE)
		return 0; /* not ours: a controller bug, ignored */
	uint8_t state = cmd->state;
	cmd->state = CMD_FREE;
	qp->free_cids[qp->nfree++] = cid;
	if (cmd->timed_out) {
		cmd->timed_out = false; /* answered late: id reusable now */
		return 0;
	}
	if (!err && st)
		err = -EIO;
	if (state == CMD_SINGLE) {
		struct gpunvme_cpl cpl = { .err = err, .status = st, .dw0 = dw0 };
		qp->outstanding--;
		if (cmd->cb)
			cmd->cb(cmd->arg, &cpl);
		return 1;
	}
	struct io_req *r = cmd->req;
	cmd->req = NULL;
	if (err && !r->err) {
		r->err = err;
		r->status = st;
		r->nlb = 0; /* don't submit the rest of a failed request */
	}
	r->dw0 = dw0;
	if (--r->inflight == 0 && r->nlb == 0 && !r->waiting) {
		req_finish(qp, r);
		return 1;
	}
	return 0;
}

/* Fabrics: completions from the connection; a dead connection fails every
 * command that was on it. */
static int reap_fabric(struct gpunvme_qpair *qp, uint32_t max, int *done)
{
	struct nvmf_cpl cpl[64];
	uint32_t want = max && max < 64 ? max : 64;
	int n = nvmf_queue_reap(qp->fq, cpl, want, 0);
	/* nothing arrived while commands are in flight: give the CPU away
	 * once, so a target on the same CPUs (loopback, a VM) runs sooner; a
	 * blocking wait here would stall callers that poll several queue
	 * pairs from one thread (the loader) */
	if (n == 0 && qp->outstanding)
		sched_yield();
	for (int i = 0; i < n; i++)
		*done += on_cpl(qp, cpl[i].cqe.cid, gpunvme_cqe_status(cpl[i].cqe.status), cpl[i].cqe.dw0, cpl[i].err);
	if (n < 0 && qp->outstanding) {
		char msg[512];
		snprintf(msg, sizeof(msg), "%s", gpunvme_last_error());
		uint32_t before = qp->outstanding;
		qpair_fail_all(qp, n);
		*done += (int)(before - qp->outstanding);
		gpunvme_set_error(n, "%s", msg);
		return n;
	}
	return 0;
}

int gpunvme_qpair_poll(struct gpunvme_qpair *qp, uint32_t max)
{
	int done = 0;
	uint32_t reaped = 0;
	if (qp->fq) {
		int rc = reap_fabric(qp, max, &done);
		if (rc < 0)
			return rc;
	}
	while (!qp->fq) {
		uint32_t dw3;
		if (!gpunvme_ring_cq_peek(&qp->ring, &dw3))
			break;
		uint32_t dw0 = gpunvme_ring_cq_dw0(&qp->ring);
		gpunvme_ring_cq_pop(&qp->ring);
		reaped++;
		if (on_cpl(qp, gpunvme_dw3_cid(dw3), gpunvme_dw3_status(dw3), dw0, 0) && ++done == (int)max && max)
			break;
	}
	if (reaped)
		gpunvme_ring_cq_doorbell(&qp->ring);
	uint32_t tail0 = qp->ring.sq_tail;
	uint64_t now = 0;
	while (qp->wait_head) {
		struct io_req *r = qp->wait_head;
		if (r->nlb > 0) {
			if (!now)
				now = ticks();
			if (!submit_req(qp, r, now))
				break; /* out of command ids: later */
		}
		/* all of it is in the SQ, or it failed: leave the FIFO */
		qp->wait_head = r->next;
		if (!qp->wait_head)
			qp->wait_tail = NULL;
		r->waiting = false;
		if (r->inflight == 0) {
			req_finish(qp, r);
			done++;
		}
	}
	if (qp->ring.sq_tail != tail0)
		ring_sq(qp);
	/* Deadlines are checked in busy polls too: a queue pair whose every
	 * poll reaps something must still expire a command the controller
	 * never answers (one TSC read per poll, the scan once a millisecond). */
	if (qp->outstanding) {
		if (!now)
			now = ticks();
		if (now >= qp->next_check) {
			int rc = periodic_check(qp, now);
			if (rc < 0)
				return rc;
			done += rc;
		}
	}
	return done;
}

/* ---- synchronous helpers ---------------------------------------------------------- */

struct sync_wait {
	bool done;
	struct gpunvme_cpl cpl;
};

static void sync_cb(void *arg, const struct gpunvme_cpl *cpl)
{
	struct sync_wait *w = arg;
	w->cpl = *cpl;
	w->done = true;
}

static int sync_wait(struct gpunvme_qpair *qp, struct sync_wait *w, uint16_t *status)
{
	while (!w->done) {
		int rc = gpunvme_qpair_poll(qp, 0);
		if (rc < 0 && !w->done)
			return rc;
	}
	if (status)
		*status = w->cpl.status;
	if (w->cpl.err == -EIO && w->cpl.status)
		gpunvme_set_error(-EIO, "%s", gpunvme_status_str(w->cpl.status));
	return w->cpl.err;
}

int gpunvme_read_sync(struct gpunvme_qpair *qp, uint32_t nsid, void *buf, uint64_t slba, uint64_t nlb,
		      uint16_t *status)
{
	struct sync_wait w = { 0 };
	int rc = gpunvme_read(qp, nsid, buf, slba, nlb, sync_cb, &w);
	return rc ? rc : sync_wait(qp, &w, status);
}

int gpunvme_write_sync(struct gpunvme_qpair *qp, uint32_t nsid, const void *buf, uint64_t slba, uint64_t nlb,
		       uint16_t *status)
{
	struct sync_wait w = { 0 };
	int rc = gpunvme_write(qp, nsid, buf, slba, nlb, sync_cb, &w);
	return rc ? rc : sync_wait(qp, &w, status);
}

int gpunvme_flush_sync(struct gpunvme_qpair *qp, uint32_t nsid, uint16_t *status)
{
	struct sync_wait w = { 0 };
	int rc = gpunvme_flush(qp, nsid, sync_cb, &w);
	return rc ? rc : sync_wait(qp, &w, status);
}
