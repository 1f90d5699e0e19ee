/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Model file index (include/gpunvme/model.h) on files this test builds in
 * memory, parsed from the buffer (gpunvme_model_parse_mem) and through a
 * read callback that serves every read in odd-sized pieces and checks that
 * the parser stays inside the file:
 *   - safetensors: every dtype, odd shapes, zero-size tensors, a header
 *     length that is not a multiple of 8, __metadata__, \u escapes and
 *     surrogate pairs in names, unknown members, header order kept;
 *   - GGUF v3 and v2: every metadata value type including nested and empty
 *     arrays, general.alignment = 64 and the default 32, block-type tensors
 *     of every ggml type, zero-size and 4-dim tensors; a header larger than
 *     the reader's window read without reading the tensor data;
 *   - refusals, each with its errno and a message naming the problem: not
 *     a model, empty, every truncation of small valid files, bad JSON of
 *     many kinds, unknown dtype / ggml type, data past the end, shape/bytes
 *     mismatch, overlap, duplicates, too many dims, huge counts and
 *     lengths, bad alignment, misaligned offsets, version / endianness,
 *     headers over GPUNVME_MODEL_MAX_HEADER (-EFBIG), read errors;
 *   - random byte corruption of valid files (must never crash);
 *   - the F8_*FNUZ dtypes and the sub-byte length rule; __metadata__ kept in
 *     file order (non-string values, duplicate keys, NUL refused); the
 *     gguf-split keys split.no / split.count / split.tensors.count (good,
 *     merged, bad values and types); NVFP4 / Q1_0 / Q2_0; ggml_type and
 *     file of every tensor;
 *   - gpunvme_tensor_match, gpunvme_dtype_bits, gpunvme_model_format_name.
 * Exit 0 pass, 1 fail.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpunvme/gpunvme.h"
#include "gpunvme/model.h"
#include "../harness/check.h"
/* the byte builder (struct bb) and the safetensors/GGUF writer that
 * gpunvme-mkmodel uses too; broken files are built from its pieces */
#include "cli/model_writer.h"

/* ---- read sources --------------------------------------------------------------- */

/* A file of `size` bytes whose first `n` bytes are p and the rest zeroes
 * (a "virtual" large file); served in pieces of `piece` bytes. */
struct src {
	const uint8_t *p;
	size_t n;
	uint64_t size;
	size_t piece;
	uint64_t fail_at;   /* reads touching bytes at or past this fail (-EIO) */
	uint64_t calls, bytes, max_len;
	bool outside;       /* a read past the end of the file was asked for */
};

static int src_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	struct src *s = ctx;
	s->calls++;
	s->bytes += len;
	if (len > s->max_len)
		s->max_len = len;
	if (off > s->size || len > s->size - off) {
		s->outside = true;
		return -EIO;
	}
	if (off + len > s->fail_at)
		return -EIO;
	uint8_t *o = buf;
	/* odd pieces, as a device with an odd transfer size would serve */
	for (size_t done = 0; done < len;) {
		size_t k = len - done < s->piece ? len - done : s->piece;
		for (size_t i = 0; i < k; i++) {
			uint64_t at = off + done + i;
			o[done + i] = at < s->n ? s->p[at] : 0;
		}
		done += k;
	}
	return 0;
}

static struct src src_of(const void *p, size_t n)
{
	struct src s = { p, n, n, 7, UINT64_MAX, 0, 0, 0, false };
	return s;
}

static bool same_model(const struct gpunvme_model *a, const struct gpunvme_model *b)
{
	if (a->format != b->format || a->file_size != b->file_size || a->data_offset != b->data_offset ||
	    a->version != b->version || a->alignment != b->alignment || a->n_kv != b->n_kv ||
	    a->n_tensors != b->n_tensors)
		return false;
	for (size_t i = 0; i < a->n_tensors; i++) {
		const struct gpunvme_tensor *x = &a->tensors[i], *y = &b->tensors[i];
		if (strcmp(x->name, y->name) || strcmp(x->dtype, y->dtype) || x->ndim != y->ndim ||
		    memcmp(x->shape, y->shape, sizeof(x->shape)) || x->offset != y->offset || x->bytes != y->bytes)
			return false;
	}
	return true;
}

/* Parse from memory and through the callback: both must agree. */
static int parse_both(const void *p, size_t n, struct gpunvme_model **out, int line)
{
	struct gpunvme_model *a = NULL, *b = NULL;
	struct src s = src_of(p, n);
	int ra = gpunvme_model_parse_mem(p, n, &a);
	char ea[512];
	snprintf(ea, sizeof(ea), "%s", gpunvme_last_error());
	int rb = gpunvme_model_parse(src_read, &s, n, &b);
	CHECK(ra == rb, "line %d: parse_mem -> %d (%s), callback -> %d", line, ra, ea, rb);
	CHECK(!s.outside, "line %d: a read past the end of the file", line);
	if (!ra && !rb)
		CHECK(same_model(a, b), "line %d: parse_mem and callback results differ", line);
	if (ra)
		CHECK(!a, "line %d: *out not NULL after a failure", line);
	gpunvme_model_free(b);
	*out = a;
	return ra;
}

static struct gpunvme_model *parse_ok(const void *p, size_t n, int line)
{
	struct gpunvme_model *m = NULL;
	int rc = parse_both(p, n, &m, line);
	CHECK(rc == 0 && m, "line %d: parse failed: %d", line, rc);
	return rc ? NULL : m;
}

static void expect_fail(const void *p, size_t n, int rc, const char *word, int line)
{
	struct gpunvme_model *m = NULL;
	int got = parse_both(p, n, &m, line);
	CHECK(got == rc, "line %d: expected %d (%s), got %d", line, rc, word, got);
	CHECK(strstr(gpunvme_last_error(), word), "line %d: message lacks \"%s\"", line, word);
	if (getenv("TEST_MODEL_VERBOSE")) /* to read every message */
		printf("line %d: %d %s\n", line, got, gpunvme_last_error());
	gpunvme_model_free(m);
}

#define PARSE_OK(p, n)            parse_ok(p, n, __LINE__)
#define EXPECT_FAIL(p, n, rc, w)  expect_fail(p, n, rc, w, __LINE__)

/* ---- safetensors builder -------------------------------------------------------- */

/* `data` bytes of the data section: the byte value 0xd0 + (offset % 16) */
static void st_data(struct bb *b, size_t data)
{
	for (size_t i = 0; i < data; i++)
		bb_u8(b, (uint8_t)(0xd0 + i % 16));
}

/* A file with this JSON header, as it is (valid or not): 8-byte length,
 * the JSON, `pad` spaces, then `data` bytes (st_data) */
static struct bb st_file(const char *json, size_t pad, size_t data)
{
	struct bb b = { 0 };
	st_frame(&b, json, strlen(json), pad);
	st_data(&b, data);
	return b;
}

/* A file as gpunvme-mkmodel writes one (the writer's JSON, the reference
 * padding): __metadata__ from `nkv` pairs when there are any, the tensors,
 * then `data` bytes (st_data) */
static struct bb st_written(const char *const *kv, size_t nkv, const struct st_tensor *t, size_t n, size_t data)
{
	struct st_writer w;
	struct bb b = { 0 };
	st_begin(&w);
	if (nkv)
		st_metadata(&w, kv, nkv);
	for (size_t i = 0; i < n; i++)
		st_tensor(&w, &t[i]);
	st_finish(&w, &b, 0);
	st_data(&b, data);
	return b;
}

/* __metadata__ {"a":"b"}, an escaped name, a sub-byte dtype; the last
 * tensor ends at the end of the file */
static const char *const xy_meta[] = { "a", "b" };
static const uint64_t shape_2x2[] = { 2, 2 }, shape_4[] = { 4 };
static const struct st_tensor xy_tensors[] = {
	{ .raw_name = "x\\u00e9", .dtype = "F16", .ndim = 2, .shape = shape_2x2, .begin = 0, .end = 8 },
	{ .name = "y", .dtype = "F4", .ndim = 1, .shape = shape_4, .begin = 8, .end = 10 },
};

static void st_fail(const char *json, size_t data, int rc, const char *word, int line)
{
	struct bb b = st_file(json, 0, data);
	expect_fail(b.p, b.n, rc, word, line);
	free(b.p);
}

#define ST_FAIL(json, data, rc, w) st_fail(json, data, rc, w, __LINE__)

/* ---- safetensors ---------------------------------------------------------------- */

