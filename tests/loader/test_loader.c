/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The layer loader's CPU tier against the embedded emulator: a file laid out
 * in random fragments (with holes and unwritten extents) over a namespace
 * filled with random bytes; random byte ranges loaded into loader memory,
 * DMA memory at every dword misalignment, and plain malloc memory, compared
 * with a reference built byte by byte from the extent table; many ranges in
 * one call (gpunvme_load_layers). Plus every error a caller can cause.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cli/model_writer.h" /* the safetensors writer gpunvme-mkmodel uses */
#include "ctrl/ctrl_emu.h" /* the emulator behind the controller */
#include "gpunvme/emu.h"
#include "gpunvme/gpunvme.h"
#include "gpunvme/loader.h"
#include "harness.h"

#include "layout.h"
#include "loader/loader_plan.h" /* load_op_rows: the GPU backend's strided segments */

/* An emulator controller whose namespace 1 is filled with random bytes
 * (fill_ns): the controller, its namespace memory in *ns; NULL on failure */
static struct gpunvme_ctrl *open_filled(const char *uri, uint64_t seed, uint8_t **ns, size_t *ns_len)
{
	struct gpunvme_ctrl *c = open_emu(uri);
	if (c && !(*ns = fill_ns(c, seed, ns_len))) {
		gpunvme_close(c);
		c = NULL;
	}
	return c;
}

static int check_loads(struct gpunvme_ctrl *c, const struct layout *L, uint64_t seed, int rounds)
{
	struct gpunvme_layer_loader *l = NULL;
	struct gpunvme_loader_opts o;
	gpunvme_loader_opts_init(&o);
	o.queues = 3;
	o.depth = 32;
	REQUIRE_OK(gpunvme_layer_loader_init(c, 1, L->ext, L->n, L->size, &o, &l));
	uint8_t *dma = gpunvme_dma_alloc(c, L->size + 64);
	uint8_t *heap = malloc(L->size + 64);
	REQUIRE(dma && heap);
	for (int r = 0; r < rounds; r++) {
		uint64_t off = rng(&seed) % L->size;
		uint64_t len = rng(&seed) % (L->size - off + 1);
		if (r % 4 == 0)
			len = len % 5000; /* small: inside one or two blocks */
		int where = r % 3;
		uint8_t *dst;
		void *mem = NULL;
		if (where == 0)
			dst = mem = gpunvme_layer_loader_alloc(l, off, len);
		else if (where == 1)
			dst = dma + rng(&seed) % 8; /* every dword misalignment */
		else
			dst = heap + rng(&seed) % 8; /* not DMA memory: staged */
		REQUIRE(dst);
		memset(dst, 0xa5, len);
		uint16_t st = 0xffff;
		int rc = gpunvme_load_layer(l, off, len, dst, &st);
		REQUIRE(rc == 0, "load %llu+%llu (%d): %d %s", (unsigned long long)off, (unsigned long long)len, where,
			 rc, gpunvme_last_error());
		REQUIRE_EQ(st, 0);
		for (uint64_t i = 0; i < len; i++)
			REQUIRE(dst[i] == L->ref[off + i], "load %llu+%llu into %s: byte %llu is 0x%02x, want 0x%02x",
				 (unsigned long long)off, (unsigned long long)len,
				 where == 0 ? "loader memory" : where == 1 ? "DMA memory" : "heap memory",
				 (unsigned long long)i, dst[i], L->ref[off + i]);
		if (mem)
			gpunvme_layer_loader_free(l, mem);
	}
	/* loader memory: only edge blocks are bounced */
	struct gpunvme_loader_stats st0, st1;
	gpunvme_layer_loader_stats(l, &st0);
	uint8_t *mem = gpunvme_layer_loader_alloc(l, 1, L->size - 1);
	REQUIRE(mem);
	REQUIRE_OK(gpunvme_load_layer(l, 1, L->size - 1, mem, NULL));
	REQUIRE(!memcmp(mem, L->ref + 1, L->size - 1));
	gpunvme_layer_loader_stats(l, &st1);
	REQUIRE(st1.bounced_bytes - st0.bounced_bytes < 2ull * L->n * 4096, "bounced %llu bytes of %llu",
		 (unsigned long long)(st1.bounced_bytes - st0.bounced_bytes), (unsigned long long)L->size);
	REQUIRE(st1.direct_bytes > st0.direct_bytes);
	free(heap);
	gpunvme_dma_free(c, dma);
	gpunvme_layer_loader_destroy(l);
	return 0;
}

/* Which direct ops the GPU backend reads as one strided segment
 * (load_op_rows): an md member's consecutive chunks, 4 members of 512 KiB
 * (blocks of 4 KiB), and every way such a run ends. The runs found cover
 * every op once. */
TEST_CASE(strided_rows)
{
	struct load_op ops[48];
	const uint32_t mb = 128, sh = 12; /* 512 KiB a command */
	for (uint32_t i = 0; i < 48; i++)
		ops[i] = (struct load_op){ .kind = LOAD_DIRECT, .nlb = 128, .slba = 1000 + i * 128,
					   .dst_off = 4096 + (uint64_t)i * (2u << 20), .span = 3 };
	uint64_t pitch = 0;
	CHECK_EQ(load_op_rows(ops, 48, 0, mb, sh, &pitch), 32); /* a warp's lanes at most */
	CHECK_EQ(pitch, 2u << 20);
	CHECK_EQ(load_op_rows(ops, 48, 32, mb, sh, &pitch), 16);
	CHECK_EQ(load_op_rows(ops, 48, 47, mb, sh, &pitch), 1); /* the last alone */
	CHECK_EQ(load_op_rows(ops, 48, 0, 64, sh, &pitch), 1); /* a row would be two commands */
	/* each way a run ends, at op 5 of ops 0..11 */
	for (int how = 0; how < 7; how++) {
		struct load_op v[12];
		memcpy(v, ops, sizeof(v));
		switch (how) {
		case 0: v[5].span = 4; break;                   /* another range */
		case 1: v[5].nlb = 64; break;                   /* another width */
		case 2: v[5].slba += 8; break;                  /* not the next blocks */
		case 3: v[5].dst_off += 4096; break;            /* off the pitch */
		case 4: v[5].kind = LOAD_BOUNCE; break;         /* not a direct read */
		case 5: v[5].dst_off = v[4].dst_off - (1u << 20); break; /* backwards */
		case 6: v[5].kind = LOAD_ZERO; break;
		}
		CHECK_EQ(load_op_rows(v, 12, 0, mb, sh, &pitch), 5);
	}
	/* no pitch of a row's bytes or less (contiguous or overlapping), and
	 * none backwards from the first pair */
	struct load_op c2[3] = { ops[0], ops[1], ops[2] };
	c2[1].dst_off = c2[0].dst_off + (512u << 10);
	CHECK_EQ(load_op_rows(c2, 3, 0, mb, sh, &pitch), 1);
	c2[1].dst_off = c2[0].dst_off + (256u << 10);
	CHECK_EQ(load_op_rows(c2, 3, 0, mb, sh, &pitch), 1);
	c2[0].dst_off = 8u << 20;
	c2[1].dst_off = 6u << 20;
	CHECK_EQ(load_op_rows(c2, 3, 0, mb, sh, &pitch), 1);
	/* a mixed list: the runs found cover every op once */
	struct load_op m[40];
	uint64_t seed = 11;
	for (uint32_t i = 0; i < 40; i++) {
		m[i] = ops[i];
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		if ((seed >> 40) % 5 == 0)
			m[i].dst_off += 8192;
	}
	size_t covered = 0, runs = 0;
	for (size_t i = 0, n; i < 40; i += n, runs++) {
		n = load_op_rows(m, 40, i, mb, sh, &pitch);
		REQUIRE(n >= 1 && i + n <= 40);
		covered += n;
	}
	CHECK_EQ(covered, 40);
	CHECK(runs < 40, "no strided run in a mostly regular list");
	return 0;
}

