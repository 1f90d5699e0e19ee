/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The GPU expert cache (include/gpunvme/moe_gpu.h): commands of every expert
 * built once on the host, then per fetch three kernels on the caller's
 * stream: decide (one thread), read (a grid, GPU-issued NVMe reads), publish
 * (one thread).
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/stream_wait.cuh"
#include "gpunvme/device.cuh"
#include "gpunvme/gpu.h"
#include "gpunvme/gpunvme.h"
#include "moe/policy.h"
#include "gpunvme/md.h"
#include "gpunvme/moe_gpu.h"
#include "gpunvme/volume.h"

#include "moe_gpu_plan.h"

struct gpunvme_gpu_experts {
	const struct gpunvme_moe_index *x;
	enum gpunvme_tier tier;
	struct gpunvme_gpu_experts_opts o;
	uint32_t nmem;
	struct gpunvme_gpu_queues *q[GPUNVME_MD_MAX_MEMBERS];
	struct gpunvme_gpu_buf *buf[GPUNVME_MD_MAX_MEMBERS];
	void *host_mem;            /* Tier 1: the DMA memory of the slots */
	struct gpunvme_ctrl *c0;
	struct mg_args a;          /* device pointers; ids/out/k/layer set per fetch */
	void *dev_alloc[16]; /* dev_put's tables: 12 today */
	uint32_t ndev;
};

static int cuda_fail(cudaError_t e, const char *what)
{
	return gpunvme_set_error(e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO, "%s: %s", what, cudaGetErrorString(e));
}

/* ---- kernels ----------------------------------------------------------------------- */

static __host__ __device__ void mg_fail(struct mg_state *st, int rc)
{
#ifdef __CUDA_ARCH__
	atomicCAS(&st->status, 0, rc);
#else
	if (!st->status)
		st->status = rc;
#endif
}

/* Decide, one thread: hits, victims, the misses to read. The host cache's
 * policy (src/moe/policy.h): fewest requests, then least recently used,
 * among the slots the request does not need; a slot being filled is empty
 * until publish. */
__host__ __device__ void moe_gpu_decide(const struct mg_args *ap)
{
	const struct mg_args a = *ap;
	struct mg_state *st = a.st;
	const unsigned long long mark = ++st->clock;
	moe_policy_age(a.freq, a.keys, &st->since_age);
	st->n_todo = 0;
	uint32_t distinct = 0;
	bool bad = false;
	for (uint32_t j = 0; j < a.k; j++) {
		if (a.ids[j] >= a.n_experts) {
			bad = true;
			continue;
		}
		bool dup = false;
		for (uint32_t q = 0; q < j && !dup; q++)
			dup = a.ids[q] == a.ids[j];
		if (dup)
			continue;
		distinct++;
		int32_t s = a.where[(size_t)a.layer * a.n_experts + a.ids[j]];
		if (s >= 0)
			a.slot_mark[s] = mark;
	}
	if (bad || distinct > a.slots) {
		mg_fail(st, bad ? MG_EBADID : MG_ENOSPC);
		for (uint32_t j = 0; j < a.k; j++)
			a.out[j] = GPUNVME_GPU_EXPERTS_NO_SLOT;
		return;
	}
	for (uint32_t j = 0; j < a.k; j++) {
		uint32_t first = j;
		for (uint32_t q = 0; q < j; q++)
			if (a.ids[q] == a.ids[j]) {
				first = q;
				break;
			}
		if (first != j) {
			a.out[j] = a.out[first];
			continue;
		}
		st->requests++;
		const uint32_t key = a.layer * a.n_experts + a.ids[j];
		moe_policy_count(a.freq, key, &st->since_age);
		int32_t s = a.where[key];
		if (s >= 0) {
			st->hits++;
		} else {
			uint32_t v = 0xffffffffu;
			for (uint32_t i = 0; i < a.slots; i++) {
				if (a.slot_mark[i] == mark)
					continue;
				if (a.slot_key[i] < 0) {
					v = i;
					break;
				}
				if (v == 0xffffffffu || moe_policy_before(a.freq[a.slot_key[i]], a.slot_used[i],
									  a.freq[a.slot_key[v]], a.slot_used[v]))
					v = i;
			}
			/* v exists: distinct <= slots */
			if (a.slot_key[v] >= 0) {
				a.where[a.slot_key[v]] = -1;
				st->evictions++;
			}
			a.slot_key[v] = -1;
			a.slot_mark[v] = mark;
			for (uint32_t p = 0; p < a.n_proj; p++)
				a.slot_off[(size_t)v * a.n_proj + p] = (uint64_t)v * a.slot_bytes + a.pos[(size_t)key * a.n_proj + p];
			uint32_t t = st->n_todo++;
			st->todo_key[t] = key;
			st->todo_slot[t] = v;
			st->todo_fail[t] = 0;
			st->misses++;
			s = (int32_t)v;
		}
		a.slot_used[s] = mark;
		a.out[j] = (uint32_t)s;
	}
#ifdef __CUDA_ARCH__
	if (st->n_todo)
		st->t_start = gpunvme_dev_now();
#endif
}

