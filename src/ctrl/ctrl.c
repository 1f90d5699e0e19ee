/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Control plane: open, admin commands, identify, features, reset (§7.3.2)
 * and close, whatever the transport; how each step reaches the controller
 * (registers, admin queue, bring-up, shutdown) is the transport's
 * (ctrl/transport.h).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctrl/ctrl.h"
#include "ctrl/ctrl_emu.h"
#include "ctrl/ctrl_gpu.h"
#include "gpunvme/emu.h"

void ctrl_relax(uint32_t spins)
{
	/* spin briefly, then give the CPU away: a register handshake takes
	 * microseconds on hardware, much longer on a busy emulator host */
	if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
	} else if (spins < 1024) {
		sched_yield();
	} else {
		struct timespec ts = { 0, 50000 };
		nanosleep(&ts, NULL);
	}
}

void gpunvme_opts_init(struct gpunvme_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->admin_timeout_ms = 5000;
	o->io_timeout_ms = 30000;
	o->nr_io_queues = 16;
	o->admin_depth = 64;
	o->mps_shift = 12;
}

int ctrl_check_alive(struct gpunvme_ctrl *c, const char *what)
{
	return c->tr->check_alive(c, what);
}

int gpunvme_admin(struct gpunvme_ctrl *c, struct gpunvme_sqe *cmd, void *buf, size_t len, int host_to_ctrl,
		  struct gpunvme_cqe *cpl)
{
	if (!c || !cmd || (len && !buf))
		return gpunvme_set_error(-EINVAL, "admin: bad arguments");
	if (len > 4096)
		return gpunvme_set_error(-EINVAL, "admin: data of %zu bytes (at most 4096)", len);
	pthread_mutex_lock(&c->admin_lock);
	int rc = c->tr->admin(c, cmd, buf, (uint32_t)len, !len ? QP_DATA_NONE : host_to_ctrl ? QP_DATA_H2C : QP_DATA_C2H,
			      cpl);
	pthread_mutex_unlock(&c->admin_lock);
	return rc;
}

int gpunvme_abort(struct gpunvme_ctrl *c, uint16_t sqid, uint16_t cid, bool *aborted)
{
	/* CDW10: CID in bits 31:16, SQID in 15:0; DW0 bit 0 of the
	 * completion is 1 when the command was not aborted (§5.1.1) */
	struct gpunvme_sqe cmd = { .opc = GPUNVME_ADM_ABORT };
	struct gpunvme_cqe cpl;
	memset(&cpl, 0, sizeof(cpl));
	cmd.cdw[0] = (uint32_t)cid << 16 | sqid;
	if (aborted)
		*aborted = false;
	int rc = gpunvme_admin(c, &cmd, NULL, 0, 0, &cpl);
	if (rc == -EIO && gpunvme_status_code(gpunvme_cqe_status(cpl.status)) == GPUNVME_SC_ABORT_LIMIT)
		return gpunvme_set_error(-EAGAIN, "abort of command %u on SQ %u: Abort Command Limit Exceeded "
					 "(wait for earlier aborts, or reset)", cid, sqid);
	if (!rc && aborted)
		*aborted = !(cpl.dw0 & 1u);
	return rc;
}

static int identify(struct gpunvme_ctrl *c, uint8_t cns, uint32_t nsid, void *buf)
{
	struct gpunvme_sqe cmd = { .opc = GPUNVME_ADM_IDENTIFY, .nsid = nsid };
	cmd.identify.cns = cns;
	return gpunvme_admin(c, &cmd, buf, 4096, 0, NULL);
}

int gpunvme_get_log_page(struct gpunvme_ctrl *c, uint32_t nsid, uint8_t lid, void *buf, size_t len)
{
	if (len == 0 || len > 4096 || (len & 3))
		return gpunvme_set_error(-EINVAL, "get log page: length %zu (dword multiple, at most 4096)", len);
	struct gpunvme_sqe cmd = { .opc = GPUNVME_ADM_GET_LOG_PAGE, .nsid = nsid };
	uint32_t numd = (uint32_t)(len / 4 - 1);
	cmd.cdw[0] = lid | ((numd & 0xffff) << 16);
	cmd.cdw[1] = numd >> 16;
	return gpunvme_admin(c, &cmd, buf, len, 0, NULL);
}

