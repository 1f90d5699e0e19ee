/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme-mkmodel: deterministic synthetic model files (safetensors, GGUF v3)
 * for the loader's tests, fixtures and demo. Standalone C11 + libc: the
 * fixture scripts build it with plain gcc, without the library.
 *
 *   gpunvme-mkmodel --format safetensors|gguf --size BYTES[K|M|G] [--seed N]
 *                   [--edge] [--compressible] [--every-dtype]
 *                   [--metadata KEY=VALUE]... [--split N]
 *                   -o FILE [--manifest FILE]
 *
 * --every-dtype adds one tensor per dtype of the format ("dtype.NAME");
 * --metadata adds safetensors __metadata__ pairs; --split N writes a GGUF
 * model as N gguf-split shards FILE-0000k-of-0000N.gguf (see usage()).
 *
 * Normal mode: the tensor names and shapes of a small Llama-style
 * transformer (Hugging Face names for safetensors, llama.cpp names for GGUF);
 * the hidden size and vocabulary are picked from --size, then layers are added
 * until the file holds at least --size bytes. Several dtypes per file.
 *
 * --edge: a small file (< 4 MiB) made of edge cases a parser must get right:
 * zero-size tensors, scalars, odd shapes, every dtype, names with escapes and
 * non-ASCII, a data section that starts at an odd offset (safetensors) or a
 * non-default alignment (GGUF), a header order that differs from the data
 * order, hundreds of small tensors and one tensor of several MiB.
 *
 * Data bytes are a function of (seed, absolute file offset) only, so every
 * tensor has distinct content and a reader can regenerate any range:
 *   default: every 8-byte word at file offset 8k is splitmix64(seed, k)
 *            (incompressible, like real weights; ~GB/s per core);
 *   --compressible: every 512-byte sector of the file starts with the 8
 *            bytes of splitmix64(seed ^ 0x5ec7042, sector), the rest is a
 *            ramp (seed + 7 * offset); a misplaced sector is still caught,
 *            and zstd shrinks the file ~60x (used for the committed
 *            fixtures).
 * GGUF padding is zero, as ggml writes it.
 *
 * --manifest FILE: one line per tensor, in header order:
 *   name TAB dtype TAB shape (comma separated, empty for a scalar) TAB
 *   absolute offset TAB bytes
 * Exit status: 0 ok, 1 error, 2 usage.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* the build defines it too; plain gcc builds do not */
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* the writer's out-of-memory exit goes through die(), for this tool's message */
static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
#define BB_OOM(bytes) die("out of memory (%zu bytes)", (size_t)(bytes))
#include "model_writer.h" /* safetensors and GGUF bytes, shared with the tests */

#define MAX_DIMS 8
#define CHUNK (8u << 20) /* write unit: big enough to run at disk speed */

enum fmt { FMT_ST = 1, FMT_GGUF = 2 };

struct tensor {
	char *name;      /* decoded (UTF-8), as a reader reports it */
	char *json_name; /* safetensors: as written between the quotes (may hold escapes) */
	const char *dtype;
	uint32_t ggml_type;
	uint32_t ndim;
	uint64_t shape[MAX_DIMS]; /* safetensors: outermost first; GGUF: ne[0] first */
	uint64_t bytes;
	uint64_t offset;   /* absolute, in the file */
	size_t data_order; /* safetensors: position in the data section */
};

struct model {
	enum fmt fmt;
	struct tensor *t;
	size_t n, cap;
	int edge;
	/* normal-mode shape parameters, echoed into the metadata */
	uint64_t hidden, vocab, ffn, kv, layers;
	uint32_t alignment; /* GGUF */
	/* safetensors --metadata pairs: meta[2i] = key, meta[2i + 1] = value */
	const char **meta;
	size_t n_meta;
	/* GGUF --split: this shard's number (0-based), the shard count (0: not
	 * split) and the tensors of the whole model */
	unsigned split_no, split_count;
	uint64_t split_tensors;
};

static const char *prog = "gpunvme-mkmodel";

/* "gpunvme-mkmodel: MESSAGE" on stderr */
static void vsay(const char *fmt, va_list ap)
{
	fprintf(stderr, "%s: ", prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsay(fmt, ap);
	va_end(ap);
	exit(1);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		die("out of memory (%zu bytes)", n);
	return p;
}

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		die("out of memory (%zu bytes)", n);
	return p;
}

static char *xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	return memcpy(xmalloc(n), s, n);
}

/* ---- data generator --------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
	/* splitmix64's finaliser: a bijection, so distinct words never collide */
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t word_at(uint64_t seed, uint64_t k)
{
	return mix64(seed * 0xd1342543de82ef95ull + k);
}

/* Bytes [off, off+len) of the file's data stream. */
static void gen(uint64_t seed, int compressible, uint64_t off, uint8_t *out, size_t len)
{
	size_t i = 0;
	if (!compressible) {
		/* unaligned head, whole little-endian words, tail */
		while (i < len && ((off + i) & 7)) {
			uint64_t o = off + i;
			out[i++] = (uint8_t)(word_at(seed, o >> 3) >> (8 * (o & 7)));
		}
		/* the hot loop: one splitmix64 and one 8-byte store per word
		 * (memcpy of a little-endian word; byte-swapped on big-endian) */
		uint64_t k = (off + i) >> 3, base = seed * 0xd1342543de82ef95ull;
		for (; i + 8 <= len; i += 8, k++) {
			uint64_t w = mix64(base + k);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
			w = __builtin_bswap64(w);
#endif
			memcpy(out + i, &w, 8);
		}
		for (; i < len; i++) {
			uint64_t o = off + i;
			out[i] = (uint8_t)(word_at(seed, o >> 3) >> (8 * (o & 7)));
		}
		return;
	}
	for (; i < len; i++) {
		uint64_t o = off + i;
		unsigned w = (unsigned)(o & 511);
		if (w < 8)
			out[i] = (uint8_t)(word_at(seed ^ 0x5ec7042ull, o >> 9) >> (8 * w));
		else
			out[i] = (uint8_t)(seed + o * 7);
	}
}

/* ---- dtypes ------------------------------------------------------------------ */

struct st_dtype {
	const char *name;
	unsigned bits;
};
/* every safetensors dtype, with the bit width of the reference's
 * Dtype::bitsize() (safetensors/src/tensor.rs); the sub-byte ones (F4,
 * F6_*) only with element counts that make whole bytes */
