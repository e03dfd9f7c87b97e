// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * rsockets stream protocol over iWARP: codecs, credits and buffer
 * bookkeeping (rsock.h). No I/O: es.c posts what this decides.
 *
 * Sequence numbers are u16 and wrap, as rsockets' are; every comparison
 * of two of them is a signed 16-bit difference, so the window (rq_size) is
 * kept below 2^15.
 *
 * Receive buffer: rbuf is filled in order, half by half, as the halves are
 * advertised: first half 0 (offered in the connection data), then half 1
 * (advertised at once), then each half again once the reader consumed it.
 * So data is contiguous modulo rbuf_size, and a DATA message needs no
 * address: it says how many bytes were written where the last one ended.
 */
#include "rsock.h"

/* On the wire: addr, key, length; big-endian in the connection data,
 * little-endian (kiwarp's choice, see rsock.h) in target SGL entries. */
static void sge_put_be(const struct kw_rs_sge *s, u8 *out)
{
	put_unaligned_be64(s->addr, out);
	put_unaligned_be32(s->key, out + 8);
	put_unaligned_be32(s->len, out + 12);
}

static void sge_get_be(const u8 *p, struct kw_rs_sge *s)
{
	s->addr = get_unaligned_be64(p);
	s->key = get_unaligned_be32(p + 8);
	s->len = get_unaligned_be32(p + 12);
}

void kw_rs_sge_encode(const struct kw_rs_sge *s, u8 *out)
{
	put_unaligned_le64(s->addr, out);
	put_unaligned_le32(s->key, out + 8);
	put_unaligned_le32(s->len, out + 12);
}

void kw_rs_sge_decode(const u8 *p, struct kw_rs_sge *s)
{
	s->addr = get_unaligned_le64(p);
	s->key = get_unaligned_le32(p + 8);
	s->len = get_unaligned_le32(p + 12);
}

/* struct rs_iomap: offset, then addr, key, length; little-endian. */
void kw_rs_iomap_encode(const struct kw_rs_iomap *m, u8 *out)
{
	put_unaligned_le64(m->offset, out);
	kw_rs_sge_encode(&m->sge, out + 8);
}

void kw_rs_iomap_decode(const u8 *p, struct kw_rs_iomap *m)
{
	m->offset = get_unaligned_le64(p);
	kw_rs_sge_decode(p + 8, &m->sge);
}

/* rsockets' rs_value_to_scale(v, 8) and rs_scale_to_value(v, 8). */
u8 kw_rs_iomap_scale(u32 entries)
{
	if (entries <= 0x80)
		return entries;
	return 0x80 | min_t(u32, entries >> 8, 0x7f);
}

u32 kw_rs_iomap_entries(u8 scaled)
{
	return scaled <= 0x80 ? scaled : (u32)(scaled & 0x7f) << 8;
}

/*
 * struct rs_conn_data: version, flags, credits (be16), 3 reserved bytes,
 * target_iomap_size, then target_sgl and data_buf (16 bytes each).
 */
void kw_rs_conn_encode(const struct kw_rs_conn *c, u8 *out)
{
	memset(out, 0, KW_RS_CONN_LEN);
	out[0] = c->version;
	out[1] = c->flags;
	put_unaligned_be16(c->credits, out + 2);
	out[7] = c->iomap_size;
	sge_put_be(&c->target_sgl, out + 8);
	sge_put_be(&c->data_buf, out + 24);
}

/*
 * rsockets itself checks only the version (and never the length); a peer
 * we cannot serve is refused before anything is sent to it:
 *  - another version;
 *  - KW_RS_FLAG_NET: a big-endian rsockets host, whose own mismatch
 *    handling drops the iWARP message transport (rsock.h);
 *  - no credits (or more than our s16 windows hold), no first buffer, or a
 *    target SGL of fewer than two entries (rsockets alternates between
 *    two) or absurdly many.
 * Reserved bytes are ignored, as rsockets ignores them.
 */
static bool conn_usable(const struct kw_rs_conn *c)
{
	return c->version == KW_RS_VERSION && !(c->flags & KW_RS_FLAG_NET) &&
	       c->credits && c->credits <= 0x7fff && c->data_buf.len &&
	       c->target_sgl.len >= 2 && c->target_sgl.len <= KW_RS_MAX_SGL;
}

int kw_rs_conn_decode(const u8 *p, u32 len, struct kw_rs_conn *c)
{
	if (len < KW_RS_CONN_LEN)
		return -EPROTO;
	c->version = p[0];
	c->flags = p[1];
	c->credits = get_unaligned_be16(p + 2);
	c->iomap_size = p[7];
	sge_get_be(p + 8, &c->target_sgl);
	sge_get_be(p + 24, &c->data_buf);
	return conn_usable(c) ? 0 : -EPROTO;
}

