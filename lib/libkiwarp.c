// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * libkiwarp: control path and work request posting.
 *
 * Every system call goes through a wrapper that converts failure into
 * -errno and restores the caller's errno, so nothing in the library
 * changes errno as seen by the application.
 */
#define _GNU_SOURCE
#define _FILE_OFFSET_BITS 64	/* mmap offsets are above 4 GiB (kind<<32) */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/mman.h>

#include "kw_internal.h"

_Static_assert(sizeof(struct kiwarp_wqe) == 128, "kiwarp_wqe must be 128 bytes");
_Static_assert(sizeof(struct kiwarp_cqe) == 32, "kiwarp_cqe must be 32 bytes");
_Static_assert(sizeof(off_t) == 8, "need 64-bit off_t for mmap offsets");

struct kw_device {
	int fd;
	struct kiwarp_query attr;
	/*
	 * CQ events read from the fd on behalf of another CQ: kw_wait_cq()
	 * on those CQs returns at once. Protected by ev_lock, which also
	 * serialises read() on the fd.
	 */
	pthread_mutex_t ev_lock;
	uint32_t *pending;
	unsigned npending, cap;
};

struct kw_listener {
	struct kw_device *dev;
	uint32_t handle;
	uint16_t port;		/* host order */
};

/* ------------------------------------------------------------------ */
/* System call wrappers: return -errno, leave errno untouched.        */

static int sys_ioctl(int fd, unsigned long req, void *arg)
{
	int saved = errno, ret;

	ret = ioctl(fd, req, arg);
	if (ret < 0)
		ret = -errno;
	errno = saved;
	return ret;
}

/* The commands that take just an object handle (destroy, doorbell). */
static int handle_ioctl(int fd, unsigned long req, uint32_t handle)
{
	struct kiwarp_handle h = { .handle = handle };

	return sys_ioctl(fd, req, &h);
}

static void *zalloc(size_t size)
{
	int saved = errno;
	void *p = calloc(1, size);

	errno = saved;
	return p;
}

static void sys_munmap(void *addr, size_t len)
{
	int saved = errno;

	if (addr)
		munmap(addr, len);
	errno = saved;
}

/* ------------------------------------------------------------------ */
/* Device                                                             */

KW_EXPORT int kw_open_path(const char *path, struct kw_device **devp)
{
	struct kw_device *dev;
	int saved = errno, ret;

	if (!path || !devp)
		return -EINVAL;
	*devp = NULL;
	dev = zalloc(sizeof(*dev));
	if (!dev)
		return -ENOMEM;
	dev->fd = open(path, O_RDWR | O_CLOEXEC);
	if (dev->fd < 0) {
		ret = -errno;
		errno = saved;
		free(dev);
		return ret;
	}
	ret = sys_ioctl(dev->fd, KIWARP_IOC_QUERY, &dev->attr);
	if (ret)
		goto fail;
	if (dev->attr.abi_version != KIWARP_ABI_VERSION) {
		ret = -EPROTONOSUPPORT;
		goto fail;
	}
	pthread_mutex_init(&dev->ev_lock, NULL);
	*devp = dev;
	return 0;
fail:
	close(dev->fd);
	errno = saved;
	free(dev);
	return ret;
}

KW_EXPORT int kw_open(struct kw_device **devp)
{
	return kw_open_path("/dev/" KIWARP_DEVICE_NAME, devp);
}

KW_EXPORT int kw_close(struct kw_device *dev)
{
	int saved = errno, ret = 0;

	if (!dev)
		return -EINVAL;
	if (close(dev->fd) < 0)
		ret = -errno;
	errno = saved;
	pthread_mutex_destroy(&dev->ev_lock);
	free(dev->pending);
	free(dev);
	return ret;
}

KW_EXPORT int kw_device_fd(const struct kw_device *dev)
{
	return dev ? dev->fd : -EINVAL;
}

KW_EXPORT int kw_query(struct kw_device *dev, struct kiwarp_query *attr)
{
	int ret;

	if (!dev || !attr)
		return -EINVAL;
	memset(attr, 0, sizeof(*attr));
	ret = sys_ioctl(dev->fd, KIWARP_IOC_QUERY, attr);
	if (!ret)
		dev->attr = *attr;
	return ret;
}

/* ------------------------------------------------------------------ */
/* PD, MR                                                             */

KW_EXPORT int kw_alloc_pd(struct kw_device *dev, struct kw_pd **pdp)
{
	struct kiwarp_handle h = { 0 };
	struct kw_pd *pd;
	int ret;

	if (!dev || !pdp)
		return -EINVAL;
	*pdp = NULL;
	pd = zalloc(sizeof(*pd));
	if (!pd)
		return -ENOMEM;
	ret = sys_ioctl(dev->fd, KIWARP_IOC_ALLOC_PD, &h);
	if (ret) {
		free(pd);
		return ret;
	}
	pd->dev = dev;
	pd->handle = h.handle;
	*pdp = pd;
	return 0;
}

