// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * MPA (RFC 5044) and Enhanced MPA connection setup (RFC 6581): Request and
 * Reply frame codec, parameter negotiation, MULPDU and the FPDU CRC trailer.
 *
 * Sans-I/O: everything here works on caller-owned buffers.
 */
#include "iwarp.h"

/*
 * RFC 6581 section 9 (Enhanced RDMA connection establishment data):
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

	/* RFC 5044 section 7.1.1: revision 1; RFC 6581 section 6: revision 2 */
	if (f->rev != 1 && f->rev != 2)
		return -EINVAL;
	/* RFC 6581 section 6: the Enhanced prefix exists only in rev 2 */
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
	 * RFC 5044 section 7.1.1: the Res bits are "not checked on
	 * reception" (RFC 6581 section 10 expects future extensions there;
	 * siw built with try_gso sets one).
	 */
	/* RFC 5044 section 7.1.1: rev 1; RFC 6581 section 6: rev 2. Rev 0 is
	 * the pre-standard draft format (different FPDU rules). */
	f->rev = hdr[17];
	if (f->rev != 1 && f->rev != 2)
		return -EPROTO;
	f->reply = expect_reply;
	f->markers = flags & KW_MPA_FLAG_MARKERS;
	f->crc = flags & KW_MPA_FLAG_CRC;
	/* RFC 5044 section 7.1.1: R "is set to zero, and not checked on
	 * reception in the MPA Request Frame" */
	f->reject = expect_reply && (flags & KW_MPA_FLAG_REJECT);
	/* RFC 6581 section 6: S is defined in rev 2 only; a Res bit in
	 * rev 1, so not checked there either */
	f->enhanced = f->rev == 2 && (flags & KW_MPA_FLAG_ENHANCED);
	f->pd_len = get_unaligned_be16(hdr + 18);
	/* RFC 5044 section 7.1.1: private data length at most 512 */
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
	/* RFC 6581 section 9: Enhanced frames start with 4 bytes IRD/ORD */
	if (f->pd_len < KW_MPA_V2_PD_LEN)
		return -EPROTO;
	ird = get_unaligned_be16(pd);
	ord = get_unaligned_be16(pd + 2);
	f->ird = ird & KW_MPA_V2_MASK;
	f->ord = ord & KW_MPA_V2_MASK;
	f->p2p = ird & KW_MPA_V2_P2P;
	f->rtr = 0;
	/*
	 * RFC 6581 section 9.2: "if Control Flag A is set to 0, then Control
	 * Flags B, C, and D MUST be ignored".
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
	/* RFC 5044 section 7.1.1: C = this side wants CRC, M = this side
	 * wants markers in the FPDUs it receives. */
	req->crc = local->crc;
	req->markers = local->markers;
	/* RFC 6581 section 9.1: a rev 2 initiator always sends the IRD/ORD
	 * prefix so the responder can size its Read resources. */
	req->enhanced = req->rev == 2;
	if (req->enhanced) {
		req->ird = min_t(u16, local->ird, KW_MPA_V2_MASK);
		req->ord = min_t(u16, local->ord, KW_MPA_V2_MASK);
		/* RFC 6581 section 9.2: A, and B/C/D for each RTR type
		 * we can send */
		req->p2p = local->p2p;
		if (req->p2p)
			req->rtr = local->rtr & (KW_RTR_SEND | KW_RTR_WRITE |
						 KW_RTR_READ);
	}
}

/*
 * One RTR type of a set: the responder's choice for its Reply, and the
 * initiator's among those the Reply allows (RFC 6581 section 9.2: "at the
 * initiator's sole discretion"). Preference Write, Read, Send: a
 * zero-length Write needs no receive buffer and no IRD slot; siw makes the
 * same choice (see the capture).
 */
