// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * libFuzzer target for the rsockets stream arithmetic (kmod/rsock.c). The
 * input is a peer: the sizes of our rbuf and receive queue, its connection
 * data, the initial bytes of our target SGL, then a sequence of steps
 * (messages from the peer, its writes into our target SGL, and our own
 * reads, credit updates and sends). After every step the state must stay
 * within rbuf, and a refused message must leave it untouched.
 *
 *   [0]      rbuf_size: bit 7 clear: 2 * (b + 1); set: 2048 * (b & 0x7f) + 2048
 *   [1]      rq_size: bit 7 clear: 2 + b; set: 0x7fff - (b & 0x7f)
 *            (the iomap entries we offer: ([0] ^ [1]) % 5)
 *   [2..41]  the peer's connection data
 *   [42..73] our target SGL, as the peer left it
 *   then steps: op byte (low 4 bits; 10..15 as their low 3 bits), arguments:
 *     0 msg (le32)   1 DATA (le16 len)   2 SGL (s8 step from the limit)
 *     3 read (le16)  4 credit (bit 0: post it)
 *     5 send (le16; bit 15 set: an iomap entry, index bits 0..7)
 *     6 target SGL entry write (entry byte, 16 bytes)   7 CTRL (byte)
 *     8 zero-copy target of le16 bytes past kw_rs_zc_pre() (0: none)
 *     9 end the zero-copy target early
 */
#include <stdlib.h>
#include "rsock.h"

#define TSGL_BYTES (KW_RS_SGL_SIZE * KW_RS_SGE_LEN)
#define ZC_KEY	0x9abc

struct in {
	const u8 *p;
	size_t n;
};

static bool take(struct in *in, void *out, size_t n)
{
	if (in->n < n)
		return false;
	memcpy(out, in->p, n);
	in->p += n;
	in->n -= n;
	return true;
}

static void check(const struct kw_rs *rs)
{
	u32 size = rs->cfg.rbuf_size, off, n;

	if (rs->readable > size || rs->rd_off >= size || rs->wr_off >= size ||
	    rs->adv_len > size || rs->rbuf_free > size)
		abort();
	/* every byte of rbuf is free, advertised, or readable */
	if ((u64)rs->rbuf_free + rs->adv_len + rs->readable != size)
		abort();
	if ((rs->rd_off + (u64)rs->readable) % size != rs->wr_off)
		abort();
	if (rs->rbuf_free_off != 0 && rs->rbuf_free_off != rs->half)
		abort();
	/* the peer never has more than rq_size DATA messages granted */
	if ((u16)(rs->granted - rs->rx_msgs) > rs->cfg.rq_size)
		abort();
	if (rs->remote_sgl_count &&
	    rs->remote_sge >= rs->remote_sgl_count)
		abort();
	/* a zero-copy target: the rbuf bytes before its place are readable
	 * or still due, and the reader never gets past it */
	if (rs->zc.len && (!rs->zc_mark || rs->zc_left > rs->zc.len ||
			   rs->zc_armed != (rs->zc.key == ZC_KEY) ||
			   (rs->zc_adv && !rs->zc_armed)))
		abort();
	if (!rs->zc.len && (rs->zc_adv || rs->zc_left))
		abort();
	if (rs->zc_mark && rs->zc_pre > (u64)rs->readable + rs->adv_len)
		abort();
	if (kw_rs_rx_ready(rs) != (rs->zc_mark ?
				   min(rs->readable, rs->zc_pre) :
				   rs->readable))
		abort();
	n = kw_rs_rx_peek(rs, &off);
	if (off != rs->rd_off || n > kw_rs_rx_ready(rs) ||
	    off + (u64)n > size || (kw_rs_rx_ready(rs) && !n))
		abort();
}

static void step_msg(struct kw_rs *rs, u32 msg)
{
	struct kw_rs before = *rs;
	int r = kw_rs_rx_msg(rs, msg);

	if (r == -EPROTO) {
		if (memcmp(&before, rs, sizeof(before)))
			abort();	/* refused, yet changed */
		return;
	}
	if (r < KW_RS_EV_NONE || r > KW_RS_EV_DISCONNECT)
		abort();
	if (r == KW_RS_EV_DATA) {
		u32 len = msg & KW_RS_VAL_MASK;

		/* within what we advertised, within one half */
		if (msg >> KW_RS_OP_SHIFT != KW_RS_OP_DATA ||
		    len > before.adv_len ||
		    before.wr_off % rs->half + len > rs->half ||
		    rs->rx_msgs != (u16)(before.rx_msgs + 1) ||
		    (s16)(u16)(before.granted - before.rx_msgs) <= 0)
			abort();
	} else if (r == KW_RS_EV_ZC_DATA || r == KW_RS_EV_ZC_DONE) {
		u32 len = msg & KW_RS_VAL_MASK;

		/* into the target once it went out and rbuf's bytes came */
		if (msg >> KW_RS_OP_SHIFT != KW_RS_OP_DATA ||
		    !before.zc_adv || before.adv_len ||
		    len > before.zc_left || rs->readable != before.readable ||
		    rs->rx_msgs != (u16)(before.rx_msgs + 1) ||
		    (s16)(u16)(before.granted - before.rx_msgs) <= 0 ||
		    (r == KW_RS_EV_ZC_DONE) != (len == before.zc_left) ||
		    (r == KW_RS_EV_ZC_DONE && rs->zc.len))
			abort();
	} else if (r == KW_RS_EV_CREDIT) {
		if (msg >> KW_RS_OP_SHIFT != KW_RS_OP_SGL)
			abort();
	} else if (msg >> KW_RS_OP_SHIFT == KW_RS_OP_IOMAP_SGL) {
		/* an entry we offer, within the credits, counted */
		if ((msg & KW_RS_VAL_MASK) >= rs->cfg.iomap_size ||
		    (s16)(u16)(before.granted - before.rx_msgs) <= 0 ||
		    rs->rx_msgs != (u16)(before.rx_msgs + 1))
			abort();
		before.rx_msgs = rs->rx_msgs;
		if (memcmp(&before, rs, sizeof(before)))
			abort();
	} else if (memcmp(&before, rs, sizeof(before))) {
		abort();	/* control messages change nothing here */
	}
}

