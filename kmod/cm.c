// SPDX-License-Identifier: GPL-2.0
/*
 * Connection management: take over a connected TCP socket (from a user fd,
 * a kernel connect or a kernel listener), run the MPA Request/Reply exchange
 * (RFC 5044 section 7, RFC 6581) in process context with blocking socket
 * calls, then install the socket callbacks that drive rx.c and tx.c.
 */
#include <linux/file.h>
#include <linux/net.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/nsproxy.h>
#include <net/sock.h>
#include <net/tcp.h>
#include <net/net_namespace.h>

#include "qp.h"

#define KW_MPA_TIMEOUT_MS	10000
#define KW_DEFAULT_IRD_ORD	16

/* A kernel listening socket (KIWARP_IOC_LISTEN). */
struct kw_listener {
	struct kref ref;	/* the table's, plus one per ACCEPT in progress */
	u32 handle;
	struct socket *sock;
};

static void listener_free(struct kref *ref)
{
	struct kw_listener *l = container_of(ref, struct kw_listener, ref);

	sock_release(l->sock);
	kfree(l);
}

/* ------------------------------------------------------------ socket I/O */

static int cm_send(struct socket *sock, const void *buf, size_t len)
{
	struct kvec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr msg = { .msg_flags = MSG_NOSIGNAL };
	int ret = kernel_sendmsg(sock, &msg, &iov, 1, len);

	if (ret < 0)
		return ret;
	return ret == len ? 0 : -EIO;
}

static int cm_recv(struct socket *sock, void *buf, size_t len)
{
	struct kvec iov = { .iov_base = buf, .iov_len = len };
	struct msghdr msg = { .msg_flags = 0 };
	int ret;

	if (!len)
		return 0;
	ret = kernel_recvmsg(sock, &msg, &iov, 1, len, MSG_WAITALL);
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
					   KIWARP_CONN_MARKERS)))
		return -EINVAL;
	if (p->flags & KIWARP_CONN_MARKERS)
		return -EINVAL;	/* MPA markers are not implemented yet */
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
	cfg->crc = p->flags & KIWARP_CONN_CRC;
	cfg->p2p = p->flags & KIWARP_CONN_P2P;
	cfg->rtr = cfg->p2p ? rtr_mask(p->rtr) : 0;
	cfg->ird = p->ird ? p->ird : KW_DEFAULT_IRD_ORD;
	cfg->ord = p->ord ? p->ord : KW_DEFAULT_IRD_ORD;
}

static void result_to_param(const struct kw_mpa_result *r,
			    struct kiwarp_conn_param *p)
{
	memset(p, 0, sizeof(*p));
	p->mpa_rev = r->rev;
	p->flags = (r->crc ? KIWARP_CONN_CRC : 0) | (r->p2p ? KIWARP_CONN_P2P : 0);
	p->rtr = r->p2p ? rtr_uapi(r->rtr) : KIWARP_RTR_NONE;
	p->ird = r->ird;
	p->ord = r->ord;
}

/* ----------------------------------------------------------- callbacks */

/*
 * Completion on acknowledgement, on a stock kernel: TCP calls
 * sk_write_space from tcp_check_space() after processing an ACK whenever
 * SOCK_NOSPACE is set. While a WR waits for its data to be acked we keep
 * the bit set, so every ACK lets us complete what it covered.
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
	qp = sk->sk_user_data;
	if (qp) {
		/* the bit stays set while tx_work waits for send space */
		if (sk_stream_is_writeable(sk)) {
			clear_bit(SOCK_NOSPACE, &sk->sk_socket->flags);
			kw_qp_kick_tx(qp);
		}
		kw_qp_wait_acks(qp);
	}
	read_unlock_bh(&sk->sk_callback_lock);
}

static void kw_state_change(struct sock *sk)
{
	struct kw_qp *qp;

	read_lock_bh(&sk->sk_callback_lock);
	qp = sk->sk_user_data;
	if (qp) {
		switch (sk->sk_state) {
		case TCP_ESTABLISHED:
			break;
		default:
			/*
			 * Peer closed or reset: the stream is gone. TCP reports
			 * a FIN before the data of the same segment, which may
			 * be the peer's Terminate: parse what is queued first.
			 */
			if (qp->cb_installed)
				kw_rx_drain(qp, sk);
			kw_qp_set_error(qp);
			break;
		}
	}
	read_unlock_bh(&sk->sk_callback_lock);
}

