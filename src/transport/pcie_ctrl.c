/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The PCIe transport, control plane: registers in BAR0, controller
 * bring-up (NVMe 1.4 §7.6.1), the admin queue ring, reset (§7.3.2),
 * shutdown (§7.6.2), I/O queue creation and deletion (§5.3 - §5.6) and the
 * GPU queue pairs' doorbells (BAR0 itself). Every bus with a BAR uses it:
 * the emulator, vfio, uio and the kernel module.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "transport/pcie.h"

static bool pcie_match(const struct gpunvme_bus *b)
{
	return b->bar0 != NULL;
}

/* CSTS all ones: the device left the bus (surprise removal, link down). */
static int pcie_check_alive(struct gpunvme_ctrl *c, const char *what)
{
	uint32_t csts = pcie_rd32(c, GPUNVME_REG_CSTS);
	if (csts == 0xffffffffu)
		return gpunvme_set_error(-ENODEV, "%s:%s: %s: device gone (registers read all ones)",
					 c->bus.ops->name, c->bus.addr, what);
	if (csts & GPUNVME_CSTS_CFS)
		return gpunvme_set_error(-EIO, "%s:%s: %s: controller fatal status (CSTS.CFS); reset it",
					 c->bus.ops->name, c->bus.addr, what);
	return 0;
}

/* Wait for CSTS.RDY == want within CAP.TO (500 ms units, §3.1.1). */
static int wait_ready(struct gpunvme_ctrl *c, uint32_t want, const char *what)
{
	uint64_t to_ms = (uint64_t)(gpunvme_cap_to(c->cap) ? gpunvme_cap_to(c->cap) : 1) * 500;
	uint64_t deadline = gpunvme_now_ns() + to_ms * 1000000ull;
	for (uint32_t spins = 0;; spins++) {
		uint32_t csts = pcie_rd32(c, GPUNVME_REG_CSTS);
		if (csts == 0xffffffffu)
			return gpunvme_set_error(-ENODEV, "%s:%s: %s: device gone (registers read all ones)",
						 c->bus.ops->name, c->bus.addr, what);
		if ((csts & GPUNVME_CSTS_CFS) && want)
			return gpunvme_set_error(-EIO, "%s:%s: %s: controller reported fatal status (CSTS.CFS)",
						 c->bus.ops->name, c->bus.addr, what);
		if ((csts & GPUNVME_CSTS_RDY) == want)
			return 0;
		if (gpunvme_now_ns() > deadline)
			return gpunvme_set_error(-ETIMEDOUT, "%s:%s: %s: CSTS.RDY did not become %u within CAP.TO (%llu ms)",
						 c->bus.ops->name, c->bus.addr, what, want, (unsigned long long)to_ms);
		ctrl_relax(spins);
	}
}

static int disable_regs(struct gpunvme_ctrl *c)
{
	uint32_t cc = pcie_rd32(c, GPUNVME_REG_CC);
	uint32_t csts = pcie_rd32(c, GPUNVME_REG_CSTS);
	if (cc == 0xffffffffu || csts == 0xffffffffu)
		return gpunvme_set_error(-ENODEV, "%s:%s: device gone (registers read all ones)", c->bus.ops->name,
					 c->bus.addr);
	/* §7.6.1: changing EN while RDY does not yet match it is undefined;
	 * let a previous enable finish first (a failed one shows CFS) */
	if ((cc & GPUNVME_CC_EN) && !(csts & GPUNVME_CSTS_RDY) && !(csts & GPUNVME_CSTS_CFS))
		wait_ready(c, 1, "settle before reset");
	pcie_wr32(c, GPUNVME_REG_CC, cc & ~GPUNVME_CC_EN);
	return wait_ready(c, 0, "disable (CC.EN=0)");
}

