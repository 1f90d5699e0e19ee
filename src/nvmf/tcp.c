/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * NVMe/TCP queues (NVMe/TCP Transport Specification 1.0): one TCP
 * connection per queue; connection setup (§3.3: ICReq/ICResp), capsules
 * (§3.6.2.5-6), data transfers (§3.6.2.7-9: C2HData, R2T, H2CData) and the
 * fabrics Connect command (NVMe-oF 1.1 §3.3).
 *
 * The receive side is a state machine fed by non-blocking reads, so a
 * poll never blocks past its wait: common header, rest of the header (and
 * its digest), padding up to PDO, data straight into the command's buffer,
 * data digest. Sends are whole PDUs, bounded by the queue's timeout.
 */
#include <errno.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "nvmf/nvmf.h"
#include "nvmf/pdu.h"

/* Admin queue in-capsule data: Connect's 1024 bytes and small admin
 * writes. Linux's nvmet and SPDK accept 8 KiB on the admin queue. */
#define ADMIN_ICD 8192u

enum { RX_CH, RX_HDR, RX_PAD, RX_DATA, RX_DDGST };

struct tcmd {
	bool busy;
	uint8_t dir;
	bool incap;
	uint8_t *buf;
	uint32_t len;
	uint32_t done;     /* C2H: bytes landed; H2C: bytes sent after R2Ts */
};

struct nvmf_queue {
	struct nvmf_params p;
	int fd;
	uint16_t qid, cntlid;
	uint32_t depth, kato_ms, ioccsz;
	bool hdgst, ddgst;
	uint8_t cpda;
	uint32_t maxh2cdata;
	uint32_t icd;             /* in-capsule data bytes accepted */
	struct tcmd *cmds;
	int dead;
	char why[384];
	pthread_mutex_t lock;     /* nvmf_queue_exec callers */
	uint16_t next_cid;
	bool seq_err;             /* the last Connect failed with Command Sequence Error */
	uint64_t rx_bytes;        /* received by rd(), ever */

	/* receive state */
	int rx;
	uint8_t hbuf[NVMF_HDR_MAX];
	uint32_t hgot, hneed;
	struct nvmf_pdu pdu;
	uint32_t got, need;       /* within the current pad/data/digest piece */
	uint8_t scratch[NVMF_TERM_DATA_MAX > 256 ? NVMF_TERM_DATA_MAX : 256];
	uint8_t dg[4];
	struct tcmd *rxcmd;       /* C2HData target */
};

/* ---- errors ----------------------------------------------------------------------- */

/* Messages hold a URI and a reason; a very long URI is cut, on purpose. */
static void fmt_why(char *dst, size_t n, const char *f, ...) __attribute__((format(printf, 3, 4)));
static void fmt_why(char *dst, size_t n, const char *f, ...)
{
	va_list ap;
	va_start(ap, f);
	vsnprintf(dst, n, f, ap);
	va_end(ap);
}

static int die(struct nvmf_queue *q, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int die(struct nvmf_queue *q, int err, const char *fmt, ...)
{
	if (!q->dead) {
		char msg[256];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(msg, sizeof(msg), fmt, ap);
		va_end(ap);
		fmt_why(q->why, sizeof(q->why), "%s queue %u: %s", q->p.uri, q->qid, msg);
		q->dead = err;
		/* shut the socket now: no byte of a command we are about to
		 * fail may land in its buffer afterwards */
		if (q->fd >= 0) {
			close(q->fd);
			q->fd = -1;
		}
	}
	return gpunvme_set_error(q->dead, "%s", q->why);
}

int nvmf_queue_dead(const struct nvmf_queue *q)
{
	return q->dead;
}

const char *nvmf_queue_why(const struct nvmf_queue *q)
{
	return q->why;
}

uint32_t nvmf_queue_depth(const struct nvmf_queue *q)
{
	return q->depth;
}

uint64_t nvmf_queue_rx_bytes(const struct nvmf_queue *q)
{
	return q->rx_bytes;
}

void nvmf_queue_wait(struct nvmf_queue *q, uint32_t max_us)
{
	if (q->dead || q->fd < 0)
		return;
	struct pollfd pf = { q->fd, POLLIN, 0 };
	struct timespec ts = { (time_t)(max_us / 1000000), (long)(max_us % 1000000) * 1000 };
	ppoll(&pf, 1, &ts, NULL);
}

void nvmf_queue_kill(struct nvmf_queue *q, int err, const char *why)
{
	die(q, err, "%s", why);
}

/* ---- bounded socket I/O --------------------------------------------------------------- */

static int remaining_ms(uint64_t deadline)
{
	uint64_t now = gpunvme_now_ns();
	if (now >= deadline)
		return 0;
	uint64_t ms = (deadline - now + 999999) / 1000000;
	return ms > 60000 ? 60000 : (int)ms;
}

/* Send every byte of iov within the queue's timeout. */
static int send_all(struct nvmf_queue *q, struct iovec *iov, int n)
{
	uint64_t deadline = gpunvme_now_ns() + (uint64_t)q->p.timeout_ms * 1000000ull;
	while (n > 0) {
		if (q->fd < 0)
			return die(q, -ENOTCONN, "connection closed");
		struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)n };
		ssize_t w = sendmsg(q->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				return die(q, -ECONNRESET, "send failed: %s (target gone?)", strerror(errno));
			struct pollfd pf = { q->fd, POLLOUT, 0 };
			int ms = remaining_ms(deadline);
			if (ms == 0)
				return die(q, -ETIMEDOUT, "send did not drain within %u ms (target not reading)",
					   q->p.timeout_ms);
			poll(&pf, 1, ms);
			continue;
		}
		size_t left = (size_t)w;
		while (n > 0 && left >= iov->iov_len) {
			left -= iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + left;
			iov->iov_len -= left;
		}
	}
	return 0;
}

