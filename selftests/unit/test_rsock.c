// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * rsockets stream protocol arithmetic (kmod/rsock.c): the connection data,
 * SGE and message codecs; kw_rs_init's limits; a simulated duplex pair
 * over a wire that carries RDMA Writes and Sends in order, streaming
 * megabytes both ways; rbuf and credit flow control (with u16 wrap); and
 * a hostile peer's messages.
 */
#include "harness.h"
#include "rsock.h"

/* ------------------------------------------------------------ helpers */

static u64 rng;

static u64 mix64(u64 z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static u64 rnd(void)
{
	rng += 0x9e3779b97f4a7c15ULL;
	return mix64(rng);
}

/* uniform-ish in [lo, hi] */
static u32 rnd_range(u32 lo, u32 hi)
{
	return lo + (u32)(rnd() % ((u64)hi - lo + 1));
}

/* Byte i of the stream with this seed. */
static u8 stream_byte(u64 seed, u64 i)
{
	return (u8)(mix64(seed ^ (i >> 3) * 0x2545f4914f6cdd1dULL) >>
		    ((i & 7) * 8));
}

static const struct kw_rs_cfg cfg_a = {
	.rbuf_size = 4096, .rq_size = 8,
	.rbuf_to = 0x10000000, .rbuf_key = 0xa0a0a001,
	.tsgl_to = 0x1f000000, .tsgl_key = 0xa0a0a002,
};

static const struct kw_rs_cfg cfg_b = {
	.rbuf_size = 1000, .rq_size = 4,
	.rbuf_to = 0x20000000, .rbuf_key = 0xb0b0b001,
	.tsgl_to = 0x2f000000, .tsgl_key = 0xb0b0b002,
};

/* A started kw_rs whose peer offered a buffer, credits and an SGL. */
static int start_with(struct kw_rs *rs, const struct kw_rs_cfg *mine,
		      const struct kw_rs_cfg *peer)
{
	struct kw_rs p;
	struct kw_rs_conn c;
	int r;

	r = kw_rs_init(rs, mine);
	if (r)
		return r;
	r = kw_rs_init(&p, peer);
	if (r)
		return r;
	kw_rs_local_conn(&p, &c);
	return kw_rs_start(rs, &c);
}

/* ----------------------------------------------------- connection data */

static const u8 conn_vec[KW_RS_CONN_LEN] = {
	0x01, 0x02, 0x12, 0x34, 0x00, 0x00, 0x00, 0x05,
	0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,	/* target_sgl */
	0x11, 0x22, 0x33, 0x44, 0x00, 0x00, 0x00, 0x02,
	0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8,	/* data_buf */
	0xb1, 0xb2, 0xb3, 0xb4, 0x00, 0x01, 0x00, 0x00,
};

static const struct kw_rs_conn conn_val = {
	.version = 1, .flags = KW_RS_FLAG_IOMAP, .credits = 0x1234,
	.iomap_size = 5,
	.target_sgl = { 0x0102030405060708ULL, 0x11223344, 2 },
	.data_buf = { 0xa1a2a3a4a5a6a7a8ULL, 0xb1b2b3b4, 0x10000 },
};

static bool conn_eq(const struct kw_rs_conn *a, const struct kw_rs_conn *b)
{
	return a->version == b->version && a->flags == b->flags &&
	       a->credits == b->credits && a->iomap_size == b->iomap_size &&
	       a->target_sgl.addr == b->target_sgl.addr &&
	       a->target_sgl.key == b->target_sgl.key &&
	       a->target_sgl.len == b->target_sgl.len &&
	       a->data_buf.addr == b->data_buf.addr &&
	       a->data_buf.key == b->data_buf.key &&
	       a->data_buf.len == b->data_buf.len;
}

TEST(conn_encode_layout)
{
	u8 b[KW_RS_CONN_LEN + 4];

	memset(b, 0xee, sizeof(b));
	kw_rs_conn_encode(&conn_val, b);
	ASSERT_MEMEQ(b, conn_vec, KW_RS_CONN_LEN);
	EXPECT_EQ(b[KW_RS_CONN_LEN], 0xee);	/* nothing past 40 bytes */
	/* the fields at their offsets, big-endian */
	EXPECT_EQ(b[0], 1);
	EXPECT_EQ(b[1], KW_RS_FLAG_IOMAP);
	EXPECT_EQ(get_unaligned_be16(b + 2), 0x1234);
	EXPECT_EQ(b[7], 5);
	EXPECT_EQ(get_unaligned_be64(b + 8), 0x0102030405060708ULL);
	EXPECT_EQ(get_unaligned_be32(b + 20), 2);
	EXPECT_EQ(get_unaligned_be64(b + 24), (long long)0xa1a2a3a4a5a6a7a8ULL);
	EXPECT_EQ(get_unaligned_be32(b + 36), 0x10000);
}

TEST(conn_decode_layout_and_round_trip)
{
	struct kw_rs_conn c, c2;
	u8 b[KW_RS_CONN_LEN + 8];

	memset(&c, 0x55, sizeof(c));
	ASSERT_EQ(kw_rs_conn_decode(conn_vec, KW_RS_CONN_LEN, &c), 0);
	EXPECT_TRUE(conn_eq(&c, &conn_val));
	EXPECT_EQ(c.target_sgl.addr, 0x0102030405060708ULL);
	EXPECT_EQ(c.data_buf.key, 0xb1b2b3b4);
	/* longer private data: the rest is not ours */
	memcpy(b, conn_vec, KW_RS_CONN_LEN);
	memset(b + KW_RS_CONN_LEN, 0xff, 8);
	ASSERT_EQ(kw_rs_conn_decode(b, sizeof(b), &c2), 0);
	EXPECT_TRUE(conn_eq(&c2, &conn_val));
	/* encode(decode(x)) == x */
	memset(b, 0, sizeof(b));
	kw_rs_conn_encode(&c2, b);
	EXPECT_MEMEQ(b, conn_vec, KW_RS_CONN_LEN);
}

TEST(conn_reserved_ignored)
{
	struct kw_rs_conn c;
	u8 b[KW_RS_CONN_LEN];

	memcpy(b, conn_vec, sizeof(b));
	b[4] = 0xff;
	b[5] = 0x80;
	b[6] = 0x01;
	ASSERT_EQ(kw_rs_conn_decode(b, sizeof(b), &c), 0);
	EXPECT_TRUE(conn_eq(&c, &conn_val));
	/* and they are sent as zero */
	kw_rs_conn_encode(&c, b);
	EXPECT_EQ(b[4], 0);
	EXPECT_EQ(b[5], 0);
	EXPECT_EQ(b[6], 0);
}

/* decode of conn_vec with one change: 0 or -EPROTO */
static int dec_mut(int off, int len, u64 val, u32 buflen)
{
	struct kw_rs_conn c;
	u8 b[KW_RS_CONN_LEN];

	memcpy(b, conn_vec, sizeof(b));
	if (len == 1)
		b[off] = (u8)val;
	else if (len == 2)
		put_unaligned_be16((u16)val, b + off);
	else if (len == 4)
		put_unaligned_be32((u32)val, b + off);
	return kw_rs_conn_decode(b, buflen, &c);
}

TEST(conn_decode_rejects)
{
	EXPECT_EQ(dec_mut(0, 0, 0, KW_RS_CONN_LEN - 1), -EPROTO);
	EXPECT_EQ(dec_mut(0, 0, 0, 0), -EPROTO);
	/* version */
	EXPECT_EQ(dec_mut(0, 1, 0, KW_RS_CONN_LEN), -EPROTO);
	EXPECT_EQ(dec_mut(0, 1, 2, KW_RS_CONN_LEN), -EPROTO);
	EXPECT_EQ(dec_mut(0, 1, 0xff, KW_RS_CONN_LEN), -EPROTO);
	EXPECT_EQ(dec_mut(1, 1, KW_RS_FLAG_NET, KW_RS_CONN_LEN), -EPROTO);
	EXPECT_EQ(dec_mut(1, 1, KW_RS_FLAG_NET | KW_RS_FLAG_IOMAP,
			  KW_RS_CONN_LEN), -EPROTO);
	/* credits */
	EXPECT_EQ(dec_mut(2, 2, 0, KW_RS_CONN_LEN), -EPROTO);
	EXPECT_EQ(dec_mut(2, 2, 0x8000, KW_RS_CONN_LEN), -EPROTO);
	EXPECT_EQ(dec_mut(2, 2, 0xffff, KW_RS_CONN_LEN), -EPROTO);
	/* data_buf.len */
	EXPECT_EQ(dec_mut(36, 4, 0, KW_RS_CONN_LEN), -EPROTO);
	/* target SGL entry count */
	EXPECT_EQ(dec_mut(20, 4, 0, KW_RS_CONN_LEN), -EPROTO);
	EXPECT_EQ(dec_mut(20, 4, 1, KW_RS_CONN_LEN), -EPROTO);
	EXPECT_EQ(dec_mut(20, 4, 257, KW_RS_CONN_LEN), -EPROTO);
	EXPECT_EQ(dec_mut(20, 4, 0x80000002u, KW_RS_CONN_LEN), -EPROTO);
}

TEST(conn_decode_accepts_limits)
{
	EXPECT_EQ(dec_mut(0, 0, 0, KW_RS_CONN_LEN), 0);
	EXPECT_EQ(dec_mut(20, 4, 2, KW_RS_CONN_LEN), 0);
	EXPECT_EQ(dec_mut(20, 4, 256, KW_RS_CONN_LEN), 0);
	EXPECT_EQ(dec_mut(2, 2, 1, KW_RS_CONN_LEN), 0);
	EXPECT_EQ(dec_mut(2, 2, 0x7fff, KW_RS_CONN_LEN), 0);
	EXPECT_EQ(dec_mut(1, 1, 0, KW_RS_CONN_LEN), 0);
	EXPECT_EQ(dec_mut(1, 1, 0xfe, KW_RS_CONN_LEN), 0); /* unknown flags */
	EXPECT_EQ(dec_mut(36, 4, 1, KW_RS_CONN_LEN), 0);
	/* keys and addresses are the peer's business */
	EXPECT_EQ(dec_mut(16, 4, 0, KW_RS_CONN_LEN), 0);
}

TEST(start_rejects_unusable_peer)
{
	struct kw_rs rs, p;
	struct kw_rs_conn c;

	ASSERT_EQ(kw_rs_init(&rs, &cfg_a), 0);
	ASSERT_EQ(kw_rs_init(&p, &cfg_b), 0);
	kw_rs_local_conn(&p, &c);
	c.credits = 0;
	EXPECT_EQ(kw_rs_start(&rs, &c), -EPROTO);
	kw_rs_local_conn(&p, &c);
	c.target_sgl.len = 1;
	EXPECT_EQ(kw_rs_start(&rs, &c), -EPROTO);
	kw_rs_local_conn(&p, &c);
	c.flags = KW_RS_FLAG_NET;
	EXPECT_EQ(kw_rs_start(&rs, &c), -EPROTO);
	kw_rs_local_conn(&p, &c);
	c.version = 2;
	EXPECT_EQ(kw_rs_start(&rs, &c), -EPROTO);
	kw_rs_local_conn(&p, &c);
	EXPECT_EQ(kw_rs_start(&rs, &c), 0);
	EXPECT_EQ(rs.sseq_comp, cfg_b.rq_size);
	EXPECT_EQ(rs.target.addr, cfg_b.rbuf_to);
	EXPECT_EQ(rs.target.key, cfg_b.rbuf_key);
	EXPECT_EQ(rs.target.len, cfg_b.rbuf_size / 2);
	EXPECT_EQ(rs.remote_sgl_to, cfg_b.tsgl_to);
	EXPECT_EQ(rs.remote_sgl_key, cfg_b.tsgl_key);
	EXPECT_EQ(rs.remote_sgl_count, 2);
}

/* ------------------------------------------------- SGEs and messages */

TEST(sge_le_layout)
{
	static const u8 want[KW_RS_SGE_LEN] = {
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
		0x44, 0x33, 0x22, 0x11, 0xdd, 0xcc, 0xbb, 0xaa };
	struct kw_rs_sge s = { 0x0102030405060708ULL, 0x11223344, 0xaabbccdd },
		d;
	u8 b[KW_RS_SGE_LEN + 1];

	b[KW_RS_SGE_LEN] = 0x5a;
	kw_rs_sge_encode(&s, b);
	ASSERT_MEMEQ(b, want, KW_RS_SGE_LEN);
	EXPECT_EQ(b[KW_RS_SGE_LEN], 0x5a);
	kw_rs_sge_decode(want, &d);
	EXPECT_EQ(d.addr, s.addr);
	EXPECT_EQ(d.key, s.key);
	EXPECT_EQ(d.len, s.len);
}

TEST(msg_values_and_le_layout)
{
	u8 b[4];

	EXPECT_EQ(KW_RS_MSG(KW_RS_OP_CTRL, KW_RS_CTRL_DISCONNECT), 0xe0000000u);
	EXPECT_EQ(KW_RS_MSG(KW_RS_OP_CTRL, KW_RS_CTRL_SHUTDOWN), 0xe0000002u);
	EXPECT_EQ(KW_RS_MSG(KW_RS_OP_CTRL, KW_RS_CTRL_KEEPALIVE), 0xe0000001u);
	EXPECT_EQ(KW_RS_MSG(KW_RS_OP_SGL, 0x1234), 0x80001234u);
	EXPECT_EQ(KW_RS_MSG(KW_RS_OP_SGL, 0xffff), 0x8000ffffu);
	EXPECT_EQ(KW_RS_MSG(KW_RS_OP_DATA, 65536), 65536);
	EXPECT_EQ(KW_RS_MSG(KW_RS_OP_DATA, 1), 1);
	EXPECT_EQ(KW_RS_MSG(KW_RS_OP_IOMAP_SGL, 3), 0xc0000003u);
	/* the value cannot spill into the op */
	EXPECT_EQ(KW_RS_MSG(KW_RS_OP_DATA, 0xffffffffu), 0x1fffffffu);

	kw_rs_msg_encode(0xe0000002u, b);
	EXPECT_EQ(b[0], 0x02);
	EXPECT_EQ(b[1], 0x00);
	EXPECT_EQ(b[2], 0x00);
	EXPECT_EQ(b[3], 0xe0);
	EXPECT_EQ(kw_rs_msg_decode(b), 0xe0000002u);
	kw_rs_msg_encode(0x80001234u, b);
	EXPECT_EQ(b[0], 0x34);
	EXPECT_EQ(b[1], 0x12);
	EXPECT_EQ(b[3], 0x80);
	EXPECT_EQ(kw_rs_msg_decode(b), 0x80001234u);
}

/* ---------------------------------------------------------- kw_rs_init */

static int init_with(u32 rbuf_size, u32 rq_size)
{
	struct kw_rs_cfg c = cfg_a;
	struct kw_rs rs;

	c.rbuf_size = rbuf_size;
	c.rq_size = (u16)rq_size;
	return kw_rs_init(&rs, &c);
}

TEST(init_limits)
{
	EXPECT_EQ(init_with(0, 8), -EINVAL);
	EXPECT_EQ(init_with(1, 8), -EINVAL);
	EXPECT_EQ(init_with(3, 8), -EINVAL);
	EXPECT_EQ(init_with(4097, 8), -EINVAL);
	EXPECT_EQ(init_with((1u << 30) + 2, 8), -EINVAL);
	EXPECT_EQ(init_with(0x80000000u, 8), -EINVAL);
	EXPECT_EQ(init_with(0xfffffffeu, 8), -EINVAL);
	EXPECT_EQ(init_with(2, 8), 0);
	EXPECT_EQ(init_with(1u << 30, 8), 0);
	EXPECT_EQ(init_with(4096, 0), -EINVAL);
	EXPECT_EQ(init_with(4096, 1), -EINVAL);
	EXPECT_EQ(init_with(4096, 0x8000), -EINVAL);
	EXPECT_EQ(init_with(4096, 0xffff), -EINVAL);
	EXPECT_EQ(init_with(4096, 2), 0);
	EXPECT_EQ(init_with(4096, 0x7fff), 0);
}

TEST(local_conn_offers_half_zero)
{
	struct kw_rs rs;
	struct kw_rs_conn c, d;
	u8 b[KW_RS_CONN_LEN];

	ASSERT_EQ(kw_rs_init(&rs, &cfg_a), 0);
	EXPECT_EQ(rs.half, 2048);
	kw_rs_local_conn(&rs, &c);
	EXPECT_EQ(c.version, 1);
	EXPECT_EQ(c.flags, 0);
	EXPECT_EQ(c.credits, cfg_a.rq_size);
	EXPECT_EQ(c.iomap_size, 0);
	EXPECT_EQ(c.target_sgl.addr, cfg_a.tsgl_to);
	EXPECT_EQ(c.target_sgl.key, cfg_a.tsgl_key);
	EXPECT_EQ(c.target_sgl.len, KW_RS_SGL_SIZE);
	EXPECT_EQ(c.data_buf.addr, cfg_a.rbuf_to);
	EXPECT_EQ(c.data_buf.key, cfg_a.rbuf_key);
	EXPECT_EQ(c.data_buf.len, 2048);
	kw_rs_conn_encode(&c, b);
	ASSERT_EQ(kw_rs_conn_decode(b, sizeof(b), &d), 0);
	EXPECT_TRUE(conn_eq(&c, &d));
}

/* ------------------------------------------------- credits, adverts */

/* The first update advertises half 1 into the peer's entry 1; then each
 * half, once read, goes to entries 0, 1, 0, ... */
TEST(advert_order_entries_alternate)
{
	struct kw_rs rs;
	struct kw_rs_credit c;
	struct kw_rs_sge s;
	u32 half = cfg_a.rbuf_size / 2, i, off;

	ASSERT_EQ(start_with(&rs, &cfg_a, &cfg_b), 0);
	ASSERT_TRUE(kw_rs_credit_due(&rs, &c));
	ASSERT_TRUE(c.advert);
	kw_rs_sge_decode(c.sge, &s);
	EXPECT_EQ(s.addr, cfg_a.rbuf_to + half);
	EXPECT_EQ(s.key, cfg_a.rbuf_key);
	EXPECT_EQ(s.len, half);
	EXPECT_EQ(c.remote_to, cfg_b.tsgl_to + KW_RS_SGE_LEN);
	EXPECT_EQ(c.remote_key, cfg_b.tsgl_key);
	EXPECT_EQ(c.msg, KW_RS_MSG(KW_RS_OP_SGL, cfg_a.rq_size));
	kw_rs_credit_sent(&rs, &c);
	EXPECT_FALSE(kw_rs_credit_due(&rs, &c));
	EXPECT_EQ(rs.adv_len, cfg_a.rbuf_size);

	for (i = 0; i < 6; i++) {
		/* the peer fills the next half, we read it */
		ASSERT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_DATA, half)),
			  KW_RS_EV_DATA);
		ASSERT_EQ(kw_rs_rx_peek(&rs, &off), half);
		EXPECT_EQ(off, (i & 1) * half);
		kw_rs_rx_consume(&rs, half - 1);
		EXPECT_FALSE(kw_rs_credit_due(&rs, &c));
		kw_rs_rx_consume(&rs, 1);
		ASSERT_TRUE(kw_rs_credit_due(&rs, &c));
		ASSERT_TRUE(c.advert);
		kw_rs_sge_decode(c.sge, &s);
		EXPECT_EQ(s.addr, cfg_a.rbuf_to + (i & 1) * half);
		EXPECT_EQ(s.len, half);
		EXPECT_EQ(c.remote_to, cfg_b.tsgl_to +
			  (i & 1) * KW_RS_SGE_LEN);
		EXPECT_EQ(c.msg, KW_RS_MSG(KW_RS_OP_SGL,
					   (u16)(i + 1 + cfg_a.rq_size)));
		kw_rs_credit_sent(&rs, &c);
		EXPECT_FALSE(kw_rs_credit_due(&rs, &c));
	}
}