TEST_CASE(random_512)
{
	size_t ns_len;
	uint8_t *ns;
	struct gpunvme_ctrl *c = open_filled("emu:ram:32M?lbads=9&workers=2", 1, &ns, &ns_len);
	REQUIRE(c);
	struct layout L;
	make_layout(&L, ns, ns_len, 3 * 1024 * 1024 + 12345, 7);
	int rc = check_loads(c, &L, 11, 120);
	free(L.ref);
	gpunvme_close(c);
	return rc;
}

TEST_CASE(random_4k_mdts)
{
	/* 4 KiB blocks, 8 KiB per command: many commands per fragment */
	size_t ns_len;
	uint8_t *ns;
	struct gpunvme_ctrl *c = open_filled("emu:ram:32M?lbads=12&mdts=1&workers=3", 2, &ns, &ns_len);
	REQUIRE(c);
	struct layout L;
	make_layout(&L, ns, ns_len, 2 * 1024 * 1024 + 7, 9);
	int rc = check_loads(c, &L, 13, 90);
	free(L.ref);
	gpunvme_close(c);
	return rc;
}

TEST_CASE(unaligned_physical)
{
	/* extents that start mid-block on the device (FIEMAP of an inline or
	 * tail-packed file could give that): edge blocks on both sides */
	size_t ns_len;
	uint8_t *ns;
	struct gpunvme_ctrl *c = open_filled("emu:ram:8M?lbads=12", 3, &ns, &ns_len);
	REQUIRE(c);
	struct gpunvme_extent ext[2] = { { 0, 4096 * 3 + 100, 5000, 0 }, { 5000, 4096 * 9 + 17, 30000, 0 } };
	struct gpunvme_layer_loader *l = NULL;
	REQUIRE_OK(gpunvme_layer_loader_init(c, 1, ext, 2, 35000, NULL, &l));
	uint8_t *dst = gpunvme_dma_alloc(c, 35000);
	REQUIRE_OK(gpunvme_load_layer(l, 0, 35000, dst, NULL));
	REQUIRE(!memcmp(dst, ns + ext[0].physical, 5000));
	REQUIRE(!memcmp(dst + 5000, ns + ext[1].physical, 30000));
	gpunvme_dma_free(c, dst);
	gpunvme_layer_loader_destroy(l);
	gpunvme_close(c);
	return 0;
}

TEST_CASE(errors)
{
	struct gpunvme_ctrl *c = open_emu("emu:ram:8M?lbads=12");
	REQUIRE(c);
	struct gpunvme_extent ext[1] = { { 0, 4096, 65536, 0 } };
	struct gpunvme_layer_loader *l = NULL;
	/* a file the namespace cannot hold */
	struct gpunvme_extent far[1] = { { 0, 8u << 20, 4096, 0 } };
	REQUIRE_EQ(gpunvme_layer_loader_init(c, 1, far, 1, 4096, NULL, &l), -ERANGE);
	REQUIRE(strstr(gpunvme_last_error(), "past the end of the namespace"));
	struct gpunvme_extent unsorted[2] = { { 8192, 4096, 4096, 0 }, { 0, 16384, 4096, 0 } };
	REQUIRE_EQ(gpunvme_layer_loader_init(c, 1, unsorted, 2, 12288, NULL, &l), -EINVAL);
	REQUIRE_EQ(gpunvme_layer_loader_init(c, 7, ext, 1, 65536, NULL, &l), -ENOENT);
	/* GPU tiers without the CUDA backend */
	struct gpunvme_loader_opts o;
	gpunvme_loader_opts_init(&o);
	o.tier = GPUNVME_TIER_2;
	REQUIRE_EQ(gpunvme_layer_loader_init(c, 1, ext, 1, 65536, &o, &l), -ENOTSUP);
	REQUIRE(strstr(gpunvme_last_error(), "CUDA"));
	o.tier = (enum gpunvme_tier)9;
	REQUIRE_EQ(gpunvme_layer_loader_init(c, 1, ext, 1, 65536, &o, &l), -EINVAL);

	REQUIRE_OK(gpunvme_layer_loader_init(c, 1, ext, 1, 65536, NULL, &l));
	uint8_t *dst = gpunvme_dma_alloc(c, 65536);
	REQUIRE_EQ(gpunvme_load_layer(l, 65000, 537, dst, NULL), -ERANGE);
	REQUIRE(strstr(gpunvme_last_error(), "past the end of the file"));
	REQUIRE_EQ(gpunvme_load_layer(l, UINT64_MAX, 2, dst, NULL), -ERANGE);
	REQUIRE_EQ(gpunvme_load_layer(l, 0, 100, NULL, NULL), -EINVAL);
	REQUIRE_OK(gpunvme_load_layer(l, 65536, 0, dst, NULL)); /* empty range at EOF */
	REQUIRE_EQ(gpunvme_load_layer_async(l, 0, 100, dst, NULL, NULL), -ENOTSUP);
	/* guards are for the GPU tiers' asynchronous loads; nothing to mark here */
	REQUIRE_EQ(gpunvme_load_guard_async(l, dst, 100, NULL), -ENOTSUP);
	REQUIRE(strstr(gpunvme_last_error(), "GPU tier"), "%s", gpunvme_last_error());
	REQUIRE_EQ(gpunvme_load_guard_async(NULL, dst, 100, NULL), -EINVAL);
	REQUIRE_EQ(gpunvme_load_guard_async(l, NULL, 100, NULL), -EINVAL);
	REQUIRE_EQ(gpunvme_layer_loader_failed(l), 0);
	REQUIRE_EQ(gpunvme_layer_loader_failed(NULL), 0);

	/* media error inside the file: -EIO with the NVMe status */
	struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_MEDIA, .nsid = 1, .slba = 3, .nlb = 1 };
	REQUIRE_OK(gpunvme_emu_inject(gpunvme_ctrl_emu(c), &f));
	uint16_t st = 0;
	REQUIRE_EQ(gpunvme_load_layer(l, 0, 65536, dst, &st), -EIO);
	REQUIRE_EQ(gpunvme_status_code(st), GPUNVME_SC_UNRECOVERED_READ & 0x7ff);
	REQUIRE(strstr(gpunvme_last_error(), "Unrecovered Read Error"));
	gpunvme_emu_clear_faults(gpunvme_ctrl_emu(c));
	REQUIRE_OK(gpunvme_load_layer(l, 0, 65536, dst, &st));

	/* device gone: a clear error, no hang */
	struct gpunvme_emu_fault rm = { .kind = GPUNVME_EMU_FAULT_REMOVE };
	REQUIRE_OK(gpunvme_emu_inject(gpunvme_ctrl_emu(c), &rm));
	int rc = gpunvme_load_layer(l, 0, 65536, dst, &st);
	REQUIRE(rc == -ENODEV || rc == -EIO, "after removal: %d %s", rc, gpunvme_last_error());
	gpunvme_dma_free(c, dst);
	gpunvme_layer_loader_destroy(l);
	gpunvme_close(c);
	return 0;
}
/* The guard bytes either side of a load's target still hold 0x5a. */
static bool guards_intact(const uint8_t *mem, size_t guard, size_t len)
{
	for (size_t i = 0; i < guard; i++)
		if (mem[i] != 0x5a || mem[guard + len + i] != 0x5a)
			return false;
	return true;
}

/*
 * Several ranges in one call (gpunvme_load_layers): up to 300 spans of
 * random ranges (empty ones, ones inside a block, ones near the whole
 * file), each into loader memory of its own, a shared loader allocation,
 * DMA memory at every dword misalignment, or heap memory (staged), with
 * guard bytes either side; heap spans of more than the bounce buffer in
 * total, so the spans' reads share several rounds. Every byte compared.
 */
