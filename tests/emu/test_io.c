/* SPDX-License-Identifier: BSD-2-Clause */
/* NVM command set (NVMe 1.4 §6): data round trips, command checks, CQ
 * back-pressure, backing stores and statistics. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static void two_ns_cfg(struct gpunvme_emu_config *cfg)
{
	h_cfg(cfg);
	cfg->nr_ns = 2;
	cfg->ns[0].backing = GPUNVME_EMU_BACK_RAM;
	cfg->ns[0].size = 64u << 20;
	cfg->ns[0].lba_shift = 9;
	cfg->ns[1] = cfg->ns[0];
	cfg->ns[1].size = 32u << 20;
	cfg->ns[1].lba_shift = 12;
}

/* Write nlb blocks of a seeded pattern, read them back, compare CRCs. */
static int roundtrip(struct h_qp *q, uint32_t nsid, uint32_t lbs, uint64_t slba, uint32_t nlb, uint64_t seed)
{
	struct h_ctrl *c = q->c;
	struct gpunvme_cqe e;
	size_t mark = c->arena.used, len = (size_t)nlb * lbs;
	struct h_buf w = h_alloc(&c->arena, len, H_PAGE), r = h_alloc(&c->arena, len, H_PAGE);
	h_fill(w.va, len, seed);
	memset(r.va, 0xee, len);
	REQUIRE_OK(h_io(q, GPUNVME_CMD_WRITE, nsid, slba, nlb, w.iova, len, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_io(q, GPUNVME_CMD_READ, nsid, slba, nlb, r.iova, len, &e));
	REQUIRE_ST(e, 0);
	REQUIRE(h_crc32(0, r.va, len) == h_crc32(0, w.va, len), "nsid %u lba %llu x %u: data mismatch", nsid,
		 (unsigned long long)slba, nlb);
	c->arena.used = mark;
	return 0;
}

/* Read nlb blocks and compare with buf. */
static int read_cmp(struct h_qp *q, uint32_t nsid, uint32_t lbs, uint64_t slba, uint32_t nlb, const void *want)
{
	struct h_ctrl *c = q->c;
	struct gpunvme_cqe e;
	size_t mark = c->arena.used, len = (size_t)nlb * lbs;
	struct h_buf r = h_alloc(&c->arena, len, H_PAGE);
	memset(r.va, 0xee, len);
	REQUIRE_OK(h_io(q, GPUNVME_CMD_READ, nsid, slba, nlb, r.iova, len, &e));
	REQUIRE_ST(e, 0);
	for (uint32_t i = 0; i < nlb; i++)
		REQUIRE(memcmp((uint8_t *)r.va + (size_t)i * lbs, (const uint8_t *)want + (size_t)i * lbs, lbs) == 0,
			 "nsid %u lba %llu differs", nsid, (unsigned long long)(slba + i));
	c->arena.used = mark;
	return 0;
}

TEST_CASE(rw_512)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct h_qp q;
	two_ns_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_qp_create(c, &q, 1, 64));
	static const uint32_t n[] = { 1, 7, 8, 9, 63, 64, 255, 256 };
	uint64_t nsze = (64u << 20) >> 9;
	for (size_t i = 0; i < sizeof(n) / sizeof(n[0]); i++) {
		if (roundtrip(&q, 1, 512, 1000 + i * 300, n[i], 1 + i))
			return 1;
	}
	if (roundtrip(&q, 1, 512, nsze - 1, 1, 99) || roundtrip(&q, 1, 512, nsze - 256, 256, 98))
		return 1;
	return roundtrip(&q, 1, 512, 0, 3, 97);
}

TEST_CASE(rw_4k)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct h_qp q;
	two_ns_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_qp_create(c, &q, 1, 64));
	static const uint32_t n[] = { 1, 2, 3, 16, 31, 32 };
	uint64_t nsze = (32u << 20) >> 12;
	for (size_t i = 0; i < sizeof(n) / sizeof(n[0]); i++) {
		if (roundtrip(&q, 2, 4096, 10 + i * 40, n[i], 11 + i))
			return 1;
	}
	if (roundtrip(&q, 2, 4096, nsze - 32, 32, 5))
		return 1;
	return 0;
}

