/* SPDX-License-Identifier: BSD-2-Clause */
/* Controller registers and the enable / disable / shutdown handshakes
 * (NVMe 1.4 §3.1, §7.6). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpunvme/gpunvme.h"
#include "harness.h"

/* One block write + read back on nsid 1 through q, checked by CRC. */
static int rw_check(struct h_ctrl *c, struct h_qp *q, uint64_t lba, uint64_t seed)
{
	struct gpunvme_cqe e;
	struct h_buf w = h_alloc(&c->arena, 8192, H_PAGE), r = h_alloc(&c->arena, 8192, H_PAGE);
	h_fill(w.va, 8192, seed);
	REQUIRE_OK(h_io(q, GPUNVME_CMD_WRITE, 1, lba, 16, w.iova, 8192, &e));
	REQUIRE_ST(e, 0);
	/* §4.6: SQID and SQHD on every entry; with one command in flight the
	 * controller has consumed everything up to our tail. */
	REQUIRE_EQ(e.sqid, q->sqid);
	REQUIRE_EQ(e.sqhd, q->sq_tail);
	REQUIRE_OK(h_io(q, GPUNVME_CMD_READ, 1, lba, 16, r.iova, 8192, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_EQ(e.sqhd, q->sq_tail);
	REQUIRE_EQ(h_crc32(0, r.va, 8192), h_crc32(0, w.va, 8192));
	return 0;
}

TEST_CASE(cap_vs)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_open(&c, &cfg, 0));
	uint64_t cap = h_rd64(c, GPUNVME_REG_CAP);
	/* Defaults from emu.h: MQES 1023, TO 20; fixed per docs/emulator.md. */
	REQUIRE_EQ(gpunvme_cap_mqes(cap), 1023);
	REQUIRE_EQ(gpunvme_cap_cqr(cap), 1);
	REQUIRE_EQ(gpunvme_cap_ams(cap), 0);
	REQUIRE_EQ(gpunvme_cap_to(cap), 20);
	REQUIRE_EQ(gpunvme_cap_dstrd(cap), 0);
	REQUIRE_EQ(gpunvme_cap_nssrs(cap), 0);
	REQUIRE(gpunvme_cap_css(cap) & GPUNVME_CAP_CSS_NVM);
	REQUIRE_EQ(gpunvme_cap_mpsmin(cap), 0);
	REQUIRE_EQ(gpunvme_cap_mpsmax(cap), 4);
	REQUIRE_EQ(gpunvme_cap_cmbs(cap), 0);
	REQUIRE_EQ(h_rd32(c, GPUNVME_REG_VS), GPUNVME_VS(1, 4, 0));
	/* Reset state (§7.3.1): CC.EN = 0, CSTS.RDY = 0, no CMB. */
	REQUIRE_EQ(h_rd32(c, GPUNVME_REG_CC), 0);
	REQUIRE_EQ(h_rd32(c, GPUNVME_REG_CSTS) & GPUNVME_CSTS_RDY, 0);
	REQUIRE_EQ(h_rd32(c, GPUNVME_REG_CMBSZ), 0);
	h_ctrl_close(c);

	/* Config values land in CAP. */
	h_cfg(&cfg);
	cfg.mqes = 255;
	cfg.cap_to = 7;
	cfg.dstrd = 2;
	REQUIRE_OK(h_ctrl_open(&c, &cfg, 0));
	cap = h_rd64(c, GPUNVME_REG_CAP);
	REQUIRE_EQ(gpunvme_cap_mqes(cap), 255);
	REQUIRE_EQ(gpunvme_cap_to(cap), 7);
	REQUIRE_EQ(gpunvme_cap_dstrd(cap), 2);
	return 0;
}

TEST_CASE(enable_disable)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_id_ctrl id;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_open(&c, &cfg, 0));
	for (int round = 0; round < 3; round++) {
		REQUIRE_OK(h_enable(c, 0));
		uint32_t csts = h_rd32(c, GPUNVME_REG_CSTS);
		REQUIRE_EQ(gpunvme_csts_rdy(csts), 1);
		REQUIRE_EQ(gpunvme_csts_cfs(csts), 0);
		REQUIRE_EQ(gpunvme_csts_shst(csts), GPUNVME_SHST_NORMAL);
		REQUIRE_OK(h_id_ctrl(c, &id));
		REQUIRE_OK(h_disable(c));
		/* EN 1 -> 0 is a controller reset: CSTS is all zero. */
		REQUIRE_OK(h_wait_reg(c, GPUNVME_REG_CSTS, 0xffffffffu, 0, H_TIMEOUT_MS));
	}
	return 0;
}

/* Write a bad configuration, expect CSTS.CFS and no RDY, then recover with
 * EN = 0 (docs/emulator.md: enable checks, as QEMU's nvme_start_ctrl). */
