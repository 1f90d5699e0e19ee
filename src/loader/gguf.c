/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * GGUF index, versions 2 and 3 (ggml docs/gguf.md, "File Structure"), all
 * little-endian:
 *   u32 magic "GGUF", u32 version, u64 tensor_count, u64 metadata_kv_count
 *   kv pairs:     gguf_string key, u32 value type, value
 *   tensor infos: gguf_string name, u32 n_dims, u64 ne[n_dims], u32 ggml
 *                 type, u64 offset (relative to the data section)
 *   padding to general.alignment (u32, default 32), then the data section.
 * A gguf_string is a u64 length and that many bytes (no NUL).
 *
 * The header is read through a small window (RD_WIN bytes) that moves along
 * it, never as a whole: a model may be tens of GiB, and the header of one
 * with a large vocabulary is megabytes of strings. Lengths and counts are
 * checked against the bytes left in the file before anything is read or
 * allocated, and the header as a whole against GPUNVME_MODEL_MAX_HEADER.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "loader/model_internal.h"

#define RD_WIN          (64u << 10)  /* header window */
#define RD_ALIGN        4096u        /* window starts: block-aligned reads */
#define GG_MAX_DIMS     4u           /* GGML_MAX_DIMS */
#define GG_ARRAY_DEPTH  8u           /* arrays of arrays: nesting bound */
#define GG_DEFAULT_ALIGNMENT 32u     /* gguf.md: general.alignment default */

#define GG_ERR(fmt, ...) gpunvme_set_error(-EINVAL, "gguf: " fmt, ##__VA_ARGS__)

/* ---- ggml types ----------------------------------------------------------- */

/* enum ggml_type of ggml.h with the block size (elements per block) and
 * type size (bytes per block) of ggml.c's type_traits; the block layouts
 * are the block_* structs of ggml-common.h (QK_K = 256). Ids 4, 5 and 31-33,
 * 36-38 are types that were removed and are refused.
 *
 * Ids 40-42 are newer than the llama.cpp copy this table was first checked
 * against (it ends at MXFP4 = 39, GGML_TYPE_COUNT = 40); their numbers come
 * from the pull requests that added them and from gguf-py's
 * GGML_QUANT_SIZES (block size, type size), which mirrors type_traits:
 *   NVFP4 = 40  ggml-org/llama.cpp#19769: QK_NVFP4 = 64, block_nvfp4 =
 *               4 UE4M3 sub-block scales + 32 bytes of E2M1 nibbles = 36;
 *               GGML_QUANT_SIZES[NVFP4] = (64, 4 + 32)
 *   Q1_0  = 41  ggml-org/llama.cpp#21273: QK1_0 = 128, block_q1_0 = half d
 *               + 16 bytes of sign bits = 18; GGML_QUANT_SIZES[Q1_0] =
 *               (128, 2 + 16) (an earlier proposal, #20048, with blocks of
 *               32 was not merged)
 *   Q2_0  = 42  ggml-org/llama.cpp#24448: QK2_0 = 64, block_q2_0 = half d +
 *               16 bytes of 2-bit codes = 18 (GGML_TYPE_COUNT = 43); the
 *               huggingface.js sync of it (#2295) has (64, 2 + 16) too. */
static const struct gg_type {
	uint32_t id;
	const char *name;
	uint32_t blck;
	uint32_t size;
} gg_types[] = {
	{ 0, "F32", 1, 4 },         { 1, "F16", 1, 2 },
	{ 2, "Q4_0", 32, 18 },      { 3, "Q4_1", 32, 20 },
	{ 6, "Q5_0", 32, 22 },      { 7, "Q5_1", 32, 24 },
	{ 8, "Q8_0", 32, 34 },      { 9, "Q8_1", 32, 36 },
	{ 10, "Q2_K", 256, 84 },    { 11, "Q3_K", 256, 110 },
	{ 12, "Q4_K", 256, 144 },   { 13, "Q5_K", 256, 176 },
	{ 14, "Q6_K", 256, 210 },   { 15, "Q8_K", 256, 292 },
	{ 16, "IQ2_XXS", 256, 66 }, { 17, "IQ2_XS", 256, 74 },
	{ 18, "IQ3_XXS", 256, 98 }, { 19, "IQ1_S", 256, 50 },
	{ 20, "IQ4_NL", 32, 18 },   { 21, "IQ3_S", 256, 110 },
	{ 22, "IQ2_S", 256, 82 },   { 23, "IQ4_XS", 256, 136 },
	{ 24, "I8", 1, 1 },         { 25, "I16", 1, 2 },
	{ 26, "I32", 1, 4 },        { 27, "I64", 1, 8 },
	{ 28, "F64", 1, 8 },        { 29, "IQ1_M", 256, 56 },
	{ 30, "BF16", 1, 2 },       { 34, "TQ1_0", 256, 54 },
	{ 35, "TQ2_0", 256, 66 },   { 39, "MXFP4", 32, 17 },
	{ 40, "NVFP4", 64, 36 },    { 41, "Q1_0", 128, 18 },
	{ 42, "Q2_0", 64, 18 },
};

