// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * RDMAP (RFC 5040): opcode table, RDMA Read Request and Terminate codecs.
 *
 * Terminate payload layout, RFC 5040 section 4.8 (all big-endian):
 *
 *   byte 0: Layer (high nibble) | EType (low nibble)
 *   byte 1: Error Code
 *   byte 2: Hdrct M (0x80) | D (0x40) | R (0x20) | 5 reserved bits
 *   byte 3: reserved
 *   then, if M: DDP Segment Length (2 bytes: the MPA ULPDU length field of
 *               the terminated FPDU),
 *   then, if D: the terminated DDP/RDMAP header (14 bytes tagged, 18
 *               untagged), directly after the length (no padding),
 *   then, if R: the terminated RDMA Read Request header (28 bytes).
 *
 * Upstream siw declares this control word as a bit-field struct over a
 * __be32 with the little-endian member order, so on little-endian hosts it
 * transmits Layer in the low nibble of byte 0 (EType in the high nibble)
 * and M/D/R in the three low bits of byte 2. We follow the RFC; a siw peer
 * will therefore show Layer and EType swapped in our decode and vice versa.
 */
#include "iwarp.h"

#define TERM_M	0x80
#define TERM_D	0x40
#define TERM_R	0x20

bool kw_rdmap_opcode_valid(u8 opcode, bool tagged)
{
	/*
	 * RFC 5040 section 4.3 (RDMA message table): Write and Read Response
	 * are tagged DDP messages, everything else untagged. Opcodes 1000b
	 * through 1111b are reserved.
	 */
	switch (opcode) {
	case KW_OP_WRITE:
	case KW_OP_READ_RESP:
		return tagged;
	case KW_OP_READ_REQ:
	case KW_OP_SEND:
	case KW_OP_SEND_INV:
	case KW_OP_SEND_SE:
	case KW_OP_SEND_SE_INV:
	case KW_OP_TERMINATE:
		return !tagged;
	default:
		return false;
	}
}

/*
 * RFC 5040 section 4.4: RDMA Read Request header, 28 bytes:
 * Data Sink STag (4), Data Sink TO (8), RDMA Read Message Size (4),
 * Data Source STag (4), Data Source TO (8).
 */
void kw_read_req_encode(const struct kw_read_req *r, u8 out[KW_READ_REQ_LEN])
{
	put_unaligned_be32(r->sink_stag, out);
	put_unaligned_be64(r->sink_to, out + 4);
	put_unaligned_be32(r->size, out + 12);
	put_unaligned_be32(r->src_stag, out + 16);
	put_unaligned_be64(r->src_to, out + 20);
}

void kw_read_req_decode(const u8 in[KW_READ_REQ_LEN], struct kw_read_req *r)
{
	r->sink_stag = get_unaligned_be32(in);
	r->sink_to = get_unaligned_be64(in + 4);
	r->size = get_unaligned_be32(in + 12);
	r->src_stag = get_unaligned_be32(in + 16);
	r->src_to = get_unaligned_be64(in + 20);
}

/* DDP header length of an FPDU that starts at its MPA length field */
static u32 bad_ddp_hdr_len(const u8 *fpdu)
{
	return (fpdu[2] & KW_DDP_FLAG_TAGGED) ? KW_DDP_TAGGED_HDR_LEN :
						 KW_DDP_UNTAGGED_HDR_LEN;
}

