/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libFuzzer target for the NVMe controller emulator (src/emu).
 *
 * The emulator runs threadless (config.workers = 0) so every input is
 * deterministic: the harness plays a hostile host, the input is a stream of
 * operations (register writes, raw SQE/arena bytes, doorbells, a helper that
 * enables the controller with admin queues in the arena, helpers that build
 * admin and I/O commands, fault injection, gpunvme_emu_poll()). Whatever the
 * host does, the controller must only touch memory in its DMA address table,
 * never leak, never hang. Guard pages (PROT_NONE) surround the arena and a
 * second, odd-sized heap region is mapped right after it, so an access even
 * one byte outside a mapped region faults (SEGV) or trips ASan.
 *
 * The host side is the by-hand bring-up the tests share
 * (tests/harness/emu_bringup.h): its CAP/BAR0 reading, its bounded CSTS
 * waits (run as controller passes: deterministic), its Create I/O CQ/SQ
 * commands, and the queue core's struct gpunvme_ring for every SQ and CQ
 * walk. Register values stay raw register writes wherever they are the fuzz
 * input: OP_REG32, OP_DOORBELL, OP_CC, and op_enable, whose AQA/ASQ/ACQ/CC
 * values the input bends to break the rules of enable (gpunvme_admin_enable
 * writes only valid ones, and one queue depth for both admin queues).
 *
 * Input format: byte 0 picks controller variations (DSTRD, MDTS, VWC); then
 * operations, each an opcode byte followed by its arguments (little-endian);
 * a truncated argument reads as zero. tests/fuzz/gen_corpus.py writes seeds
 * in this format; keep the two in sync. FUZZ_EMU_TRACE=1 in the environment
 * prints every completion the harness reaps, to check what a seed reaches.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "emu_bringup.h"
#include "gpunvme/emu.h"
#include "gpunvme/spec/nvme.h"
#include "gpunvme/spec/queue.h"

#define ARENA_IOVA   0x100000ull
#define ARENA_SIZE   (256u * 1024u)
#define HEAP_IOVA    (ARENA_IOVA + ARENA_SIZE)  /* directly adjacent */
#define HEAP_SIZE    3000u                       /* odd: ASan redzone right after */
#define PAGE         4096u
#define MAX_POLLS    64                          /* work bound per input */
#define MAX_READY_POLLS 4
#define NQ           5                           /* admin + 4 I/O queue pairs */
#define MQES         63                          /* CAP.MQES, 0's based */
#define ADM_SQ_OFF   0x0000u   /* up to 256 entries (16 KiB) */
#define ADM_CQ_OFF   0x4000u   /* up to 256 entries (4 KiB) */
#define IOQ_OFF      0x8000u   /* queue q: SQ at +(q-1)*16K, CQ 8 KiB later */
#define DATA_OFF     0x20000u  /* 32 data pages */

/* Operation codes (input byte % OP_COUNT). */
enum {
	OP_REG32 = 0,     /* u16 sel (bit 15: register (sel & 15) * 4), u32 val */
	OP_SQE_RAW,       /* u16 slot, 64 bytes: arena + slot*64 */
	OP_BYTES,         /* u16 off, u8 len, len bytes */
	OP_DOORBELL,      /* u8 sel (qid = sel >> 1, CQ when bit 0), u16 val */
	OP_ENABLE,        /* u8 asqs, u8 acqs, u8 flags (0: valid; see op_enable) */
	OP_ADMIN,         /* u8 opc, u8 nsid, u32 cdw10, u32 cdw11, u8 prp1, u8 prp2 */
	OP_IO,            /* u8 qid, u8 opc, u8 nsid, u16 slba, u16 nlb, u8 prp1, u8 prp2, u8 ctl */
	OP_CREATE_QP,     /* u8 qid, u8 qsize, u8 flags */
	OP_CONSUME,       /* u8 qid */
	OP_POLL,          /* u8 n */
	OP_FAULT,         /* u8 kind, u8 a, u16 b, u8 c */
	OP_CC,            /* u8 what: disable / normal / abrupt shutdown */
	OP_COUNT
};

