// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * Human-readable names for completion status, opcodes, QP states and
 * Terminate errors (RFC 5040 section 7.2, RFC 5041 section 7.2,
 * RFC 5044 section 8 and RFC 6581 section 7; IANA "RDDP" registries).
 */
#include <stddef.h>
#include "kw_internal.h"

KW_EXPORT const char *kw_wc_status_str(unsigned status)
{
	static const char *const names[] = {
		[KIWARP_WC_SUCCESS] = "success",
		[KIWARP_WC_LOC_LEN_ERR] = "local length error",
		[KIWARP_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[KIWARP_WC_LOC_PROT_ERR] = "local protection error",
		[KIWARP_WC_WR_FLUSH_ERR] = "work request flushed",
		[KIWARP_WC_REM_ACCESS_ERR] = "remote access error",
		[KIWARP_WC_REM_OP_ERR] = "remote operation error",
		[KIWARP_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[KIWARP_WC_FATAL_ERR] = "fatal error (connection lost)",
		[KIWARP_WC_BAD_RESP_ERR] = "bad response error",
	};

	if (status < sizeof(names) / sizeof(names[0]) && names[status])
		return names[status];
	return "unknown status";
}

KW_EXPORT const char *kw_wr_opcode_str(unsigned opcode)
{
	static const char *const names[] = {
		[KIWARP_WR_SEND] = "SEND",
		[KIWARP_WR_SEND_SE] = "SEND_SE",
		[KIWARP_WR_SEND_INV] = "SEND_INV",
		[KIWARP_WR_SEND_SE_INV] = "SEND_SE_INV",
		[KIWARP_WR_RDMA_WRITE] = "RDMA_WRITE",
		[KIWARP_WR_RDMA_READ] = "RDMA_READ",
		[KIWARP_WR_LOCAL_INV] = "LOCAL_INV",
		[KIWARP_WR_RECV] = "RECV",
	};

	if (opcode < sizeof(names) / sizeof(names[0]) && names[opcode])
		return names[opcode];
	return "UNKNOWN";
}

KW_EXPORT const char *kw_qp_state_str(unsigned state)
{
	static const char *const names[] = {
		[KIWARP_QPS_IDLE] = "IDLE",
		[KIWARP_QPS_MPA_REQ_RCVD] = "MPA_REQ_RCVD",
		[KIWARP_QPS_RTS] = "RTS",
		[KIWARP_QPS_CLOSING] = "CLOSING",
		[KIWARP_QPS_TERMINATE] = "TERMINATE",
		[KIWARP_QPS_ERROR] = "ERROR",
	};

	if (state < sizeof(names) / sizeof(names[0]) && names[state])
		return names[state];
	return "UNKNOWN";
}

#define ANY 0x100	/* any error code */

static const struct {
	unsigned short layer, etype, ecode;
	const char *str;
} terms[] = {
	/* RFC 5040, layer 0x0: RDMAP */
	{ 0, 0x0, ANY,  "RDMAP local catastrophic error" },
	{ 0, 0x1, 0x00, "RDMAP remote protection error: invalid STag" },
	{ 0, 0x1, 0x01, "RDMAP remote protection error: base or bounds violation" },
	{ 0, 0x1, 0x02, "RDMAP remote protection error: access rights violation" },
	{ 0, 0x1, 0x03, "RDMAP remote protection error: STag not associated with RDMAP stream" },
	{ 0, 0x1, 0x04, "RDMAP remote protection error: tagged offset wrap" },
	{ 0, 0x1, 0x09, "RDMAP remote protection error: STag cannot be invalidated" },
	{ 0, 0x1, 0xff, "RDMAP remote protection error: unspecified" },
	{ 0, 0x2, 0x05, "RDMAP remote operation error: invalid RDMAP version" },
	{ 0, 0x2, 0x06, "RDMAP remote operation error: unexpected opcode" },
	{ 0, 0x2, 0x07, "RDMAP remote operation error: catastrophic error, localized to RDMAP stream" },
	{ 0, 0x2, 0x08, "RDMAP remote operation error: catastrophic error, global" },
	{ 0, 0x2, 0x09, "RDMAP remote operation error: STag cannot be invalidated" },
	{ 0, 0x2, 0xff, "RDMAP remote operation error: unspecified" },
	{ 0, 0x1, ANY,  "RDMAP remote protection error" },
	{ 0, 0x2, ANY,  "RDMAP remote operation error" },
	/* RFC 5041, layer 0x1: DDP */
	{ 1, 0x0, ANY,  "DDP local catastrophic error" },
	{ 1, 0x1, 0x00, "DDP tagged buffer error: invalid STag" },
	{ 1, 0x1, 0x01, "DDP tagged buffer error: base or bounds violation" },
	{ 1, 0x1, 0x02, "DDP tagged buffer error: STag not associated with DDP stream" },
	{ 1, 0x1, 0x03, "DDP tagged buffer error: tagged offset wrap" },
	{ 1, 0x1, 0x04, "DDP tagged buffer error: invalid DDP version" },
	{ 1, 0x2, 0x01, "DDP untagged buffer error: invalid queue number" },
	{ 1, 0x2, 0x02, "DDP untagged buffer error: invalid MSN, no buffer available" },
	{ 1, 0x2, 0x03, "DDP untagged buffer error: invalid MSN, MSN range not valid" },
	{ 1, 0x2, 0x04, "DDP untagged buffer error: invalid message offset" },
	{ 1, 0x2, 0x05, "DDP untagged buffer error: message too long for available buffer" },
	{ 1, 0x2, 0x06, "DDP untagged buffer error: invalid DDP version" },
	{ 1, 0x1, ANY,  "DDP tagged buffer error" },
	{ 1, 0x2, ANY,  "DDP untagged buffer error" },
	/* RFC 5044 section 8 + RFC 6581, layer 0x2: LLP (MPA) */
	{ 2, 0x0, 0x01, "MPA error: TCP connection closed, terminated or lost" },
	{ 2, 0x0, 0x02, "MPA error: CRC error" },
	{ 2, 0x0, 0x03, "MPA error: marker and ULPDU pointers not consistent" },
	{ 2, 0x0, 0x04, "MPA error: invalid MPA request or reply frame" },
	{ 2, 0x0, 0x05, "MPA error: local catastrophic" },
	{ 2, 0x0, 0x06, "MPA error: insufficient IRD resources" },
	{ 2, 0x0, 0x07, "MPA error: no matching RTR model" },
	{ 2, 0x0, ANY,  "MPA error" },
};

KW_EXPORT const char *kw_term_str(unsigned layer, unsigned etype,
				  unsigned ecode)
{
	size_t i;

	/* Exact match first, then the "any code" row of the error type. */
	for (i = 0; i < sizeof(terms) / sizeof(terms[0]); i++)
		if (terms[i].layer == layer && terms[i].etype == etype &&
		    terms[i].ecode == ecode)
			return terms[i].str;
	for (i = 0; i < sizeof(terms) / sizeof(terms[0]); i++)
		if (terms[i].layer == layer && terms[i].etype == etype &&
		    terms[i].ecode == ANY)
			return terms[i].str;
	switch (layer) {
	case KIWARP_TERM_LAYER_RDMAP:
		return "RDMAP error (unknown type)";
	case KIWARP_TERM_LAYER_DDP:
		return "DDP error (unknown type)";
	case KIWARP_TERM_LAYER_LLP:
		return "LLP error (unknown type)";
	}
	return "unknown Terminate layer";
}
