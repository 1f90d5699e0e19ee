/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme-emu-dma: the emulator's copy engine in a process of its own
 * (../dma_proto.h says why). Started by the application's copy engine
 * (../dma_client.cu), never by hand:
 *
 *   gpunvme-emu-dma PCI_BUS_ID      fd 3: set-up socket, fd 4: shared memory
 *
 * One thread serves the socket; one thread, the mover, moves every open
 * lane's requests: each group becomes a cudaMemcpyAsync on the lane's
 * stream and an event; a lane's `done` advances as its events complete, in
 * order. One thread, not one per lane: a lane's thread polled its events
 * while its copies ran, so every open lane kept a core busy beside the
 * application's emulator workers; one thread issues a 4 MiB group in a few
 * microseconds. (It did not end the workers' waits for staging with 12
 * workers, 0.3 s either way: those come from the hop itself,
 * bench/results/emu-load-2026-11-28b.) The process exits when the socket
 * closes (the application exited or closed it).
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../dma_proto.h"
#include "../strided_run.h"

static struct edma_shm *shm;
static uint8_t *stage;
static uint64_t lane_stage; /* the header's, checked at the start */

/* ---- the application's GPU allocations, opened from their IPC handles ---- */

#define MAX_MAPS 1024
static pthread_rwlock_t map_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct {
	uint64_t base, size;
	uint8_t *local;
} maps[MAX_MAPS];
static unsigned n_maps;

/* the local address of [dev, dev + len), NULL when no allocation holds it;
 * *which: the allocation's entry (a copy may not run across two) */
static void *map_find(uint64_t dev, uint64_t len, unsigned *which)
{
	void *p = NULL;
	pthread_rwlock_rdlock(&map_lock);
	for (unsigned i = 0; i < n_maps && !p; i++)
		if (dev >= maps[i].base && dev + len <= maps[i].base + maps[i].size) {
			p = maps[i].local + (dev - maps[i].base);
			*which = i;
		}
	pthread_rwlock_unlock(&map_lock);
	return p;
}

/* ---- lanes ---- */

struct lane {
	int running; /* under lanes_mu: the mover serves it */
	/* its stream, events and pinned staging, made at its first open and
	 * kept for the process's life: an application opens and closes its
	 * lanes with every queue set (each loader), and registering 4 MiB and
	 * creating 64 events per lane each time was part of every call */
	int prepared;
	cudaStream_t s;
	/* one event per group of requests, recorded in the slot of its last
	 * request; gend[first % EDMA_RING]: the group's end (free-running) */
	cudaEvent_t ev[EDMA_RING];
	uint32_t gend[EDMA_RING];
	uint32_t next, done; /* the mover's: requests issued, requests complete */
};
static struct lane lanes[EDMA_LANES];
/* Held by the mover for each sweep over the lanes, and by the socket's
 * thread to add or remove a lane: a lane it has removed is never touched
 * again by a sweep, so its stream and events can go. */
static pthread_mutex_t lanes_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned lanes_hi; /* under lanes_mu: lanes at or above it are not running */
static pthread_t mover;
static int mover_running, mover_stop;

