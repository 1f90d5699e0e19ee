/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme id-ctrl / id-ns / show-regs: decoded Identify Controller,
 * Identify Namespace and controller registers (BAR0), text or JSON.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* common option parsing: [--nsid N] [--json] URI */
struct id_opts {
	const char *uri;
	bool json;
	uint32_t nsid;
};

static int parse_common(int argc, char **argv, bool want_nsid, void (*help)(void), struct id_opts *o)
{
	static const struct option lo_ns[] = {
		{"json", no_argument, NULL, 'j'},
		{"output-format", required_argument, NULL, 'o'},
		{"nsid", required_argument, NULL, 'n'},
		{"namespace-id", required_argument, NULL, 'n'},
		{"help", no_argument, NULL, 'h'},
		{0, 0, 0, 0},
	};
	static const struct option lo[] = {
		{"json", no_argument, NULL, 'j'},
		{"output-format", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0, 0, 0, 0},
	};
	o->json = false;
	o->nsid = 1;
	int c, rc;
	while ((c = cli_getopt(argc, argv, want_nsid ? "jo:n:h" : "jo:h", want_nsid ? lo_ns : lo)) != -1) {
		switch (c) {
		case 'j': o->json = true; break;
		case 'o':
			if (!strcmp(optarg, "json"))
				o->json = true;
			else if (!strcmp(optarg, "normal"))
				o->json = false;
			else
				return cli_usage_err("--output-format '%s': expected normal or json", optarg);
			break;
		case 'n':
			rc = cli_opt_u32("--nsid", optarg, false, 1, 0xfffffffe, &o->nsid);
			if (rc)
				return rc;
			break;
		case 'h': help(); return -1;
		default: return EXIT_USAGE;
		}
	}
	o->uri = cli_one_uri(argc, argv);
	return o->uri ? 0 : EXIT_USAGE;
}

/* ---- id-ctrl ------------------------------------------------------------- */

static void help_ctrl(void)
{
	printf("usage: gpunvme id-ctrl URI [--json]\n"
	       "\n"
	       "Decoded Identify Controller data (CNS 01h) of the controller at URI.\n"
	       "\n"
	       "  -j, --json           JSON output\n"
	       "  -o, --output-format  normal|json\n"
	       "  -h, --help           this text\n"
	       "\n"
	       "example: gpunvme id-ctrl emu:ram:64M\n");
}

struct bitname {
	unsigned bit;
	const char *name;
};

static const struct bitname oacs_bits[] = {
	{0, "Security"}, {1, "Format NVM"}, {2, "Firmware"}, {3, "NS Management"},
	{4, "Self-test"}, {5, "Directives"}, {6, "NVMe-MI"}, {7, "Virtualization"},
	{8, "Doorbell Buffer Config"}, {9, "Get LBA Status"}, {0, NULL},
};
static const struct bitname lpa_bits[] = {
	{0, "SMART per NS"}, {1, "Commands Effects"}, {2, "Extended data"},
	{3, "Telemetry"}, {4, "Persistent Event"}, {0, NULL},
};
static const struct bitname oncs_bits[] = {
	{0, "Compare"}, {1, "Write Uncorrectable"}, {2, "Dataset Management"},
	{3, "Write Zeroes"}, {4, "Save/Select"}, {5, "Reservations"}, {6, "Timestamp"},
	{7, "Verify"}, {0, NULL},
};

static const char *bits_str(uint32_t v, const struct bitname *b, char *buf, size_t len)
{
	size_t off = 0;
	buf[0] = 0;
	for (; b->name; b++)
		if (v & (1u << b->bit))
			off += (size_t)snprintf(buf + off, len > off ? len - off : 0, "%s%s",
						off ? ", " : "", b->name);
	if (!off)
		snprintf(buf, len, "none");
	return buf;
}

static void bits_json(struct cli_json *j, const char *key, uint32_t v, const struct bitname *b)
{
	cj_arr_begin(j, key);
	for (; b->name; b++)
		if (v & (1u << b->bit))
			cj_str(j, NULL, b->name);
	cj_arr_end(j);
}

