// SPDX-License-Identifier: GPL-2.0
/*
 * Receive path. TCP calls sk_data_ready in softirq (or at release_sock()
 * when it processes its backlog); we pull the queued skbs with
 * tcp_read_sock(), walk each one's linear part and page frags with
 * skb_seq_read() and feed the bytes to the sans-I/O parser (ddp.c). The
 * parser validates every header and calls back here to look up STags and
 * receive buffers, and to copy payload straight from the skb into the
 * pinned destination pages. There is no intermediate buffer.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/skbuff.h>
#include <net/tcp.h>

#include "qp.h"

static void rx_buf_release(struct kw_qp *qp)
{
	kw_mr_put_array(qp->rx_buf_mr, KIWARP_MAX_SGE);
	qp->rx_buf_valid = false;
}

/* Drop the MR reference a receive path holds in *holder (rx_lookup()). */
static void rx_holder_put(struct kw_mr **holder)
{
	if (*holder)
		kw_mr_put(*holder);
	*holder = NULL;
}

static void rx_mr_release(struct kw_qp *qp)
{
	rx_holder_put(&qp->rx_mr);
}

/* May bytes still be placed? Not once a flush may have completed the WRs
 * (placement and flush are ordered by qp->lock). */
static bool rx_placing(const struct kw_qp *qp)
{
	lockdep_assert_held(&qp->lock);
	return qp->state == KIWARP_QPS_RTS || qp->state == KIWARP_QPS_CLOSING;
}

/* ------------------------------------------------------ parser callbacks */

/*
 * The tagged sink of a Write or Read Response: a reference on the MR goes
 * to *holder (released by the caller), *delta is the view's base within
 * it, and v->cookie = holder for the place callback.
 */
static int rx_lookup(struct kw_qp *qp, u32 stag, u8 opcode,
		     struct kw_mr_view *v, struct kw_mr **holder, u64 *delta)
{
	struct kw_mr *mr;
	struct kw_orq o = { 0 };

	if (opcode == KW_OP_READ_RESP) {
		bool match;

		/* Only the sink of the oldest outstanding Read may be hit. */
		spin_lock_bh(&qp->lock);
		match = qp->orq_head != qp->orq_tail;
		if (match)
			o = qp->orq[qp->orq_head & (KW_MAX_ORD - 1)];
		spin_unlock_bh(&qp->lock);
		if (!match || o.sink_stag != stag)
			return -ENOENT;
	}
	rx_holder_put(holder);
	mr = kw_mr_get(stag);
	if (!mr)
		return -ENOENT;
	*holder = mr;
	*delta = 0;
	kw_mr_view(mr, v);
	v->cookie = holder;	/* the place callback: tagged, offset + delta */
	if (opcode == KW_OP_READ_RESP) {
		/*
		 * The Read Response writes our local sink (local write right
		 * checked at post time) and may only fill the range the Read
		 * asked for: narrow the view the parser checks bounds against.
		 */
		v->access |= KW_ACC_REMOTE_WRITE;
		/* a windowed MR (es.c's receive ring) is never a Read sink */
		if (v->windowed)
			return -ENOENT;
		if (o.sink_to < mr->addr || o.len > mr->len ||
		    o.sink_to - mr->addr > mr->len - o.len)
			return -ENOENT;
		v->base = o.sink_to;
		v->len = o.len;
		*delta = o.sink_to - mr->addr;
	}
	return 0;
}

static int rx_lookup_stag(void *ctx, u32 stag, u8 opcode,
			  struct kw_mr_view *v)
{
	struct kw_qp *qp = ctx;

	return rx_lookup(qp, stag, opcode, v, &qp->rx_mr, &qp->rx_delta);
}

/* The empty buffer that absorbs a zero-length Send used as RTR. */
static const struct kw_rx_buf rtr_buf;

static int rx_get_buf(void *ctx, u32 msn, const struct kw_rx_buf **bufp)
{
	struct kw_qp *qp = ctx;
	struct kw_wr *wr;
	u32 idx;
	int i, n = 0;

	if (qp->rx_buf_valid && qp->rx_buf_msn == msn) {
		*bufp = &qp->rx_buf;
		return 0;
	}
	if (READ_ONCE(qp->rtr_wait) && qp->mpa.rtr == KW_RTR_SEND) {
		*bufp = &rtr_buf;
		return 0;
	}
	/* A flush may have abandoned the previous buffer: its MR
	 * references are ours to drop (only the receive path owns them). */
	rx_buf_release(qp);

	spin_lock_bh(&qp->lock);
	if (!rx_placing(qp))
		goto none;
	if (!kw_qp_rq_pull(qp, &idx))
		goto none;
	wr = &qp->rq_wr[idx & (qp->rq.entries - 1)];
	if (wr->status != KIWARP_WC_SUCCESS) {
		/* A bad receive WR: it completes in error, and the fault is
		 * ours, not the peer's (RDMAP local catastrophic error). */
		kw_qp_rq_complete(qp, idx, wr->status, 0, 0, 0);
		spin_unlock_bh(&qp->lock);
		return -EFAULT;
	}
	memset(&qp->rx_buf, 0, sizeof(qp->rx_buf));
	for (i = 0; i < wr->wqe.num_sge; i++) {
		const struct kiwarp_sge *s = &wr->wqe.sge[i];

		if (!s->length || !wr->mr[i])
			continue;
		kref_get(&wr->mr[i]->ref);
		qp->rx_buf_mr[n] = wr->mr[i];
		kw_mr_view(wr->mr[i], &qp->rx_buf.sge[n].mr);
		qp->rx_buf.sge[n].addr = s->addr;
		qp->rx_buf.sge[n].len = s->length;
		qp->rx_buf.total += s->length;
		n++;
	}
	qp->rx_buf.num_sge = n;
	qp->rx_buf_valid = true;
	qp->rx_rq_idx = idx;
	qp->rx_buf_msn = msn;
	spin_unlock_bh(&qp->lock);
	*bufp = &qp->rx_buf;
	return 0;
none:
	spin_unlock_bh(&qp->lock);
	return -ENOENT;
}

/* ------------------------------------------- out-of-order placement */

/*
 * With the patched kernel's hook (patches/, tcp_set_ofo_hook()), TCP shows
 * us each segment it queues out of order. When the peer's FPDUs carry
 * markers (RFC 5044 section 5), or in aligned mode CRC and the segment
 * starts with an FPDU (section 8), the FPDUs in such a segment are found,
 * and a tagged one (RDMA Write, Read Response) is placed at once, with every
 * check the in-order path makes, by a parser of its own (qp->ooo->rx). A
 * record of it stays until the in-order parser reaches the same FPDU,
 * which then runs all its checks and bookkeeping again but copies nothing
 * (rx_ooo_placed()): each byte is placed once, and completions come in
 * order as before. A record goes when the in-order parser has passed its
 * FPDU, or when it places an earlier message over the same bytes (then
 * the later one is placed again, in order, so that the last writer wins as
 * without the hook). Architecture.md, "Out-of-order placement".
 *
 * Everything here runs under the socket lock (the hook, and the in-order
 * receive path), which serializes it; qp->lock guards the placement
 * against a flush as in rx_place().
 */
