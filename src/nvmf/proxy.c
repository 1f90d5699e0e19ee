/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The GPU path over NVMe/TCP: one CPU thread per queue serves a queue pair
 * in host memory that another agent (GPU threads, through the device
 * queues of src/cuda) drives exactly as it drives a PCIe controller's: it
 * writes SQEs with PRPs and the SQ tail doorbell, polls CQEs by phase tag
 * and writes the CQ head doorbell. The doorbells are words in a host page
 * (gpunvme_ctrl_doorbells), at the offsets NVMe 1.4 §3.1.24-25 give them
 * with a stride of 4 bytes.
 *
 * For each new SQE the proxy turns the PRPs back into one host buffer
 * (over TCP a "bus address" is the host virtual address, src/bus/tcp.c),
 * sends the command as a capsule, lets C2H data land straight in that
 * buffer (Tier 1: pinned host memory the GPU reads), and writes the CQE
 * with the phase tag last. A transport failure completes the commands in
 * flight with Transient Transport Error (NVMe 1.4 Figure 126, 22h) and
 * reconnects the queue.
 *
 * Command identifiers: the agent may use any 16-bit CID that is unique
 * among its commands in flight (NVMe 1.4 §4.2, CDW0.CID); the device
 * queues use a ticket that grows past the depth. The connection tracks
 * its commands by a tag below its depth (src/nvmf/tcp.c), so each command
 * goes out under a free tag and its completion carries the agent's CID
 * back. A CID already in flight is refused with Command ID Conflict (03h).
 * (A CPU stand-in that reused CIDs below the depth hid this: on a GPU
 * every command after the first `depth` was refused with CID 0 and its
 * issuer timed out.)
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "nvmf/nvmf.h"

struct nvmf_proxy {
	struct nvmf_queue *q;
	struct nvmf_proxy_cfg cfg;
	pthread_t th;
	int stop;                 /* atomic */
	uint32_t sq_head, cq_tail, cq_phase;
	uint32_t inflight;
	uint8_t *busy;            /* per connection tag: in flight */
	uint16_t *cid_of;         /* per tag: the agent's CID */
	uint32_t next_tag;        /* where the search for a free tag starts */
	uint64_t cid_busy[65536 / 64]; /* the agent's CIDs in flight */
	uint64_t forwarded, completed;
};

static bool cid_in_flight(const struct nvmf_proxy *p, uint16_t cid)
{
	return p->cid_busy[cid / 64] >> (cid % 64) & 1;
}

static void cid_mark(struct nvmf_proxy *p, uint16_t cid, bool on)
{
	if (on)
		p->cid_busy[cid / 64] |= 1ull << (cid % 64);
	else
		p->cid_busy[cid / 64] &= ~(1ull << (cid % 64));
}

static uint32_t lba_shift_of(const struct nvmf_proxy *p, uint32_t nsid)
{
	for (uint32_t i = 0; i < p->cfg.nns; i++)
		if (p->cfg.ns[i].nsid == nsid)
			return p->cfg.ns[i].lba_shift;
	return 0;
}

/* Post a completion for the agent's CID: dwords 0-2, then dword 3 (CID,
 * phase, status) with release order, so a poller that sees the new phase
 * (acquire) sees the rest; pairs with the device queue's acquire load of
 * dword 3. */
static void post(struct nvmf_proxy *p, uint16_t cid, uint16_t status, uint32_t dw0)
{
	volatile uint32_t *e = (volatile uint32_t *)((uint8_t *)p->cfg.cq + (size_t)p->cq_tail * 16);
	e[0] = dw0;
	e[1] = 0;
	e[2] = (p->sq_head & 0xffff) | ((uint32_t)p->cfg.qid << 16);
	uint32_t dw3 = cid | (p->cq_phase << 16) | ((uint32_t)status << 17);
	__atomic_store_n(&e[3], dw3, __ATOMIC_RELEASE);
	if (++p->cq_tail == p->cfg.depth) {
		p->cq_tail = 0;
		p->cq_phase ^= 1;
	}
	p->completed++;
}

