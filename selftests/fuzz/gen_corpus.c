// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Seed corpus generator: MPA Request/Reply frames and post-setup FPDU
 * streams from the reference captures, plus encoder-built streams of
 * every message type. Usage: gen_corpus REFDIR OUTDIR/rx OUTDIR/mpa
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

static void from_capture(const char *path, const char *rx, const char *mpa)
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
		if (f->len - start > 8000)	/* keep seeds small */
			continue;
		put(rx, crc | 2, f->data + start, f->len - start);
		put(rx, crc | 2 | (1 << 2), f->data + start, f->len - start);
		put(rx, crc | 2 | (13 << 2), f->data + start, f->len - start);
	}
	pc_free(&c);
}

static void synthetic(const char *rx)
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
	char path[4096];

	if (argc != 4) {
		fprintf(stderr, "usage: %s REFDIR RXDIR MPADIR\n", argv[0]);
		return 2;
	}
	snprintf(path, sizeof(path), "%s/siw-rping-default.pcapng", argv[1]);
	from_capture(path, argv[2], argv[3]);
	snprintf(path, sizeof(path), "%s/siw-rping-crc-p2p.pcapng", argv[1]);
	from_capture(path, argv[2], argv[3]);
	synthetic(argv[2]);
	printf("%d seeds\n", nfile);
	return 0;
}