static int bad_enable(struct h_ctrl *c, uint32_t cc, uint32_t aqa, uint64_t asq, uint64_t acq, const char *what)
{
	h_wr32(c, GPUNVME_REG_AQA, aqa);
	h_wr64(c, GPUNVME_REG_ASQ, asq);
	h_wr64(c, GPUNVME_REG_ACQ, acq);
	h_wr32(c, GPUNVME_REG_CC, cc | GPUNVME_CC_EN);
	int rc = h_wait_reg(c, GPUNVME_REG_CSTS, GPUNVME_CSTS_CFS, GPUNVME_CSTS_CFS, H_TIMEOUT_MS);
	REQUIRE(rc == 0, "%s: CSTS.CFS not set (CSTS 0x%x)", what, h_rd32(c, GPUNVME_REG_CSTS));
	h_sleep_ms(20);
	REQUIRE(!gpunvme_csts_rdy(h_rd32(c, GPUNVME_REG_CSTS)), "%s: CSTS.RDY set on a failed enable", what);
	h_wr32(c, GPUNVME_REG_CC, cc & ~GPUNVME_CC_EN);
	rc = h_wait_reg(c, GPUNVME_REG_CSTS, 0xffffffffu, 0, H_TIMEOUT_MS);
	REQUIRE(rc == 0, "%s: CSTS not cleared by EN=0 (CSTS 0x%x)", what, h_rd32(c, GPUNVME_REG_CSTS));
	return 0;
}

static int good_after_bad(struct h_ctrl *c)
{
	struct gpunvme_id_ctrl id;
	REQUIRE_OK(h_enable(c, 0));
	REQUIRE_OK(h_id_ctrl(c, &id));
	return 0;
}

TEST_CASE(enable_bad_cc)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_open(&c, &cfg, 0));
	struct h_buf q = h_alloc(&c->arena, 2 * H_PAGE, H_PAGE);
	uint32_t aqa = GPUNVME_AQA(31, 31);
	uint32_t good = H_CC_DEFAULT;
	struct {
		uint32_t cc;
		const char *what;
	} v[] = {
		{ (good & ~(0xfu << GPUNVME_CC_IOSQES_SHIFT)) | (5u << GPUNVME_CC_IOSQES_SHIFT), "IOSQES=5" },
		{ (good & ~(0xfu << GPUNVME_CC_IOCQES_SHIFT)) | (3u << GPUNVME_CC_IOCQES_SHIFT), "IOCQES=3" },
		{ good | (5u << GPUNVME_CC_MPS_SHIFT), "MPS=5 > MPSMAX" },
		{ good | (1u << GPUNVME_CC_CSS_SHIFT), "CSS=1 (reserved)" },
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		if (bad_enable(c, v[i].cc, aqa, q.iova, q.iova + H_PAGE, v[i].what))
			return 1;
	return good_after_bad(c);
}

TEST_CASE(enable_bad_aqa)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_open(&c, &cfg, 0));
	struct h_buf q = h_alloc(&c->arena, 2 * H_PAGE, H_PAGE);
	if (bad_enable(c, H_CC_DEFAULT, GPUNVME_AQA(0, 31), q.iova, q.iova + H_PAGE, "ASQS=0"))
		return 1;
	if (bad_enable(c, H_CC_DEFAULT, GPUNVME_AQA(31, 0), q.iova, q.iova + H_PAGE, "ACQS=0"))
		return 1;
	return good_after_bad(c);
}

TEST_CASE(enable_misaligned_asq)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_open(&c, &cfg, 0));
	struct h_buf q = h_alloc(&c->arena, 3 * H_PAGE, H_PAGE);
	/* §3.1.9/§3.1.10: ASQ/ACQ bits 11:0 are reserved (page aligned). */
	if (bad_enable(c, H_CC_DEFAULT, GPUNVME_AQA(31, 31), q.iova + 0x200, q.iova + 2 * H_PAGE, "ASQ+0x200"))
		return 1;
	if (bad_enable(c, H_CC_DEFAULT, GPUNVME_AQA(31, 31), q.iova, q.iova + 2 * H_PAGE + 0x10, "ACQ+0x10"))
		return 1;
	return good_after_bad(c);
}

TEST_CASE(shutdown)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct h_qp q;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	if (rw_check(c, &q, 0, 1))
		return 1;
	uint32_t cc = h_rd32(c, GPUNVME_REG_CC);
	h_wr32(c, GPUNVME_REG_CC, cc | (GPUNVME_CC_SHN_NORMAL << GPUNVME_CC_SHN_SHIFT));
	/* §7.6.2: SHST goes 01 (occurring) then 10 (complete); 11 is reserved. */
	uint64_t end = h_now_ms() + H_TIMEOUT_MS;
	uint32_t shst;
	for (;;) {
		shst = gpunvme_csts_shst(h_rd32(c, GPUNVME_REG_CSTS));
		REQUIRE(shst != 3, "CSTS.SHST = 11b (reserved)");
		if (shst == GPUNVME_SHST_COMPLETE)
			break;
		REQUIRE(h_now_ms() < end, "shutdown did not complete: SHST=%u", shst);
		h_sleep_ms(1);
	}
	/* After shutdown the host resets the controller and may start it again. */
	REQUIRE_OK(h_disable(c));
	REQUIRE_OK(h_wait_reg(c, GPUNVME_REG_CSTS, 0xffffffffu, 0, H_TIMEOUT_MS));
	REQUIRE_OK(h_enable(c, 0));
	REQUIRE_EQ(gpunvme_csts_shst(h_rd32(c, GPUNVME_REG_CSTS)), GPUNVME_SHST_NORMAL);
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	return rw_check(c, &q, 8, 2);
}

