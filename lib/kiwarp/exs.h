/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * <kiwarp/exs.h>: the Extended Sockets API (ES-API) on Linux sockets, in
 * libkiwarp.
 *
 * Asynchronous sends and receives on connected stream sockets, posted
 * with a context pointer and completed as events on an event queue. The
 * queue has a file descriptor (exs_qfd()) for poll/select/epoll. Memory
 * registered with exs_mregister() is sent without a copy on sockets in
 * IWARP_MODE: the kernel transmits straight from the pinned pages
 * (IWARP_MREG and MSG_ZEROCOPY, <kiwarp/kiwarp-abi.h>). On other sockets,
 * and for receives, the bytes are copied as by send()/recv().
 *
 * The names follow the Open Group's ES-API; the types and the event
 * layout are kiwarp's (see exs(3)). Every call returns -1 and sets errno
 * on failure.
 */
#ifndef KIWARP_EXS_H
#define KIWARP_EXS_H

#include <stddef.h>
#include <time.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EXS_VERSION		1

typedef int exs_qhandle_t;	/* an event queue */
typedef int exs_mhandle_t;	/* a memory registration */

#define EXS_QHANDLE_INVALID	(-1)
#define EXS_MHANDLE_INVALID	(-1)	/* exs_send()/exs_recv(): none */

#define EXS_QDEPTH_MAX		65536

enum exs_evt_type {
	EXS_EVT_SEND = 1,
	EXS_EVT_RECV = 2,
	EXS_EVT_ACCEPT = 3,	/* exs_accept(), symbol version KIWARP_1.2 */
	EXS_EVT_CONNECT = 4,	/* exs_connect(), KIWARP_1.2 */
};

typedef struct exs_event {
	int exs_evt_type;	/* EXS_EVT_* */
	int exs_evt_errno;	/* 0, or why the operation ended early */
	void *exs_evt_context;	/* as posted */
	int exs_evt_fd;		/* the socket; ACCEPT: the accepted one
				 * (-1 if exs_evt_errno says why not) */
	void *exs_evt_buf;	/* as posted */
	size_t exs_evt_nbytes;	/* bytes sent or received (0: end of stream) */
} exs_event_t;

int exs_init(int version);

exs_qhandle_t exs_qcreate(int depth);
int exs_qdelete(exs_qhandle_t q);
int exs_qfd(exs_qhandle_t q);
int exs_qdequeue(exs_qhandle_t q, exs_event_t *events, int nevents,
		 const struct timespec *timeout);

exs_mhandle_t exs_mregister(const void *addr, size_t len, int flags);
int exs_mderegister(exs_mhandle_t mh);

int exs_send(int fd, const void *buf, size_t nbytes, int flags,
	     exs_mhandle_t mh, exs_qhandle_t q, void *context);
int exs_recv(int fd, void *buf, size_t nbytes, int flags,
	     exs_mhandle_t mh, exs_qhandle_t q, void *context);
int exs_accept(int fd, exs_qhandle_t q, void *context);
int exs_connect(int fd, const struct sockaddr *addr, socklen_t addrlen,
		exs_qhandle_t q, void *context);

#ifdef __cplusplus
}
#endif

#endif /* KIWARP_EXS_H */