KW_EXPORT int kw_dealloc_pd(struct kw_pd *pd)
{
	int ret;

	if (!pd)
		return -EINVAL;
	ret = handle_ioctl(pd->dev->fd, KIWARP_IOC_DEALLOC_PD, pd->handle);
	if (ret)
		return ret;	/* -EBUSY: MRs or QPs still use it */
	free(pd);
	return 0;
}

KW_EXPORT int kw_reg_mr(struct kw_pd *pd, void *addr, size_t length,
			uint32_t access, struct kw_mr **mrp)
{
	struct kiwarp_reg_mr arg;
	struct kw_mr *mr;
	int ret;

	if (!pd || !mrp)
		return -EINVAL;
	*mrp = NULL;
	if (!addr || !length || (access & ~KIWARP_ACCESS_ALL))
		return -EINVAL;
	/* The kernel enforces it too; fail early with a clear error. */
	if ((access & KIWARP_ACCESS_REMOTE_WRITE) &&
	    !(access & KIWARP_ACCESS_LOCAL_WRITE))
		return -EINVAL;
	if ((uint64_t)(uintptr_t)addr + (uint64_t)length < (uint64_t)(uintptr_t)addr)
		return -EINVAL;
	mr = zalloc(sizeof(*mr));
	if (!mr)
		return -ENOMEM;
	memset(&arg, 0, sizeof(arg));
	arg.pd = pd->handle;
	arg.access = access;
	arg.addr = (uintptr_t)addr;
	arg.length = length;
	ret = sys_ioctl(pd->dev->fd, KIWARP_IOC_REG_MR, &arg);
	if (ret) {
		free(mr);
		return ret;
	}
	mr->pd = pd;
	mr->handle = arg.handle;
	mr->stag = arg.stag;
	mr->addr = addr;
	mr->length = length;
	mr->access = access;
	*mrp = mr;
	return 0;
}

