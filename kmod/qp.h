/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Queue pairs: the per-connection state shared by qp.c (rings, WR intake,
 * completion, state machine), cm.c (connection setup), rx.c and tx.c.
 *
 * Contexts that touch a QP:
 *   - ioctl (process): create/destroy, doorbell, query/modify, connect
 *   - receive (softirq, or process context when TCP processes its backlog at
 *     release_sock()): the socket's data_ready callback runs the parser
 *   - transmit (process, under tx_mutex): tx_work and tx_bulk_work
 *     (workqueue, tx.c: kw_tx_work()), the owner's doorbell inline, and a
 *     same-host requester's doorbell sending the Response to its own Read
 *     (tx.c: kw_tx_take_peer())
 *
 * Locking:
 *   qp->lock (spinlock, BH-safe) protects: state, term_*, the SQ shadow
 *     indices (sq_pulled, sq_done, sq_compl), every swqe's status/done, the
 *     ORQ, the IRQ, the RQ shadow and rq_* indices, tx_pending flags,
 *     path (written when a socket is taken, constant while it is held).
 *     Never held across a socket call or anything that sleeps.
 *   The receive parser (qp->rx, rx_mr, rx_rqe) is only touched by the
 *     receive path, which TCP serializes (the socket lock / tcp_read_sock),
 *     plus setup/teardown while the callbacks are not installed.
 *   qp->tx_mutex protects the transmit cursor (qp->tx_*) and the socket
 *     pointer while transmitting: tx_work and tx_bulk_work hold it, the
 *     doorbell ioctl transmits inline when it can take it without waiting,
 *     and teardown takes it to release the socket.
 *   sk->sk_callback_lock protects sk_user_data and the saved callbacks.
 *
 * Sockets: qp->sock is set (take_sock) and cleared (kw_cm_release_sock)
 * with both cm_lock and tx_mutex held, so either lock keeps it. While the
 * QP owns a socket, sock->ops points to kiwarp's table (cm.c): the old
 * owner's fd can no longer read, write, connect, listen, shut down or set
 * options; kiwarp itself calls the saved qp->sock_ops.
 *
 * Lifetime: a QP is referenced by ctx->qps (dropped by destroy), by each
 * queued work item and by each ioctl using it. Destroy (qp_teardown) sets
 * dying under qp->lock: from then on no work item, doorbell or CM call
 * starts anything; it uninstalls the callbacks, cancels the work, releases
 * the socket, flushes and detaches the CQs (cq_detached). The QP holds
 * references on its CQs, dropped when it is freed.
 */
#ifndef KW_QP_H
#define KW_QP_H

#include <linux/net.h>
#include <linux/workqueue.h>
#include <net/sock.h>

#include "kiwarp.h"

/* A ring shared with user space: a vmalloc_user region. */
struct kw_ring {
	struct kw_umem *umem;	/* header page + entries (umem.c) */
	size_t mem_size;
	u32 entries;		/* power of two */
	u32 *prod;		/* user-written */
	u32 *cons;		/* kernel-written */
	struct kiwarp_wqe *wqe;
};

/* Kernel copy of a work request (send or receive). */
struct kw_wr {
	struct kiwarp_wqe wqe;		/* validated copy; never re-read */
	struct kw_mr *mr[KIWARP_MAX_SGE];	/* held for the WR's life */
	u32 len;			/* total SGE bytes */
	u8 status;			/* KIWARP_WC_* */
	bool done;			/* ready to complete (in order) */
	bool await_ack;			/* sent; done once TCP acked end_seq */
	bool held;			/* sent by page reference: completes
					 * once no skb holds the pages (tx.c) */
	bool await_read;		/* by reference to a peer on this host
					 * (tx_peer_sk): completes, also
					 * failed, once it read end_seq
					 * (qp.c, wr_read()) */
	u32 end_seq;			/* TCP sequence after its last byte */
	bool signaled;
	struct kiwarp_term_info term;	/* with an error status */
	u32 byte_len;
};

/* An outstanding RDMA Read we issued (ORQ entry). */
struct kw_orq {
	u32 sq_idx;		/* its SQ slot, or ~0 for the RTR Read */
	u32 sink_stag;
	u64 sink_to;
	u32 len;
};

/* An inbound RDMA Read we must answer (IRQ entry). */
struct kw_irq {
	struct kw_read_req req;
	struct kw_mr *src;	/* NULL for a zero-length Read */
};

struct kw_listener;
struct kw_rxh;

/* The bytes of an skb rx_feed() hands the parser: data is skb's bytes
 * [off, off + len), mapped; skb is NULL outside rx_feed(). */
