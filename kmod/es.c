// SPDX-License-Identifier: GPL-2.0
/*
 * Extended sockets: a connected TCP socket switched to IWARP_MODE carries
 * its byte stream over iWARP, speaking rsockets' stream protocol
 * (rsock.c; Documentation/extended-sockets.md), and keeps its fd.
 *
 * The switch is a TCP ULP named "kiwarp" (as kTLS attaches): after
 * setsockopt(fd, SOL_TCP, TCP_ULP, "kiwarp") the socket wears a copy of
 * its own proto_ops that adds the SOL_IWARP options and changes nothing
 * else. setsockopt(fd, SOL_IWARP, IWARP_MODE, ...) then
 *  - swaps in the running ops (es_run_ops), so that from now on every
 *    read, write, poll, shutdown and close of the fd comes here;
 *  - builds a private kiwarp context (dev.c): a PD, one CQ, a QP and one
 *    piece of kernel memory holding the receive buffer, the target SGL,
 *    the send buffer and the message slots, registered as three MRs;
 *  - runs the MPA exchange in band on the socket, lending it to the QP
 *    (cm.c: kw_cm_kconnect/kw_cm_kaccept), with rsockets' connection data
 *    as private data.
 * A socket accepted from a listener that wears the ULP inherits it (clone)
 * and is the MPA responder by default; any other is the initiator.
 *
 * Data path: write() copies into the send buffer and posts an RDMA Write
 * into the buffer the peer advertised, followed by a 4-byte Send with the
 * DATA message. On a loopback route TCP takes the send buffer's pages by
 * reference (tx.c, kw_mr.tx_guarded), so a page may still be held by an
 * skb when its bytes come round again: es_sbuf_claim() then gives the
 * buffer a fresh chunk instead of rewriting it. read() copies out of the
 * receive buffer, into which the peer's Writes were placed by the receive
 * softirq. A zero-copy receive (IWARP_RECV_ZC, struct es_zr) advertises an
 * application's buffer instead, for the stream bytes past those already
 * due through rbuf. Completions are taken
 * from the CQ by whichever call holds es->lock (there is no thread of our
 * own); the CQ's notify callback only wakes the socket's waiters.
 *
 * Locking: es->lock (mutex) serializes every use of the ES state and of
 * the QP's rings; it is never held while sleeping for the peer (waits drop
 * it), except across the MPA exchange of the switch, which other callers
 * wait for (or get -EAGAIN when non-blocking). es->gen counts progress
 * (CQEs taken, state changes) under es->lock so that a waiter that saw no
 * room does not sleep through another thread's progress.
 *
 * Lifetime: the struct kw_es lives in icsk_ulp_data from ULP attach (or
 * clone) until the socket is destroyed (es_ulp_release). Its context, and
 * with it the QP that borrows the socket, is torn down in es_release(),
 * before the socket itself is released. Each socket wearing one of our
 * proto_ops tables holds a module reference (the tables' owner is kiwarp,
 * so sock_release() drops it).
 */
#include <linux/device.h>
#include <linux/module.h>
#include <linux/net.h>
#include <linux/poll.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uio.h>
#include <linux/ioctl.h>
#include <linux/mman.h>
#include <linux/overflow.h>
#include <linux/errqueue.h>
#include <asm/ioctls.h>
#include <net/inet_common.h>
#include <net/inet_connection_sock.h>
#include <net/sock.h>
#include <net/tcp.h>

#include "qp.h"
#include "rsock.h"

enum kw_es_state {
	ES_ATTACHED,	/* ULP on, still plain TCP */
	ES_STARTING,	/* IWARP_MODE: MPA exchange under way */
	ES_RUN,		/* an iWARP stream */
	ES_DEAD,	/* failed or torn down: es->err says why */
};

/* Ring sizes: SQ_RESERVE send slots are kept for credit and control
 * messages; the peer gets RQ_CREDITS message credits and RQ_ENTRIES -
 * RQ_CREDITS receives cover its credit and control messages. */
#define ES_SQ_ENTRIES		64
#define ES_SQ_RESERVE		4
#define ES_RQ_ENTRIES		64
#define ES_RQ_CREDITS		48
/* every receive, every signaled send not yet taken, and a flush of every
 * send slot (unsignaled Writes complete with a CQE when flushed) */
#define ES_CQ_ENTRIES		(2 * ES_SQ_ENTRIES + ES_RQ_ENTRIES)
#define ES_SLOT_LEN		32	/* one SGE, iomap entry or message */
#define ES_BUF_DEFAULT		(128 * 1024)
#define ES_BUF_MIN		(16 * 1024)
#define ES_BUF_MAX		(4 * 1024 * 1024)
/* sbuf: compound chunks of 2^ES_SBUF_ORDER pages (es_sbuf_claim()), 16 KiB
 * on 4 KiB pages; compound needs order 1 at least */
#define ES_SBUF_ORDER		(PAGE_SHIFT < 14 ? 14 - PAGE_SHIFT : 1)
#define ES_SBUF_CHUNK		(PAGE_SIZE << ES_SBUF_ORDER)
#define ES_TO_BASE		0x10000ULL	/* TOs of our MRs: never a
						 * kernel address */
#define ES_CLOSE_TIMEOUT	(5 * HZ)
/* truesize of the skbs the receive path may hold for read() (rxhold.c) */
#define ES_HOLD_LIMIT(rbuf)	(2 * (rbuf))

/* wr_id of send WRs: kind in the top byte, bytes of sbuf to free below */
#define ES_WR_DATA		(1ULL << 56)
#define ES_WR_CTRL		(2ULL << 56)
#define ES_WR_READ		(3ULL << 56)	/* IWARP_IOREAD's, | rd_seq */
#define ES_WR_ZC		(4ULL << 56)	/* a zero-copy send's DATA */
#define ES_ZC_CALLS		ES_SQ_ENTRIES	/* see es_zc_close() */
#define ES_RD_FLUSH_WAIT	30	/* s, for a reset Read's flush */
#define ES_WR_LEN(id)		((u32)(id))

struct kw_es {
	struct sock *sk;
	bool passive;		/* cloned from a listener */
	bool no_crc;		/* IWARP_CRC 0: decline MPA CRC */
	int rcvlowat;		/* SO_RCVLOWAT once switched: written
				 * under the socket lock (es_switch_begin,
				 * es_set_rcvlowat), read locklessly */
	struct mutex lock;	/* everything below */
	enum kw_es_state state;
	int err;		/* positive errno once ES_DEAD or failing */
	u32 gen;		/* progress counter (see top) */
	bool rd_eof;		/* the peer sent SHUTDOWN or DISCONNECT */
	bool peer_gone;		/* ... DISCONNECT: it reads no more */
	bool rd_shut, wr_shut;	/* local shutdown() */
	bool ctrl_sent;		/* our SHUTDOWN/DISCONNECT went out */
	bool disc_sent;		/* our DISCONNECT went out */

	struct kw_ctx *ctx;
	struct kw_qp *qp;	/* referenced */
	struct kw_cq *cq;	/* referenced */
	u32 qp_handle;
	struct kw_umem *mem;	/* rbuf, tsgl, slots */
	struct kw_umem *smem;	/* sbuf: chunks, no kernel mapping */
	u8 *rbuf, *tsgl, *sslots, *rslots;	/* in mem */
	u32 rbuf_size, sbuf_size;
	u32 rbuf_key, tsgl_key, lkey, sbuf_key;
	struct kw_mr *rbuf_mr;	/* referenced: its remote-write window */
	struct kw_mr *smr;	/* referenced: sbuf_key's, tx_guarded */
	u64 sb_replaced;	/* sbuf pages replaced (es_sbuf_claim) */
	u64 sbuf_to, sslots_to, rslots_to;
	struct kw_rs rs;

	/* one-sided writes (IWARP_IOMAP_SIZE, IWARP_IOMAP, IWARP_IOWRITE) */
	u32 iomap_size;		/* entries we offer (set before the switch) */
	u8 *iomap_tbl;		/* they, in tsgl after the target SGL */
	/*
	 * ... as the peer announced them: es_notify() decodes entry i when
	 * its IOMAP_SGL is placed, which is after the entry's Write and
	 * before any later one (the wire table may be half rewritten at
	 * any other time). iomap_lock: for readers in process context.
	 */
	struct kw_rs_iomap *peer_maps;
	spinlock_t iomap_lock;
	u32 pd_handle;		/* of ctx: the riomap()ed MRs' PD */
	struct es_iomap *maps;	/* our riomap()s: rs.remote_iomap_count */
	u32 maps_pending;	/* of them not yet announced to the peer */
	u64 iow_bytes;		/* riowrite() bytes sent */
	u64 ior_bytes;		/* IWARP_IOREAD bytes read */
	struct mutex rd_mutex;	/* one IWARP_IOREAD at a time (taken
				 * before es->lock) */
	bool rd_busy;		/* its Read WR posted, CQE not taken */
	bool rd_stuck;		/* one never completed: no more Reads */
	u8 rd_status;		/* that CQE's KIWARP_WC_* */
	u32 rd_seq;		/* the Read's, in its wr_id */

	/*
	 * Zero-copy sends (IWARP_MREG, MSG_ZEROCOPY). A call's bytes go as
	 * RDMA Writes from the registered pages, each followed by a DATA
	 * message with wr_id ES_WR_ZC; send WRs complete in order, so the
	 * call is done once zc_done reached zc_posted as it was when the
	 * call ended (its entry in zc_q). Every MSG_ZEROCOPY call has one,
	 * copied ones too, so that notifications keep the order of the
	 * calls; an entry goes once its notification is on the error queue.
	 * zc_open: calls under way that reserved an entry; they and zc_q
	 * stay within ES_ZC_CALLS (ENOBUFS beyond, as Linux's optmem).
	 */
	struct es_mreg *mregs;	/* IWARP_MREG_MAX, from the first */
	u32 mreg_count;
	u32 zc_posted, zc_done;	/* ES_WR_ZC WRs (free-running) */
	u32 zc_open;
	u32 zc_head, zc_tail;	/* zc_q (free-running) */
	struct es_zc {
		u32 seq;	/* done when zc_done reaches it */
		u32 id;		/* its notification's (sk_zckey) */
		u8 code;	/* 0, or SO_EE_CODE_ZEROCOPY_COPIED */
	} zc_q[ES_ZC_CALLS];
	u64 zc_bytes;

	/*
	 * A zero-copy receive (IWARP_RECV_ZC): the part of the caller's
	 * buffer that follows the bytes already due through rbuf, registered
	 * for remote write (mr_handle) and advertised as the peer's next
	 * target (rs.zc). It ends full (the DATA that fills it), or early:
	 * the end of the stream, a failure, a cancel. Its MR goes when it
	 * ends, before anyone is told (done), so that no byte is placed in
	 * the buffer after IWARP_RECV_ZC_DONE reported it.
	 */
	struct es_zr {
		bool posted;	/* until IWARP_RECV_ZC_DONE took the result */
		bool pinning;	/* its poster registers it, without es->lock */
		bool mr_valid;	/* mr_handle is its registration's */
		bool done;	/* ended: bytes and err final, MR gone */
		u32 gen;	/* which post (es->zr_gen) */
		u32 mr_handle;
		u64 id;
		u32 len;	/* in place: the buffer's length less pre */
		u32 bytes;	/* of them placed and announced by DATA */
		int err;	/* positive errno, or 0 */
	} zr;
	u64 zr_bytes;		/* in all (IWARP_INFO's zc_rx_bytes) */
	u32 zr_gen;

	u32 sq_prod;		/* send WRs posted (free-running) */
	u32 rq_prod;		/* receive WRs posted */
	u32 sb_head, sb_tail;	/* sbuf bytes produced / freed (counts) */
	u32 sb_off;		/* where the next bytes go, < sbuf_size */
	u32 sq_cqes;		/* signaled send WRs whose CQE is not taken */
	struct kiwarp_conn_param result;
	u64 tx_bytes, rx_bytes;

	/* a non-blocking IWARP_MODE: the MPA exchange runs in sw_work */
	struct work_struct sw_work;
	struct delayed_work sw_deadline;	/* shuts the socket down */
	struct socket *sw_sock;
	kuid_t sw_uid;		/* charged (es_bg_users) while busy */
	bool sw_initiator;
	bool sw_busy;		/* queued or running; es_release() waits */
};

/*
 * A riomap(): [addr, addr + len) of a user's memory, registered in our
 * context (remote write and/or read), announced as entry i of the peer's iomap
 * table (pending until a credit allowed it).
 */
struct es_iomap {
	bool used;
	bool pending;
	u32 mr_handle;
	u32 stag;
	u64 addr, len, offset;
};

/*
 * An IWARP_MREG: [addr, addr + len) of mm, registered in our context. Only
 * a send from that mm uses it (another holder of the fd, a child after
 * fork() or exec(), has other memory at those addresses); mm is grabbed so
 * that its address cannot come back as another process's.
 */
struct es_mreg {
	bool used;
	u32 mr_handle;
	u32 stag;
	u64 addr, len;
	struct mm_struct *mm;
};

static struct tcp_ulp_ops es_ulp_ops;

/*
 * Our state, only if the socket wears our ULP: a listener's child cloned
 * while the listener was between init() setting icsk_ulp_data and TCP
 * setting icsk_ulp_ops (listeners are cloned without their lock) holds a
 * copy of the listener's pointer, which is freed with the listener.
 */
static struct kw_es *es_of(const struct sock *sk)
{
	const struct inet_connection_sock *icsk = inet_csk(sk);

	if (READ_ONCE(icsk->icsk_ulp_ops) != &es_ulp_ops)
		return NULL;
	return (struct kw_es __force *)icsk->icsk_ulp_data;
}

/* --------------------------------------------------------- proto_ops */

struct es_ops {
	const struct proto_ops *orig;	/* TCP's, per family */
	struct proto_ops attached;	/* orig + SOL_IWARP options */
	struct proto_ops run;		/* the iWARP stream */
};
static struct es_ops es_ops[2];
static DEFINE_MUTEX(es_ops_lock);
static struct workqueue_struct *es_wq;

/*
 * Background switches, per user: each holds a kiwarp_es worker for up to
 * es_switch_deadline_ms. A user with ES_BG_PER_USER under way switches the
 * next one in its own thread (blocking), so one user's silent peers cannot
 * keep the shared workers from everybody else. The user is the account
 * kw_account_uid() names: the uids of a user namespace are its creator's
 * (before 2026-11-29 each uid counted on its own: four uids of one user
 * held all 256 workers, and every other user's background switch waited
 * out its deadline in the queue).
 */
#define ES_BG_PER_USER		64
static unsigned int es_switch_deadline_ms = 30000;	/* queue, Request, Reply */
module_param(es_switch_deadline_ms, uint, 0644);
MODULE_PARM_DESC(es_switch_deadline_ms,
		 "longest a non-blocking IWARP_MODE may take, in ms (default 30000)");
static struct kw_ucount es_bg_users = KW_UCOUNT_INIT(es_bg_users);

/*
 * Host-wide counters in /sys/class/misc/kiwarp/es/, readable by root only
 * (they span network namespaces, so other users would see each other's
 * traffic): how many switches succeeded and failed, and the stream bytes
 * that went over iWARP. They let a test (or an administrator) see that an
 * unmodified program's bytes took iWARP, not TCP.
 */
