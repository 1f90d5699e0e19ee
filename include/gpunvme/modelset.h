/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A model as users keep it on disk, resolved inside a file system (no
 * mount): one safetensors or GGUF file, a Hugging Face directory (a
 * model.safetensors.index.json naming its shards, or one model.safetensors),
 * the index file itself, or any shard of a llama.cpp split GGUF
 * (`<prefix>-00001-of-00003.gguf`, `split.count` in its metadata). Symbolic
 * links are followed (Hugging Face cache snapshots point into blobs/).
 *
 * The files of a set are laid end to end in one address space: file k
 * starts at files[k].base (a multiple of GPUNVME_MODEL_SET_ALIGN), its
 * extents are shifted there, and every tensor's offset is in that space.
 * One layer loader over (ext, n_ext, size) then reads tensors of every
 * shard in one pass (gpunvme_model_buffers_alloc on `model`); the gaps
 * between files are holes and are never read from the device.
 *
 * A set is never partial: a missing shard, a shard whose split.no /
 * split.count disagree, a tensor named twice across shards, an index whose
 * weight map names a tensor its shard does not hold (or a shard tensor the
 * map does not list) all fail with a message naming the file and the fix.
 */
#ifndef GPUNVME_MODELSET_H
#define GPUNVME_MODELSET_H

#include <stddef.h>
#include <stdint.h>

#include "gpunvme/extents.h"
#include "gpunvme/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* File k + 1 starts at the first multiple of this more than
 * GPUNVME_MODEL_RUN_GAP past the end of file k: a tensor keeps its offset's
 * alignment modulo 4096 (loader placement), and no run of nearby bytes
 * joins the last tensor of one file with the first of the next. */
#define GPUNVME_MODEL_SET_ALIGN (2ull << 20)

/* Shards at most (the largest published checkpoints have a few hundred). */
#define GPUNVME_MODEL_SET_MAX_FILES 4096

struct gpunvme_model_file {
	char *path;                  /* its path in the file system, as the set named it */
	uint64_t ino;
	uint64_t size;               /* bytes */
	uint64_t base;               /* start of this file in the set's address space */
	struct gpunvme_model *model; /* this file's own index (offsets in the file) */
};

struct gpunvme_model_set {
	enum gpunvme_model_format format;
	const char *kind;            /* "file", "hf-index", "hf-dir", "gguf-split" */
	size_t n_files;
	struct gpunvme_model_file *files;
	/* every tensor of every file, in file order then header order, with
	 * offsets in the set's address space and gpunvme_tensor.file set;
	 * format / alignment / metadata are the first file's */
	struct gpunvme_model *model;
	/* the address space: every file's extents shifted by its base */
	struct gpunvme_extent *ext;
	size_t n_ext;
	uint64_t size;               /* end of the last file */
};

/*
 * Resolve `path` in fs into a model set (see above). Errors: -ENOENT (a
 * missing file or shard, named), -ELOOP (a symlink loop), -EINVAL (not a
 * model, an inconsistent set), -ENOTSUP (a directory holding only formats
 * this project does not read, e.g. pytorch_model.bin), -ENOMEM; the message
 * in gpunvme_last_error(). *out is freed with gpunvme_model_set_free().
 */
int gpunvme_model_set_open(struct gpunvme_fs *fs, const char *path, struct gpunvme_model_set **out);
void gpunvme_model_set_free(struct gpunvme_model_set *s);

/* The file holding set offset `off` (binary search over the bases), NULL
 * past the end; *file_off gets the offset within that file. */
const struct gpunvme_model_file *gpunvme_model_set_file(const struct gpunvme_model_set *s, uint64_t off,
							uint64_t *file_off);

#ifdef __cplusplus
}
#endif

#endif /* GPUNVME_MODELSET_H */