TEST_CASE(rw_two_ns)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct h_qp q1, q2;
	struct gpunvme_cqe e;
	two_ns_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_qp_create(c, &q1, 1, 64));
	REQUIRE_OK(h_qp_create(c, &q2, 2, 64));
	/* Same LBA numbers, different namespaces, interleaved: each namespace
	 * keeps its own data. */
	struct h_buf a = h_alloc(&c->arena, 32768, H_PAGE), b = h_alloc(&c->arena, 32768, H_PAGE);
	h_fill(a.va, 32768, 0xa);
	h_fill(b.va, 32768, 0xb);
	for (int i = 0; i < 8; i++) {
		REQUIRE_OK(h_io(i & 1 ? &q2 : &q1, GPUNVME_CMD_WRITE, 1, (uint64_t)i * 8, 8, a.iova + (uint64_t)i * 4096, 4096, &e));
		REQUIRE_ST(e, 0);
		REQUIRE_OK(h_io(i & 1 ? &q1 : &q2, GPUNVME_CMD_WRITE, 2, (uint64_t)i, 1, b.iova + (uint64_t)i * 4096, 4096, &e));
		REQUIRE_ST(e, 0);
	}
	if (read_cmp(&q2, 1, 512, 0, 64, a.va) || read_cmp(&q1, 2, 4096, 0, 8, b.va))
		return 1;
	return 0;
}

TEST_CASE(flush)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	two_ns_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_FLUSH, 1, 0, 0, 0, 0, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_FLUSH, 2, 0, 0, 0, 0, &e));
	REQUIRE_ST(e, 0);
	/* §6.8: NSID FFFFFFFFh flushes all namespaces. */
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_FLUSH, GPUNVME_NSID_ALL, 0, 0, 0, 0, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_FLUSH, 0, 0, 0, 0, 0, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_NSID));
	return 0;
}

TEST_CASE(write_zeroes)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	struct gpunvme_sqe s;
	two_ns_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	struct h_buf w = h_alloc(&c->arena, 32768, H_PAGE);
	h_fill(w.va, 32768, 3);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, 0, 64, w.iova, 32768, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE_ZEROES, 1, 8, 16, 0, 0, &e));
	REQUIRE_ST(e, 0);
	memset((uint8_t *)w.va + 8 * 512, 0, 16 * 512);
	if (read_cmp(&q, 1, 512, 0, 64, w.va))
		return 1;

	/* Not limited by MDTS (§6.16): 65536 blocks = 32 MiB in one command. */
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, 70000, 64, w.iova, 32768, &e));
	REQUIRE_ST(e, 0);
	h_io_sqe(&s, GPUNVME_CMD_WRITE_ZEROES, 1, 65536, 65536);
	REQUIRE_OK(h_cmd(&q, &s, &e));
	REQUIRE_ST(e, 0);
	memset(w.va, 0, 32768);
	if (read_cmp(&q, 1, 512, 70000, 64, w.va))
		return 1;
	/* 4 KiB namespace. */
	h_fill(w.va, 32768, 4);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 2, 100, 8, w.iova, 32768, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE_ZEROES, 2, 101, 2, 0, 0, &e));
	REQUIRE_ST(e, 0);
	memset((uint8_t *)w.va + 4096, 0, 8192);
	if (read_cmp(&q, 2, 4096, 100, 8, w.va))
		return 1;
	/* Out of range. */
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE_ZEROES, 2, 8190, 3, 0, 0, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_LBA_RANGE));
	return 0;
}

static int dsm(struct h_qp *q, uint32_t nsid, uint32_t attr, const struct gpunvme_dsm_range *r, uint32_t n,
	       struct gpunvme_cqe *e)
{
	struct h_ctrl *c = q->c;
	size_t mark = c->arena.used;
	struct h_buf b = h_alloc(&c->arena, H_PAGE, H_PAGE);
	memcpy(b.va, r, n * sizeof(*r));
	struct gpunvme_sqe s = { .opc = GPUNVME_CMD_DSM, .nsid = nsid, .prp1 = b.iova };
	s.dsm.nr = n - 1;
	s.dsm.attr = attr;
	int rc = h_cmd(q, &s, e);
	c->arena.used = mark;
	return rc;
}

