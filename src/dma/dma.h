/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * DMA memory of one controller: allocations from its bus (hugepages,
 * IOMMU-mapped pages or emulator-registered memory), kept sorted by address
 * so that any byte of DMA memory turns into a bus address, and a heap that
 * carves small allocations out of 2 MiB chunks. Uses the bus layer only;
 * the public gpunvme_dma_* calls (src/ctrl) wrap it.
 */
#ifndef GPUNVME_DMA_H
#define GPUNVME_DMA_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bus/bus.h"
#include "gpunvme/spec/queue.h"

/* Small allocations (under 1 MiB) are carved from 2 MiB heap chunks at
 * 4 KiB granularity: on UIO every bus allocation costs a whole hugepage. */
#define DMA_CHUNK (2u << 20)
#define DMA_PAGE 4096u
#define DMA_CHUNK_PAGES (DMA_CHUNK / DMA_PAGE)

struct dma_heap_chunk {
	uint16_t run[DMA_CHUNK_PAGES];  /* pages of the allocation starting here, 0 = free */
	uint8_t used[DMA_CHUNK_PAGES];  /* page in use */
	uint32_t nused;
};

struct dma_alloc {
	uint8_t *va;
	size_t len;
	void *handle;
	size_t contig;         /* bytes contiguous in bus space from any chunk start */
	uint64_t iova0;        /* bus address of va when contig == len */
	struct dma_heap_chunk *heap; /* non-NULL: a heap chunk holding small allocations */
	size_t handle_off;     /* offset of va within the bus allocation `handle` */
	/* contig < len: the bus address of each 2^table_shift-byte piece of the
	 * bus allocation (index by handle_off + offset), for the PRP builder */
	uint64_t *table;
	uint32_t table_shift;
};

struct dma_registry {
	struct gpunvme_bus *bus;
	pthread_mutex_t lock;
	struct dma_alloc *v;   /* sorted by va */
	size_t n, cap;
};

void dma_registry_init(struct dma_registry *r, struct gpunvme_bus *bus);
/* Frees every allocation (the bus must still be open). */
void dma_registry_fini(struct dma_registry *r);
void dma_free_all(struct dma_registry *r);

void *dma_alloc(struct dma_registry *r, size_t len);
/* Foreign memory through the bus's dma_import (gpunvme_dma_import). */
int dma_import(struct dma_registry *r, void *va, size_t len, const struct gpunvme_dma_src *src);
void dma_free(struct dma_registry *r, void *p);
uint64_t dma_iova(struct dma_registry *r, const void *p);

int dma_register(struct dma_registry *r, uint8_t *va, size_t len, void *handle);
/* Where byte `off` of a (possibly narrowed) allocation onwards lies on the
 * bus, in the form the PRP builder (gpunvme/spec/queue.h) takes. */
void dma_prp_addr(const struct dma_alloc *a, size_t off, struct gpunvme_prp_addr *out);
/* The allocation holding [p, p + len), or NULL. Caller holds r->lock. */
struct dma_alloc *dma_lookup(struct dma_registry *r, const void *p, size_t len);
/* The allocation the caller made that holds [p, p + len): for a heap chunk,
 * narrowed to the small allocation inside it. Caller holds r->lock. */
int dma_lookup_user(struct dma_registry *r, const void *p, size_t len, struct dma_alloc *out);

/* Bumped (release) on every free of a bus allocation: a lookup cached with
 * an older value may name memory that is gone. */
extern uint64_t gpunvme_dma_gen;

#endif
