/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * XFS decoder (src/fs/xfs.c) against real images made by mkfs.xfs from a
 * protofile: a host directory tree is built, mkfs.xfs -p copies it into an
 * image, then every file is checked through the decoder: bytes
 * (gpunvme_fs_pread) against the host file, extents against
 * `xfs_db -r -c "inode N" -c bmap`, directory listings against the host
 * listing. Directories come in every form (short form, block, leaf, node);
 * block sizes 1024 and 4096, v5 (crc=1) and v4 (crc=0) when mkfs allows it.
 *
 * mkfs.xfs lays files out contiguously, so a multi-level BMBT is built by
 * hand: a file's extent is cut into one-block records (some marked
 * unwritten) under a 2- or 3-level tree in blocks taken from a pad file;
 * xfs_db must read the same map back. Negative tests corrupt a superblock,
 * an inode, a BMBT block and a directory block (checksums recomputed where
 * the point is the structure check behind them).
 *
 * Skipped (77) when mkfs.xfs or xfs_db is missing. XFS_TEST_KEEP=1 keeps
 * the work directory.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../harness/check.h"
#include "gpunvme/extents.h"

static char g_dir[256];        /* work directory */
static char g_src[300];        /* host tree */

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint8_t rnd8(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint8_t)rng;
}

static void write_file(const char *path, size_t size)
{
	FILE *f = fopen(path, "wb");
	if (!f) {
		perror(path);
		exit(1);
	}
	for (size_t i = 0; i < size; i++)
		fputc(rnd8(), f);
	fclose(f);
}

static void mkdir_p(const char *path)
{
	if (mkdir(path, 0755) && errno != EEXIST) {
		perror(path);
		exit(1);
	}
}

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *b = malloc((size_t)n + 1);
	if (n > 0 && fread(b, 1, (size_t)n, f) != (size_t)n) {
		free(b);
		b = NULL;
	}
	fclose(f);
	*len = (size_t)n;
	return b;
}

static int run(const char *cmd)
{
	int rc = system(cmd);
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static int have(const char *prog)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", prog);
	return run(cmd) == 0;
}

static uint32_t crc32c(const uint8_t *p, size_t n)
{
	uint32_t c = 0xffffffffu;
	while (n--) {
		c ^= *p++;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
	}
	return ~c;
}

/* XFS crc: over the object with the crc field zeroed, stored LE. */
static void set_crc(uint8_t *b, size_t len, size_t off)
{
	memset(b + off, 0, 4);
	uint32_t c = crc32c(b, len);
	for (int i = 0; i < 4; i++)
		b[off + i] = (uint8_t)(c >> (8 * i));
}

