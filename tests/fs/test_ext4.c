/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * ext2/3/4 decoder (src/fs/ext4.c) against images made by mkfs.ext4 -d from
 * a directory tree this test writes: for every file the bytes read through
 * gpunvme_fs_pread() equal the source, its extents equal what debugfs reports
 * ("ex" for extent files, the BLOCKS list of "stat" for indirect-block
 * files), every directory lists the same names as its source, and stat
 * agrees with lstat. Then negative tests (corrupt magic, checksums, extent
 * headers, directory records) and random corruption of small images: every
 * one must give an error or a result, never a crash (this runs under ASan
 * and UBSan in the build-asan tree).
 *
 * Needs mkfs.ext4, debugfs and e2fsck (e2fsprogs); exits 77 without them.
 * GPUNVME_EXT4_PERF=N also builds an image with N files and times indexing
 * every inode and extent of it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../harness/check.h"
#include "gpunvme/extents.h"
#include "gpunvme/gpunvme.h"

static char tmp[256];
static int no_filetype;  /* the image has no filetype feature: types are unknown */

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	int rc = system(cmd);
	if (rc != 0)
		fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
	return rc;
}

/* ---- block sources: pread on an image file, or a memory buffer ------- */

struct fblk {
	int fd;
};

static int fblk_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	struct fblk *f = ctx;
	uint8_t *p = buf;
	while (len) {
		ssize_t r = pread(f->fd, p, len, (off_t)off);
		if (r <= 0)
			return -EIO;
		p += r;
		off += (uint64_t)r;
		len -= (size_t)r;
	}
	return 0;
}

static void fblk_close(void *ctx)
{
	struct fblk *f = ctx;
	close(f->fd);
	free(f);
}

static int open_image(const char *path, struct gpunvme_blkdev *b)
{
	struct fblk *f = malloc(sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->fd = open(path, O_RDONLY);
	struct stat st;
	if (f->fd < 0 || fstat(f->fd, &st)) {
		free(f);
		return -errno;
	}
	*b = (struct gpunvme_blkdev){ fblk_read, fblk_close, f, (uint64_t)st.st_size, 512 };
	return 0;
}

struct mblk {
	const uint8_t *p;
	size_t n;
};

static int mblk_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	struct mblk *m = ctx;
	if (off > m->n || len > m->n - off)
		return -EIO;
	memcpy(buf, m->p + off, len);
	return 0;
}

static void mblk_close(void *ctx) { (void)ctx; }

/* One image open at a time: gpunvme_fs_close() leaves the block source
 * to its owner, so close_fs() closes it. */
static struct gpunvme_blkdev open_bd;

static int open_fs(const char *img, struct gpunvme_fs **fs)
{
	int rc = open_image(img, &open_bd);
	if (rc)
		return rc;
	rc = gpunvme_fs_open(&open_bd, 0, fs);
	if (rc)
		open_bd.close(open_bd.ctx);
	return rc;
}

static void close_fs(struct gpunvme_fs *fs)
{
	gpunvme_fs_close(fs);
	open_bd.close(open_bd.ctx);
}

/* ---- the source tree --------------------------------------------------- */

static uint64_t rng = 88172645463325252ull;
static uint64_t xr(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void write_file(const char *dir, const char *name, size_t size)
{
	char p[2048];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	FILE *f = fopen(p, "wb");
	if (!f) {
		perror(p);
		exit(1);
	}
	for (size_t i = 0; i < size; i++)
		fputc((int)(xr() & 0xff), f);
	fclose(f);
}

/* bytes at the given offsets, holes elsewhere, total size `size` */
static void write_sparse(const char *dir, const char *name, const uint64_t *offs, size_t n, size_t chunk, uint64_t size)
{
	char p[2048];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || ftruncate(fd, (off_t)size)) {
		perror(p);
		exit(1);
	}
	uint8_t buf[8192];
	for (size_t i = 0; i < n; i++) {
		for (size_t k = 0; k < chunk && k < sizeof(buf); k++)
			buf[k] = (uint8_t)(xr() | 1);
		if (pwrite(fd, buf, chunk, (off_t)offs[i]) != (ssize_t)chunk) {
			perror(p);
			exit(1);
		}
	}
	close(fd);
}

struct cfg {
	const char *name;
	const char *mkfs;   /* options for mkfs.ext4 */
	const char *size;
	int many;           /* a directory of this many entries */
	int inline_files;   /* small files and directories for inline_data */
	int fallocate;      /* add unwritten extents with debugfs */
	int dx;             /* e2fsck -D: index directories (htree) */
};

static void populate(const char *src, const struct cfg *c)
{
	char p[1024];
	sh("mkdir -p '%s'", src);
	write_file(src, "empty", 0);
	write_file(src, "one", 1);
	write_file(src, "f4095", 4095);
	write_file(src, "f4096", 4096);
	write_file(src, "f4097", 4097);
	write_file(src, "f3m", 3u << 20);
	if (c->inline_files) {
		/* mke2fs 1.47 -d with inline_data mishandles sparse files (an
		 * inline inode with a size beyond its inline space, trailing
		 * holes dropped): dense files only */
		write_file(src, "frag", 5 * 4096 + 17);
		goto common;
	}
	uint64_t so[] = { 1u << 20, (5u << 20) + 3 };
	write_sparse(src, "sparse", so, 2, 4096, 8u << 20);
	/* many islands: a multi-level extent tree (depth 2 with 1 KiB blocks) */
	uint64_t fo[400];
	for (int i = 0; i < 400; i++)
		fo[i] = (uint64_t)i * 8192;
	write_sparse(src, "frag", fo, 400, 1, 400u * 8192);
	/* one byte at 70 MiB: a triple-indirect block with 1 KiB blocks */
	uint64_t far = 70u << 20;
	write_sparse(src, "far", &far, 1, 1, far + 4096);
	write_sparse(src, "hole_only", NULL, 0, 0, 100000);
common:
	snprintf(p, sizeof(p), "%s/deep/a/b/c/d/e/f/g/h/i/j", src);
	sh("mkdir -p '%s'", p);
	write_file(p, "leaf.bin", 5000);
	write_file(src, "h\xc3\xa9llo_w\xc3\xb6rld_\xe6\x97\xa5\xe6\x9c\xac.txt", 123);
	snprintf(p, sizeof(p), "%s/sl_short", src);
	if (symlink("f4095", p))
		perror(p);
	snprintf(p, sizeof(p), "%s/sl_long", src);
	if (symlink("deep/a/b/c/d/e/f/g/h/i/j/leaf.bin/../../../../../../../../../../../../../../../f4095", p))
		perror(p);
	sh("mkdir -p '%s/emptydir'", src);
	if (c->many) {
		snprintf(p, sizeof(p), "%s/many", src);
		sh("mkdir -p '%s'", p);
		for (int i = 0; i < c->many; i++) {
			char n[64];
			snprintf(n, sizeof(n), "entry_with_a_longish_name_%06d", i);
			write_file(p, n, (size_t)(i % 7) * 100);
		}
	}
	if (c->inline_files) {
		snprintf(p, sizeof(p), "%s/small", src);
		sh("mkdir -p '%s/small/tiny_dir' '%s/small/mid_dir'", src, src);
		for (int s = 0; s <= 160; s += 10) {
			char n[64];
			snprintf(n, sizeof(n), "t%03d", s);
			write_file(p, n, (size_t)s);
		}
		snprintf(p, sizeof(p), "%s/small/tiny_dir", src);
		write_file(p, "x", 3);
		snprintf(p, sizeof(p), "%s/small/mid_dir", src);
		for (int i = 0; i < 6; i++) {
			char n[64];
			snprintf(n, sizeof(n), "n%d", i);
			write_file(p, n, 10);
		}
	}
	if (c->fallocate)
		write_sparse(src, "fa", NULL, 0, 0, 65536);
}

