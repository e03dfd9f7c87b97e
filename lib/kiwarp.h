/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * libkiwarp: user-space library for the kiwarp software iWARP device.
 *
 * Conventions (liburing style):
 *  - every function returns 0 (or a non-negative count) on success and a
 *    negative errno value on failure; errno is never used to report errors
 *    (it may be clobbered by the system calls the library makes, as with
 *    any libc call, but its value carries no meaning);
 *  - exported symbols are versioned (KIWARP_1.0);
 *  - the fast paths (ring space, CQ polling) are static inline functions
 *    working directly on the mmap'd rings. Their layout comes from the
 *    geometry the kernel reports at creation time, never from constants.
 *
 * Thread safety: a QP's send ring, a QP's receive ring and a CQ may each be
 * used by one thread at a time (serialise kw_post_send() per QP,
 * kw_post_recv() per QP, kw_poll_cq()/kw_wait_cq() per CQ). Different
 * objects may be used concurrently. Control calls are thread-safe.
 */
#ifndef KIWARP_LIB_H
#define KIWARP_LIB_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <linux/kiwarp.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KW_LIB_VERSION_MAJOR	1
#define KW_LIB_VERSION_MINOR	0

/* ------------------------------------------------------------------ */
/* Objects                                                            */

struct kw_device;		/* opaque: one open /dev/kiwarp context */
struct kw_listener;		/* opaque: kernel listening socket */

/*
 * One mmap'd ring (SQ, RQ or CQ). The fields are private to the library
 * but visible so that the inline fast paths can use them.
 */
struct kw_ring {
	uint32_t *prod;		/* producer index (free running) */
	uint32_t *cons;		/* consumer index (free running) */
	void *entries_base;	/* slot 0 */
	uint32_t entries;	/* power of two */
	uint32_t mask;		/* entries - 1 */
	uint32_t head;		/* our private copy of the index we own */
	uint32_t pad;
	void *map;		/* mmap base (NULL for test rings) */
	size_t map_size;
};

struct kw_pd {
	struct kw_device *dev;
	uint32_t handle;
};

struct kw_mr {
	struct kw_pd *pd;
	uint32_t handle;
	uint32_t stag;		/* lkey == rkey */
	void *addr;		/* base tagged offset == (uintptr_t)addr */
	size_t length;
	uint32_t access;	/* KIWARP_ACCESS_* */
};

struct kw_cq {
	struct kw_device *dev;
	uint32_t handle;
	uint32_t flags;		/* library private */
	struct kw_ring ring;	/* kiwarp_cqe entries; head = our cons */
};

struct kw_qp {
	struct kw_device *dev;
	struct kw_pd *pd;
	struct kw_cq *send_cq;
	struct kw_cq *recv_cq;
	uint32_t handle;
	uint32_t max_sge;
	uint32_t qp_flags;	/* KIWARP_QP_* as created */
	uint32_t flags;		/* library private */
	struct kw_ring sq;	/* kiwarp_wqe entries; head = our prod */
	struct kw_ring rq;	/* kiwarp_wqe entries; head = our prod */
	uint64_t doorbells;	/* doorbell ioctls issued (statistics) */
};

/* ------------------------------------------------------------------ */
/* Work requests                                                      */

/* kw_send_wr.opcode: KIWARP_WR_SEND ... KIWARP_WR_LOCAL_INV */
/* kw_send_wr.flags */
#define KW_SEND_SIGNALED	KIWARP_WR_SIGNALED
#define KW_SEND_FENCE		KIWARP_WR_FENCE

struct kw_send_wr {
	uint64_t wr_id;
	uint8_t opcode;			/* KIWARP_WR_* (not RECV) */
	uint8_t flags;			/* KW_SEND_* */
	uint16_t num_sge;		/* <= QP max_sge; 1 for RDMA Read */
	uint32_t inv_stag;		/* SEND_INV, SEND_SE_INV, LOCAL_INV */
	const struct kiwarp_sge *sg_list;
	uint64_t remote_addr;		/* RDMA Write/Read: remote TO */
	uint32_t rkey;			/* RDMA Write/Read: remote STag */
	uint32_t reserved;
};

struct kw_recv_wr {
	uint64_t wr_id;
	const struct kiwarp_sge *sg_list;
	uint32_t num_sge;
	uint32_t reserved;
};

