// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Hostile-peer tests: run inside the VM with kiwarp.ko loaded.
 *
 * One side is a kiwarp QP (through libkiwarp). The other is a raw TCP
 * endpoint that speaks MPA/DDP/RDMAP with the sans-I/O protocol core built
 * in user space, so it can send exactly the malformed frame each test
 * wants. Each test asserts the Terminate (layer/type/code) that kiwarp puts
 * on the wire, parsed by the same core, the Terminate kiwarp records, and
 * the QP state; the kernel log is scanned by vm-run afterwards.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kiwarp.h"
#include "kw_vmtest.h"
#include "iwarp.h"
#include "kw_rawpeer.h"
#include "../unit/harness.h"

struct kend {
	struct kw_device *dev;
	struct kw_pd *pd;
	struct kw_cq *cq;
	struct kw_qp *qp;
	struct kw_mr *mr;
	uint8_t *buf;
	int sock;		/* kiwarp's socket */
	int raw;		/* the hostile peer's socket */
	struct kw_conn_request req;
	struct kw_conn_result res;
	bool crc;
	bool markers;		/* the raw peer asks for markers (M) */
	uint32_t ird;
	int ret;
};

#define KBUF 65536

static int kend_init(struct kend *k)
{
	struct kw_qp_init_attr a = { 0 };
	int ret;

	if ((ret = kw_open(&k->dev)) || (ret = kw_alloc_pd(k->dev, &k->pd)) ||
	    (ret = kw_create_cq(k->dev, 64, &k->cq)))
		return ret;
	a.send_cq = a.recv_cq = k->cq;
	a.sq_entries = a.rq_entries = 16;
	a.max_sge = 1;
	/*
	 * copy_max given: every Write over it goes by reference, whatever
	 * the local peer's stack does with the pages (a default QP would
	 * copy after the first, KIWARP_QPQ_TX_COPIED)
	 */
	a.flags = KW_QP_INIT_COPY_MAX;
	a.copy_max = KIWARP_COPY_MAX_DEFAULT;
	if ((ret = kw_create_qp(k->pd, &a, &k->qp)))
		return ret;
	k->buf = mmap(NULL, KBUF, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (k->buf == MAP_FAILED)
		return -errno;
	return kw_reg_mr(k->pd, k->buf, KBUF, KIWARP_ACCESS_ALL, &k->mr);
}

static void kend_fini(struct kend *k)
{
	kw_destroy_qp(k->qp);
	kw_dereg_mr(k->mr);
	kw_destroy_cq(k->cq);
	kw_dealloc_pd(k->pd);
	kw_close(k->dev);
	close(k->sock);
	close(k->raw);
}

static void *kaccept(void *arg)
{
	struct kend *k = arg;
	struct kw_conn_param p = { .mpa_rev = 2, .ird = k->ird, .ord = 4,
		.flags = k->crc ? KIWARP_CONN_CRC : KIWARP_CONN_NO_CRC };

	k->ret = kw_accept(k->qp, k->sock, NULL, 5000, &k->req);
	if (!k->ret)
		k->ret = kw_accept_reply(k->qp, KIWARP_REPLY_ACCEPT, &p, NULL,
					 0, &k->res);
	return NULL;
}

/* Raw initiator: MPA rev 2 Request, then read and check the Reply. */
static int raw_connect(struct kend *k)
{
	struct kw_mpa_cfg cfg = { .rev = 2, .crc = k->crc, .ird = 4,
				  .ord = 4, .markers = k->markers };
	struct kw_mpa_frame req, rep;
	struct kw_mpa_result res;
	uint8_t buf[KW_MPA_HDR_LEN + KW_MPA_MAX_PD];
	pthread_t t;
	int len;

	if (tcp_pair(&k->raw, &k->sock))
		return -1;
	/*
	 * Nagle on, as the hostile peer always had (tests that need their
	 * frames in one segment build them and write them at once).
	 */
	setsockopt(k->raw, IPPROTO_TCP, TCP_NODELAY, &(int){ 0 }, sizeof(int));
	pthread_create(&t, NULL, kaccept, k);
	kw_mpa_make_request(&cfg, &req);
	len = kw_mpa_encode(&req, NULL, 0, buf, sizeof(buf));
	if (len < 0 || writen(k->raw, buf, len))
		return -2;
	if (rp_read_frame(k->raw, true, &rep, buf) ||
	    kw_mpa_negotiate_initiator(&cfg, &rep, &res))
		return -3;
	pthread_join(t, NULL);
	return k->ret;
}

/* The raw peer's messages: CRC as negotiated, 1448-byte FPDUs by default. */
static int raw_send(struct kend *k, struct kw_tx_msg *m, const uint8_t *payload,
		    int corrupt)
{
	return rp_send(&(struct rp){ k->raw, k->crc }, m, payload, corrupt);
}

/* What raw_expect_term() read, for tests that check more of it. */
static struct rp_sink term_sink;

/* Read kiwarp's bytes until its Terminate (or 10 s, or EOF). */
static void raw_expect_term(struct kend *k, int layer, int etype, int ecode,
			    int *kwt_fail)
{
	struct rp p = { k->raw, k->crc };
	struct kw_rx rx;

	memset(&term_sink, 0, sizeof(term_sink));
	kw_rx_init(&rx, &rp_sink_ops, &term_sink, k->crc, 0);
	rp_read(&p, &rx, &term_sink, 10, NULL);
	EXPECT_TRUE(term_sink.got_term);
	EXPECT_EQ(term_sink.term.layer, layer);
	EXPECT_EQ(term_sink.term.etype, etype);
	EXPECT_EQ(term_sink.term.ecode, ecode);
}

static void expect_qp_term(struct kend *k, int layer, int etype, int ecode,
			   int *kwt_fail)
{
	struct kiwarp_query_qp q;
	int ret = qp_wait_error(k->qp, &q, 2);

	ASSERT_TRUE(ret == 0 || ret == -ETIMEDOUT);	/* QUERY_QP worked */
	EXPECT_EQ(q.state, KIWARP_QPS_ERROR);
	EXPECT_TRUE(q.term_sent.valid);
	EXPECT_EQ(q.term_sent.layer, layer);
	EXPECT_EQ(q.term_sent.etype, etype);
	EXPECT_EQ(q.term_sent.ecode, ecode);
}

static void setup(struct kend *k, bool crc, int *kwt_fail)
{
	memset(k, 0, sizeof(*k));
	k->crc = crc;
	k->ird = 1;
	ASSERT_EQ(kend_init(k), 0);
	ASSERT_EQ(raw_connect(k), 0);
}

/* Send msg (hdr fields set by caller) and check the Terminate both ways. */
static void case_term(int *kwt_fail, bool crc, struct kw_tx_msg *m,
		      const uint8_t *payload, int corrupt, int patch_off,
		      uint8_t patch_xor, int layer, int etype, int ecode)
{
	static struct kend k;
	static uint8_t pl[KBUF];

	setup(&k, crc, kwt_fail);
	if (patch_off < 0) {
		/* a write may fail once kiwarp has terminated: the Terminate
		 * checks below are what matters */
		raw_send(&k, m, payload ? payload : pl, corrupt);
	} else {
		/* hand-corrupt one header byte (offset from the FPDU start) */
		struct kw_tx_fpdu f;
		uint32_t off = 0, crcv;

		m->crc = crc;
		m->mulpdu = 1448;
		ASSERT_EQ(kw_tx_fpdu_next(m, &off, &f), 0);
		f.hdr[patch_off] ^= patch_xor;
		crcv = kw_mpa_crc_update(kw_mpa_crc_init(), f.hdr, f.hdr_len);
		crcv = kw_mpa_crc_update(crcv, pl + f.payload_off, f.payload_len);
		kw_tx_fpdu_seal(m, &f, crcv);
		ASSERT_EQ(writen(k.raw, f.hdr, f.hdr_len), 0);
		writen(k.raw, pl + f.payload_off, f.payload_len);
		writen(k.raw, f.trailer, f.trailer_len);
	}
	raw_expect_term(&k, layer, etype, ecode, kwt_fail);
	expect_qp_term(&k, layer, etype, ecode, kwt_fail);
	kend_fini(&k);
}

/*
 * A QP gives a handed-in socket back, at destroy, with nothing TCP received
 * for it left to read: with CRC a partial FPDU waits in the socket for its
 * rest, and must be dropped, not read by the fd's owner afterwards. (Such
 * bytes may be pages a kiwarp peer on this host sent by plain reference,
 * KIWARP_QPQ_TX_LOCAL, which its application rewrites once they count as
 * read.)
 */
TEST(destroy_leaves_nothing_to_read_on_the_fd)
{
	static struct kend k;
	static uint8_t pl[KBUF];
	struct kw_tx_msg m = { .opcode = KW_OP_WRITE, .crc = true,
			       .mulpdu = 1448, .len = 1000 };
	struct kw_tx_fpdu f;
	uint32_t off = 0, crcv;
	char got[2048];
	ssize_t n;

	setup(&k, true, kwt_fail);
	m.stag = k.mr->stag;
	m.to = (uintptr_t)k.buf;
	memset(pl, 0x5a, sizeof(pl));
	ASSERT_EQ(kw_tx_fpdu_next(&m, &off, &f), 0);
	crcv = kw_mpa_crc_update(kw_mpa_crc_init(), f.hdr, f.hdr_len);
	crcv = kw_mpa_crc_update(crcv, pl + f.payload_off, f.payload_len);
	kw_tx_fpdu_seal(&m, &f, crcv);
	ASSERT_EQ(writen(k.raw, f.hdr, f.hdr_len), 0);
	ASSERT_EQ(writen(k.raw, pl, f.payload_len / 2), 0);	/* half */
	usleep(300 * 1000);
	ASSERT_EQ(kw_destroy_qp(k.qp), 0);
	n = recv(k.sock, got, sizeof(got), MSG_DONTWAIT);
	printf("# recv() on the fd after destroy: %zd (%s)\n", n,
	       n < 0 ? strerror(errno) : "bytes");
	EXPECT_LE(n, 0);
	kw_dereg_mr(k.mr);
	kw_destroy_cq(k.cq);
	kw_dealloc_pd(k.pd);
	kw_close(k.dev);
	close(k.sock);
	close(k.raw);
}

TEST(bad_crc)
{
	struct kw_tx_msg m = { .opcode = KW_OP_WRITE, .len = 100, .stag = 1 };

	case_term(kwt_fail, true, &m, NULL, 1, -1, 0,
		  KW_TERM_LAYER_LLP, 0, KW_TERM_LLP_CRC);
}

TEST(write_unknown_stag)
{
	struct kw_tx_msg m = { .opcode = KW_OP_WRITE, .len = 100,
			       .stag = 0x12345678 };

	case_term(kwt_fail, false, &m, NULL, 0, -1, 0, KW_TERM_LAYER_DDP,
		  KW_TERM_DDP_ETYPE_TAGGED, KW_TERM_DDP_T_INV_STAG);
}

TEST(send_without_receive)
{
	struct kw_tx_msg m = { .opcode = KW_OP_SEND, .len = 10, .qn = 0,
			       .msn = 1 };

	case_term(kwt_fail, true, &m, NULL, 0, -1, 0, KW_TERM_LAYER_DDP,
		  KW_TERM_DDP_ETYPE_UNTAGGED, KW_TERM_DDP_U_INV_MSN_NOBUF);
}

TEST(unsolicited_read_response)
{
	struct kw_tx_msg m = { .opcode = KW_OP_READ_RESP, .len = 64,
			       .stag = 0x1000 };

	case_term(kwt_fail, false, &m, NULL, 0, -1, 0, KW_TERM_LAYER_DDP,
		  KW_TERM_DDP_ETYPE_TAGGED, KW_TERM_DDP_T_INV_STAG);
}

TEST(invalid_queue_number)
{
	struct kw_tx_msg m = { .opcode = KW_OP_SEND, .len = 10, .qn = 5,
			       .msn = 1 };

	case_term(kwt_fail, false, &m, NULL, 0, -1, 0, KW_TERM_LAYER_DDP,
		  KW_TERM_DDP_ETYPE_UNTAGGED, KW_TERM_DDP_U_INV_QN);
}

TEST(msn_out_of_range)
{
	struct kw_tx_msg m = { .opcode = KW_OP_SEND, .len = 10, .qn = 0,
			       .msn = 7 };

	case_term(kwt_fail, false, &m, NULL, 0, -1, 0, KW_TERM_LAYER_DDP,
		  KW_TERM_DDP_ETYPE_UNTAGGED, KW_TERM_DDP_U_INV_MSN_RANGE);
}

TEST(bad_ddp_version)
{
	struct kw_tx_msg m = { .opcode = KW_OP_WRITE, .len = 8, .stag = 1 };

	/* byte 2 = DDP control: version 1 -> 2 */
	case_term(kwt_fail, true, &m, NULL, 0, 2, 0x03, KW_TERM_LAYER_DDP,
		  KW_TERM_DDP_ETYPE_TAGGED, KW_TERM_DDP_T_INV_VERSION);
}

TEST(bad_rdmap_version)
{
	struct kw_tx_msg m = { .opcode = KW_OP_SEND, .len = 8, .msn = 1 };

	/* byte 3 = RDMAP control: version 1 -> 2 */
	case_term(kwt_fail, true, &m, NULL, 0, 3, 0xc0, KW_TERM_LAYER_RDMAP,
		  KW_TERM_RDMAP_ETYPE_REMOTE_OP, KW_TERM_RDMAP_INV_VERSION);
}

TEST(bad_opcode)
{
	struct kw_tx_msg m = { .opcode = KW_OP_SEND, .len = 8, .msn = 1 };

	/* Send (3) -> opcode 0xb, which RDMAP does not define */
	case_term(kwt_fail, false, &m, NULL, 0, 3, 0x08, KW_TERM_LAYER_RDMAP,
		  KW_TERM_RDMAP_ETYPE_REMOTE_OP, KW_TERM_RDMAP_UNEXP_OPCODE);
}

/* A Read Request for the responder's own MR, beyond its bounds. */
TEST(read_request_out_of_bounds)
{
	static struct kend k;
	uint8_t rr[KW_READ_REQ_LEN];
	struct kw_read_req r;
	struct kw_tx_msg m = { .opcode = KW_OP_READ_REQ, .qn = 1, .msn = 1,
			       .inline_len = KW_READ_REQ_LEN };

	setup(&k, true, kwt_fail);
	r = (struct kw_read_req){ .sink_stag = 9, .sink_to = 0, .size = 4096,
				  .src_stag = k.mr->stag,
				  .src_to = (uintptr_t)k.buf + KBUF - 100 };
	kw_read_req_encode(&r, rr);
	m.inline_data = rr;
	raw_send(&k, &m, rr, 0);
	raw_expect_term(&k, KW_TERM_LAYER_RDMAP, KW_TERM_RDMAP_ETYPE_REMOTE_PROT,
			KW_TERM_RDMAP_BASE_BOUNDS, kwt_fail);
	expect_qp_term(&k, KW_TERM_LAYER_RDMAP, KW_TERM_RDMAP_ETYPE_REMOTE_PROT,
		       KW_TERM_RDMAP_BASE_BOUNDS, kwt_fail);
	kend_fini(&k);
}

/* Append message m as FPDUs to out (CRC as negotiated); returns the end. */
static uint8_t *raw_build(struct kend *k, struct kw_tx_msg *m,
			  const uint8_t *payload, uint8_t *out)
{
	return rp_build(&(struct rp){ k->raw, k->crc }, m, payload, out);
}

/*
 * Write, Send with Invalidate of that STag, Write again, all in one TCP
 * segment (one pass of the receive path): the first Write lands, the
 * Send completes with the invalidation, and the second Write must be
 * refused as an invalid STag (RFC 5040 sections 5.3, 7.2) and place nothing.
 * Guards the receive path against acting on an MR it looked up one FPDU
 * earlier (a per-pass STag cache was tried for speed; performance.md).
 */
TEST(write_after_remote_invalidate_same_segment)
{
	static struct kend k;
	static uint8_t pl[4096], wire[8192];
	struct kw_mr *target;
	struct kiwarp_sge sge;
	struct kw_recv_wr rw = { .wr_id = 7, .sg_list = &sge, .num_sge = 1 };
	struct kiwarp_cqe cqe;
	uint8_t *tbuf, *end;
	int i, n = 0;

	setup(&k, false, kwt_fail);
	tbuf = mmap(NULL, KBUF, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_TRUE(tbuf != MAP_FAILED);
	memset(tbuf, 0, KBUF);
	ASSERT_EQ(kw_reg_mr(k.pd, tbuf, KBUF, KIWARP_ACCESS_ALL, &target), 0);
	sge = (struct kiwarp_sge){ (uintptr_t)k.buf, 256, k.mr->stag };
	ASSERT_EQ(kw_post_recv(k.qp, &rw, 1), 1);
	for (i = 0; i < (int)sizeof(pl); i++)
		pl[i] = (uint8_t)(i * 7 + 1);

	end = raw_build(&k, &(struct kw_tx_msg){ .opcode = KW_OP_WRITE,
		.len = 100, .stag = target->stag, .to = (uintptr_t)tbuf },
		pl, wire);
	ASSERT_TRUE(end != NULL);
	end = raw_build(&k, &(struct kw_tx_msg){ .opcode = KW_OP_SEND_INV,
		.len = 10, .qn = 0, .msn = 1, .inv_stag = target->stag },
		pl, end);
	ASSERT_TRUE(end != NULL);
	end = raw_build(&k, &(struct kw_tx_msg){ .opcode = KW_OP_WRITE,
		.len = 100, .stag = target->stag,
		.to = (uintptr_t)tbuf + 1024 }, pl, end);
	ASSERT_TRUE(end != NULL);
	ASSERT_EQ(writen(k.raw, wire, end - wire), 0);

	raw_expect_term(&k, KW_TERM_LAYER_DDP, KW_TERM_DDP_ETYPE_TAGGED,
			KW_TERM_DDP_T_INV_STAG, kwt_fail);
	expect_qp_term(&k, KW_TERM_LAYER_DDP, KW_TERM_DDP_ETYPE_TAGGED,
		       KW_TERM_DDP_T_INV_STAG, kwt_fail);
	ASSERT_MEMEQ(tbuf, pl, 100);		/* before: placed */
	for (i = 0; i < 100; i++)		/* after: nothing */
		n += tbuf[1024 + i] != 0;
	EXPECT_EQ(n, 0);
	/* the Send completed, with the invalidation */
	ASSERT_EQ(kw_poll_cq(k.cq, 1, &cqe), 1);
	EXPECT_EQ(cqe.wr_id, 7);
	EXPECT_EQ(cqe.status, KIWARP_WC_SUCCESS);
	EXPECT_TRUE(cqe.flags & KIWARP_WC_WITH_INV);
	EXPECT_EQ(cqe.inv_stag, target->stag);
	kend_fini(&k);
	kw_dereg_mr(target);
	munmap(tbuf, KBUF);
}

/* A Read Request whose sink range wraps past 2^64: refused, not echoed. */
TEST(read_request_sink_wraps)
{
	static struct kend k;
	uint8_t rr[KW_READ_REQ_LEN];
	struct kw_read_req r;
	struct kw_tx_msg m = { .opcode = KW_OP_READ_REQ, .qn = 1, .msn = 1,
			       .inline_len = KW_READ_REQ_LEN };

	setup(&k, true, kwt_fail);
	r = (struct kw_read_req){ .sink_stag = 9, .sink_to = ~0ULL - 10,
				  .size = 64, .src_stag = k.mr->stag,
				  .src_to = (uintptr_t)k.buf };
	kw_read_req_encode(&r, rr);
	m.inline_data = rr;
	raw_send(&k, &m, rr, 0);
	raw_expect_term(&k, KW_TERM_LAYER_RDMAP, KW_TERM_RDMAP_ETYPE_REMOTE_PROT,
			KW_TERM_RDMAP_TO_WRAP, kwt_fail);
	expect_qp_term(&k, KW_TERM_LAYER_RDMAP, KW_TERM_RDMAP_ETYPE_REMOTE_PROT,
		       KW_TERM_RDMAP_TO_WRAP, kwt_fail);
	kend_fini(&k);
}

/* More Read Requests at once than the IRD we granted (1). */
TEST(read_requests_beyond_ird)
{
	static struct kend k;
	static uint8_t wire[8 * 64];
	uint8_t rr[KW_READ_REQ_LEN], *e = wire;
	struct kw_read_req r;
	int i;

	setup(&k, false, kwt_fail);
	EXPECT_EQ(k.res.param.ird, 1);
	r = (struct kw_read_req){ .sink_stag = 9, .size = 1024 * 60,
				  .src_stag = k.mr->stag,
				  .src_to = (uintptr_t)k.buf };
	kw_read_req_encode(&r, rr);
	/*
	 * All 8 in one write, parsed in one pass: kiwarp frees an IRQ slot
	 * when it starts the response, and sent one by one the requests
	 * could each find the previous one started (no Terminate: a debug
	 * rehearsal saw that once). While the receive path parses, the
	 * transmit side can start at most one response, so the third
	 * request is always beyond the IRD of 1.
	 */
	for (i = 0; i < 8; i++) {
		e = raw_build(&k, &(struct kw_tx_msg){
			.opcode = KW_OP_READ_REQ, .qn = 1, .msn = i + 1,
			.inline_data = rr, .inline_len = KW_READ_REQ_LEN },
			rr, e);
		ASSERT_TRUE(e != NULL);
	}
	ASSERT_EQ(writen(k.raw, wire, e - wire), 0);
	raw_expect_term(&k, KW_TERM_LAYER_RDMAP, KW_TERM_RDMAP_ETYPE_REMOTE_OP,
			KW_TERM_RDMAP_CATASTROPHIC_STREAM, kwt_fail);
	kend_fini(&k);
}

/* Set an integer sysctl; the old value to *old. */
static int write_sysctl(const char *path, long v, long *old)
{
	FILE *f = fopen(path, "r+");
	int ret = -1;

	if (!f)
		return -1;
	if ((!old || fscanf(f, "%ld", old) == 1) && !fseek(f, 0, SEEK_SET) &&
	    fprintf(f, "%ld\n", v) > 0)
		ret = 0;
	if (fclose(f))
		ret = -1;
	return ret;
}

/*
 * Read Responses are copied into pages TCP takes by reference, and TCP
 * charges a socket for the bytes, not the pages. A peer that asks for
 * 60,000 1-byte Reads (four at a time, its full ORD) and does not read must not
 * make kiwarp hold a page per 24-byte response: on loopback the peer's
 * receive queue holds the very pages kiwarp sent, and a page each was
 * 4.3 KB of memory per response (88 MB for 20,000 when it happened);
 * packed, about 170 bytes, skbs included. The guest is otherwise idle, so
 * MemFree shows it.
 */
TEST(tiny_read_responses_pack_densely)
{
	/*
	 * PER: the peer's full ORD. At least MIN_ROUNDS (20,000 requests:
	 * a page each would be 86 MB, packed about 3), then up to ROUNDS
	 * while BUDGET seconds last: the debug kernel under TCG takes 6 ms
	 * a round, the others finish all of them in about a second.
	 */
	enum { ROUNDS = 15000, MIN_ROUNDS = 5000, BUDGET = 15, PER = 4,
	       IRD = 4 };
	static struct kend k;
	static uint8_t wire[PER * 64], rb[65536];
	struct kw_tx_msg resp = { .opcode = KW_OP_READ_RESP, .len = 1,
				  .mulpdu = 1448 };
	struct kw_tx_fpdu f;
	uint64_t want, built = 0, got = 0, sent = 0;
	uint32_t off = 0, msn = 1;
	int i, j, q = 0, inq = 0, sndbuf = 4 << 20;
	long long free0, free1;
	long wmax;
	struct kiwarp_query_qp qa;
	double end, grace, t_end;

	ASSERT_EQ(write_sysctl("/proc/sys/net/core/wmem_max", 8 << 20, &wmax), 0);
	memset(&k, 0, sizeof(k));
	k.ird = IRD;
	ASSERT_EQ(kend_init(&k), 0);
	ASSERT_EQ(raw_connect(&k), 0);
	ASSERT_EQ(k.res.param.ird, IRD);
	ASSERT_EQ(setsockopt(k.sock, SOL_SOCKET, SO_SNDBUF, &sndbuf,
			     sizeof(sndbuf)), 0);
	ASSERT_EQ(kw_tx_fpdu_next(&resp, &off, &f), 0);
	want = f.hdr_len + f.payload_len + f.trailer_len;	/* per response */
	free0 = meminfo("MemFree");
	t_end = now() + BUDGET;
	for (i = 0; i < ROUNDS && (i < MIN_ROUNDS || now() < t_end); i++) {
		uint8_t *e = wire;

		for (j = 0; j < PER; j++) {
			uint8_t rr[KW_READ_REQ_LEN];
			struct kw_read_req r = { .sink_stag = 9, .size = 1,
				.src_stag = k.mr->stag,
				.src_to = (uintptr_t)k.buf + (i * PER + j) % KBUF };

			kw_read_req_encode(&r, rr);
			e = raw_build(&k, &(struct kw_tx_msg){
				.opcode = KW_OP_READ_REQ, .qn = 1, .msn = msn++,
				.inline_data = rr, .inline_len = KW_READ_REQ_LEN },
				rr, e);
			ASSERT_TRUE(e != NULL);
		}
		ASSERT_EQ(writen(k.raw, wire, e - wire), 0);
		sent += PER;
		/*
		 * All answered (in kiwarp's TCP: the IRQ slots are free again)
		 * before the next batch, until kiwarp's send queue is full: no
		 * progress for 2 s. kiwarp's own count is exact; the peer's
		 * FIONREAD plus kiwarp's SIOCOUTQNSD counted twice what TCP
		 * retransmitted after a timeout (snd_nxt goes back), and the
		 * test then overran the IRD itself.
		 */
		end = now() + 2;
		grace = now() + 20;
		for (;;) {
			int nsd = 0;

			ASSERT_EQ(kw_query_qp(k.qp, &qa), 0);
			if (qa.tx_bytes > built) {
				built = qa.tx_bytes;	/* 1 byte each */
				end = now() + 2;
				grace = now() + 20;
			}
			if (built >= sent)
				break;
			/*
			 * No progress for 2 s means a full send queue (TCP
			 * holds unsent bytes) -- or a slow kernel: the debug
			 * kernel under TCG once paused 2 s with nothing
			 * unsent. That gets up to 20 s.
			 */
			if (now() >= end &&
			    (ioctl(k.sock, SIOCOUTQNSD, &nsd) || nsd ||
			     now() >= grace))
				break;
			usleep(200);
		}
		if (built < sent)
			break;
	}
	free1 = meminfo("MemFree");
	ASSERT_EQ(ioctl(k.raw, FIONREAD, &inq), 0);
	ASSERT_EQ(ioctl(k.sock, SIOCOUTQNSD, &q), 0);
	ASSERT_EQ(kw_query_qp(k.qp, &qa), 0);
	printf("# %d rounds, %llu requests, %llu responses of %llu B built: %d B at the peer, %d B not sent by kiwarp's TCP; MemFree %lld -> %lld kB; QP %s, Terminate sent %d (%u/%u/%u)\n",
	       i, (unsigned long long)sent, (unsigned long long)qa.tx_bytes,
	       (unsigned long long)want, inq, q, free0 >> 10, free1 >> 10,
	       kw_qp_state_str(qa.state), qa.term_sent.valid,
	       qa.term_sent.layer, qa.term_sent.etype, qa.term_sent.ecode);
	EXPECT_EQ(qa.state, KIWARP_QPS_RTS);
	EXPECT_EQ(qa.tx_bytes, sent);		/* every one answered */
	EXPECT_LT((free0 - free1) / (long long)sent, 1024);
	/* the peer reads: the rest is answered, nothing lost, no Terminate */
	want *= sent;
	end = now() + 60;
	while (got < want && now() < end) {
		struct pollfd pfd = { .fd = k.raw, .events = POLLIN };
		ssize_t n;

		if (poll(&pfd, 1, 500) != 1)
			continue;
		n = read(k.raw, rb, sizeof(rb));
		if (n <= 0)
			break;
		got += n;
	}
	EXPECT_EQ(got, want);
	kend_fini(&k);
	write_sysctl("/proc/sys/net/core/wmem_max", wmax, NULL);
}

/*
 * A Send arrives for a receive WR the application posted with a bad lkey:
 * the fault is kiwarp's side, so the Terminate is RDMAP local catastrophic
 * (0/0/0) without the DDP header (RFC 5040 section 4.8), not DDP "no
 * buffer" (1/2/2), which blames the peer; the WR completes in error.
 */
TEST(send_into_bad_receive_wr)
{
	static struct kend k;
	static uint8_t pl[64], wire[256], *e;
	struct kiwarp_sge sge;
	struct kw_recv_wr rw = { .wr_id = 5, .sg_list = &sge, .num_sge = 1 };
	struct kw_tx_msg m = { .opcode = KW_OP_SEND, .len = sizeof(pl),
			       .msn = 1 };
	struct kiwarp_cqe cqe;

	setup(&k, false, kwt_fail);
	sge = (struct kiwarp_sge){ (uintptr_t)k.buf, KBUF, 0x7fff00 };
	ASSERT_EQ(kw_post_recv(k.qp, &rw, 1), 1);
	/* one write: kiwarp may reset the stream once it has terminated */
	e = raw_build(&k, &m, pl, wire);
	ASSERT_TRUE(e != NULL);
	ASSERT_EQ(writen(k.raw, wire, e - wire), 0);
	raw_expect_term(&k, KW_TERM_LAYER_RDMAP,
			KW_TERM_RDMAP_ETYPE_CATASTROPHIC, 0, kwt_fail);
	ASSERT_TRUE(term_sink.got_term);
	EXPECT_FALSE(term_sink.term.has_len);
	EXPECT_FALSE(term_sink.term.has_ddp_hdr);
	expect_qp_term(&k, KW_TERM_LAYER_RDMAP, KW_TERM_RDMAP_ETYPE_CATASTROPHIC,
		       0, kwt_fail);
	ASSERT_EQ(cq_wait_one(k.cq, &cqe, 1), 0);
	EXPECT_EQ(cqe.wr_id, 5);
	EXPECT_NE(cqe.status, KIWARP_WC_SUCCESS);
	kend_fini(&k);
}

/*
 * kiwarp's application posts a Send with a bad lkey: RFC 5040 section 7.1
 * sends the Terminate "instead of the request" (RDMAP local catastrophic,
 * 0/0/0, no headers) rather than just closing the stream; the WR fails
 * with a local protection error.
 */
TEST(bad_send_wr_sends_terminate)
{
	static struct kend k;
	struct kiwarp_sge sge = { 0, 16, 0x7fff00 };
	struct kw_send_wr wr = { .wr_id = 3, .opcode = KIWARP_WR_SEND,
				 .flags = KW_SEND_SIGNALED, .num_sge = 1,
				 .sg_list = &sge };
	struct kiwarp_cqe cqe;

	struct kw_tx_msg m = { .opcode = KW_OP_WRITE, .len = 1 };
	double end;

	setup(&k, false, kwt_fail);
	/*
	 * The first FPDU lifts kiwarp's responder fence: before it, a
	 * responder sends nothing, not even a Terminate (RFC 5044 section
	 * 7.1.2 rule 4). A one-byte Write shows when it has been taken.
	 */
	k.buf[KBUF - 1] = 0;
	m.stag = k.mr->stag;
	m.to = (uintptr_t)k.buf + KBUF - 1;
	ASSERT_EQ(rp_send(&(struct rp){ k.raw, k.crc }, &m,
			  (const uint8_t *)"!", 0), 0);
	end = now() + 5;
	while (k.buf[KBUF - 1] != '!' && now() < end)
		usleep(1000);
	ASSERT_EQ(k.buf[KBUF - 1], '!');
	usleep(20 * 1000);	/* placed, then the fence lifts */
	sge.addr = (uintptr_t)k.buf;
	ASSERT_EQ(kw_post_send(k.qp, &wr, 1), 1);
	raw_expect_term(&k, KW_TERM_LAYER_RDMAP,
			KW_TERM_RDMAP_ETYPE_CATASTROPHIC, 0, kwt_fail);
	ASSERT_TRUE(term_sink.got_term);
	EXPECT_EQ(term_sink.n, 1);	/* the Terminate, not the Send */
	EXPECT_FALSE(term_sink.term.has_len);
	expect_qp_term(&k, KW_TERM_LAYER_RDMAP, KW_TERM_RDMAP_ETYPE_CATASTROPHIC,
		       0, kwt_fail);
	ASSERT_EQ(cq_wait_one(k.cq, &cqe, 1), 0);
	EXPECT_EQ(cqe.wr_id, 3);
	EXPECT_EQ(cqe.status, KIWARP_WC_LOC_PROT_ERR);
	kend_fini(&k);
}

/* The peer dies mid-message: the posted receive is flushed. */
TEST(peer_closes_mid_message)
{
	static struct kend k;
	static uint8_t pl[20000];
	struct kiwarp_sge sge;
	struct kw_recv_wr rw = { .wr_id = 42, .sg_list = &sge, .num_sge = 1 };
	struct kw_tx_msg m = { .opcode = KW_OP_SEND, .len = sizeof(pl),
			       .msn = 1, .crc = false, .mulpdu = 1448 };
	struct kw_tx_fpdu f;
	struct kiwarp_cqe cqe;
	uint32_t off = 0;
	int i, n = 0;

	setup(&k, false, kwt_fail);
	sge = (struct kiwarp_sge){ (uintptr_t)k.buf, KBUF, k.mr->stag };
	ASSERT_EQ(kw_post_recv(k.qp, &rw, 1), 1);
	/* two of the message's FPDUs, then a reset */
	for (i = 0; i < 2; i++) {
		ASSERT_EQ(kw_tx_fpdu_next(&m, &off, &f), 0);
		kw_tx_fpdu_seal(&m, &f, 0);
		ASSERT_EQ(writen(k.raw, f.hdr, f.hdr_len), 0);
		ASSERT_EQ(writen(k.raw, pl + f.payload_off, f.payload_len), 0);
		ASSERT_EQ(writen(k.raw, f.trailer, f.trailer_len), 0);
	}
	{
		struct linger lg = { 1, 0 };

		setsockopt(k.raw, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		close(k.raw);
		k.raw = -1;
	}
	for (i = 0; i < 500 && n == 0; i++) {
		n = kw_poll_cq(k.cq, 1, &cqe);
		if (!n)
			usleep(10000);
	}
	ASSERT_EQ(n, 1);
	EXPECT_EQ(cqe.wr_id, 42);
	EXPECT_EQ(cqe.status, KIWARP_WC_WR_FLUSH_ERR);
	kend_fini(&k);
}

/* Garbage instead of an MPA Request: the responder fails cleanly. */
TEST(mpa_garbage_request)
{
	static struct kend k;
	static const char junk[] = "GET / HTTP/1.0\r\nHost: x\r\n\r\n";
	pthread_t t;

	memset(&k, 0, sizeof(k));
	ASSERT_EQ(kend_init(&k), 0);
	ASSERT_EQ(tcp_pair(&k.raw, &k.sock), 0);
	pthread_create(&t, NULL, kaccept, &k);
	ASSERT_EQ(writen(k.raw, junk, sizeof(junk)), 0);
	pthread_join(t, NULL);
	EXPECT_EQ(k.ret, -EPROTO);
	kend_fini(&k);
}

/* An MPA Request announcing more private data than RFC 5044 allows. */
TEST(mpa_oversized_private_data)
{
	static struct kend k;
	uint8_t hdr[KW_MPA_HDR_LEN];
	pthread_t t;

	memset(&k, 0, sizeof(k));
	ASSERT_EQ(kend_init(&k), 0);
	ASSERT_EQ(tcp_pair(&k.raw, &k.sock), 0);
	pthread_create(&t, NULL, kaccept, &k);
	memcpy(hdr, KW_MPA_KEY_REQ, 16);
	hdr[16] = 0;
	hdr[17] = 1;
	hdr[18] = 0x10;	/* 4096 bytes */
	hdr[19] = 0x00;
	ASSERT_EQ(writen(k.raw, hdr, sizeof(hdr)), 0);
	pthread_join(t, NULL);
	EXPECT_TRUE(k.ret == -EMSGSIZE || k.ret == -EPROTO);
	kend_fini(&k);
}

/* Silence after TCP connect: ACCEPT times out instead of hanging. */
TEST(mpa_request_timeout)
{
	static struct kend k;
	struct timespec a, b;

	memset(&k, 0, sizeof(k));
	ASSERT_EQ(kend_init(&k), 0);
	ASSERT_EQ(tcp_pair(&k.raw, &k.sock), 0);
	clock_gettime(CLOCK_MONOTONIC, &a);
	k.ret = kw_accept(k.qp, k.sock, NULL, 1000, &k.req);
	clock_gettime(CLOCK_MONOTONIC, &b);
	EXPECT_EQ(k.ret, -ETIMEDOUT);
	EXPECT_LE(b.tv_sec - a.tv_sec, 5);
	kend_fini(&k);
}

/* ---- issue 6 row 6: deregistration revokes queued RDMA Read Responses */

#define RV_READS	4
#define RV_LEN		(1U << 20)
#define RV_MR		(RV_READS * RV_LEN)
#define RV_SINK_STAG	0x99

/* the byte at offset i before and after deregistration: always differ */
static uint8_t rv_old(uint64_t i)
{
	return (uint8_t)(i * 131 + (i >> 12) + 7);
}

static uint8_t rv_new(uint64_t i)
{
	return rv_old(i) ^ 0xff;
}

/* What the peer receives: Read Response payload checked byte by byte. */
struct rv_sink {
	bool got_term;
	struct kw_term term;
	uint64_t placed, old_bytes, new_bytes, out_of_range;
};

static int rv_lookup(void *ctx, u32 stag, u8 op, struct kw_mr_view *v)
{
	struct rv_sink *s = ctx;

	if (stag != RV_SINK_STAG || op != KW_OP_READ_RESP)
		return -ENOENT;
	*v = (struct kw_mr_view){ .cookie = s, .stag = stag, .access = 7,
				  .valid = true, .base = 0, .len = RV_MR };
	return 0;
}

static int rv_getbuf(void *ctx, u32 msn, const struct kw_rx_buf **b)
{
	(void)ctx; (void)msn; (void)b;
	return -ENOENT;	/* kiwarp sends no Send here */
}

static void rv_place(void *ctx, void *cookie, u64 off, const void *src,
		     u32 len)
{
	struct rv_sink *s = ctx;
	const uint8_t *p = src;
	u32 i;

	(void)cookie;
	for (i = 0; i < len; i++) {
		if (off + i >= RV_MR)
			s->out_of_range++;
		else if (p[i] == rv_old(off + i))
			s->old_bytes++;
		else if (p[i] == rv_new(off + i))
			s->new_bytes++;
	}
	s->placed += len;
}

static int rv_done(void *ctx, const struct kw_ddp_hdr *h, const u8 *payload,
		   u32 placed, struct kw_term *t)
{
	struct rv_sink *s = ctx;

	(void)t;
	if (h->opcode == KW_OP_TERMINATE && !kw_term_decode(payload, placed,
							     &s->term))
		s->got_term = true;
	return 0;
}

static const struct kw_rx_ops rv_ops = {
	.lookup_stag = rv_lookup, .get_rx_buf = rv_getbuf, .place = rv_place,
	.segment_done = rv_done,
};

/*
 * The peer reads what kiwarp sends into rx (sink s) until a Terminate,
 * want payload bytes placed, a parse failure, EOF or secs seconds.
 */
static void rv_read(struct kend *k, struct kw_rx *rx, struct rv_sink *s,
		    uint64_t want, double secs)
{
	static uint8_t b[65536];
	double end = now() + secs;

	while (!s->got_term && s->placed < want && !kw_rx_failed(rx) &&
	       now() < end) {
		struct pollfd pfd = { .fd = k->raw, .events = POLLIN };
		ssize_t n;

		if (poll(&pfd, 1, 500) != 1)
			continue;
		n = read(k->raw, b, sizeof(b));
		if (n <= 0)
			break;
		kw_rx_input(rx, b, n);
	}
}

static void rv_attack(int *kwt_fail, bool markers)
{
	static struct kend k;
	static struct rv_sink s;
	static struct kw_rx rx;
	struct kw_mr *mr;
	uint8_t *buf;
	int i, queued = -1, q, ret;
	double t0, dt, end;
	struct kiwarp_query_qp qa;
	uint64_t j, built;

	memset(&k, 0, sizeof(k));
	memset(&s, 0, sizeof(s));
	k.ird = RV_READS;
	ASSERT_EQ(kend_init(&k), 0);
	k.markers = markers;
	ASSERT_EQ(raw_connect(&k), 0);
	buf = mmap(NULL, RV_MR, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_TRUE(buf != MAP_FAILED);
	for (j = 0; j < RV_MR; j++)
		buf[j] = rv_old(j);
	ASSERT_EQ(kw_reg_mr(k.pd, buf, RV_MR, KIWARP_ACCESS_REMOTE_READ, &mr),
		  0);
	/* the peer asks for all of it and does not read */
	for (i = 0; i < RV_READS; i++) {
		uint8_t rr[KW_READ_REQ_LEN];
		struct kw_read_req r = {
			.sink_stag = RV_SINK_STAG,
			.sink_to = (uint64_t)i * RV_LEN, .size = RV_LEN,
			.src_stag = mr->stag,
			.src_to = (uintptr_t)buf + (uint64_t)i * RV_LEN,
		};
		struct kw_tx_msg m = { .opcode = KW_OP_READ_REQ, .qn = 1,
				       .msn = i + 1, .inline_data = rr,
				       .inline_len = KW_READ_REQ_LEN };

		kw_read_req_encode(&r, rr);
		ASSERT_EQ(raw_send(&k, &m, rr, 0), 0);
	}
	/* until kiwarp's responses back up: our receive queue stops growing */
	end = now() + 10;
	while (now() < end) {
		usleep(200000);
		ASSERT_EQ(ioctl(k.raw, FIONREAD, &q), 0);
		if (q > 0 && q == queued)
			break;
		queued = q;
	}
	/* deregister while Read Responses are queued: it must succeed */
	t0 = now();
	do {
		ret = kw_dereg_mr(mr);
		if (ret == -EBUSY)
			usleep(10000);
	} while (ret == -EBUSY && now() < t0 + 5);
	dt = now() - t0;
	/*
	 * Everything kiwarp built before the dereg returned is now in our
	 * receive queue, in its socket's send queue (SIOCOUTQ works on the fd
	 * it owns), or is in the batch of Read Response FPDUs it built
	 * last and TCP has not taken yet (no room; KW_TX_RESP_BATCH bytes):
	 * the peer may get at most that much.
	 */
	ASSERT_EQ(ioctl(k.raw, FIONREAD, &queued), 0);
	ASSERT_EQ(ioctl(k.sock, SIOCOUTQ, &q), 0);
	memset(&qa, 0, sizeof(qa));
	ASSERT_EQ(kw_query_qp(k.qp, &qa), 0);
	printf("# %d bytes queued at the peer, %d in kiwarp's send queue, FPDU payload %u; DEREG_MR %d after %.3f s\n",
	       queued, q, qa.mulpdu, ret, dt);
	ASSERT_EQ(ret, 0);
	built = (uint64_t)queued + q + KW_TX_RESP_BATCH;
	EXPECT_LT_F(dt, 5.0);
	/* the application reuses the buffer */
	for (j = 0; j < RV_MR; j++)
		buf[j] = rv_new(j);
	/* now the peer reads everything kiwarp sends */
	kw_rx_init(&rx, &rv_ops, &s, k.crc, 0);
	if (markers)	/* the Terminate too: framed where the stream is */
		kw_rx_set_markers(&rx);
	rv_read(&k, &rx, &s, UINT64_MAX, 30);
	printf("# peer got %llu of %u bytes: %llu old, %llu new, %llu other; Terminate %d (%u/%u/%u)\n",
	       (unsigned long long)s.placed, RV_MR,
	       (unsigned long long)s.old_bytes,
	       (unsigned long long)s.new_bytes,
	       (unsigned long long)(s.placed - s.old_bytes - s.new_bytes),
	       s.got_term, s.term.layer, s.term.etype, s.term.ecode);
	EXPECT_FALSE(kw_rx_failed(&rx));
	/* never the new contents, only old bytes of responses already built */
	EXPECT_EQ(s.new_bytes, 0);
	EXPECT_EQ(s.old_bytes, s.placed);
	EXPECT_EQ(s.out_of_range, 0);
	/* the test only means something if responses were cut short */
	EXPECT_LT(s.placed, RV_MR);
	EXPECT_LE(s.placed, built);
	/* the rest ends with a Terminate: remote protection, invalid STag */
	EXPECT_TRUE(s.got_term);
	EXPECT_EQ(s.term.layer, KW_TERM_LAYER_RDMAP);
	EXPECT_EQ(s.term.etype, KW_TERM_RDMAP_ETYPE_REMOTE_PROT);
	EXPECT_EQ(s.term.ecode, KW_TERM_RDMAP_INV_STAG);
	expect_qp_term(&k, KW_TERM_LAYER_RDMAP, KW_TERM_RDMAP_ETYPE_REMOTE_PROT,
		       KW_TERM_RDMAP_INV_STAG, kwt_fail);
	kend_fini(&k);
	munmap(buf, RV_MR);
}

/*
 * The peer queues RDMA Read Requests and stops reading; the application
 * (uid 65534) deregisters the MR and reuses the buffer: the peer never
 * sees the new contents (RFC 5042 revocation). Runs in a child with a time
 * limit, so that a dereg that never returns fails the case.
 */
static void rv_attack_as_nobody(int *kwt_fail, bool markers)
{
	double end = now() + 60;
	int st = 0;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		int fail = 0;

		if (setgroups(0, NULL) || setresgid(65534, 65534, 65534) ||
		    setresuid(65534, 65534, 65534))
			_exit(2);
		rv_attack(&fail, markers);
		fflush(stdout);
		_exit(fail);
	}
	ASSERT_GT(pid, 0);
	while (waitpid(pid, &st, WNOHANG) != pid) {
		if (now() > end) {
			printf("# did not finish within 60 s\n");
			kill(pid, SIGKILL);
			*kwt_fail = 1;
			return;
		}
		usleep(10000);
	}
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

TEST(dereg_revokes_queued_read_responses)
{
	rv_attack_as_nobody(kwt_fail, false);
}

/*
 * The same with markers in kiwarp's FPDUs: the batch that could not be
 * built gives its stream position back, so the Terminate that follows is
 * framed (its markers) where the peer's parser expects it.
 */
TEST(dereg_revokes_queued_read_responses_markers)
{
	rv_attack_as_nobody(kwt_fail, true);
}

/* ============================================ zero copy, completion on ACK */

#define ZC_LEN		(16U << 20)
#define ZC_STAG		0x77

/* What the peer receives of an RDMA Write: checked byte by byte. */
static uint64_t zc_lo, zc_hi;	/* payload range rewritten after posting */
static uint64_t zc_period;	/* or, if not 0: every other zc_period bytes,
				 * from zc_period on */

static int zc_lookup(void *ctx, u32 stag, u8 op, struct kw_mr_view *v)
{
	struct rv_sink *s = ctx;

	if (stag != ZC_STAG || op != KW_OP_WRITE)
		return -ENOENT;
	*v = (struct kw_mr_view){ .cookie = s, .stag = stag, .access = 7,
				  .valid = true, .base = 0, .len = ZC_LEN };
	return 0;
}

static void zc_place(void *ctx, void *cookie, u64 off, const void *src,
		     u32 len)
{
	struct rv_sink *s = ctx;
	const uint8_t *p = src;
	u32 i;

	(void)cookie;
	for (i = 0; i < len; i++) {
		uint64_t o = off + i;
		bool rewritten = zc_period ? (o / zc_period) & 1 :
				 o >= zc_lo && o < zc_hi;

		if (o >= ZC_LEN)
			s->out_of_range++;
		else if (p[i] == (rewritten ? rv_new(o) : rv_old(o)))
			s->old_bytes++;		/* here: the expected byte */
		else
			s->new_bytes++;		/* here: a wrong byte */
	}
	s->placed += len;
}

static const struct kw_rx_ops zc_ops = {
	.lookup_stag = zc_lookup, .get_rx_buf = rv_getbuf, .place = zc_place,
	.segment_done = rv_done,
};

/*
 * A signaled RDMA Write of the whole ZC_LEN buffer (CRC off, so by
 * reference), posted by kiwarp as the responder to a raw peer that reads
 * nothing, until kiwarp's transmit stalls on the full socket: the stream
 * bytes TCP took (*took: unread at the peer, or *outq of them still in
 * kiwarp's send queue, SIOCOUTQ on the fd it owns) stop growing.
 */
static void zc_stall(struct kend *k, uint8_t **bufp, struct kw_mr **mr,
		     uint64_t *took, int *outq, int *kwt_fail)
{
	struct kiwarp_cqe cqe;
	uint8_t *buf;
	uint64_t j;
	double end;
	int inq;

	memset(k, 0, sizeof(*k));
	ASSERT_EQ(kend_init(k), 0);
	ASSERT_EQ(raw_connect(k), 0);
	/* kiwarp, the responder, sends once our first FPDU came in
	 * (RFC 5044 section 7.1.2): a zero-length Write */
	ASSERT_EQ(rp_send_rtr(&(struct rp){ k->raw, k->crc }, KW_OP_WRITE), 0);
	buf = mmap(NULL, ZC_LEN, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_TRUE(buf != MAP_FAILED);
	*bufp = buf;
	for (j = 0; j < ZC_LEN; j++)
		buf[j] = rv_old(j);
	ASSERT_EQ(kw_reg_mr(k->pd, buf, ZC_LEN, KIWARP_ACCESS_LOCAL_WRITE, mr),
		  0);
	{
		struct kiwarp_sge sge = { .addr = (uintptr_t)buf,
					  .length = ZC_LEN,
					  .lkey = (*mr)->stag };
		struct kw_send_wr wr = {
			.wr_id = 1, .opcode = KIWARP_WR_RDMA_WRITE,
			.flags = KW_SEND_SIGNALED, .num_sge = 1,
			.sg_list = &sge, .remote_addr = 0, .rkey = ZC_STAG,
		};

		ASSERT_EQ(kw_post_send(k->qp, &wr, 1), 1);
	}
	*took = 0;
	end = now() + 10;
	do {
		usleep(300000);
		ASSERT_EQ(ioctl(k->raw, FIONREAD, &inq), 0);
		ASSERT_EQ(ioctl(k->sock, SIOCOUTQ, outq), 0);
		if ((uint64_t)inq + *outq == *took)
			break;
		*took = (uint64_t)inq + *outq;
	} while (now() < end);
	ASSERT_EQ(kw_poll_cq(k->cq, 1, &cqe), 0);	/* nothing acknowledged */
	ASSERT_GT(*outq, 256 * 1024);
}

/*
 * kiwarp transmits from the registered pages by reference and completes a
 * WR only once TCP has the data acknowledged (architecture.md, "transmit
 * path"), on every kernel interface (sendpage, MSG_SPLICE_PAGES). The peer
 * stops reading while a 16 MiB RDMA Write (CRC off) is in flight; the
 * payload TCP has accepted but not yet sent is rewritten in the
 * application's buffer. The peer then reads everything: those bytes arrive
 * rewritten (TCP referenced the pages, it did not copy them), every other
 * byte as posted, and the Write completes only after the peer has read.
 */
TEST(zero_copy_and_completion_on_ack)
{
	static struct kend k;
	static struct rv_sink s;
	static struct kw_rx rx;
	struct kiwarp_query_qp q;
	struct kiwarp_cqe cqe;
	struct kw_mr *mr;
	uint64_t j, tx, took;
	uint8_t *buf;
	int outq, n;
	double end;

	memset(&s, 0, sizeof(s));
	zc_stall(&k, &buf, &mr, &took, &outq, kwt_fail);
	if (*kwt_fail)
		return;
	memset(&q, 0, sizeof(q));
	ASSERT_EQ(kw_query_qp(k.qp, &q), 0);
	/*
	 * The payload among those stream bytes ends at about tx: every FPDU
	 * adds at most 23 bytes (MPA length 2, tagged header 14, pad 3, CRC
	 * field 4), so tx is a little short of it. The last outq stream bytes
	 * are still in kiwarp's send queue: rewrite payload well inside them.
	 */
	tx = took * q.mulpdu / (q.mulpdu + 24);
	ASSERT_LT(tx, ZC_LEN);
	zc_hi = tx - 4096;
	zc_lo = tx - outq / 2;
	for (j = zc_lo; j < zc_hi; j++)
		buf[j] = rv_new(j);
	printf("# about %llu of %u B payload in TCP, %d B in kiwarp's send queue: rewrote [%llu, %llu)\n",
	       (unsigned long long)tx, ZC_LEN, outq,
	       (unsigned long long)zc_lo, (unsigned long long)zc_hi);
	/* the peer reads everything */
	kw_rx_init(&rx, &zc_ops, &s, false, 0);
	rv_read(&k, &rx, &s, ZC_LEN, 60);
	printf("# peer got %llu B: %llu as expected, %llu wrong\n",
	       (unsigned long long)s.placed, (unsigned long long)s.old_bytes,
	       (unsigned long long)s.new_bytes);
	EXPECT_FALSE(kw_rx_failed(&rx));
	EXPECT_EQ(s.placed, ZC_LEN);
	EXPECT_EQ(s.old_bytes, ZC_LEN);
	EXPECT_EQ(s.out_of_range, 0);
	/* now acknowledged: the Write completes */
	end = now() + 10;
	while ((n = kw_poll_cq(k.cq, 1, &cqe)) == 0 && now() < end)
		usleep(10000);
	ASSERT_EQ(n, 1);
	EXPECT_EQ(cqe.wr_id, 1);
	EXPECT_EQ(cqe.status, KIWARP_WC_SUCCESS);
	EXPECT_EQ(kw_dereg_mr(mr), 0);
	kend_fini(&k);
	munmap(buf, ZC_LEN);
}

/*
 * The peer reads what is still on its way after the application rewrote
 * its whole buffer: every byte must be as posted.
 */
static void zc_read_after_rewrite(struct kend *k, uint8_t *buf,
				  int *kwt_fail)
{
	static struct rv_sink s;
	static struct kw_rx rx;
	uint64_t j;

	for (j = 0; j < ZC_LEN; j++)
		buf[j] = rv_new(j);
	zc_lo = zc_hi = 0;		/* every byte must be as posted */
	memset(&s, 0, sizeof(s));
	kw_rx_init(&rx, &zc_ops, &s, false, 0);
	rv_read(k, &rx, &s, ZC_LEN, 30);
	printf("# then the peer read %llu B: %llu as posted, %llu rewritten\n",
	       (unsigned long long)s.placed, (unsigned long long)s.old_bytes,
	       (unsigned long long)s.new_bytes);
	EXPECT_EQ(s.new_bytes, 0);
	EXPECT_EQ(s.out_of_range, 0);
	EXPECT_LT(s.placed, ZC_LEN);	/* the rest went with the reset */
}

/*
 * A flushed WR sent by reference completes only once TCP has let its pages
 * go. The raw peer keeps its window shut under a 16 MiB Write, then sends
 * a Terminate: the QP goes to ERROR and the Write fails, with megabytes of
 * it still in TCP. Completed at once (as an RNIC's flush), the application
 * would reuse the buffer and TCP would send the new bytes as soon as the
 * peer read. kiwarp lets TCP try for a while, resets the stream and
 * completes the Write after that: the peer reads only bytes as posted.
 */
TEST(zero_copy_flush_completes_after_tcp_let_the_pages_go)
{
	static struct kend k;
	const struct kw_term t = { .layer = KW_TERM_LAYER_RDMAP,
				   .etype = KW_TERM_RDMAP_ETYPE_REMOTE_PROT,
				   .ecode = KW_TERM_RDMAP_INV_STAG };
	uint8_t body[KW_TERM_MAX_LEN];
	struct kw_tx_msg m = { .opcode = KW_OP_TERMINATE,
			       .qn = KW_QN_TERMINATE, .msn = 1,
			       .inline_data = body };
	struct kiwarp_cqe cqe;
	struct kw_mr *mr;
	uint64_t took;
	uint8_t *buf;
	int outq, n, len;
	double t0, end;

	zc_stall(&k, &buf, &mr, &took, &outq, kwt_fail);
	if (*kwt_fail)
		return;
	len = kw_term_encode(&t, NULL, 0, body);
	ASSERT_GT(len, 0);
	m.inline_len = len;
	ASSERT_EQ(raw_send(&k, &m, body, 0), 0);
	t0 = now();
	end = t0 + 20;
	while ((n = kw_poll_cq(k.cq, 1, &cqe)) == 0 && now() < end)
		usleep(10000);
	ASSERT_EQ(n, 1);
	printf("# %d B in kiwarp's send queue; the Write completed %.1f s after the Terminate, status %u\n",
	       outq, now() - t0, cqe.status);
	EXPECT_EQ(cqe.wr_id, 1);
	EXPECT_EQ(cqe.status, KIWARP_WC_REM_ACCESS_ERR);
	zc_read_after_rewrite(&k, buf, kwt_fail);
	EXPECT_EQ(kw_dereg_mr(mr), 0);
	kend_fini(&k);
	munmap(buf, ZC_LEN);
}

/*
 * A QP that fails while its transmit is stuck behind a by-reference Write
 * the peer does not take: the raw peer sends an RDMA Write to an STag that
 * does not exist. kiwarp's Terminate goes behind the Write, which never
 * ends, so the QP stays in TERMINATE and the Write neither completes nor
 * flushes; with modify_error the application moves it to ERROR itself.
 * Either way kiwarp resets the stream a little later: the Write completes
 * (flushed), the QP is in ERROR, and nothing rewritten reaches the peer.
 */
static void zc_fail_stuck(bool modify_error, int *kwt_fail)
{
	static struct kend k;
	struct kw_tx_msg m = { .opcode = KW_OP_WRITE, .len = 100,
			       .stag = 0x12345678 };
	static uint8_t payload[100];
	struct kiwarp_query_qp q;
	struct kiwarp_cqe cqe;
	struct kw_mr *mr;
	uint64_t took;
	uint8_t *buf;
	int outq, n;
	double t0, end;

	zc_stall(&k, &buf, &mr, &took, &outq, kwt_fail);
	if (*kwt_fail)
		return;
	ASSERT_EQ(raw_send(&k, &m, payload, 0), 0);
	t0 = now();
	if (modify_error) {
		usleep(200000);		/* the Terminate is queued by then */
		ASSERT_EQ(kw_modify_qp(k.qp, KIWARP_MODIFY_ERROR), 0);
	}
	end = t0 + 20;
	while ((n = kw_poll_cq(k.cq, 1, &cqe)) == 0 && now() < end)
		usleep(10000);
	ASSERT_EQ(n, 1);
	printf("# the Write completed %.1f s after the bad FPDU, status %u\n",
	       now() - t0, cqe.status);
	EXPECT_EQ(cqe.wr_id, 1);
	EXPECT_EQ(cqe.status, KIWARP_WC_WR_FLUSH_ERR);
	memset(&q, 0, sizeof(q));
	ASSERT_EQ(kw_query_qp(k.qp, &q), 0);
	EXPECT_EQ(q.state, KIWARP_QPS_ERROR);
	zc_read_after_rewrite(&k, buf, kwt_fail);
	EXPECT_EQ(kw_dereg_mr(mr), 0);
	kend_fini(&k);
	munmap(buf, ZC_LEN);
}

TEST(zero_copy_stuck_terminate_does_not_park_the_qp)
{
	zc_fail_stuck(false, kwt_fail);
}

TEST(zero_copy_stuck_terminate_then_modify_error)
{
	zc_fail_stuck(true, kwt_fail);
}

/*
 * The same when the application destroys the QP (and deregisters, and
 * reuses the buffer) while TCP still has by-reference data and the socket
 * is still open: the stream is reset at once, not left to send the pages
 * whenever the peer opens its window.
 */
TEST(zero_copy_data_does_not_outlive_its_qp)
{
	static struct kend k;
	struct kw_mr *mr;
	uint64_t took;
	uint8_t *buf;
	int outq;

	zc_stall(&k, &buf, &mr, &took, &outq, kwt_fail);
	if (*kwt_fail)
		return;
	EXPECT_EQ(kw_destroy_qp(k.qp), 0);
	k.qp = NULL;
	EXPECT_EQ(kw_dereg_mr(mr), 0);
	printf("# destroyed with %d B in kiwarp's send queue\n", outq);
	zc_read_after_rewrite(&k, buf, kwt_fail);
	kend_fini(&k);
	munmap(buf, ZC_LEN);
}

/*
 * Copied messages of 8 KiB or more are copied by kiwarp into stream pages
 * that TCP takes by reference, and a page is written again only once no
 * skb holds it (tx.c, "Stream pages"). A peer on the same host that
 * reads nothing keeps every skb, and so every page: messages posted after
 * the first ones completed (copied: complete once TCP has them) must go in
 * other pages. The application alternates what its buffer holds (message
 * k at offset k * LEN: as posted for even k, rewritten for odd k), and
 * the peer, reading at last, must get every message as it was posted.
 */
TEST(stream_pages_not_reused_while_an_unread_local_peer_holds_them)
{
	enum { LEN = 12 << 10, N = 16 };
	static struct kend k;
	static struct rv_sink s;
	static struct kw_rx rx;
	struct kiwarp_cqe cqe;
	struct kw_mr *mr;
	uint8_t *buf;
	uint64_t j;
	int i, inq = 0, outq = 0, n;
	double end;

	memset(&k, 0, sizeof(k));
	memset(&s, 0, sizeof(s));
	ASSERT_EQ(kend_init(&k), 0);	/* copy_max 16 KiB: LEN is copied */
	ASSERT_EQ(raw_connect(&k), 0);
	ASSERT_EQ(rp_send_rtr(&(struct rp){ k.raw, k.crc }, KW_OP_WRITE), 0);
	buf = mmap(NULL, LEN, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_TRUE(buf != MAP_FAILED);
	ASSERT_EQ(kw_reg_mr(k.pd, buf, LEN, KIWARP_ACCESS_LOCAL_WRITE, &mr), 0);
	for (i = 0; i < N; i++) {
		uint64_t base = (uint64_t)i * LEN;
		struct kiwarp_sge sge = { .addr = (uintptr_t)buf,
					  .length = LEN, .lkey = mr->stag };
		struct kw_send_wr wr = {
			.wr_id = i, .opcode = KIWARP_WR_RDMA_WRITE,
			.flags = KW_SEND_SIGNALED, .num_sge = 1,
			.sg_list = &sge, .remote_addr = base, .rkey = ZC_STAG,
		};

		for (j = 0; j < LEN; j++)
			buf[j] = i & 1 ? rv_new(base + j) : rv_old(base + j);
		ASSERT_EQ(kw_post_send(k.qp, &wr, 1), 1);
		end = now() + 20;
		while ((n = kw_poll_cq(k.cq, 1, &cqe)) == 0 && now() < end)
			usleep(1000);
		ASSERT_EQ(n, 1);
		EXPECT_EQ(cqe.wr_id, (uint64_t)i);
		EXPECT_EQ(cqe.status, KIWARP_WC_SUCCESS);
	}
	ASSERT_EQ(ioctl(k.raw, FIONREAD, &inq), 0);
	ASSERT_EQ(ioctl(k.sock, SIOCOUTQ, &outq), 0);
	printf("# %d messages completed: %d B unread at the peer, %d B in kiwarp's send queue\n",
	       N, inq, outq);
	EXPECT_GT(inq + outq, N * LEN);	/* all of it, not read yet */
	memset(buf, 0, LEN);		/* and the buffer is reused again */
	zc_period = LEN;
	kw_rx_init(&rx, &zc_ops, &s, false, 0);
	rv_read(&k, &rx, &s, (uint64_t)N * LEN, 30);
	zc_period = 0;
	printf("# peer got %llu B: %llu as posted, %llu not\n",
	       (unsigned long long)s.placed, (unsigned long long)s.old_bytes,
	       (unsigned long long)s.new_bytes);
	EXPECT_FALSE(kw_rx_failed(&rx));
	EXPECT_EQ(s.placed, (uint64_t)N * LEN);
	EXPECT_EQ(s.old_bytes, (uint64_t)N * LEN);
	EXPECT_EQ(s.new_bytes, 0);
	EXPECT_EQ(kw_dereg_mr(mr), 0);
	kend_fini(&k);
	munmap(buf, LEN);
}

#define KW_PARAM "/sys/module/kiwarp/parameters/"

static int write_param(const char *name, long v)
{
	char path[128];
	FILE *f;
	int ret;

	snprintf(path, sizeof(path), KW_PARAM "%s", name);
	f = fopen(path, "w");
	if (!f)
		return -errno;
	ret = fprintf(f, "%ld\n", v) < 0 ? -EIO : 0;
	if (fclose(f))
		ret = -errno;
	return ret;
}

/* One copied Write of len bytes to the raw peer's ZC_STAG at off; waits
 * for its completion. */
static int stream_write(struct kend *k, struct kw_mr *mr, uint8_t *buf,
			uint32_t len, uint64_t off)
{
	struct kiwarp_sge sge = { .addr = (uintptr_t)buf, .length = len,
				  .lkey = mr->stag };
	struct kw_send_wr wr = {
		.wr_id = off, .opcode = KIWARP_WR_RDMA_WRITE,
		.flags = KW_SEND_SIGNALED, .num_sge = 1, .sg_list = &sge,
		.remote_addr = off, .rkey = ZC_STAG,
	};
	struct kiwarp_cqe cqe;
	double end = now() + 20;
	int n;

	if (kw_post_send(k->qp, &wr, 1) != 1)
		return -EIO;
	while ((n = kw_poll_cq(k->cq, 1, &cqe)) == 0 && now() < end)
		usleep(1000);
	if (n != 1 || cqe.wr_id != off || cqe.status != KIWARP_WC_SUCCESS)
		return -EIO;
	return 0;
}

/* Runs body with the stream-page pool set to kb KiB, then restores it
 * (also when body failed an ASSERT). */
static void with_pool_kb(int *kwt_fail, long kb, void (*body)(int *))
{
	long saved = kw_read_long(KW_PARAM "tx_pool_kb");

	ASSERT_GE(saved, 0);
	ASSERT_EQ(write_param("tx_pool_kb", kb), 0);
	body(kwt_fail);
	EXPECT_EQ(write_param("tx_pool_kb", saved), 0);
}

static long pool_used_kb(void)
{
	return kw_read_long(KW_PARAM "tx_pool_used_kb");
}

/* n copied Writes of LEN from k, message i at i * LEN with the pattern
 * zc_period = LEN expects: old bytes, new bytes, old, ... */
enum { POOL_LEN = 12 << 10 };

static int pool_writes(struct kend *k, struct kw_mr *mr, uint8_t *buf,
		       int from, int n)
{
	int i, ret;

	for (i = from; i < from + n; i++) {
		uint64_t off = (uint64_t)i * POOL_LEN, j;

		for (j = 0; j < POOL_LEN; j++)
			buf[j] = i & 1 ? rv_new(off + j) : rv_old(off + j);
		ret = stream_write(k, mr, buf, POOL_LEN, off);
		if (ret)
			return ret;
	}
	return 0;
}

/* A QP whose raw peer on this host reads nothing yet; copy_max 16 KiB, so
 * POOL_LEN goes through the stream pages. */
static int pool_qp(struct kend *k, uint8_t *buf, struct kw_mr **mr)
{
	int ret;

	memset(k, 0, sizeof(*k));
	if ((ret = kend_init(k)) || (ret = raw_connect(k)) ||
	    (ret = rp_send_rtr(&(struct rp){ k->raw, k->crc }, KW_OP_WRITE)))
		return ret;
	return kw_reg_mr(k->pd, buf, POOL_LEN, KIWARP_ACCESS_LOCAL_WRITE, mr);
}

/* The peer of k reads n messages; every byte as posted. */
static void pool_check_peer(int *kwt_fail, struct kend *k, int n)
{
	static struct rv_sink s;
	static struct kw_rx rx;

	memset(&s, 0, sizeof(s));
	zc_period = POOL_LEN;
	kw_rx_init(&rx, &zc_ops, &s, false, 0);
	rv_read(k, &rx, &s, (uint64_t)n * POOL_LEN, 30);
	zc_period = 0;
	printf("# peer got %llu B: %llu as posted, %llu not\n",
	       (unsigned long long)s.placed, (unsigned long long)s.old_bytes,
	       (unsigned long long)s.new_bytes);
	EXPECT_FALSE(kw_rx_failed(&rx));
	EXPECT_EQ(s.placed, (uint64_t)n * POOL_LEN);
	EXPECT_EQ(s.old_bytes, (uint64_t)n * POOL_LEN);
	EXPECT_EQ(s.new_bytes, 0);
}

/*
 * Each QP with stream pages keeps at most an even share of the pool. With
 * the pool at 512 KiB (64 chunks of 8 KiB), QP A alone grows past what
 * each of four QPs may keep (16 chunks), every chunk held by a peer on
 * this host that reads nothing. Three more QPs take chunks; A's next
 * message must let its oldest go: the pool's reference only, as the peer
 * still holds them. The peer must then read every byte A sent as posted,
 * although A rewrote its buffer after each completion, and once the QPs
 * are gone the pool is empty again. Fails without the share (A keeps its
 * chunks).
 */
static void pool_share_body(int *kwt_fail)
{
	enum { N1 = 12, N2 = 4, M = 3 };
	static struct kend a, o[M];
	struct kw_mr *mr, *omr[M];
	long base = pool_used_kb(), alone, four, after;
	uint8_t *buf;
	int m;

	ASSERT_GE(base, 0);
	buf = mmap(NULL, POOL_LEN, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_TRUE(buf != MAP_FAILED);
	ASSERT_EQ(pool_qp(&a, buf, &mr), 0);
	ASSERT_EQ(pool_writes(&a, mr, buf, 0, N1), 0);
	alone = pool_used_kb() - base;
	for (m = 0; m < M; m++) {
		ASSERT_EQ(pool_qp(&o[m], buf, &omr[m]), 0);
		ASSERT_EQ(stream_write(&o[m], omr[m], buf, POOL_LEN, 0), 0);
	}
	four = pool_used_kb() - base;
	ASSERT_EQ(pool_writes(&a, mr, buf, N1, N2), 0);
	after = pool_used_kb() - base;
	printf("# pool: A alone %ld KiB, with three more QPs %ld KiB, after A's next %d messages %ld KiB\n",
	       alone, four, N2, after);
	EXPECT_GT(alone, 16 * 8);		/* past a four-way share */
	EXPECT_LT(after, four);			/* A let chunks go */
	EXPECT_LE(after, (16 + M * 3) * 8);	/* A's share, the others' few */
	memset(buf, 0, POOL_LEN);
	pool_check_peer(kwt_fail, &a, N1 + N2);
	for (m = 0; m < M; m++) {
		EXPECT_EQ(kw_dereg_mr(omr[m]), 0);
		kend_fini(&o[m]);
	}
	EXPECT_EQ(kw_dereg_mr(mr), 0);
	kend_fini(&a);
	munmap(buf, POOL_LEN);
	EXPECT_EQ(pool_used_kb(), base);
}

TEST(stream_pool_share_drops_chunks_an_unread_peer_still_holds)
{
	with_pool_kb(kwt_fail, 512, pool_share_body);
}

/*
 * An idle QP does not keep others out of the pool. With the pool at
 * 128 KiB (16 chunks), QP A alone fills it (its peer reads nothing) and
 * goes idle. QP B's first message finds the pool full: the reclaim work
 * must trim A, which is not sending, to a two-way share (8 chunks).
 * A's peer must still read every byte A sent, before and after. Fails
 * without the reclaim (A keeps the whole pool).
 */
static void pool_reclaim_body(int *kwt_fail)
{
	enum { N1 = 12, N2 = 4 };
	static struct kend a, b;
	struct kw_mr *mr, *bmr;
	long base = pool_used_kb(), full, trimmed;
	uint8_t *buf;
	double end;

	ASSERT_GE(base, 0);
	buf = mmap(NULL, POOL_LEN, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_TRUE(buf != MAP_FAILED);
	ASSERT_EQ(pool_qp(&a, buf, &mr), 0);
	ASSERT_EQ(pool_writes(&a, mr, buf, 0, N1), 0);
	full = pool_used_kb() - base;
	ASSERT_EQ(pool_qp(&b, buf, &bmr), 0);
	ASSERT_EQ(stream_write(&b, bmr, buf, POOL_LEN, 0), 0);
	end = now() + 5;
	do {			/* the work runs soon after B's try */
		usleep(20000);
		trimmed = pool_used_kb() - base;
	} while (trimmed > 8 * 8 + 16 && now() < end);
	printf("# pool: A alone %ld KiB, after B's first message %ld KiB\n",
	       full, trimmed);
	EXPECT_GE(full, 128 - 8);		/* A filled it */
	EXPECT_LE(trimmed, 8 * 8 + 16);		/* A's half, B's first chunks */
	ASSERT_EQ(pool_writes(&a, mr, buf, N1, N2), 0);
	memset(buf, 0, POOL_LEN);
	pool_check_peer(kwt_fail, &a, N1 + N2);
	EXPECT_EQ(kw_dereg_mr(bmr), 0);
	kend_fini(&b);
	EXPECT_EQ(kw_dereg_mr(mr), 0);
	kend_fini(&a);
	munmap(buf, POOL_LEN);
	EXPECT_EQ(pool_used_kb(), base);
}

TEST(stream_pool_reclaim_trims_an_idle_qp_for_a_new_one)
{
	with_pool_kb(kwt_fail, 128, pool_reclaim_body);
}

/*
 * The attacker's side of completion on ACK: a peer on the same host that
 * leaves its socket unread. TCP acknowledges what it queued there, and
 * once skbs carried our pages into that queue, an ACK says nothing about
 * the pages. A 48 KiB Write (by reference: over copy_max, and within the
 * peer's initial receive window) goes to the raw peer, which reads nothing until the Write completed and the
 * application rewrote its whole buffer (as a server would, for its next
 * client). The peer must then read the bytes as they were posted: kiwarp
 * completes a WR only once no skb holds its pages (here: local delivery
 * copied them), never the rewritten ones.
 */
TEST(zero_copy_completion_leaks_nothing_to_an_unread_local_peer)
{
	static struct kend k;
	static struct rv_sink s;
	static struct kw_rx rx;
	const uint32_t len = 48U << 10;
	struct kiwarp_cqe cqe;
	struct kw_mr *mr;
	uint8_t *buf;
	uint64_t j;
	int inq = 0, n;
	double end;

	memset(&k, 0, sizeof(k));
	memset(&s, 0, sizeof(s));
	ASSERT_EQ(kend_init(&k), 0);
	ASSERT_EQ(raw_connect(&k), 0);
	ASSERT_EQ(rp_send_rtr(&(struct rp){ k.raw, k.crc }, KW_OP_WRITE), 0);
	buf = mmap(NULL, ZC_LEN, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_TRUE(buf != MAP_FAILED);
	for (j = 0; j < len; j++)
		buf[j] = rv_old(j);
	ASSERT_EQ(kw_reg_mr(k.pd, buf, len, KIWARP_ACCESS_LOCAL_WRITE, &mr), 0);
	{
		struct kiwarp_sge sge = { .addr = (uintptr_t)buf,
					  .length = len, .lkey = mr->stag };
		struct kw_send_wr wr = {
			.wr_id = 2, .opcode = KIWARP_WR_RDMA_WRITE,
			.flags = KW_SEND_SIGNALED, .num_sge = 1,
			.sg_list = &sge, .remote_addr = 0, .rkey = ZC_STAG,
		};

		ASSERT_EQ(kw_post_send(k.qp, &wr, 1), 1);
	}
	end = now() + 20;
	while ((n = kw_poll_cq(k.cq, 1, &cqe)) == 0 && now() < end)
		usleep(10000);
	ASSERT_EQ(n, 1);
	EXPECT_EQ(cqe.wr_id, 2);
	EXPECT_EQ(cqe.status, KIWARP_WC_SUCCESS);
	ASSERT_EQ(ioctl(k.raw, FIONREAD, &inq), 0);
	printf("# completed with %d B unread at the peer\n", inq);
	EXPECT_GT(inq, (int)len);	/* all of it, not read yet */
	{	/* not a kiwarp QP: no plain reference (KIWARP_QPQ_TX_LOCAL) */
		struct kiwarp_query_qp q;

		memset(&q, 0, sizeof(q));
		ASSERT_EQ(kw_query_qp(k.qp, &q), 0);
		EXPECT_EQ(q.flags & KIWARP_QPQ_TX_LOCAL, 0u);
	}
	/* the application reuses its buffer, as the completion allows */
	for (j = 0; j < len; j++)
		buf[j] = rv_new(j);
	zc_lo = zc_hi = 0;		/* every byte must be as posted */
	kw_rx_init(&rx, &zc_ops, &s, false, 0);
	rv_read(&k, &rx, &s, len, 30);
	printf("# peer got %llu B: %llu as posted, %llu rewritten after the completion\n",
	       (unsigned long long)s.placed, (unsigned long long)s.old_bytes,
	       (unsigned long long)s.new_bytes);
	EXPECT_FALSE(kw_rx_failed(&rx));
	EXPECT_EQ(s.placed, len);
	EXPECT_EQ(s.old_bytes, len);
	EXPECT_EQ(s.new_bytes, 0);
	EXPECT_EQ(kw_dereg_mr(mr), 0);
	kend_fini(&k);
	munmap(buf, ZC_LEN);
}
