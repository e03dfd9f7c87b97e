// SPDX-License-Identifier: GPL-2.0
/*
 * Queue pairs: shared rings, work request intake and completion, the QP
 * state machine and flushing. Locking rules are in qp.h.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/log2.h>
#include <linux/uaccess.h>
#include <net/tcp.h>

#include "qp.h"

struct workqueue_struct *kw_wq, *kw_bulk_wq;

/* ------------------------------------------------------------------ rings */

static int ring_alloc(struct kw_ring *r, u32 min_entries)
{
	u32 n = roundup_pow_of_two(max_t(u32, min_entries, 1));
	void *mem;

	r->entries = n;
	r->mem_size = KW_RING_ENTRIES_OFF +
		      PAGE_ALIGN((size_t)n * sizeof(struct kiwarp_wqe));
	r->umem = kw_umem_alloc(r->mem_size, &mem);
	if (IS_ERR(r->umem)) {
		int ret = PTR_ERR(r->umem);

		r->umem = NULL;
		return ret;
	}
	r->prod = mem + KW_RING_PROD_OFF;
	r->cons = mem + KW_RING_CONS_OFF;
	r->wqe = mem + KW_RING_ENTRIES_OFF;
	return 0;
}

/*
 * How many new entries user space produced on a ring whose kernel copy has
 * taken entries up to pulled and completed them up to compl. The producer
 * index is user-written: it is valid only if it lies in
 * [pulled, compl + entries] (free-running, modulo 2^32). Returns -1 if not.
 */
static s64 ring_new_entries(u32 prod, u32 pulled, u32 compl, u32 entries)
{
	u32 room = entries - (pulled - compl);	/* slots not yet taken */

	if (prod - pulled > room)
		return -1;
	return prod - pulled;
}

static void ring_info(const struct kw_ring *r, enum kw_mmap_kind kind,
		      u32 handle, struct kiwarp_ring_info *info)
{
	info->ring_entries = r->entries;
	info->prod_off = KW_RING_PROD_OFF;
	info->cons_off = KW_RING_CONS_OFF;
	info->ring_off = KW_RING_ENTRIES_OFF;
	info->mmap_offset = KW_MMAP_OFFSET(kind, handle);
	info->mmap_size = r->mem_size;
}

/* ------------------------------------------------------------ references */

static void qp_free(struct kref *ref)
{
	struct kw_qp *qp = container_of(ref, struct kw_qp, ref);

	if (qp->ack_sk)
		sock_put(qp->ack_sk);
	if (qp->tx_peer_sk)
		sock_put(qp->tx_peer_sk);
	if (qp->scq)
		kw_cq_put(qp->scq);
	if (qp->rcq)
		kw_cq_put(qp->rcq);
	/* mappings keep the rings until munmap */
	kw_umem_put(qp->sq.umem);
	kw_umem_put(qp->rq.umem);
	kvfree(qp->sq_wr);
	kvfree(qp->rq_wr);
	kfree(qp->orq);
	kfree(qp->irq);
	kvfree(qp->tx_bvec);
	kfree_rcu(qp, rcu);	/* kw_qp_get() may still be looking at it */
}

/*
 * A reference to the QP with this handle, or NULL. Lockless: ctx->qps is
 * read under RCU and the struct outlives a grace period after its last
 * put (qp_free()), so a QP being destroyed is either still referenced
 * (and dying tells the caller, as for a reference taken just before the
 * handle went) or found with a zero count and skipped.
 */
struct kw_qp *kw_qp_get(struct kw_ctx *ctx, u32 handle)
{
	struct kw_qp *qp;

	rcu_read_lock();
	qp = xa_load(&ctx->qps, handle);
	if (qp && !kref_get_unless_zero(&qp->ref))
		qp = NULL;
	rcu_read_unlock();
	return qp;
}

void kw_qp_put(struct kw_qp *qp)
{
	kref_put(&qp->ref, qp_free);
}

/* --------------------------------------------------------------- release */

static void wr_release(struct kw_wr *wr)
{
	int i;

	for (i = 0; i < KIWARP_MAX_SGE; i++) {
		if (!wr->mr[i])
			continue;
		atomic_dec(&wr->mr[i]->wr_refs);
		kw_mr_put(wr->mr[i]);
		wr->mr[i] = NULL;
	}
}

/*
 * Start wr afresh from a WQE in a user-mapped ring, which user space may
 * rewrite meanwhile: each word is read once, and only the copy is looked
 * at afterwards. Word by word rather than memcpy(), which on CPUs with
 * ERMS is a byte-wise "rep movsb" (slow to start on hardware, and one
 * emulated step per byte under QEMU's TCG), on the path of every WR.
 */
static void wr_take(struct kw_wr *wr, const struct kiwarp_wqe *src)
{
	const u64 *s = (const u64 *)src;
	u64 *d = (u64 *)&wr->wqe;
	unsigned int i;

	BUILD_BUG_ON(offsetof(struct kw_wr, wqe) != 0 ||
		     sizeof(wr->wqe) % sizeof(u64) ||
		     __alignof__(struct kiwarp_wqe) < __alignof__(u64));
	memset((u8 *)wr + sizeof(wr->wqe), 0, sizeof(*wr) - sizeof(wr->wqe));
	for (i = 0; i < sizeof(wr->wqe) / sizeof(u64); i++)
		d[i] = READ_ONCE(s[i]);
}

/*
 * Resolve and check a WR's scatter/gather list. need_write: the local
 * memory is written (receive, RDMA Read sink). Returns a KIWARP_WC_* status.
 */
static u8 wr_resolve_sges(struct kw_qp *qp, struct kw_wr *wr, bool need_write)
{
	const struct kiwarp_wqe *w = &wr->wqe;
	u64 total = 0;
	int i;

	for (i = 0; i < w->num_sge; i++) {
		const struct kiwarp_sge *s = &w->sge[i];
		struct kw_mr *mr;

		if (!s->length)
			continue;
		mr = kw_mr_get(s->lkey);
		if (!mr)
			return KIWARP_WC_LOC_PROT_ERR;
		/*
		 * Another PD's MR (its STag may have been given to a peer,
		 * which may be a local user: riomap() does so) is neither
		 * kept nor counted: its owner's DEREG_MR must never wait for
		 * a WR that is not theirs, which could wait forever.
		 */
		if (mr->pd_id != qp->pd_id) {
			kw_mr_put(mr);
			return KIWARP_WC_LOC_PROT_ERR;
		}
		wr->mr[i] = mr;
		atomic_inc(&mr->wr_refs);
		smp_mb__after_atomic();	/* pairs with kw_mr_dereg() */
		if (!READ_ONCE(mr->valid) || READ_ONCE(mr->dereg))
			return KIWARP_WC_LOC_PROT_ERR;
		if (need_write && !(mr->access & KIWARP_ACCESS_LOCAL_WRITE))
			return KIWARP_WC_LOC_PROT_ERR;
		if (s->addr < mr->addr || s->addr - mr->addr > mr->len ||
		    s->length > mr->len - (s->addr - mr->addr))
			return KIWARP_WC_LOC_PROT_ERR;
		total += s->length;
	}
	/* ACK tracking compares TCP sequence numbers: under 2^31 apart */
	if (total > INT_MAX)
		return KIWARP_WC_LOC_LEN_ERR;
	wr->len = total;
	return KIWARP_WC_SUCCESS;
}

