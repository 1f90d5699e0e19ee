/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The VFIO bus: a controller bound to vfio-pci, behind the IOMMU (type1).
 * BAR0 is mmap'd from the device fd, bus mastering is set through the
 * config region, and DMA memory is mapped into the container's IOMMU
 * domain at IOVAs this file chooses, so every allocation is one contiguous
 * range for the controller however its pages lie physically.
 *
 * VFIO no-IOMMU mode (/dev/vfio/noiommu-N, vfio loaded with
 * enable_unsafe_noiommu_mode=1) is accepted: the administrator opted in to
 * unprotected DMA, so memory comes from hugepages with physical addresses
 * exactly as on the UIO bus.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/vfio.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bus/bus.h"
#include "bus/pci.h"
#include "bus/iova.h"

#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#endif

#define SZ_2M (2ull << 20)
#define SZ_4G (4ull << 30)
/* x86 MSI doorbell window: DMA writes here are interrupts, never memory. */
#define MSI_BASE 0xfee00000ull
#define MSI_LEN (1ull << 20)

struct vfio_priv {
	int container, group, device;
	int noiommu;
	int group_no;
	uint64_t cfg_off;          /* config region offset in the device fd */
	uint64_t iova_align;       /* smallest IOMMU page size */
	void *bar_map;             /* what to munmap: may be larger than BAR0 use */
	size_t bar_map_len;
	pthread_mutex_t lock;      /* the IOVA allocator */
	struct gpunvme_iova iova;
	char who[80];              /* "vfio:0000:01:00.0" for messages */
	char bdf[13];
};

struct vfio_dma {
	void *va;
	size_t len;                /* mapped length (>= requested) */
	uint64_t iova;
	struct gpunvme_physmem *phys; /* no-IOMMU mode */
};

static void vfio_close(struct gpunvme_bus *b);

/* "0000:01:00.1 (xhci_hcd), 0000:01:00.2 (no driver)" for the devices of the
 * group that keep it from being viable. */
static void list_blockers(struct vfio_priv *p, char *out, size_t len)
{
	char bdfs[64][13];
	int n = gpunvme_pci_group_devices(p->group_no, bdfs, 64);
	size_t used = 0;
	int any = 0;

	out[0] = '\0';
	/* First pass: devices bound to a driver VFIO does not accept; if none
	 * are (a bridge driver this kernel rejects), list every other one. */
	for (int pass = 0; pass < 2 && !any; pass++) {
		for (int i = 0; i < n && i < 64; i++) {
			char drv[64] = "";

			if (strcmp(bdfs[i], p->bdf) == 0)
				continue;
			gpunvme_pci_driver(bdfs[i], drv, sizeof(drv));
			if (pass == 0 && (!drv[0] || !strcmp(drv, "vfio-pci") || !strcmp(drv, "pci-stub")))
				continue;
			if (used < len) {
				int w = snprintf(out + used, len - used, "%s%s (%s)", any ? ", " : "", bdfs[i],
						 drv[0] ? drv : "no driver");
				used += w > 0 ? (size_t)w : 0;
			}
			any = 1;
		}
	}
	if (!any)
		snprintf(out, len, "(could not list the group's devices)");
}

