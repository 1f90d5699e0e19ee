/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Randomized queue-pressure check of the CPU data path (see randio.h).
 *
 * The model: `ns` holds what the namespace region must contain, and each
 * buffer has a shadow holding what every one of its bytes must be. Reads
 * and writes land at random dword offsets of random buffers; a request's
 * buffer range never overlaps another outstanding request's, and a write's
 * LBA range never overlaps another outstanding request's LBAs, so the
 * model is exact whatever order the controller completes in. After each
 * round every byte of every buffer is compared: a command that DMAs into
 * the wrong allocation, or builds PRPs from another request's buffer,
 * shows up as a wrong target or a touched neighbour.
 */
#include "randio.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_OUT 24 /* requests outstanding at once; the library queues 4 x depth */

struct rbuf {
	uint8_t *p;      /* DMA memory */
	uint8_t *model;  /* what each byte must hold */
	size_t len;
	bool target;     /* false: never read into or written from */
};

struct rreq {
	bool busy, done, write;
	uint32_t buf;
	size_t off, len;
	uint64_t slba, nlb, serial;
	struct gpunvme_cpl cpl;
};

struct rstate {
	struct gpunvme_ctrl *c;
	const struct randio_opts *o;
	FILE *log;
	uint64_t rng;
	uint32_t lba;
	uint64_t nblocks;
	uint32_t max_blocks;
	uint8_t *ns;
	struct rbuf *bufs;
	struct rreq reqs[MAX_OUT];
	uint32_t nout;
	uint64_t serial, bytes;
};

