// SPDX-License-Identifier: GPL-2.0
/*
 * Held placement: the receive path's one-copy mode for a kernel-mapped
 * ring that a reader copies out of (es.c's receive buffer).
 *
 * Placing a tagged Write into such a ring in softirq and copying it out in
 * read() makes two passes over every byte where TCP makes one. Instead,
 * rx_place() hands the bytes of a Write into the ring's MR to
 * kw_rxh_place(), which keeps a reference to them (a clone of the skb,
 * shared by the pieces of one skb) and records where they belong: a
 * piece. The reader then copies a piece from the skb straight to its
 * iterator (kw_rxh_read()), and the ring's memory is never written. The
 * ring's contents are always what in-order placement would have made
 * them: the ring's bytes where no piece is held, a piece's bytes where
 * one is.
 *
 * Pieces are settled (their bytes copied into the ring, the clone freed)
 * whenever holding them is not the cheap or the safe way: a Write that
 * does not continue where the last piece ended (so pieces never overlap),
 * and a placement that cannot be held (no room for another piece, the
 * clones over the limit, a clone that cannot be allocated), which is then
 * copied after them, so that an older piece can never hide newer bytes;
 * a reader that does not consume (MSG_PEEK), or that reads inside the
 * held bytes rather than at their start; and the out-of-order placement
 * of a patched kernel (kw_rx_ooo_attach), which writes the ring itself.
 *
 * Memory: what a peer can make a socket hold is bounded by limit (the
 * clones' truesize; es.c sets it to twice its ring) and by KW_RXH_PIECES.
 * TCP uncharged the skbs from the socket when it handed them over, so a
 * clone is charged to the socket again, as TCP charges its receive queue
 * (sk_forward_alloc: the protocol's memory and the socket's memory
 * cgroup), and placed by copy if that fails. It fails over TCP's hard
 * limit (tcp_mem); the memory cgroup, charged with BHs off, counts it but
 * does not refuse it, as it does not refuse TCP's own receive queue in
 * softirq (the charge is forced past memory.max). The charge goes back when
 * the clone's last reference does; that needs the socket lock, which the
 * receive path holds and the reader does not, so a reader only adds it to
 * uncharge, and whoever holds the socket next returns it: the receive
 * path for the next skb, the reader itself once it is done
 * (kw_rxh_uncharge()), kw_rxh_free() at the end. sk_rmem_alloc is not
 * charged: TCP's window does not count held bytes, as it never counted
 * the ring's; the peer's credits bound them.
 *
 * Locking: rxh->lock (a spinlock, taken with BHs off) guards everything in
 * struct kw_rxh, every piece and every reference to a clone. The receive
 * path takes it under the socket lock and qp->lock (rx_place); the reader
 * under its own lock only, and drops it to copy, holding a reference of
 * its own to the clone. The socket lock, when taken, comes first.
 * A piece settled or released while a reader copies from it is noticed by
 * rxh->seq: the reader then leaves the ring alone (the bytes it copied are
 * the ones settled).
 *
 * Lifetime: set up by kw_rxh_enable() before the QP is connected (nothing
 * is received yet), freed with every piece by kw_rx_release() once the
 * receive path is detached from the socket. The socket the clones are
 * charged to is referenced until then, so that the charge is returned
 * before it can be destroyed. The MR is compared, never dereferenced;
 * base must outlive the QP (es.c frees it after the context, which
 * destroys the QP).
 */
#include <linux/skbuff.h>
#include <linux/slab.h>
#include <linux/uio.h>
#include <net/sock.h>

#include "qp.h"

#define KW_RXH_PIECES	256
/* A Write shorter than this with nothing held is copied: a clone and a
 * second walk cost more than the copy (a 64 B ping-pong's messages). */
#define KW_RXH_MIN	1024

struct kw_rxh_piece {
	struct sk_buff *skb;	/* a clone, referenced */
	u32 skb_off;		/* where the bytes are in it */
	u32 off, len;		/* where they belong in the ring */
};

