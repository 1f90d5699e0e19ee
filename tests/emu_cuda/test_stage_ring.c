/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The copy lanes' staging ring (src/emu_cuda/stage_ring.h) on the CPU, with
 * a copy engine that is as late as a real one may be: a queued copy reads
 * its staging bytes only when a wait or a sync makes it run, so a ring that
 * reused bytes a queued copy still needs, or a copy that ran past the ring's
 * memory, delivers wrong bytes here. Every byte delivered is compared with
 * the source. The ring's memory is its own allocation, so ASan sees a copy
 * that leaves it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "emu_cuda/stage_ring.h"

#define MAXQ 4096

/* The fake engine: copies queued in order, run late. */
struct late_engine {
	uint8_t *ring;     /* the ring's memory, for the bounds check */
	size_t ring_size;
	uint8_t *dev;      /* "GPU memory" */
	size_t dev_size;
	struct {
		uint64_t dev, pitch;
		const uint8_t *host;
		size_t len, rows; /* rows of len bytes, pitch apart in dev (1: a plain copy) */
	} q[MAXQ];
	unsigned queued, ran;  /* copies queued, copies run (in order) */
	unsigned fence_at[STAGE_RING_FENCES]; /* fence k: the copies queued before it */
	unsigned copies, copies2d, fences, waits;
	size_t longest;
	int fail_wait;         /* wait returns this when nonzero */
	int bad;               /* a copy outside the ring or the device buffer, or over a region's end */
	uint64_t region;       /* nonzero: "GPU memory" is allocations of this many bytes, and a copy
				  that spans two fails, as a CUDA copy does (cudaErrorInvalidValue) */
};

/* a copy of [dev, dev + extent) spans two of e's allocations */
static int spans(const struct late_engine *e, uint64_t dev, uint64_t extent)
{
	return e->region && extent && dev / e->region != (dev + extent - 1) / e->region;
}

static int late_copy(void *ctx, unsigned lane, uint64_t dev, const uint8_t *host, size_t len)
{
	struct late_engine *e = (struct late_engine *)ctx;
	(void)lane;
	if (host < e->ring || host + len > e->ring + e->ring_size || dev + len > e->dev_size || spans(e, dev, len)) {
		e->bad++;
		return -EFAULT;
	}
	if (e->queued - e->ran == MAXQ)
		return -ENOSPC;
	e->q[e->queued % MAXQ].dev = dev;
	e->q[e->queued % MAXQ].host = host;
	e->q[e->queued % MAXQ].len = len;
	e->q[e->queued % MAXQ].rows = 1;
	e->q[e->queued % MAXQ].pitch = 0;
	e->queued++;
	e->copies++;
	if (len > e->longest)
		e->longest = len;
	return 0;
}

/* A 2D copy as cudaMemcpy2DAsync takes it: rows consecutive in the ring,
 * pitch apart in dev (more than a row: rows never overlap) */
static int late_copy2d(void *ctx, unsigned lane, uint64_t dev, uint64_t pitch, const uint8_t *host, size_t width,
		       size_t rows)
{
	struct late_engine *e = (struct late_engine *)ctx;
	(void)lane;
	if (rows < 2 || pitch <= width || host < e->ring || host + width * rows > e->ring + e->ring_size ||
	    dev + (rows - 1) * pitch + width > e->dev_size || spans(e, dev, (rows - 1) * pitch + width)) {
		e->bad++;
		return -EFAULT;
	}
	if (e->queued - e->ran == MAXQ)
		return -ENOSPC;
	e->q[e->queued % MAXQ].dev = dev;
	e->q[e->queued % MAXQ].host = host;
	e->q[e->queued % MAXQ].len = width;
	e->q[e->queued % MAXQ].rows = rows;
	e->q[e->queued % MAXQ].pitch = pitch;
	e->queued++;
	e->copies++;
	e->copies2d++;
	if (width * rows > e->longest)
		e->longest = width * rows;
	return 0;
}

/* the copies before index upto read their staging bytes now */
static void late_run(struct late_engine *e, unsigned upto)
{
	for (; e->ran != upto; e->ran++) {
		const unsigned i = e->ran % MAXQ;
		for (size_t k = 0; k < e->q[i].rows; k++)
			memcpy(e->dev + e->q[i].dev + k * e->q[i].pitch, e->q[i].host + k * e->q[i].len, e->q[i].len);
	}
}

