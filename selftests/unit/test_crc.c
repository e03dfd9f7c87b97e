// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* CRC32c vectors (RFC 3720 appendix B.4) and the MPA CRC trailer. */
#include "harness.h"
#include "testlib.h"

static u32 std_crc(const void *p, size_t n)
{
	return ~kw_crc32c(~0U, p, n);
}

TEST(crc32c_zeros)
{
	u8 b[32];

	memset(b, 0, sizeof(b));
	EXPECT_EQ(std_crc(b, 32), 0x8a9136aa);
}

TEST(crc32c_ones)
{
	u8 b[32];

	memset(b, 0xff, sizeof(b));
	EXPECT_EQ(std_crc(b, 32), 0x62a8ab43);
}

TEST(crc32c_incrementing)
{
	u8 b[32];
	int i;

	for (i = 0; i < 32; i++)
		b[i] = i;
	EXPECT_EQ(std_crc(b, 32), 0x46dd794e);
}

TEST(crc32c_decrementing)
{
	u8 b[32];
	int i;

	for (i = 0; i < 32; i++)
		b[i] = 31 - i;
	EXPECT_EQ(std_crc(b, 32), 0x113fdb5c);
}

TEST(crc32c_check_string)
{
	EXPECT_EQ(std_crc("123456789", 9), 0xe3069283);
}

TEST(crc32c_incremental_any_split)
{
	u8 b[100];
	u32 whole, part;
	size_t i, j;

	for (i = 0; i < sizeof(b); i++)
		b[i] = (u8)(i * 31 + 1);
	whole = kw_crc32c(~0U, b, sizeof(b));
	for (i = 0; i <= sizeof(b); i++) {
		part = kw_crc32c(~0U, b, i);
		part = kw_crc32c(part, b + i, sizeof(b) - i);
		ASSERT_EQ(part, whole);
	}
	part = ~0U;
	for (j = 0; j < sizeof(b); j++)
		part = kw_crc32c(part, b + j, 1);
	EXPECT_EQ(part, whole);
}

TEST(mpa_crc_wire_order)
{
	/* RTR frame from siw-rping-crc-p2p.pcapng: zero-length Write to
	 * STag 1, wire CRC bytes eb d3 4c 5f (CRC32c 0x5f4cd3eb). */
	static const u8 fpdu[20] = { 0x00, 0x0e, 0xc1, 0x40, 0, 0, 0, 1,
		0, 0, 0, 0, 0, 0, 0, 0, 0xeb, 0xd3, 0x4c, 0x5f };
	u32 crc = kw_mpa_crc_update(kw_mpa_crc_init(), fpdu, 16);
	u8 out[4];

	EXPECT_EQ(std_crc(fpdu, 16), 0x5f4cd3eb);
	EXPECT_TRUE(kw_mpa_crc_check(crc, fpdu + 16));
	kw_mpa_crc_put(crc, out);
	EXPECT_MEMEQ(out, fpdu + 16, 4);
	out[0] ^= 1;
	EXPECT_FALSE(kw_mpa_crc_check(crc, out));
}

/*
 * RFC 5044 section 4.4 (Figures 5 and 6): the annotated FPDUs, both from a
 * stream with Markers, both a Send (Last) of 24 zero bytes to queue 0. The
 * CRC covers the Markers with the length, ULPDU and pad. Figure 5 is the
 * first FPDU: the stream-start Marker (00 00 00 00) leads it, MSN 1, CRC
 * 52 23 99 83 on the wire. Figure 6 is the second: a Marker (FPDUPTR 0x14)
 * sits in its header, MSN 2, CRC 84 92 58 98.
 */
TEST(rfc5044_figure5)
{
	/* octets 0x0000..0x0033 */
	u8 f[52] = { 0, 0, 0, 0, 0x00, 0x2a, 0x41, 0x43 };
	u32 crc;

	f[0x13] = 1;			/* MSN 1 */
	memcpy(f + 0x30, "\x52\x23\x99\x83", 4);
	crc = kw_mpa_crc_update(kw_mpa_crc_init(), f, 0x30);
	EXPECT_TRUE(kw_mpa_crc_check(crc, f + 0x30));
	/* without the Marker the CRC is not the figure's */
	crc = kw_mpa_crc_update(kw_mpa_crc_init(), f + 4, 0x2c);
	EXPECT_FALSE(kw_mpa_crc_check(crc, f + 0x30));
	/* 2 + 42 is 4-aligned: no pad */
	EXPECT_EQ(kw_mpa_fpdu_len(0x2a), 0x30);
}

TEST(rfc5044_figure6)
{
	/* octets 0x01ec..0x021f */
	u8 f[52] = { 0x00, 0x2a, 0x41, 0x43 };
	u32 crc;

	f[0x1fb - 0x1ec] = 2;		/* MSN 2 */
	f[0x203 - 0x1ec] = 0x14;	/* Marker at 0x200: FPDUPTR 0x14 */
	memcpy(f + 0x21c - 0x1ec, "\x84\x92\x58\x98", 4);
	crc = kw_mpa_crc_update(kw_mpa_crc_init(), f, 0x21c - 0x1ec);
	EXPECT_TRUE(kw_mpa_crc_check(crc, f + 0x21c - 0x1ec));
}
