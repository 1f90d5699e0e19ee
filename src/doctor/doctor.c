/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme doctor, the inventory half: sysfs, procfs and PCI configuration
 * space read under a root directory (include/gpunvme/doctor.h). Every read
 * is bounded and every parse checked: a missing, truncated or garbage file
 * leaves the fact unknown and says so in the device's `why`. The files read
 * here are exactly those scripts/doctor-capture.sh copies; add one to both.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/base.h"
#include "bus/bus.h"
#include "doctor/doctor_internal.h"
#include "gpunvme/doctor.h"

const char *gpunvme_doctor_answer_str(enum gpunvme_doctor_answer a)
{
	return a == GPUNVME_DOCTOR_YES ? "yes" : a == GPUNVME_DOCTOR_NO ? "no" : "unknown";
}

const char *gpunvme_doctor_iommu_str(enum gpunvme_doctor_iommu m)
{
	switch (m) {
	case GPUNVME_IOMMU_OFF: return "off";
	case GPUNVME_IOMMU_PASSTHROUGH: return "passthrough";
	case GPUNVME_IOMMU_TRANSLATED: return "translated";
	default: return "unknown";
	}
}

/* PCIe Base Specification, Link Status Register (§7.5.3.8): the Current
 * Link Speed field 1..6 is 2.5, 5, 8, 16, 32, 64 GT/s. 8b/10b encoding
 * (Gen1/2) carries 8 bits in 10; 128b/130b (Gen3 and up, as the issue
 * asks for 64 GT/s too) 128 in 130. */
double gpunvme_doctor_link_gbytes(double gts, int width)
{
	if (gts <= 0 || width <= 0)
		return 0;
	double eff = gts < 8.0 ? 8.0 / 10.0 : 128.0 / 130.0;
	return gts * width * eff / 8.0;
}

/* ---- reading under the root ------------------------------------------- */

/* Every path the scan touches, for the test that holds the capture script
 * to this reader (gpunvme_doctor_set_trace). */
static FILE *trace;

void gpunvme_doctor_set_trace(FILE *f)
{
	trace = f;
}

static void dr_trace(const char *path)
{
	if (trace)
		fprintf(trace, "%s\n", path);
}

DIR *dr_opendir(const char *path)
{
	dr_trace(path);
	return opendir(path);
}

int dr_path(const struct dr_ctx *c, char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(buf, len, "%s", c->root);

	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	va_start(ap, fmt);
	int m = vsnprintf(buf + n, len - (size_t)n, fmt, ap);
	va_end(ap);
	if (m < 0 || (size_t)m >= len - (size_t)n)
		return -ENAMETOOLONG;
	return 0;
}

/* Up to len-1 bytes of a file, NUL-terminated (binary safe: returns the
 * byte count). -errno when it cannot be opened or read. */
