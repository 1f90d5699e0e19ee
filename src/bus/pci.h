/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Internal PCI helpers (src/bus/pci.c): the sysfs look-ups the VFIO and UIO
 * buses need beyond the public discovery API (include/gpunvme/pci.h: device
 * info, NVMe enumeration, attributes, the sysfs root), and the
 * physical-address DMA memory (2 MiB hugepages + /proc/self/pagemap,
 * src/bus/uio.c) that UIO and VFIO no-IOMMU mode both need. Not part of the
 * public API.
 *
 * Every function here returns 0 (or a count) or -errno, and leaves error
 * messages to its caller: the caller knows which URI the user typed, so it
 * can name the fix.
 */
#ifndef GPUNVME_BUS_PCI_H
#define GPUNVME_BUS_PCI_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpunvme/pci.h"

/* 0 when /sys/bus/pci/devices/BDF exists, -ENODEV when not. */
int gpunvme_pci_exists(const char *bdf);

/* IOMMU group number (>= 0); -ENOENT when the device has none (no IOMMU, or
 * the IOMMU is off), -ENODEV when the device does not exist. */
int gpunvme_pci_iommu_group(const char *bdf);

/* /sys/kernel/iommu_groups/N/type ("DMA", "DMA-FQ", "identity", "blocked",
 * "unmanaged"...); -ENOENT when the kernel does not export it (before 5.11). */
int gpunvme_pci_iommu_group_type(int group, char *buf, size_t len);

/* The devices of an IOMMU group, sorted, canonical BDFs. Returns the number
 * in the group (may exceed max; only max are stored). */
int gpunvme_pci_group_devices(int group, char (*bdfs)[13], int max);

/* Enable memory decoding and bus mastering (PCI command register bits 1
 * and 2) through a config-space file descriptor at `cfg_off` (the sysfs
 * config file: 0; a VFIO config region: its offset). */
int gpunvme_pci_enable_master_fd(int fd, uint64_t cfg_off);
/* Bus mastering on or off (PCI Command bit 2); memory space stays on. */
int gpunvme_pci_set_master_fd(int fd, uint64_t cfg_off, bool on);

/* ---- physical-address DMA memory (src/bus/uio.c) ------------------------- */

#define GPUNVME_HUGEPAGE_SIZE (2u << 20)

struct gpunvme_physmem {
	void *va;
	size_t len;           /* multiple of 2 MiB */
	size_t npages;
	uint64_t pa[];        /* bus address of each 2 MiB page */
};

/* Allocate `len` bytes (rounded up to 2 MiB) of locked, zero-filled 2 MiB
 * hugepages and resolve their physical addresses. On failure -errno and a
 * message prefixed with `who` (e.g. "uio:0000:01:00.0"). */
int gpunvme_physmem_alloc(const char *who, size_t len, struct gpunvme_physmem **out);
void gpunvme_physmem_free(struct gpunvme_physmem *m);
uint64_t gpunvme_physmem_iova(const struct gpunvme_physmem *m, size_t off);

#endif
