/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The workload engine of `gpunvme perf --gpu` (perf_gpu.h): the same
 * workloads as the CPU perf (read, randread, write, randwrite, rw, randrw;
 * BYTES per I/O, DEPTH I/Os in flight on each of Q queue pairs, for a given
 * time), but every command is built, submitted and completed by GPU threads
 * (device.cuh). Part of the CLI, on the public API only (gpu.h,
 * device.cuh): the library's GPU path owes a benchmark nothing special.
 *
 * Layout of the work: an "I/O slot" keeps one I/O in flight at a time. An
 * I/O of up to MDTS is one command; a larger one is split into P <= 32
 * commands, one per lane of a lane group of G lanes (G a power of two >= P,
 * so a group never straddles two warps). Every lane has at most one command
 * outstanding, which is what keeps device.cuh's slot protocol free of
 * self-waits. Queue pair qi gets DEPTH slots, i.e. ceil(DEPTH * G / 32)
 * warps; lanes past DEPTH * G, and lanes of a group past P, idle.
 *
 * Two ways to submit (enum perf_gpu_mode):
 *  - warp batches (G = P rounded up): the 32 lanes call
 *    gpunvme_dev_rw_lanes together (one admission, one ticket range and
 *    one doorbell for the batch, the whole warp draining the CQ) and wait
 *    for the batch; then the next batch.
 *  - threads (G = 32: one slot per warp): the slot's lanes submit
 *    (gpunvme_dev_submit), wait for their own commands and resubmit at
 *    once. One slot per warp because the thread-level calls spin and sleep
 *    per lane: with 32 independent slots in a warp their diverged paths
 *    serialise (measured on an H100, 8 queue pairs x 32: ~1.9 ms per 4 KiB
 *    read and 0.13 M IOPS with 32 slots per warp, 71 us and 3.5 M with
 *    one). A group synchronises only after each lane consumed its
 *    completion: a lane at that barrier holds no queue slot, so a lane
 *    still inside submit never waits for it.
 *
 * Time: the first thread to start stamps t0 (%globaltimer); everyone stops
 * submitting at t0 + run_ns or after the first error. I/Os that complete
 * after the window are not counted (as the CPU perf drains them). Every wait
 * is bounded by the per-command timeout, so the kernel ends by about
 * t0 + run_ns + timeout; the host polls the launch with its own deadline on
 * top of that and never blocks on it.
 *
 * Latency: %globaltimer stamps of the group's first lane around the I/O
 * (submission to the last completion of its commands; for warp batches, to
 * the batch's last completion), into per-queue histograms in GPU memory
 * with the CPU perf's bucket layout (global atomics: at tens of millions
 * of I/Os per second they are far below the L2's atomic rate).
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpunvme/device.cuh"
#include "gpunvme/gpu.h"
#include "perf_gpu.h"

#define PERF_TPB 128u /* threads per block */

/* Shared state of a run, in GPU memory. */
struct perf_ctl {
	unsigned long long t0;     /* window start; 0 until the first thread runs */
	unsigned long long t_stop; /* first error's time; ~0 when none */
	unsigned long long errors;
	unsigned long long late;
	int first_err;
	unsigned int first_queue;
	unsigned int stop;
};

struct perf_kargs {
	struct gpunvme_dev_queues q;
	struct gpunvme_dev_buf b;
	struct perf_ctl *ctl;
	unsigned long long *seq;            /* per queue: next sequential I/O */
	struct gpunvme_perf_hist *hist; /* per queue: reads, writes */
	uint64_t run_ns, timeout_ns, seed;
	uint64_t nios;                      /* I/O-sized slots in the namespace */
	uint64_t io_bytes;
	uint32_t blocks_per_io;
	uint32_t parts;                     /* commands per I/O */
	uint32_t group;                     /* lanes per I/O: parts rounded up to 2^k */
	uint32_t depth;                     /* I/O slots per queue */
	uint32_t warps_per_queue;
	uint32_t workload, mix;
};

/* ---- device helpers -------------------------------------------------------- */

__device__ __forceinline__ uint64_t perf_mix64(uint64_t z)
{
	/* splitmix64 finaliser: independent seeds per slot */
	z += 0x9E3779B97F4A7C15ull;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Window start, common to all threads: the first one to get here sets it. */
__device__ __forceinline__ uint64_t perf_t0(struct perf_ctl *ctl)
{
	unsigned long long now = gpunvme_dev_now();
	unsigned long long old = atomicCAS(&ctl->t0, 0ull, now);
	return old ? old : now;
}

/* The next I/O of a slot: which I/O-sized piece of the namespace, read or
 * write. Random workloads draw uniformly over the namespace; sequential
 * ones give each queue pair its own slice and wrap around in it, the slots
 * of a queue taking consecutive pieces (as the CPU perf's queue depth does). */
__device__ static void perf_pick(const struct perf_kargs *a, uint32_t qi, uint64_t *rng, uint64_t *slba, int *rd)
{
	const uint32_t wl = a->workload;
	uint64_t r = gpunvme_perf_rnd(rng), n;
	if (wl == PERF_GPU_RANDREAD || wl == PERF_GPU_RANDWRITE || wl == PERF_GPU_RANDRW) {
		n = r % a->nios;
	} else {
		const uint32_t nq = a->q.nq;
		uint64_t lo = a->nios * qi / nq, hi = a->nios * (qi + 1) / nq;
		if (hi <= lo) {
			lo = 0;
			hi = a->nios;
		}
		n = lo + atomicAdd(&a->seq[qi], 1ull) % (hi - lo);
	}
	if (wl == PERF_GPU_READ || wl == PERF_GPU_RANDREAD)
		*rd = 1;
	else if (wl == PERF_GPU_WRITE || wl == PERF_GPU_RANDWRITE)
		*rd = 0;
	else
		*rd = (gpunvme_perf_rnd(rng) % 100) < a->mix;
	*slba = n * a->blocks_per_io;
}

/* One I/O done (by the group's first lane): into the histogram, or counted
 * as an error, which stops the run. */
__device__ static void perf_record(const struct perf_kargs *a, uint32_t qi, int rd, uint64_t ts, uint64_t te,
				   int rc, uint64_t t_end)
{
	struct perf_ctl *ctl = a->ctl;
	if (rc) {
		atomicAdd(&ctl->errors, 1ull);
		/* the first error, but a root cause wins over the EIO that a
		 * timed-out command leaves for everyone else on its queue */
		int old = atomicCAS(&ctl->first_err, 0, rc);
		if (old == 0)
			ctl->first_queue = qi;
		else if (old == GPUNVME_DEV_EIO && rc != GPUNVME_DEV_EIO &&
			 atomicCAS(&ctl->first_err, GPUNVME_DEV_EIO, rc) == GPUNVME_DEV_EIO)
			ctl->first_queue = qi;
		atomicMin(&ctl->t_stop, (unsigned long long)te);
		atomicExch(&ctl->stop, 1u);
		return;
	}
	if (te > t_end) {
		atomicAdd(&ctl->late, 1ull);
		return;
	}
	struct gpunvme_perf_hist *h = &a->hist[2 * qi + (rd ? 0 : 1)];
	unsigned long long v = te - ts;
	atomicAdd((unsigned long long *)&h->count, 1ull);
	atomicAdd((unsigned long long *)&h->sum, v);
	atomicMin((unsigned long long *)&h->min, v);
	atomicMax((unsigned long long *)&h->max, v);
	atomicAdd((unsigned long long *)&h->b[gpunvme_perf_hist_index(v)], 1ull);
}

/* Where a lane is: queue, slot within the queue, lane within its group. */
struct perf_pos {
	uint32_t qi, slot, gl, leader;
	unsigned gmask;
	bool live;  /* the warp belongs to a queue */
	bool slot_ok; /* the lane's group is one of the queue's DEPTH slots */
};

__device__ static struct perf_pos perf_where(const struct perf_kargs *a)
{
	struct perf_pos p;
	const unsigned lane = threadIdx.x & 31u, G = a->group;
	const uint64_t w = (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) >> 5;
	p.qi = (uint32_t)(w / a->warps_per_queue);
	p.live = p.qi < a->q.nq;
	p.slot = (uint32_t)(w % a->warps_per_queue) * (32u / G) + lane / G;
	p.slot_ok = p.live && p.slot < a->depth;
	p.gl = lane % G;
	p.leader = lane - p.gl;
	p.gmask = G == 32u ? 0xffffffffu : ((1u << G) - 1u) << p.leader;
	return p;
}

/* This lane's command of the slot's I/O at slba: blocks and buffer offset. */
__device__ __forceinline__ void perf_part(const struct perf_kargs *a, const struct perf_pos *p, uint64_t *slba,
					  uint32_t *nlb, uint64_t *off)
{
	const uint32_t mb = a->q.max_blocks;
	uint32_t first = p->gl * mb;
	*nlb = a->blocks_per_io - first < mb ? a->blocks_per_io - first : mb;
	*slba += first;
	*off = ((uint64_t)p->qi * a->depth + p->slot) * a->io_bytes + ((uint64_t)first << a->q.lba_shift);
}

/* ---- kernels -------------------------------------------------------------------- */

__global__ void perf_kernel_warp(struct perf_kargs a)
{
	const unsigned full = 0xffffffffu, lane = threadIdx.x & 31u;
	struct perf_pos p = perf_where(&a);
	/* whole warps leave together: gpunvme_dev_rw_lanes needs all 32 */
	if (!p.live || !__any_sync(full, p.slot_ok))
		return;
	const uint64_t t_end = perf_t0(a.ctl) + a.run_ns;
	uint64_t rng = perf_mix64(a.seed ^ perf_mix64(((uint64_t)p.qi << 32) | p.slot));
	if (!rng)
		rng = 1;
	for (;;) {
		int go = 0;
		if (lane == 0)
			go = gpunvme_dev_now() < t_end && !gpunvme_dq_ld(&a.ctl->stop);
		if (!__shfl_sync(full, go, 0))
			break;
		uint64_t slba = 0;
		int rd = 1;
		if (p.slot_ok && p.gl == 0)
			perf_pick(&a, p.qi, &rng, &slba, &rd);
		slba = __shfl_sync(full, slba, p.leader);
		rd = __shfl_sync(full, rd, p.leader);
		bool mine = p.slot_ok && p.gl < a.parts;
		uint32_t nlb = 1;
		uint64_t off = 0;
		if (mine)
			perf_part(&a, &p, &slba, &nlb, &off);
		const uint64_t ts = gpunvme_dev_now();
		int rc = gpunvme_dev_rw_lanes(&a.q, p.qi, rd ? GPUNVME_CMD_READ : GPUNVME_CMD_WRITE, slba, nlb, &a.b,
					      off, mine, a.timeout_ns);
		const uint64_t te = gpunvme_dev_now();
		/* the I/O's result: its first failing command, by lane order */
		unsigned bad = __ballot_sync(full, rc != 0) & p.gmask;
		int grc = __shfl_sync(full, rc, bad ? __ffs(bad) - 1 : lane);
		if (p.slot_ok && p.gl == 0)
			perf_record(&a, p.qi, rd, ts, te, bad ? grc : 0, t_end);
	}
}

__global__ void perf_kernel_thread(struct perf_kargs a)
{
	struct perf_pos p = perf_where(&a);
	/* whole groups leave together (DEPTH * G is a multiple of G) */
	if (!p.slot_ok)
		return;
	const uint64_t t_end = perf_t0(a.ctl) + a.run_ns;
	const unsigned lane = threadIdx.x & 31u;
	uint64_t rng = perf_mix64(a.seed ^ perf_mix64(((uint64_t)p.qi << 32) | p.slot));
	if (!rng)
		rng = 1;
	for (;;) {
		int go = 0;
		uint64_t slba = 0;
		int rd = 1;
		if (p.gl == 0) {
			go = gpunvme_dev_now() < t_end && !gpunvme_dq_ld(&a.ctl->stop);
			if (go)
				perf_pick(&a, p.qi, &rng, &slba, &rd);
		}
		if (!__shfl_sync(p.gmask, go, p.leader))
			break;
		slba = __shfl_sync(p.gmask, slba, p.leader);
		rd = __shfl_sync(p.gmask, rd, p.leader);
		const uint64_t ts = gpunvme_dev_now();
		int rc = 0;
		if (p.gl < a.parts) {
			uint32_t nlb;
			uint64_t off;
			perf_part(&a, &p, &slba, &nlb, &off);
			const uint64_t deadline = ts + a.timeout_ns;
			struct gpunvme_dev_tag tag;
			rc = gpunvme_dev_submit(&a.q, p.qi, rd ? GPUNVME_CMD_READ : GPUNVME_CMD_WRITE, slba, nlb, &a.b,
						off, &tag, deadline);
			/* a failed submit left nothing to wait for (or the queue
			 * is marked broken); a successful one is consumed here,
			 * before the group barrier below, with pauses of at most
			 * 256 ns: the back-off of gpunvme_dev_wait grows to 16 us
			 * and would show in the latencies */
			if (rc == 0)
				rc = gpunvme_dev_wait_paced(&a.q, &tag, deadline, 256);
		}
		unsigned bad = __ballot_sync(p.gmask, rc != 0);
		int grc = __shfl_sync(p.gmask, rc, bad ? __ffs(bad) - 1 : lane);
		const uint64_t te = gpunvme_dev_now();
		if (p.gl == 0)
			perf_record(&a, p.qi, rd, ts, te, bad ? grc : 0, t_end);
	}
}

/* Write workloads send the buffer's content: random bytes, as the CPU perf. */
__global__ void perf_fill(uint64_t *p, uint64_t n, uint64_t seed)
{
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
		p[i] = perf_mix64(seed ^ i);
}

/* ---- host ---------------------------------------------------------------------- */

/* The engine's own last error (perf_gpu_error): the library's
 * gpunvme_last_error() is the library's to set, and the CLI runs one
 * engine at a time, so one buffer is enough. */
static char perf_err[512];

extern "C" const char *perf_gpu_error(void)
{
	return perf_err;
}

__attribute__((format(printf, 2, 3))) static int perf_fail(int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(perf_err, sizeof(perf_err), fmt, ap);
	va_end(ap);
	return rc;
}

/* A library call failed with rc: pass its message on. */
static int lib_fail(int rc)
{
	const char *le = gpunvme_last_error();
	return perf_fail(rc, "%s", le && *le ? le : strerror(rc < 0 ? -rc : rc));
}

static int cuda_fail(cudaError_t e, const char *what)
{
	return perf_fail(-EIO, "%s: %s", what, cudaGetErrorString(e));
}

extern "C" int perf_gpu_probe(void)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		cudaGetLastError();
		/* no driver loaded reads as "driver version is insufficient":
		 * say what the user has to know first */
		if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice)
			return perf_fail(-ENODEV, "no CUDA GPU: no NVIDIA GPU or driver found (CUDA: %s): run without "
						  "--gpu, or install the NVIDIA driver",
					 cudaGetErrorString(e));
		return perf_fail(-ENODEV, "no CUDA GPU: %s (cudaGetDeviceCount): run without --gpu, or check the "
					  "driver with nvidia-smi",
				 cudaGetErrorString(e));
	}
	if (n <= 0)
		return perf_fail(-ENODEV, "no CUDA GPU: no NVIDIA GPU or driver found (the CUDA runtime sees no "
					  "device): run without --gpu, or install the NVIDIA driver");
	return 0;
}