static bool wqe_fields_ok(const struct kiwarp_wqe *w, u32 max_sge)
{
	if (w->reserved0 || w->reserved1)
		return false;
	if (w->flags & ~(KIWARP_WR_SIGNALED | KIWARP_WR_FENCE))
		return false;
	if (w->num_sge > max_sge)
		return false;
	return true;
}

static u8 sq_validate(struct kw_qp *qp, struct kw_wr *wr)
{
	const struct kiwarp_wqe *w = &wr->wqe;

	if (!wqe_fields_ok(w, qp->max_sge))
		return KIWARP_WC_LOC_QP_OP_ERR;
	switch (w->opcode) {
	case KIWARP_WR_SEND:
	case KIWARP_WR_SEND_SE:
	case KIWARP_WR_SEND_INV:
	case KIWARP_WR_SEND_SE_INV:
	case KIWARP_WR_RDMA_WRITE:
		return wr_resolve_sges(qp, wr, false);
	case KIWARP_WR_RDMA_READ:
		/* One sink: the Read Request names a single sink STag. */
		if (w->num_sge > 1)
			return KIWARP_WC_LOC_QP_OP_ERR;
		return wr_resolve_sges(qp, wr, true);
	case KIWARP_WR_LOCAL_INV:
		if (w->num_sge)
			return KIWARP_WC_LOC_QP_OP_ERR;
		return KIWARP_WC_SUCCESS;
	default:
		return KIWARP_WC_LOC_QP_OP_ERR;
	}
}

/* ------------------------------------------------------------ completion */

static struct kiwarp_cqe cqe_of(struct kw_qp *qp, const struct kw_wr *wr,
				u8 opcode, u8 flags, u32 inv_stag)
{
	return (struct kiwarp_cqe){
		.wr_id = wr->wqe.wr_id,
		.opcode = opcode,
		.status = wr->status,
		.flags = flags,
		.byte_len = wr->byte_len,
		.qp = qp->handle,
		.inv_stag = inv_stag,
		.term = wr->term,
	};
}

/* Record Terminate t as sent and queue it for tx_work (tx_pick() takes a
 * pending Terminate first). Caller holds qp->lock. */
static void term_queue_locked(struct kw_qp *qp, const struct kw_term *t,
			      const u8 *bad, u32 bad_len)
{
	int len;

	lockdep_assert_held(&qp->lock);
	qp->term_sent = (struct kiwarp_term_info){
		.valid = 1, .layer = t->layer, .etype = t->etype,
		.ecode = t->ecode,
	};
	len = kw_term_encode(t, bad, bad_len, qp->term_buf);
	qp->term_len = len > 0 ? len : 0;
	qp->term_pending = len > 0;
}

/*
 * RFC 5040 section 7.1: an error found while building a request (a bad
 * lkey or SGE, a Local Invalidate that fails) or the loss of a CQ is sent
 * to the peer as a Terminate "instead of the request": RDMAP, local
 * catastrophic (0/0/0), without headers (section 4.8). The QP goes to
 * TERMINATE; err_work lets tx_work send the Terminate before ERROR (only
 * a connected QP has a stream to send it on).
 */
void kw_qp_local_error_locked(struct kw_qp *qp)
{
	static const struct kw_term t = {
		.layer = KW_TERM_LAYER_RDMAP,
		.etype = KW_TERM_RDMAP_ETYPE_CATASTROPHIC,
	};

	lockdep_assert_held(&qp->lock);
	if (qp->state >= KIWARP_QPS_TERMINATE)
		return;
	/*
	 * A responder that has not received an FPDU yet sends none, not even
	 * this Terminate (RFC 5044 section 7.1.2 rule 4): the close is all
	 * the peer gets.
	 */
	if (!qp->term_sent.valid && !READ_ONCE(qp->fenced) &&
	    (qp->state == KIWARP_QPS_RTS || qp->state == KIWARP_QPS_CLOSING))
		term_queue_locked(qp, &t, NULL, 0);
	qp->state = KIWARP_QPS_TERMINATE;
	kw_qp_queue(qp, &qp->err_work);
}

/*
 * Publish a CQE. Callers first release the WR's ring slot (store the
 * consumer index), so that a completion seen by user space always means
 * its slot can be reposted.
 */
static void post_cqe(struct kw_qp *qp, struct kw_cq *cq,
		     const struct kiwarp_cqe *cqe, bool solicited)
{
	lockdep_assert_held(&qp->lock);
	if (qp->cq_detached)
		return;		/* destroyed: the CQ may serve others now */
	/* CQ overrun: the QP cannot report further completions */
	if (kw_cq_post(cq, cqe, solicited || cqe->status))
		kw_qp_local_error_locked(qp);
}

/*
 * Is a transmitted WR's data acknowledged? Its pages were handed to TCP by
 * reference (zero copy), so its buffer may be reused only when TCP no
 * longer needs it for retransmission: then the WR completes, as on an RNIC.
 */
static bool wr_acked(struct kw_qp *qp, const struct kw_wr *wr)
{
	struct sock *sk = qp->ack_sk;

	return !sk || !before(READ_ONCE(tcp_sk(sk)->snd_una), wr->end_seq);
}

/*
 * How long an await_read WR waits, after our stream ended, for a segment
 * of it that TCP let go of but the peer's TCP has not taken in yet (in a
 * qdisc or a CPU's backlog between the two sockets): wr_read(). Teardown
 * waits as long for skbs that hold a held WR's pages (qp_await_pages()).
 */
#define KW_PAGES_WAIT	HZ

/*
 * Is the peer's socket's lock held now (owned by a task, or its spinlock
 * by a softirq's receive)? After a load of what such a hold changes: a
 * hold that changed it is over if this says no. x86 only, as await_read
 * (tx.c, tx_local_peer()): loads are not reordered with loads.
 */
static bool peer_sk_locked(struct sock *p)
{
	smp_rmb();
	return READ_ONCE(p->sk_lock.owned) || spin_is_locked(&p->sk_lock.slock);
}

/*
 * Has the peer on this host that an await_read WR went to by plain page
 * reference (tx.c, tx_local_peer()) done with its pages? Its skbs may hold
 * the very pages after TCP acknowledged them, and ours would send them
 * later still. Yes if
 *  - its socket read all of it (copied_seq; both sockets count one
 *    sequence space);
 *  - or it is closed (SOCK_DEAD: tcp_close() dropped what was unread, and
 *    nobody can read it any more);
 *  - or it ended (TCP_CLOSE: reset, or our own reset reached it behind
 *    our data, or its TIME_WAIT after our FIN) in a hold of its lock that is
 *    over: its kiwarp receive drains what it can in that very hold
 *    (tcp_done() -> sk_state_change), and no segment comes in after;
 *  - or our stream ended (reset or closed: the WR failed, or teardown
 *    with @ended), so TCP sends none of it any more, and what the peer's
 *    TCP took in of it (rcv_nxt) its kiwarp receive took too, in the same
 *    hold of the socket's lock (sk_data_ready for every byte: kiwarp
 *    keeps SO_RCVLOWAT 1, checked again here), which is over: placed,
 *    or, once the peer's callbacks are gone, left to be
 *    dropped (kw_cm_release_sock()), as no segment follows to complete
 *    an FPDU. What the peer's TCP has not taken in is still between the
 *    two sockets (a qdisc, a CPU's backlog), or lost: it gets
 *    KW_PAGES_WAIT from when we first saw the stream ended.
 * tx_peer_sk is set before any await_read WR. Caller holds qp->lock.
 */
