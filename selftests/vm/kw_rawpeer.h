/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * A raw iWARP peer on a plain TCP socket, built on the user-space build of
 * the protocol core (kmod/{mpa,ddp,rdmap}.c): kw_hostile's hostile peer and
 * kw_rnic's hardware-RNIC personalities. It frames messages (rp_send,
 * rp_build) and parses what kiwarp sends back (rp_read), recording each
 * message and the first Terminate. All static inline: each program uses a
 * subset. Include after kiwarp.h, iwarp.h and kw_vmtest.h.
 */
#ifndef KW_RAWPEER_H
#define KW_RAWPEER_H

#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

/* One end of the wire: its socket and the negotiated CRC. */
struct rp {
	int fd;
	bool crc;
};

static inline void rp_msg_init(const struct rp *p, struct kw_tx_msg *m)
{
	m->crc = p->crc;
	if (!m->mulpdu)
		m->mulpdu = 1448;
}

/* Cut the next FPDU of m (payload: the message's bytes), CRC sealed. */
static inline int rp_fpdu(struct kw_tx_msg *m, uint32_t *off,
			  const uint8_t *payload, struct kw_tx_fpdu *f)
{
	uint32_t crc;

	if (kw_tx_fpdu_next(m, off, f))
		return -1;
	crc = kw_mpa_crc_update(kw_mpa_crc_init(), f->hdr, f->hdr_len);
	if (f->payload_len)
		crc = kw_mpa_crc_update(crc, payload + f->payload_off,
					f->payload_len);
	kw_tx_fpdu_seal(m, f, crc);
	return 0;
}

/* Send one message as FPDUs (1448 bytes of ULPDU unless m->mulpdu says
 * otherwise); corrupt: 0 none, 1 flip a CRC bit. */
static inline int rp_send(const struct rp *p, struct kw_tx_msg *m,
			  const uint8_t *payload, int corrupt)
{
	struct kw_tx_fpdu f;
	uint32_t off = 0;

	rp_msg_init(p, m);
	do {
		if (rp_fpdu(m, &off, payload, &f))
			return -1;
		if (corrupt && f.trailer_len)
			f.trailer[f.trailer_len - 1] ^= 0x01;
		if (writen(p->fd, f.hdr, f.hdr_len) ||
		    writen(p->fd, payload + f.payload_off, f.payload_len) ||
		    writen(p->fd, f.trailer, f.trailer_len))
			return -1;
	} while (!f.last);
	return 0;
}

/* Build one message's FPDUs at out; returns the end, NULL on error. */
static inline uint8_t *rp_build(const struct rp *p, struct kw_tx_msg *m,
				const uint8_t *payload, uint8_t *out)
{
	struct kw_tx_fpdu f;
	uint32_t off = 0;

	rp_msg_init(p, m);
	do {
		if (rp_fpdu(m, &off, payload, &f))
			return NULL;
		memcpy(out, f.hdr, f.hdr_len);
		out += f.hdr_len;
		memcpy(out, payload + f.payload_off, f.payload_len);
		out += f.payload_len;
		memcpy(out, f.trailer, f.trailer_len);
		out += f.trailer_len;
	} while (!f.last);
	return out;
}

/* Read one MPA frame (a Reply if reply) from fd: header, then its private
 * data into pd, decoded into *f. 0, or -1. */
static inline int rp_read_frame(int fd, bool reply, struct kw_mpa_frame *f,
				uint8_t pd[KW_MPA_MAX_PD])
{
	uint8_t hdr[KW_MPA_HDR_LEN];

	if (readn(fd, hdr, sizeof(hdr), 5000) ||
	    kw_mpa_decode_hdr(hdr, reply, f) ||
	    readn(fd, pd, f->pd_len, 5000))
		return -1;
	return kw_mpa_decode_pd(f, pd) ? -1 : 0;
}

/*
 * Send a zero-length message of opcode as the RTR (RFC 6581 section 9.2),
 * STag 1 as siw and the RNICs use.
 */
