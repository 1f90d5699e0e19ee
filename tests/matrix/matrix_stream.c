/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * matrix_stream URI PATH REF [cpu|1|2]: the "C layer stream" entry point of
 * the combination matrix (python/tests/test_matrix.py). Opens the volume at
 * URI as a library user does (gpunvme_volume_open) -- an md array or a controller
 * and namespace 1, the file system found at byte 0 or in the one partition
 * holding one (gpunvme_fs_locate) -- finds PATH's extents and streams the
 * safetensors model there through the layer stream
 * (gpunvme_layer_stream_open_volume: member by member on an array), windows 1-3, two passes each; every byte of every
 * resident and layer tensor is compared with REF, the source file on the
 * host. Tiers 1 and 2 need the CUDA backend (built when CUDA is on) and a GPU.
 * Exit status: 0 every byte equal, 1 a difference or an error (on stderr),
 * 2 usage, 77 the tier cannot run in this build or on this machine (the
 * reason on stdout, "REFUSED: ...").
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpunvme/extents.h"
#include "gpunvme/gpunvme.h"
#include "gpunvme/loader.h"
#include "gpunvme/md.h"
#include "gpunvme/model.h"
#include "gpunvme/part.h"
#include "gpunvme/stream.h"
#include "gpunvme/volume.h"

#ifdef GPUNVME_MATRIX_CUDA
#include <cuda_runtime_api.h>

#include "gpunvme/gpu.h"
#endif

static uint8_t *host; /* a tensor's bytes copied from GPU-tier memory */
static double t_start;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Each step's time on stderr (unbuffered; pytest shows it when a cell
 * fails): a slow cell says which step was slow. */
static void step(const char *what, uint32_t w)
{
	fprintf(stderr, "matrix_stream: %8.3f s  window %u  %s\n", now_s() - t_start, w, what);
}

/* 0 when the tensor's bytes at p are the file's (ref). */
static int same(int tier, const struct gpunvme_tensor *t, const void *p, const uint8_t *ref, uint32_t w, int pass,
		int layer)
{
	if (!t->bytes)
		return 0;
	const void *q = p;
#ifdef GPUNVME_MATRIX_CUDA
	if (tier && p) {
		cudaError_t e = cudaDeviceSynchronize();
		if (e == cudaSuccess)
			e = cudaMemcpy(host, p, t->bytes, cudaMemcpyDefault);
		if (e != cudaSuccess) {
			fprintf(stderr, "window %u pass %d layer %d: %s: cudaMemcpy: %s\n", w, pass, layer, t->name,
				cudaGetErrorString(e));
			return 1;
		}
		q = host;
	}
#else
	(void)tier;
#endif
	if (!q || memcmp(q, ref + t->offset, t->bytes)) {
		size_t k = 0;
		while (q && k < t->bytes && ((const uint8_t *)q)[k] == ref[t->offset + k])
			k++;
		fprintf(stderr, "window %u pass %d layer %d: tensor %s differs from the source file at file offset %llu\n",
			w, pass, layer, t->name, (unsigned long long)(t->offset + k));
		return 1;
	}
	return 0;
}

static uint8_t *slurp(const char *path, uint64_t *size)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
	if (b && n > 0 && fread(b, 1, (size_t)n, f) != (size_t)n) {
		free(b);
		b = NULL;
	}
	fclose(f);
	*size = n > 0 ? (uint64_t)n : 0;
	return b;
}