static atomic64_t es_stat_switched, es_stat_failed;
static atomic64_t es_stat_tx_bytes, es_stat_rx_bytes;
static atomic64_t es_stat_rx_held, es_stat_rx_settled;	/* rxhold.c */

/*
 * TCP's own ops, which ours wrap: those our table was built from. Only
 * ours call here, so the socket wears them, or a copy someone made of
 * them (kTLS copies the ops of its first socket): never its current ops,
 * which in a copy would call back here for ever.
 */
static const struct proto_ops *es_orig(const struct socket *sock)
{
	return es_ops[sock->sk->sk_family == AF_INET6].orig;
}

static struct es_ops *es_ops_of(const struct sock *sk)
{
	return &es_ops[sk->sk_family == AF_INET6];
}

/* ------------------------------------------------------------ wakeups */

static void es_wake(struct sock *sk)
{
	struct socket_wq *wq;

	rcu_read_lock();
	wq = rcu_dereference(sk->sk_wq);
	/* not only interruptible sleepers: es_ioread() waits killable */
	if (skwq_has_sleeper(wq))
		wake_up_poll(&wq->wait, EPOLLIN | EPOLLRDNORM | EPOLLOUT |
			     EPOLLWRNORM | EPOLLERR);
	rcu_read_unlock();
}

/*
 * CQ notify: any context, cq->lock held, for each CQE as it is produced.
 *
 * The receive buffer's window (kw_mr_window_*): the peer may Write only
 * into what we advertised and it has not yet announced as DATA, rbuf from
 * where the next DATA bytes are due. A DATA message closes its bytes here,
 * as its Send is placed, before the receive path takes anything that
 * follows it on the stream: a later Write over them (announced, maybe not
 * yet read) is a base or bounds Terminate, nothing placed. The window
 * grows in es_credit() before an advertisement goes out. A DATA length
 * the peer had no right to (es_rx_msg() fails the stream for it) just
 * empties the window.
 */
static void es_notify(void *arg, const struct kiwarp_cqe *cqe)
{
	struct kw_es *es = arg;

	if (cqe->opcode == KIWARP_WR_RECV &&
	    cqe->status == KIWARP_WC_SUCCESS &&
	    cqe->byte_len == KW_RS_MSG_LEN) {
		u32 slot = (u32)cqe->wr_id & (ES_RQ_ENTRIES - 1);
		u32 msg = kw_rs_msg_decode(es->rslots + slot * KW_RS_MSG_LEN);

		u32 val = msg & KW_RS_VAL_MASK;

		if (msg >> KW_RS_OP_SHIFT == KW_RS_OP_DATA) {
			kw_mr_window_move(es->rbuf_mr, val, 0);
		} else if (msg >> KW_RS_OP_SHIFT == KW_RS_OP_IOMAP_SGL &&
			   val < es->iomap_size) {
			/* (beyond the table: es_rx_msg() fails the stream) */
			spin_lock(&es->iomap_lock);
			kw_rs_iomap_decode(es->iomap_tbl +
					   val * KW_RS_IOMAP_LEN,
					   &es->peer_maps[val]);
			spin_unlock(&es->iomap_lock);
		}
	}
	es_wake(es->sk);
}

/* ------------------------------------------------------------ posting */

/*
 * Send WRs that may be posted now: free ring slots, but also no more than
 * ES_SQ_ENTRIES signaled ones whose CQE we have not taken (a WR's slot is
 * free when it completes, its CQE only once we took it), so that the CQ
 * never overflows (ES_CQ_ENTRIES).
 */
static u32 es_sq_free(struct kw_es *es)
{
	/* pairs with the store-release of cons when a WR completes */
	u32 cons = smp_load_acquire(es->qp->sq.cons);

	BUILD_BUG_ON(ES_CQ_ENTRIES < 2 * ES_SQ_ENTRIES + ES_RQ_ENTRIES);
	return min(es->qp->sq.entries - (es->sq_prod - cons),
		   ES_SQ_ENTRIES - es->sq_cqes);
}

static struct kiwarp_wqe *es_sq_next(struct kw_es *es)
{
	struct kiwarp_wqe *w;

	w = &es->qp->sq.wqe[es->sq_prod & (es->qp->sq.entries - 1)];
	memset(w, 0, sizeof(*w));
	return w;
}

/* The 32-byte slot of the next send WR, for its inline payload. */
static u8 *es_sslot(struct kw_es *es, u64 *to)
{
	u32 i = es->sq_prod & (ES_SQ_ENTRIES - 1);

	*to = es->sslots_to + i * ES_SLOT_LEN;
	return es->sslots + i * ES_SLOT_LEN;
}

static void es_sq_commit(struct kw_es *es)
{
	es->sq_prod++;
}

/* Hand what es_sq_commit() produced to the QP. */
static int es_doorbell(struct kw_es *es)
{
	struct kiwarp_handle h = { .handle = es->qp_handle };

	/* the WQEs before prod; pairs with the acquire in sq_pull_locked() */
	smp_store_release(es->qp->sq.prod, es->sq_prod);
	return kw_qp_doorbell(es->ctx, &h);
}

static void es_post_msg(struct kw_es *es, u32 msg, u64 wr_id)
{
	struct kiwarp_wqe *w;
	u64 to;
	u8 *slot = es_sslot(es, &to);

	kw_rs_msg_encode(msg, slot);
	w = es_sq_next(es);
	w->wr_id = wr_id;
	w->opcode = KIWARP_WR_SEND;
	w->flags = KIWARP_WR_SIGNALED;
	es->sq_cqes++;
	w->num_sge = 1;
	w->sge[0].addr = to;
	w->sge[0].length = KW_RS_MSG_LEN;
	w->sge[0].lkey = es->lkey;
	es_sq_commit(es);
}

/* An RDMA Write from lkey's MR; signaled (and counted) when wr_id is not 0. */
static void es_post_write_key(struct kw_es *es, u32 lkey, u64 src_to,
			      u32 len, const struct kw_rs_sge *dst, u64 wr_id)
{
	struct kiwarp_wqe *w = es_sq_next(es);

	if (wr_id) {
		w->wr_id = wr_id;
		w->flags = KIWARP_WR_SIGNALED;
		es->sq_cqes++;
	}
	w->opcode = KIWARP_WR_RDMA_WRITE;
	w->num_sge = 1;
	w->sge[0].addr = src_to;
	w->sge[0].length = len;
	w->sge[0].lkey = lkey;
	w->remote_addr = dst->addr;
	w->rkey = dst->key;
	es_sq_commit(es);
}

/* ... from a slot */
static void es_post_write(struct kw_es *es, u64 src_to, u32 len,
			  const struct kw_rs_sge *dst, u64 wr_id)
{
	es_post_write_key(es, es->lkey, src_to, len, dst, wr_id);
}

static void es_post_recv(struct kw_es *es)
{
	u32 i = es->rq_prod & (ES_RQ_ENTRIES - 1);
	struct kiwarp_wqe *w = &es->qp->rq.wqe[es->rq_prod &
					       (es->qp->rq.entries - 1)];

	memset(w, 0, sizeof(*w));
	w->wr_id = i;
	w->opcode = KIWARP_WR_RECV;
	w->num_sge = 1;
	w->sge[0].addr = es->rslots_to + i * KW_RS_MSG_LEN;
	w->sge[0].length = KW_RS_MSG_LEN;
	w->sge[0].lkey = es->lkey;
	es->rq_prod++;
	/* pairs with the load-acquire of prod in kw_qp_rq_pull() */
	smp_store_release(es->qp->rq.prod, es->rq_prod);
}

/* ------------------------------------------------------------ progress */

static void es_zr_end(struct kw_es *es, int err);

/* Stop the stream: the peer gets a reset. es->lock held. */
static void es_fail(struct kw_es *es, int err)
{
	struct kiwarp_modify_qp m = {
		.qp = es->qp_handle, .action = KIWARP_MODIFY_ERROR,
	};

	lockdep_assert_held(&es->lock);
	if (!es->err)
		es->err = err;
	if (es->state == ES_RUN) {
		sock_no_linger(es->sk);
		kw_qp_modify(es->ctx, &m);
		es_zr_end(es, es->err);
	}
	es->gen++;
}

/* The zero-copy receive ends (see struct es_zr); es->lock held. */
static void es_zr_end(struct kw_es *es, int err)
{
	struct kiwarp_handle h = { .handle = es->zr.mr_handle };

	lockdep_assert_held(&es->lock);
	if (!es->zr.posted || es->zr.done)
		return;
	kw_rs_zc_end(&es->rs);	/* (already forgotten when it filled) */
	/* no local WR ever uses it, so nothing can make it -EBUSY; one
	 * still being registered is its poster's to drop */
	if (es->zr.mr_valid && es->ctx)
		WARN_ON_ONCE(kw_mr_dereg(es->ctx, &h));
	es->zr.mr_valid = false;
	es->zr.done = true;
	es->zr.err = err;
	es->gen++;
}

/*
 * End the zero-copy receive before it filled: with err if the peer was
 * never given it, else by a reset of the stream with reset (the peer
 * keeps the right to write there until the stream ends). One being
 * registered is ended here and dropped by its poster. es->lock held.
 */
static void es_zr_stop(struct kw_es *es, int reset, int err)
{
	lockdep_assert_held(&es->lock);
	if (!es->zr.posted || es->zr.done)
		return;
	if (es->rs.zc_adv && es->state == ES_RUN)
		es_fail(es, reset);	/* ends it too */
	else
		es_zr_end(es, err);
}

/* A credit update, if one is due and there is room for it. */
static void es_credit(struct kw_es *es)
{
	struct kw_rs_credit c;
	u64 to;
	u8 *slot;

	lockdep_assert_held(&es->lock);
	if (es->err || es->disc_sent || !kw_rs_credit_due(&es->rs, &c) ||
	    es_sq_free(es) < 2)
		return;
	if (c.advert) {
		struct kw_rs_sge dst = {
			.addr = c.remote_to, .key = c.remote_key,
		};

		slot = es_sslot(es, &to);
		memcpy(slot, c.sge, KW_RS_SGE_LEN);
		es_post_write(es, to, KW_RS_SGE_LEN, &dst, 0);
	}
	es_post_msg(es, c.msg, ES_WR_CTRL);
	kw_rs_credit_sent(&es->rs, &c);
	/* the receive window grows before the peer can see the advert (a
	 * zero-copy target is an MR of its own, and all of it is open) */
	if (c.advert && !c.zc)
		kw_mr_window_move(es->rbuf_mr, 0, es->rs.half);
	if (es_doorbell(es))
		es_fail(es, ECONNRESET);
}

/* One received message. */
static void es_rx_msg(struct kw_es *es, const struct kiwarp_cqe *cqe)
{
	u32 slot = (u32)cqe->wr_id & (ES_RQ_ENTRIES - 1);
	u32 before = es->rs.readable, zleft = es->rs.zc_left;
	int ev;

	if (cqe->byte_len != KW_RS_MSG_LEN) {
		es_fail(es, EPROTO);
		return;
	}
	ev = kw_rs_rx_msg(&es->rs, kw_rs_msg_decode(es->rslots +
						    slot * KW_RS_MSG_LEN));
	switch (ev) {
	case KW_RS_EV_DATA:
		es->rx_bytes += es->rs.readable - before;
		atomic64_add(es->rs.readable - before, &es_stat_rx_bytes);
		break;
	case KW_RS_EV_ZC_DATA:
	case KW_RS_EV_ZC_DONE:
		if (ev == KW_RS_EV_ZC_DATA)
			zleft -= es->rs.zc_left;
		es->zr.bytes += zleft;
		es->zr_bytes += zleft;
		es->rx_bytes += zleft;
		atomic64_add(zleft, &es_stat_rx_bytes);
		if (ev == KW_RS_EV_ZC_DONE)
			es_zr_end(es, 0);
		break;
	case KW_RS_EV_SHUTDOWN:
		es->rd_eof = true;
		es_zr_end(es, 0);	/* no more DATA: as far as it got */
		break;
	case KW_RS_EV_DISCONNECT:
		es->rd_eof = true;
		es->peer_gone = true;
		es_zr_end(es, 0);
		break;
	case KW_RS_EV_NONE:
	case KW_RS_EV_CREDIT:
		break;
	default:	/* -EPROTO */
		es_fail(es, EPROTO);
		return;
	}
	es_post_recv(es);
}

/*
 * Announce the riomap()s not yet announced: for each, an RDMA Write of the
 * entry into the peer's iomap table and an IOMAP_SGL message, which takes
 * a message credit. What finds no credit or no room waits for the next
 * es_process().
 */
static void es_iomap_flush(struct kw_es *es)
{
	u32 i;

	lockdep_assert_held(&es->lock);
	if (!es->maps_pending || es->err || es->disc_sent)
		return;
	for (i = 0; i < es->rs.remote_iomap_count && es->maps_pending; i++) {
		struct es_iomap *m = &es->maps[i];
		struct kw_rs_iomap e = {
			.offset = m->offset,
			.sge = { .addr = m->addr, .key = m->stag, .len = m->len },
		};
		struct kw_rs_sge dst;
		u64 to;

		if (!m->pending)
			continue;
		if (es_sq_free(es) < 2 + ES_SQ_RESERVE ||
		    !kw_rs_iomap_dst(&es->rs, i, &dst))
			return;
		kw_rs_iomap_encode(&e, es_sslot(es, &to));
		es_post_write(es, to, KW_RS_IOMAP_LEN, &dst, 0);
		es_post_msg(es, kw_rs_iomap_sent(&es->rs, i), ES_WR_CTRL);
		m->pending = false;
		es->maps_pending--;
		if (es_doorbell(es)) {
			es_fail(es, ECONNRESET);
			return;
		}
	}
}

/*
 * MSG_ZEROCOPY's notification that call id is done, as Linux gives it:
 * merged into the error queue's last one when that ends at id - 1 with the
 * same code, else queued, charged to the receive buffer. False if there is
 * no room (or memory): the call stays in zc_q, es_zc_reap() tries again.
 */
static bool es_zc_notify(struct kw_es *es, u32 id, u8 code)
{
	struct sock *sk = es->sk;
	struct sk_buff_head *q = &sk->sk_error_queue;
	struct sock_exterr_skb *serr;
	struct sk_buff *skb;
	unsigned long flags;
	bool merged = false;

	lockdep_assert_held(&es->lock);
	spin_lock_irqsave(&q->lock, flags);
	skb = skb_peek_tail(q);
	if (skb) {
		serr = SKB_EXT_ERR(skb);
		if (serr->ee.ee_origin == SO_EE_ORIGIN_ZEROCOPY &&
		    serr->ee.ee_code == code && serr->ee.ee_data + 1 == id &&
		    serr->ee.ee_data - serr->ee.ee_info < U32_MAX - 1) {
			serr->ee.ee_data = id;
			merged = true;
		}
	}
	spin_unlock_irqrestore(&q->lock, flags);
	if (merged) {
		sk_error_report(sk);
		return true;
	}
	/* no room: not worth an allocation (sock_queue_err_skb() decides) */
	if (atomic_read(&sk->sk_rmem_alloc) >= READ_ONCE(sk->sk_rcvbuf))
		return false;
	skb = alloc_skb(0, GFP_KERNEL);
	if (!skb)
		return false;
	serr = SKB_EXT_ERR(skb);
	memset(serr, 0, sizeof(*serr));
	serr->ee.ee_origin = SO_EE_ORIGIN_ZEROCOPY;
	serr->ee.ee_code = code;
	serr->ee.ee_info = id;
	serr->ee.ee_data = id;
	if (sock_queue_err_skb(sk, skb)) {
		kfree_skb(skb);
		return false;
	}
	return true;
}