/* Without byte space freed, an update is due once half the message
 * credits were used; it grants rx_msgs + rq_size. */
TEST(credit_only_update)
{
	struct kw_rs rs;
	struct kw_rs_credit c;
	int i;

	ASSERT_EQ(start_with(&rs, &cfg_a, &cfg_b), 0);	/* rq_size 8 */
	ASSERT_TRUE(kw_rs_credit_due(&rs, &c));
	kw_rs_credit_sent(&rs, &c);
	for (i = 1; i <= 3; i++) {
		ASSERT_EQ(kw_rs_rx_msg(&rs, 1), KW_RS_EV_DATA);
		EXPECT_FALSE(kw_rs_credit_due(&rs, &c));
	}
	ASSERT_EQ(kw_rs_rx_msg(&rs, 1), KW_RS_EV_DATA);
	ASSERT_TRUE(kw_rs_credit_due(&rs, &c));
	EXPECT_FALSE(c.advert);
	EXPECT_EQ(c.msg, KW_RS_MSG(KW_RS_OP_SGL, 12));
	kw_rs_credit_sent(&rs, &c);
	EXPECT_EQ(rs.granted, 12);
	for (i = 1; i <= 3; i++) {
		ASSERT_EQ(kw_rs_rx_msg(&rs, 1), KW_RS_EV_DATA);
		EXPECT_FALSE(kw_rs_credit_due(&rs, &c));
	}
	ASSERT_EQ(kw_rs_rx_msg(&rs, 1), KW_RS_EV_DATA);
	ASSERT_TRUE(kw_rs_credit_due(&rs, &c));
	EXPECT_EQ(c.msg, KW_RS_MSG(KW_RS_OP_SGL, 16));
}

