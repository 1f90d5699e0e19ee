/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The application's side of the emulator's DMA process
 * (src/emu_cuda/dma_client.cu) without a GPU: the client is the library's
 * own source, compiled for the host (dma_client_host.cpp), its few CUDA
 * runtime calls are the stubs below, and the process it starts is
 * fake_edma.c, which speaks the set-up protocol (dma_proto.h) and does what
 * each case tells it through the environment. What the GPU tests cannot
 * make happen is made here: a map the process refuses after the client
 * went on, a process that stops answering, one that exits. The fake's
 * mover runs a group's copies when the group completes, as a GPU does, so
 * a client that reused staging bytes too early reads back wrong bytes (the
 * rings cases caught exactly that with the staging wait removed).
 *
 * Each case uses a GPU "bus id" of its own, so that it gets a process of
 * its own (the client keeps one per GPU for the program's life).
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "emu_cuda/dma_client.h"
#include "emu_cuda/dma_proto.h" /* EDMA_LANES */

#include "../harness/check.h"

/* ---- the CUDA runtime, as far as the client uses it ---- */

/* "GPU memory": allocations of 1 MiB at 1 MiB boundaries; those at or
 * above POOL have no IPC handle (a memory pool's) */
#define ALLOC (1ull << 20)
#define POOL 0x7f0000000000ull

static char bus_id[32] = "0000:00:00.0";
static cudaError_t last = cudaSuccess;

extern "C" cudaError_t cudaGetDevice(int *d)
{
	*d = 0;
	return cudaSuccess;
}

extern "C" cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int)
{
	snprintf(bus, (size_t)len, "%s", bus_id);
	return cudaSuccess;
}

extern "C" const char *cudaGetErrorString(cudaError_t e)
{
	return e == cudaSuccess ? "no error" : "invalid argument (stub)";
}

extern "C" cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last;
	last = cudaSuccess;
	return e;
}

extern "C" cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p)
{
	if ((uintptr_t)p >= POOL)
		return last = cudaErrorInvalidValue;
	memset(h, 0, sizeof(*h));
	memcpy(h, &p, sizeof(p));
	return cudaSuccess;
}

static CUresult fake_range(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
	*base = p & ~(CUdeviceptr)(ALLOC - 1);
	*size = ALLOC;
	return CUDA_SUCCESS;
}

extern "C" cudaError_t cudaGetDriverEntryPointByVersion(const char *sym, void **fn, unsigned int, unsigned long long,
							 cudaDriverEntryPointQueryResult *q)
{
	if (strcmp(sym, "cuMemGetAddressRange"))
		return cudaErrorInvalidValue;
	*fn = (void *)fake_range;
	if (q)
		*q = cudaDriverEntryPointSuccess;
	return cudaSuccess;
}

/* ---- helpers ---- */

static char logpath[64];

static void drop_log(void)
{
	if (logpath[0])
		unlink(logpath);
	logpath[0] = 0;
}

/* the data path's settings for the next fresh() (fake_edma.c) */
static const char *dev_path = "", *copy_us = "0", *die_after = "0";

/* A process of its own for this case, with the fake's settings. */
static struct edma *fresh(const char *bus, const char *delay_ms, const char *refuse, const char *hang_at,
			  const char *exit_at)
{
	setenv("FAKE_EDMA_DEV", dev_path, 1);
	setenv("FAKE_EDMA_DEV_BASE", "100000000", 1);
	setenv("FAKE_EDMA_COPY_US", copy_us, 1);
	setenv("FAKE_EDMA_DIE_AFTER", die_after, 1);
	snprintf(bus_id, sizeof(bus_id), "%s", bus);
	/* one log at a time, gone when the case's process ends: the suite
	 * runs hundreds of these and must not leave them in /tmp */
	static bool cleanup_set;
	if (!cleanup_set && atexit(drop_log) == 0)
		cleanup_set = true;
	drop_log();
	snprintf(logpath, sizeof(logpath), "/tmp/fake_edma.%d.%s.log", (int)getpid(), bus);
	unlink(logpath);
	setenv("FAKE_EDMA_LOG", logpath, 1);
	setenv("FAKE_EDMA_DELAY_MS", delay_ms ? delay_ms : "0", 1);
	setenv("FAKE_EDMA_REFUSE", refuse ? refuse : "0", 1);
	setenv("FAKE_EDMA_HANG_AT", hang_at ? hang_at : "0", 1);
	setenv("FAKE_EDMA_EXIT_AT", exit_at ? exit_at : "0", 1);
	char why[200] = "";
	struct edma *d = edma_get(why, sizeof(why));
	if (!d)
		fprintf(stderr, "the fake DMA process did not start: %s\n", why);
	return d;
}

