// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* MPA Request/Reply codec, negotiation and MULPDU (RFC 5044, RFC 6581). */
#include "harness.h"
#include "testlib.h"

static int enc(const struct kw_mpa_frame *f, const u8 *pd, u16 n, u8 *out)
{
	return kw_mpa_encode(f, pd, n, out, 600);
}

static int dec(const u8 *b, bool reply, struct kw_mpa_frame *f)
{
	int rv = kw_mpa_decode_hdr(b, reply, f);

	if (rv)
		return rv;
	return kw_mpa_decode_pd(f, b + KW_MPA_HDR_LEN);
}

/* The exact Request/Reply seen in siw-rping-crc-p2p.pcapng */
static const u8 cap_req[24] = { 'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R',
	'e', 'q', ' ', 'F', 'r', 'a', 'm', 'e', 0x50, 0x02, 0x00, 0x04,
	0x80, 0x01, 0xc0, 0x01 };
static const u8 cap_rep[24] = { 'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R',
	'e', 'p', ' ', 'F', 'r', 'a', 'm', 'e', 0x50, 0x02, 0x00, 0x04,
	0x80, 0x01, 0x80, 0x01 };

TEST(decode_capture_request)
{
	struct kw_mpa_frame f;

	ASSERT_EQ(dec(cap_req, false, &f), 0);
	EXPECT_EQ(f.rev, 2);
	EXPECT_TRUE(f.crc);
	EXPECT_TRUE(f.enhanced);
	EXPECT_FALSE(f.markers);
	EXPECT_TRUE(f.p2p);
	EXPECT_EQ(f.rtr, KW_RTR_WRITE | KW_RTR_READ);
	EXPECT_EQ(f.ird, 1);
	EXPECT_EQ(f.ord, 1);
	EXPECT_EQ(f.pd_len, 4);
	EXPECT_EQ(f.ulp_pd_len, 0);
	/* the Request key is not a Reply */
	EXPECT_EQ(kw_mpa_decode_hdr(cap_req, true, &f), -EPROTO);
}

TEST(encode_reproduces_capture)
{
	struct kw_mpa_cfg ini = { .rev = 2, .crc = true, .p2p = true,
		.rtr = KW_RTR_WRITE | KW_RTR_READ, .ird = 1, .ord = 1 };
	struct kw_mpa_cfg rsp = { .rev = 2, .crc = true, .p2p = true,
		.rtr = KW_RTR_WRITE | KW_RTR_READ | KW_RTR_SEND, .ird = 1,
		.ord = 1 };
	struct kw_mpa_frame req, d, rep;
	struct kw_mpa_result rr, ri;
	u8 b[600];

	kw_mpa_make_request(&ini, &req);
	ASSERT_EQ(enc(&req, NULL, 0, b), 24);
	ASSERT_MEMEQ(b, cap_req, 24);
	ASSERT_EQ(dec(b, false, &d), 0);
	ASSERT_EQ(kw_mpa_negotiate_responder(&d, &rsp, &rep, &rr), 0);
	ASSERT_EQ(enc(&rep, NULL, 0, b), 24);
	ASSERT_MEMEQ(b, cap_rep, 24);
	ASSERT_EQ(dec(cap_rep, true, &d), 0);
	ASSERT_EQ(kw_mpa_negotiate_initiator(&ini, &d, &ri), 0);
	EXPECT_EQ(rr.rtr, KW_RTR_WRITE);
	EXPECT_EQ(ri.rtr, KW_RTR_WRITE);
	EXPECT_TRUE(rr.crc);
	EXPECT_TRUE(ri.crc);
	EXPECT_TRUE(rr.p2p);
	EXPECT_TRUE(ri.p2p);
	EXPECT_EQ(ri.rev, 2);
	EXPECT_EQ(ri.ord, 1);
	EXPECT_EQ(rr.ord, 1);
}