TEST_CASE(many_spans)
{
	size_t ns_len;
	uint8_t *ns;
	struct gpunvme_ctrl *c = open_filled("emu:ram:32M?lbads=9&workers=2", 21, &ns, &ns_len);
	REQUIRE(c);
	struct layout L;
	make_layout(&L, ns, ns_len, 3 * 1024 * 1024 + 4321, 17);
	struct gpunvme_layer_loader *l = NULL;
	struct gpunvme_loader_opts o;
	gpunvme_loader_opts_init(&o);
	o.queues = 2;
	o.depth = 16;
	REQUIRE_OK(gpunvme_layer_loader_init(c, 1, L.ext, L.n, L.size, &o, &l));
	enum { MAXN = 300, G = 16 };
	struct gpunvme_load_span sp[MAXN];
	uint8_t *mem[MAXN], *base[MAXN];
	int kind[MAXN];
	uint64_t seed = 99;
	uint8_t *shared = gpunvme_layer_loader_alloc(l, 0, L.size + 2 * G);
	REQUIRE(shared);
	for (int round = 0; round < 8; round++) {
		const size_t n = round == 0 ? 1 : round == 7 ? 6 : 1 + rng(&seed) % MAXN;
		uint64_t shared_at = 0;
		for (size_t i = 0; i < n; i++) {
			uint64_t off = rng(&seed) % L.size, len = rng(&seed) % (L.size - off + 1);
			if (i % 3 == 0)
				len %= 5000; /* inside one or two blocks */
			if (i % 17 == 5)
				len = 0;
			/* round 7: heap spans of ~2.5 MiB, > 8 MiB in all: bounced in several rounds */
			kind[i] = round == 7 ? 3 : (int)(rng(&seed) % 4);
			if (round == 7)
				off = rng(&seed) % (L.size / 8), len = L.size / 8 * 6 + rng(&seed) % 4096;
			if (kind[i] == 1 && shared_at + len + 2 * G > L.size + 2 * G)
				kind[i] = 0; /* the shared allocation is full */
			mem[i] = NULL;
			if (kind[i] == 0)
				base[i] = mem[i] = gpunvme_layer_loader_alloc(l, off >= G ? off - G : 0, len + 2 * G);
			else if (kind[i] == 1)
				base[i] = shared + shared_at, shared_at += len + 2 * G;
			else if (kind[i] == 2)
				base[i] = mem[i] = gpunvme_dma_alloc(c, len + 2 * G + 8);
			else
				base[i] = mem[i] = malloc(len + 2 * G + 8);
			REQUIRE(base[i], "span %zu: no memory (kind %d)", i, kind[i]);
			if (kind[i] >= 2)
				base[i] += rng(&seed) % 8; /* every dword misalignment */
			memset(base[i], 0x5a, len + 2 * G);
			sp[i] = (struct gpunvme_load_span){ off, len, base[i] + G };
		}
		uint16_t st = 0xffff;
		REQUIRE_OK(gpunvme_load_layers(l, sp, n, &st));
		REQUIRE_EQ(st, 0);
		for (size_t i = 0; i < n; i++) {
			const uint8_t *d = (const uint8_t *)sp[i].dst;
			REQUIRE(!memcmp(d, L.ref + sp[i].off, sp[i].len), "round %d span %zu of %zu (%llu+%llu, kind %d): "
				"bytes differ", round, i, n, (unsigned long long)sp[i].off, (unsigned long long)sp[i].len,
				kind[i]);
			REQUIRE(guards_intact(base[i], G, sp[i].len), "round %d span %zu: guard bytes overwritten", round, i);
			if (kind[i] == 0)
				gpunvme_layer_loader_free(l, mem[i]);
			else if (kind[i] == 2)
				gpunvme_dma_free(c, mem[i]);
			else if (kind[i] == 3)
				free(mem[i]);
		}
	}
	/* no ranges: nothing to do; an empty range at the end of the file */
	REQUIRE_OK(gpunvme_load_layers(l, NULL, 0, NULL));
	sp[0] = (struct gpunvme_load_span){ L.size, 0, shared };
	REQUIRE_OK(gpunvme_load_layers(l, sp, 1, NULL));
	/* a bad range among good ones names itself; nothing is read */
	for (int i = 0; i < 5; i++)
		sp[i] = (struct gpunvme_load_span){ (uint64_t)i * 1000, 1000, shared + i * 1000 };
	sp[3].off = L.size - 10;
	REQUIRE_EQ(gpunvme_load_layers(l, sp, 5, NULL), -ERANGE);
	REQUIRE(strstr(gpunvme_last_error(), "range 3 of 5") && strstr(gpunvme_last_error(), "past the end"), "%s",
		gpunvme_last_error());
	sp[3].off = 0;
	sp[4].dst = NULL;
	REQUIRE_EQ(gpunvme_load_layers(l, sp, 5, NULL), -EINVAL);
	REQUIRE(strstr(gpunvme_last_error(), "range 4 of 5"), "%s", gpunvme_last_error());
	REQUIRE_EQ(gpunvme_load_layers(l, NULL, 2, NULL), -EINVAL);
	REQUIRE(strstr(gpunvme_last_error(), "no ranges"), "%s", gpunvme_last_error());
	REQUIRE_EQ(gpunvme_load_layers(NULL, sp, 1, NULL), -EINVAL);
	REQUIRE_EQ(gpunvme_load_layers_async(l, sp, 3, NULL, NULL), -ENOTSUP);
	/* a media error in one span: -EIO with the status, after the retries */
	sp[4].dst = shared + 4000;
	struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_MEDIA, .nsid = 1, .slba = L.ext[0].physical / 512,
				       .nlb = 1 };
	REQUIRE_OK(gpunvme_emu_inject(gpunvme_ctrl_emu(c), &f));
	uint16_t st = 0;
	sp[2] = (struct gpunvme_load_span){ L.ext[0].logical, 512, shared + 20000 };
	REQUIRE_EQ(gpunvme_load_layers(l, sp, 5, &st), -EIO);
	REQUIRE_EQ(gpunvme_status_code(st), GPUNVME_SC_UNRECOVERED_READ & 0x7ff);
	gpunvme_emu_clear_faults(gpunvme_ctrl_emu(c));
	REQUIRE_OK(gpunvme_load_layers(l, sp, 5, &st));
	gpunvme_layer_loader_free(l, shared);
	gpunvme_layer_loader_destroy(l);
	free(L.ref);
	gpunvme_close(c);
	return 0;
}

/* Retries after recovery: a dropped command (timeout, abort step), a fatal
 * controller (reset), a media error that stays (fails with the range and
 * the status after 1 + retries tries), retries = 0. */
