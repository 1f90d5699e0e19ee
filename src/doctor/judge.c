/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme doctor, the verdict half: for every GPU x NVMe pair, the PCIe path
 * between them, its narrowest hop, and whether Tier 1, 2 and 3 can run, with
 * the reason and the fix for every "no" (docs/hardware.md explains each).
 * Works on the report alone, so tests judge hand-built inventories.
 *
 * What each tier needs on the bus:
 *   Tier 1: the GPU writes doorbells into NVMe BAR0: posted writes (Memory
 *           Write TLPs need no completion), which root complexes forward
 *           between root ports even where they drop peer reads (the AMD
 *           client platform of the RTX 3090 + SN740 investigation).
 *           Data and completions go to pinned host memory.
 *   Tier 2: the controller writes data into GPU memory through BAR1: needs
 *           GPU bus addresses: the controller bound to this project's
 *           kernel module (kmod/, the kmod: bus), which maps a dma-buf of
 *           the GPU memory (NVIDIA's open kernel module exports one), or
 *           falls back to nvidia_p2p.
 *   Tier 3: the controller also reads submission entries from GPU memory:
 *           peer reads, which need completions to come back: a PCIe switch
 *           without ACS redirection, or a root complex that forwards them.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "doctor/doctor_internal.h"
#include "gpunvme/doctor.h"

#define VENDOR_AMD 0x1022

__attribute__((format(printf, 3, 4))) static void reason(struct gpunvme_doctor_verdict *v, const char *fix,
							   const char *fmt, ...)
{
	if (v->nreasons >= GPUNVME_DOCTOR_MAX_REASONS)
		return;
	struct gpunvme_doctor_reason *r = &v->reasons[v->nreasons++];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->why, sizeof(r->why), fmt, ap);
	va_end(ap);
	snprintf(r->fix, sizeof(r->fix), "%s", fix ? fix : "");
}

__attribute__((format(printf, 2, 3))) static void note(struct gpunvme_doctor_pair *p, const char *fmt, ...)
{
	if (p->nnotes >= GPUNVME_DOCTOR_MAX_REASONS)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->notes[p->nnotes++], GPUNVME_DOCTOR_TEXT, fmt, ap);
	va_end(ap);
}

static void worse(enum gpunvme_doctor_answer *a, enum gpunvme_doctor_answer b)
{
	/* no beats unknown beats yes */
	if (b == GPUNVME_DOCTOR_NO || (b == GPUNVME_DOCTOR_UNKNOWN && *a == GPUNVME_DOCTOR_YES))
		*a = b;
}

static void add_hop(struct gpunvme_doctor_pair *p, const struct gpunvme_doctor_hop *h)
{
	if (p->nhops < GPUNVME_DOCTOR_MAX_HOPS)
		p->hops[p->nhops++] = *h;
}

static void dev_hop(const struct gpunvme_doctor_dev *d, struct gpunvme_doctor_hop *h)
{
	memset(h, 0, sizeof(*h));
	snprintf(h->bdf, sizeof(h->bdf), "%s", d->bdf);
	h->gts = d->link_gts;
	h->width = d->link_width;
	h->gbytes = gpunvme_doctor_link_gbytes(d->link_gts, d->link_width);
	h->acs_ctrl = -1;
	h->vendor = d->vendor;
}

/* The path: up the controller's side to the bridge both share (a switch)
 * or to the host bridge, and down to the GPU. Every function on it but the
 * shared one contributes its own link (each end of a link reports it). */
