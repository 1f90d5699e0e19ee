/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The ext4 and XFS decoders against images made by the real tools and a real
 * kernel (tests/fs/fixtures/, scripts/fixtures/make-fs-fixtures.sh):
 *
 *   test_fixtures FIXTURE_DIR WORK_DIR NAME [file|ns|both]
 *
 * decompresses NAME.img.zst into WORK_DIR and checks every entry of the
 * manifest through the image file (gpunvme_blkdev_open_file) and through the
 * user-space driver (emu:IMAGE -> gpunvme_blkdev_open_ns), with 512-byte
 * LBAs and again with 4 KiB LBAs and 8 KiB MDTS:
 *   - files: type, size, bytes (gpunvme_fs_pread against the generator
 *     of fxgen.c, zeroes outside its data segments; holes are skipped
 *     through the extent map, so a 4 GiB sparse file costs nothing), and
 *     extents equal to the tools' own view: debugfs `ex` / xfs_db `bmap`
 *     (exactly) and the guest kernel's `filefrag -v` (within EOF);
 *   - directories: the listing has exactly the manifest's entry count and
 *     every manifest child (10,000 in /bigdir), each resolving to the same
 *     inode as gpunvme_fs_lookup_nofollow;
 *   - symbolic links: target bytes.
 * Every failure names the fixture, the source, the path and the reason; the
 * test goes on and fails at the end, so one run lists all broken files.
 * Exit 0 pass, 1 fail, 77 skip (no zstd).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../harness/check.h"
#include "gpunvme/extents.h"
#include "gpunvme/gpunvme.h"

/* ---- the generator of scripts/fixtures/fxgen.c (keep them equal) ------------ */

static uint64_t fnv1a64(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h;
}

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint8_t gen_byte(uint64_t seed, uint64_t o)
{
	unsigned w = (unsigned)(o & 511);
	if (w < 8)
		return (uint8_t)(mix64(seed ^ ((o >> 9) * 0x9e3779b97f4a7c15ull)) >> (8 * w));
	return (uint8_t)(seed + o * 7);
}

/* ---- manifest ----------------------------------------------------------------- */

struct seg {
	uint64_t off, len;
};

struct entry {
	char type;           /* F D L */
	char *path;
	uint64_t size;       /* F: bytes; D: entry count */
	struct seg *segs;
	size_t nsegs;
	char *target;        /* L */
};

struct xlist {
	struct gpunvme_extent *v;
	size_t n, cap;
};

struct toolfile {
	char *path;
	struct xlist x;
};

struct fixture {
	const char *name;
	char fstype[8];
	uint32_t bs;
	struct entry *e;
	size_t ne;
	struct toolfile *tool, *ffrag;
	size_t ntool, nffrag;
};

static const char *cur_fixture, *cur_source;

/* "fixture [source] path": what a failure is about, in check.h's place for
 * the expression (the checks here compare a file system with a manifest,
 * path by path, so the path says more than the condition would). */
static const char *fail_what(const char *path)
{
	static char what[1024];
	/* a longer path is cut: the head names the fixture and the file */
	if (snprintf(what, sizeof(what), "%s [%s] %s", cur_fixture, cur_source, path) >= (int)sizeof(what))
		memcpy(what + sizeof(what) - 4, "...", 4);
	return what;
}
#define fail(path, ...) check_failf(__FILE__, __LINE__, fail_what(path), __VA_ARGS__)

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n);
	if (!p) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	return p;
}

static char *xstrdup(const char *s)
{
	char *d = strdup(s);
	if (!d)
		exit(1);
	return d;
}

static void xpush(struct xlist *l, uint64_t logical, uint64_t physical, uint64_t length, uint32_t flags)
{
	/* merge as fs_extents_finish does: the tools print what the on-disk
	 * records hold, adjacent records may continue one another */
	if (l->n) {
		struct gpunvme_extent *p = &l->v[l->n - 1];
		if (p->logical + p->length == logical && p->physical + p->length == physical && p->flags == flags) {
			p->length += length;
			return;
		}
	}
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 16;
		l->v = xrealloc(l->v, l->cap * sizeof(*l->v));
	}
	l->v[l->n++] = (struct gpunvme_extent){ logical, physical, length, flags };
}

