/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * PCI helpers without hardware: BDF parsing, sysfs look-ups against a fake
 * tree (driver, IOMMU group, enumeration of NVMe controllers), the error
 * messages of the VFIO and UIO buses for the set-up mistakes a user makes,
 * bus mastering through a config-space file, and the IOVA allocator.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness/check.h"
#include "bus/bus.h"
#include "bus/pci.h"
#include "bus/iova.h"
#include "gpunvme/gpunvme.h"

static void check_parse(void)
{
	static const struct {
		const char *in, *out;
	} good[] = {
		{"0000:01:00.0", "0000:01:00.0"}, {"01:00.0", "0000:01:00.0"},
		{"ABCD:EF:1F.7", "abcd:ef:1f.7"}, {"0000:00:1f.7", "0000:00:1f.7"},
		{"ffff:ff:00.1", "ffff:ff:00.1"}, {"3a:1e.5", "0000:3a:1e.5"},
	};
	static const char *const bad[] = {
		"", "0000:01:00.8", "0000:01:20.0", "1:00.0", "0000:01:00", "0000:01:00.0 ",
		" 0000:01:00.0", "00000:01:00.0", "0000-01:00.0", "gggg:01:00.0", "0000:01:00.00",
		"01:0.0", "0000:1:00.0", "0000:01:0g.0", "01:00:0", "0000:01:00.-", "01.00.0",
		"0000:01:00.0\n", "+000:01:00.0", "0x00:01:00.0",
	};
	char out[13];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		memset(out, 'x', sizeof(out));
		CHECK_EQ(gpunvme_pci_parse_bdf(good[i].in, out), 0);
		CHECK_STR(out, good[i].out);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = gpunvme_pci_parse_bdf(bad[i], out);

		if (rc != -EINVAL)
			fprintf(stderr, "accepted bad BDF '%s'\n", bad[i]);
		CHECK_EQ(rc, -EINVAL);
		CHECK_LAST_ERROR("not a PCI address");
	}
	CHECK_EQ(gpunvme_pci_parse_bdf(NULL, out), -EINVAL);
}

/* ---- a fake /sys ------------------------------------------------------------ */

static char root[256];

static void put(const char *rel, const char *text)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	f = fopen(path, "w");
	CHECK(f != NULL);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static void dir(const char *rel)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	CHECK(mkdir(path, 0755) == 0 || errno == EEXIST);
}

static void lnk(const char *target, const char *rel)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	CHECK(symlink(target, path) == 0);
}

/* A device: class, ids, optional driver and IOMMU group. */
static void fake_dev(const char *bdf, const char *cls, const char *drv, int group)
{
	char rel[256], target[256];

	snprintf(rel, sizeof(rel), "bus/pci/devices/%s", bdf);
	dir(rel);
	snprintf(rel, sizeof(rel), "bus/pci/devices/%s/class", bdf);
	put(rel, cls);
	snprintf(rel, sizeof(rel), "bus/pci/devices/%s/vendor", bdf);
	put(rel, "0x1b36\n");
	snprintf(rel, sizeof(rel), "bus/pci/devices/%s/device", bdf);
	put(rel, "0x0010\n");
	snprintf(rel, sizeof(rel), "bus/pci/devices/%s/numa_node", bdf);
	put(rel, "-1\n");
	if (drv) {
		snprintf(rel, sizeof(rel), "bus/pci/devices/%s/driver", bdf);
		snprintf(target, sizeof(target), "../../../bus/pci/drivers/%s", drv);
		lnk(target, rel);
	}
	if (group >= 0) {
		snprintf(rel, sizeof(rel), "kernel/iommu_groups/%d", group);
		dir(rel);
		snprintf(rel, sizeof(rel), "kernel/iommu_groups/%d/devices", group);
		dir(rel);
		snprintf(rel, sizeof(rel), "kernel/iommu_groups/%d/devices/%s", group, bdf);
		snprintf(target, sizeof(target), "../../../../bus/pci/devices/%s", bdf);
		lnk(target, rel);
		snprintf(rel, sizeof(rel), "bus/pci/devices/%s/iommu_group", bdf);
		snprintf(target, sizeof(target), "../../../kernel/iommu_groups/%d", group);
		lnk(target, rel);
	}
}

