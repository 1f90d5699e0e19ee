/* SPDX-License-Identifier: BSD-2-Clause */
/* The tests' NVMe/TCP target (fake_target.h). Blocking sockets with a
 * receive timeout, one thread per connection. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "fake_target.h"
#include "gpunvme/spec/nvme.h"
#include "nvmf/pdu.h"

#define MAX_CONNS 64

struct conn {
	struct fake_target *t;
	int fd;
	pthread_t th;
	bool used;
	bool done;          /* its thread has finished (under t->lock) */
	bool hd, dd;
	uint16_t qid;
	/* writes waiting for their data, in arrival order; the head has the
	 * one R2T outstanding (MAXR2T 0 per the host's ICReq) */
	struct { uint16_t cid; uint64_t off; uint32_t len, got; } w[256];
	uint32_t wh, wn;
};

struct fake_target {
	struct ft_config cfg;
	int lfd;
	uint16_t port;
	pthread_t accept_th;
	pthread_mutex_t lock;
	uint8_t *ns;
	uint64_t ns_len;
	bool mapped;
	uint32_t cc, csts;
	uint16_t next_cntlid;
	int fault;              /* atomic */
	uint32_t keepalives;    /* atomic */
	bool stop;
	bool dead;              /* die_after reached (atomic) */
	uint64_t served;        /* read bytes sent (atomic) */
	struct conn conns[MAX_CONNS];
};

static int rd_full(int fd, void *b, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = recv(fd, (uint8_t *)b + got, n - got, 0);
		if (r <= 0) {
			if (r < 0 && errno == EINTR)
				continue;
			return -1;
		}
		got += (size_t)r;
	}
	return 0;
}

static int wr_full(int fd, const void *b, size_t n)
{
	size_t put = 0;
	while (put < n) {
		ssize_t w = send(fd, (const uint8_t *)b + put, n - put, MSG_NOSIGNAL);
		if (w <= 0) {
			if (w < 0 && errno == EINTR)
				continue;
			return -1;
		}
		put += (size_t)w;
	}
	return 0;
}

static int take_fault(struct fake_target *t)
{
	return __atomic_exchange_n(&t->fault, FT_NONE, __ATOMIC_ACQ_REL);
}

/* ---- sending ------------------------------------------------------------------ */

static int send_rsp(struct conn *k, uint16_t cid, uint16_t status, uint32_t dw0, uint32_t dw1, bool bad_hdgst,
		    uint8_t hlen)
{
	uint8_t h[NVMF_HLEN_RSP + 4] = { 0 };
	uint32_t hl = NVMF_HLEN_RSP + (k->hd ? 4 : 0);
	nvmf_pdu_ch(h, NVMF_PDU_RSP, k->hd ? NVMF_F_HDGST : 0, hlen ? hlen : NVMF_HLEN_RSP, 0, hl);
	struct gpunvme_cqe e = { .dw0 = dw0, .dw1 = dw1, .sqid = k->qid, .cid = cid, .status = (uint16_t)(status << 1) };
	memcpy(h + 8, &e, sizeof(e));
	if (k->hd)
		nvmf_pdu_seal(h, NVMF_HLEN_RSP);
	if (bad_hdgst)
		h[NVMF_HLEN_RSP] ^= 0xff;
	return wr_full(k->fd, h, hl);
}

