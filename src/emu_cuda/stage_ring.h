/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A copy lane's staging ring: pinned host bytes that reads from pageable
 * memory (an image file, a RAM namespace too large to pin) are filled into
 * before the copy engine moves them to GPU memory (copy_engine.cu says why
 * staging at all). Plain C with the engine's calls behind ops, so that the
 * arithmetic is tested on the CPU (tests/emu_cuda/test_stage_ring.c) with a
 * copy engine that runs its copies late.
 *
 * The ring is a byte ring. A piece taken from it (stage_ring_take) is
 * filled by the caller and handed back (stage_ring_add): it joins the run,
 * the staged bytes not yet queued that continue each other in the ring's
 * memory and in GPU memory, up to merge bytes. A run is queued as one copy
 * when the next piece does not continue it, and a fence follows every merge
 * bytes taken; a fence's completion frees the bytes before it. Why runs and
 * fences: one copy and one event per 128 KiB command (and the event's query
 * when its chunk came round again) held eight lanes to 14-17 GB/s from a
 * page-cached image, while one call per command from a pinned RAM namespace
 * reaches the link (~50 GB/s): the runtime's calls were the limit
 * (bench/results/emu-file-2026-11-28). merge = 0 queues and fences every
 * piece on its own, the old cost (GPUNVME_EMU_STAGE_MERGE=0, a same-run
 * baseline).
 *
 * One thread per ring (emu.h: one lane per emulator thread); nothing here
 * locks.
 */
#ifndef GPUNVME_EMU_CUDA_STAGE_RING_H
#define GPUNVME_EMU_CUDA_STAGE_RING_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define STAGE_RING_FENCES 16 /* in flight per ring: with merge <= size / 4, 4 cover the ring */

struct stage_ring_ops {
	/* Queue a copy of len ring bytes at host to GPU memory at dev, after
	 * everything the lane queued before. 0 or -errno. */
	int (*copy)(void *ctx, unsigned lane, uint64_t dev, const uint8_t *host, size_t len);
	/* Record fence k after the lane's copies queued so far. 0 or -errno. */
	int (*fence)(void *ctx, unsigned lane, unsigned k);
	/* Wait for fence k, bounded: 0, -ETIMEDOUT or -EIO. */
	int (*wait)(void *ctx, unsigned lane, unsigned k);
};

struct stage_ring {
	const struct stage_ring_ops *ops;
	void *ctx;
	unsigned lane;
	uint8_t *mem;       /* size bytes */
	size_t size, piece; /* a piece: at most size / 4 */
	size_t merge;       /* bytes between fences; a run at most this (<= size / 4) */
	uint64_t pos;       /* bytes taken so far (free-running, a wrap's skipped tail included) */
	uint64_t freed;     /* bytes before this no copy reads any more */
	uint64_t fenced;    /* bytes before this are behind a fence (or freed) */
	uint64_t fence_end[STAGE_RING_FENCES]; /* fence k frees the bytes before fence_end[k] */
	unsigned fh, fn;    /* the oldest fence in flight, and how many */
	/* the run: run_len ring bytes at run_at (ring memory contiguous, no
	 * wrap inside) for GPU memory at run_dev, not yet queued */
	uint64_t run_dev, run_at;
	size_t run_len;
};

/* mem: size bytes; piece and merge are cut to a quarter of the ring, so
 * the run being built and the fences before it fit together. */
static inline void stage_ring_init(struct stage_ring *r, const struct stage_ring_ops *ops, void *ctx, unsigned lane,
				   uint8_t *mem, size_t size, size_t piece, size_t merge)
{
	memset(r, 0, sizeof(*r));
	r->ops = ops;
	r->ctx = ctx;
	r->lane = lane;
	r->mem = mem;
	r->size = size;
	r->piece = piece < size / 4 ? piece : size / 4;
	r->merge = merge < size / 4 ? merge : size / 4;
}

/* Queue the run (one copy), if there is one. */
static inline int stage_ring_flush(struct stage_ring *r)
{
	if (!r->run_len)
		return 0;
	const size_t len = r->run_len;
	r->run_len = 0;
	return r->ops->copy(r->ctx, r->lane, r->run_dev, r->mem + r->run_at % r->size, len);
}

/* The oldest fence, waited for: its bytes are free. */
static inline int stage_ring_retire(struct stage_ring *r)
{
	int rc = r->ops->wait(r->ctx, r->lane, r->fh);
	if (rc)
		return rc;
	r->freed = r->fence_end[r->fh];
	r->fh = (r->fh + 1) % STAGE_RING_FENCES;
	r->fn--;
	return 0;
}

/* Queue the run and put a fence after every byte taken so far. */
static inline int stage_ring_fence(struct stage_ring *r)
{
	int rc = stage_ring_flush(r);
	if (rc || r->fenced == r->pos)
		return rc;
	if (r->fn == STAGE_RING_FENCES && (rc = stage_ring_retire(r)))
		return rc;
	const unsigned k = (r->fh + r->fn) % STAGE_RING_FENCES;
	if ((rc = r->ops->fence(r->ctx, r->lane, k)))
		return rc;
	r->fence_end[k] = r->pos;
	r->fn++;
	r->fenced = r->pos;
	return 0;
}

/* n (1..piece) free bytes, contiguous in the ring's memory, at *p; *at is
 * their position for stage_ring_add. A wrap skips the ring's tail; bytes
 * still read by queued copies are waited for, oldest fence first. */
static inline int stage_ring_take(struct stage_ring *r, size_t n, uint8_t **p, uint64_t *at)
{
	if (!n || n > r->piece)
		return -EINVAL;
	const uint64_t o = r->pos % r->size;
	if (o + n > r->size)
		r->pos += r->size - o;
	while (r->pos + n - r->freed > r->size) {
		/* the bytes wanted are behind a fence, or in the run or not
		 * yet fenced: then fence them first */
		int rc = r->fn ? stage_ring_retire(r) : stage_ring_fence(r);
		if (rc)
			return rc;
		if (!r->fn && r->fenced == r->pos && r->pos + n - r->freed > r->size)
			return -EIO; /* cannot happen: with no fence in flight, freed == fenced */
	}
	*at = r->pos;
	*p = r->mem + r->pos % r->size;
	r->pos += n;
	return 0;
}

/* The n bytes taken at at, filled, for GPU memory at dev: they join the
 * run where they continue it in both memories (a piece after a wrap does
 * not: the ring's memory ends between them), else the run is queued and
 * they start the next. A fence follows every merge bytes taken, so the
 * ring's bytes come free while a long pass goes on. */
static inline int stage_ring_add(struct stage_ring *r, uint64_t dev, uint64_t at, size_t n)
{
	int rc;
	if (r->run_len && r->run_dev + r->run_len == dev && r->run_at + r->run_len == at &&
	    r->run_at % r->size + r->run_len + n <= r->size && r->run_len + n <= r->merge) {
		r->run_len += n;
	} else {
		if ((rc = stage_ring_flush(r)))
			return rc;
		r->run_dev = dev;
		r->run_at = at;
		r->run_len = n;
	}
	if (r->pos - r->fenced >= r->merge)
		return stage_ring_fence(r);
	return 0;
}

/* After a wait for everything the lane queued (its sync): every fence is
 * complete and every byte free, unless a run is still unqueued. */
static inline void stage_ring_idle(struct stage_ring *r)
{
	if (r->run_len)
		return;
	r->freed = r->fenced = r->pos;
	r->fn = 0;
}

#endif
