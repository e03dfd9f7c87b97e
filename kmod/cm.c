// SPDX-License-Identifier: GPL-2.0
/*
 * Connection management: take over a connected TCP socket (from a user fd,
 * a kernel connect or a kernel listener), run the MPA Request/Reply exchange
 * (RFC 5044 section 7, RFC 6581) in process context with blocking socket
 * calls, then install the socket callbacks that drive rx.c and tx.c.
 */
#include <linux/file.h>
#include <linux/module.h>
#include <linux/capability.h>
#include <linux/net.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/nsproxy.h>
#include <net/inet_common.h>
#include <net/ipv6.h>
#include <net/sock.h>
#include <net/tcp.h>
#include <net/net_namespace.h>

#include "qp.h"

#define KW_MPA_TIMEOUT_MS	10000
#define KW_DEFAULT_IRD_ORD	16

/*
 * Sockets kiwarp creates for a user (kernel CONNECT, LISTEN and what a
 * listener accepts) are that user's sockets: sock_create() applies the LSM
 * socket_create hooks, holds a reference on the caller's network namespace
 * and charges the socket to the caller's memory cgroup; bind/connect go
 * through the socket's own ops, so cgroup-BPF hooks apply. They hold no
 * file descriptor, so each one is charged instead to a per-user count
 * limited by the creator's RLIMIT_NOFILE (kw_user_socks).
 */
/*
 * A module cannot run the LSM socket_bind/connect/listen hooks or the
 * caller's seccomp filter on sockets it creates. Hosts whose network policy
 * relies on those can set kernel_cm=0: then only callers with CAP_NET_ADMIN
 * in the initial user namespace may CONNECT by address or LISTEN (the LSM
 * policy binds users of unprivileged user namespaces too); everybody else
 * hands kiwarp sockets they made themselves (which those checks saw).
 */
static bool kernel_cm = true;
module_param(kernel_cm, bool, 0644);
MODULE_PARM_DESC(kernel_cm,
		 "let unprivileged users CONNECT by address and LISTEN (default 1)");

static int kernel_cm_allowed(void)
{
	if (READ_ONCE(kernel_cm) || capable(CAP_NET_ADMIN))
		return 0;
	return -EPERM;
}

static struct kw_ucount kw_user_socks = KW_UCOUNT_INIT(kw_user_socks);

/* Kernel sockets of an account (kw_account_uid()): as many as the
 * caller's RLIMIT_NOFILE allows. */
static int user_sock_charge(kuid_t uid)
{
	return kw_ucount_charge(&kw_user_socks, uid, rlimit(RLIMIT_NOFILE));
}

static void user_sock_uncharge(kuid_t uid)
{
	kw_ucount_uncharge(&kw_user_socks, uid);
}

/* A new TCP socket of the calling user, charged to it. */
static int user_sock_create(int family, struct socket **sockp, kuid_t *uid)
{
	int ret;

	*uid = kw_account_uid();
	ret = user_sock_charge(*uid);
	if (ret)
		return ret;
	ret = sock_create(family, SOCK_STREAM, IPPROTO_TCP, sockp);
	if (ret)
		user_sock_uncharge(*uid);
	return ret;
}

/* A kernel listening socket (KIWARP_IOC_LISTEN). */
struct kw_listener {
	struct kref ref;	/* the table's, plus one per ACCEPT in progress */
	struct socket *sock;
	kuid_t uid;		/* charged for sock */
};

static void listener_free(struct kref *ref)
{
	struct kw_listener *l = container_of(ref, struct kw_listener, ref);

	sock_release(l->sock);
	user_sock_uncharge(l->uid);
	kfree(l);
}

/* ------------------------------------------------------ socket ownership */

/*
 * While a QP owns a socket that came from a user fd, that socket's ops are
 * a copy of its own with everything that would take bytes from or put
 * bytes into the stream, change the connection or attach another ULP
 * failing with -EBUSY (kTLS swaps sock->ops the same way). kiwarp itself
 * uses the saved original (qp->sock_ops). One table per family: IPv4 TCP
 * (inet_stream_ops) and IPv6 TCP (the ops of the first plain IPv6 TCP
 * socket handed in: inet6_stream_ops lives in the ipv6 module), built on
 * first use and never freed. The tables' owner is kiwarp, and each socket
 * wearing them holds a module reference (take_sock(), release), so a
 * socket that got them some other way (accept() racing the swap) keeps
 * the module loaded.
 */
struct kw_owned_ops {
	const struct proto_ops *orig;
	struct proto_ops ops;
};

static struct kw_owned_ops kw_owned[2];
static DEFINE_MUTEX(kw_owned_lock);

/* The socket's own ops (also right after kiwarp restored them). */
static const struct proto_ops *owned_orig(const struct socket *sock)
{
	const struct proto_ops *ops = READ_ONCE(sock->ops);
	int i;

	for (i = 0; i < ARRAY_SIZE(kw_owned); i++)
		if (ops == &kw_owned[i].ops)
			return kw_owned[i].orig;
	return ops;
}

static int owned_connect(struct socket *sock, kw_sockaddr_arg *a, int len,
			 int flags)
{
	return -EBUSY;
}

static int owned_listen(struct socket *sock, int backlog)
{
	return -EBUSY;
}

static int owned_shutdown(struct socket *sock, int how)
{
	return -EBUSY;
}

static int owned_accept(struct socket *sock, struct socket *newsock,
			KW_ACCEPT_ARGS)
{
	return -EBUSY;
}

static int owned_setsockopt(struct socket *sock, int level, int optname,
			    sockptr_t optval, unsigned int optlen)
{
	return -EBUSY;
}

/*
 * SO_RCVLOWAT: TCP calls sk_data_ready (cm_recv's wakeup during the MPA
 * exchange, then our receive) only once that many bytes are queued;
 * kiwarp keeps it 1 while it owns the socket (a local peer sending by
 * plain reference relies on it too: tx.c, tx_local_peer()).
 */
static int owned_set_rcvlowat(struct sock *sk, int val)
{
	return -EBUSY;
}

static int owned_getsockopt(struct socket *sock, int level, int optname,
			    char __user *optval, int __user *optlen)
{
	/* Reading state is fine; zerocopy receive would consume the stream. */
	if (level == SOL_TCP && optname == TCP_ZEROCOPY_RECEIVE)
		return -EBUSY;
	/* the table's own orig, not the socket's ops (a copy of ours?) */
	return kw_owned[sock->sk->sk_family == AF_INET6].orig->getsockopt(
		sock, level, optname, optval, optlen);
}

static int owned_sendmsg(struct socket *sock, struct msghdr *m, size_t len)
{
	return -EBUSY;
}

static int owned_recvmsg(struct socket *sock, struct msghdr *m, size_t len,
			 int flags)
{
	return -EBUSY;
}

static int owned_mmap(struct file *file, struct socket *sock,
		      struct vm_area_struct *vma)
{
	return -EBUSY;
}

#ifdef KW_HAVE_SENDPAGE_OP
static ssize_t owned_sendpage(struct socket *sock, struct page *page,
			      int offset, size_t size, int flags)
{
	return -EBUSY;
}
#endif

static ssize_t owned_splice_read(struct socket *sock, loff_t *ppos,
				 struct pipe_inode_info *pipe, size_t len,
				 unsigned int flags)
{
	return -EBUSY;
}

/*
 * Are ops those of plain TCP in family: the kernel's own table, not one
 * of ours (es.c's, or the owned one) nor another module's copy? The first
 * table of a family that kiwarp copies (here, and es.c's) is copied from
 * such ops and later ones must be the same. IPv6's table is not exported
 * before 7.x: its release and connect stand for it (kTLS's copies and
 * MPTCP's match too, but a ULP'd socket and MPTCP are refused anyway).
 * No getsockopt_iter (7.x): it would bypass our getsockopt filters.
 */
bool kw_stock_tcp_ops(int family, const struct proto_ops *ops)
{
	if (ops->family != family || ops->owner == THIS_MODULE ||
	    !ops->getsockopt)
		return false;
#ifdef KW_HAVE_GETSOCKOPT_ITER
	if (ops->getsockopt_iter)
		return false;
#endif
	if (family == AF_INET)
		return ops == &inet_stream_ops;
#if IS_ENABLED(CONFIG_IPV6)
	if (family == AF_INET6)
		return ops->release == inet6_release &&
		       ops->connect == inet_stream_connect;
#endif
	return false;
}