/* CC.EN 0 -> 1 with fresh admin queues (§7.6.1 steps 3-6). */
static int enable_regs(struct gpunvme_ctrl *c)
{
	struct pcie_ctrl *pc = pcie_ctrl(c);
	gpunvme_ring_reset(&pc->aq);
	c->cc = gpunvme_admin_enable(c->bus.bar0, gpunvme_dma_iova(c, pc->aq.sq), gpunvme_dma_iova(c, pc->aq.cq),
				     pc->aq.depth, c->page_shift);
	return wait_ready(c, 1, "enable (CC.EN=1)");
}

static int bring_up(struct gpunvme_ctrl *c)
{
	int rc;
	if ((rc = disable_regs(c)))
		return rc;
	if ((rc = enable_regs(c)))
		return rc;
	return 0;
}

/* Admin command: one at a time (admin_lock held by the caller), wait for
 * its completion with a timeout. Completions of other CIDs (late answers to
 * commands that timed out) are consumed and ignored. */
static int admin_exec_locked(struct gpunvme_ctrl *c, struct gpunvme_sqe *cmd, struct gpunvme_cqe *out,
			     uint32_t timeout_ms)
{
	struct gpunvme_ring *aq = &pcie_ctrl(c)->aq;
	cmd->cid = pcie_ctrl(c)->acid++;
	*gpunvme_ring_sqe(aq) = *cmd;
	gpunvme_ring_sq_push(aq);
	gpunvme_ring_sq_doorbell(aq);
	uint64_t deadline = gpunvme_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	for (uint32_t spins = 0;; spins++) {
		uint32_t dw3;
		if (gpunvme_ring_cq_peek(aq, &dw3)) {
			struct gpunvme_cqe e;
			memcpy(&e, (const void *)&aq->cq[aq->cq_head], sizeof(e));
			gpunvme_ring_cq_pop(aq);
			gpunvme_ring_cq_doorbell(aq);
			if (e.cid != cmd->cid)
				continue;
			if (out)
				*out = e;
			uint16_t st = gpunvme_cqe_status(e.status);
			if (st)
				return gpunvme_set_error(-EIO, "%s (opcode 0x%02x) failed: %s",
							 gpunvme_opcode_str(1, cmd->opc), cmd->opc, gpunvme_status_str(st));
			return 0;
		}
		if ((spins & 255) == 255) {
			int rc = pcie_check_alive(c, gpunvme_opcode_str(1, cmd->opc));
			if (rc)
				return rc;
			if (gpunvme_now_ns() > deadline)
				return gpunvme_set_error(-ETIMEDOUT, "%s:%s: admin command %s timed out after %u ms",
							 c->bus.ops->name, c->bus.addr, gpunvme_opcode_str(1, cmd->opc),
							 timeout_ms);
		}
		ctrl_relax(spins);
	}
}

/* Admin data through the bounce buffer: one page, so PRP1 alone (§4.3). */
static int pcie_admin(struct gpunvme_ctrl *c, struct gpunvme_sqe *cmd, void *buf, uint32_t len, int dir,
		      struct gpunvme_cqe *cpl)
{
	struct pcie_ctrl *pc = pcie_ctrl(c);
	if (len) {
		if (dir == QP_DATA_H2C)
			memcpy(pc->abuf, buf, len);
		else
			memset(pc->abuf, 0, 4096);
		cmd->prp1 = gpunvme_dma_iova(c, pc->abuf);
		cmd->prp2 = 0; /* the bounce buffer is one page */
	}
	int rc = admin_exec_locked(c, cmd, cpl, c->opts.admin_timeout_ms);
	if (!rc && len && dir != QP_DATA_H2C)
		memcpy(buf, pc->abuf, len);
	return rc;
}