static int open_group(struct gpunvme_bus *b, struct vfio_priv *p)
{
	char path[64], noiommu_path[64], blockers[512];
	struct vfio_group_status st = {.argsz = sizeof(st)};
	int rc;

	snprintf(path, sizeof(path), "/dev/vfio/%d", p->group_no);
	snprintf(noiommu_path, sizeof(noiommu_path), "/dev/vfio/noiommu-%d", p->group_no);
	p->group = open(path, O_RDWR | O_CLOEXEC);
	if (p->group < 0 && errno == ENOENT) {
		p->group = open(noiommu_path, O_RDWR | O_CLOEXEC);
		if (p->group >= 0) {
			p->noiommu = 1;
		} else if (errno == ENOENT) {
			return gpunvme_set_error(-ENOENT,
						 "%s: %s does not exist although the device is bound to vfio-pci: "
						 "is udev running? try: sudo modprobe vfio-pci; ls -l /dev/vfio",
						 p->who, path);
		} else {
			snprintf(path, sizeof(path), "%s", noiommu_path);
		}
	}
	if (p->group < 0) {
		rc = -errno;
		if (rc == -EACCES || rc == -EPERM)
			return gpunvme_set_error(rc,
						 "%s: permission denied on %s: run as root, or give it to your user "
						 "(sudo chown $USER %s, or scripts/vfio-bind.sh %s as root with sudo)",
						 p->who, path, path, p->bdf);
		if (rc == -EBUSY)
			return gpunvme_set_error(rc,
						 "%s: IOMMU group %d (%s) is busy: it is already open, in another "
						 "process (another gpunvme, a VM) or earlier in this one",
						 p->who, p->group_no, path);
		return gpunvme_set_error(rc, "%s: cannot open %s: %s", p->who, path, strerror(-rc));
	}
	if (ioctl(p->group, VFIO_GROUP_GET_STATUS, &st)) {
		rc = -errno;
		return gpunvme_set_error(rc, "%s: VFIO_GROUP_GET_STATUS on %s: %s", p->who, path, strerror(-rc));
	}
	if (!(st.flags & VFIO_GROUP_FLAGS_VIABLE)) {
		list_blockers(p, blockers, sizeof(blockers));
		return gpunvme_set_error(-EPERM,
					 "%s: IOMMU group %d is not viable: %s share%s it; bind every device of the "
					 "group to vfio-pci (scripts/vfio-bind.sh BDF; see scripts/iommu-groups.sh) "
					 "or move the SSD to another slot",
					 p->who, p->group_no, blockers, strchr(blockers, ',') ? "" : "s");
	}
	if (ioctl(p->group, VFIO_GROUP_SET_CONTAINER, &p->container)) {
		rc = -errno;
		return gpunvme_set_error(rc, "%s: VFIO_GROUP_SET_CONTAINER: %s", p->who, strerror(-rc));
	}
	(void)b;
	return 0;
}

static int set_iommu(struct vfio_priv *p)
{
	int type, rc;

	if (p->noiommu) {
		if (ioctl(p->container, VFIO_CHECK_EXTENSION, VFIO_NOIOMMU_IOMMU) != 1)
			return gpunvme_set_error(-ENOTSUP,
						 "%s: the VFIO container does not offer no-IOMMU mode: "
						 "load vfio with enable_unsafe_noiommu_mode=1",
						 p->who);
		type = VFIO_NOIOMMU_IOMMU;
	} else if (ioctl(p->container, VFIO_CHECK_EXTENSION, VFIO_TYPE1v2_IOMMU) == 1) {
		type = VFIO_TYPE1v2_IOMMU;
	} else if (ioctl(p->container, VFIO_CHECK_EXTENSION, VFIO_TYPE1_IOMMU) == 1) {
		type = VFIO_TYPE1_IOMMU;
	} else {
		return gpunvme_set_error(-ENOTSUP,
					 "%s: the kernel's VFIO has no type1 IOMMU backend: "
					 "sudo modprobe vfio_iommu_type1",
					 p->who);
	}
	if (ioctl(p->container, VFIO_SET_IOMMU, type)) {
		rc = -errno;
		return gpunvme_set_error(rc, "%s: VFIO_SET_IOMMU(%d): %s%s", p->who, type, strerror(-rc),
					 rc == -EPERM && p->noiommu ? ": no-IOMMU mode needs CAP_SYS_RAWIO (root)"
								    : "");
	}
	return 0;
}

/* Usable IOVA windows from VFIO_IOMMU_GET_INFO; a fixed window when the
 * kernel predates the IOVA range capability (5.4). */
