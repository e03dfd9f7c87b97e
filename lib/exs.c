// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * The Extended Sockets API (<kiwarp/exs.h>, exs(3)) over Linux sockets.
 *
 * Model. An operation (exs_send(), exs_recv()) is queued on its socket's
 * state (struct exs_fd) in posting order, sends and receives apart, and
 * progresses with non-blocking send()/recv() calls: at once when it is
 * posted, then whenever exs_qdequeue() finds the socket ready in its
 * queue's epoll set. A socket with operations pending belongs to one
 * queue (the one they were posted on) and sits in that queue's epoll set
 * with the events it waits for; a socket with none is not in it. An
 * operation that ends becomes an event in its queue's ring; an eventfd in
 * the epoll set makes exs_qfd() readable while the ring holds events.
 * Sockets are in the set edge-triggered: a socket is waited for only after
 * a call on it said EAGAIN (or ENOBUFS, for notifications), so no edge is
 * missed, and a socket that stays in error (its stream dead, zero-copy
 * notifications still due) does not make epoll_wait() spin.
 *
 * Connections. exs_accept() queues on a listening socket's receive side
 * and ends with a socket accept() took; exs_connect() starts a
 * non-blocking connect() and queues on the send side, ahead of any send
 * posted after it, ending when the socket is writable (SO_ERROR says
 * how). Neither call may block, so the library sets O_NONBLOCK on the
 * socket while such an operation is pending (exs_fd.nb_set) and clears it
 * again once none is.
 *
 * Zero-copy sends. On a socket in IWARP_MODE, a send from memory
 * registered with exs_mregister() registers that memory with the socket
 * (IWARP_MREG, once per socket and registration) and goes with
 * MSG_ZEROCOPY: the kernel transmits from the pages and tells which of
 * the socket's MSG_ZEROCOPY calls are done on its error queue, ids
 * counted from 0 per socket (exs_fd.zc_next: the library must be the only
 * one on the socket that sends with MSG_ZEROCOPY). The operation ends when
 * all its bytes went and all its calls are notified.
 *
 * Zero-copy receives. A receive with MSG_WAITALL of at least EXS_RZC_MIN
 * bytes of registered memory, on such a socket, is posted in the kernel
 * (IWARP_RECV_ZC) when it becomes the socket's first: the peer's Writes
 * land in the buffer past the rzc_pre bytes that come through recv() as
 * usual; the operation ends with IWARP_RECV_ZC_DONE's result. One that
 * ends otherwise (queue deleted, socket gone, no epoll) is cancelled in
 * the kernel; if that cannot be confirmed, its registration stays busy.
 *
 * Locking: one mutex (exs_lock) over all of it; exs_qdequeue() sleeps in
 * epoll_wait() without it, counted in its queue's waiters: exs_qdelete()
 * marks the queue dying and wakes them, and the last one out frees it.
 * A queue handle is its table slot and a generation (a deleted queue's
 * handle does not name the next queue in that slot); a memory handle is
 * a slot and a generation too. Not fork-safe: a child shares its parent's
 * epoll sets.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <linux/errqueue.h>
#include <linux/kiwarp.h>

#include "kiwarp/exs.h"

#define EXS_API __attribute__((visibility("default")))

#define EXS_MAX_QUEUES	1024		/* slots: handle & (this - 1) */
#define EXS_MAX_MREGS	4096
#define EXS_GEN_SHIFT	12		/* handle = gen << 12 | slot */
#define EXS_GEN_MAX	(INT_MAX >> EXS_GEN_SHIFT)
#define EXS_FD_MREGS	IWARP_MREG_MAX	/* per socket, the kernel's limit */
#define EXS_RZC_MIN	(64 * 1024)	/* smaller receives copy */

#ifndef SO_EE_ORIGIN_ZEROCOPY
#define SO_EE_ORIGIN_ZEROCOPY	5
#endif
#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY		60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY		0x4000000
#endif

struct exs_op {
	struct exs_op *next;
	int type;		/* EXS_EVT_* */
	int flags;		/* exs_recv(): MSG_WAITALL */
	uint8_t *buf;
	size_t len, done;
	exs_mhandle_t mh;	/* or EXS_MHANDLE_INVALID */
	void *context;
	int err;		/* ended early: errno */
	int nfd;		/* EXS_EVT_ACCEPT: the socket, or -1 */
	bool ended;		/* no more bytes will move */
	bool zc;		/* sent with MSG_ZEROCOPY */
	bool rzc_tried;		/* a receive: zero-copy was considered */
	bool rzc;		/* ... posted in the kernel (IWARP_RECV_ZC) */
	bool rzc_stuck;		/* ... and maybe still: mh stays busy */
	size_t rzc_pre;		/* done reaches this by recv(), then the
				 * rest arrives in place */
	uint32_t id_first;	/* its calls' ids: id_first .. + ids - 1 */
	uint32_t ids, ids_done;
};

struct exs_queue {
	int epfd, evfd;
	int depth;
	int outstanding;	/* posted, not dequeued */
	exs_event_t *ring;	/* depth events */
	int head, count;	/* ring: first event, events in it */
	bool ev_armed;		/* evfd written, not yet read back */
	int gen;		/* of its handle */
	int waiters;		/* in exs_qdequeue()'s epoll_wait() */
	bool dying;		/* exs_qdelete()d: the last waiter frees it */
};

struct exs_mreg {
	bool used;
	int gen;		/* of its handle */
	uintptr_t addr;
	size_t len;
	unsigned int busy;	/* operations posted from it, not ended */
};