static int send_c2h(struct conn *k, uint16_t cid, const uint8_t *data, uint32_t off, uint32_t len, uint8_t extra,
		    int fault)
{
	struct fake_target *t = k->t;
	uint8_t h[NVMF_HLEN_DATA + 4 + 128] = { 0 };
	uint32_t hl = NVMF_HLEN_DATA + (k->hd ? 4 : 0);
	uint32_t pdo = nvmf_pdu_data_offset(NVMF_HLEN_DATA, k->hd, 0);
	(void)t;
	uint32_t plen = pdo + len + (k->dd ? 4 : 0);
	if (fault == FT_BAD_PLEN)
		plen += 8;
	uint8_t flags = (uint8_t)((k->hd ? NVMF_F_HDGST : 0) | (k->dd ? NVMF_F_DDGST : 0) | extra);
	nvmf_pdu_ch(h, NVMF_PDU_C2H_DATA, flags, NVMF_HLEN_DATA, (uint8_t)pdo, plen);
	nvmf_put16(h + 8, cid);
	nvmf_put32(h + 12, fault == FT_DATA_OOB ? off + 1024 * 1024 : off);
	nvmf_put32(h + 16, len);
	if (k->hd)
		nvmf_pdu_seal(h, NVMF_HLEN_DATA);
	if (fault == FT_BAD_HDGST)
		h[NVMF_HLEN_DATA] ^= 0xff;
	if (wr_full(k->fd, h, pdo) || wr_full(k->fd, data, len))
		return -1;
	(void)hl;
	if (k->dd) {
		uint8_t dg[4];
		nvmf_put32(dg, gpunvme_crc32c(0, data, len) ^ (fault == FT_BAD_DDGST ? 1u : 0u));
		if (wr_full(k->fd, dg, 4))
			return -1;
	}
	return 0;
}

static int send_r2t(struct conn *k)
{
	uint8_t h[NVMF_HLEN_DATA + 4] = { 0 };
	nvmf_pdu_ch(h, NVMF_PDU_R2T, k->hd ? NVMF_F_HDGST : 0, NVMF_HLEN_DATA, 0, NVMF_HLEN_DATA + (k->hd ? 4 : 0));
	nvmf_put16(h + 8, k->w[k->wh].cid);
	nvmf_put16(h + 10, (uint16_t)(0x5500 + k->wh));
	nvmf_put32(h + 12, 0);
	nvmf_put32(h + 16, k->w[k->wh].len);
	if (k->hd)
		nvmf_pdu_seal(h, NVMF_HLEN_DATA);
	return wr_full(k->fd, h, NVMF_HLEN_DATA + (k->hd ? 4 : 0));
}

/* An H2CData PDU whose header is in h: its data into the namespace; the
 * write completes with its last byte. */
static int h2c_data(struct conn *k, const uint8_t *h, uint32_t hl)
{
	struct fake_target *t = k->t;
	struct nvmf_pdu p;
	char why[160];
	if (nvmf_pdu_parse(h, hl, k->hd, k->dd, &p, why, sizeof(why))) {
		fprintf(stderr, "fake target: bad H2CData: %s\n", why);
		return -1;
	}
	if (!k->wn)
		return -1;
	uint32_t i = k->wh;
	if (p.cccid != k->w[i].cid || p.ttag != 0x5500 + i || p.off != k->w[i].got || p.len > k->w[i].len - k->w[i].got ||
	    p.len > t->cfg.maxh2cdata) {
		fprintf(stderr, "fake target: H2CData cid %u ttag %u off %u len %u unexpected\n", p.cccid, p.ttag, p.off, p.len);
		return -1;
	}
	uint8_t pad[256];
	uint8_t *dst = t->ns + k->w[i].off + p.off;
	if ((p.pad && rd_full(k->fd, pad, p.pad)) || rd_full(k->fd, dst, p.len))
		return -1;
	if (p.ddgst) {
		uint8_t dg[4];
		if (rd_full(k->fd, dg, 4) || nvmf_get32(dg) != gpunvme_crc32c(0, dst, p.len)) {
			fprintf(stderr, "fake target: H2CData digest mismatch\n");
			return -1;
		}
	}
	k->w[i].got += p.len;
	bool last = k->w[i].got == k->w[i].len;
	if (!!(p.flags & NVMF_F_LAST) != last)
		return -1;
	if (!last)
		return 0;
	uint16_t cid = k->w[i].cid;
	k->wh = (k->wh + 1) % 256;
	k->wn--;
	if (send_rsp(k, cid, 0, 0, 0, false, 0))
		return -1;
	return k->wn ? send_r2t(k) : 0;
}

