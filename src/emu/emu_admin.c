/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Admin command set (NVMe 1.4 §5), run on the admin thread. Each check
 * returns the status QEMU's controller (hw/nvme/ctrl.c) returns for the same
 * host mistake; docs/emulator.md lists them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "emu/emu_internal.h"

#define DNR GPUNVME_STATUS_DNR

static void features_defaults(const struct gpunvme_emu *e, struct emu_features *f)
{
	memset(f, 0, sizeof(*f));
	f->arb = 7;             /* AB = 7: no burst limit */
	f->temp_thresh = 343;   /* 70 C in Kelvin, = WCTEMP */
	f->vwc = e->cfg.vwc ? 1 : 0;
	f->nsq = e->cfg.max_ioq;
	f->ncq = e->cfg.max_ioq;
}

void emu_features_default(struct gpunvme_emu *e)
{
	struct emu_features d;
	features_defaults(e, &d);
	/* arb and vwc are read by the workers: store them atomically */
	__atomic_store_n(&e->feat.arb, d.arb, __ATOMIC_RELAXED);
	__atomic_store_n(&e->feat.vwc, d.vwc, __ATOMIC_RELAXED);
	e->feat.pm = d.pm;
	e->feat.temp_thresh = d.temp_thresh;
	e->feat.err_rec = d.err_rec;
	e->feat.irq_coalesce = d.irq_coalesce;
	e->feat.irq_config = d.irq_config;
	e->feat.write_atomic = d.write_atomic;
	e->feat.async_cfg = d.async_cfg;
	e->feat.nsq = d.nsq;
	e->feat.ncq = d.ncq;
}

void emu_log_error(struct gpunvme_emu *e, uint16_t sqid, const struct gpunvme_sqe *c, uint16_t status,
		   uint64_t lba)
{
	pthread_mutex_lock(&e->err_lock);
	uint64_t n = ++e->err_count;
	struct gpunvme_error_log *l = &e->errlog[(n - 1) % EMU_ERRLOG_ENTRIES];
	memset(l, 0, sizeof(*l));
	l->error_count = n;
	l->sqid = sqid;
	l->cid = c->cid;
	l->status = (uint16_t)(status << 1);
	l->param_loc = 0xffff; /* not reported */
	l->lba = lba;
	l->nsid = c->nsid;
	pthread_mutex_unlock(&e->err_lock);
}

/* ---- Identify (§5.15) -------------------------------------------------------- */

static void pad_copy(char *dst, size_t n, const char *src)
{
	/* ASCII fields are space padded, not NUL terminated */
	memset(dst, ' ', n);
	size_t l = strlen(src);
	memcpy(dst, src, l < n ? l : n);
}

static void id_ctrl(struct gpunvme_emu *e, struct gpunvme_id_ctrl *id)
{
	memset(id, 0, sizeof(*id));
	id->vid = 0;     /* emulated: no PCI vendor */
	id->ssvid = 0;
	pad_copy(id->sn, sizeof(id->sn), e->cfg.serial);
	pad_copy(id->mn, sizeof(id->mn), e->cfg.model_name);
	pad_copy(id->fr, sizeof(id->fr), "0.1.0");
	id->rab = 6;
	id->cmic = 0;
	id->mdts = e->cfg.mdts;
	id->cntlid = 1;
	id->ver = GPUNVME_VS(1, 4, 0);
	id->cntrltype = 1; /* I/O controller */
	id->oacs = 0;      /* no optional admin commands */
	id->acl = EMU_ACL;
	id->aerl = EMU_AERL;
	id->frmw = 0x03;   /* one slot, read-only */
	id->lpa = GPUNVME_LPA_EXTENDED;
	id->elpe = EMU_ERRLOG_ENTRIES - 1;
	id->npss = 0;
	id->wctemp = 343;
	id->cctemp = 373;
	id->sqes = (EMU_SQES << 4) | EMU_SQES;
	id->cqes = (EMU_CQES << 4) | EMU_CQES;
	id->maxcmd = 0;
	id->nn = e->nn;
	id->oncs = GPUNVME_ONCS_DSM | GPUNVME_ONCS_WRITE_ZEROES;
	/* VWC bit 0: cache present; bits 2:1 = 11b: Flush with the broadcast
	 * NSID is supported (§5.15.2.2, byte 525) */
	id->vwc = e->cfg.vwc ? (GPUNVME_VWC_PRESENT | 0x6) : 0x6;
	id->sgls = 0;
	snprintf(id->subnqn, sizeof(id->subnqn), "nqn.2026-11.io.github.gpu-nvme-direct:emu:%s", e->cfg.serial);
	id->psd[0].mp = 2500; /* 25 W in centiwatts */
}

