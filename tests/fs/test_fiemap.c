/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme_fiemap without an NVMe disk or a mount of our own:
 *   - a file in WORK_DIR (data, a hole, a preallocated range): the raw
 *     FS_IOC_FIEMAP must work (else the file system has none: -ENOTSUP is
 *     checked and the rest skipped); on this machine's own disk (not NVMe)
 *     gpunvme_fiemap fails with -EXDEV naming the disk;
 *   - the same file with GPUNVME_SYSFS pointing at fake sysfs trees where
 *     its st_dev is nvme0n1p1 (start 2048 sectors), the whole nvme1n1, or
 *     sda1: offsets are the raw FIEMAP ones plus the partition start, the
 *     disk name comes back, unwritten ranges are flagged, sda is -EXDEV;
 *   - -ENOTSUP on procfs, -EINVAL on a directory, -ENOENT.
 * Usage: test_fiemap WORK_DIR. Exit 0 pass, 1 fail, 77 skip.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <linux/fiemap.h>
#include <linux/fs.h>

#include "gpunvme/extents.h"
#include "../harness/check.h"

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		perror(path);
		exit(1);
	}
	fputs(text, f);
	fclose(f);
}

static void mkdirs(const char *path)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s", path);
	for (char *s = p + 1; *s; s++)
		if (*s == '/') {
			*s = 0;
			mkdir(p, 0755);
			*s = '/';
		}
	mkdir(p, 0755);
}

/* the raw FIEMAP view, merged like the library does, for comparison */
static int raw_fiemap(const char *path, struct gpunvme_extent *out, size_t max, size_t *n)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -errno;
	struct fiemap *fm = calloc(1, sizeof(*fm) + 64 * sizeof(struct fiemap_extent));
	fm->fm_length = FIEMAP_MAX_OFFSET;
	fm->fm_flags = FIEMAP_FLAG_SYNC;
	fm->fm_extent_count = 64;
	int rc = ioctl(fd, FS_IOC_FIEMAP, fm) < 0 ? -errno : 0;
	close(fd);
	*n = 0;
	for (uint32_t i = 0; !rc && i < fm->fm_mapped_extents && *n < max; i++) {
		const struct fiemap_extent *e = &fm->fm_extents[i];
		uint32_t fl = (e->fe_flags & FIEMAP_EXTENT_UNWRITTEN) ? GPUNVME_EXTENT_UNWRITTEN : 0;
		if (*n) {
			struct gpunvme_extent *p = &out[*n - 1];
			if (p->logical + p->length == e->fe_logical && p->physical + p->length == e->fe_physical &&
			    p->flags == fl) {
				p->length += e->fe_length;
				continue;
			}
		}
		out[(*n)++] = (struct gpunvme_extent){ e->fe_logical, e->fe_physical, e->fe_length, fl };
	}
	free(fm);
	return rc;
}

