/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Shared pieces of the model index parsers (model.c, safetensors.c,
 * gguf.c): the read source, the growing tensor table and the checks that
 * both formats make on it.
 */
#ifndef GPUNVME_LOADER_MODEL_INTERNAL_H
#define GPUNVME_LOADER_MODEL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpunvme/model.h"

struct model_src {
	gpunvme_model_read_fn read;
	void *ctx;
	uint64_t size;
};

/* Read [off, off + len) of the file; the range must lie inside it (callers
 * check first). A failed read gives the callback's -errno and a message. */
int model_read(const struct model_src *src, uint64_t off, void *buf, size_t len);

/* Append a zeroed tensor to m (the table grows by doubling, so its size
 * follows what was parsed, never a count the file claims). *cap is the
 * allocated count. 0 or -ENOMEM. */
int model_push_tensor(struct gpunvme_model *m, size_t *cap, struct gpunvme_tensor **out);

/* Two tensors of one name, if any: 1 with *a, *b set (a before b in the
 * table's sort by name), 0 when names are unique, -ENOMEM (no message). */
int model_find_duplicate(const struct gpunvme_model *m, const struct gpunvme_tensor **a,
			 const struct gpunvme_tensor **b);

/* Refuse two tensors of one name ("duplicate tensor name"). fmt is the
 * message prefix ("safetensors", "gguf"). 0, -EINVAL, -ENOMEM. */
int model_check_names(const struct gpunvme_model *m, const char *fmt);

/* Refuse tensors whose data ranges overlap (zero-size tensors occupy no
 * bytes and overlap nothing). 0, -EINVAL, -ENOMEM. */
int model_check_overlap(const struct gpunvme_model *m, const char *fmt);

/* a * b, false on overflow of 64 bits */
static inline bool model_mul(uint64_t a, uint64_t b, uint64_t *r)
{
	return !__builtin_mul_overflow(a, b, r);
}

static inline uint64_t model_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static inline uint32_t model_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* Format parsers: fill m (format, file_size and tensors already zeroed). */
int model_parse_safetensors(const struct model_src *src, struct gpunvme_model *m);
int model_parse_gguf(const struct model_src *src, struct gpunvme_model *m);

/* Element bits of a dtype name (0: unknown); gguf.c / safetensors.c. */
double model_safetensors_bits(const char *dtype);
double model_gguf_bits(const char *dtype);

/*
 * Where in a 4 KiB page a run of tensors starting at file offset off is put
 * in loader memory (model_load.c's buffers, the stream's slots): on a
 * MODEL_TENSOR_ALIGN boundary, as torch's allocations are (its caching
 * allocator rounds to 512 bytes), not congruent to the file offset. cuBLAS(Lt)
 * picks its kernels by the operands' alignment, and a safetensors data
 * section starts 8 + header bytes in (8-byte alignment): weights placed by
 * file offset were multiplied by other kernels than the same weights loaded
 * by torch, slower and not bitwise equal (an MoE model's logits differed from
 * transformers'). The blocks then land off page boundaries, still direct
 * where dword aligned (§4.3; the queues' PRP lists are sized for any dword
 * offset, io/qpair.c and cuda/gpu_queues.cu); a run whose file offset is not
 * dword aligned stays congruent, as its blocks could not land direct.
 */
#define MODEL_TENSOR_ALIGN 256u

static inline uint64_t model_run_page_offset(uint64_t off)
{
	return off % 4 ? off & 4095u : (off & 4095u) & ~(uint64_t)(MODEL_TENSOR_ALIGN - 1);
}

/*
 * Where a run starting at file offset off goes in memory laid out from 0,
 * the runs before it ending at cur: on the first 4 KiB boundary at least
 * `before` bytes past cur, plus its page offset (model_run_page_offset).
 * `before`: room the run needs ahead of its in-page position (the model
 * buffers' head slack for the rest of the first block; the stream: 0).
 */
static inline uint64_t model_run_at(uint64_t cur, uint64_t off, uint64_t before)
{
	return ((cur + before + 4095) & ~(uint64_t)4095) + model_run_page_offset(off);
}

#endif
