// SPDX-License-Identifier: GPL-2.0
/*
 * Transmit path: every byte the QP emits is sent under qp->tx_mutex, by
 * the doorbell ioctl inline or by the QP's work item. The
 * core (ddp.c) cuts each RDMAP message into FPDUs and gives us header and
 * trailer bytes; payload goes to TCP straight from the pinned pages, which
 * the skb frags then reference (TCP holds its own page references until
 * the data is acknowledged). Two kernel interfaces do that (kcompat.h):
 *
 *  - MSG_SPLICE_PAGES (6.5 on): one sendmsg() per FPDU over a bvec of
 *    header, payload pages and trailer. Only pages TCP may take references
 *    on can be spliced (sendpage_ok(): no slab), so header and trailer are
 *    copied into a fragment of the QP's page_frag cache, which TCP keeps
 *    alive through its own references, retransmissions included. An FPDU
 *    with a page that is not sendpage_ok() is sent by copy instead.
 *  - sendpage (up to 6.4): header and trailer copied by sendmsg(), the
 *    payload by reference with proto_ops.sendpage, one page at a time.
 *
 * Either way, Read Response payload is copied (tx_bounce_payload()).
 *
 * All socket calls are non-blocking: on -EAGAIN we keep the cursor (how
 * many bytes of the current FPDU TCP accepted) and sk_write_space requeues
 * the work.
 *
 * Order of service: a pending Terminate, the initiator's RTR, then Read
 * Responses (IRQ) before new send WRs, one whole message at a time.
 */
#include <linux/highmem.h>
#include <linux/net.h>
#include <net/sock.h>
#include <net/tcp.h>

#include "qp.h"

#define KW_RTR_STAG	1	/* what siw and hardware RNICs put in an RTR */

static void tx_drop_refs(struct kw_qp *qp)
{
	kw_mr_put_array(qp->tx_mr, KIWARP_MAX_SGE);
	qp->tx_nsge = 0;
}

static void tx_splice_release(struct kw_qp *qp);

/* Teardown: tx_work is cancelled; drop what its cursor still holds. */
void kw_tx_release(struct kw_qp *qp)
{
	tx_splice_release(qp);
	tx_drop_refs(qp);
	qp->tx_active = false;
}

/*
 * Find the byte at payload offset off: which SGE, and the offset within
 * that SGE's MR.
 */
static bool tx_locate(struct kw_qp *qp, u32 off, u32 *sge, u64 *mr_off,
		      u32 *left)
{
	u32 i;

	for (i = 0; i < qp->tx_nsge; i++) {
		const struct kiwarp_sge *s = &qp->tx_sge[i];

		if (off < s->length) {
			*sge = i;
			*mr_off = s->addr - qp->tx_mr[i]->addr + off;
			*left = s->length - off;
			return true;
		}
		off -= s->length;
	}
	return false;
}

static u32 tx_crc_payload(struct kw_qp *qp, u32 crc, u32 off, u32 len)
{
	while (len) {
		unsigned int pg_off, avail;
		struct page *page;
		u64 mr_off;
		u32 sge, left, n;
		void *va;

		if (WARN_ON_ONCE(!tx_locate(qp, off, &sge, &mr_off, &left)))
			break;
		page = kw_mr_page(qp->tx_mr[sge], mr_off, &pg_off, &avail);
		n = min3(len, left, avail);
		va = kmap_local_page(page);
		crc = kw_mpa_crc_update(crc, va + pg_off, n);
		kunmap_local(va);
		off += n;
		len -= n;
	}
	return crc;
}

/*
 * A Read Response answers the peer from memory the application may revoke
 * at any time (deregistration, invalidation). Its payload is therefore not
 * handed to TCP by page reference, which would send whatever the pages
 * hold when TCP gets to them, but copied, one FPDU at a time, into
 * tx_bounce under an MR access (mem.c): once DEREG_MR has returned no
 * further byte of the MR goes out. Returns -EACCES if the MR was revoked.
 */
