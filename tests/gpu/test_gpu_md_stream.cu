/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The layer stream on a GPU tier over every committed mdadm array
 * (tests/md/fixtures: RAID0 and linear, ext4 and XFS, 0.90/1.0/1.1/1.2
 * superblocks), every member its own emulated controller, given in reversed
 * order. The model file is read through the array's file system reader and
 * checked against the guest's sha256 manifest; then streamed with windows
 * 1-3, two passes each, every byte of every layer and resident tensor
 * compared with it. (Before the stream knew arrays it read the array's byte
 * addresses from member 0 and returned wrong bytes with success.)
 *
 *   test_gpu_md_stream TIER FIXTURE_DIR WORK_DIR
 * Exits 77 without a GPU; needs zstd (a missing zstd fails).
 */
#include <cuda_runtime.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpunvme/extents.h"
#include "gpunvme/gpu.h"
#include "gpunvme/md.h"
#include "gpunvme/model.h"
#include "gpunvme/sha256.h"
#include "gpunvme/stream.h"

#include "../harness/check.h"

#define MODEL "/models/model.safetensors"

static int tier_arg;

/* The fixture's model sha256 from its manifest; 0 when it has one. */
static int manifest_hash(const char *fx, const char *name, char *hash)
{
	char p[4096], line[4600], path[4096];
	snprintf(p, sizeof(p), "%s/%s.manifest", fx, name);
	FILE *f = fopen(p, "r");
	if (!f)
		return -1;
	int found = -1;
	while (found && fgets(line, sizeof(line), f))
		if (sscanf(line, "%64s %4095s", hash, path) == 2 && !strcmp(path, MODEL))
			found = 0;
	fclose(f);
	return found;
}

static int same(const struct gpunvme_tensor *t, const void *p, const uint8_t *ref, uint8_t *host, uint32_t w,
		int pass)
{
	if (!t->bytes)
		return 0;
	REQUIRE(p, "window %u pass %d: %s has no bytes", w, pass, t->name);
	const uint8_t *got = (const uint8_t *)p;
	if (tier_arg == GPUNVME_TIER_2) {
		REQUIRE_CUDA(cudaMemcpy(host, p, t->bytes, cudaMemcpyDeviceToHost));
		got = host;
	}
	for (uint64_t i = 0; i < t->bytes; i++)
		if (got[i] != ref[t->offset + i])
			FAIL("window %u pass %d: %s byte %llu is 0x%02x, want 0x%02x", w, pass, t->name,
			     (unsigned long long)i, got[i], ref[t->offset + i]);
	return 0;
}