/*
 * The owned table for a plain TCP socket's ops orig (socket lock held, no
 * ULP: checked by the caller), or NULL if orig is not the stock ops of its
 * family.
 */
static const struct proto_ops *owned_ops_for(int family,
					     const struct proto_ops *orig)
{
	struct kw_owned_ops *o = &kw_owned[family == AF_INET6];
	const struct proto_ops *ret = NULL;

	/* owned_getsockopt() filters getsockopt and calls orig's */
	if (!kw_stock_tcp_ops(family, orig))
		return NULL;
	mutex_lock(&kw_owned_lock);
	if (!o->orig) {
		o->ops = *orig;
		o->ops.owner = THIS_MODULE;
		o->ops.connect = owned_connect;
		o->ops.listen = owned_listen;
		o->ops.accept = owned_accept;
		o->ops.shutdown = owned_shutdown;
		o->ops.setsockopt = owned_setsockopt;
		o->ops.set_rcvlowat = owned_set_rcvlowat;
		o->ops.getsockopt = owned_getsockopt;
		o->ops.sendmsg = owned_sendmsg;
		o->ops.recvmsg = owned_recvmsg;
		o->ops.mmap = owned_mmap;
#ifdef KW_HAVE_SENDPAGE_OP
		o->ops.sendpage = owned_sendpage;
#endif
#ifdef KW_HAVE_SPLICE_EOF
		o->ops.splice_eof = NULL;	/* no sendmsg, nothing to push */
#endif
		o->ops.splice_read = owned_splice_read;
		o->ops.set_peek_off = NULL;
		o->orig = orig;
	}
	if (o->orig == orig)
		ret = &o->ops;
	mutex_unlock(&kw_owned_lock);
	return ret;
}

/* ------------------------------------------------------------ socket I/O */

/* Send on the QP's socket through its own ops; cm_lock or tx_mutex held. */
int kw_sendmsg(struct kw_qp *qp, struct msghdr *msg, struct kvec *vec,
	       size_t num, size_t len)
{
	lockdep_assert(lockdep_is_held(&qp->cm_lock) ||
		       lockdep_is_held(&qp->tx_mutex));
	iov_iter_kvec(&msg->msg_iter, ITER_SOURCE, vec, num, len);
	return qp->sock_ops->sendmsg(qp->sock, msg, len);
}

static int cm_send(struct kw_qp *qp, const void *buf, size_t len)
{
	struct kvec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr msg = { .msg_flags = MSG_NOSIGNAL };
	int ret = kw_sendmsg(qp, &msg, &iov, 1, len);

	if (ret < 0)
		return ret;
	return ret == len ? 0 : -EIO;
}

static int cm_recv(struct kw_qp *qp, void *buf, size_t len)
{
	struct kvec iov = { .iov_base = buf, .iov_len = len };
	struct msghdr msg = { .msg_flags = 0 };
	int ret;

	if (!len)
		return 0;
	iov_iter_kvec(&msg.msg_iter, ITER_DEST, &iov, 1, len);
	ret = qp->sock_ops->recvmsg(qp->sock, &msg, len, MSG_WAITALL);
	if (ret == -EAGAIN)
		return -ETIMEDOUT;
	if (ret < 0)
		return ret;
	if (ret == 0)
		return -ECONNRESET;
	return ret == len ? 0 : -ETIMEDOUT;
}

static int sock_from_fd(int fd, struct socket **sockp, struct file **filep)
{
	struct socket *sock;
	int err;

	sock = sockfd_lookup(fd, &err);
	if (!sock)
		return err;
	if (sock->type != SOCK_STREAM || sock->sk->sk_protocol != IPPROTO_TCP ||
	    (sock->sk->sk_family != AF_INET && sock->sk->sk_family != AF_INET6)) {
		sockfd_put(sock);
		return -EINVAL;
	}
	if (sock->sk->sk_state != TCP_ESTABLISHED) {
		sockfd_put(sock);
		return -ENOTCONN;
	}
	*sockp = sock;
	*filep = sock->file;
	return 0;
}

static int sockaddr_from_uapi(const struct kiwarp_sockaddr *a,
			      struct sockaddr_storage *ss, int *len)
{
	memset(ss, 0, sizeof(*ss));
	if (a->reserved)
		return -EINVAL;
	if (a->family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;

		if (a->flowinfo || a->scope_id)
			return -EINVAL;
		sin->sin_family = AF_INET;
		sin->sin_port = a->port;
		memcpy(&sin->sin_addr, a->addr, 4);
		*len = sizeof(*sin);
		return 0;
	}
	if (a->family == AF_INET6) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = a->port;
		sin6->sin6_flowinfo = a->flowinfo;
		memcpy(&sin6->sin6_addr, a->addr, 16);
		sin6->sin6_scope_id = a->scope_id;
		*len = sizeof(*sin6);
		return 0;
	}
	return -EAFNOSUPPORT;
}

static void sockaddr_to_uapi(const struct sockaddr_storage *ss,
			     struct kiwarp_sockaddr *a)
{
	memset(a, 0, sizeof(*a));
	a->family = ss->ss_family;
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const void *)ss;

		a->port = sin->sin_port;
		memcpy(a->addr, &sin->sin_addr, 4);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const void *)ss;

		a->port = sin6->sin6_port;
		a->flowinfo = sin6->sin6_flowinfo;
		memcpy(a->addr, &sin6->sin6_addr, 16);
		a->scope_id = sin6->sin6_scope_id;
	}
}

/* ------------------------------------------------------------ parameters */

static int param_check(const struct kiwarp_conn_param *p)
{
	if (p->reserved0 || (p->flags & ~(KIWARP_CONN_CRC | KIWARP_CONN_P2P |
					   KIWARP_CONN_MARKERS |
					   KIWARP_CONN_NO_CRC)))
		return -EINVAL;
	if ((p->flags & KIWARP_CONN_CRC) && (p->flags & KIWARP_CONN_NO_CRC))
		return -EINVAL;
	if (p->mpa_rev != 1 && p->mpa_rev != 2)
		return -EINVAL;
	if (p->rtr > KIWARP_RTR_READ)
		return -EINVAL;
	if ((p->flags & KIWARP_CONN_P2P) && p->mpa_rev != 2)
		return -EINVAL;
	if (p->ird > KW_MAX_IRD || p->ord > KW_MAX_ORD)
		return -EINVAL;
	return 0;
}

static u8 rtr_mask(u8 uapi_rtr)
{
	switch (uapi_rtr) {
	case KIWARP_RTR_SEND:
		return KW_RTR_SEND;
	case KIWARP_RTR_WRITE:
		return KW_RTR_WRITE;
	case KIWARP_RTR_READ:
		return KW_RTR_READ;
	default:
		return KW_RTR_WRITE | KW_RTR_READ | KW_RTR_SEND;
	}
}

static u8 rtr_uapi(u8 mask)
{
	if (mask & KW_RTR_WRITE)
		return KIWARP_RTR_WRITE;
	if (mask & KW_RTR_READ)
		return KIWARP_RTR_READ;
	if (mask & KW_RTR_SEND)
		return KIWARP_RTR_SEND;
	return KIWARP_RTR_NONE;
}

static void cfg_from_param(const struct kiwarp_conn_param *p,
			   struct kw_mpa_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->rev = p->mpa_rev;
	/* RFC 5044 section 4.4: CRC unless explicitly declined */
	cfg->crc = !(p->flags & KIWARP_CONN_NO_CRC);
	cfg->p2p = p->flags & KIWARP_CONN_P2P;
	cfg->rtr = cfg->p2p ? rtr_mask(p->rtr) : 0;
	cfg->ird = p->ird ? p->ird : KW_DEFAULT_IRD_ORD;
	cfg->ord = p->ord ? p->ord : KW_DEFAULT_IRD_ORD;
	/* the IRQ has KW_MAX_IRD slots whatever the IRD (qp.c) */
	cfg->ird_max = KW_MAX_IRD;
	cfg->markers = p->flags & KIWARP_CONN_MARKERS;
}

