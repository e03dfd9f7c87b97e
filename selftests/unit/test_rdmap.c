// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* RDMAP opcode table, Read Request and Terminate codecs (RFC 5040). */
#include "harness.h"
#include "testlib.h"

TEST(opcode_table)
{
	int op;

	for (op = 0; op < 16; op++) {
		bool t = op == KW_OP_WRITE || op == KW_OP_READ_RESP;
		bool u = op == KW_OP_READ_REQ || (op >= KW_OP_SEND &&
						  op <= KW_OP_TERMINATE);

		EXPECT_EQ(kw_rdmap_opcode_valid(op, true), t);
		EXPECT_EQ(kw_rdmap_opcode_valid(op, false), u);
	}
}

TEST(read_req_layout)
{
	struct kw_read_req r = { .sink_stag = 0x01020304,
		.sink_to = 0x1112131415161718ULL, .size = 0x21222324,
		.src_stag = 0x31323334, .src_to = 0x4142434445464748ULL }, d;
	static const u8 want[28] = { 1, 2, 3, 4, 0x11, 0x12, 0x13, 0x14,
		0x15, 0x16, 0x17, 0x18, 0x21, 0x22, 0x23, 0x24, 0x31, 0x32,
		0x33, 0x34, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48 };
	u8 b[28];

	kw_read_req_encode(&r, b);
	ASSERT_MEMEQ(b, want, 28);
	kw_read_req_decode(b, &d);
	EXPECT_EQ(d.sink_stag, r.sink_stag);
	EXPECT_EQ(d.sink_to, r.sink_to);
	EXPECT_EQ(d.size, r.size);
	EXPECT_EQ(d.src_stag, r.src_stag);
	EXPECT_EQ(d.src_to, r.src_to);
}

/* a Write FPDU (len + 14-byte header + payload) and a Read Request one */
static const u8 bad_write[20] = { 0, 18, 0xc1, 0x40, 0, 0, 1, 0, 0, 0, 0,
	0, 0, 0, 0x10, 0, 0xaa, 0xbb, 0xcc, 0xdd };
static u8 bad_rreq[48];

static void mk_rreq(void)
{
	struct kw_ddp_hdr h = { .last = true, .opcode = KW_OP_READ_REQ,
		.qn = 1, .msn = 7 };
	struct kw_read_req r = { 1, 2, 3, 4, 5 };

	put_unaligned_be16(46, bad_rreq);
	kw_ddp_hdr_encode(&h, bad_rreq + 2);
	kw_read_req_encode(&r, bad_rreq + 20);
}

TEST(term_control_only)
{
	struct kw_term t = { .layer = KW_TERM_LAYER_RDMAP,
		.etype = KW_TERM_RDMAP_ETYPE_CATASTROPHIC, .ecode = 0 }, d;
	u8 out[KW_TERM_MAX_LEN];

	ASSERT_EQ(kw_term_encode(&t, NULL, 0, out), 4);
	EXPECT_EQ(get_unaligned_be32(out), 0x00000000);
	t.layer = KW_TERM_LAYER_LLP;
	t.etype = KW_TERM_LLP_ETYPE_MPA;
	t.ecode = KW_TERM_LLP_CRC;
	ASSERT_EQ(kw_term_encode(&t, NULL, 0, out), 4);
	EXPECT_EQ(get_unaligned_be32(out), 0x20020000);
	ASSERT_EQ(kw_term_decode(out, 4, &d), 0);
	EXPECT_EQ(d.layer, 2);
	EXPECT_EQ(d.etype, 0);
	EXPECT_EQ(d.ecode, 2);
	EXPECT_FALSE(d.has_len);
}

