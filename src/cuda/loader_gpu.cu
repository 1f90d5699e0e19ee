/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * CUDA backend of the layer loader (src/loader/loader.c): runs a round of a
 * load plan on a stream — one scattered-read kernel for every direct and
 * bounce read (GPU threads submit the NVMe commands), then the bounce
 * copies and zero fills, all stream-ordered, no host synchronisation.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "gpunvme/device.cuh"
#include "gpunvme/gpu.h"
#include "gpunvme/loader.h"
#include "loader/loader_plan.h"

#include "base/base.h"

#define LG_KEEP_MAX 8

struct lg_alloc {
	uint8_t *p;        /* host address (Tier 1) or device address (Tier 2) */
	size_t len;
	struct gpunvme_gpu_buf *buf;
	uint8_t *dev;      /* the GPU's address of p */
	bool owned;        /* loader memory (else a registration of the caller's) */
};

struct lg_ctx {
	struct gpunvme_ctrl *c;
	enum gpunvme_tier tier;
	struct gpunvme_gpu_queues *g;
	uint32_t lba_shift, max_blocks, warps;
	struct lg_alloc bounce;
	int *d_status;             /* [0] first failure (sticky), [1] what lg_check took */
	volatile int *h_mark;      /* failure mark (pinned, mapped): guards set it */
	int *d_mark;               /* the GPU's address of h_mark */
	cudaStream_t stream;
	cudaEvent_t bounce_free;   /* the last round that used the bounce buffer */
	struct lg_alloc *a;
	size_t na, cap;
	/* Tier 2 loader memory given back (lg_free_fn), still registered,
	 * for the next allocation of about its size (lg_mem). A load into
	 * new memory paid for it each time: cudaMalloc, cudaFree, and on the
	 * emulator the DMA process's open of the allocation's IPC handle,
	 * 11-14 ms for 2 GB (bench/results/emu-2026-11-28-s17), so a volume
	 * that loads a checkpoint, drops it and loads it again paid ~30 ms a
	 * 4 GB round. Kept until destroy, LG_KEEP_MAX blocks and keep_cap bytes
	 * at most (a quarter of the GPU's memory), and given back at once
	 * when an allocation fails. */
	struct lg_alloc kept[LG_KEEP_MAX];
	size_t nkept, kept_bytes, keep_cap;
};

static int lg_cuda(cudaError_t e, const char *what)
{
	return gpunvme_set_error(-EIO, "%s: %s", what, cudaGetErrorString(e));
}

/* Make p a DMA target of the tier: GPU memory (Tier 2) or DMA memory the
 * GPU maps (Tier 1). */
static int lg_wrap(struct lg_ctx *x, uint8_t *p, size_t len, struct lg_alloc *a)
{
	memset(a, 0, sizeof(*a));
	a->p = p;
	a->len = len;
	if (x->tier == GPUNVME_TIER_2) {
		a->dev = p;
		return gpunvme_gpu_buf_register(x->g, p, len, &a->buf);
	}
	if (!gpunvme_dma_iova(x->c, p))
		return gpunvme_set_error(-EINVAL, "Tier 1 destination %p is not memory from "
						  "gpunvme_layer_loader_alloc or gpunvme_dma_alloc",
					 (void *)p);
	void *dev = NULL;
	int rc = gpunvme_gpu_buf_host(x->g, p, len, &a->buf, &dev);
	a->dev = (uint8_t *)dev;
	return rc;
}

static void lg_release(struct lg_ctx *x, struct lg_alloc *a)
{
	gpunvme_gpu_buf_free(a->buf);
	if (a->owned && x->tier == GPUNVME_TIER_2)
		cudaFree(a->p);
	else if (a->owned)
		gpunvme_dma_free(x->c, a->p);
	memset(a, 0, sizeof(*a));
}

/* The kept blocks, freed (destroy, or memory short) */
static void lg_kept_release(struct lg_ctx *x)
{
	for (size_t i = 0; i < x->nkept; i++)
		lg_release(x, &x->kept[i]);
	x->nkept = 0;
	x->kept_bytes = 0;
}

/* A kept block for len bytes: the smallest that holds them and wastes at
 * most an eighth (or 2 MiB, cudaMalloc's granule for large blocks) */
static bool lg_kept_take(struct lg_ctx *x, size_t len, struct lg_alloc *out)
{
	size_t best = x->nkept;
	for (size_t i = 0; i < x->nkept; i++) {
		const size_t k = x->kept[i].len;
		if (k >= len && k - len <= (len / 8 > (2u << 20) ? len / 8 : (2u << 20)) &&
		    (best == x->nkept || k < x->kept[best].len))
			best = i;
	}
	if (best == x->nkept)
		return false;
	*out = x->kept[best];
	x->kept_bytes -= out->len;
	x->kept[best] = x->kept[--x->nkept];
	return true;
}

