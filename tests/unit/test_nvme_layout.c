/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Runtime re-check of include/gpunvme/spec/nvme.h. The header already has
 * _Static_asserts; this test repeats the key ones at run time so a compiler
 * or packing surprise shows up as a named test failure, and exercises the
 * register accessors on real register values, which static asserts cannot.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../harness/check.h"
#include "gpunvme/spec/nvme.h"

static void check_layout(void)
{
	/* Submission Queue Entry, §4.2 Figure 105: 64 bytes, PRP1 at dword 6. */
	CHECK_EQ(sizeof(struct gpunvme_sqe), 64);
	CHECK_EQ(offsetof(struct gpunvme_sqe, opc), 0);
	CHECK_EQ(offsetof(struct gpunvme_sqe, flags), 1);
	CHECK_EQ(offsetof(struct gpunvme_sqe, cid), 2);
	CHECK_EQ(offsetof(struct gpunvme_sqe, nsid), 4);
	CHECK_EQ(offsetof(struct gpunvme_sqe, mptr), 16);
	CHECK_EQ(offsetof(struct gpunvme_sqe, prp1), 24);
	CHECK_EQ(offsetof(struct gpunvme_sqe, prp2), 32);
	CHECK_EQ(offsetof(struct gpunvme_sqe, cdw), 40);
	/* Read/Write, §6.9 Figure 372-375: SLBA cdw10-11, NLB cdw12[15:0]. */
	CHECK_EQ(offsetof(struct gpunvme_sqe, rw.slba), 40);
	CHECK_EQ(offsetof(struct gpunvme_sqe, rw.nlb), 48);
	CHECK_EQ(offsetof(struct gpunvme_sqe, rw.control), 50);
	CHECK_EQ(offsetof(struct gpunvme_sqe, rw.dsmgmt), 52);
	CHECK_EQ(offsetof(struct gpunvme_sqe, rw.reftag), 56);
	CHECK_EQ(offsetof(struct gpunvme_sqe, rw.apptag), 60);
	/* Create I/O queue, §5.3/§5.4: QID cdw10[15:0], QSIZE cdw10[31:16]. */
	CHECK_EQ(offsetof(struct gpunvme_sqe, queue.qid), 40);
	CHECK_EQ(offsetof(struct gpunvme_sqe, queue.qsize), 42);
	CHECK_EQ(offsetof(struct gpunvme_sqe, queue.qflags), 44);
	CHECK_EQ(offsetof(struct gpunvme_sqe, queue.cqid_iv), 46);
	CHECK_EQ(offsetof(struct gpunvme_sqe, identify.cns), 40);
	CHECK_EQ(offsetof(struct gpunvme_sqe, identify.cntid), 42);
	CHECK_EQ(offsetof(struct gpunvme_sqe, identify.csi), 47);
	CHECK_EQ(offsetof(struct gpunvme_sqe, identify.uuid_idx), 60);
	CHECK_EQ(offsetof(struct gpunvme_sqe, dsm.nr), 40);
	CHECK_EQ(offsetof(struct gpunvme_sqe, dsm.attr), 44);

	/* Completion Queue Entry, §4.6 Figure 121: 16 bytes, status in DW3. */
	CHECK_EQ(sizeof(struct gpunvme_cqe), 16);
	CHECK_EQ(offsetof(struct gpunvme_cqe, dw0), 0);
	CHECK_EQ(offsetof(struct gpunvme_cqe, dw1), 4);
	CHECK_EQ(offsetof(struct gpunvme_cqe, sqhd), 8);
	CHECK_EQ(offsetof(struct gpunvme_cqe, sqid), 10);
	CHECK_EQ(offsetof(struct gpunvme_cqe, cid), 12);
	CHECK_EQ(offsetof(struct gpunvme_cqe, status), 14);

	/* DSM range, §6.7 Figure 364. */
	CHECK_EQ(sizeof(struct gpunvme_dsm_range), 16);
	CHECK_EQ(offsetof(struct gpunvme_dsm_range, nlb), 4);
	CHECK_EQ(offsetof(struct gpunvme_dsm_range, slba), 8);

	/* Identify Controller, §5.15.2.1 Figure 247. */
	CHECK_EQ(sizeof(struct gpunvme_id_ctrl), 4096);
	CHECK_EQ(offsetof(struct gpunvme_id_ctrl, sn), 4);
	CHECK_EQ(offsetof(struct gpunvme_id_ctrl, mn), 24);
	CHECK_EQ(offsetof(struct gpunvme_id_ctrl, fr), 64);
	CHECK_EQ(offsetof(struct gpunvme_id_ctrl, mdts), 77);
	CHECK_EQ(offsetof(struct gpunvme_id_ctrl, cntlid), 78);
	CHECK_EQ(offsetof(struct gpunvme_id_ctrl, ver), 80);
	CHECK_EQ(offsetof(struct gpunvme_id_ctrl, oacs), 256);
	CHECK_EQ(offsetof(struct gpunvme_id_ctrl, aerl), 259);
	CHECK_EQ(offsetof(struct gpunvme_id_ctrl, lpa), 261);
	CHECK_EQ(offsetof(struct gpunvme_id_ctrl, elpe), 262);
	CHECK_EQ(offsetof(struct gpunvme_id_ctrl, sqes), 512);
	CHECK_EQ(offsetof(struct gpunvme_id_ctrl, cqes), 513);
	CHECK_EQ(offsetof(struct gpunvme_id_ctrl, maxcmd), 514);
	CHECK_EQ(offsetof(struct gpunvme_id_ctrl, nn), 516);
	CHECK_EQ(offsetof(struct gpunvme_id_ctrl, oncs), 520);
	CHECK_EQ(offsetof(struct gpunvme_id_ctrl, vwc), 525);
	CHECK_EQ(offsetof(struct gpunvme_id_ctrl, sgls), 536);
	CHECK_EQ(offsetof(struct gpunvme_id_ctrl, subnqn), 768);
	CHECK_EQ(offsetof(struct gpunvme_id_ctrl, psd), 2048);
	CHECK_EQ(offsetof(struct gpunvme_id_ctrl, vs), 3072);
	CHECK_EQ(sizeof(struct gpunvme_psd), 32);

	/* Identify Namespace, §5.15.2.2 Figure 249. */
	CHECK_EQ(sizeof(struct gpunvme_id_ns), 4096);
	CHECK_EQ(offsetof(struct gpunvme_id_ns, ncap), 8);
	CHECK_EQ(offsetof(struct gpunvme_id_ns, nuse), 16);
	CHECK_EQ(offsetof(struct gpunvme_id_ns, nlbaf), 25);
	CHECK_EQ(offsetof(struct gpunvme_id_ns, flbas), 26);
	CHECK_EQ(offsetof(struct gpunvme_id_ns, dlfeat), 33);
	CHECK_EQ(offsetof(struct gpunvme_id_ns, nvmcap), 48);
	CHECK_EQ(offsetof(struct gpunvme_id_ns, nguid), 104);
	CHECK_EQ(offsetof(struct gpunvme_id_ns, eui64), 120);
	CHECK_EQ(offsetof(struct gpunvme_id_ns, lbaf), 128);
	CHECK_EQ(offsetof(struct gpunvme_id_ns, lbaf[1]), 132);
	CHECK_EQ(offsetof(struct gpunvme_id_ns, lbaf[15]), 188);
	CHECK_EQ(offsetof(struct gpunvme_id_ns, vs), 384);
	CHECK_EQ(sizeof(struct gpunvme_lbaf), 4);

	/* Log pages, §5.14.1.1 Figure 196 and §5.14.1.2 Figure 197. */
	CHECK_EQ(sizeof(struct gpunvme_error_log), 64);
	CHECK_EQ(offsetof(struct gpunvme_error_log, status), 12);
	CHECK_EQ(offsetof(struct gpunvme_error_log, lba), 16);
	CHECK_EQ(offsetof(struct gpunvme_error_log, nsid), 24);
	CHECK_EQ(sizeof(struct gpunvme_smart_log), 512);
	CHECK_EQ(offsetof(struct gpunvme_smart_log, temperature), 1);
	CHECK_EQ(offsetof(struct gpunvme_smart_log, data_units_read), 32);
	CHECK_EQ(offsetof(struct gpunvme_smart_log, host_reads), 64);
	CHECK_EQ(offsetof(struct gpunvme_smart_log, power_on_hours), 128);
	CHECK_EQ(offsetof(struct gpunvme_smart_log, media_errors), 160);
	CHECK_EQ(offsetof(struct gpunvme_smart_log, num_err_log_entries), 176);
	CHECK_EQ(offsetof(struct gpunvme_smart_log, temp_sensor), 200);
}

