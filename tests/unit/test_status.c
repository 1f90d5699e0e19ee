/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme_status_str() / gpunvme_opcode_str(): names as spelled in the NVMe
 * 1.4 status tables (§4.6.1.2, Figures 127-131) and opcode tables (§5
 * Figure 139, §6 Figure 346), the "(sct .. sc .., DNR, More)" suffix, unknown
 * codes, and the per-thread buffer contract; gpunvme_status_errno(): the
 * errno each status becomes, DNR and More ignored.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "../harness/check.h"
#include "gpunvme/spec/nvme.h"

static void check_names(void)
{
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_SUCCESS),
		  "Successful Completion (sct 0x0 sc 0x00)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_INVALID_OPCODE),
		  "Invalid Command Opcode (sct 0x0 sc 0x01)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_INVALID_FIELD),
		  "Invalid Field in Command (sct 0x0 sc 0x02)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_DATA_XFER_ERROR),
		  "Data Transfer Error (sct 0x0 sc 0x04)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_ABORT_REQ),
		  "Command Abort Requested (sct 0x0 sc 0x07)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_ABORT_SQ_DELETED),
		  "Command Aborted due to SQ Deletion (sct 0x0 sc 0x08)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_INVALID_NSID),
		  "Invalid Namespace or Format (sct 0x0 sc 0x0b)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_CMD_SEQ_ERROR),
		  "Command Sequence Error (sct 0x0 sc 0x0c)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_INVALID_PRP_OFFSET),
		  "PRP Offset Invalid (sct 0x0 sc 0x13)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_TRANSIENT_TRANSPORT),
		  "Transient Transport Error (sct 0x0 sc 0x22)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_LBA_RANGE),
		  "LBA Out of Range (sct 0x0 sc 0x80)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_FORMAT_IN_PROGRESS),
		  "Format In Progress (sct 0x0 sc 0x84)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_INVALID_CQID),
		  "Completion Queue Invalid (sct 0x1 sc 0x00)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_INVALID_QID),
		  "Invalid Queue Identifier (sct 0x1 sc 0x01)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_MAX_QSIZE_EXCEEDED),
		  "Invalid Queue Size (sct 0x1 sc 0x02)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_AER_LIMIT_EXCEEDED),
		  "Asynchronous Event Request Limit Exceeded (sct 0x1 sc 0x05)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_INVALID_IRQ_VECTOR),
		  "Invalid Interrupt Vector (sct 0x1 sc 0x08)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_INVALID_QUEUE_DEL),
		  "Invalid Queue Deletion (sct 0x1 sc 0x0c)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_FEAT_NOT_NS_SPECIFIC),
		  "Feature Not Namespace Specific (sct 0x1 sc 0x0f)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_CONFLICTING_ATTRS),
		  "Conflicting Attributes (sct 0x1 sc 0x80)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_READ_ONLY),
		  "Attempted Write to Read Only Range (sct 0x1 sc 0x82)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_WRITE_FAULT),
		  "Write Fault (sct 0x2 sc 0x80)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_UNRECOVERED_READ),
		  "Unrecovered Read Error (sct 0x2 sc 0x81)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_COMPARE_FAILED),
		  "Compare Failure (sct 0x2 sc 0x85)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_DEALLOCATED_LBA),
		  "Deallocated or Unwritten Logical Block (sct 0x2 sc 0x87)");
	CHECK_STR(gpunvme_status_str(0x302),
		  "Asymmetric Access Inaccessible (sct 0x3 sc 0x02)");
}

