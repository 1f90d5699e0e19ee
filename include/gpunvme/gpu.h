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
#include "gpunvme/perf_hist.h"

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

/* ---- perf: the `gpunvme perf --gpu` workload engine (src/cuda/gpu_perf.cu) ---- */

/* Is there a CUDA GPU? 0, or -ENODEV with gpunvme_last_error() saying
 * "no CUDA GPU: <why>" (no driver, no device, ...). Never aborts. */
int gpunvme_gpu_perf_probe(void);

/* Workloads, in the order of `gpunvme perf -w`. */
enum gpunvme_gpu_perf_workload {
	GPUNVME_GPU_PERF_READ = 0,
	GPUNVME_GPU_PERF_RANDREAD = 1,
	GPUNVME_GPU_PERF_WRITE = 2,
	GPUNVME_GPU_PERF_RANDWRITE = 3,
	GPUNVME_GPU_PERF_RW = 4,
	GPUNVME_GPU_PERF_RANDRW = 5,
};

/* Who submits:
 *  WARP: warp batches (gpunvme_dev_rw_lanes): each lane brings one command,
 *        the warp takes admission, tickets and one doorbell for all of them
 *        and waits until every one completed, then submits the next batch.
 *        The fastest path; an I/O's latency is its batch's (submission to
 *        the batch's last completion).
 *  THREAD: every I/O slot is a warp of its own whose lanes (one per
 *        command of the I/O) submit (gpunvme_dev_submit), wait
 *        (gpunvme_dev_wait) and resubmit at once, so DEPTH I/Os stay in
 *        flight continuously; latency is per I/O. Costs a warp per slot. */
enum gpunvme_gpu_perf_mode {
	GPUNVME_GPU_PERF_WARP = 0,
	GPUNVME_GPU_PERF_THREAD = 1,
};

struct gpunvme_gpu_perf_args {
	uint32_t nsid;
	uint32_t workload;      /* enum gpunvme_gpu_perf_workload */
	uint32_t mix;           /* rw/randrw: percentage of reads */
	uint32_t mode;          /* enum gpunvme_gpu_perf_mode */
	uint32_t tier;          /* 1: data in pinned host memory, 2: GPU memory */
	uint32_t queues;        /* queue pairs (gpunvme_gpu_queues_create) */
	uint32_t depth;         /* I/Os in flight per queue pair */
	uint64_t io_bytes;      /* bytes per I/O: a multiple of the LBA size; an
	                           I/O above MDTS is up to 32 commands, one lane each */
	uint64_t run_ns;        /* how long the kernel keeps submitting */
	uint64_t timeout_ns;    /* bound of every GPU wait, per command */
	uint64_t seed;          /* random offsets and mix */
};

struct gpunvme_gpu_perf_result {
	/* per queue pair i: hist[2 * i] reads, hist[2 * i + 1] writes; I/Os
	 * completed inside the measurement window only */
	struct gpunvme_perf_hist *hist;  /* latency in ns, perf_hist.h */
	uint32_t queues;
	double elapsed_s;       /* the window on the GPU clock: start of the
	                           kernel to run_ns, or to the first error */
	double kernel_s;        /* the whole launch (CUDA events), drain included */
	uint64_t late;          /* I/Os that completed after the window (not counted) */
	uint64_t errors;        /* I/Os that failed */
	int first_err;          /* 0, an NVMe status (> 0) or a GPUNVME_DEV_E* (< 0) */
	uint32_t first_queue;
	int stuck;              /* the kernel never finished: nothing was freed;
	                           the caller should exit without closing */
	uint32_t threads, blocks, threads_per_block;
	uint32_t queue_entries; /* per queue pair */
	uint32_t cmds_per_io;   /* commands (= lanes) per I/O */
	uint32_t lanes_per_io;  /* lanes reserved per I/O: warp mode cmds_per_io rounded
	                           up to a power of two, thread mode 32 (a warp) */
	char gpu_name[128];
};

/* Run the workload from GPU threads on `queues` new GPU queue pairs of c
 * (queues, buffers and the kernel are set up and torn down here). 0 when the
 * run completed, whatever the I/O errors (r->errors, r->first_err); -errno
 * for setup problems (message in gpunvme_last_error()), -ETIMEDOUT with
 * r->stuck when the kernel did not end. Free r with
 * gpunvme_gpu_perf_result_free() after either. */
int gpunvme_gpu_perf(struct gpunvme_ctrl *c, const struct gpunvme_gpu_perf_args *a,
		     struct gpunvme_gpu_perf_result *r);
void gpunvme_gpu_perf_result_free(struct gpunvme_gpu_perf_result *r);
/* Text for a device-side result: an NVMe status (gpunvme_status_str) or a
 * GPUNVME_DEV_E* code; timeout_ms names the bound in the timeout text. */
const char *gpunvme_gpu_perf_strerror(int err, uint32_t timeout_ms, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