#define GG_NTYPES (sizeof(gg_types) / sizeof(gg_types[0]))

static const struct gg_type *gg_type_by_id(uint32_t id)
{
	for (size_t i = 0; i < GG_NTYPES; i++)
		if (gg_types[i].id == id)
			return &gg_types[i];
	return NULL;
}

double model_gguf_bits(const char *dtype)
{
	for (size_t i = 0; i < GG_NTYPES; i++)
		if (!strcmp(gg_types[i].name, dtype))
			return gg_types[i].size * 8.0 / gg_types[i].blck;
	return 0;
}

/* ---- metadata value types (gguf.md, gguf_metadata_value_type) ------------- */

enum {
	GV_U8 = 0, GV_I8 = 1, GV_U16 = 2, GV_I16 = 3, GV_U32 = 4, GV_I32 = 5, GV_F32 = 6,
	GV_BOOL = 7, GV_STRING = 8, GV_ARRAY = 9, GV_U64 = 10, GV_I64 = 11, GV_F64 = 12,
	GV_COUNT = 13,
};

/* bytes of a fixed-size value; 0 for string and array */
static const uint8_t gv_size[GV_COUNT] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };

/* names for messages, as gguf.md spells the types */
static const char *gv_name(uint32_t type)
{
	static const char *const n[GV_COUNT] = { "uint8", "int8",   "uint16", "int16", "uint32", "int32", "float32",
						 "bool",  "string", "array",  "uint64", "int64", "float64" };
	return type < GV_COUNT ? n[type] : "unknown";
}

/* ---- the header window --------------------------------------------------- */

struct rd {
	const struct model_src *src;
	uint8_t *buf;
	uint64_t win;   /* file offset of buf[0] */
	size_t len;     /* valid bytes in buf */
	uint64_t pos;   /* next header byte */
};

/* n more header bytes must exist in the file (else the header is cut
 * short) and keep the header under the limit. */
static int rd_room(struct rd *r, uint64_t n, const char *what)
{
	if (n > r->src->size - r->pos)
		return GG_ERR("truncated header: %s at offset %llu needs %llu bytes, the file ends at %llu", what,
			      (unsigned long long)r->pos, (unsigned long long)n,
			      (unsigned long long)r->src->size);
	if (r->pos + n > GPUNVME_MODEL_MAX_HEADER)
		return gpunvme_set_error(-EFBIG, "gguf: header (metadata and tensor infos) larger than %u bytes at %s",
					 GPUNVME_MODEL_MAX_HEADER, what);
	return 0;
}

static int rd_skip(struct rd *r, uint64_t n, const char *what)
{
	int rc = rd_room(r, n, what);
	if (!rc)
		r->pos += n;
	return rc;
}

static int rd_get(struct rd *r, void *out, size_t n, const char *what)
{
	int rc = rd_room(r, n, what);
	uint8_t *o = out;
	/* each pass copies at least one byte (the window is refilled at pos,
	 * and pos < size because rd_room passed) */
	while (!rc && n) {
		if (r->pos >= r->win && r->pos < r->win + r->len) {
			size_t k = (size_t)(r->win + r->len - r->pos);
			if (k > n)
				k = n;
			memcpy(o, r->buf + (r->pos - r->win), k);
			o += k;
			n -= k;
			r->pos += k;
			continue;
		}
		r->win = r->pos & ~(uint64_t)(RD_ALIGN - 1);
		uint64_t left = r->src->size - r->win;
		r->len = left < RD_WIN ? (size_t)left : RD_WIN;
		rc = model_read(r->src, r->win, r->buf, r->len);
		if (rc)
			r->len = 0;
	}
	return rc;
}

