// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Seed corpus generator: MPA Request/Reply frames, post-setup FPDU streams
 * and the Terminate payloads in them, from every capture named, plus
 * encoder-built streams of every message type and transmit descriptions
 * for fuzz_tx. Usage: gen_corpus OUTDIR CAPTURE.pcapng...
 * (writes OUTDIR/seed-rx, seed-mpa, seed-term, seed-tx)
 */
#include "harness_free.h"
#include "testlib.h"
#include "pcapng.h"

static int nfile;

static void put(const char *dir, u8 prefix, const u8 *p, size_t n)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/seed-%04d", dir, nfile++);
	f = fopen(path, "wb");
	if (!f)
		exit(1);
	fputc(prefix, f);
	if (n && fwrite(p, 1, n, f) != n)
		exit(1);
	fclose(f);
}

/* Terminate payloads found in a stream, as fuzz_term seeds */
struct term_scan {
	const char *dir;
};

static int ts_lookup(void *ctx, u32 stag, u8 opcode, struct kw_mr_view *mr)
{
	static u8 sink[1];

	(void)ctx;
	(void)opcode;
	*mr = (struct kw_mr_view){ .cookie = sink, .stag = stag, .pd = 1,
		.access = 7, .valid = true, .base = 0, .len = ~0ULL >> 1 };
	return 0;
}

static int ts_get(void *ctx, u32 msn, const struct kw_rx_buf **buf)
{
	static struct kw_rx_buf b;
	static u8 sink[1];

	(void)ctx;
	(void)msn;
	b.num_sge = 1;
	b.sge[0].mr = (struct kw_mr_view){ .cookie = sink, .stag = 1,
		.pd = 1, .access = 7, .valid = true, .base = 0,
		.len = ~0ULL >> 1 };
	b.sge[0].len = b.total = 1U << 30;
	*buf = &b;
	return 0;
}

static void ts_place(void *ctx, void *cookie, u64 off, const void *src,
		     u32 len)
{
	(void)ctx, (void)cookie, (void)off, (void)src, (void)len;
}

static int ts_done(void *ctx, const struct kw_ddp_hdr *h, const u8 *payload,
		   u32 placed, struct kw_term *term)
{
	struct term_scan *ts = ctx;

	(void)term;
	if (h->opcode == KW_OP_TERMINATE && payload && placed)
		put(ts->dir, payload[0], payload + 1, placed - 1);
	return 0;
}

static void terms_of(const char *term, const u8 *p, u32 n, bool crc)
{
	static const struct kw_rx_ops ops = {
		.lookup_stag = ts_lookup, .get_rx_buf = ts_get,
		.place = ts_place, .segment_done = ts_done,
	};
	struct term_scan ts = { term };
	struct kw_rx rx;

	kw_rx_init(&rx, &ops, &ts, crc, 1);
	kw_rx_input(&rx, p, n);
}

static void from_capture(const char *path, const char *rx, const char *mpa,
			 const char *term)
{
	static struct pc_capture c;
	int i;

	if (pc_load(path, &c) <= 0) {
		fprintf(stderr, "cannot read %s\n", path);
		exit(1);
	}
	for (i = 0; i < c.nflows; i++) {
		struct pc_flow *f = &c.flow[i];
		u32 pd, start, crc;
		struct kw_mpa_frame fr;
		bool rep;

		if (f->len < 20)
			continue;
		rep = !memcmp(f->data, KW_MPA_KEY_REP, 16);
		if (!rep && memcmp(f->data, KW_MPA_KEY_REQ, 16))
			continue;
		if (kw_mpa_decode_hdr(f->data, rep, &fr))
			continue;
		pd = fr.pd_len;
		put(mpa, 0x07, f->data, 20 + pd);
		put(mpa, 0x3d, f->data, 20 + pd);
		start = 20 + pd;
		crc = fr.crc;
		terms_of(term, f->data + start, f->len - start, crc);
		if (f->len - start > 8000)	/* keep seeds small */
			continue;
		put(rx, crc | 2, f->data + start, f->len - start);
		put(rx, crc | 2 | (1 << 2), f->data + start, f->len - start);
		put(rx, crc | 2 | (13 << 2), f->data + start, f->len - start);
	}
	pc_free(&c);
}

