/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme doctor: can this machine run the GPU data path, which tier, and
 * if not, why and what to do (include/gpunvme/doctor.h; docs/hardware.md
 * explains every verdict). Reads sysfs/procfs only unless --probe.
 *
 * Exit status: 0 when at least one GPU x NVMe pair can run Tier 1, 1 when
 * none can (one line on stderr says why), 2 usage error.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpunvme/doctor.h"
#include "util.h"
#ifdef GPUNVME_HAVE_CUDA
#include "doctor_gpu.h"
#endif

static void help(void)
{
	printf("usage: gpunvme doctor [--json] [--gpu N] [--nvme BDF] [--root DIR] [--probe]\n"
	       "\n"
	       "Diagnoses the GPU data path: every NVMe controller and NVIDIA GPU, the PCIe path\n"
	       "between each pair (bridges, link of every hop, ACS), the IOMMU, drivers and\n"
	       "modules, hugepages, memlock, power states; then a verdict per GPU x NVMe pair:\n"
	       "Tier 1 / Tier 2 / Tier 3 yes, no (with the reason and the fix) or unknown, and\n"
	       "the bandwidth the narrowest link allows. Reads sysfs and procfs only.\n"
	       "\n"
	       "  -j, --json       JSON output (the same content)\n"
	       "  -g, --gpu N      only the N-th NVIDIA GPU, in PCI address order (from 0)\n"
	       "  -n, --nvme BDF   only this controller (DDDD:BB:DD.F)\n"
	       "  -r, --root DIR   a captured machine: DIR/sys, DIR/proc, DIR/doctor-extra.txt\n"
	       "                   (scripts/doctor-capture.sh DIR writes them)\n"
	       "  -p, --probe      also the active probes (root): map BAR0 of controllers bound\n"
	       "                   to vfio-pci/uio, register it with CUDA, one GPU read of CAP,\n"
	       "                   a dma-buf export of 2 MiB of GPU memory\n"
	       "  -h, --help       this text\n"
	       "\n"
	       "exit status: 0 a pair can run Tier 1, 1 none can, 2 usage error.\n");
}

/* DDDD:BB:DD.F or BB:DD.F, any case, into the lower-case long form. */
static int parse_bdf(const char *s, char out[13])
{
	char t[13];
	size_t l = strlen(s);
	if (l == 7)
		snprintf(t, sizeof(t), "0000:%.7s", s);
	else if (l == 12)
		memcpy(t, s, 13);
	else
		return -1;
	for (int i = 0; i < 12; i++) {
		bool sep = i == 4 || i == 7 || i == 10;
		if (sep ? t[i] != (i == 10 ? '.' : ':') : !isxdigit((unsigned char)t[i]))
			return -1;
		t[i] = (char)tolower((unsigned char)t[i]);
	}
	if (t[11] > '7' || (t[8] > '1' && t[8] <= '9') || isalpha((unsigned char)t[8]))
		return -1;
	memcpy(out, t, 13);
	return 0;
}

static const char *gts_str(double g, char *b, size_t len)
{
	if (g <= 0)
		return "?";
	snprintf(b, len, g == 2.5 ? "%.1f" : "%.0f", g);
	return b;
}

static void print_dev_link(const struct gpunvme_doctor_dev *d)
{
	char b[16];
	if (d->link_gts > 0 || d->link_width > 0)
		printf("link %s GT/s x%d", gts_str(d->link_gts, b, sizeof(b)), d->link_width);
	else
		printf("link unknown");
}

static const char *or_unknown(const char *s)
{
	return s[0] ? s : "unknown";
}

/* ---- probes ---------------------------------------------------------------- */

struct bar_map {
	void *p;
	size_t len;
};

/* CPU mapping of BAR0 through sysfs (resource0): only for a controller
 * bound to vfio-pci or uio (never one the kernel driver owns); reads CAP
 * and VS once. */
