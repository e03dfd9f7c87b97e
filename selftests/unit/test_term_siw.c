// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Terminate interop with Linux siw: siw declares the Terminate control word
 * as a __be32 bit-field, so on x86 it sends Layer in the low nibble of byte
 * 0, EType in the high nibble and M/D/R in bits 0..2 of byte 2. The vectors
 * below are the bytes siw_send_terminate() produces for the errors it
 * reports (siw_qp.c), followed by the DDP/RDMAP headers it copies.
 */
#include "harness.h"
#include "testlib.h"

/* siw control word: layer | etype << 4, ecode, M | D << 1 | R << 2, 0 */
static void siw_ctrl(u8 *p, u8 layer, u8 etype, u8 ecode, bool m, bool d,
		     bool r)
{
	p[0] = (u8)(layer | etype << 4);
	p[1] = ecode;
	p[2] = (u8)((m ? 1 : 0) | (d ? 2 : 0) | (r ? 4 : 0));
	p[3] = 0;
}

TEST(siw_ddp_tagged_base_bounds)
{
	/* inbound RDMA Write beyond the MR: DDP / tagged / base-bounds,
	 * M and D with the 14-byte tagged header */
	u8 b[4 + 2 + 14] = { 0 };
	struct kw_term d;

	siw_ctrl(b, 1, 1, 1, true, true, false);
	put_unaligned_be16(28, b + 4);
	b[6] = KW_DDP_FLAG_TAGGED | KW_DDP_FLAG_LAST | 1;	/* DDP ctrl */
	b[7] = 0x40 | KW_OP_WRITE;
	EXPECT_TRUE(kw_term_siw_layout(b));
	ASSERT_EQ(kw_term_decode(b, sizeof(b), &d), 0);
	EXPECT_EQ(d.layer, KW_TERM_LAYER_DDP);
	EXPECT_EQ(d.etype, KW_TERM_DDP_ETYPE_TAGGED);
	EXPECT_EQ(d.ecode, KW_TERM_DDP_T_BASE_BOUNDS);
	EXPECT_TRUE(d.has_len);
	EXPECT_TRUE(d.has_ddp_hdr);
	EXPECT_FALSE(d.has_rdmap_hdr);
}

TEST(siw_rdmap_remote_protection_read)
{
	/* RDMA Read Request beyond the MR: RDMAP / remote protection /
	 * base-bounds, M, D and R with the Read Request header. The RFC
	 * reading of these bytes would be DDP / catastrophic. */
	u8 b[4 + 2 + 18 + 28] = { 0 };
	struct kw_term d;

	siw_ctrl(b, 0, 1, 1, true, true, true);
	EXPECT_EQ(b[0], 0x10);
	put_unaligned_be16(46, b + 4);
	b[6] = KW_DDP_FLAG_LAST | 1;
	b[7] = 0x40 | KW_OP_READ_REQ;
	EXPECT_TRUE(kw_term_siw_layout(b));
	ASSERT_EQ(kw_term_decode(b, sizeof(b), &d), 0);
	EXPECT_EQ(d.layer, KW_TERM_LAYER_RDMAP);
	EXPECT_EQ(d.etype, KW_TERM_RDMAP_ETYPE_REMOTE_PROT);
	EXPECT_EQ(d.ecode, KW_TERM_RDMAP_BASE_BOUNDS);
	EXPECT_TRUE(d.has_rdmap_hdr);
	/* too short for the headers the flags announce */
	EXPECT_EQ(kw_term_decode(b, sizeof(b) - 1, &d), -EPROTO);
}

TEST(siw_ddp_untagged)
{
	/* Send without a posted receive: DDP / untagged / no buffer */
	u8 b[4 + 2 + 18] = { 0 };
	struct kw_term d;

	siw_ctrl(b, 1, 2, 2, true, true, false);
	EXPECT_EQ(b[0], 0x21);		/* RFC reading: LLP / 1 */
	put_unaligned_be16(20, b + 4);
	b[6] = KW_DDP_FLAG_LAST | 1;
	b[7] = 0x40 | KW_OP_SEND;
	ASSERT_EQ(kw_term_decode(b, sizeof(b), &d), 0);
	EXPECT_EQ(d.layer, KW_TERM_LAYER_DDP);
	EXPECT_EQ(d.etype, KW_TERM_DDP_ETYPE_UNTAGGED);
	EXPECT_EQ(d.ecode, KW_TERM_DDP_U_INV_MSN_NOBUF);
}

TEST(siw_no_flags_is_read_as_rfc)
{
	/* Without M/D/R the layouts cannot be told apart: siw's RDMAP /
	 * remote operation / invalid opcode (no headers) reads as LLP. This
	 * documents the limit (Documentation/interop.md). */
	u8 b[4];
	struct kw_term d;

	siw_ctrl(b, 0, 2, KW_TERM_RDMAP_UNEXP_OPCODE, false, false, false);
	EXPECT_FALSE(kw_term_siw_layout(b));
	ASSERT_EQ(kw_term_decode(b, 4, &d), 0);
	EXPECT_EQ(d.layer, KW_TERM_LAYER_LLP);
	EXPECT_EQ(d.etype, 0);
}

TEST(rfc_layout_never_taken_for_siw)
{
	/* Every Terminate kiwarp encodes decodes as RFC 5040 4.8. */
	static const u8 bad_write[20] = { 0, 18, 0xc1, 0x40 };
	unsigned int layer, etype, f;

	for (layer = 0; layer <= 2; layer++)
		for (etype = 0; etype < 16; etype++)
			for (f = 0; f < 3; f++) {
				struct kw_term t = { (u8)layer, (u8)etype, 3,
					f > 0, f > 1, false }, d;
				u8 out[KW_TERM_MAX_LEN];
				int n = kw_term_encode(&t, bad_write, 20, out);

				ASSERT_TRUE(n > 0);
				EXPECT_FALSE(kw_term_siw_layout(out));
				ASSERT_EQ(kw_term_decode(out, n, &d), 0);
				EXPECT_EQ(d.layer, layer);
				EXPECT_EQ(d.etype, etype);
			}
}

TEST(rfc_reserved_bits_still_ignored)
{
	/* reserved bits set beyond siw's three flags: RFC reading */
	static const u8 rsvd[4] = { 0x12, 0x05, 0x1f, 0xff };
	struct kw_term d;

	EXPECT_FALSE(kw_term_siw_layout(rsvd));
	ASSERT_EQ(kw_term_decode(rsvd, 4, &d), 0);
	EXPECT_EQ(d.layer, 1);
	EXPECT_EQ(d.etype, 2);
}

