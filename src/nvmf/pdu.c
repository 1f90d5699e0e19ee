/* SPDX-License-Identifier: BSD-2-Clause */
/* NVMe/TCP PDU header checks and builders (see pdu.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "nvmf/pdu.h"

uint32_t nvmf_pdu_hlen(uint8_t type)
{
	switch (type) {
	case NVMF_PDU_ICREQ:
	case NVMF_PDU_ICRESP:
		return NVMF_HLEN_IC;
	case NVMF_PDU_H2C_TERM:
	case NVMF_PDU_C2H_TERM:
		return NVMF_HLEN_TERM;
	case NVMF_PDU_CMD:
		return NVMF_HLEN_CMD;
	case NVMF_PDU_RSP:
		return NVMF_HLEN_RSP;
	case NVMF_PDU_H2C_DATA:
	case NVMF_PDU_C2H_DATA:
	case NVMF_PDU_R2T:
		return NVMF_HLEN_DATA;
	default:
		return 0;
	}
}

static int bad(char *why, size_t n, int rc, const char *fmt, unsigned a, unsigned b)
{
	if (why && n)
		snprintf(why, n, fmt, a, b);
	return rc;
}

int nvmf_pdu_parse(const uint8_t *h, size_t have, bool hdgst, bool ddgst, struct nvmf_pdu *o, char *why,
		   size_t whylen)
{
	memset(o, 0, sizeof(*o));
	if (have < 8)
		return bad(why, whylen, -EPROTO, "PDU header of %u bytes (at least 8)%.0u", (unsigned)have, 0);
	o->type = h[0];
	o->flags = h[1];
	o->hlen = h[2];
	o->pdo = h[3];
	o->plen = nvmf_get32(h + 4);
	uint32_t want = nvmf_pdu_hlen(o->type);
	if (!want)
		return bad(why, whylen, -EPROTO, "unknown PDU type 0x%02x%.0u", o->type, 0);
	if (o->hlen != want)
		return bad(why, whylen, -EPROTO, "PDU type 0x%02x with HLEN %u", o->type, o->hlen);
	/* ICReq/ICResp never carry digests (§3.6.2.2: digests start after
	 * the connection is initialized) */
	bool ic = o->type == NVMF_PDU_ICREQ || o->type == NVMF_PDU_ICRESP;
	bool hd = hdgst && !ic;
	uint32_t hdr = want + (hd ? NVMF_DGST : 0);
	if (have < hdr)
		return bad(why, whylen, -EPROTO, "PDU header of %u bytes, %u needed", (unsigned)have, hdr);
	/* §3.6.1: HDGSTF/DDGSTF say whether the digests are present; they
	 * must match what the connection negotiated */
	if (!ic && (!!(o->flags & NVMF_F_HDGST) != hd))
		return bad(why, whylen, -EPROTO, "PDU type 0x%02x: header digest flag %u disagrees with the negotiation",
			   o->type, !!(o->flags & NVMF_F_HDGST));
	if (hd) {
		uint32_t got = nvmf_get32(h + want), calc = gpunvme_crc32c(0, h, want);
		if (got != calc)
			return bad(why, whylen, -EBADMSG, "header digest mismatch (got 0x%08x, computed 0x%08x)", got, calc);
	}
	if (o->plen < hdr)
		return bad(why, whylen, -EPROTO, "PLEN %u shorter than the header (%u)", o->plen, hdr);
	if (o->plen == hdr) {
		/* no data: PDO must be 0 (§3.6.1) and no data digest */
		if (o->pdo != 0)
			return bad(why, whylen, -EPROTO, "PDO %u in a PDU without data (PLEN %u)", o->pdo, o->plen);
		if (o->flags & NVMF_F_DDGST)
			return bad(why, whylen, -EPROTO, "data digest flag in a PDU without data (type 0x%02x)%.0u",
				   o->type, 0);
	} else {
		bool dd = ddgst && (o->type == NVMF_PDU_CMD || o->type == NVMF_PDU_H2C_DATA ||
				    o->type == NVMF_PDU_C2H_DATA);
		if (!!(o->flags & NVMF_F_DDGST) != dd)
			return bad(why, whylen, -EPROTO, "PDU type 0x%02x: data digest flag %u disagrees with the negotiation",
				   o->type, !!(o->flags & NVMF_F_DDGST));
		if (o->pdo < hdr)
			return bad(why, whylen, -EPROTO, "PDO %u inside the header (%u bytes)", o->pdo, hdr);
		uint32_t tail = dd ? NVMF_DGST : 0;
		if (o->plen < (uint32_t)o->pdo + tail + 1)
			return bad(why, whylen, -EPROTO, "PLEN %u leaves no data after PDO %u", o->plen, o->pdo);
		o->ddgst = dd;
		o->pad = o->pdo - hdr;
		o->data_len = o->plen - o->pdo - tail;
	}
	const uint8_t *p = h + 8;
	switch (o->type) {
	case NVMF_PDU_ICREQ:
	case NVMF_PDU_ICRESP:
		if (o->plen != NVMF_HLEN_IC)
			return bad(why, whylen, -EPROTO, "IC PDU with PLEN %u (must be %u)", o->plen, NVMF_HLEN_IC);
		o->pfv = nvmf_get16(p);
		o->cpda = p[2]; /* ICResp CPDA; ICReq HPDA */
		o->dgst = p[3];
		o->maxh2cdata = nvmf_get32(p + 4);
		if (o->pfv != 0)
			return bad(why, whylen, -EPROTO, "PDU format version %u (only 0 is defined)%.0u", o->pfv, 0);
		if (o->cpda > 31)
			return bad(why, whylen, -EPROTO, "data alignment %u (at most 31)%.0u", o->cpda, 0);
		/* ICResp: MAXH2CDATA at least 4096 and dword aligned (§3.6.2.3) */
		if (o->type == NVMF_PDU_ICRESP && (o->maxh2cdata < 4096 || (o->maxh2cdata & 3)))
			return bad(why, whylen, -EPROTO, "MAXH2CDATA %u (at least 4096, a multiple of 4)%.0u",
				   o->maxh2cdata, 0);
		break;
	case NVMF_PDU_H2C_TERM:
	case NVMF_PDU_C2H_TERM:
		o->fes = nvmf_get16(p);
		o->fei = nvmf_get32(p + 2);
		if (o->data_len > NVMF_TERM_DATA_MAX)
			return bad(why, whylen, -EPROTO, "TermReq carrying %u bytes (at most %u)", o->data_len,
				   NVMF_TERM_DATA_MAX);
		break;
	case NVMF_PDU_RSP:
		if (o->data_len)
			return bad(why, whylen, -EPROTO, "CapsuleResp carrying %u bytes of data%.0u", o->data_len, 0);
		break;
	case NVMF_PDU_CMD:
		break;
	case NVMF_PDU_H2C_DATA:
	case NVMF_PDU_C2H_DATA:
	case NVMF_PDU_R2T:
		o->cccid = nvmf_get16(p);
		o->ttag = nvmf_get16(p + 2);
		o->off = nvmf_get32(p + 4);
		o->len = nvmf_get32(p + 8);
		if (o->type == NVMF_PDU_R2T) {
			if (o->data_len)
				return bad(why, whylen, -EPROTO, "R2T carrying %u bytes of data%.0u", o->data_len, 0);
			if (o->len == 0)
				return bad(why, whylen, -EPROTO, "R2T for 0 bytes at offset %u%.0u", o->off, 0);
			break;
		}
		/* DATAL must equal the data the PDU carries (§3.6.2.7) */
		if (o->len != o->data_len || o->len == 0)
			return bad(why, whylen, -EPROTO, "data PDU with DATAL %u but %u bytes of data", o->len, o->data_len);
		if ((uint64_t)o->off + o->len > 0xffffffffull)
			return bad(why, whylen, -EPROTO, "data PDU offset %u + length %u overflows", o->off, o->len);
		if (o->type == NVMF_PDU_C2H_DATA && (o->flags & NVMF_F_SUCCESS) && !(o->flags & NVMF_F_LAST))
			return bad(why, whylen, -EPROTO, "C2HData with SUCCESS but not LAST_PDU (cid %u)%.0u", o->cccid, 0);
		break;
	}
	return 0;
}

uint32_t nvmf_pdu_data_offset(uint32_t hlen, bool hdgst, uint8_t cpda)
{
	uint32_t a = ((uint32_t)cpda + 1) * 4, o = hlen + (hdgst ? NVMF_DGST : 0);
	return (o + a - 1) / a * a;
}

void nvmf_pdu_ch(uint8_t *h, uint8_t type, uint8_t flags, uint8_t hlen, uint8_t pdo, uint32_t plen)
{
	h[0] = type;
	h[1] = flags;
	h[2] = hlen;
	h[3] = pdo;
	nvmf_put32(h + 4, plen);
}

void nvmf_pdu_seal(uint8_t *h, uint32_t hlen)
{
	nvmf_put32(h + hlen, gpunvme_crc32c(0, h, hlen));
}