/* ---- commands ------------------------------------------------------------------ */

static void identify(struct fake_target *t, const struct gpunvme_sqe *c, uint8_t *out)
{
	memset(out, 0, 4096);
	uint8_t cns = c->identify.cns;
	if (cns == GPUNVME_CNS_CTRL) {
		struct gpunvme_id_ctrl *id = (void *)out;
		memset(id->sn, ' ', sizeof(id->sn));
		memset(id->mn, ' ', sizeof(id->mn));
		memset(id->fr, ' ', sizeof(id->fr));
		memcpy(id->sn, "FAKE0001", 8);
		memcpy(id->mn, "gpunvme fake NVMe/TCP target", 28);
		memcpy(id->fr, "1.0", 3);
		id->mdts = 5; /* 128 KiB: requests split into several commands */
		id->nn = 1;
		id->vwc = 1;
		snprintf(id->subnqn, sizeof(id->subnqn), "%s", FT_NQN);
		nvmf_put32(id->nvmof, (64 + t->cfg.icd) / 16); /* IOCCSZ */
		nvmf_put32(id->nvmof + 4, 1);                  /* IORCSZ */
	} else if (cns == GPUNVME_CNS_ACTIVE_NS_LIST) {
		if (c->nsid < 1)
			nvmf_put32(out, 1);
	} else if (cns == GPUNVME_CNS_NS && c->nsid == 1) {
		struct gpunvme_id_ns *ns = (void *)out;
		ns->nsze = ns->ncap = ns->nuse = t->ns_len >> t->cfg.lba_shift;
		ns->lbaf[0].lbads = (uint8_t)t->cfg.lba_shift;
	}
}

static void disc_log(struct fake_target *t, uint8_t *out, uint32_t len)
{
	uint8_t page[2048] = { 0 };
	uint64_t gen = 1, numrec = 1;
	memcpy(page, &gen, 8);
	memcpy(page + 8, &numrec, 8);
	uint8_t *e = page + 1024;
	e[0] = 3; /* TCP */
	e[1] = 1; /* IPv4 */
	e[2] = 2; /* NVM subsystem */
	nvmf_put16(e + 6, 0xffff);
	nvmf_put16(e + 8, 32);
	memset(e + 32, ' ', 32);
	char port[8];
	int n = snprintf(port, sizeof(port), "%u", t->port);
	memcpy(e + 32, port, (size_t)n);
	memcpy(e + 256, FT_NQN, strlen(FT_NQN));
	memset(e + 512, ' ', 256);
	memcpy(e + 512, "127.0.0.1", 9);
	memcpy(out, page, len < sizeof(page) ? len : sizeof(page));
}

/* Handle one command capsule; data = in-capsule data (len dlen). Returns
 * 0 to go on, -1 to close the connection. */