static const struct st_dtype st_dtypes[] = {
	{ "BOOL", 8 },  { "U8", 8 },   { "I8", 8 },   { "F8_E4M3", 8 }, { "F8_E5M2", 8 }, { "F8_E8M0", 8 },
	{ "F8_E4M3FNUZ", 8 }, { "F8_E5M2FNUZ", 8 }, { "F4", 4 },   { "F6_E2M3", 6 }, { "F6_E3M2", 6 },
	{ "I16", 16 },  { "U16", 16 }, { "F16", 16 }, { "BF16", 16 }, { "I32", 32 },  { "U32", 32 },
	{ "F32", 32 },  { "F64", 64 }, { "I64", 64 }, { "U64", 64 }, { "C64", 64 },
};

static unsigned st_bits(const char *dt)
{
	for (size_t i = 0; i < sizeof(st_dtypes) / sizeof(st_dtypes[0]); i++)
		if (!strcmp(st_dtypes[i].name, dt))
			return st_dtypes[i].bits;
	die("internal: unknown safetensors dtype %s", dt);
	return 0;
}

/*
 * ggml types: enum value (the GGUF on-disk id), elements per block, bytes per
 * block. From ggml.h's enum ggml_type and the block structs of
 * ggml-common.h (QK4_0 = QK8_0 = 32, QK_K = 256):
 *   Q4_0 = half d + 16 nibble bytes = 18; Q4_1 = 2 halves + 16 = 20;
 *   Q5_0 = half + 4 (qh) + 16 = 22;  Q5_1 = 2 halves + 4 + 16 = 24;
 *   Q8_0 = half + 32 = 34;           Q8_1 = 2 halves + 32 = 36;
 *   Q2_K = 16 scales + 64 qs + 2 halves = 84;
 *   Q3_K = 32 hmask + 64 qs + 12 scales + half = 110;
 *   Q4_K = 2 halves + 12 scales + 128 qs = 144;
 *   Q5_K = 2 halves + 12 scales + 32 qh + 128 qs = 176;
 *   Q6_K = 128 ql + 64 qh + 16 scales + half = 210;
 *   Q8_K = float + 256 qs + 16 int16 bsums = 292.
 * Ids 4 and 5 (Q4_2, Q4_3) were removed from ggml; ggml refuses a row whose
 * ne[0] is not a multiple of the block size.
 */
struct ggml_type_info {
	const char *name;
	uint32_t id;
	unsigned blck, size;
};
static const struct ggml_type_info ggml_types[] = {
	{ "F32", 0, 1, 4 },       { "F16", 1, 1, 2 },       { "Q4_0", 2, 32, 18 },
	{ "Q4_1", 3, 32, 20 },    { "Q5_0", 6, 32, 22 },    { "Q5_1", 7, 32, 24 },
	{ "Q8_0", 8, 32, 34 },    { "Q8_1", 9, 32, 36 },    { "Q2_K", 10, 256, 84 },
	{ "Q3_K", 11, 256, 110 }, { "Q4_K", 12, 256, 144 }, { "Q5_K", 13, 256, 176 },
	{ "Q6_K", 14, 256, 210 }, { "Q8_K", 15, 256, 292 }, { "I8", 24, 1, 1 },
	{ "I16", 25, 1, 2 },      { "I32", 26, 1, 4 },      { "I64", 27, 1, 8 },
	{ "F64", 28, 1, 8 },      { "BF16", 30, 1, 2 },
	/* the i-quants, ternary and FP4 types: ggml.c type_traits and
	 * gguf-py GGML_QUANT_SIZES; NVFP4, Q1_0 and Q2_0 from the llama.cpp
	 * pull requests that added them (#19769, #21273, #24448), see
	 * src/loader/gguf.c */
	{ "IQ2_XXS", 16, 256, 66 }, { "IQ2_XS", 17, 256, 74 }, { "IQ3_XXS", 18, 256, 98 },
	{ "IQ1_S", 19, 256, 50 },   { "IQ4_NL", 20, 32, 18 },  { "IQ3_S", 21, 256, 110 },
	{ "IQ2_S", 22, 256, 82 },   { "IQ4_XS", 23, 256, 136 }, { "IQ1_M", 29, 256, 56 },
	{ "TQ1_0", 34, 256, 54 },   { "TQ2_0", 35, 256, 66 },  { "MXFP4", 39, 32, 17 },
	{ "NVFP4", 40, 64, 36 },    { "Q1_0", 41, 128, 18 },   { "Q2_0", 42, 64, 18 },
};

static const struct ggml_type_info *ggml_info(const char *dt)
{
	for (size_t i = 0; i < sizeof(ggml_types) / sizeof(ggml_types[0]); i++)
		if (!strcmp(ggml_types[i].name, dt))
			return &ggml_types[i];
	die("internal: unknown ggml type %s", dt);
	return NULL;
}

/* ---- tensor list ------------------------------------------------------------- */

static struct tensor *add_v(struct model *m, const char *name, const char *json_name, const char *dtype,
			    uint32_t ndim, const uint64_t *shape)
{
	if (m->n == m->cap) {
		m->cap = m->cap ? 2 * m->cap : 64;
		m->t = xrealloc(m->t, m->cap * sizeof(*m->t));
	}
	struct tensor *t = &m->t[m->n];
	memset(t, 0, sizeof(*t));
	t->name = xstrdup(name);
	t->json_name = xstrdup(json_name ? json_name : name);
	t->dtype = dtype;
	t->ndim = ndim;
	t->data_order = m->n;
	uint64_t elems = 1;
	for (uint32_t i = 0; i < ndim; i++) {
		t->shape[i] = shape[i];
		elems *= shape[i];
	}
	if (m->fmt == FMT_ST) {
		unsigned bits = st_bits(dtype);
		if (elems * bits % 8)
			die("internal: %s: %" PRIu64 " elements of %s are not whole bytes", name, elems, dtype);
		t->bytes = elems * bits / 8;
	} else {
		const struct ggml_type_info *g = ggml_info(dtype);
		if (ndim == 0 || shape[0] % g->blck)
			die("internal: %s: ne[0]=%" PRIu64 " is not a multiple of the %s block (%u)", name,
			    ndim ? shape[0] : 0, dtype, g->blck);
		t->ggml_type = g->id;
		t->bytes = elems / g->blck * g->size;
	}
	m->n++;
	return t;
}

