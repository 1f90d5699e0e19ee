/* SPDX-License-Identifier: BSD-2-Clause */
/* Physical Region Page handling (NVMe 1.4 §4.3) and DMA address checks. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

#define SENT 0x5a

static int setup(struct h_ctrl **c, struct h_qp *q, uint8_t mdts, uint32_t lba_shift)
{
	struct gpunvme_emu_config cfg;
	h_cfg(&cfg);
	cfg.mdts = mdts;
	cfg.ns[0].lba_shift = lba_shift;
	cfg.ns[0].size = 64u << 20;
	REQUIRE_OK(h_ctrl_open(c, &cfg, 96u << 20));
	REQUIRE_OK(h_enable(*c, 0));
	REQUIRE_OK(h_qp_create(*c, q, 1, 16));
	return 0;
}

/* Write `len` bytes of pattern `seed` at LBA slba (512 B blocks) from an
 * aligned buffer, the plain way. */
static int put(struct h_qp *q, uint64_t slba, size_t len, uint64_t seed, void *copy)
{
	struct h_ctrl *c = q->c;
	struct gpunvme_cqe e;
	size_t mark = c->arena.used;
	struct h_buf b = h_alloc(&c->arena, len, H_PAGE);
	h_fill(b.va, len, seed);
	if (copy)
		memcpy(copy, b.va, len);
	REQUIRE_OK(h_io(q, GPUNVME_CMD_WRITE, 1, slba, (uint32_t)(len / 512), b.iova, len, &e));
	REQUIRE_ST(e, 0);
	c->arena.used = mark;
	return 0;
}

static int raw_rw(struct h_qp *q, uint8_t opc, uint64_t slba, uint32_t nlb, uint64_t prp1, uint64_t prp2,
		  struct gpunvme_cqe *e)
{
	struct gpunvme_sqe s;
	h_io_sqe(&s, opc, 1, slba, nlb);
	s.prp1 = prp1;
	s.prp2 = prp2;
	return h_cmd(q, &s, e);
}

TEST_CASE(prp1_offset)
{
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	if (setup(&c, &q, 5, 9))
		return 1;
	uint8_t want[8192];
	if (put(&q, 0, 8192, 1, want))
		return 1;
	struct h_buf b = h_alloc(&c->arena, 3 * H_PAGE, H_PAGE);
	uint8_t *p = b.va;
	/* One block at offset 512: PRP1 carries an offset (§4.3), PRP2 unused. */
	memset(p, SENT, 3 * H_PAGE);
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 0, 1, b.iova + 512, 0, &e));
	REQUIRE_ST(e, 0);
	REQUIRE(memcmp(p + 512, want, 512) == 0);
	REQUIRE(h_all(p, 512, SENT) && h_all(p + 1024, 3 * H_PAGE - 1024, SENT));
	/* 8 blocks from offset 3584: the rest continues at PRP2 (page aligned). */
	memset(p, SENT, 3 * H_PAGE);
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 0, 8, b.iova + 3584, b.iova + H_PAGE, &e));
	REQUIRE_ST(e, 0);
	REQUIRE(memcmp(p + 3584, want, 4096) == 0);
	REQUIRE(h_all(p, 3584, SENT) && h_all(p + 3584 + 4096, 3 * H_PAGE - 3584 - 4096, SENT));
	/* Write from an offset buffer, read back aligned. */
	h_fill(p + 1024, 1536, 2);
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_WRITE, 50, 3, b.iova + 1024, 0, &e));
	REQUIRE_ST(e, 0);
	struct h_buf r = h_alloc(&c->arena, H_PAGE, H_PAGE);
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 50, 3, r.iova, 0, &e));
	REQUIRE_ST(e, 0);
	REQUIRE(memcmp(r.va, p + 1024, 1536) == 0);
	return 0;
}

