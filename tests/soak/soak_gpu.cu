/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * GPU fault soak: rounds of GPU kernels whose threads read and write
 * self-describing blocks (tests/harness/blocktag.h) over several GPU queue
 * pairs, checked against a model of what each block must hold, while the
 * host injects a fault into the emulator at a random moment of the round:
 *
 *   MEDIA   an LBA range fails reads (and, half of the time, writes); no
 *           recovery: the failing commands report the media status
 *   DROP    1-3 commands are swallowed: their threads time out, the queue
 *           pair is marked broken; the host recovers (abort, queues deleted
 *           and re-created in place)
 *   SLOW    every command takes longer than the kernels' timeout: they time
 *           out; the host recovers
 *   CFS     controller fatal status: the host recovers with a reset
 *   REMOVE  surprise removal, then the device comes back (RETURN): the host
 *           sees -ENODEV, then recovers with a reset
 *
 * Per round: up to ROUND_CMDS commands on distinct 4-block cells (so no two
 * commands of a round touch one block), half writes of a new generation,
 * half reads; reads into host memory (Tier 1) or GPU memory (Tier 2) in
 * turn; thread-level (gpunvme_dev_rw) and warp-batched
 * (gpunvme_dev_rw_lanes) submission in turn.
 * Judgement: a read that succeeds must return, for every block, its last
 * acknowledged write or one of the writes that failed since (which then
 * becomes the model); a write that succeeds is acknowledged; every error
 * must be one the round's fault explains. After a recovery the read buffers
 * are poisoned and must stay so (nothing lands after the recovery), and
 * every block with an uncertain content is read back on a CPU queue pair
 * and resolved. A kernel that does not return within its timeout plus
 * HANG_SLACK is a hang. At the end every block is read and checked.
 *
 *   soak_gpu [--seconds N] [--seed S] [--queues Q]
 * Prints the figures; exits non-zero on a mismatch, hang, unexplained
 * error or failed recovery; 77 without a GPU.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "blocktag.h"
#include "ctrl/ctrl_emu.h" /* the emulator behind the controller */
#include "gpunvme/device.cuh"
#include "gpunvme/emu.h"
#include "gpunvme/gpu.h"
#include "gpunvme/gpunvme.h"

