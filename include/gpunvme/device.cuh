/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * GPU data path: CUDA threads build NVMe commands, ring the SQ tail doorbell
 * and poll completions themselves (device-initiated I/O, DESIGN.md §4).
 *
 * Queue protocol, per queue pair of `depth` (a power of two, at most 32768)
 * entries. It is built so that one thread alone on a queue pays little more
 * than the NVMe steps themselves (SQE stores, one system fence, the
 * doorbell, polling the CQ): QD1 latency is one of its goals
 * (bench/gpu_qd1_notes.md), and throughput under 65,536 threads the other.
 *  - The ticket word packs the next ticket with the number of tickets not
 *    yet consumed; one atomic gives both. Ticket t picks SQ slot t % depth;
 *    the command id is t % 65536, so a completion names its slot and the
 *    lap it belongs to.
 *  - Room (NVMe 1.4 §4.1.1, a full SQ keeps one slot empty): fewer than
 *    depth - 1 unconsumed tickets ahead of t, or else command t + 1 - depth
 *    consumed. The slot: its previous command (t - depth) consumed
 *    (`freed`, per slot). Nothing ahead means both at once.
 *  - The SQ tail moves in ticket order: the SQ word packs the
 *    tail (tickets covered by the doorbell) with a lock bit; its holder
 *    advances over every consecutive written slot (`mark`) and writes the
 *    doorbell once for all of them (coalescing).
 *  - The CQ word packs the CQ head, the head last written to the CQ head
 *    doorbell, the phase and a lock bit: its holder is the queue's poller.
 *    A thread waiting alone becomes the poller and reads the CQ until its
 *    own completion arrives; entries of other commands it finds are
 *    published per slot in `done` (command id and status in one word).
 *  - The CQ head doorbell is written lazily (when an eighth of the queue
 *    has been consumed and the poller is idle, or half of it at once): the
 *    controller only needs room to post, and each doorbell store must be
 *    fenced against the next poller's, which would otherwise sit on the
 *    path of every completion.
 * Warp batches (gpunvme_dev_rw_lanes) take admission for 32 commands in
 * one atomic, then 32 tickets, ring once and poll 32 entries per PCIe round
 * trip.
 * Every wait is bounded by a deadline (%globaltimer); a command that times
 * out leaves its slot held (the controller may still write to its buffer)
 * and marks the queue broken: later calls fail at once with
 * GPUNVME_DEV_EIO until the host recreates the queues.
 *
 * Return values of device functions: 0, an NVMe status value (> 0, nvme.h
 * layout: GPUNVME_SC_*), or a negative GPUNVME_DEV_E* code.
 */
#ifndef GPUNVME_DEVICE_CUH
#define GPUNVME_DEVICE_CUH

#include <stdint.h>

#include "gpunvme/nvme.h"
#include "gpunvme/queue.h"

#define GPUNVME_DEV_EIO (-5)        /* queue broken by an earlier timeout, or controller fatal */
#define GPUNVME_DEV_ENODEV (-19)    /* registers read all ones: device gone */
#define GPUNVME_DEV_EINVAL (-22)    /* bad argument (range, size, alignment) */
#define GPUNVME_DEV_ETIMEDOUT (-110)

#define GPUNVME_DEV_MAX_LISTS 4     /* PRP list pages per command */
#define GPUNVME_DEV_MAX_DEPTH 32768 /* entries per queue: command ids are tickets mod 65536,
                                       and a slot's laps must differ in them */

struct gpunvme_dev_qstate {         /* device global memory, one per queue pair */
	unsigned long long tw;      /* next ticket << 32 | tickets not yet consumed */
	unsigned int broken;
	unsigned int pad_;
	unsigned long long sqw;     /* committed tickets << 32 | lock (bit 0) */
	unsigned long long cqw;     /* CQ head << 32 | head rung << 16 | phase << 1 | lock */
};

struct gpunvme_dev_qp {
	struct gpunvme_sqe *sq;     /* device-visible pointers */
	uint32_t *cq;               /* CQ entries as dwords */
	volatile uint32_t *sq_db;   /* doorbells in BAR0 */
	volatile uint32_t *cq_db;
	uint64_t *lists;            /* lp list pages per slot, page_size bytes each */
	const uint64_t *list_iova;  /* bus address of each list page */
	unsigned int *mark;         /* per slot: ticket + 1 once its SQE is written */
	unsigned int *done;         /* per slot: (cid + 1) << 16 | status, published by a poller */
	unsigned int *freed;        /* per slot: completions consumed */
	struct gpunvme_dev_qstate *s;
	uint32_t depth;             /* power of two, at most 32768 */
	uint32_t lp;
	uint16_t qid;
};