struct exs_fd {
	dev_t dev;		/* the socket it was: fd numbers are reused */
	ino_t ino;
	exs_qhandle_t q;	/* of its pending operations */
	struct exs_op *sq, *rq;	/* pending, in posting order */
	uint32_t epoll_events;	/* in q's epoll set with these */
	bool in_epoll;
	bool mode_known;	/* iwarp below is known */
	bool iwarp;		/* in IWARP_MODE (once so, it stays) */
	bool zc_on;		/* SO_ZEROCOPY set */
	bool zc_off;		/* registering failed once: copy from now on */
	bool eof;		/* recv() said 0 */
	bool nb_set;		/* we set O_NONBLOCK: see fd_nonblock() */
	int snd_err, rcv_err;	/* the stream broke: later ones fail too */
	uint32_t zc_next;	/* id of its next MSG_ZEROCOPY call */
	exs_mhandle_t regs[EXS_FD_MREGS];	/* IWARP_MREG done for these */
	unsigned int nregs;
};

static pthread_mutex_t exs_lock = PTHREAD_MUTEX_INITIALIZER;
static bool exs_ready;
static struct exs_queue *exs_queues[EXS_MAX_QUEUES];
static int exs_queue_gen[EXS_MAX_QUEUES];	/* the next handle's */
static struct exs_mreg *exs_mregs;	/* EXS_MAX_MREGS, from the first */
static struct exs_fd **exs_fds;		/* by fd number */
static int exs_nfds;

static int fail(int err)
{
	errno = err;
	return -1;
}

int EXS_API exs_init(int version)
{
	if (version != EXS_VERSION)
		return fail(EINVAL);
	pthread_mutex_lock(&exs_lock);
	exs_ready = true;
	pthread_mutex_unlock(&exs_lock);
	return 0;
}

static struct exs_queue *queue_of(exs_qhandle_t q)
{
	struct exs_queue *qu;

	if (q < 0)
		return NULL;
	qu = exs_queues[q & (EXS_MAX_QUEUES - 1)];
	return qu && qu->gen == q >> EXS_GEN_SHIFT ? qu : NULL;
}

static void queue_free(struct exs_queue *qu)
{
	close(qu->epfd);
	close(qu->evfd);
	free(qu->ring);
	free(qu);
}

exs_qhandle_t EXS_API exs_qcreate(int depth)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = -1 };
	struct exs_queue *qu;
	int i, err;

	if (depth < 1 || depth > EXS_QDEPTH_MAX)
		return fail(EINVAL);
	qu = calloc(1, sizeof(*qu));
	if (!qu)
		return fail(ENOMEM);
	qu->depth = depth;
	qu->ring = calloc(depth, sizeof(*qu->ring));
	qu->epfd = epoll_create1(EPOLL_CLOEXEC);
	qu->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	err = errno;
	if (!qu->ring || qu->epfd < 0 || qu->evfd < 0)
		goto err_free;
	if (epoll_ctl(qu->epfd, EPOLL_CTL_ADD, qu->evfd, &ev)) {
		err = errno;
		goto err_free;
	}
	pthread_mutex_lock(&exs_lock);
	if (!exs_ready) {
		pthread_mutex_unlock(&exs_lock);
		err = EINVAL;	/* exs_init() first */
		goto err_free;
	}
	for (i = 0; i < EXS_MAX_QUEUES && exs_queues[i]; i++)
		;
	if (i < EXS_MAX_QUEUES) {
		exs_queues[i] = qu;
		qu->gen = exs_queue_gen[i];
		exs_queue_gen[i] = (exs_queue_gen[i] + 1) % (EXS_GEN_MAX + 1);
	}
	pthread_mutex_unlock(&exs_lock);
	if (i == EXS_MAX_QUEUES) {
		err = EMFILE;
		goto err_free;
	}
	return qu->gen << EXS_GEN_SHIFT | i;

err_free:
	if (!qu->ring)
		err = ENOMEM;
	if (qu->evfd >= 0)
		close(qu->evfd);
	if (qu->epfd >= 0)
		close(qu->epfd);
	free(qu->ring);
	free(qu);
	return fail(err);
}

int EXS_API exs_qfd(exs_qhandle_t q)
{
	struct exs_queue *qu;
	int fd;

	pthread_mutex_lock(&exs_lock);
	qu = queue_of(q);
	fd = qu ? qu->epfd : -1;
	pthread_mutex_unlock(&exs_lock);
	return qu ? fd : fail(EINVAL);
}

/* ------------------------------------------------------------ sockets */

static void op_complete(int fd, struct exs_fd *st, struct exs_op *op);

/* fd is still the socket st describes */
static bool fd_same(int fd, const struct exs_fd *st)
{
	struct stat sb;

	return !fstat(fd, &sb) && sb.st_dev == st->dev && sb.st_ino == st->ino;
}

/* The socket closed under its operations: they end, EBADF. */
static void fd_gone(int fd, struct exs_fd *st)
{
	struct exs_op *op;

	while ((op = st->sq) || (op = st->rq)) {
		if (op == st->sq)
			st->sq = op->next;
		else
			st->rq = op->next;
		op->err = op->err ?: EBADF;
		/* a zero-copy receive posted in a socket that may live on
		 * elsewhere (a dup, a child): its memory stays busy */
		op->rzc_stuck = op->rzc;
		op_complete(fd, st, op);
	}
	st->in_epoll = false;	/* (closing it took it out of epoll) */
}

/* The state of socket fd, created or (fd now another socket) reset. */
static struct exs_fd *fd_state(int fd, int *err)
{
	struct exs_fd *st;
	struct stat sb;
	int type = 0;
	socklen_t tlen = sizeof(type);