/* add(m, name, dtype, ndim, d0, d1, ...) */
static struct tensor *add(struct model *m, const char *name, const char *dtype, uint32_t ndim, ...)
{
	uint64_t shape[MAX_DIMS];
	va_list ap;
	va_start(ap, ndim);
	for (uint32_t i = 0; i < ndim; i++)
		shape[i] = va_arg(ap, uint64_t);
	va_end(ap);
	return add_v(m, name, NULL, dtype, ndim, shape);
}

#define U(x) ((uint64_t)(x))

static void free_tensors(struct model *m)
{
	for (size_t i = 0; i < m->n; i++) {
		free(m->t[i].name);
		free(m->t[i].json_name);
	}
	free(m->t);
	m->t = NULL;
	m->n = m->cap = 0;
}

/* ---- normal mode: a small transformer ----------------------------------------- */

static void build_normal(struct model *m, uint64_t h, uint64_t vocab, uint64_t layers)
{
	char n[256];
	free_tensors(m);
	m->hidden = h;
	m->vocab = vocab;
	m->kv = h / 4;                               /* grouped-query attention, 4 q heads per kv head */
	m->ffn = (h * 8 / 3 + 255) / 256 * 256;      /* SwiGLU width, a multiple of the K-quant block */
	m->layers = layers;
	if (m->fmt == FMT_ST) {
		add(m, "model.embed_tokens.weight", "BF16", 2, U(vocab), U(h));
		add(m, "model.rotary_emb.inv_freq", "F64", 1, U(32));
		add(m, "model.position_ids", "I64", 2, U(1), U(256));
		for (uint64_t l = 0; l < layers; l++) {
#define L(s) (snprintf(n, sizeof(n), "model.layers.%" PRIu64 ".%s", l, s), n)
			add(m, L("input_layernorm.weight"), "F32", 1, U(h));
			add(m, L("self_attn.q_proj.weight"), "F16", 2, U(h), U(h));
			add(m, L("self_attn.k_proj.weight"), "F16", 2, U(m->kv), U(h));
			add(m, L("self_attn.v_proj.weight"), "F16", 2, U(m->kv), U(h));
			add(m, L("self_attn.o_proj.weight"), "F16", 2, U(h), U(h));
			add(m, L("post_attention_layernorm.weight"), "F32", 1, U(h));
			add(m, L("mlp.gate_proj.weight"), "BF16", 2, U(m->ffn), U(h));
			/* FP8 and int8 weights with their scales, as quantised
			 * checkpoints store them */
			add(m, L("mlp.up_proj.weight"), "F8_E4M3", 2, U(m->ffn), U(h));
			add(m, L("mlp.up_proj.weight_scale"), "F32", 1, U(1));
			add(m, L("mlp.down_proj.weight"), "I8", 2, U(h), U(m->ffn));
			add(m, L("mlp.down_proj.weight_scale"), "F32", 1, U(h));
			add(m, L("mlp.down_proj.zero_point"), "U8", 1, U(h));
#undef L
		}
		add(m, "model.norm.weight", "F32", 1, U(h));
		add(m, "lm_head.weight", "F16", 2, U(vocab), U(h));
	} else {
		add(m, "token_embd.weight", "Q4_K", 2, U(h), U(vocab));
		add(m, "rope_freqs.weight", "F32", 1, U(32));
		for (uint64_t l = 0; l < layers; l++) {
#define L(s) (snprintf(n, sizeof(n), "blk.%" PRIu64 ".%s", l, s), n)
			add(m, L("attn_norm.weight"), "F32", 1, U(h));
			add(m, L("attn_q.weight"), "Q4_K", 2, U(h), U(h));
			add(m, L("attn_k.weight"), "Q4_K", 2, U(h), U(m->kv));
			add(m, L("attn_v.weight"), "Q6_K", 2, U(h), U(m->kv));
			add(m, L("attn_output.weight"), "Q4_0", 2, U(h), U(h));
			add(m, L("ffn_norm.weight"), "F32", 1, U(h));
			add(m, L("ffn_gate.weight"), "Q8_0", 2, U(h), U(m->ffn));
			add(m, L("ffn_up.weight"), "F16", 2, U(h), U(m->ffn));
			add(m, L("ffn_down.weight"), "BF16", 2, U(m->ffn), U(h));
#undef L
		}
		add(m, "output_norm.weight", "F32", 1, U(h));
		add(m, "output.weight", "Q6_K", 2, U(h), U(vocab));
	}
}

/* ---- edge mode --------------------------------------------------------------- */

static void build_edge_st(struct model *m)
{
	char n[320];
	/* deliberately not in data order: the header lists them like this, the
	 * data section holds them permuted (see layout_st) */
	add(m, "edge.scalar", "F32", 0);
	add(m, "edge.empty", "F16", 1, U(0));
	add(m, "edge.empty_2d", "F32", 2, U(4), U(0));
	add(m, "edge.one", "BF16", 1, U(1));
	add(m, "edge.odd_7x13x3", "F16", 3, U(7), U(13), U(3));
	add(m, "edge.five_dims", "F32", 5, U(2), U(1), U(3), U(1), U(2));
	add(m, "edge.bool", "BOOL", 2, U(5), U(3));
	add(m, "edge.u8", "U8", 1, U(17));
	add(m, "edge.i8", "I8", 2, U(3), U(11));
	add(m, "edge.f8_e4m3", "F8_E4M3", 2, U(9), U(7));
	add(m, "edge.f8_e5m2", "F8_E5M2", 1, U(13));
	add(m, "edge.i16", "I16", 2, U(5), U(5));
	add(m, "edge.u16", "U16", 1, U(3));
	add(m, "edge.i32", "I32", 3, U(2), U(3), U(5));
	add(m, "edge.u32", "U32", 1, U(7));
	add(m, "edge.i64", "I64", 1, U(3));
	add(m, "edge.u64", "U64", 1, U(2));
	add(m, "edge.f64", "F64", 2, U(3), U(3));
	/* names: raw UTF-8, JSON escapes (\u00fc, \", \\, \/), a long one */
	uint64_t s3[1] = { 3 };
	add_v(m, "edge.caf\xc3\xa9.weight", NULL, "F32", 1, s3);
	add_v(m, "edge.\xc3\xbc\x62\x65r \"quoted\" back\\slash/sep", "edge.\\u00fcber \\\"quoted\\\" back\\\\slash\\/sep",
	      "I16", 1, s3);
	memset(n, 'x', 200);
	memcpy(n, "edge.long_name.", 15);
	n[200] = 0;
	add(m, n, "U8", 1, U(5));
	/* one tensor of 3 MiB: crosses many extents of a fragmented file */
	add(m, "edge.big", "F16", 2, U(1536), U(1024));
	/* many small tensors of rotating dtypes and sizes 0..~300 bytes */
	static const char *small_dt[] = { "F16", "BF16", "F32", "I8", "U8", "BOOL", "I32", "F64", "F8_E4M3", "U16" };
	for (unsigned i = 0; i < 240; i++) {
		const char *dt = small_dt[i % (sizeof(small_dt) / sizeof(small_dt[0]))];
		uint64_t e = (i * 37u) % 61u; /* 0..60 elements; a few zero-size */
		snprintf(n, sizeof(n), "edge.small.%03u", i);
		if (i % 3 == 0)
			add(m, n, dt, 1, e);
		else
			add(m, n, dt, 2, U(1 + i % 4), e);
	}
	add(m, "edge.empty_last", "I64", 1, U(0));
}

