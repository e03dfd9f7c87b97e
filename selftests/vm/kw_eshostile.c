// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Extended sockets against a hostile rsockets peer (issue 9, "Bad input"):
 * a raw peer on a plain TCP socket runs the MPA exchange with rsockets'
 * connection data, then speaks the stream protocol by hand (RDMA Writes
 * into the receive buffer the IWARP_MODE socket advertised, 4-byte Sends
 * for the messages) and breaks its rules: Writes over bytes not yet read
 * or into space not offered, DATA beyond the credits, garbage messages,
 * a message of the wrong size, a disconnect between a Write and its DATA,
 * iomap updates out of range or beyond the credits. And, as an RNIC would
 * see them, riomap()'s entry and message and riowrite()'s bare Write.
 * The socket's reader must get the bytes that were announced intact, then
 * an error (never the attacker's bytes), and a Write outside the window a
 * DDP base-or-bounds Terminate on the wire.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kiwarp.h"
#include "kw_vmtest.h"
#include "iwarp.h"
#include "rsock.h"
#include "kw_rawpeer.h"
#include "../unit/harness.h"

#ifndef TCP_ULP
#define TCP_ULP 31
#endif

/* The raw peer's own (fake) resources, named in its connection data. */
#define PEER_TSGL_TO	0x5000
#define PEER_TSGL_KEY	0x1234
#define PEER_RBUF_TO	0x90000
#define PEER_RBUF_KEY	0x5678
#define PEER_CREDITS	16

/* the raw peer's receive buffer length and credits, and the ES socket's
 * SO_SNDBUF (0: not set), for the next hp_connect() */
static u32 hp_data_buf_len = 65536;
static u16 hp_credits = PEER_CREDITS;
static int hp_sndbuf;

struct hp {
	int raw, es;		/* the raw peer's socket; the ES socket */
	struct rp p;
	struct kw_rs_conn es_conn;	/* what the ES socket offered */
	u32 msn;		/* the raw peer's last Send MSN */
	int sw_ret;
	pthread_t sw;
};

static void *es_switch(void *arg)
{
	struct hp *h = arg;
	int mode = IWARP_MODE_PASSIVE;

	h->sw_ret = setsockopt(h->es, SOL_IWARP, IWARP_MODE, &mode,
			       sizeof(mode)) ? -errno : 0;
	return NULL;
}

/*
 * Connect: the ES socket is the MPA responder (IWARP_MODE_PASSIVE), the
 * raw peer the initiator with rsockets' connection data. 0 or a step
 * number that failed.
 */
static int hp_connect_io(struct hp *h, int rcvbuf, int es_iomap,
			 int peer_iomap);

static int hp_connect(struct hp *h, int rcvbuf)
{
	return hp_connect_io(h, rcvbuf, 0, 0);
}

/* ... with iomap tables: es_iomap entries offered by the ES socket
 * (IWARP_IOMAP_SIZE), peer_iomap by the raw peer (its connection data). */
static int hp_connect_io(struct hp *h, int rcvbuf, int es_iomap,
			 int peer_iomap)
{
	struct kw_mpa_cfg cfg = { .rev = 2, .crc = true, .ird = 1, .ord = 1 };
	struct kw_rs_conn mine = {
		.version = KW_RS_VERSION, .credits = hp_credits,
		.target_sgl = { PEER_TSGL_TO, PEER_TSGL_KEY, 2 },
		.data_buf = { PEER_RBUF_TO, PEER_RBUF_KEY, hp_data_buf_len },
		.flags = peer_iomap ? KW_RS_FLAG_IOMAP : 0,
		.iomap_size = kw_rs_iomap_scale(peer_iomap),
	};
	struct kw_mpa_frame req, rep;
	struct kw_mpa_result res;
	u8 pd[KW_RS_CONN_LEN], buf[600];
	int len, step = 0;

	memset(h, 0, sizeof(*h));
	h->raw = h->es = -1;
	if (tcp_pair(&h->raw, &h->es))
		return 1;
	if (rcvbuf && setsockopt(h->es, SOL_SOCKET, SO_RCVBUF, &rcvbuf,
				 sizeof(rcvbuf)))
		return 2;
	if (hp_sndbuf && setsockopt(h->es, SOL_SOCKET, SO_SNDBUF, &hp_sndbuf,
				    sizeof(hp_sndbuf)))
		return 2;
	if (setsockopt(h->es, IPPROTO_TCP, TCP_ULP, KIWARP_ULP_NAME,
		       sizeof(KIWARP_ULP_NAME) - 1))
		return 3;
	if (es_iomap && setsockopt(h->es, SOL_IWARP, IWARP_IOMAP_SIZE,
				   &es_iomap, sizeof(es_iomap)))
		return 3;
	if (pthread_create(&h->sw, NULL, es_switch, h))
		return 4;
	kw_rs_conn_encode(&mine, pd);
	kw_mpa_make_request(&cfg, &req);
	len = kw_mpa_encode(&req, pd, sizeof(pd), buf, sizeof(buf));
	if (len < 0 || writen(h->raw, buf, len))
		step = 5;
	else if (rp_read_frame(h->raw, true, &rep, buf) ||
		 kw_mpa_negotiate_initiator(&cfg, &rep, &res))
		step = 6;
	else if (kw_rs_conn_decode(rep.ulp_pd, rep.ulp_pd_len, &h->es_conn))
		step = 7;
	if (step)	/* end the switch: it must not outlive this frame */
		shutdown(h->raw, SHUT_RDWR);
	pthread_join(h->sw, NULL);
	if (step)
		return step;
	if (h->sw_ret)
		return 8;
	h->p = (struct rp){ h->raw, res.crc };
	return 0;
}

static void hp_close(struct hp *h)
{
	close(h->es);
	close(h->raw);
}

/* An RDMA Write of len bytes of fill at offset off of the ES socket's
 * receive buffer. */
static int hp_write(struct hp *h, u32 off, u32 len, u8 fill)
{
	static u8 pl[1 << 17];
	struct kw_tx_msg m = { .opcode = KW_OP_WRITE, .len = len,
		.stag = h->es_conn.data_buf.key,
		.to = h->es_conn.data_buf.addr + off };

	if (len > sizeof(pl))
		return -1;
	memset(pl, fill, len);
	return rp_send(&h->p, &m, pl, 0);
}

/* A Send of n bytes (an rsockets message is 4). */
static int hp_send(struct hp *h, const u8 *b, u32 n)
{
	struct kw_tx_msg m = { .opcode = KW_OP_SEND, .len = n,
		.qn = KW_QN_SEND, .msn = ++h->msn };

	return rp_send(&h->p, &m, b, 0);
}

static int hp_msg(struct hp *h, u32 msg)
{
	u8 b[KW_RS_MSG_LEN];

	kw_rs_msg_encode(msg, b);
	return hp_send(h, b, sizeof(b));
}

/* Write then announce: the protocol as rsockets runs it. */
static int hp_data(struct hp *h, u32 off, u32 len, u8 fill)
{
	return hp_write(h, off, len, fill) ||
	       hp_msg(h, KW_RS_MSG(KW_RS_OP_DATA, len));
}

/*
 * Wait until the ES socket's TCP acknowledged all the raw peer sent: the
 * receive path has parsed it (placed, CQEs made), while the socket's own
 * calls, which take the CQEs, have not run.
 */
static int raw_all_taken(struct hp *h)
{
	double end = now() + 10;
	int n;

	while (now() < end) {
		if (ioctl(h->raw, SIOCOUTQ, &n))
			return -errno;
		if (!n) {
			usleep(100 * 1000);
			return 0;
		}
		usleep(10 * 1000);
	}
	return -ETIMEDOUT;
}

/* Wait until the ES socket has n bytes readable (MSG_PEEK, which also
 * makes it take the DATA messages). */
static int es_wait_readable(struct hp *h, size_t n)
{
	static u8 b[1 << 17];
	struct pollfd p = { .fd = h->es, .events = POLLIN };
	double end = now() + 5;
	ssize_t r;

	while (now() < end) {
		r = recv(h->es, b, n, MSG_PEEK | MSG_DONTWAIT);
		if (r == (ssize_t)n)
			return 0;
		if (r < 0 && errno != EAGAIN)
			return -errno;
		poll(&p, 1, 100);
	}
	return -ETIMEDOUT;
}

/*
 * Read everything the ES socket still gives: every byte must be fill;
 * returns the count, and the errno that ended it in *err (0: EOF).
 */
static long es_drain(struct hp *h, u8 fill, int *err, int *bad)
{
	u8 b[4096];
	long total = 0;
	ssize_t r;
	int i;

	*bad = 0;
	for (;;) {
		struct pollfd p = { .fd = h->es, .events = POLLIN };

		if (poll(&p, 1, 5000) != 1) {
			*err = ETIMEDOUT;
			return total;
		}
		r = recv(h->es, b, sizeof(b), MSG_DONTWAIT);
		if (r < 0 && errno == EAGAIN)
			continue;
		if (r <= 0) {
			*err = r ? errno : 0;
			return total;
		}
		for (i = 0; i < r; i++)
			if (b[i] != fill)
				(*bad)++;
		total += r;
	}
}

/* The raw peer's view: kiwarp's Terminate (or none within 10 s). */
static struct rp_sink sink;

static bool hp_term(struct hp *h)
{
	struct kw_rx rx;

	memset(&sink, 0, sizeof(sink));
	kw_rx_init(&rx, &rp_sink_ops, &sink, h->p.crc, 0);
	rp_read(&h->p, &rx, &sink, 10, NULL);
	return sink.got_term;
}

/* A Write outside the window: kiwarp's Terminate on the wire is DDP,
 * tagged buffer, base or bounds violation. */
#define EXPECT_BOUNDS_TERMINATE(h)					\
	do {								\
		ASSERT_TRUE(hp_term(h));				\
		EXPECT_EQ(sink.term.layer, KW_TERM_LAYER_DDP);		\
		EXPECT_EQ(sink.term.etype, KW_TERM_DDP_ETYPE_TAGGED);	\
		EXPECT_EQ(sink.term.ecode, KW_TERM_DDP_T_BASE_BOUNDS);	\
	} while (0)

/* The socket, after a violation: an error, not EOF and not a hang. */
#define EXPECT_STREAM_ERROR(err)					\
	EXPECT_TRUE((err) == ECONNRESET || (err) == EPROTO)

TEST(write_over_unread_bytes_is_terminated)
{
	struct hp h;
	int err, bad;
	long n;

	ASSERT_EQ(hp_connect(&h, 0), 0);
	ASSERT_EQ(hp_data(&h, 0, 100, 'A'), 0);
	ASSERT_EQ(es_wait_readable(&h, 100), 0);
	/* the 100 bytes are announced and not yet read: off limits */
	hp_write(&h, 0, 50, 'B');
	EXPECT_BOUNDS_TERMINATE(&h);
	n = es_drain(&h, 'A', &err, &bad);
	note("read %ld bytes after the violation, then errno %d", n, err);
	EXPECT_TRUE(n == 0 || n == 100);
	EXPECT_EQ(bad, 0);
	EXPECT_STREAM_ERROR(err);
	hp_close(&h);
}

TEST(write_into_space_not_offered_is_terminated)
{
	struct hp h;
	u32 half;
	int err, bad;
	long n;

	ASSERT_EQ(hp_connect(&h, 16384), 0);
	half = h.es_conn.data_buf.len;
	ASSERT_GT(half, 0);
	ASSERT_LE(half, 65536);
	/* both halves filled and announced, none read: nothing is offered */
	ASSERT_EQ(hp_data(&h, 0, half, 'A'), 0);
	ASSERT_EQ(hp_data(&h, half, half, 'A'), 0);
	ASSERT_EQ(es_wait_readable(&h, 2 * half), 0);
	hp_write(&h, half, 1, 'B');
	EXPECT_BOUNDS_TERMINATE(&h);
	n = es_drain(&h, 'A', &err, &bad);
	note("half %u: read %ld bytes, then errno %d", half, n, err);
	EXPECT_TRUE(n == 0 || n == 2 * half);
	EXPECT_EQ(bad, 0);
	EXPECT_STREAM_ERROR(err);
	hp_close(&h);
}

/* Read and not yet offered again: no Write may land there either. */
TEST(write_into_read_space_not_readvertised_is_terminated)
{
	struct hp h;
	u8 b[100];

	ASSERT_EQ(hp_connect(&h, 0), 0);
	ASSERT_EQ(hp_data(&h, 0, 100, 'A'), 0);
	ASSERT_EQ(es_wait_readable(&h, 100), 0);
	/* 100 < half: read, but not advertised again */
	ASSERT_EQ(recv(h.es, b, sizeof(b), MSG_WAITALL), 100);
	hp_write(&h, 0, 50, 'B');
	EXPECT_BOUNDS_TERMINATE(&h);
	hp_close(&h);
}

/*
 * Write, DATA, then a Write over the same bytes, all in one go, before the
 * socket takes the DATA: the window closed as the DATA's Send was placed,
 * so the second Write is refused and the reader gets the first bytes.
 */
TEST(write_right_behind_its_data_is_terminated)
{
	static u8 wire[4096], pa[100], pb[100];
	struct kw_tx_msg w1 = { .opcode = KW_OP_WRITE, .len = 100 };
	struct kw_tx_msg d = { .opcode = KW_OP_SEND, .len = KW_RS_MSG_LEN,
			       .qn = KW_QN_SEND };
	struct kw_tx_msg w2;
	u8 msg[KW_RS_MSG_LEN], *e;
	int err, bad;
	struct hp h;
	long n;

	ASSERT_EQ(hp_connect(&h, 0), 0);
	w1.stag = h.es_conn.data_buf.key;
	w1.to = h.es_conn.data_buf.addr;
	w2 = w1;
	d.msn = ++h.msn;
	memset(pa, 'A', sizeof(pa));
	memset(pb, 'B', sizeof(pb));
	kw_rs_msg_encode(KW_RS_MSG(KW_RS_OP_DATA, 100), msg);
	e = rp_build(&h.p, &w1, pa, wire);
	ASSERT_TRUE(e != NULL);
	e = rp_build(&h.p, &d, msg, e);
	ASSERT_TRUE(e != NULL);
	e = rp_build(&h.p, &w2, pb, e);
	ASSERT_TRUE(e != NULL);
	ASSERT_EQ(writen(h.raw, wire, e - wire), 0);
	EXPECT_BOUNDS_TERMINATE(&h);
	n = es_drain(&h, 'A', &err, &bad);
	note("read %ld bytes, then errno %d", n, err);
	EXPECT_TRUE(n == 0 || n == 100);
	EXPECT_EQ(bad, 0);
	EXPECT_STREAM_ERROR(err);
	hp_close(&h);
}

TEST(data_beyond_the_credits_is_an_error)
{
	struct hp h;
	int i, err, bad, credits;
	long n;

	ASSERT_EQ(hp_connect(&h, 0), 0);
	credits = h.es_conn.credits;
	ASSERT_GT(credits, 0);
	ASSERT_LT(credits, 1000);
	/*
	 * One byte per DATA message, one more message than granted, all
	 * placed before the socket takes any of them: it grants more only
	 * after a batch (es_process), so the last one is beyond the limit.
	 */
	for (i = 0; i <= credits; i++)
		ASSERT_EQ(hp_data(&h, i, 1, 'A'), 0);
	ASSERT_EQ(raw_all_taken(&h), 0);
	n = es_drain(&h, 'A', &err, &bad);
	note("credits %d: read %ld bytes, then errno %d", credits, n, err);
	EXPECT_LE(n, credits);
	EXPECT_EQ(bad, 0);
	EXPECT_STREAM_ERROR(err);
	hp_close(&h);
}

TEST(garbage_messages_are_errors)
{
	static const u32 msgs[] = {
		KW_RS_MSG(KW_RS_OP_RSVD, 0),
		KW_RS_MSG(KW_RS_OP_WRITE, 4),
		KW_RS_MSG(KW_RS_OP_IOMAP_SGL, 0),
		KW_RS_MSG(KW_RS_OP_CTRL, 77),
		KW_RS_MSG(KW_RS_OP_SGL, 0),	/* a credit limit going back */
		KW_RS_MSG(KW_RS_OP_DATA, 1 << 20),	/* more than offered */
	};
	unsigned int i;

	for (i = 0; i < sizeof(msgs) / sizeof(msgs[0]); i++) {
		struct hp h;
		int err, bad;
		long n;

		ASSERT_EQ(hp_connect(&h, 0), 0);
		ASSERT_EQ(hp_data(&h, 0, 10, 'A'), 0);
		ASSERT_EQ(hp_msg(&h, msgs[i]), 0);
		n = es_drain(&h, 'A', &err, &bad);
		note("message %#x: read %ld bytes, then errno %d", msgs[i], n,
		     err);
		EXPECT_TRUE(n == 0 || n == 10);
		EXPECT_EQ(bad, 0);
		EXPECT_STREAM_ERROR(err);
		hp_close(&h);
	}
}

/*
 * A flood of control messages (keepalives take no credit in rsockets,
 * and a credit limit repeated is legal): far more Sends than receives are
 * posted, in one go. The socket either keeps up or ends the stream (a
 * receive with no buffer is a Terminate); it never hangs, and the bytes
 * it gives are the peer's.
 */
TEST(control_message_flood)
{
	static u8 wire[1 << 20];
	u8 msg[KW_RS_MSG_LEN], *e = wire;
	struct kw_tx_msg m;
	int i, err, bad;
	struct hp h;
	double t0;
	long n;

	ASSERT_EQ(hp_connect(&h, 0), 0);
	ASSERT_EQ(hp_data(&h, 0, 10, 'A'), 0);
	kw_rs_msg_encode(KW_RS_MSG(KW_RS_OP_CTRL, KW_RS_CTRL_KEEPALIVE), msg);
	for (i = 0; i < 2000 && e; i++) {
		m = (struct kw_tx_msg){ .opcode = KW_OP_SEND,
			.len = KW_RS_MSG_LEN, .qn = KW_QN_SEND, .msn = ++h.msn };
		e = rp_build(&h.p, &m, msg, e);
	}
	ASSERT_TRUE(e != NULL);
	writen(h.raw, wire, e - wire);	/* may fail once kiwarp terminated */
	t0 = now();
	n = es_drain(&h, 'A', &err, &bad);
	note("2000 keepalives: read %ld bytes, then errno %d after %.2f s", n,
	     err, now() - t0);
	EXPECT_TRUE(n == 0 || n == 10);
	EXPECT_EQ(bad, 0);
	/* kept up (nothing more to read: the drain waited 5 s) or ended */
	EXPECT_TRUE(err == ETIMEDOUT || err == ECONNRESET || err == EPROTO);
	hp_close(&h);
}

TEST(message_of_the_wrong_size_is_an_error)
{
	u8 b[8] = { 0 };
	struct hp h;
	int err, bad;
	long n;

	ASSERT_EQ(hp_connect(&h, 0), 0);
	ASSERT_EQ(hp_data(&h, 0, 10, 'A'), 0);
	ASSERT_EQ(hp_send(&h, b, sizeof(b)), 0);
	n = es_drain(&h, 'A', &err, &bad);
	EXPECT_TRUE(n == 0 || n == 10);
	EXPECT_EQ(bad, 0);
	EXPECT_STREAM_ERROR(err);
	hp_close(&h);
}

TEST(disconnect_between_write_and_data)
{
	struct hp h;
	int err, bad;
	long n;

	ASSERT_EQ(hp_connect(&h, 0), 0);
	ASSERT_EQ(hp_data(&h, 0, 10, 'A'), 0);
	/* written, never announced: the reader must not see it */
	ASSERT_EQ(hp_write(&h, 10, 100, 'B'), 0);
	close(h.raw);
	h.raw = -1;
	n = es_drain(&h, 'A', &err, &bad);
	note("read %ld bytes, then errno %d", n, err);
	EXPECT_LE(n, 10);
	EXPECT_EQ(bad, 0);
	/* the peer vanished without DISCONNECT: a reset, or EOF */
	EXPECT_TRUE(err == ECONNRESET || err == 0);
	close(h.es);
}

TEST(the_rules_kept_work)
{
	/* the same raw peer, keeping the rules: the control case */
	struct hp h;
	int err, bad;
	long n;
	u8 b[300];

	ASSERT_EQ(hp_connect(&h, 0), 0);
	ASSERT_EQ(hp_data(&h, 0, 100, 'A'), 0);
	ASSERT_EQ(hp_data(&h, 100, 200, 'A'), 0);
	ASSERT_EQ(es_wait_readable(&h, 300), 0);
	ASSERT_EQ(recv(h.es, b, sizeof(b), MSG_WAITALL), 300);
	ASSERT_EQ(hp_msg(&h, KW_RS_MSG(KW_RS_OP_CTRL, KW_RS_CTRL_SHUTDOWN)),
		  0);
	n = es_drain(&h, 'A', &err, &bad);
	EXPECT_EQ(n, 0);
	EXPECT_EQ(err, 0);	/* EOF: the peer shut down its side */
	for (n = 0; n < 300; n++)
		if (b[n] != 'A')
			break;
	EXPECT_EQ(n, 300);
	hp_close(&h);
}


/*
 * The raw peer announces len bytes it wrote (one DATA message); the ES
 * socket reads them all into b, within 10 s. 0, or the step that failed.
 */
static int hp_announce_read(struct hp *h, u8 *b, u32 len)
{
	struct timeval tv = { .tv_sec = 10 };

	if (hp_msg(h, KW_RS_MSG(KW_RS_OP_DATA, len)))
		return 1;
	if (raw_all_taken(h))
		return 2;
	if (setsockopt(h->es, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)))
		return 3;
	if (recv(h->es, b, len, MSG_WAITALL) != (ssize_t)len)
		return 4;
	return 0;
}

