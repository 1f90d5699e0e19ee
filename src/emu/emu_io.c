/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * I/O queues: the worker pass (doorbells, command fetch, NVM command set,
 * completion posting) and the device model.
 */
#include <errno.h>
#include <stdlib.h>

#include "emu/emu_internal.h"

/* ---- completion queues ------------------------------------------------------ */

bool emu_cq_full(const struct emu_cq *cq)
{
	/* §4.1: full when the tail is one entry behind the head */
	uint32_t next = cq->tail + 1 == cq->size ? 0 : cq->tail + 1;
	return next == cq->head;
}

/* Write one completion entry. Caller checked emu_cq_full(). */
bool emu_cq_post(struct emu_cq *cq, struct emu_sq *sq, uint16_t cid, uint32_t dw0, uint16_t status)
{
	if (emu_cq_full(cq))
		return false;
	struct gpunvme_cqe *e = &cq->ring[cq->tail];
	uint32_t *w = (uint32_t *)(void *)e;
	__atomic_store_n(&w[0], dw0, __ATOMIC_RELAXED);
	__atomic_store_n(&w[1], 0, __ATOMIC_RELAXED);
	__atomic_store_n(&w[2], (uint32_t)sq->head | ((uint32_t)sq->id << 16), __ATOMIC_RELAXED);
	/* Dword 3 carries the phase tag, which tells the host the entry is
	 * new: it goes last, with release order, so a host that sees the new
	 * phase also sees dwords 0-2 (§4.6: the host polls the phase tag). */
	uint32_t dw3 = (uint32_t)cid | ((uint32_t)((status << 1) | cq->phase) << 16);
	__atomic_store_n(&w[3], dw3, __ATOMIC_RELEASE);
	if (++cq->tail == cq->size) {
		cq->tail = 0;
		cq->phase ^= 1;
	}
	return true;
}

int emu_cq_grow(struct emu_cq *cq, uint32_t extra)
{
	uint32_t cap = cq->pend_cap + extra;
	struct emu_cpl *p = malloc((size_t)cap * sizeof(*p));
	if (!p)
		return -ENOMEM;
	for (uint32_t i = 0; i < cq->pend_count; i++)
		p[i] = cq->pend[(cq->pend_head + i) % cq->pend_cap];
	free(cq->pend);
	cq->pend = p;
	cq->pend_cap = cap;
	cq->pend_head = 0;
	return 0;
}

/* Queue a completion. Capacity is the sum of the attached SQ sizes and each
 * SQ has at most `size` commands in flight, so this never overflows. */
void emu_cq_enqueue(struct emu_cq *cq, struct emu_sq *sq, uint16_t cid, uint32_t dw0, uint16_t status,
		    uint64_t due_ns)
{
	uint32_t i = cq->pend_head + cq->pend_count;
	if (i >= cq->pend_cap)
		i -= cq->pend_cap;
	cq->pend[i] = (struct emu_cpl){ .due_ns = due_ns, .sq = sq, .dw0 = dw0, .cid = cid, .status = status };
	cq->pend_count++;
}

/* Post what is due, in order, while the CQ has room (pf: the worker's
 * profile, GPUNVME_EMU_PROFILE=1, or NULL). */
int emu_cq_drain(struct emu_cq *cq, uint64_t *now, uint64_t *next_due, struct emu_prof *pf)
{
	int done = 0;
	while (cq->pend_count) {
		struct emu_cpl *p = &cq->pend[cq->pend_head];
		if (p->gpu)
			break; /* data copy not synced yet */
		if (p->due_ns) {
			if (!*now)
				*now = emu_now_ns();
			if (p->due_ns > *now) {
				/* tell the idle back-off when to be awake again */
				if (!*next_due || p->due_ns < *next_due)
					*next_due = p->due_ns;
				break;
			}
		}
		if (!emu_cq_post(cq, p->sq, p->cid, p->dw0, p->status))
			break; /* back-pressure: the host has not freed a slot */
		p->sq->inflight--;
		EMU_STAT_ADD(p->sq->completed, 1);
		if (pf) {
			pf->out -= pf->out > 0;
			if (p->due_ns) { /* *now was read for it above */
				const uint64_t late = *now - p->due_ns;
				pf->late_ns += late;
				pf->late_n++;
				if (late > pf->late_max_ns)
					pf->late_max_ns = late;
			}
		}
		if (++cq->pend_head == cq->pend_cap)
			cq->pend_head = 0;
		cq->pend_count--;
		done++;
	}
	return done;
}

/* ---- device model ------------------------------------------------------------ */

