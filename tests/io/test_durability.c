/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Durability across a process crash, on a file-backed emulator namespace
 * (emu:/path: the image is mmap(MAP_SHARED); Flush is msync(MS_SYNC)).
 *
 * Each round a child process opens the image through the library, writes
 * blocks whose content is a function of (lba, generation) with a CRC32C,
 * and issues Flushes while more writes are in flight. When a Flush
 * completes, the child sends the parent the (lba, generation) of every
 * write acknowledged before that Flush was submitted: what NVMe says is now
 * durable. The parent SIGKILLs the child at a random point (0-20 ms into its
 * I/O, or right after it submitted a Flush, so that Flushes are outstanding
 * at the kill), then opens the image again (a new emulator over the file)
 * and reads every block back.
 *
 * What is guaranteed, and therefore checked, across a SIGKILL of the
 * process that hosts the emulator:
 *   (a) every write acknowledged before a completed Flush was submitted is
 *       there byte-exact: the block holds that generation or a later one
 *       (a later write to the same LBA, acknowledged or not, may have
 *       landed: that is allowed), never an older one;
 *   (b) every block holds one whole write: all zeroes (never written) or a
 *       generation that was written to that LBA, with its CRC and payload
 *       exact: no torn block, no block from another LBA (the emulator
 *       writes a file namespace with pwritev, which a dying process leaves
 *       only between pages; a memcpy into the mapping tore 512 B blocks);
 *   (c) the image reopens (identify, namespace size) without complaint.
 * What a SIGKILL cannot show: whether Flush itself did anything. The data
 * of a MAP_SHARED mapping lives in the kernel's page cache, which survives
 * the death of the process, so writes are kept even when Flush is a no-op.
 * Flush (msync) is what carries data over a power loss or a kernel crash,
 * which this test does not simulate (docs/reliability.md).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpunvme/gpunvme.h"
#include "blocktag.h"
#include "harness.h"

#define NBLK 256u          /* blocks in the image */
#define BATCH_MAX 32u      /* writes in flight at once */
#define ROUNDS 60u /* GPUNVME_DURABILITY_ROUNDS overrides, for long runs */
#define CHILD_LIFE_MS 10000u /* a child never outlives this, killed or not */
#define WAIT_MS 10000u       /* bound on every wait of the parent */

/* ---- block content (blocktag.h) --------------------------------------------- */

enum verdict { V_OK, V_STALE, V_TORN, V_FOREIGN, V_GARBAGE };
static const char *const verdict_name[] = { "ok", "stale (older than durable)", "torn", "another LBA's block",
					    "garbage" };

/* Whether block b of LBA lba is acceptable when its durable generation is
 * min_gen (0: nothing durable yet, zeroes allowed) and no generation above
 * max_gen was ever written. *gen_out gets what the block holds. */
static enum verdict block_check(const uint8_t *b, uint32_t bs, uint64_t lba, uint64_t min_gen, uint64_t max_gen,
				uint64_t *gen_out)
{
	switch (bt_parse(b, bs, lba, gen_out)) {
	case BT_WHOLE:
		if (*gen_out > max_gen)
			return V_GARBAGE; /* a generation never written */
		return *gen_out < min_gen ? V_STALE : V_OK;
	case BT_TORN:
		return V_TORN;
	case BT_FOREIGN:
		return V_FOREIGN;
	default:
		return V_GARBAGE;
	}
}

/* ---- the child: writes, flushes, reports ----------------------------------- */

enum { REC_READY = 1, REC_DURABLE = 2, REC_FLUSH_SUBMITTED = 3, REC_FLUSH_DONE = 4 };

struct rec {
	uint32_t kind;
	uint32_t lba;
	uint64_t gen;
};

struct child {
	int fd;
	struct rec *pending, *covered;
	uint32_t npending, ncovered, cap;
	bool flush_inflight;
	uint32_t batch_left;
	int failed;
};

