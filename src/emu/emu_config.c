/* SPDX-License-Identifier: BSD-2-Clause */
/* Emulator configuration: defaults and the "emu:" device string. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

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

/* Parse an unsigned number with an optional K/M/G/T suffix (powers of 1024). */
static int parse_size(const char *s, size_t n, uint64_t *out)
{
	char buf[64];
	if (n == 0 || n >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, n);
	buf[n] = 0;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(buf, &end, 0);
	if (errno || end == buf || buf[0] == '-')
		return -EINVAL;
	unsigned shift = 0;
	switch (*end) {
	case 0: break;
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	default: return -EINVAL;
	}
	if (*end == 'i' || *end == 'B')
		end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
	if (*end)
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = (uint64_t)v << shift;
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
	if (n >= 4 && !strncmp(s, "ram:", 4)) {
		ns->backing = GPUNVME_EMU_BACK_RAM;
	} else if (n >= 5 && !strncmp(s, "null:", 5)) {
		ns->backing = GPUNVME_EMU_BACK_NULL;
	} else {
		if (n == 0)
			return cfg_err(err, "empty namespace: expected ram:SIZE, null:SIZE or an image file path");
		if (n >= sizeof(ns->path))
			return cfg_err(err, "namespace image path of %zu bytes: at most %zu", n, sizeof(ns->path) - 1);
		ns->backing = GPUNVME_EMU_BACK_FILE;
		memcpy(ns->path, s, n);
		ns->path[n] = 0;
		ns->size = 0;
		return 0;
	}
	const char *sz = strchr(s, ':') + 1;
	size_t szn = n - (size_t)(sz - s);
	if (memchr(sz, '?', szn))
		return cfg_err(err, "namespace '%.*s': options do not go inside a namespace; they follow the first '?' "
				    "joined by '&' and apply to every namespace (e.g. ram:1G?lbads=12&ns=ram:1M)",
			       (int)n, s);
	if (parse_size(sz, szn, &ns->size) || ns->size == 0)
		return cfg_err(err, "namespace '%.*s': bad size '%.*s' (expected a number of bytes with an optional "
				    "K/M/G/T suffix, e.g. 512M, 4G)",
			       (int)n, s, (int)szn, sz);
	return 0;
}

/* Numeric options: name, allowed range, what the value means. */
struct num_opt {
	const char *key;
	uint64_t min, max;
	const char *what;
};

static const struct num_opt num_opts[] = {
	{ "lbads", 9, 12, "9 (512-byte blocks) or 12 (4 KiB blocks)" },
	{ "nsq", 1, 65535, "I/O queue pairs the controller grants" },
	{ "mqes", 1, 65535, "CAP.MQES, entries per queue minus one" },
	{ "mdts", 0, 20, "MDTS, 2^n pages per command; 0 = no limit" },
	{ "dstrd", 0, 15, "CAP.DSTRD, doorbell stride 4 << n bytes" },
	{ "workers", 1, 256, "emulator threads serving I/O queues" },
	{ "latency_us", 0, 10000000, "modeled command latency in microseconds" },
	{ "read_mbps", 0, 1000000000, "modeled read bandwidth in MB/s; 0 = unlimited" },
	{ "write_mbps", 0, 1000000000, "modeled write bandwidth in MB/s; 0 = unlimited" },
	{ "iops", 0, 1000000000, "modeled commands per second; 0 = unlimited" },
	/* CSTS.RDY must follow CC.EN within CAP.TO (20 x 500 ms) */
	{ "ready_ms", 0, 10000, "delay before CSTS.RDY, within CAP.TO of 10 s" },
	{ "idle_us", 1, 1000000, "longest idle sleep of a worker in microseconds" },
	{ "vwc", 0, 1, "volatile write cache present: 0 or 1" },
	{ "snapshot", 0, 1, "1 = serve the image from a RAM copy, never written back" },
};

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
	const char *q = strchr(spec, '?');
	size_t base = q ? (size_t)(q - spec) : strlen(spec);
	if (parse_ns(&cfg->ns[0], spec, base, err))
		return -EINVAL;
	uint32_t lba_shift = 9;

	const char *p = q ? q + 1 : NULL;
	while (p && *p) {
		const char *amp = strchr(p, '&');
		size_t len = amp ? (size_t)(amp - p) : strlen(p);
		const char *eq = memchr(p, '=', len);
		if (!eq)
			return cfg_err(err, "emulator option '%.*s' has no value (expected key=value, joined by '&')",
				       (int)len, p);
		size_t klen = (size_t)(eq - p);
		const char *v = eq + 1;
		size_t vlen = len - klen - 1;
		const struct num_opt *o = NULL;
		for (size_t i = 0; i < sizeof(num_opts) / sizeof(num_opts[0]); i++)
			if (strlen(num_opts[i].key) == klen && !strncmp(p, num_opts[i].key, klen))
				o = &num_opts[i];
		if (o) {
			uint64_t x = 0;
			int bad = parse_size(v, vlen, &x) || x < o->min || x > o->max;
			if (!bad && !strcmp(o->key, "lbads") && x != 9 && x != 12)
				bad = 1;
			if (bad && !strcmp(o->key, "lbads"))
				return cfg_err(err, "emulator option lbads: '%.*s' is not allowed: %s", (int)vlen, v,
					       o->what);
			if (bad)
				return cfg_err(err, "emulator option %.*s: '%.*s' is not allowed: %s (%llu..%llu)",
					       (int)klen, p, (int)vlen, v, o->what, (unsigned long long)o->min,
					       (unsigned long long)o->max);
			set_num(cfg, o->key, x, &lba_shift);
			if (!strcmp(o->key, "snapshot") && x && cfg->ns[0].backing != GPUNVME_EMU_BACK_FILE)
				return cfg_err(err, "snapshot=1 needs an image file as the first namespace");
		} else if (klen == 2 && !strncmp(p, "ns", 2)) {
			/* extra namespaces, comma separated */
			const char *s = v;
			const char *vend = v + vlen;
			while (s < vend) {
				const char *comma = memchr(s, ',', (size_t)(vend - s));
				size_t n = comma ? (size_t)(comma - s) : (size_t)(vend - s);
				if (cfg->nr_ns == GPUNVME_EMU_MAX_NS)
					return cfg_err(err, "too many namespaces: at most %u", GPUNVME_EMU_MAX_NS);
				if (parse_ns(&cfg->ns[cfg->nr_ns], s, n, err))
					return -EINVAL;
				cfg->nr_ns++;
				s += n + (comma ? 1 : 0);
			}
		} else {
			return cfg_err(err, "unknown emulator option '%.*s' (known: lbads nsq mqes mdts dstrd workers "
					    "latency_us read_mbps write_mbps iops ready_ms idle_us vwc snapshot ns)",
				       (int)klen, p);
		}
		p = amp ? amp + 1 : NULL;
	}
	for (uint32_t i = 0; i < cfg->nr_ns; i++) {
		struct gpunvme_emu_ns_config *ns = &cfg->ns[i];
		ns->lba_shift = lba_shift;
		if (ns->backing != GPUNVME_EMU_BACK_FILE && (ns->size & ((1ull << lba_shift) - 1)))
			return cfg_err(err, "namespace %u: %llu bytes is not a whole number of %u-byte blocks", i + 1,
				       (unsigned long long)ns->size, 1u << lba_shift);
	}
	return 0;
}