static int tx_bounce_payload(struct kw_qp *qp, const struct kw_tx_fpdu *f)
{
	struct kw_mr *mr = qp->tx_mr[0];
	u64 mr_off;
	u32 sge, left;

	if (!f->payload_len)
		return 0;
	if (WARN_ON_ONCE(qp->tx_nsge != 1 || !qp->tx_bounce ||
			 f->payload_len > qp->mulpdu ||
			 !tx_locate(qp, f->payload_off, &sge, &mr_off, &left) ||
			 left < f->payload_len))
		return -EIO;
	/* an MR access runs with bottom halves off (mem.c) */
	local_bh_disable();
	if (!kw_mr_access_begin(mr)) {
		local_bh_enable();
		return -EACCES;
	}
	kw_mr_copy_from(mr, mr_off, qp->tx_bounce, f->payload_len);
	kw_mr_access_end(mr);
	local_bh_enable();
	return 0;
}

static bool tx_bounced(const struct kw_qp *qp)
{
	return qp->tx_kind == KW_TXK_READ_RESP;
}

#ifdef KW_TX_SPLICE
/* Header and trailer of one FPDU, in one page fragment (see top). */
#define KW_TX_FRAG	roundup_pow_of_two(KW_TX_HDR_MAX + sizeof_field(struct kw_tx_fpdu, trailer))

static void tx_frag_free(struct kw_qp *qp)
{
	if (qp->tx_frag)
		page_frag_free(qp->tx_frag);
	qp->tx_frag = NULL;
}

static void tx_splice_release(struct kw_qp *qp)
{
	tx_frag_free(qp);
	kw_page_frag_cache_drain(&qp->tx_frag_cache);
}

/*
 * Copy the sealed header and trailer into a fresh fragment. Our own
 * cache, always KW_TX_FRAG (a power of two) at a time, so a fragment is
 * naturally aligned and never straddles a page.
 */
static int tx_frag_fill(struct kw_qp *qp)
{
	const struct kw_tx_fpdu *f = &qp->tx_fpdu;
	u8 *p;

	tx_frag_free(qp);
	if (tx_bounced(qp))
		return 0;	/* sent by copy */
	p = page_frag_alloc(&qp->tx_frag_cache, KW_TX_FRAG, GFP_KERNEL_ACCOUNT);
	if (!p)
		return -ENOMEM;
	if (WARN_ON_ONCE(offset_in_page(p) + KW_TX_FRAG > PAGE_SIZE)) {
		page_frag_free(p);
		return -EIO;
	}
	memcpy(p, f->hdr, f->hdr_len);
	memcpy(p + f->hdr_len, f->trailer, f->trailer_len);
	qp->tx_frag = p;
	return 0;
}

/*
 * Push the current FPDU with one sendmsg(); returns 0 when all of it is in
 * TCP. After a partial send the bvec is rebuilt and advanced past what TCP
 * took: the fragment and the MR pages stay put until the FPDU is done.
 */
static int tx_push_fpdu(struct kw_qp *qp)
{
	struct kw_tx_fpdu *f = &qp->tx_fpdu;
	u32 total = f->hdr_len + f->payload_len + f->trailer_len;
	struct msghdr msg = {
		.msg_flags = MSG_DONTWAIT | MSG_NOSIGNAL | MSG_SPLICE_PAGES |
			     (f->last ? 0 : MSG_MORE),
	};
	struct bio_vec *bv = qp->tx_bvec;
	u32 n = 0, off = 0;
	int ret;

	lockdep_assert_held(&qp->tx_mutex);
	if (qp->tx_fpdu_sent >= total)
		return 0;
	if (tx_bounced(qp)) {
		/* slab or vmalloc memory: TCP copies it */
		struct kvec iov[3] = {
			{ f->hdr, f->hdr_len },
			{ qp->tx_bounce, f->payload_len },
			{ f->trailer, f->trailer_len },
		};

		msg.msg_flags &= ~MSG_SPLICE_PAGES;
		iov_iter_kvec(&msg.msg_iter, ITER_SOURCE, iov, 3, total);
		iov_iter_advance(&msg.msg_iter, qp->tx_fpdu_sent);
		goto send;
	}
	if (WARN_ON_ONCE(!qp->tx_frag))
		return -EIO;
	bvec_set_virt(&bv[n++], qp->tx_frag, f->hdr_len);
	while (off < f->payload_len) {
		unsigned int pg_off, avail;
		struct page *page;
		u32 sge, left, len;
		u64 mr_off;

		if (WARN_ON_ONCE(n + 2 > qp->tx_bvec_max ||
				 !tx_locate(qp, f->payload_off + off, &sge,
					    &mr_off, &left)))
			return -EIO;
		page = kw_mr_page(qp->tx_mr[sge], mr_off, &pg_off, &avail);
		len = min3(f->payload_len - off, left, avail);
		if (!sendpage_ok(page))
			msg.msg_flags &= ~MSG_SPLICE_PAGES;
		bvec_set_page(&bv[n++], page, len, pg_off);
		off += len;
	}
	if (f->trailer_len)
		bvec_set_virt(&bv[n++], qp->tx_frag + f->hdr_len,
			      f->trailer_len);
	iov_iter_bvec(&msg.msg_iter, ITER_SOURCE, bv, n, total);
	iov_iter_advance(&msg.msg_iter, qp->tx_fpdu_sent);
send:
	while (qp->tx_fpdu_sent < total) {
		ret = qp->sock_ops->sendmsg(qp->sock, &msg,
					    total - qp->tx_fpdu_sent);
		if (ret < 0)
			return ret;
		if (ret == 0)
			return -EAGAIN;
		qp->tx_fpdu_sent += ret;	/* msg_iter advanced with it */
	}
	tx_frag_free(qp);	/* TCP holds its own references */
	return 0;
}
#else /* sendpage */
static void tx_splice_release(struct kw_qp *qp)
{
}