static int late_fence(void *ctx, unsigned lane, unsigned k)
{
	struct late_engine *e = (struct late_engine *)ctx;
	(void)lane;
	e->fence_at[k] = e->queued;
	e->fences++;
	return 0;
}

static int late_wait(void *ctx, unsigned lane, unsigned k)
{
	struct late_engine *e = (struct late_engine *)ctx;
	(void)lane;
	e->waits++;
	if (e->fail_wait)
		return e->fail_wait;
	/* only now do the copies before the fence read their bytes */
	if ((int)(e->fence_at[k] - e->ran) > 0)
		late_run(e, e->fence_at[k]);
	return 0;
}

/* the engine with 2D copies (the CUDA lanes') and without */
static const struct stage_ring_ops late_ops = { late_copy, late_fence, late_wait, late_copy2d };
static const struct stage_ring_ops late_ops_1d = { late_copy, late_fence, late_wait, NULL };

/* The lane's sync: the run queued, every copy run, the ring idle. */
static int sync_ring(struct stage_ring *r, struct late_engine *e)
{
	int rc = stage_ring_flush(r);
	late_run(e, e->queued);
	stage_ring_idle(r);
	return rc;
}

/* One piece: taken, filled from src[off..], handed to the ring for dev in
 * the GPU region that ends at dev_end. */
static int piece_in(struct stage_ring *r, const uint8_t *src, uint64_t off, uint64_t dev, uint64_t dev_end, size_t n)
{
	uint8_t *p;
	uint64_t at;
	int rc = stage_ring_take(r, n, &p, &at);
	if (rc)
		return rc;
	memcpy(p, src + off, n);
	return stage_ring_add(r, dev, dev_end, at, n);
}

#define ONE_REGION (1ull << 62) /* the end of a region holding every test's "GPU memory" */

static int piece(struct stage_ring *r, const uint8_t *src, uint64_t off, uint64_t dev, size_t n)
{
	return piece_in(r, src, off, dev, ONE_REGION, n);
}

static uint64_t rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 17;
}

static uint8_t *pattern(size_t n, uint64_t seed)
{
	uint8_t *b = (uint8_t *)malloc(n);
	for (size_t i = 0; b && i < n; i++)
		b[i] = (uint8_t)(rnd(&seed) >> 7);
	return b;
}

static int setup_ops(struct late_engine *e, struct stage_ring *r, const struct stage_ring_ops *ops, size_t ring_size,
		     size_t piece_max, size_t merge, size_t dev_size)
{
	memset(e, 0, sizeof(*e));
	e->ring = (uint8_t *)malloc(ring_size);
	e->ring_size = ring_size;
	e->dev = (uint8_t *)calloc(1, dev_size);
	e->dev_size = dev_size;
	if (!e->ring || !e->dev)
		return -ENOMEM;
	stage_ring_init(r, ops, e, 0, e->ring, ring_size, piece_max, merge);
	return 0;
}

static int setup(struct late_engine *e, struct stage_ring *r, size_t ring_size, size_t piece_max, size_t merge,
		 size_t dev_size)
{
	return setup_ops(e, r, &late_ops, ring_size, piece_max, merge, dev_size);
}

static void teardown(struct late_engine *e)
{
	free(e->ring);
	free(e->dev);
}

/* A load's pattern: consecutive 128 KiB pieces to consecutive GPU memory
 * merge into runs of merge bytes, one fence each; merge 0 is one copy and
 * one fence per piece. */
TEST_CASE(sequential_reads_merge_into_runs)
{
	const size_t total = 64u << 20, pc = 128u << 10;
	uint8_t *src = pattern(total, 1);
	REQUIRE(src);
	const size_t merges[] = { 1u << 20, 0 };
	for (int m = 0; m < 2; m++) {
		struct late_engine e;
		struct stage_ring r;
		REQUIRE_OK(setup(&e, &r, 4u << 20, 512u << 10, merges[m], total));
		for (size_t off = 0; off < total; off += pc)
			REQUIRE_OK(piece(&r, src, off, off, pc));
		REQUIRE_OK(sync_ring(&r, &e));
		CHECK(!memcmp(e.dev, src, total), "merge %zu: the bytes delivered differ", merges[m]);
		CHECK_EQ(e.bad, 0);
		if (merges[m]) {
			CHECK_EQ(e.copies, (unsigned)(total / merges[m]));
			CHECK_EQ(e.fences, (unsigned)(total / merges[m]));
			CHECK_EQ(e.longest, merges[m]);
		} else {
			CHECK_EQ(e.copies, (unsigned)(total / pc));
			CHECK_EQ(e.fences, (unsigned)(total / pc));
		}
		printf("merge %zu: %u copies, %u fences, %u waits for %zu MiB\n", merges[m], e.copies, e.fences, e.waits,
		       total >> 20);
		teardown(&e);
	}
	free(src);
	return 0;
}