KW_EXPORT int kw_dereg_mr(struct kw_mr *mr)
{
	int ret;

	if (!mr)
		return -EINVAL;
	ret = handle_ioctl(mr->pd->dev->fd, KIWARP_IOC_DEREG_MR, mr->handle);
	if (ret)
		return ret;	/* -EBUSY: a WR in flight references it */
	free(mr);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Rings                                                              */

KW_HIDDEN int kw__ring_geometry_ok(uint32_t entries, uint32_t prod_off,
				   uint32_t cons_off, uint32_t ring_off,
				   uint64_t map_size, size_t entry_size)
{
	uint64_t ring_bytes, ring_end;

	if (!entries || (entries & (entries - 1)))
		return 0;
	if ((prod_off & 3) || (cons_off & 3) || (ring_off & 7))
		return 0;
	if (prod_off == cons_off)
		return 0;
	if ((uint64_t)prod_off + 4 > map_size ||
	    (uint64_t)cons_off + 4 > map_size)
		return 0;
	ring_bytes = (uint64_t)entries * entry_size;
	ring_end = (uint64_t)ring_off + ring_bytes;
	if (ring_end > map_size || map_size > SIZE_MAX)
		return 0;
	/* The indices must not live inside the entry array. */
	if ((prod_off + 4 > ring_off && prod_off < ring_end) ||
	    (cons_off + 4 > ring_off && cons_off < ring_end))
		return 0;
	return 1;
}

/*
 * Map one ring. user_produces: SQ/RQ (our head is the producer index);
 * otherwise CQ (our head is the consumer index).
 */
static int ring_map(int fd, struct kw_ring *r,
		    const struct kiwarp_ring_info *ri, size_t entry_size,
		    int user_produces)
{
	int saved = errno, ret;
	char *base;

	if (!kw__ring_geometry_ok(ri->ring_entries, ri->prod_off, ri->cons_off,
				  ri->ring_off, ri->mmap_size, entry_size))
		return -EPROTO;
	base = mmap(NULL, (size_t)ri->mmap_size, PROT_READ | PROT_WRITE,
		    MAP_SHARED, fd, (off_t)ri->mmap_offset);
	if (base == MAP_FAILED) {
		ret = -errno;
		errno = saved;
		return ret;
	}
	r->map = base;
	r->map_size = (size_t)ri->mmap_size;
	r->prod = (uint32_t *)(base + ri->prod_off);
	r->cons = (uint32_t *)(base + ri->cons_off);
	r->entries_base = base + ri->ring_off;
	r->entries = ri->ring_entries;
	r->mask = ri->ring_entries - 1;
	/*
	 * Start from whatever the kernel initialised (0 in practice). The
	 * index we own is only ever written by us afterwards.
	 */
	r->head = user_produces ? __atomic_load_n(r->prod, __ATOMIC_RELAXED)
				: __atomic_load_n(r->cons, __ATOMIC_RELAXED);
	return 0;
}

static void ring_unmap(struct kw_ring *r)
{
	sys_munmap(r->map, r->map_size);
	r->map = NULL;
}

/* ------------------------------------------------------------------ */
/* CQ                                                                 */

KW_EXPORT int kw_create_cq(struct kw_device *dev, uint32_t entries,
			   struct kw_cq **cqp)
{
	struct kiwarp_create_cq arg;
	struct kiwarp_ring_info ri;
	struct kiwarp_handle h = { 0 };
	struct kw_cq *cq;
	int ret;

	if (!dev || !cqp)
		return -EINVAL;
	*cqp = NULL;
	if (!entries)
		return -EINVAL;
	cq = zalloc(sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	memset(&arg, 0, sizeof(arg));
	arg.entries = entries;
	ret = sys_ioctl(dev->fd, KIWARP_IOC_CREATE_CQ, &arg);
	if (ret) {
		free(cq);
		return ret;
	}
	ri = (struct kiwarp_ring_info){
		.ring_entries = arg.ring_entries,
		.prod_off = arg.prod_off,
		.cons_off = arg.cons_off,
		.ring_off = arg.ring_off,
		.mmap_offset = arg.mmap_offset,
		.mmap_size = arg.mmap_size,
	};
	ret = ring_map(dev->fd, &cq->ring, &ri, sizeof(struct kiwarp_cqe), 0);
	if (!ret && arg.ring_entries < entries)
		ret = -EPROTO;
	if (ret) {
		ring_unmap(&cq->ring);
		h.handle = arg.handle;
		sys_ioctl(dev->fd, KIWARP_IOC_DESTROY_CQ, &h);
		free(cq);
		return ret;
	}
	cq->dev = dev;
	cq->handle = arg.handle;
	*cqp = cq;
	return 0;
}

static void drop_pending(struct kw_device *dev, uint32_t handle)
{
	unsigned i;

	pthread_mutex_lock(&dev->ev_lock);
	for (i = 0; i < dev->npending; i++) {
		if (dev->pending[i] == handle) {
			dev->pending[i] = dev->pending[--dev->npending];
			break;
		}
	}
	pthread_mutex_unlock(&dev->ev_lock);
}

KW_EXPORT int kw_destroy_cq(struct kw_cq *cq)
{
	int ret;

	if (!cq)
		return -EINVAL;
	if (cq->flags & KW_F_FAKE)
		return -EINVAL;
	ret = handle_ioctl(cq->dev->fd, KIWARP_IOC_DESTROY_CQ, cq->handle);
	if (ret)
		return ret;	/* -EBUSY: a QP still uses it */
	ring_unmap(&cq->ring);
	drop_pending(cq->dev, cq->handle);
	free(cq);
	return 0;
}

KW_EXPORT int kw_req_notify_cq(struct kw_cq *cq, int solicited_only)
{
	struct kiwarp_arm_cq arg;

	if (!cq || (cq->flags & KW_F_FAKE))
		return -EINVAL;
	arg.cq = cq->handle;
	arg.flags = solicited_only ? KIWARP_ARM_SOLICITED : KIWARP_ARM_NEXT;
	return sys_ioctl(cq->dev->fd, KIWARP_IOC_ARM_CQ, &arg);
}

/* Returns 1 (and forgets it) if an event for handle was read earlier. */
static int take_pending(struct kw_device *dev, uint32_t handle)
{
	unsigned i;
	int found = 0;

	pthread_mutex_lock(&dev->ev_lock);
	for (i = 0; i < dev->npending; i++) {
		if (dev->pending[i] == handle) {
			dev->pending[i] = dev->pending[--dev->npending];
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&dev->ev_lock);
	return found;
}

/* ev_lock held. Remember an event that belongs to another CQ. */
static void add_pending(struct kw_device *dev, uint32_t handle)
{
	unsigned i;

	for (i = 0; i < dev->npending; i++)
		if (dev->pending[i] == handle)
			return;
	if (dev->npending == dev->cap) {
		unsigned ncap = dev->cap ? dev->cap * 2 : 16;
		int saved = errno;
		uint32_t *p = realloc(dev->pending, ncap * sizeof(*p));

		errno = saved;
		if (!p)
			return;	/* lost: that CQ's waiter relies on re-check */
		dev->pending = p;
		dev->cap = ncap;
	}
	dev->pending[dev->npending++] = handle;
}

/*
 * Drain the event channel without blocking. Returns 1 if an event for
 * handle was seen, 0 if not, -errno on error.
 */
static int read_events(struct kw_device *dev, uint32_t handle)
{
	uint32_t buf[64];
	struct pollfd pfd = { .fd = dev->fd, .events = POLLIN };
	int saved = errno, found = 0, ret = 0;
	ssize_t n;
	size_t i;

	pthread_mutex_lock(&dev->ev_lock);
	for (;;) {
		/* Re-check under the lock: another thread may have read. */
		if (poll(&pfd, 1, 0) <= 0 || !(pfd.revents & POLLIN))
			break;
		n = read(dev->fd, buf, sizeof(buf));
		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR)
				ret = -errno;
			break;
		}
		if (n == 0)
			break;
		for (i = 0; i < (size_t)n / sizeof(buf[0]); i++) {
			if (buf[i] == handle)
				found = 1;
			else
				add_pending(dev, buf[i]);
		}
		if ((size_t)n < sizeof(buf))
			break;
	}
	pthread_mutex_unlock(&dev->ev_lock);
	errno = saved;
	return ret ? ret : found;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

KW_EXPORT int kw_wait_cq(struct kw_cq *cq, int timeout_ms)
{
	struct pollfd pfd;
	int64_t deadline = 0;
	int saved, ret, wait;

	if (!cq || (cq->flags & KW_F_FAKE))
		return -EINVAL;
	if (kw_cq_ready(cq))
		return 1;
	if (take_pending(cq->dev, cq->handle))
		return 1;
	ret = kw_req_notify_cq(cq, 0);
	if (ret)
		return ret;
	/*
	 * A CQE posted between the first check and the arm raised no event:
	 * look again. The ARM ioctl takes the CQ lock in the kernel, which
	 * orders it with kw_cq_post(); the load-acquire in kw_cq_ready()
	 * pairs with the kernel's store-release of prod.
	 */
	if (kw_cq_ready(cq))
		return 1;
	if (timeout_ms > 0)
		deadline = now_ms() + timeout_ms;
	for (;;) {
		wait = timeout_ms;
		if (timeout_ms > 0) {
			int64_t left = deadline - now_ms();

			if (left <= 0)
				return 0;
			wait = left > INT_MAX ? INT_MAX : (int)left;
		}
		pfd.fd = cq->dev->fd;
		pfd.events = POLLIN;
		pfd.revents = 0;
		saved = errno;
		ret = poll(&pfd, 1, wait);
		if (ret < 0) {
			ret = -errno;
			errno = saved;
			return ret;	/* -EINTR included: caller decides */
		}
		if (ret == 0)
			return 0;
		if (pfd.revents & (POLLERR | POLLNVAL))
			return -EIO;
		ret = read_events(cq->dev, cq->handle);
		if (ret)
			return ret;	/* 1 or -errno */
		if (kw_cq_ready(cq) || take_pending(cq->dev, cq->handle))
			return 1;
		if (timeout_ms == 0)
			return 0;
	}
}

/* ------------------------------------------------------------------ */
/* QP                                                                 */

KW_EXPORT int kw_create_qp(struct kw_pd *pd, const struct kw_qp_init_attr *attr,
			   struct kw_qp **qpp)
{
	struct kiwarp_create_qp arg;
	struct kiwarp_handle h = { 0 };
	struct kw_qp *qp;
	uint32_t max_sge;
	int ret;

	if (!pd || !attr || !qpp)
		return -EINVAL;
	*qpp = NULL;
	if (!attr->send_cq || !attr->recv_cq || !attr->sq_entries)
		return -EINVAL;
	if (attr->send_cq->dev != pd->dev || attr->recv_cq->dev != pd->dev)
		return -EINVAL;
	max_sge = attr->max_sge ? attr->max_sge : 1;
	if (max_sge > KIWARP_MAX_SGE || (attr->flags & ~KW_QP_INIT_COPY_MAX))
		return -EINVAL;
	qp = zalloc(sizeof(*qp));
	if (!qp)
		return -ENOMEM;
	memset(&arg, 0, sizeof(arg));
	arg.pd = pd->handle;
	arg.send_cq = attr->send_cq->handle;
	arg.recv_cq = attr->recv_cq->handle;
	arg.sq_entries = attr->sq_entries;
	arg.rq_entries = attr->rq_entries;
	arg.max_sge = max_sge;
	arg.flags = attr->sig_all ? KIWARP_QP_SIGNAL_ALL : 0;
	if (attr->flags & KW_QP_INIT_COPY_MAX) {
		arg.flags |= KIWARP_QP_COPY_MAX;
		arg.copy_max = attr->copy_max;
	}
	ret = sys_ioctl(pd->dev->fd, KIWARP_IOC_CREATE_QP, &arg);
	if (ret) {
		free(qp);
		return ret;
	}
	ret = ring_map(pd->dev->fd, &qp->sq, &arg.sq,
		       sizeof(struct kiwarp_wqe), 1);
	if (!ret)
		ret = ring_map(pd->dev->fd, &qp->rq, &arg.rq,
			       sizeof(struct kiwarp_wqe), 1);
	if (!ret && (arg.sq.ring_entries < attr->sq_entries ||
		     arg.rq.ring_entries < attr->rq_entries))
		ret = -EPROTO;
	if (ret) {
		ring_unmap(&qp->sq);
		ring_unmap(&qp->rq);
		h.handle = arg.handle;
		sys_ioctl(pd->dev->fd, KIWARP_IOC_DESTROY_QP, &h);
		free(qp);
		return ret;
	}
	qp->dev = pd->dev;
	qp->pd = pd;
	qp->send_cq = attr->send_cq;
	qp->recv_cq = attr->recv_cq;
	qp->handle = arg.handle;
	qp->max_sge = max_sge;
	qp->qp_flags = arg.flags;
	*qpp = qp;
	return 0;
}

KW_EXPORT int kw_destroy_qp(struct kw_qp *qp)
{
	int ret;

	if (!qp || (qp->flags & KW_F_FAKE))
		return -EINVAL;
	ret = handle_ioctl(qp->dev->fd, KIWARP_IOC_DESTROY_QP, qp->handle);
	if (ret)
		return ret;
	ring_unmap(&qp->sq);
	ring_unmap(&qp->rq);
	free(qp);
	return 0;
}

KW_EXPORT int kw_query_qp(struct kw_qp *qp, struct kiwarp_query_qp *attr)
{
	if (!qp || !attr || (qp->flags & KW_F_FAKE))
		return -EINVAL;
	memset(attr, 0, sizeof(*attr));
	attr->qp = qp->handle;
	return sys_ioctl(qp->dev->fd, KIWARP_IOC_QUERY_QP, attr);
}

KW_EXPORT int kw_modify_qp(struct kw_qp *qp, uint32_t action)
{
	struct kiwarp_modify_qp arg;

	if (!qp || (qp->flags & KW_F_FAKE))
		return -EINVAL;
	if (action != KIWARP_MODIFY_ERROR && action != KIWARP_MODIFY_CLOSE)
		return -EINVAL;
	arg.qp = qp->handle;
	arg.action = action;
	return sys_ioctl(qp->dev->fd, KIWARP_IOC_MODIFY_QP, &arg);
}

/* ------------------------------------------------------------------ */
/* Connection management                                              */

static int conv_param(const struct kw_conn_param *in,
		      struct kiwarp_conn_param *out)
{
	memset(out, 0, sizeof(*out));
	if (!in) {
		out->mpa_rev = 2;
		return 0;
	}
	if (in->flags & ~(KIWARP_CONN_CRC | KIWARP_CONN_P2P |
			  KIWARP_CONN_MARKERS | KIWARP_CONN_NO_CRC))
		return -EINVAL;
	if (in->reserved)
		return -EINVAL;
	out->mpa_rev = in->mpa_rev ? in->mpa_rev : 2;
	if (out->mpa_rev != 1 && out->mpa_rev != 2)
		return -EINVAL;
	if (in->rtr > KIWARP_RTR_READ)
		return -EINVAL;
	/* RFC 6581: P2P mode and RTR frames exist only in MPA rev 2. */
	if ((in->flags & KIWARP_CONN_P2P) && out->mpa_rev != 2)
		return -EINVAL;
	if (in->rtr != KIWARP_RTR_NONE && !(in->flags & KIWARP_CONN_P2P))
		return -EINVAL;
	out->flags = in->flags;
	out->rtr = in->rtr;
	out->ird = in->ird;
	out->ord = in->ord;
	return 0;
}

static int sockaddr_to_kw(const struct sockaddr *sa, socklen_t len,
			  struct kiwarp_sockaddr *out)
{
	memset(out, 0, sizeof(*out));
	if (!sa)
		return -EINVAL;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const void *)sa;

		if (len < sizeof(*sin))
			return -EINVAL;
		out->family = AF_INET;
		out->port = sin->sin_port;
		memcpy(out->addr, &sin->sin_addr, 4);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const void *)sa;

		if (len < sizeof(*sin6))
			return -EINVAL;
		out->family = AF_INET6;
		out->port = sin6->sin6_port;
		out->flowinfo = sin6->sin6_flowinfo;
		memcpy(out->addr, &sin6->sin6_addr, 16);
		out->scope_id = sin6->sin6_scope_id;
		return 0;
	}
	return -EAFNOSUPPORT;
}

