/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Self-describing blocks for data-integrity tests (tests/io durability,
 * tests/soak): each block says which LBA and which write (generation) it
 * holds, its payload is a function of the two, and a CRC32C covers it, so
 * a reader tells a whole block of a known write from a torn, misplaced or
 * garbage one without keeping copies of the data.
 *
 * Layout: magic, lba, gen (8 bytes each, little endian), CRC32C (4),
 * 4 zero bytes, then the payload. The CRC covers every byte but itself.
 * Generation 0 means "never written": the block reads as all zeroes.
 */
#ifndef GPUNVME_TEST_BLOCKTAG_H
#define GPUNVME_TEST_BLOCKTAG_H

#include <stdint.h>
#include <string.h>

#include "base/base.h" /* gpunvme_crc32c: the library's one CRC32C */

#define BT_MAGIC 0x4152554456414e47ull
#define BT_MAX_BS 4096u

static inline uint32_t bt_crc(const uint8_t *b, uint32_t bs)
{
	return gpunvme_crc32c(gpunvme_crc32c(0, b, 24), b + 28, bs - 28);
}

/* Block bs bytes (64..4096, a multiple of 8) of generation gen at lba. */
static inline void bt_fill(uint8_t *b, uint32_t bs, uint64_t lba, uint64_t gen)
{
	uint64_t h[3] = { BT_MAGIC, lba, gen };
	memcpy(b, h, sizeof(h));
	memset(b + 24, 0, 8);
	uint64_t s = lba * 0x100000001b3ull ^ gen;
	for (uint32_t o = 32; o < bs; o += 8) {
		uint64_t z = (s += 0x9e3779b97f4a7c15ull);
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		z ^= z >> 31;
		memcpy(b + o, &z, 8);
	}
	uint32_t crc = bt_crc(b, bs);
	memcpy(b + 24, &crc, 4);
}

enum bt_kind {
	BT_WHOLE = 0,   /* a whole block of generation *gen (0: all zeroes) */
	BT_TORN = 1,    /* right magic and LBA, but not one write's bytes */
	BT_FOREIGN = 2, /* a block of another LBA */
	BT_GARBAGE = 3, /* no block header at all */
};

/* What block b, read at lba, holds. */
static inline enum bt_kind bt_parse(const uint8_t *b, uint32_t bs, uint64_t lba, uint64_t *gen)
{
	uint8_t want[BT_MAX_BS];
	uint64_t h[3];
	*gen = 0;
	uint32_t i = 0;
	while (i < bs && b[i] == 0)
		i++;
	if (i == bs)
		return BT_WHOLE;
	memcpy(h, b, sizeof(h));
	if (h[0] != BT_MAGIC)
		return BT_GARBAGE;
	if (h[1] != lba)
		return BT_FOREIGN;
	*gen = h[2];
	if (h[2] == 0)
		return BT_GARBAGE;
	bt_fill(want, bs, lba, h[2]);
	return memcmp(want, b, bs) == 0 ? BT_WHOLE : BT_TORN;
}

#endif