/* Loader memory of the tier, allocated and wrapped. */
static int lg_mem(struct lg_ctx *x, size_t len, struct lg_alloc *out)
{
	void *p = NULL;
	if (x->tier == GPUNVME_TIER_2) {
		if (lg_kept_take(x, len, out))
			return 0;
		cudaError_t ce = cudaMalloc(&p, len);
		if (ce == cudaErrorMemoryAllocation && x->nkept) {
			cudaGetLastError();
			lg_kept_release(x);
			ce = cudaMalloc(&p, len);
		}
		if (ce != cudaSuccess)
			return lg_cuda(ce, "cudaMalloc of loader memory");
	} else if (!(p = gpunvme_dma_alloc(x->c, len))) {
		return gpunvme_set_error(-ENOMEM, "cannot allocate %zu bytes of DMA memory", len);
	}
	int rc = lg_wrap(x, (uint8_t *)p, len, out);
	out->p = (uint8_t *)p;
	out->owned = true;
	if (rc)
		lg_release(x, out);
	return rc;
}

static int lg_push(struct lg_ctx *x, const struct lg_alloc *a)
{
	if (x->na == x->cap) {
		size_t cap = x->cap ? 2 * x->cap : 16;
		struct lg_alloc *n = (struct lg_alloc *)realloc(x->a, cap * sizeof(*n));
		if (!n)
			return gpunvme_set_error(-ENOMEM, "out of memory");
		x->a = n;
		x->cap = cap;
	}
	x->a[x->na++] = *a;
	return 0;
}

static struct lg_alloc *lg_find(struct lg_ctx *x, const uint8_t *p, uint64_t len)
{
	for (size_t i = 0; i < x->na; i++)
		if (p >= x->a[i].p && p - x->a[i].p <= (ptrdiff_t)x->a[i].len && len <= x->a[i].len - (size_t)(p - x->a[i].p))
			return &x->a[i];
	return NULL;
}

static void lg_close(void *ctx)
{
	struct lg_ctx *x = (struct lg_ctx *)ctx;
	if (!x)
		return;
	if (x->stream)
		cudaStreamSynchronize(x->stream);
	for (size_t i = 0; i < x->na; i++)
		lg_release(x, &x->a[i]);
	free(x->a);
	lg_kept_release(x);
	if (x->bounce.buf)
		lg_release(x, &x->bounce);
	cudaFree(x->d_status);
	if (x->h_mark)
		cudaFreeHost((void *)x->h_mark);
	if (x->bounce_free)
		cudaEventDestroy(x->bounce_free);
	if (x->stream)
		cudaStreamDestroy(x->stream);
	gpunvme_gpu_queues_destroy(x->g);
	free(x);
}

static int lg_open(struct gpunvme_ctrl *c, uint32_t nsid, const struct gpunvme_loader_opts *o, void **ctx)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		cudaGetLastError();
		return gpunvme_set_error(-ENODEV, "no CUDA GPU is usable here (load with the CPU tier instead)");
	}
	struct lg_ctx *x = (struct lg_ctx *)calloc(1, sizeof(*x));
	if (!x)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	x->c = c;
	x->tier = o->tier;
	int rc = gpunvme_gpu_queues_create(c, nsid, o->queues, o->depth, &x->g);
	if (rc)
		goto fail;
	{
		const struct gpunvme_dev_queues *q = gpunvme_gpu_queues_desc(x->g);
		x->lba_shift = q->lba_shift;
		x->max_blocks = q->max_blocks;
		/* one warp per 32 entries of each queue keeps them full */
		x->warps = q->nq * (o->depth / 32 > 0 ? o->depth / 32 : 1);
	}
	cudaError_t ce;
	if ((ce = cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking)) != cudaSuccess ||
	    (ce = cudaEventCreateWithFlags(&x->bounce_free, cudaEventDisableTiming)) != cudaSuccess ||
	    (ce = cudaMalloc((void **)&x->d_status, 2 * sizeof(int))) != cudaSuccess ||
	    /* zeroed on the loader's own (empty) stream and waited for: a
	     * cudaMemset on the legacy stream returns before it runs and is
	     * not ordered before the read kernels on non-blocking streams;
	     * with other contexts time-sharing the GPU it could land after
	     * the first load recorded its failure and erase it (a media
	     * error reported as success, issue 30) */
	    (ce = cudaMemsetAsync(x->d_status, 0, 2 * sizeof(int), x->stream)) != cudaSuccess ||
	    (ce = cudaStreamSynchronize(x->stream)) != cudaSuccess ||
	    (ce = cudaHostAlloc((void **)&x->h_mark, sizeof(int), cudaHostAllocMapped)) != cudaSuccess ||
	    (ce = cudaHostGetDevicePointer((void **)&x->d_mark, (void *)x->h_mark, 0)) != cudaSuccess) {
		rc = lg_cuda(ce, "loader set-up");
		goto fail;
	}
	*x->h_mark = 0;
	{
		size_t fr = 0, total = 0;
		if (cudaMemGetInfo(&fr, &total) == cudaSuccess)
			x->keep_cap = total / 4;
		else
			cudaGetLastError(); /* nothing kept */
	}
	if ((rc = lg_mem(x, LOADER_BOUNCE_BYTES, &x->bounce)))
		goto fail;
	*ctx = x;
	return 0;