#define KW_OOO_RECS		64	/* FPDUs placed ahead, per QP */
#define KW_OOO_MIN_ULPDU	128	/* smaller ones wait for their turn */
#define KW_OOO_PIECES		4	/* physically contiguous pieces of
					 * memory an FPDU placed ahead may
					 * cover and still be recorded */

/* Memory a placement wrote, by physical address: memory mapped twice (at
 * two addresses, or in two MRs) is one memory. */
struct kw_ooo_piece {
	u64 start;
	u32 len;
};

struct kw_ooo_rec {
	u32 pos;		/* stream position of the ULPDU Length field */
	bool reached;		/* the in-order parser found an FPDU there */
	bool stale;		/* overwritten: placed again in order */
	u32 stag;
	u64 to;
	struct kw_ooo_piece pc[KW_OOO_PIECES];	/* what it wrote */
	u8 npc;
	u32 crc;		/* the CRC field, when CRC is on */
	u16 ulpdu_len;
};

struct kw_ooo {
	u32 seq0;		/* TCP sequence number of stream position 0 */
	u32 n;
	struct kw_ooo_rec rec[KW_OOO_RECS];
	/* the FPDU at hand */
	struct kw_rx rx;
	struct kw_mr *mr;	/* its sink, our reference */
	u64 delta;
	struct kw_ooo_piece pc[KW_OOO_PIECES];	/* where it went */
	u8 npc;
	bool wide;		/* more pieces than that: not recorded */
	u32 placed;
	bool ok;		/* a tagged segment completed */
	bool refused;		/* a placement was refused */
	bool bogus;		/* see rx_ooo_prune_to() */
};

/* The position the in-order parser has reached: its open FPDU's. */
static u32 rx_ooo_cur(const struct kw_rx *rx)
{
	return kw_rx_at_fpdu(rx) ? rx->mpos : rx->fpdu_pos;
}

/*
 * Forget the records of FPDUs before stream position end. One the in-order
 * parser never reached stood where no FPDU starts: what was placed for it
 * came from the image of an FPDU inside a payload (aligned mode,
 * rx_ooo_first()), bytes that no message of the stream wrote; o->bogus
 * then fails the QP (rx_segment_done()).
 */
static void rx_ooo_prune_to(struct kw_ooo *o, u32 end)
{
	u32 i = 0;

	while (i < o->n) {
		if ((s32)(o->rec[i].pos - end) < 0) {
			if (!o->rec[i].reached)
				o->bogus = true;
			o->rec[i] = o->rec[--o->n];
		} else {
			i++;
		}
	}
}

/* Forget the records of FPDUs the in-order parser has passed. */
static void rx_ooo_prune(struct kw_qp *qp)
{
	rx_ooo_prune_to(qp->ooo, rx_ooo_cur(&qp->rx));
}

static bool ooo_overlaps(const struct kw_ooo_piece *pc, u8 npc, u64 start,
			 u32 len)
{
	u8 i;

	for (i = 0; i < npc; i++)
		if (start < pc[i].start + pc[i].len &&
		    pc[i].start < start + len)
			return true;
	return false;
}

/* Physical address and length of the piece of [off, off + *len) of mr in
 * one page; *len is cut to it. */
static u64 ooo_phys(struct kw_mr *mr, u64 off, u32 *len)
{
	unsigned int pg_off, avail;
	struct page *pg = kw_mr_page(mr, off, &pg_off, &avail);

	*len = min(*len, avail);
	return ((u64)page_to_pfn(pg) << PAGE_SHIFT) + pg_off;
}

/*
 * The in-order parser writes [off, off + len) of mr itself: an FPDU placed
 * ahead over any of those bytes must be placed again when its turn comes,
 * or the earlier message would have the last word.
 */
static void rx_ooo_overwritten(struct kw_ooo *o, struct kw_mr *mr, u64 off,
			       u32 len)
{
	while (len && o->n) {
		u32 n = len, i;
		u64 ph = ooo_phys(mr, off, &n);

		for (i = 0; i < o->n; i++) {
			struct kw_ooo_rec *r = &o->rec[i];

			if (ooo_overlaps(r->pc, r->npc, ph, n))
				r->stale = true;
		}
		off += n;
		len -= n;
	}
}

/* The same for the FPDU just placed ahead at stream position pos (o->pc),
 * over bytes that a later FPDU placed ahead before it had written. */
static void rx_ooo_overwritten_after(struct kw_ooo *o, u32 pos)
{
	u32 i, j;

	for (i = 0; i < o->n; i++) {
		struct kw_ooo_rec *r = &o->rec[i];
		bool hit = o->wide;

		for (j = 0; !hit && j < o->npc; j++)
			hit = ooo_overlaps(r->pc, r->npc, o->pc[j].start,
					   o->pc[j].len);
		if ((s32)(r->pos - pos) > 0 && hit)
			r->stale = true;
	}
}

static struct kw_ooo_rec *rx_ooo_find(struct kw_ooo *o, u32 pos)
{
	u32 i;

	for (i = 0; i < o->n; i++)
		if (o->rec[i].pos == pos)
			return &o->rec[i];
	return NULL;
}

/*
 * Was the in-order parser's current FPDU placed ahead? Only if the record
 * says the same header (and CRC): TCP delivers the bytes it queued, but a
 * segment it dropped and got again may differ; then it is placed again.
 */
static bool rx_ooo_placed(struct kw_qp *qp)
{
	const struct kw_rx *rx = &qp->rx;
	const struct kw_ooo_rec *r;

	rx_ooo_prune(qp);
	r = rx_ooo_find(qp->ooo, rx->fpdu_pos);
	return r && !r->stale && r->stag == rx->h.stag && r->to == rx->h.to &&
	       r->ulpdu_len == rx->ulpdu_len &&
	       (!rx->crc || r->crc == qp->rx_crc_wire);
}

/*
 * Copy payload into its destination. Placement and flush/revocation are
 * ordered: under qp->lock, nothing is placed once the QP left RTS/CLOSING
 * (a flush completed the WR whose buffer this is, and user space may see
 * it) or once the receive buffer was abandoned; and each copy is an MR
 * access that fails after invalidation or deregistration (mem.c). A
 * refused placement fails the QP at the end of the segment.
 */