/* The command under connection tag `tag` is done: its CID's completion. */
static void post_tag(struct nvmf_proxy *p, uint16_t tag, uint16_t status, uint32_t dw0)
{
	if (tag >= p->cfg.depth || !p->busy[tag])
		return; /* the connection checks its tags (tcp.c): not reached */
	uint16_t cid = p->cid_of[tag];
	p->busy[tag] = 0;
	p->inflight--;
	cid_mark(p, cid, false);
	post(p, cid, status, dw0);
}

/* A free connection tag (one exists while inflight < depth). */
static uint16_t take_tag(struct nvmf_proxy *p)
{
	for (uint32_t i = 0; i < p->cfg.depth; i++) {
		uint32_t t = (p->next_tag + i) % p->cfg.depth;
		if (!p->busy[t]) {
			p->next_tag = (t + 1) % p->cfg.depth;
			return (uint16_t)t;
		}
	}
	return 0xffff;
}

/*
 * The host buffer a read or write's PRPs describe: PRP1 and the pages
 * after it must be one contiguous range (Tier 1 buffers are). Returns 0
 * with *va, or an NVMe status to complete the command with.
 */
static uint16_t prp_buffer(const struct nvmf_proxy *p, const struct gpunvme_sqe *e, uint32_t len, void **va)
{
	const uint64_t ps = p->cfg.page_size;
	uint64_t a = e->prp1;
	*va = (void *)(uintptr_t)a;
	uint64_t first = ps - (a & (ps - 1));
	if (len <= first)
		return 0;
	uint64_t next = a + first, rest = len - first;
	if (rest <= ps)
		return e->prp2 == next ? 0 : GPUNVME_SC_INVALID_FIELD;
	/* a PRP list (host memory, §4.3): every entry the next page */
	const uint64_t *list = (const uint64_t *)(uintptr_t)e->prp2;
	uint32_t i = 0, per = (uint32_t)(ps / 8);
	while (rest > 0) {
		if (i == per - 1 && rest > ps) {
			list = (const uint64_t *)(uintptr_t)list[i];
			i = 0;
		}
		if (list[i++] != next)
			return GPUNVME_SC_INVALID_FIELD; /* scattered: not a Tier 1 buffer */
		uint64_t chunk = rest < ps ? rest : ps;
		next += chunk;
		rest -= chunk;
	}
	return 0;
}

static void forward(struct nvmf_proxy *p, struct gpunvme_sqe e)
{
	uint16_t cid = e.cid;
	if (cid_in_flight(p, cid)) {
		post(p, cid, GPUNVME_SC_CID_CONFLICT, 0);
		return;
	}
	void *va = NULL;
	uint32_t len = 0;
	int dir = NVMF_DIR_NONE;
	if (e.opc == GPUNVME_CMD_READ || e.opc == GPUNVME_CMD_WRITE) {
		uint32_t sh = lba_shift_of(p, e.nsid);
		if (!sh) {
			post(p, cid, GPUNVME_SC_INVALID_NSID, 0);
			return;
		}
		len = ((uint32_t)e.rw.nlb + 1) << sh;
		uint16_t st = prp_buffer(p, &e, len, &va);
		if (st) {
			post(p, cid, st, 0);
			return;
		}
		dir = e.opc == GPUNVME_CMD_READ ? NVMF_DIR_C2H : NVMF_DIR_H2C;
	} else if (e.opc != GPUNVME_CMD_FLUSH) {
		post(p, cid, GPUNVME_SC_INVALID_OPCODE, 0);
		return;
	}
	/* proxy_main takes an SQE only while a tag is free */
	uint16_t tag = take_tag(p);
	p->busy[tag] = 1;
	p->cid_of[tag] = cid;
	cid_mark(p, cid, true);
	p->inflight++;
	p->forwarded++;
	e.cid = tag;
	if (nvmf_queue_submit(p->q, &e, va, len, dir))
		post_tag(p, tag, GPUNVME_SC_TRANSIENT_TRANSPORT, 0); /* the next reap fails the rest */
}

