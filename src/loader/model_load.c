/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A model's tensors into loader memory: selection by pattern, runs of
 * nearby file bytes, one loader allocation per selection holding every run
 * placed for its file offset (only its edge blocks are bounced), and the
 * loads.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "gpunvme/loader.h"
#include "gpunvme/model.h"

#include "model_internal.h"

static int by_offset(const void *a, const void *b)
{
	const struct gpunvme_tensor *x = *(const struct gpunvme_tensor *const *)a;
	const struct gpunvme_tensor *y = *(const struct gpunvme_tensor *const *)b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Runs over the selected tensors in file order: a tensor that starts
 * within max_gap bytes of the current run's end joins it. */
static int make_runs(struct gpunvme_model_buffers *b, uint64_t max_gap)
{
	const struct gpunvme_tensor **s = malloc((b->n_tensors ? b->n_tensors : 1) * sizeof(*s));
	b->runs = calloc(b->n_tensors ? b->n_tensors : 1, sizeof(*b->runs));
	if (!s || !b->runs) {
		free(s);
		return gpunvme_set_error(-ENOMEM, "out of memory");
	}
	memcpy(s, b->tensors, b->n_tensors * sizeof(*s));
	qsort(s, b->n_tensors, sizeof(*s), by_offset);
	for (size_t i = 0; i < b->n_tensors; i++) {
		const struct gpunvme_tensor *t = s[i];
		if (!t->bytes)
			continue;
		struct gpunvme_model_run *r = b->n_runs ? &b->runs[b->n_runs - 1] : NULL;
		const uint64_t end = r ? r->off + r->len : 0;
		if (r && (t->offset <= end || t->offset - end <= max_gap)) {
			if (t->offset + t->bytes > r->off + r->len)
				r->len = t->offset + t->bytes - r->off;
		} else {
			b->runs[b->n_runs++] = (struct gpunvme_model_run){ t->offset, t->bytes, NULL };
		}
	}
	free(s);
	for (size_t k = 0; k < b->n_runs; k++)
		b->run_bytes += b->runs[k].len;
	return 0;
}

/* The run holding [off, off + len), by binary search (runs are sorted and
 * disjoint); a zero-size tensor gets the run at or before its offset. */
static const struct gpunvme_model_run *run_of(const struct gpunvme_model_buffers *b, uint64_t off)
{
	size_t lo = 0, hi = b->n_runs;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (b->runs[mid].off <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? &b->runs[lo - 1] : (b->n_runs ? &b->runs[0] : NULL);
}

/* Run r's slack: the bytes of its first 4 KiB file block before it (head)
 * and of its last one after it (tail, not past the file's end), where
 * gpunvme_model_run_span may land those blocks whole */
static void run_slack(struct gpunvme_model_run *r, uint64_t file_size)
{
	const uint64_t end = r->off + r->len;
	uint64_t tail = (4096 - end % 4096) % 4096;
	if (file_size < end)
		tail = 0;
	else if (tail > file_size - end)
		tail = file_size - end;
	r->head = (uint32_t)(r->off % 4096);
	r->tail = (uint32_t)tail;
}

/* Where run r goes in the selection's allocation, the runs before it
 * (slack included) ending at cur, with its head slack after cur
 * (model_run_at). The widened start, dst - head, is then dword aligned
 * (§4.3: a PRP entry's offset): the page offset is off's rounded down to
 * 256 bytes, or off's own when off is not dword aligned. */
static uint64_t run_at(uint64_t cur, const struct gpunvme_model_run *r)
{
	return model_run_at(cur, r->off, r->head - model_run_page_offset(r->off));
}

/* The selection is made (b->tensors, n_tensors, bytes): runs, one loader
 * allocation holding them all, each tensor's pointer. Frees b on failure.
 *
 * One allocation per selection, not one per run: on the GPU tiers each is a
 * cudaMalloc and a registration with the controller's DMA (the emulator's
 * DMA process maps it), ~0.2 ms apiece. Placement "split" selects each
 * GPU's rows of every tensor with gap 0 (a run per tensor, ~190 for an
 * 8 GiB Llama), and those allocations cost it 41 ms a GPU, a fifth of its
 * load (session 23, bench/results/emu-2026-11-29-s23). */
static int place(struct gpunvme_layer_loader *l, const struct gpunvme_model *m, struct gpunvme_model_buffers *b,
		 uint64_t max_gap, struct gpunvme_model_buffers **out)
{
	int rc = make_runs(b, max_gap);
	/* two passes over the runs: their extent, then, once allocated,
	 * their places (the same arithmetic) */
	uint64_t cur = 0;
	for (size_t k = 0; !rc && k < b->n_runs; k++) {
		run_slack(&b->runs[k], m->file_size);
		const uint64_t at = run_at(cur, &b->runs[k]);
		if (at < cur || b->runs[k].len + b->runs[k].tail > UINT64_MAX - at)
			rc = gpunvme_set_error(-EOVERFLOW, "model buffers: the runs' layout overflows 64 bits");
		else
			cur = at + b->runs[k].len + b->runs[k].tail;
	}
	if (!rc && b->n_runs) {
		if (cur > SIZE_MAX)
			rc = gpunvme_set_error(-ENOMEM, "model buffers: %llu bytes do not fit in this address space",
					       (unsigned long long)cur);
		/* file offset 0: the allocation starts on a page boundary, so
		 * the runs keep the in-page offsets run_at gives them */
		else if (!(b->mem = gpunvme_layer_loader_alloc(l, 0, (size_t)cur)))
			rc = -ENOMEM; /* message set by the allocator */
	}
	if (rc) {
		gpunvme_model_buffers_free(l, b);
		return rc;
	}
	cur = 0;
	for (size_t k = 0; k < b->n_runs; k++) {
		const uint64_t at = run_at(cur, &b->runs[k]);
		b->runs[k].dst = (uint8_t *)b->mem + at;
		cur = at + b->runs[k].len + b->runs[k].tail;
	}
	for (size_t i = 0; i < b->n_tensors; i++) {
		const struct gpunvme_model_run *r = run_of(b, b->tensors[i]->offset);
		if (!r)
			continue;
		uint64_t at = b->tensors[i]->offset > r->off ? b->tensors[i]->offset - r->off : 0;
		b->ptr[i] = r->dst + (at < r->len ? at : r->len);
	}
	*out = b;
	return 0;
}

static struct gpunvme_model_buffers *buffers_new(size_t cap)
{
	struct gpunvme_model_buffers *b = calloc(1, sizeof(*b));
	if (!cap)
		cap = 1;
	if (!b || !(b->tensors = calloc(cap, sizeof(*b->tensors))) || !(b->ptr = calloc(cap, sizeof(*b->ptr)))) {
		gpunvme_model_buffers_free(NULL, b);
		gpunvme_set_error(-ENOMEM, "out of memory");
		return NULL;
	}
	return b;
}

int gpunvme_model_buffers_alloc(struct gpunvme_layer_loader *l, const struct gpunvme_model *m, const char *patterns,
				struct gpunvme_model_buffers **out)
{
	if (!l || !m || !out)
		return gpunvme_set_error(-EINVAL, "model buffers: bad arguments");
	struct gpunvme_model_buffers *b = buffers_new(m->n_tensors);
	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i < m->n_tensors; i++) {
		const struct gpunvme_tensor *t = &m->tensors[i];
		if (patterns && !gpunvme_tensor_match(patterns, t->name))
			continue;
		b->tensors[b->n_tensors++] = t;
		b->bytes += t->bytes;
	}
	if (patterns && !b->n_tensors) {
		gpunvme_model_buffers_free(l, b);
		return gpunvme_set_error(-ENOENT, "no tensor matches '%s' (%zu tensors)", patterns, m->n_tensors);
	}
	return place(l, m, b, GPUNVME_MODEL_RUN_GAP, out);
}

int gpunvme_model_buffers_alloc_sel(struct gpunvme_layer_loader *l, const struct gpunvme_model *m, const size_t *idx,
				    size_t n, struct gpunvme_model_buffers **out)
{
	return gpunvme_model_buffers_alloc_sel_gap(l, m, idx, n, GPUNVME_MODEL_RUN_GAP, out);
}

int gpunvme_model_buffers_alloc_sel_gap(struct gpunvme_layer_loader *l, const struct gpunvme_model *m,
					const size_t *idx, size_t n, uint64_t max_gap,
					struct gpunvme_model_buffers **out)
{
	if (!l || !m || !out || (n && !idx))
		return gpunvme_set_error(-EINVAL, "model buffers: bad arguments");
	/* one bit per model tensor: an index given twice would place one
	 * tensor twice and hand out two pointers to the same bytes */
	uint8_t *seen = calloc(m->n_tensors / 8 + 1, 1);
	struct gpunvme_model_buffers *b = seen ? buffers_new(n) : NULL;
	if (!b) {
		free(seen);
		return gpunvme_set_error(-ENOMEM, "out of memory");
	}
	for (size_t k = 0; k < n; k++) {
		size_t i = idx[k];
		int rc = 0;
		if (i >= m->n_tensors)
			rc = gpunvme_set_error(-ERANGE, "tensor index %zu (selection entry %zu) is past the model's %zu tensors",
					       i, k, m->n_tensors);
		else if (seen[i / 8] & (1u << (i % 8)))
			rc = gpunvme_set_error(-EINVAL, "tensor %zu (\"%.64s\") is selected twice (entry %zu): give each index once",
					       i, m->tensors[i].name, k);
		if (rc) {
			free(seen);
			gpunvme_model_buffers_free(l, b);
			return rc;
		}
		seen[i / 8] |= (uint8_t)(1u << (i % 8));
		b->tensors[b->n_tensors++] = &m->tensors[i];
		b->bytes += m->tensors[i].bytes;
	}
	free(seen);
	return place(l, m, b, max_gap, out);
}

/* GPUNVME_LOAD_EDGES=direct: runs' edge blocks land whole in their slack
 * (read at each call: a test or a bench may switch it between loads). Any
 * other value but "bounce" is said once, as the emulator's own variables
 * are (gpunvme_emu_copies): a typo must not pass for a measured setting. */
static bool edges_direct(void)
{
	const char *e = getenv("GPUNVME_LOAD_EDGES");
	if (!e || !*e || !strcmp(e, "bounce"))
		return false;
	if (!strcmp(e, "direct"))
		return true;
	static int said;
	if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		fprintf(stderr, "gpunvme: GPUNVME_LOAD_EDGES=%s is neither bounce nor direct: ignored (edge blocks "
				"are bounced)\n", e);
	return false;
}

int gpunvme_model_run_span(const struct gpunvme_model_buffers *b, size_t k, uint64_t from, uint64_t len,
			   struct gpunvme_load_span *out)
{
	if (!b || !out || k >= b->n_runs || from > b->runs[k].len || len > b->runs[k].len - from)
		return gpunvme_set_error(-EINVAL, "model run span: run %zu bytes %llu+%llu are not in the selection", k,
					 (unsigned long long)from, (unsigned long long)len);
	const struct gpunvme_model_run *r = &b->runs[k];
	*out = (struct gpunvme_load_span){ r->off + from, len, r->dst + from };
	if (!len || !edges_direct())
		return 0;
	if (!from) {
		out->off -= r->head;
		out->dst = r->dst - r->head;
		out->len += r->head;
	}
	if (from + len == r->len)
		out->len += r->tail;
	return 0;
}

uint64_t gpunvme_model_run_piece(const struct gpunvme_model_buffers *b, size_t k, uint64_t from, uint64_t max)
{
	if (!b || k >= b->n_runs || from >= b->runs[k].len || !max)
		return 0;
	const struct gpunvme_model_run *r = &b->runs[k];
	if (r->len - from <= max)
		return r->len - from;
	const uint64_t at = r->off + from, end = (at + max) / 4096 * 4096;
	return end > at ? end - at : max;
}

int gpunvme_model_load(struct gpunvme_layer_loader *l, struct gpunvme_model_buffers *b, void *stream, void *event,
		       uint16_t *status)
{
	if (!l || !b)
		return gpunvme_set_error(-EINVAL, "model load: bad arguments");
	if (status)
		*status = 0;
	const bool gpu = gpunvme_layer_loader_tier(l) != GPUNVME_TIER_CPU;
	struct gpunvme_load_span *sp = b->n_runs ? malloc(b->n_runs * sizeof(*sp)) : NULL;
	if (b->n_runs && !sp)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	for (size_t k = 0; k < b->n_runs; k++)
		(void)gpunvme_model_run_span(b, k, 0, b->runs[k].len, &sp[k]); /* the whole of a run of b: in range */
	/* every run in one call: the GPU tiers queue their reads together (a
	 * run does not wait for the last read of the one before it), the CPU
	 * tier keeps its queues full across runs; no runs: the event still
	 * completes */
	int rc = gpu ? gpunvme_load_layers_async(l, sp, b->n_runs, stream, event)
		     : gpunvme_load_layers(l, sp, b->n_runs, status);
	/* nothing for the caller to wait on: wait for the runs and collect
	 * their result. A run that failed (a timeout under a loaded GPU or
	 * CPU, a transient status) is not known by name, so every run is
	 * loaded again synchronously, with the loader's retries; the wait
	 * itself never reports success for bytes that did not land. */
	if (!rc && gpu && !stream && !event) {
		rc = gpunvme_layer_loader_wait(l, status);
		if (rc == -ETIMEDOUT || rc == -EIO)
			rc = gpunvme_load_layers(l, sp, b->n_runs, status);
	}
	free(sp);
	return rc;
}

void gpunvme_model_buffers_free(struct gpunvme_layer_loader *l, struct gpunvme_model_buffers *b)
{
	if (!b)
		return;
	if (l && b->mem)
		gpunvme_layer_loader_free(l, b->mem);
	free(b->runs);
	free(b->ptr);
	free(b->tensors);
	free(b);
}