	if (fd < 0 || fstat(fd, &sb)) {
		*err = EBADF;
		return NULL;
	}
	if (!S_ISSOCK(sb.st_mode)) {
		*err = ENOTSOCK;
		return NULL;
	}
	if (fd >= exs_nfds) {
		size_t n = fd < 64 ? 64 : (size_t)fd * 2;
		struct exs_fd **t;

		if (n > INT_MAX) {
			*err = EBADF;
			return NULL;
		}
		t = realloc(exs_fds, n * sizeof(*t));
		if (!t) {
			*err = ENOMEM;
			return NULL;
		}
		memset(t + exs_nfds, 0, (n - exs_nfds) * sizeof(*t));
		exs_fds = t;
		exs_nfds = (int)n;
	}
	st = exs_fds[fd];
	if (st && (st->dev != sb.st_dev || st->ino != sb.st_ino)) {
		/* a new socket on an old number: the old one is gone */
		fd_gone(fd, st);
		memset(st, 0, sizeof(*st));
		st->q = EXS_QHANDLE_INVALID;
	} else if (st) {
		return st;
	}
	/* a connected stream socket: no datagrams, no listeners */
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) ||
	    type != SOCK_STREAM) {
		*err = EINVAL;
		return NULL;
	}
	if (!st) {
		st = calloc(1, sizeof(*st));
		if (!st) {
			*err = ENOMEM;
			return NULL;
		}
		st->q = EXS_QHANDLE_INVALID;
		exs_fds[fd] = st;
	}
	st->dev = sb.st_dev;
	st->ino = sb.st_ino;
	return st;
}

/*
 * Register mh with the socket for zero-copy sends; false: the send copies
 * (not IWARP_MODE, or a registration failed once on this socket, e.g.
 * RLIMIT_MEMLOCK or 64 of them: not tried again for each send).
 */
static bool fd_zc_ready(int fd, struct exs_fd *st, exs_mhandle_t mh)
{
	struct iwarp_mreg r = { 0 };
	int one = 1, mode = 0, slot = mh & (EXS_MAX_MREGS - 1);
	socklen_t len = sizeof(mode);
	unsigned int i;

	if (!st->mode_known) {
		st->iwarp = !getsockopt(fd, SOL_IWARP, IWARP_MODE, &mode,
					&len) && mode;
		/* a plain socket may switch later; one in IWARP_MODE stays */
		st->mode_known = st->iwarp;
	}
	if (!st->iwarp || st->zc_off)
		return false;
	for (i = 0; i < st->nregs; i++)
		if (st->regs[i] == mh)
			return true;
	if (!st->zc_on) {
		if (setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)))
			goto off;
		st->zc_on = true;
	}
	if (st->nregs == EXS_FD_MREGS)
		goto off;
	r.addr = exs_mregs[slot].addr;
	r.len = exs_mregs[slot].len;
	if (setsockopt(fd, SOL_IWARP, IWARP_MREG, &r, sizeof(r)))
		goto off;
	st->regs[st->nregs++] = mh;
	return true;
off:
	st->zc_off = true;
	return false;
}

/* ------------------------------------------------------------- events */

static void queue_signal(struct exs_queue *qu)
{
	uint64_t one = 1;

	if (!qu->ev_armed && qu->count &&
	    write(qu->evfd, &one, sizeof(one)) == sizeof(one))
		qu->ev_armed = true;
}

static struct exs_mreg *mreg_of(exs_mhandle_t mh)
{
	struct exs_mreg *r;

	if (mh < 0 || !exs_mregs)
		return NULL;
	r = &exs_mregs[mh & (EXS_MAX_MREGS - 1)];
	return r->used && r->gen == mh >> EXS_GEN_SHIFT ? r : NULL;
}

/* op ended: its event, in its queue's ring (room was kept at posting) */
static void op_complete(int fd, struct exs_fd *st, struct exs_op *op)
{
	struct exs_queue *qu = queue_of(st->q);
	exs_event_t *e = &qu->ring[(qu->head + qu->count++) % qu->depth];

	e->exs_evt_type = op->type;
	e->exs_evt_errno = op->err;
	e->exs_evt_context = op->context;
	e->exs_evt_fd = op->type == EXS_EVT_ACCEPT ? op->nfd : fd;
	e->exs_evt_buf = op->buf;
	e->exs_evt_nbytes = op->done;
	if (op->mh != EXS_MHANDLE_INVALID && !op->rzc_stuck)
		mreg_of(op->mh)->busy--;
	free(op);
	queue_signal(qu);
}

/* Overlap of a notification [lo, hi] with op's ids (ids are u32 and
 * wrap: distances, not values, are compared). */
static uint32_t zc_overlap(const struct exs_op *op, uint32_t lo, uint32_t hi)
{
	int64_t a = (int32_t)(lo - op->id_first);
	int64_t b = a + (hi - lo);
	int64_t from = a > 0 ? a : 0;
	int64_t to = b < (int64_t)op->ids - 1 ? b : (int64_t)op->ids - 1;

	return to >= from ? (uint32_t)(to - from + 1) : 0;
}

