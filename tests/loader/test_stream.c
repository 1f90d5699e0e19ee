/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The layer stream (include/gpunvme/stream.h) on the CPU tier against the
 * embedded emulator:
 *  - sharded_hf: a decoder saved as Hugging Face shards (tests/loader/
 *    mkset.py hf-stream, written from the format's specification, layers
 *    split across shards) in an ext4 image made by mkfs.ext4 -d; streamed
 *    through a model set for three passes at windows 1..L+1, every tensor
 *    of every layer and every resident tensor checked against the sha256
 *    the writer printed;
 *  - fragmented: a layered safetensors file scattered over the namespace in
 *    fragments (holes included), layers of uneven size, every byte of every
 *    layer compared with the file; out-of-order acquires restart the window;
 *  - trace: GPUNVME_STREAM_TRACE's lines for every acquire and release;
 *  - errors: every bad input a caller can give.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/model_writer.h"
#include "gpunvme/extents.h"
#include "gpunvme/gpunvme.h"
#include "gpunvme/loader.h"
#include "gpunvme/modelset.h"
#include "gpunvme/sha256.h"
#include "gpunvme/stream.h"
#include "harness.h"

#include "layout.h"

#ifndef MKSET_PY
#error "MKSET_PY (tests/loader/mkset.py) must be defined by the build"
#endif

/* ---- sharded_hf ---------------------------------------------------------------- */

struct manifest {
	char name[128][96];
	char hex[128][65];
	int seen[128];
	size_t n;
};

static int manifest_find(const struct manifest *mf, const char *name)
{
	for (size_t i = 0; i < mf->n; i++)
		if (!strcmp(mf->name[i], name))
			return (int)i;
	return -1;
}

static int check_tensor(struct manifest *mf, const struct gpunvme_tensor *t, const void *p)
{
	int k = manifest_find(mf, t->name);
	REQUIRE(k >= 0, "tensor %s is not in the writer's manifest", t->name);
	struct gpunvme_sha256 h;
	uint8_t d[32];
	char hex[65];
	gpunvme_sha256_init(&h);
	gpunvme_sha256_update(&h, p, t->bytes);
	gpunvme_sha256_final(&h, d);
	gpunvme_sha256_hex(d, hex);
	REQUIRE(!strcmp(hex, mf->hex[k]), "tensor %s: sha256 %s, the writer's %s", t->name, hex, mf->hex[k]);
	mf->seen[k]++;
	return 0;
}

