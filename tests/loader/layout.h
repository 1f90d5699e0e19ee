/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Test helper shared by the loader tests (CPU: test_loader.c, GPU:
 * tests/gpu/test_gpu_loader.cu): a namespace full of random bytes and a
 * file scattered over it in random fragments, with holes and unwritten
 * extents, plus the file's bytes built independently from the table.
 */
#ifndef GPUNVME_TEST_LOADER_LAYOUT_H
#define GPUNVME_TEST_LOADER_LAYOUT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrl/ctrl_emu.h" /* the emulator behind the controller */
#include "gpunvme/emu.h"
#include "gpunvme/extents.h"
#include "gpunvme/gpunvme.h"

#define FS_BLOCK 4096u

struct layout {
	struct gpunvme_extent ext[64];
	size_t n;
	uint64_t size;
	uint8_t *ref;           /* the file's bytes, from the namespace memory */
};

static inline uint64_t rng(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline struct gpunvme_ctrl *open_emu(const char *uri)
{
	struct gpunvme_ctrl *c = NULL;
	int rc = gpunvme_open(uri, NULL, &c);
	if (rc)
		fprintf(stderr, "open %s: %d %s\n", uri, rc, gpunvme_last_error());
	return c;
}

/* Random bytes all over the namespace; returns its memory. */
static inline uint8_t *fill_ns(struct gpunvme_ctrl *c, uint64_t seed, size_t *len)
{
	void *p = NULL;
	if (gpunvme_emu_ns_memory(gpunvme_ctrl_emu(c), 1, &p, len))
		return NULL;
	uint64_t *w = (uint64_t *)p;
	for (size_t i = 0; i < *len / 8; i++)
		w[i] = rng(&seed);
	return (uint8_t *)p;
}

/*
 * A file of `size` bytes in fragments of 1..12 file system blocks, placed
 * at shuffled, non-overlapping block slots of the namespace; every fifth
 * fragment is a hole and every seventh unwritten (both read as zeroes).
 */
static inline void make_layout(struct layout *L, const uint8_t *ns, size_t ns_len, uint64_t size, uint64_t seed)
{
	memset(L, 0, sizeof(*L));
	L->size = size;
	L->ref = (uint8_t *)calloc(1, size ? size : 1);
	uint64_t slots = ns_len / FS_BLOCK, next_slot = 1 + rng(&seed) % 7;
	uint64_t logical = 0;
	size_t k = 0;
	while (logical < size && L->n < 64) {
		uint64_t blocks = 1 + rng(&seed) % 12;
		uint64_t len = blocks * FS_BLOCK;
		k++;
		if (k % 5 == 0) { /* hole: no extent */
			logical += len;
			continue;
		}
		uint64_t phys_slot = next_slot;
		next_slot += blocks + 1 + rng(&seed) % 5; /* leave gaps between fragments */
		if (next_slot >= slots)
			break;
		struct gpunvme_extent *x = &L->ext[L->n++];
		x->logical = logical;
		x->physical = phys_slot * FS_BLOCK;
		x->length = len;
		x->flags = k % 7 == 0 ? GPUNVME_EXTENT_UNWRITTEN : 0;
		for (uint64_t b = 0; b < len && logical + b < size; b++)
			L->ref[logical + b] = x->flags ? 0 : ns[x->physical + b];
		logical += len;
	}
	if (logical < size) /* ran out of room: the rest is a hole */
		memset(L->ref + logical, 0, size - logical);
}

#endif