TEST_CASE(prp2_data)
{
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	if (setup(&c, &q, 5, 9))
		return 1;
	uint8_t want[8192];
	if (put(&q, 0, 8192, 3, want))
		return 1;
	/* PRP2 points to a page that is not next to PRP1's page: the
	 * controller must follow PRP2, not assume contiguity. */
	struct h_buf b = h_alloc(&c->arena, 4 * H_PAGE, H_PAGE);
	uint8_t *p = b.va;
	memset(p, SENT, 4 * H_PAGE);
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 0, 16, b.iova, b.iova + 3 * H_PAGE, &e));
	REQUIRE_ST(e, 0);
	REQUIRE(memcmp(p, want, 4096) == 0);
	REQUIRE(memcmp(p + 3 * H_PAGE, want + 4096, 4096) == 0);
	REQUIRE(h_all(p + H_PAGE, 2 * H_PAGE, SENT));
	/* Same for a write: gather from the two pages. */
	h_fill(p, H_PAGE, 4);
	h_fill(p + 3 * H_PAGE, H_PAGE, 5);
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_WRITE, 100, 16, b.iova + 3 * H_PAGE, b.iova, &e));
	REQUIRE_ST(e, 0);
	struct h_buf r = h_alloc(&c->arena, 2 * H_PAGE, H_PAGE);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, 100, 16, r.iova, 8192, &e));
	REQUIRE_ST(e, 0);
	REQUIRE(memcmp(r.va, p + 3 * H_PAGE, 4096) == 0);
	REQUIRE(memcmp((uint8_t *)r.va + 4096, p, 4096) == 0);
	return 0;
}

TEST_CASE(prp_list)
{
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	if (setup(&c, &q, 5, 9))
		return 1;
	enum { NP = 16 };
	static uint8_t want[NP * 4096];
	if (put(&q, 0, sizeof(want), 6, want))
		return 1;
	/* PRP1 = page 0, list of 15 entries in reverse page order. */
	struct h_buf b = h_alloc(&c->arena, NP * H_PAGE, H_PAGE);
	struct h_buf l = h_alloc(&c->arena, H_PAGE, H_PAGE);
	uint8_t *p = b.va;
	uint64_t *ent = l.va;
	memset(p, SENT, NP * H_PAGE);
	for (int i = 1; i < NP; i++)
		ent[i - 1] = b.iova + (uint64_t)(NP - i) * H_PAGE;
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 0, NP * 8, b.iova, l.iova, &e));
	REQUIRE_ST(e, 0);
	REQUIRE(memcmp(p, want, 4096) == 0);
	for (int i = 1; i < NP; i++)
		REQUIRE(memcmp(p + (size_t)(NP - i) * H_PAGE, want + (size_t)i * 4096, 4096) == 0, "chunk %d", i);

	/* PRP1 with an offset plus a list (built by the harness). */
	struct h_buf r = h_alloc(&c->arena, (NP + 1) * H_PAGE, H_PAGE);
	memset(r.va, SENT, (NP + 1) * H_PAGE);
	uint64_t prp1, prp2;
	int pages = h_prp_build(r.iova + 512, sizeof(want), l.va, l.iova, H_PAGE, NULL, &prp1, &prp2);
	REQUIRE_EQ(pages, 1);
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 0, NP * 8, prp1, prp2, &e));
	REQUIRE_ST(e, 0);
	REQUIRE(memcmp((uint8_t *)r.va + 512, want, sizeof(want)) == 0);
	REQUIRE(h_all(r.va, 512, SENT));
	REQUIRE(h_all((uint8_t *)r.va + 512 + sizeof(want), H_PAGE - 512, SENT));
	return 0;
}

TEST_CASE(prp_list_offset)
{
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	if (setup(&c, &q, 5, 9))
		return 1;
	static uint8_t want[12 * 4096];
	if (put(&q, 200, sizeof(want), 7, want))
		return 1;
	struct h_buf b = h_alloc(&c->arena, sizeof(want), H_PAGE);
	struct h_buf l = h_alloc(&c->arena, H_PAGE, H_PAGE);
	memset(l.va, 0xff, H_PAGE); /* garbage before the list start */
	struct h_prp_knobs k = { .list_offset = 2048 };
	uint64_t prp1, prp2;
	REQUIRE_EQ(h_prp_build(b.iova, sizeof(want), l.va, l.iova, H_PAGE, &k, &prp1, &prp2), 1);
	REQUIRE_EQ(prp2 & (H_PAGE - 1), 2048);
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 200, 96, prp1, prp2, &e));
	REQUIRE_ST(e, 0);
	REQUIRE(memcmp(b.va, want, sizeof(want)) == 0);
	return 0;
}