struct fz {
	struct eb_ctrl c;   /* emulator, BAR0, doorbell stride; waits run poll_once */
	int polls;
	/* The host's view of queue q. An SQ and its CQ get a ring each, as the
	 * admin queue's two sizes are separate inputs (AQA.ASQS, AQA.ACQS) and
	 * a ring has one depth: sq[q] is used for its submission half only,
	 * cq[q] for its completion half. */
	struct gpunvme_ring sq[NQ], cq[NQ];
	uint16_t next_cid;
	const uint8_t *p, *end;
};

static uint8_t *g_arena;   /* ARENA_SIZE bytes between two guard pages */
static int g_trace;        /* FUZZ_EMU_TRACE=1: print every CQE reaped (seed checks) */

static void arena_setup(void)
{
	/* Guard page, arena, guard page: the guards catch a controller that
	 * walks off either end of the region it was given. */
	uint8_t *m = mmap(NULL, ARENA_SIZE + 2 * PAGE, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		perror("mmap");
		abort();
	}
	if (mprotect(m, PAGE, PROT_NONE) || mprotect(m + PAGE + ARENA_SIZE, PAGE, PROT_NONE)) {
		perror("mprotect");
		abort();
	}
	g_arena = m + PAGE;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	arena_setup();
	g_trace = getenv("FUZZ_EMU_TRACE") != NULL;
	return 0;
}

/* ---- input decoding ------------------------------------------------------ */

static uint8_t u8(struct fz *f)
{
	return f->p < f->end ? *f->p++ : 0;
}

static uint16_t u16(struct fz *f)
{
	uint16_t v = u8(f);
	return (uint16_t)(v | (uint16_t)u8(f) << 8);
}

static uint32_t u32(struct fz *f)
{
	uint32_t v = u16(f);
	return v | (uint32_t)u16(f) << 16;
}

/* ---- host side primitives ------------------------------------------------ */

/* BAR0 is shared memory the emulator polls; plain atomic stores with release
 * order, as a driver does for MMIO after filling an SQ (§4.1 / emu.h). */
static void reg_wr(struct fz *f, uint32_t off, uint32_t v)
{
	if (off + 4 > f->c.bar_size)
		return;
	eb_wr32(&f->c, off, v);
}

static uint32_t reg_rd(struct fz *f, uint32_t off)
{
	if (off + 4 > f->c.bar_size)
		return 0xffffffffu;
	return eb_rd32(&f->c, off);
}

static int poll_once(struct fz *f)
{
	if (f->polls >= MAX_POLLS)
		return -1;
	f->polls++;
	int r = gpunvme_emu_poll(f->c.emu);
	if (r < 0) {
		fprintf(stderr, "gpunvme_emu_poll: %d\n", r);
		abort();
	}
	return r;
}

/* eb_ctrl's poll hook: the waits of emu_bringup.c spend this input's poll
 * budget like everything else. */
static int fz_poll(void *ctx)
{
	return poll_once((struct fz *)ctx);
}

/* An address for a data pointer, picked by one input byte: mostly aligned
 * data pages, sometimes unaligned, past the arena end, unmapped, or inside
 * queue memory, so PRP validation (§4.3) sees every kind of pointer. */
