/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The GPU queue protocol's internals: NOT API. Kernels call the functions
 * of gpunvme/device.cuh (gpunvme_dev_*); what is here (gpunvme_dq_*, for
 * "device queue") may change with the protocol that device.cuh describes:
 * per-queue-pair state, the memory-order primitives, the CQ poller, the SQ
 * tail commit, command placement with the queue core's PRP builder
 * (queue.h), and slot admission. Included by device.cuh only.
 */
#ifndef GPUNVME_DEVICE_QUEUE_CUH
#define GPUNVME_DEVICE_QUEUE_CUH

#ifndef GPUNVME_DEVICE_CUH
#error "include gpunvme/device.cuh, not device_queue.cuh"
#endif

struct gpunvme_dq_state {         /* device global memory, one per queue pair */
	unsigned long long tw;      /* next ticket << 32 | tickets not yet consumed */
	unsigned int broken;
	unsigned int pad_;
	unsigned long long sqw;     /* committed tickets << 32 | lock (bit 0) */
	unsigned long long cqw;     /* CQ head << 32 | head rung << 16 | phase << 1 | lock */
};

struct gpunvme_dq_pair {
	struct gpunvme_sqe *sq;     /* device-visible pointers */
	uint32_t *cq;               /* CQ entries as dwords */
	volatile uint32_t *sq_db;   /* doorbells in BAR0 */
	volatile uint32_t *cq_db;
	uint64_t *lists;            /* lp list pages per slot, page_size bytes each */
	const uint64_t *list_iova;  /* bus address of each list page */
	unsigned int *mark;         /* per slot: ticket + 1 once its SQE is written */
	unsigned int *done;         /* per slot: (cid + 1) << 16 | status, published by a poller */
	unsigned int *freed;        /* per slot: completions consumed */
	struct gpunvme_dq_state *s;
	uint32_t depth;             /* power of two, at most 32768 */
	uint32_t lp;
	uint16_t qid;
};

#if defined(__CUDACC__)

__device__ __forceinline__ unsigned int gpunvme_dq_ld(const unsigned int *p)
{
	return *(const volatile unsigned int *)p;
}

