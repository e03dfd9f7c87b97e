// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Wire conformance with hardware RNICs (issue 8): run inside the VM with
 * kiwarp.ko loaded.
 *
 * One side is a kiwarp QP (through libkiwarp); the other a raw peer on a
 * plain TCP socket (kw_rawpeer.h, the user-space build of the protocol
 * core) that does the MPA exchange the way a hardware RNIC or an RFC 6581
 * implementation may, including what kiwarp itself never sends: a P2P
 * Request to a responder that did not ask for P2P, a Reply with an RTR type
 * that was not offered, reserved flag bits, a responder ORD above the
 * initiator's IRD. Each test checks the negotiated parameters on both
 * sides, the first FPDUs on the wire (fencing, RTR) and the Terminates.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "kiwarp.h"
#include "kw_vmtest.h"
#include "iwarp.h"
#include "kw_rawpeer.h"
#include "kw_markref.h"
#include "../unit/harness.h"

#define KBUF 65536

struct kend {
	struct kw_device *dev;
	struct kw_pd *pd;
	struct kw_cq *cq;
	struct kw_qp *qp;
	struct kw_mr *mr;
	uint8_t *buf;
	int sock;			/* kiwarp's socket */
	struct rp raw;			/* the peer's */
	struct kw_conn_param param;	/* kiwarp's parameters */
	struct kw_conn_request req;	/* kiwarp as responder */
	struct kw_conn_result res;
	int ret;
};