/* Every GPUNVME_SC_* value must have a real name, not the fallback. */
static void check_all_known(void)
{
	static const uint16_t all[] = {
		GPUNVME_SC_SUCCESS, GPUNVME_SC_INVALID_OPCODE, GPUNVME_SC_INVALID_FIELD,
		GPUNVME_SC_CID_CONFLICT, GPUNVME_SC_DATA_XFER_ERROR,
		GPUNVME_SC_POWER_LOSS_ABORT, GPUNVME_SC_INTERNAL, GPUNVME_SC_ABORT_REQ,
		GPUNVME_SC_ABORT_SQ_DELETED, GPUNVME_SC_ABORT_FUSE_FAIL,
		GPUNVME_SC_ABORT_FUSE_MISSING, GPUNVME_SC_INVALID_NSID,
		GPUNVME_SC_CMD_SEQ_ERROR, GPUNVME_SC_INVALID_SGL_SEG_DESC,
		GPUNVME_SC_INVALID_NUM_SGL_DESC, GPUNVME_SC_DATA_SGL_LEN_INVALID,
		GPUNVME_SC_MD_SGL_LEN_INVALID, GPUNVME_SC_SGL_DESC_TYPE_INVALID,
		GPUNVME_SC_INVALID_USE_OF_CMB, GPUNVME_SC_INVALID_PRP_OFFSET,
		GPUNVME_SC_ATOMIC_WRITE_UNIT_EXCEEDED, GPUNVME_SC_OPERATION_DENIED,
		GPUNVME_SC_SGL_OFFSET_INVALID, GPUNVME_SC_HOSTID_INCONSISTENT,
		GPUNVME_SC_KEEP_ALIVE_EXPIRED, GPUNVME_SC_KEEP_ALIVE_INVALID,
		GPUNVME_SC_ABORT_PREEMPT, GPUNVME_SC_SANITIZE_FAILED,
		GPUNVME_SC_SANITIZE_IN_PROGRESS, GPUNVME_SC_SGL_DATA_BLOCK_GRAN_INVALID,
		GPUNVME_SC_CMD_NOT_SUP_CMB_QUEUE, GPUNVME_SC_NS_WRITE_PROTECTED,
		GPUNVME_SC_CMD_INTERRUPTED, GPUNVME_SC_TRANSIENT_TRANSPORT,
		GPUNVME_SC_LBA_RANGE, GPUNVME_SC_CAP_EXCEEDED, GPUNVME_SC_NS_NOT_READY,
		GPUNVME_SC_RESERVATION_CONFLICT, GPUNVME_SC_FORMAT_IN_PROGRESS,
		GPUNVME_SC_INVALID_CQID, GPUNVME_SC_INVALID_QID,
		GPUNVME_SC_MAX_QSIZE_EXCEEDED, GPUNVME_SC_ABORT_LIMIT,
		GPUNVME_SC_AER_LIMIT_EXCEEDED, GPUNVME_SC_INVALID_FW_SLOT,
		GPUNVME_SC_INVALID_FW_IMAGE, GPUNVME_SC_INVALID_IRQ_VECTOR,
		GPUNVME_SC_INVALID_LOG_PAGE, GPUNVME_SC_INVALID_FORMAT,
		GPUNVME_SC_FW_NEEDS_CONV_RESET, GPUNVME_SC_INVALID_QUEUE_DEL,
		GPUNVME_SC_FEAT_NOT_SAVEABLE, GPUNVME_SC_FEAT_NOT_CHANGEABLE,
		GPUNVME_SC_FEAT_NOT_NS_SPECIFIC, GPUNVME_SC_CONFLICTING_ATTRS,
		GPUNVME_SC_INVALID_PI, GPUNVME_SC_READ_ONLY, GPUNVME_SC_WRITE_FAULT,
		GPUNVME_SC_UNRECOVERED_READ, GPUNVME_SC_GUARD_CHECK,
		GPUNVME_SC_APPTAG_CHECK, GPUNVME_SC_REFTAG_CHECK,
		GPUNVME_SC_COMPARE_FAILED, GPUNVME_SC_ACCESS_DENIED,
		GPUNVME_SC_DEALLOCATED_LBA,
	};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		const char *s = gpunvme_status_str(all[i]);
		CHECK(strncmp(s, "Unknown", 7) != 0);
		CHECK(strncmp(s, "Vendor", 6) != 0);
		CHECK(strstr(s, " (sct 0x") != NULL);
		/* Distinct codes, distinct names: catches copy-paste slips. */
		for (size_t j = 0; j < i; j++) {
			char a[128];
			strncpy(a, gpunvme_status_str(all[j]), sizeof(a) - 1);
			a[sizeof(a) - 1] = 0;
			*strstr(a, " (sct") = 0;
			size_t n = strlen(a);
			s = gpunvme_status_str(all[i]);
			CHECK(!(strncmp(s, a, n) == 0 && s[n] == ' ' && s[n + 1] == '('));
		}
	}
}