TEST_CASE(disable_deletes_queues)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	struct h_buf a = h_alloc(&c->arena, H_PAGE, H_PAGE), b = h_alloc(&c->arena, H_PAGE, H_PAGE);
	h_fill(a.va, H_PAGE, 11);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, 100, 8, a.iova, H_PAGE, &e));
	REQUIRE_ST(e, 0);

	/* §7.6.2 / §3.1.5: EN 1 -> 0 deletes every I/O queue. */
	REQUIRE_OK(h_disable(c));
	REQUIRE_OK(h_enable(c, 0));
	int aer = h_aer_submit(c);
	REQUIRE(aer >= 0);

	/* The host still rings the old queue: a Write that would overwrite
	 * LBA 100. A non-existent queue must not be fetched. */
	memset(q.cq, 0, q.cq_entries * sizeof(struct gpunvme_cqe));
	h_fill(b.va, H_PAGE, 22);
	struct gpunvme_sqe s;
	h_io_sqe(&s, GPUNVME_CMD_WRITE, 1, 100, 8);
	s.prp1 = b.iova;
	s.cid = 0x77;
	REQUIRE_OK(h_sq_push(&q, &s));
	h_sq_ring(&q);
	/* ... which is a write to a doorbell of a queue that does not exist:
	 * AER type Error, info 00h Invalid Doorbell Register, log page 01h. */
	REQUIRE_OK(h_wait_cid(&c->admin, (uint16_t)aer, &e, H_TIMEOUT_MS));
	REQUIRE_ST(e, 0);
	REQUIRE_EQ(gpunvme_aer_type(e.dw0), GPUNVME_AER_TYPE_ERROR);
	REQUIRE_EQ(gpunvme_aer_info(e.dw0), GPUNVME_AER_INFO_INVALID_DB_REG);
	REQUIRE_EQ(gpunvme_aer_log(e.dw0), GPUNVME_LOG_ERROR);
	/* Doorbells of queues that do not exist are cleared by the controller. */
	REQUIRE_OK(h_wait_reg(c, gpunvme_sq_doorbell(1, c->dstrd), 0xffffffffu, 0, H_TIMEOUT_MS));
	h_sleep_ms(100);
	REQUIRE(h_all(q.cq, q.cq_entries * sizeof(struct gpunvme_cqe), 0), "deleted CQ memory was written");

	/* Same QID again; the old data is intact. */
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	memset(b.va, 0, H_PAGE);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, 100, 8, b.iova, H_PAGE, &e));
	REQUIRE_ST(e, 0);
	REQUIRE(memcmp(a.va, b.va, H_PAGE) == 0, "a command on a deleted queue reached the media");
	return rw_check(c, &q, 0, 3);
}

TEST_CASE(ready_delay)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	h_cfg(&cfg);
	cfg.ready_delay_ms = 300;
	REQUIRE_OK(h_ctrl_open(&c, &cfg, 0));
	uint64_t t0 = h_now_ms();
	h_enable_start(c, 0);
	h_sleep_ms(100);
	uint32_t csts = h_rd32(c, GPUNVME_REG_CSTS);
	uint64_t early = h_now_ms() - t0;
	/* Only meaningful if this thread was not descheduled past the delay. */
	REQUIRE(early >= 250 || !gpunvme_csts_rdy(csts), "RDY set %llu ms after EN, delay is 300 ms",
		 (unsigned long long)early);
	REQUIRE_OK(h_wait_reg(c, GPUNVME_REG_CSTS, GPUNVME_CSTS_RDY, GPUNVME_CSTS_RDY, H_TIMEOUT_MS));
	uint64_t dt = h_now_ms() - t0;
	REQUIRE(dt >= 295, "RDY after %llu ms, expected >= 300", (unsigned long long)dt);
	/* Disable is not delayed into a hang, and re-enable is delayed again. */
	REQUIRE_OK(h_disable(c));
	t0 = h_now_ms();
	REQUIRE_OK(h_enable(c, 0));
	dt = h_now_ms() - t0;
	REQUIRE(dt >= 295, "second RDY after %llu ms, expected >= 300", (unsigned long long)dt);
	return 0;
}

static int two_queue_io(struct gpunvme_emu_config *cfg)
{
	struct h_ctrl *c;
	struct h_qp q1, q2;
	REQUIRE_OK(h_ctrl_up(&c, cfg));
	REQUIRE_EQ(gpunvme_cap_dstrd(c->cap), cfg->dstrd);
	REQUIRE_OK(h_qp_create(c, &q1, 1, 32));
	REQUIRE_OK(h_qp_create(c, &q2, 2, 32));
	for (int i = 0; i < 40; i++) { /* more than a queue's worth: wraps both */
		if (rw_check(c, i & 1 ? &q2 : &q1, (uint64_t)i * 16, 100 + (uint64_t)i))
			return 1;
		c->arena.used -= 16384; /* reuse the two buffers of rw_check */
	}
	return 0;
}