struct kw_rx_src {
	struct sk_buff *skb;
	const u8 *data;
	u32 off, len;
};

/*
 * The peer as the transmit's path hints know it (tx.c, kw_path_init()):
 * the socket's network namespace, bound device and peer address, set when
 * the socket is attached and constant from then on.
 */
/*
 * Glue of a batch TCP copies: the previous FPDU's trailer (at most 7
 * bytes) and an SQ message's header (an untagged one, the larger: 2 + 18).
 */
#define KW_TX_GLUE	32

struct kw_path {
	u64 net;		/* net_cookie */
	struct in6_addr addr;	/* IPv4 as v4-mapped */
	int ifindex;		/* sk_bound_dev_if */
	u16 slot;		/* in the context's hint table */
	bool set;
};

struct kw_qp {
	struct kref ref;
	struct rcu_head rcu;	/* freed after a grace period: kw_qp_get() */
	u32 handle;
	struct kw_ctx *ctx;
	struct kw_pd *pd;
	struct kw_cq *scq, *rcq;
	u32 pd_id;
	bool sig_all;
	u32 max_sge;
	u32 copy_max;		/* Sends/Writes up to this are copied (tx.c) */
	bool copy_adapt;	/* copy_max not given: kw_tx_path_copies() */
	struct kw_path path;	/* qp->lock; set with sock (take_sock) */

	spinlock_t lock;	/* see the comment at the top of this file */
	int state;		/* KIWARP_QPS_* */
	bool dying;		/* destroy started: nothing new starts */
	bool cq_detached;	/* destroyed and flushed: post no more CQEs */
	struct kiwarp_term_info term_sent, term_rcvd;

	/* connection */
	struct mutex cm_lock;	/* serializes connect/accept/reply/destroy */
	bool cm_busy;		/* ACCEPT waits for a connection (cm_lock) */
	struct socket *sock;	/* see "Sockets" above */
	struct file *sock_file;	/* non-NULL if the socket came from a user fd */
	bool sock_borrowed;	/* lent by a kernel consumer (es.c): never
				 * closed or freed by the QP */
	bool sock_keep_open;	/* release it without shutting it down
				 * (a Reject; under cm_lock) */
	int sock_rcvlowat;	/* a handed-in socket's own, restored on
				 * release (1 while we own it) */
	long sock_rcvtimeo, sock_sndtimeo;	/* a handed-in socket's own,
						 * restored on release */
	const struct proto_ops *sock_ops;	/* its own ops (we swapped them) */
	kuid_t sock_uid;	/* charged for a socket we created */
	void (*saved_data_ready)(struct sock *sk);
	void (*saved_write_space)(struct sock *sk);
	void (*saved_state_change)(struct sock *sk);
	bool cb_installed;
	struct sock *ack_sk;	/* held (sock_hold) from RTS until freed */
	/* the other end of the connection, a kiwarp QP's socket on this
	 * host (tx.c, tx_local_peer()): set once under qp->lock from RTS
	 * on, held (sock_hold) until freed */
	struct sock *tx_peer_sk;
	struct kw_mpa_cfg mpa_cfg;	/* responder: kept between ACCEPT and REPLY */
	struct kw_mpa_frame mpa_req;	/* responder: the Request */
	u8 mpa_req_pd[KW_MPA_MAX_PD];	/* its private data */
	struct kw_mpa_result mpa;
	u32 mulpdu;		/* at RTS, from EMSS: the largest (kw_qp_mulpdu()) */
	bool rtr_wait;		/* responder, P2P: the RTR is still due */
	bool peer_closed;	/* the peer's FIN came between messages: no
				 * more input, outbound work still goes out
				 * (kw_qp_peer_closed()) */
	bool fenced;		/* responder: no FPDU out before one came in
				 * (RFC 5044 7.1.2); set in go_rts, cleared
				 * by the receive path (READ/WRITE_ONCE) */
	bool rtr_send;		/* initiator: RTR still to send */

	/* send queue: user ring + kernel shadow, same index space */
	struct kw_ring sq;
	struct kw_wr *sq_wr;
	u32 sq_pulled;		/* next ring index to copy in (== user-visible
				 * entries we have taken) */
	u32 sq_tx;		/* next WR to transmit (tx_work) */
	u32 sq_compl;		/* next WR to complete; published as *sq.cons */

	/* receive queue */
	struct kw_ring rq;
	struct kw_wr *rq_wr;
	u32 rq_pulled, rq_compl;