static uint64_t gbe(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

static void pbe(uint8_t *p, int n, uint64_t v)
{
	for (int i = n - 1; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static int img_rw(const char *img, uint64_t off, void *buf, size_t len, int wr)
{
	int fd = open(img, wr ? O_RDWR : O_RDONLY);
	if (fd < 0)
		return -1;
	ssize_t r = wr ? pwrite(fd, buf, len, (off_t)off) : pread(fd, buf, len, (off_t)off);
	close(fd);
	return r == (ssize_t)len ? 0 : -1;
}

/* ---- the host tree and its protofile -------------------------------------------- */

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names in a host directory (caller frees). */
static char **host_list(const char *path, size_t *n)
{
	DIR *d = opendir(path);
	char **v = NULL;
	size_t k = 0, cap = 0;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (k == cap)
			v = realloc(v, (cap = cap ? cap * 2 : 64) * sizeof(*v));
		v[k++] = strdup(de->d_name);
	}
	if (d)
		closedir(d);
	qsort(v, k, sizeof(*v), name_cmp);
	*n = k;
	return v;
}

static void free_list(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static void proto_dir(FILE *pf, const char *host, int depth)
{
	size_t n;
	char **v = host_list(host, &n);
	for (size_t i = 0; i < n; i++) {
		char p[4096];
		struct stat st;
		if (snprintf(p, sizeof(p), "%s/%s", host, v[i]) >= (int)sizeof(p) || lstat(p, &st))
			continue; /* cannot happen for the test's own tree */
		/* a few owners other than root, to check uid/gid */
		unsigned uid = (i % 3 == 1) ? 1000 + (unsigned)i : 0, gid = (i % 3 == 2) ? 2000 : 0;
		fprintf(pf, "%*s", depth, "");
		if (S_ISDIR(st.st_mode)) {
			fprintf(pf, "%s d--%03o %u %u\n", v[i], st.st_mode & 0777, uid, gid);
			proto_dir(pf, p, depth + 1);
			fprintf(pf, "%*s$\n", depth, "");
		} else if (S_ISLNK(st.st_mode)) {
			char t[256] = { 0 };
			if (readlink(p, t, sizeof(t) - 1) < 0)
				t[0] = 0;
			fprintf(pf, "%s l--777 %u %u %s\n", v[i], uid, gid, t);
		} else {
			fprintf(pf, "%s ---%03o %u %u %s\n", v[i], st.st_mode & 0777, uid, gid, p);
		}
	}
	free_list(v, n);
}

static void build_tree(void)
{
	char p[512];
	snprintf(g_src, sizeof(g_src), "%s/src", g_dir);
	mkdir_p(g_src);
	/* files of many sizes */
	static const size_t sizes[] = { 0, 1, 4095, 4096, 4097, 65536 + 17, 3u << 20, (5u << 20) + 3 };
	snprintf(p, sizeof(p), "%s/files", g_src);
	mkdir_p(p);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		snprintf(p, sizeof(p), "%s/files/f%zu_%zu", g_src, i, sizes[i]);
		write_file(p, sizes[i]);
	}
	snprintf(p, sizeof(p), "%s/files/bmbt", g_src);
	write_file(p, 3u << 20);
	snprintf(p, sizeof(p), "%s/files/pad", g_src);
	write_file(p, 1u << 20);
	snprintf(p, sizeof(p), "%s/files/link", g_src);
	if (symlink("f1_1", p)) {
		perror(p);
		exit(1);
	}
	/* non-ASCII names */
	snprintf(p, sizeof(p), "%s/files/\xc3\xbc\x62\x65r-\xe2\x82\xac-\xe6\x97\xa5\xe6\x9c\xac", g_src);
	write_file(p, 100);
	/* directory forms: short form, block, leaf, node */
	static const struct { const char *name; int n; } dirs[] = {
		{ "sf", 3 }, { "block", 30 }, { "leaf", 400 }, { "node", 10000 }
	};
	for (size_t d = 0; d < sizeof(dirs) / sizeof(dirs[0]); d++) {
		snprintf(p, sizeof(p), "%s/%s", g_src, dirs[d].name);
		mkdir_p(p);
		for (int i = 0; i < dirs[d].n; i++) {
			snprintf(p, sizeof(p), "%s/%s/entry_with_a_longish_name_%06d", g_src, dirs[d].name, i);
			write_file(p, (size_t)(i % 7 == 0 ? 10 + i % 100 : 0));
		}
	}
	/* a deep path */
	size_t k = (size_t)snprintf(p, sizeof(p), "%s/deep", g_src);
	mkdir_p(p);
	for (int i = 0; i < 24; i++) {
		k += (size_t)snprintf(p + k, sizeof(p) - k, "/d%d", i);
		mkdir_p(p);
	}
	snprintf(p + k, sizeof(p) - k, "/leaf_file");
	write_file(p, 12345);
}

static void write_proto(const char *proto, const char *host)
{
	FILE *pf = fopen(proto, "w");
	fprintf(pf, "/dev/null\n0 0\nd--755 0 0\n");
	proto_dir(pf, host, 1);
	fprintf(pf, "$\n");
	fclose(pf);
}

/* ---- xfs_db ---------------------------------------------------------------------- */

struct rec { uint64_t off, blk, agno, agbno, cnt; int flag; };

/* `inode N` + `bmap`: "data offset O startblock B (A/G) count C flag F". */
static size_t xfsdb_bmap(const char *img, uint64_t ino, struct rec *r, size_t max)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "xfs_db -r -c 'inode %llu' -c bmap '%s' 2>/dev/null", (unsigned long long)ino, img);
	FILE *f = popen(cmd, "r");
	char line[512];
	size_t n = 0;
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long long o, b, a, g, c;
		int fl;
		if (sscanf(line, "data offset %llu startblock %llu (%llu/%llu) count %llu flag %d", &o, &b, &a, &g, &c,
			   &fl) == 6 &&
		    n < max)
			r[n++] = (struct rec){ o, b, a, g, c, fl };
	}
	if (f)
		pclose(f);
	return n;
}

static uint64_t xfsdb_path_ino(const char *img, const char *path)
{
	char cmd[1024], line[256];
	snprintf(cmd, sizeof(cmd), "xfs_db -r -c 'path %s' -c inode '%s' 2>/dev/null", path, img);
	FILE *f = popen(cmd, "r");
	unsigned long long ino = 0;
	while (f && fgets(line, sizeof(line), f))
		sscanf(line, "current inode number is %llu", &ino);
	if (f)
		pclose(f);
	return ino;
}

/* ---- geometry read by the test itself (for corruption offsets) ---------------------- */

struct geo {
	uint32_t bs, agblocks, agcount, isize;
	unsigned agblklog, inopblog;
	int v5;
	uint8_t uuid[16];
};