static void build_tree(void)
{
	snprintf(root, sizeof(root), "/tmp/gpunvme-test-pci-XXXXXX");
	CHECK(mkdtemp(root) != NULL);
	dir("bus");
	dir("bus/pci");
	dir("bus/pci/devices");
	dir("kernel");
	dir("kernel/iommu_groups");
	/* Group 7: an NVMe bound to vfio-pci sharing with a USB controller. */
	fake_dev("0000:01:00.0", "0x010802\n", "vfio-pci", 7);
	fake_dev("0000:01:00.1", "0x0c0330\n", "xhci_hcd", 7);
	put("kernel/iommu_groups/7/type", "DMA\n");
	put("bus/pci/devices/0000:01:00.0/current_link_speed", "8.0 GT/s PCIe\n");
	put("bus/pci/devices/0000:01:00.0/current_link_width", "4\n");
	/* No IOMMU, no driver. */
	fake_dev("0000:02:00.0", "0x010802\n", NULL, -1);
	put("bus/pci/devices/0000:02:00.0/current_link_speed", "Unknown\n");
	/* No driver, behind a translating IOMMU. */
	fake_dev("0000:03:00.0", "0x010802\n", NULL, 9);
	put("kernel/iommu_groups/9/type", "DMA-FQ\n");
	/* Kernel nvme driver, passthrough IOMMU. */
	fake_dev("0000:04:00.0", "0x010802\n", "nvme", 11);
	put("kernel/iommu_groups/11/type", "identity\n");
	/* Bound to the gpunvme kernel module (no /dev/gpunvme here). */
	fake_dev("0000:05:00.0", "0x010802\n", "gpunvme", -1);
	/* Not NVMe. */
	fake_dev("0000:00:1f.0", "0x060100\n", NULL, -1);
	gpunvme_pci_set_sysfs_root(root);
}

static void check_sysfs(void)
{
	char drv[64], type[32], bdfs[4][13];
	struct gpunvme_pci_info info[8];
	int n;

	CHECK_EQ(gpunvme_pci_exists("0000:01:00.0"), 0);
	CHECK_EQ(gpunvme_pci_exists("0000:09:00.0"), -ENODEV);
	CHECK_EQ(gpunvme_pci_driver("0000:01:00.0", drv, sizeof(drv)), 0);
	CHECK_STR(drv, "vfio-pci");
	CHECK_EQ(gpunvme_pci_driver("0000:02:00.0", drv, sizeof(drv)), 0);
	CHECK_STR(drv, "");
	CHECK_EQ(gpunvme_pci_driver("0000:09:00.0", drv, sizeof(drv)), -ENODEV);
	CHECK_LAST_ERROR("no PCI device 0000:09:00.0");

	CHECK_EQ(gpunvme_pci_iommu_group("0000:01:00.0"), 7);
	CHECK_EQ(gpunvme_pci_iommu_group("0000:02:00.0"), -ENOENT);
	CHECK_EQ(gpunvme_pci_iommu_group("0000:09:00.0"), -ENODEV);
	CHECK_EQ(gpunvme_pci_iommu_group_type(7, type, sizeof(type)), 0);
	CHECK_STR(type, "DMA");
	CHECK_EQ(gpunvme_pci_iommu_group_type(42, type, sizeof(type)), -ENOENT);

	n = gpunvme_pci_group_devices(7, bdfs, 4);
	CHECK_EQ(n, 2);
	CHECK_STR(bdfs[0], "0000:01:00.0");
	CHECK_STR(bdfs[1], "0000:01:00.1");
	CHECK_EQ(gpunvme_pci_group_devices(7, bdfs, 1), 2); /* count beyond max */

	n = gpunvme_pci_list_nvme(info, 8);
	CHECK_EQ(n, 5);
	CHECK_STR(info[0].bdf, "0000:01:00.0");
	CHECK_EQ(info[0].vendor, 0x1b36);
	CHECK_EQ(info[0].device, 0x0010);
	CHECK_EQ(info[0].class_code, 0x010802);
	CHECK_STR(info[0].driver, "vfio-pci");
	CHECK_EQ(info[0].iommu_group, 7);
	CHECK_STR(info[0].link_speed, "8.0 GT/s PCIe");
	CHECK_EQ(info[0].link_width, 4);
	CHECK_EQ(info[0].numa_node, -1);
	CHECK_STR(info[1].bdf, "0000:02:00.0");
	CHECK_STR(info[1].driver, "");
	CHECK_EQ(info[1].iommu_group, -1);
	CHECK_STR(info[1].link_speed, ""); /* "Unknown" */
	CHECK_EQ(info[1].link_width, 0);
	CHECK_STR(info[3].bdf, "0000:04:00.0");
	CHECK_EQ(gpunvme_pci_list_nvme(info, 1), 5);
}