/* a fake sysfs where MAJ:MIN is DISK (part_start 0: whole disk) */
static void fake_sysfs(const char *root, dev_t d, const char *disk, const char *part, unsigned long start)
{
	char p[4096], t[4096];
	snprintf(p, sizeof(p), "%s/dev/block", root);
	mkdirs(p);
	if (part) {
		snprintf(p, sizeof(p), "%s/devices/virtual/block/%s/%s", root, disk, part);
		mkdirs(p);
		snprintf(p, sizeof(p), "%s/devices/virtual/block/%s/%s/partition", root, disk, part);
		put(p, "1\n");
		snprintf(t, sizeof(t), "%lu\n", start);
		snprintf(p, sizeof(p), "%s/devices/virtual/block/%s/%s/start", root, disk, part);
		put(p, t);
		snprintf(t, sizeof(t), "../../devices/virtual/block/%s/%s", disk, part);
	} else {
		snprintf(p, sizeof(p), "%s/devices/virtual/block/%s", root, disk);
		mkdirs(p);
		snprintf(t, sizeof(t), "../../devices/virtual/block/%s", disk);
	}
	snprintf(p, sizeof(p), "%s/dev/block/%u:%u", root, major(d), minor(d));
	unlink(p);
	if (symlink(t, p)) {
		perror(p);
		exit(1);
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s WORK_DIR\n", argv[0]);
		return 2;
	}
	const char *work = argv[1];
	char file[4096], p[4096];
	mkdirs(work);
	struct gpunvme_extent *x = NULL;
	size_t n = 0;
	char dev[64];

	/* errors that need no FIEMAP */
	unsetenv("GPUNVME_SYSFS");
	int rc = gpunvme_fiemap("/proc/self/status", &x, &n, dev, sizeof(dev));
	CHECK(rc == -ENOTSUP, "procfs: rc %d, expected -ENOTSUP", rc);
	rc = gpunvme_fiemap(work, &x, &n, dev, sizeof(dev));
	CHECK(rc == -EINVAL, "directory: rc %d, expected -EINVAL", rc);
	snprintf(p, sizeof(p), "%s/does-not-exist", work);
	rc = gpunvme_fiemap(p, &x, &n, dev, sizeof(dev));
	CHECK(rc == -ENOENT, "missing file: rc %d, expected -ENOENT", rc);

	/* a file: 64 KiB data, 1 MiB hole, 64 KiB data, 256 KiB preallocated */
	snprintf(file, sizeof(file), "%s/fiemap-test.bin", work);
	int fd = open(file, O_CREAT | O_TRUNC | O_RDWR, 0644);
	if (fd < 0) {
		perror(file);
		return 1;
	}
	static uint8_t buf[64 << 10];
	memset(buf, 0xa5, sizeof(buf));
	int prealloc = 0;
	if (pwrite(fd, buf, sizeof(buf), 0) != (ssize_t)sizeof(buf) ||
	    pwrite(fd, buf, sizeof(buf), (1 << 20) + sizeof(buf)) != (ssize_t)sizeof(buf)) {
		perror("pwrite");
		return 1;
	}
	if (fallocate(fd, 0, 2 << 20, 256 << 10) == 0)
		prealloc = 1;
	fsync(fd);
	struct stat st;
	fstat(fd, &st);
	close(fd);

	struct gpunvme_extent raw[64];
	size_t nraw = 0;
	rc = raw_fiemap(file, raw, 64, &nraw);
	if (rc) {
		printf("FIEMAP unsupported on %s (%s): checking -ENOTSUP only\n", work, strerror(-rc));
		rc = gpunvme_fiemap(file, &x, &n, dev, sizeof(dev));
		CHECK(rc == -ENOTSUP, "rc %d, expected -ENOTSUP", rc);
		unlink(file);
		return check_failures() ? 1 : 77;
	}
	printf("%s: %zu raw extents, device %u:%u\n", file, nraw, major(st.st_dev), minor(st.st_dev));
	CHECK(nraw >= 2, "%zu extents, expected at least 2 (data, hole, data)", nraw);
	if (nraw >= 2)
		CHECK(raw[0].logical == 0 && raw[1].logical >= (1u << 20), "hole not seen: second extent at %" PRIu64,
		      raw[1].logical);

	/* the real sysfs: this machine has no NVMe disk under the test dir
	 * (if it does, the call must succeed and agree with the raw view) */
	rc = gpunvme_fiemap(file, &x, &n, dev, sizeof(dev));
	if (rc == 0) {
		/* on an NVMe namespace (the QEMU guest of make-fs-fixtures.sh -t):
		 * offsets are the raw ones plus the partition start from sysfs */
		unsigned long long start = 0;
		snprintf(p, sizeof(p), "/sys/dev/block/%u:%u/start", major(st.st_dev), minor(st.st_dev));
		FILE *sf = fopen(p, "r");
		if (sf) {
			if (fscanf(sf, "%llu", &start) != 1)
				start = 0;
			fclose(sf);
		}
		printf("the work dir is on %s (partition start %llu sectors): checking offsets against the raw view\n",
		       dev, start);
		CHECK(!strncmp(dev, "nvme", 4), "dev %s", dev);
		CHECK(n == nraw, "%zu extents, raw %zu", n, nraw);
		for (size_t i = 0; i < n && i < nraw; i++)
			CHECK(x[i].logical == raw[i].logical && x[i].length == raw[i].length &&
				      x[i].physical == raw[i].physical + start * 512,
			      "extent %zu: physical %" PRIu64 ", raw %" PRIu64 " + %llu sectors", i, x[i].physical,
			      raw[i].physical, start);
		free(x);
	} else {
		CHECK(rc == -EXDEV, "real sysfs: rc %d, expected -EXDEV", rc);
		printf("real sysfs: -EXDEV as expected: %s\n", gpunvme_last_error());
	}

	/* fake sysfs: a partition of an NVMe namespace */
	char root[4096];
	snprintf(root, sizeof(root), "%s/sysfs-part", work);
	fake_sysfs(root, st.st_dev, "nvme0n1", "nvme0n1p1", 2048);
	setenv("GPUNVME_SYSFS", root, 1);
	rc = gpunvme_fiemap(file, &x, &n, dev, sizeof(dev));
	CHECK(rc == 0, "partition: rc %d", rc);
	if (rc == 0) {
		CHECK(!strcmp(dev, "nvme0n1"), "partition: disk %s, expected nvme0n1", dev);
		CHECK(n == nraw, "partition: %zu extents, raw %zu", n, nraw);
		for (size_t i = 0; i < n && i < nraw; i++) {
			CHECK(x[i].logical == raw[i].logical && x[i].length == raw[i].length &&
				      x[i].flags == raw[i].flags,
			      "extent %zu differs", i);
			CHECK(x[i].physical == raw[i].physical + 2048 * 512,
			      "extent %zu: physical %" PRIu64 ", raw %" PRIu64 " + 1 MiB", i, x[i].physical,
			      raw[i].physical);
		}
		int saw_unwritten = 0;
		for (size_t i = 0; i < n; i++)
			if (x[i].flags & GPUNVME_EXTENT_UNWRITTEN) {
				saw_unwritten = 1;
				CHECK(x[i].logical >= (2u << 20), "unwritten extent at %" PRIu64, x[i].logical);
				CHECK(gpunvme_extent_map(x, n, x[i].logical, NULL) == -1, "unwritten maps to bytes");
			}
		if (prealloc)
			CHECK(saw_unwritten, "fallocate'd range not flagged unwritten");
		uint64_t contig = 0;
		int64_t a = gpunvme_extent_map(x, n, 100, &contig);
		CHECK(a == (int64_t)(x[0].physical + 100), "extent_map at 100: %" PRId64, a);
		a = gpunvme_extent_map(x, n, 512 << 10, &contig);
		CHECK(a == -1, "extent_map inside the hole: %" PRId64, a);
		free(x);
		/* a short device name buffer is refused, not truncated */
		char small[4];
		rc = gpunvme_fiemap(file, &x, &n, small, sizeof(small));
		CHECK(rc == -ENAMETOOLONG, "short dev buffer: rc %d", rc);
	}

	/* fake sysfs: a whole namespace, no partition */
	snprintf(root, sizeof(root), "%s/sysfs-whole", work);
	fake_sysfs(root, st.st_dev, "nvme1n1", NULL, 0);
	setenv("GPUNVME_SYSFS", root, 1);
	rc = gpunvme_fiemap(file, &x, &n, dev, sizeof(dev));
	CHECK(rc == 0 && !strcmp(dev, "nvme1n1"), "whole disk: rc %d dev %s", rc, rc ? "" : dev);
	if (rc == 0) {
		CHECK(n == nraw && x[0].physical == raw[0].physical, "whole disk: offsets changed");
		free(x);
	}

	/* fake sysfs: a SATA partition */
	snprintf(root, sizeof(root), "%s/sysfs-sata", work);
	fake_sysfs(root, st.st_dev, "sda", "sda1", 2048);
	setenv("GPUNVME_SYSFS", root, 1);
	rc = gpunvme_fiemap(file, &x, &n, dev, sizeof(dev));
	CHECK(rc == -EXDEV, "sda1: rc %d, expected -EXDEV", rc);
	CHECK(strstr(gpunvme_last_error(), "sda") != NULL, "message does not name sda: %s", gpunvme_last_error());

	unsetenv("GPUNVME_SYSFS");
	unlink(file);
	return check_finish("test_fiemap");
}