static void read_geo(const char *img, struct geo *g)
{
	uint8_t sb[512];
	img_rw(img, 0, sb, sizeof(sb), 0);
	g->bs = (uint32_t)gbe(sb + 4, 4);
	g->agblocks = (uint32_t)gbe(sb + 84, 4);
	g->agcount = (uint32_t)gbe(sb + 88, 4);
	g->isize = (uint32_t)gbe(sb + 104, 2);
	g->inopblog = sb[123];
	g->agblklog = sb[124];
	g->v5 = (gbe(sb + 100, 2) & 0xf) == 5;
	memcpy(g->uuid, (gbe(sb + 216, 4) & 4) ? sb + 248 : sb + 32, 16);
}

static uint64_t ino_off(const struct geo *g, uint64_t ino)
{
	uint64_t agno = ino >> (g->agblklog + g->inopblog);
	uint64_t agbno = (ino >> g->inopblog) & ((1ull << g->agblklog) - 1);
	return (agno * g->agblocks + agbno) * g->bs + (ino & ((1ull << g->inopblog) - 1)) * g->isize;
}

static uint64_t fsb_off(const struct geo *g, uint64_t fsb)
{
	return ((fsb >> g->agblklog) * g->agblocks + (fsb & ((1ull << g->agblklog) - 1))) * g->bs;
}

/* ---- verification walk ---------------------------------------------------------------- */

struct names { char **v; size_t n, cap; uint64_t dot, dotdot; };

static int collect(void *arg, const char *name, size_t len, uint64_t ino, int ftype)
{
	struct names *s = arg;
	(void)ftype;
	if (len == 1 && name[0] == '.') {
		s->dot = ino;
		return 0;
	}
	if (len == 2 && !memcmp(name, "..", 2)) {
		s->dotdot = ino;
		return 0;
	}
	if (s->n == s->cap)
		s->v = realloc(s->v, (s->cap = s->cap ? s->cap * 2 : 64) * sizeof(*s->v));
	s->v[s->n++] = strndup(name, len);
	return 0;
}

static int files_checked, dirs_checked, bmaps_checked;

/* Extents from the decoder vs xfs_db's records (merged the same way). */
static void check_bmap(struct gpunvme_fs *fs, const char *img, uint64_t ino, uint32_t bs)
{
	struct gpunvme_extent *e = NULL;
	size_t n = 0;
	int rc = gpunvme_fs_extents(fs, ino, &e, &n);
	CHECK_EQ(rc, 0);
	if (rc) {
		fprintf(stderr, "extents(%llu): %s\n", (unsigned long long)ino, gpunvme_last_error());
		return;
	}
	static struct rec r[8192];
	size_t m = xfsdb_bmap(img, ino, r, 8192), k = 0;
	for (size_t i = 0; i < m; i++) {
		if (k && r[k - 1].off + r[k - 1].cnt == r[i].off && r[k - 1].agno == r[i].agno &&
		    r[k - 1].agbno + r[k - 1].cnt == r[i].agbno && r[k - 1].flag == r[i].flag) {
			r[k - 1].cnt += r[i].cnt;
			continue;
		}
		r[k++] = r[i];
	}
	struct geo g;
	read_geo(img, &g);
	CHECK_EQ(n, k);
	for (size_t i = 0; i < n && i < k; i++) {
		CHECK_EQ(e[i].logical, r[i].off * bs);
		CHECK_EQ(e[i].physical, (r[i].agno * g.agblocks + r[i].agbno) * bs);
		CHECK_EQ(e[i].length, r[i].cnt * bs);
		CHECK_EQ(e[i].flags, r[i].flag ? GPUNVME_EXTENT_UNWRITTEN : 0u);
	}
	free(e);
	bmaps_checked++;
}

/* `zero`: file ranges expected to read as zeroes (unwritten), or NULL. */
static void check_file(struct gpunvme_fs *fs, const char *img, const char *host, const char *fspath, uint64_t ino,
		       const struct gpunvme_stat *st, int with_bmap, const struct gpunvme_extent *zero, size_t nzero)
{
	size_t len;
	uint8_t *want = slurp(host, &len);
	CHECK(want != NULL);
	if (!want)
		return;
	for (size_t z = 0; z < nzero; z++)
		memset(want + zero[z].logical, 0, zero[z].length);
	CHECK_EQ(st->size, len);
	uint8_t *got = malloc(len + 64);
	int64_t r = gpunvme_fs_pread(fs, ino, got, len + 64, 0);
	CHECK_EQ(r, len);
	if (r == (int64_t)len && memcmp(got, want, len)) {
		fprintf(stderr, "%s: content differs\n", fspath);
		CHECK(0);
	}
	/* an unaligned read in the middle */
	if (len > 5000) {
		r = gpunvme_fs_pread(fs, ino, got, 3001, 1999);
		CHECK_EQ(r, 3001);
		CHECK(!memcmp(got, want + 1999, 3001));
	}
	free(got);
	free(want);
	if (with_bmap)
		check_bmap(fs, img, ino, gpunvme_fs_block_size(fs));
	files_checked++;
}

static time_t g_start;

/* `idx`: the entry's index in its parent's sorted listing (proto_dir gives
 * owners by it), -1 for the root. */
