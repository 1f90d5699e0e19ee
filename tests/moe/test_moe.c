/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Mixture-of-experts, CPU tier (include/gpunvme/moe.h): the expert index on
 * the layouts published checkpoints use (Mixtral's and Qwen-MoE's one
 * tensor per expert, transformers 5's stacked experts, llama.cpp's GGUF
 * "_exps" tensors with a quantized type), every refusal, and the expert
 * cache reading chosen experts through the loader from the emulator, every
 * byte compared with the model file, with its replacement order, limits
 * and a failed read.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrl/ctrl_emu.h" /* the emulator behind the controller */
#include "gpunvme/emu.h"
#include "gpunvme/gpunvme.h"
#include "gpunvme/loader.h"
#include "gpunvme/model.h"
#include "gpunvme/modelset.h"
#include "gpunvme/moe.h"
#include "gpunvme/volume.h"
#include "harness.h"
#include "moe_model.h"

/* ---- GGUF files built here -------------------------------------------------------- */

/* ggml types used here: F16 (1) and Q8_0 (8: blocks of 32, 34 bytes) */
static uint64_t gguf_bytes(const struct tdef *t)
{
	if (!strcmp(t->dtype, "Q8_0"))
		return elems(t) / 32 * 34;
	return elems(t) * 2;
}

/* A GGUF v3 file (no metadata, alignment 32), random data. */
static uint8_t *gguf(const struct tdef *t, size_t n, size_t *len, uint64_t seed)
{
	struct buf f = { NULL, 0, 0 };
	put(&f, "GGUF", 4);
	put_u32(&f, 3);
	put_u64(&f, n);
	put_u64(&f, 0);
	uint64_t off = 0;
	for (size_t i = 0; i < n; i++) {
		put_u64(&f, strlen(t[i].name));
		put(&f, t[i].name, strlen(t[i].name));
		put_u32(&f, t[i].ndim);
		for (uint32_t d = 0; d < t[i].ndim; d++)
			put_u64(&f, t[i].shape[d]);
		put_u32(&f, !strcmp(t[i].dtype, "Q8_0") ? 8 : 1);
		put_u64(&f, off);
		off += (gguf_bytes(&t[i]) + 31) / 32 * 32;
	}
	while (f.n % 32)
		put(&f, "", 1);
	for (uint64_t i = 0; i < off; i++) {
		uint8_t v = (uint8_t)rng(&seed);
		put(&f, &v, 1);
	}
	*len = f.n;
	return f.p;
}

/* ---- the index ------------------------------------------------------------------- */

TEST_CASE(index_per_expert_mixtral)
{
	struct tdef t[128];
	size_t n = mixtral(t, 2, 4), len;
	uint8_t *f = safetensors(t, n, &len, 1);
	struct gpunvme_model *m = parse(f, len);
	REQUIRE(m);
	struct gpunvme_moe_index *x = NULL;
	REQUIRE_OK(gpunvme_moe_index_build(m, &x));
	CHECK_EQ(x->layout, GPUNVME_MOE_PER_EXPERT);
	CHECK_EQ(x->n_layers, 2);
	CHECK_EQ(x->layer[0], 0);
	CHECK_EQ(x->layer[1], 1);
	CHECK_EQ(x->n_experts, 4);
	REQUIRE_EQ(x->n_proj, 3);
	CHECK(!strcmp(x->proj[0], "w1.weight") && !strcmp(x->proj[1], "w2.weight") && !strcmp(x->proj[2], "w3.weight"));
	CHECK_EQ(x->max_expert_bytes, 3 * 24 * 16 * 2);
	for (uint32_t l = 0; l < 2; l++)
		for (uint32_t e = 0; e < 4; e++)
			for (uint32_t p = 0; p < 3; p++) {
				char name[96];
				snprintf(name, sizeof(name), "model.layers.%u.block_sparse_moe.experts.%u.w%u.weight", l, e, p + 1);
				const struct gpunvme_tensor *want = tensor(m, name);
				const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(x, l, e);
				REQUIRE(want && pc);
				CHECK(pc[p].offset == want->offset && pc[p].bytes == want->bytes, "%s", name);
				CHECK(!strcmp(m->tensors[pc[p].tensor].name, name), "%s", name);
			}
	/* placement in a slot: congruent to the file offset modulo 4096, and
	 * the whole blocks of one piece clear of the next piece's */
	for (uint32_t e = 0; e < 4; e++) {
		uint64_t pos[GPUNVME_MOE_MAX_PROJ];
		uint64_t end = gpunvme_moe_place(x, 1, e, pos);
		const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(x, 1, e);
		for (uint32_t p = 0; p < 3; p++) {
			CHECK_EQ(pos[p] % 4096, pc[p].offset % 4096);
			if (p)
				CHECK(pos[p] - pos[p] % 4096 >= (pos[p - 1] + pc[p - 1].bytes + 4095) / 4096 * 4096,
				      "expert %u piece %u shares a block with piece %u", e, p, p - 1);
		}
		CHECK_EQ(end, pos[2] + pc[2].bytes);
	}
	CHECK(gpunvme_moe_expert(x, 2, 0) == NULL);
	CHECK(gpunvme_moe_expert(x, 0, 4) == NULL);
	CHECK_EQ(gpunvme_moe_layer_find(x, 1), 1);
	CHECK_EQ(gpunvme_moe_layer_find(x, 7), -1);
	gpunvme_moe_index_free(x);
	gpunvme_model_free(m);
	free(f);
	return 0;
}