static void id_ns(struct gpunvme_emu *e, uint32_t nsid, struct gpunvme_id_ns *id)
{
	struct emu_ns *ns = emu_ns_get(e, nsid);
	memset(id, 0, sizeof(*id));
	id->nsze = id->ncap = id->nuse = ns->nlbas;
	id->nlbaf = 1; /* two formats: 512 B and 4 KiB, no metadata */
	id->lbaf[0].lbads = 9;
	id->lbaf[1].lbads = 12;
	id->flbas = ns->lba_shift == 12 ? 1 : 0;
	id->dlfeat = GPUNVME_DLFEAT_READ_ZEROES;
	/* NSATTR bit 0, Write Protected (§5.15.2.1): an image opened
	 * read-only; writes fail with Namespace is Write Protected (emu_io.c) */
	id->nsattr = ns->read_only ? 1 : 0;
	/* unique per controller serial and namespace */
	for (int i = 0; i < 8 && e->cfg.serial[i]; i++)
		id->nguid[i] = (uint8_t)e->cfg.serial[i];
	id->nguid[12] = (uint8_t)(nsid >> 24);
	id->nguid[13] = (uint8_t)(nsid >> 16);
	id->nguid[14] = (uint8_t)(nsid >> 8);
	id->nguid[15] = (uint8_t)nsid;
	memcpy(id->eui64, &id->nguid[8], 8);
}

static uint16_t adm_identify(struct gpunvme_emu *e, const struct gpunvme_sqe *c)
{
	uint8_t buf[4096];
	switch (c->identify.cns) {
	case GPUNVME_CNS_NS:
		if (c->nsid == 0 || c->nsid == GPUNVME_NSID_ALL || c->nsid > e->nn)
			return GPUNVME_SC_INVALID_NSID | DNR;
		id_ns(e, c->nsid, (struct gpunvme_id_ns *)(void *)buf);
		break;
	case GPUNVME_CNS_CTRL:
		id_ctrl(e, (struct gpunvme_id_ctrl *)(void *)buf);
		break;
	case GPUNVME_CNS_ACTIVE_NS_LIST: {
		/* NSIDs greater than the one given, ascending (§5.15.2.3) */
		if (c->nsid >= GPUNVME_NSID_ALL - 1)
			return GPUNVME_SC_INVALID_NSID | DNR;
		uint32_t *list = (uint32_t *)(void *)buf;
		uint32_t k = 0;
		memset(buf, 0, sizeof(buf));
		for (uint32_t nsid = c->nsid + 1; nsid <= e->nn && k < 1024; nsid++)
			list[k++] = nsid;
		break;
	}
	default:
		return GPUNVME_SC_INVALID_FIELD | DNR;
	}
	return emu_dma_to_host(&e->at, c, buf, sizeof(buf));
}

/* ---- queues (§5.3 - §5.6) ---------------------------------------------------- */

static bool any_io_queue(const struct gpunvme_emu *e)
{
	for (uint32_t q = 1; q <= e->cfg.max_ioq; q++)
		if (e->sq[q] || e->cq[q])
			return true;
	return false;
}

