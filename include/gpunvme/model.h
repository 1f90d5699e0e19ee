/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Model file index: the tensors of a safetensors or GGUF (v2/v3) file, each
 * mapped to the byte range its data occupies in the file. The parser reads
 * through a callback, so the same code indexes an image file, a file on a
 * namespace decoded from its extents, or a buffer in memory.
 *
 * Every length and offset read from the file is checked before use against
 * the file size and the limits below; a truncated, garbage or hostile header
 * gives -EINVAL (or -EFBIG for a header over the limits, -ENOMEM) and a
 * message in gpunvme_last_error(), never a crash or an unbounded allocation.
 */
#ifndef GPUNVME_MODEL_H
#define GPUNVME_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum gpunvme_model_format {
	GPUNVME_MODEL_SAFETENSORS = 1,
	GPUNVME_MODEL_GGUF = 2,
};

/* Dimensions per tensor: GGUF allows 4 (GGML_MAX_DIMS); safetensors has no
 * stated limit, more than this is refused with a message. */
#define GPUNVME_TENSOR_MAX_DIMS 8
/* Header limits: safetensors headers over 100 MiB are refused (the format's
 * reference implementation stops there too); GGUF metadata is bounded by the
 * same budget, its strings and arrays by the file size. */
#define GPUNVME_MODEL_MAX_HEADER (100u << 20)

struct gpunvme_tensor {
	char *name;                /* as stored (UTF-8, NUL added) */
	char dtype[12];            /* the format's own name: safetensors "F16",
	                              "BF16", "I8", "F8_E4M3", "F8_E4M3FNUZ"
	                              (11 characters, the longest), ...; GGUF
	                              "F32", "Q4_K", "IQ2_XS", "NVFP4", ... */
	uint32_t ndim;
	/* safetensors: as in the header (outermost first); GGUF: ne[0] first, as
	 * stored (ne[0] is the contiguous dimension) */
	uint64_t shape[GPUNVME_TENSOR_MAX_DIMS];
	uint64_t offset;           /* absolute byte offset of the data in the file
	                              (in a model set: in the set's address space) */
	uint64_t bytes;            /* data length; 0 for a zero-size tensor */
	int32_t ggml_type;         /* GGUF: the ggml type number (enum ggml_type,
	                              e.g. 12 = Q4_K, 40 = NVFP4); -1 for
	                              safetensors */
	uint32_t file;             /* model set (modelset.h): index of the file;
	                              gpunvme_model_parse: always 0 */
};

/* safetensors "__metadata__": a string-to-string map, as the format defines
 * it; GGUF: not filled (its metadata is typed; see split_* below). A value
 * that is not a string, a duplicate key, and a key or value holding a NUL
 * (\u0000, which a C string cannot carry) are refused with -EINVAL. */
struct gpunvme_model_meta {
	char *key, *value;         /* UTF-8, NUL added */
};

struct gpunvme_model {
	enum gpunvme_model_format format;
	uint64_t file_size;
	uint64_t data_offset;      /* start of the tensor data section */
	uint32_t version;          /* GGUF version; 0 for safetensors */
	uint32_t alignment;        /* GGUF general.alignment (default 32); 1 for safetensors */
	uint64_t n_kv;             /* GGUF metadata pairs; safetensors __metadata__
	                              entries (= n_meta) */
	size_t n_tensors;
	struct gpunvme_tensor *tensors; /* in file order of their headers */
	size_t n_meta;
	struct gpunvme_model_meta *meta; /* safetensors __metadata__, in file order */
	/* GGUF split models (llama.cpp gguf-split): split.no (0-based, uint16),
	 * split.count (uint16) and split.tensors.count (int32: the tensors of
	 * the whole model, over all shards); 0, 1, n_tensors when absent and
	 * for safetensors. Other value types, split.no >= split.count, a count
	 * over 1 without the other two keys, and split.tensors.count below
	 * this file's n_tensors are -EINVAL. split.count 0 (what gguf-split
	 * --merge writes into a merged file) reads as 1. */
	uint32_t split_no, split_count;
	uint64_t split_tensors;
};

/* Read len bytes at offset off of the model file: 0 or -errno. */
typedef int (*gpunvme_model_read_fn)(void *ctx, uint64_t off, void *buf, size_t len);

/*
 * Index the model file of file_size bytes: the format is detected from the
 * first bytes (GGUF magic, else a safetensors length + '{'); anything else
 * is -EINVAL "not a safetensors or GGUF file". Checks, each with its own
 * message: header length past the end of the file, JSON/metadata syntax,
 * unknown dtype / ggml type, shape product not matching the byte length,
 * tensor data outside the data section, overlapping tensors (safetensors),
 * misaligned GGUF offsets. A failed read returns the callback's -errno.
 * Reads stay inside [0, file_size); a GGUF header is read in windows of at
 * most 64 KiB, a safetensors header in pieces of at most 1 MiB, and no
 * tensor data is read. *out is NULL on failure, else freed with
 * gpunvme_model_free().
 */
int gpunvme_model_parse(gpunvme_model_read_fn read, void *ctx, uint64_t file_size, struct gpunvme_model **out);
/* Same over a buffer in memory. */
int gpunvme_model_parse_mem(const void *buf, size_t len, struct gpunvme_model **out);
void gpunvme_model_free(struct gpunvme_model *m);

const char *gpunvme_model_format_name(enum gpunvme_model_format f); /* "safetensors", "gguf" */

/* Element size in bits of a dtype name of the format (GGUF block types:
 * bits per element of a whole block, e.g. Q4_0 = 4.5); 0 if unknown. */
double gpunvme_dtype_bits(enum gpunvme_model_format f, const char *dtype);

/* Shell-style pattern match of a tensor name: '*', '?', '[...]' ('[!...]'
 * negates), '\' escapes; several patterns separated by ',' match if any
 * does. 1 = match, 0 = no match. Matching is on bytes ('?' is one byte of
 * UTF-8); '*' crosses '.'; a ',' quoted by '\' or inside [...] does not
 * separate; a '[' without ']' is literal; NULL patterns or name: 0. */
int gpunvme_tensor_match(const char *patterns, const char *name);

#ifdef __cplusplus
}
#endif

#endif /* GPUNVME_MODEL_H */
