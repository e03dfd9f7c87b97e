/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * The rsockets stream protocol (rdma-core's librdmacm), as it runs over
 * iWARP: sans-I/O state and codecs for kiwarp's extended sockets (es.c).
 * Documentation/extended-sockets.md describes the protocol; this is the
 * part of it that is plain arithmetic over buffers, so that it builds in
 * Kbuild and in user space (selftests/unit/test_rsock.c).
 *
 * In short: each side exposes a receive buffer (rbuf) in two halves and a
 * small "target SGL" array, both writable by the peer. A side advertises a
 * free half of its rbuf by an RDMA Write of a 16-byte SGE into the peer's
 * target SGL, followed by a credit message. Data goes as an RDMA Write into
 * the advertised half, followed by a DATA message with its length. Every
 * message is a 4-byte Send (iWARP has no Write with Immediate).
 *
 * Byte order: the connection data is big-endian. Messages and target SGL
 * entries are in the sending host's order in rsockets (it flags big-endian
 * hosts with KW_RS_FLAG_NET, and its own handling of a mismatch is broken on
 * iWARP): kiwarp always speaks the little-endian variant, on any host, and
 * refuses a peer that sets KW_RS_FLAG_NET.
 *
 * Credits: the peer may have at most "credits" DATA messages outstanding,
 * a sequence number limit carried by KW_RS_OP_SGL messages (and initially
 * by the connection data). kiwarp grants message credits for receive
 * buffers it has reposted and byte space by advertisements, so a reader
 * that does not read stops the writer by rbuf space, not by credits.
 *
 * Nothing here is trusted from the peer: every message, every credit and
 * every DATA length is checked against what this side advertised, and the
 * target SGL entries the peer writes are copied once and bounded before
 * they are used.
 */
#ifndef KW_RSOCK_H
#define KW_RSOCK_H

#include "kw_compat.h"

#define KW_RS_CONN_LEN		40	/* struct rs_conn_data on the wire */
#define KW_RS_VERSION		1
#define KW_RS_FLAG_NET		0x01	/* sender is big-endian */
#define KW_RS_FLAG_IOMAP	0x02	/* an iomap table follows the SGL */
#define KW_RS_MSG_LEN		4	/* one message, one Send */
#define KW_RS_SGE_LEN		16	/* addr u64, key u32, length u32 */
#define KW_RS_SGL_SIZE		2	/* entries of our target SGL */
#define KW_RS_MAX_SGL		256	/* the most entries we accept of a peer */
#define KW_RS_MAX_TRANSFER	65536	/* the largest Write rsockets makes */
#define KW_RS_IOMAP_LEN		24	/* offset u64, then an SGE */
#define KW_RS_IOMAP_MAX		128	/* the most entries we offer or use */

/* Messages: op in bits 31..29, value in 28..0. */
#define KW_RS_OP_SHIFT		29
#define KW_RS_VAL_MASK		0x1fffffffu
#define KW_RS_OP_DATA		0	/* value: bytes written */
#define KW_RS_OP_DATA_MORE	1	/* reserved */
#define KW_RS_OP_WRITE		2	/* local to rsockets, never sent */
#define KW_RS_OP_DRA_MORE	3	/* reserved */
#define KW_RS_OP_SGL		4	/* value: new credit limit (u16) */
#define KW_RS_OP_RSVD		5
#define KW_RS_OP_IOMAP_SGL	6	/* value: index of the iomap entry
					 * just written */
#define KW_RS_OP_CTRL		7	/* value: KW_RS_CTRL_* */
#define KW_RS_CTRL_DISCONNECT	0
#define KW_RS_CTRL_KEEPALIVE	1
#define KW_RS_CTRL_SHUTDOWN	2
#define KW_RS_MSG(op, val)	(((u32)(op) << KW_RS_OP_SHIFT) | \
				 ((u32)(val) & KW_RS_VAL_MASK))

struct kw_rs_sge {
	u64 addr;
	u32 key;
	u32 len;
};

/*
 * An iomap entry (rsockets' struct rs_iomap): the peer's riomap() of len
 * bytes at addr/key, reachable by riowrite() at offsets [offset,
 * offset + len). Each side offers a table of them (iomap_size entries in
 * the connection data, right after its target SGL, same STag) which the
 * other side fills by RDMA Writes, each followed by an IOMAP_SGL message
 * with the entry's index. Little-endian, as target SGL entries.
 */
struct kw_rs_iomap {
	u64 offset;
	struct kw_rs_sge sge;
};

/* struct rs_conn_data, host order. */
struct kw_rs_conn {
	u8 version;
	u8 flags;
	u16 credits;
	u8 iomap_size;			/* encoded (rsockets' scale) */
	struct kw_rs_sge target_sgl;	/* .len: number of entries */
	struct kw_rs_sge data_buf;	/* the first buffer the peer may fill */
};

