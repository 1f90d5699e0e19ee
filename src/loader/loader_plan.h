/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The layer loader's work list, shared by the CPU data path (loader.c) and
 * the CUDA backend (src/cuda/loader_gpu.cu): what to read where for one
 * load, cut into rounds that each fit the bounce buffer.
 */
#ifndef GPUNVME_LOADER_PLAN_H
#define GPUNVME_LOADER_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "gpunvme/gpunvme.h"
#include "gpunvme/loader.h"

enum load_op_kind {
	LOAD_DIRECT = 1,  /* read nlb blocks at slba into dst + dst_off */
	LOAD_BOUNCE = 2,  /* read nlb blocks into bounce + bounce_off, then copy
	                     len bytes from bounce + bounce_off + skip to dst + dst_off */
	LOAD_ZERO = 3,    /* zero len bytes at dst + dst_off (hole, unwritten) */
};

struct load_op {
	uint32_t kind;
	uint32_t nlb;
	uint64_t slba;
	uint64_t dst_off;
	uint64_t bounce_off;
	uint64_t skip;
	uint64_t len;
	uint32_t span;    /* the range (struct gpunvme_load_span) whose dst dst_off is in:
	                     the ranges of one call share one plan */
};

/* One round: its bounce reads fit the bounce buffer. */
struct load_round {
	const struct load_op *ops;
	size_t nops;
};

/*
 * How many direct ops from ops[i] on read as one strided segment of the GPU
 * backend (gpu.h, struct gpunvme_gpu_seg): ops of one range, each of the
 * same nlb (at most max_blocks: one command each), their LBAs consecutive
 * and their destinations the same pitch apart, more than a row's bytes (an
 * md member's consecutive chunks: consecutive on the member, members x
 * chunk apart in the file). At most 32 rows (a warp's lanes). 1: none
 * follows; *pitch is set when more than 1.
 */
static inline size_t load_op_rows(const struct load_op *ops, size_t nops, size_t i, uint32_t max_blocks,
				  uint32_t lba_shift, uint64_t *pitch)
{
	const struct load_op *a = &ops[i];
	if (a->kind != LOAD_DIRECT || !a->nlb || a->nlb > max_blocks || i + 1 >= nops)
		return 1;
	const struct load_op *b = &ops[i + 1];
	const uint64_t row = (uint64_t)a->nlb << lba_shift;
	if (b->kind != LOAD_DIRECT || b->span != a->span || b->nlb != a->nlb || b->slba != a->slba + a->nlb ||
	    b->dst_off <= a->dst_off || b->dst_off - a->dst_off <= row)
		return 1;
	const uint64_t p = b->dst_off - a->dst_off;
	size_t n = 2;
	for (; n < 32 && i + n < nops; n++) {
		const struct load_op *c = &ops[i + n], *d = &ops[i + n - 1];
		if (c->kind != LOAD_DIRECT || c->span != a->span || c->nlb != a->nlb || c->slba != d->slba + d->nlb ||
		    c->dst_off != d->dst_off + p)
			break;
	}
	*pitch = p;
	return n;
}

/* Bounce buffer size: holds the edge blocks of many loads and the staged
 * chunks of a misaligned destination. */
#define LOADER_BOUNCE_BYTES (8u << 20)

struct gpunvme_loader_gpu_ops {
	int (*open)(struct gpunvme_ctrl *c, uint32_t nsid, const struct gpunvme_loader_opts *o, void **ctx);
	void (*close)(void *ctx);
	/* destination memory of the tier: T2 a device pointer, T1 the host
	 * address of pinned, GPU-mapped DMA memory */
	void *(*alloc)(void *ctx, size_t len);
	void (*free)(void *ctx, void *p);
	void *(*dev_ptr)(void *ctx, void *p);
	/* caller memory as a direct target (not stream-ordered) */
	int (*reg)(void *ctx, void *p, size_t len);
	/* 1 when [p, p + len) lies in loader or registered memory */
	int (*direct)(void *ctx, const void *p, uint64_t len);
	/* queue one round on stream (NULL: the backend's own): its ops land
	 * in sp[op->span].dst (nsp ranges); returns at once */
	int (*exec)(void *ctx, const struct gpunvme_load_span *sp, size_t nsp, const struct load_round *r, void *stream,
		    uint64_t timeout_ns);
	/* record event (may be NULL) on stream; sync: wait for the stream */
	int (*finish)(void *ctx, void *stream, void *event, int sync);
	/* first failure since the last check: 0, -EIO with *status, -errno */
	int (*check)(void *ctx, uint16_t *status);
	/* queue on stream: when a read of this loader has failed since the
	 * last check, overwrite dst[0, len) (a load's destination) with 0xff
	 * bytes and raise the failure mark; nothing otherwise */
	int (*guard)(void *ctx, void *dst, uint64_t len, void *stream);
	/* the failure mark: 1 once a guard has seen a failure, until check;
	 * read from host memory, no CUDA call */
	int (*failed)(void *ctx);
	/* make the queues usable after a failure (no read in flight):
	 * gpunvme_gpu_queues_recover; *reset says whether the controller was */
	int (*recover)(void *ctx, int *reset);
	/* the tier's bounce buffer size (LOADER_BOUNCE_BYTES) */
	uint64_t bounce_bytes;
	/* streams and events for the layer stream (src/loader/stream.c): a
	 * non-blocking stream; events (timing: 1 records time); record on a
	 * stream (NULL: the default stream); make a stream wait for an event;
	 * host wait for an event, bounded (-ETIMEDOUT); elapsed ms between two
	 * completed events (-EAGAIN while either is pending) */
	int (*stream_new)(void **s);
	void (*stream_free)(void *s);
	int (*event_new)(void **e, int timing);
	void (*event_free)(void *e);
	int (*event_record)(void *e, void *stream);
	int (*stream_wait)(void *stream, void *e);
	int (*event_wait)(void *e, uint64_t timeout_ns);
	int (*event_elapsed)(void *a, void *b, float *ms);
	/* md arrays: the backend's own stream, and "stream `waiter` waits for
	 * the work queued so far on stream `waited`" (an event between them),
	 * so that members run on their own streams between a fork and a join */
	void *(*own_stream)(void *ctx);
	int (*wait)(void *ctx, void *waiter, void *waited);
};

#endif
