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
 *
 * The API is this file: the types a kernel receives (gpunvme_dev_queues
 * from gpunvme_gpu_queues_desc(), gpunvme_dev_buf from gpunvme_gpu_buf_desc(),
 * gpunvme_dev_tag) and the gpunvme_dev_* functions. Names: gpunvme_gpu_*
 * is the host side of the GPU path (gpu.h), gpunvme_dev_* what device code
 * calls, gpunvme_dq_* the protocol's internals (device_queue.cuh, not API).
 */
#ifndef GPUNVME_DEVICE_CUH
#define GPUNVME_DEVICE_CUH

#include <stdint.h>

#include "gpunvme/spec/nvme.h"
#include "gpunvme/spec/queue.h"

#define GPUNVME_DEV_EIO (-5)        /* queue broken by an earlier timeout, or controller fatal */
#define GPUNVME_DEV_ENODEV (-19)    /* registers read all ones: device gone */
#define GPUNVME_DEV_EINVAL (-22)    /* bad argument (range, size, alignment) */
#define GPUNVME_DEV_ETIMEDOUT (-110)

#define GPUNVME_DEV_MAX_LISTS 4     /* PRP list pages per command */
#define GPUNVME_DEV_MAX_DEPTH 32768 /* entries per queue: command ids are tickets mod 65536,
                                       and a slot's laps must differ in them */

/* A warp batch's wait (gpunvme_dev_rw_lanes) pauses 32 ns, doubling to
 * GPUNVME_WARP_PAUSE_MAX_NS, between polls; once a pause reaches
 * GPUNVME_WARP_PROBE_NS it probes the CQ's head before sweeping
 * (gpunvme_dq_cq_poll_warp). Compile-time, for same-tree comparisons
 * (bench/coherence_gpu_run.sh's pollab phase builds both ways): a probe
 * threshold above the pause's limit never probes. 16 us pauses read less
 * still but saw completions later: 90.3-90.8 % of the link against 91.6 %
 * (bench/results/emu-2026-11-29-s20, call 2). */
#ifndef GPUNVME_WARP_PROBE_NS
#define GPUNVME_WARP_PROBE_NS 256u
#endif
#ifndef GPUNVME_WARP_PAUSE_MAX_NS
#define GPUNVME_WARP_PAUSE_MAX_NS 4096u
#endif

/* One queue pair's device state: the protocol's internals (device_queue.cuh). */
struct gpunvme_dq_pair;

/* What a kernel needs: the queue pairs and the namespace it works on. */
struct gpunvme_dev_queues {
	struct gpunvme_dq_pair *qp;  /* device array of nq */
	uint32_t nq;
	uint32_t nsid;
	uint32_t lba_shift;
	uint32_t max_blocks;        /* per command (MDTS) */
	uint64_t nsze;              /* blocks */
	uint32_t page_size;         /* CC.MPS */
	const volatile uint32_t *csts; /* CSTS in BAR0 for diagnosis, or NULL
	                               (GPU reads of a real BAR may not work) */
	unsigned char *qstate;      /* queue pair i's gpunvme_dq_state is at */
	uint32_t qstate_stride;     /* qstate + i * qstate_stride (device memory) */
};

/* A data buffer: bus address of each 64 KiB piece (seed 002's lookup table:
 * pinned host memory or GPU memory alike), or of each 4 KiB page where the
 * bus maps at that granularity (kmod:, GPU memory through the IOMMU). */
struct gpunvme_dev_buf {
	const uint64_t *iova64k;
	uint64_t len;
	uint32_t shift;             /* log2 of the piece each entry covers: 16 or 12; 0 reads as 16 */
};

struct gpunvme_dev_tag {           /* an asynchronous command */
	uint32_t qi;
	unsigned int ticket;        /* slot = ticket % depth, command id = ticket % 65536 */
	int err;                    /* set when the slot went out as a no-op */
};

#if defined(__CUDACC__)

/* Nanoseconds (%globaltimer): deadlines for every wait. */
__device__ __forceinline__ uint64_t gpunvme_dev_now(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

#endif /* __CUDACC__ */

#include "gpunvme/device_queue.cuh"

#if defined(__CUDACC__)

/* ---- the API: submit and wait, thread, warp and batch forms ---------------- */

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
	const uint64_t a = gpunvme_dq_buf_addr(b, off);
	if (a & 3) /* §4.3: dword-aligned data */
		return GPUNVME_DEV_EINVAL;
	struct gpunvme_dq_pair lq = gpunvme_dq_pair_get(q, qi), *qp = &lq;
	struct gpunvme_dq_state *s = qp->s;
	/* ticket and count of unconsumed ones in one atomic, the broken flag
	 * read in the same round trip; a ticket taken on a broken queue is
	 * lost with the queue */
	unsigned int br = gpunvme_dq_ld(&s->broken);
	const unsigned long long o = atomicAdd(&s->tw, (1ull << 32) | 1ull);
	const unsigned int t = (unsigned int)(o >> 32);
	if (br)
		return GPUNVME_DEV_EIO;
	int rc = gpunvme_dq_slot_wait(q, qp, t, (unsigned int)o, deadline);
	if (rc)
		return rc;
	tag->err = gpunvme_dq_place(q, qp, t, opc, slba, nlb, b, off, a, len);
	tag->qi = qi;
	tag->ticket = t;
	return gpunvme_dq_commit(q, qp, t, deadline);
}

