/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * GPU memory behind the emulator's DMA table (gpunvme_emu_dma_map_gpu) with
 * batched copies (gpunvme_emu_gpu_ops.copy_batch), on a stand-in "GPU":
 * plain memory whose copies land only at sync(), as a copy engine's do. So a
 * completion posted before its copies were synced shows stale bytes, a copy
 * lost from a batch shows poison, and a refused batch must fail every
 * command that had pieces in it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "harness.h"

#define GPU_IOVA 0x40000000000ull
#define POISON 0xa5
#define MAXQ 1024

struct fake_gpu {
	uint8_t *mem;
	size_t len;
	pthread_mutex_t lock;
	struct gpunvme_emu_copy q[MAXQ]; /* issued, not landed */
	unsigned nq;
	unsigned single_calls, batch_calls, batch_pieces, syncs;
	unsigned refuse_after; /* batch calls that succeed before one is refused (0: never) */
	int overflow;
	/* copy_from_file: each call's bytes read from the file into a buffer
	 * of the fake's own (freed at sync), as the copy engine's staging */
	void *owned[MAXQ];
	unsigned nowned, file_calls, file_mismatch;
};

/* c->dev_end: the end of its region as the emulator says it (emu.h), here
 * the fake's one region; 0 from copy(), which is not told */
static int issue(struct fake_gpu *g, const struct gpunvme_emu_copy *c, bool end_known)
{
	if (c->dev_addr < (uint64_t)(uintptr_t)g->mem ||
	    c->dev_addr + c->len > (uint64_t)(uintptr_t)g->mem + g->len ||
	    (end_known && c->dev_end != (uint64_t)(uintptr_t)g->mem + g->len))
		return -EFAULT;
	if (g->nq == MAXQ) {
		g->overflow = 1;
		return -ENOSPC;
	}
	g->q[g->nq++] = *c;
	return 0;
}

static int fake_copy(void *ctx, unsigned lane, uint64_t dev, void *host, size_t len, int to_gpu)
{
	(void)lane;
	struct fake_gpu *g = ctx;
	struct gpunvme_emu_copy c = { dev, host, len, to_gpu };
	pthread_mutex_lock(&g->lock);
	g->single_calls++;
	int rc = issue(g, &c, false);
	pthread_mutex_unlock(&g->lock);
	return rc;
}

static int fake_batch(void *ctx, unsigned lane, const struct gpunvme_emu_copy *v, unsigned n)
{
	(void)lane;
	struct fake_gpu *g = ctx;
	int rc = 0;
	pthread_mutex_lock(&g->lock);
	g->batch_calls++;
	if (g->refuse_after && g->batch_calls >= g->refuse_after) {
		rc = -EIO; /* refused whole, nothing queued, as cudaMemcpyBatchAsync */
	} else {
		g->batch_pieces += n;
		for (unsigned i = 0; i < n && !rc; i++)
			rc = issue(g, &v[i], true);
	}
	pthread_mutex_unlock(&g->lock);
	return rc;
}

/* Every issued copy lands now (one stream for all lanes: a superset). */
static int fake_sync(void *ctx, unsigned lane)
{
	(void)lane;
	struct fake_gpu *g = ctx;
	pthread_mutex_lock(&g->lock);
	g->syncs++;
	for (unsigned i = 0; i < g->nq; i++) {
		struct gpunvme_emu_copy *c = &g->q[i];
		uint8_t *d = (uint8_t *)(uintptr_t)c->dev_addr;
		if (c->to_gpu)
			memcpy(d, c->host, c->len);
		else
			memcpy(c->host, d, c->len);
	}
	g->nq = 0;
	for (unsigned i = 0; i < g->nowned; i++)
		free(g->owned[i]);
	g->nowned = 0;
	pthread_mutex_unlock(&g->lock);
	return 0;
}

/* A read from an image file's namespace: the file's bytes at off, read
 * into staging of the fake's own, queued like any copy; the mapping's
 * bytes (host) must be the same (counted when not). */