/* Take the socket's MSG_ZEROCOPY notifications (until EAGAIN). */
static void fd_zc_notes(int fd, struct exs_fd *st)
{
	for (;;) {
		char cbuf[512];
		struct msghdr m = { .msg_control = cbuf,
				    .msg_controllen = sizeof(cbuf) };
		struct cmsghdr *cm;

		if (recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
			return;
		for (cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
			struct sock_extended_err e;
			struct exs_op *op;

			if (!((cm->cmsg_level == SOL_IP &&
			       cm->cmsg_type == IP_RECVERR) ||
			      (cm->cmsg_level == SOL_IPV6 &&
			       cm->cmsg_type == IPV6_RECVERR)) ||
			    cm->cmsg_len < CMSG_LEN(sizeof(e)))
				continue;
			memcpy(&e, CMSG_DATA(cm), sizeof(e));
			if (e.ee_origin != SO_EE_ORIGIN_ZEROCOPY)
				continue;	/* not ours: dropped */
			for (op = st->sq; op; op = op->next)
				if (op->zc && op->ids)
					op->ids_done += zc_overlap(op,
						e.ee_info, e.ee_data);
		}
	}
}

/* accept(2): errors of a connection that died queued, or of the net */
static bool accept_again(int err)
{
	switch (err) {
	case EINTR: case ECONNABORTED: case EPROTO: case ENETDOWN:
	case ENOPROTOOPT: case EHOSTDOWN: case ENONET: case EHOSTUNREACH:
	case EOPNOTSUPP: case ENETUNREACH:
		return true;
	}
	return false;
}

/* A connect heads the send side: what is behind it waits for it. */
static bool fd_connecting(const struct exs_fd *st)
{
	return st->sq && st->sq->type == EXS_EVT_CONNECT;
}

/* Accepts are pending (a listener has no other operations). */
static bool fd_accepting(const struct exs_fd *st)
{
	return st->rq && st->rq->type == EXS_EVT_ACCEPT;
}

/* A pending connect() finished: op->err is its outcome (SO_ERROR). */
static bool fd_connect_done(int fd, struct exs_op *op)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	socklen_t len = sizeof(op->err);

	if (poll(&p, 1, 0) <= 0 || !(p.revents & (POLLOUT | POLLERR | POLLHUP)))
		return false;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &op->err, &len))
		op->err = errno;
	if (!op->err) {
		/* the error was taken by someone else's call: still failed */
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);

		if (getpeername(fd, (struct sockaddr *)&ss, &sl))
			op->err = errno == ENOTCONN ? ECONNREFUSED : errno;
	}
	return true;
}

/*
 * A connect at the head of sq: once it finished, its event, before any of
 * the operations behind it; if it failed, they fail with its error, and
 * so does every later one on the socket (a new exs_connect() starts over).
 */
static void fd_connect_step(int fd, struct exs_fd *st, uint32_t *wait)
{
	struct exs_op *op = st->sq;

	if (!fd_connecting(st))
		return;
	if (!op->ended && !fd_connect_done(fd, op)) {
		*wait |= EPOLLOUT;
		return;
	}
	st->sq = op->next;
	if (op->err) {
		st->snd_err = op->err;
		st->rcv_err = op->err;
	}
	op_complete(fd, st, op);
}

/*
 * Move sq's bytes until the socket would block (*wait: the events to wait
 * for; ENOBUFS: the kernel waits for us to read notifications).
 */
static void fd_send(int fd, struct exs_fd *st, uint32_t *wait)
{
	struct exs_op *op;

	for (op = st->sq; op; op = op->next) {
		if (op->ended)
			continue;
		if (op->type == EXS_EVT_CONNECT) {
			/* sends behind it wait for it (fd_connect_step()) */
			*wait |= EPOLLOUT;
			return;
		}
		while (!st->snd_err && op->done < op->len) {
			int fl = MSG_DONTWAIT | MSG_NOSIGNAL |
				 (op->zc ? MSG_ZEROCOPY : 0);
			ssize_t n = send(fd, op->buf + op->done,
					 op->len - op->done, fl);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
				*wait |= EPOLLOUT;
				return;
			}
			if (n < 0 && errno == ENOBUFS && op->zc)
				return;	/* EPOLLERR: notifications */
			if (n < 0) {
				/* the stream is broken: later sends fail too */
				st->snd_err = errno;
				break;
			}
			if (op->zc) {
				if (!op->ids)
					op->id_first = st->zc_next;
				op->ids++;
				st->zc_next++;
			}
			op->done += n;
		}
		if (st->snd_err && op->done < op->len)
			op->err = st->snd_err;
		op->ended = true;
	}
}

/*
 * A receive of registered memory that wants all its bytes (MSG_WAITALL)
 * and is large: the peer's Writes may land in it directly. The kernel
 * says how many bytes before that still come through the socket's
 * receive buffer (rzc_pre); any refusal (EAGAIN: none would land in
 * place) leaves the receive to recv().
 */
static void fd_recv_zc_post(int fd, struct exs_fd *st, struct exs_op *op)
{
	struct iwarp_recv_zc r = { 0 };
	socklen_t len = sizeof(r);

	op->rzc_tried = true;
	if (op->mh == EXS_MHANDLE_INVALID || !(op->flags & MSG_WAITALL) ||
	    op->len - op->done < EXS_RZC_MIN || st->eof || st->rcv_err ||
	    !fd_zc_ready(fd, st, op->mh))
		return;
	r.addr = (uintptr_t)(op->buf + op->done);
	r.len = op->len - op->done;
	if (getsockopt(fd, SOL_IWARP, IWARP_RECV_ZC, &r, &len))
		return;
	op->rzc = true;
	op->rzc_pre = op->done + r.pre;
}

/*
 * The kernel forgets the posted receive (a reset if the peer may still
 * write into it); true once it no longer lets the peer write there: it
 * did, or nothing was posted any more (another holder of the socket took
 * the result, which ended it).
 */
