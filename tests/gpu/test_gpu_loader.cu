/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The layer loader's GPU tiers (src/cuda/loader_gpu.cu) against the
 * embedded emulator: a file in random fragments with holes and unwritten
 * extents (tests/loader/layout.h), random byte ranges loaded by GPU-initiated
 * commands and compared with the host reference. Cases (argv[1], none = all):
 *   tier2_random   GPU memory: loader memory, registered caller memory, and
 *                  unregistered caller memory (staged through the bounce
 *                  buffer and copied on the GPU), at every dword misalignment
 *   tier1_random   pinned host memory read by the GPU
 *   tier1_many_outstanding
 *                  48 loads queued at once on two streams through 2 queue
 *                  pairs of 8 entries, every target and the 4 KiB around
 *                  each checked
 *   double_buffer  layers alternate between two buffers on two streams; a
 *                  kernel sums layer i while layer i + 1 loads; the sums
 *                  match the host's
 *   faults         media error -> -EIO with the NVMe status; the loader
 *                  works again after the fault is cleared
 *   tier2_process_maps
 *                  the emulator's copies in its DMA process: loader
 *                  allocations read as soon as they are made (their maps
 *                  still on their way), freed and made again at the same
 *                  addresses, and a memory pool's allocation (no IPC
 *                  handle: its copies stay in this process)
 *   kept_memory    Tier 2 loader memory given back is kept for the next
 *                  allocation of about its size (same address, loads into
 *                  it right, its DMA process map kept); another size gets
 *                  memory of its own
 *   first_loader_freed
 *                  loaders of one controller made in turn, the first
 *                  destroyed while the others go on loading (tiers 2 and
 *                  1): the doorbells it mapped first stay mapped for them
 *   many_spans     gpunvme_load_layers_async: up to 200 ranges in one call
 *                  (tiers 2 and 1) into loader allocations of their own
 *                  (a buffer table in the kernel), one shared allocation
 *                  (the two-buffer launch), registered memory and caller
 *                  memory (Tier 2: staged), guard bytes either side; on the
 *                  loader's stream and on a caller's stream with an event
 *   async_wait_failures
 *                  a media error or dropped commands among loads queued
 *                  on the loader's own stream: the wait reports them
 *                  (never "retried" to success); gpunvme_model_load loads
 *                  its runs again and gets every byte
 * Exits 77 without a GPU.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrl/ctrl_emu.h" /* the emulator behind the controller */
#include "gpunvme/emu.h"
#include "gpunvme/gpu.h"
#include "gpunvme/gpunvme.h"
#include "gpunvme/loader.h"
#include "layout.h"

#include "../harness/check.h"
#include "../harness/emu_faults.h"

static int compare(const uint8_t *got, const uint8_t *want, uint64_t len, uint64_t off, const char *what)
{
	for (uint64_t i = 0; i < len; i++)
		if (got[i] != want[i])
			FAIL("%s: load at file offset %llu + %llu: byte %llu is 0x%02x, want 0x%02x", what,
			     (unsigned long long)off, (unsigned long long)len, (unsigned long long)i, got[i], want[i]);
	return 0;
}

/* queues x depth: 4 x 64 unless given (0) */
/* A GPU loader's options: tier, queues x depth (4 x 64 when 0), a 10 s
 * timeout. */
static struct gpunvme_loader_opts gpu_opts(enum gpunvme_tier tier, uint32_t queues, uint32_t depth)
{
	struct gpunvme_loader_opts o;
	gpunvme_loader_opts_init(&o);
	o.tier = tier;
	o.queues = queues ? queues : 4;
	o.depth = depth ? depth : 64;
	o.timeout_ms = 10000;
	o.gpu = gpunvme_loader_gpu_backend();
	return o;
}

static int setup_q(const char *uri, uint64_t fsize, struct gpunvme_ctrl **c, struct layout *L,
		   enum gpunvme_tier tier, uint32_t queues, uint32_t depth, struct gpunvme_layer_loader **l)
{
	*c = open_emu(uri);
	if (!*c)
		return 1;
	size_t ns_len;
	uint8_t *ns = fill_ns(*c, 5, &ns_len);
	if (!ns)
		FAIL("namespace memory");
	make_layout(L, ns, ns_len, fsize, 21);
	const struct gpunvme_loader_opts o = gpu_opts(tier, queues, depth);
	REQUIRE_OK(gpunvme_layer_loader_init(*c, 1, L->ext, L->n, L->size, &o, l));
	return 0;
}

static int setup(const char *uri, uint64_t fsize, struct gpunvme_ctrl **c, struct layout *L,
		 enum gpunvme_tier tier, struct gpunvme_layer_loader **l)
{
	return setup_q(uri, fsize, c, L, tier, 0, 0, l);
}

/* A Tier 2 loader on 2 queues of 32 with a 0.3 s timeout: dropped
 * commands time out quickly. */
static int short_timeout_loader(struct gpunvme_ctrl *c, const struct layout *L, struct gpunvme_layer_loader **l)
{
	struct gpunvme_loader_opts o;
	gpunvme_loader_opts_init(&o);
	o.tier = GPUNVME_TIER_2;
	o.gpu = gpunvme_loader_gpu_backend();
	o.queues = 2;
	o.depth = 32;
	o.timeout_ms = 300;
	REQUIRE_OK(gpunvme_layer_loader_init(c, 1, L->ext, L->n, L->size, &o, l));
	return 0;
}

