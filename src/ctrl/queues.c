/* SPDX-License-Identifier: BSD-2-Clause */
/* Queue ids and the GPU queue pairs' hooks (ctrl_gpu.h): what the GPU
 * data path asks of the control plane; the transport creates the queues. */
#include <errno.h>
#include <stdlib.h>

#include "ctrl/ctrl.h"
#include "ctrl/ctrl_gpu.h"

/* ---- queue ids for queues the library does not poll itself (GPU queues) ---- */

uint16_t ctrl_pick_qid_locked(struct gpunvme_ctrl *c)
{
	for (uint32_t i = 0; i < c->nr_io_queues; i++) {
		uint32_t q = 1 + (i + (c->tr->qid_reuse_last ? c->qid_next : 0)) % c->nr_io_queues;
		if (!c->qps[q] && !c->qid_gpu[q]) {
			c->qid_next = q; /* the next search starts after this one */
			return (uint16_t)q;
		}
	}
	return 0;
}

int gpunvme_ctrl_reserve_qid(struct gpunvme_ctrl *c, uint16_t *qid)
{
	pthread_mutex_lock(&c->qp_lock);
	uint16_t q = ctrl_pick_qid_locked(c);
	if (q)
		c->qid_gpu[q] = 1;
	pthread_mutex_unlock(&c->qp_lock);
	if (q) {
		*qid = q;
		return 0;
	}
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

int gpunvme_ctrl_create_qpair_raw(struct gpunvme_ctrl *c, uint16_t qid, uint64_t sq_iova, uint64_t cq_iova,
				  uint32_t depth)
{
	if (depth < 2 || depth > c->mqes)
		return gpunvme_set_error(-EINVAL, "queue depth %u: must be 2..%u (CAP.MQES + 1)", depth, c->mqes);
	return c->tr->gpu_queue_create(c, qid, sq_iova, cq_iova, depth);
}

int gpunvme_ctrl_delete_qpair_raw(struct gpunvme_ctrl *c, uint16_t qid)
{
	return c->tr->gpu_queue_delete(c, qid);
}

volatile void *gpunvme_ctrl_doorbells(struct gpunvme_ctrl *c, size_t *len)
{
	return c->tr->doorbells(c, len);
}

uint32_t gpunvme_ctrl_page_size(struct gpunvme_ctrl *c)
{
	return c->page_size;
}

uint64_t gpunvme_ctrl_max_xfer(struct gpunvme_ctrl *c)
{
	return c->max_xfer;
}
