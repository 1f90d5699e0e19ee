/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * NVMe over Fabrics, TCP transport: the capsule side of the queue seam.
 *
 * A PCIe controller is driven through memory: SQEs in a ring, a doorbell
 * write, CQEs polled from memory (gpunvme/spec/queue.h). A fabrics controller
 * has neither BAR nor doorbells: each queue is one TCP connection, a
 * command travels as a capsule (the SQE plus, for small writes, its data),
 * data moves in C2HData/H2CData PDUs and the completion comes back as a
 * CapsuleResp (NVMe-oF 1.1 §2, NVMe/TCP 1.0 §3). src/ctrl and src/io build
 * the same SQEs for both and hand them either to the ring or to
 * nvmf_queue_submit; completions come from the CQ ring or from
 * nvmf_queue_reap in one shape (struct nvmf_cpl). Registers become Property
 * Get/Set commands on the admin queue (NVMe-oF 1.1 §3.5).
 *
 * Every socket wait is bounded: connect, ICResp, Connect, a send that does
 * not drain, a command not answered in time. A connection that breaks the
 * protocol (a malformed PDU, a digest mismatch, data outside a command's
 * buffer, a completion for a command not in flight) or closes is dead:
 * the socket is shut at once, so no byte can land in a buffer after its
 * command was failed, and every command in flight fails.
 */
#ifndef GPUNVME_NVMF_H
#define GPUNVME_NVMF_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpunvme/spec/nvme.h"

#define NVMF_DISC_NQN "nqn.2014-08.org.nvmexpress.discovery"
#define NVMF_NQN_MAX 223 /* NVMe-oF 1.1 §4.1: NQNs are at most 223 bytes */

/* What a tcp:// URI says (nvmf_parse_uri). */
struct nvmf_params {
	char uri[320];             /* for messages: tcp://host:port/nqn */
	char host[256], port[8];
	char subnqn[NVMF_NQN_MAX + 1], hostnqn[NVMF_NQN_MAX + 1];
	uint8_t hostid[16];
	bool hdgst, ddgst;
	uint32_t kato_ms;          /* keep-alive timeout asked for (0: none) */
	uint32_t timeout_ms;       /* connect / ICResp / Connect / send waits */
	uint32_t nr_io_queues;     /* 0: from gpunvme_opts */
	uint32_t queue_size;       /* 0: the controller's limit, at most 128 */
};

/*
 * Parse "tcp://HOST:PORT[/SUBNQN][?opt=v&...]" (HOST may be [v6addr]).
 * Options: hostnqn=, hostid= (UUID), hdgst=0|1, ddgst=0|1, kato=MS,
 * timeout=MS, nr_io_queues=N, queue_size=N. SUBNQN may be left out only
 * when need_nqn is false (discovery). The host NQN defaults to
 * /etc/nvme/hostnqn (as nvme-cli), else one derived from the host ID,
 * which defaults to /etc/nvme/hostid, else to /etc/machine-id.
 * Returns 0 or -EINVAL with the reason in the last error.
 */
int nvmf_parse_uri(const char *uri, bool need_nqn, struct nvmf_params *p);

/* One completion: the CQE as the controller sent it, or err < 0 when the
 * transport failed the command (cqe.cid still names it). */
struct nvmf_cpl {
	struct gpunvme_cqe cqe;
	int err;
};

enum { NVMF_DIR_NONE = 0, NVMF_DIR_C2H = 1, NVMF_DIR_H2C = 2 };

struct nvmf_queue;

/*
 * Open a queue: TCP connect, ICReq/ICResp (digests as p asks; refused
 * when the target will not), fabrics Connect for qid with depth entries
 * (SQSIZE depth - 1) to controller cntlid (0xffff for the admin queue:
 * the dynamic model), kato_ms on the admin queue. ioccsz: in-capsule data
 * the controller accepts on this queue, bytes (0: none beyond Connect's).
 * *cntlid_out gets the controller ID from the Connect response.
 */
int nvmf_queue_open(const struct nvmf_params *p, uint16_t qid, uint32_t depth, uint16_t cntlid, uint32_t kato_ms,
		    uint32_t ioccsz, struct nvmf_queue **out, uint16_t *cntlid_out);
void nvmf_queue_close(struct nvmf_queue *q);
/* The same queue on a fresh connection (after nvmf_queue_reap failed and
 * the caller failed what was in flight). */
int nvmf_queue_reconnect(struct nvmf_queue *q, uint16_t cntlid);
/* 0 while usable, else the -errno it died of (its text in the last error
 * when it died). */
int nvmf_queue_dead(const struct nvmf_queue *q);
const char *nvmf_queue_why(const struct nvmf_queue *q);
uint32_t nvmf_queue_depth(const struct nvmf_queue *q);
/* Bytes received on the queue's connections so far: progress, for
 * timeouts that fire only when a queue stalls (src/io). */
uint64_t nvmf_queue_rx_bytes(const struct nvmf_queue *q);

/*
 * Send cmd (cid < depth, not in flight) as a capsule. The data pointer is
 * set here: an SGL (NVMe-oF §2.3: fabrics use SGLs), in-capsule for a
 * host-to-controller transfer that fits the queue's in-capsule size, else
 * a Transport SGL Data Block for R2T/H2CData or C2HData. buf must stay
 * valid until the completion. Returns 0, or -errno (the queue is then
 * dead).
 */