static void rx_place(void *ctx, void *cookie, u64 off, const void *src,
		     u32 len)
{
	struct kw_qp *qp = ctx;
	bool tagged = cookie == &qp->rx_mr;
	struct kw_mr *mr = tagged ? qp->rx_mr : cookie;
	u64 moff = tagged ? off + qp->rx_delta : off;
	struct kw_ooo *o = qp->ooo;

	if (unlikely(o && o->n)) {
		/* placed already, out of order (the hook saw it first) */
		if (tagged && rx_ooo_placed(qp)) {
			/* counted, and the STag checked, as a copy would be */
			spin_lock_bh(&qp->lock);
			if (rx_placing(qp)) {
				if (kw_mr_access_begin(mr)) {
					kw_mr_access_end(mr);
					qp->ooo_bytes += len;
				} else {
					qp->rx_revoked = true;
				}
			}
			spin_unlock_bh(&qp->lock);
			return;
		}
		rx_ooo_overwritten(o, mr, moff, len);
	}
	spin_lock_bh(&qp->lock);
	if (!rx_placing(qp) || (!tagged && !qp->rx_buf_valid)) {
		spin_unlock_bh(&qp->lock);
		return;		/* the receive path stops at the next input */
	}
	if (!kw_mr_access_begin(mr)) {
		qp->rx_revoked = true;
		spin_unlock_bh(&qp->lock);
		return;
	}
	/* Tagged placement goes through the narrowed view (see
	 * rx_lookup_stag); untagged SGE views carry the MR itself. */
	if (tagged && !o && kw_rxh_holds(qp, mr))
		kw_rxh_place(qp, moff, src, len);	/* the reader copies */
	else
		kw_mr_copy_to(mr, moff, src, len);
	kw_mr_access_end(mr);
	qp->rx_bytes += len;
	spin_unlock_bh(&qp->lock);
}

static void term(struct kw_term *t, u8 layer, u8 etype, u8 ecode)
{
	memset(t, 0, sizeof(*t));
	t->layer = layer;
	t->etype = etype;
	t->ecode = ecode;
}

/* CQE status for a WR that a received Terminate failed. */
static u8 term_status(const struct kw_term *t)
{
	if (t->layer == KW_TERM_LAYER_RDMAP &&
	    t->etype == KW_TERM_RDMAP_ETYPE_REMOTE_PROT)
		return KIWARP_WC_REM_ACCESS_ERR;
	if (t->layer == KW_TERM_LAYER_DDP &&
	    t->etype == KW_TERM_DDP_ETYPE_TAGGED)
		return KIWARP_WC_REM_ACCESS_ERR;
	if (t->layer == KW_TERM_LAYER_DDP &&
	    t->etype == KW_TERM_DDP_ETYPE_UNTAGGED)
		return KIWARP_WC_REM_INV_REQ_ERR;
	if (t->layer == KW_TERM_LAYER_LLP)
		return KIWARP_WC_FATAL_ERR;
	return KIWARP_WC_REM_OP_ERR;
}

static void rx_terminate(struct kw_qp *qp, const u8 *payload, u32 len)
{
	struct kiwarp_term_info ti;
	struct kw_term t;

	if (kw_term_decode(payload, len, &t))
		term(&t, KW_TERM_LAYER_RDMAP, KW_TERM_RDMAP_ETYPE_REMOTE_OP,
		     KW_TERM_RDMAP_UNSPECIFIED);
	ti = (struct kiwarp_term_info){
		.valid = 1, .layer = t.layer, .etype = t.etype, .ecode = t.ecode,
	};
	kw_qp_term_received(qp, &ti, term_status(&t));
}

/*
 * RFC 5040 section 7.2: the Data Source validates the source STag, bounds
 * and Remote Read right. False with the remote protection error's code.
 */
static bool read_src_ok(const struct kw_qp *qp, const struct kw_read_req *r,
			const struct kw_mr *mr, u8 *code)
{
	if (!mr || !READ_ONCE(mr->valid))
		*code = KW_TERM_RDMAP_INV_STAG;
	else if (mr->pd_id != qp->pd_id)
		*code = KW_TERM_RDMAP_STAG_NOT_ASSOC;
	else if (!(mr->access & KIWARP_ACCESS_REMOTE_READ))
		*code = KW_TERM_RDMAP_ACCESS;
	/*
	 * Our Read Response segments carry sink TOs: a sink range that
	 * wraps could only produce segments the peer must refuse, so refuse
	 * the request (the sink is otherwise the requester's to check, RFC
	 * 5041 section 7).
	 */
	else if (r->src_to + r->size < r->src_to ||
		 r->sink_to + r->size < r->sink_to)
		*code = KW_TERM_RDMAP_TO_WRAP;
	else if (r->src_to < mr->addr ||
		 r->src_to + r->size > mr->addr + mr->len)
		*code = KW_TERM_RDMAP_BASE_BOUNDS;
	else
		return true;
	return false;
}

static int rx_read_req(struct kw_qp *qp, const u8 *payload, struct kw_term *t)
{
	struct kw_read_req r;
	struct kw_mr *mr = NULL;
	struct kw_irq *e;
	u8 code;

	kw_read_req_decode(payload, &r);
	if (r.size) {
		mr = kw_mr_get(r.src_stag);
		if (!read_src_ok(qp, &r, mr, &code)) {
			term(t, KW_TERM_LAYER_RDMAP,
			     KW_TERM_RDMAP_ETYPE_REMOTE_PROT, code);
			goto bad;
		}
	}

	spin_lock_bh(&qp->lock);
	if (qp->irq_tail - qp->irq_head >= qp->irq_size) {
		spin_unlock_bh(&qp->lock);
		/* More Reads outstanding than the IRD we granted. */
		term(t, KW_TERM_LAYER_RDMAP, KW_TERM_RDMAP_ETYPE_REMOTE_OP,
		     KW_TERM_RDMAP_CATASTROPHIC_STREAM);
		goto bad;
	}
	e = &qp->irq[qp->irq_tail++ & (KW_MAX_IRD - 1)];
	e->req = r;
	e->src = mr;
	if (qp->rtr_wait && qp->mpa.rtr == KW_RTR_READ && !r.size)
		WRITE_ONCE(qp->rtr_wait, false);
	spin_unlock_bh(&qp->lock);
	kw_qp_kick_tx_peer(qp);
	return 0;
bad:
	if (mr)
		kw_mr_put(mr);
	return -EPROTO;
}

/*
 * A segment of the Read Response to the oldest outstanding Read has been
 * placed (rx_lookup_stag() kept it inside the Read's sink). RFC 5040
 * section 5.2.2: the Data Sink "MAY validate that the STag, Tagged
 * Offset, and length of the RDMA Read Response Message are the same as"
 * the Request's. kiwarp does: each segment must continue where the last
 * one ended, and the whole Response must be exactly as long as the Read,
 * or the Read would complete with bytes of its sink never written (DDP
 * tagged base/bounds, 1/1/1, as siw answers).
 */
