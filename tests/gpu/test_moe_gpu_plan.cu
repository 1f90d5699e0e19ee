/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The GPU expert cache's host-side parts, run on the CPU (no GPU needed;
 * built with CUDA because they live in src/cuda/moe_gpu.cu):
 *   plan_ram      the commands of every expert, executed here against the
 *                 namespace memory (reads as copies, zero-fills as zeroes)
 *                 into slot buffers: every piece equals the file's bytes,
 *                 no command writes outside its slot or twice over a byte,
 *                 none is longer than MDTS; a file in three fragments and a
 *                 hole (the hole must come back as zeroes)
 *   plan_md       the same through an md RAID0 of 2 members (512-byte
 *                 blocks, 64 KiB chunks): experts cross members
 *   plan_scale    a 48 GiB Mixtral-shaped model (header only: the plan
 *                 reads no data) over a modeled md RAID0 of 4 members with
 *                 512 KiB chunks (98,304 member extents each): built in
 *                 well under a second, one command per chunk piece
 *   policy        the decide/publish policy the kernels run, on host
 *                 arrays, against the host cache (src/moe/expert_cache.c)
 *                 fed the same ids: the same slot for every expert asked,
 *                 the same counts; a failed read leaves the expert out;
 *                 bad ids and too many ids
 * The GPU read kernel itself is tested by test_gpu_moe.cu on a GPU.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctrl/ctrl_emu.h" /* the emulator behind the controller */
#include "cuda/moe_gpu_plan.h"
#include "gpunvme/emu.h"
#include "gpunvme/gpunvme.h"
#include "gpunvme/md.h"
#include "gpunvme/modelset.h"
#include "gpunvme/moe.h"
#include "gpunvme/volume.h"

#include "../harness/check.h"
#include "moe_model.h"

/* Execute every expert's runs into a slot buffer from the members'
 * namespace memory and compare every piece with the file. */
static int execute(const struct gpunvme_moe_index *x, const struct moe_gpu_plan *p, const struct moe_gpu_member_map *mm,
		   uint8_t *const *ns, const size_t *ns_len, const uint8_t *file)
{
	uint8_t *slot = (uint8_t *)malloc(p->slot_bytes);
	uint8_t *hits = (uint8_t *)malloc(p->slot_bytes);
	REQUIRE(slot && hits);
	const uint32_t np = x->n_proj;
	for (uint32_t key = 0; key < x->n_layers * x->n_experts; key++) {
		memset(slot, 0xa5, p->slot_bytes);
		memset(hits, 0, p->slot_bytes);
		for (uint32_t r = p->first[key]; r < p->first[key + 1]; r++) {
			const struct mg_run *run = &p->runs[r];
			uint64_t len = run->nlb ? (uint64_t)run->nlb << mm[run->member].lba_shift : run->zero;
			REQUIRE(len > 0, "key %u run %u: empty", key, r);
			REQUIRE(run->off + len <= p->slot_bytes, "key %u run %u: bytes %llu+%llu past the slot (%llu)", key, r,
				(unsigned long long)run->off, (unsigned long long)len, (unsigned long long)p->slot_bytes);
			if (run->nlb) {
				REQUIRE(run->nlb <= mm[run->member].max_blocks, "key %u run %u: %u blocks, MDTS %u", key, r, run->nlb,
					mm[run->member].max_blocks);
				uint64_t at = run->slba << mm[run->member].lba_shift;
				REQUIRE(at + len <= ns_len[run->member], "key %u run %u: past member %u's namespace", key, r,
					run->member);
				memcpy(slot + run->off, ns[run->member] + at, len);
			} else {
				memset(slot + run->off, 0, len);
			}
			for (uint64_t b = 0; b < len; b++)
				REQUIRE(hits[run->off + b]++ == 0, "key %u: slot byte %llu written twice", key,
					(unsigned long long)(run->off + b));
		}
		const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(x, key / x->n_experts, key % x->n_experts);
		uint64_t eb = 0;
		for (uint32_t q = 0; q < np; q++) {
			const uint64_t at = p->pos[(size_t)key * np + q];
			REQUIRE(memcmp(slot + at, file + pc[q].offset, pc[q].bytes) == 0, "layer %u expert %u %s differs",
				x->layer[key / x->n_experts], key % x->n_experts, x->proj[q]);
			eb += pc[q].bytes;
		}
		REQUIRE_EQ(p->ebytes[key], eb);
	}
	free(slot);
	free(hits);
	return 0;
}