static uint64_t pick_addr(uint8_t sel)
{
	if (sel < 0x80)
		return ARENA_IOVA + DATA_OFF + (uint64_t)(sel % 32) * PAGE;
	if (sel < 0xc0)
		return ARENA_IOVA + DATA_OFF + (uint64_t)(sel & 0x3f) * 72;
	if (sel < 0xe0)  /* last bytes of the arena: transfers cross into HEAP */
		return HEAP_IOVA - (uint64_t)(sel & 0x1f) * 8;
	switch (sel) {
	case 0xe0: return 0;
	case 0xe1: return ARENA_IOVA - 8;
	case 0xe2: return ~0ull - PAGE + 1;
	case 0xe3: return HEAP_IOVA;
	case 0xe4: return HEAP_IOVA + HEAP_SIZE - 1;
	case 0xe5: return HEAP_IOVA + 0x1000;   /* inside the heap region, page aligned */
	case 0xe6: return ARENA_IOVA + ADM_SQ_OFF;
	case 0xe7: return ARENA_IOVA + ADM_CQ_OFF;
	case 0xe8: return ARENA_IOVA + IOQ_OFF;
	case 0xe9: return ARENA_IOVA + ARENA_SIZE - PAGE;
	case 0xea: return 1ull << 63;
	default:   return ARENA_IOVA + DATA_OFF + (uint64_t)(sel & 0xf) * 2 * PAGE + 0x800;
	}
}

/* Data pages 28, 29 and 30 start out as PRP lists (§4.3): 511 entries
 * pointing at data pages 0..27, the last entry chaining to the next list
 * page, and page 28 chains back to 30, a loop. A large transfer with PRP2 =
 * page 30 walks the chain; the controller must stop when the length runs
 * out, however the pages link. */
static void prefill_prp_lists(void)
{
	static const uint32_t next[3] = {30, 28, 29};  /* for pages 28, 29, 30 */

	for (uint32_t k = 0; k < 3; k++) {
		uint64_t *list = (uint64_t *)(void *)(g_arena + DATA_OFF + (28 + k) * PAGE);
		for (uint32_t i = 0; i < PAGE / 8 - 1; i++)
			list[i] = ARENA_IOVA + DATA_OFF + (uint64_t)(i % 28) * PAGE;
		list[PAGE / 8 - 1] = ARENA_IOVA + DATA_OFF + (uint64_t)next[k] * PAGE;
	}
}

static uint32_t sq_off(uint32_t q)
{
	return q == 0 ? ADM_SQ_OFF : IOQ_OFF + (q - 1) * 0x4000u;
}

static uint32_t cq_off(uint32_t q)
{
	return q == 0 ? ADM_CQ_OFF : IOQ_OFF + (q - 1) * 0x4000u + 0x2000u;
}

/* The queue memory of q lies in the arena whatever its size (at most
 * MQES + 1 entries), so no ring walks out of it. */
_Static_assert(IOQ_OFF + (NQ - 2) * 0x4000u + 0x2000u + (MQES + 1) * 64u <= ARENA_SIZE &&
		       ADM_SQ_OFF + 256u * 64u <= ADM_CQ_OFF && ADM_CQ_OFF + 256u * 16u <= IOQ_OFF,
	       "queue memory outside the arena");

/* (Re)start the host's view of queue q: SQ of sq_depth, CQ of cq_depth
 * entries, tail and head 0, phase 1. The memory is left as it is: the
 * input may have written entries there already. */
static void host_queue(struct fz *f, uint32_t q, uint32_t sq_depth, uint32_t cq_depth)
{
	struct gpunvme_sqe *sq = (struct gpunvme_sqe *)(void *)(g_arena + sq_off(q));
	struct gpunvme_cqe *cq = (struct gpunvme_cqe *)(void *)(g_arena + cq_off(q));
	gpunvme_ring_init(&f->sq[q], sq, cq, f->c.bar, (uint16_t)q, f->c.dstrd, sq_depth);
	gpunvme_ring_init(&f->cq[q], sq, cq, f->c.bar, (uint16_t)q, f->c.dstrd, cq_depth);
}

/* Put one SQE at the tail of queue q and ring its doorbell (§4.1). */
static void submit(struct fz *f, uint32_t q, struct gpunvme_sqe *s)
{
	struct gpunvme_ring *r = &f->sq[q];

	s->cid = f->next_cid++;
	*gpunvme_ring_sqe(r) = *s;
	gpunvme_ring_sq_push(r);
	gpunvme_ring_sq_doorbell(r);
}