__device__ __forceinline__ unsigned long long gpunvme_dq_ld64(const unsigned long long *p)
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
__device__ __forceinline__ uint32_t gpunvme_dq_ld_acquire_sys(const uint32_t *p)
{
	uint32_t v;
	asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ void gpunvme_dq_st_release(unsigned int *p, unsigned int v)
{
	asm volatile("st.release.gpu.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void gpunvme_dq_fence_acquire(void)
{
	asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

/* Back-off for waiting threads. A command takes ~4 µs on the emulator at
 * QD1 (the NVMe steps alone, bench_gpu_qd1 on an H100), so the first rounds
 * only poll; after that, exponential __nanosleep keeps tens of thousands of
 * waiting threads off the memory system. Callers start with *ns = 32. Tried
 * on the H100 and dropped (bench/results/gpu-2026-11-22/gpu_iops.md notes): pausing on
 * %globaltimer instead of sleeping (throughput 58 -> 25 M IOPS: spinning
 * warps take the issue slots of working ones), a 256-round polling phase
 * (64 -> 46 M IOPS). */
__device__ __forceinline__ void gpunvme_dq_backoff(unsigned int *ns)
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
__device__ static int gpunvme_dq_classify(const struct gpunvme_dev_queues *q, struct gpunvme_dq_pair *qp)
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
__device__ __forceinline__ struct gpunvme_dq_pair gpunvme_dq_pair_get(const struct gpunvme_dev_queues *q, uint32_t qi)
{
	struct gpunvme_dq_pair qp = q->qp[qi];
	qp.s = (struct gpunvme_dq_state *)(q->qstate + (size_t)qi * q->qstate_stride);
	return qp;
}

/* ---- completion queue: the poller ------------------------------------------- */

#define GPUNVME_DQ_CQW_LOCK 1ull

__device__ __forceinline__ unsigned long long gpunvme_dq_cqw(uint32_t head, uint32_t rung, uint32_t phase)
{
	return (unsigned long long)head << 32 | (unsigned long long)rung << 16 | (unsigned long long)phase << 1;
}

/* Publish a completion for its waiter: the command id and status in one
 * word, so one load gives both; a release store (see above). */
__device__ __forceinline__ void gpunvme_dq_publish(struct gpunvme_dq_pair *qp, uint32_t dw3)
{
	uint32_t cid = gpunvme_dw3_cid(dw3);
	gpunvme_dq_st_release(&qp->done[cid & (qp->depth - 1)], ((cid + 1u) & 0xffffu) << 16 | gpunvme_dw3_status(dw3));
}

/* The CQ head doorbell. Stored lazily (see the protocol above), and fenced
 * at once: the next poller's store must not overtake ours, or the
 * controller would see the head move back. */
__device__ __forceinline__ void gpunvme_dq_cq_ring(struct gpunvme_dq_pair *qp, uint32_t head, uint32_t *rung)
{
	*qp->cq_db = head;
	*rung = head;
	__threadfence_system();
}

/* The poller's lock on the CQ word. Taken with acquire and given back with
 * release when entries were published for others: a thread that takes the
 * lock after them must see those words (its own may be among them). */
__device__ __forceinline__ unsigned long long gpunvme_dq_cqw_lock(unsigned long long *w)
{
	unsigned long long old;
	asm volatile("atom.acquire.gpu.or.b64 %0, [%1], 1;" : "=l"(old) : "l"(w) : "memory");
	return old;
}

__device__ __forceinline__ void gpunvme_dq_cqw_unlock(unsigned long long *w, unsigned long long v, bool published)
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
__device__ __forceinline__ int gpunvme_dq_cq_poll(struct gpunvme_dq_pair *qp, bool mine, unsigned int t, int *st,
					  uint64_t until)
{
	struct gpunvme_dq_state *s = qp->s;
	/* a sweep first looks whether someone polls, so a crowd of waiting
	 * threads does not keep the word bouncing */
	if (!mine && (gpunvme_dq_ld64(&s->cqw) & GPUNVME_DQ_CQW_LOCK))
		return 0;
	const unsigned long long w = gpunvme_dq_cqw_lock(&s->cqw);
	if (w & GPUNVME_DQ_CQW_LOCK)
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
	const uint32_t pub = mine ? gpunvme_dq_ld(&qp->done[t & mask]) : 0;
	uint32_t got = gpunvme_dq_ld_acquire_sys(qp->cq + head * 4u + 3u);
	if (mine && (pub >> 16) == ((t + 1u) & 0xffffu)) {
		gpunvme_dq_fence_acquire(); /* with the load above, an acquire */
		*st = (int)(pub & 0xffffu);
		gpunvme_dq_cqw_unlock(&s->cqw, w, false);
		return 1;
	}
	for (;;) {
		if (gpunvme_dw3_new(got, phase)) {
			if (mine && gpunvme_dw3_cid(got) == want) {
				*st = (int)gpunvme_dw3_status(got);
				found = 1;
			} else {
				gpunvme_dq_publish(qp, got);
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
				gpunvme_dq_cq_ring(qp, head, &rung); /* idle: a good moment */
		}
		got = gpunvme_dq_ld_acquire_sys(qp->cq + head * 4u + 3u);
	}
	if (((head - rung) & mask) >= (found ? qp->depth / 2 : lazy))
		gpunvme_dq_cq_ring(qp, head, &rung);
	gpunvme_dq_cqw_unlock(&s->cqw, gpunvme_dq_cqw(head, rung, phase), published);
	return found;
}

/*
 * The same sweep by a whole warp (all 32 lanes call it): lane 0 takes the
 * poller's lock, then each lane reads one of the next 32 entries, so a PCIe
 * round trip fetches 32 completions instead of one. The run of new entries
 * ends at the first lane whose phase tag is stale. Everything found is
 * published, the warp's own completions too.
 *
 * With `probe`, lane 0 first reads the entry at the head alone, and the
 * warp sweeps only when it is new (§4.6: entries are posted in order, so
 * none after the head is new while the head is not). A sweep's 32 loads,
 * 16 bytes apart, are 16 reads of 32-byte sectors over PCIe when the CQ is
 * in host memory, each with its own TLP header; a probe is one. Waiting
 * warps whose pauses have grown (nothing arrived for a while) probe: an md
 * load's polls read 0.8 GB/s of CQ with sweeps only and 0.1 GB/s with the
 * probe, and its rate went from 89.4-90.1 % to 91.6 % of the link
 * (bench/results/emu-2026-11-29-s20, call 2). Like the single poller's
 * early return, an empty probe consumes and publishes nothing and puts the
 * CQ word back as it found it.
 */
__device__ __forceinline__ void gpunvme_dq_cq_poll_warp(struct gpunvme_dq_pair *qp, bool probe)
{
	const unsigned int full = 0xffffffffu, lane = threadIdx.x & 31u;
	struct gpunvme_dq_state *s = qp->s;
	unsigned long long w = 0;
	if (lane == 0) {
		w = (gpunvme_dq_ld64(&s->cqw) & GPUNVME_DQ_CQW_LOCK) ? GPUNVME_DQ_CQW_LOCK : gpunvme_dq_cqw_lock(&s->cqw);
		if (probe && !(w & GPUNVME_DQ_CQW_LOCK)) {
			const uint32_t h = (uint32_t)(w >> 32) & 0xffffu, ph = (uint32_t)(w >> 1) & 1u;
			/* acquire as the sweep's loads: a new head is re-read
			 * by the sweep, which publishes it */
			if (!gpunvme_dw3_new(gpunvme_dq_ld_acquire_sys(qp->cq + h * 4u + 3u), ph)) {
				gpunvme_dq_cqw_unlock(&s->cqw, w, false);
				w = GPUNVME_DQ_CQW_LOCK; /* nothing to sweep */
			}
		}
	}
	w = __shfl_sync(full, w, 0);
	if (w & GPUNVME_DQ_CQW_LOCK)
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
		uint32_t dw3 = gpunvme_dq_ld_acquire_sys(qp->cq + pos * 4u + 3u);
		unsigned int stale = __ballot_sync(full, !gpunvme_dw3_new(dw3, ph));
		unsigned int n = stale ? __ffs(stale) - 1 : 32u; /* consecutive new entries */
		if (lane < n)
			gpunvme_dq_publish(qp, dw3);
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
			gpunvme_dq_cq_ring(qp, head, &rung);
		gpunvme_dq_cqw_unlock(&s->cqw, gpunvme_dq_cqw(head, rung, phase), true);
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
__device__ __forceinline__ int gpunvme_dq_commit(const struct gpunvme_dev_queues *q, struct gpunvme_dq_pair *qp,
					 unsigned int t, uint64_t deadline)
{
	struct gpunvme_dq_state *s = qp->s;
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
			while (n - c < qp->depth && gpunvme_dq_ld(&qp->mark[n & mask]) == n + 1u)
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
			return gpunvme_dq_classify(q, qp);
		gpunvme_dq_backoff(&ns);
	}
}

/* Bus address of buffer byte `off`. */
__device__ __forceinline__ uint64_t gpunvme_dq_buf_addr(const struct gpunvme_dev_buf *b, uint64_t off)
{
	const struct gpunvme_prp_addr src = { 0, b->iova64k, 0, b->shift ? b->shift : 16u };
	return gpunvme_prp_addr_of(&src, off);
}

/* PRPs for len bytes at buffer offset off (bus address a) into the SQE,
 * with the list pages of this slot: the queue core's builder over the
 * buffer's table of 64 KiB or 4 KiB pieces (the controller page size
 * divides the piece: registration checks it, so a page never spans two
 * pieces). */
__device__ __forceinline__ int gpunvme_dq_prps(const struct gpunvme_dev_queues *q, struct gpunvme_dq_pair *qp, uint32_t slot,
				       const struct gpunvme_dev_buf *b, uint64_t off, uint64_t a, uint64_t len,
				       struct gpunvme_sqe *e)
{
	const struct gpunvme_prp_addr src = { 0, b->iova64k, 0, b->shift ? b->shift : 16u };
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
__device__ __forceinline__ int gpunvme_dq_place(const struct gpunvme_dev_queues *q, struct gpunvme_dq_pair *qp,
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
	int err = gpunvme_dq_prps(q, qp, slot, b, off, a, len, &e);
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
__device__ __forceinline__ bool gpunvme_dq_slot_free(const struct gpunvme_dq_pair *qp, unsigned int freed,
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
__device__ __forceinline__ int gpunvme_dq_slot_wait(const struct gpunvme_dev_queues *q, struct gpunvme_dq_pair *qp,
						    unsigned int t, unsigned int ahead, uint64_t deadline)
{
	if (ahead == 0)
		return 0;
	const unsigned int mask = qp->depth - 1;
	const bool room = ahead < qp->depth - 1u;
	unsigned int ns = 32, f0 = gpunvme_dq_ld(&qp->freed[t & mask]), f1 = room ? 0 : gpunvme_dq_ld(&qp->freed[(t + 1u) & mask]);
	while (!gpunvme_dq_slot_free(qp, f0, t) || (!room && !gpunvme_dq_slot_free(qp, f1, t + 1u))) {
		gpunvme_dq_cq_poll(qp, false, 0, NULL, 0);
		if (gpunvme_dev_now() > deadline)
			return gpunvme_dq_classify(q, qp); /* our ticket is lost: the queue is */
		gpunvme_dq_backoff(&ns);
		f0 = gpunvme_dq_ld(&qp->freed[t & mask]);
		if (!room)
			f1 = gpunvme_dq_ld(&qp->freed[(t + 1u) & mask]);
	}
	return 0;
}

/* Give the slot back for its next lap, then uncount the ticket (the low
 * half never borrows: our ticket is still counted in it). */
__device__ __forceinline__ void gpunvme_dq_release(struct gpunvme_dq_pair *qp, unsigned int t)
{
	const unsigned int slot = t & (qp->depth - 1);
	/* The slot's done word names t as taken. A waiter that found its own
	 * completion leaves no publish behind, so a slot could keep 0 (or a
	 * publish 65536 tickets old), and the ticket t' with (t' + 1) & 0xffff
	 * equal to it (t' = 65535 on a fresh queue) would read it as its own
	 * completion: success for a command that never ran. The next ticket
	 * of the slot is t + depth, which this value never matches. Stored
	 * before the slot counts as free (the fence; pairs with the slot wait's
	 * load of freed[]), so no publish for t + depth can precede it. */
	*(volatile unsigned int *)&qp->done[slot] = ((t + 1u) & 0xffffu) << 16;
	__threadfence();
	atomicAdd(&qp->freed[slot], 1u);
	atomicAdd(&qp->s->tw, ~0ull);
}

/* Has a poller published ticket t's completion? Then *st is its status. */
__device__ __forceinline__ bool gpunvme_dq_published(const struct gpunvme_dq_pair *qp, unsigned int t, int *st)
{
	unsigned int w = gpunvme_dq_ld(&qp->done[t & (qp->depth - 1)]);
	if ((w >> 16) != ((t + 1u) & 0xffffu))
		return false;
	gpunvme_dq_fence_acquire(); /* with the load above, an acquire */
	*st = (int)(w & 0xffffu);
	return true;
}

#endif /* __CUDACC__ */
#endif
