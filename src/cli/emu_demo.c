/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme-emu-demo: a readable trace of the whole path on the embedded
 * emulator, driven like hardware (BAR0 registers + DMA memory only) by the
 * test harness mini-driver: bring-up, Identify, queue setup, 64 MiB written
 * over 4 queue pairs with PRP lists, flush, read back with CRC checks,
 * SMART log, statistics and a clean shutdown. Exits non-zero on any error.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define DEMO_SPEC "ram:256M?lbads=12"
#define NQ 4
#define DEPTH 32
#define CHUNK (128u << 10)      /* bytes per command: MDTS 5 = 128 KiB */
#define TOTAL (64u << 20)       /* bytes written and read back */
#define NCHUNK (TOTAL / CHUNK)

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

static void trim(char *dst, const char *src, size_t n)
{
	memcpy(dst, src, n);
	dst[n] = 0;
	for (size_t i = n; i > 0 && (dst[i - 1] == ' ' || dst[i - 1] == 0); i--)
		dst[i - 1] = 0;
}

struct slot {
	struct h_buf data, list;
	int busy;
	uint32_t chunk;
};

struct ioq {
	struct h_qp q;
	struct slot s[DEPTH];
	unsigned outstanding;
};

/* Run NCHUNK commands of `opc` over the queues, pipelined DEPTH deep each.
 * Writes fill chunk k with pattern k and record its CRC; reads check it. */
