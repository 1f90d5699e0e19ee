/* SPDX-License-Identifier: BSD-2-Clause */
/* gpunvme discover tcp://HOST[:PORT]: the discovery log page of an NVMe/TCP
 * target (NVMe-oF 1.1 §5.3), one line (or JSON object) per entry. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpunvme/fabrics.h"
#include "util.h"

static void help(void)
{
	printf("usage: gpunvme discover tcp://HOST[:PORT][?opts] [--json]\n"
	       "\n"
	       "Reads the discovery log page of the NVMe/TCP target at HOST (port 4420 by default):\n"
	       "one line per subsystem it offers, with the URI to open it by.\n"
	       "Options in the URI as for any tcp:// device: hostnqn=, hostid=, timeout=MS.\n");
}

static const char *trtype(uint8_t t)
{
	switch (t) {
	case 1: return "rdma";
	case 2: return "fc";
	case 3: return "tcp";
	case 254: return "loop";
	default: return "unknown";
	}
}

static const char *subtype(uint8_t t)
{
	switch (t) {
	case 1: return "referral";
	case 2: return "nvm";
	case 3: return "discovery";
	default: return "unknown";
	}
}

int cmd_discover(int argc, char **argv)
{
	static const struct option lo[] = {
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{0, 0, 0, 0},
	};
	bool json = false;
	int c;
	while ((c = cli_getopt(argc, argv, "jh", lo)) != -1) {
		switch (c) {
		case 'j': json = true; break;
		case 'h': help(); return 0;
		default: return EXIT_USAGE;
		}
	}
	const char *uri = cli_one_uri(argc, argv);
	if (!uri)
		return EXIT_USAGE;
	if (strncmp(uri, "tcp://", 6))
		return cli_usage_err("discover: '%s' is not a tcp://HOST[:PORT] address", uri);
	struct gpunvme_disc_entry *e = NULL;
	uint32_t n = 0;
	int rc = gpunvme_discover(uri, NULL, &e, &n);
	if (rc)
		return cli_lib_err(rc, "discover %s", uri);
	if (json)
		printf("[");
	for (uint32_t i = 0; i < n; i++) {
		bool v6 = e[i].adrfam == 2;
		if (json)
			printf("%s\n  {\"trtype\": \"%s\", \"subtype\": \"%s\", \"traddr\": \"%s\", \"trsvcid\": \"%s\", "
			       "\"subnqn\": \"%s\", \"portid\": %u}",
			       i ? "," : "", trtype(e[i].trtype), subtype(e[i].subtype), e[i].traddr, e[i].trsvcid,
			       e[i].subnqn, e[i].portid);
		else
			printf("%-9s %-5s %s%s%s%s:%s/%s\n", subtype(e[i].subtype), trtype(e[i].trtype),
			       e[i].trtype == 3 ? "tcp://" : "", v6 ? "[" : "", e[i].traddr, v6 ? "]" : "",
			       e[i].trsvcid, e[i].subnqn);
	}
	if (json)
		printf("%s]\n", n ? "\n" : "");
	free(e);
	return 0;
}