fail:
	lg_close(x);
	return rc;
}

static void *lg_alloc_fn(void *ctx, size_t len)
{
	struct lg_ctx *x = (struct lg_ctx *)ctx;
	struct lg_alloc a;
	if (lg_mem(x, len, &a))
		return NULL;
	if (lg_push(x, &a)) {
		lg_release(x, &a);
		return NULL;
	}
	return a.p;
}

static void lg_free_fn(void *ctx, void *p)
{
	struct lg_ctx *x = (struct lg_ctx *)ctx;
	for (size_t i = 0; i < x->na; i++) {
		if (x->a[i].p != p)
			continue;
		/* a load still queued on some stream may target it */
		cudaDeviceSynchronize();
		struct lg_alloc *a = &x->a[i];
		if (x->tier == GPUNVME_TIER_2 && a->owned && x->nkept < LG_KEEP_MAX &&
		    x->kept_bytes + a->len <= x->keep_cap) {
			x->kept[x->nkept++] = *a;
			x->kept_bytes += a->len;
		} else {
			lg_release(x, a);
		}
		x->a[i] = x->a[--x->na];
		return;
	}
}

static void *lg_dev_ptr(void *ctx, void *p)
{
	struct lg_alloc *a = lg_find((struct lg_ctx *)ctx, (const uint8_t *)p, 0);
	return a ? a->dev + ((uint8_t *)p - a->p) : NULL;
}

/* Caller memory made a direct target: Tier 2 GPU memory, Tier 1 DMA
 * memory. Not stream-ordered (registering while reads run has deadlocked
 * the CUDA runtime against a device-memory DMA engine's copies), hence an
 * explicit call. */
static int lg_reg(void *ctx, void *p, size_t len)
{
	struct lg_ctx *x = (struct lg_ctx *)ctx;
	if (lg_find(x, (const uint8_t *)p, len))
		return 0;
	struct lg_alloc a;
	int rc = lg_wrap(x, (uint8_t *)p, len, &a);
	if (!rc && (rc = lg_push(x, &a)))
		gpunvme_gpu_buf_free(a.buf);
	return rc;
}

static int lg_direct(void *ctx, const void *p, uint64_t len)
{
	return lg_find((struct lg_ctx *)ctx, (const uint8_t *)p, len) != NULL;
}

/* The GPU's address of [p, p + len): itself on Tier 2; on Tier 1 the
 * mapping of loader or registered memory, or of other pinned memory CUDA
 * maps (another md member's loader memory). */
static int lg_gpu_addr(struct lg_ctx *x, void *p, uint64_t len, uint8_t **dev)
{
	*dev = (uint8_t *)p;
	if (x->tier == GPUNVME_TIER_2)
		return 0;
	struct lg_alloc *a = lg_find(x, (const uint8_t *)p, len);
	if (a) {
		*dev = a->dev + ((uint8_t *)p - a->p);
		return 0;
	}
	void *d = NULL;
	if (cudaHostGetDevicePointer(&d, p, 0) != cudaSuccess || !d) {
		cudaGetLastError();
		return gpunvme_set_error(-EINVAL, "Tier 1 memory %p is not mapped for the GPU", p);
	}
	*dev = (uint8_t *)d;
	return 0;
}

/* A host array copied to the GPU on stream s, in stream order: the
 * allocation too, so no other stream is waited for; a pageable source is
 * staged by the driver before cudaMemcpyAsync returns, so the caller may
 * free it at once. The caller frees *d with cudaFreeAsync on s after the
 * work that reads it. */
static int lg_upload(const void *h, size_t bytes, cudaStream_t s, void **d, const char *what)
{
	cudaError_t ce = cudaMallocAsync(d, bytes, s);
	if (ce == cudaSuccess && (ce = cudaMemcpyAsync(*d, h, bytes, cudaMemcpyHostToDevice, s)) != cudaSuccess)
		cudaFreeAsync(*d, s);
	return ce == cudaSuccess ? 0 : lg_cuda(ce, what);
}