static int pcie_open(struct gpunvme_ctrl *c, const char *uri)
{
	struct pcie_ctrl *pc = calloc(1, sizeof(*pc));
	if (!pc)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	c->tr_priv = pc;
	c->cap = (uint64_t)pcie_rd32(c, GPUNVME_REG_CAP) | ((uint64_t)pcie_rd32(c, GPUNVME_REG_CAP + 4) << 32);
	c->vs = pcie_rd32(c, GPUNVME_REG_VS);
	if (c->cap == ~0ull)
		return gpunvme_set_error(-ENODEV, "%s: device gone (registers read all ones)", uri);
	c->dstrd = gpunvme_cap_dstrd(c->cap);
	c->mqes = gpunvme_cap_mqes(c->cap) + 1;
	c->page_shift = c->opts.mps_shift ? c->opts.mps_shift : 12;
	c->page_size = 1u << c->page_shift;
	/* CC.MPS must lie in CAP.MPSMIN..MPSMAX (§3.1.5) */
	if (c->page_shift < 12 + gpunvme_cap_mpsmin(c->cap) || c->page_shift > 12 + gpunvme_cap_mpsmax(c->cap))
		return gpunvme_set_error(-ENOTSUP, "%s: host page size %u outside the controller's %u..%u bytes", uri,
					 c->page_size, 4096u << gpunvme_cap_mpsmin(c->cap),
					 4096u << gpunvme_cap_mpsmax(c->cap));
	if (!(gpunvme_cap_css(c->cap) & GPUNVME_CAP_CSS_NVM))
		return gpunvme_set_error(-ENOTSUP, "%s: controller does not support the NVM command set", uri);
	uint32_t adepth = c->opts.admin_depth ? c->opts.admin_depth : 64;
	if (adepth < 2)
		adepth = 2;
	if (adepth > 4096) /* AQA sizes are 12 bits (§3.1.8) */
		adepth = 4096;
	if (adepth > c->mqes)
		adepth = c->mqes;
	struct gpunvme_sqe *asq = gpunvme_dma_alloc(c, (size_t)adepth * sizeof(struct gpunvme_sqe));
	struct gpunvme_cqe *acq = gpunvme_dma_alloc(c, (size_t)adepth * sizeof(struct gpunvme_cqe));
	pc->abuf = gpunvme_dma_alloc(c, 4096);
	gpunvme_ring_init(&pc->aq, asq, acq, c->bus.bar0, 0, c->dstrd, adepth);
	if (!asq || !acq || !pc->abuf)
		return -ENOMEM;
	return bring_up(c);
}

/* The admin rings and the bounce buffer are DMA memory: the controller's
 * registry frees them with the rest. */
static void pcie_close(struct gpunvme_ctrl *c)
{
	free(c->tr_priv);
	c->tr_priv = NULL;
}

/* §7.6.2 normal shutdown: CC.SHN = 01b, wait for CSTS.SHST = 10b within
 * RTD3 Entry Latency (at least 1 s, 5 s when the controller gives none). */
static void pcie_shutdown(struct gpunvme_ctrl *c)
{
	uint32_t csts = pcie_rd32(c, GPUNVME_REG_CSTS);
	if (csts == 0xffffffffu || !(csts & GPUNVME_CSTS_RDY))
		return;
	pcie_wr32(c, GPUNVME_REG_CC, (c->cc & ~GPUNVME_CC_SHN_MASK) | (GPUNVME_CC_SHN_NORMAL << GPUNVME_CC_SHN_SHIFT));
	uint64_t to_ms = c->id.rtd3e ? c->id.rtd3e / 1000 + 1 : 5000;
	if (to_ms < 1000)
		to_ms = 1000;
	uint64_t deadline = gpunvme_now_ns() + to_ms * 1000000ull;
	for (uint32_t spins = 0; gpunvme_now_ns() < deadline; spins++) {
		csts = pcie_rd32(c, GPUNVME_REG_CSTS);
		if (csts == 0xffffffffu || gpunvme_csts_shst(csts) == GPUNVME_SHST_COMPLETE)
			break;
		ctrl_relax(spins);
	}
}

/* 64-bit registers as two 32-bit accesses, low first (§3.1: 32-bit
 * accesses are always allowed; not every root complex does 64). */
static int pcie_reg_read(struct gpunvme_ctrl *c, uint32_t off, uint32_t size, uint64_t *val)
{
	if ((size != 4 && size != 8) || (off & 3) || off + size > c->bus.bar0_len)
		return gpunvme_set_error(-EINVAL, "register 0x%x of %u bytes: not in BAR0", off, size);
	*val = pcie_rd32(c, off);
	if (size == 8)
		*val |= (uint64_t)pcie_rd32(c, off + 4) << 32;
	return 0;
}

