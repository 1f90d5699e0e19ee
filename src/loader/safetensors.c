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
 * Unlike the reference implementation, bytes of the data section that no
 * tensor covers (gaps, a tail) are accepted: they are harmless to an index,
 * while overlapping tensors are refused.
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
#include "loader/model_internal.h"

#define JS_MAX_DEPTH 64u          /* bits of the skip stack */
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

/* ---- JSON scanner ---------------------------------------------------------- */

struct js {
	const uint8_t *base, *p, *end;
};

#define JS_ERR(j, fmt, ...)                                                                    \
	gpunvme_set_error(-EINVAL, "safetensors: bad JSON header: " fmt " (header byte %zu)", \
			  ##__VA_ARGS__, (size_t)((j)->p - (j)->base))

static void js_ws(struct js *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

/* Next non-blank byte, or -1 at the end of the header. */
static int js_peek(struct js *j)
{
	js_ws(j);
	return j->p < j->end ? *j->p : -1;
}

/* What stands at j->p, for messages: a printable character quoted, any
 * other byte in hex (a NUL would cut the message short). */
static const char *js_found(const struct js *j, char b[24])
{
	if (j->p >= j->end)
		return "the end of the header";
	if (*j->p >= 0x20 && *j->p < 0x7f)
		snprintf(b, 24, "'%c'", *j->p);
	else
		snprintf(b, 24, "byte 0x%02x", *j->p);
	return b;
}

static int js_expect(struct js *j, char c)
{
	char b[24];
	if (js_peek(j) != c)
		return JS_ERR(j, "expected '%c', found %s", c, js_found(j, b));
	j->p++;
	return 0;
}

/* Length of the UTF-8 sequence at p (RFC 3629 §4: no overlong forms, no
 * surrogates, nothing above U+10FFFF), 0 if invalid. */
static size_t utf8_len(const uint8_t *p, const uint8_t *end)
{
	uint8_t c = p[0];
	size_t n;
	uint8_t lo = 0x80, hi = 0xbf;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		if (c == 0xe0)
			lo = 0xa0;
		if (c == 0xed)
			hi = 0x9f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		if (c == 0xf0)
			lo = 0x90;
		if (c == 0xf4)
			hi = 0x8f;
	} else
		return 0;
	if ((size_t)(end - p) < n || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
	return n;
}

static int hex4(const uint8_t *p, const uint8_t *end, uint32_t *v)
{
	if (end - p < 4)
		return -1;
	*v = 0;
	for (int i = 0; i < 4; i++) {
		uint8_t c = p[i];
		uint32_t d;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10u;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10u;
		else
			return -1;
		*v = *v << 4 | d;
	}
	return 0;
}

static size_t put_utf8(uint8_t *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (uint8_t)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (uint8_t)(0xc0 | cp >> 6);
		o[1] = (uint8_t)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (uint8_t)(0xe0 | cp >> 12);
		o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (uint8_t)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (uint8_t)(0xf0 | cp >> 18);
	o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (uint8_t)(0x80 | (cp & 0x3f));
	return 4;
}

/* \uXXXX at p (p at the 'u'), a surrogate pair taken whole (RFC 8259 §7):
 * the code point and the bytes used, or an error. */
static int js_unicode(struct js *j, uint32_t *cp)
{
	uint32_t v, lo;
	if (hex4(j->p + 1, j->end, &v))
		return JS_ERR(j, "bad \\u escape (four hex digits expected)");
	j->p += 5;
	if (v >= 0xdc00 && v <= 0xdfff)
		return JS_ERR(j, "unpaired low surrogate \\u%04x", (unsigned)v);
	if (v >= 0xd800 && v <= 0xdbff) {
		if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || hex4(j->p + 2, j->end, &lo) ||
		    lo < 0xdc00 || lo > 0xdfff)
			return JS_ERR(j, "unpaired high surrogate \\u%04x", (unsigned)v);
		j->p += 6;
		v = 0x10000 + ((v - 0xd800) << 10) + (lo - 0xdc00);
	}
	*cp = v;
	return 0;
}

/* A string at j->p ('"'). With out: the decoded bytes, NUL added, in a new
 * buffer (decoding never lengthens: every escape is at least as long as
 * the UTF-8 it stands for, so the raw length bounds the allocation). */
static int js_string(struct js *j, char **out, size_t *len)
{
	char b[24];
	if (js_peek(j) != '"')
		return JS_ERR(j, "expected a string, found %s", js_found(j, b));
	const uint8_t *q = ++j->p;
	uint8_t *o = NULL;
	size_t n = 0;
	if (out) {
		/* the raw extent (to the first unescaped quote) bounds the
		 * decoded length */
		while (q < j->end && *q != '"')
			q += *q == '\\' && q + 1 < j->end ? 2 : 1;
		o = malloc((size_t)(q - j->p) + 1);
		if (!o)
			return gpunvme_set_error(-ENOMEM, "safetensors: out of memory");
	}
	int rc = 0;
	while (!rc) {
		if (j->p >= j->end) {
			rc = JS_ERR(j, "unterminated string");
			break;
		}
		uint8_t c = *j->p;
		if (c == '"') {
			j->p++;
			break;
		}
		if (c < 0x20) {
			rc = JS_ERR(j, "unescaped control character 0x%02x in a string", c);
		} else if (c == '\\') {
			if (j->end - j->p < 2) {
				rc = JS_ERR(j, "unterminated string");
				break;
			}
			static const char esc_in[] = "\"\\/bfnrt", esc_out[] = "\"\\/\b\f\n\r\t";
			const char *e = memchr(esc_in, j->p[1], sizeof(esc_in) - 1);
			uint32_t cp = 0;
			if (e) {
				cp = (uint8_t)esc_out[e - esc_in];
				j->p += 2;
			} else if (j->p[1] == 'u') {
				j->p++;
				rc = js_unicode(j, &cp);
			} else {
				j->p++;
				rc = JS_ERR(j, "bad escape: '\\' then %s", js_found(j, b));
			}
			if (!rc && o)
				n += put_utf8(o + n, cp);
		} else if (c < 0x80) {
			if (o)
				o[n++] = c;
			j->p++;
		} else {
			size_t k = utf8_len(j->p, j->end);
			if (!k) {
				rc = JS_ERR(j, "invalid UTF-8 in a string");
				break;
			}
			if (o)
				memcpy(o + n, j->p, k);
			n += k;
			j->p += k;
		}
	}
	if (rc) {
		free(o);
		return rc;
	}
	if (o) {
		o[n] = 0;
		*out = (char *)o;
	}
	if (len)
		*len = n;
	return 0;
}

/* A JSON number (RFC 8259 §6), only checked for syntax. */
static int js_number(struct js *j)
{
	const uint8_t *p = j->p, *e = j->end;
	if (p < e && *p == '-')
		p++;
	if (p < e && *p == '0')
		p++;
	else if (p < e && *p >= '1' && *p <= '9')
		while (p < e && *p >= '0' && *p <= '9')
			p++;
	else
		return JS_ERR(j, "bad number");
	if (p < e && *p == '.') {
		if (++p >= e || *p < '0' || *p > '9')
			return JS_ERR(j, "bad number (digits must follow '.')");
		while (p < e && *p >= '0' && *p <= '9')
			p++;
	}
	if (p < e && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < e && (*p == '+' || *p == '-'))
			p++;
		if (p >= e || *p < '0' || *p > '9')
			return JS_ERR(j, "bad number (digits must follow the exponent)");
		while (p < e && *p >= '0' && *p <= '9')
			p++;
	}
	j->p = p;
	return 0;
}

