/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Layer loader: a file range becomes a work list (loader_plan.h) of direct
 * reads into the destination, edge blocks through a bounce buffer, and zero
 * fills for holes; the CPU data path runs it here, the GPU tiers hand it to
 * the CUDA backend (src/cuda/loader_gpu.cu).
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "gpunvme/extents.h"
#include "gpunvme/loader.h"
#include "gpunvme/volume.h"
#include "loader/loader_plan.h"

/* Largest single direct op of a plan: keeps nlb in 32 bits for any block
 * size; backends cut ops further for parallelism. */
#define PLAN_MAX_DIRECT (1ull << 30)
/* Staged (misaligned destination) chunks and CPU-path request size: big
 * enough that per-command costs vanish, small enough to spread over the
 * emulator's workers and the queues. */
#define STAGE_CHUNK (1u << 20)
#define CPU_REQ_BYTES (1u << 20)
#define MAX_CPU_QUEUES 64
/* What the loader takes when the caller leaves the choice to it (0): more
 * queues or entries than this add nothing the emulator or one SSD shows. */
#define AUTO_QUEUES 8      /* a default queue count reaches this ... */
#define AUTO_QUEUES_MAX 16 /* ... and stays within this (auto_queues) */
#define AUTO_DEPTH 256
#define AUTO_DEPTH_SHALLOW 8
#define MAX_ALLOCS_GROW 16

struct loader_alloc {
	void *p;        /* what the caller got */
	void *base;     /* what the tier allocator returned */
	size_t len;
};

struct gpunvme_layer_loader {
	struct gpunvme_ctrl *c;
	uint32_t nsid;
	uint32_t lba_shift;
	uint64_t nsze;
	struct gpunvme_extent *ext;
	size_t n_ext;
	uint64_t file_size;
	struct gpunvme_loader_opts o;
	uint64_t bounce_bytes;
	/* CPU tier */
	struct gpunvme_qpair *qp[MAX_CPU_QUEUES];
	uint32_t nqp;
	uint8_t *bounce;
	/* GPU tiers */
	const struct gpunvme_loader_gpu_ops *gpu;
	void *gctx;
	struct loader_alloc *allocs;
	size_t nallocs, cap_allocs;
	struct gpunvme_loader_stats st;
	/* an md array (gpunvme_layer_loader_init_md): one loader per member,
	 * each reading its own chunks; this one only fans out */
	struct gpunvme_layer_loader **mem;
	uint32_t nmem;
	const struct gpunvme_md *md; /* the array, for retargeting (not owned) */
};

void gpunvme_loader_opts_init(struct gpunvme_loader_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->tier = GPUNVME_TIER_CPU;
	o->queues = 0; /* fit to the controller */
	o->depth = 0;
	o->timeout_ms = 30000;
	o->retries = 2;
}

static const char *tier_name(enum gpunvme_tier t)
{
	return t == GPUNVME_TIER_2 ? "Tier 2 (GPU memory)" : t == GPUNVME_TIER_1 ? "Tier 1 (pinned host memory)" : "CPU";
}

/* ---- set-up ---------------------------------------------------------------------- */

/*
 * The default queue count. A controller that serves its queues on a fixed
 * set of threads (the emulator: queue qid on worker qid % workers) wants a
 * multiple of them: 12 workers with 8 queues leave 4 idle, and 8 workers
 * with 12 queues serve 4 of them twice. Both ran slower than 8 with 8, and
 * 12 with 12 faster (load_pretrained from an image on the H200: 12 with 8
 * 22-25 GB/s, 8 with 12 24-25, 8 with 8 26-30, 12 with 12 30-35;
 * bench/results/emu-2026-11-29-s19). So: the smallest
 * multiple of what the controller serves at once that reaches AUTO_QUEUES
 * (below AUTO_QUEUES_MAX for fewer than AUTO_QUEUES_MAX workers: at most
 * AUTO_QUEUES + workers - 1), AUTO_QUEUES_MAX for more, AUTO_QUEUES where
 * the controller does not say.
 */
static uint32_t auto_queues(uint32_t parallel)
{
	if (!parallel)
		return AUTO_QUEUES;
	if (parallel >= AUTO_QUEUES_MAX)
		return AUTO_QUEUES_MAX;
	return (AUTO_QUEUES + parallel - 1) / parallel * parallel;
}

/* Queue count and depth fitted to what the controller granted and what is
 * still free, so that the defaults work on any controller. */
static int fit_queues(struct gpunvme_layer_loader *l)
{
	struct gpunvme_ctrl_info ci;
	int rc = gpunvme_ctrl_info(l->c, &ci);
	if (rc)
		return rc;
	uint32_t nfree = gpunvme_io_queues_free(l->c);
	if (!nfree)
		return gpunvme_set_error(-EBUSY,
					 "all %u I/O queue pairs the controller granted are in use: the loader needs one "
					 "(destroy a queue pair first, or open the controller asking for more: opts.nr_io_queues)",
					 ci.nr_io_queues);
	/* Without deep queues (NVMe/TCP): few requests per connection; each
	 * may be a whole tensor split into many commands, and a deep queue of
	 * them only piles up buffers at the target (nvmet-tcp keeps them per
	 * entry) */
	uint32_t auto_depth = ci.caps & GPUNVME_CAP_DEEP_QUEUES ? AUTO_DEPTH : AUTO_DEPTH_SHALLOW;
	if (!l->o.depth)
		l->o.depth = ci.mqes < auto_depth ? ci.mqes : auto_depth;
	else if (l->o.depth < 2 || l->o.depth > ci.mqes)
		return gpunvme_set_error(-EINVAL, "queue depth %u: this controller allows 2..%u entries per queue (CAP.MQES + 1)",
					 l->o.depth, ci.mqes);
	uint32_t want = l->o.queues ? l->o.queues : auto_queues(ci.io_parallel);
	uint32_t n = want < nfree ? want : nfree;
	/* a default count cut by what is free stays a multiple of the workers
	 * where it can: 6 queues on 6 workers finish together, 10 leave two
	 * workers with half the work of the others */
	if (!l->o.queues && ci.io_parallel && n < want && n >= ci.io_parallel)
		n -= n % ci.io_parallel;
	l->o.queues = n;
	return 0;
}

/* The CPU tier's queue pairs: as many as fit_queues chose, or fewer when
 * another user took some since (never none). */