TEST(roundtrip_with_private_data)
{
	struct kw_mpa_frame f = { .reply = true, .rev = 2, .crc = true,
		.enhanced = true, .ird = 0x3fff, .ord = 17 }, d;
	u8 pd[508], b[600];
	int i, n;

	for (i = 0; i < 508; i++)
		pd[i] = i;
	n = enc(&f, pd, 508, b);
	ASSERT_EQ(n, 20 + 512);
	ASSERT_EQ(dec(b, true, &d), 0);
	EXPECT_EQ(d.pd_len, 512);
	EXPECT_EQ(d.ulp_pd_len, 508);
	EXPECT_TRUE(d.ulp_pd == b + 24);
	EXPECT_MEMEQ(d.ulp_pd, pd, 508);
	EXPECT_EQ(d.ird, 0x3fff);
	EXPECT_EQ(d.ord, 17);
	EXPECT_FALSE(d.p2p);
	/* one byte more does not fit in 512 */
	EXPECT_EQ(enc(&f, pd, 509, b), -EMSGSIZE);
	/* rev 1, no prefix */
	f = (struct kw_mpa_frame){ .rev = 1, .markers = false };
	n = enc(&f, pd, 5, b);
	ASSERT_EQ(n, 25);
	EXPECT_EQ(b[16], 0);
	EXPECT_EQ(b[17], 1);
	ASSERT_EQ(dec(b, false, &d), 0);
	EXPECT_EQ(d.ulp_pd_len, 5);
	EXPECT_MEMEQ(d.ulp_pd, pd, 5);
	/* out buffer too small */
	EXPECT_EQ(kw_mpa_encode(&f, pd, 5, b, 24), -EMSGSIZE);
}

TEST(encode_invalid)
{
	struct kw_mpa_frame f = { .rev = 3 };
	u8 b[600];

	EXPECT_EQ(enc(&f, NULL, 0, b), -EINVAL);
	f.rev = 0;
	EXPECT_EQ(enc(&f, NULL, 0, b), -EINVAL);
	f = (struct kw_mpa_frame){ .rev = 1, .enhanced = true };
	EXPECT_EQ(enc(&f, NULL, 0, b), -EINVAL);
	f = (struct kw_mpa_frame){ .rev = 2, .p2p = true };
	EXPECT_EQ(enc(&f, NULL, 0, b), -EINVAL);
	f = (struct kw_mpa_frame){ .rev = 2, .enhanced = true, .ird = 0x4000 };
	EXPECT_EQ(enc(&f, NULL, 0, b), -EINVAL);
}

static void good_hdr(u8 *b)
{
	memcpy(b, cap_req, 24);
}

TEST(decode_bad_key)
{
	struct kw_mpa_frame f;
	u8 b[24];

	good_hdr(b);
	b[15] = 'E';
	EXPECT_EQ(kw_mpa_decode_hdr(b, false, &f), -EPROTO);
	good_hdr(b);
	b[0] = 'm';
	EXPECT_EQ(kw_mpa_decode_hdr(b, false, &f), -EPROTO);
}

/* RFC 5044 section 7.1.1: Res bits are "not checked on reception" */
TEST(decode_reserved_flags_ignored)
{
	struct kw_mpa_frame f;
	u8 b[24];
	int bit;

	for (bit = 0; bit < 4; bit++) {
		good_hdr(b);
		b[16] |= 1 << bit;
		ASSERT_EQ(dec(b, false, &f), 0);
		EXPECT_EQ(f.rev, 2);
		EXPECT_TRUE(f.enhanced);
		EXPECT_FALSE(f.markers);
		EXPECT_FALSE(f.reject);
	}
	/* siw built with try_gso sets 0x08 in its Reply */
	memcpy(b, cap_rep, 24);
	b[16] |= 0x08;
	ASSERT_EQ(dec(b, true, &f), 0);
	EXPECT_TRUE(f.p2p);
	EXPECT_EQ(f.rtr, KW_RTR_WRITE);
}

TEST(decode_bad_revision)
{
	struct kw_mpa_frame f;
	u8 b[24];

	good_hdr(b);
	b[17] = 0;
	EXPECT_EQ(kw_mpa_decode_hdr(b, false, &f), -EPROTO);
	b[17] = 3;
	EXPECT_EQ(kw_mpa_decode_hdr(b, false, &f), -EPROTO);
	b[17] = 0xff;
	EXPECT_EQ(kw_mpa_decode_hdr(b, false, &f), -EPROTO);
	/* S is a Res bit in rev 1 (RFC 6581 section 6): ignored */
	b[17] = 1;
	ASSERT_EQ(kw_mpa_decode_hdr(b, false, &f), 0);
	EXPECT_EQ(f.rev, 1);
	EXPECT_FALSE(f.enhanced);
	b[16] &= ~KW_MPA_FLAG_ENHANCED;
	EXPECT_EQ(kw_mpa_decode_hdr(b, false, &f), 0);
	EXPECT_EQ(f.rev, 1);
}

