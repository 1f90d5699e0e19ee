/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The bus interface: how the driver reaches a controller. A bus gives BAR0
 * as mapped memory and turns host memory into addresses the controller can
 * DMA to. One file per bus: emu.c, vfio.c, uio.c, kmod.c, tcp.c (memory only: a
 * fabrics controller has no BAR, src/nvmf drives it); bus.c picks one by URI.
 * Nothing above this layer knows which bus it talks to.
 */
#ifndef GPUNVME_BUS_H
#define GPUNVME_BUS_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "gpunvme/gpunvme.h"

struct gpunvme_bus;
struct gpunvme_emu;

/*
 * Device (GPU) memory [addr, addr + len) the controller is to DMA to and
 * from. How a bus reaches it is its own business: the emulator moves the
 * bytes itself with the GPU's copy engine (through `engine`, see
 * struct gpunvme_devmem_engine_ops); a bus for real hardware needs the bus
 * addresses of the GPU's pages (the kernel-module bus, from the memory's
 * dma-buf).
 */
struct gpunvme_devmem {
	uint64_t addr;                           /* device virtual address */
	size_t len;
	void *engine;                            /* the bus's engine (attach below), for a bus with one */
	/* The same memory as a dma-buf (CUDA's export), [addr, addr + len) at
	 * dmabuf_off in it: how the kmod: bus reaches it. Without one the kmod:
	 * bus tries NVIDIA's legacy nvidia_p2p pages for addr. */
	int has_dmabuf;
	int dmabuf_fd;
	uint64_t dmabuf_off;
};

/*
 * A device-memory DMA engine: for a bus whose controller does not master
 * the bus into device memory but has the bytes moved for it (the emulator:
 * the GPU's copy engine, src/emu_cuda). The GPU side of such a bus provides
 * it; the GPU data path only calls these hooks, where the bus has them
 * (gpunvme_ctrl_devmem_*, ctrl_gpu.h). Absent (NULL) on every bus whose
 * controller reaches device memory by bus addresses, and in builds without
 * the GPU side.
 */
struct gpunvme_devmem_engine_ops {
	/* An engine for one user (a GPU queue set) in the calling thread's
	 * GPU context: *engine goes into struct gpunvme_devmem's engine of
	 * every range that user maps. 0, or -errno with a message. */
	int (*attach)(struct gpunvme_bus *b, void **engine);
	/* A bounded wait for every copy the engine has queued (a recovery
	 * looks at device state only after it): 0, or -ETIMEDOUT / -EIO with
	 * the reason (gpunvme_set_error). */
	int (*sync)(void *engine);
	/* Free it: streams and all; nothing mapped with it may be used any
	 * more. NULL does nothing. */
	void (*detach)(void *engine);
	/* Pin the host memory behind namespace nsid that the engine copies
	 * from, so that its copies run at full speed. Best effort: *pinned is
	 * NULL when nothing was pinned (kept: a range pinned already, left
	 * alone); else unpin(*pinned) undoes it. */
	void (*pin_backing)(struct gpunvme_bus *b, uint32_t nsid, const void *kept, void **pinned,
			    void (**unpin)(void *p));
	/* The bus mapped device memory [addr, addr + len) for this engine's
	 * copies, in the mapping thread; unmap when no command uses it any
	 * more. An engine that copies from outside the application (the
	 * emulator's DMA process) makes the memory reachable there. Never
	 * fails: memory it cannot reach is copied from the application.
	 * Returns 1 when unmap is to follow, 0 when nothing was mapped. */
	int (*map)(void *engine, uint64_t addr, size_t len);
	void (*unmap)(void *engine, uint64_t addr);
};