TEST_CASE(index_per_expert_qwen_shared_expert)
{
	/* Qwen2-MoE / DeepSeek names: mlp.experts.N.{gate,up,down}_proj plus
	 * a shared expert and its gate, which are not routed experts; layer 0
	 * dense (DeepSeek's first_k_dense_replace) */
	struct tdef t[64];
	size_t n = 0;
	t[n++] = (struct tdef){ "model.layers.0.mlp.gate_proj.weight", "BF16", 2, { 24, 16 } };
	for (uint32_t l = 1; l < 3; l++) {
		snprintf(t[n].name, 96, "model.layers.%u.mlp.shared_experts.gate_proj.weight", l);
		t[n].dtype = "BF16", t[n].ndim = 2, t[n].shape[0] = 24, t[n].shape[1] = 16, n++;
		snprintf(t[n].name, 96, "model.layers.%u.mlp.shared_expert_gate.weight", l);
		t[n].dtype = "BF16", t[n].ndim = 2, t[n].shape[0] = 1, t[n].shape[1] = 16, n++;
		for (uint32_t e = 0; e < 3; e++) {
			static const char *w[] = { "gate_proj", "up_proj", "down_proj" };
			for (int k = 0; k < 3; k++) {
				snprintf(t[n].name, 96, "model.layers.%u.mlp.experts.%u.%s.weight", l, e, w[k]);
				t[n].dtype = "BF16", t[n].ndim = 2, t[n].shape[0] = 8, t[n].shape[1] = 16, n++;
			}
		}
	}
	size_t len;
	uint8_t *f = safetensors(t, n, &len, 2);
	struct gpunvme_model *m = parse(f, len);
	REQUIRE(m);
	struct gpunvme_moe_index *x = NULL;
	REQUIRE_OK(gpunvme_moe_index_build(m, &x));
	CHECK_EQ(x->n_layers, 2);
	CHECK_EQ(x->layer[0], 1);
	CHECK_EQ(x->layer[1], 2);
	CHECK_EQ(x->n_experts, 3);
	REQUIRE_EQ(x->n_proj, 3);
	CHECK(!strcmp(x->proj[0], "down_proj.weight") && !strcmp(x->proj[1], "gate_proj.weight") &&
	      !strcmp(x->proj[2], "up_proj.weight"));
	const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(x, 1, 2);
	CHECK_EQ(pc[0].offset, tensor(m, "model.layers.2.mlp.experts.2.down_proj.weight")->offset);
	gpunvme_moe_index_free(x);
	gpunvme_model_free(m);
	free(f);
	return 0;
}

TEST_CASE(index_stacked_transformers5)
{
	/* fused experts (gpt-oss, transformers 5): gate_up_proj [E, 2I, H] and down_proj
	 * [E, H, I] per layer, expert e = slice e of dimension 0 */
	struct tdef t[16];
	size_t n = 0;
	for (uint32_t l = 0; l < 3; l++) {
		snprintf(t[n].name, 96, "model.layers.%u.mlp.gate.weight", l);
		t[n].dtype = "BF16", t[n].ndim = 2, t[n].shape[0] = 8, t[n].shape[1] = 16, n++;
		snprintf(t[n].name, 96, "model.layers.%u.mlp.experts.gate_up_proj", l);
		t[n].dtype = "BF16", t[n].ndim = 3, t[n].shape[0] = 8, t[n].shape[1] = 48, t[n].shape[2] = 16, n++;
		snprintf(t[n].name, 96, "model.layers.%u.mlp.experts.down_proj", l);
		t[n].dtype = "BF16", t[n].ndim = 3, t[n].shape[0] = 8, t[n].shape[1] = 16, t[n].shape[2] = 24, n++;
	}
	size_t len;
	uint8_t *f = safetensors(t, n, &len, 3);
	struct gpunvme_model *m = parse(f, len);
	REQUIRE(m);
	struct gpunvme_moe_index *x = NULL;
	REQUIRE_OK(gpunvme_moe_index_build(m, &x));
	CHECK_EQ(x->layout, GPUNVME_MOE_STACKED);
	CHECK_EQ(x->n_layers, 3);
	CHECK_EQ(x->n_experts, 8);
	REQUIRE_EQ(x->n_proj, 2);
	CHECK(!strcmp(x->proj[0], "down_proj") && !strcmp(x->proj[1], "gate_up_proj"));
	const struct gpunvme_tensor *gu = tensor(m, "model.layers.1.mlp.experts.gate_up_proj");
	for (uint32_t e = 0; e < 8; e++) {
		const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(x, 1, e);
		CHECK_EQ(pc[1].bytes, 48 * 16 * 2);
		CHECK_EQ(pc[1].offset, gu->offset + (uint64_t)e * 48 * 16 * 2);
	}
	CHECK_EQ(x->max_expert_bytes, (48 * 16 + 16 * 24) * 2);
	gpunvme_moe_index_free(x);
	gpunvme_model_free(m);
	free(f);
	return 0;
}