/* Reap completions of CQ q as a driver would (phase tag, §4.6), then write
 * the head doorbell once. Bounded by the queue size. */
static void consume(struct fz *f, uint32_t q)
{
	struct gpunvme_ring *r = &f->cq[q];
	uint32_t n = 0, dw3;

	while (n < r->depth && gpunvme_ring_cq_peek(r, &dw3)) {
		if (g_trace) {
			const struct gpunvme_cqe *c = &r->cq[r->cq_head];
			fprintf(stderr, "cq %u: sqid %u cid %u dw0 0x%x: %s\n", q, c->sqid,
				gpunvme_dw3_cid(dw3), c->dw0, gpunvme_status_str(gpunvme_dw3_status(dw3)));
		}
		gpunvme_ring_cq_pop(r);
		n++;
	}
	if (n)
		gpunvme_ring_cq_doorbell(r);
}

static void reset_host_queues(struct fz *f)
{
	for (uint32_t q = 0; q < NQ; q++)
		host_queue(f, q, MQES + 1, MQES + 1);
}

/* The driver bring-up of §7.6.1: CC.EN = 0, wait RDY = 0, program AQA/ASQ/
 * ACQ, CC.EN = 1, wait RDY = 1. Both waits are bounded by a few polls
 * (eb_wait_csts with max_polls = MAX_READY_POLLS). The register values are
 * the input's, valid or not: written raw, not by gpunvme_admin_enable. */
static void op_enable(struct fz *f)
{
	uint32_t asqs = u8(f), acqs = u8(f), flags = u8(f);
	/* flags = 0 is a valid configuration; each other bit breaks one rule
	 * that enable must check (§3.1.5, §7.6.1; docs/emulator.md "Enable
	 * fails ..."), so the fuzzer reaches every refusal path. */
	uint32_t mps = flags & 0x20 ? 5 : flags & 1;   /* 5: above CAP.MPSMAX */
	uint32_t iosqes = flags & 0x02 ? 7 : 6, iocqes = flags & 0x02 ? 3 : 4;
	uint32_t css = flags & 0x04 ? 7 : 0;
	uint64_t asq = ARENA_IOVA + ADM_SQ_OFF + (flags & 0x08 ? 0x40 : 0);
	uint64_t acq = ARENA_IOVA + ADM_CQ_OFF + (flags & 0x10 ? 0x10 : 0);
	uint32_t ams = flags & 0x80 ? 1 : 0;           /* WRR: CAP.AMS says no */

	if (flags & 0x40)
		asq = 0x80000000ull;                   /* not in the address table */

	reg_wr(f, GPUNVME_REG_CC, 0);
	(void)eb_wait_csts(&f->c, GPUNVME_CSTS_RDY, 0);
	reset_host_queues(f);
	memset(g_arena + ADM_CQ_OFF, 0, 0x1000);
	host_queue(f, 0, asqs + 1, acqs + 1);
	reg_wr(f, GPUNVME_REG_AQA, GPUNVME_AQA(asqs, acqs));
	reg_wr(f, GPUNVME_REG_ASQ, (uint32_t)asq);
	reg_wr(f, GPUNVME_REG_ASQ + 4, (uint32_t)(asq >> 32));
	reg_wr(f, GPUNVME_REG_ACQ, (uint32_t)acq);
	reg_wr(f, GPUNVME_REG_ACQ + 4, (uint32_t)(acq >> 32));
	reg_wr(f, GPUNVME_REG_CC, GPUNVME_CC_EN | css << GPUNVME_CC_CSS_SHIFT |
				  mps << GPUNVME_CC_MPS_SHIFT | ams << GPUNVME_CC_AMS_SHIFT |
				  iosqes << GPUNVME_CC_IOSQES_SHIFT | iocqes << GPUNVME_CC_IOCQES_SHIFT);
	(void)eb_wait_csts(&f->c, GPUNVME_CSTS_RDY, GPUNVME_CSTS_RDY); /* or CFS */
	if (g_trace)
		fprintf(stderr, "enable flags 0x%02x: CSTS 0x%x\n", flags, reg_rd(f, GPUNVME_REG_CSTS));
}