/* Where one destination of a round lands: its loader allocation (reads go
 * there by DMA; NULL when it takes only staged ops), where it starts in
 * it, and the GPU's address of it. */
struct lg_dst {
	struct lg_alloc *a;
	uint64_t base;
	uint8_t *dev;
};

/* A Tier 1 bounce copy or zero fill, between GPU addresses of pinned host
 * memory. */
struct lg_hcop {
	uint8_t *dst;
	uint64_t src_off, len;
	uint32_t zero;
};

static __global__ void lg_host_copies(const struct lg_hcop *ops, uint32_t n, const uint8_t *src)
{
	uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x, nt = gridDim.x * (uint64_t)blockDim.x;
	for (uint32_t k = 0; k < n; k++) {
		struct lg_hcop o = ops[k];
		for (uint64_t i = t; i < o.len; i += nt)
			o.dst[i] = o.zero ? 0 : src[o.src_off + i];
	}
}

/*
 * Tier 1's bounce copies and zero fills as one kernel on the GPU's mappings
 * of the pinned memory. cudaMemcpyAsync / cudaMemsetAsync between host
 * memory are done by the calling thread once the stream reaches them:
 * queueing a layer's reads then waited on the host for the read kernel and
 * for whatever the stream waits for before it (the layer stream's consumer:
 * each release of a layer stalled ~19 ms, the reads of the next layer then
 * queued only after the consumer's work, 4-5 ms per layer lost;
 * bench/results/stream-llm-2026-11-25).
 */
static int lg_tier1_copies(struct lg_ctx *x, const struct load_round *r, const struct lg_dst *dd, cudaStream_t s)
{
	uint32_t n = 0;
	uint64_t most = 0;
	for (size_t i = 0; i < r->nops; i++)
		if (r->ops[i].kind == LOAD_BOUNCE || r->ops[i].kind == LOAD_ZERO) {
			n++;
			most = r->ops[i].len > most ? r->ops[i].len : most;
		}
	if (!n)
		return 0;
	struct lg_hcop *h = (struct lg_hcop *)malloc(n * sizeof(*h));
	if (!h)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	uint32_t k = 0;
	for (size_t i = 0; i < r->nops; i++) {
		const struct load_op *op = &r->ops[i];
		if (op->kind == LOAD_BOUNCE || op->kind == LOAD_ZERO)
			h[k++] = (struct lg_hcop){ dd[op->span].dev + op->dst_off, op->bounce_off + op->skip, op->len,
						   op->kind == LOAD_ZERO };
	}
	struct lg_hcop *d = NULL;
	int rc = lg_upload(h, n * sizeof(*h), s, (void **)&d, "uploading Tier 1 bounce copies");
	free(h);
	if (rc)
		return rc;
	uint64_t blocks = most / (256 * 16) + 1;
	lg_host_copies<<<(unsigned)(blocks < 128 ? blocks : 128), 256, 0, s>>>(d, n, x->bounce.dev);
	cudaError_t ce = cudaGetLastError();
	cudaFreeAsync(d, s);
	return ce == cudaSuccess ? 0 : lg_cuda(ce, "queueing Tier 1 bounce copies");
}

/* Destination `span` of round r: loader or registered memory, where reads
 * land by DMA; any other destination got a staged plan (bounce reads and
 * copies only), which on Tier 2 copies to the caller's GPU pointer as it
 * is. */
static int lg_resolve(struct lg_ctx *x, const struct gpunvme_load_span *t, const struct load_round *r, uint32_t span,
		      struct lg_dst *o)
{
	o->a = NULL;
	o->base = 0;
	uint8_t *p = (uint8_t *)t->dst;
	o->dev = p;
	if (!t->len)
		return 0;
	o->a = lg_find(x, p, t->len);
	if (!o->a && x->tier != GPUNVME_TIER_2) {
		/* pinned host memory CUDA knows but this controller cannot DMA
		 * into (another md member's loader memory: DMA mappings are per
		 * controller) takes the staged plan: bounce reads, then copies;
		 * any other host memory is refused */
		cudaPointerAttributes pa;
		bool pinned = cudaPointerGetAttributes(&pa, p) == cudaSuccess && pa.type == cudaMemoryTypeHost;
		cudaGetLastError();
		bool direct_ops = false;
		for (size_t i = 0; i < r->nops; i++)
			direct_ops |= r->ops[i].span == span && r->ops[i].kind == LOAD_DIRECT;
		if (!pinned || direct_ops)
			return gpunvme_set_error(-EINVAL, "Tier 1 destination %p is not loader memory or registered "
							  "(gpunvme_layer_loader_register)", t->dst);
	}
	o->base = o->a ? (uint64_t)(p - o->a->p) : 0;
	return lg_gpu_addr(x, p, t->len, &o->dev);
}

