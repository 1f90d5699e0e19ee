/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The admin thread's pass: controller registers (CC state machine, CSTS),
 * the admin queue pair, asynchronous events and doorbells of queues that do
 * not exist. NVMe 1.4 §3.1 (registers), §7.6.1 (initialization), §7.6.2
 * (shutdown), §7.3.2 (controller level reset).
 */
#include <errno.h>
#include <stdlib.h>

#include "emu/emu_internal.h"

void emu_raise_event(struct gpunvme_emu *e, uint8_t type, uint8_t info, uint8_t log)
{
	pthread_mutex_lock(&e->ev_lock);
	bool dup = false;
	for (uint32_t i = 0; i < e->nev; i++)
		if (e->ev[i].type == type && e->ev[i].info == info && e->ev[i].log == log)
			dup = true;
	/* a full queue drops the event: the log page still records errors */
	if (!dup && e->nev < EMU_EVENTS_MAX)
		e->ev[e->nev++] = (struct emu_event){ type, info, log };
	pthread_mutex_unlock(&e->ev_lock);
}

/* Complete outstanding Asynchronous Event Requests with queued events whose
 * type is not masked. A type stays masked after it was reported until the
 * host reads its log page with RAE = 0 (§5.2: the event is "retained"). */
static int deliver_events(struct gpunvme_emu *e)
{
	int done = 0;
	pthread_mutex_lock(&e->ev_lock);
	for (uint32_t i = 0; i < e->nev && e->naers > 0;) {
		struct emu_event ev = e->ev[i];
		if (e->aer_masked & (1u << ev.type)) {
			i++;
			continue;
		}
		uint16_t cid = e->aer_cids[0];
		memmove(&e->aer_cids[0], &e->aer_cids[1], (--e->naers) * sizeof(e->aer_cids[0]));
		memmove(&e->ev[i], &e->ev[i + 1], (--e->nev - i) * sizeof(e->ev[0]));
		e->aer_masked |= 1u << ev.type;
		e->sq[0]->inflight++; /* parked AERs are not counted in flight */
		emu_cq_enqueue(e->cq[0], e->sq[0], cid,
			       (uint32_t)ev.type | ((uint32_t)ev.info << 8) | ((uint32_t)ev.log << 16), 0, 0);
		EMU_STAT_ADD(e->aers_posted, 1);
		done++;
	}
	pthread_mutex_unlock(&e->ev_lock);
	return done;
}

static void clear_doorbells(struct gpunvme_emu *e)
{
	for (uint32_t off = GPUNVME_REG_DBS; off + 4 <= e->bar_size; off += 4)
		emu_reg_st(e, off, 0);
}

void emu_free_admin_queues(struct gpunvme_emu *e)
{
	if (e->sq[0]) {
		__atomic_fetch_sub(&e->sq[0]->region->users, 1, __ATOMIC_RELAXED);
		free(e->sq[0]->hung);
		free(e->sq[0]);
		e->sq[0] = NULL;
	}
	if (e->cq[0]) {
		__atomic_fetch_sub(&e->cq[0]->region->users, 1, __ATOMIC_RELAXED);
		free(e->cq[0]->pend);
		free(e->cq[0]);
		e->cq[0] = NULL;
	}
}

/* §7.3.2 controller level reset: queues deleted, outstanding commands
 * dropped, features back to defaults, CSTS cleared. */
void emu_controller_reset(struct gpunvme_emu *e)
{
	emu_delete_all_queues(e);
	emu_free_admin_queues(e);
	clear_doorbells(e);
	e->naers = 0;
	e->aer_masked = 0;
	pthread_mutex_lock(&e->ev_lock);
	e->nev = 0;
	pthread_mutex_unlock(&e->ev_lock);
	emu_features_default(e);
	e->enabled = false;
	__atomic_store_n(&e->model_next_bw, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->model_next_iops, 0, __ATOMIC_RELAXED);
	/* a fatal status is cleared by a reset; a removed device stays gone */
	if (!__atomic_load_n(&e->removed, __ATOMIC_ACQUIRE)) {
		__atomic_store_n(&e->cfs_pending, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&e->halted, 0, __ATOMIC_RELEASE);
	}
}