TEST(decode_pd_len_limit)
{
	struct kw_mpa_frame f;
	u8 b[24];

	good_hdr(b);
	put_unaligned_be16(513, b + 18);
	EXPECT_EQ(kw_mpa_decode_hdr(b, false, &f), -EMSGSIZE);
	put_unaligned_be16(0xffff, b + 18);
	EXPECT_EQ(kw_mpa_decode_hdr(b, false, &f), -EMSGSIZE);
	put_unaligned_be16(512, b + 18);
	EXPECT_EQ(kw_mpa_decode_hdr(b, false, &f), 0);
}

TEST(decode_enhanced_short_pd)
{
	struct kw_mpa_frame f;
	u8 b[24];
	int n;

	for (n = 0; n < 4; n++) {
		good_hdr(b);
		put_unaligned_be16(n, b + 18);
		ASSERT_EQ(kw_mpa_decode_hdr(b, false, &f), 0);
		EXPECT_EQ(kw_mpa_decode_pd(&f, b + 20), -EPROTO);
	}
}

TEST(decode_reject_flag)
{
	struct kw_mpa_frame f;
	struct kw_mpa_cfg ini = { .rev = 2 };
	struct kw_mpa_result r;
	u8 b[24];

	memcpy(b, cap_rep, 24);
	b[16] |= KW_MPA_FLAG_REJECT;
	ASSERT_EQ(dec(b, true, &f), 0);
	EXPECT_TRUE(f.reject);
	EXPECT_EQ(kw_mpa_negotiate_initiator(&ini, &f, &r), -ECONNREFUSED);
	/* RFC 6581 section 9.1: the ULP sees the IRD/ORD of a Reject too */
	EXPECT_EQ(r.peer_ird, 1);
	EXPECT_EQ(r.peer_ord, 1);
	EXPECT_EQ(r.term, 0);
	/* RFC 5044 section 7.1.1: R in a Request is not checked */
	memcpy(b, cap_req, 24);
	b[16] |= KW_MPA_FLAG_REJECT;
	ASSERT_EQ(kw_mpa_decode_hdr(b, false, &f), 0);
	EXPECT_FALSE(f.reject);
}

TEST(decode_rtr_bits_ignored_without_p2p)
{
	static const u8 pd[4] = { 0x40, 0x05, 0xc0, 0x06 };
	struct kw_mpa_frame f;
	u8 b[24];

	good_hdr(b);
	memcpy(b + 20, pd, 4);
	ASSERT_EQ(dec(b, false, &f), 0);
	EXPECT_FALSE(f.p2p);
	EXPECT_EQ(f.rtr, 0);
	EXPECT_EQ(f.ird, 5);
	EXPECT_EQ(f.ord, 6);
}

/* ---- negotiation ---- */

static struct kw_mpa_frame req_of(struct kw_mpa_cfg c)
{
	struct kw_mpa_frame f;

	kw_mpa_make_request(&c, &f);
	return f;
}

TEST(make_request_rev1_has_no_prefix)
{
	struct kw_mpa_cfg c = { .rev = 1, .crc = true, .p2p = true,
		.rtr = KW_RTR_WRITE, .ird = 4, .ord = 4 };
	struct kw_mpa_frame f = req_of(c);
	u8 b[600];

	EXPECT_FALSE(f.enhanced);
	EXPECT_FALSE(f.p2p);
	EXPECT_EQ(enc(&f, NULL, 0, b), 20);
	EXPECT_EQ(b[16], KW_MPA_FLAG_CRC);
}