/* Get/Set Features (§5.21, §5.15): FID in CDW10, the value in CDW11, the
 * result in completion dword 0. */
static int features(struct gpunvme_ctrl *c, uint8_t opc, uint8_t fid, uint32_t cdw11, uint32_t *dw0)
{
	struct gpunvme_sqe cmd = { .opc = opc };
	struct gpunvme_cqe e = { 0 };
	cmd.cdw[0] = fid;
	cmd.cdw[1] = cdw11;
	int rc = gpunvme_admin(c, &cmd, NULL, 0, 0, &e);
	if (!rc && dw0)
		*dw0 = e.dw0;
	return rc;
}

int gpunvme_get_features(struct gpunvme_ctrl *c, uint8_t fid, uint32_t cdw11, uint32_t *dw0)
{
	return features(c, GPUNVME_ADM_GET_FEATURES, fid, cdw11, dw0);
}

int gpunvme_set_features(struct gpunvme_ctrl *c, uint8_t fid, uint32_t cdw11, uint32_t *dw0)
{
	return features(c, GPUNVME_ADM_SET_FEATURES, fid, cdw11, dw0);
}

int ctrl_identify_all(struct gpunvme_ctrl *c)
{
	int rc = identify(c, GPUNVME_CNS_CTRL, 0, &c->id);
	if (rc)
		return rc;
	/* MDTS is in units of CAP.MPSMIN pages (§5.15.2.2, byte 77) */
	uint64_t mps_min = 4096ull << gpunvme_cap_mpsmin(c->cap);
	c->mdts_bytes = c->id.mdts ? mps_min << c->id.mdts : 0;
	c->max_xfer = GPUNVME_MAX_XFER;
	if (c->mdts_bytes && c->mdts_bytes < c->max_xfer)
		c->max_xfer = c->mdts_bytes;

	/* active namespaces: CNS 02h (NVMe >= 1.1), 1024 per page */
	uint32_t *list = malloc(4096);
	if (!list)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	free(c->ns);
	c->ns = NULL;
	c->nns = 0;
	uint32_t after = 0;
	for (;;) {
		if ((rc = identify(c, GPUNVME_CNS_ACTIVE_NS_LIST, after, list)))
			break;
		uint32_t k = 0;
		while (k < 1024 && list[k])
			k++;
		if (k == 0)
			break;
		struct gpunvme_ns *n = realloc(c->ns, (c->nns + k) * sizeof(*n));
		if (!n) {
			rc = gpunvme_set_error(-ENOMEM, "out of memory");
			break;
		}
		c->ns = n;
		for (uint32_t i = 0; i < k && !rc; i++) {
			struct gpunvme_ns *ns = &c->ns[c->nns];
			memset(ns, 0, sizeof(*ns));
			if ((rc = identify(c, GPUNVME_CNS_NS, list[i], &ns->id)))
				break;
			if (ns->id.nsze == 0)
				continue; /* allocated but not attached */
			const struct gpunvme_lbaf *f = &ns->id.lbaf[gpunvme_id_ns_flbas_index(&ns->id)];
			ns->info.nsid = list[i];
			ns->info.nsze = ns->id.nsze;
			ns->info.ncap = ns->id.ncap;
			ns->info.nuse = ns->id.nuse;
			ns->info.lba_shift = f->lbads;
			ns->info.lba_size = f->lbads < 32 ? 1u << f->lbads : 0;
			ns->info.ms = f->ms;
			if (f->lbads < 9 || f->lbads > 16) {
				rc = gpunvme_set_error(-ENOTSUP, "namespace %u: LBA size 2^%u not supported", list[i],
						       f->lbads);
				break;
			}
			ns->info.max_blocks = (uint32_t)(c->max_xfer >> f->lbads);
			c->nns++;
		}
		if (rc || k < 1024)
			break;
		after = list[1023];
	}
	free(list);
	return rc;
}