/*
 * Wait for a submitted command; returns its NVMe status (0 = success) or a
 * negative GPUNVME_DEV_E* code. Alone on the queue, the caller becomes its
 * poller and reads the CQ until its completion arrives; otherwise it
 * watches its slot's word, trying to take over polling between pauses.
 * max_pause_ns 0: the pauses are gpunvme_dq_backoff's (__nanosleep growing to
 * 16 µs, for crowds of waiting threads); otherwise spins on %globaltimer of
 * at most max_pause_ns, where a sleeping waiter would show in a latency
 * measurement (perf --gpu).
 */
__device__ static int gpunvme_dev_wait_paced(const struct gpunvme_dev_queues *q, const struct gpunvme_dev_tag *tag,
					     uint64_t deadline, unsigned int max_pause_ns)
{
	struct gpunvme_dq_pair lq = gpunvme_dq_pair_get(q, tag->qi), *qp = &lq;
	const unsigned int t = tag->ticket;
	unsigned int ns = 32;
	int st = 0;
	for (bool first = true;; first = false) {
		/* after the first try, look before asking for the poller's lock */
		bool ask = first || !(gpunvme_dq_ld64(&qp->s->cqw) & GPUNVME_DQ_CQW_LOCK);
		if ((ask && gpunvme_dq_cq_poll(qp, true, t, &st, deadline)) || gpunvme_dq_published(qp, t, &st))
			break;
		if (gpunvme_dev_now() > deadline)
			return gpunvme_dq_classify(q, qp); /* slot stays held */
		if (!max_pause_ns) {
			gpunvme_dq_backoff(&ns);
			continue;
		}
		for (const uint64_t until = gpunvme_dev_now() + ns; gpunvme_dev_now() < until;)
			;
		ns = ns + 32 < max_pause_ns ? ns + 32 : max_pause_ns;
	}
	gpunvme_dq_release(qp, t);
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
		       off > b->len || len > b->len - off || (gpunvme_dq_buf_addr(b, off) & 3)))
		rc = GPUNVME_DEV_EINVAL;
	unsigned int ok = __ballot_sync(full, active && rc == 0);
	if (!ok)
		return rc;
	const unsigned int k = __popc(ok), leader = __ffs(ok) - 1;
	struct gpunvme_dq_pair lq = gpunvme_dq_pair_get(q, qi), *qp = &lq;
	struct gpunvme_dq_state *s = qp->s;
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
			unsigned int br = gpunvme_dq_ld(&s->broken);
			unsigned int ahead = (unsigned int)gpunvme_dq_ld64(&s->tw);
			if (br) {
				lrc = GPUNVME_DEV_EIO;
				break;
			}
			if (ahead + k <= qp->depth - 1u) {
				if ((unsigned int)atomicAdd(&s->tw, (unsigned long long)k) + k <= qp->depth - 1u)
					break;
				atomicAdd(&s->tw, 0ull - k);
			}
			gpunvme_dq_cq_poll(qp, false, 0, NULL, 0);
			if (gpunvme_dev_now() > deadline) {
				lrc = (q->csts && *q->csts == 0xffffffffu) ? GPUNVME_DEV_ENODEV : GPUNVME_DEV_ETIMEDOUT;
				break;
			}
			gpunvme_dq_backoff(&ns);
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
		err = gpunvme_dq_slot_wait(q, qp, t, (unsigned int)o + before, deadline);
		if (!err)
			rc = gpunvme_dq_place(q, qp, t, opc, slba, nlb, b, off, gpunvme_dq_buf_addr(b, off), len);
	}
	__syncwarp(full);
	if (__ballot_sync(full, err != 0))
		return mine ? (err ? err : GPUNVME_DEV_EIO) : rc;
	if (lane == leader)
		lrc = gpunvme_dq_commit(q, qp, base + k - 1u, deadline);
	lrc = __shfl_sync(full, lrc, leader);
	if (lrc)
		return mine ? lrc : rc;
	/* wait: the warp polls the CQ, everyone watches their own slot */
	bool done = !mine;
	int st = 0;
	unsigned int ns = 32;
	for (;;) {
		if (!done && gpunvme_dq_published(qp, t, &st)) {
			atomicAdd(&qp->freed[t & mask], 1u); /* the leader uncounts all k below */
			done = true;
		}
		unsigned int pending = __ballot_sync(full, !done);
		if (!pending)
			break;
		gpunvme_dq_cq_poll_warp(qp, ns >= GPUNVME_WARP_PROBE_NS);
		int late = 0;
		if (lane == leader)
			late = gpunvme_dev_now() > deadline;
		if (__shfl_sync(full, late, leader)) {
			int why = lane == leader ? gpunvme_dq_classify(q, qp) : 0;
			why = __shfl_sync(full, why, leader);
			return done ? (rc ? rc : st) : why; /* unfinished slots stay held */
		}
		__nanosleep(ns);
		if (ns < GPUNVME_WARP_PAUSE_MAX_NS)
			ns *= 2;
	}
	if (lane == leader)
		atomicAdd(&s->tw, 0ull - k);
	return rc ? rc : st;
}

#endif /* __CUDACC__ */
#endif