TEST(negotiate_revision_matrix)
{
	int ri, rr;

	for (ri = 1; ri <= 2; ri++)
		for (rr = 1; rr <= 2; rr++) {
			struct kw_mpa_cfg ic = { .rev = ri, .ird = 8, .ord = 8 };
			struct kw_mpa_cfg rc = { .rev = rr, .ird = 8, .ord = 8 };
			struct kw_mpa_frame req = req_of(ic), rep;
			struct kw_mpa_result a, b;

			ASSERT_EQ(kw_mpa_negotiate_responder(&req, &rc, &rep,
							     &a), 0);
			/* RFC 6581 section 10: enhanced gets enhanced, even
			 * from a responder set to rev 1 */
			EXPECT_EQ(rep.rev, ri);
			EXPECT_EQ(rep.enhanced, ri == 2);
			ASSERT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &b),
				  0);
			EXPECT_EQ(a.rev, b.rev);
		}
}

/* A rev 2 Request without S to a rev 1 responder gets rev 1 */
TEST(plain_rev2_request_to_rev1_responder)
{
	struct kw_mpa_cfg rc = { .rev = 1, .ird = 8, .ord = 8 };
	struct kw_mpa_frame req = { .rev = 2 }, rep;
	struct kw_mpa_result a;

	ASSERT_EQ(kw_mpa_negotiate_responder(&req, &rc, &rep, &a), 0);
	EXPECT_EQ(rep.rev, 1);
	EXPECT_FALSE(rep.enhanced);
}

TEST(negotiate_crc_matrix)
{
	int ci, cr;

	for (ci = 0; ci < 2; ci++)
		for (cr = 0; cr < 2; cr++) {
			struct kw_mpa_cfg ic = { .rev = 2, .crc = ci };
			struct kw_mpa_cfg rc = { .rev = 2, .crc = cr };
			struct kw_mpa_frame req = req_of(ic), rep;
			struct kw_mpa_result a, b;

			ASSERT_EQ(kw_mpa_negotiate_responder(&req, &rc, &rep,
							     &a), 0);
			EXPECT_EQ(a.crc, ci || cr);
			EXPECT_EQ(rep.crc, ci || cr);
			ASSERT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &b),
				  0);
			EXPECT_EQ(b.crc, ci || cr);
		}
}

/* RFC 5044 section 7.1.1 (C): CRC is on when either side set C */
TEST(initiator_crc_is_either_side)
{
	struct kw_mpa_cfg ic = { .rev = 2, .crc = true };
	struct kw_mpa_frame rep = { .reply = true, .rev = 2, .enhanced = true };
	struct kw_mpa_result r;

	ASSERT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &r), 0);
	EXPECT_TRUE(r.crc);
	ic.crc = false;
	rep.crc = true;
	ASSERT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &r), 0);
	EXPECT_TRUE(r.crc);
}

TEST(initiator_higher_rev_is_error)
{
	struct kw_mpa_cfg ic = { .rev = 1, .crc = true };
	struct kw_mpa_frame rep = { .reply = true, .rev = 2 };
	struct kw_mpa_result r;

	EXPECT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &r), -EPROTO);
	EXPECT_EQ(r.term, KW_TERM_LLP_INV_REQ_RESP);
	EXPECT_TRUE(r.crc);	/* the Terminate is framed with CRC */
}

/* RFC 5044 section 7.1.1: M asks for markers in the FPDUs its sender
 * receives; each direction on its own. */
TEST(markers)
{
	struct kw_mpa_cfg ic = { .rev = 2 }, rc = { .rev = 2 };
	struct kw_mpa_frame req, rep;
	struct kw_mpa_result ri, rr;
	int i;

	for (i = 0; i < 4; i++) {
		ic.markers = i & 1;
		rc.markers = i & 2;
		kw_mpa_make_request(&ic, &req);
		EXPECT_EQ(req.markers, ic.markers);
		ASSERT_EQ(kw_mpa_negotiate_responder(&req, &rc, &rep, &rr), 0);
		EXPECT_FALSE(rep.reject);
		EXPECT_EQ(rep.markers, rc.markers);
		ASSERT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &ri), 0);
		/* the initiator's M is what the responder sends, and back */
		EXPECT_EQ(rr.markers_tx, ic.markers);
		EXPECT_EQ(ri.markers_rx, ic.markers);
		EXPECT_EQ(ri.markers_tx, rc.markers);
		EXPECT_EQ(rr.markers_rx, rc.markers);
	}
}

/*
 * RFC 5044 section 4.5 with markers: EMSS - (6 + 4 * ceil(EMSS / 512) +
 * EMSS mod 4), and whatever the FPDU's stream position, FPDU and markers
 * fit the segment.
 */
