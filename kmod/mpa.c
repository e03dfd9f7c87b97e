// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * MPA (RFC 5044) and Enhanced MPA connection setup (RFC 6581): Request and
 * Reply frame codec, parameter negotiation, MULPDU and the FPDU CRC trailer.
 *
 * Sans-I/O: everything here works on caller-owned buffers.
 */
#include "iwarp.h"

/*
 * RFC 6581 section 5 (Enhanced MPA Request/Reply private data):
 *
 *   word 0 (16 bits): |P|Z|         IRD (14 bits)       |
 *   word 1 (16 bits): |W|R|         ORD (14 bits)       |
 *
 * P = peer-to-peer mode, Z = zero-length Send as RTR, W = zero-length RDMA
 * Write as RTR, R = zero-length RDMA Read as RTR. Both words big-endian.
 * The reference capture (siw <-> siw, P2P on) shows the Request carrying
 * 80 01 c0 01 (P, IRD 1, W|R offered, ORD 1) and the Reply 80 01 80 01
 * (P, IRD 1, W chosen, ORD 1), which pins the bit positions.
 */
static void v2_words(const struct kw_mpa_frame *f, u8 out[4])
{
	u16 ird = f->ird & KW_MPA_V2_MASK;
	u16 ord = f->ord & KW_MPA_V2_MASK;

	if (f->p2p) {
		ird |= KW_MPA_V2_P2P;
		if (f->rtr & KW_RTR_SEND)
			ird |= KW_MPA_V2_RTR_SEND;
		if (f->rtr & KW_RTR_WRITE)
			ord |= KW_MPA_V2_RTR_WRITE;
		if (f->rtr & KW_RTR_READ)
			ord |= KW_MPA_V2_RTR_READ;
	}
	put_unaligned_be16(ird, out);
	put_unaligned_be16(ord, out + 2);
}

int kw_mpa_encode(const struct kw_mpa_frame *f, const u8 *ulp_pd,
		  u16 ulp_pd_len, u8 *out, size_t out_len)
{
	u32 pd_len = ulp_pd_len;
	u8 flags = 0;
	u8 *p;

	/* RFC 5044 section 7.1: revision 1; RFC 6581 section 5: revision 2 */
	if (f->rev != 1 && f->rev != 2)
		return -EINVAL;
	/* RFC 6581 section 5: the Enhanced prefix exists only in rev 2 */
	if (f->enhanced && f->rev != 2)
		return -EINVAL;
	/* P2P and RTR types live in the Enhanced prefix */
	if (!f->enhanced && (f->p2p || f->rtr))
		return -EINVAL;
	if (f->rtr & ~(KW_RTR_SEND | KW_RTR_WRITE | KW_RTR_READ))
		return -EINVAL;
	if (f->ird > KW_MPA_V2_MASK || f->ord > KW_MPA_V2_MASK)
		return -EINVAL;
	if (ulp_pd_len && !ulp_pd)
		return -EINVAL;

	if (f->enhanced)
		pd_len += KW_MPA_V2_PD_LEN;
	/* RFC 5044 section 7.1: at most 512 bytes of private data */
	if (pd_len > KW_MPA_MAX_PD)
		return -EMSGSIZE;
	if (out_len < KW_MPA_HDR_LEN + pd_len)
		return -EMSGSIZE;

	memcpy(out, f->reply ? KW_MPA_KEY_REP : KW_MPA_KEY_REQ,
	       KW_MPA_KEY_LEN);
	if (f->markers)
		flags |= KW_MPA_FLAG_MARKERS;
	if (f->crc)
		flags |= KW_MPA_FLAG_CRC;
	if (f->reject)
		flags |= KW_MPA_FLAG_REJECT;
	if (f->enhanced)
		flags |= KW_MPA_FLAG_ENHANCED;
	out[16] = flags;
	out[17] = f->rev;
	put_unaligned_be16((u16)pd_len, out + 18);

	p = out + KW_MPA_HDR_LEN;
	if (f->enhanced) {
		v2_words(f, p);
		p += KW_MPA_V2_PD_LEN;
	}
	if (ulp_pd_len)
		memcpy(p, ulp_pd, ulp_pd_len);
	return KW_MPA_HDR_LEN + pd_len;
}