TEST_CASE(index_gguf_exps_quantized)
{
	/* llama.cpp: blk.N.ffn_{gate,up,down}_exps.weight, ne = [H, I, E]
	 * (expert last), Q8_0 and F16; ffn_gate_inp (router) and *_shexp
	 * (shared expert) are not experts; blk.0 dense */
	struct tdef t[32];
	size_t n = 0;
	t[n++] = (struct tdef){ "blk.0.ffn_gate.weight", "F16", 2, { 64, 32 } };
	for (uint32_t l = 1; l < 3; l++) {
		snprintf(t[n].name, 96, "blk.%u.ffn_gate_inp.weight", l);
		t[n].dtype = "F16", t[n].ndim = 2, t[n].shape[0] = 64, t[n].shape[1] = 4, n++;
		snprintf(t[n].name, 96, "blk.%u.ffn_gate_shexp.weight", l);
		t[n].dtype = "F16", t[n].ndim = 2, t[n].shape[0] = 64, t[n].shape[1] = 32, n++;
		snprintf(t[n].name, 96, "blk.%u.ffn_gate_exps.weight", l);
		t[n].dtype = "Q8_0", t[n].ndim = 3, t[n].shape[0] = 64, t[n].shape[1] = 32, t[n].shape[2] = 4, n++;
		snprintf(t[n].name, 96, "blk.%u.ffn_up_exps.weight", l);
		t[n].dtype = "Q8_0", t[n].ndim = 3, t[n].shape[0] = 64, t[n].shape[1] = 32, t[n].shape[2] = 4, n++;
		snprintf(t[n].name, 96, "blk.%u.ffn_down_exps.weight", l);
		t[n].dtype = "F16", t[n].ndim = 3, t[n].shape[0] = 32, t[n].shape[1] = 64, t[n].shape[2] = 4, n++;
	}
	size_t len;
	uint8_t *f = gguf(t, n, &len, 4);
	struct gpunvme_model *m = parse(f, len);
	REQUIRE(m);
	struct gpunvme_moe_index *x = NULL;
	REQUIRE_OK(gpunvme_moe_index_build(m, &x));
	CHECK_EQ(x->layout, GPUNVME_MOE_STACKED);
	CHECK_EQ(x->n_layers, 2);
	CHECK_EQ(x->layer[0], 1);
	CHECK_EQ(x->n_experts, 4);
	REQUIRE_EQ(x->n_proj, 3);
	CHECK(!strcmp(x->proj[0], "ffn_down_exps.weight") && !strcmp(x->proj[1], "ffn_gate_exps.weight") &&
	      !strcmp(x->proj[2], "ffn_up_exps.weight"));
	const struct gpunvme_tensor *g = tensor(m, "blk.2.ffn_gate_exps.weight");
	REQUIRE(g);
	CHECK_EQ(g->bytes, 64 * 32 * 4 / 32 * 34);
	const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(x, 1, 3);
	/* an expert is 32 rows of 64 Q8_0 elements: 2 blocks of 34 bytes each */
	CHECK_EQ(pc[1].bytes, 32 * 2 * 34);
	CHECK_EQ(pc[1].offset, g->offset + 3 * 32 * 2 * 34);
	gpunvme_moe_index_free(x);
	gpunvme_model_free(m);
	free(f);
	return 0;
}

/* index_build on these tensors: rc, and the message contains `want` */
static int refused(const struct tdef *t, size_t n, int is_gguf, int rc_want, const char *want)
{
	size_t len;
	uint8_t *f = is_gguf ? gguf(t, n, &len, 9) : safetensors(t, n, &len, 9);
	struct gpunvme_model *m = parse(f, len);
	REQUIRE(m);
	struct gpunvme_moe_index *x = (struct gpunvme_moe_index *)1;
	int rc = gpunvme_moe_index_build(m, &x);
	CHECK_EQ(rc, rc_want);
	CHECK(x == NULL);
	CHECK(strstr(gpunvme_last_error(), want) != NULL, "message \"%s\", want \"%s\"", gpunvme_last_error(), want);
	gpunvme_model_free(m);
	free(f);
	return 0;
}