/* rcvbuf > 0: kiwarp's socket has that SO_RCVBUF from before connecting. */
static int kend_init_buf(struct kend *k, int rcvbuf)
{
	struct kw_qp_init_attr a = { 0 };
	int ret;

	memset(k, 0, sizeof(*k));
	k->sock = k->raw.fd = -1;
	if ((ret = kw_open(&k->dev)) || (ret = kw_alloc_pd(k->dev, &k->pd)) ||
	    (ret = kw_create_cq(k->dev, 64, &k->cq)))
		return ret;
	a.send_cq = a.recv_cq = k->cq;
	a.sq_entries = a.rq_entries = 16;
	a.max_sge = 1;
	if ((ret = kw_create_qp(k->pd, &a, &k->qp)))
		return ret;
	k->buf = mmap(NULL, KBUF, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (k->buf == MAP_FAILED)
		return -errno;
	if ((ret = kw_reg_mr(k->pd, k->buf, KBUF, KIWARP_ACCESS_ALL, &k->mr)))
		return ret;
	return tcp_pair_opt(AF_INET, 0, rcvbuf, &k->raw.fd, &k->sock) ?
	       -EIO : 0;
}

static int kend_init(struct kend *k)
{
	return kend_init_buf(k, 0);
}

static void kend_fini(struct kend *k)
{
	kw_destroy_qp(k->qp);
	if (k->mr)
		kw_dereg_mr(k->mr);
	kw_destroy_cq(k->cq);
	kw_dealloc_pd(k->pd);
	kw_close(k->dev);
	munmap(k->buf, KBUF);
	close(k->sock);
	close(k->raw.fd);
}

static void *k_accept(void *arg)
{
	struct kend *k = arg;

	k->ret = kw_accept(k->qp, k->sock, NULL, 5000, &k->req);
	if (!k->ret)
		k->ret = kw_accept_reply(k->qp, KIWARP_REPLY_ACCEPT, &k->param,
					 NULL, 0, &k->res);
	return NULL;
}

static void *k_connect(void *arg)
{
	struct kend *k = arg;

	k->ret = kw_connect(k->qp, k->sock, &k->param, NULL, 0, &k->res);
	return NULL;
}

/* Read one MPA frame (header and private data) from the raw socket. */
static int raw_read_frame(struct kend *k, bool reply, struct kw_mpa_frame *f,
			  uint8_t pd[KW_MPA_MAX_PD])
{
	return rp_read_frame(k->raw.fd, reply, f, pd);
}

/* Write an MPA frame, then OR extra bits into its flags byte. */
static int raw_write_frame(struct kend *k, const struct kw_mpa_frame *f,
			   uint8_t extra_flags)
{
	uint8_t b[KW_MPA_HDR_LEN + KW_MPA_MAX_PD];
	int len = kw_mpa_encode(f, NULL, 0, b, sizeof(b));

	if (len < 0)
		return -1;
	b[16] |= extra_flags;
	return writen(k->raw.fd, b, len);
}

/*
 * The raw peer as initiator: kiwarp (thread kiwarp, k_accept or k_reject)
 * takes the Request req; the Reply lands in rep and pd. 0 if both frames
 * went through; kiwarp's own result is k->ret.
 */
static int raw_request(struct kend *k, void *(*kiwarp)(void *),
		       const struct kw_mpa_frame *req, struct kw_mpa_frame *rep,
		       uint8_t pd[KW_MPA_MAX_PD])
{
	pthread_t t;
	int ret;

	if (pthread_create(&t, NULL, kiwarp, k))
		return -1;
	ret = raw_write_frame(k, req, 0);
	if (!ret)
		ret = raw_read_frame(k, true, rep, pd);
	pthread_join(t, NULL);
	return ret;
}

/*
 * Read what kiwarp sends (CRC as crc) into s until its Terminate, which
 * must come and carry layer/etype/ecode.
 */
static void raw_expect_term(int *kwt_fail, struct kend *k, struct rp_sink *s,
			    bool crc, int layer, int etype, int ecode)
{
	struct kw_rx rx;

	memset(s, 0, sizeof(*s));
	kw_rx_init(&rx, &rp_sink_ops, s, crc, 0);
	rp_read(&k->raw, &rx, s, 10, NULL);
	ASSERT_TRUE(s->got_term);
	EXPECT_EQ(s->term.layer, layer);
	EXPECT_EQ(s->term.etype, etype);
	EXPECT_EQ(s->term.ecode, ecode);
}

/* Until one more message than *arg has arrived */
static unsigned int want_msgs;
static bool got_msgs(const struct rp_sink *s)
{
	return s->n >= want_msgs || s->got_term;
}

/*
 * kiwarp as responder without P2P asked for (kiwarp-rping's server, or any
 * ULP that does not care) gets a Request with A and only the Read RTR, as
 * RNICs send (irdma always sets A). RFC 6581 section 9.2: the Reply
 * carries A and an RTR type; kiwarp sends nothing before the RTR arrives
 * (RFC 5044 section 7.1.2's fencing), not even a Send posted before it,
 * and answers the zero-length Read with a zero-length Read Response.
 */
TEST(p2p_request_to_client_server_responder)
{
	static struct kend k;
	static struct rp_sink s;
	struct kw_mpa_cfg cfg = { .rev = 2, .p2p = true, .rtr = KW_RTR_READ,
				  .ird = 8, .ord = 8 };
	struct kw_mpa_frame req, rep;
	struct kw_mpa_result res;
	struct kiwarp_sge sge;
	struct kw_send_wr wr = { .wr_id = 7, .opcode = KIWARP_WR_SEND,
				 .flags = KW_SEND_SIGNALED, .num_sge = 1,
				 .sg_list = &sge };
	uint8_t pd[KW_MPA_MAX_PD];
	struct kw_rx rx;

	ASSERT_EQ(kend_init(&k), 0);
	k.param = (struct kw_conn_param){ .mpa_rev = 2 };	/* no P2P */
	kw_mpa_make_request(&cfg, &req);
	ASSERT_EQ(raw_request(&k, k_accept, &req, &rep, pd), 0);
	ASSERT_EQ(k.ret, 0);
	EXPECT_FALSE(rep.reject);
	EXPECT_TRUE(rep.enhanced);
	EXPECT_TRUE(rep.p2p);
	EXPECT_EQ(rep.rtr, KW_RTR_READ);
	ASSERT_EQ(kw_mpa_negotiate_initiator(&cfg, &rep, &res), 0);
	EXPECT_EQ(res.rtr, KW_RTR_READ);
	/* what kiwarp's ULP is told */
	EXPECT_TRUE(k.req.param.flags & KIWARP_CONN_P2P);
	EXPECT_TRUE(k.res.param.flags & KIWARP_CONN_P2P);
	EXPECT_EQ(k.res.param.rtr, KIWARP_RTR_READ);

	/* a Send posted before the RTR waits for it */
	memcpy(k.buf, "fenced", 6);
	sge = (struct kiwarp_sge){ (uintptr_t)k.buf, 6, k.mr->stag };
	ASSERT_EQ(kw_post_send(k.qp, &wr, 1), 1);
	memset(&s, 0, sizeof(s));
	k.raw.crc = res.crc;
	kw_rx_init(&rx, &rp_sink_ops, &s, res.crc, 0);
	want_msgs = 1;
	EXPECT_EQ(rp_read(&k.raw, &rx, &s, 0.5, got_msgs), 0);
	EXPECT_EQ(s.n, 0);
	/* the RTR: then the zero-length Read Response and the Send */
	ASSERT_EQ(rp_send_rtr(&k.raw, KW_OP_READ_REQ), 0);
	want_msgs = 2;
	rp_read(&k.raw, &rx, &s, 10, got_msgs);
	EXPECT_FALSE(kw_rx_failed(&rx));
	EXPECT_FALSE(s.got_term);
	ASSERT_EQ(s.n, 2);
	EXPECT_EQ(s.msg[0].opcode, KW_OP_READ_RESP);
	EXPECT_EQ(s.msg[0].len, 0);
	EXPECT_EQ(s.msg[1].opcode, KW_OP_SEND);
	EXPECT_EQ(s.msg[1].len, 6);
	kend_fini(&k);
}

/*
 * Outside P2P too, a responder "MUST receive and validate at least one
 * FPDU before sending any" (RFC 5044 section 7.1.2 rule 4): cxgb4 fails a
 * connection whose first FPDU comes with the Reply. A Send kiwarp's ULP
 * posts before the initiator's first message stays queued until then.
 */
TEST(responder_fenced_without_p2p)
{
	static struct kend k;
	static struct rp_sink s;
	struct kw_mpa_cfg cfg = { .rev = 2, .ird = 8, .ord = 8 };
	struct kw_mpa_frame req, rep;
	struct kw_mpa_result res;
	struct kiwarp_sge sge;
	struct kw_send_wr wr = { .wr_id = 7, .opcode = KIWARP_WR_SEND,
				 .flags = KW_SEND_SIGNALED, .num_sge = 1,
				 .sg_list = &sge };
	struct kw_tx_msg m = { .opcode = KW_OP_WRITE, .len = 4, .stag = 0,
			       .to = 0 };
	uint8_t pd[KW_MPA_MAX_PD];
	struct kw_rx rx;

	ASSERT_EQ(kend_init(&k), 0);
	k.param = (struct kw_conn_param){ .mpa_rev = 2 };
	kw_mpa_make_request(&cfg, &req);
	ASSERT_EQ(raw_request(&k, k_accept, &req, &rep, pd), 0);
	ASSERT_EQ(k.ret, 0);
	ASSERT_EQ(kw_mpa_negotiate_initiator(&cfg, &rep, &res), 0);
	EXPECT_FALSE(res.p2p);

	sge = (struct kiwarp_sge){ (uintptr_t)k.buf, 6, k.mr->stag };
	ASSERT_EQ(kw_post_send(k.qp, &wr, 1), 1);
	memset(&s, 0, sizeof(s));
	kw_rx_init(&rx, &rp_sink_ops, &s, res.crc, 0);
	want_msgs = 1;
	EXPECT_EQ(rp_read(&k.raw, &rx, &s, 0.5, got_msgs), 0);
	EXPECT_EQ(s.n, 0);
	/* the initiator's first FPDU: a 4-byte Write into kiwarp's MR */
	m.stag = k.mr->stag;
	m.to = (uintptr_t)k.buf + 100;
	k.raw.crc = res.crc;
	ASSERT_EQ(rp_send(&k.raw, &m, (const uint8_t *)"abcd", 0), 0);
	rp_read(&k.raw, &rx, &s, 10, got_msgs);
	ASSERT_EQ(s.n, 1);
	EXPECT_EQ(s.msg[0].opcode, KW_OP_SEND);
	EXPECT_EQ(memcmp(k.buf + 100, "abcd", 4), 0);
	kend_fini(&k);
}

/*
 * kiwarp as initiator offering only the Write RTR; the responder allows
 * only Read. RFC 6581 section 9.2: Terminate layer 2 (LLP), type 0 (MPA),
 * code 7 (no matching RTR option), then close; CRC as negotiated frames it.
 * enhanced false: the Reply has no S at all, so no A and no RTR (section
 * 10: an enhanced responder answers enhanced): the same Terminate, not a
 * connection without the P2P the ULP asked for.
 */
static void no_matching_rtr(int *kwt_fail, bool crc, bool enhanced)
{
	static struct kend k;
	static struct rp_sink s;
	struct kw_mpa_frame req, rep = { .reply = true, .rev = 2,
		.enhanced = enhanced, .p2p = enhanced,
		.rtr = enhanced ? KW_RTR_READ : 0, .ird = 4, .ord = 4 };
	struct kiwarp_query_qp q;
	uint8_t pd[KW_MPA_MAX_PD];
	struct kw_rx rx;
	pthread_t t;

	ASSERT_EQ(kend_init(&k), 0);
	k.param = (struct kw_conn_param){ .mpa_rev = 2,
		.flags = KIWARP_CONN_P2P |
			 (crc ? KIWARP_CONN_CRC : KIWARP_CONN_NO_CRC),
		.rtr = KIWARP_RTR_WRITE };
	ASSERT_EQ(pthread_create(&t, NULL, k_connect, &k), 0);
	ASSERT_EQ(raw_read_frame(&k, false, &req, pd), 0);
	EXPECT_TRUE(req.p2p);
	EXPECT_EQ(req.rtr, KW_RTR_WRITE);
	rep.crc = req.crc;
	ASSERT_EQ(raw_write_frame(&k, &rep, 0), 0);
	pthread_join(t, NULL);
	EXPECT_EQ(k.ret, -EPROTO);
	memset(&s, 0, sizeof(s));
	kw_rx_init(&rx, &rp_sink_ops, &s, crc, 0);
	rp_read(&k.raw, &rx, &s, 10, NULL);
	EXPECT_FALSE(kw_rx_failed(&rx));	/* CRC checked when on */
	EXPECT_TRUE(s.got_term);
	EXPECT_EQ(s.term.layer, KW_TERM_LAYER_LLP);
	EXPECT_EQ(s.term.etype, KW_TERM_LLP_ETYPE_MPA);
	EXPECT_EQ(s.term.ecode, KW_TERM_LLP_NO_MATCHING_RTR);
	ASSERT_EQ(kw_query_qp(k.qp, &q), 0);
	EXPECT_EQ(q.state, KIWARP_QPS_ERROR);
	EXPECT_TRUE(q.term_sent.valid);
	EXPECT_EQ(q.term_sent.layer, KW_TERM_LAYER_LLP);
	EXPECT_EQ(q.term_sent.ecode, KW_TERM_LLP_NO_MATCHING_RTR);
	kend_fini(&k);
}

TEST(initiator_no_matching_rtr) { no_matching_rtr(kwt_fail, false, true); }
TEST(initiator_no_matching_rtr_crc) { no_matching_rtr(kwt_fail, true, true); }
TEST(unenhanced_reply_to_p2p_request) { no_matching_rtr(kwt_fail, false, false); }

/*
 * The responder allows Write and Read (an RFC 6581 responder may set
 * several); kiwarp offered all three and sends exactly one RTR, the Write.
 */
TEST(initiator_picks_one_rtr)
{
	static struct kend k;
	struct kw_mpa_frame req, rep = { .reply = true, .rev = 2,
		.enhanced = true, .p2p = true,
		.rtr = KW_RTR_WRITE | KW_RTR_READ, .ird = 4, .ord = 4 };
	uint8_t pd[KW_MPA_MAX_PD], b[64];
	pthread_t t;

	ASSERT_EQ(kend_init(&k), 0);
	k.param = (struct kw_conn_param){ .mpa_rev = 2,
		.flags = KIWARP_CONN_P2P, .rtr = KIWARP_RTR_NONE };
	ASSERT_EQ(pthread_create(&t, NULL, k_connect, &k), 0);
	ASSERT_EQ(raw_read_frame(&k, false, &req, pd), 0);
	EXPECT_EQ(req.rtr, KW_RTR_ALL);
	ASSERT_EQ(raw_write_frame(&k, &rep, 0), 0);
	pthread_join(t, NULL);
	ASSERT_EQ(k.ret, 0);
	EXPECT_EQ(k.res.param.rtr, KIWARP_RTR_WRITE);
	/* the RTR: a 14-byte tagged header, no payload (MPA length 14),
	 * the CRC field: 20 bytes */
	ASSERT_EQ(readn(k.raw.fd, b, 20, 5000), 0);
	EXPECT_EQ(b[0], 0);
	EXPECT_EQ(b[1], KW_DDP_TAGGED_HDR_LEN);
	EXPECT_EQ(b[2] & 0x80, 0x80);		/* T */
	EXPECT_EQ(b[3] & 0x0f, KW_OP_WRITE);
	kend_fini(&k);
}

/*
 * RFC 6581 section 9.1: the initiator's IRD at least the responder's ORD.
 * kiwarp asked for IRD 4; a Reply with ORD 32 raises it to 32, one with an
 * ORD beyond what kiwarp can serve (128) gets Terminate 2/0/6.
 */
static void responder_ord(int *kwt_fail, uint16_t ord, int want_ret,
			  uint32_t want_ird)
{
	static struct kend k;
	static struct rp_sink s;
	struct kw_mpa_frame req, rep = { .reply = true, .rev = 2,
		.enhanced = true, .ird = 4, .ord = ord };
	uint8_t pd[KW_MPA_MAX_PD];
	struct kw_rx rx;
	pthread_t t;

	ASSERT_EQ(kend_init(&k), 0);
	k.param = (struct kw_conn_param){ .mpa_rev = 2, .ird = 4, .ord = 4 };
	ASSERT_EQ(pthread_create(&t, NULL, k_connect, &k), 0);
	ASSERT_EQ(raw_read_frame(&k, false, &req, pd), 0);
	EXPECT_EQ(req.ird, 4);
	ASSERT_EQ(raw_write_frame(&k, &rep, 0), 0);
	pthread_join(t, NULL);
	EXPECT_EQ(k.ret, want_ret);
	if (!want_ret) {
		struct kiwarp_query_qp q;

		EXPECT_EQ(k.res.param.ird, want_ird);
		EXPECT_EQ(k.res.param.ord, 4);
		/* RFC 6581 section 9.1: the ULP learns the responder's
		 * values as sent */
		ASSERT_EQ(kw_query_qp(k.qp, &q), 0);
		EXPECT_EQ(q.peer_ird, 4);
		EXPECT_EQ(q.peer_ord, ord);
	} else {
		memset(&s, 0, sizeof(s));
		kw_rx_init(&rx, &rp_sink_ops, &s, false, 0);
		rp_read(&k.raw, &rx, &s, 10, NULL);
		EXPECT_TRUE(s.got_term);
		EXPECT_EQ(s.term.layer, KW_TERM_LAYER_LLP);
		EXPECT_EQ(s.term.ecode, KW_TERM_LLP_INSUFFICIENT_IRD);
	}
	kend_fini(&k);
}

TEST(initiator_raises_ird) { responder_ord(kwt_fail, 32, 0, 32); }
TEST(initiator_insufficient_ird) { responder_ord(kwt_fail, 200, -EPROTO, 0); }

/*
 * A Reply with a reserved flag bit (siw built with try_gso sets 0x08) and
 * C although kiwarp did not ask for CRC: the bits are not checked (RFC 5044
 * section 7.1.1) and CRC is on for both directions, as C in either frame
 * says. The Send kiwarp then sends carries a CRC the peer verifies.
 */
TEST(reply_reserved_bits_and_crc)
{
	static struct kend k;
	static struct rp_sink s;
	struct kw_mpa_frame req, rep = { .reply = true, .rev = 2,
		.enhanced = true, .crc = true, .ird = 4, .ord = 4 };
	struct kiwarp_sge sge;
	struct kw_send_wr wr = { .wr_id = 1, .opcode = KIWARP_WR_SEND,
				 .flags = KW_SEND_SIGNALED, .num_sge = 1,
				 .sg_list = &sge };
	uint8_t pd[KW_MPA_MAX_PD];
	struct kw_rx rx;
	pthread_t t;

	ASSERT_EQ(kend_init(&k), 0);
	/* CRC declined by kiwarp, asked for by the responder alone */
	k.param = (struct kw_conn_param){ .mpa_rev = 2,
					  .flags = KIWARP_CONN_NO_CRC };
	ASSERT_EQ(pthread_create(&t, NULL, k_connect, &k), 0);
	ASSERT_EQ(raw_read_frame(&k, false, &req, pd), 0);
	EXPECT_FALSE(req.crc);
	ASSERT_EQ(raw_write_frame(&k, &rep, 0x08), 0);
	pthread_join(t, NULL);
	ASSERT_EQ(k.ret, 0);
	EXPECT_TRUE(k.res.param.flags & KIWARP_CONN_CRC);
	memcpy(k.buf, "crc on", 6);
	sge = (struct kiwarp_sge){ (uintptr_t)k.buf, 6, k.mr->stag };
	ASSERT_EQ(kw_post_send(k.qp, &wr, 1), 1);
	memset(&s, 0, sizeof(s));
	kw_rx_init(&rx, &rp_sink_ops, &s, true, 0);
	want_msgs = 1;
	rp_read(&k.raw, &rx, &s, 10, got_msgs);
	EXPECT_FALSE(kw_rx_failed(&rx));	/* the CRC was right */
	ASSERT_EQ(s.n, 1);
	EXPECT_EQ(s.msg[0].opcode, KW_OP_SEND);
	kend_fini(&k);
}

/*
 * RFC 6581 section 10: an enhanced Request gets an enhanced Reply, also
 * from a kiwarp responder set to MPA revision 1 (siw fails on the rev 1
 * Reply kiwarp used to send).
 */
TEST(enhanced_request_to_rev1_responder)
{
	static struct kend k;
	struct kw_mpa_cfg cfg = { .rev = 2, .ird = 8, .ord = 8 };
	struct kw_mpa_frame req, rep;
	struct kw_mpa_result res;
	uint8_t pd[KW_MPA_MAX_PD];

	ASSERT_EQ(kend_init(&k), 0);
	k.param = (struct kw_conn_param){ .mpa_rev = 1 };
	kw_mpa_make_request(&cfg, &req);
	ASSERT_EQ(raw_request(&k, k_accept, &req, &rep, pd), 0);
	ASSERT_EQ(k.ret, 0);
	EXPECT_EQ(rep.rev, 2);
	EXPECT_TRUE(rep.enhanced);
	ASSERT_EQ(kw_mpa_negotiate_initiator(&cfg, &rep, &res), 0);
	EXPECT_EQ(k.res.param.mpa_rev, 2);
	kend_fini(&k);
}

/* ------------------------------------------------- RNIC personalities */

/*
 * How Intel irdma and Chelsio cxgb4 (Linux 6.1 drivers, default module
 * parameters) behave on the wire during MPA setup, as their connection
 * managers show (drivers/infiniband/hw/irdma/cm.c, ctrl.c;
 * hw/cxgb4/cm.c, qp.c). Behaviour learnt from the source, nothing copied:
 *
 * irdma: always MPA rev 2 with C (it always generates and checks CRCs);
 *   its Request offers A with the Write and Read RTRs (80 10 C0 10 for
 *   IRD = ORD = 16); as responder it answers A with D (Read) if offered,
 *   else C, and an IRD of the hardware maximum (127 on E810); a Request
 *   without A or RTR is reset. As initiator it takes D before C from the
 *   Reply and sends a zero-length Read (source STag 0x1234, sink STag
 *   0xABCD, TOs 0), or a zero-length Write (STag 0) with C only; no A, no
 *   D or C: reset. It fails a Reply whose ORD is above its IRD.
 * cxgb4: mpa_rev=2, crc_enabled=1 (C is sent; crc_enabled=0 is the CRC-off
 *   variant here), peer2peer=1, p2p_type=1: the Request carries A and D
 *   only (80 10 40 10), the Reply always its own D when the Request had
 *   A. As initiator it wants exactly D back (C and D together, or none,
 *   is "no matching RTR": Terminate 2/0/7) and sends a zero-length Read
 *   with every STag and TO 1. It aborts when bytes follow the MPA frame in
 *   the same receive, i.e. when a responder is not fenced.
 * Both: the responder sends nothing before the RTR.
 */
struct persona {
	const char *name;
	bool crc_always;	/* C whatever the configuration */
	u8 offer;		/* RTR types in its Request */
	u16 reply_ird;		/* 0: its configured IRD */
	u32 rtr_src_stag, rtr_sink_stag;
	u64 rtr_to;
	bool exact_d;		/* initiator: the Reply must allow D alone */
};

static const struct persona irdma = {
	.name = "irdma", .crc_always = true,
	.offer = KW_RTR_WRITE | KW_RTR_READ, .reply_ird = 127,
	.rtr_src_stag = 0x1234, .rtr_sink_stag = 0xabcd, .rtr_to = 0,
};

static const struct persona cxgb4 = {
	.name = "cxgb4", .offer = KW_RTR_READ,
	.rtr_src_stag = 1, .rtr_sink_stag = 1, .rtr_to = 1, .exact_d = true,
};

/* The persona's zero-length RTR: a Read (its Read Request MSN 1) or, if
 * the Reply allowed only C, irdma's zero-length Write (STag 0, TO 0). */
static int persona_rtr(const struct persona *pe, const struct rp *p, u8 type)
{
	uint8_t rr[KW_READ_REQ_LEN];
	struct kw_read_req r = { .sink_stag = pe->rtr_sink_stag,
				 .sink_to = pe->rtr_to,
				 .src_stag = pe->rtr_src_stag,
				 .src_to = pe->rtr_to };
	struct kw_tx_msg m = { .opcode = KW_OP_READ_REQ, .qn = KW_QN_READ_REQ,
			       .msn = 1, .inline_data = rr,
			       .inline_len = KW_READ_REQ_LEN };

	if (type == KW_RTR_WRITE) {
		m = (struct kw_tx_msg){ .opcode = KW_OP_WRITE };
		return rp_send(p, &m, rr, 0);
	}
	kw_read_req_encode(&r, rr);
	return rp_send(p, &m, rr, 0);
}

static void fill(uint8_t *b, size_t n, unsigned int seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		b[i] = (uint8_t)(i * 31 + seed);
}

/*
 * Both directions once the QP is up (the RTR exchanged): the persona
 * Sends, Writes and Reads kiwarp's memory; kiwarp Sends and Writes to the
 * persona. Bytes compared everywhere, CQEs checked. read_msn: the
 * persona's next Read Request MSN.
 */
static void exchange(int *kwt_fail, struct kend *k, struct kw_rx *rx,
		     struct rp_sink *s, u32 read_msn)
{
	enum { N = 3000 };
	static uint8_t a[N], mem[2 * N];
	struct kiwarp_sge sge;
	struct kw_recv_wr rw = { .wr_id = 10, .sg_list = &sge, .num_sge = 1 };
	struct kw_send_wr wr = { .flags = KW_SEND_SIGNALED, .num_sge = 1,
				 .sg_list = &sge };
	struct kw_tx_msg m;
	struct kiwarp_cqe e;
	uint8_t rr[KW_READ_REQ_LEN];
	struct kw_read_req r;
	unsigned int n0;

	s->mem = mem;
	s->mem_len = sizeof(mem);
	/* persona -> kiwarp: Send into a posted receive */
	sge = (struct kiwarp_sge){ (uintptr_t)k->buf, N, k->mr->stag };
	ASSERT_EQ(kw_post_recv(k->qp, &rw, 1), 1);
	fill(a, N, 1);
	m = (struct kw_tx_msg){ .opcode = KW_OP_SEND, .qn = KW_QN_SEND,
				.msn = 1, .len = N };
	ASSERT_EQ(rp_send(&k->raw, &m, a, 0), 0);
	ASSERT_EQ(cq_wait_one(k->cq, &e, 10), 0);
	EXPECT_EQ(e.status, KIWARP_WC_SUCCESS);
	EXPECT_EQ(e.wr_id, 10);
	EXPECT_EQ(e.byte_len, N);
	EXPECT_MEMEQ(k->buf, a, N);
	/* persona -> kiwarp: Write */
	fill(a, N, 2);
	m = (struct kw_tx_msg){ .opcode = KW_OP_WRITE, .len = N,
				.stag = k->mr->stag,
				.to = (uintptr_t)k->buf + N };
	ASSERT_EQ(rp_send(&k->raw, &m, a, 0), 0);
	/* persona <- kiwarp: Read of what it just wrote (ordered after it) */
	r = (struct kw_read_req){ .sink_stag = 0x77, .sink_to = N,
				  .src_stag = k->mr->stag,
				  .src_to = (uintptr_t)k->buf + N, .size = N };
	kw_read_req_encode(&r, rr);
	m = (struct kw_tx_msg){ .opcode = KW_OP_READ_REQ, .qn = KW_QN_READ_REQ,
				.msn = read_msn, .inline_data = rr,
				.inline_len = KW_READ_REQ_LEN };
	ASSERT_EQ(rp_send(&k->raw, &m, rr, 0), 0);
	n0 = s->n;
	want_msgs = n0 + 1;
	rp_read(&k->raw, rx, s, 10, got_msgs);
	ASSERT_EQ(s->n, n0 + 1);
	EXPECT_EQ(s->msg[n0].opcode, KW_OP_READ_RESP);
	EXPECT_EQ(s->msg[n0].len, N);
	EXPECT_MEMEQ(mem + N, a, N);
	EXPECT_MEMEQ(k->buf + N, a, N);
	/* kiwarp -> persona: Send, then Write */
	fill(k->buf, N, 3);
	wr.wr_id = 20;
	wr.opcode = KIWARP_WR_SEND;
	sge = (struct kiwarp_sge){ (uintptr_t)k->buf, N, k->mr->stag };
	ASSERT_EQ(kw_post_send(k->qp, &wr, 1), 1);
	want_msgs = n0 + 2;
	rp_read(&k->raw, rx, s, 10, got_msgs);
	ASSERT_EQ(s->n, n0 + 2);
	EXPECT_EQ(s->msg[n0 + 1].opcode, KW_OP_SEND);
	EXPECT_MEMEQ(mem, k->buf, N);
	fill(k->buf + N, N, 4);
	wr.wr_id = 21;
	wr.opcode = KIWARP_WR_RDMA_WRITE;
	wr.rkey = 0x99;
	wr.remote_addr = N;
	sge = (struct kiwarp_sge){ (uintptr_t)k->buf + N, N, k->mr->stag };
	ASSERT_EQ(kw_post_send(k->qp, &wr, 1), 1);
	/* a zero-length Send after it tells when the Write is in */
	wr.wr_id = 22;
	wr.opcode = KIWARP_WR_SEND;
	wr.num_sge = 0;
	ASSERT_EQ(kw_post_send(k->qp, &wr, 1), 1);
	want_msgs = n0 + 4;
	rp_read(&k->raw, rx, s, 10, got_msgs);
	EXPECT_FALSE(kw_rx_failed(rx));
	EXPECT_FALSE(s->got_term);
	ASSERT_EQ(s->n, n0 + 4);
	EXPECT_EQ(s->msg[n0 + 2].opcode, KW_OP_WRITE);
	EXPECT_MEMEQ(mem + N, k->buf + N, N);
	s->mem = NULL;
}

/* The persona connects to kiwarp, a responder that did not ask for P2P
 * (as kiwarp-rping's server, or any ULP with default parameters). */
static void persona_initiator(int *kwt_fail, const struct persona *pe,
			      bool crc)
{
	static struct kend k;
	static struct rp_sink s;
	struct kw_mpa_frame req = { .rev = 2, .enhanced = true, .p2p = true,
		.rtr = pe->offer, .ird = 16, .ord = 16,
		.crc = crc || pe->crc_always }, rep;
	uint8_t pd[KW_MPA_MAX_PD];
	struct kw_rx rx;
	u8 use;

	ASSERT_EQ(kend_init(&k), 0);
	k.param = (struct kw_conn_param){ .mpa_rev = 2,
		.flags = crc ? KIWARP_CONN_CRC : KIWARP_CONN_NO_CRC };
	ASSERT_EQ(raw_request(&k, k_accept, &req, &rep, pd), 0);
	ASSERT_EQ(k.ret, 0);
	/* the persona's checks of the Reply */
	EXPECT_FALSE(rep.reject);
	EXPECT_TRUE(rep.enhanced);
	ASSERT_TRUE(rep.p2p);
	if (pe->exact_d)
		EXPECT_EQ(rep.rtr, KW_RTR_READ);
	/* D before C (irdma; cxgb4 wants D alone) */
	use = rep.rtr & KW_RTR_READ ? KW_RTR_READ : rep.rtr & KW_RTR_WRITE;
	ASSERT_NE(use, 0);
	EXPECT_LE(rep.ord, req.ird);
	EXPECT_EQ(rep.crc, req.crc);
	note("%s -> kiwarp: Reply A=%d RTR %#x IRD %u ORD %u C=%d", pe->name,
	     rep.p2p, rep.rtr, rep.ird, rep.ord, rep.crc);
	k.raw.crc = req.crc || rep.crc;
	memset(&s, 0, sizeof(s));
	kw_rx_init(&rx, &rp_sink_ops, &s, k.raw.crc, 0);
	ASSERT_EQ(persona_rtr(pe, &k.raw, use), 0);
	if (use == KW_RTR_READ) {
		/* the zero-length Read Response to the persona's sink */
		want_msgs = 1;
		rp_read(&k.raw, &rx, &s, 10, got_msgs);
		ASSERT_EQ(s.n, 1);
		EXPECT_EQ(s.msg[0].opcode, KW_OP_READ_RESP);
		EXPECT_EQ(s.msg[0].len, 0);
	}
	exchange(kwt_fail, &k, &rx, &s, use == KW_RTR_READ ? 2 : 1);
	kend_fini(&k);
}

/* kiwarp (P2P, any RTR) connects to the persona as responder. */
static void persona_responder(int *kwt_fail, const struct persona *pe,
			      bool crc)
{
	static struct kend k;
	static struct rp_sink s;
	struct kw_mpa_frame req, rep = { .reply = true, .rev = 2,
		.enhanced = true, .p2p = true };
	struct kw_tx_msg m = { .opcode = KW_OP_READ_RESP };
	uint8_t pd[KW_MPA_MAX_PD];
	struct kw_rx rx;
	pthread_t t;

	ASSERT_EQ(kend_init(&k), 0);
	k.param = (struct kw_conn_param){ .mpa_rev = 2, .ird = 16, .ord = 16,
		.flags = KIWARP_CONN_P2P |
			 (crc ? KIWARP_CONN_CRC : KIWARP_CONN_NO_CRC) };
	ASSERT_EQ(pthread_create(&t, NULL, k_connect, &k), 0);
	ASSERT_EQ(raw_read_frame(&k, false, &req, pd), 0);
	/* what the persona needs of a Request: A and a Read or Write RTR */
	ASSERT_TRUE(req.enhanced);
	ASSERT_TRUE(req.p2p);
	ASSERT_TRUE(req.rtr & KW_RTR_READ);
	/* irdma: D before C; cxgb4: always its own D */
	rep.rtr = KW_RTR_READ;
	rep.crc = req.crc || crc || pe->crc_always;
	rep.ird = pe->reply_ird ? pe->reply_ird : 16;
	rep.ord = req.ird < 16 ? req.ird : 16;
	ASSERT_EQ(raw_write_frame(&k, &rep, 0), 0);
	pthread_join(t, NULL);
	ASSERT_EQ(k.ret, 0);
	EXPECT_EQ(k.res.param.rtr, KIWARP_RTR_READ);
	EXPECT_EQ(!!(k.res.param.flags & KIWARP_CONN_CRC), rep.crc);
	EXPECT_EQ(k.res.param.ord, 16);	/* min(16, the persona's IRD) */
	note("kiwarp -> %s: Request RTR %#x IRD %u ORD %u C=%d", pe->name,
	     req.rtr, req.ird, req.ord, req.crc);
	k.raw.crc = rep.crc;
	memset(&s, 0, sizeof(s));
	kw_rx_init(&rx, &rp_sink_ops, &s, k.raw.crc, 0);
	/* kiwarp's RTR: the zero-length Read Request */
	want_msgs = 1;
	rp_read(&k.raw, &rx, &s, 10, got_msgs);
	ASSERT_EQ(s.n, 1);
	EXPECT_EQ(s.msg[0].opcode, KW_OP_READ_REQ);
	/* the persona answers it: a zero-length Read Response to its sink */
	m.stag = 1;	/* kiwarp's RTR sink STag (as siw and the RNICs) */
	m.to = 0;
	ASSERT_EQ(rp_send(&k.raw, &m, NULL, 0), 0);
	exchange(kwt_fail, &k, &rx, &s, 1);
	kend_fini(&k);
}

TEST(irdma_initiator) { persona_initiator(kwt_fail, &irdma, true); }
TEST(irdma_initiator_kiwarp_no_crc) { persona_initiator(kwt_fail, &irdma, false); }
TEST(irdma_responder) { persona_responder(kwt_fail, &irdma, true); }
TEST(irdma_responder_kiwarp_no_crc) { persona_responder(kwt_fail, &irdma, false); }
TEST(cxgb4_initiator_crc) { persona_initiator(kwt_fail, &cxgb4, true); }
TEST(cxgb4_initiator_no_crc) { persona_initiator(kwt_fail, &cxgb4, false); }
TEST(cxgb4_responder_crc) { persona_responder(kwt_fail, &cxgb4, true); }
TEST(cxgb4_responder_no_crc) { persona_responder(kwt_fail, &cxgb4, false); }

/* ------------------------------------------------------------ Reject */

static void *k_reject(void *arg)
{
	struct kend *k = arg;

	k->ret = kw_accept(k->qp, k->sock, NULL, 5000, &k->req);
	if (!k->ret)
		k->ret = kw_accept_reply(k->qp, KIWARP_REPLY_REJECT, &k->param,
					 "no", 2, &k->res);
	return NULL;
}

/* Both ends of a plain TCP connection still work both ways, and the
 * socket kiwarp gave back has its own timeouts again (none). */
static void stream_still_open(int *kwt_fail, struct kend *k)
{
	struct timeval tv = { 1, 1 };
	socklen_t tl = sizeof(tv);
	char b[8] = { 0 };

	ASSERT_EQ(getsockopt(k->sock, SOL_SOCKET, SO_RCVTIMEO, &tv, &tl), 0);
	EXPECT_EQ(tv.tv_sec, 0);
	EXPECT_EQ(tv.tv_usec, 0);

	ASSERT_EQ(writen(k->raw.fd, "ping", 4), 0);
	ASSERT_EQ(readn(k->sock, b, 4, 5000), 0);
	EXPECT_EQ(memcmp(b, "ping", 4), 0);
	ASSERT_EQ(writen(k->sock, "pong", 4), 0);
	ASSERT_EQ(readn(k->raw.fd, b, 4, 5000), 0);
	EXPECT_EQ(memcmp(b, "pong", 4), 0);
}

/*
 * RFC 5044 section 7.1.2 rules 2 and 3: after a Reject "the
 * implementation MUST exit MPA, leaving the TCP connection open. The ULP
 * may close TCP or use the connection for other purposes." kiwarp, the
 * responder, rejects; the socket its ULP handed in is the ULP's again.
 */
TEST(reject_sent_leaves_socket_open)
{
	static struct kend k;
	struct kw_mpa_cfg cfg = { .rev = 2, .ird = 8, .ord = 8 };
	struct kw_mpa_frame req, rep;
	struct kiwarp_query_qp q;
	uint8_t pd[KW_MPA_MAX_PD];

	ASSERT_EQ(kend_init(&k), 0);
	k.param = (struct kw_conn_param){ .mpa_rev = 2 };
	kw_mpa_make_request(&cfg, &req);
	ASSERT_EQ(raw_request(&k, k_reject, &req, &rep, pd), 0);
	EXPECT_EQ(k.ret, 0);
	EXPECT_TRUE(rep.reject);
	EXPECT_EQ(rep.ulp_pd_len, 2);
	ASSERT_EQ(kw_query_qp(k.qp, &q), 0);
	EXPECT_EQ(q.state, KIWARP_QPS_ERROR);
	stream_still_open(kwt_fail, &k);
	kend_fini(&k);
}

/* The same with kiwarp as the initiator that gets the Reject. */
TEST(reject_received_leaves_socket_open)
{
	static struct kend k;
	struct kw_mpa_frame req, rep = { .reply = true, .rev = 2,
		.enhanced = true, .reject = true, .ird = 4, .ord = 4 };
	uint8_t pd[KW_MPA_MAX_PD];
	pthread_t t;

	ASSERT_EQ(kend_init(&k), 0);
	k.param = (struct kw_conn_param){ .mpa_rev = 2 };
	ASSERT_EQ(pthread_create(&t, NULL, k_connect, &k), 0);
	ASSERT_EQ(raw_read_frame(&k, false, &req, pd), 0);
	ASSERT_EQ(raw_write_frame(&k, &rep, 0), 0);
	pthread_join(t, NULL);
	EXPECT_EQ(k.ret, -ECONNREFUSED);
	stream_still_open(kwt_fail, &k);
	kend_fini(&k);
}

/*
 * The responder's IRD is 0: kiwarp's ORD is 0 and it issues no Read (RFC
 * 5040 section 6.1; before, ORD 0 still allowed one). A Read posted anyway
 * fails locally; RFC 5040 section 7.1: the Terminate (0/0/0) goes out
 * instead of it, and nothing posted after it (a Send) is sent.
 */
TEST(ord_zero_means_no_reads)
{
	static struct kend k;
	static struct rp_sink s;
	struct kw_mpa_frame req, rep = { .reply = true, .rev = 2,
		.enhanced = true, .ird = 0, .ord = 4 };
	struct kiwarp_sge sge;
	struct kw_send_wr rd = { .wr_id = 1, .opcode = KIWARP_WR_RDMA_READ,
				 .flags = KW_SEND_SIGNALED, .num_sge = 1,
				 .sg_list = &sge, .rkey = 0x42 };
	struct kw_send_wr snd = { .wr_id = 2, .opcode = KIWARP_WR_SEND,
				  .flags = KW_SEND_SIGNALED, .num_sge = 1,
				  .sg_list = &sge };
	struct kiwarp_cqe e;
	uint8_t pd[KW_MPA_MAX_PD];
	struct kw_rx rx;
	pthread_t t;

	ASSERT_EQ(kend_init(&k), 0);
	k.param = (struct kw_conn_param){ .mpa_rev = 2 };
	ASSERT_EQ(pthread_create(&t, NULL, k_connect, &k), 0);
	ASSERT_EQ(raw_read_frame(&k, false, &req, pd), 0);
	ASSERT_EQ(raw_write_frame(&k, &rep, 0), 0);
	pthread_join(t, NULL);
	ASSERT_EQ(k.ret, 0);
	EXPECT_EQ(k.res.param.ord, 0);
	sge = (struct kiwarp_sge){ (uintptr_t)k.buf, 64, k.mr->stag };
	ASSERT_EQ(kw_post_send(k.qp, &rd, 1), 1);
	ASSERT_EQ(kw_post_send(k.qp, &snd, 1), 1);
	memset(&s, 0, sizeof(s));
	kw_rx_init(&rx, &rp_sink_ops, &s, false, 0);
	rp_read(&k.raw, &rx, &s, 10, NULL);
	ASSERT_TRUE(s.got_term);
	EXPECT_EQ(s.n, 1);		/* no Read Request, no Send */
	EXPECT_EQ(s.term.layer, KW_TERM_LAYER_RDMAP);
	EXPECT_EQ(s.term.etype, KW_TERM_RDMAP_ETYPE_CATASTROPHIC);
	ASSERT_EQ(cq_wait_one(k.cq, &e, 10), 0);
	EXPECT_EQ(e.wr_id, 1);
	EXPECT_EQ(e.status, KIWARP_WC_LOC_QP_OP_ERR);
	ASSERT_EQ(cq_wait_one(k.cq, &e, 10), 0);
	EXPECT_EQ(e.wr_id, 2);
	EXPECT_EQ(e.status, KIWARP_WC_WR_FLUSH_ERR);
	kend_fini(&k);
}

/*
 * P2P with the Read RTR negotiated, but the initiator's first FPDU is a
 * Write with data: RFC 6581 section 9.2 wants the RTR first. kiwarp, the
 * responder, terminates (LLP, no matching RTR, 2/0/7) instead of waiting
 * forever for an RTR that never comes.
 */
TEST(p2p_first_fpdu_not_the_rtr)
{
	static struct kend k;
	static struct rp_sink s;
	struct kw_mpa_cfg cfg = { .rev = 2, .p2p = true, .rtr = KW_RTR_READ,
				  .ird = 8, .ord = 8 };
	struct kw_mpa_frame req, rep;
	struct kw_mpa_result res;
	struct kw_tx_msg m = { .opcode = KW_OP_WRITE, .len = 4 };
	uint8_t pd[KW_MPA_MAX_PD];

	ASSERT_EQ(kend_init(&k), 0);
	k.param = (struct kw_conn_param){ .mpa_rev = 2 };
	kw_mpa_make_request(&cfg, &req);
	ASSERT_EQ(raw_request(&k, k_accept, &req, &rep, pd), 0);
	ASSERT_EQ(k.ret, 0);
	ASSERT_EQ(kw_mpa_negotiate_initiator(&cfg, &rep, &res), 0);
	ASSERT_EQ(res.rtr, KW_RTR_READ);
	k.raw.crc = res.crc;	/* kiwarp's Reply has C: its default */
	m.stag = k.mr->stag;
	m.to = (uintptr_t)k.buf;
	ASSERT_EQ(rp_send(&k.raw, &m, (const uint8_t *)"data", 0), 0);
	raw_expect_term(kwt_fail, &k, &s, res.crc, KW_TERM_LAYER_LLP,
			KW_TERM_LLP_ETYPE_MPA, KW_TERM_LLP_NO_MATCHING_RTR);
	ASSERT_TRUE(s.got_term);
	kend_fini(&k);
}

/* ------------------------------------------- placement and revocation */

/*
 * The raw peer as initiator of a plain (client-server) rev 2 connection,
 * CRC on or off; kiwarp accepts. Its socket sends with a 5 s timeout, so
 * a window that never opens fails the test instead of hanging it.
 */
static void raw_plain_connect(int *kwt_fail, struct kend *k, bool crc)
{
	struct kw_mpa_cfg cfg = { .rev = 2, .crc = crc, .ird = 8, .ord = 8 };
	struct timeval tv = { .tv_sec = 5 };
	struct kiwarp_query_qp q;
	struct kw_mpa_frame req, rep;
	struct kw_mpa_result res;
	uint8_t pd[KW_MPA_MAX_PD];

	k->param = (struct kw_conn_param){ .mpa_rev = 2,
		.flags = crc ? KIWARP_CONN_CRC : KIWARP_CONN_NO_CRC };
	kw_mpa_make_request(&cfg, &req);
	ASSERT_EQ(raw_request(k, k_accept, &req, &rep, pd), 0);
	ASSERT_EQ(k->ret, 0);
	ASSERT_EQ(kw_mpa_negotiate_initiator(&cfg, &rep, &res), 0);
	ASSERT_EQ(res.crc, crc);
	k->raw.crc = crc;
	/* the initiator's IRD and ORD as it sent them (RFC 6581 9.1) */
	ASSERT_EQ(kw_query_qp(k->qp, &q), 0);
	EXPECT_EQ(q.peer_ird, 8);
	EXPECT_EQ(q.peer_ord, 8);
	ASSERT_EQ(setsockopt(k->raw.fd, SOL_SOCKET, SO_SNDTIMEO, &tv,
			     sizeof(tv)), 0);
}

/* Until buf holds want (or secs pass). */
static bool wait_bytes(const uint8_t *buf, const uint8_t *want, size_t n,
		       double secs)
{
	double end = now() + secs;

	while (memcmp(buf, want, n)) {
		if (now() > end)
			return false;
		usleep(1000);
	}
	return true;
}

static bool all_bytes(const uint8_t *b, uint8_t v, size_t n)
{
	while (n--)
		if (*b++ != v)
			return false;
	return true;
}

/* One Write FPDU of len bytes from w to kiwarp's buffer at off, built. */
static size_t write_fpdu(struct kend *k, const uint8_t *w, uint32_t len,
			 uint32_t off, uint8_t *out)
{
	struct kw_tx_msg m = { .opcode = KW_OP_WRITE, .len = len,
			       .stag = k->mr->stag,
			       .to = (uintptr_t)k->buf + off,
			       .mulpdu = 65535 };
	uint8_t *end = rp_build(&k->raw, &m, w, out);

	return end ? (size_t)(end - out) : 0;
}

/*
 * RFC 5044 section 6: with CRC, kiwarp places nothing of an FPDU until all
 * of it has arrived and its CRC is checked (the bytes wait in the socket's
 * skbs), then all of it.
 */
TEST(crc_fpdu_placed_only_when_complete)
{
	static struct kend k;
	static uint8_t w[4000], out[8192];
	size_t n;

	ASSERT_EQ(kend_init(&k), 0);
	raw_plain_connect(kwt_fail, &k, true);
	if (*kwt_fail)
		goto out;
	memset(k.buf, 0xaa, KBUF);
	fill(w, sizeof(w), 1);
	n = write_fpdu(&k, w, sizeof(w), 0, out);
	ASSERT_EQ(n, kw_mpa_fpdu_len(14 + sizeof(w)));
	ASSERT_EQ(writen(k.raw.fd, out, n - 10), 0);
	usleep(300 * 1000);
	EXPECT_TRUE(all_bytes(k.buf, 0xaa, KBUF));	/* nothing yet */
	ASSERT_EQ(writen(k.raw.fd, out + n - 10, 10), 0);
	EXPECT_TRUE(wait_bytes(k.buf, w, sizeof(w), 5));
	EXPECT_TRUE(all_bytes(k.buf + sizeof(w), 0xaa, KBUF - sizeof(w)));
out:
	kend_fini(&k);
}

/*
 * The attack RFC 5044 section 6 guards against: a header corrupted in
 * flight (here its TO, 8 KiB further into the same buffer) with the CRC
 * computed over the original. Before, the payload was copied to the wrong
 * place as it streamed in and the CRC error came after. Now nothing of it
 * is placed anywhere, and the peer gets MPA's CRC error (2/0/2).
 */
TEST(crc_corrupted_header_places_nothing)
{
	static struct kend k;
	static struct rp_sink s;
	static uint8_t w[4000], out[8192];
	size_t n;

	ASSERT_EQ(kend_init(&k), 0);
	raw_plain_connect(kwt_fail, &k, true);
	if (*kwt_fail)
		goto out;
	memset(k.buf, 0xaa, KBUF);
	fill(w, sizeof(w), 2);
	n = write_fpdu(&k, w, sizeof(w), 0, out);
	ASSERT_GT(n, 0);
	/* TO: MPA length 2, DDP and RDMAP control 2, STag 4 */
	put_unaligned_be64((uintptr_t)k.buf + 8192, out + 8);
	ASSERT_EQ(writen(k.raw.fd, out, 2 + 14 + 1000), 0);
	usleep(300 * 1000);
	EXPECT_TRUE(all_bytes(k.buf, 0xaa, KBUF));
	ASSERT_EQ(writen(k.raw.fd, out + 2 + 14 + 1000, n - 2 - 14 - 1000), 0);
	raw_expect_term(kwt_fail, &k, &s, true, KW_TERM_LAYER_LLP,
			KW_TERM_LLP_ETYPE_MPA, KW_TERM_LLP_CRC);
	ASSERT_TRUE(s.got_term);
	EXPECT_FALSE(s.term.has_ddp_hdr);
	EXPECT_TRUE(all_bytes(k.buf, 0xaa, KBUF));
out:
	kend_fini(&k);
}

/*
 * The smallest FPDU there is (ULPDU length 0, 8 bytes) with a good CRC:
 * too short for any DDP header. kiwarp checks its CRC, then the parser
 * stops inside it with DDP's catastrophic error (1/0/0) instead of
 * reading the next FPDU's bytes as the rest of its header; the valid
 * Write behind it places nothing.
 */
TEST(crc_fpdu_shorter_than_ddp_header)
{
	static struct kend k;
	static struct rp_sink s;
	static uint8_t w[100], out[512];
	uint8_t tiny[8] = { 0, 0, 0x41, 0x43 };
	size_t n;
	uint32_t crc;

	ASSERT_EQ(kend_init(&k), 0);
	raw_plain_connect(kwt_fail, &k, true);
	if (*kwt_fail)
		goto out;
	memset(k.buf, 0xaa, KBUF);
	crc = kw_mpa_crc_update(kw_mpa_crc_init(), tiny, 4);
	kw_mpa_crc_put(crc, tiny + 4);
	memcpy(out, tiny, sizeof(tiny));
	fill(w, sizeof(w), 5);
	n = write_fpdu(&k, w, sizeof(w), 0, out + sizeof(tiny));
	ASSERT_GT(n, 0);
	ASSERT_EQ(writen(k.raw.fd, out, sizeof(tiny) + n), 0);
	raw_expect_term(kwt_fail, &k, &s, true, KW_TERM_LAYER_DDP,
			0, 0);
	ASSERT_TRUE(s.got_term);
	EXPECT_TRUE(all_bytes(k.buf, 0xaa, KBUF));
out:
	kend_fini(&k);
}

/*
 * Holding each FPDU until it is complete must not stall a connection
 * whose FPDUs are as large as they come: kiwarp's socket starts with a
 * 4 KiB SO_RCVBUF (window scale 0) and the peer sends FPDUs of the
 * largest ULPDU (65535 bytes), each placeable only once all of it is
 * queued.
 */
TEST(crc_large_fpdus_small_rcvbuf)
{
	static struct kend k;
	static uint8_t w[65535 - 14], out[KW_MPA_FPDU_MAX];
	unsigned int i;
	size_t n;

	ASSERT_EQ(kend_init_buf(&k, 4096), 0);
	raw_plain_connect(kwt_fail, &k, true);
	if (*kwt_fail)
		goto out;
	for (i = 0; i < 8; i++) {
		fill(w, sizeof(w), 10 + i);
		n = write_fpdu(&k, w, sizeof(w), 0, out);
		ASSERT_EQ(n, kw_mpa_fpdu_len(14 + sizeof(w)));
		ASSERT_EQ(writen(k.raw.fd, out, n), 0);
		ASSERT_TRUE(wait_bytes(k.buf, w, sizeof(w), 10));
	}
out:
	kend_fini(&k);
}

/*
 * RFC 5042 section 6.2.2: once revocation returns, the rest of a tagged
 * FPDU already being placed writes nothing more. Without CRC kiwarp
 * places as the bytes arrive: the first 1000 payload bytes land, then the
 * ULP invalidates the STag (Local Invalidate, or deregistration), then the
 * rest of the FPDU arrives: none of it is placed and the peer gets
 * "invalid STag" (DDP tagged, 1/1/0).
 */
static void revoke_mid_fpdu(int *kwt_fail, bool dereg)
{
	static struct kend k;
	static struct rp_sink s;
	static uint8_t w[4000], out[8192];
	struct kw_send_wr li = { .wr_id = 7, .opcode = KIWARP_WR_LOCAL_INV,
				 .flags = KW_SEND_SIGNALED };
	struct kiwarp_cqe cqe;
	size_t n, first = 2 + 14 + 1000;

	ASSERT_EQ(kend_init(&k), 0);
	raw_plain_connect(kwt_fail, &k, false);
	if (*kwt_fail)
		goto out;
	/* one whole FPDU first lifts the responder's fence (RFC 5044
	 * section 7.1.2), which holds the SQ and so the Local Invalidate */
	ASSERT_EQ(rp_send_rtr(&k.raw, KW_OP_WRITE), 0);
	memset(k.buf, 0xaa, KBUF);
	fill(w, sizeof(w), 3);
	n = write_fpdu(&k, w, sizeof(w), 0, out);
	ASSERT_GT(n, first);
	ASSERT_EQ(writen(k.raw.fd, out, first), 0);
	ASSERT_TRUE(wait_bytes(k.buf, w, 1000, 5));
	if (dereg) {
		ASSERT_EQ(kw_dereg_mr(k.mr), 0);
		k.mr = NULL;
	} else {
		li.inv_stag = k.mr->stag;
		ASSERT_EQ(kw_post_send(k.qp, &li, 1), 1);
		ASSERT_EQ(cq_wait_one(k.cq, &cqe, 5), 0);
		EXPECT_EQ(cqe.wr_id, 7);
		EXPECT_EQ(cqe.status, KIWARP_WC_SUCCESS);
	}
	ASSERT_EQ(writen(k.raw.fd, out + first, n - first), 0);
	raw_expect_term(kwt_fail, &k, &s, false, KW_TERM_LAYER_DDP,
			KW_TERM_DDP_ETYPE_TAGGED, KW_TERM_DDP_T_INV_STAG);
	ASSERT_TRUE(s.got_term);
	EXPECT_TRUE(all_bytes(k.buf + 1000, 0xaa, KBUF - 1000));
out:
	kend_fini(&k);
}

TEST(local_invalidate_mid_fpdu) { revoke_mid_fpdu(kwt_fail, false); }
TEST(dereg_mid_fpdu) { revoke_mid_fpdu(kwt_fail, true); }

/* ------------------------------------------------------------ MULPDU */

static int set_lo_mtu(int mtu)
{
	struct ifreq ifr = { .ifr_mtu = mtu };
	int fd = socket(AF_INET, SOCK_DGRAM, 0), ret;

	if (fd < 0)
		return -errno;
	strcpy(ifr.ifr_name, "lo");
	ret = ioctl(fd, SIOCSIFMTU, &ifr) ? -errno : 0;
	close(fd);
	return ret;
}

/*
 * Read one whole message's FPDUs (CRC off) from the raw socket; *max gets
 * the largest ULPDU length. Returns the DDP opcode byte of the last FPDU
 * or -1.
 */
static int raw_read_msg(struct kend *k, unsigned int *max)
{
	static uint8_t b[70000];
	uint16_t ulpdu;

	*max = 0;
	for (;;) {
		if (readn(k->raw.fd, b, 2, 5000))
			return -1;
		ulpdu = get_unaligned_be16(b);
		if (readn(k->raw.fd, b + 2, ulpdu + kw_mpa_pad(ulpdu) + 4, 5000))
			return -1;
		if (ulpdu > *max)
			*max = ulpdu;
		if (b[2] & KW_DDP_FLAG_LAST)
			return b[3] & KW_RDMAP_OPCODE_MASK;
	}
}

/*
 * RFC 5044 section 4.5: "If the TCP implementation needs to adjust EMSS to
 * support MTU changes or changing TCP options, the MULPDU value is changed
 * accordingly." The loopback MTU drops from 64 KiB to 1500 in the middle
 * of a connection: kiwarp's FPDUs shrink to fit the new EMSS (from the
 * message after the one during which TCP learnt of it), and QUERY_QP
 * says so.
 */
static void mulpdu_follows_emss_body(int *kwt_fail)
{
	static struct kend k;
	struct kiwarp_sge sge;
	struct kw_send_wr wr = { .opcode = KIWARP_WR_RDMA_WRITE,
				 .num_sge = 1, .sg_list = &sge, .rkey = 0x99 };
	struct kiwarp_query_qp q;
	unsigned int max, i;

	ASSERT_EQ(kend_init(&k), 0);
	raw_plain_connect(kwt_fail, &k, false);
	if (*kwt_fail)
		goto out;
	ASSERT_EQ(rp_send_rtr(&k.raw, KW_OP_WRITE), 0);	/* unfence */
	sge = (struct kiwarp_sge){ (uintptr_t)k.buf, 60000, k.mr->stag };
	ASSERT_EQ(kw_post_send(k.qp, &wr, 1), 1);
	ASSERT_EQ(raw_read_msg(&k, &max), KW_OP_WRITE);
	EXPECT_GT(max, 8000);
	ASSERT_EQ(set_lo_mtu(1500), 0);
	/* the first message after the change teaches TCP the new MSS */
	for (i = 0; i < 2; i++) {
		ASSERT_EQ(kw_post_send(k.qp, &wr, 1), 1);
		ASSERT_EQ(raw_read_msg(&k, &max), KW_OP_WRITE);
	}
	/* EMSS 1500 - 20 - 20 - 12 (timestamps) = 1448: MULPDU 1442 */
	EXPECT_LE(max, 1448 - 6);
	EXPECT_GE(max, 128);
	ASSERT_EQ(kw_query_qp(k.qp, &q), 0);
	EXPECT_EQ(q.mulpdu, max);
	ASSERT_EQ(set_lo_mtu(65536), 0);
	ASSERT_EQ(kw_post_send(k.qp, &wr, 1), 1);
	ASSERT_EQ(raw_read_msg(&k, &max), KW_OP_WRITE);
	ASSERT_EQ(kw_post_send(k.qp, &wr, 1), 1);
	ASSERT_EQ(raw_read_msg(&k, &max), KW_OP_WRITE);
	EXPECT_GT(max, 8000);	/* back up, to the MULPDU of the start */
out:
	kend_fini(&k);
}

TEST(mulpdu_follows_emss)
{
	mulpdu_follows_emss_body(kwt_fail);
	/* an ASSERT returns early: the later tests need lo's MTU back */
	EXPECT_EQ(set_lo_mtu(65536), 0);
}

/* ------------------------------------------------------------ half-close */

static bool never(const struct rp_sink *s)
{
	(void)s;
	return false;
}

/*
 * RFC 5041 section 6.2.1: on the peer's FIN, DDP "SHOULD ... continue to
 * process outbound data transfer requests normally". The peer sends eight
 * 64 KiB Read Requests and closes its half in the same write: kiwarp still
 * sends all eight Read Responses (with the right bytes) and the Send its
 * ULP posted, then closes its own half and the QP ends in ERROR. What can
 * no longer complete is flushed: the posted receive (which is how the ULP
 * learns of the FIN), and a Read posted after it, which never goes out.
 */
TEST(half_close_serves_read_responses)
{
	enum { NR = 8, SZ = KBUF };
	static struct kend k;
	static struct rp_sink s;
	static uint8_t mem[SZ], want[SZ];
	struct kiwarp_sge sge;
	struct kw_recv_wr rw = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 };
	struct kw_send_wr wr = { .flags = KW_SEND_SIGNALED, .num_sge = 1,
				 .sg_list = &sge };
	uint8_t rr[KW_READ_REQ_LEN], out[NR * 64], *p = out;
	struct kiwarp_query_qp q;
	struct kiwarp_cqe e;
	struct kw_tx_msg m;
	struct kw_rx rx;
	unsigned int i, n, resp = 0, sends = 0;
	int sent = -1, read = -1, small = 4096, big = 1 << 20;

	ASSERT_EQ(kend_init(&k), 0);
	raw_plain_connect(kwt_fail, &k, false);
	if (*kwt_fail)
		goto out;
	sge = (struct kiwarp_sge){ (uintptr_t)k.buf, 16, k.mr->stag };
	ASSERT_EQ(kw_post_recv(k.qp, &rw, 1), 1);
	ASSERT_EQ(rp_send_rtr(&k.raw, KW_OP_WRITE), 0);	/* unfence */
	/* the peer reads nothing until the end and has a small receive
	 * buffer: most Read Responses are still owed when the FIN is in */
	ASSERT_EQ(setsockopt(k.raw.fd, SOL_SOCKET, SO_RCVBUF, &small,
			     sizeof(small)), 0);
	wr.wr_id = 3;
	wr.opcode = KIWARP_WR_SEND;
	ASSERT_EQ(kw_post_send(k.qp, &wr, 1), 1);
	fill(k.buf, SZ, 9);
	memcpy(want, k.buf, SZ);
	for (i = 0; i < NR; i++) {
		struct kw_read_req r = { .sink_stag = 0x55, .sink_to = 0,
					 .src_stag = k.mr->stag,
					 .src_to = (uintptr_t)k.buf,
					 .size = SZ };

		kw_read_req_encode(&r, rr);
		m = (struct kw_tx_msg){ .opcode = KW_OP_READ_REQ,
					.qn = KW_QN_READ_REQ, .msn = i + 1,
					.inline_data = rr,
					.inline_len = KW_READ_REQ_LEN };
		p = rp_build(&k.raw, &m, rr, p);
		ASSERT_NE(p, NULL);
	}
	/* all the requests and the FIN in one go */
	ASSERT_EQ(writen(k.raw.fd, out, p - out), 0);
	ASSERT_EQ(shutdown(k.raw.fd, SHUT_WR), 0);
	ASSERT_EQ(cq_wait_one(k.cq, &e, 10), 0);
	if (e.wr_id == 3) {		/* the Send may complete first */
		sent = e.status;
		ASSERT_EQ(cq_wait_one(k.cq, &e, 10), 0);
	}
	EXPECT_EQ(e.wr_id, 1);
	EXPECT_EQ(e.status, KIWARP_WC_WR_FLUSH_ERR);
	wr.wr_id = 2;
	wr.opcode = KIWARP_WR_RDMA_READ;
	wr.rkey = 0x66;
	wr.remote_addr = 0;
	EXPECT_EQ(kw_post_send(k.qp, &wr, 1), 1);
	/* the FIN is in: now the peer takes everything, fast */
	ASSERT_EQ(setsockopt(k.raw.fd, SOL_SOCKET, SO_RCVBUF, &big,
			     sizeof(big)), 0);
	memset(&s, 0, sizeof(s));
	s.mem = mem;
	s.mem_len = sizeof(mem);
	kw_rx_init(&rx, &rp_sink_ops, &s, false, 0);
	rp_read(&k.raw, &rx, &s, 20, never);	/* until kiwarp's FIN */
	EXPECT_FALSE(kw_rx_failed(&rx));
	EXPECT_FALSE(s.got_term);
	ASSERT_EQ(s.n, NR + 1);
	for (i = 0; i < s.n; i++) {
		/* (len is the last segment's for a tagged message) */
		resp += s.msg[i].opcode == KW_OP_READ_RESP;
		sends += s.msg[i].opcode == KW_OP_SEND;
	}
	EXPECT_EQ(resp, NR);
	EXPECT_EQ(sends, 1);
	EXPECT_EQ(s.placed, NR * SZ + 16);
	EXPECT_MEMEQ(mem, want, SZ);
	for (n = 0; n < 2 && !cq_wait_one(k.cq, &e, 5); n++) {
		if (e.wr_id == 2)
			read = e.status;
		if (e.wr_id == 3)
			sent = e.status;
	}
	EXPECT_EQ(read, KIWARP_WC_WR_FLUSH_ERR);
	EXPECT_EQ(sent, KIWARP_WC_SUCCESS);
	/* kiwarp closed its half: the QP ends in ERROR */
	qp_wait_error(k.qp, &q, 5);
	EXPECT_EQ(q.state, KIWARP_QPS_ERROR);
out:
	kend_fini(&k);
}