/* popen("zstd -dc FILE"), whole output in memory, NUL-terminated */
static char *slurp_zst(const char *path, size_t *len)
{
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "zstd -dcq '%s'", path);
	FILE *f = popen(cmd, "r");
	if (!f)
		return NULL;
	size_t cap = 1 << 20, n = 0;
	char *b = xrealloc(NULL, cap);
	size_t r;
	while ((r = fread(b + n, 1, cap - n - 1, f)) > 0) {
		n += r;
		if (cap - n < 2)
			b = xrealloc(b, cap *= 2);
	}
	if (pclose(f) != 0) {
		free(b);
		return NULL;
	}
	b[n] = 0;
	*len = n;
	return b;
}

static int parse_manifest(struct fixture *fx, char *text)
{
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		char *f[4] = {0};
		int nf = 0;
		for (char *p = line; nf < 4;) {
			f[nf++] = p;
			char *t = strchr(p, '\t');
			if (!t)
				break;
			*t = 0;
			p = t + 1;
		}
		if (nf < 3)
			return -1;
		fx->e = xrealloc(fx->e, (fx->ne + 1) * sizeof(*fx->e));
		struct entry *e = &fx->e[fx->ne++];
		memset(e, 0, sizeof(*e));
		e->type = f[0][0];
		e->path = xstrdup(f[1]);
		if (e->type == 'L') {
			e->target = xstrdup(f[2]);
			continue;
		}
		e->size = strtoull(f[2], NULL, 10);
		if (e->type == 'F' && nf == 4 && strcmp(f[3], "-")) {
			for (char *s = f[3]; *s;) {
				uint64_t off = strtoull(s, &s, 10);
				if (*s++ != '+')
					return -1;
				uint64_t len = strtoull(s, &s, 10);
				e->segs = xrealloc(e->segs, (e->nsegs + 1) * sizeof(*e->segs));
				e->segs[e->nsegs++] = (struct seg){ off, len };
				if (*s == ',')
					s++;
			}
		}
	}
	return 0;
}

static struct toolfile *tool_new(struct toolfile **v, size_t *n, const char *path)
{
	*v = xrealloc(*v, (*n + 1) * sizeof(**v));
	struct toolfile *t = &(*v)[(*n)++];
	memset(t, 0, sizeof(*t));
	t->path = xstrdup(path);
	return t;
}

/*
 * debugfs `ex`:  " 1/ 2   1/ 18     0 -   679  7002 -  7681    680 Uninit"
 *   leaves are the lines whose level equals the depth; units: blocks.
 * xfs_db bmap:   "data offset 64 startblock 167 (0/167) count 16 flag 1"
 *   AG-relative block (agno/agbno), so bytes = (agno * agblocks + agbno) * bs.
 */
static int parse_tool(struct fixture *fx, char *text)
{
	uint64_t agblocks = 0;
	struct toolfile *cur = NULL;
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		unsigned long long a, b, c, d, e, g, h;
		unsigned lvl, depth;
		if (!strncmp(line, "SB agblocks = ", 14)) {
			agblocks = strtoull(line + 14, NULL, 10);
		} else if (!strncmp(line, "FILE ", 5)) {
			cur = tool_new(&fx->tool, &fx->ntool, line + 5);
		} else if (!cur) {
			continue;
		} else if (sscanf(line, "data offset %llu startblock %llu (%llu/%llu) count %llu flag %llu", &a, &b,
				  &c, &d, &e, &g) == 6) {
			if (!agblocks)
				return -1;
			xpush(&cur->x, a * fx->bs, (c * agblocks + d) * fx->bs, e * fx->bs,
			      g ? GPUNVME_EXTENT_UNWRITTEN : 0);
		} else if (sscanf(line, " %u/ %u %llu/ %llu %llu - %llu %llu - %llu %llu", &lvl, &depth, &a, &b, &c,
				  &d, &e, &g, &h) == 9 &&
			   lvl == depth) {
			char *u = strstr(line, "Uninit");
			xpush(&cur->x, c * fx->bs, e * fx->bs, h * fx->bs, u ? GPUNVME_EXTENT_UNWRITTEN : 0);
		}
	}
	return 0;
}