static void build_edge_gguf(struct model *m)
{
	char n[128];
	add(m, "edge.empty", "F32", 1, U(0)); /* zero bytes: same offset as the next one */
	add(m, "edge.one", "F32", 1, U(1));
	add(m, "edge.one_f16", "F16", 1, U(1));
	add(m, "edge.odd_7x13x3", "F32", 3, U(7), U(13), U(3));
	add(m, "edge.four_dims", "F16", 4, U(2), U(3), U(4), U(5));
	add(m, "edge.bf16", "BF16", 2, U(5), U(3));
	add(m, "edge.q4_0", "Q4_0", 2, U(32), U(3));
	add(m, "edge.q4_1", "Q4_1", 2, U(64), U(2));
	add(m, "edge.q5_0", "Q5_0", 1, U(32));
	add(m, "edge.q5_1", "Q5_1", 2, U(32), U(2));
	add(m, "edge.q8_0", "Q8_0", 2, U(96), U(5));
	add(m, "edge.q2_k", "Q2_K", 1, U(256));
	add(m, "edge.q3_k", "Q3_K", 2, U(256), U(2));
	add(m, "edge.q4_k", "Q4_K", 2, U(512), U(3));
	add(m, "edge.q5_k", "Q5_K", 1, U(256));
	add(m, "edge.q6_k", "Q6_K", 2, U(256), U(7));
	add(m, "edge.i8", "I8", 1, U(13));
	add(m, "edge.i16", "I16", 1, U(3));
	add(m, "edge.i32", "I32", 2, U(7), U(1));
	add(m, "edge.i64", "I64", 1, U(2));
	add(m, "edge.f64", "F64", 1, U(3));
	add(m, "edge.caf\xc3\xa9", "F32", 1, U(3));
	/* GGML_MAX_NAME is 64 with the NUL: 63 bytes is the longest name */
	memset(n, 'y', 63);
	memcpy(n, "edge.long.", 10);
	n[63] = 0;
	add(m, n, "F16", 1, U(5));
	add(m, "edge.big", "Q8_0", 2, U(4096), U(768)); /* 3.2 MiB */
	static const char *small_dt[] = { "F32", "F16", "BF16", "Q8_0", "Q4_0", "I8", "I32", "F64" };
	for (unsigned i = 0; i < 160; i++) {
		const char *dt = small_dt[i % (sizeof(small_dt) / sizeof(small_dt[0]))];
		const struct ggml_type_info *g = ggml_info(dt);
		uint64_t ne0 = g->blck > 1 ? g->blck * (1 + i % 3) : 1 + (i * 37u) % 41u;
		snprintf(n, sizeof(n), "edge.small.%03u", i);
		if (i % 4 == 0)
			add(m, n, dt, 1, ne0);
		else
			add(m, n, dt, 2, ne0, U(1 + i % 5));
	}
	add(m, "edge.last_odd", "F16", 1, U(3)); /* the file ends with padding */
}

/* --every-dtype: one small tensor "dtype.NAME" per dtype of the format,
 * after the others: safetensors [4, 6] (whole bytes for the 4- and 6-bit
 * types too), GGUF ne = [2 blocks, 3] */
static void add_every_dtype(struct model *m)
{
	char n[64];
	if (m->fmt == FMT_ST) {
		for (size_t i = 0; i < sizeof(st_dtypes) / sizeof(st_dtypes[0]); i++) {
			snprintf(n, sizeof(n), "dtype.%s", st_dtypes[i].name);
			add(m, n, st_dtypes[i].name, 2, U(4), U(6));
		}
		return;
	}
	for (size_t i = 0; i < sizeof(ggml_types) / sizeof(ggml_types[0]); i++) {
		snprintf(n, sizeof(n), "dtype.%s", ggml_types[i].name);
		add(m, n, ggml_types[i].name, 2, U(2 * ggml_types[i].blck), U(3));
	}
}

/* ---- safetensors writer ---------------------------------------------------------- */

/* The __metadata__ pairs: the mode's `nd` defaults, then the --metadata
 * pairs, one with a default's key replacing its value. A new array of
 * 2 * count pointers (free it; the strings are not copied). */
static const char **meta_pairs(const struct model *m, const char *const *defaults, size_t nd, size_t *count)
{
	const char **kv = xmalloc(2 * (nd + m->n_meta) * sizeof(*kv));
	size_t n = nd;
	memcpy(kv, defaults, 2 * nd * sizeof(*kv));
	for (size_t i = 0; i < m->n_meta; i++) {
		size_t j = 0;
		while (j < n && strcmp(kv[2 * j], m->meta[2 * i]))
			j++;
		kv[2 * j] = m->meta[2 * i];
		kv[2 * j + 1] = m->meta[2 * i + 1];
		if (j == n)
			n++;
	}
	*count = n;
	return kv;
}

/* Edge mode's data order: a fixed pseudo-random permutation of the header
 * order, with the zero-size "edge.empty" (header entry 1) at data offset 0
 * and "edge.empty_last" (the last entry) at the very end of the data. */