TEST_CASE(plan_ram)
{
	static struct tdef t[512];
	size_t n = mixtral(t, 4, 8), len;
	for (size_t i = 0; i < n; i++)
		if (strstr(t[i].name, ".experts."))
			t[i].shape[t[i].shape[0] == 16 ? 0 : 1] *= 16;
	uint8_t *file = safetensors(t, n, &len, 7);
	struct gpunvme_model *m = parse(file, len);
	REQUIRE(m);
	struct gpunvme_moe_index *x = NULL;
	REQUIRE_OK(gpunvme_moe_index_build(m, &x));
	/* a hole (zeroes in the file) inside layer 2 expert 5's first piece */
	const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(x, 2, 5);
	uint64_t hole = (pc[0].offset + 4095) / 4096 * 4096;
	REQUIRE(hole + 4096 <= pc[0].offset + pc[0].bytes);
	memset(file + hole, 0, 4096);
	uint64_t size = (len + 4095) / 4096 * 4096, mid = (hole + 4096 + size) / 2 / 4096 * 4096;
	size_t ns_len = 32u << 20;
	uint8_t *ns = (uint8_t *)calloc(1, ns_len);
	REQUIRE(ns);
	for (size_t i = 0; i < ns_len; i++)
		ns[i] = (uint8_t)(i * 131 + 7); /* not zero: a hole read from here would show */
	struct gpunvme_extent ext[3] = {
		{ 0, 20u << 20, hole, 0 }, { hole + 4096, 2u << 20, mid - hole - 4096, 0 }, { mid, 12u << 20, size - mid, 0 }
	};
	for (int k = 0; k < 3; k++) {
		uint64_t end = ext[k].logical + ext[k].length < len ? ext[k].logical + ext[k].length : len;
		memcpy(ns + ext[k].physical, file + ext[k].logical, end - ext[k].logical);
	}
	struct moe_gpu_member_map mm = { ext, 3, 12, 32 };
	struct moe_gpu_plan p;
	REQUIRE_OK(moe_gpu_plan_build(x, &mm, 1, &p));
	uint8_t *nss[1] = { ns };
	size_t lens[1] = { ns_len };
	int rc = execute(x, &p, &mm, nss, lens, file);
	/* 512-byte blocks and short commands: many more runs, same bytes */
	struct moe_gpu_member_map mm9 = { ext, 3, 9, 8 };
	struct moe_gpu_plan p9;
	REQUIRE_OK(moe_gpu_plan_build(x, &mm9, 1, &p9));
	CHECK(p9.n_runs > p.n_runs);
	if (!rc)
		rc = execute(x, &p9, &mm9, nss, lens, file);
	/* a fragment off the 4 KiB grid of 4 KiB blocks: refused, named */
	ext[1].physical += 512;
	struct moe_gpu_plan bad;
	CHECK_EQ(moe_gpu_plan_build(x, &mm, 1, &bad), -EINVAL);
	CHECK(strstr(gpunvme_last_error(), "not on its 4096-byte blocks") != NULL, "%s", gpunvme_last_error());
	moe_gpu_plan_free(&p);
	moe_gpu_plan_free(&p9);
	free(ns);
	gpunvme_moe_index_free(x);
	gpunvme_model_free(m);
	free(file);
	return rc;
}