static void check_tree(struct gpunvme_fs *fs, const char *img, const char *host, const char *fspath, int bmap, long idx)
{
	uint64_t ino = 0;
	int rc = gpunvme_fs_lookup_nofollow(fs, fspath, &ino);
	CHECK_EQ(rc, 0);
	if (rc) {
		fprintf(stderr, "lookup %s: %s\n", fspath, gpunvme_last_error());
		return;
	}
	struct gpunvme_stat st;
	rc = gpunvme_fs_stat(fs, ino, &st);
	CHECK_EQ(rc, 0);
	struct stat hs;
	lstat(host, &hs);
	CHECK_EQ(st.ino, ino);
	CHECK_EQ(st.uid, idx % 3 == 1 ? 1000 + (unsigned)idx : 0);
	CHECK_EQ(st.gid, idx % 3 == 2 ? 2000 : 0);
	/* mkfs stamps everything with the current time */
	CHECK(st.mtime_sec >= (int64_t)g_start - 5 && st.mtime_sec <= (int64_t)time(NULL) + 5);
	CHECK(st.mtime_nsec < 1000000000u);
	if (S_ISLNK(hs.st_mode)) {
		char t[256] = { 0 }, got[256] = { 0 };
		ssize_t tl = readlink(host, t, sizeof(t) - 1);
		CHECK_EQ(st.mode & 0170000, 0120000);
		CHECK_EQ(st.size, (uint64_t)tl);
		CHECK_EQ(gpunvme_fs_pread(fs, ino, got, sizeof(got), 0), tl);
		CHECK_STR(got, t);
		return;
	}
	if (S_ISREG(hs.st_mode)) {
		CHECK_EQ(st.mode, 0100000 | (hs.st_mode & 0777));
		CHECK_EQ(st.nlink, 1);
		check_file(fs, img, host, fspath, ino, &st, bmap, NULL, 0);
		return;
	}
	CHECK_EQ(st.mode & 0170000, 0040000);
	struct names s = { 0 };
	rc = gpunvme_fs_readdir(fs, ino, collect, &s);
	CHECK_EQ(rc, 0);
	if (rc)
		fprintf(stderr, "readdir %s: %s\n", fspath, gpunvme_last_error());
	CHECK_EQ(s.dot, ino);
	CHECK(s.dotdot != 0);
	qsort(s.v, s.n, sizeof(*s.v), name_cmp);
	size_t hn;
	char **hv = host_list(host, &hn);
	CHECK_EQ(s.n, hn);
	for (size_t i = 0; i < s.n && i < hn; i++)
		if (strcmp(s.v[i], hv[i])) {
			fprintf(stderr, "%s: entry %zu: \"%s\" != \"%s\"\n", fspath, i, s.v[i], hv[i]);
			CHECK(0);
			break;
		}
	dirs_checked++;
	/* every entry of small directories, a sample of big ones */
	for (size_t i = 0; i < hn; i++) {
		if (hn > 100 && i % 97 != 0 && i != hn - 1)
			continue;
		char hp[4096], fp[4096];
		snprintf(hp, sizeof(hp), "%s/%s", host, hv[i]);
		snprintf(fp, sizeof(fp), "%s/%s", strcmp(fspath, "/") ? fspath : "", hv[i]);
		/* xfs_db bmap for the files/ directory (each is a process) */
		check_tree(fs, img, hp, fp, !strcmp(fspath, "/files"), (long)i);
	}
	free_list(s.v, s.n);
	free_list(hv, hn);
}

/* ---- a hand-built multi-level BMBT ("B+tree Extent List") ---------------------------- */

/* Replace the single extent of /files/bmbt by one-block records (every
 * fifth unwritten) under a BMBT whose blocks come from /files/pad. The
 * tree is deliberately sparse (16 records per leaf, 8 pointers per node) so
 * that it has 2 or 3 levels below the root in the inode. Returns the
 * number of levels (root level), 0 on failure; *zero gets the unwritten
 * ranges; *leaf0 the byte address of the first leaf. */
