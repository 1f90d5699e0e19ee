/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * CPU data path: one queue pair per thread, no locks. User requests of any
 * size are split into commands of at most max_xfer bytes (MDTS); command
 * ids come from a free list and index a table holding each command's list
 * pages; the transport (ctrl/transport.h: qp->ops) puts each command on
 * its queue and reaps completions, which land in qpair_complete (qpair.h).
 * This file does not know what carries the commands.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/qpair.h"

#define MAX_LIST_PAGES 4  /* per command: 2 MiB at 4 KiB pages needs 2 */

/* ---- time ----------------------------------------------------------------------- */

uint64_t qpair_ticks_per_ms = 1000000;

static void calibrate(void)
{
#if defined(__x86_64__) || defined(__i386__)
	uint64_t t0 = gpunvme_now_ns(), c0 = __rdtsc();
	struct timespec ts = { 0, 2000000 };
	nanosleep(&ts, NULL);
	uint64_t t1 = gpunvme_now_ns(), c1 = __rdtsc();
	if (t1 > t0 && c1 > c0)
		qpair_ticks_per_ms = (c1 - c0) * 1000000ull / (t1 - t0);
#endif
}

static pthread_once_t calib_once = PTHREAD_ONCE_INIT;

/* ---- create / destroy ---------------------------------------------------------- */