TEST_CASE(plan_md)
{
	if (system("command -v python3 >/dev/null 2>&1 && command -v mkfs.ext4 >/dev/null 2>&1")) {
		fprintf(stderr, "SKIP: needs python3 and mkfs.ext4 (e2fsprogs)\n");
		return TEST_SKIP;
	}
	char dir[] = "/tmp/gpunvme-mgp.XXXXXX";
	REQUIRE(mkdtemp(dir));
	static struct tdef t[512];
	size_t n = mixtral(t, 3, 6), len;
	for (size_t i = 0; i < n; i++)
		if (strstr(t[i].name, ".experts."))
			t[i].shape[t[i].shape[0] == 16 ? 0 : 1] *= 32;
	uint8_t *file = safetensors(t, n, &len, 11);
	REQUIRE(moe_model_images(dir, file, len, MD_MKRAID0_PY) == 0);
	char uri[900];
	snprintf(uri, sizeof(uri), "md:emu:%s/r0.img;emu:%s/r1.img", dir, dir);
	struct gpunvme_volume_opts vo;
	gpunvme_volume_opts_init(&vo);
	struct gpunvme_volume *v = NULL;
	REQUIRE_OK(gpunvme_volume_open(uri, NULL, &vo, &v));
	struct gpunvme_model_set *set = NULL;
	REQUIRE_OK(gpunvme_model_set_open(gpunvme_volume_fs(v), "/m/model.safetensors", &set));
	struct gpunvme_moe_index *x = NULL;
	REQUIRE_OK(gpunvme_moe_index_build(set->model, &x));
	struct gpunvme_md_volume *md = gpunvme_volume_md(v);
	REQUIRE(md && md->n == 2);
	struct moe_gpu_member_map mm[2];
	uint8_t *ns[2];
	size_t ns_len[2];
	for (uint32_t mb = 0; mb < 2; mb++) {
		struct gpunvme_ns_info ni;
		REQUIRE_OK(gpunvme_ns_info(md->c[mb], md->nsid[mb], &ni));
		mm[mb].lba_shift = ni.lba_shift;
		mm[mb].max_blocks = ni.max_blocks;
		REQUIRE_OK(gpunvme_md_member_extents(md->md, set->ext, set->n_ext, set->size, mb, &mm[mb].ext, &mm[mb].n));
		void *p = NULL;
		REQUIRE_OK(gpunvme_emu_ns_memory(gpunvme_ctrl_emu(md->c[mb]), md->nsid[mb], &p, &ns_len[mb]));
		ns[mb] = (uint8_t *)p;
	}
	struct moe_gpu_plan p;
	REQUIRE_OK(moe_gpu_plan_build(x, mm, 2, &p));
	uint32_t per[2] = { 0, 0 };
	for (size_t r = 0; r < p.n_runs; r++)
		if (p.runs[r].nlb)
			per[p.runs[r].member]++;
	CHECK(per[0] > 0 && per[1] > 0, "runs per member: %u, %u", per[0], per[1]);
	int rc = execute(x, &p, mm, ns, ns_len, file);
	moe_gpu_plan_free(&p);
	for (int mb = 0; mb < 2; mb++)
		free(mm[mb].ext);
	gpunvme_moe_index_free(x);
	gpunvme_model_set_free(set);
	gpunvme_volume_close(v);
	free(file);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", dir);
	return rc;
}

/* A model file of which only the header exists (the parse reads nothing
 * else): zeroes past it. */
struct header_only {
	const uint8_t *h;
	size_t n;
};

static int header_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	const struct header_only *ho = (const struct header_only *)ctx;
	memset(buf, 0, len);
	if (off < ho->n)
		memcpy(buf, ho->h + off, len < ho->n - off ? len : ho->n - off);
	return 0;
}