static int pcie_reg_write(struct gpunvme_ctrl *c, uint32_t off, uint32_t size, uint64_t val)
{
	if ((size != 4 && size != 8) || (off & 3) || off + size > c->bus.bar0_len)
		return gpunvme_set_error(-EINVAL, "register 0x%x of %u bytes: not in BAR0", off, size);
	pcie_wr32(c, off, (uint32_t)val);
	if (size == 8)
		pcie_wr32(c, off + 4, (uint32_t)(val >> 32));
	return 0;
}

/* Each Delete I/O Queue command of a reset's first half: a controller that
 * answers does so in microseconds; one that does not is disabled anyway */
#define RESET_DELETE_MS 500u

/*
 * Before CC.EN = 0, a controller that still answers has its I/O queues
 * deleted, SQs then CQs (NVMe 2.0 §5.5, §5.6: a CQ goes only once no SQ
 * uses it), as Linux's nvme_dev_disable does on a live controller. A Delete
 * I/O Submission Queue completes only once every command of that queue is
 * completed or aborted (§5.6), so no read of ours still moves data when
 * the controller is disabled. Disabling QEMU 7.2's controller with 16 reads
 * in flight crashed it (SIGSEGV) in 6 of 30 runs with two VMs at once;
 * deleting the queues first, in 0 of 30 (tests/qemu/README.md). Best
 * effort, each command bounded by RESET_DELETE_MS: the first that times
 * out ends it (an error status does not: a GPU recovery may have deleted
 * some of its queues already, and Invalid Queue Identifier is the answer).
 * With admin_lock and qp_lock held (gpunvme_reset).
 */
static void delete_queues_first(struct gpunvme_ctrl *c)
{
	uint32_t csts = pcie_rd32(c, GPUNVME_REG_CSTS);
	if (csts == 0xffffffffu || (csts & GPUNVME_CSTS_CFS) || !(csts & GPUNVME_CSTS_RDY))
		return;
	const uint32_t timeout_ms = c->opts.admin_timeout_ms < RESET_DELETE_MS ? c->opts.admin_timeout_ms : RESET_DELETE_MS;
	bool ok = true;
	for (int pass = 0; pass < 2 && ok; pass++) {
		for (uint32_t q = 1; ok && q <= c->nr_io_queues; q++) {
			if (!c->qps[q] && !c->qid_gpu[q])
				continue;
			struct gpunvme_sqe cmd = { .opc = pass ? GPUNVME_ADM_DELETE_CQ : GPUNVME_ADM_DELETE_SQ };
			cmd.queue.qid = (uint16_t)q;
			const int rc = admin_exec_locked(c, &cmd, NULL, timeout_ms);
			ok = rc != -ETIMEDOUT && rc != -ENODEV;
		}
	}
}

/* Reset, first half: CC.EN = 0, and bus mastering off too, until the
 * controller is brought up again (Linux's nvme_dev_disable does the same on
 * every reset): QEMU's controller was seen moving a read's data after
 * CSTS.RDY = 0 (tests/qemu/scenarios/recovery.sh), into buffers whose
 * commands had been failed. Off, no such DMA reaches memory. A controller
 * that does not stop within CAP.TO cannot be helped: its commands are
 * failed all the same. */
static int pcie_disable(struct gpunvme_ctrl *c)
{
	pthread_mutex_lock(&c->admin_lock);
	delete_queues_first(c);
	int drc = disable_regs(c);
	pcie_ctrl(c)->master_off = drc != -ENODEV && c->bus.ops->set_master &&
				   c->bus.ops->set_master(&c->bus, false) == 0;
	pthread_mutex_unlock(&c->admin_lock);
	return drc;
}

/* Second half: mastering back on, CC.EN = 1 with a fresh admin queue, and
 * the queue count the controller forgot. */