/* Find the region of a queue and take a reference on it. */
static struct emu_region *queue_region(struct gpunvme_emu *e, uint64_t iova, uint64_t bytes)
{
	pthread_rwlock_rdlock(&e->dma.lock);
	struct emu_region *r = emu_dma_find(&e->dma, iova, bytes);
	if (r && r->va)
		__atomic_fetch_add(&r->users, 1, __ATOMIC_RELAXED);
	else
		r = NULL; /* queues in GPU memory are not supported */
	pthread_rwlock_unlock(&e->dma.lock);
	return r;
}

static uint16_t check_queue_common(struct gpunvme_emu *e, const struct gpunvme_sqe *c)
{
	uint32_t qsize = c->queue.qsize;
	/* QSIZE is 0's based: a 1-entry queue cannot work (§5.4, §5.5) */
	if (qsize == 0 || qsize > gpunvme_cap_mqes(e->cap))
		return GPUNVME_SC_MAX_QSIZE_EXCEEDED | DNR;
	if (c->prp1 & ((1ull << e->page_shift) - 1))
		return GPUNVME_SC_INVALID_PRP_OFFSET | DNR;
	/* CAP.CQR = 1: queues must be physically contiguous */
	if (!(c->queue.qflags & GPUNVME_Q_PC))
		return GPUNVME_SC_INVALID_FIELD | DNR;
	return 0;
}

static uint16_t adm_create_cq(struct gpunvme_emu *e, const struct gpunvme_sqe *c)
{
	uint16_t qid = c->queue.qid, iv = c->queue.cqid_iv;
	uint16_t st;
	if (qid == 0 || qid > e->feat.ncq || e->cq[qid])
		return GPUNVME_SC_INVALID_QID | DNR;
	if ((st = check_queue_common(e, c)))
		return st;
	if (iv >= EMU_MAX_IV)
		return GPUNVME_SC_INVALID_IRQ_VECTOR | DNR;
	uint32_t size = (uint32_t)c->queue.qsize + 1;
	struct emu_region *r = queue_region(e, c->prp1, (uint64_t)size * sizeof(struct gpunvme_cqe));
	if (!r)
		return GPUNVME_SC_DATA_XFER_ERROR | DNR;
	struct emu_cq *cq = calloc(1, sizeof(*cq));
	unsigned wi = qid % e->nworkers;
	struct emu_worker *w = &e->workers[wi];
	if (!cq)
		goto nomem;
	cq->id = qid;
	cq->size = size;
	cq->iova = c->prp1;
	cq->ring = (struct gpunvme_cqe *)(void *)(r->va + (c->prp1 - r->iova));
	cq->phase = 1;
	cq->db = (uint32_t *)(void *)(e->bar + gpunvme_cq_doorbell(qid, e->dstrd));
	cq->worker = wi;
	cq->region = r;
	pthread_mutex_lock(&w->lock);
	if (w->ncqs == w->cqs_cap) {
		uint32_t cap = w->cqs_cap ? w->cqs_cap * 2 : 8;
		struct emu_cq **n = realloc(w->cqs, cap * sizeof(*n));
		if (!n) {
			pthread_mutex_unlock(&w->lock);
			goto nomem;
		}
		w->cqs = n;
		w->cqs_cap = cap;
	}
	w->cqs[w->ncqs++] = cq;
	pthread_mutex_unlock(&w->lock);
	e->cq[qid] = cq;
	return 0;
nomem:
	free(cq);
	__atomic_fetch_sub(&r->users, 1, __ATOMIC_RELAXED);
	return GPUNVME_SC_INTERNAL;
}