static void st_layout(void)
{
	/* header order != offset order; N = strlen + 3 pad, odd on purpose */
	const char *json =
		"{\"b.weight\":{\"dtype\":\"F16\",\"shape\":[3,5],\"data_offsets\":[30,60]},"
		"\"__metadata__\":{\"format\":\"pt\",\"k\\u00e9y\":\"v\\n\\\"\"},"
		"\"a\\u00e9\\ud83d\\ude00\":{\"data_offsets\":[0,30],\"shape\":[2,3,5],\"dtype\":\"U8\",\"x\":[{\"y\":null}]},"
		"\"empty\":{\"dtype\":\"F32\",\"shape\":[4,0,2],\"data_offsets\":[60,60]},"
		"\"scalar\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[60,68]},"
		"\"f4\":{\"dtype\":\"F4\",\"shape\":[2,3],\"data_offsets\":[68,71]},"
		"\"f6\":{\"dtype\":\"F6_E2M3\",\"shape\":[4],\"data_offsets\":[71,74]},"
		"\"c\":{\"dtype\":\"C64\",\"shape\":[1,1,1,1,1,1,1,2],\"data_offsets\":[74,90]}}";
	struct bb b = st_file(json, 3, 90); /* the tensors tile the data section (st_tiling) */
	uint64_t n = strlen(json) + 3, base = 8 + n;
	CHECK(n % 8 != 0, "header length %llu should not be a multiple of 8", (unsigned long long)n);
	struct gpunvme_model *m = PARSE_OK(b.p, b.n);
	if (m) {
		CHECK(m->format == GPUNVME_MODEL_SAFETENSORS, "format %d", m->format);
		CHECK(m->file_size == b.n && m->data_offset == base, "data_offset %llu",
		      (unsigned long long)m->data_offset);
		CHECK(m->version == 0 && m->alignment == 1 && m->n_kv == 2, "version %u alignment %u n_kv %llu",
		      m->version, m->alignment, (unsigned long long)m->n_kv);
		static const struct {
			const char *name, *dtype;
			uint32_t ndim;
			uint64_t shape[8];
			uint64_t begin, bytes;
		} want[] = {
			{ "b.weight", "F16", 2, { 3, 5 }, 30, 30 },
			{ "a\xc3\xa9\xf0\x9f\x98\x80", "U8", 3, { 2, 3, 5 }, 0, 30 },
			{ "empty", "F32", 3, { 4, 0, 2 }, 60, 0 },
			{ "scalar", "I64", 0, { 0 }, 60, 8 },
			{ "f4", "F4", 2, { 2, 3 }, 68, 3 },
			{ "f6", "F6_E2M3", 1, { 4 }, 71, 3 },
			{ "c", "C64", 8, { 1, 1, 1, 1, 1, 1, 1, 2 }, 74, 16 },
		};
		CHECK(m->n_tensors == 7, "n_tensors %zu", m->n_tensors);
		for (size_t i = 0; i < 7 && i < m->n_tensors; i++) {
			const struct gpunvme_tensor *t = &m->tensors[i];
			CHECK(!strcmp(t->name, want[i].name), "tensor %zu name \"%s\"", i, t->name);
			CHECK(!strcmp(t->dtype, want[i].dtype), "tensor %zu dtype %s", i, t->dtype);
			CHECK(t->ndim == want[i].ndim && !memcmp(t->shape, want[i].shape, sizeof(t->shape)),
			      "tensor %zu shape", i);
			CHECK(t->offset == base + want[i].begin && t->bytes == want[i].bytes,
			      "tensor %zu offset %llu bytes %llu", i, (unsigned long long)t->offset,
			      (unsigned long long)t->bytes);
			if (t->bytes)
				CHECK(b.p[t->offset] == 0xd0 + want[i].begin % 16, "tensor %zu: wrong first byte", i);
		}
		gpunvme_model_free(m);
	}
	free(b.p);

	/* an empty header object: a valid file without tensors ("{}" and the
	 * writer's 6 spaces of padding) */
	b = st_written(NULL, 0, NULL, 0, 0);
	m = PARSE_OK(b.p, b.n);
	CHECK(m && m->n_tensors == 0 && m->data_offset == 16 && m->n_kv == 0, "empty header");
	gpunvme_model_free(m);
	free(b.p);
	b = st_file("{ \"__metadata__\" :\r\n\tnull }", 0, 0);
	gpunvme_model_free(PARSE_OK(b.p, b.n));
	free(b.p);
}

static void st_every_dtype(void)
{
	static const struct {
		const char *name;
		unsigned bits;
	} dt[] = {
		{ "BOOL", 8 },     { "U8", 8 },       { "I8", 8 },       { "F8_E5M2", 8 },  { "F8_E4M3", 8 },
		{ "F8_E8M0", 8 },  { "F4", 4 },       { "F6_E2M3", 6 },  { "F6_E3M2", 6 },  { "I16", 16 },
		{ "U16", 16 },     { "F16", 16 },     { "BF16", 16 },    { "I32", 32 },     { "U32", 32 },
		{ "F32", 32 },     { "F64", 64 },     { "I64", 64 },     { "U64", 64 },     { "C64", 64 },
		{ "F8_E4M3FNUZ", 8 }, { "F8_E5M2FNUZ", 8 },
	};
	char json[8192];
	size_t k = 0;
	uint64_t off = 0;
	k += (size_t)snprintf(json + k, sizeof(json) - k, "{");
	for (size_t i = 0; i < sizeof(dt) / sizeof(dt[0]); i++) {
		uint64_t bytes = 12ull * dt[i].bits / 8; /* shape [4, 3] */
		k += (size_t)snprintf(json + k, sizeof(json) - k,
				      "%s\"t%zu\": {\"dtype\": \"%s\", \"shape\": [4, 3], \"data_offsets\": [%llu, %llu]}",
				      i ? ", " : "", i, dt[i].name, (unsigned long long)off,
				      (unsigned long long)(off + bytes));
		off += bytes;
		CHECK(gpunvme_dtype_bits(GPUNVME_MODEL_SAFETENSORS, dt[i].name) == dt[i].bits, "bits of %s",
		      dt[i].name);
	}
	snprintf(json + k, sizeof(json) - k, "}");
	struct bb b = st_file(json, 0, off);
	struct gpunvme_model *m = PARSE_OK(b.p, b.n);
	CHECK(m && m->n_tensors == sizeof(dt) / sizeof(dt[0]), "every dtype");
	for (size_t i = 0; m && i < m->n_tensors; i++)
		CHECK(!strcmp(m->tensors[i].dtype, dt[i].name) && m->tensors[i].bytes == 12ull * dt[i].bits / 8 &&
			      m->tensors[i].ggml_type == -1 && m->tensors[i].file == 0,
		      "dtype %s", dt[i].name);
	gpunvme_model_free(m);
	free(b.p);
	CHECK(gpunvme_dtype_bits(GPUNVME_MODEL_SAFETENSORS, "Q4_0") == 0, "Q4_0 is not a safetensors dtype");
	CHECK(gpunvme_dtype_bits(GPUNVME_MODEL_SAFETENSORS, "f16") == 0, "dtype names are case-sensitive");
}

#define T(dt, shape, b, e) "{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static void st_errors(void)
{
	/* JSON syntax */
	ST_FAIL("{\"a\":" T("F16", "[2]", 0, 4) ",}", 4, -EINVAL, "expected a string");
	ST_FAIL("{\"a\":" T("F16", "[2]", 0, 4), 4, -EINVAL, "expected ','");
	ST_FAIL("{\"a\" " T("F16", "[2]", 0, 4) "}", 4, -EINVAL, "expected ':'");
	ST_FAIL("{a:1}", 0, -EINVAL, "expected a string");
	ST_FAIL("{\"a\":" T("F16", "[2]", 0, 4) "} x", 4, -EINVAL, "trailing");
	ST_FAIL("{\"a\":" T("F16", "[2]", 0, 4) "}{}", 4, -EINVAL, "trailing");
	struct bb nul = st_file("{}", 3, 0);
	nul.p[nul.n - 2] = 0; /* "{} \0 " */
	EXPECT_FAIL(nul.p, nul.n, -EINVAL, "trailing characters");
	free(nul.p);
	nul = st_file("{\"a\":{\"x\":", 3, 0);
	EXPECT_FAIL(nul.p, nul.n, -EINVAL, "expected a value, found the end of the text");
	free(nul.p);
	ST_FAIL("{\"a\":5}", 0, -EINVAL, "expected an object");
	ST_FAIL("{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4],\"x\":tru}}", 4, -EINVAL,
		"unexpected character");
	ST_FAIL("{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4],\"x\":01}}", 4, -EINVAL, "JSON");
	ST_FAIL("{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4],\"x\":1.}}", 4, -EINVAL,
		"digits must follow");
	ST_FAIL("{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4],\"x\":[1,]}}", 4, -EINVAL,
		"unexpected character");
	ST_FAIL("{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4],\"x\":\"abc}}", 4, -EINVAL,
		"unterminated string");
	ST_FAIL("{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4],\"x\":\"a\tb\"}}", 4, -EINVAL,
		"control character");
	ST_FAIL("{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4],\"x\":\"a\\xb\"}}", 4, -EINVAL,
		"bad escape");
	ST_FAIL("{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4],\"x\":\"\\u12\"}}", 4, -EINVAL,
		"\\u escape");
	ST_FAIL("{\"\\ud800x\":" T("F16", "[2]", 0, 4) "}", 4, -EINVAL, "surrogate");
	ST_FAIL("{\"\\udc00\":" T("F16", "[2]", 0, 4) "}", 4, -EINVAL, "surrogate");
	ST_FAIL("{\"\xc0\xaf\":" T("F16", "[2]", 0, 4) "}", 4, -EINVAL, "UTF-8");
	ST_FAIL("{\"\xed\xa0\x80\":" T("F16", "[2]", 0, 4) "}", 4, -EINVAL, "UTF-8");
	ST_FAIL("{\"\xf4\x90\x80\x80\":" T("F16", "[2]", 0, 4) "}", 4, -EINVAL, "UTF-8");
	ST_FAIL("{\"a\\u0000b\":" T("F16", "[2]", 0, 4) "}", 4, -EINVAL, "NUL");
	ST_FAIL("{\"a\":" T("F16", "[2]", 0, 4) ",\"__metadata__\":{\"k\":1}}", 4, -EINVAL, "must be strings");
	ST_FAIL("{\"__metadata__\":[],\"a\":" T("F16", "[2]", 0, 4) "}", 4, -EINVAL, "must be an object");
	ST_FAIL("{\"__metadata__\":{},\"__metadata__\":{}}", 0, -EINVAL, "duplicate \"__metadata__\"");

	/* nesting: 60 levels inside a tensor entry are fine, 70 are not */
	char deep[512];
	for (int lv = 60; lv <= 70; lv += 10) {
		size_t k = (size_t)snprintf(deep, sizeof(deep), "{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"x\":");
		for (int i = 0; i < lv; i++)
			deep[k++] = '[';
		for (int i = 0; i < lv; i++)
			deep[k++] = ']';
		snprintf(deep + k, sizeof(deep) - k, ",\"data_offsets\":[0,1]}}");
		struct bb b = st_file(deep, 0, 1);
		if (lv == 60)
			gpunvme_model_free(PARSE_OK(b.p, b.n));
		else
			EXPECT_FAIL(b.p, b.n, -EINVAL, "nested deeper");
		free(b.p);
	}

	/* numbers that are sizes */
	ST_FAIL("{\"a\":" T("F16", "[-2]", 0, 4) "}", 4, -EINVAL, "non-negative integer");
	ST_FAIL("{\"a\":" T("F16", "[2.0]", 0, 4) "}", 4, -EINVAL, "fraction");
	ST_FAIL("{\"a\":" T("F16", "[2e0]", 0, 4) "}", 4, -EINVAL, "fraction");
	ST_FAIL("{\"a\":" T("F16", "[02]", 0, 4) "}", 4, -EINVAL, "leading zero");
	ST_FAIL("{\"a\":" T("F16", "[18446744073709551616]", 0, 4) "}", 4, -EINVAL, "too large");
	ST_FAIL("{\"a\":" T("U8", "[18446744073709551615]", 0, 4) "}", 4, -EINVAL, "mismatch");
	ST_FAIL("{\"a\":" T("F16", "[4294967296,4294967296]", 0, 4) "}", 4, -EINVAL, "overflows");
	ST_FAIL("{\"a\":" T("F64", "[4611686018427387904]", 0, 4) "}", 4, -EINVAL, "overflows");
	ST_FAIL("{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4,8]}}", 8, -EINVAL, "more than 2");
	ST_FAIL("{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[4]}}", 8, -EINVAL, "two numbers");
	ST_FAIL("{\"a\":{\"dtype\":\"F16\",\"shape\":2,\"data_offsets\":[0,4]}}", 4, -EINVAL, "expected '['");

	/* entries */
	ST_FAIL("{\"a\":{\"shape\":[2],\"data_offsets\":[0,4]}}", 4, -EINVAL, "missing \"dtype\"");
	ST_FAIL("{\"a\":{\"dtype\":\"F16\",\"data_offsets\":[0,4]}}", 4, -EINVAL, "missing \"shape\"");
	ST_FAIL("{\"a\":{\"dtype\":\"F16\",\"shape\":[2]}}", 4, -EINVAL, "missing \"data_offsets\"");
	ST_FAIL("{\"a\":{\"dtype\":\"F16\",\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, -EINVAL,
		"duplicate \"dtype\"");
	ST_FAIL("{\"a\":{\"dtype\":16,\"shape\":[2],\"data_offsets\":[0,4]}}", 4, -EINVAL, "expected a string");
	ST_FAIL("{\"a\":" T("F12", "[2]", 0, 4) "}", 4, -EINVAL, "unknown dtype");
	ST_FAIL("{\"a\":" T("f16", "[2]", 0, 4) "}", 4, -EINVAL, "unknown dtype");
	ST_FAIL("{\"a\":" T("F16", "[2]", 4, 0) "}", 4, -EINVAL, "begin > end");
	ST_FAIL("{\"a\":" T("F16", "[2]", 0, 4) "}", 3, -EINVAL, "past the end of the data section");
	ST_FAIL("{\"a\":" T("F16", "[2]", 8, 12) "}", 8, -EINVAL, "past the end of the data section");
	ST_FAIL("{\"a\":" T("F16", "[3]", 0, 4) "}", 4, -EINVAL, "mismatch");
	ST_FAIL("{\"a\":" T("F32", "[2,0]", 0, 4) "}", 4, -EINVAL, "mismatch");
	ST_FAIL("{\"a\":" T("F4", "[3]", 0, 2) "}", 4, -EINVAL, "whole number of bytes");
	ST_FAIL("{\"a\":" T("F6_E3M2", "[2,1]", 0, 2) "}", 4, -EINVAL, "whole number of bytes");
	ST_FAIL("{\"a\":" T("U8", "[1,1,1,1,1,1,1,1,1]", 0, 1) "}", 1, -EINVAL, "too many dimensions");
	ST_FAIL("{\"a\":" T("F16", "[2]", 0, 4) ",\"a\":" T("F16", "[2]", 4, 8) "}", 8, -EINVAL,
		"duplicate tensor name");
	ST_FAIL("{\"a\":" T("F16", "[2]", 0, 4) ",\"b\":" T("F16", "[2]", 2, 6) "}", 8, -EINVAL, "overlapping");
	ST_FAIL("{\"a\":" T("U8", "[8]", 0, 8) ",\"b\":" T("U8", "[1]", 7, 8) ",\"c\":" T("U8", "[0]", 3, 3) "}",
		8, -EINVAL, "overlapping");
}