static void edge_permute(struct model *m)
{
	size_t n = m->n, k = 0, first = 1, last = n - 1;
	size_t *perm = xmalloc(n * sizeof(*perm));
	perm[k++] = first;
	for (size_t i = 0; i < n; i++)
		if (i != first && i != last)
			perm[k++] = i;
	perm[k++] = last;
	/* Fisher-Yates over positions 1..n-2 */
	for (size_t i = n - 2, r = 0; i > 1; i--, r++) {
		size_t j = 1 + (size_t)(word_at(42, r) % i);
		size_t x = perm[i];
		perm[i] = perm[j];
		perm[j] = x;
	}
	for (size_t pos = 0; pos < n; pos++)
		m->t[perm[pos]].data_order = pos;
	free(perm);
}

/* Build the header (length prefix included); sets every tensor's offset. */
static void layout_st(struct model *m, struct bb *hdr)
{
	/* relative data offsets, in data order */
	size_t *by_pos = xmalloc(m->n * sizeof(*by_pos));
	for (size_t i = 0; i < m->n; i++)
		by_pos[i] = (size_t)-1;
	for (size_t i = 0; i < m->n; i++) {
		if (m->t[i].data_order >= m->n || by_pos[m->t[i].data_order] != (size_t)-1)
			die("internal: data order is not a permutation");
		by_pos[m->t[i].data_order] = i;
	}
	uint64_t *rel = xmalloc(m->n * sizeof(*rel));
	uint64_t off = 0;
	for (size_t p = 0; p < m->n; p++) {
		rel[by_pos[p]] = off;
		off += m->t[by_pos[p]].bytes;
	}
	free(by_pos);

	struct st_writer w;
	st_begin(&w);
	size_t nkv = 0;
	const char **kv = NULL;
	if (!m->edge) {
		char hidden[24], layers[24];
		snprintf(hidden, sizeof(hidden), "%" PRIu64, m->hidden);
		snprintf(layers, sizeof(layers), "%" PRIu64, m->layers);
		const char *const defaults[] = { "format", "pt", "generator", "gpunvme-mkmodel",
						 "hidden_size", hidden, "num_hidden_layers", layers };
		kv = meta_pairs(m, defaults, 4, &nkv);
		st_metadata(&w, kv, nkv);
	} else if (m->n_meta) {
		/* the edge defaults as the raw member below decodes them */
		const char *const defaults[] = { "format", "pt", "note", "edge \"cases\" \\ \xc3\xa9 \n", "empty", "" };
		kv = meta_pairs(m, defaults, 3, &nkv);
	}
	for (size_t i = 0; i < m->n; i++) {
		const struct tensor *t = &m->t[i];
		/* edge: __metadata__ in the middle of the object, with escapes
		 * (written by the structured writer when --metadata adds pairs) */
		if (m->edge && i == 7 && kv)
			st_metadata(&w, kv, nkv);
		else if (m->edge && i == 7)
			st_raw_member(&w, "\"__metadata__\":{\"format\":\"pt\",\"note\":\"edge \\\"cases\\\" \\\\ \\u00e9 \\n\","
					  "\"empty\":\"\"}");
		struct st_tensor e = {
			.name = t->name,
			/* edge names written with escapes a reader must decode */
			.raw_name = strcmp(t->json_name, t->name) ? t->json_name : NULL,
			.dtype = t->dtype,
			.ndim = t->ndim,
			.shape = t->shape,
			.begin = rel[i],
			.end = rel[i] + t->bytes,
			/* edge mode: whitespace between tokens, as some writers emit */
			.spaced = m->edge && i % 5 == 2,
		};
		st_tensor(&w, &e);
	}
	/* Trailing spaces (the format allows them): normal files start the data
	 * on an 8-byte boundary, as the reference writer does; edge files on an
	 * offset that is 5 mod 8 (neither 4- nor 8-byte aligned). */
	free(kv);
	hdr->n = 0;
	st_finish(&w, hdr, m->edge ? 5 : 0);
	for (size_t i = 0; i < m->n; i++)
		m->t[i].offset = hdr->n + rel[i];
	free(rel);
}

/* ---- GGUF writer ------------------------------------------------------------------ */

/* a metadata key and its value's type, counted */
static void g_key(struct bb *b, uint64_t *nkv, const char *k, enum gguf_type type)
{
	gguf_key(b, k, type);
	(*nkv)++;
}

static uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static uint64_t f64_bits(double f)
{
	uint64_t u;
	memcpy(&u, &f, 8);
	return u;
}