/* Reserve `cost` ns on a controller-wide timeline; returns the end time.
 * *idle: how long the timeline had stood idle before this reservation. */
static uint64_t model_reserve(uint64_t *next, uint64_t now, uint64_t cost, uint64_t *idle)
{
	uint64_t cur = __atomic_load_n(next, __ATOMIC_RELAXED);
	for (;;) {
		uint64_t start = cur > now ? cur : now;
		if (__atomic_compare_exchange_n(next, &cur, start + cost, true, __ATOMIC_RELAXED,
						__ATOMIC_RELAXED)) {
			*idle = now > cur ? now - cur : 0;
			return start + cost;
		}
	}
}

/* pf: the worker's profile (GPUNVME_EMU_PROFILE=1) or NULL; it counts the
 * idle time of the timeline that limits (bandwidth where modeled) */
static uint64_t model_due(struct gpunvme_emu *e, uint64_t bytes, int write, struct emu_prof *pf)
{
	const struct gpunvme_emu_model *m = &e->cfg.model;
	uint64_t now = emu_now_ns();
	uint64_t t = now, idle = 0, idle_bw = UINT64_MAX;
	uint64_t bps = write ? m->write_bps : m->read_bps;
	if (bps && bytes) {
		uint64_t end = model_reserve(&e->model_next_bw, now, bytes * 1000000000ull / bps, &idle_bw);
		if (end > t)
			t = end;
	}
	if (m->iops) {
		uint64_t end = model_reserve(&e->model_next_iops, now, 1000000000ull / m->iops, &idle);
		if (end > t)
			t = end;
	}
	if (idle_bw != UINT64_MAX)
		idle = idle_bw;
	/* a gap longer than a burst's is the device idle between loads */
	if (pf && idle < EMU_PROF_GAP_NS)
		pf->model_gap_ns += idle;
	return t + (uint64_t)m->latency_us * 1000;
}

/* ---- faults ------------------------------------------------------------------- */

static bool segs_have_gpu(const struct emu_thread *t, uint32_t nsegs)
{
	for (uint32_t i = 0; i < nsegs; i++)
		if (!t->segs[i].host)
			return true;
	return false;
}

static bool fault_drop(struct gpunvme_emu *e, uint16_t sqid)
{
	bool drop = false;
	pthread_mutex_lock(&e->fault_lock);
	for (uint32_t i = 0; i < e->ndrops; i++) {
		struct emu_drop_fault *d = &e->drops[i];
		if (d->count && (d->sqid == sqid || d->sqid == GPUNVME_EMU_SQID_ANY)) {
			d->count--;
			drop = true;
			break;
		}
	}
	pthread_mutex_unlock(&e->fault_lock);
	return drop;
}

static bool fault_media(struct gpunvme_emu *e, uint32_t nsid, uint64_t slba, uint64_t nlb, bool write,
			uint64_t *bad_lba)
{
	bool hit = false;
	pthread_mutex_lock(&e->fault_lock);
	for (uint32_t i = 0; i < e->nmedia && !hit; i++) {
		struct emu_media_fault *f = &e->media[i];
		if (f->nsid != nsid || (write && !f->writes))
			continue;
		if (slba < f->slba + f->nlb && f->slba < slba + nlb) {
			hit = true;
			*bad_lba = slba > f->slba ? slba : f->slba;
		}
	}
	pthread_mutex_unlock(&e->fault_lock);
	return hit;
}

/* ---- NVM command set (§6) ---------------------------------------------------- */

struct io_result {
	uint16_t status;
	uint64_t bytes;   /* data moved, for the device model */
	int write;
	uint64_t lba;     /* for the error log */
};

static uint16_t check_range(const struct emu_ns *ns, uint64_t slba, uint64_t nlb)
{
	/* §6.9/§6.15: the range must lie inside the namespace (no wrap) */
	if (slba >= ns->nlbas || nlb > ns->nlbas - slba)
		return GPUNVME_SC_LBA_RANGE | GPUNVME_STATUS_DNR;
	return 0;
}

/*
 * A namespace served from an image opened read-only (emu_ns.c) is write
 * protected: a command that would modify it is aborted with Generic Command
 * Status 20h, Namespace is Write Protected (NVMe 1.4 §4.6.1.2.1:
 * "the command is prohibited while the namespace is write protected"), and
 * Identify Namespace reports it in NSATTR bit 0 (§5.15.2.1), so a host such
 * as Linux marks the disk read-only. Status 82h (Attempted Write to Read
 * Only Range) is for LBA ranges made read-only by the LBA Range Type
 * feature; here the whole namespace is, as with Namespace Write Protection.
 * Checked after the NSID and before the range: the namespace refuses every
 * write whatever its fields. DNR: retrying cannot help.
 */