/* The tensors tile the data section, as the reference implementation
 * demands (safetensors/src/lib.rs: Metadata::validate refuses a tensor that
 * does not begin where the previous one, in data_offsets order, ends with
 * InvalidOffset; read_metadata refuses bytes after the last tensor with
 * MetadataIncompleteBuffer). Issue 30: gaps and a tail loaded with exit 0. */
static void st_tiling(void)
{
	/* a gap between two tensors, named with both offsets */
	ST_FAIL("{\"a\":" T("U8", "[4]", 0, 4) ",\"b\":" T("U8", "[4]", 6, 10) "}", 10, -EINVAL,
		"tensor \"b\": data_offsets [6, 10] leave a gap of 2 bytes after \"a\", which ends at 4");
	/* header order does not matter: data_offsets order does */
	ST_FAIL("{\"b\":" T("U8", "[4]", 6, 10) ",\"a\":" T("U8", "[4]", 0, 4) "}", 10, -EINVAL, "InvalidOffset");
	/* bytes before the first tensor */
	ST_FAIL("{\"a\":" T("U8", "[4]", 2, 6) "}", 6, -EINVAL, "the first tensor must begin at 0, 2 bytes");
	/* bytes after the last tensor */
	ST_FAIL("{\"a\":" T("U8", "[4]", 0, 4) ",\"b\":" T("U8", "[2]", 4, 6) "}", 9, -EINVAL,
		"3 bytes after the last tensor \"b\" (data_offsets end 6, the data section holds 9)");
	ST_FAIL("{\"a\":" T("U8", "[4]", 0, 4) "}", 5, -EINVAL, "MetadataIncompleteBuffer");
	ST_FAIL("{}", 3, -EINVAL, "3 bytes of data after a header with no tensors");
	ST_FAIL("{\"z\":" T("U8", "[0]", 0, 0) "}", 1, -EINVAL, "after the last tensor \"z\"");
	/* a zero-size tensor inside another one: the reference's InvalidOffset
	 * (sorted by (begin, end) it begins before the previous end) */
	static const uint64_t s4[] = { 4 }, s0[] = { 0 };
	static const struct st_tensor azb[] = {
		{ .name = "a", .dtype = "U8", .ndim = 1, .shape = s4, .begin = 0, .end = 4 },
		{ .name = "z", .dtype = "U8", .ndim = 1, .shape = s0, .begin = 2, .end = 2 },
		{ .name = "b", .dtype = "U8", .ndim = 1, .shape = s4, .begin = 4, .end = 8 },
	};
	struct bb b = st_written(NULL, 0, azb, 3, 8);
	expect_fail(b.p, b.n, -EINVAL, "overlapping tensors \"a\" [0, 4] and \"z\" [2, 2]", __LINE__);
	free(b.p);
	/* touching ranges, zero-size tensors at a boundary, at 0 and at the end,
	 * an empty file of tensors: all tile */
	static const struct st_tensor tiled[] = {
		{ .name = "z0", .dtype = "U8", .ndim = 1, .shape = s0, .begin = 0, .end = 0 },
		{ .name = "a", .dtype = "U8", .ndim = 1, .shape = s4, .begin = 0, .end = 4 },
		{ .name = "z", .dtype = "U8", .ndim = 1, .shape = s0, .begin = 4, .end = 4 },
		{ .name = "b", .dtype = "U8", .ndim = 1, .shape = s4, .begin = 4, .end = 8 },
		{ .name = "z8", .dtype = "U8", .ndim = 1, .shape = s0, .begin = 8, .end = 8 },
	};
	b = st_written(NULL, 0, tiled, 5, 8);
	gpunvme_model_free(PARSE_OK(b.p, b.n));
	free(b.p);
	b = st_written(NULL, 0, NULL, 0, 0);
	gpunvme_model_free(PARSE_OK(b.p, b.n));
	free(b.p);
}

static void st_limits(void)
{
	/* header length past the end of the file */
	struct bb b = st_file("{}", 0, 0);
	b.p[0] = 3; /* N = 3, file has 2 */
	EXPECT_FAIL(b.p, b.n, -EINVAL, "past the end of the file");
	b.p[0] = 0;
	b.p[7] = 0x80; /* N = 2^63 */
	EXPECT_FAIL(b.p, b.n, -EINVAL, "past the end of the file");
	free(b.p);

	/* a header over the limit in a (virtual) 200 MiB file: -EFBIG before
	 * anything is allocated or read */
	uint8_t h[16] = { 0 };
	uint64_t n = (uint64_t)GPUNVME_MODEL_MAX_HEADER + 1;
	for (int i = 0; i < 8; i++)
		h[i] = (uint8_t)(n >> (8 * i));
	h[8] = '{';
	struct src s = src_of(h, sizeof(h));
	s.size = 200u << 20;
	struct gpunvme_model *m = NULL;
	int rc = gpunvme_model_parse(src_read, &s, s.size, &m);
	CHECK(rc == -EFBIG && !m && strstr(gpunvme_last_error(), "over the limit"), "header over limit: %d", rc);
	CHECK(s.bytes < 64, "%llu bytes read for a refused header", (unsigned long long)s.bytes);

	/* a header exactly at the limit is read (and is bad JSON: zero bytes
	 * after the '{') */
	n = GPUNVME_MODEL_MAX_HEADER;
	for (int i = 0; i < 8; i++)
		h[i] = (uint8_t)(n >> (8 * i));
	s = src_of(h, sizeof(h));
	s.size = 8 + n;
	s.piece = 1u << 20;
	rc = gpunvme_model_parse(src_read, &s, s.size, &m);
	CHECK(rc == -EINVAL && strstr(gpunvme_last_error(), "JSON"), "100 MiB header: %d", rc);
	CHECK(s.max_len <= (1u << 20), "header read in pieces of at most 1 MiB, not %llu",
	      (unsigned long long)s.max_len);
}

/* ---- GGUF builder ---------------------------------------------------------------- */

struct ti {
	const char *name;
	uint32_t type;
	uint32_t ndim;
	uint64_t ne[4];
	uint64_t bytes;   /* expected size, computed by hand */
	uint64_t off;     /* relative offset, laid out by gg_layout */
};

static void gg_infos(struct bb *b, struct ti *t, size_t n, uint32_t align)
{
	uint64_t off = 0;
	for (size_t i = 0; i < n; i++) {
		t[i].off = off;
		off = gguf_next_offset(off, t[i].bytes, align);
		gguf_tensor_info(b, t[i].name, t[i].ndim, t[i].ne, t[i].type, t[i].off);
	}
}

/* pad to align, then the data: tensor i filled with the byte 0xa0 + i */
static uint64_t gg_data(struct bb *b, const struct ti *t, size_t n, uint32_t align)
{
	bb_align(b, align);
	uint64_t base = b->n;
	for (size_t i = 0; i < n; i++) {
		bb_fill(b, 0, base + t[i].off - b->n);
		bb_fill(b, (uint8_t)(0xa0 + i), t[i].bytes);
	}
	return base;
}

