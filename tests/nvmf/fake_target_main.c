/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme-fake-target [--port N] [--image FILE] [--size BYTES]
 * [--die-after BYTES]: the test
 * suite's NVMe/TCP target as a program (subsystem FT_NQN on 127.0.0.1),
 * for the CLI tests and the GPU-over-TCP run on a machine without Linux's
 * nvmet. Prints "port N" once listening; runs until stdin closes or it is
 * killed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_target.h"

int main(int argc, char **argv)
{
	struct ft_config cfg = { 0 };
	unsigned port = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--port") && i + 1 < argc)
			port = (unsigned)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--image") && i + 1 < argc)
			cfg.image = argv[++i];
		else if (!strcmp(argv[i], "--die-after") && i + 1 < argc)
			cfg.die_after = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--size") && i + 1 < argc)
			cfg.ns_bytes = strtoull(argv[++i], NULL, 0);
		else {
			fprintf(stderr, "usage: %s [--port N] [--image FILE] [--size BYTES] [--die-after BYTES]\n", argv[0]);
			return 2;
		}
	}
	if (port > 65535) {
		fprintf(stderr, "port %u: at most 65535\n", port);
		return 2;
	}
	struct fake_target *t;
	int rc = ft_start(&cfg, (uint16_t)port, &t);
	if (rc) {
		fprintf(stderr, "cannot start: %s\n", strerror(-rc));
		return 1;
	}
	printf("port %u nqn %s\n", ft_port(t), FT_NQN);
	fflush(stdout);
	char buf[64];
	while (read(0, buf, sizeof(buf)) > 0)
		;
	ft_stop(t);
	return 0;
}
