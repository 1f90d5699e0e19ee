/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * md superblocks built here field by field as md_p.h lays them out (v1.x
 * and 0.90), on RAM members: assembly in any member order, RAID0 placement
 * for one zone and for several (both layouts, against hand-worked tables),
 * linear, per-member extents, and every refusal with its message.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpunvme/gpunvme.h"
#include "gpunvme/md.h"

static int fails;
#define CHECK(c)                                                                    \
	do {                                                                        \
		if (!(c)) {                                                         \
			fprintf(stderr, "%s:%d: FAIL %s\n", __FILE__, __LINE__, #c); \
			fails++;                                                    \
		}                                                                   \
	} while (0)

struct ram {
	uint8_t *p;
	uint64_t size;
};
static int ram_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	struct ram *r = ctx;
	if (off > r->size || len > r->size - off)
		return -EIO;
	memcpy(buf, r->p + off, len);
	return 0;
}
static void ram_close(void *ctx)
{
	(void)ctx;
}

#define MAXM 4
static struct ram rams[MAXM];
static struct gpunvme_blkdev devs[MAXM];

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> 8 * i);
}
static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

struct v1 {
	int minor;            /* 0, 1, 2 */
	int32_t level;
	uint32_t layout, feat, chunk_sectors, raid_disks, role;
	uint64_t data_offset, data_size, events;
	uint8_t uuid_tag;
	int bad_csum;
	uint32_t major;
};

/* A v1 superblock at its place on member m (size bytes). */
static void make_v1(int m, uint64_t size, const struct v1 *s)
{
	struct ram *r = &rams[m];
	free(r->p);
	r->p = calloc(1, size);
	r->size = size;
	uint64_t sec = s->minor == 2 ? 8 : s->minor == 1 ? 0 : ((size / 512 - 16) & ~7ull);
	uint8_t *b = r->p + sec * 512;
	put32(b, 0xa92b4efc);
	put32(b + 4, s->major ? s->major : 1);
	put32(b + 8, s->feat);
	for (int i = 0; i < 16; i++)
		b[16 + i] = (uint8_t)(s->uuid_tag + i);
	snprintf((char *)b + 32, 32, "host:test");
	put32(b + 72, (uint32_t)s->level);
	put32(b + 76, s->layout);
	put64(b + 80, s->data_size);
	put32(b + 88, s->chunk_sectors);
	put32(b + 92, s->raid_disks);
	put64(b + 128, s->data_offset);
	put64(b + 136, s->data_size);
	put64(b + 144, sec);
	put32(b + 160, (uint32_t)m); /* dev_number */
	put64(b + 200, s->events);
	put32(b + 220, MAXM);        /* max_dev */
	for (int i = 0; i < MAXM; i++) {
		b[256 + 2 * i] = 0xff;
		b[257 + 2 * i] = 0xff;
	}
	b[256 + 2 * m] = (uint8_t)s->role;
	b[257 + 2 * m] = (uint8_t)(s->role >> 8);
	uint64_t sum = 0;
	for (size_t i = 0; i < 256 + 2 * MAXM; i += 4)
		sum += (uint32_t)b[i] | (uint32_t)b[i + 1] << 8 | (uint32_t)b[i + 2] << 16 | (uint32_t)b[i + 3] << 24;
	put32(b + 216, (uint32_t)((sum & 0xffffffff) + (sum >> 32)) + (uint32_t)s->bad_csum);
	devs[m] = (struct gpunvme_blkdev){ ram_read, ram_close, r, size, 512, NULL };
}

/* A 0.90 superblock at the end of member m. */
static void make_v0(int m, uint64_t size, int32_t level, uint32_t chunk, uint32_t raid_disks, uint32_t slot,
		    uint32_t state, uint32_t minor)
{
	struct ram *r = &rams[m];
	free(r->p);
	r->p = calloc(1, size);
	r->size = size;
	uint64_t sec = ((size / 512) & ~127ull) - 128;
	uint8_t *b = r->p + sec * 512;
	put32(b, 0xa92b4efc);
	put32(b + 4, 0);
	put32(b + 8, minor);
	put32(b + 5 * 4, 0x11111111);
	put32(b + 7 * 4, (uint32_t)level);
	put32(b + 10 * 4, raid_disks);
	put32(b + 13 * 4, 0x22222222);
	put32(b + 64 * 4, 0);
	put32(b + 65 * 4, chunk);
	put32(b + (992 + 3) * 4, slot);
	put32(b + (992 + 4) * 4, state);
	uint64_t sum = 0;
	for (size_t i = 0; i < 4096; i += 4)
		sum += (uint32_t)b[i] | (uint32_t)b[i + 1] << 8 | (uint32_t)b[i + 2] << 16 | (uint32_t)b[i + 3] << 24;
	put32(b + 38 * 4, (uint32_t)((sum & 0xffffffff) + (sum >> 32)));
	devs[m] = (struct gpunvme_blkdev){ ram_read, ram_close, r, size, 512, NULL };
}

