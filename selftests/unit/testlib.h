/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Shared fixtures for the unit tests: a tiny "world" of memory regions and
 * a posted receive buffer behind struct kw_rx_ops, a recorder of completed
 * segments, and helpers that build FPDU byte streams with the tx encoder.
 */
#ifndef KW_TESTLIB_H
#define KW_TESTLIB_H

#include "iwarp.h"

#define W_MR 4
#define W_SEG 64

struct world {
	struct kw_mr_view mr[W_MR];
	u8 mem[W_MR][512];
	int nmr;
	struct kw_rx_buf rbuf;
	bool have_rbuf;
	int rbuf_err;		/* get_rx_buf's error when set */
	int nplace, nlookup, nget;
	int nseg;
	struct kw_ddp_hdr seg[W_SEG];
	u32 placed[W_SEG];
	u8 inl[W_SEG][128];
	bool inl_valid[W_SEG];
	int done_ret;
	struct kw_term done_term;
};

static __attribute__((unused)) int w_lookup(void *ctx, u32 stag, u8 opcode, struct kw_mr_view *mr)
{
	struct world *w = ctx;
	int i;

	(void)opcode;
	w->nlookup++;
	for (i = 0; i < w->nmr; i++)
		if (w->mr[i].stag == stag) {
			*mr = w->mr[i];
			return 0;
		}
	return -ENOENT;
}

static __attribute__((unused)) int w_get_rx_buf(void *ctx, u32 msn, const struct kw_rx_buf **buf)
{
	struct world *w = ctx;

	(void)msn;
	w->nget++;
	if (w->rbuf_err)
		return w->rbuf_err;
	if (!w->have_rbuf)
		return -ENOENT;
	*buf = &w->rbuf;
	return 0;
}

static __attribute__((unused)) void w_place(void *ctx, void *cookie, u64 off, const void *src,
		    u32 len)
{
	struct world *w = ctx;
	u8 *mem = cookie;

	w->nplace++;
	if (off + len > sizeof(w->mem[0]))
		abort();	/* the core let an out-of-bounds write through */
	memcpy(mem + off, src, len);
}

static __attribute__((unused)) int w_done(void *ctx, const struct kw_ddp_hdr *h, const u8 *payload,
		  u32 placed, struct kw_term *term)
{
	struct world *w = ctx;

	if (w->nseg < W_SEG) {
		w->seg[w->nseg] = *h;
		w->placed[w->nseg] = placed;
		w->inl_valid[w->nseg] = payload != NULL;
		if (payload && placed <= sizeof(w->inl[0]))
			memcpy(w->inl[w->nseg], payload, placed);
		w->nseg++;
	}
	if (w->done_ret)
		*term = w->done_term;
	return w->done_ret;
}

static __attribute__((unused)) const struct kw_rx_ops w_ops = {
	.lookup_stag = w_lookup,
	.get_rx_buf = w_get_rx_buf,
	.place = w_place,
	.segment_done = w_done,
};

#define W_PD 7
#define W_STAG 0x100		/* Write target: remote write, 256 B at 0x1000 */
#define W_STAG_LOCAL 0x200	/* receive/Read Response memory at 0x2000 */

/* Standard world: two MRs, a posted 2-SGE receive buffer of 110 bytes. */
static __attribute__((unused)) void world_init(struct world *w)
{
	memset(w, 0, sizeof(*w));
	w->nmr = 2;
	w->mr[0] = (struct kw_mr_view){ .cookie = w->mem[0], .stag = W_STAG,
		.pd = W_PD, .access = KW_ACC_LOCAL_WRITE | KW_ACC_REMOTE_WRITE,
		.valid = true, .base = 0x1000, .len = 256 };
	w->mr[1] = (struct kw_mr_view){ .cookie = w->mem[1],
		.stag = W_STAG_LOCAL, .pd = W_PD, .access = KW_ACC_LOCAL_WRITE,
		.valid = true, .base = 0x2000, .len = 256 };
	w->have_rbuf = true;
	w->rbuf.num_sge = 2;
	w->rbuf.sge[0].mr = w->mr[1];
	w->rbuf.sge[0].addr = 0x2000;
	w->rbuf.sge[0].len = 10;
	w->rbuf.sge[1].mr = w->mr[1];
	w->rbuf.sge[1].addr = 0x2080;
	w->rbuf.sge[1].len = 100;
	w->rbuf.total = 110;
}

/* Segment msg (payload in pl) into out; returns bytes written or -1. */
static __attribute__((unused)) int build_msg(const struct kw_tx_msg *msg, const u8 *pl, u8 *out,
		     size_t out_len)
{
	struct kw_tx_fpdu f;
	u32 off = 0;
	size_t n = 0;

	do {
		u32 crc;

		if (kw_tx_fpdu_next(msg, &off, &f))
			return -1;
		if (n + f.hdr_len + f.payload_len + f.trailer_len > out_len)
			return -1;
		crc = kw_mpa_crc_update(kw_mpa_crc_init(), f.hdr, f.hdr_len);
		if (f.payload_len)
			crc = kw_mpa_crc_update(crc, pl + f.payload_off,
						f.payload_len);
		kw_tx_fpdu_seal(msg, &f, crc);
		memcpy(out + n, f.hdr, f.hdr_len);
		n += f.hdr_len;
		if (f.payload_len)
			memcpy(out + n, pl + f.payload_off, f.payload_len);
		n += f.payload_len;
		memcpy(out + n, f.trailer, f.trailer_len);
		n += f.trailer_len;
	} while (!f.last);
	return (int)n;
}

static __attribute__((unused)) struct kw_tx_msg msg_send(u32 msn, u32 len, bool crc)
{
	return (struct kw_tx_msg){ .opcode = KW_OP_SEND, .crc = crc,
		.mulpdu = 1000, .len = len, .qn = KW_QN_SEND, .msn = msn };
}

static __attribute__((unused)) struct kw_tx_msg msg_write(u32 stag, u64 to, u32 len, bool crc)
{
	return (struct kw_tx_msg){ .opcode = KW_OP_WRITE, .crc = crc,
		.mulpdu = 1000, .len = len, .stag = stag, .to = to };
}

/* Recompute the CRC of one FPDU at p after a test mutated it. */
static __attribute__((unused)) void fix_crc(u8 *p)
{
	u32 ulpdu = get_unaligned_be16(p), n = 2 + ulpdu + kw_mpa_pad(ulpdu);
	u32 crc = kw_mpa_crc_update(kw_mpa_crc_init(), p, n);

	kw_mpa_crc_put(crc, p + n);
}

static __attribute__((unused)) u8 pattern[4096];
static __attribute__((unused)) void pattern_init(void)
{
	unsigned int i;

	for (i = 0; i < sizeof(pattern); i++)
		pattern[i] = (u8)(i * 7 + 3);
}

#endif /* KW_TESTLIB_H */