static uint16_t io_write_protected(const struct emu_ns *ns, struct io_result *r, uint64_t slba)
{
	if (!ns->read_only)
		return 0;
	r->lba = slba;
	return GPUNVME_SC_NS_WRITE_PROTECTED | GPUNVME_STATUS_DNR;
}

static uint16_t io_rw(struct emu_thread *t, struct emu_ns *ns, const struct gpunvme_sqe *c,
		      struct io_result *r)
{
	struct gpunvme_emu *e = t->emu;
	int write = c->opc == GPUNVME_CMD_WRITE;
	uint64_t slba = c->rw.slba, nlb = (uint64_t)c->rw.nlb + 1;
	uint64_t len = nlb << ns->lba_shift;
	uint16_t st;

	r->lba = slba;
	r->write = write;
	if (write && (st = io_write_protected(ns, r, slba)))
		return st;
	/* QEMU order: MDTS (Invalid Field), then the LBA range */
	if (len > e->max_xfer)
		return GPUNVME_SC_INVALID_FIELD | GPUNVME_STATUS_DNR;
	if ((st = check_range(ns, slba, nlb)))
		return st;
	uint32_t nsegs;
	if ((st = emu_prp_map(t, c->prp1, c->prp2, len, &nsegs)))
		return st;
	uint64_t bad;
	if (__atomic_load_n(&e->faults_active, __ATOMIC_RELAXED) &&
	    fault_media(e, ns->nsid, slba, nlb, write, &bad)) {
		r->lba = bad;
		EMU_STAT_ADD(t->c.media_errors, 1);
		return write ? GPUNVME_SC_WRITE_FAULT : GPUNVME_SC_UNRECOVERED_READ;
	}
	if (ns->data && write && ns->fd >= 0 && !segs_have_gpu(t, nsegs)) {
		/* a file namespace: through the file, so that a crash of this
		 * process never leaves a torn block (emu_segs_to_file) */
		if (emu_segs_to_file(t, nsegs, ns->fd, slba << ns->lba_shift))
			return GPUNVME_SC_WRITE_FAULT;
	} else if (ns->data && !write && ns->read_fd >= 0) {
		st = emu_segs_from_file(t, nsegs, ns->data + (slba << ns->lba_shift), ns->read_fd,
					slba << ns->lba_shift);
		if (st)
			return st;
	} else if (ns->data) {
		st = emu_segs_copy(t, nsegs, ns->data + (slba << ns->lba_shift), !write);
		if (st)
			return st;
	}
	/* Force Unit Access, or a disabled volatile write cache, means the data
	 * is on stable media when the write completes (§6.15). GPU-sourced data
	 * lands on the copy engine's schedule, so it is synced first. */
	if (write && ns->backing == GPUNVME_EMU_BACK_FILE &&
	    ((c->rw.control & GPUNVME_RW_FUA) || !__atomic_load_n(&e->feat.vwc, __ATOMIC_RELAXED))) {
		if ((st = emu_gpu_sync(t)))
			return st;
		if (emu_ns_flush(ns, slba << ns->lba_shift, len))
			return GPUNVME_SC_WRITE_FAULT;
	}
	r->bytes = len;
	if (write) {
		EMU_STAT_ADD(t->c.writes, 1);
		EMU_STAT_ADD(t->c.bytes_written, len);
	} else {
		EMU_STAT_ADD(t->c.reads, 1);
		EMU_STAT_ADD(t->c.bytes_read, len);
	}
	return 0;
}

static uint16_t io_flush(struct emu_thread *t, const struct gpunvme_sqe *c)
{
	struct gpunvme_emu *e = t->emu;
	EMU_STAT_ADD(t->c.flushes, 1);
	if (c->nsid == GPUNVME_NSID_ALL) {
		for (uint32_t i = 0; i < e->nn; i++)
			if (emu_ns_flush(&e->ns[i], 0, 0))
				return GPUNVME_SC_INTERNAL;
		return 0;
	}
	return emu_ns_flush(emu_ns_get(e, c->nsid), 0, 0) ? GPUNVME_SC_INTERNAL : 0;
}

