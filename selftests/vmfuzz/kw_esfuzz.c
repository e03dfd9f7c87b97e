// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * kw_esfuzz - system-call fuzzer for kiwarp's extended sockets (es.c).
 *
 * Any local user can put TCP_ULP "kiwarp" on a TCP socket and switch it to
 * IWARP_MODE, so es.c's whole surface is reachable without privileges:
 * its SOL_IWARP options, the stream calls it replaces (read, write,
 * sendmsg with IWARP_IOWRITE, recvmsg with MSG_PEEK/WAITALL/ERRQUEUE,
 * poll, shutdown, close), MSG_ZEROCOPY from registered memory, zero-copy
 * receives, one-sided mappings, and the socket options it intercepts.
 * kw_esfuzz runs as uid 65534 (RLIMIT_MEMLOCK 8 MiB) and calls all of
 * them at random from several threads on a shared table of sockets:
 * pairs over loopback switched in every way (both ends, one end, blocking
 * or not, with listeners wearing the ULP, odd modes and options), buffers
 * that are unmapped, re-protected or zapped while registered or mapped
 * for the peer, fds closed, shut down and dup'ed while in use, and forked
 * children killed at a random point.
 *
 * What fails the run:
 *   - an errno outside the set a socket call may give, or a read that
 *     returns more than was asked (FINDING lines);
 *   - a canary stream (one pair per thread that nothing else touches)
 *     whose bytes arrive changed, out of order or not at all;
 *   - an operation that takes longer than --hang seconds (the watchdog
 *     prints it and exits 3);
 *   - VmPin not 0 kB, or the system's nr_foll_pin_acquired - released
 *     above where it was, once everything is closed;
 *   - a kernel report (KASAN, lockdep, WARN, hung task...): vm-run scans
 *     the guest's log.
 *
 *   kw_esfuzz [--seed N] [--threads N] [--seconds N | --ops N] [--hang S]
 *             [--memlock BYTES] [--no-drop]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/errqueue.h>
#include <linux/kiwarp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/sockios.h>

#include "../vm/kw_vmtest.h"

#ifndef TCP_ULP
#define TCP_ULP		31
#endif

#define ARRAY_SIZE(a)	(sizeof(a) / sizeof((a)[0]))
#define MAX_SOCK	32
#define NBUF		6
#define BUF_LEN		(1 << 20)
#define MAX_THREADS	16
#define CANARY_MAX	(48 << 10)

/* ------------------------------------------------------------ config */

static uint64_t cfg_seed;
static int cfg_threads = 3;
static long cfg_seconds = 60, cfg_ops = -1;
static int cfg_hang = 30;
static long cfg_memlock = 8 << 20;
static int cfg_drop = 1;

/* ------------------------------------------------------------- state */

static _Atomic int socks[MAX_SOCK];		/* fds, -1 = empty */
static uint8_t *bufs[NBUF];			/* BUF_LEN each */
static uint8_t *bad_page;			/* PROT_NONE */
static long page_sz;

static _Atomic long ops_done, canary_rounds, pairs_up;
/* in memory shared with the forked children: theirs count too */
static _Atomic long *findings;
#define NOPS		16
static _Atomic long op_calls[NOPS], op_usec[NOPS];
/* calls that succeeded, by SOL_IWARP option (set, get) */
static _Atomic long iw_ok[2][16];
static _Atomic int stop_flag;
static double t_start;

struct th {
	pthread_t pt;
	int id;
	uint64_t r;
	_Atomic double op_start;	/* 0 between operations */
	const char *_Atomic op_name;
	int ca, cb;			/* this thread's canary pair */
	uint32_t cseq;
	uint8_t *cbuf, *crbuf;
};
static struct th ths[MAX_THREADS];

static void say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fflush(stdout);
}

static uint64_t rnd(struct th *t)
{
	t->r ^= t->r << 13;
	t->r ^= t->r >> 7;
	t->r ^= t->r << 17;
	return t->r;
}

static uint64_t below(struct th *t, uint64_t n)
{
	return n ? rnd(t) % n : 0;
}

static int chance(struct th *t, int pct)
{
	return (int)below(t, 100) < pct;
}

/* A length: mostly small, sometimes a page's worth, sometimes large. */
static size_t rlen(struct th *t, size_t max)
{
	static const size_t edges[] = { 0, 1, 3, 63, 64, 65, 4095, 4096, 4097,
					65535, 65536, 65537, 262144 };
	size_t n;

	switch (below(t, 4)) {
	case 0:
		n = edges[below(t, ARRAY_SIZE(edges))];
		break;
	case 1:
		n = below(t, 256);
		break;
	case 2:
		n = below(t, 16384);
		break;
	default:
		n = below(t, max + 1);
	}
	return n > max ? max : n;
}

/* A pointer for a syscall: mostly inside a buffer, sometimes bad. */
static void *rptr(struct th *t, size_t len)
{
	static const uintptr_t wild[] = { 0, 8, 0xffff888000000000ULL,
					  0x7ffffffff000ULL, 0x800000000000ULL };

	if (chance(t, 4))
		return (void *)wild[below(t, ARRAY_SIZE(wild))];
	if (chance(t, 3))
		return bad_page + below(t, page_sz);
	if (len > BUF_LEN)
		len = BUF_LEN;
	return bufs[below(t, NBUF)] + below(t, BUF_LEN - len + 1);
}

static int rfd(struct th *t)
{
	return atomic_load(&socks[below(t, MAX_SOCK)]);
}

/* ------------------------------------------------------------ checks */

/* errnos a socket call on a (possibly closed or foreign) fd may give */
static int errno_ok(int e)
{
	switch (e) {
	case EAGAIN: case EINTR: case EINVAL: case EFAULT: case EPIPE:
	case ECONNRESET: case ENOTCONN: case EPROTO: case ETIMEDOUT:
	case ENOMEM: case ENOBUFS: case ENOSPC: case EBUSY: case EALREADY:
	case EINPROGRESS: case ENOENT: case ENOPROTOOPT: case EOPNOTSUPP:
	case EBADF: case ENOTSOCK: case EMSGSIZE: case ECANCELED:
	case EISCONN: case EEXIST: case ECONNREFUSED: case ESHUTDOWN:
	case EPERM: case EACCES: case ECONNABORTED: case EDESTADDRREQ:
	case ENOTTY: case ESPIPE: case EMFILE: case ENFILE: case EADDRINUSE:
	case EADDRNOTAVAIL: case ENOEXEC: case ERANGE: case ENXIO:
	case EOVERFLOW:
		return 1;
	}
	return 0;
}

