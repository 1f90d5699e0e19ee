// SPDX-License-Identifier: BSD-2-Clause
/*
 * Issue 32, acceptance 3: which host-side CUDA waits hold up a copy queued
 * by another thread (the emulator's copy engine), and from where such a copy
 * still runs.
 *
 * The shape of the stall: a kernel K on stream S waits for a flag in GPU
 * memory; the flag arrives only by a host-to-device copy C that an emulator
 * thread queues on a non-blocking stream of its own (a controller's DMA).
 * Meanwhile the application's thread blocks in CUDA behind K (torch's
 * `.cpu()`: a device-to-host copy into pageable memory on S). If C waits for
 * that blocked call, K never sees its flag and the application waits out K's
 * bound (PROBE_KERNEL_S).
 *
 * Each case: the app thread launches K on S, then blocks as the case says;
 * 50 ms later the emulator thread queues C as the case says and waits for
 * it (bounded). A case passes when C is done well before K's bound.
 *
 *   nvcc -O2 -arch=sm_90 -o ctx_stall_probe bench/ctx_stall_probe.cu -lcuda -lpthread
 *   ./ctx_stall_probe            (all cases; one line each)
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROBE_KERNEL_S 3.0 /* K gives up after this: the stall's bound */

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

#define CK(x)                                                                                       \
	do {                                                                                        \
		cudaError_t e_ = (x);                                                               \
		if (e_ != cudaSuccess) {                                                            \
			fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			exit(1);                                                                    \
		}                                                                                   \
	} while (0)
#define CU(x)                                                                                       \
	do {                                                                                        \
		CUresult r_ = (x);                                                                  \
		if (r_ != CUDA_SUCCESS) {                                                           \
			const char *s_ = "?";                                                       \
			cuGetErrorString(r_, &s_);                                                  \
			fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_);              \
			exit(1);                                                                    \
		}                                                                                   \
	} while (0)

/* K: wait for *flag == want (volatile: the copy engine writes it), bounded
 * by the GPU's global timer; out = 1 when seen, 2 when timed out */
__global__ void wait_flag(const volatile unsigned *flag, unsigned want, unsigned *out)
{
	uint64_t t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	for (;;) {
		if (*flag == want) {
			*out = 1;
			return;
		}
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
		if (t - t0 > (uint64_t)(PROBE_KERNEL_S * 1e9)) {
			*out = 2;
			return;
		}
	}
}

enum app_wait { APP_PAGEABLE_D2H, APP_PINNED_D2H, APP_STREAM_SYNC, APP_DEVICE_SYNC, APP_NONE };
enum app_stream { S_LEGACY, S_BLOCKING, S_NONBLOCKING };
enum emu_mode { EMU_SAME_CTX, EMU_OWN_CTX, EMU_OWN_CTX_PEER, EMU_PROCESS };

static const char *app_wait_name[] = {"pageable D2H", "pinned D2H", "stream sync", "device sync", "no wait"};
static const char *app_stream_name[] = {"legacy", "blocking", "non-blocking"};
static const char *emu_name[] = {"same context", "own context (HtoD)", "own context (3D peer)", "own process (IPC)"};

struct emu_thread {
	enum emu_mode mode;
	unsigned *d_flag; /* the application's allocation */
	CUcontext app_ctx;
	unsigned want;
	double t_queued, t_done;
	int ok;
	int to_child, from_child; /* EMU_PROCESS: pipes */
};

static unsigned *h_src; /* pinned in the application's context (portable) */