/* What a connection negotiated, as results and QUERY_QP report it. */
void kw_cm_result_param(const struct kw_mpa_result *r,
			struct kiwarp_conn_param *p)
{
	memset(p, 0, sizeof(*p));
	p->mpa_rev = r->rev;
	p->flags = (r->crc ? KIWARP_CONN_CRC : 0) | (r->p2p ? KIWARP_CONN_P2P : 0) |
		   (r->markers_rx ? KIWARP_CONN_MARKERS : 0) |
		   (r->markers_tx ? KIWARP_CONN_MARKERS_TX : 0);
	p->rtr = r->p2p ? rtr_uapi(r->rtr) : KIWARP_RTR_NONE;
	p->ird = r->ird;
	p->ord = r->ord;
}

/* What a peer's MPA Request asked for, as ACCEPT reports it. */
static void request_param(const struct kw_mpa_frame *req,
			  struct kiwarp_conn_param *p)
{
	memset(p, 0, sizeof(*p));
	p->mpa_rev = req->rev;
	p->flags = (req->crc ? KIWARP_CONN_CRC : 0) |
		   (req->p2p ? KIWARP_CONN_P2P : 0) |
		   (req->markers ? KIWARP_CONN_MARKERS_TX : 0);
	p->rtr = req->p2p ? rtr_uapi(req->rtr) : KIWARP_RTR_NONE;
	p->ird = req->enhanced ? req->ird : 0;
	p->ord = req->enhanced ? req->ord : 0;
}

/* ----------------------------------------------------------- callbacks */

/*
 * The QP that owns sk, for a socket callback: the caller holds
 * sk_callback_lock for reading. sk_user_data carries SK_USER_DATA_NOCOPY,
 * so a socket cloned from ours (a listen() child) never inherits it, and
 * the QP must still name sk as its socket: callbacks never act for a
 * socket kiwarp does not own.
 */
struct kw_qp *kw_sk_qp(struct sock *sk)
{
	struct kw_qp *qp;

	lockdep_assert_held(&sk->sk_callback_lock);
	qp = __locked_read_sk_user_data_with_flags(sk, SK_USER_DATA_NOCOPY);
	if (qp && (!qp->cb_installed || !qp->sock || qp->sock->sk != sk))
		return NULL;
	return qp;
}

/*
 * Completion on acknowledgement, on a stock kernel: TCP calls
 * sk_write_space from tcp_check_space() after processing an ACK whenever
 * SOCK_NOSPACE is set. While a WR waits for its data to be acked we keep
 * the bit set, so every ACK lets us complete what it covered. The caller
 * keeps qp->sock (a callback, or tx_mutex).
 */
void kw_qp_wait_acks(struct kw_qp *qp)
{
	struct socket *sock = qp->sock;

	if (!kw_qp_sq_complete(qp) || !sock)
		return;
	set_bit(SOCK_NOSPACE, &sock->flags);
	/* Pairs with the smp_mb() in tcp_check_space(): an ACK that raced
	 * with the set_bit either sees the bit or is seen by this check. */
	smp_mb__after_atomic();
	kw_qp_sq_complete(qp);
}

static void kw_write_space(struct sock *sk)
{
	struct kw_qp *qp;

	read_lock_bh(&sk->sk_callback_lock);
	qp = kw_sk_qp(sk);
	if (qp) {
		bool writeable = sk_stream_is_writeable(sk);

		/*
		 * A transmit TCP stopped resumes as soon as a batch fits, not
		 * only when half the send buffer is free (what a sleeping
		 * writer waits for): the worker takes a while to run, and
		 * meanwhile the rest of the queue drains. A send buffer
		 * smaller than two batches (SO_SNDBUF) never has a batch of
		 * room; there the writeable test is what resumes it.
		 */
		if ((writeable || (sk_stream_wspace(sk) >= KW_TX_BATCH_BYTES &&
				   sk_stream_memory_free(sk))) &&
		    test_and_clear_bit(KW_TXF_WAIT_SPACE, &qp->tx_flags))
			kw_qp_kick_tx(qp);
		/* the bit stays set while there is little room */
		if (writeable)
			clear_bit(SOCK_NOSPACE, &sk->sk_socket->flags);
		kw_qp_wait_acks(qp);	/* completion on ACK */
	}
	read_unlock_bh(&sk->sk_callback_lock);
}

static void kw_state_change(struct sock *sk)
{
	struct kw_qp *qp;

	read_lock_bh(&sk->sk_callback_lock);
	qp = kw_sk_qp(sk);
	if (qp && sk->sk_state != TCP_ESTABLISHED) {
		/*
		 * Peer closed or reset. TCP reports a FIN before the data of
		 * the same segment, which may be the peer's Terminate: parse
		 * what is queued first. A FIN after whole messages (tagged
		 * or untagged), with everything before it consumed (the
		 * queue is empty once tcp_read_sock() ate the FIN), is a
		 * half-close: what we owe the peer still goes out. Anything
		 * else ends the stream.
		 */
		kw_rx_drain(qp, sk);
		if (sk->sk_state == TCP_CLOSE_WAIT && !kw_rx_failed(&qp->rx) &&
		    kw_rx_between_messages(&qp->rx) &&
		    skb_queue_empty(&sk->sk_receive_queue))
			kw_qp_peer_closed(qp);
		else
			kw_qp_set_error(qp);
	}
	read_unlock_bh(&sk->sk_callback_lock);
}

void kw_cm_install(struct kw_qp *qp)
{
	struct sock *sk = qp->sock->sk;

	lockdep_assert_held(&qp->cm_lock);
	write_lock_bh(&sk->sk_callback_lock);
	qp->saved_data_ready = sk->sk_data_ready;
	qp->saved_write_space = sk->sk_write_space;
	qp->saved_state_change = sk->sk_state_change;
	sk->sk_data_ready = kw_rx_data_ready;
	sk->sk_write_space = kw_write_space;
	sk->sk_state_change = kw_state_change;
	qp->cb_installed = true;
	write_unlock_bh(&sk->sk_callback_lock);
}

void kw_cm_uninstall(struct kw_qp *qp)
{
	struct sock *sk;

	lockdep_assert_held(&qp->cm_lock);
	if (!qp->sock)
		return;
	sk = qp->sock->sk;
	write_lock_bh(&sk->sk_callback_lock);
	if (qp->cb_installed) {
		sk->sk_data_ready = qp->saved_data_ready;
		sk->sk_write_space = qp->saved_write_space;
		sk->sk_state_change = qp->saved_state_change;
		qp->cb_installed = false;
	}
	if (__locked_read_sk_user_data_with_flags(sk, SK_USER_DATA_NOCOPY) == qp)
		rcu_assign_sk_user_data(sk, NULL);
	write_unlock_bh(&sk->sk_callback_lock);
}

/* Shut the stream down both ways (wakes a blocked send/receive). */
void kw_cm_shutdown(struct kw_qp *qp)
{
	lockdep_assert_held(&qp->tx_mutex);
	if (qp->sock)
		qp->sock_ops->shutdown(qp->sock, SHUT_RDWR);
}

/*
 * Reset the stream (RFC 793 abort): TCP drops what it still had to send,
 * our skbs with it, and the peer sees a RST. The socket stays ours.
 */
void kw_cm_abort(struct kw_qp *qp)
{
	lockdep_assert_held(&qp->tx_mutex);
	if (qp->sock && READ_ONCE(qp->sock->sk->sk_state) != TCP_CLOSE)
		tcp_abort(qp->sock->sk, ECONNABORTED);
}

/*
 * Destroy: a CONNECT/ACCEPT/ACCEPT_REPLY in the middle of the MPA exchange
 * may be blocked on the socket with cm_lock held. Shutting the socket down
 * makes its send or receive fail at once, so cm_lock is released soon.
 */
void kw_cm_abort_setup(struct kw_qp *qp)
{
	bool setup;

	lockdep_assert_held(&qp->tx_mutex);
	/*
	 * Not in full operation: in setup, or moved to ERROR during it (the
	 * err_work that would have shut the socket down may have been
	 * cancelled by this very destroy).
	 */
	spin_lock_bh(&qp->lock);
	setup = qp->state != KIWARP_QPS_RTS &&
		qp->state != KIWARP_QPS_CLOSING;
	spin_unlock_bh(&qp->lock);
	if (setup)
		kw_cm_shutdown(qp);
}

/* A lent socket's own timeouts back (set_timeouts() and go_rts() set
 * them for kiwarp's use): once the stream runs, and when it is returned. */