static int cpu_queues_acquire(struct gpunvme_layer_loader *l)
{
	uint32_t n = l->o.queues < MAX_CPU_QUEUES ? l->o.queues : MAX_CPU_QUEUES;
	for (uint32_t i = 0; i < n; i++) {
		int rc = gpunvme_qpair_create(l->c, l->o.depth, &l->qp[i]);
		if (rc == -EBUSY && i > 0)
			break;
		if (rc)
			return rc;
		l->nqp = i + 1;
	}
	return 0;
}

static int check_extents(const struct gpunvme_extent *ext, size_t n, uint64_t dev_bytes)
{
	for (size_t i = 0; i < n; i++) {
		const struct gpunvme_extent *x = &ext[i];
		if (x->length == 0 || x->logical + x->length < x->logical || x->physical + x->length < x->physical)
			return gpunvme_set_error(-EINVAL, "extent %zu is empty or wraps", i);
		if (i && x->logical < ext[i - 1].logical + ext[i - 1].length)
			return gpunvme_set_error(-EINVAL, "extents are not sorted by file offset (extent %zu)", i);
		if (!(x->flags & (GPUNVME_EXTENT_UNWRITTEN | GPUNVME_EXTENT_ELSEWHERE)) && x->physical + x->length > dev_bytes)
			return gpunvme_set_error(-ERANGE,
						 "extent %zu (bytes %llu+%llu) lies past the end of the namespace (%llu bytes)",
						 i, (unsigned long long)x->physical, (unsigned long long)x->length,
						 (unsigned long long)dev_bytes);
	}
	return 0;
}

/* The tier policy (tier.h) on o->tier: AUTO becomes a tier; an explicit
 * GPU tier is checked against the controllers' capabilities only, so that
 * a missing CUDA backend keeps its own message below (which names the
 * library to link). */
static int resolve_tier(struct gpunvme_ctrl *const *ctrls, size_t n, struct gpunvme_loader_opts *o)
{
	const bool gpu = o->tier != GPUNVME_TIER_AUTO || o->gpu;
	return gpunvme_tier_choose(ctrls, n, gpu, o->tier, &o->tier);
}

int gpunvme_layer_loader_init(struct gpunvme_ctrl *c, uint32_t nsid, const struct gpunvme_extent *ext, size_t n,
			      uint64_t file_size, const struct gpunvme_loader_opts *opts,
			      struct gpunvme_layer_loader **out)
{
	struct gpunvme_ns_info ni;
	int rc;
	if (!c || !out || (n && !ext))
		return gpunvme_set_error(-EINVAL, "layer loader: bad arguments");
	if ((rc = gpunvme_ns_info(c, nsid, &ni)))
		return rc;
	if ((rc = check_extents(ext, n, ni.nsze << ni.lba_shift)))
		return rc;
	struct gpunvme_layer_loader *l = calloc(1, sizeof(*l));
	if (!l)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	l->c = c;
	l->nsid = nsid;
	l->lba_shift = ni.lba_shift;
	l->nsze = ni.nsze;
	l->file_size = file_size;
	if (opts)
		l->o = *opts;
	else
		gpunvme_loader_opts_init(&l->o);
	if ((rc = resolve_tier(&c, 1, &l->o))) {
		free(l);
		return rc;
	}
	if (!l->o.timeout_ms)
		l->o.timeout_ms = 30000;
	l->ext = malloc((n ? n : 1) * sizeof(*ext));
	if (!l->ext) {
		free(l);
		return gpunvme_set_error(-ENOMEM, "out of memory");
	}
	if (n)
		memcpy(l->ext, ext, n * sizeof(*ext));
	l->n_ext = n;
	l->bounce_bytes = LOADER_BOUNCE_BYTES;
	if ((rc = fit_queues(l)))
		goto fail;

	if (l->o.tier == GPUNVME_TIER_CPU) {
		if ((rc = cpu_queues_acquire(l)))
			goto fail;
		l->bounce = gpunvme_dma_alloc(c, l->bounce_bytes);
		if (!l->bounce) {
			rc = -ENOMEM;
			goto fail;
		}
	} else if (l->o.tier == GPUNVME_TIER_1 || l->o.tier == GPUNVME_TIER_2) {
		if (!l->o.gpu) {
			rc = gpunvme_set_error(-ENOTSUP, "%s needs the CUDA backend (opts.gpu = gpunvme_loader_gpu_backend(), "
							 "libgpunvme_cuda); this build has none",
					       tier_name(l->o.tier));
			goto fail;
		}
		l->gpu = l->o.gpu;
		if ((rc = l->gpu->open(c, nsid, &l->o, &l->gctx)))
			goto fail;
		l->bounce_bytes = l->gpu->bounce_bytes;
	} else {
		rc = gpunvme_set_error(-EINVAL, "unknown tier %d (0 = CPU, 1, 2)", (int)l->o.tier);
		goto fail;
	}
	*out = l;
	return 0;
fail:
	gpunvme_layer_loader_destroy(l);
	return rc;
}

void gpunvme_layer_loader_destroy(struct gpunvme_layer_loader *l)
{
	if (!l)
		return;
	if (l->mem) {
		for (uint32_t k = 0; k < l->nmem; k++)
			gpunvme_layer_loader_destroy(l->mem[k]);
		free(l->mem);
		free(l);
		return;
	}
	for (size_t i = 0; i < l->nallocs; i++) {
		if (l->gpu)
			l->gpu->free(l->gctx, l->allocs[i].base);
		else
			gpunvme_dma_free(l->c, l->allocs[i].base);
	}
	free(l->allocs);
	if (l->gpu && l->gctx)
		l->gpu->close(l->gctx);
	for (uint32_t i = 0; i < l->nqp; i++)
		gpunvme_qpair_destroy(l->qp[i]);
	if (l->bounce)
		gpunvme_dma_free(l->c, l->bounce);
	free(l->ext);
	free(l);
}