static int tx_frag_fill(struct kw_qp *qp)
{
	return 0;
}

static int tx_kvec(struct kw_qp *qp, const u8 *p, u32 len, bool more)
{
	struct kvec iov = { .iov_base = (void *)p, .iov_len = len };
	struct msghdr msg = {
		.msg_flags = MSG_DONTWAIT | MSG_NOSIGNAL | (more ? MSG_MORE : 0),
	};

	return kw_sendmsg(qp, &msg, &iov, 1, len);
}

/* Push the current FPDU; returns 0 when all of it is in TCP. */
static int tx_push_fpdu(struct kw_qp *qp)
{
	struct kw_tx_fpdu *f = &qp->tx_fpdu;
	u32 total = f->hdr_len + f->payload_len + f->trailer_len;
	bool msg_end = f->last;

	while (qp->tx_fpdu_sent < total) {
		u32 sent = qp->tx_fpdu_sent;
		int ret;

		/* MSG_MORE on everything but the last byte of a message */
		if (sent < f->hdr_len) {
			ret = tx_kvec(qp, f->hdr + sent, f->hdr_len - sent,
				      !msg_end || f->hdr_len < total);
		} else if (sent < f->hdr_len + f->payload_len &&
			   tx_bounced(qp)) {
			u32 off = sent - f->hdr_len;

			ret = tx_kvec(qp, qp->tx_bounce + off,
				      f->payload_len - off,
				      !msg_end || f->trailer_len);
		} else if (sent < f->hdr_len + f->payload_len) {
			u32 off = sent - f->hdr_len, sge, left, n;
			unsigned int pg_off, avail;
			struct page *page;
			u64 mr_off;
			int flags = MSG_DONTWAIT | MSG_NOSIGNAL;

			if (WARN_ON_ONCE(!tx_locate(qp, f->payload_off + off,
						    &sge, &mr_off, &left)))
				return -EIO;
			page = kw_mr_page(qp->tx_mr[sge], mr_off, &pg_off,
					  &avail);
			n = min3(f->payload_len - off, left, avail);
			if (!msg_end || sent + n < total)
				flags |= MSG_MORE | MSG_SENDPAGE_NOTLAST;
			ret = qp->sock_ops->sendpage(qp->sock, page, pg_off, n,
						     flags);
		} else {
			u32 off = sent - f->hdr_len - f->payload_len;

			ret = tx_kvec(qp, f->trailer + off, f->trailer_len - off,
				      !msg_end);
		}
		if (ret < 0)
			return ret;
		if (ret == 0)
			return -EAGAIN;
		qp->tx_fpdu_sent += ret;
	}
	return 0;
}

#endif /* KW_TX_SPLICE */

