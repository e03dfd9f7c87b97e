// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * DDP (RFC 5041) over MPA FPDUs (RFC 5044): header codec, transmit
 * segmentation and the resumable receive parser with every placement
 * check. RDMAP (RFC 5040) message rules that the parser must enforce
 * (queue numbers, Read Request size, access rights) live here too; the
 * RDMAP codecs are in rdmap.c.
 */
#include "iwarp.h"

/* ------------------------------------------------------------ header codec */

static void set_term(struct kw_term *t, u8 layer, u8 etype, u8 ecode)
{
	memset(t, 0, sizeof(*t));
	t->layer = layer;
	t->etype = etype;
	t->ecode = ecode;
}

int kw_ddp_hdr_decode(const u8 *p, u32 avail, struct kw_ddp_hdr *h,
		      struct kw_term *term)
{
	u8 ctrl, rctrl;

	if (avail < 2)
		return -EAGAIN;
	memset(h, 0, sizeof(*h));
	ctrl = p[0];
	rctrl = p[1];
	/* RFC 5041 section 4.2/4.3: T selects the 14- or 18-byte header */
	h->tagged = ctrl & KW_DDP_FLAG_TAGGED;
	h->last = ctrl & KW_DDP_FLAG_LAST;
	h->hdr_len = h->tagged ? KW_DDP_TAGGED_HDR_LEN :
				 KW_DDP_UNTAGGED_HDR_LEN;
	h->opcode = rctrl & KW_RDMAP_OPCODE_MASK;
	if (avail < h->hdr_len)
		return -EAGAIN;

	/*
	 * RFC 5041 section 4.2 and RFC 5040 section 4.1: the Rsvd bits of
	 * both control bytes MUST be zero on transmit and are not checked on
	 * receive, so they are deliberately ignored here.
	 */

	/* RFC 5041 section 4.1 / 7.2: DDP version must be 01b */
	if ((ctrl & KW_DDP_VERSION_MASK) != KW_DDP_VERSION) {
		set_term(term, KW_TERM_LAYER_DDP,
			 h->tagged ? KW_TERM_DDP_ETYPE_TAGGED :
				     KW_TERM_DDP_ETYPE_UNTAGGED,
			 h->tagged ? KW_TERM_DDP_T_INV_VERSION :
				     KW_TERM_DDP_U_INV_VERSION);
		return -EPROTO;
	}
	/* RFC 5040 section 4.1 / 7.2: RDMAP version must be 01b */
	if ((rctrl >> KW_RDMAP_VERSION_SHIFT) != KW_RDMAP_VERSION) {
		set_term(term, KW_TERM_LAYER_RDMAP,
			 KW_TERM_RDMAP_ETYPE_REMOTE_OP,
			 KW_TERM_RDMAP_INV_VERSION);
		return -EPROTO;
	}
	/* RFC 5040 section 4.3 / 7.2: opcode known and T bit as specified */
	if (!kw_rdmap_opcode_valid(h->opcode, h->tagged)) {
		set_term(term, KW_TERM_LAYER_RDMAP,
			 KW_TERM_RDMAP_ETYPE_REMOTE_OP,
			 KW_TERM_RDMAP_UNEXP_OPCODE);
		return -EPROTO;
	}
	if (h->tagged) {
		h->stag = get_unaligned_be32(p + 2);
		h->to = get_unaligned_be64(p + 6);
	} else {
		h->inv_stag = get_unaligned_be32(p + 2);
		h->qn = get_unaligned_be32(p + 6);
		h->msn = get_unaligned_be32(p + 10);
		h->mo = get_unaligned_be32(p + 14);
	}
	return 0;
}

u32 kw_ddp_hdr_encode(const struct kw_ddp_hdr *h, u8 *out)
{
	out[0] = (h->tagged ? KW_DDP_FLAG_TAGGED : 0) |
		 (h->last ? KW_DDP_FLAG_LAST : 0) | KW_DDP_VERSION;
	out[1] = (u8)(KW_RDMAP_VERSION << KW_RDMAP_VERSION_SHIFT) |
		 (h->opcode & KW_RDMAP_OPCODE_MASK);
	if (h->tagged) {
		put_unaligned_be32(h->stag, out + 2);
		put_unaligned_be64(h->to, out + 6);
		return KW_DDP_TAGGED_HDR_LEN;
	}
	/* RFC 5040 section 4.1: the ULP-reserved word carries the STag to
	 * invalidate for Send with Invalidate, zero otherwise. */
	put_unaligned_be32(h->inv_stag, out + 2);
	put_unaligned_be32(h->qn, out + 6);
	put_unaligned_be32(h->msn, out + 10);
	put_unaligned_be32(h->mo, out + 14);
	return KW_DDP_UNTAGGED_HDR_LEN;
}

