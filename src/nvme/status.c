/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * NVMe status values and opcodes as text, for logs, the CLI and test output.
 *
 * Status values use the project layout described at the top of
 * include/gpunvme/spec/nvme.h (the CQE Status Field without the phase tag):
 * bits 7:0 SC, 10:8 SCT, 12:11 CRD, 13 More, 14 DNR.
 *
 * Returned strings: gpunvme_status_str() formats every result (known or not)
 * into a _Thread_local buffer, because the text carries the SCT/SC values and
 * the DNR/More/CRD flags of the particular status. The pointer stays valid
 * until the next gpunvme_status_str() call in the same thread; other threads
 * never overwrite it. gpunvme_opcode_str() returns string literals.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gpunvme/spec/nvme.h"

struct code_name {
	uint16_t code; /* SCT << 8 | SC */
	const char *name;
};

/* Names exactly as the NVMe 1.4 tables spell them. */
static const struct code_name status_names[] = {
	/* Generic Command Status, §4.6.1.2.1, Figure 127 */
	{GPUNVME_SC_SUCCESS, "Successful Completion"},
	{GPUNVME_SC_INVALID_OPCODE, "Invalid Command Opcode"},
	{GPUNVME_SC_INVALID_FIELD, "Invalid Field in Command"},
	{GPUNVME_SC_CID_CONFLICT, "Command ID Conflict"},
	{GPUNVME_SC_DATA_XFER_ERROR, "Data Transfer Error"},
	{GPUNVME_SC_POWER_LOSS_ABORT, "Commands Aborted due to Power Loss Notification"},
	{GPUNVME_SC_INTERNAL, "Internal Error"},
	{GPUNVME_SC_ABORT_REQ, "Command Abort Requested"},
	{GPUNVME_SC_ABORT_SQ_DELETED, "Command Aborted due to SQ Deletion"},
	{GPUNVME_SC_ABORT_FUSE_FAIL, "Command Aborted due to Failed Fused Command"},
	{GPUNVME_SC_ABORT_FUSE_MISSING, "Command Aborted due to Missing Fused Command"},
	{GPUNVME_SC_INVALID_NSID, "Invalid Namespace or Format"},
	{GPUNVME_SC_CMD_SEQ_ERROR, "Command Sequence Error"},
	{GPUNVME_SC_INVALID_SGL_SEG_DESC, "Invalid SGL Segment Descriptor"},
	{GPUNVME_SC_INVALID_NUM_SGL_DESC, "Invalid Number of SGL Descriptors"},
	{GPUNVME_SC_DATA_SGL_LEN_INVALID, "Data SGL Length Invalid"},
	{GPUNVME_SC_MD_SGL_LEN_INVALID, "Metadata SGL Length Invalid"},
	{GPUNVME_SC_SGL_DESC_TYPE_INVALID, "SGL Descriptor Type Invalid"},
	{GPUNVME_SC_INVALID_USE_OF_CMB, "Invalid Use of Controller Memory Buffer"},
	{GPUNVME_SC_INVALID_PRP_OFFSET, "PRP Offset Invalid"},
	{GPUNVME_SC_ATOMIC_WRITE_UNIT_EXCEEDED, "Atomic Write Unit Exceeded"},
	{GPUNVME_SC_OPERATION_DENIED, "Operation Denied"},
	{GPUNVME_SC_SGL_OFFSET_INVALID, "SGL Offset Invalid"},
	{GPUNVME_SC_HOSTID_INCONSISTENT, "Host Identifier Inconsistent Format"},
	{GPUNVME_SC_KEEP_ALIVE_EXPIRED, "Keep Alive Timer Expired"},
	{GPUNVME_SC_KEEP_ALIVE_INVALID, "Keep Alive Timeout Invalid"},
	{GPUNVME_SC_ABORT_PREEMPT, "Command Aborted due to Preempt and Abort"},
	{GPUNVME_SC_SANITIZE_FAILED, "Sanitize Failed"},
	{GPUNVME_SC_SANITIZE_IN_PROGRESS, "Sanitize In Progress"},
	{GPUNVME_SC_SGL_DATA_BLOCK_GRAN_INVALID, "SGL Data Block Granularity Invalid"},
	{GPUNVME_SC_CMD_NOT_SUP_CMB_QUEUE, "Command Not Supported for Queue in CMB"},
	{GPUNVME_SC_NS_WRITE_PROTECTED, "Namespace is Write Protected"},
	{GPUNVME_SC_CMD_INTERRUPTED, "Command Interrupted"},
	{GPUNVME_SC_TRANSIENT_TRANSPORT, "Transient Transport Error"},
	/* Generic, NVM Command Set specific range 80h-BFh, Figure 127 */
	{GPUNVME_SC_LBA_RANGE, "LBA Out of Range"},
	{GPUNVME_SC_CAP_EXCEEDED, "Capacity Exceeded"},
	{GPUNVME_SC_NS_NOT_READY, "Namespace Not Ready"},
	{GPUNVME_SC_RESERVATION_CONFLICT, "Reservation Conflict"},
	{GPUNVME_SC_FORMAT_IN_PROGRESS, "Format In Progress"},

	/* Command Specific Status, §4.6.1.2.2, Figure 128 */
	{GPUNVME_SC_INVALID_CQID, "Completion Queue Invalid"},
	{GPUNVME_SC_INVALID_QID, "Invalid Queue Identifier"},
	{GPUNVME_SC_MAX_QSIZE_EXCEEDED, "Invalid Queue Size"},
	{GPUNVME_SC_ABORT_LIMIT, "Abort Command Limit Exceeded"},
	{GPUNVME_SC_AER_LIMIT_EXCEEDED, "Asynchronous Event Request Limit Exceeded"},
	{GPUNVME_SC_INVALID_FW_SLOT, "Invalid Firmware Slot"},
	{GPUNVME_SC_INVALID_FW_IMAGE, "Invalid Firmware Image"},
	{GPUNVME_SC_INVALID_IRQ_VECTOR, "Invalid Interrupt Vector"},
	{GPUNVME_SC_INVALID_LOG_PAGE, "Invalid Log Page"},
	{GPUNVME_SC_INVALID_FORMAT, "Invalid Format"},
	{GPUNVME_SC_FW_NEEDS_CONV_RESET, "Firmware Activation Requires Conventional Reset"},
	{GPUNVME_SC_INVALID_QUEUE_DEL, "Invalid Queue Deletion"},
	{GPUNVME_SC_FEAT_NOT_SAVEABLE, "Feature Identifier Not Saveable"},
	{GPUNVME_SC_FEAT_NOT_CHANGEABLE, "Feature Not Changeable"},
	{GPUNVME_SC_FEAT_NOT_NS_SPECIFIC, "Feature Not Namespace Specific"},
	/* Command Specific, NVM Command Set, Figure 129 */
	{GPUNVME_SC_CONFLICTING_ATTRS, "Conflicting Attributes"},
	{GPUNVME_SC_INVALID_PI, "Invalid Protection Information"},
	{GPUNVME_SC_READ_ONLY, "Attempted Write to Read Only Range"},

	/* Media and Data Integrity Errors, §4.6.1.2.3, Figure 130 */
	{GPUNVME_SC_WRITE_FAULT, "Write Fault"},
	{GPUNVME_SC_UNRECOVERED_READ, "Unrecovered Read Error"},
	{GPUNVME_SC_GUARD_CHECK, "End-to-end Guard Check Error"},
	{GPUNVME_SC_APPTAG_CHECK, "End-to-end Application Tag Check Error"},
	{GPUNVME_SC_REFTAG_CHECK, "End-to-end Reference Tag Check Error"},
	{GPUNVME_SC_COMPARE_FAILED, "Compare Failure"},
	{GPUNVME_SC_ACCESS_DENIED, "Access Denied"},
	{GPUNVME_SC_DEALLOCATED_LBA, "Deallocated or Unwritten Logical Block"},

	/* Path Related Status, §4.6.1.2.4, Figure 131: not in the GPUNVME_SC_*
	 * enum (no multipath here), named so a log never shows them as unknown. */
	{0x300, "Internal Path Error"},
	{0x301, "Asymmetric Access Persistent Loss"},
	{0x302, "Asymmetric Access Inaccessible"},
	{0x303, "Asymmetric Access Transition"},
	{0x360, "Controller Pathing Error"},
	{0x361, "Host Pathing Error"},
	{0x370, "Command Aborted By Host"},
};