int kw_mpa_decode_hdr(const u8 hdr[KW_MPA_HDR_LEN], bool expect_reply,
		      struct kw_mpa_frame *f)
{
	u8 flags = hdr[16];

	memset(f, 0, sizeof(*f));
	/* RFC 5044 section 7.1: the 16-byte key identifies Request vs Reply */
	if (memcmp(hdr, expect_reply ? KW_MPA_KEY_REP : KW_MPA_KEY_REQ,
		   KW_MPA_KEY_LEN))
		return -EPROTO;
	/*
	 * RFC 5044 section 7.1 / RFC 6581 section 5: the remaining flag bits
	 * are reserved; a peer that sets them speaks a protocol we do not
	 * know, so fail the setup (API contract) rather than guess.
	 */
	if (flags & KW_MPA_FLAG_RESERVED)
		return -EPROTO;
	/* RFC 5044 section 7.1: rev 1; RFC 6581 section 5: rev 2. Rev 0 is
	 * the pre-standard draft format (different FPDU rules). */
	f->rev = hdr[17];
	if (f->rev != 1 && f->rev != 2)
		return -EPROTO;
	f->reply = expect_reply;
	f->markers = flags & KW_MPA_FLAG_MARKERS;
	f->crc = flags & KW_MPA_FLAG_CRC;
	f->reject = flags & KW_MPA_FLAG_REJECT;
	f->enhanced = flags & KW_MPA_FLAG_ENHANCED;
	/* RFC 6581 section 5: Enhanced flag is only defined for rev 2 */
	if (f->enhanced && f->rev != 2)
		return -EPROTO;
	/* RFC 5044 section 7.1: Reject is meaningful only in a Reply */
	if (f->reject && !expect_reply)
		return -EPROTO;
	f->pd_len = get_unaligned_be16(hdr + 18);
	/* RFC 5044 section 7.1: private data length at most 512 */
	if (f->pd_len > KW_MPA_MAX_PD)
		return -EMSGSIZE;
	return 0;
}

int kw_mpa_decode_pd(struct kw_mpa_frame *f, const u8 *pd)
{
	u16 ird, ord;

	if (!f->enhanced) {
		f->ulp_pd = f->pd_len ? pd : NULL;
		f->ulp_pd_len = f->pd_len;
		return 0;
	}
	/* RFC 6581 section 5: Enhanced frames start with 4 bytes IRD/ORD */
	if (f->pd_len < KW_MPA_V2_PD_LEN)
		return -EPROTO;
	ird = get_unaligned_be16(pd);
	ord = get_unaligned_be16(pd + 2);
	f->ird = ird & KW_MPA_V2_MASK;
	f->ord = ord & KW_MPA_V2_MASK;
	f->p2p = ird & KW_MPA_V2_P2P;
	f->rtr = 0;
	/*
	 * RFC 6581 section 5: the RTR type bits only have a meaning when the
	 * peer-to-peer bit is set; ignore them otherwise.
	 */
	if (f->p2p) {
		if (ird & KW_MPA_V2_RTR_SEND)
			f->rtr |= KW_RTR_SEND;
		if (ord & KW_MPA_V2_RTR_WRITE)
			f->rtr |= KW_RTR_WRITE;
		if (ord & KW_MPA_V2_RTR_READ)
			f->rtr |= KW_RTR_READ;
	}
	f->ulp_pd_len = f->pd_len - KW_MPA_V2_PD_LEN;
	f->ulp_pd = f->ulp_pd_len ? pd + KW_MPA_V2_PD_LEN : NULL;
	return 0;
}