/* filefrag -v: "   3:      175..     177:      20682..     20684:      3:     20541: last,unwritten" */
static int parse_filefrag(struct fixture *fx, char *text)
{
	struct toolfile *cur = NULL;
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		unsigned long long i, l0, l1, p0, p1, len;
		if (!strncmp(line, "FX-FILE ", 8)) {
			cur = tool_new(&fx->ffrag, &fx->nffrag, line + 8);
		} else if (cur && sscanf(line, " %llu: %llu.. %llu: %llu.. %llu: %llu:", &i, &l0, &l1, &p0, &p1,
					 &len) == 6) {
			xpush(&cur->x, l0 * fx->bs, p0 * fx->bs, len * fx->bs,
			      strstr(line, "unwritten") ? GPUNVME_EXTENT_UNWRITTEN : 0);
		}
	}
	return 0;
}

static const struct toolfile *tool_find(const struct toolfile *v, size_t n, const char *path)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(v[i].path, path))
			return &v[i];
	return NULL;
}

/* ---- directories ---------------------------------------------------------------- */

struct dent {
	char *name;
	uint64_t ino;
};

struct dcache {
	char *path;
	struct dent *v;
	size_t n, cap;
	int dots;
	bool failed;      /* could not be listed */
	size_t skipped;   /* manifest entries under it left unchecked then */
};

static struct dcache *dirs;
static size_t ndirs;

static int dent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct dent *)a)->name, ((const struct dent *)b)->name);
}

static int list_cb(void *arg, const char *name, size_t namelen, uint64_t ino, int ftype)
{
	struct dcache *d = arg;
	(void)ftype;
	if ((namelen == 1 && name[0] == '.') || (namelen == 2 && !memcmp(name, "..", 2))) {
		d->dots++;
		return 0;
	}
	if (d->n == d->cap) {
		d->cap = d->cap ? 2 * d->cap : 64;
		d->v = xrealloc(d->v, d->cap * sizeof(*d->v));
	}
	char *s = xrealloc(NULL, namelen + 1);
	memcpy(s, name, namelen);
	s[namelen] = 0;
	d->v[d->n++] = (struct dent){ s, ino };
	return 0;
}

static void dirs_free(void)
{
	for (size_t i = 0; i < ndirs; i++) {
		for (size_t k = 0; k < dirs[i].n; k++)
			free(dirs[i].v[k].name);
		free(dirs[i].v);
		free(dirs[i].path);
	}
	free(dirs);
	dirs = NULL;
	ndirs = 0;
}

static struct dcache *dir_get(const char *path)
{
	for (size_t i = 0; i < ndirs; i++)
		if (!strcmp(dirs[i].path, path))
			return &dirs[i];
	return NULL;
}

static int list_dir(struct gpunvme_fs *fs, const char *path, uint64_t ino)
{
	dirs = xrealloc(dirs, (ndirs + 1) * sizeof(*dirs));
	struct dcache *d = &dirs[ndirs++];
	memset(d, 0, sizeof(*d));
	d->path = xstrdup(path);
	int rc = gpunvme_fs_readdir(fs, ino, list_cb, d);
	if (rc < 0) {
		fail(path, "readdir: %s", gpunvme_last_error());
		d->failed = true;
		return rc;
	}
	qsort(d->v, d->n, sizeof(*d->v), dent_cmp);
	for (size_t i = 1; i < d->n; i++)
		if (!strcmp(d->v[i].name, d->v[i - 1].name))
			fail(path, "entry '%s' listed twice", d->v[i].name);
	return 0;
}