/*
 * Two loader buffers adjacent in the address space are two allocations, and
 * one CUDA copy over both fails (session 21: cudaErrorInvalidValue, the
 * commands failed with a Data Transfer Error). Pieces that continue each
 * other in the ring and in GPU memory but lie in two regions go as two
 * copies, 1D and 2D (an md member's rows), with every byte delivered.
 */
TEST_CASE(runs_stop_at_a_region_end)
{
	const size_t region = 1u << 20, pc = 96u << 10, total = 4 * region;
	uint8_t *src = pattern(total, 9);
	REQUIRE(src);
	for (int twod = 0; twod < 2; twod++) {
		struct late_engine e;
		struct stage_ring r;
		REQUIRE_OK(setup(&e, &r, 8u << 20, 512u << 10, 2u << 20, total));
		e.region = region;
		if (!twod) {
			/* consecutive pieces over all four regions: 96 KiB does
			 * not divide 1 MiB, so pieces straddle region ends too,
			 * and are cut there as the emulator's PRP segments are */
			for (size_t off = 0; off < total;) {
				const uint64_t end = (off / region + 1) * region;
				const size_t n = off + pc <= end ? pc : end - off;
				REQUIRE_OK(piece_in(&r, src, off, off, end, n));
				off += n;
			}
		} else {
			/* rows of 64 KiB, 256 KiB apart: four rows a region, a
			 * run of them with the next region's rows after it */
			const size_t w = 64u << 10, pitch = 256u << 10;
			for (size_t k = 0; k < total / pitch; k++)
				REQUIRE_OK(piece_in(&r, src, k * pitch, k * pitch, (k * pitch / region + 1) * region, w));
		}
		REQUIRE_OK(sync_ring(&r, &e));
		CHECK_EQ(e.bad, 0);
		if (!twod) {
			CHECK(!memcmp(e.dev, src, total), "the bytes delivered differ");
			CHECK_EQ(e.copies, 4u); /* one a region: the merge (2 MiB) would take two */
		} else {
			for (size_t k = 0; k < total / (256u << 10); k++)
				CHECK(!memcmp(e.dev + k * (256u << 10), src + k * (256u << 10), 64u << 10),
				      "row %zu differs", k);
			CHECK_EQ(e.copies2d, 4u);
		}
		teardown(&e);
	}
	free(src);
	return 0;
}

/*
 * What tier2_image_staged does on the GPU (tests/gpu/test_gpu_queues.cu),
 * and more: pieces of odd sizes, some continuing the last in GPU memory and
 * some not, syncs at random points, rings of several sizes and merges. A run
 * that crossed the ring's end (a piece right after the end continues the
 * run in position but not in memory) read past the ring: the first GPU run
 * of the merged ring failed so.
 */