static void gguf_meta(struct model *m, struct bb *kv, uint64_t *nkv)
{
	char s[64];
	g_key(kv, nkv, "general.architecture", GGUF_STR);
	gguf_str(kv, "llama");
	g_key(kv, nkv, "general.name", GGUF_STR);
	gguf_str(kv, m->edge ? "gpunvme-mkmodel edge cases" : "gpunvme-mkmodel synthetic llama");
	g_key(kv, nkv, "general.alignment", GGUF_U32);
	bb_u32(kv, m->alignment);
	if (!m->edge) {
		g_key(kv, nkv, "general.file_type", GGUF_U32);
		bb_u32(kv, 15); /* LLAMA_FTYPE_MOSTLY_Q4_K_M */
		g_key(kv, nkv, "llama.context_length", GGUF_U32);
		bb_u32(kv, 4096);
		g_key(kv, nkv, "llama.embedding_length", GGUF_U32);
		bb_u32(kv, (uint32_t)m->hidden);
		g_key(kv, nkv, "llama.block_count", GGUF_U32);
		bb_u32(kv, (uint32_t)m->layers);
		g_key(kv, nkv, "llama.feed_forward_length", GGUF_U32);
		bb_u32(kv, (uint32_t)m->ffn);
		g_key(kv, nkv, "llama.attention.head_count", GGUF_U32);
		bb_u32(kv, (uint32_t)(m->hidden / 64));
		g_key(kv, nkv, "llama.attention.head_count_kv", GGUF_U32);
		bb_u32(kv, (uint32_t)(m->kv / 64));
		g_key(kv, nkv, "llama.rope.freq_base", GGUF_F32);
		bb_u32(kv, f32_bits(10000.0f));
		g_key(kv, nkv, "llama.attention.layer_norm_rms_epsilon", GGUF_F32);
		bb_u32(kv, f32_bits(1e-5f));
		g_key(kv, nkv, "tokenizer.ggml.model", GGUF_STR);
		gguf_str(kv, "llama");
		/* the vocabulary arrays: the bulk of a real GGUF header */
		g_key(kv, nkv, "tokenizer.ggml.tokens", GGUF_ARR);
		gguf_arr(kv, GGUF_STR, m->vocab);
		for (uint64_t i = 0; i < m->vocab; i++) {
			snprintf(s, sizeof(s), "<tok_%" PRIu64 ">", i);
			gguf_str(kv, s);
		}
		g_key(kv, nkv, "tokenizer.ggml.scores", GGUF_ARR);
		gguf_arr(kv, GGUF_F32, m->vocab);
		for (uint64_t i = 0; i < m->vocab; i++)
			bb_u32(kv, f32_bits(-(float)i));
		g_key(kv, nkv, "tokenizer.ggml.token_type", GGUF_ARR);
		gguf_arr(kv, GGUF_I32, m->vocab);
		for (uint64_t i = 0; i < m->vocab; i++)
			bb_u32(kv, i < 3 ? 3 : 1);
		g_key(kv, nkv, "tokenizer.ggml.bos_token_id", GGUF_U32);
		bb_u32(kv, 1);
		return;
	}
	/* edge: every value type, empty string and array, nested arrays */
	g_key(kv, nkv, "edge.u8", GGUF_U8);
	bb_put(kv, "\xfe", 1);
	g_key(kv, nkv, "edge.i8", GGUF_I8);
	bb_put(kv, "\x80", 1);
	g_key(kv, nkv, "edge.u16", GGUF_U16);
	bb_put(kv, "\x34\x12", 2);
	g_key(kv, nkv, "edge.i16", GGUF_I16);
	bb_put(kv, "\xff\xff", 2);
	g_key(kv, nkv, "edge.u32", GGUF_U32);
	bb_u32(kv, 0xdeadbeef);
	g_key(kv, nkv, "edge.i32", GGUF_I32);
	bb_u32(kv, (uint32_t)-7);
	g_key(kv, nkv, "edge.f32", GGUF_F32);
	bb_u32(kv, f32_bits(3.5f));
	g_key(kv, nkv, "edge.bool", GGUF_BOOL);
	bb_put(kv, "\x01", 1);
	g_key(kv, nkv, "edge.u64", GGUF_U64);
	bb_u64(kv, UINT64_MAX);
	g_key(kv, nkv, "edge.i64", GGUF_I64);
	bb_u64(kv, (uint64_t)INT64_MIN);
	g_key(kv, nkv, "edge.f64", GGUF_F64);
	bb_u64(kv, f64_bits(-0.25));
	g_key(kv, nkv, "edge.empty_string", GGUF_STR);
	gguf_str(kv, "");
	g_key(kv, nkv, "edge.utf8_string", GGUF_STR);
	gguf_str(kv, "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac");
	g_key(kv, nkv, "edge.empty_array", GGUF_ARR);
	gguf_arr(kv, GGUF_I32, 0);
	g_key(kv, nkv, "edge.bool_array", GGUF_ARR);
	gguf_arr(kv, GGUF_BOOL, 3);
	bb_put(kv, "\x01\x00\x01", 3);
	g_key(kv, nkv, "edge.u8_array", GGUF_ARR); /* odd length: the next key is unaligned */
	gguf_arr(kv, GGUF_U8, 5);
	bb_put(kv, "\x01\x02\x03\x04\x05", 5);
	g_key(kv, nkv, "edge.nested_array", GGUF_ARR);
	gguf_arr(kv, GGUF_ARR, 2);
	gguf_arr(kv, GGUF_U16, 1);
	bb_put(kv, "\x01\x00", 2);
	gguf_arr(kv, GGUF_STR, 2);
	gguf_str(kv, "a");
	gguf_str(kv, "");
	g_key(kv, nkv, "tokenizer.ggml.tokens", GGUF_ARR);
	gguf_arr(kv, GGUF_STR, 300);
	for (int i = 0; i < 300; i++) {
		snprintf(s, sizeof(s), "<%d>", i);
		gguf_str(kv, s);
	}
}

static void layout_gguf(struct model *m, struct bb *hdr)
{
	struct bb kv = { 0 }, ti = { 0 };
	uint64_t nkv = 0;
	/* gguf-split: the model's metadata in the first shard only, then the
	 * split keys in every shard (model_writer.h gguf_split_kv) */
	if (!m->split_count || m->split_no == 0)
		gguf_meta(m, &kv, &nkv);
	if (m->split_count) {
		gguf_split_kv(&kv, (uint16_t)m->split_no, (uint16_t)m->split_count, (int32_t)m->split_tensors);
		nkv += 3;
	}
	/* tensor infos: offsets relative to the data section */
	uint64_t rel = 0;
	uint64_t *rels = xmalloc(m->n * sizeof(*rels));
	for (size_t i = 0; i < m->n; i++) {
		struct tensor *t = &m->t[i];
		gguf_tensor_info(&ti, t->name, t->ndim, t->shape, t->ggml_type, rel);
		rels[i] = rel;
		rel = gguf_next_offset(rel, t->bytes, m->alignment);
	}
	hdr->n = 0;
	gguf_head(hdr, 3, m->n, nkv);
	bb_put(hdr, kv.p, kv.n);
	bb_put(hdr, ti.p, ti.n);
	free(kv.p);
	free(ti.p);
	bb_align(hdr, m->alignment);
	for (size_t i = 0; i < m->n; i++)
		m->t[i].offset = hdr->n + rels[i];
	free(rels);
}

static uint64_t layout(struct model *m, struct bb *hdr)
{
	if (m->fmt == FMT_ST)
		layout_st(m, hdr);
	else
		layout_gguf(m, hdr);
	uint64_t end = hdr->n;
	for (size_t i = 0; i < m->n; i++) {
		uint64_t e = m->t[i].offset + m->t[i].bytes;
		if (m->fmt == FMT_GGUF) /* the file ends with the last tensor's padding */
			e = hdr->n + gguf_next_offset(m->t[i].offset - hdr->n, m->t[i].bytes, m->alignment);
		if (e > end)
			end = e;
	}
	return end;
}

/* ---- sizing ---------------------------------------------------------------------- */