static bool admin_queue_setup(struct gpunvme_emu *e, uint32_t aqa, uint64_t asq, uint64_t acq)
{
	uint32_t sqsize = gpunvme_aqa_asqs(aqa) + 1, cqsize = gpunvme_aqa_acqs(aqa) + 1;
	struct emu_sq *sq = calloc(1, sizeof(*sq));
	struct emu_cq *cq = calloc(1, sizeof(*cq));
	if (!sq || !cq)
		goto fail;
	pthread_rwlock_rdlock(&e->dma.lock);
	struct emu_region *rs = emu_dma_find(&e->dma, asq, (uint64_t)sqsize * 64);
	struct emu_region *rc = emu_dma_find(&e->dma, acq, (uint64_t)cqsize * 16);
	if (rs && rs->va && rc && rc->va) {
		__atomic_fetch_add(&rs->users, 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&rc->users, 1, __ATOMIC_RELAXED);
	}
	pthread_rwlock_unlock(&e->dma.lock);
	if (!rs || !rs->va || !rc || !rc->va)
		goto fail; /* the controller could not reach its admin queues */

	cq->id = 0;
	cq->size = cqsize;
	cq->iova = acq;
	cq->ring = (struct gpunvme_cqe *)(void *)(rc->va + (acq - rc->iova));
	cq->phase = 1;
	cq->db = (uint32_t *)(void *)(e->bar + gpunvme_cq_doorbell(0, e->dstrd));
	cq->region = rc;
	/* room for every admin command plus every AER and its abort */
	if (emu_cq_grow(cq, sqsize + EMU_AERL + 2))
		goto fail_users;
	sq->id = 0;
	sq->size = sqsize;
	sq->iova = asq;
	sq->ring = (struct gpunvme_sqe *)(void *)(rs->va + (asq - rs->iova));
	sq->db = (uint32_t *)(void *)(e->bar + gpunvme_sq_doorbell(0, e->dstrd));
	sq->cq = cq;
	sq->region = rs;
	sq->hung = calloc(sqsize, sizeof(*sq->hung));
	if (!sq->hung)
		goto fail_users;
	cq->sqs = sq;
	cq->nsqs = 1;
	e->sq[0] = sq;
	e->cq[0] = cq;
	return true;
fail_users:
	__atomic_fetch_sub(&rs->users, 1, __ATOMIC_RELAXED);
	__atomic_fetch_sub(&rc->users, 1, __ATOMIC_RELAXED);
fail:
	if (cq)
		free(cq->pend);
	if (sq)
		free(sq->hung);
	free(sq);
	free(cq);
	return false;
}

/* CC.EN 0 -> 1 (§7.6.1). Returns false when the configuration is invalid:
 * the controller then reports CSTS.CFS, as QEMU does. */
static bool controller_enable(struct gpunvme_emu *e, uint32_t cc)
{
	uint32_t aqa = emu_reg_ld(e, GPUNVME_REG_AQA);
	uint64_t asq = emu_reg_ld64(e, GPUNVME_REG_ASQ);
	uint64_t acq = emu_reg_ld64(e, GPUNVME_REG_ACQ);
	uint32_t mps = gpunvme_cc_mps(cc);
	uint64_t pmask = (4096ull << mps) - 1;

	if (!(gpunvme_cap_css(e->cap) & (1u << gpunvme_cc_css(cc))))
		return false;
	if (mps < gpunvme_cap_mpsmin(e->cap) || mps > gpunvme_cap_mpsmax(e->cap))
		return false;
	if (gpunvme_cc_ams(cc) != 0) /* CAP.AMS: round robin only */
		return false;
	if (gpunvme_cc_iosqes(cc) != EMU_SQES || gpunvme_cc_iocqes(cc) != EMU_CQES)
		return false;
	if ((asq & pmask) || (acq & pmask))
		return false;
	if (gpunvme_aqa_asqs(aqa) == 0 || gpunvme_aqa_acqs(aqa) == 0)
		return false;
	e->page_shift = 12 + mps;
	/* queue state starts from zero: stale doorbell values mean nothing */
	clear_doorbells(e);
	if (!admin_queue_setup(e, aqa, asq, acq))
		return false;
	e->enabled = true;
	e->rdy_at_ns = emu_now_ns() + (uint64_t)e->cfg.ready_delay_ms * 1000000ull;
	return true;
}

