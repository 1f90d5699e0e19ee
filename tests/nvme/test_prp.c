/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The PRP builder of the queue core (gpunvme/spec/queue.h, gpunvme_prp_fill, the
 * one the CPU queue pairs and the GPU queues use): every start offset class
 * and every length up to several chained list pages, for 4 KiB and 64 KiB
 * memory pages, buffers contiguous on the bus or scattered page by page
 * through an address table, checked
 * by an independent walker that follows the PRPs the way a controller does
 * (NVMe 1.4 §4.3) and verifies that byte i of the transfer lands at the bus
 * address of byte i of the buffer. Also: the list-page count formula is
 * exact (not just sufficient), and too few list pages is -E2BIG.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../harness/check.h"
#include "gpunvme/spec/queue.h"

/* The buffer: page p of it lives at a scattered bus address (pages are not
 * contiguous, so a builder that assumes contiguity fails). */
struct buf {
	uint64_t start;     /* bus address of byte 0 (contig), or its page offset */
	uint32_t ps;
	int contig;         /* one contiguous range instead of scattered pages */
};

static uint64_t page_bus(uint32_t ps, uint64_t p)
{
	return 0x7000000000ull + (p * 7919 % 100003) * ps;
}

static uint64_t buf_iova(const void *ctx, size_t off)
{
	const struct buf *b = ctx;
	if (b->contig)
		return b->start + off;
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

static uint32_t log2u(uint64_t v)
{
	uint32_t s = 0;
	while ((1ull << s) < v)
		s++;
	return s;
}

/* The builder's view of the buffer: contiguous, or a table of the bus
 * address of each page (the page's pieces in the table's terms). */
static void addr_of_buf(const struct buf *b, size_t len, struct gpunvme_prp_addr *a, uint64_t **table)
{
	*table = NULL;
	if (b->contig) {
		*a = (struct gpunvme_prp_addr){ b->start, NULL, 0, 0 };
		return;
	}
	uint64_t base = b->start & (b->ps - 1);
	size_t n = (size_t)((base + len) / b->ps + 2);
	*table = malloc(n * sizeof(**table));
	for (size_t k = 0; k < n; k++)
		(*table)[k] = page_bus(b->ps, k);
	*a = (struct gpunvme_prp_addr){ 0, *table, base, log2u(b->ps) };
}

static void run1(uint32_t ps, uint64_t start_off, size_t len, int contig)
{
	static uint64_t *block;
	static uint64_t *lists_va[MAXL];
	static uint64_t lists_iova[MAXL];
	static uint32_t block_ps;
	if (block_ps != ps) {
		/* list pages are contiguous for the builder: page k at
		 * block + k * ps / 8 entries */
		free(block);
		block = calloc(MAXL, ps);
		block_ps = ps;
		for (int i = 0; i < MAXL; i++) {
			lists_va[i] = block + (size_t)i * (ps / 8);
			lists_iova[i] = LIST_BASE + (uint64_t)i * ps;
		}
	}
	struct buf b = { (contig ? 0x123400000ull : 0) + start_off, ps, contig };
	uint32_t need = gpunvme_prp_list_pages(start_off % ps, len, ps);
	CHECK(need <= MAXL, "need %u list pages", need);
	uint64_t prp1, prp2, *table;
	struct gpunvme_prp_addr a;
	addr_of_buf(&b, len, &a, &table);
	/* exactly `need` pages suffice... */
	int rc = gpunvme_prp_fill(&a, 0, len, ps, block, lists_iova, need, &prp1, &prp2);
	CHECK(rc == 0, "ps %u off %llu len %zu: rc %d with %u list pages", ps, (unsigned long long)start_off, len, rc,
	      need);
	if (rc) {
		free(table);
		return;
	}
	long w = walk(&b, prp1, prp2, len, lists_va, need);
	CHECK(w == (long)len, "ps %u off %llu len %zu: walk %ld", ps, (unsigned long long)start_off, len, w);
	/* ...and one fewer does not */
	if (need > 0) {
		rc = gpunvme_prp_fill(&a, 0, len, ps, block, lists_iova, need - 1, &prp1, &prp2);
		CHECK(rc == -E2BIG, "ps %u off %llu len %zu: %u pages accepted", ps, (unsigned long long)start_off, len,
		      need - 1);
	}
	free(table);
}

static void run(uint32_t ps, uint64_t start_off, size_t len)
{
	run1(ps, start_off, len, 0);
	run1(ps, start_off, len, 1);
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
	const struct gpunvme_prp_addr odd = { 0x1002, NULL, 0, 0 };
	uint64_t iova[1] = { LIST_BASE };
	uint64_t p1, p2;
	CHECK(gpunvme_prp_fill(&odd, 0, 512, 4096, NULL, iova, 0, &p1, &p2) == -EINVAL, "odd start accepted");
	CHECK(gpunvme_prp_fill(&odd, 2, 0, 4096, NULL, iova, 0, &p1, &p2) == -EINVAL, "zero length accepted");
	if (!check_failures())
		printf("prp: all combinations mapped every byte correctly\n");
	return check_finish("test_prp");
}