static struct dcache *parent_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	char parent[4096];
	size_t pl = (size_t)(slash - path);
	if (pl == 0)
		strcpy(parent, "/");
	else
		snprintf(parent, sizeof(parent), "%.*s", (int)pl, path);
	return dir_get(parent);
}

/* true when the parent directory could not be listed: counted once per
 * directory instead of one failure per entry */
static bool parent_failed(const char *path)
{
	struct dcache *d = parent_of(path);
	if (d && d->failed) {
		d->skipped++;
		return true;
	}
	return false;
}

/* the inode of path through the cached listing of its parent; 0 if absent */
static uint64_t dir_child(const char *path)
{
	const char *slash = strrchr(path, '/');
	char parent[4096];
	size_t pl = (size_t)(slash - path);
	if (pl == 0)
		strcpy(parent, "/");
	else
		snprintf(parent, sizeof(parent), "%.*s", (int)pl, path);
	struct dcache *d = dir_get(parent);
	if (!d)
		return 0;
	struct dent key = { (char *)(slash + 1), 0 };
	struct dent *r = bsearch(&key, d->v, d->n, sizeof(*d->v), dent_cmp);
	return r ? r->ino : 0;
}

/* ---- checks ------------------------------------------------------------------- */

static int xl_equal(const struct gpunvme_extent *a, size_t na, const struct gpunvme_extent *b, size_t nb,
		    const char *path, const char *tool)
{
	size_t n = na < nb ? na : nb;
	for (size_t i = 0; i < n; i++)
		if (a[i].logical != b[i].logical || a[i].physical != b[i].physical || a[i].length != b[i].length ||
		    a[i].flags != b[i].flags) {
			fail(path,
			     "extent %zu differs from %s: ours logical %" PRIu64 " physical %" PRIu64 " length %" PRIu64
			     " flags %u, %s's logical %" PRIu64 " physical %" PRIu64 " length %" PRIu64 " flags %u",
			     i, tool, a[i].logical, a[i].physical, a[i].length, a[i].flags, tool, b[i].logical,
			     b[i].physical, b[i].length, b[i].flags);
			return -1;
		}
	if (na != nb) {
		fail(path, "%zu extents, %s has %zu", na, tool, nb);
		return -1;
	}
	return 0;
}

/* clip to [0, end) and merge again: FIEMAP was taken before unmount and may
 * differ in what lies past EOF (speculative preallocation) */
static size_t clip(const struct gpunvme_extent *in, size_t n, uint64_t end, struct gpunvme_extent *out)
{
	struct xlist l = { out, 0, n };
	for (size_t i = 0; i < n; i++) {
		if (in[i].logical >= end)
			continue;
		uint64_t len = in[i].length;
		if (in[i].logical + len > end)
			len = end - in[i].logical;
		xpush(&l, in[i].logical, in[i].physical, len, in[i].flags);
	}
	return l.n;
}

/* expected bytes [off, off + len): generator bytes inside the data segments
 * (sorted, as fxgen prints them), zeroes elsewhere */
