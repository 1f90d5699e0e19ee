/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A strict RFC 8259 JSON scanner for the two JSON texts a model has: the
 * safetensors header and a Hugging Face model.safetensors.index.json. No
 * tree is built: callers walk objects member by member (js_object) and
 * take the values they want, skipping the rest (js_skip). No recursion:
 * nesting is bounded by JS_MAX_DEPTH through a stack of bits; every step
 * consumes input, so a text of N bytes is scanned in O(N).
 *
 * Every error is -EINVAL with "<what>: bad JSON: ... (byte K)"; strings
 * are UTF-8 validated (RFC 3629) and \uXXXX escapes decoded, surrogate
 * pairs included.
 */
#ifndef GPUNVME_LOADER_JSON_H
#define GPUNVME_LOADER_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define JS_MAX_DEPTH 64u          /* bits of the skip stack */

struct js {
	const uint8_t *base, *p, *end;
	const char *what;         /* message prefix: "safetensors", "model.safetensors.index.json" */
};

#define JS_ERR(j, fmt, ...)                                                                        \
	gpunvme_set_error(-EINVAL, "%s: bad JSON: " fmt " (byte %zu)", (j)->what, ##__VA_ARGS__, \
			  (size_t)((j)->p - (j)->base))

void js_ws(struct js *j);
/* Next non-blank byte, or -1 at the end of the text. */
int js_peek(struct js *j);
/* What stands at j->p, for messages (b: room for 24 bytes). */
const char *js_found(const struct js *j, char b[24]);
int js_expect(struct js *j, char c);
/* A string at j->p. out (may be NULL: skip): the decoded bytes, NUL added,
 * malloc'ed; len (may be NULL): the decoded length (a \u0000 makes it
 * differ from strlen). */
int js_string(struct js *j, char **out, size_t *len);
/* A non-negative integer that fits 64 bits (no fraction, no exponent). */
int js_uint(struct js *j, const char *what, uint64_t *v);
/* true, false or null */
int js_literal(struct js *j);
/* "key" then ':' (key, len may be NULL) */
int js_key(struct js *j, char **key, size_t *len);
/* Skip one value of any kind at nesting depth `depth` already. */
int js_skip(struct js *j, unsigned depth);
/* Members of the object at j->p ('{'): fn(arg, key) is called with j->p
 * at each value and must consume it. */
typedef int (*js_member_fn)(struct js *j, void *arg, const char *key, size_t len);
int js_object(struct js *j, js_member_fn fn, void *arg);

#endif
