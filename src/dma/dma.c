/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * DMA memory: allocations come from the bus (hugepages, IOMMU-mapped pages
 * or emulator-registered memory); this file keeps them sorted by address so
 * any byte of DMA memory can be turned into a bus address.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "dma/dma.h"

uint64_t gpunvme_dma_gen; /* bumped on every free: invalidates cached lookups */

static size_t upper(const struct dma_registry *r, const void *p)
{
	size_t lo = 0, hi = r->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if ((const uint8_t *)p >= r->v[mid].va)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int dma_register(struct dma_registry *r, uint8_t *va, size_t len, void *handle)
{
	pthread_mutex_lock(&r->lock);
	if (r->n == r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 16;
		struct dma_alloc *n = realloc(r->v, cap * sizeof(*n));
		if (!n) {
			pthread_mutex_unlock(&r->lock);
			return -ENOMEM;
		}
		r->v = n;
		r->cap = cap;
	}
	size_t contig = r->bus->ops->contig(r->bus, handle);
	uint64_t *table = NULL;
	uint32_t shift = 0;
	if (contig < len) {
		/* pieces contiguous on the bus: a power of two holding whole
		 * pages (UIO: 2 MiB hugepages), so the PRP builder can index */
		while (shift < 63 && (1ull << (shift + 1)) <= contig)
			shift++;
		if ((1ull << shift) != contig || contig < DMA_PAGE) {
			pthread_mutex_unlock(&r->lock);
			return gpunvme_set_error(-EINVAL, "DMA memory contiguous in pieces of %zu bytes: not a power of two of at least %u",
						 contig, DMA_PAGE);
		}
		size_t n = (len + contig - 1) >> shift;
		if (!(table = malloc(n * sizeof(*table)))) {
			pthread_mutex_unlock(&r->lock);
			return -ENOMEM;
		}
		for (size_t k = 0; k < n; k++)
			table[k] = r->bus->ops->iova_of(r->bus, handle, k << shift);
	}
	size_t i = upper(r, va);
	memmove(&r->v[i + 1], &r->v[i], (r->n - i) * sizeof(*r->v));
	r->v[i] = (struct dma_alloc){ va, len, handle, contig, r->bus->ops->iova_of(r->bus, handle, 0), NULL, 0, table,
				      shift };
	r->n++;
	pthread_mutex_unlock(&r->lock);
	return 0;
}

void dma_prp_addr(const struct dma_alloc *a, size_t off, struct gpunvme_prp_addr *out)
{
	if (a->contig >= a->len)
		*out = (struct gpunvme_prp_addr){ a->iova0 + off, NULL, 0, 0 };
	else
		*out = (struct gpunvme_prp_addr){ 0, a->table, a->handle_off + off, a->table_shift };
}

/* The allocation holding [p, p + len), or NULL. Caller holds dma_lock. */
struct dma_alloc *dma_lookup(struct dma_registry *r, const void *p, size_t len)
{
	size_t i = upper(r, p);
	if (i == 0)
		return NULL;
	struct dma_alloc *a = &r->v[i - 1];
	size_t off = (size_t)((const uint8_t *)p - a->va);
	if (off >= a->len || len > a->len - off)
		return NULL;
	return a;
}

/* First fit of `pages` free pages in a chunk; -1 when none. */
static int heap_fit(const struct dma_heap_chunk *h, uint32_t pages)
{
	uint32_t run = 0;
	for (uint32_t i = 0; i < DMA_CHUNK_PAGES; i++) {
		run = h->used[i] ? 0 : run + 1;
		if (run == pages)
			return (int)(i + 1 - pages);
	}
	return -1;
}

static void *heap_alloc(struct dma_registry *r, size_t len)
{
	uint32_t pages = (uint32_t)(len / DMA_PAGE);
	pthread_mutex_lock(&r->lock);
	for (size_t k = 0; k < r->n; k++) {
		struct dma_alloc *a = &r->v[k];
		if (!a->heap || DMA_CHUNK_PAGES - a->heap->nused < pages)
			continue;
		int first = heap_fit(a->heap, pages);
		if (first < 0)
			continue;
		memset(&a->heap->used[first], 1, pages);
		a->heap->run[first] = (uint16_t)pages;
		a->heap->nused += pages;
		uint8_t *p = a->va + (size_t)first * DMA_PAGE;
		pthread_mutex_unlock(&r->lock);
		memset(p, 0, len); /* the memory was used before */
		return p;
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

static void *bus_alloc(struct dma_registry *r, size_t len, bool heap)
{
	void *va, *handle;
	if (r->bus->ops->dma_alloc(r->bus, len, &va, &handle))
		return NULL; /* the bus said why */
	struct dma_heap_chunk *h = NULL;
	if (heap && !(h = calloc(1, sizeof(*h)))) {
		r->bus->ops->dma_free(r->bus, va, len, handle);
		gpunvme_set_error(-ENOMEM, "out of memory");
		return NULL;
	}
	if (dma_register(r, va, len, handle)) {
		r->bus->ops->dma_free(r->bus, va, len, handle);
		free(h);
		gpunvme_set_error(-ENOMEM, "out of memory");
		return NULL;
	}
	if (h) {
		pthread_mutex_lock(&r->lock);
		dma_lookup(r, va, 1)->heap = h;
		pthread_mutex_unlock(&r->lock);
	}
	return va;
}

int dma_lookup_user(struct dma_registry *r, const void *p, size_t len, struct dma_alloc *out)
{
	struct dma_alloc *a = dma_lookup(r, p, 1);
	if (!a)
		return -EFAULT;
	*out = *a;
	if (a->heap) {
		/* find the small allocation whose pages cover p */
		uint32_t k = (uint32_t)(((const uint8_t *)p - a->va) / DMA_PAGE);
		if (!a->heap->used[k])
			return -EFAULT;
		uint32_t first = k;
		while (!a->heap->run[first] || first + a->heap->run[first] <= k) {
			if (first == 0)
				return -EFAULT;
			first--;
		}
		out->va = a->va + (size_t)first * DMA_PAGE;
		out->len = (size_t)a->heap->run[first] * DMA_PAGE;
		out->handle_off = (size_t)first * DMA_PAGE;
		out->iova0 = a->iova0 + out->handle_off;
		out->contig = a->contig >= a->len ? out->len : a->contig;
		out->heap = NULL;
	}
	size_t off = (size_t)((const uint8_t *)p - out->va);
	if (off >= out->len || len > out->len - off)
		return -EFAULT;
	return 0;
}

void *dma_alloc(struct dma_registry *r, size_t len)
{
	if (len == 0) {
		gpunvme_set_error(-EINVAL, "DMA allocation of 0 bytes");
		return NULL;
	}
	if (len > (1ull << 40)) {
		gpunvme_set_error(-ENOMEM, "DMA allocation of %zu bytes is too large", len);
		return NULL;
	}
	len = (len + DMA_PAGE - 1) & ~(size_t)(DMA_PAGE - 1);
	if (len > DMA_CHUNK / 2)
		return bus_alloc(r, len, false);
	void *p = heap_alloc(r, len);
	if (p)
		return p;
	/* a new chunk, then carve from it */
	if (!bus_alloc(r, DMA_CHUNK, true))
		return NULL;
	return heap_alloc(r, len);
}

int dma_import(struct dma_registry *r, void *va, size_t len, const struct gpunvme_dma_src *src)
{
	void *handle;
	int rc;

	if (!r->bus->ops->dma_import)
		return gpunvme_set_error(-EOPNOTSUPP, "%s:%s: cannot import foreign memory (dma-buf, peer BAR): "
						      "only the kmod: bus can (bind the controller to the gpunvme module: "
						      "scripts/kmod-bind.sh)",
					 r->bus->ops->name, r->bus->addr);
	bool overlap = false;
	pthread_mutex_lock(&r->lock);
	for (size_t i = 0; i < r->n && !overlap; i++)
		overlap = (uint8_t *)va < r->v[i].va + r->v[i].len && r->v[i].va < (uint8_t *)va + len;
	pthread_mutex_unlock(&r->lock);
	if (overlap)
		return gpunvme_set_error(-EEXIST, "import at %p: the range overlaps DMA memory already known", va);
	rc = r->bus->ops->dma_import(r->bus, src, va, len, &handle);
	if (rc)
		return rc;
	rc = dma_register(r, va, len, handle);
	if (rc) {
		r->bus->ops->dma_free(r->bus, va, len, handle);
		return gpunvme_set_error(rc, "import: out of memory");
	}
	return 0;
}

void dma_free(struct dma_registry *r, void *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&r->lock);
	size_t i = upper(r, p);
	struct dma_alloc *h = i ? &r->v[i - 1] : NULL;
	if (h && h->heap && (uint8_t *)p < h->va + h->len) {
		/* a small allocation: give its pages back to the chunk (the
		 * chunk stays mapped, so cached lookups remain valid) */
		size_t off = (size_t)((uint8_t *)p - h->va);
		uint32_t first = (uint32_t)(off / DMA_PAGE);
		uint32_t pages = off % DMA_PAGE ? 0 : h->heap->run[first];
		if (pages) {
			memset(&h->heap->used[first], 0, pages);
			h->heap->run[first] = 0;
			h->heap->nused -= pages;
		}
		pthread_mutex_unlock(&r->lock);
		return;
	}
	if (i == 0 || r->v[i - 1].va != p) {
		pthread_mutex_unlock(&r->lock);
		return; /* not an allocation start: ignore rather than corrupt */
	}
	struct dma_alloc a = r->v[i - 1];
	free(a.table);
	memmove(&r->v[i - 1], &r->v[i], (r->n - i) * sizeof(*r->v));
	r->n--;
	__atomic_fetch_add(&gpunvme_dma_gen, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&r->lock);
	r->bus->ops->dma_free(r->bus, a.va, a.len, a.handle);
}

uint64_t dma_iova(struct dma_registry *r, const void *p)
{
	pthread_mutex_lock(&r->lock);
	struct dma_alloc *a = dma_lookup(r, p, 1);
	uint64_t iova = a ? r->bus->ops->iova_of(r->bus, a->handle, (size_t)((const uint8_t *)p - a->va)) : 0;
	pthread_mutex_unlock(&r->lock);
	return iova;
}

void dma_registry_init(struct dma_registry *r, struct gpunvme_bus *bus)
{
	memset(r, 0, sizeof(*r));
	r->bus = bus;
	pthread_mutex_init(&r->lock, NULL);
}

void dma_free_all(struct dma_registry *r)
{
	for (size_t i = 0; i < r->n; i++) {
		r->bus->ops->dma_free(r->bus, r->v[i].va, r->v[i].len, r->v[i].handle);
		free(r->v[i].heap);
		free(r->v[i].table);
	}
	free(r->v);
	r->v = NULL;
	r->n = r->cap = 0;
}

void dma_registry_fini(struct dma_registry *r)
{
	dma_free_all(r);
	pthread_mutex_destroy(&r->lock);
}
