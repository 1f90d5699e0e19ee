/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The application's side of the emulator's DMA process (dma_proto.h,
 * dma_client.h). The process's program is linked into this library
 * (dma_exe.S embeds it) and started from a memfd, so that every program
 * and Python module that has the copy engine has it too, with no file to
 * find at run time.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "emu_cuda/dma_client.h"
#include "emu_cuda/dma_proto.h"

extern char **environ;
extern "C" const unsigned char gpunvme_emu_dma_exe[], gpunvme_emu_dma_exe_end[];

#define EDMA_START_MS 60000 /* the child's CUDA start: seconds on a busy machine */
#ifndef EDMA_CTL_MS
#define EDMA_CTL_MS 10000   /* one set-up request (tests/emu_cuda/test_dma_client.cpp sets its own) */
#endif
#define EDMA_STR_(x) #x
#define EDMA_STR(x) EDMA_STR_(x)
#define EDMA_WAIT_NS 10000000000ull /* copies: as the in-process lanes (GPUNVME_STREAM_WAIT_NS) */
#define MAX_GPUS 16
#define MAX_MAPS 1024
/* MAP requests in flight at most (edma_map): each is one message in the
 * socket's buffer (and one reply in the other), far below its size */
#define EDMA_MAPS_AHEAD 64

/*
 * A lane's staging is a byte ring: request i's bytes are the next ones
 * after request i - 1's (a wrap skips the ring's tail), so the requests of
 * a sequential read are contiguous in staging as in GPU memory, and the
 * process queues them as one copy (dma_server.cu). Requests are published
 * a few at a time for that: every merge_bytes, and at the lane's sync; a
 * request published alone is a copy and an event of its own, which held
 * eight lanes to 14-16 GB/s (copy_engine.cu, stage_ring, says why).
 */
struct lane_state {
	uint32_t posted;    /* requests this lane posted (the shared counter's only writer) */
	uint32_t published; /* of those, published to the process */
	uint64_t pos;       /* staging bytes taken (free-running, skipped tails included) */
	uint64_t unpub;     /* bytes of the requests posted but not published */
	uint64_t beg[EDMA_RING]; /* request i's bytes start at beg[i % EDMA_RING] (pos units) */
	uint64_t pread_ns, wait_ns; /* GPUNVME_EMU_PROFILE=1: in pread, waiting for staging */
};

struct edma {
	char bus_id[32];
	pid_t owner;  /* the process that started it (a forked child must not share its lanes) */
	pid_t pid;
	int dead;     /* the process exited: every wait fails at once */
	int sock;
	struct edma_shm *shm;
	uint8_t *stage;
	pthread_mutex_t ctl; /* one set-up exchange at a time; orders the table's additions and removals */
	pthread_rwlock_t maps_lock;
	struct {
		uint64_t base, size;
		unsigned refs;
		bool pending; /* its MAP is sent, not answered yet */
	} maps[MAX_MAPS];
	unsigned n_maps;
	/* MAP requests sent whose replies are not read yet, in the order sent
	 * (the process answers in order): their allocations' bases; under ctl */
	uint64_t ahead[EDMA_MAPS_AHEAD];
	unsigned ahead_first, ahead_n;
	/* a set-up exchange failed (no answer in time, the process gone): a
	 * late reply could no longer be told from the next one's, so every
	 * later request fails with this; under ctl */
	int ctl_err;
	/* a MAP the process refused, not yet reported by edma_mapped (its
	 * caller says why the copies stay in this process) */
	int fail_unsaid;
	char fail_why[200];
	uint64_t merge_bytes; /* publish every this many bytes of reads (GPUNVME_EMU_STAGE_MERGE) */
	uint64_t lane_stage;  /* staging per lane (GPUNVME_EMU_DMA_STAGE_MB), the shared header's */
	struct lane_state lane[EDMA_LANES];
	bool prof; /* edma_profile */
};

static pthread_mutex_t procs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct edma *procs[MAX_GPUS];
/* GPUs whose process would not start, and why: not tried again (a start
 * can take up to EDMA_START_MS) */
static struct {
	pid_t owner;
	char bus_id[32];
	char why[200];
} failed[MAX_GPUS];

/* ---- starting the process ---- */