ssize_t dr_read_bytes(const char *path, void *buf, size_t len)
{
	dr_trace(path);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	size_t got = 0;

	if (fd < 0)
		return -errno;
	while (got < len) {
		ssize_t n = read(fd, (char *)buf + got, len - got);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			int e = errno;
			close(fd);
			return -e;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	return (ssize_t)got;
}

/* A text file's first line, trimmed; 0 or -errno (-EINVAL: empty or not
 * text). */
int dr_read_line(const char *path, char *buf, size_t len)
{
	if (len < 2)
		return -EINVAL;
	ssize_t n = dr_read_bytes(path, buf, len - 1);
	if (n < 0) {
		buf[0] = '\0';
		return (int)n;
	}
	buf[n] = '\0';
	char *nl = strchr(buf, '\n');
	if (nl)
		*nl = '\0';
	size_t l = strlen(buf);
	while (l && isspace((unsigned char)buf[l - 1]))
		buf[--l] = '\0';
	if (!l)
		return -EINVAL;
	for (size_t i = 0; i < l; i++)
		if (!isprint((unsigned char)buf[i])) {
			buf[0] = '\0';
			return -EINVAL;
		}
	return 0;
}

/* strlcpy: truncates, always terminates (len > 0). */
void dr_copy(char *dst, size_t len, const char *src)
{
	size_t l = strlen(src);
	if (l >= len)
		l = len - 1;
	memcpy(dst, src, l);
	dst[l] = '\0';
}

static int dev_attr(const struct dr_ctx *c, const char *bdf, const char *attr, char *buf, size_t len)
{
	char p[PATH_MAX];
	if (dr_path(c, p, sizeof(p), "/sys/bus/pci/devices/%s/%s", bdf, attr))
		return -ENAMETOOLONG;
	return dr_read_line(p, buf, len);
}

static int parse_long(const char *s, int base, long *v)
{
	char *end;
	errno = 0;
	long x = strtol(s, &end, base);
	if (errno || end == s || *end)
		return -EINVAL;
	*v = x;
	return 0;
}

static int dev_hex(const struct dr_ctx *c, const char *bdf, const char *attr, long max, int *v)
{
	char b[64];
	long x;
	if (dev_attr(c, bdf, attr, b, sizeof(b)) || parse_long(b, 16, &x) || x < 0 || x > max)
		return -EINVAL;
	*v = (int)x;
	return 0;
}

/* Basename of a symlink's target. */
static int link_base(const char *path, char *out, size_t len)
{
	char t[PATH_MAX];
	dr_trace(path);
	ssize_t n = readlink(path, t, sizeof(t) - 1);
	if (n < 0)
		return -errno;
	t[n] = '\0';
	const char *b = strrchr(t, '/');
	b = b ? b + 1 : t;
	if (!*b || strlen(b) >= len)
		return -EINVAL;
	memcpy(out, b, strlen(b) + 1);
	return 0;
}

void dr_why(char *why, size_t len, const char *fmt, ...)
{
	size_t l = strlen(why);
	if (l + 3 >= len)
		return;
	if (l) {
		memcpy(why + l, "; ", 3);
		l += 2;
	}
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(why + l, len - l, fmt, ap);
	va_end(ap);
	(void)n; /* truncation of a note is acceptable: it stays terminated */
}

static bool is_bdf(const char *s)
{
	if (strlen(s) != 12)
		return false;
	for (int i = 0; i < 12; i++) {
		char ch = s[i];
		bool sep = i == 4 || i == 7 || i == 10;
		if (sep ? ch != (i == 10 ? '.' : ':') : !isxdigit((unsigned char)ch))
			return false;
	}
	return true;
}

/* ---- configuration space ------------------------------------------------ */

/* The capability list (PCI Local Bus 3.0 §6.7; PCIe Base "PCI Capability
 * List"): Status bit 4 says there is one, 0x34 points at the first entry,
 * each entry is ID, next. Bounded against loops and short files. */
static int cfg_find_cap(const uint8_t *cfg, int len, uint8_t id)
{
	if (len < 0x40 || !(cfg[0x06] & 0x10))
		return -1;
	int p = cfg[0x34] & 0xfc;
	for (int i = 0; i < 48 && p >= 0x40 && p + 2 <= len && p < 256; i++) {
		if (cfg[p] == id)
			return p;
		p = cfg[p + 1] & 0xfc;
	}
	return -1;
}

/* Extended capabilities from 0x100 (PCIe Base "PCI Express Extended
 * Capabilities"): a 32-bit header, ID in bits 15:0, next offset in 31:20. */
static int cfg_find_ecap(const uint8_t *cfg, int len, uint16_t id)
{
	int p = 0x100;
	for (int i = 0; i < 480 && p >= 0x100 && p + 4 <= len; i++) {
		uint32_t h = (uint32_t)cfg[p] | (uint32_t)cfg[p + 1] << 8 | (uint32_t)cfg[p + 2] << 16 |
			     (uint32_t)cfg[p + 3] << 24;
		if (h == 0 || h == 0xffffffffu)
			return -1;
		if ((h & 0xffff) == id)
			return p;
		p = (int)((h >> 20) & 0xffc);
	}
	return -1;
}

static uint16_t le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static const double link_speeds[] = {0, 2.5, 5.0, 8.0, 16.0, 32.0, 64.0};

static void read_config(const struct dr_ctx *c, struct gpunvme_doctor_dev *d)
{
	char p[PATH_MAX];
	uint8_t cfg[4096];

	d->cfg_len = -1;
	d->acs_ctrl = -1;
	d->acs_unknown = true;
	if (dr_path(c, p, sizeof(p), "/sys/bus/pci/devices/%s/config", d->bdf))
		return;
	ssize_t n = dr_read_bytes(p, cfg, sizeof(cfg));
	if (n < 0) {
		dr_why(d->why, sizeof(d->why), "config space unreadable (%s)", strerror((int)-n));
		return;
	}
	d->cfg_len = (int)n;
	if (n < 0x40) {
		dr_why(d->why, sizeof(d->why), "config space only %d bytes (a header is 64)", (int)n);
		return;
	}
	/* Link from the PCI Express Capability (ID 0x10) when sysfs lacks
	 * the attributes: Link Status at +0x12, speed bits 3:0, width 9:4. */
	int pe = cfg_find_cap(cfg, (int)n, 0x10);
	if (pe >= 0 && pe + 0x14 <= n && (d->link_gts == 0 || d->link_width == 0)) {
		uint16_t ls = le16(cfg + pe + 0x12);
		unsigned sp = ls & 0xf, w = (ls >> 4) & 0x3f;
		if (d->link_gts == 0 && sp >= 1 && sp <= 6)
			d->link_gts = link_speeds[sp];
		if (d->link_width == 0 && w >= 1 && w <= 32)
			d->link_width = (int)w;
	}
	/* Power state from PMCSR (Power Management Capability ID 0x01,
	 * PMCSR at +4, bits 1:0 = D0..D3hot; PCIe Base §7.5.2.2) when the
	 * power_state attribute is absent (kernels before 5.x). */
	int pm = cfg_find_cap(cfg, (int)n, 0x01);
	if (!d->power_state[0] && pm >= 0 && pm + 6 <= n) {
		static const char *st[] = {"D0", "D1", "D2", "D3hot"};
		uint16_t pmcsr = le16(cfg + pm + 4);
		if (pmcsr != 0xffff)
			snprintf(d->power_state, sizeof(d->power_state), "%s", st[pmcsr & 3]);
	}
	/* ACS Extended Capability (ID 0x000D): ACS Capability at +4, ACS
	 * Control at +6 (bit 2 P2P Request Redirect, bit 3 P2P Completion
	 * Redirect). Beyond byte 256: a non-root reader sees no extended
	 * space at all, so its absence then means unknown, not "no ACS". */
	if (n >= 0x108) {
		int a = cfg_find_ecap(cfg, (int)n, 0x000d);
		d->acs_unknown = false;
		if (a >= 0)
			d->acs_ctrl = le16(cfg + a + 6);
	}
}

static double parse_speed(const char *s)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || strncmp(end, " GT/s", 5) != 0)
		return 0;
	for (int i = 1; i <= 6; i++)
		if (v == link_speeds[i])
			return v;
	return 0;
}