/* Notify, in order, the calls whose WRs all completed. */
static void es_zc_reap(struct kw_es *es)
{
	lockdep_assert_held(&es->lock);
	while (es->zc_head != es->zc_tail) {
		struct es_zc *c = &es->zc_q[es->zc_head % ES_ZC_CALLS];

		if ((s32)(es->zc_done - c->seq) < 0 ||
		    !es_zc_notify(es, c->id, c->code))
			break;
		es->zc_head++;
	}
}

/* Reserve zc_q's entry for a MSG_ZEROCOPY call; false: ENOBUFS. */
static bool es_zc_reserve(struct kw_es *es)
{
	lockdep_assert_held(&es->lock);
	if (es->zc_tail - es->zc_head + es->zc_open >= ES_ZC_CALLS)
		return false;
	es->zc_open++;
	return true;
}

/*
 * The end of a MSG_ZEROCOPY call: if it sent bytes, it takes the next id
 * (Linux's sk_zckey) and its entry. Its notification comes once every WR
 * posted so far completed, which covers its own (others' calls may have
 * posted in between: theirs are waited for too, which is late, never
 * early): at once for a call whose bytes were all copied, unless an
 * earlier call is still waited for.
 */
static void es_zc_close(struct kw_es *es, bool sent, bool zc)
{
	lockdep_assert_held(&es->lock);
	es->zc_open--;
	if (!sent)
		return;
	/* the QP copies while the stack copies by-reference pages anyway */
	if (zc && es->qp) {
		spin_lock_bh(&es->qp->lock);
		zc = !kw_tx_path_copies(es->qp);
		spin_unlock_bh(&es->qp->lock);
	}
	es->zc_q[es->zc_tail % ES_ZC_CALLS] = (struct es_zc){
		.seq = es->zc_posted,
		.id = (u32)atomic_inc_return(&es->sk->sk_zckey) - 1,
		.code = zc ? 0 : SO_EE_CODE_ZEROCOPY_COPIED,
	};
	es->zc_tail++;
	es_zc_reap(es);
}

static void es_send_ctrl(struct kw_es *es);

/* Take every completion there is; true if any. es->lock held. */
static bool es_process(struct kw_es *es)
{
	struct kiwarp_cqe cqe;
	bool any = false;

	lockdep_assert_held(&es->lock);
	if (es->state != ES_RUN)
		return false;
	kw_ctx_note_cpu(es->ctx);	/* the stream's user: Read Responses */
	while (kw_cq_poll_kernel(es->cq, &cqe)) {
		any = true;
		if (cqe.opcode != KIWARP_WR_RECV && (cqe.wr_id >> 56))
			es->sq_cqes--;	/* ours all carry a kind */
		/* a flushed one too, as any flushed WR (tx.c, qp.c) */
		if (cqe.opcode != KIWARP_WR_RECV && cqe.wr_id == ES_WR_ZC)
			es->zc_done++;
		if (cqe.opcode != KIWARP_WR_RECV &&
		    (cqe.wr_id & ~0xffffffffULL) == ES_WR_READ &&
		    (u32)cqe.wr_id == es->rd_seq) {
			es->rd_busy = false;	/* its sink may go */
			es->rd_status = cqe.status;
		}
		if (cqe.status != KIWARP_WC_SUCCESS) {
			/* a flush after the peer's DISCONNECT is its close */
			es_fail(es, es->peer_gone ? EPIPE : ECONNRESET);
			continue;
		}
		if (cqe.opcode == KIWARP_WR_RECV) {
			if (!es->err)
				es_rx_msg(es, &cqe);
		} else if ((cqe.wr_id & ~0xffffffffULL) == ES_WR_DATA) {
			es->sb_tail += ES_WR_LEN(cqe.wr_id);
		}
	}
	es_zc_reap(es);		/* also what found no room before */
	if (!es->err) {
		es_credit(es);
		es_iomap_flush(es);
		es_send_ctrl(es);	/* one that found no room before */
	}
	if (any)
		es->gen++;
	return any;
}

/* Process, then wake whoever waits on what changed. */
static void es_unlock(struct kw_es *es, u32 gen)
{
	bool changed = es->gen != gen;

	mutex_unlock(&es->lock);
	if (changed)
		es_wake(es->sk);
}

/*
 * Sleep until something changes (es->gen moved or a CQE is waiting) or
 * the timeout runs out (-EAGAIN), in task state `state`: interruptible
 * (a signal ends it), killable (a fatal one does: -EINTR) or
 * uninterruptible. Returns the time left or an error.
 */
static long es_wait_state(struct kw_es *es, u32 gen, long timeo,
			  unsigned int state)
{
	DEFINE_WAIT_FUNC(wait, woken_wake_function);
	struct sock *sk = es->sk;

	add_wait_queue(sk_sleep(sk), &wait);
	while (READ_ONCE(es->gen) == gen &&
	       smp_load_acquire(es->cq->prod) == READ_ONCE(*es->cq->cons)) {
		if (state == TASK_INTERRUPTIBLE && signal_pending(current)) {
			timeo = sock_intr_errno(timeo);
			break;
		}
		if (state == TASK_KILLABLE && fatal_signal_pending(current)) {
			timeo = -EINTR;
			break;
		}
		if (!timeo) {
			timeo = -EAGAIN;
			break;
		}
		timeo = wait_woken(&wait, state, timeo);
	}
	remove_wait_queue(sk_sleep(sk), &wait);
	if (timeo > 0 || timeo == MAX_SCHEDULE_TIMEOUT)
		return timeo;
	return timeo ? timeo : -EAGAIN;
}

static long es_wait(struct kw_es *es, u32 gen, long timeo)
{
	return es_wait_state(es, gen, timeo, TASK_INTERRUPTIBLE);
}

/* 0 if the stream runs and has not failed, else the errno a call gets. */
static int es_running(const struct kw_es *es)
{
	if (es->state != ES_RUN)
		return es->err ? -es->err : -ENOTCONN;
	return es->err ? -es->err : 0;
}

/*
 * Lock for an operation on the stream. es->lock is held long only by the
 * switch (the MPA exchange): a non-blocking caller gets -EAGAIN then, and
 * otherwise waits for the short holds (a -EAGAIN there could make an
 * edge-triggered poller miss data that is there).
 */
static int es_lock(struct kw_es *es, bool nonblock)
{
	int ret;

	for (;;) {
		if (!mutex_trylock(&es->lock)) {
			if (nonblock && READ_ONCE(es->state) == ES_STARTING)
				return -EAGAIN;
			ret = mutex_lock_interruptible(&es->lock);
			if (ret)
				return ret;
		}
		if (es->state != ES_STARTING)
			return 0;
		/* a non-blocking switch between its setsockopt and its work */
		mutex_unlock(&es->lock);
		if (nonblock)
			return -EAGAIN;
		ret = wait_event_interruptible(*sk_sleep(es->sk),
				READ_ONCE(es->state) != ES_STARTING);
		if (ret)
			return ret;
	}
}

/* The opening of most calls on the stream: es_lock(), then take what
 * completed; es_unlock(es, *gen0) ends it. */
static int es_lock_process(struct kw_es *es, u32 *gen0)
{
	int ret = es_lock(es, false);

	if (ret)
		return ret;
	*gen0 = es->gen;
	es_process(es);
	return 0;
}

/* poll() and ioctl(): not interruptible either (a poller whose poll()
 * returned 0 for a signal could lose an edge); false while switching. */
static bool es_lock_brief(struct kw_es *es)
{
	if (mutex_trylock(&es->lock))
		return true;
	if (READ_ONCE(es->state) == ES_STARTING)
		return false;
	mutex_lock(&es->lock);
	return true;
}

/* ---------------------------------------------------------------- send */

/* sbuf bytes free: neither written nor awaiting their WR's completion */
static u32 es_sbuf_free(const struct kw_es *es)
{
	return es->sbuf_size - (es->sb_head - es->sb_tail);
}

/*
 * The send buffer goes to TCP by page reference (tx.c: its MR is
 * tx_guarded), and an skb may hold a page of it long after the WR that
 * sent the page's bytes completed: a receiver on this host that has not
 * read them yet, the retransmit queue. Those bytes are never rewritten.
 *
 * sbuf is made of compound chunks (ES_SBUF_CHUNK), each counted as one
 * (an skb's reference to any page of it counts on the head), and is
 * filled in ring order. A chunk is claimed before its first byte is
 * written in each lap, and only when all of it is free: every WR of the
 * last lap that used it completed, and a WR completes only after TCP took
 * its page references. A count of 1 then means nobody but us holds any
 * byte of it, and it is written in place; otherwise an skb of an earlier
 * lap does, and the chunk is replaced by a fresh one (the skb keeps the
 * old one until it lets go). From its claim to the next lap only this
 * lap's WRs use it. A transient reference of somebody else only costs a
 * chunk. Compound also keeps a receiver on this host from mapping the
 * pages it got into its address space (TCP_ZEROCOPY_RECEIVE takes order-0
 * pages only) and holding them beyond what TCP charges for.
 *
 * Returns how many of the n bytes from off on may be written now, 0 if
 * none yet (a completion will come: less than a chunk is free, so WRs are
 * in flight), or -ENOMEM.
 */
static int es_sbuf_claim(struct kw_es *es, u32 off, u32 n)
{
	u32 free = es_sbuf_free(es), c;

	lockdep_assert_held(&es->lock);
	for (c = round_up(off, ES_SBUF_CHUNK); c < off + n;
	     c += ES_SBUF_CHUNK) {
		unsigned long i = c >> PAGE_SHIFT;
		struct page *head, *old;

		if (c + ES_SBUF_CHUNK - off > free)
			return c - off;	/* a WR of the last lap uses it */
		/*
		 * Not guarded (not a loopback route): a WR that went by
		 * reference completed when its ubuf was let go, which the
		 * last skb does just before it drops its page references.
		 */
		if (!es->smr->tx_guarded ||
		    page_ref_count(kw_umem_page(es->smem, i)) == 1)
			continue;
		head = alloc_pages(GFP_KERNEL_ACCOUNT | __GFP_ZERO | __GFP_COMP |
				   __GFP_NOWARN, ES_SBUF_ORDER);
		if (!head)
			return c - off ? c - off : -ENOMEM;
		/* (never NULL: the MR covers smem, i is a chunk of it) */
		old = kw_mr_replace_chunk(es->smr, i, head);
		put_page(old ? old : head);
		if (!old)
			return c - off ? c - off : -EINVAL;
		es->sb_replaced += 1U << ES_SBUF_ORDER;
	}
	return n;
}

/* Whether es_sbuf_claim() lets at least a byte be written now. */
static bool es_sbuf_writable(struct kw_es *es)
{
	u32 free = es_sbuf_free(es);

	lockdep_assert_held(&es->lock);
	return free && (!IS_ALIGNED(es->sb_off, ES_SBUF_CHUNK) ||
			free >= ES_SBUF_CHUNK);
}

/* Copy n bytes into sbuf at off (claimed), page by page: it has no kernel
 * mapping of its own. */
static int es_sbuf_fill(struct kw_es *es, u32 off, u32 n,
			struct iov_iter *from)
{
	while (n) {
		struct page *page = kw_umem_page(es->smem, off >> PAGE_SHIFT);
		u32 k = min_t(u32, n, PAGE_SIZE - offset_in_page(off));

		if (copy_page_from_iter(page, offset_in_page(off), k,
					from) != k)
			return -EFAULT;
		off += k;
		n -= k;
	}
	return 0;
}

/*
 * kw_rs_tx_room() reads the next target SGL entry when the current buffer
 * is full; the peer's Write of that entry is placed by our socket's receive
 * path, which runs under the socket lock (in softirq, bh_lock_sock; in
 * process context, lock_sock): taking it keeps the read from seeing a
 * half-placed entry.
 */
static u32 es_tx_room(struct kw_es *es, struct kw_rs_sge *dst)
{
	u32 room;

	lockdep_assert_held(&es->lock);
	if (es->rs.target.len)
		return kw_rs_tx_room(&es->rs, es->tsgl, dst);
	lock_sock(es->sk);
	room = kw_rs_tx_room(&es->rs, es->tsgl, dst);
	release_sock(es->sk);
	return room;
}

/*
 * riowrite(), IWARP_IOREAD: where the byte at pos of the peer's mappings
 * is (*dst) and how many follow it in the same mapping; 0 if no mapping
 * holds pos, as the peer announced them (peer_maps).
 */
static u64 es_iow_room(struct kw_es *es, u64 pos, struct kw_rs_sge *dst)
{
	struct kw_rs_iomap m;
	unsigned long flags;
	bool found = false;

	lockdep_assert_held(&es->lock);
	if (es->peer_maps) {
		spin_lock_irqsave(&es->iomap_lock, flags);
		found = kw_rs_iomap_find(&es->rs, es->peer_maps, pos, &m);
		spin_unlock_irqrestore(&es->iomap_lock, flags);
	}
	if (!found)
		return 0;
	dst->addr = m.sge.addr + (pos - m.offset);
	dst->key = m.sge.key;
	return m.sge.len - (pos - m.offset);
}

/*
 * The offset of an IWARP_IOWRITE control message: 1 if msg has one, 0 if
 * not, -EINVAL if it is malformed or not alone of its level. Control
 * messages of other levels are ignored, as before.
 */
static int es_cmsg_iowrite(struct msghdr *msg, u64 *pos)
{
	struct cmsghdr *c;
	int found = 0;

	if (!msg->msg_controllen)
		return 0;
	if (msg->msg_control_is_user)
		return -EINVAL;	/* sendmsg() copies it in: not expected */
	for_each_cmsghdr(c, msg) {
		if (!CMSG_OK(msg, c))
			return -EINVAL;
		if (c->cmsg_level != SOL_IWARP)
			continue;
		if (found || c->cmsg_type != IWARP_IOWRITE ||
		    c->cmsg_len != CMSG_LEN(sizeof(*pos)))
			return -EINVAL;
		memcpy(pos, CMSG_DATA(c), sizeof(*pos));
		found = 1;
	}
	return found;
}

/*
 * The IWARP_MREG registration that holds all of msg's bytes, which must be
 * one range of user memory; NULL if none does.
 */
static struct es_mreg *es_zc_mreg(struct kw_es *es, const struct iov_iter *it,
				  u64 *addr)
{
	u64 a, end;
	u32 i;

	lockdep_assert_held(&es->lock);
	if (iter_is_ubuf(it))
		a = (unsigned long)it->ubuf + it->iov_offset;
	else if (iter_is_iovec(it) && it->nr_segs == 1)
		a = (unsigned long)iter_iov(it)->iov_base + it->iov_offset;
	else
		return NULL;
	if (!es->mregs || check_add_overflow(a, (u64)it->count, &end))
		return NULL;
	for (i = 0; i < IWARP_MREG_MAX; i++) {
		struct es_mreg *r = &es->mregs[i];

		if (r->used && r->mm == current->mm &&
		    a >= r->addr && end <= r->addr + r->len) {
			*addr = a;
			return r;
		}
	}
	return NULL;
}

