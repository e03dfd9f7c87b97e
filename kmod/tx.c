// SPDX-License-Identifier: GPL-2.0
/*
 * Transmit path: every byte the QP emits is sent under qp->tx_mutex, by
 * the doorbell ioctl inline or by the QP's work item. The
 * core (ddp.c) cuts each RDMAP message into FPDUs and gives us header and
 * trailer bytes; payload goes to TCP straight from the pinned pages, which
 * the skb frags then reference (TCP holds its own page references until
 * the data is acknowledged).
 *
 * FPDUs go to TCP in batches (tx_fill()): up to KW_TX_BATCH_FPDUS of one
 * message in a bvec of header/trailer fragments (page_frag, see
 * tx_batch_glue()) and payload pages, handed over in one call whatever the
 * MTU makes the FPDU size. Two kernel interfaces do that (kcompat.h):
 *
 *  - MSG_SPLICE_PAGES (6.5 on): one sendmsg() over the bvec. Only pages
 *    TCP may take references on can be spliced (sendpage_ok(): no slab);
 *    a batch with another page is sent by copy instead.
 *  - sendpage (up to 6.4): tcp_sendpage_locked() per entry under one
 *    socket lock, MSG_SENDPAGE_NOTLAST on all but the last.
 *
 * Either way, Read Response payload is copied (tx_stream_fpdu()): its FPDUs
 * are built whole, as one byte stream, in stream pages of the QP (see
 * "Stream pages": reused once no skb holds them), at most KW_TX_RESP_BATCH
 * bytes at a time, and TCP takes those pages by reference like any other:
 * one copy, and a few page-sized fragments per batch instead of two or
 * three per FPDU. So is a copied SQ message of KW_TX_STREAM_MIN bytes or
 * more (tx_sq_data()); a smaller one TCP copies as it takes the batch.
 *
 * All socket calls are non-blocking: on -EAGAIN we keep the batch and how
 * many of its bytes TCP accepted, and sk_write_space requeues the work.
 *
 * When a WR sent by reference is done with its pages: TCP's ACK is not
 * enough. A receiver on the same host (loopback, veth) queues the very
 * skbs we built, frags and all, and TCP acknowledges them there whether or
 * not anybody reads them: a peer that leaves its socket unread would read
 * the buffer as the application rewrote it after the completion. So such
 * a WR's batches go with MSG_ZEROCOPY and a ubuf_info of its own (struct
 * kw_txzc, as io_uring's zero-copy send does), which TCP links to every
 * skb that carries its pages. Local delivery copies those frags
 * (skb_orphan_frags_rx()) and lets ours go; the ubuf's last reference goes
 * with the last skb, acknowledged or purged. Until then the WR is held
 * (kw_wr.held): its completion, and its MR references, wait.
 *
 * Kernel memory whose owner never rewrites what an skb may still hold
 * (kw_mr.tx_guarded: an extended socket's send buffer, es.c) needs none
 * of that: its pages go by plain reference (sendpage, MSG_SPLICE_PAGES),
 * with no ubuf, so a local receiver takes them as they are instead of
 * copying them, and the WR completes as soon as TCP has them.
 *
 * Nor does a WR to a kiwarp QP on this host (tx_local_peer()): its pages
 * go by plain reference too, and the peer's receive places its payload
 * straight from them, in the softirq that received them: one copy in all,
 * where the ubuf's would make the stack copy them first. Such a WR
 * (kw_wr.await_read) completes once TCP saw it acknowledged and the
 * peer's socket has read all of it (copied_seq), so no skb holds its
 * pages for a reader any more; or once that socket is closed, or, after
 * our stream ended, once its TCP can take nothing more of it in (qp.c,
 * wr_read()).
 *
 * Order of service: a pending Terminate, the initiator's RTR, then Read
 * Responses (IRQ) before new send WRs, one whole message at a time.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/highmem.h>
#include <linux/jhash.h>
#include <linux/module.h>
#include <linux/net.h>
#include <linux/sched/mm.h>
#include <net/inet6_hashtables.h>
#include <net/inet_hashtables.h>
#include <net/ipv6.h>
#include <net/sock.h>
#include <net/tcp.h>

#include "qp.h"

#define KW_RTR_STAG	1	/* what siw and hardware RNICs put in an RTR */

static void tx_zc_end(struct kw_qp *qp);
static void tx_pool_free(struct kw_qp *qp);
static struct mem_cgroup *tx_charge_to(const struct sock *sk);

/* how long a QP copies after the stack copied its pages: txzc_complete() */
#define KW_TX_HOLD_MIN	HZ
#define KW_TX_HOLD_MAX	(64 * HZ)

/* The message is over (sent or abandoned): our references go. */
static void tx_drop_refs(struct kw_qp *qp)
{
	kw_mr_put_array(qp->tx_mr, KIWARP_MAX_SGE);
	qp->tx_nsge = 0;
	tx_zc_end(qp);
}

/* Forget the batch and drop our references on its fragments. */
static void tx_batch_reset(struct kw_qp *qp)
{
	u32 i;

	for (i = 0; i < qp->tx_nfrags; i++)
		page_frag_free(qp->tx_frags[i]);
	qp->tx_nfrags = 0;
	qp->tx_nglue = 0;
	qp->tx_nbv = 0;
	qp->tx_batch_len = 0;
	qp->tx_batch_sent = 0;
	qp->tx_batch_copy = false;
	qp->tx_trl_len = 0;
	qp->tx_chunk_bv = false;	/* tx_chunk itself stays (tx_stream_room) */
}

/*
 * The ubufs of by-reference WRs. A kw_txzc lives until its last reference:
 * ours while the message is transmitted (tx_zc_end()), and one for each
 * skb TCP built on its pages; it keeps the QP's kw_zcd, which outlives the
 * QP as long as any skb does. zcd->lock: the QP pointer (NULL once the QP
 * is torn down, kw_tx_zc_detach()); taken before qp->lock, in the
 * callback's context (softirq, under the socket's lock, or process).
 */
struct kw_zcd {
	refcount_t ref;
	spinlock_t lock;
	struct kw_qp *qp;
	/*
	 * The stack copied our pages, last at copied_at; the QP copies
	 * until copied_at + hold (txzc_complete(), kw_tx_path_copies()).
	 * hold 0: never told so.
	 */
	unsigned long copied_at;
	unsigned long hold;
	/* the QP's peer, and what was last noted for it (under lock) */
	struct kw_path path;
	unsigned long noted_at, noted_hold;
};

struct kw_txzc {
	struct ubuf_info ubuf;
	struct kw_zcd *zcd;
	u32 sq_idx;			/* its WR, held until we are done */
	struct work_struct work;	/* txzc_done() in kw_wq */
};

/*
 * Path hints. What one QP learns from its ubufs' releases (the stack
 * copied its pages: a peer on this host, a capture on the NIC) is as true
 * for the other QPs to the same peer, and each QP learned it by sending a
 * message by reference first: 1000 QPs of one context to one local peer
 * sent about half of their messages that way (performance.md, "Many
 * QPs"). So a context (an open /dev/kiwarp) also keeps what its QPs were
 * told per peer, (network namespace, bound device, address), in a small
 * direct-mapped table, and a QP with no hold of its own in force follows
 * its peer's entry (kw_tx_path_copies()). When the entry runs out, the
 * next message probes, as with a QP's own hold.
 *
 * Per context, not per host: a table shared by all users would let one
 * watch another's traffic through its slots (evictions, entries it never
 * wrote), and let a user steer how others transmit. An extended socket's
 * context has one QP and no table.
 *
 * Lossy by design: a peer hashing to a taken slot takes it over. A wrong
 * entry costs a copy where a reference would have done, for at most
 * KW_TX_HOLD_MAX; copying is always correct.
 *
 * Lifetime: the context's, allocated when its first QP takes a socket
 * (kw_paths_alloc(), process context, charged) and freed with it. Entries
 * are written in txzc_done() only while the kw_zcd still has its QP
 * (under zcd->lock, which kw_tx_zc_detach() takes to clear zcd->qp before
 * the QP, and so the context, can go): zcd->lock -> paths->lock, a leaf.
 * Readers hold qp->lock (so BH is off and no writer, all in softirq or
 * with BH off, runs on the reader's CPU inside the read: a writer that
 * interrupted a reader would only make it retry, a reader that
 * interrupted a writer would spin forever).
 */
#define KW_PATH_SLOTS	64

struct kw_path_slot {
	struct kw_path key;
	unsigned long copied_at, hold;	/* as struct kw_zcd; hold 0: empty */
};

struct kw_paths {
	seqlock_t lock;
	struct kw_path_slot slot[KW_PATH_SLOTS];
};

static u32 kw_path_seed __read_mostly;

/* Whether a hold from "at" still runs (in range, not before: jiffies wrap
 * on 32-bit); hold 0: none */
static bool hold_in_force(unsigned long at, unsigned long hold)
{
	return hold && time_in_range(jiffies, at, at + hold);
}

/*
 * sk's local (or remote) address as an IPv6 one: an AF_INET socket's
 * IPv4-mapped, as an AF_INET6 socket on an IPv4 connection has it.
 */
static void tx_sk_addr6(const struct sock *sk, bool local,
			struct in6_addr *a)
{
#if IS_ENABLED(CONFIG_IPV6)
	if (sk->sk_family == AF_INET6) {
		*a = local ? sk->sk_v6_rcv_saddr : sk->sk_v6_daddr;
		return;
	}
#endif
	ipv6_addr_set_v4mapped(local ? sk->sk_rcv_saddr : sk->sk_daddr, a);
}

/*
 * Is b the other end of a's TCP connection on this host? Addresses compare
 * as IPv6 ones (tx_sk_addr6()), so that an AF_INET6 socket on an IPv4
 * connection (a dual-stack listener's child) matches its AF_INET peer.
 */
static bool tx_sk_is_peer(const struct sock *a, const struct sock *b)
{
	struct in6_addr al, ar, bl, br;

	if (!net_eq(sock_net(a), sock_net(b)) ||
	    inet_sk(a)->inet_sport != inet_sk(b)->inet_dport ||
	    inet_sk(a)->inet_dport != inet_sk(b)->inet_sport)
		return false;
	tx_sk_addr6(a, true, &al);
	tx_sk_addr6(a, false, &ar);
	tx_sk_addr6(b, true, &bl);
	tx_sk_addr6(b, false, &br);
	return ipv6_addr_equal(&al, &br) && ipv6_addr_equal(&ar, &bl);
}

/* The peer of sk, whose QP is being attached. Process context. */
void kw_path_init(struct kw_path *p, struct sock *sk)
{
	u32 h;

	get_random_once(&kw_path_seed, sizeof(kw_path_seed));
	memset(p, 0, sizeof(*p));
	p->net = sock_net(sk)->net_cookie;
	p->ifindex = READ_ONCE(sk->sk_bound_dev_if);
	tx_sk_addr6(sk, false, &p->addr);
	h = jhash2((const u32 *)&p->addr, 4, kw_path_seed ^ p->ifindex);
	p->slot = jhash_2words((u32)p->net, (u32)(p->net >> 32), h) %
		  KW_PATH_SLOTS;
	p->set = true;
}

/*
 * The context's table, if it has none yet (a QP takes its socket; process
 * context). Failing leaves the context without hints: nothing else
 * changes.
 */
void kw_paths_alloc(struct kw_ctx *ctx)
{
	struct kw_paths *t;

	if (READ_ONCE(ctx->paths) || ctx->one_qp)
		return;
	t = kzalloc(sizeof(*t), GFP_KERNEL_ACCOUNT | __GFP_NOWARN);
	if (!t)
		return;
	seqlock_init(&t->lock);
	/* QPs of one context take their sockets concurrently */
	if (cmpxchg(&ctx->paths, NULL, t))
		kfree(t);
}