static int rx_read_resp_seg(struct kw_qp *qp, const struct kw_ddp_hdr *h,
			    u32 placed, struct kw_term *t)
{
	struct kw_orq *o;
	bool ok, kick;

	spin_lock_bh(&qp->lock);
	if (qp->orq_head == qp->orq_tail) {
		spin_unlock_bh(&qp->lock);
		/* A Read Response nobody asked for. */
		term(t, KW_TERM_LAYER_RDMAP, KW_TERM_RDMAP_ETYPE_REMOTE_OP,
		     KW_TERM_RDMAP_UNEXP_OPCODE);
		return -EPROTO;
	}
	o = &qp->orq[qp->orq_head & (KW_MAX_ORD - 1)];
	ok = (!placed || h->to == o->sink_to + qp->rx_rresp) &&
	     o->len - qp->rx_rresp >= placed;
	qp->rx_rresp += placed;
	if (ok && h->last)
		ok = qp->rx_rresp == o->len;
	if (!ok || !h->last) {
		spin_unlock_bh(&qp->lock);
		if (ok)
			return 0;
		/* the tagged buffer's bounds, as siw reports it */
		term(t, KW_TERM_LAYER_DDP, KW_TERM_DDP_ETYPE_TAGGED,
		     KW_TERM_DDP_T_BASE_BOUNDS);
		return -EPROTO;
	}
	/* RFC 5040 section 5.5 rule 19: the Read completes on delivery */
	qp->rx_rresp = 0;
	qp->orq_head++;
	if (o->sq_idx != ~0U) {
		struct kw_wr *wr = &qp->sq_wr[o->sq_idx & (qp->sq.entries - 1)];

		if (!wr->done) {
			wr->done = true;
			wr->byte_len = o->len;
		}
	}
	/*
	 * A pulled WR that tx_pick_sq() left waiting (ORD reached, a fence)
	 * may go now, and an orderly close may be waiting for the ORQ to
	 * drain. Otherwise there is nothing for tx_work to do: a worker per
	 * Response cost the requester's CPU a context switch each way (the
	 * CQE is posted below, here).
	 */
	kick = qp->sq_tx != qp->sq_pulled || qp->state == KIWARP_QPS_CLOSING;
	spin_unlock_bh(&qp->lock);
	/* a Write sent by reference after the Read may be the oldest now */
	kw_qp_wait_acks(qp);
	if (kick)
		kw_qp_kick_tx(qp);
	return 0;
}

static int rx_send_done(struct kw_qp *qp, const struct kw_ddp_hdr *h,
			u32 placed, struct kw_term *t)
{
	u8 flags = 0;
	u32 inv = 0;

	if (READ_ONCE(qp->rtr_wait) && qp->mpa.rtr == KW_RTR_SEND) {
		/* The zero-length Send RTR consumes no receive WR. */
		WRITE_ONCE(qp->rtr_wait, false);
		kw_qp_kick_tx(qp);
		return 0;
	}
	if (!h->last)
		return 0;
	if (h->opcode == KW_OP_SEND_INV || h->opcode == KW_OP_SEND_SE_INV) {
		/* RFC 5040 section 5.3: invalidate before completion. */
		if (kw_mr_invalidate(h->inv_stag, qp->pd_id)) {
			term(t, KW_TERM_LAYER_RDMAP,
			     KW_TERM_RDMAP_ETYPE_REMOTE_PROT,
			     KW_TERM_RDMAP_STAG_CANT_INV);
			return -EPROTO;
		}
		flags |= KIWARP_WC_WITH_INV;
		inv = h->inv_stag;
	}
	if (h->opcode == KW_OP_SEND_SE || h->opcode == KW_OP_SEND_SE_INV)
		flags |= KIWARP_WC_SOLICITED;

	spin_lock_bh(&qp->lock);
	if (qp->rx_buf_valid && qp->rx_rq_idx == qp->rq_compl)
		kw_qp_rq_complete(qp, qp->rx_rq_idx, KIWARP_WC_SUCCESS,
				  h->mo + placed, flags, inv);
	spin_unlock_bh(&qp->lock);
	rx_buf_release(qp);
	return 0;
}

static int rx_segment_op(struct kw_qp *qp, const struct kw_ddp_hdr *h,
			 const u8 *payload, u32 placed, struct kw_term *t)
{

	if (qp->rx_revoked) {
		/* The buffer was invalidated or deregistered under us. */
		rx_mr_release(qp);
		if (h->tagged)
			term(t, KW_TERM_LAYER_DDP, KW_TERM_DDP_ETYPE_TAGGED,
			     KW_TERM_DDP_T_INV_STAG);
		else
			term(t, KW_TERM_LAYER_RDMAP,
			     KW_TERM_RDMAP_ETYPE_CATASTROPHIC,
			     KW_TERM_RDMAP_UNSPECIFIED);
		return -EPROTO;
	}
	switch (h->opcode) {
	case KW_OP_WRITE:
		rx_mr_release(qp);
		if (READ_ONCE(qp->rtr_wait) && qp->mpa.rtr == KW_RTR_WRITE &&
		    !placed) {
			WRITE_ONCE(qp->rtr_wait, false);
			kw_qp_kick_tx(qp);
		}
		return 0;
	case KW_OP_READ_RESP:
		rx_mr_release(qp);
		return rx_read_resp_seg(qp, h, placed, t);
	case KW_OP_SEND:
	case KW_OP_SEND_SE:
	case KW_OP_SEND_INV:
	case KW_OP_SEND_SE_INV:
		return rx_send_done(qp, h, placed, t);
	case KW_OP_READ_REQ:
		return rx_read_req(qp, payload, t);
	case KW_OP_TERMINATE:
		rx_terminate(qp, payload, placed);
		return 0;
	}
	term(t, KW_TERM_LAYER_RDMAP, KW_TERM_RDMAP_ETYPE_REMOTE_OP,
	     KW_TERM_RDMAP_UNEXP_OPCODE);
	return -EPROTO;
}

static int rx_segment_done(void *ctx, const struct kw_ddp_hdr *h,
			   const u8 *payload, u32 placed, struct kw_term *t)
{
	struct kw_qp *qp = ctx;
	struct kw_ooo *o = qp->ooo;
	int ret;

	/*
	 * This FPDU's record (if any) has served, and one inside the FPDU
	 * (the next FPDU starts at least its length on, markers aside)
	 * was the image of an FPDU in a payload: fail before the message
	 * takes effect, whose bytes are placed (rx_ooo_prune_to()).
	 */
	if (unlikely(o && o->n)) {
		struct kw_ooo_rec *r = rx_ooo_find(o, qp->rx.fpdu_pos);

		if (r)
			r->reached = true;
		rx_ooo_prune_to(o, qp->rx.fpdu_pos +
				   kw_mpa_fpdu_len(qp->rx.ulpdu_len));
	}
	if (unlikely(o && o->bogus)) {
		term(t, KW_TERM_LAYER_RDMAP, KW_TERM_RDMAP_ETYPE_CATASTROPHIC,
		     0);
		return -EPROTO;
	}
	ret = rx_segment_op(qp, h, payload, placed, t);

	/* A responder's first valid FPDU lifts its fence (go_rts()). */
	if (!ret && READ_ONCE(qp->fenced)) {
		/*
		 * In P2P mode it must be the negotiated RTR (RFC 6581
		 * section 9.2), which the handlers above took; anything else
		 * would leave the responder waiting for an RTR that never
		 * comes.
		 */
		if (READ_ONCE(qp->rtr_wait)) {
			term(t, KW_TERM_LAYER_LLP, KW_TERM_LLP_ETYPE_MPA,
			     KW_TERM_LLP_NO_MATCHING_RTR);
			return -EPROTO;
		}
		WRITE_ONCE(qp->fenced, false);
		kw_qp_kick_tx(qp);
	}
	return ret;
}