TEST_CASE(retries)
{
	struct gpunvme_ctrl *c = NULL;
	struct gpunvme_opts co;
	gpunvme_opts_init(&co);
	co.io_timeout_ms = 200;
	/* 8 KiB per command (mdts=1): a 4 MiB load is 512 commands through
	 * 2 queue pairs of 8 entries, so almost every submission waits for a
	 * free slot while a fault strikes */
	REQUIRE_OK(gpunvme_open("emu:ram:16M?lbads=12&mdts=1", &co, &c));
	struct gpunvme_emu *emu = gpunvme_ctrl_emu(c);
	/* reference contents through a queue pair of our own */
	const size_t len = 4u << 20, guard = 4096;
	uint8_t *ref = gpunvme_dma_alloc(c, len), *mem = gpunvme_dma_alloc(c, len + 2 * guard);
	REQUIRE(ref && mem);
	uint8_t *dst = mem + guard; /* 4 KiB either side must stay untouched */
	memset(mem, 0x5a, len + 2 * guard);
	uint64_t seed = 5;
	for (size_t i = 0; i < len; i++)
		ref[i] = (uint8_t)rng(&seed);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 8, &qp));
	REQUIRE_OK(gpunvme_write_sync(qp, 1, ref, 16, len / 4096, NULL));
	gpunvme_qpair_destroy(qp);
	struct gpunvme_extent ext[1] = { { 0, 16 * 4096, len, 0 } };
	struct gpunvme_loader_opts o;
	gpunvme_loader_opts_init(&o);
	REQUIRE_EQ(o.retries, 2u);
	o.queues = 2;
	o.depth = 8;
	struct gpunvme_layer_loader *l = NULL;
	REQUIRE_OK(gpunvme_layer_loader_init(c, 1, ext, 1, len, &o, &l));
	struct gpunvme_loader_stats st;

	/* dropped: times out, the abort step gives the id back, tried again */
	struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_DROP, .sqid = GPUNVME_EMU_SQID_ANY, .count = 1 };
	REQUIRE_OK(gpunvme_emu_inject(emu, &f));
	memset(dst, 0, len);
	REQUIRE(gpunvme_load_layer(l, 0, len, dst, NULL) == 0, "%s", gpunvme_last_error());
	REQUIRE(!memcmp(dst, ref, len));
	REQUIRE(guards_intact(mem, guard, len));
	gpunvme_layer_loader_stats(l, &st);
	REQUIRE_EQ(st.retries, 1u);
	REQUIRE_EQ(st.resets, 0u);

	/* controller fatal: reset, tried again */
	struct gpunvme_emu_fault cfs = { .kind = GPUNVME_EMU_FAULT_CFS };
	REQUIRE_OK(gpunvme_emu_inject(emu, &cfs));
	memset(dst, 0, len);
	REQUIRE(gpunvme_load_layer(l, 0, len, dst, NULL) == 0, "%s", gpunvme_last_error());
	REQUIRE(!memcmp(dst, ref, len));
	REQUIRE(guards_intact(mem, guard, len));
	gpunvme_layer_loader_stats(l, &st);
	REQUIRE_EQ(st.retries, 2u);
	REQUIRE_EQ(st.resets, 1u);

	/* a media error that stays: 3 tries, then the range and the status */
	struct gpunvme_emu_fault m = { .kind = GPUNVME_EMU_FAULT_MEDIA, .nsid = 1, .slba = 40, .nlb = 1 };
	REQUIRE_OK(gpunvme_emu_inject(emu, &m));
	uint16_t status = 0;
	REQUIRE_EQ(gpunvme_load_layer(l, 4096, len - 4096, dst, &status), -EIO);
	REQUIRE_EQ(gpunvme_status_code(status), GPUNVME_SC_UNRECOVERED_READ & 0x7ff);
	const char *e = gpunvme_last_error();
	REQUIRE(guards_intact(mem, guard, len)); /* a failed load too stays inside its target */
	REQUIRE(strstr(e, "bytes 4096+4190208") && strstr(e, "3 tries") && strstr(e, "LBA ") &&
		strstr(e, "Unrecovered Read Error"), "message: %s", e);
	gpunvme_layer_loader_stats(l, &st);
	REQUIRE_EQ(st.retries, 4u);
	gpunvme_layer_loader_destroy(l);

	/* retries = 0: one try */
	o.retries = 0;
	REQUIRE_OK(gpunvme_layer_loader_init(c, 1, ext, 1, len, &o, &l));
	REQUIRE_EQ(gpunvme_load_layer(l, 0, len, dst, &status), -EIO);
	REQUIRE(strstr(gpunvme_last_error(), "1 try"), "message: %s", gpunvme_last_error());
	gpunvme_layer_loader_stats(l, &st);
	REQUIRE_EQ(st.retries, 0u);
	gpunvme_emu_clear_faults(emu);
	REQUIRE_OK(gpunvme_load_layer(l, 0, len, dst, NULL));
	REQUIRE(!memcmp(dst, ref, len));
	REQUIRE(guards_intact(mem, guard, len));
	gpunvme_layer_loader_destroy(l);
	gpunvme_dma_free(c, ref);
	gpunvme_dma_free(c, mem);
	gpunvme_close(c);
	return 0;
}

/* A safetensors file scattered over the namespace in fragments: every
 * tensor (or those a pattern selects) lands intact through
 * gpunvme_model_buffers_alloc + gpunvme_model_load, far-apart tensors in
 * separate runs, a zero-size one included. */
