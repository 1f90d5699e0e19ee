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

#include "ctrl/ctrl.h"

uint64_t gpunvme_dma_gen; /* bumped on every free: invalidates cached lookups */

static size_t upper(const struct gpunvme_ctrl *c, const void *p)
{
	size_t lo = 0, hi = c->ndma;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if ((const uint8_t *)p >= c->dma[mid].va)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int dma_register(struct gpunvme_ctrl *c, uint8_t *va, size_t len, void *handle)
{
	pthread_mutex_lock(&c->dma_lock);
	if (c->ndma == c->dma_cap) {
		size_t cap = c->dma_cap ? 2 * c->dma_cap : 16;
		struct dma_alloc *n = realloc(c->dma, cap * sizeof(*n));
		if (!n) {
			pthread_mutex_unlock(&c->dma_lock);
			return -ENOMEM;
		}
		c->dma = n;
		c->dma_cap = cap;
	}
	size_t i = upper(c, va);
	memmove(&c->dma[i + 1], &c->dma[i], (c->ndma - i) * sizeof(*c->dma));
	size_t contig = c->bus.ops->contig(&c->bus, handle);
	c->dma[i] = (struct dma_alloc){ va, len, handle, contig, c->bus.ops->iova_of(&c->bus, handle, 0), NULL };
	c->ndma++;
	pthread_mutex_unlock(&c->dma_lock);
	return 0;
}

/* The allocation holding [p, p + len), or NULL. Caller holds dma_lock. */
struct dma_alloc *dma_lookup(struct gpunvme_ctrl *c, const void *p, size_t len)
{
	size_t i = upper(c, p);
	if (i == 0)
		return NULL;
	struct dma_alloc *a = &c->dma[i - 1];
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

static void *heap_alloc(struct gpunvme_ctrl *c, size_t len)
{
	uint32_t pages = (uint32_t)(len / DMA_PAGE);
	pthread_mutex_lock(&c->dma_lock);
	for (size_t k = 0; k < c->ndma; k++) {
		struct dma_alloc *a = &c->dma[k];
		if (!a->heap || DMA_CHUNK_PAGES - a->heap->nused < pages)
			continue;
		int first = heap_fit(a->heap, pages);
		if (first < 0)
			continue;
		memset(&a->heap->used[first], 1, pages);
		a->heap->run[first] = (uint16_t)pages;
		a->heap->nused += pages;
		uint8_t *p = a->va + (size_t)first * DMA_PAGE;
		pthread_mutex_unlock(&c->dma_lock);
		memset(p, 0, len); /* the memory was used before */
		return p;
	}
	pthread_mutex_unlock(&c->dma_lock);
	return NULL;
}

static void *bus_alloc(struct gpunvme_ctrl *c, size_t len, bool heap)
{
	void *va, *handle;
	if (c->bus.ops->dma_alloc(&c->bus, len, &va, &handle))
		return NULL; /* the bus said why */
	struct dma_heap_chunk *h = NULL;
	if (heap && !(h = calloc(1, sizeof(*h)))) {
		c->bus.ops->dma_free(&c->bus, va, len, handle);
		gpunvme_set_error(-ENOMEM, "out of memory");
		return NULL;
	}
	if (dma_register(c, va, len, handle)) {
		c->bus.ops->dma_free(&c->bus, va, len, handle);
		free(h);
		gpunvme_set_error(-ENOMEM, "out of memory");
		return NULL;
	}
	if (h) {
		pthread_mutex_lock(&c->dma_lock);
		dma_lookup(c, va, 1)->heap = h;
		pthread_mutex_unlock(&c->dma_lock);
	}
	return va;
}

int dma_lookup_user(struct gpunvme_ctrl *c, const void *p, size_t len, struct dma_alloc *out)
{
	struct dma_alloc *a = dma_lookup(c, p, 1);
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

void *gpunvme_dma_alloc(struct gpunvme_ctrl *c, size_t len)
{
	if (!c || len == 0) {
		gpunvme_set_error(-EINVAL, "DMA allocation of 0 bytes");
		return NULL;
	}
	if (len > (1ull << 40)) {
		gpunvme_set_error(-ENOMEM, "DMA allocation of %zu bytes is too large", len);
		return NULL;
	}
	len = (len + DMA_PAGE - 1) & ~(size_t)(DMA_PAGE - 1);
	if (len > DMA_CHUNK / 2)
		return bus_alloc(c, len, false);
	void *p = heap_alloc(c, len);
	if (p)
		return p;
	/* a new chunk, then carve from it */
	if (!bus_alloc(c, DMA_CHUNK, true))
		return NULL;
	return heap_alloc(c, len);
}

void gpunvme_dma_free(struct gpunvme_ctrl *c, void *p)
{
	if (!c || !p)
		return;
	pthread_mutex_lock(&c->dma_lock);
	size_t i = upper(c, p);
	struct dma_alloc *h = i ? &c->dma[i - 1] : NULL;
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
		pthread_mutex_unlock(&c->dma_lock);
		return;
	}
	if (i == 0 || c->dma[i - 1].va != p) {
		pthread_mutex_unlock(&c->dma_lock);
		return; /* not an allocation start: ignore rather than corrupt */
	}
	struct dma_alloc a = c->dma[i - 1];
	memmove(&c->dma[i - 1], &c->dma[i], (c->ndma - i) * sizeof(*c->dma));
	c->ndma--;
	__atomic_fetch_add(&gpunvme_dma_gen, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&c->dma_lock);
	c->bus.ops->dma_free(&c->bus, a.va, a.len, a.handle);
}

uint64_t gpunvme_dma_iova(struct gpunvme_ctrl *c, const void *p)
{
	pthread_mutex_lock(&c->dma_lock);
	struct dma_alloc *a = dma_lookup(c, p, 1);
	uint64_t iova = a ? c->bus.ops->iova_of(&c->bus, a->handle, (size_t)((const uint8_t *)p - a->va)) : 0;
	pthread_mutex_unlock(&c->dma_lock);
	return iova;
}

void dma_free_all(struct gpunvme_ctrl *c)
{
	for (size_t i = 0; i < c->ndma; i++) {
		c->bus.ops->dma_free(&c->bus, c->dma[i].va, c->dma[i].len, c->dma[i].handle);
		free(c->dma[i].heap);
	}
	free(c->dma);
	c->dma = NULL;
	c->ndma = c->dma_cap = 0;
}
