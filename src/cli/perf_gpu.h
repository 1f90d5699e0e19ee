/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The workload engine of `gpunvme perf --gpu` (perf_gpu.cu), owned by the
 * CLI: a benchmark's choices (workloads, submission modes, what is timed)
 * are the tool's, not the library's, so the engine drives the public GPU
 * API (gpunvme/gpu.h, gpunvme/device.cuh) like any other program would.
 * Built only with CUDA (GPUNVME_HAVE_CUDA). C linkage: cmd_perf.c calls it.
 *
 * Errors: every function returns 0 or -errno; perf_gpu_error() then holds
 * one line saying why (the library's message when a library call failed).
 */
#ifndef GPUNVME_CLI_PERF_GPU_H
#define GPUNVME_CLI_PERF_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "gpunvme/gpunvme.h"
#include "perf_hist.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Why the last call here failed, one line; "" before any failure. */
const char *perf_gpu_error(void);

/* Is there a CUDA GPU? 0, or -ENODEV with perf_gpu_error() saying what is
 * missing (no driver, no device, ...). Never aborts. */
int perf_gpu_probe(void);

/* Workloads, in the order of `gpunvme perf -w` (cmd_perf.c's enum wl). */
enum perf_gpu_workload {
	PERF_GPU_READ = 0,
	PERF_GPU_RANDREAD = 1,
	PERF_GPU_WRITE = 2,
	PERF_GPU_RANDWRITE = 3,
	PERF_GPU_RW = 4,
	PERF_GPU_RANDRW = 5,
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
enum perf_gpu_mode {
	PERF_GPU_WARP = 0,
	PERF_GPU_THREAD = 1,
};

struct perf_gpu_args {
	uint32_t nsid;
	uint32_t workload;      /* enum perf_gpu_workload */
	uint32_t mix;           /* rw/randrw: percentage of reads */
	uint32_t mode;          /* enum perf_gpu_mode */
	uint32_t tier;          /* 1: data in pinned host memory, 2: GPU memory */
	uint32_t queues;        /* queue pairs (gpunvme_gpu_queues_create) */
	uint32_t depth;         /* I/Os in flight per queue pair */
	uint64_t io_bytes;      /* bytes per I/O: a multiple of the LBA size; an
	                           I/O above MDTS is up to 32 commands, one lane each */
	uint64_t run_ns;        /* how long the kernel keeps submitting */
	uint64_t timeout_ns;    /* bound of every GPU wait, per command */
	uint64_t seed;          /* random offsets and mix */
};

struct perf_gpu_result {
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
 * for setup problems, -ETIMEDOUT with r->stuck when the kernel did not end.
 * Free r with perf_gpu_result_free() after either. */
int perf_gpu_run(struct gpunvme_ctrl *c, const struct perf_gpu_args *a, struct perf_gpu_result *r);
void perf_gpu_result_free(struct perf_gpu_result *r);
/* Text for a device-side result: an NVMe status (gpunvme_status_str) or a
 * GPUNVME_DEV_E* code; timeout_ms names the bound in the timeout text. */
const char *perf_gpu_strerror(int err, uint32_t timeout_ms, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