/* What a kernel needs: the queue pairs and the namespace it works on. */
struct gpunvme_dev_queues {
	struct gpunvme_dev_qp *qp;  /* device array of nq */
	uint32_t nq;
	uint32_t nsid;
	uint32_t lba_shift;
	uint32_t max_blocks;        /* per command (MDTS) */
	uint64_t nsze;              /* blocks */
	uint32_t page_size;         /* CC.MPS */
	const volatile uint32_t *csts; /* CSTS in BAR0 for diagnosis, or NULL
	                               (GPU reads of a real BAR may not work) */
	unsigned char *qstate;      /* queue pair i's gpunvme_dev_qstate is at */
	uint32_t qstate_stride;     /* qstate + i * qstate_stride (device memory) */
};

/* A data buffer: bus address of each 64 KiB piece (seed 002's lookup table:
 * pinned host memory or GPU memory alike). */
struct gpunvme_dev_buf {
	const uint64_t *iova64k;
	uint64_t len;
};

struct gpunvme_dev_tag {           /* an asynchronous command */
	uint32_t qi;
	unsigned int ticket;        /* slot = ticket % depth, command id = ticket % 65536 */
	int err;                    /* set when the slot went out as a no-op */
};

#if defined(__CUDACC__)

__device__ __forceinline__ uint64_t gpunvme_dev_now(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__device__ __forceinline__ unsigned int gpunvme_ld(const unsigned int *p)
{
	return *(const volatile unsigned int *)p;
}

__device__ __forceinline__ unsigned long long gpunvme_ld64(const unsigned long long *p)
{
	return *(const volatile unsigned long long *)p;
}

/*
 * Memory order (PTX memory model). The controller writes a command's data,
 * then its CQE (§4.6.1); a CQE is read with an acquire load at system
 * scope, so the loads after it see that data, in host memory (Tier 1) or
 * GPU memory (Tier 2), and no stale copy in this SM's L1. Polling this way
 * costs ~0.3 µs per command more than relaxed loads and saves the fence
 * that relaxed loads would need after the CQE (~0.7 µs at system scope;
 * bench_gpu_qd1's floor variants, bench/gpu_qd1_notes.md).
 * A poller hands other threads their completions with a release store
 * (GPU scope: the waiters are GPU threads; the acquire above made the data
 * visible to the poller, and release is cumulative); a waiter reads its
 * word relaxed and fences only once it is there, so waiting threads do not
 * invalidate their SM's L1 on every look.
 */
__device__ __forceinline__ uint32_t gpunvme_ld_acquire_sys(const uint32_t *p)
{
	uint32_t v;
	asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ void gpunvme_st_release(unsigned int *p, unsigned int v)
{
	asm volatile("st.release.gpu.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void gpunvme_fence_acquire(void)
{
	asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

/* Back-off for waiting threads. A command takes ~4 µs on the emulator at
 * QD1 (the NVMe steps alone, bench_gpu_qd1 on an H100), so the first rounds
 * only poll; after that, exponential __nanosleep keeps tens of thousands of
 * waiting threads off the memory system. Callers start with *ns = 32. Tried
 * on the H100 and dropped (bench/results/gpu_iops.md notes): pausing on
 * %globaltimer instead of sleeping (throughput 58 -> 25 M IOPS: spinning
 * warps take the issue slots of working ones), a 256-round polling phase
 * (64 -> 46 M IOPS). */
__device__ __forceinline__ void gpunvme_backoff(unsigned int *ns)
{
	if (*ns < 1024) {
		*ns += 32; /* ~31 polling rounds first */
		return;
	}
	__nanosleep(*ns);
	if (*ns < 16384)
		*ns *= 2;
}

/* Why a wait ran out: the controller's state if we can read it. */
__device__ static int gpunvme_dev_classify(const struct gpunvme_dev_queues *q, struct gpunvme_dev_qp *qp)
{
	atomicExch(&qp->s->broken, 1u);
	if (q->csts) {
		uint32_t csts = *q->csts;
		if (csts == 0xffffffffu)
			return GPUNVME_DEV_ENODEV;
		if (csts & GPUNVME_CSTS_CFS)
			return GPUNVME_DEV_EIO;
	}
	return GPUNVME_DEV_ETIMEDOUT;
}

/* A queue pair's descriptor, copied to registers in one round of loads.
 * Its state's address follows from the kernel's descriptor (parameter
 * space), so the first atomic on it does not wait for those loads: at QD1
 * every round trip to GPU memory (~0.2 µs) shows in the latency. */
__device__ __forceinline__ struct gpunvme_dev_qp gpunvme_dev_qp_get(const struct gpunvme_dev_queues *q, uint32_t qi)
{
	struct gpunvme_dev_qp qp = q->qp[qi];
	qp.s = (struct gpunvme_dev_qstate *)(q->qstate + (size_t)qi * q->qstate_stride);
	return qp;
}

/* ---- completion queue: the poller ------------------------------------------- */

#define GPUNVME_CQW_LOCK 1ull

__device__ __forceinline__ unsigned long long gpunvme_cqw(uint32_t head, uint32_t rung, uint32_t phase)
{
	return (unsigned long long)head << 32 | (unsigned long long)rung << 16 | (unsigned long long)phase << 1;
}

/* Publish a completion for its waiter: the command id and status in one
 * word, so one load gives both; a release store (see above). */
__device__ __forceinline__ void gpunvme_dev_publish(struct gpunvme_dev_qp *qp, uint32_t dw3)
{
	uint32_t cid = gpunvme_dw3_cid(dw3);
	gpunvme_st_release(&qp->done[cid & (qp->depth - 1)], ((cid + 1u) & 0xffffu) << 16 | gpunvme_dw3_status(dw3));
}

/* The CQ head doorbell. Stored lazily (see the protocol above), and fenced
 * at once: the next poller's store must not overtake ours, or the
 * controller would see the head move back. */
__device__ __forceinline__ void gpunvme_dev_cq_ring(struct gpunvme_dev_qp *qp, uint32_t head, uint32_t *rung)
{
	*qp->cq_db = head;
	*rung = head;
	__threadfence_system();
}

/* The poller's lock on the CQ word. Taken with acquire and given back with
 * release when entries were published for others: a thread that takes the
 * lock after them must see those words (its own may be among them). */
__device__ __forceinline__ unsigned long long gpunvme_cqw_lock(unsigned long long *w)
{
	unsigned long long old;
	asm volatile("atom.acquire.gpu.or.b64 %0, [%1], 1;" : "=l"(old) : "l"(w) : "memory");
	return old;
}

__device__ __forceinline__ void gpunvme_cqw_unlock(unsigned long long *w, unsigned long long v, bool published)
{
	if (published)
		asm volatile("atom.release.gpu.exch.b64 %0, [%1], %0;" : "+l"(v) : "l"(w) : "memory");
	else
		atomicExch(w, v);
}

/*
 * Become the queue's poller if nobody is, then read the CQ: with `mine`,
 * until the completion of ticket t arrives (*st gets its status; returns 1)
 * or `until` passes; without, one sweep over what has arrived. Every other
 * completion found is published for its waiter. Returns 0 when it did not
 * find t's completion or another thread is polling.
 */
__device__ __forceinline__ int gpunvme_dev_cq_poll(struct gpunvme_dev_qp *qp, bool mine, unsigned int t, int *st,
					  uint64_t until)
{
	struct gpunvme_dev_qstate *s = qp->s;
	/* a sweep first looks whether someone polls, so a crowd of waiting
	 * threads does not keep the word bouncing */
	if (!mine && (gpunvme_ld64(&s->cqw) & GPUNVME_CQW_LOCK))
		return 0;
	const unsigned long long w = gpunvme_cqw_lock(&s->cqw);
	if (w & GPUNVME_CQW_LOCK)
		return 0;
	const uint32_t mask = qp->depth - 1, want = t & 0xffffu;
	const uint32_t lazy = qp->depth >= 16 ? qp->depth / 8 : 1; /* ring when idle and this many unrung */
	uint32_t head = (uint32_t)(w >> 32) & 0xffffu, rung = (uint32_t)(w >> 16) & 0xffffu;
	uint32_t phase = (uint32_t)(w >> 1) & 1u;
	int found = 0;
	bool published = false;
	/* an earlier poller may have published ours already: its word is read
	 * while the first CQ load is in flight. CQ entries are read one at a
	 * time: loads of one line from one thread do not overlap (four in a
	 * row take four PCIe round trips, bench_gpu_qd1), and consecutive
	 * entries share lines. */
	const uint32_t pub = mine ? gpunvme_ld(&qp->done[t & mask]) : 0;
	uint32_t got = gpunvme_ld_acquire_sys(qp->cq + head * 4u + 3u);
	if (mine && (pub >> 16) == ((t + 1u) & 0xffffu)) {
		gpunvme_fence_acquire(); /* with the load above, an acquire */
		*st = (int)(pub & 0xffffu);
		gpunvme_cqw_unlock(&s->cqw, w, false);
		return 1;
	}
	for (;;) {
		if (gpunvme_dw3_new(got, phase)) {
			if (mine && gpunvme_dw3_cid(got) == want) {
				*st = (int)gpunvme_dw3_status(got);
				found = 1;
			} else {
				gpunvme_dev_publish(qp, got);
				published = true;
			}
			if (++head == qp->depth) {
				head = 0;
				phase ^= 1u;
			}
			if (found)
				break;
		} else {
			if (!mine || gpunvme_dev_now() > until)
				break;
			if (((head - rung) & mask) >= lazy)
				gpunvme_dev_cq_ring(qp, head, &rung); /* idle: a good moment */
		}
		got = gpunvme_ld_acquire_sys(qp->cq + head * 4u + 3u);
	}
	if (((head - rung) & mask) >= (found ? qp->depth / 2 : lazy))
		gpunvme_dev_cq_ring(qp, head, &rung);
	gpunvme_cqw_unlock(&s->cqw, gpunvme_cqw(head, rung, phase), published);
	return found;
}

/*
 * The same sweep by a whole warp (all 32 lanes call it): lane 0 takes the
 * poller's lock, then each lane reads one of the next 32 entries, so a PCIe
 * round trip fetches 32 completions instead of one. The run of new entries
 * ends at the first lane whose phase tag is stale. Everything found is
 * published, the warp's own completions too.
 */
__device__ __forceinline__ void gpunvme_dev_cq_poll_warp(struct gpunvme_dev_qp *qp)
{
	const unsigned int full = 0xffffffffu, lane = threadIdx.x & 31u;
	struct gpunvme_dev_qstate *s = qp->s;
	unsigned long long w = 0;
	if (lane == 0)
		w = (gpunvme_ld64(&s->cqw) & GPUNVME_CQW_LOCK) ? GPUNVME_CQW_LOCK : gpunvme_cqw_lock(&s->cqw);
	w = __shfl_sync(full, w, 0);
	if (w & GPUNVME_CQW_LOCK)
		return;
	const uint32_t mask = qp->depth - 1;
	uint32_t head = (uint32_t)(w >> 32) & 0xffffu, rung = (uint32_t)(w >> 16) & 0xffffu;
	uint32_t phase = (uint32_t)(w >> 1) & 1u;
	for (;;) {
		uint32_t pos = head + lane, ph = phase;
		if (pos >= qp->depth) { /* past the end: the next lap, phase flipped */
			pos -= qp->depth;
			ph ^= 1u;
		}
		uint32_t dw3 = gpunvme_ld_acquire_sys(qp->cq + pos * 4u + 3u);
		unsigned int stale = __ballot_sync(full, !gpunvme_dw3_new(dw3, ph));
		unsigned int n = stale ? __ffs(stale) - 1 : 32u; /* consecutive new entries */
		if (lane < n)
			gpunvme_dev_publish(qp, dw3);
		head += n;
		if (head >= qp->depth) {
			head -= qp->depth;
			phase ^= 1u;
		}
		if (n < 32u)
			break;
	}
	__syncwarp(full);
	if (lane == 0) {
		if (((head - rung) & mask) >= (qp->depth >= 16 ? qp->depth / 8 : 1))
			gpunvme_dev_cq_ring(qp, head, &rung);
		gpunvme_cqw_unlock(&s->cqw, gpunvme_cqw(head, rung, phase), true);
	}
	__syncwarp(full);
}

/* ---- submission queue ------------------------------------------------------- */

/*
 * Advance the SQ tail over consecutive written slots up to and including
 * ticket t; one doorbell write covers all of them. The holder of the SQ
 * word's lock rings; a thread alone on the queue rings for its own command
 * before looking for more.
 */
__device__ __forceinline__ int gpunvme_dev_commit(const struct gpunvme_dev_queues *q, struct gpunvme_dev_qp *qp,
					 unsigned int t, uint64_t deadline)
{
	struct gpunvme_dev_qstate *s = qp->s;
	const unsigned int mask = qp->depth - 1;
	unsigned int ns = 32;
	for (;;) {
		const unsigned long long w = atomicOr(&s->sqw, 1ull);
		unsigned int c = (unsigned int)(w >> 32), n = c;
		if (!(w & 1ull)) {
			unsigned int rung = c;
			if (c == t) {
				/* our own SQE, fenced by us before this */
				n = rung = t + 1u;
				*qp->sq_db = n & mask;
			}
			while (n - c < qp->depth && gpunvme_ld(&qp->mark[n & mask]) == n + 1u)
				n++;
			if (n != rung) {
				/* others' SQEs: each writer fenced its SQE before
				 * its mark; this fence orders our mark loads before
				 * the doorbell the controller acts on */
				__threadfence();
				*qp->sq_db = n & mask;
			}
			/* the next holder's doorbell must not overtake ours: the
			 * controller would see the tail move back */
			if (n != c)
				__threadfence_system();
			atomicExch(&s->sqw, (unsigned long long)n << 32);
		}
		if ((int)(n - t) > 0)
			return 0;
		if (gpunvme_dev_now() > deadline)
			return gpunvme_dev_classify(q, qp);
		gpunvme_backoff(&ns);
	}
}

/* Bus address of buffer byte `off`. */
__device__ __forceinline__ uint64_t gpunvme_dev_buf_addr(const struct gpunvme_dev_buf *b, uint64_t off)
{
	const struct gpunvme_prp_addr src = { 0, b->iova64k, 0, 16 };
	return gpunvme_prp_addr_of(&src, off);
}

/* PRPs for len bytes at buffer offset off (bus address a) into the SQE,
 * with the list pages of this slot: the queue core's builder over the
 * buffer's 64 KiB table (page size divides 64 KiB, so a page never spans
 * two pieces). */
__device__ __forceinline__ int gpunvme_dev_prps(const struct gpunvme_dev_queues *q, struct gpunvme_dev_qp *qp, uint32_t slot,
				       const struct gpunvme_dev_buf *b, uint64_t off, uint64_t a, uint64_t len,
				       struct gpunvme_sqe *e)
{
	const struct gpunvme_prp_addr src = { 0, b->iova64k, 0, 16 };
	const size_t first = (size_t)slot * qp->lp;
	return gpunvme_prp_fill_at(&src, off, a, len, q->page_size, qp->lists + first * (q->page_size / 8),
				   &qp->list_iova[first], qp->lp, &e->prp1, &e->prp2)
		       ? GPUNVME_DEV_EINVAL
		       : 0;
}

/* Build the command for ticket t in its slot, store it into the SQ and mark
 * the slot written. Returns the PRP error, if any: the slot then carries a
 * Flush, so the tail can still move past it, and the caller reports the
 * error after the (harmless) completion. */
__device__ __forceinline__ int gpunvme_dev_place(const struct gpunvme_dev_queues *q, struct gpunvme_dev_qp *qp,
					unsigned int t, uint8_t opc, uint64_t slba, uint32_t nlb,
					const struct gpunvme_dev_buf *b, uint64_t off, uint64_t a, uint64_t len)
{
	const uint32_t slot = t & (qp->depth - 1);
	struct gpunvme_sqe e;
	memset(&e, 0, sizeof(e));
	e.opc = opc;
	e.cid = (uint16_t)t;
	e.nsid = q->nsid;
	e.rw.slba = slba;
	e.rw.nlb = (uint16_t)(nlb - 1);
	int err = gpunvme_dev_prps(q, qp, slot, b, off, a, len, &e);
	if (err) {
		memset(&e, 0, sizeof(e));
		e.opc = GPUNVME_CMD_FLUSH;
		e.cid = (uint16_t)t;
		e.nsid = q->nsid;
	}
	/* 16-byte stores of the 64-byte entry into the SQ (host memory) */
	uint4 *dst = (uint4 *)&qp->sq[slot];
	const uint4 *src = (const uint4 *)&e;
	for (int k = 0; k < 4; k++)
		dst[k] = src[k];
	/* the SQE and its PRP list must be visible to the controller before
	 * anyone can ring a doorbell covering it: system-scope fence, then
	 * the mark */
	__threadfence_system();
	*(volatile unsigned int *)&qp->mark[slot] = t + 1u;
	return err;
}

/* Is ticket x's slot free: has the slot's command of the previous lap been
 * consumed? freed[] counts consumptions per slot; times depth it is the
 * slot's next ticket with the slot bits cleared, modulo 2^32 like tickets. */
__device__ __forceinline__ bool gpunvme_dev_slot_free(const struct gpunvme_dev_qp *qp, unsigned int freed,
						      unsigned int x)
{
	return freed * qp->depth == (x & ~(qp->depth - 1u));
}

/*
 * May ticket t go into its slot? `ahead` is how many tickets before t were
 * not yet consumed when t was taken (the ticket word's low half).
 *  - Room in the SQ (§4.1.1: at most depth - 1 entries between the
 *    controller's head and our tail): every entry waiting there belongs to
 *    a ticket not yet consumed, so ahead < depth - 1 is room enough.
 *    Otherwise t waits until command t + 1 - depth was consumed: it
 *    completed, so the controller fetched it and, in order, all before it.
 *  - The slot itself: its previous command (t - depth) must have been
 *    consumed (its PRP list page and `done` word are reused). ahead == 0
 *    says so already: every earlier ticket was consumed.
 * f0, f1: freed[] of the slots of t and t + 1, loaded by the caller when
 * it needs them. Command t + 1 - depth is the previous one in the slot of
 * ticket t + 1.
 */
__device__ __forceinline__ int gpunvme_dev_slot_wait(const struct gpunvme_dev_queues *q, struct gpunvme_dev_qp *qp,
						    unsigned int t, unsigned int ahead, uint64_t deadline)
{
	if (ahead == 0)
		return 0;
	const unsigned int mask = qp->depth - 1;
	const bool room = ahead < qp->depth - 1u;
	unsigned int ns = 32, f0 = gpunvme_ld(&qp->freed[t & mask]), f1 = room ? 0 : gpunvme_ld(&qp->freed[(t + 1u) & mask]);
	while (!gpunvme_dev_slot_free(qp, f0, t) || (!room && !gpunvme_dev_slot_free(qp, f1, t + 1u))) {
		gpunvme_dev_cq_poll(qp, false, 0, NULL, 0);
		if (gpunvme_dev_now() > deadline)
			return gpunvme_dev_classify(q, qp); /* our ticket is lost: the queue is */
		gpunvme_backoff(&ns);
		f0 = gpunvme_ld(&qp->freed[t & mask]);
		if (!room)
			f1 = gpunvme_ld(&qp->freed[(t + 1u) & mask]);
	}
	return 0;
}

/*
 * Submit one Read or Write of nlb blocks (at most max_blocks) between slba
 * and buffer offset off, on queue pair qi. On success *tag identifies the
 * command for gpunvme_dev_wait(). While waiting for room it polls the CQ,
 * so threads that only submit still make progress.
 */
__device__ static int gpunvme_dev_submit(const struct gpunvme_dev_queues *q, uint32_t qi, uint8_t opc,
					 uint64_t slba, uint32_t nlb, const struct gpunvme_dev_buf *b, uint64_t off,
					 struct gpunvme_dev_tag *tag, uint64_t deadline)
{
	if (qi >= q->nq || nlb == 0 || nlb > q->max_blocks || slba >= q->nsze || nlb > q->nsze - slba)
		return GPUNVME_DEV_EINVAL;
	uint64_t len = (uint64_t)nlb << q->lba_shift;
	if (off > b->len || len > b->len - off)
		return GPUNVME_DEV_EINVAL;
	const uint64_t a = gpunvme_dev_buf_addr(b, off);
	if (a & 3) /* §4.3: dword-aligned data */
		return GPUNVME_DEV_EINVAL;
	struct gpunvme_dev_qp lq = gpunvme_dev_qp_get(q, qi), *qp = &lq;
	struct gpunvme_dev_qstate *s = qp->s;
	/* ticket and count of unconsumed ones in one atomic, the broken flag
	 * read in the same round trip; a ticket taken on a broken queue is
	 * lost with the queue */
	unsigned int br = gpunvme_ld(&s->broken);
	const unsigned long long o = atomicAdd(&s->tw, (1ull << 32) | 1ull);
	const unsigned int t = (unsigned int)(o >> 32);
	if (br)
		return GPUNVME_DEV_EIO;
	int rc = gpunvme_dev_slot_wait(q, qp, t, (unsigned int)o, deadline);
	if (rc)
		return rc;
	tag->err = gpunvme_dev_place(q, qp, t, opc, slba, nlb, b, off, a, len);
	tag->qi = qi;
	tag->ticket = t;
	return gpunvme_dev_commit(q, qp, t, deadline);
}

/* Give the slot back for its next lap, then uncount the ticket (the low
 * half never borrows: our ticket is still counted in it). */
__device__ __forceinline__ void gpunvme_dev_release(struct gpunvme_dev_qp *qp, unsigned int t)
{
	atomicAdd(&qp->freed[t & (qp->depth - 1)], 1u);
	atomicAdd(&qp->s->tw, ~0ull);
}

/* Has a poller published ticket t's completion? Then *st is its status. */
__device__ __forceinline__ bool gpunvme_dev_published(const struct gpunvme_dev_qp *qp, unsigned int t, int *st)
{
	unsigned int w = gpunvme_ld(&qp->done[t & (qp->depth - 1)]);
	if ((w >> 16) != ((t + 1u) & 0xffffu))
		return false;
	gpunvme_fence_acquire(); /* with the load above, an acquire */
	*st = (int)(w & 0xffffu);
	return true;
}

/*
 * Wait for a submitted command; returns its NVMe status (0 = success) or a
 * negative GPUNVME_DEV_E* code. Alone on the queue, the caller becomes its
 * poller and reads the CQ until its completion arrives; otherwise it
 * watches its slot's word, trying to take over polling between pauses.
 * max_pause_ns 0: the pauses are gpunvme_backoff's (__nanosleep growing to
 * 16 µs, for crowds of waiting threads); otherwise spins on %globaltimer of
 * at most max_pause_ns, where a sleeping waiter would show in a latency
 * measurement (perf --gpu).
 */
__device__ static int gpunvme_dev_wait_paced(const struct gpunvme_dev_queues *q, const struct gpunvme_dev_tag *tag,
					     uint64_t deadline, unsigned int max_pause_ns)
{
	struct gpunvme_dev_qp lq = gpunvme_dev_qp_get(q, tag->qi), *qp = &lq;
	const unsigned int t = tag->ticket;
	unsigned int ns = 32;
	int st = 0;
	for (bool first = true;; first = false) {
		/* after the first try, look before asking for the poller's lock */
		bool ask = first || !(gpunvme_ld64(&qp->s->cqw) & GPUNVME_CQW_LOCK);
		if ((ask && gpunvme_dev_cq_poll(qp, true, t, &st, deadline)) || gpunvme_dev_published(qp, t, &st))
			break;
		if (gpunvme_dev_now() > deadline)
			return gpunvme_dev_classify(q, qp); /* slot stays held */
		if (!max_pause_ns) {
			gpunvme_backoff(&ns);
			continue;
		}
		for (const uint64_t until = gpunvme_dev_now() + ns; gpunvme_dev_now() < until;)
			;
		ns = ns + 32 < max_pause_ns ? ns + 32 : max_pause_ns;
	}
	gpunvme_dev_release(qp, t);
	return tag->err ? tag->err : st;
}

__device__ static int gpunvme_dev_wait(const struct gpunvme_dev_queues *q, const struct gpunvme_dev_tag *tag,
				       uint64_t deadline)
{
	return gpunvme_dev_wait_paced(q, tag, deadline, 0);
}

/* Thread level: read or write nlb blocks of any size (split at MDTS), one
 * command at a time. */
__device__ static int gpunvme_dev_rw(const struct gpunvme_dev_queues *q, uint32_t qi, uint8_t opc, uint64_t slba,
				     uint64_t nlb, const struct gpunvme_dev_buf *b, uint64_t off, uint64_t timeout_ns)
{
	uint64_t deadline = gpunvme_dev_now() + timeout_ns;
	while (nlb > 0) {
		uint32_t n = nlb < q->max_blocks ? (uint32_t)nlb : q->max_blocks;
		struct gpunvme_dev_tag tag;
		int rc = gpunvme_dev_submit(q, qi, opc, slba, n, b, off, &tag, deadline);
		if (rc)
			return rc;
		if ((rc = gpunvme_dev_wait(q, &tag, deadline)))
			return rc;
		slba += n;
		nlb -= n;
		off += (uint64_t)n << q->lba_shift;
	}
	return 0;
}

__device__ static int gpunvme_dev_read(const struct gpunvme_dev_queues *q, uint32_t qi, uint64_t slba, uint64_t nlb,
				       const struct gpunvme_dev_buf *b, uint64_t off, uint64_t timeout_ns)
{
	return gpunvme_dev_rw(q, qi, GPUNVME_CMD_READ, slba, nlb, b, off, timeout_ns);
}

__device__ static int gpunvme_dev_write(const struct gpunvme_dev_queues *q, uint32_t qi, uint64_t slba,
					uint64_t nlb, const struct gpunvme_dev_buf *b, uint64_t off, uint64_t timeout_ns)
{
	return gpunvme_dev_rw(q, qi, GPUNVME_CMD_WRITE, slba, nlb, b, off, timeout_ns);
}

/*
 * Warp-cooperative: all 32 lanes call with the same arguments; the range is
 * cut into MDTS-sized commands dealt out to the lanes, so up to 32 commands
 * of one request are in flight at once. Every lane returns the first
 * failure (0 if none).
 */
__device__ static int gpunvme_dev_rw_warp(const struct gpunvme_dev_queues *q, uint32_t qi, uint8_t opc,
					  uint64_t slba, uint64_t nlb, const struct gpunvme_dev_buf *b, uint64_t off,
					  uint64_t timeout_ns)
{
	const unsigned int lane = threadIdx.x & 31u;
	uint64_t deadline = gpunvme_dev_now() + timeout_ns;
	uint64_t per = q->max_blocks;
	uint64_t nchunks = (nlb + per - 1) / per;
	int err = 0;
	for (uint64_t base = 0; base < nchunks; base += 32) {
		uint64_t k = base + lane;
		int rc = 0;
		struct gpunvme_dev_tag tag;
		bool mine = k < nchunks && !err;
		if (mine) {
			uint64_t s0 = k * per;
			uint32_t n = (uint32_t)(nlb - s0 < per ? nlb - s0 : per);
			rc = gpunvme_dev_submit(q, qi, opc, slba + s0, n, b, off + (s0 << q->lba_shift), &tag, deadline);
			if (rc == 0)
				rc = gpunvme_dev_wait(q, &tag, deadline);
		}
		/* first error of the warp, by lane order */
		unsigned int bad = __ballot_sync(0xffffffffu, rc != 0);
		if (bad && !err)
			err = __shfl_sync(0xffffffffu, rc, __ffs(bad) - 1);
	}
	return err;
}

/*
 * Warp batch: each lane brings its own Read or Write (its own slba, nlb of at
 * most max_blocks, buffer offset; `active` false for lanes with nothing to
 * do) on the warp's queue pair qi (the same on every lane). All 32 lanes
 * must call it together. One lane takes the tickets for the whole batch (one
 * atomic instead of 32), rings one doorbell for it, and polls the CQ for the
 * warp while the others wait, so per-queue contention drops by the warp
 * size. Each lane gets its own command's result.
 */
__device__ static int gpunvme_dev_rw_lanes(const struct gpunvme_dev_queues *q, uint32_t qi, uint8_t opc,
					   uint64_t slba, uint32_t nlb, const struct gpunvme_dev_buf *b, uint64_t off,
					   bool active, uint64_t timeout_ns)
{
	const unsigned int full = 0xffffffffu, lane = threadIdx.x & 31u;
	uint64_t deadline = gpunvme_dev_now() + timeout_ns;
	int rc = 0;
	qi = __shfl_sync(full, qi, 0);
	uint64_t len = (uint64_t)nlb << q->lba_shift;
	if (active && (qi >= q->nq || nlb == 0 || nlb > q->max_blocks || slba >= q->nsze || nlb > q->nsze - slba ||
		       off > b->len || len > b->len - off || (gpunvme_dev_buf_addr(b, off) & 3)))
		rc = GPUNVME_DEV_EINVAL;
	unsigned int ok = __ballot_sync(full, active && rc == 0);
	if (!ok)
		return rc;
	const unsigned int k = __popc(ok), leader = __ffs(ok) - 1;
	struct gpunvme_dev_qp lq = gpunvme_dev_qp_get(q, qi), *qp = &lq;
	struct gpunvme_dev_qstate *s = qp->s;
	const unsigned int mask = qp->depth - 1;
	int lrc = 0;
	unsigned long long o = 0;
	if (lane == leader) {
		/* admission for the batch, exact: k more in the low half of
		 * the ticket word while it stays at most depth - 1 (given back
		 * otherwise), then the k tickets. So the batch always finds
		 * room (every SQ entry belongs to a counted command), one lane
		 * per warp waits instead of 32, and running out of time here
		 * leaves nothing behind. */
		unsigned int ns = 32;
		for (;;) {
			unsigned int br = gpunvme_ld(&s->broken);
			unsigned int ahead = (unsigned int)gpunvme_ld64(&s->tw);
			if (br) {
				lrc = GPUNVME_DEV_EIO;
				break;
			}
			if (ahead + k <= qp->depth - 1u) {
				if ((unsigned int)atomicAdd(&s->tw, (unsigned long long)k) + k <= qp->depth - 1u)
					break;
				atomicAdd(&s->tw, 0ull - k);
			}
			gpunvme_dev_cq_poll(qp, false, 0, NULL, 0);
			if (gpunvme_dev_now() > deadline) {
				lrc = (q->csts && *q->csts == 0xffffffffu) ? GPUNVME_DEV_ENODEV : GPUNVME_DEV_ETIMEDOUT;
				break;
			}
			gpunvme_backoff(&ns);
		}
		if (!lrc)
			o = atomicAdd(&s->tw, (unsigned long long)k << 32) - k; /* unconsumed before the batch */
	}
	lrc = __shfl_sync(full, lrc, leader);
	o = __shfl_sync(full, o, leader);
	if (lrc)
		return (ok >> lane) & 1u ? lrc : rc;
	const bool mine = (ok >> lane) & 1u;
	const unsigned int before = __popc(ok & ((1u << lane) - 1u)), base = (unsigned int)(o >> 32);
	const unsigned int t = base + before;
	int err = 0;
	if (mine) {
		err = gpunvme_dev_slot_wait(q, qp, t, (unsigned int)o + before, deadline);
		if (!err)
			rc = gpunvme_dev_place(q, qp, t, opc, slba, nlb, b, off, gpunvme_dev_buf_addr(b, off), len);
	}
	__syncwarp(full);
	if (__ballot_sync(full, err != 0))
		return mine ? (err ? err : GPUNVME_DEV_EIO) : rc;
	if (lane == leader)
		lrc = gpunvme_dev_commit(q, qp, base + k - 1u, deadline);
	lrc = __shfl_sync(full, lrc, leader);
	if (lrc)
		return mine ? lrc : rc;
	/* wait: the warp polls the CQ, everyone watches their own slot */
	bool done = !mine;
	int st = 0;
	unsigned int ns = 32;
	for (;;) {
		if (!done && gpunvme_dev_published(qp, t, &st)) {
			atomicAdd(&qp->freed[t & mask], 1u); /* the leader uncounts all k below */
			done = true;
		}
		unsigned int pending = __ballot_sync(full, !done);
		if (!pending)
			break;
		gpunvme_dev_cq_poll_warp(qp);
		int late = 0;
		if (lane == leader)
			late = gpunvme_dev_now() > deadline;
		if (__shfl_sync(full, late, leader)) {
			int why = lane == leader ? gpunvme_dev_classify(q, qp) : 0;
			why = __shfl_sync(full, why, leader);
			return done ? (rc ? rc : st) : why; /* unfinished slots stay held */
		}
		__nanosleep(ns);
		if (ns < 4096)
			ns *= 2;
	}
	if (lane == leader)
		atomicAdd(&s->tw, 0ull - k);
	return rc ? rc : st;
}

#endif /* __CUDACC__ */
#endif