#define BS 4096u
#define NCELLS 2048u          /* cells of CELL blocks: 32 MiB of blocks */
#define CELL 4u
#define NBLK (NCELLS * CELL)
#define ROUND_CMDS 512u       /* commands per round */
#define DEPTH 64u
#define MAYBE_MAX 6u
#define TMO_NS 200000000ull   /* the kernels' timeout: 0.2 s */
#define HANG_SLACK_MS 5000u
#define SLOW_US 400000u       /* SLOW: 0.4 s more per command, twice the timeout */

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void sleep_us(uint64_t us)
{
	struct timespec ts = { (time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* ---- the model ------------------------------------------------------------ */

struct blk {
	uint64_t gen;               /* last acknowledged write (0: never written) */
	uint64_t maybe[MAYBE_MAX];  /* writes that failed since: any may be there */
	uint32_t nmaybe;
};

static struct blk model[NBLK];

static struct {
	unsigned long commands, rounds, mismatches, hangs, unexplained;
	unsigned long faults[8];
	unsigned long recoveries, resets, aborts_sent, aborts_ok, stuck;
	unsigned long late_writes, resolved;
	uint64_t longest_recovery_us;
} S;

/* Where the main thread is, for the watchdog: every host wait below is
 * meant to be bounded, and one that is not must name itself rather than
 * leave a silent process for ctest to kill. */
static const char *volatile phase = "setup";
static volatile unsigned long cur_round;

static void *watchdog(void *arg)
{
	const unsigned limit = *(const unsigned *)arg;
	sleep(limit);
	fprintf(stderr, "soak_gpu: WATCHDOG: still running %u s after the start, in round %lu at \"%s\"\n", limit,
		cur_round, phase);
	/* every thread's name and where the kernel has it waiting (the
	 * emulator's workers, CUDA's, ours) */
	fflush(stderr);
	if (system("for t in /proc/$PPID/task/*; do echo \"  thread $(cat $t/comm): $(cat $t/wchan 2>/dev/null)\"; "
		   "head -4 $t/stack 2>/dev/null | sed 's/^/    /'; done >&2") != 0)
		fprintf(stderr, "soak_gpu: (no thread list)\n");
	fflush(stderr);
	_exit(3);
}

static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("soak_gpu: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* Block p read at lba: right if it holds the acknowledged generation or one
 * of the maybe ones (which then becomes the model). */
static bool check_block(uint64_t lba, const uint8_t *p, const char *where)
{
	struct blk *b = &model[lba];
	uint64_t gen;
	enum bt_kind k = bt_parse(p, BS, lba, &gen);
	if (k == BT_WHOLE) {
		if (gen == b->gen) {
			if (b->nmaybe)
				S.resolved++;
			b->nmaybe = 0;
			return true;
		}
		for (uint32_t i = 0; i < b->nmaybe; i++) {
			if (b->maybe[i] == gen) {
				b->gen = gen;
				b->nmaybe = 0;
				S.resolved++;
				return true;
			}
		}
	}
	S.mismatches++;
	if (S.mismatches <= 20)
		report("MISMATCH %s: lba %" PRIu64 " holds %s gen %" PRIu64 ", model gen %" PRIu64 " (+%u maybe)", where,
		       lba, k == BT_WHOLE ? "whole" : k == BT_TORN ? "torn" : k == BT_FOREIGN ? "foreign" : "garbage",
		       gen, b->gen, b->nmaybe);
	return false;
}

/* ---- a round ----------------------------------------------------------------- */

struct cmd {
	uint64_t slba;
	uint64_t off;       /* byte offset in its buffer */
	uint32_t nlb;
	uint8_t opc;
	uint8_t pad[3];
};

/* Thread i does command i on queue pair i % nq. */
__global__ void k_thread(struct gpunvme_dev_queues q, struct gpunvme_dev_buf rb, struct gpunvme_dev_buf wb,
			 const struct cmd *c, unsigned n, int *st, uint64_t tmo)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	const struct gpunvme_dev_buf *b = c[i].opc == GPUNVME_CMD_WRITE ? &wb : &rb;
	st[i] = gpunvme_dev_rw(&q, i % q.nq, c[i].opc, c[i].slba, c[i].nlb, b, c[i].off, tmo);
}

/* Warp batches: warp w on queue pair w % nq, lane l command w * 32 + l. */
__global__ void k_lanes(struct gpunvme_dev_queues q, struct gpunvme_dev_buf rb, struct gpunvme_dev_buf wb,
			const struct cmd *c, unsigned n, int *st, uint64_t tmo)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x, w = i / 32;
	bool active = i < n;
	struct cmd m = active ? c[i] : c[0];
	const struct gpunvme_dev_buf *b = m.opc == GPUNVME_CMD_WRITE ? &wb : &rb;
	int rc = gpunvme_dev_rw_lanes(&q, w % q.nq, m.opc, m.slba, m.nlb, b, m.off, active, tmo);
	if (active)
		st[i] = rc;
}

enum fault { F_NONE, F_MEDIA, F_DROP, F_SLOW, F_CFS, F_REMOVE, F_NKINDS };
static const char *const fname[] = { "none", "media", "drop", "slow", "cfs", "remove+return" };

struct soak {
	struct gpunvme_ctrl *c;
	struct gpunvme_emu *emu;
	struct gpunvme_qpair *qp;        /* CPU: resolving uncertain blocks */
	uint8_t *vbuf;                   /* its DMA buffer, one cell */
	struct gpunvme_gpu_queues *g;
	uint8_t *rhost, *whost;          /* Tier 1 read and write buffers */
	void *rvram;                     /* Tier 2 read buffer */
	struct gpunvme_gpu_buf *rb1, *rb2, *wb;
	size_t blen;
	struct cmd *hc, *dc;
	int *st;
	uint8_t *back;
	cudaStream_t s;
	uint64_t gen;
	/* the round's media fault */
	uint64_t m_slba, m_nlb;
	bool m_writes;
	enum fault prev_fault;           /* the previous round's, for reports */
};

static enum fault last_fault;

static enum fault pick_fault(uint64_t *rng)
{
	unsigned x = (unsigned)(rnd(rng) % 100);
	return x < 45 ? F_NONE : x < 65 ? F_MEDIA : x < 77 ? F_DROP : x < 85 ? F_SLOW : x < 93 ? F_CFS : F_REMOVE;
}

static int inject(struct soak *k, enum fault f, uint64_t *rng)
{
	struct gpunvme_emu_fault e;
	memset(&e, 0, sizeof(e));
	switch (f) {
	case F_MEDIA:
		e.kind = GPUNVME_EMU_FAULT_MEDIA;
		e.nsid = 1;
		e.nlb = k->m_nlb = 1 + rnd(rng) % 64;
		e.slba = k->m_slba = rnd(rng) % (NBLK - e.nlb);
		e.writes = k->m_writes = rnd(rng) & 1;
		break;
	case F_DROP:
		e.kind = GPUNVME_EMU_FAULT_DROP;
		e.sqid = GPUNVME_EMU_SQID_ANY;
		e.count = 1 + (uint32_t)(rnd(rng) % 3);
		break;
	case F_SLOW:
		e.kind = GPUNVME_EMU_FAULT_SLOW;
		e.latency_us = SLOW_US;
		break;
	case F_CFS:
		e.kind = GPUNVME_EMU_FAULT_CFS;
		break;
	case F_REMOVE:
		e.kind = GPUNVME_EMU_FAULT_REMOVE;
		break;
	default:
		return 0;
	}
	int rc = gpunvme_emu_inject(k->emu, &e);
	if (rc)
		report("inject %s: %d", fname[f], rc);
	return rc;
}

/* Is status st of command m explained by the round's fault f? */
static bool explained(const struct soak *k, enum fault f, const struct cmd *m, int st)
{
	if (f == F_MEDIA) {
		bool hit = m->slba < k->m_slba + k->m_nlb && k->m_slba < m->slba + m->nlb;
		if (m->opc == GPUNVME_CMD_READ)
			return hit && st == GPUNVME_SC_UNRECOVERED_READ;
		return hit && k->m_writes && st == GPUNVME_SC_WRITE_FAULT;
	}
	if (f == F_DROP || f == F_SLOW)
		return st == GPUNVME_DEV_ETIMEDOUT || st == GPUNVME_DEV_EIO;
	if (f == F_CFS)
		return st == GPUNVME_DEV_ETIMEDOUT || st == GPUNVME_DEV_EIO;
	if (f == F_REMOVE)
		return st == GPUNVME_DEV_ETIMEDOUT || st == GPUNVME_DEV_EIO || st == GPUNVME_DEV_ENODEV;
	return false;
}

/* Read every block of cells [c0, c1) on the CPU queue pair and check it. */
static bool verify_cells(struct soak *k, uint32_t c0, uint32_t c1, const char *where)
{
	for (uint32_t cell = c0; cell < c1; cell++) {
		uint16_t status = 0;
		phase = "verify: CPU read";
		int rc = gpunvme_read_sync(k->qp, 1, k->vbuf, (uint64_t)cell * CELL, CELL, &status);
		if (rc) {
			report("verify read of cell %u: %d status 0x%x (%s)", cell, rc, status, gpunvme_last_error());
			return false;
		}
		for (uint32_t j = 0; j < CELL; j++)
			check_block((uint64_t)cell * CELL + j, k->vbuf + j * BS, where);
	}
	return true;
}

static bool recover(struct soak *k, enum fault f)
{
	uint64_t t0 = now_us();
	struct gpunvme_gpu_health h;
	phase = "recover: gpunvme_gpu_queues_check";
	int rc = gpunvme_gpu_queues_check(k->g, &h);
	if (f == F_REMOVE) {
		if (rc != -ENODEV) {
			report("remove: check said %d, want -ENODEV", rc);
			return false;
		}
		struct gpunvme_emu_fault e;
		memset(&e, 0, sizeof(e));
		e.kind = GPUNVME_EMU_FAULT_RETURN;
		phase = "recover: inject return";
		if (gpunvme_emu_inject(k->emu, &e)) {
			report("the device did not come back");
			return false;
		}
	} else if (rc == 0 && f != F_SLOW) {
		/* DROP of a command nobody waited for long enough, or CFS
		 * after every command finished: recover all the same */
	}
	struct gpunvme_gpu_recovery r;
	phase = "recover: gpunvme_gpu_queues_recover";
	if ((rc = gpunvme_gpu_queues_recover(k->g, 0, &r))) {
		report("RECOVERY FAILED after %s: %d (%s)", fname[f], rc, gpunvme_last_error());
		return false;
	}
	gpunvme_emu_clear_faults(k->emu);
	uint64_t us = now_us() - t0;
	S.recoveries++;
	S.resets += r.reset;
	S.aborts_sent += r.abort_sent;
	S.aborts_ok += r.aborted;
	S.stuck += r.stuck;
	if (us > S.longest_recovery_us)
		S.longest_recovery_us = us;
	/* nothing may land after the recovery: poison, wait, look */
	phase = "recover: poison and look";
	memset(k->rhost, 0xa5, k->blen);
	/* in place before the wait (the legacy stream's own work only: a
	 * late copy still queued must stay visible) */
	if (cudaMemset(k->rvram, 0xa5, k->blen) != cudaSuccess || cudaStreamSynchronize(0) != cudaSuccess)
		return false;
	sleep_us(f == F_SLOW ? SLOW_US + 20000u : 20000u);
	if (cudaMemcpy(k->back, k->rvram, k->blen, cudaMemcpyDeviceToHost) != cudaSuccess)
		return false;
	for (size_t i = 0; i < k->blen; i++) {
		if (k->rhost[i] != 0xa5 || k->back[i] != 0xa5) {
			S.late_writes++;
			S.mismatches++;
			report("LATE WRITE after %s: read buffer byte %zu (%s) changed after the recovery", fname[f], i,
			       k->rhost[i] != 0xa5 ? "tier 1" : "tier 2");
			break;
		}
	}
	return true;
}

/* Uncertain blocks: read back on the CPU path and resolved. */
static bool resolve_uncertain(struct soak *k, bool all)
{
	for (uint32_t cell = 0; cell < NCELLS; cell++) {
		bool need = false;
		for (uint32_t j = 0; j < CELL; j++)
			need |= model[cell * CELL + j].nmaybe >= (all ? 1u : MAYBE_MAX - 1u);
		if (need && !verify_cells(k, cell, cell + 1, "resolve"))
			return false;
	}
	return true;
}

static bool round_run(struct soak *k, uint64_t *rng)
{
	/* distinct cells: a random stride through them */
	const uint32_t n = ROUND_CMDS, start = (uint32_t)(rnd(rng) % NCELLS);
	uint32_t stride = (uint32_t)(rnd(rng) % NCELLS) | 1u; /* odd: coprime with NCELLS (a power of two) */
	const bool tier2 = rnd(rng) & 1, lanes = rnd(rng) & 1;
	uint64_t wgen[ROUND_CMDS];
	for (uint32_t i = 0; i < n; i++) {
		struct cmd *m = &k->hc[i];
		uint32_t cell = (start + i * stride) % NCELLS;
		uint32_t first = (uint32_t)(rnd(rng) % CELL);
		m->nlb = 1 + (uint32_t)(rnd(rng) % (CELL - first));
		m->slba = (uint64_t)cell * CELL + first;
		m->off = (uint64_t)i * CELL * BS;
		m->opc = rnd(rng) & 1 ? GPUNVME_CMD_WRITE : GPUNVME_CMD_READ;
		wgen[i] = 0;
		if (m->opc == GPUNVME_CMD_WRITE) {
			wgen[i] = ++k->gen;
			for (uint32_t j = 0; j < m->nlb; j++)
				bt_fill(k->whost + m->off + j * BS, BS, m->slba + j, wgen[i]);
		}
	}
	/* on the kernel's stream: cudaMemcpy from pageable memory may return
	 * before its copy lands, and the legacy stream it uses does not order
	 * the non-blocking k->s (the host buffer is staged before return) */
	cur_round = S.rounds;
	phase = "round: upload";
	if (cudaMemcpyAsync(k->dc, k->hc, n * sizeof(*k->dc), cudaMemcpyHostToDevice, k->s) != cudaSuccess)
		return false;
	const enum fault f = pick_fault(rng);
	last_fault = f;
	S.faults[f]++;
	if (f == F_MEDIA && inject(k, f, rng)) /* before: it must be there for the judgement */
		return false;
	memset(k->st, 0x7f, n * sizeof(int));
	const struct gpunvme_dev_buf rb = *gpunvme_gpu_buf_desc(tier2 ? k->rb2 : k->rb1), wb = *gpunvme_gpu_buf_desc(k->wb);
	const uint64_t t0 = now_us();
	if (lanes)
		k_lanes<<<(n + 127) / 128, 128, 0, k->s>>>(*gpunvme_gpu_queues_desc(k->g), rb, wb, k->dc, n, k->st, TMO_NS);
	else
		k_thread<<<(n + 127) / 128, 128, 0, k->s>>>(*gpunvme_gpu_queues_desc(k->g), rb, wb, k->dc, n, k->st, TMO_NS);
	if (cudaGetLastError() != cudaSuccess)
		return false;
	/* the other faults strike while commands are in flight */
	phase = "round: inject";
	if (f != F_NONE && f != F_MEDIA) {
		sleep_us(rnd(rng) % 3000);
		if (inject(k, f, rng))
			return false;
	}
	/* bounded wait for the kernel: every device wait ends at its deadline */
	phase = "round: kernel";
	cudaError_t ce;
	while ((ce = cudaStreamQuery(k->s)) == cudaErrorNotReady) {
		if (now_us() - t0 > TMO_NS / 1000 * 4 + HANG_SLACK_MS * 1000ull) {
			S.hangs++;
			report("HANG: a %s kernel did not return within %u ms of its timeout (fault %s)",
			       lanes ? "warp-batch" : "thread", HANG_SLACK_MS, fname[f]);
			return false;
		}
		sleep_us(200);
	}
	if (ce != cudaSuccess) {
		/* what the round was doing, for the post-mortem (a sticky
		 * error ends the run: nothing after it can be trusted) */
		report("kernel: %s (round %lu, %s kernel, tier %d, fault %s, %.1f ms after the launch)",
		       cudaGetErrorString(ce), S.rounds, lanes ? "warp-batch" : "thread", tier2 ? 2 : 1, fname[f],
		       (double)(now_us() - t0) / 1000.0);
		return false;
	}
	const double kernel_ms = (double)(now_us() - t0) / 1000.0;
	S.rounds++;
	S.commands += n;
	phase = "round: copy back";
	if (tier2 && cudaMemcpy(k->back, k->rvram, k->blen, cudaMemcpyDeviceToHost) != cudaSuccess)
		return false;
	phase = "round: judge";
	const uint8_t *rd = tier2 ? k->back : k->rhost;
	bool any_fail = false;
	unsigned nfail = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct cmd *m = &k->hc[i];
		int st = k->st[i];
		if (st == 0x7f7f7f7f) {
			S.unexplained++;
			report("command %u: no status written", i);
			continue;
		}
		if (st == 0) {
			if (m->opc == GPUNVME_CMD_WRITE) {
				for (uint32_t j = 0; j < m->nlb; j++) {
					model[m->slba + j].gen = wgen[i];
					model[m->slba + j].nmaybe = 0;
				}
			} else {
				for (uint32_t j = 0; j < m->nlb; j++)
					check_block(m->slba + j, rd + m->off + j * BS, tier2 ? "gpu read tier 2" : "gpu read tier 1");
			}
			continue;
		}
		any_fail = true;
		nfail++;
		if (!explained(k, f, m, st)) {
			S.unexplained++;
			if (S.unexplained <= 20)
				report("UNEXPLAINED: %s of lba %" PRIu64 "+%u failed with %d (%s), fault %s",
				       m->opc == GPUNVME_CMD_WRITE ? "write" : "read", m->slba, m->nlb, st,
				       gpunvme_gpu_status_str(st), fname[f]);
		}
		if (m->opc == GPUNVME_CMD_WRITE) {
			for (uint32_t j = 0; j < m->nlb; j++) {
				struct blk *b = &model[m->slba + j];
				if (b->nmaybe < MAYBE_MAX)
					b->maybe[b->nmaybe++] = wgen[i];
			}
		}
	}
	if (f == F_MEDIA) {
		gpunvme_emu_clear_faults(k->emu);
		return resolve_uncertain(k, false);
	}
	if (f == F_NONE) {
		if (!any_fail)
			return true;
		/* counted as unexplained above; say what the round was, then
		 * recover as after a fault, so one stall does not turn every
		 * later round into failures of a broken queue */
		report("round %lu (no fault; the previous round's was %s): %u of %u commands failed, the %s kernel "
		       "took %.1f ms, tier %d",
		       S.rounds - 1, fname[k->prev_fault], nfail, n, lanes ? "warp-batch" : "thread", kernel_ms,
		       tier2 ? 2 : 1);
		return recover(k, f) && resolve_uncertain(k, true);
	}
	/* DROP, SLOW, CFS, REMOVE: recover, whatever the kernel saw (the
	 * fault may have struck after the last command) */
	return recover(k, f) && resolve_uncertain(k, true);
}

static int setup(struct soak *k, unsigned nq)
{
	struct gpunvme_opts o;
	gpunvme_opts_init(&o);
	o.nr_io_queues = nq + 1;
	/* RAM namespace, 2 workers: a small SSD that answers at once */
	if (gpunvme_open("emu:ram:64M?lbads=12&workers=2", &o, &k->c)) {
		report("open: %s", gpunvme_last_error());
		return 1;
	}
	k->emu = gpunvme_ctrl_emu(k->c);
	k->blen = (size_t)ROUND_CMDS * CELL * BS;
	if (gpunvme_qpair_create(k->c, 16, &k->qp) || !(k->vbuf = (uint8_t *)gpunvme_dma_alloc(k->c, CELL * BS)) ||
	    gpunvme_gpu_queues_create(k->c, 1, nq, DEPTH, &k->g) ||
	    !(k->rhost = (uint8_t *)gpunvme_dma_alloc(k->c, k->blen)) ||
	    !(k->whost = (uint8_t *)gpunvme_dma_alloc(k->c, k->blen)) ||
	    gpunvme_gpu_buf_host(k->g, k->rhost, k->blen, &k->rb1, NULL) ||
	    gpunvme_gpu_buf_host(k->g, k->whost, k->blen, &k->wb, NULL) ||
	    gpunvme_gpu_buf_device(k->g, k->blen, &k->rb2, &k->rvram)) {
		report("setup: %s", gpunvme_last_error());
		return 1;
	}
	if (cudaMalloc(&k->dc, ROUND_CMDS * sizeof(*k->dc)) != cudaSuccess ||
	    cudaMallocManaged(&k->st, ROUND_CMDS * sizeof(int)) != cudaSuccess ||
	    cudaStreamCreateWithFlags(&k->s, cudaStreamNonBlocking) != cudaSuccess) {
		report("setup: CUDA allocation failed");
		return 1;
	}
	k->hc = (struct cmd *)calloc(ROUND_CMDS, sizeof(*k->hc));
	k->back = (uint8_t *)malloc(k->blen);
	return !k->hc || !k->back;
}

int main(int argc, char **argv)
{
	unsigned seconds = 60, nq = 4;
	uint64_t seed = 1;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = (unsigned)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			seed = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--queues") && i + 1 < argc)
			nq = (unsigned)strtoul(argv[++i], NULL, 0);
		else {
			fprintf(stderr, "usage: %s [--seconds N] [--seed S] [--queues Q (1..16)]\n", argv[0]);
			return 2;
		}
	}
	if (nq < 1 || nq > 16 || seconds < 1) {
		fprintf(stderr, "%s: --queues must be 1..16 and --seconds at least 1\n", argv[0]);
		return 2;
	}
	int ndev = 0;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		printf("soak_gpu: no CUDA device: skipped\n");
		return 77;
	}
	struct soak k;
	memset(&k, 0, sizeof(k));
	if (setup(&k, nq))
		return 1;
	uint64_t rng = seed;
	const uint64_t end = now_us() + (uint64_t)seconds * 1000000u;
	bool ok = true;
	/* the watchdog: the run plus room for a last round's recovery and the
	 * final verification, far inside ctest's timeout */
	static unsigned limit;
	limit = seconds + 60;
	pthread_t wd;
	if (pthread_create(&wd, NULL, watchdog, &limit) == 0)
		pthread_detach(wd);
	while (ok && now_us() < end) {
		ok = round_run(&k, &rng);
		k.prev_fault = last_fault;
	}
	/* at the end every block, on the CPU path */
	if (ok)
		ok = verify_cells(&k, 0, NCELLS, "final");
	unsigned long verified = 0;
	for (uint32_t i = 0; i < NBLK; i++)
		verified += model[i].gen != 0;
	printf("soak_gpu: %u s, seed %" PRIu64 ", %u GPU queue pairs of %u, %u-command rounds\n", seconds, seed, nq, DEPTH,
	       ROUND_CMDS);
	printf("commands: %lu in %lu rounds\n", S.commands, S.rounds);
	printf("faults: media=%lu drop=%lu slow=%lu cfs=%lu remove+return=%lu (no fault: %lu rounds)\n",
	       S.faults[F_MEDIA], S.faults[F_DROP], S.faults[F_SLOW], S.faults[F_CFS], S.faults[F_REMOVE],
	       S.faults[F_NONE]);
	printf("recoveries: %lu (controller resets %lu; stuck commands %lu, aborts sent %lu, honoured %lu)\n",
	       S.recoveries, S.resets, S.stuck, S.aborts_sent, S.aborts_ok);
	printf("longest recovery: %.1f ms\n", S.longest_recovery_us / 1000.0);
	printf("blocks written at least once: %lu of %u; uncertain blocks resolved: %lu\n", verified, NBLK, S.resolved);
	printf("late writes after recovery: %lu\n", S.late_writes);
	printf("unexplained errors: %lu\n", S.unexplained);
	printf("mismatches: %lu\n", S.mismatches);
	printf("hangs: %lu\n", S.hangs);
	bool pass = ok && !S.mismatches && !S.hangs && !S.unexplained;
	printf("result: %s\n", pass ? "PASS" : "FAIL");
	if (S.hangs)
		_exit(1); /* a kernel may still run: do not tear down under it */
	gpunvme_gpu_buf_free(k.rb1);
	gpunvme_gpu_buf_free(k.rb2);
	gpunvme_gpu_buf_free(k.wb);
	gpunvme_gpu_queues_destroy(k.g);
	gpunvme_qpair_destroy(k.qp);
	gpunvme_close(k.c);
	return pass ? 0 : 1;
}
