/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The transport interface: how the control plane (src/ctrl) and the CPU
 * queue pairs (src/io) reach a controller, whatever carries the commands.
 * Two implementations live in src/transport/: PCIe (registers in BAR0,
 * queues as rings in memory with doorbells; every bus with a BAR: the
 * emulator, vfio, uio, the kernel module) and NVMe/TCP (registers as
 * properties, each queue a connection; src/nvmf). Code outside a transport
 * calls these tables and never asks which transport it is talking to.
 *
 * Modelled on the controller ops of Linux's NVMe host (nvme_ctrl_ops) and
 * SPDK's transport switch: the controller holds one table, chosen at open
 * from the bus (gpunvme_transport_for), and each queue pair caches its
 * table so the data path makes one indirect call per submission or poll.
 *
 * Transport state: a controller's is behind c->tr_priv (allocated by
 * open); a queue pair's embeds struct gpunvme_qpair as its first member
 * (qp_size bytes allocated by src/io), so the data path reaches its ring
 * or connection without a pointer chase.
 *
 * Every function returns 0 or -errno with the reason in the last error.
 */
#ifndef GPUNVME_CTRL_TRANSPORT_H
#define GPUNVME_CTRL_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpunvme/gpunvme.h"
#include "gpunvme/spec/nvme.h"

struct gpunvme_bus;
struct gpunvme_ctrl;
struct gpunvme_qpair;
struct io_req;

/* Direction of a command's data, for a transport that moves it itself
 * (NVMe/TCP: C2HData or H2CData PDUs). */
enum { QP_DATA_NONE = 0, QP_DATA_C2H = 1, QP_DATA_H2C = 2 };

/*
 * A command's data as the generic queue pair knows it; the transport
 * points the SQE at it (PRPs into the request's DMA mapping, or an SGL
 * that the transport fills).
 */
struct qpair_data {
	void *buf;            /* host address; NULL: no data */
	uint32_t len;
	int dir;              /* QP_DATA_* */
	struct io_req *req;   /* reads and writes: the request whose mapping covers buf */
	uint64_t iova;        /* else: buf's bus address, within one page (a DSM range) */
};

/* Queue pair operations (src/io/qpair.c calls them). */
struct gpunvme_qpair_ops {
	/* bytes of the transport's queue pair, struct gpunvme_qpair first */
	size_t qp_size;
	/* Before a queue ID is taken: queue memory (rings in the caller's
	 * memory when rings != NULL, gpunvme_qpair_create_in), or a refusal. */
	int (*init)(struct gpunvme_qpair *qp, void *rings, size_t rings_len);
	/* The I/O queue on the controller for qp->qid. */
	int (*connect)(struct gpunvme_qpair *qp);
	/* Remove the I/O queue from the controller (gpunvme_qpair_destroy,
	 * before its commands are failed); NULL when release does it. */
	void (*disconnect)(struct gpunvme_qpair *qp);
	/* Free what init and connect set up. */
	void (*release)(struct gpunvme_qpair *qp);
	/* The queue again after a controller reset or a dropped connection
	 * (the generic command state is already empty). */
	int (*recreate)(struct gpunvme_qpair *qp);
	/* The transport's queue state back to empty (NULL: nothing to do). */
	void (*reset)(struct gpunvme_qpair *qp);
	/* Before every command of qp is failed: make sure none of their data
	 * can land afterwards (NULL: the controller was stopped by the caller). */
	void (*stop)(struct gpunvme_qpair *qp, int err);
	/* Before a request on the general path: the queue usable (NULL: always). */
	int (*ready)(struct gpunvme_qpair *qp);
	/* gpunvme_read / gpunvme_write: a transport with a fast path for a
	 * single command takes it, else calls qpair_submit_rw(). */
	int (*read)(struct gpunvme_qpair *qp, uint32_t nsid, void *buf, uint64_t slba, uint64_t nlb, gpunvme_cb cb,
		    void *arg);
	int (*write)(struct gpunvme_qpair *qp, uint32_t nsid, const void *buf, uint64_t slba, uint64_t nlb,
		     gpunvme_cb cb, void *arg);
	/* One command built by the generic code (cid set): data pointer in
	 * the SQE, then into the SQ or onto the wire. On error nothing was
	 * sent. */
	int (*submit)(struct gpunvme_qpair *qp, struct gpunvme_sqe *e, const struct qpair_data *d);
	/* After a batch of submit calls: tell the controller (NULL: each
	 * submit already did). */
	void (*kick)(struct gpunvme_qpair *qp);
	/* Completions: at most max user requests finished (0: no limit);
	 * returns how many did, or -errno when the queue failed (its commands
	 * are then failed too). */
	int (*reap)(struct gpunvme_qpair *qp, uint32_t max);
	/* Once a millisecond while commands are in flight: NULL, each command
	 * past its deadline times out on its own; else the transport's own
	 * policy, returning the requests it finished. */
	int (*timeouts)(struct gpunvme_qpair *qp, uint64_t now);
	/* Sleep until a completion may have arrived (NULL: nothing to wait on
	 * but the completion queue itself, which the caller polls). */
	void (*wait)(struct gpunvme_qpair *qp, uint32_t max_us);
};

