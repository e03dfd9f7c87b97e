// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Golden vectors: real siw <-> siw traffic (the pcapng files in shared/reference).
 * Every MPA Request/Reply must decode and re-encode byte for byte, every
 * FPDU must parse without a Terminate (CRC verified where negotiated),
 * and re-segmenting each decoded FPDU with the tx encoder must reproduce
 * the captured bytes exactly. A missing reference directory is a failure.
 */
#include "harness.h"
#include "testlib.h"
#include "pcapng.h"

#ifndef KW_REPO_ROOT
#define KW_REPO_ROOT "../.."
#endif

static const char *ref_dir(void)
{
	const char *d = getenv("KIWARP_REFERENCE_DIR");

	return d && *d ? d : KW_REPO_ROOT "/../shared/reference";
}

struct gctx {
	const u8 *s;		/* FPDU stream of one direction */
	size_t len;
	size_t pos;		/* start of the FPDU being parsed */
	bool crc;
	u8 payload[1 << 17];
	u32 plen;
	int ops[KW_OP_MAX];
	int fpdus, zero_writes, first_op, first_len;
	int bad_reencode, bad_order;
	struct kw_rx_buf buf;
};

static int g_lookup(void *ctx, u32 stag, u8 opcode, struct kw_mr_view *mr)
{
	(void)opcode;
	*mr = (struct kw_mr_view){ .cookie = ctx, .stag = stag, .pd = 1,
		.access = KW_ACC_LOCAL_WRITE | KW_ACC_REMOTE_WRITE |
			  KW_ACC_REMOTE_READ,
		.valid = true, .base = 0, .len = ~0ULL };
	return 0;
}

static int g_get_rx_buf(void *ctx, u32 msn, const struct kw_rx_buf **buf)
{
	struct gctx *g = ctx;

	(void)msn;
	*buf = &g->buf;
	return 0;
}

static void g_place(void *ctx, void *cookie, u64 off, const void *src,
		    u32 len)
{
	struct gctx *g = ctx;

	(void)cookie;
	(void)off;
	if (g->plen + len > sizeof(g->payload)) {
		g->bad_order++;
		return;
	}
	memcpy(g->payload + g->plen, src, len);
	g->plen += len;
}

/* Re-encode the FPDU from its decoded header + payload and compare. */
static int g_done(void *ctx, const struct kw_ddp_hdr *h, const u8 *payload,
		  u32 placed, struct kw_term *term)
{
	struct gctx *g = ctx;
	struct kw_tx_msg m = { .opcode = h->opcode, .crc = g->crc };
	struct kw_tx_fpdu f;
	const u8 *pl = g->payload;
	u32 off = 0, crc, total;
	bool inl = h->opcode == KW_OP_READ_REQ ||
		   h->opcode == KW_OP_TERMINATE;

	(void)term;
	if (payload)
		pl = payload;
	else if (placed != g->plen)
		g->bad_order++;
	if (g->fpdus == 0) {
		g->first_op = h->opcode;
		g->first_len = placed;
	}
	g->fpdus++;
	g->ops[h->opcode]++;
	if (h->opcode == KW_OP_WRITE && placed == 0)
		g->zero_writes++;

	m.mulpdu = h->hdr_len + (placed ? placed : 1);
	if (inl) {
		m.inline_data = payload;
		m.inline_len = placed;
		m.qn = h->qn;
		m.msn = h->msn;
		m.mulpdu = h->hdr_len + placed;
	} else if (h->tagged) {
		m.stag = h->stag;
		m.to = h->to;
		m.len = placed + (h->last ? 0 : 1);
	} else {
		m.inv_stag = h->inv_stag;
		m.qn = h->qn;
		m.msn = h->msn;
		off = h->mo;
		m.len = h->mo + placed + (h->last ? 0 : 1);
	}
	if (kw_tx_fpdu_next(&m, &off, &f) || f.payload_len != (inl ? 0 :
							      placed)) {
		g->bad_reencode++;
		goto out;
	}
	crc = kw_mpa_crc_update(kw_mpa_crc_init(), f.hdr, f.hdr_len);
	crc = kw_mpa_crc_update(crc, pl, f.payload_len);
	kw_tx_fpdu_seal(&m, &f, crc);
	total = f.hdr_len + f.payload_len + f.trailer_len;
	if (g->pos + total > g->len ||
	    memcmp(g->s + g->pos, f.hdr, f.hdr_len) ||
	    memcmp(g->s + g->pos + f.hdr_len, pl, f.payload_len) ||
	    memcmp(g->s + g->pos + f.hdr_len + f.payload_len, f.trailer,
		   f.trailer_len)) {
		printf("# re-encode mismatch at stream offset %zu op %u\n",
		       g->pos, h->opcode);
		g->bad_reencode++;
	}
	g->pos += total;
out:
	g->plen = 0;
	return 0;
}

static const struct kw_rx_ops g_ops = {
	.lookup_stag = g_lookup,
	.get_rx_buf = g_get_rx_buf,
	.place = g_place,
	.segment_done = g_done,
};