static int rd_u32(struct rd *r, uint32_t *v, const char *what)
{
	uint8_t b[4];
	int rc = rd_get(r, b, 4, what);
	if (!rc)
		*v = model_le32(b);
	return rc;
}

static int rd_u64(struct rd *r, uint64_t *v, const char *what)
{
	uint8_t b[8];
	int rc = rd_get(r, b, 8, what);
	if (!rc)
		*v = model_le64(b);
	return rc;
}

/* A gguf_string into a new NUL-terminated buffer (NULL out: skipped). The
 * length is checked against the file before anything is allocated. */
static int rd_string(struct rd *r, char **out, uint64_t *len, const char *what)
{
	uint64_t n;
	int rc = rd_u64(r, &n, what);
	if (rc)
		return rc;
	if ((rc = rd_room(r, n, what)))
		return rc;
	if (len)
		*len = n;
	if (!out)
		return rd_skip(r, n, what);
	char *s = malloc((size_t)n + 1);
	if (!s)
		return gpunvme_set_error(-ENOMEM, "gguf: out of memory for a %llu byte string", (unsigned long long)n);
	rc = rd_get(r, s, (size_t)n, what);
	if (rc) {
		free(s);
		return rc;
	}
	s[n] = 0;
	*out = s;
	return 0;
}

/* ---- metadata --------------------------------------------------------------- */

static int skip_value(struct rd *r, uint32_t type, unsigned depth);

/* u32 element type, u64 count, the elements. Every element takes at least
 * one byte of the file (a string 8, an array 12), so the count is checked
 * against what is left before the elements are walked. */
static int skip_array(struct rd *r, unsigned depth)
{
	uint32_t et;
	uint64_t count, bytes;
	int rc = rd_u32(r, &et, "array type");
	if (!rc)
		rc = rd_u64(r, &count, "array length");
	if (rc)
		return rc;
	if (et >= GV_COUNT)
		return GG_ERR("unknown metadata array element type %u at offset %llu", et, (unsigned long long)r->pos);
	if (et == GV_ARRAY && depth + 1 >= GG_ARRAY_DEPTH)
		return GG_ERR("metadata arrays nested deeper than %u levels", GG_ARRAY_DEPTH);
	uint64_t min = et == GV_STRING ? 8 : et == GV_ARRAY ? 12 : gv_size[et];
	if (!model_mul(count, min, &bytes) || bytes > r->src->size - r->pos)
		return GG_ERR("truncated header: metadata array of %llu elements at offset %llu does not fit in the file",
			      (unsigned long long)count, (unsigned long long)r->pos);
	if (et != GV_STRING && et != GV_ARRAY && et != GV_BOOL)
		return rd_skip(r, bytes, "array");
	for (uint64_t i = 0; i < count && !rc; i++)
		rc = skip_value(r, et, depth + 1);
	return rc;
}

static int skip_value(struct rd *r, uint32_t type, unsigned depth)
{
	if (type >= GV_COUNT)
		return GG_ERR("unknown metadata value type %u at offset %llu", type, (unsigned long long)r->pos);
	if (type == GV_STRING)
		return rd_string(r, NULL, NULL, "string value");
	if (type == GV_ARRAY)
		return skip_array(r, depth);
	if (type == GV_BOOL) {
		/* gguf.md: a bool is 1 byte, 0 or 1; "anything else is invalid" */
		uint8_t b;
		int rc = rd_get(r, &b, 1, "bool");
		if (!rc && b > 1)
			rc = GG_ERR("bool value %u at offset %llu is neither 0 nor 1", b, (unsigned long long)(r->pos - 1));
		return rc;
	}
	return rd_skip(r, gv_size[type], "value");
}

struct gg {
	struct rd r;
	struct gpunvme_model *m;
	size_t cap;
	uint64_t n_tensors; /* tensor_count of the header */
	char **keys;
	size_t nkeys, kcap;
	/* llama.cpp gguf-split keys, as read (see read_split) */
	bool have_split_no, have_split_count, have_split_tensors;
	uint16_t split_no, split_count;
	int32_t split_tensors;
};