static int recv_reply(int sock, struct edma_reply *r, int ms)
{
	struct pollfd p = {sock, POLLIN, 0};
	int n = poll(&p, 1, ms);
	if (n == 0)
		return -ETIMEDOUT;
	if (n < 0)
		return -errno;
	ssize_t got = recv(sock, r, sizeof(*r), 0);
	if (got != (ssize_t)sizeof(*r))
		return -EPIPE;
	return 0;
}

/* Staging per lane: GPUNVME_EMU_DMA_STAGE_MB (1 to 32, for a same-run
 * comparison of ring sizes), else 4 MiB. Read at the process's start. */
static uint64_t lane_stage_bytes(void)
{
	const char *v = getenv("GPUNVME_EMU_DMA_STAGE_MB");
	if (!v || !*v)
		return EDMA_LANE_STAGE_DEFAULT;
	char *end;
	unsigned long mb = strtoul(v, &end, 10);
	if (*end || !edma_lane_stage_ok((uint64_t)mb << 20)) {
		fprintf(stderr, "gpunvme: GPUNVME_EMU_DMA_STAGE_MB=%s: expected a whole number of MiB from %llu to %llu; "
				"the emulator's DMA process uses %llu\n",
			v, (unsigned long long)(EDMA_LANE_STAGE_MIN >> 20), (unsigned long long)(EDMA_LANE_STAGE_MAX >> 20),
			(unsigned long long)(EDMA_LANE_STAGE_DEFAULT >> 20));
		return EDMA_LANE_STAGE_DEFAULT;
	}
	return (uint64_t)mb << 20;
}

/* *fd moved to a number above the child's fixed ones (3, 4) */
static int above(int *fd)
{
	if (*fd > 4)
		return 0;
	int n = fcntl(*fd, F_DUPFD_CLOEXEC, 5);
	if (n < 0)
		return -1;
	close(*fd);
	*fd = n;
	return 0;
}

