/* SPDX-License-Identifier: BSD-2-Clause */
/* Minimal polled NVMe driver for the QEMU guest probes; see probe_common.h.
 * Deliberately an independent oracle: its own queue code, not the library's
 * queue core, proves the buses against QEMU's controller on their own. */
#include "probe_common.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint32_t probe_rd32(struct probe *p, uint32_t off)
{
	return *(volatile uint32_t *)(p->bar + off);
}

void probe_wr32(struct probe *p, uint32_t off, uint32_t v)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	*(volatile uint32_t *)(p->bar + off) = v;
}

uint64_t probe_rd64(struct probe *p, uint32_t off)
{
	uint64_t lo = probe_rd32(p, off);
	uint64_t hi = probe_rd32(p, off + 4);
	return lo | hi << 32;
}

static void wr64(struct probe *p, uint32_t off, uint64_t v)
{
	probe_wr32(p, off, (uint32_t)v);
	probe_wr32(p, off + 4, (uint32_t)(v >> 32));
}

const char *probe_status_str(uint32_t st)
{
	if (st == PROBE_TIMEOUT)
		return "timeout (no completion)";
	return gpunvme_status_str((uint16_t)st);
}

void probe_print_regs(struct probe *p)
{
	uint64_t cap = probe_rd64(p, GPUNVME_REG_CAP);
	uint32_t vs = probe_rd32(p, GPUNVME_REG_VS);
	printf("%s: CAP 0x%016" PRIx64 " (MQES %u, CQR %u, TO %u ms, DSTRD %u, CSS 0x%x, MPSMIN %u, MPSMAX %u)\n",
	       p->name, cap, gpunvme_cap_mqes(cap) + 1, gpunvme_cap_cqr(cap), gpunvme_cap_to(cap) * 500,
	       gpunvme_cap_dstrd(cap), gpunvme_cap_css(cap), 4096u << gpunvme_cap_mpsmin(cap),
	       4096u << gpunvme_cap_mpsmax(cap));
	printf("%s: VS 0x%08x (NVMe %u.%u.%u), CC 0x%08x, CSTS 0x%08x\n", p->name, vs, gpunvme_vs_mjr(vs),
	       gpunvme_vs_mnr(vs), gpunvme_vs_ter(vs), probe_rd32(p, GPUNVME_REG_CC),
	       probe_rd32(p, GPUNVME_REG_CSTS));
}

static int wait_rdy(struct probe *p, uint32_t want)
{
	uint64_t end = now_ms() + p->timeout_ms;
	for (;;) {
		uint32_t csts = probe_rd32(p, GPUNVME_REG_CSTS);
		if (csts == 0xffffffffu) {
			fprintf(stderr, "%s: CSTS reads all ones (device gone?)\n", p->name);
			return -1;
		}
		if (gpunvme_csts_cfs(csts) && want) {
			fprintf(stderr, "%s: controller fatal status (CSTS 0x%x)\n", p->name, csts);
			return -1;
		}
		if (gpunvme_csts_rdy(csts) == want)
			return 0;
		if (now_ms() > end) {
			fprintf(stderr, "%s: CSTS.RDY != %u after %u ms (CSTS 0x%x)\n", p->name, want,
				p->timeout_ms, csts);
			return -1;
		}
		usleep(1000);
	}
}