static void finding(struct th *t, const char *fmt, ...)
{
	va_list ap;

	if (atomic_fetch_add(findings, 1) >= 20)
		return;
	printf("# FINDING (thread %d, op %s): ", t ? t->id : -1,
	       t && t->op_name ? t->op_name : "-");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

/* ret of a call that asked for at most max bytes (max < 0: no bound) */
static void check(struct th *t, const char *call, long ret, long max)
{
	if (ret < 0) {
		/* TCP's own TCP_ZEROCOPY_RECEIVE at the end of the stream */
		if (errno == EIO && !strcmp(call, "getsockopt(6, 35)"))
			return;
		if (!errno_ok(errno))
			finding(t, "%s: unexpected errno %d (%s)", call, errno,
				strerror(errno));
	} else if (max >= 0 && ret > max) {
		finding(t, "%s returned %ld of at most %ld", call, ret, max);
	}
}

/* check() a SOL_IWARP option's result (get: 0 set, 1 get); count it if
 * it succeeded */
static void iw_check(struct th *t, int get, int opt, const char *call,
		     long ret)
{
	check(t, call, ret, 0);
	if (ret >= 0)
		atomic_fetch_add(&iw_ok[get][opt], 1);
}

/* ----------------------------------------------------------- sockets */

static void set_timeouts(int fd, long ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static int ulp(int fd)
{
	return setsockopt(fd, IPPROTO_TCP, TCP_ULP, KIWARP_ULP_NAME, 6);
}

static int set_mode(int fd, int mode)
{
	return setsockopt(fd, SOL_IWARP, IWARP_MODE, &mode, sizeof(mode)) ?
	       -errno : 0;
}

/* a connected pair over loopback; the listener wears the ULP if lulp
 * (between listen and connect: kw_vmtest.h's tcp_pair_opt has no room) */
static int es_tcp_pair(int v6, int lulp, int *a, int *b)
{
	struct sockaddr_in6 s6 = { .sin6_family = AF_INET6 };
	struct sockaddr_in s4 = { .sin_family = AF_INET };
	struct sockaddr *sa = v6 ? (void *)&s6 : (void *)&s4;
	socklen_t len = v6 ? sizeof(s6) : sizeof(s4);
	int l, one = 1;

	s4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	s6.sin6_addr = in6addr_loopback;
	*a = *b = -1;
	l = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0)
		return -1;
	if (bind(l, sa, len) || listen(l, 1) || getsockname(l, sa, &len))
		goto err;
	if (lulp)
		ulp(l);
	*a = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (*a < 0 || connect(*a, sa, len))
		goto err;
	*b = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	if (*b < 0)
		goto err;
	close(l);
	setsockopt(*a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(*b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return 0;
err:
	close(l);
	if (*a >= 0)
		close(*a);
	*a = -1;
	return -1;
}

struct sw {
	int fd, mode, ret;
};

static void *switch_thread(void *arg)
{
	struct sw *s = arg;

	s->ret = set_mode(s->fd, s->mode);
	return NULL;
}

/* Close, mostly without waiting for what is unsent (SO_LINGER 0). */
static void sock_close(struct th *t, int fd)
{
	struct linger lg = { 1, 0 };

	if (chance(t, 80))
		setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

/* Put fd in a random slot; whatever was there is closed. */
static void slot_put(struct th *t, int fd)
{
	int old = atomic_exchange(&socks[below(t, MAX_SOCK)], fd);

	if (old >= 0)
		sock_close(t, old);
}

static void op_mem(struct th *t);

static uint8_t *region(struct th *t, size_t *len)
{
	size_t l = (1 + below(t, 64)) * page_sz;
	size_t off = below(t, (BUF_LEN - l) / page_sz + 1) * page_sz;

	*len = l;
	return bufs[below(t, NBUF)] + off;
}

/* A region of a buffer, registered on fd (IWARP_MREG) as *mr. */
static uint8_t *mreg_region(struct th *t, int fd, struct iwarp_mreg *mr,
			    size_t *len)
{
	uint8_t *r = region(t, len);

	memset(mr, 0, sizeof(*mr));
	mr->addr = (uintptr_t)r;
	mr->len = *len;
	iw_check(t, 0, IWARP_MREG, "IWARP_MREG",
		 setsockopt(fd, SOL_IWARP, IWARP_MREG, mr, sizeof(*mr)));
	return r;
}

/*
 * On a pair both ends of which just switched: the extensions used as a
 * program would (one-sided writes and reads into a mapping the peer made,
 * zero-copy sends from registered memory, a zero-copy receive), with
 * random sizes, offsets and interruptions, so that their deeper paths run;
 * the other threads' chaos then goes on on the same sockets.
 */
static void scenario(struct th *t, int a, int b)
{
	struct iwarp_iomap io = { 0 };
	struct iwarp_mreg mr = { 0 };
	size_t l;
	uint8_t *r;
	int one = 1;
	long ret;

	if (chance(t, 60)) {
		/* b maps, a writes and reads one-sided */
		struct iwarp_ioread rd = { 0 };
		char cbuf[CMSG_SPACE(8)] __attribute__((aligned(8)));
		struct iovec iov;
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
				    .msg_control = cbuf,
				    .msg_controllen = sizeof(cbuf) };
		struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
		uint64_t off;

		r = region(t, &l);
		io.addr = (uintptr_t)r;
		io.len = l;
		io.offset = below(t, 4) << 20;
		io.prot = PROT_READ | PROT_WRITE;
		ret = setsockopt(b, SOL_IWARP, IWARP_IOMAP, &io, sizeof(io));
		iw_check(t, 0, IWARP_IOMAP, "IWARP_IOMAP", ret);
		/* a learns of it with b's next call, or at once */
		(void)!recv(b, bufs[0], 1, MSG_DONTWAIT | MSG_PEEK);
		(void)!recv(a, bufs[0], 1, MSG_DONTWAIT | MSG_PEEK);
		off = io.offset + below(t, l + 16);
		memset(cbuf, 0, sizeof(cbuf));
		cm->cmsg_level = SOL_IWARP;
		cm->cmsg_type = IWARP_IOWRITE;
		cm->cmsg_len = CMSG_LEN(8);
		memcpy(CMSG_DATA(cm), &off, 8);
		iov.iov_len = rlen(t, l);
		iov.iov_base = rptr(t, iov.iov_len);
		ret = sendmsg(a, &m, MSG_NOSIGNAL);
		check(t, "sendmsg(IWARP_IOWRITE)", ret, iov.iov_len);
		if (ret >= 0)
			atomic_fetch_add(&iw_ok[0][IWARP_IOWRITE], 1);
		rd.len = rlen(t, l);
		rd.addr = (uintptr_t)rptr(t, rd.len);
		rd.offset = io.offset + below(t, l);
		{
			socklen_t len = sizeof(rd);

			ret = getsockopt(a, SOL_IWARP, IWARP_IOREAD, &rd, &len);
			iw_check(t, 1, IWARP_IOREAD, "IWARP_IOREAD", ret);
			if (!ret && rd.done > rd.len)
				finding(t, "IWARP_IOREAD read %llu of %llu",
					(unsigned long long)rd.done,
					(unsigned long long)rd.len);
		}
		if (chance(t, 30)) {
			io.offset = io.prot = 0;
			ret = setsockopt(b, SOL_IWARP, IWARP_IOUNMAP, &io,
					 sizeof(io));
			iw_check(t, 0, IWARP_IOUNMAP, "IWARP_IOUNMAP", ret);
		}
	}
	if (chance(t, 60)) {
		/* zero-copy sends from registered memory */
		struct msghdr m = { 0 };
		char cbuf[256] __attribute__((aligned(8)));
		size_t n;

		setsockopt(a, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one));
		r = mreg_region(t, a, &mr, &l);
		n = 1 + below(t, 8);
		while (n--) {
			size_t o = below(t, l), len = 1 + below(t, l - o);

			ret = send(a, r + o, len, MSG_ZEROCOPY | MSG_DONTWAIT |
				   MSG_NOSIGNAL);
			check(t, "send(MSG_ZEROCOPY)", ret, len);
			(void)!recv(b, rptr(t, 65536), 65536, MSG_DONTWAIT);
		}
		m.msg_control = cbuf;
		m.msg_controllen = sizeof(cbuf);
		ret = recvmsg(a, &m, MSG_ERRQUEUE | MSG_DONTWAIT);
		check(t, "recvmsg(MSG_ERRQUEUE)", ret, -1);
		if (chance(t, 50)) {
			ret = setsockopt(a, SOL_IWARP, IWARP_MDEREG, &mr,
					 sizeof(mr));
			iw_check(t, 0, IWARP_MDEREG, "IWARP_MDEREG", ret);
		}
	}
	if (chance(t, 60)) {
		/* a zero-copy receive: b's buffer, a's bytes */
		struct iwarp_recv_zc zc = { 0 };
		struct iwarp_recv_zc_done d;
		socklen_t len = sizeof(zc);
		size_t n;

		r = mreg_region(t, b, &mr, &l);
		zc.len = 1 + below(t, l);
		zc.addr = (uintptr_t)r + below(t, l - zc.len + 1);
		zc.id = rnd(t);
		ret = getsockopt(b, SOL_IWARP, IWARP_RECV_ZC, &zc, &len);
		iw_check(t, 1, IWARP_RECV_ZC, "IWARP_RECV_ZC", ret);
		n = rlen(t, zc.len + 1000);
		ret = send(a, rptr(t, n), n, MSG_DONTWAIT | MSG_NOSIGNAL);
		check(t, "send", ret, n);
		switch (below(t, 4)) {
		case 0:
			(void)!setsockopt(b, SOL_IWARP, IWARP_RECV_ZC_CANCEL,
					  NULL, 0);
			break;
		case 1:
			op_mem(t);
			break;
		case 2:
			shutdown(chance(t, 50) ? a : b, below(t, 3));
			break;
		}
		(void)!recv(b, rptr(t, 65536), 65536, MSG_DONTWAIT);
		len = sizeof(d);
		ret = getsockopt(b, SOL_IWARP, IWARP_RECV_ZC_DONE, &d, &len);
		iw_check(t, 1, IWARP_RECV_ZC_DONE, "IWARP_RECV_ZC_DONE", ret);
	}
}

/*
 * A new pair, switched in one of many ways, into the table. Both ends
 * switched (blocking, one of them in a helper thread, or both in the
 * background) most of the time; one end only, or odd modes, sometimes.
 */
static void op_pair(struct th *t)
{
	int a, b, lulp = chance(t, 25), how = below(t, 10), one = 1;
	int scen = how < 5 && chance(t, 60);
	int ma = IWARP_MODE_ACTIVE, mb = IWARP_MODE_PASSIVE;

	if (es_tcp_pair(chance(t, 30), lulp, &a, &b))
		return;
	set_timeouts(a, 300);
	set_timeouts(b, 300);
	if (chance(t, 80))
		ulp(a);
	if (!lulp && chance(t, 90))
		ulp(b);
	if (chance(t, 20)) {
		int v = below(t, 3);

		setsockopt(a, SOL_IWARP, IWARP_CRC, &v, sizeof(v));
	}
	if (scen) {
		int v = 4;

		setsockopt(a, SOL_IWARP, IWARP_IOMAP_SIZE, &v, sizeof(v));
		setsockopt(b, SOL_IWARP, IWARP_IOMAP_SIZE, &v, sizeof(v));
	} else if (chance(t, 30)) {
		int v = chance(t, 90) ? (int)below(t, 5) : (int)rnd(t);

		setsockopt(a, SOL_IWARP, IWARP_IOMAP_SIZE, &v, sizeof(v));
		v = below(t, 5);
		setsockopt(b, SOL_IWARP, IWARP_IOMAP_SIZE, &v, sizeof(v));
	}
	if (chance(t, 15)) {
		int v = 4096 << below(t, 8);

		setsockopt(chance(t, 50) ? a : b, SOL_SOCKET,
			   chance(t, 50) ? SO_RCVBUF : SO_SNDBUF, &v, sizeof(v));
	}
	if (!scen && chance(t, 10)) {
		ma = below(t, 5);	/* AUTO, invalid, both active... */
		mb = below(t, 5);
	} else if (lulp && chance(t, 50)) {
		ma = mb = IWARP_MODE_AUTO;
	}
	if (how < 5) {
		/* both blocking: the responder in a helper thread */
		struct sw s = { b, mb, 0 };
		pthread_t pt;

		if (!pthread_create(&pt, NULL, switch_thread, &s)) {
			int r = set_mode(a, ma);

			pthread_join(pt, NULL);
			if (!r && !s.ret) {
				atomic_fetch_add(&pairs_up, 1);
				if (scen)
					scenario(t, a, b);
			}
		}
	} else if (how < 8) {
		/* both in the background */
		fcntl(a, F_SETFL, O_NONBLOCK);
		fcntl(b, F_SETFL, O_NONBLOCK);
		set_mode(a, ma);
		set_mode(b, mb);
		if (chance(t, 50)) {
			fcntl(a, F_SETFL, 0);
			fcntl(b, F_SETFL, 0);
		}
	} else if (how < 9) {
		/* one end only, in the background; the other stays TCP and
		 * may say anything */
		fcntl(a, F_SETFL, O_NONBLOCK);
		set_mode(a, ma);
		if (chance(t, 50))
			(void)!write(b, bufs[0], below(t, 600));
	}
	/* else: the ULP only, never switched */
	if (chance(t, 10))
		setsockopt(a, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one));
	slot_put(t, a);
	slot_put(t, b);
}

/* --------------------------------------------------------- operations */

static int rflags_send(struct th *t)
{
	static const int f[] = { MSG_DONTWAIT, MSG_MORE, MSG_NOSIGNAL,
				 MSG_ZEROCOPY, MSG_OOB, MSG_EOR, MSG_CONFIRM,
				 MSG_FASTOPEN };
	int flags = MSG_NOSIGNAL, i;

	for (i = 0; i < (int)ARRAY_SIZE(f); i++)
		if (chance(t, i < 3 ? 40 : 8))
			flags |= f[i];
	return flags;
}

static void op_write(struct th *t)
{
	int fd = rfd(t), n = 1 + below(t, 4), i;
	struct iovec iov[4];
	size_t total = 0;
	long ret;

	for (i = 0; i < n; i++) {
		iov[i].iov_len = rlen(t, 200000);
		iov[i].iov_base = rptr(t, iov[i].iov_len);
		total += iov[i].iov_len;
	}
	switch (below(t, 4)) {
	case 0:
		ret = write(fd, iov[0].iov_base, iov[0].iov_len);
		check(t, "write", ret, iov[0].iov_len);
		break;
	case 1:
		ret = send(fd, iov[0].iov_base, iov[0].iov_len, rflags_send(t));
		check(t, "send", ret, iov[0].iov_len);
		break;
	case 2:
		ret = writev(fd, iov, n);
		check(t, "writev", ret, total);
		break;
	default: {
		/* sendmsg, sometimes with IWARP_IOWRITE (well or badly
		 * formed) */
		char cbuf[CMSG_SPACE(16)] __attribute__((aligned(8)));
		struct msghdr m = { .msg_iov = iov, .msg_iovlen = n };
		struct cmsghdr *cm;

		if (chance(t, 50)) {
			uint64_t off = chance(t, 70) ? below(t, 1 << 21) :
				       rnd(t);

			memset(cbuf, 0, sizeof(cbuf));
			m.msg_control = cbuf;
			m.msg_controllen = CMSG_SPACE(8);
			cm = CMSG_FIRSTHDR(&m);
			cm->cmsg_level = chance(t, 90) ? SOL_IWARP : SOL_SOCKET;
			cm->cmsg_type = chance(t, 90) ? IWARP_IOWRITE :
					(int)below(t, 16);
			cm->cmsg_len = chance(t, 85) ? CMSG_LEN(8) :
				       CMSG_LEN(below(t, 17));
			memcpy(CMSG_DATA(cm), &off, 8);
		}
		ret = sendmsg(fd, &m, rflags_send(t));
		check(t, "sendmsg", ret, total);
	}
	}
}

static void op_read(struct th *t)
{
	static const int f[] = { MSG_DONTWAIT, MSG_PEEK, MSG_WAITALL,
				 MSG_TRUNC, MSG_OOB, MSG_ERRQUEUE };
	int fd = rfd(t), flags = 0, i, n = 1 + below(t, 3);
	struct iovec iov[3];
	size_t total = 0;
	long ret;

	for (i = 0; i < (int)ARRAY_SIZE(f); i++)
		if (chance(t, i < 2 ? 35 : 8))
			flags |= f[i];
	for (i = 0; i < n; i++) {
		iov[i].iov_len = rlen(t, 200000);
		iov[i].iov_base = rptr(t, iov[i].iov_len);
		total += iov[i].iov_len;
	}
	if (chance(t, 50)) {
		ret = recv(fd, iov[0].iov_base, iov[0].iov_len, flags);
		check(t, "recv", ret, flags & MSG_TRUNC ? -1 : (long)iov[0].iov_len);
	} else {
		char cbuf[256] __attribute__((aligned(8)));
		struct msghdr m = { .msg_iov = iov, .msg_iovlen = n,
				    .msg_control = chance(t, 50) ? cbuf : NULL,
				    .msg_controllen = sizeof(cbuf) };

		if (!m.msg_control)
			m.msg_controllen = 0;
		ret = recvmsg(fd, &m, flags);
		check(t, "recvmsg", ret, flags & (MSG_TRUNC | MSG_ERRQUEUE) ?
					 -1 : (long)total);
	}
}

/* SOL_IWARP options with structures that are mostly plausible */
static void op_iwarp_set(struct th *t)
{
	union {
		struct iwarp_mreg mr;
		struct iwarp_iomap io;
		int i;
		uint8_t raw[64];
	} u;
	int fd = rfd(t), opt = below(t, 16);
	socklen_t len;
	long ret;

	memset(&u, 0, sizeof(u));
	if (chance(t, 30))
		opt = IWARP_MREG;
	else if (chance(t, 20))
		opt = IWARP_IOMAP;
	switch (opt) {
	case IWARP_MREG:
	case IWARP_MDEREG: {
		size_t l = chance(t, 50) ? (size_t)page_sz << below(t, 6) :
			   rlen(t, BUF_LEN);

		u.mr.addr = (uintptr_t)rptr(t, l);
		u.mr.len = chance(t, 95) ? l : rnd(t);
		if (chance(t, 5))
			u.mr.flags = rnd(t);
		if (chance(t, 5))
			u.mr.reserved = rnd(t);
		len = sizeof(u.mr);
		break;
	}
	case IWARP_IOMAP:
	case IWARP_IOUNMAP: {
		size_t l = chance(t, 50) ? (size_t)page_sz << below(t, 5) :
			   rlen(t, BUF_LEN);

		u.io.addr = (uintptr_t)rptr(t, l);
		u.io.len = chance(t, 95) ? l : rnd(t);
		u.io.offset = chance(t, 80) ? below(t, 4) * (1 << 20) : rnd(t);
		u.io.prot = chance(t, 90) ? (uint32_t)(1 + below(t, 3)) :
			    (uint32_t)rnd(t);
		if (chance(t, 5))
			u.io.reserved = rnd(t);
		len = sizeof(u.io);
		break;
	}
	default:
		u.i = chance(t, 70) ? (int)below(t, 5) : (int)rnd(t);
		len = sizeof(int);
	}
	if (chance(t, 10))
		len = below(t, sizeof(u) + 1);
	if (opt == IWARP_MODE && chance(t, 70))
		fcntl(fd, F_SETFL, O_NONBLOCK);	/* no 10 s wait for a
						 * peer that never switches */
	ret = setsockopt(fd, SOL_IWARP, opt, chance(t, 3) ? rptr(t, len) : &u,
			 len);
	iw_check(t, 0, opt, "setsockopt(SOL_IWARP)", ret);
}

static void op_iwarp_get(struct th *t)
{
	union {
		struct iwarp_info info;
		struct iwarp_ioread rd;
		struct iwarp_recv_zc zc;
		struct iwarp_recv_zc_done d;
		int i;
		uint8_t raw[256];
	} u;
	int fd = rfd(t), opt = below(t, 16);
	socklen_t len = sizeof(u);
	long ret;

	memset(&u, 0, sizeof(u));
	if (chance(t, 25))
		opt = IWARP_RECV_ZC;
	else if (chance(t, 20))
		opt = IWARP_IOREAD;
	switch (opt) {
	case IWARP_IOREAD: {
		size_t l = rlen(t, 1 << 20);

		u.rd.addr = (uintptr_t)rptr(t, l);
		u.rd.len = chance(t, 95) ? l : rnd(t);
		u.rd.offset = chance(t, 80) ? below(t, 4) * (1 << 20) +
					      below(t, 8192) : rnd(t);
		len = sizeof(u.rd);
		break;
	}
	case IWARP_RECV_ZC: {
		size_t l = chance(t, 50) ? (size_t)page_sz << below(t, 6) :
			   rlen(t, BUF_LEN);

		u.zc.addr = (uintptr_t)rptr(t, l);
		u.zc.len = chance(t, 95) ? l : rnd(t);
		u.zc.id = rnd(t);
		if (chance(t, 5))
			u.zc.flags = rnd(t);
		len = sizeof(u.zc);
		break;
	}
	case IWARP_RECV_ZC_DONE:
		len = sizeof(u.d);
		break;
	case IWARP_INFO:
		len = sizeof(u.info);
		break;
	}
	if (chance(t, 10))
		len = below(t, sizeof(u) + 1);
	ret = getsockopt(fd, SOL_IWARP, opt, chance(t, 3) ? rptr(t, len) : &u,
			 chance(t, 2) ? rptr(t, 4) : &len);
	iw_check(t, 1, opt, "getsockopt(SOL_IWARP)", ret);
	if (!ret && len > sizeof(u))
		finding(t, "getsockopt(SOL_IWARP, %d) says %u bytes", opt,
			(unsigned int)len);
}

/* The options es.c intercepts or must pass through, and TCP's own. */
static void op_sockopt(struct th *t)
{
	static const struct { int level, name; } o[] = {
		{ SOL_SOCKET, SO_RCVLOWAT }, { SOL_SOCKET, SO_RCVBUF },
		{ SOL_SOCKET, SO_SNDBUF }, { SOL_SOCKET, SO_LINGER },
		{ SOL_SOCKET, SO_ZEROCOPY }, { SOL_SOCKET, SO_RCVTIMEO },
		{ SOL_SOCKET, SO_SNDTIMEO }, { SOL_SOCKET, SO_ERROR },
		{ SOL_SOCKET, SO_PEEK_OFF }, { SOL_SOCKET, SO_KEEPALIVE },
		{ SOL_SOCKET, SO_BUSY_POLL }, { SOL_SOCKET, SO_OOBINLINE },
		{ IPPROTO_TCP, TCP_NODELAY }, { IPPROTO_TCP, TCP_CORK },
		{ IPPROTO_TCP, TCP_ULP }, { IPPROTO_TCP, TCP_INFO },
		{ IPPROTO_TCP, TCP_ZEROCOPY_RECEIVE },
		{ IPPROTO_TCP, TCP_INQ }, { IPPROTO_TCP, TCP_QUICKACK },
		{ IPPROTO_TCP, TCP_MAXSEG }, { IPPROTO_TCP, TCP_REPAIR },
		{ IPPROTO_TCP, TCP_USER_TIMEOUT },
	};
	int fd = rfd(t), k = below(t, ARRAY_SIZE(o));
	uint8_t v[256] __attribute__((aligned(8)));
	socklen_t len = sizeof(v);
	long ret;

	memset(v, 0, sizeof(v));
	if (chance(t, 50)) {
		char what[48];

		snprintf(what, sizeof(what), "getsockopt(%d, %d)", o[k].level,
			 o[k].name);
		ret = getsockopt(fd, o[k].level, o[k].name, v, &len);
		check(t, what, ret, 0);
		return;
	}
	switch (o[k].name) {
	case SO_RCVTIMEO:
	case SO_SNDTIMEO:
		if (o[k].level == SOL_SOCKET) {
			/* never 0, which is "forever" */
			struct timeval tv = { 0, 1000 + below(t, 400000) };

			memcpy(v, &tv, sizeof(tv));
			len = sizeof(tv);
			break;
		}
		/* fall through */
	default:
		if (o[k].level == IPPROTO_TCP && o[k].name == TCP_ULP) {
			strcpy((char *)v, chance(t, 70) ? "kiwarp" : "tls");
			len = strlen((char *)v);
			break;
		}
		if (o[k].level == SOL_SOCKET && o[k].name == SO_LINGER) {
			struct linger lg = { (int)below(t, 2), (int)below(t, 2) };

			memcpy(v, &lg, sizeof(lg));
			len = sizeof(lg);
			break;
		}
		{
			int i = chance(t, 60) ? (int)below(t, 3) :
				chance(t, 50) ? (int)below(t, 1 << 20) :
				(int)rnd(t);

			memcpy(v, &i, sizeof(i));
			len = sizeof(i);
		}
	}
	ret = setsockopt(fd, o[k].level, o[k].name, v, len);
	check(t, "setsockopt", ret, 0);
}

static void op_poll(struct th *t)
{
	struct pollfd p[4];
	int i, n = 1 + below(t, 4);

	for (i = 0; i < n; i++) {
		p[i].fd = rfd(t);
		p[i].events = POLLIN | POLLOUT | POLLPRI | POLLRDHUP;
	}
	if (poll(p, n, below(t, 3)) < 0)
		check(t, "poll", -1, 0);
	if (chance(t, 30)) {
		struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT |
					  (chance(t, 50) ? EPOLLET : 0) }, out[4];
		int ep = epoll_create1(EPOLL_CLOEXEC);

		if (ep < 0)
			return;
		for (i = 0; i < n; i++)
			epoll_ctl(ep, EPOLL_CTL_ADD, p[i].fd, &ev);
		epoll_wait(ep, out, 4, below(t, 3));
		close(ep);
	}
}