/* ------------------------------------------------------------- sender */

static void put_entry(u8 *tsgl, int i, u64 addr, u32 key, u32 len)
{
	struct kw_rs_sge s = { addr, key, len };

	kw_rs_sge_encode(&s, tsgl + i * KW_RS_SGE_LEN);
}

/* The entry the sender takes has its length zeroed (and nothing else);
 * an entry written while the current buffer is not full waits. */
TEST(tx_room_takes_entries_in_turn)
{
	struct kw_rs rs;
	struct kw_rs_sge d, s;
	u8 tsgl[KW_RS_SGL_SIZE * KW_RS_SGE_LEN] = { 0 };
	u32 half = cfg_b.rbuf_size / 2;	/* the peer's: 500 */

	ASSERT_EQ(start_with(&rs, &cfg_a, &cfg_b), 0);
	ASSERT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_SGL, 100)),
		  KW_RS_EV_CREDIT);
	/* first buffer: the peer's data_buf */
	ASSERT_EQ(kw_rs_tx_room(&rs, tsgl, &d), half);
	EXPECT_EQ(d.addr, cfg_b.rbuf_to);
	EXPECT_EQ(d.key, cfg_b.rbuf_key);
	EXPECT_EQ(kw_rs_tx_sent(&rs, 100), 100);
	/* the peer advertises half 1 in entry 1: not taken yet */
	put_entry(tsgl, 1, cfg_b.rbuf_to + half, cfg_b.rbuf_key, half);
	ASSERT_EQ(kw_rs_tx_room(&rs, tsgl, &d), half - 100);
	EXPECT_EQ(d.addr, cfg_b.rbuf_to + 100);
	kw_rs_sge_decode(tsgl + KW_RS_SGE_LEN, &s);
	EXPECT_EQ(s.len, half);
	EXPECT_EQ(kw_rs_tx_sent(&rs, half - 100), half - 100);
	EXPECT_EQ(rs.target.len, 0);
	/* data_buf full: entry 1 is taken, its length zeroed */
	ASSERT_EQ(kw_rs_tx_room(&rs, tsgl, &d), half);
	EXPECT_EQ(d.addr, cfg_b.rbuf_to + half);
	EXPECT_EQ(d.key, cfg_b.rbuf_key);
	EXPECT_EQ(rs.target_sge, 1);
	kw_rs_sge_decode(tsgl + KW_RS_SGE_LEN, &s);
	EXPECT_EQ(s.len, 0);
	EXPECT_EQ(s.addr, cfg_b.rbuf_to + half);
	EXPECT_EQ(s.key, cfg_b.rbuf_key);
	EXPECT_EQ(kw_rs_tx_sent(&rs, 1), 1);
	/* entry 0 written while entry 1's buffer is being filled */
	put_entry(tsgl, 0, cfg_b.rbuf_to, cfg_b.rbuf_key, half);
	ASSERT_EQ(kw_rs_tx_room(&rs, tsgl, &d), half - 1);
	EXPECT_EQ(d.addr, cfg_b.rbuf_to + half + 1);
	kw_rs_sge_decode(tsgl, &s);
	EXPECT_EQ(s.len, half);			/* untouched */
	/* a rewrite of entry 1 (hostile) changes nothing we hold */
	put_entry(tsgl, 1, 0xdead0000, 0xdead, 7);
	ASSERT_EQ(kw_rs_tx_room(&rs, tsgl, &d), half - 1);
	EXPECT_EQ(d.addr, cfg_b.rbuf_to + half + 1);
	EXPECT_EQ(d.key, cfg_b.rbuf_key);
	kw_rs_tx_sent(&rs, half - 1);
	ASSERT_EQ(kw_rs_tx_room(&rs, tsgl, &d), half);
	EXPECT_EQ(d.addr, cfg_b.rbuf_to);
	EXPECT_EQ(rs.target_sge, 0);
	kw_rs_sge_decode(tsgl, &s);
	EXPECT_EQ(s.len, 0);
}

TEST(tx_room_nothing_advertised)
{
	struct kw_rs rs;
	struct kw_rs_sge d;
	u8 tsgl[KW_RS_SGL_SIZE * KW_RS_SGE_LEN] = { 0 };
	u32 half = cfg_b.rbuf_size / 2;

	ASSERT_EQ(start_with(&rs, &cfg_a, &cfg_b), 0);
	ASSERT_EQ(kw_rs_tx_room(&rs, tsgl, &d), half);
	kw_rs_tx_sent(&rs, half);
	EXPECT_EQ(kw_rs_tx_room(&rs, tsgl, &d), 0);
	EXPECT_EQ(kw_rs_tx_room(&rs, tsgl, &d), 0);
	EXPECT_EQ(rs.target_sge, 0);
	/* the advertisement arrives: go on */
	put_entry(tsgl, 1, cfg_b.rbuf_to + half, cfg_b.rbuf_key, half);
	EXPECT_EQ(kw_rs_tx_room(&rs, tsgl, &d), half);
	EXPECT_EQ(rs.target_sge, 1);
}

/* No credit: 0, and the target SGL is not touched. */
TEST(tx_room_no_credit_leaves_tsgl)
{
	struct kw_rs rs;
	struct kw_rs_sge d, s;
	u8 tsgl[KW_RS_SGL_SIZE * KW_RS_SGE_LEN] = { 0 };
	u32 i;

	ASSERT_EQ(start_with(&rs, &cfg_a, &cfg_b), 0);	/* 4 credits */
	/* data_buf (500 bytes) filled by the 4 messages: 1, 1, 1, 497 */
	for (i = 0; i < 3; i++) {
		ASSERT_EQ(kw_rs_tx_room(&rs, tsgl, &d), 500 - i);
		kw_rs_tx_sent(&rs, 1);
	}
	ASSERT_EQ(kw_rs_tx_room(&rs, tsgl, &d), 497);
	kw_rs_tx_sent(&rs, 497);
	EXPECT_EQ(rs.sseq_no, rs.sseq_comp);
	put_entry(tsgl, 1, 0x1234, 0x99, 300);
	EXPECT_EQ(kw_rs_tx_room(&rs, tsgl, &d), 0);
	EXPECT_EQ(rs.target_sge, 0);
	kw_rs_sge_decode(tsgl + KW_RS_SGE_LEN, &s);
	EXPECT_EQ(s.len, 300);
	/* a credit-only update (same limit) gives nothing */
	EXPECT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_SGL, 4)),
		  KW_RS_EV_CREDIT);
	EXPECT_EQ(kw_rs_tx_room(&rs, tsgl, &d), 0);
	/* one more credit */
	EXPECT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_SGL, 5)),
		  KW_RS_EV_CREDIT);
	EXPECT_EQ(kw_rs_tx_room(&rs, tsgl, &d), 300);
	EXPECT_EQ(d.addr, 0x1234);
	EXPECT_EQ(d.key, 0x99);
	kw_rs_sge_decode(tsgl + KW_RS_SGE_LEN, &s);
	EXPECT_EQ(s.len, 0);
	EXPECT_EQ(kw_rs_tx_sent(&rs, 10), 10);
	EXPECT_EQ(kw_rs_tx_room(&rs, tsgl, &d), 0);
}

/* A large advertised buffer is filled in Writes of at most 64 KiB, the
 * last one exactly up to its end. */
TEST(tx_room_caps_transfer)
{
	struct kw_rs_cfg big = cfg_b;
	struct kw_rs rs;
	struct kw_rs_sge d;
	u8 tsgl[KW_RS_SGL_SIZE * KW_RS_SGE_LEN] = { 0 };
	u32 total = 0, n = 0, room;

	big.rbuf_size = 400000;			/* halves of 200000 */
	big.rq_size = 100;
	ASSERT_EQ(start_with(&rs, &cfg_a, &big), 0);
	put_entry(tsgl, 1, 0x77770000, 0x5555, 3);
	while ((room = kw_rs_tx_room(&rs, tsgl, &d)) && total < 200000) {
		ASSERT_LE(room, KW_RS_MAX_TRANSFER);
		EXPECT_EQ(d.len, room);
		EXPECT_EQ(d.addr, big.rbuf_to + total);
		ASSERT_LE(total + room, 200000);
		kw_rs_tx_sent(&rs, room);
		total += room;
		n++;
	}
	EXPECT_EQ(total, 200000);
	EXPECT_EQ(n, 4);		/* 3 x 65536 + 3392 */
	/* then the 3-byte buffer of entry 1, whole */
	EXPECT_EQ(room, 3);
	EXPECT_EQ(d.addr, 0x77770000);
	/* partial Writes are fine too */
	EXPECT_EQ(kw_rs_tx_sent(&rs, 2), 2);
	EXPECT_EQ(kw_rs_tx_room(&rs, tsgl, &d), 1);
	EXPECT_EQ(d.addr, 0x77770002);
}

/* ------------------------------------------------------ hostile peer */

/* a receiver whose half 1 is advertised (adv_len == rbuf_size) */
static void rx_ready(int *kwt_fail, struct kw_rs *rs, u16 rq_size)
{
	struct kw_rs_cfg c = cfg_a;
	struct kw_rs_credit cr;

	c.rq_size = rq_size;
	ASSERT_EQ(start_with(rs, &c, &cfg_b), 0);
	ASSERT_TRUE(kw_rs_credit_due(rs, &cr));
	kw_rs_credit_sent(rs, &cr);
	ASSERT_EQ(rs->adv_len, c.rbuf_size);
}

/* the message is refused and the state is left as it was */
static void expect_eproto(int *kwt_fail, struct kw_rs *rs, u32 msg)
{
	struct kw_rs before = *rs;

	EXPECT_EQ(kw_rs_rx_msg(rs, msg), -EPROTO);
	EXPECT_MEMEQ(&before, rs, sizeof(before));
}

