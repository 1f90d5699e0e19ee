/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Test harness: a raw mini NVMe driver for the embedded emulator. It reaches
 * the controller only through BAR0 memory and DMA-mapped memory, like a
 * driver reaches hardware, so the conformance tests exercise exactly what a
 * real driver (CPU or GPU) would. Names use the short prefix h_.
 *
 * Memory ordering (the MMIO protocol, NVMe 1.4 §4.1 / §7.2): SQ entries are
 * plain stores followed by a RELEASE store of the tail doorbell; completion
 * entries are read after an ACQUIRE load of their last dword (phase tag).
 * Every register access is a 32-bit __atomic access, which is also what lets
 * ThreadSanitizer see the happens-before edges between host and emulator.
 */
#ifndef GPUNVME_TEST_HARNESS_H
#define GPUNVME_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "gpunvme/emu.h"
#include "gpunvme/spec/nvme.h"

#define H_PAGE 4096u                /* CC.MPS = 0 */
#define H_TIMEOUT_MS 5000u          /* default wait for any completion/register */
#define H_IOVA_BASE 0x1000000000ull /* unrelated to any virtual address */
#define H_ARENA_DEFAULT (64u << 20)
#define H_ADMIN_ENTRIES 64u
#define H_STASH 256u                /* completions kept aside while waiting for another CID */

/* ---- time ------------------------------------------------------------------ */
uint64_t h_now_ms(void);
uint64_t h_now_us(void);
void h_sleep_ms(unsigned ms);

/* ---- DMA arena ------------------------------------------------------------- */
struct h_buf {
	void *va;
	uint64_t iova;
	size_t len;
};

struct h_arena {
	struct gpunvme_emu *emu;
	uint8_t *map;      /* whole mmap, guard pages included */
	size_t map_len;
	uint8_t *base;     /* usable part, mapped into the emulator */
	size_t len;
	uint64_t iova;
	size_t used;
};

/* mmap len bytes (rounded to pages) between two PROT_NONE guard pages and
 * map them into the emulator at iova. Returns 0 or -errno. */
int h_arena_init(struct h_arena *a, struct gpunvme_emu *emu, uint64_t iova, size_t len);
void h_arena_fini(struct h_arena *a);
/* Bump allocation; align is a power of two (0 = page). Aborts when out of
 * space: that is a harness sizing bug, not a controller failure. The memory
 * is zero-filled on first use. */
struct h_buf h_alloc(struct h_arena *a, size_t len, size_t align);
uint64_t h_iova_of(const struct h_arena *a, const void *va);

/* ---- controller ------------------------------------------------------------- */
struct h_ctrl;

struct h_qp {
	struct h_ctrl *c;
	uint16_t sqid, cqid;
	uint32_t sq_entries, cq_entries;
	struct gpunvme_sqe *sq;
	uint64_t sq_iova;
	struct gpunvme_cqe *cq;
	uint64_t cq_iova;
	uint32_t sq_tail;
	uint32_t sq_head;      /* from the SQHD of the latest completion */
	uint32_t cq_head;
	uint16_t phase;
	uint16_t next_cid;
	struct h_buf prp_lists; /* list pages for the synchronous I/O helper */
	struct gpunvme_cqe stash[H_STASH];
	unsigned nstash;
};

struct h_ctrl {
	struct gpunvme_emu *emu;
	struct gpunvme_emu_config cfg;
	volatile uint8_t *bar;
	uint64_t cap;
	uint32_t dstrd;
	bool threadless;
	struct h_arena arena;
	struct h_qp admin;
	struct h_buf admin_mem; /* SQ + CQ memory of the admin queue */
	uint32_t admin_entries;
	struct h_buf scratch;   /* 2 pages for Identify / log pages / features */
	struct h_ctrl *next;    /* registry: the runner closes leftovers */
};

/* Defaults for tests: gpunvme_emu_config_init plus a short idle sleep so
 * sequential commands do not wait for a sleeping worker. */
void h_cfg(struct gpunvme_emu_config *cfg);

/* Create an emulator from cfg, an arena of arena_len bytes (0: default),
 * read CAP. The controller stays disabled. Returns 0 or -errno. */
int h_ctrl_open(struct h_ctrl **out, const struct gpunvme_emu_config *cfg, size_t arena_len);
void h_ctrl_close(struct h_ctrl *c);
/* Close every controller still open (the runner calls it after each case). */
void h_close_all(void);
/* open + h_enable with the default admin queue size. */
int h_ctrl_up(struct h_ctrl **out, const struct gpunvme_emu_config *cfg);