/*
 * The receive path holds the skbs of the peer's Writes until read()
 * copies them out (rxhold.c), a bounded number of pieces, and copies a
 * short Write when it holds nothing. A 2000-byte Write and 300 one-byte
 * Writes are more pieces than it holds: the oldest are copied into rbuf
 * and the rest of them copied. A Write into bytes written but not yet
 * announced makes the later bytes the ones read. The last Write is read
 * out of its skb. Nothing is read with MSG_PEEK here, which would copy
 * every held piece into rbuf first.
 */
TEST(receive_held_in_skbs_limits_and_rewrites)
{
	struct iwarp_info in;
	socklen_t il = sizeof(in);
	static u8 b[6400];
	struct hp h;
	int i, bad = 0;

	ASSERT_EQ(hp_connect(&h, 0), 0);
	ASSERT_EQ(hp_write(&h, 0, 2000, 'P'), 0);
	for (i = 0; i < 300; i++)
		ASSERT_EQ(hp_write(&h, 2000 + i, 1, (u8)(i * 7)), 0);
	ASSERT_EQ(hp_write(&h, 2300, 2000, 'C'), 0);
	ASSERT_EQ(hp_write(&h, 4300, 100, 'A'), 0);
	ASSERT_EQ(hp_write(&h, 4300, 50, 'B'), 0);
	ASSERT_EQ(hp_write(&h, 4400, 2000, 'D'), 0);
	ASSERT_EQ(hp_announce_read(&h, b, sizeof(b)), 0);
	for (i = 0; i < (int)sizeof(b); i++) {
		u8 want = i < 2000 ? 'P' : i < 2300 ? (u8)((i - 2000) * 7) :
			  i < 4300 ? 'C' : i < 4350 ? 'B' : i < 4400 ? 'A' :
			  'D';

		bad += b[i] != want;
	}
	EXPECT_EQ(bad, 0);
	ASSERT_EQ(getsockopt(h.es, SOL_IWARP, IWARP_INFO, &in, &il), 0);
	note("%llu bytes held, %llu settled",
	     (unsigned long long)in.rbuf_held,
	     (unsigned long long)in.rbuf_settled);
	/* the first 256 pieces ('P' may take a few, as its skbs fall),
	 * and 'C' with 'A' at the rewrite: settled */
	EXPECT_GE(in.rbuf_settled, 2000 + 240 + 2100);
	/* 'D' read from its skb */
	EXPECT_GE(in.rbuf_held - in.rbuf_settled, 2000);
	hp_close(&h);
}

