// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Receive parser (kw_rx_input): placement, chunking invariance, and every
 * Terminate case with its exact layer / error type / error code.
 */
#include "harness.h"
#include "testlib.h"
#include "../vm/kw_markref.h"

static u8 stream[8192];

/* Feed the whole stream with chunk size step (0 = one call). */
static size_t feed(struct kw_rx *rx, const u8 *p, size_t len, size_t step)
{
	size_t done = 0;

	if (!step)
		return kw_rx_input(rx, p, len);
	while (done < len) {
		size_t n = len - done < step ? len - done : step;
		size_t c = kw_rx_input(rx, p + done, n);

		done += c;
		if (c < n)
			break;
	}
	return done;
}

struct run {
	struct world w;
	struct kw_rx rx;
	size_t consumed;
};

static void run_stream(struct run *r, const u8 *p, size_t len, bool crc,
		       size_t step)
{
	world_init(&r->w);
	kw_rx_init(&r->rx, &w_ops, &r->w, crc, W_PD);
	r->consumed = feed(&r->rx, p, len, step);
}

/* A stream of mixed messages used by the chunking tests. */
static int mixed_stream(u8 *out, bool crc)
{
	struct kw_read_req rr = { 0x200, 0x2000, 64, 0x77, 0x9000 };
	u8 body[28];
	struct kw_tx_msg m;
	int n = 0, k;

	pattern_init();
	m = msg_send(1, 110, crc);
	m.mulpdu = 60;
	k = build_msg(&m, pattern, out + n, 8192 - n);
	n += k;
	m = msg_write(W_STAG, 0x1003, 200, crc);
	m.mulpdu = 77;
	k = build_msg(&m, pattern + 5, out + n, 8192 - n);
	n += k;
	kw_read_req_encode(&rr, body);
	m = (struct kw_tx_msg){ .opcode = KW_OP_READ_REQ, .crc = crc,
		.mulpdu = 1000, .qn = 1, .msn = 1, .inline_data = body,
		.inline_len = 28 };
	k = build_msg(&m, NULL, out + n, 8192 - n);
	n += k;
	m = msg_write(0xdead, 0, 0, crc);		/* RTR-like */
	k = build_msg(&m, NULL, out + n, 8192 - n);
	n += k;
	m = msg_send(2, 0, crc);
	k = build_msg(&m, NULL, out + n, 8192 - n);
	n += k;
	m = (struct kw_tx_msg){ .opcode = KW_OP_READ_RESP, .crc = crc,
		.mulpdu = 1000, .len = 20, .stag = W_STAG_LOCAL, .to = 0x20e8 };
	k = build_msg(&m, pattern + 9, out + n, 8192 - n);
	n += k;
	return n;
}

static void check_mixed(int *kwt_fail, struct run *r, size_t n)
{
	int i;

	ASSERT_EQ(r->consumed, n);
	ASSERT_FALSE(kw_rx_failed(&r->rx));
	ASSERT_EQ(r->rx.state, KW_RX_HDR);
	ASSERT_EQ(r->rx.hdr_got, 0);
	/* 2 Send FPDUs (110 = 42 + 42 + 26 -> 3), 4 Write FPDUs (63 each),
	 * Read Request, zero Write, zero Send, Read Response */
	ASSERT_EQ(r->w.nseg, 3 + 4 + 1 + 1 + 1 + 1);
	EXPECT_EQ(r->rx.fpdus, 11);
	EXPECT_EQ(r->rx.payload_bytes, 110 + 200 + 28 + 0 + 0 + 20);
	/* Send: 10 bytes in sge0 (mem1 + 0), 100 in sge1 (mem1 + 0x80) */
	EXPECT_MEMEQ(r->w.mem[1], pattern, 10);
	EXPECT_MEMEQ(r->w.mem[1] + 0x80, pattern + 10, 100);
	/* Write at 0x1003 of MR base 0x1000 */
	EXPECT_MEMEQ(r->w.mem[0] + 3, pattern + 5, 200);
	/* Read Response at 0x20f0 (overwrites nothing of the Send) */
	EXPECT_MEMEQ(r->w.mem[1] + 0xe8, pattern + 9, 20);
	EXPECT_EQ(r->w.seg[7].opcode, KW_OP_READ_REQ);
	EXPECT_TRUE(r->w.inl_valid[7]);
	EXPECT_EQ(r->w.placed[7], 28);
	EXPECT_EQ(get_unaligned_be32(r->w.inl[7] + 12), 64);
	EXPECT_EQ(r->w.seg[8].opcode, KW_OP_WRITE);
	EXPECT_EQ(r->w.placed[8], 0);
	EXPECT_EQ(r->w.seg[8].stag, 0xdead);
	for (i = 0; i < r->w.nseg; i++)
		EXPECT_EQ(r->w.seg[i].last, i == 2 || i >= 6);
	EXPECT_EQ(r->rx.msn[0], 3);
	EXPECT_EQ(r->rx.msn[1], 2);
	EXPECT_EQ(r->rx.msn[2], 1);
}

TEST(rx_mixed_one_chunk_nocrc)
{
	static struct run r;
	int n = mixed_stream(stream, false);

	run_stream(&r, stream, n, false, 0);
	check_mixed(kwt_fail, &r, n);
}

TEST(rx_mixed_one_chunk_crc)
{
	static struct run r;
	int n = mixed_stream(stream, true);

	run_stream(&r, stream, n, true, 0);
	check_mixed(kwt_fail, &r, n);
}

TEST(rx_bytewise_equals_one_chunk)
{
	static struct run a, b;
	size_t steps[] = { 1, 2, 3, 5, 7, 13, 64 };
	unsigned int i;
	int crc;

	for (crc = 0; crc < 2; crc++) {
		int n = mixed_stream(stream, crc);

		run_stream(&a, stream, n, crc, 0);
		for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
			run_stream(&b, stream, n, crc, steps[i]);
			check_mixed(kwt_fail, &b, n);
			ASSERT_EQ(b.w.nseg, a.w.nseg);
			ASSERT_MEMEQ(b.w.mem, a.w.mem, sizeof(a.w.mem));
			ASSERT_MEMEQ(b.w.seg, a.w.seg, sizeof(a.w.seg));
			ASSERT_MEMEQ(b.w.placed, a.w.placed,
				     sizeof(a.w.placed));
			ASSERT_EQ(b.rx.payload_bytes, a.rx.payload_bytes);
		}
	}
}

TEST(rx_send_split_across_sges)
{
	static struct run r;
	struct kw_tx_msg m = msg_send(1, 110, false);
	int n;

	pattern_init();
	n = build_msg(&m, pattern, stream, sizeof(stream));
	run_stream(&r, stream, n, false, 0);
	ASSERT_FALSE(kw_rx_failed(&r.rx));
	EXPECT_EQ(r.w.nplace, 2);
	EXPECT_MEMEQ(r.w.mem[1], pattern, 10);
	EXPECT_MEMEQ(r.w.mem[1] + 0x80, pattern + 10, 100);
	EXPECT_EQ(r.w.mem[1][10], 0);
}