static const char *status_name(uint16_t code)
{
	for (size_t i = 0; i < sizeof(status_names) / sizeof(status_names[0]); i++)
		if (status_names[i].code == code)
			return status_names[i].name;
	return NULL;
}

const char *gpunvme_status_str(uint16_t status)
{
	/* 64 bytes for the longest name (47 chars) and ~45 for the suffix. */
	static _Thread_local char buf[128];
	uint16_t code = (uint16_t)gpunvme_status_code(status);
	unsigned sct = gpunvme_status_sct(status), sc = gpunvme_status_sc(status);
	const char *name = status_name(code);
	char crd[12] = "";

	if (!name) {
		/* Vendor Specific SCT 7h (§4.6.1.2, Figure 125) has no standard
		 * names; everything else unlisted is reserved or newer than 1.4. */
		name = sct == GPUNVME_SCT_VENDOR ? "Vendor Specific" : "Unknown status";
	}
	/* CRD (Command Retry Delay, §4.6.1, Figure 124) selects CRDT1..3. */
	if (gpunvme_status_crd(status))
		snprintf(crd, sizeof(crd), ", CRD %u", gpunvme_status_crd(status));
	snprintf(buf, sizeof(buf), "%s (sct 0x%x sc 0x%02x%s%s%s)", name, sct, sc,
		 gpunvme_status_dnr(status) ? ", DNR" : "",
		 gpunvme_status_more(status) ? ", More" : "", crd);
	return buf;
}

