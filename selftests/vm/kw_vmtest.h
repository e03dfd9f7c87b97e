/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Helpers the in-VM test programs share (kw_rdma, kw_hostile, kw_security,
 * kw_peerfuzz, kw_faults, kw_es, kw_fuzz, kw_esfuzz): time, /proc/meminfo, VmPin,
 * progress lines, loopback TCP pairs and whole-buffer socket I/O. All static inline: each program uses a subset.
 */
#ifndef KW_VMTEST_H
#define KW_VMTEST_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Monotonic seconds. */
static inline double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A /proc/meminfo field ("MemFree", no colon) in bytes; -1 if absent. */
static inline long long meminfo(const char *key)
{
	char line[128];
	long long v = -1;
	FILE *f = fopen("/proc/meminfo", "r");
	size_t n = strlen(key);

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':')
			v = atoll(line + n + 1) * 1024;
	fclose(f);
	return v;
}

/* The number a sysfs (or proc) file holds; -1 without one. */
static inline long kw_read_long(const char *path)
{
	FILE *f = fopen(path, "r");
	long v = -1;

	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

/*
 * Does the loaded kiwarp.ko use the patched kernel's TCP hook (module
 * parameter tcp_hooks)? 1 or 0; -1 if there is no such parameter.
 */
static inline int kw_tcp_hooks_param(void)
{
	return kw_read_long("/sys/module/kiwarp/parameters/tcp_hooks");
}

/* kiwarp.ko's ooo_aligned: 1 (Y), 0 (N), -1 if unknown */
static inline int kw_ooo_aligned_param(void)
{
	FILE *f = fopen("/sys/module/kiwarp/parameters/ooo_aligned", "r");
	int c = EOF;

	if (f) {
		c = fgetc(f);
		fclose(f);
	}
	return c == 'Y' ? 1 : c == 'N' ? 0 : -1;
}

/* This process's pinned memory (VmPin in /proc/self/status), KiB; -1 if
 * unreadable. */
static inline long kw_vm_pin_kb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmPin: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

#ifdef _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
/* Enter the network namespace /run/netns/name (ip netns add); 0 or -errno. */
static inline int kw_enter_netns(const char *name)
{
	char path[128];
	int fd, ret;

	snprintf(path, sizeof(path), "/run/netns/%s", name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ret = setns(fd, CLONE_NEWNET) ? -errno : 0;
	close(fd);
	return ret;
}
#endif

/* A TAP comment line, flushed at once: a hang shows where it hangs. */
static inline void note(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	printf("# ");
	vprintf(fmt, ap);
	printf("\n");
	fflush(stdout);
	va_end(ap);
}

/*
 * tcp_pair_opt()'s family for an AF_INET client accepted by a dual-stack
 * AF_INET6 listener: the accepted socket is AF_INET6 with IPv4-mapped
 * addresses, as a server listening on "::" gets.
 */
#define KW_PAIR_MIXED	(AF_MAX + 1)

/*
 * A connected TCP pair over the loopback of family (AF_INET, AF_INET6 or
 * KW_PAIR_MIXED); the connecting side (*c) has TCP_NODELAY. mss > 0: both
 * ends use that maximum segment size (TCP_MAXSEG before the handshake), as
 * on a link with a small MTU. rcvbuf > 0: the accepted side (*s) has that
 * SO_RCVBUF from before the handshake (so a small window scale). Returns 0
 * or -errno.
 */
static inline int tcp_pair_opt(int family, int mss, int rcvbuf, int *c,
			       int *s)
{
	int lfam = family == KW_PAIR_MIXED ? AF_INET6 : family;
	int cfam = family == KW_PAIR_MIXED ? AF_INET : family;
	struct sockaddr_storage ss = { .ss_family = lfam };
	struct sockaddr_in *sin = (void *)&ss;
	struct sockaddr_in6 *sin6 = (void *)&ss;
	socklen_t len = lfam == AF_INET ? sizeof(*sin) : sizeof(*sin6);
	int l, one = 1, zero = 0, ret = 0;

	*c = *s = -1;
	if (lfam == AF_INET)
		sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	else if (family == KW_PAIR_MIXED)
		sin6->sin6_addr = in6addr_any;
	else
		sin6->sin6_addr = in6addr_loopback;
	l = socket(lfam, SOCK_STREAM, 0);
	if (l < 0)
		return -errno;
	if ((family == KW_PAIR_MIXED &&
	     setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero))) ||
	    (mss > 0 && setsockopt(l, IPPROTO_TCP, TCP_MAXSEG, &mss,
				   sizeof(mss))) ||
	    (rcvbuf > 0 && setsockopt(l, SOL_SOCKET, SO_RCVBUF, &rcvbuf,
				      sizeof(rcvbuf))) ||
	    bind(l, (void *)&ss, len) || listen(l, 1) ||
	    getsockname(l, (void *)&ss, &len))
		goto err;
	if (family == KW_PAIR_MIXED) {
		in_port_t port = sin6->sin6_port;

		memset(&ss, 0, sizeof(ss));
		sin->sin_family = AF_INET;
		sin->sin_port = port;
		sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		len = sizeof(*sin);
	}
	*c = socket(cfam, SOCK_STREAM, 0);
	if (*c < 0 || (mss > 0 && setsockopt(*c, IPPROTO_TCP, TCP_MAXSEG,
					     &mss, sizeof(mss))) ||
	    connect(*c, (void *)&ss, len))
		goto err;
	*s = accept(l, NULL, NULL);
	if (*s < 0)
		goto err;
	close(l);
	setsockopt(*c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return 0;
err:
	ret = -errno;
	close(l);
	if (*c >= 0)
		close(*c);
	*c = -1;
	return ret;
}

static inline int tcp_pair_mss(int family, int mss, int *c, int *s)
{
	return tcp_pair_opt(family, mss, 0, c, s);
}

static inline int tcp_pair_fam(int family, int *c, int *s)
{
	return tcp_pair_mss(family, 0, c, s);
}

static inline int tcp_pair(int *c, int *s)
{
	return tcp_pair_mss(AF_INET, 0, c, s);
}

/* Write all of p (no SIGPIPE). Returns 0 or -errno (-EPIPE at EOF). */
static inline int writen(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EPIPE;
		b += w;
		n -= w;
	}
	return 0;
}