/*
 * A FIN in the middle of a message is no half-close: the stream ended
 * short and the QP goes to ERROR, so a Send posted then is flushed rather
 * than sent.
 */
TEST(fin_mid_message_is_an_error)
{
	static struct kend k;
	static uint8_t a[3000], out[8192];
	struct kiwarp_sge sge;
	struct kw_recv_wr rw = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 };
	struct kw_send_wr wr = { .wr_id = 2, .opcode = KIWARP_WR_SEND,
				 .flags = KW_SEND_SIGNALED, .num_sge = 1,
				 .sg_list = &sge };
	struct kiwarp_query_qp q;
	struct kiwarp_cqe e;
	struct kw_tx_msg m;

	ASSERT_EQ(kend_init(&k), 0);
	raw_plain_connect(kwt_fail, &k, false);
	if (*kwt_fail)
		goto out;
	sge = (struct kiwarp_sge){ (uintptr_t)k.buf, sizeof(a), k.mr->stag };
	ASSERT_EQ(kw_post_recv(k.qp, &rw, 1), 1);
	ASSERT_EQ(rp_send_rtr(&k.raw, KW_OP_WRITE), 0);	/* unfence */
	/* a Send in three FPDUs, of which only the first goes */
	m = (struct kw_tx_msg){ .opcode = KW_OP_SEND, .qn = KW_QN_SEND,
				.msn = 1, .len = sizeof(a), .mulpdu = 1448 };
	ASSERT_NE(rp_build(&k.raw, &m, a, out), NULL);
	ASSERT_EQ(writen(k.raw.fd, out, kw_mpa_fpdu_len(1448)), 0);
	ASSERT_EQ(shutdown(k.raw.fd, SHUT_WR), 0);
	ASSERT_EQ(cq_wait_one(k.cq, &e, 10), 0);
	EXPECT_EQ(e.wr_id, 1);
	EXPECT_EQ(e.status, KIWARP_WC_WR_FLUSH_ERR);
	ASSERT_EQ(kw_query_qp(k.qp, &q), 0);
	EXPECT_EQ(q.state, KIWARP_QPS_ERROR);
	kw_post_send(k.qp, &wr, 1);
	ASSERT_EQ(cq_wait_one(k.cq, &e, 5), 0);
	EXPECT_EQ(e.wr_id, 2);
	EXPECT_EQ(e.status, KIWARP_WC_WR_FLUSH_ERR);