/* A union member written through one view must read back through the raw
 * dwords at the spec position: this is what a controller sees. */
static void check_sqe_views(void)
{
	struct gpunvme_sqe s;
	uint8_t raw[64];

	memset(&s, 0, sizeof(s));
	s.opc = GPUNVME_CMD_READ;
	s.cid = 0xbeef;
	s.rw.slba = 0x1122334455667788ull;
	s.rw.nlb = 7;
	s.rw.control = GPUNVME_RW_FUA;
	memcpy(raw, &s, sizeof(raw));
	CHECK_EQ(raw[0], 0x02);
	CHECK_EQ(raw[2] | raw[3] << 8, 0xbeef);
	CHECK_EQ(s.cdw[0], 0x55667788u);   /* cdw10 = SLBA low */
	CHECK_EQ(s.cdw[1], 0x11223344u);   /* cdw11 = SLBA high */
	CHECK_EQ(s.cdw[2], 0x40000007u);   /* cdw12: FUA bit 30, NLB 7 */

	memset(&s, 0, sizeof(s));
	s.queue.qid = 3;
	s.queue.qsize = 255;
	s.queue.qflags = GPUNVME_Q_PC;
	s.queue.cqid_iv = 3;
	CHECK_EQ(s.cdw[0], (255u << 16) | 3u);  /* §5.4 Figure 153 */
	CHECK_EQ(s.cdw[1], (3u << 16) | 1u);    /* CQID, PC */
}