static void read_link_attrs(const struct dr_ctx *c, struct gpunvme_doctor_dev *d)
{
	char b[64];
	long v;
	if (!dev_attr(c, d->bdf, "current_link_speed", b, sizeof(b)))
		d->link_gts = parse_speed(b);
	if (!dev_attr(c, d->bdf, "current_link_width", b, sizeof(b)) && !parse_long(b, 10, &v) && v >= 1 && v <= 32)
		d->link_width = (int)v;
}

/* A bridge on the path: its link and ACS (no path of its own). */
static void read_bridge(const struct dr_ctx *c, const char *bdf, struct gpunvme_doctor_hop *h)
{
	static struct gpunvme_doctor_dev d; /* large; the scan is single-threaded */
	memset(&d, 0, sizeof(d));
	memset(h, 0, sizeof(*h));
	snprintf(d.bdf, sizeof(d.bdf), "%s", bdf);
	if (dev_hex(c, bdf, "vendor", 0xffff, &d.vendor))
		d.vendor = -1;
	read_link_attrs(c, &d);
	read_config(c, &d);
	snprintf(h->bdf, sizeof(h->bdf), "%s", bdf);
	h->gts = d.link_gts;
	h->width = d.link_width;
	h->gbytes = gpunvme_doctor_link_gbytes(h->gts, h->width);
	h->acs_ctrl = d.acs_ctrl;
	h->acs_unknown = d.acs_unknown;
	h->vendor = d.vendor;
}

/* The device directory's real location tells the bridges above it:
 * /sys/devices/pci0000:00/0000:00:03.1/0000:0a:00.0 -> host bridge
 * pci0000:00, upstream bridge 0000:00:03.1. */
static void read_topology(const struct dr_ctx *c, struct gpunvme_doctor_dev *d)
{
	char p[PATH_MAX], real[PATH_MAX];
	if (dr_path(c, p, sizeof(p), "/sys/bus/pci/devices/%s", d->bdf) || (dr_trace(p), !realpath(p, real))) {
		dr_why(d->why, sizeof(d->why), "PCI path unknown (sysfs link unresolved)");
		return;
	}
	const char *s = strstr(real, "/devices/pci");
	if (!s) {
		dr_why(d->why, sizeof(d->why), "PCI path unknown (not under /sys/devices/pci*)");
		return;
	}
	s += strlen("/devices/");
	const char *e = strchr(s, '/');
	size_t hl = e ? (size_t)(e - s) : strlen(s);
	if (hl >= sizeof(d->host_bridge))
		return;
	memcpy(d->host_bridge, s, hl);
	d->host_bridge[hl] = '\0';
	/* components between the host bridge and the device, top first */
	char comp[GPUNVME_DOCTOR_MAX_UP + 1][13];
	int nc = 0;
	while (e && nc <= GPUNVME_DOCTOR_MAX_UP) {
		s = e + 1;
		e = strchr(s, '/');
		size_t l = e ? (size_t)(e - s) : strlen(s);
		if (l != 12)
			break;
		memcpy(comp[nc], s, 12);
		comp[nc][12] = '\0';
		if (!is_bdf(comp[nc]))
			break;
		nc++;
	}
	if (nc == 0 || strcmp(comp[nc - 1], d->bdf) != 0) {
		d->host_bridge[0] = '\0';
		dr_why(d->why, sizeof(d->why), "PCI path unknown (sysfs path does not end in %s)", d->bdf);
		return;
	}
	d->nup = 0;
	for (int i = nc - 2; i >= 0 && d->nup < GPUNVME_DOCTOR_MAX_UP; i--)
		read_bridge(c, comp[i], &d->up[d->nup++]);
}