TEST_CASE(model_load)
{
	size_t ns_len;
	uint8_t *ns;
	struct gpunvme_ctrl *c = open_filled("emu:ram:32M?lbads=9&workers=2", 4, &ns, &ns_len);
	REQUIRE(c);
	/* data: a 1 MiB gap of padding between "a.*" and "b.*" so they form two runs
	 * when only some are selected; the data at an odd offset */
	const uint64_t big = 6u << 20;
	const uint64_t s_aw[] = { 3, 7 }, s_az[] = { 0 }, s_pad[] = { big }, s_bw[] = { 5, 1001 }, s_odd[] = { 16 };
	const struct st_tensor tensors[] = {
		{ .name = "a.w", .dtype = "F32", .ndim = 2, .shape = s_aw, .begin = 0, .end = 84 },
		{ .name = "a.z", .dtype = "F16", .ndim = 1, .shape = s_az, .begin = 84, .end = 84 },
		{ .name = "pad", .dtype = "U8", .ndim = 1, .shape = s_pad, .begin = 84, .end = 84 + big },
		{ .name = "b.w", .dtype = "I8", .ndim = 2, .shape = s_bw, .begin = 84 + big, .end = 84 + big + 5005 },
		/* a name no pattern selects exactly: only an index list does */
		{ .name = "w*,[x]", .dtype = "U8", .ndim = 1, .shape = s_odd, .begin = 84 + big + 5005,
		  .end = 84 + big + 5021 },
	};
	struct st_writer w;
	struct bb hdr = { 0 };
	st_begin(&w);
	for (size_t i = 0; i < sizeof(tensors) / sizeof(tensors[0]); i++)
		st_tensor(&w, &tensors[i]);
	st_finish(&w, &hdr, 1);
	uint64_t size = hdr.n + 84 + big + 5021;
	uint8_t *file = malloc(size);
	REQUIRE(file);
	uint64_t seed = 77;
	memcpy(file, hdr.p, hdr.n);
	for (uint64_t i = hdr.n; i < size; i++)
		file[i] = (uint8_t)rng(&seed);
	free(hdr.p);
	/* fragments of 4..40 KiB at scattered, block-aligned places */
	struct gpunvme_extent ext[1024];
	size_t n = 0;
	uint64_t slot = 3;
	for (uint64_t lo = 0; lo < size && n < 1024; n++) {
		uint64_t len = 4096 * (1 + rng(&seed) % 10);
		ext[n] = (struct gpunvme_extent){ lo, slot * 4096, len, 0 };
		uint64_t k = lo + len < size ? len : size - lo;
		memcpy(ns + slot * 4096, file + lo, k);
		slot += len / 4096 + 1 + rng(&seed) % 3;
		lo += len;
		REQUIRE(slot * 4096 < ns_len);
	}
	struct gpunvme_model *m = NULL;
	REQUIRE_OK(gpunvme_model_parse_mem(file, size, &m));
	struct gpunvme_layer_loader *l = NULL;
	REQUIRE_OK(gpunvme_layer_loader_init(c, 1, ext, n, size, NULL, &l));
	const char *sel[] = { NULL, "a.*,b.w", "b.*" };
	const size_t want_runs[] = { 1, 2, 1 };
	for (int k = 0; k < 3; k++) {
		struct gpunvme_model_buffers *b = NULL;
		REQUIRE_OK(gpunvme_model_buffers_alloc(l, m, sel[k], &b));
		REQUIRE_EQ(b->n_runs, want_runs[k]);
		REQUIRE_OK(gpunvme_model_load(l, b, NULL, NULL, NULL));
		for (size_t i = 0; i < b->n_tensors; i++) {
			const struct gpunvme_tensor *t = b->tensors[i];
			REQUIRE(!memcmp(b->ptr[i], file + t->offset, t->bytes), "tensor %s (selection %s)", t->name,
				 sel[k] ? sel[k] : "all");
		}
		gpunvme_model_buffers_free(l, b);
	}
	struct gpunvme_model_buffers *none = NULL;
	REQUIRE_EQ(gpunvme_model_buffers_alloc(l, m, "nothing*", &none), -ENOENT);
	REQUIRE(strstr(gpunvme_last_error(), "no tensor matches"));
	/* exact selection by index, in the caller's order: b->ptr[k] is idx[k]'s */
	const size_t idx[][3] = { { 4, 0, 1 }, { 3, 4, 0 }, { 2, 0, 0 } };
	const size_t nidx[] = { 3, 3, 1 }, sel_runs[] = { 2, 2, 1 };
	for (int k = 0; k < 3; k++) {
		struct gpunvme_model_buffers *b = NULL;
		REQUIRE_OK(gpunvme_model_buffers_alloc_sel(l, m, idx[k], nidx[k], &b));
		REQUIRE_EQ(b->n_tensors, nidx[k]);
		REQUIRE_EQ(b->n_runs, sel_runs[k]);
		REQUIRE_OK(gpunvme_model_load(l, b, NULL, NULL, NULL));
		for (size_t i = 0; i < b->n_tensors; i++) {
			const struct gpunvme_tensor *t = b->tensors[i];
			REQUIRE(t == &m->tensors[idx[k][i]]);
			REQUIRE(!memcmp(b->ptr[i], file + t->offset, t->bytes), "tensor %s (index selection %d)",
				 t->name, k);
		}
		gpunvme_model_buffers_free(l, b);
	}
	/* the widest gap a run spans, given: the 6 MiB of "pad" between a.w and
	 * b.w is read across at 7 MiB, not at the default 4; touching tensors
	 * (b.w and the next) share a run even at 0 */
	const size_t across[] = { 0, 3 }, touching[] = { 3, 4 };
	const struct {
		const size_t *idx;
		uint64_t gap;
		size_t runs;
		uint64_t run_bytes;
	} gaps[] = { { across, 7u << 20, 1, 84 + big + 5005 }, { across, GPUNVME_MODEL_RUN_GAP, 2, 84 + 5005 },
		     { across, 0, 2, 84 + 5005 }, { touching, 0, 1, 5021 } };
	for (size_t k = 0; k < sizeof(gaps) / sizeof(gaps[0]); k++) {
		struct gpunvme_model_buffers *b = NULL;
		REQUIRE_OK(gpunvme_model_buffers_alloc_sel_gap(l, m, gaps[k].idx, 2, gaps[k].gap, &b));
		REQUIRE(b->n_runs == gaps[k].runs, "gap case %zu: %zu runs", k, b->n_runs);
		REQUIRE(b->run_bytes == gaps[k].run_bytes, "gap case %zu: %llu bytes", k, (unsigned long long)b->run_bytes);
		REQUIRE_OK(gpunvme_model_load(l, b, NULL, NULL, NULL));
		for (size_t i = 0; i < b->n_tensors; i++)
			REQUIRE(!memcmp(b->ptr[i], file + b->tensors[i]->offset, b->tensors[i]->bytes), "gap case %zu", k);
		gpunvme_model_buffers_free(l, b);
	}
	struct gpunvme_model_buffers *empty = NULL;
	REQUIRE_OK(gpunvme_model_buffers_alloc_sel(l, m, NULL, 0, &empty));
	REQUIRE(empty->n_tensors == 0 && empty->n_runs == 0);
	REQUIRE_OK(gpunvme_model_load(l, empty, NULL, NULL, NULL));
	gpunvme_model_buffers_free(l, empty);
	const size_t past[] = { 0, 5 }, twice[] = { 1, 3, 1 };
	REQUIRE_EQ(gpunvme_model_buffers_alloc_sel(l, m, past, 2, &none), -ERANGE);
	REQUIRE(strstr(gpunvme_last_error(), "past the model"));
	REQUIRE_EQ(gpunvme_model_buffers_alloc_sel(l, m, twice, 3, &none), -EINVAL);
	REQUIRE(strstr(gpunvme_last_error(), "selected twice"));
	REQUIRE_EQ(gpunvme_model_buffers_alloc_sel(l, m, NULL, 2, &none), -EINVAL);
	/* loader memory outlives nothing: destroy frees it, the struct is freed alone */
	struct gpunvme_model_buffers *late = NULL;
	REQUIRE_OK(gpunvme_model_buffers_alloc_sel(l, m, idx[0], 3, &late));
	gpunvme_layer_loader_destroy(l);
	gpunvme_model_buffers_free(NULL, late);
	gpunvme_model_free(m);
	free(file);
	gpunvme_close(c);
	return 0;
}

int main(int argc, char **argv) { return check_main(argc, argv); }

/* Loads of `rounds` random ranges of L into loader memory (placed for the
 * range) and heap memory (staged), every byte compared */
static int load_some(struct gpunvme_layer_loader *l, const struct layout *L, uint64_t seed, int rounds,
		     const char *what)
{
	uint8_t *heap = malloc(L->size + 8);
	REQUIRE(heap);
	for (int r = 0; r < rounds; r++) {
		const uint64_t off = rng(&seed) % L->size, len = 1 + rng(&seed) % (L->size - off);
		uint8_t *mem = r % 2 ? gpunvme_layer_loader_alloc(l, off, len) : NULL;
		uint8_t *dst = mem ? mem : heap + r % 8;
		REQUIRE(dst);
		memset(dst, 0xa5, len);
		REQUIRE_OK(gpunvme_load_layer(l, off, len, dst, NULL));
		REQUIRE(!memcmp(dst, L->ref + off, len), "%s: load %llu+%llu", what, (unsigned long long)off,
			(unsigned long long)len);
		gpunvme_layer_loader_free(l, mem);
	}
	free(heap);
	return 0;
}

/* One loader pointed at one file, then another, then back: every load
 * reads the file it is pointed at; a file it cannot take leaves it on the
 * one it had; memory allocated before a retarget serves after it. */
TEST_CASE(retarget)
{
	size_t ns_len;
	uint8_t *ns;
	struct gpunvme_ctrl *c = open_filled("emu:ram:32M?lbads=9&workers=2", 3, &ns, &ns_len);
	REQUIRE(c);
	struct layout A, B;
	make_layout(&A, ns, ns_len, 3 * 1024 * 1024 + 12345, 7);
	make_layout(&B, ns, ns_len, 1024 * 1024 + 4321, 19);
	struct gpunvme_loader_opts o;
	gpunvme_loader_opts_init(&o);
	o.queues = 2;
	o.depth = 32;
	struct gpunvme_layer_loader *l = NULL;
	REQUIRE_OK(gpunvme_layer_loader_init(c, 1, A.ext, A.n, A.size, &o, &l));
	uint8_t *kept = gpunvme_layer_loader_alloc(l, 0, B.size);
	REQUIRE(kept);
	if (load_some(l, &A, 1, 12, "file A"))
		return 1;
	REQUIRE_OK(gpunvme_layer_loader_retarget(l, B.ext, B.n, B.size));
	if (load_some(l, &B, 2, 12, "file B"))
		return 1;
	REQUIRE_OK(gpunvme_load_layer(l, 0, B.size, kept, NULL));
	REQUIRE(!memcmp(kept, B.ref, B.size), "memory allocated before the retarget");
	/* B's size is the limit now */
	uint8_t one;
	REQUIRE_EQ(gpunvme_load_layer(l, B.size, 1, &one, NULL), -ERANGE);
	REQUIRE(strstr(gpunvme_last_error(), "past the end of the file"));
	/* files it cannot take: it stays on B */
	struct gpunvme_extent past = { 0, ns_len - 4096, 8192, 0 };
	REQUIRE_EQ(gpunvme_layer_loader_retarget(l, &past, 1, 8192), -ERANGE);
	REQUIRE(strstr(gpunvme_last_error(), "past the end of the namespace"));
	struct gpunvme_extent unsorted[2] = { { 8192, 0, 4096, 0 }, { 0, 8192, 4096, 0 } };
	REQUIRE_EQ(gpunvme_layer_loader_retarget(l, unsorted, 2, 12288), -EINVAL);
	REQUIRE(strstr(gpunvme_last_error(), "not sorted"));
	REQUIRE_EQ(gpunvme_layer_loader_retarget(NULL, B.ext, B.n, B.size), -EINVAL);
	REQUIRE_EQ(gpunvme_layer_loader_retarget(l, NULL, 2, B.size), -EINVAL);
	if (load_some(l, &B, 3, 6, "file B after refused retargets"))
		return 1;
	REQUIRE_OK(gpunvme_layer_loader_retarget(l, A.ext, A.n, A.size));
	if (load_some(l, &A, 4, 12, "file A again"))
		return 1;
	gpunvme_layer_loader_free(l, kept);
	gpunvme_layer_loader_destroy(l);
	free(A.ref);
	free(B.ref);
	gpunvme_close(c);
	return 0;
}