/* ---- what debugfs says -------------------------------------------------- */

struct xe {
	uint64_t lblk, pblk, len;
	int unwritten;
};

struct rec {
	char *path;
	int is_inline, is_ext;
	struct xe *x;
	size_t n, cap;
};

static struct rec *recs;
static size_t nrecs, caprecs;

static void rec_add(struct rec *r, uint64_t l, uint64_t p, uint64_t n, int u)
{
	if (r->n == r->cap) {
		r->cap = r->cap ? r->cap * 2 : 8;
		r->x = realloc(r->x, r->cap * sizeof(*r->x));
	}
	r->x[r->n++] = (struct xe){ l, p, n, u };
}

static int cmp_rec(const void *a, const void *b)
{
	return strcmp(((const struct rec *)a)->path, ((const struct rec *)b)->path);
}

static void free_recs(void)
{
	for (size_t i = 0; i < nrecs; i++) {
		free(recs[i].path);
		free(recs[i].x);
	}
	free(recs);
	recs = NULL;
	nrecs = caprecs = 0;
}

static void list_files(const char *src, const char *rel, FILE *cmd)
{
	char p[2048];
	snprintf(p, sizeof(p), "%s%s", src, rel);
	DIR *d = opendir(p);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char r[2048];
		snprintf(r, sizeof(r), "%s/%s", rel, de->d_name);
		snprintf(p, sizeof(p), "%s%s", src, r);
		struct stat st;
		if (lstat(p, &st))
			continue;
		if (S_ISDIR(st.st_mode)) {
			list_files(src, r, cmd);
		} else if (S_ISREG(st.st_mode)) {
			fprintf(cmd, "stat \"%s\"\nex \"%s\"\n", r, r);
			if (nrecs == caprecs) {
				caprecs = caprecs ? caprecs * 2 : 64;
				recs = realloc(recs, caprecs * sizeof(*recs));
			}
			recs[nrecs++] = (struct rec){ strdup(r) };
		}
	}
	closedir(d);
}

static struct rec *find_rec(const char *path)
{
	struct rec key = { (char *)path };
	return bsearch(&key, recs, nrecs, sizeof(*recs), cmp_rec);
}

/* debugfs -f: each command's output follows a "debugfs: CMD" line. */
static int debugfs_extents(const char *img, const char *src)
{
	char cmdf[512], outf[512];
	snprintf(cmdf, sizeof(cmdf), "%s/dbg.cmd", tmp);
	snprintf(outf, sizeof(outf), "%s/dbg.out", tmp);
	FILE *cmd = fopen(cmdf, "w");
	list_files(src, "", cmd);
	fclose(cmd);
	if (sh("debugfs -f '%s' '%s' > '%s' 2>&1", cmdf, img, outf))
		return -1;
	FILE *o = fopen(outf, "r");
	char *line = NULL;
	size_t cap = 0;
	struct rec *cur = NULL;
	int in_stat = 0, blocks_next = 0;
	while (getline(&line, &cap, o) > 0) {
		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "debugfs: ", 9)) {
			char *q = strchr(line, '"');
			char *q2 = q ? strrchr(line, '"') : NULL;
			cur = NULL;
			if (q && q2 > q) {
				*q2 = 0;
				for (size_t i = 0; i < nrecs; i++)
					if (!strcmp(recs[i].path, q + 1))
						cur = &recs[i];
			}
			in_stat = !strncmp(line + 9, "stat", 4);
			blocks_next = 0;
			continue;
		}
		if (!cur)
			continue;
		unsigned flags;
		char *f = strstr(line, "Flags: 0x");
		if (in_stat && f && sscanf(f, "Flags: 0x%x", &flags) == 1) {
			cur->is_inline = (flags & 0x10000000u) != 0;
			cur->is_ext = (flags & 0x80000u) != 0;
		}
		if (in_stat && !strcmp(line, "BLOCKS:")) {
			blocks_next = 1;
			continue;
		}
		if (in_stat && blocks_next) {
			blocks_next = 0;
			if (cur->is_ext)
				continue;
			/* "(0-11):767-778, (IND):779, (12-267):780-1035" */
			for (char *t = strtok(line, ", "); t; t = strtok(NULL, ", ")) {
				unsigned long long l1, l2, p1, p2;
				if (sscanf(t, "(%llu-%llu):%llu-%llu", &l1, &l2, &p1, &p2) == 4)
					rec_add(cur, l1, p1, l2 - l1 + 1, 0);
				else if (sscanf(t, "(%llu):%llu", &l1, &p1) == 2)
					rec_add(cur, l1, p1, 1, 0);
			}
			continue;
		}
		if (!in_stat && cur->is_ext) {
			int lv, mx, e1, e2;
			unsigned long long l1, l2, p1, p2, n;
			if (sscanf(line, "%d/%d %d/%d %llu - %llu %llu - %llu %llu", &lv, &mx, &e1, &e2, &l1, &l2, &p1, &p2,
				   &n) == 9 &&
			    lv == mx)
				rec_add(cur, l1, p1, n, strstr(line, "Uninit") != NULL);
		}
	}
	free(line);
	fclose(o);
	qsort(recs, nrecs, sizeof(*recs), cmp_rec);
	return 0;
}

