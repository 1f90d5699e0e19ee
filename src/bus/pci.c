/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * PCI through sysfs: address parsing, bound driver, IOMMU group, attributes,
 * enumeration of NVMe controllers, and bus mastering through a config-space
 * file. Everything goes through gpunvme_pci_sysfs_root() so the unit tests
 * can point it at a fake tree.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bus/bus.h"
#include "bus/pci.h"

/* Shorter than PATH_MAX so every path built from it fits. */
static char sysfs_root[1024] = "/sys";

void gpunvme_pci_set_sysfs_root(const char *root)
{
	snprintf(sysfs_root, sizeof(sysfs_root), "%s", root ? root : "/sys");
}

const char *gpunvme_pci_sysfs_root(void)
{
	return sysfs_root;
}

/* Exactly n hex digits at s; value in *v. */
static int hex_field(const char *s, int n, unsigned *v)
{
	unsigned x = 0;

	for (int i = 0; i < n; i++) {
		char c = s[i];

		if (!isxdigit((unsigned char)c))
			return -1;
		x = x * 16 + (unsigned)(isdigit((unsigned char)c) ? c - '0' : tolower((unsigned char)c) - 'a' + 10);
	}
	*v = x;
	return 0;
}

int gpunvme_pci_parse_bdf(const char *s, char out[13])
{
	unsigned dom = 0, bus, dev, fn;
	const char *p = s;

	if (!s)
		return gpunvme_set_error(-EINVAL, "no PCI address given: expected DDDD:BB:DD.F, e.g. 0000:01:00.0");
	/* "DDDD:BB:DD.F" is 12 characters, "BB:DD.F" 7; nothing else is
	 * accepted, so a typo never silently names another device. */
	if (strlen(s) == 12) {
		if (hex_field(p, 4, &dom) || p[4] != ':')
			goto bad;
		p += 5;
	} else if (strlen(s) != 7) {
		goto bad;
	}
	if (hex_field(p, 2, &bus) || p[2] != ':' || hex_field(p + 3, 2, &dev) || p[5] != '.' ||
	    hex_field(p + 6, 1, &fn))
		goto bad;
	if (dev > 0x1f || fn > 7)
		goto bad;
	snprintf(out, 13, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
	return 0;
bad:
	return gpunvme_set_error(-EINVAL,
				 "'%s' is not a PCI address: expected DDDD:BB:DD.F (device 00-1f, function 0-7), "
				 "e.g. 0000:01:00.0; find it with lspci -D -nn | grep -i nvme",
				 s);
}

static int dev_path(char *buf, size_t len, const char *bdf, const char *attr)
{
	int n = snprintf(buf, len, "%s/bus/pci/devices/%s%s%s", sysfs_root, bdf, attr ? "/" : "", attr ? attr : "");

	return (n < 0 || (size_t)n >= len) ? -ENAMETOOLONG : 0;
}

int gpunvme_pci_exists(const char *bdf)
{
	char path[PATH_MAX];
	struct stat st;

	if (dev_path(path, sizeof(path), bdf, NULL))
		return -ENODEV;
	return stat(path, &st) == 0 ? 0 : -ENODEV;
}

/* Basename of a symlink's target into out; -errno of readlink. */
static int link_base(const char *path, char *out, size_t len)
{
	char target[PATH_MAX];
	ssize_t n = readlink(path, target, sizeof(target) - 1);
	const char *base;

	if (n < 0)
		return -errno;
	target[n] = '\0';
	base = strrchr(target, '/');
	base = base ? base + 1 : target;
	if (strlen(base) >= len)
		return -ENAMETOOLONG;
	memcpy(out, base, strlen(base) + 1);
	return 0;
}

int gpunvme_pci_driver(const char *bdf, char *drv, size_t len)
{
	char path[PATH_MAX];
	int rc;

	if (len)
		drv[0] = '\0';
	if (gpunvme_pci_exists(bdf))
		return gpunvme_set_error(-ENODEV,
					 "no PCI device %s (%s/bus/pci/devices/%s is missing): "
					 "check the address with lspci -D -nn | grep -i nvme",
					 bdf, sysfs_root, bdf);
	if (dev_path(path, sizeof(path), bdf, "driver"))
		return gpunvme_set_error(-ENAMETOOLONG, "sysfs path for %s is too long", bdf);
	rc = link_base(path, drv, len);
	if (rc == -ENOENT)
		return 0; /* no driver bound */
	if (rc)
		return gpunvme_set_error(rc, "cannot read the driver of %s (%s): %s", bdf, path, strerror(-rc));
	return 0;
}

int gpunvme_pci_read_attr(const char *bdf, const char *attr, char *buf, size_t len)
{
	char path[PATH_MAX];
	int fd, rc = 0;
	ssize_t n;

	if (!len)
		return -EINVAL;
	buf[0] = '\0';
	if (dev_path(path, sizeof(path), bdf, attr))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	if (n < 0)
		rc = -errno;
	else
		buf[n] = '\0';
	close(fd);
	if (rc)
		return rc;
	while (n > 0 && isspace((unsigned char)buf[n - 1]))
		buf[--n] = '\0';
	return 0;
}

int gpunvme_pci_read_hex(const char *bdf, const char *attr, uint64_t *val)
{
	char buf[64], *end;
	int rc = gpunvme_pci_read_attr(bdf, attr, buf, sizeof(buf));

	if (rc)
		return rc;
	errno = 0;
	*val = strtoull(buf, &end, 16);
	if (errno || end == buf || *end)
		return -EINVAL;
	return 0;
}

static int parse_int(const char *s, int *v)
{
	char *end;
	long x;

	errno = 0;
	x = strtol(s, &end, 10);
	if (errno || end == s || *end || x < INT_MIN || x > INT_MAX)
		return -EINVAL;
	*v = (int)x;
	return 0;
}

int gpunvme_pci_iommu_group(const char *bdf)
{
	char path[PATH_MAX], name[32];
	int rc, g;

	if (gpunvme_pci_exists(bdf))
		return -ENODEV;
	if (dev_path(path, sizeof(path), bdf, "iommu_group"))
		return -ENAMETOOLONG;
	rc = link_base(path, name, sizeof(name));
	if (rc)
		return rc; /* -ENOENT: no group, the IOMMU is off */
	if (parse_int(name, &g) || g < 0)
		return -EINVAL;
	return g;
}

int gpunvme_pci_iommu_group_type(int group, char *buf, size_t len)
{
	char path[PATH_MAX];
	int fd, rc = 0;
	ssize_t n;

	if (!len)
		return -EINVAL;
	buf[0] = '\0';
	snprintf(path, sizeof(path), "%s/kernel/iommu_groups/%d/type", sysfs_root, group);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	if (n < 0)
		rc = -errno;
	else
		buf[n] = '\0';
	close(fd);
	while (n > 0 && isspace((unsigned char)buf[n - 1]))
		buf[--n] = '\0';
	return rc;
}

static int cmp_bdf(const void *a, const void *b)
{
	return strcmp((const char *)a, (const char *)b);
}

int gpunvme_pci_group_devices(int group, char (*bdfs)[13], int max)
{
	char path[PATH_MAX];
	struct dirent *de;
	DIR *d;
	int n = 0;

	snprintf(path, sizeof(path), "%s/kernel/iommu_groups/%d/devices", sysfs_root, group);
	d = opendir(path);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char canon[13];

		if (de->d_name[0] == '.')
			continue;
		/* Names are BDFs; parse quietly so a stray entry is skipped
		 * instead of overwriting the caller's error message. */
		if (strlen(de->d_name) != 12)
			continue;
		memcpy(canon, de->d_name, sizeof(canon));
		for (char *c = canon; *c; c++)
			*c = (char)tolower((unsigned char)*c);
		if (n < max)
			memcpy(bdfs[n], canon, 13);
		n++;
	}
	closedir(d);
	qsort(bdfs, (size_t)(n < max ? n : max), 13, cmp_bdf);
	return n;
}

