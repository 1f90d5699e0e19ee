/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Stress: 8 queue pairs x 256 commands in flight, one host thread per queue
 * pair, random reads and writes of 1..64 blocks over a RAM namespace served
 * by 2 emulator workers. Every written block carries a header (LBA, write
 * generation) and a CRC, so each read verifies every block it returns
 * against the generation the host expects. Each queue owns a slice of the
 * LBA space and never has two overlapping commands in flight, so the
 * expected content of every block is always defined.
 *
 * GPUNVME_STRESS_SECONDS (default 5) sets the run time.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define NQ 8
#define DEPTH 256
#define QENTRIES 512
#define MAXNLB 64
#define LBS 512u
#define NS_BYTES (64u << 20)
#define NBLOCKS (NS_BYTES / LBS)
#define PER_Q (NBLOCKS / NQ)
#define SLOT_BYTES (MAXNLB * LBS + H_PAGE) /* room for a PRP1 offset */

struct blk_hdr {
	uint64_t lba;
	uint64_t gen;
};

struct slot {
	struct h_buf data;
	struct h_buf list;
	bool busy;
	uint8_t opc;
	uint64_t slba;
	uint32_t nlb;
	uint32_t off;
	uint64_t gen; /* write: generation written */
};

struct qctx {
	struct h_ctrl *c;
	struct h_qp q;
	unsigned idx;
	uint64_t base;      /* first LBA of this queue's slice */
	uint64_t *gen;      /* expected generation per block, PER_Q entries */
	uint8_t *inflight;  /* per block: a command in flight covers it */
	struct slot slots[DEPTH];
	uint64_t rng;
	uint64_t end_ms;
	/* results */
	uint64_t reads, writes, blocks_read, blocks_written;
	uint64_t mismatches, errors;
	char msg[256];
};

static void fill_block(uint8_t *b, uint64_t lba, uint64_t gen)
{
	struct blk_hdr h = { .lba = lba, .gen = gen };
	memcpy(b, &h, sizeof(h));
	h_fill(b + sizeof(h), LBS - sizeof(h) - 4, lba * 0x9e3779b97f4a7c15ull ^ gen);
	uint32_t crc = h_crc32(0, b, LBS - 4);
	memcpy(b + LBS - 4, &crc, 4);
}

/* 0 when block b is what generation gen of lba must look like. */
static int check_block(const uint8_t *b, uint64_t lba, uint64_t gen, char *msg, size_t msglen)
{
	if (gen == 0) {
		if (!h_all(b, LBS, 0)) {
			snprintf(msg, msglen, "lba %llu: never written but not zero", (unsigned long long)lba);
			return 1;
		}
		return 0;
	}
	struct blk_hdr h;
	memcpy(&h, b, sizeof(h));
	uint32_t crc;
	memcpy(&crc, b + LBS - 4, 4);
	if (h.lba != lba || h.gen != gen || crc != h_crc32(0, b, LBS - 4)) {
		snprintf(msg, msglen, "lba %llu: header lba %llu gen %llu (want gen %llu), crc %s",
			 (unsigned long long)lba, (unsigned long long)h.lba, (unsigned long long)h.gen,
			 (unsigned long long)gen, crc == h_crc32(0, b, LBS - 4) ? "ok" : "bad");
		return 1;
	}
	return 0;
}

static void complete(struct qctx *x, const struct gpunvme_cqe *e)
{
	if (e->cid >= DEPTH || !x->slots[e->cid].busy) {
		x->errors++;
		snprintf(x->msg, sizeof(x->msg), "queue %u: unexpected cid %u", x->idx + 1, e->cid);
		return;
	}
	struct slot *s = &x->slots[e->cid];
	uint64_t rel = s->slba - x->base;
	if (h_st(e) != 0) {
		x->errors++;
		snprintf(x->msg, sizeof(x->msg), "queue %u: cid %u status 0x%x", x->idx + 1, e->cid, h_st(e));
	} else if (s->opc == GPUNVME_CMD_WRITE) {
		for (uint32_t i = 0; i < s->nlb; i++)
			x->gen[rel + i] = s->gen;
		x->writes++;
		x->blocks_written += s->nlb;
	} else {
		const uint8_t *p = (const uint8_t *)s->data.va + s->off;
		for (uint32_t i = 0; i < s->nlb; i++)
			if (check_block(p + (size_t)i * LBS, s->slba + i, x->gen[rel + i], x->msg, sizeof(x->msg)))
				x->mismatches++;
		x->reads++;
		x->blocks_read += s->nlb;
	}
	memset(&x->inflight[rel], 0, s->nlb);
	s->busy = false;
}