static void step_credit(struct kw_rs *rs, bool post)
{
	struct kw_rs_credit c;
	struct kw_rs_sge s;
	u16 limit;

	if (!kw_rs_credit_due(rs, &c))
		return;
	if (c.msg >> KW_RS_OP_SHIFT != KW_RS_OP_SGL)
		abort();
	limit = (u16)(c.msg & KW_RS_VAL_MASK);
	if ((c.msg & KW_RS_VAL_MASK) > 0xffff ||
	    limit != (u16)(rs->rx_msgs + rs->cfg.rq_size))
		abort();
	if (c.advert && c.zc) {
		kw_rs_sge_decode(c.sge, &s);
		/* the target, once, to an entry of the peer's SGL */
		if (!rs->zc.len || !rs->zc_armed || rs->zc_adv ||
		    s.key != ZC_KEY ||
		    s.len != rs->zc.len || s.addr != rs->zc.addr ||
		    c.remote_key != rs->remote_sgl_key ||
		    c.remote_to - rs->remote_sgl_to >=
		    (u64)rs->remote_sgl_count * KW_RS_SGE_LEN)
			abort();
	} else if (c.advert) {
		kw_rs_sge_decode(c.sge, &s);
		/* one whole half of our rbuf, to an entry of the peer's SGL,
		 * never while a target is posted */
		if (rs->zc.len || s.key != rs->cfg.rbuf_key ||
		    s.len != rs->half ||
		    (s.addr - rs->cfg.rbuf_to != 0 &&
		     s.addr - rs->cfg.rbuf_to != rs->half) ||
		    c.remote_key != rs->remote_sgl_key ||
		    c.remote_to - rs->remote_sgl_to >=
		    (u64)rs->remote_sgl_count * KW_RS_SGE_LEN ||
		    (c.remote_to - rs->remote_sgl_to) % KW_RS_SGE_LEN)
			abort();
	}
	if (post)
		kw_rs_credit_sent(rs, &c);
}

static void step_iomap(struct kw_rs *rs, u32 idx)
{
	u16 credit = (u16)(rs->sseq_comp - rs->sseq_no);
	u16 before = rs->sseq_no;
	struct kw_rs_sge d;
	u64 tbl;

	if (!kw_rs_iomap_dst(rs, idx, &d)) {
		if (idx < rs->remote_iomap_count && (s16)credit > 0)
			abort();	/* refused with an entry and a credit */
		return;
	}
	tbl = rs->remote_sgl_to + (u64)rs->remote_sgl_count * KW_RS_SGE_LEN;
	if (idx >= rs->remote_iomap_count || (s16)credit <= 0 ||
	    rs->remote_iomap_count > KW_RS_IOMAP_MAX ||
	    d.key != rs->remote_sgl_key || d.len != KW_RS_IOMAP_LEN ||
	    d.addr != tbl + (u64)idx * KW_RS_IOMAP_LEN)
		abort();
	if (kw_rs_iomap_sent(rs, idx) != KW_RS_MSG(KW_RS_OP_IOMAP_SGL, idx) ||
	    rs->sseq_no != (u16)(before + 1))
		abort();
}