static int fake_from_file(void *ctx, unsigned lane, uint64_t dev, uint64_t dev_end, const void *host, int fd,
			  uint64_t off, size_t len)
{
	(void)lane;
	struct fake_gpu *g = ctx;
	uint8_t *st = malloc(len);
	if (!st)
		return -ENOMEM;
	int rc = gpunvme_pread_all(fd, st, len, off);
	if (rc) {
		free(st);
		return rc;
	}
	struct gpunvme_emu_copy c = { dev, st, len, 1, dev_end };
	pthread_mutex_lock(&g->lock);
	g->file_calls++;
	if (memcmp(st, host, len))
		g->file_mismatch++;
	rc = g->nowned < MAXQ ? issue(g, &c, true) : -ENOSPC;
	if (!rc)
		g->owned[g->nowned++] = st;
	pthread_mutex_unlock(&g->lock);
	if (rc)
		free(st);
	return rc;
}

static int fake_open(struct fake_gpu *g, size_t len)
{
	memset(g, 0, sizeof(*g));
	g->mem = malloc(len);
	if (!g->mem)
		return -ENOMEM;
	g->len = len;
	memset(g->mem, POISON, len);
	return -pthread_mutex_init(&g->lock, NULL);
}

static void fake_close(struct fake_gpu *g)
{
	pthread_mutex_destroy(&g->lock);
	free(g->mem);
}

/* Every case: a controller, its I/O queue pair, the fake GPU mapped at
 * GPU_IOVA, and what the namespace's first 8 MiB hold. */
struct fx {
	struct h_ctrl *c;
	struct h_qp q;
	struct fake_gpu g;
	struct gpunvme_emu_gpu_ops ops;
};
static uint8_t want[8u << 20]; /* covers every read of every case (LBA < 9600) */

/* A controller with 512-byte blocks whose first 8 MiB hold pattern 7 + k, an
 * I/O queue pair of 256 entries, and the fake GPU mapped at GPU_IOVA. The
 * namespace is RAM, or the image file `image` (16 MiB) when given. */
static int setup_ns(struct fx *f, const char *image)
{
	struct h_ctrl **c = &f->c;
	struct h_qp *q = &f->q;
	struct fake_gpu *g = &f->g;
	struct gpunvme_emu_gpu_ops *ops = &f->ops;
	struct gpunvme_emu_config cfg;
	h_cfg(&cfg);
	cfg.mdts = 5;
	cfg.ns[0].lba_shift = 9;
	cfg.ns[0].size = 16u << 20;
	if (image) {
		cfg.ns[0].backing = GPUNVME_EMU_BACK_FILE;
		snprintf(cfg.ns[0].path, sizeof(cfg.ns[0].path), "%s", image);
	}
	REQUIRE_OK(h_ctrl_open(c, &cfg, 16u << 20));
	REQUIRE_OK(h_enable(*c, 0));
	REQUIRE_OK(h_qp_create(*c, q, 1, 256));
	struct h_buf b = h_alloc(&(*c)->arena, 64u << 10, H_PAGE);
	struct gpunvme_cqe e;
	for (uint32_t k = 0; k < 128; k++) { /* 128 writes of 64 KiB: 8 MiB */
		h_fill(b.va, 64u << 10, 7 + k);
		memcpy(want + ((size_t)k << 16), b.va, 64u << 10);
		REQUIRE_OK(h_io(q, GPUNVME_CMD_WRITE, 1, (uint64_t)k * 128, 128, b.iova, 64u << 10, &e));
		REQUIRE_ST(e, 0);
	}
	REQUIRE_OK(fake_open(g, 8u << 20));
	*ops = (struct gpunvme_emu_gpu_ops){ fake_copy, fake_sync, g, fake_batch };
	REQUIRE_OK(gpunvme_emu_dma_map_gpu((*c)->emu, GPU_IOVA, (uint64_t)(uintptr_t)g->mem, g->len, ops));
	return 0;
}

static int setup(struct fx *f)
{
	return setup_ns(f, NULL);
}

static int teardown(struct fx *f)
{
	REQUIRE_OK(gpunvme_emu_dma_unmap(f->c->emu, GPU_IOVA));
	fake_close(&f->g);
	return 0;
}

