/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Test helper shared by the MoE tests (CPU: tests/moe/test_moe.c, GPU:
 * tests/gpu/test_gpu_moe.cu): safetensors files built in memory (random
 * data), and a Mixtral-shaped model (per-expert w1/w2/w3, a router, an
 * attention weight per layer).
 */
#ifndef GPUNVME_TEST_MOE_MODEL_H
#define GPUNVME_TEST_MOE_MODEL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpunvme/gpunvme.h"
#include "gpunvme/model.h"

struct tdef {
	char name[96];
	const char *dtype;  /* safetensors dtype, or GGUF "F16" / "Q8_0" */
	uint32_t ndim;
	uint64_t shape[4];  /* safetensors: outermost first; GGUF: ne[0] first */
};

struct buf {
	uint8_t *p;
	size_t n, cap;
};

static inline void put(struct buf *b, const void *d, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2 + 4096;
		b->p = (uint8_t *)realloc(b->p, b->cap);
	}
	memcpy(b->p + b->n, d, n);
	b->n += n;
}

static inline void put_u32(struct buf *b, uint32_t v) { put(b, &v, 4); }
static inline void put_u64(struct buf *b, uint64_t v) { put(b, &v, 8); }

static inline uint64_t rng(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline uint64_t elems(const struct tdef *t)
{
	uint64_t n = 1;
	for (uint32_t d = 0; d < t->ndim; d++)
		n *= t->shape[d];
	return n;
}

static inline uint64_t st_bytes(const struct tdef *t)
{
	return elems(t) * (!strcmp(t->dtype, "F32") ? 4 : 2);
}

/* A safetensors file of these tensors, random data. */
static inline uint8_t *safetensors(const struct tdef *t, size_t n, size_t *len, uint64_t seed)
{
	struct buf h = { NULL, 0, 0 };
	put(&h, "{", 1);
	uint64_t off = 0;
	char tmp[512];
	for (size_t i = 0; i < n; i++) {
		int k = snprintf(tmp, sizeof(tmp), "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "", t[i].name,
				 t[i].dtype);
		for (uint32_t d = 0; d < t[i].ndim; d++)
			k += snprintf(tmp + k, sizeof(tmp) - (size_t)k, "%s%llu", d ? "," : "", (unsigned long long)t[i].shape[d]);
		uint64_t b = st_bytes(&t[i]);
		k += snprintf(tmp + k, sizeof(tmp) - (size_t)k, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
			      (unsigned long long)(off + b));
		put(&h, tmp, (size_t)k);
		off += b;
	}
	put(&h, "}", 1);
	while (h.n % 8)
		put(&h, " ", 1);
	struct buf f = { NULL, 0, 0 };
	put_u64(&f, h.n);
	put(&f, h.p, h.n);
	for (uint64_t i = 0; i < off; i++) {
		uint8_t v = (uint8_t)rng(&seed);
		put(&f, &v, 1);
	}
	free(h.p);
	*len = f.n;
	return f.p;
}

static inline struct gpunvme_model *parse(const uint8_t *f, size_t len)
{
	struct gpunvme_model *m = NULL;
	if (gpunvme_model_parse_mem(f, len, &m))
		fprintf(stderr, "parse: %s\n", gpunvme_last_error());
	return m;
}

static inline const struct gpunvme_tensor *tensor(const struct gpunvme_model *m, const char *name)
{
	for (size_t i = 0; i < m->n_tensors; i++)
		if (!strcmp(m->tensors[i].name, name))
			return &m->tensors[i];
	return NULL;
}

/* Mixtral as transformers 4 writes it: per-expert w1/w2/w3, a router, an
 * attention weight; layers x experts, hidden 16, intermediate 24. */
static inline size_t mixtral(struct tdef *t, uint32_t layers, uint32_t experts)
{
	size_t n = 0;
	snprintf(t[n].name, sizeof(t[n].name), "model.embed_tokens.weight");
	t[n].dtype = "BF16", t[n].ndim = 2, t[n].shape[0] = 32, t[n].shape[1] = 16, n++;
	for (uint32_t l = 0; l < layers; l++) {
		snprintf(t[n].name, sizeof(t[n].name), "model.layers.%u.self_attn.q_proj.weight", l);
		t[n].dtype = "BF16", t[n].ndim = 2, t[n].shape[0] = 16, t[n].shape[1] = 16, n++;
		snprintf(t[n].name, sizeof(t[n].name), "model.layers.%u.block_sparse_moe.gate.weight", l);
		t[n].dtype = "BF16", t[n].ndim = 2, t[n].shape[0] = experts, t[n].shape[1] = 16, n++;
		for (uint32_t e = 0; e < experts; e++) {
			static const char *const w[] = { "w1", "w2", "w3" };
			for (int k = 0; k < 3; k++) {
				snprintf(t[n].name, sizeof(t[n].name), "model.layers.%u.block_sparse_moe.experts.%u.%s.weight", l,
					 e, w[k]);
				t[n].dtype = "BF16", t[n].ndim = 2;
				t[n].shape[0] = k == 1 ? 16 : 24, t[n].shape[1] = k == 1 ? 24 : 16;
				n++;
			}
		}
	}
	return n;
}

/*
 * The model file as /m/model.safetensors of an 8 MiB ext4 image DIR/fs.img
 * (mkfs.ext4 -d), and that image striped over an md RAID0 of 2 members
 * with 64 KiB chunks, DIR/r0.img and DIR/r1.img (bench/md_mkraid0.py, whose
 * path the test gets as MD_MKRAID0_PY). 0, or -1 with the failing command
 * on stderr. Needs python3 and mkfs.ext4.
 */
static inline int moe_model_images(const char *dir, const uint8_t *file, size_t len, const char *mkraid0_py)
{
	char cmd[2048], path[512];
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s/root/m'", dir);
	if (system(cmd))
		return -1;
	snprintf(path, sizeof(path), "%s/root/m/model.safetensors", dir);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(file, 1, len, f) != len) {
		if (f)
			fclose(f);
		fprintf(stderr, "writing %s failed\n", path);
		return -1;
	}
	fclose(f);
	int k = snprintf(cmd, sizeof(cmd),
			 "truncate -s 8M '%s/fs.img' && mkfs.ext4 -q -F -b 4096 -d '%s/root' '%s/fs.img' >/dev/null 2>&1 && "
			 "python3 '%s' '%s/fs.img' 2 64 '%s/r' >/dev/null",
			 dir, dir, dir, mkraid0_py, dir, dir);
	if (k < 0 || (size_t)k >= sizeof(cmd) || system(cmd)) {
		fprintf(stderr, "failed: %s\n", cmd);
		return -1;
	}
	return 0;
}

#endif