TEST_CASE(tier2_random)
{
	struct gpunvme_ctrl *c;
	struct layout L;
	struct gpunvme_layer_loader *l;
	if (setup("emu:ram:64M?lbads=9&workers=4", 5 * 1024 * 1024 + 4321, &c, &L, GPUNVME_TIER_2, &l))
		return 1;
	uint8_t *user = NULL, *reg = NULL, *host = (uint8_t *)malloc(L.size + 16);
	REQUIRE_CUDA(cudaMalloc(&user, L.size + 16));
	REQUIRE_CUDA(cudaMalloc(&reg, L.size + 16));
	REQUIRE_OK(gpunvme_layer_loader_register(l, reg, L.size + 16));
	uint64_t seed = 99;
	for (int r = 0; r < 60; r++) {
		uint64_t off = rng(&seed) % L.size;
		uint64_t len = rng(&seed) % (L.size - off + 1);
		if (r % 4 == 0)
			len %= 9000;
		uint8_t *mem = NULL, *dst;
		if (r % 2 == 0)
			dst = mem = (uint8_t *)gpunvme_layer_loader_alloc(l, off, len);
		else if (r % 4 == 1)
			dst = reg + r % 8;  /* registered: DMA in place where aligned */
		else
			dst = user + r % 8; /* not registered: bounce + device copy */
		if (!dst)
			FAIL("alloc: %s", gpunvme_last_error());
		REQUIRE_CUDA(cudaMemset(dst, 0xa5, len));
		/* the legacy stream: done before loads on non-blocking streams */
		REQUIRE_CUDA(cudaDeviceSynchronize());
		uint16_t st = 0;
		REQUIRE_OK(gpunvme_load_layer(l, off, len, dst, &st));
		REQUIRE_CUDA(cudaMemcpy(host, dst, len, cudaMemcpyDeviceToHost));
		if (compare(host, L.ref + off, len, off,
			    r % 2 == 0 ? "loader memory" : r % 4 == 1 ? "registered memory" : "caller memory"))
			return 1;
		if (mem)
			gpunvme_layer_loader_free(l, mem);
	}
	struct gpunvme_loader_stats st;
	gpunvme_layer_loader_stats(l, &st);
	printf("tier2: %llu bytes direct, %llu bounced, %llu zero, %llu reads\n", (unsigned long long)st.direct_bytes,
	       (unsigned long long)st.bounced_bytes, (unsigned long long)st.zero_bytes, (unsigned long long)st.commands);
	if (!st.direct_bytes || !st.bounced_bytes || !st.zero_bytes)
		FAIL("every path (direct, bounce, zero) should have been used");
	gpunvme_layer_loader_destroy(l);
	cudaFree(user);
	cudaFree(reg);
	free(host);
	free(L.ref);
	gpunvme_close(c);
	return 0;
}

TEST_CASE(tier1_random)
{
	struct gpunvme_ctrl *c;
	struct layout L;
	struct gpunvme_layer_loader *l;
	if (setup("emu:ram:64M?lbads=12&mdts=2&workers=2", 3 * 1024 * 1024 + 77, &c, &L, GPUNVME_TIER_1, &l))
		return 1;
	uint64_t seed = 7;
	for (int r = 0; r < 40; r++) {
		uint64_t off = rng(&seed) % L.size;
		uint64_t len = rng(&seed) % (L.size - off + 1);
		uint8_t *dst = (uint8_t *)gpunvme_layer_loader_alloc(l, off, len);
		if (!dst)
			FAIL("alloc: %s", gpunvme_last_error());
		memset(dst, 0x5a, len);
		REQUIRE_OK(gpunvme_load_layer(l, off, len, dst, NULL));
		if (compare(dst, L.ref + off, len, off, "tier 1"))
			return 1;
		gpunvme_layer_loader_free(l, dst);
	}
	/* heap memory is refused on Tier 1, with the reason */
	uint8_t *heap = (uint8_t *)malloc(8192);
	int rc = gpunvme_load_layer(l, 0, 8192, heap, NULL);
	if (rc != -EINVAL || !strstr(gpunvme_last_error(), "Tier 1"))
		FAIL("heap memory on tier 1: %d %s", rc, gpunvme_last_error());
	free(heap);
	gpunvme_layer_loader_destroy(l);
	free(L.ref);
	gpunvme_close(c);
	return 0;
}

/* Tier 1 with few free slots: 2 queue pairs of 8 entries, 48 loads queued
 * at once on two streams into 48 separate pinned buffers, with unaligned
 * ends (bounce copies, a kernel on Tier 1) and holes (zero fills) among
 * them; after one wait, every byte of each target and the 4 KiB either
 * side of it (still 0x5a) are checked. */