/* every 512-byte sector of member data tagged (member, member byte) */
static void tag(int m)
{
	for (uint64_t o = 0; o + 16 <= rams[m].size; o += 512) {
		uint8_t *p = rams[m].p + o;
		if (p[0] == 0xfc && p[1] == 0x4e) /* keep superblocks */
			continue;
		put32(p, 0x7a7a0000u | (uint32_t)m);
		put64(p + 4, o);
	}
}

static int expect_fail(int n, int want_rc, const char *phrase)
{
	struct gpunvme_md *md = NULL;
	int rc = gpunvme_md_assemble(devs, NULL, (size_t)n, &md);
	if (rc != want_rc || !strstr(gpunvme_last_error(), phrase)) {
		fprintf(stderr, "  want %d '%s', got %d '%s'\n", want_rc, phrase, rc, gpunvme_last_error());
		gpunvme_md_close(md);
		return 0;
	}
	return 1;
}

#define K 1024ull
#define SZ (1 * K * K)

static void test_raid0_one_zone(int minor)
{
	/* three 1 MiB members, 16 KiB chunks, data from 8 KiB (v1.1/1.2) or 0 */
	struct v1 s = { .minor = minor, .level = 0, .chunk_sectors = 32, .raid_disks = 3, .events = 5 };
	s.data_offset = minor ? 16 : 0;
	s.data_size = (SZ - 64 * K) / 512;
	/* given in the order slot 2, 0, 1 */
	const uint32_t role_of[3] = { 2, 0, 1 };
	for (int m = 0; m < 3; m++) {
		s.role = role_of[m];
		make_v1(m, SZ, &s);
		tag(m);
	}
	struct gpunvme_md *md = NULL;
	CHECK(gpunvme_md_assemble(devs, NULL, 3, &md) == 0);
	if (!md)
		return;
	struct gpunvme_md_info mi;
	gpunvme_md_info(md, &mi);
	uint64_t per = (SZ - 64 * K) / (16 * K) * 16 * K;
	CHECK(mi.size == 3 * per);
	CHECK(mi.zones == 1 && mi.chunk_bytes == 16 * K && mi.level == 0);
	/* array chunk c lives on slot c % 3, row c / 3 */
	for (uint64_t c = 0; c < mi.size / (16 * K); c++) {
		uint32_t mem = 0;
		uint64_t moff = 0, run = 0;
		CHECK(gpunvme_md_map(md, c * 16 * K + 512, &mem, &moff, &run) == 0);
		uint32_t slot = (uint32_t)(c % 3);
		CHECK(role_of[mem] == slot);
		CHECK(moff == s.data_offset * 512 + c / 3 * 16 * K + 512);
		CHECK(run == 16 * K - 512);
	}
	/* the array as a block source: bytes across a chunk boundary */
	struct gpunvme_blkdev a;
	gpunvme_md_blkdev(md, &a);
	uint8_t buf[1024];
	CHECK(a.read(a.ctx, 16 * K - 512, buf, 1024) == 0);
	uint32_t m0 = buf[0] | buf[1] << 8, m1 = buf[512] | buf[513] << 8;
	CHECK(role_of[m0] == 0 && role_of[m1] == 1);
	CHECK(a.read(a.ctx, mi.size - 512, buf, 1024) == -EIO);
	CHECK(gpunvme_md_map(md, mi.size, NULL, NULL, NULL) == -ERANGE);
	/* slot -> member, its data offset and the bytes it gives */
	for (uint32_t slot = 0; slot < 3; slot++) {
		uint32_t mem = 99;
		uint64_t doff = 0, bytes = 0;
		CHECK(gpunvme_md_member(md, slot, &mem, &doff, &bytes) == 0);
		CHECK(mem < 3 && role_of[mem] == slot);
		CHECK(doff == s.data_offset * 512 && bytes == per);
	}
	CHECK(gpunvme_md_member(md, 3, NULL, NULL, NULL) == -ERANGE);
	/* per-member extents of a file: 40 KiB at array byte 8 KiB, then a hole, then 4 KiB */
	struct gpunvme_extent ext[2] = { { 0, 8 * K, 40 * K, 0 }, { 64 * K, 100 * K, 4 * K, 0 } };
	struct gpunvme_md_extent *pe;
	size_t np;
	CHECK(gpunvme_md_split_extents(md, ext, 2, &pe, &np) == 0);
	CHECK(np == 4); /* 8K on chunk 0, 16K chunk 1, 16K chunk 2, 4K chunk 6 */
	if (np == 4) {
		CHECK(pe[0].length == 8 * K && pe[1].length == 16 * K && pe[2].length == 16 * K && pe[3].length == 4 * K);
		CHECK(role_of[pe[1].member] == 1 && role_of[pe[2].member] == 2 && role_of[pe[3].member] == 0);
	}
	free(pe);
	for (uint32_t m = 0; m < 3; m++) {
		struct gpunvme_extent *me;
		size_t nme;
		CHECK(gpunvme_md_member_extents(md, ext, 2, 70 * K, m, &me, &nme) == 0);
		/* together the members cover each file byte exactly once */
		uint64_t own = 0, hole_fill = 0, at = 0;
		for (size_t i = 0; i < nme; i++) {
			if (!(me[i].flags & GPUNVME_EXTENT_ELSEWHERE))
				own += me[i].length;
			if (me[i].logical > at)
				hole_fill += me[i].logical - at;
			at = me[i].logical + me[i].length;
		}
		if (at < 70 * K)
			hole_fill += 70 * K - at;
		uint64_t want_own = role_of[m] == 0 ? 8 * K + 4 * K : 16 * K;
		CHECK(own == want_own);
		CHECK(hole_fill == (role_of[m] == 0 && m == 0 ? 24 * K + 2 * K : m == 0 ? 26 * K : 0));
		free(me);
	}
	gpunvme_md_close(md);
}

