/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Finding NVMe controllers on the PCI bus, from sysfs: what `gpunvme list`
 * shows, and what a program needs to choose the URI for gpunvme_open()
 * (vfio:BDF when the function is bound to vfio-pci, uio:BDF when bound to
 * uio_pci_generic). Reads sysfs only: touches no device, needs no privilege.
 *
 * A BDF here is the name sysfs gives the function: "DDDD:BB:DD.F", lower
 * case. Every function returns 0 (or a count) or -errno and, unlike the rest
 * of the API, leaves gpunvme_last_error() alone: discovery failing is often
 * no error at all (no PCI bus in a container), and the caller knows what the
 * user asked for, so it writes the message that names the fix.
 */
#ifndef GPUNVME_PCI_H
#define GPUNVME_PCI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPUNVME_PCI_CLASS_NVME 0x010802u /* mass storage, NVM, NVMe I/O */

/* Read `root` instead of "/sys" from now on (tests build a fake tree; the
 * CLI takes it from GPUNVME_SYSFS); NULL restores "/sys". Process-wide and
 * not thread-safe: call it before any other function here or gpunvme_open. */
void gpunvme_pci_set_sysfs_root(const char *root);
/* The root in use, "/sys" unless set. */
const char *gpunvme_pci_sysfs_root(void);

/* The URI scheme that opens a function bound to `driver` directly (vfio
 * for vfio-pci, uio for uio_pci_generic), NULL for any other driver. */
const char *gpunvme_pci_uri_scheme(const char *driver);

/* One-line text attribute of a function (<root>/bus/pci/devices/BDF/ATTR,
 * e.g. "max_link_speed"), trailing whitespace removed, truncated to len - 1
 * bytes. -ENOENT when the device or the attribute does not exist, -EINVAL
 * when len is 0, -ENAMETOOLONG for an over-long path, else open/read's
 * -errno. */
int gpunvme_pci_read_attr(const char *bdf, const char *attr, char *buf, size_t len);

/* A hexadecimal attribute such as "class", "vendor", "device" ("0x" prefix
 * optional). Errors as gpunvme_pci_read_attr, and -EINVAL when the text is
 * not a hexadecimal number. */
int gpunvme_pci_read_hex(const char *bdf, const char *attr, uint64_t *val);

struct gpunvme_pci_info {
	char bdf[13];
	uint16_t vendor, device;
	uint32_t class_code;     /* 24 bit: base, sub, prog-if */
	char driver[64];         /* "" when none */
	int iommu_group;         /* -1 when none */
	char link_speed[32];     /* "8.0 GT/s PCIe", "" when unknown */
	int link_width;          /* lanes, 0 when unknown */
	int numa_node;           /* -1 when none or unknown */
};

/* What sysfs says about one function. An attribute it cannot read leaves
 * its field at the "unknown" value above, so a partial answer is still 0.
 * -ENODEV when the device does not exist. */
int gpunvme_pci_info(const char *bdf, struct gpunvme_pci_info *info);

/* Every function of class NVMe (GPUNVME_PCI_CLASS_NVME), sorted by BDF,
 * whatever driver it is bound to. Returns the number found, which may
 * exceed max (only max are stored: call again with a larger array), or
 * the -errno of opening <root>/bus/pci/devices (-ENOENT where sysfs has no
 * PCI bus, as in many containers: report "no controllers", not a failure). */
int gpunvme_pci_list_nvme(struct gpunvme_pci_info *out, int max);

#ifdef __cplusplus
}
#endif

#endif /* GPUNVME_PCI_H */