/* With the context, after its QPs (kw_ctx_free()). */
void kw_paths_free(struct kw_paths *t)
{
	kfree(t);
}

static bool path_eq(const struct kw_path *a, const struct kw_path *b)
{
	return a->net == b->net && a->ifindex == b->ifindex &&
	       ipv6_addr_equal(&a->addr, &b->addr);
}

/*
 * A QP's stack copied its pages, last at "at", and the QP holds for
 * "hold". Reports come in any order from several CPUs: an earlier one
 * changes nothing, and only one after the entry ran out doubles it (the
 * answer to a probe). An entry that ran out long ago starts afresh.
 */
static void path_note(struct kw_paths *t, const struct kw_path *p,
		      unsigned long at, unsigned long hold)
{
	struct kw_path_slot *s = &t->slot[p->slot];
	unsigned long end;

	write_seqlock_bh(&t->lock);
	end = s->copied_at + s->hold;
	if (!s->hold || !path_eq(&s->key, p) ||
	    time_after(at, end + KW_TX_HOLD_MAX)) {
		s->key = *p;
		s->hold = hold;
		s->copied_at = at;
	} else if (time_after_eq(at, s->copied_at)) {
		if (time_after(at, end) && s->hold < KW_TX_HOLD_MAX)
			s->hold *= 2;
		s->hold = max(s->hold, hold);
		s->copied_at = at;
	}
	write_sequnlock_bh(&t->lock);
}

/* Whether qp's peer's entry in its context says its stack copies, now. */
static bool path_copies(struct kw_qp *qp)
{
	const struct kw_paths *t = READ_ONCE(qp->ctx->paths);
	const struct kw_path *p = &qp->path;
	const struct kw_path_slot *s;
	unsigned long at, hold;
	unsigned int seq;
	bool match;

	lockdep_assert_held(&qp->lock);
	if (!t || !p->set)
		return false;
	s = &t->slot[p->slot];
	do {
		seq = read_seqbegin(&t->lock);
		match = path_eq(&s->key, p);
		at = s->copied_at;
		hold = s->hold;
	} while (read_seqretry(&t->lock, seq));
	return match && hold_in_force(at, hold);
}

static void zcd_put(struct kw_zcd *d)
{
	if (refcount_dec_and_test(&d->ref))
		kfree(d);
}

/*
 * Each kw_txzc holds a module reference: skbs may outlive the QP, its
 * socket (an orphan retransmitting) and every open file, and their free
 * calls us. rmmod says the module is busy until the last one is gone.
 * The module_put() is our last statement, but returning still runs our
 * text: txzc_complete() calls us only as an RCU reader (softirq, or BH
 * off), which module unload waits for (synchronize_rcu() before the text
 * is freed), or from kw_wq, which module exit destroys, waiting for the
 * running item.
 */
static void txzc_done(struct kw_txzc *z)
{
	struct kw_zcd *d = z->zcd;
	unsigned long at, hold;

	spin_lock_bh(&d->lock);
	if (d->qp) {
		struct kw_paths *t = READ_ONCE(d->qp->ctx->paths);

		/*
		 * What the skbs' releases told, for the other QPs of the
		 * context (path hints), before the WR completes: whoever
		 * sees the completion finds the hint in place.
		 */
		at = READ_ONCE(d->copied_at);
		hold = READ_ONCE(d->hold);
		if (t && hold &&
		    (at != d->noted_at || hold != d->noted_hold)) {
			path_note(t, &d->path, at, hold);
			d->noted_at = at;
			d->noted_hold = hold;
		}
		kw_qp_wr_released(d->qp, z->sq_idx);
	}
	spin_unlock_bh(&d->lock);
	zcd_put(d);
	kfree(z);
	module_put(THIS_MODULE);
}

static void txzc_work(struct work_struct *w)
{
	txzc_done(container_of(w, struct kw_txzc, work));
}

/* TCP (or we) dropped a reference: the last one releases the WR. */
static void txzc_complete(struct sk_buff *skb, struct ubuf_info *uarg,
			  bool zerocopy_success)
{
	struct kw_txzc *z = container_of(uarg, struct kw_txzc, ubuf);

	/*
	 * !zerocopy_success: this skb's frags were copied before it let
	 * our pages go (skb_copy_ubufs() on local delivery, or a linearize
	 * for a device that cannot gather), as MSG_ZEROCOPY reports with
	 * SO_EE_CODE_ZEROCOPY_COPIED. Then the pages cost a copy anyway,
	 * and a later one on the receiver's CPU, in softirq, into freshly
	 * allocated pages: the QP copies for a while (kw_tx_path_copies()).
	 * false always means copied (the converse does not hold: a copy for
	 * software segmentation reports success).
	 * Measured on veth and loopback: 1.5-3x the bandwidth of by
	 * reference, at a fraction of the CPU (performance.md).
	 *
	 * The while: KW_TX_HOLD_MIN after the first report; a report that
	 * comes after it ran out answers a probe (a message sent by
	 * reference again), and doubles it, up to KW_TX_HOLD_MAX. A slow
	 * QP among many (1000 QPs sharing a link) would otherwise send
	 * most of its messages as probes. Racing callbacks may double it
	 * twice: harmless.
	 */
	if (skb && !zerocopy_success) {
		struct kw_zcd *d = z->zcd;
		unsigned long now = jiffies, at = READ_ONCE(d->copied_at);
		unsigned long hold = READ_ONCE(d->hold);

		if (!hold) {
			hold = KW_TX_HOLD_MIN;
			WRITE_ONCE(d->hold, hold);
		} else if (!time_in_range(now, at, at + hold) &&
			   hold < KW_TX_HOLD_MAX) {
			hold *= 2;
			WRITE_ONCE(d->hold, hold);
		}
		if (at != now)
			WRITE_ONCE(d->copied_at, now);
	}
	if (!refcount_dec_and_test(&uarg->refcnt))
		return;
	/* skbs are freed in any context: see txzc_done() for why not here */
	if (!in_softirq() || in_hardirq() || irqs_disabled())
		queue_work(kw_wq, &z->work);
	else
		txzc_done(z);
}

#ifdef KW_HAVE_UBUF_INFO_OPS
static const struct ubuf_info_ops txzc_ops = {
	.complete = txzc_complete,
};
#endif

/*
 * A ubuf for the WR at idx that is about to go by reference; NULL (the
 * WR is copied instead) if memory is short. qp->lock held.
 */
static struct kw_txzc *txzc_new(struct kw_qp *qp, u32 idx)
{
	struct kw_txzc *z;

	lockdep_assert_held(&qp->lock);
	if (!qp->zcd) {
		qp->zcd = kzalloc(sizeof(*qp->zcd), GFP_ATOMIC);
		if (!qp->zcd)
			return NULL;
		refcount_set(&qp->zcd->ref, 1);	/* the QP's */
		spin_lock_init(&qp->zcd->lock);
		qp->zcd->qp = qp;
		qp->zcd->path = qp->path;
	}
	z = kzalloc(sizeof(*z), GFP_ATOMIC);
	if (!z)
		return NULL;
#ifdef KW_HAVE_UBUF_INFO_OPS
	z->ubuf.ops = &txzc_ops;
#else
	z->ubuf.callback = txzc_complete;
#endif
	refcount_set(&z->ubuf.refcnt, 1);	/* ours, while sending */
	/*
	 * As MSG_ZEROCOPY's own: without DONT_ORPHAN, the clone TCP makes
	 * of every skb it sends (skb_clone() -> skb_orphan_frags()) copied
	 * the frags at once, cleared the pure-zerocopy flag of skbs whose
	 * frags TCP never charged, and their free then uncharged what was
	 * never charged (page_counter underflow, sk_forward_alloc at
	 * destruction). Local delivery copies all the same
	 * (skb_orphan_frags_rx() ignores DONT_ORPHAN).
	 */
	z->ubuf.flags = SKBFL_ZEROCOPY_FRAG | SKBFL_DONT_ORPHAN;
	__module_get(THIS_MODULE);	/* we run: the module is live */
	refcount_inc(&qp->zcd->ref);
	z->zcd = qp->zcd;
	z->sq_idx = idx;
	INIT_WORK(&z->work, txzc_work);
	return z;
}

/*
 * Whether this connection's stack copied what we sent by reference
 * lately (txzc_complete(): within the hold after its last report): then
 * Sends and Writes are copied, unless the QP was given its copy_max
 * (KIWARP_QP_COPY_MAX). A local peer stays local, but a packet socket on
 * a NIC copies too (dev_queue_xmit_nit()), and that can end: when the
 * hold runs out one message goes by reference again and tells.
 * qp->lock held (qp->zcd).
 */
bool kw_tx_path_copies(struct kw_qp *qp)
{
	struct kw_zcd *d = qp->zcd;

	lockdep_assert_held(&qp->lock);
	if (d && hold_in_force(READ_ONCE(d->copied_at), READ_ONCE(d->hold)))
		return true;
	/* what other QPs to the same peer were told (path hints, above) */
	return path_copies(qp);
}

/* Drop our ubuf reference (tx_drop_refs()). Not under qp->lock. */
static void tx_zc_end(struct kw_qp *qp)
{
	struct kw_txzc *z = qp->tx_zc;

	if (!z)
		return;
	qp->tx_zc = NULL;
	txzc_complete(NULL, &z->ubuf, true);
}

/*
 * Teardown, after the transmit stopped: the QP is about to go; callbacks
 * of skbs still in flight find no QP from now on.
 */
void kw_tx_zc_detach(struct kw_qp *qp)
{
	struct kw_zcd *d = qp->zcd;

	if (!d)
		return;
	spin_lock_bh(&d->lock);
	d->qp = NULL;
	spin_unlock_bh(&d->lock);
	/* QUERY_QP, racing with destroy, reads it under qp->lock */
	spin_lock_bh(&qp->lock);
	qp->zcd = NULL;
	spin_unlock_bh(&qp->lock);
	zcd_put(d);
}

/* Teardown: tx_work and tx_bulk_work are cancelled; drop what the cursor
 * still holds. */
void kw_tx_release(struct kw_qp *qp)
{
	tx_batch_reset(qp);
	if (qp->tx_chunk)
		page_frag_free(qp->tx_chunk);
	qp->tx_chunk = NULL;
	qp->tx_chunk_len = 0;
	qp->tx_chunk_size = 0;
	tx_pool_free(qp);
	kw_page_frag_cache_drain(&qp->tx_frag_cache);
	tx_drop_refs(qp);
	qp->tx_active = false;
}

/*
 * Drop the message in progress, which can never be finished (a transmit
 * that failed, a stream shut down), and our references: a WR sent by
 * reference waits for our ubuf reference too.
 */
static void tx_abandon(struct kw_qp *qp)
{
	lockdep_assert_held(&qp->tx_mutex);
	spin_lock_bh(&qp->lock);
	qp->tx_active = false;
	qp->tx_kind = KW_TXK_NONE;
	spin_unlock_bh(&qp->lock);
	/* markers: the stream is where TCP has it (a Terminate may follow
	 * a batch that failed to build, as after a revoked Read source) */
	qp->tx_mpos = qp->tx_batch_mpos + qp->tx_batch_sent;
	tx_batch_reset(qp);
	tx_drop_refs(qp);
}

