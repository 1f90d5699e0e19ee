/* SPDX-License-Identifier: BSD-2-Clause */
/* Emulator configuration: defaults and the "emu:" device string. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "emu/emu_internal.h"

void gpunvme_emu_config_init(struct gpunvme_emu_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->nr_ns = 1;
	cfg->ns[0].backing = GPUNVME_EMU_BACK_RAM;
	cfg->ns[0].size = 64ull << 20;
	cfg->ns[0].lba_shift = 9;
	cfg->mqes = 1023;
	cfg->mdts = 5;          /* 128 KiB, a common SSD value */
	cfg->dstrd = 0;
	cfg->cap_to = 20;       /* 10 s */
	cfg->vwc = 1;
	cfg->max_ioq = 64;
	cfg->workers = 1;
	cfg->idle_sleep_max_us = 1000;
	snprintf(cfg->serial, sizeof(cfg->serial), "GNDEMU0001");
	snprintf(cfg->model_name, sizeof(cfg->model_name), "gpu-nvme-direct emulator");
}

/* Leading decimal digits of s[0..n) into *out; *used says how many. Decimal
 * only: strtoull with base 0 would read "010" as 8 and "0x10" as 16, and it
 * skips blanks and takes a sign ("-1" wraps to 2^64 - 1). */
static int parse_dec(const char *s, size_t n, uint64_t *out, size_t *used)
{
	uint64_t v = 0;
	size_t i = 0;
	for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
		unsigned d = (unsigned)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	if (i == 0)
		return -EINVAL;
	*out = v;
	*used = i;
	return 0;
}

/* A size: decimal with an optional K/M/G/T suffix (powers of 1024), which
 * may be written Ki, KiB or KB as well. */
static int parse_size(const char *s, size_t n, uint64_t *out)
{
	uint64_t v;
	size_t i;
	int rc = parse_dec(s, n, &v, &i);
	if (rc)
		return rc;
	unsigned shift = 0;
	if (i < n) {
		switch (s[i]) {
		case 'k': case 'K': shift = 10; break;
		case 'm': case 'M': shift = 20; break;
		case 'g': case 'G': shift = 30; break;
		case 't': case 'T': shift = 40; break;
		default: return -EINVAL;
		}
		i++;
		if (i < n && s[i] == 'i')
			i++;
		if (i < n && s[i] == 'B')
			i++;
	}
	if (i != n)
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = v << shift;
	return 0;
}

/* Messages name the option, the value given and what is allowed; the
 * parser returns them through *err, so they live in a per-thread buffer. */
static _Thread_local char cfg_errbuf[400];

__attribute__((format(printf, 2, 3))) static int cfg_err(const char **err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cfg_errbuf, sizeof(cfg_errbuf), fmt, ap);
	va_end(ap);
	*err = cfg_errbuf;
	return -EINVAL;
}

/* One namespace: "ram:SIZE", "null:SIZE" or a file path. */
static int parse_ns(struct gpunvme_emu_ns_config *ns, const char *s, size_t n, const char **err)
{
	/* the first namespace ends at the first '?', so only one given with
	 * ns= can hold one: someone tried per-namespace options */
	if (memchr(s, '?', n))
		return cfg_err(err, "namespace '%.*s': options do not go inside a namespace; they follow the first '?' "
				    "joined by '&' and apply to every namespace (e.g. ram:1G?lbads=12&ns=ram:1M)",
			       (int)n, s);
	if (n >= 4 && !strncmp(s, "ram:", 4)) {
		ns->backing = GPUNVME_EMU_BACK_RAM;
	} else if (n >= 5 && !strncmp(s, "null:", 5)) {
		ns->backing = GPUNVME_EMU_BACK_NULL;
	} else {
		if (n == 0)
			return cfg_err(err, "empty namespace: expected ram:SIZE, null:SIZE or an image file path");
		if (n >= sizeof(ns->path))
			return cfg_err(err, "namespace image path '%.*s...' is %zu bytes long: at most %zu (use a shorter "
					    "path or a symbolic link)",
				       40, s, n, sizeof(ns->path) - 1);
		ns->backing = GPUNVME_EMU_BACK_FILE;
		memcpy(ns->path, s, n);
		ns->path[n] = 0;
		ns->size = 0;
		return 0;
	}
	const char *sz = strchr(s, ':') + 1;
	size_t szn = n - (size_t)(sz - s);
	if (parse_size(sz, szn, &ns->size) || ns->size == 0)
		return cfg_err(err, "namespace '%.*s': bad size '%.*s' (expected a number of bytes with an optional "
				    "K/M/G/T suffix, e.g. 512M, 4G)",
			       (int)n, s, (int)szn, sz);
	return 0;
}

