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
 * segments in turn over all queue pairs. First failure in *d_status.
 */
struct gpunvme_gpu_seg {
	uint64_t slba;
	uint64_t off;     /* byte offset in the buffer */
	uint32_t nlb;     /* blocks, not 0's based */
	uint32_t buf;     /* 0 or 1: which of the two buffers */
};
int gpunvme_gpu_read_segs_async(struct gpunvme_gpu_queues *g, const struct gpunvme_gpu_seg *d_segs, uint32_t nseg,
				struct gpunvme_gpu_buf *buf0, struct gpunvme_gpu_buf *buf1, int *d_status, void *stream,
				uint64_t timeout_ns);

/* The CUDA backend of the layer loader (loader.h: opts.gpu). */
const struct gpunvme_loader_gpu_ops *gpunvme_loader_gpu_backend(void);

#ifdef __cplusplus
}
#endif

#endif
