/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * NVMe data structures, exact to the NVM Express Base Specification 1.4
 * (section numbers below refer to revision 1.4c). Plain C, usable from host
 * code and from CUDA device code. Every structure has compile-time size and
 * offset checks at the end of this file.
 *
 * All multi-byte fields are little-endian on the wire; the project only
 * supports little-endian hosts (checked below), so fields are used directly.
 *
 * Status values: throughout the project an NVMe status is a uint16_t laid out
 * as the Status Field of a completion shifted right by one (phase removed):
 *   bits 7:0 SC, 10:8 SCT, 12:11 CRD, 13 M, 14 DNR.
 * GPUNVME_SC_* constants hold SCT and SC together (SCT << 8 | SC).
 */
#ifndef GPUNVME_NVME_H
#define GPUNVME_NVME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define GPUNVME_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define GPUNVME_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

#if defined(__CUDACC__)
#define GPUNVME_HD __host__ __device__ __forceinline__
#else
#define GPUNVME_HD static inline
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gpu-nvme-direct supports little-endian hosts only"
#endif

/* ---------------------------------------------------------------------- */
/* Controller registers (§3.1, Figure 78)                                  */
/* ---------------------------------------------------------------------- */

enum {
	GPUNVME_REG_CAP = 0x00,     /* Controller Capabilities, 64 bit */
	GPUNVME_REG_VS = 0x08,      /* Version */
	GPUNVME_REG_INTMS = 0x0c,   /* Interrupt Mask Set */
	GPUNVME_REG_INTMC = 0x10,   /* Interrupt Mask Clear */
	GPUNVME_REG_CC = 0x14,      /* Controller Configuration */
	GPUNVME_REG_CSTS = 0x1c,    /* Controller Status */
	GPUNVME_REG_NSSR = 0x20,    /* NVM Subsystem Reset */
	GPUNVME_REG_AQA = 0x24,     /* Admin Queue Attributes */
	GPUNVME_REG_ASQ = 0x28,     /* Admin SQ Base Address, 64 bit */
	GPUNVME_REG_ACQ = 0x30,     /* Admin CQ Base Address, 64 bit */
	GPUNVME_REG_CMBLOC = 0x38,  /* Controller Memory Buffer Location */
	GPUNVME_REG_CMBSZ = 0x3c,   /* Controller Memory Buffer Size */
	GPUNVME_REG_DBS = 0x1000,   /* first doorbell (§3.1.24) */
};

/* CAP (§3.1.1) */
GPUNVME_HD uint32_t gpunvme_cap_mqes(uint64_t cap) { return (uint32_t)(cap & 0xffff); } /* 0's based */
GPUNVME_HD uint32_t gpunvme_cap_cqr(uint64_t cap) { return (uint32_t)(cap >> 16) & 1; }
GPUNVME_HD uint32_t gpunvme_cap_ams(uint64_t cap) { return (uint32_t)(cap >> 17) & 3; }
GPUNVME_HD uint32_t gpunvme_cap_to(uint64_t cap) { return (uint32_t)(cap >> 24) & 0xff; } /* 500 ms units */
GPUNVME_HD uint32_t gpunvme_cap_dstrd(uint64_t cap) { return (uint32_t)(cap >> 32) & 0xf; }
GPUNVME_HD uint32_t gpunvme_cap_nssrs(uint64_t cap) { return (uint32_t)(cap >> 36) & 1; }
GPUNVME_HD uint32_t gpunvme_cap_css(uint64_t cap) { return (uint32_t)(cap >> 37) & 0xff; }
GPUNVME_HD uint32_t gpunvme_cap_bps(uint64_t cap) { return (uint32_t)(cap >> 45) & 1; }
GPUNVME_HD uint32_t gpunvme_cap_mpsmin(uint64_t cap) { return (uint32_t)(cap >> 48) & 0xf; } /* 2^(12+n) */
GPUNVME_HD uint32_t gpunvme_cap_mpsmax(uint64_t cap) { return (uint32_t)(cap >> 52) & 0xf; }
GPUNVME_HD uint32_t gpunvme_cap_pmrs(uint64_t cap) { return (uint32_t)(cap >> 56) & 1; }
GPUNVME_HD uint32_t gpunvme_cap_cmbs(uint64_t cap) { return (uint32_t)(cap >> 57) & 1; }

#define GPUNVME_CAP_CSS_NVM 0x01u  /* CAP.CSS bit 0: NVM command set */

/* VS (§3.1.2) */
#define GPUNVME_VS(mjr, mnr, ter) (((uint32_t)(mjr) << 16) | ((uint32_t)(mnr) << 8) | (uint32_t)(ter))
GPUNVME_HD uint32_t gpunvme_vs_mjr(uint32_t vs) { return vs >> 16; }
GPUNVME_HD uint32_t gpunvme_vs_mnr(uint32_t vs) { return (vs >> 8) & 0xff; }
GPUNVME_HD uint32_t gpunvme_vs_ter(uint32_t vs) { return vs & 0xff; }

