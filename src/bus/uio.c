/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The UIO bus: a controller bound to uio_pci_generic, or to no driver at
 * all. BAR0 is the sysfs resource0 file, config space the sysfs config
 * file, and DMA memory is 2 MiB hugepages whose physical addresses come
 * from /proc/self/pagemap. Nothing translates the controller's addresses,
 * so this bus refuses to run when an IOMMU translates for the device (the
 * controller would DMA to the wrong place, or fault) and nothing protects
 * the rest of memory from a controller given a bad address: use vfio:
 * wherever an IOMMU exists.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bus/bus.h"
#include "bus/pci.h"

#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#endif

#define HP GPUNVME_HUGEPAGE_SIZE

/* ---- physical-address DMA memory ------------------------------------------ */

static long read_long(const char *path)
{
	char buf[32];
	long v = -1;
	FILE *f = fopen(path, "re");

	if (!f)
		return -1;
	if (fgets(buf, sizeof(buf), f))
		v = strtol(buf, NULL, 10);
	fclose(f);
	return v;
}

static int no_hugepages(const char *who, size_t len)
{
	long total = read_long("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages");
	long free_ = read_long("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages");
	size_t need = len / HP;

	if (total <= 0)
		return gpunvme_set_error(-ENOMEM,
					 "%s: no 2 MiB hugepages reserved (need %zu for %zu MiB of DMA memory): "
					 "run scripts/hugepages.sh %zu",
					 who, need, len >> 20, need + 64);
	return gpunvme_set_error(-ENOMEM,
				 "%s: not enough free 2 MiB hugepages (need %zu, %ld of %ld free): "
				 "run scripts/hugepages.sh %zu",
				 who, need, free_, total, (size_t)total + need);
}

int gpunvme_physmem_alloc(const char *who, size_t len, struct gpunvme_physmem **out)
{
	struct gpunvme_physmem *m;
	size_t n;
	void *va;
	int fd, rc = 0;

	if (!len)
		return gpunvme_set_error(-EINVAL, "%s: DMA allocation of 0 bytes", who);
	len = (len + HP - 1) & ~(size_t)(HP - 1);
	n = len / HP;
	m = calloc(1, sizeof(*m) + n * sizeof(m->pa[0]));
	if (!m)
		return gpunvme_set_error(-ENOMEM, "%s: out of memory", who);
	/* MAP_HUGETLB reserves the pages at mmap time, so a shortage fails
	 * here rather than with SIGBUS at first touch; MAP_POPULATE makes
	 * the physical pages exist before pagemap is read. */
	va = mmap(NULL, len, PROT_READ | PROT_WRITE,
		  MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_HUGE_2MB | MAP_POPULATE, -1, 0);
	if (va == MAP_FAILED) {
		free(m);
		return no_hugepages(who, len);
	}
	/* A child of fork() must not share (and copy-on-write) pages the
	 * controller writes to. */
	madvise(va, len, MADV_DONTFORK);
	if (mlock(va, len)) {
		struct rlimit rl = {0};

		rc = -errno;
		getrlimit(RLIMIT_MEMLOCK, &rl);
		munmap(va, len);
		free(m);
		return gpunvme_set_error(rc,
					 "%s: cannot lock %zu MiB of DMA memory (ulimit -l is %llu KiB): "
					 "raise the memlock limit or run as root",
					 who, len >> 20,
					 rl.rlim_cur == RLIM_INFINITY ? 0ULL : (unsigned long long)rl.rlim_cur >> 10);
	}
	fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = gpunvme_set_error(-errno, "%s: cannot open /proc/self/pagemap: %s", who, strerror(errno));
		goto fail;
	}
	for (size_t i = 0; i < n; i++) {
		uintptr_t page = (uintptr_t)va + i * HP;
		uint64_t ent, pfn;

		*(volatile uint8_t *)page = 0; /* present, whatever MAP_POPULATE did */
		if (pread(fd, &ent, sizeof(ent), (off_t)(page / 4096 * 8)) != (ssize_t)sizeof(ent)) {
			rc = gpunvme_set_error(-EIO, "%s: cannot read /proc/self/pagemap", who);
			break;
		}
		pfn = ent & ((1ULL << 55) - 1);
		if (!(ent >> 63 & 1) || pfn == 0) {
			/* The kernel zeroes PFNs for readers without
			 * CAP_SYS_ADMIN (since 4.2), so a 0 means "not
			 * allowed", not "page at address 0". */
			rc = gpunvme_set_error(-EPERM,
					       "%s: /proc/self/pagemap hides physical addresses: "
					       "uio DMA needs CAP_SYS_ADMIN, run as root",
					       who);
			break;
		}
		m->pa[i] = pfn * 4096;
		if (m->pa[i] & (HP - 1)) {
			rc = gpunvme_set_error(-EFAULT,
					       "%s: hugepage at %p is not 2 MiB aligned physically (0x%" PRIx64
					       "): is the default hugepage size 2 MiB? see /proc/meminfo",
					       who, (void *)page, m->pa[i]);
			break;
		}
	}
	close(fd);
	if (rc)
		goto fail;
	memset(va, 0, len);
	m->va = va;
	m->len = len;
	m->npages = n;
	*out = m;
	return 0;