int dr_read_dev(const struct dr_ctx *c, const char *bdf, struct gpunvme_doctor_dev *d)
{
	char b[64], p[PATH_MAX];
	long v;

	memset(d, 0, sizeof(*d));
	snprintf(d->bdf, sizeof(d->bdf), "%s", bdf);
	d->iommu_group = -1;
	d->numa_node = -1;
	if (dev_hex(c, bdf, "vendor", 0xffff, &d->vendor))
		d->vendor = -1;
	if (dev_hex(c, bdf, "device", 0xffff, &d->device))
		d->device = -1;
	if (dev_hex(c, bdf, "class", 0xffffff, &d->class_code))
		d->class_code = -1;
	if (!dr_path(c, p, sizeof(p), "/sys/bus/pci/devices/%s/driver", bdf))
		link_base(p, d->driver, sizeof(d->driver));
	if (!dr_path(c, p, sizeof(p), "/sys/bus/pci/devices/%s/iommu_group", bdf) &&
	    !link_base(p, b, sizeof(b)) && !parse_long(b, 10, &v) && v >= 0 && v < 1000000)
		d->iommu_group = (int)v;
	/* The group's default domain: "identity" is passthrough (iommu=pt,
	 * or a kernel built with passthrough as default), "DMA"/"DMA-FQ"
	 * translate. */
	if (d->iommu_group >= 0 && !dr_path(c, p, sizeof(p), "/sys/kernel/iommu_groups/%d/type", d->iommu_group) &&
	    !dr_read_line(p, b, sizeof(b)))
		dr_copy(d->iommu_type, sizeof(d->iommu_type), b);
	if (!dev_attr(c, bdf, "numa_node", b, sizeof(b)) && !parse_long(b, 10, &v) && v >= -1 && v < 4096)
		d->numa_node = (int)v;
	read_link_attrs(c, d);
	if (!dev_attr(c, bdf, "power_state", b, sizeof(b)) && b[0] == 'D' && strlen(b) < sizeof(d->power_state))
		dr_copy(d->power_state, sizeof(d->power_state), b);
	read_config(c, d);
	read_topology(c, d);
	if (d->vendor < 0 || d->class_code < 0)
		dr_why(d->why, sizeof(d->why), "vendor/class attributes unreadable");
	return 0;
}

/* ---- NVMe, GPU, system ---------------------------------------------------- */

/* "nvme0n1" -> "/dev/nvme0n1", "nvme1c2n3" -> "/dev/nvme1n3"; -1 for
 * anything else. */
static int ns_devname(const char *name, char *dev, size_t len)
{
	const char *p = name;
	if (strncmp(p, "nvme", 4) || strlen(name) > 40)
		return -1;
	p += 4;
	size_t s = strspn(p, "0123456789");
	if (!s)
		return -1;
	const char *subsys = p;
	p += s;
	if (*p == 'c') {
		size_t cl = strspn(p + 1, "0123456789");
		if (!cl)
			return -1;
		p += 1 + cl;
	}
	if (*p != 'n' || !p[1] || strspn(p + 1, "0123456789") != strlen(p + 1))
		return -1;
	int k = snprintf(dev, len, "/dev/nvme%.*s%s", (int)s, subsys, p);
	return k < 0 || (size_t)k >= len ? -1 : 0;
}