/* --- Terminate cases ------------------------------------------------- */

#define EXPECT_TERM(r, l, e, c)						\
	do {								\
		ASSERT_TRUE(kw_rx_failed(&(r)->rx));			\
		EXPECT_EQ((r)->rx.term.layer, l);			\
		EXPECT_EQ((r)->rx.term.etype, e);			\
		EXPECT_EQ((r)->rx.term.ecode, c);			\
	} while (0)

static struct run tr;

static void run_one(const struct kw_tx_msg *m, const u8 *pl,
		    void (*mut)(u8 *), struct world *pre)
{
	int n = build_msg(m, pl, stream, sizeof(stream));

	if (mut)
		mut(stream);
	if (m->crc)
		fix_crc(stream);
	world_init(&tr.w);
	if (pre)
		tr.w = *pre;
	kw_rx_init(&tr.rx, &w_ops, &tr.w, m->crc, W_PD);
	tr.consumed = kw_rx_input(&tr.rx, stream, n);
}

static void mut_ddp_ver0(u8 *p) { p[2] &= ~KW_DDP_VERSION_MASK; }
static void mut_ddp_ver2(u8 *p) { p[2] = (p[2] & ~3) | 2; }
static void mut_rdmap_ver(u8 *p) { p[3] = (p[3] & 0x3f); }
static void mut_opcode8(u8 *p) { p[3] = (p[3] & 0xf0) | 8; }
static void mut_opcode15(u8 *p) { p[3] = (p[3] & 0xf0) | 15; }
static void mut_untag_to_write(u8 *p) { p[3] = (p[3] & 0xf0) | 0; }
static void mut_qn3(u8 *p) { put_unaligned_be32(3, p + 8); }
static void mut_qn1(u8 *p) { put_unaligned_be32(1, p + 8); }
static void mut_msn2(u8 *p) { put_unaligned_be32(2, p + 12); }
static void mut_mo4(u8 *p) { put_unaligned_be32(4, p + 16); }
static void mut_mo100(u8 *p) { put_unaligned_be32(100, p + 16); }
static void mut_mo200(u8 *p) { put_unaligned_be32(200, p + 16); }
static void mut_mo110(u8 *p) { put_unaligned_be32(110, p + 16); }
static void mut_len13(u8 *p) { put_unaligned_be16(13, p); }

TEST(term_ddp_version_tagged)
{
	struct kw_tx_msg m = msg_write(W_STAG, 0x1000, 8, false);

	run_one(&m, pattern, mut_ddp_ver0, NULL);
	EXPECT_TERM(&tr, 1, 1, 4);
	EXPECT_TRUE(tr.rx.term.has_len);
	EXPECT_TRUE(tr.rx.term.has_ddp_hdr);
	EXPECT_FALSE(tr.rx.term.has_rdmap_hdr);
	EXPECT_EQ(tr.consumed, 16);	/* stopped right after the header */
	EXPECT_EQ(tr.rx.bad_len, 16);
	EXPECT_EQ(tr.w.nplace, 0);
}

TEST(term_ddp_version_untagged)
{
	struct kw_tx_msg m = msg_send(1, 8, false);

	run_one(&m, pattern, mut_ddp_ver2, NULL);
	EXPECT_TERM(&tr, 1, 2, 6);
	EXPECT_EQ(tr.consumed, 20);
	EXPECT_EQ(tr.w.nget, 0);
}

TEST(term_rdmap_version)
{
	struct kw_tx_msg m = msg_send(1, 8, false);

	run_one(&m, pattern, mut_rdmap_ver, NULL);
	EXPECT_TERM(&tr, 0, 2, 5);
}

TEST(term_opcode_reserved)
{
	struct kw_tx_msg m = msg_send(1, 8, false);

	run_one(&m, pattern, mut_opcode8, NULL);
	EXPECT_TERM(&tr, 0, 2, 6);
	run_one(&m, pattern, mut_opcode15, NULL);
	EXPECT_TERM(&tr, 0, 2, 6);
}

TEST(term_opcode_wrong_tagging)
{
	struct kw_tx_msg m = msg_send(1, 8, false);
	struct kw_tx_msg w = msg_write(W_STAG, 0x1000, 8, false);

	/* untagged Write */
	run_one(&m, pattern, mut_untag_to_write, NULL);
	EXPECT_TERM(&tr, 0, 2, 6);
	/* tagged Send */
	w.opcode = KW_OP_WRITE;
	run_one(&w, pattern, mut_opcode8, NULL);
	EXPECT_TERM(&tr, 0, 2, 6);
	w.opcode = KW_OP_WRITE;
	run_one(&w, pattern, NULL, NULL);
	ASSERT_FALSE(kw_rx_failed(&tr.rx));
	/* tagged with Send opcode (3) */
	{
		int n = build_msg(&w, pattern, stream, sizeof(stream));

		stream[3] = 0x43;
		world_init(&tr.w);
		kw_rx_init(&tr.rx, &w_ops, &tr.w, false, W_PD);
		kw_rx_input(&tr.rx, stream, n);
		EXPECT_TERM(&tr, 0, 2, 6);
	}
}

TEST(term_ulpdu_shorter_than_header)
{
	struct kw_tx_msg m = msg_write(W_STAG, 0x1000, 8, false);

	run_one(&m, pattern, mut_len13, NULL);
	EXPECT_TERM(&tr, 1, 0, 0);
	/* the verdict comes with the control byte, before the parser could
	 * take the next FPDU's bytes for the rest of this header */
	EXPECT_EQ(tr.consumed, 4);
	EXPECT_FALSE(tr.rx.term.has_ddp_hdr);
}

TEST(verified_minimal_fpdu_shorter_than_header)
{
	/* An 8-byte FPDU (ULPDU length 0) with a good CRC, verified ahead,
	 * then more bytes: the parser stops inside it, with DDP 1/0/0,
	 * and never reaches the bytes the caller did not verify. */
	u8 f[16] = { 0, 0, 0x41, 0x43 };

	fix_crc(f);
	memset(f + 8, 0x41, 8);
	world_init(&tr.w);
	kw_rx_init(&tr.rx, &w_ops, &tr.w, true, W_PD);
	kw_rx_verified(&tr.rx);
	tr.consumed = kw_rx_input(&tr.rx, f, sizeof(f));
	EXPECT_TERM(&tr, 1, 0, 0);
	EXPECT_LE(tr.consumed, 8);
	EXPECT_EQ(tr.w.nplace, 0);
}