/* The connection died: complete what was in flight, connect again. */
static void recover(struct nvmf_proxy *p)
{
	for (uint32_t tag = 0; tag < p->cfg.depth; tag++)
		if (p->busy[tag])
			post_tag(p, (uint16_t)tag, GPUNVME_SC_TRANSIENT_TRANSPORT, 0);
	nvmf_queue_reconnect(p->q, p->cfg.cntlid);
}

static void *proxy_main(void *arg)
{
	struct nvmf_proxy *p = arg;
	uint32_t idle = 0;
	while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
		bool work = false;
		/* acquire: the SQEs the producer wrote before its doorbell
		 * write (release, or a GPU fence before it) are visible */
		uint32_t tail = __atomic_load_n(p->cfg.sq_db, __ATOMIC_ACQUIRE);
		if (tail < p->cfg.depth) {
			/* an SQE is taken (and the SQ head moves past it) only
			 * when a connection tag is free for it: more commands
			 * than the connection's depth wait in the SQ */
			while (p->sq_head != tail && p->inflight < p->cfg.depth) {
				struct gpunvme_sqe e;
				memcpy(&e, (const void *)&p->cfg.sq[p->sq_head], sizeof(e));
				if (++p->sq_head == p->cfg.depth)
					p->sq_head = 0;
				if (nvmf_queue_dead(p->q) && p->inflight == 0)
					recover(p);
				forward(p, e);
				work = true;
			}
		}
		if (p->inflight) {
			struct nvmf_cpl c[64];
			int n = nvmf_queue_reap(p->q, c, 64, 0);
			if (n < 0) {
				recover(p);
				work = true;
			}
			for (int i = 0; i < n; i++) {
				uint16_t st = c[i].err ? GPUNVME_SC_TRANSIENT_TRANSPORT : gpunvme_cqe_status(c[i].cqe.status);
				post_tag(p, c[i].cqe.cid, st, c[i].cqe.dw0);
				work = true;
			}
		}
		/* spin while busy; when idle back off to 20 us naps, so an idle
		 * proxy costs little CPU and a new command waits at most that */
		if (work) {
			idle = 0;
		} else if (++idle > 2000) {
			struct timespec ts = { 0, 20000 };
			nanosleep(&ts, NULL);
		} else if (idle > 64) {
			sched_yield();
		}
	}
	return NULL;
}

int nvmf_proxy_start(struct nvmf_queue *q, const struct nvmf_proxy_cfg *cfg, struct nvmf_proxy **out)
{
	*out = NULL;
	if (cfg->depth < 2 || cfg->depth > nvmf_queue_depth(q) || !cfg->sq || !cfg->cq || !cfg->sq_db)
		return gpunvme_set_error(-EINVAL, "proxy: bad queue description (depth %u, connection depth %u)", cfg->depth,
					 nvmf_queue_depth(q));
	struct nvmf_proxy *p = calloc(1, sizeof(*p));
	if (!p || !(p->busy = calloc(cfg->depth, 1)) || !(p->cid_of = calloc(cfg->depth, sizeof(*p->cid_of)))) {
		if (p)
			free(p->busy);
		free(p);
		return gpunvme_set_error(-ENOMEM, "out of memory");
	}
	p->q = q;
	p->cfg = *cfg;
	p->cq_phase = 1; /* §4.6: the first pass writes phase 1 over zeroed memory */
	if (pthread_create(&p->th, NULL, proxy_main, p)) {
		free(p->busy);
		free(p->cid_of);
		free(p);
		return gpunvme_set_error(-EAGAIN, "proxy: cannot start its thread");
	}
	*out = p;
	return 0;
}

void nvmf_proxy_stop(struct nvmf_proxy *p, uint64_t *forwarded)
{
	if (!p)
		return;
	__atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
	pthread_join(p->th, NULL);
	if (forwarded)
		*forwarded = p->forwarded;
	free(p->busy);
	free(p->cid_of);
	free(p);
}