static const char *sgls_str(uint32_t sgls)
{
	switch (sgls & 3) {
	case 0: return "SGLs not supported";
	case 1: return "SGLs supported";
	case 2: return "SGLs supported, dword alignment";
	default: return "reserved";
	}
}

/* Power in watts from a PSD power field and its scale */
static double psd_mp_watts(const struct gpunvme_psd *p)
{
	return (p->flags & 1) ? p->mp / 10000.0 : p->mp / 100.0;
}

static double psd_scaled(uint16_t v, uint8_t scale2bits)
{
	switch (scale2bits & 3) {
	case 1: return v / 10000.0;
	case 2: return v / 100.0;
	default: return -1.0;  /* not reported */
	}
}

int cmd_id_ctrl(int argc, char **argv)
{
	struct id_opts o;
	int rc = parse_common(argc, argv, false, help_ctrl, &o);
	if (rc)
		return rc < 0 ? 0 : rc;

	struct gpunvme_ctrl *c;
	if ((rc = cli_open(o.uri, NULL, &c)))
		return rc;
	struct gpunvme_ctrl_info info;
	memset(&info, 0, sizeof(info));
	rc = gpunvme_ctrl_info(c, &info);
	const struct gpunvme_id_ctrl *id = gpunvme_ctrl_identify(c);
	if (rc < 0 || !id) {
		rc = cli_lib_err(rc ? rc : -EIO, "identify controller");
		gpunvme_close(c);
		return rc;
	}
	char sn[21], mn[41], fr[9], nqn[257], bits[256], h[32];
	cli_fixed_str(sn, id->sn, 20);
	cli_fixed_str(mn, id->mn, 40);
	cli_fixed_str(fr, id->fr, 8);
	cli_fixed_str(nqn, id->subnqn, 256);
	uint64_t mps_min = 1ull << (12 + gpunvme_cap_mpsmin(info.cap));
	uint64_t mdts_bytes = id->mdts ? mps_min << id->mdts : 0;
	const struct gpunvme_psd *ps = &id->psd[0];
	double idle = psd_scaled(ps->idlp, (uint8_t)(ps->ips >> 6));
	double act = psd_scaled(ps->actp, (uint8_t)(ps->apw_aps >> 6));

	if (o.json) {
		struct cli_json j;
		cj_init(&j, stdout);
		cj_obj_begin(&j, NULL);
		cj_u64(&j, "vid", id->vid);
		cj_u64(&j, "ssvid", id->ssvid);
		cj_str(&j, "sn", sn);
		cj_str(&j, "mn", mn);
		cj_str(&j, "fr", fr);
		cj_u64(&j, "mdts", id->mdts);
		cj_u64(&j, "mdts_bytes", mdts_bytes);
		cj_u64(&j, "cntlid", id->cntlid);
		cj_u64(&j, "ver", id->ver);
		char vs[32];
		snprintf(vs, sizeof(vs), "%u.%u.%u", gpunvme_vs_mjr(id->ver), gpunvme_vs_mnr(id->ver),
			 gpunvme_vs_ter(id->ver));
		cj_str(&j, "ver_str", vs);
		cj_u64(&j, "oacs", id->oacs);
		bits_json(&j, "oacs_decoded", id->oacs, oacs_bits);
		cj_u64(&j, "acl", id->acl);
		cj_u64(&j, "aerl", id->aerl);
		cj_u64(&j, "lpa", id->lpa);
		bits_json(&j, "lpa_decoded", id->lpa, lpa_bits);
		cj_u64(&j, "elpe", id->elpe);
		cj_u64(&j, "npss", id->npss);
		cj_u64(&j, "sqes", id->sqes);
		cj_u64(&j, "cqes", id->cqes);
		cj_u64(&j, "maxcmd", id->maxcmd);
		cj_u64(&j, "nn", id->nn);
		cj_u64(&j, "oncs", id->oncs);
		bits_json(&j, "oncs_decoded", id->oncs, oncs_bits);
		cj_u64(&j, "vwc", id->vwc);
		cj_u64(&j, "sgls", id->sgls);
		cj_str(&j, "subnqn", nqn);
		cj_obj_begin(&j, "ps0");
		cj_dbl(&j, "max_power_w", psd_mp_watts(ps));
		cj_bool(&j, "non_operational", (ps->flags >> 1) & 1);
		cj_u64(&j, "enlat_us", ps->enlat);
		cj_u64(&j, "exlat_us", ps->exlat);
		cj_u64(&j, "rrt", ps->rrt);
		cj_u64(&j, "rrl", ps->rrl);
		cj_u64(&j, "rwt", ps->rwt);
		cj_u64(&j, "rwl", ps->rwl);
		if (idle >= 0)
			cj_dbl(&j, "idle_power_w", idle);
		else
			cj_null(&j, "idle_power_w");
		if (act >= 0)
			cj_dbl(&j, "active_power_w", act);
		else
			cj_null(&j, "active_power_w");
		cj_obj_end(&j);
		cj_obj_begin(&j, "driver");
		cj_str(&j, "transport", info.transport);
		cj_str(&j, "addr", info.addr);
		cj_u64(&j, "mqes", info.mqes);
		cj_u64(&j, "page_size", info.page_size);
		cj_u64(&j, "max_xfer", info.max_xfer);
		cj_u64(&j, "nr_io_queues", info.nr_io_queues);
		char cb[96];
		cj_str(&j, "caps", gpunvme_caps_str(info.caps, cb, sizeof(cb)));
		cj_obj_end(&j);
		cj_obj_end(&j);
		cj_finish(&j);
	} else {
		printf("NVMe Identify Controller (%s):\n", o.uri);
		printf("vid       : 0x%04x\n", id->vid);
		printf("ssvid     : 0x%04x\n", id->ssvid);
		printf("sn        : %s\n", sn);
		printf("mn        : %s\n", mn);
		printf("fr        : %s\n", fr);
		if (id->mdts)
			printf("mdts      : %u (%s per command, in %" PRIu64 "-byte CAP.MPSMIN pages)\n",
			       id->mdts, cli_human_bytes(mdts_bytes, h, sizeof(h)), mps_min);
		else
			printf("mdts      : 0 (no limit)\n");
		printf("cntlid    : 0x%04x\n", id->cntlid);
		printf("ver       : 0x%08x (%u.%u.%u)\n", id->ver, gpunvme_vs_mjr(id->ver),
		       gpunvme_vs_mnr(id->ver), gpunvme_vs_ter(id->ver));
		printf("oacs      : 0x%04x (%s)\n", id->oacs, bits_str(id->oacs, oacs_bits, bits, sizeof(bits)));
		printf("acl       : %u (%u concurrent Aborts)\n", id->acl, id->acl + 1u);
		printf("aerl      : %u (%u outstanding Async Event Requests)\n", id->aerl, id->aerl + 1u);
		printf("lpa       : 0x%02x (%s)\n", id->lpa, bits_str(id->lpa, lpa_bits, bits, sizeof(bits)));
		printf("elpe      : %u (%u Error Information log entries)\n", id->elpe, id->elpe + 1u);
		printf("sqes      : 0x%02x (required %u B, max %u B)\n", id->sqes, 1u << (id->sqes & 0xf),
		       1u << (id->sqes >> 4));
		printf("cqes      : 0x%02x (required %u B, max %u B)\n", id->cqes, 1u << (id->cqes & 0xf),
		       1u << (id->cqes >> 4));
		printf("nn        : %u\n", id->nn);
		printf("oncs      : 0x%04x (%s)\n", id->oncs, bits_str(id->oncs, oncs_bits, bits, sizeof(bits)));
		printf("vwc       : 0x%02x (volatile write cache %s%s)\n", id->vwc,
		       (id->vwc & GPUNVME_VWC_PRESENT) ? "present" : "not present",
		       ((id->vwc >> 1) & 3) == 3 ? "; Flush with NSID FFFFFFFFh supported"
		       : ((id->vwc >> 1) & 3) == 2 ? "; Flush with NSID FFFFFFFFh not supported" : "");
		printf("sgls      : 0x%08x (%s)\n", id->sgls, sgls_str(id->sgls));
		printf("subnqn    : %s\n", nqn[0] ? nqn : "(none)");
		printf("ps0       : mp:%.2fW %s enlat:%u exlat:%u rrt:%u rrl:%u rwt:%u rwl:%u", psd_mp_watts(ps),
		       (ps->flags & 2) ? "non-operational" : "operational", ps->enlat, ps->exlat, ps->rrt,
		       ps->rrl, ps->rwt, ps->rwl);
		if (idle >= 0)
			printf(" idle_power:%.4fW", idle);
		else
			printf(" idle_power:-");
		if (act >= 0)
			printf(" active_power:%.4fW\n", act);
		else
			printf(" active_power:-\n");
		printf("driver    : %s, %u I/O queue pairs granted, %u entries max, max transfer %s\n",
		       info.transport, info.nr_io_queues, info.mqes,
		       info.max_xfer ? cli_human_bytes(info.max_xfer, h, sizeof(h)) : "unlimited");
		char cb[96];
		printf("caps      : %s\n", gpunvme_caps_str(info.caps, cb, sizeof(cb)));
	}
	gpunvme_close(c);
	return 0;
}