/*
 * Read exactly n bytes, waiting at most ms for each piece. Returns 0,
 * -ETIMEDOUT, -ECONNRESET (EOF) or -errno.
 */
static inline int readn(int fd, void *p, size_t n, int ms)
{
	uint8_t *b = p;

	while (n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&pfd, 1, ms) != 1)
			return -ETIMEDOUT;
		r = read(fd, b, n);
		if (r <= 0)
			return r ? -errno : -ECONNRESET;
		b += r;
		n -= r;
	}
	return 0;
}

#ifdef KIWARP_LIB_H
/* Query qp until it is in ERROR, for up to secs seconds: 0, -ETIMEDOUT,
 * or kw_query_qp()'s error; *q holds the last answer. */
static inline int qp_wait_error(struct kw_qp *qp, struct kiwarp_query_qp *q,
				double secs)
{
	double end = now() + secs;

	do {
		int ret;

		memset(q, 0, sizeof(*q));
		ret = kw_query_qp(qp, q);
		if (ret)
			return ret;
		if (q->state == KIWARP_QPS_ERROR)
			return 0;
		usleep(1000);
	} while (now() < end);
	return -ETIMEDOUT;
}

/* Poll cq for one completion for up to secs seconds: 0, -ETIMEDOUT, or
 * kw_poll_cq()'s error. Needs kiwarp.h included first. */
static inline int cq_wait_one(struct kw_cq *cq, struct kiwarp_cqe *cqe,
			      double secs)
{
	double end = now() + secs;

	do {
		int n = kw_poll_cq(cq, 1, cqe);

		if (n)
			return n < 0 ? n : 0;
		usleep(1000);
	} while (now() < end);
	return -ETIMEDOUT;
}
#endif

#endif /* KW_VMTEST_H */