static void cm_krestore_timeouts(struct kw_qp *qp)
{
	struct sock *sk = qp->sock->sk;

	lock_sock(sk);
	sk->sk_rcvtimeo = qp->sock_rcvtimeo;
	sk->sk_sndtimeo = qp->sock_sndtimeo;
	release_sock(sk);
}

/* tcp_read_sock() actor that takes and drops everything, counted */
static int cm_discard(read_descriptor_t *desc, struct sk_buff *skb,
		      unsigned int offset, size_t len)
{
	desc->written += len;
	return len;
}

/* Give the socket back: its owner's fd (if any) works again, closed. */
void kw_cm_release_sock(struct kw_qp *qp)
{
	struct socket *sock = qp->sock;

	lockdep_assert_held(&qp->cm_lock);
	lockdep_assert_held(&qp->tx_mutex);
	if (!sock)
		return;
	kw_cm_uninstall(qp);
	kw_rx_ooo_detach(qp, sock->sk);
	/*
	 * TCP still has unacknowledged data of WRs sent by reference: their
	 * pages go back to the application (or are unpinned) now, so that
	 * data must not go out any more. Reset at once, also a socket that
	 * outlives the QP (a user's fd, es.c's).
	 */
	if (kw_qp_zc_in_tcp(qp))
		kw_cm_abort(qp);
	/*
	 * Abortive (RST) only with work requests still outstanding; a
	 * drained QP, also one closed in order or already flushed by an
	 * error, ends the stream with a FIN. After a Reject a handed-in
	 * socket goes back open (cm_reject()).
	 */
	if (!(qp->sock_keep_open && qp->sock_file)) {
		if (qp->sq_compl != qp->sq_pulled)
			sock_no_linger(sock->sk);
		kw_cm_shutdown(qp);
	}
	if (qp->sock_borrowed) {
		cm_krestore_timeouts(qp);	/* its lender (es.c) closes it */
	} else if (qp->sock_file) {
		lock_sock(sock->sk);
		/*
		 * What TCP received and our receive did not take yet (the
		 * callbacks are gone) is dropped, not left for the fd: it
		 * may be pages a peer on this host sent by plain reference
		 * (tx.c, tx_local_peer()), which that peer's application
		 * may rewrite as soon as they count as read. After the
		 * shutdown above TCP queues nothing more (data after our FIN
		 * resets the stream). A rejected socket received nothing.
		 * Its close still resets the stream, as TCP's does with
		 * unread data (tcp_close()): linger 0.
		 */
		if (!qp->sock_keep_open) {
			read_descriptor_t rd = { .count = 1 };

			tcp_read_sock(sock->sk, &rd, cm_discard);
			if (rd.written) {
				sock_set_flag(sock->sk, SOCK_LINGER);
				WRITE_ONCE(sock->sk->sk_lingertime, 0);
			}
		}
		WRITE_ONCE(sock->ops, qp->sock_ops);
		WRITE_ONCE(sock->sk->sk_rcvlowat, qp->sock_rcvlowat);
		/* after a Reject the application may go on using it */
		sock->sk->sk_rcvtimeo = qp->sock_rcvtimeo;
		sock->sk->sk_sndtimeo = qp->sock_sndtimeo;
		release_sock(sock->sk);
		module_put(THIS_MODULE);	/* take_sock()'s */
		fput(qp->sock_file);
	} else {
		sock_release(sock);
		user_sock_uncharge(qp->sock_uid);
	}
	qp->sock = NULL;
	qp->sock_file = NULL;
	qp->sock_borrowed = false;
}

/* Drop a socket we did not manage to claim. */
static void put_sock(struct socket *sock, struct file *file, kuid_t uid)
{
	if (file) {
		fput(file);	/* from a user fd */
	} else {
		sock_release(sock);	/* created by us */
		user_sock_uncharge(uid);
	}
}

/*
 * RFC 6581 section 8: a negotiation that fails once the Reply is in is
 * reported with an LLP Terminate (layer 2, type 0: MPA, code res->term)
 * before the connection closes. The stream is in FPDU mode by then, framed
 * with the CRC state just negotiated (res->crc). Best effort: the
 * connection ends either way.
 */
static void cm_send_llp_term(struct kw_qp *qp, const struct kw_mpa_result *res)
{
	struct kw_term t = {
		.layer = KW_TERM_LAYER_LLP, .etype = KW_TERM_LLP_ETYPE_MPA,
		.ecode = res->term,
	};
	u8 body[KW_TERM_MAX_LEN];
	u8 wire[KW_MPA_MARKER_LEN + KW_TX_HDR_MAX + 8];
	/* RFC 5044 section 5: a peer that asked for markers gets one in
	 * front of our first FPDU, this one (position 0), with FPDUPTR 0
	 * and inside the CRC; the FPDU is too short for another */
	u32 lead = res->markers_tx ? KW_MPA_MARKER_LEN : 0;
	struct kw_tx_msg m = {
		.opcode = KW_OP_TERMINATE, .crc = res->crc,
		.mulpdu = KW_MPA_MULPDU_MIN, .qn = KW_QN_TERMINATE, .msn = 1,
		.inline_data = body,
	};
	struct kw_tx_fpdu f;
	u32 off = 0, crc = 0;
	int len;

	lockdep_assert_held(&qp->cm_lock);
	len = kw_term_encode(&t, NULL, 0, body);
	if (len < 0)
		return;
	m.inline_len = len;
	BUILD_BUG_ON(sizeof(wire) > KW_MPA_MARKER_SPACING);
	if (kw_tx_fpdu_next(&m, &off, &f) ||
	    lead + f.hdr_len + f.trailer_len > sizeof(wire))
		return;
	memset(wire, 0, lead);
	if (m.crc) {
		crc = kw_mpa_crc_update(kw_mpa_crc_init(), wire, lead);
		crc = kw_mpa_crc_update(crc, f.hdr, f.hdr_len);
	}
	kw_tx_fpdu_seal(&m, &f, crc);
	memcpy(wire + lead, f.hdr, f.hdr_len);
	memcpy(wire + lead + f.hdr_len, f.trailer, f.trailer_len);
	spin_lock_bh(&qp->lock);
	qp->term_sent = (struct kiwarp_term_info){
		.valid = 1, .layer = t.layer, .etype = t.etype, .ecode = t.ecode,
	};
	spin_unlock_bh(&qp->lock);
	cm_send(qp, wire, lead + f.hdr_len + f.trailer_len);
}

/* Connection setup failed: close, and the QP is of no further use. */
static void cm_fail(struct kw_qp *qp)
{
	lockdep_assert_held(&qp->cm_lock);
	mutex_lock(&qp->tx_mutex);
	kw_cm_release_sock(qp);
	mutex_unlock(&qp->tx_mutex);
	/* ERROR flushes what was posted before the connection (receives) */
	kw_qp_set_error(qp);
}

/*
 * A Reject sent or received: RFC 5044 section 7.1.2 (rules 2 and 3) has
 * MPA exit "leaving the TCP connection open. The ULP may close TCP or use
 * the connection for other purposes." A socket the caller handed in goes
 * back to its fd open, its bytes after the MPA frames unread; one kiwarp
 * created has no other user and is closed. The QP goes to ERROR.
 */
static void cm_reject(struct kw_qp *qp)
{
	lockdep_assert_held(&qp->cm_lock);
	qp->sock_keep_open = true;
	cm_fail(qp);
}

/*
 * Look up a QP and take its connection lock if it is in state want (IDLE:
 * no socket yet; MPA_REQ_RCVD: with its socket), not being destroyed and
 * not waiting for a connection in another ACCEPT/CONNECT. Returns it
 * referenced with cm_lock held, or NULL.
 */
static struct kw_qp *cm_qp_lock(struct kw_ctx *ctx, u32 handle, int want)
{
	struct kw_qp *qp = kw_qp_get(ctx, handle);

	if (!qp)
		return NULL;
	mutex_lock(&qp->cm_lock);
	if (!READ_ONCE(qp->dying) && !qp->cm_busy &&
	    READ_ONCE(qp->state) == want &&
	    (want == KIWARP_QPS_IDLE ? !qp->sock : !!qp->sock))
		return qp;
	mutex_unlock(&qp->cm_lock);
	kw_qp_put(qp);
	return NULL;
}