static bool fd_recv_zc_cancel(int fd)
{
	int r;

	do {
		r = setsockopt(fd, SOL_IWARP, IWARP_RECV_ZC_CANCEL, NULL, 0);
	} while (r && errno == EINTR);
	return !r || errno == ENOENT;
}

/*
 * Take a posted zero-copy receive back from the kernel; if that cannot be
 * confirmed, its registration stays busy for good (exs_mderegister() says
 * EBUSY) rather than be reused under the peer's writes.
 */
static void op_zc_drop(int fd, struct exs_op *op)
{
	if (!op->rzc)
		return;
	op->rzc_stuck = !fd_recv_zc_cancel(fd);
	op->rzc = false;
}

/* Its result, once the bytes before it were read; false: not yet. */
static bool fd_recv_zc_done(int fd, struct exs_fd *st, struct exs_op *op)
{
	struct iwarp_recv_zc_done d = { 0 };
	socklen_t len = sizeof(d);
	int r;

	do {
		r = getsockopt(fd, SOL_IWARP, IWARP_RECV_ZC_DONE, &d, &len);
	} while (r && errno == EINTR);
	if (r && errno == EAGAIN)
		return false;
	if (r) {
		/* no result: the buffer goes back only once the kernel let
		 * it go */
		d.error = errno;
		op_zc_drop(fd, op);
	}
	op->rzc = false;
	op->done += d.bytes;
	if (d.error && !st->rcv_err)
		st->rcv_err = d.error;
	return true;
}

/* Fill rq's buffers from what the socket has. */
static void fd_recv(int fd, struct exs_fd *st, uint32_t *wait)
{
	struct exs_op *op;
	size_t limit;

	/* not before a pending connect: recv() would take its error */
	if (fd_connecting(st))
		return;
	while ((op = st->rq)) {
		if (op->type == EXS_EVT_ACCEPT) {
			int nfd;

			do {	/* a connection that died queued: the next */
				nfd = (int)syscall(SYS_accept4, fd, NULL, NULL, 0);
			} while (nfd < 0 && accept_again(errno));
			if (nfd < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
				*wait |= EPOLLIN;
				return;
			}
			op->nfd = nfd;
			if (nfd < 0)
				op->err = errno;	/* EMFILE, ENOBUFS, ... */
			st->rq = op->next;
			op_complete(fd, st, op);
			continue;
		}
		if (!op->rzc_tried)
			fd_recv_zc_post(fd, st, op);
		limit = op->rzc ? op->rzc_pre : op->len;
		while (!st->eof && !st->rcv_err && op->done < limit) {
			ssize_t n = recv(fd, op->buf + op->done,
					 limit - op->done, MSG_DONTWAIT);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
				*wait |= EPOLLIN;
				return;
			}
			if (n < 0) {
				/* not EOF later: every later receive fails */
				st->rcv_err = errno;
				break;
			}
			if (n == 0) {
				st->eof = true;
				break;
			}
			op->done += n;
			if (!(op->flags & MSG_WAITALL))
				break;
		}
		/*
		 * A recv() that failed before the bytes before it were all in
		 * (EFAULT: the buffer is gone): the stream itself may be fine
		 * and would fill it after a gap; it is taken back instead.
		 */
		if (op->rzc && st->rcv_err && op->done < op->rzc_pre)
			op_zc_drop(fd, op);
		/* the bytes before it are in (or the stream ended): its turn */
		if (op->rzc && !fd_recv_zc_done(fd, st, op)) {
			*wait |= EPOLLIN;
			return;
		}
		if (st->rcv_err)
			op->err = st->rcv_err;
		st->rq = op->next;
		op_complete(fd, st, op);
	}
}

/* O_NONBLOCK for a pending accept or connect (see the top); 0 or errno */
static int fd_nonblock(int fd, struct exs_fd *st)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0)
		return errno;
	if (fl & O_NONBLOCK)
		return 0;
	if (fcntl(fd, F_SETFL, fl | O_NONBLOCK))
		return errno;
	st->nb_set = true;
	return 0;
}

/* No accept or connect pending any more: as the application had it. */
static void fd_blocking_again(int fd, struct exs_fd *st)
{
	int fl;

	if (!st->nb_set)
		return;
	st->nb_set = false;
	fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
}

/*
 * Progress socket fd: receives, sends, notifications; then the events
 * ended operations make (in posting order per direction), and its place
 * in the queue's epoll set (edge-triggered: only after EAGAIN).
 */
