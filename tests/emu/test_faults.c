/* SPDX-License-Identifier: BSD-2-Clause */
/* Fault injection: media errors, dropped commands, controller fatal status,
 * surprise removal (include/gpunvme/emu.h, docs/emulator.md "Faults"). */
#include <string.h>

#include "harness.h"

static int up(struct h_ctrl **c, struct h_qp *q)
{
	struct gpunvme_emu_config cfg;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(c, &cfg));
	REQUIRE_OK(h_qp_create(*c, q, 1, 16));
	return 0;
}

static int submit_read(struct h_qp *q, uint64_t slba, uint32_t nlb, uint64_t iova)
{
	struct gpunvme_sqe s;
	h_io_sqe(&s, GPUNVME_CMD_READ, 1, slba, nlb);
	s.prp1 = iova;
	return h_submit(q, &s);
}

TEST_CASE(media_error)
{
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	if (up(&c, &q))
		return 1;
	struct h_buf b = h_alloc(&c->arena, 8192, H_PAGE);
	struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_MEDIA, .nsid = 1, .slba = 100, .nlb = 10 };
	REQUIRE_OK(gpunvme_emu_inject(c->emu, &f));
	/* §4.6.1.2.4: Unrecovered Read Error is media SCT 2h, SC 81h. */
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, 100, 1, b.iova, 512, &e));
	REQUIRE_SC(e, GPUNVME_SC_UNRECOVERED_READ);
	REQUIRE_EQ(gpunvme_status_sct(h_st(&e)), GPUNVME_SCT_MEDIA);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, 95, 10, b.iova, 5120, &e)); /* overlaps 100..104 */
	REQUIRE_SC(e, GPUNVME_SC_UNRECOVERED_READ);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, 109, 1, b.iova, 512, &e)); /* last bad block */
	REQUIRE_SC(e, GPUNVME_SC_UNRECOVERED_READ);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, 90, 10, b.iova, 5120, &e)); /* just before */
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, 110, 4, b.iova, 2048, &e)); /* just after */
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, 100, 1, b.iova, 512, &e)); /* writes not failed */
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, 100, 1, b.iova, 512, &e)); /* still bad after the write */
	REQUIRE_SC(e, GPUNVME_SC_UNRECOVERED_READ);

	struct gpunvme_emu_fault w = { .kind = GPUNVME_EMU_FAULT_MEDIA, .nsid = 1, .slba = 200, .nlb = 10, .writes = 1 };
	REQUIRE_OK(gpunvme_emu_inject(c->emu, &w));
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, 205, 1, b.iova, 512, &e));
	REQUIRE_SC(e, GPUNVME_SC_WRITE_FAULT);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, 205, 1, b.iova, 512, &e));
	REQUIRE_SC(e, GPUNVME_SC_UNRECOVERED_READ);

	struct gpunvme_smart_log sm;
	REQUIRE_OK(h_smart(c, &sm));
	REQUIRE(sm.media_errors[0] >= 1, "SMART media errors %llu", (unsigned long long)sm.media_errors[0]);

	gpunvme_emu_clear_faults(c->emu);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, 100, 1, b.iova, 512, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, 205, 1, b.iova, 512, &e));
	REQUIRE_ST(e, 0);
	return 0;
}