int gpunvme_pci_info(const char *bdf, struct gpunvme_pci_info *info)
{
	char buf[64], path[PATH_MAX];
	uint64_t v;
	int rc;

	memset(info, 0, sizeof(*info));
	if (gpunvme_pci_exists(bdf))
		return -ENODEV;
	snprintf(info->bdf, sizeof(info->bdf), "%s", bdf);
	if (!gpunvme_pci_read_hex(bdf, "vendor", &v))
		info->vendor = (uint16_t)v;
	if (!gpunvme_pci_read_hex(bdf, "device", &v))
		info->device = (uint16_t)v;
	if (!gpunvme_pci_read_hex(bdf, "class", &v))
		info->class_code = (uint32_t)v & 0xffffff;
	if (!dev_path(path, sizeof(path), bdf, "driver"))
		link_base(path, info->driver, sizeof(info->driver));
	rc = gpunvme_pci_iommu_group(bdf);
	info->iommu_group = rc >= 0 ? rc : -1;
	/* Speed reads "Unknown" (or is absent) for devices without a PCIe
	 * link, e.g. QEMU's on a PC machine; show it as unknown. */
	if (!gpunvme_pci_read_attr(bdf, "current_link_speed", info->link_speed, sizeof(info->link_speed)) &&
	    strcmp(info->link_speed, "Unknown") == 0)
		info->link_speed[0] = '\0';
	if (!gpunvme_pci_read_attr(bdf, "current_link_width", buf, sizeof(buf)) &&
	    parse_int(buf, &info->link_width))
		info->link_width = 0;
	info->numa_node = -1;
	if (!gpunvme_pci_read_attr(bdf, "numa_node", buf, sizeof(buf)) && parse_int(buf, &info->numa_node))
		info->numa_node = -1;
	return 0;
}