static bool wr_read(struct kw_qp *qp, const struct kw_wr *wr, bool ended)
{
	struct sock *p = qp->tx_peer_sk;

	lockdep_assert_held(&qp->lock);
	if (!before(READ_ONCE(tcp_sk(p)->copied_seq), wr->end_seq) ||
	    sock_flag(p, SOCK_DEAD) ||
	    (READ_ONCE(p->sk_state) == TCP_CLOSE && !peer_sk_locked(p)))
		return true;
	if (!ended && (wr->status == KIWARP_WC_SUCCESS ||
		       READ_ONCE(qp->ack_sk->sk_state) != TCP_CLOSE))
		return false;
	if (!qp->ended_seen) {
		qp->ended_seen = true;
		qp->ended_at = get_jiffies_64();
	}
	if (!before(READ_ONCE(tcp_sk(p)->rcv_nxt), wr->end_seq) &&
	    READ_ONCE(p->sk_rcvlowat) <= 1 && !peer_sk_locked(p))
		return true;
	return time_after64(get_jiffies_64(), qp->ended_at + KW_PAGES_WAIT);
}

/* A sent WR whose data TCP saw acknowledged is done (delivered). */
static void wr_check_acked(struct kw_qp *qp, struct kw_wr *wr)
{
	if (!wr->done && wr->await_ack && wr_acked(qp, wr)) {
		wr->done = true;
		wr->await_ack = false;
	}
}

/*
 * Queue a delayed work item of the QP (it holds a reference while queued)
 * in delay jiffies. now: at once, also if it was due later (an event that
 * may have changed what it looks at), else not earlier than it was due.
 */
static void qp_queue_delayed(struct kw_qp *qp, struct delayed_work *dw,
			     unsigned long delay, bool now)
{
	bool pending;

	if (READ_ONCE(qp->dying))
		return;
	kref_get(&qp->ref);
	if (now)
		pending = mod_delayed_work(kw_wq, dw, 0);
	else
		pending = !queue_delayed_work(kw_wq, dw, delay);
	if (pending)
		kw_qp_put(qp);	/* it has one; not the last: the caller has */
}

/*
 * Complete SQ WRs in order. Caller holds qp->lock. Returns true if the
 * oldest is done but waits for its peer to read it (await_read), which no
 * event of ours signals. Mostly the peer's receive has read it before TCP
 * handles the ACK: the peer's softirq sends the ACK first, but the same
 * CPU's backlog handles it after. Not when the peer takes the segment
 * from its socket's backlog (release_sock() runs it with BHs on, so the
 * ACK is handled as it is sent), nor with the ACK handled on another CPU
 * (RPS, RFS), nor after a flush: read_work looks again, at once first.
 */
static bool sq_complete_locked(struct kw_qp *qp)
{
	struct kiwarp_cqe cqe;
	bool failed = false, signal, unread = false;

	lockdep_assert_held(&qp->lock);
	while (qp->sq_compl != qp->sq_pulled) {
		struct kw_wr *wr = &qp->sq_wr[qp->sq_compl & (qp->sq.entries - 1)];

		wr_check_acked(qp, wr);
		if (!wr->done || wr->held)
			break;
		/* flushed too: TCP may still deliver it, and the peer would
		 * read the buffer as the application rewrote it */
		if (wr->await_read) {
			if (!wr_read(qp, wr, false)) {
				unread = true;
				if (!qp->read_polling)
					qp_queue_delayed(qp, &qp->read_work,
							 0, true);
				break;
			}
			wr->await_read = false;
		}
		cqe = cqe_of(qp, wr, wr->wqe.opcode, 0, 0);
		signal = wr->signaled || wr->status != KIWARP_WC_SUCCESS;
		if (wr->status != KIWARP_WC_SUCCESS &&
		    wr->status != KIWARP_WC_WR_FLUSH_ERR)
			failed = true;
		wr_release(wr);
		qp->sq_compl++;
		/* Pairs with the load-acquire of cons in kw_post_send(): the
		 * slot may be reused only after we are done with it. */
		smp_store_release(qp->sq.cons, qp->sq_compl);
		if (signal)
			post_cqe(qp, qp->scq, &cqe, false);
	}
	if (failed)
		kw_qp_local_error_locked(qp);
	/* An orderly close waits for the last completion: let tx_work
	 * see that the send queue drained (it finishes the close). */
	if (qp->state == KIWARP_QPS_CLOSING && qp->sq_compl == qp->sq_pulled)
		kw_qp_queue(qp, &qp->tx_work);
	return unread;
}

/*
 * Is any data of a WR sent by reference still in TCP, not acknowledged?
 * TCP would transmit it from the WR's pages whenever the peer lets it.
 */
bool kw_qp_zc_in_tcp(struct kw_qp *qp)
{
	bool in_tcp = false;
	u32 i;

	spin_lock_bh(&qp->lock);
	for (i = qp->sq_compl; i != qp->sq_pulled && !in_tcp; i++) {
		const struct kw_wr *wr = &qp->sq_wr[i & (qp->sq.entries - 1)];

		in_tcp = (wr->held || wr->await_read) && !wr_acked(qp, wr);
	}
	spin_unlock_bh(&qp->lock);
	return in_tcp;
}

/*
 * No skb holds the pages of send WR idx any more (tx.c, a ubuf's last
 * reference): it may complete. Any context but hard IRQ; zcd->lock held.
 */
void kw_qp_wr_released(struct kw_qp *qp, u32 idx)
{
	spin_lock_bh(&qp->lock);
	/* held WRs do not complete, so idx is still theirs */
	if ((s32)(idx - qp->sq_compl) >= 0 &&
	    (s32)(qp->sq_pulled - idx) > 0) {
		qp->sq_wr[idx & (qp->sq.entries - 1)].held = false;
		sq_complete_locked(qp);
	}
	spin_unlock_bh(&qp->lock);
}

/* Complete what can; returns true if the oldest WR waits for its ACK. */
bool kw_qp_sq_complete(struct kw_qp *qp)
{
	bool waiting;

	spin_lock_bh(&qp->lock);
	sq_complete_locked(qp);
	waiting = qp->sq_compl != qp->sq_pulled &&
		  qp->sq_wr[qp->sq_compl & (qp->sq.entries - 1)].await_ack;
	spin_unlock_bh(&qp->lock);
	return waiting;
}

/*
 * read_work: the oldest WR waits for its peer on this host to read it
 * (sq_complete_locked()). Looks again after 2, 4, 8 ... jiffies, at most
 * a second apart, while nothing changes: a peer that is slow to read
 * costs a few runs, not a busy loop. A failed WR that a peer never reads
 * goes once abort_work reset our stream, KW_PAGES_WAIT later at most
 * (wr_read()), and a run after that: up to a second more.
 */
