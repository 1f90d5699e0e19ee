/* SPDX-License-Identifier: BSD-2-Clause */
/* The JSON scanner of loader/json.h. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader/json.h"

void js_ws(struct js *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

/* Next non-blank byte, or -1 at the end of the header. */
int js_peek(struct js *j)
{
	js_ws(j);
	return j->p < j->end ? *j->p : -1;
}

/* What stands at j->p, for messages: a printable character quoted, any
 * other byte in hex (a NUL would cut the message short). */
const char *js_found(const struct js *j, char b[24])
{
	if (j->p >= j->end)
		return "the end of the text";
	if (*j->p >= 0x20 && *j->p < 0x7f)
		snprintf(b, 24, "'%c'", *j->p);
	else
		snprintf(b, 24, "byte 0x%02x", *j->p);
	return b;
}

int js_expect(struct js *j, char c)
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
int js_string(struct js *j, char **out, size_t *len)
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
			return gpunvme_set_error(-ENOMEM, "%s: out of memory", j->what);
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
int js_uint(struct js *j, const char *what, uint64_t *v)
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

int js_literal(struct js *j)
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
		return JS_ERR(j, "expected a value, found the end of the text");
	return js_literal(j);
}

/* "key" : at j->p */
int js_key(struct js *j, char **key, size_t *len)
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
int js_skip(struct js *j, unsigned depth)
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

int js_object(struct js *j, js_member_fn fn, void *arg)
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