int kw_rs_init(struct kw_rs *rs, const struct kw_rs_cfg *cfg)
{
	if (cfg->rbuf_size < 2 || cfg->rbuf_size > (1u << 30) ||
	    (cfg->rbuf_size & 1))
		return -EINVAL;
	/* credit_mark = rq_size / 2 must move; s16 windows */
	if (cfg->rq_size < 2 || cfg->rq_size > 0x7fff)
		return -EINVAL;
	if (cfg->iomap_size > KW_RS_IOMAP_MAX)
		return -EINVAL;
	memset(rs, 0, sizeof(*rs));
	rs->cfg = *cfg;
	rs->half = cfg->rbuf_size / 2;
	rs->granted = cfg->rq_size;
	rs->credit_mark = cfg->rq_size / 2;
	/* half 0 is offered in the connection data; half 1 is free */
	rs->adv_len = rs->half;
	rs->rbuf_free = rs->half;
	rs->rbuf_free_off = rs->half;
	rs->remote_sge = 1;	/* the peer's entry 0 holds our data_buf */
	return 0;
}

void kw_rs_local_conn(const struct kw_rs *rs, struct kw_rs_conn *c)
{
	memset(c, 0, sizeof(*c));
	c->version = KW_RS_VERSION;
	if (rs->cfg.iomap_size) {
		c->flags = KW_RS_FLAG_IOMAP;
		c->iomap_size = kw_rs_iomap_scale(rs->cfg.iomap_size);
	}
	c->credits = rs->cfg.rq_size;
	c->target_sgl.addr = rs->cfg.tsgl_to;
	c->target_sgl.key = rs->cfg.tsgl_key;
	c->target_sgl.len = KW_RS_SGL_SIZE;
	c->data_buf.addr = rs->cfg.rbuf_to;
	c->data_buf.key = rs->cfg.rbuf_key;
	c->data_buf.len = rs->half;
}

int kw_rs_start(struct kw_rs *rs, const struct kw_rs_conn *peer)
{
	if (!conn_usable(peer))
		return -EPROTO;
	rs->sseq_comp = peer->credits;
	/* the peer's first buffer counts as our entry 0 */
	rs->target = peer->data_buf;
	rs->target_sge = 0;
	rs->remote_sgl_to = peer->target_sgl.addr;
	rs->remote_sgl_key = peer->target_sgl.key;
	rs->remote_sgl_count = peer->target_sgl.len;
	/* a table larger than we use is fine: its first entries serve */
	if (peer->flags & KW_RS_FLAG_IOMAP)
		rs->remote_iomap_count = min_t(u32, KW_RS_IOMAP_MAX,
				kw_rs_iomap_entries(peer->iomap_size));
	return 0;
}

/* ---------------------------------------------------------------- sender */

u32 kw_rs_tx_room(struct kw_rs *rs, u8 *tsgl, struct kw_rs_sge *dst)
{
	if ((s16)(u16)(rs->sseq_comp - rs->sseq_no) <= 0)
		return 0;	/* no credit */
	if (!rs->target.len) {
		u32 next = (rs->target_sge + 1) % KW_RS_SGL_SIZE;
		u8 *e = tsgl + next * KW_RS_SGE_LEN;

		/*
		 * The peer writes an entry when it advertises a buffer there;
		 * read it once into our copy and mark it used, so that its
		 * next advertisement (after this buffer is full) shows.
		 */
		kw_rs_sge_decode(e, &rs->target);
		if (!rs->target.len)
			return 0;	/* nothing advertised yet */
		put_unaligned_le32(0, e + 12);
		rs->target_sge = next;
	}
	dst->addr = rs->target.addr;
	dst->key = rs->target.key;
	dst->len = min_t(u32, rs->target.len, KW_RS_MAX_TRANSFER);
	return dst->len;
}

u32 kw_rs_tx_sent(struct kw_rs *rs, u32 len)
{
	len = min(len, rs->target.len);	/* at most what tx_room offered */
	rs->target.addr += len;
	rs->target.len -= len;
	rs->sseq_no++;
	return KW_RS_MSG(KW_RS_OP_DATA, len);
}

/* ----------------------------------------------------------------- iomap */

bool kw_rs_iomap_dst(const struct kw_rs *rs, u32 index, struct kw_rs_sge *dst)
{
	if (index >= rs->remote_iomap_count ||
	    (s16)(u16)(rs->sseq_comp - rs->sseq_no) <= 0)
		return false;
	/* rsockets: the table follows the target SGL, under its STag */
	dst->addr = rs->remote_sgl_to +
		    (u64)rs->remote_sgl_count * KW_RS_SGE_LEN +
		    (u64)index * KW_RS_IOMAP_LEN;
	dst->key = rs->remote_sgl_key;
	dst->len = KW_RS_IOMAP_LEN;
	return true;
}