/* 32-bit register access (ACQUIRE loads, RELEASE stores). */
uint32_t h_rd32(struct h_ctrl *c, uint32_t off);
void h_wr32(struct h_ctrl *c, uint32_t off, uint32_t v);
/* 64-bit registers as two 32-bit accesses, low dword first (§3.1: 64-bit
 * registers may be accessed as two 32-bit halves). */
uint64_t h_rd64(struct h_ctrl *c, uint32_t off);
void h_wr64(struct h_ctrl *c, uint32_t off, uint64_t v);

/* Wait until (reg & mask) == val. Returns 0 or -ETIMEDOUT. */
int h_wait_reg(struct h_ctrl *c, uint32_t off, uint32_t mask, uint32_t val, unsigned timeout_ms);
/* One controller pass in threadless mode, a short pause otherwise. */
void h_idle(struct h_ctrl *c, unsigned *spins);

#define H_CC_DEFAULT ((6u << GPUNVME_CC_IOSQES_SHIFT) | (4u << GPUNVME_CC_IOCQES_SHIFT))

/* Program AQA/ASQ/ACQ for an admin queue of `entries` (0: default) and set
 * CC.EN=1 with MPS=0, CSS=NVM, IOSQES=6, IOCQES=4; wait for CSTS.RDY.
 * Returns 0, -EIO when the controller reports CSTS.CFS, -ETIMEDOUT. */
int h_enable(struct h_ctrl *c, uint32_t entries);
/* The first half of h_enable: program the admin queue and write CC.EN=1
 * without waiting. */
void h_enable_start(struct h_ctrl *c, uint32_t entries);
/* CC.EN=0, wait RDY=0. Every queue is gone afterwards (§3.1.5, §7.6.2). */
int h_disable(struct h_ctrl *c);
/* CC.SHN=01, wait CSTS.SHST=10 (§7.6.2). */
int h_shutdown(struct h_ctrl *c);

/* ---- queues ----------------------------------------------------------------- */
/* Reset the host-side state of a queue pair whose memory is already set. */
void h_qp_reset(struct h_qp *q);
/* Copy one SQE into the next slot (no doorbell). -EBUSY when the SQ is full. */
int h_sq_push(struct h_qp *q, const struct gpunvme_sqe *sqe);
/* RELEASE-store the SQ tail doorbell. */
void h_sq_ring(struct h_qp *q);
/* Give sqe a fresh CID, push it and ring. Returns the CID or -EBUSY. */
int h_submit(struct h_qp *q, struct gpunvme_sqe *sqe);
/* Take one completion if there is one (1) or not (0); updates the CQ head
 * doorbell. */
int h_cq_peek(struct h_qp *q, struct gpunvme_cqe *out);
/* Wait for any completion (stashed ones first). 0 or -ETIMEDOUT. */
int h_cq_wait(struct h_qp *q, struct gpunvme_cqe *out, unsigned timeout_ms);
/* Wait for the completion of `cid`; others are stashed. 0 or -ETIMEDOUT. */
int h_wait_cid(struct h_qp *q, uint16_t cid, struct gpunvme_cqe *out, unsigned timeout_ms);
/* Submit and wait (H_TIMEOUT_MS). 0 or -errno; the status is in *out. */
int h_cmd(struct h_qp *q, struct gpunvme_sqe *sqe, struct gpunvme_cqe *out);
/* 1 when no completion arrives on q within ms, 0 otherwise (the completion
 * that did arrive is stashed). */
int h_expect_silence(struct h_qp *q, unsigned ms);
/* Number of CQ slots currently holding an unconsumed entry (new phase). */
unsigned h_cq_pending(struct h_qp *q);

/* Status of a completion without the phase: SCT|SC|CRD|M|DNR. */
static inline uint16_t h_st(const struct gpunvme_cqe *e) { return gpunvme_cqe_status(e->status); }

/* ---- admin commands: return 0 when a completion came, status in *cqe ----- */
int h_identify(struct h_ctrl *c, uint8_t cns, uint32_t nsid, uint64_t prp1, struct gpunvme_cqe *cqe);
int h_create_cq(struct h_ctrl *c, uint16_t qid, uint16_t qsize0, uint64_t prp1, uint16_t qflags,
		uint16_t iv, struct gpunvme_cqe *cqe);
