// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * User-space CRC32c (Castagnoli, reflected polynomial 0x82f63b78) for the
 * unit tests and fuzzers: the raw table-driven update, no pre/post
 * inversion, same contract as the kernel's crc32c().
 */
#include "kw_compat.h"

static u32 table[8][256];
static int table_ready;

static void build(void)
{
	u32 i, j, c;

	for (i = 0; i < 256; i++) {
		c = i;
		for (j = 0; j < 8; j++)
			c = (c & 1) ? (c >> 1) ^ 0x82f63b78U : c >> 1;
		table[0][i] = c;
	}
	/* slice-by-8: table[k][i] = CRC of byte i followed by k zero bytes */
	for (i = 0; i < 256; i++)
		for (j = 1; j < 8; j++)
			table[j][i] = (table[j - 1][i] >> 8) ^
				      table[0][table[j - 1][i] & 0xff];
	table_ready = 1;
}

u32 kw_crc32c(u32 crc, const void *p, size_t len)
{
	const u8 *b = p;

	if (!table_ready)
		build();
	while (len >= 8) {
		u32 lo = crc ^ ((u32)b[0] | (u32)b[1] << 8 | (u32)b[2] << 16 |
				(u32)b[3] << 24);
		u32 hi = (u32)b[4] | (u32)b[5] << 8 | (u32)b[6] << 16 |
			 (u32)b[7] << 24;

		crc = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^
		      table[5][(lo >> 16) & 0xff] ^ table[4][lo >> 24] ^
		      table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
		      table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
		b += 8;
		len -= 8;
	}
	while (len--)
		crc = (crc >> 8) ^ table[0][(crc ^ *b++) & 0xff];
	return crc;
}