static int keep_key(struct gg *g, char *key)
{
	if (g->nkeys == g->kcap) {
		size_t n = g->kcap ? g->kcap * 2 : 64;
		char **k = realloc(g->keys, n * sizeof(*k));
		if (!k) {
			free(key);
			return gpunvme_set_error(-ENOMEM, "gguf: out of memory");
		}
		g->keys = k;
		g->kcap = n;
	}
	g->keys[g->nkeys++] = key;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* gguf.md: "keys must be unique"; two values of general.alignment would
 * make the data offset ambiguous. */
static int check_keys(struct gg *g)
{
	if (g->nkeys < 2)
		return 0;
	qsort(g->keys, g->nkeys, sizeof(*g->keys), cmp_str);
	for (size_t i = 1; i < g->nkeys; i++)
		if (!strcmp(g->keys[i - 1], g->keys[i]))
			return GG_ERR("duplicate metadata key \"%.80s\"", g->keys[i]);
	return 0;
}

static int read_alignment(struct gg *g, uint32_t type)
{
	/* gguf.md: general.alignment is a uint32, a multiple of 8 in
	 * practice; ggml itself only needs a nonzero power of two */
	if (type != GV_U32)
		return GG_ERR("general.alignment has value type %u, expected uint32 (4)", type);
	uint32_t a;
	int rc = rd_u32(&g->r, &a, "general.alignment");
	if (rc)
		return rc;
	if (a == 0 || (a & (a - 1)))
		return GG_ERR("general.alignment %u is not a power of two", a);
	g->m->alignment = a;
	return 0;
}

/*
 * The keys of a model split by llama.cpp's gguf-split (LLM_KV_SPLIT_NO,
 * LLM_KV_SPLIT_COUNT, LLM_KV_SPLIT_TENSORS_COUNT): gguf-split writes
 * split.no and split.count with gguf_set_val_u16 and split.tensors.count
 * with gguf_set_val_i32, and llama-model-loader reads them with get_key
 * into uint16_t, uint16_t and int, whose GGUFMeta::GKV::get_kv refuses any
 * other stored type ("key %s has wrong type"). So exactly uint16, uint16
 * and int32 are accepted here, anything else is an error naming the key.
 */
static int read_split(struct gg *g, const char *key, uint32_t type, bool *done)
{
	bool is_no = !strcmp(key, "split.no"), is_count = !strcmp(key, "split.count");
	bool is_tensors = !strcmp(key, "split.tensors.count");
	*done = is_no || is_count || is_tensors;
	if (!*done)
		return 0;
	uint32_t want = is_tensors ? GV_I32 : GV_U16;
	if (type != want)
		return GG_ERR("%s has value type %u (%s), expected %s as llama.cpp's gguf-split writes it and "
			      "llama-model-loader requires", key, type, gv_name(type), gv_name(want));
	uint8_t b[4];
	int rc = rd_get(&g->r, b, gv_size[want], key);
	if (rc)
		return rc;
	if (is_no) {
		g->split_no = (uint16_t)(b[0] | b[1] << 8);
		g->have_split_no = true;
	} else if (is_count) {
		g->split_count = (uint16_t)(b[0] | b[1] << 8);
		g->have_split_count = true;
	} else {
		g->split_tensors = (int32_t)model_le32(b);
		g->have_split_tensors = true;
	}
	return 0;
}

/* With the tensor infos read: the split fields of the model, checked. */
static int check_split(struct gg *g)
{
	struct gpunvme_model *m = g->m;
	uint32_t count = g->have_split_count ? g->split_count : 1;
	/* gguf-split --merge stores split.count = 0 in the merged file ("do
	 * not trigger merge if we try to merge again the output") and
	 * llama-model-loader treats any count <= 1 as a single file: a count
	 * of 0 is a whole model, reported as 1 */
	if (count == 0)
		count = 1;
	if (count > 1 && (!g->have_split_no || !g->have_split_tensors))
		return GG_ERR("split.count is %u but %s is missing (gguf-split writes split.no, split.count and "
			      "split.tensors.count in every shard)", count,
			      !g->have_split_no ? "split.no" : "split.tensors.count");
	uint32_t no = g->have_split_no ? g->split_no : 0;
	if (no >= count)
		return GG_ERR("split.no %u is not below split.count %u (split.no counts shards from 0)", no, count);
	uint64_t total = m->n_tensors;
	if (g->have_split_tensors) {
		if (g->split_tensors < 0)
			return GG_ERR("split.tensors.count %d is negative", (int)g->split_tensors);
		total = (uint64_t)g->split_tensors;
		/* split.tensors.count is the whole model's tensor count: one
		 * shard cannot hold more */
		if (total < m->n_tensors)
			return GG_ERR("split.tensors.count %llu is less than the %zu tensors of this file",
				      (unsigned long long)total, m->n_tensors);
	}
	m->split_no = no;
	m->split_count = count;
	m->split_tensors = total;
	return 0;
}

static int read_kv(struct gg *g)
{
	char *key = NULL;
	uint64_t klen;
	uint32_t type;
	int rc = rd_string(&g->r, &key, &klen, "metadata key");
	if (rc)
		return rc;
	if ((rc = keep_key(g, key)))
		return rc;
	if (strlen(key) != klen)
		return GG_ERR("metadata key contains a NUL character");
	if ((rc = rd_u32(&g->r, &type, "metadata value type")))
		return rc;
	if (!strcmp(key, "general.alignment"))
		return read_alignment(g, type);
	bool split = false;
	rc = read_split(g, key, type, &split);
	if (rc || split)
		return rc;
	return skip_value(&g->r, type, 0);
}

/* ---- tensor infos ------------------------------------------------------------ */

/* bytes = ne[0] / blck * size * ne[1] * ... (ggml_nbytes of a contiguous
 * tensor); ne[0] must be a whole number of blocks (ggml_row_size). */
static int tensor_bytes(struct gpunvme_tensor *t, const struct gg_type *ty)
{
	uint64_t n = 1;
	for (uint32_t i = 0; i < t->ndim; i++) {
		/* ggml keeps ne as int64_t: no dimension, and no element
		 * count, may pass INT64_MAX */
		if (!model_mul(n, t->shape[i], &n) || n > INT64_MAX)
			return GG_ERR("tensor \"%.64s\": element count overflows", t->name);
	}
	uint64_t ne0 = t->ndim ? t->shape[0] : 1;
	if (ne0 % ty->blck)
		return GG_ERR("tensor \"%.64s\": ne[0] = %llu is not a multiple of the %s block size %u", t->name,
			      (unsigned long long)ne0, ty->name, ty->blck);
	uint64_t b;
	bool ok = model_mul(ne0 / ty->blck, ty->size, &b);
	for (uint32_t i = 1; i < t->ndim && ok; i++)
		ok = model_mul(b, t->shape[i], &b);
	if (!ok)
		return GG_ERR("tensor \"%.64s\": byte size overflows", t->name);
	t->bytes = b;
	return 0;
}

static int read_tensor(struct gg *g)
{
	struct gpunvme_tensor *t;
	uint64_t nlen;
	uint32_t type;
	int rc = model_push_tensor(g->m, &g->cap, &t);
	if (!rc)
		rc = rd_string(&g->r, &t->name, &nlen, "tensor name");
	if (rc)
		return rc;
	if (strlen(t->name) != nlen)
		return GG_ERR("tensor name contains a NUL character");
	if ((rc = rd_u32(&g->r, &t->ndim, "tensor n_dims")))
		return rc;
	if (t->ndim > GG_MAX_DIMS)
		return GG_ERR("tensor \"%.64s\": too many dimensions: %u (at most %u)", t->name, t->ndim, GG_MAX_DIMS);
	for (uint32_t i = 0; i < t->ndim && !rc; i++)
		rc = rd_u64(&g->r, &t->shape[i], "tensor dimensions");
	if (!rc)
		rc = rd_u32(&g->r, &type, "tensor type");
	if (!rc)
		rc = rd_u64(&g->r, &t->offset, "tensor offset");
	if (rc)
		return rc;
	const struct gg_type *ty = gg_type_by_id(type);
	if (!ty)
		return GG_ERR("tensor \"%.64s\": unknown ggml type %u", t->name, type);
	snprintf(t->dtype, sizeof(t->dtype), "%s", ty->name);
	t->ggml_type = (int32_t)ty->id;
	t->file = 0;
	/* gguf.md: each tensor's offset "must be a multiple of ALIGNMENT" */
	if (t->offset % g->m->alignment)
		return GG_ERR("tensor \"%.64s\": offset %llu is misaligned (not a multiple of general.alignment %u)",
			      t->name, (unsigned long long)t->offset, g->m->alignment);
	return tensor_bytes(t, ty);
}

/* With the data section placed: every tensor inside the file, offsets made
 * absolute. */
static int place_tensors(struct gg *g)
{
	struct gpunvme_model *m = g->m;
	uint64_t a = m->alignment, end = g->r.pos;
	/* gguf.md: padding to ALIGNMENT after the tensor infos */
	m->data_offset = (end + a - 1) / a * a;
	for (size_t i = 0; i < m->n_tensors; i++) {
		struct gpunvme_tensor *t = &m->tensors[i];
		uint64_t s;
		if (__builtin_add_overflow(m->data_offset, t->offset, &s) || s > m->file_size ||
		    t->bytes > m->file_size - s)
			return GG_ERR("tensor \"%.64s\": data [%llu + %llu, %llu bytes] past the end of the file "
				      "(%llu bytes)", t->name, (unsigned long long)m->data_offset,
				      (unsigned long long)t->offset, (unsigned long long)t->bytes,
				      (unsigned long long)m->file_size);
		t->offset = s;
	}
	return 0;
}

static int read_header(struct gg *g)
{
	struct gpunvme_model *m = g->m;
	uint8_t h[24];
	int rc = rd_get(&g->r, h, sizeof(h), "GGUF header");
	if (rc)
		return rc;
	uint32_t v = model_le32(h + 4);
	/* gguf.md: v1 used 32-bit counts and lengths; a big-endian file
	 * (allowed since v3) shows its version byte-swapped */
	if (v && !(v & 0xffff) && (v >> 24) >= 1 && (v >> 24) <= 3)
		return GG_ERR("big-endian GGUF (version %u) is not supported", v >> 24);
	if (v == 1)
		return GG_ERR("GGUF version 1 is not supported (versions 2 and 3 are)");
	if (v != 2 && v != 3)
		return GG_ERR("unsupported GGUF version %u (versions 2 and 3 are)", v);
	uint64_t nt = model_le64(h + 8), nkv = model_le64(h + 16);
	/* a tensor info takes at least 24 bytes (empty name, no dims), a
	 * kv pair at least 13 (empty key, a 1-byte value) */
	uint64_t left = m->file_size - g->r.pos;
	if (nt > left / 24 || nkv > left / 13 || nkv * 13 > left - nt * 24)
		return GG_ERR("truncated header or bad counts: %llu tensors and %llu metadata pairs cannot fit in "
			      "%llu bytes", (unsigned long long)nt, (unsigned long long)nkv, (unsigned long long)left);
	m->version = v;
	m->n_kv = nkv;
	g->n_tensors = nt;
	return 0;
}

int model_parse_gguf(const struct model_src *src, struct gpunvme_model *m)
{
	struct gg g = { .r = { .src = src }, .m = m };
	m->alignment = GG_DEFAULT_ALIGNMENT;
	g.r.buf = malloc(RD_WIN);
	if (!g.r.buf)
		return gpunvme_set_error(-ENOMEM, "gguf: out of memory");
	int rc = read_header(&g);
	for (uint64_t i = 0; i < m->n_kv && !rc; i++)
		rc = read_kv(&g);
	if (!rc)
		rc = check_keys(&g);
	for (uint64_t i = 0; i < g.n_tensors && !rc; i++)
		rc = read_tensor(&g);
	if (!rc)
		rc = check_split(&g);
	if (!rc)
		rc = place_tensors(&g);
	if (!rc)
		rc = model_check_names(m, "gguf");
	if (!rc)
		rc = model_check_overlap(m, "gguf");
	free(g.r.buf);
	for (size_t i = 0; i < g.nkeys; i++)
		free(g.keys[i]);
	free(g.keys);
	return rc;
}