static void test_raid0_zones(uint32_t layout)
{
	/* chunks of 4 KiB; members of 1, 3, 3 chunks of data (slots 0, 1, 2):
	 * zone 0 = array chunks 0..2 over all three, zone 1 = chunks 3..6
	 * over slots 1 and 2 from member chunk 1 */
	struct v1 s = { .minor = 2, .level = 0, .chunk_sectors = 8, .raid_disks = 3, .data_offset = 16,
			.feat = 0x1000, .layout = layout };
	const uint64_t chunks[3] = { 1, 3, 3 };
	for (int m = 0; m < 3; m++) {
		s.role = (uint32_t)m;
		s.data_size = chunks[m] * 8 + 3; /* not a chunk multiple: rounded down */
		make_v1(m, 64 * K, &s);
	}
	struct gpunvme_md *md = NULL;
	CHECK(gpunvme_md_assemble(devs, NULL, 3, &md) == 0);
	if (!md)
		return;
	struct gpunvme_md_info mi;
	gpunvme_md_info(md, &mi);
	CHECK(mi.zones == 2 && mi.size == 7 * 4 * K && mi.layout == layout);
	/* {slot, member chunk} per array chunk, worked by hand from raid0.c */
	static const int alt[7][2] = { { 0, 0 }, { 1, 0 }, { 2, 0 }, { 1, 1 }, { 2, 1 }, { 1, 2 }, { 2, 2 } };
	static const int orig[7][2] = { { 0, 0 }, { 1, 0 }, { 2, 0 }, { 2, 1 }, { 1, 1 }, { 2, 2 }, { 1, 2 } };
	for (uint64_t c = 0; c < 7; c++) {
		uint32_t mem = 0;
		uint64_t moff = 0;
		CHECK(gpunvme_md_map(md, c * 4 * K + 100, &mem, &moff, NULL) == 0);
		const int *w = layout == 2 ? alt[c] : orig[c];
		CHECK(mem == (uint32_t)w[0]);
		CHECK(moff == 8 * K + (uint64_t)w[1] * 4 * K + 100);
	}
	gpunvme_md_close(md);
	/* no layout recorded: refused as the kernel does */
	s.feat = 0;
	for (int m = 0; m < 3; m++) {
		s.role = (uint32_t)m;
		s.data_size = chunks[m] * 8;
		make_v1(m, 64 * K, &s);
	}
	CHECK(expect_fail(3, -ENOTSUP, "--update=layout-original"));
}