TEST_CASE(odd_pieces_wrap_and_jump)
{
	const size_t dev_size = 8u << 20;
	uint8_t *src = pattern(dev_size, 2);
	REQUIRE(src);
	const size_t rings[] = { 256u << 10, 1u << 20, 4u << 20 };
	const size_t merges[] = { 0, 64u << 10, 1u << 20 };
	uint64_t seed = 99;
	for (int oi = 0; oi < 2; oi++)
	for (int ri = 0; ri < 3; ri++)
		for (int mi = 0; mi < 3; mi++) {
			struct late_engine e;
			struct stage_ring r;
			REQUIRE_OK(setup_ops(&e, &r, oi ? &late_ops_1d : &late_ops, rings[ri], 512u << 10, merges[mi],
					     dev_size));
			/* rounds end with a sync and a check of every byte */
			for (int round = 0; round < 12; round++) {
				memset(e.dev, 0, dev_size);
				uint64_t dev = rnd(&seed) % (dev_size / 2);
				unsigned filled = 0;
				uint8_t *want = (uint8_t *)calloc(1, dev_size);
				REQUIRE(want);
				/* the round's pieces in dev, which never overlap:
				 * each byte has one writer, so the end state is known */
				uint64_t lo[200], hi[200];
				for (int k = 0; k < 200; k++) {
					size_t n = 1 + rnd(&seed) % r.piece;
					if (k % 3 == 0) /* whole blocks, as most commands */
						n = (n + 511) / 512 * 512 > r.piece ? r.piece : (n + 511) / 512 * 512;
					if (rnd(&seed) % 5 == 0) /* a jump: the next piece elsewhere */
						dev = rnd(&seed) % (dev_size - r.piece);
					if (dev + n > dev_size)
						dev = 0;
					int clash = 0;
					for (unsigned j = 0; j < filled && !clash; j++)
						clash = dev < hi[j] && dev + n > lo[j];
					if (clash) {
						dev = rnd(&seed) % (dev_size - r.piece);
						continue;
					}
					const uint64_t so = (dev * 7 + 13) % (dev_size - n);
					REQUIRE_OK(piece(&r, src, so, dev, n));
					memcpy(want + dev, src + so, n);
					lo[filled] = dev;
					hi[filled++] = dev + n;
					dev += n;
					if (rnd(&seed) % 40 == 0) /* a pass ends: the lane syncs */
						REQUIRE_OK(sync_ring(&r, &e));
				}
				REQUIRE_OK(sync_ring(&r, &e));
				CHECK(!memcmp(e.dev, want, dev_size), "%s ring %zu KiB, merge %zu KiB, round %d: %u "
				      "pieces, the bytes delivered differ", oi ? "1D" : "2D", rings[ri] >> 10,
				      merges[mi] >> 10, round, filled);
				free(want);
			}
			CHECK_EQ(e.bad, 0);
			if (merges[mi])
				CHECK(e.longest <= merges[mi] || e.longest <= r.piece, "a run of %zu bytes", e.longest);
			if (oi)
				CHECK_EQ(e.copies2d, 0);
			teardown(&e);
		}
	free(src);
	return 0;
}

/* tier2_image_staged's own pattern (tests/gpu/test_gpu_queues.cu), which
 * failed on the H200: commands of 1, 7, 1000, 2048, 2049 and 6144 blocks of
 * 512 B at random places, each cut into pieces of at most 512 KiB, or at
 * every 64 KiB or 4 KiB of GPU memory (segments the emulator could not
 * merge), that continue each other, one command after another into ranges
 * apart in GPU memory; a 4 MiB ring, runs of 1 MiB. */
TEST_CASE(tier2_image_staged_pattern)
{
	static const uint64_t sizes[] = { 1, 7, 1000, 2048, 2049, 6144 };
	const size_t dev_size = 512u << 20, flen = 32u << 20;
	uint8_t *src = pattern(flen, 4);
	REQUIRE(src);
	struct late_engine e;
	struct stage_ring r;
	REQUIRE_OK(setup(&e, &r, 4u << 20, 512u << 10, 1u << 20, dev_size));
	uint8_t *want = (uint8_t *)calloc(1, dev_size);
	REQUIRE(want);
	uint64_t seed = 0x5eed, dev = 8192;
	const size_t segs[] = { 512u << 10, 64u << 10, 4096 };
	for (int i = 0; i < 96 * 6 && dev < dev_size - (4u << 20); i++) {
		const size_t seg = segs[i / 96 % 3];
		const size_t len = sizes[i % 6] * 512;
		const uint64_t so = rnd(&seed) % (flen / 512 - sizes[i % 6] + 1) * 512;
		/* a segment per GPU page where the emulator cannot merge
		 * them (they are in different DMA regions): pieces end at
		 * every page of dev, so runs can reach the ring's end exactly */
		for (size_t d = 0; d < len;) {
			size_t n = seg - (dev + d) % seg;
			n = n > len - d ? len - d : n;
			n = n > r.piece ? r.piece : n;
			REQUIRE_OK(piece(&r, src, so + d, dev + d, n));
			d += n;
		}
		memcpy(want + dev, src + so, len);
		dev += (len + 4095) / 4096 * 4096 + 8192;
		if (i % 3 == 2) /* the queue's depth: a pass of three commands */
			REQUIRE_OK(sync_ring(&r, &e));
	}
	REQUIRE_OK(sync_ring(&r, &e));
	CHECK_EQ(e.bad, 0);
	CHECK(!memcmp(e.dev, want, dev_size), "the bytes delivered differ");
	free(want);
	teardown(&e);
	free(src);
	return 0;
}