/* n completions, every one a success */
static int wait_ok(struct h_qp *q, unsigned n)
{
	for (unsigned k = 0; k < n; k++) {
		struct gpunvme_cqe e;
		REQUIRE_OK(h_cq_wait(q, &e, H_TIMEOUT_MS));
		REQUIRE_ST(e, 0);
	}
	return 0;
}

/* n reads of 8 KiB (16 blocks) from LBA i * 48 into GPU bytes i * 12 KiB,
 * cids 100 + i, put in the SQ without a doorbell. */
static int queue_reads(struct h_qp *q, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct gpunvme_sqe s;
		h_io_sqe(&s, GPUNVME_CMD_READ, 1, (uint64_t)i * 48, 16);
		s.prp1 = GPU_IOVA + (uint64_t)i * 12288;
		s.prp2 = s.prp1 + H_PAGE;
		s.cid = (uint16_t)(100 + i);
		REQUIRE_OK(h_sq_push(q, &s));
	}
	return 0;
}

/* the same, then one doorbell, so the worker takes them in one pass */
static int push_reads(struct h_qp *q, unsigned n)
{
	REQUIRE_OK(queue_reads(q, n));
	h_sq_ring(q);
	return 0;
}

/* Read i's 8 KiB at GPU byte i * 12 KiB equal the pattern at LBA slba[i]
 * (i * 48 without a list); read now, under the fake's lock, while copies
 * may still be landing. */
static bool landed(struct fake_gpu *g, unsigned i, const uint64_t *slba)
{
	uint64_t lba = slba ? slba[i] : (uint64_t)i * 48;
	pthread_mutex_lock(&g->lock);
	bool same = memcmp(g->mem + (size_t)i * 12288, want + lba * 512, 8192) == 0;
	pthread_mutex_unlock(&g->lock);
	return same;
}

/* The bytes of every read (LBAs as for landed), the 4 KiB gap after each
 * and the memory past the last still poisoned. */
static int check_reads(struct fake_gpu *g, unsigned n, const uint64_t *slba)
{
	for (unsigned i = 0; i < n; i++) {
		REQUIRE(landed(g, i, slba), "read %u: bytes differ", i);
		REQUIRE(h_all(g->mem + (size_t)i * 12288 + 8192, 4096, POISON), "read %u: the gap after it was written", i);
	}
	REQUIRE(h_all(g->mem + (size_t)n * 12288, g->len - (size_t)n * 12288, POISON));
	return 0;
}

/* Wait for n read completions (cids 100..100+n-1, every one once, each
 * successful and posted only after its bytes landed) and `other` more
 * successful ones with cid `other_cid`. */
static int wait_reads(struct fx *f, unsigned n, unsigned other, uint16_t other_cid)
{
	uint8_t seen[256] = { 0 };
	REQUIRE(n <= sizeof(seen));
	for (unsigned k = 0; k < n + other; k++) {
		struct gpunvme_cqe e;
		REQUIRE_OK(h_cq_wait(&f->q, &e, H_TIMEOUT_MS));
		REQUIRE_ST(e, 0);
		if (other && e.cid == other_cid)
			continue;
		unsigned i = (unsigned)e.cid - 100;
		REQUIRE(i < n && ++seen[i] == 1, "cid %u", e.cid);
		REQUIRE(landed(&f->g, i, NULL), "read %u completed before its bytes landed", i);
	}
	return 0;
}

TEST_CASE(batched_reads_land_before_completion)
{
	struct fx f;
	if (setup(&f))
		return 1;
	enum { N = 200 }; /* more than a burst (64) and more than a batch (128) */
	REQUIRE_OK(push_reads(&f.q, N));
	if (wait_reads(&f, N, 0, 0) || check_reads(&f.g, N, NULL))
		return 1;
	/* one piece per read (contiguous GPU pages merge), all through
	 * batches, fewer calls than reads */
	REQUIRE_EQ(f.g.batch_pieces, N);
	REQUIRE_EQ(f.g.single_calls, 0);
	REQUIRE(f.g.batch_calls < N, "%u batch calls for %u reads: no batching", f.g.batch_calls, N);
	REQUIRE(!f.g.overflow);
	return teardown(&f);
}