TEST_CASE(dstrd0_io)
{
	struct gpunvme_emu_config cfg;
	h_cfg(&cfg);
	cfg.dstrd = 0;
	return two_queue_io(&cfg);
}

TEST_CASE(dstrd1_io)
{
	struct gpunvme_emu_config cfg;
	h_cfg(&cfg);
	cfg.dstrd = 1;
	return two_queue_io(&cfg);
}

TEST_CASE(threadless)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_open(&c, &cfg, 0));
	REQUIRE_EQ(gpunvme_emu_poll(c->emu), -EINVAL); /* threaded mode */
	h_ctrl_close(c);

	h_cfg(&cfg);
	cfg.workers = 0;
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	struct gpunvme_id_ctrl id;
	REQUIRE_OK(h_id_ctrl(c, &id));
	struct h_qp q;
	REQUIRE_OK(h_qp_create(c, &q, 1, 8));
	for (int i = 0; i < 20; i++) {
		if (rw_check(c, &q, (uint64_t)i * 16, 7 + (uint64_t)i))
			return 1;
		c->arena.used -= 16384;
	}
	/* Nothing happens without poll(): a submitted command stays pending. */
	struct gpunvme_sqe s;
	h_io_sqe(&s, GPUNVME_CMD_FLUSH, 1, 0, 0);
	s.cid = 500;
	REQUIRE_OK(h_sq_push(&q, &s));
	h_sq_ring(&q);
	h_sleep_ms(50);
	struct gpunvme_cqe e;
	REQUIRE_EQ(h_cq_peek(&q, &e), 0);
	REQUIRE(gpunvme_emu_poll(c->emu) >= 1);
	REQUIRE_OK(h_wait_cid(&q, 500, &e, H_TIMEOUT_MS));
	REQUIRE_ST(e, 0);
	return 0;
}

TEST_CASE(readonly_regs)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	uint32_t vs = h_rd32(c, GPUNVME_REG_VS);
	uint32_t cap_lo = h_rd32(c, GPUNVME_REG_CAP);
	/* CSTS, CAP, VS are read-only to the host (§3.1); here BAR0 is plain
	 * memory, so the emulator restores them. */
	h_wr32(c, GPUNVME_REG_CSTS, 0);
	h_wr32(c, GPUNVME_REG_VS, 0);
	h_wr32(c, GPUNVME_REG_CAP, 0);
	REQUIRE_OK(h_wait_reg(c, GPUNVME_REG_CSTS, GPUNVME_CSTS_RDY, GPUNVME_CSTS_RDY, H_TIMEOUT_MS));
	REQUIRE_OK(h_wait_reg(c, GPUNVME_REG_VS, 0xffffffffu, vs, H_TIMEOUT_MS));
	REQUIRE_OK(h_wait_reg(c, GPUNVME_REG_CAP, 0xffffffffu, cap_lo, H_TIMEOUT_MS));
	struct gpunvme_id_ctrl id;
	REQUIRE_OK(h_id_ctrl(c, &id));
	return 0;
}

TEST_CASE(reenable_cycles)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_open(&c, &cfg, 0));
	struct h_buf bufs = h_alloc(&c->arena, 16384, H_PAGE);
	struct h_qp q;
	for (int i = 0; i < 10; i++) {
		REQUIRE_OK(h_enable(c, 0));
		size_t mark = c->arena.used;
		REQUIRE_OK(h_qp_create(c, &q, (uint16_t)(1 + i % 3), 8));
		size_t save = c->arena.used;
		c->arena.used = (size_t)((uint8_t *)bufs.va - c->arena.base);
		if (rw_check(c, &q, (uint64_t)i * 16, 50 + (uint64_t)i))
			return 1;
		c->arena.used = save;
		/* Leave the queues alive: disable must tear them down. */
		REQUIRE_OK(h_disable(c));
		c->arena.used = mark;
	}
	return 0;
}

TEST_CASE(admin_queue_wrap)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_open(&c, &cfg, 0));
	/* A 4-entry admin queue pair (AQA 3/3): 25 commands wrap it several
	 * times, so the phase tag flips (§4.6) and SQHD wraps. */
	REQUIRE_OK(h_enable(c, 4));
	for (int i = 0; i < 25; i++) {
		REQUIRE_OK(h_get_features(c, GPUNVME_FEAT_ARBITRATION, GPUNVME_FEAT_SEL_CURRENT, 0, &e));
		REQUIRE_ST(e, 0);
		REQUIRE_EQ(e.sqid, 0);
		REQUIRE_EQ(e.sqhd, c->admin.sq_tail);
	}
	REQUIRE_EQ(c->admin.phase, (25 / 4) % 2 == 0 ? 1 : 0);
	return 0;
}