static int prepare(struct qctx *x, unsigned slot_idx, struct gpunvme_sqe *sqe)
{
	struct slot *s = &x->slots[slot_idx];
	uint32_t nlb = 1 + (uint32_t)(h_rand(&x->rng) % MAXNLB);
	uint64_t rel = h_rand(&x->rng) % (PER_Q - nlb + 1);
	for (uint32_t i = 0; i < nlb; i++)
		if (x->inflight[rel + i])
			return -1; /* overlaps a command in flight: try another range */
	s->opc = (h_rand(&x->rng) & 1) ? GPUNVME_CMD_WRITE : GPUNVME_CMD_READ;
	s->slba = x->base + rel;
	s->nlb = nlb;
	s->off = (uint32_t)(h_rand(&x->rng) % 8) * LBS; /* exercise PRP1 offsets */
	uint8_t *p = (uint8_t *)s->data.va + s->off;
	if (s->opc == GPUNVME_CMD_WRITE) {
		s->gen = x->gen[rel] + 1; /* any value newer than before works */
		for (uint32_t i = 0; i < nlb; i++)
			if (x->gen[rel + i] >= s->gen)
				s->gen = x->gen[rel + i] + 1;
		for (uint32_t i = 0; i < nlb; i++)
			fill_block(p + (size_t)i * LBS, s->slba + i, s->gen);
	} else {
		/* Poison the buffer so a read that moves no data cannot pass. */
		for (uint32_t i = 0; i < nlb; i++)
			memset(p + (size_t)i * LBS, 0xee, sizeof(struct blk_hdr));
	}
	memset(&x->inflight[rel], 1, nlb);
	h_io_sqe(sqe, s->opc, 1, s->slba, nlb);
	sqe->cid = (uint16_t)slot_idx;
	if (h_prp_build(s->data.iova + s->off, (size_t)nlb * LBS, s->list.va, s->list.iova, s->list.len, NULL,
			&sqe->prp1, &sqe->prp2) < 0)
		abort();
	s->busy = true;
	return 0;
}

static void *run_queue(void *arg)
{
	struct qctx *x = arg;
	unsigned outstanding = 0, next = 0, spins = 0;
	uint64_t last_progress = h_now_ms();
	for (;;) {
		bool stop = h_now_ms() >= x->end_ms || x->errors > 0 || x->mismatches > 0;
		if (stop && outstanding == 0)
			break;
		unsigned pushed = 0;
		while (!stop && outstanding < DEPTH) {
			while (x->slots[next].busy)
				next = (next + 1) % DEPTH;
			struct gpunvme_sqe sqe;
			if (prepare(x, next, &sqe) != 0)
				break;
			if (h_sq_push(&x->q, &sqe) != 0) {
				/* SQ full (cannot happen with 512 entries and 256 deep) */
				x->errors++;
				snprintf(x->msg, sizeof(x->msg), "queue %u: SQ full", x->idx + 1);
				break;
			}
			outstanding++;
			pushed++;
		}
		if (pushed)
			h_sq_ring(&x->q);
		struct gpunvme_cqe e;
		unsigned got = 0;
		while (h_cq_peek(&x->q, &e)) {
			complete(x, &e);
			outstanding--;
			got++;
		}
		if (got || pushed) {
			last_progress = h_now_ms();
			spins = 0;
		} else {
			if (h_now_ms() - last_progress > 10000) {
				x->errors++;
				snprintf(x->msg, sizeof(x->msg), "queue %u: no completion for 10 s, %u outstanding",
					 x->idx + 1, outstanding);
				break;
			}
			h_idle(x->c, &spins);
		}
	}
	return NULL;
}