/* A sync inside a pass (here Dataset Management, which syncs the lane
 * before it reads its range list; a FUA write to a file does too) covers
 * the copies of the GPU reads fetched before it in the same pass: their
 * completions must still be posted, with the sync's result, not held for
 * ever because the sync cleared the lane's pending flag. */
TEST_CASE(sync_inside_a_pass_releases_held_reads)
{
	struct fx f;
	if (setup(&f))
		return 1;
	enum { N = 10 };
	REQUIRE_OK(queue_reads(&f.q, N));
	/* then a deallocate far from the reads, in the same doorbell */
	struct h_buf b = h_alloc(&f.c->arena, H_PAGE, H_PAGE);
	struct gpunvme_dsm_range r = { .nlb = 8, .slba = 30000 };
	memcpy(b.va, &r, sizeof(r));
	struct gpunvme_sqe d = { .opc = GPUNVME_CMD_DSM, .nsid = 1, .prp1 = b.iova, .cid = 999 };
	d.dsm.nr = 0;
	d.dsm.attr = GPUNVME_DSM_AD;
	REQUIRE_OK(h_sq_push(&f.q, &d));
	h_sq_ring(&f.q);
	if (wait_reads(&f, N, 1, 999) || check_reads(&f.g, N, NULL))
		return 1;
	return teardown(&f);
}

/* Queues with few free slots: 4 queue pairs of 8 entries (7 commands each
 * at most) kept full until 600 reads into 600 separate GPU buffers are
 * done, so every pass of a worker takes a few commands from several queues
 * and one sync covers them all. Every byte of every buffer is checked, and
 * the 4 KiB after each and the memory past the last still hold the poison. */
enum { FEW_N = 600 };

/* 600 reads over 4 queue pairs of 8 entries (7 in flight each): every
 * read's bytes, the gaps between them untouched, each completion posted
 * only after its bytes landed. Pieces counted by the caller. */
static int few_free_slots(struct fx *f, uint64_t *slba)
{
	enum { NQ = 4, N = FEW_N };
	struct h_qp sq[NQ];
	for (unsigned j = 0; j < NQ; j++)
		REQUIRE_OK(h_qp_create(f->c, &sq[j], (uint16_t)(2 + j), 8));
	static uint8_t seen[N];
	memset(seen, 0, sizeof(seen));
	unsigned next = 0, done = 0;
	uint64_t t0 = h_now_ms();
	while (done < N) {
		for (unsigned j = 0; j < NQ; j++) {
			bool rung = false;
			while (next < N) {
				struct gpunvme_sqe s;
				slba[next] = (uint64_t)next * 40 % 16368; /* inside the pattern */
				h_io_sqe(&s, GPUNVME_CMD_READ, 1, slba[next], 16);
				s.prp1 = GPU_IOVA + (uint64_t)next * 12288;
				s.prp2 = s.prp1 + H_PAGE;
				s.cid = (uint16_t)next;
				if (h_sq_push(&sq[j], &s) == -EBUSY)
					break;
				next++;
				rung = true;
			}
			if (rung)
				h_sq_ring(&sq[j]);
			struct gpunvme_cqe e;
			while (h_cq_peek(&sq[j], &e) == 1) {
				REQUIRE_ST(e, 0);
				REQUIRE(e.cid < N && !seen[e.cid]++, "cid %u", e.cid);
				/* posted only after its copies landed */
				REQUIRE(landed(&f->g, e.cid, slba), "read %u completed before its bytes landed", e.cid);
				done++;
			}
		}
		REQUIRE(h_now_ms() - t0 < H_TIMEOUT_MS, "%u of %u reads done", done, N);
	}
	return check_reads(&f->g, N, slba);
}


TEST_CASE(many_reads_few_free_slots)
{
	struct fx f;
	static uint64_t slba[FEW_N];
	if (setup(&f) || few_free_slots(&f, slba))
		return 1;
	REQUIRE_EQ(f.g.batch_pieces, FEW_N);
	REQUIRE(!f.g.overflow);
	return teardown(&f);
}