void kw_rs_conn_encode(const struct kw_rs_conn *c, u8 *out);
/* -EPROTO if short, of another version, or unusable (see rsock.c). */
int kw_rs_conn_decode(const u8 *p, u32 len, struct kw_rs_conn *c);
void kw_rs_sge_encode(const struct kw_rs_sge *s, u8 *out);
void kw_rs_sge_decode(const u8 *p, struct kw_rs_sge *s);
void kw_rs_iomap_encode(const struct kw_rs_iomap *m, u8 *out);
void kw_rs_iomap_decode(const u8 *p, struct kw_rs_iomap *m);
/* rsockets' 8-bit scale of iomap_size: exact up to 128, then coarse. */
u8 kw_rs_iomap_scale(u32 entries);
u32 kw_rs_iomap_entries(u8 scaled);

static inline void kw_rs_msg_encode(u32 msg, u8 *out)
{
	put_unaligned_le32(msg, out);
}

static inline u32 kw_rs_msg_decode(const u8 *p)
{
	return get_unaligned_le32(p);
}

/* This side's resources, fixed for the connection's life. */
struct kw_rs_cfg {
	u32 rbuf_size;		/* even, 2 .. 2^30 */
	u16 rq_size;		/* DATA messages the peer may have in flight */
	u64 rbuf_to;		/* rbuf's TO base and STag (remote write) */
	u32 rbuf_key;
	u64 tsgl_to;		/* target SGL array's TO base and STag */
	u32 tsgl_key;
	u32 iomap_size;		/* iomap entries offered after the target
				 * SGL, 0 .. KW_RS_IOMAP_MAX */
};

struct kw_rs {
	struct kw_rs_cfg cfg;
	u32 half;		/* rbuf_size / 2: one advertised buffer */

	/* sender */
	u16 sseq_no;		/* DATA messages sent */
	u16 sseq_comp;		/* limit granted by the peer */
	struct kw_rs_sge target;	/* buffer being filled (our copy) */
	u32 target_sge;		/* its target SGL entry; the next one is
				 * (target_sge + 1) % KW_RS_SGL_SIZE */

	/* receiver */
	u16 rx_msgs;		/* DATA messages received */
	u16 granted;		/* the limit last sent to the peer */
	u16 credit_mark;	/* send a credit-only update at rx_msgs == */
	u32 rbuf_free;		/* consumed bytes not yet re-advertised */
	u32 rbuf_free_off;	/* offset of the next half to advertise */
	u32 adv_len;		/* advertised bytes not yet filled */
	u32 wr_off;		/* where the next DATA bytes are */
	u32 readable;		/* received, not yet consumed */
	u32 rd_off;		/* next byte to read */
	u64 remote_sgl_to;	/* the peer's target SGL */
	u32 remote_sgl_key;
	u32 remote_sgl_count;
	u32 remote_sge;		/* its entry our next advertisement goes to */
	u32 remote_iomap_count;	/* entries of the peer's iomap table we
				 * may fill (at most KW_RS_IOMAP_MAX) */

	/* receiver: a zero-copy target (kw_rs_zc_post), zc.len 0: none */
	struct kw_rs_sge zc;
	u32 zc_left;		/* of zc.len, not yet announced by DATA */
	bool zc_armed;		/* zc.addr and zc.key are set */
	bool zc_adv;		/* advertised to the peer */
	bool zc_mark;		/* its place in the stream is still ahead of
				 * the reader (maybe after it was filled) */
	u32 zc_pre;		/* ... after these many rbuf bytes */
};

/* rbuf_size/rq_size out of range: -EINVAL. */
int kw_rs_init(struct kw_rs *rs, const struct kw_rs_cfg *cfg);
/* Our connection data (the first half of rbuf is offered). */
void kw_rs_local_conn(const struct kw_rs *rs, struct kw_rs_conn *c);
/* The peer's connection data, decoded: -EPROTO if unusable. */
int kw_rs_start(struct kw_rs *rs, const struct kw_rs_conn *peer);

/*
 * Sender. kw_rs_tx_room() says how many bytes one Write may carry now (0:
 * no credit or no advertised space) and where they go (*dst: the peer's
 * address and STag); tsgl is our target SGL array (KW_RS_SGL_SIZE entries
 * written by the peer), from which the next buffer is taken (and its
 * length zeroed there, so that a re-advertisement shows): the caller must
 * keep the peer's Writes into tsgl from being placed meanwhile (es.c holds
 * the socket lock, which the receive path runs under). After posting
 * the Write of len <= room bytes, kw_rs_tx_sent() returns the DATA message
 * to Send behind it.
 */
u32 kw_rs_tx_room(struct kw_rs *rs, u8 *tsgl, struct kw_rs_sge *dst);
u32 kw_rs_tx_sent(struct kw_rs *rs, u32 len);

/*
 * riomap(): an entry of the peer's iomap table is written by an RDMA Write
 * (of KW_RS_IOMAP_LEN bytes to *dst) and announced by the message that
 * kw_rs_iomap_sent() returns, which takes a message credit as DATA does.
 * kw_rs_iomap_dst() is false when there is no credit or no such entry.
 */
