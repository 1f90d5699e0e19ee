/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The NVMe/TCP host (src/nvmf, tcp:// in gpunvme_open) against the test
 * suite's fake target (fake_target.h): the good paths with and without
 * digests, discovery, and every protocol fault the host must refuse with a
 * clear error in bounded time, followed by a reconnect that works.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "check.h"
#include "ctrl/ctrl.h" /* the transport behind a controller */
#include "ctrl/ctrl_gpu.h"
#include "fake_target.h"
#include "gpunvme/fabrics.h"
#include "gpunvme/gpunvme.h"
#include "gpunvme/spec/queue.h"
#include "gpunvme/tier.h"
#include "nvmf/nvmf.h"
#include "nvmf/pdu.h"

static struct fake_target *T;

static int start(const struct ft_config *cfg)
{
	int rc = ft_start(cfg, 0, &T);
	if (rc) {
		fprintf(stderr, "cannot start the fake target: %s\n", strerror(-rc));
		return 1;
	}
	return 0;
}

static void uri(char *out, size_t n, const char *opts)
{
	snprintf(out, n, "tcp://127.0.0.1:%u/%s%s%s", ft_port(T), FT_NQN, opts && *opts ? "?" : "", opts ? opts : "");
}

static int open_ctrl(const char *opts, struct gpunvme_ctrl **c)
{
	char u[512];
	uri(u, sizeof(u), opts);
	struct gpunvme_opts o;
	gpunvme_opts_init(&o);
	o.io_timeout_ms = 1500;
	o.admin_timeout_ms = 1500;
	o.nr_io_queues = 2;
	return gpunvme_open(u, &o, c);
}

/* callbacks: count completions and keep an error / keep the error */
static void count_cb(void *a, const struct gpunvme_cpl *p)
{
	int *s = a;
	s[0]++;
	if (p->err)
		s[1] = p->err;
}

static void err_cb(void *a, const struct gpunvme_cpl *p)
{
	*(int *)a = p->err;
}

static void pattern(uint8_t *b, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)((i * 131 + seed * 7 + (i >> 9)) ^ seed);
}

/* Write len bytes at lba (in-capsule when small, R2T/H2CData when not),
 * read them back, compare; also with the target's own bytes. */
static int roundtrip(struct gpunvme_ctrl *c, struct gpunvme_qpair *qp, uint64_t lba, size_t len, uint32_t seed)
{
	uint8_t *w = gpunvme_dma_alloc(c, len), *r = gpunvme_dma_alloc(c, len);
	REQUIRE(w && r);
	pattern(w, len, seed);
	REQUIRE_OK(gpunvme_write_sync(qp, 1, w, lba, len / 512, NULL));
	CHECK(memcmp(ft_ns_data(T) + lba * 512, w, len) == 0, "target holds what was written");
	memset(r, 0xee, len);
	REQUIRE_OK(gpunvme_read_sync(qp, 1, r, lba, len / 512, NULL));
	CHECK(memcmp(r, w, len) == 0, "read back what was written (%zu bytes)", len);
	gpunvme_dma_free(c, w);
	gpunvme_dma_free(c, r);
	return 0;
}

static int good_path(const char *opts, const struct ft_config *cfg)
{
	REQUIRE(start(cfg) == 0);
	struct gpunvme_ctrl *c;
	REQUIRE_OK(open_ctrl(opts, &c));
	struct gpunvme_ctrl_info info;
	gpunvme_ctrl_info(c, &info);
	CHECK_STR(info.transport, "tcp");
	CHECK_STR(info.mn, "gpunvme fake NVMe/TCP target");
	CHECK_EQ(info.nr_io_queues, 2);
	CHECK(gpunvme_bar0(c, NULL) == NULL, "no BAR over fabrics");
	struct gpunvme_ns_info ni;
	REQUIRE_OK(gpunvme_ns_info(c, 1, &ni));
	CHECK_EQ(ni.lba_size, 512);
	CHECK_EQ(ni.nsze, (16u << 20) / 512);
	struct gpunvme_qpair *q1, *q2;
	REQUIRE_OK(gpunvme_qpair_create(c, 32, &q1));
	REQUIRE_OK(gpunvme_qpair_create(c, 32, &q2));
	CHECK(roundtrip(c, q1, 8, 2048, 1) == 0);         /* in-capsule */
	CHECK(roundtrip(c, q2, 100, 512 * 1024, 2) == 0); /* R2T, several commands (MDTS 128 KiB) */
	CHECK(roundtrip(c, q1, 4000, 12288, 3) == 0);     /* one R2T, H2CData split at MAXH2CDATA */
	CHECK_OK(gpunvme_flush_sync(q1, 1, NULL));
	/* many in flight at once on one connection */
	uint8_t *b = gpunvme_dma_alloc(c, 64 * 4096);
	REQUIRE(b);
	int st[2] = { 0, 0 };
	for (int i = 0; i < 64; i++)
		CHECK_OK(gpunvme_read(q2, 1, b + i * 4096, (uint64_t)i * 8, 8, count_cb, st));
	uint64_t t0 = gpunvme_now_ns();
	while (st[0] < 64 && gpunvme_now_ns() - t0 < 5000000000ull)
		if (gpunvme_qpair_poll(q2, 0) == 0)
			gpunvme_qpair_wait(q2, 1000); /* sleeps until data, not a spin */
	CHECK_EQ(st[0], 64);
	CHECK_EQ(st[1], 0);
	CHECK(memcmp(b, ft_ns_data(T), 64 * 4096) == 0);
	/* out of range: the target's status, decoded */
	uint16_t s = 0;
	CHECK_EQ(gpunvme_read_sync(q1, 1, b, ni.nsze - 1, 2, &s), -ERANGE);
	gpunvme_dma_free(c, b);
	gpunvme_qpair_destroy(q1);
	gpunvme_qpair_destroy(q2);
	gpunvme_close(c);
	ft_stop(T);
	return 0;
}

