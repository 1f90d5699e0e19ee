/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A stand-in for the emulator's DMA process (src/emu_cuda/server), for
 * test_dma_client: the same start (fd 3 the set-up socket, fd 4 the shared
 * memory, a greeting) and the same set-up protocol (dma_proto.h), with no
 * GPU. It opens nothing: a MAP is answered from its table, as the real one
 * answers after cudaIpcOpenMemHandle. What it does is set by the
 * environment the client passes on (posix_spawn with environ):
 *   FAKE_EDMA_LOG        append one line per request ("MAP 0x...", "UNMAP
 *                        0x...", "OPEN n", "CLOSE first n")
 *   FAKE_EDMA_DELAY_MS   wait this long before each MAP's answer
 *   FAKE_EDMA_REFUSE     refuse the MAP of this base address (hex)
 *   FAKE_EDMA_HANG_AT    never answer the request of this number (1 = the
 *                        first after the greeting), nor any after it
 *   FAKE_EDMA_EXIT_AT    exit at the request of this number, unanswered
 * and for the data path, a mover as the real one's (the lanes' rings in
 * the shared memory, the same sleep and wake protocol), whose "GPU memory"
 * is a file both processes map:
 *   FAKE_EDMA_DEV        that file; a request's address minus
 *   FAKE_EDMA_DEV_BASE   this (hex) is its offset there
 *   FAKE_EDMA_COPY_US    each group of requests takes this long
 *   FAKE_EDMA_DIE_AFTER  the process exits (as if killed) once it has moved
 *                        this many requests
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "emu_cuda/dma_proto.h"

static unsigned long env_num(const char *name, int base)
{
	const char *v = getenv(name);
	return v && *v ? strtoul(v, NULL, base) : 0;
}

/* the allocations mapped (base, size), shared with the mover */
static pthread_mutex_t maps_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t map_base[256], map_size[256];
static unsigned nmapped;

static struct edma_shm *shm;
static uint8_t *stage, *dev;
static uint64_t lane_stage;
static uint64_t dev_len, dev_base, copy_us, die_after;
static unsigned lanes_open, opens; /* opens: OPEN requests so far (the mover starts its lanes afresh) */
static pthread_mutex_t lanes_mu = PTHREAD_MUTEX_INITIALIZER; /* a sweep, or an OPEN's reset */

static bool in_map(uint64_t a, uint64_t len)
{
	bool ok = false;
	pthread_mutex_lock(&maps_mu);
	for (unsigned i = 0; i < nmapped && !ok; i++)
		ok = a >= map_base[i] && a + len <= map_base[i] + map_size[i];
	pthread_mutex_unlock(&maps_mu);
	return ok;
}

static uint64_t now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

/* Requests [from, to) of lane L, done now: as a GPU's copy, they read
 * their staging bytes when they run, not when they were issued, so a
 * client that reuses staging too early is caught by the bytes. */