static void path(const struct gpunvme_doctor_gpu *g, const struct gpunvme_doctor_nvme *n, struct gpunvme_doctor_pair *p)
{
	const struct gpunvme_doctor_dev *gd = &g->pci, *nd = &n->pci;
	struct gpunvme_doctor_hop h;
	int ni = -1, gi = -1;

	p->narrowest = -1;
	snprintf(p->path_kind, sizeof(p->path_kind), "unknown");
	if (!gd->host_bridge[0] || !nd->host_bridge[0])
		return;
	if (strcmp(gd->host_bridge, nd->host_bridge) != 0) {
		snprintf(p->path_kind, sizeof(p->path_kind), "cross-root-complex");
	} else {
		for (int i = 0; i < nd->nup && ni < 0; i++)
			for (int j = 0; j < gd->nup; j++)
				if (!strcmp(nd->up[i].bdf, gd->up[j].bdf)) {
					ni = i;
					gi = j;
					break;
				}
		snprintf(p->path_kind, sizeof(p->path_kind), "%s", ni >= 0 ? "switch" : "root-complex");
	}
	snprintf(p->common, sizeof(p->common), "%s", ni >= 0 ? nd->up[ni].bdf : gd->host_bridge);
	if (p->path_kind[0] == 'c')
		snprintf(p->common, sizeof(p->common), "%s + %s", nd->host_bridge, gd->host_bridge);
	dev_hop(nd, &h);
	add_hop(p, &h);
	for (int i = 0; i < (ni >= 0 ? ni : nd->nup); i++)
		add_hop(p, &nd->up[i]);
	for (int j = (gi >= 0 ? gi : gd->nup) - 1; j >= 0; j--)
		add_hop(p, &gd->up[j]);
	dev_hop(gd, &h);
	add_hop(p, &h);
	for (int i = 0; i < p->nhops; i++)
		if (p->hops[i].gbytes > 0 && (p->narrowest < 0 || p->hops[i].gbytes < p->hops[p->narrowest].gbytes))
			p->narrowest = i;
	p->link_gbytes = p->narrowest >= 0 ? p->hops[p->narrowest].gbytes : 0;
	/* ACS on the switch ports between the two (PCIe Base, ACS Extended
	 * Capability, ACS Control bits 2 and 3: P2P Request / Completion
	 * Redirect) sends peer traffic up to the root complex instead of
	 * across the switch. Above a shared switch it does not matter: the
	 * traffic never goes there. */
	if (ni >= 0)
		for (int i = 0; i < p->nhops; i++) {
			const struct gpunvme_doctor_hop *b = &p->hops[i];
			if (b->acs_ctrl >= 0 && (b->acs_ctrl & 0x0c) && !p->acs_redirect) {
				p->acs_redirect = true;
				snprintf(p->acs_bridge, sizeof(p->acs_bridge), "%s", b->bdf);
			}
		}
}

static bool is_d3(const char *ps)
{
	return !strncmp(ps, "D3", 2);
}

static enum gpunvme_doctor_iommu dev_iommu(const struct gpunvme_doctor_report *r, const struct gpunvme_doctor_dev *d)
{
	if (!strcmp(d->iommu_type, "identity"))
		return GPUNVME_IOMMU_PASSTHROUGH;
	if (!strncmp(d->iommu_type, "DMA", 3))
		return GPUNVME_IOMMU_TRANSLATED;
	if (r->sys.iommu == GPUNVME_IOMMU_TRANSLATED && d->iommu_group < 0)
		return GPUNVME_IOMMU_UNKNOWN;
	return r->sys.iommu;
}

/*
 * Whether the user-space driver can own controller ni at all (its CPU data
 * path, and the NVMe half of Tier 1): the driver it is bound to, the IOMMU
 * mode that driver needs, its power state, the BAR0 probe. Stored per
 * controller, so a machine without a GPU still gets an answer.
 */