/* one metadata pair of every type, arrays of every element type, nested
 * arrays, empty arrays; returns the pair count */
static uint64_t gg_all_kv(struct bb *b)
{
	uint64_t n = 0;
	gguf_key(b, "u8", GGUF_U8), bb_u8(b, 200), n++;
	gguf_key(b, "i8", GGUF_I8), bb_u8(b, 0x80), n++;
	gguf_key(b, "u16", GGUF_U16), bb_le(b, 65535, 2), n++;
	gguf_key(b, "i16", GGUF_I16), bb_le(b, 0x8000, 2), n++;
	gguf_kv_u32(b, "u32", 7), n++;
	gguf_key(b, "i32", GGUF_I32), bb_u32(b, 0xffffffff), n++;
	gguf_key(b, "f32", GGUF_F32), bb_u32(b, 0x3f800000), n++;
	gguf_key(b, "bool", GGUF_BOOL), bb_u8(b, 1), n++;
	gguf_kv_str(b, "general.name", "tiny \xc3\xa9"), n++;
	gguf_key(b, "u64", GGUF_U64), bb_u64(b, UINT64_MAX), n++;
	gguf_key(b, "i64", GGUF_I64), bb_u64(b, 1ull << 63), n++;
	gguf_key(b, "f64", GGUF_F64), bb_u64(b, 0x3ff0000000000000ull), n++;
	/* arrays of each fixed type, of 3 elements */
	for (uint32_t et = 0; et <= GGUF_F64; et++) {
		static const uint8_t sz[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
		if (et == GGUF_STR || et == GGUF_ARR)
			continue;
		char key[32];
		snprintf(key, sizeof(key), "arr.%u", et);
		gguf_key(b, key, GGUF_ARR), gguf_arr(b, (enum gguf_type)et, 3);
		for (int i = 0; i < 3; i++)
			bb_le(b, et == GGUF_BOOL ? (uint64_t)(i & 1) : 0x0102030405060708ull, sz[et]);
		n++;
	}
	gguf_key(b, "tokenizer.ggml.tokens", GGUF_ARR), gguf_arr(b, GGUF_STR, 3);
	gguf_str(b, "<s>"), gguf_str(b, ""), gguf_str(b, "hello"), n++;
	gguf_key(b, "empty", GGUF_ARR), gguf_arr(b, GGUF_F32, 0), n++;
	/* [[1, 2], [], [3]] of u32, and [[["a"]], [[]]] of strings */
	gguf_key(b, "nested", GGUF_ARR), gguf_arr(b, GGUF_ARR, 3);
	gguf_arr(b, GGUF_U32, 2), bb_u32(b, 1), bb_u32(b, 2);
	gguf_arr(b, GGUF_U32, 0);
	gguf_arr(b, GGUF_U32, 1), bb_u32(b, 3);
	n++;
	gguf_key(b, "nested3", GGUF_ARR), gguf_arr(b, GGUF_ARR, 2);
	gguf_arr(b, GGUF_ARR, 1), gguf_arr(b, GGUF_STR, 1), gguf_str(b, "a");
	gguf_arr(b, GGUF_ARR, 1), gguf_arr(b, GGUF_STR, 0);
	n++;
	return n;
}

static void check_gguf(const struct gpunvme_model *m, const struct bb *b, const struct ti *t, size_t n,
		       uint64_t base, uint32_t version, uint32_t align, uint64_t nkv)
{
	CHECK(m->format == GPUNVME_MODEL_GGUF && m->version == version && m->alignment == align &&
		      m->n_kv == nkv && m->file_size == b->n,
	      "gguf header: version %u alignment %u n_kv %llu", m->version, m->alignment,
	      (unsigned long long)m->n_kv);
	CHECK(m->data_offset == base && base % align == 0, "data_offset %llu, expected %llu",
	      (unsigned long long)m->data_offset, (unsigned long long)base);
	CHECK(m->n_tensors == n, "n_tensors %zu, expected %zu", m->n_tensors, n);
	for (size_t i = 0; i < n && i < m->n_tensors; i++) {
		const struct gpunvme_tensor *x = &m->tensors[i];
		CHECK(!strcmp(x->name, t[i].name), "tensor %zu name %s", i, x->name);
		CHECK(x->ndim == t[i].ndim && !memcmp(x->shape, t[i].ne, t[i].ndim * 8), "tensor %s shape", x->name);
		for (uint32_t d = x->ndim; d < GPUNVME_TENSOR_MAX_DIMS; d++)
			CHECK(x->shape[d] == 0, "tensor %s: unused dimension %u not zero", x->name, d);
		CHECK(x->offset == base + t[i].off && x->bytes == t[i].bytes, "tensor %s offset %llu bytes %llu",
		      x->name, (unsigned long long)x->offset, (unsigned long long)x->bytes);
		if (x->bytes)
			CHECK(b->p[x->offset] == 0xa0 + i && b->p[x->offset + x->bytes - 1] == 0xa0 + i,
			      "tensor %s: its data is not at its offset", x->name);
	}
}

/* ---- GGUF --------------------------------------------------------------------------- */

static struct ti basic[] = {
	{ "token_embd.weight", 0, 3, { 3, 5, 7 }, 420, 0 },   /* F32 */
	{ "blk.0.attn_q.weight", 2, 2, { 64, 3 }, 108, 0 },   /* Q4_0: 2 blocks of 18 per row */
	{ "blk.0.ffn_up.weight", 12, 2, { 256, 2 }, 288, 0 }, /* Q4_K: 144 per 256 */
	{ "blk.0.iq", 16, 1, { 512 }, 132, 0 },               /* IQ2_XXS: 66 per 256 */
	{ "blk.0.tq", 34, 4, { 256, 1, 1, 2 }, 108, 0 },      /* TQ1_0: 54 per 256 */
	{ "norm", 30, 1, { 7 }, 14, 0 },                       /* BF16 */
	{ "empty", 1, 2, { 0, 4 }, 0, 0 },                     /* F16, zero-size */
	{ "mx", 39, 2, { 32, 1 }, 17, 0 },                     /* MXFP4 */
	{ "scalar", 26, 0, { 0 }, 4, 0 },                      /* I32, no dims */
};
#define NBASIC (sizeof(basic) / sizeof(basic[0]))

static struct bb gg_basic_file(uint32_t version, bool align64, uint64_t *base, uint64_t *nkv)
{
	struct bb b = { 0 };
	uint32_t a = align64 ? 64 : 32;
	gguf_head(&b, version, NBASIC, 0);
	*nkv = gg_all_kv(&b);
	if (align64)
		gguf_kv_u32(&b, "general.alignment", 64), ++*nkv;
	for (int i = 0; i < 8; i++) /* patch kv_count */
		b.p[16 + i] = (uint8_t)(*nkv >> (8 * i));
	gg_infos(&b, basic, NBASIC, a);
	*base = gg_data(&b, basic, NBASIC, a);
	return b;
}

static void gguf_layout(void)
{
	for (int v = 2; v <= 3; v++)
		for (int a64 = 0; a64 <= 1; a64++) {
			uint64_t base, nkv;
			struct bb b = gg_basic_file((uint32_t)v, a64, &base, &nkv);
			struct gpunvme_model *m = PARSE_OK(b.p, b.n);
			if (m) {
				check_gguf(m, &b, basic, NBASIC, base, (uint32_t)v, a64 ? 64 : 32, nkv);
				CHECK(!strcmp(m->tensors[1].dtype, "Q4_0") && !strcmp(m->tensors[2].dtype, "Q4_K") &&
					      !strcmp(m->tensors[3].dtype, "IQ2_XXS") &&
					      !strcmp(m->tensors[4].dtype, "TQ1_0") && !strcmp(m->tensors[7].dtype, "MXFP4"),
				      "gguf dtype names");
			}
			gpunvme_model_free(m);
			free(b.p);
		}
	/* no tensors, no metadata: the header alone */
	struct bb b = { 0 };
	gguf_head(&b, 3, 0, 0);
	struct gpunvme_model *m = PARSE_OK(b.p, b.n);
	CHECK(m && m->n_tensors == 0 && m->data_offset == 32, "empty gguf");
	gpunvme_model_free(m);
	free(b.p);
}

static void gguf_every_type(void)
{
	static const struct {
		uint32_t id;
		const char *name;
		uint32_t blck, size;
	} ty[] = {
		{ 0, "F32", 1, 4 },         { 1, "F16", 1, 2 },        { 2, "Q4_0", 32, 18 },
		{ 3, "Q4_1", 32, 20 },      { 6, "Q5_0", 32, 22 },     { 7, "Q5_1", 32, 24 },
		{ 8, "Q8_0", 32, 34 },      { 9, "Q8_1", 32, 36 },     { 10, "Q2_K", 256, 84 },
		{ 11, "Q3_K", 256, 110 },   { 12, "Q4_K", 256, 144 },  { 13, "Q5_K", 256, 176 },
		{ 14, "Q6_K", 256, 210 },   { 15, "Q8_K", 256, 292 },  { 16, "IQ2_XXS", 256, 66 },
		{ 17, "IQ2_XS", 256, 74 },  { 18, "IQ3_XXS", 256, 98 }, { 19, "IQ1_S", 256, 50 },
		{ 20, "IQ4_NL", 32, 18 },   { 21, "IQ3_S", 256, 110 }, { 22, "IQ2_S", 256, 82 },
		{ 23, "IQ4_XS", 256, 136 }, { 24, "I8", 1, 1 },        { 25, "I16", 1, 2 },
		{ 26, "I32", 1, 4 },        { 27, "I64", 1, 8 },       { 28, "F64", 1, 8 },
		{ 29, "IQ1_M", 256, 56 },   { 30, "BF16", 1, 2 },      { 34, "TQ1_0", 256, 54 },
		{ 35, "TQ2_0", 256, 66 },   { 39, "MXFP4", 32, 17 },   { 40, "NVFP4", 64, 36 },
		{ 41, "Q1_0", 128, 18 },    { 42, "Q2_0", 64, 18 },
	};
	enum { N = sizeof(ty) / sizeof(ty[0]) };
	static char names[N][16];
	struct ti t[N];
	for (size_t i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "t.%s", ty[i].name);
		t[i] = (struct ti){ names[i], ty[i].id, 2, { 2 * ty[i].blck, 3 }, 6ull * ty[i].size, 0 };
		double bits = gpunvme_dtype_bits(GPUNVME_MODEL_GGUF, ty[i].name);
		CHECK(bits == ty[i].size * 8.0 / ty[i].blck, "bits of %s: %g", ty[i].name, bits);
	}
	struct bb b = { 0 };
	gguf_head(&b, 3, N, 0);
	gg_infos(&b, t, N, 32);
	uint64_t base = gg_data(&b, t, N, 32);
	struct gpunvme_model *m = PARSE_OK(b.p, b.n);
	if (m) {
		check_gguf(m, &b, t, N, base, 3, 32, 0);
		for (size_t i = 0; i < N && i < m->n_tensors; i++)
			CHECK(!strcmp(m->tensors[i].dtype, ty[i].name) && m->tensors[i].ggml_type == (int32_t)ty[i].id &&
				      m->tensors[i].file == 0,
			      "dtype %s ggml_type %d", m->tensors[i].dtype, m->tensors[i].ggml_type);
		CHECK(m->split_no == 0 && m->split_count == 1 && m->split_tensors == N && m->n_meta == 0 && !m->meta,
		      "gguf without split keys: split %u/%u tensors %llu", m->split_no, m->split_count,
		      (unsigned long long)m->split_tensors);
	}
	gpunvme_model_free(m);
	free(b.p);
	CHECK(gpunvme_dtype_bits(GPUNVME_MODEL_GGUF, "Q4_0") == 4.5 &&
		      gpunvme_dtype_bits(GPUNVME_MODEL_GGUF, "Q6_K") == 6.5625 &&
		      gpunvme_dtype_bits(GPUNVME_MODEL_GGUF, "TQ1_0") == 1.6875 &&
		      gpunvme_dtype_bits(GPUNVME_MODEL_GGUF, "F8_E4M3") == 0 &&
		      gpunvme_dtype_bits(GPUNVME_MODEL_GGUF, "NVFP4") == 4.5 &&
		      gpunvme_dtype_bits(GPUNVME_MODEL_GGUF, "Q1_0") == 1.125 &&
		      gpunvme_dtype_bits(GPUNVME_MODEL_GGUF, "Q2_0") == 2.25 &&
		      gpunvme_dtype_bits(GPUNVME_MODEL_GGUF, "Q4_2") == 0 && gpunvme_dtype_bits(0, "F16") == 0 &&
		      gpunvme_dtype_bits(GPUNVME_MODEL_GGUF, NULL) == 0,
	      "gguf dtype bits");
}