static void read_nvme(const struct dr_ctx *c, struct gpunvme_doctor_nvme *n, const char *mounts)
{
	char p[PATH_MAX], b[64];
	long v;

	n->namespaces = -1;
	n->queues = -1;
	n->max_transfer_kib = -1;
	if (dr_path(c, p, sizeof(p), "/sys/bus/pci/devices/%s/nvme", n->pci.bdf))
		return;
	DIR *d = dr_opendir(p);
	if (!d)
		return; /* not owned by the kernel driver */
	struct dirent *de;
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, "nvme", 4) && strlen(de->d_name) < sizeof(n->kname) &&
		    (!n->kname[0] || strcmp(de->d_name, n->kname) < 0))
			dr_copy(n->kname, sizeof(n->kname), de->d_name);
	closedir(d);
	if (!n->kname[0])
		return;
	if (!dr_path(c, p, sizeof(p), "/sys/bus/pci/devices/%s/nvme/%s/model", n->pci.bdf, n->kname))
		dr_read_line(p, n->model, sizeof(n->model));
	if (dr_path(c, p, sizeof(p), "/sys/bus/pci/devices/%s/nvme/%s", n->pci.bdf, n->kname) || !(d = dr_opendir(p)))
		return;
	n->namespaces = 0;
	char first[64] = "";
	while ((de = readdir(d))) {
		/* namespaces: nvme0n1 (block device of this controller), or
		 * with native multipath nvme<subsys>c<ctrl>n<ns>, whose block
		 * device is /dev/nvme<subsys>n<ns> */
		char dev[80];
		if (ns_devname(de->d_name, dev, sizeof(dev)))
			continue;
		n->namespaces++;
		if (!first[0] || strcmp(de->d_name, first) < 0)
			dr_copy(first, sizeof(first), de->d_name);
		/* mounted: a /proc/mounts source /dev/nvme0n1 or /dev/nvme0n1pN */
		const char *m = mounts;
		size_t dl = strlen(dev);
		while (m && *m) {
			const char *eol = strchr(m, '\n');
			size_t ll = eol ? (size_t)(eol - m) : strlen(m);
			if (ll > dl && !strncmp(m, dev, dl) && (m[dl] == ' ' || m[dl] == 'p')) {
				const char *sp = memchr(m, ' ', ll);
				if (sp && !n->mounted[0]) {
					const char *tgt = sp + 1, *te = memchr(tgt, ' ', ll - (size_t)(tgt - m));
					int sl = (int)(sp - m), tl = te ? (int)(te - tgt) : 0;
					if (sl > 60)
						sl = 60;
					if (tl > 60)
						tl = 60;
					snprintf(n->mounted, sizeof(n->mounted), "%.*s on %.*s", sl, m, tl, tgt);
				}
			}
			m = eol ? eol + 1 : NULL;
		}
	}
	closedir(d);
	if (!first[0])
		return;
	if (!dr_path(c, p, sizeof(p), "/sys/bus/pci/devices/%s/nvme/%s/%s/queue/max_hw_sectors_kb", n->pci.bdf,
		     n->kname, first) &&
	    !dr_read_line(p, b, sizeof(b)) && !parse_long(b, 10, &v) && v > 0 && v < (1L << 30))
		n->max_transfer_kib = (int)v;
	if (!dr_path(c, p, sizeof(p), "/sys/bus/pci/devices/%s/nvme/%s/%s/mq", n->pci.bdf, n->kname, first) &&
	    (d = dr_opendir(p))) {
		n->queues = 0;
		while ((de = readdir(d)))
			if (isdigit((unsigned char)de->d_name[0]))
				n->queues++;
		closedir(d);
	}
}

static void read_gpu(const struct dr_ctx *c, struct gpunvme_doctor_gpu *g)
{
	char p[PATH_MAX], buf[2048];

	/* BAR1 (the window onto GPU memory peers write to) is the GPU's second
	 * memory BAR: sysfs's resource file has a "start end flags" line per
	 * BAR register (PCI 3.0 §6.2.5.1), and a 64-bit BAR takes two registers
	 * with the upper one's line all zeros. A 32-bit BAR0 puts BAR1 on line
	 * 1 (older GPUs); a 64-bit BAR0 on line 2 (an H200 in a VM: 16 MiB,
	 * 256 GiB, 32 MiB on lines 0, 2, 4). So: the second non-empty line of
	 * the six BAR lines. */
	if (!dr_path(c, p, sizeof(p), "/sys/bus/pci/devices/%s/resource", g->pci.bdf)) {
		ssize_t n = dr_read_bytes(p, buf, sizeof(buf) - 1);
		if (n > 0) {
			buf[n] = '\0';
			char *l = buf;
			int seen = 0;
			for (int i = 0; i < 6 && l && *l; i++) {
				unsigned long long s, e, f;
				if (sscanf(l, "%llx %llx %llx", &s, &e, &f) == 3 && e > s && ++seen == 2) {
					g->bar1_bytes = (uint64_t)(e - s + 1);
					break;
				}
				l = strchr(l, '\n');
				if (l)
					l++;
			}
		}
	}
	if (!g->bar1_bytes)
		dr_why(g->pci.why, sizeof(g->pci.why), "BAR1 size unknown (resource file)");
	/* The NVIDIA driver's per-GPU information file names the model. */
	if (!dr_path(c, p, sizeof(p), "/proc/driver/nvidia/gpus/%s/information", g->pci.bdf)) {
		ssize_t n = dr_read_bytes(p, buf, sizeof(buf) - 1);
		if (n > 0) {
			buf[n] = '\0';
			char *m = strstr(buf, "Model:");
			if (m) {
				m += 6;
				while (*m == ' ' || *m == '\t')
					m++;
				size_t l = strcspn(m, "\n");
				if (l >= sizeof(g->model))
					l = sizeof(g->model) - 1;
				memcpy(g->model, m, l);
				g->model[l] = '\0';
				for (size_t i = 0; i < l; i++)
					if (!isprint((unsigned char)g->model[i]))
						g->model[i] = '?';
			}
		}
	}
}