TEST(hostile_data_beyond_credits)
{
	struct kw_rs rs;

	rx_ready(kwt_fail, &rs, 2);
	if (*kwt_fail)
		return;
	EXPECT_EQ(kw_rs_rx_msg(&rs, 1), KW_RS_EV_DATA);
	EXPECT_EQ(kw_rs_rx_msg(&rs, 1), KW_RS_EV_DATA);
	expect_eproto(kwt_fail, &rs, 1);
	expect_eproto(kwt_fail, &rs, 0);	/* even an empty one */
	EXPECT_EQ(rs.readable, 2);
}

/* The credit the peer may use is the one we sent, not the one due. */
TEST(hostile_data_beyond_credits_before_update_sent)
{
	struct kw_rs rs;
	struct kw_rs_credit c;
	int i;

	rx_ready(kwt_fail, &rs, 4);
	if (*kwt_fail)
		return;
	for (i = 0; i < 4; i++)
		ASSERT_EQ(kw_rs_rx_msg(&rs, 1), KW_RS_EV_DATA);
	ASSERT_TRUE(kw_rs_credit_due(&rs, &c));	/* not yet sent */
	expect_eproto(kwt_fail, &rs, 1);
	kw_rs_credit_sent(&rs, &c);
	EXPECT_EQ(kw_rs_rx_msg(&rs, 1), KW_RS_EV_DATA);
}

TEST(hostile_data_beyond_advertised)
{
	struct kw_rs rs;
	struct kw_rs_credit c;
	u32 half = cfg_a.rbuf_size / 2;

	/* only half 0 (connection data) is advertised */
	ASSERT_EQ(start_with(&rs, &cfg_a, &cfg_b), 0);
	expect_eproto(kwt_fail, &rs, half + 1);
	expect_eproto(kwt_fail, &rs, KW_RS_VAL_MASK);
	EXPECT_EQ(kw_rs_rx_msg(&rs, half), KW_RS_EV_DATA);
	expect_eproto(kwt_fail, &rs, 1);		/* half 1 not yet */
	ASSERT_TRUE(kw_rs_credit_due(&rs, &c));
	kw_rs_credit_sent(&rs, &c);
	EXPECT_EQ(kw_rs_rx_msg(&rs, half - 1), KW_RS_EV_DATA);
	EXPECT_EQ(kw_rs_rx_msg(&rs, 1), KW_RS_EV_DATA);
	expect_eproto(kwt_fail, &rs, 1);		/* rbuf full */
	EXPECT_EQ(rs.readable, cfg_a.rbuf_size);
	EXPECT_EQ(rs.adv_len, 0);
}

TEST(hostile_data_across_half)
{
	struct kw_rs rs;
	u32 half = cfg_a.rbuf_size / 2;

	rx_ready(kwt_fail, &rs, 8);
	if (*kwt_fail)
		return;
	EXPECT_EQ(kw_rs_rx_msg(&rs, 10), KW_RS_EV_DATA);
	/* within adv_len, but across the end of half 0 */
	expect_eproto(kwt_fail, &rs, half);
	expect_eproto(kwt_fail, &rs, half - 9);
	EXPECT_EQ(kw_rs_rx_msg(&rs, half - 10), KW_RS_EV_DATA);
	EXPECT_EQ(rs.wr_off, half);
	EXPECT_EQ(kw_rs_rx_msg(&rs, half), KW_RS_EV_DATA);
	EXPECT_EQ(rs.wr_off, 0);
}

TEST(hostile_sgl_backwards)
{
	struct kw_rs rs;

	ASSERT_EQ(start_with(&rs, &cfg_a, &cfg_b), 0);	/* limit 4 */
	expect_eproto(kwt_fail, &rs, KW_RS_MSG(KW_RS_OP_SGL, 3));
	expect_eproto(kwt_fail, &rs, KW_RS_MSG(KW_RS_OP_SGL, 0));
	expect_eproto(kwt_fail, &rs, KW_RS_MSG(KW_RS_OP_SGL, 0x8004));
	EXPECT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_SGL, 4)),
		  KW_RS_EV_CREDIT);
	EXPECT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_SGL, 20)),
		  KW_RS_EV_CREDIT);
	EXPECT_EQ(rs.sseq_comp, 20);
	expect_eproto(kwt_fail, &rs, KW_RS_MSG(KW_RS_OP_SGL, 19));
	/* forward across the u16 wrap */
	rs.sseq_comp = 0xfff0;
	rs.sseq_no = 0xffe0;
	EXPECT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_SGL, 5)),
		  KW_RS_EV_CREDIT);
	EXPECT_EQ(rs.sseq_comp, 5);
	expect_eproto(kwt_fail, &rs, KW_RS_MSG(KW_RS_OP_SGL, 0xfff8));
}

/* rsockets sends rseq_no + rq_size unmasked (int arithmetic on two u16s):
 * past the wrap the value has bit 16 set; its low 16 bits are the limit. */
TEST(sgl_value_beyond_u16)
{
	struct kw_rs rs;
	struct kw_rs_sge d;
	u8 tsgl[KW_RS_SGL_SIZE * KW_RS_SGE_LEN] = { 0 };

	ASSERT_EQ(start_with(&rs, &cfg_a, &cfg_b), 0);
	rs.sseq_no = 0xfffe;
	rs.sseq_comp = 0xfffe;
	EXPECT_EQ(kw_rs_tx_room(&rs, tsgl, &d), 0);
	EXPECT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_SGL, 0xfffe + 4)),
		  KW_RS_EV_CREDIT);
	EXPECT_EQ(rs.sseq_comp, 2);
	EXPECT_EQ(kw_rs_tx_room(&rs, tsgl, &d), 500);
	/* four messages, across the wrap, then no credit */
	EXPECT_EQ(kw_rs_tx_sent(&rs, 1), 1);
	EXPECT_EQ(kw_rs_tx_sent(&rs, 1), 1);
	EXPECT_EQ(kw_rs_tx_room(&rs, tsgl, &d), 498);
	EXPECT_EQ(kw_rs_tx_sent(&rs, 1), 1);
	EXPECT_EQ(kw_rs_tx_sent(&rs, 1), 1);
	EXPECT_EQ(rs.sseq_no, 2);
	EXPECT_EQ(kw_rs_tx_room(&rs, tsgl, &d), 0);
}

TEST(hostile_reserved_ops)
{
	struct kw_rs rs;
	u32 op;

	rx_ready(kwt_fail, &rs, 8);
	if (*kwt_fail)
		return;
	for (op = 1; op <= 5; op++) {
		if (op == KW_RS_OP_SGL)
			continue;
		expect_eproto(kwt_fail, &rs, KW_RS_MSG(op, 0));
		expect_eproto(kwt_fail, &rs, KW_RS_MSG(op, 1));
		expect_eproto(kwt_fail, &rs, KW_RS_MSG(op, KW_RS_VAL_MASK));
	}
}

TEST(ctrl_and_iomap_events)
{
	struct kw_rs rs, before;

	rx_ready(kwt_fail, &rs, 8);
	if (*kwt_fail)
		return;
	before = rs;
	EXPECT_EQ(kw_rs_rx_msg(&rs, 0xe0000000u), KW_RS_EV_DISCONNECT);
	EXPECT_EQ(kw_rs_rx_msg(&rs, 0xe0000002u), KW_RS_EV_SHUTDOWN);
	EXPECT_EQ(kw_rs_rx_msg(&rs, 0xe0000001u), KW_RS_EV_NONE);
	EXPECT_MEMEQ(&before, &rs, sizeof(rs));
	/* no iomap table offered (cfg_a): an update of one is a broken peer */
	expect_eproto(kwt_fail, &rs, KW_RS_MSG(KW_RS_OP_IOMAP_SGL, 0));
	expect_eproto(kwt_fail, &rs, KW_RS_MSG(KW_RS_OP_IOMAP_SGL, 77));
	expect_eproto(kwt_fail, &rs, KW_RS_MSG(KW_RS_OP_CTRL, 3));
	expect_eproto(kwt_fail, &rs, KW_RS_MSG(KW_RS_OP_CTRL, 0x100));
	expect_eproto(kwt_fail, &rs, KW_RS_MSG(KW_RS_OP_CTRL, KW_RS_VAL_MASK));
}

/* ------------------------------------------------------------- iomap */

/* rsockets' rs_value_to_scale() / rs_scale_to_value() with bits 8 */
static int ref_scale(int v)
{
	return v <= 128 ? v : 128 | (v >> 8);
}

static int ref_value(int v)
{
	return v <= 128 ? v : (v & ~128) << 8;
}

TEST(iomap_scale_as_rsockets)
{
	int v;

	for (v = 0; v <= 0x7fff; v++)
		if (kw_rs_iomap_scale(v) != (u8)ref_scale(v))
			break;
	EXPECT_EQ(v, 0x8000);
	for (v = 0; v <= 255; v++)
		if (kw_rs_iomap_entries(v) != (u32)ref_value(v))
			break;
	EXPECT_EQ(v, 256);
	EXPECT_EQ(kw_rs_iomap_entries(kw_rs_iomap_scale(128)), 128);
	/* the largest a peer can offer; we use KW_RS_IOMAP_MAX of it */
	EXPECT_EQ(kw_rs_iomap_entries(0xff), 0x7f00);
}

TEST(iomap_entry_le_layout)
{
	static const u8 vec[KW_RS_IOMAP_LEN] = {
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,	/* offset */
		0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,	/* addr */
		0x24, 0x23, 0x22, 0x21,				/* key */
		0x34, 0x33, 0x32, 0x31,				/* len */
	};
	struct kw_rs_iomap m = {
		.offset = 0x0102030405060708ULL,
		.sge = { 0x1112131415161718ULL, 0x21222324, 0x31323334 },
	}, d;
	u8 b[KW_RS_IOMAP_LEN];

	kw_rs_iomap_encode(&m, b);
	EXPECT_MEMEQ(b, vec, sizeof(vec));
	kw_rs_iomap_decode(vec, &d);
	EXPECT_MEMEQ(&d, &m, sizeof(m));
}

static struct kw_rs_cfg cfg_io(const struct kw_rs_cfg *base, u32 entries)
{
	struct kw_rs_cfg c = *base;

	c.iomap_size = entries;
	return c;
}