static int pump(struct h_ctrl *c, struct ioq *qs, uint8_t opc, uint32_t lbs, uint32_t *crc, uint64_t *mism)
{
	uint32_t next = 0, done = 0;
	uint64_t last = h_now_ms();
	unsigned spins = 0;
	while (done < NCHUNK) {
		int progress = 0;
		for (unsigned qi = 0; qi < NQ; qi++) {
			struct ioq *x = &qs[qi];
			unsigned pushed = 0;
			for (unsigned si = 0; si < DEPTH && next < NCHUNK; si++) {
				struct slot *s = &x->s[si];
				if (s->busy)
					continue;
				s->chunk = next++;
				struct gpunvme_sqe sqe;
				h_io_sqe(&sqe, opc, 1, (uint64_t)s->chunk * (CHUNK / lbs), CHUNK / lbs);
				sqe.cid = (uint16_t)si;
				if (opc == GPUNVME_CMD_WRITE) {
					h_fill(s->data.va, CHUNK, 0xd00d0000u + s->chunk);
					crc[s->chunk] = h_crc32(0, s->data.va, CHUNK);
				} else {
					memset(s->data.va, 0, 64); /* a read that moves nothing fails */
				}
				if (h_prp_build(s->data.iova, CHUNK, s->list.va, s->list.iova, s->list.len, NULL,
						&sqe.prp1, &sqe.prp2) < 0 ||
				    h_sq_push(&x->q, &sqe) != 0)
					return fail("queue %u: cannot submit", qi + 1);
				s->busy = 1;
				x->outstanding++;
				pushed++;
			}
			if (pushed)
				h_sq_ring(&x->q);
			struct gpunvme_cqe e;
			while (h_cq_peek(&x->q, &e)) {
				if (e.cid >= DEPTH || !x->s[e.cid].busy)
					return fail("queue %u: unexpected completion cid %u", qi + 1, e.cid);
				struct slot *s = &x->s[e.cid];
				if (h_st(&e))
					return fail("queue %u chunk %u: %s", qi + 1, s->chunk, gpunvme_status_str(h_st(&e)));
				if (opc == GPUNVME_CMD_READ && h_crc32(0, s->data.va, CHUNK) != crc[s->chunk])
					(*mism)++;
				s->busy = 0;
				x->outstanding--;
				done++;
				progress = 1;
			}
		}
		if (progress) {
			last = h_now_ms();
			spins = 0;
		} else if (h_now_ms() - last > H_TIMEOUT_MS) {
			return fail("no completion for %u ms (%u of %u done)", H_TIMEOUT_MS, done, (unsigned)NCHUNK);
		} else {
			h_idle(c, &spins);
		}
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
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	const char *err = NULL;

	gpunvme_emu_config_init(&cfg);
	if (gpunvme_emu_config_parse(&cfg, DEMO_SPEC, &err) != 0)
		return fail("config \"%s\": %s", DEMO_SPEC, err ? err : "invalid");
	size_t arena = (size_t)NQ * DEPTH * (CHUNK + H_PAGE) + (8u << 20);
	int rc = h_ctrl_open(&c, &cfg, arena);
	if (rc)
		return fail("gpunvme_emu_create: %d", rc);
	say("create emulator \"emu:%s\": %u namespace(s), %u worker(s), BAR0 %zu bytes, DMA arena %zu MiB at IOVA 0x%llx",
	    DEMO_SPEC, cfg.nr_ns, cfg.workers, gpunvme_emu_bar0_size(c->emu), arena >> 20,
	    (unsigned long long)c->arena.iova);

	uint64_t cap = h_rd64(c, GPUNVME_REG_CAP);
	uint32_t vs = h_rd32(c, GPUNVME_REG_VS);
	say("CAP 0x%016llx: MQES %u (0's based), CQR %u, TO %u ms, DSTRD %u, CSS 0x%02x, MPS %u..%u KiB; VS %u.%u.%u",
	    (unsigned long long)cap, gpunvme_cap_mqes(cap), gpunvme_cap_cqr(cap), gpunvme_cap_to(cap) * 500,
	    gpunvme_cap_dstrd(cap), gpunvme_cap_css(cap), 4u << gpunvme_cap_mpsmin(cap), 4u << gpunvme_cap_mpsmax(cap),
	    gpunvme_vs_mjr(vs), gpunvme_vs_mnr(vs), gpunvme_vs_ter(vs));

	uint64_t t0 = h_now_us();
	rc = h_enable(c, 0);
	if (rc)
		return fail("enable: %d (CSTS 0x%x)", rc, h_rd32(c, GPUNVME_REG_CSTS));
	uint32_t cc = h_rd32(c, GPUNVME_REG_CC);
	say("enable: AQA 0x%08x, ASQ 0x%llx, ACQ 0x%llx, CC 0x%08x (EN 1, CSS %u, MPS %u, IOSQES %u, IOCQES %u) -> CSTS 0x%x RDY=1 after %llu us",
	    h_rd32(c, GPUNVME_REG_AQA), (unsigned long long)h_rd64(c, GPUNVME_REG_ASQ),
	    (unsigned long long)h_rd64(c, GPUNVME_REG_ACQ), cc, gpunvme_cc_css(cc), gpunvme_cc_mps(cc),
	    gpunvme_cc_iosqes(cc), gpunvme_cc_iocqes(cc), h_rd32(c, GPUNVME_REG_CSTS),
	    (unsigned long long)(h_now_us() - t0));

	struct gpunvme_id_ctrl id;
	if ((rc = h_id_ctrl(c, &id)) != 0)
		return fail("identify controller: %d", rc);
	char mn[41], sn[21], fr[9];
	trim(mn, id.mn, 40);
	trim(sn, id.sn, 20);
	trim(fr, id.fr, 8);
	say("identify controller: model \"%s\", serial \"%s\", firmware \"%s\", MDTS %u (%u KiB), NN %u, SQES 0x%02x, CQES 0x%02x, ONCS 0x%04x, VWC %u",
	    mn, sn, fr, id.mdts, id.mdts ? (4u << id.mdts) : 0, id.nn, id.sqes, id.cqes, id.oncs, id.vwc & 1);

	struct gpunvme_id_ns ns;
	if ((rc = h_id_ns(c, 1, &ns)) != 0)
		return fail("identify namespace: %d", rc);
	uint32_t lbs = 1u << ns.lbaf[gpunvme_id_ns_flbas_index(&ns)].lbads;
	say("identify namespace 1: %llu blocks of %u bytes = %llu MiB, capacity %llu blocks",
	    (unsigned long long)ns.nsze, lbs, (unsigned long long)(ns.nsze * lbs >> 20), (unsigned long long)ns.ncap);
	if ((uint64_t)ns.nsze * lbs < TOTAL)
		return fail("namespace smaller than %u MiB", TOTAL >> 20);
	if (id.mdts && (4096u << id.mdts) < CHUNK)
		return fail("MDTS below %u KiB", CHUNK >> 10);

	if (h_set_features(c, GPUNVME_FEAT_NUM_QUEUES, ((NQ - 1u) << 16) | (NQ - 1u), &e) || h_st(&e))
		return fail("set features number of queues: %s", gpunvme_status_str(h_st(&e)));
	say("set features number of queues: asked %u SQ / %u CQ, granted %u SQ / %u CQ", NQ, NQ,
	    (e.dw0 & 0xffff) + 1, (e.dw0 >> 16) + 1);

	static struct ioq qs[NQ];
	for (unsigned i = 0; i < NQ; i++) {
		rc = h_qp_create(c, &qs[i].q, (uint16_t)(i + 1), 2 * DEPTH);
		if (rc)
			return fail("create I/O queue pair %u: %d", i + 1, rc);
		for (unsigned s = 0; s < DEPTH; s++) {
			qs[i].s[s].data = h_alloc(&c->arena, CHUNK, H_PAGE);
			qs[i].s[s].list = h_alloc(&c->arena, H_PAGE, H_PAGE);
		}
	}
	say("create %u I/O queue pairs: QID 1..%u, %u entries each, %u commands in flight per queue, doorbells 0x%x..0x%x",
	    NQ, NQ, 2 * DEPTH, DEPTH, gpunvme_sq_doorbell(1, c->dstrd), gpunvme_cq_doorbell(NQ, c->dstrd));

	static uint32_t crc[NCHUNK];
	uint64_t mism = 0;
	t0 = h_now_us();
	if (pump(c, qs, GPUNVME_CMD_WRITE, lbs, crc, &mism))
		return 1;
	uint64_t dt = h_now_us() - t0;
	say("write %u MiB: %u commands of %u KiB (PRP1 + list of %u entries) over %u queues in %.1f ms = %.0f MiB/s, %.0f IOPS (host pattern generation included)",
	    TOTAL >> 20, (unsigned)NCHUNK, CHUNK >> 10, CHUNK / H_PAGE - 1, NQ, dt / 1e3, mibs(TOTAL, dt),
	    NCHUNK / ((double)dt / 1e6));

	if (h_io(&qs[0].q, GPUNVME_CMD_FLUSH, 1, 0, 0, 0, 0, &e) || h_st(&e))
		return fail("flush: %s", gpunvme_status_str(h_st(&e)));
	say("flush namespace 1: %s", gpunvme_status_str(h_st(&e)));

	t0 = h_now_us();
	if (pump(c, qs, GPUNVME_CMD_READ, lbs, crc, &mism))
		return 1;
	dt = h_now_us() - t0;
	uint32_t all = h_crc32(0, crc, sizeof(crc));
	say("read back %u MiB in %.1f ms = %.0f MiB/s; CRC32 checked per command: %llu mismatches (CRC of CRCs 0x%08x)",
	    TOTAL >> 20, dt / 1e3, mibs(TOTAL, dt), (unsigned long long)mism, all);
	if (mism)
		return fail("%llu of %u chunks read back wrong", (unsigned long long)mism, (unsigned)NCHUNK);

	struct gpunvme_smart_log sm;
	if ((rc = h_smart(c, &sm)) != 0)
		return fail("SMART log: %d", rc);
	say("SMART log: data units read %llu / written %llu (x1000 x 512 B), host reads %llu / writes %llu, temperature %u K, errors logged %llu",
	    (unsigned long long)sm.data_units_read[0], (unsigned long long)sm.data_units_written[0],
	    (unsigned long long)sm.host_reads[0], (unsigned long long)sm.host_writes[0],
	    sm.temperature[0] | sm.temperature[1] << 8, (unsigned long long)sm.num_err_log_entries[0]);

	struct gpunvme_emu_stats st;
	gpunvme_emu_get_stats(c->emu, &st);
	say("emulator stats: admin %llu, I/O %llu (reads %llu, writes %llu, flushes %llu), %llu MiB read, %llu MiB written, errors %llu; per queue %llu/%llu/%llu/%llu",
	    (unsigned long long)st.admin_cmds, (unsigned long long)st.io_cmds, (unsigned long long)st.reads,
	    (unsigned long long)st.writes, (unsigned long long)st.flushes, (unsigned long long)(st.bytes_read >> 20),
	    (unsigned long long)(st.bytes_written >> 20), (unsigned long long)st.errors,
	    (unsigned long long)gpunvme_emu_sq_commands(c->emu, 1), (unsigned long long)gpunvme_emu_sq_commands(c->emu, 2),
	    (unsigned long long)gpunvme_emu_sq_commands(c->emu, 3), (unsigned long long)gpunvme_emu_sq_commands(c->emu, 4));
	if (st.errors)
		return fail("emulator counted %llu errors", (unsigned long long)st.errors);

	for (unsigned i = 0; i < NQ; i++)
		if ((rc = h_qp_delete(c, &qs[i].q)) != 0)
			return fail("delete queue pair %u: %d", i + 1, rc);
	if ((rc = h_shutdown(c)) != 0)
		return fail("shutdown: %d (CSTS 0x%x)", rc, h_rd32(c, GPUNVME_REG_CSTS));
	say("delete %u queue pairs, shutdown: CC.SHN=01 -> CSTS 0x%x (SHST %u = complete)", NQ,
	    h_rd32(c, GPUNVME_REG_CSTS), gpunvme_csts_shst(h_rd32(c, GPUNVME_REG_CSTS)));
	if ((rc = h_disable(c)) != 0)
		return fail("disable: %d", rc);
	h_ctrl_close(c);
	say("disable and destroy: done, all %u MiB verified", TOTAL >> 20);
	return 0;
}