static void probe_bar0(const struct gpunvme_doctor_nvme *n, struct gpunvme_doctor_probe_result *r, struct bar_map *m)
{
	char path[128];
	m->p = NULL;
	const char *drv = n->pci.driver;
	if (strcmp(drv, "vfio-pci") && strcmp(drv, "uio_pci_generic")) {
		snprintf(r->text, sizeof(r->text), "not run, because %s is %s%s (not vfio-pci/uio)", n->pci.bdf,
			 drv[0] ? "bound to " : "bound to no driver", drv);
		return;
	}
	r->run = true;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/resource0", n->pci.bdf);
	int fd = open(path, O_RDWR | O_SYNC | O_CLOEXEC);
	if (fd < 0) {
		snprintf(r->text, sizeof(r->text), "open %s: %s", path, strerror(errno));
		return;
	}
	m->len = 4096;
	m->p = mmap(NULL, m->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m->p == MAP_FAILED) {
		m->p = NULL;
		snprintf(r->text, sizeof(r->text), "mmap %s: %s", path, strerror(errno));
		return;
	}
	volatile uint32_t *regs = m->p;
	uint32_t vs = regs[2];
	if (vs == 0xffffffffu) {
		snprintf(r->text, sizeof(r->text), "BAR0 reads all ones (device in D3 or gone)");
		return;
	}
	r->ok = true;
	snprintf(r->text, sizeof(r->text), "BAR0 mapped, NVMe version %u.%u", vs >> 16, (vs >> 8) & 0xff);
}

static void run_probes(struct gpunvme_doctor_report *rep, int gsel, int nsel)
{
	static struct bar_map maps[GPUNVME_DOCTOR_MAX_NVME];
	rep->probed = true;
	for (int i = 0; i < rep->nnvme; i++)
		if (nsel < 0 || nsel == i)
			probe_bar0(&rep->nvme[i], &rep->probe.bar0[i], &maps[i]);
	for (int g = 0; g < rep->ngpu; g++) {
		if (gsel >= 0 && gsel != g)
			continue;
		struct gpunvme_doctor_probe_result *d = &rep->probe.dmabuf[g];
#ifdef GPUNVME_HAVE_CUDA
		int rc = doctor_gpu_dmabuf(rep->gpu[g].pci.bdf, &rep->gpu[g].memory_bytes, d->text, sizeof(d->text));
		d->run = rc >= 0;
		d->ok = rc == 0;
#else
		snprintf(d->text, sizeof(d->text), "not run, because this build has no CUDA");
#endif
		for (int i = 0; i < rep->nnvme; i++) {
			struct gpunvme_doctor_probe_result *io = &rep->probe.register_io[g][i], *rd = &rep->probe.gpu_read[g][i];
			if (nsel >= 0 && nsel != i)
				continue;
			if (!maps[i].p) {
				int tn = snprintf(io->text, sizeof(io->text), "not run, because BAR0 of %s is not mapped (%.200s)",
						  rep->nvme[i].pci.bdf, rep->probe.bar0[i].text);
				(void)tn; /* bounded by the precision: fits */
				snprintf(rd->text, sizeof(rd->text), "%s", "BAR0 is not mapped");
				continue;
			}
#ifdef GPUNVME_HAVE_CUDA
			int rrc = -1;
			uint64_t cap = 0;
			rc = doctor_gpu_register_io(rep->gpu[g].pci.bdf, maps[i].p, maps[i].len, 1000, &rrc, &cap, io->text,
						    sizeof(io->text), rd->text, sizeof(rd->text));
			io->run = rc >= 0;
			io->ok = rc == 0;
			rd->run = rrc >= 0;
			rd->ok = rrc == 0;
#else
			snprintf(io->text, sizeof(io->text), "this build has no CUDA");
			snprintf(rd->text, sizeof(rd->text), "this build has no CUDA");
#endif
		}
	}
	for (int i = 0; i < rep->nnvme; i++)
		if (maps[i].p)
			munmap(maps[i].p, maps[i].len);
}

