/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * CPU fault soak: several queue pairs, one thread each, read and write
 * self-describing blocks (tests/harness/blocktag.h: lba, generation, CRC32C)
 * against a model of what each block must hold, while the main thread
 * injects faults into the emulator behind the controller:
 *
 *   MEDIA  an LBA range fails reads (Unrecovered Read Error) and, half of
 *          the time, writes (Write Fault) for 50-300 ms, then is cleared;
 *          no reset. A read must fail with that status or succeed with the
 *          right data, never succeed with wrong data.
 *   DROP   the next 1-4 commands of any I/O queue are swallowed; the
 *          driver's timeout (io_timeout_ms) must end each with -ETIMEDOUT;
 *          then the abort step (gpunvme_qpair_abort_expired), and
 *          gpunvme_reset only if a timed-out command stays unanswered.
 *   SLOW   every command takes 1.5 s more (past io_timeout_ms): they time
 *          out; the fault ends, then the abort step (the emulator cannot
 *          abort a command it is working on, but it answers them late,
 *          which gives their ids back; a reset if not).
 *   CFS    controller fatal: every outstanding command must fail with -EIO
 *          (and the queue pair's poll reports -EIO); then gpunvme_reset.
 *   REMOVE surprise removal: every outstanding command must fail with
 *          -ENODEV within its bound; mid-run the device comes back (RETURN,
 *          as after a hot-plug) and gpunvme_reset brings it up again; at
 *          the very end it stays gone and close must return.
 *
 * Recovery: the workers park (gpunvme_reset fails their outstanding
 * commands from the main thread, so they must not touch their queue pairs
 * meanwhile), gpunvme_reset, then every block is read back and checked: a
 * block whose last write was acknowledged must hold exactly that write; a
 * block with writes that failed or were in flight at the fault may hold
 * any one of them, whole. What it holds becomes the model.
 *
 * Every error a command returns must be explained by a fault active during
 * its life; every command must complete within io_timeout_ms + HANG_SLACK_MS
 * (a hang otherwise); a watchdog ends the program if a library call never
 * returns. Prints the figures at the end; exits non-zero on any mismatch,
 * hang, unexplained error or failed recovery.
 *
 *   soak [--seconds N] [--seed S] [--queues Q]
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "blocktag.h"
#include "ctrl/ctrl_emu.h" /* the emulator behind the controller */
#include "gpunvme/emu.h"
#include "gpunvme/gpunvme.h"

#define BS 4096u
#define BLKS_PER_Q 1024u   /* each queue pair owns its own LBA range */
#define QD 16u             /* commands in flight per queue pair */
#define MAX_NLB 4u
#define MAYBE_MAX 8u
#define IO_TIMEOUT_MS 1000u
#define SLOW_US 1500000u   /* SLOW: half again past the timeout */
#define HANG_SLACK_MS 3000u
#define MAX_Q 8u
#define VERIFY_CHUNK 128u

/* ---- time, randomness -------------------------------------------------------- */

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void sleep_us(uint64_t us)
{
	struct timespec ts = { .tv_sec = (time_t)(us / 1000000u), .tv_nsec = (long)(us % 1000000u) * 1000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* ---- shared state ---------------------------------------------------------------- */

struct media_rec {
	uint64_t slba, nlb;
	bool writes;
	uint64_t on_us, off_us; /* off_us 0: still active */
};

static struct {
	struct gpunvme_ctrl *c;
	struct gpunvme_emu *emu;
	unsigned nq;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool pause_req, drain_req, stop;
	unsigned parked;

	/* which errors a fault explains now (set before the fault, cleared
	 * after the recovery, with the workers parked) */
	atomic_bool drop_active, slow_active, cfs_active, resetting, removed;
	pthread_mutex_t media_lock;
	struct media_rec *media;
	unsigned nmedia;

	atomic_ulong commands, mismatches, hangs, unexplained;
	unsigned long faults_media, faults_drop, faults_slow, faults_cfs, faults_remove, faults_return;
	unsigned long recoveries, recovery_failures, abort_recoveries, resets;
	uint64_t longest_recovery_us, longest_reset_us;
	unsigned long verified_blocks, uncertain_resolved;
} g = { .lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
	.media_lock = PTHREAD_MUTEX_INITIALIZER };

#define REPORT_MAX 20
static atomic_uint reports;

__attribute__((format(printf, 1, 2))) static void report(const char *fmt, ...)
{
	if (atomic_fetch_add(&reports, 1) >= REPORT_MAX)
		return;
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---- the model ---------------------------------------------------------------------- */

struct blk {
	uint64_t gen;              /* last acknowledged write (0: zeroes) */
	uint64_t maybe[MAYBE_MAX]; /* writes that failed or were cut off since */
	uint8_t nmaybe;
	bool any;                  /* too many of those: any whole write of this LBA */
	bool busy;                 /* a command on it is in flight */
};

struct slot {
	struct worker *w;
	bool busy, write, hang_counted;
	bool poisoned; /* completed with an error: buf holds 0xa5 until reused */
	uint64_t lba; /* first LBA, namespace-wide */
	uint32_t nlb;
	uint64_t gen;
	uint64_t t0_us;
	uint8_t *buf;
};

struct worker {
	unsigned id;
	pthread_t th;
	struct gpunvme_qpair *qp;
	uint64_t base; /* first LBA of its range */
	struct blk blk[BLKS_PER_Q];
	struct slot slot[QD];
	uint8_t *bufs;
	uint64_t seq, rng;
	bool stalled; /* poll reported the controller failed or gone */
	unsigned long cmds, errors;
};

static struct worker workers[MAX_Q];

static void blk_maybe(struct blk *b, uint64_t gen)
{
	if (b->nmaybe < MAYBE_MAX)
		b->maybe[b->nmaybe++] = gen;
	else
		b->any = true;
}

/* Whether a whole block of generation gen is what b may hold. */
static bool blk_allows(const struct blk *b, uint64_t gen)
{
	if (gen == b->gen || b->any)
		return true;
	for (unsigned i = 0; i < b->nmaybe; i++)
		if (b->maybe[i] == gen)
			return true;
	return false;
}

/* Check one block read at lba against its model. With `resolve` (after a
 * recovery) the model becomes what was read. Returns false on a mismatch. */
static bool check_block(struct worker *w, uint64_t lba, const uint8_t *p, bool resolve, const char *where)
{
	struct blk *b = &w->blk[lba - w->base];
	uint64_t gen;
	enum bt_kind k = bt_parse(p, BS, lba, &gen);
	static const char *const kind[] = { "whole", "torn", "another LBA's block", "garbage" };
	if (k != BT_WHOLE || !blk_allows(b, gen)) {
		atomic_fetch_add(&g.mismatches, 1);
		report("MISMATCH (%s) q%u LBA %" PRIu64 ": %s, generation %#" PRIx64 "; acknowledged %#" PRIx64
		       ", %u uncertain%s",
		       where, w->id, lba, kind[k], gen, b->gen, b->nmaybe, b->any ? " (any)" : "");
		return false;
	}
	if (resolve) {
		if (b->nmaybe || b->any)
			g.uncertain_resolved++;
		b->gen = gen;
		b->nmaybe = 0;
		b->any = false;
	}
	return true;
}

/* ---- which errors are explained ----------------------------------------------------- */

static bool media_explains(const struct slot *s, uint64_t t1_us)
{
	bool yes = false;
	pthread_mutex_lock(&g.media_lock);
	for (unsigned i = 0; i < g.nmedia && !yes; i++) {
		const struct media_rec *m = &g.media[i];
		if (s->write && !m->writes)
			continue;
		if (m->slba >= s->lba + s->nlb || s->lba >= m->slba + m->nlb)
			continue;
		yes = m->on_us <= t1_us && (m->off_us == 0 || m->off_us >= s->t0_us);
	}
	pthread_mutex_unlock(&g.media_lock);
	return yes;
}

static bool explained(const struct slot *s, const struct gpunvme_cpl *cpl, uint64_t t1_us)
{
	uint16_t sc = cpl->status & 0x7ffu;
	switch (cpl->err) {
	case -EIO:
		if (cpl->status == 0) /* controller fatal, or failed by a reset */
			return atomic_load(&g.cfs_active) || atomic_load(&g.resetting);
		if (sc == (s->write ? GPUNVME_SC_WRITE_FAULT : GPUNVME_SC_UNRECOVERED_READ))
			return media_explains(s, t1_us);
		return false;
	case -ETIMEDOUT:
		return atomic_load(&g.drop_active) || atomic_load(&g.slow_active);
	case -ENODEV:
		return atomic_load(&g.removed);
	default:
		return false;
	}
}

/* ---- workers ------------------------------------------------------------------------------ */

static void io_cb(void *arg, const struct gpunvme_cpl *cpl)
{
	struct slot *s = arg;
	struct worker *w = s->w;
	uint64_t t1 = now_us();
	atomic_fetch_add(&g.commands, 1);
	w->cmds++;
	if (cpl->err) {
		w->errors++;
		if (!explained(s, cpl, t1)) {
			atomic_fetch_add(&g.unexplained, 1);
			report("UNEXPLAINED q%u %s LBA %" PRIu64 "+%u: err %d status %#x after %" PRIu64 " ms", w->id,
			       s->write ? "write" : "read", s->lba, s->nlb, cpl->err, cpl->status, (t1 - s->t0_us) / 1000);
		}
	}
	for (uint32_t i = 0; i < s->nlb; i++) {
		struct blk *b = &w->blk[s->lba + i - w->base];
		b->busy = false;
		if (s->write) {
			if (cpl->err) {
				blk_maybe(b, s->gen);
			} else {
				/* acknowledged: a failed or dropped write can no
				 * longer land (dropped commands never execute;
				 * failed ones completed) */
				b->gen = s->gen;
				b->nmaybe = 0;
				b->any = false;
			}
		} else if (!cpl->err) {
			check_block(w, s->lba + i, s->buf + (size_t)i * BS, false, "read");
		}
	}
	/* a caller may reuse a buffer as soon as its command completed, with
	 * an error too: poison it, so a controller still moving data for it
	 * shows as a torn block or a poisoned read */
	if (cpl->err) {
		memset(s->buf, 0xa5, (size_t)s->nlb * BS);
		s->poisoned = true;
	}
	s->busy = false;
}

static bool submit_one(struct worker *w, struct slot *s)
{
	uint32_t nlb = 1 + (uint32_t)(rnd(&w->rng) % MAX_NLB);
	uint32_t first = (uint32_t)(rnd(&w->rng) % (BLKS_PER_Q - nlb + 1));
	for (uint32_t i = 0; i < nlb; i++)
		if (w->blk[first + i].busy)
			return false;
	bool write = rnd(&w->rng) % 5 < 2;
	s->write = write;
	s->lba = w->base + first;
	s->nlb = nlb;
	s->gen = write ? ((uint64_t)(w->id + 1) << 40) | ++w->seq : 0;
	s->hang_counted = false;
	s->poisoned = false;
	s->t0_us = now_us();
	if (write)
		for (uint32_t i = 0; i < nlb; i++)
			bt_fill(s->buf + (size_t)i * BS, BS, s->lba + i, s->gen);
	int rc = write ? gpunvme_write(w->qp, 1, s->buf, s->lba, nlb, io_cb, s)
		       : gpunvme_read(w->qp, 1, s->buf, s->lba, nlb, io_cb, s);
	if (rc) {
		if (rc != -ENODEV || !atomic_load(&g.removed)) {
			atomic_fetch_add(&g.unexplained, 1);
			report("UNEXPLAINED q%u submit: %d (%s)", w->id, rc, gpunvme_last_error());
		}
		return false;
	}
	s->busy = true;
	for (uint32_t i = 0; i < nlb; i++)
		w->blk[first + i].busy = true;
	return true;
}

static void hang_scan(struct worker *w)
{
	uint64_t t = now_us();
	for (unsigned i = 0; i < QD; i++) {
		struct slot *s = &w->slot[i];
		if (s->busy && !s->hang_counted && t - s->t0_us > (IO_TIMEOUT_MS + HANG_SLACK_MS) * 1000ull) {
			s->hang_counted = true;
			atomic_fetch_add(&g.hangs, 1);
			report("HANG q%u %s LBA %" PRIu64 "+%u: outstanding for %" PRIu64 " ms", w->id,
			       s->write ? "write" : "read", s->lba, s->nlb, (t - s->t0_us) / 1000);
		}
	}
}

static unsigned busy_slots(const struct worker *w)
{
	unsigned n = 0;
	for (unsigned i = 0; i < QD; i++)
		n += w->slot[i].busy;
	return n;
}

static void park(struct worker *w)
{
	(void)w;
	pthread_mutex_lock(&g.lock);
	g.parked++;
	pthread_cond_broadcast(&g.cond);
	while (g.pause_req && !g.stop)
		pthread_cond_wait(&g.cond, &g.lock);
	g.parked--;
	pthread_mutex_unlock(&g.lock);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t next_scan = 0;
	for (;;) {
		pthread_mutex_lock(&g.lock);
		bool pause = g.pause_req, drain = g.drain_req, stop = g.stop;
		pthread_mutex_unlock(&g.lock);
		if (pause && !(drain && busy_slots(w) && !w->stalled)) {
			park(w);
			continue;
		}
		if (stop && (!busy_slots(w) || w->stalled))
			break;
		if (!w->stalled && !drain && !stop)
			for (unsigned i = 0; i < QD; i++)
				if (!w->slot[i].busy)
					submit_one(w, &w->slot[i]);
		if (!w->stalled) {
			int rc = gpunvme_qpair_poll(w->qp, 0);
			if (rc < 0) {
				/* the controller failed or left: every command
				 * was failed; wait for the main thread */
				__atomic_store_n(&w->stalled, true, __ATOMIC_RELEASE);
				bool ok = (rc == -EIO && atomic_load(&g.cfs_active)) ||
					  (rc == -ENODEV && atomic_load(&g.removed));
				if (!ok) {
					atomic_fetch_add(&g.unexplained, 1);
					report("UNEXPLAINED q%u poll: %d (%s)", w->id, rc, gpunvme_last_error());
				}
				if (gpunvme_qpair_outstanding(w->qp) || busy_slots(w)) {
					atomic_fetch_add(&g.hangs, 1);
					report("HANG q%u: poll failed with %d but %u commands are still outstanding",
					       w->id, rc, gpunvme_qpair_outstanding(w->qp));
				}
			} else if (rc == 0) {
				sched_yield();
			}
		} else {
			sleep_us(200);
		}
		uint64_t t = now_us();
		if (t >= next_scan) {
			hang_scan(w);
			next_scan = t + 10000;
		}
	}
	return NULL;
}

/* ---- main thread: faults and recoveries ---------------------------------------------- */

/* Ask the workers to park (after draining when `drain`) and wait for it.
 * Returns false when they do not within the bound. */
static bool pause_workers(bool drain)
{
	pthread_mutex_lock(&g.lock);
	g.pause_req = true;
	g.drain_req = drain;
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += (IO_TIMEOUT_MS + HANG_SLACK_MS) / 1000 + 5;
	int rc = 0;
	while (g.parked < g.nq && rc == 0)
		rc = pthread_cond_timedwait(&g.cond, &g.lock, &dl);
	bool ok = g.parked == g.nq;
	pthread_mutex_unlock(&g.lock);
	if (!ok) {
		atomic_fetch_add(&g.hangs, 1);
		report("HANG: workers did not park (%u of %u)", g.parked, g.nq);
	}
	return ok;
}

static void resume_workers(void)
{
	pthread_mutex_lock(&g.lock);
	g.pause_req = false;
	g.drain_req = false;
	pthread_cond_broadcast(&g.cond);
	pthread_mutex_unlock(&g.lock);
}

/* Read every block with the main thread's queue pair and check it; the
 * model becomes what was read. Workers are parked. */
static bool verify_all(struct gpunvme_qpair *qp, uint8_t *buf)
{
	for (unsigned q = 0; q < g.nq; q++) {
		struct worker *w = &workers[q];
		for (uint32_t off = 0; off < BLKS_PER_Q; off += VERIFY_CHUNK) {
			uint16_t st = 0;
			int rc = gpunvme_read_sync(qp, 1, buf, w->base + off, VERIFY_CHUNK, &st);
			if (rc) {
				report("verify: read of LBA %" PRIu64 "+%u failed: %d status %#x (%s)", w->base + off,
				       VERIFY_CHUNK, rc, st, gpunvme_last_error());
				return false;
			}
			for (uint32_t i = 0; i < VERIFY_CHUNK; i++)
				check_block(w, w->base + off + i, buf + (size_t)i * BS, true, "verify");
			g.verified_blocks += VERIFY_CHUNK;
		}
	}
	return true;
}

enum recovery { R_CHECK, R_ABORT, R_RESET };

/* The abort step on every queue pair (the workers are parked, so the main
 * thread may poll their queue pairs): true when nothing timed out stays
 * unanswered, so no reset is needed. */
static bool abort_step(void)
{
	bool whole = true;
	for (unsigned q = 0; q < g.nq; q++) {
		int left = gpunvme_qpair_abort_expired(workers[q].qp);
		if (left != 0)
			whole = false;
		if (left < 0)
			report("abort step q%u: %d (%s)", q, left, gpunvme_last_error());
	}
	return whole;
}

/* Without a reset, commands that had not timed out are still in flight
 * (parked workers do not drain): the main thread polls their queue pairs
 * until they are done, so the read-back sees no write still under way.
 * Bounded by the driver's own timeout. */
static bool drain_parked(void)
{
	const uint64_t dl = now_us() + (IO_TIMEOUT_MS + HANG_SLACK_MS) * 1000ull;
	for (unsigned q = 0; q < g.nq; q++) {
		struct worker *w = &workers[q];
		while (gpunvme_qpair_outstanding(w->qp) || busy_slots(w)) {
			int rc = gpunvme_qpair_poll(w->qp, 0);
			if (rc < 0 || now_us() > dl) {
				report("drain q%u: poll %d, %u outstanding", q, rc, gpunvme_qpair_outstanding(w->qp));
				return false;
			}
			if (rc == 0)
				sleep_us(100);
		}
	}
	return true;
}

/* Park the workers, recover, re-read everything. R_CHECK: the workers
 * drain first (nothing may be in flight while the blocks are read), no
 * reset. R_ABORT: the abort step, then a reset if it did not suffice.
 * R_RESET: gpunvme_reset. */
static bool recover(struct gpunvme_qpair *mqp, uint8_t *vbuf, enum recovery how)
{
	if (!pause_workers(how == R_CHECK))
		return false;
	uint64_t t0 = now_us();
	bool ok = true, reset = how == R_RESET;
	if (how == R_ABORT) {
		/* the fault first goes away (a slow device answers again,
		 * drops stop), as after a transient fault */
		gpunvme_emu_clear_faults(g.emu);
		reset = !abort_step() || !drain_parked();
		if (!reset)
			g.abort_recoveries++;
	}
	gpunvme_emu_clear_faults(g.emu);
	if (reset) {
		g.resets++;
		atomic_store(&g.resetting, true);
		uint64_t r0 = now_us();
		int rc = gpunvme_reset(g.c);
		uint64_t rdt = now_us() - r0;
		if (rdt > g.longest_reset_us)
			g.longest_reset_us = rdt;
		atomic_store(&g.resetting, false);
		if (rc) {
			report("RECOVERY FAILED: gpunvme_reset: %d (%s)", rc, gpunvme_last_error());
			ok = false;
		}
		for (unsigned q = 0; q < g.nq; q++) {
			if (gpunvme_qpair_outstanding(workers[q].qp) || busy_slots(&workers[q])) {
				atomic_fetch_add(&g.hangs, 1);
				report("HANG q%u: %u commands outstanding after gpunvme_reset", q,
				       gpunvme_qpair_outstanding(workers[q].qp));
			}
		}
	}
	if (how != R_CHECK) {
		for (unsigned q = 0; q < g.nq; q++) {
			/* once a command completed, failed or not, the
			 * controller must not write its buffer any more */
			for (unsigned i = 0; i < QD; i++) {
				struct slot *s = &workers[q].slot[i];
				for (size_t b = 0; s->poisoned && b < (size_t)s->nlb * BS; b++) {
					if (s->buf[b] != 0xa5) {
						atomic_fetch_add(&g.mismatches, 1);
						report("MISMATCH q%u: the buffer of a failed %s at LBA %" PRIu64
						       " changed after its completion (byte %zu)",
						       q, s->write ? "write" : "read", s->lba, b);
						break;
					}
				}
			}
		}
	}
	if (ok && !verify_all(mqp, vbuf))
		ok = false;
	uint64_t dt = now_us() - t0;
	if (how != R_CHECK) {
		g.recoveries++;
		if (dt > g.longest_recovery_us)
			g.longest_recovery_us = dt;
	}
	if (!ok)
		g.recovery_failures++;
	atomic_store(&g.drop_active, false);
	atomic_store(&g.slow_active, false);
	atomic_store(&g.cfs_active, false);
	atomic_store(&g.removed, false);
	for (unsigned q = 0; q < g.nq; q++)
		__atomic_store_n(&workers[q].stalled, false, __ATOMIC_RELAXED);
	resume_workers();
	return ok;
}

static void inject_media(uint64_t *rng)
{
	unsigned n = 1 + (unsigned)(rnd(rng) % 3);
	for (unsigned i = 0; i < n; i++) {
		unsigned q = (unsigned)(rnd(rng) % g.nq);
		uint64_t nlb = 1 + rnd(rng) % 64;
		uint64_t slba = workers[q].base + rnd(rng) % (BLKS_PER_Q - nlb + 1);
		bool writes = rnd(rng) % 2;
		pthread_mutex_lock(&g.media_lock);
		struct media_rec *m = realloc(g.media, (g.nmedia + 1) * sizeof(*m));
		if (m) {
			g.media = m;
			m[g.nmedia++] = (struct media_rec){ slba, nlb, writes, now_us(), 0 };
		}
		pthread_mutex_unlock(&g.media_lock);
		if (!m)
			return;
		struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_MEDIA, .nsid = 1, .slba = slba, .nlb = nlb,
					       .writes = writes };
		if (gpunvme_emu_inject(g.emu, &f) == 0)
			g.faults_media++;
	}
	sleep_us(50000 + rnd(rng) % 250000);
	gpunvme_emu_clear_faults(g.emu);
	uint64_t off = now_us();
	pthread_mutex_lock(&g.media_lock);
	for (unsigned i = 0; i < g.nmedia; i++)
		if (!g.media[i].off_us)
			g.media[i].off_us = off;
	pthread_mutex_unlock(&g.media_lock);
}

static bool all_stalled(void)
{
	for (unsigned q = 0; q < g.nq; q++)
		if (!__atomic_load_n(&workers[q].stalled, __ATOMIC_RELAXED))
			return false;
	return true;
}

/* Surprise removal: every queue pair must notice it (poll -ENODEV) within
 * 3 s, or it counts as a hang. */
static void remove_device(void)
{
	atomic_store(&g.removed, true);
	struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_REMOVE };
	if (gpunvme_emu_inject(g.emu, &f) == 0)
		g.faults_remove++;
	uint64_t dl = now_us() + 3000000u;
	while (!all_stalled() && now_us() < dl)
		sleep_us(1000);
	if (!all_stalled()) {
		atomic_fetch_add(&g.hangs, 1);
		report("HANG: not every queue pair noticed the removal within 3 s");
	}
}

static void watchdog(int sig)
{
	(void)sig;
	static const char msg[] = "soak: HANG: watchdog expired (a library call never returned)\nhangs: 1\n";
	ssize_t r = write(2, msg, sizeof(msg) - 1);
	(void)r;
	_exit(3);
}

static int usage(const char *argv0)
{
	fprintf(stderr, "usage: %s [--seconds N] [--seed S] [--queues 1..%u]\n", argv0, MAX_Q);
	return 2;
}

int main(int argc, char **argv)
{
	unsigned seconds = 60, nq = 4;
	uint64_t seed = 1;
	/* options come in pairs: "--name value" */
	for (int i = 1; i < argc; i += 2) {
		char *end = NULL;
		if (i + 1 >= argc)
			return usage(argv[0]);
		unsigned long long v = strtoull(argv[i + 1], &end, 0);
		if (!end || *end || end == argv[i + 1])
			return usage(argv[0]);
		if (strcmp(argv[i], "--seconds") == 0 && v > 0 && v < 86400)
			seconds = (unsigned)v;
		else if (strcmp(argv[i], "--seed") == 0)
			seed = v;
		else if (strcmp(argv[i], "--queues") == 0 && v >= 1 && v <= MAX_Q)
			nq = (unsigned)v;
		else
			return usage(argv[0]);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGALRM, watchdog);
	alarm(seconds + 120);

	char uri[128];
	int n = snprintf(uri, sizeof(uri), "emu:ram:%uM?lbads=12&workers=2&nsq=%u",
			 (unsigned)((uint64_t)nq * BLKS_PER_Q * BS >> 20), nq + 1);
	if (n <= 0 || (size_t)n >= sizeof(uri))
		return 2;
	struct gpunvme_opts o;
	gpunvme_opts_init(&o);
	o.io_timeout_ms = IO_TIMEOUT_MS;
	o.admin_timeout_ms = 2000;
	o.nr_io_queues = nq + 1;
	int rc = gpunvme_open(uri, &o, &g.c);
	if (rc) {
		fprintf(stderr, "soak: open %s: %s\n", uri, gpunvme_last_error());
		return 1;
	}
	g.emu = gpunvme_ctrl_emu(g.c);
	g.nq = nq;
	printf("soak: %u s, seed %" PRIu64 ", %u queue pairs x %u deep, %u blocks of %u B each, io timeout %u ms\n",
	       seconds, seed, nq, QD, BLKS_PER_Q, BS, IO_TIMEOUT_MS);

	struct gpunvme_qpair *mqp;
	if (gpunvme_qpair_create(g.c, 8, &mqp)) {
		fprintf(stderr, "soak: queue pair: %s\n", gpunvme_last_error());
		return 1;
	}
	uint8_t *vbuf = gpunvme_dma_alloc(g.c, (size_t)VERIFY_CHUNK * BS);
	if (!vbuf)
		return 1;
	for (unsigned q = 0; q < nq; q++) {
		struct worker *w = &workers[q];
		w->id = q;
		w->base = (uint64_t)q * BLKS_PER_Q;
		w->rng = seed * 0x9e3779b97f4a7c15ull + q + 1;
		w->bufs = gpunvme_dma_alloc(g.c, (size_t)QD * MAX_NLB * BS);
		if (!w->bufs || gpunvme_qpair_create(g.c, 64, &w->qp)) {
			fprintf(stderr, "soak: queue pair %u: %s\n", q, gpunvme_last_error());
			return 1;
		}
		for (unsigned i = 0; i < QD; i++)
			w->slot[i] = (struct slot){ .w = w, .buf = w->bufs + (size_t)i * MAX_NLB * BS };
	}
	for (unsigned q = 0; q < nq; q++)
		if (pthread_create(&workers[q].th, NULL, worker_main, &workers[q]))
			return 1;

	uint64_t rng = seed ^ 0x5eed;
	uint64_t end = now_us() + (uint64_t)seconds * 1000000u;
	uint64_t remove_at = end - (seconds > 5 ? 1000000u : 200000u);
	bool fatal = false;
	while (!fatal && now_us() < remove_at) {
		sleep_us(100000 + rnd(&rng) % 300000);
		if (now_us() >= remove_at)
			break;
		unsigned pick = (unsigned)(rnd(&rng) % 100);
		if (pick < 45) {
			inject_media(&rng);
		} else if (pick < 62) {
			struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_DROP, .sqid = GPUNVME_EMU_SQID_ANY,
						       .count = 1 + (uint32_t)(rnd(&rng) % 4) };
			atomic_store(&g.drop_active, true);
			if (gpunvme_emu_inject(g.emu, &f) == 0)
				g.faults_drop++;
			/* the driver's timeout must end the dropped commands */
			sleep_us((IO_TIMEOUT_MS + 300) * 1000ull);
			fatal = !recover(mqp, vbuf, R_ABORT);
		} else if (pick < 72) {
			struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_SLOW, .latency_us = SLOW_US };
			atomic_store(&g.slow_active, true);
			if (gpunvme_emu_inject(g.emu, &f) == 0)
				g.faults_slow++;
			sleep_us((IO_TIMEOUT_MS + 300) * 1000ull);
			fatal = !recover(mqp, vbuf, R_ABORT);
		} else if (pick < 78) {
			/* surprise removal, and the device comes back */
			remove_device();
			struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_RETURN };
			if (gpunvme_emu_inject(g.emu, &f) == 0)
				g.faults_return++;
			fatal = !recover(mqp, vbuf, R_RESET);
		} else if (pick < 95) {
			struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_CFS };
			atomic_store(&g.cfs_active, true);
			if (gpunvme_emu_inject(g.emu, &f) == 0)
				g.faults_cfs++;
			uint64_t dl = now_us() + 3000000u;
			while (!all_stalled() && now_us() < dl)
				sleep_us(1000);
			if (!all_stalled()) {
				atomic_fetch_add(&g.hangs, 1);
				report("HANG: not every queue pair noticed CFS within 3 s");
			}
			fatal = !recover(mqp, vbuf, R_RESET);
		} else {
			/* a check without a fault: drain, park, verify */
			fatal = !recover(mqp, vbuf, R_CHECK);
		}
	}

	/* the last check with everything drained, then the surprise removal */
	if (!fatal) {
		if (pause_workers(true)) {
			gpunvme_emu_clear_faults(g.emu);
			if (!verify_all(mqp, vbuf))
				g.recovery_failures++;
			resume_workers();
			sleep_us(100000);
			remove_device();
		} else {
			fatal = true;
		}
	}
	pthread_mutex_lock(&g.lock);
	g.stop = true;
	pthread_cond_broadcast(&g.cond);
	pthread_mutex_unlock(&g.lock);
	for (unsigned q = 0; q < nq; q++)
		pthread_join(workers[q].th, NULL);
	for (unsigned q = 0; q < nq; q++) {
		gpunvme_qpair_destroy(workers[q].qp);
		gpunvme_dma_free(g.c, workers[q].bufs);
	}
	gpunvme_qpair_destroy(mqp);
	gpunvme_dma_free(g.c, vbuf);
	gpunvme_close(g.c);
	alarm(0);

	printf("commands: %lu\n", (unsigned long)atomic_load(&g.commands));
	printf("faults: media=%lu drop=%lu slow=%lu cfs=%lu remove=%lu (came back %lu times)\n", g.faults_media,
	       g.faults_drop, g.faults_slow, g.faults_cfs, g.faults_remove, g.faults_return);
	printf("recoveries: %lu (%lu without a reset: aborted or answered late; %lu with a controller reset)\n", g.recoveries, g.abort_recoveries,
	       g.resets);
	printf("longest recovery: %.1f ms\n", (double)g.longest_recovery_us / 1000.0);
	printf("longest reset: %.1f ms (gpunvme_reset alone; a recovery adds the re-read of every block)\n",
	       (double)g.longest_reset_us / 1000.0);
	printf("mismatches: %lu\n", (unsigned long)atomic_load(&g.mismatches));
	printf("hangs: %lu\n", (unsigned long)atomic_load(&g.hangs));
	printf("unexplained errors: %lu\n", (unsigned long)atomic_load(&g.unexplained));
	printf("failed recoveries: %lu\n", g.recovery_failures);
	printf("blocks verified: %lu (%lu uncertain blocks resolved)\n", g.verified_blocks, g.uncertain_resolved);
	free(g.media);
	bool bad = fatal || atomic_load(&g.mismatches) || atomic_load(&g.hangs) || atomic_load(&g.unexplained) ||
		   g.recovery_failures;
	return bad ? 1 : 0;
}