TEST(term_invalid_qn)
{
	struct kw_tx_msg m = msg_send(1, 8, false);

	run_one(&m, pattern, mut_qn3, NULL);
	EXPECT_TERM(&tr, 1, 2, 1);
	/* a Send on the Read Request queue */
	run_one(&m, pattern, mut_qn1, NULL);
	EXPECT_TERM(&tr, 1, 2, 1);
}

TEST(term_msn_range)
{
	struct kw_tx_msg m = msg_send(1, 8, false);

	run_one(&m, pattern, mut_msn2, NULL);
	EXPECT_TERM(&tr, 1, 2, 3);
	EXPECT_EQ(tr.w.nget, 0);
}

TEST(msn_advances_per_message)
{
	static struct run r;
	struct kw_tx_msg m = msg_send(1, 60, false);
	int n, k;

	m.mulpdu = 40;		/* 3 FPDUs for MSN 1 */
	n = build_msg(&m, pattern, stream, sizeof(stream));
	m.msn = 2;
	n += build_msg(&m, pattern, stream + n, sizeof(stream) - n);
	k = n;
	m.msn = 2;		/* repeat: now out of range */
	n += build_msg(&m, pattern, stream + n, sizeof(stream) - n);
	run_stream(&r, stream, n, false, 0);
	EXPECT_EQ(r.w.nseg, 6);
	EXPECT_EQ(r.rx.msn[0], 3);
	ASSERT_TRUE(kw_rx_failed(&r.rx));
	EXPECT_EQ(r.rx.term.ecode, KW_TERM_DDP_U_INV_MSN_RANGE);
	EXPECT_EQ(r.consumed, (size_t)k + 20);
}

TEST(term_no_rx_buffer)
{
	struct kw_tx_msg m = msg_send(1, 8, false);
	struct world w;

	world_init(&w);
	w.have_rbuf = false;
	run_one(&m, pattern, NULL, &w);
	EXPECT_TERM(&tr, 1, 2, 2);
}

TEST(term_msg_too_long)
{
	struct kw_tx_msg m = msg_send(1, 111, false);

	run_one(&m, pattern, NULL, NULL);
	EXPECT_TERM(&tr, 1, 2, 5);
	EXPECT_EQ(tr.w.nplace, 0);
	/* MO pushes a short segment beyond the buffer */
	m.len = 20;
	run_one(&m, pattern, mut_mo100, NULL);
	EXPECT_TERM(&tr, 1, 2, 5);
}

/* RFC 5041 sections 7.1 (check 3) and 7.2: an MO outside the buffer is
 * "Invalid MO", not "Message too long" */
TEST(term_mo_outside_buffer)
{
	struct kw_tx_msg m = msg_send(1, 20, false);

	run_one(&m, pattern, mut_mo200, NULL);
	EXPECT_TERM(&tr, 1, 2, 4);
	EXPECT_EQ(tr.w.nplace, 0);
	/* at the very end, with bytes to place: too long */
	run_one(&m, pattern, mut_mo110, NULL);
	EXPECT_TERM(&tr, 1, 2, 5);
}

/* Our own posted buffer is unusable: RDMAP local catastrophic, without the
 * DDP header (RFC 5040 section 4.8), not DDP "no buffer" (the peer's) */
TEST(term_bad_posted_buffer_is_local)
{
	struct kw_tx_msg m = msg_send(1, 8, false);
	struct world w;

	world_init(&w);
	w.rbuf_err = -EFAULT;
	run_one(&m, pattern, NULL, &w);
	EXPECT_TERM(&tr, 0, 0, 0);
	EXPECT_FALSE(tr.rx.term.has_len);
	EXPECT_FALSE(tr.rx.term.has_ddp_hdr);
	EXPECT_EQ(tr.w.nplace, 0);
}

TEST(term_sge_without_local_write)
{
	struct kw_tx_msg m = msg_send(1, 50, false);
	struct world w;

	world_init(&w);
	w.rbuf.sge[1].mr.access = KW_ACC_REMOTE_READ;
	run_one(&m, pattern, NULL, &w);
	EXPECT_TERM(&tr, 0, 0, 0);
	EXPECT_FALSE(tr.rx.term.has_len);	/* local: no headers */
	EXPECT_FALSE(tr.rx.term.has_ddp_hdr);
	EXPECT_EQ(tr.w.nplace, 0);
	/* only SGE 0 touched: fine */
	m.len = 10;
	run_one(&m, pattern, NULL, &w);
	EXPECT_FALSE(kw_rx_failed(&tr.rx));
	/* invalidated MR behind an SGE */
	world_init(&w);
	w.rbuf.sge[0].mr.valid = false;
	run_one(&m, pattern, NULL, &w);
	EXPECT_TERM(&tr, 0, 0, 0);
	/* SGE outside its MR */
	world_init(&w);
	w.rbuf.sge[1].addr = 0x2000 + 200;
	m.len = 50;
	run_one(&m, pattern, NULL, &w);
	EXPECT_TERM(&tr, 0, 0, 0);
}

static void rreq(struct kw_tx_msg *m, u8 *body, u32 len)
{
	struct kw_read_req r = { 0x300, 0x4000, 512, W_STAG, 0x1000 };

	kw_read_req_encode(&r, body);
	*m = (struct kw_tx_msg){ .opcode = KW_OP_READ_REQ, .mulpdu = 1000,
		.qn = 1, .msn = 1, .inline_data = body, .inline_len = len };
}

TEST(term_read_req_bad_mo)
{
	struct kw_tx_msg m;
	u8 body[64];

	rreq(&m, body, 28);
	run_one(&m, NULL, mut_mo4, NULL);
	EXPECT_TERM(&tr, 1, 2, 4);
}

TEST(term_read_req_bad_length)
{
	struct kw_tx_msg m;
	u8 body[64] = { 0 };
	int n;

	rreq(&m, body, 28);
	n = build_msg(&m, NULL, stream, sizeof(stream));
	ASSERT_EQ(n, 2 + 46 + 4);
	/* claim 47 bytes of ULPDU */
	put_unaligned_be16(47, stream);
	world_init(&tr.w);
	kw_rx_init(&tr.rx, &w_ops, &tr.w, false, W_PD);
	kw_rx_input(&tr.rx, stream, n);
	EXPECT_TERM(&tr, 0, 2, 7);
	EXPECT_EQ(tr.w.nseg, 0);
}

TEST(term_read_req_not_last)
{
	struct kw_tx_msg m;
	u8 body[64];
	int n;

	rreq(&m, body, 28);
	n = build_msg(&m, NULL, stream, sizeof(stream));
	stream[2] &= ~KW_DDP_FLAG_LAST;
	world_init(&tr.w);
	kw_rx_init(&tr.rx, &w_ops, &tr.w, false, W_PD);
	kw_rx_input(&tr.rx, stream, n);
	EXPECT_TERM(&tr, 0, 2, 7);
}

