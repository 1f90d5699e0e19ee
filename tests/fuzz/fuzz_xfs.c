/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libFuzzer target for the XFS decoder (src/fs/xfs.c through src/fs/fs.c).
 *
 * An XFS image is hundreds of MiB (mkfs.xfs refuses less than 300 MB), but
 * the decoder touches only a few KiB of it, so the input is a sparse image:
 *
 *   byte 0      flags: bit 0 = "fix checksums" (below)
 *   bytes 1..4  device size in KiB, little-endian (clamped to 1 KiB..512 MiB)
 *   then chunks {u32 offset (LE), u16 length (LE), length bytes}; a
 *   truncated chunk keeps what is there. Everything else reads as zeroes.
 *
 * With "fix checksums" the block source recomputes the crc32c of what a
 * read returns when it starts with a v5 metadata magic (superblock, v3
 * inode, BMBT block, directory data block) and has the right size, so that
 * mutations reach the structure checks behind the checksum instead of all
 * dying at it. Inputs without the flag fuzz the checksum checks themselves.
 *
 * Per input: open, then walk the tree from the root (depth and entry
 * bounded): stat, readdir, extents, pread of every entry. A read budget
 * bounds the work; the decoder itself must never read out of bounds, leak,
 * crash or hang.
 *
 * Seeds (tests/fuzz/corpus-xfs) come from real mkfs.xfs images: compile this
 * file without libFuzzer and with -DFUZZ_XFS_MKSEED, and run
 *   mkseed IMAGE SEED
 * which walks IMAGE the same way, records every byte range the decoder
 * reads, and writes the non-zero parts of them as a seed. FUZZ_XFS_TRACE=1
 * in the environment prints the walk, to check what a seed reaches.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

#include "gpunvme/extents.h"

#define MAX_DEV     (512ull << 20)
#define MAX_READS   1000u       /* work bound per input */
#define MAX_DEPTH   6
#define MAX_ENTRIES 2000u
#define MAX_PREAD   (64u << 10)

struct chunk { uint32_t off; uint16_t len; const uint8_t *data; };

struct src {
	uint64_t size;
	int fix_crc;
	struct chunk *c;
	size_t nc;
	unsigned reads;
#ifdef FUZZ_XFS_MKSEED
	FILE *img;
	struct { uint64_t off, len; } *rec;
	size_t nrec, caprec;
#endif
};

#ifndef FUZZ_XFS_MKSEED
static uint32_t crc_tab[256];

static uint32_t crc32c(const uint8_t *p, size_t n)
{
	if (!crc_tab[1])
		for (uint32_t i = 0; i < 256; i++) {
			uint32_t c = i;
			for (int k = 0; k < 8; k++)
				c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
			crc_tab[i] = c;
		}
	uint32_t c = 0xffffffffu;
	while (n--)
		c = (c >> 8) ^ crc_tab[(c ^ *p++) & 0xff];
	return ~c;
}

static void set_crc(uint8_t *b, size_t len, size_t off)
{
	if (len < off + 4)
		return;
	memset(b + off, 0, 4);
	uint32_t c = crc32c(b, len);
	for (int i = 0; i < 4; i++)
		b[off + i] = (uint8_t)(c >> (8 * i));
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void fix_crc(uint8_t *b, size_t len)
{
	if (len < 8)
		return;
	uint32_t m = be32(b);
	if (m == 0x58465342u && len >= 512)                      /* XFSB */
		set_crc(b, len, 224);
	else if ((m >> 16) == 0x494eu && b[4] == 3 && len >= 256) /* IN, v3 */
		set_crc(b, len, 100);
	else if (m == 0x424d4133u)                                /* BMA3 */
		set_crc(b, len, 64);
	else if (m == 0x58444233u || m == 0x58444433u)            /* XDB3, XDD3 */
		set_crc(b, len, 4);
}
#endif

static int src_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	struct src *s = ctx;
	if (off > s->size || len > s->size - off)
		return -EIO;
	if (++s->reads > MAX_READS)
		return -EIO;
#ifdef FUZZ_XFS_MKSEED
	if (fseeko(s->img, (off_t)off, SEEK_SET) || fread(buf, 1, len, s->img) != len)
		return -EIO;
	if (s->nrec == s->caprec) {
		s->caprec = s->caprec ? 2 * s->caprec : 64;
		s->rec = realloc(s->rec, s->caprec * sizeof(*s->rec));
	}
	s->rec[s->nrec].off = off;
	s->rec[s->nrec++].len = len;
	return 0;
#else
	uint8_t *b = buf;
	memset(b, 0, len);
	for (size_t i = 0; i < s->nc; i++) {
		uint64_t co = s->c[i].off, ce = co + s->c[i].len;
		uint64_t lo = co > off ? co : off, hi = ce < off + len ? ce : off + len;
		if (lo < hi)
			memcpy(b + (lo - off), s->c[i].data + (lo - co), hi - lo);
	}
	if (s->fix_crc)
		fix_crc(b, len);
	return 0;
#endif
}

static void src_close(void *ctx)
{
	(void)ctx;
}

static int g_trace; /* FUZZ_XFS_TRACE=1: print the walk (seed checks) */

struct walk {
	struct gpunvme_fs *fs;
	unsigned entries;
	int depth;
	uint8_t *buf;
};

static int walk_cb(void *arg, const char *name, size_t len, uint64_t ino, int ftype);

static void walk_dir(struct walk *w, uint64_t ino)
{
	if (w->depth >= MAX_DEPTH)
		return;
	w->depth++;
	gpunvme_fs_readdir(w->fs, ino, walk_cb, w);
	w->depth--;
}