static void *emu_main(void *arg)
{
	struct emu_thread *e = (struct emu_thread *)arg;
	usleep(50000); /* the app is blocked by now */
	e->t_queued = now_s();
	if (e->mode == EMU_PROCESS) {
		unsigned w = e->want;
		if (write(e->to_child, &w, sizeof(w)) != sizeof(w))
			return NULL;
		int rc = 0;
		if (read(e->from_child, &rc, sizeof(rc)) != sizeof(rc))
			rc = -1;
		e->t_done = now_s();
		e->ok = rc == 0;
		return NULL;
	}
	*h_src = e->want;
	if (e->mode == EMU_SAME_CTX) {
		cudaStream_t s;
		CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
		CK(cudaMemcpyAsync(e->d_flag, h_src, sizeof(unsigned), cudaMemcpyHostToDevice, s));
		cudaError_t q;
		while ((q = cudaStreamQuery(s)) == cudaErrorNotReady && now_s() - e->t_queued < 2 * PROBE_KERNEL_S)
			;
		e->t_done = now_s();
		e->ok = q == cudaSuccess;
		cudaStreamDestroy(s);
		return NULL;
	}
	/* a context of the emulator's own on the same device */
	CUcontext c;
	CUdevice dev;
	CU(cuDeviceGet(&dev, 0));
#if CUDA_VERSION >= 13000
	CU(cuCtxCreate(&c, NULL, 0, dev));
#else
	CU(cuCtxCreate(&c, 0, dev));
#endif
	CUstream s;
	CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CUresult r;
	if (e->mode == EMU_OWN_CTX) {
		r = cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)e->d_flag, h_src, sizeof(unsigned), s);
	} else {
		CUDA_MEMCPY3D_PEER p;
		memset(&p, 0, sizeof(p));
		p.srcMemoryType = CU_MEMORYTYPE_HOST;
		p.srcHost = h_src;
		p.srcContext = c;
		p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
		p.dstDevice = (CUdeviceptr)(uintptr_t)e->d_flag;
		p.dstContext = e->app_ctx;
		p.WidthInBytes = sizeof(unsigned);
		p.Height = 1;
		p.Depth = 1;
		r = cuMemcpy3DPeerAsync(&p, s);
	}
	if (r != CUDA_SUCCESS) {
		const char *str = "?";
		cuGetErrorString(r, &str);
		fprintf(stderr, "  (%s: copy refused: %s)\n", emu_name[e->mode], str);
		e->t_done = now_s();
		e->ok = 0;
	} else {
		while ((r = cuStreamQuery(s)) == CUDA_ERROR_NOT_READY && now_s() - e->t_queued < 2 * PROBE_KERNEL_S)
			;
		e->t_done = now_s();
		e->ok = r == CUDA_SUCCESS;
		if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) {
			const char *str = "?";
			cuGetErrorString(r, &str);
			fprintf(stderr, "  (%s: copy failed: %s)\n", emu_name[e->mode], str);
		}
	}
	cuStreamDestroy(s);
	cuCtxDestroy(c);
	return NULL;
}

/* EMU_PROCESS's child: forked before any CUDA call; opens the flag's IPC
 * handle and, per request, copies the wanted value into it */
static void child_main(int rd, int wr)
{
	cudaIpcMemHandle_t hd;
	if (read(rd, &hd, sizeof(hd)) != sizeof(hd))
		_exit(1);
	void *d = NULL;
	CK(cudaIpcOpenMemHandle(&d, hd, cudaIpcMemLazyEnablePeerAccess));
	unsigned *src;
	CK(cudaHostAlloc((void **)&src, sizeof(unsigned), cudaHostAllocDefault));
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	int ready = 0;
	if (write(wr, &ready, sizeof(ready)) != sizeof(ready))
		_exit(1);
	unsigned w;
	while (read(rd, &w, sizeof(w)) == sizeof(w)) {
		*src = w;
		double t0 = now_s();
		int rc = cudaMemcpyAsync(d, src, sizeof(unsigned), cudaMemcpyHostToDevice, s) == cudaSuccess ? 0 : -1;
		cudaError_t q = cudaErrorNotReady;
		while (rc == 0 && (q = cudaStreamQuery(s)) == cudaErrorNotReady && now_s() - t0 < 2 * PROBE_KERNEL_S)
			;
		if (q != cudaSuccess)
			rc = -1;
		if (write(wr, &rc, sizeof(rc)) != sizeof(rc))
			_exit(1);
	}
	_exit(0);
}