static int make_bmbt(const char *img, uint64_t ino, uint64_t pad_ino, struct gpunvme_extent *zero, size_t *nzero,
		     uint64_t *leaf0, uint32_t per_leaf, uint32_t per_node, uint32_t root_limit)
{
	struct geo g;
	read_geo(img, &g);
	struct rec data[4], pad[4];
	size_t nd = xfsdb_bmap(img, ino, data, 4), np = xfsdb_bmap(img, pad_ino, pad, 4);
	if (nd != 1 || np != 1)
		return 0;
	uint64_t nrec = data[0].cnt, pad_next = 0;
	uint32_t bs = g.bs, hdr = g.v5 ? 72 : 24;
	uint64_t rec_fsb0 = data[0].agno << g.agblklog | data[0].agbno;
	uint64_t pad_fsb0 = pad[0].agno << g.agblklog | pad[0].agbno;
	/* level arrays: the fsblock of each block and its first key */
	uint64_t nblk = (nrec + per_leaf - 1) / per_leaf;
	uint64_t *fsb = calloc(nblk, 8), *key = calloc(nblk, 8), total = 0;
	uint8_t *b = malloc(bs);
	*nzero = 0;
	for (uint64_t i = 0; i < nblk; i++) {
		memset(b, 0, bs);
		uint64_t first = i * per_leaf, n = nrec - first < per_leaf ? nrec - first : per_leaf;
		for (uint64_t j = 0; j < n; j++) {
			uint64_t off = first + j, sb = rec_fsb0 + off, flag = off % 5 == 2;
			uint64_t l0 = flag << 63 | off << 9 | sb >> 43, l1 = sb << 21 | 1;
			pbe(b + hdr + 16 * j, 8, l0);
			pbe(b + hdr + 16 * j + 8, 8, l1);
			if (flag && *nzero < 1024)
				zero[(*nzero)++] = (struct gpunvme_extent){ off * bs, 0, bs, 0 };
		}
		if (pad_next >= pad[0].cnt)
			break;  /* pad too small: caught below */
		fsb[i] = pad_fsb0 + pad_next++;
		key[i] = first;
		pbe(b, 4, g.v5 ? 0x424d4133 : 0x424d4150);
		pbe(b + 4, 2, 0);
		pbe(b + 6, 2, n);
		memset(b + 8, 0xff, 16);
		if (g.v5) {
			pbe(b + 24, 8, fsb_off(&g, fsb[i]) >> 9);
			memcpy(b + 40, g.uuid, 16);
			pbe(b + 56, 8, ino);
			set_crc(b, bs, 64);
		}
		if (i == 0)
			*leaf0 = fsb_off(&g, fsb[i]);
		img_rw(img, fsb_off(&g, fsb[i]), b, bs, 1);
	}
	total += nblk;
	/* the inode: data fork size and root capacity */
	uint8_t in[2048];
	uint64_t ioff = ino_off(&g, ino);
	img_rw(img, ioff, in, g.isize, 0);
	uint32_t core = g.v5 ? 176 : 100, dsize = in[82] ? in[82] * 8u : g.isize - core;
	uint32_t rootmax = (dsize - 4) / 16, level = 0;
	uint32_t nodemax = (bs - hdr) / 16;
	while (nblk > rootmax || nblk > root_limit) {
		uint64_t nn = (nblk + per_node - 1) / per_node;
		level++;
		for (uint64_t i = 0; i < nn; i++) {
			memset(b, 0, bs);
			uint64_t first = i * per_node, n = nblk - first < per_node ? nblk - first : per_node;
			for (uint64_t j = 0; j < n; j++) {
				pbe(b + hdr + 8 * j, 8, key[first + j]);
				pbe(b + hdr + 8 * nodemax + 8 * j, 8, fsb[first + j]);
			}
			if (pad_next >= pad[0].cnt) {
				free(fsb), free(key), free(b);
				return 0;
			}
			uint64_t me = pad_fsb0 + pad_next++;
			pbe(b, 4, g.v5 ? 0x424d4133 : 0x424d4150);
			pbe(b + 4, 2, level);
			pbe(b + 6, 2, n);
			memset(b + 8, 0xff, 16);
			if (g.v5) {
				pbe(b + 24, 8, fsb_off(&g, me) >> 9);
				memcpy(b + 40, g.uuid, 16);
				pbe(b + 56, 8, ino);
				set_crc(b, bs, 64);
			}
			img_rw(img, fsb_off(&g, me), b, bs, 1);
			key[i] = key[first];
			fsb[i] = me;
		}
		total += nn;
		nblk = nn;
	}
	if (pad_next < total) {  /* a leaf did not fit in the pad */
		free(fsb), free(key), free(b);
		return 0;
	}
	level++;
	uint8_t *f = in + core;
	memset(f, 0, dsize);
	pbe(f, 2, level);
	pbe(f + 2, 2, nblk);
	for (uint64_t j = 0; j < nblk; j++) {
		pbe(f + 4 + 8 * j, 8, key[j]);
		pbe(f + 4 + 8 * rootmax + 8 * j, 8, fsb[j]);
	}
	in[5] = 3;                                  /* di_format: btree */
	pbe(in + 64, 8, gbe(in + 64, 8) + total);   /* di_nblocks */
	if (g.v5 && (gbe(in + 120, 8) & 0x10))      /* NREXT64: di_big_nextents */
		pbe(in + 24, 8, nrec);
	else
		pbe(in + 76, 4, nrec);              /* di_nextents */
	if (g.v5)
		set_crc(in, g.isize, 100);
	img_rw(img, ioff, in, g.isize, 1);
	free(fsb), free(key), free(b);
	return (int)level;
}

/* ---- one image ---------------------------------------------------------------------------- */

