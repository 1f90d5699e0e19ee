/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * GPU data path: CUDA threads build NVMe commands, ring the SQ tail doorbell
 * and poll completions themselves (device-initiated I/O, DESIGN.md §4).
 *
 * Queue protocol, per queue pair of `depth` (a power of two) entries:
 *  - admission: at most depth - 1 commands in flight (a full SQ keeps one
 *    slot empty, NVMe 1.4 §4.1.1);
 *  - a ticket t from atomicAdd picks SQ slot t % depth, which is also the
 *    command id; the slot is reused only after the thread that used it on
 *    the previous lap has read its completion (`freed`);
 *  - the SQ tail moves in ticket order: whoever holds the doorbell lock
 *    advances it over every consecutive written slot and writes the doorbell
 *    once for all of them (coalescing);
 *  - completions arrive in any order: whoever holds the CQ lock drains all
 *    new entries into per-slot status cells and writes the CQ head doorbell
 *    once; waiting threads watch their own slot's `done` counter.
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

#define GPUNVME_DEV_EIO (-5)        /* queue broken by an earlier timeout, or controller fatal */
#define GPUNVME_DEV_ENODEV (-19)    /* registers read all ones: device gone */
#define GPUNVME_DEV_EINVAL (-22)    /* bad argument (range, size, alignment) */
#define GPUNVME_DEV_ETIMEDOUT (-110)

#define GPUNVME_DEV_MAX_LISTS 4     /* PRP list pages per command */

struct gpunvme_dev_qstate {         /* device global memory, one per queue pair */
	unsigned int ticket;        /* next ticket */
	unsigned int inflight;      /* admitted commands */
	unsigned int committed;     /* tickets covered by the SQ tail doorbell */
	unsigned int db_lock;
	unsigned int cq_lock;
	unsigned int cq_head;
	unsigned int cq_phase;
	unsigned int broken;
};

struct gpunvme_dev_qp {
	struct gpunvme_sqe *sq;     /* device-visible pointers */
	uint32_t *cq;               /* CQ entries as dwords */
	volatile uint32_t *sq_db;   /* doorbells in BAR0 */
	volatile uint32_t *cq_db;
	uint64_t *lists;            /* lp list pages per slot, page_size bytes each */
	const uint64_t *list_iova;  /* bus address of each list page */
	unsigned int *mark;         /* per slot: ticket + 1 once its SQE is written */
	unsigned int *done;         /* per slot: completions seen */
	unsigned int *freed;        /* per slot: completions consumed */
	uint16_t *status;           /* per slot: status of the last completion */
	struct gpunvme_dev_qstate *s;
	uint32_t depth;             /* power of two */
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
};

/* A data buffer: bus address of each 64 KiB piece (seed 002's lookup table:
 * pinned host memory or GPU memory alike). */
struct gpunvme_dev_buf {
	const uint64_t *iova64k;
	uint64_t len;
};