static void fd_progress(int fd, struct exs_fd *st)
{
	struct exs_queue *qu = queue_of(st->q);
	struct epoll_event ev = { .data.fd = fd };
	uint32_t wait = 0;
	struct exs_op *op;

	if (!fd_same(fd, st)) {
		/* closed under its operations (a stale epoll event) */
		fd_gone(fd, st);
		st->q = EXS_QHANDLE_INVALID;
		return;
	}
	/* a pending connect first: receives wait for its outcome */
	fd_connect_step(fd, st, &wait);
	if (st->rq)
		fd_recv(fd, st, &wait);
	if (st->sq)
		fd_send(fd, st, &wait);
	if (st->nb_set && !fd_accepting(st) && !fd_connecting(st))
		fd_blocking_again(fd, st);	/* no accept/connect left */
	if (st->zc_on)
		fd_zc_notes(fd, st);
	while ((op = st->sq) && op->ended &&
	       (!op->zc || op->ids_done >= op->ids)) {
		st->sq = op->next;
		op_complete(fd, st, op);
	}
	if (!st->sq && !st->rq) {
		if (st->in_epoll)
			epoll_ctl(qu->epfd, EPOLL_CTL_DEL, fd, NULL);
		st->in_epoll = false;
		st->q = EXS_QHANDLE_INVALID;
		fd_blocking_again(fd, st);
		return;
	}
	/* (EPOLLERR, always reported, brings the notifications) */
	ev.events = EPOLLET | wait;
	if (st->in_epoll && st->epoll_events == ev.events &&
	    !(wait & EPOLLOUT))
		return;
	/*
	 * (Re)armed after EAGAIN: epoll looks at the socket's readiness as
	 * it adds or modifies it, so an edge just missed is seen. EPOLLOUT
	 * is re-armed each time: its edge may have come before our EAGAIN.
	 */
	if (!epoll_ctl(qu->epfd, st->in_epoll ? EPOLL_CTL_MOD : EPOLL_CTL_ADD,
		       fd, &ev)) {
		st->in_epoll = true;
		st->epoll_events = ev.events;
		return;
	}
	/* no way to wait for it (ENOMEM, max_user_watches): fail them */
	{
		int err = errno;

		while ((op = st->sq) || (op = st->rq)) {
			if (op == st->sq)
				st->sq = op->next;
			else
				st->rq = op->next;
			op->err = op->err ?: err;
			op_zc_drop(fd, op);
			op_complete(fd, st, op);
		}
		st->q = EXS_QHANDLE_INVALID;
		fd_blocking_again(fd, st);
	}
}

/* ----------------------------------------------------------- posting */

/* The socket's state, if an operation on queue q may be posted on it. */
static struct exs_fd *post_target(int fd, struct exs_queue *qu,
				  exs_qhandle_t q, int *err)
{
	struct exs_fd *st = fd_state(fd, err);

	if (!st)
		return NULL;
	if (st->q != EXS_QHANDLE_INVALID && st->q != q)
		*err = EINVAL;	/* its pending operations are on another */
	else if (qu->outstanding >= qu->depth)
		*err = EAGAIN;	/* every event must fit the ring */
	else
		return st;
	return NULL;
}

/* Queue op on its side of the socket, and move the socket forward. */
static void post_queue(int fd, struct exs_fd *st, exs_qhandle_t q,
		       struct exs_op *op, bool send_side)
{
	struct exs_op **tail;

	st->q = q;
	queue_of(q)->outstanding++;
	for (tail = send_side ? &st->sq : &st->rq; *tail;
	     tail = &(*tail)->next)
		;
	*tail = op;
	fd_progress(fd, st);
}

static int post(int type, int fd, const void *buf, size_t nbytes, int flags,
		exs_mhandle_t mh, exs_qhandle_t q, void *context)
{
	struct exs_queue *qu;
	struct exs_fd *st;
	struct exs_op *op;
	int err = 0;

	if (!buf)
		return fail(EFAULT);
	if (!nbytes || nbytes > SSIZE_MAX)
		return fail(EINVAL);
	op = calloc(1, sizeof(*op));
	if (!op)
		return fail(ENOMEM);
	pthread_mutex_lock(&exs_lock);
	qu = queue_of(q);
	if (!qu || qu->dying) {
		err = EINVAL;
		goto out;
	}
	if (mh != EXS_MHANDLE_INVALID) {
		struct exs_mreg *r = mreg_of(mh);
		uintptr_t a = (uintptr_t)buf;

		if (!r || a < r->addr || nbytes > r->len ||
		    a - r->addr > r->len - nbytes) {
			err = EINVAL;	/* not inside the registration */
			goto out;
		}
	}
	st = post_target(fd, qu, q, &err);
	if (!st)
		goto out;
	op->type = type;
	op->nfd = -1;
	op->flags = flags;
	op->buf = (uint8_t *)buf;
	op->len = nbytes;
	op->mh = mh;
	op->context = context;
	/*
	 * (Not behind a pending connect: an IWARP_MREG then could wait for
	 * the stream's MPA exchange; such a send copies.)
	 */
	if (type == EXS_EVT_SEND && mh != EXS_MHANDLE_INVALID &&
	    !fd_connecting(st))
		op->zc = fd_zc_ready(fd, st, mh);
	if (mh != EXS_MHANDLE_INVALID)
		mreg_of(mh)->busy++;
	post_queue(fd, st, q, op, type == EXS_EVT_SEND);
	op = NULL;
out:
	pthread_mutex_unlock(&exs_lock);
	free(op);
	return err ? fail(err) : 0;
}

int EXS_API exs_send(int fd, const void *buf, size_t nbytes, int flags,
		     exs_mhandle_t mh, exs_qhandle_t q, void *context)
{
	if (flags & ~MSG_NOSIGNAL)
		return fail(EINVAL);	/* (SIGPIPE is never raised) */
	return post(EXS_EVT_SEND, fd, buf, nbytes, 0, mh, q, context);
}

int EXS_API exs_recv(int fd, void *buf, size_t nbytes, int flags,
		     exs_mhandle_t mh, exs_qhandle_t q, void *context)
{
	if (flags & ~MSG_WAITALL)
		return fail(EINVAL);
	return post(EXS_EVT_RECV, fd, buf, nbytes, flags, mh, q, context);
}

/*
 * exs_accept() and exs_connect(): an operation with no buffer. For a
 * connect, connect() runs here: an error about the arguments or the
 * socket is the call's (-1), one about the connection its event's.
 */