void kw_mpa_make_request(const struct kw_mpa_cfg *local,
			 struct kw_mpa_frame *req)
{
	memset(req, 0, sizeof(*req));
	req->reply = false;
	req->rev = local->rev >= 2 ? 2 : 1;
	/* RFC 5044 section 7.1: C = this side wants CRC. Markers are not
	 * implemented, so M is never requested. */
	req->crc = local->crc;
	req->markers = false;
	/* RFC 6581 section 5: a rev 2 initiator always sends the IRD/ORD
	 * prefix so the responder can size its Read resources. */
	req->enhanced = req->rev == 2;
	if (req->enhanced) {
		req->ird = min_t(u16, local->ird, KW_MPA_V2_MASK);
		req->ord = min_t(u16, local->ord, KW_MPA_V2_MASK);
		/* RFC 6581 section 5: P2P with the RTR types we can send */
		req->p2p = local->p2p;
		if (req->p2p)
			req->rtr = local->rtr & (KW_RTR_SEND | KW_RTR_WRITE |
						 KW_RTR_READ);
	}
}

/* RFC 6581 section 5: the responder picks exactly one of the offered RTR
 * types. Preference Write, Read, Send (a zero-length Write needs no receive
 * buffer and no IRD slot; siw makes the same choice, see the capture). */
static u8 pick_rtr(u8 common)
{
	if (common & KW_RTR_WRITE)
		return KW_RTR_WRITE;
	if (common & KW_RTR_READ)
		return KW_RTR_READ;
	if (common & KW_RTR_SEND)
		return KW_RTR_SEND;
	return 0;
}

int kw_mpa_negotiate_responder(const struct kw_mpa_frame *req,
			       const struct kw_mpa_cfg *local,
			       struct kw_mpa_frame *reply,
			       struct kw_mpa_result *res)
{
	u8 lrev = local->rev >= 2 ? 2 : 1;

	memset(reply, 0, sizeof(*reply));
	memset(res, 0, sizeof(*res));
	reply->reply = true;
	/*
	 * RFC 5044 section 7.1 / RFC 6581 section 5: the responder answers
	 * with the lower of the two revisions (a rev 2 responder replies rev
	 * 1 to a rev 1 Request).
	 */
	reply->rev = min(req->rev, lrev);
	reply->enhanced = reply->rev == 2 && req->enhanced;
	/*
	 * RFC 5044 section 7.1: CRC is used if either side asks for it; the
	 * responder sets C when the Request had C or it wants CRC itself.
	 */
	reply->crc = req->crc || local->crc;
	if (reply->enhanced) {
		/*
		 * RFC 6581 section 5: the Reply's IRD/ORD describe the
		 * responder. Like hardware RNICs we never promise more
		 * outbound Reads than the initiator can take (ORD <= its
		 * IRD) and advertise our full IRD.
		 */
		reply->ord = min_t(u16, local->ord, req->ird);
		reply->ird = min_t(u16, local->ird, KW_MPA_V2_MASK);
	}

	/*
	 * RFC 5044 section 7.1: markers must be used when either side asks
	 * for them. We do not implement markers, so a Request with M is
	 * refused.
	 */
	if (req->markers)
		goto reject;

	if (reply->enhanced && req->p2p) {
		/*
		 * RFC 6581 section 5/7: in peer-to-peer mode the responder
		 * selects one RTR type offered by the initiator that it also
		 * accepts; with none in common the connection is refused
		 * (the Terminate code would be "no matching RTR option").
		 */
		reply->rtr = pick_rtr(req->rtr & local->rtr);
		if (!reply->rtr)
			goto reject;
		reply->p2p = true;
	}

	res->rev = reply->rev;
	res->crc = reply->crc;
	res->p2p = reply->p2p;
	res->rtr = reply->rtr;
	if (reply->enhanced) {
		res->ird = reply->ird;
		res->ord = reply->ord;
	} else {
		/* rev 1: IRD/ORD are agreed out of band */
		res->ird = local->ird;
		res->ord = local->ord;
	}
	return 0;

reject:
	/* RFC 5044 section 7.1: a Reply with the Reject flag */
	reply->reject = true;
	reply->p2p = false;
	reply->rtr = 0;
	return -ECONNREFUSED;
}