static void op_admin(struct fz *f)
{
	struct gpunvme_sqe s;

	memset(&s, 0, sizeof(s));
	s.opc = u8(f);
	uint8_t ns = u8(f);
	s.nsid = ns == 0xff ? GPUNVME_NSID_ALL : ns == 0xfe ? 0xfffffffeu : ns % 5;
	s.cdw[0] = u32(f);
	s.cdw[1] = u32(f);
	s.prp1 = pick_addr(u8(f));
	s.prp2 = pick_addr(u8(f));
	submit(f, 0, &s);
}

static void op_io(struct fz *f)
{
	struct gpunvme_sqe s;
	uint32_t q = u8(f) % NQ;

	memset(&s, 0, sizeof(s));
	s.opc = u8(f);
	uint8_t ns = u8(f);
	s.nsid = ns == 0xff ? GPUNVME_NSID_ALL : ns % 5;
	uint16_t slba = u16(f);
	/* Top bit: a huge SLBA to probe the LBA range check for overflow. */
	s.rw.slba = slba & 0x8000 ? ~0ull - (slba & 0x7fff) : slba;
	s.rw.nlb = u16(f);
	s.prp1 = pick_addr(u8(f));
	s.prp2 = pick_addr(u8(f));
	uint8_t ctl = u8(f);
	s.rw.control = (uint16_t)((ctl & 0xc0) << 8);   /* LR, FUA */
	s.flags = ctl & 0x03;                          /* FUSE */
	if (ctl & 0x08)
		s.flags |= 0x40;                         /* PSDT = SGL */
	if (s.opc == GPUNVME_CMD_DSM)
		s.dsm.nr = ctl >> 5, s.dsm.attr = GPUNVME_DSM_AD;
	submit(f, q, &s);
}

/* Create CQ q then SQ q at the harness' standard place (§5.3, §5.4): the
 * commands eb_create_qp sends, then bent by the input (offset base, PC,
 * interrupt vector, priority, the CQ the SQ names), without waiting. */
static void op_create_qp(struct fz *f)
{
	uint32_t q = 1 + u8(f) % (NQ - 1);
	uint32_t qsize = u8(f) % (MQES + 1);   /* 0's based; 0 is invalid */
	uint8_t fl = u8(f);
	struct gpunvme_sqe s;

	eb_sqe_create_cq(&s, (uint16_t)q, qsize + 1, ARENA_IOVA + cq_off(q) + (fl & 0x80 ? 0x10 : 0));
	if (fl & 0x40)
		s.queue.qflags = 0;
	s.queue.cqid_iv = fl & 0x20 ? 0xffff : 0;
	memset(g_arena + cq_off(q), 0, (qsize + 1) * 16);
	submit(f, 0, &s);

	eb_sqe_create_sq(&s, (uint16_t)q, qsize + 1, ARENA_IOVA + sq_off(q),
			 (uint16_t)(fl & 0x10 ? (q % (NQ - 1)) + 1 : q));
	s.queue.qflags |= (uint16_t)((fl & 3) << 1);
	submit(f, 0, &s);

	host_queue(f, q, qsize + 1, qsize + 1);
}