fail:
	munlock(va, len);
	munmap(va, len);
	free(m);
	return rc;
}

void gpunvme_physmem_free(struct gpunvme_physmem *m)
{
	if (!m)
		return;
	munlock(m->va, m->len);
	munmap(m->va, m->len);
	free(m);
}

uint64_t gpunvme_physmem_iova(const struct gpunvme_physmem *m, size_t off)
{
	if (off >= m->len)
		return 0;
	return m->pa[off / HP] + (off & (HP - 1));
}

/* ---- the bus ---------------------------------------------------------------- */

struct uio_priv {
	int cfg_fd;
	int bar_fd;
	char who[80];   /* "uio:0000:01:00.0" for messages */
};

static void uio_close(struct gpunvme_bus *b);

/* Refuse when an IOMMU translates this device's DMA: physical addresses
 * from pagemap would then be meaningless to the controller. */
static int check_iommu(const char *who, const char *bdf, const struct gpunvme_opts *opts)
{
	char type[32];
	int g = gpunvme_pci_iommu_group(bdf), rc;

	if (g == -ENOENT)
		return 0; /* no IOMMU for this device: bus address = physical */
	if (g < 0)
		return gpunvme_set_error(g, "%s: cannot read the IOMMU group: %s", who, strerror(-g));
	rc = gpunvme_pci_iommu_group_type(g, type, sizeof(type));
	if (!rc && strcmp(type, "identity") == 0)
		return 0; /* passthrough domain: IOVA = physical */
	if (opts && opts->unsafe_noiommu)
		return 0;
	if (rc)
		return gpunvme_set_error(-EPERM,
					 "%s: the device is in IOMMU group %d and this kernel does not say whether "
					 "the IOMMU translates (no /sys/kernel/iommu_groups/%d/type): use vfio:%s, or "
					 "boot with iommu=pt, or set unsafe_noiommu if you know it passes through",
					 who, g, g, bdf);
	return gpunvme_set_error(-EPERM,
				 "%s: the IOMMU translates DMA for this device (group %d, type %s), so physical "
				 "addresses would be wrong: use vfio:%s, or boot with iommu=pt (passthrough), "
				 "or set unsafe_noiommu to skip this check",
				 who, g, type, bdf);
}

static int uio_open(struct gpunvme_bus *b, const char *addr, const struct gpunvme_opts *opts)
{
	char bdf[13], drv[64], path[PATH_MAX], en[8];
	const char *root = gpunvme_pci_sysfs_root();
	struct uio_priv *p;
	struct stat st;
	void *bar;
	int rc;

	if (gpunvme_pci_parse_bdf(addr, bdf))
		return gpunvme_set_error(-EINVAL,
					 "uio:%s: not a PCI address: expected uio:DDDD:BB:DD.F, e.g. uio:0000:01:00.0 "
					 "(lspci -D -nn | grep -i nvme)",
					 addr);
	p = calloc(1, sizeof(*p));
	if (!p)
		return gpunvme_set_error(-ENOMEM, "uio:%s: out of memory", bdf);
	p->cfg_fd = p->bar_fd = -1;
	snprintf(p->who, sizeof(p->who), "uio:%s", bdf);
	b->priv = p;
	snprintf(b->addr, sizeof(b->addr), "%s", bdf);

	rc = gpunvme_pci_driver(bdf, drv, sizeof(drv));
	if (rc == -ENODEV) {
		gpunvme_set_error(rc,
				  "%s: no such PCI device (%s/bus/pci/devices/%s is missing): "
				  "find the address with lspci -D -nn | grep -i nvme",
				  p->who, root, bdf);
		goto fail;
	}
	if (rc) {
		gpunvme_set_error(rc, "%s: cannot read the bound driver: %s", p->who, strerror(-rc));
		goto fail;
	}
	if (strcmp(drv, "vfio-pci") == 0) {
		rc = gpunvme_set_error(-EBUSY, "%s: bound to vfio-pci: open it as vfio:%s instead (IOMMU-protected)",
				       p->who, bdf);
		goto fail;
	}
	if (drv[0] && strcmp(drv, "uio_pci_generic") != 0) {
		/* Two drivers on one controller corrupt each other's queues
		 * (and the kernel's file systems on it). */
		rc = gpunvme_set_error(-EBUSY,
				       "%s: bound to %s, not uio_pci_generic: unbind it first "
				       "(echo %s | sudo tee %s/bus/pci/devices/%s/driver/unbind), "
				       "after unmounting anything on it",
				       p->who, drv, bdf, root, bdf);
		goto fail;
	}
	rc = check_iommu(p->who, bdf, opts);
	if (rc)
		goto fail;

	snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/config", root, bdf);
	p->cfg_fd = open(path, O_RDWR | O_CLOEXEC);
	if (p->cfg_fd < 0) {
		rc = -errno;
		gpunvme_set_error(rc, "%s: cannot open %s: %s%s", p->who, path, strerror(-rc),
				  rc == -EACCES || rc == -EPERM ? ": uio needs root" : "");
		goto fail;
	}
	/* With no driver bound the kernel may never have enabled the device
	 * (power state, BAR decoding); the sysfs enable attribute does it. */
	if (!drv[0] && !gpunvme_pci_read_attr(bdf, "enable", en, sizeof(en)) && strcmp(en, "0") == 0) {
		int fd;

		snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/enable", root, bdf);
		fd = open(path, O_WRONLY | O_CLOEXEC);
		if (fd >= 0) {
			if (write(fd, "1", 1) != 1) {
				/* enable_master below reports a dead device */
			}
			close(fd);
		}
	}

	snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/resource0", root, bdf);
	p->bar_fd = open(path, O_RDWR | O_SYNC | O_CLOEXEC);
	if (p->bar_fd < 0) {
		rc = -errno;
		gpunvme_set_error(rc, "%s: cannot open BAR0 (%s): %s%s", p->who, path, strerror(-rc),
				  rc == -EACCES || rc == -EPERM ? ": uio needs root" : "");
		goto fail;
	}
	if (fstat(p->bar_fd, &st) || st.st_size < 0x2000) {
		rc = gpunvme_set_error(-ENODEV, "%s: BAR0 is %lld bytes, too small for an NVMe controller: "
				       "is this an NVMe controller (class 010802)?",
				       p->who, (long long)st.st_size);
		goto fail;
	}
	bar = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, p->bar_fd, 0);
	if (bar == MAP_FAILED) {
		rc = -errno;
		gpunvme_set_error(rc, "%s: cannot mmap BAR0 (%s): %s%s", p->who, path, strerror(-rc),
				  rc == -EPERM ? ": kernel lockdown (Secure Boot) forbids it; use vfio:" : "");
		goto fail;
	}
	b->bar0 = bar;
	b->bar0_len = (size_t)st.st_size;

	rc = gpunvme_pci_enable_master_fd(p->cfg_fd, 0);
	if (rc) {
		gpunvme_set_error(rc, "%s: cannot enable bus mastering in config space: %s%s", p->who,
				  strerror(-rc), rc == -ENODEV ? " (device reads all ones: removed or powered off)" : "");
		goto fail;
	}
	return 0;