struct dir_result {
	int fpdus, zero_writes, first_op, first_len;
	int ops[KW_OP_MAX];
};

/* Parse one direction with the given chunk size; asserts no errors. */
static void run_dir(int *kwt_fail, const u8 *s, size_t len, bool crc,
		    size_t step, struct dir_result *res)
{
	static struct gctx g;
	struct kw_rx rx;
	size_t done = 0;

	memset(&g, 0, sizeof(g));
	g.s = s;
	g.len = len;
	g.crc = crc;
	g.first_op = -1;
	g.buf.num_sge = 1;
	g.buf.sge[0].mr = (struct kw_mr_view){ .valid = true, .pd = 1,
		.access = KW_ACC_LOCAL_WRITE, .base = 0, .len = 1 << 20 };
	g.buf.sge[0].len = 1 << 20;
	g.buf.total = 1 << 20;
	kw_rx_init(&rx, &g_ops, &g, crc, 1);
	while (done < len) {
		size_t n = step && len - done > step ? step : len - done;
		size_t c = kw_rx_input(&rx, s + done, n);

		done += c;
		if (c < n)
			break;
	}
	if (kw_rx_failed(&rx))
		printf("# Terminate %u/%u/%u at offset %zu\n", rx.term.layer,
		       rx.term.etype, rx.term.ecode, g.pos);
	ASSERT_FALSE(kw_rx_failed(&rx));
	ASSERT_EQ(done, len);
	/* the stream ends on an FPDU boundary */
	ASSERT_EQ(rx.state, KW_RX_HDR);
	ASSERT_EQ(rx.hdr_got, 0);
	ASSERT_EQ(g.pos, len);
	ASSERT_EQ(g.bad_reencode, 0);
	ASSERT_EQ(g.bad_order, 0);
	ASSERT_EQ((int)rx.fpdus, g.fpdus);
	res->fpdus = g.fpdus;
	res->zero_writes = g.zero_writes;
	res->first_op = g.first_op;
	res->first_len = g.first_len;
	memcpy(res->ops, g.ops, sizeof(g.ops));
}

struct file_summary {
	int pairs, fpdus, zero_writes, rtr_first;
	int ops[KW_OP_MAX];
	bool crc, p2p;
	u8 req_pd[4], rep_pd[4], req_flags, rep_flags;
};

static void check_file(int *kwt_fail, const char *name,
		       struct file_summary *sum)
{
	static struct pc_capture c;
	char path[4096];
	int i, j, k;

	memset(sum, 0, sizeof(*sum));
	snprintf(path, sizeof(path), "%s/%s", ref_dir(), name);
	if (pc_load(path, &c) <= 0) {
		printf("# cannot read %s (set KIWARP_REFERENCE_DIR)\n", path);
		ASSERT_TRUE(0);
	}
	for (i = 0; i < c.nflows; i++) {
		struct pc_flow *fi = &c.flow[i], *fr = NULL;
		struct kw_mpa_frame req, rep, mine;
		struct kw_mpa_cfg icfg, rcfg;
		struct kw_mpa_result ri, rr;
		struct dir_result d[2];
		u8 enc[600];
		size_t ri_off, rr_off;
		size_t steps[3] = { 0, 1, 7 };

		if (fi->len < 20 || memcmp(fi->data, KW_MPA_KEY_REQ, 16))
			continue;
		for (j = 0; j < c.nflows; j++)
			if (c.flow[j].saddr == fi->daddr &&
			    c.flow[j].sport == fi->dport &&
			    c.flow[j].daddr == fi->saddr &&
			    c.flow[j].dport == fi->sport)
				fr = &c.flow[j];
		ASSERT_TRUE(fr != NULL);
		ASSERT_EQ(fi->len, fi->max_end);	/* no holes */
		ASSERT_EQ(fr->len, fr->max_end);
		ASSERT_GE(fr->len, 20);
		ASSERT_EQ(kw_mpa_decode_hdr(fi->data, false, &req), 0);
		ASSERT_EQ(kw_mpa_decode_pd(&req, fi->data + 20), 0);
		ASSERT_EQ(kw_mpa_decode_hdr(fr->data, true, &rep), 0);
		ASSERT_EQ(kw_mpa_decode_pd(&rep, fr->data + 20), 0);
		ASSERT_EQ(req.pd_len, 4);
		ASSERT_EQ(rep.pd_len, 4);
		memcpy(sum->req_pd, fi->data + 20, 4);
		memcpy(sum->rep_pd, fr->data + 20, 4);
		sum->req_flags = fi->data[16];
		sum->rep_flags = fr->data[16];

		/* Request: our initiator with siw's settings sends the same */
		icfg = (struct kw_mpa_cfg){ .rev = req.rev, .crc = req.crc,
			.p2p = req.p2p, .rtr = req.rtr, .ird = req.ird,
			.ord = req.ord };
		kw_mpa_make_request(&icfg, &mine);
		ASSERT_EQ(kw_mpa_encode(&mine, NULL, 0, enc, sizeof(enc)), 24);
		ASSERT_MEMEQ(enc, fi->data, 24);
		/* Reply: our responder with siw's settings answers the same */
		rcfg = (struct kw_mpa_cfg){ .rev = 2, .crc = rep.crc,
			.p2p = true, .rtr = KW_RTR_SEND | KW_RTR_WRITE |
			KW_RTR_READ, .ird = rep.ird, .ord = rep.ord };
		ASSERT_EQ(kw_mpa_negotiate_responder(&req, &rcfg, &mine, &rr),
			  0);
		ASSERT_EQ(kw_mpa_encode(&mine, NULL, 0, enc, sizeof(enc)), 24);
		ASSERT_MEMEQ(enc, fr->data, 24);
		ASSERT_EQ(kw_mpa_negotiate_initiator(&icfg, &rep, &ri), 0);
		EXPECT_EQ(ri.crc, rr.crc);
		EXPECT_EQ(ri.rtr, rr.rtr);
		sum->crc = ri.crc;
		sum->p2p = ri.p2p;

		ri_off = 20 + req.pd_len;
		rr_off = 20 + rep.pd_len;
		for (k = 0; k < 3; k++) {
			struct dir_result e[2];

			run_dir(kwt_fail, fi->data + ri_off, fi->len - ri_off,
				ri.crc, steps[k], k ? &e[0] : &d[0]);
			if (*kwt_fail)
				return;
			run_dir(kwt_fail, fr->data + rr_off, fr->len - rr_off,
				rr.crc, steps[k], k ? &e[1] : &d[1]);
			if (*kwt_fail)
				return;
			if (k) {
				ASSERT_MEMEQ(&e[0], &d[0], sizeof(d[0]));
				ASSERT_MEMEQ(&e[1], &d[1], sizeof(d[1]));
			}
		}
		sum->pairs++;
		sum->fpdus += d[0].fpdus + d[1].fpdus;
		sum->zero_writes += d[0].zero_writes + d[1].zero_writes;
		if (d[0].first_op == KW_OP_WRITE && d[0].first_len == 0)
			sum->rtr_first++;
		for (k = 0; k < KW_OP_MAX; k++)
			sum->ops[k] += d[0].ops[k] + d[1].ops[k];
	}
	printf("# %s: %d connection(s), %d FPDUs, send %d rreq %d rresp %d write %d (zero-length %d) term %d\n",
	       name, sum->pairs, sum->fpdus, sum->ops[KW_OP_SEND],
	       sum->ops[KW_OP_READ_REQ], sum->ops[KW_OP_READ_RESP],
	       sum->ops[KW_OP_WRITE], sum->zero_writes,
	       sum->ops[KW_OP_TERMINATE]);
	pc_free(&c);
}