static int setup_iova(struct vfio_priv *p)
{
	struct vfio_iommu_type1_info *info;
	size_t sz = sizeof(*info);
	int rc, have_ranges = 0;

	gpunvme_iova_init(&p->iova);
	p->iova_align = 4096;
	info = calloc(1, sz);
	if (!info)
		return gpunvme_set_error(-ENOMEM, "%s: out of memory", p->who);
	info->argsz = (uint32_t)sz;
	if (ioctl(p->container, VFIO_IOMMU_GET_INFO, info)) {
		rc = -errno;
		free(info);
		return gpunvme_set_error(rc, "%s: VFIO_IOMMU_GET_INFO: %s", p->who, strerror(-rc));
	}
	if (info->argsz > sz) {
		/* The capability chain follows; ask again with room for it. */
		struct vfio_iommu_type1_info *big;

		sz = info->argsz;
		big = realloc(info, sz);
		if (!big) {
			free(info);
			return gpunvme_set_error(-ENOMEM, "%s: out of memory", p->who);
		}
		info = big;
		memset(info, 0, sz);
		info->argsz = (uint32_t)sz;
		if (ioctl(p->container, VFIO_IOMMU_GET_INFO, info)) {
			rc = -errno;
			free(info);
			return gpunvme_set_error(rc, "%s: VFIO_IOMMU_GET_INFO: %s", p->who, strerror(-rc));
		}
	}
	if ((info->flags & VFIO_IOMMU_INFO_PGSIZES) && info->iova_pgsizes)
		p->iova_align = info->iova_pgsizes & -info->iova_pgsizes; /* smallest page size */
	if (p->iova_align < 4096)
		p->iova_align = 4096;
	if ((info->flags & VFIO_IOMMU_INFO_CAPS) && info->cap_offset) {
		uint32_t off = info->cap_offset;

		while (off && off + sizeof(struct vfio_info_cap_header) <= sz) {
			struct vfio_info_cap_header *h = (void *)((char *)info + off);

			if (h->id == VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE) {
				struct vfio_iommu_type1_info_cap_iova_range *r = (void *)h;

				for (uint32_t i = 0; i < r->nr_iovas; i++) {
					if ((char *)&r->iova_ranges[i + 1] > (char *)info + sz)
						break;
					rc = gpunvme_iova_add(&p->iova, r->iova_ranges[i].start, r->iova_ranges[i].end);
					if (rc)
						goto nomem;
					have_ranges = 1;
				}
			}
			if (h->next <= off)
				break; /* a chain only goes forward */
			off = h->next;
		}
	}
	free(info);
	info = NULL;
	if (!have_ranges) {
		/* 39 bits is the narrowest address width of VT-d hardware. */
		rc = gpunvme_iova_add(&p->iova, SZ_4G, (1ull << 39) - 1);
		if (rc)
			goto nomem;
	}
	rc = gpunvme_iova_reserve(&p->iova, MSI_BASE, MSI_LEN);
	if (rc)
		goto nomem;
	/* Start above 4 GiB so 64-bit addressing is exercised from the first
	 * command and nothing lands in the PCI hole; keep the low space only
	 * when the IOMMU offers too little above. */
	{
		uint64_t high = 0;

		for (size_t i = 0; i < p->iova.nfree; i++)
			if (p->iova.free[i].end > SZ_4G)
				high += p->iova.free[i].end -
					(p->iova.free[i].start > SZ_4G ? p->iova.free[i].start : SZ_4G);
		if (high >= (1ull << 30)) {
			rc = gpunvme_iova_reserve(&p->iova, 0, SZ_4G);
			if (rc)
				goto nomem;
		}
	}
	if (!gpunvme_iova_available(&p->iova))
		return gpunvme_set_error(-ENOSPC, "%s: the IOMMU reports no usable IOVA range", p->who);
	return 0;
nomem:
	free(info);
	return gpunvme_set_error(rc, "%s: IOVA allocator set-up: %s", p->who, strerror(-rc));
}

/* BAR0: the whole region when the kernel lets us; otherwise reserve the
 * address range and map the mmap-able (sparse) parts of it in place, so
 * offsets stay those of the BAR. The holes (an MSI-X table the kernel
 * keeps to itself) are never touched by an NVMe driver. */