int probe_enable(struct probe *p)
{
	p->cap = probe_rd64(p, GPUNVME_REG_CAP);
	p->dstrd = gpunvme_cap_dstrd(p->cap);
	p->timeout_ms = (gpunvme_cap_to(p->cap) ? gpunvme_cap_to(p->cap) : 1) * 500u;
	p->page = 4096;
	if (gpunvme_cap_mpsmin(p->cap) != 0) {
		fprintf(stderr, "%s: CAP.MPSMIN %u: 4 KiB pages unsupported\n", p->name, gpunvme_cap_mpsmin(p->cap));
		return -1;
	}
	if (gpunvme_cap_mqes(p->cap) + 1 < PROBE_QDEPTH) {
		fprintf(stderr, "%s: CAP.MQES too small\n", p->name);
		return -1;
	}
	if (gpunvme_cc_en(probe_rd32(p, GPUNVME_REG_CC))) {
		probe_wr32(p, GPUNVME_REG_CC, 0);
		if (wait_rdy(p, 0))
			return -1;
	} else if (wait_rdy(p, 0)) {
		return -1;
	}
	memset(p->mem + PROBE_OFF_ASQ, 0, 0x1000);
	memset(p->mem + PROBE_OFF_ACQ, 0, 0x1000);
	p->aq = (struct probe_q){ .sq_off = PROBE_OFF_ASQ, .cq_off = PROBE_OFF_ACQ, .qid = 0, .phase = 1 };
	probe_wr32(p, GPUNVME_REG_AQA, GPUNVME_AQA(PROBE_QDEPTH - 1, PROBE_QDEPTH - 1));
	wr64(p, GPUNVME_REG_ASQ, p->iova + PROBE_OFF_ASQ);
	wr64(p, GPUNVME_REG_ACQ, p->iova + PROBE_OFF_ACQ);
	uint32_t cc = GPUNVME_CC_EN | (6u << GPUNVME_CC_IOSQES_SHIFT) | (4u << GPUNVME_CC_IOCQES_SHIFT);
	probe_wr32(p, GPUNVME_REG_CC, cc);
	if (wait_rdy(p, 1))
		return -1;
	printf("%s: enabled, admin queues at bus address 0x%" PRIx64 "/0x%" PRIx64 ", CSTS 0x%x\n", p->name,
	       p->iova + PROBE_OFF_ASQ, p->iova + PROBE_OFF_ACQ, probe_rd32(p, GPUNVME_REG_CSTS));
	return 0;
}

static uint32_t submit(struct probe *p, struct probe_q *q, struct gpunvme_sqe *cmd, struct gpunvme_cqe *out)
{
	struct gpunvme_sqe *sq = (struct gpunvme_sqe *)(p->mem + q->sq_off);
	volatile struct gpunvme_cqe *cq = (volatile struct gpunvme_cqe *)(p->mem + q->cq_off);
	uint16_t cid = p->cid++;
	cmd->cid = cid;
	memcpy(&sq[q->tail], cmd, sizeof(*cmd));
	q->tail = (uint16_t)((q->tail + 1) % PROBE_QDEPTH);
	probe_wr32(p, gpunvme_sq_doorbell(q->qid, p->dstrd), q->tail);

	uint64_t end = now_ms() + 10000;
	for (;;) {
		uint16_t st = cq[q->head].status;
		if ((st & 1) == q->phase)
			break;
		if (now_ms() > end) {
			fprintf(stderr, "%s: command opc 0x%02x cid %u on queue %u: no completion in 10 s (CSTS 0x%x)\n",
				p->name, cmd->opc, cid, q->qid, probe_rd32(p, GPUNVME_REG_CSTS));
			return PROBE_TIMEOUT;
		}
	}
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	struct gpunvme_cqe c;
	c.dw0 = cq[q->head].dw0;
	c.dw1 = cq[q->head].dw1;
	c.sqhd = cq[q->head].sqhd;
	c.sqid = cq[q->head].sqid;
	c.cid = cq[q->head].cid;
	c.status = cq[q->head].status;
	q->head = (uint16_t)((q->head + 1) % PROBE_QDEPTH);
	if (q->head == 0)
		q->phase ^= 1;
	probe_wr32(p, gpunvme_cq_doorbell(q->qid, p->dstrd), q->head);
	if (c.cid != cid)
		fprintf(stderr, "%s: completion for cid %u, expected %u\n", p->name, c.cid, cid);
	if (out)
		*out = c;
	return gpunvme_cqe_status(c.status);
}