TEST_CASE(sharded_hf)
{
	if (system("command -v python3 >/dev/null 2>&1 && command -v mkfs.ext4 >/dev/null 2>&1")) {
		fprintf(stderr, "SKIP: needs python3 and mkfs.ext4 (e2fsprogs)\n");
		return TEST_SKIP;
	}
	char dir[] = "/tmp/gpunvme-stream.XXXXXX";
	REQUIRE(mkdtemp(dir));
	char cmd[1024], img[256], man[256];
	snprintf(img, sizeof(img), "%s/ext4.img", dir);
	snprintf(man, sizeof(man), "%s/manifest", dir);
	int n = snprintf(cmd, sizeof(cmd),
			 "python3 '%s' '%s/root/llm' hf-stream > '%s' && truncate -s 16M '%s' && "
			 "mkfs.ext4 -q -F -b 4096 -d '%s/root' '%s' >/dev/null 2>&1",
			 MKSET_PY, dir, man, img, dir, img);
	REQUIRE(n > 0 && (size_t)n < sizeof(cmd));
	REQUIRE(system(cmd) == 0, "%s failed", cmd);
	struct manifest *mf = calloc(1, sizeof(*mf));
	REQUIRE(mf);
	FILE *f = fopen(man, "r");
	REQUIRE(f);
	while (mf->n < 128 && fscanf(f, "%95s %64s", mf->name[mf->n], mf->hex[mf->n]) == 2)
		mf->n++;
	fclose(f);
	REQUIRE(mf->n == 7 * 4 + 3, "manifest: %zu tensors", mf->n);

	char uri[300];
	snprintf(uri, sizeof(uri), "emu:%s?workers=2", img);
	struct gpunvme_ctrl *c = open_emu(uri);
	REQUIRE(c);
	struct gpunvme_blkdev dev;
	struct gpunvme_fs *fs = NULL;
	struct gpunvme_model_set *set = NULL;
	REQUIRE_OK(gpunvme_blkdev_open_ns(c, 1, &dev));
	REQUIRE_OK(gpunvme_fs_open(&dev, 0, &fs));
	REQUIRE_OK(gpunvme_model_set_open(fs, "/llm", &set));
	REQUIRE_EQ(set->n_files, 4);
	/* which file holds a set offset: each file's first and last byte */
	for (size_t i = 0; i < set->n_files; i++) {
		const struct gpunvme_model_file *mf_file = &set->files[i];
		uint64_t fo = 1;
		CHECK(gpunvme_model_set_file(set, mf_file->base, &fo) == mf_file && fo == 0);
		CHECK(gpunvme_model_set_file(set, mf_file->base + mf_file->size - 1, &fo) == mf_file && fo == mf_file->size - 1);
	}
	CHECK(gpunvme_model_set_file(set, set->size, NULL) == NULL);

	const uint32_t windows[] = { 1, 2, 3, 7, 9 };
	for (size_t w = 0; w < sizeof(windows) / sizeof(windows[0]); w++) {
		memset(mf->seen, 0, sizeof(mf->seen));
		struct gpunvme_stream_opts o;
		gpunvme_stream_opts_init(&o);
		o.layers = "model.layers.{i}.";
		o.window = windows[w];
		o.loader.queues = 2;
		o.loader.depth = 16;
		struct gpunvme_layer_stream *s = NULL;
		REQUIRE_OK(gpunvme_layer_stream_open(c, 1, set->model, set->ext, set->n_ext, set->size, &o, &s));
		REQUIRE_EQ(gpunvme_layer_stream_layers(s), 7);
		/* resident: everything outside the layers (embeddings, norm, head) */
		const struct gpunvme_model_buffers *res = gpunvme_layer_stream_resident(s);
		REQUIRE(res && res->n_tensors == 3);
		for (size_t t = 0; t < res->n_tensors; t++)
			if (check_tensor(mf, res->tensors[t], res->ptr[t]))
				return 1;
		for (int pass = 0; pass < 3; pass++) {
			for (uint32_t i = 0; i < 7; i++) {
				const struct gpunvme_stream_layer *L = NULL;
				REQUIRE_OK(gpunvme_layer_stream_acquire(s, i, NULL, &L));
				REQUIRE_EQ(L->index, i);
				REQUIRE_EQ(L->n_tensors, 4);
				/* the layer's first tensor in the file starts a run: on a
				 * 256-byte boundary when its offset is dword aligned,
				 * else congruent to it (src/loader/model_internal.h) */
				size_t first = 0;
				for (size_t t = 1; t < L->n_tensors; t++)
					if (L->tensors[t]->offset < L->tensors[first]->offset)
						first = t;
				const uint64_t fo = L->tensors[first]->offset;
				const uintptr_t at = (uintptr_t)L->ptr[first];
				REQUIRE(fo % 4 ? at % 4096 == fo % 4096 : at % 256 == 0, "layer %u: first tensor at file offset "
					"%llu placed at %% 4096 = %llu", i, (unsigned long long)fo,
					(unsigned long long)(at % 4096));
				for (size_t t = 0; t < L->n_tensors; t++) {
					char want[64];
					snprintf(want, sizeof(want), "model.layers.%u.", i);
					REQUIRE(!strncmp(L->tensors[t]->name, want, strlen(want)), "layer %u holds %s", i,
						L->tensors[t]->name);
					if (check_tensor(mf, L->tensors[t], L->ptr[t]))
						return 1;
				}
				REQUIRE_OK(gpunvme_layer_stream_release(s, i, NULL, NULL));
			}
		}
		for (size_t k = 0; k < mf->n; k++)
			REQUIRE(mf->seen[k] == (strstr(mf->name[k], "layers.") ? 3 : 1), "window %u: %s checked %d times",
				windows[w], mf->name[k], mf->seen[k]);
		struct gpunvme_stream_stats st;
		REQUIRE_OK(gpunvme_layer_stream_stats(s, &st));
		REQUIRE_EQ(st.tier, GPUNVME_TIER_CPU);
		REQUIRE_EQ(st.layers, 7);
		REQUIRE_EQ(st.window, windows[w] < 7 ? windows[w] : 7);
		REQUIRE_EQ(st.acquires, 21);
		/* a window holding the whole model reads each layer once */
		REQUIRE_EQ(st.layer_loads, windows[w] >= 7 ? 7 : 21);
		REQUIRE_EQ(st.restarts, 0);
		REQUIRE(st.bytes_read > 0 && st.slot_bytes > 0 && st.memory_bytes >= st.window * st.slot_bytes);
		REQUIRE(st.io_ms >= 0 && st.stall_ms >= 0 && st.overlap >= 0 && st.overlap <= 1);
		gpunvme_layer_stream_close(s);
	}
	free(mf);
	gpunvme_model_set_free(set);
	gpunvme_fs_close(fs);
	gpunvme_blkdev_close(&dev);
	gpunvme_close(c);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	REQUIRE(system(cmd) == 0);
	return 0;
}

