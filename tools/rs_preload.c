// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * libkiwarp-rsocket.so: rsockets' API (rdma-core's <rdma/rsocket.h>:
 * rsocket, rconnect, raccept, rsend, rrecv, rpoll, riomap, riowrite, ...)
 * on kiwarp's extended sockets. kiwarp-run --rsocket preloads it, so a
 * program written for rsockets (rstream, riostream) runs unmodified over
 * any NIC, and speaks the same wire protocol as rsockets on an iWARP RNIC
 * or siw (Documentation/extended-sockets.md).
 *
 * Every rsocket is a kernel TCP socket wearing the kiwarp ULP from its
 * creation; rconnect() and raccept() switch the connection to IWARP_MODE
 * once TCP is up, and from then on the kernel does the work: the r*
 * calls are the socket calls. What rsockets keeps in user space and the
 * kernel wants before the switch (RDMA_IOMAPSIZE) is remembered per fd,
 * and an accepted socket takes its listener's, as in rsockets.
 *
 * Not supported (errno EOPNOTSUPP): datagram rsockets (rsockets' own
 * protocol over UD QPs, which iWARP lacks), and riomap() without
 * PROT_WRITE (a local-only mapping, which rsockets registers but never
 * uses). riomap() also takes PROT_READ, which lets a kiwarp peer read the
 * region (IWARP_IOREAD); rsockets itself refuses it. The RDMA_SQSIZE, RDMA_RQSIZE, RDMA_INLINE and RDMA_ROUTE options
 * are accepted and have no effect: the kernel sizes its own queues.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <linux/kiwarp.h>

/* Where rdma-core is installed, its declarations check ours. */
#if defined(__has_include)
#if __has_include(<rdma/rsocket.h>)
#include <rdma/rsocket.h>
#endif
#endif

#ifndef TCP_ULP
#define TCP_ULP 31
#endif
/* <rdma/rsocket.h>'s option level and names: part of rsockets' ABI */
#define RS_SOL_RDMA		0x10000
#define RS_RDMA_SQSIZE		0
#define RS_RDMA_RQSIZE		1
#define RS_RDMA_INLINE		2
#define RS_RDMA_IOMAPSIZE	3
#define RS_RDMA_ROUTE		4

#define __rs_api __attribute__((visibility("default")))

int rsocket(int domain, int type, int protocol) __rs_api;
int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen) __rs_api;
int rlisten(int socket, int backlog) __rs_api;
int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen) __rs_api;
int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen) __rs_api;
int rshutdown(int socket, int how) __rs_api;
int rclose(int socket) __rs_api;
ssize_t rrecv(int socket, void *buf, size_t len, int flags) __rs_api;
ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags,
		  struct sockaddr *src_addr, socklen_t *addrlen) __rs_api;
ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags) __rs_api;
ssize_t rsend(int socket, const void *buf, size_t len, int flags) __rs_api;
ssize_t rsendto(int socket, const void *buf, size_t len, int flags,
		const struct sockaddr *dest_addr, socklen_t addrlen) __rs_api;
ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags) __rs_api;
ssize_t rread(int socket, void *buf, size_t count) __rs_api;
ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt) __rs_api;
ssize_t rwrite(int socket, const void *buf, size_t count) __rs_api;
ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt) __rs_api;
int rpoll(struct pollfd *fds, nfds_t nfds, int timeout) __rs_api;
int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
	    struct timeval *timeout) __rs_api;
int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen) __rs_api;
int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen) __rs_api;
int rsetsockopt(int socket, int level, int optname, const void *optval,
		socklen_t optlen) __rs_api;
int rgetsockopt(int socket, int level, int optname, void *optval,
		socklen_t *optlen) __rs_api;
int rfcntl(int socket, int cmd, ... /* arg */) __rs_api;
off_t riomap(int socket, void *buf, size_t len, int prot, int flags,
	     off_t offset) __rs_api;
int riounmap(int socket, void *buf, size_t len) __rs_api;
size_t riowrite(int socket, const void *buf, size_t count, off_t offset,
		int flags) __rs_api;

/*
 * RDMA_IOMAPSIZE per fd, until the switch takes it (0: not set). Plain
 * bytes: each is written by the calls on its own fd. fds beyond the table
 * get no iomap table (riomap() on their peer says ENOMEM).
 */
#define RS_MAX_FD	65536
static unsigned char rs_iomap[RS_MAX_FD];

static void iomap_set(int fd, int v)
{
	if (fd >= 0 && fd < RS_MAX_FD)
		rs_iomap[fd] = v;
}

static int iomap_get(int fd)
{
	return fd >= 0 && fd < RS_MAX_FD ? rs_iomap[fd] : 0;
}

/* errno of a failed call, the call's result otherwise */
static int err(int e)
{
	errno = e;
	return -1;
}

