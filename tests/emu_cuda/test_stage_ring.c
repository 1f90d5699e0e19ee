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
		uint64_t dev;
		const uint8_t *host;
		size_t len;
	} q[MAXQ];
	unsigned queued, ran;  /* copies queued, copies run (in order) */
	unsigned fence_at[STAGE_RING_FENCES]; /* fence k: the copies queued before it */
	unsigned copies, fences, waits;
	size_t longest;
	int fail_wait;         /* wait returns this when nonzero */
	int bad;               /* a copy outside the ring or the device buffer */
};

static int late_copy(void *ctx, unsigned lane, uint64_t dev, const uint8_t *host, size_t len)
{
	struct late_engine *e = (struct late_engine *)ctx;
	(void)lane;
	if (host < e->ring || host + len > e->ring + e->ring_size || dev + len > e->dev_size) {
		e->bad++;
		return -EFAULT;
	}
	if (e->queued - e->ran == MAXQ)
		return -ENOSPC;
	e->q[e->queued % MAXQ].dev = dev;
	e->q[e->queued % MAXQ].host = host;
	e->q[e->queued % MAXQ].len = len;
	e->queued++;
	e->copies++;
	if (len > e->longest)
		e->longest = len;
	return 0;
}

/* the copies before index upto read their staging bytes now */
static void late_run(struct late_engine *e, unsigned upto)
{
	for (; e->ran != upto; e->ran++)
		memcpy(e->dev + e->q[e->ran % MAXQ].dev, e->q[e->ran % MAXQ].host, e->q[e->ran % MAXQ].len);
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

static const struct stage_ring_ops late_ops = { late_copy, late_fence, late_wait };

/* The lane's sync: the run queued, every copy run, the ring idle. */
static int sync_ring(struct stage_ring *r, struct late_engine *e)
{
	int rc = stage_ring_flush(r);
	late_run(e, e->queued);
	stage_ring_idle(r);
	return rc;
}

/* One piece: taken, filled from src[off..], handed to the ring for dev. */
static int piece(struct stage_ring *r, const uint8_t *src, uint64_t off, uint64_t dev, size_t n)
{
	uint8_t *p;
	uint64_t at;
	int rc = stage_ring_take(r, n, &p, &at);
	if (rc)
		return rc;
	memcpy(p, src + off, n);
	return stage_ring_add(r, dev, at, n);
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

static int setup(struct late_engine *e, struct stage_ring *r, size_t ring_size, size_t piece_max, size_t merge,
		 size_t dev_size)
{
	memset(e, 0, sizeof(*e));
	e->ring = (uint8_t *)malloc(ring_size);
	e->ring_size = ring_size;
	e->dev = (uint8_t *)calloc(1, dev_size);
	e->dev_size = dev_size;
	if (!e->ring || !e->dev)
		return -ENOMEM;
	stage_ring_init(r, &late_ops, e, 0, e->ring, ring_size, piece_max, merge);
	return 0;
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
	for (int ri = 0; ri < 3; ri++)
		for (int mi = 0; mi < 3; mi++) {
			struct late_engine e;
			struct stage_ring r;
			REQUIRE_OK(setup(&e, &r, rings[ri], 512u << 10, merges[mi], dev_size));
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
				CHECK(!memcmp(e.dev, want, dev_size), "ring %zu KiB, merge %zu KiB, round %d: %u pieces, "
				      "the bytes delivered differ", rings[ri] >> 10, merges[mi] >> 10, round, filled);
				free(want);
			}
			CHECK_EQ(e.bad, 0);
			if (merges[mi])
				CHECK(e.longest <= merges[mi] || e.longest <= r.piece, "a run of %zu bytes", e.longest);
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