static int map_bar0(struct gpunvme_bus *b, struct vfio_priv *p)
{
	struct vfio_region_info *ri;
	size_t sz = sizeof(*ri);
	void *m;
	int rc;

	ri = calloc(1, sz);
	if (!ri)
		return gpunvme_set_error(-ENOMEM, "%s: out of memory", p->who);
	ri->argsz = (uint32_t)sz;
	ri->index = VFIO_PCI_BAR0_REGION_INDEX;
	if (ioctl(p->device, VFIO_DEVICE_GET_REGION_INFO, ri)) {
		rc = -errno;
		free(ri);
		return gpunvme_set_error(rc, "%s: VFIO_DEVICE_GET_REGION_INFO(BAR0): %s", p->who, strerror(-rc));
	}
	if (ri->argsz > sz) {
		struct vfio_region_info *big;

		sz = ri->argsz;
		big = realloc(ri, sz);
		if (!big) {
			free(ri);
			return gpunvme_set_error(-ENOMEM, "%s: out of memory", p->who);
		}
		ri = big;
		memset(ri, 0, sz);
		ri->argsz = (uint32_t)sz;
		ri->index = VFIO_PCI_BAR0_REGION_INDEX;
		if (ioctl(p->device, VFIO_DEVICE_GET_REGION_INFO, ri)) {
			rc = -errno;
			free(ri);
			return gpunvme_set_error(rc, "%s: VFIO_DEVICE_GET_REGION_INFO(BAR0): %s", p->who,
						 strerror(-rc));
		}
	}
	if (ri->size < 0x2000) {
		rc = gpunvme_set_error(-ENODEV, "%s: BAR0 is %llu bytes, too small for an NVMe controller: "
				       "is this an NVMe controller (class 010802)?",
				       p->who, (unsigned long long)ri->size);
		free(ri);
		return rc;
	}
	if (!(ri->flags & VFIO_REGION_INFO_FLAG_MMAP)) {
		free(ri);
		return gpunvme_set_error(-ENOTSUP,
					 "%s: vfio-pci does not allow mmap of BAR0 (no VFIO_REGION_INFO_FLAG_MMAP; "
					 "BAR smaller than a page?): this controller cannot be driven from user space",
					 p->who);
	}
	m = mmap(NULL, ri->size, PROT_READ | PROT_WRITE, MAP_SHARED, p->device, (off_t)ri->offset);
	if (m != MAP_FAILED) {
		p->bar_map = m;
		p->bar_map_len = ri->size;
		goto done;
	}
	rc = -errno;
	if ((ri->flags & VFIO_REGION_INFO_FLAG_CAPS) && ri->cap_offset) {
		uint32_t off = ri->cap_offset;

		while (off && off + sizeof(struct vfio_info_cap_header) <= sz) {
			struct vfio_info_cap_header *h = (void *)((char *)ri + off);

			if (h->id == VFIO_REGION_INFO_CAP_SPARSE_MMAP) {
				struct vfio_region_info_cap_sparse_mmap *sp = (void *)h;

				m = mmap(NULL, ri->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
				if (m == MAP_FAILED)
					break;
				p->bar_map = m;
				p->bar_map_len = ri->size;
				for (uint32_t i = 0; i < sp->nr_areas; i++) {
					struct vfio_region_sparse_mmap_area *a = &sp->areas[i];

					if (!a->size || a->offset + a->size > ri->size)
						continue;
					if (mmap((char *)m + a->offset, a->size, PROT_READ | PROT_WRITE,
						 MAP_SHARED | MAP_FIXED, p->device,
						 (off_t)(ri->offset + a->offset)) == MAP_FAILED) {
						rc = -errno;
						goto fail;
					}
					/* Registers and the first doorbells must be reachable. */
					if (a->offset == 0 && a->size >= 0x1008)
						rc = 0;
				}
				if (rc == 0)
					goto done;
				free(ri);
				return gpunvme_set_error(-ENOTSUP,
							 "%s: vfio-pci lets only parts of BAR0 be mmap'd and the "
							 "registers/doorbells are not among them",
							 p->who);
			}
			if (h->next <= off)
				break;
			off = h->next;
		}
	}
fail:
	free(ri);
	return gpunvme_set_error(rc, "%s: cannot mmap BAR0 from the VFIO device: %s", p->who, strerror(-rc));
done:
	b->bar0 = p->bar_map;
	b->bar0_len = ri->size;
	free(ri);
	return 0;
}

static int enable_master(struct vfio_priv *p)
{
	struct vfio_region_info ri = {.argsz = sizeof(ri), .index = VFIO_PCI_CONFIG_REGION_INDEX};
	int rc;

	if (ioctl(p->device, VFIO_DEVICE_GET_REGION_INFO, &ri)) {
		rc = -errno;
		return gpunvme_set_error(rc, "%s: VFIO_DEVICE_GET_REGION_INFO(config): %s", p->who, strerror(-rc));
	}
	p->cfg_off = ri.offset;
	rc = gpunvme_pci_enable_master_fd(p->device, p->cfg_off);
	if (rc)
		return gpunvme_set_error(rc, "%s: cannot enable bus mastering in config space: %s%s", p->who,
					 strerror(-rc),
					 rc == -ENODEV ? " (device reads all ones: removed or powered off)" : "");
	return 0;
}

static int vfio_open(struct gpunvme_bus *b, const char *addr, const struct gpunvme_opts *opts)
{
	char drv[64];
	struct vfio_priv *p;
	int rc, v;

	(void)opts;
	p = calloc(1, sizeof(*p));
	if (!p)
		return gpunvme_set_error(-ENOMEM, "vfio:%s: out of memory", addr);
	p->container = p->group = p->device = -1;
	pthread_mutex_init(&p->lock, NULL);
	gpunvme_iova_init(&p->iova);
	b->priv = p;
	if (gpunvme_pci_parse_bdf(addr, p->bdf)) {
		rc = gpunvme_set_error(-EINVAL,
				       "vfio:%s: not a PCI address: expected vfio:DDDD:BB:DD.F, e.g. "
				       "vfio:0000:01:00.0 (lspci -D -nn | grep -i nvme)",
				       addr);
		goto fail;
	}
	snprintf(p->who, sizeof(p->who), "vfio:%s", p->bdf);
	snprintf(b->addr, sizeof(b->addr), "%s", p->bdf);

	rc = gpunvme_pci_driver(p->bdf, drv, sizeof(drv));
	if (rc == -ENODEV) {
		gpunvme_set_error(rc,
				  "%s: no such PCI device (%s/bus/pci/devices/%s is missing): "
				  "find the address with lspci -D -nn | grep -i nvme",
				  p->who, gpunvme_pci_sysfs_root(), p->bdf);
		goto fail;
	}
	if (rc) {
		gpunvme_set_error(rc, "%s: cannot read the bound driver: %s", p->who, strerror(-rc));
		goto fail;
	}
	if (strcmp(drv, "vfio-pci") != 0) {
		int g = gpunvme_pci_iommu_group(p->bdf);

		if (g == -ENOENT && !drv[0])
			rc = gpunvme_set_error(-ENODEV,
					       "%s: no IOMMU group and no driver: enable the IOMMU (VT-d/AMD-Vi "
					       "in the BIOS, intel_iommu=on or amd_iommu=on on the kernel command "
					       "line), or load vfio with enable_unsafe_noiommu_mode=1, then run "
					       "scripts/vfio-bind.sh %s; or use uio:%s",
					       p->who, p->bdf, p->bdf);
		else
			rc = gpunvme_set_error(-ENODEV, "%s: bound to %s, not vfio-pci: run scripts/vfio-bind.sh %s",
					       p->who, drv[0] ? drv : "no driver", p->bdf);
		goto fail;
	}
	p->group_no = gpunvme_pci_iommu_group(p->bdf);
	if (p->group_no < 0) {
		rc = gpunvme_set_error(-ENODEV,
				       "%s: no IOMMU group: the IOMMU is off: enable VT-d/AMD-Vi in the BIOS and "
				       "boot with intel_iommu=on or amd_iommu=on, or load vfio with "
				       "enable_unsafe_noiommu_mode=1; or use uio:%s",
				       p->who, p->bdf);
		goto fail;
	}

	p->container = open("/dev/vfio/vfio", O_RDWR | O_CLOEXEC);
	if (p->container < 0) {
		rc = -errno;
		gpunvme_set_error(rc, "%s: cannot open /dev/vfio/vfio: %s: %s", p->who, strerror(-rc),
				  rc == -ENOENT ? "sudo modprobe vfio-pci" : "check its permissions (ls -l /dev/vfio)");
		goto fail;
	}
	v = ioctl(p->container, VFIO_GET_API_VERSION);
	if (v != VFIO_API_VERSION) {
		rc = gpunvme_set_error(-ENOTSUP, "%s: VFIO API version %d, expected %d: kernel too old or too new",
				       p->who, v, VFIO_API_VERSION);
		goto fail;
	}
	rc = open_group(b, p);
	if (rc)
		goto fail;
	rc = set_iommu(p);
	if (rc)
		goto fail;
	if (!p->noiommu) {
		rc = setup_iova(p);
		if (rc)
			goto fail;
	}
	p->device = ioctl(p->group, VFIO_GROUP_GET_DEVICE_FD, p->bdf);
	if (p->device < 0) {
		rc = -errno;
		if (rc == -EBUSY)
			gpunvme_set_error(rc, "%s: device busy: another process already has it open", p->who);
		else
			gpunvme_set_error(rc, "%s: VFIO_GROUP_GET_DEVICE_FD: %s%s", p->who, strerror(-rc),
					  rc == -EPERM && p->noiommu ? ": no-IOMMU mode needs CAP_SYS_RAWIO (root)"
								     : "");
		goto fail;
	}
	rc = map_bar0(b, p);
	if (rc)
		goto fail;
	rc = enable_master(p);
	if (rc)
		goto fail;
	return 0;
fail:
	vfio_close(b);
	return rc;
}

static void vfio_close(struct gpunvme_bus *b)
{
	struct vfio_priv *p = b->priv;

	if (!p)
		return;
	if (p->bar_map)
		munmap(p->bar_map, p->bar_map_len);
	b->bar0 = NULL;
	b->bar0_len = 0;
	/* Closing the device lets vfio-pci reset it and drop bus mastering;
	 * closing the container tears down every IOMMU mapping left. */
	if (p->device >= 0)
		close(p->device);
	if (p->group >= 0)
		close(p->group);
	if (p->container >= 0)
		close(p->container);
	gpunvme_iova_fini(&p->iova);
	pthread_mutex_destroy(&p->lock);
	free(p);
	b->priv = NULL;
}

static int map_failed(struct vfio_priv *p, int rc, size_t len)
{
	struct rlimit rl = {0};

	if (rc == -ENOMEM && !getrlimit(RLIMIT_MEMLOCK, &rl) && rl.rlim_cur != RLIM_INFINITY)
		return gpunvme_set_error(rc,
					 "%s: VFIO could not pin %zu KiB of DMA memory: the locked-memory limit "
					 "is %llu KiB (ulimit -l): raise memlock in /etc/security/limits.conf "
					 "(or LimitMEMLOCK= for a service), or run as root",
					 p->who, len >> 10, (unsigned long long)rl.rlim_cur >> 10);
	if (rc == -ENOSPC)
		return gpunvme_set_error(rc,
					 "%s: too many VFIO DMA mappings (vfio_iommu_type1 dma_entry_limit): "
					 "allocate fewer, larger buffers",
					 p->who);
	return gpunvme_set_error(rc, "%s: VFIO_IOMMU_MAP_DMA of %zu KiB: %s", p->who, len >> 10, strerror(-rc));
}

static int vfio_dma_alloc(struct gpunvme_bus *b, size_t len, void **va, void **handle)
{
	struct vfio_priv *p = b->priv;
	struct vfio_iommu_type1_dma_map map = {.argsz = sizeof(map)};
	struct vfio_dma *d;
	uint64_t align;
	void *m = MAP_FAILED;
	int rc;

	if (!len)
		return gpunvme_set_error(-EINVAL, "%s: DMA allocation of 0 bytes", p->who);
	d = calloc(1, sizeof(*d));
	if (!d)
		return gpunvme_set_error(-ENOMEM, "%s: out of memory", p->who);
	if (p->noiommu) {
		rc = gpunvme_physmem_alloc(p->who, len, &d->phys);
		if (rc) {
			free(d);
			return rc;
		}
		d->va = d->phys->va;
		d->len = d->phys->len;
		*va = d->va;
		*handle = d;
		return 0;
	}
	d->len = (len + 4095) & ~(size_t)4095;
	/* Hugepages for 2 MiB and more: fewer IOTLB entries and IOMMU
	 * superpages when the IOVA is 2 MiB aligned too. Smaller buffers
	 * (queues, PRP lists) take 4 KiB pages rather than waste a hugepage. */
	if (d->len >= SZ_2M) {
		size_t hl = (d->len + SZ_2M - 1) & ~(size_t)(SZ_2M - 1);

		m = mmap(NULL, hl, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_HUGE_2MB | MAP_POPULATE, -1, 0);
		if (m != MAP_FAILED)
			d->len = hl;
	}
	if (m == MAP_FAILED)
		m = mmap(NULL, d->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (m == MAP_FAILED) {
		rc = -errno;
		free(d);
		return gpunvme_set_error(rc, "%s: cannot allocate %zu KiB of DMA memory: %s", p->who, len >> 10,
					 strerror(-rc));
	}
	/* A fork() child must not make these pages copy-on-write: the
	 * parent would then write to copies while the controller keeps the
	 * pinned originals. */
	madvise(m, d->len, MADV_DONTFORK);
	d->va = m;
	align = d->len >= SZ_2M ? SZ_2M : p->iova_align;
	if (align < p->iova_align)
		align = p->iova_align;
	pthread_mutex_lock(&p->lock);
	rc = gpunvme_iova_alloc(&p->iova, d->len, align, &d->iova);
	pthread_mutex_unlock(&p->lock);
	if (rc) {
		munmap(m, d->len);
		free(d);
		return gpunvme_set_error(rc, "%s: out of IOVA space for %zu KiB of DMA memory", p->who, len >> 10);
	}
	/* MAP_DMA pins the pages (they count against RLIMIT_MEMLOCK), so no
	 * mlock is needed: pinned pages neither move nor swap. */
	map.flags = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE;
	map.vaddr = (uintptr_t)m;
	map.iova = d->iova;
	map.size = d->len;
	if (ioctl(p->container, VFIO_IOMMU_MAP_DMA, &map)) {
		rc = -errno;
		pthread_mutex_lock(&p->lock);
		gpunvme_iova_free(&p->iova, d->iova, d->len);
		pthread_mutex_unlock(&p->lock);
		munmap(m, d->len);
		free(d);
		return map_failed(p, rc, len);
	}
	*va = m;
	*handle = d;
	return 0;
}

static void vfio_dma_free(struct gpunvme_bus *b, void *va, size_t len, void *handle)
{
	struct vfio_priv *p = b->priv;
	struct vfio_dma *d = handle;

	(void)va;
	(void)len;
	if (!d)
		return;
	if (d->phys) {
		gpunvme_physmem_free(d->phys);
		free(d);
		return;
	}
	struct vfio_iommu_type1_dma_unmap un = {.argsz = sizeof(un), .iova = d->iova, .size = d->len};

	/* Unmap before freeing: the IOVA must not be reused while the old
	 * mapping could still be hit, nor the pages freed while pinned. If
	 * unmapping fails the IOVA range stays allocated (leaked) on purpose. */
	if (ioctl(p->container, VFIO_IOMMU_UNMAP_DMA, &un) == 0) {
		pthread_mutex_lock(&p->lock);
		gpunvme_iova_free(&p->iova, d->iova, d->len);
		pthread_mutex_unlock(&p->lock);
	}
	munmap(d->va, d->len);
	free(d);
}

static uint64_t vfio_iova_of(struct gpunvme_bus *b, void *handle, size_t off)
{
	struct vfio_dma *d = handle;

	(void)b;
	if (d->phys)
		return gpunvme_physmem_iova(d->phys, off);
	return off < d->len ? d->iova + off : 0;
}

static size_t vfio_contig(struct gpunvme_bus *b, void *handle)
{
	struct vfio_dma *d = handle;

	(void)b;
	return d->phys ? GPUNVME_HUGEPAGE_SIZE : d->len;
}

static int vfio_set_master(struct gpunvme_bus *b, bool on)
{
	struct vfio_priv *p = b->priv;
	return gpunvme_pci_set_master_fd(p->device, p->cfg_off, on);
}

const char gpunvme_bus_vfio_core_module[] = "vfio";
const char gpunvme_bus_vfio_pci_module[] = "vfio_pci";

const struct gpunvme_bus_ops gpunvme_bus_vfio = {
	.name = "vfio",
	/* no bus addresses for GPU pages: the GPU path is Tier 1 */
	.caps = GPUNVME_CAP_GPU_QUEUES | GPUNVME_CAP_DOORBELL_MMIO | GPUNVME_CAP_DEEP_QUEUES,
	.open = vfio_open,
	.close = vfio_close,
	.dma_alloc = vfio_dma_alloc,
	.dma_free = vfio_dma_free,
	.iova_of = vfio_iova_of,
	.contig = vfio_contig,
	.set_master = vfio_set_master,
};