static void read_work(struct work_struct *w)
{
	struct kw_qp *qp = container_of(to_delayed_work(w), struct kw_qp,
					read_work);
	bool unread;

	spin_lock_bh(&qp->lock);
	qp->read_polling = true;	/* we queue the next run ourselves */
	unread = sq_complete_locked(qp);
	qp->read_polling = false;
	spin_unlock_bh(&qp->lock);
	/* only this work item uses read_polls: it never runs twice at once */
	if (unread) {
		if (qp->read_polls < 10)
			qp->read_polls++;
		qp_queue_delayed(qp, &qp->read_work,
				 min_t(unsigned long, HZ,
				       1UL << qp->read_polls), false);
	} else {
		qp->read_polls = 0;
	}
	kw_qp_put(qp);	/* the reference qp_queue_delayed() took */
}

/*
 * Take the next posted receive WR (receive path). Returns false if none is
 * posted. Caller holds qp->lock.
 */
bool kw_qp_rq_pull(struct kw_qp *qp, u32 *idx)
{
	/* Pairs with the store-release of prod in kw_post_recv(). */
	u32 prod = smp_load_acquire(qp->rq.prod);
	u32 slot = qp->rq_pulled & (qp->rq.entries - 1);
	struct kw_wr *wr = &qp->rq_wr[slot];

	lockdep_assert_held(&qp->lock);
	/* None posted, or an index no valid producer could have written. */
	if (ring_new_entries(prod, qp->rq_pulled, qp->rq_compl,
			     qp->rq.entries) <= 0)
		return false;
	wr_take(wr, &qp->rq.wqe[slot]);
	wr->signaled = true;
	if (!wqe_fields_ok(&wr->wqe, qp->max_sge) ||
	    wr->wqe.opcode != KIWARP_WR_RECV)
		wr->status = KIWARP_WC_LOC_QP_OP_ERR;
	else
		wr->status = wr_resolve_sges(qp, wr, true);
	*idx = qp->rq_pulled++;
	return true;
}

/* Complete receive WR idx (always the oldest). Caller holds qp->lock. */
void kw_qp_rq_complete(struct kw_qp *qp, u32 idx, u8 status, u32 byte_len,
		       u8 flags, u32 inv_stag)
{
	struct kw_wr *wr = &qp->rq_wr[idx & (qp->rq.entries - 1)];
	struct kiwarp_cqe cqe;

	lockdep_assert_held(&qp->lock);
	WARN_ON_ONCE(idx != qp->rq_compl);
	wr->status = status;
	wr->byte_len = byte_len;
	cqe = cqe_of(qp, wr, KIWARP_WR_RECV, flags, inv_stag);
	wr_release(wr);
	qp->rq_compl++;
	/* Pairs with the load-acquire of cons in kw_post_recv(). */
	smp_store_release(qp->rq.cons, qp->rq_compl);
	post_cqe(qp, qp->rcq, &cqe, flags & KIWARP_WC_SOLICITED);
}

/* ------------------------------------------------------------ state/flush */

/*
 * Flush the receive WRs still in the ring. At most one ring's worth per
 * call: user space may keep producing while we loop.
 */
static void rq_flush_ring_locked(struct kw_qp *qp)
{
	u32 n, idx;

	for (n = qp->rq.entries; n && kw_qp_rq_pull(qp, &idx); n--)
		kw_qp_rq_complete(qp, idx, KIWARP_WC_WR_FLUSH_ERR, 0, 0, 0);
}

/*
 * Flush the receive side: the WR the receive path holds is completed by it
 * or here (the receive path keeps its own MR references, rx.c), then what
 * is still in the ring. Caller holds qp->lock.
 */
static void rq_flush_locked(struct kw_qp *qp)
{
	lockdep_assert_held(&qp->lock);
	while (qp->rq_compl != qp->rq_pulled)
		kw_qp_rq_complete(qp, qp->rq_compl, KIWARP_WC_WR_FLUSH_ERR,
				  0, 0, 0);
	rq_flush_ring_locked(qp);
	qp->rx_buf_valid = false;
}

/* Flush everything outstanding. Caller holds qp->lock. */
static void flush_locked(struct kw_qp *qp)
{
	u32 i;

	lockdep_assert_held(&qp->lock);
	/*
	 * SQ: every WR not yet done, including ones still in the ring. A WR
	 * whose data TCP already saw acknowledged (the ACK usually arrives
	 * with the peer's FIN that brought us here) was delivered: it
	 * completes successfully rather than flushed. (Its end sequence is
	 * known from the moment its transmission starts, see tx_sq_data().)
	 *
	 * A flushed WR sent by reference stays held until no skb has its
	 * pages: TCP would still send them (and the application's next use
	 * of the buffer with them) once the peer opens its window. A peer
	 * that never does cannot hold the flush: err_work shuts the stream
	 * down and, if such data is still in TCP a little later, resets it
	 * (abort_work), which frees the skbs.
	 */
	for (i = qp->sq_compl; i != qp->sq_pulled; i++) {
		struct kw_wr *wr = &qp->sq_wr[i & (qp->sq.entries - 1)];

		wr_check_acked(qp, wr);
		if (!wr->done) {
			wr->done = true;
			wr->await_ack = false;
			wr->status = KIWARP_WC_WR_FLUSH_ERR;
		}
	}
	qp->orq_head = qp->orq_tail;
	while (qp->irq_head != qp->irq_tail) {
		struct kw_irq *e = &qp->irq[qp->irq_head++ & (KW_MAX_IRD - 1)];

		if (e->src)
			kw_mr_put(e->src);
		e->src = NULL;
	}
	sq_complete_locked(qp);
	rq_flush_locked(qp);
}

/*
 * Pull newly posted SQ WRs into the shadow: returns how many, or -EINVAL if
 * the producer index is not one a valid producer could have written (then
 * nothing is pulled). Caller holds qp->lock.
 */
static int sq_pull_locked(struct kw_qp *qp)
{
	/* Pairs with the store-release of prod in kw_post_send(). */
	u32 prod = smp_load_acquire(qp->sq.prod);
	s64 n = ring_new_entries(prod, qp->sq_pulled, qp->sq_compl,
				 qp->sq.entries);
	u32 i;

	lockdep_assert_held(&qp->lock);
	if (n < 0)
		return -EINVAL;	/* never trust a user index */
	/* n <= sq.entries: the loop is bounded by the ring size */
	for (i = 0; i < n; i++) {
		u32 slot = qp->sq_pulled & (qp->sq.entries - 1);
		struct kw_wr *wr = &qp->sq_wr[slot];

		wr_take(wr, &qp->sq.wqe[slot]);
		wr->signaled = qp->sig_all ||
			       (wr->wqe.flags & KIWARP_WR_SIGNALED);
		wr->status = sq_validate(qp, wr);
		if (wr->status != KIWARP_WC_SUCCESS) {
			/* Fails now; later WRs flush as the QP errors. */
			wr->done = true;
		}
		qp->sq_pulled++;
	}
	return n;
}

/*
 * To ERROR, flushing everything (also what is still in the SQ ring).
 * Returns true if the QP entered ERROR here: only then is err_work queued,
 * as err_work's shutdown makes TCP call kw_state_change(), which lands here
 * again and must not queue err_work once more (it would loop forever).
 */