TEST_CASE(dsm_deallocate)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	two_ns_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	struct h_buf w = h_alloc(&c->arena, 65536, H_PAGE);
	h_fill(w.va, 65536, 5);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, 0, 128, w.iova, 65536, &e));
	REQUIRE_ST(e, 0);
	/* Hints only: data stays. */
	struct gpunvme_dsm_range r[2] = { { .nlb = 5, .slba = 10 }, { .nlb = 20, .slba = 100 } };
	REQUIRE_OK(dsm(&q, 1, GPUNVME_DSM_IDR | GPUNVME_DSM_IDW, r, 2, &e));
	REQUIRE_ST(e, 0);
	if (read_cmp(&q, 1, 512, 0, 128, w.va))
		return 1;
	/* Deallocate: DLFEAT says such blocks read as zeroes. */
	REQUIRE_OK(dsm(&q, 1, GPUNVME_DSM_AD, r, 2, &e));
	REQUIRE_ST(e, 0);
	memset((uint8_t *)w.va + 10 * 512, 0, 5 * 512);
	memset((uint8_t *)w.va + 100 * 512, 0, 20 * 512);
	if (read_cmp(&q, 1, 512, 0, 128, w.va))
		return 1;
	/* 256 ranges, the most one command carries (NR is 8 bits, 0's based). */
	h_fill(w.va, 65536, 55);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, 0, 128, w.iova, 65536, &e));
	REQUIRE_ST(e, 0);
	struct gpunvme_dsm_range many[256];
	memset(many, 0, sizeof(many));
	for (int i = 0; i < 256; i++) {
		many[i].slba = i < 64 ? (uint64_t)i * 2 : 100000 + (uint64_t)i; /* even LBAs of 0..127, then far away */
		many[i].nlb = 1;
	}
	REQUIRE_OK(dsm(&q, 1, GPUNVME_DSM_AD, many, 256, &e));
	REQUIRE_ST(e, 0);
	for (int i = 0; i < 64; i++)
		memset((uint8_t *)w.va + (size_t)i * 2 * 512, 0, 512);
	if (read_cmp(&q, 1, 512, 0, 128, w.va))
		return 1;
	/* A range past the end. */
	struct gpunvme_dsm_range bad[2] = { { .nlb = 1, .slba = 0 }, { .nlb = 2, .slba = (64u << 20) / 512 - 1 } };
	REQUIRE_OK(dsm(&q, 1, GPUNVME_DSM_AD, bad, 2, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_LBA_RANGE));
	/* 4 KiB namespace. */
	h_fill(w.va, 16384, 6);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 2, 0, 4, w.iova, 16384, &e));
	REQUIRE_ST(e, 0);
	struct gpunvme_dsm_range r2 = { .nlb = 1, .slba = 2 };
	REQUIRE_OK(dsm(&q, 2, GPUNVME_DSM_AD, &r2, 1, &e));
	REQUIRE_ST(e, 0);
	memset((uint8_t *)w.va + 8192, 0, 4096);
	return read_cmp(&q, 2, 4096, 0, 4, w.va);
}

TEST_CASE(mdts)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	two_ns_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	struct h_buf b = h_alloc(&c->arena, 256 << 10, H_PAGE);
	/* MDTS 5: 2^5 x 4 KiB = 128 KiB (§5.15.2.2). */
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, 0, 256, b.iova, 128 << 10, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, 0, 257, b.iova, 257 * 512, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, 0, 257, b.iova, 257 * 512, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 2, 0, 32, b.iova, 128 << 10, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 2, 0, 33, b.iova, 33 * 4096, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	return 0;
}

TEST_CASE(lba_range)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	two_ns_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	struct h_buf b = h_alloc(&c->arena, 8192, H_PAGE);
	uint64_t nsze = (64u << 20) >> 9;
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, nsze - 1, 1, b.iova, 512, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, nsze - 1, 2, b.iova, 1024, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_LBA_RANGE));
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, nsze, 1, b.iova, 512, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_LBA_RANGE));
	/* SLBA + NLB wraps 64 bits: still out of range. */
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, UINT64_MAX, 2, b.iova, 1024, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_LBA_RANGE));
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 2, (32u << 20) >> 12, 1, b.iova, 4096, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_LBA_RANGE));
	/* ns 2 is smaller than ns 1: an LBA valid on 1 is out of range on 2. */
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 2, 10000, 1, b.iova, 4096, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_LBA_RANGE));
	return 0;
}

TEST_CASE(bad_nsid)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	struct gpunvme_id_ctrl id;
	two_ns_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_id_ctrl(c, &id));
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	struct h_buf b = h_alloc(&c->arena, 4096, H_PAGE);
	const uint32_t bad[] = { 0, id.nn + 1, 0x12345678u, GPUNVME_NSID_ALL };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, bad[i], 0, 1, b.iova, 512, &e));
		REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_NSID));
		REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, bad[i], 0, 1, b.iova, 512, &e));
		REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_NSID));
	}
	if (id.nn > 2) {
		/* Valid but inactive: Invalid Field (docs, as QEMU). */
		REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 3, 0, 1, b.iova, 512, &e));
		REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	}
	return 0;
}