static void kw_to_sockaddr(const struct kiwarp_sockaddr *in,
			   struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	if (in->family == AF_INET) {
		struct sockaddr_in *sin = (void *)ss;

		sin->sin_family = AF_INET;
		sin->sin_port = in->port;
		memcpy(&sin->sin_addr, in->addr, 4);
		*len = sizeof(*sin);
	} else if (in->family == AF_INET6) {
		struct sockaddr_in6 *sin6 = (void *)ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = in->port;
		sin6->sin6_flowinfo = in->flowinfo;
		memcpy(&sin6->sin6_addr, in->addr, 16);
		sin6->sin6_scope_id = in->scope_id;
		*len = sizeof(*sin6);
	} else {
		*len = 0;
	}
}

static int do_connect(struct kw_qp *qp, int sockfd,
		      const struct sockaddr *sa, socklen_t salen,
		      const struct kw_conn_param *param,
		      const void *pdata, size_t pdata_len,
		      struct kw_conn_result *result)
{
	uint8_t scratch[KIWARP_MAX_PRIVATE_DATA];
	struct kiwarp_connect arg;
	int ret;

	if (!qp || (qp->flags & KW_F_FAKE))
		return -EINVAL;
	if (pdata_len > KIWARP_MAX_PRIVATE_DATA || (pdata_len && !pdata))
		return -EINVAL;
	memset(&arg, 0, sizeof(arg));
	ret = conv_param(param, &arg.param);
	if (ret)
		return ret;
	if (sa) {
		ret = sockaddr_to_kw(sa, salen, &arg.addr);
		if (ret)
			return ret;
	}
	arg.qp = qp->handle;
	arg.sockfd = sockfd;
	arg.timeout_ms = param ? param->timeout_ms : 0;
	arg.private_data_len = (uint32_t)pdata_len;
	arg.private_data = (uintptr_t)pdata;
	arg.peer_private_data = (uintptr_t)(result ? result->pdata : scratch);
	arg.peer_private_data_len = 0;
	ret = sys_ioctl(qp->dev->fd, KIWARP_IOC_CONNECT, &arg);
	if (result && (!ret || ret == -ECONNREFUSED)) {
		/* On a reject the peer's private data is still returned. */
		result->param = arg.result;
		result->pdata_len = arg.peer_private_data_len >
				    KIWARP_MAX_PRIVATE_DATA ?
				    KIWARP_MAX_PRIVATE_DATA :
				    arg.peer_private_data_len;
	}
	return ret;
}