/* err_work shut the stream down: nothing more gets into TCP. */
void kw_tx_abandon(struct kw_qp *qp)
{
	lockdep_assert_held(&qp->tx_mutex);
	if (qp->tx_active)
		tx_abandon(qp);
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

/* Cut the next FPDU of tx_msg into tx_fpdu; *crc covers its header. */
static int tx_cut_fpdu(struct kw_qp *qp, u32 *crc)
{
	struct kw_tx_fpdu *f = &qp->tx_fpdu;
	int ret;

	ret = kw_tx_fpdu_next(&qp->tx_msg, &qp->tx_msg_off, f);
	if (ret)
		return ret;
	*crc = qp->tx_msg.crc ?
	       kw_mpa_crc_update(kw_mpa_crc_init(), f->hdr, f->hdr_len) : 0;
	return 0;
}

/* Cut the next FPDU and seal its CRC over the payload in the MR. */
static int tx_next_fpdu(struct kw_qp *qp)
{
	struct kw_tx_fpdu *f = &qp->tx_fpdu;
	u32 crc;
	int ret;

	ret = tx_cut_fpdu(qp, &crc);
	if (ret)
		return ret;
	if (qp->tx_msg.crc)
		crc = tx_crc_payload(qp, crc, f->payload_off, f->payload_len);
	kw_tx_fpdu_seal(&qp->tx_msg, f, crc);
	return 0;
}

/*
 * Whether TCP copies the current message's batches as it takes them
 * (tx_push_pages()): a message sent by copy, not by page reference (a
 * guarded MR's), and without markers (those batches are our own pages,
 * passed by reference).
 */
static bool tx_msg_copied(const struct kw_qp *qp)
{
	return qp->tx_copy && !qp->tx_byref && !qp->tx_stream &&
	       !qp->mpa.markers_tx;
}

/*
 * Room in the QP itself for len glue bytes of a batch that TCP copies as
 * it takes it (tx_push_pages(): an SQ message sent by copy), or NULL. A
 * small message's two pieces (its header, then its trailer) need no page
 * fragment then, nor the page reference that goes with one. Kept until
 * the batch is reset: TCP may take a batch in several calls.
 */
static u8 *tx_glue_copied(struct kw_qp *qp, u32 len)
{
	u8 *p;

	BUILD_BUG_ON(2 + KW_DDP_UNTAGGED_HDR_LEN + 7 > KW_TX_GLUE);
	if (qp->tx_kind != KW_TXK_SQ || !tx_msg_copied(qp) ||
	    qp->tx_nglue >= ARRAY_SIZE(qp->tx_glue) || len > KW_TX_GLUE)
		return NULL;
	p = qp->tx_glue[qp->tx_nglue];
	/* one bvec entry describes one page of it */
	if (offset_in_page(p) + len > PAGE_SIZE)
		return NULL;
	qp->tx_nglue++;
	return p;
}

/* Header and trailer bytes between two payloads, in one page fragment. */
#define KW_TX_FRAG	roundup_pow_of_two(KW_TX_HDR_MAX + sizeof_field(struct kw_tx_fpdu, trailer))

/*
 * Append the bytes that sit between two payloads on the wire: the pending
 * trailer of the previous FPDU and the header of the next (hdr_len 0 for
 * the batch's end). They are copied into a fragment of the QP's own
 * page_frag cache, always KW_TX_FRAG (a power of two) at a time, so a
 * fragment is naturally aligned and never straddles a page. TCP takes
 * its own page references (retransmissions included); ours go when TCP
 * has the whole batch.
 */
static int tx_batch_glue(struct kw_qp *qp, const u8 *hdr, u32 hdr_len)
{
	u32 len = qp->tx_trl_len + hdr_len;
	u8 *p;

	if (!len)
		return 0;
	if (WARN_ON_ONCE(len > KW_TX_FRAG ||
			 qp->tx_nfrags >= ARRAY_SIZE(qp->tx_frags) ||
			 qp->tx_nbv >= qp->tx_bvec_max))
		return -EIO;
	p = tx_glue_copied(qp, len);
	if (!p) {
		p = page_frag_alloc(&qp->tx_frag_cache, KW_TX_FRAG,
				    GFP_KERNEL_ACCOUNT);
		if (!p)
			return -ENOMEM;
		qp->tx_frags[qp->tx_nfrags++] = p;
		if (WARN_ON_ONCE(offset_in_page(p) + KW_TX_FRAG > PAGE_SIZE))
			return -EIO;
	}
	memcpy(p, qp->tx_trl, qp->tx_trl_len);
	memcpy(p + qp->tx_trl_len, hdr, hdr_len);
	qp->tx_trl_len = 0;
	bvec_set_page(&qp->tx_bvec[qp->tx_nbv++], virt_to_page(p), len,
		      offset_in_page(p));
	qp->tx_batch_len += len;
	return 0;
}

/* Append the payload of FPDU f: one entry per page (and SGE) it touches. */
static int tx_batch_payload(struct kw_qp *qp, const struct kw_tx_fpdu *f)
{
	u32 off = 0;

	while (off < f->payload_len) {
		unsigned int pg_off, avail;
		struct page *page;
		u32 sge, left, len;
		u64 mr_off;

		if (WARN_ON_ONCE(qp->tx_nbv + 1 >= qp->tx_bvec_max ||
				 !tx_locate(qp, f->payload_off + off, &sge,
					    &mr_off, &left)))
			return -EIO;
		page = kw_mr_page(qp->tx_mr[sge], mr_off, &pg_off, &avail);
		len = min3(f->payload_len - off, left, avail);
		if (!sendpage_ok(page))
			qp->tx_batch_copy = true;
		bvec_set_page(&qp->tx_bvec[qp->tx_nbv++], page, len, pg_off);
		qp->tx_batch_len += len;
		off += len;
	}
	return 0;
}

/*
 * Read Responses. A Read Response answers the peer from memory the
 * application may revoke at any time (deregistration, invalidation), so
 * its payload is not handed to TCP by page reference, which would send
 * whatever the pages hold when TCP gets to them: it is copied, under an MR
 * access (mem.c), so that once DEREG_MR has returned no further byte of
 * the MR is copied. The copy goes into page-sized fragments of the QP's
 * page_frag cache, header, payload and trailer one after the other as
 * they go on the wire (tx_stream_*), and TCP takes those pages by
 * reference: the one copy is the only one, and a batch of whole FPDUs is
 * a few page fragments, whatever the FPDU size. A batch holds at most
 * KW_TX_RESP_BATCH bytes (iwarp.h): at most that much copied before a
 * deregistration returned may still go out after it.
 */

/*
 * A bvec entry for the stream from p on (0 bytes yet). Small header
 * fragments come from the same cache, so p need not be page aligned:
 * described from the head of its (compound) page, as TCP's own page_frag
 * copies are, an entry may straddle a page.
 */
static void tx_stream_bvec(struct kw_qp *qp, u8 *p)
{
	struct page *head = virt_to_head_page(p);

	bvec_set_page(&qp->tx_bvec[qp->tx_nbv++], head, 0,
		      p - (u8 *)page_address(head));
	qp->tx_chunk_bv = true;
}

/*
 * Stream pages. Every page of the stream is written once and then only
 * read, by TCP and whoever gets the skbs (a receiver on this host keeps
 * them until it is done with them). A fresh page costs a pass over it
 * besides the copy: Debian's kernels zero every page they allocate
 * (init_on_alloc), and TCP's own copies pay that too. So the QP keeps up to
 * KW_TX_POOL chunks of its stream, each KW_TX_POOL_ORDER pages with a
 * reference of its own, and writes one again once that reference is the
 * only one left: no skb, no clone, no receiver, no pipe holds it, and none
 * can take a new one, since only a holder can. Compound, so that a local
 * receiver cannot map them into its address space (TCP_ZEROCOPY_RECEIVE
 * takes order-0 pages only), where they would outlive the skb and the QP.
 * The oldest is tried first: chunks go out in that order and TCP frees
 * them in order of acknowledgement; one still held is passed over, so that
 * a chunk some holder keeps does not stop reuse for good, and the chunk
 * is a new one, or from the page_frag cache as before once the pool is
 * full. The pools of all QPs together hold at most kw_tx_pool_max() pages
 * (1/32 of memory, or the module parameter tx_pool_kb), charged to the
 * socket's memory cgroup; a QP's go with it (a chunk still held, when the
 * last holder lets it go).
 *
 * Each QP that has a pool gets an even share of that, within
 * [KW_TX_POOL_MIN, KW_TX_POOL] chunks, so that the first QPs to send do
 * not keep the others out: a QP over its share (more QPs came since it
 * grew) lets its oldest chunks go the next time it takes one, and a QP
 * that finds the pool full while shares have shrunk since the last time
 * has the reclaim work trim every QP over its share that is not
 * transmitting, idle ones too (one that is, it tries again, up to
 * KW_TX_RECLAIM_TRIES times; kw_tx_pool_high says whether a walk can
 * find anything). Letting go is dropping the pool's reference:
 * a chunk TCP still holds is TCP's until it is done with it (charged to
 * the memory cgroup, not to the pool), as at teardown. kw_tx_pool_lock
 * guards kw_tx_pool_list (QPs with a tx_pool); with it held, a QP's pool
 * does not go away (tx_pool_free() unlinks first), nor change once the
 * work has its tx_mutex.
 */
#define KW_TX_POOL_ORDER	1
#define KW_TX_POOL		128	/* chunks per QP: 1 MiB with 4 KiB pages */
#define KW_TX_POOL_MIN		8	/* a 64 KiB message */
static atomic_long_t kw_tx_pool_pages = ATOMIC_LONG_INIT(0);
static atomic_t kw_tx_pool_qps = ATOMIC_INIT(0);	/* QPs with tx_pool */
static LIST_HEAD(kw_tx_pool_list);
static DEFINE_MUTEX(kw_tx_pool_lock);
#define KW_TX_RECLAIM_TRIES	3
/* no QP's pool is larger (a walk lowers it, tx_pool_add() raises it) */
static u32 kw_tx_pool_high = KW_TX_POOL + 1;
static atomic_t kw_tx_pool_tries;	/* walks left for QPs that were busy */
static void tx_pool_reclaim(struct work_struct *work);
static DECLARE_DELAYED_WORK(kw_tx_pool_reclaim_work, tx_pool_reclaim);

static unsigned int tx_pool_kb;
module_param(tx_pool_kb, uint, 0644);
MODULE_PARM_DESC(tx_pool_kb,
		 "stream pages all QPs keep, in KiB (0, the default: 1/32 of memory)");

static int tx_pool_used_get(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%ld\n", atomic_long_read(&kw_tx_pool_pages) <<
			  (PAGE_SHIFT - 10));
}

static const struct kernel_param_ops tx_pool_used_ops = {
	.get = tx_pool_used_get,
};
module_param_cb(tx_pool_used_kb, &tx_pool_used_ops, NULL, 0444);
MODULE_PARM_DESC(tx_pool_used_kb, "stream pages all QPs keep now, in KiB");

static unsigned long kw_tx_pool_max(void)
{
	unsigned int kb = READ_ONCE(tx_pool_kb);

	return kb ? kb >> (PAGE_SHIFT - 10) : totalram_pages() / 32;
}

/* A QP's share of the pool, in chunks. */
static u32 tx_pool_share(void)
{
	unsigned long chunks = kw_tx_pool_max() >> KW_TX_POOL_ORDER;
	int qps = atomic_read(&kw_tx_pool_qps);

	if (qps > 1)
		chunks /= qps;
	return clamp_t(unsigned long, chunks, KW_TX_POOL_MIN, KW_TX_POOL);
}

/*
 * Keep the keep newest chunks; the pool's references to the others go.
 * The survivors move to the front in the order they had, the oldest
 * first for reuse.
 */