TEST_CASE(prp_chain_small)
{
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	if (setup(&c, &q, 5, 9))
		return 1;
	static uint8_t want[32 * 4096];
	if (put(&q, 0, sizeof(want), 8, want))
		return 1;
	/* The first list starts 24 bytes before the end of its page: two data
	 * entries and a chain pointer; 29 more entries on the next list page. */
	struct h_buf b = h_alloc(&c->arena, sizeof(want), H_PAGE);
	struct h_buf l = h_alloc(&c->arena, 2 * H_PAGE, H_PAGE);
	struct h_prp_knobs k = { .list_offset = H_PAGE - 24 };
	uint64_t prp1, prp2;
	REQUIRE_EQ(h_prp_build(b.iova, sizeof(want), l.va, l.iova, l.len, &k, &prp1, &prp2), 2);
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 0, 256, prp1, prp2, &e));
	REQUIRE_ST(e, 0);
	REQUIRE(memcmp(b.va, want, sizeof(want)) == 0);
	/* And a write through the same structure. */
	h_fill(b.va, sizeof(want), 9);
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_WRITE, 1000, 256, prp1, prp2, &e));
	REQUIRE_ST(e, 0);
	struct h_buf r = h_alloc(&c->arena, sizeof(want), H_PAGE);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, 1000, 256, r.iova, sizeof(want), &e));
	REQUIRE_ST(e, 0);
	REQUIRE(memcmp(r.va, b.va, sizeof(want)) == 0);
	return 0;
}

/* Big transfers over several list pages. 4 KiB blocks; MDTS 0 = no limit. */
static int chain_big(struct h_qp *q, uint32_t pages, int expect_lists)
{
	struct h_ctrl *c = q->c;
	struct gpunvme_cqe e;
	size_t len = (size_t)pages * H_PAGE, mark = c->arena.used;
	struct h_buf w = h_alloc(&c->arena, len, H_PAGE), r = h_alloc(&c->arena, len, H_PAGE);
	struct h_buf l = h_alloc(&c->arena, 8 * H_PAGE, H_PAGE);
	uint64_t prp1, prp2;
	h_fill(w.va, len, pages);
	REQUIRE_EQ(h_prp_build(w.iova, len, l.va, l.iova, l.len, NULL, &prp1, &prp2), expect_lists);
	struct gpunvme_sqe s;
	h_io_sqe(&s, GPUNVME_CMD_WRITE, 1, 7, pages);
	s.prp1 = prp1;
	s.prp2 = prp2;
	REQUIRE_OK(h_cmd(q, &s, &e));
	REQUIRE_ST(e, 0);
	memset(r.va, SENT, len);
	REQUIRE_EQ(h_prp_build(r.iova, len, l.va, l.iova, l.len, NULL, &prp1, &prp2), expect_lists);
	h_io_sqe(&s, GPUNVME_CMD_READ, 1, 7, pages);
	s.prp1 = prp1;
	s.prp2 = prp2;
	REQUIRE_OK(h_cmd(q, &s, &e));
	REQUIRE_ST(e, 0);
	REQUIRE(memcmp(w.va, r.va, len) == 0, "%u-page transfer: data mismatch", pages);
	/* Spot checks with single-page reads: data sits at the right LBAs. */
	struct h_buf one = h_alloc(&c->arena, H_PAGE, H_PAGE);
	uint32_t probe[] = { 0, 1, 510, 511, 512, 1022, 1023, pages - 1 };
	for (size_t i = 0; i < sizeof(probe) / sizeof(probe[0]); i++) {
		if (probe[i] >= pages)
			continue;
		REQUIRE_OK(h_io(q, GPUNVME_CMD_READ, 1, 7 + probe[i], 1, one.iova, H_PAGE, &e));
		REQUIRE_ST(e, 0);
		REQUIRE(memcmp(one.va, (uint8_t *)w.va + (size_t)probe[i] * H_PAGE, H_PAGE) == 0, "page %u", probe[i]);
	}
	c->arena.used = mark;
	return 0;
}