static inline int rp_send_rtr(const struct rp *p, int opcode)
{
	uint8_t rr[KW_READ_REQ_LEN];
	struct kw_read_req r = { .sink_stag = 1, .src_stag = 1, .size = 0 };
	struct kw_tx_msg m = { .opcode = opcode, .msn = 1 };

	switch (opcode) {
	case KW_OP_READ_REQ:
		kw_read_req_encode(&r, rr);
		m.qn = KW_QN_READ_REQ;
		m.inline_data = rr;
		m.inline_len = KW_READ_REQ_LEN;
		break;
	case KW_OP_SEND:
		m.qn = KW_QN_SEND;
		break;
	case KW_OP_WRITE:
		m.stag = 1;
		break;
	}
	return rp_send(p, &m, rr, 0);
}

/* ---- what kiwarp sends back */

#define RP_LOG	64

struct rp_sink {
	/* every message (its last segment), in order */
	unsigned int n;
	struct { uint8_t opcode; uint32_t len; } msg[RP_LOG];
	bool got_term;
	struct kw_term term;
	uint64_t placed;
	/* optional: placed bytes land here, at their TO (tagged) or
	 * message offset (untagged) */
	uint8_t *mem;
	uint64_t mem_len;
	struct kw_rx_buf buf;
};

static inline int rp_lookup(void *ctx, u32 stag, u8 op, struct kw_mr_view *v)
{
	struct rp_sink *s = ctx;

	(void)op;
	*v = (struct kw_mr_view){ .cookie = s, .stag = stag, .access = 7,
				  .valid = true, .base = 0, .len = ~0ULL >> 1 };
	return 0;
}

static inline int rp_getbuf(void *ctx, u32 msn, const struct kw_rx_buf **b)
{
	struct rp_sink *s = ctx;

	(void)msn;
	s->buf = (struct kw_rx_buf){ .num_sge = 1, .total = 1 << 30 };
	s->buf.sge[0].mr = (struct kw_mr_view){ .cookie = s, .access = 7,
						 .valid = true,
						 .len = 1 << 30 };
	s->buf.sge[0].len = 1 << 30;
	*b = &s->buf;
	return 0;
}

static inline void rp_place(void *ctx, void *cookie, u64 off, const void *src,
			    u32 len)
{
	struct rp_sink *s = ctx;

	(void)cookie;
	s->placed += len;
	if (s->mem && off < s->mem_len)
		memcpy(s->mem + off, src,
		       len < s->mem_len - off ? len : s->mem_len - off);
}

static inline int rp_done(void *ctx, const struct kw_ddp_hdr *h,
			  const u8 *payload, u32 placed, struct kw_term *t)
{
	struct rp_sink *s = ctx;

	(void)t;
	if (!h->last)
		return 0;
	if (s->n < RP_LOG) {
		s->msg[s->n].opcode = h->opcode;
		s->msg[s->n].len = h->mo + placed;
	}
	s->n++;
	if (h->opcode == KW_OP_TERMINATE && !s->got_term &&
	    !kw_term_decode(payload, placed, &s->term))
		s->got_term = true;
	return 0;
}

static const struct kw_rx_ops rp_sink_ops = {
	.lookup_stag = rp_lookup, .get_rx_buf = rp_getbuf, .place = rp_place,
	.segment_done = rp_done,
};

/*
 * Parse what arrives on p->fd for up to secs seconds, or until until(s)
 * says enough (NULL: until a Terminate), or EOF. rx must have been set up
 * with kw_rx_init(rx, &rp_sink_ops, s, p->crc, 0). Returns the number of
 * bytes read, -1 on EOF before anything arrived.
 */
static inline long rp_read(const struct rp *p, struct kw_rx *rx,
			   struct rp_sink *s, double secs,
			   bool (*until)(const struct rp_sink *))
{
	double end = now() + secs;
	long total = 0;
	uint8_t b[4096];

	while (until ? !until(s) : !s->got_term) {
		struct pollfd pfd = { .fd = p->fd, .events = POLLIN };
		double left = end - now();
		ssize_t n;

		if (left <= 0)
			break;
		if (poll(&pfd, 1, left > 0.5 ? 500 : (int)(left * 1000) + 1) != 1)
			continue;
		n = read(p->fd, b, sizeof(b));
		if (n <= 0)
			return total ? total : -1;
		total += n;
		kw_rx_input(rx, b, n);
	}
	return total;
}

#endif /* KW_RAWPEER_H */