TEST_CASE(bad_opcode)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	struct gpunvme_id_ctrl id;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_id_ctrl(c, &id));
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	uint8_t ops[8];
	size_t n = 0;
	ops[n++] = 0x7e;
	ops[n++] = 0xff;
	if (!(id.oncs & GPUNVME_ONCS_COMPARE))
		ops[n++] = GPUNVME_CMD_COMPARE;
	if (!(id.oncs & GPUNVME_ONCS_WRITE_UNCOR))
		ops[n++] = GPUNVME_CMD_WRITE_UNCOR;
	if (!(id.oncs & GPUNVME_ONCS_RESERVATIONS))
		ops[n++] = GPUNVME_CMD_RESV_REGISTER;
	for (size_t i = 0; i < n; i++) {
		struct gpunvme_sqe s = { .opc = ops[i], .nsid = 1 };
		REQUIRE_OK(h_cmd(&q, &s, &e));
		REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_OPCODE));
		/* The opcode is checked before the NSID. */
		s.nsid = 0;
		REQUIRE_OK(h_cmd(&q, &s, &e));
		REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_OPCODE));
	}
	return 0;
}

TEST_CASE(check_order)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	struct gpunvme_sqe s;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	struct h_buf b = h_alloc(&c->arena, 4096, H_PAGE);
	uint64_t nsze = (uint64_t)cfg.ns[0].size >> cfg.ns[0].lba_shift;
	/* FUSE / PSDT (SGLs are not supported): Invalid Field. */
	h_io_sqe(&s, GPUNVME_CMD_READ, 1, 0, 1);
	s.prp1 = b.iova;
	s.flags = 0x40;
	REQUIRE_OK(h_cmd(&q, &s, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	h_io_sqe(&s, GPUNVME_CMD_WRITE, 1, 0, 1);
	s.prp1 = b.iova;
	s.flags = 0x01;
	REQUIRE_OK(h_cmd(&q, &s, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	/* NSID before FUSE/PSDT. */
	h_io_sqe(&s, GPUNVME_CMD_READ, 0, 0, 1);
	s.flags = 0x40;
	REQUIRE_OK(h_cmd(&q, &s, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_NSID));
	/* MDTS before LBA range. */
	h_io_sqe(&s, GPUNVME_CMD_READ, 1, nsze, 300);
	s.prp1 = b.iova;
	REQUIRE_OK(h_cmd(&q, &s, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	/* LBA range before the data pointer. */
	h_io_sqe(&s, GPUNVME_CMD_READ, 1, nsze, 1);
	s.prp1 = 0x500000000000ull;
	REQUIRE_OK(h_cmd(&q, &s, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_LBA_RANGE));
	return 0;
}

TEST_CASE(cq_backpressure)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	/* CQ of 4 entries (holds 3, §4.1.2), SQ of 32, 20 commands. */
	struct h_qp q;
	memset(&q, 0, sizeof(q));
	struct h_buf sqm = h_alloc(&c->arena, H_PAGE, H_PAGE), cqm = h_alloc(&c->arena, H_PAGE, H_PAGE);
	q.c = c;
	q.sqid = q.cqid = 1;
	q.sq_entries = 32;
	q.cq_entries = 4;
	q.sq = sqm.va;
	q.sq_iova = sqm.iova;
	q.cq = cqm.va;
	q.cq_iova = cqm.iova;
	q.prp_lists = h_alloc(&c->arena, H_PAGE, H_PAGE);
	h_qp_reset(&q);
	REQUIRE_OK(h_create_cq(c, 1, 3, q.cq_iova, GPUNVME_Q_PC, 0, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_create_sq(c, 1, 31, q.sq_iova, GPUNVME_Q_PC, 1, &e));
	REQUIRE_ST(e, 0);

	enum { N = 20 };
	struct h_buf data = h_alloc(&c->arena, N * 512, H_PAGE);
	h_fill(data.va, N * 512, 77);
	for (int i = 0; i < N; i++) {
		struct gpunvme_sqe s;
		h_io_sqe(&s, GPUNVME_CMD_WRITE, 1, (uint64_t)i, 1);
		s.prp1 = data.iova + (uint64_t)i * 512;
		s.cid = (uint16_t)(1000 + i);
		REQUIRE_OK(h_sq_push(&q, &s));
	}
	h_sq_ring(&q);
	/* Do not consume for a while (at least 300 ms, until the CQ is full):
	 * the controller must stop at a full CQ, never overwrite an entry. */
	uint64_t t0 = h_now_ms();
	for (;;) {
		unsigned p = h_cq_pending(&q);
		REQUIRE(p <= 3, "CQ holds %u entries, capacity is 3", p);
		if (p == 3 && h_now_ms() - t0 >= 300)
			break;
		REQUIRE(h_now_ms() - t0 < H_TIMEOUT_MS, "CQ never filled: %u entries", p);
		h_sleep_ms(5);
	}
	int seen[N] = { 0 };
	for (int i = 0; i < N; i++) {
		REQUIRE_OK(h_cq_wait(&q, &e, H_TIMEOUT_MS));
		REQUIRE_ST(e, 0);
		REQUIRE_EQ(e.sqid, 1);
		REQUIRE(e.cid >= 1000 && e.cid < 1000 + N, "unexpected cid %u", e.cid);
		REQUIRE(++seen[e.cid - 1000] == 1, "cid %u completed twice", e.cid);
		REQUIRE(e.sqhd < 32);
		if (i % 4 == 3)
			h_sleep_ms(20); /* slow host: more back-pressure rounds */
	}
	REQUIRE_EQ(h_expect_silence(&q, 100), 1);
	struct h_qp q2;
	REQUIRE_OK(h_qp_create(c, &q2, 2, 16));
	return read_cmp(&q2, 1, 512, 0, N, data.va);
}

TEST_CASE(file_persistence)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	struct gpunvme_id_ns ns;
	char path[] = "/tmp/gpunvme-emu-test-XXXXXX";
	int fd = mkstemp(path);
	REQUIRE(fd >= 0);
	const size_t fsz = 8u << 20;
	REQUIRE(ftruncate(fd, (off_t)fsz) == 0);

	h_cfg(&cfg);
	cfg.ns[0].backing = GPUNVME_EMU_BACK_FILE;
	cfg.ns[0].size = 0; /* the file's size */
	cfg.ns[0].lba_shift = 9;
	snprintf(cfg.ns[0].path, sizeof(cfg.ns[0].path), "%s", path);
	int rc = h_ctrl_up(&c, &cfg);
	if (rc) {
		unlink(path);
		close(fd);
		REQUIRE_OK(rc);
	}
	REQUIRE_OK(h_id_ns(c, 1, &ns));
	REQUIRE_EQ(ns.nsze, fsz / 512);
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	struct h_buf w = h_alloc(&c->arena, 256 << 10, H_PAGE);
	h_fill(w.va, 256 << 10, 0xf11e);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, 0, 256, w.iova, 128 << 10, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, fsz / 512 - 256, 256, w.iova + (128 << 10), 128 << 10, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_FLUSH, 1, 0, 0, 0, 0, &e));
	REQUIRE_ST(e, 0);
	/* The file itself holds the data. */
	uint8_t *chk = malloc(128 << 10);
	REQUIRE(chk != NULL);
	REQUIRE(pread(fd, chk, 128 << 10, (off_t)(fsz - (128 << 10))) == (ssize_t)(128 << 10));
	int same = memcmp(chk, (uint8_t *)w.va + (128 << 10), 128 << 10) == 0;
	free(chk);
	REQUIRE(same, "file content differs from what was written");
	void *copy = malloc(256 << 10);
	REQUIRE(copy != NULL);
	memcpy(copy, w.va, 256 << 10);
	h_ctrl_close(c);

	/* A new controller on the same file. */
	rc = h_ctrl_up(&c, &cfg);
	unlink(path);
	close(fd);
	if (rc)
		free(copy);
	REQUIRE_OK(rc);
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	int r1 = read_cmp(&q, 1, 512, 0, 256, copy);
	int r2 = r1 ? 1 : read_cmp(&q, 1, 512, fsz / 512 - 256, 256, (uint8_t *)copy + (128 << 10));
	free(copy);
	if (r1 || r2)
		return 1;

	/* A path that cannot be opened fails create with -errno. */
	h_cfg(&cfg);
	cfg.ns[0].backing = GPUNVME_EMU_BACK_FILE;
	cfg.ns[0].size = 0;
	snprintf(cfg.ns[0].path, sizeof(cfg.ns[0].path), "/nonexistent-dir/x");
	struct gpunvme_emu *emu = NULL;
	rc = gpunvme_emu_create(&cfg, &emu);
	REQUIRE(rc < 0, "create on a missing file returned %d", rc);
	return 0;
}

/* A 1 MiB image file filled with pattern `seed` (kept in *img) behind
 * namespace 1 (512-byte blocks), the flags as set_flags leaves them, and
 * the controller up. On failure everything made is undone. */
struct img_ns {
	char path[64];
	int fd;
	size_t len;
	uint8_t *img;
};

static int img_ns_up(struct img_ns *x, const char *tmpl, uint32_t seed, int snapshot, int read_only,
		     struct gpunvme_emu_config *cfg, struct h_ctrl **c)
{
	snprintf(x->path, sizeof(x->path), "%s", tmpl);
	x->len = 1u << 20;
	x->fd = mkstemp(x->path);
	REQUIRE(x->fd >= 0);
	x->img = malloc(x->len);
	REQUIRE(x->img != NULL);
	h_fill(x->img, x->len, seed);
	REQUIRE(pwrite(x->fd, x->img, x->len, 0) == (ssize_t)x->len);
	h_cfg(cfg);
	cfg->ns[0].backing = GPUNVME_EMU_BACK_FILE;
	cfg->ns[0].size = 0;
	cfg->ns[0].lba_shift = 9;
	cfg->ns[0].snapshot = snapshot;
	cfg->ns[0].read_only = read_only;
	snprintf(cfg->ns[0].path, sizeof(cfg->ns[0].path), "%s", x->path);
	int rc = h_ctrl_up(c, cfg);
	if (rc) {
		unlink(x->path);
		close(x->fd);
		free(x->img);
		REQUIRE_OK(rc);
	}
	return 0;
}

static void img_ns_done(struct img_ns *x)
{
	unlink(x->path);
	close(x->fd);
	free(x->img);
}

/* snapshot=1: the image is served from a RAM copy; writes never reach the
 * file, a missing file fails creation, and a partial last block is refused */
TEST_CASE(file_snapshot)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	struct img_ns x;
	if (img_ns_up(&x, "/tmp/gpunvme-emu-snap-XXXXXX", 0x5a5, 1, 0, &cfg, &c))
		return 1;
	const int fd = x.fd;
	const size_t fsz = x.len;
	const uint8_t *img = x.img;
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	int r = read_cmp(&q, 1, 512, 100, 256, img + 100 * 512);
	struct h_buf w = h_alloc(&c->arena, 4096, H_PAGE);
	memset(w.va, 0xee, 4096);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, 0, 8, w.iova, 4096, &e));
	REQUIRE_ST(e, 0);
	r = r ? r : read_cmp(&q, 1, 512, 0, 8, w.va);
	h_ctrl_close(c);
	uint8_t first[4096];
	REQUIRE(pread(fd, first, sizeof(first), 0) == (ssize_t)sizeof(first));
	int untouched = !memcmp(first, img, sizeof(first));
	/* a partial last block cannot be served */
	REQUIRE(ftruncate(fd, (off_t)fsz + 100) == 0);
	struct gpunvme_emu *emu = NULL;
	int prc = gpunvme_emu_create(&cfg, &emu);
	img_ns_done(&x);
	if (r)
		return r;
	REQUIRE(untouched, "snapshot=1 wrote to the image file");
	REQUIRE(prc == -EINVAL, "partial last block: %d", prc);
	snprintf(cfg.ns[0].path, sizeof(cfg.ns[0].path), "/nonexistent-dir/x");
	REQUIRE(gpunvme_emu_create(&cfg, &emu) == -ENOENT);
	return 0;
}