/* Read, a grid: every run of every miss, one per thread at a time, spread
 * over the member's queue pairs. */
static __global__ void mg_read(struct mg_args a)
{
	struct mg_state *st = a.st;
	const uint32_t n_todo = st->n_todo;
	uint64_t total = 0;
	for (uint32_t t = 0; t < n_todo; t++)
		total += a.run_first[st->todo_key[t] + 1] - a.run_first[st->todo_key[t]];
	const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t r = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; r < total; r += stride) {
		uint32_t t = 0;
		uint64_t rr = r;
		for (;; t++) {
			uint64_t n = a.run_first[st->todo_key[t] + 1] - a.run_first[st->todo_key[t]];
			if (rr < n)
				break;
			rr -= n;
		}
		const struct mg_run *run = &a.runs[a.run_first[st->todo_key[t]] + rr];
		const uint64_t off = (uint64_t)st->todo_slot[t] * a.slot_bytes + run->off;
		if (run->nlb == 0) {
			/* a hole or an unwritten range: zeroes, as a read gives */
			uint8_t *d = a.base + off;
			for (uint32_t i = 0; i < run->zero; i++)
				d[i] = 0;
			continue;
		}
		const struct mg_member *m = &a.mem[run->member];
		int rc = gpunvme_dev_read(&m->q, (uint32_t)(r % m->q.nq), run->slba, run->nlb, &m->b, off, a.timeout_ns);
		atomicAdd(&st->commands, 1ull);
		if (rc) {
			mg_fail(st, rc);
			st->todo_fail[t] = 1;
		}
	}
}

/* Publish, one thread: the experts that arrived are resident; a failed one
 * leaves its slot empty and every request for it NO_SLOT. */
__host__ __device__ void moe_gpu_publish(const struct mg_args *ap)
{
	const struct mg_args a = *ap;
	struct mg_state *st = a.st;
#ifdef __CUDA_ARCH__
	if (st->n_todo) {
		st->stall_ns += gpunvme_dev_now() - st->t_start;
		st->stalled++;
	}
#endif
	for (uint32_t t = 0; t < st->n_todo; t++) {
		const uint32_t key = st->todo_key[t], v = st->todo_slot[t];
		if (!st->todo_fail[t]) {
			a.slot_key[v] = key;
			a.where[key] = (int32_t)v;
			st->bytes_read += a.ebytes[key];
			continue;
		}
		for (uint32_t j = 0; j < a.k; j++)
			if (a.out[j] == v)
				a.out[j] = GPUNVME_GPU_EXPERTS_NO_SLOT;
	}
	st->n_todo = 0;
}

static __global__ void mg_decide(struct mg_args a)
{
	moe_gpu_decide(&a);
}