static void tx_pool_trim(struct kw_qp *qp, u32 keep)
{
	u32 n = qp->tx_pool_n, drop = n - keep, oldest, i, j;

	lockdep_assert_held(&qp->tx_mutex);
	if (WARN_ON_ONCE(!keep || keep >= n))
		return;
	oldest = (qp->tx_pool_next + drop) % n;	/* the oldest kept */
	for (i = 0; i < drop; i++) {
		j = (qp->tx_pool_next + i) % n;
		put_page(qp->tx_pool[j]);
		qp->tx_pool[j] = NULL;
	}
	for (i = 0, j = 0; i < n; i++) {
		if (!qp->tx_pool[i])
			continue;
		if (i == oldest)
			qp->tx_pool_next = j;
		qp->tx_pool[j++] = qp->tx_pool[i];
	}
	qp->tx_pool_n = keep;
	atomic_long_sub((long)drop << KW_TX_POOL_ORDER, &kw_tx_pool_pages);
}

/*
 * Trim every QP over its share whose tx_mutex is free (trylock: a QP
 * transmitting holds it, and the order here is the reverse of
 * tx_pool_add()'s). A QP that was busy gets another walk a little later,
 * KW_TX_RECLAIM_TRIES at most.
 */
static void tx_pool_reclaim(struct work_struct *work)
{
	u32 share = tx_pool_share();
	bool busy = false;
	struct kw_qp *qp;

	mutex_lock(&kw_tx_pool_lock);
	WRITE_ONCE(kw_tx_pool_high, share);	/* before: a QP may grow after */
	list_for_each_entry(qp, &kw_tx_pool_list, tx_pool_link) {
		cond_resched();
		if (READ_ONCE(qp->tx_pool_n) <= share)
			continue;
		if (!mutex_trylock(&qp->tx_mutex)) {
			busy = true;
			continue;
		}
		if (qp->tx_pool_n > share)
			tx_pool_trim(qp, share);
		mutex_unlock(&qp->tx_mutex);
	}
	if (busy) {
		WRITE_ONCE(kw_tx_pool_high, KW_TX_POOL + 1);
		if (atomic_dec_return(&kw_tx_pool_tries) >= 0)
			schedule_delayed_work(&kw_tx_pool_reclaim_work, HZ / 10);
	}
	mutex_unlock(&kw_tx_pool_lock);
}

/* The pool is full: a walk, if some QP may be over its share; ten a
 * second at most. */
static void tx_pool_full(u32 share)
{
	static unsigned long last;	/* jiffies of the last one, or 0 */
	unsigned long t = READ_ONCE(last);

	if (share >= READ_ONCE(kw_tx_pool_high) ||
	    (t && time_before(jiffies, t + HZ / 10)))
		return;
	WRITE_ONCE(last, jiffies);
	WRITE_ONCE(kw_tx_pool_high, share);	/* one walk for it */
	atomic_set(&kw_tx_pool_tries, KW_TX_RECLAIM_TRIES);
	schedule_delayed_work(&kw_tx_pool_reclaim_work, 0);
}

void kw_tx_exit(void)
{
	cancel_delayed_work_sync(&kw_tx_pool_reclaim_work);
}

static u8 *tx_pool_reuse(struct kw_qp *qp, u32 share)
{
	struct page *pg;
	u32 i;

	if (qp->tx_pool_n > share)
		tx_pool_trim(qp, share);
	if (!qp->tx_pool_n)
		return NULL;
	i = qp->tx_pool_next;
	pg = qp->tx_pool[i];
	qp->tx_pool_next = (i + 1) % qp->tx_pool_n;	/* used or passed over */
	if (page_ref_count(pg) != 1)
		return NULL;
	/* the last holder's reads of the chunk come before our writes */
	smp_acquire__after_ctrl_dep();
	get_page(pg);		/* the stream's reference: tx_frags, tx_chunk */
	return page_address(pg);
}

static u8 *tx_pool_add(struct kw_qp *qp, u32 share)
{
	struct page *pg;
	u32 i;

	if (qp->tx_pool_n >= share)
		return NULL;
	/* counted from its first try on, pool full or not: it has a share */
	if (!qp->tx_pool) {
		qp->tx_pool = kcalloc(KW_TX_POOL, sizeof(*qp->tx_pool),
				      GFP_KERNEL_ACCOUNT);
		if (!qp->tx_pool)
			return NULL;
		atomic_inc(&kw_tx_pool_qps);
		mutex_lock(&kw_tx_pool_lock);
		list_add_tail(&qp->tx_pool_link, &kw_tx_pool_list);
		mutex_unlock(&kw_tx_pool_lock);
		share = tx_pool_share();	/* counting this QP now */
	}
	if (atomic_long_read(&kw_tx_pool_pages) >= kw_tx_pool_max()) {
		tx_pool_full(share);
		return NULL;
	}
	if (atomic_long_add_return(1 << KW_TX_POOL_ORDER, &kw_tx_pool_pages) >
	    kw_tx_pool_max())
		goto full;
	pg = alloc_pages(GFP_KERNEL_ACCOUNT | __GFP_COMP | __GFP_NOWARN,
			 KW_TX_POOL_ORDER);
	if (!pg)
		goto full;
	/* the newest: just before the oldest, in the order they are tried */
	i = qp->tx_pool_next;
	memmove(&qp->tx_pool[i + 1], &qp->tx_pool[i],
		(qp->tx_pool_n - i) * sizeof(*qp->tx_pool));
	qp->tx_pool[i] = pg;			/* the pool's reference */
	qp->tx_pool_n++;
	qp->tx_pool_next = (i + 1) % qp->tx_pool_n;
	if (qp->tx_pool_n > READ_ONCE(kw_tx_pool_high))
		WRITE_ONCE(kw_tx_pool_high, qp->tx_pool_n);
	get_page(pg);				/* the stream's */
	return page_address(pg);
full:
	atomic_long_sub(1 << KW_TX_POOL_ORDER, &kw_tx_pool_pages);
	return NULL;
}

/* The pool's references go; a chunk goes when no skb holds it. */
static void tx_pool_free(struct kw_qp *qp)
{
	u32 i;

	if (qp->tx_pool) {	/* the reclaim work lets go of it first */
		mutex_lock(&kw_tx_pool_lock);
		list_del(&qp->tx_pool_link);
		mutex_unlock(&kw_tx_pool_lock);
	}
	for (i = 0; i < qp->tx_pool_n; i++)
		put_page(qp->tx_pool[i]);
	atomic_long_sub((long)qp->tx_pool_n << KW_TX_POOL_ORDER,
			&kw_tx_pool_pages);
	if (qp->tx_pool)
		atomic_dec(&kw_tx_pool_qps);
	kfree(qp->tx_pool);
	qp->tx_pool = NULL;
	qp->tx_pool_n = 0;
	qp->tx_pool_next = 0;
}

/*
 * A chunk of the stream, with a reference for it, and its size. Charged to
 * the socket's memory cgroup, also when a worker allocates it.
 */
static u8 *tx_stream_chunk(struct kw_qp *qp, u32 *size)
{
	u32 share = tx_pool_share();
	struct mem_cgroup *old;
	u8 *p;

	lockdep_assert_held(&qp->tx_mutex);
	*size = PAGE_SIZE << KW_TX_POOL_ORDER;
	p = tx_pool_reuse(qp, share);
	if (p)
		return p;
	old = tx_charge_to(qp->sock->sk);
	p = tx_pool_add(qp, share);
	if (!p) {
		*size = PAGE_SIZE;
		p = page_frag_alloc(&qp->tx_frag_cache, PAGE_SIZE,
				    GFP_KERNEL_ACCOUNT);
	}
	set_active_memcg(old);
	return p;
}

/*
 * Room for the next bytes of the stream. The page being filled (tx_chunk,
 * with our reference) carries over from batch to batch and message to
 * message, as TCP's own page_frag does: TCP charges a socket for the bytes
 * it takes, not for the pages behind them, so a page per batch would let a
 * peer asking for many tiny Reads pin 4 KiB for every 20-byte response.
 * A full page goes with the batch (tx_frags, freed once TCP has it).
 */
static int tx_stream_room(struct kw_qp *qp, u8 **dst, u32 *room)
{
	u32 size;
	u8 *p;

	if (qp->tx_chunk && qp->tx_chunk_len < qp->tx_chunk_size) {
		if (!qp->tx_chunk_bv) {		/* first bytes of this batch */
			if (WARN_ON_ONCE(qp->tx_nbv >= qp->tx_bvec_max))
				return -EIO;
			tx_stream_bvec(qp, qp->tx_chunk + qp->tx_chunk_len);
		}
		*dst = qp->tx_chunk + qp->tx_chunk_len;
		*room = qp->tx_chunk_size - qp->tx_chunk_len;
		return 0;
	}
	if (WARN_ON_ONCE(qp->tx_nfrags >= ARRAY_SIZE(qp->tx_frags) ||
			 qp->tx_nbv >= qp->tx_bvec_max))
		return -EIO;
	p = tx_stream_chunk(qp, &size);
	if (!p)
		return -ENOMEM;
	if (qp->tx_chunk)	/* full: ours until this batch is in TCP */
		qp->tx_frags[qp->tx_nfrags++] = qp->tx_chunk;
	qp->tx_chunk = p;
	qp->tx_chunk_len = 0;
	qp->tx_chunk_size = size;
	tx_stream_bvec(qp, p);
	*dst = p;
	*room = size;
	return 0;
}

/* n bytes at the room tx_stream_room() gave are now part of the batch. */
static void tx_stream_commit(struct kw_qp *qp, u32 n)
{
	qp->tx_chunk_len += n;
	qp->tx_bvec[qp->tx_nbv - 1].bv_len += n;
	qp->tx_batch_len += n;
}

static int tx_stream_put(struct kw_qp *qp, const u8 *src, u32 len)
{
	while (len) {
		u32 room, n;
		u8 *dst;
		int ret;

		ret = tx_stream_room(qp, &dst, &room);
		if (ret)
			return ret;
		n = min(len, room);
		memcpy(dst, src, n);
		tx_stream_commit(qp, n);
		src += n;
		len -= n;
	}
	return 0;
}

/*
 * MPA markers (RFC 5044 section 5, iwarp.h). With markers on transmit
 * every FPDU is copied whole into the stream, as Read Responses are:
 * header, payload and trailer one after the other, a marker put in front
 * of every byte that falls on a multiple of 512 of the stream, the CRC
 * computed over what was put, markers included. By page reference a
 * marker would cut the payload every 508 bytes. tx_mpos counts the
 * stream from the first byte after our Request or Reply; every FPDU of
 * the connection goes through here, so it is the stream position.
 */
static int tx_marker_due(struct kw_qp *qp, u32 *crc)
{
	u8 mk[KW_MPA_MARKER_LEN];
	int ret;

	if (!qp->mpa.markers_tx || kw_mpa_marker_gap(qp->tx_mpos))
		return 0;
	if (qp->tx_mpos == qp->tx_fpdu_pos)	/* it leads the FPDU */
		qp->tx_fpdu_pos += sizeof(mk);
	kw_mpa_marker_encode(qp->tx_mpos, qp->tx_fpdu_pos, mk);
	ret = tx_stream_put(qp, mk, sizeof(mk));
	if (ret)
		return ret;
	if (qp->tx_msg.crc)
		*crc = kw_mpa_crc_update(*crc, mk, sizeof(mk));
	qp->tx_mpos += sizeof(mk);
	return 0;
}

