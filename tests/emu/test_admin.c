/* SPDX-License-Identifier: BSD-2-Clause */
/* Admin command set (NVMe 1.4 §5): Identify, queue management, features,
 * log pages, Abort and Asynchronous Events. Expected statuses follow
 * docs/emulator.md. */
#include <string.h>

#include "harness.h"

#define UNMAPPED_IOVA 0x500000000000ull

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

/* §1.5: ASCII strings are left justified and padded with spaces. */
static int padded_eq(const char *field, size_t len, const char *want)
{
	size_t n = strlen(want);
	if (n > len || memcmp(field, want, n) != 0)
		return 0;
	for (size_t i = n; i < len; i++)
		if (field[i] != ' ')
			return 0;
	return 1;
}

TEST_CASE(identify_ctrl)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_id_ctrl id;
	two_ns_cfg(&cfg);
	strcpy(cfg.serial, "HB-0001");
	strcpy(cfg.model_name, "harness test model");
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_id_ctrl(c, &id));
	REQUIRE(padded_eq(id.sn, sizeof(id.sn), "HB-0001"), "SN '%.20s'", id.sn);
	REQUIRE(padded_eq(id.mn, sizeof(id.mn), "harness test model"), "MN '%.40s'", id.mn);
	REQUIRE(id.fr[0] != 0 && id.fr[0] != ' ');
	REQUIRE(id.nn >= 2);
	REQUIRE_EQ(id.mdts, 5);
	REQUIRE_EQ(id.sqes, 0x66);
	REQUIRE_EQ(id.cqes, 0x44);
	REQUIRE_EQ(id.ver, GPUNVME_VS(1, 4, 0));
	REQUIRE(id.oncs & GPUNVME_ONCS_DSM);
	REQUIRE(id.oncs & GPUNVME_ONCS_WRITE_ZEROES);
	REQUIRE_EQ(id.vwc & GPUNVME_VWC_PRESENT, 1);
	REQUIRE_EQ(id.aerl, 3);   /* 0's based: 4 outstanding AERs */
	REQUIRE_EQ(id.elpe, 63);  /* 0's based: 64 error log entries */
	REQUIRE_EQ(id.sgls, 0);   /* PRPs only */
	h_ctrl_close(c);

	h_cfg(&cfg);
	cfg.mdts = 7;
	cfg.vwc = 0;
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_id_ctrl(c, &id));
	REQUIRE_EQ(id.mdts, 7);
	REQUIRE_EQ(id.vwc & GPUNVME_VWC_PRESENT, 0);
	REQUIRE(id.nn >= 1);
	return 0;
}

TEST_CASE(identify_ns)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_id_ns ns;
	two_ns_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	static const struct {
		uint32_t nsid;
		uint64_t blocks;
		uint32_t lbads;
	} want[] = { { 1, (64u << 20) >> 9, 9 }, { 2, (32u << 20) >> 12, 12 } };
	for (int i = 0; i < 2; i++) {
		REQUIRE_OK(h_id_ns(c, want[i].nsid, &ns));
		REQUIRE_EQ(ns.nsze, want[i].blocks);
		REQUIRE_EQ(ns.ncap, want[i].blocks);
		REQUIRE(ns.nuse <= ns.ncap);
		const struct gpunvme_lbaf *f = &ns.lbaf[gpunvme_id_ns_flbas_index(&ns)];
		REQUIRE(gpunvme_id_ns_flbas_index(&ns) <= ns.nlbaf);
		REQUIRE_EQ(f->lbads, want[i].lbads);
		REQUIRE_EQ(f->ms, 0);
		/* docs: deallocated blocks read as zeroes */
		REQUIRE_EQ(ns.dlfeat & 7, GPUNVME_DLFEAT_READ_ZEROES);
	}
	return 0;
}