static const struct kw_rx_ops kw_rx_ops = {
	.lookup_stag = rx_lookup_stag,
	.get_rx_buf = rx_get_buf,
	.place = rx_place,
	.segment_done = rx_segment_done,
};

/* ------------------------------------------------------------ TCP glue */

/* Hand parser rx the bytes [offset, offset + len) of skb; src (if any)
 * says which bytes the parser has (rxhold.c places from them). */
static u32 rx_feed(struct kw_rx *rx, struct sk_buff *skb, u32 offset,
		   u32 len, struct kw_rx_src *src)
{
	struct skb_seq_state st __uninitialized;	/* set up in full below */
	u32 consumed = 0, n;
	const u8 *data;

	skb_prepare_seq_read(skb, offset, offset + len, &st);
	while (consumed < len &&
	       (n = skb_seq_read(consumed, &data, &st)) != 0) {
		/* a chunk may run past offset + len */
		n = min(n, len - consumed);
		if (src)
			*src = (struct kw_rx_src){ .skb = skb, .data = data,
						   .off = offset + consumed,
						   .len = n };
		n = kw_rx_input(rx, data, n) == n ? n : 0;
		if (!n || kw_rx_failed(rx))
			break;
		consumed += n;
	}
	skb_abort_seq_read(&st);
	if (src)
		src->skb = NULL;
	return consumed;
}

struct rx_crc {
	u32 pos, crc_len, crc;
	u8 wire[4];
	bool no_crc;	/* markers only */
	/* markers: the FPDU's first byte's stream position, a marker's
	 * bytes as they come, and whether one was wrong */
	bool markers, mk_bad;
	u32 start;
	u8 mk[KW_MPA_MARKER_LEN];
};

/*
 * The markers among the FPDU bytes [c->pos, c->pos + n) at p: every
 * 512-aligned stream position before the CRC field is one, and its
 * FPDUPTR is its distance from the ULPDU Length field (RFC 5044 section
 * 5; 0 for a marker that leads the FPDU; the low two bits do not count).
 * Checked here, before the parser places a byte of the FPDU; the parser
 * checks them again as it goes.
 */
static void rx_crc_markers(struct rx_crc *c, const u8 *p, u32 n)
{
	u32 o = c->pos, end = min(c->pos + n, c->crc_len);
	/* the length field's offset: after a leading marker */
	u32 hdr = (c->start & (KW_MPA_MARKER_SPACING - 1)) ? 0 : KW_MPA_MARKER_LEN;

	while (o < end) {
		u32 r = (c->start + o) & (KW_MPA_MARKER_SPACING - 1);

		if (r >= KW_MPA_MARKER_LEN) {
			o += KW_MPA_MARKER_SPACING - r;
			continue;
		}
		c->mk[r] = p[o - c->pos];
		if (r == KW_MPA_MARKER_LEN - 1 &&
		    (get_unaligned_be16(c->mk + 2) & ~3U) !=
		    (o - r ? o - r - hdr : 0))
			c->mk_bad = true;
		o++;
	}
}

static void rx_crc_chunk(struct rx_crc *c, const u8 *p, u32 n)
{
	u32 k = c->pos < c->crc_len ? min(n, c->crc_len - c->pos) : 0;

	if (c->markers)
		rx_crc_markers(c, p, n);
	if (!c->no_crc)
		c->crc = kw_mpa_crc_update(c->crc, p, k);
	if (k < n)
		memcpy(c->wire + c->pos + k - c->crc_len, p + k, n - k);
	c->pos += n;
}

/* Run [off, off + len) of skb through c; false if it cannot be read. */
static bool rx_skb_crc(struct sk_buff *skb, u32 off, u32 len,
		       struct rx_crc *c)
{
	struct skb_seq_state st;
	const u8 *data;
	u32 got = 0, n;

	skb_prepare_seq_read(skb, off, off + len, &st);
	while (got < len && (n = skb_seq_read(got, &data, &st))) {
		n = min(n, len - got);
		rx_crc_chunk(c, data, n);
		got += n;
	}
	skb_abort_seq_read(&st);
	return got == len;
}

/*
 * Run the len queued bytes from sequence number seq (in skb) through c.
 * Returns 1, 0 if fewer are queued (the FIN came first), or -EIO if an skb
 * cannot be read. The receive queue may hold overlapping skbs (a
 * retransmission cut differently): each one is entered at seq, as
 * tcp_recv_skb() does. Caller holds the socket, so the queue cannot
 * change.
 */
static int rx_walk(struct sock *sk, struct sk_buff *skb, u32 seq, u32 len,
		   struct rx_crc *c)
{
	for (;;) {
		u32 off = seq - TCP_SKB_CB(skb)->seq, take;

		if (off < skb->len) {
			take = min(skb->len - off, len);
			if (!rx_skb_crc(skb, off, take, c))
				return -EIO;
			len -= take;
			seq += take;
			if (!len)
				return 1;
		}
		if (skb_queue_is_last(&sk->sk_receive_queue, skb))
			return 0;
		skb = skb_queue_next(&sk->sk_receive_queue, skb);
		if (after(TCP_SKB_CB(skb)->seq, seq))
			return -EIO;	/* a hole: cannot be in this queue */
	}
}

/*
 * RFC 5044 section 6: with CRC, an FPDU is verified before DDP acts on it,
 * so that a header corrupted in flight cannot place a byte anywhere. The
 * FPDU starting at offset in skb stays in the socket's receive queue
 * until all of it is there; its CRC is computed over the skbs in place.
 * Returns the FPDU's length once verified, 0 while it is incomplete,
 * -EBADMSG (bad CRC, or bytes that cannot be read) or -EPROTO (a marker
 * whose FPDUPTR is wrong). kw_rx_reserve() sized
 * the receive buffer so that the largest FPDU fits.
 */
static int rx_verify(struct kw_qp *qp, struct sock *sk, struct sk_buff *skb,
		     u32 offset)
{
	u32 seq = TCP_SKB_CB(skb)->seq + offset;
	u32 queued = tcp_sk(sk)->rcv_nxt - seq;
	struct rx_crc c = { 0 };	/* first: the length field, into wire */
	u32 total, lead = 0;
	int ret;

	/*
	 * With markers (RFC 5044 section 5) a marker due where the FPDU
	 * starts leads it, the length field follows (FPDUs are 4-aligned,
	 * so no marker splits it), and the FPDU takes its markers' bytes
	 * too; the CRC covers them all.
	 */
	if (qp->rx.markers && !kw_mpa_marker_gap(qp->rx.mpos))
		lead = KW_MPA_MARKER_LEN;
	/* rcv_nxt counts a FIN too: rx_walk() has the last word */
	if (queued < lead + 2)
		return 0;
	ret = rx_walk(sk, skb, seq + lead, 2, &c);
	if (ret <= 0)
		return ret ? -EBADMSG : 0;
	total = kw_mpa_fpdu_len(get_unaligned_be16(c.wire));
	if (qp->rx.markers)
		total = kw_mpa_wire_len(qp->rx.mpos, total);
	if (queued < total)
		return 0;
	c = (struct rx_crc){ .crc_len = total - 4,
			     .crc = kw_mpa_crc_init(),
			     .markers = qp->rx.markers, .start = qp->rx.mpos };
	ret = rx_walk(sk, skb, seq, total, &c);
	if (ret <= 0)
		return ret ? -EBADMSG : 0;
	if (!kw_mpa_crc_check(c.crc, c.wire))
		return -EBADMSG;
	qp->rx_crc_wire = get_unaligned_be32(c.wire);
	return c.mk_bad ? -EPROTO : total;
}