static uint32_t ld(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

/* set-up times for the replies' open_us */
static uint64_t now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

static void fail(struct edma_lane *L, int err)
{
	int32_t z = 0;
	__atomic_compare_exchange_n(&L->err, &z, err, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

static void publish_done(struct edma_lane *L, uint32_t done)
{
	/* pairs with the application's acquire of done (dma_client.cu): the
	 * D2H bytes in staging are complete before it reads them */
	__atomic_store_n(&L->done, done, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&L->app_sleep, __ATOMIC_SEQ_CST))
		edma_futex(&L->done, FUTEX_WAKE, 1, NULL);
}

/*
 * Requests [first, end) of lane L as copies on its stream: requests that
 * continue each other (the next GPU bytes of the same allocation from the
 * next staging bytes, the same direction) as one copy, then one event for
 * them all. The application hands a lane's reads over a few at a time and
 * its staging is a byte ring (dma_client.cu), so a sequential read's
 * requests merge; one copy and one event per 128 KiB request held eight
 * lanes to 14-16 GB/s (bench/results/emu-file-2026-11-28). Reads of one
 * length from the next staging bytes to GPU addresses a fixed pitch apart
 * in one allocation (an md member's chunks, read as strided segments) go
 * as one 2D copy, as in the application's own lanes (strided_run.h);
 * GPUNVME_EMU_2D=0 (read at start) copies them row by row.
 */
static bool no2d;

static void issue_run(struct edma_lane *L, cudaStream_t s, uint32_t op, const struct strided_run *run,
		      uint8_t *host)
{
	uint8_t *dev = (uint8_t *)(uintptr_t)run->dev;
	cudaError_t e = run->rows > 1 ? cudaMemcpy2DAsync(dev, run->pitch, host, run->w, run->w, run->rows,
							  cudaMemcpyHostToDevice, s)
			: op == EDMA_H2D ? cudaMemcpyAsync(dev, host, run->len, cudaMemcpyHostToDevice, s)
					 : cudaMemcpyAsync(host, dev, run->len, cudaMemcpyDeviceToHost, s);
	if (e != cudaSuccess) {
		cudaGetLastError();
		fail(L, -EIO);
	}
}

static void issue_group(struct lane *me, struct edma_lane *L, uint32_t first, uint32_t end)
{
	struct strided_run run = { 0, 0, 0, 0, 0 }; /* the run being gathered, in local addresses */
	uint8_t *rhost = NULL;                     /* its staging bytes */
	unsigned rmap = 0;
	uint32_t rop = 0;
	bool bad = false;
	for (uint32_t i = first;; i++) {
		const struct edma_req *r = i != end ? &L->ring[i % EDMA_RING] : NULL;
		unsigned which = 0;
		uint8_t *dev = NULL;
		if (r && r->len <= EDMA_CHUNK && r->off + r->len <= EDMA_LANES * lane_stage)
			dev = (uint8_t *)map_find(r->dev, r->len, &which);
		uint8_t *host = r ? stage + r->off : NULL;
		/* the next staging bytes into the same allocation, the same way:
		 * one copy, rows of one where they go to the GPU */
		if (r && dev && run.len && r->op == rop && which == rmap && host == rhost + run.len &&
		    strided_run_join(&run, (uint64_t)(uintptr_t)dev, r->len, !no2d && rop == EDMA_H2D))
			continue;
		if (run.len) {
			issue_run(L, me->s, rop, &run, rhost);
			run.len = 0;
		}
		if (!r)
			break;
		if (!dev) {
			bad = true; /* outside every mapped allocation, or malformed */
			continue;
		}
		strided_run_start(&run, (uint64_t)(uintptr_t)dev, r->len);
		rhost = host;
		rmap = which;
		rop = r->op;
	}
	if (bad)
		fail(L, -EFAULT);
	me->gend[first % EDMA_RING] = end;
	/* an event never recorded reads complete: the group ends with its
	 * error set */
	if (cudaEventRecord(me->ev[(end - 1) % EDMA_RING], me->s) != cudaSuccess) {
		cudaGetLastError();
		fail(L, -EIO);
	}
}

/* One lane's turn in a sweep (lanes_mu held): its new requests issued as a
 * group, its oldest group's event checked. *busy: copies of it are still
 * on the GPU. Returns whether it moved. */
static bool lane_turn(struct lane *me, struct edma_lane *L, bool *busy)
{
	bool moved = false;
	/* pairs with the application's release of posted: the requests and
	 * their staging bytes are visible */
	const uint32_t posted = ld(&L->posted);
	if (me->next != posted && me->next - me->done < EDMA_RING) {
		const uint32_t room = EDMA_RING - (me->next - me->done);
		issue_group(me, L, me->next, posted - me->next < room ? posted : me->done + EDMA_RING);
		me->next = me->gend[me->next % EDMA_RING];
		moved = true;
	}
	if (me->done != me->next) {
		const uint32_t end = me->gend[me->done % EDMA_RING];
		cudaError_t q = cudaEventQuery(me->ev[(end - 1) % EDMA_RING]);
		if (q != cudaErrorNotReady) {
			if (q != cudaSuccess) {
				cudaGetLastError();
				fail(L, -EIO);
			}
			me->done = end;
			publish_done(L, me->done);
			moved = true;
		}
		*busy |= me->done != me->next;
	}
	return moved;
}

/* Whether a running lane has requests the mover has not issued (lanes_mu held) */
static bool lanes_posted(void)
{
	for (unsigned l = 0; l < lanes_hi; l++)
		if (lanes[l].running && __atomic_load_n(&shm->lane[l].posted, __ATOMIC_SEQ_CST) != lanes[l].next)
			return true;
	return false;
}

static void *mover_main(void *)
{
	unsigned idle = 0, polls = 0;
	while (!__atomic_load_n(&mover_stop, __ATOMIC_ACQUIRE)) {
		bool moved = false, busy = false;
		pthread_mutex_lock(&lanes_mu);
		for (unsigned l = 0; l < lanes_hi; l++)
			if (lanes[l].running)
				moved |= lane_turn(&lanes[l], &shm->lane[l], &busy);
		pthread_mutex_unlock(&lanes_mu);
		if (moved) {
			idle = polls = 0;
			continue;
		}
		if (busy) {
			/* copies held up (a busy GPU): as the in-process lanes'
			 * wait (stream_wait.cuh), poll in short sleeps rather
			 * than take a core */
			if (++polls > 1000)
				usleep(20);
			continue;
		}
		/* nothing queued: spin a little (the next command of a busy
		 * worker follows within microseconds: ~100 us here), then
		 * sleep until a lane's requests are published. The store of
		 * srv_sleep and the loads of posted pair with the application's
		 * store of posted and load of srv_sleep (dma_client.cu,
		 * publish), all sequentially consistent: either it sees the
		 * requests here or it sees srv_sleep and bumps kick, which
		 * this futex wait compares against the value read before */
		if (++idle < 2000) {
			__builtin_ia32_pause();
			continue;
		}
		__atomic_store_n(&shm->srv_sleep, 1, __ATOMIC_SEQ_CST);
		const uint32_t kick = __atomic_load_n(&shm->kick, __ATOMIC_SEQ_CST);
		pthread_mutex_lock(&lanes_mu);
		const bool more = lanes_posted();
		pthread_mutex_unlock(&lanes_mu);
		if (!more) {
			struct timespec t = {0, 50 * 1000 * 1000}; /* wakes to see mover_stop */
			edma_futex(&shm->kick, FUTEX_WAIT, kick, &t);
		}
		__atomic_store_n(&shm->srv_sleep, 0, __ATOMIC_SEQ_CST);
		idle = 0;
	}
	return NULL;
}

static int lane_stop(unsigned l)
{
	struct lane *me = &lanes[l];
	if (!me->running)
		return 0;
	pthread_mutex_lock(&lanes_mu);
	me->running = 0; /* no sweep sees it from here on */
	while (lanes_hi && !lanes[lanes_hi - 1].running)
		lanes_hi--;
	pthread_mutex_unlock(&lanes_mu);
	/* the application closes a lane when its copies are done; a dying
	 * one's last copies land before its staging is used again */
	cudaStreamSynchronize(me->s);
	return 0;
}

/* At exit: what lane_prepare made (the lane is stopped) */
static void lane_release(unsigned l)
{
	struct lane *me = &lanes[l];
	if (!me->prepared)
		return;
	for (unsigned i = 0; i < EDMA_RING; i++)
		cudaEventDestroy(me->ev[i]);
	cudaStreamDestroy(me->s);
	cudaHostUnregister(stage + (uint64_t)l * lane_stage);
	me->prepared = 0;
}

static int lane_prepare(unsigned l, char *why, size_t wlen)
{
	struct lane *me = &lanes[l];
	if (me->prepared)
		return 0;
	cudaError_t e = cudaHostRegister(stage + (uint64_t)l * lane_stage, lane_stage, cudaHostRegisterDefault);
	if (e != cudaSuccess) {
		cudaGetLastError();
		snprintf(why, wlen, "lane set-up: %s", cudaGetErrorString(e));
		return -ENOMEM;
	}
	unsigned k = 0;
	e = cudaStreamCreateWithFlags(&me->s, cudaStreamNonBlocking);
	for (; e == cudaSuccess && k < EDMA_RING; k++)
		if ((e = cudaEventCreateWithFlags(&me->ev[k], cudaEventDisableTiming)) != cudaSuccess)
			break;
	if (e != cudaSuccess) {
		cudaGetLastError();
		snprintf(why, wlen, "lane set-up: %s", cudaGetErrorString(e));
		while (k--)
			cudaEventDestroy(me->ev[k]);
		if (me->s)
			cudaStreamDestroy(me->s);
		me->s = NULL;
		cudaHostUnregister(stage + (uint64_t)l * lane_stage);
		return -ENOMEM;
	}
	me->prepared = 1;
	return 0;
}

static int lane_start(unsigned l, char *why, size_t wlen)
{
	struct lane *me = &lanes[l];
	struct edma_lane *L = &shm->lane[l];
	int rc = lane_prepare(l, why, wlen);
	if (rc)
		return rc;
	/* a fresh lane: both counters at 0 (the application resets its side
	 * after the open's answer, dma_client.cu edma_open) */
	me->next = me->done = 0;
	memset(me->gend, 0, sizeof(me->gend));
	memset(L, 0, sizeof(*L));
	if (!mover_running) {
		if (pthread_create(&mover, NULL, mover_main, NULL)) {
			snprintf(why, wlen, "cannot start a thread");
			return -EAGAIN;
		}
		mover_running = 1;
	}
	pthread_mutex_lock(&lanes_mu);
	me->running = 1;
	if (lanes_hi <= l)
		lanes_hi = l + 1;
	pthread_mutex_unlock(&lanes_mu);
	return 0;
}

/* ---- set-up requests ---- */

static void serve(const struct edma_ctl *c, struct edma_reply *r)
{
	switch (c->msg) {
	case EDMA_OPEN: {
		const uint64_t t0 = now_us();
		unsigned run = 0, first = 0;
		for (unsigned l = 0; l < EDMA_LANES && run < c->n; l++) {
			if (lanes[l].running) {
				run = 0;
				continue;
			}
			if (!run)
				first = l;
			run++;
		}
		if (c->n == 0 || run < c->n) {
			r->rc = -ENOSPC;
			snprintf(r->why, sizeof(r->why), "%u lanes wanted, no %u free of %u", c->n, c->n, EDMA_LANES);
			return;
		}
		for (unsigned l = first; l < first + c->n; l++) {
			r->rc = lane_start(l, r->why, sizeof(r->why));
			if (r->rc) {
				while (l-- > first)
					lane_stop(l);
				return;
			}
		}
		r->first = first;
		r->open_us = (uint32_t)(now_us() - t0);
		return;
	}
	case EDMA_CLOSE:
		for (unsigned l = c->first; l < c->first + c->n && l < EDMA_LANES; l++)
			lane_stop(l);
		return;
	case EDMA_MAP: {
		cudaIpcMemHandle_t h;
		memcpy(&h, c->handle, sizeof(h));
		void *p = NULL;
		const uint64_t t0 = now_us();
		cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
		r->open_us = (uint32_t)(now_us() - t0);
		if (e != cudaSuccess) {
			cudaGetLastError();
			r->rc = -EINVAL;
			snprintf(r->why, sizeof(r->why), "cudaIpcOpenMemHandle: %s", cudaGetErrorString(e));
			return;
		}
		pthread_rwlock_wrlock(&map_lock);
		if (n_maps == MAX_MAPS) {
			pthread_rwlock_unlock(&map_lock);
			cudaIpcCloseMemHandle(p);
			r->rc = -ENOSPC;
			snprintf(r->why, sizeof(r->why), "more than %u GPU allocations mapped", MAX_MAPS);
			return;
		}
		maps[n_maps].base = c->base;
		maps[n_maps].size = c->size;
		maps[n_maps].local = (uint8_t *)p;
		n_maps++;
		pthread_rwlock_unlock(&map_lock);
		return;
	}
	case EDMA_UNMAP: {
		void *p = NULL;
		pthread_rwlock_wrlock(&map_lock);
		for (unsigned i = 0; i < n_maps; i++)
			if (maps[i].base == c->base) {
				p = maps[i].local;
				maps[i] = maps[--n_maps];
				break;
			}
		pthread_rwlock_unlock(&map_lock);
		/* the application unmaps only when no copy of its lanes uses
		 * the range (the emulator's unmap waits for the commands) */
		if (p)
			cudaIpcCloseMemHandle(p);
		else
			r->rc = -ENOENT;
		return;
	}
	default:
		r->rc = -EINVAL;
		snprintf(r->why, sizeof(r->why), "unknown request %u", c->msg);
	}
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "gpunvme-emu-dma: started by the gpunvme library, not by hand\n");
		return 2;
	}
	/* its name in ps and /proc (the program is a memfd: the name would
	 * be a file descriptor's number) */
	prctl(PR_SET_NAME, "gpunvme-emu-dma", 0, 0, 0);
	const uint64_t t0 = now_us();
	const char *s2 = getenv("GPUNVME_EMU_2D");
	no2d = s2 && !strcmp(s2, "0");
	int dev;
	cudaError_t e = cudaDeviceGetByPCIBusId(&dev, argv[1]);
	if (e == cudaSuccess)
		e = cudaSetDevice(dev);
	if (e == cudaSuccess)
		e = cudaFree(0);
	/* the memory at the size the application made it (its header says
	 * the staging per lane) */
	struct stat st;
	void *m = fstat(4, &st) ? MAP_FAILED : mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, 4, 0);
	struct edma_reply hello;
	memset(&hello, 0, sizeof(hello));
	hello.open_us = (uint32_t)(now_us() - t0);
	if (e != cudaSuccess) {
		hello.rc = -ENODEV;
		snprintf(hello.why, sizeof(hello.why), "GPU %s: %s", argv[1], cudaGetErrorString(e));
	} else if (m == MAP_FAILED) {
		hello.rc = -ENOMEM;
		snprintf(hello.why, sizeof(hello.why), "cannot map the shared memory: %s", strerror(errno));
	} else {
		shm = (struct edma_shm *)m;
		stage = (uint8_t *)m + shm->stage_off;
		lane_stage = shm->lane_stage;
		if (shm->magic != EDMA_MAGIC || !edma_lane_stage_ok(lane_stage) ||
		    (uint64_t)st.st_size != edma_shm_size(lane_stage)) {
			hello.rc = -EPROTO;
			snprintf(hello.why, sizeof(hello.why), "the library and this program disagree");
		}
	}
	if (send(3, &hello, sizeof(hello), 0) != (ssize_t)sizeof(hello) || hello.rc)
		return 1;
	for (;;) {
		struct edma_ctl c;
		ssize_t n = recv(3, &c, sizeof(c), 0);
		if (n <= 0)
			break; /* the application is gone, or done with us */
		struct edma_reply r;
		memset(&r, 0, sizeof(r));
		if (n != (ssize_t)sizeof(c)) {
			r.rc = -EPROTO;
			snprintf(r.why, sizeof(r.why), "a request of %zd bytes", n);
		} else {
			serve(&c, &r);
		}
		if (send(3, &r, sizeof(r), 0) != (ssize_t)sizeof(r))
			break;
	}
	for (unsigned l = 0; l < EDMA_LANES; l++)
		lane_stop(l);
	if (mover_running) {
		__atomic_store_n(&mover_stop, 1, __ATOMIC_RELEASE);
		pthread_join(mover, NULL);
	}
	for (unsigned l = 0; l < EDMA_LANES; l++)
		lane_release(l);
	return 0;
}
