/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The layer loader's GPU tiers on md RAID0 arrays of several emulated
 * controllers (tests/md/md_layout.h): GPU queues on every member controller,
 * each member's GPU threads reading the chunks its controller holds, the
 * members on streams of their own joined into the caller's. Random ranges of
 * a file scattered over the array (holes, unwritten extents) compared with
 * the bytes taken from the members' memory. Cases (argv[1], none = all):
 *   tier2_md    GPU memory (loader memory and caller memory), 2 and 3
 *               members (two strip zones)
 *   tier1_md    pinned host memory read by the GPU, 3 members
 *   async_md    loads queued on a caller stream with an event; the event
 *               follows every member's work
 * Exits 77 without a GPU.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpunvme/gpu.h"
#include "gpunvme/loader.h"
#include "md_layout.h"

#include "../harness/check.h"

static int run(const char *const *uris, uint32_t n, uint32_t chunk_kib, uint64_t fsize, enum gpunvme_tier tier,
	       bool async)
{
	struct md_layout A;
	if (mdl_setup(&A, uris, n, chunk_kib, fsize, 31 + n))
		FAIL("md set-up");
	struct gpunvme_loader_opts o;
	gpunvme_loader_opts_init(&o);
	o.tier = tier;
	o.queues = 2;
	o.depth = 64;
	o.timeout_ms = 10000;
	o.gpu = gpunvme_loader_gpu_backend();
	struct gpunvme_layer_loader *l = NULL;
	REQUIRE_OK(gpunvme_layer_loader_init_md(A.c, A.nsid, A.md, A.L.ext, A.L.n, A.L.size, &o, &l));
	uint8_t *host = (uint8_t *)malloc(A.L.size + 16), *user = NULL;
	if (tier == GPUNVME_TIER_2)
		REQUIRE_CUDA(cudaMalloc(&user, A.L.size + 16));
	cudaStream_t s = NULL;
	cudaEvent_t ev = NULL;
	if (async) {
		REQUIRE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
		REQUIRE_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
	}
	uint64_t seed = 5;
	for (int r = 0; r < 30; r++) {
		uint64_t off = rng(&seed) % A.L.size, len = rng(&seed) % (A.L.size - off + 1);
		if (r % 5 == 0)
			len %= 70000;
		bool mine = tier == GPUNVME_TIER_1 || r % 2 == 0;
		uint8_t *dst = mine ? (uint8_t *)gpunvme_layer_loader_alloc(l, off, len) : user + r % 8;
		if (!dst)
			FAIL("alloc: %s", gpunvme_last_error());
		if (tier == GPUNVME_TIER_2) {
			REQUIRE_CUDA(cudaMemset(dst, 0xa5, len));
			/* the legacy stream: done before loads on non-blocking streams */
			REQUIRE_CUDA(cudaDeviceSynchronize());
		} else {
			memset(dst, 0x5a, len);
		}
		if (async) {
			REQUIRE_OK(gpunvme_load_layer_async(l, off, len, dst, s, ev));
			REQUIRE_CUDA(cudaEventSynchronize(ev));
			REQUIRE_OK(gpunvme_layer_loader_check(l, NULL));
		} else {
			REQUIRE_OK(gpunvme_load_layer(l, off, len, dst, NULL));
		}
		const uint8_t *got = dst;
		if (tier == GPUNVME_TIER_2) {
			REQUIRE_CUDA(cudaMemcpy(host, dst, len, cudaMemcpyDeviceToHost));
			got = host;
		}
		for (uint64_t i = 0; i < len; i++)
			if (got[i] != A.L.ref[off + i])
				FAIL("%u members, tier %d: load %llu+%llu: byte %llu is 0x%02x, want 0x%02x", n, (int)tier,
				     (unsigned long long)off, (unsigned long long)len, (unsigned long long)i, got[i],
				     A.L.ref[off + i]);
		if (mine)
			gpunvme_layer_loader_free(l, dst);
	}
	for (uint32_t k = 0; k < n; k++) {
		struct gpunvme_loader_stats ms;
		REQUIRE_OK(gpunvme_layer_loader_member_stats(l, k, &ms));
		printf("member %u: %llu reads, %llu bytes direct, %llu bounced\n", k, (unsigned long long)ms.commands,
		       (unsigned long long)ms.direct_bytes, (unsigned long long)ms.bounced_bytes);
		if (!ms.commands)
			FAIL("member %u read nothing", k);
	}
	if (s) {
		cudaEventDestroy(ev);
		cudaStreamDestroy(s);
	}
	gpunvme_layer_loader_destroy(l);
	cudaFree(user);
	free(host);
	mdl_teardown(&A);
	return 0;
}

static const char *const two[] = { "emu:ram:16M?lbads=9&workers=2", "emu:ram:16M?lbads=9&workers=2" };
static const char *const three[] = { "emu:ram:16M?lbads=9&workers=2", "emu:ram:24M?lbads=9&workers=2",
				     "emu:ram:16M?lbads=9&workers=2" };

TEST_CASE(tier2_md)
{
	if (run(two, 2, 64, 9 * 1024 * 1024 + 77, GPUNVME_TIER_2, false))
		return 1;
	return run(three, 3, 128, 20 * 1024 * 1024 + 5, GPUNVME_TIER_2, false);
}

TEST_CASE(tier1_md)
{
	return run(three, 3, 64, 12 * 1024 * 1024 + 1234, GPUNVME_TIER_1, false);
}

TEST_CASE(async_md)
{
	return run(three, 3, 32, 10 * 1024 * 1024 + 3, GPUNVME_TIER_2, true);
}

int main(int argc, char **argv)
{
	int n = 0;
	bool gpu = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
	return check_main_skip(argc, argv, gpu ? NULL : "no CUDA GPU");
}
