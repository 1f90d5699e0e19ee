/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/*
 * The interface of the gpunvme kernel module (kmod/): ioctls on
 * /dev/gpunvme/<BDF>, one char device per NVMe controller bound to the
 * module. Shared verbatim by the module and the library's kmod: bus, so it
 * uses only the kernel's UAPI types.
 *
 * The file descriptor owns the controller: one opener at a time; bus
 * mastering is on while it is open; BAR0 is mmap()ed at offset 0. Closing it
 * (or the process dying) stops the controller (clears bus mastering, then
 * CC.EN=0 and a wait for CSTS.RDY=0) before any mapping below is undone,
 * so no DMA lands in memory the kernel has taken back.
 */
#ifndef GPUNVME_KMOD_H
#define GPUNVME_KMOD_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define GPUNVME_KMOD_VERSION 1
#define GPUNVME_KMOD_PAGE 4096u /* the granularity of every address table */

struct gpunvme_kmod_info {
	__u32 version;      /* GPUNVME_KMOD_VERSION */
	__u32 iommu;        /* 1: an IOMMU translates this device's DMA */
	__u64 bar0_len;     /* bytes to mmap at offset 0 */
	__u64 max_map;      /* largest single mapping, bytes */
	__u64 pin_limit;    /* bytes this controller may have pinned, 0 = memlock only */
	__u64 pinned;       /* bytes pinned now */
	__u32 nvp2p;        /* 1: nvidia_p2p_get_pages found at run time */
	__u32 pad;
};

enum gpunvme_kmod_kind {
	GPUNVME_KMOD_USER = 1,   /* addr: user virtual address (4 KiB aligned) */
	GPUNVME_KMOD_DMABUF = 2, /* fd: dma-buf; addr: offset into it */
	GPUNVME_KMOD_PEER = 3,   /* peer: "DDDD:BB:DD.F"; bar; addr: offset in the BAR */
	GPUNVME_KMOD_NVP2P = 4,  /* addr: CUDA device address (64 KiB aligned) */
};

/*
 * Map [addr, addr + len) for the controller's DMA. len is a multiple of
 * 4 KiB. On success `handle` names the mapping and table[0 .. len/4096)
 * holds the bus address of every 4 KiB page, in order. table_entries is the
 * table's capacity in; -ENOSPC when it is too small (table_entries then
 * says how many are needed). USER: -EINVAL when addr is not page aligned,
 * -EFAULT when [addr, addr + len) wraps or is not all user address space
 * (checked before anything is pinned, on every kernel). A MAP that fails
 * leaves nothing mapped, also when only writing the table or the handle
 * back failed (-EFAULT).
 */
struct gpunvme_kmod_map {
	__u32 kind;             /* enum gpunvme_kmod_kind */
	__s32 fd;               /* DMABUF */
	__u64 addr;
	__u64 len;
	__u64 table;            /* user pointer to __u64[table_entries] */
	__u64 table_entries;
	char peer[16];          /* PEER: the other device, "0000:00:05.0" */
	__u32 bar;              /* PEER: BAR index 0..5 */
	__u32 handle;           /* out */
};

#define GPUNVME_KMOD_IOC 'N'
#define GPUNVME_KMOD_INFO _IOR(GPUNVME_KMOD_IOC, 0xc0, struct gpunvme_kmod_info)
#define GPUNVME_KMOD_MAP _IOWR(GPUNVME_KMOD_IOC, 0xc1, struct gpunvme_kmod_map)
/*
 * Undo a mapping. The module cannot see the queues, so while the controller
 * may still process commands (bus mastering on, and CC.EN or CSTS.RDY 1)
 * the mapping is retired rather than released: the handle is gone at once,
 * the pages stay pinned, mapped for the device and counted in `pinned` (and
 * the owner's memlock) until the controller is next seen stopped: the
 * owner's reset (CC.EN=0 and CSTS.RDY=0, seen by the next ioctl),
 * GPUNVME_KMOD_DISABLE, close or unbind. A command still in flight then
 * lands in memory nobody else has been given.
 */
#define GPUNVME_KMOD_UNMAP _IOW(GPUNVME_KMOD_IOC, 0xc2, __u32)
/* Disable the controller now (bus mastering off, CC.EN=0, bounded wait for
 * RDY=0, bus mastering back on), as close does; the mappings stay. For tests and for a driver that resets. */
#define GPUNVME_KMOD_DISABLE _IO(GPUNVME_KMOD_IOC, 0xc3)

#endif