static void step_send(struct kw_rs *rs, u8 *tsgl, u16 want)
{
	struct kw_rs_sge d;
	u32 room, n, msg;

	if (want & 0x8000) {
		step_iomap(rs, want & 0xff);
		return;
	}
	room = kw_rs_tx_room(rs, tsgl, &d);
	if (room > KW_RS_MAX_TRANSFER || (room && d.len != room))
		abort();
	if (!room)
		return;
	if ((s16)(u16)(rs->sseq_comp - rs->sseq_no) <= 0 ||
	    room > rs->target.len)
		abort();	/* room without credit, or past the buffer */
	n = want % room + 1;
	msg = kw_rs_tx_sent(rs, n);
	if (msg != n)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kw_rs_cfg cfg = {
		.rbuf_to = 0x7f0000001000ULL, .rbuf_key = 0x1234,
		.tsgl_to = 0x7f0000200000ULL, .tsgl_key = 0x5678,
	};
	struct in in = { data, size };
	struct kw_rs_conn peer;
	struct kw_rs rs;
	u8 hdr[2], conn[KW_RS_CONN_LEN], again[KW_RS_CONN_LEN];
	u8 tsgl[TSGL_BYTES];
	int r;

	if (!take(&in, hdr, 2))
		return 0;
	cfg.rbuf_size = hdr[0] & 0x80 ? 2048u * (hdr[0] & 0x7f) + 2048 :
					 2u * (hdr[0] + 1);
	cfg.rq_size = hdr[1] & 0x80 ? 0x7fff - (hdr[1] & 0x7f) : 2 + hdr[1];
	cfg.iomap_size = (hdr[0] ^ hdr[1]) % 5;
	if (kw_rs_init(&rs, &cfg))
		abort();	/* all of these are valid */
	check(&rs);

	if (in.n < KW_RS_CONN_LEN) {
		if (kw_rs_conn_decode(in.p, in.n, &peer) != -EPROTO)
			abort();	/* short */
		return 0;
	}
	take(&in, conn, KW_RS_CONN_LEN);
	r = kw_rs_conn_decode(conn, KW_RS_CONN_LEN, &peer);
	if (r && r != -EPROTO)
		abort();
	/* kw_rs_start judges the decoded fields as the decoder did */
	if (kw_rs_start(&rs, &peer) != r)
		abort();
	if (r)
		return 0;
	/* what was accepted encodes back, but for the reserved bytes */
	kw_rs_conn_encode(&peer, again);
	memset(conn + 4, 0, 3);
	if (memcmp(conn, again, KW_RS_CONN_LEN))
		abort();
	check(&rs);

	memset(tsgl, 0, sizeof(tsgl));
	take(&in, tsgl, sizeof(tsgl));

	while (in.n) {
		u8 op, b[KW_RS_SGE_LEN + 1];

		take(&in, &op, 1);
		op &= 15;
		if (op >= 10)
			op &= 7;
		switch (op) {
		case 8: {
			struct kw_rs_sge z = { 0x7e0000000000ULL, ZC_KEY, 0 };
			u32 pre = kw_rs_zc_pre(&rs);
			bool busy = rs.zc.len || rs.zc_mark;

			if (!take(&in, b, 2))
				return 0;
			z.len = b[0] | b[1] << 8;
			if (rs.zc.len && !rs.zc_armed) {	/* arm it */
				kw_rs_zc_arm(&rs, z.addr, z.key);
				if (!rs.zc_armed)
					abort();
				break;
			}
			r = kw_rs_zc_post(&rs, z.len);
			if (r != (busy ? -EBUSY : z.len ? 0 : -EINVAL))
				abort();
			if (!r && (rs.zc_pre != pre || !rs.zc_mark ||
				   rs.zc_adv || rs.zc_left != z.len))
				abort();
			if (!r && (b[0] & 1))	/* armed at once */
				kw_rs_zc_arm(&rs, z.addr, z.key);
			break;
		}
		case 9: {
			bool had = rs.zc.len, out = had && rs.zc_adv;
			bool mark = rs.zc_mark;

			/* a filled one (or none) keeps its place */
			if (kw_rs_zc_end(&rs) != out || rs.zc.len ||
			    (had && !out && rs.zc_mark) ||
			    (!had && rs.zc_mark != mark))
				abort();
			break;
		}
		case 0:
			if (!take(&in, b, 4))
				return 0;
			step_msg(&rs, get_unaligned_le32(b));
			break;
		case 1:
			if (!take(&in, b, 2))
				return 0;
			step_msg(&rs, KW_RS_MSG(KW_RS_OP_DATA,
						b[0] | b[1] << 8));
			break;
		case 2:
			if (!take(&in, b, 1))
				return 0;
			step_msg(&rs, KW_RS_MSG(KW_RS_OP_SGL,
				 (u16)(rs.sseq_comp + (int8_t)b[0])));
			break;
		case 3: {
			u32 off, n = kw_rs_rx_peek(&rs, &off);

			if (!take(&in, b, 2))
				return 0;
			if (n)
				kw_rs_rx_consume(&rs, (b[0] | b[1] << 8) %
						      (n + 1));
			break;
		}
		case 4:
			if (!take(&in, b, 1))
				return 0;
			step_credit(&rs, b[0] & 1);
			break;
		case 5:
			if (!take(&in, b, 2))
				return 0;
			step_send(&rs, tsgl, b[0] | b[1] << 8);
			break;
		case 6:
			if (!take(&in, b, KW_RS_SGE_LEN + 1))
				return 0;
			memcpy(tsgl + (b[0] & 1) * KW_RS_SGE_LEN, b + 1,
			       KW_RS_SGE_LEN);
			break;
		case 7:
			if (!take(&in, b, 1))
				return 0;
			step_msg(&rs, KW_RS_MSG(KW_RS_OP_CTRL, b[0]));
			break;
		}
		check(&rs);
	}
	return 0;
}
