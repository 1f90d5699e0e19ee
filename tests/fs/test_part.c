/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme_part_list and gpunvme_fs_locate on hand-built tables in memory:
 * a valid GPT (512- and 4096-byte LBAs, names, GUID text), then hostile
 * headers (entry count huge, entry size weird, entries past the device,
 * header size past the block, CRCs wrong) and MBRs (entries past the end,
 * an EBR chain that loops). Each must give a clear error, never a crash,
 * a huge allocation or a hang. The real-tool images are in test_part.sh.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../harness/check.h"
#include "gpunvme/extents.h"
#include "gpunvme/part.h"

static uint8_t *g_img;

static int mem_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	(void)ctx;
	memcpy(buf, g_img + off, len);
	return 0;
}

static struct gpunvme_blkdev mem_dev(uint64_t size, uint32_t lba)
{
	free(g_img);
	g_img = calloc(1, (size_t)size);
	return (struct gpunvme_blkdev){ .read = mem_read, .size = size, .lba_size = lba };
}

static void p32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> 8 * i);
}

static void p64(uint8_t *p, uint64_t v)
{
	p32(p, (uint32_t)v);
	p32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t crc32(const uint8_t *p, size_t n)
{
	uint32_t c = ~0u;
	while (n--) {
		c ^= *p++;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
	}
	return ~c;
}

/* The Linux filesystem data type GUID 0FC63DAF-8483-4772-8E79-3D69D8477DE4
 * as stored (first three fields little-endian). */
static const uint8_t linux_guid[16] = { 0xaf, 0x3d, 0xc6, 0x0f, 0x83, 0x84, 0x72, 0x47,
					0x8e, 0x79, 0x3d, 0x69, 0xd8, 0x47, 0x7d, 0xe4 };

/* A GPT header at `lba` with `count` entries of `esz` bytes at `elba`;
 * entry 0 (and entry 2 if count > 2) describe partitions. */
static void gpt(uint32_t bs, uint64_t lba, uint64_t elba, uint32_t count, uint32_t esz, uint64_t nblk)
{
	uint8_t *h = g_img + lba * bs;
	memset(h, 0, bs);
	memcpy(h, "EFI PART", 8);
	p32(h + 8, 0x10000);
	p32(h + 12, 92);
	p64(h + 24, lba);
	p64(h + 32, lba == 1 ? nblk - 1 : 1);
	p64(h + 40, 34);
	p64(h + 48, nblk - 34);
	p64(h + 72, elba);
	p32(h + 80, count);
	p32(h + 84, esz);
	uint64_t abytes = (uint64_t)count * esz;
	if (elba * bs + abytes <= nblk * bs && esz >= 128 && abytes <= (1u << 20)) {
		uint8_t *a = g_img + elba * bs;
		memset(a, 0, (size_t)abytes);
		memcpy(a, linux_guid, 16);
		p64(a + 32, 40);
		p64(a + 40, 99);
		/* "wéights" as UTF-16LE */
		uint16_t u[] = { 'w', 0xe9, 'i', 'g', 'h', 't', 's' };
		for (unsigned i = 0; i < 7; i++) {
			a[56 + 2 * i] = (uint8_t)u[i];
			a[57 + 2 * i] = (uint8_t)(u[i] >> 8);
		}
		if (count > 2) {
			memcpy(a + 2 * esz, linux_guid, 16);
			p64(a + 2 * esz + 32, 100);
			p64(a + 2 * esz + 40, 199);
		}
		p32(h + 88, crc32(a, (size_t)abytes));
	}
	p32(h + 16, crc32(h, 92));
}

static void rehash(uint32_t bs, uint64_t lba)
{
	uint8_t *h = g_img + lba * bs;
	p32(h + 16, 0);
	p32(h + 16, crc32(h, 92));
}

static void pmbr(void)
{
	g_img[446 + 4] = 0xee;
	p32(g_img + 446 + 8, 1);
	p32(g_img + 446 + 12, 0xffffffffu);
	g_img[510] = 0x55;
	g_img[511] = 0xaa;
}

static int list(struct gpunvme_blkdev *d, struct gpunvme_partition **p, size_t *n, const char **scheme)
{
	*p = NULL;
	*n = 0;
	return gpunvme_part_list(d, p, n, scheme);
}

TEST_CASE(gpt_valid)
{
	for (uint32_t bs = 512; bs <= 4096; bs *= 8) {
		uint64_t nblk = 256;
		struct gpunvme_blkdev d = mem_dev(nblk * bs, bs);
		pmbr();
		gpt(bs, 1, 2, 128, 128, nblk);
		gpt(bs, nblk - 1, nblk - 33, 128, 128, nblk);
		struct gpunvme_partition *p;
		size_t n;
		const char *s;
		REQUIRE_OK(list(&d, &p, &n, &s));
		CHECK_STR(s, "gpt");
		REQUIRE_EQ(n, 2);
		CHECK_EQ(p[0].number, 1);
		CHECK_EQ(p[0].offset, 40ull * bs);
		CHECK_EQ(p[0].size, 60ull * bs);
		CHECK_STR(p[0].type, "gpt:0fc63daf-8483-4772-8e79-3d69d8477de4");
		CHECK_STR(p[0].name, "w\xc3\xa9ights");
		/* the entry index gives the number, gaps included (Linux sda3) */
		CHECK_EQ(p[1].number, 3);
		CHECK_EQ(p[1].offset, 100ull * bs);
		free(p);
		/* primary corrupt: the backup, with a note */
		g_img[bs + 20] ^= 1;
		REQUIRE_OK(list(&d, &p, &n, &s));
		CHECK_EQ(n, 2);
		CHECK_LAST_ERROR("backup GPT");
		free(p);
		/* both corrupt */
		g_img[(nblk - 1) * bs + 20] ^= 1;
		CHECK_EQ(list(&d, &p, &n, &s), -EUCLEAN);
		CHECK_LAST_ERROR("both GPT headers are corrupt");
		/* the entry array's CRC is checked too */
		gpt(bs, 1, 2, 128, 128, nblk);
		g_img[2 * bs + 40] ^= 1;
		g_img[(nblk - 1) * bs] = 0; /* no backup */
		CHECK_EQ(list(&d, &p, &n, &s), -EUCLEAN);
		CHECK_LAST_ERROR("entry array CRC32 mismatch");
	}
	return 0;
}

/* A valid GPT with no partition entries (NumberOfPartitionEntries 0, or
 * every entry unused): an empty list, no error. Found by fuzz_part: the
 * empty list was sorted through a NULL pointer (undefined behaviour). */
TEST_CASE(gpt_empty)
{
	for (uint32_t bs = 512; bs <= 4096; bs *= 8) {
		uint64_t nblk = 256;
		struct gpunvme_blkdev d = mem_dev(nblk * bs, bs);
		pmbr();
		gpt(bs, 1, 2, 0, 128, nblk);
		struct gpunvme_partition *p;
		size_t n;
		const char *s;
		REQUIRE_OK(list(&d, &p, &n, &s));
		CHECK_STR(s, "gpt");
		CHECK_EQ(n, 0);
		CHECK(p == NULL);
		uint64_t off = 1;
		CHECK(gpunvme_fs_locate(&d, 0, &off) < 0);
		CHECK_LAST_ERROR("gpt partition table with 0 partitions");
	}
	return 0;
}

TEST_CASE(gpt_hostile)
{
	const uint64_t nblk = 256;
	struct gpunvme_blkdev d = mem_dev(nblk * 512, 512);
	struct gpunvme_partition *p;
	size_t n;
	const char *s;
	static const struct {
		uint32_t count, esz;
		const char *msg;
	} bad[] = {
		{ 0xffffffffu, 128, "do not fit the device" },     /* count huge */
		{ 1u << 20, 128, "do not fit the device" },        /* 128 MiB of entries on a 128 KiB disk */
		{ 128, 100, "SizeOfPartitionEntry 100" },           /* below 128 */
		{ 128, 200, "SizeOfPartitionEntry 200" },           /* not 128 * 2^n */
		{ 4, 1024, "SizeOfPartitionEntry 1024" },           /* past the block */
		{ 4, 0, "SizeOfPartitionEntry 0" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(g_img, 0, nblk * 512);
		gpt(512, 1, 2, bad[i].count, bad[i].esz, nblk);
		CHECK_EQ(list(&d, &p, &n, &s), -EUCLEAN);
		CHECK_LAST_ERROR(bad[i].msg);
	}
	/* entry array starting past the device */
	memset(g_img, 0, nblk * 512);
	gpt(512, 1, 2, 4, 128, nblk);
	p64(g_img + 512 + 72, 1ull << 40);
	rehash(512, 1);
	CHECK_EQ(list(&d, &p, &n, &s), -EUCLEAN);
	CHECK_LAST_ERROR("do not fit the device");
	/* a partition past the device end (and past LastUsableLBA) */
	memset(g_img, 0, nblk * 512);
	gpt(512, 1, 2, 4, 128, nblk);
	p64(g_img + 2 * 512 + 40, 1ull << 50);
	p32(g_img + 512 + 88, crc32(g_img + 2 * 512, 4 * 128));
	rehash(512, 1);
	CHECK_EQ(list(&d, &p, &n, &s), -EUCLEAN);
	CHECK_LAST_ERROR("outside the usable");
	/* start after end */
	memset(g_img, 0, nblk * 512);
	gpt(512, 1, 2, 4, 128, nblk);
	p64(g_img + 2 * 512 + 32, 120);
	p32(g_img + 512 + 88, crc32(g_img + 2 * 512, 4 * 128));
	rehash(512, 1);
	CHECK_EQ(list(&d, &p, &n, &s), -EUCLEAN);
	/* HeaderSize past the block; a header that says it is elsewhere */
	memset(g_img, 0, nblk * 512);
	gpt(512, 1, 2, 4, 128, nblk);
	p32(g_img + 512 + 12, 4096);
	rehash(512, 1);
	CHECK_EQ(list(&d, &p, &n, &s), -EUCLEAN);
	CHECK_LAST_ERROR("HeaderSize 4096");
	memset(g_img, 0, nblk * 512);
	gpt(512, 1, 2, 4, 128, nblk);
	p64(g_img + 512 + 24, 7);
	rehash(512, 1);
	CHECK_EQ(list(&d, &p, &n, &s), -EUCLEAN);
	CHECK_LAST_ERROR("says it is at LBA 7");
	/* usable range past the device */
	memset(g_img, 0, nblk * 512);
	gpt(512, 1, 2, 4, 128, nblk);
	p64(g_img + 512 + 48, 1ull << 60);
	rehash(512, 1);
	CHECK_EQ(list(&d, &p, &n, &s), -EUCLEAN);
	/* weird LBA sizes are refused, tiny devices have no table */
	d.lba_size = 0;
	CHECK_EQ(list(&d, &p, &n, &s), -EINVAL);
	d.lba_size = 1000;
	CHECK_EQ(list(&d, &p, &n, &s), -EINVAL);
	d = mem_dev(512, 512);
	CHECK_OK(list(&d, &p, &n, &s));
	CHECK_STR(s, "none");
	CHECK_EQ(n, 0);
	/* a protective MBR with no GPT at all */
	d = mem_dev(nblk * 512, 512);
	pmbr();
	CHECK_EQ(list(&d, &p, &n, &s), -EUCLEAN);
	CHECK_LAST_ERROR("protective MBR");
	return 0;
}

static void mbr_entry(uint8_t *sec, int slot, uint8_t type, uint32_t start, uint32_t len)
{
	uint8_t *e = sec + 446 + 16 * slot;
	e[4] = type;
	p32(e + 8, start);
	p32(e + 12, len);
	sec[510] = 0x55;
	sec[511] = 0xaa;
}

TEST_CASE(mbr)
{
	const uint64_t nblk = 4096;
	struct gpunvme_blkdev d = mem_dev(nblk * 512, 512);
	struct gpunvme_partition *p;
	size_t n;
	const char *s;
	/* 1: 0x83; 2: extended at 1000 with logicals at 1000+10 and (EBR at
	 * 1000+500) 1500+10 */
	mbr_entry(g_img, 0, 0x83, 100, 800);
	mbr_entry(g_img, 1, 0x0f, 1000, 2000);
	mbr_entry(g_img + 1000 * 512, 0, 0x83, 10, 400);
	mbr_entry(g_img + 1000 * 512, 1, 0x05, 500, 500);
	mbr_entry(g_img + 1500 * 512, 0, 0x8e, 10, 300);
	REQUIRE_OK(list(&d, &p, &n, &s));
	CHECK_STR(s, "mbr");
	REQUIRE_EQ(n, 3);
	CHECK_EQ(p[0].number, 1);
	CHECK_EQ(p[1].number, 5);
	CHECK_EQ(p[1].offset, 1010ull * 512);
	CHECK_EQ(p[1].size, 400ull * 512);
	CHECK_EQ(p[2].number, 6);
	CHECK_EQ(p[2].offset, 1510ull * 512);
	CHECK_STR(p[2].type, "mbr:0x8e");
	CHECK_STR(p[2].name, "");
	free(p);
	/* --partition past the table */
	uint64_t off;
	CHECK_EQ(gpunvme_fs_locate(&d, 9, &off), -ENOENT);
	CHECK_LAST_ERROR("no partition 9; the mbr table has: 1: mbr:0x83");
	CHECK_OK(gpunvme_fs_locate(&d, 6, &off));
	CHECK_EQ(off, 1510ull * 512);
	CHECK_EQ(gpunvme_fs_locate(&d, 0, &off), -EINVAL);
	CHECK_LAST_ERROR("give --partition N or --offset BYTES");

	/* an EBR linking to itself: a loop, refused */
	mbr_entry(g_img + 1500 * 512, 1, 0x05, 500, 100);
	CHECK_EQ(list(&d, &p, &n, &s), -EUCLEAN);
	CHECK_LAST_ERROR("a loop");
	/* an EBR linking back to an earlier one */
	mbr_entry(g_img + 1500 * 512, 1, 0x05, 200, 100);
	CHECK_EQ(list(&d, &p, &n, &s), -EUCLEAN);
	/* an EBR link outside the extended partition */
	mbr_entry(g_img + 1500 * 512, 1, 0x05, 0x7fffffff, 100);
	CHECK_EQ(list(&d, &p, &n, &s), -EUCLEAN);
	/* a chain of many EBRs, each one block on: bounded */
	memset(g_img, 0, nblk * 512);
	mbr_entry(g_img, 0, 0x05, 100, 3900);
	for (uint32_t k = 0; k < 1000; k++) {
		mbr_entry(g_img + (100 + 2 * k) * 512, 0, 0x83, 1, 1);
		mbr_entry(g_img + (100 + 2 * k) * 512, 1, 0x05, 2 * (k + 1), 2);
	}
	CHECK_EQ(list(&d, &p, &n, &s), -EUCLEAN);
	CHECK_LAST_ERROR("more than 256 logical partitions");
	/* a primary past the end of the device */
	memset(g_img, 0, nblk * 512);
	mbr_entry(g_img, 2, 0x83, 100, 0xffffff00u);
	CHECK_EQ(list(&d, &p, &n, &s), -EUCLEAN);
	CHECK_LAST_ERROR("runs past the end of the device");
	/* a logical past its extended partition */
	memset(g_img, 0, nblk * 512);
	mbr_entry(g_img, 0, 0x05, 100, 100);
	mbr_entry(g_img + 100 * 512, 0, 0x83, 10, 1000);
	CHECK_EQ(list(&d, &p, &n, &s), -EUCLEAN);
	CHECK_LAST_ERROR("runs past its extended partition");
	/* status bytes other than 0x00/0x80: not an MBR (a boot sector) */
	memset(g_img, 0, nblk * 512);
	mbr_entry(g_img, 0, 0x83, 100, 100);
	g_img[446] = 0x12;
	CHECK_OK(list(&d, &p, &n, &s));
	CHECK_STR(s, "none");
	CHECK_EQ(gpunvme_fs_locate(&d, 0, &off), -EINVAL);
	CHECK_LAST_ERROR("no partition table (GPT or MBR)");
	CHECK_EQ(gpunvme_fs_locate(&d, 1, &off), -ENOENT);
	free(g_img);
	g_img = NULL;
	return 0;
}

int main(int argc, char **argv)
{
	return check_main(argc, argv);
}