/* Cut the next FPDU of tx_msg and seal its CRC. */
static int tx_next_fpdu(struct kw_qp *qp)
{
	struct kw_tx_fpdu *f = &qp->tx_fpdu;
	int ret;

	ret = kw_tx_fpdu_next(&qp->tx_msg, &qp->tx_msg_off, f);
	if (ret)
		return ret;
	if (tx_bounced(qp)) {
		ret = tx_bounce_payload(qp, f);
		if (ret)
			return ret;
	}
	if (qp->tx_msg.crc) {
		u32 crc = kw_mpa_crc_update(kw_mpa_crc_init(), f->hdr,
					    f->hdr_len);

		if (tx_bounced(qp))
			crc = kw_mpa_crc_update(crc, qp->tx_bounce,
						f->payload_len);
		else
			crc = tx_crc_payload(qp, crc, f->payload_off,
					     f->payload_len);
		kw_tx_fpdu_seal(&qp->tx_msg, f, crc);
	} else {
		kw_tx_fpdu_seal(&qp->tx_msg, f, 0);
	}
	qp->tx_fpdu_sent = 0;
	return tx_frag_fill(qp);
}

static void msg_init(struct kw_qp *qp, u8 opcode, u32 len)
{
	memset(&qp->tx_msg, 0, sizeof(qp->tx_msg));
	qp->tx_msg.opcode = opcode;
	qp->tx_msg.crc = qp->mpa.crc;
	qp->tx_msg.mulpdu = qp->mulpdu;
	qp->tx_msg.len = len;
}

static void msg_untagged(struct kw_qp *qp, u32 qn)
{
	qp->tx_msg.qn = qn;
	qp->tx_msg.msn = ++qp->tx_msn[qn];
}

/* Take source MR references for the payload of an SQ WR. */
static void tx_hold_sges(struct kw_qp *qp, const struct kw_wr *wr)
{
	u32 i, n = 0;

	for (i = 0; i < wr->wqe.num_sge; i++) {
		if (!wr->wqe.sge[i].length || !wr->mr[i])
			continue;
		kref_get(&wr->mr[i]->ref);
		qp->tx_mr[n] = wr->mr[i];
		qp->tx_sge[n] = wr->wqe.sge[i];
		n++;
	}
	qp->tx_nsge = n;
}

/* Build a message for send WR wr. Caller holds qp->lock. */
static bool tx_pick_sq(struct kw_qp *qp)
{
	lockdep_assert_held(&qp->lock);
	while (qp->sq_tx != qp->sq_pulled) {
		u32 idx = qp->sq_tx;
		struct kw_wr *wr = &qp->sq_wr[idx & (qp->sq.entries - 1)];
		const struct kiwarp_wqe *w = &wr->wqe;
		struct kw_read_req rr;
		struct kw_orq *o;

		if (wr->done) {		/* failed validation: skip */
			qp->sq_tx++;
			continue;
		}
		if (w->opcode == KIWARP_WR_RDMA_READ &&
		    qp->orq_tail - qp->orq_head >= qp->orq_size)
			return false;	/* ORD reached: wait for a response */
		if ((w->flags & KIWARP_WR_FENCE) && qp->orq_tail != qp->orq_head)
			return false;	/* fence: prior Reads first */

		qp->sq_tx++;
		qp->tx_sq_idx = idx;
		switch (w->opcode) {
		case KIWARP_WR_LOCAL_INV:
			wr->status = kw_mr_invalidate(w->inv_stag, qp->pd_id) ?
				KIWARP_WC_LOC_PROT_ERR : KIWARP_WC_SUCCESS;
			wr->done = true;
			continue;
		case KIWARP_WR_SEND:
		case KIWARP_WR_SEND_SE:
		case KIWARP_WR_SEND_INV:
		case KIWARP_WR_SEND_SE_INV:
			msg_init(qp, w->opcode == KIWARP_WR_SEND ? KW_OP_SEND :
				 w->opcode == KIWARP_WR_SEND_SE ? KW_OP_SEND_SE :
				 w->opcode == KIWARP_WR_SEND_INV ? KW_OP_SEND_INV :
				 KW_OP_SEND_SE_INV, wr->len);
			msg_untagged(qp, KW_QN_SEND);
			if (w->opcode == KIWARP_WR_SEND_INV ||
			    w->opcode == KIWARP_WR_SEND_SE_INV)
				qp->tx_msg.inv_stag = w->inv_stag;
			break;
		case KIWARP_WR_RDMA_WRITE:
			msg_init(qp, KW_OP_WRITE, wr->len);
			qp->tx_msg.stag = w->rkey;
			qp->tx_msg.to = w->remote_addr;
			break;
		case KIWARP_WR_RDMA_READ:
			rr = (struct kw_read_req){
				.sink_stag = w->num_sge ? w->sge[0].lkey : 0,
				.sink_to = w->num_sge ? w->sge[0].addr : 0,
				.size = wr->len,
				.src_stag = w->rkey,
				.src_to = w->remote_addr,
			};
			o = &qp->orq[qp->orq_tail++ & (KW_MAX_ORD - 1)];
			o->sq_idx = idx;
			o->sink_stag = rr.sink_stag;
			o->sink_to = rr.sink_to;
			o->len = rr.size;
			kw_read_req_encode(&rr, qp->tx_inline);
			msg_init(qp, KW_OP_READ_REQ, 0);
			msg_untagged(qp, KW_QN_READ_REQ);
			qp->tx_msg.inline_data = qp->tx_inline;
			qp->tx_msg.inline_len = KW_READ_REQ_LEN;
			qp->tx_kind = KW_TXK_SQ;
			return true;
		}
		tx_hold_sges(qp, wr);
		qp->tx_kind = KW_TXK_SQ;
		/*
		 * Only we write to this socket and the previous message is
		 * entirely in TCP, so the WR's data ends exactly its wire
		 * length past write_seq. Knowing that before the first byte
		 * goes out, a flush racing with the end of the transmission
		 * can tell a delivered WR from an undelivered one.
		 */
		wr->byte_len = wr->len;
		wr->end_seq = READ_ONCE(tcp_sk(qp->sock->sk)->write_seq) +
			      kw_tx_msg_wire_len(&qp->tx_msg);
		wr->await_ack = true;
		return true;
	}
	return false;
}

