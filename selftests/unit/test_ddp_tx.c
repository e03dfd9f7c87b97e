// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* DDP header codec and transmit segmentation (RFC 5041 section 5). */
#include "harness.h"
#include "testlib.h"

TEST(hdr_tagged_roundtrip)
{
	struct kw_ddp_hdr h = { .tagged = true, .last = true,
		.opcode = KW_OP_READ_RESP, .stag = 0x11223344,
		.to = 0x0102030405060708ULL }, d;
	struct kw_term t;
	u8 b[18];
	static const u8 want[14] = { 0xc1, 0x42, 0x11, 0x22, 0x33, 0x44,
		1, 2, 3, 4, 5, 6, 7, 8 };

	ASSERT_EQ(kw_ddp_hdr_encode(&h, b), 14);
	ASSERT_MEMEQ(b, want, 14);
	ASSERT_EQ(kw_ddp_hdr_decode(b, 14, &d, &t), 0);
	EXPECT_TRUE(d.tagged);
	EXPECT_TRUE(d.last);
	EXPECT_EQ(d.opcode, KW_OP_READ_RESP);
	EXPECT_EQ(d.stag, 0x11223344);
	EXPECT_EQ(d.to, 0x0102030405060708ULL);
	EXPECT_EQ(d.hdr_len, 14);
}

TEST(hdr_untagged_roundtrip)
{
	struct kw_ddp_hdr h = { .opcode = KW_OP_SEND_INV, .inv_stag = 0xabcd,
		.qn = 0, .msn = 5, .mo = 0x1000 }, d;
	struct kw_term t;
	u8 b[18];
	static const u8 want[18] = { 0x01, 0x44, 0, 0, 0xab, 0xcd, 0, 0, 0, 0,
		0, 0, 0, 5, 0, 0, 0x10, 0 };

	ASSERT_EQ(kw_ddp_hdr_encode(&h, b), 18);
	ASSERT_MEMEQ(b, want, 18);
	ASSERT_EQ(kw_ddp_hdr_decode(b, 18, &d, &t), 0);
	EXPECT_FALSE(d.tagged);
	EXPECT_FALSE(d.last);
	EXPECT_EQ(d.inv_stag, 0xabcd);
	EXPECT_EQ(d.msn, 5);
	EXPECT_EQ(d.mo, 0x1000);
	EXPECT_EQ(d.hdr_len, 18);
}

TEST(hdr_decode_needs_more)
{
	struct kw_ddp_hdr h = { .opcode = KW_OP_SEND }, d;
	struct kw_term t;
	u8 b[18];

	kw_ddp_hdr_encode(&h, b);
	EXPECT_EQ(kw_ddp_hdr_decode(b, 0, &d, &t), -EAGAIN);
	EXPECT_EQ(kw_ddp_hdr_decode(b, 1, &d, &t), -EAGAIN);
	EXPECT_EQ(kw_ddp_hdr_decode(b, 17, &d, &t), -EAGAIN);
	EXPECT_EQ(kw_ddp_hdr_decode(b, 18, &d, &t), 0);
}

TEST(hdr_decode_reserved_ignored)
{
	/* RFC 5041 4.2 / RFC 5040 4.1: reserved bits not checked on rx */
	u8 b[14] = { 0x80 | KW_DDP_RSVD_MASK | 1, 0x40 | KW_RDMAP_RSVD_MASK };
	struct kw_ddp_hdr d;
	struct kw_term t;

	EXPECT_EQ(kw_ddp_hdr_decode(b, 14, &d, &t), 0);
}

TEST(seg_zero_length_send)
{
	struct kw_tx_msg m = msg_send(1, 0, false);
	struct kw_tx_fpdu f;
	u32 off = 0;

	ASSERT_EQ(kw_tx_fpdu_next(&m, &off, &f), 0);
	EXPECT_TRUE(f.last);
	EXPECT_EQ(f.hdr_len, 20);
	EXPECT_EQ(get_unaligned_be16(f.hdr), 18);
	EXPECT_EQ(f.hdr[2], 0x41);	/* L, version 1 */
	EXPECT_EQ(f.payload_len, 0);
	EXPECT_EQ(f.trailer_len, 4);	/* 2 + 18 is aligned: no pad */
	EXPECT_EQ(off, 0);
}

TEST(seg_zero_length_write)
{
	struct kw_tx_msg m = msg_write(1, 0, 0, true);
	struct kw_tx_fpdu f;
	u32 off = 0;

	ASSERT_EQ(kw_tx_fpdu_next(&m, &off, &f), 0);
	EXPECT_TRUE(f.last);
	EXPECT_EQ(f.hdr_len, 16);
	EXPECT_EQ(f.hdr[2], 0xc1);
	EXPECT_EQ(f.trailer_len, 4);
	/* a second call after the last FPDU of a zero-length message is
	 * fine only at off 0 (caller's job not to repeat) */
}

