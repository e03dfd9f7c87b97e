// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * libFuzzer target for the transmit side: the input describes one or more
 * RDMAP messages (opcode, CRC, MULPDU, length, STag/TO, MSN) and their
 * payload. Each is segmented by kw_tx_fpdu_next(), sealed, and the wire
 * bytes are fed back, in input-chosen chunks, to the receive parser.
 *
 * Properties: segmentation never fails for a valid message, every FPDU
 * fits MULPDU, the bytes add up to kw_tx_msg_wire_len(), and the receiver
 * accepts the stream, places exactly the payload at the right offsets and
 * sees the same headers (opcode, STag, TO, MSN, Read Request fields).
 */
#include <stdlib.h>
#include "iwarp.h"

#define MEM	8192
#define WIRE	(64 * 1024)

struct fctx {
	u8 mem[MEM];		/* sink: tagged MR and receive buffer */
	struct kw_rx_buf buf;
	struct kw_mr_view mr;
	u32 segs;		/* segment_done calls for the current msg */
	bool saw_last;
	struct kw_ddp_hdr last_h;
	u8 inl[KW_TERM_MAX_LEN];
	u32 inl_len;
	u32 placed;
};

static int f_lookup(void *ctx, u32 stag, u8 opcode, struct kw_mr_view *mr)
{
	struct fctx *f = ctx;

	(void)opcode;
	if (stag != f->mr.stag)
		abort();	/* the transmitter wrote another STag */
	*mr = f->mr;
	return 0;
}

static int f_get(void *ctx, u32 msn, const struct kw_rx_buf **buf)
{
	struct fctx *f = ctx;

	(void)msn;
	*buf = &f->buf;
	return 0;
}

static void f_place(void *ctx, void *cookie, u64 off, const void *src,
		    u32 len)
{
	struct fctx *f = ctx;

	if (cookie != f->mem || off > MEM || len > MEM - off)
		abort();
	memcpy(f->mem + off, src, len);
	f->placed += len;
}

static int f_done(void *ctx, const struct kw_ddp_hdr *h, const u8 *payload,
		  u32 placed, struct kw_term *term)
{
	struct fctx *f = ctx;

	(void)term;
	if (f->saw_last)
		abort();	/* a segment after the last one */
	f->segs++;
	if (h->last) {
		f->saw_last = true;
		f->last_h = *h;
	}
	if (payload) {
		if (placed > sizeof(f->inl))
			abort();
		memcpy(f->inl, payload, placed);
		f->inl_len = placed;
	}
	return 0;
}

static const struct kw_rx_ops ops = {
	.lookup_stag = f_lookup, .get_rx_buf = f_get, .place = f_place,
	.segment_done = f_done,
};

struct in {
	const u8 *p;
	size_t n;
};

static u32 take(struct in *in, unsigned int bytes)
{
	u32 v = 0;

	while (bytes--) {
		v <<= 8;
		if (in->n) {
			v |= *in->p++;
			in->n--;
		}
	}
	return v;
}

static const u8 opcodes[] = {
	KW_OP_WRITE, KW_OP_READ_REQ, KW_OP_READ_RESP, KW_OP_SEND,
	KW_OP_SEND_INV, KW_OP_SEND_SE, KW_OP_SEND_SE_INV, KW_OP_TERMINATE,
};