KW_EXPORT int kw_connect(struct kw_qp *qp, int sockfd,
			 const struct kw_conn_param *param,
			 const void *pdata, size_t pdata_len,
			 struct kw_conn_result *result)
{
	if (sockfd < 0)
		return -EBADF;
	return do_connect(qp, sockfd, NULL, 0, param, pdata, pdata_len,
			  result);
}

KW_EXPORT int kw_connect_addr(struct kw_qp *qp, const struct sockaddr *addr,
			      socklen_t addrlen,
			      const struct kw_conn_param *param,
			      const void *pdata, size_t pdata_len,
			      struct kw_conn_result *result)
{
	if (!addr)
		return -EINVAL;
	return do_connect(qp, -1, addr, addrlen, param, pdata, pdata_len,
			  result);
}

KW_EXPORT int kw_listen(struct kw_device *dev, const struct sockaddr *addr,
			socklen_t addrlen, int backlog, struct kw_listener **lp)
{
	struct kiwarp_listen arg;
	struct kw_listener *l;
	int ret;

	if (!dev || !lp || backlog < 0)
		return -EINVAL;
	*lp = NULL;
	memset(&arg, 0, sizeof(arg));
	ret = sockaddr_to_kw(addr, addrlen, &arg.addr);
	if (ret)
		return ret;
	arg.backlog = backlog ? (uint32_t)backlog : 16;
	l = zalloc(sizeof(*l));
	if (!l)
		return -ENOMEM;
	ret = sys_ioctl(dev->fd, KIWARP_IOC_LISTEN, &arg);
	if (ret) {
		free(l);
		return ret;
	}
	l->dev = dev;
	l->handle = arg.handle;
	l->port = ntohs(arg.port);
	*lp = l;
	return 0;
}