/*
 * write() and friends: into the stream (an RDMA Write into the buffer the
 * peer advertised, then a DATA message); with IWARP_IOWRITE, one-sided
 * into the peer's mappings (a signaled RDMA Write alone, which frees its
 * sbuf bytes when it completes). MSG_ZEROCOPY (with SO_ZEROCOPY) of bytes
 * in an IWARP_MREG registration: the Writes go from its pages, no copy
 * into sbuf (es_zc_close()).
 */
static int es_sendmsg(struct socket *sock, struct msghdr *msg, size_t len)
{
	struct sock *sk = sock->sk;
	struct kw_es *es = es_of(sk);
	bool nonblock = msg->msg_flags & MSG_DONTWAIT;
	long timeo = sock_sndtimeo(sk, nonblock);
	/*
	 * MSG_ZEROCOPY as TCP takes it: with SO_ZEROCOPY, and not when the
	 * caller brings its own ubuf_info (io_uring's send-zc, which counts
	 * on the pages being free when we return: our copy makes them so).
	 */
	bool zc_req = (msg->msg_flags & MSG_ZEROCOPY) && len &&
		      sock_flag(sk, SOCK_ZEROCOPY) && !msg->msg_ubuf;
	bool zc_rsv = false;	/* its zc_q entry is reserved */
	bool zc_open = false;	/* posted from a registration */
	bool zc_copy = false;	/* ... and copied some */
	size_t copied = 0;
	u64 iow_pos = 0, end;
	int ret = 0, iow, claim;
	u32 gen0, gen;

	if (msg->msg_flags & MSG_OOB)
		return -EOPNOTSUPP;
	iow = es_cmsg_iowrite(msg, &iow_pos);
	if (iow < 0)
		return iow;
	if (iow && check_add_overflow(iow_pos, (u64)len, &end))
		return -EINVAL;
	for (;;) {
		struct es_mreg *zc = NULL;
		u64 zc_addr = 0;

		ret = es_lock(es, nonblock);
		if (ret)
			break;
		gen0 = es->gen;
		es_process(es);
		if (zc_req && !zc_rsv) {
			zc_rsv = es_zc_reserve(es);
			if (!zc_rsv) {
				/* notifications unread: as Linux's optmem */
				es_unlock(es, gen0);
				ret = -ENOBUFS;
				break;
			}
		}
		/*
		 * Found anew after each wait: an IWARP_MDEREG meanwhile (it
		 * succeeds once our WRs completed) makes the rest a copy.
		 */
		if (zc_req && !iow)
			zc = es_zc_mreg(es, &msg->msg_iter, &zc_addr);
		while (copied < len) {
			struct kw_rs_sge dst;
			u32 room, off, n;

			if (es->state != ES_RUN) {
				ret = es->err ? -es->err : -ENOTCONN;
				break;
			}
			if (es->wr_shut || es->peer_gone || es->err) {
				ret = es->err == EPROTO ? -EPROTO : -EPIPE;
				break;
			}
			if (es_sq_free(es) < 2 + ES_SQ_RESERVE)
				break;
			if (iow) {
				room = min_t(u64, KW_RS_MAX_TRANSFER,
					     es_iow_room(es, iow_pos + copied,
							 &dst));
				if (!room) {
					ret = -EINVAL;	/* not mapped */
					break;
				}
			} else {
				room = es_tx_room(es, &dst);
			}
			if (zc) {
				n = min_t(size_t, room, len - copied);
				if (!n)
					break;
				zc_open = true;
				es_post_write_key(es, zc->stag,
						  zc_addr, n, &dst, 0);
				es_post_msg(es, kw_rs_tx_sent(&es->rs, n),
					    ES_WR_ZC);
				es->zc_posted++;
				iov_iter_advance(&msg->msg_iter, n);
				zc_addr += n;
				es->tx_bytes += n;
				es->zc_bytes += n;
				atomic64_add(n, &es_stat_tx_bytes);
				copied += n;
				if (es_doorbell(es)) {
					es_fail(es, ECONNRESET);
					ret = -ECONNRESET;
					break;
				}
				continue;
			}
			zc_copy = true;
			off = es->sb_off;
			n = min3(room, es_sbuf_free(es), es->sbuf_size - off);
			n = min_t(size_t, n, len - copied);
			claim = es_sbuf_claim(es, off, n);
			if (claim <= 0) {
				ret = claim;	/* 0: wait for completions */
				break;
			}
			n = claim;
			ret = es_sbuf_fill(es, off, n, &msg->msg_iter);
			if (ret)
				break;
			if (iow) {
				es_post_write_key(es, es->sbuf_key,
						  es->sbuf_to + off, n, &dst,
						  ES_WR_DATA | n);
				es->iow_bytes += n;
			} else {
				es_post_write_key(es, es->sbuf_key,
						  es->sbuf_to + off, n, &dst, 0);
				es_post_msg(es, kw_rs_tx_sent(&es->rs, n),
					    ES_WR_DATA | n);
				es->tx_bytes += n;
				atomic64_add(n, &es_stat_tx_bytes);
			}
			es->sb_head += n;
			es->sb_off = off + n == es->sbuf_size ? 0 : off + n;
			copied += n;
			if (es_doorbell(es)) {
				es_fail(es, ECONNRESET);
				ret = -ECONNRESET;
				break;
			}
		}
		if (zc_rsv && (ret || copied == len)) {
			es_zc_close(es, copied, zc_open && !zc_copy);
			zc_rsv = false;
		}
		gen = es->gen;
		es_unlock(es, gen0);
		if (ret || copied == len)
			break;
		timeo = es_wait(es, gen, timeo);
		if (timeo < 0) {
			ret = timeo;
			break;
		}
	}
	if (zc_rsv) {
		/* the wait ended it: a signal, the timeout */
		mutex_lock(&es->lock);
		gen0 = es->gen;
		es_zc_close(es, copied, zc_open && !zc_copy);
		es_unlock(es, gen0);
	}
	if (copied)
		return copied;
	if (ret == -EPIPE && !(msg->msg_flags & MSG_NOSIGNAL))
		send_sig(SIGPIPE, current, 0);
	return ret;
}

/*
 * Not switched (yet, or never: a listener, a failed switch): TCP's own,
 * which would send a one-sided write's bytes into the plain stream.
 */
static int es_sendmsg_attached(struct socket *sock, struct msghdr *msg,
			       size_t len)
{
	u64 pos;
	int iow = es_cmsg_iowrite(msg, &pos);

	if (iow)
		return iow < 0 ? iow : -ENOTCONN;
	return es_orig(sock)->sendmsg(sock, msg, len);
}

/* ------------------------------------------------------------- receive */

/*
 * Copy n readable bytes, skip bytes in, to the iterator: from the receive
 * ring, or from the skbs the receive path holds for it (rxhold.c), which
 * a reader that consumes (!peek) lets go. Returns the bytes copied, fewer
 * than n only on a fault.
 */
static u32 es_copy_out(struct kw_es *es, struct msghdr *msg, u32 skip, u32 n,
		       bool peek)
{
	u32 size = es->rbuf_size, off = (es->rs.rd_off + skip) % size;
	u32 done = 0;

	lockdep_assert_held(&es->lock);
	while (done < n) {
		u32 k = min(n - done, size - off), got;

		got = kw_rxh_read(es->qp, off, k, &msg->msg_iter, !peek);
		done += got;
		if (got != k)
			break;
		off = (off + k) % size;
	}
	return done;
}

/*
 * How many bytes a read waits for, or poll wants readable (as TCP's
 * sock_rcvlowat()): the whole read for MSG_WAITALL, else SO_RCVLOWAT,
 * at most half the receive buffer, which the peer can always fill
 * without our reading (TCP caps it at half its buffer too).
 */
static size_t es_rcvlowat(const struct kw_es *es, bool waitall, size_t len)
{
	size_t v = READ_ONCE(es->rcvlowat);

	if (waitall)
		return len;
	v = min_t(size_t, v, es->rbuf_size / 2);
	return max_t(size_t, min(v, len), 1);
}

static int es_recvmsg(struct socket *sock, struct msghdr *msg, size_t len,
		      int flags)
{
	struct sock *sk = sock->sk;
	struct kw_es *es = es_of(sk);
	bool nonblock = flags & MSG_DONTWAIT, peek = flags & MSG_PEEK;
	long timeo = sock_rcvtimeo(sk, nonblock);
	size_t target, copied = 0;
	bool mark, at_mark = false;
	int ret = 0;
	u32 gen0, gen;

	if (flags & MSG_OOB)
		return -EOPNOTSUPP;
	if (flags & MSG_ERRQUEUE) {	/* MSG_ZEROCOPY's notifications */
		ret = kw_inet_recv_error(sk, msg, len);
		/* room on the queue now for notifications that wait for it */
		if (READ_ONCE(es->zc_head) != READ_ONCE(es->zc_tail) &&
		    (nonblock ? mutex_trylock(&es->lock) : es_lock_brief(es))) {
			gen0 = es->gen;
			es_process(es);
			es_unlock(es, gen0);
		}
		return ret;
	}
	if (!len)
		return 0;
	for (;;) {
		u32 n;

		ret = es_lock(es, nonblock);
		if (ret)
			break;
		gen0 = es->gen;
		es_process(es);
		/* (the buffer's size is known once the switch is done) */
		target = es_rcvlowat(es, flags & MSG_WAITALL, len);
		mark = es->rs.zc_mark;
		if (peek && kw_rs_rx_ready(&es->rs) < copied) {
			/* another reader took what we peeked at: stop */
			es_unlock(es, gen0);
			break;
		}
		n = min_t(size_t, len - copied,
			  kw_rs_rx_ready(&es->rs) - (peek ? copied : 0));
		if (n && !es->rd_shut) {
			u32 got = es_copy_out(es, msg, peek ? copied : 0, n,
					      peek);

			kw_rxh_uncharge(es->qp);	/* what it let go of */

			if (got && !peek) {
				kw_rs_rx_consume(&es->rs, got);
				es_credit(es);
				es->gen++;
			}
			copied += got;
			if (got != n)
				ret = -EFAULT;
			/*
			 * At a zero-copy receive's place the stream's next
			 * bytes are in that buffer, not in rbuf: stop there
			 * whatever the target (as TCP's read does at the
			 * urgent mark), or the bytes after it would follow
			 * those before it as if adjacent.
			 */
			at_mark = mark && es->rs.zc_pre <= (peek ? copied : 0);
		} else if (es->state != ES_RUN) {
			ret = es->err ? -es->err : -ENOTCONN;
		} else if (es->rd_eof || es->rd_shut) {
			ret = 1;	/* end of stream */
		} else if (es->err) {
			ret = -es->err;
		}
		gen = es->gen;
		es_unlock(es, gen0);
		if (ret || copied >= target || at_mark)
			break;
		timeo = es_wait(es, gen, timeo);
		if (timeo < 0) {
			ret = timeo;
			break;
		}
	}
	if (copied)
		return copied;
	return ret == 1 ? 0 : ret;
}

/* ---------------------------------------------------------------- poll */

static __poll_t es_poll(struct file *file, struct socket *sock,
			struct poll_table_struct *wait)
{
	struct sock *sk = sock->sk;
	struct kw_es *es = es_of(sk);
	struct kw_rs_sge dst;
	__poll_t mask = 0;
	u32 gen0;

	sock_poll_wait(file, sock, wait);
	/* switching: nothing to report until the holder wakes us */
	if (!es_lock_brief(es))
		return 0;
	gen0 = es->gen;
	es_process(es);
	switch (es->state) {
	case ES_ATTACHED:
	case ES_STARTING:
		break;
	case ES_RUN:
		/* (a zero-copy receive that ended is ready to be taken) */
		if (kw_rs_rx_ready(&es->rs) >= es_rcvlowat(es, false, U32_MAX) ||
		    es->rd_eof || es->rd_shut || es->zr.done)
			mask |= EPOLLIN | EPOLLRDNORM;
		if (es->rd_eof)
			mask |= EPOLLRDHUP;
		if (es->err) {
			mask |= EPOLLERR | EPOLLIN | EPOLLRDNORM | EPOLLOUT |
				EPOLLWRNORM;
		} else if (!es->wr_shut && !es->peer_gone &&
			   es_sq_free(es) >= 2 + ES_SQ_RESERVE &&
			   es_sbuf_writable(es) && es_tx_room(es, &dst)) {
			mask |= EPOLLOUT | EPOLLWRNORM;
		}
		if ((es->rd_eof || es->rd_shut) &&
		    (es->wr_shut || es->peer_gone || es->err))
			mask |= EPOLLHUP;
		break;
	case ES_DEAD:
		mask = EPOLLERR | EPOLLHUP | EPOLLIN | EPOLLRDNORM | EPOLLOUT;
		break;
	}
	es_unlock(es, gen0);
	if (!skb_queue_empty_lockless(&sk->sk_error_queue))
		mask |= EPOLLERR;
	return mask;
}

/* ------------------------------------------------------------ shutdown */

/* Our SHUTDOWN or DISCONNECT message, once; es->lock held. */
static void es_send_ctrl(struct kw_es *es)
{
	bool disc = es->rd_shut && es->wr_shut;

	lockdep_assert_held(&es->lock);
	if (es->state != ES_RUN || es->err || es->disc_sent ||
	    (es->ctrl_sent && !disc) || !es->wr_shut)
		return;
	if (es_sq_free(es) < 1)
		return;		/* es_process() posts it once there is room */
	es_post_msg(es, KW_RS_MSG(KW_RS_OP_CTRL, disc ? KW_RS_CTRL_DISCONNECT :
				  KW_RS_CTRL_SHUTDOWN), ES_WR_CTRL);
	es->ctrl_sent = true;
	es->disc_sent = disc;
	if (es_doorbell(es))
		es_fail(es, ECONNRESET);
	es->gen++;
}

static int es_shutdown(struct socket *sock, int how)
{
	struct kw_es *es = es_of(sock->sk);
	int ret;
	u32 gen0;

	how++;	/* SHUT_RD 0 -> RCV_SHUTDOWN 1, as inet_shutdown() */
	if ((how & ~SHUTDOWN_MASK) || !how)
		return -EINVAL;
	if (!mutex_trylock(&es->lock)) {
		/* a switch under way: no stream to shut down half of; end
		 * the exchange (which holds the lock) instead of waiting */
		if (READ_ONCE(es->state) == ES_STARTING)
			es_orig(sock)->shutdown(sock, SHUT_RDWR);
		ret = mutex_lock_interruptible(&es->lock);
		if (ret)
			return ret;
	}
	gen0 = es->gen;
	if (es->state != ES_RUN) {
		ret = -ENOTCONN;
	} else {
		es_process(es);
		if (how & RCV_SHUTDOWN) {
			es->rd_shut = true;
			/* no reader for it: as a cancel, its result kept */
			es_zr_stop(es, ECONNRESET, 0);
		}
		if (how & SEND_SHUTDOWN)
			es->wr_shut = true;
		es_send_ctrl(es);
		es->gen++;
	}
	es_unlock(es, gen0);
	return ret;
}

/* --------------------------------------------------------------- setup */

