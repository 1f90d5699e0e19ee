/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * IOPS of GPU-initiated 4 KiB random reads against the emulator's null
 * namespace: GPU threads submit and complete commands themselves over Q
 * queue pairs (device.cuh), the emulator serves them with W worker threads.
 *   bench_gpu_iops -w WORKERS -q QUEUES -d DEPTH -t THREADS [-s SECONDS] [-n MAX_READS_PER_THREAD] [-m 0|1]
 * -m 1: warp batches (gpunvme_dev_rw_lanes) instead of thread-level calls.
 * Each point runs for a duration (-s, default 2 s): a fixed count of reads
 * per thread ends in tens of milliseconds at 60 M IOPS, too short to be a
 * sustained rate (start-up and the last stragglers weigh in). -n caps the
 * reads per thread as well (0: no cap).
 * Prints one CSV line: mode,workers,queues,depth,threads,reads,seconds,iops,errors,io_bytes,mb_per_s
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "gpunvme/device.cuh"
#include "gpunvme/gpu.h"
#include "gpunvme/gpunvme.h"

/* The GPU's clock now: the runs' common start. */
__global__ void k_now(uint64_t *t)
{
	*t = gpunvme_dev_now();
}

/* mode 0: thread-level calls; mode 1: warp batches (gpunvme_dev_rw_lanes).
 * Reads until `stop` (%globaltimer) or n reads (n > 0); *reads counts them. */
__global__ void k_iops(struct gpunvme_dev_queues q, struct gpunvme_dev_buf b, int n, uint64_t stop,
		       unsigned long long *reads, unsigned long long *errors, uint64_t tmo, int mode,
		       uint32_t io_blocks, uint64_t nthreads)
{
	uint64_t tid = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
	/* exactly -t threads do I/O: the grid is rounded up to whole blocks
	 * (warp mode: -t is a multiple of 32, so whole warps leave together) */
	if (tid >= nthreads)
		return;
	uint64_t x = tid * 0x9E3779B97F4A7C15ull + 12345;
	/* spread warps over queues: one queue per warp group */
	uint32_t qi = (uint32_t)((tid / 32) % q.nq);
	/* null namespace: the buffer is never written; all threads may share it */
	uint64_t off = io_blocks == (4096u >> q.lba_shift) ? (tid % 256) * 4096 : 0;
	unsigned long long done = 0;
	for (int i = 0; n <= 0 || i < n; i++) {
		/* warp mode: lane 0 decides for the warp, so all lanes stay in
		 * step (gpunvme_dev_rw_lanes wants the whole warp) */
		bool more = gpunvme_dev_now() < stop;
		if (mode)
			more = __shfl_sync(0xffffffffu, more, 0);
		if (!more)
			break;
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		uint64_t lba = (x % (q.nsze / io_blocks)) * io_blocks;
		int rc = mode ? gpunvme_dev_rw_lanes(&q, qi, GPUNVME_CMD_READ, lba, io_blocks, &b, off, true, tmo)
			      : gpunvme_dev_rw(&q, qi, GPUNVME_CMD_READ, lba, io_blocks, &b, off, tmo);
		if (rc) {
			atomicAdd(errors, 1ull);
			if (!mode)
				break; /* warp batches keep all lanes in step */
		} else {
			done++;
		}
	}
	atomicAdd(reads, done);
}