static u8 pick_rtr(u8 allowed)
{
	if (allowed & KW_RTR_WRITE)
		return KW_RTR_WRITE;
	if (allowed & KW_RTR_READ)
		return KW_RTR_READ;
	if (allowed & KW_RTR_SEND)
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
	res->peer_ird = res->peer_ord = KW_MPA_IRD_ORD_UNKNOWN;
	reply->reply = true;
	/*
	 * RFC 5044 section 7.1.1: the responder answers with the lower of
	 * the two revisions, except that RFC 6581 section 10 wants an
	 * enhanced Request answered with an enhanced Reply (or the
	 * connection closed): kiwarp speaks rev 2 whatever local->rev says,
	 * and a rev 1 Reply to it is what makes siw fail.
	 */
	reply->enhanced = req->enhanced;
	reply->rev = req->enhanced ? 2 : min(req->rev, lrev);
	/*
	 * RFC 5044 section 7.1.1: CRC is used if either side asks for it; the
	 * responder sets C when the Request had C or it wants CRC itself.
	 */
	reply->crc = req->crc || local->crc;
	if (reply->enhanced) {
		res->peer_ird = req->ird;
		res->peer_ord = req->ord;
		/*
		 * RFC 6581 section 9.1: the responder's ORD is at most the
		 * initiator's IRD and its IRD what it can actually serve;
		 * the initiator then lowers its ORD to that. 0x3FFF from the
		 * initiator means "no automatic negotiation": the local value
		 * stays and the Reply carries 0x3FFF back.
		 */
		if (req->ird == KW_MPA_V2_MASK) {
			reply->ord = KW_MPA_V2_MASK;
			res->ord = local->ord;
		} else {
			reply->ord = min_t(u16, local->ord, req->ird);
			res->ord = reply->ord;
		}
		if (req->ord == KW_MPA_V2_MASK) {
			reply->ird = KW_MPA_V2_MASK;
			res->ird = local->ird;
		} else {
			reply->ird = min_t(u16, local->ird, KW_MPA_V2_MASK - 1);
			res->ird = reply->ird;
		}
	} else {
		/* rev 1: IRD/ORD are agreed out of band */
		res->ird = local->ird;
		res->ord = local->ord;
	}

	/*
	 * RFC 5044 section 7.1.1: M in the Request asks for markers in the
	 * responder's FPDUs, M in the Reply for markers in the initiator's:
	 * each direction on its own.
	 */
	reply->markers = local->markers;
	res->markers_tx = req->markers;
	res->markers_rx = local->markers;

	if (reply->enhanced && req->p2p) {
		/*
		 * RFC 6581 section 9.2: answer A with A and at least one RTR
		 * type: one of those offered that we accept, else one we
		 * accept (the initiator then terminates with 2/0/7 if it
		 * cannot send it). One is enough ("not required to specify
		 * all RTR indication options it supports") and tells us which
		 * RTR to expect; siw answers the same way. kiwarp can take
		 * any of the three zero-length RTR messages; a ULP that
		 * asked for P2P with one RTR type restricts that.
		 */
		u8 ok = local->p2p && local->rtr ? local->rtr : KW_RTR_ALL;

		reply->p2p = true;
		reply->rtr = pick_rtr(req->rtr & ok);
		if (!reply->rtr)
			reply->rtr = pick_rtr(ok);
	}

	res->rev = reply->rev;
	res->crc = reply->crc;
	res->p2p = reply->p2p;
	res->rtr = reply->rtr;
	return 0;
}

/* Fail the initiator's negotiation with an LLP Terminate code to send. */
static int fail_term(struct kw_mpa_result *res, u8 ecode)
{
	res->term = ecode;
	return -EPROTO;
}

int kw_mpa_negotiate_initiator(const struct kw_mpa_cfg *local,
			       const struct kw_mpa_frame *reply,
			       struct kw_mpa_result *res)
{
	u8 lrev = local->rev >= 2 ? 2 : 1;
	u16 ird_max = max(local->ird, local->ird_max);

	memset(res, 0, sizeof(*res));
	res->peer_ird = res->peer_ord = KW_MPA_IRD_ORD_UNKNOWN;
	if (!reply->reply)
		return -EPROTO;
	res->rev = reply->rev;
	/*
	 * RFC 5044 section 7.1.1: "When this bit is '1' in either the MPA
	 * Request Frame or MPA Reply Frame, CRCs MUST be generated and
	 * checked by both endpoints." Set before any failure: a Terminate
	 * sent after it is framed with this CRC state.
	 */
	res->crc = local->crc || reply->crc;
	res->ird = local->ird;
	res->ord = local->ord;
	/* RFC 6581 section 9.1: the ULP sees the responder's IRD and ORD,
	 * on Accept and on Reject */
	if (reply->enhanced) {
		res->peer_ird = reply->ird;
		res->peer_ord = reply->ord;
	}
	/* RFC 5044 section 7.1.1: Reject flag = the responder refused */
	if (reply->reject)
		return -ECONNREFUSED;
	/* RFC 5044 section 7.1.1: the responder may not raise the revision */
	if (reply->rev > lrev)
		return fail_term(res, KW_TERM_LLP_INV_REQ_RESP);
	/* RFC 5044 section 7.1.1: M in our Request asked for markers in
	 * the responder's FPDUs, M in its Reply asks for them in ours. */
	res->markers_rx = local->markers;
	res->markers_tx = reply->markers;