out:
	kend_fini(&k);
}

/* ------------------------------------------------------- Read Responses */

/*
 * kiwarp Reads 3000 bytes from the raw peer, which answers with the
 * Response segments in seg (TO offsets from the sink and lengths, the last
 * one with L). RFC 5040 section 5.2.2 lets the Data Sink check that the
 * Response matches the Request in STag, TO and length: kiwarp does, so a
 * Response that leaves part of the sink unwritten (short, or with a gap)
 * gets Terminate 1/1/1 (DDP tagged base/bounds, as siw) and the Read does
 * not complete successfully.
 */
static void read_response(int *kwt_fail, const uint32_t (*seg)[2],
			  unsigned int nseg, bool good)
{
	enum { N = 3000 };
	static struct kend k;
	static struct rp_sink s;
	static uint8_t a[N];
	struct kiwarp_sge sge;
	struct kw_send_wr wr = { .wr_id = 5, .opcode = KIWARP_WR_RDMA_READ,
				 .flags = KW_SEND_SIGNALED, .num_sge = 1,
				 .sg_list = &sge, .rkey = 0x66,
				 .remote_addr = 0 };
	struct kiwarp_cqe e;
	struct kw_tx_msg m;
	struct kw_rx rx;
	unsigned int i;

	ASSERT_EQ(kend_init(&k), 0);
	raw_plain_connect(kwt_fail, &k, false);
	if (*kwt_fail)
		goto out;
	ASSERT_EQ(rp_send_rtr(&k.raw, KW_OP_WRITE), 0);	/* unfence */
	memset(k.buf, 0xaa, KBUF);
	sge = (struct kiwarp_sge){ (uintptr_t)k.buf, N, k.mr->stag };
	ASSERT_EQ(kw_post_send(k.qp, &wr, 1), 1);
	memset(&s, 0, sizeof(s));
	kw_rx_init(&rx, &rp_sink_ops, &s, false, 0);
	want_msgs = 1;
	rp_read(&k.raw, &rx, &s, 10, got_msgs);
	ASSERT_EQ(s.n, 1);
	ASSERT_EQ(s.msg[0].opcode, KW_OP_READ_REQ);
	fill(a, N, 6);
	for (i = 0; i < nseg; i++) {
		m = (struct kw_tx_msg){ .opcode = KW_OP_READ_RESP,
					.len = seg[i][1], .stag = k.mr->stag,
					.to = (uintptr_t)k.buf + seg[i][0],
					.mulpdu = 4000 };
		/* one FPDU each; L only on the last */
		uint8_t out[4100];
		struct kw_tx_fpdu f;
		uint32_t off = 0;

		rp_msg_init(&k.raw, &m);
		ASSERT_EQ(rp_fpdu(&m, &off, a + seg[i][0], &f), 0);
		if (i + 1 < nseg)
			f.hdr[2] &= ~KW_DDP_FLAG_LAST;
		memcpy(out, f.hdr, f.hdr_len);
		memcpy(out + f.hdr_len, a + seg[i][0], f.payload_len);
		memcpy(out + f.hdr_len + f.payload_len, f.trailer,
		       f.trailer_len);
		ASSERT_EQ(writen(k.raw.fd, out, f.hdr_len + f.payload_len +
				 f.trailer_len), 0);
	}
	ASSERT_EQ(cq_wait_one(k.cq, &e, 10), 0);
	EXPECT_EQ(e.wr_id, 5);
	if (good) {
		EXPECT_EQ(e.status, KIWARP_WC_SUCCESS);
		EXPECT_EQ(e.byte_len, N);
		EXPECT_MEMEQ(k.buf, a, N);
		goto out;
	}
	EXPECT_NE(e.status, KIWARP_WC_SUCCESS);
	rp_read(&k.raw, &rx, &s, 10, NULL);
	ASSERT_TRUE(s.got_term);
	EXPECT_EQ(s.term.layer, KW_TERM_LAYER_DDP);
	EXPECT_EQ(s.term.etype, KW_TERM_DDP_ETYPE_TAGGED);
	EXPECT_EQ(s.term.ecode, KW_TERM_DDP_T_BASE_BOUNDS);
out:
	kend_fini(&k);
}