/* fuzz_tx input: crc, then per message opcode, MULPDU, chunk, fields */
static void tx_seeds(const char *tx)
{
	static const u8 seeds[][24] = {
		{ 0, 3, 0x05, 0xb4, 0, 0, 0, 0, 0, 0x10, 0, 0, 'a', 'b', 'c' },
		{ 1, 0, 0x00, 0x40, 7, 0x01, 0x00, 0, 0x20, 1, 2, 3, 4, 5 },
		{ 1, 1, 0x03, 0xe8, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0x10 },
		{ 0, 2, 0x00, 0x64, 0, 0x02, 0x00, 0, 0x80, 9, 9, 9, 9 },
		{ 1, 7, 0x03, 0xe8, 0, 1, 2, 0x0b, 0x12, 0x34, 0x80, 0, 1 },
		{ 0, 4, 0x00, 0x30, 0, 0, 0x50, 0xde, 0xad, 0xbe, 0xef, 1 },
	};
	size_t i;

	for (i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++)
		put(tx, seeds[i][0], seeds[i] + 1, sizeof(seeds[i]) - 1);
}

static void synthetic(const char *rx, const char *term)
{
	static u8 s[8192];
	u8 body[KW_TERM_MAX_LEN];
	struct kw_read_req rr = { 0x200, 0x10000, 64, 1, 0 };
	struct kw_term t = { 1, 1, 0, true, true, false };
	struct kw_tx_msg m;
	int crc, n;

	pattern_init();
	for (crc = 0; crc < 2; crc++) {
		m = msg_send(1, 300, crc);
		m.mulpdu = 100;
		n = build_msg(&m, pattern, s, sizeof(s));
		put(rx, crc, s, n);
		m = msg_write(1, 5, 1000, crc);
		m.mulpdu = 333;
		n = build_msg(&m, pattern, s, sizeof(s));
		put(rx, crc, s, n);
		kw_read_req_encode(&rr, body);
		m = (struct kw_tx_msg){ .opcode = KW_OP_READ_REQ, .crc = crc,
			.mulpdu = 1000, .qn = 1, .msn = 1,
			.inline_data = body, .inline_len = 28 };
		n = build_msg(&m, NULL, s, sizeof(s));
		put(rx, crc, s, n);
		t.has_len = t.has_ddp_hdr = false;
		n = kw_term_encode(&t, NULL, 0, body);
		put(term, body[0], body + 1, n - 1);
		m = (struct kw_tx_msg){ .opcode = KW_OP_TERMINATE, .crc = crc,
			.mulpdu = 1000, .qn = 2, .msn = 1,
			.inline_data = body, .inline_len = n };
		n = build_msg(&m, NULL, s, sizeof(s));
		put(rx, crc, s, n);
		m = (struct kw_tx_msg){ .opcode = KW_OP_READ_RESP, .crc = crc,
			.mulpdu = 1000, .len = 64, .stag = 0x200,
			.to = 0x10000 };
		n = build_msg(&m, pattern, s, sizeof(s));
		put(rx, crc, s, n);
	}
}

int main(int argc, char **argv)
{
	char rx[4096], mpa[4096], term[4096], tx[4096];
	int i;

	if (argc < 2) {
		fprintf(stderr, "usage: %s OUTDIR CAPTURE...\n", argv[0]);
		return 2;
	}
	snprintf(rx, sizeof(rx), "%s/seed-rx", argv[1]);
	snprintf(mpa, sizeof(mpa), "%s/seed-mpa", argv[1]);
	snprintf(term, sizeof(term), "%s/seed-term", argv[1]);
	snprintf(tx, sizeof(tx), "%s/seed-tx", argv[1]);
	for (i = 2; i < argc; i++)
		from_capture(argv[i], rx, mpa, term);
	synthetic(rx, term);
	tx_seeds(tx);
	printf("%d seeds from %d captures\n", nfile, argc - 2);
	return 0;
}