TEST_CASE(good_path_plain)
{
	return good_path("", NULL);
}

TEST_CASE(good_path_digests)
{
	return good_path("hdgst=1&ddgst=1", NULL);
}

TEST_CASE(good_path_success_flag_cpda)
{
	/* C2HData with SUCCESS instead of a CapsuleResp; data aligned to
	 * 32 bytes (CPDA 7); small MAXH2CDATA */
	struct ft_config cfg = { .use_success_flag = true, .cpda = 7, .maxh2cdata = 4096, .c2h_chunk = 4096 };
	return good_path("ddgst=1", &cfg);
}

/* NVMe/TCP's capabilities and the tier policy: no DMA into GPU memory (tier
 * 2 refused, naming the controller), GPU queues through the CPU proxies
 * (AUTO with a GPU: tier 1), shallow queues; with an emulator in an array
 * the intersection decides. */
/*
 * Few command slots, many requests, each into its own buffer: depth 4
 * (3 command ids) on the TCP transport's queue pair, eight reads of
 * 192 KiB (two commands each at MDTS 128 KiB) queued before any poll, so
 * most wait for an id. Each buffer sits between 4 KiB guards: every byte
 * of every target equals the namespace's, every guard byte is untouched.
 */
TEST_CASE(few_slots_many_buffers)
{
	REQUIRE(start(NULL) == 0);
	struct gpunvme_ctrl *c;
	REQUIRE_OK(open_ctrl("", &c));
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 4, &qp));
	enum { N = 8, LEN = 192 * 1024, G = 4096, STRIDE = LEN + 2 * G };
	uint8_t *w = gpunvme_dma_alloc(c, N * LEN), *m = gpunvme_dma_alloc(c, N * STRIDE);
	REQUIRE(w && m);
	pattern(w, N * LEN, 9);
	REQUIRE_OK(gpunvme_write_sync(qp, 1, w, 0, N * LEN / 512, NULL));
	memset(m, 0x5a, N * STRIDE);
	int st[2] = { 0, 0 };
	/* buffer i reads the namespace's piece N-1-i: a mixed-up target shows */
	for (int i = 0; i < N; i++)
		REQUIRE_OK(gpunvme_read(qp, 1, m + i * STRIDE + G, (uint64_t)(N - 1 - i) * (LEN / 512), LEN / 512,
					count_cb, st));
	uint64_t t0 = gpunvme_now_ns();
	while (st[0] < N && gpunvme_now_ns() - t0 < 5000000000ull)
		if (gpunvme_qpair_poll(qp, 0) == 0)
			gpunvme_qpair_wait(qp, 1000);
	CHECK_EQ(st[0], N);
	CHECK_EQ(st[1], 0);
	for (int i = 0; i < N; i++) {
		const uint8_t *b = m + i * STRIDE;
		CHECK(memcmp(b + G, w + (size_t)(N - 1 - i) * LEN, LEN) == 0, "buffer %d holds its blocks", i);
		size_t bad = 0;
		for (size_t j = 0; j < G; j++)
			bad += (b[j] != 0x5a) + (b[G + LEN + j] != 0x5a);
		CHECK_EQ(bad, 0);
	}
	gpunvme_dma_free(c, w);
	gpunvme_dma_free(c, m);
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	ft_stop(T);
	return 0;
}

TEST_CASE(caps_and_tier)
{
	REQUIRE(start(NULL) == 0);
	struct gpunvme_ctrl *c = NULL, *e = NULL;
	REQUIRE_OK(open_ctrl("", &c));
	struct gpunvme_ctrl_info ci;
	REQUIRE_OK(gpunvme_ctrl_info(c, &ci));
	CHECK_EQ(ci.caps, GPUNVME_CAP_GPU_QUEUES);
	enum gpunvme_tier t;
	CHECK_OK(gpunvme_tier_choose(&c, 1, true, GPUNVME_TIER_AUTO, &t));
	CHECK_EQ(t, GPUNVME_TIER_1);
	CHECK_EQ(gpunvme_tier_choose(&c, 1, true, GPUNVME_TIER_2, &t), -EOPNOTSUPP);
	CHECK_LAST_ERROR("tier 2 (GPU memory) needs a controller that can DMA into GPU memory");
	CHECK_LAST_ERROR("tcp:");
	CHECK_LAST_ERROR("use tier 1");
	REQUIRE_OK(gpunvme_open("emu:ram:16M", NULL, &e));
	struct gpunvme_ctrl *both[2] = { e, c };
	CHECK_OK(gpunvme_tier_choose(both, 2, true, GPUNVME_TIER_AUTO, &t));
	CHECK_EQ(t, GPUNVME_TIER_1);
	CHECK_OK(gpunvme_tier_choose(both, 1, true, GPUNVME_TIER_AUTO, &t));
	CHECK_EQ(t, GPUNVME_TIER_2);
	CHECK_EQ(gpunvme_tier_choose(both, 2, true, GPUNVME_TIER_2, &t), -EOPNOTSUPP);
	CHECK_LAST_ERROR("tcp:"); /* the member that cannot, not the emulator */
	gpunvme_close(e);
	gpunvme_close(c);
	ft_stop(T);
	return 0;
}

