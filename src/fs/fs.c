/* SPDX-License-Identifier: BSD-2-Clause */
/* File system front end: probe, path lookup, reads through extents. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "fs/fs_internal.h"


int fs_read(struct gpunvme_fs *fs, uint64_t off, void *buf, size_t len)
{
	if (off > fs->size || len > fs->size - off)
		return gpunvme_set_error(-EIO, "%s: read of %zu bytes at %llu is past the end of the device (%llu bytes)",
					 fs->ops->name, len, (unsigned long long)off, (unsigned long long)fs->size);
	return fs->dev.read(fs->dev.ctx, fs->part_off + off, buf, len);
}

int fs_extents_push(struct fs_extents *e, uint64_t logical, uint64_t physical, uint64_t length, uint32_t flags)
{
	if (length == 0)
		return 0;
	if (e->n == e->cap) {
		size_t cap = e->cap ? e->cap * 2 : 16;
		if (cap > (SIZE_MAX / sizeof(*e->v)))
			return -ENOMEM;
		struct gpunvme_extent *v = realloc(e->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		e->v = v;
		e->cap = cap;
	}
	e->v[e->n++] = (struct gpunvme_extent){ logical, physical, length, flags };
	return 0;
}

static int cmp_ext(const void *a, const void *b)
{
	const struct gpunvme_extent *x = a, *y = b;
	return x->logical < y->logical ? -1 : x->logical > y->logical;
}

int fs_extents_finish(struct fs_extents *e)
{
	if (e->n > 1)
		qsort(e->v, e->n, sizeof(*e->v), cmp_ext);
	size_t k = 0;
	for (size_t i = 0; i < e->n; i++) {
		struct gpunvme_extent *x = &e->v[i];
		if (k > 0) {
			struct gpunvme_extent *p = &e->v[k - 1];
			if (x->logical < p->logical + p->length)
				return gpunvme_set_error(-EUCLEAN, "overlapping extents at file offset %llu",
							 (unsigned long long)x->logical);
			if (p->logical + p->length == x->logical && p->physical + p->length == x->physical &&
			    p->flags == x->flags) {
				p->length += x->length;
				continue;
			}
		}
		e->v[k++] = *x;
	}
	e->n = k;
	return 0;
}

static const struct gpunvme_fs_ops *const backends[] = { &gpunvme_fs_ext4, &gpunvme_fs_xfs };

int gpunvme_fs_open(const struct gpunvme_blkdev *dev, uint64_t part_off, struct gpunvme_fs **out)
{
	if (!dev || !out || part_off > dev->size)
		return gpunvme_set_error(-EINVAL, "fs_open: bad arguments");
	struct gpunvme_fs *fs = calloc(1, sizeof(*fs));
	if (!fs)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	fs->dev = *dev;
	fs->part_off = part_off;
	fs->size = dev->size - part_off;
	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
		fs->ops = backends[i];
		if (fs->ops->probe(fs) != 1)
			continue;
		int rc = fs->ops->mount(fs);
		if (rc) {
			free(fs);
			return rc;
		}
		*out = fs;
		return 0;
	}
	free(fs);
	return gpunvme_set_error(-EINVAL, "no file system found (neither ext2/3/4 nor XFS superblock)");
}

int fs_probe_at(const struct gpunvme_blkdev *dev, uint64_t off, const char **type)
{
	if (!dev || off >= dev->size)
		return 0;
	struct gpunvme_fs fs = { .dev = *dev, .part_off = off, .size = dev->size - off };
	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
		fs.ops = backends[i];
		if (fs.ops->probe(&fs) == 1) {
			*type = fs.ops->name;
			return 1;
		}
	}
	return 0;
}

void gpunvme_fs_close(struct gpunvme_fs *fs)
{
	if (!fs)
		return;
	fs->ops->unmount(fs);
	free(fs);
}

const char *gpunvme_fs_type(const struct gpunvme_fs *fs)
{
	return fs->ops->name;
}

uint32_t gpunvme_fs_block_size(const struct gpunvme_fs *fs)
{
	return fs->block_size;
}

int gpunvme_fs_stat(struct gpunvme_fs *fs, uint64_t ino, struct gpunvme_stat *st)
{
	return fs->ops->stat(fs, ino, st);
}

int gpunvme_fs_readdir(struct gpunvme_fs *fs, uint64_t ino, gpunvme_dirent_cb cb, void *arg)
{
	return fs->ops->readdir(fs, ino, cb, arg);
}

struct find {
	const char *name;
	size_t len;
	uint64_t ino;
	int found;
	int ftype;
};

static int find_cb(void *arg, const char *name, size_t namelen, uint64_t ino, int ftype)
{
	struct find *f = arg;
	if (namelen == f->len && !memcmp(name, f->name, namelen)) {
		f->ftype = ftype;
		f->ino = ino;
		f->found = 1;
		return 1;
	}
	return 0;
}

#define FS_MAXSYMLINKS 40     /* Linux's MAXSYMLINKS (path_resolution(7)) */
#define FS_LINK_MAX 4095      /* PATH_MAX - 1: the longest target either format allows */
#define FS_MAX_STEPS 65536    /* components walked in one lookup, links included */