TEST(seg_one_byte)
{
	struct kw_tx_msg m = msg_send(3, 1, false);
	struct kw_tx_fpdu f;
	u32 off = 0;

	ASSERT_EQ(kw_tx_fpdu_next(&m, &off, &f), 0);
	EXPECT_TRUE(f.last);
	EXPECT_EQ(get_unaligned_be16(f.hdr), 19);
	EXPECT_EQ(f.payload_len, 1);
	EXPECT_EQ(f.trailer_len, 3 + 4);
	EXPECT_EQ(off, 1);
}

TEST(seg_exact_mulpdu)
{
	struct kw_tx_msg m = msg_send(1, 82, false);
	struct kw_tx_fpdu f;
	u32 off = 0;

	m.mulpdu = 100;
	ASSERT_EQ(kw_tx_fpdu_next(&m, &off, &f), 0);
	EXPECT_TRUE(f.last);
	EXPECT_EQ(get_unaligned_be16(f.hdr), 100);
	EXPECT_EQ(f.payload_len, 82);
	EXPECT_EQ(off, 82);
}

TEST(seg_mulpdu_plus_one)
{
	struct kw_tx_msg m = msg_send(9, 83, false);
	struct kw_tx_fpdu f;
	struct kw_ddp_hdr h;
	struct kw_term t;
	u32 off = 0;

	m.mulpdu = 100;
	ASSERT_EQ(kw_tx_fpdu_next(&m, &off, &f), 0);
	EXPECT_FALSE(f.last);
	EXPECT_EQ(f.payload_len, 82);
	ASSERT_EQ(kw_ddp_hdr_decode(f.hdr + 2, 18, &h, &t), 0);
	EXPECT_FALSE(h.last);
	EXPECT_EQ(h.mo, 0);
	EXPECT_EQ(h.msn, 9);
	ASSERT_EQ(kw_tx_fpdu_next(&m, &off, &f), 0);
	EXPECT_TRUE(f.last);
	EXPECT_EQ(f.payload_off, 82);
	EXPECT_EQ(f.payload_len, 1);
	ASSERT_EQ(kw_ddp_hdr_decode(f.hdr + 2, 18, &h, &t), 0);
	EXPECT_TRUE(h.last);
	EXPECT_EQ(h.mo, 82);
	EXPECT_EQ(h.msn, 9);
	EXPECT_EQ(kw_tx_fpdu_next(&m, &off, &f), -EINVAL);
}

TEST(seg_multi_tagged_to_advances)
{
	struct kw_tx_msg m = msg_write(0x55, 0xfff0, 1000, false);
	struct kw_tx_fpdu f;
	struct kw_ddp_hdr h;
	struct kw_term t;
	u32 off = 0, i = 0, sum = 0;

	m.mulpdu = 114;		/* 100 payload bytes per FPDU */
	do {
		ASSERT_EQ(kw_tx_fpdu_next(&m, &off, &f), 0);
		ASSERT_EQ(kw_ddp_hdr_decode(f.hdr + 2, 14, &h, &t), 0);
		EXPECT_EQ(h.to, 0xfff0 + 100 * i);
		EXPECT_EQ(h.stag, 0x55);
		EXPECT_EQ(f.payload_len, 100);
		EXPECT_EQ(h.last, i == 9);
		EXPECT_EQ(f.last, i == 9);
		sum += f.payload_len;
		i++;
	} while (!f.last && i < 20);
	EXPECT_EQ(i, 10);
	EXPECT_EQ(sum, 1000);
}

TEST(seg_multi_untagged_mo_advances)
{
	struct kw_tx_msg m = msg_send(4, 250, true);
	struct kw_tx_fpdu f;
	struct kw_ddp_hdr h;
	struct kw_term t;
	u32 off = 0, i = 0;
	static const u32 lens[3] = { 100, 100, 50 };

	m.mulpdu = 118;
	do {
		ASSERT_EQ(kw_tx_fpdu_next(&m, &off, &f), 0);
		ASSERT_EQ(kw_ddp_hdr_decode(f.hdr + 2, 18, &h, &t), 0);
		EXPECT_EQ(h.mo, 100 * i);
		EXPECT_EQ(h.msn, 4);
		EXPECT_EQ(f.payload_len, lens[i]);
		i++;
	} while (!f.last && i < 5);
	EXPECT_EQ(i, 3);
}

