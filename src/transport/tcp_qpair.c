/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The NVMe/TCP transport, queue pairs: one TCP connection per queue,
 * Connect to our controller ID (NVMe-oF 1.1 §3.3). The commands src/io
 * builds go out as capsules (nvmf_queue_submit, data by SGL from the
 * request's buffer, NVMe-oF §2.3) and completions come from
 * nvmf_queue_reap. A command past its deadline while the connection is
 * stalled kills the connection (nothing can land later), every command in
 * flight fails, and the next submission reconnects.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>

#include "io/qpair.h"
#include "transport/tcp.h"

struct tcp_qpair {
	struct gpunvme_qpair qp;   /* first: the generic queue pair */
	struct nvmf_queue *fq;     /* the connection */
	uint64_t rx_seen, rx_tick; /* bytes received at the last check, and when they moved */
};

static inline struct tcp_qpair *tq_of(struct gpunvme_qpair *qp)
{
	return (struct tcp_qpair *)qp;
}

static int tcp_qp_init(struct gpunvme_qpair *qp, void *rings, size_t rings_len)
{
	(void)qp;
	(void)rings_len;
	if (rings)
		return gpunvme_set_error(-EOPNOTSUPP, "queue rings in caller memory: a fabrics controller has no "
					 "rings in memory (NVMe/TCP carries commands in capsules)");
	return 0;
}

/* one TCP connection per queue, Connect to our controller ID */
static int tcp_qp_connect(struct gpunvme_qpair *qp)
{
	struct tcp_ctrl *tc = tcp_ctrl(qp->c);
	return nvmf_queue_open(&tc->fab.p, qp->qid, qp->depth, tc->fab.cntlid, 0, tc->fab.ioccsz, &tq_of(qp)->fq,
			       NULL);
}

/* closing the connection deletes the queue (NVMe-oF §3.3) */
static void tcp_qp_release(struct gpunvme_qpair *qp)
{
	nvmf_queue_close(tq_of(qp)->fq);
}

/* The queue's connection again, to the current association (a new one
 * when the controller went away with the old). */
static int tcp_qp_recreate(struct gpunvme_qpair *qp)
{
	struct gpunvme_ctrl *c = qp->c;
	struct tcp_qpair *tq = tq_of(qp);
	int rc = nvmf_queue_reconnect(tq->fq, tcp_ctrl(c)->fab.cntlid);
	if (rc == -ECONNREFUSED || rc == -ECONNRESET) {
		/* Connect refused or the connection dropped at once: the
		 * controller may be gone with its admin association */
		if (tcp_reassociate(c) == 0)
			rc = nvmf_queue_reconnect(tq->fq, tcp_ctrl(c)->fab.cntlid);
	}
	return rc;
}

/* Close the connection first, so that no data of a command failed next
 * can land in its buffer afterwards. */
static void tcp_qp_stop(struct gpunvme_qpair *qp, int err)
{
	struct tcp_qpair *tq = tq_of(qp);
	if (qp->outstanding && !nvmf_queue_dead(tq->fq))
		nvmf_queue_kill(tq->fq, err, "commands in flight failed");
}

static int tcp_qp_ready(struct gpunvme_qpair *qp)
{
	struct tcp_qpair *tq = tq_of(qp);
	if (!nvmf_queue_dead(tq->fq))
		return 0;
	/* the connection dropped: its commands are failed by the next poll;
	 * once none is left, connect again */
	if (qp->outstanding)
		return gpunvme_set_error(nvmf_queue_dead(tq->fq), "%s (poll to fail the %u commands in flight, then "
								  "submit again to reconnect)",
					 nvmf_queue_why(tq->fq), qp->outstanding);
	int rc = tcp_qp_recreate(qp);
	if (rc)
		return rc;
	qpair_reset_state(qp);
	return 0;
}

/* No fast path: every command is a capsule built by the general path. */
static int tcp_qp_read(struct gpunvme_qpair *qp, uint32_t nsid, void *buf, uint64_t slba, uint64_t nlb,
		       gpunvme_cb cb, void *arg)
{
	return qpair_submit_rw(qp, GPUNVME_CMD_READ, nsid, buf, slba, nlb, cb, arg);
}

static int tcp_qp_write(struct gpunvme_qpair *qp, uint32_t nsid, const void *buf, uint64_t slba, uint64_t nlb,
			gpunvme_cb cb, void *arg)
{
	return qpair_submit_rw(qp, GPUNVME_CMD_WRITE, nsid, buf, slba, nlb, cb, arg);
}

/* The SGL is set by nvmf_queue_submit (in-capsule or a Transport SGL Data
 * Block), from the data's host address; the capsule goes out now. On an
 * error the connection is dead: what else is in flight on it fails at the
 * next poll. */
static int tcp_qp_submit(struct gpunvme_qpair *qp, struct gpunvme_sqe *e, const struct qpair_data *d)
{
	return nvmf_queue_submit(tq_of(qp)->fq, e, d->buf, d->len, tcp_dir(d->dir));
}

/* Completions from the connection; a dead connection fails every command
 * that was on it. */
static int tcp_qp_reap(struct gpunvme_qpair *qp, uint32_t max)
{
	struct tcp_qpair *tq = tq_of(qp);
	struct nvmf_cpl cpl[64];
	uint32_t want = max && max < 64 ? max : 64;
	int done = 0;
	int n = nvmf_queue_reap(tq->fq, cpl, want, 0);
	/* nothing arrived while commands are in flight: give the CPU away
	 * once, so a target on the same CPUs (loopback, a VM) runs sooner; a
	 * blocking wait here would stall callers that poll several queue
	 * pairs from one thread (the loader) */
	if (n == 0 && qp->outstanding)
		sched_yield();
	for (int i = 0; i < n; i++)
		done += qpair_complete(qp, cpl[i].cqe.cid, gpunvme_cqe_status(cpl[i].cqe.status), cpl[i].cqe.dw0,
				       cpl[i].err);
	if (n < 0 && qp->outstanding) {
		char msg[512];
		snprintf(msg, sizeof(msg), "%s", gpunvme_last_error());
		qpair_fail_all(qp, n);
		gpunvme_set_error(n, "%s", msg);
		return n;
	}
	return done;
}

/*
 * A command waits behind the data of every command before it on its
 * connection and on the target's other connections (eight clients sharing
 * one slow link wait minutes for a whole model), so it times out only when
 * the connection also moved no byte for io_timeout_ms: a stalled target,
 * not a busy one. Then the connection ends, so no data can land later, and
 * everything that was on it fails.
 */
static int tcp_qp_timeouts(struct gpunvme_qpair *qp, uint64_t now)
{
	struct tcp_qpair *tq = tq_of(qp);
	/* progress of the connection, for the stall test below */
	uint64_t rx = nvmf_queue_rx_bytes(tq->fq);
	if (rx != tq->rx_seen) {
		tq->rx_seen = rx;
		tq->rx_tick = now;
	}
	bool expired = false;
	for (uint32_t cid = 0; cid < qp->depth && !expired; cid++) {
		const struct io_cmd *cmd = &qp->cmds[cid];
		expired = cmd->state != CMD_FREE && !cmd->timed_out && cmd->deadline <= now;
	}
	if (!expired || now - tq->rx_tick < qp->timeout_ticks)
		return 0;
	char why[96];
	snprintf(why, sizeof(why), "I/O command timed out after %u ms", qp->c->opts.io_timeout_ms);
	nvmf_queue_kill(tq->fq, -ETIMEDOUT, why);
	uint32_t before = qp->outstanding;
	qpair_fail_all(qp, -ETIMEDOUT);
	gpunvme_set_error(-ETIMEDOUT, "%s", nvmf_queue_why(tq->fq));
	return (int)(before - qp->outstanding);
}

static void tcp_qp_wait(struct gpunvme_qpair *qp, uint32_t max_us)
{
	nvmf_queue_wait(tq_of(qp)->fq, max_us);
}

const struct gpunvme_qpair_ops tcp_qpair_ops = {
	.qp_size = sizeof(struct tcp_qpair),
	.init = tcp_qp_init,
	.connect = tcp_qp_connect,
	.disconnect = NULL, /* release closes the connection */
	.release = tcp_qp_release,
	.recreate = tcp_qp_recreate,
	.reset = NULL,
	.stop = tcp_qp_stop,
	.ready = tcp_qp_ready,
	.read = tcp_qp_read,
	.write = tcp_qp_write,
	.submit = tcp_qp_submit,
	.kick = NULL, /* capsules went out as they were built */
	.reap = tcp_qp_reap,
	.timeouts = tcp_qp_timeouts,
	.wait = tcp_qp_wait,
};