TEST_CASE(prp_chain_big)
{
	struct h_ctrl *c;
	struct h_qp q;
	if (setup(&c, &q, 0, 12))
		return 1;
	/* 1024 pages: PRP1 + 1023 entries = 511 + chain, then exactly 512 (a
	 * full last list page needs no chain pointer). */
	if (chain_big(&q, 1024, 2))
		return 1;
	/* 1600 pages: 511 + 511 + 511 + 66 entries over 4 list pages. */
	if (chain_big(&q, 1600, 4))
		return 1;
	/* 1025 pages: 511 + chain, 511 + chain, 1. */
	return chain_big(&q, 1025, 3);
}

TEST_CASE(prp_misaligned_prp2)
{
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	if (setup(&c, &q, 5, 9))
		return 1;
	struct h_buf b = h_alloc(&c->arena, 2 * H_PAGE, H_PAGE);
	/* §4.3: PRP2 as a data pointer has offset 0. */
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 0, 16, b.iova, b.iova + H_PAGE + 8, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_PRP_OFFSET));
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_WRITE, 0, 16, b.iova, b.iova + H_PAGE + 512, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_PRP_OFFSET));
	/* Offset PRP1 + misaligned PRP2 too. */
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 0, 2, b.iova + 3584, b.iova + H_PAGE + 0x800, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_PRP_OFFSET));
	return 0;
}

TEST_CASE(prp_misaligned_entry)
{
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	if (setup(&c, &q, 5, 9))
		return 1;
	struct h_buf b = h_alloc(&c->arena, 8 * H_PAGE, H_PAGE), l = h_alloc(&c->arena, H_PAGE, H_PAGE);
	struct h_prp_knobs k = { .bad_entry = 3, .bad_entry_add = 0x200 };
	uint64_t prp1, prp2;
	REQUIRE_EQ(h_prp_build(b.iova, 8 * H_PAGE, l.va, l.iova, H_PAGE, &k, &prp1, &prp2), 1);
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 0, 64, prp1, prp2, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_PRP_OFFSET));
	/* Last entry. */
	k.bad_entry = 7;
	k.bad_entry_add = 8;
	REQUIRE_EQ(h_prp_build(b.iova, 8 * H_PAGE, l.va, l.iova, H_PAGE, &k, &prp1, &prp2), 1);
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_WRITE, 0, 64, prp1, prp2, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_PRP_OFFSET));
	return 0;
}

TEST_CASE(prp_misaligned_chain)
{
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	if (setup(&c, &q, 5, 9))
		return 1;
	struct h_buf b = h_alloc(&c->arena, 8 * H_PAGE, H_PAGE), l = h_alloc(&c->arena, 2 * H_PAGE, H_PAGE);
	/* The list pointer in PRP2 may carry an offset, but the chain pointer
	 * to the next list page must not (docs/emulator.md, §4.3). */
	struct h_prp_knobs k = { .list_offset = H_PAGE - 24, .chain_add = 8 };
	uint64_t prp1, prp2;
	REQUIRE_EQ(h_prp_build(b.iova, 8 * H_PAGE, l.va, l.iova, l.len, &k, &prp1, &prp2), 2);
	/* The chain target is page + 8: make it a valid-looking list so only the
	 * alignment is wrong. */
	uint64_t *next = (uint64_t *)(void *)((uint8_t *)l.va + H_PAGE);
	memmove(next + 1, next, 8 * 5);
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 0, 64, prp1, prp2, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_PRP_OFFSET));
	/* Without the knob the same layout works. */
	k.chain_add = 0;
	REQUIRE_EQ(h_prp_build(b.iova, 8 * H_PAGE, l.va, l.iova, l.len, &k, &prp1, &prp2), 2);
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 0, 64, prp1, prp2, &e));
	REQUIRE_ST(e, 0);
	return 0;
}

