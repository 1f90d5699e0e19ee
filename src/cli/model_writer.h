/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The one writer of safetensors and GGUF bytes, shared by gpunvme-mkmodel
 * (src/cli/mkmodel.c) and the tests that build model files by hand
 * (tests/loader/test_model.c, test_loader.c, the seed writer of
 * tests/fuzz/fuzz_model.c), so that the generator and the tests cannot drift
 * apart on the formats.
 *
 * Header-only, C11 + libc: the fixture scripts build mkmodel with gcc alone
 * and the fuzz seeds are written by `cc -Iinclude tests/fuzz/fuzz_model.c`;
 * neither knows of a second source file. Every function is static inline,
 * so an includer that uses a few of them gets no unused-function warnings.
 *
 * It writes only what the caller asks for: a test that needs a broken file
 * builds it from the same pieces (a raw JSON header, a wrong count, an
 * explicit byte edit afterwards).
 *
 * safetensors (https://github.com/huggingface/safetensors, "Format"):
 *   8 bytes  N, little-endian: the length of the JSON header
 *   N bytes  a JSON object: "__metadata__" (string to string) and one entry
 *            per tensor: {"dtype":D,"shape":[..],"data_offsets":[BEGIN,END]},
 *            offsets relative to the start of the data (byte 8 + N);
 *            padded with spaces, the reference writer pads N to a multiple
 *            of 8 so that the data starts 8-byte aligned
 *   the data
 * GGUF v2/v3 (ggml's docs/gguf.md): "GGUF", u32 version, u64 tensor count,
 *   u64 metadata count, the metadata (key, u32 type, value), the tensor
 *   infos (name, u32 ndim, u64 ne[ndim], u32 ggml type, u64 offset relative
 *   to the data), zero padding to general.alignment (default 32), the data;
 *   strings are a u64 length and the bytes, no NUL. All little-endian.
 */
#ifndef GPUNVME_CLI_MODEL_WRITER_H
#define GPUNVME_CLI_MODEL_WRITER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Out of memory: an includer may define BB_OOM(bytes) before including this
 * (mkmodel: its die(), for its own message); the default suits a test. */
#ifndef BB_OOM
#define BB_OOM(bytes) (fprintf(stderr, "out of memory (%zu bytes)\n", (size_t)(bytes)), exit(1))
#endif

/* ---- byte builder ----------------------------------------------------------- */

/* A growable byte buffer; { 0 } is an empty one, free(b.p) releases it. */
struct bb {
	uint8_t *p;
	size_t n, cap;
};

static inline void bb_put(struct bb *b, const void *d, size_t n)
{
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n)
			cap *= 2;
		uint8_t *p = realloc(b->p, cap);
		if (!p)
			BB_OOM(cap);
		b->p = p;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->n, d, n);
	b->n += n;
}

static inline void bb_u8(struct bb *b, uint8_t v) { bb_put(b, &v, 1); }

/* the low `n` bytes of v, little-endian (the byte order of both formats) */
static inline void bb_le(struct bb *b, uint64_t v, int n)
{
	uint8_t x[8];
	for (int i = 0; i < n && i < 8; i++)
		x[i] = (uint8_t)(v >> (8 * i));
	bb_put(b, x, (size_t)(n < 8 ? n : 8));
}

static inline void bb_u32(struct bb *b, uint32_t v) { bb_le(b, v, 4); }
static inline void bb_u64(struct bb *b, uint64_t v) { bb_le(b, v, 8); }

static inline void bb_fill(struct bb *b, uint8_t c, size_t n)
{
	uint8_t x[256];
	memset(x, c, sizeof(x));
	for (size_t k; n; n -= k) {
		k = n < sizeof(x) ? n : sizeof(x);
		bb_put(b, x, k);
	}
}

/* zero bytes up to the next multiple of `a` from the buffer's start */
static inline void bb_align(struct bb *b, size_t a)
{
	bb_fill(b, 0, (a - b->n % a) % a);
}

/* ---- safetensors -------------------------------------------------------------- */

/* The header of a file whose JSON the caller wrote: N = len + pad, the JSON,
 * `pad` spaces. Any pad is valid; a test picks one to put the data on an
 * odd offset, the structured writer below the reference writer's. */