/* Read exactly len bytes within timeout_ms (connection setup only). */
static int recv_all(struct nvmf_queue *q, void *buf, size_t len, uint32_t timeout_ms, const char *what)
{
	uint64_t deadline = gpunvme_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	size_t got = 0;
	while (got < len) {
		ssize_t r = recv(q->fd, (uint8_t *)buf + got, len - got, MSG_DONTWAIT);
		if (r > 0) {
			got += (size_t)r;
			continue;
		}
		if (r == 0)
			return die(q, -ECONNRESET, "target closed the connection while we waited for %s", what);
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return die(q, -ECONNRESET, "receive from the target failed while waiting for %s: %s (target gone?)", what,
				   strerror(errno));
		int ms = remaining_ms(deadline);
		if (ms == 0)
			return die(q, -ETIMEDOUT, "no %s within %u ms", what, timeout_ms);
		struct pollfd pf = { q->fd, POLLIN, 0 };
		poll(&pf, 1, ms);
	}
	return 0;
}

static int tcp_connect(struct nvmf_queue *q)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC }, *ai = NULL;
	/* a numeric address resolves without the name service (static
	 * binaries, e.g. in the QEMU guest, have no NSS modules) */
	unsigned char a6[16];
	if (inet_pton(AF_INET, q->p.host, a6) == 1 || inet_pton(AF_INET6, q->p.host, a6) == 1)
		hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
	int rc = getaddrinfo(q->p.host, q->p.port, &hints, &ai);
	if (rc)
		return die(q, -EHOSTUNREACH, "cannot resolve %s: %s", q->p.host, gai_strerror(rc));
	int err = -ECONNREFUSED;
	char last[128] = "no address";
	uint64_t deadline = gpunvme_now_ns() + (uint64_t)q->p.timeout_ms * 1000000ull;
	for (struct addrinfo *a = ai; a; a = a->ai_next) {
		int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
		if (fd < 0)
			continue;
		if (connect(fd, a->ai_addr, a->ai_addrlen) < 0 && errno != EINPROGRESS) {
			err = -errno;
			snprintf(last, sizeof(last), "%s", strerror(errno));
			close(fd);
			continue;
		}
		struct pollfd pf = { fd, POLLOUT, 0 };
		int ms = remaining_ms(deadline);
		int pr = ms ? poll(&pf, 1, ms) : 0;
		int soerr = 0;
		socklen_t sl = sizeof(soerr);
		if (pr <= 0) {
			err = -ETIMEDOUT;
			snprintf(last, sizeof(last), "no answer within %u ms", q->p.timeout_ms);
			close(fd);
			continue;
		}
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
		if (soerr) {
			err = -soerr;
			snprintf(last, sizeof(last), "%s", strerror(soerr));
			close(fd);
			continue;
		}
		/* capsules are small and latency bound: no Nagle delay */
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		freeaddrinfo(ai);
		q->fd = fd;
		return 0;
	}
	freeaddrinfo(ai);
	q->dead = 0;
	fmt_why(q->why, sizeof(q->why), "%s: cannot connect to %s port %s: %s (is the target listening? "
		 "nvmet: check /sys/kernel/config/nvmet/ports)", q->p.uri, q->p.host, q->p.port, last);
	q->dead = err;
	return gpunvme_set_error(err, "%s", q->why);
}