uint32_t probe_admin(struct probe *p, struct gpunvme_sqe *cmd, struct gpunvme_cqe *cqe)
{
	return submit(p, &p->aq, cmd, cqe);
}

static void trim_copy(char *dst, const char *src, size_t n)
{
	memcpy(dst, src, n);
	dst[n] = 0;
	while (n > 0 && (dst[n - 1] == ' ' || dst[n - 1] == 0))
		dst[--n] = 0;
}

static uint32_t identify(struct probe *p, uint8_t cns, uint32_t nsid)
{
	struct gpunvme_sqe c = { .opc = GPUNVME_ADM_IDENTIFY, .nsid = nsid };
	c.prp1 = p->iova + PROBE_OFF_ID;
	c.identify.cns = cns;
	memset(p->mem + PROBE_OFF_ID, 0, 4096);
	return probe_admin(p, &c, NULL);
}

int probe_identify_and_queues(struct probe *p)
{
	uint32_t st = identify(p, GPUNVME_CNS_CTRL, 0);
	if (st) {
		fprintf(stderr, "%s: Identify Controller failed: %s\n", p->name, probe_status_str(st));
		return -1;
	}
	const struct gpunvme_id_ctrl *id = (const struct gpunvme_id_ctrl *)(p->mem + PROBE_OFF_ID);
	char sn[21], fr[9];
	trim_copy(p->model, id->mn, 40);
	trim_copy(sn, id->sn, 20);
	trim_copy(fr, id->fr, 8);
	uint32_t nn = id->nn;
	uint8_t mdts = id->mdts;
	printf("%s: Identify Controller: model \"%s\" serial \"%s\" firmware \"%s\" vid 0x%04x mdts %u nn %u ver 0x%x\n",
	       p->name, p->model, sn, fr, id->vid, mdts, nn, id->ver);
	p->max_xfer = PROBE_DATA_MAX;
	if (mdts && (4096ull << mdts) < p->max_xfer)
		p->max_xfer = 4096u << mdts;
	if (p->max_xfer > 512u * 4096u)  /* one PRP list page */
		p->max_xfer = 512u * 4096u;

	st = identify(p, GPUNVME_CNS_ACTIVE_NS_LIST, 0);
	if (st) {
		fprintf(stderr, "%s: Identify active namespace list failed: %s\n", p->name, probe_status_str(st));
		return -1;
	}
	const uint32_t *list = (const uint32_t *)(p->mem + PROBE_OFF_ID);
	printf("%s: active namespaces:", p->name);
	for (int i = 0; i < 1024 && list[i]; i++)
		printf(" %u", list[i]);
	printf("\n");

	/* Number of Queues (Get Features): allocated I/O SQs/CQs, 0's based. */
	struct gpunvme_sqe gf = { .opc = GPUNVME_ADM_GET_FEATURES };
	gf.cdw[0] = GPUNVME_FEAT_NUM_QUEUES;
	struct gpunvme_cqe cqe;
	st = probe_admin(p, &gf, &cqe);
	if (st == 0)
		printf("%s: Number of Queues: %u SQ, %u CQ\n", p->name, (cqe.dw0 & 0xffff) + 1, (cqe.dw0 >> 16) + 1);

	/* I/O queue pair 1, polled (no interrupts), physically contiguous. */
	memset(p->mem + PROBE_OFF_IOSQ, 0, 0x1000);
	memset(p->mem + PROBE_OFF_IOCQ, 0, 0x1000);
	p->ioq = (struct probe_q){ .sq_off = PROBE_OFF_IOSQ, .cq_off = PROBE_OFF_IOCQ, .qid = 1, .phase = 1 };
	struct gpunvme_sqe cq = { .opc = GPUNVME_ADM_CREATE_CQ, .prp1 = p->iova + PROBE_OFF_IOCQ };
	cq.queue.qid = 1;
	cq.queue.qsize = PROBE_QDEPTH - 1;
	cq.queue.qflags = GPUNVME_Q_PC;
	st = probe_admin(p, &cq, NULL);
	if (st) {
		fprintf(stderr, "%s: Create I/O CQ failed: %s\n", p->name, probe_status_str(st));
		return -1;
	}
	struct gpunvme_sqe sq = { .opc = GPUNVME_ADM_CREATE_SQ, .prp1 = p->iova + PROBE_OFF_IOSQ };
	sq.queue.qid = 1;
	sq.queue.qsize = PROBE_QDEPTH - 1;
	sq.queue.qflags = GPUNVME_Q_PC;
	sq.queue.cqid_iv = 1;
	st = probe_admin(p, &sq, NULL);
	if (st) {
		fprintf(stderr, "%s: Create I/O SQ failed: %s\n", p->name, probe_status_str(st));
		return -1;
	}
	p->io_ready = 1;
	return 0;
}