static uint64_t plan_size(struct model *m, uint64_t h, uint64_t vocab, uint64_t layers)
{
	struct bb hdr = { 0 };
	build_normal(m, h, vocab, layers);
	uint64_t s = layout(m, &hdr);
	free(hdr.p);
	return s;
}

/* Largest hidden size that still gets 4 layers into `target`, then as many
 * layers as needed to reach it. Below the smallest such model the
 * vocabulary shrinks; the file is never smaller than `target` unless even
 * one layer of the smallest model is bigger (then it is that model). */
static void plan(struct model *m, uint64_t target)
{
	static const uint64_t hs[] = { 4096, 2048, 1024, 512, 256 };
	uint64_t h = 256, vocab = 0;
	for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++) {
		uint64_t v = hs[i] * 16 < 32000 ? hs[i] * 16 : 32000;
		if (plan_size(m, hs[i], v, 4) <= target) {
			h = hs[i];
			vocab = v;
			break;
		}
	}
	if (!vocab) {
		vocab = 256;
		for (uint64_t v = 2048; v > 256; v /= 2)
			if (plan_size(m, 256, v, 1) <= target) {
				vocab = v;
				break;
			}
	}
	uint64_t s1 = plan_size(m, h, vocab, 1), s2 = plan_size(m, h, vocab, 2);
	uint64_t per = s2 - s1, layers = 1;
	if (target > s1)
		layers = 1 + (target - s1 + per - 1) / per;
	/* the header grows a little per layer: step up until it fits */
	while (plan_size(m, h, vocab, layers) < target)
		layers++;
	build_normal(m, h, vocab, layers);
}

/* ---- output --------------------------------------------------------------------- */

static void write_all(int fd, const uint8_t *p, size_t n, const char *path)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			die("write %s: %s", path, strerror(errno));
		}
		p += w;
		n -= (size_t)w;
	}
}

