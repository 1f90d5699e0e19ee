/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme-emu-demo: a readable trace of the whole path on the embedded
 * emulator, through the public API only (gpunvme.h, emu.h, nvme.h), as any
 * program would drive a controller: open (reset, admin queue, enable,
 * Identify, Number of Queues), the registers that bring-up left in BAR0,
 * I/O queue pairs, 64 MiB written over 4 queue pairs with PRP lists, flush,
 * read back with CRC checks, SMART log and a clean shutdown. Exits non-zero
 * on any error.
 *
 * The register-level view (every doorbell and queue entry written by hand)
 * is the test harness's (tests/harness), which checks the library against
 * the emulator independently; a demo of the library shows the library.
 */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpunvme/emu.h"
#include "gpunvme/gpunvme.h"
#include "gpunvme/spec/nvme.h"

#define DEMO_SPEC "ram:256M?lbads=12"
#define NQ 4
#define DEPTH 32
#define CHUNK (128u << 10)      /* bytes per command: MDTS 5 = 128 KiB */
#define TOTAL (64u << 20)       /* bytes written and read back */
#define NCHUNK (TOTAL / CHUNK)
#define NSID 1u

static unsigned step;

__attribute__((format(printf, 1, 2))) static void say(const char *fmt, ...)
{
	va_list ap;
	printf("[%2u] ", ++step);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

__attribute__((format(printf, 1, 2))) static int fail(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "gpunvme-emu-demo: FAILED: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void trim(char *dst, const char *src, size_t n)
{
	memcpy(dst, src, n);
	dst[n] = 0;
	for (size_t i = n; i > 0 && (dst[i - 1] == ' ' || dst[i - 1] == 0); i--)
		dst[i - 1] = 0;
}

/* Registers are read 32 bits at a time, as the library does: a 64-bit
 * MMIO read may be split by the bus anyway. */
static uint32_t rd32(volatile void *bar, uint32_t off)
{
	return *(volatile uint32_t *)((volatile char *)bar + off);
}

static uint64_t rd64(volatile void *bar, uint32_t off)
{
	return rd32(bar, off) | (uint64_t)rd32(bar, off + 4) << 32;
}

/* CRC-32 (IEEE 802.3, reflected), table-driven: 128 MiB go through it. */
static uint32_t crc_table[256];

static void crc32_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
		crc_table[i] = c;
	}
}