static int post_conn(int type, int fd, const struct sockaddr *addr,
		     socklen_t addrlen, exs_qhandle_t q, void *context)
{
	struct exs_queue *qu;
	struct exs_fd *st;
	struct exs_op *op;
	int err = 0, on = 0;
	socklen_t len = sizeof(on);

	op = calloc(1, sizeof(*op));
	if (!op)
		return fail(ENOMEM);
	pthread_mutex_lock(&exs_lock);
	qu = queue_of(q);
	if (!qu || qu->dying) {
		err = EINVAL;
		goto out;
	}
	st = post_target(fd, qu, q, &err);
	if (!st)
		goto out;
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len)) {
		err = errno;
		goto out;
	}
	if (type == EXS_EVT_ACCEPT ? !on : on || st->sq || st->rq) {
		/* accept: a listener; connect: nothing else pending */
		err = EINVAL;
		goto out;
	}
	err = fd_nonblock(fd, st);
	if (err)
		goto out;
	if (type == EXS_EVT_CONNECT) {	/* a retry starts over */
		st->snd_err = 0;
		st->rcv_err = 0;
		st->eof = false;
	}
	op->type = type;
	op->nfd = -1;
	op->mh = EXS_MHANDLE_INVALID;
	op->context = context;
	if (type == EXS_EVT_CONNECT) {
		if (!syscall(SYS_connect, fd, addr, addrlen)) {
			op->ended = true;
		} else if (errno != EINPROGRESS) {
			switch (errno) {
			case ECONNREFUSED: case ENETUNREACH: case EHOSTUNREACH:
			case ETIMEDOUT: case ECONNRESET: case EADDRNOTAVAIL:
			case EAGAIN:	/* (no local port free) */
				op->err = errno;	/* the event says it */
				op->ended = true;
				break;
			default:	/* EISCONN, EALREADY, EAFNOSUPPORT, ... */
				err = errno;
				if (!st->sq && !st->rq)
					fd_blocking_again(fd, st);
				goto out;
			}
		}
	}
	post_queue(fd, st, q, op, type == EXS_EVT_CONNECT);
	op = NULL;
out:
	pthread_mutex_unlock(&exs_lock);
	free(op);
	return err ? fail(err) : 0;
}

int EXS_API exs_accept(int fd, exs_qhandle_t q, void *context)
{
	return post_conn(EXS_EVT_ACCEPT, fd, NULL, 0, q, context);
}

int EXS_API exs_connect(int fd, const struct sockaddr *addr,
			socklen_t addrlen, exs_qhandle_t q, void *context)
{
	if (!addr)
		return fail(EFAULT);
	return post_conn(EXS_EVT_CONNECT, fd, addr, addrlen, q, context);
}

/* ---------------------------------------------------------- dequeuing */

static int take_events(struct exs_queue *qu, exs_event_t *events, int n)
{
	int k = 0;

	while (k < n && qu->count) {
		events[k++] = qu->ring[qu->head];
		qu->head = (qu->head + 1) % qu->depth;
		qu->count--;
		qu->outstanding--;
	}
	if (!qu->count && qu->ev_armed) {
		uint64_t v;

		if (read(qu->evfd, &v, sizeof(v)) == sizeof(v) ||
		    errno == EAGAIN)
			qu->ev_armed = false;
	}
	return k;
}

/* Progress every socket of the queue that epoll says is ready. */
static void queue_progress(struct exs_queue *qu, exs_qhandle_t q)
{
	struct epoll_event evs[64];
	int i, n;

	n = epoll_wait(qu->epfd, evs, 64, 0);
	for (i = 0; i < n; i++) {
		int fd = evs[i].data.fd;

		if (fd < 0 || fd >= exs_nfds || !exs_fds[fd] ||
		    exs_fds[fd]->q != q)
			continue;	/* the eventfd, or stale */
		fd_progress(fd, exs_fds[fd]);
	}
}

static long long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

int EXS_API exs_qdequeue(exs_qhandle_t q, exs_event_t *events, int nevents,
			 const struct timespec *timeout)
{
	long long deadline = -1;
	struct exs_queue *qu;
	int n;

	if (nevents < 1 || !events)
		return fail(EINVAL);
	if (timeout) {
		if (timeout->tv_sec < 0 || timeout->tv_nsec < 0 ||
		    timeout->tv_nsec >= 1000000000L)
			return fail(EINVAL);
		/* beyond ~292 million years: no limit */
		if (timeout->tv_sec < LLONG_MAX / 2000)
			deadline = now_ms() + timeout->tv_sec * 1000LL +
				   (timeout->tv_nsec + 999999) / 1000000;
	}
	pthread_mutex_lock(&exs_lock);
	qu = queue_of(q);
	if (!qu || qu->dying) {
		pthread_mutex_unlock(&exs_lock);
		return fail(EINVAL);
	}
	for (;;) {
		struct pollfd pw = { .events = POLLIN };
		long long left;
		int r;

		/* sockets first: a full ring must not starve them */
		queue_progress(qu, q);
		n = take_events(qu, events, nevents);
		left = deadline < 0 ? -1 : deadline - now_ms();
		if (n || (deadline >= 0 && left <= 0))
			break;
		/*
		 * Sleep until a socket is ready, an event is queued (another
		 * thread posted) or the queue is deleted (its eventfd). The
		 * queue stays allocated while we wait (waiters).
		 */
		qu->waiters++;
		pthread_mutex_unlock(&exs_lock);
		/*
		 * poll() on the epoll fd, not epoll_wait(): that would
		 * take a socket's edge, and queue_progress() then find
		 * nothing (an accept or a connect would never end)
		 */
		pw.fd = qu->epfd;
		r = poll(&pw, 1, left < 0 ? -1 :
			       left > INT_MAX ? INT_MAX : (int)left);
		if (r < 0 && errno != EINTR)
			r = 0;
		pthread_mutex_lock(&exs_lock);
		qu->waiters--;
		if (qu->dying) {
			if (!qu->waiters)
				queue_free(qu);
			pthread_mutex_unlock(&exs_lock);
			return fail(EINVAL);
		}
		if (r < 0) {
			pthread_mutex_unlock(&exs_lock);
			return fail(EINTR);
		}
	}
	pthread_mutex_unlock(&exs_lock);
	return n;
}