/* ---- output ------------------------------------------------------------------ */

static void print_verdict(const char *name, const struct gpunvme_doctor_verdict *v)
{
	printf("  %s", name);
	if (v->route[0])
		printf(" (%s)", v->route);
	printf(": %s\n", gpunvme_doctor_answer_str(v->answer));
	for (int i = 0; i < v->nreasons; i++) {
		printf("    - %s\n", v->reasons[i].why);
		if (v->reasons[i].fix[0])
			printf("      fix: %s\n", v->reasons[i].fix);
	}
}

static void print_text(const struct gpunvme_doctor_report *r, int gsel, int nsel)
{
	const struct gpunvme_doctor_system *s = &r->sys;
	char b[32];

	printf("System\n");
	if (r->root[0])
		printf("  captured machine: %s\n", r->root);
	printf("  IOMMU: %s (%s)\n", gpunvme_doctor_iommu_str(s->iommu), s->iommu_why);
	printf("  kernel command line: %s\n", or_unknown(s->cmdline));
	printf("  modules: vfio-pci %s, uio_pci_generic %s, gpunvme kernel module %s, vfio no-IOMMU mode %s\n",
	       gpunvme_doctor_answer_str(s->vfio_pci), gpunvme_doctor_answer_str(s->uio_pci_generic),
	       gpunvme_doctor_answer_str(s->kmod), gpunvme_doctor_answer_str(s->noiommu));
	printf("  NVIDIA driver: %s, open kernel module: %s\n", s->nvidia_version[0] ? s->nvidia_version : "none",
	       gpunvme_doctor_answer_str(s->nvidia_open));
	printf("  dma-buf export: %s (%s)\n", gpunvme_doctor_answer_str(s->dmabuf), s->dmabuf_why);
	if (s->hugepages_total >= 0)
		printf("  hugepages (2 MiB): %ld reserved, %ld free\n", s->hugepages_total, s->hugepages_free);
	else
		printf("  hugepages (2 MiB): unknown\n");
	if (!s->memlock_known)
		printf("  memlock limit: unknown\n");
	else if (s->memlock_unlimited)
		printf("  memlock limit: unlimited\n");
	else
		printf("  memlock limit: %llu KiB\n", (unsigned long long)(s->memlock_bytes >> 10));
	if (s->why[0])
		printf("  unknown: %s\n", s->why);

	printf("\nNVMe controllers\n");
	for (int i = 0; i < r->nnvme; i++) {
		const struct gpunvme_doctor_nvme *n = &r->nvme[i];
		if (nsel >= 0 && nsel != i)
			continue;
		printf("  %s %04x:%04x driver %s, power %s, ", n->pci.bdf, n->pci.vendor & 0xffff, n->pci.device & 0xffff,
		       n->pci.driver[0] ? n->pci.driver : "none", or_unknown(n->pci.power_state));
		print_dev_link(&n->pci);
		if (n->pci.iommu_group >= 0)
			printf(", IOMMU group %d", n->pci.iommu_group);
		else
			printf(", no IOMMU group");
		if (n->pci.numa_node >= 0)
			printf(", NUMA %d", n->pci.numa_node);
		printf("\n");
		if (n->kname[0])
			printf("    kernel %s \"%s\": %d namespaces, %d queues, max transfer %d KiB, %s\n", n->kname,
			       n->model, n->namespaces, n->queues, n->max_transfer_kib,
			       n->mounted[0] ? n->mounted : "nothing mounted");
		if (n->pci.why[0])
			printf("    unknown: %s\n", n->pci.why);
		/* the controller's own verdict, reasons as for a tier */
		const struct gpunvme_doctor_verdict *u = &r->nvme_verdict[i];
		printf("  ");
		print_verdict("user-space driver (CPU path)", u);
	}
	if (!r->nnvme)
		printf("  (none)\n");
	printf("\nNVIDIA GPUs\n");
	for (int g = 0; g < r->ngpu; g++) {
		const struct gpunvme_doctor_gpu *gp = &r->gpu[g];
		if (gsel >= 0 && gsel != g)
			continue;
		printf("  [%d] %s %04x:%04x %s, driver %s, power %s, ", g, gp->pci.bdf, gp->pci.vendor & 0xffff,
		       gp->pci.device & 0xffff, or_unknown(gp->model), gp->pci.driver[0] ? gp->pci.driver : "none",
		       or_unknown(gp->pci.power_state));
		print_dev_link(&gp->pci);
		printf(", BAR1 %s", gp->bar1_bytes ? cli_human_bytes(gp->bar1_bytes, b, sizeof(b)) : "unknown");
		if (gp->memory_bytes)
			printf(" of %s memory", cli_human_bytes(gp->memory_bytes, b, sizeof(b)));
		printf("\n");
		if (gp->pci.why[0])
			printf("    unknown: %s\n", gp->pci.why);
		if (r->probed)
			printf("    dma-buf probe: %s\n", r->probe.dmabuf[g].text);
	}
	if (!r->ngpu)
		printf("  (none)\n");

	for (int k = 0; k < r->npairs; k++) {
		const struct gpunvme_doctor_pair *p = &r->pairs[k];
		if ((gsel >= 0 && gsel != p->gpu) || (nsel >= 0 && nsel != p->nvme))
			continue;
		printf("\nGPU %s x NVMe %s\n", r->gpu[p->gpu].pci.bdf, r->nvme[p->nvme].pci.bdf);
		printf("  path: %s", p->path_kind);
		if (p->common[0])
			printf(" (through %s)", p->common);
		printf("\n  hops:");
		for (int h = 0; h < p->nhops; h++) {
			const struct gpunvme_doctor_hop *hp = &p->hops[h];
			printf(" %s %s GT/s x%d", hp->bdf, gts_str(hp->gts, b, sizeof(b)), hp->width);
			if (hp->acs_ctrl >= 0)
				printf(" [ACS 0x%04x]", hp->acs_ctrl);
			printf("%s", h + 1 < p->nhops ? "," : "");
		}
		if (p->link_gbytes > 0)
			printf("\n  link-limited bandwidth: %.2f GB/s (narrowest hop %s)\n", p->link_gbytes,
			       p->hops[p->narrowest].bdf);
		else
			printf("\n  link-limited bandwidth: unknown, because no hop's link speed is readable\n");
		if (r->probed) {
			printf("  probe BAR0: %s\n", r->probe.bar0[p->nvme].text);
			printf("  probe cudaHostRegisterIoMemory: %s\n", r->probe.register_io[p->gpu][p->nvme].text);
			printf("  probe GPU read of CAP: %s\n", r->probe.gpu_read[p->gpu][p->nvme].text);
		}
		print_verdict("Tier 1", &p->tier[0]);
		print_verdict("Tier 2", &p->tier[1]);
		print_verdict("Tier 3", &p->tier[2]);
		for (int i = 0; i < p->nnotes; i++)
			printf("  note: %s\n", p->notes[i]);
	}
}