/* An md member's pattern: its consecutive chunks, read one after the
 * other, land members x chunk apart in GPU memory. They go as 2D copies of
 * merge bytes (rows of a chunk), one per merge bytes as a contiguous run
 * would; without 2D copies (the engine has none, or
 * GPUNVME_EMU_STAGE_2D=0), one copy a chunk. */
TEST_CASE(strided_pieces_go_as_2d_copies)
{
	const size_t chunk = 256u << 10, members = 4, nchunks = 64, dev_size = nchunks * members * chunk;
	uint8_t *src = pattern(nchunks * chunk, 5);
	REQUIRE(src);
	for (int oi = 0; oi < 2; oi++) {
		struct late_engine e;
		struct stage_ring r;
		REQUIRE_OK(setup_ops(&e, &r, oi ? &late_ops_1d : &late_ops, 4u << 20, 512u << 10, 1u << 20, dev_size));
		uint8_t *want = (uint8_t *)calloc(1, dev_size);
		REQUIRE(want);
		for (size_t k = 0; k < nchunks; k++) {
			const uint64_t dev = (k * members + 1) * chunk; /* member 1 */
			REQUIRE_OK(piece(&r, src, k * chunk, dev, chunk));
			memcpy(want + dev, src + k * chunk, chunk);
		}
		REQUIRE_OK(sync_ring(&r, &e));
		CHECK_EQ(e.bad, 0);
		CHECK(!memcmp(e.dev, want, dev_size), "%s: the bytes delivered differ", oi ? "1D" : "2D");
		if (oi) {
			CHECK_EQ(e.copies, (unsigned)nchunks);
			CHECK_EQ(e.copies2d, 0);
		} else {
			CHECK_EQ(e.copies, (unsigned)(nchunks * chunk / (1u << 20)));
			CHECK_EQ(e.copies2d, e.copies);
			CHECK_EQ(e.longest, (size_t)(1u << 20));
		}
		printf("%s: %u copies (%u 2D), %u fences for %zu chunks\n", oi ? "1D" : "2D", e.copies, e.copies2d,
		       e.fences, nchunks);
		free(want);
		teardown(&e);
	}
	free(src);
	return 0;
}

/* Strided runs broken: bursts of rows at random widths and pitches, each
 * burst starting elsewhere, a row of half the width in a
 * third of them, syncs at random, the ring's wraps (rings down to 256 KiB),
 * merges of 64 KiB and 1 MiB. Every byte compared; every 2D copy stays in
 * the ring and in the device buffer (the engine counts one that does not).
 * Pitches backwards or past STRIDED_PITCH_MAX: the next case. */