/* A GGUF file with one tensor info built by the caller's hook. */
static struct bb gg_one(uint32_t version, uint64_t nt, uint64_t nkv)
{
	struct bb b = { 0 };
	gguf_head(&b, version, nt, nkv);
	return b;
}

static void gg_fail(struct bb *b, int rc, const char *word, int line)
{
	bb_fill(b, 0, 64); /* some slack: the error must come from the header */
	expect_fail(b->p, b->n, rc, word, line);
	free(b->p);
	memset(b, 0, sizeof(*b));
}

#define GG_FAIL(b, rc, w) gg_fail(&(b), rc, w, __LINE__)

static void gguf_errors(void)
{
	static const uint64_t ne8[] = { 8 }, ne32[] = { 32 }, ne5[] = { 1, 1, 1, 1, 1 }, big[] = { 1ull << 32, 1ull << 32 };
	static const uint64_t ne63[] = { 1ull << 63 }, ne62[] = { 1ull << 62 };
	struct bb b;

	/* version and byte order */
	b = gg_one(1, 0, 0), GG_FAIL(b, -EINVAL, "version 1");
	b = gg_one(4, 0, 0), GG_FAIL(b, -EINVAL, "unsupported GGUF version 4");
	b = gg_one(0, 0, 0), GG_FAIL(b, -EINVAL, "unsupported GGUF version 0");
	b = gg_one(0x03000000, 0, 0), GG_FAIL(b, -EINVAL, "big-endian");

	/* counts and lengths that cannot fit */
	b = gg_one(3, 1ull << 60, 0), GG_FAIL(b, -EINVAL, "cannot fit");
	b = gg_one(3, 0, 1ull << 60), GG_FAIL(b, -EINVAL, "cannot fit");
	b = gg_one(3, UINT64_MAX, UINT64_MAX), GG_FAIL(b, -EINVAL, "cannot fit");
	b = gg_one(3, 0, 1), bb_u64(&b, 1ull << 63), GG_FAIL(b, -EINVAL, "truncated header");
	b = gg_one(3, 0, 1), gguf_key(&b, "k", GGUF_STR), bb_u64(&b, 1ull << 63),
	GG_FAIL(b, -EINVAL, "truncated header");
	b = gg_one(3, 0, 1), gguf_key(&b, "k", GGUF_STR), bb_u64(&b, UINT64_MAX),
	GG_FAIL(b, -EINVAL, "truncated header");
	b = gg_one(3, 0, 1), gguf_key(&b, "k", GGUF_ARR), gguf_arr(&b, GGUF_U32, 1ull << 62),
	GG_FAIL(b, -EINVAL, "does not fit");
	b = gg_one(3, 0, 1), gguf_key(&b, "k", GGUF_ARR), gguf_arr(&b, GGUF_U64, 1ull << 61),
	GG_FAIL(b, -EINVAL, "does not fit");
	b = gg_one(3, 0, 1), gguf_key(&b, "k", GGUF_ARR), gguf_arr(&b, GGUF_ARR, 1ull << 61),
	GG_FAIL(b, -EINVAL, "does not fit");
	b = gg_one(3, 0, 1), gguf_key(&b, "k", GGUF_ARR), gguf_arr(&b, GGUF_STR, 1ull << 60),
	GG_FAIL(b, -EINVAL, "does not fit");
	b = gg_one(3, 1, 0), bb_u64(&b, 1ull << 63), GG_FAIL(b, -EINVAL, "truncated header");

	/* metadata values */
	b = gg_one(3, 0, 1), gguf_str(&b, "k"), bb_u32(&b, 13), bb_u32(&b, 0), GG_FAIL(b, -EINVAL, "unknown metadata value type");
	b = gg_one(3, 0, 1), gguf_key(&b, "k", GGUF_ARR), bb_u32(&b, 99), bb_u64(&b, 0),
	GG_FAIL(b, -EINVAL, "unknown metadata array element type");
	b = gg_one(3, 0, 1), gguf_key(&b, "k", GGUF_BOOL), bb_u8(&b, 2), GG_FAIL(b, -EINVAL, "neither 0 nor 1");
	b = gg_one(3, 0, 1), gguf_key(&b, "k", GGUF_ARR), gguf_arr(&b, GGUF_BOOL, 2), bb_u8(&b, 1),
	bb_u8(&b, 7), GG_FAIL(b, -EINVAL, "neither 0 nor 1");
	b = gg_one(3, 0, 1), gguf_key(&b, "k", GGUF_ARR);
	for (int i = 0; i < 9; i++)
		gguf_arr(&b, GGUF_ARR, 1);
	gguf_arr(&b, GGUF_U8, 0);
	GG_FAIL(b, -EINVAL, "nested deeper");
	b = gg_one(3, 0, 2), gguf_kv_u32(&b, "a", 1), gguf_kv_u32(&b, "a", 2), GG_FAIL(b, -EINVAL, "duplicate metadata key");
	b = gg_one(3, 0, 1), bb_u64(&b, 3), bb_put(&b, "a\0b", 3), bb_u32(&b, GGUF_U8), bb_u8(&b, 0),
	GG_FAIL(b, -EINVAL, "NUL");

	/* general.alignment */
	b = gg_one(3, 0, 1), gguf_kv_u32(&b, "general.alignment", 48), GG_FAIL(b, -EINVAL, "not a power of two");
	b = gg_one(3, 0, 1), gguf_kv_u32(&b, "general.alignment", 0), GG_FAIL(b, -EINVAL, "not a power of two");
	b = gg_one(3, 0, 1), gguf_key(&b, "general.alignment", GGUF_U64), bb_u64(&b, 64),
	GG_FAIL(b, -EINVAL, "expected uint32");
	b = gg_one(3, 0, 2), gguf_kv_u32(&b, "general.alignment", 64), gguf_kv_u32(&b, "general.alignment", 64),
	GG_FAIL(b, -EINVAL, "duplicate metadata key");

	/* tensor infos */
	b = gg_one(3, 1, 0), gguf_tensor_info(&b, "t", 1, ne8, 4, 0), GG_FAIL(b, -EINVAL, "unknown ggml type 4");
	b = gg_one(3, 1, 0), gguf_tensor_info(&b, "t", 1, ne8, 31, 0), GG_FAIL(b, -EINVAL, "unknown ggml type 31");
	b = gg_one(3, 1, 0), gguf_tensor_info(&b, "t", 1, ne8, 1000, 0), GG_FAIL(b, -EINVAL, "unknown ggml type 1000");
	b = gg_one(3, 1, 0), gguf_tensor_info(&b, "t", 5, ne5, 0, 0), GG_FAIL(b, -EINVAL, "too many dimensions");
	b = gg_one(3, 1, 0), gguf_tensor_info(&b, "t", 1, ne8, 2, 0), GG_FAIL(b, -EINVAL, "not a multiple of the Q4_0 block size");
	b = gg_one(3, 1, 0), gguf_tensor_info(&b, "t", 2, big, 0, 0), GG_FAIL(b, -EINVAL, "element count overflows");
	b = gg_one(3, 1, 0), gguf_tensor_info(&b, "t", 1, ne63, 0, 0), GG_FAIL(b, -EINVAL, "element count overflows");
	b = gg_one(3, 1, 0), gguf_tensor_info(&b, "t", 1, ne62, 0, 0), GG_FAIL(b, -EINVAL, "byte size overflows");
	b = gg_one(3, 1, 0), gguf_tensor_info(&b, "t", 1, ne8, 0, 16), GG_FAIL(b, -EINVAL, "misaligned");
	b = gg_one(3, 1, 1), gguf_kv_u32(&b, "general.alignment", 64), gguf_tensor_info(&b, "t", 1, ne8, 0, 32),
	GG_FAIL(b, -EINVAL, "misaligned");
	b = gg_one(3, 1, 0), gguf_tensor_info(&b, "t", 1, ne32, 0, 0), GG_FAIL(b, -EINVAL, "past the end of the file");
	b = gg_one(3, 1, 0), gguf_tensor_info(&b, "t", 1, ne8, 0, 1ull << 63), GG_FAIL(b, -EINVAL, "past the end of the file");
	b = gg_one(3, 1, 0), gguf_tensor_info(&b, "t", 1, ne8, 0, UINT64_MAX - 31), GG_FAIL(b, -EINVAL, "past the end of the file");
	b = gg_one(3, 2, 0), gguf_tensor_info(&b, "t", 1, ne8, 0, 0), gguf_tensor_info(&b, "t", 1, ne8, 0, 32),
	bb_fill(&b, 0, 128), GG_FAIL(b, -EINVAL, "duplicate tensor name");
	b = gg_one(3, 2, 0), gguf_tensor_info(&b, "t", 1, ne8, 0, 0), gguf_tensor_info(&b, "u", 1, ne32, 0, 0),
	bb_fill(&b, 0, 256), GG_FAIL(b, -EINVAL, "overlapping");
	b = gg_one(3, 1, 0), bb_u64(&b, 3), bb_put(&b, "a\0b", 3), bb_u32(&b, 0), bb_u32(&b, 0), bb_u64(&b, 0),
	GG_FAIL(b, -EINVAL, "NUL");
}