static struct edma *start(const char *bus_id, char *why, size_t wlen)
{
	struct edma *d = (struct edma *)calloc(1, sizeof(*d));
	int exe = -1, mem = -1, sv[2] = {-1, -1};
	void *m = MAP_FAILED;
	if (!d) {
		snprintf(why, wlen, "out of memory");
		return NULL;
	}
	snprintf(d->bus_id, sizeof(d->bus_id), "%s", bus_id);
	const uint64_t t0 = gpunvme_now_ns();
	d->lane_stage = lane_stage_bytes();
	/* 1 MiB: 22 GB/s against 17 piece by piece, every byte verified
	 * (H200, bench/results/emu-file-2026-11-28) */
	d->merge_bytes = emu_stage_merge_bytes(d->lane_stage / 4, 1u << 20);
	const uint64_t shm_size = edma_shm_size(d->lane_stage);
	const size_t exe_len = (size_t)(gpunvme_emu_dma_exe_end - gpunvme_emu_dma_exe);
	exe = (int)syscall(SYS_memfd_create, "gpunvme-emu-dma", MFD_CLOEXEC);
	mem = (int)syscall(SYS_memfd_create, "gpunvme-emu-dma-shm", MFD_CLOEXEC);
	if (exe < 0 || mem < 0 || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
		snprintf(why, wlen, "memfd_create/socketpair: %s", strerror(errno));
		goto fail;
	}
	/* the child gets the socket and the memory as fds 3 and 4 (dup2 in
	 * the spawn's file actions): none of the fds named there may be 3 or
	 * 4 itself, or one dup2 would replace another before the exec (a
	 * program with few fds open has its first memfd at 3) */
	if (above(&exe) || above(&mem) || above(&sv[1])) {
		snprintf(why, wlen, "fcntl(F_DUPFD_CLOEXEC): %s", strerror(errno));
		goto fail;
	}
	for (size_t off = 0; off < exe_len;) {
		ssize_t n = write(exe, gpunvme_emu_dma_exe + off, exe_len - off);
		if (n <= 0) {
			snprintf(why, wlen, "writing the program to a memfd: %s", strerror(errno));
			goto fail;
		}
		off += (size_t)n;
	}
	/* the shared memory: pages appear when first touched, so only the
	 * lanes in use cost memory */
	if (ftruncate(mem, (off_t)shm_size) ||
	    (m = mmap(NULL, shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, mem, 0)) == MAP_FAILED) {
		snprintf(why, wlen, "shared memory of %llu MiB: %s", (unsigned long long)(shm_size >> 20),
			 strerror(errno));
		goto fail;
	}
	d->shm = (struct edma_shm *)m;
	d->shm->magic = EDMA_MAGIC;
	d->shm->lanes = EDMA_LANES;
	d->shm->lane_stage = d->lane_stage;
	d->shm->stage_off = (sizeof(struct edma_shm) + 4095) & ~(uint64_t)4095;
	d->stage = (uint8_t *)m + d->shm->stage_off;
	{
		posix_spawn_file_actions_t fa;
		posix_spawn_file_actions_init(&fa);
		posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
		posix_spawn_file_actions_adddup2(&fa, mem, 4);
		/* its stdio on /dev/null: it reports through the socket, and
		 * a pipe it held would keep the application's reader (a shell,
		 * ctest) waiting after the application exits */
		posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
		posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
		posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
		char path[64], bus[32];
		snprintf(path, sizeof(path), "/proc/self/fd/%d", exe);
		snprintf(bus, sizeof(bus), "%s", bus_id);
		char *argv[] = {(char *)"gpunvme-emu-dma", bus, NULL};
		int rc = posix_spawn(&d->pid, path, &fa, NULL, argv, environ);
		posix_spawn_file_actions_destroy(&fa);
		if (rc) {
			snprintf(why, wlen, "cannot start it (posix_spawn of a memfd: %s)", strerror(rc));
			goto fail;
		}
	}
	close(sv[1]);
	sv[1] = -1;
	close(exe);
	exe = -1;
	close(mem);
	mem = -1;
	d->sock = sv[0];
	{
		struct edma_reply hello;
		int rc = recv_reply(d->sock, &hello, EDMA_START_MS);
		if (rc || hello.rc) {
			snprintf(why, wlen, "it did not start: %s",
				 rc ? (rc == -ETIMEDOUT ? "no answer within 60 s" : "it exited") : hello.why);
			kill(d->pid, SIGKILL);
			waitpid(d->pid, NULL, 0);
			goto fail;
		}
		/* GPUNVME_EMU_PROFILE=1 (read once, here): what a process's first
		 * Tier 2 load pays before its first copy */
		const char *pe = getenv("GPUNVME_EMU_PROFILE");
		if (pe && !strcmp(pe, "1"))
			fprintf(stderr, "gpunvme-emu profile: DMA process started in %.1f ms (%.1f ms of it its CUDA start)\n",
				(double)(gpunvme_now_ns() - t0) / 1e6, hello.open_us / 1e3);
	}
	pthread_mutex_init(&d->ctl, NULL);
	pthread_rwlock_init(&d->maps_lock, NULL);
	d->owner = getpid();
	return d;
fail:
	if (sv[0] >= 0)
		close(sv[0]);
	if (sv[1] >= 0)
		close(sv[1]);
	if (exe >= 0)
		close(exe);
	if (mem >= 0)
		close(mem);
	if (m != MAP_FAILED)
		munmap(m, shm_size);
	free(d);
	return NULL;
}

static void stop(struct edma *d)
{
	close(d->sock); /* the process sees the end of its socket and exits */
	for (int i = 0; i < 1000 && waitpid(d->pid, NULL, WNOHANG) == 0; i++)
		usleep(10000);
	if (waitpid(d->pid, NULL, WNOHANG) == 0) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
	}
	munmap(d->shm, edma_shm_size(d->lane_stage));
	pthread_mutex_destroy(&d->ctl);
	pthread_rwlock_destroy(&d->maps_lock);
	free(d);
}

int edma_spawn_check(const char *bus_id, char *why, size_t wlen)
{
	struct edma *d = start(bus_id, why, wlen);
	if (!d)
		return -EIO;
	stop(d);
	return 0;
}