bool kw_rs_iomap_dst(const struct kw_rs *rs, u32 index, struct kw_rs_sge *dst);
u32 kw_rs_iomap_sent(struct kw_rs *rs, u32 index);

/*
 * riowrite(): the entry of our own iomap table that holds offset, into
 * *m; false if none does. tbl: cfg.iomap_size entries as the peer wrote
 * them, decoded when their IOMAP_SGL message arrived (a copy of the wire
 * table taken then is whole: the entry's Write was placed before the
 * message, and any later Write of it comes after).
 */
bool kw_rs_iomap_find(const struct kw_rs *rs, const struct kw_rs_iomap *tbl,
		      u64 offset, struct kw_rs_iomap *m);

/* What an incoming message means. */
enum kw_rs_event {
	KW_RS_EV_NONE,		/* nothing for the application (keepalive,
				 * an update of our iomap table) */
	KW_RS_EV_DATA,		/* bytes became readable */
	KW_RS_EV_ZC_DATA,	/* bytes went to the zero-copy target */
	KW_RS_EV_ZC_DONE,	/* ... which they filled: it is forgotten */
	KW_RS_EV_CREDIT,	/* the sender may go on */
	KW_RS_EV_SHUTDOWN,	/* peer will send no more (half-close) */
	KW_RS_EV_DISCONNECT,	/* peer closed both directions */
};

/* A received message: a KW_RS_EV_*, or -EPROTO for a protocol violation
 * (reserved op, an iomap update of an entry we do not offer, DATA or an
 * update beyond the credits, DATA beyond the advertised space or across
 * the end of an advertised buffer, a credit limit going back). */
int kw_rs_rx_msg(struct kw_rs *rs, u32 msg);

/*
 * Reader: kw_rs_rx_peek() gives the offset in rbuf of the next readable
 * byte and how many follow it contiguously (0: nothing to read);
 * kw_rs_rx_consume() takes n <= that many. kw_rs_rx_ready() is how many
 * are readable in all. Neither goes past a zero-copy target's place in
 * the stream: the bytes after it come once the reader is there and the
 * target is filled.
 */
u32 kw_rs_rx_peek(const struct kw_rs *rs, u32 *off);
void kw_rs_rx_consume(struct kw_rs *rs, u32 n);
u32 kw_rs_rx_ready(const struct kw_rs *rs);

/*
 * Credit update: due when a whole half of rbuf is free again (then with an
 * advertisement: a 16-byte Write of *sge to remote_to/remote_key, before
 * the message) or when half the message credits were used. The caller
 * posts it and calls kw_rs_credit_sent() with the same struct.
 */
struct kw_rs_credit {
	bool advert;
	bool zc;		/* the advertised buffer is the zero-copy one */
	u8 sge[KW_RS_SGE_LEN];	/* encoded entry to Write */
	u64 remote_to;
	u32 remote_key;
	u32 msg;		/* KW_RS_OP_SGL message to Send */
};
bool kw_rs_credit_due(const struct kw_rs *rs, struct kw_rs_credit *c);
void kw_rs_credit_sent(struct kw_rs *rs, const struct kw_rs_credit *c);

/*
 * Zero-copy receive: the application's own buffer as the peer's next
 * target, so that its Writes land there instead of in rbuf. The stream
 * bytes that come before it are those readable now and those the peer
 * may still write into halves of rbuf it was given: kw_rs_zc_pre() says
 * how many. kw_rs_zc_post() reserves the len > 0 stream bytes that
 * follow them for a buffer (-EBUSY while one is posted, or the reader has
 * not reached the last one's place), and kw_rs_zc_arm() says where it
 * is (addr, key: it may take a while to register). From then on no half
 * of rbuf is advertised: the buffer goes out, once armed, by
 * kw_rs_credit_due(), as soon as one of the peer's target SGL
 * entries is free (the peer fills its buffers in order and alternates
 * between the entries, so an entry is free once the buffer it held is
 * full); DATA messages beyond rbuf's advertised bytes fill it
 * (KW_RS_EV_ZC_DATA), and the one that fills it (KW_RS_EV_ZC_DONE) ends
 * it, after which rbuf is advertised again. The reader meanwhile gets
 * the kw_rs_zc_pre() bytes before it and no more (kw_rs_rx_peek()) until
 * it is filled. kw_rs_zc_end() ends it early (the end of the stream, an
 * error, a cancel) and is true if it had gone out unfilled: the peer may
 * still write into it, and only an end of the stream keeps it from doing
 * so (the reader still stops at its place). Once it filled there is
 * nothing to end: false, and its place stays until the reader gets there.
 */
u32 kw_rs_zc_pre(const struct kw_rs *rs);
int kw_rs_zc_post(struct kw_rs *rs, u32 len);
void kw_rs_zc_arm(struct kw_rs *rs, u64 addr, u32 key);
bool kw_rs_zc_end(struct kw_rs *rs);

#endif /* KW_RSOCK_H */