u32 kw_rs_iomap_sent(struct kw_rs *rs, u32 index)
{
	rs->sseq_no++;
	return KW_RS_MSG(KW_RS_OP_IOMAP_SGL, index);
}

bool kw_rs_iomap_find(const struct kw_rs *rs, const struct kw_rs_iomap *tbl,
		      u64 offset, struct kw_rs_iomap *m)
{
	u32 i;

	/* the first entry that holds it, as rsockets' rs_find_iomap() */
	for (i = 0; i < rs->cfg.iomap_size; i++) {
		if (tbl[i].sge.len && offset >= tbl[i].offset &&
		    offset - tbl[i].offset < tbl[i].sge.len) {
			*m = tbl[i];
			return true;
		}
	}
	return false;
}

/* -------------------------------------------------------------- receiver */

/* No zero-copy target any more (its place in the stream aside). */
static void zc_forget(struct kw_rs *rs)
{
	memset(&rs->zc, 0, sizeof(rs->zc));
	rs->zc_left = 0;
	rs->zc_armed = false;
	rs->zc_adv = false;
}

/* DATA for the zero-copy target: rbuf's advertised bytes all came. */
static int rx_data_zc(struct kw_rs *rs, u32 len)
{
	if (len > rs->zc_left)
		return -EPROTO;
	rs->rx_msgs++;
	rs->zc_left -= len;
	if (rs->zc_left)
		return KW_RS_EV_ZC_DATA;
	zc_forget(rs);
	if (!rs->zc_pre)	/* the reader is at its place */
		rs->zc_mark = false;
	return KW_RS_EV_ZC_DONE;
}

static int rx_data(struct kw_rs *rs, u32 len)
{
	/* a DATA message beyond the credits we granted */
	if ((s16)(u16)(rs->granted - rs->rx_msgs) <= 0)
		return -EPROTO;
	/* the peer fills what it was given in order: rbuf's halves first */
	if (!rs->adv_len && rs->zc_adv)
		return rx_data_zc(rs, len);
	/* more than advertised, or across the end of an advertised half */
	if (len > rs->adv_len || (rs->wr_off % rs->half) + len > rs->half)
		return -EPROTO;
	rs->rx_msgs++;
	rs->adv_len -= len;
	rs->wr_off = (rs->wr_off + len) % rs->cfg.rbuf_size;
	rs->readable += len;
	return KW_RS_EV_DATA;
}

int kw_rs_rx_msg(struct kw_rs *rs, u32 msg)
{
	u32 val = msg & KW_RS_VAL_MASK;

	switch (msg >> KW_RS_OP_SHIFT) {
	case KW_RS_OP_DATA:
		return rx_data(rs, val);
	case KW_RS_OP_SGL:
		/* limits only grow (rsockets: its rseq_no + rq_size) */
		if ((s16)(u16)((u16)val - rs->sseq_comp) < 0)
			return -EPROTO;
		rs->sseq_comp = (u16)val;
		return KW_RS_EV_CREDIT;
	case KW_RS_OP_IOMAP_SGL:
		/*
		 * The peer wrote entry val of our table (its riomap()). The
		 * message took one of its credits, as DATA does: counted, so
		 * that it is granted back (rsockets never grants it back).
		 */
		if (val >= rs->cfg.iomap_size ||
		    (s16)(u16)(rs->granted - rs->rx_msgs) <= 0)
			return -EPROTO;
		rs->rx_msgs++;
		return KW_RS_EV_NONE;
	case KW_RS_OP_CTRL:
		switch (val) {
		case KW_RS_CTRL_DISCONNECT:
			return KW_RS_EV_DISCONNECT;
		case KW_RS_CTRL_SHUTDOWN:
			return KW_RS_EV_SHUTDOWN;
		case KW_RS_CTRL_KEEPALIVE:
			return KW_RS_EV_NONE;
		}
		return -EPROTO;
	}
	/* reserved, or KW_RS_OP_WRITE which rsockets never sends */
	return -EPROTO;
}

u32 kw_rs_rx_ready(const struct kw_rs *rs)
{
	return rs->zc_mark ? min(rs->readable, rs->zc_pre) : rs->readable;
}

u32 kw_rs_rx_peek(const struct kw_rs *rs, u32 *off)
{
	*off = rs->rd_off;
	return min_t(u32, kw_rs_rx_ready(rs), rs->cfg.rbuf_size - rs->rd_off);
}