int64_t gpunvme_fs_readlink(struct gpunvme_fs *fs, uint64_t ino, char *buf, size_t len)
{
	struct gpunvme_stat st;
	int rc = fs->ops->stat(fs, ino, &st);
	if (rc)
		return rc;
	if ((st.mode & 0170000) != 0120000)
		return gpunvme_set_error(-EINVAL, "inode %llu is not a symbolic link", (unsigned long long)ino);
	if (st.size == 0 || st.size > FS_LINK_MAX)
		return gpunvme_set_error(-EUCLEAN, "inode %llu: symbolic link of %llu bytes (1 to %u)",
					 (unsigned long long)ino, (unsigned long long)st.size, FS_LINK_MAX);
	if (!buf || st.size >= len)
		return gpunvme_set_error(-ENAMETOOLONG, "inode %llu: the link target (%llu bytes) does not fit %zu bytes",
					 (unsigned long long)ino, (unsigned long long)st.size, len);
	int64_t r = fs->ops->read_inline ? fs->ops->read_inline(fs, ino, buf, (size_t)st.size, 0) : -ENODATA;
	if (r == -ENODATA)
		return gpunvme_set_error(-EUCLEAN, "inode %llu: symbolic link with no readable target",
					 (unsigned long long)ino);
	if (r < 0)
		return r;
	if ((uint64_t)r != st.size || memchr(buf, 0, (size_t)r))
		return gpunvme_set_error(-EUCLEAN, "inode %llu: symbolic link target is %s", (unsigned long long)ino,
					 (uint64_t)r != st.size ? "short" : "not a string (a NUL byte inside)");
	buf[r] = 0;
	return r;
}

/* A link being expanded: the remaining path text is its target followed by
 * what came after it, so a component that fails before `end` failed inside
 * this link's target (a dangling link). */
struct link_frame {
	size_t end;
	char name[256];
	char target[FS_LINK_MAX + 1];
};

struct resolve {
	struct gpunvme_fs *fs;
	const char *path;
	char *rem;                 /* the path text still to walk */
	size_t rem_len;
	struct link_frame *lf;
	unsigned nlf, links;
};

static int dangling(struct resolve *r, size_t pos, const char *comp, size_t len)
{
	for (unsigned i = r->nlf; i-- > 0;)
		if (pos < r->lf[i].end)
			return gpunvme_set_error(-ENOENT, "%s: dangling symbolic link \"%s\" -> \"%s\" (\"%.*s\" not found)",
						 r->path, r->lf[i].name, r->lf[i].target, (int)len, comp);
	return gpunvme_set_error(-ENOENT, "%s: \"%.*s\" not found", r->path, (int)len, comp);
}