struct edma *edma_get(char *why, size_t wlen)
{
	int dev;
	char bus[32];
	if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetPCIBusId(bus, sizeof(bus), dev) != cudaSuccess) {
		cudaGetLastError();
		snprintf(why, wlen, "no current GPU");
		return NULL;
	}
	struct edma *d = NULL;
	const pid_t me = getpid();
	pthread_mutex_lock(&procs_lock);
	unsigned i, f;
	for (f = 0; f < MAX_GPUS && failed[f].owner; f++)
		if (failed[f].owner == me && !strcmp(failed[f].bus_id, bus)) {
			snprintf(why, wlen, "%s", failed[f].why);
			pthread_mutex_unlock(&procs_lock);
			return NULL;
		}
	/* a slot of another process (inherited by fork) is this one's to
	 * reuse: its lanes belong to the parent */
	for (i = 0; i < MAX_GPUS && procs[i] && procs[i]->owner == me; i++)
		if (!strcmp(procs[i]->bus_id, bus)) {
			d = procs[i];
			break;
		}
	if (!d && i < MAX_GPUS) {
		d = start(bus, why, wlen);
		if (d)
			procs[i] = d;
		else if (f < MAX_GPUS) {
			failed[f].owner = me;
			snprintf(failed[f].bus_id, sizeof(failed[f].bus_id), "%s", bus);
			snprintf(failed[f].why, sizeof(failed[f].why), "%s", why);
		}
	} else if (!d) {
		snprintf(why, wlen, "more than %d GPUs", MAX_GPUS);
	}
	pthread_mutex_unlock(&procs_lock);
	return d;
}

/* ---- set-up requests ---- */

/* the table entry holding [addr, addr + len), or -1 (maps_lock held) */
static int map_at(struct edma *d, uint64_t addr, size_t len)
{
	for (unsigned i = 0; i < d->n_maps; i++)
		if (addr >= d->maps[i].base && addr + len <= d->maps[i].base + d->maps[i].size)
			return (int)i;
	return -1;
}

static const char *ctl_why(int rc)
{
	return rc == -ETIMEDOUT ? "the emulator's DMA process did not answer within " EDMA_STR(EDMA_CTL_MS) " ms"
				: "the emulator's DMA process is gone";
}

/* The answer to the oldest MAP in flight (ctl held): its allocation is
 * mapped, or it leaves the table and the reason waits for edma_mapped. */
static void settle_one(struct edma *d)
{
	struct edma_reply r;
	memset(&r, 0, sizeof(r));
	int rc = d->ctl_err ? d->ctl_err : recv_reply(d->sock, &r, EDMA_CTL_MS);
	if (rc) {
		d->ctl_err = rc;
		snprintf(r.why, sizeof(r.why), "%s", ctl_why(rc));
	} else {
		rc = r.rc;
	}
	const uint64_t base = d->ahead[d->ahead_first];
	d->ahead_first = (d->ahead_first + 1) % EDMA_MAPS_AHEAD;
	d->ahead_n--;
	pthread_rwlock_wrlock(&d->maps_lock);
	int i = map_at(d, base, 1);
	if (i >= 0 && d->maps[i].pending) {
		if (!rc)
			d->maps[i].pending = false;
		else
			d->maps[i] = d->maps[--d->n_maps];
	}
	pthread_rwlock_unlock(&d->maps_lock);
	if (rc) {
		snprintf(d->fail_why, sizeof(d->fail_why), "GPU memory at 0x%llx cannot be shared with the emulator's "
			 "DMA process: %s", (unsigned long long)base, r.why);
		__atomic_store_n(&d->fail_unsaid, 1, __ATOMIC_RELEASE);
	} else if (d->prof) {
		fprintf(stderr, "gpunvme-emu profile: DMA process: GPU memory at 0x%llx opened in %.1f ms\n",
			(unsigned long long)base, r.open_us / 1e3);
	}
}

/* One request and its reply (ctl held), after the MAP replies still on
 * their way: the socket carries one answer per request, in order. */
static int ctl_locked(struct edma *d, struct edma_ctl *c, struct edma_reply *r)
{
	while (d->ahead_n)
		settle_one(d);
	memset(r, 0, sizeof(*r));
	int rc = d->ctl_err;
	if (!rc)
		rc = send(d->sock, c, sizeof(*c), MSG_NOSIGNAL) == (ssize_t)sizeof(*c) ? 0 : -EPIPE;
	if (!rc)
		rc = recv_reply(d->sock, r, EDMA_CTL_MS);
	if (rc) {
		d->ctl_err = rc;
		snprintf(r->why, sizeof(r->why), "%s", ctl_why(rc));
	}
	return rc ? rc : r->rc;
}