/* The transport interface's register access reads the same registers
 * the controller was opened with: Property Get over NVMe/TCP, BAR0 on the
 * emulator (PCIe). */
static void check_registers(struct gpunvme_ctrl *c)
{
	struct gpunvme_ctrl_info ci;
	memset(&ci, 0, sizeof(ci));
	CHECK_OK(gpunvme_ctrl_info(c, &ci));
	uint64_t v = 0;
	CHECK_OK(c->tr->reg_read(c, GPUNVME_REG_CAP, 8, &v));
	CHECK_EQ(v, ci.cap);
	CHECK_OK(c->tr->reg_read(c, GPUNVME_REG_VS, 4, &v));
	CHECK_EQ(v, ci.vs);
	CHECK_OK(c->tr->reg_read(c, GPUNVME_REG_CSTS, 4, &v));
	CHECK_EQ(v & GPUNVME_CSTS_RDY, GPUNVME_CSTS_RDY);
	CHECK_OK(c->tr->reg_read(c, GPUNVME_REG_CC, 4, &v));
	CHECK_EQ(v & GPUNVME_CC_EN, GPUNVME_CC_EN);
}

TEST_CASE(transport_registers)
{
	REQUIRE(start(NULL) == 0);
	struct gpunvme_ctrl *c = NULL, *e = NULL;
	REQUIRE_OK(open_ctrl("", &c));
	REQUIRE_OK(gpunvme_open("emu:ram:16M", NULL, &e));
	CHECK(c->tr == &gpunvme_transport_tcp);
	CHECK(e->tr == &gpunvme_transport_pcie);
	check_registers(c);
	check_registers(e);
	gpunvme_close(e);
	gpunvme_close(c);
	ft_stop(T);
	return 0;
}

TEST_CASE(discover)
{
	REQUIRE(start(NULL) == 0);
	char u[128];
	snprintf(u, sizeof(u), "tcp://127.0.0.1:%u", ft_port(T));
	struct gpunvme_disc_entry *e = NULL;
	uint32_t n = 0;
	REQUIRE_OK(gpunvme_discover(u, NULL, &e, &n));
	REQUIRE_EQ(n, 1);
	CHECK_EQ(e[0].trtype, 3);
	CHECK_STR(e[0].subnqn, FT_NQN);
	CHECK_STR(e[0].traddr, "127.0.0.1");
	char port[8];
	snprintf(port, sizeof(port), "%u", ft_port(T));
	CHECK_STR(e[0].trsvcid, port);
	free(e);
	ft_stop(T);
	return 0;
}

TEST_CASE(keep_alive)
{
	REQUIRE(start(NULL) == 0);
	struct gpunvme_ctrl *c;
	REQUIRE_OK(open_ctrl("kato=200", &c));
	usleep(900 * 1000);
	CHECK(ft_keepalives(T) >= 3, "keep-alives every KATO/2: %u in 0.9 s", ft_keepalives(T));
	gpunvme_close(c);
	ft_stop(T);
	return 0;
}