/* ---- checking a tree ------------------------------------------------------ */

struct ent {
	char name[256];
	uint64_t ino;
	int ftype;
};

struct ents {
	struct ent *v;
	size_t n, cap;
};

static int collect(void *arg, const char *name, size_t namelen, uint64_t ino, int ftype)
{
	struct ents *e = arg;
	if (e->n == e->cap) {
		e->cap = e->cap ? e->cap * 2 : 64;
		e->v = realloc(e->v, e->cap * sizeof(*e->v));
	}
	struct ent *x = &e->v[e->n++];
	memcpy(x->name, name, namelen);
	x->name[namelen] = 0;
	x->ino = ino;
	x->ftype = ftype;
	return 0;
}

static int cmp_ent(const void *a, const void *b)
{
	return strcmp(((const struct ent *)a)->name, ((const struct ent *)b)->name);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

struct stats {
	size_t files, dirs, links, ext_files, inline_files, unwritten, holes, bytes;
};

static void check_file(struct gpunvme_fs *fs, const char *src, const char *rel, uint64_t ino, const struct stat *sst,
		       struct stats *s)
{
	char p[2048];
	snprintf(p, sizeof(p), "%s%s", src, rel);
	s->files++;
	/* bytes */
	uint8_t *want = malloc(sst->st_size + 1), *got = malloc(sst->st_size + 1);
	FILE *f = fopen(p, "rb");
	size_t n = f ? fread(want, 1, (size_t)sst->st_size, f) : 0;
	if (f)
		fclose(f);
	int64_t r = gpunvme_fs_pread(fs, ino, got, (size_t)sst->st_size + 1, 0);
	CHECK(r == (int64_t)sst->st_size && n == (size_t)r && !memcmp(want, got, n), "%s: pread gave %lld of %lld bytes or different bytes", rel,
	      (long long)r, (long long)sst->st_size);
	s->bytes += n;
	if (sst->st_size > 10) {
		/* an unaligned read in the middle */
		uint64_t off = (uint64_t)sst->st_size / 3 + 1;
		size_t len = (size_t)sst->st_size / 2;
		r = gpunvme_fs_pread(fs, ino, got, len, off);
		CHECK(r == (int64_t)len && !memcmp(want + off, got, len), "%s: pread at %llu", rel, (unsigned long long)off);
	}
	free(want);
	free(got);
	/* extents against debugfs */
	struct rec *rc = find_rec(rel);
	CHECK(rc != NULL, "%s: no debugfs record", rel);
	if (!rc)
		return;
	struct gpunvme_extent *x = NULL;
	size_t nx = 0;
	int e = gpunvme_fs_extents(fs, ino, &x, &nx);
	if (rc->is_inline) {
		s->inline_files++;
		CHECK(e == -ENOTSUP, "%s: inline file: extents gave %d", rel, e);
		free(x);
		return;
	}
	CHECK(e == 0, "%s: extents failed %d", rel, e);
	if (e)
		return;
	s->ext_files += rc->is_ext;
	uint32_t bs = gpunvme_fs_block_size(fs);
	/* debugfs lists on-disk extents; merge contiguous ones as the decoder does */
	struct gpunvme_extent *w = calloc(rc->n + 1, sizeof(*w));
	size_t nw = 0;
	for (size_t i = 0; i < rc->n; i++) {
		struct gpunvme_extent y = { rc->x[i].lblk * bs, rc->x[i].pblk * bs, rc->x[i].len * bs,
					    rc->x[i].unwritten ? GPUNVME_EXTENT_UNWRITTEN : 0 };
		if (nw && w[nw - 1].logical + w[nw - 1].length == y.logical &&
		    w[nw - 1].physical + w[nw - 1].length == y.physical && w[nw - 1].flags == y.flags)
			w[nw - 1].length += y.length;
		else
			w[nw++] = y;
	}
	int same = nw == nx;
	for (size_t i = 0; same && i < nx; i++)
		same = w[i].logical == x[i].logical && w[i].physical == x[i].physical && w[i].length == x[i].length &&
		       w[i].flags == x[i].flags;
	CHECK(same, "%s: %zu extents, debugfs says %zu (first: %llu+%llu@%llu vs %llu+%llu@%llu)", rel, nx, nw,
	      nx ? (unsigned long long)x[0].logical : 0, nx ? (unsigned long long)x[0].length : 0,
	      nx ? (unsigned long long)x[0].physical : 0, nw ? (unsigned long long)w[0].logical : 0,
	      nw ? (unsigned long long)w[0].length : 0, nw ? (unsigned long long)w[0].physical : 0);
	for (size_t i = 0; i < nx; i++) {
		s->unwritten += (x[i].flags & GPUNVME_EXTENT_UNWRITTEN) != 0;
		s->holes += i ? x[i].logical > x[i - 1].logical + x[i - 1].length : x[i].logical > 0;
	}
	free(w);
	free(x);
}

static void check_dir(struct gpunvme_fs *fs, const char *src, const char *rel, uint64_t ino, struct stats *s, int depth)
{
	char p[2048];
	snprintf(p, sizeof(p), "%s%s", src, rel);
	s->dirs++;
	struct ents e = { 0 };
	int rc = gpunvme_fs_readdir(fs, ino, collect, &e);
	CHECK(rc == 0, "%s: readdir %d", rel, rc);
	qsort(e.v, e.n, sizeof(*e.v), cmp_ent);
	/* source names */
	char **names = NULL;
	size_t nn = 0, cn = 0;
	DIR *d = opendir(p);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (nn == cn) {
			cn = cn ? cn * 2 : 64;
			names = realloc(names, cn * sizeof(*names));
		}
		names[nn++] = strdup(de->d_name);
	}
	if (d)
		closedir(d);
	qsort(names, nn, sizeof(*names), cmp_str);
	/* the file system's, less lost+found at the root */
	size_t k = 0, mism = 0;
	for (size_t i = 0; i < e.n; i++) {
		if (depth == 0 && !strcmp(e.v[i].name, "lost+found"))
			continue;
		if (k >= nn || strcmp(names[k], e.v[i].name))
			mism++;
		k++;
	}
	CHECK(!mism && k == nn, "%s: listing differs (%zu vs %zu entries, %zu mismatches)", rel, k, nn, mism);
	for (size_t i = 0; i < e.n; i++) {
		struct ent *x = &e.v[i];
		if (!strcmp(x->name, ".")) {
			CHECK(x->ino == ino, "%s: \".\" is %llu", rel, (unsigned long long)x->ino);
			continue;
		}
		if (!strcmp(x->name, "..") || (depth == 0 && !strcmp(x->name, "lost+found")))
			continue;
		char r[2048];
		snprintf(r, sizeof(r), "%s/%s", rel, x->name);
		snprintf(p, sizeof(p), "%s%s", src, r);
		struct stat sst;
		if (lstat(p, &sst))
			continue;
		struct gpunvme_stat st;
		rc = gpunvme_fs_stat(fs, x->ino, &st);
		CHECK(rc == 0, "%s: stat %d", r, rc);
		if (rc)
			continue;
		CHECK(st.mode == sst.st_mode && st.uid == sst.st_uid && st.gid == sst.st_gid &&
			      (S_ISDIR(sst.st_mode) || st.size == (uint64_t)sst.st_size) && st.mtime_sec == sst.st_mtime,
		      "%s: stat mode %o/%o size %llu/%llu uid %u gid %u mtime %lld/%lld", r, st.mode, sst.st_mode,
		      (unsigned long long)st.size, (unsigned long long)sst.st_size, st.uid, st.gid,
		      (long long)st.mtime_sec, (long long)sst.st_mtime);
		int ft = S_ISREG(sst.st_mode) ? GPUNVME_FT_REG : S_ISDIR(sst.st_mode) ? GPUNVME_FT_DIR
				: S_ISLNK(sst.st_mode) ? GPUNVME_FT_SYMLINK : GPUNVME_FT_OTHER;
		CHECK(x->ftype == (no_filetype ? GPUNVME_FT_UNKNOWN : ft), "%s: file type %d, expected %d", r, x->ftype, ft);
		if (S_ISDIR(sst.st_mode)) {
			check_dir(fs, src, r, x->ino, s, depth + 1);
		} else if (S_ISREG(sst.st_mode)) {
			CHECK(st.nlink == 1, "%s: nlink %u", r, st.nlink);
			check_file(fs, src, r, x->ino, &sst, s);
		} else if (S_ISLNK(sst.st_mode)) {
			s->links++;
			char want[4096] = { 0 }, got[4096] = { 0 };
			ssize_t wl = readlink(p, want, sizeof(want) - 1);
			int64_t gl = gpunvme_fs_pread(fs, x->ino, got, sizeof(got) - 1, 0);
			CHECK(wl >= 0 && gl == wl && !memcmp(want, got, (size_t)wl), "%s: symlink \"%s\" read as \"%s\" (%lld)",
			      r, want, got, (long long)gl);
		}
	}
	for (size_t i = 0; i < nn; i++)
		free(names[i]);
	free(names);
	free(e.v);
}