int rsocket(int domain, int type, int protocol)
{
	int fd, saved;

	if ((type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) != SOCK_STREAM ||
	    (domain != AF_INET && domain != AF_INET6))
		return err(EOPNOTSUPP);
	fd = socket(domain, type, protocol);
	if (fd < 0)
		return fd;
	/* on the fresh socket: a listener's children wear it too */
	if (setsockopt(fd, IPPROTO_TCP, TCP_ULP, KIWARP_ULP_NAME,
		       sizeof(KIWARP_ULP_NAME) - 1)) {
		saved = errno;
		close(fd);
		return err(saved == ENOENT ? EAFNOSUPPORT : saved);
	}
	iomap_set(fd, 0);
	return fd;
}

/*
 * TCP is up: switch. A blocking socket runs the MPA exchange here; a
 * non-blocking one in the background (EINPROGRESS: POLLOUT when the
 * stream is up, SO_ERROR if it failed), as rsockets connects.
 */
static int rs_switch(int fd, int mode)
{
	const char *crc = getenv("KIWARP_ES_CRC");	/* kiwarp-run --no-crc */
	int size = iomap_get(fd), off = 0;

	if (size && setsockopt(fd, SOL_IWARP, IWARP_IOMAP_SIZE, &size,
			       sizeof(size)))
		return -1;
	if (crc && !strcmp(crc, "0") &&
	    setsockopt(fd, SOL_IWARP, IWARP_CRC, &off, sizeof(off)))
		return -1;
	if (setsockopt(fd, SOL_IWARP, IWARP_MODE, &mode, sizeof(mode)))
		return -1;
	return 0;
}

int rconnect(int fd, const struct sockaddr *addr, socklen_t addrlen)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	time_t deadline = 0;	/* 30 s, whatever signals come */
	int e = 0;
	socklen_t el = sizeof(e);

	if (!connect(fd, addr, addrlen))
		return rs_switch(fd, IWARP_MODE_ACTIVE);
	if (errno != EINPROGRESS)
		return -1;
	/*
	 * Non-blocking: IWARP_MODE needs the TCP connection; wait for it
	 * here (one round trip; rsockets' own address and route resolution
	 * wait too), then let the MPA exchange run in the background.
	 */
	for (;;) {
		struct timespec now;
		int n, left;

		clock_gettime(CLOCK_MONOTONIC, &now);
		if (!deadline)
			deadline = now.tv_sec + 30;
		left = (int)(deadline - now.tv_sec) * 1000;
		n = poll(&p, 1, left > 0 ? left : 0);
		if (n == 1)
			break;
		if (n == 0)
			return err(ETIMEDOUT);
		if (errno != EINTR)
			return -1;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el))
		return -1;
	if (e)
		return err(e);
	if (rs_switch(fd, IWARP_MODE_ACTIVE) && errno != EINPROGRESS)
		return -1;
	return err(EINPROGRESS);
}

/*
 * From a non-blocking listener (an event loop), the connection switches
 * in the background, so that a client that connects and says nothing
 * cannot stall the caller for the MPA timeout; the socket is then made
 * blocking again, as accept() returns it: its calls wait for the switch.
 */
int raccept(int fd, struct sockaddr *addr, socklen_t *addrlen)
{
	int fl = fcntl(fd, F_GETFL), nb = fl >= 0 && (fl & O_NONBLOCK);
	int nfd = accept4(fd, addr, addrlen, nb ? SOCK_NONBLOCK : 0), saved;

	if (nfd < 0)
		return nfd;
	iomap_set(nfd, iomap_get(fd));	/* rsockets: inherited */
	if (rs_switch(nfd, IWARP_MODE_PASSIVE) && errno != EINPROGRESS)
		goto fail;
	if (nb && ((fl = fcntl(nfd, F_GETFL)) < 0 ||
		   fcntl(nfd, F_SETFL, fl & ~O_NONBLOCK)))
		goto fail;
	return nfd;
fail:
	saved = errno;
	close(nfd);
	return err(saved);
}

int rbind(int fd, const struct sockaddr *addr, socklen_t addrlen)
{
	return bind(fd, addr, addrlen);
}

int rlisten(int fd, int backlog)
{
	return listen(fd, backlog);
}

int rshutdown(int fd, int how)
{
	return shutdown(fd, how);
}

int rclose(int fd)
{
	iomap_set(fd, 0);
	return close(fd);
}

ssize_t rrecv(int fd, void *buf, size_t len, int flags)
{
	return recv(fd, buf, len, flags);
}

ssize_t rrecvfrom(int fd, void *buf, size_t len, int flags,
		  struct sockaddr *src_addr, socklen_t *addrlen)
{
	return recvfrom(fd, buf, len, flags, src_addr, addrlen);
}

ssize_t rrecvmsg(int fd, struct msghdr *msg, int flags)
{
	return recvmsg(fd, msg, flags);
}

ssize_t rsend(int fd, const void *buf, size_t len, int flags)
{
	return send(fd, buf, len, flags);
}