struct gpunvme_dev_tag {           /* an asynchronous command */
	uint32_t qi;
	uint32_t slot;
	unsigned int lap;
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

/* Back-off for waiting threads. A command takes ~12 µs on the emulator at
 * QD1 (submit ~5 µs, completion seen ~6 µs later, measured on an H100), so
 * the first rounds only poll; after that, exponential __nanosleep keeps tens
 * of thousands of waiting threads off the memory system. Callers start with
 * *ns = 32. Tried on the H100 and dropped (bench/results/gpu_iops.md notes):
 * pausing on %globaltimer instead of sleeping (throughput 58 -> 25 M IOPS:
 * spinning warps take the issue slots of working ones), a 256-round polling
 * phase (64 -> 46 M IOPS). */
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

/* Drain new completions into the slot cells (one thread at a time). */
__device__ static void gpunvme_dev_cq_drain(struct gpunvme_dev_qp *qp)
{
	struct gpunvme_dev_qstate *s = qp->s;
	/* a plain read first: only try the atomic when nobody is draining,
	 * so waiting threads do not hammer the lock word */
	if (gpunvme_ld(&s->cq_lock) != 0u || atomicCAS(&s->cq_lock, 0u, 1u) != 0u)
		return;
	/* acquire: the previous drainer's head/phase stores are visible */
	__threadfence();
	unsigned int head = gpunvme_ld(&s->cq_head), phase = gpunvme_ld(&s->cq_phase), n = 0;
	for (;;) {
		uint32_t dw3 = ((volatile uint32_t *)qp->cq)[head * 4 + 3];
		if (((dw3 >> 16) & 1u) != phase)
			break;
		uint32_t cid = dw3 & 0xffffu;
		if (cid < qp->depth) {
			qp->status[cid] = (uint16_t)(dw3 >> 17);
			/* the status is visible before the count that says so */
			__threadfence();
			atomicAdd(&qp->done[cid], 1u);
		}
		if (++head == qp->depth) {
			head = 0;
			phase ^= 1u;
		}
		n++;
	}
	if (n) {
		*(volatile unsigned int *)&s->cq_head = head;
		*(volatile unsigned int *)&s->cq_phase = phase;
		/* our CQE loads are done before the controller may reuse the
		 * entries: order them before the head doorbell store */
		__threadfence_system();
		*qp->cq_db = head;
	}
	__threadfence();
	atomicExch(&s->cq_lock, 0u);
}

/*
 * The same, by a whole warp (all 32 lanes call it): lane 0 takes the lock,
 * then each lane reads one of the next 32 entries, so a PCIe round trip
 * fetches 32 completions instead of one. The run of new entries ends at the
 * first lane whose phase tag is stale.
 */
__device__ static void gpunvme_dev_cq_drain_warp(struct gpunvme_dev_qp *qp)
{
	const unsigned int full = 0xffffffffu, lane = threadIdx.x & 31u;
	struct gpunvme_dev_qstate *s = qp->s;
	int got = 0;
	if (lane == 0)
		got = gpunvme_ld(&s->cq_lock) == 0u && atomicCAS(&s->cq_lock, 0u, 1u) == 0u;
	if (!__shfl_sync(full, got, 0))
		return;
	__threadfence();
	unsigned int head = gpunvme_ld(&s->cq_head), phase = gpunvme_ld(&s->cq_phase), total = 0;
	for (;;) {
		unsigned int pos = head + lane, ph = phase;
		if (pos >= qp->depth) { /* past the end: the next lap, phase flipped */
			pos -= qp->depth;
			ph ^= 1u;
		}
		uint32_t dw3 = ((volatile uint32_t *)qp->cq)[pos * 4 + 3];
		unsigned int stale = __ballot_sync(full, ((dw3 >> 16) & 1u) != ph);
		unsigned int n = stale ? __ffs(stale) - 1 : 32u; /* consecutive new entries */
		if (lane < n) {
			uint32_t cid = dw3 & 0xffffu;
			if (cid < qp->depth) {
				qp->status[cid] = (uint16_t)(dw3 >> 17);
				__threadfence(); /* status before the count that says so */
				atomicAdd(&qp->done[cid], 1u);
			}
		}
		head += n;
		if (head >= qp->depth) {
			head -= qp->depth;
			phase ^= 1u;
		}
		total += n;
		if (n < 32u)
			break;
	}
	__syncwarp(full);
	if (lane == 0) {
		if (total) {
			*(volatile unsigned int *)&s->cq_head = head;
			*(volatile unsigned int *)&s->cq_phase = phase;
			/* every lane's CQE loads precede the head doorbell */
			__threadfence_system();
			*qp->cq_db = head;
		}
		__threadfence();
		atomicExch(&s->cq_lock, 0u);
	}
	__syncwarp(full);
}

/* Advance the SQ tail over consecutive written slots up to and including
 * ticket t; one doorbell write covers all of them. */
__device__ static int gpunvme_dev_commit(const struct gpunvme_dev_queues *q, struct gpunvme_dev_qp *qp,
					 unsigned int t, uint64_t deadline)
{
	struct gpunvme_dev_qstate *s = qp->s;
	unsigned int ns = 32;
	while ((int)(gpunvme_ld(&s->committed) - t) <= 0) {
		if (atomicCAS(&s->db_lock, 0u, 1u) == 0u) {
			__threadfence();
			unsigned int c0 = gpunvme_ld(&s->committed), n = c0, end = gpunvme_ld(&s->ticket);
			while (n != end && gpunvme_ld(&qp->mark[n & (qp->depth - 1)]) == n + 1u)
				n++;
			if (n != c0) {
				/* every SQE up to n was fenced by its writer before
				 * its mark; this fence orders our mark loads before
				 * the doorbell the controller acts on */
				__threadfence_system();
				*qp->sq_db = n & (qp->depth - 1);
				*(volatile unsigned int *)&s->committed = n;
			}
			__threadfence();
			atomicExch(&s->db_lock, 0u);
			if ((int)(n - t) > 0)
				break;
		}
		if (gpunvme_dev_now() > deadline)
			return gpunvme_dev_classify(q, qp);
		gpunvme_backoff(&ns);
	}
	return 0;
}

/* Bus address of buffer byte `off`. */
__device__ __forceinline__ uint64_t gpunvme_dev_buf_addr(const struct gpunvme_dev_buf *b, uint64_t off)
{
	return b->iova64k[off >> 16] + (off & 0xffffu);
}

/* PRPs for len bytes at buffer offset off into the SQE (NVMe 1.4 §4.3);
 * list pages of this slot. Page size divides 64 KiB, so a page never spans
 * two pieces of the lookup table. */
__device__ static int gpunvme_dev_prps(const struct gpunvme_dev_queues *q, struct gpunvme_dev_qp *qp, uint32_t slot,
				       const struct gpunvme_dev_buf *b, uint64_t off, uint64_t len,
				       struct gpunvme_sqe *e)
{
	const uint64_t ps = q->page_size, mask = ps - 1;
	uint64_t a = gpunvme_dev_buf_addr(b, off);
	if (a & 3)
		return GPUNVME_DEV_EINVAL;
	e->prp1 = a;
	uint64_t first = ps - (a & mask);
	if (len <= first)
		return 0;
	uint64_t rest = len - first, o = off + first;
	if (rest <= ps) {
		e->prp2 = gpunvme_dev_buf_addr(b, o);
		return 0;
	}
	const uint32_t per = (uint32_t)(ps / 8);
	uint32_t page = 0, i = 0;
	uint64_t *list = qp->lists + (size_t)slot * qp->lp * per;
	e->prp2 = qp->list_iova[(size_t)slot * qp->lp];
	while (rest > 0) {
		if (i == per - 1 && rest > ps) {
			if (++page >= qp->lp)
				return GPUNVME_DEV_EINVAL;
			list[i] = qp->list_iova[(size_t)slot * qp->lp + page];
			list = qp->lists + ((size_t)slot * qp->lp + page) * per;
			i = 0;
		}
		list[i++] = gpunvme_dev_buf_addr(b, o);
		uint64_t chunk = rest < ps ? rest : ps;
		o += chunk;
		rest -= chunk;
	}
	return 0;
}

/* Build the command for ticket t in its slot, store it into the SQ and mark
 * the slot written. Returns the PRP error, if any: the slot then carries a
 * Flush, so the tail can still move past it, and the caller reports the
 * error after the (harmless) completion. */
__device__ static int gpunvme_dev_place(const struct gpunvme_dev_queues *q, struct gpunvme_dev_qp *qp,
					unsigned int t, uint8_t opc, uint64_t slba, uint32_t nlb,
					const struct gpunvme_dev_buf *b, uint64_t off, uint64_t len)
{
	const uint32_t slot = t & (qp->depth - 1);
	struct gpunvme_sqe e;
	memset(&e, 0, sizeof(e));
	e.opc = opc;
	e.cid = (uint16_t)slot;
	e.nsid = q->nsid;
	e.rw.slba = slba;
	e.rw.nlb = (uint16_t)(nlb - 1);
	int err = gpunvme_dev_prps(q, qp, slot, b, off, len, &e);
	if (err) {
		memset(&e, 0, sizeof(e));
		e.opc = GPUNVME_CMD_FLUSH;
		e.cid = (uint16_t)slot;
		e.nsid = q->nsid;
	}
	/* 16-byte stores of the 64-byte entry into the SQ (host memory) */
	uint4 *dst = (uint4 *)&qp->sq[slot];
	const uint4 *src = (const uint4 *)&e;
	for (int k = 0; k < 4; k++)
		dst[k] = src[k];
	/* the SQE must be visible to the controller before anyone can ring a
	 * doorbell covering it: system-scope fence, then the mark */
	__threadfence_system();
	atomicExch(&qp->mark[slot], t + 1u);
	return err;
}

/*
 * Submit one Read or Write of nlb blocks (at most max_blocks) between slba
 * and buffer offset off, on queue pair qi. On success *tag identifies the
 * command for gpunvme_dev_wait(). While waiting for room it drains
 * completions, so threads that only submit still make progress.
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
	if (gpunvme_dev_buf_addr(b, off) & 3) /* §4.3: dword-aligned data */
		return GPUNVME_DEV_EINVAL;
	struct gpunvme_dev_qp *qp = &q->qp[qi];
	struct gpunvme_dev_qstate *s = qp->s;
	if (gpunvme_ld(&s->broken))
		return GPUNVME_DEV_EIO;
	unsigned int ns = 32;
	/* admission: at most depth - 1 in flight. Read before the atomic, so
	 * a crowd of waiting threads does not keep the counter bouncing.
	 * Running out of time here leaves nothing behind: the queue stays
	 * usable, the caller gets a timeout. */
	for (;;) {
		if (gpunvme_ld(&s->inflight) < qp->depth - 1) {
			if (atomicAdd(&s->inflight, 1u) < qp->depth - 1)
				break;
			atomicSub(&s->inflight, 1u);
		}
		gpunvme_dev_cq_drain(qp);
		if (gpunvme_dev_now() > deadline) {
			if (q->csts && *q->csts == 0xffffffffu)
				return GPUNVME_DEV_ENODEV;
			return GPUNVME_DEV_ETIMEDOUT;
		}
		gpunvme_backoff(&ns);
	}
	unsigned int t = atomicAdd(&s->ticket, 1u);
	uint32_t slot = t & (qp->depth - 1);
	unsigned int lap = t / qp->depth;
	/* the slot's previous command must have been consumed */
	ns = 32;
	while (gpunvme_ld(&qp->freed[slot]) != lap) {
		gpunvme_dev_cq_drain(qp);
		if (gpunvme_dev_now() > deadline)
			return gpunvme_dev_classify(q, qp);
		gpunvme_backoff(&ns);
	}
	tag->err = gpunvme_dev_place(q, qp, t, opc, slba, nlb, b, off, len);
	tag->qi = qi;
	tag->slot = slot;
	tag->lap = lap;
	return gpunvme_dev_commit(q, qp, t, deadline);
}

