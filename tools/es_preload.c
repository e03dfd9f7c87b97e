// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * libkiwarp-es.so: LD_PRELOAD'ed by kiwarp-run. With KIWARP_ES_IWARP=1,
 * every TCP connection the program makes (connect) or accepts (accept,
 * accept4) is switched to IWARP_MODE (Documentation/extended-sockets.md):
 * the kernel ULP does the rest, so nothing else needs interposing. Without
 * it (kiwarp-run's default) every call passes straight through.
 *
 *   KIWARP_ES_IWARP=1        switch connections
 *   KIWARP_ES_PORTS=P[,P..]  only those whose remote (connect) or local
 *                            (accept) port is listed
 *   KIWARP_ES_IOMAP=N        offer the peer N iomap entries
 *                            (IWARP_IOMAP_SIZE) for one-sided writes
 *
 * A socket that already wears the kiwarp ULP is left to whoever set it.
 * A connection that cannot be switched is closed and the call fails with
 * the switch's errno (both ends must run under kiwarp-run --iwarp). A
 * non-blocking socket switches in the background: accept returns it at
 * once, and a non-blocking connect() (its TCP handshake waited for here,
 * poll, 30 s) says EINPROGRESS; POLLOUT then means the iWARP stream is up,
 * SO_ERROR says why it is not. errno is preserved on success; the real
 * functions are found once with dlsym(RTLD_NEXT), in the constructor.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/kiwarp.h>

#ifndef TCP_ULP
#define TCP_ULP 31
#endif
#define ES_MAX_PORTS	64

static int (*real_connect)(int, const struct sockaddr *, socklen_t);
static int (*real_accept)(int, struct sockaddr *, socklen_t *);
static int (*real_accept4)(int, struct sockaddr *, socklen_t *, int);
static int es_on;
static int es_crc = 1;	/* KIWARP_ES_CRC=0: IWARP_CRC 0 before the switch */
static int es_iomap;	/* KIWARP_ES_IOMAP: IWARP_IOMAP_SIZE before it */
static unsigned short es_ports[ES_MAX_PORTS];
static int es_nports;

static void es_resolve(void)
{
	real_connect = dlsym(RTLD_NEXT, "connect");
	real_accept = dlsym(RTLD_NEXT, "accept");
	real_accept4 = dlsym(RTLD_NEXT, "accept4");
}

__attribute__((constructor)) static void es_init(void)
{
	const char *p = getenv("KIWARP_ES_PORTS");

	es_resolve();
	es_on = getenv("KIWARP_ES_IWARP") && !strcmp(getenv("KIWARP_ES_IWARP"), "1");
	es_crc = !(getenv("KIWARP_ES_CRC") && !strcmp(getenv("KIWARP_ES_CRC"), "0"));
	if (getenv("KIWARP_ES_IOMAP"))
		es_iomap = atoi(getenv("KIWARP_ES_IOMAP"));
	while (p && *p && es_nports < ES_MAX_PORTS) {
		char *end;
		unsigned long v = strtoul(p, &end, 10);

		if (end == p || v > 65535)
			break;
		es_ports[es_nports++] = v;
		p = *end == ',' ? end + 1 : end;
	}
}

static int port_of(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return -1;
}

/* Switch a connection of fd to/from (remote or local) port? */
static int wanted(int fd, int port)
{
	int type = 0, proto = 0, i;
	socklen_t tl = sizeof(type), pl = sizeof(proto);

	if (!es_on || port < 0)
		return 0;
	char ulp[16] = "";
	socklen_t ul = sizeof(ulp);

	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) ||
	    getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &pl) ||
	    type != SOCK_STREAM || proto != IPPROTO_TCP)
		return 0;
	/* one that wears our ULP already is switched by whoever set it (the
	 * program itself, or libkiwarp-rsocket.so) */
	if (!getsockopt(fd, IPPROTO_TCP, TCP_ULP, ulp, &ul) &&
	    ul == sizeof(KIWARP_ULP_NAME) - 1 &&
	    !memcmp(ulp, KIWARP_ULP_NAME, ul))
		return 0;
	if (!es_nports)
		return 1;
	for (i = 0; i < es_nports; i++)
		if (es_ports[i] == port)
			return 1;
	return 0;
}