TEST_CASE(drop_and_abort)
{
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	if (up(&c, &q))
		return 1;
	struct h_buf b = h_alloc(&c->arena, 4 * H_PAGE, H_PAGE);
	struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_DROP, .sqid = 1, .count = 1 };
	REQUIRE_OK(gpunvme_emu_inject(c->emu, &f));
	int a = submit_read(&q, 0, 1, b.iova);
	int b1 = submit_read(&q, 1, 1, b.iova + H_PAGE);
	int b2 = submit_read(&q, 2, 1, b.iova + 2 * H_PAGE);
	REQUIRE(a >= 0 && b1 >= 0 && b2 >= 0);
	/* The others complete; the dropped one does not. */
	REQUIRE_OK(h_wait_cid(&q, (uint16_t)b1, &e, H_TIMEOUT_MS));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_wait_cid(&q, (uint16_t)b2, &e, H_TIMEOUT_MS));
	REQUIRE_ST(e, 0);
	REQUIRE_EQ(h_expect_silence(&q, 300), 1);
	struct gpunvme_emu_stats st;
	gpunvme_emu_get_stats(c->emu, &st);
	REQUIRE_EQ(st.dropped, 1);
	/* §5.1: Abort finds it; it completes with Command Abort Requested. */
	REQUIRE_OK(h_abort(c, 1, (uint16_t)a, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_EQ(e.dw0 & 1, 0);
	REQUIRE_OK(h_wait_cid(&q, (uint16_t)a, &e, H_TIMEOUT_MS));
	REQUIRE_SC(e, GPUNVME_SC_ABORT_REQ);
	REQUIRE_EQ(e.sqid, 1);
	/* The fault is used up. */
	int d = submit_read(&q, 3, 1, b.iova);
	REQUIRE_OK(h_wait_cid(&q, (uint16_t)d, &e, H_TIMEOUT_MS));
	REQUIRE_ST(e, 0);
	return 0;
}

TEST_CASE(drop_any_queue)
{
	struct h_ctrl *c;
	struct h_qp q1, q2;
	struct gpunvme_cqe e;
	if (up(&c, &q1))
		return 1;
	REQUIRE_OK(h_qp_create(c, &q2, 2, 16));
	struct h_buf b = h_alloc(&c->arena, 4 * H_PAGE, H_PAGE);
	struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_DROP, .sqid = GPUNVME_EMU_SQID_ANY, .count = 2 };
	REQUIRE_OK(gpunvme_emu_inject(c->emu, &f));
	int a1 = submit_read(&q1, 0, 1, b.iova);
	REQUIRE_EQ(h_expect_silence(&q1, 200), 1);
	int a2 = submit_read(&q2, 0, 1, b.iova + H_PAGE);
	REQUIRE_EQ(h_expect_silence(&q2, 200), 1);
	REQUIRE(a1 >= 0 && a2 >= 0);
	/* Admin commands are not I/O: unaffected. */
	struct gpunvme_id_ctrl id;
	REQUIRE_OK(h_id_ctrl(c, &id));
	int n1 = submit_read(&q1, 1, 1, b.iova + 2 * H_PAGE);
	REQUIRE_OK(h_wait_cid(&q1, (uint16_t)n1, &e, H_TIMEOUT_MS));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_abort(c, 2, (uint16_t)a2, &e));
	REQUIRE_EQ(e.dw0 & 1, 0);
	REQUIRE_OK(h_wait_cid(&q2, (uint16_t)a2, &e, H_TIMEOUT_MS));
	REQUIRE_SC(e, GPUNVME_SC_ABORT_REQ);
	REQUIRE_OK(h_abort(c, 1, (uint16_t)a1, &e));
	REQUIRE_EQ(e.dw0 & 1, 0);
	REQUIRE_OK(h_wait_cid(&q1, (uint16_t)a1, &e, H_TIMEOUT_MS));
	REQUIRE_SC(e, GPUNVME_SC_ABORT_REQ);
	struct gpunvme_emu_stats st;
	gpunvme_emu_get_stats(c->emu, &st);
	REQUIRE_EQ(st.dropped, 2);
	return 0;
}

