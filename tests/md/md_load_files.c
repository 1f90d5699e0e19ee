/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * md_load_files URI MANIFEST: every file of a sha256sum manifest ("HASH  PATH"
 * lines) loaded whole through the layer loader on the md array at URI (one
 * loader per member, CPU tier) and its sha256 compared with the manifest's.
 * Prints the array's geometry, then one line per file; exit 0 when every file matches, 1 otherwise.
 * (tests/md/test_md_fixtures.sh runs it on the mdadm fixtures, so every file
 * is checked through `load` as well as through `cat`.)
 * A safetensors file whose tensors are named "model.layers.{i}." (the
 * fixtures' /models/model.safetensors) is then read through a layer stream
 * on the array too (windows 1-3, two passes each), every byte of every
 * layer and resident tensor compared with the loaded (manifest-checked) file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpunvme/extents.h"
#include "gpunvme/loader.h"
#include "gpunvme/md.h"
#include "gpunvme/model.h"
#include "gpunvme/sha256.h"
#include "gpunvme/stream.h"

/* 0 when the tensor's bytes at p are the file's (ref). */
static int same(const char *path, const struct gpunvme_tensor *t, const void *p, const uint8_t *ref, uint32_t w,
		int pass)
{
	if (t->bytes && (!p || memcmp(p, ref + t->offset, t->bytes))) {
		fprintf(stderr, "%s: stream window %u pass %d: tensor %s differs from the file\n", path, w, pass, t->name);
		return 1;
	}
	return 0;
}

/* The layer stream on the array, CPU tier: every byte against the file. */
static int stream_check(struct gpunvme_md_volume *v, const char *path, const struct gpunvme_extent *ext, size_t n,
			uint64_t size, const uint8_t *ref)
{
	struct gpunvme_model *m = NULL;
	if (gpunvme_model_parse_mem(ref, size, &m))
		return 0; /* not a model file */
	int bad = 0, any = 0;
	for (size_t t = 0; t < m->n_tensors; t++)
		any |= !strncmp(m->tensors[t].name, "model.layers.", 13);
	for (uint32_t w = 1; any && w <= 3 && !bad; w++) {
		struct gpunvme_stream_opts o;
		gpunvme_stream_opts_init(&o);
		o.layers = "model.layers.{i}.";
		o.window = w;
		o.loader.queues = 2;
		o.loader.depth = 16;
		struct gpunvme_layer_stream *s = NULL;
		if (gpunvme_layer_stream_open_md(v->c, v->nsid, v->md, m, ext, n, size, &o, &s)) {
			fprintf(stderr, "%s: stream window %u: %s\n", path, w, gpunvme_last_error());
			bad = 1;
			break;
		}
		const struct gpunvme_model_buffers *res = gpunvme_layer_stream_resident(s);
		size_t seen = res ? res->n_tensors : 0;
		for (size_t t = 0; res && t < res->n_tensors && !bad; t++)
			bad |= same(path, res->tensors[t], res->ptr[t], ref, w, 0);
		uint32_t L = gpunvme_layer_stream_layers(s);
		for (int pass = 0; pass < 2 && !bad; pass++) {
			for (uint32_t i = 0; i < L && !bad; i++) {
				const struct gpunvme_stream_layer *ly = NULL;
				if (gpunvme_layer_stream_acquire(s, i, NULL, &ly)) {
					fprintf(stderr, "%s: stream acquire %u: %s\n", path, i, gpunvme_last_error());
					bad = 1;
					break;
				}
				for (size_t t = 0; t < ly->n_tensors && !bad; t++)
					bad |= same(path, ly->tensors[t], ly->ptr[t], ref, w, pass);
				if (!pass)
					seen += ly->n_tensors;
				if (gpunvme_layer_stream_release(s, i, NULL, NULL)) {
					fprintf(stderr, "%s: stream release %u: %s\n", path, i, gpunvme_last_error());
					bad = 1;
				}
			}
		}
		if (!bad && seen != m->n_tensors) {
			fprintf(stderr, "%s: stream window %u saw %zu of %zu tensors\n", path, w, seen, m->n_tensors);
			bad = 1;
		}
		if (!bad)
			printf("streamed %s: %u layers, window %u, two passes, every byte equal\n", path, L, w);
		gpunvme_layer_stream_close(s);
	}
	gpunvme_model_free(m);
	return bad;
}

static int one(struct gpunvme_md_volume *v, struct gpunvme_fs *fs, const char *path, const char *want)
{
	uint64_t ino;
	struct gpunvme_stat st;
	struct gpunvme_extent *ext = NULL;
	size_t n = 0;
	int rc;
	if ((rc = gpunvme_fs_lookup(fs, path, &ino)) || (rc = gpunvme_fs_stat(fs, ino, &st)) ||
	    (rc = gpunvme_fs_extents(fs, ino, &ext, &n))) {
		fprintf(stderr, "%s: %s\n", path, gpunvme_last_error());
		return 1;
	}
	struct gpunvme_loader_opts o;
	gpunvme_loader_opts_init(&o);
	o.queues = 2;
	o.depth = 32;
	struct gpunvme_layer_loader *l = NULL;
	/* the file system readers give their queues back to the loaders */
	gpunvme_blkdev_release(&v->array);
	if ((rc = gpunvme_layer_loader_init_md(v->c, v->nsid, v->md, ext, n, st.size, &o, &l))) {
		fprintf(stderr, "%s: loader: %s\n", path, gpunvme_last_error());
		free(ext);
		return 1;
	}
	uint8_t *buf = st.size ? gpunvme_layer_loader_alloc(l, 0, st.size) : NULL;
	uint16_t status = 0;
	if (st.size && (!buf || (rc = gpunvme_load_layer(l, 0, st.size, buf, &status)))) {
		fprintf(stderr, "%s: load: %s\n", path, gpunvme_last_error());
		gpunvme_layer_loader_destroy(l);
		free(ext);
		return 1;
	}
	struct gpunvme_sha256 h;
	uint8_t d[32];
	char hex[65];
	gpunvme_sha256_init(&h);
	if (st.size)
		gpunvme_sha256_update(&h, buf, st.size);
	gpunvme_sha256_final(&h, d);
	gpunvme_sha256_hex(d, hex);
	int bad = strcmp(hex, want) != 0;
	printf("%s %s %llu bytes, %zu extents%s\n", bad ? "DIFFERS" : "ok", path, (unsigned long long)st.size, n,
	       bad ? " (sha256 differs from the manifest)" : "");
	/* a copy of the checked bytes: the loader's queues (and memory) go
	 * back before the stream takes its own */
	uint8_t *ref = !bad && st.size ? malloc(st.size) : NULL;
	if (ref)
		memcpy(ref, buf, st.size);
	gpunvme_layer_loader_destroy(l);
	if (ref)
		bad = stream_check(v, path, ext, n, st.size, ref);
	else if (!bad && st.size)
		bad = 1, fprintf(stderr, "%s: out of memory\n", path);
	free(ref);
	free(ext);
	return bad;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: md_load_files md:URI;URI... MANIFEST\n");
		return 2;
	}
	struct gpunvme_md_volume *v = NULL;
	struct gpunvme_fs *fs = NULL;
	if (gpunvme_md_open(argv[1], NULL, 1, &v) || gpunvme_fs_open(&v->array, 0, &fs)) {
		fprintf(stderr, "%s: %s\n", argv[1], gpunvme_last_error());
		gpunvme_md_volume_close(v);
		return 1;
	}
	struct gpunvme_md_info mi;
	gpunvme_md_info(v->md, &mi);
	/* for comparison with mdadm --detail's "Array Size" (KiB) */
	printf("array %s level %d zones %u layout %u chunk %u size %llu\n", mi.version, (int)mi.level, mi.zones,
	       mi.layout, mi.chunk_bytes, (unsigned long long)mi.size);
	FILE *f = fopen(argv[2], "r");
	if (!f) {
		perror(argv[2]);
		return 1;
	}
	char line[4600], hash[65], path[4096];
	int bad = 0, files = 0;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%64s %4095[^\n]", hash, path) != 2)
			continue;
		char *p = path;
		while (*p == ' ')
			p++;
		bad |= one(v, fs, p, hash);
		files++;
	}
	fclose(f);
	gpunvme_fs_close(fs);
	gpunvme_md_volume_close(v);
	if (!files) {
		fprintf(stderr, "%s: no files\n", argv[2]);
		return 1;
	}
	return bad;
}