TEST_CASE(strided_runs_broken_every_way)
{
	const size_t dev_size = 64u << 20;
	uint8_t *src = pattern(dev_size, 6);
	REQUIRE(src);
	const size_t rings[] = { 256u << 10, 1u << 20, 4u << 20 };
	const size_t merges[] = { 64u << 10, 1u << 20 };
	uint64_t seed = 7;
	for (int ri = 0; ri < 3; ri++)
		for (int mi = 0; mi < 2; mi++) {
			struct late_engine e;
			struct stage_ring r;
			REQUIRE_OK(setup(&e, &r, rings[ri], 512u << 10, merges[mi], dev_size));
			uint8_t *want = (uint8_t *)calloc(1, dev_size);
			REQUIRE(want);
			for (int round = 0; round < 6; round++) {
				memset(e.dev, 0, dev_size);
				memset(want, 0, dev_size);
				/* one burst of rows at a time, the rows of all bursts
				 * never overlapping: bursts take slots of a grid of
				 * 16 KiB cells, each cell at most once */
				static uint8_t used[(64u << 20) / (16u << 10)];
				memset(used, 0, sizeof(used));
				for (int burst = 0; burst < 24; burst++) {
					const size_t cells = 1 + rnd(&seed) % 4; /* a row: 16-64 KiB */
					size_t w = cells * (16u << 10);
					if (w > r.piece)
						w = r.piece;
					const size_t step = cells + rnd(&seed) % 8; /* the pitch, in cells */
					const size_t rows = 1 + rnd(&seed) % 12;
					size_t c0 = rnd(&seed) % (sizeof(used) - rows * step - cells);
					int clash = 0;
					for (size_t k = 0; k < rows && !clash; k++)
						for (size_t j = 0; j < cells; j++)
							clash |= used[c0 + k * step + j];
					if (clash)
						continue;
					for (size_t k = 0; k < rows; k++) {
						for (size_t j = 0; j < cells; j++)
							used[c0 + k * step + j] = 1;
						uint64_t dev = (c0 + k * step) * (16u << 10);
						size_t n = w;
						if (k == rows / 2 && rnd(&seed) % 3 == 0)
							n = w / 2; /* another width */
						const uint64_t so = rnd(&seed) % (dev_size - n);
						REQUIRE_OK(piece(&r, src, so, dev, n));
						memcpy(want + dev, src + so, n);
						if (rnd(&seed) % 50 == 0)
							REQUIRE_OK(sync_ring(&r, &e));
					}
				}
				REQUIRE_OK(sync_ring(&r, &e));
				CHECK(!memcmp(e.dev, want, dev_size), "ring %zu KiB, merge %zu KiB, round %d: the bytes "
				      "delivered differ", rings[ri] >> 10, merges[mi] >> 10, round);
			}
			CHECK_EQ(e.bad, 0);
			CHECK(e.copies2d > 0 || merges[mi] < (32u << 10), "ring %zu KiB, merge %zu KiB: no 2D copy",
			      rings[ri] >> 10, merges[mi] >> 10);
			CHECK(e.longest <= merges[mi] || e.longest <= r.piece, "a run of %zu bytes", e.longest);
			free(want);
			teardown(&e);
		}
	free(src);
	return 0;
}

/* Rows whose next lands before the first, or further than a 2D copy's
 * pitch may be, go as copies of their own. */
TEST_CASE(no_negative_or_huge_pitch)
{
	const size_t w = 64u << 10;
	const size_t dev_size = STRIDED_PITCH_MAX + (4u << 20);
	struct late_engine e;
	struct stage_ring r;
	uint8_t *src = pattern(4 * w, 8);
	REQUIRE(src);
	/* the device buffer is sparse here (calloc of ~1 GiB: pages never
	 * touched but the few copied to) */
	REQUIRE_OK(setup(&e, &r, 1u << 20, 512u << 10, 1u << 20, dev_size));
	REQUIRE_OK(piece(&r, src, 0, 4 * w, w));
	REQUIRE_OK(piece(&r, src, w, 0, w)); /* before the first */
	REQUIRE_OK(piece(&r, src, 2 * w, 0 + STRIDED_PITCH_MAX + w, w)); /* too far from the second */
	REQUIRE_OK(sync_ring(&r, &e));
	CHECK_EQ(e.bad, 0);
	CHECK_EQ(e.copies, 3);
	CHECK_EQ(e.copies2d, 0);
	CHECK(!memcmp(e.dev + 4 * w, src, w) && !memcmp(e.dev, src + w, w) &&
	      !memcmp(e.dev + STRIDED_PITCH_MAX + w, src + 2 * w, w), "the bytes delivered differ");
	teardown(&e);
	free(src);
	return 0;
}

/* A worker's batch of copies from pinned memory (stage_copy_rows): an md
 * member's chunks in SQ order go as one copy (2D, or 1D where both sides
 * are contiguous), and each way such a run ends stops it there. */
#define REG_END 0x7f0040000000ull /* the end of the GPU region of every piece below */