/* --------------------------------------------------------------- transmit */

static bool op_tagged(u8 opcode)
{
	return opcode == KW_OP_WRITE || opcode == KW_OP_READ_RESP;
}

static bool op_inline(u8 opcode)
{
	return opcode == KW_OP_READ_REQ || opcode == KW_OP_TERMINATE;
}

int kw_tx_fpdu_next(const struct kw_tx_msg *msg, u32 *off,
		    struct kw_tx_fpdu *f)
{
	struct kw_ddp_hdr h;
	u32 hlen, room, seg, ulpdu, pad;

	if (msg->opcode >= KW_OP_MAX)
		return -EINVAL;
	memset(&h, 0, sizeof(h));
	h.opcode = msg->opcode;
	h.tagged = op_tagged(msg->opcode);
	hlen = h.tagged ? KW_DDP_TAGGED_HDR_LEN : KW_DDP_UNTAGGED_HDR_LEN;
	/* RFC 5041 section 5.2: every segment carries a full header */
	if (msg->mulpdu <= hlen || msg->mulpdu > 0xffff)
		return -EINVAL;
	room = msg->mulpdu - hlen;

	if (op_inline(msg->opcode)) {
		/* RFC 5040 sections 4.4 and 4.8: Read Request and Terminate
		 * are single-segment messages whose body rides in hdr. */
		if (*off != 0 || msg->inline_len > room ||
		    msg->inline_len > KW_TERM_MAX_LEN ||
		    (msg->inline_len && !msg->inline_data))
			return -EINVAL;
		if (msg->opcode == KW_OP_READ_REQ &&
		    msg->inline_len != KW_READ_REQ_LEN)
			return -EINVAL;
		seg = 0;
		h.last = true;
	} else {
		if (*off > msg->len || (*off == msg->len && msg->len))
			return -EINVAL;
		seg = min_t(u32, msg->len - *off, room);
		/* RFC 5041 section 5.3: L marks the last segment */
		h.last = *off + seg == msg->len;
	}
	if (h.tagged) {
		/* RFC 5041 section 5.3: TO advances with the payload */
		h.stag = msg->stag;
		h.to = msg->to + *off;
	} else {
		/* RFC 5041 section 5.3: MO advances; QN/MSN per message */
		h.inv_stag = msg->inv_stag;
		h.qn = msg->qn;
		h.msn = msg->msn;
		h.mo = *off;
	}

	/* field by field: hdr is written up to hdr_len, which is all any
	 * caller reads (the whole array is large for a per-FPDU clear) */
	memset(f->trailer, 0, sizeof(f->trailer));
	ulpdu = hlen + seg + (op_inline(msg->opcode) ? msg->inline_len : 0);
	/* RFC 5044 section 4.1: ULPDU length field */
	put_unaligned_be16((u16)ulpdu, f->hdr);
	kw_ddp_hdr_encode(&h, f->hdr + 2);
	f->hdr_len = 2 + hlen;
	if (op_inline(msg->opcode) && msg->inline_len) {
		memcpy(f->hdr + f->hdr_len, msg->inline_data,
		       msg->inline_len);
		f->hdr_len += msg->inline_len;
	}
	f->payload_off = *off;
	f->payload_len = seg;
	/* RFC 5044 section 4.1: zero pad to 4 bytes, then the CRC field,
	 * which is present (zero) even when CRC is not in use. */
	pad = kw_mpa_pad(ulpdu);
	f->trailer_len = pad + 4;
	f->last = h.last;
	*off += seg;
	return 0;
}

/*
 * Bytes msg occupies on the wire (every FPDU's header, payload, pad and CRC
 * field), without walking its FPDUs: all but the last carry the same
 * header and payload length; the CRC field is present with or without CRC
 * (RFC 5044 section 6.1). Modulo 2^32, like TCP sequence numbers.
 */
u32 kw_tx_msg_wire_len(const struct kw_tx_msg *msg)
{
	struct kw_tx_fpdu f;
	u32 off = 0, per, rest, tail, crc_len, full;
	u64 len;

	if (kw_tx_fpdu_next(msg, &off, &f))
		return 0;
	full = f.hdr_len + f.payload_len + f.trailer_len;
	if (f.last)
		return full;
	per = f.payload_len;
	crc_len = f.trailer_len - kw_mpa_pad(f.hdr_len - 2 + per);
	rest = msg->len - per;
	tail = rest % per;
	len = (u64)full * (1 + rest / per);
	if (tail)
		len += f.hdr_len + tail + kw_mpa_pad(f.hdr_len - 2 + tail) +
		       crc_len;
	return (u32)len;
}