	/* ORQ / IRQ: KW_MAX_ORD / KW_MAX_IRD slots (powers of two, indexed
	 * with a mask so the free-running indices may wrap); at most the
	 * negotiated ORD / IRD (orq_size / irq_size) are in use. */
	struct kw_orq *orq;
	u32 orq_size, orq_head, orq_tail;	/* free-running */
	struct kw_irq *irq;
	u32 irq_size, irq_head, irq_tail;

	/* receive path */
	struct kw_rx rx;
	struct kw_mr *rx_mr;		/* tagged sink of the current segment */
	u64 rx_delta;			/* view base - rx_mr->addr */
	struct kw_rx_buf rx_buf;	/* view of rq_wr[rx_rq_idx] */
	struct kw_mr *rx_buf_mr[KIWARP_MAX_SGE];	/* our refs on its MRs */
	bool rx_buf_valid;
	bool rx_revoked;		/* a placement was refused (rx_place) */
	u32 rx_rresp;			/* bytes of the Read Response being
					 * received so far */
	u32 rx_verified;		/* CRC on: bytes left of the FPDU whose
					 * CRC rx_verify() checked in the skbs */
	u32 rx_rq_idx;
	u32 rx_buf_msn;
	u32 rx_crc_wire;		/* CRC on: the CRC field of that FPDU */
	/*
	 * Out-of-order placement (rx.c), with the patched kernel's hook and
	 * markers on the peer's FPDUs; NULL otherwise. Set at RTS before the
	 * hook is attached, freed by kw_rx_release() after it was detached;
	 * in between only the receive path (socket lock) touches it.
	 */
	struct kw_ooo *ooo;
	/*
	 * Held placement (rxhold.c) for one kernel-mapped MR, set up by
	 * kw_rxh_enable() before the QP connects, freed by kw_rx_release();
	 * and the bytes rx_feed() is handing the parser (socket lock).
	 */
	struct kw_rxh *rxh;
	struct kw_rx_src rx_src;