TEST(read_response_in_two_segments)
{
	static const uint32_t seg[][2] = { { 0, 1000 }, { 1000, 2000 } };

	read_response(kwt_fail, seg, 2, true);
}

TEST(read_response_short)
{
	static const uint32_t seg[][2] = { { 0, 2000 } };

	read_response(kwt_fail, seg, 1, false);
}

TEST(read_response_with_a_gap)
{
	static const uint32_t seg[][2] = { { 0, 1000 }, { 1500, 1500 } };

	read_response(kwt_fail, seg, 2, false);
}

/*
 * An orderly close of a responder that never heard from the initiator:
 * RFC 5044 section 7.1.2 rule 4 keeps it from sending anything, so there
 * is nothing to drain. KIWARP_MODIFY_CLOSE ends it at once (it used to
 * wait for a first FPDU that might never come): the QP reaches ERROR, the
 * Send posted early is flushed, and the peer gets the close, not a byte.
 */
TEST(close_while_fenced)
{
	static struct kend k;
	struct kiwarp_sge sge;
	struct kw_send_wr wr = { .wr_id = 9, .opcode = KIWARP_WR_SEND,
				 .flags = KW_SEND_SIGNALED, .num_sge = 1,
				 .sg_list = &sge };
	struct kiwarp_query_qp q;
	struct kiwarp_cqe e;
	uint8_t b[16];

	ASSERT_EQ(kend_init(&k), 0);
	raw_plain_connect(kwt_fail, &k, false);
	if (*kwt_fail)
		goto out;
	sge = (struct kiwarp_sge){ (uintptr_t)k.buf, 16, k.mr->stag };
	ASSERT_EQ(kw_post_send(k.qp, &wr, 1), 1);
	ASSERT_EQ(kw_modify_qp(k.qp, KIWARP_MODIFY_CLOSE), 0);
	ASSERT_EQ(cq_wait_one(k.cq, &e, 10), 0);
	EXPECT_EQ(e.wr_id, 9);
	EXPECT_EQ(e.status, KIWARP_WC_WR_FLUSH_ERR);
	ASSERT_EQ(kw_query_qp(k.qp, &q), 0);
	EXPECT_EQ(q.state, KIWARP_QPS_ERROR);
	EXPECT_FALSE(q.term_sent.valid);
	/* not a byte before the close */
	EXPECT_EQ(readn(k.raw.fd, b, 1, 5000), -ECONNRESET);
out:
	kend_fini(&k);
}