static void run_group(struct edma_lane *L, uint32_t from, uint32_t to, uint64_t *moved)
{
	for (uint32_t i = from; i != to; i++) {
		const struct edma_req *r = &L->ring[i % EDMA_RING];
		const bool ok = r->len <= EDMA_CHUNK && r->off + r->len <= EDMA_LANES * lane_stage &&
				in_map(r->dev, r->len) && r->dev >= dev_base && r->dev - dev_base + r->len <= dev_len;
		if (!ok) {
			int32_t z = 0;
			__atomic_compare_exchange_n(&L->err, &z, -EFAULT, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
		} else if (r->op == EDMA_H2D) {
			memcpy(dev + (r->dev - dev_base), stage + r->off, r->len);
		} else {
			memcpy(stage + r->off, dev + (r->dev - dev_base), r->len);
		}
		if (die_after && ++*moved >= die_after)
			_exit(9); /* as a process killed mid-copy: nothing more is done */
	}
}

static void *mover(void *arg)
{
	(void)arg;
	uint32_t next[EDMA_LANES] = {0}, done[EDMA_LANES] = {0};
	uint64_t due[EDMA_LANES] = {0}, moved = 0;
	unsigned idle = 0, seen_opens = 0;
	for (;;) {
		bool any = false;
		pthread_mutex_lock(&lanes_mu);
		const unsigned nl = __atomic_load_n(&lanes_open, __ATOMIC_ACQUIRE);
		if (__atomic_load_n(&opens, __ATOMIC_ACQUIRE) != seen_opens) {
			/* lanes opened again (closed idle before): counters at 0 */
			seen_opens = __atomic_load_n(&opens, __ATOMIC_ACQUIRE);
			memset(next, 0, sizeof(next));
			memset(done, 0, sizeof(done));
		}
		for (unsigned l = 0; l < nl; l++) {
			struct edma_lane *L = &shm->lane[l];
			if (done[l] != next[l]) {
				any = true; /* a group on the "GPU" */
				if (now_us() < due[l])
					continue;
				run_group(L, done[l], next[l], &moved);
				done[l] = next[l];
				/* as the real mover (dma_server.cu, publish_done) */
				__atomic_store_n(&L->done, done[l], __ATOMIC_SEQ_CST);
				if (__atomic_load_n(&L->app_sleep, __ATOMIC_SEQ_CST))
					edma_futex(&L->done, FUTEX_WAKE, 1, NULL);
			}
			/* pairs with the client's release of posted */
			const uint32_t posted = __atomic_load_n(&L->posted, __ATOMIC_ACQUIRE);
			if (posted != next[l]) {
				any = true;
				next[l] = posted; /* issued: runs copy_us from now */
				due[l] = now_us() + copy_us;
			}
		}
		pthread_mutex_unlock(&lanes_mu);
		if (any) {
			idle = 0;
			continue;
		}
		if (++idle < 2000)
			continue;
		/* the real mover's sleep (dma_server.cu, mover_main) */
		__atomic_store_n(&shm->srv_sleep, 1, __ATOMIC_SEQ_CST);
		const uint32_t kick = __atomic_load_n(&shm->kick, __ATOMIC_SEQ_CST);
		bool more = false;
		for (unsigned l = 0; l < nl; l++)
			more |= __atomic_load_n(&shm->lane[l].posted, __ATOMIC_SEQ_CST) != next[l];
		if (!more) {
			struct timespec t = {0, 50 * 1000 * 1000};
			edma_futex(&shm->kick, FUTEX_WAIT, kick, &t);
		}
		__atomic_store_n(&shm->srv_sleep, 0, __ATOMIC_SEQ_CST);
		idle = 0;
	}
	return NULL;
}

int main(void)
{
	const char *logpath = getenv("FAKE_EDMA_LOG");
	FILE *log = logpath ? fopen(logpath, "a") : NULL;
	const unsigned long delay_ms = env_num("FAKE_EDMA_DELAY_MS", 10);
	const uint64_t refuse = env_num("FAKE_EDMA_REFUSE", 16);
	const unsigned long hang_at = env_num("FAKE_EDMA_HANG_AT", 10), exit_at = env_num("FAKE_EDMA_EXIT_AT", 10);
	copy_us = env_num("FAKE_EDMA_COPY_US", 10);
	die_after = env_num("FAKE_EDMA_DIE_AFTER", 10);
	dev_base = env_num("FAKE_EDMA_DEV_BASE", 16);
	struct stat sst;
	void *m = fstat(4, &sst) ? MAP_FAILED : mmap(NULL, (size_t)sst.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, 4, 0);
	if (m == MAP_FAILED)
		return 1;
	shm = (struct edma_shm *)m;
	stage = (uint8_t *)m + shm->stage_off;
	lane_stage = shm->lane_stage;
	if (shm->magic != EDMA_MAGIC || !edma_lane_stage_ok(lane_stage) ||
	    (uint64_t)sst.st_size != edma_shm_size(lane_stage))
		return 1;
	const char *devpath = getenv("FAKE_EDMA_DEV");
	if (devpath && *devpath) {
		int fd = open(devpath, O_RDWR);
		struct stat st;
		if (fd < 0 || fstat(fd, &st))
			return 1;
		dev_len = (uint64_t)st.st_size;
		dev = (uint8_t *)mmap(NULL, dev_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (dev == MAP_FAILED)
			return 1;
	}
	pthread_t th;
	if (pthread_create(&th, NULL, mover, NULL))
		return 1;
	struct edma_reply hello;
	memset(&hello, 0, sizeof(hello));
	if (send(3, &hello, sizeof(hello), 0) != (ssize_t)sizeof(hello))
		return 1;
	for (unsigned long nreq = 1;; nreq++) {
		struct edma_ctl c;
		ssize_t n = recv(3, &c, sizeof(c), 0);
		if (n <= 0)
			break;
		struct edma_reply r;
		memset(&r, 0, sizeof(r));
		if (log) {
			if (c.msg == EDMA_MAP || c.msg == EDMA_UNMAP)
				fprintf(log, "%s 0x%llx\n", c.msg == EDMA_MAP ? "MAP" : "UNMAP", (unsigned long long)c.base);
			else
				fprintf(log, "%s %u %u\n", c.msg == EDMA_OPEN ? "OPEN" : "CLOSE", c.first, c.n);
			fflush(log);
		}
		if (nreq == exit_at)
			return 0;
		if (hang_at && nreq >= hang_at)
			continue; /* read, never answered */
		switch (c.msg) {
		case EDMA_MAP: {
			struct timespec t = {(time_t)(delay_ms / 1000), (long)(delay_ms % 1000) * 1000000L};
			nanosleep(&t, NULL);
			pthread_mutex_lock(&maps_mu);
			bool twice = false;
			for (unsigned i = 0; i < nmapped; i++)
				twice |= map_base[i] == c.base;
			if (c.base == refuse) {
				r.rc = -EINVAL;
				snprintf(r.why, sizeof(r.why), "refused by the test");
			} else if (twice || nmapped == 256) {
				/* the real process: a second open of one handle fails */
				r.rc = -EINVAL;
				snprintf(r.why, sizeof(r.why), "opened twice");
			} else {
				map_base[nmapped] = c.base;
				map_size[nmapped++] = c.size;
			}
			pthread_mutex_unlock(&maps_mu);
			break;
		}
		case EDMA_UNMAP: {
			r.rc = -ENOENT;
			pthread_mutex_lock(&maps_mu);
			for (unsigned i = 0; i < nmapped; i++)
				if (map_base[i] == c.base) {
					--nmapped;
					map_base[i] = map_base[nmapped];
					map_size[i] = map_size[nmapped];
					r.rc = 0;
					break;
				}
			pthread_mutex_unlock(&maps_mu);
			break;
		}
		case EDMA_OPEN:
			/* lanes [0, n): one engine per process in these tests */
			pthread_mutex_lock(&lanes_mu);
			memset(shm->lane, 0, sizeof(shm->lane[0]) * c.n);
			__atomic_store_n(&lanes_open, c.n, __ATOMIC_RELEASE);
			__atomic_add_fetch(&opens, 1, __ATOMIC_RELEASE);
			pthread_mutex_unlock(&lanes_mu);
			r.first = 0;
			break;
		case EDMA_CLOSE:
			break;
		default:
			r.rc = -EINVAL;
		}
		if (send(3, &r, sizeof(r), 0) != (ssize_t)sizeof(r))
			break;
	}
	return 0;
}