TEST_CASE(tier1_many_outstanding)
{
	struct gpunvme_ctrl *c;
	struct layout L;
	struct gpunvme_layer_loader *l;
	if (setup_q("emu:ram:64M?lbads=9&mdts=2&workers=2", 3 * 1024 * 1024 + 77, &c, &L, GPUNVME_TIER_1, 2, 8, &l))
		return 1;
	enum { N = 48, G = 4096 };
	uint8_t *mem[N];
	uint64_t off[N], len[N], seed = 11;
	cudaStream_t s[2];
	for (int k = 0; k < 2; k++)
		REQUIRE_CUDA(cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking));
	for (int i = 0; i < N; i++) {
		off[i] = rng(&seed) % L.size;
		uint64_t most = L.size - off[i] < 300000 ? L.size - off[i] : 300000;
		len[i] = 1 + rng(&seed) % most;
		/* the target at mem + G keeps the congruence alloc gives (G = 4096) */
		mem[i] = (uint8_t *)gpunvme_layer_loader_alloc(l, off[i], len[i] + 2 * G);
		if (!mem[i])
			FAIL("alloc: %s", gpunvme_last_error());
		memset(mem[i], 0x5a, len[i] + 2 * G);
	}
	for (int i = 0; i < N; i++)
		REQUIRE_OK(gpunvme_load_layer_async(l, off[i], len[i], mem[i] + G, s[i % 2], NULL));
	for (int k = 0; k < 2; k++)
		REQUIRE_CUDA(cudaStreamSynchronize(s[k]));
	REQUIRE_OK(gpunvme_layer_loader_check(l, NULL));
	for (int i = 0; i < N; i++) {
		if (compare(mem[i] + G, L.ref + off[i], len[i], off[i], "tier 1, many outstanding"))
			return 1;
		for (uint64_t k = 0; k < G; k++)
			REQUIRE(mem[i][k] == 0x5a && mem[i][G + len[i] + k] == 0x5a,
				"load %d (%llu + %llu): byte %llu of the memory around it was written", i,
				(unsigned long long)off[i], (unsigned long long)len[i], (unsigned long long)k);
	}
	for (int i = 0; i < N; i++)
		gpunvme_layer_loader_free(l, mem[i]);
	for (int k = 0; k < 2; k++)
		cudaStreamDestroy(s[k]);
	gpunvme_layer_loader_destroy(l);
	free(L.ref);
	gpunvme_close(c);
	return 0;
}

__global__ void k_sum(const uint8_t *p, uint64_t n, unsigned long long *out)
{
	unsigned long long s = 0;
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += gridDim.x * (uint64_t)blockDim.x)
		s += p[i] * (i % 251 + 1);
	atomicAdd(out, s);
}

static int double_buffer_mode(int mode);
TEST_CASE(double_buffer)
{
	return double_buffer_mode(0);
}
/* the same with destinations at offset 0, and with both buffers registered
 * (gpunvme_layer_loader_register) so the reads land in place */
TEST_CASE(double_buffer_aligned)
{
	return double_buffer_mode(1);
}
TEST_CASE(double_buffer_prereg)
{
	return double_buffer_mode(2);
}

static int double_buffer_mode(int mode)
{
	struct gpunvme_ctrl *c;
	struct layout L;
	struct gpunvme_layer_loader *l;
	const uint64_t layer = 256 * 1024 + 333;
	if (setup("emu:ram:64M?lbads=9&workers=4", 6 * 1024 * 1024, &c, &L, GPUNVME_TIER_2, &l))
		return 1;
	const int nl = (int)(L.size / layer);
	uint8_t *buf[2];
	cudaStream_t io[2], compute;
	cudaEvent_t loaded[2], used[2];
	unsigned long long *sums;
	REQUIRE_CUDA(cudaMalloc(&buf[0], layer + 8));
	REQUIRE_CUDA(cudaMalloc(&buf[1], layer + 8));
	REQUIRE_CUDA(cudaMallocManaged(&sums, nl * sizeof(*sums)));
	REQUIRE_CUDA(cudaMemset(sums, 0, nl * sizeof(*sums)));
	REQUIRE_CUDA(cudaStreamCreate(&compute));
	for (int i = 0; i < 2; i++) {
		REQUIRE_CUDA(cudaStreamCreate(&io[i]));
		REQUIRE_CUDA(cudaEventCreate(&loaded[i]));
		REQUIRE_CUDA(cudaEventCreate(&used[i]));
	}
	if (mode == 2)
		for (int b = 0; b < 2; b++)
			REQUIRE_OK(gpunvme_layer_loader_register(l, buf[b], layer + 8));
	for (int i = 0; i < nl; i++) {
		int b = i & 1;
		const int shift = mode ? 0 : i % 3;
		/* the buffer is free once the sum of layer i - 2 is done */
		REQUIRE_CUDA(cudaStreamWaitEvent(io[b], used[b], 0));
		REQUIRE_OK(gpunvme_load_layer_async(l, (uint64_t)i * layer, layer, buf[b] + shift, io[b], loaded[b]));
		REQUIRE_CUDA(cudaStreamWaitEvent(compute, loaded[b], 0));
		k_sum<<<64, 256, 0, compute>>>(buf[b] + shift, layer, &sums[i]);
		REQUIRE_CUDA(cudaEventRecord(used[b], compute));
	}
	REQUIRE_CUDA(cudaStreamSynchronize(compute));
	REQUIRE_OK(gpunvme_layer_loader_check(l, NULL));
	for (int i = 0; i < nl; i++) {
		unsigned long long s = 0;
		for (uint64_t k = 0; k < layer; k++)
			s += L.ref[i * layer + k] * (k % 251 + 1);
		if (s != sums[i])
			FAIL("layer %d: GPU sum %llu, host %llu", i, sums[i], s);
	}
	printf("double_buffer: %d layers of %llu bytes\n", nl, (unsigned long long)layer);
	gpunvme_layer_loader_destroy(l);
	for (int i = 0; i < 2; i++) {
		cudaFree(buf[i]);
		cudaStreamDestroy(io[i]);
		cudaEventDestroy(loaded[i]);
		cudaEventDestroy(used[i]);
	}
	cudaStreamDestroy(compute);
	cudaFree(sums);
	free(L.ref);
	gpunvme_close(c);
	return 0;
}

