/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * safetensors index (huggingface/safetensors, "Format" in its README):
 *   8 bytes   N, unsigned little-endian 64-bit: the size of the header
 *   N bytes   a UTF-8 JSON object (may be padded with trailing spaces):
 *             "NAME": {"dtype": "F16", "shape": [d0, ...],
 *                      "data_offsets": [BEGIN, END]}, ...
 *             plus an optional "__metadata__": {string: string}
 *   the rest  the data section; BEGIN/END are relative to its start 8 + N.
 *
 * The JSON parser is strict RFC 8259 (no comments, no trailing commas, no
 * leading zeros, control characters escaped, UTF-8 validated, \uXXXX with
 * surrogate pairs decoded), iterative (nesting is bounded by JS_MAX_DEPTH
 * through an explicit stack of bits, never by recursion), and takes the
 * numbers that are sizes as non-negative integers that fit 64 bits.
 *
 * The tensors must tile the data section exactly, as the reference
 * implementation demands (safetensors/src/lib.rs, Metadata::validate and
 * SafeTensors::read_metadata): in data_offsets order each tensor begins
 * where the one before it ends (the first at 0), else InvalidOffset(name);
 * and the last one ends where the file ends, else MetadataIncompleteBuffer.
 * A file with a gap or a tail is one the reference refuses to load (a writer
 * bug, or a file cut or padded after it was written), so it is refused here
 * too, naming the tensors and offsets.
 *
 * __metadata__ is kept (gpunvme_model.meta, in file order): the README
 * defines it as "free form string-to-string map. Arbitrary JSON is not
 * allowed, all values must be strings", and the reference deserialises it
 * as HashMap<String, String>, so a value of another type is an error
 * naming its key. Duplicate keys are refused ("Duplicate keys are
 * disallowed", README). A key or value that decodes to a NUL character
 * (\u0000) is refused too: JSON and Rust strings allow it, but the C
 * strings of the index would silently cut it short.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "loader/json.h"
#include "loader/model_internal.h"

#define READ_CHUNK   (1u << 20)   /* header read in pieces of this size */

/* ---- dtypes ------------------------------------------------------------- */

/* The Dtype enum of the reference implementation (safetensors/src/tensor.rs,
 * checked at huggingface/safetensors 24b0b28, May 2026) with its bitsize():
 * every dtype it can write. F8_E4M3FNUZ / F8_E5M2FNUZ (AMD's FP8 variants,
 * arXiv 2206.02915) came with safetensors#711. Sub-byte types (F4, F6_*)
 * only make whole bytes when the element count allows: the reference's
 * validate() computes elements * bitsize and refuses a remainder modulo 8
 * (MisalignedSlice), which the shape check below does too. */
static const struct {
	const char *name;
	unsigned bits;
} st_dtypes[] = {
	{ "BOOL", 8 },        { "U8", 8 },          { "I8", 8 },       { "F8_E5M2", 8 },
	{ "F8_E4M3", 8 },     { "F8_E8M0", 8 },     { "F8_E4M3FNUZ", 8 }, { "F8_E5M2FNUZ", 8 },
	{ "F4", 4 },          { "F6_E2M3", 6 },     { "F6_E3M2", 6 },  { "I16", 16 },
	{ "U16", 16 },        { "F16", 16 },        { "BF16", 16 },    { "I32", 32 },
	{ "U32", 32 },        { "F32", 32 },        { "F64", 64 },     { "I64", 64 },
	{ "U64", 64 },        { "C64", 64 },
};

static unsigned st_bits(const char *dtype)
{
	for (size_t i = 0; i < sizeof(st_dtypes) / sizeof(st_dtypes[0]); i++)
		if (!strcmp(st_dtypes[i].name, dtype))
			return st_dtypes[i].bits;
	return 0;
}

double model_safetensors_bits(const char *dtype)
{
	return st_bits(dtype);
}

/* ---- tensor entries --------------------------------------------------------- */

struct st_info {
	const char *name;
	char *dtype;
	uint64_t shape[GPUNVME_TENSOR_MAX_DIMS];
	uint32_t ndim;
	uint64_t off[2];
	bool have_dtype, have_shape, have_off;
};

/* [u64, ...] into v (at most max), count in *n */
static int js_uint_array(struct js *j, const char *what, uint64_t *v, uint32_t max, uint32_t *n)
{
	int rc = js_expect(j, '[');
	*n = 0;
	if (rc)
		return rc;
	if (js_peek(j) == ']') {
		j->p++;
		return 0;
	}
	for (;;) {
		uint64_t x = 0;
		if ((rc = js_uint(j, what, &x)))
			return rc;
		if (*n == max)
			return max == GPUNVME_TENSOR_MAX_DIMS
				       ? JS_ERR(j, "%s: too many dimensions (at most %u)", what, max)
				       : JS_ERR(j, "%s: more than %u numbers [begin, end]", what, max);
		v[(*n)++] = x;
		int c = js_peek(j);
		if (c == ']') {
			j->p++;
			return 0;
		}
		if (c != ',')
			return JS_ERR(j, "%s: expected ',' or ']'", what);
		j->p++;
	}
}

static int info_member(struct js *j, void *arg, const char *key, size_t len)
{
	(void)len;
	struct st_info *t = arg;
	bool *seen = !strcmp(key, "dtype")	  ? &t->have_dtype
		     : !strcmp(key, "shape")	  ? &t->have_shape
		     : !strcmp(key, "data_offsets") ? &t->have_off
						    : NULL;
	if (!seen) /* unknown members are ignored, as serde does by default */
		return js_skip(j, 2);
	if (*seen)
		return JS_ERR(j, "tensor \"%.64s\": duplicate \"%s\"", t->name, key);
	*seen = true;
	if (seen == &t->have_dtype)
		return js_string(j, &t->dtype, NULL);
	char what[96];
	snprintf(what, sizeof(what), "tensor \"%.64s\" %s", t->name, key);
	if (seen == &t->have_shape)
		return js_uint_array(j, what, t->shape, GPUNVME_TENSOR_MAX_DIMS, &t->ndim);
	uint32_t n;
	int rc = js_uint_array(j, what, t->off, 2, &n);
	if (!rc && n != 2)
		return JS_ERR(j, "tensor \"%.64s\": data_offsets needs two numbers [begin, end]", t->name);
	return rc;
}

#define ST_ERR(fmt, ...) gpunvme_set_error(-EINVAL, "safetensors: " fmt, ##__VA_ARGS__)

/* The checks of the reference implementation's validate(), per tensor. */
static int info_check(const struct st_info *t, uint64_t data_len, struct gpunvme_tensor *o)
{
	if (!t->have_dtype || !t->have_shape || !t->have_off)
		return ST_ERR("tensor \"%.64s\": missing \"%s\"", t->name,
			      !t->have_dtype ? "dtype" : !t->have_shape ? "shape" : "data_offsets");
	unsigned bits = st_bits(t->dtype);
	if (!bits)
		return ST_ERR("tensor \"%.64s\": unknown dtype \"%.16s\"", t->name, t->dtype);
	if (t->off[0] > t->off[1])
		return ST_ERR("tensor \"%.64s\": data_offsets [%llu, %llu] not in order (begin > end)", t->name,
			      (unsigned long long)t->off[0], (unsigned long long)t->off[1]);
	if (t->off[1] > data_len)
		return ST_ERR("tensor \"%.64s\": data_offsets end %llu past the end of the data section (%llu bytes)",
			      t->name, (unsigned long long)t->off[1], (unsigned long long)data_len);
	uint64_t count = 1, bytes;
	for (uint32_t i = 0; i < t->ndim; i++)
		if (!model_mul(count, t->shape[i], &count))
			return ST_ERR("tensor \"%.64s\": shape element count overflows 64 bits", t->name);
	/* whole-byte dtypes: count * bytes; sub-byte ones: count * bits,
	 * which must make whole bytes */
	bool ok = bits % 8 ? model_mul(count, bits, &bytes) : model_mul(count, bits / 8, &bytes);
	if (!ok)
		return ST_ERR("tensor \"%.64s\": shape byte size overflows 64 bits", t->name);
	if (bits % 8) {
		if (bytes % 8)
			return ST_ERR("tensor \"%.64s\": %llu elements of %s are not a whole number of bytes",
				      t->name, (unsigned long long)count, t->dtype);
		bytes /= 8;
	}
	if (bytes != t->off[1] - t->off[0])
		return ST_ERR("tensor \"%.64s\": shape/bytes mismatch: %llu elements of %s are %llu bytes, "
			      "data_offsets give %llu", t->name, (unsigned long long)count, t->dtype,
			      (unsigned long long)bytes, (unsigned long long)(t->off[1] - t->off[0]));
	snprintf(o->dtype, sizeof(o->dtype), "%s", t->dtype);
	o->ggml_type = -1; /* not a GGUF tensor */
	o->file = 0;
	o->ndim = t->ndim;
	memcpy(o->shape, t->shape, t->ndim * sizeof(t->shape[0]));
	o->bytes = t->off[1] - t->off[0];
	return 0;
}

/* ---- the header object ------------------------------------------------------- */

struct st_parse {
	struct gpunvme_model *m;
	size_t cap, meta_cap;
	uint64_t data_len;
	bool have_meta;
};

static int meta_member(struct js *j, void *arg, const char *key, size_t len)
{
	struct st_parse *s = arg;
	struct gpunvme_model *m = s->m;
	char b[24];
	if (strlen(key) != len)
		return JS_ERR(j, "__metadata__ key \"%.64s\" contains a NUL character (\\u0000)", key);
	if (js_peek(j) != '"')
		return JS_ERR(j, "__metadata__ values must be strings: the value of \"%.64s\" is %s (write it "
			      "as a JSON string)", key, js_found(j, b));
	if (m->n_meta == s->meta_cap) {
		size_t n = s->meta_cap ? s->meta_cap * 2 : 8;
		struct gpunvme_model_meta *p = n > SIZE_MAX / sizeof(*p) ? NULL : realloc(m->meta, n * sizeof(*p));
		if (!p)
			return gpunvme_set_error(-ENOMEM, "safetensors: out of memory for %zu __metadata__ entries", n);
		m->meta = p;
		s->meta_cap = n;
	}
	struct gpunvme_model_meta *e = &m->meta[m->n_meta];
	size_t vlen = 0;
	e->value = NULL;
	if (!(e->key = strdup(key)))
		return gpunvme_set_error(-ENOMEM, "safetensors: out of memory");
	int rc = js_string(j, &e->value, &vlen);
	if (!rc && strlen(e->value) != vlen)
		rc = JS_ERR(j, "__metadata__ value of \"%.64s\" contains a NUL character (\\u0000)", key);
	if (rc) {
		free(e->key);
		free(e->value);
		return rc;
	}
	m->n_meta++;
	m->n_kv++;
	return 0;
}

static int cmp_meta(const void *a, const void *b)
{
	const struct gpunvme_model_meta *x = *(const struct gpunvme_model_meta *const *)a;
	const struct gpunvme_model_meta *y = *(const struct gpunvme_model_meta *const *)b;
	return strcmp(x->key, y->key);
}

/* README: "Duplicate keys are disallowed"; sorted pointers keep the table
 * in file order and the check n log n. */
static int check_meta_keys(const struct gpunvme_model *m)
{
	if (m->n_meta < 2)
		return 0;
	const struct gpunvme_model_meta **v = malloc(m->n_meta * sizeof(*v));
	if (!v)
		return gpunvme_set_error(-ENOMEM, "safetensors: out of memory");
	for (size_t i = 0; i < m->n_meta; i++)
		v[i] = &m->meta[i];
	qsort(v, m->n_meta, sizeof(*v), cmp_meta);
	int rc = 0;
	for (size_t i = 1; i < m->n_meta && !rc; i++)
		if (!strcmp(v[i - 1]->key, v[i]->key))
			rc = ST_ERR("duplicate __metadata__ key \"%.80s\" (keys must be unique)", v[i]->key);
	free(v);
	return rc;
}

static int top_member(struct js *j, void *arg, const char *key, size_t len)
{
	struct st_parse *s = arg;
	int rc;
	if (!strcmp(key, "__metadata__")) {
		if (s->have_meta)
			return JS_ERR(j, "duplicate \"__metadata__\"");
		s->have_meta = true;
		if (js_peek(j) == 'n') /* null: the Option<HashMap> of the reference */
			return js_literal(j);
		if (js_peek(j) != '{')
			return JS_ERR(j, "__metadata__ must be an object of strings");
		return js_object(j, meta_member, s);
	}
	if (strlen(key) != len) /* a \u0000 in the name: it could not be a C string */
		return JS_ERR(j, "tensor name contains a NUL character");
	struct st_info t = { .name = key };
	if (js_peek(j) != '{')
		return JS_ERR(j, "tensor \"%.64s\": expected an object {dtype, shape, data_offsets}", key);
	rc = js_object(j, info_member, &t);
	struct gpunvme_tensor *o = NULL;
	if (!rc)
		rc = model_push_tensor(s->m, &s->cap, &o);
	if (!rc) {
		o->name = NULL;
		rc = info_check(&t, s->data_len, o);
		if (!rc && !(o->name = strdup(key)))
			rc = gpunvme_set_error(-ENOMEM, "safetensors: out of memory");
		if (rc)
			s->m->n_tensors--; /* o holds nothing to free */
		else
			o->offset = s->m->data_offset + t.off[0];
	}
	free(t.dtype);
	return rc;
}

static int parse_header(const uint8_t *h, size_t n, struct st_parse *s)
{
	struct js j = { h, h, h + n, "safetensors" };
	int rc = js_object(&j, top_member, s);
	if (rc)
		return rc;
	/* the spec lets writers pad the header with spaces (0x20) for
	 * alignment; JSON allows other blanks too */
	if (js_peek(&j) >= 0)
		return JS_ERR(&j, "trailing characters after the header object");
	return 0;
}

static int cmp_data_offsets(const void *a, const void *b)
{
	const struct gpunvme_tensor *x = *(const struct gpunvme_tensor *const *)a;
	const struct gpunvme_tensor *y = *(const struct gpunvme_tensor *const *)b;
	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	if (x->bytes != y->bytes)
		return x->bytes < y->bytes ? -1 : 1;
	return x < y ? -1 : x > y; /* table order: a deterministic message */
}

/* The reference's validate() and read_metadata() (see the top): sorted by
 * (begin, end), each tensor begins where the previous one ended, and the
 * last end is the size of the data section. */
static int check_tiling(const struct gpunvme_model *m, uint64_t data_len)
{
	const struct gpunvme_tensor **v = malloc((m->n_tensors ? m->n_tensors : 1) * sizeof(*v));
	if (!v)
		return gpunvme_set_error(-ENOMEM, "safetensors: out of memory");
	for (size_t i = 0; i < m->n_tensors; i++)
		v[i] = &m->tensors[i];
	qsort(v, m->n_tensors, sizeof(*v), cmp_data_offsets);
	int rc = 0;
	uint64_t end = 0; /* relative to the data section */
	const struct gpunvme_tensor *prev = NULL;
	for (size_t i = 0; i < m->n_tensors && !rc; i++) {
		uint64_t b = v[i]->offset - m->data_offset, e = b + v[i]->bytes;
		if (b < end)
			rc = ST_ERR("overlapping tensors \"%.64s\" [%llu, %llu] and \"%.64s\" [%llu, %llu] (data_offsets): "
				    "each tensor must begin where the previous one ends (the reference refuses this "
				    "file: InvalidOffset)", prev->name, (unsigned long long)(prev->offset - m->data_offset),
				    (unsigned long long)end, v[i]->name, (unsigned long long)b, (unsigned long long)e);
		else if (b > end && prev)
			rc = ST_ERR("tensor \"%.64s\": data_offsets [%llu, %llu] leave a gap of %llu bytes after "
				    "\"%.64s\", which ends at %llu: each tensor must begin where the previous one ends "
				    "(the reference refuses this file: InvalidOffset)", v[i]->name, (unsigned long long)b,
				    (unsigned long long)e, (unsigned long long)(b - end), prev->name,
				    (unsigned long long)end);
		else if (b > end)
			rc = ST_ERR("tensor \"%.64s\": data_offsets [%llu, %llu]: the first tensor must begin at 0, "
				    "%llu bytes are before it (the reference refuses this file: InvalidOffset)",
				    v[i]->name, (unsigned long long)b, (unsigned long long)e, (unsigned long long)b);
		end = e;
		prev = v[i];
	}
	if (!rc && end != data_len) /* info_check keeps every end within data_len */
		rc = prev ? ST_ERR("%llu bytes after the last tensor \"%.64s\" (data_offsets end %llu, the data "
				   "section holds %llu): the last tensor must end where the file ends (the reference "
				   "refuses this file: MetadataIncompleteBuffer)",
				   (unsigned long long)(data_len - end), prev->name, (unsigned long long)end,
				   (unsigned long long)data_len)
			  : ST_ERR("%llu bytes of data after a header with no tensors: the data section must be empty "
				   "(the reference refuses this file: MetadataIncompleteBuffer)",
				   (unsigned long long)data_len);
	free(v);
	return rc;
}

int model_parse_safetensors(const struct model_src *src, struct gpunvme_model *m)
{
	uint8_t b[8];
	int rc = model_read(src, 0, b, 8);
	if (rc)
		return rc;
	uint64_t n = model_le64(b);
	if (n > src->size - 8)
		return ST_ERR("header length %llu past the end of the file (%llu bytes): truncated or not safetensors",
			      (unsigned long long)n, (unsigned long long)src->size);
	if (n > GPUNVME_MODEL_MAX_HEADER)
		return gpunvme_set_error(-EFBIG, "safetensors: header of %llu bytes is over the limit of %u",
					 (unsigned long long)n, GPUNVME_MODEL_MAX_HEADER);
	uint8_t *h = malloc(n ? n : 1);
	if (!h)
		return gpunvme_set_error(-ENOMEM, "safetensors: out of memory for a %llu byte header",
					 (unsigned long long)n);
	for (uint64_t done = 0; done < n && !rc; done += READ_CHUNK)
		rc = model_read(src, 8 + done, h + done, n - done < READ_CHUNK ? n - done : READ_CHUNK);
	m->version = 0;
	m->alignment = 1;
	m->data_offset = 8 + n;
	struct st_parse s = { m, 0, 0, src->size - 8 - n, false };
	if (!rc)
		rc = parse_header(h, n, &s);
	free(h);
	if (!rc)
		rc = check_meta_keys(m);
	if (!rc)
		rc = model_check_names(m, "safetensors");
	if (!rc)
		rc = check_tiling(m, src->size - 8 - n);
	return rc;
}