/* readonly=1 (and an image the process cannot write, see cli.readonly):
 * the image is opened read-only and mapped PROT_READ; reads work, every
 * command that would modify the namespace fails with Namespace is Write
 * Protected (NVMe 1.4 §4.6.1.2.1, Generic Command Status 20h), DNR, and
 * Identify Namespace NSATTR bit 0 says so. Hints (DSM without AD) and
 * Flush are no modification. The file is never written. */
TEST_CASE(file_read_only)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	struct img_ns x;
	if (img_ns_up(&x, "/tmp/gpunvme-emu-ro-XXXXXX", 0x70, 0, 1, &cfg, &c))
		return 1;
	const int fd = x.fd;
	const size_t fsz = x.len;
	const uint8_t *img = x.img;
	uint8_t *after = malloc(fsz);
	REQUIRE(after != NULL);
	int r = 0;
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	r = read_cmp(&q, 1, 512, 100, 256, img + 100 * 512);
	REQUIRE_OK(h_identify(c, GPUNVME_CNS_NS, 1, c->scratch.iova, &e));
	REQUIRE_ST(e, 0);
	CHECK(((const struct gpunvme_id_ns *)c->scratch.va)->nsattr == 1, "NSATTR %#x, want 1 (write protected)",
	      ((const struct gpunvme_id_ns *)c->scratch.va)->nsattr);
	struct h_buf w = h_alloc(&c->arena, 4096, H_PAGE);
	memset(w.va, 0xee, 4096);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, 0, 8, w.iova, 4096, &e));
	REQUIRE_ST(e, GPUNVME_SC_NS_WRITE_PROTECTED | GPUNVME_STATUS_DNR);
	/* before the range check: the namespace refuses any write */
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, 1u << 30, 1, w.iova, 512, &e));
	REQUIRE_ST(e, GPUNVME_SC_NS_WRITE_PROTECTED | GPUNVME_STATUS_DNR);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE_ZEROES, 1, 0, 8, 0, 0, &e));
	REQUIRE_ST(e, GPUNVME_SC_NS_WRITE_PROTECTED | GPUNVME_STATUS_DNR);
	struct gpunvme_dsm_range rg = { .nlb = 64, .slba = 0 };
	REQUIRE_OK(dsm(&q, 1, GPUNVME_DSM_AD, &rg, 1, &e));
	REQUIRE_ST(e, GPUNVME_SC_NS_WRITE_PROTECTED | GPUNVME_STATUS_DNR);
	REQUIRE_OK(dsm(&q, 1, 0, &rg, 1, &e)); /* IDR/IDW hints only */
	REQUIRE_ST(e, 0);
	struct gpunvme_sqe fl = { .opc = GPUNVME_CMD_FLUSH, .nsid = 1 };
	REQUIRE_OK(h_cmd(&q, &fl, &e));
	REQUIRE_ST(e, 0);
	r = r ? r : read_cmp(&q, 1, 512, 0, 64, img);
	h_ctrl_close(c);
	REQUIRE(pread(fd, after, fsz, 0) == (ssize_t)fsz);
	int untouched = !memcmp(after, img, fsz);
	/* a size larger than the read-only image would grow it: refused */
	cfg.ns[0].size = 2 * fsz;
	struct gpunvme_emu *emu = NULL;
	int grc = gpunvme_emu_create(&cfg, &emu);
	img_ns_done(&x);
	free(after);
	if (r)
		return r;
	REQUIRE(untouched, "a read-only namespace changed its image file");
	REQUIRE(grc == -EROFS, "growing a read-only image: %d", grc);
	return 0;
}

