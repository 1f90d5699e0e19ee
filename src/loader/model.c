/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Model file index, format-independent part: detection of the format from
 * the first bytes, the entry points, the tensor table and the checks both
 * formats share (duplicate names, overlapping data), dtype sizes and the
 * tensor name patterns of gpunvme_tensor_match.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "loader/model_internal.h"

/* ---- reading ------------------------------------------------------------ */

int model_read(const struct model_src *src, uint64_t off, void *buf, size_t len)
{
	if (off > src->size || len > src->size - off)
		return gpunvme_set_error(-EINVAL, "model: read of %zu bytes at %llu past the end of the file (%llu bytes)",
					 len, (unsigned long long)off, (unsigned long long)src->size);
	if (len == 0)
		return 0;
	int rc = src->read(src->ctx, off, buf, len);
	if (rc < 0)
		return gpunvme_set_error(rc, "model: read of %zu bytes at offset %llu failed (%s)", len,
					 (unsigned long long)off, strerror(-rc));
	if (rc > 0)
		return gpunvme_set_error(-EIO, "model: read callback returned %d (expected 0 or -errno)", rc);
	return 0;
}

struct mem_src {
	const uint8_t *p;
	size_t n;
};

static int mem_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	const struct mem_src *m = ctx;
	if (off > m->n || len > m->n - off)
		return -EIO;
	memcpy(buf, m->p + off, len);
	return 0;
}

/* ---- the tensor table ---------------------------------------------------- */

int model_push_tensor(struct gpunvme_model *m, size_t *cap, struct gpunvme_tensor **out)
{
	if (m->n_tensors == *cap) {
		size_t ncap = *cap ? *cap * 2 : 16;
		if (ncap > SIZE_MAX / sizeof(*m->tensors))
			return gpunvme_set_error(-ENOMEM, "model: too many tensors");
		struct gpunvme_tensor *t = realloc(m->tensors, ncap * sizeof(*t));
		if (!t)
			return gpunvme_set_error(-ENOMEM, "model: out of memory for %zu tensors", ncap);
		m->tensors = t;
		*cap = ncap;
	}
	*out = &m->tensors[m->n_tensors++];
	memset(*out, 0, sizeof(**out));
	return 0;
}

static int cmp_name(const void *a, const void *b)
{
	const struct gpunvme_tensor *x = *(const struct gpunvme_tensor *const *)a;
	const struct gpunvme_tensor *y = *(const struct gpunvme_tensor *const *)b;
	int c = strcmp(x->name, y->name);
	return c ? c : (x < y ? -1 : x > y); /* equal names in table order: a deterministic pair */
}

int model_find_duplicate(const struct gpunvme_model *m, const struct gpunvme_tensor **a,
			 const struct gpunvme_tensor **b)
{
	if (m->n_tensors < 2)
		return 0;
	const struct gpunvme_tensor **v = malloc(m->n_tensors * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < m->n_tensors; i++)
		v[i] = &m->tensors[i];
	/* sorted, equal names are neighbours: n log n for any count */
	qsort(v, m->n_tensors, sizeof(*v), cmp_name);
	int found = 0;
	for (size_t i = 1; i < m->n_tensors && !found; i++)
		if (!strcmp(v[i - 1]->name, v[i]->name)) {
			*a = v[i - 1];
			*b = v[i];
			found = 1;
		}
	free(v);
	return found;
}

int model_check_names(const struct gpunvme_model *m, const char *fmt)
{
	const struct gpunvme_tensor *a, *b;
	int rc = model_find_duplicate(m, &a, &b);
	if (rc < 0)
		return gpunvme_set_error(rc, "%s: out of memory", fmt);
	if (rc)
		return gpunvme_set_error(-EINVAL, "%s: duplicate tensor name \"%.80s\"", fmt, b->name);
	return 0;
}

static int cmp_offset(const void *a, const void *b)
{
	const struct gpunvme_tensor *x = *(const struct gpunvme_tensor *const *)a;
	const struct gpunvme_tensor *y = *(const struct gpunvme_tensor *const *)b;
	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return x < y ? -1 : x > y; /* table order: a stable, deterministic result */
}