static void store_csts(struct gpunvme_emu *e, uint32_t csts)
{
	emu_reg_st(e, GPUNVME_REG_CSTS, csts);
}

static void handle_cc(struct gpunvme_emu *e, uint32_t cc, uint32_t *csts)
{
	uint32_t old = e->last_cc;
	e->last_cc = cc;

	if (gpunvme_cc_en(old) && !gpunvme_cc_en(cc)) {
		emu_controller_reset(e);
		*csts &= ~GPUNVME_CSTS_CFS; /* RDY drops below, after the delay */
		e->rdy_at_ns = emu_now_ns() + (uint64_t)e->cfg.ready_delay_ms * 1000000ull;
	} else if (!gpunvme_cc_en(old) && gpunvme_cc_en(cc)) {
		if (*csts & GPUNVME_CSTS_CFS) {
			/* still failed from an earlier attempt: needs EN = 0 first */
		} else if (!controller_enable(e, cc)) {
			*csts |= GPUNVME_CSTS_CFS;
		}
	}
	/* §7.6.2 shutdown: SHST goes 01 -> 10 once data is durable */
	if (gpunvme_cc_shn(cc) && !gpunvme_cc_shn(old)) {
		*csts = (*csts & ~GPUNVME_CSTS_SHST_MASK) | (GPUNVME_SHST_OCCURRING << GPUNVME_CSTS_SHST_SHIFT);
		store_csts(e, *csts);
		for (uint32_t i = 0; i < e->nn; i++)
			emu_ns_flush(&e->ns[i], 0, 0);
		*csts = (*csts & ~GPUNVME_CSTS_SHST_MASK) | (GPUNVME_SHST_COMPLETE << GPUNVME_CSTS_SHST_SHIFT);
	} else if (!gpunvme_cc_shn(cc) && gpunvme_cc_shn(old)) {
		*csts &= ~GPUNVME_CSTS_SHST_MASK;
	}
}

/* Doorbells of queues that do not exist: a write there is a host bug,
 * reported as an Invalid Doorbell Register event (QEMU does the same). A
 * window of queue ids is scanned per pass to bound the cost. */
static void scan_unused_doorbells(struct gpunvme_emu *e)
{
	uint32_t maxq = e->db_qids - 1; /* qid 0 is the admin pair */
	uint32_t n = maxq < 256 ? maxq : 256;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t qid = 1 + (e->scan_qid++ % maxq);
		uint32_t sdb = gpunvme_sq_doorbell(qid, e->dstrd), cdb = gpunvme_cq_doorbell(qid, e->dstrd);
		if (!e->sq[qid] && emu_reg_ld(e, sdb)) {
			emu_reg_st(e, sdb, 0);
			emu_raise_event(e, GPUNVME_AER_TYPE_ERROR, GPUNVME_AER_INFO_INVALID_DB_REG, GPUNVME_LOG_ERROR);
		}
		if (!e->cq[qid] && emu_reg_ld(e, cdb)) {
			emu_reg_st(e, cdb, 0);
			emu_raise_event(e, GPUNVME_AER_TYPE_ERROR, GPUNVME_AER_INFO_INVALID_DB_REG, GPUNVME_LOG_ERROR);
		}
	}
}

static int admin_queue_pass(struct gpunvme_emu *e)
{
	struct emu_sq *sq = e->sq[0];
	struct emu_cq *cq = e->cq[0];
	int done = 0;

	emu_db_read(e, cq->db, cq->size, &cq->head, &cq->bad_db);
	emu_db_read(e, sq->db, sq->size, &sq->tail, &sq->bad_db);
	struct gpunvme_sqe c;
	while (emu_sq_fetch(sq, &c)) {
		done++;
		EMU_STAT_ADD(e->admin_cmds, 1);
		uint32_t dw0 = 0;
		uint16_t st = 0;
		if (!emu_admin_exec(e, &c, &dw0, &st)) {
			sq->inflight--; /* a parked AER */
			continue;
		}
		if (st)
			emu_log_error(e, 0, &c, st, 0);
		emu_cq_enqueue(cq, sq, c.cid, dw0, st, 0);
		if (__atomic_load_n(&e->halted, __ATOMIC_ACQUIRE))
			break;
	}
	done += deliver_events(e);
	/* admin completions carry no modeled delay: post what fits */
	uint64_t now = 0, due = 0;
	done += emu_cq_drain(cq, &now, &due, NULL);
	return done;
}