extern "C" const char *perf_gpu_strerror(int err, uint32_t timeout_ms, char *buf, size_t len)
{
	/* the library's text, and for a timeout the option that sets it */
	if (err == GPUNVME_DEV_ETIMEDOUT)
		snprintf(buf, len, "no completion within %u ms (--timeout)", timeout_ms);
	else
		snprintf(buf, len, "%s", gpunvme_gpu_status_str(err));
	return buf;
}

extern "C" void perf_gpu_result_free(struct perf_gpu_result *r)
{
	if (!r)
		return;
	free(r->hist);
	r->hist = NULL;
}

static uint32_t pow2_ceil(uint64_t x)
{
	uint32_t p = 1;
	while (p < x && p < 0x80000000u)
		p <<= 1;
	return p;
}

static uint64_t host_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

extern "C" int perf_gpu_run(struct gpunvme_ctrl *c, const struct perf_gpu_args *a, struct perf_gpu_result *r)
{
	int rc;
	cudaError_t ce;
	if (!c || !a || !r)
		return perf_fail(-EINVAL, "gpu perf: bad arguments");
	memset(r, 0, sizeof(*r));
	if (a->queues == 0 || a->depth == 0 || a->io_bytes == 0 || a->run_ns == 0 || a->timeout_ns == 0 ||
	    a->workload > PERF_GPU_RANDRW || a->mix > 100 || (a->tier != 1 && a->tier != 2) ||
	    a->mode > PERF_GPU_THREAD)
		return perf_fail(-EINVAL, "gpu perf: bad arguments");
	if ((rc = perf_gpu_probe()))
		return rc;
	int dev = 0;
	cudaGetDevice(&dev);
	cudaDeviceProp prop;
	if ((ce = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess)
		return cuda_fail(ce, "cudaGetDeviceProperties");
	memcpy(r->gpu_name, prop.name, sizeof(r->gpu_name) - 1); /* prop.name is 256 bytes */
	r->gpu_name[sizeof(r->gpu_name) - 1] = 0;

	struct gpunvme_ns_info ni;
	struct gpunvme_ctrl_info ci;
	if ((rc = gpunvme_ns_info(c, a->nsid, &ni)))
		return lib_fail(rc);
	if ((rc = gpunvme_ctrl_info(c, &ci)) < 0)
		return lib_fail(rc);
	if (a->io_bytes % ni.lba_size || a->io_bytes / ni.lba_size > 0xffffffffull)
		return perf_fail(-EINVAL, "I/O size %llu is not a multiple of the %u-byte LBA size",
				 (unsigned long long)a->io_bytes, ni.lba_size);
	const uint64_t bpi = a->io_bytes / ni.lba_size;
	if (bpi > ni.nsze)
		return perf_fail(-EINVAL, "I/O size %llu is larger than namespace %u",
				 (unsigned long long)a->io_bytes, a->nsid);
	if (ni.max_blocks == 0)
		return perf_fail(-EINVAL, "namespace %u: no transfer size limit known", a->nsid);
	const uint64_t parts = (bpi + ni.max_blocks - 1) / ni.max_blocks;
	if (parts > 32)
		return perf_fail(-EINVAL, "an I/O of %llu bytes is %llu commands of at most %llu bytes (MDTS): "
					  "more than 32, the most the GPU path splits an I/O into",
				 (unsigned long long)a->io_bytes, (unsigned long long)parts,
				 (unsigned long long)ni.max_blocks * ni.lba_size);
	/* lanes per I/O slot: warp batches pack 32 / group slots into a warp;
	 * thread mode gives every slot a warp of its own (see the top) */
	const uint32_t group = a->mode == PERF_GPU_THREAD ? 32u : pow2_ceil(parts);
	/* entries: every command in flight at once plus the empty slot a full
	 * SQ keeps (NVMe 1.4 §4.1.1); gpunvme_gpu_queues_create caps it at
	 * CAP.MQES + 1, and with fewer entries the slots just wait for room */
	uint64_t want = (uint64_t)a->depth * parts + 1;
	uint32_t entries = 2;
	while (entries < want && (uint64_t)entries * 2 <= ci.mqes)
		entries *= 2;
	const uint64_t buf_len = (uint64_t)a->queues * a->depth * a->io_bytes;
	const uint32_t warps_per_queue = (uint32_t)(((uint64_t)a->depth * group + 31) / 32);
	const uint64_t warps = (uint64_t)a->queues * warps_per_queue;
	const uint64_t blocks64 = (warps * 32 + PERF_TPB - 1) / PERF_TPB;

	/* every block must be resident at once: a block that started late
	 * would find the window over */
	int per_sm = 0;
	ce = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
		&per_sm, a->mode == PERF_GPU_WARP ? perf_kernel_warp : perf_kernel_thread, PERF_TPB, 0);
	if (ce != cudaSuccess)
		return cuda_fail(ce, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
	const uint64_t resident = (uint64_t)per_sm * prop.multiProcessorCount;
	if (blocks64 > resident)
		return perf_fail(-EINVAL, "%llu GPU threads (queues x depth x %u lanes per I/O) do not fit the "
					  "GPU at once (%llu threads): use fewer queues or a lower depth",
				 (unsigned long long)(blocks64 * PERF_TPB), group,
				 (unsigned long long)(resident * PERF_TPB));
	r->queues = a->queues;
	r->threads = (uint32_t)(warps * 32);
	r->blocks = (uint32_t)blocks64;
	r->threads_per_block = PERF_TPB;
	r->queue_entries = entries;
	r->cmds_per_io = (uint32_t)parts;
	r->lanes_per_io = group;
	r->hist = (struct gpunvme_perf_hist *)calloc(2 * (size_t)a->queues, sizeof(*r->hist));
	if (!r->hist)
		return perf_fail(-ENOMEM, "out of memory");

	struct gpunvme_gpu_queues *g = NULL;
	struct gpunvme_gpu_buf *b = NULL;
	void *dma = NULL, *dptr = NULL;
	struct perf_ctl *dctl = NULL;
	unsigned long long *dseq = NULL;
	struct gpunvme_perf_hist *dhist = NULL;
	cudaEvent_t e0 = NULL, e1 = NULL;
	const size_t hist_bytes = 2 * (size_t)a->queues * sizeof(struct gpunvme_perf_hist);

	if ((rc = gpunvme_gpu_queues_create(c, a->nsid, a->queues, entries, &g))) {
		lib_fail(rc);
		goto out;
	}
	if (a->tier == 1) {
		dma = gpunvme_dma_alloc(c, buf_len);
		if (!dma) {
			rc = perf_fail(-ENOMEM, "cannot allocate %llu bytes of DMA memory for the I/O buffers",
				       (unsigned long long)buf_len);
			goto out;
		}
		if ((rc = gpunvme_gpu_buf_host(g, dma, buf_len, &b, &dptr))) {
			lib_fail(rc);
			goto out;
		}
	} else if ((rc = gpunvme_gpu_buf_device(g, buf_len, &b, &dptr))) {
		lib_fail(rc);
		goto out;
	}
	if (a->workload != PERF_GPU_READ && a->workload != PERF_GPU_RANDREAD) {
		perf_fill<<<256, 256>>>((uint64_t *)dptr, buf_len / 8, a->seed);
		if ((ce = cudaGetLastError()) != cudaSuccess || (ce = cudaDeviceSynchronize()) != cudaSuccess) {
			rc = cuda_fail(ce, "filling the write buffers");
			goto out;
		}
	}

	/* state: counters zero, t_stop and every histogram's min at ~0 */
	{
		struct perf_ctl hctl;
		memset(&hctl, 0, sizeof(hctl));
		hctl.t_stop = ~0ull;
		for (uint32_t i = 0; i < 2 * a->queues; i++)
			r->hist[i].min = ~0ull;
		if ((ce = cudaMalloc((void **)&dctl, sizeof(hctl))) != cudaSuccess ||
		    (ce = cudaMalloc((void **)&dseq, a->queues * sizeof(*dseq))) != cudaSuccess ||
		    (ce = cudaMalloc((void **)&dhist, hist_bytes)) != cudaSuccess ||
		    (ce = cudaMemcpy(dctl, &hctl, sizeof(hctl), cudaMemcpyHostToDevice)) != cudaSuccess ||
		    (ce = cudaMemset(dseq, 0, a->queues * sizeof(*dseq))) != cudaSuccess ||
		    (ce = cudaMemcpy(dhist, r->hist, hist_bytes, cudaMemcpyHostToDevice)) != cudaSuccess ||
		    (ce = cudaEventCreate(&e0)) != cudaSuccess || (ce = cudaEventCreate(&e1)) != cudaSuccess) {
			rc = cuda_fail(ce, "GPU memory for the run's state");
			goto out;
		}
	}

	{
		struct perf_kargs k;
		memset(&k, 0, sizeof(k));
		k.q = *gpunvme_gpu_queues_desc(g);
		k.b = *gpunvme_gpu_buf_desc(b);
		k.ctl = dctl;
		k.seq = dseq;
		k.hist = dhist;
		k.run_ns = a->run_ns;
		k.timeout_ns = a->timeout_ns;
		k.seed = a->seed ? a->seed : 0x9E3779B97F4A7C15ull;
		k.nios = ni.nsze / bpi;
		k.io_bytes = a->io_bytes;
		k.blocks_per_io = (uint32_t)bpi;
		k.parts = (uint32_t)parts;
		k.group = group;
		k.depth = a->depth;
		k.warps_per_queue = warps_per_queue;
		k.workload = a->workload;
		k.mix = a->mix;
		cudaEventRecord(e0);
		if (a->mode == PERF_GPU_WARP)
			perf_kernel_warp<<<(unsigned)blocks64, PERF_TPB>>>(k);
		else
			perf_kernel_thread<<<(unsigned)blocks64, PERF_TPB>>>(k);
		if ((ce = cudaGetLastError()) != cudaSuccess) {
			rc = cuda_fail(ce, "launching the perf kernel");
			goto out;
		}
		cudaEventRecord(e1);
	}

	/* Wait without spinning a core (the emulator's workers may need every
	 * one) and without trusting the kernel blindly: its own waits end by
	 * run + timeout; give it that twice over plus 10 s. */
	{
		const uint64_t limit = a->run_ns + 2 * a->timeout_ns + 10000000000ull;
		const uint64_t t0 = host_now_ns();
		for (;;) {
			ce = cudaEventQuery(e1);
			if (ce != cudaErrorNotReady)
				break;
			if (host_now_ns() - t0 > limit) {
				r->stuck = 1;
				/* the kernel may still touch queues and buffers:
				 * leave everything in place */
				return perf_fail(-ETIMEDOUT, "the GPU kernel did not finish within %.1f s",
						 (double)limit / 1e9);
			}
			struct timespec ts = {0, 1000000};
			nanosleep(&ts, NULL);
		}
		if (ce != cudaSuccess) {
			rc = cuda_fail(ce, "the perf kernel");
			goto out;
		}
	}
	{
		float ms = 0;
		cudaEventElapsedTime(&ms, e0, e1);
		r->kernel_s = ms / 1e3;
		struct perf_ctl hctl;
		if ((ce = cudaMemcpy(&hctl, dctl, sizeof(hctl), cudaMemcpyDeviceToHost)) != cudaSuccess ||
		    (ce = cudaMemcpy(r->hist, dhist, hist_bytes, cudaMemcpyDeviceToHost)) != cudaSuccess) {
			rc = cuda_fail(ce, "reading the results");
			goto out;
		}
		for (uint32_t i = 0; i < 2 * a->queues; i++)
			if (r->hist[i].count == 0)
				r->hist[i].min = 0;
		uint64_t end = hctl.t0 + a->run_ns;
		if (hctl.t_stop < end)
			end = hctl.t_stop;
		r->elapsed_s = hctl.t0 && end > hctl.t0 ? (double)(end - hctl.t0) / 1e9 : 0.0;
		r->late = hctl.late;
		r->errors = hctl.errors;
		r->first_err = hctl.first_err;
		r->first_queue = hctl.first_queue;
	}
	rc = 0;
out:
	if (e0)
		cudaEventDestroy(e0);
	if (e1)
		cudaEventDestroy(e1);
	cudaFree(dctl);
	cudaFree(dseq);
	cudaFree(dhist);
	gpunvme_gpu_buf_free(b);
	if (dma)
		gpunvme_dma_free(c, dma);
	gpunvme_gpu_queues_destroy(g);
	return rc;
}