/* ---- connection setup ------------------------------------------------------------------- */

static int icreq(struct nvmf_queue *q)
{
	uint8_t h[NVMF_HLEN_IC] = { 0 };
	nvmf_pdu_ch(h, NVMF_PDU_ICREQ, 0, NVMF_HLEN_IC, 0, NVMF_HLEN_IC);
	nvmf_put16(h + 8, 0);  /* PFV 0 */
	h[10] = 0;             /* HPDA: we take data at any dword offset */
	h[11] = (uint8_t)((q->p.hdgst ? 1 : 0) | (q->p.ddgst ? 2 : 0));
	nvmf_put32(h + 12, 0); /* MAXR2T 0's based: one R2T at a time per command */
	struct iovec iov = { h, sizeof(h) };
	int rc = send_all(q, &iov, 1);
	if (rc)
		return rc;
	uint8_t r[NVMF_HLEN_IC];
	if ((rc = recv_all(q, r, 8, q->p.timeout_ms, "ICResp")))
		return rc;
	if (r[0] == NVMF_PDU_C2H_TERM)
		return die(q, -ECONNREFUSED, "target refused the connection (C2HTermReq)");
	if (r[0] != NVMF_PDU_ICRESP || r[2] != NVMF_HLEN_IC || nvmf_get32(r + 4) != NVMF_HLEN_IC)
		return die(q, -EPROTO, "expected an ICResp, got PDU type 0x%02x HLEN %u PLEN %u (not an NVMe/TCP target?)",
			   r[0], r[2], nvmf_get32(r + 4));
	if ((rc = recv_all(q, r + 8, NVMF_HLEN_IC - 8, q->p.timeout_ms, "ICResp")))
		return rc;
	struct nvmf_pdu pdu;
	char why[160];
	if ((rc = nvmf_pdu_parse(r, sizeof(r), false, false, &pdu, why, sizeof(why))))
		return die(q, rc, "bad ICResp: %s", why);
	bool hd = pdu.dgst & 1, dd = pdu.dgst & 2;
	/* §3.6.2.3: the controller enables a digest only when asked */
	if ((hd && !q->p.hdgst) || (dd && !q->p.ddgst))
		return die(q, -EPROTO, "ICResp enables a digest we did not ask for (DGST 0x%x)", pdu.dgst);
	if (q->p.hdgst && !hd)
		return die(q, -EPROTONOSUPPORT, "target does not do header digests (retry with hdgst=0)");
	if (q->p.ddgst && !dd)
		return die(q, -EPROTONOSUPPORT, "target does not do data digests (retry with ddgst=0)");
	q->hdgst = hd;
	q->ddgst = dd;
	q->cpda = pdu.cpda;
	q->maxh2cdata = pdu.maxh2cdata;
	return 0;
}

static void reset_rx(struct nvmf_queue *q)
{
	q->rx = RX_CH;
	q->hgot = 0;
	q->hneed = 8;
	q->rxcmd = NULL;
}

/* Connect's status codes (NVMe-oF 1.1 Figure 21, SCT 1h) in words. */
static const char *connect_hint(uint16_t st)
{
	switch (gpunvme_status_code(st)) {
	case 0x180:
		return "incompatible format";
	case 0x181:
		return "controller busy";
	case 0x182:
		return "invalid parameters (unknown subsystem NQN, or queue size/ID out of range)";
	case 0x183:
		return "restart discovery";
	case 0x184:
		return "host not allowed (add the host NQN to the subsystem's allowed_hosts, or set attr_allow_any_host)";
	default:
		return gpunvme_status_str(st);
	}
}