TEST_CASE(writes_from_gpu_then_read_back)
{
	struct fx f;
	if (setup(&f))
		return 1;
	/* 32 writes of 16 KiB each from GPU memory to LBA 10000 + 32 i */
	h_fill(f.g.mem, 32 * 16384, 99);
	static uint8_t src[32 * 16384];
	memcpy(src, f.g.mem, sizeof(src));
	for (unsigned i = 0; i < 32; i++) {
		struct gpunvme_sqe s;
		h_io_sqe(&s, GPUNVME_CMD_WRITE, 1, 10000 + (uint64_t)i * 32, 32);
		uint64_t a = GPU_IOVA + (uint64_t)i * 16384;
		/* a PRP list in host memory for the 4 pages */
		struct h_buf l = h_alloc(&f.c->arena, H_PAGE, H_PAGE);
		uint64_t *ent = l.va;
		for (int p = 0; p < 3; p++)
			ent[p] = a + (uint64_t)(p + 1) * H_PAGE;
		s.prp1 = a;
		s.prp2 = l.iova;
		s.cid = (uint16_t)(500 + i);
		REQUIRE_OK(h_sq_push(&f.q, &s));
	}
	h_sq_ring(&f.q);
	if (wait_ok(&f.q, 32))
		return 1;
	/* the namespace holds them: read back into host memory */
	struct h_buf r = h_alloc(&f.c->arena, 16384, H_PAGE);
	for (unsigned i = 0; i < 32; i++) {
		struct gpunvme_cqe e;
		memset(r.va, 0, 16384);
		REQUIRE_OK(h_io(&f.q, GPUNVME_CMD_READ, 1, 10000 + (uint64_t)i * 32, 32, r.iova, 16384, &e));
		REQUIRE_ST(e, 0);
		REQUIRE(memcmp(r.va, src + (size_t)i * 16384, 16384) == 0, "write %u did not land", i);
	}
	REQUIRE(f.g.batch_calls < 32);
	return teardown(&f);
}

TEST_CASE(refused_batch_fails_its_commands)
{
	struct fx f;
	if (setup(&f))
		return 1;
	f.g.refuse_after = 2; /* the first batch goes, every later one is refused */
	enum { N = 200 };
	REQUIRE_OK(push_reads(&f.q, N));
	unsigned ok = 0, failed = 0;
	for (unsigned k = 0; k < N; k++) {
		struct gpunvme_cqe e;
		REQUIRE_OK(h_cq_wait(&f.q, &e, H_TIMEOUT_MS));
		unsigned i = (unsigned)e.cid - 100;
		REQUIRE(i < N);
		if (h_st(&e) == 0) {
			/* success only with the right bytes */
			REQUIRE(landed(&f.g, i, NULL), "read %u reported success with wrong bytes", i);
			ok++;
		} else {
			REQUIRE_SC(e, GPUNVME_SC_DATA_XFER_ERROR);
			failed++;
		}
	}
	REQUIRE(failed > 0, "no read failed although batches were refused");
	REQUIRE_EQ(ok + failed, N);
	return teardown(&f);
}

TEST_CASE(no_batch_op_copies_piece_by_piece)
{
	struct fx f;
	if (setup(&f))
		return 1;
	REQUIRE_OK(gpunvme_emu_dma_unmap(f.c->emu, GPU_IOVA));
	f.ops.copy_batch = NULL;
	REQUIRE_OK(gpunvme_emu_dma_map_gpu(f.c->emu, GPU_IOVA, (uint64_t)(uintptr_t)f.g.mem, f.g.len, &f.ops));
	enum { N = 100 };
	REQUIRE_OK(push_reads(&f.q, N));
	if (wait_ok(&f.q, N))
		return 1;
	if (check_reads(&f.g, N, NULL))
		return 1;
	REQUIRE_EQ(f.g.batch_calls, 0);
	REQUIRE_EQ(f.g.single_calls, N);
	return teardown(&f);
}

/* Two GPU regions with their own ops (two GPU libraries, or two queue
 * sets): a batch never mixes them, every byte lands in its own region. */