static void json_answer(struct cli_json *j, const char *key, enum gpunvme_doctor_answer a)
{
	cj_str(j, key, gpunvme_doctor_answer_str(a));
}

static void json_dev(struct cli_json *j, const struct gpunvme_doctor_dev *d)
{
	cj_str(j, "bdf", d->bdf);
	if (d->vendor >= 0)
		cj_hex(j, "vendor", (uint64_t)d->vendor, 4);
	else
		cj_null(j, "vendor");
	if (d->device >= 0)
		cj_hex(j, "device", (uint64_t)d->device, 4);
	else
		cj_null(j, "device");
	cj_str(j, "driver", d->driver);
	cj_str(j, "power_state", d->power_state);
	cj_dbl(j, "link_gts", d->link_gts);
	cj_i64(j, "link_width", d->link_width);
	cj_i64(j, "iommu_group", d->iommu_group);
	cj_str(j, "iommu_type", d->iommu_type);
	cj_i64(j, "numa_node", d->numa_node);
	cj_str(j, "host_bridge", d->host_bridge);
	cj_arr_begin(j, "bridges");
	for (int i = 0; i < d->nup; i++)
		cj_str(j, NULL, d->up[i].bdf);
	cj_arr_end(j);
	cj_str(j, "unknown", d->why);
}