/* ------------------------------------------------------------------ */
/* Connection management                                              */

struct kw_conn_param {
	uint32_t flags;		/* KIWARP_CONN_* */
	uint8_t mpa_rev;	/* 1 or 2; 0 selects 2 */
	uint8_t rtr;		/* KIWARP_RTR_* (rev 2 + P2P) */
	uint16_t reserved;
	uint32_t ird;		/* inbound RDMA Reads served */
	uint32_t ord;		/* outbound RDMA Reads issued */
	uint32_t timeout_ms;	/* 0: kernel default */
};

/* Result of kw_connect()/kw_accept_reply(): negotiated parameters. */
struct kw_conn_result {
	struct kiwarp_conn_param param;
	uint32_t pdata_len;			/* peer private data length */
	uint8_t pdata[KIWARP_MAX_PRIVATE_DATA];	/* kw_connect only */
};

/* Result of kw_accept(): what the initiator asked for. */
struct kw_conn_request {
	struct kiwarp_conn_param param;
	uint32_t pdata_len;
	uint8_t pdata[KIWARP_MAX_PRIVATE_DATA];
	struct sockaddr_storage peer_addr;
	socklen_t peer_addrlen;
};

struct kw_qp_init_attr {
	struct kw_cq *send_cq;
	struct kw_cq *recv_cq;
	uint32_t sq_entries;
	uint32_t rq_entries;
	uint32_t max_sge;	/* 1..KIWARP_MAX_SGE; 0 selects 1 */
	uint32_t sig_all;	/* non-zero: every send WR is signaled */
	/*
	 * Since 1.1. KW_QP_INIT_COPY_MAX: Sends and RDMA Writes of up to
	 * copy_max bytes are copied into the socket and complete when TCP
	 * has them, larger ones go by reference and complete when acked
	 * (KIWARP_QP_COPY_MAX in <linux/kiwarp.h>); without it the kernel's
	 * default, KIWARP_COPY_MAX_DEFAULT, and the QP copies larger ones
	 * too while the stack copies them anyway (a peer on this host:
	 * KIWARP_QPQ_TX_COPIED in kiwarp_query_qp.flags).
	 */
	uint32_t flags;
	uint32_t copy_max;
};

#define KW_QP_INIT_COPY_MAX	(1U << 0)	/* kw_qp_init_attr.flags */

/* ------------------------------------------------------------------ */
/* Control path (libkiwarp.so)                                        */

int kw_open(struct kw_device **devp);
int kw_open_path(const char *path, struct kw_device **devp);
int kw_close(struct kw_device *dev);
int kw_device_fd(const struct kw_device *dev);
int kw_query(struct kw_device *dev, struct kiwarp_query *attr);

int kw_alloc_pd(struct kw_device *dev, struct kw_pd **pdp);
int kw_dealloc_pd(struct kw_pd *pd);

int kw_reg_mr(struct kw_pd *pd, void *addr, size_t length, uint32_t access,
	      struct kw_mr **mrp);
int kw_dereg_mr(struct kw_mr *mr);

int kw_create_cq(struct kw_device *dev, uint32_t entries, struct kw_cq **cqp);
int kw_destroy_cq(struct kw_cq *cq);
int kw_req_notify_cq(struct kw_cq *cq, int solicited_only);
int kw_wait_cq(struct kw_cq *cq, int timeout_ms);

int kw_create_qp(struct kw_pd *pd, const struct kw_qp_init_attr *attr,
		 struct kw_qp **qpp);
int kw_destroy_qp(struct kw_qp *qp);
int kw_query_qp(struct kw_qp *qp, struct kiwarp_query_qp *attr);
int kw_modify_qp(struct kw_qp *qp, uint32_t action);

int kw_connect(struct kw_qp *qp, int sockfd, const struct kw_conn_param *param,
	       const void *pdata, size_t pdata_len,
	       struct kw_conn_result *result);
int kw_connect_addr(struct kw_qp *qp, const struct sockaddr *addr,
		    socklen_t addrlen, const struct kw_conn_param *param,
		    const void *pdata, size_t pdata_len,
		    struct kw_conn_result *result);
int kw_listen(struct kw_device *dev, const struct sockaddr *addr,
	      socklen_t addrlen, int backlog, struct kw_listener **lp);