/* ---- fragmented ------------------------------------------------------------------ */

#define FL 6 /* layers */

struct frag_model {
	uint8_t *file;
	uint64_t size;
	struct gpunvme_extent ext[2048];
	size_t n;
	struct gpunvme_model *m;
};

/* A safetensors file: "emb", layers "blk.{i}.a/b" of uneven sizes (one
 * over the 1 MiB run gap apart from its neighbour by a resident pad),
 * "out"; laid out in 4..40 KiB fragments with holes. */
static int frag_make(struct gpunvme_ctrl *c, struct frag_model *fm, uint64_t seed)
{
	size_t ns_len;
	uint8_t *ns = fill_ns(c, seed, &ns_len);
	REQUIRE(ns);
	static char names[2 * FL + 3][32];
	static uint64_t shapes[2 * FL + 3][1];
	struct st_tensor t[2 * FL + 3];
	size_t nt = 0;
	uint64_t off = 0;
#define ADD(nm, len)                                                                                   \
	do {                                                                                           \
		snprintf(names[nt], sizeof(names[nt]), "%s", nm);                                      \
		shapes[nt][0] = (len);                                                                 \
		t[nt] = (struct st_tensor){ .name = names[nt], .dtype = "U8", .ndim = 1, .shape = shapes[nt], \
					    .begin = off, .end = off + (len) };                        \
		off += (len);                                                                          \
		nt++;                                                                                  \
	} while (0)
	ADD("emb", 70001);
	for (int i = 0; i < FL; i++) {
		char nm[32];
		snprintf(nm, sizeof(nm), "blk.%d.a", i);
		ADD(nm, 10000 + 77777 * (uint64_t)i);
		snprintf(nm, sizeof(nm), "blk.%d.b", i);
		ADD(nm, i == 3 ? 0 : 3 + 999 * (uint64_t)i); /* a zero-size tensor too */
	}
	ADD("out", (uint64_t)(3u << 20) / 2 + 5);
#undef ADD
	struct st_writer w;
	struct bb hdr = { 0 };
	st_begin(&w);
	for (size_t i = 0; i < nt; i++)
		st_tensor(&w, &t[i]);
	st_finish(&w, &hdr, 3);
	fm->size = hdr.n + off;
	fm->file = malloc(fm->size);
	REQUIRE(fm->file);
	memcpy(fm->file, hdr.p, hdr.n);
	free(hdr.p);
	for (uint64_t i = hdr.n; i < fm->size; i++)
		fm->file[i] = (uint8_t)rng(&seed);
	fm->n = 0;
	uint64_t slot = 5;
	int k = 0;
	for (uint64_t lo = 0; lo < fm->size && fm->n < 2048; k++) {
		uint64_t len = 4096 * (1 + rng(&seed) % 10);
		if (k % 9 == 8 && lo > hdr.n + 4096) { /* a hole: zeroes in the file too */
			uint64_t z = lo + len < fm->size ? len : fm->size - lo;
			memset(fm->file + lo, 0, z);
			lo += len;
			continue;
		}
		fm->ext[fm->n++] = (struct gpunvme_extent){ lo, slot * 4096, len, 0 };
		uint64_t z = lo + len < fm->size ? len : fm->size - lo;
		memcpy(ns + slot * 4096, fm->file + lo, z);
		slot += len / 4096 + 1 + rng(&seed) % 3;
		lo += len;
		REQUIRE(slot * 4096 < ns_len);
	}
	REQUIRE_OK(gpunvme_model_parse_mem(fm->file, fm->size, &fm->m));
	return 0;
}