int EXS_API exs_qdelete(exs_qhandle_t q)
{
	struct exs_queue *qu;
	uint64_t one = 1;
	int fd, *gone = NULL, ngone = 0;

	pthread_mutex_lock(&exs_lock);
	qu = queue_of(q);
	if (!qu) {
		pthread_mutex_unlock(&exs_lock);
		return fail(EINVAL);
	}
	/* operations still pending are abandoned */
	for (fd = 0; fd < exs_nfds; fd++) {
		struct exs_fd *st = exs_fds[fd];
		struct exs_op *op;

		if (!st || st->q != q)
			continue;
		while ((op = st->sq) || (op = st->rq)) {
			if (op == st->sq)
				st->sq = op->next;
			else
				st->rq = op->next;
			/* the kernel forgets it (one the peer may still
			 * write into resets the connection); if it may not
			 * have, the memory stays busy (fd_recv_zc_done()) */
			if (fd_same(fd, st))
				op_zc_drop(fd, op);
			else	/* (as fd_gone()) */
				op->rzc_stuck = op->rzc;
			if (op->mh != EXS_MHANDLE_INVALID && !op->rzc_stuck)
				mreg_of(op->mh)->busy--;
			free(op);
		}
		if (st->in_epoll)
			epoll_ctl(qu->epfd, EPOLL_CTL_DEL, fd, NULL);
		st->in_epoll = false;
		st->q = EXS_QHANDLE_INVALID;
		if (fd_same(fd, st))
			fd_blocking_again(fd, st);
		st->nb_set = false;
	}
	/*
	 * Sockets accepted for events nobody will dequeue: closed, after
	 * the lock (close() may linger). No memory for the list: at once.
	 */
	if (qu->count)
		gone = malloc(qu->count * sizeof(*gone));
	while (qu->count) {
		exs_event_t *e = &qu->ring[qu->head];

		if (e->exs_evt_type == EXS_EVT_ACCEPT && e->exs_evt_fd >= 0) {
			if (gone)
				gone[ngone++] = e->exs_evt_fd;
			else
				close(e->exs_evt_fd);
		}
		qu->head = (qu->head + 1) % qu->depth;
		qu->count--;
	}
	exs_queues[q & (EXS_MAX_QUEUES - 1)] = NULL;
	qu->dying = true;
	if (qu->waiters) {
		/* they wake, see dying, and the last one frees it */
		if (write(qu->evfd, &one, sizeof(one)) != sizeof(one))
			qu->ev_armed = true;	/* already readable */
	} else {
		queue_free(qu);
	}
	pthread_mutex_unlock(&exs_lock);
	while (ngone)
		close(gone[--ngone]);
	free(gone);
	return 0;
}

/* ------------------------------------------------------------- memory */

exs_mhandle_t EXS_API exs_mregister(const void *addr, size_t len, int flags)
{
	uintptr_t a = (uintptr_t)addr;
	int i, gen;

	if (flags || !len || !addr || a + len < a)
		return fail(EINVAL);
	pthread_mutex_lock(&exs_lock);
	if (!exs_ready) {
		pthread_mutex_unlock(&exs_lock);
		return fail(EINVAL);
	}
	if (!exs_mregs)
		exs_mregs = calloc(EXS_MAX_MREGS, sizeof(*exs_mregs));
	for (i = 0; exs_mregs && i < EXS_MAX_MREGS && exs_mregs[i].used; i++)
		;
	if (!exs_mregs || i == EXS_MAX_MREGS) {
		pthread_mutex_unlock(&exs_lock);
		return fail(exs_mregs ? ENOSPC : ENOMEM);
	}
	gen = (exs_mregs[i].gen + 1) % (EXS_GEN_MAX + 1);
	exs_mregs[i] = (struct exs_mreg){
		.used = true, .gen = gen, .addr = a, .len = len,
	};
	pthread_mutex_unlock(&exs_lock);
	return gen << EXS_GEN_SHIFT | i;
}

int EXS_API exs_mderegister(exs_mhandle_t mh)
{
	struct iwarp_mreg r = { 0 };
	struct exs_mreg *m;
	int fd, err = 0;

	pthread_mutex_lock(&exs_lock);
	m = mreg_of(mh);
	if (!m) {
		err = EINVAL;
		goto out;
	}
	if (m->busy) {
		err = EBUSY;	/* operations from it have not ended */
		goto out;
	}
	r.addr = m->addr;
	r.len = m->len;
	/* the sockets it was registered with (still the same sockets) */
	for (fd = 0; fd < exs_nfds; fd++) {
		struct exs_fd *st = exs_fds[fd];
		unsigned int i;

		if (!st)
			continue;
		for (i = 0; i < st->nregs && st->regs[i] != mh; i++)
			;
		if (i == st->nregs)
			continue;
		/* (a failed stream's registration goes at its close) */
		if (fd_same(fd, st) &&
		    setsockopt(fd, SOL_IWARP, IWARP_MDEREG, &r, sizeof(r)) &&
		    errno == EBUSY) {
			err = EBUSY;	/* the kernel still sends from it */
			goto out;
		}
		st->regs[i] = st->regs[--st->nregs];
	}
	m->used = false;
out:
	pthread_mutex_unlock(&exs_lock);
	return err ? fail(err) : 0;
}