TEST_CASE(two_regions_two_contexts)
{
	struct fx f;
	struct fake_gpu g2;
	struct gpunvme_emu_gpu_ops ops2;
	if (setup(&f))
		return 1;
	REQUIRE_OK(fake_open(&g2, 8u << 20));
	ops2 = (struct gpunvme_emu_gpu_ops){ fake_copy, fake_sync, &g2, fake_batch };
	const uint64_t IOVA2 = GPU_IOVA + (1ull << 30);
	REQUIRE_OK(gpunvme_emu_dma_map_gpu(f.c->emu, IOVA2, (uint64_t)(uintptr_t)g2.mem, g2.len, &ops2));
	enum { N = 120 };
	for (unsigned i = 0; i < N; i++) { /* alternate the regions */
		struct gpunvme_sqe s;
		h_io_sqe(&s, GPUNVME_CMD_READ, 1, (uint64_t)i * 48, 16);
		s.prp1 = (i & 1 ? IOVA2 : GPU_IOVA) + (uint64_t)(i / 2) * 12288;
		s.prp2 = s.prp1 + H_PAGE;
		s.cid = (uint16_t)(100 + i);
		REQUIRE_OK(h_sq_push(&f.q, &s));
	}
	h_sq_ring(&f.q);
	if (wait_ok(&f.q, N))
		return 1;
	for (unsigned i = 0; i < N; i++) {
		const uint8_t *d = (i & 1 ? g2.mem : f.g.mem) + (size_t)(i / 2) * 12288;
		REQUIRE(memcmp(d, want + (size_t)i * 48 * 512, 8192) == 0, "read %u", i);
		REQUIRE(h_all(d + 8192, 4096, POISON));
	}
	REQUIRE(h_all(f.g.mem + (size_t)N / 2 * 12288, f.g.len - (size_t)N / 2 * 12288, POISON));
	REQUIRE(h_all(g2.mem + (size_t)N / 2 * 12288, g2.len - (size_t)N / 2 * 12288, POISON));
	REQUIRE_EQ(f.g.batch_pieces + g2.batch_pieces, N);
	REQUIRE_OK(gpunvme_emu_dma_unmap(f.c->emu, IOVA2));
	fake_close(&g2);
	return teardown(&f);
}

/* The fixture over a fresh 16 MiB image file (its name in path, for the
 * caller to unlink), the fake GPU taking copy_from_file. */
static int setup_image(struct fx *f, char *path)
{
	int fd = mkstemp(path);
	REQUIRE(fd >= 0);
	close(fd);
	int rc = setup_ns(f, path);
	if (rc) {
		unlink(path);
		return rc;
	}
	REQUIRE_OK(gpunvme_emu_dma_unmap(f->c->emu, GPU_IOVA));
	f->ops.copy_from_file = fake_from_file;
	REQUIRE_OK(gpunvme_emu_dma_map_gpu(f->c->emu, GPU_IOVA, (uint64_t)(uintptr_t)f->g.mem, f->g.len, &f->ops));
	return 0;
}

/*
 * An image file's namespace (emu_segs_from_file): reads into GPU memory go
 * to the ops' copy_from_file with the file's offset, reads into host
 * memory are preadv'd, and one command may mix both (PRP1 a host page,
 * PRP2 a GPU page). Host pages scattered in reverse order (one segment
 * each, more than one preadv call). A file cut short behind the emulator's
 * back fails the read with Unrecovered Read Error, where a copy from the
 * mapping would have been a SIGBUS.
 */