/*
 * 0, or the errno that kept fd from being switched. A non-blocking socket
 * switches in the background (EINPROGRESS): until its MPA exchange is
 * done, reads and writes say EAGAIN and poll() reports nothing, so an
 * event loop is never held up by a slow or silent peer.
 */
static int es_switch(int fd, int mode, int *inprogress)
{
	*inprogress = 0;
	if (setsockopt(fd, IPPROTO_TCP, TCP_ULP, KIWARP_ULP_NAME,
		       sizeof(KIWARP_ULP_NAME) - 1) && errno != EEXIST)
		return errno;
	/* a module without IWARP_CRC (ENOPROTOOPT) keeps CRC: fine */
	if (!es_crc && setsockopt(fd, SOL_IWARP, IWARP_CRC, &es_crc,
				  sizeof(es_crc)) && errno != ENOPROTOOPT)
		return errno;
	if (es_iomap && setsockopt(fd, SOL_IWARP, IWARP_IOMAP_SIZE, &es_iomap,
				   sizeof(es_iomap)))
		return errno;
	if (setsockopt(fd, SOL_IWARP, IWARP_MODE, &mode, sizeof(mode))) {
		if (errno != EINPROGRESS)
			return errno;
		*inprogress = 1;
	}
	return 0;
}

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	int entry = errno, saved = errno, ret, err = 0, want, inprog;
	socklen_t el = sizeof(err);

	if (!real_connect)	/* called before our constructor ran */
		es_resolve();
	if (!real_connect) {
		errno = ENOSYS;
		return -1;
	}
	ret = real_connect(fd, addr, len);
	if (ret && errno != EINPROGRESS)
		return ret;
	if (ret)
		saved = errno;
	want = addr && len >= sizeof(sa_family_t) && wanted(fd, port_of(addr));
	if (!want) {
		errno = saved;
		return ret;
	}
	if (ret) {
		/*
		 * Non-blocking: IWARP_MODE needs the TCP connection, so wait
		 * for it here (one round trip); the MPA exchange then runs in
		 * the background and the program, told EINPROGRESS as before,
		 * sees POLLOUT when the stream is up (SO_ERROR if it failed).
		 */
		struct pollfd p = { .fd = fd, .events = POLLOUT };

		if (poll(&p, 1, 30000) != 1) {
			errno = ETIMEDOUT;
			return -1;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) || err) {
			errno = err ? err : errno;
			return -1;
		}
	}
	err = es_switch(fd, IWARP_MODE_ACTIVE, &inprog);
	if (err) {
		errno = err;
		return -1;
	}
	/*
	 * Still under way: EINPROGRESS, as a non-blocking connect says (also
	 * for one that connected at once). Done: 0, even for a blocking
	 * connect that gave up with EINPROGRESS (SO_SNDTIMEO) and was waited
	 * for here.
	 */
	if (inprog) {
		errno = EINPROGRESS;
		return -1;
	}
	errno = entry;
	return 0;
}

static int accepted(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int saved = errno, err, inprog;

	if (fd < 0 || getsockname(fd, (void *)&ss, &len) ||
	    !wanted(fd, port_of((void *)&ss))) {
		errno = saved;
		return fd;
	}
	err = es_switch(fd, IWARP_MODE_PASSIVE, &inprog);
	if (err) {
		close(fd);
		errno = err;
		return -1;
	}
	errno = saved;
	return fd;
}

int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
	if (!real_accept)
		es_resolve();
	if (!real_accept) {
		errno = ENOSYS;
		return -1;
	}
	return accepted(real_accept(fd, addr, len));
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	if (!real_accept4)
		es_resolve();
	if (!real_accept4) {
		errno = ENOSYS;
		return -1;
	}
	return accepted(real_accept4(fd, addr, len, flags));
}