/*
 * CONNECT/ACCEPT wait for a TCP connection without cm_lock (cm_busy keeps
 * other CM calls off the QP), so that DESTROY_QP never waits for a peer.
 * Take cm_lock back: 0 if the QP may still be set up, else the socket is
 * dropped and -EINVAL returned (destroyed, or moved to ERROR meanwhile).
 */
static int cm_relock(struct kw_qp *qp)
{
	mutex_lock(&qp->cm_lock);
	qp->cm_busy = false;
	if (READ_ONCE(qp->dying) || READ_ONCE(qp->state) != KIWARP_QPS_IDLE)
		return -EINVAL;
	return 0;
}

/*
 * Scratch for one MPA Request/Reply: room for the frame, then the caller's
 * private data copied in from user space (*ulp_pd). kfree() the result.
 */
static u8 *frame_buf(u64 uptr, u32 len, u8 **ulp_pd)
{
	u8 *buf = kzalloc(KW_MPA_HDR_LEN + 2 * KW_MPA_MAX_PD, GFP_KERNEL);

	if (!buf)
		return ERR_PTR(-ENOMEM);
	*ulp_pd = buf + KW_MPA_HDR_LEN + KW_MPA_MAX_PD;
	if (len && copy_from_user(*ulp_pd, u64_to_user_ptr(uptr), len)) {
		kfree(buf);
		return ERR_PTR(-EFAULT);
	}
	return buf;
}

/*
 * Read and decode the peer's MPA Request (reply false) or Reply into *f and
 * its private data into pd (KW_MPA_MAX_PD bytes, must outlive *f). The ULP
 * private data is f->ulp_pd/ulp_pd_len: the caller copies it to user space
 * with pd_to_user() once cm_lock is dropped (a user page can take as long
 * as its owner wants to fault in, e.g. on FUSE, and DESTROY_QP waits for
 * cm_lock).
 */
static int recv_mpa_frame(struct kw_qp *qp, bool reply,
			  struct kw_mpa_frame *f, u8 *pd)
{
	u8 hdr[KW_MPA_HDR_LEN];
	int ret;

	ret = cm_recv(qp, hdr, sizeof(hdr));
	if (!ret)
		ret = kw_mpa_decode_hdr(hdr, reply, f);
	if (!ret)
		ret = cm_recv(qp, pd, f->pd_len);
	if (!ret)
		ret = kw_mpa_decode_pd(f, pd);
	return ret;
}

/* The peer's private data to user space at uptr (0: only its length). */
static int pd_to_user(u64 uptr, const u8 *pd, u32 len, u32 *ulen)
{
	*ulen = len;
	if (len && uptr && copy_to_user(u64_to_user_ptr(uptr), pd, len))
		return -EFAULT;
	return 0;
}

/*
 * Claim sock for qp: no other QP or kernel user (sk_user_data) and no ULP
 * may own it. A socket from a user fd gets kiwarp's ops (see "socket
 * ownership"). A socket lent by a kernel consumer (es.c, whose ULP it
 * carries; lent: TCP's own ops) stays the lender's: its ops are not
 * swapped and releasing it neither closes nor frees it. Called with
 * cm_lock held; on failure the caller still owns the socket.
 */
static int take_sock(struct kw_qp *qp, struct socket *sock, struct file *file,
		     kuid_t uid, const struct proto_ops *lent)
{
	const struct proto_ops *orig, *owned = NULL;
	struct sock *sk = sock->sk;
	struct kw_path path;
	int ret = 0;

	lockdep_assert_held(&qp->cm_lock);
	/*
	 * qp->sock is set under tx_mutex (see qp.h). Destroy sets dying and
	 * then takes tx_mutex to shut down a socket in setup: checking dying
	 * here means it either finds this socket or we find it dying, so an
	 * MPA exchange never starts on a QP being destroyed.
	 */
	mutex_lock(&qp->tx_mutex);
	if (READ_ONCE(qp->dying)) {
		ret = -EINVAL;
		goto out_unlock;
	}
	lock_sock(sk);
	orig = sock->ops;
	/*
	 * Checked under the socket lock, which connect(), listen() and
	 * setsockopt(TCP_ULP) take too: another QP, a ULP (kTLS swaps the
	 * ops as well) or a state change wins before us or fails after.
	 */
	if (!lent && (owned_orig(sock) != orig || inet_csk_has_ulp(sk))) {
		ret = -EBUSY;	/* another QP or a ULP owns it */
		goto out_release;
	}
	if (sk->sk_state != TCP_ESTABLISHED ||
	    (file && sock->state != SS_CONNECTED)) {
		ret = -ENOTCONN;
		goto out_release;
	}
	if (file) {
		owned = owned_ops_for(sk->sk_family, orig);
		if (!owned) {
			ret = -EINVAL;
			goto out_release;
		}
	}
	write_lock_bh(&sk->sk_callback_lock);
	if (sk->sk_user_data)
		ret = -EBUSY;
	else
		__rcu_assign_sk_user_data_with_flags(sk, qp,
						     SK_USER_DATA_NOCOPY);
	write_unlock_bh(&sk->sk_callback_lock);
	if (ret)
		goto out_release;
	if (owned) {
		__module_get(THIS_MODULE);	/* put when the ops go back */
		WRITE_ONCE(sock->ops, owned);
		qp->sock_rcvlowat = sk->sk_rcvlowat;	/* owned_set_rcvlowat() */
		WRITE_ONCE(sk->sk_rcvlowat, 1);
	}
	kw_path_init(&path, sk);
	kw_paths_alloc(qp->ctx);
	spin_lock_bh(&qp->lock);
	qp->path = path;
	spin_unlock_bh(&qp->lock);
	qp->sock = sock;
	qp->sock_file = file;
	qp->sock_borrowed = !!lent;
	qp->sock_uid = uid;
	/* a lent socket's lender swaps its ops: it tells us TCP's own */
	qp->sock_ops = lent ? lent : orig;
	qp->sock_rcvtimeo = sk->sk_rcvtimeo;	/* set_timeouts() changes */
	qp->sock_sndtimeo = sk->sk_sndtimeo;
out_release:
	release_sock(sk);
out_unlock:
	mutex_unlock(&qp->tx_mutex);
	return ret;
}

static void set_timeouts(struct socket *sock, u32 ms)
{
	long t = msecs_to_jiffies(ms ? ms : KW_MPA_TIMEOUT_MS);

	lock_sock(sock->sk);
	sock->sk->sk_rcvtimeo = t;
	sock->sk->sk_sndtimeo = t;
	release_sock(sock->sk);
}

/*
 * The stream is in full operation: size the ORQ/IRQ, set up the parser and
 * the callbacks, and process anything the peer already sent. Fails if the
 * QP left the state of its setup (MODIFY_QP to ERROR, destroy) meanwhile.
 */