/* One load of a random range of L through l into loader memory, compared */
static int load_check(struct gpunvme_layer_loader *l, const struct layout *L, uint64_t *seed, uint8_t *host,
		      const char *what)
{
	const uint64_t off = rng(seed) % L->size, len = 1 + rng(seed) % (L->size - off);
	uint8_t *mem = (uint8_t *)gpunvme_layer_loader_alloc(l, off, len);
	if (!mem)
		FAIL("%s: alloc: %s", what, gpunvme_last_error());
	uint16_t st = 0;
	REQUIRE_OK(gpunvme_load_layer(l, off, len, mem, &st));
	if (gpunvme_layer_loader_tier(l) == GPUNVME_TIER_2)
		REQUIRE_CUDA(cudaMemcpy(host, mem, len, cudaMemcpyDeviceToHost));
	else
		memcpy(host, mem, len);
	if (compare(host, L->ref + off, len, off, what))
		return 1;
	gpunvme_layer_loader_free(l, mem);
	return 0;
}

/*
 * The first GPU queue set of a controller maps its doorbells for the GPU;
 * the ones made while it lives find them mapped and use that mapping. It
 * must stay while any of them lives: destroying the first loader used to
 * unmap it under the others (their next doorbell write: an illegal
 * address). Loaders A, B, C on one controller: A destroyed, B loads; B
 * destroyed, C loads; on both GPU tiers.
 */
TEST_CASE(first_loader_freed)
{
	for (int t = 0; t < 2; t++) {
		const enum gpunvme_tier tier = t ? GPUNVME_TIER_1 : GPUNVME_TIER_2;
		struct gpunvme_ctrl *c;
		struct layout L;
		struct gpunvme_layer_loader *a, *b, *cl;
		if (setup_q("emu:ram:64M?lbads=9&workers=2", 3 * 1024 * 1024 + 99, &c, &L, tier, 2, 32, &a))
			return 1;
		const struct gpunvme_loader_opts o = gpu_opts(tier, 2, 32);
		REQUIRE_OK(gpunvme_layer_loader_init(c, 1, L.ext, L.n, L.size, &o, &b));
		uint8_t *host = (uint8_t *)malloc(L.size);
		uint64_t seed = 23 + (uint64_t)t;
		if (load_check(a, &L, &seed, host, "loader A") || load_check(b, &L, &seed, host, "loader B"))
			return 1;
		gpunvme_layer_loader_destroy(a);
		for (int k = 0; k < 4; k++)
			if (load_check(b, &L, &seed, host, "loader B after A was destroyed"))
				return 1;
		REQUIRE_OK(gpunvme_layer_loader_init(c, 1, L.ext, L.n, L.size, &o, &cl));
		gpunvme_layer_loader_destroy(b);
		for (int k = 0; k < 4; k++)
			if (load_check(cl, &L, &seed, host, "loader C after B was destroyed"))
				return 1;
		gpunvme_layer_loader_destroy(cl);
		free(host);
		free(L.ref);
		gpunvme_close(c);
	}
	printf("first_loader_freed: loads after the first loaders were destroyed, every byte right\n");
	return 0;
}