static bool to_error_locked(struct kw_qp *qp)
{
	lockdep_assert_held(&qp->lock);
	if (qp->state == KIWARP_QPS_ERROR)
		return false;
	qp->state = KIWARP_QPS_ERROR;
	sq_pull_locked(qp);
	flush_locked(qp);
	return true;
}

/*
 * The peer sent a Terminate: record it, fail the oldest unfinished send WR
 * (the one the peer refused) with status, and go to ERROR, all under one
 * lock hold so that the failed WR's CQE is never visible before the state.
 */
void kw_qp_term_received(struct kw_qp *qp, const struct kiwarp_term_info *ti,
			 u8 status)
{
	bool changed;
	u32 i;

	spin_lock_bh(&qp->lock);
	qp->term_rcvd = *ti;
	for (i = qp->sq_compl; i != qp->sq_pulled; i++) {
		struct kw_wr *wr = &qp->sq_wr[i & (qp->sq.entries - 1)];

		wr_check_acked(qp, wr);	/* delivered before the error */
		if (wr->done)
			continue;
		wr->done = true;
		wr->await_ack = false;	/* as a flush: see flush_locked() */
		wr->status = status;
		wr->term = *ti;
		break;
	}
	changed = to_error_locked(qp);
	spin_unlock_bh(&qp->lock);
	if (changed)
		kw_qp_queue(qp, &qp->err_work);
}

void kw_qp_set_error(struct kw_qp *qp)
{
	bool changed;

	spin_lock_bh(&qp->lock);
	changed = to_error_locked(qp);
	spin_unlock_bh(&qp->lock);
	if (changed)
		kw_qp_queue(qp, &qp->err_work);
}

/*
 * The peer closed its half of the connection (TCP FIN) between messages.
 * RFC 5041 section 6.2.1: DDP "SHOULD ... continue to process outbound
 * data transfer requests normally". Nothing can arrive any more, so the
 * posted receives and the Reads still waiting for their Response are
 * flushed now (Reads posted later flush in tx_sq_check()); the Read
 * Responses the peer is owed and the send queue still go out, and then
 * tx_work closes our half and the QP goes to ERROR, as after
 * KIWARP_MODIFY_CLOSE. A responder still fenced (no FPDU received, or no
 * RTR) has nothing to finish: ERROR at once.
 */
void kw_qp_peer_closed(struct kw_qp *qp)
{
	spin_lock_bh(&qp->lock);
	if ((qp->state != KIWARP_QPS_RTS && qp->state != KIWARP_QPS_CLOSING) ||
	    READ_ONCE(qp->fenced) || READ_ONCE(qp->rtr_wait)) {
		spin_unlock_bh(&qp->lock);
		kw_qp_set_error(qp);
		return;
	}
	qp->state = KIWARP_QPS_CLOSING;
	qp->peer_closed = true;
	while (qp->orq_head != qp->orq_tail) {
		struct kw_orq *o = &qp->orq[qp->orq_head++ & (KW_MAX_ORD - 1)];
		struct kw_wr *wr;

		if (o->sq_idx == ~0U)
			continue;
		wr = &qp->sq_wr[o->sq_idx & (qp->sq.entries - 1)];
		if (!wr->done) {
			wr->done = true;
			wr->status = KIWARP_WC_WR_FLUSH_ERR;
		}
	}
	sq_complete_locked(qp);
	rq_flush_locked(qp);
	spin_unlock_bh(&qp->lock);
	kw_qp_kick_tx(qp);
}

/*
 * How long a failed QP lets TCP deliver what it still has of WRs sent by
 * reference, or its Terminate, before resetting the stream.
 */
#define KW_ZC_ABORT_DELAY	(2 * HZ)

static void qp_queue_abort(struct kw_qp *qp)
{
	qp_queue_delayed(qp, &qp->abort_work, KW_ZC_ABORT_DELAY, false);
}

/*
 * A protocol violation was detected locally (receive path or a check in the
 * tx path): queue the Terminate, stop accepting new work, and let tx_work
 * send the Terminate before the QP goes to ERROR.
 */
void kw_qp_fail(struct kw_qp *qp, const struct kw_term *t,
		const u8 *bad, u32 bad_len)
{
	spin_lock_bh(&qp->lock);
	if (qp->state >= KIWARP_QPS_TERMINATE || qp->term_sent.valid) {
		spin_unlock_bh(&qp->lock);
		return;
	}
	term_queue_locked(qp, t, bad, bad_len);
	qp->state = KIWARP_QPS_TERMINATE;
	spin_unlock_bh(&qp->lock);
	pr_debug("qp %u: sending Terminate layer %u type %u code 0x%02x\n",
		 qp->handle, t->layer, t->etype, t->ecode);
	kw_qp_kick_tx(qp);
	qp_queue_abort(qp);	/* if the Terminate cannot get out */
}

/*
 * abort_work: KW_ZC_ABORT_DELAY after the QP failed, a peer with its window
 * shut still holds it up: its Terminate never got into TCP (still
 * TERMINATE: the transmit is stuck behind a message TCP has no room for),
 * or TCP still has unacknowledged data of WRs sent by reference, which are
 * flushed but wait for their pages (flush_locked()). The reset purges
 * TCP's queue, which releases them; the transmit is over (nothing would
 * run it again) and the QP goes to ERROR.
 */
static void abort_work(struct work_struct *w)
{
	struct kw_qp *qp = container_of(to_delayed_work(w), struct kw_qp,
					abort_work);
	bool stuck;

	mutex_lock(&qp->tx_mutex);	/* keeps qp->sock */
	spin_lock_bh(&qp->lock);
	stuck = qp->state == KIWARP_QPS_TERMINATE || qp->term_pending;
	spin_unlock_bh(&qp->lock);
	if (!READ_ONCE(qp->dying) && (stuck || kw_qp_zc_in_tcp(qp))) {
		pr_debug("qp %u: %s after the failure: resetting the stream\n",
			 qp->handle, stuck ? "Terminate still not sent" :
			 "by-reference data still unacknowledged");
		kw_cm_abort(qp);
		kw_tx_abandon(qp);
		spin_lock_bh(&qp->lock);
		qp->term_pending = false;	/* it will never go out */
		spin_unlock_bh(&qp->lock);
	}
	mutex_unlock(&qp->tx_mutex);
	kw_qp_set_error(qp);
	kw_qp_put(qp);	/* the reference qp_queue_abort() took */
}

/* err_work: the QP goes to ERROR and its stream is closed. */
static void qp_error_now(struct kw_qp *qp)
{
	bool term;

	spin_lock_bh(&qp->lock);
	term = qp->term_pending;
	if (!term)
		to_error_locked(qp);
	spin_unlock_bh(&qp->lock);
	if (term) {
		/* tx_work sends the Terminate first and requeues us; a peer
		 * that takes nothing more does not hold that up for long */
		kw_qp_kick_tx(qp);
		qp_queue_abort(qp);
		return;
	}
	mutex_lock(&qp->tx_mutex);	/* keeps qp->sock (see qp.h) */
	kw_cm_shutdown(qp);
	/* nothing more gets into TCP: the message in progress is over */
	kw_tx_abandon(qp);
	mutex_unlock(&qp->tx_mutex);
	if (kw_qp_zc_in_tcp(qp))
		qp_queue_abort(qp);
}