static void check_cap(void)
{
	/* A CAP value as read from a real controller. Decoded by hand
	 * per §3.1.1 Figure 79:
	 *   MQES 3fff (16384 entries), CQR 1, AMS 01b (WRR), TO 3ch (30 s),
	 *   DSTRD 0, NSSRS 1, CSS 01h (NVM), BPS 0, MPSMIN 0 (4 KiB),
	 *   MPSMAX 4 (64 KiB), PMRS 0, CMBS 0. */
	const uint64_t cap = 0x004000303c033fffull;

	CHECK_EQ(gpunvme_cap_mqes(cap), 0x3fff);
	CHECK_EQ(gpunvme_cap_cqr(cap), 1);
	CHECK_EQ(gpunvme_cap_ams(cap), 1);
	CHECK_EQ(gpunvme_cap_to(cap), 0x3c);
	CHECK_EQ(gpunvme_cap_dstrd(cap), 0);
	CHECK_EQ(gpunvme_cap_nssrs(cap), 1);
	CHECK_EQ(gpunvme_cap_css(cap), GPUNVME_CAP_CSS_NVM);
	CHECK_EQ(gpunvme_cap_bps(cap), 0);
	CHECK_EQ(gpunvme_cap_mpsmin(cap), 0);
	CHECK_EQ(gpunvme_cap_mpsmax(cap), 4);
	CHECK_EQ(gpunvme_cap_pmrs(cap), 0);
	CHECK_EQ(gpunvme_cap_cmbs(cap), 0);

	/* Every field at its maximum, one at a time, so no accessor leaks
	 * into its neighbour. */
	CHECK_EQ(gpunvme_cap_dstrd(0xfull << 32), 0xf);
	CHECK_EQ(gpunvme_cap_nssrs(0xfull << 32), 0);
	CHECK_EQ(gpunvme_cap_css(0xffull << 37), 0xff);
	CHECK_EQ(gpunvme_cap_bps(0xffull << 37), 0);
	CHECK_EQ(gpunvme_cap_nssrs(0xffull << 37), 0);
	CHECK_EQ(gpunvme_cap_mpsmax(0xfull << 48), 0);
	CHECK_EQ(gpunvme_cap_mpsmin(0xfull << 52), 0);
	CHECK_EQ(gpunvme_cap_pmrs(1ull << 56), 1);
	CHECK_EQ(gpunvme_cap_cmbs(1ull << 57), 1);
	CHECK_EQ(gpunvme_cap_cmbs(1ull << 56), 0);
	CHECK_EQ(gpunvme_cap_mqes(~0ull), 0xffff);
	CHECK_EQ(gpunvme_cap_to(~0ull), 0xff);
}

