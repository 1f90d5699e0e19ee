/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * IOVA space allocator for buses behind an IOMMU (src/bus/vfio.c): a sorted
 * list of free intervals, first fit with alignment, coalescing on free. The
 * usable windows come from the IOMMU (VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE);
 * holes such as the MSI window are carved out with reserve(). Ranges handed
 * out never overlap. Not thread-safe: the caller locks.
 */
#ifndef GPUNVME_BUS_IOVA_H
#define GPUNVME_BUS_IOVA_H

#include <stddef.h>
#include <stdint.h>

struct gpunvme_iova_range {
	uint64_t start;
	uint64_t end;   /* exclusive */
};

struct gpunvme_iova {
	struct gpunvme_iova_range *free;   /* sorted, disjoint, not adjacent */
	size_t nfree, cap;
};

void gpunvme_iova_init(struct gpunvme_iova *a);
void gpunvme_iova_fini(struct gpunvme_iova *a);

/* Make [start, last] (inclusive, as the kernel reports ranges) available. */
int gpunvme_iova_add(struct gpunvme_iova *a, uint64_t start, uint64_t last);
/* Remove [start, start + len) from what can be handed out. */
int gpunvme_iova_reserve(struct gpunvme_iova *a, uint64_t start, uint64_t len);

/* len bytes aligned to `align` (a power of two): 0 and the address in *iova,
 * or -ENOSPC / -EINVAL / -ENOMEM. */
int gpunvme_iova_alloc(struct gpunvme_iova *a, uint64_t len, uint64_t align, uint64_t *iova);
/* Give back exactly what alloc returned. -EINVAL if it overlaps free space
 * (a double free). */
int gpunvme_iova_free(struct gpunvme_iova *a, uint64_t iova, uint64_t len);

/* Bytes still free. */
uint64_t gpunvme_iova_available(const struct gpunvme_iova *a);

#endif