int gpunvme_layer_loader_retarget(struct gpunvme_layer_loader *l, const struct gpunvme_extent *ext, size_t n,
				  uint64_t file_size)
{
	if (!l || (n && !ext))
		return gpunvme_set_error(-EINVAL, "loader retarget: bad arguments");
	if (l->mem) {
		/* every member's new extents first, then all swapped: a
		 * member that cannot take them leaves the array on its file */
		struct gpunvme_extent **me = calloc(l->nmem, sizeof(*me));
		size_t *nme = calloc(l->nmem, sizeof(*nme));
		int rc = me && nme ? 0 : gpunvme_set_error(-ENOMEM, "out of memory");
		for (uint32_t k = 0; k < l->nmem && !rc; k++) {
			const struct gpunvme_layer_loader *m = l->mem[k];
			rc = gpunvme_md_member_extents(l->md, ext, n, file_size, k, &me[k], &nme[k]);
			if (!rc)
				rc = check_extents(me[k], nme[k], m->nsze << m->lba_shift);
		}
		for (uint32_t k = 0; k < l->nmem && !rc; k++) {
			free(l->mem[k]->ext);
			l->mem[k]->ext = me[k] ? me[k] : malloc(sizeof(*ext));
			me[k] = NULL;
			l->mem[k]->n_ext = nme[k];
			l->mem[k]->file_size = file_size;
		}
		for (uint32_t k = 0; me && k < l->nmem; k++)
			free(me[k]);
		free(me);
		free(nme);
		if (!rc)
			l->file_size = file_size;
		return rc;
	}
	int rc = check_extents(ext, n, l->nsze << l->lba_shift);
	if (rc)
		return rc;
	struct gpunvme_extent *copy = malloc((n ? n : 1) * sizeof(*ext));
	if (!copy)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	if (n)
		memcpy(copy, ext, n * sizeof(*ext));
	free(l->ext);
	l->ext = copy;
	l->n_ext = n;
	l->file_size = file_size;
	return 0;
}

int gpunvme_layer_loader_release_queues(struct gpunvme_layer_loader *l)
{
	if (!l)
		return gpunvme_set_error(-EINVAL, "release_queues: no loader");
	for (uint32_t k = 0; k < l->nmem; k++) {
		int rc = gpunvme_layer_loader_release_queues(l->mem[k]);
		if (rc)
			return rc;
	}
	if (l->mem)
		return 0;
	/* GPU queues hold the tier's buffer registrations: they stay */
	if (l->gpu)
		return gpunvme_set_error(-ENOTSUP, "the GPU tiers keep their queues for the loader's life");
	for (uint32_t i = 0; i < l->nqp; i++)
		gpunvme_qpair_destroy(l->qp[i]);
	l->nqp = 0;
	return 0;
}

enum gpunvme_tier gpunvme_layer_loader_tier(const struct gpunvme_layer_loader *l)
{
	return l ? l->o.tier : GPUNVME_TIER_CPU;
}

/* ---- destination memory ------------------------------------------------------------- */

void *gpunvme_layer_loader_alloc(struct gpunvme_layer_loader *l, uint64_t file_off, size_t len)
{
	if (!l || len > SIZE_MAX - 8192) {
		gpunvme_set_error(-EINVAL, "loader alloc: bad arguments");
		return NULL;
	}
	if (l->mem) {
		/* member 0's memory; the other members DMA into it directly
		 * where their tier can register it, else through their bounce
		 * buffers (still correct, slower) */
		void *p = gpunvme_layer_loader_alloc(l->mem[0], file_off, len);
		if (p && l->gpu && len)
			for (uint32_t k = 1; k < l->nmem; k++)
				(void)gpunvme_layer_loader_register(l->mem[k], p, len);
		return p;
	}
	if (l->nallocs == l->cap_allocs) {
		size_t cap = l->cap_allocs ? 2 * l->cap_allocs : MAX_ALLOCS_GROW;
		struct loader_alloc *a = realloc(l->allocs, cap * sizeof(*a));
		if (!a) {
			gpunvme_set_error(-ENOMEM, "out of memory");
			return NULL;
		}
		l->allocs = a;
		l->cap_allocs = cap;
	}
	/* 4 KiB of slack to place the start congruent to file_off */
	size_t total = len + 4096;
	void *base = l->gpu ? l->gpu->alloc(l->gctx, total) : gpunvme_dma_alloc(l->c, total);
	if (!base) {
		if (!l->gpu)
			gpunvme_set_error(-ENOMEM, "cannot allocate %zu bytes of DMA memory", total);
		return NULL;
	}
	uintptr_t b = (uintptr_t)base;
	uintptr_t p = b + ((file_off - b) & 4095u);
	l->allocs[l->nallocs++] = (struct loader_alloc){ (void *)p, base, total };
	return (void *)p;
}

void gpunvme_layer_loader_free(struct gpunvme_layer_loader *l, void *p)
{
	if (!l || !p)
		return;
	if (l->mem) {
		/* the other members' registrations of it first: a later
		 * allocation at the same address must be registered afresh */
		for (uint32_t k = 1; l->gpu && k < l->nmem; k++)
			l->mem[k]->gpu->free(l->mem[k]->gctx, p);
		gpunvme_layer_loader_free(l->mem[0], p);
		return;
	}
	for (size_t i = 0; i < l->nallocs; i++) {
		if (l->allocs[i].p != p)
			continue;
		if (l->gpu)
			l->gpu->free(l->gctx, l->allocs[i].base);
		else
			gpunvme_dma_free(l->c, l->allocs[i].base);
		l->allocs[i] = l->allocs[--l->nallocs];
		return;
	}
}

int gpunvme_layer_loader_register(struct gpunvme_layer_loader *l, void *p, size_t len)
{
	if (!l || !p || !len)
		return gpunvme_set_error(-EINVAL, "register: bad arguments");
	for (uint32_t k = 0; k < l->nmem; k++) {
		int rc = gpunvme_layer_loader_register(l->mem[k], p, len);
		if (rc)
			return rc;
	}
	if (l->mem)
		return 0;
	if (!l->gpu)
		return gpunvme_dma_iova(l->c, p) ? 0
						 : gpunvme_set_error(-EINVAL, "%p is not DMA memory (gpunvme_dma_alloc)", p);
	return l->gpu->reg(l->gctx, p, len);
}

void *gpunvme_layer_loader_dev_ptr(struct gpunvme_layer_loader *l, void *p)
{
	if (!l || !p)
		return NULL;
	if (l->mem)
		return gpunvme_layer_loader_dev_ptr(l->mem[0], p);
	return l->gpu ? l->gpu->dev_ptr(l->gctx, p) : p;
}

/* ---- planning ----------------------------------------------------------------------- */

struct plan {
	struct load_op *ops;
	size_t nops, cap;
	size_t *round_end;   /* ops index where each round ends */
	size_t nrounds, cap_rounds;
	uint64_t bounce_used;
	uint64_t bounce_cap;
};

static int plan_push(struct plan *p, const struct load_op *op)
{
	if (p->nops == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 64;
		struct load_op *n = realloc(p->ops, cap * sizeof(*n));
		if (!n)
			return gpunvme_set_error(-ENOMEM, "out of memory");
		p->ops = n;
		p->cap = cap;
	}
	p->ops[p->nops++] = *op;
	return 0;
}