TEST(mulpdu_markers)
{
	u32 e, pos;

	EXPECT_EQ(kw_mpa_mulpdu(1460, true), 1460 - (6 + 4 * 3));
	EXPECT_EQ(kw_mpa_mulpdu(1448, true), 1448 - (6 + 4 * 3));
	EXPECT_EQ(kw_mpa_mulpdu(8948, true), 8948 - (6 + 4 * 18));
	EXPECT_EQ(kw_mpa_mulpdu(65483, true), 65483 - (6 + 4 * 128 + 3));
	EXPECT_EQ(kw_mpa_mulpdu(100, true), KW_MPA_MULPDU_MIN);
	for (e = 160; e <= 9000; e++) {
		u32 m = kw_mpa_mulpdu(e, true);

		ASSERT_TRUE(m >= KW_MPA_MULPDU_MIN);
		ASSERT_TRUE(m <= kw_mpa_mulpdu(e, false));
		if (m == KW_MPA_MULPDU_MIN)
			continue;
		for (pos = 0; pos < KW_MPA_MARKER_SPACING; pos += 4)
			ASSERT_TRUE(kw_mpa_wire_len(pos, kw_mpa_fpdu_len(m)) <= e);
	}
}

/* kw_mpa_wire_len() against markers counted one octet at a time */
/* KW_MPA_FPDU_MAX is what kw_mpa_fpdu_len() gives for the largest ULPDU */
TEST(fpdu_max)
{
	u32 l, max = 0;

	for (l = 0; l <= 0xffff; l++)
		if (kw_mpa_fpdu_len(l) > max)
			max = kw_mpa_fpdu_len(l);
	EXPECT_EQ(max, KW_MPA_FPDU_MAX);
}

TEST(wire_len_counts_markers)
{
	u32 pos, len;

	for (pos = 0; pos < 2 * KW_MPA_MARKER_SPACING; pos++)
		for (len = 0; len < 1700; len += (len < 600 ? 1 : 7)) {
			u32 p = pos, left = len;

			while (left) {
				if (!kw_mpa_marker_gap(p))
					p += KW_MPA_MARKER_LEN;
				p++;
				left--;
			}
			ASSERT_EQ(kw_mpa_wire_len(pos, len), p - pos);
		}
	/* modulo 2^32, like TCP sequence numbers */
	EXPECT_EQ(kw_mpa_wire_len(0xfffffffcU, 8), 12);
	EXPECT_EQ(kw_mpa_marker_gap(0xfffffffcU), 4);
}

/*
 * RFC 6581 section 9.2: the responder answers A with A and at least one
 * RTR type, one of those offered if it can; the initiator sends one it
 * offered or terminates with 2/0/7.
 */
TEST(p2p_rtr_choice)
{
	static const struct { u8 offer, accept, reply, want; } m[] = {
		{ KW_RTR_ALL, KW_RTR_ALL, KW_RTR_WRITE, KW_RTR_WRITE },
		{ KW_RTR_READ | KW_RTR_SEND, KW_RTR_ALL, KW_RTR_READ, KW_RTR_READ },
		{ KW_RTR_SEND, KW_RTR_ALL, KW_RTR_SEND, KW_RTR_SEND },
		{ KW_RTR_ALL, KW_RTR_SEND, KW_RTR_SEND, KW_RTR_SEND },
		{ KW_RTR_ALL, KW_RTR_READ | KW_RTR_SEND, KW_RTR_READ, KW_RTR_READ },
		/* nothing in common: the responder names what it takes */
		{ KW_RTR_WRITE, KW_RTR_READ, KW_RTR_READ, 0 },
		{ 0, KW_RTR_ALL, KW_RTR_WRITE, 0 },
		/* a responder that did not ask for P2P accepts any */
		{ KW_RTR_READ, 0, KW_RTR_READ, KW_RTR_READ },
	};
	unsigned int i;

	for (i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
		struct kw_mpa_cfg ic = { .rev = 2, .p2p = true,
					 .rtr = m[i].offer, .ird = 2, .ord = 2 };
		struct kw_mpa_cfg rc = { .rev = 2, .p2p = m[i].accept != 0,
					 .rtr = m[i].accept, .ird = 2, .ord = 2 };
		struct kw_mpa_frame req = req_of(ic), rep, d;
		struct kw_mpa_result a, b;
		u8 buf[600];

		ASSERT_EQ(kw_mpa_negotiate_responder(&req, &rc, &rep, &a), 0);
		EXPECT_TRUE(rep.p2p);
		EXPECT_EQ(rep.rtr, m[i].reply);
		EXPECT_EQ(a.rtr, m[i].reply);
		ASSERT_GT(enc(&rep, NULL, 0, buf), 0);
		ASSERT_EQ(dec(buf, true, &d), 0);
		if (!m[i].want) {
			EXPECT_EQ(kw_mpa_negotiate_initiator(&ic, &d, &b),
				  -EPROTO);
			EXPECT_EQ(b.term, KW_TERM_LLP_NO_MATCHING_RTR);
			continue;
		}
		ASSERT_EQ(kw_mpa_negotiate_initiator(&ic, &d, &b), 0);
		EXPECT_EQ(b.rtr, m[i].want);
		EXPECT_TRUE(b.p2p);
	}
}

