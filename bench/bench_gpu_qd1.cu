/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Where the time of one GPU-submitted command goes at queue depth 1
 * (issue 4, benchmark 3's latency goal). Three measurements in one process,
 * on one emulator (null namespace unless -u adds a device model):
 *
 *  prim   cost of the primitives a submission and a completion are made of,
 *         one thread, each repeated and averaged: a dependent load and an
 *         atomic on GPU memory, the fences, a load of pinned host memory
 *         across PCIe, a 64-byte SQE store followed by a system fence;
 *  floor  the least a command can take: one thread drives queue pair 1 by
 *         hand (SQE, one system fence, SQ doorbell, spin on the CQE phase
 *         tag, CQ doorbell) with %globaltimer stamps between the steps;
 *  lib    the library's thread-level call gpunvme_dev_rw on queue pair 0,
 *         stamped per command (mean, p50, p99).
 *
 *   bench_gpu_qd1 [-n COMMANDS] [-u EMULATOR_OPTIONS]
 * Prints a table; with -u "latency_us=80&..." the floor and lib rows
 * include the modeled latency.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpunvme/device.cuh"
#include "gpunvme/gpu.h"
#include "gpunvme/gpunvme.h"

#define CK(x)                                                                                  \
	do {                                                                                   \
		cudaError_t ce_ = (x);                                                         \
		if (ce_ != cudaSuccess) {                                                      \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,             \
				cudaGetErrorString(ce_));                                      \
			exit(1);                                                               \
		}                                                                              \
	} while (0)

enum { P_LD, P_ATOM, P_FENCE_SC_GPU, P_FENCE_AR_GPU, P_FENCE_SC_SYS, P_FENCE_AR_SYS, P_SYS_LD, P_SQE_SC_SYS,
       P_SQE_AR_SYS, P_SQE_ONLY, P_LOCK, P_LD_ACQ_GPU, P_SYS_LD4, P_SYS_LD4_ACQ, P_SYS_LD4_LINES, P_N };
static const char *prim_name[P_N] = {
	"ld.volatile GPU memory (dependent chain)",
	"atomicAdd GPU memory, result used",
	"fence.sc.gpu (__threadfence)",
	"fence.acq_rel.gpu",
	"fence.sc.sys (__threadfence_system), nothing pending",
	"fence.acq_rel.sys, nothing pending",
	"ld.volatile pinned host memory (PCIe read)",
	"64 B store to host memory + fence.sc.sys",
	"64 B store to host memory + fence.acq_rel.sys",
	"64 B store to host memory alone",
	"CAS lock + fence.sc.gpu + atomicExch unlock",
	"ld.acquire.gpu GPU memory (dependent chain)",
	"4 independent ld.volatile of host memory",
	"4 independent ld.acquire.sys of host memory",
	"4 independent ld.volatile of host memory, 4 lines",
};