/* Choose the next message. Caller holds qp->lock. */
static bool tx_pick(struct kw_qp *qp)
{
	lockdep_assert_held(&qp->lock);
	if (qp->term_pending) {
		qp->term_pending = false;
		msg_init(qp, KW_OP_TERMINATE, 0);
		msg_untagged(qp, KW_QN_TERMINATE);
		qp->tx_msg.inline_data = qp->term_buf;
		qp->tx_msg.inline_len = qp->term_len;
		qp->tx_kind = KW_TXK_TERM;
		return true;
	}
	if (qp->state != KIWARP_QPS_RTS && qp->state != KIWARP_QPS_CLOSING)
		return false;
	if (qp->rtr_send) {
		struct kw_read_req rr = {
			.sink_stag = KW_RTR_STAG, .src_stag = KW_RTR_STAG,
		};
		struct kw_orq *o;

		qp->rtr_send = false;
		qp->tx_kind = KW_TXK_RTR;
		switch (qp->mpa.rtr) {
		case KW_RTR_WRITE:
			msg_init(qp, KW_OP_WRITE, 0);
			qp->tx_msg.stag = KW_RTR_STAG;
			return true;
		case KW_RTR_SEND:
			msg_init(qp, KW_OP_SEND, 0);
			msg_untagged(qp, KW_QN_SEND);
			return true;
		case KW_RTR_READ:
			o = &qp->orq[qp->orq_tail++ & (KW_MAX_ORD - 1)];
			o->sq_idx = ~0U;
			o->sink_stag = KW_RTR_STAG;
			o->sink_to = 0;
			o->len = 0;
			kw_read_req_encode(&rr, qp->tx_inline);
			msg_init(qp, KW_OP_READ_REQ, 0);
			msg_untagged(qp, KW_QN_READ_REQ);
			qp->tx_msg.inline_data = qp->tx_inline;
			qp->tx_msg.inline_len = KW_READ_REQ_LEN;
			return true;
		}
	}
	if (qp->rtr_wait)
		return false;	/* responder: not a byte before the RTR */
	if (qp->irq_head != qp->irq_tail) {
		struct kw_irq *e = &qp->irq[qp->irq_head++ & (KW_MAX_IRD - 1)];

		qp->tx_irq = *e;
		e->src = NULL;
		msg_init(qp, KW_OP_READ_RESP, qp->tx_irq.req.size);
		qp->tx_msg.stag = qp->tx_irq.req.sink_stag;
		qp->tx_msg.to = qp->tx_irq.req.sink_to;
		if (qp->tx_irq.src) {
			/* the IRQ's reference moves to the tx cursor */
			qp->tx_mr[0] = qp->tx_irq.src;
			qp->tx_irq.src = NULL;
			qp->tx_sge[0] = (struct kiwarp_sge){
				.addr = qp->tx_irq.req.src_to,
				.length = qp->tx_irq.req.size,
			};
			qp->tx_nsge = 1;
		}
		qp->tx_kind = KW_TXK_READ_RESP;
		return true;
	}
	return tx_pick_sq(qp);
}