static int have_tools(void)
{
	return system("command -v mkfs.ext4 >/dev/null 2>&1 && command -v debugfs >/dev/null 2>&1 && "
		      "command -v e2fsck >/dev/null 2>&1") == 0;
}

static void run_cfg(const struct cfg *c)
{
	char src[512], img[512];
	snprintf(src, sizeof(src), "%s/src_%s", tmp, c->name);
	snprintf(img, sizeof(img), "%s/%s.img", tmp, c->name);
	unsigned f0 = check_failures();
	no_filetype = strstr(c->mkfs, "^filetype") || strstr(c->mkfs, "-r 0");
	populate(src, c);
	/* sized first: mkfs on a new file writes only the blocks it uses, and a
	 * file shorter than the file system is refused (as the kernel does) */
	if (sh("rm -f '%s' && truncate -s %s '%s' && mkfs.ext4 -F -q %s -d '%s' '%s' >/dev/null 2>&1", img, c->size, img,
	       c->mkfs, src, img)) {
		CHECK(0, "%s: mkfs failed", c->name);
		return;
	}
	if (c->dx) {
		sh("e2fsck -fyD '%s' >/dev/null 2>&1; true", img);
		/* the big directory must be an htree (EXT4_INDEX_FL) */
		char cmd[1024], line[512];
		snprintf(cmd, sizeof(cmd), "debugfs -R 'stat /many' '%s' 2>/dev/null", img);
		FILE *p = popen(cmd, "r");
		unsigned fl = 0;
		while (p && fgets(line, sizeof(line), p)) {
			char *q = strstr(line, "Flags: 0x");
			if (q)
				sscanf(q, "Flags: 0x%x", &fl);
		}
		if (p)
			pclose(p);
		CHECK(fl & 0x1000, "%s: /many is not an htree directory (flags 0x%x)", c->name, fl);
	}
	if (c->fallocate)
		sh("debugfs -w -R 'fallocate /fa 0 15' '%s' >/dev/null 2>&1", img);
	if (debugfs_extents(img, src)) {
		CHECK(0, "%s: debugfs failed", c->name);
		return;
	}
	struct gpunvme_fs *fs = NULL;
	int rc = open_fs(img, &fs);
	CHECK(rc == 0, "%s: open %d", c->name, rc);
	if (rc)
		return;
	CHECK(!strcmp(gpunvme_fs_type(fs), "ext4"), "%s: type %s", c->name, gpunvme_fs_type(fs));
	struct stats s = { 0 };
	check_dir(fs, src, "", 2, &s, 0);
	/* path lookup */
	uint64_t ino = 0;
	rc = gpunvme_fs_lookup(fs, "/deep/a/b/c/d/e/f/g/h/i/j/leaf.bin", &ino);
	CHECK(rc == 0 && ino > 2, "%s: lookup deep %d", c->name, rc);
	rc = gpunvme_fs_lookup(fs, "h\xc3\xa9llo_w\xc3\xb6rld_\xe6\x97\xa5\xe6\x9c\xac.txt", &ino);
	CHECK(rc == 0, "%s: lookup non-ASCII %d", c->name, rc);
	CHECK(gpunvme_fs_lookup(fs, "/nope", &ino) == -ENOENT, "%s: lookup of a missing name", c->name);
	CHECK(gpunvme_fs_lookup(fs, "/f4095/x", &ino) == -ENOTDIR, "%s: lookup through a file", c->name);
	if (c->many) {
		rc = gpunvme_fs_lookup(fs, "/many/entry_with_a_longish_name_009999", &ino);
		CHECK(rc == 0 || c->many < 10000, "%s: lookup in the big directory %d", c->name, rc);
	}
	struct gpunvme_extent *x = NULL;
	size_t nx = 0;
	rc = gpunvme_fs_lookup(fs, "/deep", &ino);
	CHECK(rc == 0 && gpunvme_fs_extents(fs, ino, &x, &nx) == -EINVAL, "%s: extents of a directory", c->name);
	free(x);
	if (c->inline_files)
		CHECK(s.inline_files > 0, "%s: no inline files were made", c->name);
	if (c->fallocate)
		CHECK(s.unwritten > 0, "%s: no unwritten extents seen", c->name);
	if (!c->inline_files)
		CHECK(s.holes > 0, "%s: no holes seen", c->name);
	printf("  %-22s %s: %zu files (%zu with extents, %zu inline), %zu dirs, %zu symlinks, %zu holes, %zu unwritten, %.1f MiB\n",
	       c->name, check_failures() == f0 ? "ok" : "FAILED", s.files, s.ext_files, s.inline_files, s.dirs, s.links, s.holes,
	       s.unwritten, s.bytes / 1048576.0);
	close_fs(fs);
	free_recs();
	sh("rm -rf '%s' '%s'", src, img);
}