void kw_rs_rx_consume(struct kw_rs *rs, u32 n)
{
	n = min(n, kw_rs_rx_ready(rs));	/* never re-advertise unread bytes */
	rs->rd_off = (rs->rd_off + n) % rs->cfg.rbuf_size;
	rs->readable -= n;
	rs->rbuf_free += n;
	if (rs->zc_mark) {
		rs->zc_pre -= n;
		if (!rs->zc_pre && !rs->zc.len)	/* and it was filled */
			rs->zc_mark = false;
	}
}

/*
 * Target SGL entries of the peer's that hold an rbuf buffer it has not
 * filled yet: the halves that [wr_off, wr_off + adv_len) touches.
 */
static u32 rx_adv_entries(const struct kw_rs *rs)
{
	if (!rs->adv_len)
		return 0;
	return rs->adv_len > rs->half - rs->wr_off % rs->half ? 2 : 1;
}

bool kw_rs_credit_due(const struct kw_rs *rs, struct kw_rs_credit *c)
{
	memset(c, 0, sizeof(*c));
	if (!rs->remote_sgl_count)
		return false;	/* not started */
	if (rs->zc.len && rs->zc_armed && !rs->zc_adv &&
	    rx_adv_entries(rs) < rs->remote_sgl_count) {
		c->advert = true;
		c->zc = true;
		kw_rs_sge_encode(&rs->zc, c->sge);
		c->remote_to = rs->remote_sgl_to +
			       (u64)rs->remote_sge * KW_RS_SGE_LEN;
		c->remote_key = rs->remote_sgl_key;
	} else if (rs->zc.len) {
		/* rbuf waits: only what came before the target goes there */
		if ((s16)(u16)(rs->rx_msgs - rs->credit_mark) < 0)
			return false;
	} else if (rs->rbuf_free >= rs->half) {
		struct kw_rs_sge s = {
			.addr = rs->cfg.rbuf_to + rs->rbuf_free_off,
			.key = rs->cfg.rbuf_key,
			.len = rs->half,
		};

		c->advert = true;
		kw_rs_sge_encode(&s, c->sge);
		c->remote_to = rs->remote_sgl_to +
			       (u64)rs->remote_sge * KW_RS_SGE_LEN;
		c->remote_key = rs->remote_sgl_key;
	} else if ((s16)(u16)(rs->rx_msgs - rs->credit_mark) < 0) {
		return false;
	}
	c->msg = KW_RS_MSG(KW_RS_OP_SGL, (u16)(rs->rx_msgs + rs->cfg.rq_size));
	return true;
}

void kw_rs_credit_sent(struct kw_rs *rs, const struct kw_rs_credit *c)
{
	u16 limit = (u16)(c->msg & KW_RS_VAL_MASK);

	if (c->advert && c->zc) {
		rs->zc_adv = true;
		rs->remote_sge = (rs->remote_sge + 1) % rs->remote_sgl_count;
	} else if (c->advert) {
		rs->rbuf_free -= rs->half;
		rs->rbuf_free_off = rs->rbuf_free_off ? 0 : rs->half;
		rs->adv_len += rs->half;
		rs->remote_sge = (rs->remote_sge + 1) % rs->remote_sgl_count;
	}
	rs->granted = limit;
	rs->credit_mark = (u16)(limit - rs->cfg.rq_size + rs->cfg.rq_size / 2);
}

/* ------------------------------------------------------- zero-copy receive */

u32 kw_rs_zc_pre(const struct kw_rs *rs)
{
	return rs->readable + rs->adv_len;
}

int kw_rs_zc_post(struct kw_rs *rs, u32 len)
{
	/* one at a time, and the reader past the last one's place */
	if (rs->zc.len || rs->zc_mark)
		return -EBUSY;
	if (!len)
		return -EINVAL;
	zc_forget(rs);
	rs->zc.len = len;
	rs->zc_left = len;
	rs->zc_mark = true;
	rs->zc_pre = kw_rs_zc_pre(rs);
	return 0;
}

void kw_rs_zc_arm(struct kw_rs *rs, u64 addr, u32 key)
{
	if (!rs->zc.len || rs->zc_armed)
		return;
	rs->zc.addr = addr;
	rs->zc.key = key;
	rs->zc_armed = true;
}

bool kw_rs_zc_end(struct kw_rs *rs)
{
	bool out = rs->zc_adv;

	if (!rs->zc.len)	/* filled (or none): its place stays */
		return false;
	zc_forget(rs);
	/* nothing went there: the stream runs on through rbuf */
	if (!out)
		rs->zc_mark = false;
	return out;
}