TEST(iomap_offer_in_conn_data)
{
	struct kw_rs_cfg a = cfg_io(&cfg_a, 3), b = cfg_io(&cfg_b, 128);
	struct kw_rs rs, peer;
	struct kw_rs_conn c;
	u8 w[KW_RS_CONN_LEN];

	ASSERT_EQ(kw_rs_init(&rs, &a), 0);
	kw_rs_local_conn(&rs, &c);
	EXPECT_EQ(c.flags, KW_RS_FLAG_IOMAP);
	EXPECT_EQ(c.iomap_size, 3);
	kw_rs_conn_encode(&c, w);
	EXPECT_EQ(w[1], KW_RS_FLAG_IOMAP);
	EXPECT_EQ(w[7], 3);
	a.iomap_size = KW_RS_IOMAP_MAX + 1;
	EXPECT_EQ(kw_rs_init(&peer, &a), -EINVAL);

	/* what the peer offers is what we may fill */
	ASSERT_EQ(start_with(&rs, &cfg_a, &b), 0);
	EXPECT_EQ(rs.remote_iomap_count, 128);
	ASSERT_EQ(start_with(&rs, &cfg_a, &cfg_b), 0);
	EXPECT_EQ(rs.remote_iomap_count, 0);
	/* a size without the flag is no table (rsockets) */
	ASSERT_EQ(kw_rs_init(&peer, &b), 0);
	kw_rs_local_conn(&peer, &c);
	c.flags = 0;
	ASSERT_EQ(kw_rs_init(&rs, &cfg_a), 0);
	ASSERT_EQ(kw_rs_start(&rs, &c), 0);
	EXPECT_EQ(rs.remote_iomap_count, 0);
	/* a larger table than we use: its first KW_RS_IOMAP_MAX entries */
	c.flags = KW_RS_FLAG_IOMAP;
	c.iomap_size = 0xff;
	ASSERT_EQ(kw_rs_start(&rs, &c), 0);
	EXPECT_EQ(rs.remote_iomap_count, KW_RS_IOMAP_MAX);
}

/* The entry goes after the peer's target SGL, under its STag, and costs
 * a credit; none left, no entry. */
TEST(iomap_dst_and_credit)
{
	struct kw_rs_cfg b = cfg_io(&cfg_b, 4);
	struct kw_rs rs;
	struct kw_rs_sge d;
	u32 i;

	ASSERT_EQ(start_with(&rs, &cfg_a, &b), 0);
	EXPECT_FALSE(kw_rs_iomap_dst(&rs, 4, &d));
	ASSERT_TRUE(kw_rs_iomap_dst(&rs, 3, &d));
	EXPECT_EQ(d.addr, b.tsgl_to + KW_RS_SGL_SIZE * KW_RS_SGE_LEN +
		  3 * KW_RS_IOMAP_LEN);
	EXPECT_EQ(d.key, b.tsgl_key);
	EXPECT_EQ(d.len, KW_RS_IOMAP_LEN);
	for (i = 0; i < b.rq_size; i++) {
		ASSERT_TRUE(kw_rs_iomap_dst(&rs, i % 4, &d));
		EXPECT_EQ(kw_rs_iomap_sent(&rs, i % 4),
			  KW_RS_MSG(KW_RS_OP_IOMAP_SGL, i % 4));
	}
	EXPECT_FALSE(kw_rs_iomap_dst(&rs, 0, &d));
	EXPECT_EQ(rs.sseq_no, b.rq_size);
	/* and DATA waits for the same credit */
	{
		u8 tsgl[KW_RS_SGL_SIZE * KW_RS_SGE_LEN] = { 0 };

		EXPECT_EQ(kw_rs_tx_room(&rs, tsgl, &d), 0);
	}
}

/* The receiver counts an update as a message: within the credits, and
 * granted back like DATA. */
TEST(iomap_update_received)
{
	struct kw_rs_cfg a = cfg_io(&cfg_a, 2);
	struct kw_rs rs;
	struct kw_rs_credit c;
	u32 i;

	ASSERT_EQ(start_with(&rs, &a, &cfg_b), 0);
	ASSERT_TRUE(kw_rs_credit_due(&rs, &c));
	kw_rs_credit_sent(&rs, &c);
	expect_eproto(kwt_fail, &rs, KW_RS_MSG(KW_RS_OP_IOMAP_SGL, 2));
	expect_eproto(kwt_fail, &rs, KW_RS_MSG(KW_RS_OP_IOMAP_SGL, KW_RS_VAL_MASK));
	for (i = 0; i < a.rq_size; i++)
		EXPECT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_IOMAP_SGL, i & 1)),
			  KW_RS_EV_NONE);
	EXPECT_EQ(rs.rx_msgs, a.rq_size);
	EXPECT_EQ(rs.readable, 0);
	/* beyond the credits: a broken peer, updates and DATA alike */
	expect_eproto(kwt_fail, &rs, KW_RS_MSG(KW_RS_OP_IOMAP_SGL, 0));
	expect_eproto(kwt_fail, &rs, KW_RS_MSG(KW_RS_OP_DATA, 1));
	/* the credits come back */
	ASSERT_TRUE(kw_rs_credit_due(&rs, &c));
	EXPECT_EQ(c.msg, KW_RS_MSG(KW_RS_OP_SGL, 2 * a.rq_size));
}

/* riowrite()'s lookup: the first entry holding the offset, only our
 * own table's entries, none of length 0, no wrap at the top. */
TEST(iomap_find)
{
	struct kw_rs_cfg a = cfg_io(&cfg_a, 3);
	struct kw_rs_iomap tbl[4];
	struct kw_rs_iomap e[4] = {
		{ 1000, { 0x5000, 7, 100 } },
		{ 1050, { 0x9000, 8, 100 } },
		{ ~0ULL - 9, { 0xa000, 9, 100 } },
		{ 0, { 0xb000, 10, 4096 } },	/* beyond our table */
	}, m;
	struct kw_rs rs;

	ASSERT_EQ(start_with(&rs, &a, &cfg_b), 0);
	memset(tbl, 0, sizeof(tbl));
	EXPECT_FALSE(kw_rs_iomap_find(&rs, tbl, 1000, &m));
	memcpy(tbl, e, sizeof(tbl));
	EXPECT_FALSE(kw_rs_iomap_find(&rs, tbl, 999, &m));
	EXPECT_FALSE(kw_rs_iomap_find(&rs, tbl, 0, &m));
	ASSERT_TRUE(kw_rs_iomap_find(&rs, tbl, 1000, &m));
	EXPECT_EQ(m.sge.key, 7);
	ASSERT_TRUE(kw_rs_iomap_find(&rs, tbl, 1099, &m));
	EXPECT_EQ(m.sge.key, 7);
	ASSERT_TRUE(kw_rs_iomap_find(&rs, tbl, 1100, &m));
	EXPECT_EQ(m.sge.key, 8);
	EXPECT_FALSE(kw_rs_iomap_find(&rs, tbl, 1150, &m));
	ASSERT_TRUE(kw_rs_iomap_find(&rs, tbl, ~0ULL, &m));
	EXPECT_EQ(m.sge.key, 9);
	/* an entry zeroed by the peer is gone */
	tbl[0].sge.len = 0;
	EXPECT_FALSE(kw_rs_iomap_find(&rs, tbl, 1000, &m));
	ASSERT_TRUE(kw_rs_iomap_find(&rs, tbl, 1050, &m));
	EXPECT_EQ(m.sge.key, 8);
}

/* ------------------------------------------------ the duplex simulation */

struct wop {
	bool write;
	u64 to;
	u32 key, len;
	u8 *data;
	u32 msg;
};

struct wire {
	struct wop *op;
	size_t head, tail, cap;
};

struct ep {
	const char *name;
	struct kw_rs rs;
	u8 *rbuf;
	u8 tsgl[KW_RS_SGL_SIZE * KW_RS_SGE_LEN];
	struct wire in;		/* on their way to this endpoint */
	u64 seed;		/* of the stream this endpoint sends */
	u64 tx_total, tx_done;	/* bytes to send, sent */
	u32 chunk_left;		/* of the application's write */
	u32 max_write;		/* 0: as much as tx_room allows */
	u64 rx_done;		/* received, checked and consumed */
	u64 data_msgs, credit_msgs, adverts;
	/* a zero-copy target of this receiver's (zc_duplex) */
	bool zc_on, zc_full;
	u8 *zbuf;
	u64 z_start;		/* stream offset of its first byte */
	u32 z_len, z_wr;	/* its length; next byte the peer writes */
	u64 zc_posts, zc_bytes;
};

#define ZC_TO	0x7700000000ULL	/* the target's TO base and key */
#define ZC_KEY	0x5a5a5a01

/* Reserve and arm a target at once. */
static int zpost(struct kw_rs *rs, const struct kw_rs_sge *z)
{
	int r = kw_rs_zc_post(rs, z->len);

	if (!r)
		kw_rs_zc_arm(rs, z->addr, z->key);
	return r;
}

static void wire_push(struct wire *w, struct wop o)
{
	if (w->tail == w->cap) {
		if (w->head) {
			memmove(w->op, w->op + w->head,
				(w->tail - w->head) * sizeof(*w->op));
			w->tail -= w->head;
			w->head = 0;
		}
		if (w->tail == w->cap) {
			w->cap = w->cap ? 2 * w->cap : 64;
			w->op = realloc(w->op, w->cap * sizeof(*w->op));
			if (!w->op)
				abort();
		}
	}
	w->op[w->tail++] = o;
}

static size_t wire_len(const struct wire *w)
{
	return w->tail - w->head;
}

static void ep_init(int *kwt_fail, struct ep *e, const char *name,
		    const struct kw_rs_cfg *cfg, u64 seed, u64 tx_total)
{
	memset(e, 0, sizeof(*e));
	e->name = name;
	ASSERT_EQ(kw_rs_init(&e->rs, cfg), 0);
	e->rbuf = malloc(cfg->rbuf_size);
	ASSERT_TRUE(e->rbuf != NULL);
	memset(e->rbuf, 0xcc, cfg->rbuf_size);
	e->seed = seed;
	e->tx_total = tx_total;
}

static void ep_free(struct ep *e)
{
	size_t i;

	for (i = e->in.head; i < e->in.tail; i++)
		free(e->in.op[i].data);
	free(e->in.op);
	free(e->rbuf);
	free(e->zbuf);
}

/* Connection data through its wire format, both ways. */
static void pair_connect(int *kwt_fail, struct ep *a, struct ep *b)
{
	struct kw_rs_conn c, d;
	u8 buf[KW_RS_CONN_LEN];

	kw_rs_local_conn(&a->rs, &c);
	kw_rs_conn_encode(&c, buf);
	ASSERT_EQ(kw_rs_conn_decode(buf, sizeof(buf), &d), 0);
	ASSERT_EQ(kw_rs_start(&b->rs, &d), 0);
	kw_rs_local_conn(&b->rs, &c);
	kw_rs_conn_encode(&c, buf);
	ASSERT_EQ(kw_rs_conn_decode(buf, sizeof(buf), &d), 0);
	ASSERT_EQ(kw_rs_start(&a->rs, &d), 0);
}

/* rbuf_free + adv_len + readable always make up rbuf, and the readable
 * bytes run from rd_off to wr_off. */