/* CC (§3.1.5) */
#define GPUNVME_CC_EN          (1u << 0)
#define GPUNVME_CC_CSS_SHIFT   4
#define GPUNVME_CC_MPS_SHIFT   7
#define GPUNVME_CC_AMS_SHIFT   11
#define GPUNVME_CC_SHN_SHIFT   14
#define GPUNVME_CC_IOSQES_SHIFT 16
#define GPUNVME_CC_IOCQES_SHIFT 20
#define GPUNVME_CC_SHN_MASK    (3u << GPUNVME_CC_SHN_SHIFT)
#define GPUNVME_CC_SHN_NONE    0u
#define GPUNVME_CC_SHN_NORMAL  1u
#define GPUNVME_CC_SHN_ABRUPT  2u
GPUNVME_HD uint32_t gpunvme_cc_en(uint32_t cc) { return cc & 1; }
GPUNVME_HD uint32_t gpunvme_cc_css(uint32_t cc) { return (cc >> 4) & 7; }
GPUNVME_HD uint32_t gpunvme_cc_mps(uint32_t cc) { return (cc >> 7) & 0xf; }
GPUNVME_HD uint32_t gpunvme_cc_ams(uint32_t cc) { return (cc >> 11) & 7; }
GPUNVME_HD uint32_t gpunvme_cc_shn(uint32_t cc) { return (cc >> 14) & 3; }
GPUNVME_HD uint32_t gpunvme_cc_iosqes(uint32_t cc) { return (cc >> 16) & 0xf; }
GPUNVME_HD uint32_t gpunvme_cc_iocqes(uint32_t cc) { return (cc >> 20) & 0xf; }

/* CSTS (§3.1.6) */
#define GPUNVME_CSTS_RDY        (1u << 0)
#define GPUNVME_CSTS_CFS        (1u << 1)
#define GPUNVME_CSTS_SHST_SHIFT 2
#define GPUNVME_CSTS_SHST_MASK  (3u << 2)
#define GPUNVME_CSTS_NSSRO      (1u << 4)
#define GPUNVME_CSTS_PP         (1u << 5)
#define GPUNVME_SHST_NORMAL     0u  /* no shutdown requested */
#define GPUNVME_SHST_OCCURRING  1u
#define GPUNVME_SHST_COMPLETE   2u
GPUNVME_HD uint32_t gpunvme_csts_rdy(uint32_t csts) { return csts & 1; }
GPUNVME_HD uint32_t gpunvme_csts_cfs(uint32_t csts) { return (csts >> 1) & 1; }
GPUNVME_HD uint32_t gpunvme_csts_shst(uint32_t csts) { return (csts >> 2) & 3; }

/* AQA (§3.1.8): both sizes are 0's based, 12 bits each */
#define GPUNVME_AQA(asqs0, acqs0) (((uint32_t)(acqs0) << 16) | (uint32_t)(asqs0))
GPUNVME_HD uint32_t gpunvme_aqa_asqs(uint32_t aqa) { return aqa & 0xfff; }
GPUNVME_HD uint32_t gpunvme_aqa_acqs(uint32_t aqa) { return (aqa >> 16) & 0xfff; }
#define GPUNVME_AQA_MAX 4095u  /* 0's based: admin queues hold at most 4096 entries */

/* NSSR (§3.1.7): writing this value starts a subsystem reset when CAP.NSSRS */
#define GPUNVME_NSSR_MAGIC 0x4e564d65u  /* "NVMe" */

/* CMBLOC / CMBSZ (§3.1.11, §3.1.12) */
GPUNVME_HD uint32_t gpunvme_cmbloc_bir(uint32_t v) { return v & 7; }
GPUNVME_HD uint32_t gpunvme_cmbloc_ofst(uint32_t v) { return v >> 12; }
GPUNVME_HD uint32_t gpunvme_cmbsz_szu(uint32_t v) { return (v >> 8) & 0xf; }
GPUNVME_HD uint32_t gpunvme_cmbsz_sz(uint32_t v) { return v >> 12; }

/* Doorbells (§3.1.24, §3.1.25): SQ y tail at 0x1000 + (2y)(4 << DSTRD),
 * CQ y head at 0x1000 + (2y + 1)(4 << DSTRD). */
GPUNVME_HD uint32_t gpunvme_sq_doorbell(uint32_t qid, uint32_t dstrd)
{
	return GPUNVME_REG_DBS + (2 * qid) * (4u << dstrd);
}
GPUNVME_HD uint32_t gpunvme_cq_doorbell(uint32_t qid, uint32_t dstrd)
{
	return GPUNVME_REG_DBS + (2 * qid + 1) * (4u << dstrd);
}

/* ---------------------------------------------------------------------- */
/* Submission and completion queue entries (§4.2, §4.6)                    */
/* ---------------------------------------------------------------------- */

/* Command Dword 0 flags byte: FUSE bits 1:0, PSDT bits 7:6 (Figure 105) */
#define GPUNVME_FLAGS_FUSE_MASK 0x03u
#define GPUNVME_FLAGS_PSDT_MASK 0xc0u
#define GPUNVME_PSDT_PRP        0x00u

/* Read/Write control (cdw12 bits 31:16) */
#define GPUNVME_RW_LR  (1u << 15)
#define GPUNVME_RW_FUA (1u << 14)