static int one(const char *fx, const char *work, const char *name)
{
	char hash[65];
	if (manifest_hash(fx, name, hash))
		return 0; /* no model in this array */
	static char uri[1 << 16], cmd[10000], img[4500];
	snprintf(uri, sizeof(uri), "md:");
	uint32_t nm = 0;
	for (;; nm++) {
		char zst[4500];
		snprintf(zst, sizeof(zst), "%s/%s.m%u.img.zst", fx, name, nm);
		if (access(zst, R_OK))
			break;
		snprintf(img, sizeof(img), "%s/%s.m%u.img", work, name, nm);
		snprintf(cmd, sizeof(cmd), "zstd -dqf '%s' -o '%s'", zst, img);
		REQUIRE(system(cmd) == 0, "%s failed (apt-get install zstd)", cmd);
	}
	REQUIRE(nm > 0, "%s: no members", name);
	for (uint32_t k = nm; k-- > 0;) {
		size_t at = strlen(uri);
		snprintf(uri + at, sizeof(uri) - at, "%semu:%s/%s.m%u.img", k + 1 < nm ? ";" : "", work, name, k);
	}
	struct gpunvme_md_volume *v = NULL;
	struct gpunvme_fs *fs = NULL;
	REQUIRE_OK(gpunvme_md_open(uri, NULL, 1, &v));
	REQUIRE_OK(gpunvme_fs_open(&v->array, 0, &fs));
	uint64_t ino;
	struct gpunvme_stat st;
	struct gpunvme_extent *ext = NULL;
	size_t n = 0;
	REQUIRE_OK(gpunvme_fs_lookup(fs, MODEL, &ino));
	REQUIRE_OK(gpunvme_fs_stat(fs, ino, &st));
	REQUIRE_OK(gpunvme_fs_extents(fs, ino, &ext, &n));
	uint8_t *ref = (uint8_t *)malloc(st.size), *host = (uint8_t *)malloc(st.size);
	REQUIRE(ref && host);
	REQUIRE_EQ(gpunvme_fs_pread(fs, ino, ref, st.size, 0), st.size);
	struct gpunvme_sha256 h;
	uint8_t d[32];
	char hex[65];
	gpunvme_sha256_init(&h);
	gpunvme_sha256_update(&h, ref, st.size);
	gpunvme_sha256_final(&h, d);
	gpunvme_sha256_hex(d, hex);
	REQUIRE_STR(hex, hash);
	struct gpunvme_model *m = NULL;
	REQUIRE_OK(gpunvme_model_parse_mem(ref, st.size, &m));
	/* the file system reader's queue pair goes back to the stream's loaders */
	gpunvme_blkdev_release(&v->array);
	cudaStream_t cs;
	REQUIRE_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
	for (uint32_t w = 1; w <= 3; w++) {
		struct gpunvme_stream_opts o;
		gpunvme_stream_opts_init(&o);
		o.layers = "model.layers.{i}.";
		o.window = w;
		o.no_fallback = 1;
		o.loader.tier = (enum gpunvme_tier)tier_arg;
		o.loader.queues = 2;
		o.loader.depth = 32;
		o.loader.gpu = gpunvme_loader_gpu_backend();
		struct gpunvme_layer_stream *s = NULL;
		REQUIRE_OK(gpunvme_layer_stream_open_md(v->c, v->nsid, v->md, m, ext, n, st.size, &o, &s));
		size_t seen = 0;
		const struct gpunvme_model_buffers *res = gpunvme_layer_stream_resident(s);
		for (size_t t = 0; res && t < res->n_tensors; t++, seen++)
			if (same(res->tensors[t], res->ptr[t], ref, host, w, 0))
				return 1;
		uint32_t L = gpunvme_layer_stream_layers(s);
		for (int pass = 0; pass < 2; pass++) {
			for (uint32_t i = 0; i < L; i++) {
				const struct gpunvme_stream_layer *ly = NULL;
				REQUIRE_OK(gpunvme_layer_stream_acquire(s, i, cs, &ly));
				/* the consumer's stream waits for the layer's reads;
				 * the host reads its bytes once that wait is over */
				REQUIRE_CUDA(cudaStreamSynchronize(cs));
				for (size_t t = 0; t < ly->n_tensors; t++)
					if (same(ly->tensors[t], ly->ptr[t], ref, host, w, pass))
						return 1;
				seen += pass ? 0 : ly->n_tensors;
				REQUIRE_OK(gpunvme_layer_stream_release(s, i, cs, NULL));
			}
		}
		REQUIRE_OK(gpunvme_layer_stream_sync(s));
		REQUIRE_EQ(seen, m->n_tensors);
		gpunvme_layer_stream_close(s);
		printf("%s: tier %d window %u: %u layers, two passes, every byte equal\n", name, tier_arg, w, L);
	}
	REQUIRE_CUDA(cudaStreamDestroy(cs));
	gpunvme_model_free(m);
	free(ref);
	free(host);
	free(ext);
	gpunvme_fs_close(fs);
	gpunvme_md_volume_close(v);
	for (uint32_t k = 0; k < nm; k++) {
		snprintf(img, sizeof(img), "%s/%s.m%u.img", work, name, k);
		unlink(img);
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 4 || (strcmp(argv[1], "1") && strcmp(argv[1], "2"))) {
		fprintf(stderr, "usage: test_gpu_md_stream 1|2 FIXTURE_DIR WORK_DIR\n");
		return 2;
	}
	int ndev = 0;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		printf("no CUDA GPU: skipped\n");
		return 77;
	}
	tier_arg = atoi(argv[1]);
	char work[4096];
	/* a folder of this process's own: ctest -j runs both tiers at once */
	snprintf(work, sizeof(work), "%s/md_stream.%d", argv[3], (int)getpid());
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", work);
	if (system(cmd))
		return 1;
	DIR *d = opendir(argv[2]);
	if (!d) {
		perror(argv[2]);
		return 1;
	}
	int bad = 0, arrays = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l < 10 || strcmp(e->d_name + l - 9, ".manifest"))
			continue;
		char name[256];
		snprintf(name, sizeof(name), "%.*s", (int)(l - 9), e->d_name);
		bad |= one(argv[2], work, name);
		arrays++;
	}
	closedir(d);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", work);
	(void)!system(cmd);
	if (!arrays) {
		fprintf(stderr, "%s: no fixtures\n", argv[2]);
		return 1;
	}
	return bad ? 1 : check_finish("test_gpu_md_stream");
}