KW_EXPORT int kw_listener_port(const struct kw_listener *l)
{
	return l ? l->port : -EINVAL;
}

KW_EXPORT int kw_destroy_listener(struct kw_listener *l)
{
	int ret;

	if (!l)
		return -EINVAL;
	ret = handle_ioctl(l->dev->fd, KIWARP_IOC_DESTROY_LISTEN, l->handle);
	if (ret)
		return ret;
	free(l);
	return 0;
}

KW_EXPORT int kw_accept(struct kw_qp *qp, int sockfd, struct kw_listener *l,
			int timeout_ms, struct kw_conn_request *req)
{
	uint8_t scratch[KIWARP_MAX_PRIVATE_DATA];
	struct kiwarp_accept arg;
	int ret;

	if (!qp || (qp->flags & KW_F_FAKE) || timeout_ms < 0)
		return -EINVAL;
	/* Exactly one source: a connected socket or a listener. */
	if ((sockfd >= 0) == (l != NULL))
		return -EINVAL;
	if (l && l->dev != qp->dev)
		return -EINVAL;
	memset(&arg, 0, sizeof(arg));
	arg.qp = qp->handle;
	arg.sockfd = sockfd >= 0 ? sockfd : -1;
	arg.listen_handle = l ? l->handle : 0;
	arg.timeout_ms = (uint32_t)timeout_ms;
	arg.peer_private_data = (uintptr_t)(req ? req->pdata : scratch);
	ret = sys_ioctl(qp->dev->fd, KIWARP_IOC_ACCEPT, &arg);
	if (ret)
		return ret;
	if (req) {
		req->param = arg.peer;
		req->pdata_len = arg.peer_private_data_len >
				 KIWARP_MAX_PRIVATE_DATA ?
				 KIWARP_MAX_PRIVATE_DATA :
				 arg.peer_private_data_len;
		kw_to_sockaddr(&arg.peer_addr, &req->peer_addr,
			       &req->peer_addrlen);
	}
	return 0;
}

