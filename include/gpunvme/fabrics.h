/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * NVMe over Fabrics (TCP) beyond gpunvme_open("tcp://..."): the discovery
 * service (NVMe-oF 1.1 §5.3). A controller at tcp://HOST:PORT/SUBNQN opens
 * with gpunvme_open like any other; see docs/nvme-tcp.md.
 */
#ifndef GPUNVME_FABRICS_H
#define GPUNVME_FABRICS_H

#include <stdint.h>

#include "gpunvme/gpunvme.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One discovery log page entry (Figure 38), strings without padding. */
struct gpunvme_disc_entry {
	uint8_t trtype;    /* 3: TCP, 1: RDMA, 2: FC */
	uint8_t adrfam;    /* 1: IPv4, 2: IPv6 */
	uint8_t subtype;   /* 1: referral to a discovery service, 2: NVM subsystem, 3: current discovery */
	uint8_t treq;
	uint16_t portid, cntlid, asqsz;
	char trsvcid[33];
	char traddr[257];
	char subnqn[257];
};

/*
 * Read the discovery log page of the discovery controller at uri
 * ("tcp://HOST:PORT", any NQN in it is ignored; options as gpunvme_open).
 * *entries is malloc'd (free() it), *n entries. Returns 0 or -errno
 * (gpunvme_last_error says why).
 */
int gpunvme_discover(const char *uri, const struct gpunvme_opts *opts, struct gpunvme_disc_entry **entries,
		     uint32_t *n);

/* Names of a discovery entry's TRTYPE ("tcp", "rdma", "fc", "loop") and
 * SUBTYPE ("nvm", "discovery", "referral"), NVMe-oF 1.1 Figure 38;
 * "unknown" for other values. */
const char *gpunvme_nvmf_trtype_str(uint8_t trtype);
const char *gpunvme_nvmf_subtype_str(uint8_t subtype);

#ifdef __cplusplus
}
#endif

#endif