static int frag_check_layer(const struct frag_model *fm, const struct gpunvme_stream_layer *L, uint32_t i)
{
	REQUIRE_EQ(L->index, i);
	REQUIRE_EQ(L->n_tensors, 2);
	for (size_t t = 0; t < L->n_tensors; t++) {
		const struct gpunvme_tensor *x = L->tensors[t];
		REQUIRE(L->ptr[t] != NULL);
		REQUIRE(!memcmp(L->ptr[t], fm->file + x->offset, x->bytes), "layer %u tensor %s differs", i, x->name);
	}
	return 0;
}

TEST_CASE(fragmented)
{
	struct gpunvme_ctrl *c = open_emu("emu:ram:64M?lbads=9&workers=3");
	REQUIRE(c);
	struct frag_model fm;
	REQUIRE_OK(frag_make(c, &fm, 21));
	for (uint32_t win = 1; win <= FL + 1; win++) {
		struct gpunvme_stream_opts o;
		gpunvme_stream_opts_init(&o);
		o.layers = "blk.{i}.";
		o.resident = win % 2 ? NULL : "emb"; /* "out" not loaded at all */
		o.window = win;
		struct gpunvme_layer_stream *s = NULL;
		REQUIRE_OK(gpunvme_layer_stream_open(c, 1, fm.m, fm.ext, fm.n, fm.size, &o, &s));
		const struct gpunvme_model_buffers *res = gpunvme_layer_stream_resident(s);
		REQUIRE(res && res->n_tensors == (win % 2 ? 2u : 1u));
		for (size_t t = 0; t < res->n_tensors; t++)
			REQUIRE(!memcmp(res->ptr[t], fm.file + res->tensors[t]->offset, res->tensors[t]->bytes));
		/* in order, twice, holding two layers at once where the window allows */
		for (int pass = 0; pass < 2; pass++) {
			for (uint32_t i = 0; i < FL; i++) {
				const struct gpunvme_stream_layer *L = NULL, *L2 = NULL;
				REQUIRE_OK(gpunvme_layer_stream_acquire(s, i, NULL, &L));
				if (frag_check_layer(&fm, L, i))
					return 1;
				if (win >= 2 && i + 1 < FL) {
					REQUIRE_OK(gpunvme_layer_stream_acquire(s, i + 1, NULL, &L2));
					if (frag_check_layer(&fm, L2, i + 1) || frag_check_layer(&fm, L, i))
						return 1;
				}
				REQUIRE_OK(gpunvme_layer_stream_release(s, i, NULL, NULL));
				if (L2)
					REQUIRE_OK(gpunvme_layer_stream_release(s, i + 1, NULL, NULL));
			}
		}
		/* out of order: each a restart of the window, bytes still right */
		const uint32_t order[] = { 4, 1, 5, 0, 2, 2, 3 };
		for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
			const struct gpunvme_stream_layer *L = NULL;
			REQUIRE_OK(gpunvme_layer_stream_acquire(s, order[k], NULL, &L));
			if (frag_check_layer(&fm, L, order[k]))
				return 1;
			REQUIRE_OK(gpunvme_layer_stream_release(s, order[k], NULL, NULL));
		}
		struct gpunvme_stream_stats st;
		REQUIRE_OK(gpunvme_layer_stream_stats(s, &st));
		if (win >= FL)
			REQUIRE_EQ(st.restarts, 0);
		else
			REQUIRE(st.restarts > 0);
		gpunvme_layer_stream_close(s);
	}
	gpunvme_model_free(fm.m);
	free(fm.file);
	gpunvme_close(c);
	return 0;
}

/* GPUNVME_STREAM_TRACE: one line per acquire and release (the CPU tier has
 * no GPU intervals), times that do not run backwards; a file that cannot be
 * opened leaves the stream working, untraced. */