static int fabric_connect(struct nvmf_queue *q, uint16_t cntlid, uint16_t *cntlid_out)
{
	uint8_t data[1024] = { 0 };
	memcpy(data, q->p.hostid, 16);
	nvmf_put16(data + 16, cntlid);
	memcpy(data + 256, q->p.subnqn, strlen(q->p.subnqn));
	memcpy(data + 512, q->p.hostnqn, strlen(q->p.hostnqn));
	struct gpunvme_sqe cmd = { .opc = 0x7f };
	uint8_t *b = (uint8_t *)&cmd;
	b[4] = 0x01;                                  /* FCTYPE Connect */
	nvmf_put16(b + 40, 0);                        /* RECFMT 0 */
	nvmf_put16(b + 42, q->qid);
	nvmf_put16(b + 44, (uint16_t)(q->depth - 1)); /* SQSIZE, 0's based */
	b[46] = 0;                                    /* CATTR */
	nvmf_put32(b + 48, q->qid ? 0 : q->kato_ms);  /* KATO, admin queue only */
	struct gpunvme_cqe e = { 0 };
	int rc = nvmf_queue_exec(q, &cmd, data, sizeof(data), NVMF_DIR_H2C, &e, q->p.timeout_ms);
	if (rc == -EIO) {
		uint16_t st = gpunvme_cqe_status(e.status);
		q->seq_err = gpunvme_status_code(st) == GPUNVME_SC_CMD_SEQ_ERROR;
		return gpunvme_set_error(-ECONNREFUSED, "%s: Connect (queue %u, %u entries) refused: %s; subsystem %s, host %s",
					 q->p.uri, q->qid, q->depth, connect_hint(st), q->p.subnqn, q->p.hostnqn);
	}
	if (rc)
		return rc;
	if (cntlid_out)
		*cntlid_out = (uint16_t)e.dw0;
	return 0;
}

static int queue_up_once(struct nvmf_queue *q, uint16_t cntlid, uint16_t *cntlid_out)
{
	q->dead = 0;
	q->why[0] = 0;
	reset_rx(q);
	memset(q->cmds, 0, q->depth * sizeof(*q->cmds));
	int rc = tcp_connect(q);
	if (!rc)
		rc = icreq(q);
	if (!rc) {
		/* Connect's data always travels in the capsule (NVMe/TCP §3.3) */
		q->icd = ADMIN_ICD;
		rc = fabric_connect(q, cntlid, cntlid_out);
		q->icd = q->qid ? q->ioccsz : ADMIN_ICD;
	}
	if (rc && q->fd >= 0) {
		close(q->fd);
		q->fd = -1;
	}
	if (rc && !q->dead)
		q->dead = rc;
	return rc;
}

/*
 * Connect, again while the target still holds the queue ID: a target
 * tears a queue down after its connection closed, asynchronously (Linux's
 * nvmet answers a Connect for a queue it has not released yet with Command
 * Sequence Error, "qid N has already been created"). Bounded by the
 * queue's timeout.
 */
static int queue_up(struct nvmf_queue *q, uint16_t cntlid, uint16_t *cntlid_out)
{
	uint64_t deadline = gpunvme_now_ns() + (uint64_t)q->p.timeout_ms * 1000000ull;
	for (uint32_t delay_ms = 5;; delay_ms = delay_ms < 200 ? delay_ms * 2 : 200) {
		q->seq_err = false;
		int rc = queue_up_once(q, cntlid, cntlid_out);
		if (!rc || !q->seq_err || gpunvme_now_ns() + delay_ms * 1000000ull > deadline)
			return rc;
		struct timespec ts = { 0, (long)delay_ms * 1000000 };
		nanosleep(&ts, NULL);
	}
}

int nvmf_queue_open(const struct nvmf_params *p, uint16_t qid, uint32_t depth, uint16_t cntlid, uint32_t kato_ms,
		    uint32_t ioccsz, struct nvmf_queue **out, uint16_t *cntlid_out)
{
	*out = NULL;
	if (depth < 2 || depth > 65536)
		return gpunvme_set_error(-EINVAL, "%s: queue of %u entries (2..65536)", p->uri, depth);
	struct nvmf_queue *q = calloc(1, sizeof(*q));
	if (!q)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	q->cmds = calloc(depth, sizeof(*q->cmds));
	if (!q->cmds) {
		free(q);
		return gpunvme_set_error(-ENOMEM, "out of memory");
	}
	q->p = *p;
	q->fd = -1;
	q->qid = qid;
	q->depth = depth;
	q->kato_ms = kato_ms;
	q->ioccsz = ioccsz;
	pthread_mutex_init(&q->lock, NULL);
	int rc = queue_up(q, cntlid, cntlid_out);
	if (rc) {
		nvmf_queue_close(q);
		return rc;
	}
	q->cntlid = cntlid;
	*out = q;
	return 0;
}

int nvmf_queue_from_fd(int fd, bool hdgst, bool ddgst, uint8_t cpda, uint32_t maxh2cdata, uint32_t depth,
		       struct nvmf_queue **out)
{
	struct nvmf_queue *q = calloc(1, sizeof(*q));
	if (!q || depth < 2 || !(q->cmds = calloc(depth, sizeof(*q->cmds)))) {
		free(q);
		close(fd);
		return -ENOMEM;
	}
	snprintf(q->p.uri, sizeof(q->p.uri), "tcp://fd");
	q->p.timeout_ms = 1000;
	q->fd = fd;
	q->qid = 1;
	q->depth = depth;
	q->hdgst = hdgst;
	q->ddgst = ddgst;
	q->cpda = cpda;
	q->maxh2cdata = maxh2cdata;
	pthread_mutex_init(&q->lock, NULL);
	reset_rx(q);
	*out = q;
	return 0;
}