__device__ __forceinline__ void fence_ar_gpu(void) { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
__device__ __forceinline__ void fence_ar_sys(void) { asm volatile("fence.acq_rel.sys;" ::: "memory"); }

__global__ void k_prim(unsigned int *gmem, unsigned int *hmem, int reps, unsigned long long *out)
{
	volatile unsigned int *vg = gmem, *vh = hmem;
	for (int p = 0; p < P_N; p++) {
		unsigned int x = 0;
		uint64_t t0 = gpunvme_dev_now();
		for (int i = 0; i < reps; i++) {
			switch (p) {
			case P_LD: x = vg[x & 1u]; break; /* x stays 0: a dependent chain */
			case P_ATOM: x = atomicAdd(&gmem[8 + (x & 1u)], 2u) & 0u; break;
			case P_FENCE_SC_GPU: __threadfence(); break;
			case P_FENCE_AR_GPU: fence_ar_gpu(); break;
			case P_FENCE_SC_SYS: __threadfence_system(); break;
			case P_FENCE_AR_SYS: fence_ar_sys(); break;
			case P_SYS_LD: x = vh[x & 1u]; break;
			case P_SQE_SC_SYS:
			case P_SQE_AR_SYS:
			case P_SQE_ONLY: {
				uint4 *d = (uint4 *)(hmem + 64);
				for (int k = 0; k < 4; k++)
					d[k] = make_uint4(i, k, x, 0);
				if (p == P_SQE_SC_SYS)
					__threadfence_system();
				else if (p == P_SQE_AR_SYS)
					fence_ar_sys();
				break;
			}
			case P_LD_ACQ_GPU:
				asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(x) : "l"(gmem + (x & 1u)) : "memory");
				break;
			case P_SYS_LD4: {
				unsigned int a = vh[x & 1u], b = vh[2 + (x & 1u)], c = vh[4 + (x & 1u)], d = vh[6 + (x & 1u)];
				x = (a | b | c | d) & 0u;
				break;
			}
			case P_SYS_LD4_LINES: {
				unsigned int a = vh[x & 1u], b = vh[32 + (x & 1u)], c = vh[64 + (x & 1u)], d = vh[96 + (x & 1u)];
				x = (a | b | c | d) & 0u;
				break;
			}
			case P_SYS_LD4_ACQ: {
				unsigned int a, b, c, d;
				asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(a) : "l"(hmem + (x & 1u)) : "memory");
				asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(b) : "l"(hmem + 2 + (x & 1u)) : "memory");
				asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(c) : "l"(hmem + 4 + (x & 1u)) : "memory");
				asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(d) : "l"(hmem + 6 + (x & 1u)) : "memory");
				x = (a | b | c | d) & 0u;
				break;
			}
			case P_LOCK:
				while (atomicCAS(&gmem[16], 0u, 1u) != 0u)
					;
				__threadfence();
				atomicExch(&gmem[16], 0u);
				break;
			}
		}
		uint64_t t1 = gpunvme_dev_now();
		out[p] = (t1 - t0) + (x == 12345u); /* keep x alive */
	}
}

enum { F_SQE, F_FENCE, F_DB, F_CQE, F_CQDB, F_TOTAL, F_N };
static const char *floor_name[F_N] = { "SQE stores issued", "system fence", "SQ doorbell store",
				       "wait for the CQE (spin)", "CQ doorbell store", "total per command" };

/* One thread, queue pair qi driven by hand; st[3] = SQ tail, CQ head, CQ
 * phase carried from launch to launch (start: 0, 0, 1). Deliberately not
 * the queue core (queue.h / device_queue.cuh): this is the floor the core is
 * measured against, the fewest loads and stores a command can take, so each
 * access is written out with the ordering variant the mode selects. */
__global__ void k_floor(struct gpunvme_dev_queues q, struct gpunvme_dev_buf b, uint32_t qi, int n, int mode,
			uint32_t *st, unsigned long long *sum, unsigned long long *polls, int *err)
{
	struct gpunvme_dq_pair *qp = &q.qp[qi];
	const uint32_t mask = qp->depth - 1;
	uint32_t tail = st[0], head = st[1], phase = st[2];
	for (int i = 0; i < n; i++) {
		uint64_t t0 = gpunvme_dev_now();
		struct gpunvme_sqe e;
		memset(&e, 0, sizeof(e));
		e.opc = GPUNVME_CMD_READ;
		e.cid = (uint16_t)tail;
		e.nsid = q.nsid;
		e.rw.slba = (uint64_t)i * 8 % q.nsze;
		e.rw.nlb = (uint16_t)((4096u >> q.lba_shift) - 1);
		e.prp1 = b.iova64k[0];
		uint4 *dst = (uint4 *)&qp->sq[tail];
		const uint4 *src = (const uint4 *)&e;
		for (int k = 0; k < 4; k++)
			dst[k] = src[k];
		uint64_t t1 = gpunvme_dev_now();
		/* the SQE reaches host memory before the doorbell that covers it */
		if (mode == 1)
			fence_ar_sys();
		else
			__threadfence_system();
		uint64_t t2 = gpunvme_dev_now();
		tail = (tail + 1) & mask;
		*qp->sq_db = tail;
		uint64_t t3 = gpunvme_dev_now();
		uint64_t deadline = t3 + 1000000000ull;
		uint32_t dw3;
		for (;;) {
			if (mode == 2)
				asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(dw3) : "l"(qp->cq + head * 4 + 3) : "memory");
			else
				dw3 = ((volatile uint32_t *)qp->cq)[head * 4 + 3];
			atomicAdd(polls, 1ull);
			if (gpunvme_dw3_phase(dw3) == phase)
				break;
			if (gpunvme_dev_now() > deadline) {
				*err = -110;
				return;
			}
		}
		if ((dw3 >> 17) != 0)
			*err = (int)(dw3 >> 17);
		if (mode == 3)
			fence_ar_sys(); /* acquire: the data before the CQE */
		uint64_t t4 = gpunvme_dev_now();
		head = (head + 1) & mask;
		if (head == 0)
			phase ^= 1u;
		*qp->cq_db = head;
		uint64_t t5 = gpunvme_dev_now();
		sum[F_SQE] += t1 - t0;
		sum[F_FENCE] += t2 - t1;
		sum[F_DB] += t3 - t2;
		sum[F_CQE] += t4 - t3;
		sum[F_CQDB] += t5 - t4;
		sum[F_TOTAL] += t5 - t0;
	}
	st[0] = tail;
	st[1] = head;
	st[2] = phase;
}

