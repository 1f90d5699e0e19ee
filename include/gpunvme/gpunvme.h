/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Host API: open a controller by URI, control plane, DMA memory, and the CPU
 * data path. Every function returns 0 (or a count) or a negative errno; when
 * it fails, gpunvme_last_error() holds one line saying what went wrong and,
 * where there is one, the fix.
 *
 * Threads: a controller may be used from many threads; a queue pair belongs
 * to one thread at a time (no locks on the data path).
 */
#ifndef GPUNVME_GPUNVME_H
#define GPUNVME_GPUNVME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpunvme/spec/nvme.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gpunvme_ctrl;
struct gpunvme_qpair;

/* The message of the last failure in this thread ("" if none). */
const char *gpunvme_last_error(void);

/* ---- opening a controller ------------------------------------------------- */

struct gpunvme_opts {
	uint32_t admin_timeout_ms;  /* each admin command (default 5000) */
	uint32_t io_timeout_ms;     /* each I/O command (default 30000) */
	uint32_t nr_io_queues;      /* I/O queue pairs to ask for (default 16) */
	uint32_t admin_depth;       /* admin queue entries (default 64) */
	uint32_t mps_shift;         /* memory page size log2 (default 12) */
	int unsafe_noiommu;         /* uio: allow DMA without an IOMMU check */
};

void gpunvme_opts_init(struct gpunvme_opts *o);

/*
 * Open a controller:
 *   emu:SPEC                 the embedded emulator (SPEC as gpunvme_emu_config_parse)
 *   vfio:DDDD:BB:DD.F        a controller bound to vfio-pci (IOMMU-protected)
 *   uio:DDDD:BB:DD.F         uio_pci_generic / sysfs resource0, physical addresses
 *   pci:DDDD:BB:DD.F         whichever of the two the bound driver allows
 *   tcp://HOST:PORT/SUBNQN[?opts]  NVMe over TCP (docs/nvme-tcp.md): a
 *                            subsystem of an NVMe/TCP target (Linux nvmet,
 *                            SPDK); options hostnqn=, hostid=, hdgst=1,
 *                            ddgst=1, kato=MS, timeout=MS, nr_io_queues=N,
 *                            queue_size=N
 * Resets the controller, brings it up, identifies it and every active
 * namespace, and negotiates the number of I/O queues. opts may be NULL.
 */
/*
 * The URI grammar alone, without opening anything: emu:SPEC (the spec
 * parsed), vfio:|uio:|kmod:|pci:BDF, tcp://HOST[:PORT]/SUBNQN, md:URI;URI...
 * (every member). 0, or -EINVAL with gpunvme_last_error() naming what is
 * wrong and the expected form. gpunvme_open checks it first.
 */
int gpunvme_uri_check(const char *uri);
int gpunvme_open(const char *uri, const struct gpunvme_opts *opts, struct gpunvme_ctrl **out);

/* Delete the I/O queues the library created, shut the controller down
 * (CC.SHN, wait CSTS.SHST) and release everything. */
void gpunvme_close(struct gpunvme_ctrl *c);

/* Controller level reset (CC.EN 1 -> 0 -> 1); existing queue pairs are
 * re-created in place, their outstanding commands complete with -EIO. On
 * PCIe a controller that still answers has its I/O queues deleted first
 * (as Linux does), so it has ended their commands before it is disabled;
 * the GPU's queue pairs go too (their owner re-creates them: recovery). */
int gpunvme_reset(struct gpunvme_ctrl *c);

struct gpunvme_ctrl_info {
	char transport[8];          /* "emu", "vfio", "uio", "tcp" */
	char addr[64];              /* what followed the scheme in the URI */
	char sn[21], mn[41], fr[9];
	uint16_t vid, ssvid;
	uint32_t vs;
	uint64_t cap;
	uint32_t nn;
	uint32_t mqes;              /* 1-based: entries per queue at most */
	uint32_t page_size;         /* CC.MPS in bytes */
	uint32_t dstrd;
	uint64_t max_xfer;          /* bytes per command (MDTS), 0 = no limit */
	uint32_t nr_io_queues;      /* granted by Set Features Number of Queues */
	bool vwc;
	uint32_t caps;              /* GPUNVME_CAP_*: what its transport can do (appended: ABI) */
	/* I/O queues the controller serves at once where it says so: the
	 * emulator's worker threads (queue qid goes to worker qid % workers);
	 * 0 = not known (real drives). The loader's default queue count is a
	 * multiple of it. (Appended: ABI.) */
	uint32_t io_parallel;
};

