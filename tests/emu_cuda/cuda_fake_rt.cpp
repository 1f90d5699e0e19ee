/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A host-only stand-in for the CUDA runtime calls of the emulator's DMA
 * process (src/emu_cuda/server/dma_server.cu), so that the real program
 * runs without a GPU in test_dma_e2e: its set-up loop, its map table and
 * its one mover thread, against the library's real client.
 *
 * - A stream is a queue with a thread of its own that runs the copies in
 *   order, each FAKE_EDMA_COPY_US after the one before: as on a GPU, a copy
 *   reads its source when it runs, not when it was queued.
 * - An event is a position in its stream's queue; it is complete once the
 *   stream has run everything before it.
 * - "GPU memory" is the file FAKE_EDMA_DEV, mapped here; an IPC handle
 *   carries the application's address (test_dma_client.cpp's stub), and
 *   opening it gives the file's bytes at that address minus
 *   FAKE_EDMA_DEV_BASE. Without the file, an opened handle is an address
 *   nothing reads.
 * - FAKE_EDMA_LOG gets "MAP 0x..." for every open tried and "UNMAP 0x..."
 *   for every close, as fake_edma.c writes them; FAKE_EDMA_DELAY_MS delays
 *   each open, FAKE_EDMA_REFUSE refuses the open of that base (hex), and
 *   FAKE_EDMA_DIE_AFTER ends the process once that many copies have run.
 */
#include <cuda_runtime.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

namespace {

uint64_t env_num(const char *name, int base)
{
	const char *v = getenv(name);
	return v && *v ? strtoull(v, NULL, base) : 0;
}

struct copy_op {
	void *dst;
	const void *src;
	size_t n;
	size_t rows = 1, spitch = 0, dpitch = 0; /* a 2D copy: rows rows of n bytes */
};

std::atomic<uint64_t> copies_run;

struct fake_stream {
	std::mutex mu;
	std::condition_variable cv;
	std::deque<copy_op> q;
	uint64_t queued = 0, ran = 0; /* ops queued, ops run (under mu) */
	bool stop = false;
	std::thread th;

	fake_stream()
	{
		th = std::thread([this] { run(); });
	}
	void run()
	{
		const uint64_t us = env_num("FAKE_EDMA_COPY_US", 10), die = env_num("FAKE_EDMA_DIE_AFTER", 10);
		std::unique_lock<std::mutex> lk(mu);
		for (;;) {
			cv.wait(lk, [this] { return stop || !q.empty(); });
			if (q.empty())
				return;
			copy_op op = q.front();
			lk.unlock();
			if (us)
				usleep((useconds_t)us);
			for (size_t k = 0; k < op.rows; k++)
				memcpy((uint8_t *)op.dst + k * op.dpitch, (const uint8_t *)op.src + k * op.spitch, op.n);
			if (die && ++copies_run >= die)
				_exit(9); /* as a process killed mid-copy */
			lk.lock();
			q.pop_front();
			ran++;
			cv.notify_all();
		}
	}
};

struct fake_event {
	fake_stream *s = nullptr;
	uint64_t at = 0;
};

std::mutex ipc_mu;
std::map<void *, uint64_t> opened; /* local address -> the application's base */
uint8_t *dev;
uint64_t dev_len;
thread_local cudaError_t last = cudaSuccess; /* per thread, as the runtime's */

void log_line(const char *what, uint64_t base)
{
	const char *p = getenv("FAKE_EDMA_LOG");
	FILE *f = p && *p ? fopen(p, "a") : NULL;
	if (f) {
		fprintf(f, "%s 0x%llx\n", what, (unsigned long long)base);
		fclose(f);
	}
}

cudaError_t fail(cudaError_t e)
{
	last = e;
	return e;
}

} // namespace