void kw_cm_install(struct kw_qp *qp)
{
	struct sock *sk = qp->sock->sk;

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
	if (sk->sk_user_data == qp)
		sk->sk_user_data = NULL;
	write_unlock_bh(&sk->sk_callback_lock);
}

void kw_cm_release_sock(struct kw_qp *qp)
{
	struct socket *sock = qp->sock;

	if (!sock)
		return;
	kw_cm_uninstall(qp);
	/*
	 * Abortive (RST) only with work requests still outstanding; a
	 * drained QP, also one closed in order or already flushed by an
	 * error, ends the stream with a FIN.
	 */
	if (qp->sq_compl != qp->sq_pulled)
		sock_no_linger(sock->sk);
	kernel_sock_shutdown(sock, SHUT_RDWR);
	if (qp->sock_file)
		fput(qp->sock_file);
	else
		sock_release(sock);
	qp->sock = NULL;
	qp->sock_file = NULL;
}

/* Drop a socket we did not manage to claim. */
static void put_sock(struct socket *sock, struct file *file)
{
	if (file)
		fput(file);	/* from a user fd */
	else
		sock_release(sock);	/* created by us */
}

/* Connection setup failed: close, and the QP is of no further use. */
static void cm_fail(struct kw_qp *qp)
{
	kw_cm_release_sock(qp);
	spin_lock_bh(&qp->lock);
	qp->state = KIWARP_QPS_ERROR;
	spin_unlock_bh(&qp->lock);
}

/*
 * Look up a QP and take its connection lock if it is in state want (IDLE:
 * no socket yet; MPA_REQ_RCVD: with its socket) and not being destroyed.
 * Returns it referenced with cm_lock held, or NULL.
 */
static struct kw_qp *cm_qp_lock(struct kw_ctx *ctx, u32 handle, int want)
{
	struct kw_qp *qp = kw_qp_get(ctx, handle);

	if (!qp)
		return NULL;
	mutex_lock(&qp->cm_lock);
	if (!qp->dying && qp->state == want &&
	    (want == KIWARP_QPS_IDLE ? !qp->sock : !!qp->sock))
		return qp;
	mutex_unlock(&qp->cm_lock);
	kw_qp_put(qp);
	return NULL;
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
 * Read and decode the peer's MPA Request (reply false) or Reply into *f,
 * its private data into pd (KW_MPA_MAX_PD bytes, must outlive *f), and copy
 * the ULP private data to user space at uptr (0: only the length, which is
 * stored in *ulen either way).
 */
static int recv_mpa_frame(struct socket *sock, bool reply,
			  struct kw_mpa_frame *f, u8 *pd, u64 uptr, u32 *ulen)
{
	u8 hdr[KW_MPA_HDR_LEN];
	int ret;