/*
 * Capabilities of a controller's transport, filled at open by the bus that
 * reached it, so that nothing above the transports compares their names.
 * The tier policy (tier.h) and the GPU data path decide from these alone.
 */
/* The controller can DMA into GPU memory (Tier 2): the emulator through the
 * GPU's copy engine, the kmod: bus through dma-buf / nvidia_p2p bus
 * addresses. Not vfio:/uio: (no GPU bus addresses) nor tcp:// (no DMA). */
#define GPUNVME_CAP_DEVMEM_DMA    (1u << 0)
/* GPU threads can submit and reap its I/O queues (Tiers 1 and 2). */
#define GPUNVME_CAP_GPU_QUEUES    (1u << 1)
/* Doorbells are device MMIO (a PCIe BAR): the GPU maps them as I/O memory
 * (cudaHostRegisterIoMemory). Without it they are host memory (the
 * emulator's registers, the NVMe/TCP proxy's page). */
#define GPUNVME_CAP_DOORBELL_MMIO (1u << 2)
/* CSTS is memory the GPU may read while it waits (the emulator's); a real
 * BAR read from the GPU may not complete on every root complex. */
#define GPUNVME_CAP_CSTS_GPU      (1u << 3)
/* Deep queues pay (PCIe). Without it (NVMe/TCP: each entry may hold a
 * buffer at the target) the loader's default depth stays shallow. */
#define GPUNVME_CAP_DEEP_QUEUES   (1u << 4)
#define GPUNVME_CAP_ALL           0x1fu

/* Names of the bits in caps, comma separated ("devmem-dma,gpu-queues,...";
 * "none" for 0) into buf (len bytes, always terminated). Returns buf. */
const char *gpunvme_caps_str(uint32_t caps, char *buf, size_t len);

int gpunvme_ctrl_info(struct gpunvme_ctrl *c, struct gpunvme_ctrl_info *info);
const struct gpunvme_id_ctrl *gpunvme_ctrl_identify(struct gpunvme_ctrl *c);

struct gpunvme_ns_info {
	uint32_t nsid;
	uint64_t nsze, ncap, nuse;  /* blocks */
	uint32_t lba_size;          /* bytes */
	uint32_t lba_shift;
	uint32_t ms;                /* metadata bytes per block */
	uint32_t max_blocks;        /* per command (MDTS) */
};

/* Active namespaces, in NSID order. Returns the count (>= 0). */
int gpunvme_ns_list(struct gpunvme_ctrl *c, uint32_t *nsids, uint32_t max);
int gpunvme_ns_info(struct gpunvme_ctrl *c, uint32_t nsid, struct gpunvme_ns_info *info);
const struct gpunvme_id_ns *gpunvme_ns_identify(struct gpunvme_ctrl *c, uint32_t nsid);

/* BAR0, for register dumps and for mapping into a GPU. */
volatile void *gpunvme_bar0(struct gpunvme_ctrl *c, size_t *len);

/* Admin passthrough: data of `len` bytes is moved through a bounce buffer
 * in DMA memory (host_to_ctrl: buffer is sent to the controller). *cpl gets
 * the completion. Returns 0, -EIO when the status is not success (status in
 * cpl), -ETIMEDOUT, -ENODEV (device gone) or another -errno. */
int gpunvme_admin(struct gpunvme_ctrl *c, struct gpunvme_sqe *cmd, void *buf, size_t len,
		  int host_to_ctrl, struct gpunvme_cqe *cpl);
int gpunvme_get_log_page(struct gpunvme_ctrl *c, uint32_t nsid, uint8_t lid, void *buf, size_t len);
/*
 * Admin Abort (NVMe 1.4 §5.1) of command `cid` on submission queue `sqid`.
 * *aborted (may be NULL) is set when the controller says it aborted the
 * command: its completion, status Command Abort Requested, is then posted
 * on its own queue. Not aborted is no error (the command may have finished
 * or be past the point of no return): reset to be sure. Returns 0, -EAGAIN
 * (Abort Command Limit Exceeded: too many aborts outstanding) or as
 * gpunvme_admin().
 */