TEST_CASE(batch_rows_from_pinned_memory)
{
	static uint8_t ns[64u << 20];
	const size_t chunk = 512u << 10;
	struct gpunvme_emu_copy v[40];
	for (unsigned i = 0; i < 40; i++)
		v[i] = (struct gpunvme_emu_copy){ 0x7f0000000000ull + i * 4 * chunk, ns + i * chunk, chunk, 1, REG_END };
	uint64_t sp = 0, dp = 0;
	CHECK_EQ(stage_copy_rows(v, 40, &sp, &dp), 40);
	CHECK_EQ(sp, chunk);
	CHECK_EQ(dp, 4 * chunk);
	CHECK_EQ(stage_copy_rows(v, 1, &sp, &dp), 1);
	for (int how = 0; how < 7; how++) {
		struct gpunvme_emu_copy w[12];
		memcpy(w, v, sizeof(w));
		switch (how) {
		case 0: w[5].len = chunk / 2; break;             /* another length */
		case 1: w[5].host = (uint8_t *)w[5].host + 4096; break; /* off the source pitch */
		case 2: w[5].dev_addr += 4096; break;            /* off the destination pitch */
		case 3: w[5].to_gpu = 0; break;                  /* a write */
		case 4: w[5].host = ns; break;                   /* backwards */
		case 5: w[5].dev_addr = w[0].dev_addr; break;
		case 6: w[5].dev_end = REG_END + 4096; break;     /* another GPU region (allocation) */
		}
		CHECK_EQ(stage_copy_rows(w, 12, &sp, &dp), 5);
	}
	/* contiguous in both: one plain copy's worth */
	for (unsigned i = 0; i < 8; i++)
		v[i] = (struct gpunvme_emu_copy){ 0x7f0000000000ull + i * 4096, ns + i * 4096, 4096, 1, REG_END };
	CHECK_EQ(stage_copy_rows(v, 8, &sp, &dp), 8);
	CHECK_EQ(sp, 4096);
	CHECK_EQ(dp, 4096);
	/* no overlap on either side, no pitch past the limit, nothing from a
	 * write or an empty piece */
	v[1].host = ns + 2048;
	CHECK_EQ(stage_copy_rows(v, 8, &sp, &dp), 1);
	v[1].host = ns + 4096;
	v[1].dev_addr = v[0].dev_addr + 2048;
	CHECK_EQ(stage_copy_rows(v, 8, &sp, &dp), 1);
	v[1].dev_addr = v[0].dev_addr + STRIDED_PITCH_MAX + 4096;
	CHECK_EQ(stage_copy_rows(v, 8, &sp, &dp), 1);
	v[1].dev_addr = v[0].dev_addr + 4096;
	v[0].to_gpu = 0;
	CHECK_EQ(stage_copy_rows(v, 8, &sp, &dp), 1);
	v[0].to_gpu = 1;
	v[0].dev_end = 0; /* its region not known: merged with nothing */
	CHECK_EQ(stage_copy_rows(v, 8, &sp, &dp), 1);
	v[0].dev_end = REG_END;
	v[0].len = v[1].len = 0;
	CHECK_EQ(stage_copy_rows(v, 8, &sp, &dp), 1);
	return 0;
}

/* A fence that never completes: the take that needs its bytes fails with
 * the wait's error, and nothing is overwritten. */
TEST_CASE(a_failed_wait_fails_the_take)
{
	struct late_engine e;
	struct stage_ring r;
	uint8_t *src = pattern(1u << 20, 3);
	REQUIRE(src);
	REQUIRE_OK(setup(&e, &r, 256u << 10, 64u << 10, 64u << 10, 1u << 20));
	e.fail_wait = -ETIMEDOUT;
	int rc = 0;
	size_t off = 0;
	for (; off < (1u << 20) && !rc; off += 64u << 10)
		rc = piece(&r, src, off, off, 64u << 10);
	CHECK_EQ(rc, -ETIMEDOUT);
	CHECK(off <= (320u << 10), "the ring took %zu bytes before the failed wait stopped it", off);
	e.fail_wait = 0;
	late_run(&e, e.queued);
	CHECK(!memcmp(e.dev, src, 256u << 10), "bytes queued before the failed wait were overwritten");
	teardown(&e);
	free(src);
	return 0;
}

/* A piece of 0 bytes or larger than the ring allows is refused. */
TEST_CASE(bad_piece_sizes_are_refused)
{
	struct late_engine e;
	struct stage_ring r;
	REQUIRE_OK(setup(&e, &r, 256u << 10, 512u << 10, 1u << 20, 1u << 20));
	CHECK_EQ(r.piece, (size_t)(64u << 10));
	CHECK_EQ(r.merge, (size_t)(64u << 10));
	uint8_t *p;
	uint64_t at;
	CHECK_EQ(stage_ring_take(&r, 0, &p, &at), -EINVAL);
	CHECK_EQ(stage_ring_take(&r, r.piece + 1, &p, &at), -EINVAL);
	CHECK_OK(stage_ring_take(&r, r.piece, &p, &at));
	teardown(&e);
	return 0;
}

int main(int argc, char **argv) { return check_main(argc, argv); }
