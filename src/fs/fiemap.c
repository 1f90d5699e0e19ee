/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Extents of a file on a mounted file system through FS_IOC_FIEMAP, with the
 * physical offsets made relative to the whole NVMe namespace so that they can
 * be used as LBAs by the user-space driver (which sees the namespace, not the
 * partition). The partition start comes from sysfs.
 *
 * Refused, rather than guessed at: extents whose bytes are not plainly on
 * the disk (FIEMAP_EXTENT_ENCODED: compressed or encrypted; DATA_INLINE or
 * NOT_ALIGNED: stored inside metadata; UNKNOWN / DELALLOC: no location yet).
 * FIEMAP_FLAG_SYNC flushes delayed allocation first, so a freshly written
 * file has real locations.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <linux/fiemap.h>
#include <linux/fs.h>

#include "base/base.h"
#include "fs/fs_internal.h"

#define FIEMAP_BATCH 256u

/* Read a small sysfs attribute into buf (newline stripped). */
static int read_attr(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t r = read(fd, buf, len - 1);
	int e = errno;
	close(fd);
	if (r < 0)
		return -e;
	buf[r] = 0;
	while (r > 0 && (buf[r - 1] == '\n' || buf[r - 1] == ' '))
		buf[--r] = 0;
	return 0;
}

/* The sysfs root; GPUNVME_SYSFS lets tests point at a fake tree (as the CLI's
 * `list` does). */
static const char *sysfs_root(void)
{
	const char *s = getenv("GPUNVME_SYSFS");
	return s && *s ? s : "/sys";
}

/*
 * st_dev -> the whole disk's name and the partition's start in bytes.
 * /sys/dev/block/MAJ:MIN links to .../block/DISK or .../block/DISK/PART; a
 * partition has a `partition` attribute and `start` in 512-byte sectors
 * (always 512, whatever the logical block size).
 */
static int resolve_dev(dev_t d, char *disk, size_t disklen, uint64_t *start)
{
	char p[PATH_MAX], link[PATH_MAX], buf[64];
	const char *root = sysfs_root();
	unsigned maj = major(d), min = minor(d);
	snprintf(p, sizeof(p), "%s/dev/block/%u:%u", root, maj, min);
	ssize_t n = readlink(p, link, sizeof(link) - 1);
	if (n < 0) {
		if (maj == 0)
			return gpunvme_set_error(-EXDEV, "the file is on a virtual file system (device %u:%u: "
						 "overlay, tmpfs, network...), not on an NVMe namespace", maj, min);
		return gpunvme_set_error(-EXDEV, "device %u:%u has no %s entry: not a block device the "
					 "kernel lists (not an NVMe namespace)", maj, min, p);
	}
	link[n] = 0;
	char *name = strrchr(link, '/');
	name = name ? name + 1 : link;
	*start = 0;
	snprintf(p, sizeof(p), "%s/dev/block/%u:%u/partition", root, maj, min);
	if (read_attr(p, buf, sizeof(buf)) == 0) {
		snprintf(p, sizeof(p), "%s/dev/block/%u:%u/start", root, maj, min);
		char *end;
		if (read_attr(p, buf, sizeof(buf)) || (errno = 0, *start = strtoull(buf, &end, 10), *end || errno))
			return gpunvme_set_error(-EIO, "%s: cannot read the partition start", p);
		if (*start > (UINT64_MAX >> 9))
			return gpunvme_set_error(-EIO, "%s: partition start %s is out of range", p, buf);
		*start <<= 9;
		/* the parent directory of the partition is the disk */
		if (name == link)
			return gpunvme_set_error(-EIO, "%s: unexpected sysfs link %s", p, link);
		*(name - 1) = 0;
		char *parent = strrchr(link, '/');
		name = parent ? parent + 1 : link;
	}
	if (strncmp(name, "nvme", 4))
		return gpunvme_set_error(-EXDEV, "the file is on %s (device %u:%u), not on an NVMe namespace: "
					 "FIEMAP offsets are only usable with the user-space driver on an nvme disk",
					 name, maj, min);
	if (strlen(name) >= disklen)
		return gpunvme_set_error(-ENAMETOOLONG, "disk name %s is too long", name);
	snprintf(disk, disklen, "%s", name);
	return 0;
}