/* Numeric options: name, allowed range, what the value means; allowed,
 * where set, replaces min..max in messages (lbads's range has holes). */
struct num_opt {
	const char *key;
	uint64_t min, max;
	const char *what;
	const char *allowed;
};

static const struct num_opt num_opts[] = {
	{ "lbads", 9, 12, "LBA data size 2^n bytes", "9 (512-byte blocks) or 12 (4 KiB blocks)" },
	{ "nsq", 1, 65535, "I/O queue pairs the controller grants" },
	{ "mqes", 1, 65535, "CAP.MQES, entries per queue minus one" },
	{ "mdts", 0, 20, "MDTS, 2^n pages per command; 0 = no limit (default 7: 512 KiB)" },
	{ "dstrd", 0, 15, "CAP.DSTRD, doorbell stride 4 << n bytes" },
	{ "workers", 1, 256, "emulator threads serving I/O queues (default: half the CPUs, 1 to 8; 3/4, 1 to 12, with the DMA process)" },
	{ "latency_us", 0, 10000000, "modeled command latency in microseconds" },
	{ "read_mbps", 0, 1000000000, "modeled read bandwidth in MB/s; 0 = unlimited" },
	{ "write_mbps", 0, 1000000000, "modeled write bandwidth in MB/s; 0 = unlimited" },
	{ "iops", 0, 1000000000, "modeled commands per second; 0 = unlimited" },
	/* CSTS.RDY must follow CC.EN within CAP.TO (20 x 500 ms) */
	{ "ready_ms", 0, 10000, "delay before CSTS.RDY, within CAP.TO of 10 s" },
	{ "idle_us", 1, 1000000, "longest idle sleep of a worker in microseconds" },
	{ "vwc", 0, 1, "volatile write cache present", "0 or 1" },
	{ "snapshot", 0, 1, "1 = serve the image from a RAM copy, never written back", "0 or 1" },
	{ "readonly", 0, 1, "1 = open the image read-only, writes fail (Namespace is Write Protected)", "0 or 1" },
	{ "gpu_pages", 0, 1, "1 = GPU memory mapped per 4 KiB page at scattered bus addresses (as kmod:)", "0 or 1" },
};

static int num_opt_value(const struct num_opt *o, const char *v, size_t n, uint64_t *out, const char **err)
{
	uint64_t x = 0;
	size_t used = 0;
	int rc = parse_dec(v, n, &x, &used);
	int in_range = !rc && used == n && x >= o->min && x <= o->max;
	/* only 512-byte and 4 KiB blocks are emulated */
	if (in_range && !strcmp(o->key, "lbads") && x != 9 && x != 12)
		in_range = 0;
	if (in_range) {
		*out = x;
		return 0;
	}
	/* a bare decimal number (not merely too large for 64 bits) is out of
	 * range; anything else is not a number at all */
	const char *form = (rc == -ERANGE || (!rc && used == n)) ? "" : "a decimal number ";
	if (o->allowed) /* a list of numbers: says the form itself */
		return cfg_err(err, "emulator option %s: '%.*s' is not allowed: must be %s (%s)", o->key, (int)n, v,
			       o->allowed, o->what);
	return cfg_err(err, "emulator option %s: '%.*s' is not allowed: must be %s%llu..%llu (%s)", o->key, (int)n, v,
		       form, (unsigned long long)o->min, (unsigned long long)o->max, o->what);
}

/* The list is built from the table, so it cannot fall behind a new option. */
static int unknown_opt(const char *k, size_t klen, const char **err)
{
	char known[256] = "";
	size_t off = 0;
	const char *hint = "";
	for (size_t i = 0; i <= sizeof(num_opts) / sizeof(num_opts[0]); i++) {
		const char *name = i < sizeof(num_opts) / sizeof(num_opts[0]) ? num_opts[i].key : "ns";
		if (strlen(name) == klen && !strncasecmp(k, name, klen))
			hint = " (option names are lower case)";
		int w = snprintf(known + off, sizeof(known) - off, "%s%s", off ? " " : "", name);
		if (w > 0 && (size_t)w < sizeof(known) - off)
			off += (size_t)w;
	}
	return cfg_err(err, "unknown emulator option '%.*s'%s; options are: %s", (int)klen, k, hint, known);
}