struct kw_rxh {
	spinlock_t lock;
	struct sock *sk;	/* the clones are charged to it, referenced */
	const struct kw_mr *mr;	/* whose tagged placements are held */
	u8 *base;		/* its memory, mapped */
	u32 size;
	/*
	 * The pieces: p[head], ... in placement order, each starting where
	 * the one before it ended (mod size), total bytes in all: together
	 * they hold the ring's [p[head].off, p[head].off + total) (mod
	 * size), and no two overlap.
	 */
	u32 head, n, total;
	u64 seq;		/* bumped whenever the head piece goes (64
				 * bits: a reader stalled in a fault must
				 * never see it come round) */
	u32 charged, limit;	/* the clones' truesize, charged to sk */
	u32 uncharge;		/* of which let go: to return to sk */
	/* the skb rx_actor() is feeding, and our clone of it (referenced) */
	const struct sk_buff *cur_orig;
	struct sk_buff *cur;
	u64 held_bytes, settled_bytes;	/* statistics */
	struct kw_rxh_piece p[KW_RXH_PIECES];
};

int kw_rxh_enable(struct kw_qp *qp, struct sock *sk, const struct kw_mr *mr,
		  u8 *base, u32 size, u32 limit)
{
	struct kw_rxh *h;

	if (qp->rxh || READ_ONCE(qp->state) != KIWARP_QPS_IDLE)
		return -EINVAL;
	h = kzalloc(sizeof(*h), GFP_KERNEL_ACCOUNT);
	if (!h)
		return -ENOMEM;
	spin_lock_init(&h->lock);
	sock_hold(sk);
	h->sk = sk;
	h->mr = mr;
	h->base = base;
	h->size = size;
	h->limit = limit;
	qp->rxh = h;
	return 0;
}

/* Drop one of our references to a clone; rxh->lock held. */
static void rxh_put(struct kw_rxh *h, struct sk_buff *skb)
{
	lockdep_assert_held(&h->lock);
	if (refcount_read(&skb->users) == 1) {
		h->charged -= skb->truesize;
		WRITE_ONCE(h->uncharge, h->uncharge + skb->truesize);
	}
	consume_skb(skb);	/* read or settled: not a drop */
}

/* Return to the socket what the clones let go of: its lock and ours held. */
static void rxh_uncharge_locked(struct kw_rxh *h)
{
	lockdep_assert_held(&h->lock);
	lockdep_assert(lockdep_sock_is_held(h->sk));
	if (h->uncharge) {
		sk_mem_uncharge(h->sk, h->uncharge);
		WRITE_ONCE(h->uncharge, 0);
	}
}

/*
 * Charge a new clone, within the limit (the caller checked), to the
 * socket, as TCP charges what it queues; fails past TCP's hard limit
 * (then the bytes are copied). Both locks held; BHs off, so the memory
 * cgroup is charged without sleeping (gfp_memcg_charge()).
 */
static bool rxh_charge(struct kw_rxh *h, struct sk_buff *clone)
{
	lockdep_assert_held(&h->lock);
	lockdep_assert(lockdep_sock_is_held(h->sk));
	rxh_uncharge_locked(h);		/* what readers let go of first */
	if (!__sk_rmem_schedule(h->sk, clone->truesize, false))
		return false;
	sk_mem_charge(h->sk, clone->truesize);
	h->charged += clone->truesize;
	return true;
}

static void rxh_pop(struct kw_rxh *h)
{
	struct kw_rxh_piece *pc = &h->p[h->head];

	rxh_put(h, pc->skb);
	h->total -= pc->len;
	pc->skb = NULL;
	h->head = (h->head + 1) % KW_RXH_PIECES;
	h->n--;
	h->seq++;
}

/* Copy every piece into the ring, oldest first, and let the clones go. */
static void rxh_settle_locked(struct kw_rxh *h)
{
	lockdep_assert_held(&h->lock);
	while (h->n) {
		struct kw_rxh_piece *pc = &h->p[h->head];

		/* (cannot fail: the clone holds these bytes) */
		WARN_ON_ONCE(skb_copy_bits(pc->skb, pc->skb_off,
					   h->base + pc->off, pc->len));
		h->settled_bytes += pc->len;
		rxh_pop(h);
	}
}