/*
 * TCP urgent data (MSG_OOB) has no meaning in MPA, and the kernel's
 * tcp_read_sock() never reads past it: the stream would stall for good
 * with the QP still in RTS. kiwarp ends the connection instead.
 */
TEST(urgent_data_ends_the_stream)
{
	static struct kend k;
	struct kiwarp_query_qp q;

	ASSERT_EQ(kend_init(&k), 0);
	raw_plain_connect(kwt_fail, &k, false);
	if (*kwt_fail)
		goto out;
	ASSERT_EQ(rp_send_rtr(&k.raw, KW_OP_WRITE), 0);
	ASSERT_EQ(send(k.raw.fd, "!", 1, MSG_OOB), 1);
	qp_wait_error(k.qp, &q, 5);
	EXPECT_EQ(q.state, KIWARP_QPS_ERROR);
out:
	kend_fini(&k);
}

/*
 * A local error on a responder that has not received an FPDU yet: RFC
 * 5040 section 7.1 would send a Terminate instead of the request, but RFC
 * 5044 section 7.1.2 rule 4 forbids any FPDU before one came in (cxgb4
 * resets a connection whose first FPDU follows the Reply). kiwarp sends
 * nothing: the bad WR fails, the QP goes to ERROR and the close is all
 * the peer gets.
 */