int model_check_overlap(const struct gpunvme_model *m, const char *fmt)
{
	size_t n = 0;
	const struct gpunvme_tensor **v = malloc((m->n_tensors ? m->n_tensors : 1) * sizeof(*v));
	if (!v)
		return gpunvme_set_error(-ENOMEM, "%s: out of memory", fmt);
	for (size_t i = 0; i < m->n_tensors; i++)
		if (m->tensors[i].bytes)
			v[n++] = &m->tensors[i];
	qsort(v, n, sizeof(*v), cmp_offset);
	/* sorted by start, a range overlaps an earlier one exactly when it
	 * starts before the furthest end seen so far */
	int rc = 0;
	const struct gpunvme_tensor *far = NULL;
	for (size_t i = 0; i < n && !rc; i++) {
		if (far && v[i]->offset < far->offset + far->bytes)
			rc = gpunvme_set_error(-EINVAL,
					       "%s: overlapping tensors \"%.64s\" [%llu, %llu) and \"%.64s\" [%llu, %llu)",
					       fmt, far->name, (unsigned long long)far->offset,
					       (unsigned long long)(far->offset + far->bytes), v[i]->name,
					       (unsigned long long)v[i]->offset,
					       (unsigned long long)(v[i]->offset + v[i]->bytes));
		if (!far || v[i]->offset + v[i]->bytes > far->offset + far->bytes)
			far = v[i];
	}
	free(v);
	return rc;
}

/* ---- entry points --------------------------------------------------------- */

void gpunvme_model_free(struct gpunvme_model *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n_tensors; i++)
		free(m->tensors[i].name);
	free(m->tensors);
	for (size_t i = 0; i < m->n_meta; i++) {
		free(m->meta[i].key);
		free(m->meta[i].value);
	}
	free(m->meta);
	free(m);
}

/* GGUF starts with its magic (gguf.md "File Structure"); safetensors with
 * an 8-byte header length and then the JSON header, which must begin with
 * '{' (the reference implementation refuses anything else). */
static int detect(const struct model_src *src, enum gpunvme_model_format *f)
{
	uint8_t h[9];
	if (src->size == 0)
		return gpunvme_set_error(-EINVAL, "model: empty file, not a safetensors or GGUF file");
	size_t n = src->size < sizeof(h) ? (size_t)src->size : sizeof(h);
	int rc = model_read(src, 0, h, n);
	if (rc)
		return rc;
	if (n >= 4 && !memcmp(h, "GGUF", 4)) {
		*f = GPUNVME_MODEL_GGUF;
		return 0;
	}
	if (n == 9 && h[8] == '{') {
		*f = GPUNVME_MODEL_SAFETENSORS;
		return 0;
	}
	return gpunvme_set_error(-EINVAL, "model: not a safetensors or GGUF file (%llu bytes, no GGUF magic, "
				 "no safetensors header)", (unsigned long long)src->size);
}

int gpunvme_model_parse(gpunvme_model_read_fn read, void *ctx, uint64_t file_size, struct gpunvme_model **out)
{
	if (!out)
		return gpunvme_set_error(-EINVAL, "model: no output pointer");
	*out = NULL;
	if (!read)
		return gpunvme_set_error(-EINVAL, "model: no read callback");
	struct model_src src = { read, ctx, file_size };
	enum gpunvme_model_format f = GPUNVME_MODEL_SAFETENSORS;
	int rc = detect(&src, &f);
	if (rc)
		return rc;
	struct gpunvme_model *m = calloc(1, sizeof(*m));
	if (!m)
		return gpunvme_set_error(-ENOMEM, "model: out of memory");
	m->format = f;
	m->file_size = file_size;
	/* a file that is not a gguf-split shard is the whole model (gguf.c
	 * sets these from the split.* keys; safetensors keeps them) */
	m->split_no = 0;
	m->split_count = 1;
	rc = f == GPUNVME_MODEL_GGUF ? model_parse_gguf(&src, m) : model_parse_safetensors(&src, m);
	if (!rc && f == GPUNVME_MODEL_SAFETENSORS)
		m->split_tensors = m->n_tensors;
	if (rc) {
		gpunvme_model_free(m);
		return rc;
	}
	*out = m;
	return 0;
}