/*
 * The kernel's buffers: slot 0 is the bounce buffer, then one per loader
 * allocation that direct reads land in (spans in one allocation share
 * it). *slot[i] is span i's. When at most one allocation takes direct
 * reads, the two-buffer launch does (no table to upload): *ntab is 0.
 */
static int lg_slots(struct lg_ctx *x, const struct lg_dst *dd, size_t ndst, const struct load_round *r,
		    uint32_t *slot, struct gpunvme_gpu_buf ***tab, uint32_t *ntab)
{
	*tab = NULL;
	*ntab = 0;
	uint32_t *of = x->na ? (uint32_t *)calloc(x->na, sizeof(*of)) : NULL; /* allocation -> slot, 0: none */
	if (x->na && !of)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	uint32_t n = 1;
	for (size_t i = 0; i < ndst; i++)
		slot[i] = 0;
	for (size_t i = 0; i < r->nops; i++) {
		const struct load_op *op = &r->ops[i];
		if (op->kind != LOAD_DIRECT || slot[op->span])
			continue;
		const struct lg_alloc *a = dd[op->span].a;
		if (!a) {
			free(of);
			return gpunvme_set_error(-EINVAL, "direct reads planned for memory the loader does not know");
		}
		const size_t ai = (size_t)(a - x->a);
		slot[op->span] = of[ai] ? of[ai] : (of[ai] = n++);
	}
	free(of);
	if (n <= 2)
		return 0;
	*tab = (struct gpunvme_gpu_buf **)malloc(n * sizeof(**tab));
	if (!*tab)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	(*tab)[0] = x->bounce.buf;
	for (size_t i = 0; i < ndst; i++)
		if (slot[i])
			(*tab)[slot[i]] = dd[i].a->buf;
	*ntab = n;
	return 0;
}