static int command(struct conn *k, struct gpunvme_sqe *c, uint8_t *data, uint32_t dlen)
{
	struct fake_target *t = k->t;
	const uint8_t *b = (const uint8_t *)c;
	uint32_t sgl_len = nvmf_get32(b + 32);
	uint8_t sgl_type = b[39];
	if (c->opc == 0x7f) {
		uint8_t fct = b[4];
		if (fct == 0x01) { /* Connect */
			if (dlen != 1024)
				return send_rsp(k, c->cid, 0x182, 0, 0, false, 0);
			k->qid = nvmf_get16(b + 42);
			if (t->cfg.reject_host)
				return send_rsp(k, c->cid, 0x184, 0, 0, false, 0);
			if (strncmp((const char *)data + 256, FT_NQN, 256) &&
			    strncmp((const char *)data + 256, "nqn.2014-08.org.nvmexpress.discovery", 256))
				return send_rsp(k, c->cid, 0x182, 0, 0, false, 0);
			uint16_t cntlid;
			pthread_mutex_lock(&t->lock);
			if (k->qid == 0) {
				cntlid = ++t->next_cntlid;
				t->cc = 0;
				t->csts = 0;
			} else {
				cntlid = nvmf_get16(data + 16);
			}
			pthread_mutex_unlock(&t->lock);
			return send_rsp(k, c->cid, 0, cntlid, 0, false, 0);
		}
		uint32_t off = nvmf_get32(b + 44);
		if (fct == 0x04) { /* Property Get */
			uint64_t v = 0;
			pthread_mutex_lock(&t->lock);
			if (off == GPUNVME_REG_CAP)
				v = 127ull | (1ull << 16) /* CQR */ | (2ull << 24) /* TO 1 s */ | (1ull << 37) /* NVM */;
			else if (off == GPUNVME_REG_VS)
				v = 0x00010400;
			else if (off == GPUNVME_REG_CC)
				v = t->cc;
			else if (off == GPUNVME_REG_CSTS)
				v = t->csts;
			pthread_mutex_unlock(&t->lock);
			return send_rsp(k, c->cid, 0, (uint32_t)v, (uint32_t)(v >> 32), false, 0);
		}
		if (fct == 0x00) { /* Property Set */
			uint32_t v = nvmf_get32(b + 48);
			pthread_mutex_lock(&t->lock);
			if (off == GPUNVME_REG_CC) {
				t->cc = v;
				t->csts = (v & GPUNVME_CC_EN) ? GPUNVME_CSTS_RDY : 0;
				if ((v >> GPUNVME_CC_SHN_SHIFT) & 3)
					t->csts |= (uint32_t)GPUNVME_SHST_COMPLETE << 2;
			}
			pthread_mutex_unlock(&t->lock);
			return send_rsp(k, c->cid, 0, 0, 0, false, 0);
		}
		return send_rsp(k, c->cid, GPUNVME_SC_INVALID_OPCODE, 0, 0, false, 0);
	}
	if (k->qid == 0) {
		uint8_t buf[4096];
		switch (c->opc) {
		case GPUNVME_ADM_IDENTIFY:
			identify(t, c, buf);
			if (send_c2h(k, c->cid, buf, 0, sgl_len < 4096 ? sgl_len : 4096, 0, 0))
				return -1;
			return send_rsp(k, c->cid, 0, 0, 0, false, 0);
		case GPUNVME_ADM_SET_FEATURES:
			if ((c->cdw[0] & 0xff) == GPUNVME_FEAT_NUM_QUEUES) {
				uint32_t n = t->cfg.nr_queues - 1;
				return send_rsp(k, c->cid, 0, n | (n << 16), 0, false, 0);
			}
			return send_rsp(k, c->cid, 0, 0, 0, false, 0);
		case GPUNVME_ADM_KEEP_ALIVE:
			__atomic_add_fetch(&t->keepalives, 1, __ATOMIC_RELAXED);
			return send_rsp(k, c->cid, 0, 0, 0, false, 0);
		case GPUNVME_ADM_GET_LOG_PAGE:
			if ((c->cdw[0] & 0xff) == 0x70) {
				uint8_t *lp = calloc(1, sgl_len);
				if (!lp)
					return -1;
				disc_log(t, lp, sgl_len);
				int rc = send_c2h(k, c->cid, lp, 0, sgl_len, 0, 0);
				free(lp);
				return rc ? -1 : send_rsp(k, c->cid, 0, 0, 0, false, 0);
			}
			return send_rsp(k, c->cid, 0x0109 /* invalid log page */, 0, 0, false, 0);
		default:
			return send_rsp(k, c->cid, GPUNVME_SC_INVALID_OPCODE, 0, 0, false, 0);
		}
	}
	/* I/O */
	uint64_t bs = 1ull << t->cfg.lba_shift;
	uint64_t slba = c->rw.slba, nlb = (uint64_t)c->rw.nlb + 1;
	uint64_t off = slba * bs, len = nlb * bs;
	switch (c->opc) {
	case GPUNVME_CMD_FLUSH:
		if (t->mapped)
			msync(t->ns, t->ns_len, MS_SYNC);
		return send_rsp(k, c->cid, 0, 0, 0, false, 0);
	case GPUNVME_CMD_READ: {
		if (slba >= (t->ns_len >> t->cfg.lba_shift) || off + len > t->ns_len)
			return send_rsp(k, c->cid, GPUNVME_SC_LBA_RANGE, 0, 0, false, 0);
		if (len != sgl_len || sgl_type != 0x5a)
			return send_rsp(k, c->cid, GPUNVME_SC_INVALID_FIELD, 0, 0, false, 0);
		int f = take_fault(t);
		if (f == FT_STALL)
			return 0;
		if (f == FT_UNKNOWN_TYPE) {
			uint8_t h[8];
			nvmf_pdu_ch(h, 0x0e, 0, 8, 0, 8);
			return wr_full(k->fd, h, 8);
		}
		if (f == FT_TERM) {
			uint8_t h[NVMF_HLEN_TERM] = { 0 };
			nvmf_pdu_ch(h, NVMF_PDU_C2H_TERM, 0, NVMF_HLEN_TERM, 0, NVMF_HLEN_TERM);
			nvmf_put16(h + 8, NVMF_FES_UNSUPPORTED);
			wr_full(k->fd, h, sizeof(h));
			return -1;
		}
		if (f == FT_CID_MISMATCH)
			return send_rsp(k, (uint16_t)(c->cid + 7), 0, 0, 0, false, 0);
		if (f == FT_BAD_HLEN)
			return send_rsp(k, c->cid, 0, 0, 0, false, 16);
		uint32_t chunk = t->cfg.c2h_chunk;
		uint32_t total = (uint32_t)len;
		if (f == FT_SHORT_C2H || f == FT_CLOSE_MID)
			total = (uint32_t)len / 2;
		for (uint32_t o = 0; o < total; o += chunk) {
			uint32_t n = total - o < chunk ? total - o : chunk;
			if (t->cfg.die_after &&
			    __atomic_add_fetch(&t->served, n, __ATOMIC_RELAXED) > t->cfg.die_after) {
				/* die mid-transfer: this connection now, the rest by ft_drop_all */
				__atomic_store_n(&t->dead, true, __ATOMIC_RELEASE);
				ft_drop_all(t);
				return -1;
			}
			bool last = o + n == total;
			uint8_t extra = last && t->cfg.use_success_flag && f == FT_NONE ? (NVMF_F_LAST | NVMF_F_SUCCESS)
											 : last ? NVMF_F_LAST : 0;
			if (send_c2h(k, c->cid, t->ns + off + o, o, n, extra, o == 0 ? f : 0))
				return -1;
			if (f == FT_BAD_PLEN || f == FT_BAD_HDGST || f == FT_BAD_DDGST || f == FT_DATA_OOB)
				break;
		}
		if (f == FT_CLOSE_MID)
			return -1;
		if (t->cfg.use_success_flag && f == FT_NONE)
			return 0;
		return send_rsp(k, c->cid, 0, 0, 0, false, 0);
	}
	case GPUNVME_CMD_WRITE: {
		if (off + len > t->ns_len)
			return send_rsp(k, c->cid, GPUNVME_SC_LBA_RANGE, 0, 0, false, 0);
		if (len != sgl_len)
			return send_rsp(k, c->cid, GPUNVME_SC_INVALID_FIELD, 0, 0, false, 0);
		if (sgl_type == 0x01) {
			if (dlen != len)
				return send_rsp(k, c->cid, GPUNVME_SC_INVALID_FIELD, 0, 0, false, 0);
			memcpy(t->ns + off, data, len);
			return send_rsp(k, c->cid, 0, 0, 0, false, 0);
		}
		/* R2T for all of it once it is the oldest write waiting;
		 * H2CData PDUs then come in MAXH2CDATA pieces (h2c_data) */
		if (k->wn == 256)
			return -1;
		uint32_t i = (k->wh + k->wn++) % 256;
		k->w[i].cid = c->cid;
		k->w[i].off = off;
		k->w[i].len = (uint32_t)len;
		k->w[i].got = 0;
		return k->wn == 1 ? send_r2t(k) : 0;
	}
	default:
		return send_rsp(k, c->cid, GPUNVME_SC_INVALID_OPCODE, 0, 0, false, 0);
	}
}