TEST_CASE(kept_memory)
{
	const enum gpunvme_emu_copies was = gpunvme_emu_copies();
	gpunvme_emu_set_copies(GPUNVME_EMU_COPIES_PROCESS);
	struct gpunvme_ctrl *c;
	struct layout L;
	struct gpunvme_layer_loader *l;
	if (setup("emu:ram:64M?lbads=9&workers=4", 40 * 1024 * 1024 + 777, &c, &L, GPUNVME_TIER_2, &l))
		return 1;
	uint8_t *host = (uint8_t *)malloc(L.size);
	const uint64_t big = 32u << 20, small = 8u << 20;
	uint8_t *first = NULL;
	for (int r = 0; r < 4; r++) {
		/* the same size each round: the same memory, bytes right */
		uint8_t *m = (uint8_t *)gpunvme_layer_loader_alloc(l, 0, big);
		if (!m)
			FAIL("alloc: %s", gpunvme_last_error());
		if (r == 0)
			first = m;
		else
			CHECK(m == first, "round %d: %p, not the kept %p", r, (void *)m, (void *)first);
		REQUIRE_CUDA(cudaMemset(m, 0x5a, big));
		REQUIRE_CUDA(cudaDeviceSynchronize());
		const uint64_t off = (uint64_t)r * 4096 + 4096;
		uint16_t st = 0;
		REQUIRE_OK(gpunvme_load_layer(l, off, big, m, &st));
		REQUIRE_CUDA(cudaMemcpy(host, m, big, cudaMemcpyDeviceToHost));
		if (compare(host, L.ref + off, big, off, "kept loader memory"))
			return 1;
		/* a quarter of the size while the big one is kept: memory of
		 * its own (the kept block would waste too much) */
		uint8_t *s2 = (uint8_t *)gpunvme_layer_loader_alloc(l, 0, small);
		if (!s2)
			FAIL("alloc: %s", gpunvme_last_error());
		gpunvme_layer_loader_free(l, m);
		uint8_t *s3 = (uint8_t *)gpunvme_layer_loader_alloc(l, 0, small);
		if (!s3)
			FAIL("alloc: %s", gpunvme_last_error());
		CHECK(s3 != first, "round %d: an 8 MiB allocation took the kept 32 MiB block", r);
		REQUIRE_OK(gpunvme_load_layer(l, 0, small, s3, &st));
		REQUIRE_CUDA(cudaMemcpy(host, s3, small, cudaMemcpyDeviceToHost));
		if (compare(host, L.ref, small, 0, "memory of another size"))
			return 1;
		gpunvme_layer_loader_free(l, s2);
		gpunvme_layer_loader_free(l, s3);
	}
	gpunvme_layer_loader_destroy(l); /* the kept block goes with it (lg_close) */
	printf("kept_memory: the same 32 MiB block over 4 rounds, every byte right\n");
	free(host);
	free(L.ref);
	gpunvme_close(c);
	gpunvme_emu_set_copies(was);
	return 0;
}

/* Span i's memory: where it starts (guard bytes before the range), and
 * what to free. Tier 2: device memory; Tier 1: pinned host memory. */
struct span_mem {
	uint8_t *base, *own;
	int kind; /* 0 loader memory of its own, 1 the shared allocation, 2 registered, 3 caller memory */
};

/* Guard bytes either side of each span: 0x5a before the load, still
 * 0x5a after. */
#define SPAN_G 16

static int spans_round(struct gpunvme_layer_loader *l, const struct layout *L, uint64_t *seed, size_t n, int only,
		       uint8_t *shared, uint8_t *reg, cudaStream_t s, cudaEvent_t ev, const char *what)
{
	const bool t2 = gpunvme_layer_loader_tier(l) == GPUNVME_TIER_2;
	struct gpunvme_load_span *sp = (struct gpunvme_load_span *)calloc(n, sizeof(*sp));
	struct span_mem *m = (struct span_mem *)calloc(n, sizeof(*m));
	uint8_t *host = (uint8_t *)malloc(L->size + 2 * SPAN_G);
	if (!sp || !m || !host)
		FAIL("out of memory");
	uint64_t shared_at = 0, reg_at = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t off = rng(seed) % L->size, len = rng(seed) % (L->size - off + 1);
		if (i % 3 == 0)
			len %= 9000;
		if (i % 11 == 4)
			len = 0;
		/* Tier 1 takes loader and registered memory only */
		int k = only >= 0 ? only : (int)(rng(seed) % (t2 ? 4 : 3));
		/* the shared and registered areas hold what fits; the rest own memory */
		if ((k == 1 && shared_at + len + 2 * SPAN_G > 2 * L->size) || (k == 2 && reg_at + len + 2 * SPAN_G + 8 > 2 * L->size))
			k = 0;
		m[i].kind = k;
		if (k == 0) {
			m[i].base = m[i].own = (uint8_t *)gpunvme_layer_loader_alloc(l, off >= SPAN_G ? off - SPAN_G : 0,
										    len + 2 * SPAN_G);
		} else if (k == 1) {
			m[i].base = shared + shared_at;
			shared_at += len + 2 * SPAN_G;
		} else if (k == 2) {
			m[i].base = reg + reg_at + rng(seed) % 8;
			reg_at += len + 2 * SPAN_G + 8;
		} else {
			REQUIRE_CUDA(cudaMalloc(&m[i].own, len + 2 * SPAN_G + 8));
			m[i].base = m[i].own + rng(seed) % 8;
		}
		if (!m[i].base)
			FAIL("%s: span %zu: alloc: %s", what, i, gpunvme_last_error());
		if (t2)
			REQUIRE_CUDA(cudaMemset(m[i].base, 0x5a, len + 2 * SPAN_G));
		else
			memset(m[i].base, 0x5a, len + 2 * SPAN_G);
		sp[i] = (struct gpunvme_load_span){ off, len, m[i].base + SPAN_G };
	}
	/* the legacy stream's memsets: done before loads on non-blocking streams */
	REQUIRE_CUDA(cudaDeviceSynchronize());
	uint16_t st = 0;
	REQUIRE_OK(gpunvme_load_layers_async(l, sp, n, s, ev));
	if (ev) {
		REQUIRE_CUDA(cudaEventSynchronize(ev));
		REQUIRE_OK(gpunvme_layer_loader_check(l, &st));
	} else {
		REQUIRE_OK(gpunvme_layer_loader_wait(l, &st));
	}
	for (size_t i = 0; i < n; i++) {
		const uint64_t len = sp[i].len, all = len + 2 * SPAN_G;
		if (t2)
			REQUIRE_CUDA(cudaMemcpy(host, m[i].base, all, cudaMemcpyDeviceToHost));
		else
			memcpy(host, m[i].base, all);
		char w[160];
		snprintf(w, sizeof(w), "%s: span %zu of %zu (kind %d)", what, i, n, m[i].kind);
		if (compare(host + SPAN_G, L->ref + sp[i].off, len, sp[i].off, w))
			return 1;
		for (uint64_t g = 0; g < SPAN_G; g++)
			if (host[g] != 0x5a || host[SPAN_G + len + g] != 0x5a)
				FAIL("%s: guard bytes overwritten", w);
		if (m[i].kind == 0)
			gpunvme_layer_loader_free(l, m[i].own);
		else if (m[i].kind == 3)
			cudaFree(m[i].own);
	}
	free(sp);
	free(m);
	free(host);
	return 0;
}