static int plan_end_round(struct plan *p)
{
	if (p->nrounds && p->round_end[p->nrounds - 1] == p->nops)
		return 0; /* nothing since the last cut */
	if (p->nrounds == p->cap_rounds) {
		size_t cap = p->cap_rounds ? 2 * p->cap_rounds : 8;
		size_t *n = realloc(p->round_end, cap * sizeof(*n));
		if (!n)
			return gpunvme_set_error(-ENOMEM, "out of memory");
		p->round_end = n;
		p->cap_rounds = cap;
	}
	p->round_end[p->nrounds++] = p->nops;
	p->bounce_used = 0;
	return 0;
}

/* A bounce read of `bytes` (whole blocks): starts a new round when the
 * bounce buffer of this one is full. */
static int plan_bounce(struct plan *p, uint64_t slba, uint32_t nlb, uint64_t bytes, uint64_t skip, uint64_t len,
		       uint64_t dst_off, uint32_t span)
{
	int rc;
	if (p->bounce_used + bytes > p->bounce_cap && (rc = plan_end_round(p)))
		return rc;
	struct load_op op = { LOAD_BOUNCE, nlb, slba, dst_off, p->bounce_used, skip, len, span };
	p->bounce_used += bytes;
	return plan_push(p, &op);
}

static void plan_free(struct plan *p)
{
	free(p->ops);
	free(p->round_end);
}

/* 1 when file byte o lies in a GPUNVME_EXTENT_ELSEWHERE extent */
static bool elsewhere_at(const struct gpunvme_layer_loader *l, uint64_t o)
{
	size_t lo = 0, hi = l->n_ext;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (l->ext[mid].logical <= o)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return false;
	const struct gpunvme_extent *x = &l->ext[lo - 1];
	return o < x->logical + x->length && (x->flags & GPUNVME_EXTENT_ELSEWHERE);
}

/*
 * File bytes [off, off + len) -> dst, the plan's span `span`, added to the
 * plan (its bounce reads go on from the spans before, in the same rounds).
 * Within a mapped piece the device bytes are contiguous: a partial first
 * block and a partial last block are bounced, whole blocks in between go
 * straight to dst when the address they land at is dword aligned (§4.3:
 * PRP entries), else in staged chunks.
 */
static int plan_add(const struct gpunvme_layer_loader *l, uint32_t span, uint64_t off, uint64_t len, uintptr_t dst,
		    bool staged, struct plan *p)
{
	const uint64_t lbs = 1ull << l->lba_shift;
	const uint64_t end = off + len;
	uint64_t o = off;
	int rc = 0;
	while (o < end && !rc) {
		uint64_t contig = 0;
		int64_t phys = gpunvme_extent_lookup(l->ext, l->n_ext, o, &contig);
		uint64_t piece = contig && contig < end - o ? contig : end - o;
		if (phys < 0 && elsewhere_at(l, o)) { /* another md member's bytes */
			o += piece;
			continue;
		}
		if (phys < 0) { /* hole or unwritten: zeroes */
			struct load_op z = { LOAD_ZERO, 0, 0, o - off, 0, 0, piece, span };
			rc = plan_push(p, &z);
			o += piece;
			continue;
		}
		uint64_t P = (uint64_t)phys, pend = P + piece;
		if (P % lbs) { /* partial first block */
			uint64_t k = lbs - P % lbs < piece ? lbs - P % lbs : piece;
			if ((rc = plan_bounce(p, P / lbs, 1, lbs, P % lbs, k, o - off, span)))
				break;
			P += k;
		}
		uint64_t mid_end = pend / lbs * lbs;
		while (P < mid_end && !rc) {
			uint64_t dst_off = o - off + (P - (uint64_t)phys);
			if (!staged && ((dst + dst_off) & 3) == 0) {
				uint64_t n = mid_end - P < PLAN_MAX_DIRECT ? mid_end - P : PLAN_MAX_DIRECT;
				struct load_op d = { LOAD_DIRECT, (uint32_t)(n / lbs), P / lbs, dst_off, 0, 0, n, span };
				rc = plan_push(p, &d);
				P += n;
			} else {
				uint64_t n = mid_end - P < STAGE_CHUNK ? mid_end - P : STAGE_CHUNK;
				rc = plan_bounce(p, P / lbs, (uint32_t)(n / lbs), n, 0, n, dst_off, span);
				P += n;
			}
		}
		if (!rc && P < pend) /* partial last block */
			rc = plan_bounce(p, P / lbs, 1, lbs, 0, pend - P, o - off + (P - (uint64_t)phys), span);
		o += piece;
	}
	return rc;
}

/* ---- CPU data path -------------------------------------------------------------------- */

struct cpu_run {
	uint32_t pending;
	uint64_t last_ns;            /* the round's start, then its latest completion */
	int err;
	uint16_t status;
	uint64_t bad_slba, bad_nlb;  /* the first command that failed */
	struct cpu_cmd **free;       /* records of commands not in flight */
	uint32_t nfree;
};

struct cpu_cmd {
	struct cpu_run *r;
	uint64_t slba, nlb;
};

static void cpu_done(void *arg, const struct gpunvme_cpl *cpl)
{
	struct cpu_cmd *c = arg;
	struct cpu_run *r = c->r;
	r->pending--;
	r->last_ns = gpunvme_now_ns();
	r->free[r->nfree++] = c;
	if (cpl->err && !r->err) {
		r->err = cpl->err;
		r->status = cpl->status;
		r->bad_slba = c->slba;
		r->bad_nlb = c->nlb;
	}
}

/* Poll every queue pair, also after one failed: the others may hold
 * completions (or failures) of this run's commands too. The first error. */
static int cpu_poll_all(struct gpunvme_layer_loader *l, struct cpu_run *r)
{
	int first = 0;
	for (uint32_t i = 0; i < l->nqp; i++) {
		int rc = gpunvme_qpair_poll(l->qp[i], 0);
		if (rc < 0) {
			if (!r->err)
				r->err = rc;
			if (!first)
				first = rc;
		}
	}
	return first;
}

/* The load's deadline has passed and no read completed for the timeout
 * either (plus slack): stalled. Only the first alone would fail loads that
 * progress, just slowly: the controller's queues shared with other
 * processes (eight clients of one NVMe/TCP target on a busy machine waited
 * longer than 30 s per 64 MiB, and failed with reads completing). */