static int check_flags(const char *path, const struct fiemap_extent *fe)
{
	static const struct {
		uint32_t flag;
		const char *why;
	} refuse[] = {
		{FIEMAP_EXTENT_UNKNOWN, "has no known location"},
		{FIEMAP_EXTENT_DELALLOC, "is not allocated yet (delayed allocation)"},
		{FIEMAP_EXTENT_ENCODED, "is encoded (compressed or encrypted) on disk"},
		{FIEMAP_EXTENT_DATA_ENCRYPTED, "is encrypted on disk"},
		{FIEMAP_EXTENT_NOT_ALIGNED, "is not block aligned"},
		{FIEMAP_EXTENT_DATA_INLINE, "is stored inline in metadata"},
		{FIEMAP_EXTENT_DATA_TAIL, "is packed with other files' data"},
	};
	for (size_t i = 0; i < sizeof(refuse) / sizeof(refuse[0]); i++)
		if (fe->fe_flags & refuse[i].flag)
			return gpunvme_set_error(-EINVAL, "%s: the extent at file offset %llu %s: its bytes cannot "
						 "be read from the disk directly", path,
						 (unsigned long long)fe->fe_logical, refuse[i].why);
	return 0;
}

int gpunvme_fiemap(const char *path, struct gpunvme_extent **ext, size_t *n, char *dev, size_t devlen)
{
	if (!path || !ext || !n)
		return gpunvme_set_error(-EINVAL, "fiemap: bad arguments");
	*ext = NULL;
	*n = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		return gpunvme_set_error(-e, "%s: %s", path, strerror(e));
	}
	struct stat st;
	if (fstat(fd, &st)) {
		int e = errno;
		close(fd);
		return gpunvme_set_error(-e, "%s: fstat: %s", path, strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return gpunvme_set_error(-EINVAL, "%s: not a regular file", path);
	}
	struct fiemap *fm = calloc(1, sizeof(*fm) + FIEMAP_BATCH * sizeof(struct fiemap_extent));
	if (!fm) {
		close(fd);
		return gpunvme_set_error(-ENOMEM, "out of memory");
	}
	struct fs_extents e = {0};
	uint64_t start = 0;
	int rc = 0, last = 0, sync = FIEMAP_FLAG_SYNC;
	while (!last) {
		memset(fm, 0, sizeof(*fm));
		fm->fm_start = start;
		fm->fm_length = FIEMAP_MAX_OFFSET - start;
		fm->fm_flags = (uint32_t)sync;
		fm->fm_extent_count = FIEMAP_BATCH;
		if (ioctl(fd, FS_IOC_FIEMAP, fm) < 0) {
			int err = errno;
			if (err == EOPNOTSUPP || err == ENOTTY || err == EINVAL)
				rc = gpunvme_set_error(-ENOTSUP, "%s: the file system does not support FIEMAP (%s)",
						       path, strerror(err));
			else if (err == EBADR)
				rc = gpunvme_set_error(-ENOTSUP, "%s: FIEMAP refused FIEMAP_FLAG_SYNC", path);
			else
				rc = gpunvme_set_error(-err, "%s: FS_IOC_FIEMAP: %s", path, strerror(err));
			goto out;
		}
		sync = 0; /* flushed once is enough */
		if (fm->fm_mapped_extents == 0)
			break;
		for (uint32_t i = 0; i < fm->fm_mapped_extents; i++) {
			const struct fiemap_extent *fe = &fm->fm_extents[i];
			if ((rc = check_flags(path, fe)))
				goto out;
			uint32_t fl = (fe->fe_flags & FIEMAP_EXTENT_UNWRITTEN) ? GPUNVME_EXTENT_UNWRITTEN : 0;
			if ((rc = fs_extents_push(&e, fe->fe_logical, fe->fe_physical, fe->fe_length, fl))) {
				rc = gpunvme_set_error(rc, "out of memory");
				goto out;
			}
			if (fe->fe_flags & FIEMAP_EXTENT_LAST)
				last = 1;
			/* a file system that keeps returning the same range would loop */
			if (fe->fe_logical + fe->fe_length <= start) {
				rc = gpunvme_set_error(-EIO, "%s: FIEMAP returned extents out of order", path);
				goto out;
			}
			start = fe->fe_logical + fe->fe_length;
		}
	}
	if ((rc = fs_extents_finish(&e)))
		goto out;
	char disk[64];
	uint64_t part = 0;
	if ((rc = resolve_dev(st.st_dev, disk, sizeof(disk), &part)))
		goto out;
	for (size_t i = 0; i < e.n; i++)
		e.v[i].physical += part;
	if (dev && devlen) {
		if (strlen(disk) >= devlen) {
			rc = gpunvme_set_error(-ENAMETOOLONG, "disk name %s does not fit %zu bytes", disk, devlen);
			goto out;
		}
		snprintf(dev, devlen, "%s", disk);
	}
	*ext = e.v;
	*n = e.n;
	e.v = NULL;
out:
	free(e.v);
	free(fm);
	close(fd);
	return rc;
}