/* The model of a file written by st_file_in_ns (one extent from the
 * namespace's start) and a loader over it (opts: NULL for the defaults).
 * 0, or the failing call's -errno with nothing left allocated. */
static int st_model_loader(struct gpunvme_ctrl *c, const uint8_t *file, uint64_t size,
			   const struct gpunvme_loader_opts *opts, struct gpunvme_model **m,
			   struct gpunvme_layer_loader **l)
{
	const struct gpunvme_extent ext = { 0, 0, (size + 4095) / 4096 * 4096, 0 };
	int rc = gpunvme_model_parse_mem(file, size, m);
	if (!rc && (rc = gpunvme_layer_loader_init(c, 1, &ext, 1, size, opts, l))) {
		gpunvme_model_free(*m);
		*m = NULL;
	}
	return rc;
}

/* A safetensors file of tensors t[0..n) (data_bytes of random data from
 * seed after a header whose data section starts at % 8 == mod), copied to
 * the start of the namespace ns as well: the file (malloc'd) and its size,
 * or NULL when it does not fit in ns or memory */
static uint8_t *st_file_in_ns(const struct st_tensor *t, size_t n, unsigned mod, uint64_t data_bytes, uint64_t seed,
			      uint8_t *ns, size_t ns_len, uint64_t *size)
{
	struct st_writer w;
	struct bb hdr = { 0 };
	st_begin(&w);
	for (size_t i = 0; i < n; i++)
		st_tensor(&w, &t[i]);
	st_finish(&w, &hdr, mod);
	*size = hdr.n + data_bytes;
	uint8_t *file = *size < ns_len ? malloc(*size) : NULL;
	if (file) {
		memcpy(file, hdr.p, hdr.n);
		for (uint64_t i = hdr.n; i < *size; i++)
			file[i] = (uint8_t)rng(&seed);
		memcpy(ns, file, *size);
	}
	free(hdr.p);
	return file;
}

/* Where model_load puts a run (src/loader/model_internal.h): a file offset
 * that is dword aligned starts on a 256-byte boundary, as torch places a
 * tensor (cuBLAS picks kernels by alignment); any other stays congruent to
 * its file offset modulo 4096. Every tensor sits at its run's start plus its
 * distance in the file, and every byte arrives, whatever the data section's
 * start modulo 8 (the reference writer's 0, and 4 and 2 as other writers
 * could). */
TEST_CASE(model_load_placement)
{
	size_t ns_len;
	uint8_t *ns;
	struct gpunvme_ctrl *c = open_filled("emu:ram:16M?workers=2", 4, &ns, &ns_len);
	REQUIRE(c);
	const unsigned mods[] = { 0, 4, 2 };
	for (size_t k = 0; k < sizeof(mods) / sizeof(mods[0]); k++) {
		/* two 8 KiB weights and a 6-byte vector between them: the
		 * second weight is 6 bytes past a 256-byte boundary of the
		 * run's start */
		const uint64_t s_w[] = { 64, 64 }, s_v[] = { 3 };
		const struct st_tensor tensors[] = {
			{ .name = "w0", .dtype = "BF16", .ndim = 2, .shape = s_w, .begin = 0, .end = 8192 },
			{ .name = "v", .dtype = "F16", .ndim = 1, .shape = s_v, .begin = 8192, .end = 8198 },
			{ .name = "w1", .dtype = "BF16", .ndim = 2, .shape = s_w, .begin = 8198, .end = 16390 },
		};
		uint64_t size;
		uint8_t *file = st_file_in_ns(tensors, sizeof(tensors) / sizeof(tensors[0]), mods[k], 16390, 5 + k, ns,
					      ns_len, &size);
		REQUIRE(file);
		struct gpunvme_model *m = NULL;
		struct gpunvme_layer_loader *l = NULL;
		REQUIRE_OK(st_model_loader(c, file, size, NULL, &m, &l));
		struct gpunvme_model_buffers *b = NULL;
		REQUIRE_OK(gpunvme_model_buffers_alloc(l, m, NULL, &b));
		REQUIRE_EQ(b->n_runs, 1);
		const struct gpunvme_model_run *r = &b->runs[0];
		const uintptr_t at = (uintptr_t)r->dst;
		if (r->off % 4 == 0)
			REQUIRE(at % 256 == 0, "data at %% 8 = %u: run at file offset %llu placed at %% 256 = %llu", mods[k],
				(unsigned long long)r->off, (unsigned long long)(at % 256));
		else
			REQUIRE(at % 4096 == r->off % 4096, "data at %% 8 = %u: run at file offset %llu not congruent",
				mods[k], (unsigned long long)r->off);
		REQUIRE_OK(gpunvme_model_load(l, b, NULL, NULL, NULL));
		for (size_t i = 0; i < b->n_tensors; i++) {
			const struct gpunvme_tensor *t = b->tensors[i];
			REQUIRE((uint8_t *)b->ptr[i] == r->dst + (t->offset - r->off), "tensor %s", t->name);
			REQUIRE(!memcmp(b->ptr[i], file + t->offset, t->bytes), "tensor %s (data at %% 8 = %u)", t->name,
				mods[k]);
		}
		gpunvme_model_buffers_free(l, b);
		gpunvme_layer_loader_destroy(l);
		gpunvme_model_free(m);
		free(file);
	}
	gpunvme_close(c);
	return 0;
}

/* A selection is one loader allocation, whatever its runs: placement
 * "split" selects every other row range with gap 0, a run each, and an
 * allocation per run cost 41 ms a GPU on the emulator's Tier 2 (model_load.c).
 * Every other tensor of 24, of odd sizes, at gap 0: 12 runs, each inside
 * b->mem in file order, none overlapping the next, each placed on a 256-byte
 * boundary (or congruent to an odd file offset), every byte the file's, and
 * the allocation's bytes between runs untouched by the load, through one
 * queue pair of 2 entries (many reads waiting for a free slot). */