/* The socket lock held. */
void kw_rxh_settle(struct kw_qp *qp)
{
	struct kw_rxh *h = qp->rxh;

	if (!h)
		return;
	spin_lock_bh(&h->lock);
	rxh_settle_locked(h);
	rxh_uncharge_locked(h);
	spin_unlock_bh(&h->lock);
}

/* A reader done for now returns what it let go of (socket unlocked). */
void kw_rxh_uncharge(struct kw_qp *qp)
{
	struct kw_rxh *h = qp->rxh;
	bool slow;

	if (!h || !READ_ONCE(h->uncharge))
		return;
	slow = lock_sock_fast(h->sk);
	spin_lock_bh(&h->lock);
	rxh_uncharge_locked(h);
	spin_unlock_bh(&h->lock);
	unlock_sock_fast(h->sk, slow);
}

/* Does the receive path hold the placements into mr? */
bool kw_rxh_holds(const struct kw_qp *qp, const struct kw_mr *mr)
{
	return qp->rxh && qp->rxh->mr == mr;
}

/*
 * The receive path places [off, off + len) of the ring from the skb being
 * fed (qp->rx_src: src points into its bytes). Held if it can be, else
 * copied after every held piece was settled. The socket lock and
 * qp->lock held, the MR's access begun; the bounds were checked against
 * the MR by the parser.
 */
void kw_rxh_place(struct kw_qp *qp, u64 off, const void *src, u32 len)
{
	struct kw_rxh *h = qp->rxh;
	const struct kw_rx_src *s = &qp->rx_src;
	struct kw_rxh_piece *pc;
	struct sk_buff *clone;
	u32 skb_off;

	lockdep_assert_held(&qp->lock);
	if (WARN_ON_ONCE(off > h->size || len > h->size - off))
		return;
	spin_lock(&h->lock);
	if (!s->skb || (const u8 *)src < s->data ||
	    (const u8 *)src - s->data > s->len ||
	    len > s->len - ((const u8 *)src - s->data))
		goto copy;	/* not from the skb being fed */
	skb_off = s->off + ((const u8 *)src - s->data);
	if (!h->n && len < KW_RXH_MIN)
		goto copy;
	if (h->n) {
		const struct kw_rxh_piece *first = &h->p[h->head];

		/* not right after the last piece, or the ring full: start
		 * afresh, so that no two pieces overlap */
		if ((first->off + h->total) % h->size != off ||
		    h->total + len > h->size)
			rxh_settle_locked(h);
	}
	if (h->cur_orig == s->skb) {
		if (!h->cur)
			goto copy;	/* this skb could not be held */
		/* the bytes after the last piece's in the same skb (the
		 * next fragment of one payload): that piece grows */
		pc = h->n ? &h->p[(h->head + h->n - 1) % KW_RXH_PIECES] : NULL;
		if (pc && pc->skb == h->cur && pc->off + pc->len == off &&
		    pc->skb_off + pc->len == skb_off) {
			pc->len += len;
			goto held;
		}
	}
	if (h->n == KW_RXH_PIECES)
		goto copy;
	if (h->cur_orig != s->skb) {
		if (h->cur) {
			rxh_put(h, h->cur);
			h->cur = NULL;
		}
		/* a failure below holds nothing more of this skb */
		h->cur_orig = s->skb;
		if (h->charged + s->skb->truesize > h->limit)
			goto copy;
		clone = skb_clone(s->skb, GFP_ATOMIC);
		if (!clone)
			goto copy;
		if (!rxh_charge(h, clone)) {
			consume_skb(clone);
			goto copy;
		}
		h->cur = clone;
	}
	pc = &h->p[(h->head + h->n) % KW_RXH_PIECES];
	pc->skb = skb_get(h->cur);
	pc->skb_off = skb_off;
	pc->off = off;
	pc->len = len;
	h->n++;
held:
	h->total += len;
	h->held_bytes += len;
	spin_unlock(&h->lock);
	return;
copy:
	rxh_settle_locked(h);
	memcpy(h->base + off, src, len);
	spin_unlock(&h->lock);
}

/*
 * rx_actor() is done with the skb: our clone of it stays with its pieces.
 * Under the socket lock: returns what readers let go of meanwhile.
 */