struct gpunvme_sqe {
	uint8_t opc;
	uint8_t flags;     /* FUSE, PSDT */
	uint16_t cid;
	uint32_t nsid;
	uint32_t cdw2;
	uint32_t cdw3;
	uint64_t mptr;
	uint64_t prp1;     /* Data Pointer: PRP Entry 1 (§4.3) */
	uint64_t prp2;     /* PRP Entry 2 or PRP List pointer */
	union {
		uint32_t cdw[6];  /* cdw10 .. cdw15 */
		struct {          /* Read, Write, Write Zeroes (§6.9, §6.15, §6.16) */
			uint64_t slba;
			uint16_t nlb;      /* 0's based */
			uint16_t control;  /* LR, FUA, PRINFO, DTYPE */
			uint32_t dsmgmt;
			uint32_t reftag;
			uint16_t apptag;
			uint16_t appmask;
		} rw;
		struct {          /* Identify (§5.15) */
			uint8_t cns;
			uint8_t rsvd41;
			uint16_t cntid;
			uint16_t nvmsetid;
			uint8_t rsvd46;
			uint8_t csi;
			uint32_t rsvd48[3];
			uint32_t uuid_idx;
		} identify;
		struct {          /* Create I/O SQ / CQ, Delete I/O SQ / CQ (§5.3-§5.6) */
			uint16_t qid;
			uint16_t qsize;    /* 0's based */
			uint16_t qflags;   /* PC bit 0; CQ: IEN bit 1; SQ: QPRIO bits 2:1 */
			uint16_t cqid_iv;  /* SQ: CQID; CQ: interrupt vector */
			uint32_t rsvd48[4];
		} queue;
		struct {          /* Dataset Management (§6.7) */
			uint32_t nr;       /* bits 7:0, 0's based number of ranges */
			uint32_t attr;     /* IDR bit 0, IDW bit 1, AD bit 2 */
			uint32_t rsvd48[4];
		} dsm;
	};
};

/* Queue creation flags */
#define GPUNVME_Q_PC   (1u << 0)  /* physically contiguous */
#define GPUNVME_CQ_IEN (1u << 1)  /* interrupts enabled */

/* Completion queue entry (§4.6, Figure 121) */
struct gpunvme_cqe {
	uint32_t dw0;      /* command specific */
	uint32_t dw1;
	uint16_t sqhd;     /* SQ head pointer */
	uint16_t sqid;
	uint16_t cid;
	uint16_t status;   /* bit 0 phase tag, bits 15:1 Status Field */
};

GPUNVME_HD uint16_t gpunvme_cqe_phase(uint16_t status_field) { return status_field & 1; }
GPUNVME_HD uint16_t gpunvme_cqe_status(uint16_t status_field) { return status_field >> 1; }

/* Status value helpers (layout at the top of this file). */
GPUNVME_HD uint32_t gpunvme_status_sc(uint16_t st) { return st & 0xff; }
GPUNVME_HD uint32_t gpunvme_status_sct(uint16_t st) { return (st >> 8) & 7; }
GPUNVME_HD uint32_t gpunvme_status_crd(uint16_t st) { return (st >> 11) & 3; }
GPUNVME_HD uint32_t gpunvme_status_more(uint16_t st) { return (st >> 13) & 1; }
GPUNVME_HD uint32_t gpunvme_status_dnr(uint16_t st) { return (st >> 14) & 1; }
GPUNVME_HD uint32_t gpunvme_status_code(uint16_t st) { return st & 0x7ff; } /* SCT|SC */

#define GPUNVME_STATUS_MORE 0x2000u
#define GPUNVME_STATUS_DNR  0x4000u

/* Status Code Types (§4.6.1.2, Figure 125) */
enum {
	GPUNVME_SCT_GENERIC = 0x0,
	GPUNVME_SCT_CMD_SPECIFIC = 0x1,
	GPUNVME_SCT_MEDIA = 0x2,
	GPUNVME_SCT_PATH = 0x3,
	GPUNVME_SCT_VENDOR = 0x7,
};

/* Status codes, SCT << 8 | SC (§4.6.1.2.1-§4.6.1.2.3) */
enum {
	/* Generic Command Status (Figure 126 / 127) */
	GPUNVME_SC_SUCCESS = 0x000,
	GPUNVME_SC_INVALID_OPCODE = 0x001,
	GPUNVME_SC_INVALID_FIELD = 0x002,
	GPUNVME_SC_CID_CONFLICT = 0x003,
	GPUNVME_SC_DATA_XFER_ERROR = 0x004,
	GPUNVME_SC_POWER_LOSS_ABORT = 0x005,
	GPUNVME_SC_INTERNAL = 0x006,
	GPUNVME_SC_ABORT_REQ = 0x007,
	GPUNVME_SC_ABORT_SQ_DELETED = 0x008,
	GPUNVME_SC_ABORT_FUSE_FAIL = 0x009,
	GPUNVME_SC_ABORT_FUSE_MISSING = 0x00a,
	GPUNVME_SC_INVALID_NSID = 0x00b,
	GPUNVME_SC_CMD_SEQ_ERROR = 0x00c,
	GPUNVME_SC_INVALID_SGL_SEG_DESC = 0x00d,
	GPUNVME_SC_INVALID_NUM_SGL_DESC = 0x00e,
	GPUNVME_SC_DATA_SGL_LEN_INVALID = 0x00f,
	GPUNVME_SC_MD_SGL_LEN_INVALID = 0x010,
	GPUNVME_SC_SGL_DESC_TYPE_INVALID = 0x011,
	GPUNVME_SC_INVALID_USE_OF_CMB = 0x012,
	GPUNVME_SC_INVALID_PRP_OFFSET = 0x013,
	GPUNVME_SC_ATOMIC_WRITE_UNIT_EXCEEDED = 0x014,
	GPUNVME_SC_OPERATION_DENIED = 0x015,
	GPUNVME_SC_SGL_OFFSET_INVALID = 0x016,
	GPUNVME_SC_HOSTID_INCONSISTENT = 0x018,
	GPUNVME_SC_KEEP_ALIVE_EXPIRED = 0x019,
	GPUNVME_SC_KEEP_ALIVE_INVALID = 0x01a,
	GPUNVME_SC_ABORT_PREEMPT = 0x01b,
	GPUNVME_SC_SANITIZE_FAILED = 0x01c,
	GPUNVME_SC_SANITIZE_IN_PROGRESS = 0x01d,
	GPUNVME_SC_SGL_DATA_BLOCK_GRAN_INVALID = 0x01e,
	GPUNVME_SC_CMD_NOT_SUP_CMB_QUEUE = 0x01f,
	GPUNVME_SC_NS_WRITE_PROTECTED = 0x020,
	GPUNVME_SC_CMD_INTERRUPTED = 0x021,
	GPUNVME_SC_TRANSIENT_TRANSPORT = 0x022,
	GPUNVME_SC_LBA_RANGE = 0x080,
	GPUNVME_SC_CAP_EXCEEDED = 0x081,
	GPUNVME_SC_NS_NOT_READY = 0x082,
	GPUNVME_SC_RESERVATION_CONFLICT = 0x083,
	GPUNVME_SC_FORMAT_IN_PROGRESS = 0x084,