static uint16_t adm_create_sq(struct gpunvme_emu *e, const struct gpunvme_sqe *c)
{
	uint16_t qid = c->queue.qid, cqid = c->queue.cqid_iv;
	uint16_t st;
	/* QEMU's order: CQID, then QID, then size, PRP1, flags */
	if (cqid == 0 || !emu_cq_get(e, cqid))
		return GPUNVME_SC_INVALID_CQID | DNR;
	if (qid == 0 || qid > e->feat.nsq || e->sq[qid])
		return GPUNVME_SC_INVALID_QID | DNR;
	if ((st = check_queue_common(e, c)))
		return st;
	uint32_t size = (uint32_t)c->queue.qsize + 1;
	struct emu_region *r = queue_region(e, c->prp1, (uint64_t)size * sizeof(struct gpunvme_sqe));
	if (!r)
		return GPUNVME_SC_DATA_XFER_ERROR | DNR;
	struct emu_cq *cq = e->cq[cqid];
	struct emu_worker *w = &e->workers[cq->worker];
	struct emu_sq *sq = calloc(1, sizeof(*sq));
	if (!sq || !(sq->hung = calloc(size, sizeof(*sq->hung))))
		goto nomem;
	sq->id = qid;
	sq->size = size;
	sq->iova = c->prp1;
	sq->ring = (struct gpunvme_sqe *)(void *)(r->va + (c->prp1 - r->iova));
	sq->db = (uint32_t *)(void *)(e->bar + gpunvme_sq_doorbell(qid, e->dstrd));
	sq->cq = cq;
	sq->region = r;
	pthread_mutex_lock(&w->lock);
	if (emu_cq_grow(cq, size)) {
		pthread_mutex_unlock(&w->lock);
		goto nomem;
	}
	/* append: SQs of a CQ are served round robin in creation order */
	struct emu_sq **pp = &cq->sqs;
	while (*pp)
		pp = &(*pp)->next;
	*pp = sq;
	cq->nsqs++;
	pthread_mutex_unlock(&w->lock);
	e->sq[qid] = sq;
	return 0;
nomem:
	if (sq)
		free(sq->hung);
	free(sq);
	__atomic_fetch_sub(&r->users, 1, __ATOMIC_RELAXED);
	return GPUNVME_SC_INTERNAL;
}

/* Remove an SQ. Caller holds the lock of the worker owning its CQ.
 * Completions not yet posted for its commands are discarded, as QEMU does
 * (§5.6: commands still in progress are aborted; posting entries for them
 * is optional). */
static void sq_remove_locked(struct gpunvme_emu *e, struct emu_sq *sq)
{
	struct emu_cq *cq = sq->cq;
	uint32_t k = 0;
	for (uint32_t i = 0; i < cq->pend_count; i++) {
		struct emu_cpl p = cq->pend[(cq->pend_head + i) % cq->pend_cap];
		if (p.sq != sq)
			cq->pend[(cq->pend_head + k++) % cq->pend_cap] = p;
	}
	cq->pend_count = k;
	struct emu_sq **pp = &cq->sqs;
	while (*pp != sq)
		pp = &(*pp)->next;
	*pp = sq->next;
	cq->nsqs--;
	e->sq[sq->id] = NULL;
	emu_reg_st(e, (uint32_t)((uint8_t *)sq->db - e->bar), 0);
	__atomic_fetch_sub(&sq->region->users, 1, __ATOMIC_RELAXED);
	free(sq->hung);
	free(sq);
}

static void cq_remove_locked(struct gpunvme_emu *e, struct emu_cq *cq)
{
	struct emu_worker *w = &e->workers[cq->worker];
	for (uint32_t i = 0; i < w->ncqs; i++) {
		if (w->cqs[i] == cq) {
			w->cqs[i] = w->cqs[--w->ncqs];
			break;
		}
	}
	e->cq[cq->id] = NULL;
	emu_reg_st(e, (uint32_t)((uint8_t *)cq->db - e->bar), 0);
	__atomic_fetch_sub(&cq->region->users, 1, __ATOMIC_RELAXED);
	free(cq->pend);
	free(cq);
}