	ret = cm_recv(sock, hdr, sizeof(hdr));
	if (!ret)
		ret = kw_mpa_decode_hdr(hdr, reply, f);
	if (!ret)
		ret = cm_recv(sock, pd, f->pd_len);
	if (!ret)
		ret = kw_mpa_decode_pd(f, pd);
	if (ret)
		return ret;
	*ulen = f->ulp_pd_len;
	if (f->ulp_pd_len && uptr &&
	    copy_to_user(u64_to_user_ptr(uptr), f->ulp_pd, f->ulp_pd_len))
		return -EFAULT;
	return 0;
}

/* Claim sock for qp (no other QP/ULP may own it). */
static int take_sock(struct kw_qp *qp, struct socket *sock, struct file *file)
{
	struct sock *sk = sock->sk;
	int ret = 0;

	write_lock_bh(&sk->sk_callback_lock);
	if (sk->sk_user_data)
		ret = -EBUSY;
	else
		sk->sk_user_data = qp;
	write_unlock_bh(&sk->sk_callback_lock);
	if (ret)
		return ret;
	qp->sock = sock;
	qp->sock_file = file;
	return 0;
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
 * the callbacks, and process anything the peer already sent.
 */
static void go_rts(struct kw_qp *qp, const struct kw_mpa_result *res,
		   bool initiator)
{
	struct sock *sk = qp->sock->sk;
	u32 mss;

	lock_sock(sk);
	sk->sk_rcvtimeo = MAX_SCHEDULE_TIMEOUT;
	sk->sk_sndtimeo = MAX_SCHEDULE_TIMEOUT;
	mss = tcp_sk(sk)->mss_cache;
	release_sock(sk);
	tcp_sock_set_nodelay(sk);	/* takes the socket lock itself */

	sock_hold(sk);		/* for snd_una reads until the QP is freed */
	spin_lock_bh(&qp->lock);
	qp->ack_sk = sk;
	qp->mpa = *res;
	qp->mulpdu = kw_mpa_mulpdu(min_t(u32, mss, 65535), false);
	qp->orq_size = clamp_t(u32, res->ord, 1, KW_MAX_ORD);
	qp->irq_size = clamp_t(u32, res->ird, 1, KW_MAX_IRD);
	qp->rtr_send = initiator && res->p2p && res->rtr;
	qp->rtr_wait = !initiator && res->p2p && res->rtr;
	kw_rx_setup(qp);
	qp->state = KIWARP_QPS_RTS;
	spin_unlock_bh(&qp->lock);

	kw_cm_install(qp);
	/* Bytes that arrived behind the MPA frames. */
	lock_sock(sk);
	kw_rx_data_ready(sk);
	release_sock(sk);
	kw_qp_kick_tx(qp);
}

/* ---------------------------------------------------------------- connect */

static int connect_sock(struct kiwarp_connect *arg, struct socket **sockp)
{
	struct sockaddr_storage ss;
	struct socket *sock;
	int len, ret;

	ret = sockaddr_from_uapi(&arg->addr, &ss, &len);
	if (ret)
		return ret;
	ret = sock_create_kern(current->nsproxy->net_ns, ss.ss_family,
			       SOCK_STREAM, IPPROTO_TCP, &sock);
	if (ret)
		return ret;
	set_timeouts(sock, arg->timeout_ms);
	ret = kernel_connect(sock, (struct sockaddr *)&ss, len, 0);
	if (ret) {
		sock_release(sock);
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
	u8 *buf, *ulp_pd;
	struct kw_qp *qp;
	int ret, len;

	if (arg->reserved || arg->reserved0 || arg->peer_private_data_len ||
	    !kw_mem_is_zero(&arg->result, sizeof(arg->result)))
		return -EINVAL;
	ret = param_check(&arg->param);
	if (ret)
		return ret;
	if (arg->private_data_len > KIWARP_MAX_PRIVATE_DATA)
		return -EINVAL;
	if (arg->sockfd < -1)
		return -EINVAL;

	qp = cm_qp_lock(ctx, arg->qp, KIWARP_QPS_IDLE);
	if (!qp)
		return -EINVAL;
	buf = frame_buf(arg->private_data, arg->private_data_len, &ulp_pd);
	if (IS_ERR(buf)) {
		ret = PTR_ERR(buf);
		buf = NULL;
		goto out_unlock;
	}

	if (arg->sockfd >= 0) {
		ret = sock_from_fd(arg->sockfd, &sock, &file);
		if (ret)
			goto out_unlock;
	} else {
		ret = connect_sock(arg, &sock);
		if (ret)
			goto out_unlock;
	}
	ret = take_sock(qp, sock, file);
	if (ret) {
		put_sock(sock, file);
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
	ret = cm_send(sock, buf, len);
	if (ret)
		goto out_fail;

	ret = recv_mpa_frame(sock, true, &rep, buf, arg->peer_private_data,
			     &arg->peer_private_data_len);
	if (ret)
		goto out_fail;
	ret = kw_mpa_negotiate_initiator(&cfg, &rep, &res);
	if (ret)
		goto out_fail;
	result_to_param(&res, &arg->result);
	go_rts(qp, &res, true);
	ret = 0;
	goto out_unlock;

out_fail:
	cm_fail(qp);
out_unlock:
	mutex_unlock(&qp->cm_lock);
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

static int accept_sock(struct kw_ctx *ctx, struct kiwarp_accept *arg,
		       struct socket **sockp)
{
	struct kw_listener *l = listener_get(ctx, arg->listen_handle);
	int ret;

	if (!l)
		return -EINVAL;
	lock_sock(l->sock->sk);
	l->sock->sk->sk_rcvtimeo = arg->timeout_ms ?
		msecs_to_jiffies(arg->timeout_ms) : MAX_SCHEDULE_TIMEOUT;
	release_sock(l->sock->sk);
	ret = kernel_accept(l->sock, sockp, 0);
	kref_put(&l->ref, listener_free);
	if (ret == -EAGAIN)
		ret = -ETIMEDOUT;
	return ret;
}

int kw_cm_accept(struct kw_ctx *ctx, struct kiwarp_accept *arg)
{
	struct sockaddr_storage ss;
	struct socket *sock = NULL;
	struct file *file = NULL;
	struct kw_mpa_frame *req;
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

	if (arg->sockfd >= 0)
		ret = sock_from_fd(arg->sockfd, &sock, &file);
	else
		ret = accept_sock(ctx, arg, &sock);
	if (ret)
		goto out_unlock;
	ret = take_sock(qp, sock, file);
	if (ret) {
		put_sock(sock, file);
		goto out_unlock;
	}
	set_timeouts(sock, arg->listen_handle ? 0 : arg->timeout_ms);

	req = &qp->mpa_req;
	ret = recv_mpa_frame(sock, false, req, qp->mpa_req_pd,
			     arg->peer_private_data, &arg->peer_private_data_len);
	if (ret)
		goto out_fail;
	arg->peer.mpa_rev = req->rev;
	arg->peer.flags = (req->crc ? KIWARP_CONN_CRC : 0) |
			  (req->p2p ? KIWARP_CONN_P2P : 0);
	arg->peer.rtr = req->p2p ? rtr_uapi(req->rtr) : KIWARP_RTR_NONE;
	arg->peer.ird = req->enhanced ? req->ird : 0;
	arg->peer.ord = req->enhanced ? req->ord : 0;
	if (kernel_getpeername(sock, (struct sockaddr *)&ss) >= 0)
		sockaddr_to_uapi(&ss, &arg->peer_addr);

	spin_lock_bh(&qp->lock);
	qp->state = KIWARP_QPS_MPA_REQ_RCVD;
	spin_unlock_bh(&qp->lock);
	ret = 0;
	goto out_unlock;

out_fail:
	cm_fail(qp);
out_unlock:
	mutex_unlock(&qp->cm_lock);
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

	qp = cm_qp_lock(ctx, arg->qp, KIWARP_QPS_MPA_REQ_RCVD);
	if (!qp)
		return -EINVAL;
	buf = frame_buf(arg->private_data, arg->private_data_len, &ulp_pd);
	if (IS_ERR(buf)) {
		ret = PTR_ERR(buf);
		buf = NULL;
		goto out_unlock;
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
	ret = cm_send(qp->sock, buf, len);
	if (ret)
		goto out_fail;
	if (rep.reject) {
		/* Rejected (by the caller or by negotiation): close. */
		ret = nego ? nego : 0;
		goto out_fail;
	}
	result_to_param(&res, &arg->result);
	go_rts(qp, &res, false);
	ret = 0;
	goto out_unlock;

out_fail:
	cm_fail(qp);
out_unlock:
	mutex_unlock(&qp->cm_lock);
	kfree(buf);
	kw_qp_put(qp);
	return ret;
}

/* ----------------------------------------------------------------- listen */

int kw_cm_listen(struct kw_ctx *ctx, struct kiwarp_listen *arg)
{
	struct sockaddr_storage ss;
	struct kw_listener *l;
	u32 id;
	int len, ret;

	if (arg->reserved0 || arg->reserved1 || arg->handle || arg->port)
		return -EINVAL;
	ret = sockaddr_from_uapi(&arg->addr, &ss, &len);
	if (ret)
		return ret;
	l = kzalloc(sizeof(*l), GFP_KERNEL);
	if (!l)
		return -ENOMEM;
	kref_init(&l->ref);
	ret = sock_create_kern(current->nsproxy->net_ns, ss.ss_family,
			       SOCK_STREAM, IPPROTO_TCP, &l->sock);
	if (ret)
		goto err_free;
	sock_set_reuseaddr(l->sock->sk);
	ret = kernel_bind(l->sock, (struct sockaddr *)&ss, len);
	if (ret)
		goto err_sock;
	ret = kernel_listen(l->sock, arg->backlog ? arg->backlog : 16);
	if (ret)
		goto err_sock;
	ret = kernel_getsockname(l->sock, (struct sockaddr *)&ss);
	if (ret < 0)
		goto err_sock;
	ret = xa_alloc(&ctx->listeners, &id, l, XA_LIMIT(1, U16_MAX),
		       GFP_KERNEL);
	if (ret)
		goto err_sock;
	l->handle = id;
	arg->handle = id;
	arg->port = ss.ss_family == AF_INET ?
		((struct sockaddr_in *)&ss)->sin_port :
		((struct sockaddr_in6 *)&ss)->sin6_port;
	return 0;

err_sock:
	sock_release(l->sock);
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