/* len bytes of header or pad onto the stream, markers among them. */
static int tx_stream_put_marked(struct kw_qp *qp, const u8 *src, u32 len,
				u32 *crc)
{
	while (len) {
		u32 n = len;
		int ret;

		if (qp->mpa.markers_tx) {
			ret = tx_marker_due(qp, crc);
			if (ret)
				return ret;
			n = min(n, kw_mpa_marker_gap(qp->tx_mpos));
		}
		ret = tx_stream_put(qp, src, n);
		if (ret)
			return ret;
		if (qp->tx_msg.crc)
			*crc = kw_mpa_crc_update(*crc, src, n);
		qp->tx_mpos += n;
		src += n;
		len -= n;
	}
	return 0;
}

/*
 * Copy the payload of FPDU f from the MRs into the stream, folding the
 * copied bytes (not the MR's, which may change meanwhile) into *crc. A
 * Read Response's source may be revoked at any time: each copy is an MR
 * access, and -EACCES says the MR was revoked. An SQ WR's MRs are held
 * (tx_hold_sges()) and copied as they are.
 */
static int tx_stream_payload(struct kw_qp *qp, const struct kw_tx_fpdu *f,
			     u32 *crc)
{
	bool guarded = qp->tx_kind == KW_TXK_READ_RESP;
	u32 off = f->payload_off, len = f->payload_len;

	if (WARN_ON_ONCE(len && guarded && qp->tx_nsge != 1))
		return -EIO;
	while (len) {
		u32 sge, left, room, n;
		struct kw_mr *mr;
		u64 mr_off;
		u8 *dst;
		int ret;

		ret = tx_marker_due(qp, crc);
		if (ret)
			return ret;
		if (WARN_ON_ONCE(!tx_locate(qp, off, &sge, &mr_off, &left)))
			return -EIO;
		mr = qp->tx_mr[sge];
		ret = tx_stream_room(qp, &dst, &room);
		if (ret)
			return ret;
		n = min3(len, left, room);
		if (qp->mpa.markers_tx)
			n = min(n, kw_mpa_marker_gap(qp->tx_mpos));
		if (guarded) {
			/* an MR access runs with bottom halves off (mem.c) */
			local_bh_disable();
			if (!kw_mr_access_begin(mr)) {
				local_bh_enable();
				return -EACCES;
			}
			kw_mr_copy_from(mr, mr_off, dst, n);
			kw_mr_access_end(mr);
			local_bh_enable();
		} else {
			kw_mr_copy_from(mr, mr_off, dst, n);
		}
		if (qp->tx_msg.crc)
			*crc = kw_mpa_crc_update(*crc, dst, n);
		tx_stream_commit(qp, n);
		qp->tx_mpos += n;
		off += n;
		len -= n;
	}
	return 0;
}

/*
 * The next FPDU of tx_msg, whole, onto the stream: every Read Response
 * FPDU, and every FPDU when markers are on. The CRC runs over the bytes
 * in the order they go on the wire (RFC 5044 sections 4.4 and 5).
 */
static int tx_stream_fpdu(struct kw_qp *qp)
{
	struct kw_tx_fpdu *f = &qp->tx_fpdu;
	u32 crc = qp->tx_msg.crc ? kw_mpa_crc_init() : 0;
	u32 pad;
	int ret;

	ret = kw_tx_fpdu_next(&qp->tx_msg, &qp->tx_msg_off, f);
	if (ret)
		return ret;
	pad = f->trailer_len - 4;
	/* the length field's position: tx_marker_due() moves it past a
	 * marker that leads the FPDU */
	qp->tx_fpdu_pos = qp->tx_mpos;
	ret = tx_stream_put_marked(qp, f->hdr, f->hdr_len, &crc);
	if (!ret)
		ret = tx_stream_payload(qp, f, &crc);
	if (!ret)
		ret = tx_stream_put_marked(qp, f->trailer, pad, &crc);
	if (!ret)	/* one between the pad and the CRC is the FPDU's */
		ret = tx_marker_due(qp, &crc);
	if (ret)
		return ret;
	/* RFC 5044 section 4.4: the CRC field is zero when CRC is off */
	if (qp->tx_msg.crc)
		kw_mpa_crc_put(crc, f->trailer + pad);
	qp->tx_mpos += 4;
	return tx_stream_put(qp, f->trailer + pad, 4);
}

/*
 * Upper bound on the stream bytes of one FPDU of tx_msg: header, payload,
 * trailer and, with markers, one marker per 508 bytes and a leading one.
 */
static u32 tx_fpdu_max(struct kw_qp *qp)
{
	u32 n = KW_TX_HDR_MAX + qp->tx_msg.mulpdu +
		sizeof_field(struct kw_tx_fpdu, trailer);

	if (qp->mpa.markers_tx)
		n += KW_MPA_MARKERS_MAX(n);
	return n;
}

/*
 * Cut the next FPDUs of tx_msg into a new batch: one at least, more while
 * the batch holds fewer than KW_TX_BATCH_FPDUS FPDUs and KW_TX_BATCH_BYTES
 * bytes and has room for one more FPDU's pieces. A small MULPDU (1442
 * bytes on a 1500-byte MTU) makes many FPDUs per message; one socket call
 * each was most of the transmit cost. A Read Response's FPDUs are copied
 * whole into page fragments, as many as fit in KW_TX_RESP_BATCH bytes
 * (tx_pick() cut them to fit one).
 */
static int tx_fill(struct kw_qp *qp)
{
	struct kw_tx_fpdu *f = &qp->tx_fpdu;
	u32 n = 0;
	int ret;

	lockdep_assert_held(&qp->tx_mutex);
	BUILD_BUG_ON(sizeof(qp->tx_trl) < sizeof(f->trailer));
	/* the pages of a Read Response batch (KW_TX_RESP_BATCH) fit tx_frags */
	BUILD_BUG_ON(KW_TX_RESP_BATCH / PAGE_SIZE + 2 >
		     ARRAY_SIZE(qp->tx_frags));
	tx_batch_reset(qp);
	qp->tx_batch_mpos = qp->tx_mpos;
	if (qp->tx_kind == KW_TXK_READ_RESP || qp->mpa.markers_tx ||
	    qp->tx_stream) {
		/*
		 * tx_pick() cut a Read Response's FPDUs so that one fits
		 * KW_TX_RESP_BATCH; any other's first FPDU is at most
		 * MULPDU (a batch of up to 17 pages: tx_frags and the bvec
		 * go_rts() sized have room).
		 */
		do {
			ret = tx_stream_fpdu(qp);
			if (ret)
				return ret;
		} while (!f->last && ++n < KW_TX_BATCH_FPDUS &&
			 qp->tx_batch_len + tx_fpdu_max(qp) <= KW_TX_RESP_BATCH);
		qp->tx_msg_cut = f->last;
		return 0;
	}
	do {
		ret = tx_next_fpdu(qp);
		if (!ret)
			ret = tx_batch_glue(qp, f->hdr, f->hdr_len);
		if (!ret)
			ret = tx_batch_payload(qp, f);
		if (ret)
			return ret;
		memcpy(qp->tx_trl, f->trailer, f->trailer_len);
		qp->tx_trl_len = f->trailer_len;
	} while (!f->last && ++n < KW_TX_BATCH_FPDUS &&
		 qp->tx_batch_len < KW_TX_BATCH_BYTES &&
		 qp->tx_nbv + qp->tx_bvec_fpdu <= qp->tx_bvec_max);
	qp->tx_msg_cut = f->last;
	return tx_batch_glue(qp, NULL, 0);	/* the last trailer */
}

#ifdef KW_TX_SPLICE
/* One sendmsg() over the batch's bvec, from where TCP stopped taking. */
static int tx_push_pages(struct kw_qp *qp, int flags)
{
	struct msghdr msg = { .msg_flags = flags };

	/* a page that is not sendpage_ok() (slab) must be copied */
	if (qp->tx_zc && !qp->tx_batch_copy) {
		msg.msg_flags |= MSG_ZEROCOPY;
		msg.msg_ubuf = &qp->tx_zc->ubuf;
	} else if (!tx_msg_copied(qp) && !qp->tx_batch_copy) {
		/* our own pages: by reference (a batch with markers, or a
		 * Read Response, was copied into them: tx_stream_fpdu()),
		 * or a guarded MR's */
		msg.msg_flags |= MSG_SPLICE_PAGES;
	}
	iov_iter_bvec(&msg.msg_iter, ITER_SOURCE, qp->tx_bvec, qp->tx_nbv,
		      qp->tx_batch_len);
	iov_iter_advance(&msg.msg_iter, qp->tx_batch_sent);
	return qp->sock_ops->sendmsg(qp->sock, &msg,
				     qp->tx_batch_len - qp->tx_batch_sent);
}
#else /* sendpage */
/*
 * One sendpage per bvec entry, all under one socket lock with
 * MSG_SENDPAGE_NOTLAST on all but the last (TCP pushes only full
 * segments, or when it runs out of room), as kTLS does. That takes the
 * socket as plain TCP: if something replaced its proto (a BPF sockmap),
 * every entry goes through the socket's own sendpage instead.
 */
static int tx_push_pages(struct kw_qp *qp, int flags)
{
	struct sock *sk = qp->sock->sk;
	bool locked = READ_ONCE(sk->sk_prot)->sendmsg == tcp_sendmsg;
	u32 skip = qp->tx_batch_sent, i;
	int sent = 0, ret = 0;

	/* one sendmsg(): copies (a tx_zc batch with a slab page too), or
	 * references the pages for tx_zc */
	if (tx_msg_copied(qp) || qp->tx_zc) {
		struct msghdr msg = { .msg_flags = flags };

		if (!qp->tx_copy && !qp->tx_batch_copy) {
			msg.msg_flags |= MSG_ZEROCOPY;
			msg.msg_ubuf = &qp->tx_zc->ubuf;
		}
		iov_iter_bvec(&msg.msg_iter, ITER_SOURCE, qp->tx_bvec,
			      qp->tx_nbv, qp->tx_batch_len);
		iov_iter_advance(&msg.msg_iter, skip);
		return qp->sock_ops->sendmsg(qp->sock, &msg,
					     qp->tx_batch_len - skip);
	}
	if (locked)
		lock_sock(sk);
	for (i = 0; i < qp->tx_nbv; i++) {
		const struct bio_vec *bv = &qp->tx_bvec[i];
		struct page *page = bv->bv_page;
		u32 off = bv->bv_offset, len = bv->bv_len;
		int fl = flags;

		if (skip >= len) {
			skip -= len;
			continue;
		}
		off += skip;
		len -= skip;
		skip = 0;
		if (i + 1 < qp->tx_nbv)
			fl |= MSG_MORE | MSG_SENDPAGE_NOTLAST;
		if (!sendpage_ok(page))
			ret = locked ?
			      sock_no_sendpage_locked(sk, page, off, len, fl) :
			      sock_no_sendpage(qp->sock, page, off, len, fl);
		else
			ret = locked ?
			      tcp_sendpage_locked(sk, page, off, len, fl) :
			      qp->sock_ops->sendpage(qp->sock, page, off, len,
						     fl);
		if (ret <= 0)
			break;
		sent += ret;
		if (ret < len)
			break;
	}
	if (locked)
		release_sock(sk);
	return sent ? sent : ret;
}
#endif /* KW_TX_SPLICE */