static void check_rx_inv(int *kwt_fail, const struct ep *e)
{
	const struct kw_rs *rs = &e->rs;
	u32 size = rs->cfg.rbuf_size;

	ASSERT_EQ((u64)rs->rbuf_free + rs->adv_len + rs->readable, size);
	ASSERT_LT(rs->rd_off, size);
	ASSERT_LT(rs->wr_off, size);
	ASSERT_EQ((rs->rd_off + (u64)rs->readable) % size, rs->wr_off);
	ASSERT_TRUE(rs->rbuf_free_off == 0 || rs->rbuf_free_off == rs->half);
}

/* Post every credit update that is due (advert Write, then message). */
static void ep_credits(int *kwt_fail, struct ep *e, struct ep *peer)
{
	struct kw_rs_credit c;
	int n = 0;

	while (kw_rs_credit_due(&e->rs, &c)) {
		ASSERT_LT(n++, 3);	/* two adverts and a credit at most */
		if (c.advert) {
			u8 *d = malloc(KW_RS_SGE_LEN);

			ASSERT_TRUE(d != NULL);
			memcpy(d, c.sge, KW_RS_SGE_LEN);
			wire_push(&peer->in, (struct wop){ .write = true,
				.to = c.remote_to, .key = c.remote_key,
				.len = KW_RS_SGE_LEN, .data = d });
			e->adverts++;
		}
		ASSERT_EQ(c.msg >> KW_RS_OP_SHIFT, KW_RS_OP_SGL);
		wire_push(&peer->in, (struct wop){ .msg = c.msg });
		kw_rs_credit_sent(&e->rs, &c);
		e->credit_msgs++;
		check_rx_inv(kwt_fail, e);
		if (*kwt_fail)
			return;
	}
}

/* Send as much of the stream as the protocol allows now. */
static void ep_send(int *kwt_fail, struct ep *e, struct ep *peer,
		    bool random_len)
{
	struct kw_rs_sge d;
	u32 room, n, i;

	while (e->tx_done < e->tx_total) {
		u8 *p;

		if (!e->chunk_left) {
			u64 left = e->tx_total - e->tx_done;

			e->chunk_left = rnd_range(1, 100000);
			if (e->chunk_left > left)
				e->chunk_left = (u32)left;
		}
		room = kw_rs_tx_room(&e->rs, e->tsgl, &d);
		if (!room)
			return;
		ASSERT_LE(room, KW_RS_MAX_TRANSFER);
		ASSERT_EQ(d.len, room);
		n = room < e->chunk_left ? room : e->chunk_left;
		if (e->max_write && n > e->max_write)
			n = e->max_write;
		if (random_len && !(rnd() & 3))
			n = rnd_range(1, n);
		p = malloc(n);
		ASSERT_TRUE(p != NULL);
		for (i = 0; i < n; i++)
			p[i] = stream_byte(e->seed, e->tx_done + i);
		wire_push(&peer->in, (struct wop){ .write = true,
			.to = d.addr, .key = d.key, .len = n, .data = p });
		ASSERT_EQ(kw_rs_tx_sent(&e->rs, n),
			  KW_RS_MSG(KW_RS_OP_DATA, n));
		wire_push(&peer->in, (struct wop){ .msg = n });
		e->tx_done += n;
		e->chunk_left -= n;
		e->data_msgs++;
	}
}

/* Deliver up to max operations to e, in order, as the RNIC would. */
static void ep_deliver(int *kwt_fail, struct ep *e, size_t max)
{
	const struct kw_rs_cfg *c = &e->rs.cfg;

	while (max-- && wire_len(&e->in)) {
		struct wop o = e->in.op[e->in.head++];

		if (o.write && o.key == c->rbuf_key) {
			u64 off = o.to - c->rbuf_to;

			/* inside rbuf, inside one half, exactly where the
			 * receiver expects the next bytes, within what it
			 * advertised */
			ASSERT_LT(off, c->rbuf_size);
			ASSERT_LE(o.len, c->rbuf_size - off);
			ASSERT_LE(off % e->rs.half + o.len, e->rs.half);
			ASSERT_EQ(off, e->rs.wr_off);
			ASSERT_LE(o.len, e->rs.adv_len);
			memcpy(e->rbuf + off, o.data, o.len);
		} else if (o.write && o.key == c->tsgl_key) {
			u64 off = o.to - c->tsgl_to;

			ASSERT_EQ(o.len, KW_RS_SGE_LEN);
			ASSERT_EQ(off % KW_RS_SGE_LEN, 0);
			ASSERT_LT(off, sizeof(e->tsgl));
			memcpy(e->tsgl + off, o.data, o.len);
		} else if (o.write && o.key == ZC_KEY) {
			/* the target, in order, after rbuf's bytes */
			ASSERT_TRUE(e->zc_on);
			ASSERT_TRUE(e->rs.zc_adv);
			ASSERT_EQ(e->rs.adv_len, 0);
			ASSERT_EQ(o.to, ZC_TO + e->z_wr);
			ASSERT_LE(o.len, e->z_len - e->z_wr);
			memcpy(e->zbuf + e->z_wr, o.data, o.len);
			e->z_wr += o.len;
		} else if (o.write) {
			ASSERT_TRUE(!"Write with a foreign key");
		} else {
			bool zc = !e->rs.adv_len && e->rs.zc_adv;
			int ev = kw_rs_rx_msg(&e->rs, o.msg);

			if (o.msg >> KW_RS_OP_SHIFT != KW_RS_OP_DATA)
				ASSERT_EQ(ev, KW_RS_EV_CREDIT);
			else if (!zc)
				ASSERT_EQ(ev, KW_RS_EV_DATA);
			else if (e->z_wr < e->z_len)
				ASSERT_EQ(ev, KW_RS_EV_ZC_DATA);
			else {
				ASSERT_EQ(ev, KW_RS_EV_ZC_DONE);
				ASSERT_EQ(e->rs.zc.len, 0);
				e->zc_full = true;
			}
		}
		free(o.data);
		check_rx_inv(kwt_fail, e);
		if (*kwt_fail)
			return;
	}
	if (e->in.head == e->in.tail)
		e->in.head = e->in.tail = 0;
}

/* Read up to max bytes and check them against the peer's stream. */
static void ep_read(int *kwt_fail, struct ep *e, const struct ep *peer,
		    u64 max)
{
	u32 off, n, i;

	for (;;) {
		if (e->zc_on && e->rx_done == e->z_start) {
			/* the bytes before the target are read: its turn */
			if (!e->zc_full) {
				ASSERT_EQ(e->rs.readable, 0);
				return;
			}
			for (i = 0; i < e->z_len; i++)
				ASSERT_EQ(e->zbuf[i],
					  stream_byte(peer->seed,
						      e->z_start + i));
			e->rx_done += e->z_len;
			e->zc_bytes += e->z_len;
			e->zc_on = false;
			free(e->zbuf);
			e->zbuf = NULL;
		}
		if (!max || !(n = kw_rs_rx_peek(&e->rs, &off)))
			return;
		/* the reader never gets past the target's place */
		if (e->zc_on)
			ASSERT_LE(n, e->z_start - e->rx_done);
		ASSERT_LT(off, e->rs.cfg.rbuf_size);
		ASSERT_LE(n, e->rs.cfg.rbuf_size - off);
		ASSERT_LE(n, e->rs.readable);
		if (n > max)
			n = (u32)max;
		for (i = 0; i < n; i++)
			if (e->rbuf[off + i] !=
			    stream_byte(peer->seed, e->rx_done + i)) {
				printf("# %s: byte %llu is 0x%02x, sent "
				       "0x%02x\n",
				       e->name,
				       (unsigned long long)(e->rx_done + i),
				       e->rbuf[off + i],
				       stream_byte(peer->seed, e->rx_done + i));
				ASSERT_TRUE(0);
			}
		kw_rs_rx_consume(&e->rs, n);
		e->rx_done += n;
		max -= n;
		check_rx_inv(kwt_fail, e);
		if (*kwt_fail)
			return;
	}
}

/* Run until nothing moves: deliver everything, read everything (if
 * read), give credits, send. */
static void settle(int *kwt_fail, struct ep *a, struct ep *b, bool read)
{
	int i;

	for (i = 0; i < 100; i++) {
		u64 before = a->tx_done + b->tx_done + a->rx_done + b->rx_done +
			     a->credit_msgs + b->credit_msgs;

		ep_deliver(kwt_fail, a, (size_t)-1);
		ep_deliver(kwt_fail, b, (size_t)-1);
		if (read) {
			ep_read(kwt_fail, a, b, (u64)-1);
			ep_read(kwt_fail, b, a, (u64)-1);
		}
		ep_credits(kwt_fail, a, b);
		ep_credits(kwt_fail, b, a);
		ep_send(kwt_fail, a, b, false);
		ep_send(kwt_fail, b, a, false);
		if (*kwt_fail)
			return;
		if (!wire_len(&a->in) && !wire_len(&b->in) &&
		    before == a->tx_done + b->tx_done + a->rx_done +
			      b->rx_done + a->credit_msgs + b->credit_msgs)
			return;
	}
	ASSERT_TRUE(!"settle did not settle");
}

/*
 * The receiver e posts a zero-copy target for the next up to 3 rbufs of
 * the stream (never beyond its end, so that it fills): the bytes before
 * it still come through rbuf, the rest must land in it, in order.
 */
static void ep_zc_post(int *kwt_fail, struct ep *e, const struct ep *peer)
{
	u64 left = peer->tx_total - e->rx_done;
	u32 pre = kw_rs_zc_pre(&e->rs), want;
	struct kw_rs_sge z = { .addr = ZC_TO, .key = ZC_KEY };

	if (e->zc_on || left <= pre)
		return;
	want = rnd_range(1, 3 * e->rs.cfg.rbuf_size);
	if (want > left)
		want = (u32)left;
	if (want <= pre)
		return;
	z.len = want - pre;
	e->zbuf = malloc(z.len);
	ASSERT_TRUE(e->zbuf != NULL);
	memset(e->zbuf, 0xdd, z.len);
	/* armed now, or later (registering takes a while) */
	ASSERT_EQ(kw_rs_zc_post(&e->rs, z.len), 0);
	ASSERT_EQ(kw_rs_zc_post(&e->rs, z.len), -EBUSY);
	if (rnd() & 1)
		kw_rs_zc_arm(&e->rs, z.addr, z.key);
	e->zc_on = true;
	e->zc_full = false;
	e->z_start = e->rx_done + pre;
	e->z_len = z.len;
	e->z_wr = 0;
	e->zc_posts++;
}