int main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	int p2c[2], c2p[2];
	if (pipe(p2c) || pipe(c2p))
		return 1;
	pid_t pid = fork();
	if (pid == 0) {
		close(p2c[1]);
		close(c2p[0]);
		child_main(p2c[0], c2p[1]);
	}
	close(p2c[0]);
	close(c2p[1]);

	CK(cudaSetDevice(0));
	CK(cudaFree(0));
	CUcontext app_ctx;
	CU(cuCtxGetCurrent(&app_ctx));
	unsigned *d_flag, *d_out, *h_pinned_out;
	CK(cudaMalloc((void **)&d_flag, 1 << 20)); /* a whole allocation: IPC handles name one */
	CK(cudaMalloc((void **)&d_out, 4096));
	CK(cudaHostAlloc((void **)&h_src, 4096, cudaHostAllocPortable));
	CK(cudaHostAlloc((void **)&h_pinned_out, 4096, cudaHostAllocDefault));
	unsigned *h_pageable_out = (unsigned *)malloc(1 << 20);
	cudaIpcMemHandle_t hd;
	CK(cudaIpcGetMemHandle(&hd, d_flag));
	int ready;
	if (write(p2c[1], &hd, sizeof(hd)) != sizeof(hd) || read(c2p[0], &ready, sizeof(ready)) != sizeof(ready)) {
		fprintf(stderr, "child did not start\n");
		return 1;
	}
	cudaStream_t streams[3];
	streams[S_LEGACY] = 0;
	CK(cudaStreamCreateWithFlags(&streams[S_BLOCKING], cudaStreamDefault));
	CK(cudaStreamCreateWithFlags(&streams[S_NONBLOCKING], cudaStreamNonBlocking));

	printf("%-22s %-13s %-13s %8s %8s %s\n", "emulator copy", "app stream", "app wait", "copy s", "app s", "result");
	unsigned want = 100;
	int fails = 0;
	for (int em = 0; em < 4; em++)
		for (int as = 0; as < 3; as++)
			for (int aw = 0; aw < 5; aw++) {
				/* cut the matrix: every wait on the legacy stream; the
				 * pageable copy on every stream */
				if (as != S_LEGACY && aw != APP_PAGEABLE_D2H)
					continue;
				cudaStream_t S = streams[as];
				want++;
				CK(cudaMemset(d_out, 0, 4096));
				CK(cudaDeviceSynchronize());
				struct emu_thread e;
				memset(&e, 0, sizeof(e));
				e.mode = (enum emu_mode)em;
				e.d_flag = d_flag;
				e.app_ctx = app_ctx;
				e.want = want;
				e.to_child = p2c[1];
				e.from_child = c2p[0];
				double t0 = now_s();
				wait_flag<<<1, 1, 0, S>>>(d_flag, want, d_out);
				CK(cudaGetLastError());
				pthread_t th;
				pthread_create(&th, NULL, emu_main, &e);
				switch (aw) {
				case APP_PAGEABLE_D2H:
					CK(cudaMemcpyAsync(h_pageable_out, d_out, 4, cudaMemcpyDeviceToHost, S));
					CK(cudaStreamSynchronize(S));
					break;
				case APP_PINNED_D2H:
					CK(cudaMemcpyAsync(h_pinned_out, d_out, 4, cudaMemcpyDeviceToHost, S));
					CK(cudaStreamSynchronize(S));
					break;
				case APP_STREAM_SYNC:
					CK(cudaStreamSynchronize(S));
					break;
				case APP_DEVICE_SYNC:
					CK(cudaDeviceSynchronize());
					break;
				case APP_NONE:
					break;
				}
				double t_app = now_s() - t0;
				pthread_join(th, NULL);
				CK(cudaDeviceSynchronize());
				unsigned out;
				CK(cudaMemcpy(&out, d_out, 4, cudaMemcpyDeviceToHost));
				double t_copy = e.t_done - e.t_queued;
				int pass = e.ok && out == 1 && t_copy < 0.5;
				fails += !pass && em != EMU_SAME_CTX;
				printf("%-22s %-13s %-13s %8.3f %8.3f %s\n", emu_name[em], app_stream_name[as], app_wait_name[aw],
				       t_copy, t_app, pass ? "ok" : out == 2 ? "STALL (kernel timed out)" : e.ok ? "slow" : "FAIL");
				fflush(stdout);
			}
	close(p2c[1]);
	waitpid(pid, NULL, 0);
	printf("cases outside the application's context that failed: %d\n", fails);
	return 0;
}