/*
 * Small messages of one doorbell (an RDMA Write and the Send that
 * announces it, a few small Sends) share a TCP segment: the last batch of
 * a message goes with MSG_MORE when the next message already waits and
 * everything held so far and the next message fit one segment. Otherwise
 * each would be a segment of its own, and Linux acknowledges the second
 * small segment in a row at once (ICSK_ACK_PUSHED2) instead of with the
 * receiver's answer. Only small ones: a message that would start in the
 * middle of a segment and continue past it would put its FPDUs across
 * segment boundaries (RFC 5044 section 8, FPDU alignment).
 *
 * Only on a socket that pushes what it is given (TCP_NODELAY, which a
 * QP's socket has, and no TCP_CORK): tx_uncork() relies on that.
 */
#define KW_TX_SMALL_WIRE(len)	((len) + 2 + KW_DDP_UNTAGGED_HDR_LEN + 3 + 4)

static bool tx_coalesce(struct kw_qp *qp)
{
	struct sock *sk = qp->sock->sk;
	u32 mss = READ_ONCE(tcp_sk(sk)->mss_cache);
	u32 held = qp->tx_cork_len + qp->tx_batch_len - qp->tx_batch_sent;
	/* a bit-field, set under the socket lock: a stale value only costs
	 * a segment, or a push that sets TCP_NODELAY again (tx_uncork()) */
	u8 nonagle = tcp_sk(sk)->nonagle;
	bool ok = false;

	/* the common case, nothing waiting, without the lock */
	if (qp->tx_kind == KW_TXK_TERM || held >= mss ||
	    (nonagle & (TCP_NAGLE_OFF | TCP_NAGLE_CORK)) != TCP_NAGLE_OFF ||
	    READ_ONCE(qp->sq_tx) == READ_ONCE(qp->sq_pulled))
		return false;
	spin_lock_bh(&qp->lock);
	if (qp->sq_tx != qp->sq_pulled && qp->irq_head == qp->irq_tail &&
	    !qp->term_pending) {
		const struct kw_wr *wr =
			&qp->sq_wr[qp->sq_tx & (qp->sq.entries - 1)];
		u32 wire = KW_TX_SMALL_WIRE(wr->len);

		if (qp->mpa.markers_tx)	/* and its markers, at most */
			wire += KW_MPA_MARKERS_MAX(wire);
		ok = held + wire <= mss;
	}
	spin_unlock_bh(&qp->lock);
	return ok;
}

/* Hand the rest of the batch to TCP; 0 once TCP has all of it. MSG_MORE
 * on everything but the last byte of a message, unless tx_coalesce(). */
static int tx_push(struct kw_qp *qp)
{
	bool more = !qp->tx_msg_cut || tx_coalesce(qp);
	int flags = MSG_DONTWAIT | MSG_NOSIGNAL | (more ? MSG_MORE : 0);
	int ret;

	lockdep_assert_held(&qp->tx_mutex);
	while (qp->tx_batch_sent < qp->tx_batch_len) {
		ret = tx_push_pages(qp, flags);
		if (ret < 0)
			return ret;
		if (ret == 0)
			return -EAGAIN;
		qp->tx_batch_sent += ret;
		/* without MSG_MORE TCP pushed all it held */
		qp->tx_cork_len = more ? qp->tx_cork_len + ret : 0;
	}
	tx_batch_reset(qp);	/* TCP holds its own page references */
	return 0;
}

/*
 * Whenever a transmit run ends, for whatever reason, after bytes went with
 * MSG_MORE: have TCP send what it holds. Setting TCP_NODELAY again (which
 * tx_coalesce() saw set) pushes the pending frames; a stock kernel
 * exports nothing narrower to a module. A user who turned TCP_NODELAY off
 * on an extended socket in between gets it back on: the bytes must go.
 */
static void tx_uncork(struct kw_qp *qp)
{
	lockdep_assert_held(&qp->tx_mutex);
	if (!qp->tx_cork_len)
		return;
	qp->tx_cork_len = 0;
	if (qp->sock)
		tcp_sock_set_nodelay(qp->sock->sk);
}

/*
 * RFC 5044 section 4.5: MULPDU follows EMSS when TCP adjusts it (a smaller
 * path MTU, changed options). TCP keeps its EMSS in mss_cache and
 * refreshes it whenever it sends after the route's MTU changed, so each
 * message takes the value of the moment (one message may still go out cut
 * to the old one: receivers cope, RFC 5044 section 5.1), at most the
 * MULPDU of the connection's start, which go_rts() sized the transmit
 * arrays for. Caller holds qp->lock (ack_sk is set from RTS on).
 */
u32 kw_qp_mulpdu(struct kw_qp *qp)
{
	u32 mss;

	lockdep_assert_held(&qp->lock);
	if (!qp->ack_sk)
		return qp->mulpdu;
	mss = READ_ONCE(tcp_sk(qp->ack_sk)->mss_cache);
	return min(qp->mulpdu, kw_mpa_mulpdu(min_t(u32, mss, 65535),
					     qp->mpa.markers_tx));
}

static void msg_init(struct kw_qp *qp, u8 opcode, u32 len)
{
	qp->tx_copy = false;
	qp->tx_byref = false;
	qp->tx_stream = false;
	memset(&qp->tx_msg, 0, sizeof(qp->tx_msg));
	qp->tx_msg.opcode = opcode;
	qp->tx_msg.crc = qp->mpa.crc;
	qp->tx_msg.mulpdu = kw_qp_mulpdu(qp);
	qp->tx_msg.len = len;
}

static void msg_untagged(struct kw_qp *qp, u32 qn)
{
	qp->tx_msg.qn = qn;
	qp->tx_msg.msn = ++qp->tx_msn[qn];
}

/*
 * The socket at the other end of sk's connection, if that is on this host
 * (sk's route goes through a loopback device) and in sk's network
 * namespace: a full, referenced socket, or NULL. BHs are off (qp->lock).
 */
static struct sock *tx_peer_lookup(struct sock *sk)
{
	const struct inet_sock *inet = inet_sk(sk);
	struct dst_entry *dst = sk_dst_get(sk);
	struct net_device *dev = dst ? READ_ONCE(dst->dev) : NULL;
	struct net *net = sock_net(sk);
	struct sock *p;
	int ifindex = 0;

	if (dev && (dev->flags & IFF_LOOPBACK))
		ifindex = dev->ifindex;
	dst_release(dst);
	if (!ifindex)
		return NULL;
	/* as a segment from sk would find it: its source is our address */
	rcu_read_lock();
#if IS_ENABLED(CONFIG_IPV6)
	if (sk->sk_family == AF_INET6 &&
	    !ipv6_addr_v4mapped(&sk->sk_v6_daddr))
		p = __inet6_lookup_established(net, KW_TCP_EHASH(net)
					       &sk->sk_v6_rcv_saddr,
					       inet->inet_sport,
					       &sk->sk_v6_daddr,
					       ntohs(inet->inet_dport),
					       ifindex, 0);
	else
#endif
		p = __inet_lookup_established(net, KW_TCP_EHASH(net)
					      sk->sk_rcv_saddr,
					      inet->inet_sport, sk->sk_daddr,
					      ntohs(inet->inet_dport),
					      ifindex, 0);
	rcu_read_unlock();
	/* a time-wait or request socket; or a connection to itself */
	if (p && (!sk_fullsock(p) || p == sk)) {
		sock_gen_put(p);
		p = NULL;
	}
	return p;
}

/* copied SQ messages from this size on go through the stream pages */
#define KW_TX_STREAM_MIN	8192

/* FPDUs smaller than this make skbs of a few KB by reference: copy them */
#define KW_TX_LOCAL_MULPDU	4096

/*
 * Whether the message may go by plain page reference, with no ubuf, to
 * the other end of the connection: a kiwarp QP on this host that places
 * what it receives as TCP hands it over (its receive callback is
 * kw_rx_data_ready()), not an extended socket (a ULP: its reader copies
 * from the skbs later, rxhold.c). Its socket is looked up once and kept
 * (tx_peer_sk); whether it is still such a QP, per message, and that
 * its receive callback is called for every byte (SO_RCVLOWAT 1: a
 * socket kiwarp creates starts so, a handed-in one is kept so, cm.c). Whatever it becomes, a WR
 * sent so completes only once that socket is done with it (read it, or
 * closed, or our stream ended and its TCP took nothing more in: qp.c,
 * wr_read()). Per message, too, that it is still the other end
 * of this connection: ports and addresses swapped (tx_sk_is_peer()), and
 * what it received so far between what we sent and what was
 * acknowledged, so that its copied_seq counts our sequence space (a
 * mirrored four-tuple through NAT in the namespace would not). Paths with
 * small FPDUs copy instead: MAX_SKB_FRAGS pieces of two or three per FPDU
 * would carry a few KB per skb, and the per-skb work costs more than the
 * copy saves (Documentation/performance.md). Only on x86: TCP publishes
 * copied_seq with a plain store after the receive's copy, and only there
 * (TSO) can no load of that copy pass that store, so that a completion
 * seen after it never races with the peer still reading our pages.
 * Caller holds qp->lock and tx_mutex (qp->sock).
 */
static bool tx_local_peer(struct kw_qp *qp)
{
	struct sock *p = qp->tx_peer_sk, *sk = qp->sock->sk;
	u32 rcv_nxt;

	lockdep_assert_held(&qp->lock);
	if (!IS_ENABLED(CONFIG_X86) ||
	    kw_qp_mulpdu(qp) < KW_TX_LOCAL_MULPDU)
		return false;
	if (!p) {
		p = tx_peer_lookup(sk);
		if (!p)
			return false;
		qp->tx_peer_sk = p;	/* our reference: qp_free() */
	}
	rcv_nxt = READ_ONCE(tcp_sk(p)->rcv_nxt);
	return READ_ONCE(p->sk_state) == TCP_ESTABLISHED &&
	       !sock_flag(p, SOCK_DEAD) &&
	       READ_ONCE(p->sk_data_ready) == kw_rx_data_ready &&
	       READ_ONCE(p->sk_rcvlowat) <= 1 &&
	       !READ_ONCE(inet_csk(p)->icsk_ulp_ops) &&
	       tx_sk_is_peer(p, sk) &&
	       !before(rcv_nxt, READ_ONCE(tcp_sk(sk)->snd_una)) &&
	       !after(rcv_nxt, READ_ONCE(tcp_sk(sk)->snd_nxt));
}