static int go_rts(struct kw_qp *qp, const struct kw_mpa_result *res,
		  bool initiator)
{
	int from = initiator ? KIWARP_QPS_IDLE : KIWARP_QPS_MPA_REQ_RCVD;
	struct sock *sk = qp->sock->sk;
	struct bio_vec *bvec;
	u32 mss, mulpdu, nbvec, fpdu_bvec;

	lock_sock(sk);
	sk->sk_rcvtimeo = MAX_SCHEDULE_TIMEOUT;
	sk->sk_sndtimeo = MAX_SCHEDULE_TIMEOUT;
	mss = tcp_sk(sk)->mss_cache;
	release_sock(sk);
	tcp_sock_set_nodelay(sk);	/* takes the socket lock itself */
	if (res->crc && initiator)	/* the responder did before its Reply */
		kw_rx_reserve(sk);
	mulpdu = kw_mpa_mulpdu(min_t(u32, mss, 65535), res->markers_tx);
	/*
	 * An FPDU's pieces: header, trailer and the payload's, where a page
	 * or SGE boundary ends a piece. An SGE of len bytes spans at most
	 * len / PAGE_SIZE + 2 pages (it may start at a page's last byte), so
	 * the payload needs at most mulpdu / PAGE_SIZE + 2 per SGE. A batch
	 * (tx.c) has room for two FPDUs at least.
	 */
	fpdu_bvec = 2 + DIV_ROUND_UP(mulpdu, PAGE_SIZE) + 2 * KIWARP_MAX_SGE;
	nbvec = max_t(u32, KW_TX_BVEC_MIN, 2 * fpdu_bvec);
	bvec = kvmalloc_array(nbvec, sizeof(*bvec), GFP_KERNEL_ACCOUNT);
	if (!bvec)
		return -ENOMEM;

	spin_lock_bh(&qp->lock);
	if (qp->dying || qp->state != from) {
		spin_unlock_bh(&qp->lock);
		kvfree(bvec);
		return -ECONNABORTED;
	}
	sock_hold(sk);		/* for snd_una reads until the QP is freed */
	qp->ack_sk = sk;
	qp->mpa = *res;
	qp->mulpdu = mulpdu;
	qp->tx_bvec = bvec;
	qp->tx_bvec_max = nbvec;
	qp->tx_bvec_fpdu = fpdu_bvec;
	/* ORD 0: no Reads (tx_sq_check() fails them); an RTR Read needs no
	 * ORD (RFC 6581 section 9.1) */
	qp->orq_size = min_t(u32, res->ord, KW_MAX_ORD);
	qp->irq_size = clamp_t(u32, res->ird, 1, KW_MAX_IRD);
	qp->rtr_send = initiator && res->p2p && res->rtr;
	qp->rtr_wait = !initiator && res->p2p && res->rtr;
	/*
	 * RFC 5044 section 7.1.2 rule 4: a responder "MUST receive and
	 * validate at least one FPDU before sending any", P2P or not (cxgb4
	 * fails a connection whose first FPDU comes with the Reply). Work the
	 * ULP posts meanwhile waits.
	 */
	qp->fenced = !initiator;
	kw_rx_setup(qp);
	qp->state = KIWARP_QPS_RTS;
	spin_unlock_bh(&qp->lock);

	kw_cm_install(qp);
	/*
	 * Bytes that arrived behind the MPA frames, and a FIN or reset that
	 * came before our callbacks did: TCP told the old sk_state_change.
	 */
	lock_sock(sk);
	kw_rx_ooo_attach(qp, sk);
	kw_rx_data_ready(sk);
	if (sk->sk_state != TCP_ESTABLISHED)
		kw_state_change(sk);
	release_sock(sk);
	kw_qp_kick_tx(qp);
	return 0;
}

/* ---------------------------------------------------------------- connect */

static int connect_sock(struct kiwarp_connect *arg, struct socket **sockp,
			kuid_t *uid)
{
	struct sockaddr_storage ss;
	struct socket *sock;
	int len, ret;

	ret = kernel_cm_allowed();
	if (ret)
		return ret;
	ret = sockaddr_from_uapi(&arg->addr, &ss, &len);
	if (ret)
		return ret;
	ret = user_sock_create(ss.ss_family, &sock, uid);
	if (ret)
		return ret;
	set_timeouts(sock, arg->timeout_ms);
	/*
	 * rdma_cm (siw, hardware iWARP without iwpmd) takes its local ports
	 * from its own port space and bind()s them with SO_REUSEADDR. Without
	 * it here, this connection's port - and its TIME_WAIT for a minute
	 * after - would fail such a bind() with -EADDRINUSE. siw's own active
	 * sockets set it for the same reason.
	 */
	sock_set_reuseaddr(sock->sk);
	ret = kernel_connect(sock, (kw_sockaddr_arg *)&ss, len, 0);
	if (ret) {
		put_sock(sock, NULL, *uid);
		return ret == -EINPROGRESS ? -ETIMEDOUT : ret;
	}
	*sockp = sock;
	return 0;
}

int kw_cm_connect(struct kw_ctx *ctx, struct kiwarp_connect *arg)
{
	struct kw_mpa_frame req, rep;
	struct kw_mpa_result res;
	struct kw_mpa_cfg cfg;
	struct socket *sock = NULL;
	struct file *file = NULL;
	kuid_t uid = GLOBAL_ROOT_UID;
	bool got_rep = false;
	u8 *buf, *ulp_pd;
	struct kw_qp *qp;
	int ret, len;

	if (arg->reserved || arg->reserved0 || arg->peer_private_data_len ||
	    arg->peer_ird || arg->peer_ord ||
	    !kw_mem_is_zero(&arg->result, sizeof(arg->result)))
		return -EINVAL;
	ret = param_check(&arg->param);
	if (ret)
		return ret;
	if (arg->private_data_len > KIWARP_MAX_PRIVATE_DATA)
		return -EINVAL;
	if (arg->sockfd < -1)
		return -EINVAL;

	buf = frame_buf(arg->private_data, arg->private_data_len, &ulp_pd);
	if (IS_ERR(buf))
		return PTR_ERR(buf);
	qp = cm_qp_lock(ctx, arg->qp, KIWARP_QPS_IDLE);
	if (!qp) {
		kfree(buf);
		return -EINVAL;
	}
	/* A kernel connect waits for the peer: without cm_lock. */
	qp->cm_busy = true;
	mutex_unlock(&qp->cm_lock);
	if (arg->sockfd >= 0)
		ret = sock_from_fd(arg->sockfd, &sock, &file);
	else
		ret = connect_sock(arg, &sock, &uid);
	if (cm_relock(qp) && !ret) {
		put_sock(sock, file, uid);
		ret = -EINVAL;
	}
	if (ret)
		goto out_unlock;
	ret = take_sock(qp, sock, file, uid, NULL);
	if (ret) {
		put_sock(sock, file, uid);
		goto out_unlock;
	}
	set_timeouts(sock, arg->timeout_ms);

	cfg_from_param(&arg->param, &cfg);
	kw_mpa_make_request(&cfg, &req);
	len = kw_mpa_encode(&req, ulp_pd, arg->private_data_len, buf,
			    KW_MPA_HDR_LEN + KW_MPA_MAX_PD);
	if (len < 0) {
		ret = len;
		goto out_fail;
	}
	ret = cm_send(qp, buf, len);
	if (ret)
		goto out_fail;

	ret = recv_mpa_frame(qp, true, &rep, buf);
	if (ret)
		goto out_fail;
	got_rep = true;
	ret = kw_mpa_negotiate_initiator(&cfg, &rep, &res);
	arg->peer_ird = res.peer_ird;
	arg->peer_ord = res.peer_ord;
	if (ret == -ECONNREFUSED) {
		cm_reject(qp);
		goto out_unlock;
	}
	if (ret) {
		if (res.term)
			cm_send_llp_term(qp, &res);
		goto out_fail;
	}
	kw_cm_result_param(&res, &arg->result);
	ret = go_rts(qp, &res, true);
	if (ret)
		goto out_fail;
	goto out_unlock;

out_fail:
	cm_fail(qp);
out_unlock:
	mutex_unlock(&qp->cm_lock);
	/*
	 * Connected, or refused (-ECONNREFUSED: the Reply's private data is
	 * valid too). A fault here is like one copying arg back (dev.c).
	 */
	if (got_rep && (!ret || ret == -ECONNREFUSED)) {
		int err = pd_to_user(arg->peer_private_data, rep.ulp_pd,
				     rep.ulp_pd_len,
				     &arg->peer_private_data_len);

		ret = ret ? ret : err;
	}
	kfree(buf);
	kw_qp_put(qp);
	return ret;
}

/* ----------------------------------------------------------------- accept */

static struct kw_listener *listener_get(struct kw_ctx *ctx, u32 handle)
{
	struct kw_listener *l;

	xa_lock(&ctx->listeners);
	l = xa_load(&ctx->listeners, handle);
	if (l)
		kref_get(&l->ref);
	xa_unlock(&ctx->listeners);
	return l;
}

/* A connection is queued, or the listener was shut down. */
static bool accept_ready(struct sock *sk)
{
	return !reqsk_queue_empty(&inet_csk(sk)->icsk_accept_queue) ||
	       READ_ONCE(sk->sk_state) != TCP_LISTEN;
}

/*
 * The listener's next connection for qp, charged to the caller. Waits
 * interruptibly up to timeout_ms (0: no limit), and ends when the
 * listener is destroyed (its shutdown wakes us) or qp is (noticed within
 * ACCEPT_POLL: the wait is on the listener's queue, which destroy does
 * not know). The deadline is ours, not the listener's SO_RCVTIMEO, which
 * ACCEPTs with other timeouts share.
 */