void qpair_reset_state(struct gpunvme_qpair *qp)
{
	if (qp->ops->reset)
		qp->ops->reset(qp);
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
	qp->ops->release(qp);
	gpunvme_dma_free(c, qp->lists);
	free(qp->list_iova);
	free(qp->free_cids);
	free(qp->cmds);
	free(qp->reqs);
	free(qp);
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
	const struct gpunvme_qpair_ops *ops = c->tr->qp;
	struct gpunvme_qpair *qp = calloc(1, ops->qp_size);
	if (!qp)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	qp->c = c;
	qp->ops = ops;
	qp->depth = depth;
	qp->lp = gpunvme_prp_list_pages(c->page_size - 4, c->max_xfer, c->page_size);
	if (qp->lp == 0)
		qp->lp = 1; /* Dataset Management ranges live there too */
	if (qp->lp > MAX_LIST_PAGES) {
		uint32_t lp = qp->lp;
		free(qp);
		return gpunvme_set_error(-EINVAL, "transfer size needs %u PRP list pages", lp);
	}
	if ((rc = ops->init(qp, rings, rings_len))) {
		free(qp);
		return rc;
	}
	qp->lists = gpunvme_dma_alloc(c, (size_t)depth * qp->lp * c->page_size);
	qp->list_iova = calloc((size_t)depth * qp->lp, sizeof(uint64_t));
	qp->free_cids = calloc(depth, sizeof(uint16_t));
	qp->cmds = calloc(depth, sizeof(struct io_cmd));
	uint32_t nreqs = depth * 4;
	qp->reqs = calloc(nreqs, sizeof(struct io_req));
	if (!qp->lists || !qp->list_iova || !qp->free_cids || !qp->cmds || !qp->reqs) {
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
	qp->timeout_ticks = (uint64_t)qp->timeout_ms * qpair_ticks_per_ms;
	qpair_reset_state(qp);

	pthread_mutex_lock(&c->qp_lock);
	uint16_t qid = ctrl_pick_qid_locked(c);
	if (!qid) {
		pthread_mutex_unlock(&c->qp_lock);
		free_mem(qp);
		return gpunvme_set_error(-EBUSY, "all %u I/O queue pairs granted by the controller are in use",
					 c->nr_io_queues);
	}
	c->qps[qid] = qp;
	pthread_mutex_unlock(&c->qp_lock);
	qp->qid = qid;
	if ((rc = ops->connect(qp))) {
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

int qpair_recreate(struct gpunvme_qpair *qp)
{
	qpair_reset_state(qp);
	return qp->ops->recreate(qp);
}

/* ---- completion of user requests ---------------------------------------------- */

void qpair_req_finish(struct gpunvme_qpair *qp, struct io_req *r)
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
	/* the transport first makes sure that no data of a command failed
	 * here can land in its buffer afterwards */
	if (qp->ops->stop)
		qp->ops->stop(qp, err);
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
				qpair_req_finish(qp, r);
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
			qpair_req_finish(qp, r);
	}
	qp->wait_tail = NULL;
	qpair_reset_state(qp);
}

void gpunvme_qpair_destroy(struct gpunvme_qpair *qp)
{
	if (!qp)
		return;
	struct gpunvme_ctrl *c = qp->c;
	if (qp->ops->disconnect)
		qp->ops->disconnect(qp);
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
	qp->timeout_ticks = (uint64_t)ms * qpair_ticks_per_ms;
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
	if (qp && qp->ops->wait && qp->outstanding)
		qp->ops->wait(qp, max_us);
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

int qpair_req_mapping(struct gpunvme_qpair *qp, struct io_req *r)
{
	if (__atomic_load_n(&gpunvme_dma_gen, __ATOMIC_ACQUIRE) == r->dma_gen)
		return 0;
	/* an allocation was freed while this request waited: never build
	 * PRPs from a mapping that may be gone */
	if (lookup_dma(qp, r->buf, (size_t)r->nlb << r->lba_shift, &r->dma, &r->dma_gen))
		return gpunvme_set_error(-EFAULT,
					 "buffer %p was freed while a request on it was queued: free DMA memory only after its I/O completed",
					 (void *)r->buf);
	return 0;
}

/* Build the next command of r and hand it to the transport. Returns 0 or
 * -errno (the request is then failed by the caller). */
static int submit_one(struct gpunvme_qpair *qp, struct io_req *r, uint64_t now)
{
	struct gpunvme_ctrl *c = qp->c;
	uint16_t cid = qp->free_cids[--qp->nfree];
	struct io_cmd *cmd = &qp->cmds[cid];
	struct gpunvme_sqe e;
	struct qpair_data d = { 0 };
	uint64_t nlb = r->nlb;

	memset(&e, 0, sizeof(e));
	e.opc = r->opc;
	e.cid = cid;
	e.nsid = r->nsid;
	switch (r->opc) {
	case GPUNVME_CMD_READ:
	case GPUNVME_CMD_WRITE:
		/* max_blocks keeps a command within max_xfer (<= 2 MiB) */
		if (nlb > r->max_blocks)
			nlb = r->max_blocks;
		d.buf = r->buf;
		d.len = (uint32_t)((size_t)nlb << r->lba_shift);
		d.dir = r->opc == GPUNVME_CMD_READ ? QP_DATA_C2H : QP_DATA_H2C;
		d.req = r;
		e.rw.slba = r->slba;
		e.rw.nlb = (uint16_t)(nlb - 1);
		break;
	case GPUNVME_CMD_WRITE_ZEROES:
		if (nlb > 65536) /* NLB is a 16-bit 0's based field */
			nlb = 65536;
		e.rw.slba = r->slba;
		e.rw.nlb = (uint16_t)(nlb - 1);
		break;
	case GPUNVME_CMD_DSM: {
		if (nlb > 0xffffffffull) /* a range's length is 32 bits */
			nlb = 0xffffffffull;
		/* the range lives in the command's first list page */
		struct gpunvme_dsm_range *rg = (void *)(qp->lists + (size_t)cid * qp->lp * c->page_size);
		rg->cattr = 0;
		rg->nlb = (uint32_t)nlb;
		rg->slba = r->slba;
		d.buf = rg;
		d.len = sizeof(*rg);
		d.dir = QP_DATA_H2C;
		d.iova = qp->list_iova[(size_t)cid * qp->lp];
		e.dsm.nr = 0; /* one range */
		e.dsm.attr = GPUNVME_DSM_AD;
		break;
	}
	default: /* Flush: one command, no blocks (r->nlb was set to 1) */
		break;
	}
	int rc = qp->ops->submit(qp, &e, &d);
	if (rc) {
		/* not sent: the request fails here (over a connection, what
		 * else is in flight on it fails at the next poll) */
		qp->free_cids[qp->nfree++] = cid;
		return rc;
	}
	r->buf += d.req ? d.len : 0;
	if (r->opc != GPUNVME_CMD_FLUSH)
		r->slba += nlb;
	r->nlb -= nlb;
	r->inflight++;
	cmd->state = CMD_PART;
	cmd->req = r;
	cmd->deadline = now + qp->timeout_ticks;
	cmd->timed_out = false;
	return 0;
}

/* Submit as much of r as free command ids allow; *sent counts the
 * commands. Returns true when all of it is submitted (or it failed and
 * needs no more submissions). */
static bool submit_req(struct gpunvme_qpair *qp, struct io_req *r, uint64_t now, uint32_t *sent)
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
		++*sent;
	} while (r->nlb > 0);
	return true;
}