int h_create_sq(struct h_ctrl *c, uint16_t qid, uint16_t qsize0, uint64_t prp1, uint16_t qflags,
		uint16_t cqid, struct gpunvme_cqe *cqe);
int h_delete_sq(struct h_ctrl *c, uint16_t qid, struct gpunvme_cqe *cqe);
int h_delete_cq(struct h_ctrl *c, uint16_t qid, struct gpunvme_cqe *cqe);
int h_get_features(struct h_ctrl *c, uint8_t fid, uint8_t sel, uint32_t cdw11, struct gpunvme_cqe *cqe);
int h_set_features(struct h_ctrl *c, uint8_t fid, uint32_t cdw11, struct gpunvme_cqe *cqe);
/* Get Log Page (§5.14): len bytes (multiple of 4) at byte offset, RAE bit. */
int h_get_log(struct h_ctrl *c, uint8_t lid, uint32_t nsid, bool rae, uint32_t len, uint64_t offset,
	      uint64_t prp1, uint64_t prp2, struct gpunvme_cqe *cqe);
int h_abort(struct h_ctrl *c, uint16_t sqid, uint16_t cid, struct gpunvme_cqe *cqe);
/* Submit an Asynchronous Event Request; returns its CID (no wait). */
int h_aer_submit(struct h_ctrl *c);

/* Convenience: Identify into *out through the scratch page; 0 = success
 * status, >0 the status value, <0 errno. */
int h_id_ctrl(struct h_ctrl *c, struct gpunvme_id_ctrl *out);
int h_id_ns(struct h_ctrl *c, uint32_t nsid, struct gpunvme_id_ns *out);
int h_smart(struct h_ctrl *c, struct gpunvme_smart_log *out);

/* Allocate queue memory from the arena and create I/O CQ qid and SQ qid
 * (PC=1, interrupts off). Returns 0, the NVMe status (>0) of the failing
 * create, or -errno. */
int h_qp_create(struct h_ctrl *c, struct h_qp *q, uint16_t qid, uint32_t entries);
/* Delete SQ then CQ. 0, status or -errno. */
int h_qp_delete(struct h_ctrl *c, struct h_qp *q);

/* ---- PRPs (§4.3) ------------------------------------------------------------ */
/* Knobs let tests build deliberately wrong PRPs. All zero: a correct set. */
struct h_prp_knobs {
	uint32_t list_offset;   /* byte offset of the first list in its page (multiple of 8) */
	uint64_t prp2_data_add; /* added to PRP2 when it is a data pointer */
	uint32_t bad_entry;     /* 1-based index of a data entry in the lists to corrupt; 0 none */
	uint64_t bad_entry_add;
	uint64_t chain_add;     /* added to the first chain pointer */
};

/* Build PRP1/PRP2 for [data_iova, data_iova + len), writing lists into the
 * page-aligned list memory lists (list_va/list_iova, list_len bytes).
 * Returns the number of list pages used (0: no list) or -ENOSPC. */
int h_prp_build(uint64_t data_iova, size_t len, void *list_va, uint64_t list_iova, size_t list_len,
		const struct h_prp_knobs *k, uint64_t *prp1, uint64_t *prp2);

/* Synchronous NVM command on q: Read/Write/Write Zeroes/Flush... with PRPs
 * built into q->prp_lists. nlb is the block count (1-based). 0 or -errno. */
int h_io(struct h_qp *q, uint8_t opc, uint32_t nsid, uint64_t slba, uint32_t nlb, uint64_t data_iova,
	 size_t len, struct gpunvme_cqe *cqe);
void h_io_sqe(struct gpunvme_sqe *s, uint8_t opc, uint32_t nsid, uint64_t slba, uint32_t nlb);

/* ---- data helpers ----------------------------------------------------------- */
uint32_t h_crc32(uint32_t crc, const void *buf, size_t len);
void h_fill(void *buf, size_t len, uint64_t seed);
/* 1 when every byte of buf is b. */
int h_all(const void *buf, size_t len, uint8_t b);
uint64_t h_rand(uint64_t *state);

/* ---- checks ------------------------------------------------------------------ */
/* The assertion macros and the case runner are the tests' one family
 * (check.h); the status mask of CHECK_ST under the name the harness' own
 * comparisons use. */
#define H_MASK_SC_DNR CHECK_ST_MASK
#define H_DNR(sc) ((uint16_t)((sc) | GPUNVME_STATUS_DNR))

#endif
