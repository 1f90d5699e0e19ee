/* SPDX-License-Identifier: BSD-2-Clause */
/* PRP builder (NVMe 1.4 §4.3): plain C, no allocation, host or device code. */
#ifndef GPUNVME_PRP_H
#define GPUNVME_PRP_H

#include <stddef.h>
#include <stdint.h>

/* Bus address of byte `off` of the data buffer. Bytes of one memory page
 * must be contiguous in bus space, page boundaries aligned (true for any
 * mapping at >= page granularity). */
typedef uint64_t (*gpunvme_prp_iova_fn)(const void *ctx, size_t off);

/* PRP list pages available to one command. */
struct gpunvme_prp_lists {
	uint64_t *const *va;        /* host address of each page */
	const uint64_t *iova;       /* bus address of each page (page-aligned) */
	uint32_t n;
};

/* Number of list pages a transfer of `len` bytes starting at page offset
 * `first_off` needs (0 when PRP1/PRP2 suffice). Each full page holds
 * page/8 - 1 data entries and a chain pointer, the last one page/8. */
static inline uint32_t gpunvme_prp_list_pages(size_t first_off, size_t len, uint32_t page_size)
{
	if (len == 0)
		return 0;
	size_t first = page_size - first_off;
	if (len <= first)
		return 0;
	size_t rest = len - first;
	size_t ents = (rest + page_size - 1) / page_size;
	if (ents <= 1)
		return 0;  /* PRP2 is the data pointer */
	size_t per = page_size / 8;
	if (ents <= per)
		return 1;
	/* every page but the last holds per - 1 data entries */
	return (uint32_t)(1 + (ents - per + (per - 1) - 1) / (per - 1));
}

/*
 * Fill prp1 and prp2 (and list pages) for `len` bytes of the buffer starting
 * at offset 0. Returns 0, -EINVAL (len 0, or the start not dword aligned),
 * -E2BIG (not enough list pages).
 */
int gpunvme_prp_build(gpunvme_prp_iova_fn iova, const void *ctx, size_t len, uint32_t page_size,
		      const struct gpunvme_prp_lists *lists, uint64_t *prp1, uint64_t *prp2);

#endif