struct gpunvme_bus_ops {
	const char *name;
	/* GPUNVME_CAP_*: what a controller behind this bus can do; the
	 * controller takes them at open (gpunvme_ctrl_info's caps). */
	uint32_t caps;
	/* Open the device named by addr (the URI without "scheme:"). On
	 * failure: -errno and a message via gpunvme_set_error(). */
	int (*open)(struct gpunvme_bus *b, const char *addr, const struct gpunvme_opts *opts);
	void (*close)(struct gpunvme_bus *b);
	/*
	 * Memory for DMA, `len` bytes (a multiple of 4 KiB), zero-filled and
	 * locked. The bus decides how: hugepages, IOMMU-mapped pages, ... On
	 * success *va is the host address and iova_of() below translates any
	 * byte of it. -ENOMEM with a message naming the fix (e.g. no
	 * hugepages) on failure.
	 */
	int (*dma_alloc)(struct gpunvme_bus *b, size_t len, void **va, void **handle);
	void (*dma_free)(struct gpunvme_bus *b, void *va, size_t len, void *handle);
	/* Bus address of va + off within an allocation. */
	uint64_t (*iova_of)(struct gpunvme_bus *b, void *handle, size_t off);
	/* Largest chunk of an allocation that is contiguous in bus address
	 * space (e.g. 2 MiB for hugepages under UIO, the whole allocation
	 * behind an IOMMU). */
	size_t (*contig)(struct gpunvme_bus *b, void *handle);
	/*
	 * Device memory as a DMA target: *iova is the bus address of m->addr.
	 * Without device_table below the range is contiguous in bus address
	 * space from there; with it, device_table gives the bus address of
	 * every 4 KiB page (m->addr is then 4 KiB aligned). NULL when the bus
	 * cannot (src/ctrl then says what would make it possible). unmap waits
	 * for commands still using the range, so the memory may be freed
	 * afterwards.
	 */
	int (*map_device)(struct gpunvme_bus *b, const struct gpunvme_devmem *m, uint64_t *iova);
	int (*unmap_device)(struct gpunvme_bus *b, uint64_t iova);
	/* PCI bus mastering off or on (NULL: no such thing, the emulator).
	 * A reset turns it off while the controller is disabled, as Linux's
	 * nvme_dev_disable does: a controller that still works on a command
	 * after CSTS.RDY = 0 cannot DMA it into memory that was given back. */
	int (*set_master)(struct gpunvme_bus *b, bool on);
	/*
	 * Memory that is not the bus's own (a dma-buf, another device's BAR,
	 * GPU pages through nvidia_p2p; src says which) as a DMA target, with
	 * `va` its CPU view (used only to look it up). Returns a handle for
	 * iova_of/contig/dma_free (dma_free unmaps, never munmaps). NULL when
	 * the bus cannot.
	 */
	int (*dma_import)(struct gpunvme_bus *b, const struct gpunvme_dma_src *src, void *va, size_t len,
			  void **handle);
	/* The bus address of every 4 KiB page of a map_device mapping (named
	 * by its *iova); NULL when map_device ranges are contiguous. */
	int (*device_table)(struct gpunvme_bus *b, uint64_t iova, const uint64_t **table, size_t *n);
	/* The device-memory DMA engine (above), NULL when the bus has none. */
	const struct gpunvme_devmem_engine_ops *devmem_engine;
	/* How many I/O queues the controller serves at once, where it says
	 * (gpunvme_ctrl_info's io_parallel); NULL: not known (a real drive). */
	uint32_t (*io_parallel)(struct gpunvme_bus *b);
};

struct gpunvme_bus {
	const struct gpunvme_bus_ops *ops;
	volatile uint8_t *bar0;
	size_t bar0_len;
	char addr[64];
	void *priv;            /* the bus's own state */
};

extern const struct gpunvme_bus_ops gpunvme_bus_emu;
extern const struct gpunvme_bus_ops gpunvme_bus_vfio;
extern const struct gpunvme_bus_ops gpunvme_bus_uio;
extern const struct gpunvme_bus_ops gpunvme_bus_kmod;
extern const struct gpunvme_bus_ops gpunvme_bus_tcp;

/* Kernel modules the buses rely on, by their /sys/module names (gpunvme
 * doctor looks for them): the VFIO core (its enable_unsafe_noiommu_mode
 * switch is the vfio bus's no-IOMMU mode), the vfio-pci driver and the
 * uio_pci_generic driver. */
extern const char gpunvme_bus_vfio_core_module[];
extern const char gpunvme_bus_vfio_pci_module[];
extern const char gpunvme_bus_uio_module[];

/* The emulator behind an emu: bus, NULL for other buses (tests inject
 * faults through it; its copy engine, src/emu_cuda, sizes its lanes by it). */
struct gpunvme_emu *gpunvme_bus_emu_get(struct gpunvme_bus *b);

/* Parse a URI, open the matching bus. */
int gpunvme_bus_open(const char *uri, const struct gpunvme_opts *opts, struct gpunvme_bus *b);
void gpunvme_bus_close(struct gpunvme_bus *b);

/* PCI helpers (src/bus/pci.c): parse "DDDD:BB:DD.F" (or "BB:DD.F") into the
 * canonical form; the name of the bound driver ("" when none). */
int gpunvme_pci_parse_bdf(const char *s, char out[13]);
int gpunvme_pci_driver(const char *bdf, char *drv, size_t len);

#endif