int nvmf_queue_submit(struct nvmf_queue *q, struct gpunvme_sqe *cmd, void *buf, uint32_t len, int dir);
/*
 * Move received PDUs along: land C2H data, answer R2Ts, collect up to max
 * completions, waiting up to wait_ms for the first byte. Returns the count
 * (>= 0), or the -errno the connection died of (then no command of it is
 * in flight any more: the caller fails them all).
 */
int nvmf_queue_reap(struct nvmf_queue *q, struct nvmf_cpl *out, uint32_t max, uint32_t wait_ms);
/* A queue over a connected socket, as if ICReq/ICResp and Connect had
 * negotiated these values (the PDU fuzzer and tests drive the receive
 * path with it). Takes fd. */
int nvmf_queue_from_fd(int fd, bool hdgst, bool ddgst, uint8_t cpda, uint32_t maxh2cdata, uint32_t depth,
		       struct nvmf_queue **out);
/* Mark cid in flight for a transfer of len bytes at buf (no capsule is
 * sent): what the receive path then accepts for it. */
int nvmf_queue_track(struct nvmf_queue *q, uint16_t cid, void *buf, uint32_t len, int dir);

/* Sleep until bytes arrive on the connection or max_us pass (0 at once
 * when some are already waiting). For a caller with nothing else to do. */
void nvmf_queue_wait(struct nvmf_queue *q, uint32_t max_us);

/* Kill the connection (a command timed out): nothing more can land. */
void nvmf_queue_kill(struct nvmf_queue *q, int err, const char *why);

/*
 * Synchronous command on a queue that nobody else polls (the admin queue;
 * serialised by the queue's own lock, so the keep-alive thread may use it
 * too): picks a free cid, submits, reaps until it completes or timeout_ms
 * passes (the connection is then killed: -ETIMEDOUT). Returns 0, -EIO
 * with the status in *cqe, or -errno.
 */
int nvmf_queue_exec(struct nvmf_queue *q, struct gpunvme_sqe *cmd, void *buf, uint32_t len, int dir,
		    struct gpunvme_cqe *cqe, uint32_t timeout_ms);

/* ---- the GPU path: a CPU proxy per queue (proxy.c) -------------------------- */

struct nvmf_proxy_ns {
	uint32_t nsid, lba_shift;
};

/* A queue pair in host memory that another agent drives as it would a
 * PCIe controller's (SQEs with PRPs whose addresses are host virtual
 * addresses, the SQ tail doorbell in sq_db, CQEs polled by phase). */
struct nvmf_proxy_cfg {
	struct gpunvme_sqe *sq;
	void *cq;                     /* depth 16-byte entries, zeroed */
	uint32_t depth;
	volatile uint32_t *sq_db;
	uint16_t qid, cntlid;
	uint32_t page_size;
	const struct nvmf_proxy_ns *ns;
	uint32_t nns;
};

struct nvmf_proxy;
/* Start the proxy's thread over queue q (depth >= cfg->depth). */
int nvmf_proxy_start(struct nvmf_queue *q, const struct nvmf_proxy_cfg *cfg, struct nvmf_proxy **out);
/* Stop it (the queue stays the caller's); *forwarded: commands it sent. */
void nvmf_proxy_stop(struct nvmf_proxy *p, uint64_t *forwarded);

/* ---- the fabrics controller: admin queue, properties, keep-alive ---------- */

struct nvmf_ctrl {
	struct nvmf_params p;
	struct nvmf_queue *admin;
	uint16_t cntlid;
	uint64_t cap;
	uint32_t vs, cc;
	uint32_t kato_ms;           /* granted (what we sent in Connect) */
	uint32_t ioccsz;            /* I/O queue in-capsule data bytes (IOCCSZ) */
	pthread_t ka_thread;
	bool ka_running;
	pthread_mutex_t ka_lock;
	pthread_cond_t ka_cond;
	bool ka_stop;
	int ka_err;                 /* a keep-alive that failed */
};

/* Connect the admin queue and enable the controller (Property Set CC.EN,
 * wait CSTS.RDY within CAP.TO); start keep-alive when kato_ms. */
int nvmf_ctrl_connect(struct nvmf_ctrl *fc, const struct nvmf_params *p, uint32_t admin_depth);
/* CC.SHN and a bounded wait for CSTS.SHST, stop keep-alive, disconnect. */
void nvmf_ctrl_disconnect(struct nvmf_ctrl *fc);
/* Admin command (Identify, Features, Log Page, ...), data by SGL. */
int nvmf_ctrl_admin(struct nvmf_ctrl *fc, struct gpunvme_sqe *cmd, void *buf, uint32_t len, int dir,
		    struct gpunvme_cqe *cqe, uint32_t timeout_ms);
/* Property Get/Set (NVMe-oF 1.1 §3.5): size 4 or 8 bytes. */
int nvmf_prop_get(struct nvmf_ctrl *fc, uint32_t off, uint32_t size, uint64_t *val);
int nvmf_prop_set(struct nvmf_ctrl *fc, uint32_t off, uint32_t size, uint64_t val);
/* Called after Identify Controller: IOCCSZ for the I/O queues. */
void nvmf_ctrl_set_identify(struct nvmf_ctrl *fc, const struct gpunvme_id_ctrl *id);

#endif