TEST_CASE(trace)
{
	struct gpunvme_ctrl *c = open_emu("emu:ram:64M?lbads=9&workers=2");
	REQUIRE(c);
	struct frag_model fm;
	REQUIRE_OK(frag_make(c, &fm, 22));
	char path[] = "/tmp/gpunvme-trace-XXXXXX";
	int fd = mkstemp(path);
	REQUIRE(fd >= 0);
	close(fd);
	struct gpunvme_stream_opts o;
	gpunvme_stream_opts_init(&o);
	o.layers = "blk.{i}.";
	for (int bad = 0; bad < 2; bad++) {
		REQUIRE_OK(setenv("GPUNVME_STREAM_TRACE", bad ? "/nonexistent-dir/trace" : path, 1));
		struct gpunvme_layer_stream *s = NULL;
		REQUIRE_OK(gpunvme_layer_stream_open(c, 1, fm.m, fm.ext, fm.n, fm.size, &o, &s));
		REQUIRE_OK(unsetenv("GPUNVME_STREAM_TRACE"));
		for (uint32_t i = 0; i < FL; i++) {
			const struct gpunvme_stream_layer *L = NULL;
			REQUIRE_OK(gpunvme_layer_stream_acquire(s, i, NULL, &L));
			if (frag_check_layer(&fm, L, i))
				return 1;
			REQUIRE_OK(gpunvme_layer_stream_release(s, i, NULL, NULL));
		}
		gpunvme_layer_stream_close(s);
	}
	FILE *f = fopen(path, "r");
	REQUIRE(f);
	char what[16];
	unsigned layer, n_acq = 0, n_rel = 0;
	double a, b, last = 0;
	int k;
	while ((k = fscanf(f, "host %15s %u %lf %lf\n", what, &layer, &a, &b)) == 4) {
		REQUIRE(layer < FL && a >= last && b >= a, "%s %u %.3f %.3f after %.3f", what, layer, a, b, last);
		last = a;
		if (!strcmp(what, "acquire"))
			REQUIRE_EQ(layer, n_acq++);
		else if (!strcmp(what, "release"))
			REQUIRE_EQ(layer, n_rel++);
		else
			FAIL("unknown line \"%s\"", what);
	}
	REQUIRE(k == EOF, "a line that is not \"host <call> <layer> <ms> <ms>\"");
	fclose(f);
	unlink(path);
	REQUIRE_EQ(n_acq, FL);
	REQUIRE_EQ(n_rel, FL);
	gpunvme_model_free(fm.m);
	free(fm.file);
	gpunvme_close(c);
	return 0;
}

/* ---- errors ------------------------------------------------------------------------ */

static int expect_open(struct gpunvme_ctrl *c, const struct frag_model *fm, const char *layers, const char *resident,
		       uint32_t window, int want, const char *msg)
{
	struct gpunvme_stream_opts o;
	gpunvme_stream_opts_init(&o);
	o.layers = layers;
	o.resident = resident;
	o.window = window;
	struct gpunvme_layer_stream *s = (struct gpunvme_layer_stream *)&o; /* must be cleared */
	int rc = gpunvme_layer_stream_open(c, 1, fm->m, fm->ext, fm->n, fm->size, &o, &s);
	REQUIRE_EQ(rc, want);
	REQUIRE(s == NULL);
	REQUIRE(strstr(gpunvme_last_error(), msg), "pattern %s: message \"%s\" lacks \"%s\"", layers ? layers : "NULL",
		gpunvme_last_error(), msg);
	return 0;
}

