/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Model sets (gpunvme/modelset.h): a model as it lies on disk, possibly in
 * several files, resolved inside a file system and merged into one index
 * and one address space for one layer loader.
 *
 * What is recognised, and from whom the rules come:
 * - Hugging Face directories, as transformers' from_pretrained resolves
 *   them: model.safetensors (SAFE_WEIGHTS_NAME) first, else
 *   model.safetensors.index.json (SAFE_WEIGHTS_INDEX_NAME), whose
 *   "weight_map" maps every tensor name to the shard file holding it,
 *   relative to the index's directory; the shards are the sorted set of
 *   the map's values.
 * - llama.cpp split GGUF (gguf-split): shard k of n is named
 *   "<prefix>-%05d-of-%05d.gguf" (llama_split_path) with k 1-based, and
 *   holds split.no = k - 1, split.count = n and, in every shard,
 *   split.tensors.count = the tensors of all shards.
 * Nothing partial is returned: a missing shard, a shard that disagrees
 * with its set, or an index that does not match its shards' headers fails
 * the whole set with a message naming the file.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "gpunvme/loader.h"
#include "gpunvme/modelset.h"
#include "loader/json.h"
#include "loader/model_internal.h"

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"
/* An index lists one line per tensor: a few MiB for the largest models. */
#define INDEX_MAX_BYTES (64u << 20)
/* "-00001-of-00003.gguf": the split suffix llama.cpp writes and reads */
#define SPLIT_SUFFIX_LEN 20

/* ---- one file ------------------------------------------------------------------ */

struct file_src {
	struct gpunvme_fs *fs;
	uint64_t ino;
};

static int file_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	const struct file_src *f = ctx;
	int64_t n = gpunvme_fs_pread(f->fs, f->ino, buf, len, off);
	if (n < 0)
		return (int)n;
	return (uint64_t)n == len ? 0 : -EIO;
}

/* Look a path up and require a regular file: its inode and size. */
static int regular_file(struct gpunvme_fs *fs, const char *path, uint64_t *ino, uint64_t *size)
{
	struct gpunvme_stat st;
	int rc = gpunvme_fs_lookup(fs, path, ino);
	if (rc)
		return rc;
	if ((rc = gpunvme_fs_stat(fs, *ino, &st)))
		return rc;
	if ((st.mode & 0170000) != 0100000)
		return gpunvme_set_error(-EINVAL, "%s: not a regular file", path);
	*size = st.size;
	return 0;
}

/* Index one model file of the set into f (path copied). */
static int open_file(struct gpunvme_fs *fs, const char *path, struct gpunvme_model_file *f)
{
	struct file_src src = { fs, 0 };
	int rc = regular_file(fs, path, &src.ino, &f->size);
	if (rc)
		return rc;
	f->ino = src.ino;
	if (!(f->path = strdup(path)))
		return gpunvme_set_error(-ENOMEM, "model set: out of memory");
	if ((rc = gpunvme_model_parse(file_read, &src, f->size, &f->model))) {
		/* the parser's message, with the file it is about */
		char why[200];
		snprintf(why, sizeof(why), "%s", gpunvme_last_error());
		return gpunvme_set_error(rc, "%s: %s", path, why);
	}
	return 0;
}

/* ---- the set --------------------------------------------------------------------- */

static struct gpunvme_model_set *set_new(void)
{
	struct gpunvme_model_set *s = calloc(1, sizeof(*s));
	if (!s)
		gpunvme_set_error(-ENOMEM, "model set: out of memory");
	return s;
}

/* One more file slot, zeroed, counted in n_files. */
static int set_slot(struct gpunvme_model_set *s, struct gpunvme_model_file **f)
{
	if (s->n_files >= GPUNVME_MODEL_SET_MAX_FILES)
		return gpunvme_set_error(-EINVAL, "model set: more than %d files", GPUNVME_MODEL_SET_MAX_FILES);
	struct gpunvme_model_file *v = realloc(s->files, (s->n_files + 1) * sizeof(*v));
	if (!v)
		return gpunvme_set_error(-ENOMEM, "model set: out of memory");
	s->files = v;
	*f = &v[s->n_files++];
	memset(*f, 0, sizeof(**f));
	return 0;
}