TEST_CASE(bad_uris)
{
	struct gpunvme_ctrl *c;
	static const struct { const char *u, *msg; } cases[] = {
		{ "tcp://127.0.0.1:4420", "no subsystem NQN" },
		{ "tcp://127.0.0.1:99999/nqn.2026-11.io.x:y", "port" },
		{ "tcp://:4420/nqn.2026-11.io.x:y", "missing host" },
		{ "tcp://127.0.0.1/notannqn", "not an NQN" },
		{ "tcp://127.0.0.1/nqn.2026-11.io.x:y?bogus=1", "unknown option 'bogus'" },
		{ "tcp://127.0.0.1/nqn.2026-11.io.x:y?hdgst=2", "hdgst=2" },
		{ "tcp://127.0.0.1/nqn.2026-11.io.x:y?hostid=xyz", "not a UUID" },
		{ "tcp://127.0.0.1/nqn.2026-11.io.x:y?hostnqn=foo", "hostnqn 'foo'" },
		{ "tcp://[::1/nqn.2026-11.io.x:y", "unterminated" },
		{ "tcp:/127.0.0.1/nqn.2026-11.io.x:y", "expected tcp://" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		CHECK_EQ(gpunvme_open(cases[i].u, NULL, &c), -EINVAL);
		CHECK_LAST_ERROR(cases[i].msg);
	}
	return 0;
}

TEST_CASE(connection_refused)
{
	/* a port nobody listens on: a fast, clear error */
	REQUIRE(start(NULL) == 0);
	uint16_t port = ft_port(T);
	ft_stop(T);
	char u[128];
	snprintf(u, sizeof(u), "tcp://127.0.0.1:%u/%s?timeout=1000", port, FT_NQN);
	struct gpunvme_ctrl *c;
	uint64_t t0 = gpunvme_now_ns();
	CHECK_EQ(gpunvme_open(u, NULL, &c), -ECONNREFUSED);
	CHECK_LAST_ERROR("is the target listening");
	CHECK(gpunvme_now_ns() - t0 < 2000000000ull);
	return 0;
}

TEST_CASE(host_rejected)
{
	struct ft_config cfg = { .reject_host = true };
	REQUIRE(start(&cfg) == 0);
	struct gpunvme_ctrl *c;
	CHECK_EQ(open_ctrl("hostnqn=nqn.2026-11.io.gpunvme:someone", &c), -ECONNREFUSED);
	CHECK_LAST_ERROR("host not allowed");
	CHECK_LAST_ERROR("nqn.2026-11.io.gpunvme:someone");
	ft_stop(T);
	return 0;
}

TEST_CASE(wrong_subsystem)
{
	REQUIRE(start(NULL) == 0);
	char u[256];
	snprintf(u, sizeof(u), "tcp://127.0.0.1:%u/nqn.2026-11.io.gpunvme:other", ft_port(T));
	struct gpunvme_ctrl *c;
	CHECK_EQ(gpunvme_open(u, NULL, &c), -ECONNREFUSED);
	CHECK_LAST_ERROR("unknown subsystem NQN");
	ft_stop(T);
	return 0;
}

TEST_CASE(digest_refused)
{
	struct ft_config cfg = { .refuse_hdgst = true };
	REQUIRE(start(&cfg) == 0);
	struct gpunvme_ctrl *c;
	CHECK_EQ(open_ctrl("hdgst=1", &c), -EPROTONOSUPPORT);
	CHECK_LAST_ERROR("hdgst=0");
	ft_stop(T);
	return 0;
}

/* One fault on the next read: the read fails with err and a message
 * holding msg, within 3 s; then the queue reconnects and works. */
static int fault(enum ft_fault f, const char *opts, int err, const char *msg)
{
	REQUIRE(start(NULL) == 0);
	struct gpunvme_ctrl *c;
	REQUIRE_OK(open_ctrl(opts, &c));
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 16, &qp));
	pattern(ft_ns_data(T), 65536, 9);
	uint8_t *b = gpunvme_dma_alloc(c, 65536);
	REQUIRE(b);
	ft_set_fault(T, f);
	uint64_t t0 = gpunvme_now_ns();
	int rc = gpunvme_read_sync(qp, 1, b, 0, 128, NULL);
	uint64_t dt = gpunvme_now_ns() - t0;
	CHECK_EQ(rc, err);
	CHECK_LAST_ERROR(msg);
	CHECK(dt < 3000000000ull, "failed in %llu ms", (unsigned long long)(dt / 1000000));
	/* the connection was closed; the next command reconnects */
	memset(b, 0, 65536);
	CHECK_OK(gpunvme_read_sync(qp, 1, b, 0, 128, NULL));
	CHECK(memcmp(b, ft_ns_data(T), 65536) == 0, "data after the reconnect");
	gpunvme_dma_free(c, b);
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	ft_stop(T);
	return 0;
}

TEST_CASE(fault_bad_plen)
{
	return fault(FT_BAD_PLEN, "", -EPROTO, "");
}

TEST_CASE(fault_bad_hdgst)
{
	return fault(FT_BAD_HDGST, "hdgst=1", -EBADMSG, "header digest mismatch");
}

TEST_CASE(fault_bad_ddgst)
{
	return fault(FT_BAD_DDGST, "ddgst=1", -EBADMSG, "data digest mismatch");
}

TEST_CASE(fault_unknown_type)
{
	return fault(FT_UNKNOWN_TYPE, "", -EPROTO, "type 0x0e");
}

TEST_CASE(fault_cid_mismatch)
{
	return fault(FT_CID_MISMATCH, "", -EPROTO, "not in flight");
}

TEST_CASE(fault_short_c2h)
{
	return fault(FT_SHORT_C2H, "", -EPROTO, "of 65536 bytes transferred");
}

TEST_CASE(fault_close_mid_transfer)
{
	return fault(FT_CLOSE_MID, "", -ECONNRESET, "target closed the connection");
}

TEST_CASE(fault_stall_times_out)
{
	return fault(FT_STALL, "", -ETIMEDOUT, "timed out after 1500 ms");
}

TEST_CASE(fault_term_req)
{
	return fault(FT_TERM, "", -ECONNRESET, "C2HTermReq");
}

TEST_CASE(fault_data_out_of_range)
{
	return fault(FT_DATA_OOB, "", -EPROTO, "expected offset 0");
}

TEST_CASE(fault_bad_hlen)
{
	return fault(FT_BAD_HLEN, "", -EPROTO, "HLEN 16");
}