KW_EXPORT int kw_accept_reply(struct kw_qp *qp, uint32_t action,
			      const struct kw_conn_param *param,
			      const void *pdata, size_t pdata_len,
			      struct kw_conn_result *result)
{
	struct kiwarp_accept_reply arg;
	int ret;

	if (!qp || (qp->flags & KW_F_FAKE))
		return -EINVAL;
	if (action != KIWARP_REPLY_ACCEPT && action != KIWARP_REPLY_REJECT)
		return -EINVAL;
	if (pdata_len > KIWARP_MAX_PRIVATE_DATA || (pdata_len && !pdata))
		return -EINVAL;
	memset(&arg, 0, sizeof(arg));
	ret = conv_param(param, &arg.param);
	if (ret)
		return ret;
	arg.qp = qp->handle;
	arg.action = action;
	arg.private_data_len = (uint32_t)pdata_len;
	arg.private_data = (uintptr_t)pdata;
	ret = sys_ioctl(qp->dev->fd, KIWARP_IOC_ACCEPT_REPLY, &arg);
	if (ret)
		return ret;
	if (result) {
		result->param = arg.result;
		result->pdata_len = 0;	/* peer data came with kw_accept() */
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Posting                                                            */

static int doorbell(struct kw_qp *qp)
{
	qp->doorbells++;
	if (qp->flags & KW_F_FAKE)
		return 0;
	return handle_ioctl(qp->dev->fd, KIWARP_IOC_QP_DOORBELL, qp->handle);
}

/* Fill wqe's scatter/gather list and copy it into ring slot idx. */
static void wqe_put(struct kw_ring *r, uint32_t idx, struct kiwarp_wqe *wqe,
		    const struct kiwarp_sge *sg, unsigned num_sge)
{
	struct kiwarp_wqe *ring = r->entries_base;

	if (num_sge)
		memcpy(wqe->sge, sg, num_sge * sizeof(wqe->sge[0]));
	memcpy(&ring[idx & r->mask], wqe, sizeof(*wqe));
}

/*
 * Publish the n entries written from r->head on and ring the doorbell.
 * The release store pairs with the kernel's smp_load_acquire() of the
 * ring's prod (doorbell ioctl, receive path): the entries are visible
 * before it. If the doorbell fails the entries stay published; the next
 * successful doorbell picks them up, or they are flushed with the QP.
 */
static int ring_commit(struct kw_qp *qp, struct kw_ring *r, unsigned n)
{
	int ret;

	r->head += n;
	kw_smp_store_release(r->prod, r->head);
	ret = doorbell(qp);
	return ret ? ret : (int)n;
}

static int check_send_wr(const struct kw_qp *qp, const struct kw_send_wr *wr)
{
	if (wr->flags & ~(KW_SEND_SIGNALED | KW_SEND_FENCE))
		return -EINVAL;
	if (wr->reserved)
		return -EINVAL;
	if (wr->num_sge > qp->max_sge || wr->num_sge > KIWARP_MAX_SGE)
		return -EINVAL;
	if (wr->num_sge && !wr->sg_list)
		return -EINVAL;
	switch (wr->opcode) {
	case KIWARP_WR_SEND:
	case KIWARP_WR_SEND_SE:
	case KIWARP_WR_SEND_INV:
	case KIWARP_WR_SEND_SE_INV:
	case KIWARP_WR_RDMA_WRITE:
		return 0;
	case KIWARP_WR_RDMA_READ:
		/* One local sink (or none for a zero-length Read). */
		return wr->num_sge > 1 ? -EINVAL : 0;
	case KIWARP_WR_LOCAL_INV:
		return wr->num_sge ? -EINVAL : 0;
	default:
		return -EINVAL;
	}
}

KW_EXPORT int kw_post_send(struct kw_qp *qp, const struct kw_send_wr *wr,
			   unsigned n)
{
	struct kiwarp_wqe wqe;
	uint32_t head;
	unsigned i;
	int ret;

	if (!qp || (n && !wr))
		return -EINVAL;
	if (!n)
		return 0;
	/* All or nothing: validate everything before touching the ring. */
	for (i = 0; i < n; i++) {
		ret = check_send_wr(qp, &wr[i]);
		if (ret)
			return ret;
	}
	if (n > qp->sq.entries)
		return -ENOMEM;		/* can never fit */
	if (n > kw_sq_space(qp))	/* load-acquire of cons, see there */
		return -EAGAIN;		/* poll completions and retry */

	head = qp->sq.head;
	for (i = 0; i < n; i++) {
		const struct kw_send_wr *w = &wr[i];

		memset(&wqe, 0, sizeof(wqe));
		wqe.wr_id = w->wr_id;
		wqe.opcode = w->opcode;
		wqe.flags = w->flags;
		wqe.num_sge = (uint8_t)w->num_sge;
		switch (w->opcode) {
		case KIWARP_WR_SEND_INV:
		case KIWARP_WR_SEND_SE_INV:
		case KIWARP_WR_LOCAL_INV:
			wqe.inv_stag = w->inv_stag;
			break;
		case KIWARP_WR_RDMA_WRITE:
		case KIWARP_WR_RDMA_READ:
			wqe.remote_addr = w->remote_addr;
			wqe.rkey = w->rkey;
			break;
		}
		wqe_put(&qp->sq, head + i, &wqe, w->sg_list, w->num_sge);
	}
	return ring_commit(qp, &qp->sq, n);
}

KW_EXPORT int kw_post_recv(struct kw_qp *qp, const struct kw_recv_wr *wr,
			   unsigned n)
{
	struct kiwarp_wqe wqe;
	uint32_t head;
	unsigned i;

	if (!qp || (n && !wr))
		return -EINVAL;
	if (!n)
		return 0;
	for (i = 0; i < n; i++) {
		if (wr[i].num_sge > qp->max_sge ||
		    wr[i].num_sge > KIWARP_MAX_SGE || wr[i].reserved ||
		    (wr[i].num_sge && !wr[i].sg_list))
			return -EINVAL;
	}
	if (n > qp->rq.entries)
		return -ENOMEM;
	if (n > kw_rq_space(qp))	/* load-acquire of RQ cons */
		return -EAGAIN;

	head = qp->rq.head;
	for (i = 0; i < n; i++) {
		memset(&wqe, 0, sizeof(wqe));
		wqe.wr_id = wr[i].wr_id;
		wqe.opcode = KIWARP_WR_RECV;
		wqe.num_sge = (uint8_t)wr[i].num_sge;
		wqe_put(&qp->rq, head + i, &wqe, wr[i].sg_list,
			wr[i].num_sge);
	}
	/*
	 * No doorbell: the kernel takes receive WRs from the ring itself
	 * when a message needs one (and checks the index then; a Send that
	 * finds none fails as RFC 5040 says). A system call per repost was
	 * on the critical path of every Send ping-pong.
	 */
	qp->rq.head += n;
	kw_smp_store_release(qp->rq.prod, qp->rq.head);
	return (int)n;
}

/* ------------------------------------------------------------------ */
/* Test constructors (hidden, not in the version script)              */

static void fake_ring(struct kw_ring *r, uint32_t *prod, uint32_t *cons,
		      void *base, uint32_t entries, int user_produces)
{
	memset(r, 0, sizeof(*r));
	r->prod = prod;
	r->cons = cons;
	r->entries_base = base;
	r->entries = entries;
	r->mask = entries - 1;
	r->head = user_produces ? *prod : *cons;
}

KW_HIDDEN void kw__test_init_cq(struct kw_cq *cq, uint32_t *prod,
				uint32_t *cons, struct kiwarp_cqe *ring,
				uint32_t entries)
{
	memset(cq, 0, sizeof(*cq));
	cq->flags = KW_F_FAKE;
	fake_ring(&cq->ring, prod, cons, ring, entries, 0);
}

KW_HIDDEN void kw__test_init_qp(struct kw_qp *qp, uint32_t max_sge,
				uint32_t *sq_prod, uint32_t *sq_cons,
				struct kiwarp_wqe *sq, uint32_t sq_entries,
				uint32_t *rq_prod, uint32_t *rq_cons,
				struct kiwarp_wqe *rq, uint32_t rq_entries)
{
	memset(qp, 0, sizeof(*qp));
	qp->flags = KW_F_FAKE;
	qp->max_sge = max_sge;
	fake_ring(&qp->sq, sq_prod, sq_cons, sq, sq_entries, 1);
	fake_ring(&qp->rq, rq_prod, rq_cons, rq, rq_entries, 1);
}