int gpunvme_model_parse_mem(const void *buf, size_t len, struct gpunvme_model **out)
{
	struct mem_src m = { buf, len };
	if (!buf && len)
		return gpunvme_set_error(-EINVAL, "model: no buffer");
	return gpunvme_model_parse(mem_read, &m, len, out);
}

const char *gpunvme_model_format_name(enum gpunvme_model_format f)
{
	switch (f) {
	case GPUNVME_MODEL_SAFETENSORS:
		return "safetensors";
	case GPUNVME_MODEL_GGUF:
		return "gguf";
	}
	return "unknown";
}

double gpunvme_dtype_bits(enum gpunvme_model_format f, const char *dtype)
{
	if (!dtype)
		return 0;
	if (f == GPUNVME_MODEL_SAFETENSORS)
		return model_safetensors_bits(dtype);
	if (f == GPUNVME_MODEL_GGUF)
		return model_gguf_bits(dtype);
	return 0;
}

/* ---- tensor name patterns ---------------------------------------------------
 * POSIX shell pattern rules (XCU §2.13.1) on bytes: '?' one byte, '*' any
 * run of bytes ('/' and '.' included: tensor names are not paths), '[...]'
 * a set with ranges, '!' or '^' first negates, ']' first is a member, '\'
 * quotes the next character everywhere; a '[' without its ']' is an
 * ordinary character. Written here instead of fnmatch(3) so that every
 * platform and libc agrees.
 */

/* The bracket expression at p ('[') within [p, end): returns the character
 * after its ']' and whether c is in the set, or NULL when it has no ']'. */
static const char *bracket(const char *p, const char *end, unsigned char c, bool *hit)
{
	bool neg = false, in = false;
	p++;
	if (p < end && (*p == '!' || *p == '^')) {
		neg = true;
		p++;
	}
	for (const char *first = p; p < end;) {
		if (*p == ']' && p != first) {
			*hit = in != neg;
			return p + 1;
		}
		if (*p == '\\' && p + 1 < end)
			p++;
		unsigned char lo = (unsigned char)*p++, hi = lo;
		if (p + 1 < end && *p == '-' && p[1] != ']') {
			p++;
			if (*p == '\\' && p + 1 < end)
				p++;
			hi = (unsigned char)*p++;
		}
		if (lo <= c && c <= hi)
			in = true;
	}
	return NULL;
}

/* One pattern [p, end) against the whole of s. On a mismatch after a '*',
 * the '*' takes one more byte and matching resumes after it: only the last
 * '*' needs revisiting, so the work is at most len(p) * len(s) steps (each
 * step advances p or s, each retry advances star_s). */
static bool glob1(const char *p, const char *end, const char *s)
{
	const char *star_p = NULL, *star_s = NULL;
	for (;;) {
		if (p < end) {
			char c = *p;
			if (c == '*') {
				star_p = ++p;
				star_s = s;
				continue;
			}
			if (*s) {
				bool hit = false;
				const char *q = c == '[' ? bracket(p, end, (unsigned char)*s, &hit) : NULL;
				if (q) {
					if (hit) {
						p = q;
						s++;
						continue;
					}
				} else {
					bool esc = c == '\\' && p + 1 < end;
					if (esc)
						c = *++p;
					if ((c == '?' && !esc) || c == *s) {
						p++;
						s++;
						continue;
					}
				}
			}
		} else if (!*s) {
			return true;
		}
		if (!star_p || !*star_s)
			return false;
		p = star_p;
		s = ++star_s;
	}
}

/* End of the pattern starting at p: the first ',' that is neither quoted
 * by '\' nor inside a bracket expression. */
static const char *pattern_end(const char *p, const char *end)
{
	while (p < end && *p != ',') {
		bool hit;
		const char *q;
		if (*p == '\\' && p + 1 < end)
			p += 2;
		else if (*p == '[' && (q = bracket(p, end, 0, &hit)))
			p = q;
		else
			p++;
	}
	return p;
}

int gpunvme_tensor_match(const char *patterns, const char *name)
{
	if (!patterns || !name)
		return 0;
	const char *end = patterns + strlen(patterns);
	for (const char *p = patterns;;) {
		const char *e = pattern_end(p, end);
		if (glob1(p, e, name))
			return 1;
		if (e == end)
			return 0;
		p = e + 1;
	}
}