TEST_CASE(shared_cq)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	struct h_qp q1;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_qp_create(c, &q1, 1, 16));
	/* SQ 2 also completes into CQ 1 (§4.1: many SQs may share a CQ). */
	struct h_qp q2 = q1;
	struct h_buf m = h_alloc(&c->arena, H_PAGE, H_PAGE);
	q2.sqid = 2;
	q2.sq = m.va;
	q2.sq_iova = m.iova;
	q2.sq_tail = q2.sq_head = 0;
	REQUIRE_OK(h_create_sq(c, 2, 15, m.iova, GPUNVME_Q_PC, 1, &e));
	REQUIRE_ST(e, 0);
	struct h_buf b = h_alloc(&c->arena, 16 * 512, H_PAGE);
	for (int round = 0; round < 4; round++) {
		for (int i = 0; i < 8; i++) {
			struct gpunvme_sqe s;
			h_io_sqe(&s, GPUNVME_CMD_WRITE, 1, (uint64_t)i, 1);
			s.prp1 = b.iova + (uint64_t)i * 512;
			s.cid = (uint16_t)(i < 4 ? 100 + i : 200 + i);
			REQUIRE_OK(h_sq_push(i < 4 ? &q1 : &q2, &s));
		}
		h_sq_ring(&q1);
		h_sq_ring(&q2);
		unsigned seen = 0;
		for (int i = 0; i < 8; i++) {
			REQUIRE_OK(h_cq_wait(&q1, &e, H_TIMEOUT_MS));
			REQUIRE_ST(e, 0);
			REQUIRE((e.cid >= 100 && e.cid < 104 && e.sqid == 1) || (e.cid >= 204 && e.cid < 208 && e.sqid == 2),
				 "cid %u arrived with sqid %u", e.cid, e.sqid);
			unsigned bit = 1u << (e.cid % 100);
			REQUIRE(!(seen & bit), "cid %u twice", e.cid);
			seen |= bit;
			if (e.sqid == 2)
				q2.sq_head = e.sqhd;
		}
		REQUIRE_EQ(q2.sq_head, q2.sq_tail);
	}
	return 0;
}