static int ctl(struct edma *d, struct edma_ctl *c, struct edma_reply *r)
{
	pthread_mutex_lock(&d->ctl);
	int rc = ctl_locked(d, c, r);
	pthread_mutex_unlock(&d->ctl);
	return rc;
}

int edma_open(struct edma *d, unsigned n, unsigned *first, char *why, size_t wlen)
{
	struct edma_ctl c;
	struct edma_reply r;
	memset(&c, 0, sizeof(c));
	c.msg = EDMA_OPEN;
	c.n = n;
	int rc = ctl(d, &c, &r);
	if (rc) {
		snprintf(why, wlen, "%s", r.why);
		return rc;
	}
	*first = r.first;
	for (unsigned l = r.first; l < r.first + n; l++)
		memset(&d->lane[l], 0, sizeof(d->lane[l]));
	if (d->prof)
		fprintf(stderr, "gpunvme-emu profile: DMA process: lanes %u-%u opened in %.1f ms\n", r.first, r.first + n - 1,
			r.open_us / 1e3);
	return 0;
}

void edma_profile(struct edma *d, bool on)
{
	d->prof = on;
}

void edma_close(struct edma *d, unsigned first, unsigned n)
{
	for (unsigned l = first; d->prof && l < first + n; l++)
		if (d->lane[l].pread_ns)
			fprintf(stderr, "gpunvme-emu profile: DMA process lane %u: pread into staging %.3f s, waiting "
					"for staging %.3f s\n",
				l, (double)d->lane[l].pread_ns / 1e9, (double)d->lane[l].wait_ns / 1e9);
	struct edma_ctl c;
	struct edma_reply r;
	memset(&c, 0, sizeof(c));
	c.msg = EDMA_CLOSE;
	c.first = first;
	c.n = n;
	ctl(d, &c, &r);
}

/* ---- GPU allocations ---- */

typedef CUresult (*range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);

static range_fn range_fn_found;
static pthread_once_t range_once = PTHREAD_ONCE_INIT;

/* cuMemGetAddressRange through the runtime's entry point table, so that
 * the library links only the runtime (as gpu_queues.cu does) */
static void range_find(void)
{
	void *p = NULL;
	cudaDriverEntryPointQueryResult q;
	if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 3020, cudaEnableDefault, &q) == cudaSuccess &&
	    q == cudaDriverEntryPointSuccess)
		range_fn_found = (range_fn)p;
	else
		cudaGetLastError();
}

static range_fn address_range(void)
{
	pthread_once(&range_once, range_find);
	return range_fn_found;
}

int edma_mapped(struct edma *d, uint64_t addr, size_t len, char *why, size_t wlen)
{
	why[0] = 0;
	pthread_rwlock_rdlock(&d->maps_lock);
	int i = map_at(d, addr, len);
	bool pending = i >= 0 && d->maps[i].pending;
	pthread_rwlock_unlock(&d->maps_lock);
	if (pending) {
		/* its MAP is on its way (edma_map does not wait): the answers
		 * come in order, so the ones before it are read first. Bounded:
		 * each waits EDMA_CTL_MS at most, and a silent process fails
		 * them all at the first */
		pthread_mutex_lock(&d->ctl);
		for (;;) {
			pthread_rwlock_rdlock(&d->maps_lock);
			i = map_at(d, addr, len);
			pending = i >= 0 && d->maps[i].pending;
			pthread_rwlock_unlock(&d->maps_lock);
			if (!pending || !d->ahead_n)
				break;
			settle_one(d);
		}
		pthread_mutex_unlock(&d->ctl);
	}
	if (i >= 0 && !pending)
		return 1;
	if (__atomic_exchange_n(&d->fail_unsaid, 0, __ATOMIC_ACQUIRE)) {
		pthread_mutex_lock(&d->ctl); /* settle_one writes the text under it */
		snprintf(why, wlen, "%s", d->fail_why);
		pthread_mutex_unlock(&d->ctl);
	}
	return 0;
}