static void userspace(struct gpunvme_doctor_report *r, int ni)
{
	const struct gpunvme_doctor_nvme *n = &r->nvme[ni];
	struct gpunvme_doctor_verdict *v = &r->nvme_verdict[ni];
	const char *nb = n->pci.bdf;
	char fix[GPUNVME_DOCTOR_TEXT];

	memset(v, 0, sizeof(*v));
	v->answer = GPUNVME_DOCTOR_YES;
	const char *drv = n->pci.driver;
	bool vfio = !strcmp(drv, "vfio-pci"), uio = !strcmp(drv, "uio_pci_generic") || !drv[0];
	/* the gpunvme kernel module (kmod: bus) maps through the kernel's DMA
	 * API: right with the IOMMU on, off or in passthrough */
	bool kmod = !strcmp(drv, "gpunvme");
	enum gpunvme_doctor_iommu im = dev_iommu(r, &n->pci);
	if (!vfio && !uio && !kmod) {
		worse(&v->answer, GPUNVME_DOCTOR_NO);
		if (n->mounted[0]) {
			snprintf(fix, sizeof(fix),
				 "use a controller without mounted file systems, or unmount them, then sudo scripts/vfio-bind.sh %s",
				 nb);
			reason(v, fix, "NVMe %s is bound to %s and in use (%s)", nb, drv, n->mounted);
		} else {
			snprintf(fix, sizeof(fix), "sudo scripts/vfio-bind.sh %s (docs/hardware.md section 3)", nb);
			reason(v, fix, "NVMe %s is bound to %s: the kernel owns it", nb, drv);
		}
	} else if (uio && im == GPUNVME_IOMMU_TRANSLATED) {
		worse(&v->answer, GPUNVME_DOCTOR_NO);
		snprintf(fix, sizeof(fix), "sudo scripts/vfio-bind.sh %s, or boot with iommu=pt", nb);
		reason(v, fix, "NVMe %s is %s but the IOMMU translates its DMA: physical addresses do not work", nb,
		       drv[0] ? "bound to uio_pci_generic" : "bound to no driver (uio)");
	} else if (vfio && im == GPUNVME_IOMMU_OFF && r->sys.noiommu != GPUNVME_DOCTOR_YES) {
		worse(&v->answer, r->sys.noiommu == GPUNVME_DOCTOR_NO ? GPUNVME_DOCTOR_NO : GPUNVME_DOCTOR_UNKNOWN);
		reason(v,
		       "turn the IOMMU on (docs/hardware.md section 2), or sudo modprobe vfio "
		       "enable_unsafe_noiommu_mode=1 and rebind",
		       "%s: vfio-pci without an IOMMU needs no-IOMMU mode, which is %s", nb,
		       r->sys.noiommu == GPUNVME_DOCTOR_NO ? "off" : "unknown (/sys/module/vfio/parameters)");
	} else if (im == GPUNVME_IOMMU_UNKNOWN && uio) {
		worse(&v->answer, GPUNVME_DOCTOR_UNKNOWN);
		reason(v, "", "unknown, because the IOMMU state is unknown (%s)", r->sys.iommu_why);
	}
	if (is_d3(n->pci.power_state) && vfio) {
		/* vfio-pci idles a device no process has open in D3hot (its
		 * runtime power management, module parameter disable_idle_d3)
		 * and returns it to D0 when it is opened through VFIO, which is
		 * how this driver maps BAR0: seen in the QEMU guest, where
		 * doctor found D3hot and the VFIO probe then worked. Tools that
		 * mmap resource0 directly do read all ones. */
		reason(v, "",
		       "NVMe %s is in %s while unused: vfio-pci's runtime power management; opening it through VFIO "
		       "(as this driver does) returns it to D0 (tools that map resource0 directly read all ones)",
		       nb, n->pci.power_state);
	} else if (is_d3(n->pci.power_state)) {
		worse(&v->answer, GPUNVME_DOCTOR_NO);
		snprintf(fix, sizeof(fix),
			 "echo on | sudo tee /sys/bus/pci/devices/%s/power/control; sudo setpci -s %s CAP_PM+4.W=0x0008; "
			 "sudo setpci -s %s COMMAND=0x0006",
			 nb, nb, nb);
		reason(v, fix, "NVMe %s is in %s (powered down after the driver change): BAR0 reads all ones", nb,
		       n->pci.power_state);
	}
	if (r->probed && r->probe.bar0[ni].run && !r->probe.bar0[ni].ok) {
		worse(&v->answer, GPUNVME_DOCTOR_NO);
		reason(v, "run as root with the controller bound to vfio-pci or uio_pci_generic and in D0",
		       "BAR0 mapping failed: %s", r->probe.bar0[ni].text);
	}
}