static bool cpu_stalled(const struct gpunvme_layer_loader *l, const struct cpu_run *r, uint64_t deadline,
			uint64_t slack_ns)
{
	uint64_t now = gpunvme_now_ns();
	return now > deadline + slack_ns && now - r->last_ns > (uint64_t)l->o.timeout_ms * 1000000ull + slack_ns;
}

/* Submit one read, polling for room while every queue is full. */
static int cpu_submit(struct gpunvme_layer_loader *l, struct cpu_run *r, uint32_t *qi, uint8_t *buf, uint64_t slba,
		      uint64_t nlb, uint64_t deadline)
{
	for (;;) {
		struct gpunvme_qpair *qp = l->qp[*qi];
		*qi = (*qi + 1) % l->nqp;
		if (gpunvme_qpair_outstanding(qp) < l->o.depth) {
			/* one record per command: nqp * depth cover every
			 * queue pair full */
			struct cpu_cmd *c = r->free[--r->nfree];
			*c = (struct cpu_cmd){ r, slba, nlb };
			int rc = gpunvme_read(qp, l->nsid, buf, slba, nlb, cpu_done, c);
			if (rc == 0) {
				r->pending++;
				return 0;
			}
			r->free[r->nfree++] = c;
			if (rc != -EAGAIN)
				return rc;
		}
		int rc = cpu_poll_all(l, r);
		if (rc)
			return rc;
		if (cpu_stalled(l, r, deadline, 0))
			return gpunvme_set_error(-ETIMEDOUT, "no room in %u queue pairs for %u ms", l->nqp,
						 l->o.timeout_ms);
	}
}

static int cpu_round(struct gpunvme_layer_loader *l, const struct gpunvme_load_span *sp, const struct load_op *ops,
		     size_t n,
		     uint64_t deadline, uint16_t *status)
{
	/* The run's state lives on the heap, not on this stack: a drain that
	 * gives up (below) leaves commands whose completions still run
	 * cpu_done on it */
	struct cpu_run *r = calloc(1, sizeof(*r));
	uint32_t qi = 0;
	int rc = 0;
	const uint32_t ncmds = l->nqp * l->o.depth;
	struct cpu_cmd *cmds = malloc(ncmds * sizeof(*cmds));
	if (r)
		r->free = malloc(ncmds * sizeof(*r->free));
	if (!r || !cmds || !r->free) {
		free(cmds);
		if (r)
			free(r->free);
		free(r);
		return gpunvme_set_error(-ENOMEM, "out of memory");
	}
	r->last_ns = gpunvme_now_ns();
	for (uint32_t i = 0; i < ncmds; i++)
		r->free[r->nfree++] = &cmds[i];
	for (size_t i = 0; i < n && !rc && !r->err; i++) {
		const struct load_op *op = &ops[i];
		if (op->kind == LOAD_ZERO) {
			memset((uint8_t *)sp[op->span].dst + op->dst_off, 0, op->len);
			continue;
		}
		uint8_t *buf = op->kind == LOAD_DIRECT ? (uint8_t *)sp[op->span].dst + op->dst_off : l->bounce + op->bounce_off;
		uint64_t per = CPU_REQ_BYTES >> l->lba_shift;
		for (uint64_t b = 0; b < op->nlb && !rc; b += per) {
			uint64_t k = op->nlb - b < per ? op->nlb - b : per;
			rc = cpu_submit(l, r, &qi, buf + (b << l->lba_shift), op->slba + b, k, deadline);
		}
	}
	/* drain what is in flight even after a failure: the buffers and the
	 * command records are ours, and a queue pair that failed (device or
	 * connection gone) has failed its commands, so polling on ends;
	 * leaving early would let a later completion reach freed records */
	while (r->pending) {
		int prc = cpu_poll_all(l, r);
		if (prc && !rc)
			rc = prc;
		if (cpu_stalled(l, r, deadline, 1000000000ull * 5)) {
			rc = gpunvme_set_error(-ETIMEDOUT, "%u reads still outstanding after the timeout", r->pending);
			break;
		}
	}
	if (r->pending) {
		/* Given up with reads in flight: their completions (or the
		 * queue pairs failing them at the reset the caller's recovery
		 * makes) still run cpu_done on these records. They are left
		 * allocated on purpose, a bounded leak on a path that already
		 * failed, rather than freed under the controller's feet (a
		 * late completion wrote into freed memory: eight NVMe/TCP
		 * clients on a starved machine crashed so). */
		return rc;
	}
	if (!rc && r->err) {
		rc = r->err;
		if (status)
			*status = r->status;
		if (rc == -EIO && r->status)
			gpunvme_set_error(-EIO, "read of LBA %llu+%llu failed: NVMe status 0x%x (%s)",
					  (unsigned long long)r->bad_slba, (unsigned long long)r->bad_nlb, r->status,
					  gpunvme_status_str(r->status));
		else if (rc == -ETIMEDOUT)
			gpunvme_set_error(-ETIMEDOUT, "read of LBA %llu+%llu: no completion within the I/O "
					  "timeout (gpunvme_opts.io_timeout_ms)",
					  (unsigned long long)r->bad_slba, (unsigned long long)r->bad_nlb);
	}
	free(cmds);
	free(r->free);
	free(r);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++) {
		const struct load_op *op = &ops[i];
		if (op->kind != LOAD_BOUNCE)
			continue;
		memcpy((uint8_t *)sp[op->span].dst + op->dst_off, l->bounce + op->bounce_off + op->skip, op->len);
	}
	return 0;
}

/* ---- loads ---------------------------------------------------------------------------------- */

static int check_range(const struct gpunvme_layer_loader *l, uint64_t off, uint64_t len, const void *dst)
{
	if (!l)
		return gpunvme_set_error(-EINVAL, "load: no loader");
	if (off > l->file_size || len > l->file_size - off)
		return gpunvme_set_error(-ERANGE, "bytes %llu+%llu are past the end of the file (%llu bytes)",
					 (unsigned long long)off, (unsigned long long)len,
					 (unsigned long long)l->file_size);
	if (len && !dst)
		return gpunvme_set_error(-EINVAL, "load: no destination");
	return 0;
}

/* Memory the controller cannot reach (CPU tier: not DMA memory; GPU tiers:
 * not loader or registered memory) is filled through the bounce buffer,
 * and counted as bounced. */
static bool span_staged(const struct gpunvme_layer_loader *l, const struct gpunvme_load_span *s)
{
	if (!s->len)
		return false;
	if (l->gpu)
		return !l->gpu->direct(l->gctx, s->dst, s->len);
	return !gpunvme_dma_iova(l->c, s->dst) || !gpunvme_dma_iova(l->c, (const uint8_t *)s->dst + s->len - 1);
}