static void *conn_main(void *arg)
{
	struct conn *k = arg;
	struct fake_target *t = k->t;
	uint8_t ic[NVMF_HLEN_IC];
	if (rd_full(k->fd, ic, sizeof(ic)) || ic[0] != NVMF_PDU_ICREQ)
		goto out;
	k->hd = (ic[11] & 1) && !t->cfg.refuse_hdgst;
	k->dd = ic[11] & 2;
	uint8_t r[NVMF_HLEN_IC] = { 0 };
	nvmf_pdu_ch(r, NVMF_PDU_ICRESP, 0, NVMF_HLEN_IC, 0, NVMF_HLEN_IC);
	r[10] = t->cfg.cpda;
	r[11] = (uint8_t)((k->hd ? 1 : 0) | (k->dd ? 2 : 0));
	nvmf_put32(r + 12, t->cfg.maxh2cdata);
	if (wr_full(k->fd, r, sizeof(r)))
		goto out;
	uint8_t *data = malloc(8192 + 4);
	if (!data)
		goto out;
	for (;;) {
		uint8_t h[NVMF_HDR_MAX];
		if (rd_full(k->fd, h, 8))
			break;
		uint32_t hl = nvmf_pdu_hlen(h[0]) + (k->hd ? 4 : 0);
		if (h[0] == NVMF_PDU_H2C_DATA) {
			if (rd_full(k->fd, h + 8, hl - 8) || h2c_data(k, h, hl))
				break;
			continue;
		}
		if (h[0] != NVMF_PDU_CMD || rd_full(k->fd, h + 8, hl - 8)) {
			fprintf(stderr, "fake target: expected a command capsule, got type 0x%02x\n", h[0]);
			break;
		}
		struct nvmf_pdu p;
		char why[160];
		if (nvmf_pdu_parse(h, hl, k->hd, k->dd, &p, why, sizeof(why))) {
			fprintf(stderr, "fake target: bad capsule: %s\n", why);
			break;
		}
		uint8_t pad[256];
		if (p.data_len > 8192 || (p.pad && rd_full(k->fd, pad, p.pad)) ||
		    (p.data_len && rd_full(k->fd, data, p.data_len + (p.ddgst ? 4 : 0))))
			break;
		if (p.ddgst && nvmf_get32(data + p.data_len) != gpunvme_crc32c(0, data, p.data_len)) {
			fprintf(stderr, "fake target: capsule data digest mismatch\n");
			break;
		}
		struct gpunvme_sqe c;
		memcpy(&c, h + 8, sizeof(c));
		if (command(k, &c, data, p.data_len))
			break;
	}
	free(data);
out:
	pthread_mutex_lock(&t->lock);
	shutdown(k->fd, SHUT_RDWR);
	k->done = true;
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

static void *accept_main(void *arg)
{
	struct fake_target *t = arg;
	for (;;) {
		int fd = accept(t->lfd, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			break;
		}
		if (__atomic_load_n(&t->dead, __ATOMIC_ACQUIRE)) {
			close(fd);
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		pthread_mutex_lock(&t->lock);
		struct conn *k = NULL;
		for (int i = 0; i < MAX_CONNS && !t->stop; i++) {
			if (!t->conns[i].used) {
				k = &t->conns[i];
				break;
			}
			if (t->conns[i].done) {
				/* a finished connection: reap it */
				pthread_join(t->conns[i].th, NULL);
				close(t->conns[i].fd);
				t->conns[i].used = false;
				k = &t->conns[i];
				break;
			}
		}
		if (!k) {
			pthread_mutex_unlock(&t->lock);
			close(fd);
			continue;
		}
		*k = (struct conn){ .t = t, .fd = fd, .used = true };
		if (pthread_create(&k->th, NULL, conn_main, k)) {
			k->used = false;
			close(fd);
		}
		pthread_mutex_unlock(&t->lock);
	}
	return NULL;
}

int ft_start(const struct ft_config *cfg, uint16_t port, struct fake_target **out)
{
	struct fake_target *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	if (cfg)
		t->cfg = *cfg;
	if (!t->cfg.ns_bytes)
		t->cfg.ns_bytes = 16u << 20;
	if (!t->cfg.lba_shift)
		t->cfg.lba_shift = 9;
	if (!t->cfg.c2h_chunk)
		t->cfg.c2h_chunk = 8192;
	if (!t->cfg.maxh2cdata)
		t->cfg.maxh2cdata = 8192;
	if (!t->cfg.icd)
		t->cfg.icd = 4096;
	if (!t->cfg.nr_queues)
		t->cfg.nr_queues = 4;
	pthread_mutex_init(&t->lock, NULL);
	if (t->cfg.image) {
		int fd = open(t->cfg.image, O_RDWR);
		struct stat st;
		if (fd < 0 || fstat(fd, &st)) {
			int e = -errno;
			if (fd >= 0)
				close(fd);
			free(t);
			return e;
		}
		t->ns_len = (uint64_t)st.st_size & ~((1ull << t->cfg.lba_shift) - 1);
		t->ns = mmap(NULL, t->ns_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
		if (t->ns == MAP_FAILED) {
			free(t);
			return -ENOMEM;
		}
		t->mapped = true;
	} else {
		t->ns_len = t->cfg.ns_bytes;
		t->ns = calloc(1, t->ns_len);
		if (!t->ns) {
			free(t);
			return -ENOMEM;
		}
	}
	for (int i = 0; i < MAX_CONNS; i++)
		t->conns[i].fd = -1;
	t->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(t->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof(a);
	if (t->lfd < 0 || bind(t->lfd, (struct sockaddr *)&a, sizeof(a)) || listen(t->lfd, 64) ||
	    getsockname(t->lfd, (struct sockaddr *)&a, &al)) {
		int e = -errno;
		if (t->lfd >= 0)
			close(t->lfd);
		if (t->mapped)
			munmap(t->ns, t->ns_len);
		else
			free(t->ns);
		free(t);
		return e;
	}
	t->port = ntohs(a.sin_port);
	pthread_create(&t->accept_th, NULL, accept_main, t);
	*out = t;
	return 0;
}

uint16_t ft_port(const struct fake_target *t)
{
	return t->port;
}

void ft_set_fault(struct fake_target *t, enum ft_fault f)
{
	__atomic_store_n(&t->fault, (int)f, __ATOMIC_RELEASE);
}

uint32_t ft_keepalives(const struct fake_target *t)
{
	return __atomic_load_n(&t->keepalives, __ATOMIC_RELAXED);
}

uint8_t *ft_ns_data(struct fake_target *t)
{
	return t->ns;
}

void ft_drop_all(struct fake_target *t)
{
	pthread_mutex_lock(&t->lock);
	for (int i = 0; i < MAX_CONNS; i++)
		if (t->conns[i].used && !t->conns[i].done)
			shutdown(t->conns[i].fd, SHUT_RDWR);
	pthread_mutex_unlock(&t->lock);
}

void ft_stop(struct fake_target *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	t->stop = true;
	pthread_mutex_unlock(&t->lock);
	shutdown(t->lfd, SHUT_RDWR);
	pthread_join(t->accept_th, NULL);
	close(t->lfd);
	ft_drop_all(t);
	for (int i = 0; i < MAX_CONNS; i++) {
		if (t->conns[i].used) {
			pthread_join(t->conns[i].th, NULL);
			close(t->conns[i].fd);
		}
	}
	if (t->mapped)
		munmap(t->ns, t->ns_len);
	else
		free(t->ns);
	pthread_mutex_destroy(&t->lock);
	free(t);
}