static int pcie_enable(struct gpunvme_ctrl *c, int drc)
{
	int rc;
	struct pcie_ctrl *pc = pcie_ctrl(c);
	pthread_mutex_lock(&c->admin_lock);
	if (pc->master_off && (rc = c->bus.ops->set_master(&c->bus, true)))
		rc = gpunvme_set_error(rc, "reset: cannot turn bus mastering back on: %s", strerror(-rc));
	else
		rc = drc == -ENODEV ? drc : bring_up(c);
	pc->master_off = false;
	pthread_mutex_unlock(&c->admin_lock);
	if (!rc)
		rc = ctrl_renegotiate_queues(c, "reset: controller now");
	return rc;
}

/* Create I/O CQ `qid` and SQ `qid` bound to it, both physically contiguous
 * (PC = 1), polled (IEN = 0): nobody takes interrupts in this driver. */
int pcie_create_io_queues(struct gpunvme_ctrl *c, uint16_t qid, uint64_t sq_iova, uint64_t cq_iova, uint32_t depth)
{
	struct gpunvme_sqe cmd = { .opc = GPUNVME_ADM_CREATE_CQ, .prp1 = cq_iova };
	cmd.queue.qid = qid;
	cmd.queue.qsize = (uint16_t)(depth - 1);
	cmd.queue.qflags = GPUNVME_Q_PC;
	int rc = gpunvme_admin(c, &cmd, NULL, 0, 0, NULL);
	if (rc)
		return rc;
	struct gpunvme_sqe sq = { .opc = GPUNVME_ADM_CREATE_SQ, .prp1 = sq_iova };
	sq.queue.qid = qid;
	sq.queue.qsize = (uint16_t)(depth - 1);
	sq.queue.qflags = GPUNVME_Q_PC;
	sq.queue.cqid_iv = qid;
	rc = gpunvme_admin(c, &sq, NULL, 0, 0, NULL);
	if (rc) {
		struct gpunvme_sqe del = { .opc = GPUNVME_ADM_DELETE_CQ };
		del.queue.qid = qid;
		gpunvme_admin(c, &del, NULL, 0, 0, NULL);
	}
	return rc;
}

int pcie_delete_io_queues(struct gpunvme_ctrl *c, uint16_t qid)
{
	/* the SQ first: a CQ with an SQ attached cannot go (§5.5) */
	struct gpunvme_sqe cmd = { .opc = GPUNVME_ADM_DELETE_SQ };
	cmd.queue.qid = qid;
	int rc = gpunvme_admin(c, &cmd, NULL, 0, 0, NULL);
	struct gpunvme_sqe cq = { .opc = GPUNVME_ADM_DELETE_CQ };
	cq.queue.qid = qid;
	int rc2 = gpunvme_admin(c, &cq, NULL, 0, 0, NULL);
	return rc ? rc : rc2;
}

/* A GPU queue pair is an I/O queue pair like any other: the GPU rings the
 * doorbells in BAR0 itself. */
static int pcie_gpu_queue_delete(struct gpunvme_ctrl *c, uint16_t qid)
{
	if (pcie_check_alive(c, "delete queue pair"))
		return -ENODEV;
	return pcie_delete_io_queues(c, qid);
}

static volatile void *pcie_doorbells(struct gpunvme_ctrl *c, size_t *len)
{
	return gpunvme_bar0(c, len);
}

const struct gpunvme_transport gpunvme_transport_pcie = {
	.match = pcie_match,
	.qp = &pcie_qpair_ops,
	.qid_reuse_last = false,
	.open = pcie_open,
	.setup = NULL,
	.close = pcie_close,
	.shutdown = pcie_shutdown,
	.reg_read = pcie_reg_read,
	.reg_write = pcie_reg_write,
	.admin = pcie_admin,
	.check_alive = pcie_check_alive,
	.disable = pcie_disable,
	.enable = pcie_enable,
	.gpu_queue_create = pcie_create_io_queues,
	.gpu_queue_delete = pcie_gpu_queue_delete,
	.doorbells = pcie_doorbells,
};