/* Open a bus on the fake tree: every failure a user can hit before any
 * device file is touched gets its own message. */
static void check_bus_errors(void)
{
	struct gpunvme_opts o;
	struct gpunvme_bus b;

	memset(&o, 0, sizeof(o));
	memset(&b, 0, sizeof(b));
	CHECK_EQ(gpunvme_bus_vfio.open(&b, "0000:09:00.0", &o), -ENODEV);
	CHECK_LAST_ERROR("no such PCI device");
	CHECK_EQ(gpunvme_bus_vfio.open(&b, "nonsense", &o), -EINVAL);
	CHECK_LAST_ERROR("vfio:DDDD:BB:DD.F");
	CHECK_EQ(gpunvme_bus_vfio.open(&b, "0000:04:00.0", &o), -ENODEV);
	CHECK_LAST_ERROR("bound to nvme, not vfio-pci: run scripts/vfio-bind.sh 0000:04:00.0");
	CHECK_EQ(gpunvme_bus_vfio.open(&b, "02:00.0", &o), -ENODEV);
	CHECK_LAST_ERROR("intel_iommu=on");
	CHECK(b.priv == NULL && b.bar0 == NULL);

	CHECK_EQ(gpunvme_bus_uio.open(&b, "0000:01:00.0", &o), -EBUSY);
	CHECK_LAST_ERROR("open it as vfio:0000:01:00.0");
	CHECK_EQ(gpunvme_bus_uio.open(&b, "0000:04:00.0", &o), -EBUSY);
	CHECK_LAST_ERROR("bound to nvme, not uio_pci_generic");
	CHECK_EQ(gpunvme_bus_uio.open(&b, "0000:03:00.0", &o), -EPERM);
	CHECK_LAST_ERROR("iommu=pt");
	/* unsafe_noiommu skips the IOMMU check; the fake tree then lacks
	 * config space. */
	o.unsafe_noiommu = 1;
	CHECK_EQ(gpunvme_bus_uio.open(&b, "0000:03:00.0", &o), -ENOENT);
	CHECK_LAST_ERROR("/config");
	o.unsafe_noiommu = 0;
	/* No IOMMU group: allowed, fails later for the same reason. */
	CHECK_EQ(gpunvme_bus_uio.open(&b, "0000:02:00.0", &o), -ENOENT);
	CHECK_EQ(gpunvme_bus_uio.open(&b, "0000:09:00.0", &o), -ENODEV);
	CHECK_LAST_ERROR("no such PCI device");
	CHECK(b.priv == NULL && b.bar0 == NULL);

	/* kmod: the module's own messages before any ioctl */
	CHECK_EQ(gpunvme_bus_kmod.open(&b, "nonsense", &o), -EINVAL);
	CHECK_LAST_ERROR("kmod:DDDD:BB:DD.F");
	CHECK_EQ(gpunvme_bus_kmod.open(&b, "0000:09:00.0", &o), -ENODEV);
	CHECK_LAST_ERROR("no such PCI device");
	CHECK_EQ(gpunvme_bus_kmod.open(&b, "0000:04:00.0", &o), -ENODEV);
	CHECK_LAST_ERROR("the gpunvme kernel module is not loaded: build it (make -C kmod)");
	dir("module");
	dir("module/gpunvme");
	CHECK_EQ(gpunvme_bus_kmod.open(&b, "0000:04:00.0", &o), -EBUSY);
	CHECK_LAST_ERROR("bound to nvme, not gpunvme: sudo scripts/kmod-bind.sh 0000:04:00.0");
	CHECK_EQ(gpunvme_bus_kmod.open(&b, "0000:02:00.0", &o), -EBUSY);
	CHECK_LAST_ERROR("bound to no driver, not gpunvme");
	CHECK_EQ(gpunvme_bus_kmod.open(&b, "0000:05:00.0", &o), -ENOENT);
	CHECK_LAST_ERROR("cannot open /dev/gpunvme/0000:05:00.0");
	CHECK(b.priv == NULL && b.bar0 == NULL);
	/* pci: goes to the bus of the bound driver */
	CHECK_EQ(gpunvme_bus_open("pci:0000:05:00.0", &o, &b), -ENOENT);
	CHECK_LAST_ERROR("kmod:0000:05:00.0");
	CHECK_EQ(gpunvme_bus_open("kmod:", &o, &b), -EINVAL);
	CHECK_LAST_ERROR("missing PCI address after 'kmod:'");
}