	/* Command Specific Status (Figure 128) */
	GPUNVME_SC_INVALID_CQID = 0x100,       /* Completion Queue Invalid */
	GPUNVME_SC_INVALID_QID = 0x101,        /* Invalid Queue Identifier */
	GPUNVME_SC_MAX_QSIZE_EXCEEDED = 0x102, /* Invalid Queue Size */
	GPUNVME_SC_ABORT_LIMIT = 0x103,
	GPUNVME_SC_AER_LIMIT_EXCEEDED = 0x105,
	GPUNVME_SC_INVALID_FW_SLOT = 0x106,
	GPUNVME_SC_INVALID_FW_IMAGE = 0x107,
	GPUNVME_SC_INVALID_IRQ_VECTOR = 0x108,
	GPUNVME_SC_INVALID_LOG_PAGE = 0x109,
	GPUNVME_SC_INVALID_FORMAT = 0x10a,
	GPUNVME_SC_FW_NEEDS_CONV_RESET = 0x10b,
	GPUNVME_SC_INVALID_QUEUE_DEL = 0x10c,
	GPUNVME_SC_FEAT_NOT_SAVEABLE = 0x10d,
	GPUNVME_SC_FEAT_NOT_CHANGEABLE = 0x10e,
	GPUNVME_SC_FEAT_NOT_NS_SPECIFIC = 0x10f,
	GPUNVME_SC_CONFLICTING_ATTRS = 0x180,  /* NVM command set specific */
	GPUNVME_SC_INVALID_PI = 0x181,
	GPUNVME_SC_READ_ONLY = 0x182,

	/* Media and Data Integrity Errors (Figure 130) */
	GPUNVME_SC_WRITE_FAULT = 0x280,
	GPUNVME_SC_UNRECOVERED_READ = 0x281,
	GPUNVME_SC_GUARD_CHECK = 0x282,
	GPUNVME_SC_APPTAG_CHECK = 0x283,
	GPUNVME_SC_REFTAG_CHECK = 0x284,
	GPUNVME_SC_COMPARE_FAILED = 0x285,
	GPUNVME_SC_ACCESS_DENIED = 0x286,
	GPUNVME_SC_DEALLOCATED_LBA = 0x287,
};

/* ---------------------------------------------------------------------- */
/* Opcodes (§5, Figure 139; §6, Figure 346)                                */
/* ---------------------------------------------------------------------- */

enum {
	GPUNVME_ADM_DELETE_SQ = 0x00,
	GPUNVME_ADM_CREATE_SQ = 0x01,
	GPUNVME_ADM_GET_LOG_PAGE = 0x02,
	GPUNVME_ADM_DELETE_CQ = 0x04,
	GPUNVME_ADM_CREATE_CQ = 0x05,
	GPUNVME_ADM_IDENTIFY = 0x06,
	GPUNVME_ADM_ABORT = 0x08,
	GPUNVME_ADM_SET_FEATURES = 0x09,
	GPUNVME_ADM_GET_FEATURES = 0x0a,
	GPUNVME_ADM_ASYNC_EVENT = 0x0c,
	GPUNVME_ADM_NS_MGMT = 0x0d,
	GPUNVME_ADM_FW_COMMIT = 0x10,
	GPUNVME_ADM_FW_DOWNLOAD = 0x11,
	GPUNVME_ADM_DEV_SELF_TEST = 0x14,
	GPUNVME_ADM_NS_ATTACH = 0x15,
	GPUNVME_ADM_KEEP_ALIVE = 0x18,
	GPUNVME_ADM_DIRECTIVE_SEND = 0x19,
	GPUNVME_ADM_DIRECTIVE_RECV = 0x1a,
	GPUNVME_ADM_VIRT_MGMT = 0x1c,
	GPUNVME_ADM_NVME_MI_SEND = 0x1d,
	GPUNVME_ADM_NVME_MI_RECV = 0x1e,
	GPUNVME_ADM_DBBUF_CONFIG = 0x7c,
	GPUNVME_ADM_FORMAT_NVM = 0x80,
	GPUNVME_ADM_SECURITY_SEND = 0x81,
	GPUNVME_ADM_SECURITY_RECV = 0x82,
	GPUNVME_ADM_SANITIZE = 0x84,
	GPUNVME_ADM_GET_LBA_STATUS = 0x86,
};