/* A size: a non-negative integer without fraction or exponent that fits
 * 64 bits (the reference implementation reads these as usize). */
static int js_uint(struct js *j, const char *what, uint64_t *v)
{
	int c = js_peek(j);
	if (c < '0' || c > '9')
		return JS_ERR(j, "%s: expected a non-negative integer", what);
	const uint8_t *s = j->p;
	*v = 0;
	while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
		if (*v > UINT64_MAX / 10 || *v * 10 > UINT64_MAX - (uint64_t)(*j->p - '0'))
			return JS_ERR(j, "%s: integer too large for 64 bits", what);
		*v = *v * 10 + (uint64_t)(*j->p++ - '0');
	}
	if (*s == '0' && j->p - s > 1)
		return JS_ERR(j, "%s: leading zero in a number", what);
	if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
		return JS_ERR(j, "%s: expected an integer, found a fraction or exponent", what);
	return 0;
}

static int js_literal(struct js *j)
{
	static const char *const lit[] = { "true", "false", "null" };
	for (int i = 0; i < 3; i++) {
		size_t n = strlen(lit[i]);
		if ((size_t)(j->end - j->p) >= n && !memcmp(j->p, lit[i], n)) {
			j->p += n;
			return 0;
		}
	}
	char b[24];
	return JS_ERR(j, "unexpected character: %s", js_found(j, b));
}