void randio_defaults(struct randio_opts *o)
{
	*o = (struct randio_opts){
		.nsid = 1,
		.seed = 1,
		.min_depth = 2,
		.max_depth = 8,
		.rounds = 3,
		.ops = 40,
		.max_cmds = 64,
		.region_bytes = 16u << 20,
		.nbufs = 7,
		.writes = true,
		.timeout_ms = 20000,
	};
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t rnd(struct rstate *s)
{
	/* xorshift64* */
	s->rng ^= s->rng >> 12;
	s->rng ^= s->rng << 25;
	s->rng ^= s->rng >> 27;
	return s->rng * 2685821657736338717ull;
}

static uint64_t below(struct rstate *s, uint64_t n)
{
	return n ? rnd(s) % n : 0;
}

static void rnd_fill(struct rstate *s, uint8_t *p, size_t n)
{
	while (n) {
		uint64_t v = rnd(s);
		size_t k = n < 8 ? n : 8;
		memcpy(p, &v, k);
		p += k;
		n -= k;
	}
}

static void cb(void *arg, const struct gpunvme_cpl *cpl)
{
	struct rreq *r = arg;
	r->cpl = *cpl;
	r->done = true;
}

static void describe(struct rstate *s, const struct rreq *r)
{
	fprintf(s->log, "  request #%" PRIu64 ": %s LBA %" PRIu64 " + %" PRIu64 ", buffer %u [%zu, %zu) of %zu\n",
		r->serial, r->write ? "write" : "read", r->slba, r->nlb, r->buf, r->off, r->off + r->len,
		s->bufs[r->buf].len);
}

/* Mismatches between [p, p + n) and the model: count, first and last. */
static size_t compare(const uint8_t *p, const uint8_t *want, size_t n, size_t *first, size_t *last)
{
	size_t bad = 0;
	if (memcmp(p, want, n) == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (p[i] != want[i]) {
			if (!bad)
				*first = i;
			*last = i;
			bad++;
		}
	}
	return bad;
}

static int finish(struct rstate *s, struct rreq *r)
{
	struct rbuf *b = &s->bufs[r->buf];
	r->busy = r->done = false;
	s->nout--;
	if (r->cpl.err) {
		fprintf(s->log, "randio: a request failed: %d (%s), NVMe status 0x%04x (%s)\n", r->cpl.err,
			strerror(-r->cpl.err), r->cpl.status, gpunvme_status_str(r->cpl.status));
		describe(s, r);
		return -1;
	}
	uint8_t *ns = s->ns + r->slba * s->lba;
	if (r->write) {
		memcpy(ns, b->model + r->off, r->len);
		return 0;
	}
	memcpy(b->model + r->off, ns, r->len);
	size_t first = 0, last = 0, bad = compare(b->p + r->off, ns, r->len, &first, &last);
	if (bad) {
		fprintf(s->log, "randio: read returned wrong data with success: %zu of %zu bytes differ (first at +%zu, last at +%zu)\n",
			bad, r->len, first, last);
		describe(s, r);
		return -1;
	}
	return 0;
}

static int reap(struct rstate *s)
{
	int rc = 0;
	for (uint32_t i = 0; i < MAX_OUT; i++)
		if (s->reqs[i].busy && s->reqs[i].done && finish(s, &s->reqs[i]))
			rc = -1;
	return rc;
}

static int poll_once(struct rstate *s, struct gpunvme_qpair *qp, uint32_t max)
{
	int rc = gpunvme_qpair_poll(qp, max);
	if (rc < 0) {
		fprintf(s->log, "randio: poll: %d (%s): %s\n", rc, strerror(-rc), gpunvme_last_error());
		return -1;
	}
	return reap(s);
}

static int drain(struct rstate *s, struct gpunvme_qpair *qp)
{
	uint64_t t0 = now_ms();
	while (s->nout) {
		if (poll_once(s, qp, 0))
			return -1;
		if (s->nout && now_ms() - t0 > s->o->timeout_ms) {
			fprintf(s->log, "randio: %u requests still outstanding after %u ms:\n", s->nout,
				s->o->timeout_ms);
			for (uint32_t i = 0; i < MAX_OUT; i++)
				if (s->reqs[i].busy)
					describe(s, &s->reqs[i]);
			return -1;
		}
	}
	return 0;
}

static bool conflicts(const struct rstate *s, uint32_t buf, size_t off, size_t len, uint64_t slba, uint64_t nlb,
		      bool write)
{
	for (uint32_t i = 0; i < MAX_OUT; i++) {
		const struct rreq *r = &s->reqs[i];
		if (!r->busy)
			continue;
		if (r->buf == buf && off < r->off + r->len && r->off < off + len)
			return true;
		if ((write || r->write) && slba < r->slba + r->nlb && r->slba < slba + nlb)
			return true;
	}
	return false;
}

/* One random request, or nothing when no non-conflicting one was found or
 * the queue pair has no room (-EAGAIN: the caller polls). */
static int submit(struct rstate *s, struct gpunvme_qpair *qp)
{
	struct rreq *r = NULL;
	for (uint32_t i = 0; i < MAX_OUT && !r; i++)
		if (!s->reqs[i].busy)
			r = &s->reqs[i];
	if (!r)
		return 0;
	for (int attempt = 0; attempt < 8; attempt++) {
		uint32_t mc = s->o->max_cmds;
		/* half the requests short (1..4 commands), half up to max_cmds */
		uint64_t ncmds = 1 + (below(s, 2) ? below(s, mc < 4 ? mc : 4) : below(s, mc));
		uint64_t lo = (ncmds - 1) * s->max_blocks + 1, hi = ncmds * s->max_blocks;
		uint64_t nlb = lo + below(s, hi - lo + 1);
		uint32_t b = (uint32_t)below(s, s->o->nbufs);
		if (!s->bufs[b].target)
			continue;
		if (nlb > s->nblocks)
			nlb = s->nblocks;
		if (nlb > s->bufs[b].len / s->lba)
			nlb = s->bufs[b].len / s->lba;
		if (!nlb)
			continue;
		size_t len = (size_t)nlb * s->lba;
		size_t off = (size_t)below(s, (s->bufs[b].len - len) / 4 + 1) * 4;
		uint64_t slba = below(s, s->nblocks - nlb + 1);
		bool write = s->o->writes && below(s, 10) < 3;
		if (conflicts(s, b, off, len, slba, nlb, write))
			continue;
		struct rbuf *rb = &s->bufs[b];
		if (write) {
			rnd_fill(s, rb->p + off, len);
			memcpy(rb->model + off, rb->p + off, len);
		}
		*r = (struct rreq){ .busy = true, .write = write, .buf = b, .off = off, .len = len, .slba = slba,
				    .nlb = nlb, .serial = ++s->serial };
		int rc = write ? gpunvme_write(qp, s->o->nsid, rb->p + off, slba, nlb, cb, r)
			       : gpunvme_read(qp, s->o->nsid, rb->p + off, slba, nlb, cb, r);
		if (rc == -EAGAIN) {
			r->busy = false;
			return 0;
		}
		if (rc) {
			fprintf(s->log, "randio: submit: %d (%s): %s\n", rc, strerror(-rc), gpunvme_last_error());
			describe(s, r);
			r->busy = false;
			return -1;
		}
		s->nout++;
		s->bytes += len;
		return 0;
	}
	return 0;
}

static int check_all(struct rstate *s, const char *when)
{
	int rc = 0;
	for (uint32_t i = 0; i < s->o->nbufs; i++) {
		struct rbuf *b = &s->bufs[i];
		size_t first = 0, last = 0, bad = compare(b->p, b->model, b->len, &first, &last);
		if (bad) {
			fprintf(s->log, "randio: %s: buffer %u (%zu bytes%s): %zu bytes differ from the model (first at %zu, last at %zu)\n",
				when, i, b->len, b->target ? "" : ", never a target", bad, first, last);
			rc = -1;
		}
	}
	return rc;
}

static int buf_alloc(struct rstate *s, uint32_t i, size_t max_req)
{
	struct rbuf *b = &s->bufs[i];
	/* a third big (whole requests and a margin), a third medium, a third
	 * small enough to be carved from a shared 2 MiB DMA heap chunk */
	switch (i % 3) {
	case 0:
		b->len = max_req + 4 * (size_t)below(s, 16384);
		break;
	case 1:
		b->len = s->lba + 4 * (size_t)below(s, max_req / 8 + 1);
		break;
	default:
		b->len = 4096 + 4 * (size_t)below(s, 65536);
		break;
	}
	b->p = gpunvme_dma_alloc(s->c, b->len);
	b->model = b->model ? realloc(b->model, b->len) : malloc(b->len);
	if (!b->p || !b->model) {
		fprintf(s->log, "randio: cannot allocate a buffer of %zu bytes: %s\n", b->len, gpunvme_last_error());
		return -1;
	}
	/* poison: random, so a stray DMA of zeros or of another pattern shows */
	rnd_fill(s, b->p, b->len);
	memcpy(b->model, b->p, b->len);
	return 0;
}

/* Fill the region through the driver with a queue pair of its own. */
static int init_region(struct rstate *s)
{
	struct gpunvme_qpair *qp;
	int rc = gpunvme_qpair_create(s->c, 0, &qp);
	if (rc) {
		fprintf(s->log, "randio: queue pair: %s\n", gpunvme_last_error());
		return -1;
	}
	size_t chunk = 1u << 20, total = (size_t)s->nblocks * s->lba;
	uint8_t *tmp = gpunvme_dma_alloc(s->c, chunk);
	rnd_fill(s, s->ns, total);
	for (size_t done = 0; tmp && !rc && done < total; done += chunk) {
		size_t n = total - done < chunk ? total - done : chunk;
		memcpy(tmp, s->ns + done, n);
		rc = gpunvme_write_sync(qp, s->o->nsid, tmp, done / s->lba, n / s->lba, NULL);
	}
	if (!tmp || rc)
		fprintf(s->log, "randio: writing the region: %s\n", gpunvme_last_error());
	gpunvme_dma_free(s->c, tmp);
	gpunvme_qpair_destroy(qp);
	return tmp && !rc ? 0 : -1;
}

static bool buf_busy(const struct rstate *s, uint32_t buf)
{
	for (uint32_t i = 0; i < MAX_OUT; i++)
		if (s->reqs[i].busy && s->reqs[i].buf == buf)
			return true;
	return false;
}

/* What the writes left on the namespace, including blocks no read saw. */
static int verify_region(struct rstate *s)
{
	struct gpunvme_qpair *qp;
	if (gpunvme_qpair_create(s->c, 0, &qp)) {
		fprintf(s->log, "randio: queue pair: %s\n", gpunvme_last_error());
		return -1;
	}
	size_t chunk = 1u << 20, total = (size_t)s->nblocks * s->lba;
	uint8_t *tmp = gpunvme_dma_alloc(s->c, chunk);
	int rc = tmp ? 0 : -1;
	for (size_t done = 0; !rc && done < total; done += chunk) {
		size_t n = total - done < chunk ? total - done : chunk, first = 0, last = 0, bad;
		rc = gpunvme_read_sync(qp, s->o->nsid, tmp, done / s->lba, n / s->lba, NULL);
		if (rc) {
			fprintf(s->log, "randio: re-reading the region: %s\n", gpunvme_last_error());
		} else if ((bad = compare(tmp, s->ns + done, n, &first, &last)) != 0) {
			fprintf(s->log, "randio: namespace bytes %zu..%zu: %zu differ from what was written (first at %zu)\n",
				done, done + n - 1, bad, done + first);
			rc = -1;
		}
	}
	gpunvme_dma_free(s->c, tmp);
	gpunvme_qpair_destroy(qp);
	return rc;
}

static int run_depth(struct rstate *s, uint32_t depth, size_t max_req)
{
	struct gpunvme_qpair *qp;
	if (gpunvme_qpair_create(s->c, depth, &qp)) {
		fprintf(s->log, "randio: queue pair of depth %u: %s\n", depth, gpunvme_last_error());
		return -1;
	}
	int rc = 0;
	char when[64];
	for (uint32_t round = 0; round < s->o->rounds && !rc; round++) {
		/* a reallocation between rounds bumps the DMA generation and
		 * may hand back the same addresses: cached lookups must notice */
		if (round) {
			uint32_t i = (uint32_t)below(s, s->o->nbufs - 1);
			gpunvme_dma_free(s->c, s->bufs[i].p);
			s->bufs[i].p = NULL;
			rc = buf_alloc(s, i, max_req);
		}
		/* how many requests this round keeps outstanding at most */
		uint32_t limit = 2 + (uint32_t)below(s, MAX_OUT - 1);
		for (uint32_t n = 0; n < s->o->ops && !rc;) {
			uint32_t i = (uint32_t)below(s, s->o->nbufs - 1);
			if (!below(s, 48) && !buf_busy(s, i)) {
				/* with requests still waiting for ids: their
				 * mappings must be looked up again, and stay right */
				gpunvme_dma_free(s->c, s->bufs[i].p);
				s->bufs[i].p = NULL;
				rc = buf_alloc(s, i, max_req);
			} else if (s->nout < limit && below(s, 3)) {
				rc = submit(s, qp);
				n++;
			} else {
				rc = poll_once(s, qp, (uint32_t)below(s, 4));
			}
		}
		if (!rc)
			rc = drain(s, qp);
		snprintf(when, sizeof(when), "depth %u round %u", depth, round);
		if (!rc)
			rc = check_all(s, when);
	}
	if (rc) {
		fprintf(s->log, "randio: failed at depth %u (seed %" PRIu64 ")\n", depth, s->o->seed);
		/* the queue pair's destruction fails what is still queued */
		for (uint32_t i = 0; i < MAX_OUT; i++)
			s->reqs[i].busy = false;
		s->nout = 0;
	}
	gpunvme_qpair_destroy(qp);
	return rc;
}

int randio_run(struct gpunvme_ctrl *c, const struct randio_opts *o, FILE *log)
{
	struct gpunvme_ns_info ni;
	if (gpunvme_ns_info(c, o->nsid, &ni)) {
		fprintf(log, "randio: %s\n", gpunvme_last_error());
		return -1;
	}
	struct rstate s = { .c = c, .o = o, .log = log, .rng = o->seed * 0x9e3779b97f4a7c15ull + 1 };
	s.lba = ni.lba_size;
	s.max_blocks = ni.max_blocks;
	s.nblocks = o->region_bytes / ni.lba_size;
	if (s.nblocks > ni.nsze)
		s.nblocks = ni.nsze;
	size_t max_req = (size_t)o->max_cmds * s.max_blocks * s.lba;
	if (max_req > s.nblocks * s.lba)
		max_req = s.nblocks * s.lba;
	s.ns = malloc(s.nblocks * s.lba);
	s.bufs = calloc(o->nbufs, sizeof(*s.bufs));
	int rc = s.ns && s.bufs && o->nbufs >= 2 ? 0 : -1;
	if (rc)
		fprintf(log, "randio: out of memory (or fewer than 2 buffers)\n");
	for (uint32_t i = 0; !rc && i < o->nbufs; i++) {
		rc = buf_alloc(&s, i, max_req);
		s.bufs[i].target = i + 1 < o->nbufs; /* the last is a bystander */
	}
	if (!rc)
		rc = init_region(&s);
	for (uint32_t d = o->min_depth; !rc && d <= o->max_depth; d++)
		rc = run_depth(&s, d, max_req);
	if (!rc)
		rc = verify_region(&s);
	if (!rc)
		fprintf(log, "randio: %" PRIu64 " requests, %" PRIu64 " MiB, depths %u..%u, %u buffers: every byte as modelled\n",
			s.serial, s.bytes >> 20, o->min_depth, o->max_depth, o->nbufs);
	for (uint32_t i = 0; s.bufs && i < o->nbufs; i++) {
		gpunvme_dma_free(c, s.bufs[i].p);
		free(s.bufs[i].model);
	}
	free(s.bufs);
	free(s.ns);
	return rc;
}