TEST_CASE(config_parse)
{
	struct gpunvme_emu_config cfg;
	const char *err = NULL;
	gpunvme_emu_config_init(&cfg);
	/* Defaults documented in emu.h. */
	REQUIRE_EQ(cfg.nr_ns, 1);
	REQUIRE_EQ(cfg.ns[0].backing, GPUNVME_EMU_BACK_RAM);
	REQUIRE_EQ(cfg.ns[0].size, 64u << 20);
	REQUIRE_EQ(cfg.ns[0].lba_shift, 9);
	REQUIRE_EQ(cfg.workers, 1);
	REQUIRE_EQ(cfg.mqes, 1023);
	REQUIRE_EQ(cfg.mdts, 5);
	REQUIRE_EQ(cfg.max_ioq, 64);
	REQUIRE_OK(gpunvme_emu_config_parse(&cfg, "ram:1G?lbads=12&nsq=8&mqes=255&mdts=6&dstrd=1&workers=3&ready_ms=7", &err));
	REQUIRE_EQ(cfg.ns[0].backing, GPUNVME_EMU_BACK_RAM);
	REQUIRE_EQ(cfg.ns[0].size, 1ull << 30);
	REQUIRE_EQ(cfg.ns[0].lba_shift, 12);
	REQUIRE_EQ(cfg.max_ioq, 8);
	REQUIRE_EQ(cfg.mqes, 255);
	REQUIRE_EQ(cfg.mdts, 6);
	REQUIRE_EQ(cfg.dstrd, 1);
	REQUIRE_EQ(cfg.workers, 3);
	REQUIRE_EQ(cfg.ready_delay_ms, 7);
	gpunvme_emu_config_init(&cfg);
	REQUIRE_OK(gpunvme_emu_config_parse(&cfg, "null:4T?ns=ram:16M,null:2G&latency_us=50&iops=1000", &err));
	REQUIRE_EQ(cfg.nr_ns, 3);
	REQUIRE_EQ(cfg.ns[0].backing, GPUNVME_EMU_BACK_NULL);
	REQUIRE_EQ(cfg.ns[0].size, 4ull << 40);
	REQUIRE_EQ(cfg.ns[1].backing, GPUNVME_EMU_BACK_RAM);
	REQUIRE_EQ(cfg.ns[1].size, 16u << 20);
	REQUIRE_EQ(cfg.ns[2].backing, GPUNVME_EMU_BACK_NULL);
	REQUIRE_EQ(cfg.ns[2].size, 2ull << 30);
	REQUIRE_EQ(cfg.model.latency_us, 50);
	REQUIRE_EQ(cfg.model.iops, 1000);
	gpunvme_emu_config_init(&cfg);
	REQUIRE_OK(gpunvme_emu_config_parse(&cfg, "/tmp/some-file.img?lbads=9", &err));
	REQUIRE_EQ(cfg.ns[0].backing, GPUNVME_EMU_BACK_FILE);
	REQUIRE(strcmp(cfg.ns[0].path, "/tmp/some-file.img") == 0);
	REQUIRE_EQ(cfg.ns[0].snapshot, 0);
	REQUIRE_OK(gpunvme_emu_config_parse(&cfg, "/tmp/some-file.img?snapshot=1", &err));
	REQUIRE_EQ(cfg.ns[0].snapshot, 1);
	/* workers not given: half the online CPUs, 1 to 8, with the copies in
	 * this process; three quarters, 1 to 12, with them in the DMA process
	 * (the C API's own default stays 1); given: as given, either way */
	unsetenv("GPUNVME_EMU_DMA"); /* it would win over the choice below */
	const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	uint32_t want = cpus / 2 < 1 ? 1 : cpus / 2 > 8 ? 8 : (uint32_t)(cpus / 2);
	REQUIRE_EQ(cfg.workers, want);
	gpunvme_emu_set_copies(GPUNVME_EMU_COPIES_PROCESS);
	REQUIRE_OK(gpunvme_emu_config_parse(&cfg, "/tmp/some-file.img", &err));
	want = cpus * 3 / 4 < 1 ? 1 : cpus * 3 / 4 > 12 ? 12 : (uint32_t)(cpus * 3 / 4);
	REQUIRE_EQ(cfg.workers, want);
	REQUIRE_OK(gpunvme_emu_config_parse(&cfg, "/tmp/some-file.img?workers=5", &err));
	REQUIRE_EQ(cfg.workers, 5);
	gpunvme_emu_set_copies(GPUNVME_EMU_COPIES_INPROC);
	REQUIRE_OK(gpunvme_emu_config_parse(&cfg, "/tmp/some-file.img?snapshot=1", &err));
	gpunvme_emu_config_init(&cfg);
	REQUIRE_EQ(cfg.workers, 1);
	REQUIRE_OK(gpunvme_emu_config_parse(&cfg, "ram:1M?workers=1", &err));
	REQUIRE_EQ(cfg.workers, 1);
	/* decimal, even with a leading zero; stray '&'s carry nothing; a
	 * repeated option's later value wins (bench/ appends overrides) */
	REQUIRE_OK(gpunvme_emu_config_parse(&cfg, "ram:1GiB?&nsq=010&&lbads=9&lbads=12&", &err));
	REQUIRE_EQ(cfg.ns[0].size, 1ull << 30);
	REQUIRE_EQ(cfg.max_ioq, 10);
	REQUIRE_EQ(cfg.ns[0].lba_shift, 12);
	REQUIRE_OK(gpunvme_emu_config_parse(&cfg, "null:2Gi?ns=ram:4KB,null:1t&ns=ram:8k", &err));
	REQUIRE_EQ(cfg.nr_ns, 4);
	REQUIRE_EQ(cfg.ns[0].size, 2ull << 30);
	REQUIRE_EQ(cfg.ns[1].size, 4096);
	REQUIRE_EQ(cfg.ns[2].size, 1ull << 40);
	REQUIRE_EQ(cfg.ns[3].size, 8192);
	REQUIRE_OK(gpunvme_emu_config_parse(&cfg, "ram:1M?iops=1000000000&read_mbps=0&ready_ms=10000&idle_us=1", &err));
	REQUIRE_EQ(cfg.model.iops, 1000000000);
	REQUIRE_EQ(cfg.ready_delay_ms, 10000);
	static const char *bad[] = { "", "ram:", "ram:12Q", "ram:1G?bogus=1", "ram:1G?lbads", "ram:1G?lbads=10",
				     "ram:1G?mdts=x", "ram:1G?snapshot=1", "/tmp/x.img?snapshot=2" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		gpunvme_emu_config_init(&cfg);
		err = NULL;
		int rc = gpunvme_emu_config_parse(&cfg, bad[i], &err);
		REQUIRE(rc == -EINVAL, "\"%s\" -> %d", bad[i], rc);
		REQUIRE(err != NULL && err[0], "\"%s\": no error message", bad[i]);
	}
	return 0;
}

/* Every bad option value says which option, what was given and what is
 * allowed; a missing image names itself (through gpunvme_open, which also
 * creates the emulator). One row per option, and per way of getting a
 * value wrong. */