static inline void kick(struct gpunvme_qpair *qp, uint32_t sent)
{
	if (sent && qp->ops->kick)
		qp->ops->kick(qp);
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
	if (qp->ops->ready) {
		int rc = qp->ops->ready(qp);
		if (rc)
			return rc;
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
	uint64_t now = qpair_ticks();
	uint32_t sent = 0;
	if (!qp->wait_head && submit_req(qp, r, now, &sent)) {
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
	kick(qp, sent);
	return 0;
}

int qpair_submit_rw(struct gpunvme_qpair *qp, uint8_t opc, uint32_t nsid, const void *buf, uint64_t slba,
		    uint64_t nlb, gpunvme_cb cb, void *arg)
{
	return io_submit(qp, opc, nsid, buf, slba, nlb, cb, arg);
}

/* The transport's entry: one with a fast path for single commands takes
 * it, everything else (and every error) goes through io_submit(), which
 * checks and explains. */
int gpunvme_read(struct gpunvme_qpair *qp, uint32_t nsid, void *buf, uint64_t slba, uint64_t nlb, gpunvme_cb cb,
		 void *arg)
{
	if (!qp)
		return io_submit(qp, GPUNVME_CMD_READ, nsid, buf, slba, nlb, cb, arg);
	return qp->ops->read(qp, nsid, buf, slba, nlb, cb, arg);
}

int gpunvme_write(struct gpunvme_qpair *qp, uint32_t nsid, const void *buf, uint64_t slba, uint64_t nlb,
		  gpunvme_cb cb, void *arg)
{
	if (!qp)
		return io_submit(qp, GPUNVME_CMD_WRITE, nsid, buf, slba, nlb, cb, arg);
	return qp->ops->write(qp, nsid, buf, slba, nlb, cb, arg);
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
	qp->next_check = now + qpair_ticks_per_ms;
	int rc = ctrl_check_alive(qp->c, "I/O queue");
	if (rc) {
		qpair_fail_all(qp, rc);
		return rc;
	}
	if (qp->ops->timeouts)
		return qp->ops->timeouts(qp, now);
	int done = 0;
	for (uint32_t cid = 0; cid < qp->depth; cid++) {
		struct io_cmd *cmd = &qp->cmds[cid];
		if (cmd->state == CMD_FREE || cmd->timed_out || cmd->deadline > now)
			continue;
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
			qpair_req_finish(qp, r);
			done++;
		}
	}
	if (done)
		gpunvme_set_error(-ETIMEDOUT, "I/O command timed out after %u ms", qp->timeout_ms);
	return done;
}

int gpunvme_qpair_poll(struct gpunvme_qpair *qp, uint32_t max)
{
	int done = qp->ops->reap(qp, max);
	if (done < 0)
		return done;
	uint32_t sent = 0;
	uint64_t now = 0;
	while (qp->wait_head) {
		struct io_req *r = qp->wait_head;
		if (r->nlb > 0) {
			if (!now)
				now = qpair_ticks();
			if (!submit_req(qp, r, now, &sent))
				break; /* out of command ids: later */
		}
		/* all of it is submitted, or it failed: leave the FIFO */
		qp->wait_head = r->next;
		if (!qp->wait_head)
			qp->wait_tail = NULL;
		r->waiting = false;
		if (r->inflight == 0) {
			qpair_req_finish(qp, r);
			done++;
		}
	}
	kick(qp, sent);
	/* Deadlines are checked in busy polls too: a queue pair whose every
	 * poll reaps something must still expire a command the controller
	 * never answers (one TSC read per poll, the scan once a millisecond). */
	if (qp->outstanding) {
		if (!now)
			now = qpair_ticks();
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
