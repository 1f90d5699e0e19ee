/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The PCIe transport's own state and the calls between its control plane
 * (pcie_ctrl.c) and its queue pairs (pcie_qpair.c). Registers are BAR0,
 * queues are rings in DMA memory with doorbells in BAR0 (NVMe 1.4 §3, §4).
 */
#ifndef GPUNVME_TRANSPORT_PCIE_H
#define GPUNVME_TRANSPORT_PCIE_H

#include <stdbool.h>
#include <stdint.h>

#include "ctrl/ctrl.h"
#include "gpunvme/spec/queue.h"

/* c->tr_priv */
struct pcie_ctrl {
	struct gpunvme_ring aq;  /* admin queue (queue 0) on the queue core */
	uint16_t acid;
	uint8_t *abuf;           /* 4 KiB bounce buffer for admin data */
	bool master_off;         /* a reset turned bus mastering off */
};

static inline struct pcie_ctrl *pcie_ctrl(struct gpunvme_ctrl *c)
{
	return c->tr_priv;
}

/* Register access. BAR0 is MMIO on hardware and shared memory with the
 * emulator: atomic 32-bit accesses are plain loads/stores on x86 (ordered
 * with respect to other stores, as MMIO needs), and tell the compiler and
 * ThreadSanitizer that another agent reads and writes these words. */
static inline uint32_t pcie_rd32(const struct gpunvme_ctrl *c, uint32_t off)
{
	return __atomic_load_n((volatile uint32_t *)(c->bus.bar0 + off), __ATOMIC_ACQUIRE);
}
static inline void pcie_wr32(struct gpunvme_ctrl *c, uint32_t off, uint32_t v)
{
	__atomic_store_n((volatile uint32_t *)(c->bus.bar0 + off), v, __ATOMIC_RELEASE);
}

/* I/O CQ and SQ `qid` on the controller by admin command (§5.3 - §5.6). */
int pcie_create_io_queues(struct gpunvme_ctrl *c, uint16_t qid, uint64_t sq_iova, uint64_t cq_iova, uint32_t depth);
int pcie_delete_io_queues(struct gpunvme_ctrl *c, uint16_t qid);

extern const struct gpunvme_qpair_ops pcie_qpair_ops;

#endif