static void expect(const struct entry *e, uint64_t seed, uint64_t off, size_t len, uint8_t *out)
{
	memset(out, 0, len);
	size_t lo = 0, hi = e->nsegs;
	while (lo < hi) { /* first segment ending after off */
		size_t mid = lo + (hi - lo) / 2;
		if (e->segs[mid].off + e->segs[mid].len <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < e->nsegs && e->segs[i].off < off + len; i++) {
		uint64_t s0 = e->segs[i].off > off ? e->segs[i].off : off;
		uint64_t s1 = e->segs[i].off + e->segs[i].len < off + len ? e->segs[i].off + e->segs[i].len : off + len;
		for (uint64_t o = s0; o < s1; o++)
			out[o - off] = gen_byte(seed, o);
	}
}

/* 0, or the first differing byte reported */
static int compare(const struct entry *e, const uint8_t *got, const uint8_t *want, size_t len, uint64_t off,
		   const char *what)
{
	if (!memcmp(got, want, len))
		return 0;
	for (size_t i = 0; i < len; i++)
		if (got[i] != want[i]) {
			fail(e->path, "%sbyte %" PRIu64 " is 0x%02x, expected 0x%02x", what, off + i, got[i], want[i]);
			break;
		}
	return -1;
}

#define CHUNK (1u << 20)

static void check_bytes(struct gpunvme_fs *fs, const struct entry *e, uint64_t ino, const struct gpunvme_extent *x,
			size_t n, uint8_t *buf, uint8_t *want)
{
	uint64_t seed = fnv1a64(e->path), pos = 0;
	/* the extent map must place every data byte (in memory, no reads) */
	for (size_t i = 0; i < e->nsegs; i++)
		for (uint64_t o = e->segs[i].off, end = o + e->segs[i].len; o < end;) {
			uint64_t contig = 0;
			if (gpunvme_extent_map(x, n, o, &contig) < 0 || contig == 0) {
				fail(e->path, "byte %" PRIu64 " holds data but the extent map says hole/unwritten", o);
				return;
			}
			o += contig;
		}
	/* bytes: 1 MiB preads (holes inside read as zeroes), skipping holes
	 * of a whole chunk or more after sampling their first 4 KiB */
	while (pos < e->size) {
		uint64_t contig = 0, left = e->size - pos;
		int64_t phys = gpunvme_extent_map(x, n, pos, &contig);
		if (phys < 0 && (contig == 0 || contig >= CHUNK)) {
			uint64_t hl = contig && contig < left ? contig : left;
			size_t k = hl < 4096 ? (size_t)hl : 4096;
			int64_t r = gpunvme_fs_pread(fs, ino, buf, k, pos);
			if (r != (int64_t)k) {
				fail(e->path, "pread of a hole at %" PRIu64 ": %" PRId64 " (%s)", pos, r,
				     gpunvme_last_error());
				return;
			}
			for (size_t i = 0; i < k; i++)
				if (buf[i]) {
					fail(e->path, "hole byte %" PRIu64 " reads %u, not 0", pos + i, buf[i]);
					return;
				}
			pos += hl;
			continue;
		}
		size_t k = left < CHUNK ? (size_t)left : CHUNK;
		int64_t r = gpunvme_fs_pread(fs, ino, buf, k, pos);
		if (r != (int64_t)k) {
			fail(e->path, "pread of %zu bytes at %" PRIu64 ": %" PRId64 " (%s)", k, pos, r,
			     gpunvme_last_error());
			return;
		}
		expect(e, seed, pos, k, want);
		if (compare(e, buf, want, k, pos, ""))
			return;
		pos += k;
	}
	/* one read across everything small enough, holes included: the
	 * hole/data boundaries inside one pread */
	if (e->size && e->size <= 4 * CHUNK) {
		uint8_t *all = xrealloc(NULL, (size_t)e->size + 1);
		int64_t r = gpunvme_fs_pread(fs, ino, all, (size_t)e->size + 1, 0);
		if (r != (int64_t)e->size)
			fail(e->path, "whole-file pread returned %" PRId64 ", size %" PRIu64 " (%s)", r, e->size,
			     gpunvme_last_error());
		else if (e->size <= CHUNK) {
			expect(e, seed, 0, (size_t)e->size, want);
			compare(e, all, want, (size_t)e->size, 0, "whole-file pread: ");
		} else {
			for (uint64_t o = 0; o < e->size; o += CHUNK) {
				size_t k = e->size - o < CHUNK ? (size_t)(e->size - o) : CHUNK;
				expect(e, seed, o, k, want);
				if (compare(e, all + o, want, k, o, "whole-file pread: "))
					break;
			}
		}
		free(all);
	}
}

static void check_file(struct gpunvme_fs *fs, const struct fixture *fx, const struct entry *e, uint64_t ino,
		       uint8_t *buf)
{
	struct gpunvme_stat st;
	if (gpunvme_fs_stat(fs, ino, &st)) {
		fail(e->path, "stat: %s", gpunvme_last_error());
		return;
	}
	if ((st.mode & 0170000) != 0100000) {
		fail(e->path, "mode 0%o is not a regular file", st.mode);
		return;
	}
	if (st.size != e->size) {
		fail(e->path, "size %" PRIu64 ", expected %" PRIu64, st.size, e->size);
		return;
	}
	struct gpunvme_extent *x = NULL;
	size_t n = 0;
	if (gpunvme_fs_extents(fs, ino, &x, &n)) {
		fail(e->path, "extents: %s", gpunvme_last_error());
		return;
	}
	if (e->size > 0) {
		const struct toolfile *t = tool_find(fx->tool, fx->ntool, e->path);
		const char *tn = fx->fstype[0] == 'x' ? "xfs_db bmap" : "debugfs ex";
		if (!t)
			fail(e->path, "no %s output recorded", tn);
		else
			xl_equal(x, n, t->x.v, t->x.n, e->path, tn);
		const struct toolfile *ff = tool_find(fx->ffrag, fx->nffrag, e->path);
		if (!ff) {
			fail(e->path, "no filefrag output recorded");
		} else {
			uint64_t end = (e->size + fx->bs - 1) / fx->bs * fx->bs;
			struct gpunvme_extent *a = xrealloc(NULL, (n + 1) * sizeof(*a));
			struct gpunvme_extent *b = xrealloc(NULL, (ff->x.n + 1) * sizeof(*b));
			size_t na = clip(x, n, end, a), nb = clip(ff->x.v, ff->x.n, end, b);
			xl_equal(a, na, b, nb, e->path, "filefrag");
			free(a);
			free(b);
		}
	} else if (n) {
		fail(e->path, "an empty file with %zu extents", n);
	}
	check_bytes(fs, e, ino, x, n, buf, buf + CHUNK);
	free(x);
}

static int run_source(struct gpunvme_fs *fs, const struct fixture *fx)
{
	unsigned before = check_failures();
	if (strcmp(gpunvme_fs_type(fs), fx->fstype))
		fail("/", "file system type %s, expected %s", gpunvme_fs_type(fs), fx->fstype);
	if (gpunvme_fs_block_size(fs) != fx->bs)
		fail("/", "block size %u, expected %u", gpunvme_fs_block_size(fs), fx->bs);
	uint64_t root;
	if (gpunvme_fs_lookup(fs, "/", &root)) {
		fail("/", "lookup: %s", gpunvme_last_error());
		return -1;
	}
	list_dir(fs, "/", root);
	/* directories first (manifest order is parents before children) */
	for (size_t i = 0; i < fx->ne; i++) {
		const struct entry *e = &fx->e[i];
		if (e->type != 'D' || parent_failed(e->path))
			continue;
		uint64_t ino = 0;
		if (gpunvme_fs_lookup_nofollow(fs, e->path, &ino)) {
			fail(e->path, "lookup: %s", gpunvme_last_error());
			continue;
		}
		if (dir_child(e->path) != ino)
			fail(e->path, "lookup gives inode %" PRIu64 ", the parent's listing %" PRIu64, ino,
			     dir_child(e->path));
		struct gpunvme_stat st;
		if (gpunvme_fs_stat(fs, ino, &st) || (st.mode & 0170000) != 0040000) {
			fail(e->path, "not a directory (%s)", gpunvme_last_error());
			continue;
		}
		if (list_dir(fs, e->path, ino))
			continue;
		struct dcache *d = dir_get(e->path);
		if (d->n != e->size)
			fail(e->path, "%zu entries listed, %" PRIu64 " expected", d->n, e->size);
		if (d->dots != 2)
			fail(e->path, "'.' and '..' seen %d times, expected 2", d->dots);
	}
	uint8_t *buf = xrealloc(NULL, 2 * CHUNK);
	size_t nfiles = 0, bigdir = 0, checked = 0;
	for (size_t i = 0; i < fx->ne; i++) {
		const struct entry *e = &fx->e[i];
		if (e->type == 'D' || parent_failed(e->path))
			continue;
		uint64_t ino = dir_child(e->path);
		if (!ino) {
			fail(e->path, "missing from its directory's listing");
			continue;
		}
		/* a full lookup for all but the 10,000 empty files of /bigdir,
		 * where every 500th does (each lookup lists the whole directory) */
		bool big = !strncmp(e->path, "/bigdir/", 8);
		if (!big || bigdir++ % 500 == 0) {
			uint64_t li = 0;
			if (gpunvme_fs_lookup_nofollow(fs, e->path, &li))
				fail(e->path, "lookup: %s", gpunvme_last_error());
			else if (li != ino)
				fail(e->path, "lookup gives inode %" PRIu64 ", the listing %" PRIu64, li, ino);
		}
		checked++;
		if (e->type == 'F') {
			check_file(fs, fx, e, ino, buf);
			nfiles++;
		} else {
			struct gpunvme_stat st;
			char t[4096];
			size_t tl = strlen(e->target);
			if (gpunvme_fs_stat(fs, ino, &st) || (st.mode & 0170000) != 0120000) {
				fail(e->path, "not a symbolic link (%s)", gpunvme_last_error());
				continue;
			}
			int64_t r = gpunvme_fs_pread(fs, ino, t, sizeof(t), 0);
			if (st.size != tl || r != (int64_t)tl || memcmp(t, e->target, tl))
				fail(e->path, "link target (%" PRId64 " bytes, size %" PRIu64 ") is not '%s' (%s)", r,
				     st.size, e->target, r < 0 ? gpunvme_last_error() : "");
		}
	}
	/* the root holds every top-level manifest entry (ext4 adds lost+found) */
	struct dcache *r = dir_get("/");
	size_t top = 0;
	for (size_t i = 0; i < fx->ne; i++)
		top += !strchr(fx->e[i].path + 1, '/');
	if (r->n != top + (fx->fstype[0] == 'e'))
		fail("/", "%zu entries in the root, expected %zu", r->n, top + (fx->fstype[0] == 'e'));
	for (size_t i = 0; i < ndirs; i++)
		if (dirs[i].failed && dirs[i].skipped)
			fail(dirs[i].path, "%zu entries under it left unchecked: the directory cannot be listed",
			     dirs[i].skipped);
	free(buf);
	size_t want = 0;
	for (size_t i = 0; i < fx->ne; i++)
		want += fx->e[i].type != 'D';
	printf("%s [%s]: %zu of %zu files and links checked (%zu regular files), %u failures\n", fx->name,
	       cur_source, checked, want, nfiles, check_failures() - before);
	dirs_free();
	return 0;
}

/* the namespace of an emulated controller whose backing file is the image */
static void run_ns(const struct fixture *fx, const char *uri, const char *label, uint32_t lba)
{
	cur_source = label;
	struct gpunvme_ctrl *c;
	struct gpunvme_blkdev dev;
	struct gpunvme_fs *fs;
	if (gpunvme_open(uri, NULL, &c)) {
		fail(uri, "gpunvme_open: %s", gpunvme_last_error());
		return;
	}
	if (gpunvme_blkdev_open_ns(c, 1, &dev)) {
		fail(uri, "blkdev_open_ns: %s", gpunvme_last_error());
	} else {
		if (dev.lba_size != lba || dev.size != (uint64_t)(fx->bs == 1024 ? 64 : 128) << 20)
			fail(uri, "namespace of %" PRIu64 " bytes, LBA %u", dev.size, dev.lba_size);
		if (gpunvme_fs_open(&dev, 0, &fs))
			fail(uri, "fs_open: %s", gpunvme_last_error());
		else {
			run_source(fs, fx);
			gpunvme_fs_close(fs);
		}
		gpunvme_blkdev_close(&dev);
	}
	gpunvme_close(c);
}

static int sh(const char *cmd)
{
	int st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: %s FIXTURE_DIR WORK_DIR NAME [file|ns|both]\n", argv[0]);
		return 2;
	}
	const char *fxdir = argv[1], *work = argv[2], *name = argv[3], *how = argc > 4 ? argv[4] : "both";
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (sh("zstd --version >/dev/null 2>&1")) {
		printf("SKIP: no zstd command to decompress the fixtures (apt-get install zstd)\n");
		return 77;
	}
	struct fixture fx = { .name = name };
	if (!strncmp(name, "ext4", 4))
		strcpy(fx.fstype, "ext4");
	else if (!strncmp(name, "xfs", 3))
		strcpy(fx.fstype, "xfs");
	else
		return fprintf(stderr, "fixture %s: name must start with ext4 or xfs\n", name), 2;
	fx.bs = strstr(name, "-1k") ? 1024 : 4096;
	cur_fixture = name;

	char p[4096], img[4096];
	size_t len;
	char *text;
	snprintf(p, sizeof(p), "%s/%s.manifest.zst", fxdir, name);
	REQUIRE((text = slurp_zst(p, &len)) && !parse_manifest(&fx, text), "%s: cannot read %s", name, p);
	free(text);
	snprintf(p, sizeof(p), "%s/%s.tool.txt.zst", fxdir, name);
	REQUIRE((text = slurp_zst(p, &len)) && !parse_tool(&fx, text), "%s: cannot read %s", name, p);
	free(text);
	snprintf(p, sizeof(p), "%s/%s.filefrag.txt.zst", fxdir, name);
	REQUIRE((text = slurp_zst(p, &len)) && !parse_filefrag(&fx, text), "%s: cannot read %s", name, p);
	free(text);

	mkdir(work, 0755);
	snprintf(img, sizeof(img), "%s/%s.img", work, name);
	char cmd[9000];
	/* zstd writes sparse output files: a 128 MiB image costs little disk */
	snprintf(cmd, sizeof(cmd), "zstd -dqf '%s/%s.img.zst' -o '%s'", fxdir, name, img);
	REQUIRE(sh(cmd) == 0, "%s: %s failed", name, cmd);

	if (!strcmp(how, "file") || !strcmp(how, "both")) {
		cur_source = "file";
		struct gpunvme_blkdev dev;
		struct gpunvme_fs *fs;
		if (gpunvme_blkdev_open_file(img, &dev)) {
			fail(img, "blkdev_open_file: %s", gpunvme_last_error());
		} else {
			if (gpunvme_fs_open(&dev, 0, &fs))
				fail(img, "fs_open: %s", gpunvme_last_error());
			else {
				run_source(fs, &fx);
				gpunvme_fs_close(fs);
			}
			gpunvme_blkdev_close(&dev);
		}
	}
	if (!strcmp(how, "ns") || !strcmp(how, "both")) {
		char uri[4200];
		snprintf(uri, sizeof(uri), "emu:%s", img);
		run_ns(&fx, uri, "emu-ns", 512);
		/* 4 KiB LBAs: every 512-byte aligned metadata read is unaligned to
		 * the device; mdts=1 (8 KiB per command) splits the windows */
		snprintf(uri, sizeof(uri), "emu:%s?lbads=12&mdts=1", img);
		run_ns(&fx, uri, "emu-ns-4k", 4096);
	}
	unlink(img);
	for (size_t i = 0; i < fx.ne; i++) {
		free(fx.e[i].path);
		free(fx.e[i].segs);
		free(fx.e[i].target);
	}
	free(fx.e);
	for (size_t i = 0; i < fx.ntool; i++)
		free(fx.tool[i].path), free(fx.tool[i].x.v);
	for (size_t i = 0; i < fx.nffrag; i++)
		free(fx.ffrag[i].path), free(fx.ffrag[i].x.v);
	free(fx.tool);
	free(fx.ffrag);
	printf("%s: %s (%u failures)\n", name, check_failures() ? "FAIL" : "PASS", check_failures());
	return check_failures() ? 1 : 0;
}