static void duplex_zc(int *kwt_fail, const struct kw_rs_cfg *ca,
		      const struct kw_rs_cfg *cb, u64 bytes, u64 seed,
		      bool zc);

static void duplex(int *kwt_fail, const struct kw_rs_cfg *ca,
		   const struct kw_rs_cfg *cb, u64 bytes, u64 seed)
{
	duplex_zc(kwt_fail, ca, cb, bytes, seed, false);
}

static void duplex_zc(int *kwt_fail, const struct kw_rs_cfg *ca,
		      const struct kw_rs_cfg *cb, u64 bytes, u64 seed,
		      bool zc)
{
	struct ep *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	u64 steps = 0;

	ASSERT_TRUE(a && b);
	rng = seed;
	ep_init(kwt_fail, a, "A", ca, seed ^ 0xaaaa, bytes);
	ep_init(kwt_fail, b, "B", cb, seed ^ 0xbbbb, bytes + 12345);
	if (*kwt_fail)
		return;
	pair_connect(kwt_fail, a, b);
	if (*kwt_fail)
		return;
	/* each side's first update advertises its half 1 */
	ep_credits(kwt_fail, a, b);
	ep_credits(kwt_fail, b, a);
	ASSERT_EQ(a->adverts, 1);
	ASSERT_EQ(b->adverts, 1);

	while (a->rx_done < b->tx_total || b->rx_done < a->tx_total) {
		u32 act = (u32)(rnd() % (zc ? 10 : 8));

		ASSERT_LT(steps++, 20000000);
		switch (act) {
		case 8:
			if (!(rnd() & 15))
				ep_zc_post(kwt_fail, a, b);
			else	/* (nothing if armed or gone) */
				kw_rs_zc_arm(&a->rs, ZC_TO, ZC_KEY);
			break;
		case 9:
			if (!(rnd() & 15))
				ep_zc_post(kwt_fail, b, a);
			else
				kw_rs_zc_arm(&b->rs, ZC_TO, ZC_KEY);
			break;
		case 0:
			ep_send(kwt_fail, a, b, true);
			break;
		case 1:
			ep_send(kwt_fail, b, a, true);
			break;
		case 2:
			ep_deliver(kwt_fail, a, rnd_range(0, 64));
			break;
		case 3:
			ep_deliver(kwt_fail, b, rnd_range(0, 64));
			break;
		case 4:	/* mostly small reads, sometimes big ones */
			ep_read(kwt_fail, a, b, rnd() & 1 ?
				rnd_range(0, 3000) : rnd_range(0, 300000));
			break;
		case 5:
			ep_read(kwt_fail, b, a, rnd() & 1 ?
				rnd_range(0, 3000) : rnd_range(0, 300000));
			break;
		case 6:
			ep_credits(kwt_fail, a, b);
			break;
		case 7:
			ep_credits(kwt_fail, b, a);
			break;
		}
		if (*kwt_fail)
			return;
	}
	EXPECT_EQ(a->tx_done, a->tx_total);
	EXPECT_EQ(b->tx_done, b->tx_total);
	EXPECT_EQ(b->rx_done, a->tx_total);
	EXPECT_EQ(a->rx_done, b->tx_total);
	/* the halves went round many times (or targets took their place),
	 * and credits were exercised */
	EXPECT_GT(a->data_msgs, 100);
	EXPECT_GT(b->data_msgs, 100);
	EXPECT_FALSE(a->zc_on);
	EXPECT_FALSE(b->zc_on);
	if (zc) {	/* targets took a good share of both streams */
		EXPECT_GT(a->zc_posts, 10);
		EXPECT_GT(b->zc_posts, 10);
		EXPECT_GT(a->zc_bytes, b->tx_total / 10);
		EXPECT_GT(b->zc_bytes, a->tx_total / 10);
	} else {
		EXPECT_GT(a->adverts, 2 * bytes / ca->rbuf_size - 2);
		EXPECT_GT(b->adverts, 2 * bytes / cb->rbuf_size - 2);
	}
	printf("# %llu steps; A: %llu DATA, %llu credit msgs, %llu adverts,"
	       " %llu targets, %llu bytes there; B: %llu DATA, %llu credit"
	       " msgs, %llu adverts, %llu targets, %llu bytes there\n",
	       (unsigned long long)steps,
	       (unsigned long long)a->data_msgs,
	       (unsigned long long)a->credit_msgs,
	       (unsigned long long)a->adverts,
	       (unsigned long long)a->zc_posts,
	       (unsigned long long)a->zc_bytes,
	       (unsigned long long)b->data_msgs,
	       (unsigned long long)b->credit_msgs,
	       (unsigned long long)b->adverts,
	       (unsigned long long)b->zc_posts,
	       (unsigned long long)b->zc_bytes);
	ep_free(a);
	ep_free(b);
	free(a);
	free(b);
}

TEST(duplex_stream_random)
{
	struct kw_rs_cfg ca = cfg_a, cb = cfg_b;

	ca.rbuf_size = 256 * 1024;
	ca.rq_size = 64;
	cb.rbuf_size = 50000;		/* halves not a power of two */
	cb.rq_size = 7;
	duplex(kwt_fail, &ca, &cb, 4u << 20, 1);
}

TEST(duplex_stream_tiny_buffers)
{
	struct kw_rs_cfg ca = cfg_a, cb = cfg_b;

	ca.rbuf_size = 2;		/* halves of one byte */
	ca.rq_size = 3;
	cb.rbuf_size = 98;
	cb.rq_size = 2;
	duplex(kwt_fail, &ca, &cb, 64 * 1024, 2);
}

TEST(duplex_stream_large_buffers)
{
	struct kw_rs_cfg ca = cfg_a, cb = cfg_b;

	ca.rbuf_size = 4u << 20;	/* halves beyond one Write */
	ca.rq_size = 0x7fff;
	cb.rbuf_size = 200002;
	cb.rq_size = 1000;
	duplex(kwt_fail, &ca, &cb, 6u << 20, 3);
}

/* Zero-copy targets posted at random points of both streams: every byte
 * arrives once, in order, in rbuf or in the target its offset falls in. */
TEST(duplex_stream_zero_copy_targets)
{
	struct kw_rs_cfg ca = cfg_a, cb = cfg_b;

	ca.rbuf_size = 64 * 1024;
	ca.rq_size = 48;
	cb.rbuf_size = 50000;
	cb.rq_size = 7;
	duplex_zc(kwt_fail, &ca, &cb, 4u << 20, 11, true);
}

TEST(duplex_stream_zero_copy_tiny_buffers)
{
	struct kw_rs_cfg ca = cfg_a, cb = cfg_b;

	ca.rbuf_size = 2;
	ca.rq_size = 3;
	cb.rbuf_size = 98;
	cb.rq_size = 2;
	duplex_zc(kwt_fail, &ca, &cb, 64 * 1024, 12, true);
}

/*
 * The target goes out as soon as one of the peer's two entries is free,
 * and not before; rbuf is not advertised while it is posted, and is again
 * once DATA filled it.
 */
TEST(zc_target_waits_for_a_free_entry)
{
	struct kw_rs rs;
	struct kw_rs_credit c;
	struct kw_rs_sge s, z = { .addr = ZC_TO, .key = ZC_KEY, .len = 5000 };
	u32 half = cfg_a.rbuf_size / 2, off;

	ASSERT_EQ(start_with(&rs, &cfg_a, &cfg_b), 0);
	ASSERT_TRUE(kw_rs_credit_due(&rs, &c));	/* half 1 into entry 1 */
	kw_rs_credit_sent(&rs, &c);
	/* both halves are the peer's: 100 bytes of half 0 came */
	ASSERT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_DATA, 100)),
		  KW_RS_EV_DATA);
	EXPECT_EQ(kw_rs_zc_pre(&rs), cfg_a.rbuf_size);
	ASSERT_EQ(kw_rs_zc_post(&rs, z.len), 0);
	EXPECT_EQ(zpost(&rs, &z), -EBUSY);
	EXPECT_FALSE(kw_rs_credit_due(&rs, &c));	/* no entry free */
	/* half 0 fills: its entry is free; reading it frees rbuf space,
	 * which is not advertised */
	ASSERT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_DATA, half - 100)),
		  KW_RS_EV_DATA);
	ASSERT_EQ(kw_rs_rx_peek(&rs, &off), half);
	kw_rs_rx_consume(&rs, half);
	/* not armed yet: nothing goes out */
	EXPECT_FALSE(kw_rs_credit_due(&rs, &c));
	kw_rs_zc_arm(&rs, z.addr, z.key);
	ASSERT_TRUE(kw_rs_credit_due(&rs, &c));
	ASSERT_TRUE(c.advert);
	ASSERT_TRUE(c.zc);
	kw_rs_sge_decode(c.sge, &s);
	EXPECT_EQ(s.addr, ZC_TO);
	EXPECT_EQ(s.key, ZC_KEY);
	EXPECT_EQ(s.len, 5000);
	EXPECT_EQ(c.remote_to, cfg_b.tsgl_to);	/* entry 0 */
	kw_rs_credit_sent(&rs, &c);
	EXPECT_FALSE(kw_rs_credit_due(&rs, &c));
	/* DATA fills half 1 first, then the target */
	ASSERT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_DATA, half)),
		  KW_RS_EV_DATA);
	EXPECT_EQ(rs.readable, half);
	ASSERT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_DATA, 4000)),
		  KW_RS_EV_ZC_DATA);
	EXPECT_EQ(rs.readable, half);
	EXPECT_FALSE(kw_rs_credit_due(&rs, &c));
	ASSERT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_DATA, 1000)),
		  KW_RS_EV_ZC_DONE);
	EXPECT_EQ(rs.zc.len, 0);
	EXPECT_FALSE(kw_rs_zc_end(&rs));
	/* rbuf again: half 0 (read above) into entry 1 */
	ASSERT_TRUE(kw_rs_credit_due(&rs, &c));
	ASSERT_TRUE(c.advert);
	EXPECT_FALSE(c.zc);
	kw_rs_sge_decode(c.sge, &s);
	EXPECT_EQ(s.addr, cfg_a.rbuf_to);
	EXPECT_EQ(c.remote_to, cfg_b.tsgl_to + KW_RS_SGE_LEN);
}

/* A peer that writes more than the target holds, or announces bytes for
 * a target it was never given, is refused. */
