/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Mixture-of-experts models: where each expert's weights are in the model
 * file, and a cache of experts read on demand.
 *
 * The expert index (gpunvme_moe_index_build) reads tensor names and shapes
 * of a model index (model.h; a model set's index for Hugging Face
 * directories and split GGUF). Two layouts exist in published checkpoints:
 *
 *   per expert   one tensor per expert and projection, the expert number in
 *                the name: "model.layers.3.block_sparse_moe.experts.5.w1.weight"
 *                (Mixtral), "model.layers.3.mlp.experts.5.gate_proj.weight"
 *                (Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3, OLMoE).
 *   stacked      one tensor per projection holding every expert, expert e
 *                being slice e of the expert dimension, which is the
 *                outermost one so the slice is one contiguous byte range:
 *                safetensors dimension 0 ("model.layers.3.mlp.experts.gate_up_proj"
 *                [E, 2I, H]: gpt-oss checkpoints, and the fused expert
 *                modules of transformers 5); GGUF's
 *                last dimension ne[n-1] ("blk.3.ffn_gate_exps.weight"
 *                [H, I, E], llama.cpp; quantized blocks never straddle an
 *                expert because each expert is whole rows).
 *
 * An expert is the list of its projections' byte ranges, in a fixed order
 * (the projection names sorted), identical for every expert of every MoE
 * layer. Shared experts ("shared_experts", "_shexp") and routers
 * ("gate.weight", "ffn_gate_inp") are not experts and stay ordinary tensors.
 * Layouts the index cannot serve are refused with -EINVAL naming the tensor
 * and the rule: both layouts in one model, an expert missing a projection,
 * layers with different expert counts or projections, a stacked tensor
 * whose expert dimension disagrees with its neighbours' or does not divide
 * its bytes.
 *
 * The expert cache (gpunvme_expert_cache_open) keeps K experts in slots of
 * loader memory (the loader's tier: host DMA memory on the CPU tier) and
 * reads the ones a request names that are not there, through a layer loader
 * over the model's file (so through the volume: md arrays, partitions and
 * NVMe/TCP alike). Replacement: among the slots the current request does
 * not need, the expert asked for least often (counts aged), the least
 * recently used among equals (src/moe/policy.h; docs/moe.md says why).
 */
#ifndef GPUNVME_MOE_H
#define GPUNVME_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "gpunvme/loader.h"
#include "gpunvme/model.h"