static void op_ioctl(struct th *t)
{
	static const unsigned long req[] = { FIONREAD, SIOCOUTQ, SIOCOUTQNSD,
					     SIOCATMARK, FIONBIO };
	int fd = rfd(t), v = below(t, 2);

	if (ioctl(fd, req[below(t, ARRAY_SIZE(req))], &v) < 0)
		check(t, "ioctl", -1, 0);
}

static void op_shutdown(struct th *t)
{
	if (shutdown(rfd(t), below(t, 3)) < 0)
		check(t, "shutdown", -1, 0);
}

static void op_close(struct th *t)
{
	int old = atomic_exchange(&socks[below(t, MAX_SOCK)], -1);

	if (old >= 0)
		sock_close(t, old);
}

static void op_dup(struct th *t)
{
	int fd = dup(rfd(t));

	if (fd >= 0)
		slot_put(t, fd);
}

static void op_fcntl(struct th *t)
{
	fcntl(rfd(t), F_SETFL, chance(t, 50) ? O_NONBLOCK : 0);
}

/* sendfile from a memfd, splice out to a pipe */
static void op_splice(struct th *t)
{
	int fd = rfd(t), p[2];
	long ret;

	if (chance(t, 50)) {
		int mf = memfd_create("kw_esfuzz", MFD_CLOEXEC);
		off_t off = 0;

		if (mf < 0)
			return;
		if (ftruncate(mf, 1 << 18) == 0) {
			size_t n = rlen(t, 1 << 18);

			ret = sendfile(fd, mf, &off, n);
			check(t, "sendfile", ret, n);
		}
		close(mf);
		return;
	}
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK))
		return;
	ret = splice(fd, NULL, p[1], NULL, rlen(t, 65536),
		     SPLICE_F_NONBLOCK);
	check(t, "splice", ret, 65536);
	close(p[0]);
	close(p[1]);
}