/* -------------------------------------- out-of-order placement: parse */

/* Only Writes and the oldest Read's Response, checked as in order. */
static int ooo_lookup_stag(void *ctx, u32 stag, u8 opcode,
			   struct kw_mr_view *v)
{
	struct kw_qp *qp = ctx;
	bool shared = false;
	u32 i;
	int ret;

	if (opcode != KW_OP_WRITE && opcode != KW_OP_READ_RESP)
		return -ENOENT;
	if (opcode == KW_OP_READ_RESP) {
		/* a later Read into the same sink could be what this is: only
		 * the oldest Read's own sink STag is placed ahead */
		spin_lock_bh(&qp->lock);
		for (i = qp->orq_head; i != qp->orq_tail; i++)
			if (i != qp->orq_head &&
			    qp->orq[i & (KW_MAX_ORD - 1)].sink_stag == stag)
				shared = true;
		spin_unlock_bh(&qp->lock);
		if (shared)
			return -ENOENT;
	}
	ret = rx_lookup(qp, stag, opcode, v, &qp->ooo->mr, &qp->ooo->delta);
	/*
	 * Not into a remote-write window (an extended socket's receive
	 * buffer, es.c): the window closes over bytes as the in-order
	 * stream announces them, which a Write placed ahead would overtake.
	 */
	if (!ret && v->windowed) {
		rx_holder_put(&qp->ooo->mr);
		ret = -ENOENT;
	}
	return ret;
}

/* Untagged messages are never placed out of order (RFC 5041 section 5:
 * their buffers are consumed in order). */
static int ooo_get_rx_buf(void *ctx, u32 msn, const struct kw_rx_buf **bufp)
{
	return -ENOENT;
}

static void ooo_place(void *ctx, void *cookie, u64 off, const void *src,
		      u32 len)
{
	struct kw_qp *qp = ctx;
	struct kw_ooo *o = qp->ooo;

	spin_lock_bh(&qp->lock);
	if (!rx_placing(qp) || !kw_mr_access_begin(o->mr)) {
		o->refused = true;
		spin_unlock_bh(&qp->lock);
		return;
	}
	kw_mr_copy_to(o->mr, off + o->delta, src, len);
	kw_mr_access_end(o->mr);
	o->placed += len;
	/* where it went, in physically contiguous pieces */
	for (off += o->delta; len && !o->wide;) {
		u32 n = len;
		u64 ph = ooo_phys(o->mr, off, &n);
		struct kw_ooo_piece *last = o->npc ? &o->pc[o->npc - 1] : NULL;

		if (last && last->start + last->len == ph)
			last->len += n;
		else if (o->npc == KW_OOO_PIECES)
			o->wide = true;
		else
			o->pc[o->npc++] = (struct kw_ooo_piece){ ph, n };
		off += n;
		len -= n;
	}
	spin_unlock_bh(&qp->lock);
}

static int ooo_segment_done(void *ctx, const struct kw_ddp_hdr *h,
			    const u8 *payload, u32 placed, struct kw_term *t)
{
	struct kw_qp *qp = ctx;

	if (!h->tagged || (h->opcode != KW_OP_WRITE &&
			   h->opcode != KW_OP_READ_RESP)) {
		/* the in-order parser will have its own verdict on it */
		term(t, KW_TERM_LAYER_RDMAP, KW_TERM_RDMAP_ETYPE_REMOTE_OP,
		     KW_TERM_RDMAP_UNEXP_OPCODE);
		return -EPROTO;
	}
	qp->ooo->ok = true;
	return 0;
}

static const struct kw_rx_ops kw_ooo_ops = {
	.lookup_stag = ooo_lookup_stag,
	.get_rx_buf = ooo_get_rx_buf,
	.place = ooo_place,
	.segment_done = ooo_segment_done,
};

/*
 * The whole FPDU at [off, off + wl) of skb starts at stream position s.
 * Validate it completely before a byte is written: its markers (and CRC),
 * then the header by the parser, which checks the STag, PD, access and
 * bounds before it places anything. Returns false if it was not placed
 * (the in-order parser will judge it), true if it was or needs not be.
 */
static bool rx_ooo_fpdu(struct kw_qp *qp, struct sk_buff *skb, u32 off,
			u32 s, u32 wl, u32 lpos, u16 ulen, const u8 ctrl[2])
{
	struct kw_ooo *o = qp->ooo;
	struct rx_crc c = { .crc_len = wl - 4, .crc = kw_mpa_crc_init(),
			    .no_crc = !qp->rx.crc,
			    .markers = qp->mpa.markers_rx, .start = s };
	u8 op = ctrl[1] & KW_RDMAP_OPCODE_MASK;
	/* tagged Writes and Read Responses of some size only (the parser
	 * checks the header completely), and not a copy of a segment that
	 * came in before */
	bool take = ulen >= KW_OOO_MIN_ULPDU &&
		    (ctrl[0] & KW_DDP_FLAG_TAGGED) &&
		    (op == KW_OP_WRITE || op == KW_OP_READ_RESP) &&
		    !rx_ooo_find(o, lpos);
	bool ok;

	/* without markers the next FPDU is found by this one's length: the
	 * CRC says whether it is one, placed or not */
	if (!take && qp->mpa.markers_rx)
		return true;
	if (!rx_skb_crc(skb, off, wl, &c) || c.mk_bad ||
	    (qp->rx.crc && !kw_mpa_crc_check(c.crc, c.wire)))
		return false;
	if (!take)
		return true;

	kw_rx_init(&o->rx, &kw_ooo_ops, qp, qp->rx.crc, qp->pd_id);
	if (qp->mpa.markers_rx)
		kw_rx_set_markers(&o->rx);
	o->rx.mpos = s;
	kw_rx_verified(&o->rx);		/* CRC (if on) checked above */
	o->placed = 0;
	o->npc = 0;
	o->wide = false;
	o->ok = o->refused = false;
	ok = rx_feed(&o->rx, skb, off, wl, NULL) == wl && !kw_rx_failed(&o->rx) &&
	     o->rx.fpdus == 1 && o->ok && !o->refused &&
	     o->rx.fpdu_pos == lpos;
	rx_holder_put(&o->mr);
	if (!o->placed)
		return ok;
	rx_ooo_overwritten_after(o, lpos);
	/*
	 * A record of what was placed, also when it is to be placed again
	 * in order (stale): an FPDU placed in part, or over more pieces than
	 * a record keeps. Either way the in-order parser must find an FPDU
	 * at its position (rx_ooo_prune_to()).
	 */
	o->rec[o->n] = (struct kw_ooo_rec){
		.pos = lpos, .stale = !ok || o->wide,
		.stag = o->rx.h.stag, .to = o->rx.h.to,
		.npc = o->wide ? 0 : o->npc,
		.crc = get_unaligned_be32(c.wire), .ulpdu_len = ulen,
	};
	memcpy(o->rec[o->n++].pc, o->pc, sizeof(o->pc));
	return ok;
}