int nvmf_queue_track(struct nvmf_queue *q, uint16_t cid, void *buf, uint32_t len, int dir)
{
	if (cid >= q->depth || q->cmds[cid].busy)
		return -EINVAL;
	q->cmds[cid] = (struct tcmd){ .busy = true, .dir = (uint8_t)dir, .buf = buf, .len = len };
	return 0;
}

int nvmf_queue_reconnect(struct nvmf_queue *q, uint16_t cntlid)
{
	if (q->fd >= 0) {
		close(q->fd);
		q->fd = -1;
	}
	q->cntlid = cntlid;
	return queue_up(q, cntlid, NULL);
}

void nvmf_queue_close(struct nvmf_queue *q)
{
	if (!q)
		return;
	if (q->fd >= 0)
		close(q->fd);
	pthread_mutex_destroy(&q->lock);
	free(q->cmds);
	free(q);
}

/* ---- submission ---------------------------------------------------------------------------- */

int nvmf_queue_submit(struct nvmf_queue *q, struct gpunvme_sqe *cmd, void *buf, uint32_t len, int dir)
{
	if (q->dead)
		return gpunvme_set_error(q->dead, "%s", q->why);
	if (cmd->cid >= q->depth || q->cmds[cmd->cid].busy)
		return gpunvme_set_error(-EINVAL, "%s queue %u: command id %u busy or out of range", q->p.uri, q->qid,
					 cmd->cid);
	struct tcmd *t = &q->cmds[cmd->cid];
	bool incap = dir == NVMF_DIR_H2C && len && len <= q->icd;
	/* NVMe-oF §2.3: SGLs only; PSDT 01b. A Data Block descriptor with
	 * the Offset subtype (0x01) for in-capsule data at offset 0 of the
	 * capsule's data; a Transport SGL Data Block (type 5h, subtype Ah)
	 * for data moved by C2HData/H2CData (NVMe/TCP §3.4.2). */
	uint8_t *b = (uint8_t *)cmd;
	cmd->flags = (uint8_t)((cmd->flags & 0x3f) | 0x40);
	memset(b + 24, 0, 16);
	nvmf_put32(b + 32, len);
	b[39] = incap ? 0x01 : 0x5a;

	uint8_t h[NVMF_HLEN_CMD + NVMF_DGST + 128];
	uint8_t pad[128] = { 0 };
	uint8_t dg[4];
	uint32_t hl = NVMF_HLEN_CMD + (q->hdgst ? NVMF_DGST : 0);
	uint32_t pdo = incap ? nvmf_pdu_data_offset(NVMF_HLEN_CMD, q->hdgst, q->cpda) : 0;
	uint32_t plen = incap ? pdo + len + (q->ddgst ? NVMF_DGST : 0) : hl;
	uint8_t flags = (uint8_t)((q->hdgst ? NVMF_F_HDGST : 0) | (incap && q->ddgst ? NVMF_F_DDGST : 0));
	nvmf_pdu_ch(h, NVMF_PDU_CMD, flags, NVMF_HLEN_CMD, (uint8_t)pdo, plen);
	memcpy(h + 8, cmd, 64);
	if (q->hdgst)
		nvmf_pdu_seal(h, NVMF_HLEN_CMD);
	struct iovec iov[4];
	int n = 0;
	iov[n++] = (struct iovec){ h, hl };
	if (incap) {
		if (pdo > hl)
			iov[n++] = (struct iovec){ pad, pdo - hl };
		iov[n++] = (struct iovec){ buf, len };
		if (q->ddgst) {
			nvmf_put32(dg, gpunvme_crc32c(0, buf, len));
			iov[n++] = (struct iovec){ dg, 4 };
		}
	}
	*t = (struct tcmd){ .busy = true, .dir = (uint8_t)dir, .incap = incap, .buf = buf, .len = len,
			    .done = incap ? len : 0 };
	int rc = send_all(q, iov, n);
	return rc;
}

/* H2CData PDUs answering an R2T for [off, off + len) of t (§3.6.2.8: at
 * most MAXH2CDATA bytes each, the last one flagged LAST_PDU). */