TEST_CASE(index_refusals)
{
	struct tdef t[128];
	/* a dense model: no experts */
	size_t n = 0;
	t[n++] = (struct tdef){ "model.layers.0.mlp.gate_proj.weight", "BF16", 2, { 8, 8 } };
	t[n++] = (struct tdef){ "model.layers.0.mlp.up_proj.weight", "BF16", 2, { 8, 8 } };
	REQUIRE_OK(refused(t, n, 0, -ENOENT, "not a mixture-of-experts model"));
	/* both layouts */
	n = mixtral(t, 1, 2);
	t[n++] = (struct tdef){ "model.layers.0.mlp.experts.down_proj", "BF16", 3, { 2, 8, 8 } };
	REQUIRE_OK(refused(t, n, 0, -EINVAL, "both expert layouts"));
	/* an expert without one of its projections */
	n = mixtral(t, 2, 3);
	for (size_t i = 0; i < n; i++)
		if (!strcmp(t[i].name, "model.layers.1.block_sparse_moe.experts.2.w3.weight"))
			strcpy(t[i].name, "model.layers.1.block_sparse_moe.other.weight");
	REQUIRE_OK(refused(t, n, 0, -EINVAL, "layer 1 expert 2 has no w3.weight"));
	/* layers with different expert counts: fewer, then more */
	n = mixtral(t, 2, 3);
	size_t n2 = 0;
	for (size_t i = 0; i < n; i++)
		if (!strstr(t[i].name, "layers.1.block_sparse_moe.experts.2."))
			t[n2++] = t[i];
	REQUIRE_OK(refused(t, n2, 0, -EINVAL, "layer 1 expert 2 has no"));
	n = mixtral(t, 2, 3);
	t[n++] = (struct tdef){ "model.layers.1.block_sparse_moe.experts.3.w1.weight", "BF16", 2, { 24, 16 } };
	REQUIRE_OK(refused(t, n, 0, -EINVAL, "expert 3, but layer 0 has 3 experts"));
	/* a projection only some layers have */
	n = mixtral(t, 2, 2);
	t[n++] = (struct tdef){ "model.layers.1.block_sparse_moe.experts.0.w4.weight", "BF16", 2, { 24, 16 } };
	REQUIRE_OK(refused(t, n, 0, -EINVAL, "projection \"w4.weight\" is not one of layer 0's"));
	/* stacked tensors disagreeing on the expert count */
	n = 0;
	t[n++] = (struct tdef){ "model.layers.0.mlp.experts.gate_up_proj", "BF16", 3, { 8, 4, 4 } };
	t[n++] = (struct tdef){ "model.layers.0.mlp.experts.down_proj", "BF16", 3, { 4, 4, 4 } };
	REQUIRE_OK(refused(t, n, 0, -EINVAL, "holds 4 experts where layer 0 has 8"));
	/* a stacked tensor without an expert dimension */
	n = 0;
	t[n++] = (struct tdef){ "model.layers.0.mlp.experts.gate_up_proj", "BF16", 1, { 8 } };
	REQUIRE_OK(refused(t, n, 0, -EINVAL, "stacked experts need an expert dimension"));
	/* an expert number with nothing after it */
	n = 0;
	t[n++] = (struct tdef){ "model.layers.0.mlp.experts.3.", "BF16", 2, { 8, 8 } };
	REQUIRE_OK(refused(t, n, 0, -EINVAL, "no projection after it"));
	/* the same expert's projection twice under two names */
	n = 0;
	t[n++] = (struct tdef){ "model.layers.0.mlp.experts.0.w1.weight", "BF16", 2, { 8, 8 } };
	t[n++] = (struct tdef){ "model.layers.0.moe.experts.0.w1.weight", "BF16", 2, { 8, 8 } };
	REQUIRE_OK(refused(t, n, 0, -EINVAL, "is given twice"));
	/* GGUF: an expert count past the limit */
	n = 0;
	t[n++] = (struct tdef){ "blk.0.ffn_up_exps.weight", "F16", 3, { 2, 1, 5000 } };
	REQUIRE_OK(refused(t, n, 1, -EINVAL, "5000 experts"));
	CHECK_EQ(gpunvme_moe_index_build(NULL, NULL), -EINVAL);
	return 0;
}

/* ---- the cache: reads through the loader, every byte compared --------------------- */

struct rig {
	struct gpunvme_ctrl *c;
	struct gpunvme_layer_loader *l;
	struct gpunvme_model *m;
	struct gpunvme_moe_index *x;
	uint8_t *file;
	size_t len;
	struct gpunvme_extent ext[3];
};

/* The model file in three fragments of the emulator's namespace, placed
 * out of order and not at offset 0, read by a CPU-tier layer loader. */
static int rig_open(struct rig *r, uint32_t layers, uint32_t experts)
{
	memset(r, 0, sizeof(*r));
	struct tdef t[256];
	size_t n = mixtral(t, layers, experts);
	r->file = safetensors(t, n, &r->len, 77);
	REQUIRE((r->m = parse(r->file, r->len)));
	REQUIRE_OK(gpunvme_moe_index_build(r->m, &r->x));
	REQUIRE_OK(gpunvme_open("emu:ram:16M?lbads=12&workers=2", NULL, &r->c));
	void *ns = NULL;
	size_t ns_len = 0;
	REQUIRE_OK(gpunvme_emu_ns_memory(gpunvme_ctrl_emu(r->c), 1, &ns, &ns_len));
	uint64_t blocks = (r->len + 4095) / 4096, third = blocks / 3 * 4096;
	uint64_t phys[3] = { 8u << 20, 1u << 20, 4u << 20 };
	REQUIRE(blocks >= 3 && blocks * 4096 < (3u << 20));
	for (int k = 0; k < 3; k++) {
		uint64_t lo = (uint64_t)k * third, hi = k == 2 ? blocks * 4096 : lo + third;
		r->ext[k] = (struct gpunvme_extent){ lo, phys[k], hi - lo, 0 };
		if (lo < r->len)
			memcpy((uint8_t *)ns + phys[k], r->file + lo, (hi < r->len ? hi : r->len) - lo);
	}
	struct gpunvme_loader_opts o;
	gpunvme_loader_opts_init(&o);
	o.tier = GPUNVME_TIER_CPU;
	REQUIRE_OK(gpunvme_layer_loader_init(r->c, 1, r->ext, 3, r->len, &o, &r->l));
	return 0;
}