static int send_fd(int via, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))] __attribute__((aligned(8)));
	char x = 'x';
	struct iovec iov = { &x, 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return sendmsg(via, &m, MSG_DONTWAIT) == 1 ? 0 : -1;
}

/*
 * A socket in flight over SCM_RIGHTS: received back, dropped with the
 * unix socket that carried it, or left in a cycle for the unix garbage
 * collector, which releases it from a kernel thread (es_release() does
 * not wait there).
 */
static void op_scm(struct th *t)
{
	int u[2], fd = rfd(t);

	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, u))
		return;
	if (!send_fd(u[0], fd)) {
		switch (below(t, 3)) {
		case 0: {
			char cbuf[CMSG_SPACE(sizeof(int))]
				__attribute__((aligned(8)));
			char x;
			struct iovec iov = { &x, 1 };
			struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
					    .msg_control = cbuf,
					    .msg_controllen = sizeof(cbuf) };
			struct cmsghdr *cm;

			if (recvmsg(u[1], &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) == 1 &&
			    (cm = CMSG_FIRSTHDR(&m)) &&
			    cm->cmsg_type == SCM_RIGHTS) {
				int nfd;

				memcpy(&nfd, CMSG_DATA(cm), sizeof(int));
				slot_put(t, nfd);
			}
			break;
		}
		case 1:
			break;	/* closed below, the fd still in flight */
		default:
			/* each end in flight on the other: a cycle */
			send_fd(u[1], u[0]);
			send_fd(u[0], u[1]);
		}
	}
	close(u[0]);
	close(u[1]);
}