	if (reply->enhanced) {
		/*
		 * RFC 6581 section 9.1: the initiator's ORD at most the
		 * responder's IRD, its IRD at least the responder's ORD, or a
		 * Terminate 2/0/6 if it cannot; 0x3FFF leaves the local value
		 * as it is.
		 */
		if (reply->ird != KW_MPA_V2_MASK)
			res->ord = min_t(u16, local->ord, reply->ird);
		if (reply->ord != KW_MPA_V2_MASK && reply->ord > res->ird) {
			if (reply->ord > ird_max)
				return fail_term(res,
						 KW_TERM_LLP_INSUFFICIENT_IRD);
			res->ird = reply->ord;
		}
	}

	if (reply->p2p) {
		/* RFC 6581 section 9.2: A is set only in answer to A */
		if (!local->p2p || lrev < 2)
			return fail_term(res, KW_TERM_LLP_INV_REQ_RESP);
		/*
		 * RFC 6581 section 9.2: generate one of the RTR types the
		 * responder allows, or Terminate 2/0/7 when none is one
		 * we offered (the ones we can send).
		 */
		res->rtr = pick_rtr(reply->rtr & local->rtr);
		if (!res->rtr)
			return fail_term(res, KW_TERM_LLP_NO_MATCHING_RTR);
		res->p2p = true;
	} else if (local->p2p && lrev >= 2) {
		/*
		 * RFC 6581 section 9.2: "If Control Flag A is 1 in the MPA
		 * Request message, then the responder MUST set Control Flag A
		 * to 1 in the MPA reply message." An unenhanced Reply (S = 0,
		 * or revision 1) to our enhanced Request cannot carry it
		 * either (section 10: an enhanced responder answers enhanced):
		 * no RTR was negotiated, and the ULP asked for peer-to-peer.
		 */
		return fail_term(res, KW_TERM_LLP_NO_MATCHING_RTR);
	}
	/*
	 * Client-server: an unenhanced Reply to our enhanced Request is the
	 * fallback RFC 6581 section 10 allows the initiator ("let the ULP
	 * deal with ORD and IRD"): the local IRD/ORD stay, peer_ird/peer_ord
	 * say unknown.
	 */
	return 0;
}

u32 kw_mpa_mulpdu(u32 emss, bool markers)
{
	u32 room, mk;

	/*
	 * RFC 5044 section 4.5 with markers: EMSS - (6 + 4 * ceil(EMSS /
	 * 512) + EMSS mod 4): room for a marker in every 512 octets the
	 * segment may span, wherever the FPDU starts.
	 */
	if (markers) {
		mk = KW_MPA_MARKER_LEN *
		     ((emss + KW_MPA_MARKER_SPACING - 1) / KW_MPA_MARKER_SPACING);
		if (emss < 6 + mk + (emss & 3) + KW_MPA_MULPDU_MIN)
			return KW_MPA_MULPDU_MIN;
		return emss - (6 + mk + (emss & 3));
	}
	/*
	 * RFC 5044 section 4.5 without markers: the FPDU is 2 (length) +
	 * ULPDU + pad + 4 (CRC field, present even when CRC is off) and
	 * must fit in EMSS; 2 + ULPDU + pad is a multiple of 4.
	 * Equivalent to EMSS - 6 - (EMSS mod 4). The sender "MUST NOT
	 * shrink the MULPDU below 128 octets": with a smaller EMSS an FPDU
	 * spans segments.
	 */
	if (emss < 8)
		return KW_MPA_MULPDU_MIN;
	room = ((emss - 4) & ~3U) - 2;
	return max_t(u32, room, KW_MPA_MULPDU_MIN);
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