static void check_enable_master(void)
{
	char path[512];
	uint8_t cfg[256] = {0};
	uint16_t cmd;
	int fd;

	snprintf(path, sizeof(path), "%s/config", root);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	cfg[4] = 0x00;
	cfg[5] = 0x04; /* INTx disable, kept */
	CHECK_EQ(pwrite(fd, cfg, sizeof(cfg), 0), sizeof(cfg));
	CHECK_EQ(gpunvme_pci_enable_master_fd(fd, 0), 0);
	CHECK_EQ(pread(fd, &cmd, 2, 4), 2);
	CHECK_EQ(cmd, 0x0406);
	/* A VFIO config region sits at an offset in the device fd. */
	CHECK_EQ(pwrite(fd, cfg, sizeof(cfg), 0x1000), sizeof(cfg));
	CHECK_EQ(gpunvme_pci_enable_master_fd(fd, 0x1000), 0);
	CHECK_EQ(pread(fd, &cmd, 2, 0x1004), 2);
	CHECK_EQ(cmd, 0x0406);
	cmd = 0xffff;
	CHECK_EQ(pwrite(fd, &cmd, 2, 4), 2);
	CHECK_EQ(gpunvme_pci_enable_master_fd(fd, 0), -ENODEV);
	close(fd);
	unlink(path);
}

/* ---- IOVA allocator --------------------------------------------------------- */

static void check_iova_basic(void)
{
	struct gpunvme_iova a;
	uint64_t x, y, z;

	gpunvme_iova_init(&a);
	CHECK_EQ(gpunvme_iova_alloc(&a, 4096, 4096, &x), -ENOSPC);
	/* As the kernel reports ranges for x86: a hole for the MSI window. */
	CHECK_EQ(gpunvme_iova_add(&a, 0, 0xfedfffffull), 0);
	CHECK_EQ(gpunvme_iova_add(&a, 0xfef00000ull, (1ull << 39) - 1), 0);
	CHECK_EQ(a.nfree, 2);
	CHECK_EQ(gpunvme_iova_reserve(&a, 0xfee00000ull, 1 << 20), 0);
	CHECK_EQ(a.nfree, 2);
	CHECK_EQ(gpunvme_iova_reserve(&a, 0, 4ull << 30), 0);
	CHECK_EQ(a.nfree, 1);
	CHECK_EQ(a.free[0].start, 4ull << 30);
	CHECK_EQ(gpunvme_iova_available(&a), (1ull << 39) - (4ull << 30));

	CHECK_EQ(gpunvme_iova_alloc(&a, 4096, 4096, &x), 0);
	CHECK_EQ(x, 4ull << 30);
	CHECK_EQ(gpunvme_iova_alloc(&a, 2 << 20, 2 << 20, &y), 0);
	CHECK_EQ(y, (4ull << 30) + (2 << 20)); /* aligned past the 4 KiB one */
	CHECK_EQ(gpunvme_iova_alloc(&a, 8192, 4096, &z), 0);
	CHECK_EQ(z, (4ull << 30) + 4096); /* first fit in the alignment gap */
	CHECK_EQ(gpunvme_iova_alloc(&a, 4096, 3, &z), -EINVAL);
	CHECK_EQ(gpunvme_iova_alloc(&a, 0, 4096, &z), -EINVAL);
	CHECK_EQ(gpunvme_iova_alloc(&a, 1ull << 40, 4096, &z), -ENOSPC);

	CHECK_EQ(gpunvme_iova_free(&a, y, 2 << 20), 0);
	CHECK_EQ(gpunvme_iova_free(&a, y, 2 << 20), -EINVAL); /* double free */
	CHECK_EQ(gpunvme_iova_free(&a, y + 4096, 4096), -EINVAL);
	CHECK_EQ(gpunvme_iova_free(&a, x, 4096), 0);
	CHECK_EQ(gpunvme_iova_free(&a, (4ull << 30) + 4096, 8192), 0);
	/* Everything coalesced back into one interval. */
	CHECK_EQ(a.nfree, 1);
	CHECK_EQ(gpunvme_iova_available(&a), (1ull << 39) - (4ull << 30));

	/* Overlapping adds merge; a full 64-bit range does not overflow. */
	gpunvme_iova_fini(&a);
	gpunvme_iova_init(&a);
	CHECK_EQ(gpunvme_iova_add(&a, 0x1000, 0x4fff), 0);
	CHECK_EQ(gpunvme_iova_add(&a, 0x3000, 0x8fff), 0);
	CHECK_EQ(gpunvme_iova_add(&a, 0x9000, 0x9fff), 0);
	CHECK_EQ(a.nfree, 1);
	CHECK_EQ(gpunvme_iova_available(&a), 0x9000);
	CHECK_EQ(gpunvme_iova_add(&a, 0x10000, UINT64_MAX), 0);
	CHECK_EQ(gpunvme_iova_alloc(&a, 1ull << 62, 1ull << 62, &x), 0);
	CHECK_EQ(x, 1ull << 62);
	CHECK_EQ(gpunvme_iova_add(&a, 5, 4), -EINVAL);
	gpunvme_iova_fini(&a);
}