ssize_t rsendto(int fd, const void *buf, size_t len, int flags,
		const struct sockaddr *dest_addr, socklen_t addrlen)
{
	return sendto(fd, buf, len, flags, dest_addr, addrlen);
}

ssize_t rsendmsg(int fd, const struct msghdr *msg, int flags)
{
	return sendmsg(fd, msg, flags);
}

ssize_t rread(int fd, void *buf, size_t count)
{
	return read(fd, buf, count);
}

ssize_t rreadv(int fd, const struct iovec *iov, int iovcnt)
{
	return readv(fd, iov, iovcnt);
}

ssize_t rwrite(int fd, const void *buf, size_t count)
{
	return write(fd, buf, count);
}

ssize_t rwritev(int fd, const struct iovec *iov, int iovcnt)
{
	return writev(fd, iov, iovcnt);
}

int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	return poll(fds, nfds, timeout);
}

int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
	    struct timeval *timeout)
{
	return select(nfds, readfds, writefds, exceptfds, timeout);
}

int rgetpeername(int fd, struct sockaddr *addr, socklen_t *addrlen)
{
	return getpeername(fd, addr, addrlen);
}

int rgetsockname(int fd, struct sockaddr *addr, socklen_t *addrlen)
{
	return getsockname(fd, addr, addrlen);
}

int rsetsockopt(int fd, int level, int optname, const void *optval,
		socklen_t optlen)
{
	int v;

	if (level != RS_SOL_RDMA)
		return setsockopt(fd, level, optname, optval, optlen);
	switch (optname) {
	case RS_RDMA_SQSIZE:
	case RS_RDMA_RQSIZE:
	case RS_RDMA_INLINE:
	case RS_RDMA_ROUTE:
		return 0;	/* the kernel sizes its own queues */
	case RS_RDMA_IOMAPSIZE:
		if (!optval || optlen < sizeof(int))
			return err(EINVAL);
		memcpy(&v, optval, sizeof(v));
		if (v < 0)
			return err(EINVAL);
		/*
		 * Taken at the switch (rconnect, raccept), as rsockets takes
		 * it when it builds the connection; later it changes
		 * nothing, there as here.
		 */
		iomap_set(fd, v > IWARP_IOMAP_MAX ? IWARP_IOMAP_MAX : v);
		return 0;
	}
	return err(ENOPROTOOPT);
}

int rgetsockopt(int fd, int level, int optname, void *optval,
		socklen_t *optlen)
{
	int v;

	if (level != RS_SOL_RDMA)
		return getsockopt(fd, level, optname, optval, optlen);
	if (optname != RS_RDMA_IOMAPSIZE)
		return err(ENOPROTOOPT);
	if (!optval || !optlen || *optlen < sizeof(int))
		return err(EINVAL);
	v = iomap_get(fd);
	memcpy(optval, &v, sizeof(v));
	*optlen = sizeof(v);
	return 0;
}

int rfcntl(int fd, int cmd, ...)
{
	va_list ap;
	long arg;

	va_start(ap, cmd);
	arg = va_arg(ap, long);
	va_end(ap);
	return fcntl(fd, cmd, arg);
}

off_t riomap(int fd, void *buf, size_t len, int prot, int flags, off_t offset)
{
	struct iwarp_iomap io = {
		.addr = (uintptr_t)buf,
		.len = len,
		.prot = prot,	/* PROT_READ too: a kiwarp extension */
	};

	(void)flags;	/* rsockets defines none */
	if (prot == PROT_NONE)
		return err(EOPNOTSUPP);
	if (offset == -1)
		offset = (uintptr_t)buf;	/* rsockets: map at its address */
	io.offset = offset;
	if (setsockopt(fd, SOL_IWARP, IWARP_IOMAP, &io, sizeof(io)))
		return -1;
	return offset;
}

int riounmap(int fd, void *buf, size_t len)
{
	struct iwarp_iomap io = { .addr = (uintptr_t)buf, .len = len };

	return setsockopt(fd, SOL_IWARP, IWARP_IOUNMAP, &io, sizeof(io));
}

size_t riowrite(int fd, const void *buf, size_t count, off_t offset,
		int flags)
{
	union {
		char b[CMSG_SPACE(sizeof(uint64_t))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = count };
	struct msghdr msg = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = ctl.b, .msg_controllen = sizeof(ctl.b),
	};
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	uint64_t off = offset;

	memset(&ctl, 0, sizeof(ctl));
	c->cmsg_level = SOL_IWARP;
	c->cmsg_type = IWARP_IOWRITE;
	c->cmsg_len = CMSG_LEN(sizeof(off));
	memcpy(CMSG_DATA(c), &off, sizeof(off));
	/* rsockets' riowrite() returns ssize_t's -1 in a size_t, too */
	return sendmsg(fd, &msg, flags);
}