static void es_mreg_forget(struct kw_es *es, struct es_mreg *m);
static int es_reg_user(struct kw_es *es, struct kiwarp_reg_mr *mr);

/* Tear the private context down (the QP gives the socket back). */
static void es_teardown(struct kw_es *es)
{
	u32 i;

	lockdep_assert_held(&es->lock);
	if (es->qp) {
		u64 held, settled;

		kw_rxh_stats(es->qp, &held, &settled);
		atomic64_add(held, &es_stat_rx_held);
		atomic64_add(settled, &es_stat_rx_settled);
	}
	if (es->cq) {
		kw_cq_set_notify(es->cq, NULL, NULL);
		kw_cq_put(es->cq);
		es->cq = NULL;
	}
	if (es->qp) {
		kw_qp_put(es->qp);
		es->qp = NULL;
	}
	if (es->rbuf_mr) {
		kw_mr_put(es->rbuf_mr);
		es->rbuf_mr = NULL;
	}
	if (es->smr) {
		kw_mr_put(es->smr);
		es->smr = NULL;
	}
	if (es->ctx) {
		kw_ctx_free(es->ctx);	/* QP, CQ, MRs, PD */
		es->ctx = NULL;
	}
	kw_umem_put(es->mem);
	es->mem = NULL;
	kw_umem_put(es->smem);	/* skbs may hold some of its pages still */
	es->smem = NULL;
	/* their MRs went with the context */
	kfree(es->maps);
	es->maps = NULL;
	es->maps_pending = 0;
	kfree(es->peer_maps);	/* es_notify() is gone (above) */
	es->peer_maps = NULL;
	for (i = 0; es->mregs && i < IWARP_MREG_MAX; i++)
		if (es->mregs[i].used)
			es_mreg_forget(es, &es->mregs[i]);
	kfree(es->mregs);
	es->mregs = NULL;
}

/* Our buffer sizes: what the application set with SO_RCVBUF/SO_SNDBUF
 * before the switch, else the default; whole pages, sbuf two whole chunks
 * at least. */
static u32 es_buf_size(const struct sock *sk, bool rcv)
{
	u32 v = ES_BUF_DEFAULT;

	if (sk->sk_userlocks & (rcv ? SOCK_RCVBUF_LOCK : SOCK_SNDBUF_LOCK))
		v = rcv ? READ_ONCE(sk->sk_rcvbuf) : READ_ONCE(sk->sk_sndbuf);
	v = clamp_t(u32, v, ES_BUF_MIN, ES_BUF_MAX);
	if (rcv)
		return PAGE_ALIGN(v);
	/* two chunks at least: one fills while the other's WRs complete */
	return max_t(u32, round_up(v, ES_SBUF_CHUNK), 2 * ES_SBUF_CHUNK);
}

/*
 * Whether the connection's route leaves through a loopback device. Only
 * there does the send buffer go by page reference (es_alloc()): the
 * receive softirq runs on the sending CPU, which the saved copy relieves.
 * Through veth the receiving host walks the by-reference skbs' extra
 * fragments (header, payload page, trailer per FPDU) and GRO merges
 * fewer segments, which cost more than the copy did (performance.md).
 */
static bool es_route_loopback(struct sock *sk)
{
	struct dst_entry *dst = sk_dst_get(sk);
	bool lo = dst && dst->dev && (dst->dev->flags & IFF_LOOPBACK);

	dst_release(dst);
	return lo;
}

/*
 * Memory: rbuf | tsgl (1 page: the target SGL, then our iomap table) |
 * slots (1 page: the send WRs' 32-byte slots, then the receive WRs' 4-byte
 * ones), and apart, in compound chunks without a kernel mapping, sbuf.
 * Four MRs: rbuf and tsgl, which the peer writes, and the slots and sbuf,
 * which only we use (sbuf's is tx_guarded: see es_sbuf_claim()).
 */
static int es_alloc(struct kw_es *es)
{
	struct kiwarp_handle pd = {};
	struct kiwarp_create_cq cq = { .entries = ES_CQ_ENTRIES };
	struct kiwarp_create_qp qp = {
		.sq_entries = ES_SQ_ENTRIES, .rq_entries = ES_RQ_ENTRIES,
		.max_sge = 1,
	};
	struct kiwarp_reg_mr mr = {};
	unsigned long rb_pages, sb_pages;
	struct kw_rs_cfg cfg = { .rq_size = ES_RQ_CREDITS };
	void *base;
	int ret, i;

	BUILD_BUG_ON(ES_SQ_ENTRIES * ES_SLOT_LEN +
		     ES_RQ_ENTRIES * KW_RS_MSG_LEN > PAGE_SIZE);
	BUILD_BUG_ON(KW_RS_SGL_SIZE * KW_RS_SGE_LEN +
		     KW_RS_IOMAP_MAX * KW_RS_IOMAP_LEN > PAGE_SIZE);
	BUILD_BUG_ON(IWARP_IOMAP_MAX != KW_RS_IOMAP_MAX);
	BUILD_BUG_ON(KW_RS_IOMAP_LEN > ES_SLOT_LEN);
	es->rbuf_size = es_buf_size(es->sk, true);
	es->sbuf_size = es_buf_size(es->sk, false);
	rb_pages = es->rbuf_size >> PAGE_SHIFT;
	sb_pages = es->sbuf_size >> PAGE_SHIFT;

	es->ctx = kw_ctx_alloc();
	if (IS_ERR(es->ctx)) {
		ret = PTR_ERR(es->ctx);
		es->ctx = NULL;
		return ret;
	}
	es->ctx->one_qp = true;		/* no path hints to share */
	es->mem = kw_umem_alloc((rb_pages + 2) << PAGE_SHIFT, &base);
	if (IS_ERR(es->mem)) {
		ret = PTR_ERR(es->mem);
		es->mem = NULL;
		return ret;
	}
	es->smem = kw_umem_alloc_chunks(es->sbuf_size, ES_SBUF_ORDER);
	if (IS_ERR(es->smem)) {
		ret = PTR_ERR(es->smem);
		es->smem = NULL;
		return ret;
	}
	if (es->iomap_size) {
		es->peer_maps = kcalloc(es->iomap_size,
					sizeof(*es->peer_maps),
					GFP_KERNEL_ACCOUNT);
		if (!es->peer_maps)
			return -ENOMEM;	/* (before es_notify() can run) */
	}
	es->rbuf = base;
	es->tsgl = es->rbuf + es->rbuf_size;
	es->iomap_tbl = es->tsgl + KW_RS_SGL_SIZE * KW_RS_SGE_LEN;
	es->sslots = es->tsgl + PAGE_SIZE;
	es->rslots = es->sslots + ES_SQ_ENTRIES * ES_SLOT_LEN;

	ret = kw_pd_alloc(es->ctx, &pd);
	if (ret)
		return ret;
	es->pd_handle = pd.handle;
	mr.pd = pd.handle;
	mr.access = KIWARP_ACCESS_LOCAL_WRITE | KIWARP_ACCESS_REMOTE_WRITE;
	ret = kw_mr_reg_kernel(es->ctx, es->mem, 0, rb_pages, ES_TO_BASE, &mr);
	if (ret)
		return ret;
	es->rbuf_key = mr.stag;
	es->rbuf_mr = kw_mr_get(mr.stag);
	if (!es->rbuf_mr)
		return -EINVAL;
	kw_mr_window_set(es->rbuf_mr, 0, 0);	/* nothing until started */
	ret = kw_mr_reg_kernel(es->ctx, es->mem, rb_pages, 1, ES_TO_BASE, &mr);
	if (ret)
		return ret;
	es->tsgl_key = mr.stag;
	mr.access = KIWARP_ACCESS_LOCAL_WRITE;
	ret = kw_mr_reg_kernel(es->ctx, es->mem, rb_pages + 1, 1, ES_TO_BASE,
			       &mr);
	if (ret)
		return ret;
	es->lkey = mr.stag;
	es->sslots_to = ES_TO_BASE;
	es->rslots_to = es->sslots_to + ES_SQ_ENTRIES * ES_SLOT_LEN;
	ret = kw_mr_reg_kernel(es->ctx, es->smem, 0, sb_pages, ES_TO_BASE, &mr);
	if (ret)
		return ret;
	es->sbuf_key = mr.stag;
	es->sbuf_to = ES_TO_BASE;
	es->smr = kw_mr_get(mr.stag);
	if (!es->smr)
		return -EINVAL;
	/* before any WR uses it */
	es->smr->tx_guarded = es_route_loopback(es->sk);

	ret = kw_cq_create(es->ctx, &cq);
	if (ret)
		return ret;
	mutex_lock(&es->ctx->lock);
	es->cq = kw_cq_lookup(es->ctx, cq.handle);
	if (es->cq)
		kw_cq_get(es->cq);
	mutex_unlock(&es->ctx->lock);
	if (!es->cq)
		return -EINVAL;
	kw_cq_set_notify(es->cq, es_notify, es);

	qp.pd = pd.handle;
	qp.send_cq = cq.handle;
	qp.recv_cq = cq.handle;
	ret = kw_qp_create(es->ctx, &qp);
	if (ret)
		return ret;
	es->qp_handle = qp.handle;
	es->qp = kw_qp_get(es->ctx, qp.handle);
	if (!es->qp)
		return -EINVAL;
	if (es->qp->sq.entries != ES_SQ_ENTRIES ||
	    es->qp->rq.entries != ES_RQ_ENTRIES)
		return -EINVAL;	/* the slot arithmetic needs them exact */
	/* read() copies the peer's Writes out of the skbs (rxhold.c) */
	ret = kw_rxh_enable(es->qp, es->sk, es->rbuf_mr, es->rbuf,
			    es->rbuf_size, ES_HOLD_LIMIT(es->rbuf_size));
	if (ret)
		return ret;

	cfg.rbuf_size = es->rbuf_size;
	cfg.rbuf_to = ES_TO_BASE;
	cfg.rbuf_key = es->rbuf_key;
	cfg.tsgl_to = ES_TO_BASE;
	cfg.tsgl_key = es->tsgl_key;
	cfg.iomap_size = es->iomap_size;
	ret = kw_rs_init(&es->rs, &cfg);
	if (ret)
		return ret;
	/* the first half, offered in the MPA exchange (see es_notify) */
	kw_mr_window_set(es->rbuf_mr, 0, es->rs.adv_len);
	/* every receive before the peer can send (rsockets does the same) */
	for (i = 0; i < ES_RQ_ENTRIES; i++)
		es_post_recv(es);
	return 0;
}

/* Responder: the initiator's connection data must be usable (rsock.c). */
static int es_check_conn(void *arg, const u8 *pd, u32 len)
{
	struct kw_rs_conn c;

	return kw_rs_conn_decode(pd, len, &c);
}

/* A switch failed: the stream is dead and the connection of no use. */
static int es_switch_fail(struct kw_es *es, struct socket *sock, int ret)
{
	lockdep_assert_held(&es->lock);
	if (ret == -ERESTARTSYS)
		ret = -EINTR;	/* the switch cannot be restarted */
	es->state = ES_DEAD;
	es->err = -ret;
	atomic64_inc(&es_stat_failed);
	es_teardown(es);
	/* the peer sees it close */
	es_ops_of(es->sk)->orig->shutdown(sock, SHUT_RDWR);
	es->gen++;
	return ret;
}

/* Not switched yet (nor switching, nor failed). es->lock held. */
static int es_check_attached(struct kw_es *es)
{
	lockdep_assert_held(&es->lock);
	if (es->state == ES_ATTACHED)
		return 0;
	return es->state == ES_DEAD ? -EINVAL :
	       es->state == ES_STARTING ? -EALREADY : -EISCONN;
}

/*
 * IWARP_MODE, first part (never waits for the peer): check the request,
 * take the run ops, build the context. Sets *initiator.
 */
static int es_switch_begin(struct kw_es *es, struct socket *sock, int mode,
			   bool *initiator)
{
	int ret;

	lockdep_assert_held(&es->lock);
	if (mode == IWARP_MODE_AUTO)
		*initiator = !es->passive;
	else if (mode == IWARP_MODE_ACTIVE || mode == IWARP_MODE_PASSIVE)
		*initiator = mode == IWARP_MODE_ACTIVE;
	else
		return -EINVAL;
	ret = es_check_attached(es);
	if (ret)
		return ret;
	/* SS_CONNECTING: a non-blocking connect() that completed since */
	if (READ_ONCE(es->sk->sk_state) != TCP_ESTABLISHED ||
	    (sock->state != SS_CONNECTED && sock->state != SS_CONNECTING))
		return -ENOTCONN;

	/* from here on, reads and writes of the fd wait for us */
	es->state = ES_STARTING;
	/*
	 * SO_RCVLOWAT becomes ours (es_set_rcvlowat) and TCP's stays 1. The
	 * socket lock orders this against a setsockopt, which reads the ops
	 * and writes sk_rcvlowat under it: no value set before is lost and
	 * none set after reaches TCP.
	 */
	lock_sock(es->sk);
	WRITE_ONCE(sock->ops, &es_ops_of(es->sk)->run);
	WRITE_ONCE(es->rcvlowat, es->sk->sk_rcvlowat);
	WRITE_ONCE(es->sk->sk_rcvlowat, 1);
	release_sock(es->sk);
	ret = es_alloc(es);
	if (ret)
		return es_switch_fail(es, sock, ret);
	return 0;
}

/*
 * IWARP_MODE, second part: the MPA exchange (bounded by the MPA timeout,
 * cut short when the socket is shut down) and the start of the stream.
 * In the caller's context, or in sw_work for a non-blocking socket.
 */
static int es_switch_mpa(struct kw_es *es, struct socket *sock,
			 bool initiator)
{
	struct kw_cm_kparam kp = {
		.tcp_ops = es_ops_of(es->sk)->orig,
		.param = { .mpa_rev = 2, .ird = 1, .ord = 1,
			   .flags = es->no_crc ? KIWARP_CONN_NO_CRC : 0 },
		.pd_len = KW_RS_CONN_LEN,
		.check = es_check_conn,
	};
	u8 mine[KW_RS_CONN_LEN], *peer_pd;
	struct kw_rs_conn local, peer;
	int ret;

	lockdep_assert_held(&es->lock);
	peer_pd = kzalloc(KW_MPA_MAX_PD, GFP_KERNEL);
	if (!peer_pd)
		return es_switch_fail(es, sock, -ENOMEM);
	kw_rs_local_conn(&es->rs, &local);
	kw_rs_conn_encode(&local, mine);
	kp.pd = mine;
	kp.peer_pd = peer_pd;
	if (initiator)
		ret = kw_cm_kconnect(es->qp, sock, &kp);
	else
		ret = kw_cm_kaccept(es->qp, sock, &kp);
	if (!ret)
		ret = kw_rs_conn_decode(peer_pd, kp.peer_pd_len, &peer);
	if (!ret)
		ret = kw_rs_start(&es->rs, &peer);
	kfree(peer_pd);
	if (ret)
		return es_switch_fail(es, sock, ret);
	es->result = kp.result;
	es->state = ES_RUN;
	/* our second half at once: it is also what unfences a responder */
	es_credit(es);
	es->gen++;
	atomic64_inc(es->err ? &es_stat_failed : &es_stat_switched);
	return es->err ? -es->err : 0;
}

/*
 * The MPA exchange of a non-blocking IWARP_MODE. The socket stays valid:
 * es_release() shuts it down (which ends the exchange) and waits for us
 * before it releases anything.
 */
