/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The expert index (include/gpunvme/moe.h): which bytes of a model file are
 * expert e of layer l, from tensor names and shapes alone.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "gpunvme/moe.h"

/* One tensor that belongs to an expert (per-expert layout) or to all the
 * experts of a layer (stacked layout). */
struct hit {
	uint32_t layer;
	int64_t expert;    /* -1: stacked */
	const char *proj;  /* points into the tensor's name */
	uint32_t tensor;
	uint64_t n_stack;  /* stacked: the expert dimension */
};

/* A decimal number of at most 9 digits at s, followed by '.'; its value,
 * and *end past the '.'. -1 when s holds none. */
static int64_t number_dot(const char *s, const char **end)
{
	int64_t v = 0;
	int n = 0;
	while (s[n] >= '0' && s[n] <= '9') {
		if (n == 9)
			return -1;
		v = v * 10 + (s[n] - '0');
		n++;
	}
	if (!n || s[n] != '.')
		return -1;
	*end = s + n + 1;
	return v;
}

/* The first "<seg>N." in name where seg starts a dotted segment (at the
 * start or after '.'); its number and *rest past it. */
static int64_t find_seg_number(const char *name, const char *seg, const char **rest)
{
	size_t sl = strlen(seg);
	for (const char *p = name; (p = strstr(p, seg)); p++) {
		if (p != name && p[-1] != '.')
			continue;
		int64_t v = number_dot(p + sl, rest);
		if (v >= 0)
			return v;
	}
	return -1;
}

/* Shared experts and routers live beside the routed experts and are not
 * among them: DeepSeek's "mlp.shared_experts.", Qwen2-MoE's
 * "mlp.shared_expert.", llama.cpp's "ffn_*_shexp", "ffn_gate_inp". */
static bool not_routed(const char *name)
{
	return strstr(name, "shared_expert") || strstr(name, "_shexp") || strstr(name, "ffn_gate_inp");
}

/* Classify tensor t: 1 with *h filled when it holds experts, 0 when not,
 * -EINVAL for an expert tensor the index cannot serve. */