static enum gpunvme_doctor_answer module_present(const struct dr_ctx *c, const char *name)
{
	char p[PATH_MAX];
	if (dr_path(c, p, sizeof(p), "/sys/module/%s", name))
		return GPUNVME_DOCTOR_UNKNOWN;
	DIR *d = dr_opendir(p);
	if (d) {
		closedir(d);
		return GPUNVME_DOCTOR_YES;
	}
	return GPUNVME_DOCTOR_NO;
}

static void read_system(const struct dr_ctx *c, struct gpunvme_doctor_system *s)
{
	char p[PATH_MAX], buf[4096], b[128];
	struct dirent *de;
	DIR *d;

	s->iommu_groups = -1;
	s->hugepages_total = s->hugepages_free = -1;
	if (!dr_path(c, p, sizeof(p), "/proc/cmdline"))
		dr_read_line(p, s->cmdline, sizeof(s->cmdline));
	if (!dr_path(c, p, sizeof(p), "/sys/kernel/iommu_groups") && (d = dr_opendir(p))) {
		s->iommu_groups = 0;
		while ((de = readdir(d)))
			if (isdigit((unsigned char)de->d_name[0]))
				s->iommu_groups++;
		closedir(d);
	}
	int units = -1;
	if (!dr_path(c, p, sizeof(p), "/sys/class/iommu") && (d = dr_opendir(p))) {
		units = 0;
		while ((de = readdir(d)))
			if (de->d_name[0] != '.')
				units++;
		closedir(d);
	}
	/* The command line first: it is what the user changes. */
	const char *cl = s->cmdline;
	bool off = strstr(cl, "iommu=off") || strstr(cl, "intel_iommu=off") || strstr(cl, "amd_iommu=off");
	bool pt = strstr(cl, "iommu=pt") || strstr(cl, "iommu.passthrough=1");
	if (s->iommu_groups > 0) {
		s->iommu = pt ? GPUNVME_IOMMU_PASSTHROUGH : GPUNVME_IOMMU_TRANSLATED;
		snprintf(s->iommu_why, sizeof(s->iommu_why), "%d IOMMU groups%s", s->iommu_groups,
			 pt ? ", iommu=pt on the kernel command line" : "");
	} else if (s->iommu_groups == 0 || units == 0) {
		s->iommu = GPUNVME_IOMMU_OFF;
		snprintf(s->iommu_why, sizeof(s->iommu_why), "no IOMMU groups%s", off ? " (disabled on the kernel command line)" : "");
	} else {
		s->iommu = GPUNVME_IOMMU_UNKNOWN;
		snprintf(s->iommu_why, sizeof(s->iommu_why), "unknown, because /sys/kernel/iommu_groups is unreadable");
	}
	s->vfio_pci = module_present(c, gpunvme_bus_vfio_pci_module);
	s->uio_pci_generic = module_present(c, gpunvme_bus_uio_module);
	s->kmod = module_present(c, "gpunvme");
	s->noiommu = GPUNVME_DOCTOR_UNKNOWN;
	if (!dr_path(c, p, sizeof(p), "/sys/module/%s/parameters/enable_unsafe_noiommu_mode",
		     gpunvme_bus_vfio_core_module) &&
	    !dr_read_line(p, b, sizeof(b)))
		s->noiommu = (b[0] == 'Y' || b[0] == '1') ? GPUNVME_DOCTOR_YES : GPUNVME_DOCTOR_NO;
	else if (module_present(c, gpunvme_bus_vfio_core_module) == GPUNVME_DOCTOR_NO)
		s->noiommu = GPUNVME_DOCTOR_NO;

	/* NVIDIA driver: /proc/driver/nvidia/version names the flavour ("Open
	 * Kernel Module"); /sys/module/nvidia/version the number; the taint
	 * flags say proprietary ('P') when the version file is not there. */
	s->nvidia_open = GPUNVME_DOCTOR_UNKNOWN;
	bool have_proc = false;
	if (!dr_path(c, p, sizeof(p), "/proc/driver/nvidia/version") && !dr_read_line(p, buf, sizeof(buf))) {
		have_proc = true;
		s->nvidia_open = strstr(buf, "Open Kernel Module") ? GPUNVME_DOCTOR_YES : GPUNVME_DOCTOR_NO;
		const char *v = strstr(buf, "  ");
		for (const char *q = buf; *q; q++)
			if (isdigit((unsigned char)q[0]) && strchr(q, '.') && (q == buf || q[-1] == ' ') &&
			    strspn(q, "0123456789.") >= 5) {
				v = q;
				break;
			}
		if (v && isdigit((unsigned char)*v)) {
			size_t l = strspn(v, "0123456789.");
			if (l < sizeof(s->nvidia_version)) {
				memcpy(s->nvidia_version, v, l);
				s->nvidia_version[l] = '\0';
			}
		}
	}
	if (!s->nvidia_version[0] && !dr_path(c, p, sizeof(p), "/sys/module/nvidia/version") &&
	    !dr_read_line(p, b, sizeof(b)) && strspn(b, "0123456789.") == strlen(b))
		dr_copy(s->nvidia_version, sizeof(s->nvidia_version), b);
	if (!have_proc && !dr_path(c, p, sizeof(p), "/sys/module/nvidia/taint") && !dr_read_line(p, b, sizeof(b)))
		s->nvidia_open = strchr(b, 'P') ? GPUNVME_DOCTOR_NO : GPUNVME_DOCTOR_YES;
	/* dma-buf export of GPU memory (cuMemGetHandleForAddressRange with
	 * a DMA_BUF fd) is implemented by the open kernel module, R515 on. */
	long major = -1;
	if (s->nvidia_version[0])
		major = strtol(s->nvidia_version, NULL, 10);
	if (!s->nvidia_version[0] && module_present(c, "nvidia") != GPUNVME_DOCTOR_YES) {
		s->dmabuf = GPUNVME_DOCTOR_NO;
		snprintf(s->dmabuf_why, sizeof(s->dmabuf_why), "no NVIDIA driver loaded");
	} else if (s->nvidia_open == GPUNVME_DOCTOR_NO) {
		s->dmabuf = GPUNVME_DOCTOR_NO;
		snprintf(s->dmabuf_why, sizeof(s->dmabuf_why),
			 "the proprietary NVIDIA kernel module exports no dma-buf; install the open one (nvidia-open, "
			 "or the driver's -open package), R515 or later");
	} else if (s->nvidia_open == GPUNVME_DOCTOR_YES && major >= 515) {
		s->dmabuf = GPUNVME_DOCTOR_YES;
		snprintf(s->dmabuf_why, sizeof(s->dmabuf_why), "open kernel module %s (R515 or later)", s->nvidia_version);
	} else if (s->nvidia_open == GPUNVME_DOCTOR_YES && major >= 0) {
		s->dmabuf = GPUNVME_DOCTOR_NO;
		snprintf(s->dmabuf_why, sizeof(s->dmabuf_why), "open kernel module %s predates dma-buf export (R515); upgrade the driver",
			 s->nvidia_version);
	} else {
		s->dmabuf = GPUNVME_DOCTOR_UNKNOWN;
		snprintf(s->dmabuf_why, sizeof(s->dmabuf_why),
			 "unknown, because the driver's flavour or version is unreadable (/proc/driver/nvidia/version)");
	}

	if (!dr_path(c, p, sizeof(p), "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages") &&
	    !dr_read_line(p, b, sizeof(b)))
		s->hugepages_total = strtol(b, NULL, 10) >= 0 ? strtol(b, NULL, 10) : -1;
	if (!dr_path(c, p, sizeof(p), "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages") &&
	    !dr_read_line(p, b, sizeof(b)))
		s->hugepages_free = strtol(b, NULL, 10) >= 0 ? strtol(b, NULL, 10) : -1;

	/* memlock: getrlimit on the live machine; a captured machine's is
	 * in doctor-extra.txt ("memlock <bytes>" or "memlock unlimited"). */
	if (!c->root[0]) {
		struct rlimit rl;
		if (!getrlimit(RLIMIT_MEMLOCK, &rl)) {
			s->memlock_known = true;
			s->memlock_unlimited = rl.rlim_cur == RLIM_INFINITY;
			s->memlock_bytes = s->memlock_unlimited ? 0 : (uint64_t)rl.rlim_cur;
		}
	} else if (!dr_path(c, p, sizeof(p), "/doctor-extra.txt")) {
		ssize_t n = dr_read_bytes(p, buf, sizeof(buf) - 1);
		if (n > 0) {
			buf[n] = '\0';
			char *m = strstr(buf, "memlock ");
			if (m && (m == buf || m[-1] == '\n')) {
				m += 8;
				char *end;
				if (!strncmp(m, "unlimited", 9)) {
					s->memlock_known = s->memlock_unlimited = true;
				} else {
					errno = 0;
					unsigned long long x = strtoull(m, &end, 10);
					if (!errno && end != m && (*end == '\n' || !*end) && isdigit((unsigned char)*m)) {
						s->memlock_known = true;
						s->memlock_bytes = x;
					}
				}
			}
		}
	}
	if (!s->memlock_known)
		dr_why(s->why, sizeof(s->why), "memlock limit unknown (doctor-extra.txt)");
}