static void check_flags(void)
{
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_LBA_RANGE | GPUNVME_STATUS_DNR),
		  "LBA Out of Range (sct 0x0 sc 0x80, DNR)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_UNRECOVERED_READ | GPUNVME_STATUS_MORE),
		  "Unrecovered Read Error (sct 0x2 sc 0x81, More)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_INVALID_QID | GPUNVME_STATUS_DNR |
				     GPUNVME_STATUS_MORE),
		  "Invalid Queue Identifier (sct 0x1 sc 0x01, DNR, More)");
	CHECK_STR(gpunvme_status_str(GPUNVME_SC_NS_NOT_READY | 2u << 11),
		  "Namespace Not Ready (sct 0x0 sc 0x82, CRD 2)");
	/* The result is per call: the second call's text replaces the first
	 * in the same buffer (documented contract), so copy before reusing. */
	const char *a = gpunvme_status_str(GPUNVME_SC_INVALID_FIELD);
	const char *b = gpunvme_status_str(GPUNVME_SC_INVALID_FIELD | GPUNVME_STATUS_DNR);
	CHECK_STR(b, "Invalid Field in Command (sct 0x0 sc 0x02, DNR)");
	CHECK(a == b);
	/* Bit 15 is the phase tag's old position after shifting: not part of
	 * the status value, must not confuse the decoder. */
	CHECK_STR(gpunvme_status_str(0x8000 | GPUNVME_SC_INTERNAL),
		  "Internal Error (sct 0x0 sc 0x06)");
}

static void check_unknown(void)
{
	CHECK_STR(gpunvme_status_str(0x017), "Unknown status (sct 0x0 sc 0x17)");
	CHECK_STR(gpunvme_status_str(0x0ff | GPUNVME_STATUS_DNR),
		  "Unknown status (sct 0x0 sc 0xff, DNR)");
	CHECK_STR(gpunvme_status_str(0x104), "Unknown status (sct 0x1 sc 0x04)");
	CHECK_STR(gpunvme_status_str(0x2c0), "Unknown status (sct 0x2 sc 0xc0)");
	CHECK_STR(gpunvme_status_str(0x4aa), "Unknown status (sct 0x4 sc 0xaa)");
	CHECK_STR(gpunvme_status_str(0x7c1 | GPUNVME_STATUS_MORE),
		  "Vendor Specific (sct 0x7 sc 0xc1, More)");
	/* Every possible value formats without overflowing the buffer. */
	for (uint32_t v = 0; v <= 0xffff; v++) {
		const char *s = gpunvme_status_str((uint16_t)v);
		CHECK(s && strlen(s) > 10 && strlen(s) < 128);
		if (check_failures() > 20)
			break;
	}
}

static void *thread_fn(void *arg)
{
	(void)arg;
	/* Another thread's call must not change this thread's text. */
	return (void *)gpunvme_status_str(GPUNVME_SC_WRITE_FAULT | GPUNVME_STATUS_DNR);
}

static void check_threads(void)
{
	const char *mine = gpunvme_status_str(GPUNVME_SC_INVALID_OPCODE);
	pthread_t t;
	void *theirs = NULL;

	CHECK(pthread_create(&t, NULL, thread_fn, NULL) == 0);
	CHECK(pthread_join(t, &theirs) == 0);
	CHECK(theirs != (void *)mine);
	CHECK_STR(mine, "Invalid Command Opcode (sct 0x0 sc 0x01)");
}