struct wctx {
	struct child *ch;
	uint32_t lba;
	uint64_t gen;
};

static void send_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n) {
		ssize_t w = write(fd, b, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			_exit(20);
		b += w;
		n -= (size_t)w;
	}
}

static void write_cb(void *arg, const struct gpunvme_cpl *cpl)
{
	struct wctx *w = arg;
	struct child *ch = w->ch;
	ch->batch_left--;
	if (cpl->err) {
		ch->failed = cpl->err;
		return;
	}
	if (ch->npending == ch->cap)
		_exit(21);
	ch->pending[ch->npending++] = (struct rec){ REC_DURABLE, w->lba, w->gen };
}

static void flush_cb(void *arg, const struct gpunvme_cpl *cpl)
{
	struct child *ch = arg;
	if (cpl->err) {
		ch->failed = cpl->err;
		return;
	}
	/* everything acknowledged before the Flush went out is durable now */
	ch->covered[ch->ncovered++] = (struct rec){ REC_FLUSH_DONE, 0, 0 };
	send_all(ch->fd, ch->covered, ch->ncovered * sizeof(struct rec));
	ch->ncovered = 0;
	ch->flush_inflight = false;
}

static int child_main(const char *uri, int fd, uint32_t round, uint64_t seed)
{
	struct gpunvme_opts o;
	gpunvme_opts_init(&o);
	o.io_timeout_ms = 5000;
	struct gpunvme_ctrl *c;
	struct gpunvme_qpair *qp;
	if (gpunvme_open(uri, &o, &c) || gpunvme_qpair_create(c, 64, &qp))
		return 10;
	struct gpunvme_ns_info ni;
	if (gpunvme_ns_info(c, 1, &ni) || ni.nsze != NBLK)
		return 11;
	uint32_t bs = ni.lba_size;
	uint8_t *bufs = gpunvme_dma_alloc(c, (size_t)BATCH_MAX * bs);
	struct child ch = { .fd = fd, .cap = 1u << 16 };
	ch.pending = calloc(ch.cap, sizeof(struct rec));
	ch.covered = calloc(ch.cap + 1, sizeof(struct rec));
	if (!bufs || !ch.pending || !ch.covered)
		return 12;
	struct wctx w[BATCH_MAX];
	uint64_t seq = 0, rnd = seed;
	struct rec ready = { REC_READY, 0, 0 };
	send_all(fd, &ready, sizeof(ready));
	uint64_t end = h_now_ms() + CHILD_LIFE_MS;
	while (h_now_ms() < end) {
		/* a batch of distinct LBAs: one write per LBA in flight */
		uint32_t n = 1 + (uint32_t)(h_rand(&rnd) % BATCH_MAX), lbas[BATCH_MAX];
		for (uint32_t i = 0; i < n; i++) {
			bool dup;
			do {
				lbas[i] = (uint32_t)(h_rand(&rnd) % NBLK);
				dup = false;
				for (uint32_t j = 0; j < i; j++)
					dup |= lbas[j] == lbas[i];
			} while (dup);
		}
		ch.batch_left = n;
		for (uint32_t i = 0; i < n; i++) {
			w[i] = (struct wctx){ &ch, lbas[i], ((uint64_t)round << 32) | ++seq };
			bt_fill(bufs + (size_t)i * bs, bs, lbas[i], w[i].gen);
			if (gpunvme_write(qp, 1, bufs + (size_t)i * bs, lbas[i], 1, write_cb, &w[i]))
				return 13;
		}
		/* a Flush at the end of every other batch, while the next
		 * batch's writes are in flight */
		while (ch.batch_left || (ch.flush_inflight && h_rand(&rnd) % 2)) {
			if (gpunvme_qpair_poll(qp, 0) < 0 || ch.failed)
				return 14;
			if (h_now_ms() > end)
				return 15;
		}
		if (!ch.flush_inflight && ch.npending) {
			memcpy(ch.covered, ch.pending, ch.npending * sizeof(struct rec));
			ch.ncovered = ch.npending;
			ch.npending = 0;
			ch.flush_inflight = true;
			if (gpunvme_flush(qp, 1, flush_cb, &ch))
				return 16;
			struct rec f = { REC_FLUSH_SUBMITTED, 0, 0 };
			send_all(fd, &f, sizeof(f));
		}
	}
	return 17; /* never killed: the parent is gone or stuck */
}