enum {
	GPUNVME_CMD_FLUSH = 0x00,
	GPUNVME_CMD_WRITE = 0x01,
	GPUNVME_CMD_READ = 0x02,
	GPUNVME_CMD_WRITE_UNCOR = 0x04,
	GPUNVME_CMD_COMPARE = 0x05,
	GPUNVME_CMD_WRITE_ZEROES = 0x08,
	GPUNVME_CMD_DSM = 0x09,
	GPUNVME_CMD_VERIFY = 0x0c,
	GPUNVME_CMD_RESV_REGISTER = 0x0d,
	GPUNVME_CMD_RESV_REPORT = 0x0e,
	GPUNVME_CMD_RESV_ACQUIRE = 0x11,
	GPUNVME_CMD_RESV_RELEASE = 0x15,
};

#define GPUNVME_NSID_ALL 0xffffffffu  /* broadcast NSID (§6.1.2) */

/* Identify CNS values (§5.15.1, Figure 244) */
enum {
	GPUNVME_CNS_NS = 0x00,
	GPUNVME_CNS_CTRL = 0x01,
	GPUNVME_CNS_ACTIVE_NS_LIST = 0x02,
	GPUNVME_CNS_NS_DESC_LIST = 0x03,
};

/* Feature identifiers (§5.21.1, Figure 271) */
enum {
	GPUNVME_FEAT_ARBITRATION = 0x01,
	GPUNVME_FEAT_POWER_MGMT = 0x02,
	GPUNVME_FEAT_LBA_RANGE = 0x03,
	GPUNVME_FEAT_TEMP_THRESH = 0x04,
	GPUNVME_FEAT_ERR_RECOVERY = 0x05,
	GPUNVME_FEAT_VOLATILE_WC = 0x06,
	GPUNVME_FEAT_NUM_QUEUES = 0x07,
	GPUNVME_FEAT_IRQ_COALESCE = 0x08,
	GPUNVME_FEAT_IRQ_CONFIG = 0x09,
	GPUNVME_FEAT_WRITE_ATOMIC = 0x0a,
	GPUNVME_FEAT_ASYNC_EVENT = 0x0b,
	GPUNVME_FEAT_AUTO_PST = 0x0c,
	GPUNVME_FEAT_HOST_MEM_BUF = 0x0d,
	GPUNVME_FEAT_TIMESTAMP = 0x0e,
	GPUNVME_FEAT_KATO = 0x0f,
};

/* Get Features SEL (cdw10 bits 10:8, Figure 283) */
enum {
	GPUNVME_FEAT_SEL_CURRENT = 0,
	GPUNVME_FEAT_SEL_DEFAULT = 1,
	GPUNVME_FEAT_SEL_SAVED = 2,
	GPUNVME_FEAT_SEL_SUPPORTED = 3,
};

/* Log page identifiers (§5.14.1, Figure 191) */
enum {
	GPUNVME_LOG_ERROR = 0x01,
	GPUNVME_LOG_SMART = 0x02,
	GPUNVME_LOG_FW_SLOT = 0x03,
	GPUNVME_LOG_CHANGED_NS = 0x04,
	GPUNVME_LOG_CMD_EFFECTS = 0x05,
};

/* Asynchronous event completion dword 0 (§5.2, Figure 146) */
enum {
	GPUNVME_AER_TYPE_ERROR = 0x0,
	GPUNVME_AER_TYPE_SMART = 0x1,
	GPUNVME_AER_TYPE_NOTICE = 0x2,
	GPUNVME_AER_TYPE_IO_SPECIFIC = 0x6,
	GPUNVME_AER_TYPE_VENDOR = 0x7,
};
enum {  /* Error status information (Figure 147) */
	GPUNVME_AER_INFO_INVALID_DB_REG = 0x00,
	GPUNVME_AER_INFO_INVALID_DB_VALUE = 0x01,
	GPUNVME_AER_INFO_DIAG_FAILURE = 0x02,
	GPUNVME_AER_INFO_PERSISTENT_INTERNAL = 0x03,
	GPUNVME_AER_INFO_TRANSIENT_INTERNAL = 0x04,
	GPUNVME_AER_INFO_FW_IMAGE_LOAD = 0x05,
};
GPUNVME_HD uint32_t gpunvme_aer_type(uint32_t dw0) { return dw0 & 7; }
GPUNVME_HD uint32_t gpunvme_aer_info(uint32_t dw0) { return (dw0 >> 8) & 0xff; }
GPUNVME_HD uint32_t gpunvme_aer_log(uint32_t dw0) { return (dw0 >> 16) & 0xff; }

/* Dataset Management attributes and range (§6.7, Figure 364) */
#define GPUNVME_DSM_IDR (1u << 0)
#define GPUNVME_DSM_IDW (1u << 1)
#define GPUNVME_DSM_AD  (1u << 2)
#define GPUNVME_DSM_MAX_RANGES 256u

struct gpunvme_dsm_range {
	uint32_t cattr;
	uint32_t nlb;      /* NOT 0's based */
	uint64_t slba;
};

/* ---------------------------------------------------------------------- */
/* Identify data structures (§5.15.2)                                      */
/* ---------------------------------------------------------------------- */

struct gpunvme_psd {   /* Power State Descriptor, Figure 248 */
	uint16_t mp;
	uint8_t rsvd2;
	uint8_t flags;     /* MXPS bit 0, NOPS bit 1 */
	uint32_t enlat;
	uint32_t exlat;
	uint8_t rrt;
	uint8_t rrl;
	uint8_t rwt;
	uint8_t rwl;
	uint16_t idlp;
	uint8_t rsvd18;
	uint8_t ips;
	uint16_t actp;
	uint8_t apw_aps;
	uint8_t rsvd23[9];
};