/* One image open at a time: the file system does not own its block source. */
static struct gpunvme_blkdev g_dev;

static int open_img(const char *img, struct gpunvme_fs **fs)
{
	int rc = gpunvme_blkdev_open_file(img, &g_dev);
	if (rc)
		return rc;
	rc = gpunvme_fs_open(&g_dev, 0, fs);
	if (rc)
		gpunvme_blkdev_close(&g_dev);
	return rc;
}

static void close_img(struct gpunvme_fs *fs)
{
	gpunvme_fs_close(fs);
	gpunvme_blkdev_close(&g_dev);
}

static int ignore_cb(void *a, const char *n, size_t l, uint64_t i, int t)
{
	(void)a, (void)n, (void)l, (void)i, (void)t;
	return 0;
}

static void test_image(const char *label, const char *mkfs_opts)
{
	char img[512], proto[512], cmd[2048];
	snprintf(img, sizeof(img), "%s/%s.img", g_dir, label);
	snprintf(proto, sizeof(proto), "%s/proto", g_dir);
	snprintf(cmd, sizeof(cmd), "truncate -s 300m '%s' && mkfs.xfs -f -q %s -p '%s' '%s' >/dev/null 2>&1", img, mkfs_opts,
		 proto, img);
	if (run(cmd)) {
		printf("%s: mkfs.xfs %s refused, skipped\n", label, mkfs_opts);
		return;
	}
	unsigned checks0 = check_count(), fail0 = check_failures();
	files_checked = dirs_checked = bmaps_checked = 0;
	struct gpunvme_fs *fs = NULL;
	int rc = open_img(img, &fs);
	CHECK_EQ(rc, 0);
	if (rc) {
		fprintf(stderr, "%s: open: %s\n", label, gpunvme_last_error());
		return;
	}
	CHECK_STR(gpunvme_fs_type(fs), "xfs");

	/* inode numbers agree with xfs_db's path lookup */
	static const char *const paths[] = { "/files/f6_3145728", "/node/entry_with_a_longish_name_009999",
					     "/deep/d0/d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/d11/d12/d13/d14/d15/d16/d17/d18/d19/d20/d21/d22/d23/leaf_file" };
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		uint64_t ino = 0;
		CHECK_EQ(gpunvme_fs_lookup(fs, paths[i], &ino), 0);
		CHECK_EQ(ino, xfsdb_path_ino(img, paths[i]));
	}
	uint64_t ino;
	CHECK_EQ(gpunvme_fs_lookup(fs, "/files/nope", &ino), -ENOENT);
	CHECK_EQ(gpunvme_fs_lookup(fs, "/files/f1_1/x", &ino), -ENOTDIR);

	check_tree(fs, img, g_src, "/", 0, -1);
	close_img(fs);

	/* ---- BMBT: built by hand, read back by xfs_db and by us ---- */
	struct geo g;
	read_geo(img, &g);
	fs = NULL;
	uint64_t bino = xfsdb_path_ino(img, "/files/bmbt"), pino = xfsdb_path_ino(img, "/files/pad");
	static struct gpunvme_extent zero[1024];
	size_t nzero = 0;
	uint64_t leaf0 = 0;
	int levels = make_bmbt(img, bino, pino, zero, &nzero, &leaf0, 16, 8, 1000);
	CHECK(levels >= 2);
	if (levels >= 2 && !open_img(img, &fs)) {
		struct gpunvme_stat st;
		char host[512];
		snprintf(host, sizeof(host), "%s/files/bmbt", g_src);
		CHECK_EQ(gpunvme_fs_stat(fs, bino, &st), 0);
		check_file(fs, img, host, "/files/bmbt", bino, &st, 1, zero, nzero);
		struct gpunvme_extent *e = NULL;
		size_t n = 0;
		CHECK_EQ(gpunvme_fs_extents(fs, bino, &e, &n), 0);
		CHECK(n > 100);  /* unwritten records split the map */
		free(e);
		close_img(fs);

		/* a BMBT leaf with a bad magic */
		uint8_t m[4], bad[4] = { 'X', 'X', 'X', 'X' };
		img_rw(img, leaf0, m, 4, 0);
		img_rw(img, leaf0, bad, 4, 1);
		CHECK_EQ(open_img(img, &fs), 0);
		rc = gpunvme_fs_extents(fs, bino, &e, &n);
		CHECK_EQ(rc, -EUCLEAN);
		printf("  bad BMBT magic: %s\n", gpunvme_last_error());
		char buf[16];
		CHECK_EQ(gpunvme_fs_pread(fs, bino, buf, sizeof(buf), 0), -EUCLEAN);
		close_img(fs);
		img_rw(img, leaf0, m, 4, 1);
	}

	/* ---- negative tests ---- */
	uint8_t save[4096];
	/* superblock magic */
	img_rw(img, 0, save, 4, 0);
	img_rw(img, 0, "XFSC", 4, 1);
	fs = NULL;
	rc = open_img(img, &fs);
	CHECK(rc != 0);
	if (!rc)
		close_img(fs);
	img_rw(img, 0, save, 4, 1);
	if (g.v5) {
		/* superblock checksum */
		img_rw(img, 64, save, 1, 0);
		uint8_t x = save[0] ^ 0x40;
		img_rw(img, 64, &x, 1, 1);
		CHECK_EQ(open_img(img, &fs), -EUCLEAN);
		printf("  bad sb crc: %s\n", gpunvme_last_error());
		img_rw(img, 64, save, 1, 1);
		/* an unknown incompat feature (crc fixed so the check is reached) */
		uint8_t sb[512];
		img_rw(img, 0, sb, 512, 0);
		memcpy(save, sb, 512);
		sb[216] |= 0x80;
		set_crc(sb, 512, 224);
		img_rw(img, 0, sb, 512, 1);
		CHECK_EQ(open_img(img, &fs), -ENOTSUP);
		printf("  unknown incompat: %s\n", gpunvme_last_error());
		img_rw(img, 0, save, 512, 1);
	}
	CHECK_EQ(open_img(img, &fs), 0);
	/* a flipped byte in an inode */
	uint64_t fino = xfsdb_path_ino(img, "/files/f4_4097");
	uint64_t ioff = ino_off(&g, fino) + 60;  /* inside di_size */
	img_rw(img, ioff, save, 1, 0);
	uint8_t x = save[0] ^ 1;
	img_rw(img, ioff, &x, 1, 1);
	struct gpunvme_stat st;
	rc = gpunvme_fs_stat(fs, fino, &st);
	if (g.v5) {
		CHECK_EQ(rc, -EUCLEAN);
		printf("  flipped inode byte: %s\n", gpunvme_last_error());
	}
	img_rw(img, ioff, save, 1, 1);
	CHECK_EQ(gpunvme_fs_stat(fs, fino, &st), 0);
	/* inode magic */
	ioff = ino_off(&g, fino);
	img_rw(img, ioff, save, 2, 0);
	img_rw(img, ioff, "XX", 2, 1);
	CHECK_EQ(gpunvme_fs_stat(fs, fino, &st), -EUCLEAN);
	img_rw(img, ioff, save, 2, 1);
	/* a directory data block with a bad entry length (crc recomputed) */
	uint64_t dino = xfsdb_path_ino(img, "/leaf");
	struct rec r[64];
	size_t nr = xfsdb_bmap(img, dino, r, 64);
	CHECK(nr >= 1);
	if (nr >= 1) {
		uint64_t boff = (r[0].agno * g.agblocks + r[0].agbno) * g.bs;
		uint32_t dbs = g.bs;  /* default sb_dirblklog 0 for bs 4096; 4096 dir blocks for bs 1024 */
		if (g.bs < 4096)
			dbs = 4096;
		uint8_t *b = malloc(dbs);
		img_rw(img, boff, b, dbs, 0);
		uint8_t *orig = malloc(dbs);
		memcpy(orig, b, dbs);
		uint32_t hdr = g.v5 ? 64 : 16;
		/* first entry is "."; make its namelen run past its tag */
		b[hdr + 8] = 40;
		if (g.v5)
			set_crc(b, dbs, 4);
		img_rw(img, boff, b, dbs, 1);
		CHECK_EQ(gpunvme_fs_readdir(fs, dino, ignore_cb, NULL), -EUCLEAN);
		printf("  bad dir entry length: %s\n", gpunvme_last_error());
		if (g.v5) {
			/* and a checksum mismatch on the same block */
			memcpy(b, orig, dbs);
			b[hdr + 20] ^= 1;
			img_rw(img, boff, b, dbs, 1);
			CHECK_EQ(gpunvme_fs_readdir(fs, dino, ignore_cb, NULL), -EUCLEAN);
		}
		img_rw(img, boff, orig, dbs, 1);
		CHECK_EQ(gpunvme_fs_readdir(fs, dino, ignore_cb, NULL), 0);
		free(b);
		free(orig);
	}
	close_img(fs);
	printf("%s: %d files, %d directories, %d extent maps vs xfs_db, BMBT %d levels; %u checks, %u failed\n", label,
	       files_checked, dirs_checked, bmaps_checked, levels, check_count() - checks0, check_failures() - fail0);
	unlink(img);
}