static void err_work(struct work_struct *w)
{
	struct kw_qp *qp = container_of(w, struct kw_qp, err_work);

	/* queued after teardown cancelled us: nothing left to do */
	if (!READ_ONCE(qp->dying))
		qp_error_now(qp);
	kw_qp_put(qp);	/* the reference kw_qp_queue() took */
}

/*
 * Queue one of the QP's work items on wq, on cpu (WORK_CPU_UNBOUND: this
 * one). A queued item holds a QP reference, dropped by the item when it
 * has run (or by teardown if it cancels it), so a work item never outlives
 * the QP even when queued by a racing ioctl.
 */
static void qp_queue_on(struct kw_qp *qp, int cpu,
			struct workqueue_struct *wq, struct work_struct *w)
{
	if (READ_ONCE(qp->dying))
		return;
	kref_get(&qp->ref);
	if (!queue_work_on(cpu, wq, w))
		kw_qp_put(qp);
}

void kw_qp_queue(struct kw_qp *qp, struct work_struct *w)
{
	qp_queue_on(qp, WORK_CPU_UNBOUND, kw_wq, w);
}

/* The same at normal priority (kw_bulk_wq): see kw_tx_work(). */
void kw_qp_queue_bulk(struct kw_qp *qp, struct work_struct *w)
{
	qp_queue_on(qp, WORK_CPU_UNBOUND, kw_bulk_wq, w);
}

void kw_qp_kick_tx(struct kw_qp *qp)
{
	kw_qp_queue(qp, &qp->tx_work);
}

/*
 * The transmit a peer's Read Request asks for: its Response. The request
 * is taken from TCP in whatever context received the segment. An idle
 * CPU (a NIC's interrupt, RPS) or a kernel thread (ksoftirqd, our own
 * worker) queues tx_work on its own CPU, as kw_qp_kick_tx() does. When
 * the receive ran in a user task's time instead (a same-host peer's send
 * runs it inside that system call; a NIC's interrupt may land on a busy
 * CPU), that task would lose its CPU to the worker: on loopback it is the
 * requester, busy-polling for this very Response. So then the worker
 * runs on the CPU where the QP's owner (any holder of its /dev/kiwarp
 * file) last called in (kw_ctx_note_cpu(); a responder's application
 * usually sleeps there). Like any softirq work this is not confined to
 * the owner's current cpuset: the note may be from before a move. 64 B
 * Read latency on loopback 79 -> 41 us (performance.md, "RDMA Read
 * latency"). Before all that, a requester's doorbell whose own send
 * delivered the Request takes the Response over (kw_tx_take_peer()).
 */
void kw_qp_kick_tx_peer(struct kw_qp *qp)
{
	/* the receive path runs with the QP installed: ctx outlives it */
	int cpu = READ_ONCE(qp->ctx->home_cpu);

	/* the requester's own doorbell may send it (tx.c) */
	if (!kw_tx_take_peer(qp, cpu))
		kw_qp_queue_tx_on(qp, cpu);
}

/*
 * tx_work on cpu, the owner's as kw_qp_kick_tx_peer() read it (a QP
 * reference alone does not keep qp->ctx), unless we are a kernel thread or
 * on that CPU already.
 */
void kw_qp_queue_tx_on(struct kw_qp *qp, int cpu)
{
	/* an offline CPU's work would run anywhere: local is as good */
	if ((current->flags & PF_KTHREAD) || cpu == raw_smp_processor_id() ||
	    !cpu_online(cpu))
		cpu = WORK_CPU_UNBOUND;
	qp_queue_on(qp, cpu, kw_wq, &qp->tx_work);
}

/* --------------------------------------------------------------- ioctls */

/* CREATE_QP's arguments as given (reserved fields, flags, sizes) */
static int qp_create_check(const struct kiwarp_create_qp *arg)
{
	if (arg->reserved || arg->handle ||
	    (arg->flags & ~(KIWARP_QP_SIGNAL_ALL | KIWARP_QP_COPY_MAX)) ||
	    (!(arg->flags & KIWARP_QP_COPY_MAX) && arg->copy_max))
		return -EINVAL;
	if (!kw_mem_is_zero(&arg->sq, sizeof(arg->sq)) ||
	    !kw_mem_is_zero(&arg->rq, sizeof(arg->rq)))
		return -EINVAL;
	if (!arg->sq_entries || arg->sq_entries > KW_MAX_QP_WR ||
	    !arg->rq_entries || arg->rq_entries > KW_MAX_QP_WR ||
	    arg->max_sge > KIWARP_MAX_SGE)
		return -EINVAL;
	return 0;
}

/* A new QP with its rings and tables, not yet bound to a PD or CQs */
static struct kw_qp *qp_alloc(struct kw_ctx *ctx,
			      const struct kiwarp_create_qp *arg)
{
	struct kw_qp *qp;
	int ret;

	qp = kzalloc(sizeof(*qp), GFP_KERNEL_ACCOUNT);
	if (!qp)
		return ERR_PTR(-ENOMEM);
	kref_init(&qp->ref);
	spin_lock_init(&qp->lock);
	mutex_init(&qp->cm_lock);
	mutex_init(&qp->tx_mutex);
	INIT_WORK(&qp->tx_work, kw_tx_work);
	INIT_WORK(&qp->tx_bulk_work, kw_tx_bulk_work);
	INIT_WORK(&qp->err_work, err_work);
	INIT_DELAYED_WORK(&qp->abort_work, abort_work);
	INIT_DELAYED_WORK(&qp->read_work, read_work);
	qp->ctx = ctx;
	qp->state = KIWARP_QPS_IDLE;
	qp->sig_all = arg->flags & KIWARP_QP_SIGNAL_ALL;
	qp->max_sge = arg->max_sge ? arg->max_sge : 1;
	qp->copy_max = arg->flags & KIWARP_QP_COPY_MAX ? arg->copy_max :
		       KIWARP_COPY_MAX_DEFAULT;
	qp->copy_adapt = !(arg->flags & KIWARP_QP_COPY_MAX);

	/* Ring memory is charged to the creator's RLIMIT_MEMLOCK and memcg,
	 * as the CQ's (cq.c, umem.c). */
	ret = ring_alloc(&qp->sq, arg->sq_entries);
	if (ret)
		goto err_free;
	ret = ring_alloc(&qp->rq, arg->rq_entries);
	if (ret)
		goto err_free;
	ret = -ENOMEM;
	qp->sq_wr = kvcalloc(qp->sq.entries, sizeof(*qp->sq_wr),
			     GFP_KERNEL_ACCOUNT);
	qp->rq_wr = kvcalloc(qp->rq.entries, sizeof(*qp->rq_wr),
			     GFP_KERNEL_ACCOUNT);
	qp->orq = kcalloc(KW_MAX_ORD, sizeof(*qp->orq), GFP_KERNEL_ACCOUNT);
	qp->irq = kcalloc(KW_MAX_IRD, sizeof(*qp->irq), GFP_KERNEL_ACCOUNT);
	if (!qp->sq_wr || !qp->rq_wr || !qp->orq || !qp->irq)
		goto err_free;
	qp->orq_size = KW_MAX_ORD;
	qp->irq_size = KW_MAX_IRD;
	return qp;

err_free:
	kw_qp_put(qp);
	return ERR_PTR(ret);
}