/* ---- id-ns --------------------------------------------------------------- */

static void help_ns(void)
{
	printf("usage: gpunvme id-ns URI [--nsid N] [--json]\n"
	       "\n"
	       "Decoded Identify Namespace data (CNS 00h): size, capacity and use in blocks,\n"
	       "the LBA formats with the one in use marked, DLFEAT, NGUID and EUI64.\n"
	       "\n"
	       "  -n, --nsid N         namespace (default 1)\n"
	       "  -j, --json           JSON output\n"
	       "  -o, --output-format  normal|json\n"
	       "  -h, --help           this text\n"
	       "\n"
	       "example: gpunvme id-ns 'emu:ram:64M?ns=ram:1G' --nsid 2\n");
}

static void hexstr(char *out, const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
	out[2 * n] = 0;
}

static const char *rp_str(unsigned rp)
{
	static const char *s[] = {"best", "better", "good", "degraded"};
	return s[rp & 3];
}

int cmd_id_ns(int argc, char **argv)
{
	struct id_opts o;
	int rc = parse_common(argc, argv, true, help_ns, &o);
	if (rc)
		return rc < 0 ? 0 : rc;

	struct gpunvme_ctrl *c;
	if ((rc = cli_open(o.uri, NULL, &c)))
		return rc;
	struct gpunvme_ns_info ni;
	if ((rc = cli_ns(c, o.nsid, &ni))) {
		gpunvme_close(c);
		return rc;
	}
	const struct gpunvme_id_ns *ns = gpunvme_ns_identify(c, o.nsid);
	if (!ns) {
		rc = cli_lib_err(-EIO, "identify namespace %u", o.nsid);
		gpunvme_close(c);
		return rc;
	}
	unsigned cur = gpunvme_id_ns_flbas_index(ns);
	unsigned nf = ns->nlbaf + 1u;
	if (nf > 16)
		nf = 16;
	char nguid[33], eui[17], h[32];
	hexstr(nguid, ns->nguid, 16);
	hexstr(eui, ns->eui64, 8);
	uint64_t lbasz = ns->lbaf[cur].lbads < 64 ? 1ull << ns->lbaf[cur].lbads : 0;

	if (o.json) {
		struct cli_json j;
		cj_init(&j, stdout);
		cj_obj_begin(&j, NULL);
		cj_u64(&j, "nsid", o.nsid);
		cj_u64(&j, "nsze", ns->nsze);
		cj_u64(&j, "ncap", ns->ncap);
		cj_u64(&j, "nuse", ns->nuse);
		cj_u64(&j, "size_bytes", ns->nsze * lbasz);
		cj_u64(&j, "nsfeat", ns->nsfeat);
		cj_u64(&j, "nlbaf", ns->nlbaf);
		cj_u64(&j, "flbas", ns->flbas);
		cj_u64(&j, "lba_size", lbasz);
		cj_u64(&j, "dlfeat", ns->dlfeat);
		cj_u64(&j, "nsattr", ns->nsattr);
		cj_bool(&j, "write_protected", ns->nsattr & 1);
		cj_bool(&j, "dealloc_reads_zeroes", (ns->dlfeat & 7) == GPUNVME_DLFEAT_READ_ZEROES);
		cj_str(&j, "nguid", nguid);
		cj_str(&j, "eui64", eui);
		cj_arr_begin(&j, "lbafs");
		for (unsigned i = 0; i < nf; i++) {
			cj_obj_begin(&j, NULL);
			cj_u64(&j, "index", i);
			cj_u64(&j, "ms", ns->lbaf[i].ms);
			cj_u64(&j, "lbads", ns->lbaf[i].lbads);
			cj_u64(&j, "rp", ns->lbaf[i].rp & 3);
			cj_bool(&j, "in_use", i == cur);
			cj_obj_end(&j);
		}
		cj_arr_end(&j);
		cj_obj_end(&j);
		cj_finish(&j);
	} else {
		printf("NVMe Identify Namespace %u (%s):\n", o.nsid, o.uri);
		printf("nsze      : %" PRIu64 " (0x%" PRIx64 ") blocks, %s\n", ns->nsze, ns->nsze,
		       cli_human_bytes(ns->nsze * lbasz, h, sizeof(h)));
		printf("ncap      : %" PRIu64 " (0x%" PRIx64 ")\n", ns->ncap, ns->ncap);
		printf("nuse      : %" PRIu64 " (0x%" PRIx64 ")\n", ns->nuse, ns->nuse);
		printf("nsfeat    : 0x%02x\n", ns->nsfeat);
		printf("nlbaf     : %u (%u LBA format%s)\n", ns->nlbaf, ns->nlbaf + 1u, ns->nlbaf ? "s" : "");
		printf("flbas     : 0x%02x (format %u in use)\n", ns->flbas, cur);
		printf("dlfeat    : 0x%02x (%s)\n", ns->dlfeat,
		       (ns->dlfeat & 7) == GPUNVME_DLFEAT_READ_ZEROES ? "deallocated blocks read as zeroes"
		       : (ns->dlfeat & 7) == 2 ? "deallocated blocks read as ones"
					       : "deallocated block values not reported");
		printf("nsattr    : 0x%02x%s\n", ns->nsattr, ns->nsattr & 1 ? " (write protected)" : "");
		printf("nguid     : %s\n", nguid);
		printf("eui64     : %s\n", eui);
		for (unsigned i = 0; i < nf; i++)
			printf("lbaf %2u   : ms:%-3u lbads:%-2u (%u B) rp:%u (%s)%s\n", i, ns->lbaf[i].ms,
			       ns->lbaf[i].lbads, ns->lbaf[i].lbads < 32 ? 1u << ns->lbaf[i].lbads : 0,
			       ns->lbaf[i].rp & 3, rp_str(ns->lbaf[i].rp), i == cur ? " (in use)" : "");
	}
	gpunvme_close(c);
	return 0;
}

