/* SPDX-License-Identifier: BSD-2-Clause */
/* Controller state shared by the control plane (src/ctrl) and the CPU data
 * path (src/io). */
#ifndef GPUNVME_CTRL_H
#define GPUNVME_CTRL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"
#include "bus/bus.h"
#include "dma/dma.h"
#include "gpunvme/gpunvme.h"
#include "gpunvme/queue.h"
#include "nvmf/nvmf.h"

/* Longest transfer per command we build, whatever MDTS allows: bounds the
 * PRP list pages reserved per command (2 MiB = 2 list pages of 4 KiB). */
#define GPUNVME_MAX_XFER (2u << 20)

struct gpunvme_ns {
	struct gpunvme_ns_info info;
	struct gpunvme_id_ns id;
};

struct gpunvme_ctrl {
	struct gpunvme_bus bus;
	/* NVMe over Fabrics (tcp://): the admin association; NULL for a PCIe
	 * controller. Then there is no BAR: registers are properties, queues
	 * are connections (src/nvmf), and the ring fields below stay unused. */
	struct nvmf_ctrl *fab;
	/* fabrics, GPU queues: the doorbell page the GPU writes (host memory,
	 * doorbells at stride 4 as in BAR0) and per qid the connection and
	 * its CPU proxy (src/nvmf/proxy.c) */
	uint8_t *fab_db;
	size_t fab_db_len;
	struct nvmf_queue **fab_q;
	struct nvmf_proxy **fab_px;
	struct nvmf_proxy_ns **fab_ns;   /* each proxy's namespace table */
	struct gpunvme_opts opts;
	uint32_t caps;           /* GPUNVME_CAP_*, from the bus at open */
	uint64_t cap;
	uint32_t vs;
	uint32_t dstrd;
	uint32_t page_shift, page_size;
	uint32_t mqes;           /* 1-based */
	uint64_t max_xfer;       /* what we send per command */
	uint64_t mdts_bytes;     /* what the controller allows (0 = no limit) */
	uint32_t nr_io_queues;
	uint32_t cc;             /* CC as written at enable */
	struct gpunvme_id_ctrl id;

	struct gpunvme_ns *ns;   /* active namespaces, NSID order */
	uint32_t nns;

	/* admin queue; admin commands are serialised by admin_lock */
	pthread_mutex_t admin_lock;
	struct gpunvme_ring aq;  /* queue 0 on the queue core */
	uint16_t acid;
	uint8_t *abuf;           /* 4 KiB bounce buffer for admin data */

	struct dma_registry dma;

	/* I/O queue pairs */
	pthread_mutex_t qp_lock;
	struct gpunvme_qpair **qps;  /* indexed by qid, [0] unused */
	uint8_t *qid_gpu;            /* qid owned by GPU queues (src/cuda) */
	uint32_t qid_next;           /* fabrics: where the search for a free qid starts (a
				      * just-closed queue's ID is the last one reused: the
				      * target frees it asynchronously) */

	/* memory the GPU side pinned for the controller's life (ctrl_gpu.h:
	 * gpunvme_ctrl_keep_pinned); released at close, before the bus */
	void *kept_pin;
	void (*kept_unpin)(void *p);
};

/* Register access. BAR0 is MMIO on hardware and shared memory with the
 * emulator: atomic 32-bit accesses are plain loads/stores on x86 (ordered
 * with respect to other stores, as MMIO needs), and tell the compiler and
 * ThreadSanitizer that another agent reads and writes these words. */
static inline uint32_t ctrl_rd32(const struct gpunvme_ctrl *c, uint32_t off)
{
	return __atomic_load_n((volatile uint32_t *)(c->bus.bar0 + off), __ATOMIC_ACQUIRE);
}
static inline void ctrl_wr32(struct gpunvme_ctrl *c, uint32_t off, uint32_t v)
{
	__atomic_store_n((volatile uint32_t *)(c->bus.bar0 + off), v, __ATOMIC_RELEASE);
}

int ctrl_check_alive(struct gpunvme_ctrl *c, const char *what);
/* Fabrics: a new association after the old one died (new controller ID,
 * queue count asked again); I/O queues then reconnect to it. */
int ctrl_fabric_reassociate(struct gpunvme_ctrl *c);

/* queue pairs (src/io/qpair.c) */
int qpair_recreate(struct gpunvme_qpair *qp);
void qpair_fail_all(struct gpunvme_qpair *qp, int err);
int ctrl_create_io_queues(struct gpunvme_ctrl *c, uint16_t qid, uint64_t sq_iova, uint64_t cq_iova,
			  uint32_t depth);
int ctrl_delete_io_queues(struct gpunvme_ctrl *c, uint16_t qid);

#endif