#ifdef __cplusplus
extern "C" {
#endif

enum gpunvme_moe_layout {
	GPUNVME_MOE_PER_EXPERT = 1,
	GPUNVME_MOE_STACKED = 2,
};

/* Limits: more is refused with a message (the largest published models
 * have 256 routed experts and a few hundred layers). */
#define GPUNVME_MOE_MAX_EXPERTS 4096
#define GPUNVME_MOE_MAX_PROJ 8

/* One projection of one expert: bytes [offset, offset + bytes) of the file
 * (of the model set's address space), from tensor `tensor` of the model. */
struct gpunvme_moe_piece {
	uint64_t offset;
	uint64_t bytes;
	uint32_t tensor;
};

struct gpunvme_moe_index {
	enum gpunvme_moe_layout layout;
	uint32_t n_layers;        /* layers that have experts */
	uint32_t *layer;          /* [n_layers]: the model's layer number of each, ascending */
	uint32_t n_experts;       /* per layer */
	uint32_t n_proj;          /* pieces per expert */
	char **proj;              /* [n_proj]: projection names ("w1.weight", "gate_up_proj", "ffn_down_exps.weight") */
	uint64_t max_expert_bytes; /* the largest expert (sum of its pieces) */
	struct gpunvme_moe_piece *pieces; /* [n_layers][n_experts][n_proj] */
};

/*
 * Find the experts of model m. -ENOENT when it has none (a dense model),
 * -EINVAL for a layout the index cannot serve (see above), -ENOMEM. *out
 * is freed with gpunvme_moe_index_free.
 */
int gpunvme_moe_index_build(const struct gpunvme_model *m, struct gpunvme_moe_index **out);
void gpunvme_moe_index_free(struct gpunvme_moe_index *x);
/* The n_proj pieces of expert e of MoE layer i (i < n_layers, not the
 * model's layer number: gpunvme_moe_layer_find maps that); NULL when out
 * of range. */
const struct gpunvme_moe_piece *gpunvme_moe_expert(const struct gpunvme_moe_index *x, uint32_t i, uint32_t e);
/* "per-expert" or "stacked" */
const char *gpunvme_moe_layout_str(enum gpunvme_moe_layout l);
/* The MoE layer index of the model's layer `layer`, -1 when it has no
 * experts. */
int gpunvme_moe_layer_find(const struct gpunvme_moe_index *x, uint32_t layer);

/*
 * Where the pieces of expert e of MoE layer i go in a slot (pos[n_proj]);
 * returns the end of the last. Piece p starts in the first whole block of
 * GPUNVME_MOE_PLACE bytes after piece p - 1, at its file offset modulo
 * GPUNVME_MOE_PLACE: a reader that moves whole blocks (of any LBA size
 * dividing it) writes no byte of another piece, and the loader DMAs all
 * but the edge blocks in place (loader.h). Slots of both caches use it.
 */
#define GPUNVME_MOE_PLACE 4096u
uint64_t gpunvme_moe_place(const struct gpunvme_moe_index *x, uint32_t i, uint32_t e, uint64_t *pos);

struct gpunvme_expert_cache;

struct gpunvme_expert_cache_stats {
	uint64_t requests;        /* experts asked for (duplicates in one request once) */
	uint64_t hits, misses;
	uint64_t evictions;
	uint64_t bytes_read;      /* bytes of the file read into slots */
};

/*
 * A cache of `slots` experts of index x (which must outlive it), read
 * through loader l (over the model's file; it must outlive the cache too).
 * Slot memory comes from the loader (gpunvme_layer_loader_alloc), each
 * expert's pieces placed so that nothing but their edge blocks is bounced.
 * -EINVAL for 0 slots, -ENOMEM when the memory cannot be had.
 */
int gpunvme_expert_cache_open(const struct gpunvme_moe_index *x, struct gpunvme_layer_loader *l, uint32_t slots,
			      struct gpunvme_expert_cache **out);
void gpunvme_expert_cache_close(struct gpunvme_expert_cache *c);
/*
 * Make experts ids[0..k) of MoE layer i resident and give the slot of each
 * in slots[0..k). Missing ones are read (and waited for) into the least
 * recently used slots that this request does not need. Errors: -EINVAL (a
 * layer or expert out of range), -ENOSPC (more distinct experts than slots:
 * they could not all be resident at once), the loader's error for a failed
 * read (that slot is then empty, never holding partial bytes).
 */
int gpunvme_expert_cache_get(struct gpunvme_expert_cache *c, uint32_t i, const uint32_t *ids, uint32_t k,
			     uint32_t *slots);
/* Where projection p of the expert in `slot` is (loader memory of the
 * loader's tier; on Tier 1 the host address); NULL for an empty slot or a
 * bad argument. */
void *gpunvme_expert_cache_piece(const struct gpunvme_expert_cache *c, uint32_t slot, uint32_t p);
/* Which expert a slot holds: 0 and *layer, *expert; -ENOENT when empty. */
int gpunvme_expert_cache_slot(const struct gpunvme_expert_cache *c, uint32_t slot, uint32_t *layer, uint32_t *expert);
void gpunvme_expert_cache_stats(const struct gpunvme_expert_cache *c, struct gpunvme_expert_cache_stats *st);

#ifdef __cplusplus
}
#endif

#endif /* GPUNVME_MOE_H */