TEST_CASE(identify_active_list)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	two_ns_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	const uint32_t *l = c->scratch.va;
	/* §5.15.2.2: active NSIDs greater than CDW1.NSID, ascending, zero padded. */
	static const struct {
		uint32_t nsid, first, second;
	} v[] = { { 0, 1, 2 }, { 1, 2, 0 }, { 2, 0, 0 } };
	for (int i = 0; i < 3; i++) {
		memset(c->scratch.va, 0xa5, H_PAGE);
		REQUIRE_OK(h_identify(c, GPUNVME_CNS_ACTIVE_NS_LIST, v[i].nsid, c->scratch.iova, &e));
		REQUIRE_ST(e, 0);
		REQUIRE_EQ(l[0], v[i].first);
		REQUIRE_EQ(l[1], v[i].second);
		REQUIRE(h_all(&l[2], H_PAGE - 8, 0));
	}
	REQUIRE_OK(h_identify(c, GPUNVME_CNS_ACTIVE_NS_LIST, 0xfffffffeu, c->scratch.iova, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_NSID));
	REQUIRE_OK(h_identify(c, GPUNVME_CNS_ACTIVE_NS_LIST, GPUNVME_NSID_ALL, c->scratch.iova, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_NSID));
	return 0;
}

TEST_CASE(identify_bad)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	struct gpunvme_id_ctrl id;
	two_ns_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_id_ctrl(c, &id));
	REQUIRE_OK(h_identify(c, 0x55, 0, c->scratch.iova, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	REQUIRE_OK(h_identify(c, GPUNVME_CNS_NS, 0, c->scratch.iova, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_NSID));
	REQUIRE_OK(h_identify(c, GPUNVME_CNS_NS, GPUNVME_NSID_ALL, c->scratch.iova, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_NSID));
	REQUIRE_OK(h_identify(c, GPUNVME_CNS_NS, id.nn + 1, c->scratch.iova, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_NSID));
	if (id.nn > 2) {
		/* §5.15.2.1: a valid but inactive NSID returns a zero-filled page. */
		memset(c->scratch.va, 0xa5, H_PAGE);
		REQUIRE_OK(h_identify(c, GPUNVME_CNS_NS, 3, c->scratch.iova, &e));
		REQUIRE_ST(e, 0);
		REQUIRE(h_all(c->scratch.va, H_PAGE, 0));
	}
	/* Data buffer outside the DMA table. */
	REQUIRE_OK(h_identify(c, GPUNVME_CNS_CTRL, 0, UNMAPPED_IOVA, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_DATA_XFER_ERROR));
	return 0;
}

TEST_CASE(create_cq_errors)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	h_cfg(&cfg);
	cfg.max_ioq = 4;
	cfg.mqes = 63;
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	struct h_buf m = h_alloc(&c->arena, 2 * H_PAGE, H_PAGE);
	static const struct {
		uint16_t qid, qsize0, flags, iv;
		uint64_t off;
		uint16_t st;
		const char *what;
	} v[] = {
		{ 0, 15, GPUNVME_Q_PC, 0, 0, H_DNR(GPUNVME_SC_INVALID_QID), "qid 0" },
		{ 5, 15, GPUNVME_Q_PC, 0, 0, H_DNR(GPUNVME_SC_INVALID_QID), "qid > max_ioq" },
		{ 1, 0, GPUNVME_Q_PC, 0, 0, H_DNR(GPUNVME_SC_MAX_QSIZE_EXCEEDED), "qsize 0" },
		{ 1, 64, GPUNVME_Q_PC, 0, 0, H_DNR(GPUNVME_SC_MAX_QSIZE_EXCEEDED), "qsize > MQES" },
		{ 1, 15, GPUNVME_Q_PC, 0, 0x100, H_DNR(GPUNVME_SC_INVALID_PRP_OFFSET), "PRP1 + 0x100" },
		{ 1, 15, 0, 0, 0, H_DNR(GPUNVME_SC_INVALID_FIELD), "PC = 0" },
		{ 1, 15, GPUNVME_Q_PC | GPUNVME_CQ_IEN, 2048, 0, H_DNR(GPUNVME_SC_INVALID_IRQ_VECTOR), "IV 2048" },
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		REQUIRE_OK(h_create_cq(c, v[i].qid, v[i].qsize0, m.iova + v[i].off, v[i].flags, v[i].iv, &e));
		if ((h_st(&e) & H_MASK_SC_DNR) != v[i].st)
			fprintf(stderr, "case: %s\n", v[i].what);
		REQUIRE_ST(e, v[i].st);
	}
	REQUIRE_OK(h_create_cq(c, 1, 15, UNMAPPED_IOVA, GPUNVME_Q_PC, 0, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_DATA_XFER_ERROR));
	REQUIRE_OK(h_create_cq(c, 1, 63, m.iova, GPUNVME_Q_PC, 0, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_create_cq(c, 1, 15, m.iova + H_PAGE, GPUNVME_Q_PC, 0, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_QID)); /* exists */
	REQUIRE_OK(h_create_cq(c, 4, 15, m.iova + H_PAGE, GPUNVME_Q_PC, 0, &e));
	REQUIRE_ST(e, 0); /* qid == max_ioq is fine */
	return 0;
}

TEST_CASE(create_sq_errors)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	h_cfg(&cfg);
	cfg.max_ioq = 4;
	cfg.mqes = 63;
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	struct h_buf cq = h_alloc(&c->arena, H_PAGE, H_PAGE);
	struct h_buf m = h_alloc(&c->arena, 2 * H_PAGE, H_PAGE);
	REQUIRE_OK(h_create_cq(c, 1, 15, cq.iova, GPUNVME_Q_PC, 0, &e));
	REQUIRE_ST(e, 0);
	static const struct {
		uint16_t qid, qsize0, flags, cqid;
		uint64_t off;
		uint16_t st;
		const char *what;
	} v[] = {
		{ 1, 15, GPUNVME_Q_PC, 0, 0, H_DNR(GPUNVME_SC_INVALID_CQID), "cqid 0" },
		{ 1, 15, GPUNVME_Q_PC, 3, 0, H_DNR(GPUNVME_SC_INVALID_CQID), "cqid missing" },
		{ 0, 15, GPUNVME_Q_PC, 1, 0, H_DNR(GPUNVME_SC_INVALID_QID), "qid 0" },
		{ 5, 15, GPUNVME_Q_PC, 1, 0, H_DNR(GPUNVME_SC_INVALID_QID), "qid > max_ioq" },
		{ 1, 0, GPUNVME_Q_PC, 1, 0, H_DNR(GPUNVME_SC_MAX_QSIZE_EXCEEDED), "qsize 0" },
		{ 1, 64, GPUNVME_Q_PC, 1, 0, H_DNR(GPUNVME_SC_MAX_QSIZE_EXCEEDED), "qsize > MQES" },
		{ 1, 15, GPUNVME_Q_PC, 1, 0x40, H_DNR(GPUNVME_SC_INVALID_PRP_OFFSET), "PRP1 + 0x40" },
		{ 1, 15, 0, 1, 0, H_DNR(GPUNVME_SC_INVALID_FIELD), "PC = 0" },
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		REQUIRE_OK(h_create_sq(c, v[i].qid, v[i].qsize0, m.iova + v[i].off, v[i].flags, v[i].cqid, &e));
		if ((h_st(&e) & H_MASK_SC_DNR) != v[i].st)
			fprintf(stderr, "case: %s\n", v[i].what);
		REQUIRE_ST(e, v[i].st);
	}
	REQUIRE_OK(h_create_sq(c, 1, 15, UNMAPPED_IOVA, GPUNVME_Q_PC, 1, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_DATA_XFER_ERROR));
	REQUIRE_OK(h_create_sq(c, 1, 15, m.iova, GPUNVME_Q_PC, 1, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_create_sq(c, 1, 15, m.iova + H_PAGE, GPUNVME_Q_PC, 1, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_QID)); /* exists */
	/* A second SQ may share the CQ (§4.1). */
	REQUIRE_OK(h_create_sq(c, 2, 15, m.iova + H_PAGE, GPUNVME_Q_PC, 1, &e));
	REQUIRE_ST(e, 0);
	return 0;
}

TEST_CASE(delete_queue_errors)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	struct h_qp q;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_delete_sq(c, 0, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_QID));
	REQUIRE_OK(h_delete_sq(c, 3, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_QID));
	REQUIRE_OK(h_delete_cq(c, 0, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_CQID));
	REQUIRE_OK(h_delete_cq(c, 3, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_CQID));

	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	/* §5.6: a CQ with SQs attached cannot go; not a DNR condition since
	 * deleting the SQ first makes the retry succeed. */
	REQUIRE_OK(h_delete_cq(c, 1, &e));
	REQUIRE_ST(e, GPUNVME_SC_INVALID_QUEUE_DEL);
	REQUIRE_OK(h_delete_sq(c, 1, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_delete_sq(c, 1, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_QID));
	REQUIRE_OK(h_delete_cq(c, 1, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_delete_cq(c, 1, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_CQID));

	/* The QID is free again and works. */
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	struct h_buf b = h_alloc(&c->arena, H_PAGE, H_PAGE);
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, 0, 8, b.iova, H_PAGE, &e));
	REQUIRE_ST(e, 0);
	return 0;
}