static int send_h2c(struct nvmf_queue *q, uint16_t cid, uint16_t ttag, struct tcmd *t, uint32_t off, uint32_t len)
{
	while (len > 0) {
		uint32_t chunk = len < q->maxh2cdata ? len : q->maxh2cdata;
		uint8_t h[NVMF_HLEN_DATA + NVMF_DGST], pad[128] = { 0 }, dg[4];
		uint32_t hl = NVMF_HLEN_DATA + (q->hdgst ? NVMF_DGST : 0);
		uint32_t pdo = nvmf_pdu_data_offset(NVMF_HLEN_DATA, q->hdgst, q->cpda);
		uint8_t flags = (uint8_t)((q->hdgst ? NVMF_F_HDGST : 0) | (q->ddgst ? NVMF_F_DDGST : 0) |
					  (chunk == len ? NVMF_F_LAST : 0));
		nvmf_pdu_ch(h, NVMF_PDU_H2C_DATA, flags, NVMF_HLEN_DATA, (uint8_t)pdo,
			    pdo + chunk + (q->ddgst ? NVMF_DGST : 0));
		nvmf_put16(h + 8, cid);
		nvmf_put16(h + 10, ttag);
		nvmf_put32(h + 12, off);
		nvmf_put32(h + 16, chunk);
		nvmf_put32(h + 20, 0);
		if (q->hdgst)
			nvmf_pdu_seal(h, NVMF_HLEN_DATA);
		struct iovec iov[4];
		int n = 0;
		iov[n++] = (struct iovec){ h, hl };
		if (pdo > hl)
			iov[n++] = (struct iovec){ pad, pdo - hl };
		iov[n++] = (struct iovec){ t->buf + off, chunk };
		if (q->ddgst) {
			nvmf_put32(dg, gpunvme_crc32c(0, t->buf + off, chunk));
			iov[n++] = (struct iovec){ dg, 4 };
		}
		int rc = send_all(q, iov, n);
		if (rc)
			return rc;
		off += chunk;
		len -= chunk;
		t->done = off;
	}
	return 0;
}

/* ---- receive --------------------------------------------------------------------------------- */

/* A finished command: its slot is free, its completion goes out. */
static void complete(struct nvmf_queue *q, uint16_t cid, const struct gpunvme_cqe *e, int err, struct nvmf_cpl *out)
{
	q->cmds[cid].busy = false;
	out->cqe = *e;
	out->cqe.cid = cid;
	out->err = err;
}

/* The header in hbuf is whole: act on it. Returns 0, 1 when a completion
 * went to *out, or -errno (dead). */
static int on_header(struct nvmf_queue *q, struct nvmf_cpl *out)
{
	struct nvmf_pdu *p = &q->pdu;
	char why[160];
	int rc = nvmf_pdu_parse(q->hbuf, q->hgot, q->hdgst, q->ddgst, p, why, sizeof(why));
	if (rc)
		return die(q, rc, "bad PDU from the target: %s", why);
	q->got = 0;
	switch (p->type) {
	case NVMF_PDU_RSP: {
		struct gpunvme_cqe e;
		memcpy(&e, q->hbuf + 8, sizeof(e));
		if (e.cid >= q->depth || !q->cmds[e.cid].busy)
			return die(q, -EPROTO, "completion for command id %u, which is not in flight", e.cid);
		struct tcmd *t = &q->cmds[e.cid];
		uint16_t st = gpunvme_cqe_status(e.status);
		/* a successful read must have landed every byte: never a
		 * silent short read */
		if (!st && t->dir == NVMF_DIR_C2H && t->done != t->len)
			return die(q, -EPROTO, "command %u completed with %u of %u bytes transferred", e.cid, t->done,
				   t->len);
		if (!st && t->dir == NVMF_DIR_H2C && t->done != t->len)
			return die(q, -EPROTO, "write %u completed after %u of %u bytes were asked for", e.cid, t->done,
				   t->len);
		complete(q, e.cid, &e, 0, out);
		reset_rx(q);
		return 1;
	}
	case NVMF_PDU_C2H_DATA: {
		struct tcmd *t = p->cccid < q->depth ? &q->cmds[p->cccid] : NULL;
		if (!t || !t->busy || t->dir != NVMF_DIR_C2H)
			return die(q, -EPROTO, "C2HData for command id %u, which is not a read in flight", p->cccid);
		/* data in order, inside the buffer (§3.6.2.7: DATAO is the
		 * offset of this PDU's data in the command's transfer) */
		if (p->off != t->done || p->len > t->len - t->done)
			return die(q, -EPROTO, "C2HData for command %u at offset %u, %u bytes: expected offset %u, at most %u",
				   p->cccid, p->off, p->len, t->done, t->len - t->done);
		q->rxcmd = t;
		q->need = p->pad;
		q->rx = p->pad ? RX_PAD : RX_DATA;
		if (!p->pad)
			q->need = p->data_len;
		return 0;
	}
	case NVMF_PDU_R2T: {
		struct tcmd *t = p->cccid < q->depth ? &q->cmds[p->cccid] : NULL;
		if (!t || !t->busy || t->dir != NVMF_DIR_H2C || t->incap)
			return die(q, -EPROTO, "R2T for command id %u, which is not a write waiting for R2T", p->cccid);
		if (p->off != t->done || p->len > t->len - t->done)
			return die(q, -EPROTO, "R2T for command %u asks for %u bytes at %u: %u of %u sent", p->cccid, p->len,
				   p->off, t->done, t->len);
		reset_rx(q);
		rc = send_h2c(q, p->cccid, p->ttag, t, p->off, p->len);
		return rc;
	}
	case NVMF_PDU_C2H_TERM:
		q->rx = RX_PAD; /* read its data (the offending header), then fail */
		q->need = p->pad + p->data_len;
		if (!q->need)
			return die(q, -ECONNRESET, "target terminated the connection (C2HTermReq, FES 0x%x, FEI %u)", p->fes,
				   p->fei);
		return 0;
	default:
		return die(q, -EPROTO, "unexpected PDU type 0x%02x from the target", p->type);
	}
}

