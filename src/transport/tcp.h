/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The NVMe/TCP transport's own state and the calls between its control
 * plane (tcp_ctrl.c) and its queue pairs (tcp_qpair.c). There is no BAR:
 * registers are properties, each queue is a connection (src/nvmf).
 */
#ifndef GPUNVME_TRANSPORT_TCP_H
#define GPUNVME_TRANSPORT_TCP_H

#include <stddef.h>
#include <stdint.h>

#include "ctrl/ctrl.h"
#include "nvmf/nvmf.h"

/* c->tr_priv */
struct tcp_ctrl {
	/* the admin association */
	struct nvmf_ctrl fab;
	/* GPU queues: the doorbell page the GPU writes (host memory,
	 * doorbells at stride 4 as in BAR0) and per qid the connection and
	 * its CPU proxy (src/nvmf/proxy.c) */
	uint8_t *db;
	size_t db_len;
	struct nvmf_queue **q;
	struct nvmf_proxy **px;
	struct nvmf_proxy_ns **ns;   /* each proxy's namespace table */
};

static inline struct tcp_ctrl *tcp_ctrl(struct gpunvme_ctrl *c)
{
	return c->tr_priv;
}

/* A command's data direction in the transport's terms (ctrl/transport.h's
 * QP_DATA_* name the same three cases). */
static inline int tcp_dir(int dir)
{
	return dir == QP_DATA_H2C ? NVMF_DIR_H2C : dir == QP_DATA_C2H ? NVMF_DIR_C2H : NVMF_DIR_NONE;
}

/* A new association after the old one died (new controller ID, queue
 * count asked again); I/O queues then reconnect to it. */
int tcp_reassociate(struct gpunvme_ctrl *c);

extern const struct gpunvme_qpair_ops tcp_qpair_ops;

#endif