TEST_CASE(config_messages)
{
	static const struct {
		const char *uri;
		int rc;
		const char *want[3];
	} cases[] = {
		/* numeric options, out of range */
		{ "emu:ram:1M?lbads=13", -EINVAL, { "lbads", "'13'", "9 (512-byte blocks) or 12" } },
		{ "emu:ram:1M?lbads=10", -EINVAL, { "lbads", "'10'", "9 (512-byte blocks) or 12" } },
		{ "emu:ram:1M?workers=0", -EINVAL, { "workers", "'0'", "1..256" } },
		{ "emu:ram:1M?workers=257", -EINVAL, { "workers", "'257'", "1..256" } },
		{ "emu:ram:1M?nsq=100000", -EINVAL, { "nsq", "'100000'", "1..65535" } },
		{ "emu:ram:1M?nsq=0", -EINVAL, { "nsq", "'0'", "1..65535" } },
		{ "emu:ram:1M?mqes=70000", -EINVAL, { "mqes", "'70000'", "1..65535" } },
		{ "emu:ram:1M?mqes=0", -EINVAL, { "mqes", "'0'", "1..65535" } },
		{ "emu:ram:1M?vwc=2", -EINVAL, { "vwc", "'2'", "0 or 1" } },
		{ "emu:ram:1M?ready_ms=10001", -EINVAL, { "ready_ms", "'10001'", "0..10000" } },
		{ "emu:ram:1M?mdts=21", -EINVAL, { "mdts", "'21'", "0..20" } },
		{ "emu:ram:1M?dstrd=16", -EINVAL, { "dstrd", "'16'", "0..15" } },
		{ "emu:ram:1M?idle_us=0", -EINVAL, { "idle_us", "'0'", "1..1000000" } },
		{ "emu:ram:1M?idle_us=1000001", -EINVAL, { "idle_us", "'1000001'", "1..1000000" } },
		{ "emu:ram:1M?latency_us=10000001", -EINVAL, { "latency_us", "'10000001'", "0..10000000" } },
		{ "emu:ram:1M?read_mbps=99999999999", -EINVAL, { "read_mbps", "'99999999999'", "0..1000000000" } },
		{ "emu:ram:1M?write_mbps=1000000001", -EINVAL, { "write_mbps", "'1000000001'", "0..1000000000" } },
		{ "emu:ram:1M?iops=99999999999999999999999", -EINVAL, { "iops", "'99999999999999999999999'", "0..1000000000" } },
		{ "emu:ram:1M?snapshot=2", -EINVAL, { "snapshot", "'2'", "0 or 1" } },
		/* numeric options, not a decimal number: a sign, blanks, trailing
		 * garbage, hex, a size suffix, nothing */
		{ "emu:ram:1M?latency_us=-1", -EINVAL, { "latency_us", "'-1'", "decimal number 0..10000000" } },
		{ "emu:ram:1M?iops=1x", -EINVAL, { "iops", "'1x'", "decimal number 0..1000000000" } },
		{ "emu:ram:1M?write_mbps=", -EINVAL, { "write_mbps", "''", "decimal number 0..1000000000" } },
		{ "emu:ram:1M?nsq=0x10", -EINVAL, { "nsq", "'0x10'", "decimal number 1..65535" } },
		{ "emu:ram:1M?ready_ms=1K", -EINVAL, { "ready_ms", "'1K'", "decimal number 0..10000" } },
		{ "emu:ram:1M?mqes=1.5", -EINVAL, { "mqes", "'1.5'", "decimal number 1..65535" } },
		{ "emu:ram:1M?workers= 2", -EINVAL, { "workers", "' 2'", "decimal number 1..256" } },
		{ "emu:ram:1M?lbads=+12", -EINVAL, { "lbads", "'+12'", "9 (512-byte blocks) or 12" } },
		{ "emu:ram:1M?mdts=5abc", -EINVAL, { "mdts", "'5abc'", "decimal number 0..20" } },
		{ "emu:ram:1M?dstrd=-0", -EINVAL, { "dstrd", "'-0'", "decimal number 0..15" } },
		{ "emu:ram:1M?vwc=yes", -EINVAL, { "vwc", "'yes'", "0 or 1" } },
		{ "emu:ram:1M?idle_us=1e3", -EINVAL, { "idle_us", "'1e3'", "decimal number 1..1000000" } },
		{ "emu:ram:1M?read_mbps=-5", -EINVAL, { "read_mbps", "'-5'", "decimal number 0..1000000000" } },
		/* option syntax */
		{ "emu:ram:1M?nsq", -EINVAL, { "'nsq'", "no value", "key=value" } },
		{ "emu:ram:1M?=5", -EINVAL, { "'=5'", "no name", "key=value" } },
		{ "emu:ram:1M?frob=1", -EINVAL, { "'frob'", "unknown", "options are: lbads nsq mqes" } },
		{ "emu:ram:1M?LBADS=12", -EINVAL, { "'LBADS'", "lower case", "options are: lbads" } },
		{ "emu:ram:1M?nsq=4?lbads=12", -EINVAL, { "'nsq=4?lbads=12'", "first '?'", "'&'" } },
		{ "emu:ram:1M?snapshot=1", -EINVAL, { "snapshot=1", "image file", "not 'ram:1M'" } },
		/* namespaces */
		{ "emu:?lbads=12", -EINVAL, { "empty namespace", "ram:SIZE", "image file path" } },
		{ "emu:ram:0", -EINVAL, { "namespace 'ram:0'", "bad size '0'", "512M" } },
		{ "emu:ram:0x100000", -EINVAL, { "namespace 'ram:0x100000'", "bad size", "K/M/G/T" } },
		{ "emu:ram:-1M", -EINVAL, { "namespace 'ram:-1M'", "bad size", "K/M/G/T" } },
		{ "emu:null:99999999999999999999", -EINVAL, { "'null:99999999999999999999'", "bad size", "K/M/G/T" } },
		{ "emu:null:20000000T", -EINVAL, { "'null:20000000T'", "bad size", "K/M/G/T" } },
		{ "emu:ram:1000?lbads=12", -EINVAL, { "namespace 1", "1000 bytes", "multiple of 4096" } },
		{ "emu:/nonexistent/x.img", -ENOENT, { "namespace 1", "'/nonexistent/x.img'", "ram:SIZE, null:SIZE" } },
		{ "emu:ram:1M?ns=foo", -ENOENT, { "namespace 2", "'foo'", "ram:SIZE, null:SIZE or an image" } },
		{ "emu:ram:1M?ns=/nonexistent/foo.img", -ENOENT, { "namespace 2", "'/nonexistent/foo.img'", "truncate -s" } },
		{ "emu:ram:1M?ns=ram:1M?lbads=12", -EINVAL, { "ram:1M?lbads=12", "first '?'", "every namespace" } },
		{ "emu:ram:1M?ns=/tmp/x.img?lbads=12", -EINVAL, { "/tmp/x.img?lbads=12", "first '?'", "every namespace" } },
		{ "emu:ram:1M?ns=ram:", -EINVAL, { "namespace 'ram:'", "bad size", "512M" } },
		{ "emu:ram:1M?ns=null:1Q", -EINVAL, { "namespace 'null:1Q'", "bad size", "512M" } },
		{ "emu:ram:1M?ns=", -EINVAL, { "ns=", "no namespace", "ram:SIZE, null:SIZE" } },
		{ "emu:ram:1M?ns=ram:1M,", -EINVAL, { "ns=ram:1M,", "empty namespace", "ram:SIZE, null:SIZE" } },
		{ "emu:ram:1M?ns=ram:1M,,ram:1M", -EINVAL, { "ns=ram:1M,,ram:1M", "empty namespace", "NS[,NS...]" } },
		{ "emu:ram:1M?ns=ram:1M,ram:1M,ram:1M,ram:1M,ram:1M,ram:1M,ram:1M,ram:1M,ram:1M,ram:1M,ram:1M,ram:1M,"
		  "ram:1M,ram:1M,ram:1M,ram:1M",
		  -EINVAL, { "ns", "more than 16 namespaces", "at most 15" } },
	};
	/* every row runs, so one run lists every wrong message */
	size_t n = sizeof(cases) / sizeof(cases[0]), wrong = 0;
	for (size_t i = 0; i < n; i++) {
		struct gpunvme_ctrl *c = NULL;
		int rc = gpunvme_open(cases[i].uri, NULL, &c);
		const char *e = gpunvme_last_error();
		int ok = rc == cases[i].rc;
		for (int k = 0; k < 3; k++)
			ok = ok && strstr(e, cases[i].want[k]);
		if (!ok) {
			fprintf(stderr, "  %s -> %d (want %d and \"%s\", \"%s\", \"%s\"): %s\n", cases[i].uri, rc,
				cases[i].rc, cases[i].want[0], cases[i].want[1], cases[i].want[2], e);
			wrong++;
		}
		if (c)
			gpunvme_close(c);
	}
	REQUIRE(wrong == 0, "%zu of %zu device strings got the wrong code or message", wrong, n);
	return 0;
}