/*
 * The process opens an allocation's IPC handle in 10-15 ms for a few GB
 * (bench/results/emu-load-2026-11-28: 0.06-0.07 s of a 0.41 s
 * load_pretrained for five shards). So the request is sent and not waited
 * for: a loader maps its runs' memory, then reads the first run while the
 * process opens the others. The first copy into the allocation waits for
 * the answer (edma_mapped); a refusal there sends its copies to this
 * process's context, as a refusal here does.
 */
int edma_map(struct edma *d, uint64_t addr, size_t len, char *why, size_t wlen)
{
	range_fn range = address_range();
	CUdeviceptr base = 0;
	size_t size = 0;
	if (!range || range(&base, &size, (CUdeviceptr)addr) != CUDA_SUCCESS) {
		snprintf(why, wlen, "cuMemGetAddressRange refused the address");
		return -EINVAL;
	}
	if (addr + len > (uint64_t)base + size) {
		snprintf(why, wlen, "the range spans several allocations");
		return -EINVAL;
	}
	/* under ctl: the table's additions and removals in the order of the
	 * requests (an unmap and a map of the same address in two threads) */
	pthread_mutex_lock(&d->ctl);
	pthread_rwlock_wrlock(&d->maps_lock);
	int i = map_at(d, (uint64_t)base, size);
	if (i >= 0)
		d->maps[i].refs++; /* opened once in the process: a second open fails there */
	const bool full = i < 0 && d->n_maps == MAX_MAPS;
	pthread_rwlock_unlock(&d->maps_lock);
	int rc = 0;
	cudaIpcMemHandle_t h;
	if (i >= 0)
		goto out;
	if (full) {
		rc = -ENOSPC;
		snprintf(why, wlen, "more than %d GPU allocations mapped", MAX_MAPS);
		goto out;
	}
	if (cudaIpcGetMemHandle(&h, (void *)(uintptr_t)base) != cudaSuccess) {
		snprintf(why, wlen, "cudaIpcGetMemHandle: %s", cudaGetErrorString(cudaGetLastError()));
		rc = -EINVAL;
		goto out;
	}
	if (d->ahead_n == EDMA_MAPS_AHEAD)
		settle_one(d);
	{
		struct edma_ctl c;
		memset(&c, 0, sizeof(c));
		c.msg = EDMA_MAP;
		c.base = base;
		c.size = size;
		memcpy(c.handle, &h, sizeof(h));
		rc = d->ctl_err;
		if (!rc && send(d->sock, &c, sizeof(c), MSG_NOSIGNAL) != (ssize_t)sizeof(c))
			rc = d->ctl_err = -EPIPE;
	}
	if (rc) {
		snprintf(why, wlen, "%s", ctl_why(rc));
		goto out;
	}
	d->ahead[(d->ahead_first + d->ahead_n++) % EDMA_MAPS_AHEAD] = base;
	pthread_rwlock_wrlock(&d->maps_lock);
	d->maps[d->n_maps].base = base; /* room: only this path adds, under ctl */
	d->maps[d->n_maps].size = size;
	d->maps[d->n_maps].refs = 1;
	d->maps[d->n_maps].pending = true;
	d->n_maps++;
	pthread_rwlock_unlock(&d->maps_lock);
out:
	pthread_mutex_unlock(&d->ctl);
	return rc;
}

void edma_unmap(struct edma *d, uint64_t addr)
{
	pthread_mutex_lock(&d->ctl);
	/* every MAP answered first: the table then says whether the process
	 * holds this allocation (a refused one has left it) */
	while (d->ahead_n)
		settle_one(d);
	uint64_t base = 0;
	pthread_rwlock_wrlock(&d->maps_lock);
	int i = map_at(d, addr, 1);
	if (i >= 0 && --d->maps[i].refs == 0) {
		base = d->maps[i].base;
		d->maps[i] = d->maps[--d->n_maps];
	}
	pthread_rwlock_unlock(&d->maps_lock);
	if (base) {
		struct edma_ctl c;
		struct edma_reply r;
		memset(&c, 0, sizeof(c));
		c.msg = EDMA_UNMAP;
		c.base = base;
		ctl_locked(d, &c, &r);
	}
	pthread_mutex_unlock(&d->ctl);
}

/* ---- the data path ---- */