TEST(local_error_while_fenced_sends_nothing)
{
	static struct kend k;
	struct kiwarp_sge sge = { 0, 16, 0x7fff00 };	/* no such lkey */
	struct kw_send_wr wr = { .wr_id = 4, .opcode = KIWARP_WR_SEND,
				 .flags = KW_SEND_SIGNALED, .num_sge = 1,
				 .sg_list = &sge };
	struct kiwarp_query_qp q;
	struct kiwarp_cqe e;
	uint8_t b[16];

	ASSERT_EQ(kend_init(&k), 0);
	raw_plain_connect(kwt_fail, &k, false);
	if (*kwt_fail)
		goto out;
	sge.addr = (uintptr_t)k.buf;
	ASSERT_EQ(kw_post_send(k.qp, &wr, 1), 1);
	ASSERT_EQ(cq_wait_one(k.cq, &e, 10), 0);
	EXPECT_EQ(e.wr_id, 4);
	EXPECT_EQ(e.status, KIWARP_WC_LOC_PROT_ERR);
	qp_wait_error(k.qp, &q, 5);
	EXPECT_EQ(q.state, KIWARP_QPS_ERROR);
	EXPECT_FALSE(q.term_sent.valid);
	EXPECT_EQ(readn(k.raw.fd, b, 1, 5000), -ECONNRESET);
out:
	kend_fini(&k);
}

/*
 * A FIN that comes during the MPA exchange, before kiwarp's socket
 * callbacks are in place, still counts: TCP told the socket's old
 * state_change. Responder: the FIN follows the Request, before the ULP
 * accepts it (ACCEPT itself on a socket that has the FIN already is
 * -ENOTCONN); kiwarp has nothing it may send (fenced), and the QP ends in
 * ERROR with its receive flushed instead of waiting in RTS for good.
 */