	/* transmit path (under tx_mutex) */
	struct mutex tx_mutex;	/* see the comment at the top of this file */
	struct work_struct tx_work;	/* high priority (kw_wq) */
	struct work_struct tx_bulk_work;	/* normal priority (kw_bulk_wq) */
	/* a high-priority run used its budget, and no normal-priority run
	 * has made up for it yet (tx.c, kw_tx_work()); under tx_mutex */
	bool tx_hp_spent;
	/*
	 * KW_TXF_WAIT_SPACE: a push is under way or TCP refused bytes, so
	 * sk_write_space must requeue tx_work once TCP has room. Set before
	 * each push (an ACK processed while TCP still has our bytes can then
	 * never be missed), cleared when the batch is in TCP; kw_write_space
	 * clears it when it requeues. Without it every ACK queued tx_work.
	 */
	unsigned long tx_flags;
	struct kw_tx_msg tx_msg;
	struct kw_tx_fpdu tx_fpdu;	/* the FPDU being cut (tx.c) */
	u32 tx_msg_off;		/* next FPDU's payload offset in tx_msg */
	bool tx_active;		/* tx_msg in progress */
	bool tx_msg_cut;	/* its last FPDU is in the batch */
	/* MPA markers on transmit (mpa.markers_tx): stream position of the
	 * next byte (0: the first after our Request or Reply) and of the
	 * current FPDU's ULPDU Length field */
	u32 tx_mpos, tx_fpdu_pos;
	u32 tx_batch_mpos;	/* tx_mpos where the batch began */
	u32 tx_cork_len;	/* bytes TCP holds that went with MSG_MORE
				 * (0: everything was pushed) */
	bool tx_copy;		/* SQ WR done when in TCP: copied, ... */
	bool tx_byref;		/* ... or by reference from a tx_guarded MR */
	struct kw_txzc *tx_zc;	/* ... or by reference: its ubuf_info */
	bool tx_local_last;	/* the last message above copy_max went to
				 * tx_peer_sk by reference (QUERY_QP);
				 * qp->lock */
	struct kw_zcd *zcd;	/* the QP as the ubuf callbacks see it */
	bool tx_local_done;	/* a Local Invalidate finished: complete it */
	int tx_kind;		/* what tx_msg is: enum kw_tx_kind */
	u32 tx_sq_idx;		/* for SQ WRs */
	struct kw_irq tx_irq;	/* for Read Responses */
	struct kiwarp_sge tx_sge[KIWARP_MAX_SGE];	/* payload source */
	struct kw_mr *tx_mr[KIWARP_MAX_SGE];	/* our refs while sending */
	u32 tx_nsge;
	u8 tx_inline[KW_READ_REQ_LEN];
	/*
	 * The batch: consecutive FPDUs of tx_msg handed to TCP in one call
	 * (tx.c). tx_bvec describes its bytes: header/trailer fragments
	 * from tx_frag_cache and payload pages of tx_mr.
	 */
	struct bio_vec *tx_bvec;	/* tx_bvec_max entries */
	u32 tx_bvec_max;
	u32 tx_bvec_fpdu;	/* entries one FPDU may need, at most */
	u32 tx_nbv;		/* entries in use */
	u32 tx_batch_len;	/* bytes in the batch */
	u32 tx_batch_sent;	/* of which TCP has accepted */
	bool tx_batch_copy;	/* a page TCP must copy (!sendpage_ok) */
	u8 tx_trl[8];		/* last FPDU's trailer, not yet in tx_bvec */
	u32 tx_trl_len;
	/* a copied batch's first glue pieces: TCP copies them (tx.c) */
	u8 tx_glue[2][KW_TX_GLUE];
	u32 tx_nglue;
	struct page_frag_cache tx_frag_cache;
	u8 *tx_frags[KW_TX_BATCH_FPDUS + 1];	/* our refs until TCP has them */
	u32 tx_nfrags;
	u8 *tx_chunk;		/* stream page being filled, our ref */
	u32 tx_chunk_len;	/* bytes of it used, across batches (tx.c) */
	u32 tx_chunk_size;	/* its size: a pool chunk or a page */
	bool tx_chunk_bv;	/* the batch's last tx_bvec entry is in it */
	/*
	 * Chunks of the stream (tx_stream_room()) kept for reuse once no skb
	 * holds them any more: a fresh page costs a pass zeroing it
	 * (init_on_alloc) besides the copy. tx_mutex; tx.c, "Stream pages".
	 */
	struct page **tx_pool;	/* KW_TX_POOL slots, or NULL */
	u32 tx_pool_n;		/* slots in use, each with our reference */
	u32 tx_pool_next;	/* the oldest: the next one tried for reuse */
	struct list_head tx_pool_link;	/* kw_tx_pool_list, with tx_pool */
	bool tx_stream;		/* SQ message copied whole into the stream */
	u32 tx_msn[3];		/* last MSN sent per queue */
	bool term_pending;	/* a Terminate must go out, then close */
	u8 term_buf[KW_TERM_MAX_LEN];
	u32 term_len;
	struct work_struct err_work;	/* flush in process context */
	struct delayed_work abort_work;	/* failed, but a zero window holds
					 * by-reference data or the
					 * Terminate in TCP: reset (qp.c) */
	struct delayed_work read_work;	/* the oldest WR is done but its
					 * peer has not read it: look
					 * again (qp.c) */
	u8 read_polls;		/* read_work's runs without progress */
	bool read_polling;	/* read_work in sq_complete_locked(); qp->lock */
	/* whether and when (jiffies_64) wr_read() first found our stream
	 * ended: await_read WRs then wait KW_PAGES_WAIT at most (qp->lock) */
	bool ended_seen;
	u64 ended_at;
	struct list_head dying_node;	/* kw_qp_destroy_all()'s list */

	/* statistics (under qp->lock) */
	u64 tx_bytes, rx_bytes;
	u64 ooo_bytes;		/* found placed out of order by the
				 * in-order pass, not in rx_bytes */
};

enum { KW_TXF_WAIT_SPACE };	/* tx_flags bits */

enum kw_tx_kind {
	KW_TXK_NONE,
	KW_TXK_SQ,
	KW_TXK_READ_RESP,
	KW_TXK_RTR,
	KW_TXK_TERM,
};

/* qp.c */
struct kw_qp *kw_qp_get(struct kw_ctx *ctx, u32 handle);
void kw_qp_put(struct kw_qp *qp);
void kw_qp_set_error(struct kw_qp *qp);
void kw_qp_peer_closed(struct kw_qp *qp);
void kw_qp_term_received(struct kw_qp *qp, const struct kiwarp_term_info *ti,
			 u8 status);
/* A local error (RFC 5040 7.1): Terminate 0/0/0, then ERROR. Caller holds
 * qp->lock. */
void kw_qp_local_error_locked(struct kw_qp *qp);
void kw_qp_fail(struct kw_qp *qp, const struct kw_term *t,
		const u8 *bad, u32 bad_len);