/* Identify Controller data structure (CNS 01h), Figure 247 */
struct gpunvme_id_ctrl {
	uint16_t vid;
	uint16_t ssvid;
	char sn[20];
	char mn[40];
	char fr[8];
	uint8_t rab;
	uint8_t ieee[3];
	uint8_t cmic;
	uint8_t mdts;       /* 2^n units of CAP.MPSMIN; 0 = no limit */
	uint16_t cntlid;
	uint32_t ver;
	uint32_t rtd3r;
	uint32_t rtd3e;
	uint32_t oaes;
	uint32_t ctratt;
	uint16_t rrls;
	uint8_t rsvd102[9];
	uint8_t cntrltype;
	uint8_t fguid[16];
	uint16_t crdt1;
	uint16_t crdt2;
	uint16_t crdt3;
	uint8_t rsvd134[122];
	uint16_t oacs;      /* 256 */
	uint8_t acl;
	uint8_t aerl;
	uint8_t frmw;
	uint8_t lpa;
	uint8_t elpe;
	uint8_t npss;
	uint8_t avscc;
	uint8_t apsta;
	uint16_t wctemp;
	uint16_t cctemp;
	uint16_t mtfa;
	uint32_t hmpre;
	uint32_t hmmin;
	uint8_t tnvmcap[16];
	uint8_t unvmcap[16];
	uint32_t rpmbs;
	uint16_t edstt;
	uint8_t dsto;
	uint8_t fwug;
	uint16_t kas;
	uint16_t hctma;
	uint16_t mntmt;
	uint16_t mxtmt;
	uint32_t sanicap;
	uint32_t hmminds;
	uint16_t hmmaxd;
	uint16_t nsetidmax;
	uint16_t endgidmax;
	uint8_t anatt;
	uint8_t anacap;
	uint32_t anagrpmax;
	uint32_t nanagrpid;
	uint32_t pels;
	uint8_t rsvd356[156];
	uint8_t sqes;       /* 512: bits 3:0 required (min), 7:4 maximum, log2 */
	uint8_t cqes;
	uint16_t maxcmd;
	uint32_t nn;
	uint16_t oncs;
	uint16_t fuses;
	uint8_t fna;
	uint8_t vwc;
	uint16_t awun;
	uint16_t awupf;
	uint8_t nvscc;
	uint8_t nwpc;
	uint16_t acwu;
	uint16_t rsvd534;
	uint32_t sgls;
	uint32_t mnan;
	uint8_t rsvd544[224];
	char subnqn[256];   /* 768 */
	uint8_t rsvd1024[768];
	uint8_t nvmof[256]; /* 1792 */
	struct gpunvme_psd psd[32]; /* 2048 */
	uint8_t vs[1024];   /* 3072 */
};

/* ONCS bits (Figure 247, bytes 521:520) */
#define GPUNVME_ONCS_COMPARE      (1u << 0)
#define GPUNVME_ONCS_WRITE_UNCOR  (1u << 1)
#define GPUNVME_ONCS_DSM          (1u << 2)
#define GPUNVME_ONCS_WRITE_ZEROES (1u << 3)
#define GPUNVME_ONCS_SAVE_SELECT  (1u << 4)
#define GPUNVME_ONCS_RESERVATIONS (1u << 5)
#define GPUNVME_ONCS_TIMESTAMP    (1u << 6)
#define GPUNVME_VWC_PRESENT       (1u << 0)
#define GPUNVME_LPA_SMART_PER_NS  (1u << 0)
#define GPUNVME_LPA_CMD_EFFECTS   (1u << 1)
#define GPUNVME_LPA_EXTENDED      (1u << 2)  /* NUMDU/LPOL/LPOU supported */

struct gpunvme_lbaf {  /* LBA Format Data Structure, Figure 251 */
	uint16_t ms;       /* metadata bytes per LBA */
	uint8_t lbads;     /* log2 of LBA data size */
	uint8_t rp;        /* relative performance, bits 1:0 */
};

/* Identify Namespace data structure (CNS 00h), Figure 249 */
struct gpunvme_id_ns {
	uint64_t nsze;
	uint64_t ncap;
	uint64_t nuse;
	uint8_t nsfeat;
	uint8_t nlbaf;      /* 0's based number of LBA formats */
	uint8_t flbas;      /* bits 3:0 format index in use */
	uint8_t mc;
	uint8_t dpc;
	uint8_t dps;
	uint8_t nmic;
	uint8_t rescap;
	uint8_t fpi;
	uint8_t dlfeat;
	uint16_t nawun;
	uint16_t nawupf;
	uint16_t nacwu;
	uint16_t nabsn;
	uint16_t nabo;
	uint16_t nabspf;
	uint16_t noiob;
	uint8_t nvmcap[16];
	uint16_t npwg;
	uint16_t npwa;
	uint16_t npdg;
	uint16_t npda;
	uint16_t nows;
	uint8_t rsvd74[18];
	uint32_t anagrpid;
	uint8_t rsvd96[3];
	uint8_t nsattr;
	uint16_t nvmsetid;
	uint16_t endgid;
	uint8_t nguid[16];
	uint8_t eui64[8];
	struct gpunvme_lbaf lbaf[16]; /* 128 */
	uint8_t rsvd192[192];
	uint8_t vs[3712];   /* 384 */
};