static void test_linear_and_v10(void)
{
	/* linear, metadata 1.0 (superblock at the end, data from 0), members of
	 * 100, 40 and 60 KiB of data in slot order 1, 2, 0 */
	const uint64_t data[3] = { 100 * K, 40 * K, 60 * K };
	const uint32_t role_of[3] = { 1, 2, 0 };
	for (int m = 0; m < 3; m++) {
		struct v1 s = { .minor = 0, .level = -1, .raid_disks = 3, .role = role_of[m],
				.data_size = data[m] / 512 };
		make_v1(m, data[m] + 16 * K, &s);
	}
	struct gpunvme_md *md = NULL;
	CHECK(gpunvme_md_assemble(devs, NULL, 3, &md) == 0);
	if (!md)
		return;
	struct gpunvme_md_info mi;
	gpunvme_md_info(md, &mi);
	CHECK(mi.size == 200 * K && mi.level == GPUNVME_MD_LEVEL_LINEAR && !strcmp(mi.version, "1.0"));
	uint32_t mem = 0;
	uint64_t moff = 0, run = 0;
	/* slot 0 = member 2 (60 KiB), slot 1 = member 0 (100 KiB), slot 2 = member 1 */
	CHECK(gpunvme_md_map(md, 10, &mem, &moff, &run) == 0 && mem == 2 && moff == 10 && run == 60 * K - 10);
	CHECK(gpunvme_md_map(md, 60 * K, &mem, &moff, &run) == 0 && mem == 0 && moff == 0 && run == 100 * K);
	CHECK(gpunvme_md_map(md, 199 * K, &mem, &moff, &run) == 0 && mem == 1 && moff == 39 * K && run == K);
	gpunvme_md_close(md);
}

static void test_v090(void)
{
	/* 0.90 RAID0 of two 2 MiB members, 64 KiB chunks: data up to the
	 * superblock, 2 MiB - 64 KiB each */
	make_v0(0, 2 * SZ, 0, 64 * 1024, 2, 1, 6, 90);
	make_v0(1, 2 * SZ, 0, 64 * 1024, 2, 0, 6, 90);
	struct gpunvme_md *md = NULL;
	CHECK(gpunvme_md_assemble(devs, NULL, 2, &md) == 0);
	if (md) {
		struct gpunvme_md_info mi;
		gpunvme_md_info(md, &mi);
		CHECK(mi.size == 2 * (2 * SZ - 64 * K) && !strcmp(mi.version, "0.90"));
		uint32_t mem = 0;
		uint64_t moff = 0;
		CHECK(gpunvme_md_map(md, 64 * K + 5, &mem, &moff, NULL) == 0 && mem == 0 && moff == 5);
		gpunvme_md_close(md);
	}
	struct gpunvme_md_super sb;
	CHECK(gpunvme_md_examine(&devs[0], &sb) == 0 && sb.slot == 1 && sb.data_bytes == 2 * SZ - 64 * K);
	/* reshaping (minor 91), faulty, spare */
	make_v0(0, 2 * SZ, 0, 64 * 1024, 2, 1, 6, 91);
	CHECK(expect_fail(2, -ENOTSUP, "reshape"));
	make_v0(0, 2 * SZ, 0, 64 * 1024, 2, 1, 1, 90);
	CHECK(expect_fail(2, -EINVAL, "faulty"));
	make_v0(0, 2 * SZ, 0, 64 * 1024, 2, 1, 0, 90);
	CHECK(expect_fail(2, -EINVAL, "spare"));
	/* raid5 over 0.90 */
	make_v0(0, 2 * SZ, 5, 64 * 1024, 2, 1, 6, 90);
	make_v0(1, 2 * SZ, 5, 64 * 1024, 2, 0, 6, 90);
	CHECK(expect_fail(2, -ENOTSUP, "raid5"));
	/* corrupt checksum */
	make_v0(0, 2 * SZ, 0, 64 * 1024, 2, 1, 6, 90);
	rams[0].p[((2 * SZ / 512 & ~127ull) - 128) * 512 + 40]++;
	CHECK(expect_fail(2, -EUCLEAN, "checksum"));
}