TEST(term_from_segment_done_read_req)
{
	struct kw_tx_msg m;
	u8 body[64], out[KW_TERM_MAX_LEN];
	struct world w;
	int n;

	/* The glue refuses the source STag: RDMAP Remote Protection, which
	 * returns the Read Request header too (RFC 5040 Figure 10). */
	rreq(&m, body, 28);
	world_init(&w);
	w.done_ret = -EPROTO;
	w.done_term = (struct kw_term){ .layer = 0, .etype = 1, .ecode = 0 };
	n = build_msg(&m, NULL, stream, sizeof(stream));
	run_one(&m, NULL, NULL, &w);
	EXPECT_TERM(&tr, 0, 1, 0);
	EXPECT_EQ(tr.consumed, (size_t)n);	/* whole FPDU consumed */
	EXPECT_EQ(tr.w.nseg, 1);
	EXPECT_EQ(tr.rx.msn[1], 1);		/* not advanced */
	EXPECT_TRUE(tr.rx.term.has_len);
	EXPECT_TRUE(tr.rx.term.has_ddp_hdr);
	EXPECT_TRUE(tr.rx.term.has_rdmap_hdr);
	ASSERT_EQ(tr.rx.bad_len, 48);
	ASSERT_EQ(kw_term_encode(&tr.rx.term, tr.rx.bad, tr.rx.bad_len, out),
		  4 + 2 + 18 + 28);
	EXPECT_EQ(out[0], 0x01);
	EXPECT_EQ(out[1], 0x00);
	EXPECT_EQ(out[2], 0xe0);
	EXPECT_MEMEQ(out + 4, stream, 48);

	/* A Remote Operation error (IRD overflow) returns the DDP header
	 * only: R is for Remote Protection errors. */
	w.done_term = (struct kw_term){ .layer = 0, .etype = 2, .ecode = 7 };
	run_one(&m, NULL, NULL, &w);
	EXPECT_TERM(&tr, 0, 2, 7);
	EXPECT_TRUE(tr.rx.term.has_ddp_hdr);
	EXPECT_FALSE(tr.rx.term.has_rdmap_hdr);
	ASSERT_EQ(kw_term_encode(&tr.rx.term, tr.rx.bad, tr.rx.bad_len, out),
		  4 + 2 + 18);
	EXPECT_EQ(out[2], 0xc0);
}

TEST(term_write_unknown_stag)
{
	struct kw_tx_msg m = msg_write(0x999, 0x1000, 8, false);

	run_one(&m, pattern, NULL, NULL);
	EXPECT_TERM(&tr, 1, 1, 0);
	EXPECT_TRUE(tr.rx.term.has_ddp_hdr);
	EXPECT_EQ(tr.w.nlookup, 1);
}

TEST(term_read_resp_unknown_stag)
{
	struct kw_tx_msg m = msg_write(0x999, 0x1000, 8, false);

	m.opcode = KW_OP_READ_RESP;
	run_one(&m, pattern, NULL, NULL);
	EXPECT_TERM(&tr, 1, 1, 0);
}

TEST(term_write_invalidated_mr)
{
	struct kw_tx_msg m = msg_write(W_STAG, 0x1000, 8, false);
	struct world w;

	world_init(&w);
	w.mr[0].valid = false;
	run_one(&m, pattern, NULL, &w);
	EXPECT_TERM(&tr, 1, 1, 0);
}

TEST(term_write_pd_mismatch)
{
	struct kw_tx_msg m = msg_write(W_STAG, 0x1000, 8, false);
	struct world w;

	world_init(&w);
	w.mr[0].pd = W_PD + 1;
	run_one(&m, pattern, NULL, &w);
	EXPECT_TERM(&tr, 1, 1, 2);
}

TEST(term_write_bounds)
{
	struct kw_tx_msg m = msg_write(W_STAG, 0x1000 + 250, 8, false);

	run_one(&m, pattern, NULL, NULL);
	EXPECT_TERM(&tr, 1, 1, 1);
	m.to = 0xfff;		/* below base */
	run_one(&m, pattern, NULL, NULL);
	EXPECT_TERM(&tr, 1, 1, 1);
	m.to = 0x1000 + 248;	/* exactly up to the end: fine */
	run_one(&m, pattern, NULL, NULL);
	EXPECT_FALSE(kw_rx_failed(&tr.rx));
	EXPECT_MEMEQ(tr.w.mem[0] + 248, pattern, 8);
}

/* A windowed buffer (es.c's receive ring): Writes only inside the window,
 * a ring interval that may wrap; elsewhere base/bounds, nothing placed. */
static void window_case(int *kwt_fail, u32 win_off, u32 win_len, u64 off,
			u32 len, bool ok)
{
	struct kw_tx_msg m = msg_write(W_STAG, 0x1000 + off, len, false);
	struct world w;

	pattern_init();
	world_init(&w);
	w.mr[0].windowed = true;
	w.mr[0].win_off = win_off;
	w.mr[0].win_len = win_len;
	memset(w.mem[0], 0xee, sizeof(w.mem[0]));
	run_one(&m, pattern, NULL, &w);
	if (ok) {
		EXPECT_FALSE(kw_rx_failed(&tr.rx));
		/* placed through the cookie: into w's own memory */
		EXPECT_MEMEQ(w.mem[0] + off, pattern, len);
	} else {
		EXPECT_TERM(&tr, 1, 1, 1);
		EXPECT_EQ(tr.w.nplace, 0);
		EXPECT_EQ(w.mem[0][off], 0xee);
	}
}

TEST(term_write_outside_window)
{
	window_case(kwt_fail, 100, 50, 100, 50, true);	/* exactly it */
	window_case(kwt_fail, 100, 50, 120, 8, true);
	window_case(kwt_fail, 100, 50, 99, 8, false);	/* starts before */
	window_case(kwt_fail, 100, 50, 148, 8, false);	/* runs past */
	window_case(kwt_fail, 100, 50, 0, 8, false);	/* unread bytes */
	window_case(kwt_fail, 0, 0, 0, 8, false);	/* nothing offered */
	/* a window wrapping the ring's end: [200, 256) + [0, 40) */
	window_case(kwt_fail, 200, 96, 210, 40, true);
	window_case(kwt_fail, 200, 96, 0, 40, true);
	window_case(kwt_fail, 200, 96, 0, 41, false);
	window_case(kwt_fail, 200, 96, 190, 8, false);
	/* the whole ring */
	window_case(kwt_fail, 0, 256, 248, 8, true);
	window_case(kwt_fail, 128, 256, 0, 8, true);
	/* no sane window: nothing lands */
	window_case(kwt_fail, 256, 8, 0, 8, false);
	window_case(kwt_fail, 0, 257, 0, 8, false);
}