static void json_verdict(struct cli_json *j, const char *key, const struct gpunvme_doctor_verdict *v)
{
	cj_obj_begin(j, key);
	json_answer(j, "answer", v->answer);
	if (v->route[0])
		cj_str(j, "route", v->route);
	cj_arr_begin(j, "reasons");
	for (int i = 0; i < v->nreasons; i++) {
		cj_obj_begin(j, NULL);
		cj_str(j, "why", v->reasons[i].why);
		cj_str(j, "fix", v->reasons[i].fix);
		cj_obj_end(j);
	}
	cj_arr_end(j);
	cj_obj_end(j);
}

static void json_probe(struct cli_json *j, const char *key, const struct gpunvme_doctor_probe_result *p)
{
	cj_obj_begin(j, key);
	cj_bool(j, "run", p->run);
	cj_bool(j, "ok", p->ok);
	cj_str(j, "text", p->text);
	cj_obj_end(j);
}

static void print_json(const struct gpunvme_doctor_report *r, int gsel, int nsel, int usable)
{
	const struct gpunvme_doctor_system *s = &r->sys;
	struct cli_json j;
	cj_init(&j, stdout);
	cj_obj_begin(&j, NULL);
	cj_obj_begin(&j, "system");
	cj_str(&j, "iommu", gpunvme_doctor_iommu_str(s->iommu));
	cj_str(&j, "iommu_why", s->iommu_why);
	cj_i64(&j, "iommu_groups", s->iommu_groups);
	cj_str(&j, "cmdline", s->cmdline);
	json_answer(&j, "vfio_pci", s->vfio_pci);
	json_answer(&j, "uio_pci_generic", s->uio_pci_generic);
	json_answer(&j, "kernel_module", s->kmod);
	json_answer(&j, "vfio_noiommu", s->noiommu);
	cj_str(&j, "nvidia_version", s->nvidia_version);
	json_answer(&j, "nvidia_open", s->nvidia_open);
	json_answer(&j, "dmabuf", s->dmabuf);
	cj_str(&j, "dmabuf_why", s->dmabuf_why);
	cj_i64(&j, "hugepages_2m_total", s->hugepages_total);
	cj_i64(&j, "hugepages_2m_free", s->hugepages_free);
	if (!s->memlock_known)
		cj_null(&j, "memlock");
	else if (s->memlock_unlimited)
		cj_str(&j, "memlock", "unlimited");
	else
		cj_u64(&j, "memlock", s->memlock_bytes);
	cj_str(&j, "unknown", s->why);
	cj_obj_end(&j);
	cj_arr_begin(&j, "nvme");
	for (int i = 0; i < r->nnvme; i++) {
		const struct gpunvme_doctor_nvme *n = &r->nvme[i];
		if (nsel >= 0 && nsel != i)
			continue;
		cj_obj_begin(&j, NULL);
		json_dev(&j, &n->pci);
		cj_str(&j, "kernel_name", n->kname);
		cj_str(&j, "model", n->model);
		cj_i64(&j, "namespaces", n->namespaces);
		cj_i64(&j, "queues", n->queues);
		cj_i64(&j, "max_transfer_kib", n->max_transfer_kib);
		cj_str(&j, "mounted", n->mounted);
		if (r->probed)
			json_probe(&j, "probe_bar0", &r->probe.bar0[i]);
		json_verdict(&j, "userspace", &r->nvme_verdict[i]);
		cj_obj_end(&j);
	}
	cj_arr_end(&j);
	cj_arr_begin(&j, "gpus");
	for (int g = 0; g < r->ngpu; g++) {
		const struct gpunvme_doctor_gpu *gp = &r->gpu[g];
		if (gsel >= 0 && gsel != g)
			continue;
		cj_obj_begin(&j, NULL);
		cj_i64(&j, "index", g);
		json_dev(&j, &gp->pci);
		cj_str(&j, "model", gp->model);
		cj_u64(&j, "bar1_bytes", gp->bar1_bytes);
		cj_u64(&j, "memory_bytes", gp->memory_bytes);
		if (r->probed)
			json_probe(&j, "probe_dmabuf", &r->probe.dmabuf[g]);
		cj_obj_end(&j);
	}
	cj_arr_end(&j);
	cj_arr_begin(&j, "pairs");
	for (int k = 0; k < r->npairs; k++) {
		const struct gpunvme_doctor_pair *p = &r->pairs[k];
		if ((gsel >= 0 && gsel != p->gpu) || (nsel >= 0 && nsel != p->nvme))
			continue;
		cj_obj_begin(&j, NULL);
		cj_str(&j, "gpu", r->gpu[p->gpu].pci.bdf);
		cj_str(&j, "nvme", r->nvme[p->nvme].pci.bdf);
		cj_str(&j, "path", p->path_kind);
		cj_str(&j, "through", p->common);
		cj_arr_begin(&j, "hops");
		for (int h = 0; h < p->nhops; h++) {
			cj_obj_begin(&j, NULL);
			cj_str(&j, "bdf", p->hops[h].bdf);
			cj_dbl(&j, "gts", p->hops[h].gts);
			cj_i64(&j, "width", p->hops[h].width);
			cj_dbl(&j, "gbytes", p->hops[h].gbytes);
			if (p->hops[h].acs_ctrl >= 0)
				cj_hex(&j, "acs_ctrl", (uint64_t)p->hops[h].acs_ctrl, 4);
			cj_obj_end(&j);
		}
		cj_arr_end(&j);
		cj_dbl(&j, "link_gbytes", p->link_gbytes);
		cj_bool(&j, "acs_redirect", p->acs_redirect);
		if (r->probed) {
			json_probe(&j, "probe_register_io", &r->probe.register_io[p->gpu][p->nvme]);
			json_probe(&j, "probe_gpu_read", &r->probe.gpu_read[p->gpu][p->nvme]);
		}
		json_verdict(&j, "tier1", &p->tier[0]);
		json_verdict(&j, "tier2", &p->tier[1]);
		json_verdict(&j, "tier3", &p->tier[2]);
		cj_arr_begin(&j, "notes");
		for (int i = 0; i < p->nnotes; i++)
			cj_str(&j, NULL, p->notes[i]);
		cj_arr_end(&j);
		cj_obj_end(&j);
	}
	cj_arr_end(&j);
	cj_i64(&j, "tier1_pairs", usable);
	cj_obj_end(&j);
	cj_finish(&j);
}