TEST_CASE(null_backing)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	struct gpunvme_id_ns ns;
	h_cfg(&cfg);
	cfg.ns[0].backing = GPUNVME_EMU_BACK_NULL;
	cfg.ns[0].size = 1ull << 40; /* costs nothing */
	cfg.ns[0].lba_shift = 12;
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_id_ns(c, 1, &ns));
	REQUIRE_EQ(ns.nsze, (1ull << 40) >> 12);
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	struct h_buf b = h_alloc(&c->arena, 128 << 10, H_PAGE);
	h_fill(b.va, 128 << 10, 1);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, ns.nsze - 32, 32, b.iova, 128 << 10, &e));
	REQUIRE_ST(e, 0);
	memset(b.va, 0x5a, 128 << 10);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, 0, 32, b.iova, 128 << 10, &e));
	REQUIRE_ST(e, 0);
	REQUIRE(h_all(b.va, 128 << 10, 0x5a), "null read modified the buffer");
	/* PRPs are still validated. */
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, 0, 1, 0x500000000000ull, 4096, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_DATA_XFER_ERROR));
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, ns.nsze, 1, b.iova, 4096, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_LBA_RANGE));
	return 0;
}

/* Stats are updated by the emulator threads around posting; allow them a
 * moment to settle before comparing. */
