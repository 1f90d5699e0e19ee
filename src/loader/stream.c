/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Layer stream (include/gpunvme/stream.h): layers found by pattern, each a
 * list of runs placed in a slot; a window of K slots refilled in cyclic
 * layer order. GPU tiers order everything with events on two streams (the
 * reads' own and the consumer's); the CPU tier reads in acquire.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "gpunvme/loader.h"
#include "gpunvme/model.h"
#include "gpunvme/stream.h"
#include "gpunvme/volume.h"

#include "model_internal.h"
#include "loader/loader_plan.h"

/* Timing pairs kept until their events complete: enough for many layers in
 * flight; when full, the oldest is waited for (it is long done by then). */
#define TIMING_RING 128

struct srun {
	uint64_t off, len;   /* file bytes */
	uint64_t dst;        /* offset in the slot */
};

struct slayer {
	size_t n_tensors;
	size_t *tidx;                        /* model tensor indices, header order */
	const struct gpunvme_tensor **tensors;
	uint64_t *toff;                      /* each tensor's offset in the slot */
	size_t n_runs;
	struct srun *runs;
	uint64_t bytes, run_bytes, need;     /* tensor bytes, bytes read, slot bytes used */
};

struct slot {
	uint8_t *mem;        /* loader memory (device address on Tier 2) */
	int64_t layer;       /* layer it holds or is reading; -1 none */
	int held;            /* acquired, not released */
	int loaded;          /* CPU tier: bytes present */
	void *done;          /* GPU: recorded on the consumer's stream at release */
	void **ptr;          /* the layer's tensor pointers in this slot */
	struct gpunvme_stream_layer view;
};

struct tpair {
	void *a, *b;
	int stall;           /* 1: consumer wait; 0: a layer read */
	uint32_t layer;
};

/* Where the file's bytes are, during open: one namespace, or an md
 * array's members. */
struct source {
	struct gpunvme_ctrl *c;
	uint32_t nsid;
	struct gpunvme_ctrl *const *ctrls;   /* md array: per member */
	const uint32_t *nsids;
	const struct gpunvme_md *md;         /* NULL: one namespace */
};

struct gpunvme_layer_stream {
	const struct gpunvme_model *m;
	struct gpunvme_layer_loader *l;
	const struct gpunvme_loader_gpu_ops *gpu;  /* NULL: CPU tier */
	enum gpunvme_tier tier;
	int fell_back;       /* always 0: the tier policy decides once (tier.h) */
	int sync_reads;
	uint32_t nl, k;
	struct slayer *layers;
	size_t max_tensors;
	struct slot *slots;
	uint64_t slot_bytes;
	int64_t tail;        /* last layer given a slot */
	struct gpunvme_model_buffers *res;
	uint64_t timeout_ns;
	void *io;            /* the reads' stream */
	/* timing: a pool of event pairs, a ring of those in flight */
	struct tpair *pool;
	size_t pool_n, ring_head, ring_len;
	struct gpunvme_stream_stats st;
	int err;             /* first read failure seen, sticky */
	char why[256];       /* its message */
	/* GPU tiers: per layer, recorded on the reads' stream after the
	 * layer's last queued reads and their guard: what acquire makes the
	 * consumer wait for (the slot holding layer i got its latest reads)
	 * and check(i) waits for; one never recorded is complete */
	void **ready;
	/* GPUNVME_STREAM_TRACE=<file>: every timed interval (reads, consumer
	 * waits) and every acquire/release call, in ms since open */
	FILE *trace;
	void *t0_ev;         /* recorded on the idle reads' stream at open */
	uint64_t t0_ns;      /* host time then */
};

void gpunvme_stream_opts_init(struct gpunvme_stream_opts *o)
{
	memset(o, 0, sizeof(*o));
	gpunvme_loader_opts_init(&o->loader);
	o->window = 2;
}

/* ---- grouping ----------------------------------------------------------------------- */

/* Layer number of `name` under pattern prefix/suffix, or -1. The digits are
 * taken greedily, so "x.1" never matches layer 1 of "x.10.". */
static int64_t layer_of(const char *name, const char *pre, size_t npre, const char *suf)
{
	if (strncmp(name, pre, npre))
		return -1;
	const char *p = name + npre;
	if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9'))
		return -1; /* no digits, or a leading zero */
	int64_t v = 0;
	while (*p >= '0' && *p <= '9') {
		v = v * 10 + (*p++ - '0');
		if (v >= (int64_t)GPUNVME_STREAM_MAX_LAYERS * 16)
			return -1;
	}
	return strncmp(p, suf, strlen(suf)) ? -1 : v;
}