TEST(fin_with_the_request)
{
	static struct kend k;
	struct kw_mpa_cfg cfg = { .rev = 2, .ird = 8, .ord = 8 };
	struct kiwarp_sge sge;
	struct kw_recv_wr rw = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 };
	struct kw_mpa_frame req, rep;
	struct kiwarp_query_qp q;
	uint8_t pd[KW_MPA_MAX_PD];
	struct kiwarp_cqe e;

	ASSERT_EQ(kend_init(&k), 0);
	sge = (struct kiwarp_sge){ (uintptr_t)k.buf, 64, k.mr->stag };
	ASSERT_EQ(kw_post_recv(k.qp, &rw, 1), 1);
	k.param = (struct kw_conn_param){ .mpa_rev = 2,
					  .flags = KIWARP_CONN_NO_CRC };
	kw_mpa_make_request(&cfg, &req);
	ASSERT_EQ(raw_write_frame(&k, &req, 0), 0);
	ASSERT_EQ(kw_accept(k.qp, k.sock, NULL, 5000, &k.req), 0);
	ASSERT_EQ(shutdown(k.raw.fd, SHUT_WR), 0);
	usleep(100 * 1000);	/* the FIN is in before the Reply goes */
	ASSERT_EQ(kw_accept_reply(k.qp, KIWARP_REPLY_ACCEPT, &k.param, NULL,
				  0, &k.res), 0);
	ASSERT_EQ(raw_read_frame(&k, true, &rep, pd), 0);
	ASSERT_EQ(cq_wait_one(k.cq, &e, 10), 0);
	EXPECT_EQ(e.wr_id, 1);
	EXPECT_EQ(e.status, KIWARP_WC_WR_FLUSH_ERR);
	ASSERT_EQ(kw_query_qp(k.qp, &q), 0);
	EXPECT_EQ(q.state, KIWARP_QPS_ERROR);
	kend_fini(&k);
}

/*
 * Initiator side: the Reply (P2P, Read RTR) and the FIN in one go. After
 * the peer's FIN kiwarp sends no RTR (a Read RTR could never be answered
 * and would hold the close for good): the half-close finishes, kiwarp
 * closes its side, the QP ends in ERROR.
 */
TEST(fin_with_the_reply)
{
	static struct kend k;
	struct kw_mpa_frame req, rep = { .reply = true, .rev = 2,
		.enhanced = true, .p2p = true, .rtr = KW_RTR_READ,
		.ird = 4, .ord = 4 };
	struct kiwarp_query_qp q;
	uint8_t pd[KW_MPA_MAX_PD];
	pthread_t t;

	ASSERT_EQ(kend_init(&k), 0);
	k.param = (struct kw_conn_param){ .mpa_rev = 2,
		.flags = KIWARP_CONN_P2P | KIWARP_CONN_NO_CRC,
		.rtr = KIWARP_RTR_READ };
	ASSERT_EQ(pthread_create(&t, NULL, k_connect, &k), 0);
	ASSERT_EQ(raw_read_frame(&k, false, &req, pd), 0);
	ASSERT_EQ(raw_write_frame(&k, &rep, 0), 0);
	ASSERT_EQ(shutdown(k.raw.fd, SHUT_WR), 0);
	pthread_join(t, NULL);
	ASSERT_EQ(k.ret, 0);
	qp_wait_error(k.qp, &q, 5);
	EXPECT_EQ(q.state, KIWARP_QPS_ERROR);
	kend_fini(&k);
}

/* --- MPA markers (RFC 5044 section 5) ---------------------------------- */

/* The raw peer asks for markers (or not) and kiwarp's ULP for its own. */
static void markers_connect(int *kwt_fail, struct kend *k, bool raw_wants,
			    bool kw_wants, struct kw_mpa_result *res)
{
	struct kw_mpa_cfg cfg = { .rev = 2, .crc = true, .ird = 8, .ord = 8,
				  .markers = raw_wants };
	struct kw_mpa_frame req, rep;
	uint8_t pd[KW_MPA_MAX_PD];

	ASSERT_EQ(kend_init(k), 0);
	k->param = (struct kw_conn_param){ .mpa_rev = 2,
		.flags = kw_wants ? KIWARP_CONN_MARKERS : 0 };
	kw_mpa_make_request(&cfg, &req);
	ASSERT_EQ(raw_request(k, k_accept, &req, &rep, pd), 0);
	ASSERT_EQ(k->ret, 0);
	EXPECT_FALSE(rep.reject);
	EXPECT_EQ(rep.markers, kw_wants);
	ASSERT_EQ(kw_mpa_negotiate_initiator(&cfg, &rep, res), 0);
	EXPECT_EQ(!!(k->req.param.flags & KIWARP_CONN_MARKERS_TX), raw_wants);
	EXPECT_EQ(!!(k->res.param.flags & KIWARP_CONN_MARKERS_TX), raw_wants);
	EXPECT_EQ(!!(k->res.param.flags & KIWARP_CONN_MARKERS), kw_wants);
	k->raw.crc = res->crc;
}

/*
 * Markers in kiwarp's FPDUs, checked on the raw bytes octet by octet
 * (walk_marked(), not the core's parser): from the first octet after
 * kiwarp's Reply every octet at a multiple of 512 in front of FPDU bytes
 * is a marker, FPDUPTR back to its FPDU's first octet, covered by the
 * CRC. Sends whose FPDUs end just before, on and after marker positions;
 * then the core's parser (markers on) takes the same bytes.
 */
TEST(markers_in_kiwarp_stream_where_the_rfc_puts_them)
{
	static const uint32_t lens[] = { 0, 1, 490, 503, 504, 505, 506, 507,
					 508, 509, 1020, 3000, 20000 };
	static struct kend k;
	static struct rp_sink s;
	static uint8_t w[256 * 1024];
	struct kw_tx_msg m = { .opcode = KW_OP_WRITE, .len = 4 };
	struct kw_mpa_result res;
	struct kiwarp_cqe cqe;
	unsigned int nf = 0, nm = 0, i, nlens = sizeof(lens) / sizeof(lens[0]);
	size_t got = 0;
	long ok = 0;
	double end;
	struct kw_rx rx;

	markers_connect(kwt_fail, &k, true, false, &res);
	/* the initiator's first FPDU unfences kiwarp (no markers this way) */
	m.stag = k.mr->stag;
	m.to = (uintptr_t)k.buf;
	ASSERT_EQ(rp_send(&k.raw, &m, (const uint8_t *)"abcd", 0), 0);
	for (i = 0; i < nlens; i++) {
		struct kiwarp_sge sge = { (uintptr_t)k.buf, lens[i], k.mr->stag };
		struct kw_send_wr wr = { .wr_id = i, .opcode = KIWARP_WR_SEND,
					 .flags = KW_SEND_SIGNALED,
					 .num_sge = 1, .sg_list = &sge };

		ASSERT_EQ(kw_post_send(k.qp, &wr, 1), 1);
		while (kw_poll_cq(k.cq, 1, &cqe) == 0)
			kw_wait_cq(k.cq, 100);
		ASSERT_EQ(cqe.status, KIWARP_WC_SUCCESS);
	}
	end = now() + 10;
	while (nf < nlens && now() < end) {
		struct pollfd pfd = { .fd = k.raw.fd, .events = POLLIN };
		ssize_t n;

		if (poll(&pfd, 1, 200) != 1)
			continue;
		n = read(k.raw.fd, w + got, sizeof(w) - got);
		ASSERT_TRUE(n > 0);
		got += n;
		ok = walk_marked(w, got, true, &nf, &nm);
		ASSERT_TRUE(ok >= 0);
	}
	note("%u FPDUs, %u markers in %zu bytes", nf, nm, got);
	ASSERT_EQ(nf, nlens);
	EXPECT_EQ((size_t)ok, got);
	EXPECT_EQ(nm, (got + 511) / 512);	/* one at every 512, 0 too */

	memset(&s, 0, sizeof(s));
	kw_rx_init(&rx, &rp_sink_ops, &s, res.crc, 0);
	kw_rx_set_markers(&rx);
	EXPECT_EQ(kw_rx_input(&rx, w, got), got);
	EXPECT_FALSE(kw_rx_failed(&rx));
	ASSERT_EQ(s.n, nlens);
	for (i = 0; i < nlens; i++)
		EXPECT_EQ(s.msg[i].len, lens[i]);
	kend_fini(&k);
}

/*
 * kiwarp asks for markers: the raw peer's Writes carry them (put in by
 * mark_stream(), the test's own inserter) and land where they should;
 * a marker whose FPDUPTR is off by 4 then gets the Terminate "Marker and
 * ULPDU pointers not consistent" (LLP / MPA / 0x03) and nothing of its
 * FPDU is placed, although its CRC is good.
 */
TEST(markers_from_the_peer_checked_before_placement)
{
	static struct kend k;
	static struct rp_sink s;
	static uint8_t plain[16384], w[20000], pl[8000];
	struct kw_tx_msg m = { .opcode = KW_OP_WRITE };
	struct kw_mpa_result res;
	uint8_t *e;
	size_t n, mw, pos;
	unsigned int i;

	for (i = 0; i < sizeof(pl); i++)
		pl[i] = (uint8_t)(i * 7 + 3);
	markers_connect(kwt_fail, &k, false, true, &res);
	EXPECT_TRUE(res.markers_tx);
	/* two Writes, FPDUs of 1000 bytes, with markers from position 0 */
	m.stag = k.mr->stag;
	m.to = (uintptr_t)k.buf;
	m.len = 3000;
	m.mulpdu = 1000;
	e = rp_build(&k.raw, &m, pl, plain);
	ASSERT_TRUE(e != NULL);
	m.to = (uintptr_t)k.buf + 5000;
	m.len = 700;
	e = rp_build(&k.raw, &m, pl + 3000, e);
	ASSERT_TRUE(e != NULL);
	n = e - plain;
	mw = mark_stream(plain, n, 0, w, res.crc, -1, 0);
	ASSERT_EQ(writen(k.raw.fd, w, mw), 0);
	pos = mw;
	/* then a Write whose second marker points 4 bytes too far back */
	m.to = (uintptr_t)k.buf + 8000;
	m.len = 1500;
	m.mulpdu = 2000;
	e = rp_build(&k.raw, &m, pl, plain);
	ASSERT_TRUE(e != NULL);
	n = e - plain;
	memset(k.buf + 8000, 0xee, 1500);
	/* mark_stream from pos: markers counted from this FPDU on */
	mw = mark_stream(plain, n, pos, w, res.crc, 1, 4);
	ASSERT_EQ(writen(k.raw.fd, w, mw), 0);

	raw_expect_term(kwt_fail, &k, &s, res.crc, KW_TERM_LAYER_LLP,
			KW_TERM_LLP_ETYPE_MPA, KW_TERM_LLP_MARKER);
	ASSERT_TRUE(s.got_term);
	EXPECT_EQ(memcmp(k.buf, pl, 3000), 0);
	EXPECT_EQ(memcmp(k.buf + 5000, pl + 3000, 700), 0);
	for (i = 0; i < 1500; i++)
		if (k.buf[8000 + i] != 0xee)
			break;
	EXPECT_EQ(i, 1500);	/* not a byte of the bad FPDU */
	kend_fini(&k);
}
