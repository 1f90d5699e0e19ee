/* SPDX-License-Identifier: BSD-2-Clause */
/* I/O queue creation and deletion (NVMe 1.4 §5.3 - §5.6). */
#include <errno.h>

#include "ctrl/ctrl.h"

/* Create I/O CQ `qid` and SQ `qid` bound to it, both physically contiguous
 * (PC = 1), polled (IEN = 0): nobody takes interrupts in this driver. */
int ctrl_create_io_queues(struct gpunvme_ctrl *c, uint16_t qid, uint64_t sq_iova, uint64_t cq_iova,
			  uint32_t depth)
{
	struct gpunvme_sqe cmd = { .opc = GPUNVME_ADM_CREATE_CQ, .prp1 = cq_iova };
	cmd.queue.qid = qid;
	cmd.queue.qsize = (uint16_t)(depth - 1);
	cmd.queue.qflags = GPUNVME_Q_PC;
	int rc = gpunvme_admin(c, &cmd, NULL, 0, 0, NULL);
	if (rc)
		return rc;
	struct gpunvme_sqe sq = { .opc = GPUNVME_ADM_CREATE_SQ, .prp1 = sq_iova };
	sq.queue.qid = qid;
	sq.queue.qsize = (uint16_t)(depth - 1);
	sq.queue.qflags = GPUNVME_Q_PC;
	sq.queue.cqid_iv = qid;
	rc = gpunvme_admin(c, &sq, NULL, 0, 0, NULL);
	if (rc) {
		struct gpunvme_sqe del = { .opc = GPUNVME_ADM_DELETE_CQ };
		del.queue.qid = qid;
		gpunvme_admin(c, &del, NULL, 0, 0, NULL);
	}
	return rc;
}

int ctrl_delete_io_queues(struct gpunvme_ctrl *c, uint16_t qid)
{
	/* the SQ first: a CQ with an SQ attached cannot go (§5.5) */
	struct gpunvme_sqe cmd = { .opc = GPUNVME_ADM_DELETE_SQ };
	cmd.queue.qid = qid;
	int rc = gpunvme_admin(c, &cmd, NULL, 0, 0, NULL);
	struct gpunvme_sqe cq = { .opc = GPUNVME_ADM_DELETE_CQ };
	cq.queue.qid = qid;
	int rc2 = gpunvme_admin(c, &cq, NULL, 0, 0, NULL);
	return rc ? rc : rc2;
}