void kw_tx_fpdu_seal(const struct kw_tx_msg *msg, struct kw_tx_fpdu *f,
		     u32 crc)
{
	u32 pad = f->trailer_len - 4;

	memset(f->trailer, 0, pad);
	if (!msg->crc) {
		/* RFC 5044 section 4.4: CRC field zero when CRC is off */
		memset(f->trailer + pad, 0, 4);
		return;
	}
	crc = kw_mpa_crc_update(crc, f->trailer, pad);
	kw_mpa_crc_put(crc, f->trailer + pad);
}

/* ---------------------------------------------------------------- receive */

void kw_rx_init(struct kw_rx *rx, const struct kw_rx_ops *ops, void *ctx,
		bool crc, u32 pd)
{
	memset(rx, 0, sizeof(*rx));
	rx->ops = ops;
	rx->ctx = ctx;
	rx->crc = crc;
	rx->pd = pd;
	rx->state = KW_RX_HDR;
	rx->crc_acc = kw_mpa_crc_init();
	/* RFC 5041 section 4.3: the first MSN of every queue is 1 */
	rx->msn[0] = rx->msn[1] = rx->msn[2] = 1;
}

/*
 * Enter the error state. The Terminate carries the offending FPDU's length
 * and headers whenever they were received (RFC 5040 section 4.8: M, D, R),
 * except for LLP errors, where a failed CRC means none of it can be
 * trusted (RFC 5044 section 8).
 */
static void rx_fail(struct kw_rx *rx, u8 layer, u8 etype, u8 ecode)
{
	set_term(&rx->term, layer, etype, ecode);
	rx->state = KW_RX_ERROR;
}

static void rx_fail_term(struct kw_rx *rx)
{
	u32 hlen;

	rx->state = KW_RX_ERROR;
	rx->term.has_len = false;
	rx->term.has_ddp_hdr = false;
	rx->term.has_rdmap_hdr = false;
	/*
	 * RFC 5040 section 4.8: "The DDP Header is not present if the
	 * Terminate Error Type is a Local Catastrophic Error" (RDMAP or DDP
	 * error type 0); LLP errors carry no headers either.
	 */
	if (rx->term.layer == KW_TERM_LAYER_LLP || rx->bad_len < 3 ||
	    rx->term.etype == KW_TERM_RDMAP_ETYPE_CATASTROPHIC)
		return;
	hlen = (rx->bad[2] & KW_DDP_FLAG_TAGGED) ? KW_DDP_TAGGED_HDR_LEN :
						     KW_DDP_UNTAGGED_HDR_LEN;
	rx->term.has_len = true;
	if (rx->bad_len < 2 + hlen)
		return;
	rx->term.has_ddp_hdr = true;
	/*
	 * RFC 5040 section 4.8, Figure 10: the RDMA header comes back only
	 * for an RDMAP Remote Protection Error, which only a Read Request
	 * (or Send with Invalidate, which has none) causes; DDP and Remote
	 * Operation errors carry the DDP header alone, with CRC or without.
	 */
	if (rx->term.layer == KW_TERM_LAYER_RDMAP &&
	    rx->term.etype == KW_TERM_RDMAP_ETYPE_REMOTE_PROT &&
	    hlen == KW_DDP_UNTAGGED_HDR_LEN &&
	    (rx->bad[3] & KW_RDMAP_OPCODE_MASK) == KW_OP_READ_REQ &&
	    rx->bad_len == 2 + hlen + KW_READ_REQ_LEN)
		rx->term.has_rdmap_hdr = true;
}

static void rx_error(struct kw_rx *rx, u8 layer, u8 etype, u8 ecode)
{
	rx_fail(rx, layer, etype, ecode);
	rx_fail_term(rx);
}

/*
 * Whether [off, off + len), already inside the buffer, lies in mr's window:
 * the ring interval of win_len bytes from win_off (struct kw_mr_view).
 */
static bool ddp_in_window(const struct kw_mr_view *mr, u64 off, u32 len)
{
	u64 rel;

	if (mr->win_off >= mr->len || mr->win_len > mr->len)
		return false;	/* no sane window: nothing may land */
	rel = off >= mr->win_off ? off - mr->win_off :
				   off + mr->len - mr->win_off;
	return rel + len <= mr->win_len;
}

