/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * DMA memory: allocations come from the bus (hugepages, IOMMU-mapped pages
 * or emulator-registered memory); this file keeps them sorted by address so
 * any byte of DMA memory can be turned into a bus address.
 */
#include <errno.h>
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
	c->dma[i] = (struct dma_alloc){ va, len, handle, contig, c->bus.ops->iova_of(&c->bus, handle, 0) };
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
	len = (len + 4095) & ~(size_t)4095;
	void *va, *handle;
	if (c->bus.ops->dma_alloc(&c->bus, len, &va, &handle))
		return NULL; /* the bus said why */
	if (dma_register(c, va, len, handle)) {
		c->bus.ops->dma_free(&c->bus, va, len, handle);
		gpunvme_set_error(-ENOMEM, "out of memory");
		return NULL;
	}
	return va;
}

void gpunvme_dma_free(struct gpunvme_ctrl *c, void *p)
{
	if (!c || !p)
		return;
	pthread_mutex_lock(&c->dma_lock);
	size_t i = upper(c, p);
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
	for (size_t i = 0; i < c->ndma; i++)
		c->bus.ops->dma_free(&c->bus, c->dma[i].va, c->dma[i].len, c->dma[i].handle);
	free(c->dma);
	c->dma = NULL;
	c->ndma = c->dma_cap = 0;
}