static uint16_t adm_delete_sq(struct gpunvme_emu *e, const struct gpunvme_sqe *c)
{
	uint16_t qid = c->queue.qid;
	if (qid == 0 || !emu_sq_get(e, qid))
		return GPUNVME_SC_INVALID_QID | DNR;
	struct emu_worker *w = &e->workers[e->sq[qid]->cq->worker];
	pthread_mutex_lock(&w->lock);
	sq_remove_locked(e, e->sq[qid]);
	pthread_mutex_unlock(&w->lock);
	return 0;
}

static uint16_t adm_delete_cq(struct gpunvme_emu *e, const struct gpunvme_sqe *c)
{
	uint16_t qid = c->queue.qid;
	/* QEMU answers an unknown CQ with Completion Queue Invalid */
	if (qid == 0 || !emu_cq_get(e, qid))
		return GPUNVME_SC_INVALID_CQID | DNR;
	if (e->cq[qid]->nsqs)
		return GPUNVME_SC_INVALID_QUEUE_DEL;
	struct emu_worker *w = &e->workers[e->cq[qid]->worker];
	pthread_mutex_lock(&w->lock);
	cq_remove_locked(e, e->cq[qid]);
	pthread_mutex_unlock(&w->lock);
	return 0;
}

void emu_delete_all_queues(struct gpunvme_emu *e)
{
	for (uint32_t wi = 0; wi < e->nworkers; wi++) {
		struct emu_worker *w = &e->workers[wi];
		pthread_mutex_lock(&w->lock);
		while (w->ncqs) {
			struct emu_cq *cq = w->cqs[0];
			while (cq->sqs)
				sq_remove_locked(e, cq->sqs);
			cq_remove_locked(e, cq);
		}
		pthread_mutex_unlock(&w->lock);
	}
}

/* ---- features (§5.21) ------------------------------------------------------ */

static uint16_t feat_get(struct emu_features *f, uint8_t fid, uint32_t *dw0)
{
	switch (fid) {
	case GPUNVME_FEAT_ARBITRATION: *dw0 = __atomic_load_n(&f->arb, __ATOMIC_RELAXED); break;
	case GPUNVME_FEAT_POWER_MGMT: *dw0 = f->pm; break;
	case GPUNVME_FEAT_TEMP_THRESH: *dw0 = f->temp_thresh; break;
	case GPUNVME_FEAT_ERR_RECOVERY: *dw0 = f->err_rec; break;
	case GPUNVME_FEAT_VOLATILE_WC: *dw0 = __atomic_load_n(&f->vwc, __ATOMIC_RELAXED); break;
	case GPUNVME_FEAT_NUM_QUEUES: *dw0 = (f->nsq - 1) | ((f->ncq - 1) << 16); break;
	case GPUNVME_FEAT_IRQ_COALESCE: *dw0 = f->irq_coalesce; break;
	case GPUNVME_FEAT_IRQ_CONFIG: *dw0 = f->irq_config; break;
	case GPUNVME_FEAT_WRITE_ATOMIC: *dw0 = f->write_atomic; break;
	case GPUNVME_FEAT_ASYNC_EVENT: *dw0 = f->async_cfg; break;
	default: return GPUNVME_SC_INVALID_FIELD | DNR;
	}
	return 0;
}

static uint16_t adm_get_features(struct gpunvme_emu *e, const struct gpunvme_sqe *c, uint32_t *dw0)
{
	uint8_t fid = c->cdw[0] & 0xff;
	uint32_t sel = (c->cdw[0] >> 8) & 7;
	uint16_t st;
	if (fid == GPUNVME_FEAT_VOLATILE_WC && !e->cfg.vwc)
		return GPUNVME_SC_INVALID_FIELD | DNR;
	switch (sel) {
	case GPUNVME_FEAT_SEL_CURRENT:
		return feat_get(&e->feat, fid, dw0);
	case GPUNVME_FEAT_SEL_DEFAULT:
	case GPUNVME_FEAT_SEL_SAVED: {
		/* nothing is saveable (ONCS bit 4 = 0): saved reads as default */
		struct emu_features d;
		features_defaults(e, &d);
		return feat_get(&d, fid, dw0);
	}
	case GPUNVME_FEAT_SEL_SUPPORTED:
		if ((st = feat_get(&e->feat, fid, dw0)))
			return st;
		*dw0 = 1u << 2; /* changeable, not saveable, not namespace specific */
		return 0;
	default:
		return GPUNVME_SC_INVALID_FIELD | DNR;
	}
}