/* Splice a link's target in place of the walked text up to `pos`. */
static int splice(struct resolve *r, size_t pos, const char *name, size_t nlen, const char *tgt, size_t tlen)
{
	size_t rest = r->rem_len - pos;
	if (!r->lf && !(r->lf = malloc(sizeof(*r->lf) * FS_MAXSYMLINKS)))
		return gpunvme_set_error(-ENOMEM, "out of memory");
	char *n = malloc(tlen + 1 + rest + 1);
	if (!n)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	memcpy(n, tgt, tlen);
	n[tlen] = '/';
	memcpy(n + tlen + 1, r->rem + pos, rest);
	n[tlen + 1 + rest] = 0;
	free(r->rem);
	r->rem = n;
	r->rem_len = tlen + 1 + rest;
	/* frames whose target is used up are done; the rest move */
	unsigned k = 0;
	for (unsigned i = 0; i < r->nlf; i++) {
		if (r->lf[i].end <= pos)
			continue;
		r->lf[k] = r->lf[i];
		r->lf[k++].end = r->lf[i].end - pos + tlen + 1;
	}
	r->nlf = k;
	struct link_frame *f = &r->lf[r->nlf++];
	f->end = tlen;
	memcpy(f->name, name, nlen);
	f->name[nlen] = 0;
	memcpy(f->target, tgt, tlen);
	f->target[tlen] = 0;
	return 0;
}

/* path_resolution(7) inside the file system: every component that names a
 * symlink is followed, the last one only with follow_last (or a trailing
 * slash). A relative target continues from the directory holding the link,
 * an absolute one from this file system's root (never the host's). ".."
 * goes through the directory's own ".." entry, which is its real parent,
 * as the kernel does; ".." of the root is the root. */
static int resolve(struct gpunvme_fs *fs, const char *path, bool follow_last, uint64_t *ino)
{
	struct resolve r = { .fs = fs, .path = path };
	size_t plen = strlen(path);
	int rc = 0;
	r.rem = malloc(plen + 1);
	if (!r.rem) {
		rc = gpunvme_set_error(-ENOMEM, "out of memory");
		goto out;
	}
	memcpy(r.rem, path, plen + 1);
	r.rem_len = plen;
	uint64_t cur = fs->root_ino;
	size_t pos = 0;
	unsigned steps = 0;
	for (;;) {
		while (pos < r.rem_len && r.rem[pos] == '/')
			pos++;
		if (pos == r.rem_len)
			break;
		const char *p = r.rem + pos;
		const char *e = memchr(p, '/', r.rem_len - pos);
		size_t len = e ? (size_t)(e - p) : r.rem_len - pos;
		size_t next = pos + len;
		bool slash = next < r.rem_len; /* more text follows, perhaps only slashes */
		bool last = true;
		for (size_t i = next; i < r.rem_len; i++)
			if (r.rem[i] != '/') {
				last = false;
				break;
			}
		if (len > 255) {
			rc = gpunvme_set_error(-ENAMETOOLONG, "%s: a path component is longer than 255 bytes", path);
			goto out;
		}
		if (++steps > FS_MAX_STEPS) {
			rc = gpunvme_set_error(-ELOOP, "%s: more than %d components", path, FS_MAX_STEPS);
			goto out;
		}
		struct gpunvme_stat st;
		if ((rc = fs->ops->stat(fs, cur, &st)))
			goto out;
		if ((st.mode & 0170000) != 0040000) {
			rc = gpunvme_set_error(-ENOTDIR, "%s: not a directory before \"%.*s\"", path, (int)len, p);
			goto out;
		}
		if (len == 1 && p[0] == '.') {
			pos = next;
			continue;
		}
		if (len == 2 && p[0] == '.' && p[1] == '.' && cur == fs->root_ino) {
			pos = next;
			continue;
		}
		struct find f = { p, len, 0, 0, 0 };
		rc = fs->ops->readdir(fs, cur, find_cb, &f);
		if (rc < 0)
			goto out;
		rc = 0;
		if (!f.found) {
			rc = dangling(&r, pos, p, len);
			goto out;
		}
		/* the entry's file type spares reading the inode, where the
		 * file system records it (ext4 filetype, XFS ftype) */
		bool maybe_link = f.ftype == GPUNVME_FT_SYMLINK || f.ftype == GPUNVME_FT_UNKNOWN;
		if (maybe_link && (!last || follow_last || slash)) {
			if ((rc = fs->ops->stat(fs, f.ino, &st)))
				goto out;
			if ((st.mode & 0170000) == 0120000) {
				if (++r.links > FS_MAXSYMLINKS) {
					rc = gpunvme_set_error(-ELOOP, "%s: a symlink loop (more than %d symbolic links followed, "
								       "the last \"%.*s\")", path, FS_MAXSYMLINKS, (int)len, p);
					goto out;
				}
				char tgt[FS_LINK_MAX + 1];
				int64_t tl = gpunvme_fs_readlink(fs, f.ino, tgt, sizeof(tgt));
				if (tl < 0) {
					rc = (int)tl;
					goto out;
				}
				char name[256];
				memcpy(name, p, len);
				if ((rc = splice(&r, next, name, len, tgt, (size_t)tl)))
					goto out;
				if (tgt[0] == '/')
					cur = fs->root_ino;
				pos = 0;
				continue;
			}
		}
		cur = f.ino;
		pos = next;
	}
	/* "dir/": a trailing slash asks for a directory */
	if (plen && path[plen - 1] == '/') {
		struct gpunvme_stat st;
		if ((rc = fs->ops->stat(fs, cur, &st)))
			goto out;
		if ((st.mode & 0170000) != 0040000 && (follow_last || (st.mode & 0170000) != 0120000)) {
			rc = gpunvme_set_error(-ENOTDIR, "%s: not a directory", path);
			goto out;
		}
	}
	*ino = cur;
out:
	free(r.rem);
	free(r.lf);
	return rc;
}