static int select_ns(struct probe *p, uint32_t nsid)
{
	uint32_t st = identify(p, GPUNVME_CNS_NS, nsid);
	if (st) {
		fprintf(stderr, "%s: Identify Namespace %u failed: %s\n", p->name, nsid, probe_status_str(st));
		return -1;
	}
	const struct gpunvme_id_ns *ns = (const struct gpunvme_id_ns *)(p->mem + PROBE_OFF_ID);
	if (ns->nsze == 0) {
		fprintf(stderr, "%s: namespace %u inactive\n", p->name, nsid);
		return -1;
	}
	p->nsid = nsid;
	p->nsze = ns->nsze;
	p->lba_size = 1u << ns->lbaf[gpunvme_id_ns_flbas_index(ns)].lbads;
	printf("%s: namespace %u: %" PRIu64 " blocks of %u bytes (%" PRIu64 " MiB), max transfer %u bytes\n", p->name,
	       nsid, p->nsze, p->lba_size, (p->nsze * p->lba_size) >> 20, p->max_xfer);
	return 0;
}

uint32_t probe_io_raw(struct probe *p, uint8_t opc, uint64_t slba, uint16_t nlb0, uint64_t prp1, uint64_t prp2)
{
	struct gpunvme_sqe c = { .opc = opc, .nsid = p->nsid, .prp1 = prp1, .prp2 = prp2 };
	c.rw.slba = slba;
	c.rw.nlb = nlb0;
	return submit(p, &p->ioq, &c, NULL);
}

uint32_t probe_rw(struct probe *p, uint8_t opc, uint64_t off, uint32_t bytes, uint32_t data_off)
{
	if (off % p->lba_size || bytes % p->lba_size || data_off % p->page ||
	    (uint64_t)data_off + bytes > PROBE_DATA_MAX) {
		fprintf(stderr, "%s: bad I/O request off %" PRIu64 " bytes %u\n", p->name, off, bytes);
		return GPUNVME_SC_INVALID_FIELD;
	}
	uint32_t chunk_max = p->max_xfer - p->max_xfer % p->lba_size;
	while (bytes) {
		uint32_t n = bytes < chunk_max ? bytes : chunk_max;
		uint64_t buf = p->iova + PROBE_OFF_DATA + data_off;
		uint64_t prp2 = 0;
		uint32_t pages = (n + p->page - 1) / p->page;
		if (pages == 2) {
			prp2 = buf + p->page;
		} else if (pages > 2) {
			uint64_t *list = (uint64_t *)(p->mem + PROBE_OFF_PRPL);
			for (uint32_t i = 1; i < pages; i++)
				list[i - 1] = buf + (uint64_t)i * p->page;
			prp2 = p->iova + PROBE_OFF_PRPL;
		}
		uint32_t st = probe_io_raw(p, opc, off / p->lba_size, (uint16_t)(n / p->lba_size - 1), buf, prp2);
		if (st) {
			fprintf(stderr, "%s: %s at byte %" PRIu64 " (%u bytes) failed: %s\n", p->name,
				opc == GPUNVME_CMD_WRITE ? "Write" : "Read", off, n, probe_status_str(st));
			return st;
		}
		off += n;
		data_off += n;
		bytes -= n;
	}
	return 0;
}