extern "C" {

cudaError_t cudaDeviceGetByPCIBusId(int *d, const char *)
{
	*d = 0;
	return cudaSuccess;
}

/* the process's start: the "GPU memory" file is mapped now (the test
 * removes its name once the process has greeted it) */
cudaError_t cudaSetDevice(int)
{
	const char *path = getenv("FAKE_EDMA_DEV");
	if (!path || !*path)
		return cudaSuccess;
	int fd = open(path, O_RDWR);
	struct stat st;
	if (fd < 0 || fstat(fd, &st))
		return fail(cudaErrorInvalidDevice);
	dev_len = (uint64_t)st.st_size;
	void *m = mmap(NULL, dev_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return fail(cudaErrorInvalidDevice);
	dev = (uint8_t *)m;
	return cudaSuccess;
}

cudaError_t cudaFree(void *)
{
	return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t e)
{
	/* the one failure the cases make on purpose: FAKE_EDMA_REFUSE */
	return e == cudaSuccess ? "no error" : "refused by the test (the fake runtime)";
}

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last;
	last = cudaSuccess;
	return e;
}

cudaError_t cudaHostRegister(void *, size_t, unsigned int)
{
	return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *)
{
	return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int)
{
	*s = (cudaStream_t) new fake_stream;
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t st)
{
	fake_stream *s = (fake_stream *)st;
	std::unique_lock<std::mutex> lk(s->mu);
	s->cv.wait(lk, [s] { return s->ran == s->queued; });
	return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t st)
{
	fake_stream *s = (fake_stream *)st;
	cudaStreamSynchronize(st);
	{
		std::lock_guard<std::mutex> lk(s->mu);
		s->stop = true;
	}
	s->cv.notify_all();
	s->th.join();
	delete s;
	return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind, cudaStream_t st)
{
	fake_stream *s = (fake_stream *)st;
	{
		std::lock_guard<std::mutex> lk(s->mu);
		s->q.push_back({dst, src, n});
		s->queued++;
	}
	s->cv.notify_all();
	return cudaSuccess;
}

/* one queued op, as the runtime's one call; logged (FAKE_EDMA_LOG) so a
 * test can see that rows went as one copy */
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
			      enum cudaMemcpyKind, cudaStream_t st)
{
	if (dpitch < width || spitch < width || !height)
		return fail(cudaErrorInvalidValue);
	fake_stream *s = (fake_stream *)st;
	{
		std::lock_guard<std::mutex> lk(s->mu);
		copy_op op = {dst, src, width};
		op.rows = height;
		op.spitch = spitch;
		op.dpitch = dpitch;
		s->q.push_back(op);
		s->queued++;
	}
	s->cv.notify_all();
	log_line("COPY2D", height);
	return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int)
{
	*e = (cudaEvent_t) new fake_event;
	return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	delete (fake_event *)e;
	return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st)
{
	fake_event *e = (fake_event *)ev;
	fake_stream *s = (fake_stream *)st;
	std::lock_guard<std::mutex> lk(s->mu);
	e->s = s;
	e->at = s->queued;
	return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t ev)
{
	fake_event *e = (fake_event *)ev;
	if (!e->s)
		return cudaSuccess;
	std::lock_guard<std::mutex> lk(e->s->mu);
	return e->s->ran >= e->at ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h, unsigned int)
{
	uint64_t addr;
	memcpy(&addr, &h, sizeof(addr));
	log_line("MAP", addr);
	const uint64_t delay = env_num("FAKE_EDMA_DELAY_MS", 10);
	if (delay)
		usleep((useconds_t)(delay * 1000));
	std::lock_guard<std::mutex> lk(ipc_mu);
	if (addr == env_num("FAKE_EDMA_REFUSE", 16))
		return fail(cudaErrorInvalidValue);
	for (auto &o : opened)
		if (o.second == addr)
			return fail(cudaErrorInvalidValue); /* as CUDA: one open per handle and process */
	const uint64_t base = env_num("FAKE_EDMA_DEV_BASE", 16);
	if (dev) {
		if (addr < base || addr - base >= dev_len)
			return fail(cudaErrorInvalidValue);
		*p = dev + (addr - base);
	} else {
		*p = (void *)(uintptr_t)addr; /* never read: no copies without the file */
	}
	opened[*p] = addr;
	return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void *p)
{
	std::lock_guard<std::mutex> lk(ipc_mu);
	auto it = opened.find(p);
	if (it == opened.end())
		return fail(cudaErrorInvalidValue);
	log_line("UNMAP", it->second);
	opened.erase(it);
	return cudaSuccess;
}

} // extern "C"