TEST_CASE(prp_unmapped)
{
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	if (setup(&c, &q, 5, 9))
		return 1;
	uint64_t end = c->arena.iova + c->arena.len; /* first unmapped IOVA */
	uint64_t last = end - H_PAGE;                /* last mapped page */
	/* Past the end: the guard page behind the arena would fault if the
	 * controller translated this address onto host memory. */
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 0, 1, end, 0, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_DATA_XFER_ERROR));
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_WRITE, 0, 1, end, 0, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_DATA_XFER_ERROR));
	/* Before the start. */
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 0, 1, c->arena.iova - H_PAGE, 0, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_DATA_XFER_ERROR));
	/* PRP1 at the end of the last page crossing into the unmapped page. */
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 0, 2, end - 512, end, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_DATA_XFER_ERROR));
	/* PRP2 data pointer unmapped. */
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 0, 16, last, end, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_DATA_XFER_ERROR));
	/* PRP list pointer unmapped. */
	struct h_buf b = h_alloc(&c->arena, 4 * H_PAGE, H_PAGE), l = h_alloc(&c->arena, H_PAGE, H_PAGE);
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 0, 32, b.iova, end + H_PAGE, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_DATA_XFER_ERROR));
	/* A list entry unmapped. */
	uint64_t *ent = l.va;
	ent[0] = b.iova + H_PAGE;
	ent[1] = end;
	ent[2] = b.iova + 3 * H_PAGE;
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 0, 32, b.iova, l.iova, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_DATA_XFER_ERROR));
	/* The same list with the entry fixed works: the queue is fine. */
	ent[1] = b.iova + 2 * H_PAGE;
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 0, 32, b.iova, l.iova, &e));
	REQUIRE_ST(e, 0);
	return 0;
}

/* One read past the arena, with stderr in a file: what the emulator said. */
static int said_for_unmapped(int *said, char *out, size_t outlen)
{
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	if (setup(&c, &q, 5, 9))
		return 1;
	const uint64_t end = c->arena.iova + c->arena.len;
	char path[] = "/tmp/gpunvme-said.XXXXXX";
	int fd = mkstemp(path);
	REQUIRE(fd >= 0);
	unlink(path);
	fflush(stderr);
	int saved = dup(2);
	REQUIRE(saved >= 0 && dup2(fd, 2) == 2);
	/* the worker writes its line before it posts the completion this waits for */
	int rc = raw_rw(&q, GPUNVME_CMD_READ, 0, 1, end, 0, &e);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	REQUIRE_OK(rc);
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_DATA_XFER_ERROR));
	ssize_t n = pread(fd, out, outlen - 1, 0);
	close(fd);
	out[n > 0 ? n : 0] = 0;
	*said = strstr(out, "gpunvme-emu: data transfer error") != NULL;
	char want[96];
	snprintf(want, sizeof(want), "in no registered region, address 0x%llx,", (unsigned long long)end);
	if (*said)
		CHECK(strstr(out, want), "stderr: \"%s\", without \"%s\"", out, want);
	h_ctrl_close(c);
	return 0;
}

/* GPUNVME_EMU_ERRORS=1 (read at open) says a data transfer error's cause;
 * unset, nothing is said (the fault tests cause these on purpose) */
TEST_CASE(prp_unmapped_said)
{
	char out[1024];
	int said = 0;
	setenv("GPUNVME_EMU_ERRORS", "1", 1);
	int rc = said_for_unmapped(&said, out, sizeof(out));
	unsetenv("GPUNVME_EMU_ERRORS");
	if (rc)
		return 1;
	CHECK(said, "GPUNVME_EMU_ERRORS=1: nothing said on stderr (\"%s\")", out);
	if (said_for_unmapped(&said, out, sizeof(out)))
		return 1;
	CHECK(!said, "unset: the cause was said anyway (\"%s\")", out);
	return 0;
}