int probe_shutdown(struct probe *p)
{
	int rc = 0;
	if (p->io_ready) {
		struct gpunvme_sqe d = { .opc = GPUNVME_ADM_DELETE_SQ };
		d.queue.qid = 1;
		if (probe_admin(p, &d, NULL))
			rc = -1;
		d.opc = GPUNVME_ADM_DELETE_CQ;
		if (probe_admin(p, &d, NULL))
			rc = -1;
		p->io_ready = 0;
	}
	uint32_t cc = probe_rd32(p, GPUNVME_REG_CC);
	probe_wr32(p, GPUNVME_REG_CC, (cc & ~GPUNVME_CC_SHN_MASK) | (GPUNVME_CC_SHN_NORMAL << GPUNVME_CC_SHN_SHIFT));
	uint64_t end = now_ms() + 5000;
	while (gpunvme_csts_shst(probe_rd32(p, GPUNVME_REG_CSTS)) != GPUNVME_SHST_COMPLETE) {
		if (now_ms() > end) {
			fprintf(stderr, "%s: shutdown did not complete\n", p->name);
			rc = -1;
			break;
		}
		usleep(1000);
	}
	probe_wr32(p, GPUNVME_REG_CC, 0);
	if (wait_rdy(p, 0))
		rc = -1;
	printf("%s: shut down and disabled, CSTS 0x%x\n", p->name, probe_rd32(p, GPUNVME_REG_CSTS));
	return rc;
}

uint64_t probe_virt_to_phys(const void *va)
{
	int fd = open("/proc/self/pagemap", O_RDONLY);
	if (fd < 0)
		return 0;
	uint64_t ent = 0;
	long psz = sysconf(_SC_PAGESIZE);
	off_t off = (off_t)((uintptr_t)va / (uintptr_t)psz) * 8;
	ssize_t n = pread(fd, &ent, sizeof(ent), off);
	close(fd);
	if (n != (ssize_t)sizeof(ent) || !(ent & (1ull << 63)))
		return 0;
	uint64_t pfn = ent & ((1ull << 55) - 1);
	if (pfn == 0)
		return 0;
	return pfn * (uint64_t)psz + (uintptr_t)va % (uintptr_t)psz;
}

/* Deterministic pattern: xorshift64 seeded by the byte offset on the disk, so
 * any reader can regenerate it. */
static void fill_pattern(uint8_t *dst, uint64_t disk_off, uint32_t bytes)
{
	for (uint32_t i = 0; i < bytes; i += 8) {
		uint64_t x = (disk_off + i) ^ 0x9e3779b97f4a7c15ull;
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(dst + i, &x, 8);
	}
}

static int do_write(struct probe *p, uint64_t off, uint32_t bytes, const char *file)
{
	if (bytes == 0 || bytes > PROBE_DATA_MAX || bytes % 8) {
		fprintf(stderr, "%s: --write: size must be 1..%u bytes\n", p->name, PROBE_DATA_MAX);
		return -1;
	}
	uint8_t *buf = p->mem + PROBE_OFF_DATA;
	fill_pattern(buf, off, bytes);
	if (probe_rw(p, GPUNVME_CMD_WRITE, off, bytes, 0))
		return -1;
	struct gpunvme_sqe fl = { .opc = GPUNVME_CMD_FLUSH, .nsid = p->nsid };
	uint32_t st = submit(p, &p->ioq, &fl, NULL);
	if (st) {
		fprintf(stderr, "%s: Flush failed: %s\n", p->name, probe_status_str(st));
		return -1;
	}
	/* Read back through the device before handing the data to others. */
	memset(buf, 0xee, bytes);
	if (probe_rw(p, GPUNVME_CMD_READ, off, bytes, 0))
		return -1;
	uint8_t *want = malloc(bytes);
	if (!want)
		return -1;
	fill_pattern(want, off, bytes);
	int bad = memcmp(buf, want, bytes) != 0;
	if (bad)
		fprintf(stderr, "%s: read-back after write differs\n", p->name);
	FILE *f = fopen(file, "wb");
	if (!f || fwrite(want, 1, bytes, f) != bytes || fclose(f)) {
		fprintf(stderr, "%s: cannot write %s: %s\n", p->name, file, strerror(errno));
		free(want);
		return -1;
	}
	free(want);
	printf("%s: wrote %u bytes at byte %" PRIu64 " of namespace %u (pattern saved to %s)%s\n", p->name, bytes,
	       off, p->nsid, file, bad ? ", READ-BACK MISMATCH" : ", read back OK");
	return bad ? -1 : 0;
}