/* Random alloc/free against a page bitmap: never an overlap, never
 * outside the windows, and everything comes back. */
static void check_iova_random(void)
{
	enum { PAGES = 4096, SLOTS = 64 };
	static uint8_t used[PAGES];
	struct {
		uint64_t iova, len;
	} slot[SLOTS] = {{0}};
	struct gpunvme_iova a;
	const uint64_t base = 1ull << 32;
	unsigned seed = 12345;
	int bad = 0;

	gpunvme_iova_init(&a);
	gpunvme_iova_add(&a, base, base + PAGES * 4096ull - 1);
	gpunvme_iova_reserve(&a, base + 1000 * 4096ull, 24 * 4096); /* a hole */
	for (int i = 1000; i < 1024; i++)
		used[i] = 2;
	for (int it = 0; it < 20000; it++) {
		int s;

		seed = seed * 1103515245u + 12345u;
		s = (int)((seed >> 16) % SLOTS);
		if (slot[s].len) {
			if (gpunvme_iova_free(&a, slot[s].iova, slot[s].len))
				bad++;
			for (uint64_t p = (slot[s].iova - base) / 4096; p < (slot[s].iova - base + slot[s].len) / 4096; p++)
				used[p] = 0;
			slot[s].len = 0;
		} else {
			uint64_t pages = 1 + (seed >> 8) % 40, align = 4096ull << ((seed >> 4) % 4), x;

			if (gpunvme_iova_alloc(&a, pages * 4096, align, &x))
				continue;
			if (x < base || x + pages * 4096 > base + PAGES * 4096ull || (x & (align - 1)))
				bad++;
			for (uint64_t p = (x - base) / 4096; p < (x - base) / 4096 + pages && p < PAGES; p++) {
				if (used[p])
					bad++;
				used[p] = 1;
			}
			slot[s].iova = x;
			slot[s].len = pages * 4096;
		}
	}
	CHECK_EQ(bad, 0);
	for (int s = 0; s < SLOTS; s++)
		if (slot[s].len)
			CHECK_EQ(gpunvme_iova_free(&a, slot[s].iova, slot[s].len), 0);
	CHECK_EQ(gpunvme_iova_available(&a), (PAGES - 24) * 4096ull);
	CHECK_EQ(a.nfree, 2);
	gpunvme_iova_fini(&a);
}

static void remove_tree(void)
{
	char cmd[600];

	/* Only our own mkdtemp directory. */
	if (strncmp(root, "/tmp/gpunvme-test-pci-", 22) == 0) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", root);
	}
	gpunvme_pci_set_sysfs_root(NULL);
}

int main(void)
{
	check_parse();
	build_tree();
	check_sysfs();
	check_bus_errors();
	check_enable_master();
	remove_tree();
	check_iova_basic();
	check_iova_random();
	return check_finish("test_pci");
}