/* The requests the fake saw, one per line */
static void seen(char *out, size_t len)
{
	out[0] = 0;
	FILE *f = fopen(logpath, "r");
	if (!f)
		return;
	size_t n = fread(out, 1, len - 1, f);
	out[n] = 0;
	fclose(f);
}

static uint64_t alloc_at(unsigned k)
{
	return 0x100000000ull + (uint64_t)k * ALLOC;
}

/* ---- cases ---- */

/* Maps do not wait for the process: three maps whose answers take 200 ms
 * each are sent in well under 600 ms; the first copy into the last one
 * waits for all three answers; after that a check is immediate. */
TEST_CASE(maps_ahead)
{
	struct edma *d = fresh("0000:01:00.0", "200", NULL, NULL, NULL);
	REQUIRE(d);
	char why[200];
	const uint64_t t0 = check_now_ms();
	for (unsigned k = 0; k < 3; k++)
		REQUIRE_OK(edma_map(d, alloc_at(k) + 4096, 8192, why, sizeof(why)));
	const uint64_t sent = check_now_ms() - t0;
	CHECK(sent < 300, "three maps took %llu ms: they waited for the answers", (unsigned long long)sent);
	CHECK_EQ(edma_mapped(d, alloc_at(2) + 100, 4096, why, sizeof(why)), 1);
	const uint64_t answered = check_now_ms() - t0;
	CHECK(answered >= 550, "the last map was usable after %llu ms, before its answer", (unsigned long long)answered);
	const uint64_t t1 = check_now_ms();
	CHECK_EQ(edma_mapped(d, alloc_at(0), ALLOC, why, sizeof(why)), 1);
	CHECK_EQ(edma_mapped(d, alloc_at(1) + ALLOC - 1, 1, why, sizeof(why)), 1);
	CHECK(check_now_ms() - t1 < 50, "an answered map waited");
	/* outside every allocation mapped, and across two of them */
	CHECK_EQ(edma_mapped(d, alloc_at(3), 1, why, sizeof(why)), 0);
	CHECK_STR(why, "");
	CHECK_EQ(edma_mapped(d, alloc_at(1) + ALLOC - 1, 2, why, sizeof(why)), 0);
	for (unsigned k = 0; k < 3; k++)
		edma_unmap(d, alloc_at(k));
	char log[1024];
	seen(log, sizeof(log));
	CHECK_STR(log, "MAP 0x100000000\nMAP 0x100100000\nMAP 0x100200000\n"
		       "UNMAP 0x100000000\nUNMAP 0x100100000\nUNMAP 0x100200000\n");
	return 0;
}

/* A map the process refuses after the client went on: the first check of
 * it says why (once), later ones say nothing more; no unmap is sent for
 * it; the allocations around it are not affected. */
TEST_CASE(refused_late)
{
	struct edma *d = fresh("0000:02:00.0", "20", "100100000", NULL, NULL);
	REQUIRE(d);
	char why[200];
	for (unsigned k = 0; k < 3; k++)
		REQUIRE_OK(edma_map(d, alloc_at(k), ALLOC, why, sizeof(why)));
	CHECK_EQ(edma_mapped(d, alloc_at(1), 4096, why, sizeof(why)), 0);
	CHECK(strstr(why, "refused by the test") && strstr(why, "0x100100000") &&
		      strstr(why, "cannot be shared with the emulator's DMA process"),
	      "why: '%s'", why);
	CHECK_EQ(edma_mapped(d, alloc_at(1), 4096, why, sizeof(why)), 0);
	CHECK_STR(why, "");
	CHECK_EQ(edma_mapped(d, alloc_at(0), 4096, why, sizeof(why)), 1);
	CHECK_EQ(edma_mapped(d, alloc_at(2), 4096, why, sizeof(why)), 1);
	for (unsigned k = 0; k < 3; k++)
		edma_unmap(d, alloc_at(k));
	char log[1024];
	seen(log, sizeof(log));
	CHECK_STR(log, "MAP 0x100000000\nMAP 0x100100000\nMAP 0x100200000\nUNMAP 0x100000000\nUNMAP 0x100200000\n");
	return 0;
}

/* Memory without an IPC handle is refused at once, with the runtime's
 * reason; nothing is sent. */