/* Change the memory under registrations and mappings. */
static void op_mem(struct th *t)
{
	int i = below(t, NBUF);
	uint8_t *b = bufs[i];
	size_t off = below(t, BUF_LEN / page_sz) * page_sz;
	size_t len = (1 + below(t, 16)) * page_sz;

	if (off + len > BUF_LEN)
		len = BUF_LEN - off;
	switch (below(t, 4)) {
	case 0:		/* new pages at the same place */
		mmap(b + off, len, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		break;
	case 1:
		madvise(b + off, len, MADV_DONTNEED);
		break;
	case 2:
		mprotect(b + off, len, chance(t, 50) ? PROT_NONE : PROT_READ);
		break;
	default:
		mprotect(b + off, len, PROT_READ | PROT_WRITE);
	}
}

static void run_ops(struct th *t, long n);

/* A child working on the inherited table, killed at a random point. */
static void op_fork(struct th *t)
{
	long ms = below(t, 60);
	pid_t pid;

	if (t->id >= 100)
		return;		/* a child's child would outlive the kill */
	pid = fork();
	if (pid < 0)
		return;
	if (!pid) {
		struct th c = { .id = 100 + t->id, .r = rnd(t) | 1 };

		alarm(10);
		run_ops(&c, 1000);
		_exit(0);
	}
	usleep(ms * 1000);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/* ------------------------------------------------------------ canary */

/*
 * This thread's own pair: a message of random length, numbered and
 * patterned, written and read back whole (with other threads' chaos all
 * around). Any difference is a finding.
 */
static int canary_open(struct th *t)
{
	struct sw s;
	pthread_t pt;
	int r;

	if (es_tcp_pair(0, 0, &t->ca, &t->cb))
		return -1;
	set_timeouts(t->ca, 15000);
	set_timeouts(t->cb, 15000);
	if (ulp(t->ca) || ulp(t->cb))
		return -1;
	s = (struct sw){ t->cb, IWARP_MODE_PASSIVE, 0 };
	if (pthread_create(&pt, NULL, switch_thread, &s))
		return -1;
	r = set_mode(t->ca, IWARP_MODE_ACTIVE);
	pthread_join(pt, NULL);
	return r || s.ret ? -1 : 0;
}

static void op_canary(struct th *t)
{
	size_t n = 4 + below(t, CANARY_MAX - 4), i, got = 0;
	uint32_t seq = ++t->cseq;
	long r;

	memcpy(t->cbuf, &seq, 4);
	for (i = 4; i < n; i++)
		t->cbuf[i] = (uint8_t)(seq * 131 + i * 7);
	for (i = 0; i < n; i += r) {
		r = send(t->ca, t->cbuf + i, n - i, MSG_NOSIGNAL);
		if (r <= 0) {
			finding(t, "canary: send %zu of %zu: %s", i, n,
				r ? strerror(errno) : "0");
			return;
		}
		/* read as we go: the stream holds less than a message */
		while (got < i + r) {
			long g = recv(t->cb, t->crbuf + got, n - got,
				      MSG_DONTWAIT);

			if (g <= 0)
				break;
			got += g;
		}
	}
	while (got < n) {
		r = recv(t->cb, t->crbuf + got, n - got, 0);
		if (r <= 0) {
			finding(t, "canary: recv %zu of %zu: %s", got, n,
				r ? strerror(errno) : "EOF");
			return;
		}
		got += r;
	}
	if (memcmp(t->cbuf, t->crbuf, n)) {
		for (i = 0; i < n && t->cbuf[i] == t->crbuf[i]; i++)
			;
		finding(t, "canary %u: %zu bytes, first difference at %zu",
			seq, n, i);
		return;
	}
	atomic_fetch_add(&canary_rounds, 1);
}

/* -------------------------------------------------------------- driver */

static const struct opdef {
	const char *name;
	void (*fn)(struct th *t);
	int weight;
} opdefs[] = {
	{ "pair", op_pair, 6 },
	{ "write", op_write, 18 },
	{ "read", op_read, 18 },
	{ "iwarp_set", op_iwarp_set, 14 },
	{ "iwarp_get", op_iwarp_get, 10 },
	{ "sockopt", op_sockopt, 8 },
	{ "poll", op_poll, 5 },
	{ "ioctl", op_ioctl, 2 },
	{ "shutdown", op_shutdown, 2 },
	{ "close", op_close, 3 },
	{ "dup", op_dup, 1 },
	{ "fcntl", op_fcntl, 2 },
	{ "splice", op_splice, 2 },
	{ "mem", op_mem, 4 },
	{ "fork", op_fork, 1 },
	{ "scm", op_scm, 2 },
};
static int op_total;
_Static_assert(ARRAY_SIZE(opdefs) <= NOPS, "NOPS");

static void run_ops(struct th *t, long n)
{
	long i;

	for (i = 0; n < 0 || i < n; i++) {
		int w = below(t, op_total), k;

		if (atomic_load(&stop_flag))
			break;
		for (k = 0; w >= opdefs[k].weight; k++)
			w -= opdefs[k].weight;
		double t0 = now();

		t->op_name = opdefs[k].name;
		atomic_store(&t->op_start, t0);
		opdefs[k].fn(t);
		atomic_store(&t->op_start, 0.0);
		atomic_fetch_add(&op_calls[k], 1);
		atomic_fetch_add(&op_usec[k], (long)((now() - t0) * 1e6));
		atomic_fetch_add(&ops_done, 1);
	}
}

static void *worker(void *arg)
{
	struct th *t = arg;

	for (;;) {
		if (cfg_seconds >= 0 && now() - t_start > cfg_seconds)
			break;
		if (cfg_ops >= 0 && atomic_load(&ops_done) >= cfg_ops)
			break;
		if (atomic_load(&stop_flag))
			break;
		run_ops(t, 50);
		if (t->ca >= 0) {
			t->op_name = "canary";
			atomic_store(&t->op_start, now());
			op_canary(t);
			atomic_store(&t->op_start, 0.0);
		}
	}
	return NULL;
}

static void *watchdog(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop_flag)) {
		int k;

		for (k = 0; k < cfg_threads; k++) {
			double s = atomic_load(&ths[k].op_start);

			if (s > 0 && now() - s > cfg_hang) {
				say("not ok 1 - kw_esfuzz: thread %d stuck in %s for %d s (seed %llu)\n",
				    k, ths[k].op_name, cfg_hang,
				    (unsigned long long)cfg_seed);
				say("# 0 passed, 1 failed\n");
				_exit(3);
			}
		}
		usleep(200000);
	}
	return NULL;
}

