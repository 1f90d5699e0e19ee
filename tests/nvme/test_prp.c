/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * PRP builder (src/nvme/prp.c): every start offset class and every length up
 * to several chained list pages, for 4 KiB and 64 KiB memory pages, checked
 * by an independent walker that follows the PRPs the way a controller does
 * (NVMe 1.4 §4.3) and verifies that byte i of the transfer lands at the bus
 * address of byte i of the buffer. Also: the list-page count formula is
 * exact (not just sufficient), and too few list pages is -E2BIG.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvme/prp.h"

static int failures;
#define CHECK(c, ...)                                                     \
	do {                                                              \
		if (!(c)) {                                               \
			fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);   \
			fprintf(stderr, __VA_ARGS__);                     \
			fputc('\n', stderr);                              \
			if (++failures > 20)                              \
				exit(1);                                  \
		}                                                         \
	} while (0)

/* The buffer: page p of it lives at a scattered bus address (pages are not
 * contiguous, so a builder that assumes contiguity fails). */
struct buf {
	uint64_t start;     /* bus address of byte 0 */
	uint32_t ps;
};

static uint64_t page_bus(uint32_t ps, uint64_t p)
{
	return 0x7000000000ull + (p * 7919 % 100003) * ps;
}

static uint64_t buf_iova(const void *ctx, size_t off)
{
	const struct buf *b = ctx;
	uint64_t a = (b->start & (b->ps - 1)) + off; /* offset from the first page start */
	return page_bus(b->ps, a / b->ps) + a % b->ps;
}

#define LIST_BASE 0x5000000000ull
#define MAXL 8

/* Controller-side walk: returns the number of bytes mapped correctly, or
 * -1 on a structural error. */
static long walk(const struct buf *b, uint64_t prp1, uint64_t prp2, size_t len, uint64_t *lists[MAXL],
		 uint32_t nl)
{
	const uint64_t ps = b->ps, mask = ps - 1;
	size_t done = 0;
	if (prp1 != buf_iova(b, 0))
		return -1;
	size_t first = ps - (prp1 & mask);
	if (first > len)
		first = len;
	done = first;
	if (done == len)
		return prp2 == 0 ? (long)done : -1;
	if (len - done <= ps) {
		if ((prp2 & mask) || prp2 != buf_iova(b, done))
			return -1;
		return (long)len;
	}
	/* list: find its page among ours */
	uint64_t list = prp2;
	if (list & 7)
		return -1;
	for (;;) {
		uint64_t base = list & ~mask;
		uint32_t li = (uint32_t)((base - LIST_BASE) / ps);
		if (base < LIST_BASE || li >= nl)
			return -1;
		uint64_t *ents = lists[li];
		uint64_t n = (ps - (list & mask)) / 8;
		uint64_t i0 = (list & mask) / 8;
		for (uint64_t i = 0; i < n; i++) {
			uint64_t e = ents[i0 + i];
			if (e & mask)
				return -1;
			if (i == n - 1 && len - done > ps) {
				list = e;
				goto next;
			}
			if (e != buf_iova(b, done))
				return -1;
			size_t chunk = len - done < ps ? len - done : ps;
			done += chunk;
			if (done == len)
				return (long)done;
		}
		return -1; /* ran out of list without a chain */
next:;
	}
}

static void run(uint32_t ps, uint64_t start_off, size_t len)
{
	static uint64_t *lists_va[MAXL];
	static uint64_t lists_iova[MAXL];
	if (!lists_va[0] || lists_iova[1] - lists_iova[0] != ps) {
		for (int i = 0; i < MAXL; i++) {
			free(lists_va[i]);
			lists_va[i] = calloc(1, ps);
			lists_iova[i] = LIST_BASE + (uint64_t)i * ps;
		}
	}
	struct buf b = { 0x123400000ull + start_off, ps };
	uint32_t need = gpunvme_prp_list_pages(start_off % ps, len, ps);
	CHECK(need <= MAXL, "need %u list pages", need);
	uint64_t prp1, prp2;
	/* exactly `need` pages suffice... */
	struct gpunvme_prp_lists l = { lists_va, lists_iova, need };
	int rc = gpunvme_prp_build(buf_iova, &b, len, ps, &l, &prp1, &prp2);
	CHECK(rc == 0, "ps %u off %llu len %zu: rc %d with %u list pages", ps, (unsigned long long)start_off, len, rc,
	      need);
	if (rc)
		return;
	long w = walk(&b, prp1, prp2, len, lists_va, need);
	CHECK(w == (long)len, "ps %u off %llu len %zu: walk %ld", ps, (unsigned long long)start_off, len, w);
	/* ...and one fewer does not */
	if (need > 0) {
		struct gpunvme_prp_lists l2 = { lists_va, lists_iova, need - 1 };
		rc = gpunvme_prp_build(buf_iova, &b, len, ps, &l2, &prp1, &prp2);
		CHECK(rc == -E2BIG, "ps %u off %llu len %zu: %u pages accepted", ps, (unsigned long long)start_off, len,
		      need - 1);
	}
}

int main(void)
{
	static const uint32_t pss[] = { 4096, 65536 };
	for (unsigned k = 0; k < 2; k++) {
		uint32_t ps = pss[k];
		uint64_t per = ps / 8;
		/* offsets: start of page, dword, mid, last dword */
		uint64_t offs[] = { 0, 4, 512, ps / 2 + 12, ps - 4 };
		/* lengths around every boundary: within page 1, exactly page 2,
		 * one list, a full list, first chain, second chain */
		size_t bounds[] = { 4, ps, 2 * ps, 3 * ps, per * ps, (per + 1) * ps, (2 * per - 1) * ps,
				    (2 * per) * ps, (3 * per) * ps };
		for (unsigned o = 0; o < sizeof(offs) / sizeof(offs[0]); o++) {
			for (unsigned i = 0; i < sizeof(bounds) / sizeof(bounds[0]); i++) {
				for (long d = -8; d <= 8; d += 4) {
					long len = (long)bounds[i] + d;
					if (len <= 0 || (len & 3))
						continue;
					run(ps, offs[o], (size_t)len);
				}
			}
			/* a sweep of lengths in dword steps over the first pages */
			if (ps == 4096)
				for (size_t len = 4; len <= 3 * ps; len += 4)
					run(ps, offs[o], len);
		}
	}
	/* a start that is not dword aligned is refused */
	struct buf b = { 0x1002, 4096 };
	uint64_t *va[1] = { NULL };
	uint64_t iova[1] = { LIST_BASE };
	struct gpunvme_prp_lists l = { va, iova, 0 };
	uint64_t p1, p2;
	CHECK(gpunvme_prp_build(buf_iova, &b, 512, 4096, &l, &p1, &p2) == -EINVAL, "odd start accepted");
	CHECK(gpunvme_prp_build(buf_iova, &b, 0, 4096, &l, &p1, &p2) == -EINVAL, "zero length accepted");
	if (failures)
		return 1;
	printf("prp: all combinations mapped every byte correctly\n");
	return 0;
}