bool kw_qp_sq_complete(struct kw_qp *qp);
bool kw_qp_zc_in_tcp(struct kw_qp *qp);
void kw_qp_wait_acks(struct kw_qp *qp);
void kw_qp_kick_tx(struct kw_qp *qp);
void kw_qp_kick_tx_peer(struct kw_qp *qp);
void kw_qp_queue_tx_on(struct kw_qp *qp, int cpu);
void kw_qp_queue(struct kw_qp *qp, struct work_struct *w);
void kw_qp_queue_bulk(struct kw_qp *qp, struct work_struct *w);
bool kw_qp_rq_pull(struct kw_qp *qp, u32 *idx);
void kw_qp_rq_complete(struct kw_qp *qp, u32 idx, u8 status, u32 byte_len,
		       u8 flags, u32 inv_stag);

/* cm.c */
struct kw_qp *kw_sk_qp(struct sock *sk);	/* sk_callback_lock held */
void kw_cm_install(struct kw_qp *qp);
void kw_cm_uninstall(struct kw_qp *qp);
void kw_cm_release_sock(struct kw_qp *qp);	/* cm_lock + tx_mutex held */
void kw_cm_shutdown(struct kw_qp *qp);		/* tx_mutex held */
void kw_cm_abort_setup(struct kw_qp *qp);	/* tx_mutex held */
void kw_cm_abort(struct kw_qp *qp);		/* tx_mutex held */
int kw_sendmsg(struct kw_qp *qp, struct msghdr *msg, struct kvec *vec,
	       size_t num, size_t len);	/* tx_mutex or cm_lock held */
void kw_cm_exit(void);

/*
 * Kernel consumers (es.c): the MPA exchange on a connected socket the
 * consumer keeps (take_sock()'s "lent"), for an IDLE QP of its own
 * context. The private data are kernel buffers; peer_pd has room for
 * KW_MPA_MAX_PD bytes. The responder's check() sees the Request's private
 * data and returns 0 to accept or an error to Reject with.
 */
struct kw_cm_kparam {
	const struct proto_ops *tcp_ops;	/* the socket's own (TCP's) */
	struct kiwarp_conn_param param;
	const u8 *pd;
	u32 pd_len;
	u8 *peer_pd;
	u32 peer_pd_len;			/* out */
	u32 timeout_ms;				/* 0: KW_MPA_TIMEOUT_MS */
	int (*check)(void *arg, const u8 *pd, u32 len);
	void *check_arg;
	struct kiwarp_conn_param result;	/* out */
};
int kw_cm_kconnect(struct kw_qp *qp, struct socket *sock,
		   struct kw_cm_kparam *kp);
int kw_cm_kaccept(struct kw_qp *qp, struct socket *sock,
		  struct kw_cm_kparam *kp);
bool kw_stock_tcp_ops(int family, const struct proto_ops *ops);

/* rxhold.c */
int kw_rxh_enable(struct kw_qp *qp, struct sock *sk, const struct kw_mr *mr,
		  u8 *base, u32 size, u32 limit);
bool kw_rxh_holds(const struct kw_qp *qp, const struct kw_mr *mr);
void kw_rxh_place(struct kw_qp *qp, u64 off, const void *src, u32 len);
void kw_rxh_skb_done(struct kw_qp *qp);
u32 kw_rxh_read(struct kw_qp *qp, u32 off, u32 n, struct iov_iter *to,
		bool consume);
void kw_rxh_settle(struct kw_qp *qp);
void kw_rxh_uncharge(struct kw_qp *qp);
void kw_rxh_stats(struct kw_qp *qp, u64 *held, u64 *settled);
void kw_rxh_free(struct kw_qp *qp);

/* rx.c */
void kw_rx_data_ready(struct sock *sk);
void kw_rx_drain(struct kw_qp *qp, struct sock *sk);
void kw_rx_setup(struct kw_qp *qp);
void kw_rx_reserve(struct sock *sk);
u32 kw_qp_mulpdu(struct kw_qp *qp);
void kw_rx_release(struct kw_qp *qp);
void kw_rx_ooo_attach(struct kw_qp *qp, struct sock *sk);
void kw_rx_ooo_detach(struct kw_qp *qp, struct sock *sk);

/* tx.c */
void kw_tx_work(struct work_struct *w);
void kw_tx_bulk_work(struct work_struct *w);
void kw_tx_release(struct kw_qp *qp);
void kw_tx_abandon(struct kw_qp *qp);
void kw_tx_zc_detach(struct kw_qp *qp);
bool kw_tx_path_copies(struct kw_qp *qp);
void kw_path_init(struct kw_path *p, struct sock *sk);
void kw_qp_wr_released(struct kw_qp *qp, u32 idx);
void kw_tx_inline(struct kw_qp *qp);
bool kw_tx_take_peer(struct kw_qp *qp, int cpu);

extern struct workqueue_struct *kw_wq, *kw_bulk_wq;

#endif /* KW_QP_H */
