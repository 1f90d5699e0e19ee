/* SPDX-License-Identifier: BSD-2-Clause */
/* The transports there are, and which one drives the controller behind an
 * open bus (gpunvme_open asks; ctrl/transport.h). */
#include <stddef.h>

#include "ctrl/transport.h"

static const struct gpunvme_transport *const transports[] = {
	&gpunvme_transport_tcp,
	&gpunvme_transport_pcie, /* last: every bus with a BAR */
};

const struct gpunvme_transport *gpunvme_transport_for(const struct gpunvme_bus *b)
{
	for (size_t i = 0; i < sizeof(transports) / sizeof(transports[0]); i++)
		if (transports[i]->match(b))
			return transports[i];
	return NULL;
}
