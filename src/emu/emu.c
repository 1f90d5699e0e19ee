/* SPDX-License-Identifier: BSD-2-Clause */
/* Emulator life cycle, threads, fault injection and statistics. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "emu/emu_internal.h"

uint64_t emu_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *default_bar_alloc(void *ctx, size_t len)
{
	(void)ctx;
	void *p = aligned_alloc(4096, len);
	if (p)
		memset(p, 0, len);
	return p;
}

static void default_bar_free(void *ctx, void *p, size_t len)
{
	(void)ctx;
	(void)len;
	free(p);
}

/*
 * Idle back-off. A pass that found work resets it; otherwise the thread
 * spins briefly (a doorbell usually follows soon under load), then yields,
 * then sleeps with a growing period capped at idle_sleep_max_us, which is
 * what keeps an idle emulator well under 5% of a core.
 */
struct backoff {
	uint32_t idle;
	uint32_t sleep_us;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void backoff_wait(struct backoff *b, uint32_t max_us)
{
	if (b->idle < 256) {
		cpu_relax();
	} else if (b->idle < 512) {
		sched_yield();
	} else {
		b->sleep_us = b->sleep_us ? b->sleep_us * 2 : 1;
		if (b->sleep_us > max_us)
			b->sleep_us = max_us;
		struct timespec ts = { 0, (long)b->sleep_us * 1000 };
		nanosleep(&ts, NULL);
	}
	b->idle++;
}

static void backoff_reset(struct backoff *b)
{
	b->idle = 0;
	b->sleep_us = 0;
}

static void *worker_main(void *arg)
{
	struct emu_worker *w = arg;
	struct gpunvme_emu *e = w->emu;
	struct backoff b = { 0 };
	struct emu_prof *pf = &w->t.prof;
	if (e->prof)
		pf->t0 = emu_now_ns();
	while (!__atomic_load_n(&e->stop, __ATOMIC_ACQUIRE)) {
		const uint64_t p0 = e->prof ? emu_now_ns() : 0;
		pthread_mutex_lock(&w->lock);
		int n = emu_worker_pass(w);
		uint64_t due = w->next_due;
		pthread_mutex_unlock(&w->lock);
		if (e->prof) {
			pf->passes++;
			const uint64_t end = emu_now_ns();
			if (n > 0) {
				if (!pf->busy_passes++ || p0 - pf->last_ns > EMU_PROF_GAP_NS) {
					pf->burst_ns = p0; /* a new burst: its start */
					pf->burst_busy_ns = 0;
					pf->out_area = 0;
					pf->out_t = p0;
				}
				pf->busy_ns += end - p0;
				pf->burst_busy_ns += end - p0;
				pf->last_ns = end;
			}
			/* the commands outstanding over the burst, counted at
			 * pass ends (passes take microseconds) */
			if (pf->out_t && end - pf->last_ns <= EMU_PROF_GAP_NS) {
				pf->out_area += pf->out * (end - pf->out_t);
				pf->out_t = end;
			}
		}
		if (n > 0) {
			backoff_reset(&b);
		} else if (due) {
			/* a modeled completion is pending: stay awake (sleeping,
			 * with the kernel's timer slack, would add to the modeled
			 * latency). Far from it, yield so other threads keep the
			 * core; within 20 us, spin: a sched_yield costs about a
			 * microsecond, which would show in the modeled latency
			 * (QD1 on the GPU path, bench/gpu_qd1_notes.md) */
			backoff_reset(&b);
			if (due > emu_now_ns() + 20000)
				sched_yield();
			else
				cpu_relax();
		} else {
			backoff_wait(&b, e->cfg.idle_sleep_max_us);
		}
	}
	return NULL;
}

static void *admin_main(void *arg)
{
	struct gpunvme_emu *e = arg;
	struct backoff b = { 0 };
	while (!__atomic_load_n(&e->stop, __ATOMIC_ACQUIRE)) {
		if (emu_admin_pass(e) > 0)
			backoff_reset(&b);
		else
			backoff_wait(&b, e->cfg.idle_sleep_max_us);
	}
	return NULL;
}

int gpunvme_emu_poll(struct gpunvme_emu *e)
{
	if (!e || e->threaded)
		return -EINVAL;
	int n = emu_admin_pass(e);
	for (uint32_t i = 0; i < e->nworkers; i++)
		n += emu_worker_pass(&e->workers[i]);
	return n;
}

static int validate(const struct gpunvme_emu_config *cfg)
{
	if (cfg->nr_ns == 0 || cfg->nr_ns > GPUNVME_EMU_MAX_NS)
		return -EINVAL;
	if (cfg->mqes < 1 || cfg->mqes > 0xffff) /* 0's based; at least 2 entries */
		return -EINVAL;
	if (cfg->dstrd > 15 || cfg->max_ioq < 1 || cfg->mdts > 20 || cfg->workers > 256)
		return -EINVAL;
	if ((uint64_t)cfg->ready_delay_ms > (uint64_t)cfg->cap_to * 500)
		return -EINVAL; /* CSTS.RDY must follow CC.EN within CAP.TO */
	return 0;
}

int gpunvme_emu_create(const struct gpunvme_emu_config *cfg, struct gpunvme_emu **out)
{
	int rc;
	if (!cfg || !out)
		return -EINVAL;
	*out = NULL;
	if ((rc = validate(cfg)))
		return rc;
	struct gpunvme_emu *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->cfg = *cfg;
	e->cfg.serial[sizeof(e->cfg.serial) - 1] = 0;
	e->cfg.model_name[sizeof(e->cfg.model_name) - 1] = 0;
	if (!e->cfg.bar.alloc) {
		e->cfg.bar.alloc = default_bar_alloc;
		e->cfg.bar.free = default_bar_free;
	}
	if (!e->cfg.idle_sleep_max_us)
		e->cfg.idle_sleep_max_us = 1000;
	e->start_ns = emu_now_ns();
	e->dstrd = cfg->dstrd;
	e->page_shift = 12;
	e->model_on = cfg->model.latency_us || cfg->model.read_bps || cfg->model.write_bps || cfg->model.iops;
	for (uint32_t i = 0; i < GPUNVME_EMU_MAX_NS; i++)
		e->ns[i].fd = -1;
	pthread_mutex_init(&e->ev_lock, NULL);
	pthread_mutex_init(&e->err_lock, NULL);
	pthread_mutex_init(&e->fault_lock, NULL);
	if ((rc = emu_dma_init(&e->dma))) {
		free(e);
		return rc;
	}

	/* CAP (§3.1.1): CQR = 1 (contiguous queues), AMS = RR only, CSS = NVM,
	 * MPSMIN = 4 KiB, MPSMAX = 64 KiB */
	e->cap = (uint64_t)cfg->mqes | (1ull << 16) | ((uint64_t)cfg->cap_to << 24) |
		 ((uint64_t)cfg->dstrd << 32) | ((uint64_t)GPUNVME_CAP_CSS_NVM << 37) |
		 ((uint64_t)0 << 48) | ((uint64_t)EMU_MPSMAX << 52);
	/* MDTS is in units of CAP.MPSMIN (4 KiB); 0 means no limit, which we
	 * bound by the largest NLB (65536 blocks) of the largest LBA size. */
	e->max_xfer = cfg->mdts ? (4096ull << cfg->mdts) : (65536ull << 12);

	/* doorbells for the admin queue and every I/O queue, 16 KiB at least */
	size_t bar = GPUNVME_REG_DBS + (size_t)2 * (cfg->max_ioq + 1) * (4u << cfg->dstrd);
	bar = (bar + 4095) & ~(size_t)4095;
	if (bar < 16384)
		bar = 16384;
	e->bar_size = bar;
	/* every doorbell pair that fits in BAR0 is watched, also those beyond
	 * max_ioq: a write there is a host bug worth an event */
	e->db_qids = (uint32_t)((bar - GPUNVME_REG_DBS) / (8u << cfg->dstrd));
	if (e->db_qids > 65536)
		e->db_qids = 65536;
	e->sq = calloc(e->db_qids, sizeof(*e->sq));
	e->cq = calloc(e->db_qids, sizeof(*e->cq));
	if (!e->sq || !e->cq) {
		rc = -ENOMEM;
		goto fail;
	}

	e->nworkers = cfg->workers ? cfg->workers : 1;
	e->threaded = cfg->workers > 0;
	const char *pe = getenv("GPUNVME_EMU_PROFILE"); /* once, off the data path */
	e->prof = pe && !strcmp(pe, "1");
	const char *ee = getenv("GPUNVME_EMU_ERRORS");
	e->say_xfer = ee && !strcmp(ee, "1");
	e->workers = calloc(e->nworkers, sizeof(*e->workers));
	if (!e->workers) {
		rc = -ENOMEM;
		goto fail;
	}
	for (uint32_t i = 0; i < e->nworkers; i++) {
		e->workers[i].emu = e;
		pthread_mutex_init(&e->workers[i].lock, NULL);
		if ((rc = emu_thread_init(&e->workers[i].t, e, i)))
			goto fail;
	}
	if ((rc = emu_thread_init(&e->at, e, e->nworkers)))
		goto fail;

	for (uint32_t i = 0; i < cfg->nr_ns; i++) {
		if ((rc = emu_ns_open(&e->ns[i], i + 1, &cfg->ns[i])))
			goto fail;
		e->nn = i + 1;
	}

	e->bar = e->cfg.bar.alloc(e->cfg.bar.ctx, bar);
	if (!e->bar) {
		rc = -ENOMEM;
		goto fail;
	}
	emu_features_default(e);
	emu_reg_st(e, GPUNVME_REG_CAP, (uint32_t)e->cap);
	emu_reg_st(e, GPUNVME_REG_CAP + 4, (uint32_t)(e->cap >> 32));
	emu_reg_st(e, GPUNVME_REG_VS, GPUNVME_VS(1, 4, 0));

	if (e->threaded) {
		if ((rc = -pthread_create(&e->admin_thread, NULL, admin_main, e)))
			goto fail;
		e->admin_started = true;
		for (uint32_t i = 0; i < e->nworkers; i++) {
			if ((rc = -pthread_create(&e->workers[i].thread, NULL, worker_main, &e->workers[i])))
				goto fail;
			e->workers[i].started = true;
		}
	}
	*out = e;
	return 0;
fail:
	gpunvme_emu_destroy(e);
	return rc;
}

/* GPUNVME_EMU_PROFILE=1, after the workers have been joined: a line per
 * worker that had work, on stderr (a benchmark's tool, not an API) */
static void prof_print(const struct gpunvme_emu *e)
{
	const uint64_t now = emu_now_ns();
	for (uint32_t i = 0; i < e->nworkers; i++) {
		const struct emu_thread *t = &e->workers[i].t;
		const struct emu_prof *p = &t->prof;
		if (!p->busy_passes)
			continue;
		fprintf(stderr,
			"gpunvme-emu profile: worker %u: %llu commands, %.1f MB read, %llu passes (%llu with work); "
			"busy %.3f s of %.3f s (last burst %.3f s, %.3f s of it busy): file reads %.3f s, "
			"copy waits at pass end %.3f s; model timeline idle %.3f s, completions after their modeled time "
			"%.1f us on average (%.1f us at most); commands outstanding %.1f on average in the last burst "
			"(%llu at most)\n",
			i, (unsigned long long)t->c.cmds, (double)t->c.bytes_read / 1e6, (unsigned long long)p->passes,
			(unsigned long long)p->busy_passes, (double)p->busy_ns / 1e9, (double)(now - p->t0) / 1e9,
			(double)(p->last_ns - p->burst_ns) / 1e9, (double)p->burst_busy_ns / 1e9, (double)p->file_ns / 1e9,
			(double)p->sync_ns / 1e9, (double)p->model_gap_ns / 1e9,
			p->late_n ? (double)p->late_ns / (double)p->late_n / 1e3 : 0.0, (double)p->late_max_ns / 1e3,
			p->out_t > p->burst_ns ? (double)p->out_area / (double)(p->out_t - p->burst_ns) : 0.0,
			(unsigned long long)p->out_max);
	}
}

void gpunvme_emu_destroy(struct gpunvme_emu *e)
{
	if (!e)
		return;
	__atomic_store_n(&e->stop, 1, __ATOMIC_RELEASE);
	if (e->admin_started)
		pthread_join(e->admin_thread, NULL);
	for (uint32_t i = 0; e->workers && i < e->nworkers; i++)
		if (e->workers[i].started)
			pthread_join(e->workers[i].thread, NULL);
	if (e->prof && e->threaded)
		prof_print(e);
	if (e->workers) {
		emu_delete_all_queues(e);
		for (uint32_t i = 0; i < e->nworkers; i++) {
			emu_thread_fini(&e->workers[i].t);
			free(e->workers[i].cqs);
			pthread_mutex_destroy(&e->workers[i].lock);
		}
	}
	emu_free_admin_queues(e);
	emu_thread_fini(&e->at);
	free(e->workers);
	for (uint32_t i = 0; i < e->nn; i++)
		emu_ns_close(&e->ns[i]);
	if (e->bar)
		e->cfg.bar.free(e->cfg.bar.ctx, e->bar, e->bar_size);
	emu_dma_fini(&e->dma);
	free(e->media);
	free(e->sq);
	free(e->cq);
	pthread_mutex_destroy(&e->ev_lock);
	pthread_mutex_destroy(&e->err_lock);
	pthread_mutex_destroy(&e->fault_lock);
	free(e);
}

volatile void *gpunvme_emu_bar0(struct gpunvme_emu *e)
{
	return e->bar;
}

size_t gpunvme_emu_bar0_size(const struct gpunvme_emu *e)
{
	return e->bar_size;
}

unsigned gpunvme_emu_lanes(const struct gpunvme_emu *e)
{
	return e->nworkers + 1;
}

/* Wait until no worker is inside a pass: each pass starts by checking
 * `halted`, so after this nothing is processed any more. */
static void quiesce_workers(struct gpunvme_emu *e)
{
	for (uint32_t i = 0; i < e->nworkers; i++) {
		pthread_mutex_lock(&e->workers[i].lock);
		pthread_mutex_unlock(&e->workers[i].lock);
	}
}

int gpunvme_emu_inject(struct gpunvme_emu *e, const struct gpunvme_emu_fault *f)
{
	if (!e || !f)
		return -EINVAL;
	switch (f->kind) {
	case GPUNVME_EMU_FAULT_MEDIA: {
		if (f->nsid == 0 || f->nsid > e->nn || f->nlb == 0)
			return -EINVAL;
		pthread_mutex_lock(&e->fault_lock);
		struct emu_media_fault *m = realloc(e->media, (e->nmedia + 1) * sizeof(*m));
		if (!m) {
			pthread_mutex_unlock(&e->fault_lock);
			return -ENOMEM;
		}
		e->media = m;
		m[e->nmedia++] = (struct emu_media_fault){ f->nsid, f->slba, f->nlb, f->writes != 0 };
		__atomic_store_n(&e->faults_active, 1, __ATOMIC_RELAXED);
		pthread_mutex_unlock(&e->fault_lock);
		return 0;
	}
	case GPUNVME_EMU_FAULT_DROP: {
		if (f->count == 0)
			return -EINVAL;
		pthread_mutex_lock(&e->fault_lock);
		if (e->ndrops == sizeof(e->drops) / sizeof(e->drops[0])) {
			pthread_mutex_unlock(&e->fault_lock);
			return -ENOSPC;
		}
		e->drops[e->ndrops++] = (struct emu_drop_fault){ f->sqid, f->count };
		__atomic_store_n(&e->faults_active, 1, __ATOMIC_RELAXED);
		pthread_mutex_unlock(&e->fault_lock);
		return 0;
	}
	case GPUNVME_EMU_FAULT_CFS:
		__atomic_store_n(&e->cfs_pending, 1, __ATOMIC_RELEASE);
		__atomic_store_n(&e->halted, 1, __ATOMIC_RELEASE);
		quiesce_workers(e);
		return 0;
	case GPUNVME_EMU_FAULT_REMOVE:
		__atomic_store_n(&e->halted, 1, __ATOMIC_RELEASE);
		__atomic_store_n(&e->removed, 1, __ATOMIC_RELEASE);
		quiesce_workers(e);
		if (!e->threaded) {
			emu_admin_pass(e);
			return 0;
		}
		/* the admin thread owns BAR0 stores; wait for it to go all ones */
		for (int i = 0; i < 2000; i++) {
			if (__atomic_load_n(&e->removed, __ATOMIC_ACQUIRE) == 2)
				return 0;
			struct timespec ts = { 0, 1000000 };
			nanosleep(&ts, NULL);
		}
		return -ETIMEDOUT;
	case GPUNVME_EMU_FAULT_SLOW:
		if (f->latency_us == 0 || f->latency_us > 10000000u)
			return -EINVAL;
		__atomic_store_n(&e->slow_ns, (uint64_t)f->latency_us * 1000u, __ATOMIC_RELAXED);
		return 0;
	case GPUNVME_EMU_FAULT_RETURN:
		if (!__atomic_load_n(&e->removed, __ATOMIC_ACQUIRE))
			return -EINVAL; /* only a removed device can come back */
		__atomic_store_n(&e->return_pending, 1, __ATOMIC_RELEASE);
		if (!e->threaded) {
			emu_admin_pass(e);
			return 0;
		}
		/* the admin thread owns BAR0 stores: wait until it applied it */
		for (int i = 0; i < 2000; i++) {
			if (!__atomic_load_n(&e->return_pending, __ATOMIC_ACQUIRE))
				return 0;
			struct timespec ts = { 0, 1000000 };
			nanosleep(&ts, NULL);
		}
		return -ETIMEDOUT;
	default:
		return -EINVAL;
	}
}

void gpunvme_emu_clear_faults(struct gpunvme_emu *e)
{
	pthread_mutex_lock(&e->fault_lock);
	free(e->media);
	e->media = NULL;
	e->nmedia = 0;
	e->ndrops = 0;
	__atomic_store_n(&e->faults_active, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&e->slow_ns, 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&e->fault_lock);
}

#define SUM(field) __atomic_load_n(&w->t.c.field, __ATOMIC_RELAXED)

void gpunvme_emu_get_stats(struct gpunvme_emu *e, struct gpunvme_emu_stats *st)
{
	memset(st, 0, sizeof(*st));
	for (uint32_t i = 0; i < e->nworkers; i++) {
		struct emu_worker *w = &e->workers[i];
		st->io_cmds += SUM(cmds);
		st->reads += SUM(reads);
		st->writes += SUM(writes);
		st->flushes += SUM(flushes);
		st->write_zeroes += SUM(write_zeroes);
		st->dsm += SUM(dsm);
		st->bytes_read += SUM(bytes_read);
		st->bytes_written += SUM(bytes_written);
		st->errors += SUM(errors);
		st->dropped += SUM(dropped);
	}
	st->admin_cmds = __atomic_load_n(&e->admin_cmds, __ATOMIC_RELAXED);
	st->aers_posted = __atomic_load_n(&e->aers_posted, __ATOMIC_RELAXED);
}

uint64_t gpunvme_emu_sq_commands(struct gpunvme_emu *e, uint16_t qid)
{
	if (qid == 0)
		return __atomic_load_n(&e->admin_cmds, __ATOMIC_RELAXED);
	/* queues change on the admin thread; take the owning worker's lock */
	uint64_t n = 0;
	for (uint32_t i = 0; i < e->nworkers; i++) {
		struct emu_worker *w = &e->workers[i];
		pthread_mutex_lock(&w->lock);
		for (uint32_t k = 0; k < w->ncqs; k++)
			for (struct emu_sq *sq = w->cqs[k]->sqs; sq; sq = sq->next)
				if (sq->id == qid)
					n = __atomic_load_n(&sq->completed, __ATOMIC_RELAXED);
		pthread_mutex_unlock(&w->lock);
	}
	return n;
}