/* one message: returns false when the input is used up */
static bool one_msg(struct in *in, struct fctx *f, struct kw_rx *rx,
		    u32 *msn, bool crc)
{
	static u8 wire[WIRE];
	static u8 payload[MEM];
	u8 inl[KW_TERM_MAX_LEN];
	struct kw_tx_msg m = { .crc = crc };
	struct kw_tx_fpdu fp;
	struct kw_read_req rr, rr2;
	struct kw_term t;
	u32 off = 0, w = 0, chunk, fpdus = 0, i, base;
	bool tagged;

	if (in->n < 4)
		return false;
	m.opcode = opcodes[take(in, 1) & 7];
	m.mulpdu = 20 + take(in, 2) % 9000;	/* > any header */
	chunk = take(in, 1);
	tagged = m.opcode == KW_OP_WRITE || m.opcode == KW_OP_READ_RESP;

	if (m.opcode == KW_OP_READ_REQ) {
		rr = (struct kw_read_req){ .sink_stag = take(in, 4),
			.sink_to = (u64)take(in, 4) << 32 | take(in, 4),
			.size = take(in, 4), .src_stag = take(in, 4),
			.src_to = (u64)take(in, 4) << 32 | take(in, 4) };
		kw_read_req_encode(&rr, inl);
		m.inline_data = inl;
		m.inline_len = KW_READ_REQ_LEN;
		m.qn = 1;
	} else if (m.opcode == KW_OP_TERMINATE) {
		u8 bad[2 + KW_DDP_UNTAGGED_HDR_LEN + KW_READ_REQ_LEN];
		int n;

		t = (struct kw_term){ .layer = take(in, 1) % 3,
			.etype = take(in, 1) & 15, .ecode = take(in, 1) };
		t.has_len = t.layer & 1;
		t.has_ddp_hdr = t.has_len && (t.etype & 1);
		t.has_rdmap_hdr = t.has_ddp_hdr && (t.etype & 2);
		for (i = 0; i < sizeof(bad); i++)
			bad[i] = take(in, 1);
		if (t.has_rdmap_hdr)	/* R follows an untagged header */
			bad[2] &= ~KW_DDP_FLAG_TAGGED;
		n = kw_term_encode(&t, bad, sizeof(bad), inl);
		if (n < 4)
			abort();
		m.inline_data = inl;
		m.inline_len = n;
		m.qn = 2;
	} else {
		m.len = take(in, 2) % MEM;
		if (tagged) {
			m.stag = f->mr.stag;
			m.to = f->mr.base + take(in, 2) % (MEM - m.len + 1);
		} else {
			m.qn = 0;
			m.inv_stag = take(in, 4);
		}
		for (i = 0; i < m.len; i++)
			payload[i] = take(in, 1);
	}
	if (!tagged)
		m.msn = msn[m.qn];

	/* an inline body (Read Request, Terminate) is never split */
	if (m.inline_len &&
	    m.mulpdu < KW_DDP_UNTAGGED_HDR_LEN + m.inline_len)
		m.mulpdu = KW_DDP_UNTAGGED_HDR_LEN + m.inline_len;
	if (kw_tx_msg_wire_len(&m) > WIRE)
		return true;	/* tiny MULPDU on a long message: skip */

	do {
		u32 crcv = kw_mpa_crc_init(), flen;

		if (kw_tx_fpdu_next(&m, &off, &fp))
			abort();	/* a valid message must segment */
		flen = fp.hdr_len + fp.payload_len + fp.trailer_len;
		if (fp.hdr_len < 2 || fp.hdr_len > sizeof(fp.hdr) ||
		    fp.trailer_len > sizeof(fp.trailer) ||
		    fp.payload_off + fp.payload_len > m.len ||
		    flen - 2 - fp.trailer_len > m.mulpdu ||
		    (flen & 3) || w + flen > WIRE)
			abort();
		crcv = kw_mpa_crc_update(crcv, fp.hdr, fp.hdr_len);
		crcv = kw_mpa_crc_update(crcv, payload + fp.payload_off,
					 fp.payload_len);
		kw_tx_fpdu_seal(&m, &fp, crcv);
		memcpy(wire + w, fp.hdr, fp.hdr_len);
		memcpy(wire + w + fp.hdr_len, payload + fp.payload_off,
		       fp.payload_len);
		memcpy(wire + w + fp.hdr_len + fp.payload_len, fp.trailer,
		       fp.trailer_len);
		w += flen;
		fpdus++;
	} while (!fp.last);
	if (w != kw_tx_msg_wire_len(&m) || off != m.len)
		abort();

	/* receive it, in chunks of (chunk + 1) bytes, or at once */
	memset(f->mem, 0xa5, MEM);
	f->segs = 0;
	f->saw_last = false;
	f->placed = 0;
	f->inl_len = 0;
	for (i = 0; i < w;) {
		u32 n = chunk ? chunk + 1 : w;

		if (n > w - i)
			n = w - i;
		if (kw_rx_input(rx, wire + i, n) != n || kw_rx_failed(rx))
			abort();	/* the receiver refused our own FPDUs */
		i += n;
	}
	if (!f->saw_last || f->segs != fpdus || f->placed != m.len)
		abort();
	if (f->last_h.opcode != m.opcode || f->last_h.tagged != tagged)
		abort();
	if (tagged) {
		base = m.to - f->mr.base;
		if (f->last_h.stag != m.stag)
			abort();
	} else {
		base = 0;
		if (f->last_h.qn != m.qn || f->last_h.msn != m.msn)
			abort();
		if ((m.opcode == KW_OP_SEND_INV ||
		     m.opcode == KW_OP_SEND_SE_INV) &&
		    f->last_h.inv_stag != m.inv_stag)
			abort();
		msn[m.qn]++;
	}
	if (m.len && memcmp(f->mem + base, payload, m.len))
		abort();	/* placed bytes differ from the sent ones */
	if (m.opcode == KW_OP_READ_REQ) {
		if (f->inl_len != KW_READ_REQ_LEN)
			abort();
		kw_read_req_decode(f->inl, &rr2);
		if (rr.sink_stag != rr2.sink_stag ||
		    rr.sink_to != rr2.sink_to || rr.size != rr2.size ||
		    rr.src_stag != rr2.src_stag || rr.src_to != rr2.src_to)
			abort();
	} else if (m.opcode == KW_OP_TERMINATE) {
		struct kw_term t2;

		if (f->inl_len != m.inline_len ||
		    memcmp(f->inl, inl, m.inline_len) ||
		    kw_term_decode(f->inl, f->inl_len, &t2))
			abort();
		if (t2.layer != t.layer || t2.etype != t.etype ||
		    t2.ecode != t.ecode || t2.has_len != t.has_len ||
		    t2.has_ddp_hdr != t.has_ddp_hdr ||
		    t2.has_rdmap_hdr != t.has_rdmap_hdr)
			abort();
	}
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct fctx f;
	struct kw_rx rx;
	struct in in = { data, size };
	u32 msn[3] = { 1, 1, 1 };
	bool crc;
	int n = 0;

	if (size < 1)
		return 0;
	crc = take(&in, 1) & 1;
	memset(&f, 0, sizeof(f));
	f.mr = (struct kw_mr_view){ .cookie = f.mem, .stag = 0x1234,
		.pd = 1, .access = KW_ACC_LOCAL_WRITE | KW_ACC_REMOTE_WRITE,
		.valid = true, .base = 0x100000, .len = MEM };
	f.buf.num_sge = 1;
	f.buf.sge[0].mr = f.mr;
	f.buf.sge[0].addr = f.mr.base;
	f.buf.sge[0].len = MEM;
	f.buf.total = MEM;
	kw_rx_init(&rx, &ops, &f, crc, 1);
	while (n++ < 8 && one_msg(&in, &f, &rx, msn, crc))
		;
	return 0;
}