#define ACCEPT_POLL	(HZ / 10)
static int accept_sock(struct kw_ctx *ctx, struct kw_qp *qp,
		       struct kiwarp_accept *arg, struct socket **sockp,
		       kuid_t *uid)
{
	struct kw_listener *l = listener_get(ctx, arg->listen_handle);
	unsigned long deadline = jiffies + msecs_to_jiffies(arg->timeout_ms);
	struct sock *sk;
	long left;
	int ret;

	if (!l)
		return -EINVAL;
	sk = l->sock->sk;
	*uid = kw_account_uid();
	ret = user_sock_charge(*uid);
	if (ret)
		goto out;
	for (;;) {
		ret = kernel_accept(l->sock, sockp, O_NONBLOCK);
		if (ret != -EAGAIN)
			break;
		if (READ_ONCE(qp->dying)) {
			ret = -EINVAL;
			break;
		}
		left = ACCEPT_POLL;
		if (arg->timeout_ms) {
			if (time_after_eq(jiffies, deadline)) {
				ret = -ETIMEDOUT;
				break;
			}
			left = min_t(long, left, deadline - jiffies);
		}
		left = wait_event_interruptible_timeout(*sk_sleep(sk),
							accept_ready(sk), left);
		if (left < 0) {
			ret = left;	/* -ERESTARTSYS */
			break;
		}
	}
	if (ret)
		user_sock_uncharge(*uid);
out:
	kref_put(&l->ref, listener_free);
	return ret;
}

int kw_cm_accept(struct kw_ctx *ctx, struct kiwarp_accept *arg)
{
	struct sockaddr_storage ss;
	struct socket *sock = NULL;
	struct file *file = NULL;
	kuid_t uid = GLOBAL_ROOT_UID;
	struct kw_mpa_frame *req;
	u8 *pd = NULL;
	u32 pd_len = 0;
	struct kw_qp *qp;
	int ret;

	if (arg->reserved || arg->reserved0 || arg->peer_private_data_len ||
	    !kw_mem_is_zero(&arg->peer, sizeof(arg->peer)) ||
	    !kw_mem_is_zero(&arg->peer_addr, sizeof(arg->peer_addr)))
		return -EINVAL;
	if (arg->sockfd < -1 || (arg->sockfd >= 0 && arg->listen_handle))
		return -EINVAL;

	qp = cm_qp_lock(ctx, arg->qp, KIWARP_QPS_IDLE);
	if (!qp)
		return -EINVAL;
	/* Waiting for a connection: without cm_lock. */
	qp->cm_busy = true;
	mutex_unlock(&qp->cm_lock);
	if (arg->sockfd >= 0)
		ret = sock_from_fd(arg->sockfd, &sock, &file);
	else
		ret = accept_sock(ctx, qp, arg, &sock, &uid);
	if (cm_relock(qp) && !ret) {
		put_sock(sock, file, uid);
		ret = -EINVAL;
	}
	if (ret)
		goto out_unlock;
	ret = take_sock(qp, sock, file, uid, NULL);
	if (ret) {
		put_sock(sock, file, uid);
		goto out_unlock;
	}
	set_timeouts(sock, arg->listen_handle ? 0 : arg->timeout_ms);

	req = &qp->mpa_req;
	ret = recv_mpa_frame(qp, false, req, qp->mpa_req_pd);
	if (!ret && req->ulp_pd_len) {
		/* copied out after cm_lock is dropped (recv_mpa_frame()) */
		pd_len = req->ulp_pd_len;
		pd = kmemdup(req->ulp_pd, pd_len, GFP_KERNEL);
		if (!pd)
			ret = -ENOMEM;
	}
	if (ret)
		goto out_fail;
	request_param(req, &arg->peer);
	if (kernel_getpeername(sock, (struct sockaddr *)&ss) >= 0)
		sockaddr_to_uapi(&ss, &arg->peer_addr);

	spin_lock_bh(&qp->lock);
	if (qp->dying || qp->state != KIWARP_QPS_IDLE)
		ret = -ECONNABORTED;	/* moved to ERROR meanwhile */
	else
		qp->state = KIWARP_QPS_MPA_REQ_RCVD;
	spin_unlock_bh(&qp->lock);
	if (ret)
		goto out_fail;
	mutex_unlock(&qp->cm_lock);
	ret = pd_to_user(arg->peer_private_data, pd, pd_len,
			 &arg->peer_private_data_len);
	goto out_free;

out_fail:
	cm_fail(qp);
out_unlock:
	mutex_unlock(&qp->cm_lock);
out_free:
	kfree(pd);
	kw_qp_put(qp);
	return ret;
}

int kw_cm_accept_reply(struct kw_ctx *ctx, struct kiwarp_accept_reply *arg)
{
	struct kw_mpa_frame rep;
	struct kw_mpa_result res;
	struct kw_mpa_cfg cfg;
	u8 *buf, *ulp_pd;
	struct kw_qp *qp;
	int ret, len, nego;

	if (arg->reserved || arg->reserved0 ||
	    !kw_mem_is_zero(&arg->result, sizeof(arg->result)))
		return -EINVAL;
	if (arg->action != KIWARP_REPLY_ACCEPT &&
	    arg->action != KIWARP_REPLY_REJECT)
		return -EINVAL;
	ret = param_check(&arg->param);
	if (ret)
		return ret;
	if (arg->private_data_len > KIWARP_MAX_PRIVATE_DATA)
		return -EINVAL;

	buf = frame_buf(arg->private_data, arg->private_data_len, &ulp_pd);
	if (IS_ERR(buf))
		return PTR_ERR(buf);
	qp = cm_qp_lock(ctx, arg->qp, KIWARP_QPS_MPA_REQ_RCVD);
	if (!qp) {
		kfree(buf);
		return -EINVAL;
	}

	cfg_from_param(&arg->param, &cfg);
	memset(&rep, 0, sizeof(rep));
	nego = kw_mpa_negotiate_responder(&qp->mpa_req, &cfg, &rep, &res);
	if (arg->action == KIWARP_REPLY_REJECT)
		rep.reject = true;
	len = kw_mpa_encode(&rep, ulp_pd, arg->private_data_len, buf,
			    KW_MPA_HDR_LEN + KW_MPA_MAX_PD);
	if (len < 0) {
		ret = len;
		goto out_unlock;	/* e.g. private data too long: retry */
	}
	/* The initiator may send FPDUs as soon as it has the Reply: with
	 * CRC the window that holds a whole one must be there first. */
	if (!rep.reject && res.crc)
		kw_rx_reserve(qp->sock->sk);
	ret = cm_send(qp, buf, len);
	if (ret)
		goto out_fail;
	if (rep.reject) {
		/* Rejected (by the caller or by negotiation) */
		ret = nego ? nego : 0;
		cm_reject(qp);
		goto out_unlock;
	}
	kw_cm_result_param(&res, &arg->result);
	ret = go_rts(qp, &res, false);
	if (ret)
		goto out_fail;
	goto out_unlock;

out_fail:
	cm_fail(qp);
out_unlock:
	mutex_unlock(&qp->cm_lock);
	kfree(buf);
	kw_qp_put(qp);
	return ret;
}

/* ------------------------------------------------------ kernel consumers */

/* Lock an IDLE QP of a kernel consumer for setup (cm_qp_lock()'s rules). */
static int cm_klock(struct kw_qp *qp)
{
	mutex_lock(&qp->cm_lock);
	if (READ_ONCE(qp->dying) || qp->cm_busy || qp->sock ||
	    READ_ONCE(qp->state) != KIWARP_QPS_IDLE) {
		mutex_unlock(&qp->cm_lock);
		return -EINVAL;
	}
	return 0;
}

/*
 * Start a kernel consumer's MPA exchange: check its parameters, lock the
 * QP and lend it the socket. Returns a frame buffer (kfree() it, after
 * unlocking cm_lock) or an ERR_PTR with nothing held.
 */