TEST_CASE(model_load_one_allocation)
{
	size_t ns_len;
	uint8_t *ns;
	struct gpunvme_ctrl *c = open_filled("emu:ram:16M?lbads=12&mdts=1&workers=2", 4, &ns, &ns_len);
	REQUIRE(c);
	enum { NT = 24 };
	struct st_tensor tensors[NT];
	uint64_t shapes[NT][1];
	char names[NT][16];
	uint64_t at = 0, seed = 31;
	for (size_t i = 0; i < NT; i++) {
		shapes[i][0] = 1 + rng(&seed) % 9000; /* odd places and sizes: the runs' edges fall mid-block */
		snprintf(names[i], sizeof(names[i]), "t%zu", i);
		tensors[i] = (struct st_tensor){ .name = names[i], .dtype = "U8", .ndim = 1, .shape = shapes[i],
						 .begin = at, .end = at + shapes[i][0] };
		at += shapes[i][0];
	}
	uint64_t size;
	uint8_t *file = st_file_in_ns(tensors, NT, 1, at, seed, ns, ns_len, &size);
	REQUIRE(file);
	/* one queue pair of 2 entries and 8 KiB commands: the 12 runs' reads
	 * (2-3 commands each, and the bounced edges) wait for free slots */
	struct gpunvme_loader_opts o;
	gpunvme_loader_opts_init(&o);
	o.queues = 1;
	o.depth = 2;
	struct gpunvme_model *m = NULL;
	struct gpunvme_layer_loader *l = NULL;
	REQUIRE_OK(st_model_loader(c, file, size, &o, &m, &l));
	size_t idx[NT / 2];
	size_t n = 0;
	for (size_t i = 0; i < m->n_tensors; i++)
		if (atoi(m->tensors[i].name + 1) % 2 == 0)
			idx[n++] = i;
	REQUIRE_EQ(n, NT / 2);
	struct gpunvme_model_buffers *b = NULL;
	REQUIRE_OK(gpunvme_model_buffers_alloc_sel_gap(l, m, idx, n, 0, &b));
	REQUIRE_EQ(b->n_runs, NT / 2);
	REQUIRE(b->mem);
	/* the layout: each run's slack holds the rest of its edge blocks
	 * (head before it, tail after it), and the next run's head slack
	 * starts on or after the page after this run's tail */
	uint64_t span = 0;
	for (size_t k = 0; k < b->n_runs; k++) {
		const struct gpunvme_model_run *r = &b->runs[k];
		const uint64_t rel = (uint64_t)(r->dst - (uint8_t *)b->mem), end = r->off + r->len;
		REQUIRE(r->head == r->off % 4096 && r->tail == (4096 - end % 4096) % 4096,
			"run %zu at file bytes %llu+%llu: slack %u/%u", k, (unsigned long long)r->off,
			(unsigned long long)r->len, r->head, r->tail);
		REQUIRE(r->dst >= (uint8_t *)b->mem && rel >= r->head && rel - r->head >= span,
			"run %zu's head slack at +%llu overlaps the run before (its tail ends at +%llu)", k,
			(unsigned long long)(rel - r->head), (unsigned long long)span);
		REQUIRE(rel - r->head - span < 4096, "run %zu at +%llu: not on the page after +%llu", k,
			(unsigned long long)rel, (unsigned long long)span);
		REQUIRE((rel - r->head) % 4 == 0, "run %zu: its widened start +%llu is not dword aligned", k,
			(unsigned long long)(rel - r->head));
		if (r->off % 4 == 0)
			REQUIRE(rel % 256 == 0, "run %zu at file offset %llu placed at %% 256 = %llu", k,
				(unsigned long long)r->off, (unsigned long long)(rel % 256));
		else
			REQUIRE(rel % 4096 == r->off % 4096, "run %zu at file offset %llu not congruent", k,
				(unsigned long long)r->off);
		span = rel + r->len + r->tail;
	}
	/* twice over a canary: edge blocks bounced (the default) and landed
	 * whole in the slack (GPUNVME_LOAD_EDGES=direct). Every tensor byte is
	 * the file's either way; the slack holds the file's neighbouring bytes
	 * or the canary, nothing else is written */
	const uint8_t *mem = b->mem;
	for (int direct = 0; direct < 2; direct++) {
		setenv("GPUNVME_LOAD_EDGES", direct ? "direct" : "bounce", 1);
		memset(b->mem, 0xa5, span);
		struct gpunvme_loader_stats st0, st1;
		gpunvme_layer_loader_stats(l, &st0);
		const int rc = gpunvme_model_load(l, b, NULL, NULL, NULL);
		gpunvme_layer_loader_stats(l, &st1);
		unsetenv("GPUNVME_LOAD_EDGES");
		REQUIRE_OK(rc);
		for (size_t i = 0; i < b->n_tensors; i++) {
			const struct gpunvme_tensor *t = b->tensors[i];
			REQUIRE(!memcmp(b->ptr[i], file + t->offset, t->bytes), "tensor %s (edges direct: %d)", t->name,
				direct);
		}
		/* the selection ends before the file does (t23 is not in it), so
		 * no tail is cut short and no edge is left to bounce */
		const uint64_t bounced = st1.bounced_bytes - st0.bounced_bytes;
		REQUIRE(direct ? bounced == 0 : bounced > 0, "edges direct: %d, %llu bytes bounced", direct,
			(unsigned long long)bounced);
		size_t k = 0;
		for (uint64_t q = 0; q < span; q++) {
			while (k < b->n_runs && (uint64_t)(b->runs[k].dst - mem) + b->runs[k].len + b->runs[k].tail <= q)
				k++;
			const struct gpunvme_model_run *r = k < b->n_runs ? &b->runs[k] : NULL;
			const uint64_t rat = r ? (uint64_t)(r->dst - mem) : 0;
			if (r && q >= rat && q < rat + r->len)
				continue; /* a tensor's byte: compared above */
			const bool slack = r && q + r->head >= rat && q < rat + r->len + r->tail;
			const uint8_t want = direct && slack ? file[r->off + q - rat] : 0xa5;
			REQUIRE(mem[q] == want, "byte +%llu (run %zu's %s, edges direct: %d) is %#x, want %#x",
				(unsigned long long)q, k, slack ? "slack" : "gap", direct, mem[q], want);
		}
	}
	gpunvme_model_buffers_free(l, b);
	gpunvme_layer_loader_destroy(l);
	gpunvme_model_free(m);
	free(file);
	gpunvme_close(c);
	return 0;
}

/* Pieces of a run meet at 4 KiB blocks of the file (gpunvme load and
 * Python's load steps cut their pieces so): a run from mid-block, whole
 * when it fits, else up to the last block boundary within max, else max
 * itself; nothing for a finished or unknown run or max 0. */
TEST_CASE(model_run_piece)
{
	struct gpunvme_model_run runs[] = { { .off = 5000, .len = 3 * 4096 }, { .off = 8192, .len = 100 } };
	struct gpunvme_model_buffers b = { .n_runs = 2, .runs = runs };
	/* the run's blocks of the file begin at 8192, 12288, 16384 */
	CHECK_EQ(gpunvme_model_run_piece(&b, 0, 0, 1 << 20), 3 * 4096);       /* the whole run */
	CHECK_EQ(gpunvme_model_run_piece(&b, 0, 0, 8000), 12288 - 5000);      /* to the last boundary within */
	CHECK_EQ(gpunvme_model_run_piece(&b, 0, 12288 - 5000, 4096), 4096);   /* from one boundary to the next */
	CHECK_EQ(gpunvme_model_run_piece(&b, 0, 0, 3000), 3000);              /* no boundary within: max */
	CHECK_EQ(gpunvme_model_run_piece(&b, 0, 100, 3092), 3092);            /* ends on one: 8192 */
	CHECK_EQ(gpunvme_model_run_piece(&b, 0, 3 * 4096 - 1, 4096), 1);      /* the run's last byte */
	CHECK_EQ(gpunvme_model_run_piece(&b, 1, 0, 64), 64);                  /* from a boundary, none within */
	/* the pieces cover the run once, in order, each but the last ending on a block */
	uint64_t o = 0;
	unsigned n = 0;
	for (uint64_t len; (len = gpunvme_model_run_piece(&b, 0, o, 5000)); o += len, n++)
		CHECK(o + len == runs[0].len || (runs[0].off + o + len) % 4096 == 0, "piece %u: %llu+%llu", n,
		      (unsigned long long)o, (unsigned long long)len);
	CHECK_EQ(o, runs[0].len);
	CHECK_EQ(n, 3); /* 3192 to 8192, 4096, then the last 5000 whole */
	CHECK_EQ(gpunvme_model_run_piece(&b, 0, 3 * 4096, 4096), 0);          /* nothing left */
	CHECK_EQ(gpunvme_model_run_piece(&b, 0, 0, 0), 0);
	CHECK_EQ(gpunvme_model_run_piece(&b, 2, 0, 4096), 0);                 /* no run 2 */
	CHECK_EQ(gpunvme_model_run_piece(NULL, 0, 0, 4096), 0);
	return 0;
}