/* irdma always sends A; a kiwarp responder that did not opt in to P2P
 * (kiwarp-rping's server) must still accept it (RFC 6581 section 9.2) */
TEST(p2p_request_to_client_server_responder)
{
	/* A, IRD 8 / Read RTR only, ORD 8 */
	static const u8 pd[4] = { 0x80, 0x08, 0x40, 0x08 };
	struct kw_mpa_cfg rc = { .rev = 2, .ird = 16, .ord = 16 };
	struct kw_mpa_frame req, rep;
	struct kw_mpa_result a;
	u8 b[24], out[600];

	good_hdr(b);
	memcpy(b + 20, pd, 4);
	ASSERT_EQ(dec(b, false, &req), 0);
	ASSERT_EQ(kw_mpa_negotiate_responder(&req, &rc, &rep, &a), 0);
	EXPECT_FALSE(rep.reject);
	EXPECT_TRUE(rep.p2p);
	EXPECT_EQ(rep.rtr, KW_RTR_READ);
	EXPECT_TRUE(a.p2p);
	EXPECT_EQ(a.rtr, KW_RTR_READ);
	ASSERT_EQ(enc(&rep, NULL, 0, out), 24);
	EXPECT_EQ(out[20] & 0x80, 0x80);	/* A */
	EXPECT_EQ(out[22], 0x40);		/* D: Read RTR */
}

TEST(initiator_rtr_mismatch)
{
	struct kw_mpa_cfg ic = { .rev = 2, .p2p = true, .rtr = KW_RTR_WRITE };
	struct kw_mpa_frame rep = { .reply = true, .rev = 2, .enhanced = true,
				    .p2p = true, .rtr = KW_RTR_READ };
	struct kw_mpa_result r;

	/* not offered: 2/0/7 */
	EXPECT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &r), -EPROTO);
	EXPECT_EQ(r.term, KW_TERM_LLP_NO_MATCHING_RTR);
	/* several allowed: the initiator picks one it offered */
	rep.rtr = KW_RTR_WRITE | KW_RTR_READ;
	ASSERT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &r), 0);
	EXPECT_EQ(r.rtr, KW_RTR_WRITE);
	ic.rtr = KW_RTR_ALL;
	rep.rtr = KW_RTR_SEND | KW_RTR_READ;
	ASSERT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &r), 0);
	EXPECT_EQ(r.rtr, KW_RTR_READ);
	/* none */
	rep.rtr = 0;
	EXPECT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &r), -EPROTO);
	EXPECT_EQ(r.term, KW_TERM_LLP_NO_MATCHING_RTR);
	/* P2P reply although not requested */
	ic.p2p = false;
	rep.rtr = KW_RTR_WRITE;
	EXPECT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &r), -EPROTO);
	EXPECT_EQ(r.term, KW_TERM_LLP_INV_REQ_RESP);
	/* P2P requested, enhanced reply without it */
	ic.p2p = true;
	rep.p2p = false;
	rep.rtr = 0;
	EXPECT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &r), -EPROTO);
	EXPECT_EQ(r.term, KW_TERM_LLP_NO_MATCHING_RTR);
	/* correct */
	rep.p2p = true;
	rep.rtr = KW_RTR_WRITE;
	EXPECT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &r), 0);
	EXPECT_EQ(r.term, 0);
}