/* ---- show-regs --------------------------------------------------------------- */

static void help_regs(void)
{
	printf("usage: gpunvme show-regs URI [--json]\n"
	       "\n"
	       "Controller registers read from BAR0 after the driver brought the controller\n"
	       "up: CAP, VS, CC, CSTS, AQA, ASQ, ACQ, CMBLOC, CMBSZ, with their fields.\n"
	       "\n"
	       "  -j, --json           JSON output\n"
	       "  -o, --output-format  normal|json\n"
	       "  -h, --help           this text\n");
}

static uint32_t rd32(volatile void *bar, uint32_t off)
{
	return *(volatile uint32_t *)((volatile uint8_t *)bar + off);
}

static uint64_t rd64(volatile void *bar, uint32_t off)
{
	uint64_t lo = rd32(bar, off), hi = rd32(bar, off + 4);
	return lo | hi << 32;
}

static const char *shst_str(unsigned s)
{
	static const char *t[] = {"normal operation", "shutdown processing occurring",
				  "shutdown processing complete", "reserved"};
	return t[s & 3];
}

static const char *shn_str(unsigned s)
{
	static const char *t[] = {"no notification", "normal shutdown", "abrupt shutdown", "reserved"};
	return t[s & 3];
}

static uint64_t cmb_unit(unsigned szu)
{
	return szu <= 6 ? 4096ull << (4 * szu) : 0;
}