static const char *admin_name(uint8_t opc)
{
	/* Admin Command Set opcodes, §5, Figure 139 */
	switch (opc) {
	case GPUNVME_ADM_DELETE_SQ: return "Delete I/O Submission Queue";
	case GPUNVME_ADM_CREATE_SQ: return "Create I/O Submission Queue";
	case GPUNVME_ADM_GET_LOG_PAGE: return "Get Log Page";
	case GPUNVME_ADM_DELETE_CQ: return "Delete I/O Completion Queue";
	case GPUNVME_ADM_CREATE_CQ: return "Create I/O Completion Queue";
	case GPUNVME_ADM_IDENTIFY: return "Identify";
	case GPUNVME_ADM_ABORT: return "Abort";
	case GPUNVME_ADM_SET_FEATURES: return "Set Features";
	case GPUNVME_ADM_GET_FEATURES: return "Get Features";
	case GPUNVME_ADM_ASYNC_EVENT: return "Asynchronous Event Request";
	case GPUNVME_ADM_NS_MGMT: return "Namespace Management";
	case GPUNVME_ADM_FW_COMMIT: return "Firmware Commit";
	case GPUNVME_ADM_FW_DOWNLOAD: return "Firmware Image Download";
	case GPUNVME_ADM_DEV_SELF_TEST: return "Device Self-test";
	case GPUNVME_ADM_NS_ATTACH: return "Namespace Attachment";
	case GPUNVME_ADM_KEEP_ALIVE: return "Keep Alive";
	case GPUNVME_ADM_DIRECTIVE_SEND: return "Directive Send";
	case GPUNVME_ADM_DIRECTIVE_RECV: return "Directive Receive";
	case GPUNVME_ADM_VIRT_MGMT: return "Virtualization Management";
	case GPUNVME_ADM_NVME_MI_SEND: return "NVMe-MI Send";
	case GPUNVME_ADM_NVME_MI_RECV: return "NVMe-MI Receive";
	case GPUNVME_ADM_DBBUF_CONFIG: return "Doorbell Buffer Config";
	case GPUNVME_ADM_FORMAT_NVM: return "Format NVM";
	case GPUNVME_ADM_SECURITY_SEND: return "Security Send";
	case GPUNVME_ADM_SECURITY_RECV: return "Security Receive";
	case GPUNVME_ADM_SANITIZE: return "Sanitize";
	case GPUNVME_ADM_GET_LBA_STATUS: return "Get LBA Status";
	default: return NULL;
	}
}

static const char *nvm_name(uint8_t opc)
{
	/* NVM Command Set opcodes, §6, Figure 346 */
	switch (opc) {
	case GPUNVME_CMD_FLUSH: return "Flush";
	case GPUNVME_CMD_WRITE: return "Write";
	case GPUNVME_CMD_READ: return "Read";
	case GPUNVME_CMD_WRITE_UNCOR: return "Write Uncorrectable";
	case GPUNVME_CMD_COMPARE: return "Compare";
	case GPUNVME_CMD_WRITE_ZEROES: return "Write Zeroes";
	case GPUNVME_CMD_DSM: return "Dataset Management";
	case GPUNVME_CMD_VERIFY: return "Verify";
	case GPUNVME_CMD_RESV_REGISTER: return "Reservation Register";
	case GPUNVME_CMD_RESV_REPORT: return "Reservation Report";
	case GPUNVME_CMD_RESV_ACQUIRE: return "Reservation Acquire";
	case GPUNVME_CMD_RESV_RELEASE: return "Reservation Release";
	default: return NULL;
	}
}

const char *gpunvme_opcode_str(int admin, uint8_t opc)
{
	const char *n = admin ? admin_name(opc) : nvm_name(opc);

	return n ? n : "unknown";
}

/* The errno a caller sees for a failed command; the status itself stays in
 * the completion (and gpunvme_status_str says it in words). */
int gpunvme_status_errno(uint16_t status)
{
	switch (gpunvme_status_code(status)) {
	case GPUNVME_SC_SUCCESS: return 0;
	case GPUNVME_SC_LBA_RANGE: return -ERANGE;
	case GPUNVME_SC_INVALID_FIELD:
	case GPUNVME_SC_INVALID_PRP_OFFSET: return -EINVAL;
	case GPUNVME_SC_INVALID_NSID: return -ENODEV;
	case GPUNVME_SC_INVALID_OPCODE: return -EOPNOTSUPP;
	case GPUNVME_SC_DATA_XFER_ERROR: return -EFAULT;
	case GPUNVME_SC_ABORT_REQ:
	case GPUNVME_SC_ABORT_SQ_DELETED: return -ECANCELED;
	case GPUNVME_SC_NS_WRITE_PROTECTED:
	case GPUNVME_SC_READ_ONLY: return -EROFS;
	case GPUNVME_SC_CAP_EXCEEDED: return -ENOSPC;
	default: return -EIO;
	}
}