int main(int argc, char **argv)
{
	int workers = 4, queues = 8, depth = 1024, threads = 65536, n = 0, mode = 0, opt;
	long io = 4096;
	double secs = 2.0;
	const char *extra = "";
	while ((opt = getopt(argc, argv, "w:q:d:t:n:m:b:u:s:")) != -1) {
		switch (opt) {
		case 's': secs = atof(optarg); break;
		case 'b': io = atol(optarg); break;
		case 'u': extra = optarg; break;
		case 'm': mode = atoi(optarg); break;
		case 'w': workers = atoi(optarg); break;
		case 'q': queues = atoi(optarg); break;
		case 'd': depth = atoi(optarg); break;
		case 't': threads = atoi(optarg); break;
		case 'n': n = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s -w WORKERS -q QUEUES -d DEPTH -t THREADS [-s SECONDS] [-n MAX_READS] [-m 0|1] "
					"[-b IO_BYTES] [-u EMU_OPTIONS]\n", argv[0]);
			return 2;
		}
	}
	char uri[256];
	snprintf(uri, sizeof(uri), "emu:null:1T?lbads=12&workers=%d&nsq=%d&mqes=4095%s%s", workers, queues,
		 *extra ? "&" : "", extra);
	if (threads < 1 || (mode && threads % 32)) {
		fprintf(stderr, "-t: at least 1 thread, a multiple of 32 in warp mode (-m 1)\n");
		return 2;
	}
	if (!(secs > 0 && secs <= 600)) {
		fprintf(stderr, "-s: a duration in seconds, more than 0 and at most 600\n");
		return 2;
	}
	if (io < 4096 || io % 4096 || io > (2 << 20)) {
		fprintf(stderr, "-b: 4 KiB multiples up to 2 MiB\n");
		return 2;
	}
	struct gpunvme_opts o;
	gpunvme_opts_init(&o);
	o.nr_io_queues = (uint32_t)queues;
	struct gpunvme_ctrl *c;
	if (gpunvme_open(uri, &o, &c)) {
		fprintf(stderr, "open: %s\n", gpunvme_last_error());
		return 1;
	}
	struct gpunvme_gpu_queues *g;
	if (gpunvme_gpu_queues_create(c, 1, (uint32_t)queues, (uint32_t)depth, &g)) {
		fprintf(stderr, "queues: %s\n", gpunvme_last_error());
		return 1;
	}
	size_t len = 2u << 20;
	void *buf = gpunvme_dma_alloc(c, len);
	struct gpunvme_gpu_buf *b;
	if (gpunvme_gpu_buf_host(g, buf, len, &b, NULL)) {
		fprintf(stderr, "buf: %s\n", gpunvme_last_error());
		return 1;
	}
	unsigned long long *err, *reads;
	uint64_t *t0;
	cudaMallocManaged(&err, sizeof(*err));
	cudaMallocManaged(&reads, sizeof(*reads));
	cudaMallocManaged(&t0, sizeof(*t0));
	*err = 0;
	*reads = 0;
	const int tpb = threads < 256 ? threads : 256;
	const uint32_t io_blocks = (uint32_t)(io / 4096);
	/* warm-up: two reads per thread, no time limit */
	k_iops<<<(threads + tpb - 1) / tpb, tpb>>>(*gpunvme_gpu_queues_desc(g), *gpunvme_gpu_buf_desc(b), 2, ~0ull,
						  reads, err, 10000000000ull, mode, io_blocks, (uint64_t)threads);
	cudaDeviceSynchronize();
	if (*err) {
		fprintf(stderr, "warm-up: %llu threads failed\n", *err);
		return 1;
	}
	*reads = 0;
	k_now<<<1, 1>>>(t0);
	cudaDeviceSynchronize();
	const uint64_t stop = *t0 + (uint64_t)(secs * 1e9);
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	cudaEventRecord(e0);
	k_iops<<<(threads + tpb - 1) / tpb, tpb>>>(*gpunvme_gpu_queues_desc(g), *gpunvme_gpu_buf_desc(b), n, stop,
						  reads, err, 10000000000ull, mode, io_blocks, (uint64_t)threads);
	cudaEventRecord(e1);
	cudaError_t ce = cudaEventSynchronize(e1);
	float ms = 0;
	cudaEventElapsedTime(&ms, e0, e1);
	/* what completed, over the kernel's whole time (the stragglers after
	 * `stop` included, in both) */
	const double nr = (double)*reads;
	printf("%s,%d,%d,%d,%d,%.0f,%.4f,%.0f,%llu,%ld,%.1f%s\n", mode ? "warp" : "thread", workers, queues, depth,
	       threads, nr, ms / 1e3, nr / (ms / 1e3), *err, io, nr * io / (ms / 1e3) / 1e6,
	       ce == cudaSuccess ? "" : ",cuda-error");
	gpunvme_gpu_buf_free(b);
	gpunvme_gpu_queues_destroy(g);
	gpunvme_close(c);
	return *err ? 1 : 0;
}
