/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libFuzzer target for the model file index (src/loader/model.c,
 * safetensors.c, gguf.c): the input is a whole safetensors or GGUF file.
 * Per input:
 *   - gpunvme_model_parse_mem, and gpunvme_model_parse through a read
 *     callback that serves reads in small odd pieces and refuses reads
 *     outside the file: both must give the same result (a differential
 *     check of the GGUF header window and the safetensors chunked read);
 *   - on success, the index must be sane: every tensor inside the file and
 *     after the data offset, a known dtype, ndim within bounds, names
 *     NUL-terminated; any violation aborts;
 *   - gpunvme_tensor_match with the input's last bytes as a pattern list
 *     against the tensor names (or fixed names): bounded time, no overrun;
 *   - the expert index (moe.h) over the index: 0, -ENOENT or -EINVAL only,
 *     and on success every expert's pieces inside their tensors and the
 *     file, layers ascending, the slot placement congruent and clear of the
 *     other pieces' blocks.
 * The parser must return 0 or -errno, never read out of bounds, leak,
 * crash or hang.
 *
 * Seeds (tests/fuzz/corpus-model, each < 4 KiB) are small valid files:
 * safetensors with metadata, escapes, nested unknown members, zero-size and
 * sub-byte tensors; GGUF v2 and v3 with every metadata type, nested arrays,
 * general.alignment 64, block-type tensors, a vocabulary array; a
 * gguf-split shard with NVFP4 / Q1_0 / Q2_0 tensors; F8_*FNUZ and
 * __metadata__ in a non-sorted order. They are
 * written by this file compiled without libFuzzer:
 *   cc -DFUZZ_MODEL_MKSEED -Iinclude tests/fuzz/fuzz_model.c -o mkseed
 *   ./mkseed tests/fuzz/corpus-model
 * (the index parser is not needed for that: link nothing else).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpunvme/model.h"
#include "gpunvme/moe.h"

#ifndef FUZZ_MODEL_MKSEED

struct mem {
	const uint8_t *p;
	size_t n;
};

static int odd_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	const struct mem *m = ctx;
	if (off > m->n || len > m->n - off)
		abort(); /* the parser checks every range before it reads */
	/* in pieces of 5 bytes: a copy loop of its own, not one memcpy */
	for (size_t done = 0; done < len; done += 5)
		memcpy((uint8_t *)buf + done, m->p + off + done, len - done < 5 ? len - done : 5);
	return 0;
}

static void check_sane(const struct gpunvme_model *m, size_t size)
{
	if (m->file_size != size || m->data_offset > size + (uint64_t)m->alignment || !m->alignment ||
	    (m->alignment & (m->alignment - 1)))
		abort();
	for (size_t i = 0; i < m->n_tensors; i++) {
		const struct gpunvme_tensor *t = &m->tensors[i];
		if (!t->name || t->ndim > GPUNVME_TENSOR_MAX_DIMS || t->offset > size || t->bytes > size - t->offset ||
		    (t->bytes && t->offset < m->data_offset) || !memchr(t->dtype, 0, sizeof(t->dtype)) ||
		    gpunvme_dtype_bits(m->format, t->dtype) <= 0)
			abort();
	}
}

static int same(const struct gpunvme_model *a, const struct gpunvme_model *b)
{
	if (a->n_tensors != b->n_tensors || a->data_offset != b->data_offset || a->n_kv != b->n_kv ||
	    a->alignment != b->alignment || a->version != b->version || a->format != b->format)
		return 0;
	for (size_t i = 0; i < a->n_tensors; i++)
		if (strcmp(a->tensors[i].name, b->tensors[i].name) || a->tensors[i].offset != b->tensors[i].offset ||
		    a->tensors[i].bytes != b->tensors[i].bytes || strcmp(a->tensors[i].dtype, b->tensors[i].dtype))
			return 0;
	return 1;
}

