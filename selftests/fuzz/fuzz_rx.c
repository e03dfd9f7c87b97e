// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * libFuzzer target for the receive parser. Input byte 0: bit 0 = CRC on,
 * bit 1 = "accept any STag" world, bits 2..7 = chunk size (0 = one call).
 * The rest is the TCP byte stream after MPA negotiation.
 */
#include <stdlib.h>
#include "iwarp.h"

struct fctx {
	bool any;
	struct kw_mr_view mr[2];
	u8 mem[2][4096];
	struct kw_rx_buf buf, bad_buf;
	u8 sink[64];
};

static int f_lookup(void *ctx, u32 stag, u8 opcode, struct kw_mr_view *mr)
{
	struct fctx *f = ctx;
	int i;

	(void)opcode;
	if (f->any) {
		/* the glue's other answers, picked by STag bits: another
		 * PD, an invalidated MR, no remote rights */
		*mr = f->mr[0];
		mr->stag = stag;
		if (stag & 0x40000000)
			mr->pd = 2;
		if (stag & 0x20000000)
			mr->valid = false;
		if (stag & 0x10000000)
			mr->access = KW_ACC_LOCAL_WRITE;
		return 0;
	}
	for (i = 0; i < 2; i++)
		if (f->mr[i].stag == stag) {
			*mr = f->mr[i];
			return 0;
		}
	return -ENOENT;
}

static int f_get(void *ctx, u32 msn, const struct kw_rx_buf **buf)
{
	struct fctx *f = ctx;

	if (msn & 0x100)
		return -ENOENT;
	/* a buffer whose MR was invalidated, or is of another PD */
	*buf = (msn & 0x200) ? &f->bad_buf : &f->buf;
	return 0;
}

static void f_place(void *ctx, void *cookie, u64 off, const void *src,
		    u32 len)
{
	(void)ctx;
	/* the core promised bounds: any violation is a fuzzer finding */
	if (off > 4096 || len > 4096 - off)
		abort();
	memcpy((u8 *)cookie + off, src, len);
}

static int f_done(void *ctx, const struct kw_ddp_hdr *h, const u8 *payload,
		  u32 placed, struct kw_term *term)
{
	struct kw_term t;

	(void)ctx;
	if (h->opcode == KW_OP_TERMINATE && payload)
		kw_term_decode(payload, placed, &t);
	if (h->opcode == KW_OP_READ_REQ) {
		struct kw_read_req r;

		if (!payload || placed != KW_READ_REQ_LEN)
			abort();
		kw_read_req_decode(payload, &r);
		if (r.size & 0x80000000U) {	/* pretend IRD exceeded */
			term->layer = KW_TERM_LAYER_RDMAP;
			term->etype = KW_TERM_RDMAP_ETYPE_REMOTE_OP;
			term->ecode = KW_TERM_RDMAP_CATASTROPHIC_STREAM;
			return -EPROTO;
		}
	}
	return 0;
}

static const struct kw_rx_ops ops = {
	.lookup_stag = f_lookup, .get_rx_buf = f_get, .place = f_place,
	.segment_done = f_done,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct fctx f;
	struct kw_rx rx;
	size_t done = 0, step;
	u8 out[KW_TERM_MAX_LEN];

	if (size < 1)
		return 0;
	memset(&f, 0, sizeof(f));
	f.any = data[0] & 2;
	step = (data[0] >> 2) & 31;	/* bit 7: markers */
	f.mr[0] = (struct kw_mr_view){ .cookie = f.mem[0], .stag = 1, .pd = 1,
		.access = 7, .valid = true, .base = 0, .len = 4096 };
	f.mr[1] = (struct kw_mr_view){ .cookie = f.mem[1], .stag = 0x200,
		.pd = 1, .access = KW_ACC_LOCAL_WRITE, .valid = true,
		.base = 0x10000, .len = 2048 };
	f.buf.num_sge = 3;
	f.buf.sge[0].mr = f.mr[1];
	f.buf.sge[0].addr = 0x10000;
	f.buf.sge[0].len = 7;
	f.buf.sge[1].mr = f.mr[1];
	f.buf.sge[1].addr = 0x10100;
	f.buf.sge[1].len = 1000;
	f.buf.sge[2].mr = f.mr[1];
	f.buf.sge[2].addr = 0x10000 + 2048 - 500;
	f.buf.sge[2].len = 500;
	f.buf.total = 1507;
	f.bad_buf = f.buf;
	f.bad_buf.sge[1].mr.valid = false;
	f.bad_buf.sge[2].mr.pd = 2;

	kw_rx_init(&rx, &ops, &f, data[0] & 1, 1);
	if (data[0] & 0x80)
		kw_rx_set_markers(&rx);
	data++;
	size--;
	while (done < size) {
		size_t n = step && size - done > step ? step : size - done;
		size_t c = kw_rx_input(&rx, data + done, n);

		if (c > n)
			abort();
		done += c;
		if (c < n) {
			if (!kw_rx_failed(&rx))
				abort();
			break;
		}
	}
	/* the marker position follows every byte taken */
	if (rx.markers && rx.mpos != (u32)done)
		abort();
	if (kw_rx_failed(&rx)) {
		if (rx.bad_len > sizeof(rx.bad))
			abort();
		if (kw_term_encode(&rx.term, rx.bad, rx.bad_len, out) < 4)
			abort();	/* the parser's hdrct must be encodable */
	}
	return 0;
}
