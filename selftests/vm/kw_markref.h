// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * A reference for MPA markers (RFC 5044 section 5) written apart from the
 * core's: it inserts them one octet at a time, so that tests can check
 * the core's parser against it (selftests/unit/test_rx.c) and a raw peer
 * can send marked FPDUs to kiwarp (selftests/vm/kw_rnic.c).
 */
#ifndef KW_MARKREF_H
#define KW_MARKREF_H

#include "iwarp.h"

/*
 * Put markers into an unmarked stream of FPDUs (in, n bytes) as a sender
 * starting at stream position start would, one octet at a time: a marker
 * in front of every octet at a multiple of 512, FPDUPTR back to its
 * FPDU's ULPDU Length field (0 for a marker in front of that field, which
 * leads the FPDU), the CRC (if crc) recomputed over the marked FPDU.
 * Marker number bad (counted from 0; -1: none) gets delta added to its
 * FPDUPTR. Returns the marked length.
 */
static inline size_t mark_stream(const u8 *in, size_t n, u32 start,
				 u8 *out, bool crc, int bad, u16 delta)
{
	size_t o = 0, w = 0;
	u32 pos = start;
	int k = 0;

	while (o < n) {
		u32 ulpdu = get_unaligned_be16(in + o), i;
		u32 len = 2 + ulpdu + ((4 - ((ulpdu + 2) & 3)) & 3) + 4;
		u32 hdr = pos;		/* the length field's position */
		size_t fw = w;

		for (i = 0; i < len; i++) {
			if (pos % 512 == 0) {
				u16 ptr = i ? (u16)(pos - hdr) : 0;

				if (!i)		/* it leads the FPDU */
					hdr = pos + 4;

				if (k++ == bad)
					ptr += delta;
				put_unaligned_be16(0, out + w);
				put_unaligned_be16(ptr, out + w + 2);
				w += 4;
				pos += 4;
			}
			out[w++] = in[o + i];
			pos++;
		}
		if (crc)
			kw_mpa_crc_put(kw_mpa_crc_update(kw_mpa_crc_init(),
							 out + fw, w - fw - 4),
				       out + w - 4);
		o += len;
	}
	return w;
}

/*
 * Check a marked stream from its position 0, octet by octet: every octet
 * at a multiple of 512 in front of an FPDU's octet is a marker, reserved
 * half zero, FPDUPTR back to that FPDU's ULPDU Length field (0 for one in
 * front of it); with crc, each FPDU's CRC covers its markers. Counts
 * the whole FPDUs and markers in *nfpdu and *nmk; returns the bytes those
 * FPDUs take (a partial one at the end is left), or -1 at a bad marker
 * or CRC.
 */
static inline long walk_marked(const u8 *w, size_t n, bool crc,
			       unsigned int *nfpdu, unsigned int *nmk)
{
	size_t i = 0, s;

	*nfpdu = *nmk = 0;
	for (;;) {
		u32 got = 0, need = 2, mk = 0;
		size_t hdr;
		u8 len[2];

		s = hdr = i;
		while (got < need) {
			if (i >= n)
				return (long)s;
			if (i % 512 == 0) {
				if (i + 4 > n)
					return (long)s;
				if (get_unaligned_be16(w + i) ||
				    get_unaligned_be16(w + i + 2) !=
				    (i == s ? 0 : i - hdr))
					return -1;
				if (i == s)	/* it leads the FPDU */
					hdr = i + 4;
				mk++;
				i += 4;
				continue;
			}
			if (got < 2)
				len[got] = w[i];
			got++;
			i++;
			if (got == 2)
				need = 2 + get_unaligned_be16(len) +
				       ((4 - ((get_unaligned_be16(len) + 2) & 3)) & 3) + 4;
		}
		if (crc && !kw_mpa_crc_check(kw_mpa_crc_update(kw_mpa_crc_init(),
							       w + s, i - s - 4),
					     w + i - 4))
			return -1;
		(*nfpdu)++;
		*nmk += mk;
	}
}

#endif /* KW_MARKREF_H */
