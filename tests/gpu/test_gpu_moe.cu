/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The GPU expert cache (include/gpunvme/moe_gpu.h) against the embedded
 * emulator. A router kernel writes each token's top-2 expert ids into GPU
 * memory; the fetch reads the missing experts by GPU-issued commands; a
 * check kernel compares every byte of every chosen expert in its slot with
 * the model file (a copy in GPU memory) -- all on one stream, no host wait
 * between router, reads and check. The hit/miss/eviction counts must equal
 * those of the host cache (src/moe/expert_cache.c) fed the same ids: one
 * policy. Cases (argv[1], none = all):
 *   ram_tier2, ram_tier1  the model in 3 fragments and a hole of a RAM
 *                         namespace (4 KiB blocks)
 *   md_tier2              an ext4 image striped over an md RAID0 of 2
 *                         members (64 KiB chunks): experts cross members
 *   faults                a media error under one expert: sync reports -EIO,
 *                         its slot reads NO_SLOT; after the error is gone
 *                         it reads; ids out of range -> -EINVAL; more
 *                         distinct ids than slots -> -ENOSPC
 * Exits 77 without a GPU.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "ctrl/ctrl_emu.h" /* the emulator behind the controller */
#include "gpunvme/emu.h"
#include "gpunvme/gpu.h"
#include "gpunvme/gpunvme.h"
#include "gpunvme/loader.h"
#include "gpunvme/modelset.h"
#include "gpunvme/moe.h"
#include "gpunvme/moe_gpu.h"
#include "gpunvme/volume.h"

#include "../harness/check.h"
#include "moe_model.h"