static void check_regs(void)
{
	/* VS 1.4.0 = 0x00010400 (§3.1.2). */
	CHECK_EQ(GPUNVME_VS(1, 4, 0), 0x00010400u);
	CHECK_EQ(gpunvme_vs_mjr(0x00010400u), 1);
	CHECK_EQ(gpunvme_vs_mnr(0x00010400u), 4);
	CHECK_EQ(gpunvme_vs_ter(0x00010302u), 2);

	/* The CC a typical driver writes: IOCQES 4, IOSQES 6, MPS 0, CSS 0,
	 * EN = 0x00460001 (§3.1.5). */
	uint32_t cc = GPUNVME_CC_EN | 6u << GPUNVME_CC_IOSQES_SHIFT |
		      4u << GPUNVME_CC_IOCQES_SHIFT;
	CHECK_EQ(cc, 0x00460001u);
	CHECK_EQ(gpunvme_cc_en(cc), 1);
	CHECK_EQ(gpunvme_cc_iosqes(cc), 6);
	CHECK_EQ(gpunvme_cc_iocqes(cc), 4);
	CHECK_EQ(gpunvme_cc_css(cc), 0);
	CHECK_EQ(gpunvme_cc_mps(cc), 0);
	CHECK_EQ(gpunvme_cc_shn(cc), 0);
	cc = 7u << GPUNVME_CC_CSS_SHIFT | 0xfu << GPUNVME_CC_MPS_SHIFT |
	     7u << GPUNVME_CC_AMS_SHIFT | GPUNVME_CC_SHN_NORMAL << GPUNVME_CC_SHN_SHIFT;
	CHECK_EQ(gpunvme_cc_css(cc), 7);
	CHECK_EQ(gpunvme_cc_mps(cc), 0xf);
	CHECK_EQ(gpunvme_cc_ams(cc), 7);
	CHECK_EQ(gpunvme_cc_shn(cc), GPUNVME_CC_SHN_NORMAL);
	CHECK_EQ(cc & GPUNVME_CC_SHN_MASK, 1u << 14);
	CHECK_EQ(gpunvme_cc_en(cc), 0);

	/* CSTS (§3.1.6): RDY, CFS, SHST = complete. */
	uint32_t csts = GPUNVME_CSTS_RDY | GPUNVME_CSTS_CFS |
			GPUNVME_SHST_COMPLETE << GPUNVME_CSTS_SHST_SHIFT;
	CHECK_EQ(csts, 0x0bu);
	CHECK_EQ(gpunvme_csts_rdy(csts), 1);
	CHECK_EQ(gpunvme_csts_cfs(csts), 1);
	CHECK_EQ(gpunvme_csts_shst(csts), GPUNVME_SHST_COMPLETE);
	CHECK_EQ(gpunvme_csts_shst(GPUNVME_CSTS_NSSRO | GPUNVME_CSTS_PP), 0);

	/* AQA (§3.1.8): 32-entry SQ, 64-entry CQ, both 0's based. */
	uint32_t aqa = GPUNVME_AQA(31, 63);
	CHECK_EQ(aqa, 0x003f001fu);
	CHECK_EQ(gpunvme_aqa_asqs(aqa), 31);
	CHECK_EQ(gpunvme_aqa_acqs(aqa), 63);
	CHECK_EQ(gpunvme_aqa_asqs(0xffffffffu), GPUNVME_AQA_MAX);

	/* CMBLOC/CMBSZ (§3.1.11-12). */
	CHECK_EQ(gpunvme_cmbloc_bir(0x12345002u), 2);
	CHECK_EQ(gpunvme_cmbloc_ofst(0x12345002u), 0x12345);
	CHECK_EQ(gpunvme_cmbsz_szu(0x00010200u), 2);
	CHECK_EQ(gpunvme_cmbsz_sz(0x00010200u), 0x10);

	CHECK_EQ(GPUNVME_NSSR_MAGIC, 0x4e564d65u);  /* "NVMe" */
	CHECK(memcmp("NVMe", &(uint32_t){__builtin_bswap32(GPUNVME_NSSR_MAGIC)}, 4) == 0);
}