static int lg_exec(void *ctx, const struct gpunvme_load_span *dst, size_t ndst, const struct load_round *r, void *stream,
		   uint64_t timeout_ns)
{
	struct lg_ctx *x = (struct lg_ctx *)ctx;
	cudaStream_t s = stream ? (cudaStream_t)stream : x->stream;
	int rc = 0;
	cudaError_t ce = cudaSuccess;
	struct lg_dst one;
	uint32_t one_slot;
	struct lg_dst *dd = ndst == 1 ? &one : (struct lg_dst *)malloc(ndst * sizeof(*dd));
	uint32_t *slot = ndst == 1 ? &one_slot : (uint32_t *)malloc(ndst * sizeof(*slot));
	struct gpunvme_gpu_buf **tab = NULL, *buf0 = x->bounce.buf;
	uint32_t ntab = 0;
	struct gpunvme_gpu_seg *h = NULL;
	if (!dd || !slot) {
		rc = gpunvme_set_error(-ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < ndst && !rc; i++)
		rc = lg_resolve(x, &dst[i], r, (uint32_t)i, &dd[i]);
	if (rc || (rc = lg_slots(x, dd, ndst, r, slot, &tab, &ntab)))
		goto out;
	for (size_t i = 0; i < ndst && !ntab; i++)
		if (slot[i])
			buf0 = dd[i].a->buf; /* the one allocation direct reads land in */

	{
		/* Segments for the kernel: runs of direct reads a pitch apart
		 * as strided segments (load_op_rows), other direct reads cut
		 * so that every warp gets work (but no more than 32 commands,
		 * one per lane), bounce reads as they are. */
		uint64_t direct_blocks = 0, nseg = 0;
		bool bounce = false;
		for (size_t i = 0; i < r->nops; i++) {
			direct_blocks += r->ops[i].kind == LOAD_DIRECT ? r->ops[i].nlb : 0;
			bounce |= r->ops[i].kind == LOAD_BOUNCE;
		}
		uint64_t seg = direct_blocks / (x->warps ? x->warps : 1);
		seg = (seg + x->max_blocks - 1) / x->max_blocks * x->max_blocks;
		if (seg < x->max_blocks)
			seg = x->max_blocks;
		if (seg > 32ull * x->max_blocks)
			seg = 32ull * x->max_blocks;
		uint64_t pitch;
		for (size_t i = 0, n; i < r->nops; i += n) {
			n = load_op_rows(r->ops, r->nops, i, x->max_blocks, x->lba_shift, &pitch);
			if (n > 1)
				nseg++;
			else if (r->ops[i].kind == LOAD_DIRECT)
				nseg += (r->ops[i].nlb + seg - 1) / seg;
			else if (r->ops[i].kind == LOAD_BOUNCE)
				nseg++;
		}
		if (nseg > UINT32_MAX) {
			rc = gpunvme_set_error(-E2BIG, "load round of %llu segments", (unsigned long long)nseg);
			goto out;
		}
		h = (struct gpunvme_gpu_seg *)malloc((nseg ? nseg : 1) * sizeof(*h));
		if (!h) {
			rc = gpunvme_set_error(-ENOMEM, "out of memory");
			goto out;
		}
		/* the buffer a segment names: with a table, slot 0 is the bounce
		 * buffer and direct reads name their allocation's slot; without,
		 * 0 is buf0 and 1 the bounce buffer */
		const uint32_t bounce_buf = ntab ? 0 : 1;
		uint64_t k = 0;
		for (size_t i = 0, n; i < r->nops; i += n) {
			const struct load_op *op = &r->ops[i];
			n = load_op_rows(r->ops, r->nops, i, x->max_blocks, x->lba_shift, &pitch);
			if (n > 1) {
				h[k++] = (struct gpunvme_gpu_seg){ op->slba, dd[op->span].base + op->dst_off,
								   (uint32_t)(n * op->nlb), ntab ? slot[op->span] : 0,
								   op->nlb, 0, pitch };
			} else if (op->kind == LOAD_BOUNCE) {
				h[k++] = (struct gpunvme_gpu_seg){ op->slba, op->bounce_off, op->nlb, bounce_buf, 0, 0, 0 };
			} else if (op->kind == LOAD_DIRECT) {
				const uint32_t b = ntab ? slot[op->span] : 0;
				for (uint64_t o = 0; o < op->nlb; o += seg) {
					const uint64_t m = op->nlb - o < seg ? op->nlb - o : seg;
					h[k++] = (struct gpunvme_gpu_seg){
						op->slba + o, dd[op->span].base + op->dst_off + (o << x->lba_shift),
						(uint32_t)m, b, 0, 0, 0
					};
				}
			}
		}
		/* the bounce buffer is shared by every stream: wait for its last user */
		if (bounce && (ce = cudaStreamWaitEvent(s, x->bounce_free, 0)) != cudaSuccess) {
			rc = lg_cuda(ce, "waiting for the bounce buffer");
			goto out;
		}
		if (nseg) {
			struct gpunvme_gpu_seg *dseg = NULL;
			rc = lg_upload(h, nseg * sizeof(*h), s, (void **)&dseg, "uploading the read list");
			if (!rc) {
				rc = ntab ? gpunvme_gpu_read_segs_table_async(x->g, dseg, (uint32_t)nseg, tab, ntab,
									      x->d_status, s, timeout_ns)
					  : gpunvme_gpu_read_segs_async(x->g, dseg, (uint32_t)nseg, buf0, x->bounce.buf,
									x->d_status, s, timeout_ns);
				cudaFreeAsync(dseg, s);
			}
		}
		if (rc)
			goto out;
		if (x->tier != GPUNVME_TIER_2) {
			rc = lg_tier1_copies(x, r, dd, s);
			if (!rc && bounce && (ce = cudaEventRecord(x->bounce_free, s)) != cudaSuccess)
				rc = lg_cuda(ce, "recording the bounce buffer's use");
			goto out;
		}
		for (size_t i = 0; i < r->nops && ce == cudaSuccess; i++) {
			const struct load_op *op = &r->ops[i];
			if (op->kind == LOAD_BOUNCE)
				ce = cudaMemcpyAsync(dd[op->span].dev + op->dst_off,
						     x->bounce.dev + op->bounce_off + op->skip, op->len, cudaMemcpyDefault, s);
			else if (op->kind == LOAD_ZERO)
				ce = cudaMemsetAsync(dd[op->span].dev + op->dst_off, 0, op->len, s);
		}
		if (ce == cudaSuccess && bounce)
			ce = cudaEventRecord(x->bounce_free, s);
		if (ce != cudaSuccess)
			rc = lg_cuda(ce, "queueing bounce copies");
	}
out:
	free(h);
	free(tab);
	if (dd != &one)
		free(dd);
	if (slot != &one_slot)
		free(slot);
	return rc;
}

static int lg_finish(void *ctx, void *stream, void *event, int sync)
{
	struct lg_ctx *x = (struct lg_ctx *)ctx;
	cudaStream_t s = stream ? (cudaStream_t)stream : x->stream;
	cudaError_t ce = cudaSuccess;
	if (event)
		ce = cudaEventRecord((cudaEvent_t)event, s);
	if (ce == cudaSuccess && sync)
		ce = cudaStreamSynchronize(s);
	return ce == cudaSuccess ? 0 : lg_cuda(ce, "waiting for the load");
}

/* Read and clear the status word in one atomic step: loads on other
 * streams may still be running, and a failure they store between a read
 * and a separate clear would be lost (wrong data reported as success). */
static __global__ void lg_take_status(int *d)
{
	d[1] = atomicExch(&d[0], 0);
}

static int lg_check(void *ctx, uint16_t *status)
{
	struct lg_ctx *x = (struct lg_ctx *)ctx;
	int st = 0;
	/* the mark first: a guard that sees a failure after the status is
	 * taken below raises it again */
	*x->h_mark = 0;
	lg_take_status<<<1, 1, 0, x->stream>>>(x->d_status);
	cudaError_t ce = cudaGetLastError();
	if (ce == cudaSuccess)
		ce = cudaMemcpyAsync(&st, x->d_status + 1, sizeof(st), cudaMemcpyDeviceToHost, x->stream);
	if (ce == cudaSuccess)
		ce = cudaStreamSynchronize(x->stream);
	if (ce != cudaSuccess)
		return lg_cuda(ce, "reading the load status");
	if (st > 0) {
		if (status)
			*status = (uint16_t)st;
		return gpunvme_set_error(-EIO, "read failed: NVMe status 0x%x (%s)", st, gpunvme_status_str((uint16_t)st));
	}
	switch (st) {
	case 0:
		return 0;
	case GPUNVME_DEV_ETIMEDOUT:
		return gpunvme_set_error(-ETIMEDOUT, "a read did not complete in time (the queues need a recovery)");
	case GPUNVME_DEV_ENODEV:
		return gpunvme_set_error(-ENODEV, "the controller is gone (registers read all ones)");
	case GPUNVME_DEV_EINVAL:
		return gpunvme_set_error(-EINVAL, "a read was refused by the device code (range or alignment)");
	default:
		return gpunvme_set_error(-EIO, "queues broken by an earlier timeout, or controller fatal status");
	}
}

/*
 * Poison a load's destination when any read of this loader has failed
 * since the last check. A consumer that is only stream-ordered after the
 * reads (the layer stream: no host wait) would otherwise compute on a mix
 * of landed and stale bytes that looks like data; all-ones bytes are NaN
 * in every floating type (f32, f16, bf16, f8 E4M3/E5M2 too) and -1 in
 * every signed integer type. The status word was written by the read
 * kernels earlier in stream order (or on md member streams joined into
 * this one), so a plain load sees it. The mark is host memory: the store
 * is made visible to the CPU before the kernel ends by the system-scope
 * fence (the host reads it without a CUDA call, lg_failed).
 */
static __global__ void lg_guard_kernel(const int *status, uint8_t *dst, uint64_t len, volatile int *mark)
{
	int st = *(const volatile int *)status;
	if (!st)
		return;
	if (blockIdx.x == 0 && threadIdx.x == 0) {
		*mark = 1;
		__threadfence_system();
	}
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < len; i += gridDim.x * (uint64_t)blockDim.x)
		dst[i] = 0xff;
}