/* Controller operations (src/ctrl calls them). */
struct gpunvme_transport {
	/* whether this transport drives the controller behind bus b */
	bool (*match)(const struct gpunvme_bus *b);
	const struct gpunvme_qpair_ops *qp;
	/* A closed queue's ID is reused last: the controller frees it
	 * asynchronously (an NVMe/TCP target after the connection closes). */
	bool qid_reuse_last;
	/* Reach the controller and enable it with a working admin queue:
	 * c->cap, vs, cc, dstrd, mqes, page_shift, page_size set; the generic
	 * open then identifies and negotiates the queue count. */
	int (*open)(struct gpunvme_ctrl *c, const char *uri);
	/* After identify and the queue count (NULL: nothing to do). */
	int (*setup)(struct gpunvme_ctrl *c);
	/* Free the transport state, ending the association where there is
	 * one; also after a failed open (tr_priv may then be NULL). */
	void (*close)(struct gpunvme_ctrl *c);
	/* Normal shutdown at gpunvme_close (NULL: close does it). */
	void (*shutdown)(struct gpunvme_ctrl *c);
	/* Controller registers (CAP, VS, CC, CSTS, ...), 4 or 8 bytes. */
	int (*reg_read)(struct gpunvme_ctrl *c, uint32_t off, uint32_t size, uint64_t *val);
	int (*reg_write)(struct gpunvme_ctrl *c, uint32_t off, uint32_t size, uint64_t val);
	/* One admin command, admin_lock held; buf (len <= 4096) moves in the
	 * direction dir (QP_DATA_*). -EIO with the status in *cpl when the
	 * controller failed it. */
	int (*admin)(struct gpunvme_ctrl *c, struct gpunvme_sqe *cmd, void *buf, uint32_t len, int dir,
		     struct gpunvme_cqe *cpl);
	/* 0 while the controller can still process commands; what it is not
	 * doing otherwise (gone, fatal status). Cheap: called per millisecond. */
	int (*check_alive)(struct gpunvme_ctrl *c, const char *what);
	/* gpunvme_reset, first half: the controller processes no command and
	 * moves no data any more (its I/O queues' commands are failed next). */
	int (*disable)(struct gpunvme_ctrl *c);
	/* Second half: the controller working again with the same queue
	 * count (disable_rc: what disable returned); the I/O queues are then
	 * recreated. */
	int (*enable)(struct gpunvme_ctrl *c, int disable_rc);
	/* GPU queue pairs (src/cuda through ctrl_gpu.h): an I/O queue pair
	 * whose rings the GPU drives, and the doorbell page it writes. */
	int (*gpu_queue_create)(struct gpunvme_ctrl *c, uint16_t qid, uint64_t sq_iova, uint64_t cq_iova,
				uint32_t depth);
	int (*gpu_queue_delete)(struct gpunvme_ctrl *c, uint16_t qid);
	volatile void *(*doorbells)(struct gpunvme_ctrl *c, size_t *len);
};

extern const struct gpunvme_transport gpunvme_transport_pcie;
extern const struct gpunvme_transport gpunvme_transport_tcp;

/* The transport for the controller behind an open bus (src/transport). */
const struct gpunvme_transport *gpunvme_transport_for(const struct gpunvme_bus *b);

#endif
