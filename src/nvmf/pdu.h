/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * NVMe/TCP PDUs (NVMe/TCP Transport Specification 1.0, §3.6): wire layout,
 * builders, and the one header check every received PDU goes through
 * (host and the test suite's fake target alike; fuzzed by fuzz_pdu).
 * Pure functions over byte buffers: no sockets, no allocation.
 *
 * Every PDU starts with the 8-byte common header (§3.6.1): type, flags,
 * HLEN (header length), PDO (where the data starts), PLEN (the whole PDU,
 * digests and padding included). A header digest (4 bytes CRC32C) follows
 * the HLEN bytes when negotiated; data follows at PDO; a data digest
 * (CRC32C of the data alone) ends the PDU when negotiated.
 */
#ifndef GPUNVME_NVMF_PDU_H
#define GPUNVME_NVMF_PDU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
	NVMF_PDU_ICREQ = 0x00,
	NVMF_PDU_ICRESP = 0x01,
	NVMF_PDU_H2C_TERM = 0x02,
	NVMF_PDU_C2H_TERM = 0x03,
	NVMF_PDU_CMD = 0x04,
	NVMF_PDU_RSP = 0x05,
	NVMF_PDU_H2C_DATA = 0x06,
	NVMF_PDU_C2H_DATA = 0x07,
	NVMF_PDU_R2T = 0x09,
};

/* common header flags (§3.6.1, Figure 17; data PDUs §3.6.2.7-8) */
#define NVMF_F_HDGST 0x01u
#define NVMF_F_DDGST 0x02u
#define NVMF_F_LAST 0x04u    /* H2CData / C2HData: last PDU of the transfer */
#define NVMF_F_SUCCESS 0x08u /* C2HData: command done, no CapsuleResp follows */

/* header lengths fixed by the spec per type */
#define NVMF_HLEN_IC 128u
#define NVMF_HLEN_CMD 72u   /* 8 + a 64-byte SQE */
#define NVMF_HLEN_RSP 24u   /* 8 + a 16-byte CQE */
#define NVMF_HLEN_DATA 24u  /* H2CData, C2HData, R2T */
#define NVMF_HLEN_TERM 24u
#define NVMF_DGST 4u
/* Longest header + digest we ever hold (ICReq/ICResp). */
#define NVMF_HDR_MAX (NVMF_HLEN_IC + NVMF_DGST)
/* The data of a TermReq is the offending PDU header, at most 152 bytes
 * (§3.6.2.4); nothing else we accept carries data in a header-only PDU. */
#define NVMF_TERM_DATA_MAX 152u

/* TermReq fatal error status (§3.6.2.4, Figure 25) */
enum {
	NVMF_FES_INVALID_HEADER = 0x01,
	NVMF_FES_PDU_SEQ = 0x02,
	NVMF_FES_HDGST = 0x03,
	NVMF_FES_DATA_RANGE = 0x04,
	NVMF_FES_R2T_LIMIT = 0x05,
	NVMF_FES_UNSUPPORTED = 0x06,
};

/* What a received header says, once checked. */
struct nvmf_pdu {
	uint8_t type, flags, hlen, pdo;
	uint32_t plen;
	uint32_t data_len;    /* bytes of data (0 when none) */
	bool ddgst;           /* a data digest follows the data */
	uint32_t pad;         /* bytes between the header (+ digest) and PDO */
	/* data PDUs and R2T */
	uint16_t cccid, ttag;
	uint32_t off, len;    /* DATAO/DATAL or R2TO/R2TL */
	/* ICResp */
	uint16_t pfv;
	uint8_t cpda, dgst;
	uint32_t maxh2cdata;
	/* TermReq */
	uint16_t fes;
	uint32_t fei;
};

static inline uint16_t nvmf_get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t nvmf_get32(const uint8_t *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline void nvmf_put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void nvmf_put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

/* The header length a type must have, 0 for an unknown type. */
uint32_t nvmf_pdu_hlen(uint8_t type);

/*
 * Check a received header: hdr holds hlen bytes (+ 4 when hdgst) as read
 * from the wire, the first 8 of which were already used to find hlen.
 * hdgst/ddgst: what the connection negotiated (an ICReq/ICResp has
 * neither). Fills *out. Returns 0; -EPROTO for a malformed header (type,
 * lengths, offsets, flags that disagree with the negotiation) or -EBADMSG
 * for a header digest mismatch, with a one-line reason in why.
 */
int nvmf_pdu_parse(const uint8_t *hdr, size_t have, bool hdgst, bool ddgst, struct nvmf_pdu *out, char *why,
		   size_t whylen);

/* Bytes of the header, header digest and padding before data at PDO for
 * a PDU we send: PDO aligned to (cpda + 1) * 4 bytes (§3.6.2.1 CPDA). */
uint32_t nvmf_pdu_data_offset(uint32_t hlen, bool hdgst, uint8_t cpda);

/* Fill the common header; the header digest, when on, is set by
 * nvmf_pdu_seal once the header is complete. */
void nvmf_pdu_ch(uint8_t *h, uint8_t type, uint8_t flags, uint8_t hlen, uint8_t pdo, uint32_t plen);
/* Write the header digest (CRC32C of the hlen header bytes) after them. */
void nvmf_pdu_seal(uint8_t *h, uint32_t hlen);

#endif
