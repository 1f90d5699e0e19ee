/* SPDX-License-Identifier: BSD-2-Clause */
/* Emulator configuration: defaults and the "emu:" device string. */
#include <errno.h>
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

/* One namespace: "ram:SIZE", "null:SIZE" or a file path. */
static int parse_ns(struct gpunvme_emu_ns_config *ns, const char *s, size_t n, const char **err)
{
	if (n >= 4 && !strncmp(s, "ram:", 4)) {
		ns->backing = GPUNVME_EMU_BACK_RAM;
	} else if (n >= 5 && !strncmp(s, "null:", 5)) {
		ns->backing = GPUNVME_EMU_BACK_NULL;
	} else {
		if (n == 0) {
			*err = "empty namespace: expected ram:SIZE, null:SIZE or a file path";
			return -EINVAL;
		}
		if (n >= sizeof(ns->path)) {
			*err = "file path too long";
			return -EINVAL;
		}
		ns->backing = GPUNVME_EMU_BACK_FILE;
		memcpy(ns->path, s, n);
		ns->path[n] = 0;
		ns->size = 0;
		return 0;
	}
	const char *sz = strchr(s, ':') + 1;
	if (parse_size(sz, n - (size_t)(sz - s), &ns->size) || ns->size == 0) {
		*err = "bad namespace size (expected e.g. 512M, 4G)";
		return -EINVAL;
	}
	return 0;
}

static int parse_uint(const char *v, size_t n, uint64_t max, uint64_t *out)
{
	uint64_t x;
	if (parse_size(v, n, &x) || x > max)
		return -EINVAL;
	*out = x;
	return 0;
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
	int have_lbads = 0;

	const char *p = q ? q + 1 : NULL;
	while (p && *p) {
		const char *amp = strchr(p, '&');
		size_t len = amp ? (size_t)(amp - p) : strlen(p);
		const char *eq = memchr(p, '=', len);
		if (!eq) {
			*err = "option without '=' (expected key=value)";
			return -EINVAL;
		}
		size_t klen = (size_t)(eq - p);
		const char *v = eq + 1;
		size_t vlen = len - klen - 1;
		uint64_t x = 0;
		int bad = 0;
#define KEY(k) (klen == sizeof(k) - 1 && !strncmp(p, k, klen))
		if (KEY("lbads")) {
			bad = parse_uint(v, vlen, 12, &x) || (x != 9 && x != 12);
			lba_shift = (uint32_t)x;
			have_lbads = 1;
		} else if (KEY("nsq")) {
			bad = parse_uint(v, vlen, 65535, &x) || x == 0;
			cfg->max_ioq = (uint16_t)x;
		} else if (KEY("mqes")) {
			bad = parse_uint(v, vlen, 65535, &x) || x == 0;
			cfg->mqes = (uint32_t)x;
		} else if (KEY("mdts")) {
			bad = parse_uint(v, vlen, 20, &x);
			cfg->mdts = (uint8_t)x;
		} else if (KEY("dstrd")) {
			bad = parse_uint(v, vlen, 15, &x);
			cfg->dstrd = (uint8_t)x;
		} else if (KEY("workers")) {
			bad = parse_uint(v, vlen, 256, &x) || x == 0;
			cfg->workers = (uint32_t)x;
		} else if (KEY("latency_us")) {
			bad = parse_uint(v, vlen, 10000000, &x);
			cfg->model.latency_us = (uint32_t)x;
		} else if (KEY("read_mbps")) {
			bad = parse_uint(v, vlen, 1000000000, &x);
			cfg->model.read_bps = x * 1000000ull;
		} else if (KEY("write_mbps")) {
			bad = parse_uint(v, vlen, 1000000000, &x);
			cfg->model.write_bps = x * 1000000ull;
		} else if (KEY("iops")) {
			bad = parse_uint(v, vlen, 1000000000, &x);
			cfg->model.iops = x;
		} else if (KEY("ready_ms")) {
			bad = parse_uint(v, vlen, 127500, &x);
			cfg->ready_delay_ms = (uint32_t)x;
		} else if (KEY("idle_us")) {
			bad = parse_uint(v, vlen, 1000000, &x) || x == 0;
			cfg->idle_sleep_max_us = (uint32_t)x;
		} else if (KEY("vwc")) {
			bad = parse_uint(v, vlen, 1, &x);
			cfg->vwc = (uint8_t)x;
		} else if (KEY("snapshot")) {
			bad = parse_uint(v, vlen, 1, &x);
			cfg->ns[0].snapshot = (uint8_t)x;
			if (!bad && x && cfg->ns[0].backing != GPUNVME_EMU_BACK_FILE) {
				*err = "snapshot=1 needs an image file as the namespace";
				return -EINVAL;
			}
		} else if (KEY("ns")) {
			/* extra namespaces, comma separated */
			const char *s = v;
			const char *vend = v + vlen;
			while (s < vend) {
				const char *comma = memchr(s, ',', (size_t)(vend - s));
				size_t n = comma ? (size_t)(comma - s) : (size_t)(vend - s);
				if (cfg->nr_ns == GPUNVME_EMU_MAX_NS) {
					*err = "too many namespaces (at most 16)";
					return -EINVAL;
				}
				if (parse_ns(&cfg->ns[cfg->nr_ns], s, n, err))
					return -EINVAL;
				cfg->nr_ns++;
				s += n + (comma ? 1 : 0);
			}
		} else {
			*err = "unknown option (known: lbads nsq mqes mdts dstrd workers latency_us "
			       "read_mbps write_mbps iops ready_ms idle_us vwc snapshot ns)";
			return -EINVAL;
		}
#undef KEY
		if (bad) {
			*err = "bad option value";
			return -EINVAL;
		}
		p = amp ? amp + 1 : NULL;
	}
	for (uint32_t i = 0; i < cfg->nr_ns; i++)
		cfg->ns[i].lba_shift = have_lbads ? lba_shift : 9;
	return 0;
}