TEST(term_write_to_wrap)
{
	struct kw_tx_msg m = msg_write(W_STAG, ~0ULL - 3, 8, false);

	run_one(&m, pattern, NULL, NULL);
	EXPECT_TERM(&tr, 1, 1, 3);
}

TEST(term_write_no_remote_write)
{
	struct kw_tx_msg m = msg_write(W_STAG_LOCAL, 0x2000, 8, false);

	run_one(&m, pattern, NULL, NULL);
	EXPECT_TERM(&tr, 0, 1, 2);
	EXPECT_TRUE(tr.rx.term.has_len);
	EXPECT_TRUE(tr.rx.term.has_ddp_hdr);
	EXPECT_FALSE(tr.rx.term.has_rdmap_hdr);
	/* a Read Response into the same local-write MR is fine */
	m.opcode = KW_OP_READ_RESP;
	run_one(&m, pattern, NULL, NULL);
	EXPECT_FALSE(kw_rx_failed(&tr.rx));
}

TEST(zero_length_write_skips_validation)
{
	struct kw_tx_msg m = msg_write(1, 0, 0, true);

	run_one(&m, NULL, NULL, NULL);
	EXPECT_FALSE(kw_rx_failed(&tr.rx));
	EXPECT_EQ(tr.w.nlookup, 0);
	EXPECT_EQ(tr.w.nseg, 1);
	EXPECT_EQ(tr.w.placed[0], 0);
}

TEST(term_crc_mismatch)
{
	struct kw_tx_msg m = msg_send(1, 8, true);
	int n = build_msg(&m, pattern, stream, sizeof(stream));

	stream[n - 1] ^= 1;
	world_init(&tr.w);
	kw_rx_init(&tr.rx, &w_ops, &tr.w, true, W_PD);
	tr.consumed = kw_rx_input(&tr.rx, stream, n);
	EXPECT_TERM(&tr, 2, 0, 2);
	EXPECT_FALSE(tr.rx.term.has_len);
	EXPECT_FALSE(tr.rx.term.has_ddp_hdr);
	EXPECT_EQ(tr.w.nseg, 0);
	EXPECT_EQ(tr.consumed, (size_t)n);
	/* payload corruption also detected */
	n = build_msg(&m, pattern, stream, sizeof(stream));
	stream[22] ^= 0x80;
	world_init(&tr.w);
	kw_rx_init(&tr.rx, &w_ops, &tr.w, true, W_PD);
	kw_rx_input(&tr.rx, stream, n);
	EXPECT_TERM(&tr, 2, 0, 2);
	/* without CRC negotiated the field is ignored */
	m.crc = false;
	n = build_msg(&m, pattern, stream, sizeof(stream));
	stream[n - 1] = 0x5a;
	world_init(&tr.w);
	kw_rx_init(&tr.rx, &w_ops, &tr.w, false, W_PD);
	kw_rx_input(&tr.rx, stream, n);
	EXPECT_FALSE(kw_rx_failed(&tr.rx));
}

TEST(terminate_message_received)
{
	struct kw_term t = { .layer = 1, .etype = 1, .ecode = 0,
		.has_len = true, .has_ddp_hdr = true }, d;
	u8 bad[16] = { 0, 14, 0xc1, 0x40, 0, 0, 0, 9 }, body[KW_TERM_MAX_LEN];
	struct kw_tx_msg m;
	int len;

	len = kw_term_encode(&t, bad, sizeof(bad), body);
	ASSERT_EQ(len, 4 + 16);
	m = (struct kw_tx_msg){ .opcode = KW_OP_TERMINATE, .mulpdu = 1000,
		.qn = 2, .msn = 1, .inline_data = body, .inline_len = len };
	run_one(&m, NULL, NULL, NULL);
	ASSERT_FALSE(kw_rx_failed(&tr.rx));
	ASSERT_EQ(tr.w.nseg, 1);
	EXPECT_TRUE(tr.w.inl_valid[0]);
	ASSERT_EQ(tr.w.placed[0], (u32)len);
	ASSERT_EQ(kw_term_decode(tr.w.inl[0], len, &d), 0);
	EXPECT_EQ(d.layer, 1);
	EXPECT_EQ(d.etype, 1);
	EXPECT_TRUE(d.has_ddp_hdr);
	EXPECT_EQ(tr.rx.msn[2], 2);
}

/* RFC 5040 section 4.8: D with M clear is legal (the length field is
 * present, not valid); the peer's layer/type/code are read as sent */
TEST(terminate_d_without_m)
{
	u8 body[4 + 2 + KW_DDP_UNTAGGED_HDR_LEN] = { 0x12, 0x05, 0x40, 0 };
	struct kw_term d;

	body[6] = 0x41;		/* an untagged DDP header follows */
	ASSERT_EQ(kw_term_decode(body, sizeof(body), &d), 0);
	EXPECT_EQ(d.layer, 1);
	EXPECT_EQ(d.etype, 2);
	EXPECT_EQ(d.ecode, 5);
	EXPECT_FALSE(d.has_len);
	EXPECT_TRUE(d.has_ddp_hdr);
	/* too short for the length field and header it announces */
	EXPECT_EQ(kw_term_decode(body, 8, &d), -EPROTO);
}

TEST(term_terminate_too_short)
{
	u8 body[4] = { 0 };
	struct kw_tx_msg m = { .opcode = KW_OP_TERMINATE, .mulpdu = 1000,
		.qn = 2, .msn = 1, .inline_data = body, .inline_len = 2 };

	run_one(&m, NULL, NULL, NULL);
	EXPECT_TERM(&tr, 0, 2, 7);
}

TEST(error_state_is_sticky)
{
	struct kw_tx_msg m = msg_send(1, 8, false);
	int n;

	run_one(&m, pattern, mut_qn3, NULL);
	ASSERT_TRUE(kw_rx_failed(&tr.rx));
	n = build_msg(&m, pattern, stream, sizeof(stream));
	EXPECT_EQ(kw_rx_input(&tr.rx, stream, n), 0);
	EXPECT_EQ(tr.rx.term.ecode, KW_TERM_DDP_U_INV_QN);
}

