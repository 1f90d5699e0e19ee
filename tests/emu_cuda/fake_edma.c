/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A stand-in for the emulator's DMA process (src/emu_cuda/server), for
 * test_dma_client: the same start (fd 3 the set-up socket, fd 4 the shared
 * memory, a greeting) and the same set-up protocol (dma_proto.h), with no
 * GPU. It opens nothing: a MAP is answered from its table, as the real one
 * answers after cudaIpcOpenMemHandle. What it does is set by the
 * environment the client passes on (posix_spawn with environ):
 *   FAKE_EDMA_LOG        append one line per request ("MAP 0x...", "UNMAP
 *                        0x...", "OPEN n", "CLOSE first n")
 *   FAKE_EDMA_DELAY_MS   wait this long before each MAP's answer
 *   FAKE_EDMA_REFUSE     refuse the MAP of this base address (hex)
 *   FAKE_EDMA_HANG_AT    never answer the request of this number (1 = the
 *                        first after the greeting), nor any after it
 *   FAKE_EDMA_EXIT_AT    exit at the request of this number, unanswered
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "emu_cuda/dma_proto.h"

static unsigned long env_num(const char *name, int base)
{
	const char *v = getenv(name);
	return v && *v ? strtoul(v, NULL, base) : 0;
}

int main(void)
{
	const char *logpath = getenv("FAKE_EDMA_LOG");
	FILE *log = logpath ? fopen(logpath, "a") : NULL;
	const unsigned long delay_ms = env_num("FAKE_EDMA_DELAY_MS", 10);
	const uint64_t refuse = env_num("FAKE_EDMA_REFUSE", 16);
	const unsigned long hang_at = env_num("FAKE_EDMA_HANG_AT", 10), exit_at = env_num("FAKE_EDMA_EXIT_AT", 10);
	struct edma_reply hello;
	memset(&hello, 0, sizeof(hello));
	if (send(3, &hello, sizeof(hello), 0) != (ssize_t)sizeof(hello))
		return 1;
	uint64_t mapped[256];
	unsigned nmapped = 0;
	for (unsigned long nreq = 1;; nreq++) {
		struct edma_ctl c;
		ssize_t n = recv(3, &c, sizeof(c), 0);
		if (n <= 0)
			break;
		struct edma_reply r;
		memset(&r, 0, sizeof(r));
		if (log) {
			if (c.msg == EDMA_MAP || c.msg == EDMA_UNMAP)
				fprintf(log, "%s 0x%llx\n", c.msg == EDMA_MAP ? "MAP" : "UNMAP", (unsigned long long)c.base);
			else
				fprintf(log, "%s %u %u\n", c.msg == EDMA_OPEN ? "OPEN" : "CLOSE", c.first, c.n);
			fflush(log);
		}
		if (nreq == exit_at)
			return 0;
		if (hang_at && nreq >= hang_at)
			continue; /* read, never answered */
		switch (c.msg) {
		case EDMA_MAP: {
			struct timespec t = {(time_t)(delay_ms / 1000), (long)(delay_ms % 1000) * 1000000L};
			nanosleep(&t, NULL);
			bool twice = false;
			for (unsigned i = 0; i < nmapped; i++)
				twice |= mapped[i] == c.base;
			if (c.base == refuse) {
				r.rc = -EINVAL;
				snprintf(r.why, sizeof(r.why), "refused by the test");
			} else if (twice || nmapped == 256) {
				/* the real process: a second open of one handle fails */
				r.rc = -EINVAL;
				snprintf(r.why, sizeof(r.why), "opened twice");
			} else {
				mapped[nmapped++] = c.base;
			}
			break;
		}
		case EDMA_UNMAP: {
			r.rc = -ENOENT;
			for (unsigned i = 0; i < nmapped; i++)
				if (mapped[i] == c.base) {
					mapped[i] = mapped[--nmapped];
					r.rc = 0;
					break;
				}
			break;
		}
		case EDMA_OPEN:
			r.first = 0;
			break;
		case EDMA_CLOSE:
			break;
		default:
			r.rc = -EINVAL;
		}
		if (send(3, &r, sizeof(r), 0) != (ssize_t)sizeof(r))
			break;
	}
	return 0;
}