static void check_opcodes(void)
{
	CHECK_STR(gpunvme_opcode_str(1, GPUNVME_ADM_DELETE_SQ), "Delete I/O Submission Queue");
	CHECK_STR(gpunvme_opcode_str(1, GPUNVME_ADM_CREATE_SQ), "Create I/O Submission Queue");
	CHECK_STR(gpunvme_opcode_str(1, GPUNVME_ADM_GET_LOG_PAGE), "Get Log Page");
	CHECK_STR(gpunvme_opcode_str(1, GPUNVME_ADM_DELETE_CQ), "Delete I/O Completion Queue");
	CHECK_STR(gpunvme_opcode_str(1, GPUNVME_ADM_CREATE_CQ), "Create I/O Completion Queue");
	CHECK_STR(gpunvme_opcode_str(1, GPUNVME_ADM_IDENTIFY), "Identify");
	CHECK_STR(gpunvme_opcode_str(1, GPUNVME_ADM_ABORT), "Abort");
	CHECK_STR(gpunvme_opcode_str(1, GPUNVME_ADM_SET_FEATURES), "Set Features");
	CHECK_STR(gpunvme_opcode_str(1, GPUNVME_ADM_GET_FEATURES), "Get Features");
	CHECK_STR(gpunvme_opcode_str(1, GPUNVME_ADM_ASYNC_EVENT), "Asynchronous Event Request");
	CHECK_STR(gpunvme_opcode_str(1, GPUNVME_ADM_KEEP_ALIVE), "Keep Alive");
	CHECK_STR(gpunvme_opcode_str(1, GPUNVME_ADM_DBBUF_CONFIG), "Doorbell Buffer Config");
	CHECK_STR(gpunvme_opcode_str(1, GPUNVME_ADM_FORMAT_NVM), "Format NVM");
	CHECK_STR(gpunvme_opcode_str(1, GPUNVME_ADM_SANITIZE), "Sanitize");
	CHECK_STR(gpunvme_opcode_str(1, GPUNVME_ADM_GET_LBA_STATUS), "Get LBA Status");
	CHECK_STR(gpunvme_opcode_str(1, 0x03), "unknown");
	CHECK_STR(gpunvme_opcode_str(1, 0xc0), "unknown");  /* vendor specific */

	CHECK_STR(gpunvme_opcode_str(0, GPUNVME_CMD_FLUSH), "Flush");
	CHECK_STR(gpunvme_opcode_str(0, GPUNVME_CMD_WRITE), "Write");
	CHECK_STR(gpunvme_opcode_str(0, GPUNVME_CMD_READ), "Read");
	CHECK_STR(gpunvme_opcode_str(0, GPUNVME_CMD_WRITE_UNCOR), "Write Uncorrectable");
	CHECK_STR(gpunvme_opcode_str(0, GPUNVME_CMD_COMPARE), "Compare");
	CHECK_STR(gpunvme_opcode_str(0, GPUNVME_CMD_WRITE_ZEROES), "Write Zeroes");
	CHECK_STR(gpunvme_opcode_str(0, GPUNVME_CMD_DSM), "Dataset Management");
	CHECK_STR(gpunvme_opcode_str(0, GPUNVME_CMD_VERIFY), "Verify");
	CHECK_STR(gpunvme_opcode_str(0, GPUNVME_CMD_RESV_RELEASE), "Reservation Release");
	CHECK_STR(gpunvme_opcode_str(0, 0x03), "unknown");
	CHECK_STR(gpunvme_opcode_str(0, 0xff), "unknown");
	/* The admin flag picks the table: 02h is Get Log Page or Read. */
	CHECK_STR(gpunvme_opcode_str(1, 0x02), "Get Log Page");
	CHECK_STR(gpunvme_opcode_str(0, 0x02), "Read");
	CHECK_STR(gpunvme_opcode_str(5, 0x06), "Identify");  /* any non-zero = admin */
}

/* a status as the library keeps it (SCT|SC, with DNR and More) */
static uint16_t st(uint16_t sct_sc, int dnr)
{
	return (uint16_t)(sct_sc | (dnr ? GPUNVME_STATUS_DNR | GPUNVME_STATUS_MORE : 0));
}

static void check_errno(void)
{
	CHECK(gpunvme_status_errno(st(GPUNVME_SC_SUCCESS, 0)) == 0);
	CHECK(gpunvme_status_errno(st(GPUNVME_SC_LBA_RANGE, 1)) == -ERANGE);
	CHECK(gpunvme_status_errno(st(GPUNVME_SC_INVALID_FIELD, 1)) == -EINVAL);
	CHECK(gpunvme_status_errno(st(GPUNVME_SC_INVALID_PRP_OFFSET, 0)) == -EINVAL);
	CHECK(gpunvme_status_errno(st(GPUNVME_SC_INVALID_NSID, 1)) == -ENODEV);
	CHECK(gpunvme_status_errno(st(GPUNVME_SC_INVALID_OPCODE, 1)) == -EOPNOTSUPP);
	CHECK(gpunvme_status_errno(st(GPUNVME_SC_DATA_XFER_ERROR, 0)) == -EFAULT);
	CHECK(gpunvme_status_errno(st(GPUNVME_SC_ABORT_REQ, 0)) == -ECANCELED);
	CHECK(gpunvme_status_errno(st(GPUNVME_SC_ABORT_SQ_DELETED, 0)) == -ECANCELED);
	CHECK(gpunvme_status_errno(st(GPUNVME_SC_READ_ONLY, 1)) == -EROFS);
	CHECK(gpunvme_status_errno(st(GPUNVME_SC_CAP_EXCEEDED, 1)) == -ENOSPC);
	/* anything else is an I/O error (its words stay in the completion) */
	CHECK(gpunvme_status_errno(st(GPUNVME_SC_TRANSIENT_TRANSPORT, 0)) == -EIO);
	CHECK(gpunvme_status_errno(st(0x7ff, 1)) == -EIO);
}

int main(void)
{
	check_names();
	check_all_known();
	check_flags();
	check_unknown();
	check_threads();
	check_opcodes();
	check_errno();
	return check_finish("test_status");
}