TEST_CASE(drop_then_delete_sq)
{
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	if (up(&c, &q))
		return 1;
	struct h_buf b = h_alloc(&c->arena, 2 * H_PAGE, H_PAGE);
	struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_DROP, .sqid = 1, .count = 2 };
	REQUIRE_OK(gpunvme_emu_inject(c->emu, &f));
	int a = submit_read(&q, 0, 1, b.iova), bb = submit_read(&q, 1, 1, b.iova + H_PAGE);
	REQUIRE(a >= 0 && bb >= 0);
	REQUIRE_EQ(h_expect_silence(&q, 200), 1);
	/* docs/emulator.md (as QEMU, §5.6 makes entries optional): commands in
	 * progress on a deleted SQ are discarded without a completion entry. */
	REQUIRE_OK(h_delete_sq(c, 1, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_EQ(h_expect_silence(&q, 200), 1);
	/* The SQ is gone: Abort on it is an Invalid Field. */
	REQUIRE_OK(h_abort(c, 1, (uint16_t)a, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	REQUIRE_OK(h_delete_cq(c, 1, &e));
	REQUIRE_ST(e, 0);
	/* Same QID again: the old commands do not come back. */
	struct h_qp q2;
	REQUIRE_OK(h_qp_create(c, &q2, 1, 16));
	REQUIRE_OK(h_abort(c, 1, (uint16_t)a, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_EQ(e.dw0 & 1, 1);
	REQUIRE_OK(h_io(&q2, GPUNVME_CMD_READ, 1, 0, 1, b.iova, 512, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_EQ(h_expect_silence(&q2, 100), 1);
	return 0;
}

TEST_CASE(delete_sq_unposted)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	/* A 4-entry CQ (holds 3) behind a 32-entry SQ with 10 commands: 7
	 * completions wait for room when the SQ is deleted. */
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
	h_qp_reset(&q);
	REQUIRE_OK(h_create_cq(c, 1, 3, q.cq_iova, GPUNVME_Q_PC, 0, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_create_sq(c, 1, 31, q.sq_iova, GPUNVME_Q_PC, 1, &e));
	REQUIRE_ST(e, 0);
	struct h_buf b = h_alloc(&c->arena, 10 * 512, H_PAGE);
	for (int i = 0; i < 10; i++) {
		struct gpunvme_sqe s;
		h_io_sqe(&s, GPUNVME_CMD_READ, 1, (uint64_t)i, 1);
		s.prp1 = b.iova + (uint64_t)i * 512;
		s.cid = (uint16_t)(50 + i);
		REQUIRE_OK(h_sq_push(&q, &s));
	}
	h_sq_ring(&q);
	uint64_t t0 = h_now_ms();
	while (h_cq_pending(&q) < 3) {
		REQUIRE(h_now_ms() - t0 < H_TIMEOUT_MS, "CQ never filled");
		h_sleep_ms(1);
	}
	REQUIRE_OK(h_delete_sq(c, 1, &e));
	REQUIRE_ST(e, 0);
	/* Exactly the 3 entries posted before the delete, each once. */
	unsigned seen = 0;
	for (int i = 0; i < 3; i++) {
		REQUIRE_OK(h_cq_wait(&q, &e, H_TIMEOUT_MS));
		REQUIRE_ST(e, 0);
		REQUIRE(e.cid >= 50 && e.cid < 60 && !(seen & (1u << (e.cid - 50))), "cid %u", e.cid);
		seen |= 1u << (e.cid - 50);
	}
	REQUIRE_EQ(h_expect_silence(&q, 200), 1);
	REQUIRE_OK(h_delete_cq(c, 1, &e));
	REQUIRE_ST(e, 0);
	struct gpunvme_id_ctrl id;
	REQUIRE_OK(h_id_ctrl(c, &id));
	return 0;
}

TEST_CASE(cfs_recovery)
{
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	if (up(&c, &q))
		return 1;
	struct h_buf b = h_alloc(&c->arena, H_PAGE, H_PAGE);
	struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_CFS };
	REQUIRE_OK(gpunvme_emu_inject(c->emu, &f));
	REQUIRE_OK(h_wait_reg(c, GPUNVME_REG_CSTS, GPUNVME_CSTS_CFS, GPUNVME_CSTS_CFS, H_TIMEOUT_MS));
	/* Nothing is processed while CFS is set. */
	REQUIRE(submit_read(&q, 0, 1, b.iova) >= 0);
	REQUIRE_EQ(h_expect_silence(&q, 300), 1);
	REQUIRE(h_aer_submit(c) >= 0);
	REQUIRE_EQ(h_expect_silence(&c->admin, 100), 1);
	/* §10.5 (controller fatal): reset with CC.EN = 0, then start again. */
	h_wr32(c, GPUNVME_REG_CC, H_CC_DEFAULT);
	REQUIRE_OK(h_wait_reg(c, GPUNVME_REG_CSTS, GPUNVME_CSTS_RDY | GPUNVME_CSTS_CFS, 0, H_TIMEOUT_MS));
	REQUIRE_OK(h_enable(c, 0));
	struct gpunvme_id_ctrl id;
	REQUIRE_OK(h_id_ctrl(c, &id));
	struct h_qp q2;
	REQUIRE_OK(h_qp_create(c, &q2, 1, 16));
	REQUIRE_OK(h_io(&q2, GPUNVME_CMD_READ, 1, 0, 8, b.iova, H_PAGE, &e));
	REQUIRE_ST(e, 0);
	return 0;
}

TEST_CASE(surprise_removal)
{
	struct h_ctrl *c;
	struct h_qp q;
	struct gpunvme_cqe e;
	if (up(&c, &q))
		return 1;
	struct h_buf b = h_alloc(&c->arena, H_PAGE, H_PAGE);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, 0, 8, b.iova, H_PAGE, &e));
	REQUIRE_ST(e, 0);
	struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_REMOVE };
	REQUIRE_OK(gpunvme_emu_inject(c->emu, &f));
	/* A removed PCIe device reads as all ones. */
	REQUIRE_OK(h_wait_reg(c, GPUNVME_REG_CSTS, 0xffffffffu, 0xffffffffu, H_TIMEOUT_MS));
	REQUIRE_EQ(h_rd64(c, GPUNVME_REG_CAP), UINT64_MAX);
	REQUIRE_EQ(h_rd32(c, GPUNVME_REG_VS), 0xffffffffu);
	memset(b.va, 0x5a, H_PAGE);
	REQUIRE(submit_read(&q, 0, 8, b.iova) >= 0);
	REQUIRE_EQ(h_expect_silence(&q, 300), 1);
	REQUIRE(h_aer_submit(c) >= 0);
	REQUIRE_EQ(h_expect_silence(&c->admin, 100), 1);
	REQUIRE(h_all(b.va, H_PAGE, 0x5a), "DMA after removal");
	/* Still all ones later (the host writes must not revive it). */
	REQUIRE_EQ(h_rd32(c, GPUNVME_REG_CSTS), 0xffffffffu);
	h_ctrl_close(c); /* destroy must not hang on a removed controller */
	return 0;
}

int main(int argc, char **argv) { return check_main(argc, argv); }