static void settle_stats(struct h_ctrl *c, struct gpunvme_emu_stats *st, uint64_t io_cmds)
{
	uint64_t end = h_now_ms() + 1000;
	do {
		gpunvme_emu_get_stats(c->emu, st);
		if (st->io_cmds >= io_cmds)
			return;
		h_sleep_ms(1);
	} while (h_now_ms() < end);
}

TEST_CASE(stats)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	struct gpunvme_emu_stats st;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	gpunvme_emu_get_stats(c->emu, &st);
	REQUIRE_EQ(st.io_cmds, 0);
	REQUIRE_EQ(st.reads + st.writes + st.bytes_read + st.bytes_written + st.errors + st.dropped, 0);
	uint64_t admin0 = st.admin_cmds;
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	for (uint64_t end = h_now_ms() + 1000; h_now_ms() < end; h_sleep_ms(1)) {
		gpunvme_emu_get_stats(c->emu, &st);
		if (st.admin_cmds >= admin0 + 2)
			break;
	}
	REQUIRE_EQ(st.admin_cmds, admin0 + 2);

	struct h_buf b = h_alloc(&c->arena, 16384, H_PAGE);
	for (int i = 0; i < 3; i++) {
		REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, (uint64_t)i * 8, 8, b.iova, 4096, &e));
		REQUIRE_ST(e, 0);
	}
	for (int i = 0; i < 2; i++) {
		REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, 0, 16, b.iova, 8192, &e));
		REQUIRE_ST(e, 0);
	}
	settle_stats(c, &st, 5);
	REQUIRE_EQ(st.io_cmds, 5);
	REQUIRE_EQ(st.writes, 3);
	REQUIRE_EQ(st.reads, 2);
	REQUIRE_EQ(st.bytes_written, 3 * 4096);
	REQUIRE_EQ(st.bytes_read, 2 * 8192);
	REQUIRE_EQ(st.errors, 0);

	REQUIRE_OK(h_io(&q, GPUNVME_CMD_FLUSH, 1, 0, 0, 0, 0, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE_ZEROES, 1, 0, 8, 0, 0, &e));
	REQUIRE_ST(e, 0);
	struct gpunvme_dsm_range *r = b.va;
	memset(r, 0, sizeof(*r));
	r->nlb = 1;
	struct gpunvme_sqe s = { .opc = GPUNVME_CMD_DSM, .nsid = 1, .prp1 = b.iova };
	s.dsm.attr = GPUNVME_DSM_AD;
	REQUIRE_OK(h_cmd(&q, &s, &e));
	REQUIRE_ST(e, 0);
	struct gpunvme_sqe bad = { .opc = 0x7e, .nsid = 1 };
	REQUIRE_OK(h_cmd(&q, &bad, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_OPCODE));
	settle_stats(c, &st, 9);
	REQUIRE_EQ(st.io_cmds, 9);
	REQUIRE_EQ(st.flushes, 1);
	REQUIRE_EQ(st.write_zeroes, 1);
	REQUIRE_EQ(st.dsm, 1);
	REQUIRE_EQ(st.errors, 1);
	REQUIRE_EQ(st.writes, 3);
	REQUIRE_EQ(st.reads, 2);
	REQUIRE_EQ(gpunvme_emu_sq_commands(c->emu, 1), 9);
	REQUIRE_EQ(gpunvme_emu_sq_commands(c->emu, 2), 0);
	REQUIRE_EQ(st.aers_posted, 0);
	REQUIRE_EQ(st.dropped, 0);

	int aer = h_aer_submit(c);
	REQUIRE(aer >= 0);
	h_wr32(c, gpunvme_sq_doorbell(1, c->dstrd), 99); /* invalid value */
	REQUIRE_OK(h_wait_cid(&c->admin, (uint16_t)aer, &e, H_TIMEOUT_MS));
	gpunvme_emu_get_stats(c->emu, &st);
	REQUIRE_EQ(st.aers_posted, 1);
	return 0;
}