static uint16_t adm_set_features(struct gpunvme_emu *e, const struct gpunvme_sqe *c, uint32_t *dw0)
{
	uint8_t fid = c->cdw[0] & 0xff;
	uint32_t v = c->cdw[1];
	struct emu_features *f = &e->feat;
	if (c->cdw[0] & (1u << 31)) /* SV: no feature can be saved */
		return GPUNVME_SC_FEAT_NOT_SAVEABLE | DNR;
	switch (fid) {
	case GPUNVME_FEAT_ARBITRATION:
		/* read by the workers for the burst size */
		__atomic_store_n(&f->arb, v, __ATOMIC_RELAXED);
		break;
	case GPUNVME_FEAT_POWER_MGMT:
		if ((v & 0x1f) > 0) /* NPSS = 0: only power state 0 */
			return GPUNVME_SC_INVALID_FIELD | DNR;
		f->pm = v;
		break;
	case GPUNVME_FEAT_TEMP_THRESH:
		/* one sensor (composite, TMPSEL 0), over/under thresholds */
		if (((v >> 16) & 0xf) != 0 || ((v >> 20) & 3) > 1)
			return GPUNVME_SC_INVALID_FIELD | DNR;
		if (((v >> 20) & 3) == 0)
			f->temp_thresh = v & 0xffff;
		break;
	case GPUNVME_FEAT_ERR_RECOVERY: f->err_rec = v; break;
	case GPUNVME_FEAT_VOLATILE_WC:
		if (!e->cfg.vwc)
			return GPUNVME_SC_INVALID_FIELD | DNR;
		__atomic_store_n(&f->vwc, v & 1, __ATOMIC_RELAXED);
		break;
	case GPUNVME_FEAT_NUM_QUEUES: {
		uint32_t nsqr = v & 0xffff, ncqr = v >> 16;
		if (nsqr == 0xffff || ncqr == 0xffff)
			return GPUNVME_SC_INVALID_FIELD | DNR;
		/* §5.21.1.7: only before any I/O queue exists */
		if (any_io_queue(e))
			return GPUNVME_SC_CMD_SEQ_ERROR | DNR;
		f->nsq = nsqr + 1 < e->cfg.max_ioq ? nsqr + 1 : e->cfg.max_ioq;
		f->ncq = ncqr + 1 < e->cfg.max_ioq ? ncqr + 1 : e->cfg.max_ioq;
		*dw0 = (f->nsq - 1) | ((f->ncq - 1) << 16);
		break;
	}
	case GPUNVME_FEAT_IRQ_COALESCE: f->irq_coalesce = v & 0xffff; break;
	case GPUNVME_FEAT_IRQ_CONFIG:
		if ((v & 0xffff) >= EMU_MAX_IV)
			return GPUNVME_SC_INVALID_FIELD | DNR;
		f->irq_config = v & 0x1ffff;
		break;
	case GPUNVME_FEAT_WRITE_ATOMIC: f->write_atomic = v & 1; break;
	case GPUNVME_FEAT_ASYNC_EVENT: f->async_cfg = v; break;
	default:
		return GPUNVME_SC_INVALID_FIELD | DNR;
	}
	return 0;
}

/* ---- log pages (§5.14) -------------------------------------------------------- */

static void u128_set(uint64_t dst[2], uint64_t v)
{
	dst[0] = v;
	dst[1] = 0;
}