/* C2H data landed whole: check its digest, finish on SUCCESS. */
static int on_data_done(struct nvmf_queue *q, struct nvmf_cpl *out)
{
	struct nvmf_pdu *p = &q->pdu;
	struct tcmd *t = q->rxcmd;
	if (p->ddgst) {
		uint32_t got = nvmf_get32(q->dg), calc = gpunvme_crc32c(0, t->buf + p->off, p->len);
		if (got != calc)
			return die(q, -EBADMSG, "data digest mismatch on command %u (got 0x%08x, computed 0x%08x)", p->cccid,
				   got, calc);
	}
	t->done += p->len;
	reset_rx(q);
	if (p->flags & NVMF_F_SUCCESS) {
		/* §3.6.2.7: SUCCESS stands for a CapsuleResp with status 0 */
		if (t->done != t->len)
			return die(q, -EPROTO, "command %u reported success after %u of %u bytes", p->cccid, t->done,
				   t->len);
		struct gpunvme_cqe e = { 0 };
		complete(q, p->cccid, &e, 0, out);
		return 1;
	}
	return 0;
}

/* Read into dst what is available, at most len. 0 when none now; > 0
 * bytes; < 0 dead. */
static ssize_t rd(struct nvmf_queue *q, void *dst, size_t len)
{
	for (;;) {
		ssize_t r = recv(q->fd, dst, len, MSG_DONTWAIT);
		if (r > 0) {
			q->rx_bytes += (uint64_t)r;
			return r;
		}
		if (r == 0)
			return die(q, -ECONNRESET, "target closed the connection");
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		return die(q, -ECONNRESET, "receive from the target failed: %s (target gone?)", strerror(errno));
	}
}