/* The library's thread-level call, one command at a time, each stamped. */
__global__ void k_lib(struct gpunvme_dev_queues q, struct gpunvme_dev_buf b, uint32_t qi, int n, uint32_t *ns_out,
		      unsigned long long *submit_ns, int *err)
{
	for (int i = 0; i < n; i++) {
		uint64_t t0 = gpunvme_dev_now();
		int rc = gpunvme_dev_rw(&q, qi, GPUNVME_CMD_READ, (uint64_t)i * 8 % q.nsze, 4096u >> q.lba_shift, &b, 0,
					1000000000ull);
		uint64_t t1 = gpunvme_dev_now();
		if (rc) {
			*err = rc;
			return;
		}
		ns_out[i] = (uint32_t)(t1 - t0);
	}
	/* the same, split: submit (ticket, SQE, doorbell) and wait */
	for (int i = 0; i < n; i++) {
		struct gpunvme_dev_tag tag;
		uint64_t t0 = gpunvme_dev_now(), dl = t0 + 1000000000ull;
		int rc = gpunvme_dev_submit(&q, qi, GPUNVME_CMD_READ, (uint64_t)i * 8 % q.nsze, 4096u >> q.lba_shift, &b,
					    0, &tag, dl);
		uint64_t t1 = gpunvme_dev_now();
		if (!rc)
			rc = gpunvme_dev_wait(&q, &tag, dl);
		uint64_t t2 = gpunvme_dev_now();
		if (rc) {
			*err = rc;
			return;
		}
		submit_ns[0] += t1 - t0;
		submit_ns[1] += t2 - t1;
	}
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int n = 4000, opt;
	const char *extra = "";
	while ((opt = getopt(argc, argv, "n:u:")) != -1) {
		switch (opt) {
		case 'n': n = atoi(optarg); break;
		case 'u': extra = optarg; break;
		default:
			fprintf(stderr, "usage: %s [-n COMMANDS] [-u EMULATOR_OPTIONS]\n", argv[0]);
			return 2;
		}
	}
	if (n < 10) {
		fprintf(stderr, "-n: at least 10\n");
		return 2;
	}
	char uri[256];
	snprintf(uri, sizeof(uri), "emu:null:1T?lbads=12&workers=1&nsq=2%s%s", *extra ? "&" : "", extra);
	struct gpunvme_opts o;
	gpunvme_opts_init(&o);
	o.nr_io_queues = 2;
	struct gpunvme_ctrl *c;
	if (gpunvme_open(uri, &o, &c)) {
		fprintf(stderr, "open: %s\n", gpunvme_last_error());
		return 1;
	}
	struct gpunvme_gpu_queues *g;
	if (gpunvme_gpu_queues_create(c, 1, 2, 64, &g)) {
		fprintf(stderr, "queues: %s\n", gpunvme_last_error());
		return 1;
	}
	size_t len = 1u << 20;
	void *buf = gpunvme_dma_alloc(c, len);
	struct gpunvme_gpu_buf *b;
	if (!buf || gpunvme_gpu_buf_host(g, buf, len, &b, NULL)) {
		fprintf(stderr, "buf: %s\n", gpunvme_last_error());
		return 1;
	}
	const struct gpunvme_dev_queues q = *gpunvme_gpu_queues_desc(g);
	const struct gpunvme_dev_buf db = *gpunvme_gpu_buf_desc(b);

	/* primitives */
	unsigned int *gmem, *hmem, *dh;
	unsigned long long *pout;
	const int reps = 2000;
	CK(cudaMalloc((void **)&gmem, 4096));
	CK(cudaMemset(gmem, 0, 4096));
	CK(cudaHostAlloc((void **)&hmem, 4096, cudaHostAllocMapped));
	memset(hmem, 0, 4096);
	CK(cudaHostGetDevicePointer((void **)&dh, hmem, 0));
	CK(cudaMallocManaged((void **)&pout, P_N * sizeof(*pout)));
	k_prim<<<1, 1>>>(gmem, dh, 50, pout); /* warm-up */
	CK(cudaDeviceSynchronize());
	k_prim<<<1, 1>>>(gmem, dh, reps, pout);
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	printf("# %s, %d repetitions, one thread\n", uri, reps);
	printf("%-52s %10s\n", "primitive", "ns each");
	for (int p = 0; p < P_N; p++)
		printf("%-52s %10.1f\n", prim_name[p], (double)pout[p] / reps);

	/* floor, then the library, each after a warm-up of 50 commands */
	unsigned long long *sum, *polls;
	int *err;
	uint32_t *lat;
	CK(cudaMallocManaged((void **)&sum, F_N * sizeof(*sum)));
	CK(cudaMallocManaged((void **)&polls, sizeof(*polls)));
	CK(cudaMallocManaged((void **)&err, sizeof(*err)));
	CK(cudaMallocManaged((void **)&lat, (size_t)n * sizeof(*lat)));
	uint32_t *st;
	CK(cudaMallocManaged((void **)&st, 3 * sizeof(*st)));
	st[0] = 0;
	st[1] = 0;
	st[2] = 1;
	static const char *mode_name[4] = { "fence.sc.sys, volatile polling", "fence.acq_rel.sys, volatile polling",
					    "fence.sc.sys, ld.acquire.sys polling",
					    "fence.sc.sys, volatile polling, fence.acq_rel.sys after the CQE" };
	for (int mode = 0; mode < 4; mode++) {
		*err = 0;
		k_floor<<<1, 1>>>(q, db, 1, 50, mode, st, sum, polls, err); /* warm-up */
		CK(cudaDeviceSynchronize());
		memset(sum, 0, F_N * sizeof(*sum));
		*polls = 0;
		k_floor<<<1, 1>>>(q, db, 1, n, mode, st, sum, polls, err);
		CK(cudaGetLastError());
		CK(cudaDeviceSynchronize());
		if (*err) {
			fprintf(stderr, "floor: error %d\n", *err);
			return 1;
		}
		printf("\nfloor (%s), %d commands, %.1f CQ polls per command\n", mode_name[mode], n,
		       (double)*polls / n);
		for (int f = 0; f < F_N; f++)
			printf("%-52s %10.1f\n", floor_name[f], (double)sum[f] / n);
	}
	*err = 0;
	k_lib<<<1, 1>>>(q, db, 0, 50, lat, sum, err);
	CK(cudaDeviceSynchronize());
	sum[0] = sum[1] = 0;
	k_lib<<<1, 1>>>(q, db, 0, n, lat, sum, err);
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	if (*err) {
		fprintf(stderr, "lib: error %d\n", *err);
		return 1;
	}
	double mean = 0;
	for (int i = 0; i < n; i++)
		mean += lat[i];
	mean /= n;
	qsort(lat, (size_t)n, sizeof(*lat), cmp_u32);
	printf("\nlib gpunvme_dev_rw, %d commands: mean %.1f ns, min %u, p50 %u, p99 %u\n", n, mean, lat[0],
	       lat[n / 2], lat[(size_t)n * 99 / 100]);
	printf("lib split: gpunvme_dev_submit %.1f ns + gpunvme_dev_wait %.1f ns\n", (double)sum[0] / n,
	       (double)sum[1] / n);
	gpunvme_gpu_buf_free(b);
	gpunvme_gpu_queues_destroy(g);
	gpunvme_close(c);
	return 0;
}