static void tier1(struct gpunvme_doctor_report *r, struct gpunvme_doctor_pair *p)
{
	const struct gpunvme_doctor_gpu *g = &r->gpu[p->gpu];
	const struct gpunvme_doctor_nvme *n = &r->nvme[p->nvme];
	struct gpunvme_doctor_verdict *v = &p->tier[0];
	const char *nb = n->pci.bdf;
	bool vfio = !strcmp(n->pci.driver, "vfio-pci");

	v->answer = GPUNVME_DOCTOR_YES;
	if (strcmp(g->pci.driver, "nvidia") != 0) {
		worse(&v->answer, GPUNVME_DOCTOR_NO);
		reason(v, "install the NVIDIA driver and load it (sudo modprobe nvidia); if nouveau holds the GPU, "
			  "blacklist it and reboot",
		       "GPU %s is %s%s, not by the NVIDIA driver", g->pci.bdf, g->pci.driver[0] ? "bound to " : "not bound",
		       g->pci.driver);
	}
	/* the controller's half: its own verdict, reasons included */
	const struct gpunvme_doctor_verdict *u = &r->nvme_verdict[p->nvme];
	worse(&v->answer, u->answer);
	for (int k = 0; k < u->nreasons && v->nreasons < GPUNVME_DOCTOR_MAX_REASONS; k++)
		v->reasons[v->nreasons++] = u->reasons[k];
	if (r->probed) {
		const struct gpunvme_doctor_probe_result *io = &r->probe.register_io[p->gpu][p->nvme];
		if (io->run && !io->ok) {
			worse(&v->answer, GPUNVME_DOCTOR_NO);
			reason(v,
			       "run as root; an NVIDIA module built for a kernel without follow_pfn() cannot register I/O "
			       "memory: use a driver release made for this kernel (docs/hardware.md, Tier 1)",
			       "CUDA refused to map BAR0 (cudaHostRegisterIoMemory): %s", io->text);
		}
		if (!io->run)
			note(p, "BAR0 registration with CUDA not run, because %s", io->text);
		const struct gpunvme_doctor_probe_result *rd = &r->probe.gpu_read[p->gpu][p->nvme];
		if (rd->run && !rd->ok)
			note(p, "GPU reads of BAR0 fail (%s): peer reads are dropped on this path; Tier 1 needs only "
				"writes", rd->text);
	} else if (v->answer == GPUNVME_DOCTOR_YES) {
		note(p, "CUDA's mapping of BAR0 (cudaHostRegisterIoMemory) is not verified: run sudo gpunvme doctor --probe");
	}
	if (!n->pci.power_state[0])
		note(p, "power state of %s unknown: check it reads D0 (power_state in sysfs)", nb);
	if (!strcmp(p->path_kind, "cross-root-complex"))
		note(p, "GPU and SSD hang off different root complexes (%s): doorbells cross the CPU interconnect",
		     p->common);
	if (r->sys.memlock_known && !r->sys.memlock_unlimited && r->sys.memlock_bytes < (64u << 20) && vfio)
		note(p, "memlock limit is %llu KiB: VFIO pins the queues and buffers; raise it (ulimit -l unlimited, "
			"or memlock in /etc/security/limits.conf) or run as root",
		     (unsigned long long)(r->sys.memlock_bytes >> 10));
}

static const char *kmod_fix = "build and load the gpunvme kernel module (make kmod; sudo insmod kmod/gpunvme.ko), "
			      "then sudo scripts/kmod-bind.sh BDF and open kmod:BDF (docs/hardware.md section 9)";

static void tier2(struct gpunvme_doctor_report *r, struct gpunvme_doctor_pair *p)
{
	const struct gpunvme_doctor_gpu *g = &r->gpu[p->gpu];
	const struct gpunvme_doctor_nvme *n = &r->nvme[p->nvme];
	struct gpunvme_doctor_verdict *v = &p->tier[1];
	char fix[GPUNVME_DOCTOR_TEXT];

	snprintf(v->route, sizeof(v->route), "dma-buf + kernel module");
	/* the bus addresses come from the gpunvme module, which owns the
	 * controller; dma-buf export of the GPU memory is its route (the
	 * nvidia_p2p fallback cannot be judged from outside) */
	v->answer = GPUNVME_DOCTOR_YES;
	if (r->sys.kmod != GPUNVME_DOCTOR_YES) {
		v->answer = GPUNVME_DOCTOR_NO;
		reason(v, kmod_fix, "the gpunvme kernel module is not loaded: it maps GPU memory for the controller");
	} else if (strcmp(n->pci.driver, "gpunvme") != 0) {
		v->answer = GPUNVME_DOCTOR_NO;
		snprintf(fix, sizeof(fix), "sudo scripts/kmod-bind.sh %s, then open kmod:%s", n->pci.bdf, n->pci.bdf);
		reason(v, fix, "controller %s is bound to %s, not to the gpunvme kernel module", n->pci.bdf,
		       n->pci.driver[0] ? n->pci.driver : "no driver");
	}
	if (r->sys.dmabuf == GPUNVME_DOCTOR_NO) {
		v->answer = GPUNVME_DOCTOR_NO;
		reason(v, "install the NVIDIA open kernel module, R515 or later (or the nvidia_p2p route on the "
			  "proprietary one, kernels before 6.6)", "no dma-buf export: %s", r->sys.dmabuf_why);
	}
	const bool probed_ok = r->probed && r->probe.dmabuf[p->gpu].run && r->probe.dmabuf[p->gpu].ok;
	if (r->sys.dmabuf == GPUNVME_DOCTOR_UNKNOWN && !probed_ok) {
		worse(&v->answer, GPUNVME_DOCTOR_UNKNOWN);
		reason(v, "run gpunvme doctor --probe", "dma-buf export of GPU memory not checked");
	}
	if (r->probed && r->probe.dmabuf[p->gpu].run && !r->probe.dmabuf[p->gpu].ok) {
		v->answer = GPUNVME_DOCTOR_NO;
		reason(v, "install the NVIDIA open kernel module, R515 or later",
		       "dma-buf export of GPU memory failed: %s", r->probe.dmabuf[p->gpu].text);
	}
	if (p->tier[0].answer != GPUNVME_DOCTOR_YES) {
		v->answer = GPUNVME_DOCTOR_NO;
		reason(v, "see Tier 1", "Tier 2 needs everything Tier 1 does");
	}
	if (g->bar1_bytes && g->bar1_bytes <= (256u << 20))
		reason(v, "enable Above 4G Decoding and Resizable BAR in the firmware setup",
		       "BAR1 is %llu MiB: only that much GPU memory can be a DMA target at once",
		       (unsigned long long)(g->bar1_bytes >> 20));
}