static int lg_guard(void *ctx, void *dst, uint64_t len, void *stream)
{
	struct lg_ctx *x = (struct lg_ctx *)ctx;
	cudaStream_t s = stream ? (cudaStream_t)stream : x->stream;
	uint8_t *d = NULL;
	int rc = lg_gpu_addr(x, dst, len, &d);
	if (rc)
		return rc;
	/* the whole grid only reads one word when nothing failed (~3 us) */
	uint64_t blocks = len / (256 * 64) + 1;
	lg_guard_kernel<<<(unsigned)(blocks < 256 ? blocks : 256), 256, 0, s>>>(x->d_status, d, len, x->d_mark);
	cudaError_t ce = cudaGetLastError();
	return ce == cudaSuccess ? 0 : lg_cuda(ce, "launching the load guard");
}

static int lg_failed(void *ctx)
{
	return *((struct lg_ctx *)ctx)->h_mark != 0;
}

static int lg_recover(void *ctx, int *reset)
{
	struct lg_ctx *x = (struct lg_ctx *)ctx;
	struct gpunvme_gpu_recovery r;
	int rc = gpunvme_gpu_queues_recover(x->g, 0, &r);
	*reset = r.reset;
	return rc;
}

/* ---- streams and events of the layer stream (src/loader/stream.c) ---------------- */

static int lg_stream_new(void **s)
{
	cudaStream_t st = NULL;
	/* non-blocking: the reads never serialise with the legacy default
	 * stream a consumer (torch's default stream) computes on */
	cudaError_t ce = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
	if (ce != cudaSuccess)
		return lg_cuda(ce, "creating the reads' stream");
	*s = st;
	return 0;
}