TEST_CASE(target_dies_then_returns)
{
	/* every connection dropped: I/O in flight fails, the admin
	 * association is rebuilt, and the queue works again */
	REQUIRE(start(NULL) == 0);
	struct gpunvme_ctrl *c;
	REQUIRE_OK(open_ctrl("kato=0", &c));
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 16, &qp));
	uint8_t *b = gpunvme_dma_alloc(c, 4096);
	REQUIRE(b);
	ft_set_fault(T, FT_STALL);
	int n = 0;
	CHECK_OK(gpunvme_read(qp, 1, b, 0, 8, err_cb, &n));
	usleep(100 * 1000);
	ft_drop_all(T);
	uint64_t t0 = gpunvme_now_ns();
	while (gpunvme_qpair_outstanding(qp) && gpunvme_now_ns() - t0 < 3000000000ull)
		gpunvme_qpair_poll(qp, 0);
	CHECK_EQ(gpunvme_qpair_outstanding(qp), 0);
	CHECK_EQ(n, -ECONNRESET);
	CHECK_OK(gpunvme_read_sync(qp, 1, b, 0, 8, NULL));
	gpunvme_dma_free(c, b);
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	ft_stop(T);
	return 0;
}

/* ---- the GPU path's CPU proxy, driven by a CPU thread as the GPU would ---- */

struct agent {
	struct gpunvme_ctrl *c;
	struct gpunvme_sqe *sq;
	struct gpunvme_cqe *cq;
	volatile uint32_t *sq_db;
	uint64_t *list;
	uint32_t depth, tail, head, phase;
	uint16_t cid;
};

/* One command as a device queue builds it: PRPs from bus addresses (over
 * TCP, host addresses), the SQE, the tail doorbell (release), then the
 * CQE polled by phase (acquire). Returns the status, or -1 on no answer
 * within 5 s. */
static int agent_cmd(struct agent *a, uint8_t opc, void *buf, uint64_t slba, uint32_t nlb, bool scatter)
{
	struct gpunvme_sqe *e = &a->sq[a->tail];
	memset(e, 0, sizeof(*e));
	e->opc = opc;
	/* any CID unique among those in flight (§4.2): like the device
	 * queues' tickets, growing past the depth and wrapping at 2^16 */
	e->cid = a->cid++;
	e->nsid = 1;
	if (buf) {
		struct gpunvme_prp_addr pa = { gpunvme_dma_iova(a->c, buf), NULL, 0, 0 };
		uint64_t li = gpunvme_dma_iova(a->c, a->list);
		if (gpunvme_prp_fill(&pa, 0, (uint64_t)nlb * 512, 4096, a->list, &li, 1, &e->prp1, &e->prp2))
			return -2;
		if (scatter)
			a->list[1] += 8192; /* a hole: not one contiguous buffer */
		e->rw.slba = slba;
		e->rw.nlb = (uint16_t)(nlb - 1);
	}
	if (++a->tail == a->depth)
		a->tail = 0;
	__atomic_store_n(a->sq_db, a->tail, __ATOMIC_RELEASE);
	uint64_t t0 = gpunvme_now_ns();
	const volatile uint32_t *dw = (const volatile uint32_t *)&a->cq[a->head];
	while (gpunvme_now_ns() - t0 < 5000000000ull) {
		uint32_t v = __atomic_load_n(&dw[3], __ATOMIC_ACQUIRE);
		if (gpunvme_dw3_phase(v) == a->phase) {
			if (++a->head == a->depth) {
				a->head = 0;
				a->phase ^= 1;
			}
			return gpunvme_dw3_status(v);
		}
	}
	return -1;
}

/* Two reads under one CID rung at once: the second is refused with
 * Command ID Conflict while the first is in flight; both complete.
 * Returns the number of conflicts seen (1 wanted), -1 on no answer. */
static int agent_cid_conflict(struct agent *a, void *buf)
{
	for (int k = 0; k < 2; k++) {
		struct gpunvme_sqe *e = &a->sq[a->tail];
		memset(e, 0, sizeof(*e));
		e->opc = GPUNVME_CMD_READ;
		e->cid = a->cid;
		e->nsid = 1;
		e->prp1 = gpunvme_dma_iova(a->c, buf);
		e->rw.nlb = 7;
		if (++a->tail == a->depth)
			a->tail = 0;
	}
	a->cid++;
	__atomic_store_n(a->sq_db, a->tail, __ATOMIC_RELEASE);
	int conflicts = 0, ok = 0;
	uint64_t t0 = gpunvme_now_ns();
	while (conflicts + ok < 2 && gpunvme_now_ns() - t0 < 5000000000ull) {
		const volatile uint32_t *dw = (const volatile uint32_t *)&a->cq[a->head];
		uint32_t v = __atomic_load_n(&dw[3], __ATOMIC_ACQUIRE);
		if (gpunvme_dw3_phase(v) != a->phase)
			continue;
		if (++a->head == a->depth) {
			a->head = 0;
			a->phase ^= 1;
		}
		conflicts += gpunvme_dw3_status(v) == GPUNVME_SC_CID_CONFLICT;
		ok += gpunvme_dw3_status(v) == 0;
	}
	return conflicts + ok == 2 ? conflicts : -1;
}