static int run_once(struct gpunvme_layer_loader *l, const struct gpunvme_load_span *sp, size_t n, void *stream,
		    void *event, int sync, uint16_t *status)
{
	int rc = 0;
	if (!l->gpu && !l->nqp && (rc = cpu_queues_acquire(l)))
		return rc; /* released: take them again */
	/* one plan for every span: their bounce reads share the rounds, so
	 * the spans go to the controller together */
	struct plan p;
	memset(&p, 0, sizeof(p));
	p.bounce_cap = l->bounce_bytes;
	for (size_t i = 0; i < n && !rc; i++)
		rc = plan_add(l, (uint32_t)i, sp[i].off, sp[i].len, (uintptr_t)sp[i].dst, span_staged(l, &sp[i]), &p);
	if (!rc)
		rc = plan_end_round(&p);
	if (rc) {
		plan_free(&p);
		return rc;
	}
	uint64_t deadline = gpunvme_now_ns() + (uint64_t)l->o.timeout_ms * 1000000ull;
	size_t start = 0;
	for (size_t k = 0; k < p.nrounds && !rc; k++) {
		struct load_round r = { p.ops + start, p.round_end[k] - start };
		if (l->gpu)
			rc = l->gpu->exec(l->gctx, sp, n, &r, stream, (uint64_t)l->o.timeout_ms * 1000000ull);
		else
			rc = cpu_round(l, sp, r.ops, r.nops, deadline, status);
		start = p.round_end[k];
	}
	for (size_t i = 0; i < p.nops; i++) {
		const struct load_op *op = &p.ops[i];
		l->st.direct_bytes += op->kind == LOAD_DIRECT ? op->len : 0;
		l->st.bounced_bytes += op->kind == LOAD_BOUNCE ? op->len : 0;
		l->st.zero_bytes += op->kind == LOAD_ZERO ? op->len : 0;
		l->st.commands += op->kind == LOAD_ZERO ? 0 : 1;
	}
	if (l->gpu) {
		int frc = l->gpu->finish(l->gctx, stream, event, sync);
		rc = rc ? rc : frc;
		if (!rc && sync)
			rc = l->gpu->check(l->gctx, status);
	}
	plan_free(&p);
	return rc;
}

/* Worth another try after a recovery? A status with Do Not Retry set
 * (§4.6.1.2: the same command is expected to fail again) is not, nor a
 * device that is gone or a refused argument. */
static bool retryable(int rc, uint16_t status)
{
	if (rc == -EIO)
		return !status || !(status & GPUNVME_STATUS_DNR);
	return rc == -ETIMEDOUT;
}

/* Make the queues usable again: the GPU backend re-creates its queues in
 * place; the CPU path takes the abort step on its queue pairs and resets
 * the controller when a timed-out command stays unanswered or the
 * controller failed (its queue pairs are re-created in place). */
static int recover_queues(struct gpunvme_layer_loader *l)
{
	int reset = 0, rc;
	if (l->gpu) {
		rc = l->gpu->recover(l->gctx, &reset);
	} else {
		rc = 0;
		for (uint32_t i = 0; i < l->nqp && !rc; i++) {
			int left = gpunvme_qpair_abort_expired(l->qp[i]);
			if (left != 0)
				rc = left > 0 ? -EAGAIN : left;
		}
		if (rc == -EAGAIN || rc == -EIO) {
			reset = 1;
			rc = gpunvme_reset(l->c);
		}
	}
	l->st.resets += (uint64_t)reset;
	return rc;
}

/* Every span in the file and with a destination; their total length. */
static int check_spans(const struct gpunvme_layer_loader *l, const struct gpunvme_load_span *sp, size_t n,
		       uint64_t *total)
{
	if (!l)
		return gpunvme_set_error(-EINVAL, "load: no loader");
	if (!sp || n > UINT32_MAX)
		return gpunvme_set_error(-EINVAL, "load: %s", sp ? "more than 2^32 ranges at once" : "no ranges");
	*total = 0;
	for (size_t i = 0; i < n; i++) {
		int rc = check_range(l, sp[i].off, sp[i].len, sp[i].dst);
		if (rc)
			return n > 1 ? gpunvme_set_error(rc, "range %zu of %zu: %s", i, n, gpunvme_last_error()) : rc;
		*total += sp[i].len;
	}
	return 0;
}

static int run_plan(struct gpunvme_layer_loader *l, const struct gpunvme_load_span *sp, size_t n, void *stream,
		    void *event, int sync, uint16_t *status)
{
	uint64_t total;
	int rc = check_spans(l, sp, n, &total);
	if (rc)
		return rc;
	if (total == 0 && !l->gpu)
		return 0;
	uint16_t st = 0;
	uint32_t attempt;
	for (attempt = 0;; attempt++) {
		st = 0;
		rc = run_once(l, sp, n, stream, event, sync, &st);
		/* an asynchronous load reports at the next check: the caller
		 * decides (gpunvme_layer_loader_check) */
		if (!rc || !sync || !retryable(rc, st) || attempt == l->o.retries)
			break;
		if (!total) {
			/* An empty load only waits for the loads queued before it
			 * and collects their result (gpunvme_layer_loader_wait):
			 * tried again it would read nothing and report success
			 * for reads that failed, and the caller would use bytes
			 * that never landed. The failure goes back as it is; after
			 * a timeout the queues are made usable first, so that the
			 * caller can load those ranges again. */
			if (!st) {
				char why[256];
				snprintf(why, sizeof(why), "%s", gpunvme_last_error());
				int rrc = recover_queues(l);
				gpunvme_set_error(rc, "%s%s%s", why, rrc ? "; recovering the queues failed: " : "",
						  rrc ? gpunvme_last_error() : "");
			}
			break;
		}
		if (st) { /* an NVMe status: the queues are fine, only try again */
			l->st.retries++;
			continue;
		}
		char why[256];
		snprintf(why, sizeof(why), "%s", gpunvme_last_error());
		int rrc = recover_queues(l);
		if (rrc) {
			gpunvme_set_error(rrc, "bytes %llu+%llu%s: %s; recovering the queues failed: %s",
					  (unsigned long long)sp[0].off, (unsigned long long)sp[0].len,
					  n > 1 ? " and more ranges" : "", why, gpunvme_last_error());
			return rrc;
		}
		l->st.retries++;
	}
	if (status)
		*status = st;
	if (rc && sync)
		gpunvme_set_error(rc, "bytes %llu+%llu of the file%s, %u %s: %s", (unsigned long long)sp[0].off,
				  (unsigned long long)sp[0].len, n > 1 ? " and more ranges" : "", attempt + 1,
				  attempt ? "tries" : "try", gpunvme_last_error());
	return rc;
}