TEST_CASE(many_spans)
{
	for (int t = 0; t < 2; t++) {
		const enum gpunvme_tier tier = t ? GPUNVME_TIER_1 : GPUNVME_TIER_2;
		struct gpunvme_ctrl *c;
		struct layout L;
		struct gpunvme_layer_loader *l;
		if (setup_q("emu:ram:64M?lbads=9&workers=4", 5 * 1024 * 1024 + 4321, &c, &L, tier, 4, 64, &l))
			return 1;
		uint8_t *shared = (uint8_t *)gpunvme_layer_loader_alloc(l, 0, 2 * L.size);
		uint8_t *reg = NULL;
		if (tier == GPUNVME_TIER_2)
			REQUIRE_CUDA(cudaMalloc(&reg, 2 * L.size));
		else
			reg = (uint8_t *)gpunvme_dma_alloc(c, 2 * L.size);
		if (!shared || !reg)
			FAIL("memory");
		REQUIRE_OK(gpunvme_layer_loader_register(l, reg, 2 * L.size));
		cudaStream_t s;
		cudaEvent_t ev;
		REQUIRE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
		REQUIRE_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
		uint64_t seed = 7 + (uint64_t)t;
		const char *tn = t ? "tier 1" : "tier 2";
		for (int r = 0; r < 6; r++) {
			char what[64];
			snprintf(what, sizeof(what), "%s round %d", tn, r);
			/* mixed; loader memory of their own only (the table); the
			 * shared allocation only (two buffers); on a caller's stream */
			const int only = r == 1 ? 0 : r == 2 ? 1 : -1;
			if (spans_round(l, &L, &seed, 1 + rng(&seed) % 200, only, shared, reg, r >= 4 ? s : NULL,
					r >= 4 ? ev : NULL, what))
				return 1;
		}
		/* no ranges: the event still completes */
		REQUIRE_OK(gpunvme_load_layers_async(l, NULL, 0, s, ev));
		REQUIRE_CUDA(cudaEventSynchronize(ev));
		REQUIRE_OK(gpunvme_layer_loader_check(l, NULL));
		struct gpunvme_load_span bad[2] = { { 0, 10, shared }, { L.size, 1, shared } };
		if (gpunvme_load_layers_async(l, bad, 2, NULL, NULL) != -ERANGE ||
		    !strstr(gpunvme_last_error(), "range 1 of 2"))
			FAIL("%s: a range past the end: %s", tn, gpunvme_last_error());
		cudaEventDestroy(ev);
		cudaStreamDestroy(s);
		gpunvme_layer_loader_free(l, shared);
		gpunvme_layer_loader_destroy(l);
		if (tier == GPUNVME_TIER_2)
			cudaFree(reg);
		else
			gpunvme_dma_free(c, reg);
		free(L.ref);
		gpunvme_close(c);
		printf("many_spans %s: every byte right\n", tn);
	}
	return 0;
}

/*
 * The DMA process opens an allocation's IPC handle while the application
 * goes on (dma_client.cu, edma_map): the first copy into it waits for the
 * answer. Each round makes a few loader allocations and loads them at
 * once, so reads meet maps still on their way; freeing them and allocating
 * again gets the same addresses back (cudaMalloc reuses them), so an
 * unmap and the next map of an address must stay in order. Memory from a
 * stream-ordered pool has no IPC handle: it is copied in this process.
 * Every byte compared.
 */