/* Tagged placement checks, RFC 5041 section 5.1/7.2 and RFC 5040 7.2 */
static bool rx_tagged(struct kw_rx *rx, u32 len)
{
	const struct kw_ddp_hdr *h = &rx->h;
	u64 end;

	memset(&rx->mr, 0, sizeof(rx->mr));
	rx->place_off = 0;
	/*
	 * A zero-length tagged segment accesses no memory, so neither STag
	 * nor TO is validated: RFC 5040 section 5.3 allows zero-length
	 * RDMA Writes, and RFC 6581 section 6 uses one with an arbitrary
	 * STag as the RTR frame (siw sends STag 1, TO 0).
	 */
	if (!len)
		return true;
	/* RFC 5041 section 7.2: unknown STag -> tagged, invalid STag */
	if (rx->ops->lookup_stag(rx->ctx, h->stag, h->opcode, &rx->mr)) {
		rx_error(rx, KW_TERM_LAYER_DDP, KW_TERM_DDP_ETYPE_TAGGED,
			 KW_TERM_DDP_T_INV_STAG);
		return false;
	}
	/* RFC 5040 sections 5.3, 7.2: an invalidated STag is an invalid STag */
	if (!rx->mr.valid) {
		rx_error(rx, KW_TERM_LAYER_DDP, KW_TERM_DDP_ETYPE_TAGGED,
			 KW_TERM_DDP_T_INV_STAG);
		return false;
	}
	/* RFC 5041 section 7.2: STag of another PD / stream */
	if (rx->mr.pd != rx->pd) {
		rx_error(rx, KW_TERM_LAYER_DDP, KW_TERM_DDP_ETYPE_TAGGED,
			 KW_TERM_DDP_T_STAG_NOT_ASSOC);
		return false;
	}
	/* RFC 5041 section 7.2: TO + length wraps the 64-bit TO space */
	if (h->to + len < h->to) {
		rx_error(rx, KW_TERM_LAYER_DDP, KW_TERM_DDP_ETYPE_TAGGED,
			 KW_TERM_DDP_T_TO_WRAP);
		return false;
	}
	/* RFC 5041 section 7.2: base and bounds of the tagged buffer */
	end = rx->mr.base + rx->mr.len;
	if (h->to < rx->mr.base || end < rx->mr.base ||
	    h->to + len > end) {
		rx_error(rx, KW_TERM_LAYER_DDP, KW_TERM_DDP_ETYPE_TAGGED,
			 KW_TERM_DDP_T_BASE_BOUNDS);
		return false;
	}
	/* a windowed buffer's bounds are its window (struct kw_mr_view) */
	if (rx->mr.windowed && !ddp_in_window(&rx->mr, h->to - rx->mr.base,
					      len)) {
		rx_error(rx, KW_TERM_LAYER_DDP, KW_TERM_DDP_ETYPE_TAGGED,
			 KW_TERM_DDP_T_BASE_BOUNDS);
		return false;
	}
	/*
	 * RFC 5040 section 7.2 (remote protection, access rights): a Write
	 * needs Remote Write; a Read Response lands in a local buffer we
	 * registered for it and needs Local Write.
	 */
	if (!(rx->mr.access & (h->opcode == KW_OP_WRITE ?
			       KW_ACC_REMOTE_WRITE : KW_ACC_LOCAL_WRITE))) {
		rx_error(rx, KW_TERM_LAYER_RDMAP,
			 KW_TERM_RDMAP_ETYPE_REMOTE_PROT, KW_TERM_RDMAP_ACCESS);
		return false;
	}
	rx->place_off = h->to - rx->mr.base;
	return true;
}

/* Check the SGEs that [off, off + len) of the message touches. */
static bool rx_sges_ok(struct kw_rx *rx, u32 off, u32 len)
{
	const struct kw_rx_buf *b = rx->buf;
	u32 i, pos = 0;

	for (i = 0; i < b->num_sge && len; i++) {
		u32 sl = b->sge[i].len;
		const struct kw_mr_view *mr = &b->sge[i].mr;
		u64 a = b->sge[i].addr;

		if (pos + sl <= off) {
			pos += sl;
			continue;
		}
		if (!mr->valid || !(mr->access & KW_ACC_LOCAL_WRITE) ||
		    a < mr->base || a + sl < a ||
		    a + sl > mr->base + mr->len ||
		    mr->base + mr->len < mr->base)
			return false;
		pos += sl;
		if (pos >= off + len)
			break;
	}
	return true;
}