static void rig_close(struct rig *r)
{
	gpunvme_layer_loader_destroy(r->l);
	gpunvme_close(r->c);
	gpunvme_moe_index_free(r->x);
	gpunvme_model_free(r->m);
	free(r->file);
}

/* A media error on the block that holds byte `off` of the model file
 * (through the rig's extents to the namespace). */
static int rig_bad_block(struct rig *r, uint64_t off)
{
	uint64_t phys = UINT64_MAX;
	for (int k = 0; k < 3; k++)
		if (off >= r->ext[k].logical && off < r->ext[k].logical + r->ext[k].length)
			phys = r->ext[k].physical + (off - r->ext[k].logical);
	if (phys == UINT64_MAX)
		return -EINVAL;
	struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_MEDIA, .nsid = 1, .slba = phys / 4096, .nlb = 1 };
	return gpunvme_emu_inject(gpunvme_ctrl_emu(r->c), &f);
}

/* Every projection of the expert in `slot` equals the file's bytes. */
static int slot_is(struct rig *r, struct gpunvme_expert_cache *c, uint32_t slot, uint32_t li, uint32_t e)
{
	uint32_t l2 = 0, e2 = 0;
	REQUIRE_OK(gpunvme_expert_cache_slot(c, slot, &l2, &e2));
	REQUIRE(l2 == r->x->layer[li] && e2 == e, "slot %u holds layer %u expert %u, want %u/%u", slot, l2, e2,
		r->x->layer[li], e);
	const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(r->x, li, e);
	for (uint32_t p = 0; p < r->x->n_proj; p++) {
		const uint8_t *got = gpunvme_expert_cache_piece(c, slot, p);
		REQUIRE(got);
		REQUIRE(memcmp(got, r->file + pc[p].offset, pc[p].bytes) == 0, "layer %u expert %u %s differs", li, e,
			r->x->proj[p]);
	}
	return 0;
}

TEST_CASE(cache_random_decode)
{
	/* 4 layers of 8 experts, top-2 per token, 14 slots: 64 tokens of a
	 * skewed router (3 experts of each layer far more popular: 12 hot
	 * experts, which fit); every expert handed out is byte-exact */
	struct rig r;
	REQUIRE_OK(rig_open(&r, 4, 8));
	struct gpunvme_expert_cache *c = NULL;
	REQUIRE_OK(gpunvme_expert_cache_open(r.x, r.l, 14, &c));
	uint64_t seed = 5, asked = 0;
	for (int tok = 0; tok < 64; tok++)
		for (uint32_t li = 0; li < r.x->n_layers; li++) {
			uint32_t ids[2], slots[2];
			/* skewed: experts 0-2 most of the time */
			ids[0] = rng(&seed) % 4 ? (uint32_t)(rng(&seed) % 3) : (uint32_t)(rng(&seed) % 8);
			do
				ids[1] = rng(&seed) % 4 ? (uint32_t)(rng(&seed) % 3) : (uint32_t)(rng(&seed) % 8);
			while (ids[1] == ids[0]);
			REQUIRE_OK(gpunvme_expert_cache_get(c, li, ids, 2, slots));
			asked += 2;
			CHECK(slots[0] != slots[1]);
			for (int j = 0; j < 2; j++)
				REQUIRE_OK(slot_is(&r, c, slots[j], li, ids[j]));
		}
	struct gpunvme_expert_cache_stats st;
	gpunvme_expert_cache_stats(c, &st);
	CHECK_EQ(st.requests, asked);
	CHECK_EQ(st.hits + st.misses, asked);
	CHECK(st.hits > 0 && st.misses > 0);
	CHECK_EQ(st.bytes_read, st.misses * r.x->max_expert_bytes); /* every expert the same size here */
	CHECK_EQ(st.evictions, st.misses - 14);
	CHECK(st.hits > st.misses, "%llu hits, %llu misses", (unsigned long long)st.hits, (unsigned long long)st.misses);
	gpunvme_expert_cache_close(c);
	rig_close(&r);
	return 0;
}

/* `tokens` tokens: each of the 4 layers asked for `hot` and one other at
 * random; with check, every slot handed out holds its expert's bytes. */
static int cycle(struct rig *r, struct gpunvme_expert_cache *c, uint32_t hot, int tokens, uint64_t *seed, bool check)
{
	for (int tok = 0; tok < tokens; tok++)
		for (uint32_t li = 0; li < 4; li++) {
			uint32_t ids[2] = { hot, 0 }, sl[2];
			do
				ids[1] = (uint32_t)(rng(seed) % 8);
			while (ids[1] == hot);
			REQUIRE_OK(gpunvme_expert_cache_get(c, li, ids, 2, sl));
			for (int j = 0; j < 2 && check; j++)
				REQUIRE_OK(slot_is(r, c, sl[j], li, ids[j]));
		}
	return 0;
}