#define CU(x)                                                                                                  \
	do {                                                                                                   \
		cudaError_t e_ = (x);                                                                          \
		if (e_ != cudaSuccess)                                                                         \
			FAIL("%s: %s", #x, cudaGetErrorString(e_));                                          \
	} while (0)

/* The router: top-2 ids of token t at MoE layer i, skewed (three experts
 * of each layer far more popular); host and device compute the same. */
__host__ __device__ static uint32_t mix(uint32_t v)
{
	v ^= v >> 16;
	v *= 0x7feb352du;
	v ^= v >> 15;
	v *= 0x846ca68bu;
	return v ^ (v >> 16);
}

__host__ __device__ static void route(uint32_t t, uint32_t i, uint32_t ne, uint32_t *ids)
{
	uint32_t h = mix(t * 977u + i * 131u + 7u);
	ids[0] = h % 4 ? (h >> 8) % 3 : (h >> 8) % ne;
	uint32_t h2 = mix(h);
	ids[1] = h2 % 4 ? (h2 >> 8) % 3 : (h2 >> 8) % ne;
	if (ids[1] == ids[0])
		ids[1] = (ids[0] + 1) % ne;
}

__global__ void router(uint32_t t, uint32_t i, uint32_t ne, uint32_t *ids)
{
	route(t, i, ne, ids);
}

struct piece_ref {
	uint64_t offset, bytes;
};

/* Every byte of the k chosen experts, in their slots, against the file. */
__global__ void check_experts(const uint32_t *ids, const uint32_t *slots, uint32_t k, uint32_t i, uint32_t ne,
			      uint32_t np, const struct piece_ref *ref, const uint8_t *file, const uint8_t *base,
			      const uint64_t *piece_off, unsigned long long *bad, unsigned long long *no_slot)
{
	for (uint32_t j = 0; j < k; j++) {
		if (slots[j] == GPUNVME_GPU_EXPERTS_NO_SLOT) {
			if (threadIdx.x == 0 && blockIdx.x == 0)
				atomicAdd(no_slot, 1ull);
			continue;
		}
		for (uint32_t p = 0; p < np; p++) {
			const struct piece_ref r = ref[((size_t)i * ne + ids[j]) * np + p];
			const uint8_t *got = base + piece_off[(size_t)slots[j] * np + p];
			for (uint64_t b = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; b < r.bytes;
			     b += (uint64_t)gridDim.x * blockDim.x)
				if (got[b] != file[r.offset + b])
					atomicAdd(bad, 1ull);
		}
	}
}

struct rig {
	struct gpunvme_volume *v;
	struct gpunvme_model_set *set; /* md case */
	struct gpunvme_model *m;       /* ram cases */
	const struct gpunvme_model *model;
	struct gpunvme_moe_index *x;
	uint8_t *file;
	size_t len;
	struct gpunvme_extent ext[4];
	size_t next;
	const struct gpunvme_extent *e;
	uint64_t hole;                 /* ram: file offset of the 4 KiB hole */
};

/* The model (layers x experts, experts 16 KiB-ish) in a RAM namespace:
 * three fragments out of order and a 4 KiB hole inside an expert (the file
 * has zeroes there, as a reader of a sparse file gets). */
static int rig_ram(struct rig *r, uint32_t layers, uint32_t experts)
{
	memset(r, 0, sizeof(*r));
	static struct tdef t[512];
	size_t n = mixtral(t, layers, experts);
	for (size_t i = 0; i < n; i++)
		if (strstr(t[i].name, ".experts."))
			t[i].shape[t[i].shape[0] == 16 ? 0 : 1] *= 16;
	r->file = safetensors(t, n, &r->len, 123);
	REQUIRE((r->m = parse(r->file, r->len)));
	r->model = r->m;
	REQUIRE_OK(gpunvme_moe_index_build(r->m, &r->x));
	/* the hole: the second 4 KiB block of layer 0 expert 1's first piece */
	const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(r->x, 0, 1);
	r->hole = (pc[0].offset + 4095) / 4096 * 4096;
	REQUIRE(r->hole + 4096 <= pc[0].offset + pc[0].bytes);
	memset(r->file + r->hole, 0, 4096);
	struct gpunvme_volume_opts vo;
	gpunvme_volume_opts_init(&vo);
	vo.fs = false;
	REQUIRE_OK(gpunvme_volume_open("emu:ram:32M?lbads=12&workers=2", NULL, &vo, &r->v));
	void *ns = NULL;
	size_t ns_len = 0;
	REQUIRE_OK(gpunvme_emu_ns_memory(gpunvme_ctrl_emu(gpunvme_volume_ctrl(r->v, 0)), 1, &ns, &ns_len));
	uint64_t size = (r->len + 4095) / 4096 * 4096;
	REQUIRE(size < (8u << 20));
	/* [0, hole) at 20 MiB, [hole + 4K, mid) at 2 MiB, [mid, size) at 12 MiB */
	uint64_t mid = (r->hole + 4096 + size) / 2 / 4096 * 4096;
	REQUIRE(mid > r->hole + 4096 && mid < size);
	uint64_t lo[3] = { 0, r->hole + 4096, mid }, hi[3] = { r->hole, mid, size };
	uint64_t phys[3] = { 20u << 20, 2u << 20, 12u << 20 };
	for (int k = 0; k < 3; k++) {
		r->ext[k].logical = lo[k];
		r->ext[k].physical = phys[k];
		r->ext[k].length = hi[k] - lo[k];
		r->ext[k].flags = 0;
		uint64_t end = hi[k] < r->len ? hi[k] : r->len;
		memcpy((uint8_t *)ns + phys[k], r->file + lo[k], end - lo[k]);
	}
	r->e = r->ext;
	r->next = 3;
	return 0;
}

/* The same shape of model in an ext4 image striped over 2 md members. */
static int rig_md(struct rig *r, const char *dir)
{
	memset(r, 0, sizeof(*r));
	static struct tdef t[512];
	size_t n = mixtral(t, 3, 6);
	for (size_t i = 0; i < n; i++)
		if (strstr(t[i].name, ".experts."))
			t[i].shape[t[i].shape[0] == 16 ? 0 : 1] *= 32;
	r->file = safetensors(t, n, &r->len, 321);
	REQUIRE(moe_model_images(dir, r->file, r->len, MD_MKRAID0_PY) == 0);
	char uri[900];
	snprintf(uri, sizeof(uri), "md:emu:%s/r0.img;emu:%s/r1.img", dir, dir);
	struct gpunvme_volume_opts vo;
	gpunvme_volume_opts_init(&vo);
	REQUIRE_OK(gpunvme_volume_open(uri, NULL, &vo, &r->v));
	REQUIRE_OK(gpunvme_model_set_open(gpunvme_volume_fs(r->v), "/m/model.safetensors", &r->set));
	REQUIRE(r->set->size == r->len);
	r->model = r->set->model;
	REQUIRE_OK(gpunvme_moe_index_build(r->model, &r->x));
	r->e = r->set->ext;
	r->next = r->set->n_ext;
	return 0;
}

static void rig_close(struct rig *r)
{
	gpunvme_moe_index_free(r->x);
	gpunvme_model_set_free(r->set);
	gpunvme_model_free(r->m);
	gpunvme_volume_close(r->v);
	free(r->file);
}

/*
 * `tokens` tokens through every MoE layer: router -> fetch -> check on one
 * stream, synced every 8 tokens; then the counts against the host cache
 * fed the same ids (same slots, same policy).
 *
 * peek: after each fetch the host also reads the slots into pageable memory
 * on the stream at once, as torch's `.cpu()` does: a copy the driver
 * stages, which waits for the fetch's read kernels while they wait for the
 * emulator's copies. Those must not queue behind it (an image file's pages
 * are copied through the emulator's own pinned staging): before, every such
 * fetch timed out.
 */
static int decode(struct rig *r, enum gpunvme_tier tier, uint32_t slots, uint32_t tokens, bool peek = false)
{
	struct gpunvme_gpu_experts_opts o;
	gpunvme_gpu_experts_opts_init(&o);
	o.slots = slots;
	o.tier = tier;
	o.queues = 2;
	o.depth = 64;
	o.threads = 256;
	o.timeout_ns = 10000000000ull;
	struct gpunvme_gpu_experts *g = NULL;
	REQUIRE_OK(gpunvme_gpu_experts_open(r->v, r->x, r->e, r->next, r->len, &o, &g));
	REQUIRE_EQ(gpunvme_gpu_experts_tier(g), tier);
	const uint32_t np = r->x->n_proj, ne = r->x->n_experts, nl = r->x->n_layers;
	struct piece_ref *ref = (struct piece_ref *)malloc((size_t)nl * ne * np * sizeof(*ref));
	REQUIRE(ref);
	for (uint32_t i = 0; i < nl; i++)
		for (uint32_t e = 0; e < ne; e++)
			for (uint32_t p = 0; p < np; p++) {
				const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(r->x, i, e);
				ref[((size_t)i * ne + e) * np + p] = { pc[p].offset, pc[p].bytes };
			}
	struct piece_ref *d_ref;
	uint8_t *d_file;
	uint32_t *d_ids, *d_slots;
	unsigned long long *d_cnt;
	CU(cudaMalloc(&d_ref, (size_t)nl * ne * np * sizeof(*ref)));
	CU(cudaMemcpy(d_ref, ref, (size_t)nl * ne * np * sizeof(*ref), cudaMemcpyHostToDevice));
	CU(cudaMalloc(&d_file, r->len));
	CU(cudaMemcpy(d_file, r->file, r->len, cudaMemcpyHostToDevice));
	CU(cudaMalloc(&d_ids, 2 * sizeof(uint32_t)));
	CU(cudaMalloc(&d_slots, 2 * sizeof(uint32_t)));
	CU(cudaMalloc(&d_cnt, 2 * sizeof(unsigned long long)));
	CU(cudaMemset(d_cnt, 0, 2 * sizeof(unsigned long long)));
	cudaStream_t s;
	CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	uint8_t *base;
	const uint64_t *piece_off;
	gpunvme_gpu_experts_layout(g, &base, &piece_off);
	for (uint32_t t = 0; t < tokens; t++) {
		for (uint32_t i = 0; i < nl; i++) {
			router<<<1, 1, 0, s>>>(t, i, ne, d_ids);
			REQUIRE_OK(gpunvme_gpu_experts_fetch(g, i, d_ids, 2, d_slots, s));
			check_experts<<<8, 256, 0, s>>>(d_ids, d_slots, 2, i, ne, np, d_ref, d_file, base, piece_off, d_cnt,
							d_cnt + 1);
			CU(cudaGetLastError());
			if (peek) {
				uint32_t *h = (uint32_t *)malloc(2 * sizeof(uint32_t)); /* pageable */
				REQUIRE(h);
				const uint64_t t0 = gpunvme_now_ns();
				CU(cudaMemcpyAsync(h, d_slots, 2 * sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
				CU(cudaStreamSynchronize(s));
				const double sec = (double)(gpunvme_now_ns() - t0) / 1e9;
				CHECK(h[0] != GPUNVME_GPU_EXPERTS_NO_SLOT && h[1] != GPUNVME_GPU_EXPERTS_NO_SLOT,
				      "token %u layer %u: a fetch behind a pageable copy failed (%.3f s; the sync below says why)",
				      t, i, sec);
				CHECK(sec < 2.0, "token %u layer %u: the fetch took %.3f s behind a pageable copy", t, i, sec);
				const bool failed = h[0] == GPUNVME_GPU_EXPERTS_NO_SLOT;
				free(h);
				if (failed)
					break;
			}
		}
		if (t % 8 == 7 || t + 1 == tokens) {
			int rc = gpunvme_gpu_experts_sync(g, s, NULL);
			REQUIRE(rc == 0, "token %u: %d %s", t, rc, gpunvme_last_error());
		}
	}
	struct gpunvme_gpu_experts_stats st;
	REQUIRE_OK(gpunvme_gpu_experts_sync(g, s, &st));
	unsigned long long cnt[2];
	CU(cudaMemcpy(cnt, d_cnt, sizeof(cnt), cudaMemcpyDeviceToHost));
	CHECK(cnt[0] == 0, "%llu bytes of chosen experts differ from the file", cnt[0]);
	CHECK(cnt[1] == 0, "%llu experts without a slot", cnt[1]);
	/* every fetch that missed read something, and its reads took time */
	CHECK(st.stalled > 0 && st.stalled <= (uint64_t)tokens * nl, "%llu fetches that read, %u fetches",
	      (unsigned long long)st.stalled, tokens * nl);
	CHECK(st.stall_ns > 0, "fetches read %llu experts in 0 ns", (unsigned long long)st.cache.misses);
	/* the host cache, same ids and slots: the same counts */
	struct gpunvme_loader_opts lo;
	gpunvme_loader_opts_init(&lo);
	lo.tier = GPUNVME_TIER_CPU;
	struct gpunvme_layer_loader *l = NULL;
	REQUIRE_OK(gpunvme_layer_loader_init_volume(r->v, r->e, r->next, r->len, &lo, &l));
	struct gpunvme_expert_cache *hc = NULL;
	REQUIRE_OK(gpunvme_expert_cache_open(r->x, l, slots, &hc));
	for (uint32_t t = 0; t < tokens; t++)
		for (uint32_t i = 0; i < nl; i++) {
			uint32_t ids[2], hs[2];
			route(t, i, ne, ids);
			REQUIRE_OK(gpunvme_expert_cache_get(hc, i, ids, 2, hs));
		}
	struct gpunvme_expert_cache_stats hst;
	gpunvme_expert_cache_stats(hc, &hst);
	CHECK_EQ(st.cache.requests, hst.requests);
	CHECK_EQ(st.cache.hits, hst.hits);
	CHECK_EQ(st.cache.misses, hst.misses);
	CHECK_EQ(st.cache.evictions, hst.evictions);
	CHECK_EQ(st.cache.bytes_read, hst.bytes_read);
	CHECK(st.cache.hits > 0 && st.cache.misses > 0 && st.commands > 0);
	printf("tier %d: %llu requests, %llu hits, %llu misses, %llu evictions, %llu bytes read, %llu commands\n",
	       (int)tier, (unsigned long long)st.cache.requests, (unsigned long long)st.cache.hits,
	       (unsigned long long)st.cache.misses, (unsigned long long)st.cache.evictions,
	       (unsigned long long)st.cache.bytes_read, (unsigned long long)st.commands);
	gpunvme_expert_cache_close(hc);
	gpunvme_layer_loader_destroy(l);
	cudaStreamDestroy(s);
	cudaFree(d_ref);
	cudaFree(d_file);
	cudaFree(d_ids);
	cudaFree(d_slots);
	cudaFree(d_cnt);
	free(ref);
	gpunvme_gpu_experts_close(g);
	return 0;
}

TEST_CASE(ram_tier2)
{
	struct rig r;
	REQUIRE_OK(rig_ram(&r, 4, 8));
	int rc = decode(&r, GPUNVME_TIER_2, 14, 48);
	rig_close(&r);
	return rc;
}

TEST_CASE(ram_tier1)
{
	struct rig r;
	REQUIRE_OK(rig_ram(&r, 4, 8));
	int rc = decode(&r, GPUNVME_TIER_1, 14, 48);
	rig_close(&r);
	return rc;
}

TEST_CASE(md_tier2)
{
	if (system("command -v python3 >/dev/null 2>&1 && command -v mkfs.ext4 >/dev/null 2>&1")) {
		fprintf(stderr, "SKIP: needs python3 and mkfs.ext4 (e2fsprogs)\n");
		return TEST_SKIP;
	}
	char dir[] = "/tmp/gpunvme-gmoe.XXXXXX";
	REQUIRE(mkdtemp(dir));
	struct rig r;
	int rc = rig_md(&r, dir);
	if (!rc) {
		rc = decode(&r, GPUNVME_TIER_2, 8, 24, true);
		/* tier 1 needs one host buffer both members reach: refused */
		struct gpunvme_gpu_experts_opts o;
		gpunvme_gpu_experts_opts_init(&o);
		o.slots = 4;
		o.tier = GPUNVME_TIER_1;
		struct gpunvme_gpu_experts *g = NULL;
		CHECK_EQ(gpunvme_gpu_experts_open(r.v, r.x, r.e, r.next, r.len, &o, &g), -EOPNOTSUPP);
		CHECK(strstr(gpunvme_last_error(), "use tier 2") != NULL, "%s", gpunvme_last_error());
	}
	rig_close(&r);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", dir);
	return rc;
}

TEST_CASE(faults)
{
	struct rig r;
	REQUIRE_OK(rig_ram(&r, 2, 4));
	struct gpunvme_gpu_experts_opts o;
	gpunvme_gpu_experts_opts_init(&o);
	o.slots = 2;
	o.tier = GPUNVME_TIER_2;
	o.queues = 2;
	o.depth = 32;
	o.threads = 128;
	struct gpunvme_gpu_experts *g = NULL;
	REQUIRE_OK(gpunvme_gpu_experts_open(r.v, r.x, r.e, r.next, r.len, &o, &g));
	uint32_t *d_ids, *d_slots, h[3];
	CU(cudaMalloc(&d_ids, 3 * sizeof(uint32_t)));
	CU(cudaMalloc(&d_slots, 3 * sizeof(uint32_t)));
	/* a media error under layer 1 expert 3's last piece */
	const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(r.x, 1, 3);
	uint64_t off = pc[2].offset + pc[2].bytes / 2, phys = 0;
	for (int k = 0; k < 3; k++)
		if (off >= r.ext[k].logical && off < r.ext[k].logical + r.ext[k].length)
			phys = r.ext[k].physical + (off - r.ext[k].logical);
	REQUIRE(phys);
	struct gpunvme_emu *emu = gpunvme_ctrl_emu(gpunvme_volume_ctrl(r.v, 0));
	struct gpunvme_emu_fault f;
	memset(&f, 0, sizeof(f));
	f.kind = GPUNVME_EMU_FAULT_MEDIA;
	f.nsid = 1;
	f.slba = phys / 4096;
	f.nlb = 1;
	REQUIRE_OK(gpunvme_emu_inject(emu, &f));
	uint32_t ids[2] = { 3, 0 };
	CU(cudaMemcpy(d_ids, ids, sizeof(ids), cudaMemcpyHostToDevice));
	REQUIRE_OK(gpunvme_gpu_experts_fetch(g, 1, d_ids, 2, d_slots, NULL));
	int rc = gpunvme_gpu_experts_sync(g, NULL, NULL);
	CHECK_EQ(rc, -EIO);
	CHECK(strstr(gpunvme_last_error(), "Unrecovered Read Error") != NULL, "%s", gpunvme_last_error());
	CU(cudaMemcpy(h, d_slots, 2 * sizeof(uint32_t), cudaMemcpyDeviceToHost));
	CHECK(h[0] == GPUNVME_GPU_EXPERTS_NO_SLOT, "the failed expert got slot %u", h[0]);
	CHECK(h[1] != GPUNVME_GPU_EXPERTS_NO_SLOT, "expert 0 (read fine) got no slot");
	/* the error gone: the same request fills both */
	gpunvme_emu_clear_faults(emu);
	REQUIRE_OK(gpunvme_gpu_experts_fetch(g, 1, d_ids, 2, d_slots, NULL));
	REQUIRE_OK(gpunvme_gpu_experts_sync(g, NULL, NULL));
	CU(cudaMemcpy(h, d_slots, 2 * sizeof(uint32_t), cudaMemcpyDeviceToHost));
	CHECK(h[0] != GPUNVME_GPU_EXPERTS_NO_SLOT && h[1] != GPUNVME_GPU_EXPERTS_NO_SLOT && h[0] != h[1]);
	uint8_t *base;
	const uint64_t *piece_off;
	gpunvme_gpu_experts_layout(g, &base, &piece_off);
	uint64_t po;
	CU(cudaMemcpy(&po, piece_off + (size_t)h[0] * r.x->n_proj + 2, sizeof(po), cudaMemcpyDeviceToHost));
	uint8_t *got = (uint8_t *)malloc(pc[2].bytes);
	REQUIRE(got);
	CU(cudaMemcpy(got, base + po, pc[2].bytes, cudaMemcpyDefault));
	CHECK(memcmp(got, r.file + pc[2].offset, pc[2].bytes) == 0, "expert 3 after the error differs");
	free(got);
	/* an id out of range, too many distinct experts */
	uint32_t badid[2] = { 4, 0 };
	CU(cudaMemcpy(d_ids, badid, sizeof(badid), cudaMemcpyHostToDevice));
	REQUIRE_OK(gpunvme_gpu_experts_fetch(g, 0, d_ids, 2, d_slots, NULL));
	CHECK_EQ(gpunvme_gpu_experts_sync(g, NULL, NULL), -EINVAL);
	uint32_t three[3] = { 0, 1, 2 };
	CU(cudaMemcpy(d_ids, three, sizeof(three), cudaMemcpyHostToDevice));
	REQUIRE_OK(gpunvme_gpu_experts_fetch(g, 0, d_ids, 3, d_slots, NULL));
	CHECK_EQ(gpunvme_gpu_experts_sync(g, NULL, NULL), -ENOSPC);
	CU(cudaMemcpy(h, d_slots, 3 * sizeof(uint32_t), cudaMemcpyDeviceToHost));
	CHECK(h[0] == GPUNVME_GPU_EXPERTS_NO_SLOT && h[2] == GPUNVME_GPU_EXPERTS_NO_SLOT);
	/* host-side refusals */
	CHECK_EQ(gpunvme_gpu_experts_fetch(g, 2, d_ids, 2, d_slots, NULL), -EINVAL);
	CHECK_EQ(gpunvme_gpu_experts_fetch(g, 0, d_ids, GPUNVME_GPU_EXPERTS_MAX_K + 1, d_slots, NULL), -EINVAL);
	/* a second cache on the same controller: more queue pairs than are
	 * free is refused and says how to fit; 0 takes what is free */
	struct gpunvme_ctrl *c0 = gpunvme_volume_ctrl(r.v, 0);
	const uint32_t nfree = gpunvme_io_queues_free(c0);
	struct gpunvme_gpu_experts *g2 = NULL;
	o.queues = nfree + 1;
	CHECK_EQ(gpunvme_gpu_experts_open(r.v, r.x, r.e, r.next, r.len, &o, &g2), -EBUSY);
	CHECK(strstr(gpunvme_last_error(), "or 0 to fit") != NULL, "%s", gpunvme_last_error());
	if (nfree) {
		o.queues = 0;
		CHECK_OK(gpunvme_gpu_experts_open(r.v, r.x, r.e, r.next, r.len, &o, &g2));
		CHECK_EQ(gpunvme_io_queues_free(c0), nfree > 4 ? nfree - 4 : 0);
		gpunvme_gpu_experts_close(g2);
		CHECK_EQ(gpunvme_io_queues_free(c0), nfree);
	}
	o.queues = 2;
	o.slots = 0;
	struct gpunvme_gpu_experts *g0 = NULL;
	CHECK_EQ(gpunvme_gpu_experts_open(r.v, r.x, r.e, r.next, r.len, &o, &g0), -EINVAL);
	cudaFree(d_ids);
	cudaFree(d_slots);
	gpunvme_gpu_experts_close(g);
	rig_close(&r);
	return 0;
}

int main(int argc, char **argv)
{
	int n = 0;
	bool gpu = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
	return check_main_skip(argc, argv, gpu ? NULL : "no CUDA GPU");
}