static void smart_log(struct gpunvme_emu *e, struct gpunvme_smart_log *s)
{
	struct gpunvme_emu_stats st;
	gpunvme_emu_get_stats(e, &st);
	memset(s, 0, sizeof(*s));
	uint16_t kelvin = 308; /* 35 C */
	s->temperature[0] = (uint8_t)kelvin;
	s->temperature[1] = (uint8_t)(kelvin >> 8);
	s->avail_spare = 100;
	s->spare_thresh = 10;
	/* data units: thousands of 512-byte units, rounded up (Figure 197) */
	u128_set(s->data_units_read, (st.bytes_read / 512 + 999) / 1000);
	u128_set(s->data_units_written, (st.bytes_written / 512 + 999) / 1000);
	u128_set(s->host_reads, st.reads);
	u128_set(s->host_writes, st.writes);
	uint64_t up_ns = emu_now_ns() - e->start_ns;
	u128_set(s->ctrl_busy_time, up_ns / 60000000000ull);
	u128_set(s->power_cycles, 1);
	u128_set(s->power_on_hours, up_ns / 3600000000000ull);
	uint64_t media = 0;
	for (uint32_t i = 0; i < e->nworkers; i++)
		media += __atomic_load_n(&e->workers[i].t.c.media_errors, __ATOMIC_RELAXED);
	u128_set(s->media_errors, media);
	pthread_mutex_lock(&e->err_lock);
	u128_set(s->num_err_log_entries, e->err_count);
	pthread_mutex_unlock(&e->err_lock);
	s->temp_sensor[0] = kelvin;
}

static uint16_t adm_get_log_page(struct gpunvme_emu *e, const struct gpunvme_sqe *c)
{
	uint8_t lid = c->cdw[0] & 0xff;
	bool rae = (c->cdw[0] >> 15) & 1;
	uint64_t numd = (c->cdw[0] >> 16) | ((uint64_t)(c->cdw[1] & 0xffff) << 16);
	uint64_t len = (numd + 1) * 4;
	uint64_t off = c->cdw[2] | ((uint64_t)c->cdw[3] << 32);
	uint8_t buf[EMU_ERRLOG_ENTRIES * sizeof(struct gpunvme_error_log)];
	uint64_t size;

	if (off & 3) /* §5.14: the offset is dword aligned */
		return GPUNVME_SC_INVALID_FIELD | DNR;
	memset(buf, 0, sizeof(buf));
	switch (lid) {
	case GPUNVME_LOG_ERROR: {
		struct gpunvme_error_log *l = (struct gpunvme_error_log *)(void *)buf;
		pthread_mutex_lock(&e->err_lock);
		/* newest first; entries never used read as zero */
		uint64_t n = e->err_count < EMU_ERRLOG_ENTRIES ? e->err_count : EMU_ERRLOG_ENTRIES;
		for (uint64_t i = 0; i < n; i++)
			l[i] = e->errlog[(e->err_count - 1 - i) % EMU_ERRLOG_ENTRIES];
		pthread_mutex_unlock(&e->err_lock);
		size = EMU_ERRLOG_ENTRIES * sizeof(*l);
		if (!rae)
			e->aer_masked &= ~(1u << GPUNVME_AER_TYPE_ERROR);
		break;
	}
	case GPUNVME_LOG_SMART:
		/* LPA bit 0 = 0: the log is controller wide only */
		if (c->nsid != 0 && c->nsid != GPUNVME_NSID_ALL)
			return GPUNVME_SC_INVALID_FIELD | DNR;
		smart_log(e, (struct gpunvme_smart_log *)(void *)buf);
		size = sizeof(struct gpunvme_smart_log);
		if (!rae)
			e->aer_masked &= ~(1u << GPUNVME_AER_TYPE_SMART);
		break;
	case GPUNVME_LOG_FW_SLOT:
		buf[0] = 1; /* active slot 1 */
		memcpy(buf + 8, "0.1.0   ", 8);
		size = 512;
		break;
	default:
		return GPUNVME_SC_INVALID_FIELD | DNR;
	}
	if (off >= size) /* QEMU: an offset at or past the end is invalid */
		return GPUNVME_SC_INVALID_FIELD | DNR;
	uint64_t n = size - off < len ? size - off : len;
	return emu_dma_to_host(&e->at, c, buf + off, n);
}