/* ---- new formats: sub-byte lengths, __metadata__, gguf-split keys ------------------ */

/* The reference's byte-length rule for every dtype: elements * bits must be
 * whole bytes (MisalignedSlice), then equal END - BEGIN. */
static void st_dtype_lengths(void)
{
	char json[256];
	/* F8_*FNUZ: one byte per element */
	snprintf(json, sizeof(json), "{\"a\":" T("F8_E4M3FNUZ", "[3,5]", 0, 15) ",\"b\":" T("F8_E5M2FNUZ", "[7]", 15, 22) "}");
	struct bb b = st_file(json, 0, 22);
	struct gpunvme_model *m = PARSE_OK(b.p, b.n);
	CHECK(m && m->n_tensors == 2 && m->tensors[0].bytes == 15 && m->tensors[1].bytes == 7 &&
		      !strcmp(m->tensors[0].dtype, "F8_E4M3FNUZ") && !strcmp(m->tensors[1].dtype, "F8_E5M2FNUZ"),
	      "FNUZ tensors");
	gpunvme_model_free(m);
	free(b.p);
	CHECK(gpunvme_dtype_bits(GPUNVME_MODEL_SAFETENSORS, "F8_E4M3FNUZ") == 8 &&
		      gpunvme_dtype_bits(GPUNVME_MODEL_SAFETENSORS, "F8_E5M2FNUZ") == 8 &&
		      gpunvme_dtype_bits(GPUNVME_MODEL_SAFETENSORS, "F8_E4M3FN") == 0,
	      "FNUZ bits");
	/* wrong lengths for each new dtype, and sub-byte counts that leave bits over */
	ST_FAIL("{\"a\":" T("F8_E4M3FNUZ", "[3]", 0, 4) "}", 4, -EINVAL, "shape/bytes mismatch");
	ST_FAIL("{\"a\":" T("F8_E5M2FNUZ", "[3]", 0, 2) "}", 4, -EINVAL, "shape/bytes mismatch");
	ST_FAIL("{\"a\":" T("F8_E8M0", "[2,2]", 0, 3) "}", 4, -EINVAL, "shape/bytes mismatch");
	ST_FAIL("{\"a\":" T("F4", "[3]", 0, 2) "}", 4, -EINVAL, "not a whole number of bytes");
	ST_FAIL("{\"a\":" T("F4", "[1,1,1]", 0, 1) "}", 4, -EINVAL, "not a whole number of bytes");
	ST_FAIL("{\"a\":" T("F6_E2M3", "[2]", 0, 2) "}", 4, -EINVAL, "not a whole number of bytes");
	ST_FAIL("{\"a\":" T("F6_E3M2", "[3]", 0, 3) "}", 4, -EINVAL, "not a whole number of bytes");
	ST_FAIL("{\"a\":" T("F6_E3M2", "[4]", 0, 4) "}", 4, -EINVAL, "shape/bytes mismatch");
	ST_FAIL("{\"a\":" T("C64", "[1]", 0, 4) "}", 8, -EINVAL, "shape/bytes mismatch");
	ST_FAIL("{\"a\":" T("F8_E4M3FNUZZ", "[1]", 0, 1) "}", 4, -EINVAL, "unknown dtype");
	ST_FAIL("{\"a\":" T("f8_e4m3fnuz", "[1]", 0, 1) "}", 4, -EINVAL, "unknown dtype");
	/* F4 and F6 counts that do make whole bytes: 2 and 4 elements */
	snprintf(json, sizeof(json), "{\"a\":" T("F4", "[2]", 0, 1) ",\"b\":" T("F6_E2M3", "[2,2]", 1, 4) "}");
	b = st_file(json, 0, 4);
	m = PARSE_OK(b.p, b.n);
	CHECK(m && m->n_tensors == 2 && m->tensors[0].bytes == 1 && m->tensors[1].bytes == 3, "F4/F6 whole bytes");
	gpunvme_model_free(m);
	free(b.p);
}

static void st_meta(void)
{
	/* the writer's __metadata__, file order kept, escapes decoded */
	static const char *const kv[] = { "zeta", "1", "alpha", "a \"quoted\" \\ \xc3\xa9\n", "empty", "" };
	static const uint64_t s2[] = { 2 };
	static const struct st_tensor t[] = { { .name = "w", .dtype = "F16", .ndim = 1, .shape = s2, .begin = 0, .end = 4 } };
	struct bb b = st_written(kv, 3, t, 1, 4);
	struct gpunvme_model *m = PARSE_OK(b.p, b.n);
	if (m) {
		CHECK(m->n_meta == 3 && m->n_kv == 3 && m->meta, "n_meta %zu", m->n_meta);
		for (size_t i = 0; i < 3 && i < m->n_meta; i++)
			CHECK(!strcmp(m->meta[i].key, kv[2 * i]) && !strcmp(m->meta[i].value, kv[2 * i + 1]),
			      "meta %zu: \"%s\" = \"%s\"", i, m->meta[i].key, m->meta[i].value);
		CHECK(m->split_no == 0 && m->split_count == 1 && m->split_tensors == 1, "safetensors split fields");
		CHECK(m->tensors[0].ggml_type == -1 && m->tensors[0].file == 0, "safetensors ggml_type");
	}
	gpunvme_model_free(m);
	free(b.p);
	/* no __metadata__, null, an empty map: nothing kept */
	const char *none[] = { "{\"w\":" T("U8", "[1]", 0, 1) "}", "{\"__metadata__\":null,\"w\":" T("U8", "[1]", 0, 1) "}",
			       "{\"w\":" T("U8", "[1]", 0, 1) ",\"__metadata__\":{}}" };
	for (int i = 0; i < 3; i++) {
		b = st_file(none[i], 0, 1);
		m = PARSE_OK(b.p, b.n);
		CHECK(m && m->n_meta == 0 && !m->meta && m->n_kv == 0, "no metadata %d", i);
		gpunvme_model_free(m);
		free(b.p);
	}
	/* \u escapes in keys and values; many entries (the table grows) */
	char json[16384];
	size_t k = (size_t)snprintf(json, sizeof(json), "{\"__metadata__\":{\"k\\u00e9y\":\"\\ud83d\\ude00\"");
	for (int i = 0; i < 300; i++)
		k += (size_t)snprintf(json + k, sizeof(json) - k, ",\"m%d\":\"v%d\"", i, i);
	snprintf(json + k, sizeof(json) - k, "}}");
	b = st_file(json, 0, 0);
	m = PARSE_OK(b.p, b.n);
	if (m) {
		CHECK(m->n_meta == 301 && !strcmp(m->meta[0].key, "k\xc3\xa9y") &&
			      !strcmp(m->meta[0].value, "\xf0\x9f\x98\x80") && !strcmp(m->meta[300].key, "m299") &&
			      !strcmp(m->meta[300].value, "v299"),
		      "escaped metadata, 301 entries");
	}
	gpunvme_model_free(m);
	free(b.p);

	/* refusals: a value that is not a string names its key; duplicates; NUL */
	ST_FAIL("{\"__metadata__\":{\"a\":\"x\",\"n_layers\":12}}", 0, -EINVAL, "value of \"n_layers\" is '1'");
	ST_FAIL("{\"__metadata__\":{\"obj\":{\"x\":\"y\"}}}", 0, -EINVAL, "value of \"obj\" is '{'");
	ST_FAIL("{\"__metadata__\":{\"arr\":[\"x\"]}}", 0, -EINVAL, "must be strings");
	ST_FAIL("{\"__metadata__\":{\"t\":true}}", 0, -EINVAL, "value of \"t\"");
	ST_FAIL("{\"__metadata__\":{\"z\":null}}", 0, -EINVAL, "value of \"z\"");
	ST_FAIL("{\"__metadata__\":{\"a\":\"1\",\"b\":\"2\",\"a\":\"3\"}}", 0, -EINVAL, "duplicate __metadata__ key \"a\"");
	ST_FAIL("{\"__metadata__\":{\"k\":\"a\\u0000b\"}}", 0, -EINVAL, "NUL");
	ST_FAIL("{\"__metadata__\":{\"k\\u0000\":\"v\"}}", 0, -EINVAL, "NUL");
	ST_FAIL("{\"__metadata__\":[]}", 0, -EINVAL, "__metadata__ must be an object");
	ST_FAIL("{\"__metadata__\":{},\"__metadata__\":{}}", 0, -EINVAL, "duplicate \"__metadata__\"");
}

/* A GGUF file: `nkv` pairs written by the caller's kv bytes, the tensors t */
static struct bb gg_with_kv(const struct bb *kv, uint64_t nkv, struct ti *t, size_t n, uint64_t *base)
{
	struct bb b = { 0 };
	gguf_head(&b, 3, n, nkv);
	bb_put(&b, kv->p, kv->n);
	gg_infos(&b, t, n, 32);
	*base = gg_data(&b, t, n, 32);
	return b;
}

static struct ti split_t[] = {
	{ "blk.3.a", 0, 1, { 4 }, 16, 0 },
	{ "blk.3.b", 40, 2, { 64, 2 }, 72, 0 }, /* NVFP4: 36 per 64 */
	{ "blk.3.c", 41, 1, { 256 }, 36, 0 },   /* Q1_0: 18 per 128 */
};