static uint16_t io_write_zeroes(struct emu_thread *t, struct emu_ns *ns, const struct gpunvme_sqe *c,
				struct io_result *r)
{
	uint64_t slba = c->rw.slba, nlb = (uint64_t)c->rw.nlb + 1;
	uint16_t st;
	r->lba = slba;
	if ((st = io_write_protected(ns, r, slba)))
		return st;
	/* Write Zeroes moves no data, so MDTS does not apply (§6.16) */
	if ((st = check_range(ns, slba, nlb)))
		return st;
	if (ns->backing == GPUNVME_EMU_BACK_RAM)
		emu_ns_deallocate(ns, slba << ns->lba_shift, nlb << ns->lba_shift); /* zeroes, cheaply */
	else if (ns->data)
		memset(ns->data + (slba << ns->lba_shift), 0, nlb << ns->lba_shift);
	EMU_STAT_ADD(t->c.write_zeroes, 1);
	return 0;
}

static uint16_t io_dsm(struct emu_thread *t, struct emu_ns *ns, const struct gpunvme_sqe *c,
		       struct io_result *r)
{
	struct gpunvme_dsm_range rg[GPUNVME_DSM_MAX_RANGES];
	uint32_t nr = (c->dsm.nr & 0xff) + 1;
	uint32_t nsegs;
	uint16_t st;

	EMU_STAT_ADD(t->c.dsm, 1);
	if ((st = emu_prp_map(t, c->prp1, c->prp2, nr * sizeof(rg[0]), &nsegs)))
		return st;
	if ((st = emu_segs_copy(t, nsegs, (uint8_t *)rg, 0)))
		return st;
	if ((st = emu_gpu_sync(t)))
		return st;
	/* check every range before changing anything */
	for (uint32_t i = 0; i < nr; i++) {
		if ((st = check_range(ns, rg[i].slba, rg[i].nlb))) {
			r->lba = rg[i].slba;
			return st;
		}
	}
	if (!(c->dsm.attr & GPUNVME_DSM_AD))
		return 0; /* IDR/IDW are hints */
	if ((st = io_write_protected(ns, r, rg[0].slba))) /* deallocation modifies the data */
		return st;
	for (uint32_t i = 0; i < nr; i++)
		emu_ns_deallocate(ns, rg[i].slba << ns->lba_shift, (uint64_t)rg[i].nlb << ns->lba_shift);
	return 0;
}

static uint16_t io_exec(struct emu_thread *t, uint16_t sqid, const struct gpunvme_sqe *c, struct io_result *r)
{
	struct gpunvme_emu *e = t->emu;
	switch (c->opc) {
	case GPUNVME_CMD_FLUSH:
	case GPUNVME_CMD_WRITE:
	case GPUNVME_CMD_READ:
	case GPUNVME_CMD_WRITE_ZEROES:
	case GPUNVME_CMD_DSM:
		break;
	default:
		return GPUNVME_SC_INVALID_OPCODE | GPUNVME_STATUS_DNR;
	}
	/* NSID (§6.1.2): 0 or beyond NN is invalid; broadcast only for Flush
	 * (Identify VWC says Flush with broadcast NSID is supported). */
	if (c->nsid == GPUNVME_NSID_ALL) {
		if (c->opc != GPUNVME_CMD_FLUSH)
			return GPUNVME_SC_INVALID_NSID | GPUNVME_STATUS_DNR;
	} else if (c->nsid == 0 || c->nsid > e->nn) {
		return GPUNVME_SC_INVALID_NSID | GPUNVME_STATUS_DNR;
	}
	/* fused operations and SGLs are not supported (Identify FUSES = 0,
	 * SGLS = 0) */
	if (c->flags & (GPUNVME_FLAGS_FUSE_MASK | GPUNVME_FLAGS_PSDT_MASK))
		return GPUNVME_SC_INVALID_FIELD | GPUNVME_STATUS_DNR;
	(void)sqid;
	struct emu_ns *ns = emu_ns_get(e, c->nsid);
	switch (c->opc) {
	case GPUNVME_CMD_FLUSH:
		return io_flush(t, c);
	case GPUNVME_CMD_WRITE:
	case GPUNVME_CMD_READ:
		return io_rw(t, ns, c, r);
	case GPUNVME_CMD_WRITE_ZEROES:
		return io_write_zeroes(t, ns, c, r);
	default:
		return io_dsm(t, ns, c, r);
	}
}

/* ---- the worker pass ------------------------------------------------------------ */

/* Read a doorbell; a value beyond the queue is ignored and reported with an
 * asynchronous event (QEMU: Invalid Doorbell Write Value). */
bool emu_db_read(struct gpunvme_emu *e, uint32_t *db, uint32_t size, uint32_t *val, uint32_t *bad)
{
	uint32_t v = __atomic_load_n(db, __ATOMIC_ACQUIRE);
	if (v < size) {
		*val = v;
		return true;
	}
	if (v != *bad) {
		*bad = v;
		emu_raise_event(e, GPUNVME_AER_TYPE_ERROR, GPUNVME_AER_INFO_INVALID_DB_VALUE, GPUNVME_LOG_ERROR);
	}
	return false;
}

