/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A bounded wait for a CUDA stream, for the host code of the GPU queues
 * (src/cuda) and of the emulator's copy engine (src/emu_cuda).
 * cudaStreamSynchronize has no deadline: work held up behind another
 * process's work on a shared GPU, or behind a context that faulted, would
 * hold a queue set-up, an emulator worker (and every queue it serves) or a
 * recovery for ever. Spins briefly (the small copies waited for usually
 * finish within microseconds, and a sleep would add to the emulated
 * latency), then sleeps in 50 us steps. Returns cudaErrorNotReady when the
 * deadline passed with the work still queued.
 */
#ifndef GPUNVME_BASE_STREAM_WAIT_CUH
#define GPUNVME_BASE_STREAM_WAIT_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <unistd.h>

#include "base/base.h"

/* 10 s: far beyond any copy either issues */
#define GPUNVME_STREAM_WAIT_NS 10000000000ull

/* One bounded poll loop for both waits: q(h) is cudaStreamQuery or
 * cudaEventQuery. */
static inline cudaError_t gpunvme_cuda_poll(cudaError_t (*q)(void *), void *h, uint64_t timeout_ns)
{
	const uint64_t t0 = gpunvme_now_ns();
	unsigned spins = 0;
	cudaError_t e;
	while ((e = q(h)) == cudaErrorNotReady) {
		if (gpunvme_now_ns() - t0 > timeout_ns)
			return cudaErrorNotReady;
		if (++spins > 1000)
			usleep(50);
	}
	return e;
}

static inline cudaError_t gpunvme_stream_query_(void *s)
{
	return cudaStreamQuery((cudaStream_t)s);
}

static inline cudaError_t gpunvme_event_query_(void *ev)
{
	return cudaEventQuery((cudaEvent_t)ev);
}

static inline cudaError_t gpunvme_stream_wait(cudaStream_t s, uint64_t timeout_ns)
{
	return gpunvme_cuda_poll(gpunvme_stream_query_, (void *)s, timeout_ns);
}

/* The same for the work before an event (cudaEventSynchronize has no
 * deadline either). */
static inline cudaError_t gpunvme_event_wait(cudaEvent_t ev, uint64_t timeout_ns)
{
	return gpunvme_cuda_poll(gpunvme_event_query_, (void *)ev, timeout_ns);
}

#endif