int kw_term_encode(const struct kw_term *t, const u8 *bad_fpdu,
		   u32 bad_fpdu_len, u8 out[KW_TERM_MAX_LEN])
{
	u32 len = 4, hlen = 0;

	if (t->layer > 0xf || t->etype > 0xf)
		return -EINVAL;
	/*
	 * RFC 5040 section 4.8: the copied headers are positional, so a DDP
	 * header is only meaningful after the segment length, and a Read
	 * Request header only after the DDP header.
	 */
	if ((t->has_ddp_hdr && !t->has_len) ||
	    (t->has_rdmap_hdr && !t->has_ddp_hdr))
		return -EINVAL;
	if (t->has_len && bad_fpdu_len < 2)
		return -EINVAL;
	if (t->has_ddp_hdr) {
		if (bad_fpdu_len < 3)
			return -EINVAL;
		hlen = bad_ddp_hdr_len(bad_fpdu);
		if (bad_fpdu_len < 2 + hlen)
			return -EINVAL;
	}
	/* R: only an untagged (Read Request) header is followed by 28 bytes */
	if (t->has_rdmap_hdr &&
	    (hlen != KW_DDP_UNTAGGED_HDR_LEN ||
	     bad_fpdu_len < 2 + hlen + KW_READ_REQ_LEN))
		return -EINVAL;

	out[0] = (u8)(t->layer << 4 | t->etype);
	out[1] = t->ecode;
	out[2] = (t->has_len ? TERM_M : 0) | (t->has_ddp_hdr ? TERM_D : 0) |
		 (t->has_rdmap_hdr ? TERM_R : 0);
	out[3] = 0;
	if (t->has_len) {
		memcpy(out + len, bad_fpdu, 2);
		len += 2;
	}
	if (t->has_ddp_hdr) {
		memcpy(out + len, bad_fpdu + 2, hlen);
		len += hlen;
	}
	if (t->has_rdmap_hdr) {
		memcpy(out + len, bad_fpdu + 2 + hlen, KW_READ_REQ_LEN);
		len += KW_READ_REQ_LEN;
	}
	return len;
}

bool kw_term_siw_layout(const u8 ctrl[4])
{
	return !(ctrl[2] & (TERM_M | TERM_D | TERM_R)) && (ctrl[2] & 0x07) &&
	       !(ctrl[2] & 0x18) && !ctrl[3];
}

int kw_term_decode(const u8 *payload, u32 len, struct kw_term *t)
{
	u32 need = 4;

	memset(t, 0, sizeof(*t));
	/* RFC 5040 section 4.8: at least the 4-byte control word */
	if (len < 4)
		return -EPROTO;
	t->layer = payload[0] >> 4;
	t->etype = payload[0] & 0xf;
	t->ecode = payload[1];
	t->has_len = payload[2] & TERM_M;
	t->has_ddp_hdr = payload[2] & TERM_D;
	t->has_rdmap_hdr = payload[2] & TERM_R;
	/*
	 * Interop: Linux siw (drivers/infiniband/sw/siw/iwarp.h) declares the
	 * control word as a __be32 bit-field, which on little-endian hosts
	 * puts Layer in the low nibble of byte 0, EType in the high nibble
	 * and M/D/R in bits 0..2 of byte 2 (reserved in RFC 5040 4.8). When
	 * byte 2 holds only those bits and byte 3 is zero, take siw's layout.
	 * siw sets M for every error that carries headers; without any flag
	 * (catastrophic, version/opcode and LLP errors) the two readings
	 * cannot be told apart and the RFC one is used.
	 */
	if (kw_term_siw_layout(payload)) {
		t->layer = payload[0] & 0xf;
		t->etype = payload[0] >> 4;
		t->has_len = payload[2] & 0x01;
		t->has_ddp_hdr = payload[2] & 0x02;
		t->has_rdmap_hdr = payload[2] & 0x04;
	}
	/* RFC 5040 section 4.8: layers 0 (RDMAP), 1 (DDP), 2 (LLP) */
	if (t->layer > KW_TERM_LAYER_LLP)
		return -EPROTO;
	/*
	 * RFC 5040 section 4.8: the DDP Segment Length "MUST be valid if the
	 * M bit is set. It MUST be present when the D bit is set": D without
	 * M is legal, the length field is there but not meaningful.
	 */
	if (t->has_rdmap_hdr && !t->has_ddp_hdr)
		return -EPROTO;
	if (t->has_len || t->has_ddp_hdr)
		need += 2;
	if (t->has_ddp_hdr) {
		if (len < need + 1)
			return -EPROTO;
		need += (payload[need] & KW_DDP_FLAG_TAGGED) ?
			KW_DDP_TAGGED_HDR_LEN : KW_DDP_UNTAGGED_HDR_LEN;
	}
	if (t->has_rdmap_hdr)
		need += KW_READ_REQ_LEN;
	/* Reserved bits and any trailing bytes are ignored (section 4.8:
	 * reserved fields are not checked on receive). */
	if (len < need)
		return -EPROTO;
	return 0;
}