TEST_CASE(gpu_proxy_cpu_agent)
{
	REQUIRE(start(NULL) == 0);
	struct gpunvme_ctrl *c;
	REQUIRE_OK(open_ctrl("", &c));
	uint16_t qid;
	REQUIRE_OK(gpunvme_ctrl_reserve_qid(c, &qid));
	/* CIDs from 65500: 100 reads below cross the depth many times and
	 * wrap at 2^16 */
	struct agent a = { .c = c, .depth = 16, .phase = 1, .cid = 65500 };
	a.sq = gpunvme_dma_alloc(c, 16 * 64);
	a.cq = gpunvme_dma_alloc(c, 16 * 16);
	a.list = gpunvme_dma_alloc(c, 4096);
	uint8_t *buf = gpunvme_dma_alloc(c, 256 * 1024);
	REQUIRE(a.sq && a.cq && a.list && buf);
	size_t dlen;
	volatile uint8_t *db = gpunvme_ctrl_doorbells(c, &dlen);
	REQUIRE(db != NULL);
	REQUIRE(dlen >= (size_t)gpunvme_sq_doorbell(qid, 0) + 4);
	a.sq_db = (volatile uint32_t *)(db + gpunvme_sq_doorbell(qid, 0));
	REQUIRE_OK(gpunvme_ctrl_create_qpair_raw(c, qid, gpunvme_dma_iova(c, a.sq), gpunvme_dma_iova(c, a.cq), 16));
	/* reads through a PRP list: what the target holds */
	pattern(ft_ns_data(T), 1 << 20, 21);
	for (uint32_t i = 0; i < 100; i++) {
		CHECK_EQ(agent_cmd(&a, GPUNVME_CMD_READ, buf, (i % 40) * 64, 256, false), 0);
		CHECK(memcmp(buf, ft_ns_data(T) + (size_t)(i % 40) * 64 * 512, 128 * 1024) == 0, "read %u", i);
	}
	CHECK_EQ(agent_cid_conflict(&a, buf), 1);
	/* a write, then the target holds it; a flush */
	pattern(buf, 4096, 22);
	CHECK_EQ(agent_cmd(&a, GPUNVME_CMD_WRITE, buf, 5000, 8, false), 0);
	CHECK(memcmp(ft_ns_data(T) + 5000 * 512, buf, 4096) == 0);
	CHECK_EQ(agent_cmd(&a, GPUNVME_CMD_FLUSH, NULL, 0, 0, false), 0);
	/* PRPs that are not one buffer: refused, Invalid Field */
	CHECK_EQ(agent_cmd(&a, GPUNVME_CMD_READ, buf, 0, 256, true), GPUNVME_SC_INVALID_FIELD);
	/* the target drops the connection mid-read: Transient Transport
	 * Error, then the proxy reconnects and the next read works */
	ft_set_fault(T, FT_CLOSE_MID);
	CHECK_EQ(agent_cmd(&a, GPUNVME_CMD_READ, buf, 0, 256, false), GPUNVME_SC_TRANSIENT_TRANSPORT);
	CHECK_EQ(agent_cmd(&a, GPUNVME_CMD_READ, buf, 0, 256, false), 0);
	CHECK(memcmp(buf, ft_ns_data(T), 128 * 1024) == 0);
	CHECK_OK(gpunvme_ctrl_delete_qpair_raw(c, qid));
	gpunvme_ctrl_release_qid(c, qid);
	gpunvme_close(c);
	ft_stop(T);
	return 0;
}

/* A GPU queue pair deleted and created again under the same ID (the layer
 * stream does this for each stream it opens): the new queue starts at
 * slot 0 of its rings. The doorbells over TCP are words in a host page
 * that outlives the queues; before the fix the new proxy read the old
 * queue's last tail, forwarded that many zeroed SQEs and posted their
 * completions, and on the GPU each re-created queue lost its first
 * commands until their 30 s timeout (the matrix's C layer stream x
 * NVMe/TCP x Tier 1 cell took 61 s). Each round then fills the queue:
 * 15 reads rung at once into guarded buffers. Also: IDs are handed out in
 * rotation on TCP (qid_reuse_last), for CPU and GPU queues alike. */
