/* SPDX-License-Identifier: BSD-2-Clause */
/* File system front end: probe, path lookup, reads through extents. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "fs/fs_internal.h"

#define FS_MAX_DEPTH 256  /* path components: a bound, not a limit users meet */

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
};

static int find_cb(void *arg, const char *name, size_t namelen, uint64_t ino, int ftype)
{
	struct find *f = arg;
	(void)ftype;
	if (namelen == f->len && !memcmp(name, f->name, namelen)) {
		f->ino = ino;
		f->found = 1;
		return 1;
	}
	return 0;
}

int gpunvme_fs_lookup(struct gpunvme_fs *fs, const char *path, uint64_t *ino)
{
	uint64_t cur = fs->root_ino;
	const char *p = path;
	int depth = 0;
	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		const char *e = strchr(p, '/');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len > 255)
			return gpunvme_set_error(-ENAMETOOLONG, "%s: a path component is longer than 255 bytes", path);
		if (++depth > FS_MAX_DEPTH)
			return gpunvme_set_error(-ELOOP, "%s: more than %d components", path, FS_MAX_DEPTH);
		struct gpunvme_stat st;
		int rc = fs->ops->stat(fs, cur, &st);
		if (rc)
			return rc;
		if ((st.mode & 0170000) != 0040000)
			return gpunvme_set_error(-ENOTDIR, "%s: not a directory before \"%.*s\"", path, (int)len, p);
		struct find f = { p, len, 0, 0 };
		rc = fs->ops->readdir(fs, cur, find_cb, &f);
		if (rc < 0)
			return rc;
		if (!f.found)
			return gpunvme_set_error(-ENOENT, "%s: \"%.*s\" not found", path, (int)len, p);
		cur = f.ino;
		p += len;
	}
	*ino = cur;
	return 0;
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