GPUNVME_HD uint32_t gpunvme_id_ns_flbas_index(const struct gpunvme_id_ns *ns) { return ns->flbas & 0xf; }
#define GPUNVME_DLFEAT_READ_ZEROES 0x01u  /* deallocated blocks read as zeroes */

/* ---------------------------------------------------------------------- */
/* Log pages                                                               */
/* ---------------------------------------------------------------------- */

/* Error Information Log Entry (§5.14.1.1, Figure 196) */
struct gpunvme_error_log {
	uint64_t error_count;
	uint16_t sqid;
	uint16_t cid;
	uint16_t status;   /* bit 0 phase tag, bits 15:1 Status Field, like a CQE */
	uint16_t param_loc;
	uint64_t lba;
	uint32_t nsid;
	uint8_t vs_avail;
	uint8_t trtype;
	uint8_t rsvd30[2];
	uint64_t cs_info;
	uint16_t trtype_info;
	uint8_t rsvd42[22];
};

/* SMART / Health Information (§5.14.1.2, Figure 197). 128-bit counters are
 * two little-endian uint64_t words, low word first. The composite
 * temperature sits at byte 1, so it is a byte pair, not a uint16_t. */
struct gpunvme_smart_log {
	uint8_t critical_warning;
	uint8_t temperature[2];   /* Kelvin */
	uint8_t avail_spare;
	uint8_t spare_thresh;
	uint8_t percent_used;
	uint8_t endu_grp_crit_warn;
	uint8_t rsvd7[25];
	uint64_t data_units_read[2];     /* 32: units of 1000 512-byte blocks, rounded up */
	uint64_t data_units_written[2];  /* 48 */
	uint64_t host_reads[2];          /* 64: read commands completed */
	uint64_t host_writes[2];         /* 80: write commands completed */
	uint64_t ctrl_busy_time[2];      /* 96: minutes */
	uint64_t power_cycles[2];        /* 112 */
	uint64_t power_on_hours[2];      /* 128 */
	uint64_t unsafe_shutdowns[2];    /* 144 */
	uint64_t media_errors[2];        /* 160 */
	uint64_t num_err_log_entries[2]; /* 176 */
	uint32_t warning_temp_time;      /* 192 */
	uint32_t critical_comp_time;
	uint16_t temp_sensor[8];         /* 200 */
	uint32_t thm_temp1_trans_count;  /* 216 */
	uint32_t thm_temp2_trans_count;
	uint32_t thm_temp1_total_time;
	uint32_t thm_temp2_total_time;
	uint8_t rsvd232[280];
};

/* ---------------------------------------------------------------------- */
/* Layout checks: every offset the project reads, every size.              */
/* ---------------------------------------------------------------------- */

#define GPUNVME_CHECK_OFF(t, f, o) GPUNVME_STATIC_ASSERT(offsetof(struct t, f) == (o), #t "." #f " offset")
#define GPUNVME_CHECK_SIZE(t, s) GPUNVME_STATIC_ASSERT(sizeof(struct t) == (s), #t " size")