/* Whether every SGE of the message is in a tx_guarded MR (kw_mr). */
static bool tx_sges_guarded(const struct kw_qp *qp)
{
	u32 i;

	for (i = 0; i < qp->tx_nsge; i++)
		if (!qp->tx_mr[i]->tx_guarded)
			return false;
	return qp->tx_nsge;
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

/*
 * A Read Request for rr, the ORQ entry that awaits its Response (sq_idx:
 * its SQ slot, ~0 for the RTR Read, which goes first, into an empty ORQ)
 * and the message that carries it. An SQ Read's caller checked that the
 * ORQ has room. qp->lock held.
 */
static void tx_read_req(struct kw_qp *qp, const struct kw_read_req *rr,
			u32 sq_idx)
{
	lockdep_assert_held(&qp->lock);
	qp->orq[qp->orq_tail++ & (KW_MAX_ORD - 1)] = (struct kw_orq){
		.sq_idx = sq_idx,
		.sink_stag = rr->sink_stag,
		.sink_to = rr->sink_to,
		.len = rr->size,
	};
	kw_read_req_encode(rr, qp->tx_inline);
	msg_init(qp, KW_OP_READ_REQ, 0);
	msg_untagged(qp, KW_QN_READ_REQ);
	qp->tx_msg.inline_data = qp->tx_inline;
	qp->tx_msg.inline_len = KW_READ_REQ_LEN;
}

/* The RDMAP opcode of a Send WR */
static u8 send_opcode(u32 wr_opcode)
{
	switch (wr_opcode) {
	case KIWARP_WR_SEND_SE:
		return KW_OP_SEND_SE;
	case KIWARP_WR_SEND_INV:
		return KW_OP_SEND_INV;
	case KIWARP_WR_SEND_SE_INV:
		return KW_OP_SEND_SE_INV;
	default:
		return KW_OP_SEND;
	}
}

enum tx_sq_verdict {
	TX_SQ_GO,	/* the WR goes now */
	TX_SQ_DONE,	/* completed without transmitting: the next one */
	TX_SQ_WAIT,	/* not yet (ORD reached, fence) */
	TX_SQ_FAIL,	/* the QP stops here (tx_pick_sq()'s local_error) */
};

/*
 * Whether the SQ's next WR can go now; a WR that completes here (failed
 * validation, no Reads allowed, a Read after the peer's FIN, a Local
 * Invalidate) is consumed (sq_tx). qp->lock held.
 */
static enum tx_sq_verdict tx_sq_check(struct kw_qp *qp, struct kw_wr *wr)
{
	const struct kiwarp_wqe *w = &wr->wqe;

	lockdep_assert_held(&qp->lock);
	if (wr->done) {		/* failed validation at pull */
		qp->sq_tx++;
		return TX_SQ_FAIL;
	}
	if (w->opcode == KIWARP_WR_RDMA_READ && !qp->orq_size) {
		/* ORD 0 (the peer's IRD was 0): no Reads at all
		 * (RFC 5040 section 6.1, RFC 6581 section 9.1) */
		wr->status = KIWARP_WC_LOC_QP_OP_ERR;
		wr->done = true;
		qp->sq_tx++;
		return TX_SQ_FAIL;
	}
	if (w->opcode == KIWARP_WR_RDMA_READ && qp->peer_closed) {
		/* no Response can come after the peer's FIN */
		wr->status = KIWARP_WC_WR_FLUSH_ERR;
		wr->done = true;
		qp->sq_tx++;
		qp->tx_local_done = true;
		return TX_SQ_DONE;
	}
	if (w->opcode == KIWARP_WR_RDMA_READ &&
	    qp->orq_tail - qp->orq_head >= qp->orq_size)
		return TX_SQ_WAIT;	/* ORD reached: wait for a response */
	if ((w->flags & KIWARP_WR_FENCE) && qp->orq_tail != qp->orq_head)
		return TX_SQ_WAIT;	/* fence: prior Reads first */
	if (w->opcode != KIWARP_WR_LOCAL_INV)
		return TX_SQ_GO;
	/* a local operation, in order with the transmit */
	qp->sq_tx++;
	wr->status = kw_mr_invalidate(w->inv_stag, qp->pd_id) ?
		     KIWARP_WC_LOC_PROT_ERR : KIWARP_WC_SUCCESS;
	wr->done = true;
	qp->tx_local_done = true;
	return wr->status == KIWARP_WC_SUCCESS ? TX_SQ_DONE : TX_SQ_FAIL;
}

/*
 * A Send or Write about to go: hold its MRs, note where its data ends in
 * the stream, and choose copy or page reference. qp->lock held.
 */
static void tx_sq_data(struct kw_qp *qp, struct kw_wr *wr, u32 idx)
{
	bool big = wr->len > qp->copy_max && !qp->mpa.markers_tx;

	lockdep_assert_held(&qp->lock);
	tx_hold_sges(qp, wr);
	qp->tx_kind = KW_TXK_SQ;
	wr->byte_len = wr->len;
	/*
	 * Up to copy_max bytes are copied into the socket and the WR
	 * completes as soon as TCP has them (tx_finish()); larger ones go
	 * by page reference and complete once TCP saw them acknowledged
	 * and no skb holds the pages (tx_zc, above), unless the stack
	 * copies them anyway (kw_tx_path_copies()). From memory whose
	 * owner never rewrites what an skb holds (tx_guarded: the kernel's
	 * own, es.c's send buffer) they go by page reference too, but
	 * complete as a copy does: the owner, not the WR, waits for the
	 * pages. To a kiwarp QP on this host they go by plain reference
	 * and complete once it read them (await_read, above). With markers
	 * every WR is copied, so end_seq (below) leaves markers out.
	 */
	if (big && tx_sges_guarded(qp)) {
		qp->tx_byref = true;
		qp->tx_copy = true;
	} else if (big && tx_local_peer(qp)) {
		qp->tx_byref = true;
		wr->await_read = true;
	} else {
		qp->tx_copy = !big ||
			      (qp->copy_adapt && kw_tx_path_copies(qp));
		if (!qp->tx_copy) {
			qp->tx_zc = txzc_new(qp, idx);
			qp->tx_copy = !qp->tx_zc;	/* no memory: copy */
		}
	}
	if (big)
		qp->tx_local_last = wr->await_read;
	/*
	 * A copied message of some size is copied by us, whole FPDUs into
	 * stream pages (tx_stream_fpdu()) that TCP takes by reference, not
	 * by TCP into pages of its own: ours are reused (the pool above).
	 */
	qp->tx_stream = qp->tx_copy && !qp->tx_byref &&
			!qp->mpa.markers_tx && wr->len >= KW_TX_STREAM_MIN;
	wr->await_ack = !qp->tx_copy;
	wr->held = !qp->tx_copy && !qp->tx_byref;	/* tx_zc */
	/*
	 * Only we write to this socket and the previous message is
	 * entirely in TCP, so the WR's data ends exactly its wire length
	 * past write_seq. Knowing that before the first byte goes out, a
	 * flush racing with the end of the transmission can tell a
	 * delivered WR from an undelivered one. Only a WR that awaits its
	 * ACK looks at it (wr_acked()).
	 */
	if (wr->await_ack)
		wr->end_seq = READ_ONCE(tcp_sk(qp->sock->sk)->write_seq) +
			      kw_tx_msg_wire_len(&qp->tx_msg);
}

/*
 * The next message from the SQ, if one may go: the WRs that complete
 * without transmitting are done on the way. qp->lock held.
 */
static bool tx_pick_sq(struct kw_qp *qp)
{
	lockdep_assert_held(&qp->lock);
	while (qp->sq_tx != qp->sq_pulled) {
		u32 idx = qp->sq_tx;
		struct kw_wr *wr = &qp->sq_wr[idx & (qp->sq.entries - 1)];
		const struct kiwarp_wqe *w = &wr->wqe;

		switch (tx_sq_check(qp, wr)) {
		case TX_SQ_GO:
			break;
		case TX_SQ_DONE:
			continue;
		case TX_SQ_WAIT:
			return false;
		case TX_SQ_FAIL:
			goto local_error;
		}
		qp->sq_tx++;
		qp->tx_sq_idx = idx;
		switch (w->opcode) {
		case KIWARP_WR_SEND:
		case KIWARP_WR_SEND_SE:
		case KIWARP_WR_SEND_INV:
		case KIWARP_WR_SEND_SE_INV:
			msg_init(qp, send_opcode(w->opcode), wr->len);
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
		case KIWARP_WR_RDMA_READ: {
			struct kw_read_req rr = {
				.sink_stag = w->num_sge ? w->sge[0].lkey : 0,
				.sink_to = w->num_sge ? w->sge[0].addr : 0,
				.size = wr->len,
				.src_stag = w->rkey,
				.src_to = w->remote_addr,
			};

			tx_read_req(qp, &rr, idx);
			qp->tx_kind = KW_TXK_SQ;
			return true;
		}
		}
		tx_sq_data(qp, wr, idx);
		return true;
	}
	return false;

local_error:
	/*
	 * RFC 5040 section 7.1: a request that cannot be built is answered
	 * with a Terminate "instead of the request", and nothing posted
	 * after it goes out: the QP stops here (TERMINATE), the WR completes
	 * in error (tx_local_done) and err_work has tx_work send the
	 * Terminate.
	 */
	qp->tx_local_done = true;
	kw_qp_local_error_locked(qp);
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
	/* the peer closed before our RTR went: nothing to make ready for
	 * (and an RTR Read could never be answered) */
	if (qp->peer_closed)
		qp->rtr_send = false;
	if (qp->rtr_send) {
		struct kw_read_req rr = {
			.sink_stag = KW_RTR_STAG, .src_stag = KW_RTR_STAG,
		};

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
			tx_read_req(qp, &rr, ~0U);
			return true;
		}
	}
	if (READ_ONCE(qp->rtr_wait) || READ_ONCE(qp->fenced))
		return false;	/* responder: not a byte before the RTR,
				 * or before the first FPDU */
	if (qp->irq_head != qp->irq_tail) {
		struct kw_irq *e = &qp->irq[qp->irq_head++ & (KW_MAX_IRD - 1)];

		qp->tx_irq = *e;
		e->src = NULL;
		msg_init(qp, KW_OP_READ_RESP, qp->tx_irq.req.size);
		/* FPDUs that fit a batch (smaller than MULPDU is allowed),
		 * with their markers */
		qp->tx_msg.mulpdu = min_t(u32, qp->tx_msg.mulpdu,
					  KW_TX_RESP_BATCH -
					  KW_TX_HDR_MAX -
					  sizeof_field(struct kw_tx_fpdu, trailer) -
					  (qp->mpa.markers_tx ?
					   KW_MPA_MARKERS_MAX(KW_TX_RESP_BATCH) :
					   0));
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
	case KW_TXK_SQ:
		/*
		 * TCP has its own copy: the buffer is free again. A flush
		 * may have completed the WR meanwhile (done, and its slot
		 * perhaps reused once sq_compl passed it).
		 */
		if (qp->tx_copy && (s32)(qp->tx_sq_idx - qp->sq_compl) >= 0)
			qp->sq_wr[qp->tx_sq_idx & (qp->sq.entries - 1)].done =
				true;
		break;
	default:
		break;
	}
	qp->tx_active = false;
	qp->tx_kind = KW_TXK_NONE;
	spin_unlock_bh(&qp->lock);
	tx_drop_refs(qp);
	kw_qp_wait_acks(qp);
	if (term) {
		/*
		 * The Terminate is out: now flush and shut the stream down.
		 * err_work once more, since the QP may be in ERROR already (a
		 * FIN or urgent data came after the error), when set_error
		 * does not queue it and the one that ran left the shutdown to
		 * us (qp_error_now()).
		 */
		kw_qp_set_error(qp);
		kw_qp_queue(qp, &qp->err_work);
	}
}

/* Why a transmit run stopped. */
enum tx_stop {
	TX_IDLE,	/* nothing left to send (or the QP is going) */
	TX_BUDGET,	/* the budget ran out: more may be ready */
	TX_BLOCKED,	/* TCP has no room: sk_write_space requeues us */
};

/*
 * Transmit until the queues are empty or TCP has no room, at most budget
 * batches; says which of the three stopped it.
 */
static enum tx_stop __tx_run(struct kw_qp *qp, unsigned int budget)
{
	int ret;