static void es_sw_work(struct work_struct *work)
{
	struct kw_es *es = container_of(work, struct kw_es, sw_work);
	int ret;

	mutex_lock(&es->lock);
	ret = es_switch_mpa(es, es->sw_sock, es->sw_initiator);
	/*
	 * As a failed non-blocking connect(): SO_ERROR tells. Set before
	 * the lock goes, so that whoever sees the DEAD state sees it too.
	 */
	if (ret)
		WRITE_ONCE(es->sk->sk_err, -ret);
	es->sw_busy = false;
	mutex_unlock(&es->lock);
	cancel_delayed_work(&es->sw_deadline);	/* es_release() syncs */
	kw_ucount_uncharge(&es_bg_users, es->sw_uid);
	if (ret)
		sk_error_report(es->sk);
	es_wake(es->sk);
}

/*
 * A background switch still under way at its deadline: shut the socket
 * down, which ends any wait of the exchange whatever timeouts the user set
 * on the socket meanwhile (and fails a switch still queued when it runs).
 * es_release() cancels us before the socket goes.
 */
static void es_sw_deadline(struct work_struct *work)
{
	struct kw_es *es = container_of(to_delayed_work(work), struct kw_es,
					sw_deadline);

	if (READ_ONCE(es->state) == ES_STARTING)
		es_ops_of(es->sk)->orig->shutdown(es->sw_sock, SHUT_RDWR);
}

/* ----------------------------------------------------------- options */

static int es_info(struct kw_es *es, struct iwarp_info *info)
{
	memset(info, 0, sizeof(*info));
	info->state = es->state == ES_RUN ? IWARP_STATE_RUN :
		      es->state == ES_DEAD ? IWARP_STATE_DEAD :
		      es->state == ES_STARTING ? IWARP_STATE_STARTING :
		      IWARP_STATE_TCP;
	info->error = es->err;
	info->passive = es->passive;
	info->mpa_rev = es->result.mpa_rev;
	info->crc = !!(es->result.flags & KIWARP_CONN_CRC);
	info->rbuf_size = es->rbuf_size;
	info->sbuf_size = es->sbuf_size;
	info->tx_bytes = es->tx_bytes;
	info->rx_bytes = es->rx_bytes;
	info->readable = kw_rs_rx_ready(&es->rs);
	info->iowrite_bytes = es->iow_bytes;
	info->ioread_bytes = es->ior_bytes;
	info->iomap_size = es->iomap_size;
	info->peer_iomap_size = es->rs.remote_iomap_count;
	info->zc_bytes = es->zc_bytes;
	info->mreg_count = es->mreg_count;
	info->zc_pending = es->zc_tail - es->zc_head;
	info->zc_rx_bytes = es->zr_bytes;
	info->sbuf_replaced = es->sb_replaced;
	if (es->qp)
		kw_rxh_stats(es->qp, &info->rbuf_held, &info->rbuf_settled);
	return 0;
}

/*
 * riomap(): pin and register the memory (remote write, remote read or
 * both, as prot says), take a free
 * entry of the peer's table, announce it. Pins under es->lock, which no
 * path takes under mmap_lock.
 */
static int es_riomap(struct kw_es *es, const struct iwarp_iomap *io)
{
	struct kiwarp_reg_mr mr = {
		.pd = es->pd_handle,
		.addr = io->addr,
		.length = io->len,
	};
	struct es_iomap *m;
	u64 end;
	u32 i;
	int ret;

	lockdep_assert_held(&es->lock);
	/* the entry's length is 32 bits on the wire */
	if (!io->prot || (io->prot & ~(PROT_READ | PROT_WRITE)) ||
	    io->reserved || !io->len || io->len > U32_MAX ||
	    check_add_overflow(io->offset, io->len, &end))
		return -EINVAL;
	/* read-only memory stays pinnable for a read-only mapping */
	if (io->prot & PROT_WRITE)
		mr.access |= KIWARP_ACCESS_LOCAL_WRITE |
			     KIWARP_ACCESS_REMOTE_WRITE;
	if (io->prot & PROT_READ)
		mr.access |= KIWARP_ACCESS_REMOTE_READ;
	if (es->wr_shut || es->peer_gone)
		return -EPIPE;	/* it could never be announced */
	if (!es->rs.remote_iomap_count)
		return -ENOMEM;	/* the peer offered no table (rsockets) */
	if (!es->maps) {
		es->maps = kcalloc(es->rs.remote_iomap_count,
				   sizeof(*es->maps), GFP_KERNEL_ACCOUNT);
		if (!es->maps)
			return -ENOMEM;
	}
	for (i = 0; i < es->rs.remote_iomap_count && es->maps[i].used; i++)
		;
	if (i == es->rs.remote_iomap_count)
		return -ENOMEM;	/* its table is full (rsockets) */
	ret = es_reg_user(es, &mr);
	if (ret)
		return ret;
	m = &es->maps[i];
	m->used = true;
	m->pending = true;
	m->mr_handle = mr.handle;
	m->stag = mr.stag;
	m->addr = io->addr;
	m->len = io->len;
	m->offset = io->offset;
	es->maps_pending++;
	es_iomap_flush(es);
	return 0;
}

/* riounmap(): the mapping of exactly [addr, addr + len). */
static int es_riounmap(struct kw_es *es, const struct iwarp_iomap *io)
{
	struct kiwarp_handle h = {};
	u32 i;
	int ret;

	lockdep_assert_held(&es->lock);
	if (io->prot || io->reserved || io->offset)
		return -EINVAL;
	for (i = 0; es->maps && i < es->rs.remote_iomap_count; i++) {
		struct es_iomap *m = &es->maps[i];

		if (!m->used || m->addr != io->addr || m->len != io->len)
			continue;
		h.handle = m->mr_handle;
		ret = kw_mr_dereg(es->ctx, &h);
		if (ret)
			return ret;
		if (m->pending)
			es->maps_pending--;
		memset(m, 0, sizeof(*m));
		return 0;
	}
	return -EINVAL;
}

/*
 * IWARP_IOMAP, IWARP_IOUNMAP: on a running stream. A switch still under
 * way is waited for, on a non-blocking socket too: rsockets' riomap()
 * never says EAGAIN, and a program calls it once, at setup.
 */
static int es_iomap_opt(struct kw_es *es, int optname, sockptr_t optval,
			unsigned int optlen)
{
	struct iwarp_iomap io;
	int ret;
	u32 gen0;

	if (optlen < sizeof(io))
		return -EINVAL;
	if (copy_from_sockptr(&io, optval, sizeof(io)))
		return -EFAULT;
	ret = es_lock_process(es, &gen0);
	if (ret)
		return ret;
	/* an unmap is local: it works on a stream that failed, too */
	if (es->state != ES_RUN)
		ret = es->err ? -es->err : -ENOTCONN;
	else if (optname == IWARP_IOUNMAP)
		ret = es_riounmap(es, &io);
	else if (es->err)
		ret = -es->err;
	else
		ret = es_riomap(es, &io);
	es_unlock(es, gen0);
	return ret;
}

/*
 * Register user memory in our context: for local writing where it can be
 * (a writable pin breaks copy-on-write now, so that the pages pinned are
 * the ones the program writes later: a read-only long-term pin of pages
 * never written could be the shared zero page, on 6.1), else read-only.
 */
static int es_reg_user(struct kw_es *es, struct kiwarp_reg_mr *mr)
{
	u32 access = mr->access;
	int ret;

	mr->access = access | KIWARP_ACCESS_LOCAL_WRITE;
	ret = kw_mr_reg(es->ctx, mr);
	/* read-only memory, or shared file pages a writable pin refuses */
	if ((ret == -EFAULT || ret == -EOPNOTSUPP) &&
	    !(access & KIWARP_ACCESS_LOCAL_WRITE)) {
		mr->access = access;	/* read-only memory */
		ret = kw_mr_reg(es->ctx, mr);
	}
	return ret;
}

/*
 * IWARP_MREG: pin and register [addr, addr + len) for zero-copy sends
 * (local access only: the peer never learns its STag). Pinning can take
 * long (a large range, a userfaultfd): it runs without es->lock, which the
 * stream's every call takes. Our own calls cannot tear the context down
 * meanwhile (only close() or a failed switch do, and we hold the file);
 * the stream may fail, and then the registration is just not used.
 */
static int es_mreg(struct kw_es *es, const struct iwarp_mreg *r)
{
	struct kiwarp_reg_mr mr = { .addr = r->addr, .length = r->len };
	struct kiwarp_handle h = {};
	struct es_mreg *m;
	u64 end;
	u32 i, gen0;
	int ret;

	if (r->flags || r->reserved || !r->len ||
	    check_add_overflow(r->addr, r->len, &end))
		return -EINVAL;
	ret = es_lock_process(es, &gen0);
	if (ret)
		return ret;
	ret = es_running(es);
	if (!ret && es->mreg_count == IWARP_MREG_MAX)
		ret = -ENOSPC;
	mr.pd = es->pd_handle;
	es_unlock(es, gen0);
	if (ret)
		return ret;

	ret = es_reg_user(es, &mr);
	if (ret)
		return ret;

	mutex_lock(&es->lock);
	if (!es->mregs)
		es->mregs = kcalloc(IWARP_MREG_MAX, sizeof(*es->mregs),
				    GFP_KERNEL_ACCOUNT);
	for (i = 0; es->mregs && i < IWARP_MREG_MAX && es->mregs[i].used; i++)
		;
	if (!es->mregs || i == IWARP_MREG_MAX) {
		/* a racing IWARP_MREG took the last entry */
		ret = es->mregs ? -ENOSPC : -ENOMEM;
		h.handle = mr.handle;
		kw_mr_dereg(es->ctx, &h);
		mutex_unlock(&es->lock);
		return ret;
	}
	m = &es->mregs[i];
	m->used = true;
	m->mr_handle = mr.handle;
	m->stag = mr.stag;
	m->addr = r->addr;
	m->len = r->len;
	m->mm = current->mm;
	mmgrab(m->mm);
	es->mreg_count++;
	mutex_unlock(&es->lock);
	return 0;
}

/* Forget registration m (its MR is deregistered, or going with ctx). */
static void es_mreg_forget(struct kw_es *es, struct es_mreg *m)
{
	lockdep_assert_held(&es->lock);
	mmdrop(m->mm);
	memset(m, 0, sizeof(*m));
	es->mreg_count--;
}

/* IWARP_MDEREG: the registration of exactly [addr, addr + len). */
static int es_mdereg(struct kw_es *es, const struct iwarp_mreg *r)
{
	struct kiwarp_handle h = {};
	u32 i;
	int ret;

	lockdep_assert_held(&es->lock);
	if (r->flags || r->reserved)
		return -EINVAL;
	for (i = 0; es->mregs && i < IWARP_MREG_MAX; i++) {
		struct es_mreg *m = &es->mregs[i];

		if (!m->used || m->addr != r->addr || m->len != r->len ||
		    m->mm != current->mm)
			continue;
		h.handle = m->mr_handle;
		ret = kw_mr_dereg(es->ctx, &h);	/* EBUSY: a send's WR */
		if (ret)
			return ret;
		es_mreg_forget(es, m);
		return 0;
	}
	return -EINVAL;
}

/* IWARP_MREG, IWARP_MDEREG: on a running stream, as IWARP_IOMAP. */
static int es_mreg_opt(struct kw_es *es, int optname, sockptr_t optval,
		       unsigned int optlen)
{
	struct iwarp_mreg r;
	int ret;
	u32 gen0;

	if (optlen < sizeof(r))
		return -EINVAL;
	if (copy_from_sockptr(&r, optval, sizeof(r)))
		return -EFAULT;
	if (optname == IWARP_MREG)
		return es_mreg(es, &r);
	ret = es_lock_process(es, &gen0);
	if (ret)
		return ret;
	/* a deregistration is local: it works on a stream that failed */
	if (es->state != ES_RUN)
		ret = es->err ? -es->err : -ENOTCONN;
	else
		ret = es_mdereg(es, &r);
	es_unlock(es, gen0);
	return ret;
}

/* ------------------------------------------------- zero-copy receive */

/* [addr, addr + len) lies inside one IWARP_MREG of the caller's. */
static bool es_mreg_holds(struct kw_es *es, u64 addr, u64 len)
{
	u32 i;

	lockdep_assert_held(&es->lock);
	for (i = 0; es->mregs && i < IWARP_MREG_MAX; i++) {
		const struct es_mreg *m = &es->mregs[i];

		if (m->used && m->mm == current->mm && addr >= m->addr &&
		    addr - m->addr <= m->len && len <= m->len -
		    (addr - m->addr))
			return true;
	}
	return false;
}

/* IWARP_RECV_ZC's checks; es->lock held. */
static int es_zr_may_post(struct kw_es *es, const struct iwarp_recv_zc *r,
			  u32 pre)
{
	int ret = es_running(es);

	if (ret)
		return ret;
	/* one at a time, and the reader past the last one's place */
	if (es->zr.posted || es->rs.zc_mark)
		return -EBUSY;
	if (!es_mreg_holds(es, r->addr, r->len))
		return -EINVAL;
	if (es->rd_eof || es->rd_shut || r->len <= pre)
		return -EAGAIN;		/* nothing would arrive in place */
	return 0;
}

/*
 * IWARP_RECV_ZC. Under es->lock: the checks, and the stream bytes from
 * pre on reserved for the buffer (rsock.c, kw_rs_zc_post(): the reader
 * stops at their place, and no half of rbuf is advertised any more, so
 * pre stays what it is). Without it: the registration of the buffer's
 * share for remote write, which pins and may wait on the memory's owner
 * (a userfaultfd, FUSE), as IWARP_MREG does; the stream's other calls go
 * on meanwhile. Under it again: the target armed, if nobody ended it
 * meanwhile (zr.gen says it is still ours), and advertised at once if
 * the peer has an entry free. The registration's TOs start at
 * ES_TO_BASE, not at the buffer's address, which the peer need not know.
 * Our own calls cannot tear the context down while we pin (only close()
 * or a failed switch do, and we hold the file). The result goes to the
 * caller (optval, optlen) before the target is armed.
 */
