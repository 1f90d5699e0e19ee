/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * What the GPU data path (src/cuda) needs from the control plane: I/O queue
 * ids it owns, queue creation without a CPU queue pair, transfer limits, and
 * GPU memory mapped for DMA through the bus (struct gpunvme_devmem, bus.h).
 * Implemented in src/ctrl/queues.c and ctrl.c; C linkage for the CUDA C++
 * side.
 */
#ifndef GPUNVME_CTRL_GPU_H
#define GPUNVME_CTRL_GPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "bus/bus.h"

struct gpunvme_ctrl;

int gpunvme_ctrl_reserve_qid(struct gpunvme_ctrl *c, uint16_t *qid);
void gpunvme_ctrl_release_qid(struct gpunvme_ctrl *c, uint16_t qid);
int gpunvme_ctrl_create_qpair_raw(struct gpunvme_ctrl *c, uint16_t qid, uint64_t sq_iova, uint64_t cq_iova,
				  uint32_t depth);
int gpunvme_ctrl_delete_qpair_raw(struct gpunvme_ctrl *c, uint16_t qid);
uint32_t gpunvme_ctrl_page_size(struct gpunvme_ctrl *c);
/* Where the GPU writes doorbells (*len bytes, stride CAP.DSTRD): BAR0 on
 * PCIe; over NVMe/TCP a page of host memory that the CPU proxies of the
 * GPU's queue pairs read (created by gpunvme_ctrl_create_qpair_raw; the
 * queues' "bus addresses" are then host virtual addresses). */
volatile void *gpunvme_ctrl_doorbells(struct gpunvme_ctrl *c, size_t *len);
uint64_t gpunvme_ctrl_max_xfer(struct gpunvme_ctrl *c);
/* Device memory as a DMA target through the bus's map_device: -EOPNOTSUPP
 * with the reason when the bus cannot. */
int gpunvme_ctrl_map_device(struct gpunvme_ctrl *c, const struct gpunvme_devmem *m, uint64_t *iova);
int gpunvme_ctrl_unmap_device(struct gpunvme_ctrl *c, uint64_t iova);
/* The bus address of every 4 KiB page of a map_device mapping: 0, or
 * -EOPNOTSUPP when the bus maps device memory contiguously from iova. */
int gpunvme_ctrl_device_table(struct gpunvme_ctrl *c, uint64_t iova, const uint64_t **table, size_t *n);

/*
 * The bus's device-memory DMA engine (bus.h, struct
 * gpunvme_devmem_engine_ops), for a controller that has device memory's
 * bytes moved for it rather than mastering the bus into it. Implemented in
 * src/ctrl/devmem.c; each is a no-op (attach: 0 with *engine NULL) where
 * the bus has no engine.
 *  - attach: an engine for one GPU queue set, in the calling thread's GPU
 *    context; *engine goes into struct gpunvme_devmem's engine.
 *  - sync: a bounded wait for every copy it queued (-ETIMEDOUT, -EIO with
 *    the reason).
 *  - detach: frees it.
 *  - pin: pins the host memory behind namespace nsid that the engine copies
 *    from, unless the controller keeps it pinned already
 *    (gpunvme_ctrl_kept_pin); best effort: *pinned NULL when nothing was
 *    pinned, else unpin(*pinned) undoes it.
 */
int gpunvme_ctrl_devmem_attach(struct gpunvme_ctrl *c, void **engine);
int gpunvme_ctrl_devmem_sync(struct gpunvme_ctrl *c, void *engine);
void gpunvme_ctrl_devmem_detach(struct gpunvme_ctrl *c, void *engine);
void gpunvme_ctrl_devmem_pin(struct gpunvme_ctrl *c, uint32_t nsid, void **pinned, void (**unpin)(void *p));

/*
 * One host range the GPU side keeps pinned as long as the controller lives:
 * what gpunvme_ctrl_devmem_pin pinned (the emulator namespace its copy
 * engine reads for emulated Tier 2). Pinning it costs ~40 ms per GiB (0.34 s
 * for 9 GiB on an H200), so it is done once per controller, not once per
 * loader. unpin(p) runs at gpunvme_close(), before the bus (and the
 * emulator's memory) goes. -EBUSY when another range is kept already
 * (callers then pin for their own lifetime).
 */
int gpunvme_ctrl_keep_pinned(struct gpunvme_ctrl *c, void *p, void (*unpin)(void *p));
/* The range kept, or NULL. */
void *gpunvme_ctrl_kept_pin(struct gpunvme_ctrl *c);

#ifdef __cplusplus
}
#endif

#endif
