/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * bench_emu_null: throughput of the NVMe controller emulator on a null
 * namespace, driven by one CPU producer thread.
 *
 * The controller is brought up the way a driver does it, by raw BAR0
 * register writes and raw admin SQEs (§7.6.1: disable, AQA/ASQ/ACQ, enable,
 * Set Features Number of Queues, Create I/O CQ/SQ). Then the producer keeps
 * N queue pairs of depth D full of 4 KiB Read commands: it reaps completions
 * by phase tag (§4.6), re-submits one command per completion (SQE copied from
 * a template, CID/SLBA/PRP1 patched), and rings each doorbell once per batch
 * with a release store, which is what a well-behaved driver does.
 *
 * The null namespace moves no data but validates PRPs, so the numbers are
 * the cost of the controller's command path (fetch, decode, PRP check,
 * completion post) plus this producer.
 *
 * Latency is submission-batch to completion-reap time, measured with one
 * clock read per pass over the queues, averaged over all commands.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpunvme/emu.h"
#include "gpunvme/nvme.h"

#define PAGE 4096u
#define IOVA_BASE 0x10000000ull
#define DATA_PAGES 64u
#define NS_SIZE (1ull << 30)
#define ADMIN_DEPTH 32u
#define ADMIN_TIMEOUT_NS 5000000000ull
#define STALL_TIMEOUT_NS 5000000000ull

struct qp {
	uint16_t qid;
	uint32_t depth;
	struct gpunvme_sqe *sq;
	struct gpunvme_cqe *cq;
	uint32_t sq_tail, cq_head, outstanding;
	uint16_t phase;
	uint32_t *sq_db, *cq_db;
	uint64_t *ts;          /* submission time per CID */
	uint16_t *free_cids;   /* stack of CIDs not outstanding */
	uint32_t nfree;
	uint64_t sq_iova, cq_iova;
};

struct bench {
	struct gpunvme_emu *emu;
	volatile uint8_t *bar;
	uint32_t dstrd;
	uint64_t cap_to_ns;
	uint8_t *mem;          /* everything the controller may DMA */
	size_t mem_len;
	/* admin queue */
	struct gpunvme_sqe *asq;
	struct gpunvme_cqe *acq;
	uint32_t asq_tail, acq_head;
	uint16_t aphase, acid;
	uint8_t *idbuf;
	uint8_t *data;
	struct qp *qps;
	uint32_t nqp;
};

struct params {
	uint32_t queues, depth, workers;
	double seconds;
	uint32_t batch;        /* max SQEs per doorbell write, 0 = all free slots */
};