static void gg_split_case(uint32_t no_type, uint64_t no, uint32_t count_type, uint64_t count, uint32_t tensors_type,
			  uint64_t tensors, int rc, const char *word, int line)
{
	static const uint8_t sz[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
	struct bb kv = { 0 };
	uint64_t nkv = 0, base;
	if (no_type != UINT32_MAX)
		gguf_key(&kv, "split.no", (enum gguf_type)no_type), bb_le(&kv, no, sz[no_type]), nkv++;
	if (count_type != UINT32_MAX)
		gguf_key(&kv, "split.count", (enum gguf_type)count_type), bb_le(&kv, count, sz[count_type]), nkv++;
	if (tensors_type != UINT32_MAX)
		gguf_key(&kv, "split.tensors.count", (enum gguf_type)tensors_type), bb_le(&kv, tensors, sz[tensors_type]),
			nkv++;
	struct bb b = gg_with_kv(&kv, nkv, split_t, 3, &base);
	expect_fail(b.p, b.n, rc, word, line);
	free(b.p);
	free(kv.p);
}

#define NONE UINT32_MAX
#define SPLIT_FAIL(nt, no, ct, c, tt, t, w) gg_split_case(nt, no, ct, c, tt, t, -EINVAL, w, __LINE__)

static void gguf_split(void)
{
	/* shard 2 of 4 as gguf-split writes it: only the split keys */
	struct bb kv = { 0 };
	uint64_t base;
	gguf_split_kv(&kv, 1, 4, 10);
	struct bb b = gg_with_kv(&kv, 3, split_t, 3, &base);
	struct gpunvme_model *m = PARSE_OK(b.p, b.n);
	if (m) {
		check_gguf(m, &b, split_t, 3, base, 3, 32, 3);
		CHECK(m->split_no == 1 && m->split_count == 4 && m->split_tensors == 10, "split %u/%u tensors %llu",
		      m->split_no, m->split_count, (unsigned long long)m->split_tensors);
		CHECK(m->tensors[1].ggml_type == 40 && !strcmp(m->tensors[1].dtype, "NVFP4") &&
			      m->tensors[2].ggml_type == 41 && !strcmp(m->tensors[2].dtype, "Q1_0"),
		      "NVFP4 / Q1_0 tensors");
	}
	gpunvme_model_free(m);
	free(b.p);
	/* the first shard: metadata, then the keys; the last shard: no == count - 1 */
	static const struct {
		uint16_t no, count;
		int32_t tensors;
	} good[] = { { 0, 2, 3 }, { 1, 2, 5 }, { 65534, 65535, 3 }, { 0, 1, 3 } };
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		kv.n = 0;
		gguf_kv_str(&kv, "general.architecture", "llama");
		gguf_split_kv(&kv, good[i].no, good[i].count, good[i].tensors);
		b = gg_with_kv(&kv, 4, split_t, 3, &base);
		m = PARSE_OK(b.p, b.n);
		CHECK(m && m->split_no == good[i].no && m->split_count == good[i].count &&
			      m->split_tensors == (uint64_t)good[i].tensors,
		      "split case %zu", i);
		gpunvme_model_free(m);
		free(b.p);
	}
	/* gguf-split --merge writes split.count = 0 into the merged file: a
	 * whole model, reported as 1 */
	kv.n = 0;
	gguf_split_kv(&kv, 0, 0, 3);
	b = gg_with_kv(&kv, 3, split_t, 3, &base);
	m = PARSE_OK(b.p, b.n);
	CHECK(m && m->split_no == 0 && m->split_count == 1 && m->split_tensors == 3, "merged file");
	gpunvme_model_free(m);
	free(b.p);
	/* split.no alone (count absent: 1) */
	kv.n = 0;
	gguf_kv_u16(&kv, "split.no", 0);
	b = gg_with_kv(&kv, 1, split_t, 3, &base);
	m = PARSE_OK(b.p, b.n);
	CHECK(m && m->split_no == 0 && m->split_count == 1 && m->split_tensors == 3, "split.no alone");
	gpunvme_model_free(m);
	free(b.p);
	free(kv.p);

	/* refusals */
	SPLIT_FAIL(GGUF_U16, 2, GGUF_U16, 2, GGUF_I32, 3, "split.no 2 is not below split.count 2");
	SPLIT_FAIL(GGUF_U16, 5, GGUF_U16, 3, GGUF_I32, 3, "split.no 5 is not below split.count 3");
	SPLIT_FAIL(GGUF_U16, 1, NONE, 0, NONE, 0, "split.no 1 is not below split.count 1");
	SPLIT_FAIL(GGUF_U16, 1, GGUF_U16, 0, GGUF_I32, 3, "split.no 1 is not below split.count 1");
	SPLIT_FAIL(NONE, 0, GGUF_U16, 2, GGUF_I32, 3, "split.no is missing");
	SPLIT_FAIL(GGUF_U16, 0, GGUF_U16, 2, NONE, 0, "split.tensors.count is missing");
	SPLIT_FAIL(GGUF_U16, 0, GGUF_U16, 2, GGUF_I32, 2, "less than the 3 tensors");
	SPLIT_FAIL(GGUF_U16, 0, GGUF_U16, 2, GGUF_I32, 0xffffffff, "negative");
	/* value types: what llama.cpp's get_key would refuse */
	SPLIT_FAIL(GGUF_U32, 0, GGUF_U16, 2, GGUF_I32, 3, "split.no has value type 4 (uint32), expected uint16");
	SPLIT_FAIL(GGUF_I16, 0, GGUF_U16, 2, GGUF_I32, 3, "split.no has value type 3 (int16)");
	SPLIT_FAIL(GGUF_U16, 0, GGUF_U32, 2, GGUF_I32, 3, "split.count has value type 4 (uint32), expected uint16");
	SPLIT_FAIL(GGUF_U16, 0, GGUF_U8, 2, GGUF_I32, 3, "split.count has value type 0 (uint8)");
	SPLIT_FAIL(GGUF_U16, 0, GGUF_U16, 2, GGUF_U32, 3, "split.tensors.count has value type 4 (uint32), expected int32");
	SPLIT_FAIL(GGUF_U16, 0, GGUF_U16, 2, GGUF_I64, 3, "split.tensors.count has value type 11 (int64)");
	SPLIT_FAIL(GGUF_U16, 0, GGUF_U16, 2, GGUF_U16, 3, "split.tensors.count has value type 2 (uint16)");
	b = gg_one(3, 0, 1), gguf_kv_str(&b, "split.count", "2"), GG_FAIL(b, -EINVAL, "split.count has value type 8 (string)");
	b = gg_one(3, 0, 1), gguf_key(&b, "split.no", GGUF_ARR), gguf_arr(&b, GGUF_U16, 1), bb_le(&b, 0, 2),
	GG_FAIL(b, -EINVAL, "split.no has value type 9 (array)");
	b = gg_one(3, 0, 2), gguf_kv_u16(&b, "split.count", 2), gguf_kv_u16(&b, "split.count", 2),
	GG_FAIL(b, -EINVAL, "duplicate metadata key \"split.count\"");
	/* a split key cut short by the end of the file */
	b = gg_one(3, 0, 1), gguf_key(&b, "split.tensors.count", GGUF_I32), bb_le(&b, 3, 2);
	expect_fail(b.p, b.n, -EINVAL, "truncated header", __LINE__);
	free(b.p);
}

/* New ggml types: their block rules, as for the old ones */
static void gguf_new_types(void)
{
	static const uint64_t ne32[] = { 32 }, ne64[] = { 64 }, ne128[] = { 128 }, ne192[] = { 192, 1 };
	struct bb b;
	b = gg_one(3, 1, 0), gguf_tensor_info(&b, "t", 1, ne32, 40, 0), GG_FAIL(b, -EINVAL, "not a multiple of the NVFP4 block size 64");
	b = gg_one(3, 1, 0), gguf_tensor_info(&b, "t", 1, ne64, 41, 0), GG_FAIL(b, -EINVAL, "not a multiple of the Q1_0 block size 128");
	b = gg_one(3, 1, 0), gguf_tensor_info(&b, "t", 1, ne32, 42, 0), GG_FAIL(b, -EINVAL, "not a multiple of the Q2_0 block size 64");
	b = gg_one(3, 1, 0), gguf_tensor_info(&b, "t", 1, ne128, 43, 0), GG_FAIL(b, -EINVAL, "unknown ggml type 43");
	b = gg_one(3, 1, 0), gguf_tensor_info(&b, "t", 1, ne128, 36, 0), GG_FAIL(b, -EINVAL, "unknown ggml type 36");
	/* 3 NVFP4 blocks = 108 bytes: past the end with only 64 bytes of data */
	b = gg_one(3, 1, 0), gguf_tensor_info(&b, "t", 2, ne192, 40, 0), GG_FAIL(b, -EINVAL, "past the end of the file");
}

/* A header larger than the reader's window (a vocabulary of 30000
 * strings) in front of 8 MiB of tensor data: parsed through the callback
 * in windows, without reading the data. */
