// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * libFuzzer target for MPA connection setup. Input byte 0 picks the local
 * configuration, the rest is a Request (decoded by the responder path)
 * and, in the same bytes, a Reply (decoded by the initiator path).
 */
#include <stdlib.h>
#include "iwarp.h"

static void cfg_of(u8 b, struct kw_mpa_cfg *c)
{
	c->rev = (b & 1) ? 2 : 1;
	c->crc = b & 2;
	c->p2p = b & 4;
	c->rtr = (b >> 3) & 7;
	c->ird = (b >> 6) ? 0x3fff : 1;
	c->ord = (b & 0x80) ? 16 : 0;
	c->markers = b & 0x40;
}

static void check_frame(const struct kw_mpa_frame *f, const u8 *pd)
{
	u8 out[KW_MPA_HDR_LEN + KW_MPA_MAX_PD];
	struct kw_mpa_frame g;
	int n;

	if (f->ulp_pd_len > f->pd_len)
		abort();
	if (f->ulp_pd_len && (f->ulp_pd < pd ||
			      f->ulp_pd + f->ulp_pd_len > pd + f->pd_len))
		abort();
	/* every decoded frame re-encodes to the same length */
	n = kw_mpa_encode(f, f->ulp_pd, f->ulp_pd_len, out, sizeof(out));
	if (n != KW_MPA_HDR_LEN + f->pd_len)
		abort();
	if (kw_mpa_decode_hdr(out, f->reply, &g) ||
	    kw_mpa_decode_pd(&g, out + KW_MPA_HDR_LEN))
		abort();
	if (g.rev != f->rev || g.crc != f->crc || g.p2p != f->p2p ||
	    g.rtr != f->rtr || g.ird != f->ird || g.ord != f->ord)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kw_mpa_cfg local;
	struct kw_mpa_frame req, rep, d;
	struct kw_mpa_result res;
	u8 out[KW_MPA_HDR_LEN + KW_MPA_MAX_PD];
	int rv, n;
	bool as_reply;

	if (size < 1 + KW_MPA_HDR_LEN)
		return 0;
	cfg_of(data[0], &local);
	data++;
	size--;
	as_reply = data[15] == 'e' && data[8] == 'e' && data[9] == 'p';

	if (kw_mpa_decode_hdr(data, as_reply, &req))
		return 0;
	if (req.pd_len > size - KW_MPA_HDR_LEN)
		return 0;
	if (kw_mpa_decode_pd(&req, data + KW_MPA_HDR_LEN))
		return 0;
	check_frame(&req, data + KW_MPA_HDR_LEN);

	if (as_reply) {
		rv = kw_mpa_negotiate_initiator(&local, &req, &res);
		if (!rv && (res.rev > 2 || (res.rtr & (res.rtr - 1))))
			abort();
		return 0;
	}
	rv = kw_mpa_negotiate_responder(&req, &local, &rep, &res);
	if (rv && rv != -ECONNREFUSED)
		abort();
	n = kw_mpa_encode(&rep, NULL, 0, out, sizeof(out));
	if (n < 0)
		abort();	/* the Reply we built must be encodable */
	if (kw_mpa_decode_hdr(out, true, &d) ||
	    kw_mpa_decode_pd(&d, out + KW_MPA_HDR_LEN))
		abort();
	if (rv == 0) {
		struct kw_mpa_cfg ini = { .rev = req.rev, .crc = req.crc,
			.p2p = req.p2p, .rtr = req.rtr, .ird = req.ird,
			.ord = req.ord, .markers = req.markers };
		struct kw_mpa_result r2;

		/*
		 * The initiator that sent this Request accepts our Reply,
		 * unless it offered no RTR type we take: then the Reply
		 * names one we do and that initiator terminates with 2/0/7
		 * (RFC 6581 section 9.2).
		 */
		rv = kw_mpa_negotiate_initiator(&ini, &d, &r2);
		if (d.p2p && !(d.rtr & req.rtr)) {
			if (rv != -EPROTO ||
			    r2.term != KW_TERM_LLP_NO_MATCHING_RTR)
				abort();
			return 0;
		}
		if (rv)
			abort();
		if (r2.crc != res.crc || r2.rtr != res.rtr ||
		    r2.p2p != res.p2p || r2.rev != res.rev)
			abort();
		/* markers: each side sends what the other asked for */
		if (r2.markers_rx != res.markers_tx ||
		    r2.markers_tx != res.markers_rx)
			abort();
	} else if (!d.reject) {
		abort();
	}
	return 0;
}