/* ---- Abort (§5.1) and AER (§5.2) ------------------------------------------------ */

static uint16_t adm_abort(struct gpunvme_emu *e, const struct gpunvme_sqe *c, uint32_t *dw0)
{
	uint16_t sqid = c->cdw[0] & 0xffff, cid = c->cdw[0] >> 16;
	*dw0 = 1; /* not aborted, unless found below */
	if (!emu_sq_get(e, sqid))
		return GPUNVME_SC_INVALID_FIELD | DNR;
	if (sqid == 0) {
		for (uint32_t i = 0; i < e->naers; i++) {
			if (e->aer_cids[i] != cid)
				continue;
			memmove(&e->aer_cids[i], &e->aer_cids[i + 1], (e->naers - i - 1) * sizeof(e->aer_cids[0]));
			e->naers--;
			e->sq[0]->inflight++;
			emu_cq_enqueue(e->cq[0], e->sq[0], cid, 0, GPUNVME_SC_ABORT_REQ, 0);
			*dw0 = 0;
			break;
		}
		return 0;
	}
	struct emu_sq *sq = e->sq[sqid];
	struct emu_worker *w = &e->workers[sq->cq->worker];
	pthread_mutex_lock(&w->lock);
	for (uint32_t i = 0; i < sq->nhung; i++) {
		if (sq->hung[i] != cid)
			continue;
		sq->hung[i] = sq->hung[--sq->nhung];
		emu_cq_enqueue(sq->cq, sq, cid, 0, GPUNVME_SC_ABORT_REQ, 0);
		*dw0 = 0;
		break;
	}
	pthread_mutex_unlock(&w->lock);
	return 0;
}

bool emu_admin_exec(struct gpunvme_emu *e, const struct gpunvme_sqe *c, uint32_t *dw0, uint16_t *status)
{
	*dw0 = 0;
	/* fused operations and SGLs: not supported (FUSES = 0, SGLS = 0) */
	if (c->flags & (GPUNVME_FLAGS_FUSE_MASK | GPUNVME_FLAGS_PSDT_MASK)) {
		*status = GPUNVME_SC_INVALID_FIELD | DNR;
		return true;
	}
	switch (c->opc) {
	case GPUNVME_ADM_IDENTIFY: *status = adm_identify(e, c); break;
	case GPUNVME_ADM_CREATE_CQ: *status = adm_create_cq(e, c); break;
	case GPUNVME_ADM_CREATE_SQ: *status = adm_create_sq(e, c); break;
	case GPUNVME_ADM_DELETE_SQ: *status = adm_delete_sq(e, c); break;
	case GPUNVME_ADM_DELETE_CQ: *status = adm_delete_cq(e, c); break;
	case GPUNVME_ADM_GET_FEATURES: *status = adm_get_features(e, c, dw0); break;
	case GPUNVME_ADM_SET_FEATURES: *status = adm_set_features(e, c, dw0); break;
	case GPUNVME_ADM_GET_LOG_PAGE: *status = adm_get_log_page(e, c); break;
	case GPUNVME_ADM_ABORT: *status = adm_abort(e, c, dw0); break;
	case GPUNVME_ADM_ASYNC_EVENT:
		if (e->naers > EMU_AERL) {
			/* no DNR, as QEMU: retry once an event consumed one */
			*status = GPUNVME_SC_AER_LIMIT_EXCEEDED;
			break;
		}
		e->aer_cids[e->naers++] = c->cid;
		return false; /* completes when an event happens */
	default:
		*status = GPUNVME_SC_INVALID_OPCODE | DNR;
		break;
	}
	return true;
}