TEST(unenhanced_reply_to_enhanced_request)
{
	/* RFC 6581 section 10: an enhanced responder answers enhanced. A
	 * Reply without S (rev 2) or of rev 1 cannot carry A and an RTR:
	 * with P2P asked for that is Terminate 2/0/7, not a silent
	 * client-server connection. */
	struct kw_mpa_cfg ic = { .rev = 2, .p2p = true, .rtr = KW_RTR_ALL,
				 .ird = 8, .ord = 8 };
	struct kw_mpa_frame rep = { .reply = true, .rev = 2 };
	struct kw_mpa_result r;

	EXPECT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &r), -EPROTO);
	EXPECT_EQ(r.term, KW_TERM_LLP_NO_MATCHING_RTR);
	rep.rev = 1;
	EXPECT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &r), -EPROTO);
	EXPECT_EQ(r.term, KW_TERM_LLP_NO_MATCHING_RTR);
	/* client-server: the fallback section 10 allows, local IRD/ORD,
	 * the peer's unknown */
	ic.p2p = false;
	ic.rtr = 0;
	ASSERT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &r), 0);
	EXPECT_EQ(r.rev, 1);
	EXPECT_FALSE(r.p2p);
	EXPECT_EQ(r.ird, 8);
	EXPECT_EQ(r.ord, 8);
	EXPECT_EQ(r.peer_ird, KW_MPA_IRD_ORD_UNKNOWN);
	EXPECT_EQ(r.peer_ord, KW_MPA_IRD_ORD_UNKNOWN);
}

TEST(ird_ord_negotiation)
{
	struct kw_mpa_cfg ic = { .rev = 2, .ird = 16, .ord = 32 };
	struct kw_mpa_cfg rc = { .rev = 2, .ird = 4, .ord = 64 };
	struct kw_mpa_frame req = req_of(ic), rep;
	struct kw_mpa_result a, b;

	ASSERT_EQ(kw_mpa_negotiate_responder(&req, &rc, &rep, &a), 0);
	EXPECT_EQ(rep.ord, 16);		/* min(local ord 64, req IRD 16) */
	EXPECT_EQ(rep.ird, 4);		/* local IRD */
	EXPECT_EQ(a.ord, 16);
	EXPECT_EQ(a.ird, 4);
	EXPECT_EQ(a.peer_ird, 16);
	EXPECT_EQ(a.peer_ord, 32);
	ASSERT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &b), 0);
	EXPECT_EQ(b.ord, 4);		/* min(local ord 32, reply IRD 4) */
	EXPECT_EQ(b.ird, 16);
	EXPECT_EQ(b.peer_ird, 4);
	EXPECT_EQ(b.peer_ord, 16);
	/* big values clamp to 14 bits, never to "no negotiation" */
	rc.ird = 0xffff;
	ASSERT_EQ(kw_mpa_negotiate_responder(&req, &rc, &rep, &a), 0);
	EXPECT_EQ(rep.ird, KW_MPA_V2_MASK - 1);
}

/* RFC 6581 section 9.1: the initiator's IRD at least the responder's ORD,
 * raised within what it can have, else Terminate 2/0/6 */
TEST(initiator_raises_ird)
{
	struct kw_mpa_cfg ic = { .rev = 2, .ird = 4, .ord = 4, .ird_max = 128 };
	struct kw_mpa_frame rep = { .reply = true, .rev = 2, .enhanced = true,
				    .ird = 8, .ord = 32 };
	struct kw_mpa_result r;

	ASSERT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &r), 0);
	EXPECT_EQ(r.ird, 32);
	EXPECT_EQ(r.ord, 4);
	rep.ord = 129;
	EXPECT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &r), -EPROTO);
	EXPECT_EQ(r.term, KW_TERM_LLP_INSUFFICIENT_IRD);
	ic.ird_max = 0;		/* cannot raise at all */
	rep.ord = 5;
	EXPECT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &r), -EPROTO);
	EXPECT_EQ(r.term, KW_TERM_LLP_INSUFFICIENT_IRD);
}

