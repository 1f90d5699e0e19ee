/* SPDX-License-Identifier: BSD-2-Clause */
/* I/O queue creation and deletion (NVMe 1.4 §5.3 - §5.6). */
#include <errno.h>
#include <stdlib.h>

#include "ctrl/ctrl.h"
#include "ctrl/ctrl_gpu.h"

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

/* ---- queue ids for queues the library does not poll itself (GPU queues) ---- */

int gpunvme_ctrl_reserve_qid(struct gpunvme_ctrl *c, uint16_t *qid)
{
	pthread_mutex_lock(&c->qp_lock);
	for (uint32_t q = 1; q <= c->nr_io_queues; q++) {
		if (!c->qps[q] && !c->qid_gpu[q]) {
			c->qid_gpu[q] = 1;
			pthread_mutex_unlock(&c->qp_lock);
			*qid = (uint16_t)q;
			return 0;
		}
	}
	pthread_mutex_unlock(&c->qp_lock);
	return gpunvme_set_error(-EBUSY, "all %u I/O queue pairs granted by the controller are in use",
				 c->nr_io_queues);
}

void gpunvme_ctrl_release_qid(struct gpunvme_ctrl *c, uint16_t qid)
{
	pthread_mutex_lock(&c->qp_lock);
	if (qid && qid <= c->nr_io_queues)
		c->qid_gpu[qid] = 0;
	pthread_mutex_unlock(&c->qp_lock);
}

/* Fabrics: the queue pair's connection, and the CPU proxy that serves
 * the host-memory queues the GPU drives (src/nvmf/proxy.c). */
static int create_proxied(struct gpunvme_ctrl *c, uint16_t qid, uint64_t sq_iova, uint64_t cq_iova, uint32_t depth)
{
	if (qid > c->nr_io_queues || c->fab_q[qid])
		return gpunvme_set_error(-EINVAL, "queue %u: not a free I/O queue", qid);
	struct nvmf_proxy_ns *ns = calloc(c->nns ? c->nns : 1, sizeof(*ns));
	if (!ns)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	for (uint32_t i = 0; i < c->nns; i++)
		ns[i] = (struct nvmf_proxy_ns){ c->ns[i].info.nsid, c->ns[i].info.lba_shift };
	int rc = nvmf_queue_open(&c->fab->p, qid, depth, c->fab->cntlid, 0, c->fab->ioccsz, &c->fab_q[qid], NULL);
	if (!rc) {
		/* over TCP a bus address is the host virtual address (src/bus/tcp.c) */
		struct nvmf_proxy_cfg cfg = {
			.sq = (struct gpunvme_sqe *)(uintptr_t)sq_iova,
			.cq = (void *)(uintptr_t)cq_iova,
			.depth = depth,
			.sq_db = (volatile uint32_t *)(c->fab_db + gpunvme_sq_doorbell(qid, 0)),
			.qid = qid,
			.cntlid = c->fab->cntlid,
			.page_size = c->page_size,
			.ns = ns,
			.nns = c->nns,
		};
		rc = nvmf_proxy_start(c->fab_q[qid], &cfg, &c->fab_px[qid]);
		if (rc) {
			nvmf_queue_close(c->fab_q[qid]);
			c->fab_q[qid] = NULL;
		}
	}
	/* the proxy keeps a pointer to the table: it lives until the queue goes */
	if (rc)
		free(ns);
	else
		c->fab_ns[qid] = ns;
	return rc;
}

int gpunvme_ctrl_create_qpair_raw(struct gpunvme_ctrl *c, uint16_t qid, uint64_t sq_iova, uint64_t cq_iova,
				  uint32_t depth)
{
	if (depth < 2 || depth > c->mqes)
		return gpunvme_set_error(-EINVAL, "queue depth %u: must be 2..%u (CAP.MQES + 1)", depth, c->mqes);
	if (c->fab)
		return create_proxied(c, qid, sq_iova, cq_iova, depth);
	return ctrl_create_io_queues(c, qid, sq_iova, cq_iova, depth);
}

int gpunvme_ctrl_delete_qpair_raw(struct gpunvme_ctrl *c, uint16_t qid)
{
	if (c->fab) {
		if (qid > c->nr_io_queues || !c->fab_q[qid])
			return -EINVAL;
		nvmf_proxy_stop(c->fab_px[qid], NULL);
		nvmf_queue_close(c->fab_q[qid]);
		free(c->fab_ns[qid]);
		c->fab_px[qid] = NULL;
		c->fab_q[qid] = NULL;
		c->fab_ns[qid] = NULL;
		return 0;
	}
	if (ctrl_check_alive(c, "delete queue pair"))
		return -ENODEV;
	return ctrl_delete_io_queues(c, qid);
}

volatile void *gpunvme_ctrl_doorbells(struct gpunvme_ctrl *c, size_t *len)
{
	if (c->fab) {
		if (len)
			*len = c->fab_db_len;
		return c->fab_db;
	}
	return gpunvme_bar0(c, len);
}

uint32_t gpunvme_ctrl_page_size(struct gpunvme_ctrl *c)
{
	return c->page_size;
}

uint64_t gpunvme_ctrl_max_xfer(struct gpunvme_ctrl *c)
{
	return c->max_xfer;
}