static void tier3(struct gpunvme_doctor_report *r, struct gpunvme_doctor_pair *p)
{
	struct gpunvme_doctor_verdict *v = &p->tier[2];
	char fix[GPUNVME_DOCTOR_TEXT];

	v->answer = GPUNVME_DOCTOR_NO;
	reason(v, "none yet: use Tier 1 or 2", "not available: GPU threads drive queues in host memory only (queues in "
					    "device memory run from the CPU, through kmod:, in a peer BAR)");
	const char *k = p->path_kind;
	if (!strcmp(k, "switch") && p->acs_redirect) {
		snprintf(fix, sizeof(fix),
			 "disable ACS for these ports in the firmware setup (PCIe ACS / ACS Enable), or until reboot "
			 "sudo setpci -s %s ECAP_ACS+6.W=0x0000 (only with the IOMMU off or in passthrough)",
			 p->acs_bridge);
		reason(v, fix, "ACS on bridge %s redirects peer-to-peer requests up to the root complex instead of across "
			       "the switch %s", p->acs_bridge, p->common);
	} else if (!strcmp(k, "switch")) {
		bool unk = false;
		for (int i = 0; i < p->nhops; i++)
			unk |= p->hops[i].acs_unknown && p->hops[i].vendor >= 0 && i > 0 && i < p->nhops - 1;
		if (unk)
			reason(v, "run gpunvme doctor as root (extended config space is root-only)",
			       "ACS on the switch ports unknown, because their extended config space is unreadable");
	} else if (!strcmp(k, "root-complex")) {
		const struct gpunvme_doctor_dev *nd = &r->nvme[p->nvme].pci;
		int rv = nd->nup ? nd->up[nd->nup - 1].vendor : -1;
		if (rv == VENDOR_AMD)
			reason(v, "put the GPU and the SSD behind one PCIe switch",
			       "the AMD root complex (%s) does not forward peer-to-peer reads between root ports "
			       "(completion timeout): the SSD cannot read queues from GPU memory", p->common);
		else
			reason(v, "put the GPU and the SSD behind one PCIe switch",
			       "unknown, because peer-to-peer reads through the root complex %s depend on the platform "
			       "(root port vendor %04x)", p->common, rv < 0 ? 0 : (unsigned)rv);
	} else if (!strcmp(k, "cross-root-complex")) {
		reason(v, "put the GPU and the SSD under the same root complex, ideally behind one PCIe switch",
		       "peer-to-peer reads between root complexes (%s) are not forwarded", p->common);
	} else {
		reason(v, "", "the PCIe path between GPU and SSD is unknown (a virtual machine hides it, or sysfs is incomplete)");
	}
}

int gpunvme_doctor_judge(struct gpunvme_doctor_report *r)
{
	int usable = 0;
	r->npairs = 0;
	for (int ni = 0; ni < r->nnvme; ni++)
		userspace(r, ni);
	for (int gi = 0; gi < r->ngpu; gi++)
		for (int ni = 0; ni < r->nnvme; ni++) {
			struct gpunvme_doctor_pair *p = &r->pairs[r->npairs++];
			memset(p, 0, sizeof(*p));
			p->gpu = gi;
			p->nvme = ni;
			path(&r->gpu[gi], &r->nvme[ni], p);
			tier1(r, p);
			tier2(r, p);
			tier3(r, p);
			if (p->tier[0].answer == GPUNVME_DOCTOR_YES)
				usable++;
		}
	return usable;
}