/* ---- the parent ------------------------------------------------------------- */

struct tally {
	unsigned rounds, flushes_done, killed_in_flush, durable_checked, newer_seen;
	unsigned bad[5];
};

/* Read records from fd until `stop` returns true or EOF; whole records only,
 * a partial one at EOF (the child died writing it) is dropped. Durable
 * records take effect at their REC_FLUSH_DONE. Returns 1 at EOF, 0 when
 * stopped, -1 on timeout. */
struct reader {
	int fd;
	uint8_t buf[sizeof(struct rec) * 256];
	size_t have;
	struct rec *batch;
	uint32_t nbatch;
	uint64_t *durable;
	bool flush_outstanding;
	bool ready;
	unsigned flushes_done;
};

static int reader_pump(struct reader *r, int timeout_ms)
{
	struct pollfd p = { .fd = r->fd, .events = POLLIN };
	int n = poll(&p, 1, timeout_ms);
	if (n < 0)
		return errno == EINTR ? 0 : -1;
	if (n == 0)
		return 0;
	ssize_t got = read(r->fd, r->buf + r->have, sizeof(r->buf) - r->have);
	if (got < 0)
		return errno == EINTR || errno == EAGAIN ? 0 : -1;
	if (got == 0)
		return 1;
	r->have += (size_t)got;
	size_t off = 0;
	for (; r->have - off >= sizeof(struct rec); off += sizeof(struct rec)) {
		struct rec x;
		memcpy(&x, r->buf + off, sizeof(x));
		switch (x.kind) {
		case REC_READY:
			r->ready = true;
			break;
		case REC_FLUSH_SUBMITTED:
			r->flush_outstanding = true;
			break;
		case REC_DURABLE:
			if (x.lba >= NBLK || r->nbatch >= (1u << 16))
				return -1;
			r->batch[r->nbatch++] = x;
			break;
		case REC_FLUSH_DONE:
			for (uint32_t i = 0; i < r->nbatch; i++)
				if (r->batch[i].gen > r->durable[r->batch[i].lba])
					r->durable[r->batch[i].lba] = r->batch[i].gen;
			r->nbatch = 0;
			r->flush_outstanding = false;
			r->flushes_done++;
			break;
		default:
			return -1;
		}
	}
	memmove(r->buf, r->buf + off, r->have - off);
	r->have -= off;
	return 0;
}