static void fill_removed(struct gpunvme_emu *e)
{
	/* surprise removal: a device that left the bus reads all ones */
	for (uint32_t off = 0; off + 4 <= e->bar_size; off += 4)
		emu_reg_st(e, off, 0xffffffffu);
}

/* A removed device plugged back in: what a controller looks like after a
 * conventional reset of the function (every register at its reset value,
 * §3.1; no queues, nothing enabled). Its namespaces keep their data. */
static void reinsert(struct gpunvme_emu *e)
{
	__atomic_store_n(&e->removed, 0, __ATOMIC_RELEASE);
	emu_controller_reset(e); /* clears halted and cfs_pending now */
	for (uint32_t off = 0; off + 4 <= e->bar_size; off += 4)
		emu_reg_st(e, off, 0);
	e->last_cc = 0;
	e->csts = 0;
	store_csts(e, 0);
	emu_reg_st(e, GPUNVME_REG_CAP, (uint32_t)e->cap);
	emu_reg_st(e, GPUNVME_REG_CAP + 4, (uint32_t)(e->cap >> 32));
	emu_reg_st(e, GPUNVME_REG_VS, GPUNVME_VS(1, 4, 0));
	/* pairs with the injector's acquire load: the registers above are
	 * in place before it returns */
	__atomic_store_n(&e->return_pending, 0, __ATOMIC_RELEASE);
}

int emu_admin_pass(struct gpunvme_emu *e)
{
	if (__atomic_load_n(&e->return_pending, __ATOMIC_ACQUIRE))
		reinsert(e);
	if (__atomic_load_n(&e->removed, __ATOMIC_ACQUIRE)) {
		/* writes to a device that is gone are dropped: keep every
		 * register reading all ones whatever the host stores */
		fill_removed(e);
		__atomic_store_n(&e->removed, 2, __ATOMIC_RELEASE);
		return 0;
	}
	int done = 0;
	uint32_t csts = e->csts; /* CSTS is ours: never trust what BAR0 holds */
	uint32_t cc = emu_reg_ld(e, GPUNVME_REG_CC);
	if (cc != e->last_cc) {
		handle_cc(e, cc, &csts);
		done++;
	}
	if (__atomic_load_n(&e->cfs_pending, __ATOMIC_ACQUIRE))
		csts |= GPUNVME_CSTS_CFS;
	/* RDY follows EN after ready_delay_ms, in both directions. A failed
	 * controller (CFS) leaves RDY where it is. */
	if (!(csts & GPUNVME_CSTS_CFS) && e->enabled != !!(csts & GPUNVME_CSTS_RDY) &&
	    emu_now_ns() >= e->rdy_at_ns)
		csts ^= GPUNVME_CSTS_RDY;
	/* The host must not write read-only registers; restore them anyway. */
	emu_reg_st(e, GPUNVME_REG_CAP, (uint32_t)e->cap);
	emu_reg_st(e, GPUNVME_REG_CAP + 4, (uint32_t)(e->cap >> 32));
	emu_reg_st(e, GPUNVME_REG_VS, GPUNVME_VS(1, 4, 0));
	e->csts = csts;
	store_csts(e, csts);

	/* after EN 1 -> 0 RDY may still read 1 for ready_delay_ms, but the
	 * admin queue is gone: serve it only while enabled */
	if (!e->enabled || !(csts & GPUNVME_CSTS_RDY) || (csts & GPUNVME_CSTS_CFS) ||
	    __atomic_load_n(&e->halted, __ATOMIC_ACQUIRE))
		return done;
	done += admin_queue_pass(e);
	scan_unused_doorbells(e);
	return done;
}