int cmd_doctor(int argc, char **argv)
{
	static const struct option lo[] = {
		{"json", no_argument, NULL, 'j'},   {"gpu", required_argument, NULL, 'g'},
		{"nvme", required_argument, NULL, 'n'}, {"root", required_argument, NULL, 'r'},
		{"probe", no_argument, NULL, 'p'},  {"help", no_argument, NULL, 'h'},
		{0, 0, 0, 0},
	};
	bool json = false, probe = false;
	const char *root = NULL;
	char nvme[13] = "";
	uint32_t gpu = UINT32_MAX;
	int c;
	while ((c = cli_getopt(argc, argv, "jg:n:r:ph", lo)) != -1) {
		switch (c) {
		case 'j': json = true; break;
		case 'g':
			if (cli_opt_u32("--gpu", optarg, false, 0, GPUNVME_DOCTOR_MAX_GPU - 1, &gpu))
				return EXIT_USAGE;
			break;
		case 'n':
			if (parse_bdf(optarg, nvme))
				return cli_usage_err("--nvme '%s' is not a PCI address: expected DDDD:BB:DD.F, e.g. 0000:01:00.0",
						     optarg);
			break;
		case 'r': root = optarg; break;
		case 'p': probe = true; break;
		case 'h': help(); return 0;
		default: return EXIT_USAGE;
		}
	}
	if (optind < argc)
		return cli_usage_err("unexpected argument '%s' (doctor takes options only)", argv[optind]);
	if (root && probe)
		return cli_usage_err("--probe examines this machine: it cannot be combined with --root");
	if (root) {
		char p[512];
		struct stat st;
		int n = snprintf(p, sizeof(p), "%s/sys", root);
		if (n < 0 || (size_t)n >= sizeof(p) || stat(p, &st) || !S_ISDIR(st.st_mode))
			return cli_err(EXIT_RUNTIME, "--root %s: no %s/sys directory: capture a machine with "
				       "scripts/doctor-capture.sh DIR", root, root);
	}
	struct gpunvme_doctor_report *rep;
	int rc = gpunvme_doctor_scan(root, &rep);
	if (rc)
		return cli_lib_err(rc, "doctor");
	int gsel = -1, nsel = -1;
	if (gpu != UINT32_MAX) {
		if ((int)gpu >= rep->ngpu) {
			int ng = rep->ngpu;
			gpunvme_doctor_free(rep);
			return cli_err(EXIT_RUNTIME, "--gpu %u: there %s %d NVIDIA GPU%s (numbered from 0 in PCI address "
				       "order)", gpu, ng == 1 ? "is" : "are", ng, ng == 1 ? "" : "s");
		}
		gsel = (int)gpu;
	}
	if (nvme[0]) {
		for (int i = 0; i < rep->nnvme; i++)
			if (!strcmp(rep->nvme[i].pci.bdf, nvme))
				nsel = i;
		if (nsel < 0) {
			gpunvme_doctor_free(rep);
			return cli_err(EXIT_RUNTIME, "--nvme %s: no NVMe controller there (gpunvme list shows them)", nvme);
		}
	}
	if (probe)
		run_probes(rep, gsel, nsel);
	gpunvme_doctor_judge(rep);
	int usable = 0, pairs = 0;
	for (int k = 0; k < rep->npairs; k++) {
		const struct gpunvme_doctor_pair *p = &rep->pairs[k];
		if ((gsel >= 0 && gsel != p->gpu) || (nsel >= 0 && nsel != p->nvme))
			continue;
		pairs++;
		usable += p->tier[0].answer == GPUNVME_DOCTOR_YES;
	}
	if (json)
		print_json(rep, gsel, nsel, usable);
	else
		print_text(rep, gsel, nsel);
	if (!json)
		printf("\nTier 1 usable for %d of %d GPU x NVMe pair%s\n", usable, pairs, pairs == 1 ? "" : "s");
	int ng = rep->ngpu, nn = rep->nnvme;
	gpunvme_doctor_free(rep);
	if (usable)
		return 0;
	fflush(stdout);
	if (!ng)
		return cli_err(EXIT_RUNTIME, "no direct path: no NVIDIA GPU found (install one, or check that "
			       "the hypervisor passes it through)");
	if (!nn)
		return cli_err(EXIT_RUNTIME, "no direct path: no NVMe controller found (a VM needs one passed "
			       "through, or an emulated one: -device nvme in QEMU)");
	return cli_err(EXIT_RUNTIME, "no direct path: no GPU x NVMe pair can run Tier 1 (the reasons and fixes are above)");
}