/* ---- negative tests -------------------------------------------------------- */

static void patch(const char *img, uint64_t off, const void *b, size_t n)
{
	int fd = open(img, O_WRONLY);
	if (fd < 0 || pwrite(fd, b, n, (off_t)off) != (ssize_t)n)
		perror(img);
	close(fd);
}

static uint8_t peek8(const char *img, uint64_t off)
{
	uint8_t v = 0;
	int fd = open(img, O_RDONLY);
	if (fd < 0 || pread(fd, &v, 1, (off_t)off) != 1)
		perror(img);
	close(fd);
	return v;
}

/* byte offset of an inode in the image, from "debugfs imap" */
static uint64_t inode_off(const char *img, const char *path, uint32_t bs)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "debugfs -R 'imap %s' '%s' 2>/dev/null", path, img);
	FILE *p = popen(cmd, "r");
	char line[256];
	unsigned long long blk = 0, off = 0;
	while (p && fgets(line, sizeof(line), p)) {
		char *l = strstr(line, "located at block");
		if (l)
			sscanf(l, "located at block %llu, offset 0x%llx", &blk, &off);
	}
	if (p)
		pclose(p);
	return blk * bs + off;
}

static uint64_t bmap(const char *img, const char *path, uint64_t lblk)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "debugfs -R 'bmap %s %llu' '%s' 2>/dev/null", path, (unsigned long long)lblk, img);
	FILE *p = popen(cmd, "r");
	unsigned long long b = 0;
	if (p && fscanf(p, "%llu", &b) != 1)
		b = 0;
	if (p)
		pclose(p);
	return b;
}

/* mkfs a small image from a tiny tree: the base of the negative tests */
static void small_image(const char *img, const char *opts)
{
	char src[512];
	snprintf(src, sizeof(src), "%s/neg_src", tmp);
	sh("rm -rf '%s' && mkdir -p '%s/d'", src, src);
	write_file(src, "f", 3000);
	uint64_t fo[40];
	for (int i = 0; i < 40; i++)
		fo[i] = (uint64_t)i * 4096;
	if (strstr(opts, "inline_data"))
		write_file(src, "frag", 40 * 4096);  /* see populate() */
	else
		write_sparse(src, "frag", fo, 40, 1, 40 * 4096);
	for (int i = 0; i < 5; i++) {
		char n[32];
		snprintf(n, sizeof(n), "d/e%d", i);
		write_file(src, n, 10);
	}
	sh("rm -f '%s' && truncate -s 2M '%s' && mkfs.ext4 -F -q -b 1024 %s -d '%s' '%s' >/dev/null 2>&1", img, img, opts,
	   src, img);
}

static int walk_cb(void *arg, const char *name, size_t namelen, uint64_t ino, int ftype)
{
	struct ents *e = arg;
	(void)ftype;
	if ((namelen == 1 && name[0] == '.') || (namelen == 2 && !memcmp(name, "..", 2)))
		return 0;
	return collect(e, name, namelen, ino, ftype);
}

/* Everything reachable from the root, bounded; returns the first error. */
static int walk_all(struct gpunvme_fs *fs, uint64_t ino, int depth, int *budget)
{
	if (depth > 8 || --*budget < 0)
		return 0;
	struct ents e = { 0 };
	int rc = gpunvme_fs_readdir(fs, ino, walk_cb, &e), first = rc < 0 ? rc : 0;
	for (size_t i = 0; i < e.n && *budget > 0; i++) {
		struct gpunvme_stat st;
		--*budget;
		rc = gpunvme_fs_stat(fs, e.v[i].ino, &st);
		if (rc) {
			first = first ? first : rc;
			continue;
		}
		if ((st.mode & 0170000) == 0040000) {
			rc = walk_all(fs, e.v[i].ino, depth + 1, budget);
		} else {
			struct gpunvme_extent *x = NULL;
			size_t nx = 0;
			if ((st.mode & 0170000) == 0100000 && !(rc = gpunvme_fs_extents(fs, e.v[i].ino, &x, &nx)))
				free(x);
			if (rc == -ENOTSUP)
				rc = 0;  /* inline data: no extents */
			uint8_t b[8192];
			int64_t r = gpunvme_fs_pread(fs, e.v[i].ino, b, sizeof(b), 0);
			if (!rc && r < 0)
				rc = (int)r;
		}
		first = first ? first : rc;
	}
	free(e.v);
	return first;
}

static int open_and_walk(const char *img)
{
	struct gpunvme_fs *fs;
	int rc = open_fs(img, &fs);
	if (rc)
		return rc;
	int budget = 100000;
	rc = walk_all(fs, 2, 0, &budget);
	close_fs(fs);
	return rc;
}