TEST_CASE(features_num_queues)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	struct h_qp q;
	h_cfg(&cfg);
	cfg.max_ioq = 8;
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_get_features(c, GPUNVME_FEAT_NUM_QUEUES, GPUNVME_FEAT_SEL_CURRENT, 0, &e));
	REQUIRE_ST(e, 0);
	REQUIRE((e.dw0 & 0xffff) < 8 && (e.dw0 >> 16) < 8);
	/* §5.21.1.7: NSQR bits 15:0, NCQR 31:16, both 0's based; the
	 * completion reports what was allocated. */
	REQUIRE_OK(h_set_features(c, GPUNVME_FEAT_NUM_QUEUES, (1u << 16) | 2u, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_EQ(e.dw0, (1u << 16) | 2u);
	REQUIRE_OK(h_set_features(c, GPUNVME_FEAT_NUM_QUEUES, (99u << 16) | 99u, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_EQ(e.dw0, (7u << 16) | 7u);
	REQUIRE_OK(h_get_features(c, GPUNVME_FEAT_NUM_QUEUES, GPUNVME_FEAT_SEL_CURRENT, 0, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_EQ(e.dw0, (7u << 16) | 7u);
	/* 65535 (0's based 65536) is not a valid request. */
	REQUIRE_OK(h_set_features(c, GPUNVME_FEAT_NUM_QUEUES, 0xffffu, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	REQUIRE_OK(h_set_features(c, GPUNVME_FEAT_NUM_QUEUES, 0xffff0000u, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	/* Only before any I/O queue exists. */
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	REQUIRE_OK(h_set_features(c, GPUNVME_FEAT_NUM_QUEUES, (1u << 16) | 1u, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_CMD_SEQ_ERROR));
	return 0;
}

TEST_CASE(features_arbitration)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	/* §5.21.1.1: AB 2:0, LPW 15:8, MPW 23:16, HPW 31:24. */
	const uint32_t v = 0x04030203u;
	REQUIRE_OK(h_set_features(c, GPUNVME_FEAT_ARBITRATION, v, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_get_features(c, GPUNVME_FEAT_ARBITRATION, GPUNVME_FEAT_SEL_CURRENT, 0, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_EQ(e.dw0, v);
	REQUIRE_OK(h_set_features(c, GPUNVME_FEAT_ARBITRATION, 0x01010100u, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_get_features(c, GPUNVME_FEAT_ARBITRATION, GPUNVME_FEAT_SEL_CURRENT, 0, &e));
	REQUIRE_EQ(e.dw0, 0x01010100u);
	REQUIRE_OK(h_get_features(c, GPUNVME_FEAT_ARBITRATION, GPUNVME_FEAT_SEL_DEFAULT, 0, &e));
	REQUIRE_ST(e, 0);
	uint32_t def = e.dw0;
	REQUIRE(def != 0x01010100u); /* the default is not what we set */
	/* Nothing is saveable: SEL = saved returns the default (docs, as
	 * QEMU); capabilities say changeable (bit 2), not saveable (bit 0),
	 * Figure 284; SEL 4-7 are reserved. */
	REQUIRE_OK(h_get_features(c, GPUNVME_FEAT_ARBITRATION, GPUNVME_FEAT_SEL_SAVED, 0, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_EQ(e.dw0, def);
	REQUIRE_OK(h_get_features(c, GPUNVME_FEAT_ARBITRATION, GPUNVME_FEAT_SEL_SUPPORTED, 0, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_EQ(e.dw0 & 5u, 4u);
	for (uint8_t sel = 4; sel < 8; sel++) {
		REQUIRE_OK(h_get_features(c, GPUNVME_FEAT_ARBITRATION, sel, 0, &e));
		REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	}
	/* Set Features with SV = 1 (cdw10 bit 31): not saveable. */
	struct gpunvme_sqe sv = { .opc = GPUNVME_ADM_SET_FEATURES, .prp1 = c->scratch.iova };
	sv.cdw[0] = GPUNVME_FEAT_ARBITRATION | (1u << 31);
	sv.cdw[1] = 0x02020202u;
	REQUIRE_OK(h_cmd(&c->admin, &sv, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_FEAT_NOT_SAVEABLE));
	REQUIRE_OK(h_get_features(c, GPUNVME_FEAT_ARBITRATION, GPUNVME_FEAT_SEL_CURRENT, 0, &e));
	REQUIRE_EQ(e.dw0, 0x01010100u); /* unchanged by the failed Set */
	/* Features that are not supported. */
	static const uint8_t bad[] = { 0x00, GPUNVME_FEAT_LBA_RANGE, GPUNVME_FEAT_TIMESTAMP, 0x7f };
	for (size_t i = 0; i < sizeof(bad); i++) {
		REQUIRE_OK(h_get_features(c, bad[i], GPUNVME_FEAT_SEL_CURRENT, 0, &e));
		REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
		REQUIRE_OK(h_set_features(c, bad[i], 0, &e));
		REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	}
	return 0;
}

TEST_CASE(features_vwc)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	for (uint32_t v = 0; v < 4; v++) {
		REQUIRE_OK(h_set_features(c, GPUNVME_FEAT_VOLATILE_WC, v & 1, &e));
		REQUIRE_ST(e, 0);
		REQUIRE_OK(h_get_features(c, GPUNVME_FEAT_VOLATILE_WC, GPUNVME_FEAT_SEL_CURRENT, 0, &e));
		REQUIRE_ST(e, 0);
		REQUIRE_EQ(e.dw0 & 1, v & 1);
	}
	h_ctrl_close(c);
	/* §5.21.1.6: without a volatile write cache the feature cannot be set. */
	h_cfg(&cfg);
	cfg.vwc = 0;
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_set_features(c, GPUNVME_FEAT_VOLATILE_WC, 1, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	return 0;
}

static const struct gpunvme_error_log *find_err(const void *page, uint16_t sqid, uint16_t cid)
{
	const struct gpunvme_error_log *l = page;
	for (int i = 0; i < 64; i++)
		if (l[i].error_count && l[i].sqid == sqid && l[i].cid == cid)
			return &l[i];
	return NULL;
}

TEST_CASE(log_error)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	struct h_qp q;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	struct gpunvme_sqe s = { .opc = 0x7f };
	int acid = h_submit(&c->admin, &s);
	REQUIRE(acid >= 0);
	REQUIRE_OK(h_wait_cid(&c->admin, (uint16_t)acid, &e, H_TIMEOUT_MS));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_OPCODE));
	struct h_buf b = h_alloc(&c->arena, H_PAGE, H_PAGE);
	uint64_t nsze = (64u << 20) >> 9;
	h_io_sqe(&s, GPUNVME_CMD_READ, 1, nsze, 1);
	s.prp1 = b.iova;
	int iocid = h_submit(&q, &s);
	REQUIRE(iocid >= 0);
	REQUIRE_OK(h_wait_cid(&q, (uint16_t)iocid, &e, H_TIMEOUT_MS));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_LBA_RANGE));

	struct h_buf log = h_alloc(&c->arena, 4096, H_PAGE);
	memset(log.va, 0xa5, 4096);
	REQUIRE_OK(h_get_log(c, GPUNVME_LOG_ERROR, GPUNVME_NSID_ALL, false, 4096, 0, log.iova, 0, &e));
	REQUIRE_ST(e, 0);
	const struct gpunvme_error_log *a = find_err(log.va, 0, (uint16_t)acid);
	const struct gpunvme_error_log *i = find_err(log.va, 1, (uint16_t)iocid);
	REQUIRE(a != NULL, "no error log entry for admin cid %d", acid);
	REQUIRE(i != NULL, "no error log entry for I/O cid %d", iocid);
	/* §5.14.1.1: status field as in the CQE (bit 0 phase), count unique
	 * and increasing. */
	REQUIRE_EQ(gpunvme_cqe_status(a->status) & H_MASK_SC_DNR, H_DNR(GPUNVME_SC_INVALID_OPCODE));
	REQUIRE_EQ(gpunvme_cqe_status(i->status) & H_MASK_SC_DNR, H_DNR(GPUNVME_SC_LBA_RANGE));
	REQUIRE(i->error_count > a->error_count);
	REQUIRE_EQ(i->nsid, 1);

	struct gpunvme_smart_log sm;
	REQUIRE_OK(h_smart(c, &sm));
	REQUIRE(sm.num_err_log_entries[0] >= 2);
	return 0;
}

TEST_CASE(log_smart)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	struct h_qp q;
	struct gpunvme_smart_log sm;
	two_ns_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	REQUIRE_OK(h_smart(c, &sm));
	REQUIRE_EQ(sm.host_reads[0], 0);
	REQUIRE_EQ(sm.host_writes[0], 0);
	REQUIRE_EQ(sm.data_units_read[0], 0);
	REQUIRE_EQ(sm.data_units_written[0], 0);
	REQUIRE((sm.temperature[0] | sm.temperature[1] << 8) > 273); /* Kelvin */

	struct h_buf b = h_alloc(&c->arena, 128 << 10, H_PAGE);
	/* 20 x 100 + 25 x 8 (4 KiB = 8 units) x 5 = 3000 units of 512 B: exactly
	 * 3 thousand, so a wrong round-up shows (§5.14.1.2: rounded up). */
	for (int i = 0; i < 20; i++) {
		REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, (uint64_t)i * 100, 100, b.iova, 100 * 512, &e));
		REQUIRE_ST(e, 0);
	}
	for (int i = 0; i < 5; i++) {
		REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 2, (uint64_t)i * 25, 25, b.iova, 25 * 4096, &e));
		REQUIRE_ST(e, 0);
	}
	/* 11 x 91 = 1001 units read: rounds up to 2. */
	for (int i = 0; i < 11; i++) {
		REQUIRE_OK(h_io(&q, GPUNVME_CMD_READ, 1, (uint64_t)i * 91, 91, b.iova, 91 * 512, &e));
		REQUIRE_ST(e, 0);
	}
	/* A Flush is neither a read nor a write command. */
	REQUIRE_OK(h_io(&q, GPUNVME_CMD_FLUSH, 1, 0, 0, 0, 0, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_smart(c, &sm));
	REQUIRE_EQ(sm.host_writes[0], 25);
	REQUIRE_EQ(sm.host_reads[0], 11);
	REQUIRE_EQ(sm.data_units_written[0], 3);
	REQUIRE_EQ(sm.data_units_read[0], 2);

	/* §5.14.1.2: no per-namespace SMART (LPA bit 0 clear). */
	REQUIRE_OK(h_get_log(c, GPUNVME_LOG_SMART, 1, false, 512, 0, c->scratch.iova, 0, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	REQUIRE_OK(h_get_log(c, GPUNVME_LOG_SMART, 0, false, 512, 0, c->scratch.iova, 0, &e));
	REQUIRE_ST(e, 0);
	return 0;
}

TEST_CASE(log_bad)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	uint64_t p = c->scratch.iova;
	REQUIRE_OK(h_get_log(c, 0x7f, GPUNVME_NSID_ALL, false, 512, 0, p, 0, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	REQUIRE_OK(h_get_log(c, 0xc0, GPUNVME_NSID_ALL, false, 512, 0, p, 0, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	/* Offsets beyond the page, or not dword aligned (§5.14: LPOL bits 1:0). */
	REQUIRE_OK(h_get_log(c, GPUNVME_LOG_SMART, GPUNVME_NSID_ALL, false, 4, 1024, p, 0, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	REQUIRE_OK(h_get_log(c, GPUNVME_LOG_ERROR, GPUNVME_NSID_ALL, false, 64, 8192, p, 0, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	REQUIRE_OK(h_get_log(c, GPUNVME_LOG_SMART, GPUNVME_NSID_ALL, false, 4, 2, p, 0, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	/* Offset == page size: no byte of the page is left to return; QEMU
	 * (nvme_smart_info / nvme_error_info: off >= size) rejects it. */
	REQUIRE_OK(h_get_log(c, GPUNVME_LOG_SMART, GPUNVME_NSID_ALL, false, 4, 512, p, 0, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	REQUIRE_OK(h_get_log(c, GPUNVME_LOG_ERROR, GPUNVME_NSID_ALL, false, 64, 4096, p, 0, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	/* In range: the last dword of SMART, and the firmware slot log. */
	REQUIRE_OK(h_get_log(c, GPUNVME_LOG_SMART, GPUNVME_NSID_ALL, false, 4, 508, p, 0, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_OK(h_get_log(c, GPUNVME_LOG_FW_SLOT, GPUNVME_NSID_ALL, false, 512, 0, p, 0, &e));
	REQUIRE_ST(e, 0);
	return 0;
}

TEST_CASE(abort_invalid_sqid)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	struct h_qp q;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_abort(c, 9, 0, &e));
	REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_FIELD));
	/* Not found: success with dw0 bit 0 = 1 (§5.1). */
	REQUIRE_OK(h_abort(c, 0, 0x1234, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_EQ(e.dw0 & 1, 1);
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	REQUIRE_OK(h_abort(c, 1, 7, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_EQ(e.dw0 & 1, 1);
	return 0;
}

TEST_CASE(abort_aer)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	int aer = h_aer_submit(c);
	REQUIRE(aer >= 0);
	REQUIRE_EQ(h_expect_silence(&c->admin, 50), 1);
	REQUIRE_OK(h_abort(c, 0, (uint16_t)aer, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_EQ(e.dw0 & 1, 0);
	REQUIRE_OK(h_wait_cid(&c->admin, (uint16_t)aer, &e, H_TIMEOUT_MS));
	REQUIRE_SC(e, GPUNVME_SC_ABORT_REQ);
	/* Aborted once: a second abort finds nothing. */
	REQUIRE_OK(h_abort(c, 0, (uint16_t)aer, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_EQ(e.dw0 & 1, 1);
	return 0;
}

TEST_CASE(aer_limit)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	for (int i = 0; i < 4; i++)
		REQUIRE(h_aer_submit(c) >= 0);
	int fifth = h_aer_submit(c);
	REQUIRE(fifth >= 0);
	REQUIRE_OK(h_wait_cid(&c->admin, (uint16_t)fifth, &e, H_TIMEOUT_MS));
	/* Without DNR (docs, QEMU's choice): a retry after an event works. */
	REQUIRE_ST(e, GPUNVME_SC_AER_LIMIT_EXCEEDED);
	/* The four accepted ones stay outstanding. */
	REQUIRE_EQ(h_expect_silence(&c->admin, 100), 1);
	struct gpunvme_id_ctrl id;
	REQUIRE_OK(h_id_ctrl(c, &id));
	return 0;
}

/* Wait for AER `cid` and check it reports an Invalid Doorbell error. */
static int expect_db_event(struct h_ctrl *c, int cid, uint32_t info)
{
	struct gpunvme_cqe e;
	REQUIRE_OK(h_wait_cid(&c->admin, (uint16_t)cid, &e, H_TIMEOUT_MS));
	REQUIRE_ST(e, 0);
	REQUIRE_EQ(gpunvme_aer_type(e.dw0), GPUNVME_AER_TYPE_ERROR);
	REQUIRE_EQ(gpunvme_aer_info(e.dw0), info);
	REQUIRE_EQ(gpunvme_aer_log(e.dw0), GPUNVME_LOG_ERROR);
	/* Reading the log with RAE = 0 re-arms error events (§5.2). */
	REQUIRE_OK(h_get_log(c, GPUNVME_LOG_ERROR, GPUNVME_NSID_ALL, false, 64, 0, c->scratch.iova, 0, &e));
	REQUIRE_ST(e, 0);
	return 0;
}

TEST_CASE(aer_invalid_db_value)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	struct h_qp q;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	REQUIRE_OK(h_qp_create(c, &q, 1, 16));
	int aer = h_aer_submit(c);
	REQUIRE(aer >= 0);
	/* Tail 16 on a 16-entry SQ (§4.1: valid values are 0..15). */
	h_wr32(c, gpunvme_sq_doorbell(1, c->dstrd), 16);
	if (expect_db_event(c, aer, GPUNVME_AER_INFO_INVALID_DB_VALUE))
		return 1;
	REQUIRE_EQ(h_expect_silence(&q, 50), 1); /* nothing was fetched */
	aer = h_aer_submit(c);
	REQUIRE(aer >= 0);
	h_wr32(c, gpunvme_cq_doorbell(1, c->dstrd), 17);
	if (expect_db_event(c, aer, GPUNVME_AER_INFO_INVALID_DB_VALUE))
		return 1;
	/* The queue still works with correct doorbell values. */
	h_wr32(c, gpunvme_cq_doorbell(1, c->dstrd), 0);
	struct h_buf b = h_alloc(&c->arena, H_PAGE, H_PAGE);
	for (int i = 0; i < 20; i++) {
		REQUIRE_OK(h_io(&q, GPUNVME_CMD_WRITE, 1, (uint64_t)i, 1, b.iova, 512, &e));
		REQUIRE_ST(e, 0);
	}
	return 0;
}

TEST_CASE(aer_invalid_db_register)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	int aer = h_aer_submit(c);
	REQUIRE(aer >= 0);
	h_wr32(c, gpunvme_sq_doorbell(5, c->dstrd), 1);
	if (expect_db_event(c, aer, GPUNVME_AER_INFO_INVALID_DB_REG))
		return 1;
	REQUIRE_OK(h_wait_reg(c, gpunvme_sq_doorbell(5, c->dstrd), 0xffffffffu, 0, H_TIMEOUT_MS));
	aer = h_aer_submit(c);
	REQUIRE(aer >= 0);
	h_wr32(c, gpunvme_cq_doorbell(6, c->dstrd), 3);
	if (expect_db_event(c, aer, GPUNVME_AER_INFO_INVALID_DB_REG))
		return 1;
	REQUIRE_OK(h_wait_reg(c, gpunvme_cq_doorbell(6, c->dstrd), 0xffffffffu, 0, H_TIMEOUT_MS));
	return 0;
}

TEST_CASE(aer_masking)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	int a1 = h_aer_submit(c), a2 = h_aer_submit(c);
	REQUIRE(a1 >= 0 && a2 >= 0);
	h_wr32(c, gpunvme_sq_doorbell(3, c->dstrd), 1);
	struct gpunvme_cqe first;
	REQUIRE_OK(h_cq_wait(&c->admin, &first, H_TIMEOUT_MS));
	REQUIRE(first.cid == a1 || first.cid == a2);
	REQUIRE_EQ(gpunvme_aer_info(first.dw0), GPUNVME_AER_INFO_INVALID_DB_REG);
	int other = first.cid == a1 ? a2 : a1;
	/* §5.2: after an Error event the controller sends no further Error
	 * events until the host reads the Error log with RAE = 0. */
	h_wr32(c, gpunvme_sq_doorbell(4, c->dstrd), 1);
	REQUIRE_EQ(h_expect_silence(&c->admin, 200), 1);
	REQUIRE_OK(h_get_log(c, GPUNVME_LOG_ERROR, GPUNVME_NSID_ALL, true, 64, 0, c->scratch.iova, 0, &e));
	REQUIRE_ST(e, 0);
	REQUIRE_EQ(h_expect_silence(&c->admin, 200), 1); /* RAE = 1 keeps it masked */
	REQUIRE_OK(h_get_log(c, GPUNVME_LOG_ERROR, GPUNVME_NSID_ALL, false, 64, 0, c->scratch.iova, 0, &e));
	REQUIRE_ST(e, 0);
	/* Re-armed: the held event (or a new one) reaches the other AER. */
	h_wr32(c, gpunvme_sq_doorbell(5, c->dstrd), 1);
	REQUIRE_OK(h_wait_cid(&c->admin, (uint16_t)other, &e, H_TIMEOUT_MS));
	REQUIRE_ST(e, 0);
	REQUIRE_EQ(gpunvme_aer_type(e.dw0), GPUNVME_AER_TYPE_ERROR);
	REQUIRE_EQ(gpunvme_aer_info(e.dw0), GPUNVME_AER_INFO_INVALID_DB_REG);
	return 0;
}

TEST_CASE(bad_admin_opcode)
{
	struct gpunvme_emu_config cfg;
	struct h_ctrl *c;
	struct gpunvme_cqe e;
	h_cfg(&cfg);
	REQUIRE_OK(h_ctrl_up(&c, &cfg));
	static const uint8_t ops[] = { 0x7f, GPUNVME_ADM_NS_MGMT, GPUNVME_ADM_FORMAT_NVM, 0xc5, 0x03 };
	for (size_t i = 0; i < sizeof(ops); i++) {
		struct gpunvme_sqe s = { .opc = ops[i] };
		REQUIRE_OK(h_cmd(&c->admin, &s, &e));
		REQUIRE_ST(e, H_DNR(GPUNVME_SC_INVALID_OPCODE));
		REQUIRE_EQ(e.sqid, 0);
		REQUIRE_EQ(e.cid, s.cid);
	}
	return 0;
}

int main(int argc, char **argv) { return check_main(argc, argv); }
