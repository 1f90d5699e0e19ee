/* SPDX-License-Identifier: BSD-2-Clause */
/* URI dispatch to a bus. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "gpunvme/emu.h"
#include "gpunvme/md.h"
#include "gpunvme/pci.h"
#include "bus/bus.h"

/* ---- the URI grammar: one place (the CLI, Python, md members use it) ---- */

/* DDDD:BB:DD.F or BB:DD.F, hex, device <= 1f, function <= 7 (PCI 3.0
 * §2.2.6: 32 devices of 8 functions per bus). */
static bool bdf_ok(const char *s)
{
	unsigned dom = 0, bus, dev, fn;
	int n = 0;
	size_t len = strlen(s);
	for (size_t i = 0; i < len; i++)
		if (!isxdigit((unsigned char)s[i]) && s[i] != ':' && s[i] != '.')
			return false;
	if (sscanf(s, "%4x:%2x:%2x.%1x%n", &dom, &bus, &dev, &fn, &n) == 4 && (size_t)n == len && len == 12) {
		/* full form */
	} else if (sscanf(s, "%2x:%2x.%1x%n", &bus, &dev, &fn, &n) == 3 && (size_t)n == len && len == 7) {
		/* short form */
	} else {
		return false;
	}
	return dev <= 0x1f && fn <= 7;
}

int gpunvme_uri_check(const char *uri)
{
	if (!uri || !*uri)
		return gpunvme_set_error(-EINVAL, "empty device URI (expected emu:SPEC, vfio:BDF, uio:BDF, kmod:BDF, "
						  "pci:BDF, md:URI;URI... or tcp://HOST:PORT/SUBNQN)");
	if (gpunvme_md_uri(uri))
		return gpunvme_md_uri_check(uri); /* which checks every member here */
	/* NVMe/TCP: the transport checks the rest and names what is wrong */
	if (!strncmp(uri, "tcp:", 4)) {
		if (strncmp(uri, "tcp://", 6) || !uri[6])
			return gpunvme_set_error(-EINVAL, "'%s': expected tcp://HOST[:PORT]/SUBNQN (subsystems: gpunvme "
							  "discover tcp://HOST)",
						 uri);
		return 0;
	}
	const char *colon = strchr(uri, ':');
	if (!colon)
		return gpunvme_set_error(-EINVAL, "'%s' is not a device URI: expected emu:SPEC, vfio:BDF, uio:BDF, "
						  "pci:BDF or md:URI;URI... (e.g. emu:ram:64M, vfio:0000:01:00.0)",
					 uri);
	size_t sl = (size_t)(colon - uri);
	const char *rest = colon + 1;
	if (sl == 3 && !strncmp(uri, "emu", 3)) {
		if (!*rest)
			return gpunvme_set_error(-EINVAL, "missing emulator spec after 'emu:' (e.g. emu:ram:64M, "
							  "emu:/path/disk.img)");
		struct gpunvme_emu_config cfg;
		const char *err = NULL;
		if (gpunvme_emu_config_parse(&cfg, rest, &err))
			return gpunvme_set_error(-EINVAL, "bad emulator spec '%s': %s", rest, err ? err : "invalid");
		return 0;
	}
	if ((sl == 4 && !strncmp(uri, "vfio", 4)) || (sl == 3 && !strncmp(uri, "uio", 3)) ||
	    (sl == 4 && !strncmp(uri, "kmod", 4)) || (sl == 3 && !strncmp(uri, "pci", 3))) {
		if (!*rest)
			return gpunvme_set_error(-EINVAL, "missing PCI address after '%.*s:' (expected DDDD:BB:DD.F, "
							  "e.g. %.*s:0000:01:00.0; 'gpunvme list' shows them)",
						 (int)sl, uri, (int)sl, uri);
		if (!bdf_ok(rest))
			return gpunvme_set_error(-EINVAL, "malformed PCI address '%s' (expected DDDD:BB:DD.F in hex, "
							  "e.g. 0000:01:00.0)",
						 rest);
		return 0;
	}
	return gpunvme_set_error(-EINVAL, "unknown bus '%.*s' in '%s' (expected emu:, vfio:, uio:, kmod:, pci:, md: or "
					  "tcp://)",
				 (int)sl, uri, uri);
}

const char *gpunvme_pci_uri_scheme(const char *driver)
{
	if (!driver)
		return NULL;
	if (!strcmp(driver, "vfio-pci"))
		return gpunvme_bus_vfio.name;
	if (!strcmp(driver, "uio_pci_generic"))
		return gpunvme_bus_uio.name;
	return NULL;
}

int gpunvme_bus_open(const char *uri, const struct gpunvme_opts *opts, struct gpunvme_bus *b)
{
	memset(b, 0, sizeof(*b));
	int rc = gpunvme_uri_check(uri);
	if (rc)
		return rc;
	if (gpunvme_md_uri(uri))
		return gpunvme_set_error(-EINVAL, "'%s' is an md array, not one controller: open it with "
						  "gpunvme_volume_open (or gpunvme_md_open)",
					 uri);
	const char *colon = strchr(uri, ':');
	size_t n = (size_t)(colon - uri);
	const char *addr = colon + 1;
	const struct gpunvme_bus_ops *ops = NULL;
	if (n == 3 && !strncmp(uri, "emu", 3)) {
		ops = &gpunvme_bus_emu;
	} else if (n == 4 && !strncmp(uri, "vfio", 4)) {
		ops = &gpunvme_bus_vfio;
	} else if (n == 3 && !strncmp(uri, "uio", 3)) {
		ops = &gpunvme_bus_uio;
	} else if (n == 4 && !strncmp(uri, "kmod", 4)) {
		ops = &gpunvme_bus_kmod;
	} else if (n == 3 && !strncmp(uri, "tcp", 3)) {
		ops = &gpunvme_bus_tcp;
	} else if (n == 3 && !strncmp(uri, "pci", 3)) {
		/* the bound driver decides: vfio-pci -> VFIO, gpunvme -> the
		 * kernel module, otherwise UIO */
		char bdf[13], drv[64];
		rc = gpunvme_pci_parse_bdf(addr, bdf);
		if (rc)
			return gpunvme_set_error(rc, "%s: not a PCI address (expected DDDD:BB:DD.F)", uri);
		rc = gpunvme_pci_driver(bdf, drv, sizeof(drv));
		if (rc)
			return gpunvme_set_error(rc, "%s: no such PCI device (see: lspci -D | grep -i nvme)", uri);
		if (!strcmp(drv, "vfio-pci"))
			ops = &gpunvme_bus_vfio;
		else if (!strcmp(drv, "gpunvme"))
			ops = &gpunvme_bus_kmod;
		else if (!strcmp(drv, "uio_pci_generic") || !drv[0])
			ops = &gpunvme_bus_uio;
		else
			return gpunvme_set_error(-EBUSY, "%s: bound to %s; bind it to vfio-pci first: scripts/vfio-bind.sh %s",
						 uri, drv, bdf);
	} else {
		return gpunvme_set_error(-EINVAL, "%.*s: unknown bus (known: emu, vfio, uio, kmod, pci, tcp)", (int)n, uri);
	}
	if (!*addr)
		return gpunvme_set_error(-EINVAL, "%s: missing device after '%.*s:'", uri, (int)n, uri);
	b->ops = ops;
	snprintf(b->addr, sizeof(b->addr), "%s", addr);
	return ops->open(b, addr, opts);
}

void gpunvme_bus_close(struct gpunvme_bus *b)
{
	if (b->ops)
		b->ops->close(b);
	b->ops = NULL;
}