/* the system's pinned pages: nr_foll_pin_acquired - released */
static long sys_pins(void)
{
	char line[256];
	long acq = -1, rel = -1, v;
	FILE *f = fopen("/proc/vmstat", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "nr_foll_pin_acquired %ld", &v) == 1)
			acq = v;
		else if (sscanf(line, "nr_foll_pin_released %ld", &v) == 1)
			rel = v;
	}
	fclose(f);
	return acq < 0 || rel < 0 ? -1 : acq - rel;
}

static void usage(const char *p)
{
	fprintf(stderr, "usage: %s [--seed N] [--threads N] [--seconds N | --ops N] [--hang S] [--memlock BYTES] [--no-drop]\n",
		p);
	exit(2);
}

int main(int argc, char **argv)
{
	struct rlimit rl;
	pthread_t wd;
	long pin_kb = -1, base_pins, after_pins = -1;
	int i, k, passed = 0, failed = 0, canaries = 0;
	double secs;

	cfg_seed = (uint64_t)time(NULL);
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			cfg_seed = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			cfg_threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			cfg_seconds = atol(argv[++i]), cfg_ops = -1;
		else if (!strcmp(argv[i], "--ops") && i + 1 < argc)
			cfg_ops = atol(argv[++i]), cfg_seconds = -1;
		else if (!strcmp(argv[i], "--hang") && i + 1 < argc)
			cfg_hang = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--memlock") && i + 1 < argc)
			cfg_memlock = atol(argv[++i]);
		else if (!strcmp(argv[i], "--no-drop"))
			cfg_drop = 0;
		else
			usage(argv[0]);
	}
	if (cfg_threads < 1 || cfg_threads > MAX_THREADS || cfg_hang < 5)
		usage(argv[0]);
	page_sz = sysconf(_SC_PAGESIZE);
	for (k = 0; k < (int)ARRAY_SIZE(opdefs); k++)
		op_total += opdefs[k].weight;
	say("TAP version 13\n1..3\n");
	say("# kw_esfuzz: seed=%llu threads=%d ops=%ld seconds=%ld memlock=%ld\n",
	    (unsigned long long)cfg_seed, cfg_threads, cfg_ops, cfg_seconds,
	    cfg_memlock);
	signal(SIGPIPE, SIG_IGN);
	base_pins = sys_pins();
	rl.rlim_cur = rl.rlim_max = cfg_memlock;
	if (setrlimit(RLIMIT_MEMLOCK, &rl))
		say("# setrlimit(MEMLOCK): %s\n", strerror(errno));
	if (geteuid() == 0 && cfg_drop &&
	    (setgroups(0, NULL) || setgid(65534) || setuid(65534))) {
		say("not ok 1 - kw_esfuzz: drop to uid 65534: %s\n",
		    strerror(errno));
		return 1;
	}
	say("# running as uid %d\n", (int)getuid());
	for (i = 0; i < MAX_SOCK; i++)
		atomic_store(&socks[i], -1);
	for (i = 0; i < NBUF; i++) {
		bufs[i] = mmap(NULL, BUF_LEN, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (bufs[i] == MAP_FAILED)
			return 1;
		memset(bufs[i], i + 1, BUF_LEN);
	}
	bad_page = mmap(NULL, page_sz, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
			-1, 0);
	findings = mmap(NULL, page_sz, PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (bad_page == MAP_FAILED || findings == MAP_FAILED)
		return 1;
	for (k = 0; k < cfg_threads; k++) {
		struct th *t = &ths[k];

		t->id = k;
		t->r = (cfg_seed + 1) * 0x9e3779b97f4a7c15ULL + k * 0x100000001b3ULL;
		t->r |= 1;
		t->ca = t->cb = -1;
		t->cbuf = malloc(CANARY_MAX);
		t->crbuf = malloc(CANARY_MAX);
		if (!t->cbuf || !t->crbuf)
			return 1;
		if (canary_open(t)) {
			say("# thread %d: no canary pair (%s)\n", k,
			    strerror(errno));
			if (t->ca >= 0)
				close(t->ca);
			if (t->cb >= 0)
				close(t->cb);
			t->ca = t->cb = -1;
		} else {
			canaries++;
		}
	}
	for (k = 0; k < 4; k++)
		op_pair(&ths[0]);

	t_start = now();
	pthread_create(&wd, NULL, watchdog, NULL);
	for (k = 1; k < cfg_threads; k++)
		pthread_create(&ths[k].pt, NULL, worker, &ths[k]);
	worker(&ths[0]);
	for (k = 1; k < cfg_threads; k++)
		pthread_join(ths[k].pt, NULL);
	secs = now() - t_start;

	/* close everything; then nothing may stay pinned */
	ths[0].op_name = "cleanup";
	atomic_store(&ths[0].op_start, now());
	for (i = 0; i < MAX_SOCK; i++) {
		int fd = atomic_exchange(&socks[i], -1);

		if (fd >= 0)
			close(fd);
	}
	for (k = 0; k < cfg_threads; k++) {
		if (ths[k].ca >= 0)
			close(ths[k].ca);
		if (ths[k].cb >= 0)
			close(ths[k].cb);
	}
	for (i = 3; i < 4096; i++)
		close(i);
	/* the closes were watched; the settling is bounded below */
	atomic_store(&ths[0].op_start, 0.0);
	for (i = 0; i < 2400; i++) {
		int u[2];

		/*
		 * Sockets left in SCM_RIGHTS cycles (op_scm) are garbage
		 * the kernel collects when a unix socket is next released:
		 * release one, as any later program would.
		 */
		if (!socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, u)) {
			close(u[0]);
			close(u[1]);
		}
		pin_kb = kw_vm_pin_kb();
		after_pins = sys_pins();
		/* (an earlier test's pins may go meanwhile: not above) */
		if (pin_kb == 0 && after_pins <= base_pins)
			break;
		if (i == 300) {
			say("# after 15 s: VmPin %ld kB; TCP sockets by state:\n",
			    pin_kb);
			(void)!system("ss -Htan | awk '{print \"#   \" $1}' | sort | uniq -c");
		}
		usleep(50000);
	}
	say("# settled in %.1f s\n", now() - t_start - secs);
	atomic_store(&stop_flag, 1);
	pthread_join(wd, NULL);

	if (atomic_load(findings) || !canaries) {
		say("not ok 1 - kw_esfuzz: %ld findings, %d canary pairs\n",
		    atomic_load(findings), canaries);
		failed++;
	} else {
		say("ok 1 - kw_esfuzz: %ld ops in %.0f s, %ld pairs switched, %ld canary messages intact\n",
		    atomic_load(&ops_done), secs, atomic_load(&pairs_up),
		    atomic_load(&canary_rounds));
		passed++;
	}
	if (pin_kb != 0) {
		say("not ok 2 - kw_esfuzz: VmPin %ld kB after closing everything\n",
		    pin_kb);
		failed++;
	} else {
		say("ok 2 - kw_esfuzz: VmPin 0 kB after closing everything\n");
		passed++;
	}
	if (base_pins < 0) {
		say("ok 3 - kw_esfuzz: system pinned pages # SKIP no nr_foll_pin counters\n");
		passed++;
	} else if (after_pins > base_pins) {
		say("not ok 3 - kw_esfuzz: nr_foll_pin acquired-released %ld, before %ld\n",
		    after_pins, base_pins);
		failed++;
	} else {
		say("ok 3 - kw_esfuzz: nr_foll_pin acquired-released %ld, before %ld\n",
		    after_pins, base_pins);
		passed++;
	}
	say("# per op: name calls seconds\n");
	for (k = 0; k < (int)ARRAY_SIZE(opdefs); k++)
		say("#   %-10s %7ld %7.1f\n", opdefs[k].name,
		    atomic_load(&op_calls[k]), atomic_load(&op_usec[k]) / 1e6);
	say("# SOL_IWARP options that succeeded (set/get):");
	for (k = 1; k < 16; k++)
		if (atomic_load(&iw_ok[0][k]) || atomic_load(&iw_ok[1][k]))
			say(" %d:%ld/%ld", k, atomic_load(&iw_ok[0][k]),
			    atomic_load(&iw_ok[1][k]));
	say("\n# kw_esfuzz: seed=%llu threads=%d\n",
	    (unsigned long long)cfg_seed, cfg_threads);
	say("# %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