int gpunvme_abort(struct gpunvme_ctrl *c, uint16_t sqid, uint16_t cid, bool *aborted);
int gpunvme_get_features(struct gpunvme_ctrl *c, uint8_t fid, uint32_t cdw11, uint32_t *dw0);
int gpunvme_set_features(struct gpunvme_ctrl *c, uint8_t fid, uint32_t cdw11, uint32_t *dw0);

/* ---- DMA memory ------------------------------------------------------------- */

#define GPUNVME_MEM_HOST 0x1u

/* Memory the controller can DMA to: 2 MiB hugepages when available, else
 * (on buses with an IOMMU) locked 4 KiB pages. Zero-filled. */
void *gpunvme_dma_alloc(struct gpunvme_ctrl *c, size_t len);
void gpunvme_dma_free(struct gpunvme_ctrl *c, void *p);
/* Bus address of a byte of DMA memory, or 0 when p is not DMA memory. */
uint64_t gpunvme_dma_iova(struct gpunvme_ctrl *c, const void *p);

/* Memory this library did not allocate, as a DMA target (kmod: bus only). */
enum gpunvme_dma_src_kind {
	GPUNVME_DMA_SRC_DMABUF = 1, /* fd: a dma-buf (any exporter); offset into it */
	GPUNVME_DMA_SRC_PEER = 2,   /* peer: another PCI device "DDDD:BB:DD.F", bar; offset in the BAR */
	GPUNVME_DMA_SRC_NVP2P = 3,  /* offset: a CUDA device address (NVIDIA's legacy P2P pages) */
};
struct gpunvme_dma_src {
	int kind;                   /* enum gpunvme_dma_src_kind */
	int fd;
	uint64_t offset;
	const char *peer;
	unsigned int bar;
};
/*
 * Make [va, va + len) DMA memory: the controller reaches it through the bus
 * addresses the kernel module gives for `src`, and I/O calls accept it like
 * gpunvme_dma_alloc memory. va is the process's view of the same memory (a
 * dma-buf's mmap, a peer BAR's sysfs resource mmap); it is only used to find
 * the mapping. va, len and offset are multiples of 4 KiB. gpunvme_dma_free(c,
 * va) unmaps it for the controller (va stays mapped). -EOPNOTSUPP on buses
 * other than kmod:.
 */
int gpunvme_dma_import(struct gpunvme_ctrl *c, void *va, size_t len, const struct gpunvme_dma_src *src);

/* ---- CPU data path -------------------------------------------------------------- */

struct gpunvme_cpl {
	int err;          /* 0, or -errno (-EIO for an NVMe error, -ETIMEDOUT, -ENODEV...) */
	uint16_t status;  /* NVMe status value (nvme.h layout); 0 when err is not -EIO */
	uint32_t dw0;
};

typedef void (*gpunvme_cb)(void *arg, const struct gpunvme_cpl *cpl);

/* A queue pair of `depth` entries (0: the controller's limit, at most 1024).
 * Fails with -EBUSY when every granted I/O queue is in use. */
int gpunvme_qpair_create(struct gpunvme_ctrl *c, uint32_t depth, struct gpunvme_qpair **out);
void gpunvme_qpair_destroy(struct gpunvme_qpair *qp);
/* The same with both rings in `rings` (len bytes, 4 KiB aligned): memory made
 * DMA memory by gpunvme_dma_import, e.g. device memory (Tier 3 placement).
 * The SQ at rings, the CQ at the next 4 KiB boundary after it; each must be
 * contiguous on the bus. The memory stays the caller's. */
int gpunvme_qpair_create_in(struct gpunvme_ctrl *c, uint32_t depth, void *rings, size_t len,
			    struct gpunvme_qpair **out);