struct ord {
	uint64_t off;
	size_t k;
};

static int ord_cmp(const void *a, const void *b)
{
	const struct ord *x = a, *y = b;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* Runs of one layer in file order, placed in the slot: each run at a
 * 4 KiB boundary plus its file offset modulo 4 KiB, so the blocks between
 * its edges land by DMA (loader placement, loader.h). */
static int layer_place(const struct gpunvme_model *m, struct slayer *L)
{
	struct ord *o = malloc((L->n_tensors ? L->n_tensors : 1) * sizeof(*o));
	L->runs = calloc(L->n_tensors ? L->n_tensors : 1, sizeof(*L->runs));
	L->toff = calloc(L->n_tensors ? L->n_tensors : 1, sizeof(*L->toff));
	if (!o || !L->runs || !L->toff) {
		free(o);
		return gpunvme_set_error(-ENOMEM, "out of memory");
	}
	for (size_t k = 0; k < L->n_tensors; k++)
		o[k] = (struct ord){ m->tensors[L->tidx[k]].offset, k };
	qsort(o, L->n_tensors, sizeof(*o), ord_cmp);
	for (size_t j = 0; j < L->n_tensors; j++) {
		const struct gpunvme_tensor *t = &m->tensors[L->tidx[o[j].k]];
		if (!t->bytes)
			continue;
		struct srun *r = L->n_runs ? &L->runs[L->n_runs - 1] : NULL;
		if (r && t->offset <= r->off + r->len + GPUNVME_STREAM_RUN_GAP) {
			if (t->offset + t->bytes > r->off + r->len)
				r->len = t->offset + t->bytes - r->off;
		} else {
			L->runs[L->n_runs++] = (struct srun){ t->offset, t->bytes, 0 };
		}
	}
	uint64_t cur = 0;
	for (size_t r = 0; r < L->n_runs; r++) {
		/* on a 256-byte boundary, as torch places tensors (model_internal.h) */
		L->runs[r].dst = model_run_at(cur, L->runs[r].off, 0);
		cur = L->runs[r].dst + L->runs[r].len;
		L->run_bytes += L->runs[r].len;
	}
	L->need = cur;
	/* each tensor's place: inside the run that holds it (runs are sorted) */
	size_t r = 0;
	for (size_t j = 0; j < L->n_tensors; j++) {
		const struct gpunvme_tensor *t = &m->tensors[L->tidx[o[j].k]];
		while (r + 1 < L->n_runs && L->runs[r + 1].off <= t->offset)
			r++;
		uint64_t at = 0;
		if (L->n_runs && t->offset >= L->runs[r].off)
			at = L->runs[r].dst + (t->offset - L->runs[r].off);
		else if (L->n_runs)
			at = L->runs[r].dst;
		L->toff[o[j].k] = at;
	}
	free(o);
	return 0;
}

static void layers_free(struct gpunvme_layer_stream *s)
{
	for (uint32_t i = 0; s->layers && i < s->nl; i++) {
		free(s->layers[i].tidx);
		free(s->layers[i].tensors);
		free(s->layers[i].toff);
		free(s->layers[i].runs);
	}
	free(s->layers);
	s->layers = NULL;
}

static int group(struct gpunvme_layer_stream *s, const struct gpunvme_stream_opts *o, size_t **res_idx,
		 size_t *n_res)
{
	const struct gpunvme_model *m = s->m;
	const char *pat = o->layers;
	if (!pat || !*pat)
		return gpunvme_set_error(-EINVAL, "layer stream: no layer pattern (give one with {i} for the layer "
						  "number, e.g. \"model.layers.{i}.\")");
	const char *at = strstr(pat, "{i}");
	if (!at)
		return gpunvme_set_error(-EINVAL, "layer pattern \"%s\" has no {i} (the layer number), e.g. "
						  "\"model.layers.{i}.\" or \"blk.{i}.\"", pat);
	if (strstr(at + 3, "{i}"))
		return gpunvme_set_error(-EINVAL, "layer pattern \"%s\" has {i} twice: give it once", pat);
	if (o->window < 1)
		return gpunvme_set_error(-EINVAL, "window %u: the stream needs at least 1 slot (2 to read ahead)",
					 o->window);
	size_t npre = (size_t)(at - pat);
	const char *suf = at + 3;
	int64_t *lay = malloc((m->n_tensors ? m->n_tensors : 1) * sizeof(*lay));
	*res_idx = malloc((m->n_tensors ? m->n_tensors : 1) * sizeof(**res_idx));
	if (!lay || !*res_idx) {
		free(lay);
		return gpunvme_set_error(-ENOMEM, "out of memory");
	}
	int64_t maxl = -1;
	int rc = 0;
	for (size_t i = 0; i < m->n_tensors && !rc; i++) {
		lay[i] = layer_of(m->tensors[i].name, pat, npre, suf);
		if (lay[i] > maxl)
			maxl = lay[i];
		int resident = o->resident ? gpunvme_tensor_match(o->resident, m->tensors[i].name) : lay[i] < 0;
		if (resident && lay[i] >= 0)
			rc = gpunvme_set_error(-EINVAL, "tensor \"%s\" is in layer %lld and matches the resident patterns "
							"\"%s\": a tensor is either streamed or resident",
					       m->tensors[i].name, (long long)lay[i], o->resident);
		else if (resident)
			(*res_idx)[(*n_res)++] = i;
	}
	if (!rc && maxl < 0)
		rc = gpunvme_set_error(-ENOENT, "no tensor matches the layer pattern \"%s\" (%zu tensors, e.g. \"%s\")",
				       pat, m->n_tensors, m->n_tensors ? m->tensors[0].name : "none");
	if (!rc && maxl >= (int64_t)GPUNVME_STREAM_MAX_LAYERS)
		rc = gpunvme_set_error(-E2BIG, "layer %lld: more than %u layers", (long long)maxl,
				       GPUNVME_STREAM_MAX_LAYERS);
	if (rc) {
		free(lay);
		return rc;
	}
	s->nl = (uint32_t)maxl + 1;
	s->layers = calloc(s->nl, sizeof(*s->layers));
	if (!s->layers) {
		free(lay);
		return gpunvme_set_error(-ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < m->n_tensors; i++)
		if (lay[i] >= 0)
			s->layers[lay[i]].n_tensors++;
	for (uint32_t j = 0; j < s->nl && !rc; j++) {
		struct slayer *L = &s->layers[j];
		if (!L->n_tensors) {
			rc = gpunvme_set_error(-EINVAL, "layer pattern \"%s\": layers 0..%u, but no tensor of layer %u "
							"(layers must be numbered without a gap)",
					       pat, s->nl - 1, j);
			break;
		}
		if (L->n_tensors > s->max_tensors)
			s->max_tensors = L->n_tensors;
		L->tidx = malloc(L->n_tensors * sizeof(*L->tidx));
		L->tensors = malloc(L->n_tensors * sizeof(*L->tensors));
		if (!L->tidx || !L->tensors)
			rc = gpunvme_set_error(-ENOMEM, "out of memory");
		L->n_tensors = 0;
	}
	for (size_t i = 0; i < m->n_tensors && !rc; i++) {
		if (lay[i] < 0)
			continue;
		struct slayer *L = &s->layers[lay[i]];
		L->tensors[L->n_tensors] = &m->tensors[i];
		L->tidx[L->n_tensors++] = i;
		L->bytes += m->tensors[i].bytes;
	}
	free(lay);
	for (uint32_t j = 0; j < s->nl && !rc; j++) {
		rc = layer_place(m, &s->layers[j]);
		if (s->layers[j].need > s->slot_bytes)
			s->slot_bytes = s->layers[j].need;
	}
	return rc;
}

/* ---- timing (GPU tiers) ------------------------------------------------------------------- */

static void timing_take(struct gpunvme_layer_stream *s, const struct tpair *p, float ms)
{
	if (p->stall)
		s->st.stall_ms += ms;
	else
		s->st.io_ms += ms;
	float a = 0, b = 0;
	if (s->trace && !s->gpu->event_elapsed(s->t0_ev, p->a, &a) && !s->gpu->event_elapsed(s->t0_ev, p->b, &b))
		fprintf(s->trace, "gpu %s %u %.3f %.3f\n", p->stall ? "wait" : "read", p->layer, a, b);
}

static void trace_host(struct gpunvme_layer_stream *s, const char *what, uint32_t layer, uint64_t t0)
{
	if (s->trace)
		fprintf(s->trace, "host %s %u %.3f %.3f\n", what, layer, (double)(t0 - s->t0_ns) / 1e6,
			(double)(gpunvme_now_ns() - s->t0_ns) / 1e6);
}

/* Collect completed pairs from the front; wait: also the ones pending
 * (bounded), for stats. */
static int timing_harvest(struct gpunvme_layer_stream *s, int wait)
{
	while (s->ring_len) {
		struct tpair *p = &s->pool[s->ring_head];
		float ms = 0;
		int rc = s->gpu->event_elapsed(p->a, p->b, &ms);
		if (rc == -EAGAIN && wait) {
			if ((rc = s->gpu->event_wait(p->b, s->timeout_ns)))
				return rc;
			rc = s->gpu->event_elapsed(p->a, p->b, &ms);
		}
		if (rc == -EAGAIN)
			return 0;
		if (rc)
			return rc;
		timing_take(s, p, ms);
		s->ring_head = (s->ring_head + 1) % s->pool_n;
		s->ring_len--;
	}
	return 0;
}

/* The next free pair; the oldest in flight is waited for when all are. */
static int timing_next(struct gpunvme_layer_stream *s, int stall, uint32_t layer, struct tpair **out)
{
	int rc = timing_harvest(s, 0);
	if (!rc && s->ring_len == s->pool_n) {
		struct tpair *p = &s->pool[s->ring_head];
		float ms = 0;
		if (!(rc = s->gpu->event_wait(p->b, s->timeout_ns)) && !(rc = s->gpu->event_elapsed(p->a, p->b, &ms))) {
			timing_take(s, p, ms);
			s->ring_head = (s->ring_head + 1) % s->pool_n;
			s->ring_len--;
		}
	}
	if (rc)
		return rc;
	struct tpair *p = &s->pool[(s->ring_head + s->ring_len) % s->pool_n];
	p->stall = stall;
	p->layer = layer;
	*out = p;
	return 0;
}

static void timing_push(struct gpunvme_layer_stream *s)
{
	s->ring_len++;
}

/* ---- reads ------------------------------------------------------------------------------------ */

/* A read failure is final for the stream: its queues may be broken and
 * the layers queued after it are poisoned (gpunvme_load_guard_async); every
 * later call reports the first failure again. */
static int check_reads(struct gpunvme_layer_stream *s)
{
	if (s->err)
		return gpunvme_set_error(s->err, "%s", s->why);
	uint16_t status = 0;
	int rc = gpunvme_layer_loader_check(s->l, &status);
	if (rc) {
		snprintf(s->why, sizeof(s->why), "a layer read failed (the stream is unusable: close it): %s",
			 gpunvme_last_error());
		s->err = rc;
		return gpunvme_set_error(rc, "%s", s->why);
	}
	return 0;
}

/* check_reads when a guard has marked a failure; no CUDA call otherwise */
static int peek_reads(struct gpunvme_layer_stream *s)
{
	if (s->err || gpunvme_layer_loader_failed(s->l))
		return check_reads(s);
	return 0;
}

/* A layer's runs into slot sl in one call: queued on the stream's I/O
 * stream (async), or read and waited for. */
static int load_runs(struct gpunvme_layer_stream *s, const struct slayer *L, const struct slot *sl, int async,
		     uint16_t *status)
{
	struct gpunvme_load_span *sp = malloc((L->n_runs ? L->n_runs : 1) * sizeof(*sp));
	if (!sp)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	for (size_t r = 0; r < L->n_runs; r++)
		sp[r] = (struct gpunvme_load_span){ L->runs[r].off, L->runs[r].len, sl->mem + L->runs[r].dst };
	int rc = 0;
	if (L->n_runs)
		rc = async ? gpunvme_load_layers_async(s->l, sp, L->n_runs, s->io, NULL)
			   : gpunvme_load_layers(s->l, sp, L->n_runs, status);
	free(sp);
	return rc;
}

/* Queue (GPU) the reads of layer `layer` into slot k; the reads' stream
 * already waits for the slot's last user (release). */
static int slot_fill(struct gpunvme_layer_stream *s, struct slot *sl, uint32_t layer)
{
	struct slayer *L = &s->layers[layer];
	sl->layer = layer;
	sl->loaded = 0;
	for (size_t t = 0; t < L->n_tensors; t++)
		sl->ptr[t] = sl->mem + L->toff[t];
	sl->view = (struct gpunvme_stream_layer){ layer, L->n_tensors, L->tensors, sl->ptr, L->bytes };
	if (!s->gpu)
		return 0; /* the CPU tier reads in acquire */
	struct tpair *tp = NULL;
	int rc = timing_next(s, 0, layer, &tp);
	if (!rc)
		rc = s->gpu->event_record(tp->a, s->io);
	/* the layer's runs in one call: their reads go to the controller
	 * together, not each after the last read of the one before */
	if (!rc)
		rc = load_runs(s, L, sl, 1, NULL);
	/* before the consumer can see the slot: poisoned if any read failed */
	if (!rc)
		rc = gpunvme_load_guard_async(s->l, sl->mem, L->need, s->io);
	if (!rc)
		rc = s->gpu->event_record(tp->b, s->io);
	if (!rc)
		rc = s->gpu->event_record(s->ready[layer], s->io);
	if (!rc) {
		timing_push(s);
		s->st.layer_loads++;
		s->st.bytes_read += L->run_bytes;
	}
	return rc;
}

static int cpu_read(struct gpunvme_layer_stream *s, struct slot *sl)
{
	const struct slayer *L = &s->layers[sl->layer];
	uint64_t t0 = gpunvme_now_ns();
	uint16_t status = 0;
	int rc = load_runs(s, L, sl, 0, &status);
	if (rc)
		return rc;
	double ms = (double)(gpunvme_now_ns() - t0) / 1e6;
	s->st.io_ms += ms;
	s->st.stall_ms += ms; /* the consumer waited for all of it */
	s->st.layer_loads++;
	s->st.bytes_read += L->run_bytes;
	sl->loaded = 1;
	return 0;
}

/* ---- open / close ------------------------------------------------------------------------------ */

static void teardown(struct gpunvme_layer_stream *s)
{
	if (s->gpu && s->io)
		s->gpu->stream_free(s->io); /* waits for queued reads first */
	for (uint32_t i = 0; s->ready && i < s->nl; i++)
		if (s->ready[i])
			s->gpu->event_free(s->ready[i]);
	free(s->ready);
	s->ready = NULL;
	if (s->t0_ev)
		s->gpu->event_free(s->t0_ev);
	s->t0_ev = NULL;
	for (uint32_t k = 0; s->slots && k < s->k; k++) {
		struct slot *sl = &s->slots[k];
		if (s->gpu) {
			if (sl->done)
				s->gpu->event_free(sl->done);
		}
		free(sl->ptr);
	}
	free(s->slots);
	s->slots = NULL;
	for (size_t i = 0; s->pool && i < s->pool_n; i++) {
		if (s->pool[i].a)
			s->gpu->event_free(s->pool[i].a);
		if (s->pool[i].b)
			s->gpu->event_free(s->pool[i].b);
	}
	free(s->pool);
	s->pool = NULL;
	s->io = NULL;
	if (s->res)
		gpunvme_model_buffers_free(s->l, s->res);
	s->res = NULL;
	gpunvme_layer_loader_destroy(s->l); /* frees the slots' memory too */
	s->l = NULL;
}

/* Loader, slots, resident tensors, streams and events on one tier. */
static int setup(struct gpunvme_layer_stream *s, const struct source *src, const struct gpunvme_extent *ext, size_t n,
		 uint64_t file_size, const struct gpunvme_loader_opts *lo, const size_t *res_idx, size_t n_res)
{
	int rc = src->md ? gpunvme_layer_loader_init_md(src->ctrls, src->nsids, src->md, ext, n, file_size, lo, &s->l)
			 : gpunvme_layer_loader_init(src->c, src->nsid, ext, n, file_size, lo, &s->l);
	if (rc)
		return rc;
	/* the loader applied the tier policy (an AUTO request became a tier) */
	s->tier = gpunvme_layer_loader_tier(s->l);
	s->gpu = s->tier == GPUNVME_TIER_CPU ? NULL : lo->gpu;
	s->timeout_ns = (uint64_t)(lo->timeout_ms ? lo->timeout_ms : 30000) * 1000000ull;
	s->slots = calloc(s->k, sizeof(*s->slots));
	if (!s->slots)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	for (uint32_t k = 0; k < s->k; k++) {
		struct slot *sl = &s->slots[k];
		sl->layer = -1;
		/* file offset 0: the slot starts on a 4 KiB boundary (runs are
		 * placed inside it for their own offsets) */
		sl->mem = gpunvme_layer_loader_alloc(s->l, 0, s->slot_bytes ? s->slot_bytes : 1);
		sl->ptr = calloc(s->max_tensors ? s->max_tensors : 1, sizeof(*sl->ptr));
		if (!sl->mem)
			return gpunvme_set_error(-ENOMEM,
						 "cannot allocate slot %u of %u (%llu bytes each, %s): %s; a smaller window "
						 "needs less (2 slots still read one layer ahead)",
						 k, s->k, (unsigned long long)s->slot_bytes,
						 s->tier == GPUNVME_TIER_2 ? "GPU memory" : "host DMA memory",
						 gpunvme_last_error());
		if (!sl->ptr)
			return gpunvme_set_error(-ENOMEM, "out of memory");
		s->st.memory_bytes += s->slot_bytes + 4096;
		if (s->gpu && (rc = s->gpu->event_new(&sl->done, 0)))
			return rc;
	}
	if (n_res) {
		uint16_t status = 0;
		if ((rc = gpunvme_model_buffers_alloc_sel(s->l, s->m, res_idx, n_res, &s->res)))
			return rc;
		if ((rc = gpunvme_model_load(s->l, s->res, NULL, NULL, &status)))
			return rc;
		s->st.resident_bytes = s->res->bytes;
		s->st.memory_bytes += s->res->run_bytes + 4096 * s->res->n_runs;
	}
	if (s->gpu) {
		if ((rc = s->gpu->stream_new(&s->io)))
			return rc;
		if (!(s->ready = calloc(s->nl, sizeof(*s->ready))))
			return gpunvme_set_error(-ENOMEM, "out of memory");
		for (uint32_t i = 0; i < s->nl; i++)
			if ((rc = s->gpu->event_new(&s->ready[i], 0)))
				return rc;
		if (s->trace) {
			if ((rc = s->gpu->event_new(&s->t0_ev, 1)) || (rc = s->gpu->event_record(s->t0_ev, s->io)))
				return rc;
			s->t0_ns = gpunvme_now_ns();
		}
		s->pool_n = TIMING_RING;
		s->pool = calloc(s->pool_n, sizeof(*s->pool));
		if (!s->pool)
			return gpunvme_set_error(-ENOMEM, "out of memory");
		for (size_t i = 0; i < s->pool_n; i++)
			if ((rc = s->gpu->event_new(&s->pool[i].a, 1)) || (rc = s->gpu->event_new(&s->pool[i].b, 1)))
				return rc;
	}
	/* the first window: layers 0..K-1 */
	for (uint32_t k = 0; k < s->k && !rc; k++)
		rc = slot_fill(s, &s->slots[k], k);
	s->tail = (int64_t)s->k - 1;
	return rc;
}

static int stream_open(const struct source *src, const struct gpunvme_model *m, const struct gpunvme_extent *ext,
		       size_t n, uint64_t file_size, const struct gpunvme_stream_opts *opts,
		       struct gpunvme_layer_stream **out)
{
	if (!m || !opts || !out || (n && !ext))
		return gpunvme_set_error(-EINVAL, "layer stream: bad arguments");
	*out = NULL;
	struct gpunvme_layer_stream *s = calloc(1, sizeof(*s));
	if (!s)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	s->m = m;
	s->sync_reads = opts->sync_reads;
	const char *tp = getenv("GPUNVME_STREAM_TRACE");
	if (tp && *tp && !(s->trace = fopen(tp, "a")))
		fprintf(stderr, "gpunvme: GPUNVME_STREAM_TRACE=%s: cannot open it, no trace\n", tp);
	s->t0_ns = gpunvme_now_ns();
	size_t *res_idx = NULL, n_res = 0;
	int rc = group(s, opts, &res_idx, &n_res);
	if (!rc) {
		s->k = opts->window < s->nl ? opts->window : s->nl;
		struct gpunvme_loader_opts lo = opts->loader;
		rc = setup(s, src, ext, n, file_size, &lo, res_idx, n_res);
	}
	free(res_idx);
	if (rc) {
		gpunvme_layer_stream_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

int gpunvme_layer_stream_open(struct gpunvme_ctrl *c, uint32_t nsid, const struct gpunvme_model *m,
			      const struct gpunvme_extent *ext, size_t n, uint64_t file_size,
			      const struct gpunvme_stream_opts *opts, struct gpunvme_layer_stream **out)
{
	if (!c)
		return gpunvme_set_error(-EINVAL, "layer stream: bad arguments (no controller)");
	const struct source src = { .c = c, .nsid = nsid };
	return stream_open(&src, m, ext, n, file_size, opts, out);
}

int gpunvme_layer_stream_open_md(struct gpunvme_ctrl *const *ctrls, const uint32_t *nsids,
				 const struct gpunvme_md *md, const struct gpunvme_model *m,
				 const struct gpunvme_extent *ext, size_t n, uint64_t file_size,
				 const struct gpunvme_stream_opts *opts, struct gpunvme_layer_stream **out)
{
	if (!ctrls || !nsids || !md)
		return gpunvme_set_error(-EINVAL, "layer stream: bad arguments (no md array)");
	const struct source src = { .ctrls = ctrls, .nsids = nsids, .md = md };
	return stream_open(&src, m, ext, n, file_size, opts, out);
}

void gpunvme_layer_stream_close(struct gpunvme_layer_stream *s)
{
	if (!s)
		return;
	teardown(s);
	layers_free(s);
	if (s->trace)
		fclose(s->trace);
	free(s);
}

uint32_t gpunvme_layer_stream_layers(const struct gpunvme_layer_stream *s)
{
	return s ? s->nl : 0;
}

const struct gpunvme_model_buffers *gpunvme_layer_stream_resident(const struct gpunvme_layer_stream *s)
{
	return s ? s->res : NULL;
}

/* ---- acquire / release ---------------------------------------------------------------------- */

static struct slot *slot_of(struct gpunvme_layer_stream *s, uint32_t i)
{
	for (uint32_t k = 0; k < s->k; k++)
		if (s->slots[k].layer == (int64_t)i)
			return &s->slots[k];
	return NULL;
}

/* Layer i is not in the window: the window starts again at i. No slot is
 * held, and every slot's next reads queue behind its last release on the
 * reads' stream (stream order), so nothing waits here. */
static int restart(struct gpunvme_layer_stream *s, uint32_t i)
{
	for (uint32_t k = 0; k < s->k; k++)
		if (s->slots[k].held)
			return gpunvme_set_error(-EBUSY, "layer %u is outside the read window and layer %lld is still held: "
							 "release it first (layers go in order 0..%u)",
						 i, (long long)s->slots[k].layer, s->nl - 1);
	s->st.restarts++;
	int rc = 0;
	for (uint32_t k = 0; k < s->k && !rc; k++)
		rc = slot_fill(s, &s->slots[k], (i + k) % s->nl);
	s->tail = (int64_t)((i + s->k - 1) % s->nl);
	return rc;
}

static int acquire(struct gpunvme_layer_stream *s, uint32_t i, void *stream, const struct gpunvme_stream_layer **out)
{
	if (!s || !out)
		return gpunvme_set_error(-EINVAL, "stream acquire: bad arguments");
	*out = NULL;
	if (i >= s->nl)
		return gpunvme_set_error(-ERANGE, "layer %u: the model has layers 0..%u", i, s->nl - 1);
	/* GPU tiers: a failure the guards have marked (no CUDA call); once a
	 * pass, at layer 0, also one not yet marked (a short host wait) */
	int rc;
	if (s->gpu && (rc = i == 0 ? check_reads(s) : peek_reads(s)))
		return rc;
	struct slot *sl = slot_of(s, i);
	if (sl && sl->held)
		return gpunvme_set_error(-EBUSY, "layer %u is already held: release it before acquiring it again", i);
	if (!sl) {
		if ((rc = restart(s, i)))
			return rc;
		sl = slot_of(s, i);
	}
	s->st.acquires++;
	if (!s->gpu) {
		if (!sl->loaded && (rc = cpu_read(s, sl)))
			return rc;
	} else {
		/* the consumer's stream waits for the reads; the time it waits is
		 * the stall (two events around the wait, on its stream) */
		struct tpair *tp = NULL;
		/* sync_reads: the layer's reads (and guard) are done: a failure
		 * is reported now, before the consumer can use the slot */
		if (s->sync_reads && ((rc = s->gpu->event_wait(s->ready[i], s->timeout_ns)) || (rc = peek_reads(s))))
			return rc;
		if ((rc = timing_next(s, 1, i, &tp)) || (rc = s->gpu->event_record(tp->a, stream)) ||
		    (rc = s->gpu->stream_wait(stream, s->ready[i])) || (rc = s->gpu->event_record(tp->b, stream)))
			return rc;
		timing_push(s);
	}
	sl->held = 1;
	*out = &sl->view;
	return 0;
}

int gpunvme_layer_stream_acquire(struct gpunvme_layer_stream *s, uint32_t i, void *stream,
				 const struct gpunvme_stream_layer **out)
{
	uint64_t t0 = gpunvme_now_ns();
	int rc = acquire(s, i, stream, out);
	if (s)
		trace_host(s, "acquire", i, t0);
	return rc;
}

static int release(struct gpunvme_layer_stream *s, uint32_t i, void *stream, void *event)
{
	struct slot *sl = i < s->nl ? slot_of(s, i) : NULL;
	if (!sl || !sl->held)
		return gpunvme_set_error(-EINVAL, "layer %u is not held (acquire it first)", i);
	sl->held = 0;
	/* after a failure no more reads: the slot is given back, the failure
	 * reported (marked ones only: no wait here) */
	int rc = s->gpu ? peek_reads(s) : 0;
	if (rc)
		return rc;
	uint32_t next = (uint32_t)((s->tail + 1) % s->nl);
	if (slot_of(s, next)) /* the whole model fits the window: it stays */
		return 0;
	if (s->gpu) {
		/* the slot is overwritten only after the consumer's work on it */
		void *ev = event;
		if (!ev && !(rc = s->gpu->event_record(sl->done, stream)))
			ev = sl->done;
		if (!rc)
			rc = s->gpu->stream_wait(s->io, ev);
	}
	if (!rc)
		rc = slot_fill(s, sl, next);
	if (!rc)
		s->tail = next;
	return rc;
}

int gpunvme_layer_stream_release(struct gpunvme_layer_stream *s, uint32_t i, void *stream, void *event)
{
	if (!s)
		return gpunvme_set_error(-EINVAL, "stream release: no stream");
	uint64_t t0 = gpunvme_now_ns();
	int rc = release(s, i, stream, event);
	trace_host(s, "release", i, t0);
	return rc;
}

int gpunvme_layer_stream_check(struct gpunvme_layer_stream *s, uint32_t i)
{
	if (!s)
		return gpunvme_set_error(-EINVAL, "stream check: no stream");
	if (i >= s->nl)
		return gpunvme_set_error(-ERANGE, "layer %u: the model has layers 0..%u", i, s->nl - 1);
	if (!s->gpu)
		return 0; /* the CPU tier reported in acquire */
	int rc = s->gpu->event_wait(s->ready[i], s->timeout_ns);
	return rc ? rc : peek_reads(s);
}

int gpunvme_layer_stream_sync(struct gpunvme_layer_stream *s)
{
	if (!s)
		return gpunvme_set_error(-EINVAL, "stream sync: no stream");
	if (!s->gpu)
		return 0;
	int rc = 0;
	for (uint32_t k = 0; k < s->k && !rc; k++)
		if (s->slots[k].layer >= 0)
			rc = s->gpu->event_wait(s->ready[s->slots[k].layer], s->timeout_ns);
	return rc ? rc : check_reads(s);
}

int gpunvme_layer_stream_stats(struct gpunvme_layer_stream *s, struct gpunvme_stream_stats *st)
{
	if (!s || !st)
		return gpunvme_set_error(-EINVAL, "stream stats: bad arguments");
	int rc = s->gpu ? timing_harvest(s, 1) : 0;
	if (!rc && s->gpu)
		rc = check_reads(s);
	s->st.tier = s->tier;
	s->st.fell_back = s->fell_back;
	s->st.layers = s->nl;
	s->st.window = s->k;
	s->st.slot_bytes = s->slot_bytes;
	s->st.bounce_bytes = LOADER_BOUNCE_BYTES;
	double ov = s->st.io_ms > 0 ? 1.0 - s->st.stall_ms / s->st.io_ms : 0.0;
	s->st.overlap = ov < 0 ? 0 : ov > 1 ? 1 : ov;
	struct gpunvme_loader_stats ls;
	gpunvme_layer_loader_stats(s->l, &ls);
	s->st.retries = ls.retries;
	s->st.resets = ls.resets;
	*st = s->st;
	return rc;
}

int gpunvme_layer_stream_open_volume(struct gpunvme_volume *v, const struct gpunvme_model *m,
				     const struct gpunvme_extent *ext, size_t n, uint64_t file_size,
				     const struct gpunvme_stream_opts *opts, struct gpunvme_layer_stream **out)
{
	if (!v)
		return gpunvme_set_error(-EINVAL, "layer stream: no volume");
	struct gpunvme_md_volume *md = gpunvme_volume_md(v);
	gpunvme_volume_make_room(v);
	if (md)
		return gpunvme_layer_stream_open_md(md->c, md->nsid, md->md, m, ext, n, file_size, opts, out);
	struct gpunvme_ctrl *c = gpunvme_volume_ctrl(v, 0);
	if (!c)
		return gpunvme_set_error(-EOPNOTSUPP, "an image file read without a controller cannot be streamed by "
						      "the driver: open it as emu:PATH");
	return gpunvme_layer_stream_open(c, gpunvme_volume_nsid(v), m, ext, n, file_size, opts, out);
}