uint64_t emu_stage_merge_bytes(uint64_t cap, uint64_t dflt)
{
	uint64_t m = dflt;
	const char *e = getenv("GPUNVME_EMU_STAGE_MERGE");
	if (e && *e)
		m = strtoull(e, NULL, 0);
	return m < cap ? m : cap;
}

/* Until lane L's done reaches target (free-running counters), bounded:
 * spin briefly (copies of a few hundred KiB land within tens of
 * microseconds), then sleep on done. */
static int wait_done(struct edma *d, struct edma_lane *L, uint32_t target)
{
	const uint64_t t0 = gpunvme_now_ns();
	unsigned spins = 0;
	for (;;) {
		/* pairs with the process's release of done (dma_server.cu) */
		uint32_t done = __atomic_load_n(&L->done, __ATOMIC_ACQUIRE);
		if ((int32_t)(done - target) >= 0)
			return 0;
		if (__atomic_load_n(&d->dead, __ATOMIC_RELAXED))
			return -EIO;
		if (gpunvme_now_ns() - t0 > EDMA_WAIT_NS)
			return -ETIMEDOUT;
		if (++spins < 4000) {
			__builtin_ia32_pause();
			continue;
		}
		/* asleep from here on: is the process still there? (a copy
		 * that lands after this check is still seen next round) */
		if (spins % 64 == 0 && waitpid(d->pid, NULL, WNOHANG) == d->pid) {
			__atomic_store_n(&d->dead, 1, __ATOMIC_RELAXED);
			fprintf(stderr, "gpunvme: the emulator's DMA process (pid %d) exited: its copies fail with a data "
					"transfer error\n",
				(int)d->pid);
			continue;
		}
		__atomic_store_n(&L->app_sleep, 1, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&L->done, __ATOMIC_SEQ_CST) == done) {
			struct timespec t = {0, 1000 * 1000};
			edma_futex(&L->done, FUTEX_WAIT, done, &t);
		}
		__atomic_store_n(&L->app_sleep, 0, __ATOMIC_SEQ_CST);
	}
}

/* Make the requests posted so far visible to the process: the release
 * pairs with its acquire of posted (dma_server.cu), after which it reads
 * the requests and their staging bytes. */
static void publish(struct edma *d, unsigned l)
{
	struct lane_state *s = &d->lane[l];
	struct edma_lane *L = &d->shm->lane[l];
	if (s->published == s->posted)
		return;
	s->published = s->posted;
	s->unpub = 0;
	/* sequentially consistent, as the mover's store of srv_sleep and its
	 * loads of posted (dma_server.cu, mover_main): one of the two sides
	 * sees the other's store, so requests never wait for a sleeper */
	__atomic_store_n(&L->posted, s->posted, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&d->shm->srv_sleep, __ATOMIC_SEQ_CST)) {
		__atomic_fetch_add(&d->shm->kick, 1, __ATOMIC_SEQ_CST);
		edma_futex(&d->shm->kick, FUTEX_WAKE, 1, NULL);
	}
}

/* Post one request of len (<= EDMA_CHUNK) bytes on lane l, unpublished;
 * its staging bytes are at *st (free). Waits (bounded) for a ring slot and
 * for the bytes, publishing first: a wait on a request the process cannot
 * see would never end. */
static int post(struct edma *d, unsigned l, unsigned op, uint64_t dev, size_t len, uint8_t **st)
{
	struct lane_state *s = &d->lane[l];
	struct edma_lane *L = &d->shm->lane[l];
	const uint64_t S = d->lane_stage;
	const uint64_t o = s->pos % S;
	if (o + len > S)
		s->pos += S - o;
	int rc = 0;
	const uint64_t p0 = d->prof ? gpunvme_now_ns() : 0;
	uint32_t done = __atomic_load_n(&L->done, __ATOMIC_ACQUIRE);
	if (s->posted - done >= EDMA_RING) {
		publish(d, l);
		rc = wait_done(d, L, s->posted - EDMA_RING + 1);
		done = __atomic_load_n(&L->done, __ATOMIC_ACQUIRE);
	}
	/* the new bytes reuse the ring's memory of [pos + len - S,
	 * ...): every request that starts before that must be done (they start
	 * in order; fewer than EDMA_RING are outstanding, so their beg[]
	 * entries are still theirs) */
	const uint64_t need = s->pos + len > S ? s->pos + len - S : 0;
	uint32_t j = done;
	while (j != s->posted && s->beg[j % EDMA_RING] < need)
		j++;
	if (!rc && j != done) {
		publish(d, l);
		rc = wait_done(d, L, j);
	}
	if (p0)
		s->wait_ns += gpunvme_now_ns() - p0;
	if (rc)
		return rc;
	*st = d->stage + (uint64_t)l * S + s->pos % S;
	struct edma_req *r = &L->ring[s->posted % EDMA_RING];
	r->dev = dev;
	r->off = (uint64_t)l * S + s->pos % S;
	r->len = (uint32_t)len;
	r->op = op;
	s->beg[s->posted % EDMA_RING] = s->pos;
	s->pos += len;
	s->unpub += len;
	/* the lane's own count; the process and edma_drain see L->posted (publish) */
	__atomic_store_n(&s->posted, s->posted + 1, __ATOMIC_RELAXED);
	return 0;
}