/*
 * What held skbs pin is bounded by their truesize too (twice rbuf), not
 * only by the number of pieces: a peer that sends a few bytes per
 * segment makes every piece cost a whole skb. With rbuf at its minimum
 * (16 KiB: limit 32 KiB), a 1 KiB Write and 60 Writes of 100 bytes, one
 * segment each, far fewer than the 256 pieces held at most and all in
 * order (no rewrite, no peek), reach the limit: what was held is copied
 * into rbuf, the short Writes after it are copied (nothing is held), and
 * a last 1 KiB Write is held again. Every byte reads back as written.
 */
TEST(receive_held_in_skbs_truesize_limit)
{
	struct iwarp_info in;
	socklen_t il = sizeof(in);
	static u8 b[1024 + 60 * 100 + 1024];
	struct hp h;
	int i, bad = 0;

	ASSERT_EQ(hp_connect(&h, 8192), 0);	/* sk_rcvbuf 16 KiB */
	ASSERT_EQ(hp_write(&h, 0, 1024, 'P'), 0);
	for (i = 0; i < 60; i++)
		ASSERT_EQ(hp_write(&h, 1024 + i * 100, 100, (u8)(i + 1)), 0);
	ASSERT_EQ(hp_write(&h, 7024, 1024, 'Q'), 0);
	ASSERT_EQ(hp_announce_read(&h, b, sizeof(b)), 0);
	for (i = 0; i < (int)sizeof(b); i++)
		bad += b[i] != (i < 1024 ? 'P' : i < 7024 ?
				(u8)((i - 1024) / 100 + 1) : 'Q');
	EXPECT_EQ(bad, 0);
	ASSERT_EQ(getsockopt(h.es, SOL_IWARP, IWARP_INFO, &in, &il), 0);
	note("rbuf %u: %llu bytes held, %llu settled", in.rbuf_size,
	     (unsigned long long)in.rbuf_held,
	     (unsigned long long)in.rbuf_settled);
	ASSERT_EQ(in.rbuf_size, 16384u);
	EXPECT_GE(in.rbuf_settled, 1024);	/* 'P' with what followed it */
	EXPECT_LT(in.rbuf_held, sizeof(b));	/* short Writes copied after */
	EXPECT_GE(in.rbuf_held - in.rbuf_settled, 1024); /* 'Q' from its skb */
	hp_close(&h);
}