/*
 * Where the first FPDU in a segment TCP queued out of order starts, as a
 * stream position; false if none does. With markers, the first marker in
 * the segment tells (its FPDUPTR points at the ULPDU Length field, 0 if
 * the marker leads the FPDU). Without (aligned mode, ooo_aligned), the
 * segment's first byte is taken for an FPDU's, as a sender that aligns
 * FPDUs with segments (RFC 5044 section 8) puts it, and each FPDU's CRC
 * (rx_ooo_fpdu()) tells whether the guess and the lengths followed from it
 * were right - unless a payload carries a crafted image (ooo_aligned).
 */
static bool rx_ooo_first(struct kw_qp *qp, struct sk_buff *skb, u32 pos,
			 u32 *s)
{
	u32 m = ALIGN(pos, KW_MPA_MARKER_SPACING), len = skb->len, off;
	u8 b[KW_MPA_MARKER_LEN];

	if (!qp->mpa.markers_rx) {
		*s = pos;
		return qp->rx.crc;
	}
	for (;; m += KW_MPA_MARKER_SPACING) {
		u32 ptr;

		off = m - pos;
		if (off > len || len - off < KW_MPA_MARKER_LEN ||
		    skb_copy_bits(skb, off, b, KW_MPA_MARKER_LEN))
			return false;
		ptr = get_unaligned_be16(b + 2) & ~3U;
		*s = m - ptr;
		/* a marker just in front of the length field leads it */
		if (ptr && !kw_mpa_marker_gap(*s - KW_MPA_MARKER_LEN))
			*s -= KW_MPA_MARKER_LEN;
		if (*s - pos < len)
			return true;	/* this FPDU starts in the segment */
	}
}

/*
 * A segment TCP queued out of order: take the FPDUs from its first one on,
 * one by one, while they lie wholly in the segment.
 */
static void rx_ooo_skb(struct kw_qp *qp, struct sk_buff *skb)
{
	struct kw_ooo *o = qp->ooo;
	u32 pos = TCP_SKB_CB(skb)->seq - o->seq0, len = skb->len, s, off;
	bool markers = qp->mpa.markers_rx;
	u8 b[4];

	rx_ooo_prune(qp);
	if (o->n == KW_OOO_RECS || o->bogus || !rx_ooo_first(qp, skb, pos, &s))
		return;
	while (o->n < KW_OOO_RECS) {
		u32 lpos = s + (!markers || kw_mpa_marker_gap(s) ?
				0 : KW_MPA_MARKER_LEN);
		u32 wl;
		u16 ulen;

		/* the length field and the DDP and RDMAP control bytes: no
		 * marker between them (FPDUs start 4-aligned) */
		off = lpos - pos;
		if (off > len || len - off < 4 || skb_copy_bits(skb, off, b, 4))
			return;
		ulen = get_unaligned_be16(b);
		wl = kw_mpa_fpdu_len(ulen);
		if (markers)
			wl = kw_mpa_wire_len(s, wl);
		off = s - pos;
		if (wl > len - off ||
		    !rx_ooo_fpdu(qp, skb, off, s, wl, lpos, ulen, b + 2))
			return;
		s += wl;
	}
}

/* tcp_sock::ofo_queued: TCP holds the socket lock (patches/0001). */
static void kw_rx_ofo_queued(struct sock *sk, struct sk_buff *skb)
{
	struct kw_qp *qp;

	read_lock_bh(&sk->sk_callback_lock);
	qp = kw_sk_qp(sk);
	/*
	 * Not before the in-order parser has taken the first FPDU of a
	 * responder (and the RTR of a P2P one), and not once urgent data
	 * moved copied_seq under the parser (kw_rx_drain() fails the QP).
	 */
	if (qp && qp->ooo && !kw_rx_failed(&qp->rx) &&
	    READ_ONCE(qp->state) == KIWARP_QPS_RTS &&
	    !READ_ONCE(qp->fenced) && !READ_ONCE(qp->rtr_wait) &&
	    !READ_ONCE(tcp_sk(sk)->urg_data))
		rx_ooo_skb(qp, skb);
	read_unlock_bh(&sk->sk_callback_lock);
}

static void rx_fail(struct kw_qp *qp)
{
	rx_mr_release(qp);
	kw_qp_fail(qp, &qp->rx.term, qp->rx.bad, qp->rx.bad_len);
}

struct rx_desc {
	struct kw_qp *qp;
	struct sock *sk;
};

static int rx_actor_feed(read_descriptor_t *desc, struct sk_buff *skb,
			 unsigned int offset, size_t len)
{
	const struct rx_desc *d = desc->arg.data;
	struct kw_qp *qp = d->qp;
	u32 done = 0, n;
	int total;

	/* After a protocol error everything that follows is discarded. */
	if (kw_rx_failed(&qp->rx) || READ_ONCE(qp->state) >= KIWARP_QPS_TERMINATE)
		return len;

	while (done < len) {
		n = len - done;
		if (qp->rx.crc) {
			if (!qp->rx_verified) {
				/*
				 * rx_verified ends where the parser's FPDU
				 * does (an FPDU too short for its header
				 * fails the parser there); if not, what
				 * the parser would take was never checked.
				 */
				if (!kw_rx_at_fpdu(&qp->rx)) {
					kw_rx_crc_failed(&qp->rx);
					rx_fail(qp);
					return len;
				}
				total = rx_verify(qp, d->sk, skb, offset + done);
				if (!total)
					return done;	/* the rest later */
				if (total < 0) {
					if (total == -EPROTO)
						kw_rx_marker_failed(&qp->rx);
					else
						kw_rx_crc_failed(&qp->rx);
					rx_fail(qp);
					return len;
				}
				qp->rx_verified = total;
				kw_rx_verified(&qp->rx);
			}
			n = min(n, qp->rx_verified);
		}
		if (rx_feed(&qp->rx, skb, offset + done, n, &qp->rx_src) < n ||
		    kw_rx_failed(&qp->rx)) {
			rx_fail(qp);
			return len;
		}
		if (qp->rx.crc)
			qp->rx_verified -= n;
		done += n;
	}
	return len;
}

static int rx_actor(read_descriptor_t *desc, struct sk_buff *skb,
		    unsigned int offset, size_t len)
{
	const struct rx_desc *d = desc->arg.data;
	int ret = rx_actor_feed(desc, skb, offset, len);

	kw_rxh_skb_done(d->qp);		/* before TCP frees the skb */
	return ret;
}