int kw_mpa_negotiate_initiator(const struct kw_mpa_cfg *local,
			       const struct kw_mpa_frame *reply,
			       struct kw_mpa_result *res)
{
	u8 lrev = local->rev >= 2 ? 2 : 1;

	memset(res, 0, sizeof(*res));
	if (!reply->reply)
		return -EPROTO;
	/* RFC 5044 section 7.1: Reject flag = the responder refused */
	if (reply->reject)
		return -ECONNREFUSED;
	/* RFC 5044 section 7.1: the responder may not raise the revision */
	if (reply->rev > lrev)
		return -EPROTO;
	/* RFC 6581 section 5: Enhanced needs rev 2 (decode checks it too) */
	if (reply->enhanced && reply->rev != 2)
		return -EPROTO;
	/* We never request markers; a Reply demanding them is unusable. */
	if (reply->markers)
		return -EPROTO;
	/*
	 * RFC 5044 section 7.1: the responder must set C when the Request
	 * had C. A Reply without C to our CRC Request is a protocol error.
	 */
	if (local->crc && !reply->crc)
		return -EPROTO;
	res->rev = reply->rev;
	res->crc = reply->crc;
	res->ird = local->ird;
	res->ord = local->ord;

	if (reply->enhanced) {
		/*
		 * RFC 6581 section 5: never issue more outstanding Reads than
		 * the responder's IRD.
		 */
		res->ord = min_t(u16, local->ord, reply->ird);
		res->ird = min_t(u16, local->ird, KW_MPA_V2_MASK);
	}

	if (reply->p2p) {
		/* RFC 6581 section 5: P2P only if we asked for it */
		if (!local->p2p || lrev < 2)
			return -EPROTO;
		/* exactly one RTR type, and one that we offered */
		if (reply->rtr != KW_RTR_SEND && reply->rtr != KW_RTR_WRITE &&
		    reply->rtr != KW_RTR_READ)
			return -EPROTO;
		if (!(reply->rtr & local->rtr))
			return -EPROTO;
		res->p2p = true;
		res->rtr = reply->rtr;
	} else if (reply->enhanced && local->p2p) {
		/*
		 * RFC 6581 section 5: an Enhanced responder must either take
		 * part in P2P setup or reject; silently dropping P2P leaves
		 * the initiator unable to know who sends first.
		 */
		return -EPROTO;
	}
	return 0;
}

u32 kw_mpa_mulpdu(u32 emss, bool markers)
{
	u32 room;

	/* Markers are not supported (RFC 5044 section 6.2 formula with
	 * markers is not implemented). */
	if (markers)
		return 0;
	/*
	 * RFC 5044 section 6.2 without markers: the FPDU is 2 (length) +
	 * ULPDU + pad + 4 (CRC field, present even when CRC is off) and
	 * must fit in EMSS; 2 + ULPDU + pad is a multiple of 4.
	 * Equivalent to EMSS - 6 - (EMSS mod 4).
	 */
	if (emss < 8)
		return 0;
	room = (emss - 4) & ~3U;
	return room - 2;
}

/*
 * RFC 5044 section 4.4 / 6.1: CRC32c as in iSCSI (RFC 3385): initial value
 * ~0, final inversion. On the wire the value is sent least significant
 * byte first, exactly the byte order iSCSI and the Linux crypto "crc32c"
 * digest produce; the reference capture confirms it (FPDU 00 0e c1 40 ...
 * ends with eb d3 4c 5f for CRC32c value 0x5f4cd3eb).
 */
void kw_mpa_crc_put(u32 crc, u8 out[4])
{
	put_unaligned_le32(~crc, out);
}

bool kw_mpa_crc_check(u32 crc, const u8 wire[4])
{
	return get_unaligned_le32(wire) == ~crc;
}
