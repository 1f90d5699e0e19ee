/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Host side of the GPU data path (src/cuda): create queue pairs the GPU
 * drives, map BAR0 and the queues into the GPU, register data buffers, and
 * read into GPU memory asynchronously on a CUDA stream. Built when CUDA is
 * (GPUNVME_HAVE_CUDA); link with CUDA's runtime.
 */
#ifndef GPUNVME_GPU_H
#define GPUNVME_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "gpunvme/gpunvme.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gpunvme_gpu_queues;
struct gpunvme_gpu_buf;
struct gpunvme_dev_queues;
struct gpunvme_dev_buf;
struct gpunvme_loader_gpu_ops;

/*
 * nq queue pairs of `depth` entries (rounded down to a power of two, at most
 * CAP.MQES + 1 and 32768) for namespace nsid, queues and PRP lists in host pinned
 * memory mapped into the current CUDA device (Tier 1 placement). BAR0 is
 * mapped for the GPU: cudaHostRegisterIoMemory on a real BAR, pinned mapped
 * memory for the emulator.
 */
int gpunvme_gpu_queues_create(struct gpunvme_ctrl *c, uint32_t nsid, uint32_t nq, uint32_t depth,
			      struct gpunvme_gpu_queues **out);
/* Deletes the queues (controller side too) and every mapping. */
void gpunvme_gpu_queues_destroy(struct gpunvme_gpu_queues *g);
/* The descriptor to pass (by value) to kernels. */
const struct gpunvme_dev_queues *gpunvme_gpu_queues_desc(const struct gpunvme_gpu_queues *g);

/*
 * Recovery (docs/reliability.md, "GPU queues"). A device wait that runs out
 * of time marks its queue pair broken: later submissions on it fail at once
 * with GPUNVME_DEV_EIO, and the command keeps its slot (the controller may
 * still answer). A controller fatal status or a removal shows the same way.
 *
 * gpunvme_gpu_queues_check() looks (host side, cheap) at what the kernels
 * left behind. gpunvme_gpu_queues_recover() makes the queues usable again
 * in place: the descriptor (gpunvme_gpu_queues_desc) and every registered
 * buffer stay valid, so the next launch just works. Steps:
 *   1. an Abort (admin) for every command still in a slot, while the
 *      controller runs (no fatal status) and not asked to reset;
 *   2. every queue pair deleted on the controller (NVMe 1.4 §5.6, §5.7: its
 *      commands are aborted and nothing more is posted for them), or, when
 *      that cannot be done (fatal status, a device that came back, a failed
 *      delete, GPUNVME_GPU_RECOVER_RESET), a controller reset
 *      (gpunvme_reset: CPU queue pairs are re-created too and their
 *      outstanding commands fail with -EIO, so their threads must be parked);
 *   3. rings and device state zeroed, queue pairs created again with the
 *      same ids and memory.
 * When it returns 0, the controller moves no data for any command issued
 * before it: a buffer of a command that failed is never written after that.
 * Commands that were in flight never report success: their kernels already
 * returned a timeout or GPUNVME_DEV_EIO.
 * Call it only when no kernel uses these queues (synchronise the streams
 * that launched them; every device wait ends at its deadline). -ENODEV when
 * the device is gone (registers read all ones): close it, open it again
 * when it is back.
 */
struct gpunvme_gpu_health {
	uint32_t broken;        /* queue pairs a device wait marked broken */
	uint32_t stuck;         /* commands in a slot with no completion seen */
	uint32_t csts;          /* CSTS as the host reads it */
};
/* 0: nothing to do; -EIO: recover (broken queues, commands stuck, fatal
 * status, controller not ready); -ENODEV: device gone. */
int gpunvme_gpu_queues_check(struct gpunvme_gpu_queues *g, struct gpunvme_gpu_health *h);

#define GPUNVME_GPU_RECOVER_RESET 0x1u /* reset the controller even if deleting the queues would do */

struct gpunvme_gpu_recovery {
	uint32_t stuck;         /* commands in a slot with no completion seen */
	uint32_t abort_sent;    /* Abort commands sent */
	uint32_t aborted;       /* ... that the controller says it aborted */
	bool reset;             /* the controller was reset */
	uint64_t ns;            /* time the recovery took */
};
int gpunvme_gpu_queues_recover(struct gpunvme_gpu_queues *g, unsigned flags, struct gpunvme_gpu_recovery *r);

/* Tier 1: a buffer of DMA memory (gpunvme_dma_alloc) made visible to the
 * GPU; *dev_ptr is the GPU's address of it. */
int gpunvme_gpu_buf_host(struct gpunvme_gpu_queues *g, void *dma_mem, size_t len, struct gpunvme_gpu_buf **out,
			 void **dev_ptr);