/*
 * One token asks every layer in turn, so a decode step is a cycle of
 * layers x k requests; with fewer slots than that, LRU evicts each expert
 * just before it is asked again and hits nothing. 4 layers, top-2 (8 a
 * token), 6 slots; each layer's expert `hot` is in every token, the other
 * is random. The policy (src/moe/policy.h) keeps the 4 hot experts: 4 hits
 * a token once warm. Then the hot set moves (a new prompt): the counts'
 * ageing lets the new hot experts in.
 */
TEST_CASE(cache_cycle_bigger_than_slots)
{
	struct rig r;
	REQUIRE_OK(rig_open(&r, 4, 8));
	struct gpunvme_expert_cache *c = NULL;
	REQUIRE_OK(gpunvme_expert_cache_open(r.x, r.l, 6, &c));
	uint64_t seed = 11;
	struct gpunvme_expert_cache_stats st0, st1;
	for (int phase = 0; phase < 2; phase++) {
		const uint32_t hot = phase ? 5 : 0;
		/* warm-up: long enough for the counts to age past the old hot set
		 * (8 x 32 keys = 256 requests a period, 8 a token) */
		REQUIRE_OK(cycle(&r, c, hot, 200, &seed, true));
		gpunvme_expert_cache_stats(c, &st0);
		REQUIRE_OK(cycle(&r, c, hot, 50, &seed, false));
		gpunvme_expert_cache_stats(c, &st1);
		/* every hot request hits (200 of 400); the 2 spare slots hold
		 * cold experts that are asked again now and then */
		CHECK(st1.hits - st0.hits >= 200, "phase %d: %llu hits of 400 requests", phase,
		      (unsigned long long)(st1.hits - st0.hits));
		for (uint32_t li = 0; li < 4; li++) {
			uint32_t one = hot, sl;
			gpunvme_expert_cache_stats(c, &st0);
			REQUIRE_OK(gpunvme_expert_cache_get(c, li, &one, 1, &sl));
			gpunvme_expert_cache_stats(c, &st1);
			CHECK_EQ(st1.hits - st0.hits, 1);
		}
	}
	gpunvme_expert_cache_close(c);
	rig_close(&r);
	return 0;
}

TEST_CASE(cache_lru_order_and_limits)
{
	struct rig r;
	REQUIRE_OK(rig_open(&r, 2, 4));
	struct gpunvme_expert_cache *c = NULL;
	REQUIRE_OK(gpunvme_expert_cache_open(r.x, r.l, 2, &c));
	uint32_t s[3], a, b;
	uint32_t e0 = 0, e1 = 1, e2 = 2;
	REQUIRE_OK(gpunvme_expert_cache_get(c, 0, &e0, 1, &s[0]));
	REQUIRE_OK(gpunvme_expert_cache_get(c, 0, &e1, 1, &s[1]));
	REQUIRE_OK(gpunvme_expert_cache_get(c, 0, &e0, 1, &a)); /* hit: 0 is now the more recent */
	CHECK_EQ(a, s[0]);
	REQUIRE_OK(gpunvme_expert_cache_get(c, 0, &e2, 1, &b)); /* evicts 1: asked once, 0 twice */
	CHECK_EQ(b, s[1]);
	REQUIRE_OK(slot_is(&r, c, s[0], 0, 0));
	REQUIRE_OK(slot_is(&r, c, b, 0, 2));
	/* a request never evicts what it needs: 2 and 1 of layer 0 -> 0 goes */
	uint32_t pair[2] = { 2, 1 }, ps[2];
	REQUIRE_OK(gpunvme_expert_cache_get(c, 0, pair, 2, ps));
	CHECK_EQ(ps[0], b);
	CHECK_EQ(ps[1], s[0]);
	REQUIRE_OK(slot_is(&r, c, ps[0], 0, 2));
	REQUIRE_OK(slot_is(&r, c, ps[1], 0, 1));
	/* the same expert twice in one request: one slot, counted once */
	struct gpunvme_expert_cache_stats st0, st1;
	gpunvme_expert_cache_stats(c, &st0);
	uint32_t dup[3] = { 3, 3, 3 }, ds[3];
	REQUIRE_OK(gpunvme_expert_cache_get(c, 1, dup, 3, ds));
	CHECK(ds[0] == ds[1] && ds[1] == ds[2]);
	gpunvme_expert_cache_stats(c, &st1);
	CHECK_EQ(st1.requests - st0.requests, 1);
	CHECK_EQ(st1.misses - st0.misses, 1);
	REQUIRE_OK(slot_is(&r, c, ds[0], 1, 3));
	/* limits: more distinct experts than slots, out of range */
	uint32_t three[3] = { 0, 1, 2 };
	CHECK_EQ(gpunvme_expert_cache_get(c, 0, three, 3, s), -ENOSPC);
	CHECK(strstr(gpunvme_last_error(), "at least 3 slots") != NULL, "%s", gpunvme_last_error());
	uint32_t bad = 4;
	CHECK_EQ(gpunvme_expert_cache_get(c, 0, &bad, 1, s), -EINVAL);
	CHECK(strstr(gpunvme_last_error(), "the layer has 4 experts") != NULL, "%s", gpunvme_last_error());
	CHECK_EQ(gpunvme_expert_cache_get(c, 2, &e0, 1, s), -EINVAL);
	CHECK_EQ(gpunvme_expert_cache_get(c, 0, NULL, 1, s), -EINVAL);
	CHECK_EQ(gpunvme_expert_cache_get(c, 0, three, 0, s), 0); /* nothing asked: nothing done */
	CHECK(gpunvme_expert_cache_piece(c, 9, 0) == NULL);
	CHECK(gpunvme_expert_cache_piece(c, 0, 3) == NULL);
	CHECK_EQ(gpunvme_expert_cache_slot(c, 5, NULL, NULL), -EINVAL);
	struct gpunvme_expert_cache *c0 = (struct gpunvme_expert_cache *)1;
	CHECK_EQ(gpunvme_expert_cache_open(r.x, r.l, 0, &c0), -EINVAL);
	CHECK(c0 == NULL);
	CHECK(strstr(gpunvme_last_error(), "0 slots") != NULL);
	CHECK_EQ(gpunvme_expert_cache_open(NULL, r.l, 2, &c0), -EINVAL);
	gpunvme_expert_cache_close(c);
	rig_close(&r);
	return 0;
}