static int es_recv_zc(struct kw_es *es, struct iwarp_recv_zc *r,
		      char __user *optval, int __user *optlen)
{
	struct kiwarp_reg_mr mr = {
		.pd = es->pd_handle,
		.access = KIWARP_ACCESS_LOCAL_WRITE |
			  KIWARP_ACCESS_REMOTE_WRITE,
	};
	struct kiwarp_handle h = {};
	bool registered, ended;
	u32 gen0, gen, pre;
	u64 end;
	int ret;

	if (r->flags || r->reserved || !r->len ||
	    r->len > IWARP_RECV_ZC_MAX ||
	    check_add_overflow(r->addr, r->len, &end))
		return -EINVAL;
	ret = es_lock_process(es, &gen0);
	if (ret)
		return ret;
	pre = kw_rs_zc_pre(&es->rs);
	ret = es_zr_may_post(es, r, pre);
	if (!ret)
		ret = kw_rs_zc_post(&es->rs, r->len - pre);
	if (!ret) {
		memset(&es->zr, 0, sizeof(es->zr));
		es->zr.posted = true;
		es->zr.pinning = true;
		es->zr.gen = ++es->zr_gen;
		es->zr.id = r->id;
		es->zr.len = r->len - pre;
		gen = es->zr.gen;
	}
	es_unlock(es, gen0);
	if (ret)
		return ret;

	mr.addr = r->addr + pre;
	mr.length = r->len - pre;
	ret = kw_mr_reg_at(es->ctx, &mr, ES_TO_BASE);
	registered = !ret;
	/*
	 * The caller learns pre before the target can go out: a result it
	 * cannot get undoes a post nobody has seen yet.
	 */
	r->pre = pre;
	if (!ret && (copy_to_user(optval, r, sizeof(*r)) ||
		     put_user((int)sizeof(*r), optlen)))
		ret = -EFAULT;

	mutex_lock(&es->lock);
	gen0 = es->gen;
	ended = !es->zr.posted || es->zr.gen != gen || es->zr.done;
	if ((ended || ret) && registered) {
		h.handle = mr.handle;
		kw_mr_dereg(es->ctx, &h);
	}
	if (ended) {
		/* the stream failed, or a cancel, meanwhile */
		if (es->zr.posted && es->zr.gen == gen)	/* told below */
			memset(&es->zr, 0, sizeof(es->zr));
		/* (the end of the stream: recv() what there is) */
		ret = es->err ? -es->err : es->rd_eof ? -EAGAIN : -ECANCELED;
	} else if (ret) {
		kw_rs_zc_end(&es->rs);	/* never went out: quietly */
		memset(&es->zr, 0, sizeof(es->zr));
	} else {
		es->zr.pinning = false;
		es->zr.mr_valid = true;
		es->zr.mr_handle = mr.handle;
		kw_rs_zc_arm(&es->rs, ES_TO_BASE, mr.stag);
		es_credit(es);	/* out now if an entry is free */
	}
	es->gen++;
	es_unlock(es, gen0);
	return ret;
}

/* IWARP_RECV_ZC_DONE: the result once it ended, and it is forgotten. */
static int es_recv_zc_done(struct kw_es *es, struct iwarp_recv_zc_done *d)
{
	lockdep_assert_held(&es->lock);
	if (!es->zr.posted)
		return -ENOENT;
	if (!es->zr.done && (es->state != ES_RUN || es->err))
		es_zr_end(es, es->err ?: ENOTCONN);
	/* (while being registered, its poster is still at work) */
	if (!es->zr.done || es->zr.pinning)
		return -EAGAIN;
	memset(d, 0, sizeof(*d));
	d->id = es->zr.id;
	d->bytes = es->zr.bytes;
	d->error = es->zr.err;
	memset(&es->zr, 0, sizeof(es->zr));
	return 0;
}

/* Forget the zero-copy receive (es_zr_stop()). */
static void es_zr_cancel(struct kw_es *es, int err)
{
	es_zr_stop(es, err, err);
	memset(&es->zr, 0, sizeof(es->zr));
}

/* getsockopt(IWARP_RECV_ZC, IWARP_RECV_ZC_DONE): structs in and out. */
static int es_recv_zc_opt(struct kw_es *es, int optname, char __user *optval,
			  int __user *optlen)
{
	union {
		struct iwarp_recv_zc r;
		struct iwarp_recv_zc_done d;
	} u;
	int len, size = optname == IWARP_RECV_ZC ? sizeof(u.r) : sizeof(u.d);
	int ret;
	u32 gen0;

	if (get_user(len, optlen))
		return -EFAULT;
	if (len < size)
		return -EINVAL;
	if (optname == IWARP_RECV_ZC) {
		if (copy_from_user(&u.r, optval, sizeof(u.r)))
			return -EFAULT;
		/* (copies its result out itself: see there) */
		return es_recv_zc(es, &u.r, optval, optlen);
	}
	ret = es_lock_process(es, &gen0);
	if (ret)
		return ret;
	ret = es_recv_zc_done(es, &u.d);
	es_unlock(es, gen0);
	/* a result that cannot be copied out is lost; its bytes are in the
	 * buffer, and the peer can no longer write there */
	if (!ret && (copy_to_user(optval, &u.d, size) ||
		     put_user(size, optlen)))
		ret = -EFAULT;
	return ret;
}

static int es_setsockopt(struct socket *sock, int level, int optname,
			 sockptr_t optval, unsigned int optlen)
{
	struct kw_es *es = es_of(sock->sk);
	bool nonblock, initiator;
	kuid_t uid = kw_account_uid();
	int val, ret;

	if (level != SOL_IWARP)
		return es_orig(sock)->setsockopt(sock, level, optname, optval,
						 optlen);
	if (!es)
		return -ENOPROTOOPT;	/* no ULP (or a clone without memory) */
	if (optname == IWARP_IOMAP || optname == IWARP_IOUNMAP)
		return es_iomap_opt(es, optname, optval, optlen);
	if (optname == IWARP_MREG || optname == IWARP_MDEREG)
		return es_mreg_opt(es, optname, optval, optlen);
	if (optname == IWARP_RECV_ZC_CANCEL) {
		u32 gen0;

		ret = es_lock_process(es, &gen0);
		if (ret)
			return ret;
		ret = es->zr.posted ? 0 : -ENOENT;
		if (es->zr.posted)
			es_zr_cancel(es, ECANCELED);
		es_unlock(es, gen0);
		return ret;
	}
	if (optname != IWARP_MODE && optname != IWARP_CRC &&
	    optname != IWARP_IOMAP_SIZE)
		return -ENOPROTOOPT;
	if (optlen < sizeof(int))
		return -EINVAL;
	if (copy_from_sockptr(&val, optval, sizeof(val)))
		return -EFAULT;
	/* a connection's, not a listener's (its children do not inherit) */
	if ((optname == IWARP_CRC && val != 0 && val != 1) ||
	    (optname == IWARP_IOMAP_SIZE &&
	     (val < 0 || val > IWARP_IOMAP_MAX)) ||
	    (optname != IWARP_MODE &&
	     READ_ONCE(sock->sk->sk_state) == TCP_LISTEN))
		return -EINVAL;
	if (READ_ONCE(es->state) == ES_STARTING)
		return -EALREADY;	/* (its worker may hold the lock) */
	nonblock = sock->file && (sock->file->f_flags & O_NONBLOCK);
	if (nonblock) {
		if (!mutex_trylock(&es->lock))
			return -EAGAIN;
	} else {
		ret = mutex_lock_interruptible(&es->lock);
		if (ret)
			return ret;
	}
	if (optname == IWARP_CRC || optname == IWARP_IOMAP_SIZE) {
		/* what the MPA exchange offers: before it only */
		ret = es_check_attached(es);
		if (!ret && optname == IWARP_CRC)
			WRITE_ONCE(es->no_crc, !val);
		else if (!ret)
			WRITE_ONCE(es->iomap_size, val);
		mutex_unlock(&es->lock);
		return ret;
	}
	ret = es_switch_begin(es, sock, val, &initiator);
	if (!ret && nonblock && !kw_ucount_charge(&es_bg_users, uid,
						   ES_BG_PER_USER)) {
		/* done in the background: poll() and SO_ERROR tell the end */
		es->sw_sock = sock;
		es->sw_uid = uid;
		es->sw_initiator = initiator;
		es->sw_busy = true;
		queue_work(es_wq, &es->sw_work);
		queue_delayed_work(system_wq, &es->sw_deadline,
				   msecs_to_jiffies(clamp(READ_ONCE(es_switch_deadline_ms),
							  100U, 600000U)));
		ret = -EINPROGRESS;
	} else if (!ret) {
		ret = es_switch_mpa(es, sock, initiator);
	}
	mutex_unlock(&es->lock);
	es_wake(sock->sk);
	return ret;
}

/*
 * IWARP_IOREAD, under rd_mutex and es->lock: one RDMA Read of the peer's
 * mapping at r->offset into the caller's memory, pinned for the while.
 * Waits for the Read's completion (killable; SO_RCVTIMEO bounds it, then
 * the stream is reset), whose CQE es_process() takes for us: the sink is
 * deregistered only once the QP is done with it.
 */
static int es_ioread(struct kw_es *es, struct iwarp_ioread *r)
{
	struct kiwarp_reg_mr mr = {
		.pd = es->pd_handle, .access = KIWARP_ACCESS_LOCAL_WRITE,
		.addr = r->addr,
	};
	long timeo = sock_rcvtimeo(es->sk, false);
	struct kiwarp_handle h = {};
	struct kiwarp_wqe *w;
	struct kw_rs_sge src;
	unsigned int reset = 0;	/* 1 + seconds waited for the flush */
	u64 room, end;
	int ret;
	u32 gen;

	lockdep_assert_held(&es->rd_mutex);
	lockdep_assert_held(&es->lock);
	if (!r->len || check_add_overflow(r->offset, r->len, &end))
		return -EINVAL;
	/* the stream's own checks, as for a write */
	for (;;) {
		ret = es_running(es);
		if (ret)
			return ret;
		/* closing, either side: the Read could only be flushed */
		if (es->peer_gone || es->wr_shut || es->rd_shut ||
		    es->disc_sent)
			return -EPIPE;
		if (es->rd_stuck)
			return -EIO;
		if (es_sq_free(es) >= 1 + ES_SQ_RESERVE)
			break;
		gen = es->gen;
		mutex_unlock(&es->lock);
		timeo = es_wait(es, gen, timeo);
		mutex_lock(&es->lock);
		if (timeo < 0)
			return timeo;
		es_process(es);
	}
	room = es_iow_room(es, r->offset, &src);
	if (!room)
		return -EINVAL;		/* the peer mapped nothing there */
	mr.length = min3(r->len, room, (u64)IWARP_IOREAD_MAX);
	ret = kw_mr_reg(es->ctx, &mr);
	if (ret)
		return ret;

	w = es_sq_next(es);
	w->wr_id = ES_WR_READ | ++es->rd_seq;
	w->opcode = KIWARP_WR_RDMA_READ;
	w->flags = KIWARP_WR_SIGNALED;
	w->num_sge = 1;
	w->sge[0].addr = r->addr;
	w->sge[0].length = mr.length;
	w->sge[0].lkey = mr.stag;
	w->remote_addr = src.addr;
	w->rkey = src.key;
	es->sq_cqes++;
	es_sq_commit(es);
	es->rd_busy = true;
	/* fails only for a QP being destroyed, which ours is not while a
	 * call holds the file; an ERROR QP flushes what it is given */
	if (es_doorbell(es))
		es_fail(es, ECONNRESET);

	/*
	 * Until its CQE. A timeout, a fatal signal or a shutdown() of the
	 * socket by another thread resets the stream, which flushes the Read
	 * from a worker: that is waited for without regard to signals (a
	 * pending fatal one ends every killable wait at once), a second at a
	 * time, and at most ES_RD_FLUSH_WAIT of them. A flush always comes
	 * (an ERROR QP completes every WR it pulled); should it not, the
	 * sink stays registered (and pinned) until the socket is closed, and
	 * the socket makes no more Reads.
	 */
	for (;;) {
		long t;

		es_process(es);
		if (!es->rd_busy)
			break;
		if (!reset && (es->rd_shut || es->wr_shut)) {
			es_fail(es, ECONNRESET);
			reset = 1;
			continue;
		}
		if (reset > ES_RD_FLUSH_WAIT) {
			es->rd_stuck = true;
			return -EIO;
		}
		gen = es->gen;
		mutex_unlock(&es->lock);
		t = reset ? es_wait_state(es, gen, HZ, TASK_UNINTERRUPTIBLE) :
			    es_wait_state(es, gen, timeo, TASK_KILLABLE);
		mutex_lock(&es->lock);
		if (reset) {
			reset += t == -EAGAIN;
			continue;
		}
		if (t >= 0) {
			timeo = t;
			continue;
		}
		es_process(es);
		if (!es->rd_busy)
			break;	/* it completed as the wait ended */
		es_fail(es, t == -EAGAIN ? ETIMEDOUT : EINTR);
		reset = 1;
	}
	h.handle = mr.handle;
	ret = kw_mr_dereg(es->ctx, &h);
	WARN_ON_ONCE(ret);	/* the QP let go of it with the CQE */
	if (es->rd_status != KIWARP_WC_SUCCESS)
		return es->err ? -es->err : -EIO;
	r->done = mr.length;
	es->ior_bytes += mr.length;
	return 0;
}

/* getsockopt(IWARP_IOREAD): struct iwarp_ioread in and out. */
static int es_ioread_opt(struct kw_es *es, char __user *optval,
			 int __user *optlen)
{
	struct iwarp_ioread r;
	int len, ret;
	u32 gen0;

	if (get_user(len, optlen))
		return -EFAULT;
	if (len < (int)sizeof(r))
		return -EINVAL;
	if (copy_from_user(&r, optval, sizeof(r)))
		return -EFAULT;
	r.done = 0;
	ret = mutex_lock_interruptible(&es->rd_mutex);
	if (ret)
		return ret;
	ret = es_lock_process(es, &gen0);
	if (ret)
		goto out;
	ret = es_ioread(es, &r);
	es_unlock(es, gen0);
	if (!ret && (copy_to_user(optval, &r, sizeof(r)) ||
		     put_user((int)sizeof(r), optlen)))
		ret = -EFAULT;
out:
	mutex_unlock(&es->rd_mutex);
	return ret;
}

static int es_getsockopt(struct socket *sock, int level, int optname,
			 char __user *optval, int __user *optlen)
{
	struct kw_es *es = es_of(sock->sk);
	struct iwarp_info info = { .state = IWARP_STATE_STARTING };
	int len, val = 1, ret;
	bool locked = true;

	if (level != SOL_IWARP) {
		/* zerocopy receive would take bytes from under the stream */
		if (level == SOL_TCP && optname == TCP_ZEROCOPY_RECEIVE &&
		    READ_ONCE(sock->ops) == &es_ops_of(sock->sk)->run)
			return -EOPNOTSUPP;
		return es_orig(sock)->getsockopt(sock, level, optname, optval,
						 optlen);
	}
	if (!es)
		return -ENOPROTOOPT;
	if (optname == IWARP_IOREAD)
		return es_ioread_opt(es, optval, optlen);
	if (optname == IWARP_RECV_ZC || optname == IWARP_RECV_ZC_DONE)
		return es_recv_zc_opt(es, optname, optval, optlen);
	if (get_user(len, optlen))
		return -EFAULT;
	if (len < 0)
		return -EINVAL;
	if (optname != IWARP_MODE && optname != IWARP_INFO &&
	    optname != IWARP_CRC && optname != IWARP_IOMAP_SIZE)
		return -ENOPROTOOPT;
	/*
	 * A switch in its MPA exchange holds the lock: report it as under
	 * way (the initial values above) without waiting for the peer.
	 */
	if (!mutex_trylock(&es->lock)) {
		locked = READ_ONCE(es->state) != ES_STARTING;
		if (locked) {
			ret = mutex_lock_interruptible(&es->lock);
			if (ret)
				return ret;
		}
	}
	if (locked) {
		val = es->state == ES_RUN || es->state == ES_STARTING;
		if (optname == IWARP_INFO)
			es_info(es, &info);
		mutex_unlock(&es->lock);
	}
	/* what the MPA exchange asks for (set only before it starts) */
	if (optname == IWARP_CRC)
		val = !READ_ONCE(es->no_crc);
	else if (optname == IWARP_IOMAP_SIZE)
		val = READ_ONCE(es->iomap_size);
	if (optname == IWARP_INFO) {
		len = min_t(int, len, sizeof(info));
		ret = copy_to_user(optval, &info, len);
	} else {
		len = min_t(int, len, sizeof(val));
		ret = copy_to_user(optval, &val, len);
	}
	if (ret || put_user(len, optlen))
		return -EFAULT;
	return 0;
}