int main(void)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	h_cfg(&cfg);
	cfg.workers = 2;
	cfg.ns[0].backing = GPUNVME_EMU_BACK_RAM;
	cfg.ns[0].size = NS_BYTES;
	cfg.ns[0].lba_shift = 9;
	cfg.max_ioq = NQ;
	const char *sec = getenv("GPUNVME_STRESS_SECONDS");
	unsigned seconds = sec ? (unsigned)atoi(sec) : 5;
	size_t arena = (size_t)NQ * DEPTH * (SLOT_BYTES + H_PAGE) + (16u << 20);
	int rc = h_ctrl_open(&c, &cfg, arena);
	if (rc) {
		fprintf(stderr, "stress: create failed: %d\n", rc);
		return 1;
	}
	if ((rc = h_enable(c, 0)) != 0) {
		fprintf(stderr, "stress: enable failed: %d\n", rc);
		return 1;
	}
	struct qctx *qs = calloc(NQ, sizeof(*qs));
	if (!qs)
		return 1;
	for (unsigned i = 0; i < NQ; i++) {
		struct qctx *x = &qs[i];
		x->c = c;
		x->idx = i;
		x->base = (uint64_t)i * PER_Q;
		x->gen = calloc(PER_Q, sizeof(uint64_t));
		x->inflight = calloc(PER_Q, 1);
		x->rng = 0x5eed0000u + i;
		if (!x->gen || !x->inflight)
			return 1;
		rc = h_qp_create(c, &x->q, (uint16_t)(i + 1), QENTRIES);
		if (rc) {
			fprintf(stderr, "stress: queue %u create failed: %d\n", i + 1, rc);
			return 1;
		}
		for (unsigned s = 0; s < DEPTH; s++) {
			x->slots[s].data = h_alloc(&c->arena, SLOT_BYTES, H_PAGE);
			x->slots[s].list = h_alloc(&c->arena, H_PAGE, H_PAGE);
		}
	}
	uint64_t t0 = h_now_ms();
	pthread_t th[NQ];
	for (unsigned i = 0; i < NQ; i++) {
		qs[i].end_ms = t0 + seconds * 1000u;
		if (pthread_create(&th[i], NULL, run_queue, &qs[i]) != 0)
			return 1;
	}
	for (unsigned i = 0; i < NQ; i++)
		pthread_join(th[i], NULL);
	uint64_t dt = h_now_ms() - t0;

	uint64_t reads = 0, writes = 0, br = 0, bw = 0, mism = 0, errs = 0;
	for (unsigned i = 0; i < NQ; i++) {
		reads += qs[i].reads;
		writes += qs[i].writes;
		br += qs[i].blocks_read;
		bw += qs[i].blocks_written;
		mism += qs[i].mismatches;
		errs += qs[i].errors;
		if (qs[i].msg[0])
			fprintf(stderr, "stress: %s\n", qs[i].msg);
	}

	/* Final sweep: every block of the namespace, through queue 1. */
	struct qctx *x = &qs[0];
	struct h_buf b = x->slots[0].data;
	uint64_t sweep_bad = 0;
	char msg[256] = "";
	for (uint64_t lba = 0; lba < NBLOCKS && errs == 0; lba += MAXNLB) {
		struct gpunvme_cqe e;
		rc = h_io(&x->q, GPUNVME_CMD_READ, 1, lba, MAXNLB, b.iova, MAXNLB * LBS, &e);
		if (rc || h_st(&e)) {
			fprintf(stderr, "stress: sweep read at %llu failed: rc %d status 0x%x\n",
				(unsigned long long)lba, rc, h_st(&e));
			errs++;
			break;
		}
		for (uint32_t i = 0; i < MAXNLB; i++) {
			uint64_t l = lba + i;
			if (check_block((const uint8_t *)b.va + (size_t)i * LBS, l, qs[l / PER_Q].gen[l % PER_Q], msg,
					sizeof(msg)))
				sweep_bad++;
		}
	}
	if (sweep_bad)
		fprintf(stderr, "stress: sweep: %llu bad blocks, e.g. %s\n", (unsigned long long)sweep_bad, msg);

	struct gpunvme_emu_stats st;
	uint64_t cmds = reads + writes;
	/* Counters are updated by the workers around posting: let them settle. */
	for (uint64_t end = h_now_ms() + 1000; h_now_ms() < end; h_sleep_ms(1)) {
		gpunvme_emu_get_stats(c->emu, &st);
		if (st.io_cmds >= cmds + NBLOCKS / MAXNLB)
			break;
	}
	printf("stress: %u queues x %u deep, %llu ms: %llu reads (%llu blocks), %llu writes (%llu blocks), "
	       "%.0f IOPS, %.1f MiB/s\n",
	       NQ, DEPTH, (unsigned long long)dt, (unsigned long long)reads, (unsigned long long)br,
	       (unsigned long long)writes, (unsigned long long)bw, dt ? cmds * 1000.0 / (double)dt : 0.0,
	       dt ? (double)(br + bw) * LBS / (1 << 20) * 1000.0 / (double)dt : 0.0);
	printf("stress: mismatches %llu, errors %llu, sweep bad %llu; emulator: io_cmds %llu errors %llu\n",
	       (unsigned long long)mism, (unsigned long long)errs, (unsigned long long)sweep_bad,
	       (unsigned long long)st.io_cmds, (unsigned long long)st.errors);
	int fail = mism || errs || sweep_bad || cmds == 0 || st.errors != 0;
	/* Emulator counts every completed I/O command: the run plus the sweep. */
	if (!fail && st.io_cmds != cmds + NBLOCKS / MAXNLB) {
		fprintf(stderr, "stress: emulator io_cmds %llu, host completed %llu\n",
			(unsigned long long)st.io_cmds, (unsigned long long)(cmds + NBLOCKS / MAXNLB));
		fail = 1;
	}
	for (unsigned i = 0; i < NQ; i++) {
		free(qs[i].gen);
		free(qs[i].inflight);
	}
	free(qs);
	h_ctrl_close(c);
	printf("stress: %s\n", fail ? "FAIL" : "PASS");
	return fail ? 1 : 0;
}