static int timed_reads(struct h_qp *q, int n, uint32_t nlb, uint64_t iova, uint64_t *us)
{
	struct gpunvme_cqe e;
	uint64_t t0 = h_now_us();
	for (int i = 0; i < n; i++) {
		REQUIRE_OK(h_io(q, GPUNVME_CMD_READ, 1, 0, nlb, iova, (size_t)nlb * 512, &e));
		REQUIRE_ST(e, 0);
	}
	*us = h_now_us() - t0;
	return 0;
}

TEST_CASE(model_latency)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct h_qp q;
	uint64_t us;
	h_cfg(&cfg);
	cfg.model.latency_us = 50000;
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	struct h_buf b = h_alloc(&c->arena, 4096, H_PAGE);
	/* Each command waits at least latency_us before its completion. */
	if (timed_reads(&q, 3, 8, b.iova, &us))
		return 1;
	REQUIRE(us >= 3 * 50000, "3 commands at 50 ms latency took %llu us", (unsigned long long)us);
	/* Admin commands are not delayed (best of 3, so a descheduled host
	 * thread does not count). */
	uint64_t best = UINT64_MAX;
	for (int i = 0; i < 3; i++) {
		uint64_t t0 = h_now_us();
		struct gpunvme_id_ctrl id;
		REQUIRE_OK(h_id_ctrl(c, &id));
		uint64_t dt = h_now_us() - t0;
		best = dt < best ? dt : best;
	}
	REQUIRE(best < 50000, "identify took %llu us with 50 ms I/O latency", (unsigned long long)best);
	return 0;
}

TEST_CASE(model_throughput)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct h_qp q;
	uint64_t us;
	h_cfg(&cfg);
	cfg.model.iops = 500;
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	struct h_buf b = h_alloc(&c->arena, 128 << 10, H_PAGE);
	/* 100 commands at 500 IOPS: about 200 ms (allow the first for free). */
	if (timed_reads(&q, 100, 1, b.iova, &us))
		return 1;
	REQUIRE(us >= 190000, "100 commands at 500 IOPS took %llu us", (unsigned long long)us);
	h_ctrl_close(c);

	h_cfg(&cfg);
	cfg.model.read_bps = 8u << 20; /* 8 MiB/s */
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	b = h_alloc(&c->arena, 128 << 10, H_PAGE);
	/* 16 x 128 KiB = 2 MiB at 8 MiB/s: about 250 ms. */
	if (timed_reads(&q, 16, 256, b.iova, &us))
		return 1;
	REQUIRE(us >= 230000, "2 MiB at 8 MiB/s took %llu us", (unsigned long long)us);
	return 0;
}

int main(int argc, char **argv) { return check_main(argc, argv); }