int main(int argc, char **argv)
{
	if (argc < 4 || argc > 5) {
		fprintf(stderr, "usage: matrix_stream URI PATH REF [cpu|1|2]\n");
		return 2;
	}
	const char *uri = argv[1], *path = argv[2];
	t_start = now_s();
	int tier = 0;
	if (argc == 5 && strcmp(argv[4], "cpu")) {
		if (strcmp(argv[4], "1") && strcmp(argv[4], "2")) {
			fprintf(stderr, "matrix_stream: tier '%s': expected cpu, 1 or 2\n", argv[4]);
			return 2;
		}
		tier = argv[4][0] - '0';
	}
#ifdef GPUNVME_MATRIX_CUDA
	int ndev = 0;
	if (tier && (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1)) {
		printf("REFUSED: no GPU\n");
		return 77;
	}
#else
	if (tier) {
		printf("REFUSED: built without CUDA\n");
		return 77;
	}
#endif
	uint64_t ref_size = 0;
	uint8_t *ref = slurp(argv[3], &ref_size);
	if (!ref) {
		perror(argv[3]);
		return 1;
	}
	struct gpunvme_opts go;
	gpunvme_opts_init(&go);
	go.nr_io_queues = 16;
	/* the volume, as every reader opens one (volume.h): an md array's
	 * members or one controller, the namespace, the file system */
	struct gpunvme_volume_opts vo;
	gpunvme_volume_opts_init(&vo);
	vo.ctrl = &go;
	struct gpunvme_volume *vol = NULL;
	struct gpunvme_fs *fs = NULL;
	uint64_t ino = 0;
	struct gpunvme_stat st;
	struct gpunvme_extent *ext = NULL;
	size_t n = 0;
	const char *what = "open";
	int rc = gpunvme_volume_open(uri, NULL, &vo, &vol);
	step("volume open", 0);
	if (!rc) {
		fs = gpunvme_volume_fs(vol);
		what = path;
	}
	if (!rc && !(rc = gpunvme_fs_lookup(fs, path, &ino)) && !(rc = gpunvme_fs_stat(fs, ino, &st)))
		rc = gpunvme_fs_extents(fs, ino, &ext, &n);
	if (rc) {
		fprintf(stderr, "matrix_stream: %s: %s: %s\n", uri, what, gpunvme_last_error());
		return 1;
	}
	if (st.size != ref_size) {
		fprintf(stderr, "matrix_stream: %s: %s is %llu bytes, the source file %llu\n", uri, path,
			(unsigned long long)st.size, (unsigned long long)ref_size);
		return 1;
	}
	struct gpunvme_model *m = NULL;
	if (gpunvme_model_parse_mem(ref, ref_size, &m)) {
		fprintf(stderr, "matrix_stream: %s: not a model: %s\n", argv[3], gpunvme_last_error());
		return 1;
	}
	uint64_t most = 0;
	for (size_t t = 0; t < m->n_tensors; t++)
		most = m->tensors[t].bytes > most ? m->tensors[t].bytes : most;
	host = malloc(most ? most : 1);
	int bad = 0;
	for (uint32_t w = 1; w <= 3 && !bad; w++) {
		struct gpunvme_stream_opts o;
		gpunvme_stream_opts_init(&o);
		o.layers = "model.layers.{i}.";
		o.window = w;
		o.no_fallback = 1;
		/* the emulator's Tier 2 copy lanes may share hardware queues with
		 * the consumer (docs/loader.md, Limits): acquire waits on the host */
		o.sync_reads = tier != 0;
		o.loader.tier = (enum gpunvme_tier)tier;
		o.loader.queues = 2;
		o.loader.depth = 32;
#ifdef GPUNVME_MATRIX_CUDA
		if (tier)
			o.loader.gpu = gpunvme_loader_gpu_backend();
#endif
		struct gpunvme_layer_stream *s = NULL;
		rc = gpunvme_layer_stream_open_volume(vol, m, ext, n, st.size, &o, &s);
		step("stream open", w);
		if (rc) {
			fprintf(stderr, "matrix_stream: %s: stream window %u: %s\n", uri, w, gpunvme_last_error());
			bad = 1;
			break;
		}
		const struct gpunvme_model_buffers *res = gpunvme_layer_stream_resident(s);
		size_t seen = res ? res->n_tensors : 0;
		for (size_t t = 0; res && t < res->n_tensors && !bad; t++)
			bad |= same(tier, res->tensors[t], res->ptr[t], ref, w, 0, -1);
		uint32_t L = gpunvme_layer_stream_layers(s);
		for (int pass = 0; pass < 2 && !bad; pass++) {
			for (uint32_t i = 0; i < L && !bad; i++) {
				const struct gpunvme_stream_layer *ly = NULL;
				if (gpunvme_layer_stream_acquire(s, i, NULL, &ly)) {
					fprintf(stderr, "matrix_stream: acquire %u: %s\n", i, gpunvme_last_error());
					bad = 1;
					break;
				}
				for (size_t t = 0; t < ly->n_tensors && !bad; t++)
					bad |= same(tier, ly->tensors[t], ly->ptr[t], ref, w, pass, (int)i);
				if (!pass)
					seen += ly->n_tensors;
				if (gpunvme_layer_stream_release(s, i, NULL, NULL)) {
					fprintf(stderr, "matrix_stream: release %u: %s\n", i, gpunvme_last_error());
					bad = 1;
				}
			}
		}
		step("two passes", w);
		if (!bad && gpunvme_layer_stream_sync(s)) {
			fprintf(stderr, "matrix_stream: sync: %s\n", gpunvme_last_error());
			bad = 1;
		}
		/* no fault is injected here: a read that had to be repeated
		 * means a stall somewhere, even when the bytes come out right
		 * (NVMe/TCP's re-created GPU queues once cost 30 s this way) */
		struct gpunvme_stream_stats ss;
		if (!bad && !gpunvme_layer_stream_stats(s, &ss) && (ss.retries || ss.resets)) {
			fprintf(stderr, "matrix_stream: window %u: %llu reads repeated after a failure, %llu controller resets, "
					"in a run without faults\n",
				w, (unsigned long long)ss.retries, (unsigned long long)ss.resets);
			bad = 1;
		}
		if (!bad && seen != m->n_tensors) {
			fprintf(stderr, "matrix_stream: window %u saw %zu of %zu tensors\n", w, seen, m->n_tensors);
			bad = 1;
		}
		if (!bad)
			printf("streamed %s %s: tier %d, %u layers, window %u, two passes, every byte equal\n", uri, path,
			       tier, L, w);
		step("sync", w);
		gpunvme_layer_stream_close(s);
		step("stream closed", w);
	}
	gpunvme_model_free(m);
	free(ext);
	free(host);
	free(ref);
	gpunvme_volume_close(vol);
	step("volume closed", 0);
	return bad;
}
