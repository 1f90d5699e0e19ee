/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Bringing the embedded emulator's controller up by hand, for the programs
 * that drive its queues themselves instead of through the library: the GPU
 * test that polls an I/O queue from a kernel (tests/gpu/test_gpu_emu.cu),
 * the emulator's throughput benchmark (bench/bench_emu_null.c) and the
 * emulator fuzzer (tests/fuzz/fuzz_emu.c). What they share with each other
 * and with the library comes from the queue core (gpunvme/spec/queue.h): the
 * enable is gpunvme_admin_enable, every host-side queue walk a struct
 * gpunvme_ring. This file adds only the little around it: zeroed queue
 * memory in the emulator's DMA address space, bounded waits on CSTS,
 * synchronous admin commands, and an I/O queue pair created through them.
 *
 * Not the register-level harness (harness.h): that one keeps its own queue
 * code on purpose, as an oracle independent of the queue core. Names use
 * the prefix eb_ (emulator bring-up). C and C++ (CUDA host code).
 */
#ifndef GPUNVME_TEST_EMU_BRINGUP_H
#define GPUNVME_TEST_EMU_BRINGUP_H

#include <stddef.h>
#include <stdint.h>

#include "gpunvme/emu.h"
#include "gpunvme/spec/nvme.h"
#include "gpunvme/spec/queue.h"

/* Host code only: struct gpunvme_ring is not declared in nvcc's device
 * pass (queue.h), which parses a .cu file's host functions too; a CUDA
 * source puts its host functions that use these under the same guard. */
#if !defined(__CUDA_ARCH__)

#ifdef __cplusplus
extern "C" {
#endif

#define EB_PAGE 4096u                        /* CC.MPS = 0 */
#define EB_ADMIN_TIMEOUT_NS 5000000000ull    /* an admin command's completion */

struct eb_ctrl {
	struct gpunvme_emu *emu;
	volatile uint8_t *bar;
	size_t bar_size;
	uint64_t cap;
	uint32_t dstrd;
	uint32_t cc;             /* as written by the enable */
	uint64_t timeout_ns;     /* bound of a CSTS wait: CAP.TO (§3.1.1) */
	/* A threadless controller (config.workers = 0) moves only when polled:
	 * then every wait runs poll (one controller pass; < 0 stops the wait)
	 * at most max_polls times instead of waiting for time to pass, which
	 * keeps a fuzzer's runs deterministic and bounded. */
	int (*poll)(void *ctx);
	void *poll_ctx;
	unsigned max_polls;
	/* the DMA region eb_alloc hands out, mapped at iova */
	uint8_t *mem;
	uint64_t iova;
	size_t mem_len, mem_used;
	/* the admin queue, after eb_enable */
	struct gpunvme_ring admin;
	uint16_t next_cid;
};

/* Take hold of a created emulator: BAR0, CAP, doorbell stride, CAP.TO. */
void eb_attach(struct eb_ctrl *c, struct gpunvme_emu *emu);
/* Map len bytes of host memory at mem (malloc'd, mmap'd or pinned by CUDA;
 * page aligned) into the controller's DMA space at iova, for eb_alloc.
 * 0 or -errno. */
int eb_mem_map(struct eb_ctrl *c, void *mem, uint64_t iova, size_t len);
/* Zeroed memory from the mapped region, aligned to align (a power of two,
 * 0: a page); its bus address in *iova. NULL when the region is full. */
void *eb_alloc(struct eb_ctrl *c, size_t len, size_t align, uint64_t *iova);
uint64_t eb_iova_of(const struct eb_ctrl *c, const void *p);

uint32_t eb_rd32(const struct eb_ctrl *c, uint32_t off);
void eb_wr32(const struct eb_ctrl *c, uint32_t off, uint32_t v);
/* Wait until (CSTS & mask) == want, bounded (see timeout_ns and poll).
 * 0; -EIO when CSTS.CFS is set while waiting for a bit to be set (the
 * controller will not get there; a wait for RDY = 0 goes on, as a reset is
 * how a host recovers from CFS); -ETIMEDOUT. */
int eb_wait_csts(struct eb_ctrl *c, uint32_t mask, uint32_t want);

/* §7.6.1: CC.EN = 0 and wait for RDY = 0, an admin queue pair of depth
 * entries from the region, gpunvme_admin_enable, wait for RDY = 1.
 * 0 or -errno (-EIO: CSTS.CFS). */
int eb_enable(struct eb_ctrl *c, uint32_t depth);
/* Normal shutdown (§7.6.2): CC.SHN = 01b, wait for CSTS.SHST = 10b. */
int eb_shutdown(struct eb_ctrl *c);

/* One admin command, synchronously, on the admin ring: s gets a fresh CID.
 * 0; the NVMe status (> 0) of a failed command; -ETIMEDOUT after
 * EB_ADMIN_TIMEOUT_NS (or max_polls polls); -EPROTO for a completion of
 * another CID. Completion dword 0 in *dw0 (may be NULL). Failures are
 * printed on stderr. */
int eb_admin(struct eb_ctrl *c, struct gpunvme_sqe *s, uint32_t *dw0);

/* Create I/O Completion / Submission Queue (§5.3, §5.4) for a queue of
 * depth entries at iova: physically contiguous, interrupts off (polled). */
void eb_sqe_create_cq(struct gpunvme_sqe *s, uint16_t qid, uint32_t depth, uint64_t iova);
void eb_sqe_create_sq(struct gpunvme_sqe *s, uint16_t qid, uint32_t depth, uint64_t iova, uint16_t cqid);
/* An I/O queue pair qid of depth entries: zeroed SQ and CQ from the region,
 * CQ then SQ created, *r ready to use. 0, the NVMe status, or -errno. */
int eb_create_qp(struct eb_ctrl *c, uint16_t qid, uint32_t depth, struct gpunvme_ring *r);

#ifdef __cplusplus
}
#endif

#endif /* !__CUDA_ARCH__ */

#endif