/* An untagged buffer error (RFC 5041 section 7.2): false */
static bool rx_untagged_error(struct kw_rx *rx, u8 code)
{
	rx_error(rx, KW_TERM_LAYER_DDP, KW_TERM_DDP_ETYPE_UNTAGGED, code);
	return false;
}

/* The queue and MSN: RFC 5041 section 5.3/7.2 and RFC 5040 section 5.1 */
static bool rx_untagged_queue(struct kw_rx *rx)
{
	const struct kw_ddp_hdr *h = &rx->h;
	u32 want_qn;

	/* RFC 5041 section 7.2: RDMAP defines queues 0, 1 and 2 only */
	if (h->qn > KW_QN_TERMINATE)
		return rx_untagged_error(rx, KW_TERM_DDP_U_INV_QN);
	/* RFC 5040 section 5.1: Sends on QN 0, Read Requests on QN 1,
	 * Terminate on QN 2; anything else targets a queue that has no
	 * buffer for that message: invalid QN. */
	want_qn = h->opcode == KW_OP_READ_REQ ? KW_QN_READ_REQ :
		  h->opcode == KW_OP_TERMINATE ? KW_QN_TERMINATE : KW_QN_SEND;
	if (h->qn != want_qn)
		return rx_untagged_error(rx, KW_TERM_DDP_U_INV_QN);
	/* RFC 5041 section 5.3/7.2: MSN must be the next message of the
	 * queue (TCP delivers in order, so nothing else is in range). */
	if (h->msn != rx->msn[h->qn])
		return rx_untagged_error(rx, KW_TERM_DDP_U_INV_MSN_RANGE);
	return true;
}

/* A Read Request or Terminate (QN 1, 2): one segment, into rx->inl */
static bool rx_single_segment(struct kw_rx *rx, u32 len)
{
	const struct kw_ddp_hdr *h = &rx->h;

	/* Single-segment messages start at MO 0 (RFC 5041 7.2) */
	if (h->mo != 0)
		return rx_untagged_error(rx, KW_TERM_DDP_U_INV_MO);
	/*
	 * RFC 5040 section 4.4: a Read Request is exactly one segment with
	 * a 28-byte header; section 4.8: a Terminate is one segment with at
	 * least its control word. A malformed one leaves the stream
	 * unusable; RFC 5040 7.2 has no narrower code than "catastrophic,
	 * localized".
	 */
	if (!h->last ||
	    (h->opcode == KW_OP_READ_REQ && len != KW_READ_REQ_LEN) ||
	    (h->opcode == KW_OP_TERMINATE && len < 4)) {
		rx_error(rx, KW_TERM_LAYER_RDMAP, KW_TERM_RDMAP_ETYPE_REMOTE_OP,
			 KW_TERM_RDMAP_CATASTROPHIC_STREAM);
		return false;
	}
	/* No buffer can take a larger Terminate: RFC 5041 7.2 */
	if (len > sizeof(rx->inl))
		return rx_untagged_error(rx, KW_TERM_DDP_U_MSG_TOO_LONG);
	return true;
}

/* A Send's segment (QN 0): the posted buffer for its MSN takes it */
static bool rx_send_buf(struct kw_rx *rx, u32 len)
{
	const struct kw_ddp_hdr *h = &rx->h;
	u32 i, sum = 0;
	int ret;

	/* RFC 5041 section 7.2: no posted buffer for this MSN */
	ret = rx->ops->get_rx_buf(rx->ctx, h->msn, &rx->buf);
	if (ret == -EFAULT)
		goto local;	/* one is posted, but unusable */
	if (ret || !rx->buf) {
		rx->buf = NULL;
		return rx_untagged_error(rx, KW_TERM_DDP_U_INV_MSN_NOBUF);
	}
	/*
	 * A malformed posted buffer or SGE without Local Write is our own
	 * fault, not the peer's: RFC 5040 section 7.2 RDMAP "local
	 * catastrophic error" (etype 0, code 0), not a remote protection
	 * error which would blame the peer's STag.
	 */
	if (rx->buf->num_sge > KW_RX_MAX_SGE)
		goto local;
	for (i = 0; i < rx->buf->num_sge; i++)
		sum += rx->buf->sge[i].len;
	if (sum != rx->buf->total)
		goto local;
	/*
	 * RFC 5041 section 7.1 check 3, the MO within the buffer, is "Invalid
	 * MO" (section 7.2); an MO inside (or at its end) with a segment
	 * running past the end, "DDP Message too long", as siw reports it.
	 */
	if (h->mo > rx->buf->total)
		return rx_untagged_error(rx, KW_TERM_DDP_U_INV_MO);
	if ((u64)h->mo + len > rx->buf->total)
		return rx_untagged_error(rx, KW_TERM_DDP_U_MSG_TOO_LONG);
	if (!rx_sges_ok(rx, h->mo, len))
		goto local;
	return true;
local:
	rx->buf = NULL;
	rx_error(rx, KW_TERM_LAYER_RDMAP, KW_TERM_RDMAP_ETYPE_CATASTROPHIC,
		 0);
	return false;
}

