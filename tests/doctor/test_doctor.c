/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme doctor against hand-built machine descriptions: a sysfs/procfs
 * subtree with the real symlink structure (bus/pci/devices/BDF -> devices/
 * pciDDDD:BB/...), config-space bytes with the capabilities the doctor decodes
 * (PCIe Link Status, PM PMCSR, ACS), and doctor-extra.txt. Every verdict
 * of every fixture is asserted; broken variants and a fuzz loop check that
 * bad input degrades to "unknown" and never crashes.
 *
 *   test_doctor [CASE]               run the cases (ctest runs each)
 *   test_doctor mkfixture NAME DIR   write fixture NAME under DIR (the CLI
 *                                    tests and anyone curious use it)
 *   test_doctor trace ROOT           print every path a scan of ROOT opens
 */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness/check.h"
#include "gpunvme/doctor.h"

/* ---- building fixtures --------------------------------------------------- */

/* snprintf into an array; a path that does not fit ends the test */
#define SNP(buf, ...)                                                          \
	do {                                                                   \
		int snp_n_ = snprintf(buf, sizeof(buf), __VA_ARGS__);         \
		if (snp_n_ < 0 || (size_t)snp_n_ >= sizeof(buf)) {             \
			fprintf(stderr, "test_doctor: path too long\n");     \
			exit(1);                                               \
		}                                                              \
	} while (0)

static char fx_root[PATH_MAX];

static void mkdirs(const char *path)
{
	char p[PATH_MAX];
	SNP(p, "%s", path);
	for (char *s = p + 1; *s; s++)
		if (*s == '/') {
			*s = '\0';
			mkdir(p, 0755);
			*s = '/';
		}
	mkdir(p, 0755);
}

static void put(const char *rel, const void *data, size_t len)
{
	char p[PATH_MAX];
	SNP(p, "%s/%s", fx_root, rel);
	char *slash = strrchr(p, '/');
	*slash = '\0';
	mkdirs(p);
	*slash = '/';
	unlink(p);
	FILE *f = fopen(p, "wb");
	if (!f) {
		perror(p);
		exit(1);
	}
	fwrite(data, 1, len, f);
	fclose(f);
}

__attribute__((format(printf, 2, 3))) static void putf(const char *rel, const char *fmt, ...)
{
	char buf[4096];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	put(rel, buf, (size_t)n);
}

static void link_to(const char *rel, const char *target)
{
	char p[PATH_MAX];
	SNP(p, "%s/%s", fx_root, rel);
	char *slash = strrchr(p, '/');
	*slash = '\0';
	mkdirs(p);
	*slash = '/';
	unlink(p);
	if (symlink(target, p)) {
		perror(p);
		exit(1);
	}
}

static void mkd(const char *rel)
{
	char p[PATH_MAX];
	SNP(p, "%s/%s", fx_root, rel);
	mkdirs(p);
}

/* Port types (PCIe Capabilities register bits 7:4). */
enum { EP = 0, RP = 4, USP = 5, DSP = 6, NOPCIE = 15 };

struct fxdev {
	const char *path;   /* under sys/devices: "pci0000:00/0000:00:03.1/0000:0a:00.0" */
	int vendor, device, cls;
	const char *driver; /* NULL none */
	int group;          /* -1 none */
	int gts_code;       /* Link Status speed 1..6, 0 no link */
	int width;
	bool speed_attr;    /* also current_link_speed/width attributes */
	const char *power;  /* power_state attribute, NULL absent */
	int pm_state;       /* PMCSR bits 1:0 */
	int type;
	int acs;            /* ACS Control, -1 no ACS capability */
	int cfglen;         /* bytes of config written */
	const char *resource; /* resource file text, NULL absent */
};

static const char *gts_text[] = {"Unknown", "2.5 GT/s PCIe", "5.0 GT/s PCIe", "8.0 GT/s PCIe",
				 "16.0 GT/s PCIe", "32.0 GT/s PCIe", "64.0 GT/s PCIe"};

static void put_dev(const struct fxdev *d)
{
	char dir[PATH_MAX], rel[PATH_MAX], tgt[PATH_MAX];
	const char *bdf = strrchr(d->path, '/') + 1;
	uint8_t cfg[4096];

	SNP(dir, "sys/devices/%s", d->path);
	mkd(dir);
	SNP(rel, "sys/bus/pci/devices/%s", bdf);
	SNP(tgt, "../../../devices/%s", d->path);
	link_to(rel, tgt);
#define ATTR(name, ...)                                                    \
	do {                                                               \
		SNP(rel, "%s/%s", dir, name);            \
		putf(rel, __VA_ARGS__);                                    \
	} while (0)
	ATTR("vendor", "0x%04x\n", d->vendor);
	ATTR("device", "0x%04x\n", d->device);
	ATTR("class", "0x%06x\n", d->cls);
	ATTR("numa_node", "-1\n");
	if (d->speed_attr) {
		ATTR("current_link_speed", "%s\n", gts_text[d->gts_code]);
		ATTR("current_link_width", "%d\n", d->width);
	}
	if (d->power)
		ATTR("power_state", "%s\n", d->power);
	if (d->resource)
		ATTR("resource", "%s", d->resource);
	if (d->driver) {
		SNP(rel, "%s/driver", dir);
		SNP(tgt, "../../../../bus/pci/drivers/%s", d->driver);
		link_to(rel, tgt);
	}
	if (d->group >= 0) {
		SNP(rel, "%s/iommu_group", dir);
		SNP(tgt, "../../../../kernel/iommu_groups/%d", d->group);
		link_to(rel, tgt);
		SNP(rel, "sys/kernel/iommu_groups/%d/type", d->group);
		putf(rel, "DMA\n");
	}
	/* configuration space: header, PM capability at 0x40, PCIe at 0x50,
	 * ACS extended capability at 0x100 */
	memset(cfg, 0, sizeof(cfg));
	cfg[0] = (uint8_t)d->vendor;
	cfg[1] = (uint8_t)(d->vendor >> 8);
	cfg[2] = (uint8_t)d->device;
	cfg[3] = (uint8_t)(d->device >> 8);
	cfg[0x06] = 0x10; /* capability list */
	cfg[0x09] = (uint8_t)d->cls;
	cfg[0x0a] = (uint8_t)(d->cls >> 8);
	cfg[0x0b] = (uint8_t)(d->cls >> 16);
	cfg[0x34] = 0x40;
	cfg[0x40] = 0x01;
	cfg[0x41] = d->type == NOPCIE ? 0 : 0x50;
	cfg[0x42] = 0x03;
	cfg[0x44] = (uint8_t)d->pm_state;
	if (d->type != NOPCIE) {
		cfg[0x50] = 0x10;
		cfg[0x52] = (uint8_t)(0x02 | d->type << 4);
		uint16_t ls = (uint16_t)(d->gts_code | d->width << 4);
		cfg[0x50 + 0x12] = (uint8_t)ls;
		cfg[0x50 + 0x13] = (uint8_t)(ls >> 8);
	}
	if (d->acs >= 0) {
		cfg[0x100] = 0x0d; /* ID 0x000D, version 1, next 0 */
		cfg[0x102] = 0x01;
		cfg[0x104] = 0x5f;
		cfg[0x106] = (uint8_t)d->acs;
		cfg[0x107] = (uint8_t)(d->acs >> 8);
	}
	SNP(rel, "%s/config", dir);
	put(rel, cfg, (size_t)(d->cfglen ? d->cfglen : 4096));
#undef ATTR
}