static void op_fault(struct fz *f)
{
	uint8_t kind = u8(f), a = u8(f);
	uint16_t b = u16(f);
	uint8_t c = u8(f);
	struct gpunvme_emu_fault ft;

	memset(&ft, 0, sizeof(ft));
	switch (kind % 8) {
	case 0: case 1:
		ft.kind = GPUNVME_EMU_FAULT_MEDIA;
		ft.nsid = a % 5;
		ft.slba = b;
		ft.nlb = (uint64_t)c + 1;
		ft.writes = kind & 1;
		break;
	case 2: case 3:
		ft.kind = GPUNVME_EMU_FAULT_DROP;
		ft.sqid = a == 0xff ? GPUNVME_EMU_SQID_ANY : a % NQ;
		ft.count = c % 4 + 1;
		break;
	case 4:
		ft.kind = GPUNVME_EMU_FAULT_CFS;
		break;
	case 5:
		/* Removal ends all processing; only take it on a specific byte
		 * so most inputs keep exploring live paths. */
		if (a != 0x5a)
			return;
		ft.kind = GPUNVME_EMU_FAULT_REMOVE;
		break;
	case 6:
		gpunvme_emu_clear_faults(f->c.emu);
		return;
	default:
		ft.kind = (enum gpunvme_emu_fault_kind)(a % 8);  /* maybe invalid */
		break;
	}
	(void)gpunvme_emu_inject(f->c.emu, &ft);
}

static void op_cc(struct fz *f)
{
	uint32_t cc = reg_rd(f, GPUNVME_REG_CC);

	switch (u8(f) % 4) {
	case 0: cc &= ~GPUNVME_CC_EN; break;
	case 1: cc = (cc & ~GPUNVME_CC_SHN_MASK) | GPUNVME_CC_SHN_NORMAL << GPUNVME_CC_SHN_SHIFT; break;
	case 2: cc = (cc & ~GPUNVME_CC_SHN_MASK) | GPUNVME_CC_SHN_ABRUPT << GPUNVME_CC_SHN_SHIFT; break;
	default: cc |= GPUNVME_CC_EN; break;
	}
	reg_wr(f, GPUNVME_REG_CC, cc);
}