TEST_CASE(gpu_proxy_recreated_queue)
{
	REQUIRE(start(NULL) == 0);
	struct gpunvme_ctrl *c;
	REQUIRE_OK(open_ctrl("", &c));
	pattern(ft_ns_data(T), 1 << 20, 23);
	uint8_t *buf = gpunvme_dma_alloc(c, 64 * 1024);
	uint64_t *list = gpunvme_dma_alloc(c, 4096);
	REQUIRE(buf && list);
	size_t dlen;
	volatile uint8_t *db = gpunvme_ctrl_doorbells(c, &dlen);
	REQUIRE(db != NULL);
	struct gpunvme_ctrl_info ci;
	REQUIRE_OK(gpunvme_ctrl_info(c, &ci));
	REQUIRE(ci.nr_io_queues == 2);
	uint16_t prev = 0;
	for (int round = 0; round < 3; round++) {
		uint16_t qid;
		REQUIRE_OK(gpunvme_ctrl_reserve_qid(c, &qid));
		/* rotation: not the ID just deleted (the target may still
		 * hold it), unless it is the only one */
		if (round)
			CHECK(qid != prev, "round %d: qid %u again", round, qid);
		prev = qid;
		/* fresh rings, as a new GPU queue set allocates them */
		struct agent a = { .c = c, .depth = 16, .phase = 1, .list = list, .cid = (uint16_t)(round * 100) };
		a.sq = gpunvme_dma_alloc(c, 16 * 64);
		a.cq = gpunvme_dma_alloc(c, 16 * 16);
		REQUIRE(a.sq && a.cq);
		a.sq_db = (volatile uint32_t *)(db + gpunvme_sq_doorbell(qid, 0));
		REQUIRE_OK(gpunvme_ctrl_create_qpair_raw(c, qid, gpunvme_dma_iova(c, a.sq), gpunvme_dma_iova(c, a.cq), 16));
		/* nothing rung yet: no completion may appear */
		struct timespec ts = { 0, 100 * 1000000L };
		nanosleep(&ts, NULL);
		CHECK(gpunvme_dw3_phase(__atomic_load_n(&((volatile uint32_t *)a.cq)[3], __ATOMIC_ACQUIRE)) == 0,
		      "round %d: a completion the agent never asked for (stale doorbell)", round);
		/* five reads: the next round's queue of the same ID would see
		 * tail 5 if the doorbell were stale */
		for (uint32_t i = 0; i < 5; i++) {
			memset(buf, 0xee, 8192);
			CHECK_EQ(agent_cmd(&a, GPUNVME_CMD_READ, buf, (round * 5 + i) * 16, 16, false), 0);
			CHECK(memcmp(buf, ft_ns_data(T) + (size_t)(round * 5 + i) * 16 * 512, 8192) == 0, "round %d read %u",
			      round, i);
		}
		/* then the queue full: 15 reads (depth 16 keeps one slot
		 * empty) rung at once into 15 buffers between guard pages,
		 * completions in any order; every byte and every guard */
		enum { NB = 15, GUARD = 4096, LEN = 8192 };
		uint8_t *area = gpunvme_dma_alloc(c, NB * (LEN + GUARD) + GUARD);
		uint64_t *lists = gpunvme_dma_alloc(c, NB * 4096);
		REQUIRE(area && lists);
		memset(area, 0x5c, NB * (LEN + GUARD) + GUARD);
		uint16_t cids[NB];
		for (uint32_t i = 0; i < NB; i++) {
			struct gpunvme_sqe *e = &a.sq[a.tail];
			memset(e, 0, sizeof(*e));
			e->opc = GPUNVME_CMD_READ;
			e->cid = cids[i] = a.cid++;
			e->nsid = 1;
			uint8_t *dst = area + GUARD + (size_t)i * (LEN + GUARD);
			struct gpunvme_prp_addr pa = { gpunvme_dma_iova(c, dst), NULL, 0, 0 };
			uint64_t li = gpunvme_dma_iova(c, lists + i * 512);
			REQUIRE_OK(gpunvme_prp_fill(&pa, 0, LEN, 4096, lists + i * 512, &li, 1, &e->prp1, &e->prp2));
			e->rw.slba = 1000 + (uint64_t)round * 100 + i * 16;
			e->rw.nlb = LEN / 512 - 1;
			if (++a.tail == a.depth)
				a.tail = 0;
		}
		__atomic_store_n(a.sq_db, a.tail, __ATOMIC_RELEASE); /* one doorbell for all */
		uint32_t seen = 0;
		uint64_t t0 = gpunvme_now_ns();
		while (seen < NB && gpunvme_now_ns() - t0 < 5000000000ull) {
			const volatile uint32_t *dw = (const volatile uint32_t *)&a.cq[a.head];
			uint32_t v = __atomic_load_n(&dw[3], __ATOMIC_ACQUIRE);
			if (gpunvme_dw3_phase(v) != a.phase)
				continue;
			CHECK_EQ(gpunvme_dw3_status(v), 0);
			if (++a.head == a.depth) {
				a.head = 0;
				a.phase ^= 1;
			}
			seen++;
		}
		REQUIRE(seen == NB, "round %d: %u of %d completions", round, seen, NB);
		for (uint32_t i = 0; i < NB; i++) {
			const uint8_t *got = area + GUARD + (size_t)i * (LEN + GUARD);
			CHECK(memcmp(got, ft_ns_data(T) + (1000 + (size_t)round * 100 + i * 16) * 512, LEN) == 0,
			      "round %d read %u (cid %u)", round, i, cids[i]);
		}
		for (uint32_t i = 0; i <= NB; i++)
			for (uint32_t b = 0; b < GUARD; b++)
				REQUIRE(area[(size_t)i * (LEN + GUARD) + b] == 0x5c, "round %d: guard %u byte %u written", round,
					i, b);
		gpunvme_dma_free(c, area);
		gpunvme_dma_free(c, lists);
		CHECK_OK(gpunvme_ctrl_delete_qpair_raw(c, qid));
		gpunvme_ctrl_release_qid(c, qid);
		gpunvme_dma_free(c, a.sq);
		gpunvme_dma_free(c, a.cq);
	}
	gpunvme_close(c);
	ft_stop(T);
	return 0;
}

/* ---- PDU layer ------------------------------------------------------------------------------ */

