/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A small NVMe/TCP target for the tests (and bench/tcp_gpu_run.sh's
 * loopback target): one subsystem, one RAM namespace, a thread per
 * connection on 127.0.0.1. It speaks the protocol well enough for the
 * host's good paths (ICReq/ICResp with digests, Connect, Property
 * Get/Set, Identify, Set Features, Keep Alive, the discovery log, Read
 * with C2HData, Write in-capsule or by R2T/H2CData, Flush) and, on
 * request, breaks it in one chosen way on the next read, so that each
 * failure the host must refuse can be produced on purpose.
 */
#ifndef GPUNVME_TEST_FAKE_TARGET_H
#define GPUNVME_TEST_FAKE_TARGET_H

#include <stdbool.h>
#include <stdint.h>

#define FT_NQN "nqn.2026-11.io.gpunvme:fake"

enum ft_fault {
	FT_NONE = 0,
	FT_BAD_PLEN,       /* C2HData whose PLEN disagrees with DATAL */
	FT_BAD_HDGST,      /* header digest wrong */
	FT_BAD_DDGST,      /* data digest wrong */
	FT_UNKNOWN_TYPE,   /* a PDU of type 0x0e */
	FT_CID_MISMATCH,   /* CapsuleResp for a command id not in flight */
	FT_SHORT_C2H,      /* half the data, then success */
	FT_CLOSE_MID,      /* half the data, then the connection closes */
	FT_STALL,          /* the read is never answered */
	FT_TERM,           /* C2HTermReq instead of data */
	FT_DATA_OOB,       /* C2HData past the command's buffer */
	FT_BAD_HLEN,       /* CapsuleResp with HLEN 16 */
};

struct ft_config {
	uint64_t ns_bytes;        /* RAM namespace size (default 16 MiB) */
	uint32_t lba_shift;       /* default 9 */
	uint32_t c2h_chunk;       /* bytes per C2HData (default 8 KiB) */
	uint32_t maxh2cdata;      /* ICResp MAXH2CDATA (default 8 KiB) */
	uint8_t cpda;             /* ICResp CPDA (default 0) */
	uint32_t icd;             /* I/O in-capsule data bytes (default 4096) */
	uint32_t nr_queues;       /* I/O queues granted (default 4) */
	bool use_success_flag;    /* last C2HData carries SUCCESS, no CapsuleResp */
	bool refuse_hdgst;        /* ICResp never enables a header digest */
	bool reject_host;         /* Connect fails: host not allowed */
	const char *image;        /* back the namespace with this file (read/write) */
	uint64_t die_after;       /* after serving this many read bytes (0: never) the
				   * target dies: every connection closes mid-transfer
				   * and new ones are closed at once */
};

struct fake_target;

/* Start listening on 127.0.0.1 (port 0: any free port). */
int ft_start(const struct ft_config *cfg, uint16_t port, struct fake_target **out);
uint16_t ft_port(const struct fake_target *t);
/* The fault for the next read command on an I/O queue (one shot). */
void ft_set_fault(struct fake_target *t, enum ft_fault f);
/* Keep Alive commands received so far. */
uint32_t ft_keepalives(const struct fake_target *t);
/* Close every connection now (a target that dies). */
void ft_drop_all(struct fake_target *t);
/* The namespace's bytes (RAM backing). */
uint8_t *ft_ns_data(struct fake_target *t);
void ft_stop(struct fake_target *t);

#endif