fail:
	uio_close(b);
	return rc;
}

static void uio_close(struct gpunvme_bus *b)
{
	struct uio_priv *p = b->priv;

	if (b->bar0)
		munmap((void *)b->bar0, b->bar0_len);
	b->bar0 = NULL;
	b->bar0_len = 0;
	if (!p)
		return;
	if (p->cfg_fd >= 0) {
		uint16_t cmd;

		/* No IOMMU stands between the controller and memory: stop
		 * bus mastering so nothing can DMA into the hugepages once
		 * they go back to the kernel. */
		if (pread(p->cfg_fd, &cmd, 2, 4) == 2 && cmd != 0xffff && (cmd & 4)) {
			cmd &= (uint16_t)~4u;
			if (pwrite(p->cfg_fd, &cmd, 2, 4) != 2) {
				/* nothing more to do while closing */
			}
		}
		close(p->cfg_fd);
	}
	if (p->bar_fd >= 0)
		close(p->bar_fd);
	free(p);
	b->priv = NULL;
}

static int uio_dma_alloc(struct gpunvme_bus *b, size_t len, void **va, void **handle)
{
	struct uio_priv *p = b->priv;
	struct gpunvme_physmem *m;
	int rc = gpunvme_physmem_alloc(p->who, len, &m);

	if (rc)
		return rc;
	*va = m->va;
	*handle = m;
	return 0;
}

static void uio_dma_free(struct gpunvme_bus *b, void *va, size_t len, void *handle)
{
	(void)b;
	(void)va;
	(void)len;
	gpunvme_physmem_free(handle);
}

static uint64_t uio_iova_of(struct gpunvme_bus *b, void *handle, size_t off)
{
	(void)b;
	return gpunvme_physmem_iova(handle, off);
}

static size_t uio_contig(struct gpunvme_bus *b, void *handle)
{
	(void)b;
	(void)handle;
	return HP;
}

static int uio_set_master(struct gpunvme_bus *b, bool on)
{
	struct uio_priv *p = b->priv;
	return gpunvme_pci_set_master_fd(p->cfg_fd, 0, on);
}

const char gpunvme_bus_uio_module[] = "uio_pci_generic";

const struct gpunvme_bus_ops gpunvme_bus_uio = {
	.name = "uio",
	/* no bus addresses for GPU pages: the GPU path is Tier 1 */
	.caps = GPUNVME_CAP_GPU_QUEUES | GPUNVME_CAP_DOORBELL_MMIO | GPUNVME_CAP_DEEP_QUEUES,
	.open = uio_open,
	.close = uio_close,
	.dma_alloc = uio_dma_alloc,
	.dma_free = uio_dma_free,
	.iova_of = uio_iova_of,
	.contig = uio_contig,
	.set_master = uio_set_master,
};
