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
			       i ? "," : "", gpunvme_nvmf_trtype_str(e[i].trtype), gpunvme_nvmf_subtype_str(e[i].subtype),
			       e[i].traddr, e[i].trsvcid, e[i].subnqn, e[i].portid);
		else
			printf("%-9s %-5s %s%s%s%s:%s/%s\n", gpunvme_nvmf_subtype_str(e[i].subtype),
			       gpunvme_nvmf_trtype_str(e[i].trtype), e[i].trtype == 3 ? "tcp://" : "", v6 ? "[" : "",
			       e[i].traddr, v6 ? "]" : "", e[i].trsvcid, e[i].subnqn);
	}
	if (json)
		printf("%s]\n", n ? "\n" : "");
	free(e);
	return 0;
}