/* Untagged checks, RFC 5041 section 5.3/7.2 and RFC 5040 section 5.1 */
static bool rx_untagged(struct kw_rx *rx, u32 len)
{
	rx->buf = NULL;
	if (!rx_untagged_queue(rx))
		return false;
	if (rx->h.qn != KW_QN_SEND)
		return rx_single_segment(rx, len);
	return rx_send_buf(rx, len);
}

/* The header (MPA length + DDP/RDMAP header) is complete: validate. */
static void rx_header_done(struct kw_rx *rx)
{
	u32 hlen = rx->hdr_got - 2, len;
	int rv;

	rx->ulpdu_len = get_unaligned_be16(rx->hdr);
	memcpy(rx->bad, rx->hdr, rx->hdr_got);
	rx->bad_len = rx->hdr_got;

	len = rx->ulpdu_len - hlen;	/* >= 0: rx_hdr() checked */
	rx->discard = false;
	rx->data_done = 0;
	rx->trailer_got = 0;
	rx->trailer_need = kw_mpa_pad(rx->ulpdu_len) + 4;

	rv = kw_ddp_hdr_decode(rx->hdr + 2, hlen, &rx->h, &rx->term);
	if (rv)
		rx_fail_term(rx);
	else if (rx->h.tagged)
		rx_tagged(rx, len);
	else
		rx_untagged(rx, len);
	if (rx->state == KW_RX_ERROR) {
		/*
		 * RFC 5044 section 6.1 / 8: with CRC the FPDU must pass the
		 * CRC before DDP acts on it, so a header that fails DDP or
		 * RDMAP checks may really be a corrupted one. Skip the
		 * segment without placing anything and decide at the CRC:
		 * bad CRC -> MPA CRC error, good CRC -> this Terminate.
		 * An FPDU verified ahead has passed already.
		 */
		if (!rx->crc || rx->verified)
			return;
		rx->discard = true;
		rx->buf = NULL;
	}

	if (op_inline(rx->h.opcode) && len <= sizeof(rx->inl)) {
		rx->inl_got = 0;
		rx->inl_need = len;
		rx->data_left = 0;
		rx->state = KW_RX_INLINE;
	} else {
		rx->data_left = len;
		rx->state = len ? KW_RX_DATA : KW_RX_TRAILER;
	}
}

static size_t rx_hdr(struct kw_rx *rx, const u8 *p, size_t len)
{
	size_t used = 0;

	for (;;) {
		u32 need = 4, take;

		/* MPA length (2) + DDP control byte tell the header size */
		if (rx->hdr_got >= 4)
			need = 2 + ((rx->hdr[2] & KW_DDP_FLAG_TAGGED) ?
				    KW_DDP_TAGGED_HDR_LEN :
				    KW_DDP_UNTAGGED_HDR_LEN);
		if (rx->hdr_got == need)
			break;
		/*
		 * RFC 5044 section 4.1: the ULPDU holds the whole DDP header.
		 * Known to be shorter as soon as the control byte is in: stop
		 * there, at the end of a minimal FPDU, rather than read the
		 * next FPDU's bytes as this header (RFC 5041 section 7.2,
		 * local catastrophic error, code 0; nothing can be skipped
		 * safely, so reported at once even with CRC).
		 */
		if (rx->hdr_got >= 4 &&
		    get_unaligned_be16(rx->hdr) < need - 2) {
			rx->ulpdu_len = get_unaligned_be16(rx->hdr);
			rx->bad_len = 0;
			rx_error(rx, KW_TERM_LAYER_DDP,
				 KW_TERM_DDP_ETYPE_CATASTROPHIC, 0);
			return used;
		}
		if (used == len)
			return used;
		take = min_t(u32, need - rx->hdr_got, len - used);
		memcpy(rx->hdr + rx->hdr_got, p + used, take);
		rx->hdr_got += take;
		used += take;
	}
	rx_header_done(rx);
	return used;
}