GPUNVME_CHECK_SIZE(gpunvme_sqe, 64);
GPUNVME_CHECK_OFF(gpunvme_sqe, cid, 2);
GPUNVME_CHECK_OFF(gpunvme_sqe, nsid, 4);
GPUNVME_CHECK_OFF(gpunvme_sqe, mptr, 16);
GPUNVME_CHECK_OFF(gpunvme_sqe, prp1, 24);
GPUNVME_CHECK_OFF(gpunvme_sqe, prp2, 32);
GPUNVME_CHECK_OFF(gpunvme_sqe, cdw, 40);
GPUNVME_CHECK_OFF(gpunvme_sqe, rw.slba, 40);
GPUNVME_CHECK_OFF(gpunvme_sqe, rw.nlb, 48);
GPUNVME_CHECK_OFF(gpunvme_sqe, rw.control, 50);
GPUNVME_CHECK_OFF(gpunvme_sqe, rw.dsmgmt, 52);
GPUNVME_CHECK_OFF(gpunvme_sqe, rw.appmask, 62);
GPUNVME_CHECK_OFF(gpunvme_sqe, identify.cntid, 42);
GPUNVME_CHECK_OFF(gpunvme_sqe, identify.csi, 47);
GPUNVME_CHECK_OFF(gpunvme_sqe, queue.qsize, 42);
GPUNVME_CHECK_OFF(gpunvme_sqe, queue.qflags, 44);
GPUNVME_CHECK_OFF(gpunvme_sqe, queue.cqid_iv, 46);
GPUNVME_CHECK_OFF(gpunvme_sqe, dsm.attr, 44);
GPUNVME_CHECK_SIZE(gpunvme_cqe, 16);
GPUNVME_CHECK_OFF(gpunvme_cqe, sqhd, 8);
GPUNVME_CHECK_OFF(gpunvme_cqe, sqid, 10);
GPUNVME_CHECK_OFF(gpunvme_cqe, cid, 12);
GPUNVME_CHECK_OFF(gpunvme_cqe, status, 14);
GPUNVME_CHECK_SIZE(gpunvme_dsm_range, 16);
GPUNVME_CHECK_OFF(gpunvme_dsm_range, slba, 8);
GPUNVME_CHECK_SIZE(gpunvme_psd, 32);
GPUNVME_CHECK_OFF(gpunvme_psd, idlp, 16);
GPUNVME_CHECK_OFF(gpunvme_psd, actp, 20);
GPUNVME_CHECK_SIZE(gpunvme_id_ctrl, 4096);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, sn, 4);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, mn, 24);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, fr, 64);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, ieee, 73);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, mdts, 77);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, cntlid, 78);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, ver, 80);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, oaes, 92);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, cntrltype, 111);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, fguid, 112);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, oacs, 256);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, acl, 258);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, aerl, 259);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, lpa, 261);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, elpe, 262);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, npss, 263);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, wctemp, 266);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, hmpre, 272);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, tnvmcap, 280);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, unvmcap, 296);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, rpmbs, 312);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, kas, 320);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, sanicap, 328);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, anatt, 342);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, anagrpmax, 344);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, pels, 352);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, sqes, 512);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, cqes, 513);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, maxcmd, 514);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, nn, 516);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, oncs, 520);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, fuses, 522);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, vwc, 525);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, awun, 526);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, acwu, 532);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, sgls, 536);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, mnan, 540);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, subnqn, 768);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, psd, 2048);
GPUNVME_CHECK_OFF(gpunvme_id_ctrl, vs, 3072);
GPUNVME_CHECK_SIZE(gpunvme_lbaf, 4);
GPUNVME_CHECK_SIZE(gpunvme_id_ns, 4096);
GPUNVME_CHECK_OFF(gpunvme_id_ns, ncap, 8);
GPUNVME_CHECK_OFF(gpunvme_id_ns, nuse, 16);
GPUNVME_CHECK_OFF(gpunvme_id_ns, nsfeat, 24);
GPUNVME_CHECK_OFF(gpunvme_id_ns, nlbaf, 25);
GPUNVME_CHECK_OFF(gpunvme_id_ns, flbas, 26);
GPUNVME_CHECK_OFF(gpunvme_id_ns, dlfeat, 33);
GPUNVME_CHECK_OFF(gpunvme_id_ns, nawun, 34);
GPUNVME_CHECK_OFF(gpunvme_id_ns, noiob, 46);
GPUNVME_CHECK_OFF(gpunvme_id_ns, nvmcap, 48);
GPUNVME_CHECK_OFF(gpunvme_id_ns, npwg, 64);
GPUNVME_CHECK_OFF(gpunvme_id_ns, nows, 72);
GPUNVME_CHECK_OFF(gpunvme_id_ns, anagrpid, 92);
GPUNVME_CHECK_OFF(gpunvme_id_ns, nsattr, 99);
GPUNVME_CHECK_OFF(gpunvme_id_ns, nvmsetid, 100);
GPUNVME_CHECK_OFF(gpunvme_id_ns, nguid, 104);
GPUNVME_CHECK_OFF(gpunvme_id_ns, eui64, 120);
GPUNVME_CHECK_OFF(gpunvme_id_ns, lbaf, 128);
GPUNVME_CHECK_OFF(gpunvme_id_ns, vs, 384);
GPUNVME_CHECK_SIZE(gpunvme_error_log, 64);
GPUNVME_CHECK_OFF(gpunvme_error_log, sqid, 8);
GPUNVME_CHECK_OFF(gpunvme_error_log, status, 12);
GPUNVME_CHECK_OFF(gpunvme_error_log, lba, 16);
GPUNVME_CHECK_OFF(gpunvme_error_log, nsid, 24);
GPUNVME_CHECK_OFF(gpunvme_error_log, cs_info, 32);
GPUNVME_CHECK_SIZE(gpunvme_smart_log, 512);
GPUNVME_CHECK_OFF(gpunvme_smart_log, temperature, 1);
GPUNVME_CHECK_OFF(gpunvme_smart_log, avail_spare, 3);
GPUNVME_CHECK_OFF(gpunvme_smart_log, data_units_read, 32);
GPUNVME_CHECK_OFF(gpunvme_smart_log, data_units_written, 48);
GPUNVME_CHECK_OFF(gpunvme_smart_log, host_reads, 64);
GPUNVME_CHECK_OFF(gpunvme_smart_log, host_writes, 80);
GPUNVME_CHECK_OFF(gpunvme_smart_log, power_on_hours, 128);
GPUNVME_CHECK_OFF(gpunvme_smart_log, media_errors, 160);
GPUNVME_CHECK_OFF(gpunvme_smart_log, num_err_log_entries, 176);
GPUNVME_CHECK_OFF(gpunvme_smart_log, warning_temp_time, 192);
GPUNVME_CHECK_OFF(gpunvme_smart_log, temp_sensor, 200);
GPUNVME_CHECK_OFF(gpunvme_smart_log, thm_temp1_trans_count, 216);

/* ---------------------------------------------------------------------- */
/* Decoding to text (src/nvme/status.c; host only)                         */
/* ---------------------------------------------------------------------- */
/* Declared in nvcc's device pass too: it parses host functions that call
 * these, and a declaration costs nothing there. */
#ifdef __cplusplus
extern "C" {
#endif
/* Text for an NVMe status value (layout above), e.g. "LBA Out of Range
 * (sct 0x0 sc 0x80, DNR)". Formatted into a thread-local buffer: valid until
 * the next call in the same thread. */
const char *gpunvme_status_str(uint16_t status);
/* Name of an admin or NVM opcode, or "unknown". */
const char *gpunvme_opcode_str(int admin, uint8_t opc);
#ifdef __cplusplus
}
#endif

#endif /* GPUNVME_NVME_H */