static void test_refusals(void)
{
	struct v1 s = { .minor = 2, .level = 0, .chunk_sectors = 32, .raid_disks = 2, .data_offset = 16,
			.data_size = 1000, .events = 9 };
	for (int lvl = 1; lvl <= 10; lvl++) {
		if (lvl == 2 || lvl == 3 || (lvl > 6 && lvl < 10))
			continue;
		s.level = lvl;
		for (int m = 0; m < 2; m++) {
			s.role = (uint32_t)m;
			make_v1(m, SZ, &s);
		}
		char want[16];
		snprintf(want, sizeof(want), "is raid%d", lvl);
		CHECK(expect_fail(2, -ENOTSUP, want));
	}
	s.level = 0;
	/* missing member */
	s.role = 1;
	make_v1(0, SZ, &s);
	CHECK(expect_fail(1, -ENODEV, "slot 0 missing"));
	/* two arrays */
	s.role = 0;
	make_v1(0, SZ, &s);
	s.role = 1;
	s.uuid_tag = 7;
	make_v1(1, SZ, &s);
	CHECK(expect_fail(2, -EINVAL, "give the members of one array"));
	s.uuid_tag = 0;
	/* same slot twice */
	s.role = 0;
	make_v1(1, SZ, &s);
	CHECK(expect_fail(2, -EINVAL, "both slot 0"));
	/* stale member */
	s.role = 1;
	s.events = 8;
	make_v1(1, SZ, &s);
	CHECK(expect_fail(2, -EINVAL, "stale"));
	s.events = 9;
	/* reshape in progress */
	s.feat = 0x4;
	make_v1(1, SZ, &s);
	CHECK(expect_fail(2, -ENOTSUP, "reshape"));
	/* unknown feature */
	s.feat = 0x10000;
	make_v1(1, SZ, &s);
	CHECK(expect_fail(2, -ENOTSUP, "unknown feature"));
	s.feat = 0;
	/* spare, faulty */
	s.role = 0xffff;
	make_v1(1, SZ, &s);
	CHECK(expect_fail(2, -EINVAL, "a spare"));
	s.role = 0xfffe;
	make_v1(1, SZ, &s);
	CHECK(expect_fail(2, -EINVAL, "faulty"));
	/* checksum */
	s.role = 1;
	s.bad_csum = 1;
	make_v1(1, SZ, &s);
	CHECK(expect_fail(2, -EUCLEAN, "checksum"));
	s.bad_csum = 0;
	/* data past the member's end (a truncated image) */
	s.data_size = SZ / 512;
	make_v1(1, SZ, &s);
	CHECK(expect_fail(2, -EUCLEAN, "truncated"));
	s.data_size = 1000;
	/* unknown major version */
	s.major = 2;
	make_v1(1, SZ, &s);
	CHECK(expect_fail(2, -ENOTSUP, "major version 2"));
	s.major = 0;
	/* no superblock at all */
	memset(rams[1].p, 0, rams[1].size);
	CHECK(expect_fail(2, -EINVAL, "no md superblock"));
	/* a 1.0 superblock is found at the end; a 1.1 one at 0 */
	struct gpunvme_md_super sb;
	s.minor = 0;
	make_v1(1, SZ, &s);
	CHECK(gpunvme_md_examine(&devs[1], &sb) == 0 && !strcmp(sb.version, "1.0"));
	s.minor = 1;
	s.data_offset = 8;
	make_v1(1, SZ, &s);
	CHECK(gpunvme_md_examine(&devs[1], &sb) == 0 && !strcmp(sb.version, "1.1") && sb.data_offset == 4096);
	/* members that are too small to hold anything */
	struct gpunvme_blkdev tiny = { ram_read, ram_close, &rams[1], 1024, 512, NULL };
	CHECK(gpunvme_md_examine(&tiny, &sb) == -EINVAL);
}

int main(void)
{
	test_raid0_one_zone(2);
	test_raid0_one_zone(1);
	test_raid0_zones(2);
	test_raid0_zones(1);
	test_linear_and_v10();
	test_v090();
	test_refusals();
	for (int m = 0; m < MAXM; m++)
		free(rams[m].p);
	if (fails) {
		fprintf(stderr, "test_md: %d failures\n", fails);
		return 1;
	}
	printf("test_md: all passed\n");
	return 0;
}