/* Place a payload chunk; untagged payload may span several SGEs. */
static void rx_place(struct kw_rx *rx, const u8 *p, u32 n)
{
	const struct kw_rx_buf *b = rx->buf;
	u32 off, i, pos = 0;

	if (rx->h.tagged) {
		rx->ops->place(rx->ctx, rx->mr.cookie,
			       rx->place_off + rx->data_done, p, n);
		return;
	}
	off = rx->h.mo + rx->data_done;
	for (i = 0; i < b->num_sge && n; i++) {
		u32 sl = b->sge[i].len, in, chunk;

		if (pos + sl <= off) {
			pos += sl;
			continue;
		}
		in = off - pos;
		chunk = min_t(u32, sl - in, n);
		rx->ops->place(rx->ctx, b->sge[i].mr.cookie,
			       b->sge[i].addr - b->sge[i].mr.base + in, p,
			       chunk);
		p += chunk;
		n -= chunk;
		off += chunk;
		pos += sl;
	}
}

static size_t rx_data(struct kw_rx *rx, const u8 *p, size_t len)
{
	u32 n = min_t(u32, rx->data_left, len);

	if (!rx->discard)
		rx_place(rx, p, n);
	rx->data_done += n;
	rx->data_left -= n;
	if (!rx->data_left)
		rx->state = KW_RX_TRAILER;
	return n;
}

static size_t rx_inline(struct kw_rx *rx, const u8 *p, size_t len)
{
	u32 n = min_t(u32, rx->inl_need - rx->inl_got, len);

	memcpy(rx->inl + rx->inl_got, p, n);
	rx->inl_got += n;
	if (rx->inl_got == rx->inl_need) {
		/* keep the Read Request header for a Terminate's R part */
		if (rx->h.opcode == KW_OP_READ_REQ &&
		    rx->inl_got == KW_READ_REQ_LEN &&
		    rx->bad_len == 2 + KW_DDP_UNTAGGED_HDR_LEN) {
			memcpy(rx->bad + rx->bad_len, rx->inl, rx->inl_got);
			rx->bad_len += rx->inl_got;
		}
		rx->state = KW_RX_TRAILER;
	}
	return n;
}

static size_t rx_trailer(struct kw_rx *rx, const u8 *p, size_t len)
{
	u32 n = min_t(u32, rx->trailer_need - rx->trailer_got, len);
	u32 pad = rx->trailer_need - 4, placed;
	const u8 *payload = NULL;
	struct kw_term term;

	memcpy(rx->trailer + rx->trailer_got, p, n);
	rx->trailer_got += n;
	if (rx->trailer_got < rx->trailer_need)
		return n;

	/*
	 * RFC 5044 section 4.4: CRC over length, ULPDU and pad (and the
	 * markers among them, section 5; crc_acc has them all, in wire
	 * order). Without CRC the field may hold any value and is ignored
	 * (section 4.1), as it is for an FPDU the caller verified ahead.
	 */
	if (rx->crc && !rx->verified) {
		if (!kw_mpa_crc_check(rx->crc_acc, rx->trailer + pad)) {
			rx_error(rx, KW_TERM_LAYER_LLP, KW_TERM_LLP_ETYPE_MPA,
				 KW_TERM_LLP_CRC);
			return n;
		}
	}
	if (rx->discard) {
		/* CRC good: the deferred header verdict stands */
		rx_fail_term(rx);
		return n;
	}
	placed = rx->data_done;
	if (op_inline(rx->h.opcode)) {
		payload = rx->inl;
		placed = rx->inl_got;
	}
	memset(&term, 0, sizeof(term));
	if (rx->ops->segment_done &&
	    rx->ops->segment_done(rx->ctx, &rx->h, payload, placed, &term)) {
		/* the glue's verdict, with the headers we still hold */
		rx->term = term;
		rx_fail_term(rx);
		return n;
	}
	/* RFC 5041 section 5.3: the MSN moves on once L=1 completed */
	if (!rx->h.tagged && rx->h.last)
		rx->msn[rx->h.qn]++;
	rx->fpdus++;
	rx->payload_bytes += placed;
	rx->buf = NULL;
	rx->hdr_got = 0;
	rx->bad_len = 0;
	rx->verified = false;
	rx->fpdu_open = false;
	rx->crc_acc = kw_mpa_crc_init();
	rx->state = KW_RX_HDR;
	return n;
}

