/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The layer stream's GPU tiers (include/gpunvme/stream.h) against the
 * embedded emulator: a file in random fragments with holes
 * (tests/loader/layout.h) indexed as a model of uneven layers "blk.{i}.*"
 * plus a resident tensor. A consumer stream runs, for every layer of three
 * passes, a slow kernel (it holds the slot ~1 ms) and then a weighted sum of
 * each tensor, and releases the layer on its stream; the host does not wait
 * until the end. A slot overwritten before its consumer was done, or a layer
 * used before its reads, changes a sum. Cases (argv[1], none = all):
 *   window2, window3   the above at windows 2 and 3
 *   sync_reads         window 2 with opts.sync_reads
 *   whole              window >= layers: every layer read once
 *   tier1, tier1_sync  window 2 on Tier 1 (slots in pinned host memory the
 *                      GPU reads through its mapping), without and with
 *                      sync_reads
 *   failed_read, tier1_failed_read
 *                      a media error inside layer 2: the consumer, ordered
 *                      after the reads only, sees every byte of the layer
 *                      0xff (not a mix of landed and stale bytes), and the
 *                      failure is reported by check(2) and every call after
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
#include "gpunvme/model.h"
#include "gpunvme/stream.h"
#include "layout.h"

#include "../harness/check.h"

#define NL 6
#define NT (2 * NL + 1)
#define PASSES 3

static __global__ void k_sum(const uint8_t *p, uint64_t n, unsigned long long *out)
{
	unsigned long long s = 0;
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += gridDim.x * (uint64_t)blockDim.x)
		s += p[i] * (i % 251 + 1);
	atomicAdd(out, s);
}

/* hold the stream for about `ns` (globaltimer) */
static __global__ void k_spin(uint64_t ns)
{
	uint64_t t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	while (t - t0 < ns);
}

/* A model index over the layout: "emb" then blk.{i}.a / blk.{i}.b of
 * uneven sizes, back to back from byte 4096 of the file. */
static void make_model(struct gpunvme_model *m, struct gpunvme_tensor *t, char names[][32], uint64_t size)
{
	memset(m, 0, sizeof(*m));
	uint64_t off = 4096;
	for (int k = 0; k < NT; k++) {
		uint64_t len;
		if (k == 0) {
			snprintf(names[k], 32, "emb");
			len = 50001;
		} else {
			int i = (k - 1) / 2;
			snprintf(names[k], 32, "blk.%d.%c", i, (k - 1) % 2 ? 'b' : 'a');
			len = (k - 1) % 2 ? 3 + 4099 * (uint64_t)i : 70000 + 61111 * (uint64_t)i;
		}
		memset(&t[k], 0, sizeof(t[k]));
		t[k].name = names[k];
		snprintf(t[k].dtype, sizeof(t[k].dtype), "U8");
		t[k].ndim = 1;
		t[k].shape[0] = len;
		t[k].offset = off;
		t[k].bytes = len;
		t[k].ggml_type = -1;
		off += len + (k % 3) * 1000; /* some gaps */
	}
	m->format = GPUNVME_MODEL_SAFETENSORS;
	m->file_size = size;
	m->alignment = 1;
	m->n_tensors = NT;
	m->tensors = t;
	if (off > size)
		fprintf(stderr, "model of %llu bytes does not fit the file (%llu)\n", (unsigned long long)off,
			(unsigned long long)size);
}

/* bytes that are not 0xff */
static __global__ void k_not_ff(const uint8_t *p, uint64_t n, unsigned long long *out)
{
	unsigned long long c = 0;
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += gridDim.x * (uint64_t)blockDim.x)
		c += p[i] != 0xff;
	atomicAdd(out, c);
}

static unsigned long long host_sum(const uint8_t *p, uint64_t n)
{
	unsigned long long s = 0;
	for (uint64_t i = 0; i < n; i++)
		s += p[i] * (i % 251 + 1);
	return s;
}

/* The emulator, its namespace filled, the file's layout and the model
 * over it (every case's starting point). */