/*
 * Run everything TCP has queued through the parser. Caller holds the
 * socket (softirq callback, or lock_sock) and sk_callback_lock for reading.
 */
void kw_rx_drain(struct kw_qp *qp, struct sock *sk)
{
	struct rx_desc d = { .qp = qp, .sk = sk };
	read_descriptor_t rd = { .count = 1, .arg.data = &d };

	lockdep_assert(lockdep_sock_is_held(sk));
	tcp_read_sock(sk, &rd, rx_actor);
	/*
	 * tcp_read_sock() stops in front of urgent data and never passes it.
	 * MPA does not use TCP's urgent pointer: a peer that sets it would
	 * stall the stream for good, so the connection ends instead.
	 */
	if (unlikely(READ_ONCE(tcp_sk(sk)->urg_data)) &&
	    tcp_sk(sk)->urg_seq == tcp_sk(sk)->copied_seq)
		kw_qp_set_error(qp);
}

/* sk_data_ready: runs in softirq, or in process context under lock_sock. */
void kw_rx_data_ready(struct sock *sk)
{
	struct kw_qp *qp;

	read_lock_bh(&sk->sk_callback_lock);
	qp = kw_sk_qp(sk);
	if (qp)
		kw_rx_drain(qp, sk);
	read_unlock_bh(&sk->sk_callback_lock);
}

/*
 * With CRC an FPDU is placed only once all of it is queued (rx_verify()),
 * so the receive buffer and window must be able to hold the largest FPDU
 * with room to spare: otherwise a peer whose FPDU does not fit waits for
 * a window that never opens. Raised, never lowered (autotuning still
 * grows it); a socket the application handed in is the QP's now.
 */
#define KW_RX_CRC_RCVBUF	(8 * KW_MPA_FPDU_MAX)
#define KW_RX_CRC_WINDOW	(2 * KW_MPA_FPDU_MAX)

void kw_rx_reserve(struct sock *sk)
{
	int clamp = KW_RX_CRC_WINDOW;

	lock_sock(sk);
	if (READ_ONCE(sk->sk_rcvbuf) < KW_RX_CRC_RCVBUF)
		WRITE_ONCE(sk->sk_rcvbuf, KW_RX_CRC_RCVBUF);
	release_sock(sk);
	if (READ_ONCE(tcp_sk(sk)->window_clamp) < clamp)
		sk->sk_prot->setsockopt(sk, SOL_TCP, TCP_WINDOW_CLAMP,
					KERNEL_SOCKPTR(&clamp), sizeof(clamp));
}

void kw_rx_setup(struct kw_qp *qp)
{
	kw_rx_init(&qp->rx, &kw_rx_ops, qp, qp->mpa.crc, qp->pd_id);
	/* the stream's position 0 is the first byte after the peer's
	 * Request or Reply: the parser's first */
	if (qp->mpa.markers_rx)
		kw_rx_set_markers(&qp->rx);
}

/* Drop the receive path's references; callbacks and hook are gone. */
void kw_rx_release(struct kw_qp *qp)
{
	kw_rxh_free(qp);
	rx_mr_release(qp);
	rx_buf_release(qp);
	kfree(qp->ooo);
	WRITE_ONCE(qp->ooo, NULL);
}

/* ---------------------------------------------- the patched kernel's hook */

typedef int (*kw_set_ofo_hook_t)(struct sock *sk,
				 void (*hook)(struct sock *sk,
					      struct sk_buff *skb));
static kw_set_ofo_hook_t kw_set_ofo_hook;

static int tcp_hooks = 1;
module_param(tcp_hooks, int, 0444);
MODULE_PARM_DESC(tcp_hooks,
		 "Use the patched kernel's TCP hook if it has one (1, the default) or not (0); reads back whether it is used");

/*
 * Aligned mode (rx_ooo_first()): without markers, but with CRC, take a
 * segment's first bytes for an FPDU. Off by default: the CRC tells a
 * segment that starts inside a payload from one that starts an FPDU only
 * for payloads nobody crafted; a peer that relays data it does not
 * control (a file, a capture, another protocol's frames) may carry the
 * image of an FPDU, CRC and all, and a segment that starts at it would be
 * placed. That is detected once the in-order stream passes it (the QP
 * fails: rx_ooo_prune_to()), but the bytes were written.
 */
static bool ooo_aligned;
module_param(ooo_aligned, bool, 0644);
MODULE_PARM_DESC(ooo_aligned,
		 "With tcp_hooks: also place out of order without markers, taking a segment's first bytes for an FPDU that its CRC confirms (N, the default: markers only; read as each QP starts; see Documentation/architecture.md)");

/*
 * A kernel built with patches/ exports tcp_set_ofo_hook() (GPL): looked up
 * by name, so that one kiwarp.ko loads on stock kernels too.
 */
void kw_tcp_hooks_init(void)
{
	if (tcp_hooks)
		kw_set_ofo_hook = __symbol_get("tcp_set_ofo_hook");
	tcp_hooks = !!kw_set_ofo_hook;
	if (tcp_hooks)
		pr_info("TCP hooks: out-of-order placement (tcp_set_ofo_hook)\n");
}

void kw_tcp_hooks_exit(void)
{
	if (kw_set_ofo_hook)
		__symbol_put("tcp_set_ofo_hook");
	kw_set_ofo_hook = NULL;
}

bool kw_tcp_hooks(void)
{
	return kw_set_ofo_hook;
}

/*
 * At RTS, with markers on the peer's FPDUs (which make an FPDU locatable
 * in any segment) or, in aligned mode, CRC (rx_ooo_first()), and before
 * the first FPDU is parsed or right after:
 * the parser's position and copied_seq move together under the socket
 * lock, so their difference is the sequence number of position 0.
 */
void kw_rx_ooo_attach(struct kw_qp *qp, struct sock *sk)
{
	struct kw_ooo *o;

	sock_owned_by_me(sk);
	if (!kw_set_ofo_hook || qp->ooo ||
	    !(qp->mpa.markers_rx || (READ_ONCE(ooo_aligned) && qp->rx.crc)))
		return;
	o = kzalloc(sizeof(*o), GFP_KERNEL_ACCOUNT);
	if (!o)
		return;		/* in order only, as on a stock kernel */
	o->seq0 = tcp_sk(sk)->copied_seq - qp->rx.mpos;
	WRITE_ONCE(qp->ooo, o);
	if (kw_set_ofo_hook(sk, kw_rx_ofo_queued)) {
		WRITE_ONCE(qp->ooo, NULL);
		kfree(o);
		return;
	}
	/* from now on placements copy, the hook's before the in-order
	 * pass: nothing may stay held (rxhold.c) */
	kw_rxh_settle(qp);
}

/* Before the socket goes: no hook call runs once this returns. */
void kw_rx_ooo_detach(struct kw_qp *qp, struct sock *sk)
{
	if (!qp->ooo)
		return;
	lock_sock(sk);
	kw_set_ofo_hook(sk, NULL);
	release_sock(sk);
}