TEST_CASE(prp_region_bounds)
{
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	if (setup(&c, &q, 5, 9))
		return 1;
	uint8_t want[8192];
	if (put(&q, 0, 8192, 10, want))
		return 1;
	/* Host memory of 3 pages, sentinel filled; only the first 6000 bytes are
	 * mapped (length need not be page aligned). */
	const uint64_t X = 0x2000000000ull;
	size_t ml = 3 * H_PAGE;
	uint8_t *m = mmap(NULL, ml, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(m != MAP_FAILED);
	memset(m, SENT, ml);
	int rc = gpunvme_emu_dma_map(c->emu, X, m, 6000);
	if (rc) {
		munmap(m, ml);
		REQUIRE_OK(rc);
	}
	int fail = 0;
	/* Second page only partly mapped. */
	raw_rw(&q, GPUNVME_CMD_READ, 0, 16, X, X + H_PAGE, &e);
	if ((h_st(&e) & H_MASK_SC_DNR) != H_DNR(GPUNVME_SC_DATA_XFER_ERROR)) {
		fprintf(stderr, "read across the region end: status 0x%x\n", h_st(&e));
		fail = 1;
	}
	raw_rw(&q, GPUNVME_CMD_READ, 0, 8, X + H_PAGE, 0, &e);
	if ((h_st(&e) & H_MASK_SC_DNR) != H_DNR(GPUNVME_SC_DATA_XFER_ERROR)) {
		fprintf(stderr, "read into a partly mapped page: status 0x%x\n", h_st(&e));
		fail = 1;
	}
	/* Inside the mapping is fine: 1 block at X + 5000 ends at 5512. */
	raw_rw(&q, GPUNVME_CMD_READ, 0, 1, X + 5000, 0, &e);
	if (h_st(&e) != 0 || memcmp(m + 5000, want, 512) != 0) {
		fprintf(stderr, "read inside the mapping: status 0x%x\n", h_st(&e));
		fail = 1;
	}
	int untouched = h_all(m + 6000, ml - 6000, SENT);
	gpunvme_emu_dma_unmap(c->emu, X);
	munmap(m, ml);
	REQUIRE(untouched, "memory beyond the mapped 6000 bytes was written");
	REQUIRE(!fail);

	/* Two regions adjacent in IOVA space, far apart in host memory. */
	struct h_buf b = h_alloc(&c->arena, 3 * H_PAGE, H_PAGE);
	uint8_t *p = b.va;
	memset(p, SENT, 3 * H_PAGE);
	REQUIRE_OK(gpunvme_emu_dma_map(c->emu, X, p, H_PAGE));
	REQUIRE_OK(gpunvme_emu_dma_map(c->emu, X + H_PAGE, p + 2 * H_PAGE, H_PAGE));
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 0, 16, X, X + H_PAGE, &e));
	REQUIRE_ST(e, 0);
	REQUIRE(memcmp(p, want, 4096) == 0);
	REQUIRE(memcmp(p + 2 * H_PAGE, want + 4096, 4096) == 0);
	REQUIRE(h_all(p + H_PAGE, H_PAGE, SENT));
	REQUIRE_OK(gpunvme_emu_dma_unmap(c->emu, X));
	REQUIRE_OK(gpunvme_emu_dma_unmap(c->emu, X + H_PAGE));
	/* Overlapping maps are refused, unknown unmaps too. */
	REQUIRE_EQ(gpunvme_emu_dma_map(c->emu, c->arena.iova + H_PAGE, p, H_PAGE), -EEXIST);
	REQUIRE_EQ(gpunvme_emu_dma_unmap(c->emu, X), -ENOENT);
	/* After unmap the address is gone. */
	REQUIRE_OK(raw_rw(&q, GPUNVME_CMD_READ, 0, 1, X, 0, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_DATA_XFER_ERROR));
	return 0;
}

int main(int argc, char **argv) { return check_main(argc, argv); }