/* Wait for a submitted command; returns its NVMe status (0 = success) or a
 * negative GPUNVME_DEV_E* code. */
__device__ static int gpunvme_dev_wait(const struct gpunvme_dev_queues *q, const struct gpunvme_dev_tag *tag,
				       uint64_t deadline)
{
	struct gpunvme_dev_qp *qp = &q->qp[tag->qi];
	unsigned int ns = 32;
	while (gpunvme_ld(&qp->done[tag->slot]) == tag->lap) {
		gpunvme_dev_cq_drain(qp);
		if (gpunvme_dev_now() > deadline)
			return gpunvme_dev_classify(q, qp); /* slot stays held */
		gpunvme_backoff(&ns);
	}
	__threadfence();
	int st = *(volatile uint16_t *)&qp->status[tag->slot];
	/* release the slot for the next lap, then the admission count */
	__threadfence();
	atomicAdd(&qp->freed[tag->slot], 1u);
	atomicSub(&qp->s->inflight, 1u);
	return tag->err ? tag->err : st;
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
 * must call it together. One lane takes admission and tickets for the whole
 * batch (two atomics instead of 64), rings one doorbell for it, and drains
 * the CQ while the others wait, so per-queue contention drops by the warp
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
	struct gpunvme_dev_qp *qp = &q->qp[qi];
	struct gpunvme_dev_qstate *s = qp->s;
	unsigned int base = 0;
	int lrc = 0;
	if (lane == leader) {
		unsigned int ns = 32;
		if (gpunvme_ld(&s->broken))
			lrc = GPUNVME_DEV_EIO;
		while (!lrc) {
			if (gpunvme_ld(&s->inflight) + k <= qp->depth - 1) {
				if (atomicAdd(&s->inflight, k) + k <= qp->depth - 1)
					break;
				atomicSub(&s->inflight, k);
			}
			gpunvme_dev_cq_drain(qp);
			if (gpunvme_dev_now() > deadline)
				lrc = (q->csts && *q->csts == 0xffffffffu) ? GPUNVME_DEV_ENODEV : GPUNVME_DEV_ETIMEDOUT;
			else
				gpunvme_backoff(&ns);
		}
		if (!lrc)
			base = atomicAdd(&s->ticket, k);
	}
	lrc = __shfl_sync(full, lrc, leader);
	base = __shfl_sync(full, base, leader);
	if (lrc)
		return (ok >> lane) & 1u ? lrc : rc;
	const bool mine = (ok >> lane) & 1u;
	const unsigned int t = base + __popc(ok & ((1u << lane) - 1u));
	const uint32_t slot = t & (qp->depth - 1);
	const unsigned int lap = t / qp->depth;
	int err = 0;
	if (mine) {
		unsigned int ns = 32;
		while (gpunvme_ld(&qp->freed[slot]) != lap && !err) {
			gpunvme_dev_cq_drain(qp);
			if (gpunvme_dev_now() > deadline)
				err = gpunvme_dev_classify(q, qp);
			else
				gpunvme_backoff(&ns);
		}
		if (!err)
			rc = gpunvme_dev_place(q, qp, t, opc, slba, nlb, b, off, len);
	}
	__syncwarp(full);
	if (__ballot_sync(full, err != 0))
		return mine ? (err ? err : GPUNVME_DEV_EIO) : rc;
	if (lane == leader)
		lrc = gpunvme_dev_commit(q, qp, base + k - 1u, deadline);
	lrc = __shfl_sync(full, lrc, leader);
	if (lrc)
		return mine ? lrc : rc;
	/* wait: the leader drains, everyone watches their own slot */
	bool done = !mine;
	int st = 0;
	unsigned int ns = 32;
	for (;;) {
		if (!done && gpunvme_ld(&qp->done[slot]) != lap) {
			__threadfence();
			st = *(volatile uint16_t *)&qp->status[slot];
			__threadfence();
			atomicAdd(&qp->freed[slot], 1u);
			done = true;
		}
		unsigned int pending = __ballot_sync(full, !done);
		if (!pending)
			break;
		gpunvme_dev_cq_drain_warp(qp);
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
		atomicSub(&s->inflight, k);
	return rc ? rc : st;
}

#endif /* __CUDACC__ */
#endif