static void set_num(struct gpunvme_emu_config *cfg, const char *key, uint64_t x, uint32_t *lba_shift)
{
	if (!strcmp(key, "lbads"))
		*lba_shift = (uint32_t)x;
	else if (!strcmp(key, "nsq"))
		cfg->max_ioq = (uint16_t)x;
	else if (!strcmp(key, "mqes"))
		cfg->mqes = (uint32_t)x;
	else if (!strcmp(key, "mdts"))
		cfg->mdts = (uint8_t)x;
	else if (!strcmp(key, "dstrd"))
		cfg->dstrd = (uint8_t)x;
	else if (!strcmp(key, "workers"))
		cfg->workers = (uint32_t)x;
	else if (!strcmp(key, "latency_us"))
		cfg->model.latency_us = (uint32_t)x;
	else if (!strcmp(key, "read_mbps"))
		cfg->model.read_bps = x * 1000000ull;
	else if (!strcmp(key, "write_mbps"))
		cfg->model.write_bps = x * 1000000ull;
	else if (!strcmp(key, "iops"))
		cfg->model.iops = x;
	else if (!strcmp(key, "ready_ms"))
		cfg->ready_delay_ms = (uint32_t)x;
	else if (!strcmp(key, "idle_us"))
		cfg->idle_sleep_max_us = (uint32_t)x;
	else if (!strcmp(key, "vwc"))
		cfg->vwc = (uint8_t)x;
	else if (!strcmp(key, "snapshot"))
		cfg->ns[0].snapshot = (uint8_t)x;
	else if (!strcmp(key, "readonly"))
		cfg->ns[0].read_only = (uint8_t)x;
	else if (!strcmp(key, "gpu_pages"))
		cfg->gpu_pages = (uint8_t)x;
}

/*
 * Worker threads behind a device string that names none. One thread does
 * every command's copy (from an image file: page faults on the mapping and
 * a memcpy into pinned staging), which held `gpunvme load` of an 8 GiB model
 * in an image to 3.7-4.1 GB/s on the H100 machine; 8 took it to 14.6-15.6
 * GB/s (bench/results/emu-stage-2026-11-27). Idle workers sleep (backoff to
 * idle_us), so the cost of more is small; a 2-core machine keeps one.
 *
 * How many more pay depends on where the GPU copies run (emu.h):
 * - in this process: half the online CPUs, 1 to 8. Each worker's CUDA calls
 *   contend in this process's context: on the H200, 16 workers loaded 9.02 GB
 *   at 23.3-23.5 GB/s against 27.8-32.8 with 8.
 * - in the DMA process: three quarters of the CPUs, 1 to 12. A worker then
 *   only fills staging, and 8/12/16 measured 31.2-32.8/34.4-35.7/35.9-36.5
 *   GB/s (bench/results/emu-2026-11-29-s20, call 1). 12 takes most of 16's
 *   gain and leaves a quarter of the CPUs to the application; every worker
 *   takes a lane of the DMA process (dma_proto.h), so fewer per set also
 *   leaves lanes for more sets.
 * The C API's gpunvme_emu_config_init keeps 1: a program building its own
 * config chooses.
 */
static uint32_t default_workers(void)
{
	const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	const bool process = gpunvme_emu_copies() == GPUNVME_EMU_COPIES_PROCESS;
	const long n = process ? cpus * 3 / 4 : cpus / 2, most = process ? 12 : 8;
	return n < 1 ? 1 : n > most ? (uint32_t)most : (uint32_t)n;
}