int kw_listener_port(const struct kw_listener *l);
int kw_destroy_listener(struct kw_listener *l);
int kw_accept(struct kw_qp *qp, int sockfd, struct kw_listener *l,
	      int timeout_ms, struct kw_conn_request *req);
int kw_accept_reply(struct kw_qp *qp, uint32_t action,
		    const struct kw_conn_param *param,
		    const void *pdata, size_t pdata_len,
		    struct kw_conn_result *result);

int kw_post_send(struct kw_qp *qp, const struct kw_send_wr *wr, unsigned n);
/* Receive WRs are only written to the ring (no system call, since 1.1). */
int kw_post_recv(struct kw_qp *qp, const struct kw_recv_wr *wr, unsigned n);

const char *kw_wc_status_str(unsigned status);
const char *kw_wr_opcode_str(unsigned opcode);
const char *kw_qp_state_str(unsigned state);
const char *kw_term_str(unsigned layer, unsigned etype, unsigned ecode);

/* ------------------------------------------------------------------ */
/* Fast path (inline)                                                 */

/*
 * Barriers. The library uses the C11/GCC atomics on the shared indices:
 * acquire on every load of an index the kernel writes, release on every
 * store of an index the kernel reads.
 */
#define kw_smp_load_acquire(p)	__atomic_load_n((p), __ATOMIC_ACQUIRE)
#define kw_smp_store_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

/* Number of free slots in the send ring (what kw_post_send() can take). */
static inline unsigned kw_sq_space(const struct kw_qp *qp)
{
	/*
	 * Pairs with the kernel's smp_store_release() of SQ cons after it has
	 * copied the WQEs out of the ring: once we see cons, the slots below
	 * it are free to be overwritten.
	 */
	uint32_t cons = kw_smp_load_acquire(qp->sq.cons);

	uint32_t used = qp->sq.head - cons;

	/* A cons beyond our prod is bogus: claim no space. */
	return used > qp->sq.entries ? 0 : qp->sq.entries - used;
}

/* Number of free slots in the receive ring. */
static inline unsigned kw_rq_space(const struct kw_qp *qp)
{
	/* Pairs with the kernel's smp_store_release() of RQ cons. */
	uint32_t cons = kw_smp_load_acquire(qp->rq.cons);

	uint32_t used = qp->rq.head - cons;

	/* A cons beyond our prod is bogus: claim no space. */
	return used > qp->rq.entries ? 0 : qp->rq.entries - used;
}

/* Number of CQEs ready to be polled. */
static inline unsigned kw_cq_ready(const struct kw_cq *cq)
{
	/*
	 * Pairs with the kernel's smp_store_release() of CQ prod in
	 * kw_cq_post(): CQE contents are visible once prod is.
	 */
	uint32_t prod = kw_smp_load_acquire(cq->ring.prod);

	return (uint32_t)(prod - cq->ring.head);
}

/*
 * Copy up to n completions into out[]. Returns the number copied (0 if the
 * CQ is empty) or -EINVAL.
 */
static inline int kw_poll_cq(struct kw_cq *cq, unsigned n,
			     struct kiwarp_cqe *out)
{
	const struct kiwarp_cqe *ring;
	uint32_t head, avail, i;

	if (!cq || (n && !out))
		return -EINVAL;
	ring = (const struct kiwarp_cqe *)cq->ring.entries_base;
	head = cq->ring.head;
	avail = kw_cq_ready(cq);	/* load-acquire of prod, see above */
	if (avail > cq->ring.entries)	/* corrupt: never read beyond ring */
		avail = cq->ring.entries;
	if (n > avail)
		n = avail;
	for (i = 0; i < n; i++)
		memcpy(&out[i], &ring[(head + i) & cq->ring.mask],
		       sizeof(*out));
	if (n) {
		cq->ring.head = head + n;
		/*
		 * Pairs with the kernel's smp_load_acquire() of CQ cons in
		 * kw_cq_post(): our reads of the slots happen before the
		 * kernel may overwrite them.
		 */
		kw_smp_store_release(cq->ring.cons, head + n);
	}
	return (int)n;
}

#ifdef __cplusplus
}
#endif

#endif /* KIWARP_LIB_H */