static void gguf_window(void)
{
	struct bb b = { 0 };
	gguf_head(&b, 3, 2, 2);
	gguf_kv_str(&b, "general.architecture", "llama");
	gguf_key(&b, "tokenizer.ggml.tokens", GGUF_ARR), gguf_arr(&b, GGUF_STR, 30000);
	for (int i = 0; i < 30000; i++) {
		char tok[32];
		snprintf(tok, sizeof(tok), "tok%d%s", i, i % 7 ? "" : "_with_a_longer_tail");
		gguf_str(&b, tok);
	}
	struct ti t[] = {
		{ "a", 8, 2, { 4096, 1024 }, 4096 / 32 * 34 * 1024ull, 0 }, /* Q8_0 */
		{ "b", 0, 1, { 4096 }, 16384, 0 },
	};
	gg_infos(&b, t, 2, 32);
	uint64_t hdr = b.n;
	CHECK(hdr > (256u << 10), "header of %llu bytes should exceed several windows", (unsigned long long)hdr);
	uint64_t base = gg_data(&b, t, 2, 32);
	struct src s = src_of(b.p, b.n);
	s.piece = 4093;
	struct gpunvme_model *m = NULL;
	int rc = gpunvme_model_parse(src_read, &s, b.n, &m);
	CHECK(rc == 0, "window: %d", rc);
	if (m)
		check_gguf(m, &b, t, 2, base, 3, 32, 2);
	CHECK(!s.outside, "window: read past the end");
	CHECK(s.bytes < hdr + (256u << 10) && s.bytes < b.n / 4, "window: %llu bytes read for a %llu byte header",
	      (unsigned long long)s.bytes, (unsigned long long)hdr);
	CHECK(s.max_len <= (64u << 10), "window: a read of %llu bytes", (unsigned long long)s.max_len);
	gpunvme_model_free(m);

	/* a read error in the middle of the vocabulary is passed on */
	s = src_of(b.p, b.n);
	s.fail_at = hdr / 2;
	rc = gpunvme_model_parse(src_read, &s, b.n, &m);
	CHECK(rc == -EIO && !m && strstr(gpunvme_last_error(), "failed"), "read error: %d", rc);
	free(b.p);

	/* -EFBIG: a 150 MiB string value in a (virtual) 300 MiB file */
	b = (struct bb){ 0 };
	gguf_head(&b, 3, 0, 1);
	gguf_key(&b, "big", GGUF_STR), bb_u64(&b, 150u << 20);
	s = src_of(b.p, b.n);
	s.size = 300u << 20;
	rc = gpunvme_model_parse(src_read, &s, s.size, &m);
	CHECK(rc == -EFBIG && !m && strstr(gpunvme_last_error(), "larger than"), "gguf header over limit: %d", rc);
	CHECK(s.bytes < (1u << 20), "%llu bytes read for a refused header", (unsigned long long)s.bytes);
	free(b.p);
}

/* ---- any format ------------------------------------------------------------------ */

static void not_a_model(void)
{
	EXPECT_FAIL("", 0, -EINVAL, "empty file");
	EXPECT_FAIL("hello, world", 12, -EINVAL, "not a safetensors or GGUF file");
	EXPECT_FAIL("GGU", 3, -EINVAL, "not a safetensors or GGUF file");
	EXPECT_FAIL("\x02\0\0\0\0\0\0\0[]", 10, -EINVAL, "not a safetensors or GGUF file");
	EXPECT_FAIL("\x02\0\0\0\0\0\0\0", 8, -EINVAL, "not a safetensors or GGUF file");
	EXPECT_FAIL("GGUF", 4, -EINVAL, "truncated");

	struct gpunvme_model *m = (void *)1;
	CHECK(gpunvme_model_parse(NULL, NULL, 10, &m) == -EINVAL && !m, "no callback");
	CHECK(gpunvme_model_parse_mem("x", 1, NULL) == -EINVAL, "no output");
	CHECK(gpunvme_model_parse_mem(NULL, 4, &m) == -EINVAL, "no buffer");
	gpunvme_model_free(NULL);
	CHECK(!strcmp(gpunvme_model_format_name(GPUNVME_MODEL_SAFETENSORS), "safetensors") &&
		      !strcmp(gpunvme_model_format_name(GPUNVME_MODEL_GGUF), "gguf") &&
		      !strcmp(gpunvme_model_format_name(0), "unknown"),
	      "format names");

	/* the read callback's error is passed on */
	static const uint64_t s1[] = { 1 };
	static const struct st_tensor a1 = { .name = "a", .dtype = "U8", .ndim = 1, .shape = s1, .begin = 0, .end = 1 };
	struct bb b = st_written(NULL, 0, &a1, 1, 1);
	struct src s = src_of(b.p, b.n);
	s.fail_at = 12;
	int rc = gpunvme_model_parse(src_read, &s, b.n, &m);
	CHECK(rc == -EIO && !m && strstr(gpunvme_last_error(), "failed"), "safetensors read error: %d", rc);
	free(b.p);
}

/* Every proper prefix of a valid file must fail cleanly (its last tensor
 * ends at the end of the file, so no prefix is valid). */
static void truncations(const struct bb *b, const char *what)
{
	int bad = 0;
	for (size_t n = 0; n < b->n; n++) {
		uint8_t *p = malloc(n ? n : 1); /* exact size: ASan sees any overrun */
		memcpy(p, b->p, n);
		struct gpunvme_model *m = NULL;
		struct src s = src_of(p, n);
		s.piece = 1 + n % 13;
		int r1 = gpunvme_model_parse_mem(p, n, &m);
		if (r1 != -EINVAL || m || !*gpunvme_last_error())
			bad++;
		gpunvme_model_free(m);
		m = NULL;
		int r2 = gpunvme_model_parse(src_read, &s, n, &m);
		if (r2 != r1 || m || s.outside)
			bad++;
		gpunvme_model_free(m);
		if (bad == 1 && (r1 != -EINVAL || r2 != r1))
			CHECK(0, "%s truncated to %zu bytes: %d / %d", what, n, r1, r2);
		free(p);
	}
	CHECK(bad == 0, "%s: %d truncations not refused cleanly", what, bad);
}

static void truncation_all(void)
{
	struct bb b = st_written(xy_meta, 1, xy_tensors, 2, 10);
	truncations(&b, "safetensors");
	free(b.p);
	uint64_t base, nkv;
	b = gg_basic_file(3, true, &base, &nkv);
	truncations(&b, "gguf");
	free(b.p);
}

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Random byte changes of valid files: any result, never a crash (ASan). */
static void corruption(void)
{
	uint64_t seed = 0x9e3779b97f4a7c15ull, base, nkv;
	struct bb f[2];
	f[0] = st_written(xy_meta, 1, xy_tensors, 2, 10);
	f[1] = gg_basic_file(3, true, &base, &nkv);
	int ok = 0;
	for (int iter = 0; iter < 4000; iter++) {
		struct bb *src = &f[iter & 1];
		uint8_t *p = malloc(src->n);
		memcpy(p, src->p, src->n);
		int flips = 1 + (int)(rng(&seed) % 4);
		for (int k = 0; k < flips; k++) {
			size_t at = (size_t)(rng(&seed) % (iter & 1 ? 200 : src->n));
			uint64_t r = rng(&seed);
			p[at] = (r & 3) == 0 ? 0xff : (r & 3) == 1 ? 0 : (uint8_t)(r >> 8);
		}
		struct gpunvme_model *m = NULL;
		int rc = gpunvme_model_parse_mem(p, src->n, &m);
		CHECK(rc <= 0 && (rc == 0) == (m != NULL), "corruption %d: rc %d", iter, rc);
		if (!rc) {
			ok++;
			for (size_t i = 0; i < m->n_tensors; i++)
				CHECK(m->tensors[i].offset + m->tensors[i].bytes <= src->n, "tensor outside the file");
		}
		gpunvme_model_free(m);
		free(p);
	}
	printf("corruption: %d of 4000 changed files still valid\n", ok);
	free(f[0].p);
	free(f[1].p);
}

/* ---- patterns ------------------------------------------------------------------------ */

static void patterns(void)
{
	static const struct {
		const char *pat, *name;
		int want;
	} c[] = {
		{ "*", "blk.0.attn_q.weight", 1 },
		{ "*", "", 1 },
		{ "", "", 1 },
		{ "", "a", 0 },
		{ "**", "abc", 1 },
		{ "blk.*.attn_q.weight", "blk.12.attn_q.weight", 1 },
		{ "blk.*.attn_q.weight", "blk.12.attn_k.weight", 0 },
		{ "blk.?.ffn*", "blk.3.ffn_up", 1 },
		{ "blk.?.ffn*", "blk.13.ffn_up", 0 },
		{ "blk.[0-4].*", "blk.3.x", 1 },
		{ "blk.[0-4].*", "blk.5.x", 0 },
		{ "blk.[!0-4].*", "blk.5.x", 1 },
		{ "blk.[!0-4].*", "blk.2.x", 0 },
		{ "blk.[^0-4].*", "blk.5.x", 1 },
		{ "[ab]c", "bc", 1 },
		{ "[ab]c", "cc", 0 },
		{ "[]]", "]", 1 },
		{ "[!]]", "a", 1 },
		{ "[!]]", "]", 0 },
		{ "[a\\]]x", "]x", 1 },
		{ "[a-]", "-", 1 },
		{ "a\\*b", "a*b", 1 },
		{ "a\\*b", "axb", 0 },
		{ "a\\?", "a?", 1 },
		{ "a\\?", "ab", 0 },
		{ "a\\[b]", "a[b]", 1 },
		{ "a\\\\?", "a\\x", 1 },
		{ "a\\", "a\\", 1 },
		{ "a[", "a[", 1 },
		{ "a[b", "a[b", 1 },
		{ "x,y*", "yz", 1 },
		{ "x,y*", "x", 1 },
		{ "x,y*", "z", 0 },
		{ "x,", "", 1 },
		{ "a\\,b", "a,b", 1 },
		{ "a\\,b", "a", 0 },
		{ "[,]x", ",x", 1 },
		{ "*.weight,*.bias", "ln.bias", 1 },
		{ "*.weight,*.bias", "ln.scale", 0 },
		{ "*a*b*c*", "xxaxxbxxcxx", 1 },
		{ "*a*b*c*", "acb", 0 },
		{ "*.weight", "weight", 0 },
		{ "?", "", 0 },
		{ "\xc3\xa9*", "\xc3\xa9t\xc3\xa9", 1 },
	};
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++)
		CHECK(gpunvme_tensor_match(c[i].pat, c[i].name) == c[i].want, "match(\"%s\", \"%s\") != %d", c[i].pat,
		      c[i].name, c[i].want);
	CHECK(gpunvme_tensor_match(NULL, "a") == 0 && gpunvme_tensor_match("a", NULL) == 0, "NULL arguments");
	/* many stars against a long mismatch: quadratic at worst, not exponential */
	char name[4001];
	memset(name, 'a', 4000);
	name[4000] = 0;
	CHECK(gpunvme_tensor_match("*a*a*a*a*a*a*a*a*a*a*b", name) == 0, "pathological pattern");
}

int main(void)
{
	not_a_model();
	st_layout();
	st_every_dtype();
	st_errors();
	st_tiling();
	st_limits();
	gguf_layout();
	gguf_every_type();
	gguf_errors();
	gguf_window();
	st_dtype_lengths();
	st_meta();
	gguf_split();
	gguf_new_types();
	truncation_all();
	corruption();
	patterns();
	return check_finish("test_model");
}