static inline void st_frame(struct bb *out, const char *json, size_t len, size_t pad)
{
	bb_u64(out, (uint64_t)len + pad);
	bb_put(out, json, len);
	bb_fill(out, ' ', pad);
}

/* The structured writer: st_begin, then members in the order they are to
 * appear, then st_finish. */
struct st_writer {
	struct bb json;
	size_t members;
};

static inline void st_begin(struct st_writer *w)
{
	memset(w, 0, sizeof(*w));
	bb_put(&w->json, "{", 1);
}

static inline void st_text(struct st_writer *w, const char *s) { bb_put(&w->json, s, strlen(s)); }

/* a JSON string: quotes, '"' and '\' escaped, control bytes as \u00XX;
 * other bytes (UTF-8) as they are, which the format requires to be valid */
static inline void st_string(struct st_writer *w, const char *s)
{
	bb_put(&w->json, "\"", 1);
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		char e[8];
		if (*c == '"' || *c == '\\') {
			e[0] = '\\';
			e[1] = (char)*c;
			bb_put(&w->json, e, 2);
		} else if (*c < 0x20) {
			snprintf(e, sizeof(e), "\\u%04x", *c);
			bb_put(&w->json, e, 6);
		} else {
			bb_put(&w->json, c, 1);
		}
	}
	bb_put(&w->json, "\"", 1);
}

static inline void st_u64(struct st_writer *w, uint64_t v)
{
	char s[24];
	snprintf(s, sizeof(s), "%llu", (unsigned long long)v);
	st_text(w, s);
}

/* the ',' between members */
static inline void st_next(struct st_writer *w)
{
	if (w->members++)
		bb_put(&w->json, ",", 1);
}

/* A member the caller wrote ("key":value), as it is: for JSON the writer
 * would not produce (escapes a parser must decode, members in odd places). */
static inline void st_raw_member(struct st_writer *w, const char *member)
{
	st_next(w);
	st_text(w, member);
}

/* "__metadata__":{"k0":"v0",...} from n pairs kv[2i], kv[2i+1] */
static inline void st_metadata(struct st_writer *w, const char *const *kv, size_t n)
{
	st_next(w);
	st_text(w, "\"__metadata__\":{");
	for (size_t i = 0; i < n; i++) {
		if (i)
			st_text(w, ",");
		st_string(w, kv[2 * i]);
		st_text(w, ":");
		st_string(w, kv[2 * i + 1]);
	}
	st_text(w, "}");
}

struct st_tensor {
	const char *name;     /* UTF-8; escaped as JSON needs */
	const char *raw_name; /* instead of name: the text between the quotes as it is */
	const char *dtype;
	uint32_t ndim;
	const uint64_t *shape; /* outermost first */
	uint64_t begin, end;   /* data_offsets, relative to the start of the data */
	bool spaced;           /* a space before the name and after its ':', as some writers emit */
};

static inline void st_tensor(struct st_writer *w, const struct st_tensor *t)
{
	st_next(w);
	if (t->spaced)
		st_text(w, " ");
	if (t->raw_name) {
		st_text(w, "\"");
		st_text(w, t->raw_name);
		st_text(w, "\"");
	} else {
		st_string(w, t->name);
	}
	st_text(w, t->spaced ? ": " : ":");
	st_text(w, "{\"dtype\":");
	st_string(w, t->dtype);
	st_text(w, ",\"shape\":[");
	for (uint32_t d = 0; d < t->ndim; d++) {
		if (d)
			st_text(w, ",");
		st_u64(w, t->shape[d]);
	}
	st_text(w, "],\"data_offsets\":[");
	st_u64(w, t->begin);
	st_text(w, ",");
	st_u64(w, t->end);
	st_text(w, "]}");
}

/* Close the object, pad it with spaces until the data starts at an offset
 * that is `data_mod8` modulo 8 (0: the reference writer's 8-byte alignment;
 * anything else tests a reader), and append length, JSON and padding to
 * `out`. Releases the writer. */
