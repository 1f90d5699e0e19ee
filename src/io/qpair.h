/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The CPU queue pair as the generic data path (qpair.c) and the transports
 * (src/transport, through ctrl/transport.h's queue pair operations) share
 * it: command ids, the per-command table, user requests split into
 * commands, the wait FIFO, deadlines. A transport's queue pair embeds
 * struct gpunvme_qpair as its first member.
 *
 * The helpers below are inline because the transports' reap loops and
 * single-command fast paths run them per command (the CPU path's cost is
 * counted in instructions, bench/callgrind_driver.sh).
 */
#ifndef GPUNVME_IO_QPAIR_H
#define GPUNVME_IO_QPAIR_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "ctrl/ctrl.h"

struct io_req {
	gpunvme_cb cb;
	void *arg;
	int err;
	uint16_t status;
	uint32_t dw0;
	uint32_t inflight;       /* commands submitted and not completed */
	uint8_t opc;
	uint32_t nsid;
	uint8_t *buf;            /* what remains to submit */
	uint64_t slba, nlb;
	uint32_t lba_shift, max_blocks;
	/* The buffer's mapping, owned by the request for its whole life: its
	 * later commands (waiting for free ids) build PRPs from it, never from
	 * a cache another request may have replaced since. Looked up again
	 * when an allocation was freed meanwhile (dma_gen moved). */
	struct dma_alloc dma;
	uint64_t dma_gen;
	bool waiting;            /* linked in the wait FIFO */
	struct io_req *next;     /* free list or wait FIFO */
};

/* A command in flight: either a whole request that fit in one command (the
 * fast path: callback kept here, no io_req) or one part of an io_req. */
enum { CMD_FREE = 0, CMD_SINGLE, CMD_PART };

struct io_cmd {
	uint8_t state;
	bool timed_out;
	struct io_req *req;      /* CMD_PART */
	gpunvme_cb cb;           /* CMD_SINGLE */
	void *arg;
	uint64_t deadline;       /* ticks */
};

struct gpunvme_qpair {
	struct gpunvme_ctrl *c;
	const struct gpunvme_qpair_ops *ops; /* the controller's transport's */
	uint16_t qid;
	uint32_t depth;
	uint16_t *free_cids;
	uint32_t nfree;
	struct io_cmd *cmds;
	uint8_t *lists;          /* list pages: lp per command */
	uint64_t *list_iova;
	uint32_t lp;
	struct io_req *reqs, *free_reqs, *wait_head, *wait_tail;
	uint32_t outstanding;
	uint64_t timeout_ticks, next_check;
	uint32_t timeout_ms;
	struct dma_alloc cache;  /* last DMA allocation looked up, valid for cache_gen;
				  * only a lookup shortcut: requests keep copies */
	uint64_t cache_gen;
	const struct gpunvme_ns *ns_cache;
};

/* ---- time ---------------------------------------------------------------------- */

/* Command deadlines use the TSC where there is one: a few instructions per
 * submit instead of a clock_gettime call. Calibrated once per process
 * (qpair.c). */
extern uint64_t qpair_ticks_per_ms;

static inline uint64_t qpair_ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
	return __rdtsc();
#else
	return gpunvme_now_ns();
#endif
}

/* ---- for the transports ---------------------------------------------------------- */

/* The general path of a read or write (any size, any error explained). */
int qpair_submit_rw(struct gpunvme_qpair *qp, uint8_t opc, uint32_t nsid, const void *buf, uint64_t slba,
		    uint64_t nlb, gpunvme_cb cb, void *arg);
/* The command state back to empty: every id free, no command in flight
 * (and the transport's queue state with it). */
void qpair_reset_state(struct gpunvme_qpair *qp);
/* A request's mapping again when a DMA allocation was freed while it
 * waited (never build PRPs from a mapping that may be gone): 0, or
 * -EFAULT with the reason. */
int qpair_req_mapping(struct gpunvme_qpair *qp, struct io_req *r);
/* The last request of a command finished: its callback, its slot free. */
void qpair_req_finish(struct gpunvme_qpair *qp, struct io_req *r);

/*
 * Single-command fast path, first half: a read or write that fits in one
 * command, on the namespace the queue pair used last, within one cached
 * DMA allocation contiguous on the bus, with a command id free and no
 * request waiting. *iova and *len: the data's bus address and length.
 * false: take the general path (which checks and explains).
 */
static inline bool qpair_single_ok(const struct gpunvme_qpair *qp, uint32_t nsid, const void *buf, uint64_t slba,
				   uint64_t nlb, uint64_t *iova, size_t *len)
{
	const struct gpunvme_ns *ns = qp->ns_cache;
	const uint8_t *p = buf;
	if (!ns || ns->info.nsid != nsid || ns->info.ms || nlb - 1 >= ns->info.max_blocks ||
	    slba >= ns->info.nsze || nlb > ns->info.nsze - slba || ((uintptr_t)p & 3) || !qp->nfree || qp->wait_head)
		return false;
	size_t n = (size_t)nlb << ns->info.lba_shift;
	const struct dma_alloc *a = &qp->cache;
	/* acquire pairs with the release increment in gpunvme_dma_free: an
	 * unchanged generation means the cached allocation is still there */
	if (__atomic_load_n(&gpunvme_dma_gen, __ATOMIC_ACQUIRE) != qp->cache_gen || !a->va || p < a->va ||
	    (size_t)(p - a->va) >= a->len || n > a->len - (size_t)(p - a->va) || a->contig < a->len)
		return false;
	*iova = a->iova0 + (uint64_t)(p - a->va);
	*len = n;
	return true;
}

/* Second half: a command id for it, the callback riding in the command
 * slot (no io_req), its deadline started. */
static inline uint16_t qpair_single_start(struct gpunvme_qpair *qp, gpunvme_cb cb, void *arg)
{
	uint16_t cid = qp->free_cids[--qp->nfree];
	struct io_cmd *cmd = &qp->cmds[cid];
	cmd->state = CMD_SINGLE;
	cmd->cb = cb;
	cmd->arg = arg;
	cmd->deadline = qpair_ticks() + qp->timeout_ticks;
	qp->outstanding++;
	return cid;
}

/* One completion, from a CQ or a connection: 1 when a user request
 * finished with it. err: a transport failure, else 0. */
static inline int qpair_complete(struct gpunvme_qpair *qp, uint16_t cid, uint16_t st, uint32_t dw0, int err)
{
	struct io_cmd *cmd = cid < qp->depth ? &qp->cmds[cid] : NULL;
	if (!cmd || cmd->state == CMD_FREE)
		return 0; /* not ours: a controller bug, ignored */
	uint8_t state = cmd->state;
	cmd->state = CMD_FREE;
	qp->free_cids[qp->nfree++] = cid;
	if (cmd->timed_out) {
		cmd->timed_out = false; /* answered late: id reusable now */
		return 0;
	}
	if (!err && st)
		err = -EIO;
	if (state == CMD_SINGLE) {
		struct gpunvme_cpl cpl = { .err = err, .status = st, .dw0 = dw0 };
		qp->outstanding--;
		if (cmd->cb)
			cmd->cb(cmd->arg, &cpl);
		return 1;
	}
	struct io_req *r = cmd->req;
	cmd->req = NULL;
	if (err && !r->err) {
		r->err = err;
		r->status = st;
		r->nlb = 0; /* don't submit the rest of a failed request */
	}
	r->dw0 = dw0;
	if (--r->inflight == 0 && r->nlb == 0 && !r->waiting) {
		qpair_req_finish(qp, r);
		return 1;
	}
	return 0;
}

#endif