/* ------------------------------------------------------------- iomap */

/* A tagged Write of len bytes of buf to stag/to. */
static int hp_write_to(struct hp *h, u32 stag, u64 to, const u8 *buf, u32 len)
{
	struct kw_tx_msg m = { .opcode = KW_OP_WRITE, .len = len,
			       .stag = stag, .to = to };

	return rp_send(&h->p, &m, buf, 0);
}

/* riomap() as rsockets does it: entry idx of the ES socket's table, then
 * the IOMAP_SGL message. */
static int hp_iomap(struct hp *h, u32 idx, const struct kw_rs_iomap *e)
{
	u8 b[KW_RS_IOMAP_LEN];
	u64 to = h->es_conn.target_sgl.addr +
		 (u64)h->es_conn.target_sgl.len * KW_RS_SGE_LEN +
		 (u64)idx * KW_RS_IOMAP_LEN;

	kw_rs_iomap_encode(e, b);
	return hp_write_to(h, h->es_conn.target_sgl.key, to, b, sizeof(b)) ||
	       hp_msg(h, KW_RS_MSG(KW_RS_OP_IOMAP_SGL, idx));
}

TEST(iomap_updates_out_of_range_or_beyond_credits_are_errors)
{
	static const struct kw_rs_iomap e = { 0, { 0x1000, 0x42, 4096 } };
	struct hp h;
	int i, err, bad, credits;
	long n;

	/* entry 2 of a table of 2 */
	ASSERT_EQ(hp_connect_io(&h, 0, 2, 0), 0);
	ASSERT_EQ(hp_iomap(&h, 1, &e), 0);	/* fine */
	ASSERT_EQ(hp_data(&h, 0, 10, 'A'), 0);
	ASSERT_EQ(hp_iomap(&h, 2, &e), 0);
	n = es_drain(&h, 'A', &err, &bad);
	note("entry 2 of 2: read %ld bytes, then errno %d", n, err);
	EXPECT_TRUE(n == 0 || n == 10);
	EXPECT_EQ(bad, 0);
	EXPECT_STREAM_ERROR(err);
	hp_close(&h);

	/* no table at all */
	ASSERT_EQ(hp_connect_io(&h, 0, 0, 0), 0);
	ASSERT_EQ(hp_iomap(&h, 0, &e), 0);
	n = es_drain(&h, 'A', &err, &bad);
	EXPECT_EQ(n, 0);
	EXPECT_STREAM_ERROR(err);
	hp_close(&h);

	/* updates take credits: one more than granted */
	ASSERT_EQ(hp_connect_io(&h, 0, 1, 0), 0);
	credits = h.es_conn.credits;
	ASSERT_GT(credits, 0);
	for (i = 0; i < credits - 1; i++)
		ASSERT_EQ(hp_msg(&h, KW_RS_MSG(KW_RS_OP_IOMAP_SGL, 0)), 0);
	ASSERT_EQ(hp_data(&h, 0, 1, 'A'), 0);	/* the last credit */
	ASSERT_EQ(hp_msg(&h, KW_RS_MSG(KW_RS_OP_IOMAP_SGL, 0)), 0);
	ASSERT_EQ(raw_all_taken(&h), 0);
	n = es_drain(&h, 'A', &err, &bad);
	note("credits %d: read %ld bytes, then errno %d", credits, n, err);
	EXPECT_LE(n, 1);
	EXPECT_EQ(bad, 0);
	EXPECT_STREAM_ERROR(err);
	hp_close(&h);
}

/* What the raw peer sees: tagged bytes at their TO in peer_mem (its own
 * target SGL, iomap table and receive buffer, and riowrite()s' targets),
 * the last Send's first 4 bytes at its start, and every STag used. */
#define PEER_MEM	0x200000
static u8 peer_mem[PEER_MEM];
static u32 stags[64];
static unsigned int nstags;

static int rec_lookup(void *ctx, u32 stag, u8 op, struct kw_mr_view *v)
{
	if (nstags < 64)
		stags[nstags++] = stag;
	return rp_lookup(ctx, stag, op, v);
}

/* Bytes placed in [win_lo, win_hi) of peer_mem: the stream's Writes only,
 * not our own target SGL entry's Write (which lands in PEER_TSGL_TO). */
static u64 win_lo, win_hi, win_placed;

static void rec_place(void *ctx, void *cookie, u64 off, const void *src,
		      u32 len)
{
	u64 a = off > win_lo ? off : win_lo;
	u64 b = off + len < win_hi ? off + len : win_hi;

	if (a < b)
		win_placed += b - a;
	rp_place(ctx, cookie, off, src, len);
}

static const struct kw_rx_ops rec_ops = {
	.lookup_stag = rec_lookup, .get_rx_buf = rp_getbuf,
	.place = rec_place, .segment_done = rp_done,
};

static bool stag_seen(u32 stag)
{
	unsigned int i;

	for (i = 0; i < nstags && i < 64; i++)
		if (stags[i] == stag)
			return true;
	return false;
}

static void rec_start(struct hp *h, struct kw_rx *rx)
{
	memset(&sink, 0, sizeof(sink));
	memset(peer_mem, 0, sizeof(peer_mem));
	nstags = 0;
	win_lo = win_hi = win_placed = 0;
	sink.mem = peer_mem;
	sink.mem_len = sizeof(peer_mem);
	kw_rx_init(rx, &rec_ops, &sink, h->p.crc, 0);
}

static u32 want_msg;

static bool last_send_is(const struct rp_sink *s)
{
	return s->n && s->msg[(s->n - 1) % RP_LOG].opcode == KW_OP_SEND &&
	       kw_rs_msg_decode(peer_mem) == want_msg;
}

/*
 * riomap() on the wire: the entry goes by RDMA Write into the peer's
 * table after its target SGL, under its STag, then the IOMAP_SGL message
 * with its index; with that entry alone, the peer's Writes land in the
 * application's memory, and one past its end is a bounds Terminate.
 */
TEST(riomap_on_the_wire)
{
	const size_t len = 65536;
	u8 *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), q[1000];
	struct iwarp_iomap io = { .len = len, .offset = 0x7000,
				  .prot = PROT_WRITE };
	struct kw_rs_iomap e;
	struct kw_rx rx;
	struct hp h;
	int err, bad;

	ASSERT_TRUE(m != MAP_FAILED);
	io.addr = (uintptr_t)m;
	ASSERT_EQ(hp_connect_io(&h, 0, 0, 4), 0);
	/* the MPA responder speaks after the initiator's first FPDU */
	ASSERT_EQ(hp_msg(&h, KW_RS_MSG(KW_RS_OP_CTRL, KW_RS_CTRL_KEEPALIVE)), 0);
	ASSERT_EQ(raw_all_taken(&h), 0);
	rec_start(&h, &rx);
	ASSERT_EQ(setsockopt(h.es, SOL_IWARP, IWARP_IOMAP, &io, sizeof(io)), 0);
	want_msg = KW_RS_MSG(KW_RS_OP_IOMAP_SGL, 0);
	rp_read(&h.p, &rx, &sink, 5, last_send_is);
	note("%u messages, the last opcode %u, message %#x, %llu bytes placed",
	     sink.n, sink.n ? sink.msg[(sink.n - 1) % RP_LOG].opcode : 99,
	     kw_rs_msg_decode(peer_mem), (unsigned long long)sink.placed);
	ASSERT_TRUE(last_send_is(&sink));
	EXPECT_TRUE(stag_seen(PEER_TSGL_KEY));
	kw_rs_iomap_decode(peer_mem + PEER_TSGL_TO + 2 * KW_RS_SGE_LEN, &e);
	note("entry 0: offset %#llx addr %#llx key %#x len %u",
	     (unsigned long long)e.offset, (unsigned long long)e.sge.addr,
	     e.sge.key, e.sge.len);
	EXPECT_EQ(e.offset, 0x7000);
	EXPECT_EQ(e.sge.addr, (uintptr_t)m);
	EXPECT_EQ(e.sge.len, len);
	EXPECT_NE(e.sge.key, 0);

	/* the peer writes through it */
	memset(q, 'Q', sizeof(q));
	ASSERT_EQ(hp_write_to(&h, e.sge.key, e.sge.addr + 100, q, sizeof(q)), 0);
	ASSERT_EQ(raw_all_taken(&h), 0);
	EXPECT_EQ(m[99], 0);
	EXPECT_MEMEQ(m + 100, q, sizeof(q));
	EXPECT_EQ(m[1100], 0);
	/* and past its end */
	ASSERT_EQ(hp_write_to(&h, e.sge.key, e.sge.addr + len - 10, q, 100), 0);
	EXPECT_BOUNDS_TERMINATE(&h);
	es_drain(&h, 0, &err, &bad);
	EXPECT_STREAM_ERROR(err);
	EXPECT_EQ(m[len - 11], 0);
	hp_close(&h);
}