void kw_rx_verified(struct kw_rx *rx)
{
	if (kw_rx_at_fpdu(rx))
		rx->verified = true;
}

void kw_rx_crc_failed(struct kw_rx *rx)
{
	if (rx->state != KW_RX_ERROR)
		rx_error(rx, KW_TERM_LAYER_LLP, KW_TERM_LLP_ETYPE_MPA,
			 KW_TERM_LLP_CRC);
}

void kw_rx_set_markers(struct kw_rx *rx)
{
	rx->markers = true;
	rx->fpdu_open = false;
	rx->mpos = 0;
	rx->mk_got = 0;
}

void kw_rx_marker_failed(struct kw_rx *rx)
{
	if (rx->state != KW_RX_ERROR) {
		rx->bad_len = 0;
		rx_error(rx, KW_TERM_LAYER_LLP, KW_TERM_LLP_ETYPE_MPA,
			 KW_TERM_LLP_MARKER);
	}
}

/* Fold n received bytes into the current FPDU's CRC. */
static void rx_crc_in(struct kw_rx *rx, const u8 *p, size_t n)
{
	if (rx->crc && !rx->verified && n)
		rx->crc_acc = kw_mpa_crc_update(rx->crc_acc, p, n);
}

/*
 * Bytes of the marker at the current position (RFC 5044 section 5). Its
 * FPDUPTR must be the distance back to the ULPDU Length field of the FPDU
 * it sits in (0 for one that leads an FPDU, in front of that field); the
 * two low bits count as zero and the reserved half is ignored. Anything
 * else is an LLP error: Terminate "Marker and ULPDU pointers not
 * consistent" (section 8).
 */
static size_t rx_marker(struct kw_rx *rx, const u8 *p, size_t len)
{
	u32 n = min_t(u32, KW_MPA_MARKER_LEN - rx->mk_got, len), want;

	memcpy(rx->mk + rx->mk_got, p, n);
	rx_crc_in(rx, p, n);
	rx->mk_got += n;
	rx->mpos += n;
	if (rx->mk_got < KW_MPA_MARKER_LEN)
		return n;
	rx->mk_got = 0;
	rx->markers_seen++;
	want = rx->mpos - KW_MPA_MARKER_LEN - rx->fpdu_pos;
	if (!want)	/* it leads the FPDU: the length field follows */
		rx->fpdu_pos = rx->mpos;
	if (want > 0xffff ||
	    (get_unaligned_be16(rx->mk + 2) & ~3U) != want)
		kw_rx_marker_failed(rx);
	return n;
}

size_t kw_rx_input(struct kw_rx *rx, const u8 *p, size_t len)
{
	size_t done = 0, n, used, take, pad;

	while (rx->state != KW_RX_ERROR) {
		/* a zero-length payload moves DATA->TRAILER with no input */
		if (rx->state == KW_RX_DATA && !rx->data_left) {
			rx->state = KW_RX_TRAILER;
			continue;
		}
		if (done == len)
			break;
		n = len - done;
		/* an FPDU begins: with its leading marker, if one is due */
		if (rx->state == KW_RX_HDR && !rx->hdr_got && !rx->fpdu_open) {
			rx->fpdu_open = true;
			rx->fpdu_pos = rx->mpos;
		}
		if (rx->markers) {
			if (rx->mk_got || !kw_mpa_marker_gap(rx->mpos)) {
				done += rx_marker(rx, p + done, n);
				continue;
			}
			n = min_t(size_t, n, kw_mpa_marker_gap(rx->mpos));
		}
		switch (rx->state) {
		case KW_RX_HDR:
			used = rx_hdr(rx, p + done, n);
			rx_crc_in(rx, p + done, used);
			break;
		case KW_RX_INLINE:
			used = rx_inline(rx, p + done, n);
			rx_crc_in(rx, p + done, used);
			break;
		case KW_RX_DATA:
			used = rx_data(rx, p + done, n);
			rx_crc_in(rx, p + done, used);
			break;
		case KW_RX_TRAILER:
			/* the pad is CRC'd, the CRC field not; before the
			 * call, which ends the FPDU */
			take = min_t(size_t, n, rx->trailer_need - rx->trailer_got);
			pad = rx->trailer_need - 4;
			if (rx->trailer_got < pad)
				rx_crc_in(rx, p + done,
					  min_t(size_t, take, pad - rx->trailer_got));
			used = rx_trailer(rx, p + done, n);
			break;
		default:
			return done;
		}
		done += used;
		rx->mpos += used;
	}
	return done;
}