int gpunvme_emu_config_parse(struct gpunvme_emu_config *cfg, const char *spec, const char **err)
{
	const char *dummy;
	if (!err)
		err = &dummy;
	*err = NULL;
	if (!cfg || !spec) {
		*err = "no device string";
		return -EINVAL;
	}
	gpunvme_emu_config_init(cfg);
	cfg->workers = default_workers();
	/* 512 KiB per command, QEMU's controller's default (hw/nvme, mdts=7).
	 * Every command costs a worker a pass of fixed work, and at 128 KiB
	 * (the C API's default, kept for its tests) those costs held a load
	 * from a page-cached image to 21-23 GB/s on the H200; 512 KiB took it
	 * to 24-28 (bench/results/emu-load-2026-11-28). */
	cfg->mdts = 7;
	const char *q = strchr(spec, '?');
	size_t base = q ? (size_t)(q - spec) : strlen(spec);
	if (parse_ns(&cfg->ns[0], spec, base, err))
		return -EINVAL;
	uint32_t lba_shift = 9;

	/* A repeated option is not refused: the later value wins, so callers
	 * (bench/) can append overrides to a default string. */
	const char *p = q ? q + 1 : NULL;
	while (p && *p) {
		const char *amp = strchr(p, '&');
		size_t len = amp ? (size_t)(amp - p) : strlen(p);
		const char *next = amp ? amp + 1 : NULL;
		if (len == 0) { /* a stray '&' carries nothing */
			p = next;
			continue;
		}
		const char *eq = memchr(p, '=', len);
		if (!eq)
			return cfg_err(err, "emulator option '%.*s' has no value (expected key=value, joined by '&')",
				       (int)len, p);
		size_t klen = (size_t)(eq - p);
		const char *v = eq + 1;
		size_t vlen = len - klen - 1;
		int is_ns = klen == 2 && !strncmp(p, "ns", 2);
		if (klen == 0)
			return cfg_err(err, "emulator option '%.*s' has no name (expected key=value, joined by '&')",
				       (int)len, p);
		/* ns= explains a '?' itself, naming the namespace */
		if (!is_ns && memchr(p, '?', len))
			return cfg_err(err, "emulator option '%.*s': only the first '?' starts the options; join them "
					    "with '&' (e.g. ram:1G?nsq=4&lbads=12)",
				       (int)len, p);
		const struct num_opt *o = NULL;
		for (size_t i = 0; i < sizeof(num_opts) / sizeof(num_opts[0]); i++)
			if (strlen(num_opts[i].key) == klen && !strncmp(p, num_opts[i].key, klen))
				o = &num_opts[i];
		if (o) {
			uint64_t x = 0;
			if (num_opt_value(o, v, vlen, &x, err))
				return -EINVAL;
			set_num(cfg, o->key, x, &lba_shift);
			if ((!strcmp(o->key, "snapshot") || !strcmp(o->key, "readonly")) && x &&
			    cfg->ns[0].backing != GPUNVME_EMU_BACK_FILE)
				return cfg_err(err, "emulator option %s=1 needs an image file as the first namespace, "
						    "not '%.*s' (e.g. /path/disk.img?%s=1)",
					       o->key, (int)base, spec, o->key);
		} else if (is_ns) {
			/* extra namespaces, comma separated */
			if (vlen == 0)
				return cfg_err(err, "emulator option ns= names no namespace (expected ns=NS[,NS...], each "
						    "ram:SIZE, null:SIZE or an image path)");
			const char *s = v;
			const char *vend = v + vlen;
			for (;;) {
				const char *comma = memchr(s, ',', (size_t)(vend - s));
				size_t n = comma ? (size_t)(comma - s) : (size_t)(vend - s);
				if (n == 0)
					return cfg_err(err, "emulator option ns=%.*s: empty namespace between commas "
							    "(expected ns=NS[,NS...], each ram:SIZE, null:SIZE or an image path)",
						       (int)vlen, v);
				if (cfg->nr_ns == GPUNVME_EMU_MAX_NS)
					return cfg_err(err, "emulator option ns: more than %u namespaces (the first and "
							    "at most %u given with ns=)",
						       GPUNVME_EMU_MAX_NS, GPUNVME_EMU_MAX_NS - 1);
				if (parse_ns(&cfg->ns[cfg->nr_ns], s, n, err))
					return -EINVAL;
				cfg->nr_ns++;
				if (!comma)
					break;
				s = comma + 1;
			}
		} else {
			return unknown_opt(p, klen, err);
		}
		p = next;
	}
	for (uint32_t i = 0; i < cfg->nr_ns; i++) {
		struct gpunvme_emu_ns_config *ns = &cfg->ns[i];
		ns->lba_shift = lba_shift;
		if (ns->backing != GPUNVME_EMU_BACK_FILE && (ns->size & ((1ull << lba_shift) - 1)))
			return cfg_err(err, "namespace %u: %llu bytes is not a whole number of %u-byte blocks (lbads=%u): "
					    "give a multiple of %u bytes",
				       i + 1, (unsigned long long)ns->size, 1u << lba_shift, lba_shift,
				       1u << lba_shift);
	}
	return 0;
}

/* ---- where the copies to GPU memory run (emu.h) ---- */

static int copies_set; /* enum gpunvme_emu_copies; read by other threads' queue set-ups */

void gpunvme_emu_set_copies(enum gpunvme_emu_copies where)
{
	__atomic_store_n(&copies_set, where == GPUNVME_EMU_COPIES_PROCESS, __ATOMIC_RELAXED);
}

enum gpunvme_emu_copies gpunvme_emu_copies(void)
{
	const char *m = getenv("GPUNVME_EMU_DMA");
	if (m && !strcmp(m, "process"))
		return GPUNVME_EMU_COPIES_PROCESS;
	if (m && !strcmp(m, "inproc"))
		return GPUNVME_EMU_COPIES_INPROC;
	if (m && *m) {
		static int said;
		if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
			fprintf(stderr, "gpunvme: GPUNVME_EMU_DMA=%s is neither process nor inproc: ignored\n", m);
	}
	return __atomic_load_n(&copies_set, __ATOMIC_RELAXED) ? GPUNVME_EMU_COPIES_PROCESS : GPUNVME_EMU_COPIES_INPROC;
}