TEST(term_layout_tagged)
{
	struct kw_term t = { .layer = KW_TERM_LAYER_DDP,
		.etype = KW_TERM_DDP_ETYPE_TAGGED,
		.ecode = KW_TERM_DDP_T_BASE_BOUNDS, .has_len = true,
		.has_ddp_hdr = true }, d;
	u8 out[KW_TERM_MAX_LEN];

	ASSERT_EQ(kw_term_encode(&t, bad_write, sizeof(bad_write), out),
		  4 + 2 + 14);
	/* Layer 1 | EType 1, code 1, M|D */
	EXPECT_EQ(out[0], 0x11);
	EXPECT_EQ(out[1], 0x01);
	EXPECT_EQ(out[2], 0xc0);
	EXPECT_EQ(out[3], 0x00);
	EXPECT_MEMEQ(out + 4, bad_write, 16);
	ASSERT_EQ(kw_term_decode(out, 20, &d), 0);
	EXPECT_EQ(d.layer, t.layer);
	EXPECT_EQ(d.etype, t.etype);
	EXPECT_EQ(d.ecode, t.ecode);
	EXPECT_TRUE(d.has_len);
	EXPECT_TRUE(d.has_ddp_hdr);
	EXPECT_FALSE(d.has_rdmap_hdr);
	EXPECT_EQ(kw_term_decode(out, 19, &d), -EPROTO);
}

TEST(term_layout_read_request)
{
	struct kw_term t = { .layer = KW_TERM_LAYER_RDMAP,
		.etype = KW_TERM_RDMAP_ETYPE_REMOTE_PROT,
		.ecode = KW_TERM_RDMAP_ACCESS, .has_len = true,
		.has_ddp_hdr = true, .has_rdmap_hdr = true }, d;
	u8 out[KW_TERM_MAX_LEN];

	mk_rreq();
	ASSERT_EQ(kw_term_encode(&t, bad_rreq, 48, out), 52);
	EXPECT_EQ(out[0], 0x01);
	EXPECT_EQ(out[1], 0x02);
	EXPECT_EQ(out[2], 0xe0);
	EXPECT_MEMEQ(out + 4, bad_rreq, 48);
	ASSERT_EQ(kw_term_decode(out, 52, &d), 0);
	EXPECT_TRUE(d.has_rdmap_hdr);
	EXPECT_EQ(d.ecode, 2);
	EXPECT_EQ(kw_term_decode(out, 51, &d), -EPROTO);
	/* not enough bytes for R */
	EXPECT_EQ(kw_term_encode(&t, bad_rreq, 47, out), -EINVAL);
	/* R on a tagged header */
	EXPECT_EQ(kw_term_encode(&t, bad_write, 20, out), -EINVAL);
}

TEST(term_encode_rejects_inconsistent_flags)
{
	struct kw_term t = { .layer = 1, .has_ddp_hdr = true };
	u8 out[KW_TERM_MAX_LEN];

	EXPECT_EQ(kw_term_encode(&t, bad_write, 20, out), -EINVAL);
	t = (struct kw_term){ .layer = 1, .has_len = true,
			      .has_rdmap_hdr = true };
	EXPECT_EQ(kw_term_encode(&t, bad_write, 20, out), -EINVAL);
	t = (struct kw_term){ .layer = 1, .has_len = true,
			      .has_ddp_hdr = true };
	EXPECT_EQ(kw_term_encode(&t, bad_write, 10, out), -EINVAL);
	t = (struct kw_term){ .layer = 16 };
	EXPECT_EQ(kw_term_encode(&t, NULL, 0, out), -EINVAL);
}

TEST(term_len_only)
{
	struct kw_term t = { .layer = 1, .etype = 2, .ecode = 1,
			     .has_len = true }, d;
	u8 out[KW_TERM_MAX_LEN];

	ASSERT_EQ(kw_term_encode(&t, bad_write, 2, out), 6);
	EXPECT_EQ(out[2], 0x80);
	EXPECT_EQ(get_unaligned_be16(out + 4), 18);
	ASSERT_EQ(kw_term_decode(out, 6, &d), 0);
	EXPECT_TRUE(d.has_len);
	EXPECT_FALSE(d.has_ddp_hdr);
}