static void sleep_us(unsigned us)
{
	struct timespec ts = { .tv_sec = us / 1000000u, .tv_nsec = (long)(us % 1000000u) * 1000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Open the image again and check every block against durable[]. */
static int verify_image(const char *uri, const uint64_t *durable, uint64_t max_gen, struct tally *t, unsigned round)
{
	struct gpunvme_ctrl *c;
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_open(uri, NULL, &c));
	struct gpunvme_ns_info ni;
	CHECK_OK(gpunvme_ns_info(c, 1, &ni));
	CHECK_EQ(ni.nsze, NBLK);
	uint32_t bs = ni.lba_size;
	uint8_t *b = gpunvme_dma_alloc(c, (size_t)NBLK * bs);
	int rc = gpunvme_qpair_create(c, 8, &qp);
	CHECK(b && rc == 0);
	if (b && rc == 0) {
		CHECK_OK(gpunvme_read_sync(qp, 1, b, 0, NBLK, NULL));
		for (uint32_t lba = 0; lba < NBLK; lba++) {
			uint64_t g;
			enum verdict v = block_check(b + (size_t)lba * bs, bs, lba, durable[lba], max_gen, &g);
			t->bad[v]++;
			if (durable[lba])
				t->durable_checked++;
			if (v == V_OK && g > durable[lba])
				t->newer_seen++;
			CHECK(v == V_OK, "round %u LBA %u: %s: holds generation %#llx, durable %#llx", round, lba,
			      verdict_name[v], (unsigned long long)g, (unsigned long long)durable[lba]);
		}
		gpunvme_qpair_destroy(qp);
	}
	gpunvme_dma_free(c, b);
	gpunvme_close(c);
	return 0;
}

static int run_rounds(uint32_t lbads, uint64_t seed)
{
	uint32_t bs = 1u << lbads;
	char path[] = "/tmp/gpunvme-durability-XXXXXX";
	int fd = mkstemp(path);
	REQUIRE(fd >= 0);
	int trc = ftruncate(fd, (off_t)NBLK * bs);
	close(fd);
	REQUIRE(trc == 0);
	char uri[128];
	int n = snprintf(uri, sizeof(uri), "emu:%s?lbads=%u", path, lbads);
	REQUIRE(n > 0 && (size_t)n < sizeof(uri));

	uint64_t durable[NBLK] = { 0 };
	struct tally t = { 0 };
	struct reader r = { .durable = durable };
	r.batch = calloc(1u << 16, sizeof(struct rec));
	REQUIRE(r.batch);
	uint64_t rnd = seed;
	int result = 0;
	uint32_t rounds = ROUNDS;
	const char *env = getenv("GPUNVME_DURABILITY_ROUNDS");
	if (env && atoi(env) > 0)
		rounds = (uint32_t)atoi(env);
	for (uint32_t round = 1; round <= rounds && !check_failures(); round++) {
		int pfd[2];
		REQUIRE(pipe(pfd) == 0);
		fflush(NULL);
		pid_t pid = fork();
		REQUIRE(pid >= 0);
		if (pid == 0) {
			close(pfd[0]);
			_exit(child_main(uri, pfd[1], round, seed * 1000003u + round));
		}
		close(pfd[1]);
		r.fd = pfd[0];
		r.have = 0;
		r.nbatch = 0;
		r.ready = false;
		r.flush_outstanding = false;
		/* wait for the child's queue pair, then let it run */
		uint64_t deadline = h_now_ms() + WAIT_MS;
		int prc = 0;
		while (!r.ready && prc == 0 && h_now_ms() < deadline)
			prc = reader_pump(&r, 50);
		bool at_flush = h_rand(&rnd) % 3 == 0;
		unsigned delay_us = (unsigned)(h_rand(&rnd) % 20001u);
		uint64_t kill_at = h_now_us() + delay_us;
		while (r.ready && prc == 0 && h_now_us() < kill_at) {
			if (at_flush && r.flush_outstanding)
				break; /* kill while the Flush is outstanding */
			prc = reader_pump(&r, 1);
		}
		if (at_flush && r.flush_outstanding)
			sleep_us((unsigned)(h_rand(&rnd) % 300u));
		kill(pid, SIGKILL);
		/* what the child reported before it died still counts */
		deadline = h_now_ms() + WAIT_MS;
		while (prc == 0 && h_now_ms() < deadline)
			prc = reader_pump(&r, 50);
		close(pfd[0]);
		int status = 0;
		pid_t w;
		deadline = h_now_ms() + WAIT_MS;
		while ((w = waitpid(pid, &status, WNOHANG)) == 0 && h_now_ms() < deadline)
			sleep_us(1000);
		REQUIRE(w == pid, "round %u: child %d did not go within %u ms", round, (int)pid, WAIT_MS);
		REQUIRE(prc == 1, "round %u: the pipe from the child failed or did not close", round);
		REQUIRE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
			"round %u: the child ended by itself (exit %d) before the kill", round,
			WIFEXITED(status) ? WEXITSTATUS(status) : -1);
		REQUIRE(r.ready, "round %u: the child never got its queue pair", round);
		t.rounds++;
		t.killed_in_flush += r.flush_outstanding;
		if (verify_image(uri, durable, ((uint64_t)round << 32) | 0xffffffffu, &t, round))
			result = 1;
	}
	t.flushes_done = r.flushes_done;
	printf("durability %u B blocks: %u rounds, %u flushes completed, %u kills with a Flush outstanding, "
	       "%u durable blocks checked, %u blocks newer than durable; bad: stale %u torn %u foreign %u garbage %u\n",
	       bs, t.rounds, t.flushes_done, t.killed_in_flush, t.durable_checked, t.newer_seen, t.bad[V_STALE],
	       t.bad[V_TORN], t.bad[V_FOREIGN], t.bad[V_GARBAGE]);
	/* not vacuous: flushes completed, kills landed during Flushes, and
	 * durable blocks were read back */
	if (!check_failures()) {
		/* about one per round on average; on a loaded CI machine (2
		 * cores, suites in parallel) the kill, 0-20 ms in, often comes
		 * before the first Flush of its round completes: half of the
		 * rounds is still far from vacuous (53 of 60 seen there) */
		CHECK(t.flushes_done >= rounds / 2, "only %u flushes completed in %u rounds", t.flushes_done, rounds);
		CHECK(t.killed_in_flush > 0, "no kill landed while a Flush was outstanding");
		CHECK(t.durable_checked > 0, "no durable block was checked");
	}
	free(r.batch);
	unlink(path);
	return result;
}