static int cmp_info(const void *a, const void *b)
{
	return strcmp(((const struct gpunvme_pci_info *)a)->bdf, ((const struct gpunvme_pci_info *)b)->bdf);
}

int gpunvme_pci_list_nvme(struct gpunvme_pci_info *out, int max)
{
	char path[PATH_MAX];
	struct dirent *de;
	DIR *d;
	int n = 0;

	snprintf(path, sizeof(path), "%s/bus/pci/devices", sysfs_root);
	d = opendir(path);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		uint64_t cls;

		if (de->d_name[0] == '.' || strlen(de->d_name) != 12)
			continue;
		if (gpunvme_pci_read_hex(de->d_name, "class", &cls) || (cls & 0xffffff) != GPUNVME_PCI_CLASS_NVME)
			continue;
		if (n < max && gpunvme_pci_info(de->d_name, &out[n]))
			continue;
		n++;
	}
	closedir(d);
	qsort(out, (size_t)(n < max ? n : max), sizeof(*out), cmp_info);
	return n;
}

int gpunvme_pci_set_master_fd(int fd, uint64_t cfg_off, bool on)
{
	uint16_t cmd, want;
	ssize_t n;

	n = pread(fd, &cmd, sizeof(cmd), (off_t)(cfg_off + 4));
	if (n != (ssize_t)sizeof(cmd))
		return n < 0 ? -errno : -EIO;
	/* All ones: the device is gone (surprise removal) or powered off. */
	if (cmd == 0xffff)
		return -ENODEV;
	/* Bit 1 memory space (BAR0 decodes), bit 2 bus master (the
	 * controller may DMA); without bus mastering every queue read fails
	 * silently and the controller times out or sets CFS. Off, only bus
	 * mastering goes: the registers stay reachable. */
	want = on ? (uint16_t)(cmd | 0x6) : (uint16_t)(cmd & ~0x4);
	if (want == cmd)
		return 0;
	n = pwrite(fd, &want, sizeof(want), (off_t)(cfg_off + 4));
	if (n != (ssize_t)sizeof(want))
		return n < 0 ? -errno : -EIO;
	return 0;
}

int gpunvme_pci_enable_master_fd(int fd, uint64_t cfg_off)
{
	return gpunvme_pci_set_master_fd(fd, cfg_off, true);
}