static void check_doorbells(void)
{
	/* §3.1.24/25: SQ y tail doorbell at 1000h + (2y * (4 << DSTRD)),
	 * CQ y head at 1000h + ((2y + 1) * (4 << DSTRD)). Hand-computed
	 * values for queue 1 and 3 at each stride a driver is likely to meet. */
	static const struct {
		uint32_t dstrd, qid, sq, cq;
	} want[] = {
		{0, 0, 0x1000, 0x1004}, {0, 1, 0x1008, 0x100c}, {0, 3, 0x1018, 0x101c},
		{1, 0, 0x1000, 0x1008}, {1, 1, 0x1010, 0x1018}, {1, 3, 0x1030, 0x1038},
		{2, 0, 0x1000, 0x1010}, {2, 1, 0x1020, 0x1030}, {2, 3, 0x1060, 0x1070},
		{3, 0, 0x1000, 0x1020}, {3, 1, 0x1040, 0x1060}, {3, 3, 0x10c0, 0x10e0},
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		CHECK_EQ(gpunvme_sq_doorbell(want[i].qid, want[i].dstrd), want[i].sq);
		CHECK_EQ(gpunvme_cq_doorbell(want[i].qid, want[i].dstrd), want[i].cq);
	}
	/* And the general formula for every queue of a 64-queue controller. */
	for (uint32_t d = 0; d <= 3; d++)
		for (uint32_t q = 0; q <= 64; q++) {
			uint32_t stride = 4u << d;
			CHECK_EQ(gpunvme_sq_doorbell(q, d), 0x1000 + 2 * q * stride);
			CHECK_EQ(gpunvme_cq_doorbell(q, d), 0x1000 + (2 * q + 1) * stride);
			CHECK_EQ(gpunvme_cq_doorbell(q, d) - gpunvme_sq_doorbell(q, d), stride);
		}
}

static void check_status_fields(void)
{
	/* CQE DW3 bits 31:16 = phase + Status Field (§4.6, Figure 124). A CQE
	 * status of 0x8101 is phase 1, DNR, SCT 0, SC 80h (LBA Out of Range)
	 * shifted left by one. */
	uint16_t sf = (uint16_t)((GPUNVME_STATUS_DNR | GPUNVME_SC_LBA_RANGE) << 1 | 1);
	CHECK_EQ(sf, 0x8101);
	CHECK_EQ(gpunvme_cqe_phase(sf), 1);
	uint16_t st = gpunvme_cqe_status(sf);
	CHECK_EQ(st, 0x4080);
	CHECK_EQ(gpunvme_status_sc(st), 0x80);
	CHECK_EQ(gpunvme_status_sct(st), 0);
	CHECK_EQ(gpunvme_status_dnr(st), 1);
	CHECK_EQ(gpunvme_status_more(st), 0);
	CHECK_EQ(gpunvme_status_code(st), GPUNVME_SC_LBA_RANGE);

	st = GPUNVME_STATUS_MORE | 3u << 11 | GPUNVME_SC_UNRECOVERED_READ;
	CHECK_EQ(gpunvme_status_sct(st), GPUNVME_SCT_MEDIA);
	CHECK_EQ(gpunvme_status_sc(st), 0x81);
	CHECK_EQ(gpunvme_status_crd(st), 3);
	CHECK_EQ(gpunvme_status_more(st), 1);
	CHECK_EQ(gpunvme_status_dnr(st), 0);
	CHECK_EQ(gpunvme_status_code(st), GPUNVME_SC_UNRECOVERED_READ);

	/* AER completion dword 0 (§5.2, Figure 146): type Error, info
	 * "Invalid Doorbell Write Value", log page 01h. */
	uint32_t dw0 = GPUNVME_AER_TYPE_ERROR | GPUNVME_AER_INFO_INVALID_DB_VALUE << 8 |
		       (uint32_t)GPUNVME_LOG_ERROR << 16;
	CHECK_EQ(gpunvme_aer_type(dw0), GPUNVME_AER_TYPE_ERROR);
	CHECK_EQ(gpunvme_aer_info(dw0), GPUNVME_AER_INFO_INVALID_DB_VALUE);
	CHECK_EQ(gpunvme_aer_log(dw0), GPUNVME_LOG_ERROR);

	struct gpunvme_id_ns ns;
	memset(&ns, 0, sizeof(ns));
	ns.flbas = 0x13;  /* bit 4 = metadata at end of LBA; index in 3:0 */
	CHECK_EQ(gpunvme_id_ns_flbas_index(&ns), 3);
}

int main(void)
{
	check_layout();
	check_sqe_views();
	check_cap();
	check_regs();
	check_doorbells();
	check_status_fields();
	return check_finish("test_nvme_layout");
}