/*
 * riowrite() on the wire: a bare tagged Write with the entry's STag at
 * its address plus the offset's distance into it, no message behind;
 * short at the entry's end. The entry is the peer's word, used as given.
 */
TEST(riowrite_on_the_wire)
{
	const struct kw_rs_iomap e = {
		.offset = 1ULL << 33,
		.sge = { .addr = 0x20000, .key = 0xabc123, .len = 8192 },
	};
	u8 src[10000];
	union {
		char b[CMSG_SPACE(sizeof(u64))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = src, .iov_len = sizeof(src) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = ctl.b,
			     .msg_controllen = sizeof(ctl.b) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	u64 off = e.offset + 100;
	struct kw_rx rx;
	unsigned int i, sends;
	struct hp h;
	ssize_t r;

	for (i = 0; i < sizeof(src); i++)
		src[i] = (u8)(i * 7 + 1);
	memset(&ctl, 0, sizeof(ctl));
	c->cmsg_level = SOL_IWARP;
	c->cmsg_type = IWARP_IOWRITE;
	c->cmsg_len = CMSG_LEN(sizeof(off));
	memcpy(CMSG_DATA(c), &off, sizeof(off));

	ASSERT_EQ(hp_connect_io(&h, 0, 2, 0), 0);
	ASSERT_EQ(hp_iomap(&h, 1, &e), 0);
	ASSERT_EQ(raw_all_taken(&h), 0);
	rec_start(&h, &rx);
	r = sendmsg(h.es, &mh, MSG_NOSIGNAL);
	EXPECT_EQ(r, 8192 - 100);
	rp_read(&h.p, &rx, &sink, 2, NULL);	/* everything it sent */
	EXPECT_TRUE(stag_seen(0xabc123));
	EXPECT_EQ(peer_mem[0x20000 + 99], 0);
	EXPECT_MEMEQ(peer_mem + 0x20000 + 100, src, 8192 - 100);
	EXPECT_EQ(peer_mem[0x20000 + 8192], 0);
	/* no DATA message: only credit updates, if any, were Sends */
	for (i = sends = 0; i < sink.n && i < RP_LOG; i++)
		sends += sink.msg[i].opcode == KW_OP_SEND;
	note("%u messages, %u of them Sends, %llu bytes placed", sink.n,
	     sends, (unsigned long long)sink.placed);
	EXPECT_LE(sink.placed, 8092 + 2 * (KW_RS_SGE_LEN + KW_RS_MSG_LEN));
	EXPECT_FALSE(sink.got_term);
	hp_close(&h);
}

/* The raw peer's view of a Read Request (segment_done). */
static struct kw_read_req rr;
static bool got_rr;

static int rr_done(void *ctx, const struct kw_ddp_hdr *h, const u8 *payload,
		   u32 placed, struct kw_term *t)
{
	if (h->opcode == KW_OP_READ_REQ && payload && placed == KW_READ_REQ_LEN) {
		kw_read_req_decode(payload, &rr);
		got_rr = true;
	}
	return rp_done(ctx, h, payload, placed, t);
}

static const struct kw_rx_ops rr_ops = {
	.lookup_stag = rp_lookup, .get_rx_buf = rp_getbuf,
	.place = rp_place, .segment_done = rr_done,
};

static bool have_rr(const struct rp_sink *s)
{
	(void)s;
	return got_rr;
}

struct ior {
	int fd;
	struct iwarp_ioread r;
	int ret;
	double secs;
	pthread_t t;
};

static void *ior_thread(void *arg)
{
	struct ior *x = arg;
	socklen_t l = sizeof(x->r);
	double t0 = now();

	x->ret = getsockopt(x->fd, SOL_IWARP, IWARP_IOREAD, &x->r, &l) ?
		 -errno : 0;
	x->secs = now() - t0;
	return NULL;
}

/*
 * IWARP_IOREAD on the wire, against a peer that mapped a region (entry
 * written by hand): one RDMA Read Request for the entry's STag at its
 * address plus the distance into it, with the caller's memory as the
 * sink; a Response fills exactly that memory. A peer that never answers
 * costs SO_RCVTIMEO and the connection (or a shutdown() by another
 * thread ends the wait), and one that answers with the
 * wrong bytes count gets a Terminate; the caller's memory around the
 * sink is never touched.
 */
TEST(ioread_on_the_wire)
{
	static const struct kw_rs_iomap e = {
		.offset = 5000, .sge = { .addr = 0x40000, .key = 0x77, .len = 65536 },
	};
	struct timeval tv = { .tv_sec = 1 };
	u8 *dst = mmap(NULL, 8192, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), pl[3000];
	int round, err, bad;

	ASSERT_TRUE(dst != MAP_FAILED);
	for (round = 0; round < 4; round++) {
		struct ior x = { .r = { .len = 3000, .offset = 5100 } };
		struct kw_rx rx;
		struct hp h;
		unsigned int i;

		memset(dst, 0xee, 8192);
		x.r.addr = (uintptr_t)dst + 100;
		ASSERT_EQ(hp_connect_io(&h, 0, 2, 0), 0);
		tv.tv_sec = round == 3 ? 20 : 1;
		ASSERT_EQ(setsockopt(h.es, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
		ASSERT_EQ(hp_iomap(&h, 0, &e), 0);
		ASSERT_EQ(raw_all_taken(&h), 0);
		memset(&sink, 0, sizeof(sink));
		got_rr = false;
		kw_rx_init(&rx, &rr_ops, &sink, h.p.crc, 0);
		x.fd = h.es;
		ASSERT_EQ(pthread_create(&x.t, NULL, ior_thread, &x), 0);
		rp_read(&h.p, &rx, &sink, 5, have_rr);
		ASSERT_TRUE(got_rr);
		EXPECT_EQ(rr.src_stag, 0x77);
		EXPECT_EQ(rr.src_to, 0x40000 + 100);
		EXPECT_EQ(rr.size, 3000);
		EXPECT_EQ(rr.sink_to, (uintptr_t)dst + 100);
		EXPECT_NE(rr.sink_stag, 0);
		for (i = 0; i < sizeof(pl); i++)
			pl[i] = (u8)(i * 13 + round);
		if (round == 0) {		/* answered */
			struct kw_tx_msg m = { .opcode = KW_OP_READ_RESP,
				.len = 3000, .stag = rr.sink_stag,
				.to = rr.sink_to };

			ASSERT_EQ(rp_send(&h.p, &m, pl, 0), 0);
		} else if (round == 3) {	/* silent; another thread */
			usleep(200000);
			shutdown(h.es, SHUT_RDWR);
		} else if (round == 2) {	/* one byte short */
			struct kw_tx_msg m = { .opcode = KW_OP_READ_RESP,
				.len = 2999, .stag = rr.sink_stag,
				.to = rr.sink_to };

			ASSERT_EQ(rp_send(&h.p, &m, pl, 0), 0);
		}
		pthread_join(x.t, NULL);
		note("round %d: IWARP_IOREAD %d after %.2f s, done %llu", round,
		     x.ret, x.secs, (unsigned long long)x.r.done);
		if (round == 0) {
			EXPECT_EQ(x.ret, 0);
			EXPECT_EQ(x.r.done, 3000);
			EXPECT_MEMEQ(dst + 100, pl, 3000);
		} else {
			EXPECT_NE(x.ret, 0);
			if (round == 1) {
				EXPECT_EQ(x.ret, -ETIMEDOUT);
				EXPECT_LT_F(x.secs, 3);
			}
			if (round == 3)
				EXPECT_LT_F(x.secs, 3);
			/* the stream is gone, for the reason the read gave */
			es_drain(&h, 0, &err, &bad);
			if (round == 1)
				EXPECT_EQ(err, ETIMEDOUT);
			else if (round == 2)
				EXPECT_STREAM_ERROR(err);
		}
		EXPECT_EQ(dst[99], 0xee);
		EXPECT_EQ(dst[3100], 0xee);
		hp_close(&h);
	}
}

/* ------------------------------------------------- zero-copy receive */

static int rzc_post(int fd, void *buf, uint64_t len, uint64_t *pre)
{
	struct iwarp_recv_zc r = { .addr = (uintptr_t)buf, .len = len };
	socklen_t l = sizeof(r);

	if (getsockopt(fd, SOL_IWARP, IWARP_RECV_ZC, &r, &l))
		return -errno;
	*pre = r.pre;
	return 0;
}

/* IWARP_RECV_ZC_DONE, waiting up to ms for it: 0 or -errno. */
static int rzc_done(int fd, struct iwarp_recv_zc_done *d, int ms)
{
	socklen_t l = sizeof(*d);
	double end = now() + ms / 1000.0;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (!getsockopt(fd, SOL_IWARP, IWARP_RECV_ZC_DONE, d, &l))
			return 0;
		if (errno != EAGAIN || now() > end)
			return -errno;
		poll(&p, 1, 100);
	}
}

/* The target the ES socket advertised: an entry of the raw peer's target
 * SGL under another STag than its receive buffer's. */
static u32 rbuf_key;
static struct kw_rs_sge zc_sge;

static bool zc_advertised(const struct rp_sink *s)
{
	int i;

	(void)s;
	for (i = 0; i < 2; i++) {
		kw_rs_sge_decode(peer_mem + PEER_TSGL_TO + i * KW_RS_SGE_LEN,
				 &zc_sge);
		if (zc_sge.len && zc_sge.key != rbuf_key)
			return true;
	}
	return false;
}

/*
 * The ES socket takes what came (and advertises what is due) only in a
 * call on it, as in any: once the raw peer's bytes are all in, ask for
 * the result, which is not there yet.
 */
static int es_poke(struct hp *h)
{
	struct iwarp_recv_zc_done d;

	if (raw_all_taken(h))
		return 1;
	return rzc_done(h->es, &d, 0) == -EAGAIN ? 0 : 2;
}

/* rbuf 16 KiB (halves of 8), a 256 KiB buffer registered and posted:
 * the raw peer fills the halves it holds, then the target it is given. */
#define ZC_RBUF		16384
#define ZC_HALF		(ZC_RBUF / 2)
#define ZC_BUF		(256 * 1024)

static int zc_setup(struct hp *h, struct kw_rx *rx, u8 *m, uint64_t *pre)
{
	struct iwarp_mreg r = { .addr = (uintptr_t)m, .len = ZC_BUF };

	if (hp_connect(h, ZC_RBUF / 2))	/* Linux doubles SO_RCVBUF */
		return 1;
	if (h->es_conn.data_buf.len != ZC_HALF)
		return 2;
	rbuf_key = h->es_conn.data_buf.key;
	rec_start(h, rx);
	/* the MPA responder speaks after the initiator's first FPDU */
	if (hp_msg(h, KW_RS_MSG(KW_RS_OP_CTRL, KW_RS_CTRL_KEEPALIVE)) ||
	    raw_all_taken(h))
		return 3;
	if (setsockopt(h->es, SOL_IWARP, IWARP_MREG, &r, sizeof(r)))
		return 4;
	if (rzc_post(h->es, m, ZC_BUF, pre))
		return 5;
	return 0;
}

/* How the reader reads up to the target's place (zc_on_the_wire()). */
enum { ZC_READ_PLAIN, ZC_READ_RCVLOWAT, ZC_READ_WAITALL };

/*
 * Zero-copy receive as an RNIC sees it: the ES socket gives the peer the
 * application's buffer, past the bytes already due through its receive
 * buffer, as a target SGL entry of its own STag once an entry is free
 * (not before: both halves of rbuf are out first). The peer's Writes
 * land in place; the result says so; a Write under that STag afterwards
 * is an invalid-STag Terminate, and the buffer keeps what it had. A read
 * stops at the target's place even when it wants more (SO_RCVLOWAT,
 * MSG_WAITALL) and more came behind the target: those bytes are not next
 * to the ones before it. (It ran on before 2026-11-29.)
 */
static void zc_on_the_wire(int how, int *kwt_fail)
{
	static u8 q[ZC_BUF];
	u8 *m = mmap(NULL, ZC_BUF, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct iwarp_recv_zc_done d;
	struct iwarp_info info;
	socklen_t il = sizeof(info);
	uint64_t pre = 0;
	struct kw_rx rx;
	struct hp h;
	u32 off, i;
	int err, bad;

	ASSERT_TRUE(m != MAP_FAILED);
	memset(m, 0, ZC_BUF);
	ASSERT_EQ(zc_setup(&h, &rx, m, &pre), 0);
	note("pre %llu", (unsigned long long)pre);
	EXPECT_EQ(pre, ZC_RBUF);	/* both halves are the peer's */
	EXPECT_EQ(rzc_post(h.es, m, ZC_BUF, &pre), -EBUSY);
	EXPECT_EQ(rzc_done(h.es, &d, 0), -EAGAIN);
	rp_read(&h.p, &rx, &sink, 1, zc_advertised);
	EXPECT_FALSE(zc_advertised(&sink));	/* no entry free */

	/* half 0 fills: its entry is free, and the target goes there */
	ASSERT_EQ(hp_data(&h, 0, ZC_HALF, 'A'), 0);
	ASSERT_EQ(es_poke(&h), 0);
	rp_read(&h.p, &rx, &sink, 5, zc_advertised);
	ASSERT_TRUE(zc_advertised(&sink));
	note("target %#llx key %#x len %u", (unsigned long long)zc_sge.addr,
	     zc_sge.key, zc_sge.len);
	/* its own STag and length; an address that is not the buffer's */
	EXPECT_NE(zc_sge.addr, (uintptr_t)m + ZC_RBUF);
	EXPECT_NE(zc_sge.key, rbuf_key);
	EXPECT_EQ(zc_sge.len, ZC_BUF - ZC_RBUF);
	/* half 1, then the target, as rsockets' sender goes */
	ASSERT_EQ(hp_data(&h, ZC_HALF, ZC_HALF, 'B'), 0);
	for (i = 0; i < sizeof(q); i++)
		q[i] = (u8)(i * 7 + 3);
	for (off = 0; off < zc_sge.len; off += 60000) {
		u32 n = zc_sge.len - off < 60000 ? zc_sge.len - off : 60000;

		ASSERT_EQ(hp_write_to(&h, zc_sge.key, zc_sge.addr + off,
				      q + off, n), 0);
		ASSERT_EQ(hp_msg(&h, KW_RS_MSG(KW_RS_OP_DATA, n)), 0);
	}
	/*
	 * The target is full; the reader reads half 0 of what came before
	 * it, which goes out again, and the peer writes behind the target
	 * there. The reader still gets half 1 and not a byte more until it
	 * took the target's result.
	 */
	ASSERT_EQ(es_wait_readable(&h, ZC_RBUF), 0);
	/* (and 100 of half 1: less than SO_RCVLOWAT's cap is left) */
	ASSERT_EQ(recv(h.es, m, ZC_HALF + 100, MSG_DONTWAIT), ZC_HALF + 100);
	EXPECT_EQ(m[0], 'A');
	ASSERT_EQ(hp_data(&h, 0, 100, 'D'), 0);
	ASSERT_EQ(raw_all_taken(&h), 0);
	if (how == ZC_READ_PLAIN) {
		ASSERT_EQ(recv(h.es, m + ZC_HALF + 100, ZC_HALF,
			       MSG_DONTWAIT), ZC_HALF - 100);
	} else {
		struct timeval tv = { .tv_sec = 3 };
		int lowat = ZC_BUF;
		double t0;

		ASSERT_EQ(setsockopt(h.es, SOL_SOCKET, SO_RCVTIMEO, &tv,
				     sizeof(tv)), 0);
		if (how == ZC_READ_RCVLOWAT)
			ASSERT_EQ(setsockopt(h.es, SOL_SOCKET, SO_RCVLOWAT,
					     &lowat, sizeof(lowat)), 0);
		t0 = now();
		/* the peek, then the read, of half 1 and not the 'D's; the
		 * peek at once, not at SO_RCVTIMEO */
		ASSERT_EQ(recv(h.es, m + ZC_HALF + 100, ZC_HALF,
			       MSG_PEEK | (how == ZC_READ_WAITALL ?
					   MSG_WAITALL : 0)), ZC_HALF - 100);
		EXPECT_LT_F(now() - t0, 2.0);
		ASSERT_EQ(recv(h.es, m + ZC_HALF + 100, ZC_HALF,
			       how == ZC_READ_WAITALL ? MSG_WAITALL : 0),
			  ZC_HALF - 100);
	}
	EXPECT_EQ(m[ZC_RBUF - 1], 'B');
	ASSERT_EQ(rzc_done(h.es, &d, 5000), 0);
	EXPECT_EQ(d.bytes, ZC_BUF - ZC_RBUF);
	EXPECT_EQ(d.error, 0);
	EXPECT_MEMEQ(m + ZC_RBUF, q, ZC_BUF - ZC_RBUF);
	EXPECT_EQ(rzc_done(h.es, &d, 0), -ENOENT);
	ASSERT_EQ(getsockopt(h.es, SOL_IWARP, IWARP_INFO, &info, &il), 0);
	EXPECT_EQ(info.zc_rx_bytes, ZC_BUF - ZC_RBUF);

	/* the stream goes on through rbuf, behind the target */
	ASSERT_EQ(recv(h.es, q, sizeof(q), MSG_DONTWAIT), 100);
	EXPECT_EQ(q[0], 'D');
	EXPECT_EQ(q[99], 'D');

	/* the target's STag is gone */
	memset(q, 'X', 1000);
	ASSERT_EQ(hp_write_to(&h, zc_sge.key, zc_sge.addr, q, 1000), 0);
	rp_read(&h.p, &rx, &sink, 10, NULL);	/* on the same stream */
	ASSERT_TRUE(sink.got_term);
	EXPECT_EQ(sink.term.layer, KW_TERM_LAYER_DDP);
	EXPECT_EQ(sink.term.etype, KW_TERM_DDP_ETYPE_TAGGED);
	EXPECT_EQ(sink.term.ecode, KW_TERM_DDP_T_INV_STAG);
	EXPECT_EQ(m[ZC_RBUF], (u8)3);
	es_drain(&h, 0, &err, &bad);
	EXPECT_STREAM_ERROR(err);
	hp_close(&h);
	munmap(m, ZC_BUF);
}

TEST(zero_copy_receive_on_the_wire)
{
	zc_on_the_wire(ZC_READ_PLAIN, kwt_fail);
}

TEST(zero_copy_receive_read_stops_at_the_place_rcvlowat)
{
	zc_on_the_wire(ZC_READ_RCVLOWAT, kwt_fail);
}

TEST(zero_copy_receive_read_stops_at_the_place_waitall)
{
	zc_on_the_wire(ZC_READ_WAITALL, kwt_fail);
}

/*
 * A peer that announces more than the target holds, or Writes past its
 * end, ends the stream: the receive ends with the error, and nothing
 * lands outside the buffer's share.
 */
TEST(zero_copy_receive_hostile_peer)
{
	u8 *m = mmap(NULL, 2 * ZC_BUF, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), q[1000];
	struct iwarp_recv_zc_done d;
	uint64_t pre;
	struct kw_rx rx;
	struct hp h;
	int err, bad, k;

	ASSERT_TRUE(m != MAP_FAILED);
	memset(q, 'Z', sizeof(q));
	for (k = 0; k < 2; k++) {
		memset(m, 0, 2 * ZC_BUF);
		ASSERT_EQ(zc_setup(&h, &rx, m, &pre), 0);
		ASSERT_EQ(hp_data(&h, 0, ZC_HALF, 'A'), 0);
		ASSERT_EQ(es_poke(&h), 0);
	rp_read(&h.p, &rx, &sink, 5, zc_advertised);
		ASSERT_TRUE(zc_advertised(&sink));
		ASSERT_EQ(hp_data(&h, ZC_HALF, ZC_HALF, 'B'), 0);
		if (k == 0) {	/* DATA beyond it */
			ASSERT_EQ(hp_write_to(&h, zc_sge.key, zc_sge.addr,
					      q, sizeof(q)), 0);
			ASSERT_EQ(hp_msg(&h, KW_RS_MSG(KW_RS_OP_DATA,
						       zc_sge.len + 1)), 0);
		} else {	/* a Write across its end */
			ASSERT_EQ(hp_write_to(&h, zc_sge.key, zc_sge.addr +
					      zc_sge.len - 10, q, 100), 0);
			EXPECT_BOUNDS_TERMINATE(&h);
		}
		ASSERT_EQ(rzc_done(h.es, &d, 5000), 0);
		note("case %d: bytes %llu error %u", k,
		     (unsigned long long)d.bytes, d.error);
		EXPECT_EQ(d.bytes, 0);
		EXPECT_TRUE(d.error == EPROTO || d.error == ECONNRESET);
		/* nothing of the Write across the end, nothing past it */
		EXPECT_EQ(m[ZC_BUF - 11], 0);
		EXPECT_EQ(m[ZC_BUF - 1], 0);
		EXPECT_EQ(m[ZC_BUF], 0);
		es_drain(&h, 0, &err, &bad);
		EXPECT_STREAM_ERROR(err);
		hp_close(&h);
	}
	munmap(m, 2 * ZC_BUF);
}

/* Bad arguments, and the cancel of one the peer was never given (the
 * stream goes on) and of one it was (the stream is reset). */
TEST(zero_copy_receive_arguments_and_cancel)
{
	u8 *m = mmap(NULL, ZC_BUF, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), b[200];
	struct iwarp_recv_zc r = { 0 };
	struct iwarp_recv_zc_done d;
	socklen_t l = sizeof(r);
	uint64_t pre;
	struct kw_rx rx;
	struct hp h;
	int err, bad;

	ASSERT_TRUE(m != MAP_FAILED);
	ASSERT_EQ(zc_setup(&h, &rx, m, &pre), 0);
	ASSERT_EQ(setsockopt(h.es, SOL_IWARP, IWARP_RECV_ZC_CANCEL, NULL, 0),
		  0);
	EXPECT_EQ(setsockopt(h.es, SOL_IWARP, IWARP_RECV_ZC_CANCEL, NULL, 0),
		  -1);
	EXPECT_EQ(errno, ENOENT);
	EXPECT_EQ(rzc_done(h.es, &d, 0), -ENOENT);
	/* not registered, not all inside, flags, short option, too long */
	EXPECT_EQ(rzc_post(h.es, b, sizeof(b), &pre), -EINVAL);
	EXPECT_EQ(rzc_post(h.es, m + 4096, ZC_BUF, &pre), -EINVAL);
	EXPECT_EQ(rzc_post(h.es, m, 0, &pre), -EINVAL);
	r.addr = (uintptr_t)m;
	r.len = ZC_BUF;
	r.flags = 1;
	EXPECT_EQ(getsockopt(h.es, SOL_IWARP, IWARP_RECV_ZC, &r, &l), -1);
	EXPECT_EQ(errno, EINVAL);
	r.flags = 0;
	l = sizeof(r) - 1;
	EXPECT_EQ(getsockopt(h.es, SOL_IWARP, IWARP_RECV_ZC, &r, &l), -1);
	EXPECT_EQ(errno, EINVAL);
	r.addr = ~0ULL - 10;
	l = sizeof(r);
	EXPECT_EQ(getsockopt(h.es, SOL_IWARP, IWARP_RECV_ZC, &r, &l), -1);
	EXPECT_EQ(errno, EINVAL);
	/* no longer than what is due through rbuf: recv() it */
	EXPECT_EQ(rzc_post(h.es, m, ZC_RBUF, &pre), -EAGAIN);
	/* the stream went on */
	ASSERT_EQ(hp_data(&h, 0, 100, 'A'), 0);
	ASSERT_EQ(es_wait_readable(&h, 100), 0);
	ASSERT_EQ(recv(h.es, b, sizeof(b), MSG_DONTWAIT), 100);
	EXPECT_EQ(b[99], 'A');

	/* one that went out: a cancel resets */
	ASSERT_EQ(rzc_post(h.es, m, ZC_BUF, &pre), 0);
	ASSERT_EQ(hp_data(&h, 100, ZC_HALF - 100, 'A'), 0);
	ASSERT_EQ(es_poke(&h), 0);
	rp_read(&h.p, &rx, &sink, 5, zc_advertised);
	ASSERT_TRUE(zc_advertised(&sink));
	ASSERT_EQ(raw_all_taken(&h), 0);
	ASSERT_EQ(setsockopt(h.es, SOL_IWARP, IWARP_RECV_ZC_CANCEL, NULL, 0),
		  0);
	es_drain(&h, 'A', &err, &bad);
	note("after the cancel: errno %d", err);
	EXPECT_EQ(err, ECANCELED);
	hp_close(&h);

	/* a post whose result cannot be written back is undone */
	ASSERT_EQ(zc_setup(&h, &rx, m, &pre), 0);
	ASSERT_EQ(setsockopt(h.es, SOL_IWARP, IWARP_RECV_ZC_CANCEL, NULL, 0),
		  0);
	{
		struct iwarp_recv_zc *ro = mmap(NULL, 4096,
						PROT_READ | PROT_WRITE,
						MAP_PRIVATE | MAP_ANONYMOUS,
						-1, 0);

		ASSERT_TRUE(ro != MAP_FAILED);
		ro->addr = (uintptr_t)m;
		ro->len = ZC_BUF;
		ASSERT_EQ(mprotect(ro, 4096, PROT_READ), 0);
		l = sizeof(*ro);
		EXPECT_EQ(getsockopt(h.es, SOL_IWARP, IWARP_RECV_ZC, ro, &l),
			  -1);
		EXPECT_EQ(errno, EFAULT);
		munmap(ro, 4096);
	}
	EXPECT_EQ(rzc_done(h.es, &d, 0), -ENOENT);
	/* shutdown(SHUT_RD) ends one not given out: nothing landed */
	ASSERT_EQ(rzc_post(h.es, m, ZC_BUF, &pre), 0);
	ASSERT_EQ(shutdown(h.es, SHUT_RD), 0);
	ASSERT_EQ(rzc_done(h.es, &d, 0), 0);
	EXPECT_EQ(d.bytes, 0);
	EXPECT_EQ(d.error, 0);
	EXPECT_EQ(recv(h.es, b, sizeof(b), MSG_DONTWAIT), 0);
	hp_close(&h);
	munmap(m, ZC_BUF);
}

/*
 * The send buffer goes to TCP by page reference. A receiver on this host
 * that has not read yet holds the very pages (as does TCP's retransmit
 * queue): when the buffer comes round again, those bytes must not be
 * rewritten under it.
 */
struct held_writer {
	int fd;
	const u8 *src;
	long total, sent;
	u32 seed;		/* 0: HELD_WRITE each */
	int err;
};

#define HELD_WRITE	32768

static void *held_write(void *arg)
{
	struct held_writer *w = arg;
	u32 x = w->seed;

	while (w->sent < w->total) {
		long len = HELD_WRITE;
		ssize_t n;

		if (x) {	/* 1 B .. 40 KiB, copied and by reference */
			x ^= x << 13;
			x ^= x >> 17;
			x ^= x << 5;
			len = x % 3 ? 16385 + x % 24576 : 1 + x % 4096;
		}
		if (len > w->total - w->sent)
			len = w->total - w->sent;
		n = send(w->fd, w->src + w->sent, len, MSG_NOSIGNAL);
		if (n <= 0) {
			w->err = n ? errno : EPIPE;
			break;
		}
		w->sent += n;
	}
	return NULL;
}

static void held_fill(u8 *p, long n)
{
	u32 x = 0x9e3779b9;
	long i;

	for (i = 0; i < n; i++) {	/* every lap differs */
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (u8)x;
	}
}

static long held_total;

/*
 * Every byte written has been placed where the stream puts it. (Not a
 * count of all bytes placed: our own 16-byte target SGL Write, which the
 * ES may send at any time, would make up for the end of a Write that is
 * still on its way, placed as it arrives.)
 */
static bool held_all_placed(const struct rp_sink *s)
{
	(void)s;
	return win_placed >= (u64)held_total;
}

/* Connect with a send buffer of sbuf bytes and a peer that offers 1 MiB
 * and credits enough for all of it; start the writer. */
static int held_start(struct hp *h, struct kw_rx *rx, struct held_writer *w,
		      pthread_t *wt, int sbuf)
{
	struct timeval tv = { .tv_sec = 20 };
	struct iwarp_info info;
	socklen_t il = sizeof(info);
	int ret;

	hp_data_buf_len = 1 << 20;
	hp_credits = 2000;
	hp_sndbuf = sbuf / 2;	/* Linux doubles it */
	ret = hp_connect(h, 0);
	hp_data_buf_len = 65536;
	hp_credits = PEER_CREDITS;
	hp_sndbuf = 0;
	if (ret)
		return ret;
	if (getsockopt(h->es, SOL_IWARP, IWARP_INFO, &info, &il) ||
	    info.sbuf_size != (u32)sbuf)
		return 20;
	/* a writer stuck by a bug fails the test instead of hanging it */
	if (setsockopt(h->es, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)))
		return 21;
	/* the MPA responder speaks after the initiator's first FPDU */
	if (hp_msg(h, KW_RS_MSG(KW_RS_OP_CTRL, KW_RS_CTRL_KEEPALIVE)) ||
	    raw_all_taken(h))
		return 22;
	rec_start(h, rx);
	win_lo = PEER_RBUF_TO;
	win_hi = PEER_RBUF_TO + w->total;
	w->fd = h->es;
	held_total = w->total;
	return pthread_create(wt, NULL, held_write, w) ? 23 : 0;
}

/* A writer that is still stuck (a failure) is ended, not waited for. */
#define HELD_JOIN(h, wt)						\
	do {								\
		if (!held_all_placed(&sink))				\
			shutdown((h)->es, SHUT_RDWR);			\
		pthread_join(wt, NULL);					\
	} while (0)

/* The writer wrote it all, the peer got every byte as written, and the
 * send buffer had chunks to replace (so they did go by reference). */
#define HELD_CHECK(h, w, src)						\
	do {								\
		struct iwarp_info hi;					\
		socklen_t hil = sizeof(hi);				\
									\
		note("written %ld (errno %d), placed %llu (%llu in the stream), %u messages", \
		     (w)->sent, (w)->err,				\
		     (unsigned long long)sink.placed,			\
		     (unsigned long long)win_placed, sink.n);		\
		EXPECT_EQ((w)->sent, (w)->total);			\
		EXPECT_FALSE(sink.got_term);				\
		ASSERT_TRUE(held_all_placed(&sink));			\
		EXPECT_MEMEQ(peer_mem + PEER_RBUF_TO, src, sizeof(src)); \
		ASSERT_EQ(getsockopt((h)->es, SOL_IWARP, IWARP_INFO,	\
				     &hi, &hil), 0);			\
		note("%llu pages replaced in all",			\
		     (unsigned long long)hi.sbuf_replaced);		\
		EXPECT_GT(hi.sbuf_replaced, 0);				\
		EXPECT_EQ(hi.tx_bytes, sizeof(src));			\
	} while (0)

/*
 * Fifteen 32 KiB writes through a 32 KiB send buffer, a lap each, while
 * the raw peer reads nothing (TCP's window stops the writer after a few
 * laps, each of whose chunks an unread skb still held: replaced); then it
 * reads them all: every byte is the one written.
 */
TEST(send_buffer_pages_held_by_the_stack)
{
	static u8 src[15 * HELD_WRITE];
	struct held_writer w = { .src = src, .total = sizeof(src) };
	struct iwarp_info info;
	socklen_t il = sizeof(info);
	struct kw_rx rx;
	pthread_t wt;
	struct hp h;
	double end;

	held_fill(src, sizeof(src));
	ASSERT_EQ(held_start(&h, &rx, &w, &wt, HELD_WRITE), 0);
	/* nothing read: laps go out while the earlier ones wait unread */
	end = now() + 10;
	do {
		usleep(100 * 1000);
		ASSERT_EQ(getsockopt(h.es, SOL_IWARP, IWARP_INFO, &info, &il),
			  0);
	} while (!info.sbuf_replaced && now() < end);
	note("before reading: %llu bytes sent, %llu pages replaced",
	     (unsigned long long)info.tx_bytes,
	     (unsigned long long)info.sbuf_replaced);
	EXPECT_GT(info.sbuf_replaced, 0);
	rp_read(&h.p, &rx, &sink, 20, held_all_placed);
	HELD_JOIN(&h, wt);
	HELD_CHECK(&h, &w, src);
	hp_close(&h);
}

/*
 * The same with writes of every size, copied (up to 16 KiB) and by
 * reference, through a 64 KiB send buffer, while the raw peer reads in
 * bursts: the buffer wraps at any offset, and a page is often still in
 * flight, or on its way into TCP, when its start comes round again.
 */
TEST(send_buffer_mixed_writes_under_a_bursty_reader)
{
	static u8 src[960 * 1024];
	struct held_writer w = { .src = src, .total = sizeof(src),
				 .seed = 0x2545f491 };
	struct kw_rx rx;
	pthread_t wt;
	struct hp h;
	double end;

	held_fill(src, sizeof(src));
	ASSERT_EQ(held_start(&h, &rx, &w, &wt, 2 * HELD_WRITE), 0);
	end = now() + 45;
	while (!held_all_placed(&sink) && !sink.got_term && now() < end) {
		usleep(20 * 1000);	/* the sender runs into a full window */
		if (rp_read(&h.p, &rx, &sink, 0.01, held_all_placed) < 0)
			break;
	}
	HELD_JOIN(&h, wt);
	HELD_CHECK(&h, &w, src);
	hp_close(&h);
}