static void put_module(const char *name)
{
	char rel[256];
	SNP(rel, "sys/module/%s", name);
	mkd(rel);
}

/* An NVMe owned by the kernel driver: nvme/<kname>/<ns>/queue, mq/N. */
static void put_kernel_nvme(const char *devpath, const char *kname, const char *model, int queues, int mdts_kb)
{
	char rel[PATH_MAX];
	SNP(rel, "sys/devices/%s/nvme/%s/model", devpath, kname);
	putf(rel, "%-40s\n", model);
	SNP(rel, "sys/devices/%s/nvme/%s/%sn1/queue/max_hw_sectors_kb", devpath, kname, kname);
	putf(rel, "%d\n", mdts_kb);
	for (int q = 0; q < queues; q++) {
		SNP(rel, "sys/devices/%s/nvme/%s/%sn1/mq/%d", devpath, kname, kname, q);
		mkd(rel);
	}
}

static const char *NV_OPEN_590 = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  590.48.01  Release Build  "
				 "(dvs-builder@U22-I3-AF03-09-1)  Mon Dec  1 00:00:00 UTC 2025\n"
				 "GCC version:  gcc version 14.2.0\n";

/* (a) the RTX 3090 + WD SN740 machine of the investigation (seed 004):
 * AMD Matisse root complex, separate root ports, IOMMU off (amd_iommu=off),
 * the SSD on vfio-pci in no-IOMMU mode, open NVIDIA module 590, 256 MiB
 * BAR1, run as root. d3: as found right after unbinding nvme (the seed:
 * "device falls to D3 after unbind"): no driver, PMCSR D3hot, no
 * power_state attribute (an older kernel). Nothing will wake it: BAR0
 * mapped through resource0 reads all ones. */