/* Number of I/O queues (§5.21.1.7): ask, keep what is granted. */
int ctrl_negotiate_queues(struct gpunvme_ctrl *c)
{
	uint32_t want = c->opts.nr_io_queues ? c->opts.nr_io_queues : 1;
	if (want > 65535)
		want = 65535;
	uint32_t dw0 = 0;
	int rc = gpunvme_set_features(c, GPUNVME_FEAT_NUM_QUEUES, (want - 1) | ((want - 1) << 16), &dw0);
	if (rc)
		return rc;
	uint32_t nsq = (dw0 & 0xffff) + 1, ncq = (dw0 >> 16) + 1;
	c->nr_io_queues = nsq < ncq ? nsq : ncq;
	if (c->nr_io_queues > want)
		c->nr_io_queues = want; /* a controller may grant more than asked */
	return 0;
}

int ctrl_renegotiate_queues(struct gpunvme_ctrl *c, const char *who)
{
	uint32_t had = c->nr_io_queues;
	int rc = ctrl_negotiate_queues(c);
	if (!rc && c->nr_io_queues < had)
		rc = gpunvme_set_error(-EIO, "%s grants %u I/O queues, %u in use", who, c->nr_io_queues, had);
	c->nr_io_queues = had;
	return rc;
}

int gpunvme_open(const char *uri, const struct gpunvme_opts *opts, struct gpunvme_ctrl **out)
{
	int rc;
	if (!out)
		return gpunvme_set_error(-EINVAL, "gpunvme_open: no output pointer");
	*out = NULL;
	struct gpunvme_ctrl *c = calloc(1, sizeof(*c));
	if (!c)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	if (opts)
		c->opts = *opts;
	else
		gpunvme_opts_init(&c->opts);
	pthread_mutex_init(&c->admin_lock, NULL);
	dma_registry_init(&c->dma, &c->bus);
	pthread_mutex_init(&c->qp_lock, NULL);
	if ((rc = gpunvme_bus_open(uri, &c->opts, &c->bus))) {
		free(c);
		return rc;
	}
	c->caps = c->bus.ops->caps;
	c->tr = gpunvme_transport_for(&c->bus);
	if (!c->tr) {
		rc = gpunvme_set_error(-ENOTSUP, "%s: no transport drives a controller on the %s bus", uri,
				       c->bus.ops->name);
		goto fail;
	}
	if ((rc = c->tr->open(c, uri)) || (rc = ctrl_identify_all(c)) || (rc = ctrl_negotiate_queues(c)))
		goto fail;
	c->qps = calloc(c->nr_io_queues + 1, sizeof(*c->qps));
	c->qid_gpu = calloc(c->nr_io_queues + 1, 1);
	if (!c->qps || !c->qid_gpu) {
		rc = gpunvme_set_error(-ENOMEM, "out of memory");
		goto fail;
	}
	if (c->tr->setup && (rc = c->tr->setup(c)))
		goto fail;
	*out = c;
	return 0;
fail:;
	/* keep the first error message: cleanup must not overwrite it */
	char msg[512];
	snprintf(msg, sizeof(msg), "%s", gpunvme_last_error());
	if (c->tr)
		c->tr->close(c);
	dma_free_all(&c->dma);
	gpunvme_bus_close(&c->bus);
	free(c->ns);
	free(c->qps);
	free(c->qid_gpu);
	free(c);
	gpunvme_set_error(rc, "%s", msg);
	return rc;
}

/* ---- DMA memory: the controller's registry (src/dma) ------------------------ */

void *gpunvme_dma_alloc(struct gpunvme_ctrl *c, size_t len)
{
	if (!c) {
		gpunvme_set_error(-EINVAL, "DMA allocation: no controller");
		return NULL;
	}
	return dma_alloc(&c->dma, len);
}

void gpunvme_dma_free(struct gpunvme_ctrl *c, void *p)
{
	if (c)
		dma_free(&c->dma, p);
}

int gpunvme_dma_import(struct gpunvme_ctrl *c, void *va, size_t len, const struct gpunvme_dma_src *src)
{
	if (!c || !va || !len || !src)
		return gpunvme_set_error(-EINVAL, "dma_import: bad arguments");
	return dma_import(&c->dma, va, len, src);
}