static uint32_t crc32(uint32_t crc, const void *p, size_t n)
{
	const uint8_t *b = p;
	crc = ~crc;
	while (n--)
		crc = crc_table[(crc ^ *b++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

/* Chunk k's content: distinct per chunk and per word, so a misplaced or
 * stale block changes the CRC. */
static void fill(void *p, size_t len, uint64_t seed)
{
	uint64_t *w = p;
	for (size_t i = 0; i < len / 8; i++) {
		uint64_t z = seed * 0x9e3779b97f4a7c15ull + i;
		z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
		w[i] = z ^ (z >> 29);
	}
}

struct run;

struct slot {
	struct run *run;
	unsigned q;
	uint8_t *data;          /* CHUNK bytes of DMA memory */
	uint32_t chunk;
	int busy;
};

struct ioq {
	struct gpunvme_qpair *qp;
	uint8_t *mem;           /* DEPTH x CHUNK of DMA memory */
	struct slot s[DEPTH];
	uint64_t completed;     /* I/O commands, this queue pair */
};

struct run {
	struct ioq q[NQ];
	int reading;
	uint32_t crc[NCHUNK];
	uint32_t done;
	uint64_t mismatches;
	int err;                /* first failure: -errno */
	uint16_t status;        /* its NVMe status when err is -EIO */
	uint32_t err_chunk;
};

static void on_done(void *arg, const struct gpunvme_cpl *cpl)
{
	struct slot *s = arg;
	struct run *r = s->run;
	if (cpl->err && !r->err) {
		r->err = cpl->err;
		r->status = cpl->status;
		r->err_chunk = s->chunk;
	}
	if (!cpl->err && r->reading && crc32(0, s->data, CHUNK) != r->crc[s->chunk])
		r->mismatches++;
	s->busy = 0;
	r->q[s->q].completed++;
	r->done++;
}

/* All NCHUNK chunks, written or read, DEPTH in flight on each queue pair.
 * One thread owns every queue pair here; the library's io_timeout_ms ends
 * a command the emulator never completes, so the loop always ends. */
static int pump(struct run *r, uint32_t lbs)
{
	const uint64_t nlb = CHUNK / lbs;
	uint32_t next = 0;
	r->done = 0;
	while (r->done < NCHUNK) {
		int reaped = 0;
		for (unsigned qi = 0; qi < NQ; qi++) {
			struct ioq *x = &r->q[qi];
			for (unsigned si = 0; si < DEPTH && next < NCHUNK; si++) {
				struct slot *s = &x->s[si];
				if (s->busy)
					continue;
				s->chunk = next++;
				int rc;
				if (r->reading) {
					memset(s->data, 0, 64); /* a read that moves nothing fails the CRC */
					rc = gpunvme_read(x->qp, NSID, s->data, (uint64_t)s->chunk * nlb, nlb, on_done, s);
				} else {
					fill(s->data, CHUNK, 0xd00d0000u + s->chunk);
					r->crc[s->chunk] = crc32(0, s->data, CHUNK);
					rc = gpunvme_write(x->qp, NSID, s->data, (uint64_t)s->chunk * nlb, nlb, on_done, s);
				}
				if (rc)
					return fail("queue pair %u: submitting chunk %u: %s", qi + 1, s->chunk,
						    gpunvme_last_error());
				s->busy = 1;
			}
			int n = gpunvme_qpair_poll(x->qp, 0);
			if (n < 0)
				return fail("queue pair %u: %s", qi + 1, gpunvme_last_error());
			reaped += n;
		}
		if (r->err)
			return fail("chunk %u: %s (%s)", r->err_chunk, strerror(-r->err),
				    r->err == -EIO ? gpunvme_status_str(r->status) : "no NVMe status");
		if (!reaped)
			sched_yield(); /* the emulator's worker may share this core */
	}
	return 0;
}

static double mibs(uint64_t bytes, uint64_t us)
{
	return us ? (double)bytes / (1 << 20) / ((double)us / 1e6) : 0.0;
}

int main(void)
{
	struct gpunvme_emu_config cfg;
	const char *err = NULL;
	const char *uri = "emu:" DEMO_SPEC;

	crc32_init();
	gpunvme_emu_config_init(&cfg);
	if (gpunvme_emu_config_parse(&cfg, DEMO_SPEC, &err) != 0)
		return fail("config \"%s\": %s", DEMO_SPEC, err ? err : "invalid");

	struct gpunvme_opts opts;
	gpunvme_opts_init(&opts);
	opts.nr_io_queues = NQ;
	opts.io_timeout_ms = 10000;
	struct gpunvme_ctrl *c;
	uint64_t t0 = now_us();
	int rc = gpunvme_open(uri, &opts, &c);
	if (rc)
		return fail("gpunvme_open(\"%s\"): %s", uri, gpunvme_last_error());
	uint64_t dt = now_us() - t0;
	size_t bar_len = 0;
	volatile void *bar = gpunvme_bar0(c, &bar_len);
	say("gpunvme_open(\"%s\"): emulator with %u namespace(s), %u worker(s), BAR0 %zu bytes; reset, admin queue, enable, identify, number of queues in %llu us",
	    uri, cfg.nr_ns, cfg.workers, bar_len, (unsigned long long)dt);

	uint64_t cap = rd64(bar, GPUNVME_REG_CAP);
	uint32_t vs = rd32(bar, GPUNVME_REG_VS);
	say("CAP 0x%016llx: MQES %u (0's based), CQR %u, TO %u ms, DSTRD %u, CSS 0x%02x, MPS %u..%u KiB; VS %u.%u.%u",
	    (unsigned long long)cap, gpunvme_cap_mqes(cap), gpunvme_cap_cqr(cap), gpunvme_cap_to(cap) * 500,
	    gpunvme_cap_dstrd(cap), gpunvme_cap_css(cap), 4u << gpunvme_cap_mpsmin(cap), 4u << gpunvme_cap_mpsmax(cap),
	    gpunvme_vs_mjr(vs), gpunvme_vs_mnr(vs), gpunvme_vs_ter(vs));

	uint32_t cc = rd32(bar, GPUNVME_REG_CC), csts = rd32(bar, GPUNVME_REG_CSTS);
	say("enable, as the driver left it: AQA 0x%08x, ASQ 0x%llx, ACQ 0x%llx, CC 0x%08x (EN %u, CSS %u, MPS %u, IOSQES %u, IOCQES %u) -> CSTS 0x%x (RDY %u)",
	    rd32(bar, GPUNVME_REG_AQA), (unsigned long long)rd64(bar, GPUNVME_REG_ASQ),
	    (unsigned long long)rd64(bar, GPUNVME_REG_ACQ), cc, gpunvme_cc_en(cc), gpunvme_cc_css(cc),
	    gpunvme_cc_mps(cc), gpunvme_cc_iosqes(cc), gpunvme_cc_iocqes(cc), csts, csts & 1);

	const struct gpunvme_id_ctrl *id = gpunvme_ctrl_identify(c);
	char mn[41], sn[21], fr[9];
	trim(mn, id->mn, 40);
	trim(sn, id->sn, 20);
	trim(fr, id->fr, 8);
	say("identify controller: model \"%s\", serial \"%s\", firmware \"%s\", MDTS %u (%u KiB), NN %u, SQES 0x%02x, CQES 0x%02x, ONCS 0x%04x, VWC %u",
	    mn, sn, fr, id->mdts, id->mdts ? (4u << id->mdts) : 0, id->nn, id->sqes, id->cqes, id->oncs, id->vwc & 1);

	struct gpunvme_ns_info ni;
	if ((rc = gpunvme_ns_info(c, NSID, &ni)) != 0)
		return fail("namespace %u: %s", NSID, gpunvme_last_error());
	const struct gpunvme_id_ns *ns = gpunvme_ns_identify(c, NSID);
	const uint32_t lbs = ni.lba_size;
	say("identify namespace %u: %llu blocks of %u bytes = %llu MiB, capacity %llu blocks, at most %u blocks per command",
	    NSID, (unsigned long long)ns->nsze, lbs, (unsigned long long)(ns->nsze * lbs >> 20),
	    (unsigned long long)ns->ncap, ni.max_blocks);
	if ((uint64_t)ni.nsze * lbs < TOTAL)
		return fail("namespace smaller than %u MiB", TOTAL >> 20);

	uint32_t dw0 = 0;
	if ((rc = gpunvme_get_features(c, GPUNVME_FEAT_NUM_QUEUES, 0, &dw0)) != 0)
		return fail("get features number of queues: %s", gpunvme_last_error());
	struct gpunvme_ctrl_info ci;
	gpunvme_ctrl_info(c, &ci);
	say("number of queues: asked %u SQ / %u CQ at open, granted %u SQ / %u CQ (Get Features dw0 0x%08x)", NQ, NQ,
	    (dw0 & 0xffff) + 1, (dw0 >> 16) + 1, dw0);

	static struct run r;
	for (unsigned i = 0; i < NQ; i++) {
		struct ioq *x = &r.q[i];
		if ((rc = gpunvme_qpair_create(c, 2 * DEPTH, &x->qp)) != 0)
			return fail("create I/O queue pair %u: %s", i + 1, gpunvme_last_error());
		x->mem = gpunvme_dma_alloc(c, (size_t)DEPTH * CHUNK);
		if (!x->mem)
			return fail("DMA memory for queue pair %u: %s", i + 1, gpunvme_last_error());
		for (unsigned s = 0; s < DEPTH; s++)
			x->s[s] = (struct slot){ .run = &r, .q = i, .data = x->mem + (size_t)s * CHUNK };
	}
	say("create %u I/O queue pairs (Create I/O CQ + Create I/O SQ): %u entries each, %u commands in flight per queue; %u x %u MiB of DMA memory, the first at IOVA 0x%llx; %u granted queue(s) left",
	    NQ, 2 * DEPTH, DEPTH, NQ, (DEPTH * CHUNK) >> 20, (unsigned long long)gpunvme_dma_iova(c, r.q[0].mem),
	    gpunvme_io_queues_free(c));

	t0 = now_us();
	if (pump(&r, lbs))
		return 1;
	dt = now_us() - t0;
	say("write %u MiB: %u commands of %u KiB (PRP1 + a list of %u entries) over %u queue pairs in %.1f ms = %.0f MiB/s, %.0f IOPS (host pattern generation included)",
	    TOTAL >> 20, (unsigned)NCHUNK, CHUNK >> 10, CHUNK / ci.page_size - 1, NQ, dt / 1e3, mibs(TOTAL, dt),
	    NCHUNK / ((double)dt / 1e6));

	uint16_t st = 0;
	if ((rc = gpunvme_flush_sync(r.q[0].qp, NSID, &st)) != 0)
		return fail("flush: %s", gpunvme_last_error());
	say("flush namespace %u: %s", NSID, gpunvme_status_str(st));

	r.reading = 1;
	t0 = now_us();
	if (pump(&r, lbs))
		return 1;
	dt = now_us() - t0;
	uint32_t all = crc32(0, r.crc, sizeof(r.crc));
	say("read back %u MiB in %.1f ms = %.0f MiB/s; CRC32 checked per command: %llu mismatches (CRC of CRCs 0x%08x)",
	    TOTAL >> 20, dt / 1e3, mibs(TOTAL, dt), (unsigned long long)r.mismatches, all);
	if (r.mismatches)
		return fail("%llu of %u chunks read back wrong", (unsigned long long)r.mismatches, (unsigned)NCHUNK);

	struct gpunvme_smart_log sm;
	if ((rc = gpunvme_get_log_page(c, 0xffffffffu, GPUNVME_LOG_SMART, &sm, sizeof(sm))) != 0)
		return fail("SMART log: %s", gpunvme_last_error());
	say("SMART log: data units read %llu / written %llu (x1000 x 512 B), host reads %llu / writes %llu, temperature %u K, errors logged %llu",
	    (unsigned long long)sm.data_units_read[0], (unsigned long long)sm.data_units_written[0],
	    (unsigned long long)sm.host_reads[0], (unsigned long long)sm.host_writes[0],
	    sm.temperature[0] | sm.temperature[1] << 8, (unsigned long long)sm.num_err_log_entries[0]);
	if (sm.host_reads[0] < NCHUNK || sm.host_writes[0] < NCHUNK)
		return fail("the controller counted fewer commands than were completed");

	say("completions: %llu I/O commands (%u writes, %u reads, 1 flush), per queue pair %llu/%llu/%llu/%llu, errors 0",
	    (unsigned long long)(r.q[0].completed + r.q[1].completed + r.q[2].completed + r.q[3].completed + 1),
	    (unsigned)NCHUNK, (unsigned)NCHUNK, (unsigned long long)r.q[0].completed,
	    (unsigned long long)r.q[1].completed, (unsigned long long)r.q[2].completed,
	    (unsigned long long)r.q[3].completed);

	t0 = now_us();
	for (unsigned i = 0; i < NQ; i++) {
		gpunvme_qpair_destroy(r.q[i].qp);
		gpunvme_dma_free(c, r.q[i].mem);
	}
	gpunvme_close(c);
	say("delete %u queue pairs (Delete I/O SQ + CQ), shutdown (CC.SHN = 01 until CSTS.SHST = complete), release: %llu us",
	    NQ, (unsigned long long)(now_us() - t0));
	say("done: all %u MiB verified", TOTAL >> 20);
	return 0;
}