TEST_CASE(image_file_reads_through_the_file)
{
	char path[] = "/tmp/gpunvme-gpucopy-XXXXXX";
	struct fx f;
	int rc = setup_image(&f, path);
	if (rc)
		return rc;
	/* GPU: 100 reads of 8 KiB */
	enum { N = 100 };
	REQUIRE_OK(push_reads(&f.q, N));
	if (wait_ok(&f.q, N) || check_reads(&f.g, N, NULL))
		return 1;
	REQUIRE_EQ(f.g.file_calls, N);
	REQUIRE_EQ(f.g.file_mismatch, 0);
	REQUIRE_EQ(f.g.single_calls + f.g.batch_pieces, 0);
	/* host: 128 KiB (the MDTS) into 32 pages in reverse order */
	struct h_buf pages = h_alloc(&f.c->arena, 32 * H_PAGE, H_PAGE);
	struct h_buf list = h_alloc(&f.c->arena, H_PAGE, H_PAGE);
	uint64_t *ent = list.va;
	for (unsigned p = 1; p < 32; p++)
		ent[p - 1] = pages.iova + (uint64_t)(31 - p) * H_PAGE;
	memset(pages.va, POISON, 32 * H_PAGE);
	struct gpunvme_sqe s;
	struct gpunvme_cqe e;
	h_io_sqe(&s, GPUNVME_CMD_READ, 1, 1000, 256);
	s.prp1 = pages.iova + 31 * H_PAGE;
	s.prp2 = list.iova;
	REQUIRE_OK(h_cmd(&f.q, &s, &e));
	REQUIRE_ST(e, 0);
	for (unsigned p = 0; p < 32; p++)
		REQUIRE(memcmp((uint8_t *)pages.va + (size_t)(31 - p) * H_PAGE, want + 1000 * 512 + (size_t)p * H_PAGE,
			       H_PAGE) == 0, "host page %u", p);
	/* mixed: 8 KiB, the first page to host memory, the second to the GPU */
	memset(f.g.mem, POISON, 8192);
	memset(pages.va, POISON, H_PAGE);
	h_io_sqe(&s, GPUNVME_CMD_READ, 1, 4000, 16);
	s.prp1 = pages.iova;
	s.prp2 = GPU_IOVA;
	REQUIRE_OK(h_cmd(&f.q, &s, &e));
	REQUIRE_ST(e, 0);
	REQUIRE(memcmp(pages.va, want + 4000 * 512, H_PAGE) == 0);
	REQUIRE(memcmp(f.g.mem, want + 4000 * 512 + H_PAGE, H_PAGE) == 0);
	REQUIRE(h_all(f.g.mem + H_PAGE, H_PAGE, POISON));
	REQUIRE_EQ(f.g.file_mismatch, 0);
	/* the file cut to 8 MiB: a read past it fails with a media status */
	REQUIRE(truncate(path, 8u << 20) == 0);
	h_io_sqe(&s, GPUNVME_CMD_READ, 1, (12u << 20) / 512, 8);
	s.prp1 = pages.iova;
	s.prp2 = 0;
	REQUIRE_OK(h_cmd(&f.q, &s, &e));
	REQUIRE_ST(e, GPUNVME_SC_UNRECOVERED_READ);
	rc = teardown(&f);
	unlink(path);
	return rc;
}

/* GPUNVME_EMU_FILE_READ=map (read at open): the old copies from the
 * mapping, for a same-run baseline; the bytes are the same. */
TEST_CASE(image_file_reads_from_the_mapping_when_asked)
{
	char path[] = "/tmp/gpunvme-gpucopy-XXXXXX";
	struct fx f;
	REQUIRE(setenv("GPUNVME_EMU_FILE_READ", "map", 1) == 0);
	int rc = setup_image(&f, path);
	unsetenv("GPUNVME_EMU_FILE_READ");
	if (rc)
		return rc;
	enum { N = 40 };
	REQUIRE_OK(push_reads(&f.q, N));
	if (wait_ok(&f.q, N) || check_reads(&f.g, N, NULL))
		return 1;
	REQUIRE_EQ(f.g.file_calls, 0);
	REQUIRE_EQ(f.g.batch_pieces + f.g.single_calls, N);
	rc = teardown(&f);
	unlink(path);
	return rc;
}

/* The same over an image file: every read through copy_from_file. */
TEST_CASE(image_file_many_reads_few_free_slots)
{
	char path[] = "/tmp/gpunvme-gpucopy-XXXXXX";
	struct fx f;
	static uint64_t slba[FEW_N];
	int rc = setup_image(&f, path);
	if (rc)
		return rc;
	rc = few_free_slots(&f, slba);
	if (!rc) {
		CHECK_EQ(f.g.file_calls, FEW_N);
		CHECK_EQ(f.g.file_mismatch, 0);
		CHECK(!f.g.overflow);
		rc = teardown(&f);
	}
	unlink(path);
	return rc;
}

int main(int argc, char **argv) { return check_main(argc, argv); }