/* A read's bytes into staging: from the file where there is one (fd >= 0:
 * no page faults on a mapping, see edma_copy_file), else from host memory. */
static int fill(uint8_t *st, const uint8_t *host, int fd, uint64_t off, size_t n)
{
	if (fd < 0) {
		memcpy(st, host, n);
		return 0;
	}
	return gpunvme_pread_all(fd, st, n, off);
}

static int copy(struct edma *d, unsigned l, uint64_t dev, void *host, int fd, uint64_t foff, size_t len, int to_gpu)
{
	if (l >= EDMA_LANES)
		return -EINVAL;
	struct edma_lane *L = &d->shm->lane[l];
	for (size_t off = 0; off < len;) {
		const size_t n = len - off < EDMA_CHUNK ? len - off : EDMA_CHUNK;
		uint8_t *st;
		int rc = post(d, l, to_gpu ? EDMA_H2D : EDMA_D2H, dev + off, n, &st);
		if (rc)
			return rc;
		if (to_gpu) {
			/* no offset on host where it is NULL (a file read) */
			const uint8_t *src = fd < 0 ? (const uint8_t *)host + off : NULL;
			const uint64_t p0 = d->prof ? gpunvme_now_ns() : 0;
			rc = fill(st, src, fd, foff + off, n);
			if (p0)
				d->lane[l].pread_ns += gpunvme_now_ns() - p0;
			/* published (now or at the sync) even when the file
			 * failed us: the request is in the ring and the lane's
			 * count must stay whole; the command fails with rc, so
			 * what lands in its buffer does not matter */
			if (d->lane[l].unpub >= d->merge_bytes)
				publish(d, l);
			if (rc)
				return rc;
		} else {
			/* a write: its bytes are in staging once done passes it */
			publish(d, l);
			rc = wait_done(d, L, d->lane[l].posted);
			/* read, not taken: a failure may be an earlier read's of
			 * this pass, which the lane's sync must still report */
			int32_t err = __atomic_load_n(&L->err, __ATOMIC_RELAXED);
			if (rc || err)
				return rc ? rc : err;
			memcpy((uint8_t *)host + off, st, n);
		}
		off += n;
	}
	return 0;
}

int edma_copy(struct edma *d, unsigned l, uint64_t dev, void *host, size_t len, int to_gpu)
{
	return copy(d, l, dev, host, -1, 0, len, to_gpu);
}

int edma_copy_file(struct edma *d, unsigned l, uint64_t dev, int fd, uint64_t off, size_t len)
{
	return copy(d, l, dev, NULL, fd, off, len, 1);
}

/* From any thread: the requests published so far (those the lane's thread
 * has not published yet are its to publish at its sync). */
int edma_drain(struct edma *d, unsigned l)
{
	if (l >= EDMA_LANES)
		return -EINVAL;
	struct edma_lane *L = &d->shm->lane[l];
	return wait_done(d, L, __atomic_load_n(&L->posted, __ATOMIC_ACQUIRE));
}

int edma_sync(struct edma *d, unsigned l)
{
	if (l >= EDMA_LANES)
		return -EINVAL;
	publish(d, l);
	int rc = edma_drain(d, l);
	int32_t err = __atomic_exchange_n(&d->shm->lane[l].err, 0, __ATOMIC_RELAXED);
	return rc ? rc : err;
}