uint64_t gpunvme_dma_iova(struct gpunvme_ctrl *c, const void *p)
{
	return c ? dma_iova(&c->dma, p) : 0;
}

void gpunvme_close(struct gpunvme_ctrl *c)
{
	if (!c)
		return;
	for (uint32_t q = 1; c->qps && q <= c->nr_io_queues; q++)
		if (c->qps[q])
			gpunvme_qpair_destroy(c->qps[q]);
	/* §7.6.2 normal shutdown, then the transport's own state (an
	 * association ends with it) */
	if (c->tr->shutdown)
		c->tr->shutdown(c);
	c->tr->close(c);
	if (c->kept_unpin)
		c->kept_unpin(c->kept_pin);
	dma_free_all(&c->dma);
	gpunvme_bus_close(&c->bus);
	free(c->qps);
	free(c->qid_gpu);
	free(c->ns);
	pthread_mutex_destroy(&c->admin_lock);
	pthread_mutex_destroy(&c->dma.lock);
	pthread_mutex_destroy(&c->qp_lock);
	free(c);
}

int gpunvme_reset(struct gpunvme_ctrl *c)
{
	pthread_mutex_lock(&c->qp_lock);
	/* Stop the controller before failing what is outstanding: once it is
	 * stopped it processes no command and moves no data, and a callback
	 * may reuse its buffer as soon as it runs. (Failing first let a read
	 * still in progress land in a buffer its owner had been told was
	 * free.) A controller that does not stop cannot be helped: its
	 * commands are failed all the same. */
	int drc = c->tr->disable(c);
	for (uint32_t q = 1; q <= c->nr_io_queues; q++)
		if (c->qps[q])
			qpair_fail_all(c->qps[q], -EIO);
	int rc = c->tr->enable(c, drc);
	for (uint32_t q = 1; !rc && q <= c->nr_io_queues; q++)
		if (c->qps[q])
			rc = qpair_recreate(c->qps[q]);
	pthread_mutex_unlock(&c->qp_lock);
	return rc;
}

const char *gpunvme_caps_str(uint32_t caps, char *buf, size_t len)
{
	static const char *const names[] = { "devmem-dma", "gpu-queues", "doorbell-mmio", "csts-gpu", "deep-queues" };
	if (!buf || !len)
		return buf;
	size_t o = 0;
	buf[0] = 0;
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!(caps & (1u << i)))
			continue;
		int w = snprintf(buf + o, len - o, "%s%s", o ? "," : "", names[i]);
		if (w < 0 || (size_t)w >= len - o)
			return buf; /* truncated: still terminated */
		o += (size_t)w;
	}
	if (!o)
		snprintf(buf, len, "none");
	return buf;
}

/* Identify's ASCII fields are space padded, not terminated (§5.15.2.2):
 * copy into dst (n + 1 bytes) without the padding. */
static void copy_trimmed(char *dst, const char *src, size_t n)
{
	while (n > 0 && (src[n - 1] == ' ' || src[n - 1] == 0))
		n--;
	memcpy(dst, src, n);
	dst[n] = 0;
}

int gpunvme_ctrl_info(struct gpunvme_ctrl *c, struct gpunvme_ctrl_info *info)
{
	memset(info, 0, sizeof(*info));
	snprintf(info->transport, sizeof(info->transport), "%s", c->bus.ops->name);
	snprintf(info->addr, sizeof(info->addr), "%s", c->bus.addr);
	copy_trimmed(info->sn, c->id.sn, 20);
	copy_trimmed(info->mn, c->id.mn, 40);
	copy_trimmed(info->fr, c->id.fr, 8);
	info->vid = c->id.vid;
	info->ssvid = c->id.ssvid;
	info->vs = c->vs;
	info->cap = c->cap;
	info->nn = c->id.nn;
	info->mqes = c->mqes;
	info->page_size = c->page_size;
	info->dstrd = c->dstrd;
	info->max_xfer = c->mdts_bytes;
	info->nr_io_queues = c->nr_io_queues;
	info->vwc = c->id.vwc & GPUNVME_VWC_PRESENT;
	info->caps = c->caps;
	info->io_parallel = c->bus.ops->io_parallel ? c->bus.ops->io_parallel(&c->bus) : 0;
	return 0;
}