static __global__ void mg_publish(struct mg_args a)
{
	moe_gpu_publish(&a);
}

/* ---- the host side ----------------------------------------------------------------- */

/* Queue pairs per controller when the caller leaves it to us: the reader
 * threads spread their commands over them; 4 of 256 entries keep a Gen5
 * drive's queue full at 128 KiB commands with room to spare. */
#define MG_AUTO_QUEUES 4u

void gpunvme_gpu_experts_opts_init(struct gpunvme_gpu_experts_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->tier = GPUNVME_TIER_AUTO;
	o->queues = 0; /* fitted per controller: see MG_AUTO_QUEUES */
	o->depth = 256;
	o->threads = 1024;
	o->timeout_ns = 10000000000ull;
}

static void *dev_put(struct gpunvme_gpu_experts *g, const void *h, size_t bytes, int *rc)
{
	if (*rc)
		return NULL;
	void *d = NULL;
	cudaError_t e = cudaMalloc(&d, bytes ? bytes : 1);
	if (e == cudaSuccess && h)
		e = cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
	else if (e == cudaSuccess)
		e = cudaMemset(d, 0, bytes ? bytes : 1);
	if (e != cudaSuccess) {
		cudaFree(d);
		*rc = cuda_fail(e, "GPU expert cache tables");
		return NULL;
	}
	g->dev_alloc[g->ndev++] = d;
	return d;
}

/* The runs of the bytes [fs, fe) of the file into slot offset so, for the
 * members' extents mext[m][0..mn[m]). Appends to *runs. */
struct runs_vec {
	struct mg_run *v;
	size_t n, cap;
};

static int push_run(struct runs_vec *rv, struct mg_run r)
{
	if (rv->n == rv->cap) {
		size_t cap = rv->cap ? rv->cap * 2 : 1024;
		struct mg_run *v = (struct mg_run *)realloc(rv->v, cap * sizeof(*v));
		if (!v)
			return gpunvme_set_error(-ENOMEM, "out of memory");
		rv->v = v;
		rv->cap = cap;
	}
	rv->v[rv->n++] = r;
	return 0;
}

static int zero_runs(struct runs_vec *rv, uint64_t so, uint64_t len)
{
	int rc = 0;
	for (uint64_t d = 0; d < len && !rc; d += MG_ZERO_PIECE) {
		uint64_t n = len - d < MG_ZERO_PIECE ? len - d : MG_ZERO_PIECE;
		struct mg_run r = { 0, so + d, 0, 0, (uint32_t)n, 0 };
		rc = push_run(rv, r);
	}
	return rc;
}