static int sq_process(struct emu_thread *t, struct emu_sq *sq, uint32_t burst)
{
	struct gpunvme_emu *e = t->emu;
	struct emu_cq *cq = sq->cq;
	int done = 0;

	if (!emu_db_read(e, sq->db, sq->size, &sq->tail, &sq->bad_db))
		return 0;
	struct gpunvme_sqe c;
	while (burst-- && emu_sq_fetch(sq, &c)) {
		done++;
		EMU_STAT_ADD(t->c.cmds, 1);
		if (e->prof && ++t->prof.out > t->prof.out_max)
			t->prof.out_max = t->prof.out;

		if (__atomic_load_n(&e->faults_active, __ATOMIC_RELAXED) && fault_drop(e, sq->id)) {
			/* swallowed: never completed unless aborted */
			sq->hung[sq->nhung++] = c.cid;
			EMU_STAT_ADD(t->c.dropped, 1);
			continue;
		}
		struct io_result r = { 0 };
		uint16_t st = io_exec(t, sq->id, &c, &r);
		if (st) {
			EMU_STAT_ADD(t->c.errors, 1);
			emu_log_error(e, sq->id, &c, st, r.lba);
		}
		uint64_t due = e->model_on ? model_due(e, r.bytes, r.write, e->prof ? &t->prof : NULL) : 0;
		const uint64_t slow = __atomic_load_n(&e->slow_ns, __ATOMIC_RELAXED);
		if (slow)
			due = (due ? due : emu_now_ns()) + slow;
		emu_cq_enqueue(cq, sq, c.cid, 0, st, due);
		if (t->gpu_pending) {
			uint32_t i = cq->pend_head + cq->pend_count - 1;
			cq->pend[i >= cq->pend_cap ? i - cq->pend_cap : i].gpu = true;
			t->gpu_held = true;
		}
	}
	return done;
}

/* Let the completions whose data went to or came from GPU memory go, once
 * the lane's copies are known to be finished (st: how the sync went). */
static void gpu_release(struct emu_cq *cq, uint16_t st)
{
	for (uint32_t k = 0; k < cq->pend_count; k++) {
		struct emu_cpl *p = &cq->pend[(cq->pend_head + k) % cq->pend_cap];
		if (p->gpu) {
			p->gpu = false;
			if (st && !p->status)
				p->status = st;
		}
	}
}

int emu_worker_pass(struct emu_worker *w)
{
	struct gpunvme_emu *e = w->emu;
	struct emu_thread *t = &w->t;
	int done = 0;
	uint64_t now = 0;

	w->next_due = 0;
	if (__atomic_load_n(&e->halted, __ATOMIC_ACQUIRE))
		return 0;
	uint32_t ab = __atomic_load_n(&e->feat.arb, __ATOMIC_RELAXED) & 7; /* Set Features races */
	uint32_t burst = ab == 7 ? EMU_BURST_MAX : (1u << ab);
	if (burst > EMU_BURST_MAX)
		burst = EMU_BURST_MAX;

	pthread_rwlock_rdlock(&e->dma.lock);
	for (uint32_t i = 0; i < w->ncqs; i++) {
		struct emu_cq *cq = w->cqs[i];
		emu_db_read(e, cq->db, cq->size, &cq->head, &cq->bad_db);
		for (struct emu_sq *sq = cq->sqs; sq; sq = sq->next)
			done += sq_process(t, sq, burst);
	}
	/* One sync for the copies of every queue of the pass (issued as one
	 * batch where the GPU ops take batches), before any of their
	 * completions can be posted. */
	if (t->gpu_pending || t->gpu_held) {
		/* a sync inside the pass (DSM, FUA write) may have covered the
		 * held completions' copies already and cleared gpu_pending:
		 * they go on its result (gpu_err), or stay held for ever */
		const uint64_t p0 = e->prof ? emu_now_ns() : 0;
		uint16_t st = emu_gpu_sync(t);
		if (p0)
			t->prof.sync_ns += emu_now_ns() - p0;
		if (!st)
			st = t->gpu_err;
		t->gpu_err = 0;
		t->gpu_held = false;
		for (uint32_t i = 0; i < w->ncqs; i++)
			gpu_release(w->cqs[i], st);
	}
	for (uint32_t i = 0; i < w->ncqs; i++)
		done += emu_cq_drain(w->cqs[i], &now, &w->next_due, e->prof ? &t->prof : NULL);
	pthread_rwlock_unlock(&e->dma.lock);
	return done;
}