/* The current message is entirely in TCP. */
static void tx_finish(struct kw_qp *qp)
{
	bool term = false;

	spin_lock_bh(&qp->lock);
	qp->tx_bytes += qp->tx_msg.len;
	switch (qp->tx_kind) {
	case KW_TXK_TERM:
		term = true;
		break;
	default:
		break;
	}
	qp->tx_active = false;
	qp->tx_kind = KW_TXK_NONE;
	spin_unlock_bh(&qp->lock);
	tx_drop_refs(qp);
	kw_qp_wait_acks(qp);
	if (term)
		kw_qp_set_error(qp);	/* Terminate is out: now flush */
}

static void tx_run(struct kw_qp *qp)
{
	int ret;

	lockdep_assert_held(&qp->tx_mutex);
again:
	while (!READ_ONCE(qp->dying) && qp->sock) {
		if (!qp->tx_active) {
			bool go;

			spin_lock_bh(&qp->lock);
			go = tx_pick(qp);
			if (go) {
				qp->tx_active = true;
				qp->tx_msg_off = 0;
			}
			spin_unlock_bh(&qp->lock);
			if (!go)
				break;
			ret = tx_next_fpdu(qp);
			if (ret)
				goto fail;
		}
		ret = tx_push_fpdu(qp);
		if (ret == -EAGAIN)
			return;		/* sk_write_space requeues us */
		if (ret)
			goto fail;
		if (!qp->tx_fpdu.last) {
			ret = tx_next_fpdu(qp);
			if (ret)
				goto fail;
			continue;
		}
		tx_finish(qp);
	}

	/* WRs finished without transmitting (Local Invalidate) complete. */
	kw_qp_wait_acks(qp);

	/* An orderly close waits until everything posted went out. */
	spin_lock_bh(&qp->lock);
	if (qp->state == KIWARP_QPS_CLOSING && qp->sq_compl == qp->sq_pulled &&
	    qp->orq_head == qp->orq_tail && !qp->tx_active) {
		spin_unlock_bh(&qp->lock);
		kw_qp_set_error(qp);
		return;
	}
	spin_unlock_bh(&qp->lock);
	return;

fail:
	if (ret == -EACCES) {
		/* RFC 5040 section 7.2: the Read's source was revoked. */
		static const struct kw_term revoked = {
			.layer = KW_TERM_LAYER_RDMAP,
			.etype = KW_TERM_RDMAP_ETYPE_REMOTE_PROT,
			.ecode = KW_TERM_RDMAP_INV_STAG,
		};

		spin_lock_bh(&qp->lock);
		qp->tx_active = false;
		spin_unlock_bh(&qp->lock);
		tx_drop_refs(qp);
		/* Only the Terminate can be picked now (TERMINATE state). */
		kw_qp_fail(qp, &revoked, NULL, 0);
		goto again;
	}
	pr_debug("kiwarp: qp %u: transmit failed: %d\n", qp->handle, ret);
	spin_lock_bh(&qp->lock);
	qp->tx_active = false;
	spin_unlock_bh(&qp->lock);
	tx_drop_refs(qp);
	kw_qp_set_error(qp);
}

void kw_tx_work(struct work_struct *w)
{
	struct kw_qp *qp = container_of(w, struct kw_qp, tx_work);

	mutex_lock(&qp->tx_mutex);
	tx_run(qp);
	mutex_unlock(&qp->tx_mutex);
	kw_qp_put(qp);	/* the reference kw_qp_queue() took */
}

/*
 * Doorbell: transmit in the caller's context when nobody else is, instead
 * of waking a worker (a busy-polling peer on a small machine would make us
 * wait for a time slice). Sends never block; what TCP cannot take now is
 * finished by tx_work from sk_write_space.
 */
void kw_tx_inline(struct kw_qp *qp)
{
	if (!mutex_trylock(&qp->tx_mutex)) {
		kw_qp_kick_tx(qp);	/* tx_work or another caller is busy */
		return;
	}
	tx_run(qp);
	mutex_unlock(&qp->tx_mutex);
}