int nvmf_queue_reap(struct nvmf_queue *q, struct nvmf_cpl *out, uint32_t max, uint32_t wait_ms)
{
	if (q->dead)
		return gpunvme_set_error(q->dead, "%s", q->why);
	if (wait_ms) {
		struct pollfd pf = { q->fd, POLLIN, 0 };
		poll(&pf, 1, (int)wait_ms);
	}
	uint32_t n = 0;
	while (n < max) {
		ssize_t r;
		switch (q->rx) {
		case RX_CH:
		case RX_HDR:
			r = rd(q, q->hbuf + q->hgot, q->hneed - q->hgot);
			if (r <= 0)
				goto out;
			q->hgot += (uint32_t)r;
			if (q->hgot < q->hneed)
				continue;
			if (q->rx == RX_CH) {
				uint32_t hl = nvmf_pdu_hlen(q->hbuf[0]);
				bool ic = q->hbuf[0] == NVMF_PDU_ICREQ || q->hbuf[0] == NVMF_PDU_ICRESP;
				if (!hl || q->hbuf[2] != hl || ic)
					return die(q, -EPROTO, "bad PDU from the target: type 0x%02x, HLEN %u", q->hbuf[0],
						   q->hbuf[2]);
				q->hneed = hl + (q->hdgst ? NVMF_DGST : 0);
				q->rx = RX_HDR;
				if (q->hgot < q->hneed)
					continue;
			}
			{
				int rc = on_header(q, &out[n]);
				if (rc < 0)
					return rc;
				n += (uint32_t)rc;
			}
			break;
		case RX_PAD: {
			/* padding up to PDO (and a TermReq's data): discarded */
			size_t want = q->need - q->got;
			if (want > sizeof(q->scratch))
				want = sizeof(q->scratch);
			r = rd(q, q->scratch, want);
			if (r <= 0)
				goto out;
			q->got += (uint32_t)r;
			if (q->got < q->need)
				continue;
			if (q->pdu.type == NVMF_PDU_C2H_TERM)
				return die(q, -ECONNRESET, "target terminated the connection (C2HTermReq, FES 0x%x, FEI %u)",
					   q->pdu.fes, q->pdu.fei);
			q->rx = RX_DATA;
			q->got = 0;
			q->need = q->pdu.data_len;
			break;
		}
		case RX_DATA:
			/* straight into the command's buffer */
			r = rd(q, q->rxcmd->buf + q->pdu.off + q->got, q->need - q->got);
			if (r <= 0)
				goto out;
			q->got += (uint32_t)r;
			if (q->got < q->need)
				continue;
			q->got = 0;
			if (q->pdu.ddgst) {
				q->rx = RX_DDGST;
				q->need = 4;
				continue;
			}
			{
				int rc = on_data_done(q, &out[n]);
				if (rc < 0)
					return rc;
				n += (uint32_t)rc;
			}
			break;
		case RX_DDGST:
			r = rd(q, q->dg + q->got, 4 - q->got);
			if (r <= 0)
				goto out;
			q->got += (uint32_t)r;
			if (q->got < 4)
				continue;
			{
				int rc = on_data_done(q, &out[n]);
				if (rc < 0)
					return rc;
				n += (uint32_t)rc;
			}
			break;
		}
	}
out:
	if (q->dead)
		return gpunvme_set_error(q->dead, "%s", q->why);
	return (int)n;
}

/* ---- synchronous commands ------------------------------------------------------------------------ */

int nvmf_queue_exec(struct nvmf_queue *q, struct gpunvme_sqe *cmd, void *buf, uint32_t len, int dir,
		    struct gpunvme_cqe *cqe, uint32_t timeout_ms)
{
	pthread_mutex_lock(&q->lock);
	int rc;
	uint16_t cid = 0xffff;
	for (uint32_t i = 0; i < q->depth; i++) {
		uint16_t c = (uint16_t)((q->next_cid + i) % q->depth);
		if (!q->cmds[c].busy) {
			cid = c;
			break;
		}
	}
	if (cid == 0xffff) {
		rc = gpunvme_set_error(-EBUSY, "%s queue %u: every command id in use", q->p.uri, q->qid);
		goto out;
	}
	q->next_cid = (uint16_t)((cid + 1) % q->depth);
	cmd->cid = cid;
	if ((rc = nvmf_queue_submit(q, cmd, buf, len, dir)))
		goto out;
	uint64_t deadline = gpunvme_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	for (;;) {
		struct nvmf_cpl c[4];
		int ms = remaining_ms(deadline);
		int n = nvmf_queue_reap(q, c, 4, ms > 10 ? 10 : (uint32_t)ms);
		if (n < 0) {
			rc = n;
			goto out;
		}
		for (int i = 0; i < n; i++) {
			if (c[i].cqe.cid != cid)
				continue; /* an earlier command's late answer */
			if (cqe)
				*cqe = c[i].cqe;
			if (c[i].err) {
				rc = c[i].err;
				goto out;
			}
			uint16_t st = gpunvme_cqe_status(c[i].cqe.status);
			rc = st ? -EIO : 0;
			if (st)
				gpunvme_set_error(-EIO, "%s (opcode 0x%02x) failed: %s",
						  cmd->opc == 0x7f ? "Fabrics command" : gpunvme_opcode_str(1, cmd->opc),
						  cmd->opc, gpunvme_status_str(st));
			goto out;
		}
		if (!ms) {
			rc = die(q, -ETIMEDOUT, "%s (opcode 0x%02x) not answered within %u ms",
				 cmd->opc == 0x7f ? "Fabrics command" : gpunvme_opcode_str(1, cmd->opc), cmd->opc,
				 timeout_ms);
			goto out;
		}
	}
out:
	pthread_mutex_unlock(&q->lock);
	return rc;
}