int kw_qp_create(struct kw_ctx *ctx, struct kiwarp_create_qp *arg)
{
	struct kw_pd *pd;
	struct kw_cq *scq, *rcq;
	struct kw_qp *qp;
	u32 id;
	int ret;

	/* ORQ/IRQ slots are indexed with a mask */
	BUILD_BUG_ON(KW_MAX_ORD & (KW_MAX_ORD - 1));
	BUILD_BUG_ON(KW_MAX_IRD & (KW_MAX_IRD - 1));

	ret = qp_create_check(arg);
	if (ret)
		return ret;
	qp = qp_alloc(ctx, arg);
	if (IS_ERR(qp))
		return PTR_ERR(qp);

	mutex_lock(&ctx->lock);
	ret = -EINVAL;
	pd = kw_pd_lookup(ctx, arg->pd);
	scq = kw_cq_lookup(ctx, arg->send_cq);
	rcq = kw_cq_lookup(ctx, arg->recv_cq);
	if (!pd || !scq || !rcq)
		goto err_unlock;
	/*
	 * Reserve the handle, set up everything, then publish: kw_qp_get()
	 * and mmap look QPs up without ctx->lock, so a QP must be complete
	 * when it becomes visible, and may be destroyed (and freed) by
	 * another thread at once after, so qp is not touched again.
	 */
	ret = xa_alloc(&ctx->qps, &id, NULL, XA_LIMIT(1, KW_MAX_QP),
		       GFP_KERNEL_ACCOUNT);
	if (ret) {
		ret = ret == -EBUSY ? -ENOSPC : ret;
		goto err_unlock;
	}
	qp->handle = id;
	qp->pd = pd;
	qp->pd_id = pd->id;
	/* the QP's references: its CQs are never freed under it */
	kw_cq_get(scq);
	kw_cq_get(rcq);
	qp->scq = scq;
	qp->rcq = rcq;
	pd->users++;
	scq->users++;
	rcq->users++;
	arg->handle = id;
	ring_info(&qp->sq, KW_MMAP_SQ, id, &arg->sq);
	ring_info(&qp->rq, KW_MMAP_RQ, id, &arg->rq);
	/* cannot fail: the slot is reserved, nothing is allocated */
	WARN_ON(xa_err(xa_store(&ctx->qps, id, qp, GFP_KERNEL_ACCOUNT)));
	mutex_unlock(&ctx->lock);
	return 0;

err_unlock:
	mutex_unlock(&ctx->lock);
	kw_qp_put(qp);
	return ret;
}

/*
 * Teardown, our stream reset or closed and the transmit's own references
 * dropped: wait, until end at most, until no skb holds the pages of a
 * send WR any more, so that once flushed the buffers are the
 * application's, as an RNIC's destroy ends its DMA. TCP let go of them,
 * but a clone may still be in a qdisc, a NIC's ring or a CPU's backlog
 * (a held WR: its ubuf tells, kw_qp_wr_released()), or in the receive of
 * a peer on this host (await_read: wr_read()). Completions meanwhile go
 * to the CQs as usual; nothing is queued (dying).
 */
static void qp_await_pages(struct kw_qp *qp, unsigned long end)
{
	bool out;
	u32 i;

	for (;;) {
		out = false;
		spin_lock_bh(&qp->lock);
		for (i = qp->sq_compl; i != qp->sq_pulled && !out; i++) {
			struct kw_wr *wr = &qp->sq_wr[i & (qp->sq.entries - 1)];

			out = wr->held ||
			      (wr->await_read && !wr_read(qp, wr, true));
		}
		spin_unlock_bh(&qp->lock);
		if (!out || time_after(jiffies, end))
			break;
		schedule_timeout_uninterruptible(1);
	}
}

/*
 * Destroy a QP the caller has removed from ctx->qps, in two halves: the
 * stream ends in the first, the second waits for its pages (until end,
 * qp_await_pages()), so that a context's QPs all end theirs before the
 * first wait and share one deadline. Other threads may still hold
 * references (a doorbell or CM ioctl in progress, a queued work item):
 * from the moment dying is set under qp->lock none of them starts
 * anything new, and after the flush the QP posts nothing more to its CQs
 * (cq_detached), so the CQs can be destroyed as soon as the second half
 * returns.
 */
static void qp_teardown_start(struct kw_qp *qp)
{
	spin_lock_bh(&qp->lock);
	WRITE_ONCE(qp->dying, true);
	spin_unlock_bh(&qp->lock);

	/* A CONNECT/ACCEPT blocked in the MPA exchange holds cm_lock: wake
	 * it (its socket calls fail), so that we never wait on the peer. */
	mutex_lock(&qp->tx_mutex);
	kw_cm_abort_setup(qp);
	mutex_unlock(&qp->tx_mutex);

	mutex_lock(&qp->cm_lock);
	/* No receive callback runs after this returns. */
	kw_cm_uninstall(qp);
	/*
	 * Each of the two queues the other, hence tx_work twice. An item
	 * queued later still (by a caller that read dying just before it was
	 * set, then was preempted) holds its QP reference and does nothing:
	 * __tx_run() reads dying under tx_mutex, taken below after it was set.
	 */
	if (cancel_work_sync(&qp->tx_work))
		kw_qp_put(qp);	/* it was queued, holding a reference */
	if (cancel_work_sync(&qp->tx_bulk_work))
		kw_qp_put(qp);
	if (cancel_work_sync(&qp->tx_work))
		kw_qp_put(qp);
	if (cancel_work_sync(&qp->err_work))
		kw_qp_put(qp);
	/* after err_work, which queues it; kw_cm_release_sock() resets */
	if (cancel_delayed_work_sync(&qp->abort_work))
		kw_qp_put(qp);
	if (cancel_delayed_work_sync(&qp->read_work))
		kw_qp_put(qp);
	/* waits for an inline transmit in a racing doorbell */
	mutex_lock(&qp->tx_mutex);
	kw_cm_release_sock(qp);
	kw_tx_abandon(qp);	/* our own ubuf reference */
	mutex_unlock(&qp->tx_mutex);
	mutex_unlock(&qp->cm_lock);
}

static void qp_teardown_finish(struct kw_qp *qp, unsigned long end)
{
	struct kw_ctx *ctx = qp->ctx;
	u32 i;

	qp_await_pages(qp, end);

	/* skbs still in flight: their release no longer reaches the QP */
	kw_tx_zc_detach(qp);
	spin_lock_bh(&qp->lock);
	qp->state = KIWARP_QPS_ERROR;
	sq_pull_locked(qp);
	/* what qp_await_pages() gave up on */
	for (i = qp->sq_compl; i != qp->sq_pulled; i++) {
		qp->sq_wr[i & (qp->sq.entries - 1)].held = false;
		qp->sq_wr[i & (qp->sq.entries - 1)].await_read = false;
	}
	flush_locked(qp);
	qp->cq_detached = true;
	spin_unlock_bh(&qp->lock);
	kw_rx_release(qp);
	kw_tx_release(qp);

	mutex_lock(&ctx->lock);
	qp->pd->users--;
	qp->scq->users--;
	qp->rcq->users--;
	mutex_unlock(&ctx->lock);
	kw_qp_put(qp);
}