TEST_CASE(plan_scale)
{
	/* 32 layers x 8 experts x 3 projections of 64 MiB: 48 GiB of experts */
	const uint32_t L = 32, E = 8;
	const uint64_t piece = 64ull << 20;
	struct buf h = { NULL, 0, 0 };
	put(&h, "{", 1);
	char tmp[256];
	uint64_t off = 0;
	for (uint32_t l = 0; l < L; l++)
		for (uint32_t e = 0; e < E; e++)
			for (int w = 1; w <= 3; w++) {
				int k = snprintf(tmp, sizeof(tmp),
						 "%s\"model.layers.%u.block_sparse_moe.experts.%u.w%d.weight\":{\"dtype\":\"BF16\","
						 "\"shape\":[%llu],\"data_offsets\":[%llu,%llu]}",
						 off ? "," : "", l, e, w, (unsigned long long)(piece / 2), (unsigned long long)off,
						 (unsigned long long)(off + piece));
				put(&h, tmp, (size_t)k);
				off += piece;
			}
	put(&h, "}", 1);
	while ((h.n + 8) % 4096)
		put(&h, " ", 1); /* data from a 4 KiB boundary, as large checkpoints are laid out */
	struct buf f = { NULL, 0, 0 };
	put_u64(&f, h.n);
	put(&f, h.p, h.n);
	struct header_only ho = { f.p, f.n };
	const uint64_t size = f.n + off;
	struct gpunvme_model *m = NULL;
	REQUIRE_OK(gpunvme_model_parse(header_read, &ho, size, &m));
	struct gpunvme_moe_index *x = NULL;
	REQUIRE_OK(gpunvme_moe_index_build(m, &x));
	/* md RAID0, 4 members, 512 KiB chunks, data from 1 MiB on each member:
	 * chunk c is member c % 4's chunk c / 4, the others' ELSEWHERE */
	const uint64_t C = 512u << 10, chunks = (size + C - 1) / C;
	struct moe_gpu_member_map mm[4];
	for (uint32_t mb = 0; mb < 4; mb++) {
		mm[mb].ext = (struct gpunvme_extent *)malloc(chunks * sizeof(struct gpunvme_extent));
		REQUIRE(mm[mb].ext);
		mm[mb].n = chunks;
		mm[mb].lba_shift = 12;
		mm[mb].max_blocks = 512; /* 2 MiB */
		for (uint64_t c = 0; c < chunks; c++) {
			struct gpunvme_extent *e = &mm[mb].ext[c];
			e->logical = c * C;
			e->length = C;
			e->physical = (1u << 20) + c / 4 * C;
			e->flags = c % 4 == mb ? 0 : GPUNVME_EXTENT_ELSEWHERE;
		}
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct moe_gpu_plan p;
	REQUIRE_OK(moe_gpu_plan_build(x, mm, 4, &p));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("plan of %u experts over 4 x %llu member extents: %zu commands in %.3f s\n", L * E,
	       (unsigned long long)chunks, p.n_runs, s);
	/* every piece is 64 MiB from a 4 KiB-aligned offset: 128 chunk pieces,
	 * or 129 where it starts inside a chunk */
	CHECK(p.n_runs >= (size_t)L * E * 3 * 128 && p.n_runs <= (size_t)L * E * 3 * 129, "%zu commands", p.n_runs);
	CHECK(s < 2.0, "the plan took %.3f s", s);
	uint64_t per[4] = { 0, 0, 0, 0 }, bytes = 0;
	for (size_t r = 0; r < p.n_runs; r++) {
		REQUIRE(p.runs[r].nlb > 0 && p.runs[r].nlb <= 128, "run %zu: %u blocks (a chunk is 128)", r, p.runs[r].nlb);
		per[p.runs[r].member]++;
		bytes += (uint64_t)p.runs[r].nlb << 12;
	}
	CHECK_EQ(bytes, (uint64_t)L * E * 3 * piece);
	CHECK(per[0] && per[1] && per[2] && per[3]);
	moe_gpu_plan_free(&p);
	for (int mb = 0; mb < 4; mb++)
		free(mm[mb].ext);
	free(h.p);
	free(f.p);
	gpunvme_moe_index_free(x);
	gpunvme_model_free(m);
	return 0;
}

/* The kernels' policy on host arrays, one fetch. */
struct host_policy {
	struct mg_state st;
	int32_t *where;
	int64_t *slot_key;
	uint32_t *freq;
	unsigned long long *used, *mark;
	uint64_t *slot_off;
	uint64_t *pos, *ebytes;
	struct mg_args a;
};

TEST_CASE(policy)
{
	static struct tdef t[512];
	size_t n = mixtral(t, 3, 8), len;
	uint8_t *file = safetensors(t, n, &len, 5);
	struct gpunvme_model *m = parse(file, len);
	REQUIRE(m);
	struct gpunvme_moe_index *x = NULL;
	REQUIRE_OK(gpunvme_moe_index_build(m, &x));
	/* the host cache over the emulator, the file at byte 0 */
	struct gpunvme_ctrl *c = NULL;
	REQUIRE_OK(gpunvme_open("emu:ram:8M?lbads=12", NULL, &c));
	void *nsp = NULL;
	size_t ns_len = 0;
	REQUIRE_OK(gpunvme_emu_ns_memory(gpunvme_ctrl_emu(c), 1, &nsp, &ns_len));
	memcpy(nsp, file, len);
	struct gpunvme_extent ext = { 0, 0, (len + 4095) / 4096 * 4096, 0 };
	struct gpunvme_loader_opts lo;
	gpunvme_loader_opts_init(&lo);
	lo.tier = GPUNVME_TIER_CPU;
	struct gpunvme_layer_loader *l = NULL;
	REQUIRE_OK(gpunvme_layer_loader_init(c, 1, &ext, 1, len, &lo, &l));
	const uint32_t slots = 5, keys = x->n_layers * x->n_experts, np = x->n_proj;
	struct gpunvme_expert_cache *hc = NULL;
	REQUIRE_OK(gpunvme_expert_cache_open(x, l, slots, &hc));
	struct host_policy h;
	memset(&h, 0, sizeof(h));
	h.where = (int32_t *)malloc(keys * sizeof(int32_t));
	h.slot_key = (int64_t *)malloc(slots * sizeof(int64_t));
	h.used = (unsigned long long *)calloc(slots, sizeof(unsigned long long));
	h.mark = (unsigned long long *)calloc(slots, sizeof(unsigned long long));
	h.slot_off = (uint64_t *)calloc((size_t)slots * np, sizeof(uint64_t));
	h.pos = (uint64_t *)calloc((size_t)keys * np, sizeof(uint64_t));
	h.ebytes = (uint64_t *)calloc(keys, sizeof(uint64_t));
	h.freq = (uint32_t *)calloc(keys, sizeof(uint32_t));
	REQUIRE(h.where && h.slot_key && h.used && h.mark && h.slot_off && h.pos && h.ebytes && h.freq);
	memset(h.where, 0xff, keys * sizeof(int32_t));
	memset(h.slot_key, 0xff, slots * sizeof(int64_t));
	for (uint32_t key = 0; key < keys; key++) {
		gpunvme_moe_place(x, key / x->n_experts, key % x->n_experts, h.pos + (size_t)key * np);
		const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(x, key / x->n_experts, key % x->n_experts);
		for (uint32_t q = 0; q < np; q++)
			h.ebytes[key] += pc[q].bytes;
	}
	struct mg_args *a = &h.a;
	a->st = &h.st;
	a->where = h.where;
	a->freq = h.freq;
	a->keys = keys;
	a->slot_key = h.slot_key;
	a->slot_used = h.used;
	a->slot_mark = h.mark;
	a->slot_off = h.slot_off;
	a->pos = h.pos;
	a->ebytes = h.ebytes;
	a->slot_bytes = 1u << 20;
	a->slots = slots;
	a->n_experts = x->n_experts;
	a->n_proj = np;
	uint64_t seed = 3;
	uint32_t ids[3], out[3], hs[3];
	/* enough requests for the counts to be halved several times (every
	 * MOE_POLICY_AGE_PER_KEY x keys) */
	for (int r = 0; r < 3000; r++) {
		uint32_t i = (uint32_t)(rng(&seed) % x->n_layers), k = 1 + (uint32_t)(rng(&seed) % 3);
		for (uint32_t j = 0; j < k; j++)
			ids[j] = rng(&seed) % 3 ? (uint32_t)(rng(&seed) % 3) : (uint32_t)(rng(&seed) % 8); /* repeats too */
		a->layer = i;
		a->ids = ids;
		a->out = out;
		a->k = k;
		moe_gpu_decide(a);
		REQUIRE_EQ(h.st.status, 0);
		moe_gpu_publish(a);
		REQUIRE_OK(gpunvme_expert_cache_get(hc, i, ids, k, hs));
		for (uint32_t j = 0; j < k; j++) {
			REQUIRE(out[j] == hs[j], "request %d id %u: the kernels' policy gave slot %u, the host cache %u", r, ids[j],
				out[j], hs[j]);
			REQUIRE_EQ(h.slot_key[out[j]], (int64_t)(i * x->n_experts + ids[j]));
			REQUIRE_EQ(h.slot_off[(size_t)out[j] * np], (uint64_t)out[j] * a->slot_bytes +
									h.pos[(size_t)(i * x->n_experts + ids[j]) * np]);
		}
	}
	struct gpunvme_expert_cache_stats hst;
	gpunvme_expert_cache_stats(hc, &hst);
	CHECK_EQ(h.st.requests, hst.requests);
	CHECK_EQ(h.st.hits, hst.hits);
	CHECK_EQ(h.st.misses, hst.misses);
	CHECK_EQ(h.st.evictions, hst.evictions);
	CHECK_EQ(h.st.bytes_read, hst.bytes_read);
	/* a failed read: the expert's slot is empty, its request NO_SLOT,
	 * the next request for it a miss */
	uint32_t miss = 7;
	for (uint32_t e = 0; e < x->n_experts; e++)
		if (h.where[2 * x->n_experts + e] < 0) {
			miss = e;
			break;
		}
	REQUIRE(h.where[2 * x->n_experts + miss] < 0);
	ids[0] = miss;
	a->layer = 2;
	a->k = 1;
	moe_gpu_decide(a);
	REQUIRE_EQ(h.st.n_todo, 1);
	h.st.todo_fail[0] = 1;
	uint32_t failed_slot = out[0];
	moe_gpu_publish(a);
	CHECK_EQ(out[0], GPUNVME_GPU_EXPERTS_NO_SLOT);
	CHECK_EQ(h.where[2 * x->n_experts + miss], -1);
	CHECK_EQ(h.slot_key[failed_slot], -1);
	unsigned long long misses = h.st.misses;
	moe_gpu_decide(a);
	moe_gpu_publish(a);
	CHECK_EQ(h.st.misses, misses + 1);
	CHECK_EQ(out[0], failed_slot); /* the empty slot is taken first */
	/* bad ids, too many distinct ones: every slot NO_SLOT, the status set */
	ids[0] = x->n_experts;
	moe_gpu_decide(a);
	CHECK(h.st.status != 0 && out[0] == GPUNVME_GPU_EXPERTS_NO_SLOT);
	h.st.status = 0;
	uint32_t six[6] = { 0, 1, 2, 3, 4, 5 }, o6[6];
	a->ids = six;
	a->out = o6;
	a->k = 6;
	moe_gpu_decide(a);
	CHECK(h.st.status != 0 && h.st.n_todo == 0);
	for (int j = 0; j < 6; j++)
		CHECK_EQ(o6[j], GPUNVME_GPU_EXPERTS_NO_SLOT);
	free(h.where);
	free(h.slot_key);
	free(h.used);
	free(h.mark);
	free(h.slot_off);
	free(h.pos);
	free(h.ebytes);
	free(h.freq);
	gpunvme_expert_cache_close(hc);
	gpunvme_layer_loader_destroy(l);
	gpunvme_close(c);
	gpunvme_moe_index_free(x);
	gpunvme_model_free(m);
	free(file);
	return 0;
}

int main(int argc, char **argv) { return check_main(argc, argv); }