TEST_CASE(refused_at_once)
{
	struct edma *d = fresh("0000:03:00.0", NULL, NULL, NULL, NULL);
	REQUIRE(d);
	char why[200] = "";
	CHECK_EQ(edma_map(d, POOL + 4096, 4096, why, sizeof(why)), (uint64_t)-EINVAL);
	CHECK(strstr(why, "cudaIpcGetMemHandle"), "why: '%s'", why);
	CHECK_EQ(edma_mapped(d, POOL + 4096, 4096, why, sizeof(why)), 0);
	/* a range across two allocations is refused too */
	CHECK_EQ(edma_map(d, alloc_at(0) + ALLOC - 8, 16, why, sizeof(why)), (uint64_t)-EINVAL);
	CHECK(strstr(why, "spans several allocations"), "why: '%s'", why);
	char log[256];
	seen(log, sizeof(log));
	CHECK_STR(log, "");
	return 0;
}

/* Maps are counted: one request per allocation, its unmap with the last
 * unmap; freed and mapped again (cudaMalloc gives the address back), the
 * requests stay in order. */
TEST_CASE(counted)
{
	struct edma *d = fresh("0000:04:00.0", "30", NULL, NULL, NULL);
	REQUIRE(d);
	char why[200];
	REQUIRE_OK(edma_map(d, alloc_at(5), 4096, why, sizeof(why)));
	REQUIRE_OK(edma_map(d, alloc_at(5) + 8192, 4096, why, sizeof(why)));
	edma_unmap(d, alloc_at(5));
	CHECK_EQ(edma_mapped(d, alloc_at(5), 4096, why, sizeof(why)), 1);
	edma_unmap(d, alloc_at(5) + 8192);
	CHECK_EQ(edma_mapped(d, alloc_at(5), 4096, why, sizeof(why)), 0);
	REQUIRE_OK(edma_map(d, alloc_at(5), 4096, why, sizeof(why)));
	CHECK_EQ(edma_mapped(d, alloc_at(5), 4096, why, sizeof(why)), 1);
	CHECK_STR(why, ""); /* the process did not see a second open */
	edma_unmap(d, alloc_at(5));
	char log[256];
	seen(log, sizeof(log));
	CHECK_STR(log, "MAP 0x100500000\nUNMAP 0x100500000\nMAP 0x100500000\nUNMAP 0x100500000\n");
	return 0;
}

/* ---- the data path: the lanes' staging rings ---- */

#define DEV_ALLOCS 8
#define DEV_BYTES (DEV_ALLOCS * ALLOC)

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* "GPU memory" (a file the fake maps) and a source file of random bytes;
 * a process whose mover takes copy_us per group */