static void fx_seed004(bool d3)
{
	putf("proc/cmdline", "BOOT_IMAGE=/vmlinuz-6.17.0-14-generic root=UUID=1 ro quiet splash amd_iommu=off\n");
	putf("proc/mounts", "/dev/sda2 / ext4 rw 0 0\n");
	putf("proc/driver/nvidia/version", "%s", NV_OPEN_590);
	putf("proc/driver/nvidia/gpus/0000:0a:00.0/information", "Model: \t\t NVIDIA GeForce RTX 3090\nIRQ:   95\n");
	putf("doctor-extra.txt", "memlock unlimited\n");
	mkd("sys/kernel/iommu_groups");
	mkd("sys/class/iommu");
	put_module("nvidia");
	putf("sys/module/nvidia/version", "590.48.01\n");
	put_module("vfio");
	put_module("vfio_pci");
	putf("sys/module/vfio/parameters/enable_unsafe_noiommu_mode", "Y\n");
	putf("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "0\n");
	putf("sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "0\n");
	struct fxdev devs[] = {
		{"pci0000:00/0000:00:03.1", 0x1022, 0x1483, 0x060400, "pcieport", -1, 4, 16, true, "D0", 0, RP, 0, 0, NULL},
		{"pci0000:00/0000:00:03.4", 0x1022, 0x1483, 0x060400, "pcieport", -1, 4, 4, true, "D0", 0, RP, 0, 0, NULL},
		{"pci0000:00/0000:00:03.1/0000:0a:00.0", 0x10de, 0x2204, 0x030000, "nvidia", -1, 4, 16, true, "D0", 0, EP,
		 -1, 0,
		 "0x00000000fb000000 0x00000000fbffffff 0x0000000000040200\n"
		 "0x000000d000000000 0x000000d00fffffff 0x000000000014220c\n"},
		{"pci0000:00/0000:00:03.4/0000:0b:00.0", 0x15b7, 0x5017, 0x010802, d3 ? NULL : "vfio-pci", -1, 4, 4, !d3,
		 d3 ? NULL : "D0", d3 ? 3 : 0, EP, -1, 0, NULL},
	};
	for (size_t i = 0; i < sizeof(devs) / sizeof(devs[0]); i++)
		put_dev(&devs[i]);
}

/* (b) a server: Intel host bridge, a Broadcom PCIe switch with ACS on its
 * downstream ports between an H100 and a PM1733, IOMMU translating,
 * proprietary NVIDIA module 535, memlock 64 KiB (not root). A second
 * controller, the boot disk, is owned by the kernel and mounted. */
static void fx_server_switch(void)
{
	putf("proc/cmdline", "BOOT_IMAGE=/vmlinuz-6.1.0-18-amd64 root=/dev/nvme0n1p2 ro intel_iommu=on\n");
	putf("proc/mounts", "sysfs /sys sysfs rw 0 0\n/dev/nvme0n1p2 / ext4 rw,relatime 0 0\n/dev/nvme0n1p1 /boot/efi vfat rw 0 0\n");
	putf("proc/driver/nvidia/version",
	     "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023\n");
	putf("proc/driver/nvidia/gpus/0000:03:00.0/information", "Model: \t\t NVIDIA H100 PCIe\n");
	putf("doctor-extra.txt", "memlock 65536\n");
	mkd("sys/class/iommu/dmar0");
	put_module("nvidia");
	put_module("vfio_pci");
	put_module("vfio");
	putf("sys/module/vfio/parameters/enable_unsafe_noiommu_mode", "N\n");
	putf("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "512\n");
	putf("sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "512\n");
	putf("sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages", "0\n");
	struct fxdev devs[] = {
		{"pci0000:00/0000:00:01.0", 0x8086, 0x352a, 0x060400, "pcieport", 1, 4, 16, true, "D0", 0, RP, 0x001d, 0, NULL},
		{"pci0000:00/0000:00:01.0/0000:01:00.0", 0x10b5, 0xc040, 0x060400, "pcieport", 1, 4, 16, true, "D0", 0, USP, -1,
		 0, NULL},
		{"pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0", 0x10b5, 0xc040, 0x060400, "pcieport", 1, 4, 16, true,
		 "D0", 0, DSP, 0x001d, 0, NULL},
		{"pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0", 0x10b5, 0xc040, 0x060400, "pcieport", 1, 4, 4, true,
		 "D0", 0, DSP, 0x001d, 0, NULL},
		{"pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0", 0x10de, 0x2331, 0x030200, "nvidia", 31, 4,
		 16, true, "D0", 0, EP, -1, 0,
		 "0x00000000f0000000 0x00000000f0ffffff 0x0000000000040200\n"
		 "0x0000200000000000 0x0000201fffffffff 0x000000000014220c\n"},
		{"pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:04:00.0", 0x144d, 0xa824, 0x010802, "vfio-pci", 32, 4,
		 4, true, "D0", 0, EP, -1, 0, NULL},
		{"pci0000:00/0000:00:02.0", 0x8086, 0x352b, 0x060400, "pcieport", 2, 4, 4, true, "D0", 0, RP, 0x001d, 0, NULL},
		{"pci0000:00/0000:00:02.0/0000:05:00.0", 0x144d, 0xa80a, 0x010802, "nvme", 33, 4, 4, true, "D0", 0, EP, -1, 0,
		 NULL},
	};
	for (size_t i = 0; i < sizeof(devs) / sizeof(devs[0]); i++)
		put_dev(&devs[i]);
	put_kernel_nvme("pci0000:00/0000:00:02.0/0000:05:00.0", "nvme0", "SAMSUNG MZVL21T0HCLR-00B00", 8, 512);
}

/* (c) a cloud VM with an H100 passed through: the hypervisor's PCI bus has
 * no root ports and reports no link; no NVMe (virtio disks); no IOMMU. */
static void fx_h100_vm(void)
{
	putf("proc/cmdline", "BOOT_IMAGE=/boot/vmlinuz-5.15.0-1051-gcp root=PARTUUID=1 ro console=ttyS0\n");
	putf("proc/mounts", "/dev/sda1 / ext4 rw 0 0\n");
	putf("proc/driver/nvidia/version",
	     "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  (dvs-builder@U16)\n");
	putf("proc/driver/nvidia/gpus/0000:00:04.0/information", "Model: \t\t NVIDIA H100 80GB HBM3\n");
	putf("doctor-extra.txt", "memlock 8388608\n");
	mkd("sys/kernel/iommu_groups");
	put_module("nvidia");
	struct fxdev gpu = {"pci0000:00/0000:00:04.0", 0x10de, 0x2330, 0x030200, "nvidia", -1, 0, 0, false, "D0", 0,
			    NOPCIE, -1, 256,
			    "0x00000000c0000000 0x00000000c0ffffff 0x0000000000040200\n"
			    "0x0000004000000000 0x0000005fffffffff 0x000000000014220c\n"};
	put_dev(&gpu);
	struct fxdev isa = {"pci0000:00/0000:00:01.0", 0x8086, 0x7110, 0x060100, NULL, -1, 0, 0, false, NULL, 0, NOPCIE, -1,
			    64, NULL};
	put_dev(&isa);
}

/* (d) a workstation with an AMD Radeon and an NVMe boot disk: no NVIDIA GPU. */
static void fx_no_nvidia(void)
{
	putf("proc/cmdline", "root=/dev/nvme0n1p3 ro quiet\n");
	putf("proc/mounts", "/dev/nvme0n1p3 / btrfs rw 0 0\n");
	putf("doctor-extra.txt", "memlock 8388608\n");
	mkd("sys/class/iommu/ivhd0");
	put_module("amdgpu");
	struct fxdev devs[] = {
		{"pci0000:00/0000:00:01.1", 0x1022, 0x14ab, 0x060400, "pcieport", 0, 4, 4, true, "D0", 0, RP, 0x005f, 0, NULL},
		{"pci0000:00/0000:00:01.1/0000:01:00.0", 0x1e0f, 0x0001, 0x010802, "nvme", 14, 4, 4, true, "D0", 0, EP, -1, 0,
		 NULL},
		{"pci0000:00/0000:00:03.1", 0x1022, 0x14a5, 0x060400, "pcieport", 3, 4, 16, true, "D0", 0, RP, 0x005f, 0, NULL},
		{"pci0000:00/0000:00:03.1/0000:03:00.0", 0x1002, 0x744c, 0x030000, "amdgpu", 15, 4, 16, true, "D0", 0, EP, -1,
		 0, NULL},
	};
	for (size_t i = 0; i < sizeof(devs) / sizeof(devs[0]); i++)
		put_dev(&devs[i]);
	put_kernel_nvme("pci0000:00/0000:00:01.1/0000:01:00.0", "nvme0", "KIOXIA EXCERIA PLUS G3 SSD", 16, 256);
}

/* (e) the seed machine with broken files: garbage vendor, a 3-byte config
 * space, truncated and binary attributes, dangling links, a stray entry. */
static void fx_broken(void)
{
	fx_seed004(false);
	static const uint8_t bin[] = {0xff, 0x00, 0x81, 'x', 0x01, 0x02};
	put("proc/driver/nvidia/version", bin, sizeof(bin));
	putf("sys/module/nvidia/version", "not-a-version\n");
	putf("doctor-extra.txt", "memlock lots\n");
	put("sys/devices/pci0000:00/0000:00:03.4/0000:0b:00.0/config", "\x86\x80\x01", 3);
	putf("sys/devices/pci0000:00/0000:00:03.4/0000:0b:00.0/current_link_speed", "16.");
	put("sys/devices/pci0000:00/0000:00:03.4/0000:0b:00.0/current_link_width", "", 0);
	putf("sys/devices/pci0000:00/0000:00:03.1/0000:0a:00.0/resource", "garbage\n\x01\x02");
	put("sys/devices/pci0000:00/0000:00:03.1/0000:0a:00.0/power_state", bin, sizeof(bin));
	link_to("sys/devices/pci0000:00/0000:00:03.4/0000:0b:00.0/iommu_group", "../../../nowhere/17x");
	link_to("sys/bus/pci/devices/0000:99:00.0", "../../../devices/pci0000:99/0000:99:00.0");
	mkd("sys/bus/pci/devices/not-a-bdf");
	/* a bridge whose config is garbage that loops the capability list */
	uint8_t loop[256];
	memset(loop, 0x40, sizeof(loop));
	loop[0x06] = 0x10;
	put("sys/devices/pci0000:00/0000:00:03.1/config", loop, sizeof(loop));
	putf("sys/devices/pci0000:00/0000:00:03.1/current_link_speed", "fast\n");
}

static const struct {
	const char *name;
	void (*fn)(void);
} fixtures[] = {
	{"seed004", NULL}, {"seed004-d3", NULL}, {"server-switch", fx_server_switch},
	{"h100-vm", fx_h100_vm}, {"no-nvidia", fx_no_nvidia}, {"broken", fx_broken},
};

static int build(const char *name, const char *dir)
{
	SNP(fx_root, "%s", dir);
	mkdirs(fx_root);
	if (!strcmp(name, "seed004"))
		fx_seed004(false);
	else if (!strcmp(name, "seed004-d3"))
		fx_seed004(true);
	else {
		size_t i;
		for (i = 0; i < sizeof(fixtures) / sizeof(fixtures[0]); i++)
			if (!strcmp(fixtures[i].name, name) && fixtures[i].fn) {
				fixtures[i].fn();
				break;
			}
		if (i == sizeof(fixtures) / sizeof(fixtures[0]))
			return -1;
	}
	return 0;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static char tmpdir[PATH_MAX];

/* A fresh fixture under a temporary directory; its scanned report. */
static struct gpunvme_doctor_report *load(const char *name)
{
	if (tmpdir[0])
		nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	SNP(tmpdir, "%s/doctor-fx.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(tmpdir))
		return NULL;
	if (build(name, tmpdir))
		return NULL;
	struct gpunvme_doctor_report *r = NULL;
	if (gpunvme_doctor_scan(tmpdir, &r))
		return NULL;
	return r;
}

static void cleanup(void)
{
	if (tmpdir[0])
		nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	tmpdir[0] = '\0';
}

/* Some reason of verdict v contains s. */
static bool has_reason(const struct gpunvme_doctor_verdict *v, const char *s)
{
	for (int i = 0; i < v->nreasons; i++)
		if (strstr(v->reasons[i].why, s) || strstr(v->reasons[i].fix, s))
			return true;
	return false;
}

static bool has_note(const struct gpunvme_doctor_pair *p, const char *s)
{
	for (int i = 0; i < p->nnotes; i++)
		if (strstr(p->notes[i], s))
			return true;
	return false;
}

#define NO GPUNVME_DOCTOR_NO
#define YES GPUNVME_DOCTOR_YES
#define UNK GPUNVME_DOCTOR_UNKNOWN

/* ---- cases ----------------------------------------------------------------- */

TEST_CASE(link_bandwidth)
{
	/* 8b/10b below 8 GT/s, 128b/130b from 8 GT/s */
	CHECK(gpunvme_doctor_link_gbytes(2.5, 1) == 0.25);
	CHECK(gpunvme_doctor_link_gbytes(5.0, 4) == 2.0);
	double g = gpunvme_doctor_link_gbytes(16.0, 4);
	CHECK(g > 7.876 && g < 7.878, "16 GT/s x4 = %f", g);
	g = gpunvme_doctor_link_gbytes(8.0, 16);
	CHECK(g > 15.75 && g < 15.76, "8 GT/s x16 = %f", g);
	CHECK(gpunvme_doctor_link_gbytes(0, 4) == 0);
	CHECK(gpunvme_doctor_link_gbytes(16, 0) == 0);
	return 0;
}

TEST_CASE(seed004)
{
	struct gpunvme_doctor_report *r = load("seed004");
	REQUIRE(r);
	CHECK_EQ(r->sys.iommu, GPUNVME_IOMMU_OFF);
	CHECK_EQ(r->sys.noiommu, YES);
	CHECK_EQ(r->sys.nvidia_open, YES);
	CHECK_STR(r->sys.nvidia_version, "590.48.01");
	CHECK_EQ(r->sys.dmabuf, YES);
	CHECK(r->sys.memlock_known && r->sys.memlock_unlimited);
	CHECK_EQ(r->sys.hugepages_total, 0);
	REQUIRE_EQ(r->ngpu, 1);
	REQUIRE_EQ(r->nnvme, 1);
	CHECK_STR(r->gpu[0].model, "NVIDIA GeForce RTX 3090");
	CHECK_EQ(r->gpu[0].bar1_bytes, 256ull << 20);
	CHECK_STR(r->nvme[0].pci.driver, "vfio-pci");
	CHECK_STR(r->nvme[0].pci.power_state, "D0");
	CHECK_STR(r->nvme[0].pci.host_bridge, "pci0000:00");
	CHECK_EQ(r->nvme[0].pci.nup, 1);
	REQUIRE_EQ(r->npairs, 1);
	const struct gpunvme_doctor_pair *p = &r->pairs[0];
	CHECK_STR(p->path_kind, "root-complex");
	CHECK_STR(p->common, "pci0000:00");
	CHECK_EQ(p->nhops, 4); /* SSD, its root port, the GPU's root port, GPU */
	CHECK(p->link_gbytes > 7.87 && p->link_gbytes < 7.88, "%f", p->link_gbytes);
	CHECK_STR(p->hops[p->narrowest].bdf, "0000:0b:00.0");
	CHECK(!p->acs_redirect);
	CHECK_EQ(p->tier[0].answer, YES);
	CHECK_EQ(p->tier[0].nreasons, 0);
	CHECK(has_note(p, "--probe"));
	CHECK_EQ(p->tier[1].answer, NO);
	CHECK_STR(p->tier[1].route, "dma-buf + kernel module");
	CHECK(has_reason(&p->tier[1], "gpunvme kernel module is not loaded"));
	CHECK(has_reason(&p->tier[1], "BAR1 is 256 MiB"));
	CHECK(has_reason(&p->tier[1], "Resizable BAR"));
	CHECK_EQ(p->tier[2].answer, NO);
	CHECK(has_reason(&p->tier[2], "AMD root complex"));
	CHECK(has_reason(&p->tier[2], "one PCIe switch"));
	CHECK_EQ(gpunvme_doctor_judge(r), 1);
	/* the probes turn Tier 1 into "no" when CUDA refuses the mapping */
	r->probed = true;
	r->probe.bar0[0].run = r->probe.bar0[0].ok = true;
	r->probe.register_io[0][0].run = true;
	snprintf(r->probe.register_io[0][0].text, GPUNVME_DOCTOR_TEXT, "invalid argument");
	CHECK_EQ(gpunvme_doctor_judge(r), 0);
	CHECK_EQ(r->pairs[0].tier[0].answer, NO);
	CHECK(has_reason(&r->pairs[0].tier[0], "cudaHostRegisterIoMemory"));
	CHECK(has_reason(&r->pairs[0].tier[0], "follow_pfn"));
	gpunvme_doctor_free(r);
	cleanup();
	return 0;
}

TEST_CASE(seed004_d3)
{
	struct gpunvme_doctor_report *r = load("seed004-d3");
	REQUIRE(r);
	REQUIRE_EQ(r->npairs, 1);
	/* no power_state attribute: PMCSR says D3hot; no link attributes:
	 * Link Status says 16 GT/s x4 */
	CHECK_STR(r->nvme[0].pci.power_state, "D3hot");
	CHECK(r->nvme[0].pci.link_gts == 16.0 && r->nvme[0].pci.link_width == 4);
	const struct gpunvme_doctor_pair *p = &r->pairs[0];
	CHECK_EQ(p->tier[0].answer, NO);
	CHECK(has_reason(&p->tier[0], "D3hot"));
	CHECK(has_reason(&p->tier[0], "setpci -s 0000:0b:00.0 CAP_PM+4.W=0x0008"));
	CHECK(has_reason(&p->tier[0], "power/control"));
	CHECK_EQ(p->tier[1].answer, NO);
	CHECK(has_reason(&p->tier[1], "everything Tier 1 does"));
	CHECK_EQ(p->tier[2].answer, NO);
	CHECK(has_reason(&p->tier[2], "AMD root complex"));
	CHECK_EQ(gpunvme_doctor_judge(r), 0);
	gpunvme_doctor_free(r);
	cleanup();
	return 0;
}

TEST_CASE(server_switch)
{
	struct gpunvme_doctor_report *r = load("server-switch");
	REQUIRE(r);
	CHECK_EQ(r->sys.iommu, GPUNVME_IOMMU_TRANSLATED);
	CHECK_EQ(r->sys.iommu_groups, 5);
	CHECK_EQ(r->sys.nvidia_open, NO);
	CHECK_STR(r->sys.nvidia_version, "535.129.03");
	CHECK_EQ(r->sys.dmabuf, NO);
	CHECK(r->sys.memlock_known && !r->sys.memlock_unlimited && r->sys.memlock_bytes == 65536);
	CHECK_EQ(r->sys.hugepages_total, 512);
	REQUIRE_EQ(r->ngpu, 1);
	REQUIRE_EQ(r->nnvme, 2);
	CHECK_STR(r->gpu[0].model, "NVIDIA H100 PCIe");
	CHECK_EQ(r->gpu[0].bar1_bytes, 128ull << 30);
	/* the boot disk */
	const struct gpunvme_doctor_nvme *boot = &r->nvme[1];
	CHECK_STR(boot->pci.bdf, "0000:05:00.0");
	CHECK_STR(boot->kname, "nvme0");
	CHECK_STR(boot->model, "SAMSUNG MZVL21T0HCLR-00B00");
	CHECK_EQ(boot->namespaces, 1);
	CHECK_EQ(boot->queues, 8);
	CHECK_EQ(boot->max_transfer_kib, 512);
	CHECK_STR(boot->mounted, "/dev/nvme0n1p2 on /");
	REQUIRE_EQ(r->npairs, 2);

	const struct gpunvme_doctor_pair *p = &r->pairs[0]; /* H100 x PM1733 behind the switch */
	CHECK_STR(p->path_kind, "switch");
	CHECK_STR(p->common, "0000:01:00.0");
	CHECK_EQ(p->nhops, 4); /* SSD, its DSP, the GPU's DSP, GPU */
	CHECK(p->acs_redirect);
	CHECK_STR(p->acs_bridge, "0000:02:10.0");
	CHECK(p->link_gbytes > 7.87 && p->link_gbytes < 7.88, "%f", p->link_gbytes);
	CHECK_EQ(p->tier[0].answer, YES);
	CHECK(has_note(p, "memlock limit is 64 KiB"));
	CHECK_EQ(p->tier[1].answer, NO);
	CHECK(has_reason(&p->tier[1], "gpunvme kernel module is not loaded"));
	CHECK(has_reason(&p->tier[1], "proprietary"));
	CHECK(!has_reason(&p->tier[1], "BAR1"));
	CHECK_EQ(p->tier[2].answer, NO);
	CHECK(has_reason(&p->tier[2], "ACS on bridge 0000:02:10.0"));
	CHECK(has_reason(&p->tier[2], "setpci -s 0000:02:10.0 ECAP_ACS+6.W=0x0000"));

	p = &r->pairs[1]; /* H100 x the mounted boot disk */
	CHECK_STR(p->path_kind, "root-complex");
	CHECK(!p->acs_redirect);
	CHECK_EQ(p->nhops, 6); /* SSD, root port 02.0, root port 01.0, USP, DSP, GPU */
	CHECK_EQ(p->tier[0].answer, NO);
	CHECK(has_reason(&p->tier[0], "in use (/dev/nvme0n1p2 on /)"));
	CHECK_EQ(p->tier[1].answer, NO);
	CHECK_EQ(p->tier[2].answer, NO);
	CHECK(has_reason(&p->tier[2], "depend on the platform"));
	CHECK_EQ(gpunvme_doctor_judge(r), 1);

	/* Tier 2 through the kernel module: the module loaded, dma-buf export
	 * (open driver), the controller behind the switch bound to it */
	r->sys.kmod = YES;
	r->sys.dmabuf = YES;
	snprintf(r->nvme[0].pci.driver, sizeof(r->nvme[0].pci.driver), "gpunvme");
	gpunvme_doctor_judge(r);
	p = &r->pairs[0];
	CHECK_EQ(p->tier[1].answer, YES);
	CHECK(p->tier[1].nreasons == 0, "reason: %s", p->tier[1].nreasons ? p->tier[1].reasons[0].why : "");
	/* bound to vfio-pci instead: the fix is the bind script */
	snprintf(r->nvme[0].pci.driver, sizeof(r->nvme[0].pci.driver), "vfio-pci");
	gpunvme_doctor_judge(r);
	CHECK_EQ(p->tier[1].answer, NO);
	CHECK(has_reason(&p->tier[1], "bound to vfio-pci, not to the gpunvme kernel module"));
	CHECK(has_reason(&p->tier[1], "scripts/kmod-bind.sh 0000:"));
	/* dma-buf not known: unknown, and how to find out */
	snprintf(r->nvme[0].pci.driver, sizeof(r->nvme[0].pci.driver), "gpunvme");
	r->sys.dmabuf = GPUNVME_DOCTOR_UNKNOWN;
	gpunvme_doctor_judge(r);
	CHECK_EQ(p->tier[1].answer, GPUNVME_DOCTOR_UNKNOWN);
	CHECK(has_reason(&p->tier[1], "--probe"));
	gpunvme_doctor_free(r);
	cleanup();
	return 0;
}

/* The controller behind the switch on uio: refused while its IOMMU group
 * translates, fine once the group is identity-mapped (iommu=pt). */
TEST_CASE(uio_and_iommu)
{
	struct gpunvme_doctor_report *r = load("server-switch");
	REQUIRE(r);
	CHECK_STR(r->nvme[0].pci.iommu_type, "DMA");
	gpunvme_doctor_free(r);
	char p[PATH_MAX];
	SNP(p, "%s/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:04:00.0/driver", tmpdir);
	unlink(p);
	REQUIRE(symlink("../../../../bus/pci/drivers/uio_pci_generic", p) == 0);
	REQUIRE_OK(gpunvme_doctor_scan(tmpdir, &r));
	CHECK_STR(r->nvme[0].pci.driver, "uio_pci_generic");
	CHECK_EQ(r->pairs[0].tier[0].answer, NO);
	CHECK(has_reason(&r->pairs[0].tier[0], "the IOMMU translates its DMA"));
	CHECK(has_reason(&r->pairs[0].tier[0], "iommu=pt"));
	gpunvme_doctor_free(r);
	snprintf(fx_root, sizeof(fx_root), "%s", tmpdir);
	putf("sys/kernel/iommu_groups/32/type", "identity\n");
	REQUIRE_OK(gpunvme_doctor_scan(tmpdir, &r));
	CHECK_STR(r->nvme[0].pci.iommu_type, "identity");
	CHECK_EQ(r->pairs[0].tier[0].answer, YES);
	CHECK_EQ(gpunvme_doctor_judge(r), 1);
	gpunvme_doctor_free(r);
	cleanup();
	return 0;
}

/* vfio-pci keeps an unopened device in D3hot (runtime PM) and wakes it
 * when VFIO opens it: not a reason against the user-space driver, only a
 * remark (the QEMU guest's doctor scenario shows the probe working). */
TEST_CASE(vfio_idle_d3)
{
	struct gpunvme_doctor_report *r = load("seed004");
	REQUIRE(r);
	gpunvme_doctor_free(r);
	snprintf(fx_root, sizeof(fx_root), "%s", tmpdir);
	putf("sys/devices/pci0000:00/0000:00:03.4/0000:0b:00.0/power_state", "D3hot\n");
	REQUIRE_OK(gpunvme_doctor_scan(tmpdir, &r));
	CHECK_STR(r->nvme[0].pci.power_state, "D3hot");
	CHECK_EQ(r->nvme_verdict[0].answer, YES);
	CHECK(has_reason(&r->nvme_verdict[0], "runtime power management"));
	CHECK_EQ(r->pairs[0].tier[0].answer, YES);
	CHECK_EQ(gpunvme_doctor_judge(r), 1);
	gpunvme_doctor_free(r);
	cleanup();
	return 0;
}

TEST_CASE(h100_vm)
{
	struct gpunvme_doctor_report *r = load("h100-vm");
	REQUIRE(r);
	CHECK_EQ(r->sys.iommu, GPUNVME_IOMMU_OFF);
	CHECK_EQ(r->sys.dmabuf, YES);
	REQUIRE_EQ(r->ngpu, 1);
	CHECK_EQ(r->nnvme, 0);
	CHECK_EQ(r->npairs, 0);
	CHECK_STR(r->gpu[0].model, "NVIDIA H100 80GB HBM3");
	CHECK_EQ(r->gpu[0].bar1_bytes, 128ull << 30);
	CHECK_STR(r->gpu[0].pci.host_bridge, "pci0000:00");
	CHECK_EQ(r->gpu[0].pci.nup, 0);
	CHECK(r->gpu[0].pci.link_gts == 0 && r->gpu[0].pci.link_width == 0);
	CHECK(r->gpu[0].pci.acs_unknown); /* 256 bytes of config: no extended space */
	CHECK(r->sys.memlock_known && r->sys.memlock_bytes == 8u << 20);
	CHECK_EQ(gpunvme_doctor_judge(r), 0);
	gpunvme_doctor_free(r);
	cleanup();
	return 0;
}

TEST_CASE(no_nvidia)
{
	struct gpunvme_doctor_report *r = load("no-nvidia");
	REQUIRE(r);
	CHECK_EQ(r->sys.iommu, GPUNVME_IOMMU_TRANSLATED);
	CHECK_EQ(r->sys.dmabuf, NO);
	CHECK_STR(r->sys.dmabuf_why, "no NVIDIA driver loaded");
	CHECK_EQ(r->sys.vfio_pci, NO);
	CHECK_EQ(r->ngpu, 0);
	REQUIRE_EQ(r->nnvme, 1);
	CHECK_STR(r->nvme[0].model, "KIOXIA EXCERIA PLUS G3 SSD");
	CHECK_STR(r->nvme[0].mounted, "/dev/nvme0n1p3 on /");
	CHECK_EQ(r->nvme[0].queues, 16);
	CHECK_EQ(r->npairs, 0);
	CHECK_EQ(gpunvme_doctor_judge(r), 0);
	gpunvme_doctor_free(r);
	cleanup();
	return 0;
}

TEST_CASE(broken_files)
{
	struct gpunvme_doctor_report *r = load("broken");
	REQUIRE(r);
	CHECK_EQ(r->sys.nvidia_open, UNK);
	CHECK_STR(r->sys.nvidia_version, "");
	CHECK_EQ(r->sys.dmabuf, UNK);
	CHECK(strstr(r->sys.dmabuf_why, "unknown, because"));
	CHECK(!r->sys.memlock_known);
	CHECK(strstr(r->sys.why, "memlock"));
	REQUIRE_EQ(r->nnvme, 1); /* the dangling 0000:99:00.0 is skipped */
	REQUIRE_EQ(r->ngpu, 1);
	const struct gpunvme_doctor_nvme *n = &r->nvme[0];
	CHECK_EQ(n->pci.cfg_len, 3);
	CHECK(strstr(n->pci.why, "config space only 3 bytes"), "%s", n->pci.why);
	CHECK(n->pci.link_gts == 0 && n->pci.link_width == 0);
	CHECK_EQ(n->pci.iommu_group, -1);
	CHECK_STR(r->gpu[0].pci.power_state, "D0"); /* from PMCSR: the attribute is binary */
	CHECK_EQ(r->gpu[0].bar1_bytes, 0);
	CHECK(strstr(r->gpu[0].pci.why, "BAR1 size unknown"));
	REQUIRE_EQ(r->npairs, 1);
	const struct gpunvme_doctor_pair *p = &r->pairs[0];
	/* the narrowest known hop is the GPU side's; the SSD's link is unknown */
	CHECK(p->hops[0].gbytes == 0);
	CHECK_EQ(p->tier[0].answer, YES);
	CHECK_EQ(p->tier[1].answer, NO);
	CHECK_EQ(p->tier[2].answer, NO);
	gpunvme_doctor_free(r);
	cleanup();
	return 0;
}

TEST_CASE(missing_root)
{
	struct gpunvme_doctor_report *r = NULL;
	REQUIRE_OK(gpunvme_doctor_scan("/nonexistent/doctor-root", &r));
	REQUIRE(r);
	CHECK_EQ(r->nnvme, 0);
	CHECK_EQ(r->ngpu, 0);
	CHECK_EQ(r->sys.iommu, GPUNVME_IOMMU_UNKNOWN);
	CHECK(strstr(r->sys.iommu_why, "unknown, because"));
	CHECK(strstr(r->sys.why, "no PCI bus"));
	gpunvme_doctor_free(r);
	char longroot[400];
	memset(longroot, 'a', sizeof(longroot) - 1);
	longroot[sizeof(longroot) - 1] = '\0';
	CHECK_EQ(gpunvme_doctor_scan(longroot, &r), -ENAMETOOLONG);
	CHECK_LAST_ERROR("too long");
	return 0;
}

/* Every text field terminated inside its array, every "no" explained. */
static int invariants(const struct gpunvme_doctor_report *r)
{
	for (int k = 0; k < r->npairs; k++) {
		const struct gpunvme_doctor_pair *p = &r->pairs[k];
		REQUIRE(p->gpu >= 0 && p->gpu < r->ngpu && p->nvme >= 0 && p->nvme < r->nnvme);
		REQUIRE(p->nhops >= 0 && p->nhops <= GPUNVME_DOCTOR_MAX_HOPS);
		REQUIRE(p->narrowest >= -1 && p->narrowest < p->nhops);
		for (int t = 0; t < 3; t++) {
			const struct gpunvme_doctor_verdict *v = &p->tier[t];
			REQUIRE(v->answer == YES || v->answer == NO || v->answer == UNK);
			REQUIRE(v->answer == YES || v->nreasons > 0, "tier %d %s without a reason", t + 1,
				gpunvme_doctor_answer_str(v->answer));
			for (int i = 0; i < v->nreasons; i++)
				REQUIRE(strnlen(v->reasons[i].why, GPUNVME_DOCTOR_TEXT) < GPUNVME_DOCTOR_TEXT &&
					v->reasons[i].why[0]);
		}
	}
	for (int i = 0; i < r->nnvme; i++)
		REQUIRE(strnlen(r->nvme[i].pci.why, GPUNVME_DOCTOR_TEXT) < GPUNVME_DOCTOR_TEXT);
	return 0;
}

/* Random damage to the files the doctor reads: random bytes of random
 * length, empty files, dangling links, removal. Scan and judge must never
 * crash (ASan/UBSan watch) and keep the invariants. */
TEST_CASE(fuzz_files)
{
	static const char *victims[] = {
		"sys/devices/pci0000:00/0000:00:01.0/config",
		"sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/config",
		"sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/config",
		"sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:04:00.0/config",
		"sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0/config",
		"sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0/resource",
		"sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0/class",
		"sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0/vendor",
		"sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:04:00.0/current_link_speed",
		"sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:04:00.0/power_state",
		"sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:04:00.0/driver",
		"sys/devices/pci0000:00/0000:00:02.0/0000:05:00.0/nvme/nvme0/model",
		"sys/devices/pci0000:00/0000:00:02.0/0000:05:00.0/nvme/nvme0/nvme0n1/queue/max_hw_sectors_kb",
		"sys/bus/pci/devices/0000:04:00.0",
		"proc/driver/nvidia/version",
		"proc/mounts",
		"proc/cmdline",
		"doctor-extra.txt",
		"proc/driver/nvidia/gpus/0000:03:00.0/information",
	};
	const int nv = (int)(sizeof(victims) / sizeof(victims[0]));
	unsigned seed = 12345;
	struct gpunvme_doctor_report *r = NULL;
	static uint8_t junk[6000];
	for (int it = 0; it < 240; it++) {
		if (it % 40 == 0) {
			if (r)
				gpunvme_doctor_free(r);
			r = load("server-switch");
			REQUIRE(r);
		}
		for (int k = 0; k < 3; k++) {
			const char *v = victims[rand_r(&seed) % (unsigned)nv];
			char p[PATH_MAX];
			SNP(p, "%s/%s", tmpdir, v);
			int what = rand_r(&seed) % 5;
			size_t len = (size_t)(rand_r(&seed) % (int)sizeof(junk));
			for (size_t i = 0; i < len; i++)
				junk[i] = (uint8_t)rand_r(&seed);
			if (what == 0 || what == 1) {
				unlink(p);
				put(v, junk, what == 0 ? len : len % 8);
			} else if (what == 2) {
				unlink(p);
				link_to(v, "../../dangling/nowhere");
			} else if (what == 3) {
				unlink(p);
			} else {
				/* plausible but wrong text */
				unlink(p);
				putf(v, "%d\n", (int)rand_r(&seed) - RAND_MAX / 2);
			}
		}
		struct gpunvme_doctor_report *s = NULL;
		REQUIRE_OK(gpunvme_doctor_scan(tmpdir, &s));
		int rc = invariants(s);
		gpunvme_doctor_free(s);
		if (rc) {
			gpunvme_doctor_free(r);
			return 1;
		}
	}
	gpunvme_doctor_free(r);
	cleanup();
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "mkfixture")) {
		if (build(argv[2], argv[3])) {
			fprintf(stderr, "test_doctor: no fixture '%s'; the fixtures are:", argv[2]);
			for (size_t i = 0; i < sizeof(fixtures) / sizeof(fixtures[0]); i++)
				fprintf(stderr, " %s", fixtures[i].name);
			fputc('\n', stderr);
			return 2;
		}
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "trace")) {
		/* every path a scan of ROOT touches, one per line */
		struct gpunvme_doctor_report *r;
		gpunvme_doctor_set_trace(stdout);
		int rc = gpunvme_doctor_scan(argv[2], &r);
		gpunvme_doctor_set_trace(NULL);
		if (rc)
			return 1;
		gpunvme_doctor_free(r);
		return 0;
	}
	return check_main(argc, argv);
}