TEST(crc_header_error_deferred_to_crc)
{
	/* With CRC the header verdict waits for the CRC (RFC 5044): a
	 * valid FPDU to an unknown STag is skipped, then Terminated. */
	struct kw_tx_msg m = msg_write(0x999, 0x1000, 40, true);
	struct kw_tx_msg s = msg_send(1, 4, true);
	int n = build_msg(&m, pattern, stream, sizeof(stream)), k;
	size_t i, got = 0;

	k = build_msg(&s, pattern, stream + n, sizeof(stream) - n);
	world_init(&tr.w);
	kw_rx_init(&tr.rx, &w_ops, &tr.w, true, W_PD);
	/* byte by byte: not failed until the last CRC byte */
	for (i = 0; i < (size_t)n - 1; i++) {
		got += kw_rx_input(&tr.rx, stream + i, 1);
		ASSERT_FALSE(kw_rx_failed(&tr.rx));
	}
	got += kw_rx_input(&tr.rx, stream + n - 1, 1 + k);
	EXPECT_EQ(got, (size_t)n);
	EXPECT_TERM(&tr, 1, 1, 0);
	EXPECT_TRUE(tr.rx.term.has_ddp_hdr);
	EXPECT_EQ(tr.w.nplace, 0);
	EXPECT_EQ(tr.w.nseg, 0);
}

TEST(crc_corrupted_header_is_crc_error)
{
	/* A flipped STag bit with a stale CRC must be blamed on MPA, not
	 * reported as an invalid STag. */
	struct kw_tx_msg m = msg_write(W_STAG, 0x1000, 40, true);
	int n = build_msg(&m, pattern, stream, sizeof(stream));

	stream[5] ^= 0x10;
	world_init(&tr.w);
	kw_rx_init(&tr.rx, &w_ops, &tr.w, true, W_PD);
	tr.consumed = kw_rx_input(&tr.rx, stream, n);
	EXPECT_TERM(&tr, 2, 0, 2);
	EXPECT_FALSE(tr.rx.term.has_len);
	EXPECT_EQ(tr.consumed, (size_t)n);
	EXPECT_EQ(tr.w.nplace, 0);
	/* same with a corrupted DDP version */
	n = build_msg(&m, pattern, stream, sizeof(stream));
	stream[2] ^= 0x03;
	world_init(&tr.w);
	kw_rx_init(&tr.rx, &w_ops, &tr.w, true, W_PD);
	kw_rx_input(&tr.rx, stream, n);
	EXPECT_TERM(&tr, 2, 0, 2);
}

TEST(read_req_ddp_error_has_no_rdmap_hdr)
{
	/* A DDP error (wrong MSN) on a Read Request carries the DDP header
	 * alone (RFC 5040 Figure 10), whether the verdict came at once
	 * (no CRC) or waited for the CRC, by when the parser held the
	 * Read Request header as well. */
	struct kw_tx_msg m;
	u8 body[64];

	rreq(&m, body, 28);
	run_one(&m, NULL, mut_msn2, NULL);
	EXPECT_TERM(&tr, 1, 2, 3);
	EXPECT_TRUE(tr.rx.term.has_ddp_hdr);
	EXPECT_FALSE(tr.rx.term.has_rdmap_hdr);
	m.crc = true;
	run_one(&m, NULL, mut_msn2, NULL);	/* run_one fixes the CRC */
	EXPECT_TERM(&tr, 1, 2, 3);
	EXPECT_TRUE(tr.rx.term.has_ddp_hdr);
	EXPECT_FALSE(tr.rx.term.has_rdmap_hdr);
	EXPECT_EQ(tr.rx.bad_len, 48);
	EXPECT_EQ(tr.w.nseg, 0);
}

TEST(verified_fpdu_skips_crc_once)
{
	/* The caller checked the FPDU's CRC in place (the kernel, over its
	 * skbs): the parser takes its word for that FPDU and that one only. */
	struct kw_tx_msg m = msg_write(W_STAG, 0x1000, 40, true);
	int n = build_msg(&m, pattern, stream, sizeof(stream)), k;

	k = build_msg(&m, pattern, stream + n, sizeof(stream) - n);
	stream[n - 1] ^= 1;		/* both CRC fields wrong */
	stream[n + k - 1] ^= 1;
	world_init(&tr.w);
	kw_rx_init(&tr.rx, &w_ops, &tr.w, true, W_PD);
	ASSERT_TRUE(kw_rx_at_fpdu(&tr.rx));
	kw_rx_verified(&tr.rx);
	tr.consumed = kw_rx_input(&tr.rx, stream, n);
	EXPECT_EQ(tr.consumed, (size_t)n);
	EXPECT_FALSE(kw_rx_failed(&tr.rx));
	EXPECT_EQ(tr.w.nseg, 1);
	EXPECT_MEMEQ(tr.w.mem[0], pattern, 40);
	EXPECT_TRUE(kw_rx_at_fpdu(&tr.rx));
	kw_rx_input(&tr.rx, stream + n, k);
	EXPECT_TERM(&tr, 2, 0, 2);
	EXPECT_EQ(tr.w.nseg, 1);
}

TEST(verified_header_error_is_immediate)
{
	/* Verified ahead, a header that fails DDP checks is the peer's
	 * fault at once: nothing to skip, nothing placed. */
	struct kw_tx_msg m = msg_write(0x999, 0x1000, 40, true);
	int n = build_msg(&m, pattern, stream, sizeof(stream));

	world_init(&tr.w);
	kw_rx_init(&tr.rx, &w_ops, &tr.w, true, W_PD);
	kw_rx_verified(&tr.rx);
	tr.consumed = kw_rx_input(&tr.rx, stream, n);
	EXPECT_TERM(&tr, 1, 1, 0);
	EXPECT_TRUE(tr.rx.term.has_ddp_hdr);
	EXPECT_EQ(tr.consumed, 2 + KW_DDP_TAGGED_HDR_LEN);
	EXPECT_EQ(tr.w.nplace, 0);
}

TEST(verified_only_at_fpdu_boundary)
{
	/* Said in the middle of an FPDU, it does not cover that FPDU. */
	struct kw_tx_msg m = msg_write(W_STAG, 0x1000, 40, true);
	int n = build_msg(&m, pattern, stream, sizeof(stream));

	stream[n - 1] ^= 1;
	world_init(&tr.w);
	kw_rx_init(&tr.rx, &w_ops, &tr.w, true, W_PD);
	kw_rx_input(&tr.rx, stream, 5);
	EXPECT_FALSE(kw_rx_at_fpdu(&tr.rx));
	kw_rx_verified(&tr.rx);
	kw_rx_input(&tr.rx, stream + 5, n - 5);
	EXPECT_TERM(&tr, 2, 0, 2);
}

TEST(between_messages)
{
	/* a Send of 110 bytes in FPDUs of 60: inside the message after its
	 * first FPDU, between messages after the last */
	struct kw_tx_msg m = msg_send(1, 110, false);
	int n;

	m.mulpdu = 60;
	n = build_msg(&m, pattern, stream, sizeof(stream));
	ASSERT_GT(n, 0);
	world_init(&tr.w);
	kw_rx_init(&tr.rx, &w_ops, &tr.w, false, W_PD);
	EXPECT_TRUE(kw_rx_between_messages(&tr.rx));
	kw_rx_input(&tr.rx, stream, kw_mpa_fpdu_len(60));
	EXPECT_TRUE(kw_rx_at_fpdu(&tr.rx));
	EXPECT_FALSE(kw_rx_between_messages(&tr.rx));
	kw_rx_input(&tr.rx, stream + kw_mpa_fpdu_len(60),
		    n - kw_mpa_fpdu_len(60));
	EXPECT_FALSE(kw_rx_failed(&tr.rx));
	EXPECT_TRUE(kw_rx_between_messages(&tr.rx));
}