static u8 *cm_kbegin(struct kw_qp *qp, struct socket *sock,
		     const struct kw_cm_kparam *kp)
{
	u8 *buf;
	int ret;

	ret = param_check(&kp->param);
	if (ret)
		return ERR_PTR(ret);
	if (kp->pd_len > KIWARP_MAX_PRIVATE_DATA)
		return ERR_PTR(-EINVAL);
	buf = kzalloc(KW_MPA_HDR_LEN + KW_MPA_MAX_PD, GFP_KERNEL);
	if (!buf)
		return ERR_PTR(-ENOMEM);
	ret = cm_klock(qp);
	if (ret)
		goto err_free;
	ret = take_sock(qp, sock, NULL, GLOBAL_ROOT_UID, kp->tcp_ops);
	if (ret)
		goto err_unlock;
	set_timeouts(sock, kp->timeout_ms);
	return buf;

err_unlock:
	mutex_unlock(&qp->cm_lock);
err_free:
	kfree(buf);
	return ERR_PTR(ret);
}

int kw_cm_kconnect(struct kw_qp *qp, struct socket *sock,
		   struct kw_cm_kparam *kp)
{
	struct kw_mpa_frame req, rep;
	struct kw_mpa_result res;
	struct kw_mpa_cfg cfg;
	u8 *buf;
	int ret, len;

	buf = cm_kbegin(qp, sock, kp);
	if (IS_ERR(buf))
		return PTR_ERR(buf);

	cfg_from_param(&kp->param, &cfg);
	kw_mpa_make_request(&cfg, &req);
	len = kw_mpa_encode(&req, kp->pd, kp->pd_len, buf,
			    KW_MPA_HDR_LEN + KW_MPA_MAX_PD);
	if (len < 0) {
		ret = len;
		goto out_fail;
	}
	ret = cm_send(qp, buf, len);
	if (!ret)
		ret = recv_mpa_frame(qp, true, &rep, kp->peer_pd);
	if (ret)
		goto out_fail;
	ret = kw_mpa_negotiate_initiator(&cfg, &rep, &res);
	if (ret == -ECONNREFUSED) {
		cm_reject(qp);
		goto out_unlock;
	}
	if (ret) {
		if (res.term)
			cm_send_llp_term(qp, &res);
		goto out_fail;
	}
	/* ulp_pd points into peer_pd: move it to the front */
	memmove(kp->peer_pd, rep.ulp_pd, rep.ulp_pd_len);
	kp->peer_pd_len = rep.ulp_pd_len;
	kw_cm_result_param(&res, &kp->result);
	ret = go_rts(qp, &res, true);
	if (ret)
		goto out_fail;
	cm_krestore_timeouts(qp);
	goto out_unlock;

out_fail:
	cm_fail(qp);
out_unlock:
	mutex_unlock(&qp->cm_lock);
	kfree(buf);
	return ret;
}

int kw_cm_kaccept(struct kw_qp *qp, struct socket *sock,
		  struct kw_cm_kparam *kp)
{
	struct kw_mpa_frame *req = &qp->mpa_req, rep;
	struct kw_mpa_result res;
	struct kw_mpa_cfg cfg;
	int ret, len, nego;
	u8 *buf;

	buf = cm_kbegin(qp, sock, kp);
	if (IS_ERR(buf))
		return PTR_ERR(buf);

	ret = recv_mpa_frame(qp, false, req, qp->mpa_req_pd);
	if (ret)
		goto out_fail;
	memcpy(kp->peer_pd, req->ulp_pd, req->ulp_pd_len);
	kp->peer_pd_len = req->ulp_pd_len;
	spin_lock_bh(&qp->lock);
	if (qp->dying || qp->state != KIWARP_QPS_IDLE)
		ret = -ECONNABORTED;
	else
		qp->state = KIWARP_QPS_MPA_REQ_RCVD;
	spin_unlock_bh(&qp->lock);
	if (ret)
		goto out_fail;

	cfg_from_param(&kp->param, &cfg);
	memset(&rep, 0, sizeof(rep));
	nego = kw_mpa_negotiate_responder(req, &cfg, &rep, &res);
	/* the consumer's verdict on the Request's private data */
	ret = kp->check(kp->check_arg, kp->peer_pd, kp->peer_pd_len);
	if (ret)
		rep.reject = true;
	len = kw_mpa_encode(&rep, kp->pd, kp->pd_len, buf,
			    KW_MPA_HDR_LEN + KW_MPA_MAX_PD);
	if (len < 0) {
		ret = len;
		goto out_fail;
	}
	if (!rep.reject && res.crc)
		kw_rx_reserve(sock->sk);
	if (cm_send(qp, buf, len) && !ret)
		ret = -ECONNRESET;
	if (rep.reject) {
		ret = ret ? ret : nego ? nego : -ECONNREFUSED;
		/* the lender closes its socket */
		cm_fail(qp);
		goto out_unlock;
	}
	if (ret)
		goto out_fail;
	kw_cm_result_param(&res, &kp->result);
	ret = go_rts(qp, &res, false);
	if (ret)
		goto out_fail;
	cm_krestore_timeouts(qp);
	goto out_unlock;

out_fail:
	cm_fail(qp);
out_unlock:
	mutex_unlock(&qp->cm_lock);
	kfree(buf);
	return ret;
}

/* ----------------------------------------------------------------- listen */

int kw_cm_listen(struct kw_ctx *ctx, struct kiwarp_listen *arg)
{
	struct sockaddr_storage ss;
	struct kw_listener *l;
	u32 id, backlog, somaxconn;
	__be16 port;
	int len, ret;

	if (arg->reserved0 || arg->reserved1 || arg->handle || arg->port)
		return -EINVAL;
	ret = kernel_cm_allowed();
	if (ret)
		return ret;
	ret = sockaddr_from_uapi(&arg->addr, &ss, &len);
	if (ret)
		return ret;
	l = kzalloc(sizeof(*l), GFP_KERNEL_ACCOUNT);
	if (!l)
		return -ENOMEM;
	kref_init(&l->ref);
	ret = user_sock_create(ss.ss_family, &l->sock, &l->uid);
	if (ret)
		goto err_free;
	sock_set_reuseaddr(l->sock->sk);
	ret = kernel_bind(l->sock, (kw_sockaddr_arg *)&ss, len);
	if (ret)
		goto err_sock;
	/*
	 * listen(2) caps the backlog at net.core.somaxconn; kernel_listen()
	 * does not, and an uncapped accept queue of unaccepted children
	 * (allocated in softirq, charged to nobody) would let any user, or
	 * a SYN flood, exhaust kernel memory.
	 */
	backlog = arg->backlog ? arg->backlog : 16;
	somaxconn = READ_ONCE(sock_net(l->sock->sk)->core.sysctl_somaxconn);
	ret = kernel_listen(l->sock, min_t(u32, backlog, somaxconn));
	if (ret)
		goto err_sock;
	ret = kernel_getsockname(l->sock, (struct sockaddr *)&ss);
	if (ret < 0)
		goto err_sock;
	port = ss.ss_family == AF_INET ?
		((struct sockaddr_in *)&ss)->sin_port :
		((struct sockaddr_in6 *)&ss)->sin6_port;
	/* Once l is in the table a racing DESTROY_LISTEN may free it: l is
	 * not touched again. */
	ret = xa_alloc(&ctx->listeners, &id, l, XA_LIMIT(1, U16_MAX),
		       GFP_KERNEL_ACCOUNT);
	if (ret) {
		ret = ret == -EBUSY ? -ENOSPC : ret;
		goto err_sock;
	}
	arg->handle = id;
	arg->port = port;
	return 0;

err_sock:
	put_sock(l->sock, NULL, l->uid);
err_free:
	kfree(l);
	return ret;
}

static void listener_destroy(struct kw_listener *l)
{
	/* Wakes an ACCEPT blocked in kernel_accept() with an error. */
	kernel_sock_shutdown(l->sock, SHUT_RDWR);
	kref_put(&l->ref, listener_free);
}

int kw_cm_listen_destroy(struct kw_ctx *ctx, struct kiwarp_handle *arg)
{
	struct kw_listener *l;

	if (arg->reserved)
		return -EINVAL;
	l = xa_erase(&ctx->listeners, arg->handle);
	if (!l)
		return -EINVAL;
	listener_destroy(l);
	return 0;
}

void kw_cm_listen_destroy_all(struct kw_ctx *ctx)
{
	struct kw_listener *l;
	unsigned long id;

	xa_for_each(&ctx->listeners, id, l) {
		xa_erase(&ctx->listeners, id);
		listener_destroy(l);
	}
}

/* Module exit: every socket was given back with its file. */
void kw_cm_exit(void)
{
	kw_ucount_destroy(&kw_user_socks);
}