static void check_experts(const struct gpunvme_model *m, size_t size)
{
	struct gpunvme_moe_index *x = NULL;
	int rc = gpunvme_moe_index_build(m, &x);
	if (rc != 0 && rc != -ENOENT && rc != -EINVAL && rc != -ENOMEM)
		abort();
	if ((rc == 0) != (x != NULL))
		abort();
	if (!x)
		return;
	if (!x->n_layers || !x->n_experts || !x->n_proj || x->n_proj > GPUNVME_MOE_MAX_PROJ ||
	    x->n_experts > GPUNVME_MOE_MAX_EXPERTS)
		abort();
	for (uint32_t i = 1; i < x->n_layers; i++)
		if (x->layer[i] <= x->layer[i - 1])
			abort();
	for (uint32_t i = 0; i < x->n_layers; i++)
		for (uint32_t e = 0; e < x->n_experts; e++) {
			const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(x, i, e);
			uint64_t pos[GPUNVME_MOE_MAX_PROJ], sum = 0;
			uint64_t end = gpunvme_moe_place(x, i, e, pos);
			for (uint32_t p = 0; p < x->n_proj; p++) {
				if (pc[p].tensor >= m->n_tensors)
					abort();
				const struct gpunvme_tensor *t = &m->tensors[pc[p].tensor];
				if (pc[p].offset < t->offset || pc[p].bytes > t->bytes ||
				    pc[p].offset - t->offset > t->bytes - pc[p].bytes || pc[p].offset + pc[p].bytes > size)
					abort();
				if (pos[p] % GPUNVME_MOE_PLACE != pc[p].offset % GPUNVME_MOE_PLACE)
					abort();
				if (p && pos[p] - pos[p] % GPUNVME_MOE_PLACE < pos[p - 1] + pc[p - 1].bytes)
					abort();
				sum += pc[p].bytes;
			}
			if (sum > x->max_expert_bytes || end != pos[x->n_proj - 1] + pc[x->n_proj - 1].bytes)
				abort();
		}
	if (gpunvme_moe_expert(x, x->n_layers, 0) || gpunvme_moe_expert(x, 0, x->n_experts))
		abort();
	gpunvme_moe_index_free(x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gpunvme_model *a = NULL, *b = NULL;
	struct mem m = { data, size };
	int ra = gpunvme_model_parse_mem(data, size, &a);
	int rb = gpunvme_model_parse(odd_read, &m, size, &b);
	if (ra > 0 || ra != rb || (ra == 0) != (a != NULL) || (rb == 0) != (b != NULL))
		abort();
	if (a) {
		check_sane(a, size);
		if (!same(a, b))
			abort();
		check_experts(a, size);
	}

	/* the last bytes (up to 48) as a pattern list */
	char pat[49];
	size_t k = size < 48 ? size : 48;
	memcpy(pat, data + size - k, k);
	pat[k] = 0;
	static const char *const fixed[] = { "", "blk.0.attn_q.weight", "token_embd.weight", "a,b", "[!]*?\\" };
	if (a && a->n_tensors)
		for (size_t i = 0; i < a->n_tensors && i < 64; i++)
			gpunvme_tensor_match(pat, a->tensors[i].name);
	else
		for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
			gpunvme_tensor_match(pat, fixed[i]);
	gpunvme_model_free(a);
	gpunvme_model_free(b);
	return 0;
}

#else /* FUZZ_MODEL_MKSEED: write the seed corpus */

/* the safetensors/GGUF writer gpunvme-mkmodel and the loader tests use */
#include "cli/model_writer.h"

static void fill(struct bb *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		bb_u8(b, (uint8_t)(0x40 + i % 64));
}

static void save(const char *dir, const char *name, const struct bb *b)
{
	char path[4096];
	if (b->n > 4096) { /* seeds stay small: the fuzzer mutates them whole */
		fprintf(stderr, "%s: seed over 4 KiB\n", name);
		exit(1);
	}
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(b->p, 1, b->n, f) != b->n || fclose(f)) {
		perror(path);
		exit(1);
	}
	printf("%s: %zu bytes\n", path, b->n);
}

/* a safetensors seed with this JSON as it is and `pad` spaces after it */
static void st(const char *dir, const char *name, const char *json, size_t pad, size_t data)
{
	struct bb b = { 0 };
	st_frame(&b, json, strlen(json), pad);
	fill(&b, data);
	save(dir, name, &b);
	free(b.p);
}

struct ti {
	const char *name;
	uint32_t type, ndim;
	uint64_t ne[4], bytes;
};

static void gg_tensors(struct bb *b, const struct ti *t, size_t n, uint32_t align)
{
	uint64_t off = 0, offs[16];
	for (size_t i = 0; i < n; i++) {
		offs[i] = off;
		off = gguf_next_offset(off, t[i].bytes, align);
		gguf_tensor_info(b, t[i].name, t[i].ndim, t[i].ne, t[i].type, offs[i]);
	}
	bb_align(b, align);
	uint64_t base = b->n;
	for (size_t i = 0; i < n; i++) {
		bb_fill(b, 0, base + offs[i] - b->n);
		fill(b, t[i].bytes);
	}
}