TEST_CASE(errors)
{
	struct gpunvme_ctrl *c = open_emu("emu:ram:64M?lbads=12&workers=2");
	REQUIRE(c);
	struct frag_model fm;
	REQUIRE_OK(frag_make(c, &fm, 5));
	int rc = 0;
	rc |= expect_open(c, &fm, NULL, NULL, 2, -EINVAL, "no layer pattern");
	rc |= expect_open(c, &fm, "", NULL, 2, -EINVAL, "no layer pattern");
	rc |= expect_open(c, &fm, "blk.", NULL, 2, -EINVAL, "has no {i}");
	rc |= expect_open(c, &fm, "blk.{i}.{i}", NULL, 2, -EINVAL, "{i} twice");
	rc |= expect_open(c, &fm, "blk.{i}.", NULL, 0, -EINVAL, "at least 1 slot");
	rc |= expect_open(c, &fm, "model.layers.{i}.", NULL, 2, -ENOENT, "no tensor matches");
	rc |= expect_open(c, &fm, "blk.{i}.", "blk.2.*", 2, -EINVAL, "either streamed or resident");
	if (rc)
		return 1;
	/* a gap in the numbering: rename layer 2's tensors in a copy of the index */
	struct gpunvme_model *m2 = NULL;
	REQUIRE_OK(gpunvme_model_parse_mem(fm.file, fm.size, &m2));
	for (size_t i = 0; i < m2->n_tensors; i++)
		if (!strncmp(m2->tensors[i].name, "blk.2.", 6))
			m2->tensors[i].name[4] = 'x';
	struct gpunvme_stream_opts o;
	gpunvme_stream_opts_init(&o);
	o.layers = "blk.{i}.";
	struct gpunvme_layer_stream *s = NULL;
	REQUIRE_EQ(gpunvme_layer_stream_open(c, 1, m2, fm.ext, fm.n, fm.size, &o, &s), -EINVAL);
	REQUIRE(strstr(gpunvme_last_error(), "no tensor of layer 2"), "%s", gpunvme_last_error());
	gpunvme_model_free(m2);
	/* a slot the host cannot give: layer 1 claims a tensor of 1 PiB (the
	 * index edited after parsing, the file size with it) */
	REQUIRE_OK(gpunvme_model_parse_mem(fm.file, fm.size, &m2));
	uint64_t big_size = fm.size;
	for (size_t i = 0; i < m2->n_tensors; i++)
		if (!strncmp(m2->tensors[i].name, "blk.1.", 6)) {
			m2->tensors[i].bytes = 1ull << 50;
			big_size = m2->tensors[i].offset + m2->tensors[i].bytes;
			break;
		}
	gpunvme_stream_opts_init(&o);
	o.layers = "blk.{i}.";
	o.window = 3;
	s = NULL;
	REQUIRE_EQ(gpunvme_layer_stream_open(c, 1, m2, fm.ext, fm.n, big_size, &o, &s), -ENOMEM);
	REQUIRE(s == NULL);
	REQUIRE(strstr(gpunvme_last_error(), "cannot allocate slot 0 of 3") &&
			strstr(gpunvme_last_error(), "a smaller window needs less"),
		"%s", gpunvme_last_error());
	gpunvme_model_free(m2);
	/* missing arguments */
	REQUIRE_EQ(gpunvme_layer_stream_open(NULL, 1, fm.m, fm.ext, fm.n, fm.size, &o, &s), -EINVAL);
	REQUIRE_EQ(gpunvme_layer_stream_open(c, 1, fm.m, fm.ext, fm.n, fm.size, NULL, &s), -EINVAL);

	/* a GPU tier without the CUDA backend */
	o.loader.tier = GPUNVME_TIER_2;
	o.no_fallback = 1;
	REQUIRE_EQ(gpunvme_layer_stream_open(c, 1, fm.m, fm.ext, fm.n, fm.size, &o, &s), -ENOTSUP);
	REQUIRE(strstr(gpunvme_last_error(), "CUDA backend"), "%s", gpunvme_last_error());
	o.no_fallback = 0; /* ignored: the stream has no fallback of its own (tier.h decides) */
	REQUIRE_EQ(gpunvme_layer_stream_open(c, 1, fm.m, fm.ext, fm.n, fm.size, &o, &s), -ENOTSUP);
	REQUIRE(strstr(gpunvme_last_error(), "Tier 2"), "%s", gpunvme_last_error());
	/* AUTO without the CUDA backend: the policy picks the CPU tier */
	o.loader.tier = GPUNVME_TIER_AUTO;
	REQUIRE_OK(gpunvme_layer_stream_open(c, 1, fm.m, fm.ext, fm.n, fm.size, &o, &s));
	struct gpunvme_stream_stats ss;
	REQUIRE_OK(gpunvme_layer_stream_stats(s, &ss));
	CHECK_EQ(ss.tier, GPUNVME_TIER_CPU);
	CHECK_EQ(ss.fell_back, 0);
	gpunvme_layer_stream_close(s);
	s = NULL;
	o.loader.tier = GPUNVME_TIER_CPU;

	/* acquire / release misuse */
	o.window = 2;
	REQUIRE_OK(gpunvme_layer_stream_open(c, 1, fm.m, fm.ext, fm.n, fm.size, &o, &s));
	const struct gpunvme_stream_layer *L = NULL, *L2 = NULL;
	REQUIRE_EQ(gpunvme_layer_stream_acquire(s, FL, NULL, &L), -ERANGE);
	REQUIRE(strstr(gpunvme_last_error(), "layers 0..5"), "%s", gpunvme_last_error());
	REQUIRE_EQ(gpunvme_layer_stream_acquire(s, 0, NULL, NULL), -EINVAL);
	REQUIRE_EQ(gpunvme_layer_stream_release(s, 0, NULL, NULL), -EINVAL);
	REQUIRE(strstr(gpunvme_last_error(), "not held"), "%s", gpunvme_last_error());
	REQUIRE_OK(gpunvme_layer_stream_acquire(s, 0, NULL, &L));
	REQUIRE_EQ(gpunvme_layer_stream_acquire(s, 0, NULL, &L2), -EBUSY);
	REQUIRE(strstr(gpunvme_last_error(), "already held"), "%s", gpunvme_last_error());
	/* layer 4 is outside the window while 0 is held */
	REQUIRE_EQ(gpunvme_layer_stream_acquire(s, 4, NULL, &L2), -EBUSY);
	REQUIRE(strstr(gpunvme_last_error(), "release it first"), "%s", gpunvme_last_error());
	REQUIRE_OK(gpunvme_layer_stream_release(s, 0, NULL, NULL));
	REQUIRE_EQ(gpunvme_layer_stream_release(s, 0, NULL, NULL), -EINVAL);
	REQUIRE_EQ(gpunvme_layer_stream_release(s, 99, NULL, NULL), -EINVAL);
	REQUIRE_OK(gpunvme_layer_stream_sync(s));
	/* check: the CPU tier reported in acquire; a layer past the end */
	REQUIRE_OK(gpunvme_layer_stream_check(s, 0));
	REQUIRE_EQ(gpunvme_layer_stream_check(s, FL), -ERANGE);
	REQUIRE_EQ(gpunvme_layer_stream_check(NULL, 0), -EINVAL);
	REQUIRE_EQ(gpunvme_layer_stream_stats(s, NULL), -EINVAL);
	gpunvme_layer_stream_close(s);
	gpunvme_layer_stream_close(NULL);
	REQUIRE_EQ(gpunvme_layer_stream_layers(NULL), 0);

	/* a read that fails: the media error reaches acquire with its status */
	REQUIRE_OK(gpunvme_layer_stream_open(c, 1, fm.m, fm.ext, fm.n, fm.size, &o, &s));
	struct gpunvme_emu_fault fl;
	memset(&fl, 0, sizeof(fl));
	fl.kind = GPUNVME_EMU_FAULT_MEDIA;
	fl.nsid = 1;
	fl.slba = 0;
	fl.nlb = (64u << 20) / 4096; /* the whole namespace */
	REQUIRE_OK(gpunvme_emu_inject(gpunvme_ctrl_emu(c), &fl));
	rc = gpunvme_layer_stream_acquire(s, 0, NULL, &L);
	REQUIRE_EQ(rc, -EIO);
	REQUIRE(strstr(gpunvme_last_error(), "NVMe status"), "%s", gpunvme_last_error());
	/* the loader tried it again before giving up (its default: 2 more
	 * times), and the stream's statistics say so */
	struct gpunvme_stream_stats fs;
	REQUIRE_OK(gpunvme_layer_stream_stats(s, &fs));
	REQUIRE(fs.retries == 2 && fs.resets == 0, "retries %llu, resets %llu", (unsigned long long)fs.retries,
		(unsigned long long)fs.resets);
	gpunvme_layer_stream_close(s);

	gpunvme_model_free(fm.m);
	free(fm.file);
	gpunvme_close(c);
	return 0;
}
int main(int argc, char **argv) { return check_main(argc, argv); }
