/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The emulator's GPU side: its copy engine and its namespace pinning.
 *
 * The emulator is a controller in the same process: it cannot master a bus
 * into GPU memory, so the data of Tier 2 commands moves with the GPU's copy
 * engine (cudaMemcpyAsync on one stream per emulator lane, include/gpunvme/
 * emu.h's struct gpunvme_emu_gpu_ops). This file implements the emu: bus's
 * device-memory DMA engine (struct gpunvme_devmem_engine_ops, bus.h) with
 * it: the GPU data path attaches one engine per GPU queue set, in its GPU
 * context, and knows nothing else of the emulator. The emu: bus finds the
 * engine through a weak reference (src/bus/emu.c); the gpunvme_emu_cuda
 * library target pulls this file into every program that links the GPU
 * data path (CMakeLists.txt: --undefined=gpunvme_emu_cuda_engine).
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/stream_wait.cuh"
#include "emu_cuda/dma_client.h"
#include "emu_cuda/stage_ring.h"
#include "gpunvme/emu.h"

extern "C" {
#include "bus/bus.h"
}

#define MAX_LANES 257

/*
 * Pinned staging for reads from pageable memory (an image file's namespace,
 * a RAM namespace too large to pin). A copy from pageable memory goes
 * through the driver's own staging buffers, which held an emulated Tier 2
 * load from an image to ~4 GB/s with eight workers on the H100 machine;
 * through pinned staging of our own, 14-15 GB/s (bench/results/
 * emu-stage-2026-11-27), and with the staged pieces merged into runs
 * (stage_ring.h) 22 GB/s on the H200 against 17 piece by piece
 * (bench/results/emu-file-2026-11-28; merging is off here by default for
 * now, see stage_alloc). Each lane owns a ring; a read is
 * filled into it (pread from the image file, or memcpy) and queued from
 * there. Writes (GPU memory to the namespace) still go to the driver as
 * they are: no GPU test writes Tier 2 data to an image file yet, so a
 * staged write path would be unchecked.
 */
#define STAGE_TOTAL (32u << 20)      /* pinned bytes per queue set at most */
#define STAGE_LANE_MAX (4u << 20)    /* per lane at most */
#define STAGE_LANE_MIN (256u << 10)  /* per lane at least */
#define STAGE_PIECE_MAX (512u << 10) /* one fill (pread) at most */

/* One queue set's copy lanes: the handle the emu: bus is given is &ops
 * (its map_device passes it to gpunvme_emu_dma_map_gpu), ops.ctx is this. */
struct emu_lanes {
	struct gpunvme_emu_gpu_ops ops;
	unsigned lanes;
	cudaStream_t lane_stream[MAX_LANES];
	bool batch_refused;              /* cudaMemcpyBatchAsync refused once: copy piece by piece */
	bool no2d;                       /* GPUNVME_EMU_2D=0: no strided (2D) copies (a same-run baseline) */
	bool lane_timeout_said;          /* a lane copy timed out: said once on stderr */
	bool errs;                       /* GPUNVME_EMU_ERRORS=1: each failed CUDA call said (cuda_fail) */
	/* lane l's ring: its share of stage_mem (pinned, cudaHostAlloc;
	 * NULL: none could be had), its fences' events */
	uint8_t *stage_mem;  /* published with release once the rings are set (stage_alloc) */
	pthread_mutex_t stage_lock; /* one stage_alloc at a time (engine_map's threads) */
	struct stage_ring ring[MAX_LANES];
	cudaEvent_t fence_ev[MAX_LANES][STAGE_RING_FENCES];
	/* The emulator's DMA process (dma_proto.h), NULL: copies stay here.
	 * This engine's lanes are its lanes [edma_first, edma_first +
	 * lanes); a range in an allocation it could not map is copied here
	 * (said once per process, say_inproc). */
	struct edma *edma;
	unsigned edma_first;
	bool inproc_pending[MAX_LANES]; /* lane l queued copies here since its last sync */
	/* GPUNVME_EMU_PROFILE=1: ns lane l spent in pread into its own
	 * staging (the DMA process's lanes count theirs in dma_client.cu);
	 * printed at detach beside the emulator's per-worker lines */
	bool prof;
	uint64_t pread_ns[MAX_LANES];
	/* the copies lane l queued here, those of them 2D and their rows
	 * (lane-private counts, printed with the profile) */
	uint64_t ncopy[MAX_LANES], ncopy2d[MAX_LANES], nrows2d[MAX_LANES];
};

/* ---- which host memory is pinned ---------------------------------------- */

/* The ranges this engine pinned (engine_pin_backing): a lane copies them
 * directly, anything else through its staging ring. A handful per process
 * (one per emulated namespace served at Tier 2); read on every copy, so a
 * reader-writer lock. */
#define MAX_PINNED 64
static pthread_rwlock_t pinned_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct {
	uintptr_t lo, hi;
} pinned_range[MAX_PINNED];
static unsigned n_pinned;

static bool pinned_add(void *p, size_t len)
{
	bool ok = false;
	pthread_rwlock_wrlock(&pinned_lock);
	if (n_pinned < MAX_PINNED) {
		pinned_range[n_pinned].lo = (uintptr_t)p;
		pinned_range[n_pinned].hi = (uintptr_t)p + len;
		n_pinned++;
		ok = true;
	}
	pthread_rwlock_unlock(&pinned_lock);
	return ok;
}

static void pinned_del(void *p)
{
	pthread_rwlock_wrlock(&pinned_lock);
	for (unsigned i = 0; i < n_pinned; i++)
		if (pinned_range[i].lo == (uintptr_t)p) {
			pinned_range[i] = pinned_range[--n_pinned];
			break;
		}
	pthread_rwlock_unlock(&pinned_lock);
}

static bool pinned_has(const void *p, size_t len)
{
	const uintptr_t a = (uintptr_t)p, b = a + len;
	bool in = false;
	pthread_rwlock_rdlock(&pinned_lock);
	for (unsigned i = 0; i < n_pinned && !in; i++)
		in = a >= pinned_range[i].lo && b <= pinned_range[i].hi;
	pthread_rwlock_unlock(&pinned_lock);
	return in;
}

static int cuda_err(cudaError_t e, const char *what)
{
	return gpunvme_set_error(-EIO, "%s: %s", what, cudaGetErrorString(e));
}

/* ---- GPU memory for the emulator: copies on one stream per emulator lane ---- */

/* GPUNVME_LANE_TRACE=1: a lane call that took over 200 ms is reported (a
 * copy held up behind work that waits for the read kernels, docs/loader.md
 * Limits); the environment is read only then, off the fast path. */
static void lane_trace(const char *what, unsigned lane, size_t len, uint64_t t0)
{
	uint64_t dt = gpunvme_now_ns() - t0;
	if (dt > 200000000ull && getenv("GPUNVME_LANE_TRACE"))
		fprintf(stderr, "LANE_TRACE %s lane %u len %zu took %.3f s\n", what, lane, len, (double)dt / 1e9);
}

/* A CUDA call of lane `lane` failed: -EIO for the emulator, which fails
 * the command with a Data Transfer Error and says its step; under
 * GPUNVME_EMU_ERRORS=1 (docs/emulator.md) the call and CUDA's own error
 * are said here, since -EIO alone does not tell a bad address from an
 * error left by an earlier fault in this context (session 21's -j4 run had
 * one with nothing more to read). */
static int cuda_fail(const struct emu_lanes *g, unsigned lane, const char *call, cudaError_t e, uint64_t dev,
		     size_t len)
{
	if (g->errs)
		fprintf(stderr, "gpunvme-emu: lane %u: %s of %zu bytes at 0x%llx failed: %s (%s)\n", lane, call, len,
			(unsigned long long)dev, cudaGetErrorName(e), cudaGetErrorString(e));
	return -EIO;
}

/* stage_ring.h's calls, on the lane's stream */
static int ring_copy(void *ctx, unsigned lane, uint64_t dev, const uint8_t *host, size_t len)
{
	struct emu_lanes *g = (struct emu_lanes *)ctx;
	cudaError_t e = cudaMemcpyAsync((void *)(uintptr_t)dev, host, len, cudaMemcpyHostToDevice, g->lane_stream[lane]);
	g->ncopy[lane]++;
	return e == cudaSuccess ? 0 : cuda_fail(g, lane, "a staged copy", e, dev, len);
}

static int ring_fence(void *ctx, unsigned lane, unsigned k)
{
	/* the event follows the copies queued so far on the lane's stream:
	 * complete once they have read their staging bytes */
	struct emu_lanes *g = (struct emu_lanes *)ctx;
	cudaError_t e = cudaEventRecord(g->fence_ev[lane][k], g->lane_stream[lane]);
	return e == cudaSuccess ? 0 : cuda_fail(g, lane, "a staging fence's record", e, 0, 0);
}

static int ring_wait(void *ctx, unsigned lane, unsigned k)
{
	struct emu_lanes *g = (struct emu_lanes *)ctx;
	cudaError_t e = gpunvme_event_wait(g->fence_ev[lane][k], GPUNVME_STREAM_WAIT_NS);
	return e == cudaSuccess ? 0 : e == cudaErrorNotReady ? -ETIMEDOUT : cuda_fail(g, lane, "a staging fence's wait", e, 0, 0);
}

/* A strided run (stage_ring.h): one 2D copy of consecutive ring rows */
static int ring_copy2d(void *ctx, unsigned lane, uint64_t dev, uint64_t pitch, const uint8_t *host, size_t width,
		       size_t rows)
{
	struct emu_lanes *g = (struct emu_lanes *)ctx;
	cudaError_t e = cudaMemcpy2DAsync((void *)(uintptr_t)dev, pitch, host, width, width, rows,
					  cudaMemcpyHostToDevice, g->lane_stream[lane]);
	g->ncopy[lane]++;
	g->ncopy2d[lane]++;
	g->nrows2d[lane] += rows;
	return e == cudaSuccess ? 0 : cuda_fail(g, lane, "a staged 2D copy", e, dev, width * rows);
}

static const struct stage_ring_ops ring_ops = { ring_copy, ring_fence, ring_wait, ring_copy2d };
/* GPUNVME_EMU_2D=0: strided runs go row by row (a same-run baseline) */
static const struct stage_ring_ops ring_ops_1d = { ring_copy, ring_fence, ring_wait, NULL };

/* The staging memory once stage_alloc has published it, else NULL */
static uint8_t *stage_of(struct emu_lanes *g)
{
	return __atomic_load_n(&g->stage_mem, __ATOMIC_ACQUIRE);
}

/* len bytes from host to GPU memory through the lane's staging ring, a
 * piece at a time, queued by the ring (stage_ring.h) by the lane's sync at
 * the latest, as copy() allows. The bytes come from file fd at off where
 * fd >= 0 (an image file's namespace: pread, no page faults on its
 * mapping), else from host. */
static int lane_read_staged(struct emu_lanes *g, unsigned lane, uint64_t dev, uint64_t dev_end, const uint8_t *host,
			    int fd, uint64_t off, size_t len)
{
	struct stage_ring *r = &g->ring[lane];
	for (size_t d = 0; d < len;) {
		const size_t n = len - d < r->piece ? len - d : r->piece;
		uint8_t *st;
		uint64_t at;
		int rc = stage_ring_take(r, n, &st, &at);
		if (rc)
			return rc;
		/* a failed fill leaves its bytes taken and out of any run: the
		 * next fence covers them, and the command fails */
		const uint64_t p0 = g->prof ? gpunvme_now_ns() : 0;
		rc = fd < 0 ? (memcpy(st, host + d, n), 0) : gpunvme_pread_all(fd, st, n, off + d);
		if (p0)
			g->pread_ns[lane] += gpunvme_now_ns() - p0;
		if (rc || (rc = stage_ring_add(r, dev + d, dev_end, at, n)))
			return rc;
		d += n;
	}
	return 0;
}

/* Copies that stay in the application's context can be held up by its
 * blocking CUDA calls (dma_proto.h): said once per process, with why. */
static void say_inproc(const char *why)
{
	static int said;
	if (__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		return;
	/* a value the user set is kept (gpu_queues.cu); with it not EAGER, a
	 * lazily loaded kernel's first launch may wait for a read kernel that
	 * waits for these copies */
	const char *ml = getenv("CUDA_MODULE_LOADING");
	const bool lazy = !ml || strcmp(ml, "EAGER");
	fprintf(stderr, "gpunvme: the emulator's copies to GPU memory run in this process's CUDA context (%s): "
			"a blocking CUDA call here (a copy into pageable memory, such as torch's .cpu()) "
			"while GPU reads are in flight can hold them up until the reads time out%s\n",
		why,
		lazy ? ", and so can a kernel's first launch with CUDA_MODULE_LOADING not EAGER "
		       "(set CUDA_MODULE_LOADING=EAGER before the first CUDA call)"
		     : "");
}

/* One copy of the lane: host memory, or for a read the bytes of file fd at
 * off (fd >= 0: an image file's namespace, also mapped at host), read into
 * staging (the DMA process's or the lane's own) with pread; straight from
 * host where it is pinned. dev_end: the end of dev's GPU region (emu.h);
 * 0 where not known: the piece is then a region of its own, merged with
 * no other. */
static int lane_copy_src(struct emu_lanes *g, unsigned lane, uint64_t dev, uint64_t dev_end, void *host, int fd,
			 uint64_t off, size_t len, int to_gpu)
{
	if (lane >= g->lanes)
		return -EINVAL;
	if (!dev_end)
		dev_end = dev + len;
	uint64_t t0 = gpunvme_now_ns();
	char why[200];
	if (g->edma && edma_mapped(g->edma, dev, len, why, sizeof(why))) {
		int rc = fd >= 0 ? edma_copy_file(g->edma, g->edma_first + lane, dev, fd, off, len)
				 : edma_copy(g->edma, g->edma_first + lane, dev, host, len, to_gpu);
		lane_trace("process copy", lane, len, t0);
		return rc;
	}
	if (g->edma && why[0])
		say_inproc(why);
	g->inproc_pending[lane] = true;
	if (to_gpu && stage_of(g) && !pinned_has(host, len)) {
		int rc = lane_read_staged(g, lane, dev, dev_end, (const uint8_t *)host, fd, off, len);
		lane_trace("staged copy", lane, len, t0);
		return rc;
	}
	if (to_gpu && fd >= 0) {
		/* no staging here (the DMA process refused this allocation
		 * after its map was sent, and this thread may not allocate
		 * pinned memory, stage_alloc says why): still pread, never the
		 * mapping, through a bounce the copy is done with on return
		 * (a copy from pageable memory stages it before returning) */
		uint8_t *tmp = (uint8_t *)malloc(len);
		int rc = tmp ? gpunvme_pread_all(fd, tmp, len, off) : -ENOMEM;
		cudaError_t e = rc ? cudaSuccess
				   : cudaMemcpyAsync((void *)dev, tmp, len, cudaMemcpyHostToDevice, g->lane_stream[lane]);
		if (e != cudaSuccess)
			rc = cuda_fail(g, lane, "a bounced copy", e, dev, len);
		free(tmp);
		lane_trace("bounced copy", lane, len, t0);
		return rc;
	}
	cudaError_t e = to_gpu ? cudaMemcpyAsync((void *)dev, host, len, cudaMemcpyHostToDevice, g->lane_stream[lane])
			       : cudaMemcpyAsync(host, (void *)dev, len, cudaMemcpyDeviceToHost, g->lane_stream[lane]);
	g->ncopy[lane]++;
	lane_trace("copy", lane, len, t0);
	return e == cudaSuccess ? 0 : cuda_fail(g, lane, to_gpu ? "a copy to the GPU" : "a copy from the GPU", e, dev, len);
}

/* emu.h copy(): its region is not given */
static int lane_copy(void *ctx, unsigned lane, uint64_t dev, void *host, size_t len, int to_gpu)
{
	return lane_copy_src((struct emu_lanes *)ctx, lane, dev, 0, host, -1, 0, len, to_gpu);
}

/* emu.h copy_from_file: a read from an image file's namespace */
static int lane_copy_from_file(void *ctx, unsigned lane, uint64_t dev, uint64_t dev_end, const void *host, int fd,
			       uint64_t off, size_t len)
{
	return lane_copy_src((struct emu_lanes *)ctx, lane, dev, dev_end, (void *)host, fd, off, len, 1);
}

/*
 * A worker's burst of copies in one call. With one cudaMemcpyAsync per
 * piece, the calls held four emulated controllers' 512 KiB commands to
 * ~65 k/s (33.5 GB/s; 45.8 batched, and one controller 42 -> 54 GB/s:
 * bench/results/md-raid0-2026-11-25). cudaMemcpyBatchAsync (CUDA 12.8)
 * takes them all at once; its copies run in stream order after earlier
 * work on the lane and in any order among themselves, which the emulator
 * allows (emu.h). Where the runtime lacks it, or refuses a batch, the
 * pieces go one by one.
 */
#define LANE_BATCH 128 /* pieces per call: the emulator's batch (EMU_BATCH_MAX) */

static int lane_copy_batch(void *ctx, unsigned lane, const struct gpunvme_emu_copy *v, unsigned n)
{
	struct emu_lanes *g = (struct emu_lanes *)ctx;
	if (lane >= g->lanes)
		return -EINVAL;
#if CUDART_VERSION >= 12080
	while (n > 1 && !g->batch_refused && !g->edma) {
		unsigned k = n < LANE_BATCH ? n : LANE_BATCH;
		/* a piece in pageable memory goes through staging: this group
		 * and the rest one by one */
		bool pageable = false;
		for (unsigned i = 0; i < k && !pageable; i++)
			pageable = v[i].to_gpu && stage_of(g) && !pinned_has(v[i].host, v[i].len);
		if (pageable)
			break;
		void *dst[LANE_BATCH];
		const void *src[LANE_BATCH];
		size_t len[LANE_BATCH], idx = 0, total = 0;
		for (unsigned i = 0; i < k; i++) {
			dst[i] = v[i].to_gpu ? (void *)(uintptr_t)v[i].dev_addr : v[i].host;
			src[i] = v[i].to_gpu ? (const void *)v[i].host : (const void *)(uintptr_t)v[i].dev_addr;
			len[i] = v[i].len;
			total += v[i].len;
		}
		struct cudaMemcpyAttributes at;
		memset(&at, 0, sizeof(at));
		at.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
		uint64_t t0 = gpunvme_now_ns();
#if CUDART_VERSION >= 13000
		cudaError_t e = cudaMemcpyBatchAsync(dst, src, len, k, &at, &idx, 1, g->lane_stream[lane]);
#else
		size_t fail = 0;
		cudaError_t e = cudaMemcpyBatchAsync(dst, src, len, k, &at, &idx, 1, &fail, g->lane_stream[lane]);
#endif
		lane_trace("batch", lane, total, t0);
		if (e != cudaSuccess) {
			/* refused (e.g. a host piece the runtime will not
			 * batch): these pieces one by one, and no more batches
			 * on this queue set. Should part of the group have
			 * been queued after all, its pieces move the same
			 * bytes to the same place twice, on the same stream:
			 * harmless */
			cudaGetLastError();
			g->batch_refused = true;
			break;
		}
		v += k;
		n -= k;
	}
#endif
	/* one by one, but pieces from pinned memory at fixed pitches in both
	 * memories as one copy (stage_copy_rows: an md member's consecutive
	 * chunks); anything else goes by lane_copy, which picks the path */
	for (unsigned i = 0, k; i < n; i += k) {
		uint64_t sp, dp;
		k = g->no2d || g->edma ? 1 : stage_copy_rows(v + i, n - i, &sp, &dp);
		if (k > 1 && !pinned_has(v[i].host, (size_t)((k - 1) * sp + v[i].len)))
			k = 1;
		if (k > 1) {
			g->inproc_pending[lane] = true;
			cudaError_t e = sp == v[i].len && dp == v[i].len
						? cudaMemcpyAsync((void *)(uintptr_t)v[i].dev_addr, v[i].host, k * v[i].len,
								  cudaMemcpyHostToDevice, g->lane_stream[lane])
						: cudaMemcpy2DAsync((void *)(uintptr_t)v[i].dev_addr, dp, v[i].host, sp,
								    v[i].len, k, cudaMemcpyHostToDevice,
								    g->lane_stream[lane]);
			if (e != cudaSuccess)
				return cuda_fail(g, lane, "a copy of consecutive rows", e, v[i].dev_addr, k * v[i].len);
			g->ncopy[lane]++;
			if (sp != v[i].len || dp != v[i].len) {
				g->ncopy2d[lane]++;
				g->nrows2d[lane] += k;
			}
			continue;
		}
		int rc = lane_copy_src(g, lane, v[i].dev_addr, v[i].dev_end, v[i].host, -1, 0, v[i].len, v[i].to_gpu);
		if (rc)
			return rc;
	}
	return 0;
}

static int lane_sync(void *ctx, unsigned lane)
{
	struct emu_lanes *g = (struct emu_lanes *)ctx;
	if (lane >= g->lanes)
		return -EINVAL;
	uint64_t t0 = gpunvme_now_ns();
	if (g->edma) {
		int rc = edma_sync(g->edma, g->edma_first + lane);
		lane_trace("process sync", lane, 0, t0);
		if (rc == -ETIMEDOUT && !g->lane_timeout_said) {
			g->lane_timeout_said = true;
			fprintf(stderr, "gpunvme: the emulator's DMA process did not finish its copies to GPU memory "
					"within %llu s; their commands fail with a data transfer error\n",
				GPUNVME_STREAM_WAIT_NS / 1000000000ull);
		}
		if (rc)
			return rc;
	}
	/* the lane's own stream only when it was used: a CUDA call from this
	 * thread is what the DMA process is there to avoid */
	if (!g->inproc_pending[lane])
		return 0;
	g->inproc_pending[lane] = false;
	/* the staged run too: the completions wait for its bytes */
	const bool staged = stage_of(g);
	if (staged && stage_ring_flush(&g->ring[lane]))
		return -EIO;
	cudaError_t e = gpunvme_stream_wait(g->lane_stream[lane], GPUNVME_STREAM_WAIT_NS);
	lane_trace("sync", lane, 0, t0);
	if (e == cudaSuccess && staged)
		stage_ring_idle(&g->ring[lane]);
	if (e == cudaErrorNotReady) {
		/* the commands fail with a data transfer error; say why once */
		if (!g->lane_timeout_said) {
			g->lane_timeout_said = true;
			fprintf(stderr, "gpunvme: the emulator's copies to GPU memory did not finish within %llu s (a "
					"stalled or faulted GPU context, or another process holding the GPU); their "
					"commands fail with a data transfer error\n",
				GPUNVME_STREAM_WAIT_NS / 1000000000ull);
		}
		return -ETIMEDOUT;
	}
	return e == cudaSuccess ? 0 : cuda_fail(g, lane, "the wait for the lane's copies", e, 0, 0);
}

/* ---- the emu: bus's device-memory DMA engine ----------------------------------- */

static void stage_free(struct emu_lanes *g)
{
	for (unsigned l = 0; l < g->lanes; l++)
		for (unsigned k = 0; k < STAGE_RING_FENCES; k++)
			if (g->fence_ev[l][k])
				cudaEventDestroy(g->fence_ev[l][k]);
	memset(g->fence_ev, 0, sizeof(g->fence_ev));
	if (g->stage_mem)
		cudaFreeHost(g->stage_mem);
	g->stage_mem = NULL;
}

/* The lanes' staging rings, allocated here, in the application's thread:
 * an emulator thread allocating pinned memory could wait behind the
 * application's CUDA calls. Without them (no pinned memory to be had),
 * pageable copies go to the driver as before: slower, never wrong. */
static void stage_alloc(struct emu_lanes *g)
{
	size_t per = STAGE_TOTAL / g->lanes;
	per = per > STAGE_LANE_MAX ? STAGE_LANE_MAX : per < STAGE_LANE_MIN ? STAGE_LANE_MIN : per;
	per &= ~(size_t)4095;
	void *mem = NULL;
	if (cudaHostAlloc(&mem, (size_t)g->lanes * per, cudaHostAllocDefault) != cudaSuccess) {
		cudaGetLastError();
		return;
	}
	uint8_t *stage = (uint8_t *)mem;
	/* Runs of up to 1 MiB, one fence each (a quarter of the ring at most,
	 * so that four fences cover it): 22 GB/s against 17 piece by piece on
	 * the H200 (bench/results/emu-file-2026-11-28), as in the DMA process
	 * (dma_client.cu). Read once, off the data path. */
	const size_t merge = emu_stage_merge_bytes(per / 4, 1u << 20);
	const struct stage_ring_ops *ops = g->no2d ? &ring_ops_1d : &ring_ops;
	bool ok = true;
	for (unsigned l = 0; l < g->lanes; l++) {
		stage_ring_init(&g->ring[l], ops, g, l, stage + (size_t)l * per, per, STAGE_PIECE_MAX, merge);
		for (unsigned k = 0; ok && k < STAGE_RING_FENCES; k++)
			ok = cudaEventCreateWithFlags(&g->fence_ev[l][k], cudaEventDisableTiming) == cudaSuccess;
	}
	if (!ok) {
		cudaGetLastError();
		g->stage_mem = stage;
		stage_free(g);
		return;
	}
	/* pairs with the lanes' acquire (stage_of): the rings and events are
	 * set before a lane sees the memory */
	__atomic_store_n(&g->stage_mem, stage, __ATOMIC_RELEASE);
}

/*
 * Where the copies run (emu.h, gpunvme_emu_copies): in the DMA process or
 * here. The process costs a second CUDA context: ~1.6 s more per
 * `gpunvme load` and 5x the time of eight processes loading at once
 * (gpu.multiproc) on the H100 machine (bench/results/emu-dma-2026-11-27),
 * so it is there for programs whose own threads block in CUDA while reads
 * are in flight: the Python module, for torch code, chooses it. Programs of
 * this project wait for reads with bounded waits on their own streams.
 */
static bool want_process(void)
{
	return gpunvme_emu_copies() == GPUNVME_EMU_COPIES_PROCESS;
}

/* Copy lanes for GPU memory behind the emulator (it moves Tier 2 data with
 * the copy engine, one stream per lane), created in the calling thread's
 * GPU context: the GPU queue set's, when it is created. */
static int engine_attach(struct gpunvme_bus *b, void **engine)
{
	struct gpunvme_emu *emu = gpunvme_bus_emu_get(b);
	if (!emu)
		return gpunvme_set_error(-EINVAL, "the emulator's copy engine: not an emu: bus");
	struct emu_lanes *g = (struct emu_lanes *)calloc(1, sizeof(*g));
	if (!g)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	g->lanes = gpunvme_emu_lanes(emu);
	if (g->lanes > MAX_LANES)
		g->lanes = MAX_LANES;
	for (unsigned i = 0; i < g->lanes; i++)
		cudaStreamCreateWithFlags(&g->lane_stream[i], cudaStreamNonBlocking);
	pthread_mutex_init(&g->stage_lock, NULL);
	const char *s2 = getenv("GPUNVME_EMU_2D");
	g->no2d = s2 && !strcmp(s2, "0");
	const char *pe = getenv("GPUNVME_EMU_PROFILE");
	g->prof = pe && !strcmp(pe, "1");
	const char *ee = getenv("GPUNVME_EMU_ERRORS");
	g->errs = ee && !strcmp(ee, "1");
	if (want_process()) {
		char why[200];
		g->edma = edma_get(why, sizeof(why));
		if (g->edma)
			edma_profile(g->edma, g->prof); /* before the open: it says its time */
		if (g->edma && edma_open(g->edma, g->lanes, &g->edma_first, why, sizeof(why)))
			g->edma = NULL;
		if (!g->edma) {
			say_inproc(why);
			/* said once above; GPUNVME_EMU_ERRORS=1 (docs/emulator.md):
			 * every queue set whose copies stay here, and why */
			if (g->errs)
				fprintf(stderr, "gpunvme-emu: a queue set of %u lanes copies in this process: %s\n", g->lanes,
					why);
		}
	}
	/* With the DMA process the copies use its staging; this engine's own
	 * (32 MiB pinned, then freed, on every queue set) is made when a map
	 * is refused and its copies stay here (engine_map) */
	if (!g->edma)
		stage_alloc(g);
	g->ops.copy = lane_copy;
	g->ops.sync = lane_sync;
	g->ops.ctx = g;
	g->ops.copy_batch = lane_copy_batch;
	g->ops.copy_from_file = lane_copy_from_file;
	/* Batched copies are off unless GPUNVME_COPY_BATCH=1. On the H100
	 * machine (driver 580.159, CUDA 13.0) the GPU fault soak under
	 * ctest -j4 failed only with them: the driver's channel error Xid 32
	 * (PBENTRY: a bad pushbuffer entry) on one of our channels, seen as
	 * "unspecified launch failure" (3 runs), and once a Tier 2 read that
	 * returned success with a torn block; with copies one by one, 0 of 5
	 * runs failed (bench/results/coherence-2026-11-27, runs 8-11). Until
	 * that is understood, correctness over the batch's speed (md arrays:
	 * 45.8 GB/s batched, 33.5 one by one). Read once here, off the data
	 * path. */
	const char *cb = getenv("GPUNVME_COPY_BATCH");
	g->batch_refused = !(cb && !strcmp(cb, "1"));
	*engine = &g->ops;
	return 0;
}

/* Tier 2 on the emulator: copies it queued must land before the GPU queues
 * look at their state in a recovery (bounded: a copy that never lands
 * leaves nothing to recover into). */
static int engine_sync(void *engine)
{
	struct emu_lanes *g = (struct emu_lanes *)((struct gpunvme_emu_gpu_ops *)engine)->ctx;
	for (unsigned i = 0; g->edma && i < g->lanes; i++) {
		/* a wait only: a failed copy is its lane's to report, with the
		 * commands of its pass (taken here, they would complete as good) */
		int rc = edma_drain(g->edma, g->edma_first + i);
		if (rc == -ETIMEDOUT)
			return gpunvme_set_error(rc, "GPU queues: the emulator's DMA process did not finish its copies "
						     "to GPU memory within %llu s; the GPU is not making progress "
						     "(check nvidia-smi and the kernel log for Xid errors)",
						 GPUNVME_STREAM_WAIT_NS / 1000000000ull);
		if (rc)
			return gpunvme_set_error(rc, "GPU queues: the emulator's DMA process exited; open the queues "
						     "again (GPUNVME_EMU_DMA=inproc keeps the copies in this process)");
	}
	for (unsigned i = 0; i < g->lanes; i++) {
		cudaError_t ce = gpunvme_stream_wait(g->lane_stream[i], GPUNVME_STREAM_WAIT_NS);
		if (ce == cudaErrorNotReady)
			return gpunvme_set_error(-ETIMEDOUT, "GPU queues: the emulator's copies to GPU memory did not "
							     "finish within %llu s; the GPU is not making progress "
							     "(check nvidia-smi and the kernel log for Xid errors)",
						 GPUNVME_STREAM_WAIT_NS / 1000000000ull);
		if (ce != cudaSuccess)
			return cuda_err(ce, "waiting for the emulator's copies to GPU memory");
	}
	return 0;
}

static void engine_detach(void *engine)
{
	if (!engine)
		return;
	struct emu_lanes *g = (struct emu_lanes *)((struct gpunvme_emu_gpu_ops *)engine)->ctx;
	/* the emulator has unmapped the queue set's memory (no copy is
	 * queued any more); what a lane's stream still runs ends before its
	 * staging is freed: cudaStreamDestroy does not wait */
	for (unsigned i = 0; i < g->lanes; i++) {
		gpunvme_stream_wait(g->lane_stream[i], GPUNVME_STREAM_WAIT_NS);
		cudaStreamDestroy(g->lane_stream[i]);
	}
	for (unsigned i = 0; g->prof && i < g->lanes; i++) {
		if (g->pread_ns[i])
			fprintf(stderr, "gpunvme-emu profile: lane %u: pread into staging %.3f s\n", i,
				(double)g->pread_ns[i] / 1e9);
		if (g->ncopy[i])
			fprintf(stderr, "gpunvme-emu profile: lane %u: %llu copies here, %llu of them 2D (%.1f rows each)\n",
				i, (unsigned long long)g->ncopy[i], (unsigned long long)g->ncopy2d[i],
				g->ncopy2d[i] ? (double)g->nrows2d[i] / (double)g->ncopy2d[i] : 0.0);
	}
	if (g->edma)
		edma_close(g->edma, g->edma_first, g->lanes);
	stage_free(g);
	pthread_mutex_destroy(&g->stage_lock);
	free(g);
}

/* ---- the emulator namespace's memory, pinned ------------------------------------ */

/* Copies from pageable memory go through the driver's staging buffers at a
 * fraction of the link rate (and synchronously), so the first GPU buffer
 * pins the emulator namespace's memory: only Tier 2 needs it, and pinning
 * gigabytes costs seconds. Best effort: a namespace too large to pin still
 * works, slower; someone else's pin is left alone. */
static void unpin_host(void *p)
{
	pinned_del(p);
	cudaHostUnregister(p);
}

/* The caller keeps the pin with the controller (gpunvme_ctrl_keep_pinned),
 * so that every loader after the first finds the namespace pinned: a
 * loader per Python load paid 0.34 s of pinning and 0.15 s of unpinning for
 * a 9 GiB image, twice its 0.18 s of reading. kept is the range the
 * controller keeps already: not pinned again. */
static void engine_pin_backing(struct gpunvme_bus *b, uint32_t nsid, const void *kept, void **pinned,
			       void (**unpin)(void *p))
{
	void *nsmem;
	size_t nslen;
	*pinned = NULL;
	*unpin = NULL;
	struct gpunvme_emu *emu = gpunvme_bus_emu_get(b);
	/* An image file's mapping is not pinned: pinning page-cache pages
	 * costs time and memory in proportion to the image (seconds for a
	 * big one, at open) and holds the pages for the process's life; its
	 * copies go through the lanes' staging rings instead. */
	if (!emu || gpunvme_emu_ns_backing(emu, nsid) != GPUNVME_EMU_BACK_RAM ||
	    gpunvme_emu_ns_memory(emu, nsid, &nsmem, &nslen))
		return;
	/* the DMA process copies from its own staging: a pin here would cost
	 * seconds for a big namespace and buy nothing (where the process
	 * cannot start, the copies go through this process's staging rings) */
	if (want_process())
		return;
	if (kept == nsmem)
		return;
	if (cudaHostRegister(nsmem, nslen, cudaHostRegisterDefault) != cudaSuccess) {
		cudaGetLastError(); /* clear the error: the copies still work, staged */
		return;
	}
	if (!pinned_add(nsmem, nslen)) {
		/* more pinned namespaces than the table holds: this one's
		 * copies go staged, so its pin buys nothing */
		cudaHostUnregister(nsmem);
		return;
	}
	*pinned = nsmem;
	*unpin = unpin_host;
}

/* ---- GPU memory for the DMA process ---- */

/* In the mapping thread (the application's): the allocation is opened in
 * the DMA process from its IPC handle. Memory CUDA will not share that way
 * (cuMemCreate's, a memory pool's) is copied here, said once. */
static int engine_map(void *engine, uint64_t addr, size_t len)
{
	struct emu_lanes *g = (struct emu_lanes *)((struct gpunvme_emu_gpu_ops *)engine)->ctx;
	if (!g->edma)
		return 0;
	char why[200];
	if (edma_map(g->edma, addr, len, why, sizeof(why)) == 0)
		return 1;
	/* its copies stay here: this thread (the application's) makes the
	 * staging they go through, once */
	pthread_mutex_lock(&g->stage_lock);
	if (!stage_of(g))
		stage_alloc(g);
	pthread_mutex_unlock(&g->stage_lock);
	char what[300];
	snprintf(what, sizeof(what), "GPU memory at 0x%llx cannot be shared with the emulator's DMA process: %s",
		 (unsigned long long)addr, why);
	say_inproc(what);
	return 0;
}

static void engine_unmap(void *engine, uint64_t addr)
{
	struct emu_lanes *g = (struct emu_lanes *)((struct gpunvme_emu_gpu_ops *)engine)->ctx;
	if (g->edma)
		edma_unmap(g->edma, addr);
}

/* Found by the emu: bus through a weak reference (src/bus/emu.c). */
extern "C" const struct gpunvme_devmem_engine_ops gpunvme_emu_cuda_engine = {
	engine_attach, engine_sync, engine_detach, engine_pin_backing, engine_map, engine_unmap,
};