static int do_verify(struct probe *p, uint64_t off, const char *file)
{
	FILE *f = fopen(file, "rb");
	if (!f) {
		fprintf(stderr, "%s: cannot open %s: %s\n", p->name, file, strerror(errno));
		return -1;
	}
	uint8_t *want = malloc(PROBE_DATA_MAX + 1);
	size_t n = want ? fread(want, 1, PROBE_DATA_MAX + 1, f) : 0;
	fclose(f);
	if (n == 0 || n > PROBE_DATA_MAX || n % p->lba_size) {
		fprintf(stderr, "%s: %s: size %zu is not 1..%u bytes in whole blocks\n", p->name, file, n,
			PROBE_DATA_MAX);
		free(want);
		return -1;
	}
	uint8_t *buf = p->mem + PROBE_OFF_DATA;
	memset(buf, 0xee, n);
	if (probe_rw(p, GPUNVME_CMD_READ, off, (uint32_t)n, 0)) {
		free(want);
		return -1;
	}
	size_t i = 0;
	while (i < n && buf[i] == want[i])
		i++;
	free(want);
	if (i != n) {
		fprintf(stderr, "%s: data at byte %" PRIu64 " differs from %s (first at +%zu)\n", p->name, off, file, i);
		return -1;
	}
	printf("%s: read %zu bytes at byte %" PRIu64 " of namespace %u: equal to %s\n", p->name, n, off, p->nsid,
	       file);
	return 0;
}

int probe_main(struct probe *p, int argc, char **argv, probe_fault_fn fault_test, void *ctx)
{
	int rc = 0;
	probe_print_regs(p);
	if (probe_enable(p) || probe_identify_and_queues(p) || select_ns(p, 1))
		return 1;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		int r;
		if (!strcmp(a, "--nsid") && i + 1 < argc) {
			r = select_ns(p, (uint32_t)strtoul(argv[++i], NULL, 0));
		} else if (!strcmp(a, "--write") && i + 3 < argc) {
			uint64_t off = strtoull(argv[i + 1], NULL, 0);
			uint32_t bytes = (uint32_t)strtoul(argv[i + 2], NULL, 0);
			r = do_write(p, off, bytes, argv[i + 3]);
			i += 3;
		} else if (!strcmp(a, "--verify") && i + 2 < argc) {
			r = do_verify(p, strtoull(argv[i + 1], NULL, 0), argv[i + 2]);
			i += 2;
		} else if (!strcmp(a, "--fault")) {
			r = fault_test ? fault_test(p, ctx) : 77;
		} else {
			fprintf(stderr, "%s: bad argument %s\n", p->name, a);
			r = -1;
		}
		if (r == 77 && rc == 0)
			rc = 77;
		else if (r)
			rc = 1;
		printf("%s: step %s: %s\n", p->name, a, r == 0 ? "ok" : r == 77 ? "skipped" : "FAILED");
	}
	if (probe_shutdown(p))
		rc = 1;
	return rc;
}
