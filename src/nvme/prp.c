/* SPDX-License-Identifier: BSD-2-Clause */
#include <errno.h>

#include "nvme/prp.h"

int gpunvme_prp_build(gpunvme_prp_iova_fn iova, const void *ctx, size_t len, uint32_t page_size,
		      const struct gpunvme_prp_lists *lists, uint64_t *prp1, uint64_t *prp2)
{
	const uint64_t mask = page_size - 1;
	if (len == 0)
		return -EINVAL;
	uint64_t a = iova(ctx, 0);
	/* §4.3: a PRP entry's offset is dword aligned (bits 1:0 cleared) */
	if (a & 3)
		return -EINVAL;
	*prp1 = a;
	*prp2 = 0;
	size_t first = page_size - (a & mask);
	if (len <= first)
		return 0;
	size_t off = first;
	size_t rest = len - first;
	if (rest <= page_size) {
		/* the transfer ends in the second page: PRP2 points at it */
		*prp2 = iova(ctx, off);
		return 0;
	}
	/* PRP2 points to a list. Each page holds page/8 entries; when more
	 * entries remain than fit, the last one chains to the next page. */
	const uint32_t per = page_size / 8;
	uint32_t page = 0, i = 0;
	if (lists->n == 0)
		return -E2BIG;
	uint64_t *list = lists->va[0];
	*prp2 = lists->iova[0];
	while (rest > 0) {
		size_t left_ents = (rest + page_size - 1) / page_size;
		if (i == per - 1 && left_ents > 1) {
			if (++page >= lists->n)
				return -E2BIG;
			list[i] = lists->iova[page];
			list = lists->va[page];
			i = 0;
		}
		list[i++] = iova(ctx, off);
		size_t chunk = rest < page_size ? rest : page_size;
		off += chunk;
		rest -= chunk;
	}
	return 0;
}