struct result {
	double cmds_per_s, mib_per_s, avg_lat_us;
	uint64_t cmds;
	uint64_t doorbells;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void pause_short(void)
{
	/* Used only while waiting for admin/bring-up, never on the hot path. */
	struct timespec ts = {0, 10000};
	nanosleep(&ts, NULL);
}

/* ---- BAR0 access: shared memory the controller polls ---------------------- */

static uint32_t rd32(struct bench *b, uint32_t off)
{
	return __atomic_load_n((uint32_t *)(uintptr_t)(b->bar + off), __ATOMIC_ACQUIRE);
}

static void wr32(struct bench *b, uint32_t off, uint32_t v)
{
	__atomic_store_n((uint32_t *)(uintptr_t)(b->bar + off), v, __ATOMIC_RELEASE);
}

static void wr64(struct bench *b, uint32_t off, uint64_t v)
{
	/* 64-bit registers as two dword writes, low first (§3.1: host software
	 * may access 64-bit registers as two 32-bit accesses). */
	wr32(b, off, (uint32_t)v);
	wr32(b, off + 4, (uint32_t)(v >> 32));
}

/* CQE dword 3 (CID, phase, status; §4.6 Figure 121) in one acquire load: the
 * controller writes it last with release order, so once the phase matches,
 * dwords 0-2 are visible too. One 32-bit load, not a 16-bit load of the
 * status half, so the load pairs with the controller's 32-bit store (also
 * what ThreadSanitizer needs to see the synchronisation). */
static uint32_t cqe_dw3(const struct gpunvme_cqe *c)
{
	return __atomic_load_n((const uint32_t *)(const void *)&c->cid, __ATOMIC_ACQUIRE);
}

static uint64_t iova_of(struct bench *b, const void *p)
{
	return IOVA_BASE + (uint64_t)((const uint8_t *)p - b->mem);
}

/* ---- controller bring-up ---------------------------------------------------- */

/* Wait until (CSTS & mask) == want, bounded by CAP.TO (§3.1.1: the worst
 * case time the host should wait for RDY to change). */
static int wait_csts(struct bench *b, uint32_t mask, uint32_t want)
{
	uint64_t deadline = now_ns() + b->cap_to_ns;

	for (;;) {
		uint32_t csts = rd32(b, GPUNVME_REG_CSTS);
		if ((csts & mask) == want)
			return 0;
		if (csts & GPUNVME_CSTS_CFS)
			return -EIO;
		if (now_ns() > deadline)
			return -ETIMEDOUT;
		pause_short();
	}
}

/* One admin command, synchronously: SQE at the tail, doorbell, wait for the
 * CQE with the current phase, CQ head doorbell. Bounded by ADMIN_TIMEOUT_NS. */
static int admin_cmd(struct bench *b, struct gpunvme_sqe *s, uint32_t *dw0)
{
	uint16_t cid = b->acid++;
	uint64_t deadline;

	s->cid = cid;
	b->asq[b->asq_tail] = *s;
	b->asq_tail = (b->asq_tail + 1) % ADMIN_DEPTH;
	wr32(b, gpunvme_sq_doorbell(0, b->dstrd), b->asq_tail);

	deadline = now_ns() + ADMIN_TIMEOUT_NS;
	for (;;) {
		struct gpunvme_cqe *c = &b->acq[b->acq_head];
		uint32_t dw3 = cqe_dw3(c);
		uint16_t sf = (uint16_t)(dw3 >> 16);
		if (gpunvme_cqe_phase(sf) == b->aphase) {
			uint16_t st = gpunvme_cqe_status(sf);
			uint16_t got = (uint16_t)dw3;
			if (dw0)
				*dw0 = c->dw0;
			b->acq_head = (b->acq_head + 1) % ADMIN_DEPTH;
			if (b->acq_head == 0)
				b->aphase ^= 1;
			wr32(b, gpunvme_cq_doorbell(0, b->dstrd), b->acq_head);
			if (got != cid) {
				fprintf(stderr, "admin: CQE for CID %u, expected %u\n", got, cid);
				return -EPROTO;
			}
			if (st) {
				fprintf(stderr, "admin %s: %s\n", gpunvme_opcode_str(1, s->opc),
					gpunvme_status_str(st));
				return -EIO;
			}
			return 0;
		}
		if (now_ns() > deadline) {
			fprintf(stderr, "admin %s: no completion after %llu s\n",
				gpunvme_opcode_str(1, s->opc),
				(unsigned long long)(ADMIN_TIMEOUT_NS / 1000000000ull));
			return -ETIMEDOUT;
		}
		pause_short();
	}
}

static size_t round_page(size_t n)
{
	return (n + PAGE - 1) & ~(size_t)(PAGE - 1);
}

static void bench_teardown(struct bench *b)
{
	if (b->emu) {
		/* Normal shutdown (§7.6.2); best effort, bounded by CAP.TO. */
		if (b->bar) {
			uint32_t cc = rd32(b, GPUNVME_REG_CC);
			wr32(b, GPUNVME_REG_CC, (cc & ~GPUNVME_CC_SHN_MASK) |
						GPUNVME_CC_SHN_NORMAL << GPUNVME_CC_SHN_SHIFT);
			(void)wait_csts(b, GPUNVME_CSTS_SHST_MASK,
					GPUNVME_SHST_COMPLETE << GPUNVME_CSTS_SHST_SHIFT);
		}
		gpunvme_emu_destroy(b->emu);
	}
	if (b->qps)
		for (uint32_t i = 0; i < b->nqp; i++)
			free(b->qps[i].ts), free(b->qps[i].free_cids);
	free(b->qps);
	free(b->mem);
	memset(b, 0, sizeof(*b));
}

static int bench_setup(struct bench *b, const struct params *p)
{
	struct gpunvme_emu_config cfg;
	struct gpunvme_sqe s;
	uint32_t dw0 = 0;
	int rc;

	memset(b, 0, sizeof(*b));
	gpunvme_emu_config_init(&cfg);
	cfg.nr_ns = 1;
	memset(&cfg.ns[0], 0, sizeof(cfg.ns[0]));
	cfg.ns[0].backing = GPUNVME_EMU_BACK_NULL;
	cfg.ns[0].size = NS_SIZE;
	cfg.ns[0].lba_shift = 12;
	cfg.workers = p->workers;
	if (cfg.mqes < p->depth - 1)
		cfg.mqes = p->depth - 1;
	if (cfg.max_ioq < p->queues)
		cfg.max_ioq = (uint16_t)p->queues;
	rc = gpunvme_emu_create(&cfg, &b->emu);
	if (rc) {
		fprintf(stderr, "gpunvme_emu_create: %s\n", strerror(-rc));
		b->emu = NULL;
		return rc;
	}

	/* Memory layout: admin SQ, admin CQ, identify page, per queue pair SQ
	 * and CQ (page-rounded, §5.3/§5.4 PC=1 needs contiguous pages), data. */
	size_t sq_bytes = round_page((size_t)p->depth * 64);
	size_t cq_bytes = round_page((size_t)p->depth * 16);
	b->mem_len = 3 * PAGE + p->queues * (sq_bytes + cq_bytes) + DATA_PAGES * PAGE;
	b->mem = aligned_alloc(PAGE, b->mem_len);
	b->qps = calloc(p->queues, sizeof(*b->qps));
	if (!b->mem || !b->qps) {
		bench_teardown(b);
		return -ENOMEM;
	}
	memset(b->mem, 0, b->mem_len);
	b->nqp = p->queues;
	b->asq = (void *)b->mem;
	b->acq = (void *)(b->mem + PAGE);
	b->idbuf = b->mem + 2 * PAGE;
	uint8_t *q = b->mem + 3 * PAGE;
	for (uint32_t i = 0; i < p->queues; i++) {
		struct qp *x = &b->qps[i];
		x->qid = (uint16_t)(i + 1);
		x->depth = p->depth;
		x->sq = (void *)q;
		x->cq = (void *)(q + sq_bytes);
		q += sq_bytes + cq_bytes;
		x->phase = 1;
		x->ts = calloc(p->depth, sizeof(*x->ts));
		x->free_cids = calloc(p->depth, sizeof(*x->free_cids));
		if (!x->ts || !x->free_cids) {
			bench_teardown(b);
			return -ENOMEM;
		}
		for (uint32_t k = 0; k < p->depth; k++)
			x->free_cids[x->nfree++] = (uint16_t)(p->depth - 1 - k);
	}
	b->data = q;
	rc = gpunvme_emu_dma_map(b->emu, IOVA_BASE, b->mem, b->mem_len);
	if (rc) {
		fprintf(stderr, "gpunvme_emu_dma_map: %s\n", strerror(-rc));
		bench_teardown(b);
		return rc;
	}

	b->bar = gpunvme_emu_bar0(b->emu);
	uint64_t cap = (uint64_t)rd32(b, GPUNVME_REG_CAP) | (uint64_t)rd32(b, GPUNVME_REG_CAP + 4) << 32;
	b->dstrd = gpunvme_cap_dstrd(cap);
	b->cap_to_ns = (uint64_t)(gpunvme_cap_to(cap) ? gpunvme_cap_to(cap) : 1) * 500000000ull;
	if (gpunvme_cap_mqes(cap) + 1 < p->depth) {
		fprintf(stderr, "CAP.MQES %u < depth %u\n", gpunvme_cap_mqes(cap) + 1, p->depth);
		bench_teardown(b);
		return -EINVAL;
	}

	/* §7.6.1 initialization. */
	wr32(b, GPUNVME_REG_CC, 0);
	if ((rc = wait_csts(b, GPUNVME_CSTS_RDY, 0)) != 0) {
		fprintf(stderr, "CSTS.RDY did not clear: %s\n", strerror(-rc));
		bench_teardown(b);
		return rc;
	}
	wr32(b, GPUNVME_REG_AQA, GPUNVME_AQA(ADMIN_DEPTH - 1, ADMIN_DEPTH - 1));
	wr64(b, GPUNVME_REG_ASQ, iova_of(b, b->asq));
	wr64(b, GPUNVME_REG_ACQ, iova_of(b, b->acq));
	b->aphase = 1;
	wr32(b, GPUNVME_REG_CC, GPUNVME_CC_EN | 6u << GPUNVME_CC_IOSQES_SHIFT |
				4u << GPUNVME_CC_IOCQES_SHIFT);
	if ((rc = wait_csts(b, GPUNVME_CSTS_RDY, GPUNVME_CSTS_RDY)) != 0) {
		fprintf(stderr, "CSTS.RDY did not set: %s\n", strerror(-rc));
		bench_teardown(b);
		return rc;
	}

	/* Number of Queues (§5.21.1.7): 0's based counts in cdw11. */
	memset(&s, 0, sizeof(s));
	s.opc = GPUNVME_ADM_SET_FEATURES;
	s.cdw[0] = GPUNVME_FEAT_NUM_QUEUES;
	s.cdw[1] = (p->queues - 1) | (p->queues - 1) << 16;
	if ((rc = admin_cmd(b, &s, &dw0)) != 0)
		goto fail;
	if ((dw0 & 0xffff) + 1 < p->queues || (dw0 >> 16) + 1 < p->queues) {
		fprintf(stderr, "controller granted %u SQs / %u CQs, need %u\n",
			(dw0 & 0xffff) + 1, (dw0 >> 16) + 1, p->queues);
		rc = -EINVAL;
		goto fail;
	}
	for (uint32_t i = 0; i < p->queues; i++) {
		struct qp *x = &b->qps[i];
		memset(&s, 0, sizeof(s));
		s.opc = GPUNVME_ADM_CREATE_CQ;
		s.prp1 = iova_of(b, x->cq);
		s.queue.qid = x->qid;
		s.queue.qsize = (uint16_t)(p->depth - 1);
		s.queue.qflags = GPUNVME_Q_PC;  /* polled: no IEN */
		if ((rc = admin_cmd(b, &s, NULL)) != 0)
			goto fail;
		memset(&s, 0, sizeof(s));
		s.opc = GPUNVME_ADM_CREATE_SQ;
		s.prp1 = iova_of(b, x->sq);
		s.queue.qid = x->qid;
		s.queue.qsize = (uint16_t)(p->depth - 1);
		s.queue.qflags = GPUNVME_Q_PC;
		s.queue.cqid_iv = x->qid;
		if ((rc = admin_cmd(b, &s, NULL)) != 0)
			goto fail;
		x->sq_db = (uint32_t *)(uintptr_t)(b->bar + gpunvme_sq_doorbell(x->qid, b->dstrd));
		x->cq_db = (uint32_t *)(uintptr_t)(b->bar + gpunvme_cq_doorbell(x->qid, b->dstrd));
	}
	return 0;
fail:
	bench_teardown(b);
	return rc;
}

/* ---- the measured loop ------------------------------------------------------ */

static int run(struct bench *b, const struct params *p, struct result *r)
{
	const uint64_t nlbas = NS_SIZE >> 12;
	struct gpunvme_sqe tmpl;
	uint64_t slba = 0, done = 0, lat_sum = 0, doorbells = 0;
	uint64_t done_at_start = 0, lat_at_start = 0, db_at_start = 0;
	uint64_t t0, t_start = 0, t_end, last_progress;
	uint64_t warmup = (uint64_t)(p->seconds * 1e9) / 10;
	uint64_t total = (uint64_t)(p->seconds * 1e9) + warmup;
	bool measuring = false;
	uint32_t max_out = p->depth - 1;  /* a queue of D entries holds D-1 (§4.1.1) */
	uint32_t batch = p->batch ? p->batch : max_out;

	memset(&tmpl, 0, sizeof(tmpl));
	tmpl.opc = GPUNVME_CMD_READ;
	tmpl.nsid = 1;
	tmpl.rw.nlb = 0;  /* one 4 KiB block, 0's based */

	t0 = last_progress = now_ns();
	for (uint64_t iter = 0;; iter++) {
		uint64_t now = now_ns();
		uint64_t reaped_pass = 0;

		if (!measuring && now - t0 >= warmup) {
			measuring = true;
			t_start = now;
			done_at_start = done;
			lat_at_start = lat_sum;
			db_at_start = doorbells;
		}
		if (now - t0 >= total)
			break;

		for (uint32_t i = 0; i < b->nqp; i++) {
			struct qp *x = &b->qps[i];
			uint32_t n = 0;

			/* Reap: the phase tag flips on every wrap (§4.6). */
			for (;;) {
				uint32_t dw3 = cqe_dw3(&x->cq[x->cq_head]);
				uint16_t sf = (uint16_t)(dw3 >> 16), cid = (uint16_t)dw3;
				if ((sf & 1) != x->phase)
					break;
				if (sf >> 1) {
					fprintf(stderr, "qid %u cid %u: %s\n", x->qid, cid,
						gpunvme_status_str((uint16_t)(sf >> 1)));
					return -EIO;
				}
				if (cid >= x->depth) {
					fprintf(stderr, "qid %u: CQE with CID %u never issued\n", x->qid, cid);
					return -EPROTO;
				}
				lat_sum += now - x->ts[cid];
				x->free_cids[x->nfree++] = cid;
				if (++x->cq_head == x->depth) {
					x->cq_head = 0;
					x->phase ^= 1;
				}
				n++;
			}
			if (n) {
				x->outstanding -= n;
				reaped_pass += n;
				__atomic_store_n(x->cq_db, x->cq_head, __ATOMIC_RELEASE);
				doorbells++;
			}

			/* Refill from the free CID stack: CIDs must be unique among
			 * outstanding commands of an SQ (§4.2), and completions need
			 * not come back in order. */
			uint32_t free_slots = max_out - x->outstanding;
			while (free_slots) {
				uint32_t k = free_slots < batch ? free_slots : batch;
				for (uint32_t j = 0; j < k; j++) {
					uint32_t t = x->sq_tail;
					struct gpunvme_sqe *e = &x->sq[t];
					*e = tmpl;
					uint16_t cid = x->free_cids[--x->nfree];
					e->cid = cid;
					e->prp1 = iova_of(b, b->data) + (uint64_t)(cid % DATA_PAGES) * PAGE;
					e->rw.slba = slba;
					if (++slba == nlbas)
						slba = 0;
					x->ts[cid] = now;
					x->sq_tail = t + 1 == x->depth ? 0 : t + 1;
				}
				x->outstanding += k;
				free_slots -= k;
				/* Release: the SQEs above are visible before the tail. */
				__atomic_store_n(x->sq_db, x->sq_tail, __ATOMIC_RELEASE);
				doorbells++;
			}
		}
		done += reaped_pass;
		if (reaped_pass)
			last_progress = now;
		else if (now - last_progress > STALL_TIMEOUT_NS) {
			fprintf(stderr, "no completion for %llu s, %" PRIu64 " commands done\n",
				(unsigned long long)(STALL_TIMEOUT_NS / 1000000000ull), done);
			return -ETIMEDOUT;
		}
		/* Two cores: when nothing came back, let the worker run. */
		if (!reaped_pass && (iter & 63) == 63)
			sched_yield();
	}
	t_end = now_ns();

	double secs = (double)(t_end - t_start) / 1e9;
	r->cmds = done - done_at_start;
	r->doorbells = doorbells - db_at_start;
	r->cmds_per_s = (double)r->cmds / secs;
	r->mib_per_s = r->cmds_per_s * 4096.0 / (1024.0 * 1024.0);
	r->avg_lat_us = r->cmds ? (double)(lat_sum - lat_at_start) / (double)r->cmds / 1000.0 : 0;

	struct gpunvme_emu_stats st;
	gpunvme_emu_get_stats(b->emu, &st);
	if (st.errors) {
		fprintf(stderr, "emulator reports %" PRIu64 " errors\n", st.errors);
		return -EIO;
	}
	/* Cross-check the producer's count against the controller's: every
	 * completion reaped must be a Read the controller says it finished. */
	if (st.reads < done) {
		fprintf(stderr, "count mismatch: reaped %" PRIu64 ", emulator reads %" PRIu64
			" bytes_read %" PRIu64 "\n", done, st.reads, st.bytes_read);
		return -EPROTO;
	}
	return 0;
}

static int run_one(const struct params *p, struct result *r)
{
	struct bench b;
	int rc = bench_setup(&b, p);

	if (rc)
		return rc;
	rc = run(&b, p, r);
	bench_teardown(&b);
	return rc;
}

static void print_header(FILE *csv)
{
	printf("%6s %6s %7s %14s %10s %12s %10s\n", "queues", "depth", "workers", "commands/s",
	       "MiB/s", "avg_lat_us", "cmds/db");
	if (csv)
		fprintf(csv, "queues,depth,workers,seconds,commands,commands_per_s,mib_per_s,avg_lat_us,cmds_per_doorbell\n");
}

static void print_row(FILE *csv, const struct params *p, const struct result *r)
{
	double per_db = r->doorbells ? (double)r->cmds / (double)r->doorbells : 0;

	printf("%6u %6u %7u %14.0f %10.1f %12.2f %10.1f\n", p->queues, p->depth, p->workers,
	       r->cmds_per_s, r->mib_per_s, r->avg_lat_us, per_db);
	fflush(stdout);
	if (csv)
		fprintf(csv, "%u,%u,%u,%.3f,%" PRIu64 ",%.0f,%.1f,%.3f,%.2f\n", p->queues, p->depth,
			p->workers, p->seconds, r->cmds, r->cmds_per_s, r->mib_per_s, r->avg_lat_us,
			per_db);
}

static void usage(FILE *o)
{
	fprintf(o,
		"usage: bench_emu_null [-q QUEUES] [-d DEPTH] [-t SECONDS] [-w WORKERS]\n"
		"                      [-b BATCH] [--sweep] [--csv FILE]\n"
		"  -q, --queues N    I/O queue pairs (default 4)\n"
		"  -d, --depth D     entries per queue, 2..4096 (default 256)\n"
		"  -t, --time S      measured seconds per configuration (default 5),\n"
		"                    after a warm-up of S/10\n"
		"  -w, --workers W   emulator worker threads (default 1)\n"
		"  -b, --batch B     at most B SQEs per doorbell write (default: all free)\n"
		"      --sweep       queues 1,2,4,8 x depth 32,128,256\n"
		"      --csv FILE    also write the rows as CSV\n");
}

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
	char *end;
	unsigned long v = strtoul(s, &end, 0);