/* Tier 2: GPU memory (cudaMalloc'ed by the library) as the DMA target.
 * The emulator moves the data with the copy engine (the first Tier 2 buffer
 * pins the namespace's memory for it, best effort); real hardware returns
 * -ENOTSUP until GPU bus addresses are available (kernel module/dma-buf).
 * Registration is not stream-ordered: do it while no read of these queues
 * is in flight. */
int gpunvme_gpu_buf_device(struct gpunvme_gpu_queues *g, size_t len, struct gpunvme_gpu_buf **out, void **dev_ptr);
/* Tier 2 on GPU memory the caller allocated (cudaMalloc): registered, not
 * owned; gpunvme_gpu_buf_free() leaves the memory alone. */
int gpunvme_gpu_buf_register(struct gpunvme_gpu_queues *g, void *dev_ptr, size_t len, struct gpunvme_gpu_buf **out);
void gpunvme_gpu_buf_free(struct gpunvme_gpu_buf *b);
const struct gpunvme_dev_buf *gpunvme_gpu_buf_desc(const struct gpunvme_gpu_buf *b);

/*
 * Text for a result the device code wrote (the *d_status of the calls below,
 * a gpunvme_dev_* return): 0, an NVMe status (> 0, as gpunvme_status_str()
 * formats it) or a negative GPUNVME_DEV_E* code (device.cuh). The string is
 * static, or gpunvme_status_str()'s per-thread buffer for an NVMe status.
 */
const char *gpunvme_gpu_status_str(int st);

/*
 * Read nlb blocks from slba into buffer offset off, asynchronously on
 * `stream` (a cudaStream_t): a kernel of GPU threads submits the commands
 * over all queue pairs; no device-wide synchronisation. *d_status (device
 * memory, set to 0 by the caller) receives the first failure (NVMe status
 * or negative GPUNVME_DEV_E*). Returns 0 or -errno for launch problems.
 */
int gpunvme_gpu_read_async(struct gpunvme_gpu_queues *g, uint64_t slba, uint64_t nlb, struct gpunvme_gpu_buf *b,
			   uint64_t off, int *d_status, void *stream, uint64_t timeout_ns);

/*
 * Scattered reads: nseg LBA ranges, each into buffer bufs[seg.buf] at byte
 * offset seg.off, on `stream`; the segments live in device-visible memory
 * (d_segs) and stay valid until the stream passes this point. Warps take
 * segments in turn over all queue pairs, a segment of at most 32 commands
 * per warp. First failure in *d_status.
 *
 * A strided segment (row > 0) reads its blocks as rows of `row` blocks (at
 * most the controller's largest transfer, so one command a row), row i to
 * off + i * pitch (pitch at least a row's bytes): an md member's
 * consecutive chunks, which lie members x chunk apart in the file. Its
 * commands go into the SQ in row order, which an emulated controller turns
 * into one 2D copy. A bad geometry fails with GPUNVME_DEV_EINVAL.
 */
struct gpunvme_gpu_seg {
	uint64_t slba;
	uint64_t off;     /* byte offset in the buffer */
	uint32_t nlb;     /* blocks, not 0's based */
	uint32_t buf;     /* which buffer: 0 or 1 (buf0, buf1), or an index into bufs */
	uint32_t row;     /* 0: contiguous; else blocks a row (strided) */
	uint32_t rsvd;
	uint64_t pitch;   /* strided: bytes from one row's start to the next's */
};
int gpunvme_gpu_read_segs_async(struct gpunvme_gpu_queues *g, const struct gpunvme_gpu_seg *d_segs, uint32_t nseg,
				struct gpunvme_gpu_buf *buf0, struct gpunvme_gpu_buf *buf1, int *d_status, void *stream,
				uint64_t timeout_ns);
/*
 * The same with any number of buffers: seg.buf indexes bufs[0, nbuf), so
 * one launch reads into many destinations (gpunvme_load_layers_async). The
 * table is copied to the GPU on `stream` (the caller may free bufs at
 * once); a segment naming no buffer fails with GPUNVME_DEV_EINVAL.
 */
int gpunvme_gpu_read_segs_table_async(struct gpunvme_gpu_queues *g, const struct gpunvme_gpu_seg *d_segs,
				      uint32_t nseg, struct gpunvme_gpu_buf *const *bufs, uint32_t nbuf, int *d_status,
				      void *stream, uint64_t timeout_ns);

/* The CUDA backend of the layer loader (loader.h: opts.gpu). */
const struct gpunvme_loader_gpu_ops *gpunvme_loader_gpu_backend(void);

#ifdef __cplusplus
}
#endif

#endif