TEST(fpdu_pos_without_markers)
{
	/* out-of-order placement (kmod/rx.c) matches FPDUs by the stream
	 * position of their length field, markers or not: fed byte by byte,
	 * fpdu_pos is each FPDU's first byte from that byte on */
	struct kw_tx_msg m = msg_send(1, 110, true);
	u32 cur = 0, next, i, fpdus = 0;
	int n;

	m.mulpdu = 60;
	n = build_msg(&m, pattern, stream, sizeof(stream));
	ASSERT_GT(n, (int)kw_mpa_fpdu_len(60));
	world_init(&tr.w);
	kw_rx_init(&tr.rx, &w_ops, &tr.w, true, W_PD);
	next = kw_mpa_fpdu_len(get_unaligned_be16(stream));
	for (i = 0; i < (u32)n; i++) {
		if (i == next) {
			cur = next;
			next += kw_mpa_fpdu_len(get_unaligned_be16(stream + i));
			fpdus++;
		}
		kw_rx_input(&tr.rx, stream + i, 1);
		ASSERT_FALSE(kw_rx_failed(&tr.rx));
		EXPECT_EQ(tr.rx.mpos, i + 1);
		EXPECT_EQ(tr.rx.fpdu_pos, cur);
	}
	EXPECT_EQ(next, (u32)n);
	EXPECT_GE(fpdus, 1);
	EXPECT_TRUE(kw_rx_between_messages(&tr.rx));
}

TEST(fpdu_len)
{
	EXPECT_EQ(kw_mpa_fpdu_len(0), 8);
	EXPECT_EQ(kw_mpa_fpdu_len(18), 24);
	EXPECT_EQ(kw_mpa_fpdu_len(19), 28);
	EXPECT_EQ(kw_mpa_fpdu_len(65535), 65544);
}

TEST(crc_deferred_oversized_terminate)
{
	u8 body[200] = { 0x10 };
	struct kw_tx_msg m = { .opcode = KW_OP_TERMINATE, .mulpdu = 1000,
		.qn = 2, .msn = 1, .inline_data = body, .inline_len = 4,
		.crc = true };
	int n = build_msg(&m, NULL, stream, sizeof(stream));
	u32 big = 4 + sizeof(((struct kw_rx *)0)->inl);

	/* hand-build a Terminate longer than any buffer, with valid CRC */
	ASSERT_GT(n, 0);
	put_unaligned_be16(18 + big, stream);
	memset(stream + 20, 0, big + 8);
	n = 2 + 18 + big;
	n += kw_mpa_pad(18 + big);
	fix_crc(stream);
	n += 4;
	world_init(&tr.w);
	kw_rx_init(&tr.rx, &w_ops, &tr.w, true, W_PD);
	tr.consumed = kw_rx_input(&tr.rx, stream, n);
	EXPECT_TERM(&tr, 1, 2, 5);
	EXPECT_EQ(tr.consumed, (size_t)n);
}

/* --- MPA markers (RFC 5044 section 5) --------------------------------- */

static u8 plain[8192];

static void run_marked(struct run *r, const u8 *p, size_t len, bool crc,
		       size_t step, u32 start)
{
	world_init(&r->w);
	kw_rx_init(&r->rx, &w_ops, &r->w, crc, W_PD);
	kw_rx_set_markers(&r->rx);
	r->rx.mpos = start;	/* as if start bytes had gone before */
	r->consumed = feed(&r->rx, p, len, step);
}

/*
 * The mixed stream with markers, from every 4-aligned stream position
 * (markers land in headers, payloads, pads, in front of the CRC and in
 * front of an FPDU), fed in one call and in pieces: the same result as
 * without markers, every marker checked.
 */
TEST(markers_every_alignment)
{
	static struct run r;
	static const size_t steps[] = { 0, 1, 3, 64 };
	int crc, n;
	u32 start;
	size_t s, m;

	for (crc = 0; crc < 2; crc++) {
		n = mixed_stream(plain, crc);
		for (start = 0; start < 512; start += 4) {
			m = mark_stream(plain, n, start, stream, crc, -1, 0);
			ASSERT_EQ(kw_mpa_wire_len(start, n), m);
			for (s = 0; s < sizeof(steps) / sizeof(steps[0]); s++) {
				run_marked(&r, stream, m, crc, steps[s], start);
				check_mixed(kwt_fail, &r, m);
				EXPECT_EQ(r.rx.markers_seen, (m - n) / 4);
				EXPECT_EQ(r.rx.mpos, start + m);
				EXPECT_TRUE(kw_rx_at_fpdu(&r.rx));
			}
		}
	}
}

/* A marker whose FPDUPTR is off: Terminate LLP / MPA / 0x03, nothing
 * placed after it; the two low bits do not count (RFC 5044 section 5). */
TEST(markers_bad_fpduptr)
{
	static struct run r;
	int crc, n, bad;
	size_t m;

	for (crc = 0; crc < 2; crc++) {
		n = mixed_stream(plain, crc);
		m = mark_stream(plain, n, 0, stream, crc, -1, 0);
		ASSERT_TRUE(m - n >= 2 * 4);
		for (bad = 0; bad < (int)(m - n) / 4; bad++) {
			m = mark_stream(plain, n, 0, stream, crc, bad, 3);
			run_marked(&r, stream, m, crc, 0, 0);
			check_mixed(kwt_fail, &r, m);
			m = mark_stream(plain, n, 0, stream, crc, bad, 4);
			run_marked(&r, stream, m, crc, 0, 0);
			ASSERT_TRUE(kw_rx_failed(&r.rx));
			EXPECT_EQ(r.rx.term.layer, KW_TERM_LAYER_LLP);
			EXPECT_EQ(r.rx.term.etype, KW_TERM_LLP_ETYPE_MPA);
			EXPECT_EQ(r.rx.term.ecode, KW_TERM_LLP_MARKER);
			EXPECT_EQ(r.rx.markers_seen, bad + 1);
			EXPECT_FALSE(r.rx.term.has_len);
		}
	}
}

/* A good CRC covers the markers: one flipped marker bit is a CRC error
 * when the FPDUPTR still reads right (a reserved bit). */