static void negative(void)
{
	char img[512], work[512];
	snprintf(img, sizeof(img), "%s/neg.img", tmp);
	snprintf(work, sizeof(work), "%s/neg_work.img", tmp);
	const uint32_t bs = 1024;
	int rc;

	/* the clean images walk without error */
	small_image(img, "-t ext4");
	CHECK(open_and_walk(img) == 0, "clean csum image walks");

	/* superblock magic */
	sh("cp '%s' '%s'", img, work);
	patch(work, 1024 + 0x38, "\x00\x00", 2);
	struct gpunvme_fs *fs = NULL;
	rc = open_fs(work, &fs);
	CHECK(rc == -EINVAL, "bad superblock magic: %d", rc);

	/* superblock checksum */
	sh("cp '%s' '%s'", img, work);
	uint8_t v = peek8(work, 1024 + 0x30) ^ 0x55;  /* s_wtime */
	patch(work, 1024 + 0x30, &v, 1);
	rc = open_fs(work, &fs);
	CHECK(rc == -EUCLEAN && strstr(gpunvme_last_error(), "superblock checksum"), "superblock checksum: %d", rc);

	/* group descriptor checksum: flip bg_free_blocks_count of group 0 */
	sh("cp '%s' '%s'", img, work);
	v = peek8(work, 2048 + 0x0C) ^ 0x01;
	patch(work, 2048 + 0x0C, &v, 1);
	rc = open_fs(work, &fs);
	CHECK(rc == -EUCLEAN && strstr(gpunvme_last_error(), "group descriptor"), "group descriptor checksum: %d", rc);

	/* inode checksum: flip a byte of /f's mtime in the inode table */
	sh("cp '%s' '%s'", img, work);
	uint64_t io = inode_off(work, "/f", bs);
	CHECK(io > 0, "imap /f");
	v = peek8(work, io + 0x10) ^ 0x80;
	patch(work, io + 0x10, &v, 1);
	if (!(rc = open_fs(work, &fs))) {
		uint64_t ino;
		rc = gpunvme_fs_lookup(fs, "/f", &ino);
		CHECK(rc == 0, "lookup /f: %d", rc);
		struct gpunvme_stat st;
		rc = gpunvme_fs_stat(fs, ino, &st);
		CHECK(rc == -EUCLEAN && strstr(gpunvme_last_error(), "inode") && strstr(gpunvme_last_error(), "checksum"),
		      "inode checksum: %d", rc);
		close_fs(fs);
	}
	CHECK(open_and_walk(work) == -EUCLEAN, "walk with a bad inode checksum");

	/* extent block checksum: /frag has a depth-1 tree; flip its leaf */
	sh("cp '%s' '%s'", img, work);
	io = inode_off(work, "/frag", bs);
	uint8_t ib[60];
	int fd = open(work, O_RDONLY);
	CHECK(pread(fd, ib, 60, (off_t)(io + 0x28)) == 60, "read i_block");
	close(fd);
	CHECK(ib[6] == 1, "/frag has a depth-1 extent tree (depth %u)", ib[6]);
	uint64_t leaf = (uint64_t)(ib[12 + 4] | ib[12 + 5] << 8 | ib[12 + 6] << 16 | (uint32_t)ib[12 + 7] << 24);
	v = peek8(work, leaf * bs + 12 + 8) ^ 0x01;  /* ee_start_lo of the first extent */
	patch(work, leaf * bs + 12 + 8, &v, 1);
	rc = open_and_walk(work);
	CHECK(rc == -EUCLEAN && strstr(gpunvme_last_error(), "extent block checksum"), "extent block checksum: %d", rc);

	/* directory block checksum */
	sh("cp '%s' '%s'", img, work);
	uint64_t db = bmap(work, "/d", 0);
	CHECK(db > 0, "bmap /d");
	v = peek8(work, db * bs + 24 + 8) ^ 0x01;  /* a name byte of the third entry */
	patch(work, db * bs + 24 + 8, &v, 1);
	rc = open_and_walk(work);
	CHECK(rc == -EUCLEAN && strstr(gpunvme_last_error(), "directory"), "directory block checksum: %d", rc);

	/* the rest on an image without checksums, so the decoder's own checks fire */
	small_image(img, "-t ext4 -O ^metadata_csum");
	CHECK(open_and_walk(img) == 0, "clean image walks");

	/* unknown incompatible feature */
	sh("cp '%s' '%s'", img, work);
	uint8_t inc[4];
	fd = open(work, O_RDONLY);
	CHECK(pread(fd, inc, 4, 1024 + 0x60) == 4, "read incompat");
	close(fd);
	inc[0] |= 0x01;  /* compression */
	inc[3] |= 0x40;  /* an unknown bit */
	patch(work, 1024 + 0x60, inc, 4);
	rc = open_fs(work, &fs);
	CHECK(rc == -ENOTSUP && strstr(gpunvme_last_error(), "compression") && strstr(gpunvme_last_error(), "0x40000000"),
	      "unknown incompat feature: %d", rc);

	/* bad block size, inode size, inodes per group */
	static const struct { uint32_t off; uint8_t val[4]; size_t n; const char *what; } sbp[] = {
		{ 0x18, { 7 }, 1, "block size" },
		{ 0x58, { 100 }, 2, "inode size" },
		{ 0x28, { 0 }, 4, "inodes per group" },
		{ 0x28, { 0xff, 0xff, 0xff, 0xff }, 4, "inodes per group" },
		{ 0x14, { 5 }, 4, "first data block" },
		{ 0xFE, { 0, 0 }, 2, "descriptor size" },
		{ 0x20, { 0, 0 }, 2, "blocks per group" },
		{ 0x04, { 0xff, 0xff }, 2, "block count" },
	};
	for (size_t i = 0; i < sizeof(sbp) / sizeof(sbp[0]); i++) {
		sh("cp '%s' '%s'", img, work);
		patch(work, 1024 + sbp[i].off, sbp[i].val, sbp[i].n);
		rc = open_fs(work, &fs);
		CHECK(rc == -EUCLEAN, "bad %s: %d", sbp[i].what, rc);
		if (!rc)
			close_fs(fs);
	}

	/* truncated image */
	sh("cp '%s' '%s' && truncate -s 100000 '%s'", img, work, work);
	rc = open_fs(work, &fs);
	CHECK(rc == -EUCLEAN, "truncated image: %d", rc);

	/* extent header magic, depth > 5, entries > max */
	io = inode_off(img, "/f", bs);
	static const struct { uint32_t off; uint8_t val[2]; const char *msg; } ep[] = {
		{ 0, { 0x0b, 0xf3 }, "magic" },
		{ 6, { 6, 0 }, "depth" },
		{ 2, { 9, 0 }, "entries" },
		{ 12 + 4, { 0, 0 }, "zero-length" },
	};
	for (size_t i = 0; i < sizeof(ep) / sizeof(ep[0]); i++) {
		sh("cp '%s' '%s'", img, work);
		patch(work, io + 0x28 + ep[i].off, ep[i].val, 2);
		rc = open_fs(work, &fs);
		CHECK(rc == 0, "open %d", rc);
		if (rc)
			continue;
		uint64_t ino;
		gpunvme_fs_lookup(fs, "/f", &ino);
		struct gpunvme_extent *x = NULL;
		size_t nx;
		rc = gpunvme_fs_extents(fs, ino, &x, &nx);
		CHECK(rc == -EUCLEAN && strstr(gpunvme_last_error(), ep[i].msg), "extent header %s: %d", ep[i].msg, rc);
		uint8_t b[16];
		CHECK(gpunvme_fs_pread(fs, ino, b, sizeof(b), 0) == -EUCLEAN, "pread with a bad extent header");
		free(x);
		close_fs(fs);
	}
	/* an index entry pointing past the end, and one pointing at itself */
	io = inode_off(img, "/frag", bs);
	fd = open(img, O_RDONLY);
	CHECK(pread(fd, ib, 60, (off_t)(io + 0x28)) == 60, "read i_block");
	close(fd);
	leaf = (uint64_t)(ib[16] | ib[17] << 8 | ib[18] << 16 | (uint32_t)ib[19] << 24);
	{
		sh("cp '%s' '%s'", img, work);
		uint8_t far[4] = { 0xff, 0xff, 0xff, 0x0f };
		patch(work, io + 0x28 + 16, far, 4);
		rc = open_and_walk(work);
		CHECK(rc == -EUCLEAN && strstr(gpunvme_last_error(), "outside"), "index past the end: %d", rc);
		/* the leaf made an index node (depth 1) pointing at itself */
		sh("cp '%s' '%s'", img, work);
		patch(work, leaf * bs + 6, "\x01\x00", 2);
		uint8_t self[12] = { 0, 0, 0, 0, (uint8_t)leaf, (uint8_t)(leaf >> 8), (uint8_t)(leaf >> 16),
				     (uint8_t)(leaf >> 24), 0, 0, 0, 0 };
		patch(work, leaf * bs + 12, self, 12);
		rc = open_and_walk(work);
		CHECK(rc == -EUCLEAN, "extent node pointing at itself: %d", rc);
	}

	/* directory record lengths: 0, past the end, not a multiple of 4, name_len > rec_len */
	uint64_t rb = bmap(img, "/d", 0);
	static const struct { uint32_t off; uint8_t val[2]; const char *msg; } dp[] = {
		{ 12 + 4, { 0, 0 }, "rec_len 0" },
		{ 12 + 4, { 0x00, 0x08 }, "past the block end" },
		{ 12 + 4, { 14, 0 }, "multiple of 4" },
		{ 12 + 6, { 200, 2 }, "name_len" },
	};
	for (size_t i = 0; i < sizeof(dp) / sizeof(dp[0]); i++) {
		sh("cp '%s' '%s'", img, work);
		patch(work, rb * bs + dp[i].off, dp[i].val, 2);
		rc = open_fs(work, &fs);
		CHECK(rc == 0, "open %d", rc);
		if (rc)
			continue;
		uint64_t ino;
		rc = gpunvme_fs_lookup(fs, "/d/e3", &ino);
		CHECK(rc == -EUCLEAN && strstr(gpunvme_last_error(), "directory"), "directory %s: %d", dp[i].msg, rc);
		close_fs(fs);
	}

	/* ext2: an indirect block pointing past the end, a loop of indirect blocks */
	small_image(img, "-t ext2");
	CHECK(open_and_walk(img) == 0, "clean ext2 image walks");
	io = inode_off(img, "/frag", bs);
	fd = open(img, O_RDONLY);
	CHECK(pread(fd, ib, 60, (off_t)(io + 0x28)) == 60, "read i_block");
	close(fd);
	uint32_t ind = ib[48] | ib[49] << 8 | ib[50] << 16 | (uint32_t)ib[51] << 24;
	CHECK(ind != 0, "ext2 /frag has a single indirect block");
	{
		sh("cp '%s' '%s'", img, work);
		uint8_t far[4] = { 0xff, 0xff, 0xff, 0x0f };
		patch(work, (uint64_t)ind * bs + 4, far, 4);
		rc = open_and_walk(work);
		CHECK(rc == -EUCLEAN && strstr(gpunvme_last_error(), "outside"), "ext2 block past the end: %d", rc);
		/* a triple-indirect pointer to the single-indirect block */
		sh("cp '%s' '%s'", img, work);
		patch(work, io + 0x28 + 56, &ind, 4);
		patch(work, io + 0x28 + 52, &ind, 4);
		rc = open_and_walk(work);
		CHECK(rc == 0 || rc == -EUCLEAN, "ext2 indirect blocks shared: %d", rc);
	}
	sh("rm -f '%s' '%s'", img, work);
}