int cmd_show_regs(int argc, char **argv)
{
	struct id_opts o;
	int rc = parse_common(argc, argv, false, help_regs, &o);
	if (rc)
		return rc < 0 ? 0 : rc;

	struct gpunvme_ctrl *c;
	if ((rc = cli_open(o.uri, NULL, &c)))
		return rc;
	size_t len = 0;
	volatile void *bar = gpunvme_bar0(c, &len);
	if (!bar || len < 0x40) {
		rc = bar ? cli_err(EXIT_RUNTIME, "BAR0 is only %zu bytes, registers need 64", len)
		     : !strncmp(o.uri, "tcp:", 4)
			 ? cli_err(EXIT_RUNTIME, "%s: an NVMe/TCP controller has no BAR0 (its registers are "
						 "properties); see 'gpunvme id-ctrl %s'", o.uri, o.uri)
			 : cli_lib_err(-ENODEV, "BAR0 not available");
		gpunvme_close(c);
		return rc;
	}
	uint64_t cap = rd64(bar, GPUNVME_REG_CAP);
	uint32_t vs = rd32(bar, GPUNVME_REG_VS);
	uint32_t intms = rd32(bar, GPUNVME_REG_INTMS);
	uint32_t intmc = rd32(bar, GPUNVME_REG_INTMC);
	uint32_t cc = rd32(bar, GPUNVME_REG_CC);
	uint32_t csts = rd32(bar, GPUNVME_REG_CSTS);
	uint32_t nssr = rd32(bar, GPUNVME_REG_NSSR);
	uint32_t aqa = rd32(bar, GPUNVME_REG_AQA);
	uint64_t asq = rd64(bar, GPUNVME_REG_ASQ);
	uint64_t acq = rd64(bar, GPUNVME_REG_ACQ);
	uint32_t cmbloc = rd32(bar, GPUNVME_REG_CMBLOC);
	uint32_t cmbsz = rd32(bar, GPUNVME_REG_CMBSZ);
	gpunvme_close(c);

	if (csts == 0xffffffffu)
		return cli_err(EXIT_RUNTIME, "registers read all ones: the device is gone or not responding");

	uint64_t cmb_bytes = (uint64_t)gpunvme_cmbsz_sz(cmbsz) * cmb_unit(gpunvme_cmbsz_szu(cmbsz));
	if (o.json) {
		struct cli_json j;
		cj_init(&j, stdout);
		cj_obj_begin(&j, NULL);
		cj_obj_begin(&j, "cap");
		cj_hex(&j, "value", cap, 16);
		cj_u64(&j, "mqes", gpunvme_cap_mqes(cap));
		cj_u64(&j, "cqr", gpunvme_cap_cqr(cap));
		cj_u64(&j, "ams", gpunvme_cap_ams(cap));
		cj_u64(&j, "to", gpunvme_cap_to(cap));
		cj_u64(&j, "to_ms", gpunvme_cap_to(cap) * 500ull);
		cj_u64(&j, "dstrd", gpunvme_cap_dstrd(cap));
		cj_u64(&j, "nssrs", gpunvme_cap_nssrs(cap));
		cj_u64(&j, "css", gpunvme_cap_css(cap));
		cj_u64(&j, "bps", gpunvme_cap_bps(cap));
		cj_u64(&j, "mpsmin", gpunvme_cap_mpsmin(cap));
		cj_u64(&j, "mpsmax", gpunvme_cap_mpsmax(cap));
		cj_u64(&j, "pmrs", gpunvme_cap_pmrs(cap));
		cj_u64(&j, "cmbs", gpunvme_cap_cmbs(cap));
		cj_obj_end(&j);
		cj_obj_begin(&j, "vs");
		cj_hex(&j, "value", vs, 8);
		cj_u64(&j, "mjr", gpunvme_vs_mjr(vs));
		cj_u64(&j, "mnr", gpunvme_vs_mnr(vs));
		cj_u64(&j, "ter", gpunvme_vs_ter(vs));
		cj_obj_end(&j);
		cj_hex(&j, "intms", intms, 8);
		cj_hex(&j, "intmc", intmc, 8);
		cj_obj_begin(&j, "cc");
		cj_hex(&j, "value", cc, 8);
		cj_u64(&j, "en", gpunvme_cc_en(cc));
		cj_u64(&j, "css", gpunvme_cc_css(cc));
		cj_u64(&j, "mps", gpunvme_cc_mps(cc));
		cj_u64(&j, "ams", gpunvme_cc_ams(cc));
		cj_u64(&j, "shn", gpunvme_cc_shn(cc));
		cj_u64(&j, "iosqes", gpunvme_cc_iosqes(cc));
		cj_u64(&j, "iocqes", gpunvme_cc_iocqes(cc));
		cj_obj_end(&j);
		cj_obj_begin(&j, "csts");
		cj_hex(&j, "value", csts, 8);
		cj_u64(&j, "rdy", gpunvme_csts_rdy(csts));
		cj_u64(&j, "cfs", gpunvme_csts_cfs(csts));
		cj_u64(&j, "shst", gpunvme_csts_shst(csts));
		cj_u64(&j, "nssro", (csts >> 4) & 1);
		cj_u64(&j, "pp", (csts >> 5) & 1);
		cj_obj_end(&j);
		cj_hex(&j, "nssr", nssr, 8);
		cj_obj_begin(&j, "aqa");
		cj_hex(&j, "value", aqa, 8);
		cj_u64(&j, "asqs", gpunvme_aqa_asqs(aqa));
		cj_u64(&j, "acqs", gpunvme_aqa_acqs(aqa));
		cj_obj_end(&j);
		cj_hex(&j, "asq", asq, 16);
		cj_hex(&j, "acq", acq, 16);
		cj_obj_begin(&j, "cmbloc");
		cj_hex(&j, "value", cmbloc, 8);
		cj_u64(&j, "bir", gpunvme_cmbloc_bir(cmbloc));
		cj_u64(&j, "ofst", gpunvme_cmbloc_ofst(cmbloc));
		cj_obj_end(&j);
		cj_obj_begin(&j, "cmbsz");
		cj_hex(&j, "value", cmbsz, 8);
		cj_u64(&j, "szu", gpunvme_cmbsz_szu(cmbsz));
		cj_u64(&j, "sz", gpunvme_cmbsz_sz(cmbsz));
		cj_u64(&j, "bytes", cmb_bytes);
		cj_obj_end(&j);
		cj_obj_end(&j);
		cj_finish(&j);
		return 0;
	}
	char h[32];
	printf("NVMe controller registers (%s):\n", o.uri);
	printf("cap     : 0x%016" PRIx64 "\n", cap);
	printf("  mqes  : %u (%u entries per queue)\n", gpunvme_cap_mqes(cap), gpunvme_cap_mqes(cap) + 1);
	printf("  cqr   : %u (contiguous queues %s)\n", gpunvme_cap_cqr(cap),
	       gpunvme_cap_cqr(cap) ? "required" : "not required");
	printf("  ams   : 0x%x (round robin%s)\n", gpunvme_cap_ams(cap),
	       gpunvme_cap_ams(cap) & 1 ? ", weighted round robin" : "");
	printf("  to    : %u (%u ms ready timeout)\n", gpunvme_cap_to(cap), gpunvme_cap_to(cap) * 500);
	printf("  dstrd : %u (%u-byte doorbell stride)\n", gpunvme_cap_dstrd(cap), 4u << gpunvme_cap_dstrd(cap));
	printf("  nssrs : %u (subsystem reset %s)\n", gpunvme_cap_nssrs(cap),
	       gpunvme_cap_nssrs(cap) ? "supported" : "not supported");
	printf("  css   : 0x%02x (%s)\n", gpunvme_cap_css(cap),
	       gpunvme_cap_css(cap) & GPUNVME_CAP_CSS_NVM ? "NVM command set" : "no NVM command set");
	printf("  bps   : %u\n", gpunvme_cap_bps(cap));
	printf("  mpsmin: %u (%u B)\n", gpunvme_cap_mpsmin(cap), 4096u << gpunvme_cap_mpsmin(cap));
	printf("  mpsmax: %u (%u B)\n", gpunvme_cap_mpsmax(cap), 4096u << gpunvme_cap_mpsmax(cap));
	printf("  pmrs  : %u\n", gpunvme_cap_pmrs(cap));
	printf("  cmbs  : %u\n", gpunvme_cap_cmbs(cap));
	printf("vs      : 0x%08x (%u.%u.%u)\n", vs, gpunvme_vs_mjr(vs), gpunvme_vs_mnr(vs), gpunvme_vs_ter(vs));
	printf("intms   : 0x%08x\n", intms);
	printf("intmc   : 0x%08x\n", intmc);
	printf("cc      : 0x%08x\n", cc);
	printf("  en    : %u (%s)\n", gpunvme_cc_en(cc), gpunvme_cc_en(cc) ? "enabled" : "disabled");
	printf("  css   : %u (%s)\n", gpunvme_cc_css(cc), gpunvme_cc_css(cc) == 0 ? "NVM" : "other");
	printf("  mps   : %u (%u B pages)\n", gpunvme_cc_mps(cc), 4096u << gpunvme_cc_mps(cc));
	printf("  ams   : %u (%s)\n", gpunvme_cc_ams(cc), gpunvme_cc_ams(cc) == 0 ? "round robin" : "other");
	printf("  shn   : %u (%s)\n", gpunvme_cc_shn(cc), shn_str(gpunvme_cc_shn(cc)));
	printf("  iosqes: %u (%u B)\n", gpunvme_cc_iosqes(cc), 1u << gpunvme_cc_iosqes(cc));
	printf("  iocqes: %u (%u B)\n", gpunvme_cc_iocqes(cc), 1u << gpunvme_cc_iocqes(cc));
	printf("csts    : 0x%08x\n", csts);
	printf("  rdy   : %u (%s)\n", gpunvme_csts_rdy(csts), gpunvme_csts_rdy(csts) ? "ready" : "not ready");
	printf("  cfs   : %u (%s)\n", gpunvme_csts_cfs(csts),
	       gpunvme_csts_cfs(csts) ? "controller fatal status" : "no fatal status");
	printf("  shst  : %u (%s)\n", gpunvme_csts_shst(csts), shst_str(gpunvme_csts_shst(csts)));
	printf("  nssro : %u\n", (csts >> 4) & 1);
	printf("  pp    : %u\n", (csts >> 5) & 1);
	printf("nssr    : 0x%08x\n", nssr);
	printf("aqa     : 0x%08x (asqs %u = %u entries, acqs %u = %u entries)\n", aqa, gpunvme_aqa_asqs(aqa),
	       gpunvme_aqa_asqs(aqa) + 1, gpunvme_aqa_acqs(aqa), gpunvme_aqa_acqs(aqa) + 1);
	printf("asq     : 0x%016" PRIx64 "\n", asq);
	printf("acq     : 0x%016" PRIx64 "\n", acq);
	printf("cmbloc  : 0x%08x (bir %u, ofst 0x%x)\n", cmbloc, gpunvme_cmbloc_bir(cmbloc),
	       gpunvme_cmbloc_ofst(cmbloc));
	if (cmbsz)
		printf("cmbsz   : 0x%08x (szu %u, sz %u = %s; sqs %u cqs %u lists %u rds %u wds %u)\n", cmbsz,
		       gpunvme_cmbsz_szu(cmbsz), gpunvme_cmbsz_sz(cmbsz), cli_human_bytes(cmb_bytes, h, sizeof(h)),
		       cmbsz & 1, (cmbsz >> 1) & 1, (cmbsz >> 2) & 1, (cmbsz >> 3) & 1, (cmbsz >> 4) & 1);
	else
		printf("cmbsz   : 0x%08x (no controller memory buffer)\n", cmbsz);
	return 0;
}