TEST_CASE(tier2_process_maps)
{
	const enum gpunvme_emu_copies was = gpunvme_emu_copies();
	gpunvme_emu_set_copies(GPUNVME_EMU_COPIES_PROCESS);
	struct gpunvme_ctrl *c;
	struct layout L;
	struct gpunvme_layer_loader *l;
	if (setup("emu:ram:64M?lbads=9&workers=4", 6 * 1024 * 1024 + 777, &c, &L, GPUNVME_TIER_2, &l))
		return 1;
	uint8_t *host = (uint8_t *)malloc(L.size);
	uint64_t seed = 7;
	unsigned loads = 0;
	for (int r = 0; r < 24; r++) {
		enum { N = 4 };
		uint8_t *mem[N];
		uint64_t off[N], len[N];
		for (int k = 0; k < N; k++) {
			off[k] = rng(&seed) % L.size;
			len[k] = 1 + rng(&seed) % (L.size - off[k]);
			if (!(mem[k] = (uint8_t *)gpunvme_layer_loader_alloc(l, off[k], len[k])))
				FAIL("alloc: %s", gpunvme_last_error());
		}
		for (int k = 0; k < N; k++) {
			REQUIRE_CUDA(cudaMemset(mem[k], 0x5a, len[k]));
			REQUIRE_CUDA(cudaDeviceSynchronize());
			uint16_t st = 0;
			REQUIRE_OK(gpunvme_load_layer(l, off[k], len[k], mem[k], &st));
			REQUIRE_CUDA(cudaMemcpy(host, mem[k], len[k], cudaMemcpyDeviceToHost));
			if (compare(host, L.ref + off[k], len[k], off[k], "loader memory"))
				return 1;
			loads++;
		}
		for (int k = 0; k < N; k++)
			gpunvme_layer_loader_free(l, mem[k]);
	}
	/* a memory pool's allocation, registered: the DMA process cannot open
	 * it, so the emulator copies it in this process; the bytes are the same */
	cudaStream_t s;
	uint8_t *pool = NULL;
	REQUIRE_CUDA(cudaStreamCreate(&s));
	REQUIRE_CUDA(cudaMallocAsync((void **)&pool, L.size, s));
	REQUIRE_CUDA(cudaMemsetAsync(pool, 0x5a, L.size, s));
	REQUIRE_CUDA(cudaStreamSynchronize(s));
	REQUIRE_OK(gpunvme_layer_loader_register(l, pool, L.size));
	uint16_t st = 0;
	REQUIRE_OK(gpunvme_load_layer(l, 0, L.size, pool, &st));
	REQUIRE_CUDA(cudaMemcpy(host, pool, L.size, cudaMemcpyDeviceToHost));
	if (compare(host, L.ref, L.size, 0, "a memory pool's allocation"))
		return 1;
	gpunvme_layer_loader_destroy(l);
	REQUIRE_CUDA(cudaFreeAsync(pool, s));
	REQUIRE_CUDA(cudaStreamSynchronize(s));
	cudaStreamDestroy(s);
	printf("tier2_process_maps: %u loads into fresh allocations and one into pool memory, every byte right\n", loads);
	free(host);
	free(L.ref);
	gpunvme_close(c);
	gpunvme_emu_set_copies(was);
	return 0;
}

TEST_CASE(faults)
{
	struct gpunvme_ctrl *c;
	struct layout L;
	struct gpunvme_layer_loader *l;
	if (setup("emu:ram:32M?lbads=9", 1024 * 1024, &c, &L, GPUNVME_TIER_2, &l))
		return 1;
	uint8_t *dst = (uint8_t *)gpunvme_layer_loader_alloc(l, 0, L.size);
	uint8_t *host = (uint8_t *)malloc(L.size);
	REQUIRE_OK(emu_fault_media(gpunvme_ctrl_emu(c), 1, L.ext[0].physical / 512, 1));
	uint16_t st = 0;
	int rc = gpunvme_load_layer(l, 0, L.size, dst, &st);
	if (rc != -EIO || gpunvme_status_code(st) != (GPUNVME_SC_UNRECOVERED_READ & 0x7ff))
		FAIL("media error: rc %d status 0x%x (%s)", rc, st, gpunvme_last_error());
	gpunvme_emu_clear_faults(gpunvme_ctrl_emu(c));
	REQUIRE_OK(gpunvme_load_layer(l, 0, L.size, dst, &st));
	REQUIRE_CUDA(cudaMemcpy(host, dst, L.size, cudaMemcpyDeviceToHost));
	if (compare(host, L.ref, L.size, 0, "after the fault"))
		return 1;
	rc = gpunvme_load_layer(l, L.size - 10, 11, dst, &st);
	if (rc != -ERANGE)
		FAIL("past EOF: %d", rc);
	gpunvme_layer_loader_destroy(l);
	/* a dropped command: the wait times out, the queues are recovered in
	 * place and the load tried again (opts.retries) */
	if (short_timeout_loader(c, &L, &l))
		return 1;
	dst = (uint8_t *)gpunvme_layer_loader_alloc(l, 0, L.size);
	REQUIRE_OK(emu_fault_drops(gpunvme_ctrl_emu(c), 2));
	if ((rc = gpunvme_load_layer(l, 0, L.size, dst, &st)))
		FAIL("load with dropped commands: %d (%s)", rc, gpunvme_last_error());
	struct gpunvme_loader_stats ls;
	gpunvme_layer_loader_stats(l, &ls);
	if (ls.retries < 1 || ls.retries > 2)
		FAIL("dropped commands: %llu retries, want 1 or 2", (unsigned long long)ls.retries);
	REQUIRE_CUDA(cudaMemcpy(host, dst, L.size, cudaMemcpyDeviceToHost));
	if (compare(host, L.ref, L.size, 0, "after the retry"))
		return 1;
	printf("faults: 2 dropped commands -> %llu retr%s after recovering the GPU queues, data intact\n",
	       (unsigned long long)ls.retries, ls.retries == 1 ? "y" : "ies");
	free(host);
	gpunvme_layer_loader_destroy(l);
	free(L.ref);
	gpunvme_close(c);
	return 0;
}