static int cmp_offset(const void *a, const void *b)
{
	const struct tensor *x = *(const struct tensor *const *)a, *y = *(const struct tensor *const *)b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static void write_model(struct model *m, const struct bb *hdr, uint64_t total, uint64_t seed, int compressible,
			const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		die("%s: %s", path, strerror(errno));
	write_all(fd, hdr->p, hdr->n, path);
	/* everything after the header in file order: tensor data from the
	 * generator, gaps (GGUF alignment padding) as zeros */
	struct tensor **by_off = xmalloc(m->n * sizeof(*by_off));
	for (size_t i = 0; i < m->n; i++)
		by_off[i] = &m->t[i];
	qsort(by_off, m->n, sizeof(*by_off), cmp_offset);
	uint8_t *chunk = xmalloc(CHUNK);
	uint64_t pos = hdr->n;
	size_t k = 0;
	while (pos < total) {
		size_t len = total - pos < CHUNK ? (size_t)(total - pos) : CHUNK;
		memset(chunk, 0, len);
		/* tensors overlapping [pos, pos+len) */
		while (k < m->n && by_off[k]->offset + by_off[k]->bytes <= pos)
			k++;
		for (size_t i = k; i < m->n && by_off[i]->offset < pos + len; i++) {
			uint64_t a = by_off[i]->offset > pos ? by_off[i]->offset : pos;
			uint64_t e = by_off[i]->offset + by_off[i]->bytes;
			if (e > pos + len)
				e = pos + len;
			if (e > a)
				gen(seed, compressible, a, chunk + (a - pos), (size_t)(e - a));
		}
		write_all(fd, chunk, len, path);
		pos += len;
	}
	free(chunk);
	free(by_off);
	if (close(fd))
		die("close %s: %s", path, strerror(errno));
}

/* shard >= 0: a sixth column, the shard number (0-based) of --split */
static void write_manifest(const struct model *m, const char *path, const char *mode, int shard)
{
	FILE *f = fopen(path, mode);
	if (!f)
		die("%s: %s", path, strerror(errno));
	for (size_t i = 0; i < m->n; i++) {
		const struct tensor *t = &m->t[i];
		fprintf(f, "%s\t%s\t", t->name, t->dtype);
		for (uint32_t d = 0; d < t->ndim; d++)
			fprintf(f, "%s%" PRIu64, d ? "," : "", t->shape[d]);
		fprintf(f, "\t%" PRIu64 "\t%" PRIu64, t->offset, t->bytes);
		if (shard >= 0)
			fprintf(f, "\t%d", shard);
		fputc('\n', f);
	}
	if (fclose(f))
		die("%s: %s", path, strerror(errno));
}

static void usage(FILE *f)
{
	fprintf(f, "usage: %s --format safetensors|gguf --size BYTES[K|M|G] [--seed N] [--edge]\n"
		   "       [--compressible] [--every-dtype] [--metadata KEY=VALUE]... [--split N]\n"
		   "       -o FILE [--manifest FILE]\n"
		   "  --size          at least this many bytes (normal mode; ignored with --edge)\n"
		   "  --seed          data seed (default 1)\n"
		   "  --edge          small file of parser edge cases\n"
		   "  --compressible  only 8 random bytes per 512-byte sector (small fixtures)\n"
		   "  --every-dtype   add one tensor \"dtype.NAME\" per dtype of the format (safetensors:\n"
		   "                  all 22 incl. F4/F6/F8_*FNUZ/C64, shape [4,6]; GGUF: every ggml\n"
		   "                  type incl. IQ*, TQ*, MXFP4, NVFP4, Q1_0, Q2_0, ne [2 blocks,3])\n"
		   "  --metadata K=V  safetensors only, repeatable: a __metadata__ string pair (added\n"
		   "                  after the defaults, in order; a default's key gets the new value)\n"
		   "  --split N       GGUF only: write N shards as llama.cpp's gguf-split does, named\n"
		   "                  FILE-00001-of-0000N.gguf ... (FILE: -o without a trailing .gguf);\n"
		   "                  tensors divided in order, shard k gets tensors [k*n/N, (k+1)*n/N);\n"
		   "                  split.no (u16), split.count (u16), split.tensors.count (i32) in\n"
		   "                  every shard, the other metadata in the first one only; N between\n"
		   "                  1 and the tensor count\n"
		   "  --manifest      name, dtype, shape, offset, bytes per tensor (tab separated);\n"
		   "                  with --split a sixth column, the shard (0-based), offsets in it\n",
		prog);
}

static void bad_usage(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void bad_usage(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsay(fmt, ap);
	va_end(ap);
	usage(stderr);
	exit(2);
}

/* BYTES[K|M|G] (binary multiples); 0 on a malformed or out-of-range value */
static uint64_t parse_size(const char *s)
{
	char *end;
	errno = 0;
	if (*s < '0' || *s > '9')
		return 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return 0;
	unsigned shift = 0;
	switch (*end) {
	case 0: break;
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: return 0;
	}
	if (*end == 'i' && shift)
		end++;
	if ((*end == 'B' || *end == 'b') && shift)
		end++;
	if (*end || v > (UINT64_MAX >> 20) >> shift) /* keep far from overflow */
		return 0;
	return (uint64_t)v << shift;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "format", required_argument, NULL, 'f' }, { "size", required_argument, NULL, 's' },
		{ "seed", required_argument, NULL, 'S' },   { "edge", no_argument, NULL, 'e' },
		{ "compressible", no_argument, NULL, 'c' }, { "output", required_argument, NULL, 'o' },
		{ "manifest", required_argument, NULL, 'm' }, { "help", no_argument, NULL, 'h' },
		{ "every-dtype", no_argument, NULL, 'E' }, { "metadata", required_argument, NULL, 'M' },
		{ "split", required_argument, NULL, 'P' }, { NULL, 0, NULL, 0 },
	};
	struct model m = { 0 };
	uint64_t size = 0, seed = 1;
	int edge = 0, compressible = 0, every = 0;
	unsigned nsplit = 0;
	const char *out = NULL, *manifest = NULL;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'f':
			if (!strcmp(optarg, "safetensors"))
				m.fmt = FMT_ST;
			else if (!strcmp(optarg, "gguf"))
				m.fmt = FMT_GGUF;
			else
				bad_usage("--format: '%s' is not safetensors or gguf", optarg);
			break;
		case 's':
			size = parse_size(optarg);
			if (!size)
				bad_usage("--size: '%s' is not a positive size (BYTES[K|M|G])", optarg);
			break;
		case 'S': {
			char *end;
			errno = 0;
			seed = strtoull(optarg, &end, 0);
			if (errno || !*optarg || *end || *optarg == '-')
				bad_usage("--seed: '%s' is not an unsigned number", optarg);
			break;
		}
		case 'E': every = 1; break;
		case 'M': {
			const char *eq = strchr(optarg, '=');
			if (!eq || eq == optarg)
				bad_usage("--metadata: '%s' is not KEY=VALUE", optarg);
			m.meta = xrealloc(m.meta, 2 * (m.n_meta + 1) * sizeof(*m.meta));
			char *k = xstrdup(optarg);
			k[eq - optarg] = 0;
			m.meta[2 * m.n_meta] = k;
			m.meta[2 * m.n_meta + 1] = k + (eq - optarg) + 1;
			m.n_meta++;
			break;
		}
		case 'P': {
			char *end;
			errno = 0;
			unsigned long v = strtoul(optarg, &end, 10);
			if (errno || *optarg < '1' || *optarg > '9' || *end || v > 65535)
				bad_usage("--split: '%s' is not a shard count from 1 to 65535", optarg);
			nsplit = (unsigned)v;
			break;
		}
		case 'e': edge = 1; break;
		case 'c': compressible = 1; break;
		case 'o': out = optarg; break;
		case 'm': manifest = optarg; break;
		case 'h': usage(stdout); return 0;
		case ':': bad_usage("option %s needs a value", argv[optind - 1]);
		default: bad_usage("unknown option %s", argv[optind - 1]);
		}
	}
	if (optind < argc)
		bad_usage("unexpected argument '%s'", argv[optind]);
	if (!m.fmt)
		bad_usage("--format is required");
	if (!out)
		bad_usage("-o FILE is required");
	if (!size && !edge)
		bad_usage("--size is required (or --edge)");
	if (m.n_meta && m.fmt != FMT_ST)
		bad_usage("--metadata is for safetensors (GGUF metadata is typed)");
	if (nsplit && m.fmt != FMT_GGUF)
		bad_usage("--split is for GGUF (gguf-split shards)");

	m.edge = edge;
	/* edge files use a non-default alignment so a reader must honour
	 * general.alignment; normal files state the default explicitly */
	m.alignment = edge ? 64 : 32;
	if (edge) {
		if (m.fmt == FMT_ST) {
			build_edge_st(&m);
			edge_permute(&m);
		} else {
			build_edge_gguf(&m);
		}
	} else {
		plan(&m, size);
	}
	if (every)
		add_every_dtype(&m);
	struct bb hdr = { 0 };
	if (!nsplit) {
		uint64_t total = layout(&m, &hdr);
		write_model(&m, &hdr, total, seed, compressible, out);
		if (manifest)
			write_manifest(&m, manifest, "w", -1);
	} else {
		if (nsplit > m.n)
			die("--split %u: more shards than the %zu tensors (gguf-split refuses empty shards)", nsplit, m.n);
		/* llama_split_path: PREFIX-%05d-of-%05d.gguf */
		size_t plen = strlen(out);
		char *prefix = xstrdup(out);
		if (plen > 5 && !strcmp(prefix + plen - 5, ".gguf"))
			prefix[plen - 5] = 0;
		char *path = xmalloc(strlen(prefix) + 32);
		for (unsigned k = 0; k < nsplit; k++) {
			size_t first = (size_t)((uint64_t)k * m.n / nsplit), last = (size_t)((uint64_t)(k + 1) * m.n / nsplit);
			struct model sub = m;
			sub.t = m.t + first;
			sub.n = last - first;
			sub.split_no = k;
			sub.split_count = nsplit;
			sub.split_tensors = m.n;
			/* only the first shard carries general.alignment */
			if (k)
				sub.alignment = GGUF_DEFAULT_ALIGNMENT;
			uint64_t total = layout(&sub, &hdr);
			gguf_split_path(path, strlen(prefix) + 32, prefix, k, nsplit);
			write_model(&sub, &hdr, total, seed, compressible, path);
			if (manifest)
				write_manifest(&sub, manifest, k ? "a" : "w", (int)k);
		}
		free(path);
		free(prefix);
	}
	free(hdr.p);
	free_tensors(&m);
	for (size_t i = 0; i < m.n_meta; i++)
		free((void *)m.meta[2 * i]);
	free(m.meta);
	return 0;
}