static void lg_stream_free(void *s)
{
	if (s) {
		cudaStreamSynchronize((cudaStream_t)s);
		cudaStreamDestroy((cudaStream_t)s);
	}
}

static int lg_event_new(void **e, int timing)
{
	cudaEvent_t ev = NULL;
	cudaError_t ce = cudaEventCreateWithFlags(&ev, timing ? cudaEventDefault : cudaEventDisableTiming);
	if (ce != cudaSuccess)
		return lg_cuda(ce, "creating an event");
	*e = ev;
	return 0;
}

static void lg_event_free(void *e)
{
	if (e)
		cudaEventDestroy((cudaEvent_t)e);
}

static int lg_event_record(void *e, void *stream)
{
	cudaError_t ce = cudaEventRecord((cudaEvent_t)e, (cudaStream_t)stream);
	return ce == cudaSuccess ? 0 : lg_cuda(ce, "recording an event");
}

static int lg_stream_wait(void *stream, void *e)
{
	cudaError_t ce = cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)e, 0);
	return ce == cudaSuccess ? 0 : lg_cuda(ce, "making a stream wait for an event");
}

/*
 * Polled rather than cudaEventSynchronize, which has no timeout; between
 * polls the thread sleeps (2 us growing to 32 us; with the kernel's timer
 * slack ~50-100 us per poll at most, under 1 % of a layer read of 10 ms or
 * more). It used to poll with only sched_yield between queries: a core
 * taken from a software controller's workers, and each cudaEventQuery takes
 * the runtime's lock, which a tight loop can take again before a thread
 * waiting for it (a copy lane of a device-memory DMA engine) wakes. That
 * was one suspect for the layer stream's hang on the H200 (copy lanes
 * blocked in cudaMemcpyAsync for the whole 30 s wait); sleeping here did
 * not cure it, so the cause is elsewhere (bench/results/stream-llm-2026-11-25,
 * "19:50 UTC").
 */
static int lg_event_wait(void *e, uint64_t timeout_ns)
{
	uint64_t deadline = gpunvme_now_ns() + timeout_ns;
	long ns = 2000;
	for (;;) {
		cudaError_t ce = cudaEventQuery((cudaEvent_t)e);
		if (ce == cudaSuccess)
			return 0;
		if (ce != cudaErrorNotReady)
			return lg_cuda(ce, "waiting for an event");
		if (gpunvme_now_ns() > deadline)
			return gpunvme_set_error(-ETIMEDOUT, "GPU work did not complete in %llu ms",
						 (unsigned long long)(timeout_ns / 1000000));
		struct timespec ts = { 0, ns };
		nanosleep(&ts, NULL);
		if (ns < 32000)
			ns *= 2;
	}
}

static int lg_event_elapsed(void *a, void *b, float *ms)
{
	cudaError_t ce = cudaEventElapsedTime(ms, (cudaEvent_t)a, (cudaEvent_t)b);
	if (ce == cudaErrorNotReady) {
		cudaGetLastError();
		return -EAGAIN;
	}
	return ce == cudaSuccess ? 0 : lg_cuda(ce, "reading an event's time");
}

static void *lg_own_stream(void *ctx)
{
	return (void *)((struct lg_ctx *)ctx)->stream;
}

/* `waiter` waits for what is queued on `waited` so far. The event may be
 * destroyed at once: CUDA releases it once the recorded work completed, and
 * the wait already captured it. */
static int lg_wait(void *ctx, void *waiter, void *waited)
{
	(void)ctx;
	cudaEvent_t ev;
	cudaError_t ce = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
	if (ce != cudaSuccess)
		return lg_cuda(ce, "creating an md member event");
	ce = cudaEventRecord(ev, (cudaStream_t)waited);
	if (ce == cudaSuccess)
		ce = cudaStreamWaitEvent((cudaStream_t)waiter, ev, 0);
	cudaEventDestroy(ev);
	return ce == cudaSuccess ? 0 : lg_cuda(ce, "ordering md member streams");
}

static const struct gpunvme_loader_gpu_ops lg_ops = {
	lg_open, lg_close, lg_alloc_fn, lg_free_fn, lg_dev_ptr, lg_reg, lg_direct, lg_exec, lg_finish, lg_check,
	lg_guard, lg_failed, lg_recover, LOADER_BOUNCE_BYTES,
	lg_stream_new, lg_stream_free, lg_event_new, lg_event_free, lg_event_record, lg_stream_wait, lg_event_wait,
	lg_event_elapsed, lg_own_stream, lg_wait,
};

extern "C" const struct gpunvme_loader_gpu_ops *gpunvme_loader_gpu_backend(void)
{
	return &lg_ops;
}