/*
 * GPU tiers: member 0 works on `stream` (NULL: its own stream), every other
 * member on its own stream, forked from `stream` before (it may hold work
 * the load must follow) and joined into it after, so the member controllers
 * are read at once and `event`, recorded on `stream`, follows them all.
 */
static int md_queue_gpu(struct gpunvme_layer_loader *l, const struct gpunvme_load_span *sp, size_t n, void *stream,
			void *event)
{
	struct gpunvme_layer_loader *m0 = l->mem[0];
	void *s = stream ? stream : m0->gpu->own_stream(m0->gctx);
	int rc = 0;
	for (uint32_t k = 1; k < l->nmem && !rc; k++)
		rc = l->mem[k]->gpu->wait(l->mem[k]->gctx, l->mem[k]->gpu->own_stream(l->mem[k]->gctx), s);
	for (uint32_t k = 0; k < l->nmem && !rc; k++)
		rc = run_plan(l->mem[k], sp, n, k ? NULL : s, NULL, 0, NULL);
	for (uint32_t k = 1; k < l->nmem && !rc; k++)
		rc = l->mem[k]->gpu->wait(l->mem[k]->gctx, s, l->mem[k]->gpu->own_stream(l->mem[k]->gctx));
	if (!rc && event)
		rc = m0->gpu->finish(m0->gctx, s, event, 0);
	return rc;
}

/* One md member's share of a load, on its own thread (CPU tier). */
struct md_job {
	struct gpunvme_layer_loader *l;
	const struct gpunvme_load_span *sp;
	size_t n;
	uint16_t status;
	int rc;
	char err[256];
};

static void *md_job_run(void *arg)
{
	struct md_job *j = arg;
	j->rc = gpunvme_load_layers(j->l, j->sp, j->n, &j->status);
	if (j->rc) /* the last-error text is per thread: carry it back */
		snprintf(j->err, sizeof(j->err), "%s", gpunvme_last_error());
	return NULL;
}

/*
 * Each member fills its own chunks of [off, off + len) (they never overlap:
 * gpunvme_md_member_extents gives every file byte to one member). The CPU
 * tier runs the members on threads of their own, so the member controllers
 * work at once; each member's wait is bounded by its own timeout. The GPU
 * tiers queue the members one after the other on the loader's stream.
 */
static int md_load(struct gpunvme_layer_loader *l, const struct gpunvme_load_span *sp, size_t n, uint16_t *status)
{
	uint64_t total;
	int rc = check_spans(l, sp, n, &total);
	if (rc)
		return rc;
	if (l->gpu) {
		if ((rc = md_queue_gpu(l, sp, n, NULL, NULL)))
			return rc;
		/* wait for member 0's stream, which joined every other one */
		struct gpunvme_layer_loader *m0 = l->mem[0];
		if ((rc = m0->gpu->finish(m0->gctx, NULL, NULL, 1)))
			return rc;
		return gpunvme_layer_loader_check(l, status);
	}
	if (l->nmem == 1)
		return gpunvme_load_layers(l->mem[0], sp, n, status);
	struct md_job *jobs = calloc(l->nmem, sizeof(*jobs));
	pthread_t *th = calloc(l->nmem, sizeof(*th));
	bool *started = calloc(l->nmem, sizeof(*started));
	if (!jobs || !th || !started) {
		free(jobs);
		free(th);
		free(started);
		return gpunvme_set_error(-ENOMEM, "out of memory");
	}
	for (uint32_t k = 0; k < l->nmem; k++) {
		jobs[k] = (struct md_job){ l->mem[k], sp, n, 0, 0, "" };
		/* member 0 runs here; a thread that cannot start runs here too */
		started[k] = k > 0 && pthread_create(&th[k], NULL, md_job_run, &jobs[k]) == 0;
	}
	for (uint32_t k = 0; k < l->nmem; k++)
		if (!started[k])
			md_job_run(&jobs[k]);
	for (uint32_t k = 0; k < l->nmem; k++)
		if (started[k])
			pthread_join(th[k], NULL);
	for (uint32_t k = 0; k < l->nmem && !rc; k++) {
		if (jobs[k].rc) {
			rc = gpunvme_set_error(jobs[k].rc, "md member %u: %s", k, jobs[k].err);
			if (status)
				*status = jobs[k].status;
		}
	}
	free(jobs);
	free(th);
	free(started);
	return rc;
}

int gpunvme_load_layers(struct gpunvme_layer_loader *l, const struct gpunvme_load_span *spans, size_t n,
			uint16_t *status)
{
	static const struct gpunvme_load_span none = { 0, 0, NULL };
	if (status)
		*status = 0;
	if (!n) /* a load of zero bytes: waits for what is queued */
		spans = &none, n = 1;
	if (l && l->mem)
		return md_load(l, spans, n, status);
	return run_plan(l, spans, n, NULL, NULL, 1, status);
}

int gpunvme_load_layer(struct gpunvme_layer_loader *l, uint64_t off, uint64_t len, void *dst, uint16_t *status)
{
	const struct gpunvme_load_span s = { off, len, dst };
	return gpunvme_load_layers(l, &s, 1, status);
}

int gpunvme_layer_loader_wait(struct gpunvme_layer_loader *l, uint16_t *status)
{
	if (l && !l->mem && !l->gpu) {
		if (status)
			*status = 0;
		return 0; /* the CPU tier has nothing queued */
	}
	return gpunvme_load_layer(l, 0, 0, NULL, status);
}

int gpunvme_load_layers_async(struct gpunvme_layer_loader *l, const struct gpunvme_load_span *spans, size_t n,
			      void *stream, void *event)
{
	static const struct gpunvme_load_span none = { 0, 0, NULL };
	if (l && !l->gpu)
		return gpunvme_set_error(-ENOTSUP, "asynchronous loads need a GPU tier (this loader uses the CPU path)");
	if (!n) /* a load of zero bytes: records the event after what is queued */
		spans = &none, n = 1;
	if (l && l->mem) {
		uint64_t total;
		int rc = check_spans(l, spans, n, &total);
		return rc ? rc : md_queue_gpu(l, spans, n, stream, event);
	}
	return run_plan(l, spans, n, stream, event, 0, NULL);
}

