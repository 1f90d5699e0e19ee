/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Benchmark 2: sequential bandwidth into GPU memory, this project against
 * the usual ways of getting file bytes onto a GPU, same bytes, same run
 * (bench/gpu_bw.sh runs every method and writes the CSV and table).
 *
 *   bench_gpu_bw -m emu    [-s BYTES] [-c CHUNKS] [-w WORKERS] [-Q QMULS] [-d DEPTH]
 *   bench_gpu_bw -m memcpy [-s BYTES] [-c CHUNKS]
 *   bench_gpu_bw -m lanes  [-s BYTES] [-c CHUNKS] [-w LANES] [-d GROUP]
 *   bench_gpu_bw -m mkfile -f FILE [-s BYTES]
 *   bench_gpu_bw -m pread  -f FILE [-s BYTES] [-c CHUNKS] [-w THREADS] [-Q BUFFERS]
 *   bench_gpu_bw -m cufile -f FILE [-s BYTES] [-c CHUNKS] [-w THREADS]
 *   common: -r REPS (3), -T TIMEOUT_S (60), -H (print the CSV header first)
 * Lists are comma-separated; sizes take K/M/G suffixes (powers of 1024).
 *
 * Methods:
 *  emu     this project: an emulated RAM namespace (emu:ram, 4 KiB blocks,
 *          MDTS 9 = 2 MiB commands) holding the pattern, read in full into a
 *          Tier-2 GPU buffer (gpunvme_gpu_buf_device) by GPU threads: warps
 *          take 32 consecutive chunks at a time and submit them as one batch
 *          (gpunvme_dev_rw_lanes) on their queue pair; the emulator's workers
 *          move the data with the copy engine (one CUDA stream per worker).
 *          Sweeps chunk (= command) size, emulator workers W and queue
 *          pairs (W x each of QMULS). Also one row per W through the
 *          library's own gpunvme_gpu_read_async (MDTS-sized commands).
 *  memcpy  cudaMemcpyAsync host to device from one pinned buffer holding
 *          all the bytes, in chunks of CHUNK on one stream: the link's rate.
 *  lanes   md's copy pattern without the emulator: LANES host threads (the
 *          members' workers), each with its own stream and a pinned source
 *          holding its chunks back to back (a member's namespace); chunk j
 *          of lane l lands at (j * LANES + l) * CHUNK (RAID0). A lane copies
 *          GROUP chunks (a worker's pass), waits for them, and goes on, in
 *          three ways, one row each: a cudaMemcpyAsync per chunk (what the
 *          emulator does), one cudaMemcpyBatchAsync per group, and one
 *          cudaMemcpy2DAsync per group (rows of CHUNK at a pitch of LANES x
 *          CHUNK: a member's consecutive chunks as one strided copy). Says
 *          whether fewer, strided copies lift md at 512 KiB chunks
 *          (bench/EMU_NOTES.md, session 17).
 *  pread   the file (page-cached: read once before timing) through THREADS
 *          CPU threads, each with its own stream and BUFFERS pinned staging
 *          buffers of CHUNK bytes: pread into a free buffer, cudaMemcpyAsync
 *          it to its place, an event says when the buffer is free again.
 *  cufile  cuFile (GPUDirect Storage) cuFileRead of CHUNK pieces straight
 *          into the GPU buffer, THREADS CPU threads; the file is opened
 *          without O_DIRECT, so compat mode reads it from the page cache
 *          too. The mode in force is reported (stderr and the CSV note).
 *          Built only when the toolkit has cuFile (GPUNVME_HAVE_CUFILE).
 *
 * Every byte is checked: the destination is poisoned before each run and a
 * kernel compares every 64-bit word with the pattern (splitmix64 of the
 * word's index) afterwards; "verified" says how many words differed.
 *
 * Output: CSV on stdout, one line per configuration:
 *   method,chunk_bytes,workers,queues,bytes,seconds,gb_per_s,verified,reps,best_gb_per_s,note
 * seconds is the median of REPS runs, gb_per_s = bytes / seconds / 1e9,
 * best_gb_per_s from the fastest run. Progress and notes go to stderr.
 *
 * The limit, counted first: everything here crosses PCIe host to device
 * (Gen5 x16 on the H100: 64 GB/s raw per direction, ~55-57 GB/s after
 * TLP/DLLP overhead at 256-byte payloads). The cudaMemcpy pinned baseline
 * measured once on this H100 was 54.9 GB/s, so 8 GiB take >= 0.156 s. The
 * emulator's copies are cudaMemcpyAsync calls too, so it can reach that
 * rate only if enough copies are in flight: a 128 KiB copy costs ~5 us of
 * issue time on one stream (~26 GB/s per stream at most), hence one stream
 * per emulator worker; 2 MiB copies amortise that 16 times better. The
 * pread path adds a CPU copy from the page cache (~5-10 GB/s per thread).
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef GPUNVME_HAVE_CUFILE
#include <cufile.h>
#endif

#include "gpunvme/device.cuh"
#include "ctrl/ctrl_emu.h" /* the emulator behind the controller */
#include "gpunvme/emu.h"
#include "gpunvme/gpu.h"
#include "gpunvme/gpunvme.h"

#define MAXL 16          /* entries per list option */
#define MAX_REPS 16
#define SEED 0x5EEDB0B5C0FFEE11ull

static struct {
	const char *method;
	const char *file;
	uint64_t bytes;
	uint64_t chunks[MAXL];
	unsigned nchunks;
	uint32_t workers[MAXL];
	unsigned nworkers;
	uint32_t qmul[MAXL];
	unsigned nqmul;
	uint32_t depth;
	unsigned reps;
	double timeout_s;
	bool foreign;      /* -F: the file is not the pattern (e.g. a model file):
	                      read it, skip the checks (bench/model_load.sh) */
} o;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define CK(x)                                                                                              \
	do {                                                                                               \
		cudaError_t e_ = (x);                                                                      \
		if (e_ != cudaSuccess) {                                                                   \
			fprintf(stderr, "bench_gpu_bw: %s:%d: %s: %s\n", __FILE__, __LINE__, #x,           \
				cudaGetErrorString(e_));                                                   \
			return 1;                                                                          \
		}                                                                                          \
	} while (0)

/* ---- the pattern: word i of the data is splitmix64(i ^ SEED) -------------------- */

__host__ __device__ static inline uint64_t pat(uint64_t i)
{
	uint64_t z = (i ^ SEED) + 0x9E3779B97F4A7C15ull;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

struct fill_job {
	uint64_t *p;
	uint64_t w0, n;
};

static void *fill_main(void *arg)
{
	struct fill_job *j = (struct fill_job *)arg;
	for (uint64_t i = 0; i < j->n; i++)
		j->p[i] = pat(j->w0 + i);
	return NULL;
}

/* words [w0, w0 + n) of the pattern into p, on every core */
static void fill_pattern(uint64_t *p, uint64_t w0, uint64_t n)
{
	long nc = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned nt = nc < 1 ? 1 : nc > 64 ? 64 : (unsigned)nc;
	pthread_t th[64];
	bool started[64];
	struct fill_job jobs[64];
	for (unsigned t = 0; t < nt; t++) {
		uint64_t a = n * t / nt, b = n * (t + 1) / nt;
		jobs[t].p = p + a;
		jobs[t].w0 = w0 + a;
		jobs[t].n = b - a;
		started[t] = pthread_create(&th[t], NULL, fill_main, &jobs[t]) == 0;
		if (!started[t])
			fill_main(&jobs[t]); /* no thread: do it here */
	}
	for (unsigned t = 0; t < nt; t++)
		if (started[t])
			pthread_join(th[t], NULL);
}

__global__ void k_verify(const uint64_t *p, uint64_t n, uint64_t w0, unsigned long long *bad)
{
	unsigned long long mine = 0;
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
		mine += p[i] != pat(w0 + i);
	if (mine)
		atomicAdd(bad, mine);
}

static unsigned long long *d_bad;

/* Words of dst that differ from the pattern (every word), or -1. */
#define NOT_CHECKED (-2ll)
static long long verify(const void *dst, uint64_t bytes)
{
	unsigned long long bad = 0;
	if (o.foreign)
		return NOT_CHECKED;
	if (cudaMemset(d_bad, 0, sizeof(*d_bad)) != cudaSuccess)
		return -1;
	k_verify<<<1024, 256>>>((const uint64_t *)dst, bytes / 8, 0, d_bad);
	if (cudaGetLastError() != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess ||
	    cudaMemcpy(&bad, d_bad, sizeof(bad), cudaMemcpyDeviceToHost) != cudaSuccess)
		return -1;
	return (long long)bad;
}

/* Poison: a byte pattern the data never has in a whole word. */
/* One timed run done: its bytes checked (a mismatch is kept in *bad), its
 * time kept for emit() */
static void rep_done(const void *dst, double secs_run, double *secs, unsigned *n, long long *bad)
{
	long long v = verify(dst, o.bytes);
	if (v != 0)
		*bad = v;
	secs[(*n)++] = secs_run;
}

static int poison(void *dst, uint64_t bytes)
{
	return cudaMemset(dst, 0xA5, bytes) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess ? 0 : -1;
}

/* Wait for an event without spinning a core (emulator workers and reader
 * threads need them), at most limit_s. 0, 1 on timeout, -1 on error. */
static int wait_event(cudaEvent_t e, double limit_s)
{
	double t0 = now_s();
	for (;;) {
		cudaError_t ce = cudaEventQuery(e);
		if (ce == cudaSuccess)
			return 0;
		if (ce != cudaErrorNotReady) {
			fprintf(stderr, "bench_gpu_bw: %s\n", cudaGetErrorString(ce));
			return -1;
		}
		if (now_s() - t0 > limit_s)
			return 1;
		struct timespec ts = {0, 200000};
		nanosleep(&ts, NULL);
	}
}

/* ---- output -------------------------------------------------------------------- */

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* One CSV line for a configuration: median and best of the runs. */
static void emit(const char *method, uint64_t chunk, uint32_t workers, uint32_t queues, double *secs, unsigned n,
		 long long bad, const char *note)
{
	if (n == 0)
		return;
	qsort(secs, n, sizeof(*secs), cmp_dbl);
	double med = n % 2 ? secs[n / 2] : (secs[n / 2 - 1] + secs[n / 2]) / 2;
	char ver[48];
	if (bad == 0)
		snprintf(ver, sizeof(ver), "yes");
	else if (bad == NOT_CHECKED)
		snprintf(ver, sizeof(ver), "n/a (-F)");
	else if (bad < 0)
		snprintf(ver, sizeof(ver), "error");
	else
		snprintf(ver, sizeof(ver), "NO(%lld words)", bad);
	printf("%s,%llu,%u,%u,%llu,%.6f,%.3f,%s,%u,%.3f,%s\n", method, (unsigned long long)chunk, workers, queues,
	       (unsigned long long)o.bytes, med, (double)o.bytes / med / 1e9, ver, n,
	       (double)o.bytes / secs[0] / 1e9, note ? note : "");
	fflush(stdout);
}

/* ---- (a) this project: GPU-initiated reads from the emulator --------------------- */

/* Warps take 32 consecutive chunks at a time from a shared counter (so a
 * fast queue pair takes more of the work) and read them as one batch on
 * queue pair warp / warps_per_queue. The first failure stops everyone. */
__global__ void k_seq_read(struct gpunvme_dev_queues q, struct gpunvme_dev_buf b, uint64_t nchunks,
			   uint32_t chunk_blocks, uint32_t warps_per_queue, unsigned long long *next, int *status,
			   uint64_t timeout_ns)
{
	const unsigned full = 0xffffffffu, lane = threadIdx.x & 31u;
	const uint64_t w = (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) >> 5;
	const uint32_t qi = (uint32_t)(w / warps_per_queue);
	if (qi >= q.nq)
		return; /* whole warps */
	for (;;) {
		unsigned long long base = 0;
		int stop = 0;
		if (lane == 0) {
			stop = *(volatile int *)status != 0;
			if (!stop)
				base = atomicAdd(next, 32ull);
		}
		base = __shfl_sync(full, base, 0);
		if (__shfl_sync(full, stop, 0) || base >= nchunks)
			break;
		uint64_t k = base + lane;
		bool mine = k < nchunks;
		uint64_t slba = mine ? k * chunk_blocks : 0;
		int rc = gpunvme_dev_rw_lanes(&q, qi, GPUNVME_CMD_READ, slba, chunk_blocks, &b, slba << q.lba_shift,
					      mine, timeout_ns);
		unsigned bad = __ballot_sync(full, rc != 0);
		if (bad) {
			if (lane == __ffs(bad) - 1)
				atomicCAS(status, 0, rc);
			break;
		}
	}
}

/* A device-side result: an NVMe status (> 0) or a GPUNVME_DEV_E* code. */
static const char *dev_err(int st, char *buf, size_t len)
{
	if (st == GPUNVME_DEV_ETIMEDOUT)
		snprintf(buf, len, "no completion within %g s (-T)", o.timeout_s);
	else
		snprintf(buf, len, "%s", gpunvme_gpu_status_str(st));
	return buf;
}

static int run_emu(void)
{
	int *d_status = NULL;
	unsigned long long *d_next = NULL;
	CK(cudaMalloc((void **)&d_status, sizeof(int)));
	CK(cudaMalloc((void **)&d_next, sizeof(unsigned long long)));
	uint64_t max_chunk = 0;
	uint32_t max_qmul = 0;
	for (unsigned i = 0; i < o.nchunks; i++)
		max_chunk = o.chunks[i] > max_chunk ? o.chunks[i] : max_chunk;
	for (unsigned i = 0; i < o.nqmul; i++)
		max_qmul = o.qmul[i] > max_qmul ? o.qmul[i] : max_qmul;
	cudaStream_t s;
	cudaEvent_t e0, e1;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	const uint64_t tmo_ns = (uint64_t)(o.timeout_s * 1e9);
	int failures = 0;

	for (unsigned wi = 0; wi < o.nworkers; wi++) {
		const uint32_t W = o.workers[wi], qmax = W * max_qmul;
		char uri[256];
		/* 4 KiB blocks, MDTS 9: 2^9 pages of 4 KiB = 2 MiB per command */
		snprintf(uri, sizeof(uri), "emu:ram:%lluM?lbads=12&mdts=9&mqes=1023&workers=%u&nsq=%u",
			 (unsigned long long)(o.bytes >> 20), W, qmax);
		struct gpunvme_opts opts;
		gpunvme_opts_init(&opts);
		opts.nr_io_queues = qmax;
		struct gpunvme_ctrl *c = NULL;
		if (gpunvme_open(uri, &opts, &c)) {
			fprintf(stderr, "bench_gpu_bw: open %s: %s\n", uri, gpunvme_last_error());
			return 1;
		}
		struct gpunvme_ns_info ni;
		if (gpunvme_ns_info(c, 1, &ni) || ni.lba_size != 4096 || (uint64_t)ni.max_blocks * 4096 < max_chunk) {
			fprintf(stderr, "bench_gpu_bw: %s: want 4 KiB blocks and %llu-byte commands, got %u and %llu\n",
				uri, (unsigned long long)max_chunk, ni.lba_size,
				(unsigned long long)ni.max_blocks * ni.lba_size);
			gpunvme_close(c);
			return 1;
		}
		/* the namespace's memory holds the pattern: written in place
		 * (no I/O is in flight), on every core */
		void *nsmem = NULL;
		size_t nslen = 0;
		if (gpunvme_emu_ns_memory(gpunvme_ctrl_emu(c), 1, &nsmem, &nslen) || nslen < o.bytes) {
			fprintf(stderr, "bench_gpu_bw: no namespace memory: %s\n", gpunvme_last_error());
			gpunvme_close(c);
			return 1;
		}
		double t0 = now_s();
		fill_pattern((uint64_t *)nsmem, 0, o.bytes / 8);
		fprintf(stderr, "emu W=%u: %s, pattern written in %.2f s\n", W, uri, now_s() - t0);
		/* qmax queue pairs once (this pins the namespace memory for the
		 * copy engine); a run on Q of them passes a descriptor with nq = Q */
		struct gpunvme_gpu_queues *g = NULL;
		struct gpunvme_gpu_buf *b = NULL;
		void *dst = NULL;
		t0 = now_s();
		if (gpunvme_gpu_queues_create(c, 1, qmax, 2 * o.depth, &g) ||
		    gpunvme_gpu_buf_device(g, o.bytes, &b, &dst)) {
			fprintf(stderr, "bench_gpu_bw: GPU queues/buffer: %s\n", gpunvme_last_error());
			if (g)
				gpunvme_gpu_queues_destroy(g);
			gpunvme_close(c);
			return 1;
		}
		fprintf(stderr, "emu W=%u: %u GPU queue pairs of %u entries, %llu MiB GPU buffer in %.2f s\n", W, qmax,
			2 * o.depth, (unsigned long long)(o.bytes >> 20), now_s() - t0);

		for (unsigned qm = 0; qm < o.nqmul && !failures; qm++) {
			const uint32_t Q = W * o.qmul[qm];
			struct gpunvme_dev_queues q = *gpunvme_gpu_queues_desc(g);
			q.nq = Q;
			const uint32_t wpq = o.depth / 32;
			const uint64_t threads = (uint64_t)Q * wpq * 32;
			for (unsigned ci = 0; ci < o.nchunks && !failures; ci++) {
				const uint64_t chunk = o.chunks[ci];
				const uint64_t nchunks = o.bytes / chunk;
				double secs[MAX_REPS];
				unsigned n = 0;
				long long bad = 0;
				for (unsigned r = 0; r < o.reps; r++) {
					int zero = 0;
					unsigned long long z = 0;
					/* on the kernel's stream: a copy on the legacy stream
					 * is not ordered before work on a non-blocking one */
					if (poison(dst, o.bytes) ||
					    cudaMemcpyAsync(d_status, &zero, sizeof(zero), cudaMemcpyHostToDevice, s) !=
						    cudaSuccess ||
					    cudaMemcpyAsync(d_next, &z, sizeof(z), cudaMemcpyHostToDevice, s) != cudaSuccess) {
						fprintf(stderr, "bench_gpu_bw: reset failed\n");
						return 1;
					}
					CK(cudaEventRecord(e0, s));
					k_seq_read<<<(unsigned)((threads + 127) / 128), 128, 0, s>>>(
						q, *gpunvme_gpu_buf_desc(b), nchunks, (uint32_t)(chunk / 4096), wpq, d_next,
						d_status, tmo_ns);
					CK(cudaGetLastError());
					CK(cudaEventRecord(e1, s));
					int w = wait_event(e1, o.timeout_s * 3 + 60);
					if (w) {
						fprintf(stderr, "bench_gpu_bw: emu W=%u Q=%u chunk %llu: %s\n", W, Q,
							(unsigned long long)chunk,
							w > 0 ? "the kernel did not finish (exiting)" : "CUDA error");
						_exit(1); /* a kernel may still use the queues */
					}
					float ms = 0;
					int st = 0;
					CK(cudaEventElapsedTime(&ms, e0, e1));
					CK(cudaMemcpy(&st, d_status, sizeof(st), cudaMemcpyDeviceToHost));
					if (st) {
						char why[256];
						fprintf(stderr, "bench_gpu_bw: emu W=%u Q=%u chunk %llu: %s\n", W, Q,
							(unsigned long long)chunk, dev_err(st, why, sizeof(why)));
						failures++;
						break;
					}
					rep_done(dst, ms / 1e3, secs, &n, &bad);
				}
				char note[96];
				snprintf(note, sizeof(note), "depth=%u;gpu_threads=%llu;warp batches", o.depth,
					 (unsigned long long)threads);
				emit("gpunvme", chunk, W, Q, secs, n, failures ? -1 : bad, note);
			}
		}
		/* the library's own helper: MDTS-sized commands on every queue */
		if (!failures) {
			double secs[MAX_REPS];
			unsigned n = 0;
			long long bad = 0;
			for (unsigned r = 0; r < o.reps; r++) {
				int zero = 0, st = 0;
				if (poison(dst, o.bytes) ||
				    cudaMemcpyAsync(d_status, &zero, sizeof(zero), cudaMemcpyHostToDevice, s) != cudaSuccess)
					return 1;
				CK(cudaEventRecord(e0, s));
				if (gpunvme_gpu_read_async(g, 0, o.bytes / 4096, b, 0, d_status, s, tmo_ns)) {
					fprintf(stderr, "bench_gpu_bw: read_async: %s\n", gpunvme_last_error());
					failures++;
					break;
				}
				CK(cudaEventRecord(e1, s));
				int w = wait_event(e1, o.timeout_s * 3 + 60);
				if (w) {
					fprintf(stderr, "bench_gpu_bw: read_async W=%u: %s\n", W,
						w > 0 ? "the kernel did not finish (exiting)" : "CUDA error");
					_exit(1);
				}
				float ms = 0;
				CK(cudaEventElapsedTime(&ms, e0, e1));
				CK(cudaMemcpy(&st, d_status, sizeof(st), cudaMemcpyDeviceToHost));
				if (st) {
					char why[256];
					fprintf(stderr, "bench_gpu_bw: read_async W=%u: %s\n", W, dev_err(st, why, sizeof(why)));
					failures++;
					break;
				}
				rep_done(dst, ms / 1e3, secs, &n, &bad);
			}
			char note[96];
			snprintf(note, sizeof(note), "gpunvme_gpu_read_async;queue_entries=%u", 2 * o.depth);
			emit("gpunvme-read_async", (uint64_t)ni.max_blocks * 4096, W, qmax, secs, n, failures ? -1 : bad,
			     note);
		}
		gpunvme_gpu_buf_free(b);
		gpunvme_gpu_queues_destroy(g);
		gpunvme_close(c);
		if (failures)
			return 1;
	}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaStreamDestroy(s);
	cudaFree(d_status);
	cudaFree(d_next);
	return 0;
}

/* ---- (b) cudaMemcpy from pinned memory: the link ------------------------------------ */

static int run_memcpy(void)
{
	void *host = NULL, *dst = NULL;
	double t0 = now_s();
	CK(cudaHostAlloc(&host, o.bytes, cudaHostAllocDefault));
	fill_pattern((uint64_t *)host, 0, o.bytes / 8);
	CK(cudaMalloc(&dst, o.bytes));
	fprintf(stderr, "memcpy: %llu MiB pinned and filled in %.2f s\n", (unsigned long long)(o.bytes >> 20),
		now_s() - t0);
	cudaStream_t s;
	cudaEvent_t e0, e1;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (unsigned ci = 0; ci < o.nchunks; ci++) {
		const uint64_t chunk = o.chunks[ci];
		double secs[MAX_REPS];
		unsigned n = 0;
		long long bad = 0;
		for (unsigned r = 0; r < o.reps; r++) {
			if (poison(dst, o.bytes))
				return 1;
			CK(cudaEventRecord(e0, s));
			for (uint64_t off = 0; off < o.bytes; off += chunk)
				CK(cudaMemcpyAsync((char *)dst + off, (char *)host + off,
						   o.bytes - off < chunk ? o.bytes - off : chunk, cudaMemcpyHostToDevice, s));
			CK(cudaEventRecord(e1, s));
			CK(cudaEventSynchronize(e1));
			float ms = 0;
			CK(cudaEventElapsedTime(&ms, e0, e1));
			rep_done(dst, ms / 1e3, secs, &n, &bad);
		}
		emit("cudaMemcpy-pinned", chunk, 1, 1, secs, n, bad, "one stream;pinned source");
	}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaStreamDestroy(s);
	cudaFree(dst);
	cudaFreeHost(host);
	return 0;
}

/* ---- (b2) md's copy pattern: strided lanes -------------------------------------------- */

struct lane_job {
	unsigned l, lanes, mode;
	uint64_t chunk, group;
	const uint8_t *src; /* this lane's chunks, back to back */
	uint8_t *dst;
	cudaStream_t s;
	int rc;
};

static void *lane_main(void *arg)
{
	struct lane_job *j = (struct lane_job *)arg;
	const uint64_t per = o.bytes / j->chunk / j->lanes; /* chunks of this lane */
	for (uint64_t c0 = 0; c0 < per && !j->rc; c0 += j->group) {
		const uint64_t n = per - c0 < j->group ? per - c0 : j->group;
		uint8_t *d0 = j->dst + (c0 * j->lanes + j->l) * j->chunk;
		const uint8_t *s0 = j->src + c0 * j->chunk;
		cudaError_t e = cudaSuccess;
		if (j->mode == 0) {
			for (uint64_t k = 0; k < n && e == cudaSuccess; k++)
				e = cudaMemcpyAsync(d0 + k * j->lanes * j->chunk, s0 + k * j->chunk, j->chunk,
						    cudaMemcpyHostToDevice, j->s);
		} else if (j->mode == 1) {
#if CUDART_VERSION >= 12080
			void *dv[256];
			const void *sv[256];
			size_t lv[256], idx = 0;
			for (uint64_t k = 0; k < n; k++) {
				dv[k] = d0 + k * j->lanes * j->chunk;
				sv[k] = s0 + k * j->chunk;
				lv[k] = j->chunk;
			}
			struct cudaMemcpyAttributes at;
			memset(&at, 0, sizeof(at));
			at.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
#if CUDART_VERSION >= 13000
			e = cudaMemcpyBatchAsync(dv, sv, lv, n, &at, &idx, 1, j->s);
#else
			size_t fail = 0;
			e = cudaMemcpyBatchAsync(dv, sv, lv, n, &at, &idx, 1, &fail, j->s);
#endif
#else
			e = cudaErrorNotSupported;
#endif
		} else {
			e = cudaMemcpy2DAsync(d0, j->lanes * j->chunk, s0, j->chunk, j->chunk, n, cudaMemcpyHostToDevice,
					      j->s);
		}
		if (e == cudaSuccess)
			e = cudaStreamSynchronize(j->s);
		if (e != cudaSuccess) {
			fprintf(stderr, "bench_gpu_bw: lane %u: %s\n", j->l, cudaGetErrorString(e));
			j->rc = -1;
		}
	}
	return NULL;
}

static int run_lanes(void)
{
	static const char *const how[3] = { "lanes-copy", "lanes-batch", "lanes-2d" };
	uint8_t *host = NULL, *dst = NULL;
	CK(cudaHostAlloc((void **)&host, o.bytes, cudaHostAllocDefault));
	CK(cudaMalloc((void **)&dst, o.bytes));
	if (o.depth > 256) {
		fprintf(stderr, "bench_gpu_bw: -m lanes: -d (chunks a group) at most 256\n");
		return 2;
	}
	for (unsigned ci = 0; ci < o.nchunks; ci++) {
		const uint64_t chunk = o.chunks[ci];
		for (unsigned wi = 0; wi < o.nworkers; wi++) {
			const unsigned L = o.workers[wi];
			if (L < 1 || L > 64 || (o.bytes / chunk) % L) {
				fprintf(stderr, "bench_gpu_bw: -m lanes: %u lanes do not divide %llu chunks (1 to 64)\n", L,
					(unsigned long long)(o.bytes / chunk));
				return 2;
			}
			/* lane l's source: its chunks back to back, each holding the
			 * pattern of the place it lands */
			const uint64_t per = o.bytes / chunk / L;
			for (unsigned l = 0; l < L; l++)
				for (uint64_t k = 0; k < per; k++)
					fill_pattern((uint64_t *)(host + (l * per + k) * chunk), (k * L + l) * chunk / 8,
						     chunk / 8);
			struct lane_job jobs[64];
			for (unsigned l = 0; l < L; l++) {
				memset(&jobs[l], 0, sizeof(jobs[l]));
				CK(cudaStreamCreateWithFlags(&jobs[l].s, cudaStreamNonBlocking));
			}
			for (unsigned m = 0; m < 3; m++) {
				double secs[MAX_REPS];
				unsigned n = 0;
				long long bad = 0;
				for (unsigned r = 0; r < o.reps; r++) {
					if (poison(dst, o.bytes))
						return 1;
					pthread_t th[64];
					const double t0 = now_s();
					for (unsigned l = 0; l < L; l++) {
						struct lane_job *j = &jobs[l];
						j->l = l;
						j->lanes = L;
						j->mode = m;
						j->chunk = chunk;
						j->group = o.depth;
						j->src = host + l * per * chunk;
						j->dst = dst;
						j->rc = 0;
						if (pthread_create(&th[l], NULL, lane_main, j))
							return 1;
					}
					int rc = 0;
					for (unsigned l = 0; l < L; l++) {
						pthread_join(th[l], NULL);
						rc |= jobs[l].rc;
					}
					const double t = now_s() - t0;
					if (rc) {
						bad = -1;
						break;
					}
					rep_done(dst, t, secs, &n, &bad);
				}
				char note[64];
				snprintf(note, sizeof(note), "%llu chunks a group;wall time", (unsigned long long)o.depth);
				emit(how[m], chunk, L, L, secs, n, bad, note);
			}
			for (unsigned l = 0; l < L; l++)
				cudaStreamDestroy(jobs[l].s);
		}
	}
	cudaFree(dst);
	cudaFreeHost(host);
	return 0;
}

/* ---- the file: written with the pattern, then read once into the page cache ------ */

static int mkfile(void)
{
	const uint64_t piece = 64ull << 20;
	uint64_t *buf = (uint64_t *)malloc(piece);
	if (!buf)
		return 1;
	int fd = open(o.file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		fprintf(stderr, "bench_gpu_bw: %s: %s\n", o.file, strerror(errno));
		free(buf);
		return 1;
	}
	double t0 = now_s();
	for (uint64_t off = 0; off < o.bytes; off += piece) {
		uint64_t len = o.bytes - off < piece ? o.bytes - off : piece;
		fill_pattern(buf, off / 8, len / 8);
		for (uint64_t done = 0; done < len;) {
			ssize_t w = pwrite(fd, (char *)buf + done, len - done, (off_t)(off + done));
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				fprintf(stderr, "bench_gpu_bw: writing %s: %s\n", o.file, w < 0 ? strerror(errno) : "short");
				close(fd);
				free(buf);
				return 1;
			}
			done += (uint64_t)w;
		}
	}
	/* on disk before anything is timed: no writeback during the runs */
	if (fsync(fd)) {
		fprintf(stderr, "bench_gpu_bw: fsync %s: %s\n", o.file, strerror(errno));
		close(fd);
		free(buf);
		return 1;
	}
	close(fd);
	free(buf);
	fprintf(stderr, "mkfile: %s, %llu MiB written and synced in %.2f s\n", o.file,
		(unsigned long long)(o.bytes >> 20), now_s() - t0);
	return 0;
}

/* Read the whole file once (page cache warm) and check its first and last
 * words against the pattern. Returns an fd (O_RDONLY, buffered) or -1. */
static int open_warm(void)
{
	int fd = open(o.file, O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) || (uint64_t)st.st_size < o.bytes) {
		fprintf(stderr, "bench_gpu_bw: %s: %s (create it with -m mkfile -s %llu)\n", o.file,
			fd < 0 ? strerror(errno) : "too small", (unsigned long long)o.bytes);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	const uint64_t piece = 64ull << 20;
	char *buf = (char *)malloc(piece);
	if (!buf) {
		close(fd);
		return -1;
	}
	double t0 = now_s();
	for (uint64_t off = 0; off < o.bytes; off += piece) {
		ssize_t r = pread(fd, buf, o.bytes - off < piece ? o.bytes - off : piece, (off_t)off);
		if (r <= 0) {
			fprintf(stderr, "bench_gpu_bw: reading %s: %s\n", o.file, r < 0 ? strerror(errno) : "short");
			free(buf);
			close(fd);
			return -1;
		}
		if (off == 0 && !o.foreign && ((uint64_t *)buf)[0] != pat(0)) {
			fprintf(stderr, "bench_gpu_bw: %s does not hold the pattern (create it with -m mkfile)\n", o.file);
			free(buf);
			close(fd);
			return -1;
		}
	}
	free(buf);
	double t = now_s() - t0;
	fprintf(stderr, "%s: read once in %.2f s (%.1f GB/s, one thread): now in the page cache\n", o.file, t,
		(double)o.bytes / t / 1e9);
	return fd;
}

/* ---- (c) pread + cudaMemcpyAsync, double-buffered per thread --------------------------- */

struct rd_thread {
	int fd;
	unsigned idx, nthreads, nbuf;
	uint64_t chunk;
	char *dst;
	char **stage;            /* nbuf pinned buffers */
	cudaEvent_t *free_ev;    /* recorded after each buffer's copy */
	cudaStream_t s;
	int err;
#ifdef GPUNVME_HAVE_CUFILE
	CUfileHandle_t fh;
#endif
};

static void *pread_main(void *arg)
{
	struct rd_thread *t = (struct rd_thread *)arg;
	const uint64_t nchunks = (o.bytes + t->chunk - 1) / t->chunk;
	unsigned k = 0;
	for (uint64_t c = t->idx; c < nchunks && !t->err; c += t->nthreads, k = (k + 1) % t->nbuf) {
		uint64_t off = c * t->chunk, len = o.bytes - off < t->chunk ? o.bytes - off : t->chunk;
		/* the buffer's previous copy must be done before it is refilled */
		if (cudaEventSynchronize(t->free_ev[k]) != cudaSuccess) {
			t->err = EIO;
			break;
		}
		for (uint64_t got = 0; got < len;) {
			ssize_t r = pread(t->fd, t->stage[k] + got, len - got, (off_t)(off + got));
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				t->err = r < 0 ? errno : EIO;
				break;
			}
			got += (uint64_t)r;
		}
		if (t->err || cudaMemcpyAsync(t->dst + off, t->stage[k], len, cudaMemcpyHostToDevice, t->s) != cudaSuccess ||
		    cudaEventRecord(t->free_ev[k], t->s) != cudaSuccess) {
			t->err = t->err ? t->err : EIO;
			break;
		}
	}
	if (cudaStreamSynchronize(t->s) != cudaSuccess && !t->err)
		t->err = EIO;
	return NULL;
}

static int run_pread(void)
{
	int fd = open_warm();
	if (fd < 0)
		return 1;
	void *dst = NULL;
	CK(cudaMalloc(&dst, o.bytes));
	for (unsigned wi = 0; wi < o.nworkers; wi++) {
		const unsigned T = o.workers[wi];
		for (unsigned qi = 0; qi < o.nqmul; qi++) {
			const unsigned N = o.qmul[qi] < 2 ? 2 : o.qmul[qi]; /* 2+ buffers: double buffering */
			for (unsigned ci = 0; ci < o.nchunks; ci++) {
				const uint64_t chunk = o.chunks[ci];
				struct rd_thread *th = (struct rd_thread *)calloc(T, sizeof(*th));
				pthread_t *tid = (pthread_t *)calloc(T, sizeof(*tid));
				if (!th || !tid)
					return 1;
				/* staging, streams and events before the clock starts */
				for (unsigned i = 0; i < T; i++) {
					th[i].fd = fd;
					th[i].idx = i;
					th[i].nthreads = T;
					th[i].nbuf = N;
					th[i].chunk = chunk;
					th[i].dst = (char *)dst;
					th[i].stage = (char **)calloc(N, sizeof(char *));
					th[i].free_ev = (cudaEvent_t *)calloc(N, sizeof(cudaEvent_t));
					if (!th[i].stage || !th[i].free_ev)
						return 1;
					CK(cudaStreamCreateWithFlags(&th[i].s, cudaStreamNonBlocking));
					for (unsigned k = 0; k < N; k++) {
						CK(cudaHostAlloc((void **)&th[i].stage[k], chunk, cudaHostAllocDefault));
						CK(cudaEventCreateWithFlags(&th[i].free_ev[k], cudaEventDisableTiming));
						CK(cudaEventRecord(th[i].free_ev[k], th[i].s));
					}
				}
				double secs[MAX_REPS];
				unsigned n = 0;
				long long bad = 0;
				int err = 0;
				for (unsigned r = 0; r < o.reps && !err; r++) {
					if (poison(dst, o.bytes))
						return 1;
					double t0 = now_s();
					for (unsigned i = 0; i < T; i++) {
						th[i].err = 0;
						if (pthread_create(&tid[i], NULL, pread_main, &th[i])) {
							fprintf(stderr, "bench_gpu_bw: pthread_create failed\n");
							return 1;
						}
					}
					for (unsigned i = 0; i < T; i++) {
						pthread_join(tid[i], NULL);
						if (th[i].err)
							err = th[i].err;
					}
					double t = now_s() - t0;
					if (err) {
						fprintf(stderr, "bench_gpu_bw: pread pipeline: %s\n", strerror(err));
						break;
					}
					rep_done(dst, t, secs, &n, &bad);
				}
				char note[96];
				snprintf(note, sizeof(note), "threads=%u;staging buffers per thread=%u;page cache", T, N);
				emit("pread+cudaMemcpyAsync", chunk, T, N, secs, n, err ? -1 : bad, note);
				for (unsigned i = 0; i < T; i++) {
					for (unsigned k = 0; k < N; k++) {
						cudaFreeHost(th[i].stage[k]);
						cudaEventDestroy(th[i].free_ev[k]);
					}
					cudaStreamDestroy(th[i].s);
					free(th[i].stage);
					free(th[i].free_ev);
				}
				free(th);
				free(tid);
				if (err) {
					close(fd);
					return 1;
				}
			}
		}
	}
	cudaFree(dst);
	close(fd);
	return 0;
}

/* ---- (d) cuFile ------------------------------------------------------------------------- */

#ifdef GPUNVME_HAVE_CUFILE
static void *cufile_main(void *arg)
{
	struct rd_thread *t = (struct rd_thread *)arg;
	const uint64_t nchunks = (o.bytes + t->chunk - 1) / t->chunk;
	for (uint64_t c = t->idx; c < nchunks; c += t->nthreads) {
		uint64_t off = c * t->chunk, len = o.bytes - off < t->chunk ? o.bytes - off : t->chunk;
		/* devPtr_base is the registered base; the offset says where */
		ssize_t r = cuFileRead(t->fh, t->dst, len, (off_t)off, (off_t)off);
		if (r != (ssize_t)len) {
			/* -1: errno; below: a negative CUfileOpError; short: EIO */
			t->err = r == -1 ? errno : r < 0 ? (int)-r : EIO;
			break;
		}
	}
	return NULL;
}

static const char *cufile_err(CUfileError_t e)
{
	return IS_CUFILE_ERR(e.err) ? CUFILE_ERRSTR(e.err) : e.err == CU_FILE_SUCCESS ? "success" : "error";
}
#endif

static int run_cufile(void)
{
#ifndef GPUNVME_HAVE_CUFILE
	fprintf(stderr, "bench_gpu_bw: cuFile rows not built: cufile.h / libcufile were not found at build time\n");
	return 3;
#else
	int fd = open_warm();
	if (fd < 0)
		return 1;
	CUfileError_t ce = cuFileDriverOpen();
	if (ce.err != CU_FILE_SUCCESS) {
		fprintf(stderr, "bench_gpu_bw: cuFileDriverOpen: %s\n", cufile_err(ce));
		return 1;
	}
	/* which mode: forced compat, compat allowed (and no nvidia-fs to do
	 * better), or GDS proper */
	bool force = false, allow = false;
	cuFileGetParameterBool(CUFILE_PARAM_FORCE_COMPAT_MODE, &force);
	cuFileGetParameterBool(CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE, &allow);
	CUfileDrvProps_t props;
	memset(&props, 0, sizeof(props));
	cuFileDriverGetProperties(&props);
	bool nvfs = access("/proc/driver/nvidia-fs", F_OK) == 0;
	int ver = 0;
	cuFileGetVersion(&ver);
	char mode[64];
	snprintf(mode, sizeof(mode), "%s", force ? "compat(forced)" : (!nvfs && allow) ? "compat(no nvidia-fs)"
							  : !nvfs ? "no-gds-no-compat" : "gds");
	fprintf(stderr, "cufile: library %d, nvidia-fs %s (props %u.%u), allow_compat_mode=%d force_compat_mode=%d "
			"-> mode %s; CUFILE_ENV_PATH_JSON=%s\n",
		ver, nvfs ? "loaded" : "absent", props.nvfs.major_version, props.nvfs.minor_version, allow, force, mode,
		getenv("CUFILE_ENV_PATH_JSON") ? getenv("CUFILE_ENV_PATH_JSON") : "(unset)");
	CUfileDescr_t desc;
	memset(&desc, 0, sizeof(desc));
	desc.handle.fd = fd;
	desc.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
	CUfileHandle_t fh;
	ce = cuFileHandleRegister(&fh, &desc);
	if (ce.err != CU_FILE_SUCCESS) {
		fprintf(stderr, "bench_gpu_bw: cuFileHandleRegister(%s): %s (see bench/gpu_bw.sh: the udev entry of "
				"the file system's disk)\n",
			o.file, cufile_err(ce));
		cuFileDriverClose();
		return 1;
	}
	void *dst = NULL;
	CK(cudaMalloc(&dst, o.bytes));
	ce = cuFileBufRegister(dst, o.bytes, 0);
	bool registered = ce.err == CU_FILE_SUCCESS;
	if (!registered)
		fprintf(stderr, "cufile: cuFileBufRegister: %s (reading through unregistered memory)\n", cufile_err(ce));
	int rc = 0;
	for (unsigned wi = 0; wi < o.nworkers && !rc; wi++) {
		const unsigned T = o.workers[wi];
		for (unsigned ci = 0; ci < o.nchunks && !rc; ci++) {
			const uint64_t chunk = o.chunks[ci];
			struct rd_thread th[64];
			pthread_t tid[64];
			if (T > 64) {
				rc = 1;
				break;
			}
			double secs[MAX_REPS];
			unsigned n = 0;
			long long bad = 0;
			int err = 0;
			for (unsigned r = 0; r < o.reps && !err; r++) {
				if (poison(dst, o.bytes))
					return 1;
				double t0 = now_s();
				for (unsigned i = 0; i < T; i++) {
					memset(&th[i], 0, sizeof(th[i]));
					th[i].idx = i;
					th[i].nthreads = T;
					th[i].chunk = chunk;
					th[i].dst = (char *)dst;
					th[i].fh = fh;
					if (pthread_create(&tid[i], NULL, cufile_main, &th[i]))
						return 1;
				}
				for (unsigned i = 0; i < T; i++) {
					pthread_join(tid[i], NULL);
					if (th[i].err)
						err = th[i].err;
				}
				double t = now_s() - t0;
				if (err) {
					fprintf(stderr, "bench_gpu_bw: cuFileRead: %s\n",
						IS_CUFILE_ERR(err) ? CUFILE_ERRSTR(err) : strerror(err));
					rc = 1;
					break;
				}
				rep_done(dst, t, secs, &n, &bad);
			}
			char note[256];
			snprintf(note, sizeof(note), "mode=%s;threads=%u;buf_registered=%d;no O_DIRECT", mode, T, registered);
			emit("cufile", chunk, T, 0, secs, n, err ? -1 : bad, note);
		}
	}
	if (registered)
		cuFileBufDeregister(dst);
	cuFileHandleDeregister(fh);
	cuFileDriverClose();
	cudaFree(dst);
	close(fd);
	return rc;
#endif
}

/* ---- options ------------------------------------------------------------------------------ */

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || end == s || *s == '-')
		return -1;
	unsigned sh = 0;
	switch (*end) {
	case 0: break;
	case 'k': case 'K': sh = 10; end++; break;
	case 'm': case 'M': sh = 20; end++; break;
	case 'g': case 'G': sh = 30; end++; break;
	default: return -1;
	}
	if (*end || (sh && v > (~0ull >> sh)))
		return -1;
	*out = (uint64_t)v << sh;
	return 0;
}

static int parse_list(const char *s, uint64_t *out, unsigned *n)
{
	char buf[512];
	snprintf(buf, sizeof(buf), "%s", s);
	*n = 0;
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (*n >= MAXL || parse_size(t, &out[*n]) || out[*n] == 0)
			return -1;
		(*n)++;
	}
	return *n ? 0 : -1;
}