static int classify(const struct gpunvme_model *m, uint32_t t, struct hit *h)
{
	const struct gpunvme_tensor *x = &m->tensors[t];
	const char *name = x->name, *rest = NULL;
	if (not_routed(name))
		return 0;
	int64_t layer = find_seg_number(name, "layers.", &rest);
	if (layer < 0)
		layer = find_seg_number(name, "blk.", &rest);
	if (layer < 0)
		return 0;
	const char *after_layer = rest;
	*h = (struct hit){ .layer = (uint32_t)layer, .expert = -1, .tensor = t };
	int64_t e = find_seg_number(after_layer, "experts.", &rest);
	if (e >= 0) {
		if (!*rest)
			return gpunvme_set_error(-EINVAL, "tensor %s: an expert number with no projection after it", name);
		h->expert = e;
		h->proj = rest;
		return 1;
	}
	/* stacked: safetensors "...experts.<proj>" (dimension 0 is the expert),
	 * GGUF "blk.N.ffn_<proj>_exps.weight" (the last dimension is) */
	const char *s = NULL;
	for (const char *p = after_layer; (p = strstr(p, "experts.")); p++)
		if (p == after_layer || p[-1] == '.') {
			s = p + strlen("experts.");
			break;
		}
	bool gguf = m->format == GPUNVME_MODEL_GGUF;
	if (!s && gguf) {
		const char *p = strstr(after_layer, "_exps");
		if (p && (p[5] == '.' || !p[5])) {
			while (p > after_layer && p[-1] != '.')
				p--;
			s = p;
		}
	}
	if (!s || !*s)
		return 0;
	if (x->ndim < 2)
		return gpunvme_set_error(-EINVAL, "tensor %s: stacked experts need an expert dimension and a weight's, it has %u "
					 "dimension%s", name, x->ndim, x->ndim == 1 ? "" : "s");
	h->proj = s;
	h->n_stack = gguf ? x->shape[x->ndim - 1] : x->shape[0];
	if (h->n_stack == 0 || h->n_stack > GPUNVME_MOE_MAX_EXPERTS)
		return gpunvme_set_error(-EINVAL, "tensor %s: %llu experts in its expert dimension (%s); 1..%u are served", name,
					 (unsigned long long)h->n_stack, gguf ? "the last, GGUF order" : "the first",
					 GPUNVME_MOE_MAX_EXPERTS);
	if (x->bytes % h->n_stack)
		return gpunvme_set_error(-EINVAL, "tensor %s: %llu bytes do not split into %llu equal experts", name,
					 (unsigned long long)x->bytes, (unsigned long long)h->n_stack);
	return 1;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static int proj_of(const struct gpunvme_moe_index *x, const char *p)
{
	for (uint32_t i = 0; i < x->n_proj; i++)
		if (!strcmp(x->proj[i], p))
			return (int)i;
	return -1;
}

void gpunvme_moe_index_free(struct gpunvme_moe_index *x)
{
	if (!x)
		return;
	for (uint32_t i = 0; x->proj && i < x->n_proj; i++)
		free(x->proj[i]);
	free(x->proj);
	free(x->layer);
	free(x->pieces);
	free(x);
}

/* Layers and projection names from the hits: sorted, unique. */
static int shape_index(struct gpunvme_moe_index *x, const struct hit *h, size_t nh, const struct gpunvme_model *m)
{
	uint32_t *ls = malloc(nh * sizeof(*ls));
	if (!ls)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	for (size_t i = 0; i < nh; i++)
		ls[i] = h[i].layer;
	qsort(ls, nh, sizeof(*ls), cmp_u32);
	size_t nl = 0;
	for (size_t i = 0; i < nh; i++)
		if (!nl || ls[nl - 1] != ls[i])
			ls[nl++] = ls[i];
	x->layer = ls;
	x->n_layers = (uint32_t)nl;
	/* the projections of the first layer; every other layer must match */
	const char *names[GPUNVME_MOE_MAX_PROJ];
	uint32_t np = 0;
	for (size_t i = 0; i < nh; i++) {
		if (h[i].layer != ls[0])
			continue;
		bool seen = false;
		for (uint32_t k = 0; k < np && !seen; k++)
			seen = !strcmp(names[k], h[i].proj);
		if (seen)
			continue;
		if (np == GPUNVME_MOE_MAX_PROJ)
			return gpunvme_set_error(-EINVAL, "layer %u: more than %u projections per expert (tensor %s)", ls[0],
						 GPUNVME_MOE_MAX_PROJ, m->tensors[h[i].tensor].name);
		names[np++] = h[i].proj;
	}
	qsort(names, np, sizeof(*names), cmp_str);
	x->proj = calloc(np, sizeof(*x->proj));
	if (!x->proj)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	x->n_proj = np;
	for (uint32_t k = 0; k < np; k++)
		if (!(x->proj[k] = strdup(names[k])))
			return gpunvme_set_error(-ENOMEM, "out of memory");
	return 0;
}

int gpunvme_moe_index_build(const struct gpunvme_model *m, struct gpunvme_moe_index **out)
{
	if (!m || !out)
		return gpunvme_set_error(-EINVAL, "moe index: bad arguments");
	*out = NULL;
	struct hit *h = calloc(m->n_tensors ? m->n_tensors : 1, sizeof(*h));
	struct gpunvme_moe_index *x = calloc(1, sizeof(*x));
	if (!h || !x) {
		free(h);
		free(x);
		return gpunvme_set_error(-ENOMEM, "out of memory");
	}
	size_t nh = 0;
	int rc = 0;
	const char *per_name = NULL, *stk_name = NULL;
	for (size_t t = 0; t < m->n_tensors && !rc; t++) {
		int r = classify(m, (uint32_t)t, &h[nh]);
		if (r < 0)
			rc = r;
		else if (r > 0) {
			if (h[nh].expert >= 0)
				per_name = per_name ? per_name : m->tensors[t].name;
			else
				stk_name = stk_name ? stk_name : m->tensors[t].name;
			nh++;
		}
	}
	if (!rc && !nh)
		rc = gpunvme_set_error(-ENOENT, "no expert tensors: not a mixture-of-experts model (no \"experts.\" or "
						"\"_exps\" tensors inside numbered layers)");
	if (!rc && per_name && stk_name)
		rc = gpunvme_set_error(-EINVAL, "both expert layouts in one model: %s is one tensor per expert, %s holds "
						"every expert of its layer; refusing to guess which to use",
				       per_name, stk_name);
	if (!rc) {
		x->layout = per_name ? GPUNVME_MOE_PER_EXPERT : GPUNVME_MOE_STACKED;
		rc = shape_index(x, h, nh, m);
	}
	/* the expert count: per expert, the largest number + 1 in the first
	 * layer; stacked, its tensors' expert dimension */
	uint32_t ne = 0;
	for (size_t i = 0; !rc && i < nh; i++) {
		if (h[i].layer != x->layer[0])
			continue;
		uint64_t n = h[i].expert >= 0 ? (uint64_t)h[i].expert + 1 : h[i].n_stack;
		if (n > GPUNVME_MOE_MAX_EXPERTS)
			rc = gpunvme_set_error(-EINVAL, "tensor %s: expert %llu; at most %u experts are served",
					       m->tensors[h[i].tensor].name, (unsigned long long)n - 1, GPUNVME_MOE_MAX_EXPERTS);
		else if (n > ne)
			ne = (uint32_t)n;
	}
	size_t total = (size_t)x->n_layers * ne * x->n_proj;
	if (!rc && !(x->pieces = calloc(total ? total : 1, sizeof(*x->pieces))))
		rc = gpunvme_set_error(-ENOMEM, "out of memory");
	x->n_experts = ne;
	/* place every hit; a second hit for a filled piece, a projection the
	 * first layer lacks, an expert past the count are refused */
	uint8_t *filled = rc ? NULL : calloc(total ? total : 1, 1);
	if (!rc && !filled)
		rc = gpunvme_set_error(-ENOMEM, "out of memory");
	for (size_t i = 0; !rc && i < nh; i++) {
		const struct gpunvme_tensor *t = &m->tensors[h[i].tensor];
		uint32_t li = (uint32_t)gpunvme_moe_layer_find(x, h[i].layer);
		int p = proj_of(x, h[i].proj);
		if (p < 0) {
			rc = gpunvme_set_error(-EINVAL, "tensor %s: projection \"%s\" is not one of layer %u's; every MoE layer "
							"must have the same projections", t->name, h[i].proj, x->layer[0]);
			break;
		}
		uint64_t first = h[i].expert >= 0 ? (uint64_t)h[i].expert : 0;
		uint64_t count = h[i].expert >= 0 ? 1 : h[i].n_stack;
		if (h[i].expert >= 0 && first >= ne) {
			rc = gpunvme_set_error(-EINVAL, "tensor %s: expert %llu, but layer %u has %u experts; every MoE layer "
							"must have the same number", t->name, (unsigned long long)first, x->layer[0], ne);
			break;
		}
		if (h[i].expert < 0 && count != ne) {
			rc = gpunvme_set_error(-EINVAL, "tensor %s: holds %llu experts where layer %u has %u; every MoE layer "
							"must have the same number", t->name, (unsigned long long)count, x->layer[0], ne);
			break;
		}
		uint64_t each = t->bytes / count;
		for (uint64_t e = first; e < first + count; e++) {
			size_t k = ((size_t)li * ne + e) * x->n_proj + (size_t)p;
			if (filled[k]) {
				rc = gpunvme_set_error(-EINVAL, "tensor %s: layer %u expert %llu %s is given twice (also by %s)",
						       t->name, h[i].layer, (unsigned long long)e, h[i].proj,
						       m->tensors[x->pieces[k].tensor].name);
				break;
			}
			filled[k] = 1;
			x->pieces[k] = (struct gpunvme_moe_piece){ t->offset + (e - first) * each, each, h[i].tensor };
		}
	}
	/* nothing missing: an expert without one of its projections cannot
	 * be served (the compute would read another expert's weights) */
	for (size_t k = 0; !rc && k < total; k++) {
		if (filled[k])
			continue;
		size_t p = k % x->n_proj, e = k / x->n_proj % ne, li = k / x->n_proj / ne;
		rc = gpunvme_set_error(-EINVAL, "layer %u expert %zu has no %s tensor (%s); every expert of every MoE layer "
						"needs every projection",
				       x->layer[li], e, x->proj[p],
				       x->layout == GPUNVME_MOE_PER_EXPERT ? "one tensor per expert" : "stacked");
	}
	for (uint32_t li = 0; !rc && li < x->n_layers; li++)
		for (uint32_t e = 0; e < ne; e++) {
			uint64_t b = 0;
			for (uint32_t p = 0; p < x->n_proj; p++)
				b += x->pieces[((size_t)li * ne + e) * x->n_proj + p].bytes;
			if (b > x->max_expert_bytes)
				x->max_expert_bytes = b;
		}
	free(filled);
	free(h);
	if (rc) {
		gpunvme_moe_index_free(x);
		return rc;
	}
	*out = x;
	return 0;
}

const char *gpunvme_moe_layout_str(enum gpunvme_moe_layout l)
{
	return l == GPUNVME_MOE_PER_EXPERT ? "per-expert" : "stacked";
}

int gpunvme_moe_layer_find(const struct gpunvme_moe_index *x, uint32_t layer)
{
	uint32_t lo = 0, hi = x ? x->n_layers : 0;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (x->layer[mid] == layer)
			return (int)mid;
		if (x->layer[mid] < layer)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

const struct gpunvme_moe_piece *gpunvme_moe_expert(const struct gpunvme_moe_index *x, uint32_t i, uint32_t e)
{
	if (!x || i >= x->n_layers || e >= x->n_experts)
		return NULL;
	return &x->pieces[((size_t)i * x->n_experts + e) * x->n_proj];
}

uint64_t gpunvme_moe_place(const struct gpunvme_moe_index *x, uint32_t i, uint32_t e, uint64_t *pos)
{
	const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(x, i, e);
	uint64_t end = 0;
	for (uint32_t p = 0; pc && p < x->n_proj; p++) {
		/* the first whole block after the previous piece, at the
		 * piece's offset inside its block */
		pos[p] = (end + GPUNVME_MOE_PLACE - 1) / GPUNVME_MOE_PLACE * GPUNVME_MOE_PLACE +
			 pc[p].offset % GPUNVME_MOE_PLACE;
		end = pos[p] + pc[p].bytes;
	}
	return end;
}