/* RFC 6581 section 9.1: 0x3FFF = "no automatic negotiation" */
TEST(ird_ord_all_ones)
{
	struct kw_mpa_cfg rc = { .rev = 2, .ird = 4, .ord = 6 };
	struct kw_mpa_cfg ic = { .rev = 2, .ird = 3, .ord = 5 };
	struct kw_mpa_frame req = { .rev = 2, .enhanced = true,
				    .ird = KW_MPA_V2_MASK, .ord = 2 }, rep;
	struct kw_mpa_result a;

	/* initiator IRD all ones: responder ORD unchanged, Reply ORD 0x3FFF */
	ASSERT_EQ(kw_mpa_negotiate_responder(&req, &rc, &rep, &a), 0);
	EXPECT_EQ(rep.ord, KW_MPA_V2_MASK);
	EXPECT_EQ(a.ord, 6);
	EXPECT_EQ(rep.ird, 4);
	/* initiator ORD all ones: responder IRD unchanged, Reply IRD 0x3FFF */
	req.ird = 2;
	req.ord = KW_MPA_V2_MASK;
	ASSERT_EQ(kw_mpa_negotiate_responder(&req, &rc, &rep, &a), 0);
	EXPECT_EQ(rep.ird, KW_MPA_V2_MASK);
	EXPECT_EQ(a.ird, 4);
	EXPECT_EQ(rep.ord, 2);
	EXPECT_EQ(a.ord, 2);
	/* the initiator keeps its values on a Reply of all ones */
	rep = (struct kw_mpa_frame){ .reply = true, .rev = 2, .enhanced = true,
				     .ird = KW_MPA_V2_MASK,
				     .ord = KW_MPA_V2_MASK };
	ASSERT_EQ(kw_mpa_negotiate_initiator(&ic, &rep, &a), 0);
	EXPECT_EQ(a.ird, 3);
	EXPECT_EQ(a.ord, 5);
}

TEST(rev1_request_to_rev2_responder)
{
	struct kw_mpa_cfg ic = { .rev = 1, .crc = false };
	struct kw_mpa_cfg rc = { .rev = 2, .p2p = true, .rtr = 7, .ird = 3,
				 .ord = 3 };
	struct kw_mpa_frame req = req_of(ic), rep;
	struct kw_mpa_result a;
	u8 b[600];

	ASSERT_EQ(kw_mpa_negotiate_responder(&req, &rc, &rep, &a), 0);
	EXPECT_EQ(rep.rev, 1);
	EXPECT_FALSE(rep.enhanced);
	EXPECT_FALSE(a.p2p);
	EXPECT_EQ(enc(&rep, NULL, 0, b), 20);
	EXPECT_EQ(b[17], 1);
}

TEST(mulpdu)
{
	EXPECT_EQ(kw_mpa_mulpdu(1460, false), 1454);
	EXPECT_EQ(kw_mpa_mulpdu(1461, false), 1454);
	EXPECT_EQ(kw_mpa_mulpdu(1463, false), 1454);
	EXPECT_EQ(kw_mpa_mulpdu(1464, false), 1458);
	EXPECT_EQ(kw_mpa_mulpdu(65483, false), 65483 - 6 - 65483 % 4);
	/* RFC 5044 section 4.5: never below 128 octets */
	EXPECT_EQ(kw_mpa_mulpdu(48, false), KW_MPA_MULPDU_MIN);
	EXPECT_EQ(kw_mpa_mulpdu(8, false), KW_MPA_MULPDU_MIN);
	EXPECT_EQ(kw_mpa_mulpdu(0, false), KW_MPA_MULPDU_MIN);
	/* the definition: 2 + M + pad + 4 fits, M + 1 does not */
	{
		u32 e;

		for (e = 8; e < 3000; e++) {
			u32 m = kw_mpa_mulpdu(e, false);

			ASSERT_GE(m, KW_MPA_MULPDU_MIN);
			ASSERT_EQ((2 + m + kw_mpa_pad(m)) % 4, 0);
			if (m == KW_MPA_MULPDU_MIN &&
			    2 + m + kw_mpa_pad(m) + 4 > e)
				continue;
			ASSERT_LE(2 + m + kw_mpa_pad(m) + 4, e);
			ASSERT_GT(2 + (m + 1) + kw_mpa_pad(m + 1) + 4, e);
		}
	}
}