/* Two loaders on one controller, each with one queue pair of 2 entries (a
 * free slot is rare) and 8 KiB commands (many per range), load random
 * ranges of a fragmented file at once into their own targets: every target
 * on a 256-byte boundary at any file offset, as model_load now places runs
 * (model_internal.h), so the blocks land off page boundaries. All targets
 * sit in one DMA buffer filled with a canary: every byte of every target
 * must be the file's, and every byte around and between them untouched. */
#define PT_TARGETS 24u
#define PT_SPAN (160u << 10) /* one target's room: the range plus canary around it */

struct pt_job {
	struct gpunvme_ctrl *c;
	const struct layout *L;
	uint8_t *base;            /* this job's PT_TARGETS spans */
	uint64_t off[PT_TARGETS], len[PT_TARGETS], at[PT_TARGETS];
	int rc;
};

static void *pt_run(void *arg)
{
	struct pt_job *j = arg;
	struct gpunvme_loader_opts o;
	gpunvme_loader_opts_init(&o);
	o.queues = 1;
	o.depth = 2;
	struct gpunvme_layer_loader *l = NULL;
	if ((j->rc = gpunvme_layer_loader_init(j->c, 1, j->L->ext, j->L->n, j->L->size, &o, &l)))
		return NULL;
	for (unsigned k = 0; k < PT_TARGETS && !j->rc; k++) {
		uint16_t st = 0xffff;
		j->rc = gpunvme_load_layer(l, j->off[k], j->len[k], j->base + j->at[k], &st);
		if (!j->rc && st)
			j->rc = -EIO;
	}
	gpunvme_layer_loader_destroy(l);
	return NULL;
}

TEST_CASE(aligned_targets_few_slots)
{
	size_t ns_len;
	uint8_t *ns;
	struct gpunvme_ctrl *c = open_filled("emu:ram:32M?lbads=12&mdts=1&workers=2", 6, &ns, &ns_len);
	REQUIRE(c);
	struct layout L;
	make_layout(&L, ns, ns_len, 3 * 1024 * 1024 + 4321, 21);
	const size_t bytes = 2ull * PT_TARGETS * PT_SPAN;
	uint8_t *dma = gpunvme_dma_alloc(c, bytes);
	REQUIRE(dma);
	memset(dma, 0x5c, bytes);
	struct pt_job job[2];
	uint64_t seed = 99;
	for (int t = 0; t < 2; t++) {
		job[t] = (struct pt_job){ .c = c, .L = &L, .base = dma + (size_t)t * PT_TARGETS * PT_SPAN };
		for (unsigned k = 0; k < PT_TARGETS; k++) {
			/* dword-aligned file offsets (the placement's case), any
			 * length up to 128 KiB, at a 256-byte boundary 256 bytes
			 * or more inside the span (canary on both sides) */
			job[t].len[k] = 1 + rng(&seed) % (128u << 10);
			job[t].off[k] = (rng(&seed) % (L.size - job[t].len[k])) & ~3ull;
			job[t].at[k] = (uint64_t)k * PT_SPAN + 256 * (1 + rng(&seed) % 32);
		}
	}
	pthread_t th[2];
	for (int t = 0; t < 2; t++)
		REQUIRE(pthread_create(&th[t], NULL, pt_run, &job[t]) == 0);
	for (int t = 0; t < 2; t++)
		pthread_join(th[t], NULL);
	for (int t = 0; t < 2; t++)
		REQUIRE(job[t].rc == 0, "loader %d: %d %s", t, job[t].rc, gpunvme_last_error());
	for (int t = 0; t < 2; t++) {
		const uint8_t *b = job[t].base;
		for (unsigned k = 0; k < PT_TARGETS; k++) {
			const uint64_t at = job[t].at[k], len = job[t].len[k], span = (uint64_t)k * PT_SPAN;
			REQUIRE(!memcmp(b + at, L.ref + job[t].off[k], len), "loader %d target %u: bytes differ", t, k);
			for (uint64_t i = span; i < span + PT_SPAN; i++)
				if (i < at || i >= at + len)
					REQUIRE(b[i] == 0x5c, "loader %d target %u: byte %lld from its start written",
						t, k, (long long)i - (long long)at);
		}
	}
	gpunvme_dma_free(c, dma);
	free(L.ref);
	gpunvme_close(c);
	return 0;
}

TEST_CASE(default_queues_follow_workers)
{
	/* the default queue count is a multiple of the emulator's workers,
	 * from 8, at most 16, at most what is free, and cut by what is free
	 * to a multiple of the workers where it can be (loader.c, auto_queues);
	 * every load still compared byte for byte */
	static const struct {
		const char *q;
		uint32_t parallel, queues;
	} cases[] = {
		{ "workers=1&nsq=64", 1, 8 },   { "workers=2&nsq=64", 2, 8 },   { "workers=3&nsq=64", 3, 9 },
		{ "workers=5&nsq=64", 5, 10 },  { "workers=7&nsq=64", 7, 14 },  { "workers=8&nsq=64", 8, 8 },
		{ "workers=12&nsq=64", 12, 12 }, { "workers=16&nsq=64", 16, 16 }, { "workers=20&nsq=64", 20, 16 },
		{ "workers=12&nsq=5", 12, 5 },  { "workers=6&nsq=10", 6, 6 },   { "workers=5&nsq=9", 5, 5 },
		{ "workers=4&nsq=10", 4, 8 },
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		char uri[96];
		snprintf(uri, sizeof(uri), "emu:ram:8M?lbads=12&%s", cases[k].q);
		size_t ns_len;
		uint8_t *ns;
		struct gpunvme_ctrl *c = open_filled(uri, 40 + k, &ns, &ns_len);
		REQUIRE(c, "%s: %s", uri, gpunvme_last_error());
		struct gpunvme_ctrl_info ci;
		REQUIRE_OK(gpunvme_ctrl_info(c, &ci));
		REQUIRE(ci.io_parallel == cases[k].parallel, "%s: io_parallel %u, want %u", uri, ci.io_parallel,
			cases[k].parallel);
		struct gpunvme_extent ext[1] = { { 0, 1 << 20, 1 << 20, 0 } };
		struct gpunvme_layer_loader *l = NULL;
		const uint32_t before = gpunvme_io_queues_free(c);
		REQUIRE_OK(gpunvme_layer_loader_init(c, 1, ext, 1, 1 << 20, NULL, &l));
		uint8_t *dst = gpunvme_dma_alloc(c, 1 << 20);
		REQUIRE(dst);
		REQUIRE_OK(gpunvme_load_layer(l, 0, 1 << 20, dst, NULL));
		REQUIRE(!memcmp(dst, ns + (1 << 20), 1 << 20), "%s: bytes differ", uri);
		const uint32_t used = before - gpunvme_io_queues_free(c);
		REQUIRE(used == cases[k].queues, "%s: the loader took %u queue pairs, want %u", uri, used,
			cases[k].queues);
		gpunvme_dma_free(c, dst);
		gpunvme_layer_loader_destroy(l);
		gpunvme_close(c);
	}
	return 0;
}