int main(int argc, char **argv) { return check_main(argc, argv); }

/* Where the copies to GPU memory run (emu.h): the setting, and the
 * environment variable over it; a value that is neither is ignored. */
TEST_CASE(copies_choice)
{
	unsetenv("GPUNVME_EMU_DMA");
	REQUIRE_EQ(gpunvme_emu_copies(), GPUNVME_EMU_COPIES_INPROC);
	gpunvme_emu_set_copies(GPUNVME_EMU_COPIES_PROCESS);
	REQUIRE_EQ(gpunvme_emu_copies(), GPUNVME_EMU_COPIES_PROCESS);
	setenv("GPUNVME_EMU_DMA", "inproc", 1);
	REQUIRE_EQ(gpunvme_emu_copies(), GPUNVME_EMU_COPIES_INPROC);
	setenv("GPUNVME_EMU_DMA", "bogus", 1);
	REQUIRE_EQ(gpunvme_emu_copies(), GPUNVME_EMU_COPIES_PROCESS);
	gpunvme_emu_set_copies(GPUNVME_EMU_COPIES_INPROC);
	setenv("GPUNVME_EMU_DMA", "process", 1);
	REQUIRE_EQ(gpunvme_emu_copies(), GPUNVME_EMU_COPIES_PROCESS);
	setenv("GPUNVME_EMU_DMA", "", 1);
	REQUIRE_EQ(gpunvme_emu_copies(), GPUNVME_EMU_COPIES_INPROC);
	unsetenv("GPUNVME_EMU_DMA");
	return 0;
}