void kw_rxh_skb_done(struct kw_qp *qp)
{
	struct kw_rxh *h = qp->rxh;

	if (!h || (!h->cur_orig && !READ_ONCE(h->uncharge)))
		return;
	spin_lock_bh(&h->lock);
	if (h->cur)
		rxh_put(h, h->cur);
	h->cur = NULL;
	h->cur_orig = NULL;
	rxh_uncharge_locked(h);
	spin_unlock_bh(&h->lock);
}

/*
 * Copy the ring's bytes [off, off + n) (not wrapping) to @to: a held
 * piece's from its skb, the rest from the ring. consume: the caller takes
 * what was copied, so the pieces that held it go; otherwise (a peek) every
 * piece is settled first. Returns the bytes copied, fewer than n only if
 * @to faulted. Process context; the caller serializes readers.
 */
u32 kw_rxh_read(struct kw_qp *qp, u32 off, u32 n, struct iov_iter *to,
		bool consume)
{
	struct kw_rxh *h = qp->rxh;
	u32 done = 0;

	if (WARN_ON_ONCE(!h || off > h->size || n > h->size - off))
		return 0;
	while (done < n) {
		struct kw_rxh_piece *pc;
		struct sk_buff *skb;
		u32 k, got, skb_off;
		size_t before;
		u64 seq;

		spin_lock_bh(&h->lock);
		if (!consume)
			rxh_settle_locked(h);
		pc = h->n ? &h->p[h->head] : NULL;
		if (!pc || pc->off != off + done) {
			u32 r = off + done, end = pc ? pc->off + h->total : 0;

			/*
			 * The ring, up to where held bytes begin. The pieces
			 * hold [pc->off, end), and [0, end - size) if that
			 * wraps; reading where they hold, not at their start,
			 * settles them all.
			 */
			k = n - done;
			if (pc && ((pc->off < r && r < end) ||
				   (end > h->size && r < end - h->size)))
				rxh_settle_locked(h);
			else if (pc && pc->off > r)
				k = min(k, pc->off - r);
			spin_unlock_bh(&h->lock);
			got = copy_to_iter(h->base + r, k, to);
			done += got;
			if (got != k)
				break;
			continue;
		}
		k = min(n - done, pc->len);
		skb = skb_get(pc->skb);
		skb_off = pc->skb_off;
		seq = h->seq;
		spin_unlock_bh(&h->lock);

		before = iov_iter_count(to);
		/* on a fault it reverts @to: nothing was taken */
		skb_copy_datagram_iter(skb, skb_off, to, k);
		got = before - iov_iter_count(to);

		spin_lock_bh(&h->lock);
		/* unless the piece went meanwhile (settled: the same bytes) */
		if (h->seq == seq && !WARN_ON_ONCE(!h->n || got > pc->len)) {
			pc->skb_off += got;
			pc->off += got;
			pc->len -= got;
			h->total -= got;
			if (!pc->len)
				rxh_pop(h);
		}
		rxh_put(h, skb);
		spin_unlock_bh(&h->lock);
		done += got;
		if (got != k)
			break;
	}
	return done;
}

void kw_rxh_stats(struct kw_qp *qp, u64 *held, u64 *settled)
{
	struct kw_rxh *h = qp->rxh;

	*held = *settled = 0;
	if (!h)
		return;
	spin_lock_bh(&h->lock);
	*held = h->held_bytes;
	*settled = h->settled_bytes;
	spin_unlock_bh(&h->lock);
}

/*
 * The receive path is gone: let every clone go, and return their charge
 * to the socket. Process context, no reader left.
 */
void kw_rxh_free(struct kw_qp *qp)
{
	struct kw_rxh *h = qp->rxh;
	struct sock *sk;
	bool slow;

	if (!h)
		return;
	sk = h->sk;
	slow = lock_sock_fast(sk);
	spin_lock_bh(&h->lock);
	while (h->n)
		rxh_pop(h);
	if (h->cur)
		rxh_put(h, h->cur);
	WARN_ON_ONCE(h->charged);
	rxh_uncharge_locked(h);
	spin_unlock_bh(&h->lock);
	unlock_sock_fast(sk, slow);
	sock_put(sk);
	kfree(h);
	qp->rxh = NULL;
}
