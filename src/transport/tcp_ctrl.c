/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The NVMe/TCP transport, control plane: the association (admin queue,
 * CC.EN by Property Set, NVMe-oF 1.1 §3.5), admin commands as capsules,
 * registers as properties, a new association after the old one died, and
 * the GPU queue pairs: a connection per queue and a CPU proxy that serves
 * the host-memory rings the GPU drives (src/nvmf/proxy.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "transport/tcp.h"

static bool tcp_match(const struct gpunvme_bus *b)
{
	return b->ops == &gpunvme_bus_tcp;
}

/*
 * A controller over NVMe/TCP: the association (admin queue, CC.EN by
 * Property Set), then identify and queue count exactly as on PCIe (the
 * generic open). CAP comes from Property Get; DSTRD and doorbells mean
 * nothing here.
 */
static int tcp_open(struct gpunvme_ctrl *c, const char *uri)
{
	struct nvmf_params p;
	int rc = nvmf_parse_uri(uri, true, &p);
	if (rc)
		return rc;
	if (p.nr_io_queues)
		c->opts.nr_io_queues = p.nr_io_queues;
	struct tcp_ctrl *tc = calloc(1, sizeof(*tc));
	if (!tc)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	uint32_t adepth = c->opts.admin_depth ? c->opts.admin_depth : 32;
	if ((rc = nvmf_ctrl_connect(&tc->fab, &p, adepth))) {
		free(tc);
		return rc;
	}
	c->tr_priv = tc;
	c->cap = tc->fab.cap;
	c->vs = tc->fab.vs;
	c->cc = tc->fab.cc;
	c->dstrd = 0;
	c->mqes = gpunvme_cap_mqes(c->cap) + 1;
	/* queue entries: what the URI asks, else 128 as Linux's host
	 * (NVMF_DEF_QUEUE_SIZE): a target keeps per-entry buffers for every
	 * connection (nvmet-tcp: 2 x entries x in-capsule size), so many
	 * clients with deep queues exhaust its memory */
	uint32_t qs = p.queue_size ? p.queue_size : 128;
	if (qs < c->mqes)
		c->mqes = qs;
	c->page_shift = 12;
	c->page_size = 4096;
	return 0;
}

/* After identify and the queue count: the I/O queues' in-capsule size,
 * and what the GPU queue pairs need. */
static int tcp_setup(struct gpunvme_ctrl *c)
{
	struct tcp_ctrl *tc = tcp_ctrl(c);
	nvmf_ctrl_set_identify(&tc->fab, &c->id);
	tc->q = calloc(c->nr_io_queues + 1, sizeof(*tc->q));
	tc->px = calloc(c->nr_io_queues + 1, sizeof(*tc->px));
	tc->ns = calloc(c->nr_io_queues + 1, sizeof(*tc->ns));
	/* the GPU's doorbell page: the SQ tail doorbell of queue q at
	 * 0x1000 + 8q as in BAR0 with CAP.DSTRD 0 (§3.1.24) */
	tc->db_len = ((size_t)gpunvme_cq_doorbell((uint16_t)c->nr_io_queues, 0) + 4 + 4095) & ~(size_t)4095;
	tc->db = gpunvme_dma_alloc(c, tc->db_len);
	if (!tc->q || !tc->px || !tc->ns || !tc->db)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	/* The GPU queues' health check and recovery read CSTS from the page
	 * they ring doorbells in (src/cuda/gpu_queues.cu, as on PCIe and the
	 * emulator). Over fabrics the association is enabled and ready here
	 * (nvmf_ctrl_connect waited for CSTS.RDY by Property Get, NVMe-oF 1.1
	 * §3.5); a lost connection is each queue's own error, recovered by
	 * re-creating the queue, not by a controller reset. Without this
	 * word the page read CSTS 0 ("not ready") and every recovery asked
	 * for a reset. */
	((volatile uint32_t *)tc->db)[GPUNVME_REG_CSTS / 4] = GPUNVME_CSTS_RDY;
	return 0;
}

static int tcp_gpu_queue_delete(struct gpunvme_ctrl *c, uint16_t qid)
{
	struct tcp_ctrl *tc = tcp_ctrl(c);
	if (qid > c->nr_io_queues || !tc->q || !tc->q[qid])
		return -EINVAL;
	nvmf_proxy_stop(tc->px[qid], NULL);
	nvmf_queue_close(tc->q[qid]);
	free(tc->ns[qid]);
	tc->px[qid] = NULL;
	tc->q[qid] = NULL;
	tc->ns[qid] = NULL;
	return 0;
}

/* GPU queues' proxies and connections left open by their owner, then the
 * association: CC.SHN by Property Set and a bounded wait for CSTS.SHST
 * (§7.6.2), in nvmf_ctrl_disconnect. The doorbell page is DMA memory: the
 * controller's registry frees it. */
static void tcp_close(struct gpunvme_ctrl *c)
{
	struct tcp_ctrl *tc = tcp_ctrl(c);
	if (!tc)
		return;
	for (uint32_t q = 1; tc->q && q <= c->nr_io_queues; q++)
		if (tc->q[q])
			tcp_gpu_queue_delete(c, (uint16_t)q);
	nvmf_ctrl_disconnect(&tc->fab);
	free(tc->q);
	free(tc->px);
	free(tc->ns);
	free(tc);
	c->tr_priv = NULL;
}

static int tcp_reg_read(struct gpunvme_ctrl *c, uint32_t off, uint32_t size, uint64_t *val)
{
	return nvmf_prop_get(&tcp_ctrl(c)->fab, off, size, val);
}

static int tcp_reg_write(struct gpunvme_ctrl *c, uint32_t off, uint32_t size, uint64_t val)
{
	return nvmf_prop_set(&tcp_ctrl(c)->fab, off, size, val);
}

/* No bounce buffer: the data moves in PDUs from and to buf. */
static int tcp_admin(struct gpunvme_ctrl *c, struct gpunvme_sqe *cmd, void *buf, uint32_t len, int dir,
		     struct gpunvme_cqe *cpl)
{
	return nvmf_ctrl_admin(&tcp_ctrl(c)->fab, cmd, buf, len, tcp_dir(dir), cpl, c->opts.admin_timeout_ms);
}

/* Each queue's connection says for itself (src/io fails a dead one's
 * commands); polling a property per millisecond would cost a round trip. */
static int tcp_check_alive(struct gpunvme_ctrl *c, const char *what)
{
	(void)c;
	(void)what;
	return 0;
}

int tcp_reassociate(struct gpunvme_ctrl *c)
{
	struct tcp_ctrl *tc = tcp_ctrl(c);
	/* a keep-alive on a dead admin queue makes nvmf_ctrl_admin build a
	 * new association; then the queue count, which a new controller
	 * does not know (NVMe 1.4 §5.21.1.7) */
	struct gpunvme_sqe ka = { .opc = GPUNVME_ADM_KEEP_ALIVE };
	nvmf_queue_kill(tc->fab.admin, -ECONNRESET, "re-association");
	int rc = gpunvme_admin(c, &ka, NULL, 0, 0, NULL);
	if (rc)
		return rc;
	char who[sizeof(tc->fab.p.uri) + 32];
	snprintf(who, sizeof(who), "%s: the new association", tc->fab.p.uri);
	return ctrl_renegotiate_queues(c, who);
}

/* Reset, first half: nothing here. Failing the I/O queues' commands next
 * closes each connection (tcp_qpair.c), so nothing lands afterwards; the
 * association ends in the second half. */
static int tcp_disable(struct gpunvme_ctrl *c)
{
	(void)c;
	return 0;
}

/* Second half: a new association, then the queues reconnect to it. */
static int tcp_enable(struct gpunvme_ctrl *c, int disable_rc)
{
	(void)disable_rc;
	return tcp_reassociate(c);
}

/* Fabrics: the queue pair's connection, and the CPU proxy that serves
 * the host-memory queues the GPU drives (src/nvmf/proxy.c). */
static int tcp_gpu_queue_create(struct gpunvme_ctrl *c, uint16_t qid, uint64_t sq_iova, uint64_t cq_iova,
				uint32_t depth)
{
	struct tcp_ctrl *tc = tcp_ctrl(c);
	if (qid > c->nr_io_queues || tc->q[qid])
		return gpunvme_set_error(-EINVAL, "queue %u: not a free I/O queue", qid);
	struct nvmf_proxy_ns *ns = calloc(c->nns ? c->nns : 1, sizeof(*ns));
	if (!ns)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	for (uint32_t i = 0; i < c->nns; i++)
		ns[i] = (struct nvmf_proxy_ns){ c->ns[i].info.nsid, c->ns[i].info.lba_shift };
	int rc = nvmf_queue_open(&tc->fab.p, qid, depth, tc->fab.cntlid, 0, tc->fab.ioccsz, &tc->q[qid], NULL);
	if (!rc) {
		/* A new queue's SQ tail and CQ head start at 0 (NVMe 1.4 §4.1:
		 * a controller resets both pointers when the queue is created;
		 * the agent starts at slot 0). Here the doorbells are words in
		 * a host page that outlives the queues: the previous queue of
		 * this ID left its last tail there, and a new proxy reading it
		 * would forward that many zeroed SQEs and post completions the
		 * agent never asked for -- on the GPU each re-created queue
		 * then lost its first commands until their 30 s timeout.
		 * Written before the proxy thread starts (pthread_create orders
		 * them); the agent writes the words only after this returns. */
		volatile uint32_t *sq_db = (volatile uint32_t *)(tc->db + gpunvme_sq_doorbell(qid, 0));
		volatile uint32_t *cq_db = (volatile uint32_t *)(tc->db + gpunvme_cq_doorbell(qid, 0));
		*sq_db = 0;
		*cq_db = 0;
		/* over TCP a bus address is the host virtual address (src/bus/tcp.c) */
		struct nvmf_proxy_cfg cfg = {
			.sq = (struct gpunvme_sqe *)(uintptr_t)sq_iova,
			.cq = (void *)(uintptr_t)cq_iova,
			.depth = depth,
			.sq_db = sq_db,
			.qid = qid,
			.cntlid = tc->fab.cntlid,
			.page_size = c->page_size,
			.ns = ns,
			.nns = c->nns,
		};
		rc = nvmf_proxy_start(tc->q[qid], &cfg, &tc->px[qid]);
		if (rc) {
			nvmf_queue_close(tc->q[qid]);
			tc->q[qid] = NULL;
		}
	}
	/* the proxy keeps a pointer to the table: it lives until the queue goes */
	if (rc)
		free(ns);
	else
		tc->ns[qid] = ns;
	return rc;
}

/* Where the GPU writes doorbells: a page of host memory that the CPU
 * proxies read (the queues' "bus addresses" are host virtual addresses). */
static volatile void *tcp_doorbells(struct gpunvme_ctrl *c, size_t *len)
{
	struct tcp_ctrl *tc = tcp_ctrl(c);
	if (len)
		*len = tc->db_len;
	return tc->db;
}

const struct gpunvme_transport gpunvme_transport_tcp = {
	.match = tcp_match,
	.qp = &tcp_qpair_ops,
	/* the target frees a closed connection's queue ID asynchronously:
	 * reuse it last */
	.qid_reuse_last = true,
	.open = tcp_open,
	.setup = tcp_setup,
	.close = tcp_close,
	.shutdown = NULL, /* in close: nvmf_ctrl_disconnect */
	.reg_read = tcp_reg_read,
	.reg_write = tcp_reg_write,
	.admin = tcp_admin,
	.check_alive = tcp_check_alive,
	.disable = tcp_disable,
	.enable = tcp_enable,
	.gpu_queue_create = tcp_gpu_queue_create,
	.gpu_queue_delete = tcp_gpu_queue_delete,
	.doorbells = tcp_doorbells,
};