TEST(reference_dir_exists)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/README.md", ref_dir());
	f = fopen(path, "r");
	if (!f)
		printf("# missing %s\n", path);
	ASSERT_TRUE(f != NULL);
	fclose(f);
}

TEST(golden_default)
{
	struct file_summary s;
	static const u8 req_pd[4] = { 0x00, 0x01, 0x00, 0x01 };

	check_file(kwt_fail, "siw-rping-default.pcapng", &s);
	if (*kwt_fail)
		return;
	ASSERT_GE(s.pairs, 1);
	EXPECT_FALSE(s.crc);
	EXPECT_FALSE(s.p2p);
	EXPECT_EQ(s.req_flags, 0x10);
	EXPECT_MEMEQ(s.req_pd, req_pd, 4);
	EXPECT_GT(s.ops[KW_OP_SEND], 0);
	EXPECT_GT(s.ops[KW_OP_READ_REQ], 0);
	EXPECT_GT(s.ops[KW_OP_READ_RESP], 0);
	EXPECT_GT(s.ops[KW_OP_WRITE], 0);
	EXPECT_EQ(s.rtr_first, 0);
}

TEST(golden_crc_p2p)
{
	struct file_summary s;
	static const u8 req_pd[4] = { 0x80, 0x01, 0xc0, 0x01 };
	static const u8 rep_pd[4] = { 0x80, 0x01, 0x80, 0x01 };

	check_file(kwt_fail, "siw-rping-crc-p2p.pcapng", &s);
	if (*kwt_fail)
		return;
	ASSERT_GE(s.pairs, 1);
	EXPECT_TRUE(s.crc);
	EXPECT_TRUE(s.p2p);
	EXPECT_EQ(s.req_flags, 0x50);
	EXPECT_EQ(s.rep_flags, 0x50);
	EXPECT_MEMEQ(s.req_pd, req_pd, 4);
	EXPECT_MEMEQ(s.rep_pd, rep_pd, 4);
	EXPECT_GT(s.ops[KW_OP_SEND], 0);
	EXPECT_GT(s.ops[KW_OP_READ_REQ], 0);
	EXPECT_GT(s.ops[KW_OP_READ_RESP], 0);
	EXPECT_GT(s.ops[KW_OP_WRITE], s.zero_writes);
	/* the RTR: first FPDU of every initiator stream */
	EXPECT_EQ(s.rtr_first, s.pairs);
	EXPECT_GE(s.zero_writes, s.pairs);
}