struct fx {
	struct gpunvme_ctrl *c;
	struct layout L;
	struct gpunvme_model m;
	struct gpunvme_tensor t[NT];
	char names[NT][32];
};

static int fx_open(struct fx *f)
{
	f->c = open_emu("emu:ram:64M?lbads=9&workers=4");
	REQUIRE(f->c);
	size_t ns_len;
	uint8_t *ns = fill_ns(f->c, 7, &ns_len);
	REQUIRE(ns);
	make_layout(&f->L, ns, ns_len, 3 * 1024 * 1024, 33);
	make_model(&f->m, f->t, f->names, f->L.size);
	return 0;
}

static void fx_close(struct fx *f)
{
	free(f->L.ref);
	gpunvme_close(f->c);
}

static void stream_opts(struct gpunvme_stream_opts *o, uint32_t window, int sync_reads, enum gpunvme_tier tier)
{
	gpunvme_stream_opts_init(o);
	o->layers = "blk.{i}.";
	o->window = window;
	o->sync_reads = sync_reads;
	o->no_fallback = 1;
	o->loader.tier = tier;
	o->loader.queues = 4;
	o->loader.depth = 64;
	o->loader.timeout_ms = 10000;
	o->loader.gpu = gpunvme_loader_gpu_backend();
}

static int run(uint32_t window, int sync_reads, enum gpunvme_tier tier)
{
	struct fx F;
	if (fx_open(&F))
		return 1;

	struct gpunvme_stream_opts o;
	stream_opts(&o, window, sync_reads, tier);
	struct gpunvme_layer_stream *s = NULL;
	REQUIRE_OK(gpunvme_layer_stream_open(F.c, 1, &F.m, F.L.ext, F.L.n, F.L.size, &o, &s));
	REQUIRE_EQ(gpunvme_layer_stream_layers(s), NL);

	const struct gpunvme_model_buffers *res = gpunvme_layer_stream_resident(s);
	REQUIRE(res && res->n_tensors == 1);
	uint8_t *h = (uint8_t *)malloc(res->tensors[0]->bytes);
	REQUIRE(h);
	REQUIRE_CUDA(cudaMemcpy(h, res->ptr[0], res->tensors[0]->bytes, cudaMemcpyDefault));
	REQUIRE(!memcmp(h, F.L.ref + res->tensors[0]->offset, res->tensors[0]->bytes), "resident tensor differs");
	free(h);

	cudaStream_t cs;
	REQUIRE_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
	unsigned long long *sums;
	const size_t nsum = (size_t)PASSES * NL * 2;
	REQUIRE_CUDA(cudaMalloc(&sums, nsum * sizeof(*sums)));
	REQUIRE_CUDA(cudaMemset(sums, 0, nsum * sizeof(*sums)));
	/* the legacy stream: done before the consumer stream's kernels */
	REQUIRE_CUDA(cudaDeviceSynchronize());
	uint64_t want_off[PASSES][NL][2], want_len[PASSES][NL][2];
	for (int p = 0; p < PASSES; p++) {
		for (uint32_t i = 0; i < NL; i++) {
			const struct gpunvme_stream_layer *ly = NULL;
			REQUIRE_OK(gpunvme_layer_stream_acquire(s, i, cs, &ly));
			REQUIRE_EQ(ly->n_tensors, 2);
			/* the consumer holds the slot a while before reading it */
			k_spin<<<1, 1, 0, cs>>>(1000000);
			for (size_t k = 0; k < 2; k++) {
				want_off[p][i][k] = ly->tensors[k]->offset;
				want_len[p][i][k] = ly->tensors[k]->bytes;
				/* Tier 1: the GPU reads the pinned slot through its mapping */
				void *src = ly->ptr[k];
				if (tier == GPUNVME_TIER_1)
					REQUIRE_CUDA(cudaHostGetDevicePointer(&src, ly->ptr[k], 0));
				k_sum<<<32, 256, 0, cs>>>((const uint8_t *)src, ly->tensors[k]->bytes,
							  &sums[((size_t)p * NL + i) * 2 + k]);
			}
			REQUIRE_CUDA(cudaGetLastError());
			REQUIRE_OK(gpunvme_layer_stream_release(s, i, cs, NULL));
		}
	}
	REQUIRE_CUDA(cudaStreamSynchronize(cs));
	REQUIRE_OK(gpunvme_layer_stream_sync(s));
	unsigned long long *got = (unsigned long long *)malloc(nsum * sizeof(*got));
	REQUIRE(got);
	REQUIRE_CUDA(cudaMemcpy(got, sums, nsum * sizeof(*got), cudaMemcpyDeviceToHost));
	for (int p = 0; p < PASSES; p++)
		for (int i = 0; i < NL; i++)
			for (int k = 0; k < 2; k++) {
				unsigned long long w = host_sum(F.L.ref + want_off[p][i][k], want_len[p][i][k]);
				REQUIRE(got[((size_t)p * NL + i) * 2 + k] == w, "pass %d layer %d tensor %d: GPU sum %llu, host %llu",
					p, i, k, got[((size_t)p * NL + i) * 2 + k], w);
			}
	struct gpunvme_stream_stats st;
	REQUIRE_OK(gpunvme_layer_stream_stats(s, &st));
	REQUIRE_EQ(st.tier, tier);
	REQUIRE_EQ(st.acquires, PASSES * NL);
	REQUIRE_EQ(st.layer_loads, window >= NL ? (uint64_t)NL : (uint64_t)window + PASSES * NL);
	REQUIRE(st.io_ms > 0 && st.stall_ms >= 0 && st.overlap >= 0 && st.overlap <= 1);
	printf("tier %d window %u%s: %llu layer reads, %llu bytes, io %.2f ms, stall %.2f ms, overlap %.2f\n", (int)tier,
	       window, sync_reads ? " sync_reads" : "", (unsigned long long)st.layer_loads,
	       (unsigned long long)st.bytes_read, st.io_ms, st.stall_ms, st.overlap);
	free(got);
	cudaFree(sums);
	cudaStreamDestroy(cs);
	gpunvme_layer_stream_close(s);
	fx_close(&F);
	return 0;
}