TEST_CASE(crc32c_check_value)
{
	/* the standard check value of CRC32C (RFC 3720 B.4 lists others) */
	CHECK_EQ(gpunvme_crc32c(0, "123456789", 9), 0xE3069283u);
	uint8_t z[32] = { 0 };
	CHECK_EQ(gpunvme_crc32c(0, z, 32), 0x8A9136AAu);
	CHECK_EQ(gpunvme_crc32c(gpunvme_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
	return 0;
}

TEST_CASE(pdu_parse_rejects)
{
	uint8_t h[NVMF_HDR_MAX] = { 0 };
	struct nvmf_pdu p;
	char why[160];
	/* a good CapsuleResp, plain and with a header digest */
	nvmf_pdu_ch(h, NVMF_PDU_RSP, 0, NVMF_HLEN_RSP, 0, NVMF_HLEN_RSP);
	CHECK_OK(nvmf_pdu_parse(h, NVMF_HLEN_RSP, false, false, &p, why, sizeof(why)));
	nvmf_pdu_ch(h, NVMF_PDU_RSP, NVMF_F_HDGST, NVMF_HLEN_RSP, 0, NVMF_HLEN_RSP + 4);
	nvmf_pdu_seal(h, NVMF_HLEN_RSP);
	CHECK_OK(nvmf_pdu_parse(h, NVMF_HLEN_RSP + 4, true, false, &p, why, sizeof(why)));
	h[9] ^= 1;
	CHECK_EQ(nvmf_pdu_parse(h, NVMF_HLEN_RSP + 4, true, false, &p, why, sizeof(why)), -EBADMSG);
	/* digest flag disagreeing with the negotiation */
	nvmf_pdu_ch(h, NVMF_PDU_RSP, 0, NVMF_HLEN_RSP, 0, NVMF_HLEN_RSP);
	CHECK_EQ(nvmf_pdu_parse(h, NVMF_HLEN_RSP + 4, true, false, &p, why, sizeof(why)), -EPROTO);
	/* a CapsuleResp with data */
	nvmf_pdu_ch(h, NVMF_PDU_RSP, 0, NVMF_HLEN_RSP, NVMF_HLEN_RSP, NVMF_HLEN_RSP + 8);
	CHECK_EQ(nvmf_pdu_parse(h, NVMF_HLEN_RSP, false, false, &p, why, sizeof(why)), -EPROTO);
	/* C2HData: DATAL must equal the data carried, PDO outside the header */
	nvmf_pdu_ch(h, NVMF_PDU_C2H_DATA, 0, NVMF_HLEN_DATA, NVMF_HLEN_DATA, NVMF_HLEN_DATA + 512);
	nvmf_put32(h + 16, 512);
	CHECK_OK(nvmf_pdu_parse(h, NVMF_HLEN_DATA, false, false, &p, why, sizeof(why)));
	CHECK_EQ(p.data_len, 512);
	nvmf_put32(h + 16, 511);
	CHECK_EQ(nvmf_pdu_parse(h, NVMF_HLEN_DATA, false, false, &p, why, sizeof(why)), -EPROTO);
	nvmf_put32(h + 16, 512);
	h[3] = 8;
	CHECK_EQ(nvmf_pdu_parse(h, NVMF_HLEN_DATA, false, false, &p, why, sizeof(why)), -EPROTO);
	h[3] = NVMF_HLEN_DATA;
	h[1] = NVMF_F_SUCCESS;
	CHECK_EQ(nvmf_pdu_parse(h, NVMF_HLEN_DATA, false, false, &p, why, sizeof(why)), -EPROTO);
	CHECK(strstr(why, "SUCCESS") != NULL);
	/* unknown type, wrong HLEN, R2T of 0 bytes, bad ICResp */
	h[0] = 0x0e;
	CHECK_EQ(nvmf_pdu_parse(h, NVMF_HLEN_DATA, false, false, &p, why, sizeof(why)), -EPROTO);
	nvmf_pdu_ch(h, NVMF_PDU_R2T, 0, 20, 0, 20);
	CHECK_EQ(nvmf_pdu_parse(h, NVMF_HLEN_DATA, false, false, &p, why, sizeof(why)), -EPROTO);
	nvmf_pdu_ch(h, NVMF_PDU_R2T, 0, NVMF_HLEN_DATA, 0, NVMF_HLEN_DATA);
	nvmf_put32(h + 16, 0);
	CHECK_EQ(nvmf_pdu_parse(h, NVMF_HLEN_DATA, false, false, &p, why, sizeof(why)), -EPROTO);
	memset(h, 0, sizeof(h));
	nvmf_pdu_ch(h, NVMF_PDU_ICRESP, 0, NVMF_HLEN_IC, 0, NVMF_HLEN_IC);
	nvmf_put32(h + 12, 1000);
	CHECK_EQ(nvmf_pdu_parse(h, NVMF_HLEN_IC, false, false, &p, why, sizeof(why)), -EPROTO);
	CHECK(strstr(why, "MAXH2CDATA") != NULL);
	CHECK_EQ(nvmf_pdu_parse(h, 4, false, false, &p, why, sizeof(why)), -EPROTO);
	/* data offset alignment for what we send */
	CHECK_EQ(nvmf_pdu_data_offset(NVMF_HLEN_CMD, false, 0), 72);
	CHECK_EQ(nvmf_pdu_data_offset(NVMF_HLEN_CMD, true, 0), 76);
	CHECK_EQ(nvmf_pdu_data_offset(NVMF_HLEN_CMD, true, 7), 96);
	return 0;
}

int main(int argc, char **argv)
{
	return check_main(argc, argv);
}