static void gg_every_kv(struct bb *b)
{
	gguf_kv_str(b, "general.architecture", "llama");
	gguf_key(b, "u8", GGUF_U8), bb_le(b, 1, 1);
	gguf_key(b, "i8", GGUF_I8), bb_le(b, 0xff, 1);
	gguf_key(b, "u16", GGUF_U16), bb_le(b, 2, 2);
	gguf_key(b, "i16", GGUF_I16), bb_le(b, 0xfffe, 2);
	gguf_kv_u32(b, "u32", 3);
	gguf_key(b, "i32", GGUF_I32), bb_le(b, 0xfffffffd, 4);
	gguf_key(b, "f32", GGUF_F32), bb_le(b, 0x3f800000, 4);
	gguf_key(b, "bool", GGUF_BOOL), bb_le(b, 1, 1);
	gguf_key(b, "u64", GGUF_U64), bb_le(b, 4, 8);
	gguf_key(b, "i64", GGUF_I64), bb_le(b, (uint64_t)-4, 8);
	gguf_key(b, "f64", GGUF_F64), bb_le(b, 0x4000000000000000ull, 8);
	gguf_key(b, "arr.f32", GGUF_ARR), gguf_arr(b, GGUF_F32, 2), bb_le(b, 0, 4), bb_le(b, 0x3f800000, 4);
	gguf_key(b, "arr.bool", GGUF_ARR), gguf_arr(b, GGUF_BOOL, 3), bb_le(b, 0x010001, 3);
	gguf_key(b, "arr.str", GGUF_ARR), gguf_arr(b, GGUF_STR, 2), gguf_str(b, "<s>"), gguf_str(b, "</s>");
	gguf_key(b, "arr.nested", GGUF_ARR), gguf_arr(b, GGUF_ARR, 2);
	gguf_arr(b, GGUF_U32, 2), bb_le(b, 1, 4), bb_le(b, 2, 4);
	gguf_arr(b, GGUF_STR, 1), gguf_str(b, "x");
	gguf_key(b, "arr.empty", GGUF_ARR), gguf_arr(b, GGUF_I64, 0);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	const char *d = argv[1];
	st(d, "st-basic",
	   "{\"__metadata__\":{\"format\":\"pt\"},"
	   "\"w\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
	   "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[12,18]},"
	   "\"i\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[18,26]}}",
	   5, 26);
	st(d, "st-escapes",
	   "{\"\\u00e9\\ud83d\\ude00\\n\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4],"
	   "\"extra\":[1,-2.5e3,true,false,null,{\"k\":\"\\\"\"}]},"
	   "\"z\":{\"dtype\":\"F32\",\"shape\":[0,7],\"data_offsets\":[4,4]},"
	   "\"f4\":{\"dtype\":\"F4\",\"shape\":[2,2],\"data_offsets\":[4,6]},"
	   "\"f6\":{\"dtype\":\"F6_E3M2\",\"shape\":[4],\"data_offsets\":[6,9]},"
	   "\"c\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[9,17]}}",
	   0, 17);
	st(d, "st-empty", "{}", 6, 0);

	struct bb b = { 0 };
	static const struct ti t3[] = {
		{ "token_embd.weight", 8, 2, { 32, 2 }, 68 },  /* Q8_0 */
		{ "blk.0.attn_q.weight", 12, 1, { 256 }, 144 }, /* Q4_K */
		{ "blk.0.attn_norm.weight", 0, 1, { 5 }, 20 }, /* F32 */
		{ "empty", 1, 2, { 0, 3 }, 0 },                /* F16 */
		{ "tq", 35, 1, { 256 }, 66 },                  /* TQ2_0 */
	};
	gguf_head(&b, 3, 5, 18);
	gg_every_kv(&b);
	gguf_kv_u32(&b, "general.alignment", 64);
	gg_tensors(&b, t3, 5, 64);
	save(d, "gguf-v3-kv", &b);

	b.n = 0;
	static const struct ti t2[] = {
		{ "a", 0, 3, { 2, 3, 1 }, 24 },   /* F32 */
		{ "q", 2, 2, { 32, 2 }, 36 },     /* Q4_0 */
		{ "iq", 20, 1, { 32 }, 18 },      /* IQ4_NL */
	};
	gguf_head(&b, 2, 3, 1);
	gguf_kv_str(&b, "general.name", "tiny");
	gg_tensors(&b, t2, 3, 32);
	save(d, "gguf-v2", &b);

	b.n = 0;
	static const struct ti tv[] = { { "output.weight", 30, 2, { 4, 2 }, 16 } }; /* BF16 */
	gguf_head(&b, 3, 1, 1);
	gguf_key(&b, "tokenizer.ggml.tokens", GGUF_ARR), gguf_arr(&b, GGUF_STR, 60);
	for (int i = 0; i < 60; i++) {
		char tok[16];
		snprintf(tok, sizeof(tok), "t%d", i);
		gguf_str(&b, tok);
	}
	gg_tensors(&b, tv, 1, 32);
	save(d, "gguf-vocab", &b);

	/* a gguf-split shard (split keys only, as gguf-split writes shards
	 * after the first) with the newest ggml types */
	b.n = 0;
	static const struct ti ts[] = {
		{ "blk.1.nv", 40, 2, { 64, 2 }, 72 },  /* NVFP4 */
		{ "blk.1.q1", 41, 1, { 128 }, 18 },    /* Q1_0 */
		{ "blk.1.q2", 42, 1, { 64 }, 18 },     /* Q2_0 */
		{ "blk.1.mx", 39, 1, { 32 }, 17 },     /* MXFP4 */
	};
	gguf_head(&b, 3, 4, 3);
	gguf_split_kv(&b, 1, 3, 9);
	gg_tensors(&b, ts, 4, 32);
	save(d, "gguf-split", &b);
	free(b.p);

	/* every safetensors dtype added since the first seeds, and a larger
	 * __metadata__ in its own order */
	st(d, "st-meta-fnuz",
	   "{\"__metadata__\":{\"z\":\"1\",\"a\":\"\\u00e9\",\"format\":\"pt\",\"e\":\"\"},"
	   "\"a\":{\"dtype\":\"F8_E4M3FNUZ\",\"shape\":[2,3],\"data_offsets\":[0,6]},"
	   "\"b\":{\"dtype\":\"F8_E5M2FNUZ\",\"shape\":[4],\"data_offsets\":[6,10]},"
	   "\"c\":{\"dtype\":\"F8_E8M0\",\"shape\":[1],\"data_offsets\":[10,11]},"
	   "\"d\":{\"dtype\":\"F6_E2M3\",\"shape\":[8],\"data_offsets\":[11,17]}}",
	   0, 17);

	/* mixture-of-experts layouts (moe.h): one tensor per expert beside a
	 * router and a shared expert; stacked along dimension 0; GGUF _exps */
	st(d, "st-moe-per-expert",
	   "{\"model.layers.0.mlp.gate.weight\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
	   "\"model.layers.0.mlp.shared_experts.up_proj.weight\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[8,12]},"
	   "\"model.layers.0.mlp.experts.0.up_proj.weight\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[12,20]},"
	   "\"model.layers.0.mlp.experts.0.down_proj.weight\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[20,28]},"
	   "\"model.layers.0.mlp.experts.1.up_proj.weight\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[28,36]},"
	   "\"model.layers.0.mlp.experts.1.down_proj.weight\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[36,44]},"
	   "\"model.layers.2.mlp.experts.0.up_proj.weight\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[44,52]},"
	   "\"model.layers.2.mlp.experts.0.down_proj.weight\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[52,60]},"
	   "\"model.layers.2.mlp.experts.1.up_proj.weight\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[60,68]},"
	   "\"model.layers.2.mlp.experts.1.down_proj.weight\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[68,76]}}",
	   0, 76);
	st(d, "st-moe-stacked",
	   "{\"model.layers.1.mlp.experts.gate_up_proj\":{\"dtype\":\"F16\",\"shape\":[4,2,3],\"data_offsets\":[0,48]},"
	   "\"model.layers.1.mlp.experts.down_proj\":{\"dtype\":\"F16\",\"shape\":[4,3,1],\"data_offsets\":[48,72]},"
	   "\"model.layers.1.mlp.router.weight\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[72,88]}}",
	   3, 88);
	b = (struct bb){ 0 };
	static const struct ti te[] = {
		{ "blk.0.ffn_gate_inp.weight", 0, 2, { 2, 4 }, 32 },       /* F32 */
		{ "blk.0.ffn_up_exps.weight", 8, 3, { 32, 2, 4 }, 272 },  /* Q8_0 */
		{ "blk.0.ffn_down_exps.weight", 1, 3, { 2, 32, 4 }, 512 }, /* F16 */
		{ "blk.0.ffn_up_shexp.weight", 1, 2, { 2, 2 }, 8 },        /* F16 */
	};
	gguf_head(&b, 3, 4, 0);
	gg_tensors(&b, te, 4, 32);
	save(d, "gguf-moe-exps", &b);
	free(b.p);
	return 0;
}

#endif