static int walk_cb(void *arg, const char *name, size_t len, uint64_t ino, int ftype)
{
	struct walk *w = arg;
	(void)ftype;
	if (++w->entries > MAX_ENTRIES)
		return 1;
	if ((len == 1 && name[0] == '.') || (len == 2 && !memcmp(name, "..", 2)))
		return 0;
	struct gpunvme_stat st;
	int rc = gpunvme_fs_stat(w->fs, ino, &st);
	if (g_trace)
		fprintf(stderr, "%*s%.*s ino %llu: %s\n", 2 * w->depth, "", (int)len, name, (unsigned long long)ino,
			rc ? gpunvme_last_error() : "ok");
	if (rc)
		return 0;
	switch (st.mode & 0170000) {
	case 0040000:
		walk_dir(w, ino);
		break;
	case 0100000: {
		struct gpunvme_extent *e = NULL;
		size_t n = 0;
		if (!gpunvme_fs_extents(w->fs, ino, &e, &n)) {
			/* the list is sorted and disjoint: gpunvme_extent_map relies on it */
			for (size_t i = 1; i < n; i++)
				if (e[i].logical < e[i - 1].logical + e[i - 1].length)
					abort();
			free(e);
		}
		gpunvme_fs_pread(w->fs, ino, w->buf, MAX_PREAD, 0);
		break;
	}
	case 0120000:
		gpunvme_fs_pread(w->fs, ino, w->buf, 1024, 0);
		break;
	}
	return 0;
}

static void run_one(struct src *s)
{
	struct gpunvme_blkdev dev = { src_read, src_close, s, s->size, 512 };
	struct gpunvme_fs *fs = NULL;
	const char *t = getenv("FUZZ_XFS_TRACE");
	g_trace = t && *t == '1';
	if (gpunvme_fs_open(&dev, 0, &fs)) {
		if (g_trace)
			fprintf(stderr, "open: %s\n", gpunvme_last_error());
		return;
	}
	struct walk w = { fs, 0, 0, malloc(MAX_PREAD) };
	uint64_t ino;
	struct gpunvme_stat st;
	if (!gpunvme_fs_lookup(fs, "/", &ino) && !gpunvme_fs_stat(fs, ino, &st))
		walk_dir(&w, ino);
	gpunvme_fs_lookup(fs, "/a/b/c", &ino);
	free(w.buf);
	gpunvme_fs_close(fs);
}

#ifndef FUZZ_XFS_MKSEED
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 5)
		return 0;
	struct src s = { 0 };
	s.fix_crc = data[0] & 1;
	s.size = (uint64_t)(data[1] | data[2] << 8 | data[3] << 16 | (uint32_t)data[4] << 24) << 10;
	if (s.size < 1024)
		s.size = 1024;
	if (s.size > MAX_DEV)
		s.size = MAX_DEV;
	s.c = malloc((size / 6 + 1) * sizeof(*s.c));
	for (size_t p = 5; p + 6 <= size;) {
		struct chunk c;
		c.off = (uint32_t)(data[p] | data[p + 1] << 8 | data[p + 2] << 16 | (uint32_t)data[p + 3] << 24);
		c.len = (uint16_t)(data[p + 4] | data[p + 5] << 8);
		p += 6;
		if (c.len > size - p)
			c.len = (uint16_t)(size - p);
		c.data = data + p;
		p += c.len;
		s.c[s.nc++] = c;
	}
	run_one(&s);
	free(s.c);
	return 0;
}
#else
/* Seed maker: mkseed IMAGE SEED (see the top of this file). */
static int cmp_rec(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;
	return x[0] < y[0] ? -1 : x[0] > y[0];
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s IMAGE SEED\n", argv[0]);
		return 2;
	}
	struct src s = { 0 };
	if (!(s.img = fopen(argv[1], "rb")))
		return 1;
	fseeko(s.img, 0, SEEK_END);
	s.size = (uint64_t)ftello(s.img);
	run_one(&s);
	qsort(s.rec, s.nrec, sizeof(*s.rec), cmp_rec);
	FILE *o = fopen(argv[2], "wb");
	uint64_t kib = s.size >> 10;
	uint8_t hdr[5] = { 1, (uint8_t)kib, (uint8_t)(kib >> 8), (uint8_t)(kib >> 16), (uint8_t)(kib >> 24) };
	fwrite(hdr, 1, 5, o);
	uint64_t done = 0;  /* bytes below this were written */
	uint8_t *buf = malloc(1 << 20);
	for (size_t i = 0; i < s.nrec; i++) {
		uint64_t off = s.rec[i].off > done ? s.rec[i].off : done, end = s.rec[i].off + s.rec[i].len;
		if (off >= end)
			continue;
		fseeko(s.img, (off_t)off, SEEK_SET);
		size_t n = fread(buf, 1, end - off, s.img);
		/* chunks of non-zero bytes; zero runs of 16 or more split them */
		for (size_t a = 0; a < n;) {
			while (a < n && !buf[a])
				a++;
			size_t b = a, z = 0;
			while (b < n && z < 16 && b - a < 65000)
				z = buf[b++] ? 0 : z + 1;
			b -= z;
			if (b > a) {
				uint64_t co = off + a;
				uint8_t h[6] = { (uint8_t)co, (uint8_t)(co >> 8), (uint8_t)(co >> 16), (uint8_t)(co >> 24),
						 (uint8_t)(b - a), (uint8_t)((b - a) >> 8) };
				fwrite(h, 1, 6, o);
				fwrite(buf + a, 1, b - a, o);
			}
			a = b;
		}
		done = end;
	}
	printf("%s: %zu reads, %ld bytes\n", argv[2], s.nrec, ftell(o));
	fclose(o);
	fclose(s.img);
	free(buf);
	free(s.rec);
	return 0;
}
#endif