/* ------------------------------------------------------ the run table */

static int es_ioctl(struct socket *sock, unsigned int cmd, unsigned long arg)
{
	struct kw_es *es = es_of(sock->sk);
	int n;

	switch (cmd) {
	case SIOCINQ:	/* FIONREAD: bytes a read() would return now */
	case SIOCOUTQ:	/* bytes written, not yet completed */
		if (!es_lock_brief(es))
			return put_user(0, (int __user *)arg);	/* switching */
		es_process(es);
		n = cmd == SIOCINQ ? kw_rs_rx_ready(&es->rs) :
				     es->sb_head - es->sb_tail;
		mutex_unlock(&es->lock);
		return put_user(n, (int __user *)arg);
	case SIOCATMARK:
		return put_user(0, (int __user *)arg);
	}
	/* route and interface ioctls: the socket's own */
	return es_orig(sock)->ioctl(sock, cmd, arg);
}

static int es_connect(struct socket *sock, kw_sockaddr_arg *a, int len,
		      int flags)
{
	struct kw_es *es = es_of(sock->sk);

	/* as a connect() again after a non-blocking one */
	switch (READ_ONCE(es->state)) {
	case ES_STARTING:
		return -EALREADY;
	case ES_DEAD:
		return -READ_ONCE(es->err) ?: -ECONNRESET;
	default:
		return -EISCONN;
	}
}

static int es_listen(struct socket *sock, int backlog)
{
	return -EINVAL;
}

static int es_accept(struct socket *sock, struct socket *newsock,
		     KW_ACCEPT_ARGS)
{
	return -EINVAL;
}

static int es_mmap(struct file *file, struct socket *sock,
		   struct vm_area_struct *vma)
{
	return -ENODEV;
}

static ssize_t es_splice_read(struct socket *sock, loff_t *ppos,
			      struct pipe_inode_info *pipe, size_t len,
			      unsigned int flags)
{
	return -EOPNOTSUPP;
}

/*
 * close(): an orderly end. DISCONNECT to the peer (once the SQ has room
 * for it), then the QP closes once what was written went out (kiwarp sends
 * a FIN after the SQ drained). We wait for that at most ES_CLOSE_TIMEOUT
 * (or SO_LINGER's time), interruptibly, and not at all in a kernel thread
 * (a file released by the unix garbage collector): then, or with data
 * unread (as TCP does), the connection is reset. Only then is the socket,
 * which the QP borrowed, released.
 */
static int es_release(struct socket *sock)
{
	struct sock *sk = sock->sk;
	struct kw_es *es = sk ? es_of(sk) : NULL;
	const struct proto_ops *orig = es_orig(sock);
	struct kiwarp_modify_qp m = { .action = KIWARP_MODIFY_CLOSE };
	unsigned long deadline;
	long timeo;
	u32 gen;

	if (!es)
		return orig->release(sock);
	timeo = sock_flag(sk, SOCK_LINGER) ? sk->sk_lingertime :
		ES_CLOSE_TIMEOUT;
	if (current->flags & PF_KTHREAD)
		timeo = 0;
	deadline = jiffies + min_t(long, timeo, MAX_SCHEDULE_TIMEOUT / 2);

	/*
	 * A background switch still under way: end its MPA exchange (a shut
	 * down socket fails it at once; its work holds es->lock meanwhile).
	 * Should the switch complete just before the shutdown, the new
	 * stream ends abruptly, which is all a close of a stream nobody
	 * could have written to yet loses.
	 */
	if (READ_ONCE(es->sw_busy) && READ_ONCE(es->state) == ES_STARTING)
		orig->shutdown(sock, SHUT_RDWR);
	/*
	 * Then wait for the work, whatever sw_busy said: it clears sw_busy
	 * under es->lock but goes on using es and the socket after it (the
	 * deadline, the user's count, the wakeups), and es is freed with the
	 * socket (a use-after-free KASAN caught in kw_fuzz). No setsockopt()
	 * can queue another: the file is gone. One still queued (all workers
	 * busy) never runs: fail it here instead of waiting for a worker.
	 */
	if (cancel_work_sync(&es->sw_work)) {
		mutex_lock(&es->lock);
		if (es->state == ES_STARTING)
			es_switch_fail(es, sock, -ECONNRESET);
		es->sw_busy = false;
		mutex_unlock(&es->lock);
		kw_ucount_uncharge(&es_bg_users, es->sw_uid);
	}
	cancel_delayed_work_sync(&es->sw_deadline);

	mutex_lock(&es->lock);
	if (es->state == ES_RUN) {
		es_process(es);
		/* unread data, or a zero-copy receive the peer may still
		 * write into: a reset, as TCP's close with unread data */
		if (es->rs.readable || !timeo)
			es_fail(es, ECONNRESET);
		es_zr_stop(es, ECONNRESET, ECONNRESET);
		es->rd_shut = true;
		es->wr_shut = true;
		/* DISCONNECT, waiting for SQ room if need be */
		while (!es->err && !es->disc_sent) {
			es_send_ctrl(es);
			if (es->disc_sent)
				break;
			gen = es->gen;
			mutex_unlock(&es->lock);
			timeo = es_wait(es, gen, (long)(deadline - jiffies) > 0 ?
					deadline - jiffies : 0);
			mutex_lock(&es->lock);
			es_process(es);
			if (timeo < 0)
				break;
		}
		if (es->disc_sent && !es->err) {
			m.qp = es->qp_handle;
			kw_qp_modify(es->ctx, &m);
		}
		/* the QP reaches ERROR when it is done (its flush wakes us) */
		mutex_unlock(&es->lock);
		if ((long)(deadline - jiffies) > 0)
			wait_event_interruptible_timeout(*sk_sleep(sk),
				READ_ONCE(es->qp->state) == KIWARP_QPS_ERROR,
				deadline - jiffies);
		mutex_lock(&es->lock);
		if (READ_ONCE(es->qp->state) != KIWARP_QPS_ERROR)
			sock_no_linger(sk);	/* not done: reset */
	}
	es->state = ES_DEAD;
	es->err = es->err ?: EBADF;
	es_teardown(es);
	mutex_unlock(&es->lock);
	return orig->release(sock);
}

/*
 * SO_RCVLOWAT once switched, socket lock held (or in a BPF program, which
 * may not sleep): the mark of our reads and poll, not TCP's. TCP calls
 * sk_data_ready, the kiwarp receive, only once sk_rcvlowat bytes are
 * queued, so that stays 1 (the MPA exchange and small FPDUs would stall
 * on anything more), and getsockopt(SO_RCVLOWAT), which reads it, says 1.
 */
static int es_set_rcvlowat(struct sock *sk, int val)
{
	struct kw_es *es = es_of(sk);

	if (es) {
		WRITE_ONCE(es->rcvlowat, val ?: 1);
		es_wake(sk);	/* a lower mark may make a poller ready */
	}
	return 0;
}

/*
 * accept() on a listener with the ULP. do_accept() gives the child the
 * listener's ops, ours, and a reference on their owner, us. A connection
 * that was queued before the ULP came was cloned without it: it goes back
 * to TCP's own ops. Otherwise it would wear ours with no ULP behind them
 * (es_of() NULL), and a table copied from a socket's ops (kiwarp's owned
 * one, cm.c; kTLS's) would be copied from ours, whose calls go back to
 * the socket's ops. (kernel_accept(), nfsd's for one, sets the child's
 * ops after this, and there the child keeps ours: es_orig() and the
 * owned getsockopt never call a socket's current ops, so no copy of a
 * table of ours recurses.)
 */
static int es_attached_accept(struct socket *sock, struct socket *newsock,
			      KW_ACCEPT_ARGS)
{
	struct es_ops *o = es_ops_of(sock->sk);
	int ret = o->orig->accept(sock, newsock, KW_ACCEPT_PASS);

	if (!ret && READ_ONCE(newsock->ops) == &o->attached &&
	    inet_csk(newsock->sk)->icsk_ulp_ops != &es_ulp_ops) {
		/* do_accept() took a reference on our module, for ours */
		__module_get(o->orig->owner);
		WRITE_ONCE(newsock->ops, o->orig);
		module_put(THIS_MODULE);
	}
	return ret;
}

static void es_build_ops(struct es_ops *o, const struct proto_ops *orig)
{
	struct proto_ops *r = &o->run;

	o->attached = *orig;
	o->attached.owner = THIS_MODULE;
	o->attached.accept = es_attached_accept;
	o->attached.setsockopt = es_setsockopt;
	o->attached.getsockopt = es_getsockopt;
	o->attached.sendmsg = es_sendmsg_attached;

	*r = o->attached;
	r->release = es_release;
	r->connect = es_connect;
	r->listen = es_listen;
	r->accept = es_accept;
	r->shutdown = es_shutdown;
	r->sendmsg = es_sendmsg;
	r->recvmsg = es_recvmsg;
	r->poll = es_poll;
	r->ioctl = es_ioctl;
	r->mmap = es_mmap;
#ifdef KW_HAVE_SENDPAGE_OP
	r->sendpage = sock_no_sendpage;	/* through es_sendmsg */
	r->sendpage_locked = NULL;
#endif
#ifdef KW_HAVE_SPLICE_EOF
	r->splice_eof = NULL;
#endif
	r->splice_read = es_splice_read;
	r->sendmsg_locked = NULL;
	r->read_sock = NULL;
	r->set_rcvlowat = es_set_rcvlowat;
	r->set_peek_off = NULL;
	r->peek_len = NULL;
	o->orig = orig;
}

/* ---------------------------------------------------------------- ULP */

static struct kw_es *es_new(struct sock *sk, gfp_t gfp)
{
	struct kw_es *es = kzalloc(sizeof(*es), gfp);

	if (!es)
		return NULL;
	es->sk = sk;
	mutex_init(&es->lock);
	mutex_init(&es->rd_mutex);
	spin_lock_init(&es->iomap_lock);
	INIT_WORK(&es->sw_work, es_sw_work);
	INIT_DELAYED_WORK(&es->sw_deadline, es_sw_deadline);
	es->state = ES_ATTACHED;
	return es;
}

/*
 * setsockopt(TCP_ULP, "kiwarp"), socket locked: a plain TCP socket of a
 * user fd, not yet closing. Its ops become our attached copy.
 */
static int es_ulp_init(struct sock *sk)
{
	struct socket *sock = sk->sk_socket;
	const struct proto_ops *orig;
	struct es_ops *o;
	struct kw_es *es;
	int ret = 0;

	if (!sock || !sock->file || sk->sk_type != SOCK_STREAM ||
	    sk->sk_protocol != IPPROTO_TCP)
		return -EINVAL;
	if (sk->sk_state != TCP_ESTABLISHED && sk->sk_state != TCP_LISTEN &&
	    sk->sk_state != TCP_CLOSE)
		return -ENOTCONN;
	/* a socket kiwarp owns (cm.c), or any other user's */
	if (rcu_access_pointer(sk->sk_user_data))
		return -EBUSY;
	orig = sock->ops;
	if (!kw_stock_tcp_ops(sk->sk_family, orig))
		return -EOPNOTSUPP;
	o = es_ops_of(sk);
	mutex_lock(&es_ops_lock);
	if (!o->orig)
		es_build_ops(o, orig);
	else if (o->orig != orig)
		ret = -EOPNOTSUPP;
	mutex_unlock(&es_ops_lock);
	if (ret)
		return ret;
	es = es_new(sk, GFP_KERNEL_ACCOUNT);
	if (!es)
		return -ENOMEM;
	rcu_assign_pointer(inet_csk(sk)->icsk_ulp_data, es);
	/* sock_release() puts the owner of the ops it finds: ours now */
	__module_get(THIS_MODULE);
	WRITE_ONCE(sock->ops, &o->attached);
	module_put(orig->owner);	/* (NULL: IPv4, or IPv6 built in) */
	return 0;
}

/* A connection accepted on a listener with the ULP: passive by default.
 * Nothing else comes from the listener, whose state a close() may free
 * meanwhile. Without memory the child stays plain TCP with the attached
 * ops, which then refuse IWARP_MODE (-ENOMEM). */
static void es_ulp_clone(const struct request_sock *req, struct sock *newsk,
			 const gfp_t priority)
{
	struct kw_es *es = es_new(newsk, priority);

	if (es)
		es->passive = true;
	rcu_assign_pointer(inet_csk(newsk)->icsk_ulp_data, es);
	__module_get(THIS_MODULE);	/* tcp_cleanup_ulp() puts one */
}

/* The socket is being destroyed: es_release() already tore down. */
static void es_ulp_release(struct sock *sk)
{
	struct kw_es *es = es_of(sk);

	if (!es)
		return;
	WARN_ON_ONCE(es->ctx);
	RCU_INIT_POINTER(inet_csk(sk)->icsk_ulp_data, NULL);
	mutex_destroy(&es->lock);
	mutex_destroy(&es->rd_mutex);
	kfree(es);
}

static struct tcp_ulp_ops es_ulp_ops __read_mostly = {
	.name = KIWARP_ULP_NAME,
	.owner = THIS_MODULE,
	.init = es_ulp_init,
	.release = es_ulp_release,
	.clone = es_ulp_clone,
};

#define ES_STAT_ATTR(name)						\
static ssize_t name##_show(struct device *dev,				\
			   struct device_attribute *attr, char *buf)	\
{									\
	return sysfs_emit(buf, "%llu\n",				\
			  (u64)atomic64_read(&es_stat_##name));		\
}									\
static DEVICE_ATTR_ADMIN_RO(name)

ES_STAT_ATTR(switched);
ES_STAT_ATTR(failed);
ES_STAT_ATTR(tx_bytes);
ES_STAT_ATTR(rx_bytes);
ES_STAT_ATTR(rx_held);
ES_STAT_ATTR(rx_settled);

static struct attribute *es_stat_attrs[] = {
	&dev_attr_switched.attr,
	&dev_attr_failed.attr,
	&dev_attr_tx_bytes.attr,
	&dev_attr_rx_bytes.attr,
	&dev_attr_rx_held.attr,
	&dev_attr_rx_settled.attr,
	NULL,
};

/* /sys/class/misc/kiwarp/es/: dev.c hangs it on the device */
const struct attribute_group kw_es_attr_group = {
	.name = "es",
	.attrs = es_stat_attrs,
};

int kw_es_init(void)
{
	int ret;

	/* non-blocking switches: each waits for its peer's MPA frame */
	es_wq = alloc_workqueue("kiwarp_es", WQ_UNBOUND, 0);
	if (!es_wq)
		return -ENOMEM;
	ret = tcp_register_ulp(&es_ulp_ops);
	if (ret)
		destroy_workqueue(es_wq);
	return ret;
}

void kw_es_exit(void)
{
	tcp_unregister_ulp(&es_ulp_ops);
	destroy_workqueue(es_wq);	/* empty: each socket waited for its own */
	kw_ucount_destroy(&es_bg_users);
}