int gpunvme_load_layer_async(struct gpunvme_layer_loader *l, uint64_t off, uint64_t len, void *dst, void *stream,
			     void *event)
{
	const struct gpunvme_load_span s = { off, len, dst };
	return gpunvme_load_layers_async(l, &s, 1, stream, event);
}

int gpunvme_load_guard_async(struct gpunvme_layer_loader *l, void *dst, uint64_t len, void *stream)
{
	if (!l || (len && !dst))
		return gpunvme_set_error(-EINVAL, "guard: bad arguments");
	if (!l->mem && !l->gpu)
		return gpunvme_set_error(-ENOTSUP, "load guards need a GPU tier (this loader uses the CPU path)");
	if (!len)
		return 0;
	if (!l->mem)
		return l->gpu->guard(l->gctx, dst, len, stream);
	/* md: every member's failures count; each guard runs on `stream`
	 * (member 0's own stream when NULL), where md_queue_gpu joined the
	 * members' reads */
	struct gpunvme_layer_loader *m0 = l->mem[0];
	void *s = stream ? stream : m0->gpu->own_stream(m0->gctx);
	int rc = 0;
	for (uint32_t k = 0; k < l->nmem && !rc; k++)
		rc = l->mem[k]->gpu->guard(l->mem[k]->gctx, dst, len, s);
	return rc;
}

int gpunvme_layer_loader_failed(const struct gpunvme_layer_loader *l)
{
	if (!l)
		return 0;
	if (l->mem) {
		for (uint32_t k = 0; k < l->nmem; k++)
			if (gpunvme_layer_loader_failed(l->mem[k]))
				return 1;
		return 0;
	}
	return l->gpu ? l->gpu->failed(l->gctx) : 0;
}

int gpunvme_layer_loader_check(struct gpunvme_layer_loader *l, uint16_t *status)
{
	if (status)
		*status = 0;
	if (!l)
		return gpunvme_set_error(-EINVAL, "check: no loader");
	if (l->mem) {
		int first = 0;
		for (uint32_t k = 0; k < l->nmem; k++) {
			uint16_t st = 0;
			int rc = gpunvme_layer_loader_check(l->mem[k], &st);
			if (rc && !first) {
				first = rc;
				if (status)
					*status = st;
			}
		}
		return first;
	}
	return l->gpu ? l->gpu->check(l->gctx, status) : 0;
}

void gpunvme_layer_loader_stats(const struct gpunvme_layer_loader *l, struct gpunvme_loader_stats *st)
{
	if (l && st && l->mem) {
		memset(st, 0, sizeof(*st));
		for (uint32_t k = 0; k < l->nmem; k++) {
			struct gpunvme_loader_stats m;
			gpunvme_layer_loader_stats(l->mem[k], &m);
			st->direct_bytes += m.direct_bytes;
			st->bounced_bytes += m.bounced_bytes;
			st->zero_bytes += m.zero_bytes;
			st->commands += m.commands;
		}
	} else if (l && st) {
		*st = l->st;
	}
}

int gpunvme_layer_loader_member_stats(const struct gpunvme_layer_loader *l, uint32_t member,
				      struct gpunvme_loader_stats *st)
{
	if (!l || !st || member >= (l->mem ? l->nmem : 1))
		return gpunvme_set_error(-ERANGE, "loader stats: no member %u", member);
	gpunvme_layer_loader_stats(l->mem ? l->mem[member] : l, st);
	return 0;
}

int gpunvme_layer_loader_init_md(struct gpunvme_ctrl *const *ctrls, const uint32_t *nsids, const struct gpunvme_md *md,
				 const struct gpunvme_extent *ext, size_t n, uint64_t file_size,
				 const struct gpunvme_loader_opts *opts, struct gpunvme_layer_loader **out)
{
	if (!ctrls || !nsids || !md || !out || (n && !ext))
		return gpunvme_set_error(-EINVAL, "layer loader: bad arguments");
	struct gpunvme_md_info mi;
	gpunvme_md_info(md, &mi);
	struct gpunvme_layer_loader *l = calloc(1, sizeof(*l));
	if (!l || !(l->mem = calloc(mi.n_members, sizeof(*l->mem)))) {
		free(l);
		return gpunvme_set_error(-ENOMEM, "out of memory");
	}
	if (opts)
		l->o = *opts;
	else
		gpunvme_loader_opts_init(&l->o);
	l->file_size = file_size;
	/* one tier for the whole array: the members' capabilities together */
	int rc = resolve_tier(ctrls, mi.n_members, &l->o);
	for (uint32_t k = 0; k < mi.n_members && !rc; k++) {
		struct gpunvme_extent *me = NULL;
		size_t nme = 0;
		if (!ctrls[k]) {
			rc = gpunvme_set_error(-EINVAL, "layer loader: no controller for md member %u", k);
			break;
		}
		if ((rc = gpunvme_md_member_extents(md, ext, n, file_size, k, &me, &nme)))
			break;
		rc = gpunvme_layer_loader_init(ctrls[k], nsids[k], me, nme, file_size, &l->o, &l->mem[k]);
		if (rc) {
			char why[256];
			snprintf(why, sizeof(why), "%s", gpunvme_last_error());
			rc = gpunvme_set_error(rc, "md member %u: %s", k, why);
		}
		free(me);
		l->nmem = k + 1;
	}
	if (rc) {
		gpunvme_layer_loader_destroy(l);
		return rc;
	}
	l->gpu = l->mem[0]->gpu;
	l->md = md;
	*out = l;
	return 0;
}

int gpunvme_layer_loader_init_volume(struct gpunvme_volume *v, const struct gpunvme_extent *ext, size_t n,
				     uint64_t file_size, const struct gpunvme_loader_opts *opts,
				     struct gpunvme_layer_loader **out)
{
	if (!v)
		return gpunvme_set_error(-EINVAL, "layer loader: no volume");
	struct gpunvme_md_volume *md = gpunvme_volume_md(v);
	/* the loader takes its own queue pairs on the same controllers */
	gpunvme_volume_make_room(v);
	if (md)
		return gpunvme_layer_loader_init_md(md->c, md->nsid, md->md, ext, n, file_size, opts, out);
	struct gpunvme_ctrl *c = gpunvme_volume_ctrl(v, 0);
	if (!c)
		return gpunvme_set_error(-EOPNOTSUPP, "an image file read without a controller cannot be loaded by "
						      "the driver: open it as emu:PATH");
	return gpunvme_layer_loader_init(c, gpunvme_volume_nsid(v), ext, n, file_size, opts, out);
}
