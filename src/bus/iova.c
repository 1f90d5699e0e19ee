/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * IOVA allocator: a sorted array of free intervals. Every change builds a
 * new array (at most one entry longer), which keeps the code obviously
 * correct; allocations happen at set-up time, not on the data path.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bus/iova.h"

void gpunvme_iova_init(struct gpunvme_iova *a)
{
	memset(a, 0, sizeof(*a));
}

void gpunvme_iova_fini(struct gpunvme_iova *a)
{
	free(a->free);
	memset(a, 0, sizeof(*a));
}

static int install(struct gpunvme_iova *a, struct gpunvme_iova_range *v, size_t n, size_t cap)
{
	free(a->free);
	a->free = v;
	a->nfree = n;
	a->cap = cap;
	return 0;
}

/* Add [s, e) to the free set, merging with neighbours. strict: refuse an
 * overlap with free space (freeing something that was never allocated). */
static int insert(struct gpunvme_iova *a, uint64_t s, uint64_t e, int strict)
{
	struct gpunvme_iova_range cur = {s, e}, *v;
	size_t n = 0, cap = a->nfree + 1;
	int placed = 0;

	if (s >= e)
		return -EINVAL;
	v = malloc(cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < a->nfree; i++) {
		struct gpunvme_iova_range iv = a->free[i];

		if (placed || iv.end < cur.start) {
			v[n++] = iv;
		} else if (iv.start > cur.end) {
			v[n++] = cur;
			placed = 1;
			v[n++] = iv;
		} else {
			if (strict && iv.start < cur.end && cur.start < iv.end) {
				free(v);
				return -EINVAL;
			}
			cur.start = iv.start < cur.start ? iv.start : cur.start;
			cur.end = iv.end > cur.end ? iv.end : cur.end;
		}
	}
	if (!placed)
		v[n++] = cur;
	return install(a, v, n, cap);
}

/* Remove [s, e) from the free set; splitting can add one interval per
 * call at most, because only the first and last overlapped intervals keep
 * a piece outside [s, e). */
static int carve(struct gpunvme_iova *a, uint64_t s, uint64_t e)
{
	size_t n = 0, cap = a->nfree + 1;
	struct gpunvme_iova_range *v;

	if (s >= e)
		return -EINVAL;
	v = malloc(cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < a->nfree; i++) {
		struct gpunvme_iova_range iv = a->free[i];

		if (iv.end <= s || iv.start >= e) {
			v[n++] = iv;
			continue;
		}
		if (iv.start < s)
			v[n++] = (struct gpunvme_iova_range){iv.start, s};
		if (e < iv.end)
			v[n++] = (struct gpunvme_iova_range){e, iv.end};
	}
	return install(a, v, n, cap);
}

int gpunvme_iova_add(struct gpunvme_iova *a, uint64_t start, uint64_t last)
{
	/* The kernel reports inclusive ends; the top byte of a full 64-bit
	 * space is dropped rather than overflowing. */
	uint64_t end = last == UINT64_MAX ? UINT64_MAX : last + 1;

	if (last < start)
		return -EINVAL;
	return insert(a, start, end, 0);
}

int gpunvme_iova_reserve(struct gpunvme_iova *a, uint64_t start, uint64_t len)
{
	uint64_t end = start + len < start ? UINT64_MAX : start + len;

	if (!len)
		return 0;
	return carve(a, start, end);
}

int gpunvme_iova_alloc(struct gpunvme_iova *a, uint64_t len, uint64_t align, uint64_t *iova)
{
	if (!len || !align || (align & (align - 1)))
		return -EINVAL;
	for (size_t i = 0; i < a->nfree; i++) {
		uint64_t s = (a->free[i].start + align - 1) & ~(align - 1);

		if (s < a->free[i].start)
			continue; /* aligning overflowed */
		if (s >= a->free[i].end || a->free[i].end - s < len)
			continue;
		int rc = carve(a, s, s + len);

		if (rc)
			return rc;
		*iova = s;
		return 0;
	}
	return -ENOSPC;
}

int gpunvme_iova_free(struct gpunvme_iova *a, uint64_t iova, uint64_t len)
{
	if (!len || iova + len < iova)
		return -EINVAL;
	return insert(a, iova, iova + len, 1);
}

uint64_t gpunvme_iova_available(const struct gpunvme_iova *a)
{
	uint64_t t = 0;

	for (size_t i = 0; i < a->nfree; i++)
		t += a->free[i].end - a->free[i].start;
	return t;
}
