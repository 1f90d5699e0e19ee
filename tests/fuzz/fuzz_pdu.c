/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * NVMe/TCP receive path (src/nvmf): the input is what a target sends.
 * Byte 0 picks the negotiation (header digest, data digest, CPDA); the
 * rest arrives on a socket pair at a host queue with a read (cid 0, 2 KiB)
 * and a write waiting for R2T (cid 1, 3 KiB) in flight. The queue must
 * end either with completions it can account for or dead with a reason,
 * never writing outside the two buffers (ASan) or hanging (-timeout). The
 * header check alone also sees the raw input, as an ICResp would be.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nvmf/nvmf.h"
#include "nvmf/pdu.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct nvmf_pdu p;
	char why[160];
	nvmf_pdu_parse(data, size, false, false, &p, why, sizeof(why));
	nvmf_pdu_parse(data, size, true, true, &p, why, sizeof(why));
	if (size < 1)
		return 0;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 0;
	uint8_t mode = data[0];
	struct nvmf_queue *q;
	if (nvmf_queue_from_fd(sv[0], mode & 1, mode & 2, (uint8_t)((mode >> 2) & 7), 4096, 8, &q)) {
		close(sv[1]);
		return 0;
	}
	/* exact-size heap buffers: any byte landed outside is an ASan report */
	uint8_t *rbuf = malloc(2048), *wbuf = malloc(3072);
	memset(wbuf, 0x5a, 3072);
	nvmf_queue_track(q, 0, rbuf, 2048, NVMF_DIR_C2H);
	nvmf_queue_track(q, 1, wbuf, 3072, NVMF_DIR_H2C);
	/* the input fits the socket buffer (max_len 4096); then EOF */
	size_t off = 1;
	while (off < size) {
		ssize_t w = write(sv[1], data + off, size - off);
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	shutdown(sv[1], SHUT_WR);
	struct nvmf_cpl c[8];
	for (int i = 0; i < 64; i++) {
		int n = nvmf_queue_reap(q, c, 8, 0);
		if (n < 0)
			break; /* dead, with a reason */
		for (int k = 0; k < n; k++)
			if (c[k].cqe.cid > 1)
				abort(); /* a completion for a command never in flight */
	}
	nvmf_queue_close(q);
	close(sv[1]);
	free(rbuf);
	free(wbuf);
	return 0;
}