static int set_add(struct gpunvme_model_set *s, struct gpunvme_fs *fs, const char *path)
{
	struct gpunvme_model_file *f = NULL;
	int rc = set_slot(s, &f);
	return rc ? rc : open_file(fs, path, f);
}

void gpunvme_model_set_free(struct gpunvme_model_set *s)
{
	if (!s)
		return;
	for (size_t k = 0; k < s->n_files; k++) {
		free(s->files[k].path);
		gpunvme_model_free(s->files[k].model);
	}
	free(s->files);
	gpunvme_model_free(s->model);
	free(s->ext);
	free(s);
}

const struct gpunvme_model_file *gpunvme_model_set_file(const struct gpunvme_model_set *s, uint64_t off,
							uint64_t *file_off)
{
	size_t lo = 0, hi = s->n_files;
	while (lo < hi) { /* the last file whose base is <= off */
		size_t mid = lo + (hi - lo) / 2;
		if (s->files[mid].base <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	const struct gpunvme_model_file *f = &s->files[lo - 1];
	if (off - f->base >= f->size)
		return NULL; /* in the gap after it, or past the end */
	if (file_off)
		*file_off = off - f->base;
	return f;
}

/* A tensor name in two files of the set: the set would be ambiguous (a
 * state dict has one value per name). */
static int check_unique(const struct gpunvme_model_set *s)
{
	const struct gpunvme_tensor *a, *b;
	int rc = model_find_duplicate(s->model, &a, &b);
	if (rc < 0)
		return gpunvme_set_error(rc, "model set: out of memory");
	if (rc)
		return gpunvme_set_error(-EINVAL, "tensor \"%.80s\" is in both %s and %s: a model's names are unique",
					 b->name, s->files[a->file].path, s->files[b->file].path);
	return 0;
}

/*
 * Lay the files end to end (file k + 1 starts at the first multiple of
 * GPUNVME_MODEL_SET_ALIGN more than GPUNVME_MODEL_RUN_GAP past the end of
 * file k, so a tensor keeps its offset modulo 4096 and no run joins two
 * files), shift every extent and tensor there, and merge the indexes.
 */
static int set_merge(struct gpunvme_model_set *s, struct gpunvme_fs *fs)
{
	size_t n_ext = 0, n_t = 0;
	uint64_t base = 0;
	for (size_t k = 0; k < s->n_files; k++) {
		struct gpunvme_model_file *f = &s->files[k];
		if (k) {
			const struct gpunvme_model_file *p = &s->files[k - 1];
			uint64_t end = p->base + p->size + GPUNVME_MODEL_RUN_GAP + 1;
			if (end < p->base || end > UINT64_MAX - GPUNVME_MODEL_SET_ALIGN)
				return gpunvme_set_error(-EFBIG, "model set: files too large to lay out");
			base = (end + GPUNVME_MODEL_SET_ALIGN - 1) & ~(GPUNVME_MODEL_SET_ALIGN - 1);
		}
		f->base = base;
		n_t += f->model->n_tensors;
	}
	const struct gpunvme_model_file *last = &s->files[s->n_files - 1];
	s->size = last->base + last->size;

	struct gpunvme_model *m = calloc(1, sizeof(*m));
	if (!m || !(m->tensors = calloc(n_t ? n_t : 1, sizeof(*m->tensors)))) {
		free(m);
		return gpunvme_set_error(-ENOMEM, "model set: out of memory for %zu tensors", n_t);
	}
	s->model = m;
	const struct gpunvme_model *m0 = s->files[0].model;
	m->format = m0->format;
	m->file_size = s->size;
	m->data_offset = m0->data_offset;
	m->version = m0->version;
	m->alignment = m0->alignment;
	m->n_kv = m0->n_kv;
	m->split_no = 0;
	m->split_count = 1;
	m->split_tensors = n_t;
	if (m0->n_meta) {
		if (!(m->meta = calloc(m0->n_meta, sizeof(*m->meta))))
			return gpunvme_set_error(-ENOMEM, "model set: out of memory");
		for (size_t i = 0; i < m0->n_meta; i++, m->n_meta++)
			if (!(m->meta[i].key = strdup(m0->meta[i].key)) || !(m->meta[i].value = strdup(m0->meta[i].value)))
				return gpunvme_set_error(-ENOMEM, "model set: out of memory");
	}
	for (size_t k = 0; k < s->n_files; k++) {
		const struct gpunvme_model_file *f = &s->files[k];
		for (size_t i = 0; i < f->model->n_tensors; i++) {
			struct gpunvme_tensor *t = &m->tensors[m->n_tensors];
			*t = f->model->tensors[i];
			if (!(t->name = strdup(t->name)))
				return gpunvme_set_error(-ENOMEM, "model set: out of memory");
			m->n_tensors++;
			t->offset += f->base;
			t->file = (uint32_t)k;
		}
	}

	/* extents: each file's, shifted to its base (in file order, so the
	 * table stays sorted by logical offset) */
	for (size_t k = 0; k < s->n_files; k++) {
		struct gpunvme_extent *e = NULL;
		size_t n = 0;
		int rc = gpunvme_fs_extents(fs, s->files[k].ino, &e, &n);
		if (rc) {
			/* the file system names an inode; the user knows the file
			 * (ext4 inline_data: a small file kept in its inode) */
			char why[400];
			snprintf(why, sizeof(why), "%s", gpunvme_last_error());
			return gpunvme_set_error(rc, "%s: %s", s->files[k].path, why);
		}
		struct gpunvme_extent *v = realloc(s->ext, (n_ext + n + 1) * sizeof(*v));
		if (!v) {
			free(e);
			return gpunvme_set_error(-ENOMEM, "model set: out of memory for extents");
		}
		s->ext = v;
		for (size_t i = 0; i < n; i++) {
			v[n_ext + i] = e[i];
			v[n_ext + i].logical += s->files[k].base;
		}
		n_ext += n;
		free(e);
	}
	s->n_ext = n_ext;
	return check_unique(s);
}

/* ---- paths ------------------------------------------------------------------------ */

/* dir + "/" + name, malloc'ed ("/" + name for the root) */
static char *path_join(const char *dir, size_t dlen, const char *name)
{
	while (dlen > 1 && dir[dlen - 1] == '/')
		dlen--;
	size_t n = strlen(name);
	char *p = malloc(dlen + n + 2);
	if (!p) {
		gpunvme_set_error(-ENOMEM, "model set: out of memory");
		return NULL;
	}
	memcpy(p, dir, dlen);
	size_t o = dlen;
	if (!(dlen == 1 && dir[0] == '/'))
		p[o++] = '/';
	memcpy(p + o, name, n + 1);
	return p;
}

/* Length of the directory part of path ("/" for "/x", "." semantics as
 * the root for a bare name: paths in a file system start at its root). */
static size_t dir_len(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return 0;
	return slash == path ? 1 : (size_t)(slash - path);
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && !strcmp(s + n - k, suffix);
}

/* ---- Hugging Face index ----------------------------------------------------------- */

struct wm_entry {
	char *name, *shard;
};

struct index_parse {
	struct wm_entry *v;
	size_t n, cap;
	bool have_map;
};

static int wm_member(struct js *j, void *arg, const char *key, size_t len)
{
	struct index_parse *x = arg;
	if (strlen(key) != len)
		return JS_ERR(j, "weight_map: a tensor name contains a NUL character");
	if (js_peek(j) != '"')
		return JS_ERR(j, "weight_map[\"%.64s\"]: expected the shard's file name (a string)", key);
	char *shard = NULL;
	size_t slen = 0;
	int rc = js_string(j, &shard, &slen);
	if (rc)
		return rc;
	if (!slen || strlen(shard) != slen) {
		free(shard);
		return JS_ERR(j, "weight_map[\"%.64s\"]: empty or NUL-bearing shard file name", key);
	}
	if (x->n == x->cap) {
		size_t ncap = x->cap ? 2 * x->cap : 256;
		struct wm_entry *v = realloc(x->v, ncap * sizeof(*v));
		if (!v) {
			free(shard);
			return gpunvme_set_error(-ENOMEM, "%s: out of memory", j->what);
		}
		x->v = v;
		x->cap = ncap;
	}
	if (!(x->v[x->n].name = strdup(key))) {
		free(shard);
		return gpunvme_set_error(-ENOMEM, "%s: out of memory", j->what);
	}
	x->v[x->n++].shard = shard;
	return 0;
}

static int index_member(struct js *j, void *arg, const char *key, size_t len)
{
	(void)len;
	struct index_parse *x = arg;
	if (strcmp(key, "weight_map"))
		return js_skip(j, 1); /* "metadata" ({"total_size": ...}) and anything newer */
	if (x->have_map)
		return JS_ERR(j, "duplicate \"weight_map\"");
	x->have_map = true;
	if (js_peek(j) != '{')
		return JS_ERR(j, "\"weight_map\" must be an object {tensor name: shard file}");
	return js_object(j, wm_member, x);
}

static int cmp_wm_name(const void *a, const void *b)
{
	return strcmp(((const struct wm_entry *)a)->name, ((const struct wm_entry *)b)->name);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void index_free(struct index_parse *x)
{
	for (size_t i = 0; i < x->n; i++) {
		free(x->v[i].name);
		free(x->v[i].shard);
	}
	free(x->v);
}

static int read_index(struct gpunvme_fs *fs, const char *path, struct index_parse *x)
{
	uint64_t ino = 0, size = 0;
	int rc = regular_file(fs, path, &ino, &size);
	if (rc)
		return rc;
	if (size > INDEX_MAX_BYTES)
		return gpunvme_set_error(-EFBIG, "%s: %llu bytes, over the %u MiB an index may have", path,
					 (unsigned long long)size, INDEX_MAX_BYTES >> 20);
	uint8_t *buf = malloc(size ? size : 1);
	if (!buf)
		return gpunvme_set_error(-ENOMEM, "%s: out of memory", path);
	int64_t got = gpunvme_fs_pread(fs, ino, buf, size, 0);
	if (got < 0 || (uint64_t)got != size) {
		free(buf);
		return got < 0 ? (int)got : gpunvme_set_error(-EIO, "%s: short read", path);
	}
	struct js j = { buf, buf, buf + size, path };
	rc = js_object(&j, index_member, x);
	if (!rc && js_peek(&j) >= 0)
		rc = JS_ERR(&j, "trailing characters after the index object");
	free(buf);
	if (!rc && !x->have_map)
		rc = gpunvme_set_error(-EINVAL, "%s: no \"weight_map\": not a Hugging Face safetensors index", path);
	if (!rc && !x->n)
		rc = gpunvme_set_error(-EINVAL, "%s: \"weight_map\" is empty: the index names no tensor", path);
	return rc;
}

/*
 * The index's weight map against the shards' headers: every tensor of a
 * shard is mapped to that shard, every mapped tensor is in its shard.
 * (transformers trusts the map; a map that disagrees with the files would
 * make a load silently miss or mix tensors, so it is refused here.)
 */
static int check_index(const struct gpunvme_model_set *s, const char *ipath, struct index_parse *x)
{
	qsort(x->v, x->n, sizeof(*x->v), cmp_wm_name);
	for (size_t i = 1; i < x->n; i++)
		if (!strcmp(x->v[i - 1].name, x->v[i].name))
			return gpunvme_set_error(-EINVAL, "%s: tensor \"%.80s\" is in weight_map twice", ipath,
						 x->v[i].name);
	size_t found = 0;
	for (size_t k = 0; k < s->n_files; k++) {
		const struct gpunvme_model_file *f = &s->files[k];
		/* f->path is the index's directory + "/" + the shard name the
		 * map gives: the map's entry must be that name exactly */
		size_t plen = strlen(f->path);
		for (size_t i = 0; i < f->model->n_tensors; i++) {
			struct wm_entry key = { f->model->tensors[i].name, NULL };
			const struct wm_entry *e = bsearch(&key, x->v, x->n, sizeof(*x->v), cmp_wm_name);
			if (!e)
				return gpunvme_set_error(-EINVAL,
							 "%s holds tensor \"%.80s\", which %s's weight_map does not list: "
							 "the index and its shards disagree (re-save the model)",
							 f->path, key.name, ipath);
			size_t elen = strlen(e->shard);
			if (elen >= plen || f->path[plen - elen - 1] != '/' || strcmp(f->path + plen - elen, e->shard))
				return gpunvme_set_error(-EINVAL,
							 "%s's weight_map puts tensor \"%.80s\" in %s, but it is in %s: "
							 "the index and its shards disagree (re-save the model)",
							 ipath, key.name, e->shard, f->path);
			found++;
		}
	}
	if (found != x->n) {
		/* some mapped name is in no shard: name one */
		for (size_t i = 0; i < x->n; i++) {
			bool seen = false;
			for (size_t k = 0; k < s->n_files && !seen; k++)
				for (size_t t = 0; t < s->files[k].model->n_tensors && !seen; t++)
					seen = !strcmp(s->files[k].model->tensors[t].name, x->v[i].name);
			if (!seen)
				return gpunvme_set_error(-EINVAL,
							 "%s's weight_map lists tensor \"%.80s\" in %s, whose header does "
							 "not have it: the index and its shards disagree (a shard missing "
							 "or from another save?)",
							 ipath, x->v[i].name, x->v[i].shard);
		}
	}
	return 0;
}

static int open_index(struct gpunvme_model_set *s, struct gpunvme_fs *fs, const char *ipath)
{
	struct index_parse x = { 0 };
	int rc = read_index(fs, ipath, &x);
	char **shards = NULL;
	size_t n_sh = 0;
	if (!rc && !(shards = malloc(x.n * sizeof(*shards))))
		rc = gpunvme_set_error(-ENOMEM, "%s: out of memory", ipath);
	if (!rc) {
		/* transformers: sorted(set(weight_map.values())) */
		for (size_t i = 0; i < x.n; i++)
			shards[i] = x.v[i].shard;
		qsort(shards, x.n, sizeof(*shards), cmp_str);
		for (size_t i = 0; i < x.n; i++)
			if (!n_sh || strcmp(shards[n_sh - 1], shards[i]))
				shards[n_sh++] = shards[i];
	}
	for (size_t k = 0; k < n_sh && !rc; k++) {
		char *p = path_join(ipath, dir_len(ipath), shards[k]);
		if (!p) {
			rc = -ENOMEM;
			break;
		}
		rc = set_add(s, fs, p);
		if (rc == -ENOENT)
			rc = gpunvme_set_error(-ENOENT, "%s: shard %s (%zu of %zu, named in %s) is missing: "
							"copy every shard the index names",
					       p, shards[k], k + 1, n_sh, ipath);
		else if (!rc && s->files[s->n_files - 1].model->format != GPUNVME_MODEL_SAFETENSORS)
			rc = gpunvme_set_error(-EINVAL, "%s: shard named in %s is not a safetensors file", p, ipath);
		free(p);
	}
	if (!rc)
		rc = check_index(s, ipath, &x);
	free(shards);
	index_free(&x);
	s->kind = "hf-index";
	return rc;
}

/* ---- llama.cpp split GGUF ---------------------------------------------------------- */

/* "-%05d-of-%05d.gguf" at the end of name: shard number and count (both
 * as written, so numbers past 99999 widen like printf's %05d does). */
static bool split_name(const char *name, size_t *prefix_len, unsigned long *no, unsigned long *count)
{
	size_t n = strlen(name);
	if (n < SPLIT_SUFFIX_LEN || strcmp(name + n - 5, ".gguf"))
		return false;
	/* walk back over "<count>" "-of-" "<no>" "-" */
	size_t e = n - 5, i = e;
	while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9')
		i--;
	if (e - i < 5 || i < 4 || memcmp(name + i - 4, "-of-", 4))
		return false;
	*count = strtoul(name + i, NULL, 10);
	size_t e2 = i - 4, j = e2;
	while (j > 0 && name[j - 1] >= '0' && name[j - 1] <= '9')
		j--;
	if (e2 - j < 5 || j < 1 || name[j - 1] != '-')
		return false;
	*no = strtoul(name + j, NULL, 10);
	*prefix_len = j - 1;
	return true;
}

static int open_split(struct gpunvme_model_set *s, struct gpunvme_fs *fs, const char *path)
{
	const struct gpunvme_model *m = s->files[0].model;
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	size_t plen;
	unsigned long no, count;
	uint32_t n = m->split_count;
	if (!split_name(base, &plen, &no, &count) || count != n || no != (unsigned long)m->split_no + 1)
		return gpunvme_set_error(-EINVAL,
					 "%s is shard %u of %u of a split GGUF (split.no, split.count), but its name "
					 "does not end in -%05u-of-%05u.gguf: keep the names gguf-split wrote (the other "
					 "shards are found by name)",
					 path, m->split_no + 1, n, m->split_no + 1, n);
	size_t prefix = (size_t)(base - path) + plen;
	uint64_t total = m->split_tensors;
	/* the set starts at shard 1 whatever shard was named */
	struct gpunvme_model_file named = s->files[0];
	uint32_t named_no = m->split_no + 1;
	s->n_files = 0;
	int rc = 0;
	for (uint32_t k = 1; k <= n && !rc; k++) {
		if (k == named_no) {
			struct gpunvme_model_file *f = NULL;
			if ((rc = set_slot(s, &f)))
				break;
			*f = named;
			named.path = NULL;
			named.model = NULL;
			continue;
		}
		char *p = malloc(prefix + 32);
		if (!p) {
			rc = gpunvme_set_error(-ENOMEM, "model set: out of memory");
			break;
		}
		snprintf(p, prefix + 32, "%.*s-%05u-of-%05u.gguf", (int)prefix, path, k, n);
		rc = set_add(s, fs, p);
		if (rc == -ENOENT)
			rc = gpunvme_set_error(-ENOENT, "%s: shard %u of %u of the split GGUF %s is missing: "
							"copy every shard (loading part of a model is refused)",
					       p, k, n, path);
		const struct gpunvme_model *sm = rc ? NULL : s->files[s->n_files - 1].model;
		if (sm && sm->format != GPUNVME_MODEL_GGUF)
			rc = gpunvme_set_error(-EINVAL, "%s: shard %u of %s is not a GGUF file", p, k, path);
		else if (sm && (sm->split_count != n || sm->split_no != k - 1))
			rc = gpunvme_set_error(-EINVAL,
					       "%s: says it is shard %u of %u (split.no, split.count), expected %u of %u: "
					       "shards of different splits mixed",
					       p, sm->split_no + 1, sm->split_count, k, n);
		else if (sm && sm->split_tensors != total)
			rc = gpunvme_set_error(-EINVAL,
					       "%s: split.tensors.count %llu, but %s says %llu: shards of different "
					       "splits mixed",
					       p, (unsigned long long)sm->split_tensors, path, (unsigned long long)total);
		free(p);
	}
	if (named.model) { /* not placed: an error came first */
		free(named.path);
		gpunvme_model_free(named.model);
	}
	if (rc)
		return rc;
	uint64_t sum = 0;
	for (size_t k = 0; k < s->n_files; k++)
		sum += s->files[k].model->n_tensors;
	if (total && sum != total)
		return gpunvme_set_error(-EINVAL,
					 "%s: the %u shards hold %llu tensors, split.tensors.count says %llu: a shard "
					 "is truncated or from another split",
					 path, n, (unsigned long long)sum, (unsigned long long)total);
	s->kind = "gguf-split";
	return 0;
}

/* A model file named directly: one file, or the whole split it belongs to. */
static int open_model_file(struct gpunvme_model_set *s, struct gpunvme_fs *fs, const char *path)
{
	int rc = set_add(s, fs, path);
	if (rc)
		return rc;
	const struct gpunvme_model *m = s->files[0].model;
	s->kind = "file";
	if (m->format == GPUNVME_MODEL_GGUF && m->split_count > 1)
		return open_split(s, fs, path);
	if (m->format == GPUNVME_MODEL_GGUF) {
		/* named like a shard, but no split metadata: loading it alone
		 * could be part of a model reported as a whole */
		const char *b = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
		size_t plen;
		unsigned long no, count;
		if (split_name(b, &plen, &no, &count) && count > 1)
			return gpunvme_set_error(-EINVAL,
						 "%s is named as shard %lu of %lu of a split GGUF but has no split.count "
						 "metadata: merge the shards (llama-gguf-split --merge) or rename it",
						 path, no, count);
	}
	return 0;
}

/* ---- directories ------------------------------------------------------------------- */

struct dir_scan {
	bool has_index, has_single;
	size_t n_index, n_st, n_gguf, n_bin;
	char *one_index, *one_st, *one_gguf; /* the first of each kind */
	char *gguf_prefix;                   /* split prefix shared by every .gguf, else NULL */
	bool gguf_one_model;                 /* every .gguf file belongs to one split, or there is one */
	int err;
};

static void keep(char **slot, const char *name, size_t len, int *err)
{
	if (*slot)
		return;
	if (!(*slot = strndup(name, len)))
		*err = gpunvme_set_error(-ENOMEM, "model set: out of memory");
}

static int scan_cb(void *arg, const char *name, size_t len, uint64_t ino, int ftype)
{
	(void)ino;
	struct dir_scan *d = arg;
	if (ftype == GPUNVME_FT_DIR)
		return 0;
	char n[256];
	if (len >= sizeof(n))
		return 0;
	memcpy(n, name, len);
	n[len] = 0;
	if (!strcmp(n, INDEX_NAME))
		d->has_index = true;
	else if (!strcmp(n, SINGLE_NAME))
		d->has_single = true;
	if (ends_with(n, ".safetensors.index.json")) {
		d->n_index++;
		keep(&d->one_index, n, len, &d->err);
	} else if (ends_with(n, ".safetensors")) {
		d->n_st++;
		keep(&d->one_st, n, len, &d->err);
	} else if (ends_with(n, ".gguf")) {
		size_t plen;
		unsigned long no, count;
		bool split = split_name(n, &plen, &no, &count);
		if (d->n_gguf == 0) {
			d->gguf_one_model = true;
			if (split && !(d->gguf_prefix = strndup(n, plen)))
				d->err = gpunvme_set_error(-ENOMEM, "model set: out of memory");
		} else if (!split || !d->gguf_prefix || strlen(d->gguf_prefix) != plen ||
			   memcmp(d->gguf_prefix, n, plen)) {
			d->gguf_one_model = false;
		}
		d->n_gguf++;
		if (split && no == 1) { /* name the first shard */
			free(d->one_gguf);
			d->one_gguf = NULL;
		}
		keep(&d->one_gguf, n, len, &d->err);
	} else if (ends_with(n, ".bin") || ends_with(n, ".pt") || ends_with(n, ".pth") || ends_with(n, ".ckpt")) {
		d->n_bin++;
	}
	return d->err;
}

static int open_dir(struct gpunvme_model_set *s, struct gpunvme_fs *fs, const char *path, uint64_t ino)
{
	struct dir_scan d = { 0 };
	int rc = gpunvme_fs_readdir(fs, ino, scan_cb, &d);
	if (d.err)
		rc = d.err;
	const char *pick = NULL;
	bool index = false;
	if (!rc) {
		/* transformers' order: model.safetensors, then its index */
		if (d.has_single)
			pick = SINGLE_NAME;
		else if (d.has_index)
			pick = INDEX_NAME, index = true;
		else if (d.n_index == 1)
			pick = d.one_index, index = true;
		else if (d.n_index > 1)
			rc = gpunvme_set_error(-EINVAL, "%s holds %zu safetensors indexes (%s, ...): name the one to load",
					       path, d.n_index, d.one_index);
		else if (d.n_st == 1)
			pick = d.one_st;
		else if (d.n_st > 1)
			rc = gpunvme_set_error(-EINVAL,
					       "%s holds %zu .safetensors files (%s, ...) and no %s: name the file to "
					       "load, or add the index save_pretrained writes",
					       path, d.n_st, d.one_st, INDEX_NAME);
		else if (d.n_gguf && d.gguf_one_model)
			pick = d.one_gguf;
		else if (d.n_gguf)
			rc = gpunvme_set_error(-EINVAL, "%s holds %zu GGUF files of more than one model (%s, ...): name "
							"the file to load",
					       path, d.n_gguf, d.one_gguf);
		else if (d.n_bin)
			rc = gpunvme_set_error(-ENOTSUP,
					       "%s holds only PyTorch pickle checkpoints (.bin/.pt): they are not read "
					       "(pickle runs code); save the model with save_pretrained(..., "
					       "safe_serialization=True) to get safetensors",
					       path);
		else
			rc = gpunvme_set_error(-ENOENT, "%s: no model in this directory (looked for %s, %s, "
							"*.safetensors and *.gguf)",
					       path, SINGLE_NAME, INDEX_NAME);
	}
	if (!rc) {
		char *p = path_join(path, strlen(path), pick);
		if (!p)
			rc = -ENOMEM;
		else
			rc = index ? open_index(s, fs, p) : open_model_file(s, fs, p);
		free(p);
		if (!rc && !index && !strcmp(s->kind, "file"))
			s->kind = "hf-dir";
	}
	free(d.one_index);
	free(d.one_st);
	free(d.one_gguf);
	free(d.gguf_prefix);
	return rc;
}

/* ---- entry point -------------------------------------------------------------------- */

int gpunvme_model_set_open(struct gpunvme_fs *fs, const char *path, struct gpunvme_model_set **out)
{
	*out = NULL;
	if (!fs || !path || !*path)
		return gpunvme_set_error(-EINVAL, "model set: no file system or no path");
	uint64_t ino;
	struct gpunvme_stat st;
	int rc = gpunvme_fs_lookup(fs, path, &ino);
	if (!rc)
		rc = gpunvme_fs_stat(fs, ino, &st);
	if (rc)
		return rc;
	struct gpunvme_model_set *s = set_new();
	if (!s)
		return -ENOMEM;
	if ((st.mode & 0170000) == 0040000)
		rc = open_dir(s, fs, path, ino);
	else if ((st.mode & 0170000) != 0100000)
		rc = gpunvme_set_error(-EINVAL, "%s: not a regular file or a directory", path);
	else if (ends_with(path, ".index.json"))
		rc = open_index(s, fs, path);
	else
		rc = open_model_file(s, fs, path);
	if (!rc && !s->n_files)
		rc = gpunvme_set_error(-EINVAL, "%s: no model file", path);
	if (!rc)
		rc = set_merge(s, fs);
	if (rc) {
		gpunvme_model_set_free(s);
		return rc;
	}
	s->format = s->model->format;
	*out = s;
	return 0;
}