TEST(term_decode_malformed)
{
	static const u8 short3[3] = { 0x10, 0, 0 };
	static const u8 layer3[4] = { 0x30, 0, 0, 0 };
	static const u8 d_no_m[24] = { 0x10, 0, 0x40, 0 };
	static const u8 r_no_d[40] = { 0x10, 0, 0xa0, 0 };
	static const u8 rsvd[4] = { 0x12, 0x05, 0x1f, 0xff };
	struct kw_term d;

	EXPECT_EQ(kw_term_decode(short3, 3, &d), -EPROTO);
	EXPECT_EQ(kw_term_decode(layer3, 4, &d), -EPROTO);
	/* D without M is legal (RFC 5040 section 4.8): test_rx's
	 * terminate_d_without_m */
	EXPECT_EQ(kw_term_decode(d_no_m, 24, &d), 0);
	EXPECT_TRUE(d.has_ddp_hdr);
	EXPECT_EQ(kw_term_decode(r_no_d, 40, &d), -EPROTO);
	/* reserved bits ignored */
	ASSERT_EQ(kw_term_decode(rsvd, 4, &d), 0);
	EXPECT_EQ(d.layer, 1);
	EXPECT_EQ(d.etype, 2);
	EXPECT_EQ(d.ecode, 5);
}

TEST(term_every_rx_code_roundtrips)
{
	static const u8 codes[][3] = {
		{ 0, 0, 0 }, { 0, 1, 0 }, { 0, 1, 1 }, { 0, 1, 2 }, { 0, 1, 3 },
		{ 0, 1, 4 }, { 0, 1, 9 }, { 0, 1, 0xff }, { 0, 2, 0 },
		{ 0, 2, 1 }, { 0, 2, 2 }, { 0, 2, 3 }, { 0, 2, 5 }, { 1, 0, 0 },
		{ 1, 1, 0 }, { 1, 1, 1 }, { 1, 1, 2 }, { 1, 1, 3 }, { 1, 1, 4 },
		{ 1, 2, 1 }, { 1, 2, 2 }, { 1, 2, 3 }, { 1, 2, 4 }, { 1, 2, 5 },
		{ 1, 2, 6 }, { 2, 0, 1 }, { 2, 0, 2 }, { 2, 0, 3 }, { 2, 0, 4 },
		{ 2, 0, 5 }, { 2, 0, 6 }, { 2, 0, 7 } };
	unsigned int i;

	for (i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		struct kw_term t = { codes[i][0], codes[i][1], codes[i][2],
				     true, true, false }, d;
		u8 out[KW_TERM_MAX_LEN];
		int n = kw_term_encode(&t, bad_write, 20, out);

		ASSERT_EQ(n, 20);
		EXPECT_EQ(out[0], codes[i][0] << 4 | codes[i][1]);
		ASSERT_EQ(kw_term_decode(out, n, &d), 0);
		EXPECT_EQ(d.layer, t.layer);
		EXPECT_EQ(d.etype, t.etype);
		EXPECT_EQ(d.ecode, t.ecode);
	}
}

TEST(rdmap_error_codes_are_rfc5040_values)
{
	/* RFC 5040 section 7.2: one code list shared by the remote
	 * protection and remote operation error types (siw agrees). */
	EXPECT_EQ(KW_TERM_RDMAP_INV_STAG, 0x00);
	EXPECT_EQ(KW_TERM_RDMAP_BASE_BOUNDS, 0x01);
	EXPECT_EQ(KW_TERM_RDMAP_ACCESS, 0x02);
	EXPECT_EQ(KW_TERM_RDMAP_STAG_NOT_ASSOC, 0x03);
	EXPECT_EQ(KW_TERM_RDMAP_TO_WRAP, 0x04);
	EXPECT_EQ(KW_TERM_RDMAP_INV_VERSION, 0x05);
	EXPECT_EQ(KW_TERM_RDMAP_UNEXP_OPCODE, 0x06);
	EXPECT_EQ(KW_TERM_RDMAP_CATASTROPHIC_STREAM, 0x07);
	EXPECT_EQ(KW_TERM_RDMAP_CATASTROPHIC_GLOBAL, 0x08);
	EXPECT_EQ(KW_TERM_RDMAP_STAG_CANT_INV, 0x09);
	EXPECT_EQ(KW_TERM_RDMAP_UNSPECIFIED, 0xff);
	/* RFC 5041 section 7.2 */
	EXPECT_EQ(KW_TERM_DDP_T_INV_VERSION, 0x04);
	EXPECT_EQ(KW_TERM_DDP_U_INV_VERSION, 0x06);
	EXPECT_EQ(KW_TERM_LLP_CRC, 0x02);
}