TEST(seg_read_req_inline)
{
	struct kw_read_req r = { 1, 2, 3, 4, 5 };
	u8 body[KW_READ_REQ_LEN];
	struct kw_tx_msg m = { .opcode = KW_OP_READ_REQ, .mulpdu = 1000,
		.qn = KW_QN_READ_REQ, .msn = 2, .inline_data = body,
		.inline_len = KW_READ_REQ_LEN };
	struct kw_tx_fpdu f;
	u32 off = 0;

	kw_read_req_encode(&r, body);
	ASSERT_EQ(kw_tx_fpdu_next(&m, &off, &f), 0);
	EXPECT_TRUE(f.last);
	EXPECT_EQ(f.hdr_len, 2 + 18 + 28);
	EXPECT_EQ(get_unaligned_be16(f.hdr), 46);
	EXPECT_MEMEQ(f.hdr + 20, body, 28);
	EXPECT_EQ(f.payload_len, 0);
	EXPECT_EQ(f.trailer_len, 4);
	m.inline_len = 27;
	off = 0;
	EXPECT_EQ(kw_tx_fpdu_next(&m, &off, &f), -EINVAL);
}

TEST(seg_terminate_inline)
{
	u8 body[6] = { 0x12, 0x00, 0, 0, 0, 0 };
	struct kw_tx_msg m = { .opcode = KW_OP_TERMINATE, .mulpdu = 1000,
		.qn = KW_QN_TERMINATE, .msn = 1, .inline_data = body,
		.inline_len = 4 };
	struct kw_tx_fpdu f;
	u32 off = 0;

	ASSERT_EQ(kw_tx_fpdu_next(&m, &off, &f), 0);
	EXPECT_EQ(get_unaligned_be16(f.hdr), 22);
	EXPECT_EQ(f.hdr[3], 0x47);
	EXPECT_EQ(f.trailer_len, 4);	/* 2 + 22 is aligned */
}

TEST(seg_invalid_args)
{
	struct kw_tx_msg m = msg_send(1, 10, false);
	struct kw_tx_fpdu f;
	u32 off = 0;

	m.mulpdu = 18;		/* no room for payload */
	EXPECT_EQ(kw_tx_fpdu_next(&m, &off, &f), -EINVAL);
	m.mulpdu = 100;
	off = 11;
	EXPECT_EQ(kw_tx_fpdu_next(&m, &off, &f), -EINVAL);
	m.opcode = 9;
	off = 0;
	EXPECT_EQ(kw_tx_fpdu_next(&m, &off, &f), -EINVAL);
}

TEST(seal_crc_and_zero)
{
	struct kw_tx_msg m = msg_send(1, 1, true);
	struct kw_tx_fpdu f;
	u8 pl = 0x5a, buf[64];
	u32 off = 0, crc;

	ASSERT_EQ(kw_tx_fpdu_next(&m, &off, &f), 0);
	crc = kw_mpa_crc_update(kw_mpa_crc_init(), f.hdr, f.hdr_len);
	crc = kw_mpa_crc_update(crc, &pl, 1);
	kw_tx_fpdu_seal(&m, &f, crc);
	memcpy(buf, f.hdr, f.hdr_len);
	buf[f.hdr_len] = pl;
	memcpy(buf + f.hdr_len + 1, f.trailer, f.trailer_len);
	/* pad is zero; the CRC covers len + ULPDU + pad */
	EXPECT_EQ(buf[21] | buf[22] | buf[23], 0);
	crc = kw_mpa_crc_update(kw_mpa_crc_init(), buf, 24);
	EXPECT_TRUE(kw_mpa_crc_check(crc, buf + 24));
	m.crc = false;
	kw_tx_fpdu_seal(&m, &f, crc);
	EXPECT_EQ(get_unaligned_be32(f.trailer + 3), 0);
}

/* kw_tx_msg_wire_len() against walking every FPDU: opcodes, CRC, MULPDUs
 * around the 4-byte alignment points, lengths 0..3000 and sparse to 200 KB */
static u32 walk_wire_len(const struct kw_tx_msg *m)
{
	struct kw_tx_fpdu f;
	u32 off = 0, len = 0;

	do {
		if (kw_tx_fpdu_next(m, &off, &f))
			return 0;
		len += f.hdr_len + f.payload_len + f.trailer_len;
	} while (!f.last);
	return len;
}

TEST(msg_wire_len_matches_fpdu_walk)
{
	static const u32 mul[] = { 64, 100, 1442, 1443, 1444, 1445, 1446,
				   8000, 65476 };
	static const u8 ops[] = { KW_OP_SEND, KW_OP_WRITE, KW_OP_READ_RESP,
				  KW_OP_SEND_INV };
	unsigned int o, mi;
	u32 len;
	int c;

	for (o = 0; o < sizeof(ops); o++)
		for (c = 0; c < 2; c++)
			for (mi = 0; mi < sizeof(mul) / sizeof(mul[0]); mi++)
				for (len = 0; len < 200000;
				     len += len < 3000 ? 1 : 997) {
					struct kw_tx_msg m = {
						.opcode = ops[o], .crc = c,
						.mulpdu = mul[mi], .len = len,
						.stag = 1, .msn = 1,
					};

					ASSERT_EQ(kw_tx_msg_wire_len(&m),
						  walk_wire_len(&m));
				}
}