/* ---- indexing speed: 100,000 files -------------------------------------------------------- */

struct idx { struct gpunvme_fs *fs; uint64_t files, extents, dirs; int err; };

static int idx_cb(void *arg, const char *name, size_t len, uint64_t ino, int ftype);

static void idx_dir(struct idx *x, uint64_t ino)
{
	x->dirs++;
	if (gpunvme_fs_readdir(x->fs, ino, idx_cb, x))
		x->err = 1;
}

static int idx_cb(void *arg, const char *name, size_t len, uint64_t ino, int ftype)
{
	struct idx *x = arg;
	if ((len == 1 && name[0] == '.') || (len == 2 && !memcmp(name, "..", 2)))
		return 0;
	struct gpunvme_stat st;
	if (gpunvme_fs_stat(x->fs, ino, &st)) {
		x->err = 1;
		return 1;
	}
	(void)ftype;
	if ((st.mode & 0170000) == 0040000) {
		idx_dir(x, ino);
	} else if ((st.mode & 0170000) == 0100000) {
		struct gpunvme_extent *e;
		size_t n;
		if (gpunvme_fs_extents(x->fs, ino, &e, &n)) {
			x->err = 1;
			return 1;
		}
		x->files++;
		x->extents += n;
		free(e);
	}
	return 0;
}