int kw_qp_destroy(struct kw_ctx *ctx, struct kiwarp_handle *arg)
{
	struct kw_qp *qp;

	if (arg->reserved)
		return -EINVAL;
	qp = xa_erase(&ctx->qps, arg->handle);
	if (!qp)
		return -EINVAL;
	qp_teardown_start(qp);
	qp_teardown_finish(qp, jiffies + KW_PAGES_WAIT);
	return 0;
}

void kw_qp_destroy_all(struct kw_ctx *ctx)
{
	LIST_HEAD(dying);
	struct kw_qp *qp, *next;
	unsigned long id, end;

	xa_for_each(&ctx->qps, id, qp) {
		xa_erase(&ctx->qps, id);
		qp_teardown_start(qp);
		list_add_tail(&qp->dying_node, &dying);
	}
	end = jiffies + KW_PAGES_WAIT;
	list_for_each_entry_safe(qp, next, &dying, dying_node) {
		list_del(&qp->dying_node);
		qp_teardown_finish(qp, end);
	}
}

int kw_qp_doorbell(struct kw_ctx *ctx, struct kiwarp_handle *arg)
{
	struct kw_qp *qp;
	int ret = 0;
	bool kick;

	if (arg->reserved)
		return -EINVAL;
	qp = kw_qp_get(ctx, arg->handle);
	if (!qp)
		return -EINVAL;

	spin_lock_bh(&qp->lock);
	if (qp->dying) {
		/* lost a race with DESTROY_QP: the handle is gone */
		spin_unlock_bh(&qp->lock);
		ret = -EINVAL;
		goto out;
	}
	ret = sq_pull_locked(qp);
	/* The RQ index is taken later (receive path), but checked now. */
	if (ret >= 0 && ring_new_entries(smp_load_acquire(qp->rq.prod),
					 qp->rq_pulled, qp->rq_compl,
					 qp->rq.entries) < 0)
		ret = -EINVAL;
	if (ret < 0) {
		bool changed = to_error_locked(qp);

		spin_unlock_bh(&qp->lock);
		if (changed)
			kw_qp_queue(qp, &qp->err_work);
		goto out;
	}
	kick = ret > 0;
	ret = 0;
	if (qp->state == KIWARP_QPS_ERROR) {
		/* Posted to a dead QP: flush at once. */
		flush_locked(qp);
		kick = false;
	} else {
		/* WRs that failed validation complete (in order) now. */
		sq_complete_locked(qp);
	}
	spin_unlock_bh(&qp->lock);
	if (kick)
		kw_tx_inline(qp);
out:
	kw_qp_put(qp);
	return ret;
}

int kw_qp_query(struct kw_ctx *ctx, struct kiwarp_query_qp *arg)
{
	struct kw_qp *qp;
	u32 handle = arg->qp;

	if (arg->copy_max || arg->peer_ird || arg->peer_ord ||
	    arg->flags || arg->ooo_bytes)
		return -EINVAL;
	qp = kw_qp_get(ctx, handle);
	if (!qp)
		return -EINVAL;
	memset(arg, 0, sizeof(*arg));
	arg->qp = handle;
	spin_lock_bh(&qp->lock);
	arg->state = qp->state;
	kw_cm_result_param(&qp->mpa, &arg->param);
	arg->term_sent = qp->term_sent;
	arg->term_rcvd = qp->term_rcvd;
	arg->peer_ird = qp->mpa.peer_ird;
	arg->peer_ord = qp->mpa.peer_ord;
	arg->mulpdu = kw_qp_mulpdu(qp);
	arg->copy_max = qp->copy_max;
	if (kw_tx_path_copies(qp))
		arg->flags |= KIWARP_QPQ_TX_COPIED;
	if (qp->tx_local_last)
		arg->flags |= KIWARP_QPQ_TX_LOCAL;
	arg->tx_bytes = qp->tx_bytes;
	arg->rx_bytes = qp->rx_bytes;
	if (READ_ONCE(qp->ooo))
		arg->flags |= KIWARP_QPQ_OOO;
	arg->ooo_bytes = qp->ooo_bytes;
	spin_unlock_bh(&qp->lock);
	kw_qp_put(qp);
	return 0;
}

int kw_qp_modify(struct kw_ctx *ctx, struct kiwarp_modify_qp *arg)
{
	struct kw_qp *qp;

	if (arg->action != KIWARP_MODIFY_ERROR &&
	    arg->action != KIWARP_MODIFY_CLOSE)
		return -EINVAL;
	qp = kw_qp_get(ctx, arg->qp);
	if (!qp)
		return -EINVAL;
	if (arg->action == KIWARP_MODIFY_ERROR) {
		kw_qp_set_error(qp);
	} else {
		spin_lock_bh(&qp->lock);
		if (qp->state == KIWARP_QPS_RTS)
			qp->state = KIWARP_QPS_CLOSING;
		spin_unlock_bh(&qp->lock);
		kw_qp_kick_tx(qp);
	}
	kw_qp_put(qp);
	return 0;
}

int kw_qp_mmap(struct kw_ctx *ctx, u32 handle, enum kw_mmap_kind kind,
	       struct vm_area_struct *vma)
{
	struct kw_qp *qp = kw_qp_get(ctx, handle);
	int ret;

	if (!qp)
		return -EINVAL;
	ret = kw_umem_mmap(kind == KW_MMAP_SQ ? qp->sq.umem : qp->rq.umem, vma);
	kw_qp_put(qp);
	return ret;
}

int kw_qp_init(void)
{
	/*
	 * Per-CPU: a work item runs on the CPU that queued it, which is the
	 * CPU that just processed the ACK (sk_write_space), the peer's
	 * request (receive) or the doorbell: the socket is hot in its cache,
	 * and a connection's work stays on its own side of the host's CPUs
	 * instead of landing wherever the scheduler finds idle time.
	 *
	 * High priority: transmission is what a NIC does for the application,
	 * and RDMA applications busy-poll their CQs. At normal priority the
	 * worker that continues a transmit after TCP had no room shared its
	 * CPU with the polling thread, halving the rate of large transfers.
	 * (nvme-tcp's io_work runs the same way: per CPU, WQ_HIGHPRI.) A long
	 * transmit alternates between the two (kw_tx_work()). Per CPU for both:
	 * an unbound normal-priority queue, which lets the scheduler pick an
	 * idle CPU, sped up Writes to a receiver that sleeps, but slowed
	 * Sends, whose receiving application polls on the other CPU.
	 */
	kw_wq = alloc_workqueue("kiwarp", WQ_PERCPU | WQ_HIGHPRI |
			       WQ_MEM_RECLAIM, 0);
	if (!kw_wq)
		return -ENOMEM;
	kw_bulk_wq = alloc_workqueue("kiwarp_bulk", WQ_PERCPU |
				     WQ_MEM_RECLAIM, 0);
	if (!kw_bulk_wq) {
		destroy_workqueue(kw_wq);
		return -ENOMEM;
	}
	return 0;
}

void kw_qp_exit(void)
{
	destroy_workqueue(kw_bulk_wq);
	destroy_workqueue(kw_wq);
	kw_cm_exit();
}
