/* SPDX-License-Identifier: BSD-2-Clause */
/* URI dispatch to a bus. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "bus/bus.h"

int gpunvme_bus_open(const char *uri, const struct gpunvme_opts *opts, struct gpunvme_bus *b)
{
	memset(b, 0, sizeof(*b));
	if (!uri || !*uri)
		return gpunvme_set_error(-EINVAL, "no device URI (expected emu:..., vfio:BDF, uio:BDF, kmod:BDF, pci:BDF or tcp://HOST:PORT/NQN)");
	const char *colon = strchr(uri, ':');
	if (!colon)
		return gpunvme_set_error(-EINVAL, "%s: not a device URI (expected emu:..., vfio:BDF, uio:BDF, kmod:BDF, pci:BDF or tcp://HOST:PORT/NQN)",
					 uri);
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
		int rc = gpunvme_pci_parse_bdf(addr, bdf);
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