static void test_index_speed(void)
{
	char img[512], proto[512], src[512], cmd[2048];
	snprintf(img, sizeof(img), "%s/many.img", g_dir);
	snprintf(proto, sizeof(proto), "%s/proto_many", g_dir);
	snprintf(src, sizeof(src), "%s/small", g_dir);
	write_file(src, 300);
	FILE *pf = fopen(proto, "w");
	fprintf(pf, "/dev/null\n0 0\nd--755 0 0\n");
	for (int d = 0; d < 10; d++) {
		fprintf(pf, " dir%d d--755 0 0\n", d);
		for (int i = 0; i < 10000; i++)
			fprintf(pf, "  file%05d ---644 0 0 %s\n", i, src);
		fprintf(pf, " $\n");
	}
	fprintf(pf, "$\n");
	fclose(pf);
	snprintf(cmd, sizeof(cmd), "truncate -s 1g '%s' && mkfs.xfs -f -q -p '%s' '%s' >/dev/null 2>&1", img, proto, img);
	if (run(cmd)) {
		printf("index speed: mkfs.xfs failed, skipped\n");
		return;
	}
	struct idx x = { 0 };
	CHECK_EQ(open_img(img, &x.fs), 0);
	if (!x.fs)
		return;
	struct timespec t0, t1;
	uint64_t root;
	CHECK_EQ(gpunvme_fs_lookup(x.fs, "/", &root), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	idx_dir(&x, root);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	CHECK_EQ(x.err, 0);
	CHECK_EQ(x.files, 100000);
	CHECK_EQ(x.extents, 100000);
	printf("index speed: %llu files, %llu extents, %llu directories in %.3f s\n", (unsigned long long)x.files,
	       (unsigned long long)x.extents, (unsigned long long)x.dirs, s);
	/* generous under sanitizers; the target is 2 s in a release build */
	CHECK(s < 20.0);
	close_img(x.fs);
	unlink(img);
}

int main(int argc, char **argv)
{
	/* test_xfs --bmbt IMAGE FILE PAD: the BMBT of this test on FILE, small
	 * fan-outs (4 records per leaf, 2 pointers per node and in the root),
	 * to make fuzz seeds (tests/fuzz/fuzz_xfs.c). */
	if (argc == 5 && !strcmp(argv[1], "--bmbt")) {
		static struct gpunvme_extent zero[1024];
		size_t nzero;
		uint64_t leaf0;
		int l = make_bmbt(argv[2], xfsdb_path_ino(argv[2], argv[3]), xfsdb_path_ino(argv[2], argv[4]), zero, &nzero,
				  &leaf0, 4, 2, 2);
		printf("BMBT with root level %d\n", l);
		return l ? 0 : 1;
	}
	if (!have("mkfs.xfs") || !have("xfs_db")) {
		printf("mkfs.xfs or xfs_db not found (apt-get install xfsprogs): skipped\n");
		return 77;
	}
	const char *tmp = getenv("TMPDIR");
	snprintf(g_dir, sizeof(g_dir), "%s/test_xfs.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(g_dir)) {
		perror("mkdtemp");
		return 1;
	}
	g_start = time(NULL);
	build_tree();
	char proto[512];
	snprintf(proto, sizeof(proto), "%s/proto", g_dir);
	write_proto(proto, g_src);

	test_image("v5-4k", "-b size=4096 -m crc=1");
	test_image("v5-1k", "-b size=1024 -m crc=1");
	/* 64-bit extent counters and bigtime, 2 KiB blocks, 1 KiB inodes */
	test_image("v5-2k-nrext64", "-b size=2048 -m crc=1,bigtime=1 -i nrext64=1,size=1024");
	test_image("v4-4k", "-b size=4096 -m crc=0");
	test_image("v4-1k", "-b size=1024 -m crc=0");
	test_index_speed();

	const char *keep = getenv("XFS_TEST_KEEP");
	if (!keep || !*keep) {
		char cmd[512];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
		run(cmd);
	} else {
		printf("work directory kept: %s\n", g_dir);
	}
	return check_finish("test_xfs");
}