TEST_CASE(sigkill_4k)
{
	return run_rounds(12, 4242);
}

TEST_CASE(sigkill_512)
{
	return run_rounds(9, 512512);
}

/* The checker itself: each kind of damage is caught (so a durability
 * failure cannot pass unseen). */
TEST_CASE(checker_catches_damage)
{
	static uint8_t b[4096];
	uint64_t g;
	const uint32_t bs = 4096;
	bt_fill(b, bs, 7, 5);
	CHECK_EQ(block_check(b, bs, 7, 5, 9, &g), V_OK);
	CHECK_EQ(g, 5);
	CHECK_EQ(block_check(b, bs, 7, 3, 9, &g), V_OK); /* newer than durable: allowed */
	CHECK_EQ(block_check(b, bs, 7, 6, 9, &g), V_STALE); /* acknowledged + flushed write lost */
	CHECK_EQ(block_check(b, bs, 8, 0, 9, &g), V_FOREIGN);
	CHECK_EQ(block_check(b, bs, 7, 0, 4, &g), V_GARBAGE); /* a generation never written */
	/* torn: the second half from another generation of the same LBA */
	static uint8_t o[4096];
	bt_fill(o, bs, 7, 4);
	memcpy(b + 2048, o + 2048, 2048);
	CHECK_EQ(block_check(b, bs, 7, 0, 9, &g), V_TORN);
	/* torn at 512 B: one sector of a 4 KiB block left old */
	bt_fill(b, bs, 7, 5);
	memcpy(b + 3584, o + 3584, 512);
	CHECK_EQ(block_check(b, bs, 7, 0, 9, &g), V_TORN);
	/* one flipped bit */
	bt_fill(b, bs, 7, 5);
	b[100] ^= 1;
	CHECK_EQ(block_check(b, bs, 7, 0, 9, &g), V_TORN);
	/* zeroes: fine only when nothing was durable */
	memset(b, 0, bs);
	CHECK_EQ(block_check(b, bs, 7, 0, 9, &g), V_OK);
	CHECK_EQ(block_check(b, bs, 7, 1, 9, &g), V_STALE);
	return 0;
}

int main(int argc, char **argv) { return check_main(argc, argv); }