TEST_CASE(cache_failed_read_leaves_no_expert)
{
	/* a media error under one expert's bytes: the request fails with the
	 * loader's error naming the expert, its slot is empty afterwards (no
	 * partial expert is ever handed out), and the cache still serves the
	 * others; once the error is gone the expert reads */
	struct rig r;
	REQUIRE_OK(rig_open(&r, 1, 4));
	struct gpunvme_expert_cache *c = NULL;
	REQUIRE_OK(gpunvme_expert_cache_open(r.x, r.l, 2, &c));
	const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(r.x, 0, 2);
	/* under expert 2's last projection */
	REQUIRE_OK(rig_bad_block(&r, pc[2].offset + pc[2].bytes / 2));
	uint32_t e = 2, s = 0, ok = 1;
	int rc = gpunvme_expert_cache_get(c, 0, &e, 1, &s);
	CHECK_EQ(rc, -EIO);
	CHECK(strstr(gpunvme_last_error(), "layer 0 expert 2") != NULL, "%s", gpunvme_last_error());
	for (uint32_t k = 0; k < 2; k++)
		CHECK(gpunvme_expert_cache_slot(c, k, NULL, NULL) == -ENOENT, "slot %u not empty", k);
	REQUIRE_OK(gpunvme_expert_cache_get(c, 0, &ok, 1, &s));
	REQUIRE_OK(slot_is(&r, c, s, 0, 1));
	gpunvme_emu_clear_faults(gpunvme_ctrl_emu(r.c));
	REQUIRE_OK(gpunvme_expert_cache_get(c, 0, &e, 1, &s));
	REQUIRE_OK(slot_is(&r, c, s, 0, 2));
	gpunvme_expert_cache_close(c);
	rig_close(&r);
	return 0;
}

TEST_CASE(cache_misses_read_together)
{
	/* a request of several misses reads them in one call: each lands in
	 * its own slot, a repeat takes the same slot; with a media error under
	 * the middle one, the one before it is kept, it and the one after stay
	 * empty, and the error names it; once the error is gone all read */
	struct rig r;
	REQUIRE_OK(rig_open(&r, 1, 4));
	struct gpunvme_expert_cache *c = NULL;
	REQUIRE_OK(gpunvme_expert_cache_open(r.x, r.l, 4, &c));
	const uint32_t all[4] = { 3, 0, 3, 1 };
	uint32_t s[4] = { 0 };
	REQUIRE_OK(gpunvme_expert_cache_get(c, 0, all, 4, s));
	CHECK_EQ(s[0], s[2]);
	REQUIRE_OK(slot_is(&r, c, s[0], 0, 3));
	REQUIRE_OK(slot_is(&r, c, s[1], 0, 0));
	REQUIRE_OK(slot_is(&r, c, s[3], 0, 1));
	struct gpunvme_expert_cache_stats st;
	gpunvme_expert_cache_stats(c, &st);
	CHECK_EQ(st.misses, 3);
	gpunvme_expert_cache_close(c);

	REQUIRE_OK(gpunvme_expert_cache_open(r.x, r.l, 4, &c));
	const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(r.x, 0, 2);
	REQUIRE_OK(rig_bad_block(&r, pc[0].offset + pc[0].bytes / 2));
	const uint32_t three[3] = { 1, 2, 3 };
	CHECK_EQ(gpunvme_expert_cache_get(c, 0, three, 3, s), -EIO);
	CHECK(strstr(gpunvme_last_error(), "layer 0 expert 2") != NULL, "%s", gpunvme_last_error());
	uint32_t resident = 0;
	for (uint32_t k = 0; k < 4; k++) {
		uint32_t li = 9, e = 9;
		if (gpunvme_expert_cache_slot(c, k, &li, &e) == 0) {
			resident++;
			CHECK(li == 0 && e == 1, "slot %u holds layer %u expert %u", k, li, e);
			REQUIRE_OK(slot_is(&r, c, k, 0, 1));
		}
	}
	CHECK_EQ(resident, 1);
	gpunvme_emu_clear_faults(gpunvme_ctrl_emu(r.c));
	REQUIRE_OK(gpunvme_expert_cache_get(c, 0, three, 3, s));
	for (uint32_t k = 0; k < 3; k++)
		REQUIRE_OK(slot_is(&r, c, s[k], 0, three[k]));
	gpunvme_expert_cache_close(c);
	rig_close(&r);
	return 0;
}

