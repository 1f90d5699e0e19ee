/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * bench_emu_null: throughput of the NVMe controller emulator on a null
 * namespace, driven by one CPU producer thread.
 *
 * The controller is brought up the way a driver does it, by BAR0 register
 * writes and admin SQEs (§7.6.1: disable, AQA/ASQ/ACQ, enable, Set Features
 * Number of Queues, Create I/O CQ/SQ), with the by-hand bring-up the tests
 * share (tests/harness/emu_bringup.h, on the queue core's
 * gpunvme_admin_enable and struct gpunvme_ring). Then the producer keeps
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

#include "emu_bringup.h"
#include "gpunvme/emu.h"
#include "gpunvme/spec/nvme.h"
#include "gpunvme/spec/queue.h"

#define PAGE EB_PAGE
#define IOVA_BASE 0x10000000ull
#define DATA_PAGES 64u
#define NS_SIZE (1ull << 30)
#define ADMIN_DEPTH 32u
#define STALL_TIMEOUT_NS 5000000000ull

struct qp {
	uint16_t qid;
	uint32_t depth;
	struct gpunvme_ring ring;
	uint32_t outstanding;
	uint64_t *ts;          /* submission time per CID */
	uint16_t *free_cids;   /* stack of CIDs not outstanding */
	uint32_t nfree;
};

struct bench {
	struct eb_ctrl c;      /* controller, admin queue, DMA region */
	uint8_t *mem;          /* the region: everything the controller may DMA */
	uint64_t data_iova;
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

static size_t round_page(size_t n)
{
	return (n + PAGE - 1) & ~(size_t)(PAGE - 1);
}

static void bench_teardown(struct bench *b)
{
	if (b->c.emu) {
		/* Normal shutdown (§7.6.2); best effort, bounded by CAP.TO. */
		(void)eb_shutdown(&b->c);
		gpunvme_emu_destroy(b->c.emu);
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
	struct gpunvme_emu *emu;
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
	rc = gpunvme_emu_create(&cfg, &emu);
	if (rc) {
		fprintf(stderr, "gpunvme_emu_create: %s\n", strerror(-rc));
		return rc;
	}
	eb_attach(&b->c, emu);
	if (gpunvme_cap_mqes(b->c.cap) + 1 < p->depth) {
		fprintf(stderr, "CAP.MQES %u < depth %u\n", gpunvme_cap_mqes(b->c.cap) + 1, p->depth);
		bench_teardown(b);
		return -EINVAL;
	}

	/* The DMA region: admin SQ and CQ, per queue pair SQ and CQ (whole
	 * pages, §5.3/§5.4 PC=1 needs contiguous pages), data. */
	size_t sq_bytes = round_page((size_t)p->depth * 64);
	size_t cq_bytes = round_page((size_t)p->depth * 16);
	size_t mem_len = 2 * PAGE + p->queues * (sq_bytes + cq_bytes) + DATA_PAGES * PAGE;
	b->mem = aligned_alloc(PAGE, mem_len);
	b->qps = calloc(p->queues, sizeof(*b->qps));
	if (!b->mem || !b->qps) {
		bench_teardown(b);
		return -ENOMEM;
	}
	b->nqp = p->queues;
	for (uint32_t i = 0; i < p->queues; i++) {
		struct qp *x = &b->qps[i];
		x->qid = (uint16_t)(i + 1);
		x->depth = p->depth;
		x->ts = calloc(p->depth, sizeof(*x->ts));
		x->free_cids = calloc(p->depth, sizeof(*x->free_cids));
		if (!x->ts || !x->free_cids) {
			bench_teardown(b);
			return -ENOMEM;
		}
		for (uint32_t k = 0; k < p->depth; k++)
			x->free_cids[x->nfree++] = (uint16_t)(p->depth - 1 - k);
	}
	if ((rc = eb_mem_map(&b->c, b->mem, IOVA_BASE, mem_len)) != 0 ||
	    (rc = eb_enable(&b->c, ADMIN_DEPTH)) != 0)
		goto fail;

	/* Number of Queues (§5.21.1.7): 0's based counts in cdw11. */
	memset(&s, 0, sizeof(s));
	s.opc = GPUNVME_ADM_SET_FEATURES;
	s.cdw[0] = GPUNVME_FEAT_NUM_QUEUES;
	s.cdw[1] = (p->queues - 1) | (p->queues - 1) << 16;
	if ((rc = eb_admin(&b->c, &s, &dw0)) != 0)
		goto fail;
	if ((dw0 & 0xffff) + 1 < p->queues || (dw0 >> 16) + 1 < p->queues) {
		fprintf(stderr, "controller granted %u SQs / %u CQs, need %u\n",
			(dw0 & 0xffff) + 1, (dw0 >> 16) + 1, p->queues);
		rc = -EINVAL;
		goto fail;
	}
	for (uint32_t i = 0; i < p->queues; i++)
		if ((rc = eb_create_qp(&b->c, b->qps[i].qid, p->depth, &b->qps[i].ring)) != 0)
			goto fail;
	if (!eb_alloc(&b->c, DATA_PAGES * PAGE, 0, &b->data_iova)) {
		rc = -ENOMEM;
		goto fail;
	}
	return 0;
fail:
	bench_teardown(b);
	return rc > 0 ? -EIO : rc; /* an NVMe status: printed by eb_admin */
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
			uint32_t dw3;
			while (gpunvme_ring_cq_peek(&x->ring, &dw3)) {
				uint16_t st = gpunvme_dw3_status(dw3), cid = gpunvme_dw3_cid(dw3);
				if (st) {
					fprintf(stderr, "qid %u cid %u: %s\n", x->qid, cid, gpunvme_status_str(st));
					return -EIO;
				}
				if (cid >= x->depth) {
					fprintf(stderr, "qid %u: CQE with CID %u never issued\n", x->qid, cid);
					return -EPROTO;
				}
				lat_sum += now - x->ts[cid];
				x->free_cids[x->nfree++] = cid;
				gpunvme_ring_cq_pop(&x->ring);
				n++;
			}
			if (n) {
				x->outstanding -= n;
				reaped_pass += n;
				gpunvme_ring_cq_doorbell(&x->ring);
				doorbells++;
			}

			/* Refill from the free CID stack: CIDs must be unique among
			 * outstanding commands of an SQ (§4.2), and completions need
			 * not come back in order. */
			uint32_t free_slots = max_out - x->outstanding;
			while (free_slots) {
				uint32_t k = free_slots < batch ? free_slots : batch;
				for (uint32_t j = 0; j < k; j++) {
					struct gpunvme_sqe *e = gpunvme_ring_sqe(&x->ring);
					*e = tmpl;
					uint16_t cid = x->free_cids[--x->nfree];
					e->cid = cid;
					e->prp1 = b->data_iova + (uint64_t)(cid % DATA_PAGES) * PAGE;
					e->rw.slba = slba;
					if (++slba == nlbas)
						slba = 0;
					x->ts[cid] = now;
					gpunvme_ring_sq_push(&x->ring);
				}
				x->outstanding += k;
				free_slots -= k;
				/* one doorbell write for the batch (release: the SQEs
				 * above are visible before the tail) */
				gpunvme_ring_sq_doorbell(&x->ring);
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
	gpunvme_emu_get_stats(b->c.emu, &st);
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