int gpunvme_fs_lookup(struct gpunvme_fs *fs, const char *path, uint64_t *ino)
{
	return resolve(fs, path, true, ino);
}

int gpunvme_fs_lookup_nofollow(struct gpunvme_fs *fs, const char *path, uint64_t *ino)
{
	return resolve(fs, path, false, ino);
}

int gpunvme_fs_extents(struct gpunvme_fs *fs, uint64_t ino, struct gpunvme_extent **ext, size_t *n)
{
	struct gpunvme_stat st;
	int rc = fs->ops->stat(fs, ino, &st);
	if (rc)
		return rc;
	if ((st.mode & 0170000) != 0100000)
		return gpunvme_set_error(-EINVAL, "inode %llu is not a regular file", (unsigned long long)ino);
	rc = fs->ops->extents(fs, ino, ext, n);
	if (rc)
		return rc;
	for (size_t i = 0; i < *n; i++)
		(*ext)[i].physical += fs->part_off;
	return 0;
}

int64_t gpunvme_extent_map(const struct gpunvme_extent *ext, size_t n, uint64_t off, uint64_t *contig)
{
	return gpunvme_extent_lookup(ext, n, off, contig);
}

int64_t gpunvme_fs_pread(struct gpunvme_fs *fs, uint64_t ino, void *buf, size_t len, uint64_t off)
{
	struct gpunvme_stat st;
	int rc = fs->ops->stat(fs, ino, &st);
	if (rc)
		return rc;
	if (off >= st.size)
		return 0;
	if (len > st.size - off)
		len = (size_t)(st.size - off);
	if (fs->ops->read_inline) {
		int64_t r = fs->ops->read_inline(fs, ino, buf, len, off);
		if (r != -ENODATA)
			return r;
	}
	struct gpunvme_extent *ext = NULL;
	size_t n = 0;
	if ((rc = gpunvme_fs_extents(fs, ino, &ext, &n)))
		return rc;
	uint8_t *p = buf;
	size_t done = 0;
	while (done < len) {
		uint64_t contig = 0;
		int64_t phys = gpunvme_extent_map(ext, n, off + done, &contig);
		size_t k = len - done;
		if (contig && contig < k)
			k = (size_t)contig;
		if (phys < 0) {
			memset(p + done, 0, k); /* hole or unwritten: zeroes */
		} else if ((rc = fs->dev.read(fs->dev.ctx, (uint64_t)phys, p + done, k))) {
			free(ext);
			return rc;
		}
		done += k;
	}
	free(ext);
	return (int64_t)done;
}
