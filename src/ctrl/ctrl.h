/* SPDX-License-Identifier: BSD-2-Clause */
/* Controller state shared by the control plane (src/ctrl), the CPU data
 * path (src/io) and the transports (src/transport). */
#ifndef GPUNVME_CTRL_H
#define GPUNVME_CTRL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"
#include "bus/bus.h"
#include "dma/dma.h"
#include "gpunvme/gpunvme.h"
#include "gpunvme/spec/queue.h"
#include "ctrl/transport.h"

/* Longest transfer per command we build, whatever MDTS allows: bounds the
 * PRP list pages reserved per command (2 MiB = 2 list pages of 4 KiB). */
#define GPUNVME_MAX_XFER (2u << 20)

struct gpunvme_ns {
	struct gpunvme_ns_info info;
	struct gpunvme_id_ns id;
};

struct gpunvme_ctrl {
	struct gpunvme_bus bus;
	/* how commands reach the controller (ctrl/transport.h), chosen at
	 * open from the bus, and the transport's own state */
	const struct gpunvme_transport *tr;
	void *tr_priv;
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

	/* admin commands are serialised by admin_lock */
	pthread_mutex_t admin_lock;

	struct dma_registry dma;

	/* I/O queue pairs */
	pthread_mutex_t qp_lock;
	struct gpunvme_qpair **qps;  /* indexed by qid, [0] unused */
	uint8_t *qid_gpu;            /* qid owned by GPU queues (src/cuda) */
	uint32_t qid_next;           /* where the search for a free qid starts when the
				      * transport reuses a just-closed queue's ID last
				      * (tr->qid_reuse_last) */

	/* memory the GPU side pinned for the controller's life (ctrl_gpu.h:
	 * gpunvme_ctrl_keep_pinned); released at close, before the bus */
	void *kept_pin;
	void (*kept_unpin)(void *p);
};

/* 0 while the controller can process commands (the transport's check). */
int ctrl_check_alive(struct gpunvme_ctrl *c, const char *what);
/* A free I/O queue ID (neither a CPU queue pair's nor the GPU's), 0 when
 * every one is taken; with qp_lock held. The one place queue IDs are
 * chosen for CPU and GPU queues alike: a transport whose target frees a
 * closed queue's ID asynchronously (tr->qid_reuse_last) gets the IDs in
 * rotation, so a queue re-created at once does not ask for the ID its
 * target may still hold. */
uint16_t ctrl_pick_qid_locked(struct gpunvme_ctrl *c);
/* Identify the controller and its active namespaces (§5.15), set the
 * transfer limits. */
int ctrl_identify_all(struct gpunvme_ctrl *c);
/* Number of I/O queues (§5.21.1.7): ask, keep what is granted. */
int ctrl_negotiate_queues(struct gpunvme_ctrl *c);
/* After a reset or a new association: the controller forgot the queue
 * count; ask again, it must grant what the existing queue pairs use
 * (who: the message's start). */
int ctrl_renegotiate_queues(struct gpunvme_ctrl *c, const char *who);
/* Spin briefly, then give the CPU away (register handshakes). */
void ctrl_relax(uint32_t spins);

/* queue pairs (src/io/qpair.c) */
int qpair_recreate(struct gpunvme_qpair *qp);
void qpair_fail_all(struct gpunvme_qpair *qp, int err);

#endif