static struct edma *fresh_dev(const char *bus, const char *us, const char *die, int *src_fd, uint8_t **src,
			      uint8_t **devmem)
{
	static char dp[64], sp[64];
	snprintf(dp, sizeof(dp), "/tmp/fake_dev.%d.%s", (int)getpid(), bus);
	snprintf(sp, sizeof(sp), "/tmp/fake_src.%d.%s", (int)getpid(), bus);
	int dfd = open(dp, O_RDWR | O_CREAT | O_TRUNC, 0600);
	int sfd = open(sp, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (dfd < 0 || sfd < 0 || ftruncate(dfd, DEV_BYTES) || ftruncate(sfd, DEV_BYTES))
		return NULL;
	*devmem = (uint8_t *)mmap(NULL, DEV_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, dfd, 0);
	*src = (uint8_t *)malloc(DEV_BYTES);
	if (*devmem == MAP_FAILED || !*src)
		return NULL;
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	for (uint64_t i = 0; i < DEV_BYTES / 8; i++) {
		uint64_t v = rnd(&seed);
		memcpy(*src + 8 * i, &v, 8);
	}
	if (pwrite(sfd, *src, DEV_BYTES, 0) != (ssize_t)DEV_BYTES)
		return NULL;
	close(dfd);
	*src_fd = sfd;
	dev_path = dp;
	copy_us = us;
	die_after = die;
	struct edma *d = fresh(bus, NULL, NULL, NULL, NULL); /* it has opened the file once it greets */
	dev_path = "";
	copy_us = die_after = "0";
	unlink(dp);
	unlink(sp);
	return d;
}

/*
 * Reads from a file into "GPU memory" through two lanes' staging rings, of
 * every size from 1 byte to 1 MiB at every offset, so that requests wrap
 * the 4 MiB byte ring and wait for its bytes to be free; the mover is slow
 * (copy_us a group), so the rings fill. Lane 0 serves the even
 * allocations, lane 1 the odd ones (lanes are not ordered among
 * themselves, as two emulator workers are not). Writes back to host memory
 * check bytes as they go; at the end every byte of the "GPU memory" is
 * compared with the model.
 */
/* Every allocation of the "GPU memory" mapped, the process's answers in */
static int map_all(struct edma *d)
{
	char why[200];
	for (unsigned k = 0; k < DEV_ALLOCS; k++)
		REQUIRE_OK(edma_map(d, alloc_at(k), ALLOC, why, sizeof(why)));
	for (unsigned k = 0; k < DEV_ALLOCS; k++)
		REQUIRE_EQ(edma_mapped(d, alloc_at(k), ALLOC, why, sizeof(why)), 1);
	return 0;
}

static void unmap_all(struct edma *d)
{
	for (unsigned k = 0; k < DEV_ALLOCS; k++)
		edma_unmap(d, alloc_at(k));
}

static int ring_case(const char *bus, const char *us, unsigned rounds = 1)
{
	int fd;
	uint8_t *src, *devmem;
	struct edma *d = fresh_dev(bus, us, "0", &fd, &src, &devmem);
	REQUIRE(d);
	char why[200];
	REQUIRE_OK(map_all(d));
	uint8_t *model = (uint8_t *)calloc(1, DEV_BYTES), *back = (uint8_t *)malloc(ALLOC);
	REQUIRE(model && back);
	uint64_t seed = 12345, bytes = 0;
	/* each round opens the lanes afresh and closes them, as each loader
	 * (queue set) of an application does */
	for (unsigned round = 0; round < rounds; round++) {
	unsigned first = 0;
	REQUIRE_OK(edma_open(d, 2, &first, why, sizeof(why)));
	for (unsigned it = 0; it < 400 / rounds; it++) {
		const unsigned k = (unsigned)(rnd(&seed) % DEV_ALLOCS), lane = first + k % 2;
		const uint64_t o = rnd(&seed) % ALLOC;
		uint64_t len = 1 + rnd(&seed) % (ALLOC - o);
		if (it % 3 == 0)
			len = 1 + len % 5000; /* small ones too */
		const uint64_t foff = rnd(&seed) % (DEV_BYTES - len);
		REQUIRE_OK(edma_copy_file(d, lane, alloc_at(k) + o, fd, foff, len));
		memcpy(model + k * ALLOC + o, src + foff, len);
		bytes += len;
		/* rarely: between syncs a lane queues many times its 4 MiB ring */
		if (it % 97 == 0)
			REQUIRE_OK(edma_sync(d, lane));
		if (it % 61 == 0) {
			/* a write: ordered after this lane's reads */
			const uint64_t o2 = rnd(&seed) % ALLOC, len2 = 1 + rnd(&seed) % (ALLOC - o2);
			REQUIRE_OK(edma_copy(d, lane, alloc_at(k) + o2, back, len2, 0));
			if (memcmp(back, model + k * ALLOC + o2, len2))
				FAIL("iteration %u: a write of %llu bytes from allocation %u read back other bytes", it,
				     (unsigned long long)len2, k);
		}
	}
	REQUIRE_OK(edma_sync(d, first));
	REQUIRE_OK(edma_sync(d, first + 1));
	for (uint64_t i = 0; i < DEV_BYTES; i++)
		if (devmem[i] != model[i])
			FAIL("round %u: byte %llu of the GPU memory is 0x%02x, want 0x%02x", round, (unsigned long long)i,
			     devmem[i], model[i]);
	edma_close(d, first, 2);
	}
	printf("%s: %llu bytes read through the rings in %u round(s), every byte right\n", bus,
	       (unsigned long long)bytes, rounds);
	unmap_all(d);
	free(model);
	free(back);
	free(src);
	close(fd);
	return 0;
}

/* ring_case with one setting of the client's environment, read when its
 * process starts */
static int ring_case_with(const char *var, const char *value, const char *bus, const char *us)
{
	setenv(var, value, 1);
	int rc = ring_case(bus, us);
	unsetenv(var);
	return rc;
}

TEST_CASE(rings_merged)
{
	unsetenv("GPUNVME_EMU_STAGE_MERGE");
	return ring_case("0000:07:00.0", "300");
}

/* the same, each piece published on its own */
TEST_CASE(rings_piecewise)
{
	return ring_case_with("GPUNVME_EMU_STAGE_MERGE", "0", "0000:08:00.0", "50");
}

/* staging of 1 MiB per lane: every second 512 KiB piece wraps the ring */
TEST_CASE(rings_small_stage)
{
	return ring_case_with("GPUNVME_EMU_DMA_STAGE_MB", "1", "0000:0b:00.0", "100");
}

/* and 16 MiB */
TEST_CASE(rings_large_stage)
{
	return ring_case_with("GPUNVME_EMU_DMA_STAGE_MB", "16", "0000:0c:00.0", "300");
}

/* the lanes closed and opened again, three times (the process keeps a
 * lane's stream, events and staging between opens) */
TEST_CASE(lanes_reopened)
{
	return ring_case("0000:0d:00.0", "100", 3);
}

/*
 * The process's lanes run out (the real process only: the stand-in gives
 * every open lanes [0, n)): all but 3 taken, an open of 4 is refused with
 * -ENOSPC and a reason, one of 3 gets the last ones, and once the first
 * are closed an open of 4 gets lanes again. The copy engine's queue set
 * copies in the application when refused (gpu.queues.process_lanes_exhausted).
 */
TEST_CASE(lanes_exhausted)
{
#ifndef EDMA_REAL_PROCESS
	return TEST_SKIP; /* the stand-in does not keep lanes */
#else
	struct edma *d = fresh("0000:0f:00.0", "0", NULL, NULL, NULL);
	REQUIRE(d);
	char why[200] = "";
	unsigned a = 0, b = 0, c = 0;
	REQUIRE_OK(edma_open(d, EDMA_LANES - 3, &a, why, sizeof(why)));
	CHECK(a == 0, "the first open got lanes from %u", a);
	int rc = edma_open(d, 4, &b, why, sizeof(why));
	CHECK(rc == -ENOSPC, "4 lanes with 3 free: %d, not -ENOSPC", rc);
	CHECK(strstr(why, "lanes wanted"), "the refusal's reason: \"%s\"", why);
	REQUIRE_OK(edma_open(d, 3, &c, why, sizeof(why)));
	CHECK(c == EDMA_LANES - 3, "the last 3 lanes: from %u", c);
	edma_close(d, a, EDMA_LANES - 3);
	REQUIRE_OK(edma_open(d, 4, &b, why, sizeof(why)));
	CHECK(b == 0, "after the close: lanes from %u", b);
	edma_close(d, b, 4);
	edma_close(d, c, 3);
	return 0;
#endif
}

/* fresh_dev with one lane open and allocation 0 mapped, its answer in:
 * the copy engine's order, a copy only into memory edma_mapped says the
 * process holds. NULL when any step fails. */
static struct edma *one_lane(const char *bus, const char *us, const char *die, int *fd, uint8_t **src,
			     uint8_t **devmem, unsigned *first)
{
	char why[200];
	struct edma *d = fresh_dev(bus, us, die, fd, src, devmem);
	if (!d || edma_open(d, 1, first, why, sizeof(why)) || edma_map(d, alloc_at(0), ALLOC, why, sizeof(why)) ||
	    edma_mapped(d, alloc_at(0), ALLOC, why, sizeof(why)) != 1) {
		fprintf(stderr, "%s: set-up failed: %s\n", bus, d ? why : "no process");
		return NULL;
	}
	return d;
}

/*
 * An md member's pattern through the process: reads of one length to GPU
 * addresses a fixed pitch apart (rows of 4-64 KiB, 1-4 rows apart, up to
 * 24 rows in a burst), some bursts crossing into the next allocation, one
 * row in five of another length, the mover slow enough that requests pile
 * up into groups. Every byte compared; the real process's 2D copies are
 * seen in its log (the stand-in copies request by request). With
 * GPUNVME_EMU_2D=0 the same bytes land and no 2D copy is made.
 */
static int strided_case(const char *bus, bool two_d)
{
	if (two_d)
		unsetenv("GPUNVME_EMU_2D");
	else
		setenv("GPUNVME_EMU_2D", "0", 1);
	int fd;
	uint8_t *src, *devmem;
	struct edma *d = fresh_dev(bus, "200", "0", &fd, &src, &devmem);
	unsetenv("GPUNVME_EMU_2D");
	REQUIRE(d);
	char why[200];
	REQUIRE_OK(map_all(d));
	unsigned lane = 0;
	REQUIRE_OK(edma_open(d, 1, &lane, why, sizeof(why)));
	uint8_t *model = (uint8_t *)calloc(1, DEV_BYTES);
	REQUIRE(model);
	uint64_t seed = 777, rows_sent = 0;
	for (unsigned burst = 0; burst < 60; burst++) {
		const uint64_t w = (1 + rnd(&seed) % 16) * 4096, pitch = w * (1 + rnd(&seed) % 4);
		const unsigned rows = 1 + (unsigned)(rnd(&seed) % 24);
		/* anywhere in the "GPU memory": a burst may run into the next
		 * allocation, with a row skipped where it would straddle the
		 * boundary (a 2D copy never spans two) */
		uint64_t at = rnd(&seed) % (DEV_BYTES - rows * pitch);
		at &= ~(uint64_t)4095;
		for (unsigned r = 0; r < rows; r++) {
			const uint64_t n = rnd(&seed) % 5 == 0 ? w / 2 + 512 : w;
			const uint64_t dst = at + r * pitch, foff = rnd(&seed) % (DEV_BYTES - n);
			if (dst / ALLOC != (dst + n - 1) / ALLOC)
				continue; /* the emulator's pieces lie in one allocation each */
			REQUIRE_OK(edma_copy_file(d, lane, alloc_at(0) + dst, fd, foff, n));
			memcpy(model + dst, src + foff, n);
			rows_sent++;
		}
		/* bursts overlap: what lands last is the model's, as the lane
		 * copies in order */
		if (burst % 7 == 6)
			REQUIRE_OK(edma_sync(d, lane));
	}
	REQUIRE_OK(edma_sync(d, lane));
	for (uint64_t i = 0; i < DEV_BYTES; i++)
		if (devmem[i] != model[i])
			FAIL("%s: byte %llu of the GPU memory is 0x%02x, want 0x%02x", two_d ? "2D" : "rows",
			     (unsigned long long)i, devmem[i], model[i]);
	edma_close(d, lane, 1);
	unmap_all(d);
	static char log[1 << 16];
	seen(log, sizeof(log));
	unsigned n2d = 0;
	for (const char *p = log; (p = strstr(p, "COPY2D")); p++)
		n2d++;
	printf("%s: %llu rows in 60 bursts, %u 2D copies in the process, every byte right\n", two_d ? "2D" : "rows",
	       (unsigned long long)rows_sent, n2d);
#ifdef EDMA_REAL_PROCESS
	if (two_d)
		CHECK(n2d > 0, "no 2D copy in the process");
	else
		CHECK_EQ(n2d, 0);
#endif
	free(model);
	free(src);
	close(fd);
	return 0;
}

TEST_CASE(strided_2d)
{
	return strided_case("0000:11:00.0", true);
}

TEST_CASE(strided_rows)
{
	return strided_case("0000:12:00.0", false);
}

/* A copy to memory no map covers: the process reports it on the lane, the
 * lane's sync returns it once, and the lane goes on. */
TEST_CASE(unmapped_copy)
{
	int fd;
	uint8_t *src, *devmem;
	unsigned first;
	struct edma *d = one_lane("0000:09:00.0", "0", "0", &fd, &src, &devmem, &first);
	REQUIRE(d);
	REQUIRE_OK(edma_copy_file(d, first, alloc_at(1), fd, 0, 4096)); /* queued: not mapped */
	CHECK_EQ(edma_sync(d, first), (uint64_t)-EFAULT);
	REQUIRE_OK(edma_copy_file(d, first, alloc_at(0), fd, 0, 4096));
	CHECK_OK(edma_sync(d, first));
	CHECK(!memcmp(devmem, src, 4096));
	edma_unmap(d, alloc_at(0));
	free(src);
	close(fd);
	return 0;
}

/* The process dies while copies are queued (as if killed): the lane's
 * waits end with -EIO within a bounded time, never hang. */
TEST_CASE(killed_mid_copy)
{
	int fd;
	uint8_t *src, *devmem;
	unsigned first;
	struct edma *d = one_lane("0000:0a:00.0", "100", "40", &fd, &src, &devmem, &first);
	REQUIRE(d);
	const uint64_t t0 = check_now_ms();
	int rc = 0;
	for (unsigned it = 0; it < 400 && !rc; it++)
		rc = edma_copy_file(d, first, alloc_at(0) + (it % 8) * 65536, fd, 0, 65536);
	if (!rc)
		rc = edma_sync(d, first);
	CHECK_EQ(rc, (uint64_t)-EIO);
	CHECK(check_now_ms() - t0 < 5000, "the wait for a dead process took %llu ms",
	      (unsigned long long)(check_now_ms() - t0));
	free(src);
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	return check_main(argc, argv);
}