/* ---- random corruption --------------------------------------------------- */

static void corrupt_random(const char *opts, int iters)
{
	char img[512];
	snprintf(img, sizeof(img), "%s/rnd.img", tmp);
	small_image(img, opts);
	int rc0 = open_and_walk(img);
	CHECK(rc0 == 0, "clean image (%s) walks: %d", opts, rc0);
	FILE *f = fopen(img, "rb");
	uint8_t *base = malloc(2u << 20), *b = malloc(2u << 20);
	size_t n = fread(base, 1, 2u << 20, f);
	fclose(f);
	/* the metadata is in the first blocks: corrupt there mostly */
	size_t meta = n < (256u << 10) ? n : (256u << 10);
	int errs = 0, oks = 0;
	for (int it = 0; it < iters; it++) {
		memcpy(b, base, n);
		int k = 1 + (int)(xr() % 16);
		for (int j = 0; j < k; j++)
			b[(xr() % 8) ? 1024 + xr() % (meta - 1024) : xr() % n] ^= (uint8_t)(1u << (xr() % 8));
		struct mblk m = { b, n };
		struct gpunvme_blkdev bd = { mblk_read, mblk_close, &m, n, 512 };
		struct gpunvme_fs *fs;
		if (gpunvme_fs_open(&bd, 0, &fs)) {
			errs++;
			continue;
		}
		int budget = 5000;
		if (walk_all(fs, 2, 0, &budget))
			errs++;
		else
			oks++;
		gpunvme_fs_close(fs);
	}
	printf("  random corruption (%s): %d iterations, %d errors, %d clean walks\n", opts, iters, errs, oks);
	CHECK(1); /* the run is the check: no crash, no sanitizer report */
	free(base);
	free(b);
	sh("rm -f '%s'", img);
}