	lockdep_assert_held(&qp->tx_mutex);
again:
	while (!READ_ONCE(qp->dying) && qp->sock) {
		/* between batches: every cursor state here is resumable */
		if (!budget--)
			return TX_BUDGET;
		cond_resched();
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
			ret = tx_fill(qp);
			if (ret)
				goto fail;
		}
		set_bit(KW_TXF_WAIT_SPACE, &qp->tx_flags);
		ret = tx_push(qp);
		if (ret == -EAGAIN)
			return TX_BLOCKED;	/* sk_write_space requeues us */
		clear_bit(KW_TXF_WAIT_SPACE, &qp->tx_flags);
		if (ret)
			goto fail;
		if (!qp->tx_msg_cut) {
			ret = tx_fill(qp);
			if (ret)
				goto fail;
			continue;
		}
		tx_finish(qp);
	}

	/* WRs finished without transmitting (Local Invalidate) complete. */
	if (qp->tx_local_done) {
		qp->tx_local_done = false;
		kw_qp_wait_acks(qp);
	}

	/*
	 * An orderly close waits until everything posted went out, and the
	 * Read Responses the peer is owed (RFC 5041 section 6.2.1). CLOSING
	 * is set under qp->lock and then tx_work is queued, so a stale read
	 * here is followed by another run.
	 */
	if (READ_ONCE(qp->state) != KIWARP_QPS_CLOSING)
		return TX_IDLE;
	spin_lock_bh(&qp->lock);
	/*
	 * A responder still fenced (RFC 5044 section 7.1.2 rule 4: nothing
	 * received, so nothing sent) has nothing to finish that it could
	 * send: it closes now, and what was posted is flushed.
	 */
	if (qp->state == KIWARP_QPS_CLOSING && !qp->tx_active &&
	    ((qp->sq_compl == qp->sq_pulled && qp->orq_head == qp->orq_tail &&
	      qp->irq_head == qp->irq_tail) || READ_ONCE(qp->fenced))) {
		spin_unlock_bh(&qp->lock);
		kw_qp_set_error(qp);
		return TX_IDLE;
	}
	spin_unlock_bh(&qp->lock);
	return TX_IDLE;

fail:
	if (ret == -EACCES) {
		/* RFC 5040 section 7.2: the Read's source was revoked. */
		static const struct kw_term revoked = {
			.layer = KW_TERM_LAYER_RDMAP,
			.etype = KW_TERM_RDMAP_ETYPE_REMOTE_PROT,
			.ecode = KW_TERM_RDMAP_INV_STAG,
		};

		tx_abandon(qp);
		/* Only the Terminate can be picked now (TERMINATE state). */
		kw_qp_fail(qp, &revoked, NULL, 0);
		goto again;
	}
	pr_debug("qp %u: transmit failed: %d\n", qp->handle, ret);
	tx_abandon(qp);
	kw_qp_set_error(qp);
	return TX_IDLE;
}

static enum tx_stop tx_run(struct kw_qp *qp, unsigned int budget)
{
	enum tx_stop stop = __tx_run(qp, budget);

	tx_uncork(qp);
	return stop;
}

/*
 * Where a long transmit runs. tx_work runs at high priority (qp.c),
 * tx_bulk_work at normal priority, both at most KW_TX_BUDGET batches per
 * run. High priority is what keeps a busy-polling application from
 * halving its own transfers (it would share its CPU with a normal-priority
 * worker: 1 MiB Writes ran 30-40 % slower, performance.md), but no user's
 * traffic may keep a high-priority worker on a CPU. So a high-priority run
 * that used its whole budget (TCP kept taking what we sent) sets
 * qp->tx_hp_spent, and until a normal-priority run has run (its own
 * budget, unless TCP stops it first), tx_work, whoever queued it
 * (sk_write_space, a doorbell that found the transmit busy, the receive
 * path owing a Read Response), leaves the transmit to tx_bulk_work: other
 * tasks on the CPU get their share during each normal-priority run
 * (security.md, selftests/vm/fairness.sh). A run that stopped because TCP
 * had no room or nothing was left clears it: sk_write_space then starts
 * a high-priority run, at the pace TCP frees room. Both run under
 * tx_mutex, and either may find the other's work done.
 */
void kw_tx_work(struct work_struct *w)
{
	struct kw_qp *qp = container_of(w, struct kw_qp, tx_work);
	enum tx_stop stop;

	mutex_lock(&qp->tx_mutex);
	if (qp->tx_hp_spent) {
		/* a normal-priority run first (queued, or running now) */
		mutex_unlock(&qp->tx_mutex);
		kw_qp_queue_bulk(qp, &qp->tx_bulk_work);
		kw_qp_put(qp);
		return;
	}
	stop = tx_run(qp, KW_TX_BUDGET);
	qp->tx_hp_spent = stop == TX_BUDGET;
	mutex_unlock(&qp->tx_mutex);
	if (stop == TX_BUDGET)
		kw_qp_queue_bulk(qp, &qp->tx_bulk_work);
	kw_qp_put(qp);	/* the reference kw_qp_queue() took */
}

void kw_tx_bulk_work(struct work_struct *w)
{
	struct kw_qp *qp = container_of(w, struct kw_qp, tx_bulk_work);
	enum tx_stop stop;

	mutex_lock(&qp->tx_mutex);
	stop = tx_run(qp, KW_TX_BUDGET);
	qp->tx_hp_spent = false;
	mutex_unlock(&qp->tx_mutex);
	if (stop == TX_BUDGET)
		kw_qp_kick_tx(qp);
	kw_qp_put(qp);	/* the reference kw_qp_queue_bulk() took */
}

/*
 * A Read Response owed to a requester on this host, sent by the requester.
 *
 * Over loopback, the requester's doorbell sends its Read Request, and the
 * softirq that runs at the end of that send (still in the requester's
 * system call) receives it on the responder's socket. The Response then
 * needs a transmit in process context. A worker on this CPU would preempt
 * the requester, which polls for that very Response; one on the
 * responder's CPU must wake that CPU (kw_qp_kick_tx_peer()). Instead, the
 * doorbell that is running here sends the Response itself, once its own
 * transmit is over: no wakeup, no context switch, and loopback delivers
 * the Response to the requester in the same call.
 *
 * kw_tx_inline() claims its CPU's slot for its run, under tx_mutex (which
 * keeps its socket) and with migration disabled (so that the slot stays
 * its CPU's). The receive path, in a softirq this very task is serving,
 * parks the responder QP there with a reference (kw_tx_take_peer()), but
 * only if the responder's socket is the other end of the claimer's own
 * connection: same network namespace, addresses and ports swapped. Any
 * other QP whose segments a softirq in this task's time happens to carry
 * (a NIC's interrupt, a backlog) is someone else's and goes to a worker,
 * as before: a user's doorbell only ever sends Responses to its own Reads.
 * At most one QP per run. The slot is only touched on its CPU, with
 * softirqs off in process context.
 */
struct kw_tx_slot {
	struct task_struct *task;	/* in kw_tx_inline() here, or NULL */
	const struct sock *sk;		/* its QP's socket */
	struct kw_qp *peer;		/* owes a Response; holds a reference */
	int peer_cpu;			/* where its tx_work would go */
};

static DEFINE_PER_CPU(struct kw_tx_slot, kw_tx_slot);

/*
 * From the receive path of qp (its socket is installed: teardown removes
 * the callbacks first), which has a Read Response to send: true if the
 * task whose softirq this is will send it at the end of its own transmit
 * (kw_tx_inline()), false if the caller must queue the transmit on cpu,
 * where a rest of it will go too.
 */
bool kw_tx_take_peer(struct kw_qp *qp, int cpu)
{
	struct kw_tx_slot *slot;

	if (!in_serving_softirq() || (current->flags & PF_KTHREAD))
		return false;
	slot = this_cpu_ptr(&kw_tx_slot);
	if (slot->task != current)
		return false;
	if (slot->peer)
		return slot->peer == qp;	/* one QP per run */
	if (READ_ONCE(qp->dying) || !tx_sk_is_peer(slot->sk, qp->sock->sk))
		return false;
	kref_get(&qp->ref);
	slot->peer = qp;
	slot->peer_cpu = cpu;
	return true;
}

/* Claim this CPU's slot for the run of a doorbell; false if taken. */
static bool tx_slot_claim(const struct sock *sk)
{
	struct kw_tx_slot *slot;
	bool claimed;

	local_bh_disable();
	slot = this_cpu_ptr(&kw_tx_slot);
	/* another task's run, preempted on this CPU, keeps its claim */
	claimed = !slot->task;
	if (claimed) {
		slot->task = current;
		slot->sk = sk;
	}
	local_bh_enable();
	return claimed;
}

/*
 * Release the slot claimed on this CPU: the QP parked there (and its
 * tx_work's CPU in *cpu), or NULL.
 */
static struct kw_qp *tx_slot_release(int *cpu)
{
	struct kw_tx_slot *slot;
	struct kw_qp *peer;

	local_bh_disable();
	slot = this_cpu_ptr(&kw_tx_slot);
	peer = slot->peer;
	*cpu = slot->peer_cpu;
	slot->peer = NULL;
	slot->sk = NULL;
	slot->task = NULL;
	local_bh_enable();
	return peer;
}

/*
 * Charge what follows (__GFP_ACCOUNT: transmit page fragments) to sk's
 * memory cgroup if sockets have one, else leave the charging as it is;
 * returns what set_active_memcg() restores. sk_memcg holds its reference
 * for as long as the socket lives, which the caller keeps (tx_mutex).
 */
static struct mem_cgroup *tx_charge_to(const struct sock *sk)
{
#ifdef CONFIG_MEMCG
	if (sk->sk_memcg)
		return set_active_memcg(sk->sk_memcg);
	return current->active_memcg;
#else
	return NULL;
#endif
}

/*
 * The parked responder's transmit, in the requester's task, charged to
 * the responder socket's memory cgroup where sockets have one (as its own
 * doorbell would be; else to the requester's, whose Read it answers). At
 * most three batches: Read Responses go in batches of KW_TX_RESP_BATCH, so
 * one of up to 64 KiB is two, and a run learns that nothing is left only
 * by trying for another. The rest, or all of it if a worker or a doorbell
 * is transmitting for the QP now or its high-priority share is spent, goes
 * to tx_work on the responder's CPU, as kw_qp_kick_tx_peer() queues it.
 */
static void tx_run_peer(struct kw_qp *qp, int cpu)
{
	enum tx_stop stop = TX_BUDGET;

	if (mutex_trylock(&qp->tx_mutex)) {
		if (!qp->tx_hp_spent && qp->sock) {
			struct mem_cgroup *old;

			old = tx_charge_to(qp->sock->sk);
			stop = tx_run(qp, 3);
			set_active_memcg(old);
		}
		mutex_unlock(&qp->tx_mutex);
	}
	if (stop == TX_BUDGET)
		kw_qp_queue_tx_on(qp, cpu);
	kw_qp_put(qp);	/* the reference kw_tx_take_peer() took */
}

/*
 * Doorbell: transmit in the caller's context when nobody else is, instead
 * of waking a worker (a busy-polling peer on a small machine would make us
 * wait for a time slice). Sends never block; what TCP cannot take now is
 * finished by tx_work from sk_write_space. Then a Read Response that our
 * own Read Request made the peer on this host owe, if any (above).
 */
void kw_tx_inline(struct kw_qp *qp)
{
	struct kw_qp *peer = NULL;
	enum tx_stop stop;
	bool claimed;
	int cpu;

	if (!mutex_trylock(&qp->tx_mutex)) {
		kw_qp_kick_tx(qp);	/* tx_work or another caller is busy */
		return;
	}
	migrate_disable();
	claimed = qp->sock && tx_slot_claim(qp->sock->sk);
	stop = tx_run(qp, KW_TX_BUDGET);
	if (claimed)
		peer = tx_slot_release(&cpu);
	migrate_enable();
	if (stop != TX_BUDGET)
		qp->tx_hp_spent = false;
	mutex_unlock(&qp->tx_mutex);
	if (stop == TX_BUDGET)	/* the caller's run, then a normal one */
		kw_qp_queue_bulk(qp, &qp->tx_bulk_work);	/* kw_tx_work() */
	if (peer)
		tx_run_peer(peer, cpu);
}