const struct gpunvme_id_ctrl *gpunvme_ctrl_identify(struct gpunvme_ctrl *c)
{
	return &c->id;
}

static struct gpunvme_ns *find_ns(struct gpunvme_ctrl *c, uint32_t nsid)
{
	for (uint32_t i = 0; i < c->nns; i++)
		if (c->ns[i].info.nsid == nsid)
			return &c->ns[i];
	return NULL;
}

int gpunvme_ns_list(struct gpunvme_ctrl *c, uint32_t *nsids, uint32_t max)
{
	for (uint32_t i = 0; i < c->nns && i < max; i++)
		nsids[i] = c->ns[i].info.nsid;
	return (int)c->nns;
}

int gpunvme_ns_info(struct gpunvme_ctrl *c, uint32_t nsid, struct gpunvme_ns_info *info)
{
	struct gpunvme_ns *ns = find_ns(c, nsid);
	if (!ns) {
		/* the user typed a number: name the ones there are */
		char list[160] = "none";
		size_t off = 0;
		for (uint32_t i = 0; i < c->nns && off < sizeof(list) - 24; i++)
			off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%u", i ? ", " : "", c->ns[i].info.nsid);
		if (off >= sizeof(list) - 24 && c->nns)
			snprintf(list + off, sizeof(list) - off, ", ...");
		return gpunvme_set_error(-ENOENT, "namespace %u is not an active namespace (active: %s)", nsid, list);
	}
	*info = ns->info;
	return 0;
}

const struct gpunvme_id_ns *gpunvme_ns_identify(struct gpunvme_ctrl *c, uint32_t nsid)
{
	struct gpunvme_ns *ns = find_ns(c, nsid);
	return ns ? &ns->id : NULL;
}

volatile void *gpunvme_bar0(struct gpunvme_ctrl *c, size_t *len)
{
	/* NULL (length 0) where the transport has no BAR */
	if (len)
		*len = c->bus.bar0_len;
	return c->bus.bar0;
}

struct gpunvme_emu *gpunvme_ctrl_emu(struct gpunvme_ctrl *c)
{
	return gpunvme_bus_emu_get(&c->bus);
}

int gpunvme_ctrl_map_device(struct gpunvme_ctrl *c, const struct gpunvme_devmem *m, uint64_t *iova)
{
	if (!c->bus.ops->map_device)
		return gpunvme_set_error(-EOPNOTSUPP, "%s:%s: GPU memory as a DMA target needs bus addresses for GPU "
						      "pages, which this bus cannot give (the gpunvme kernel module "
						      "can); use host pinned buffers (Tier 1)",
					 c->bus.ops->name, c->bus.addr);
	if (!m || !m->len || !iova)
		return gpunvme_set_error(-EINVAL, "map device memory: bad arguments");
	return c->bus.ops->map_device(&c->bus, m, iova);
}

int gpunvme_ctrl_unmap_device(struct gpunvme_ctrl *c, uint64_t iova)
{
	if (!c->bus.ops->unmap_device)
		return -EOPNOTSUPP;
	return c->bus.ops->unmap_device(&c->bus, iova);
}

int gpunvme_ctrl_device_table(struct gpunvme_ctrl *c, uint64_t iova, const uint64_t **table, size_t *n)
{
	if (!c->bus.ops->device_table)
		return -EOPNOTSUPP;
	return c->bus.ops->device_table(&c->bus, iova, table, n);
}

int gpunvme_ctrl_keep_pinned(struct gpunvme_ctrl *c, void *p, void (*unpin)(void *p))
{
	int rc = 0;
	pthread_mutex_lock(&c->qp_lock);
	if (c->kept_unpin)
		rc = -EBUSY;
	else
		c->kept_pin = p, c->kept_unpin = unpin;
	pthread_mutex_unlock(&c->qp_lock);
	return rc;
}

void *gpunvme_ctrl_kept_pin(struct gpunvme_ctrl *c)
{
	pthread_mutex_lock(&c->qp_lock);
	void *p = c->kept_pin;
	pthread_mutex_unlock(&c->qp_lock);
	return p;
}