/* ---- performance ----------------------------------------------------------- */

static int count_cb(void *arg, const char *name, size_t namelen, uint64_t ino, int ftype)
{
	(void)ftype;
	if ((namelen == 1 && name[0] == '.') || (namelen == 2 && !memcmp(name, "..", 2)))
		return 0;
	return collect(arg, name, namelen, ino, ftype);
}

static void index_tree(struct gpunvme_fs *fs, uint64_t ino, size_t *files, size_t *extents)
{
	struct ents e = { 0 };
	gpunvme_fs_readdir(fs, ino, count_cb, &e);
	for (size_t i = 0; i < e.n; i++) {
		struct gpunvme_stat st;
		if (gpunvme_fs_stat(fs, e.v[i].ino, &st))
			continue;
		(*files)++;
		if ((st.mode & 0170000) == 0040000) {
			index_tree(fs, e.v[i].ino, files, extents);
		} else if ((st.mode & 0170000) == 0100000) {
			struct gpunvme_extent *x = NULL;
			size_t nx = 0;
			if (!gpunvme_fs_extents(fs, e.v[i].ino, &x, &nx))
				*extents += nx;
			free(x);
		}
	}
	free(e.v);
}

static void perf(int nfiles)
{
	char src[512], img[512];
	snprintf(src, sizeof(src), "%s/perf_src", tmp);
	snprintf(img, sizeof(img), "%s/perf.img", tmp);
	sh("mkdir -p '%s'", src);
	for (int d = 0; d < 100; d++) {
		char p[600];
		snprintf(p, sizeof(p), "%s/d%03d", src, d);
		sh("mkdir -p '%s'", p);
		for (int i = 0; i < nfiles / 100; i++) {
			char n[32];
			snprintf(n, sizeof(n), "file%06d", i);
			write_file(p, n, (size_t)(i % 5) * 1000);
		}
	}
	sh("rm -f '%s' && truncate -s 1G '%s' && mkfs.ext4 -F -q -N %d -d '%s' '%s' >/dev/null 2>&1", img, img,
	   nfiles + 1000, src, img);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct gpunvme_fs *fs;
	if (open_fs(img, &fs) == 0) {
		size_t files = 0, extents = 0;
		index_tree(fs, 2, &files, &extents);
		close_fs(fs);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		printf("  perf: indexed %zu inodes, %zu extents in %.3f s\n", files, extents,
		       (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	}
	sh("rm -rf '%s' '%s'", src, img);
}

int main(void)
{
	if (!have_tools()) {
		printf("SKIP: mkfs.ext4/debugfs/e2fsck not found\n");
		return 77;
	}
	snprintf(tmp, sizeof(tmp), "%s/test_ext4.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(tmp)) {
		perror("mkdtemp");
		return 1;
	}
	static const struct cfg cfgs[] = {
		{ "ext4-4k", "-t ext4 -b 4096 -N 12000", "160M", 10000, 0, 1, 1 },
		{ "ext4-1k", "-t ext4 -b 1024 -N 12000", "160M", 3000, 0, 1, 1 },
		{ "ext4-4k-no64bit-nocsum", "-t ext4 -b 4096 -O ^64bit,^metadata_csum", "128M", 0, 0, 1, 0 },
		{ "ext4-1k-uninit_bg", "-t ext4 -b 1024 -O ^metadata_csum,uninit_bg", "128M", 0, 0, 0, 0 },
		{ "ext4-128-byte-inodes", "-t ext4 -b 4096 -I 128", "128M", 0, 0, 0, 0 },
		{ "ext4-noextent", "-t ext4 -b 4096 -O ^extent,^64bit", "128M", 0, 0, 0, 0 },
		{ "ext4-meta_bg", "-t ext4 -b 1024 -O meta_bg,^resize_inode", "128M", 0, 0, 0, 0 },
		{ "ext4-bigalloc", "-t ext4 -b 1024 -O bigalloc -C 16384", "256M", 0, 0, 0, 0 },
		{ "ext4-64k", "-t ext4 -b 65536", "512M", 0, 0, 0, 0 },
		{ "ext4-inline_data", "-t ext4 -b 4096 -I 256 -O inline_data", "128M", 0, 1, 0, 0 },
		{ "ext4-inline_data-nocsum", "-t ext4 -b 1024 -I 512 -O inline_data,^metadata_csum", "128M", 0, 1, 0, 0 },
		{ "ext2-1k", "-t ext2 -b 1024 -N 12000", "160M", 10000, 0, 0, 1 },
		{ "ext3-4k", "-t ext3 -b 4096", "128M", 0, 0, 0, 0 },
		{ "ext2-nofiletype", "-t ext2 -b 4096 -O ^filetype", "128M", 0, 0, 0, 0 },
		{ "ext2-rev0", "-t ext2 -b 1024 -r 0", "128M", 0, 0, 0, 0 },
	};
	const char *only = getenv("GPUNVME_EXT4_ONLY");
	for (size_t i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++)
		if (!only || strstr(cfgs[i].name, only))
			run_cfg(&cfgs[i]);
	if (!only || !strcmp(only, "neg")) {
		negative();
		printf("  negative tests done\n");
		corrupt_random("-t ext4 -O ^metadata_csum", 300);
		corrupt_random("-t ext2", 200);
		corrupt_random("-t ext4 -O inline_data,^metadata_csum -I 256", 200);
	}
	if (getenv("GPUNVME_EXT4_PERF"))
		perf(atoi(getenv("GPUNVME_EXT4_PERF")));
	sh("rm -rf '%s'", tmp);
	return check_finish("test_ext4");
}