static inline void st_finish(struct st_writer *w, struct bb *out, unsigned data_mod8)
{
	st_text(w, "}");
	size_t pad = 0;
	while ((8 + w->json.n + pad) % 8 != data_mod8 % 8)
		pad++;
	st_frame(out, (const char *)w->json.p, w->json.n, pad);
	free(w->json.p);
	memset(w, 0, sizeof(*w));
}

/* ---- GGUF ------------------------------------------------------------------------- */

/* metadata value types (gguf_metadata_value_type) */
enum gguf_type {
	GGUF_U8 = 0, GGUF_I8, GGUF_U16, GGUF_I16, GGUF_U32, GGUF_I32, GGUF_F32,
	GGUF_BOOL, GGUF_STR, GGUF_ARR, GGUF_U64, GGUF_I64, GGUF_F64,
};

/* the alignment of the data when general.alignment is absent */
#define GGUF_DEFAULT_ALIGNMENT 32u

/* gguf_string: u64 length, the bytes */
static inline void gguf_str(struct bb *b, const char *s)
{
	bb_u64(b, strlen(s));
	bb_put(b, s, strlen(s));
}

static inline void gguf_head(struct bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
	bb_put(b, "GGUF", 4);
	bb_u32(b, version);
	bb_u64(b, n_tensors);
	bb_u64(b, n_kv);
}

/* a metadata key and its value's type; the value follows */
static inline void gguf_key(struct bb *b, const char *key, enum gguf_type type)
{
	gguf_str(b, key);
	bb_u32(b, (uint32_t)type);
}

static inline void gguf_kv_u32(struct bb *b, const char *key, uint32_t v)
{
	gguf_key(b, key, GGUF_U32);
	bb_u32(b, v);
}

static inline void gguf_kv_u16(struct bb *b, const char *key, uint16_t v)
{
	gguf_key(b, key, GGUF_U16);
	bb_le(b, v, 2);
}

static inline void gguf_kv_i32(struct bb *b, const char *key, int32_t v)
{
	gguf_key(b, key, GGUF_I32);
	bb_u32(b, (uint32_t)v);
}

static inline void gguf_kv_str(struct bb *b, const char *key, const char *v)
{
	gguf_key(b, key, GGUF_STR);
	gguf_str(b, v);
}

/*
 * The three keys llama.cpp's gguf-split (tools/gguf-split) puts in every
 * shard, in its order and types: split.no (uint16, 0-based), split.count
 * (uint16) and split.tensors.count (int32, the tensors of the whole model).
 * gguf-split copies the source's other metadata into the first shard only,
 * before these; the other shards hold just these three. 3 pairs.
 */
static inline void gguf_split_kv(struct bb *b, uint16_t no, uint16_t count, int32_t tensors)
{
	gguf_kv_u16(b, "split.no", no);
	gguf_kv_u16(b, "split.count", count);
	gguf_kv_i32(b, "split.tensors.count", tensors);
}

/* A shard's file name as llama_split_path() makes it:
 * PREFIX-%05d-of-%05d.gguf with the 1-based shard number. The length
 * snprintf wanted (>= n: cut short). */
static inline int gguf_split_path(char *out, size_t n, const char *prefix, unsigned no, unsigned count)
{
	return snprintf(out, n, "%s-%05u-of-%05u.gguf", prefix, no + 1, count);
}

/* an array's element type and count; the elements follow */
static inline void gguf_arr(struct bb *b, enum gguf_type elem, uint64_t count)
{
	bb_u32(b, (uint32_t)elem);
	bb_u64(b, count);
}

/* one tensor info; ne[0] is the innermost dimension (ggml order) */
static inline void gguf_tensor_info(struct bb *b, const char *name, uint32_t ndim, const uint64_t *ne,
				    uint32_t ggml_type, uint64_t offset)
{
	gguf_str(b, name);
	bb_u32(b, ndim);
	for (uint32_t d = 0; d < ndim; d++)
		bb_u64(b, ne[d]);
	bb_u32(b, ggml_type);
	bb_u64(b, offset);
}

/* The offset of the tensor after one at `offset` of `bytes`: ggml lays
 * tensors out consecutively, each padded to the alignment, and insists on
 * exactly that. */
static inline uint64_t gguf_next_offset(uint64_t offset, uint64_t bytes, uint32_t align)
{
	return (offset + bytes + align - 1) / align * align;
}

#endif