static int cmp_nvme(const void *a, const void *b)
{
	return strcmp(((const struct gpunvme_doctor_nvme *)a)->pci.bdf, ((const struct gpunvme_doctor_nvme *)b)->pci.bdf);
}

static int cmp_gpu(const void *a, const void *b)
{
	return strcmp(((const struct gpunvme_doctor_gpu *)a)->pci.bdf, ((const struct gpunvme_doctor_gpu *)b)->pci.bdf);
}

int gpunvme_doctor_scan(const char *root, struct gpunvme_doctor_report **out)
{
	struct dr_ctx c;
	char p[PATH_MAX];

	*out = NULL;
	if (root && strlen(root) >= sizeof(c.root))
		return gpunvme_set_error(-ENAMETOOLONG, "doctor: root '%.64s...' is too long (at most %zu bytes)", root,
					 sizeof(c.root) - 1);
	snprintf(c.root, sizeof(c.root), "%s", root ? root : "");
	struct gpunvme_doctor_report *r = calloc(1, sizeof(*r));
	if (!r)
		return gpunvme_set_error(-ENOMEM, "doctor: out of memory for the report");
	snprintf(r->root, sizeof(r->root), "%s", c.root);
	read_system(&c, &r->sys);

	char *mounts = NULL;
	if (!dr_path(&c, p, sizeof(p), "/proc/mounts")) {
		mounts = calloc(1, 65536);
		if (mounts) {
			ssize_t n = dr_read_bytes(p, mounts, 65535);
			if (n < 0)
				mounts[0] = '\0';
		}
	}
	DIR *d = NULL;
	if (!dr_path(&c, p, sizeof(p), "/sys/bus/pci/devices"))
		d = dr_opendir(p);
	if (!d)
		dr_why(r->sys.why, sizeof(r->sys.why), "no PCI bus in sysfs (%s/sys/bus/pci/devices)", c.root);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (!is_bdf(de->d_name))
			continue;
		int cls, ven;
		if (dev_hex(&c, de->d_name, "class", 0xffffff, &cls))
			continue;
		if ((unsigned)cls == 0x010802u && r->nnvme < GPUNVME_DOCTOR_MAX_NVME) {
			struct gpunvme_doctor_nvme *n = &r->nvme[r->nnvme++];
			dr_read_dev(&c, de->d_name, &n->pci);
			read_nvme(&c, n, mounts);
		} else if ((cls >> 8 == 0x0300 || cls >> 8 == 0x0302) && !dev_hex(&c, de->d_name, "vendor", 0xffff, &ven) &&
			   ven == 0x10de && r->ngpu < GPUNVME_DOCTOR_MAX_GPU) {
			struct gpunvme_doctor_gpu *g = &r->gpu[r->ngpu++];
			dr_read_dev(&c, de->d_name, &g->pci);
			read_gpu(&c, g);
		}
	}
	if (d)
		closedir(d);
	free(mounts);
	qsort(r->nvme, (size_t)r->nnvme, sizeof(r->nvme[0]), cmp_nvme);
	qsort(r->gpu, (size_t)r->ngpu, sizeof(r->gpu[0]), cmp_gpu);
	/* The bridges on every path: read once per pair in judge; keep the
	 * context for it. */
	gpunvme_doctor_judge(r);
	*out = r;
	return 0;
}

void gpunvme_doctor_free(struct gpunvme_doctor_report *rep)
{
	free(rep);
}