static int run_failed_read(enum gpunvme_tier tier)
{
	struct fx F;
	if (fx_open(&F))
		return 1;
	/* a written extent wholly inside blk.2.a (t[5]): a media error there
	 * fails some of layer 2's reads and no other layer's */
	const struct gpunvme_tensor *bad = &F.t[5];
	const struct gpunvme_extent *x = NULL;
	for (size_t k = 0; k < F.L.n && !x; k++)
		if (!F.L.ext[k].flags && F.L.ext[k].logical >= bad->offset &&
		    F.L.ext[k].logical + F.L.ext[k].length <= bad->offset + bad->bytes)
			x = &F.L.ext[k];
	REQUIRE(x, "no extent inside %s", bad->name);
	struct gpunvme_emu_fault f;
	memset(&f, 0, sizeof(f));
	f.kind = GPUNVME_EMU_FAULT_MEDIA;
	f.nsid = 1;
	f.slba = x->physical >> 9;
	f.nlb = x->length >> 9;
	REQUIRE_OK(gpunvme_emu_inject(gpunvme_ctrl_emu(F.c), &f));

	struct gpunvme_stream_opts o;
	stream_opts(&o, 2, 0, tier);
	o.loader.retries = 0;
	struct gpunvme_layer_stream *s = NULL;
	REQUIRE_OK(gpunvme_layer_stream_open(F.c, 1, &F.m, F.L.ext, F.L.n, F.L.size, &o, &s));
	cudaStream_t cs;
	REQUIRE_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
	unsigned long long *cnt;
	REQUIRE_CUDA(cudaMalloc(&cnt, sizeof(*cnt)));
	REQUIRE_CUDA(cudaMemset(cnt, 0, sizeof(*cnt)));
	/* the legacy stream: done before the consumer stream's kernels */
	REQUIRE_CUDA(cudaDeviceSynchronize());
	const struct gpunvme_stream_layer *ly = NULL;
	/* layer 0 holds its slot for 300 ms: layer 2's reads (queued behind
	 * that release) cannot have run when layer 2 is acquired, so acquire
	 * succeeds and only the poisoned bytes can protect the consumer */
	REQUIRE_OK(gpunvme_layer_stream_acquire(s, 0, cs, &ly));
	k_spin<<<1, 1, 0, cs>>>(300000000ull);
	REQUIRE_OK(gpunvme_layer_stream_release(s, 0, cs, NULL));
	REQUIRE_OK(gpunvme_layer_stream_acquire(s, 1, cs, &ly));
	REQUIRE_OK(gpunvme_layer_stream_release(s, 1, cs, NULL));
	REQUIRE_OK(gpunvme_layer_stream_acquire(s, 2, cs, &ly));
	uint64_t bytes = 0;
	for (size_t k = 0; k < ly->n_tensors; k++) {
		void *src = ly->ptr[k];
		if (tier == GPUNVME_TIER_1)
			REQUIRE_CUDA(cudaHostGetDevicePointer(&src, ly->ptr[k], 0));
		k_not_ff<<<32, 256, 0, cs>>>((const uint8_t *)src, ly->tensors[k]->bytes, cnt);
		bytes += ly->tensors[k]->bytes;
	}
	REQUIRE_CUDA(cudaGetLastError());
	int rc = gpunvme_layer_stream_release(s, 2, cs, NULL);
	REQUIRE(rc == 0 || rc == -EIO, "release after the failed read: %d %s", rc, gpunvme_last_error());
	/* check(2) waits for layer 2's reads: the failure, with its status */
	REQUIRE_EQ(gpunvme_layer_stream_check(s, 2), -EIO);
	REQUIRE(strstr(gpunvme_last_error(), "Unrecovered Read Error") && strstr(gpunvme_last_error(), "close it"), "%s",
		gpunvme_last_error());
	REQUIRE_CUDA(cudaStreamSynchronize(cs));
	unsigned long long got = 0;
	REQUIRE_CUDA(cudaMemcpy(&got, cnt, sizeof(got), cudaMemcpyDeviceToHost));
	REQUIRE(got == 0, "tier %d: %llu of layer 2's %llu bytes reached the consumer unpoisoned", (int)tier, got,
		(unsigned long long)bytes);
	/* final: every later call reports it */
	REQUIRE_EQ(gpunvme_layer_stream_acquire(s, 3, cs, &ly), -EIO);
	REQUIRE_EQ(gpunvme_layer_stream_acquire(s, 0, cs, &ly), -EIO);
	REQUIRE_EQ(gpunvme_layer_stream_check(s, 1), -EIO);
	REQUIRE_EQ(gpunvme_layer_stream_sync(s), -EIO);
	struct gpunvme_stream_stats st;
	REQUIRE_EQ(gpunvme_layer_stream_stats(s, &st), -EIO);
	printf("tier %d: the failed read of layer 2 reached the consumer as %llu bytes of 0xff, then -EIO\n", (int)tier,
	       (unsigned long long)bytes);
	cudaFree(cnt);
	cudaStreamDestroy(cs);
	gpunvme_layer_stream_close(s);
	fx_close(&F);
	return 0;
}

TEST_CASE(failed_read)
{
	return run_failed_read(GPUNVME_TIER_2);
}

TEST_CASE(tier1_failed_read)
{
	return run_failed_read(GPUNVME_TIER_1);
}

TEST_CASE(window2)
{
	return run(2, 0, GPUNVME_TIER_2);
}

TEST_CASE(window3)
{
	return run(3, 0, GPUNVME_TIER_2);
}

TEST_CASE(sync_reads)
{
	return run(2, 1, GPUNVME_TIER_2);
}

TEST_CASE(whole)
{
	return run(NL + 2, 0, GPUNVME_TIER_2);
}

TEST_CASE(tier1)
{
	return run(2, 0, GPUNVME_TIER_1);
}

TEST_CASE(tier1_sync)
{
	return run(2, 1, GPUNVME_TIER_1);
}

int main(int argc, char **argv)
{
	int n = 0;
	bool gpu = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
	return check_main_skip(argc, argv, gpu ? NULL : "no CUDA GPU");
}