static int parse_list32(const char *s, uint32_t *out, unsigned *n)
{
	uint64_t v[MAXL];
	if (parse_list(s, v, n))
		return -1;
	for (unsigned i = 0; i < *n; i++) {
		if (v[i] > 4096)
			return -1;
		out[i] = (uint32_t)v[i];
	}
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: bench_gpu_bw -m emu|memcpy|lanes|mkfile|pread|cufile [-s BYTES] [-c CHUNKS] [-w LIST] "
			"[-Q LIST] [-d DEPTH] [-f FILE [-F]] [-r REPS] [-T TIMEOUT_S] [-H]\n"
			"  -F: FILE is any file (not written by -m mkfile): read it, no data check\n"
			"  (see the comment at the top of bench/bench_gpu_bw.cu)\n");
}

int main(int argc, char **argv)
{
	o.bytes = 8ull << 30;
	o.depth = 64;
	o.reps = 3;
	o.timeout_s = 60;
	const char *chunks = "128K,512K,1M,2M", *workers = NULL, *qmul = NULL;
	bool header = false;
	int opt;
	while ((opt = getopt(argc, argv, "m:s:c:w:Q:d:f:Fr:T:H")) != -1) {
		switch (opt) {
		case 'm': o.method = optarg; break;
		case 's':
			if (parse_size(optarg, &o.bytes) || o.bytes == 0) {
				fprintf(stderr, "bench_gpu_bw: -s '%s': not a size\n", optarg);
				return 2;
			}
			break;
		case 'c': chunks = optarg; break;
		case 'w': workers = optarg; break;
		case 'Q': qmul = optarg; break;
		case 'd': o.depth = (uint32_t)atoi(optarg); break;
		case 'f': o.file = optarg; break;
		case 'F': o.foreign = true; break;
		case 'r': o.reps = (unsigned)atoi(optarg); break;
		case 'T': o.timeout_s = atof(optarg); break;
		case 'H': header = true; break;
		default: usage(); return 2;
		}
	}
	if (!o.method || optind != argc) {
		usage();
		return 2;
	}
	bool emu = !strcmp(o.method, "emu"), filed = !strcmp(o.method, "pread") || !strcmp(o.method, "cufile") ||
						    !strcmp(o.method, "mkfile");
	if (!workers)
		workers = emu ? "4,8,12" : !strcmp(o.method, "lanes") ? "4,16" : "1,4";
	if (!qmul)
		qmul = emu ? "1,2" : "2";
	if (parse_list(chunks, o.chunks, &o.nchunks) || parse_list32(workers, o.workers, &o.nworkers) ||
	    parse_list32(qmul, o.qmul, &o.nqmul)) {
		fprintf(stderr, "bench_gpu_bw: bad list in -c, -w or -Q (comma-separated positive numbers)\n");
		return 2;
	}
	if (o.reps < 1 || o.reps > MAX_REPS || o.depth < 32 || o.depth % 32 || o.depth > 2048 || !(o.timeout_s > 0)) {
		fprintf(stderr, "bench_gpu_bw: -r 1..%d, -d a multiple of 32 up to 2048, -T > 0\n", MAX_REPS);
		return 2;
	}
	/* whole 2 MiB pieces, whole chunks, 4 KiB-aligned chunks */
	if (o.bytes % (2u << 20)) {
		fprintf(stderr, "bench_gpu_bw: -s must be a multiple of 2 MiB\n");
		return 2;
	}
	for (unsigned i = 0; i < o.nchunks; i++)
		if (o.chunks[i] % 4096 || o.bytes % o.chunks[i] ||
		    (emu && o.chunks[i] > (2u << 20))) {
			fprintf(stderr, "bench_gpu_bw: chunk %llu: must be a multiple of 4 KiB dividing -s%s\n",
				(unsigned long long)o.chunks[i], emu ? ", at most 2 MiB (MDTS 9)" : "");
			return 2;
		}
	if (filed && !o.file) {
		fprintf(stderr, "bench_gpu_bw: -m %s needs -f FILE\n", o.method);
		return 2;
	}
	if (!strcmp(o.method, "mkfile"))
		return mkfile();
	int ndev = 0;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		fprintf(stderr, "bench_gpu_bw: no CUDA GPU\n");
		return 1;
	}
	CK(cudaMalloc((void **)&d_bad, sizeof(*d_bad)));
	if (header)
		printf("method,chunk_bytes,workers,queues,bytes,seconds,gb_per_s,verified,reps,best_gb_per_s,note\n");
	int rc;
	if (emu)
		rc = run_emu();
	else if (!strcmp(o.method, "memcpy"))
		rc = run_memcpy();
	else if (!strcmp(o.method, "lanes"))
		rc = run_lanes();
	else if (!strcmp(o.method, "pread"))
		rc = run_pread();
	else if (!strcmp(o.method, "cufile"))
		rc = run_cufile();
	else {
		usage();
		rc = 2;
	}
	cudaFree(d_bad);
	return rc;
}