static int js_scalar(struct js *j)
{
	int c = js_peek(j);
	if (c == '"')
		return js_string(j, NULL, NULL);
	if (c == '-' || (c >= '0' && c <= '9'))
		return js_number(j);
	if (c < 0)
		return JS_ERR(j, "expected a value, found the end of the header");
	return js_literal(j);
}

/* "key" : at j->p */
static int js_key(struct js *j, char **key, size_t *len)
{
	int rc = js_string(j, key, len);
	if (!rc && (rc = js_expect(j, ':')) && key) {
		free(*key);
		*key = NULL;
	}
	return rc;
}

/* Skip one value of any kind, at nesting depth `depth` already. The open
 * containers are a stack of bits (1 = object), so no recursion; each pass
 * of the loop consumes at least one byte, which bounds it by N. */
static int js_skip(struct js *j, unsigned depth)
{
	uint64_t objs = 0;
	unsigned d = 0;
	int rc;
	for (;;) {
		int c = js_peek(j);
		if (c == '{' || c == '[') {
			if (depth + d + 1 > JS_MAX_DEPTH)
				return JS_ERR(j, "nested deeper than %u levels", JS_MAX_DEPTH);
			j->p++;
			objs = (objs & ~(1ull << d)) | ((uint64_t)(c == '{') << d);
			d++;
			if (js_peek(j) == (c == '{' ? '}' : ']'))
				j->p++, d--;
			else if (c == '{' && (rc = js_key(j, NULL, NULL)))
				return rc;
			else
				continue;
		} else if ((rc = js_scalar(j))) {
			return rc;
		}
		/* a value is complete: close containers until one takes more */
		for (;;) {
			if (d == 0)
				return 0;
			bool obj = objs >> (d - 1) & 1;
			c = js_peek(j);
			if (c == ',') {
				j->p++;
				if (obj && (rc = js_key(j, NULL, NULL)))
					return rc;
				break;
			}
			if (c != (obj ? '}' : ']'))
				return JS_ERR(j, "expected ',' or '%c'", obj ? '}' : ']');
			j->p++;
			d--;
		}
	}
}

/* Members of an object: calls fn(arg, key) with j->p at each value; the
 * object's '{' is at j->p. Each pass consumes the key, so at most N passes. */
typedef int (*js_member_fn)(struct js *j, void *arg, const char *key, size_t len);

static int js_object(struct js *j, js_member_fn fn, void *arg)
{
	int rc = js_expect(j, '{');
	if (rc)
		return rc;
	if (js_peek(j) == '}') {
		j->p++;
		return 0;
	}
	for (;;) {
		char *key;
		size_t len;
		if ((rc = js_key(j, &key, &len)))
			return rc;
		rc = fn(j, arg, key, len);
		free(key);
		if (rc)
			return rc;
		int c = js_peek(j);
		if (c != '}' && c != ',')
			return JS_ERR(j, "expected ',' or '}' after a member");
		j->p++;
		if (c == '}')
			return 0;
	}
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
	struct js j = { h, h, h + n };
	int rc = js_object(&j, top_member, s);
	if (rc)
		return rc;
	/* the spec lets writers pad the header with spaces (0x20) for
	 * alignment; JSON allows other blanks too */
	if (js_peek(&j) >= 0)
		return JS_ERR(&j, "trailing characters after the header object");
	return 0;
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
		rc = model_check_overlap(m, "safetensors");
	return rc;
}
