// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * libFuzzer target for the Terminate codec. The input is a received
 * Terminate payload. Whatever kw_term_decode() accepts must be within the
 * bytes it was given, and (RFC layout, headers it can re-encode) encode
 * back to the same control fields and copied headers.
 */
#include <stdlib.h>
#include "iwarp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	u8 out[KW_TERM_MAX_LEN];
	struct kw_term t, t2;
	bool tagged;
	int n;

	if (kw_term_decode(data, size, &t))
		return 0;
	if (t.layer > KW_TERM_LAYER_LLP || size < 4 ||
	    (t.has_rdmap_hdr && !t.has_ddp_hdr))
		abort();	/* accepted something inconsistent */
	/* D without M: legal to receive (RFC 5040 section 4.8), with the
	 * length field present; kiwarp never sends it */
	if (t.has_ddp_hdr && !t.has_len)
		return size >= 6 ? 0 : (abort(), 0);
	if (kw_term_siw_layout(data))
		return 0;	/* siw's bit order: decoded, not re-encoded */
	tagged = t.has_ddp_hdr && size > 6 &&
		 (data[6] & KW_DDP_FLAG_TAGGED);
	n = kw_term_encode(&t, data + 4, size - 4, out);
	if (t.has_rdmap_hdr && tagged) {
		if (n >= 0)
			abort();	/* R after a tagged header is invalid */
		return 0;
	}
	if (n < 4 || (size_t)n > size)
		abort();
	if (out[0] != data[0] || out[1] != data[1] ||
	    memcmp(out + 4, data + 4, n - 4))
		abort();
	if (kw_term_decode(out, n, &t2) || memcmp(&t, &t2, sizeof(t)))
		abort();
	return 0;
}
