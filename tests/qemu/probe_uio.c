/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * probe_uio: drive an NVMe controller bound to uio_pci_generic from user
 * space, inside the QEMU test guest (no IOMMU: bus address = physical).
 *
 *   probe_uio BDF [--nsid N] [--write OFF BYTES FILE] [--verify OFF FILE]
 *
 * BAR0 through /sys/bus/pci/devices/BDF/resource0 (mmap), bus mastering
 * through the config space file (command register bit 2), DMA memory from
 * one 2 MiB huge page (physically contiguous) whose physical address comes
 * from /proc/self/pagemap.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "probe_common.h"

#ifndef MAP_HUGETLB
#define MAP_HUGETLB 0x40000
#endif

static void *alloc_hugepage(void)
{
	void *m = mmap(NULL, PROBE_MEM_SIZE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
	if (m != MAP_FAILED)
		return m;
	/* No huge page reserved yet: reserve a few and retry. */
	FILE *f = fopen("/proc/sys/vm/nr_hugepages", "r+");
	if (f) {
		unsigned long n = 0;
		if (fscanf(f, "%lu", &n) == 1 && n < 4) {
			rewind(f);
			fprintf(f, "4\n");
		}
		fclose(f);
	}
	m = mmap(NULL, PROBE_MEM_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE,
		 -1, 0);
	return m == MAP_FAILED ? NULL : m;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2) {
		fprintf(stderr, "usage: %s BDF [--nsid N] [--write OFF BYTES FILE] [--verify OFF FILE]\n", argv[0]);
		return 2;
	}
	const char *bdf = argv[1];
	if (!strncmp(bdf, "uio:", 4))
		bdf += 4;
	char path[PATH_MAX], link[PATH_MAX];

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/driver", bdf);
	ssize_t n = readlink(path, link, sizeof(link) - 1);
	link[n > 0 ? n : 0] = 0;
	const char *drv = strrchr(link, '/') ? strrchr(link, '/') + 1 : "none";
	printf("uio: device %s, driver %s\n", bdf, drv);
	if (strcmp(drv, "uio_pci_generic") != 0) {
		fprintf(stderr, "uio: %s is not bound to uio_pci_generic\n", bdf);
		return 77;
	}

	/* BAR0 */
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/resource0", bdf);
	int bfd = open(path, O_RDWR | O_SYNC);
	struct stat stb;
	if (bfd < 0 || fstat(bfd, &stb)) {
		fprintf(stderr, "uio: %s: %s\n", path, strerror(errno));
		return 1;
	}
	void *bar = mmap(NULL, (size_t)stb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, bfd, 0);
	if (bar == MAP_FAILED) {
		fprintf(stderr, "uio: mmap %s: %s\n", path, strerror(errno));
		return 1;
	}
	printf("uio: BAR0 %lld bytes via %s\n", (long long)stb.st_size, path);

	/* Memory space + bus master enable in the command register. */
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/config", bdf);
	int cfd = open(path, O_RDWR);
	uint16_t cmd = 0;
	if (cfd < 0 || pread(cfd, &cmd, 2, 4) != 2) {
		fprintf(stderr, "uio: %s: %s\n", path, strerror(errno));
		return 1;
	}
	uint16_t want = cmd | 0x6;
	if (pwrite(cfd, &want, 2, 4) != 2 || pread(cfd, &cmd, 2, 4) != 2 || !(cmd & 0x4)) {
		fprintf(stderr, "uio: cannot enable bus mastering (command 0x%x)\n", cmd);
		return 1;
	}
	printf("uio: PCI command register 0x%04x (bus master on)\n", cmd);

	/* DMA memory: one huge page, physically contiguous. */
	uint8_t *mem = alloc_hugepage();
	if (!mem) {
		fprintf(stderr, "uio: no 2 MiB huge page (set /proc/sys/vm/nr_hugepages): %s\n", strerror(errno));
		return 1;
	}
	if (mlock(mem, PROBE_MEM_SIZE))
		fprintf(stderr, "uio: mlock: %s\n", strerror(errno));
	memset(mem, 0, PROBE_MEM_SIZE);
	uint64_t pa = probe_virt_to_phys(mem);
	if (!pa) {
		fprintf(stderr, "uio: no physical address from /proc/self/pagemap (need CAP_SYS_ADMIN)\n");
		return 1;
	}
	for (uint32_t off = 0; off < PROBE_MEM_SIZE; off += 4096) {
		if (probe_virt_to_phys(mem + off) != pa + off) {
			fprintf(stderr, "uio: huge page not physically contiguous at +0x%x\n", off);
			return 1;
		}
	}
	printf("uio: DMA buffer 2 MiB huge page at physical address 0x%" PRIx64 "\n", pa);

	struct probe p = { .name = "uio", .bar = bar, .bar_len = (size_t)stb.st_size, .mem = mem, .iova = pa };
	int rc = probe_main(&p, argc - 2, argv + 2, NULL, NULL);

	/* Bus mastering off again. */
	cmd &= (uint16_t)~0x4;
	if (pwrite(cfd, &cmd, 2, 4) != 2)
		rc = 1;
	close(cfd);
	munmap(bar, (size_t)stb.st_size);
	close(bfd);
	munmap(mem, PROBE_MEM_SIZE);
	printf("uio: %s\n", rc == 0 ? "PASS" : rc == 77 ? "SKIP" : "FAIL");
	return rc;
}