/* The first of the sorted, disjoint extents e[0..n) that ends past off. */
static size_t first_after(const struct gpunvme_extent *e, size_t n, uint64_t off)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (e[mid].logical + e[mid].length <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The runs that fill slot bytes [so, so + fe - fs) from file bytes
 * [fs, fe): at each point the member extent that holds it (md: exactly one
 * member's is not ELSEWHERE, gpunvme_md_member_extents), read in commands
 * of at most MDTS; unwritten ranges and what no member holds (holes) as
 * zero-fills. Each step finds its extent by binary search: an array's
 * member extents number one per chunk, hundreds of thousands for a large
 * model. */
static int file_runs(const struct moe_gpu_member_map *mm, uint32_t nmem, uint64_t fs, uint64_t fe, uint64_t so,
		     struct runs_vec *rv)
{
	uint64_t covered_to = fs;
	int rc = 0;
	while (covered_to < fe && !rc) {
		uint64_t next = fe;
		const struct gpunvme_extent *x = NULL;
		uint32_t m;
		for (m = 0; m < nmem && !x; m++) {
			size_t i = first_after(mm[m].ext, mm[m].n, covered_to);
			/* past the other members' pieces (md) to this member's next */
			while (i < mm[m].n && mm[m].ext[i].logical < fe && (mm[m].ext[i].flags & GPUNVME_EXTENT_ELSEWHERE))
				i++;
			if (i == mm[m].n || mm[m].ext[i].logical >= fe)
				continue;
			if (mm[m].ext[i].logical <= covered_to)
				x = &mm[m].ext[i];
			else if (mm[m].ext[i].logical < next)
				next = mm[m].ext[i].logical;
		}
		if (!x) {
			/* nobody holds covered_to: a hole up to the next extent */
			rc = zero_runs(rv, so + (covered_to - fs), next - covered_to);
			covered_to = next;
			continue;
		}
		m--; /* the member whose extent x is */
		uint64_t hi = x->logical + x->length, b = hi < fe ? hi : fe, a = covered_to;
		if (x->flags & GPUNVME_EXTENT_UNWRITTEN) {
			rc = zero_runs(rv, so + (a - fs), b - a);
		} else {
			const uint64_t lba = 1ull << mm[m].lba_shift;
			uint64_t phys = x->physical + (a - x->logical);
			if (phys % lba || (b - a) % lba)
				return gpunvme_set_error(-EINVAL, "GPU expert cache: file bytes %llu+%llu lie at byte %llu of member "
								  "%u, not on its %llu-byte blocks: GPU threads read whole blocks; "
								  "use the CPU cache",
							 (unsigned long long)a, (unsigned long long)(b - a),
							 (unsigned long long)phys, m, (unsigned long long)lba);
			for (uint64_t d = 0; d < b - a && !rc;) {
				uint64_t blocks = (b - a - d) >> mm[m].lba_shift;
				if (blocks > mm[m].max_blocks)
					blocks = mm[m].max_blocks;
				struct mg_run r = { (phys + d) >> mm[m].lba_shift, so + (a - fs) + d, (uint32_t)blocks, m, 0, 0 };
				rc = push_run(rv, r);
				d += blocks << mm[m].lba_shift;
			}
		}
		covered_to = b;
	}
	return rc;
}

void moe_gpu_plan_free(struct moe_gpu_plan *p)
{
	free(p->pos);
	free(p->ebytes);
	free(p->first);
	free(p->runs);
	memset(p, 0, sizeof(*p));
}

int moe_gpu_plan_build(const struct gpunvme_moe_index *x, const struct moe_gpu_member_map *mm, uint32_t nmem,
		       struct moe_gpu_plan *p)
{
	memset(p, 0, sizeof(*p));
	const uint32_t keys = x->n_layers * x->n_experts, np = x->n_proj;
	p->pos = (uint64_t *)calloc((size_t)keys * np + 1, sizeof(*p->pos));
	p->ebytes = (uint64_t *)calloc((size_t)keys + 1, sizeof(*p->ebytes));
	p->first = (uint32_t *)calloc((size_t)keys + 1, sizeof(*p->first));
	struct runs_vec rv = { NULL, 0, 0 };
	int rc = 0;
	if (!p->pos || !p->ebytes || !p->first)
		rc = gpunvme_set_error(-ENOMEM, "out of memory");
	uint64_t most = 0;
	for (uint32_t key = 0; key < keys && !rc; key++) {
		const uint32_t li = key / x->n_experts, e = key % x->n_experts;
		uint64_t end = gpunvme_moe_place(x, li, e, p->pos + (size_t)key * np);
		most = end > most ? end : most;
		const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(x, li, e);
		p->first[key] = (uint32_t)rv.n;
		for (uint32_t q = 0; q < np && !rc; q++) {
			/* whole blocks around the piece: gpunvme_moe_place keeps
			 * them clear of the other pieces' */
			const uint64_t P = GPUNVME_MOE_PLACE;
			uint64_t fs = pc[q].offset - pc[q].offset % P, fe = (pc[q].offset + pc[q].bytes + P - 1) / P * P;
			uint64_t so = p->pos[(size_t)key * np + q] - pc[q].offset % P;
			p->ebytes[key] += pc[q].bytes;
			rc = file_runs(mm, nmem, fs, fe, so, &rv);
		}
		if (!rc && rv.n > UINT32_MAX / 2)
			rc = gpunvme_set_error(-EFBIG, "GPU expert cache: over 2^31 commands");
	}
	if (p->first)
		p->first[keys] = (uint32_t)rv.n;
	p->runs = rv.v;
	p->n_runs = rv.n;
	p->slot_bytes = (most + GPUNVME_MOE_PLACE - 1) / GPUNVME_MOE_PLACE * GPUNVME_MOE_PLACE;
	if (rc)
		moe_gpu_plan_free(p);
	return rc;
}

void gpunvme_gpu_experts_close(struct gpunvme_gpu_experts *g)
{
	if (!g)
		return;
	/* the members' registrations of the slot memory first, then member
	 * 0's buffer, which owns it on Tier 2 (gpunvme_gpu_buf_device) */
	for (uint32_t m = g->nmem; m-- > 0;)
		gpunvme_gpu_buf_free(g->buf[m]);
	for (uint32_t i = 0; i < g->ndev; i++)
		cudaFree(g->dev_alloc[i]);
	if (g->host_mem)
		gpunvme_dma_free(g->c0, g->host_mem);
	for (uint32_t m = 0; m < g->nmem; m++)
		gpunvme_gpu_queues_destroy(g->q[m]);
	free(g);
}

enum gpunvme_tier gpunvme_gpu_experts_tier(const struct gpunvme_gpu_experts *g)
{
	return g ? g->tier : GPUNVME_TIER_CPU;
}

int gpunvme_gpu_experts_open(struct gpunvme_volume *v, const struct gpunvme_moe_index *x,
			     const struct gpunvme_extent *ext, size_t n, uint64_t file_size,
			     const struct gpunvme_gpu_experts_opts *o, struct gpunvme_gpu_experts **out)
{
	if (!out)
		return gpunvme_set_error(-EINVAL, "GPU expert cache: bad arguments");
	*out = NULL;
	if (!v || !x || (n && !ext) || !o || !o->slots || !o->depth || !o->threads)
		return gpunvme_set_error(-EINVAL, "GPU expert cache: %s",
					 !v || !x || !o ? "no volume, index or options"
					 : !o || !o->slots ? "0 slots: give room for at least the experts one token uses"
							   : "0 depth or threads");
	struct gpunvme_gpu_experts *g = (struct gpunvme_gpu_experts *)calloc(1, sizeof(*g));
	if (!g)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	g->x = x;
	g->o = *o;
	/* the controllers: an md array's members, or the one */
	struct gpunvme_md_volume *md = gpunvme_volume_md(v);
	struct gpunvme_ctrl *ctrls[GPUNVME_MD_MAX_MEMBERS];
	uint32_t nsids[GPUNVME_MD_MAX_MEMBERS];
	g->nmem = md ? (uint32_t)md->n : 1;
	for (uint32_t m = 0; m < g->nmem; m++) {
		ctrls[m] = md ? md->c[m] : gpunvme_volume_ctrl(v, 0);
		nsids[m] = md ? md->nsid[m] : gpunvme_volume_nsid(v);
	}
	int rc = ctrls[0] ? 0 : gpunvme_set_error(-EOPNOTSUPP, "GPU expert cache: an image read without a controller: "
								"open it as emu:PATH");
	int ndev = 0;
	bool gpu = cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0;
	if (!rc)
		rc = gpunvme_tier_choose(ctrls, g->nmem, gpu, o->tier, &g->tier);
	if (!rc && g->tier == GPUNVME_TIER_CPU)
		rc = gpunvme_set_error(-EOPNOTSUPP, "GPU expert cache: %s; the CPU tier's cache is gpunvme_expert_cache_open",
				       gpu ? "the volume allows only the CPU tier" : "no CUDA GPU");
	if (!rc && g->tier == GPUNVME_TIER_1 && g->nmem > 1)
		rc = gpunvme_set_error(-EOPNOTSUPP, "GPU expert cache: tier 1 on an md array of %u members needs one host "
							"buffer every member's controller reaches: use tier 2, or the CPU cache",
				       g->nmem);
	gpunvme_volume_make_room(v);
	struct moe_gpu_member_map mm[GPUNVME_MD_MAX_MEMBERS];
	memset(mm, 0, sizeof(mm));
	struct mg_member mem[GPUNVME_MD_MAX_MEMBERS];
	for (uint32_t m = 0; m < g->nmem && !rc; m++) {
		/* Queue pairs: what the caller asked, or up to MG_AUTO_QUEUES, never
		 * more than this controller still has free (an NVMe/TCP target may
		 * grant only a few, and another cache or loader on the same
		 * association may hold some) */
		uint32_t nfree = gpunvme_io_queues_free(ctrls[m]);
		uint32_t nq = o->queues ? o->queues : nfree < MG_AUTO_QUEUES ? nfree : MG_AUTO_QUEUES;
		if (nfree == 0 || nq > nfree) {
			rc = gpunvme_set_error(-EBUSY, "GPU expert cache: member %u: %u I/O queue pair(s) asked, %u free of "
							"those the controller granted: close another user of this "
							"controller, ask for fewer (opts.queues), or 0 to fit",
					       m, nq ? nq : 1, nfree);
			break;
		}
		if ((rc = gpunvme_gpu_queues_create(ctrls[m], nsids[m], nq, o->depth, &g->q[m]))) {
			char why[256];
			snprintf(why, sizeof(why), "%s", gpunvme_last_error());
			rc = gpunvme_set_error(rc, "GPU expert cache: member %u: %s", m, why);
			break;
		}
		const struct gpunvme_dev_queues *dq = gpunvme_gpu_queues_desc(g->q[m]);
		mem[m].q = *dq;
		mm[m].lba_shift = dq->lba_shift;
		mm[m].max_blocks = dq->max_blocks;
		if (md)
			rc = gpunvme_md_member_extents(md->md, ext, n, file_size, m, &mm[m].ext, &mm[m].n);
		else if (!(mm[m].ext = (struct gpunvme_extent *)malloc((n ? n : 1) * sizeof(*ext))))
			rc = gpunvme_set_error(-ENOMEM, "out of memory");
		else {
			memcpy(mm[m].ext, ext, n * sizeof(*ext));
			mm[m].n = n;
		}
		if (mm[m].lba_shift > 12)
			rc = gpunvme_set_error(-EINVAL, "GPU expert cache: member %u has %u-byte blocks; experts are placed on "
							"4 KiB boundaries (at most 4096-byte blocks)", m, 1u << mm[m].lba_shift);
	}
	/* slot layout and every expert's commands */
	const uint32_t keys = x->n_layers * x->n_experts, np = x->n_proj;
	struct moe_gpu_plan plan;
	memset(&plan, 0, sizeof(plan));
	if (!rc)
		rc = moe_gpu_plan_build(x, mm, g->nmem, &plan);
	for (uint32_t m = 0; m < g->nmem; m++)
		free(mm[m].ext);
	g->a.slot_bytes = plan.slot_bytes;
	const size_t total = (size_t)g->a.slot_bytes * o->slots;
	/* slot memory, registered with every member's queues */
	if (!rc && g->tier == GPUNVME_TIER_2) {
		void *d = NULL;
		if ((rc = gpunvme_gpu_buf_device(g->q[0], total, &g->buf[0], &d)) == 0) {
			g->a.base = (uint8_t *)d;
			for (uint32_t m = 1; m < g->nmem && !rc; m++)
				rc = gpunvme_gpu_buf_register(g->q[m], d, total, &g->buf[m]);
		}
	} else if (!rc) {
		g->c0 = ctrls[0];
		void *d = NULL;
		if (!(g->host_mem = gpunvme_dma_alloc(ctrls[0], total)))
			rc = gpunvme_set_error(-ENOMEM, "GPU expert cache: %zu bytes of DMA memory for %u slots", total, o->slots);
		else if (!(rc = gpunvme_gpu_buf_host(g->q[0], g->host_mem, total, &g->buf[0], &d)))
			g->a.base = (uint8_t *)d;
	}
	for (uint32_t m = 0; m < g->nmem && !rc; m++)
		mem[m].b = *gpunvme_gpu_buf_desc(g->buf[m]);
	/* the tables and the state */
	g->a.st = (struct mg_state *)dev_put(g, NULL, sizeof(struct mg_state), &rc);
	g->a.run_first = (const uint32_t *)dev_put(g, plan.first, ((size_t)keys + 1) * sizeof(*plan.first), &rc);
	g->a.runs = (const struct mg_run *)dev_put(g, plan.runs, plan.n_runs * sizeof(*plan.runs), &rc);
	g->a.pos = (const uint64_t *)dev_put(g, plan.pos, (size_t)keys * np * sizeof(*plan.pos), &rc);
	g->a.ebytes = (const uint64_t *)dev_put(g, plan.ebytes, (size_t)keys * sizeof(*plan.ebytes), &rc);
	g->a.mem = (const struct mg_member *)dev_put(g, mem, g->nmem * sizeof(*mem), &rc);
	g->a.slot_off = (uint64_t *)dev_put(g, NULL, (size_t)o->slots * np * sizeof(uint64_t), &rc);
	g->a.slot_used = (unsigned long long *)dev_put(g, NULL, o->slots * sizeof(unsigned long long), &rc);
	g->a.slot_mark = (unsigned long long *)dev_put(g, NULL, o->slots * sizeof(unsigned long long), &rc);
	/* empty: -1 everywhere (all bits set) */
	g->a.where = (int32_t *)dev_put(g, NULL, (size_t)keys * sizeof(int32_t), &rc);
	g->a.freq = (uint32_t *)dev_put(g, NULL, (size_t)keys * sizeof(uint32_t), &rc); /* zeroed */
	g->a.keys = keys;
	g->a.slot_key = (int64_t *)dev_put(g, NULL, o->slots * sizeof(int64_t), &rc);
	if (!rc) {
		cudaError_t e = cudaMemset(g->a.where, 0xff, (size_t)keys * sizeof(int32_t));
		if (e == cudaSuccess)
			e = cudaMemset(g->a.slot_key, 0xff, o->slots * sizeof(int64_t));
		if (e == cudaSuccess)
			e = cudaDeviceSynchronize();
		if (e != cudaSuccess)
			rc = cuda_fail(e, "GPU expert cache state");
	}
	g->a.slots = o->slots;
	g->a.n_experts = x->n_experts;
	g->a.n_proj = np;
	g->a.timeout_ns = o->timeout_ns;
	moe_gpu_plan_free(&plan);
	if (rc) {
		gpunvme_gpu_experts_close(g);
		return rc;
	}
	*out = g;
	return 0;
}

int gpunvme_gpu_experts_fetch(struct gpunvme_gpu_experts *g, uint32_t i, const uint32_t *d_ids, uint32_t k,
			      uint32_t *d_slots, void *stream)
{
	if (!g || (k && (!d_ids || !d_slots)))
		return gpunvme_set_error(-EINVAL, "GPU expert cache: bad arguments");
	if (i >= g->x->n_layers)
		return gpunvme_set_error(-EINVAL, "GPU expert cache: MoE layer %u of %u", i, g->x->n_layers);
	if (k > GPUNVME_GPU_EXPERTS_MAX_K)
		return gpunvme_set_error(-EINVAL, "GPU expert cache: %u experts in one fetch, at most %u", k,
					 GPUNVME_GPU_EXPERTS_MAX_K);
	if (!k)
		return 0;
	struct mg_args a = g->a;
	a.layer = i;
	a.ids = d_ids;
	a.out = d_slots;
	a.k = k;
	cudaStream_t s = (cudaStream_t)stream;
	const uint32_t threads = 128, blocks = (g->o.threads + threads - 1) / threads;
	mg_decide<<<1, 1, 0, s>>>(a);
	mg_read<<<blocks, threads, 0, s>>>(a);
	mg_publish<<<1, 1, 0, s>>>(a);
	cudaError_t e = cudaGetLastError();
	return e == cudaSuccess ? 0 : cuda_fail(e, "GPU expert cache: launching the fetch");
}

void gpunvme_gpu_experts_layout(const struct gpunvme_gpu_experts *g, uint8_t **base, const uint64_t **d_piece_off)
{
	if (base)
		*base = g ? g->a.base : NULL;
	if (d_piece_off)
		*d_piece_off = g ? g->a.slot_off : NULL;
}

uint64_t gpunvme_gpu_experts_slot_bytes(const struct gpunvme_gpu_experts *g)
{
	return g ? g->a.slot_bytes : 0;
}

int gpunvme_gpu_experts_sync(struct gpunvme_gpu_experts *g, void *stream, struct gpunvme_gpu_experts_stats *out)
{
	if (!g)
		return gpunvme_set_error(-EINVAL, "GPU expert cache: bad arguments");
	cudaStream_t s = (cudaStream_t)stream;
	/* every command's wait ends at its deadline: the stream is done by
	 * then, plus the kernels' own time */
	cudaError_t e = gpunvme_stream_wait(s, g->o.timeout_ns + GPUNVME_STREAM_WAIT_NS);
	if (e == cudaErrorNotReady)
		return gpunvme_set_error(-ETIMEDOUT, "GPU expert cache: the stream did not finish in time");
	struct mg_state st;
	if (e == cudaSuccess)
		e = cudaMemcpy(&st, g->a.st, sizeof(st), cudaMemcpyDeviceToHost);
	if (e == cudaSuccess && st.status) {
		int zero = 0;
		e = cudaMemcpy(&g->a.st->status, &zero, sizeof(zero), cudaMemcpyHostToDevice);
	}
	if (e != cudaSuccess)
		return cuda_fail(e, "GPU expert cache: reading its state");
	if (out) {
		out->cache.requests = st.requests;
		out->cache.hits = st.hits;
		out->cache.misses = st.misses;
		out->cache.evictions = st.evictions;
		out->cache.bytes_read = st.bytes_read;
		out->commands = st.commands;
		out->stall_ns = st.stall_ns;
		out->stalled = st.stalled;
	}
	if (!st.status)
		return 0;
	if (st.status == MG_ENOSPC)
		return gpunvme_set_error(-ENOSPC, "GPU expert cache: a fetch asked for more distinct experts than its %u "
						  "slots", g->o.slots);
	if (st.status == MG_EBADID)
		return gpunvme_set_error(-EINVAL, "GPU expert cache: a fetch named an expert past %u (the layer's count)",
					 g->x->n_experts);
	/* a timed-out command left its queue broken: recover every member's
	 * queues now (no kernel runs: the stream is done) */
	const char *why = gpunvme_gpu_status_str(st.status);
	char text[160];
	snprintf(text, sizeof(text), "%s", why);
	if (st.status == GPUNVME_DEV_ETIMEDOUT || st.status == GPUNVME_DEV_EIO) {
		for (uint32_t m = 0; m < g->nmem; m++) {
			int rrc = gpunvme_gpu_queues_recover(g->q[m], 0, NULL);
			if (rrc)
				return gpunvme_set_error(rrc, "GPU expert cache: a read failed (%s); recovering member %u's queues "
							      "failed: %s", text, m, gpunvme_last_error());
		}
	}
	return gpunvme_set_error(st.status == GPUNVME_DEV_ETIMEDOUT ? -ETIMEDOUT : -EIO,
				 "GPU expert cache: a read failed: %s (its experts were not made resident)", text);
}