/* Experts read through a volume as every reader does (volume.h): the model
 * in an ext4 image, opened as a model set, the loader over the volume; then
 * the same image striped over an md RAID0 of 2 members (64 KiB chunks, as
 * mdadm lays it out: bench/md_mkraid0.py), where an expert's bytes cross
 * member boundaries. Every expert of every layer, byte for byte. */
static int volume_round(const char *uri, const uint8_t *file, size_t len)
{
	struct gpunvme_volume_opts vo;
	gpunvme_volume_opts_init(&vo);
	struct gpunvme_volume *v = NULL;
	REQUIRE_OK(gpunvme_volume_open(uri, NULL, &vo, &v));
	struct gpunvme_model_set *set = NULL;
	REQUIRE_OK(gpunvme_model_set_open(gpunvme_volume_fs(v), "/m/model.safetensors", &set));
	REQUIRE(set->size == len);
	struct gpunvme_moe_index *x = NULL;
	REQUIRE_OK(gpunvme_moe_index_build(set->model, &x));
	struct gpunvme_loader_opts o;
	gpunvme_loader_opts_init(&o);
	o.tier = GPUNVME_TIER_CPU;
	struct gpunvme_layer_loader *l = NULL;
	REQUIRE_OK(gpunvme_layer_loader_init_volume(v, set->ext, set->n_ext, set->size, &o, &l));
	struct gpunvme_expert_cache *c = NULL;
	REQUIRE_OK(gpunvme_expert_cache_open(x, l, 4, &c));
	for (uint32_t li = 0; li < x->n_layers; li++)
		for (uint32_t e = 0; e + 1 < x->n_experts; e += 2) {
			uint32_t ids[2] = { e + 1, e }, slots[2];
			{
				int grc = gpunvme_expert_cache_get(c, li, ids, 2, slots);
				REQUIRE(grc == 0, "%s layer %u: %d %s", uri, li, grc, gpunvme_last_error());
			}
			for (int j = 0; j < 2; j++) {
				const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(x, li, ids[j]);
				for (uint32_t p = 0; p < x->n_proj; p++)
					REQUIRE(memcmp(gpunvme_expert_cache_piece(c, slots[j], p), file + pc[p].offset,
						       pc[p].bytes) == 0,
						"%s: layer %u expert %u %s differs", uri, x->layer[li], ids[j], x->proj[p]);
			}
		}
	struct gpunvme_expert_cache_stats st;
	gpunvme_expert_cache_stats(c, &st);
	CHECK_EQ(st.misses, (uint64_t)x->n_layers * x->n_experts);
	gpunvme_expert_cache_close(c);
	gpunvme_layer_loader_destroy(l);
	gpunvme_moe_index_free(x);
	gpunvme_model_set_free(set);
	gpunvme_volume_close(v);
	return 0;
}

TEST_CASE(cache_through_volumes)
{
	if (system("command -v python3 >/dev/null 2>&1 && command -v mkfs.ext4 >/dev/null 2>&1")) {
		fprintf(stderr, "SKIP: needs python3 and mkfs.ext4 (e2fsprogs)\n");
		return TEST_SKIP;
	}
	char dir[] = "/tmp/gpunvme-moe.XXXXXX";
	REQUIRE(mkdtemp(dir));
	struct tdef t[256];
	size_t n = mixtral(t, 3, 6), len;
	/* wider experts than the unit tests': 3 x 24 KiB each, so they span
	 * file system blocks and RAID0 chunks */
	for (size_t i = 0; i < n; i++)
		if (strstr(t[i].name, ".experts."))
			t[i].shape[t[i].shape[0] == 16 ? 0 : 1] *= 32;
	uint8_t *file = safetensors(t, n, &len, 99);
	REQUIRE(moe_model_images(dir, file, len, MD_MKRAID0_PY) == 0);
	char uri[700];
	snprintf(uri, sizeof(uri), "emu:%s/fs.img", dir);
	int rc = volume_round(uri, file, len);
	if (!rc) {
		snprintf(uri, sizeof(uri), "md:emu:%s/r0.img;emu:%s/r1.img", dir, dir);
		rc = volume_round(uri, file, len);
	}
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", dir);
	free(file);
	return rc;
}

int main(int argc, char **argv) { return check_main(argc, argv); }
