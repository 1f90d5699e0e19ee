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
 * Pieces of one width that follow each other in the ring but land a fixed
 * pitch apart in GPU memory (an md array's member: its consecutive chunks
 * are members x chunk apart in the file) form a strided run
 * (strided_run.h), queued as one 2D copy where the engine has one
 * (ops->copy2d).
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

#include "emu_cuda/strided_run.h"
#include "gpunvme/emu.h" /* struct gpunvme_emu_copy */

#define STAGE_RING_FENCES 16 /* in flight per ring: with merge <= size / 4, 4 cover the ring */

struct stage_ring_ops {
	/* Queue a copy of len ring bytes at host to GPU memory at dev, after
	 * everything the lane queued before. 0 or -errno. */
	int (*copy)(void *ctx, unsigned lane, uint64_t dev, const uint8_t *host, size_t len);
	/* Record fence k after the lane's copies queued so far. 0 or -errno. */
	int (*fence)(void *ctx, unsigned lane, unsigned k);
	/* Wait for fence k, bounded: 0, -ETIMEDOUT or -EIO. */
	int (*wait)(void *ctx, unsigned lane, unsigned k);
	/* Optional (NULL: no strided runs): queue one copy of rows rows of
	 * width bytes, consecutive in the ring from host, to GPU memory at
	 * dev, dev + pitch, ... (pitch > width), as copy does. 0 or -errno. */
	int (*copy2d)(void *ctx, unsigned lane, uint64_t dev, uint64_t pitch, const uint8_t *host, size_t width,
		      size_t rows);
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
	/* the run: run.len ring bytes at run_at (ring memory contiguous, no
	 * wrap inside), not yet queued, for GPU memory as run says */
	struct strided_run run;
	uint64_t run_at;
	uint64_t run_end; /* the end of the GPU region of the run's pieces (emu.h, dev_end) */
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
	if (!r->run.len)
		return 0;
	const struct strided_run run = r->run;
	r->run.len = 0;
	const uint8_t *host = r->mem + r->run_at % r->size;
	if (run.rows > 1)
		return r->ops->copy2d(r->ctx, r->lane, run.dev, run.pitch, host, run.w, run.rows);
	return r->ops->copy(r->ctx, r->lane, run.dev, host, run.len);
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

/* The n bytes taken at at, filled, for GPU memory at dev in the region
 * ending at dev_end: they join the run (strided_run_join: its next bytes,
 * or its next row where the engine has 2D copies) where they continue it
 * in the ring's memory (a piece after a wrap does not: the ring's memory
 * ends between them) and in the same GPU region (one copy cannot span two
 * allocations), and the run stays within merge bytes, else the run is
 * queued and they start the next. A fence follows every merge bytes
 * taken, so the ring's bytes come free while a long pass goes on. */
static inline int stage_ring_add(struct stage_ring *r, uint64_t dev, uint64_t dev_end, uint64_t at, size_t n)
{
	int rc;
	const size_t len = r->run.len;
	const bool next = len && r->run_at + len == at && r->run_at % r->size + len + n <= r->size &&
			  len + n <= r->merge && r->run_end == dev_end;
	if (!next || !strided_run_join(&r->run, dev, n, r->ops->copy2d != NULL)) {
		if ((rc = stage_ring_flush(r)))
			return rc;
		strided_run_start(&r->run, dev, n);
		r->run_at = at;
		r->run_end = dev_end;
	}
	if (r->pos - r->fenced >= r->merge)
		return stage_ring_fence(r);
	return 0;
}

/* After a wait for everything the lane queued (its sync): every fence is
 * complete and every byte free, unless a run is still unqueued. */
static inline void stage_ring_idle(struct stage_ring *r)
{
	if (r->run.len)
		return;
	r->freed = r->fenced = r->pos;
	r->fn = 0;
}

/*
 * Copies straight from pinned memory (a RAM namespace) come in a worker's
 * batch (emu.h, copy_batch) in the order the worker fetched their commands.
 * How many from v[0] on go as one copy: reads to GPU memory of one length
 * whose sources and destinations each advance by a fixed pitch of at least
 * that length (*spitch, *dpitch, at most STRIDED_PITCH_MAX): an md
 * member's consecutive chunks (consecutive in the member's namespace,
 * members x chunk apart in GPU memory; strided segments, gpu.h, put them in
 * the SQ in that order), or pieces contiguous in both, all in one GPU
 * region (dev_end, 0 where not known: one copy cannot span two
 * allocations). 1: v[0] alone.
 */
static inline unsigned stage_copy_rows(const struct gpunvme_emu_copy *v, unsigned n, uint64_t *spitch,
				       uint64_t *dpitch)
{
	if (n < 2 || !v[0].to_gpu || !v[1].to_gpu || v[1].len != v[0].len || !v[0].len || !v[0].dev_end ||
	    v[1].dev_end != v[0].dev_end)
		return 1;
	const uint64_t s0 = (uint64_t)(uintptr_t)v[0].host, s1 = (uint64_t)(uintptr_t)v[1].host;
	if (s1 < s0 + v[0].len || v[1].dev_addr < v[0].dev_addr + v[0].len || s1 - s0 > STRIDED_PITCH_MAX ||
	    v[1].dev_addr - v[0].dev_addr > STRIDED_PITCH_MAX)
		return 1;
	const uint64_t sp = s1 - s0, dp = v[1].dev_addr - v[0].dev_addr;
	unsigned k = 2;
	for (; k < n; k++)
		if (!v[k].to_gpu || v[k].len != v[0].len || (uint64_t)(uintptr_t)v[k].host != s0 + k * sp ||
		    v[k].dev_addr != v[0].dev_addr + k * dp || v[k].dev_end != v[0].dev_end)
			break;
	*spitch = sp;
	*dpitch = dp;
	return k;
}

#endif