static void run_ops(struct fz *f)
{
	/* One op per loop; the input length and MAX_POLLS bound the work. */
	while (f->p < f->end) {
		switch (u8(f) % OP_COUNT) {
		case OP_REG32: {
			/* Bit 15 set: one of the 16 controller registers (§3.1),
			 * else any dword of BAR0, mostly doorbells. */
			uint16_t sel = u16(f);
			uint32_t off = sel & 0x8000 ? (sel & 0xfu) * 4
						    : (uint32_t)(sel * 4u) % (uint32_t)f->c.bar_size;
			reg_wr(f, off, u32(f));
			break;
		}
		case OP_SQE_RAW: {
			uint32_t off = (u16(f) * 64u) % ARENA_SIZE;
			for (int i = 0; i < 64; i++)
				g_arena[off + i] = u8(f);
			break;
		}
		case OP_BYTES: {
			uint32_t off = u16(f) * 4u % ARENA_SIZE;
			uint32_t len = u8(f);
			for (uint32_t i = 0; i < len && off + i < ARENA_SIZE; i++)
				g_arena[off + i] = u8(f);
			break;
		}
		case OP_DOORBELL: {
			uint8_t sel = u8(f);
			uint32_t q = (sel >> 1) % 9;   /* beyond NQ: nonexistent queues */
			uint32_t off = sel & 1 ? gpunvme_cq_doorbell(q, f->c.dstrd)
					       : gpunvme_sq_doorbell(q, f->c.dstrd);
			reg_wr(f, off, u16(f));
			break;
		}
		case OP_ENABLE: op_enable(f); break;
		case OP_ADMIN: op_admin(f); break;
		case OP_IO: op_io(f); break;
		case OP_CREATE_QP: op_create_qp(f); break;
		case OP_CONSUME: consume(f, u8(f) % NQ); break;
		case OP_POLL: {
			int n = 1 + u8(f) % 8;
			for (int i = 0; i < n; i++)
				if (poll_once(f) < 0)
					break;
			break;
		}
		case OP_FAULT: op_fault(f); break;
		case OP_CC: op_cc(f); break;
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gpunvme_emu_config cfg;
	struct fz f;
	uint8_t *heap;
	int rc;

	if (size < 1)
		return 0;
	if (!g_arena)
		arena_setup();
	memset(&f, 0, sizeof(f));
	f.p = data;
	f.end = data + size;

	gpunvme_emu_config_init(&cfg);
	uint8_t v = u8(&f);
	cfg.workers = 0;
	cfg.nr_ns = 3;
	cfg.ns[0].backing = GPUNVME_EMU_BACK_RAM;
	cfg.ns[0].size = 64 * 1024;
	cfg.ns[0].lba_shift = 9;
	cfg.ns[1].backing = GPUNVME_EMU_BACK_RAM;
	cfg.ns[1].size = 256 * 1024;
	cfg.ns[1].lba_shift = 12;
	cfg.ns[2].backing = GPUNVME_EMU_BACK_NULL;
	cfg.ns[2].size = 16 * 1024 * 1024;   /* null: big enough for chained PRP lists */
	cfg.ns[2].lba_shift = 12;
	cfg.mqes = MQES;
	cfg.max_ioq = NQ - 1;
	cfg.dstrd = v & 3;
	cfg.mdts = (v >> 2) & 3;       /* 0 = unlimited */
	cfg.vwc = (v >> 4) & 1;
	cfg.ready_delay_ms = 0;
	cfg.model = (struct gpunvme_emu_model){0};

	struct gpunvme_emu *emu;
	rc = gpunvme_emu_create(&cfg, &emu);
	if (rc) {
		fprintf(stderr, "gpunvme_emu_create: %d\n", rc);
		abort();   /* a valid config must always work */
	}
	eb_attach(&f.c, emu);
	f.c.poll = fz_poll;
	f.c.poll_ctx = &f;
	f.c.max_polls = MAX_READY_POLLS;
	/* every doorbell of the NQ queue pairs lies inside BAR0 */
	if (f.c.dstrd != cfg.dstrd || f.c.bar_size < 0x1000 + 2u * NQ * (4u << f.c.dstrd)) {
		fprintf(stderr, "BAR0: dstrd %u (config %u), size %zu\n", f.c.dstrd,
			(unsigned)cfg.dstrd, f.c.bar_size);
		abort();
	}
	reset_host_queues(&f);
	f.next_cid = 0;

	/* Fresh memory per input so runs do not depend on each other. */
	memset(g_arena, 0, ARENA_SIZE);
	prefill_prp_lists();
	heap = malloc(HEAP_SIZE);
	if (!heap)
		abort();
	memset(heap, 0, HEAP_SIZE);
	/* mapped by hand, not eb_mem_map: the input names places in this fixed
	 * layout (pick_addr), and the heap must sit right after the arena */
	if (gpunvme_emu_dma_map(emu, ARENA_IOVA, g_arena, ARENA_SIZE) ||
	    gpunvme_emu_dma_map(emu, HEAP_IOVA, heap, HEAP_SIZE)) {
		fprintf(stderr, "gpunvme_emu_dma_map failed\n");
		abort();
	}

	run_ops(&f);

	/* Let the controller finish what it started, within the budget. */
	for (int i = 0; i < 4; i++)
		if (poll_once(&f) <= 0)
			break;

	struct gpunvme_emu_stats st;
	gpunvme_emu_get_stats(emu, &st);
	if (st.errors > st.admin_cmds + st.io_cmds) {
		fprintf(stderr, "stats: %llu errors > %llu commands\n",
			(unsigned long long)st.errors,
			(unsigned long long)(st.admin_cmds + st.io_cmds));
		abort();
	}
	gpunvme_emu_destroy(emu);
	free(heap);
	return 0;
}