TEST(hostile_zc_data)
{
	struct kw_rs rs;
	struct kw_rs_credit c;
	struct kw_rs_sge z = { .addr = ZC_TO, .key = ZC_KEY, .len = 300 };
	u32 half = cfg_a.rbuf_size / 2;

	ASSERT_EQ(start_with(&rs, &cfg_a, &cfg_b), 0);
	/* posted first thing: half 1 is not advertised, half 0 is */
	EXPECT_EQ(kw_rs_zc_pre(&rs), half);
	ASSERT_EQ(zpost(&rs, &z), 0);
	ASSERT_TRUE(kw_rs_credit_due(&rs, &c));
	ASSERT_TRUE(c.zc);
	EXPECT_EQ(c.remote_to, cfg_b.tsgl_to + KW_RS_SGE_LEN);
	/* not sent yet: DATA beyond half 0 is beyond what was given */
	ASSERT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_DATA, half)),
		  KW_RS_EV_DATA);
	EXPECT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_DATA, 1)), -EPROTO);
	kw_rs_credit_sent(&rs, &c);
	EXPECT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_DATA, 301)), -EPROTO);
	EXPECT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_DATA, 200)),
		  KW_RS_EV_ZC_DATA);
	EXPECT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_DATA, 101)), -EPROTO);
	/* ended early, gone out unfilled: the caller must stop the peer;
	 * the reader still stops at its place, and no other is taken */
	EXPECT_TRUE(kw_rs_zc_end(&rs));
	EXPECT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_DATA, 1)), -EPROTO);
	EXPECT_EQ(kw_rs_rx_ready(&rs), half);
	EXPECT_EQ(zpost(&rs, &z), -EBUSY);
	/* one not yet gone out ends quietly: the stream runs on in rbuf */
	ASSERT_EQ(start_with(&rs, &cfg_a, &cfg_b), 0);
	ASSERT_EQ(zpost(&rs, &z), 0);
	EXPECT_FALSE(kw_rs_zc_end(&rs));
	EXPECT_FALSE(rs.zc_mark);
	ASSERT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_DATA, half)),
		  KW_RS_EV_DATA);
	EXPECT_EQ(kw_rs_rx_ready(&rs), half);
	ASSERT_EQ(zpost(&rs, &z), 0);
	EXPECT_EQ(kw_rs_zc_pre(&rs), half);
	EXPECT_FALSE(kw_rs_zc_end(&rs));
	EXPECT_EQ(kw_rs_zc_post(&rs, 0), -EINVAL);
}

/* Filled before the reader got to it: the bytes after it wait until the
 * bytes before it are read, and only then become readable. */
TEST(zc_reader_stops_at_the_target)
{
	struct kw_rs rs;
	struct kw_rs_credit c;
	struct kw_rs_sge z = { .addr = ZC_TO, .key = ZC_KEY, .len = 10 };
	u32 half = cfg_a.rbuf_size / 2, off;

	ASSERT_EQ(start_with(&rs, &cfg_a, &cfg_b), 0);
	ASSERT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_DATA, half)),
		  KW_RS_EV_DATA);
	ASSERT_EQ(zpost(&rs, &z), 0);
	ASSERT_TRUE(kw_rs_credit_due(&rs, &c));
	ASSERT_TRUE(c.zc);
	kw_rs_credit_sent(&rs, &c);
	ASSERT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_DATA, 10)),
		  KW_RS_EV_ZC_DONE);
	EXPECT_TRUE(rs.zc_mark);
	/* filled: nothing to end, and its place stays */
	EXPECT_FALSE(kw_rs_zc_end(&rs));
	EXPECT_TRUE(rs.zc_mark);
	/* half 1 goes out again, and fills, while half 0 is unread */
	ASSERT_TRUE(kw_rs_credit_due(&rs, &c));
	ASSERT_TRUE(c.advert);
	EXPECT_FALSE(c.zc);
	kw_rs_credit_sent(&rs, &c);
	ASSERT_EQ(kw_rs_rx_msg(&rs, KW_RS_MSG(KW_RS_OP_DATA, half)),
		  KW_RS_EV_DATA);
	EXPECT_EQ(rs.readable, 2 * half);
	EXPECT_EQ(kw_rs_rx_ready(&rs), half);
	ASSERT_EQ(kw_rs_rx_peek(&rs, &off), half);
	EXPECT_EQ(off, 0);
	kw_rs_rx_consume(&rs, 2 * half);	/* capped at the place */
	EXPECT_EQ(rs.readable, half);
	EXPECT_FALSE(rs.zc_mark);
	ASSERT_EQ(kw_rs_rx_peek(&rs, &off), half);
	EXPECT_EQ(off, half);
}

/* A reader that does not read stops the writer by rbuf space: exactly
 * rbuf_size bytes go, then nothing until a whole half is read. */
TEST(sender_blocks_on_full_rbuf)
{
	struct kw_rs_cfg ca = cfg_a, cb = cfg_b;
	struct ep *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	struct kw_rs_sge d;
	int round;

	ASSERT_TRUE(a && b);
	rng = 7;
	cb.rbuf_size = 4096;
	cb.rq_size = 1000;
	ep_init(kwt_fail, a, "A", &ca, 11, 1 << 20);
	ep_init(kwt_fail, b, "B", &cb, 12, 0);
	if (*kwt_fail)
		return;
	pair_connect(kwt_fail, a, b);
	settle(kwt_fail, a, b, false);
	if (*kwt_fail)
		return;
	EXPECT_EQ(a->tx_done, 4096);
	EXPECT_EQ(b->rs.readable, 4096);
	EXPECT_EQ(b->rs.adv_len, 0);
	EXPECT_EQ(kw_rs_tx_room(&a->rs, a->tsgl, &d), 0);
	for (round = 0; round < 5; round++) {
		u64 sent = a->tx_done;

		/* one byte short of a half: still blocked */
		ep_read(kwt_fail, b, a, 2047);
		settle(kwt_fail, a, b, false);
		if (*kwt_fail)
			return;
		EXPECT_EQ(a->tx_done, sent);
		EXPECT_EQ(kw_rs_tx_room(&a->rs, a->tsgl, &d), 0);
		/* the last byte of the half: it is advertised, A resumes
		 * with exactly one half more */
		ep_read(kwt_fail, b, a, 1);
		ep_credits(kwt_fail, b, a);
		ep_deliver(kwt_fail, a, (size_t)-1);
		ASSERT_EQ(kw_rs_tx_room(&a->rs, a->tsgl, &d), 2048);
		EXPECT_EQ(d.addr, cb.rbuf_to + (round & 1) * 2048);
		settle(kwt_fail, a, b, false);
		if (*kwt_fail)
			return;
		EXPECT_EQ(a->tx_done, sent + 2048);
		EXPECT_EQ(b->rs.readable, 4096);
		EXPECT_EQ(kw_rs_tx_room(&a->rs, a->tsgl, &d), 0);
	}
	/* the reader reads everything: the stream was intact */
	ep_read(kwt_fail, b, a, (u64)-1);
	EXPECT_EQ(b->rx_done, 4096 + 5 * 2048);
	ep_free(a);
	ep_free(b);
	free(a);
	free(b);
}

/* With a tiny rq_size and 1-byte Writes the sender stops at the message
 * credit limit (rbuf has plenty of room) until the update comes back,
 * across more than 2^16 messages. */
static void credit_run(int *kwt_fail, u16 rq_size, u32 rounds_min_msgs)
{
	struct kw_rs_cfg ca = cfg_a, cb = cfg_b;
	struct ep *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	struct kw_rs_sge d;
	u64 msgs = 0, rounds = 0, by_credit = 0;

	ASSERT_TRUE(a && b);
	rng = rq_size;
	cb.rbuf_size = 64;
	cb.rq_size = rq_size;
	ep_init(kwt_fail, a, "A", &ca, 21, 1ull << 40);
	ep_init(kwt_fail, b, "B", &cb, 22, 0);
	if (*kwt_fail)
		return;
	a->max_write = 1;
	pair_connect(kwt_fail, a, b);
	ep_credits(kwt_fail, a, b);
	ep_credits(kwt_fail, b, a);
	ep_deliver(kwt_fail, a, (size_t)-1);
	if (*kwt_fail)
		return;
	while (msgs < rounds_min_msgs) {
		u64 before = a->data_msgs;
		u16 window = (u16)(a->rs.sseq_comp - a->rs.sseq_no);
		u32 space = b->rs.adv_len;	/* all of it known to A */
		u32 expect = window < space ? window : space;
		u16 start_seq = a->rs.sseq_no;

		ASSERT_LE(window, rq_size);
		ep_send(kwt_fail, a, b, false);
		if (*kwt_fail)
			return;
		/* exactly that many went (1 byte each), then it stops */
		ASSERT_EQ(a->data_msgs - before, expect);
		ASSERT_EQ(a->rs.sseq_no, (u16)(start_seq + expect));
		if (window <= space) {
			ASSERT_EQ(a->rs.sseq_no, a->rs.sseq_comp);
			by_credit++;
		}
		ASSERT_EQ(kw_rs_tx_room(&a->rs, a->tsgl, &d), 0);
		msgs += expect;
		/* B receives (DATA beyond its credits would fail rx_msg),
		 * reads some, and answers */
		ep_deliver(kwt_fail, b, (size_t)-1);
		ep_read(kwt_fail, b, a, rnd_range(0, 64));
		ep_credits(kwt_fail, b, a);
		/* still blocked until the update is delivered */
		ASSERT_EQ(kw_rs_tx_room(&a->rs, a->tsgl, &d), 0);
		ep_deliver(kwt_fail, a, (size_t)-1);
		if (*kwt_fail)
			return;
		rounds++;
	}
	a->tx_total = a->tx_done;
	a->chunk_left = 0;
	settle(kwt_fail, a, b, true);
	if (*kwt_fail)
		return;
	EXPECT_EQ(b->rx_done, a->tx_done);
	EXPECT_EQ(a->tx_done, a->data_msgs);
	EXPECT_GT(a->data_msgs, 65536);
	EXPECT_EQ(a->rs.sseq_no, (u16)a->data_msgs);
	EXPECT_EQ(b->rs.rx_msgs, (u16)a->data_msgs);
	/* mostly the credit limit stopped it, not rbuf space */
	EXPECT_GT(by_credit, rounds / 2);
	printf("# rq_size %u: %llu messages, %llu rounds, %llu stopped by "
	       "credits\n", rq_size, (unsigned long long)msgs,
	       (unsigned long long)rounds, (unsigned long long)by_credit);
	ep_free(a);
	ep_free(b);
	free(a);
	free(b);
}

TEST(credits_rq2_wrap)
{
	credit_run(kwt_fail, 2, 70000);
}

TEST(credits_rq3_wrap)
{
	credit_run(kwt_fail, 3, 70000);
}

TEST(credits_rq4_wrap)
{
	credit_run(kwt_fail, 4, 140000);
}