/* Loads queued on the loader's own stream, then one wait: a failure among
 * them is reported by the wait and never retried away. The wait used to be
 * an empty load with the loader's retries: after a timeout it recovered
 * the queues, "retried" nothing and returned 0 while the queued reads had
 * not landed (gpu.stream.window2 saw a wrong resident tensor that way with
 * eight processes on one GPU). gpunvme_model_load with nothing to wait on
 * loads its runs again synchronously after such a failure: right bytes. */
TEST_CASE(async_wait_failures)
{
	struct gpunvme_ctrl *c;
	struct layout L;
	struct gpunvme_layer_loader *l;
	if (setup("emu:ram:32M?lbads=9", 1024 * 1024, &c, &L, GPUNVME_TIER_2, &l))
		return 1;
	uint8_t *dst = (uint8_t *)gpunvme_layer_loader_alloc(l, 0, L.size);
	uint8_t *host = (uint8_t *)malloc(L.size);
	REQUIRE(dst && host);
	/* a media error inside the queued loads: -EIO with the status */
	REQUIRE_OK(emu_fault_media(gpunvme_ctrl_emu(c), 1, L.ext[0].physical / 512, 1));
	uint16_t st = 0;
	REQUIRE_OK(gpunvme_load_layer_async(l, 0, L.size / 2, dst, NULL, NULL));
	REQUIRE_OK(gpunvme_load_layer_async(l, L.size / 2, L.size - L.size / 2, dst + L.size / 2, NULL, NULL));
	int rc = gpunvme_layer_loader_wait(l, &st);
	if (rc != -EIO || gpunvme_status_code(st) != (GPUNVME_SC_UNRECOVERED_READ & 0x7ff))
		FAIL("queued loads with a media error: wait gave rc %d status 0x%x (%s)", rc, st, gpunvme_last_error());
	gpunvme_emu_clear_faults(gpunvme_ctrl_emu(c));
	REQUIRE_OK(gpunvme_layer_loader_wait(l, &st)); /* reported once */
	gpunvme_layer_loader_destroy(l);

	/* dropped commands: the queued reads time out; the wait says so
	 * (after recovering the queues), and the next loads work */
	if (short_timeout_loader(c, &L, &l))
		return 1;
	dst = (uint8_t *)gpunvme_layer_loader_alloc(l, 0, L.size);
	REQUIRE(dst);
	REQUIRE_OK(emu_fault_drops(gpunvme_ctrl_emu(c), 2));
	REQUIRE_OK(gpunvme_load_layer_async(l, 0, L.size, dst, NULL, NULL));
	rc = gpunvme_layer_loader_wait(l, &st);
	if (rc != -ETIMEDOUT)
		FAIL("queued loads with dropped commands: wait gave rc %d (%s), want -ETIMEDOUT", rc,
		     gpunvme_last_error());
	REQUIRE_CUDA(cudaMemset(dst, 0xa5, L.size));
	REQUIRE_CUDA(cudaDeviceSynchronize()); /* the poison before the load's stream */
	REQUIRE_OK(gpunvme_load_layer(l, 0, L.size, dst, &st));
	REQUIRE_CUDA(cudaMemcpy(host, dst, L.size, cudaMemcpyDeviceToHost));
	if (compare(host, L.ref, L.size, 0, "a load after the failed wait"))
		return 1;
	gpunvme_layer_loader_destroy(l);

	/* gpunvme_model_load with nothing to wait on: dropped commands in
	 * its runs are loaded again; every byte right */
	if (short_timeout_loader(c, &L, &l))
		return 1;
	struct gpunvme_model m;
	struct gpunvme_tensor t;
	char tname[] = "all";
	memset(&m, 0, sizeof(m));
	memset(&t, 0, sizeof(t));
	t.name = tname;
	snprintf(t.dtype, sizeof(t.dtype), "U8");
	t.ndim = 1;
	t.shape[0] = L.size;
	t.offset = 0;
	t.bytes = L.size;
	t.ggml_type = -1;
	m.format = GPUNVME_MODEL_SAFETENSORS;
	m.file_size = L.size;
	m.alignment = 1;
	m.n_tensors = 1;
	m.tensors = &t;
	struct gpunvme_model_buffers *b = NULL;
	REQUIRE_OK(gpunvme_model_buffers_alloc(l, &m, NULL, &b));
	REQUIRE_CUDA(cudaMemset(b->ptr[0], 0xa5, L.size));
	REQUIRE_CUDA(cudaDeviceSynchronize());
	REQUIRE_OK(emu_fault_drops(gpunvme_ctrl_emu(c), 2));
	REQUIRE_OK(gpunvme_model_load(l, b, NULL, NULL, &st));
	REQUIRE_CUDA(cudaMemcpy(host, b->ptr[0], L.size, cudaMemcpyDeviceToHost));
	if (compare(host, L.ref, L.size, 0, "model load after dropped commands"))
		return 1;
	gpunvme_model_buffers_free(l, b);
	gpunvme_layer_loader_destroy(l);
	free(host);
	free(L.ref);
	gpunvme_close(c);
	return 0;
}

int main(int argc, char **argv)
{
	int n = 0;
	bool gpu = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
	return check_main_skip(argc, argv, gpu ? NULL : "no CUDA GPU");
}