TEST(markers_in_crc)
{
	static struct run r;
	int n = mixed_stream(plain, true);
	size_t m = mark_stream(plain, n, 0, stream, true, -1, 0);

	stream[512 + 4 + 1] ^= 0x10;	/* second marker, reserved half */
	run_marked(&r, stream, m, true, 0, 0);
	ASSERT_TRUE(kw_rx_failed(&r.rx));
	EXPECT_EQ(r.rx.term.ecode, KW_TERM_LLP_CRC);
	/* without CRC the reserved half is ignored */
	n = mixed_stream(plain, false);
	m = mark_stream(plain, n, 0, stream, false, -1, 0);
	stream[512 + 4 + 1] ^= 0x10;
	run_marked(&r, stream, m, false, 0, 0);
	check_mixed(kwt_fail, &r, m);
}

/* A peer that negotiated markers and sends none, and one that sends
 * them unasked: both fail, neither places a byte. */
TEST(markers_missing_or_unasked)
{
	static struct run r;
	int n = mixed_stream(plain, false);
	size_t m;

	run_marked(&r, plain, n, false, 0, 0);
	ASSERT_TRUE(kw_rx_failed(&r.rx));
	EXPECT_EQ(r.rx.term.ecode, KW_TERM_LLP_MARKER);
	EXPECT_EQ(r.w.nplace, 0);
	m = mark_stream(plain, n, 0, stream, false, -1, 0);
	run_stream(&r, stream, m, false, 0);
	ASSERT_TRUE(kw_rx_failed(&r.rx));
	EXPECT_EQ(r.w.nplace, 0);
}

/*
 * RFC 5044 section 4.4, Figures 5 and 6, parsed: a Send of 24 zero bytes
 * led by the stream's first marker, and one at 0x1ec whose header holds
 * the marker at 0x200 (FPDUPTR 0x14); both CRCs are the RFC's.
 */
TEST(markers_rfc5044_figures)
{
	static struct run r;
	u8 f5[0x34] = { 0, 0, 0, 0, 0x00, 0x2a, 0x41, 0x43 };
	u8 f6[0x34] = { 0x00, 0x2a, 0x41, 0x43 };

	f5[0x13] = 1;
	memcpy(f5 + 0x30, "\x52\x23\x99\x83", 4);
	run_marked(&r, f5, sizeof(f5), true, 0, 0);
	ASSERT_FALSE(kw_rx_failed(&r.rx));
	EXPECT_EQ(r.w.nseg, 1);
	EXPECT_EQ(r.w.placed[0], 24);
	EXPECT_EQ(r.rx.markers_seen, 1);

	f6[0x1fb - 0x1ec] = 2;
	f6[0x203 - 0x1ec] = 0x14;
	memcpy(f6 + 0x21c - 0x1ec, "\x84\x92\x58\x98", 4);
	world_init(&r.w);
	kw_rx_init(&r.rx, &w_ops, &r.w, true, W_PD);
	kw_rx_set_markers(&r.rx);
	r.rx.mpos = 0x1ec;
	r.rx.msn[0] = 2;
	ASSERT_EQ(feed(&r.rx, f6, sizeof(f6), 1), sizeof(f6));
	ASSERT_FALSE(kw_rx_failed(&r.rx));
	EXPECT_EQ(r.w.nseg, 1);
	EXPECT_EQ(r.w.seg[0].msn, 2);
	EXPECT_EQ(r.w.placed[0], 24);
	EXPECT_EQ(r.rx.markers_seen, 1);
}

/* A 4 KiB Write target of its own: FPDUs longer than 512 bytes. */
static u8 big[4096];
static int big_fpdus;

static int big_lookup(void *ctx, u32 stag, u8 opcode, struct kw_mr_view *mr)
{
	(void)ctx;
	(void)opcode;
	if (stag != W_STAG)
		return -ENOENT;
	*mr = (struct kw_mr_view){ .cookie = big, .stag = W_STAG, .pd = W_PD,
		.access = KW_ACC_LOCAL_WRITE | KW_ACC_REMOTE_WRITE,
		.valid = true, .base = 0x1000, .len = sizeof(big) };
	return 0;
}

static void big_place(void *ctx, void *cookie, u64 off, const void *src,
		      u32 len)
{
	(void)ctx;
	if (cookie != big || off + len > sizeof(big))
		abort();
	memcpy(big + off, src, len);
}

static int big_done(void *ctx, const struct kw_ddp_hdr *h, const u8 *payload,
		    u32 placed, struct kw_term *term)
{
	(void)ctx, (void)h, (void)payload, (void)placed, (void)term;
	big_fpdus++;
	return 0;
}

static const struct kw_rx_ops big_ops = {
	.lookup_stag = big_lookup, .place = big_place,
	.segment_done = big_done,
};

/*
 * FPDUs of 1,400 bytes hold two or three markers each; from stream
 * positions that put a marker in front of an FPDU, its later markers
 * count from the ULPDU Length field, not from that leading marker (RFC
 * 5044 section 5): one such marker 4 bytes off is a Terminate.
 */
TEST(markers_in_long_fpdus)
{
	struct kw_tx_msg m = msg_write(W_STAG, 0x1000, 3000, false);
	struct kw_rx rx;
	int crc, n, bad;
	u32 start;
	size_t mw;

	pattern_init();
	for (crc = 0; crc < 2; crc++) {
		m.crc = crc;
		m.mulpdu = 1400;
		n = build_msg(&m, pattern, plain, sizeof(plain));
		ASSERT_TRUE(n > 0);
		for (start = 0; start < 512; start += 4) {
			mw = mark_stream(plain, n, start, stream, crc, -1, 0);
			memset(big, 0, sizeof(big));
			big_fpdus = 0;
			kw_rx_init(&rx, &big_ops, NULL, crc, W_PD);
			kw_rx_set_markers(&rx);
			rx.mpos = start;
			ASSERT_EQ(feed(&rx, stream, mw, 7), mw);
			ASSERT_FALSE(kw_rx_failed(&rx));
			EXPECT_EQ(big_fpdus, 3);
			EXPECT_MEMEQ(big, pattern, 3000);
		}
		/* position 0: the first FPDU opens with a marker; its next
		 * one (number 1) at 512 says 508, and 512 is wrong */
		for (bad = 1; bad < 3; bad++) {
			mw = mark_stream(plain, n, 0, stream, crc, bad, 4);
			kw_rx_init(&rx, &big_ops, NULL, crc, W_PD);
			kw_rx_set_markers(&rx);
			feed(&rx, stream, mw, 0);
			ASSERT_TRUE(kw_rx_failed(&rx));
			EXPECT_EQ(rx.term.ecode, KW_TERM_LLP_MARKER);
		}
		mw = mark_stream(plain, n, 0, stream, crc, -1, 0);
		EXPECT_EQ(get_unaligned_be16(stream + 512 + 2), 508);
		EXPECT_EQ(get_unaligned_be16(stream + 2), 0);
	}
}