/*
 * Asynchronous I/O. buf must be DMA memory (gpunvme_dma_alloc), dword
 * aligned; nlb is a block count (not 0's based) of any size: transfers are
 * split at MDTS and the callback runs once, when every part is done (the
 * first error wins). Returns 0 when queued, or -errno at once (-EINVAL for a
 * bad argument, -ERANGE for LBAs past the end, -EFAULT when buf is not DMA
 * memory, -ENODEV when the device is gone).
 */
int gpunvme_read(struct gpunvme_qpair *qp, uint32_t nsid, void *buf, uint64_t slba, uint64_t nlb,
		 gpunvme_cb cb, void *arg);
int gpunvme_write(struct gpunvme_qpair *qp, uint32_t nsid, const void *buf, uint64_t slba, uint64_t nlb,
		  gpunvme_cb cb, void *arg);
int gpunvme_flush(struct gpunvme_qpair *qp, uint32_t nsid, gpunvme_cb cb, void *arg);
int gpunvme_write_zeroes(struct gpunvme_qpair *qp, uint32_t nsid, uint64_t slba, uint64_t nlb,
			 gpunvme_cb cb, void *arg);
int gpunvme_deallocate(struct gpunvme_qpair *qp, uint32_t nsid, uint64_t slba, uint64_t nlb,
		       gpunvme_cb cb, void *arg);

/* Reap up to max completions (0: all available), run their callbacks, submit
 * queued parts, expire commands past io_timeout_ms (-ETIMEDOUT). Returns the
 * number of user requests completed, or -ENODEV / -EIO when the controller
 * is gone or failed (CSTS all ones / CSTS.CFS). */
int gpunvme_qpair_poll(struct gpunvme_qpair *qp, uint32_t max);
/* For a thread with nothing else to do until this queue pair completes
 * something: sleep until a completion is likely or max_us pass. Over
 * NVMe/TCP it waits for bytes on the connection (the CPU goes to the
 * target or other work instead of a spin); on PCIe it returns at once (a
 * completion queue in memory has nothing to wait on). Poll afterwards. */
void gpunvme_qpair_wait(struct gpunvme_qpair *qp, uint32_t max_us);
/* Requests submitted and not yet completed. */
uint32_t gpunvme_qpair_outstanding(const struct gpunvme_qpair *qp);
/*
 * The step before a reset, as Linux's nvme driver takes it: an Abort
 * (gpunvme_abort) for every command of qp that timed out, then polls qp
 * until the controller answered them, for at most admin_timeout_ms. A
 * timed-out command keeps its id until the controller answers (it may still
 * move data); an aborted one gives it back, and the queue pair is whole
 * again without a reset. Returns how many timed-out commands are still
 * unanswered (0: no reset needed; otherwise gpunvme_reset), or -ENODEV /
 * -EIO when the controller is gone or failed. Call it from the thread that
 * owns qp (it polls qp: completions of other commands run their callbacks).
 */
int gpunvme_qpair_abort_expired(struct gpunvme_qpair *qp);
/* The I/O timeout of commands submitted on qp from now on (default
 * gpunvme_opts.io_timeout_ms; at least 1 ms, checked about once a ms). */
int gpunvme_qpair_set_timeout(struct gpunvme_qpair *qp, uint32_t ms);
/* I/O queue pairs the controller granted that no CPU queue pair or GPU
 * queue holds now: what a new user of queues can still create. */
uint32_t gpunvme_io_queues_free(struct gpunvme_ctrl *c);

/* Synchronous helpers: submit, poll to completion. 0, or -errno with the
 * NVMe status in *status when -EIO (status may be NULL). */
int gpunvme_read_sync(struct gpunvme_qpair *qp, uint32_t nsid, void *buf, uint64_t slba, uint64_t nlb,
		      uint16_t *status);
int gpunvme_write_sync(struct gpunvme_qpair *qp, uint32_t nsid, const void *buf, uint64_t slba,
		       uint64_t nlb, uint16_t *status);
int gpunvme_flush_sync(struct gpunvme_qpair *qp, uint32_t nsid, uint16_t *status);

/* errno for an NVMe status value (-EIO for most, -ERANGE for LBA Out of
 * Range, -EINVAL for Invalid Field, ...). */
int gpunvme_status_errno(uint16_t status);

#ifdef __cplusplus
}
#endif

#endif /* GPUNVME_GPUNVME_H */