	if (!*s || *end || v < lo || v > hi)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

int main(int argc, char **argv)
{
	struct params p = {.queues = 4, .depth = 256, .workers = 1, .seconds = 5, .batch = 0};
	const char *csv_path = NULL;
	bool sweep = false;
	FILE *csv = NULL;
	int rc = 0;
	static const struct option opts[] = {
		{"queues", required_argument, NULL, 'q'},
		{"depth", required_argument, NULL, 'd'},
		{"time", required_argument, NULL, 't'},
		{"workers", required_argument, NULL, 'w'},
		{"batch", required_argument, NULL, 'b'},
		{"sweep", no_argument, NULL, 'S'},
		{"csv", required_argument, NULL, 'C'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c;

	while ((c = getopt_long(argc, argv, "q:d:t:w:b:h", opts, NULL)) != -1) {
		switch (c) {
		case 'q':
			if (parse_u32(optarg, 1, 1024, &p.queues)) goto bad;
			break;
		case 'd':
			if (parse_u32(optarg, 2, 4096, &p.depth)) goto bad;
			break;
		case 'w':
			if (parse_u32(optarg, 1, 64, &p.workers)) goto bad;
			break;
		case 'b':
			if (parse_u32(optarg, 1, 4096, &p.batch)) goto bad;
			break;
		case 't': {
			char *end;
			p.seconds = strtod(optarg, &end);
			if (*end || !(p.seconds > 0 && p.seconds <= 3600)) goto bad;
			break;
		}
		case 'S': sweep = true; break;
		case 'C': csv_path = optarg; break;
		case 'h': usage(stdout); return 0;
		default: goto bad;
		}
	}
	if (optind != argc)
		goto bad;
	if (csv_path && !(csv = fopen(csv_path, "w"))) {
		perror(csv_path);
		return 1;
	}

	print_header(csv);
	if (sweep) {
		static const uint32_t qs[] = {1, 2, 4, 8}, ds[] = {32, 128, 256};
		for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]) && !rc; i++)
			for (size_t j = 0; j < sizeof(ds) / sizeof(ds[0]) && !rc; j++) {
				struct params sp = p;
				struct result r;
				sp.queues = qs[i];
				sp.depth = ds[j];
				rc = run_one(&sp, &r);
				if (!rc)
					print_row(csv, &sp, &r);
			}
	} else {
		struct result r;
		rc = run_one(&p, &r);
		if (!rc)
			print_row(csv, &p, &r);
	}
	if (csv && fclose(csv)) {
		perror(csv_path);
		rc = -EIO;
	}
	if (rc)
		fprintf(stderr, "bench_emu_null: failed: %s\n", strerror(-rc));
	return rc ? 1 : 0;
bad:
	usage(stderr);
	return 2;
}
