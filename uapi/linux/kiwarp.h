/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR BSD-2-Clause) */
/*
 * kiwarp: kernel software iWARP (RDMAP/DDP/MPA over TCP) — user/kernel ABI.
 *
 * OVERVIEW
 *
 * Opening /dev/kiwarp gives a *context*. Every object (protection domain,
 * memory region, completion queue, queue pair, listener) belongs to the
 * context that created it and is named by a __u32 handle that is only
 * meaningful within that context. Closing the file descriptor (or process
 * death) destroys every object of the context, flushes outstanding work and
 * unpins all registered memory.
 *
 * All structures have fixed-size fields and are 64-bit aligned; pointers
 * travel as __u64. Every field named "reserved"/"pad" and every flag bit not
 * defined here must be zero, or the ioctl fails with -EINVAL. Every ioctl
 * returns 0 or -1 with errno set (the library turns that into -errno).
 *
 * COMMANDS
 *
 * KIWARP_IOC_QUERY         Limits and the feature bitmask (KIWARP_FEAT_*).
 *                          User space must test feature bits before using an
 *                          extension; abi_version is KIWARP_ABI_VERSION.
 * KIWARP_IOC_ALLOC_PD      Allocate a protection domain.
 * KIWARP_IOC_DEALLOC_PD    Free a PD. -EBUSY while MRs or QPs use it.
 * KIWARP_IOC_REG_MR        Pin [addr, addr+length) of the caller's memory
 *                          (charged to RLIMIT_MEMLOCK unless CAP_IPC_LOCK) and
 *                          return an STag. With KIWARP_ACCESS_LOCAL_WRITE,
 *                          shared file mappings of a file system that
 *                          writes back fail with -EOPNOTSUPP (anonymous
 *                          memory, memfd/shmem and tmpfs are fine). The STag is both the local key
 *                          (lkey, used in scatter/gather entries) and the
 *                          remote key (advertised to the peer). Its value is
 *                          unpredictable. Tagged offsets are virtual addresses
 *                          (TO == addr of the first byte). Access bits:
 *                          KIWARP_ACCESS_*. Remote write requires local write.
 * KIWARP_IOC_DEREG_MR      Invalidate and unpin. -EBUSY while a work request
 *                          in flight still references it (retry after its
 *                          completion). Deregistration revokes remote access
 *                          at once (RFC 5042): when it returns, no byte of
 *                          the region is read or written any more, also not
 *                          for RDMA Reads the peer already queued (those
 *                          end with a Terminate, invalid STag). A Local
 *                          Invalidate or a Send with Invalidate revokes the
 *                          same way before its completion is reported.
 * KIWARP_IOC_CREATE_CQ     Create a completion queue ring of at least
 *                          `entries` CQEs; returns its mmap geometry.
 *                          Ring memory (CQ, SQ, RQ) is charged to the
 *                          opener's RLIMIT_MEMLOCK and the creator's memory
 *                          cgroup until it is freed: a ring still mapped
 *                          after its CQ/QP was destroyed stays charged until
 *                          munmap. -ENOMEM past the limit.
 * KIWARP_IOC_DESTROY_CQ    -EBUSY while a QP uses it.
 * KIWARP_IOC_ARM_CQ        Request a wakeup (POLLIN on the context fd) at the
 *                          next completion (or next solicited one).
 * KIWARP_IOC_CREATE_QP     Create a queue pair (send + receive ring) in a PD
 *                          bound to two CQs; returns its mmap geometry.
 *                          The QP starts in KIWARP_QPS_IDLE.
 * KIWARP_IOC_DESTROY_QP    Close the connection (abortively if WRs are in
 *                          flight), flush, free.
 * KIWARP_IOC_CONNECT       MPA initiator: turn a connected TCP socket into an
 *                          iWARP stream (sockfd >= 0), or let the kernel
 *                          connect to `addr` (sockfd == -1). Sends the MPA
 *                          Request with the given private data, waits for the
 *                          Reply (up to timeout_ms), returns the peer's
 *                          private data and the negotiated parameters. QP goes
 *                          to RTS. -ECONNREFUSED if the peer rejected (its
 *                          private data is still returned), -ETIMEDOUT,
 *                          -EPROTO on a malformed reply.
 * KIWARP_IOC_ACCEPT        MPA responder, step 1: take a connected socket
 *                          (sockfd >= 0) or the next connection of a listener
 *                          (listen_handle, sockfd == -1), read the MPA Request
 *                          and return its private data and parameters. The QP
 *                          waits in KIWARP_QPS_MPA_REQ_RCVD.
 * KIWARP_IOC_ACCEPT_REPLY  MPA responder, step 2: accept (send the Reply with
 *                          private data, QP to RTS) or reject (Reply with the
 *                          Reject flag, close, QP to ERROR).
 * KIWARP_IOC_LISTEN        Kernel listening TCP socket on `addr`, in the
 *                          caller's network namespace (see SOCKETS).
 * KIWARP_IOC_DESTROY_LISTEN
 * KIWARP_IOC_QP_DOORBELL   Consume newly produced send (and receive) ring
 *                          entries. The kernel never trusts a ring index
 *                          written by user space: it keeps its own copy and
 *                          fails the QP (to ERROR, -EINVAL) if the producer
 *                          index moved backwards or claims more entries than
 *                          the ring holds.
 * KIWARP_IOC_QUERY_QP      QP state, negotiated parameters, the last
 *                          Terminate sent and received (layer/type/code).
 * KIWARP_IOC_MODIFY_QP     Move the QP to ERROR (flush) or start an orderly
 *                          close. The peer's TCP FIN between messages
 *                          starts one too (half-close, RFC 5041 6.2.1):
 *                          state CLOSING, posted receives and Reads that
 *                          can no longer be answered flushed, the rest
 *                          still sent; a FIN mid-message: ERROR.
 *
 * SOCKETS
 *
 * CONNECT/ACCEPT with a socket fd take a reference on the socket: the fd
 * may be closed afterwards. While the QP owns the socket, the bytes belong
 * to the iWARP stream: on the fd, read/write/send/recv, sendfile/splice,
 * connect, listen, shutdown, setsockopt and the zerocopy getsockopt fail
 * with -EBUSY (poll, getsockopt, getpeername still work), and so does
 * accept if a listen() issued before CONNECT/ACCEPT took the socket got
 * through. Socket-level options (SOL_SOCKET) still work: kiwarp sets its
 * own send/receive timeouts for the MPA exchange and none afterwards, and
 * a DESTROY_QP ends an exchange whatever the timeouts. DESTROY_QP gives
 * the socket back, shut down. The socket must be a connected TCP socket
 * (-ENOTSOCK, -EINVAL, -ENOTCONN otherwise) not claimed by another QP or
 * kernel user and without a ULP such as kTLS (-EBUSY).
 *
 * Sockets kiwarp creates (CONNECT by address, LISTEN, what a listener
 * accepts) are the caller's: they live in its network namespace (and keep
 * it alive), are charged to its memory cgroup, pass its cgroup-BPF socket
 * programs, and count against its RLIMIT_NOFILE per user (-EMFILE), though
 * they use no descriptor. The sockets CONNECT and LISTEN create pass the
 * LSM socket creation checks; accepted ones, like any accept(), do not
 * (and the LSM accept hook is not run either). The LISTEN backlog is
 * capped at net.core.somaxconn. With the module parameter kernel_cm=0 (for
 * hosts whose network policy relies on LSM bind/connect/listen/accept
 * hooks or seccomp, which a module cannot apply), CONNECT by address and
 * LISTEN need CAP_NET_ADMIN in the initial user namespace (-EPERM).
 * CONNECT and ACCEPT wait for the TCP connection interruptibly; a
 * DESTROY_QP meanwhile makes them fail with -EINVAL (an ACCEPT waiting on
 * a listener within 100 ms; a CONNECT when its TCP connect returns), and
 * so does a DESTROY_LISTEN for the ACCEPTs on that listener. With MPA revision 2 the 4-byte IRD/ORD field travels inside
 * the private data, so at most 508 bytes of ULP private data fit
 * (-EMSGSIZE). On -ECONNREFUSED the structure is still copied back:
 * peer_private_data_len and the peer's private data are valid.
 *
 * EVENTS
 *
 * poll() on the context fd reports POLLIN while an armed CQ has fired;
 * read() returns the handles of the CQs that fired, one __u32 each (the
 * count must be a multiple of 4, else -EINVAL; blocks unless O_NONBLOCK,
 * then -EAGAIN). A CQ is reported once per arming.
 *
 * RINGS (mmap)
 *
 * Each ring is mapped with mmap(fd, offset = *_mmap_offset, length =
 * *_mmap_size). Within the mapping, the producer index is a __u32 at
 * `prod_off`, the consumer index a __u32 at `cons_off`, and `entries`
 * (a power of two) entries start at `ring_off`. Indices are free-running
 * (wrap at 2^32); the slot of index i is i & (entries - 1).
 *  - SQ / RQ: user space produces struct kiwarp_wqe entries and stores prod
 *    with release semantics. The kernel copies an entry when it sees it
 *    but advances cons (release) only when that work request has
 *    completed, before publishing its CQE: the ring depth bounds the work
 *    requests outstanding, and a slot is free once its CQE is visible.
 *    mmap offsets exceed 32 bits: 32-bit programs need a 64-bit off_t.
 *  - CQ: the kernel produces struct kiwarp_cqe entries and stores prod with
 *    release semantics; user space stores cons. A CQ that overran stays in
 *    error: the QP whose completion did not fit goes to ERROR at once, and
 *    every other QP bound to the CQ at its next completion.
 * Rings are mapped shared, never executable (PROT_EXEC: -EPERM).
 */
#ifndef _UAPI_LINUX_KIWARP_H
#define _UAPI_LINUX_KIWARP_H

#include <linux/types.h>
#include <linux/ioctl.h>

#define KIWARP_ABI_VERSION	1
#define KIWARP_DEVICE_NAME	"kiwarp"

/* Feature bits reported by KIWARP_IOC_QUERY. */
#define KIWARP_FEAT_MPA_REV1		(1ULL << 0)
#define KIWARP_FEAT_MPA_REV2		(1ULL << 1)	/* RFC 6581 */
#define KIWARP_FEAT_CRC			(1ULL << 2)
#define KIWARP_FEAT_RTR_SEND		(1ULL << 3)
#define KIWARP_FEAT_RTR_WRITE		(1ULL << 4)
#define KIWARP_FEAT_RTR_READ		(1ULL << 5)
#define KIWARP_FEAT_SOCKET_CONVERT	(1ULL << 6)
#define KIWARP_FEAT_KERNEL_CM		(1ULL << 7)	/* CONNECT/LISTEN by addr */
#define KIWARP_FEAT_ZCOPY_TX		(1ULL << 8)
#define KIWARP_FEAT_DIRECT_RX		(1ULL << 9)
/* the kernel carries patches/ (tcp_set_ofo_hook()) and the module uses it
 * (module parameter tcp_hooks): out-of-order placement, KIWARP_QPQ_OOO */
#define KIWARP_FEAT_TCP_HOOKS		(1ULL << 10)
#define KIWARP_FEAT_MARKERS		(1ULL << 11)

struct kiwarp_query {
	__u32 abi_version;
	__u32 page_size;
	__aligned_u64 features;
	__aligned_u64 max_mr_size;
	__u32 max_qp;
	__u32 max_cq;
	__u32 max_mr;
	__u32 max_pd;
	__u32 max_qp_wr;
	__u32 max_cqe;
	__u32 max_sge;
	__u32 max_ird;
	__u32 max_ord;
	__u32 max_private_data;		/* 512 (RFC 5044) */
	__u32 max_inline;		/* 0: no inline data */
	__u32 reserved0;
	__aligned_u64 reserved[4];
};

struct kiwarp_handle {
	__u32 handle;	/* out for ALLOC_*, in for DEALLOC/DEREG/DESTROY */
	__u32 reserved;
};

/* Memory access rights (struct kiwarp_reg_mr.access). */
#define KIWARP_ACCESS_LOCAL_WRITE	(1U << 0)
#define KIWARP_ACCESS_REMOTE_WRITE	(1U << 1)
#define KIWARP_ACCESS_REMOTE_READ	(1U << 2)
#define KIWARP_ACCESS_ALL		(KIWARP_ACCESS_LOCAL_WRITE | \
					 KIWARP_ACCESS_REMOTE_WRITE | \
					 KIWARP_ACCESS_REMOTE_READ)

struct kiwarp_reg_mr {
	__u32 pd;		/* in */
	__u32 access;		/* in: KIWARP_ACCESS_* */
	__aligned_u64 addr;	/* in: user virtual address, also the base TO */
	__aligned_u64 length;	/* in: bytes, > 0 */
	__u32 handle;		/* out */
	__u32 stag;		/* out: lkey == rkey */
	__aligned_u64 reserved;
};

struct kiwarp_create_cq {
	__u32 entries;		/* in: minimum number of CQEs */
	__u32 handle;		/* out */
	__u32 ring_entries;	/* out: power of two >= entries */
	__u32 prod_off;		/* out */
	__u32 cons_off;		/* out */
	__u32 ring_off;		/* out */
	__aligned_u64 mmap_offset;	/* out */
	__aligned_u64 mmap_size;	/* out */
	__aligned_u64 reserved;
};

#define KIWARP_ARM_NEXT		0	/* any completion */
#define KIWARP_ARM_SOLICITED	1	/* solicited or error completion */

struct kiwarp_arm_cq {
	__u32 cq;
	__u32 flags;		/* KIWARP_ARM_* */
};

/* One ring's geometry, as returned for SQ and RQ. */
struct kiwarp_ring_info {
	__u32 ring_entries;
	__u32 prod_off;
	__u32 cons_off;
	__u32 ring_off;
	__aligned_u64 mmap_offset;
	__aligned_u64 mmap_size;
};

struct kiwarp_create_qp {
	__u32 pd;		/* in */
	__u32 send_cq;		/* in */
	__u32 recv_cq;		/* in */
	__u32 sq_entries;	/* in: minimum send WRs outstanding */
	__u32 rq_entries;	/* in: minimum receive WRs outstanding */
	__u32 max_sge;		/* in: <= KIWARP_MAX_SGE */
	__u32 flags;		/* in: KIWARP_QP_* */
	__u32 handle;		/* out */
	struct kiwarp_ring_info sq;	/* out */
	struct kiwarp_ring_info rq;	/* out */
	__u32 copy_max;		/* in, with KIWARP_QP_COPY_MAX: see below */
	__u32 reserved;
};

#define KIWARP_QP_SIGNAL_ALL	(1U << 0)	/* every SQ WR completes */
/*
 * Completion of Sends and RDMA Writes. A message of at most copy_max
 * payload bytes is copied into the socket and its WR completes as soon as
 * TCP has all of it: the buffer may be reused at once. A larger one goes
 * to TCP by page reference (zero copy) and its WR completes once TCP saw
 * all of it acknowledged by the peer, when the pages are no longer read.
 * Either way a completion says the buffer is free, not that the data was
 * placed at the peer (RFC 5040); to a kiwarp QP on this host it does say
 * so (KIWARP_QPQ_TX_LOCAL). Without KIWARP_QP_COPY_MAX, copy_max
 * must be 0 and the QP uses KIWARP_COPY_MAX_DEFAULT; with it, copy_max
 * is taken as given (0: every message by reference). Without it, the QP
 * also copies every message while the stack copies pages sent by
 * reference anyway (KIWARP_QPQ_TX_COPIED in QUERY_QP).
 */
#define KIWARP_QP_COPY_MAX	(1U << 1)
#define KIWARP_COPY_MAX_DEFAULT	16384

/*
 * struct kiwarp_conn_param.flags. MPA CRC is on by default (RFC 5044
 * section 4.4: "The default configuration for a connection MUST be to use
 * CRCs"): a Request and a Reply carry C unless KIWARP_CONN_NO_CRC declines
 * it, and even then CRC is on when the peer's frame has C (section
 * 7.1.1). KIWARP_CONN_CRC asks for what is the default (kept for
 * callers written before); both together are -EINVAL. In results, CRC
 * says whether the connection runs with CRC.
 */
#define KIWARP_CONN_CRC		(1U << 0)	/* MPA CRC (the default) */
#define KIWARP_CONN_P2P		(1U << 1)	/* rev 2 peer-to-peer RTR */
#define KIWARP_CONN_MARKERS	(1U << 2)	/* MPA markers: see below */
#define KIWARP_CONN_NO_CRC	(1U << 3)	/* explicit opt-out of CRC */
/*
 * MPA markers (RFC 5044 section 5), negotiated for each direction on its
 * own: KIWARP_CONN_MARKERS in a connect, listen or accept sets M in our
 * Request or Reply, asking the peer to put markers in the FPDUs it sends
 * us; the peer's M asks the same of us, and kiwarp always honours it. In
 * results (events, QUERY_QP), KIWARP_CONN_MARKERS says the peer's FPDUs
 * carry markers, KIWARP_CONN_MARKERS_TX (results only; -EINVAL as input)
 * that ours do; in a responder's view of the Request, MARKERS_TX says the
 * initiator asks for them (accepting puts them in our FPDUs; reject to
 * refuse). An FPDU with markers is copied into the socket whatever
 * its size (copy_max does not apply), and its MULPDU leaves room for
 * them. A peer that cannot send markers (upstream siw) rejects a Request
 * with M (the connect fails with ECONNREFUSED) or fails on a Reply with M.
 */
#define KIWARP_CONN_MARKERS_TX	(1U << 4)

/* RTR frame type, struct kiwarp_conn_param.rtr (rev 2, P2P only) */
#define KIWARP_RTR_NONE		0
#define KIWARP_RTR_SEND		1	/* zero-length Send */
#define KIWARP_RTR_WRITE	2	/* zero-length RDMA Write */
#define KIWARP_RTR_READ		3	/* zero-length RDMA Read */

#define KIWARP_MAX_PRIVATE_DATA	512

/*
 * Connection parameters. As input: what this side asks for / offers.
 * As output (struct kiwarp_connect/accept .result): what was negotiated.
 */
struct kiwarp_conn_param {
	__u32 flags;		/* KIWARP_CONN_* */
	__u8 mpa_rev;		/* 1 or 2 */
	__u8 rtr;		/* KIWARP_RTR_* */
	__u16 reserved0;
	__u32 ird;		/* inbound RDMA Reads this side serves */
	__u32 ord;		/* outbound RDMA Reads this side issues */
};

struct kiwarp_sockaddr {
	__u16 family;		/* AF_INET or AF_INET6 */
	__u16 port;		/* network byte order */
	__u32 flowinfo;		/* IPv6 only, else 0 */
	__u8 addr[16];		/* IPv4 in the first 4 bytes */
	__u32 scope_id;		/* IPv6 only, else 0 */
	__u32 reserved;
};

/* peer_ird/peer_ord of a peer whose MPA frame carried none (not enhanced) */
#define KIWARP_IRD_ORD_UNKNOWN	0xffff

struct kiwarp_connect {
	__u32 qp;			/* in */
	__s32 sockfd;			/* in: connected TCP socket, or -1 */
	struct kiwarp_sockaddr addr;	/* in: if sockfd == -1 */
	struct kiwarp_conn_param param;	/* in */
	__u32 timeout_ms;		/* in: 0 = default (10 s) */
	__u32 private_data_len;		/* in: <= 512 */
	__aligned_u64 private_data;	/* in: pointer */
	__aligned_u64 peer_private_data;	/* in: pointer to 512 bytes,
						 * or 0: only the length is
						 * reported */
	__u32 peer_private_data_len;	/* out */
	__u32 reserved0;
	struct kiwarp_conn_param result;	/* out */
	/* out, with the Reply's private data (on success and on
	 * -ECONNREFUSED): the IRD and ORD of an enhanced Reply as sent
	 * (RFC 6581 section 9.1; 0x3FFF = no negotiation), both
	 * KIWARP_IRD_ORD_UNKNOWN if the Reply was not enhanced. 0 on input. */
	__u16 peer_ird;
	__u16 peer_ord;
	__u32 reserved;
};

struct kiwarp_accept {
	__u32 qp;			/* in */
	__s32 sockfd;			/* in: connected TCP socket, or -1 */
	__u32 listen_handle;		/* in: if sockfd == -1 */
	__u32 timeout_ms;		/* in: 0 = no timeout for accept, 10 s
					 * for the MPA Request */
	__aligned_u64 peer_private_data;	/* in: pointer to 512 bytes,
						 * or 0 (length only) */
	__u32 peer_private_data_len;	/* out */
	__u32 reserved0;
	struct kiwarp_conn_param peer;	/* out: what the initiator asked */
	struct kiwarp_sockaddr peer_addr;	/* out */
	__aligned_u64 reserved;
};

#define KIWARP_REPLY_ACCEPT	0
#define KIWARP_REPLY_REJECT	1

struct kiwarp_accept_reply {
	__u32 qp;			/* in */
	__u32 action;			/* in: KIWARP_REPLY_* */
	struct kiwarp_conn_param param;	/* in: this side's offer */
	__u32 private_data_len;		/* in */
	__u32 reserved0;
	__aligned_u64 private_data;	/* in: pointer */
	struct kiwarp_conn_param result;	/* out: negotiated */
	__aligned_u64 reserved;
};

struct kiwarp_listen {
	struct kiwarp_sockaddr addr;	/* in; port 0 picks one */
	__u32 backlog;			/* in */
	__u32 handle;			/* out */
	__u16 port;			/* out: bound port, network order */
	__u16 reserved0;
	__u32 reserved1;
};

/* QP states */
#define KIWARP_QPS_IDLE			0
#define KIWARP_QPS_MPA_REQ_RCVD		1
#define KIWARP_QPS_RTS			2
#define KIWARP_QPS_CLOSING		3
#define KIWARP_QPS_TERMINATE		4
#define KIWARP_QPS_ERROR		5

/* Terminate information, RFC 5040 section 7.2 / 8.2 */
struct kiwarp_term_info {
	__u8 valid;	/* 1 if a Terminate was sent/received */
	__u8 layer;	/* KIWARP_TERM_LAYER_* */
	__u8 etype;	/* error type */
	__u8 ecode;	/* error code */
};

#define KIWARP_TERM_LAYER_RDMAP		0
#define KIWARP_TERM_LAYER_DDP		1
#define KIWARP_TERM_LAYER_LLP		2	/* MPA */

struct kiwarp_query_qp {
	__u32 qp;			/* in */
	__u32 state;			/* out: KIWARP_QPS_* */
	struct kiwarp_conn_param param;	/* out: negotiated */
	struct kiwarp_term_info term_sent;	/* out */
	struct kiwarp_term_info term_rcvd;	/* out */
	__u32 mulpdu;			/* out: bytes of ULPDU per FPDU */
	__u32 copy_max;			/* out: see KIWARP_QP_COPY_MAX */
	__aligned_u64 tx_bytes;		/* out: payload bytes sent */
	__aligned_u64 rx_bytes;		/* out: payload bytes placed */
	/* out: the IRD and ORD the peer sent in its enhanced MPA frame
	 * (RFC 6581 section 9.1; 0x3FFF = no negotiation), both
	 * KIWARP_IRD_ORD_UNKNOWN if it was not enhanced (0 before the
	 * connection). 0 on input, like reserved. */
	__u16 peer_ird;
	__u16 peer_ord;
	__u32 flags;			/* out: KIWARP_QPQ_*; 0 on input */
	/* out: payload bytes that were placed out of order, ahead of the
	 * in-order stream, and that the in-order pass then found in place
	 * and did not copy again (KIWARP_QPQ_OOO). rx_bytes counts the bytes
	 * it placed itself: together, every payload byte received once.
	 * 0 on input */
	__aligned_u64 ooo_bytes;
};

/*
 * struct kiwarp_query_qp.flags. TX_COPIED: the stack lately copied the
 * pages of a message this QP sent by reference before letting them go (the
 * receiver is on this host: loopback, veth; a packet socket on the
 * device), so zero copy does not pay on this connection. A QP created
 * without KIWARP_QP_COPY_MAX then copies every Send and RDMA Write
 * (completing as a copied message does). "Lately": for a second after the
 * first such report; then one message goes by reference again to see, and
 * each probe that finds the pages copied again doubles the time, up to
 * 64 s. What one QP is told holds for the other QPs of its context (one
 * open of the device) to the same peer address, through the same bound
 * device, in the same network namespace: they copy for about the same
 * while, even those that never sent by reference themselves, and report
 * TX_COPIED too. On a QP created with KIWARP_QP_COPY_MAX the flag is only
 * information.
 */
#define KIWARP_QPQ_TX_COPIED	(1U << 0)
/*
 * OOO: the QP places tagged data (RDMA Write, Read Response) that TCP holds
 * out of order as soon as it arrives (KIWARP_FEAT_TCP_HOOKS, markers on the
 * peer's FPDUs, or CRC with the module parameter ooo_aligned:
 * Documentation/architecture.md, "Out-of-order placement").
 */
#define KIWARP_QPQ_OOO		(1U << 1)
/*
 * TX_LOCAL: the QP's last Send or RDMA Write above copy_max went by page
 * reference to a kiwarp QP on this host (loopback), whose receive places
 * it straight from the sender's pages: one copy in all, where the stack
 * would copy pages sent with zero copy once more (TX_COPIED). That needs
 * FPDUs of at least 4 KiB (a path MTU above about 4.2 KB; with smaller
 * ones the message is copied). Such a WR completes once TCP saw it
 * acknowledged and the peer's receive has taken all of it out of its
 * socket: the buffer may be reused then. A failed one (flushed) too, or
 * once the connection is reset or closed. Not with markers, nor to an
 * extended socket (IWARP_MODE), whose reader copies later; x86 only.
 */
#define KIWARP_QPQ_TX_LOCAL	(1U << 2)

#define KIWARP_MODIFY_ERROR	1	/* to ERROR: flush everything */
#define KIWARP_MODIFY_CLOSE	2	/* orderly close once the SQ drained and
					 * owed Read Responses went out */

struct kiwarp_modify_qp {
	__u32 qp;
	__u32 action;	/* KIWARP_MODIFY_* */
};

/* ---------------------------------------------------------------------- */
/* Ring entries                                                           */

#define KIWARP_MAX_SGE	6

struct kiwarp_sge {
	__aligned_u64 addr;	/* virtual address inside the MR */
	__u32 length;
	__u32 lkey;		/* STag of the local MR */
};

/* Send queue opcodes (struct kiwarp_wqe.opcode) */
#define KIWARP_WR_SEND			0
#define KIWARP_WR_SEND_SE		1	/* with Solicited Event */
#define KIWARP_WR_SEND_INV		2	/* with Invalidate (ex.inv_stag) */
#define KIWARP_WR_SEND_SE_INV		3
#define KIWARP_WR_RDMA_WRITE		4
#define KIWARP_WR_RDMA_READ		5	/* one SGE: the local sink */
#define KIWARP_WR_LOCAL_INV		6	/* ex.inv_stag, no SGE */
#define KIWARP_WR_RECV			7	/* receive queue entries */

/* struct kiwarp_wqe.flags */
#define KIWARP_WR_SIGNALED	(1U << 0)	/* produce a CQE on success */
#define KIWARP_WR_FENCE		(1U << 1)	/* wait for prior RDMA Reads */

/* 128 bytes. Used for the send and the receive ring. */
struct kiwarp_wqe {
	__aligned_u64 wr_id;
	__u8 opcode;
	__u8 flags;
	__u8 num_sge;
	__u8 reserved0;
	__u32 inv_stag;		/* SEND_INV*, LOCAL_INV */
	__aligned_u64 remote_addr;	/* RDMA WRITE/READ: remote TO */
	__u32 rkey;		/* RDMA WRITE/READ: remote STag */
	__u32 reserved1;
	struct kiwarp_sge sge[KIWARP_MAX_SGE];
};

/* Completion status (struct kiwarp_cqe.status) */
#define KIWARP_WC_SUCCESS		0
#define KIWARP_WC_LOC_LEN_ERR		1	/* receive buffer too small */
#define KIWARP_WC_LOC_QP_OP_ERR		2	/* malformed WR */
#define KIWARP_WC_LOC_PROT_ERR		3	/* bad lkey / local access */
#define KIWARP_WC_WR_FLUSH_ERR		4	/* flushed: QP in ERROR */
#define KIWARP_WC_REM_ACCESS_ERR	5	/* peer: bad STag/bounds/rights */
#define KIWARP_WC_REM_OP_ERR		6	/* peer: other Terminate */
#define KIWARP_WC_REM_INV_REQ_ERR	7	/* peer: invalid request */
#define KIWARP_WC_FATAL_ERR		8	/* connection lost / LLP error */
#define KIWARP_WC_BAD_RESP_ERR		9	/* unexpected response */

/* struct kiwarp_cqe.flags */
#define KIWARP_WC_WITH_INV	(1U << 0)	/* inv_stag was invalidated */
#define KIWARP_WC_SOLICITED	(1U << 1)	/* received Send with SE */

/* 32 bytes */
struct kiwarp_cqe {
	__aligned_u64 wr_id;
	__u8 opcode;		/* KIWARP_WR_* of the completed WR */
	__u8 status;		/* KIWARP_WC_* */
	__u8 flags;		/* KIWARP_WC_* flags */
	__u8 reserved0;
	__u32 byte_len;		/* RECV: bytes placed; READ: bytes read */
	__u32 qp;		/* QP handle */
	__u32 inv_stag;		/* with KIWARP_WC_WITH_INV */
	struct kiwarp_term_info term;	/* Terminate behind an error status */
	__u32 reserved1;
};

/* ---------------------------------------------------------------------- */
/* Extended sockets (Documentation/extended-sockets.md)                   */
/*
 * A connected TCP socket carries its byte stream over iWARP, in rsockets'
 * stream protocol, and keeps its fd:
 *
 *	setsockopt(fd, SOL_TCP, TCP_ULP, KIWARP_ULP_NAME, 6);
 *	int mode = IWARP_MODE_AUTO;
 *	setsockopt(fd, SOL_IWARP, IWARP_MODE, &mode, sizeof(mode));
 *
 * The ULP may also be set on a listening socket: the connections accepted
 * from it wear it too. IWARP_MODE runs the MPA exchange on the connection:
 * blocking on a blocking socket; on an O_NONBLOCK one it returns
 * EINPROGRESS and the exchange runs in the background (reads and writes
 * EAGAIN until done, then POLLOUT, or POLLERR and SO_ERROR on failure;
 * EALREADY or EAGAIN while it runs). AUTO is the MPA responder on a
 * connection accepted from a listener with the ULP and the initiator
 * otherwise; ACTIVE and PASSIVE choose.
 * IWARP_CRC, set before IWARP_MODE, may decline MPA CRC.
 * Both ends must switch. On failure the connection is shut down and the
 * error returned (ETIMEDOUT, ECONNREFUSED, EPROTO, ECONNRESET...); the
 * fd can then only be closed. There is no way back to plain TCP.
 */
#define KIWARP_ULP_NAME		"kiwarp"
#define SOL_IWARP		0x4b57	/* setsockopt() level */

#define IWARP_MODE		1	/* int: set IWARP_MODE_*, get 0/1 */
#define IWARP_INFO		2	/* struct iwarp_info (get only) */
/*
 * int, before IWARP_MODE: 1 (the default) asks for MPA CRC, as RFC 5044
 * wants by default; 0 declines it, which the peer may overrule (CRC is on
 * when either end asks). IWARP_INFO's crc says what was agreed. On a
 * connection (an accepted one too), not on a listening socket (EINVAL).
 */
#define IWARP_CRC		3
/*
 * One-sided writes, as rsockets' riomap()/riowrite() and wire-compatible
 * with them (Documentation/extended-sockets.md, "One-sided writes"):
 *
 * IWARP_IOMAP_SIZE  int, before IWARP_MODE, on a connection (EINVAL on a
 *                   listener): how many regions, 0 (the default) .. 128,
 *                   the peer may map for this side's riowrite()s.
 * IWARP_IOMAP       set, struct iwarp_iomap, on a running stream (one
 *                   still switching is waited for): pin [addr, addr + len)
 *                   and let the peer RDMA-Write it at offsets [offset,
 *                   offset + len) (prot PROT_WRITE), or RDMA-Read it
 *                   (PROT_READ, a kiwarp extension), or both. The
 *                   peer learns of it by an entry of its iomap table and
 *                   a message, sent at once when a credit allows, else by
 *                   the next call on the socket. ENOMEM when the peer's
 *                   table is full (or it offered none), as rsockets says;
 *                   pinned memory counts against RLIMIT_MEMLOCK.
 * IWARP_IOUNMAP     set, struct iwarp_iomap (addr and len of a mapping,
 *                   the rest 0): unpin it. The peer is not told (as in
 *                   rsockets): its later writes there end the connection
 *                   with a Terminate.
 * IWARP_IOWRITE     control message type (level SOL_IWARP) of sendmsg():
 *                   a __u64 offset into the peer's mappings. The bytes go
 *                   by RDMA Write straight into the peer's memory at that
 *                   offset; nobody is told. Returns the bytes written,
 *                   fewer at the end of a mapping; EINVAL if no mapping
 *                   of the peer holds offset. Ordered with the stream:
 *                   bytes written to the stream after it arrive after.
 * IWARP_IOREAD      get, struct iwarp_ioread (in: addr, len, offset; out:
 *                   done): RDMA-Read up to len bytes of the peer's mapping
 *                   at offset straight into [addr, addr + len), waiting
 *                   for them, non-blocking sockets too (SO_RCVTIMEO, a
 *                   fatal signal or another thread's shutdown() ends the
 *                   wait and resets the connection). EPIPE once either
 *                   side is closing. done: the bytes read, fewer at
 *                   the end of the mapping or past 4 MiB. The peer's
 *                   mapping must allow reads (kiwarp peers only: rsockets
 *                   maps for writes, and a Read there is a Terminate).
 */
#define IWARP_IOMAP_SIZE	4
#define IWARP_IOMAP		5
#define IWARP_IOUNMAP		6
#define IWARP_IOWRITE		7
#define IWARP_IOREAD		8
#define IWARP_IOMAP_MAX		128
#define IWARP_IOREAD_MAX	(4 << 20)
/*
 * Zero-copy sends from registered memory (Documentation/extended-sockets.md,
 * "Zero-copy sends"), with Linux's MSG_ZEROCOPY interface:
 *
 * IWARP_MREG        set, struct iwarp_mreg, on a running stream (one still
 *                   switching is waited for): pin [addr, addr + len) and
 *                   register it as a source of this stream's sends;
 *                   pinned memory counts against RLIMIT_MEMLOCK. At most
 *                   IWARP_MREG_MAX per socket (ENOSPC past it).
 * IWARP_MDEREG      set, struct iwarp_mreg (addr and len of a registration):
 *                   unpin it; EBUSY while a send from it is in flight
 *                   (until its notification).
 *
 * With SO_ZEROCOPY on, send(MSG_ZEROCOPY) of bytes that lie inside one
 * registration (one iovec) goes to the peer by RDMA Write straight from
 * those pages: the buffer must not change until the call's notification
 * arrives. Notifications are Linux's: on the socket's error queue
 * (recvmsg(MSG_ERRQUEUE), poll's POLLERR), a struct sock_extended_err
 * with ee_origin SO_EE_ORIGIN_ZEROCOPY and the range [ee_info, ee_data]
 * of the calls done, counted from 0 per socket, one per call that sent
 * bytes. Bytes that are not registered, or a one-sided write, are copied
 * instead and notified with ee_code SO_EE_CODE_ZEROCOPY_COPIED, in the
 * order of the calls. At most 64 calls may wait for their notification
 * (or for room for it on the error queue, charged to SO_RCVBUF): then
 * MSG_ZEROCOPY sends fail with ENOBUFS until the application reads its
 * error queue, as with Linux's optmem limit.
 */
#define IWARP_MREG		9
#define IWARP_MDEREG		10
#define IWARP_MREG_MAX		64
/*
 * Zero-copy receive into registered memory (Documentation/extended-sockets.md,
 * "Zero-copy receives"): the peer RDMA-Writes the stream's bytes straight
 * into the application's buffer, which is advertised to it in place of the
 * receive buffer (rsockets' target SGL, so rsockets peers fill it too).
 *
 * IWARP_RECV_ZC       get, struct iwarp_recv_zc (in: addr, len, id; out:
 *                     pre), on a running stream: the next len bytes of the
 *                     stream go to [addr, addr + len), which must lie
 *                     inside one IWARP_MREG registration of the caller's.
 *                     The first pre of them are already on their way
 *                     through the receive buffer: the caller takes them
 *                     with recv() as usual (a read stops there, and the
 *                     bytes after the buffer's share wait until it is
 *                     full). The other len - pre arrive in place. One at a
 *                     time (EBUSY). EAGAIN when none would arrive in place
 *                     (len <= pre, or the peer sends no more): receive
 *                     them with recv(). Pinned memory counts against
 *                     RLIMIT_MEMLOCK. At most IWARP_RECV_ZC_MAX bytes.
 * IWARP_RECV_ZC_DONE  get, struct iwarp_recv_zc_done: EAGAIN until the
 *                     buffer's share is full, or the stream ends (bytes:
 *                     what arrived in place) or fails (error); then the
 *                     result, once, and the peer can no longer write into
 *                     the buffer. POLLIN when it is ready. ENOENT if none
 *                     was posted.
 * IWARP_RECV_ZC_CANCEL set, no argument: forget the posted one. If it had
 *                     been advertised and was not full, the peer may still
 *                     write into it: the connection is reset (ECANCELED),
 *                     as close() and shutdown(SHUT_RD) reset it then.
 * The peer is given a TO of the buffer's own registration, not its address.
 */
#define IWARP_RECV_ZC		11
#define IWARP_RECV_ZC_DONE	12
#define IWARP_RECV_ZC_CANCEL	13
#define IWARP_RECV_ZC_MAX	(1U << 30)

struct iwarp_mreg {
	__aligned_u64 addr;
	__aligned_u64 len;
	__u32 flags;		/* 0 */
	__u32 reserved;		/* 0 */
};

struct iwarp_recv_zc {
	__aligned_u64 addr;	/* in: where the bytes go */
	__aligned_u64 len;	/* in: how many, all of them (MSG_WAITALL) */
	__aligned_u64 id;	/* in: returned by IWARP_RECV_ZC_DONE */
	__aligned_u64 pre;	/* out: the first ones, to recv() */
	__u32 flags;		/* in: 0 */
	__u32 reserved;		/* in: 0 */
};

struct iwarp_recv_zc_done {
	__aligned_u64 id;	/* IWARP_RECV_ZC's */
	__aligned_u64 bytes;	/* arrived in place: len - pre when full */
	__u32 error;		/* 0, or positive errno: the stream failed */
	__u32 reserved;
};

struct iwarp_iomap {
	__aligned_u64 addr;	/* the caller's memory */
	__aligned_u64 len;
	__aligned_u64 offset;	/* where the peer's riowrite() finds it */
	__u32 prot;		/* PROT_WRITE, PROT_READ (IWARP_IOUNMAP: 0) */
	__u32 reserved;		/* 0 */
};

struct iwarp_ioread {
	__aligned_u64 addr;	/* in: where the bytes go */
	__aligned_u64 len;	/* in */
	__aligned_u64 offset;	/* in: in the peer's mappings */
	__aligned_u64 done;	/* out: bytes read */
};

#define IWARP_MODE_AUTO		1
#define IWARP_MODE_ACTIVE	2	/* MPA initiator */
#define IWARP_MODE_PASSIVE	3	/* MPA responder */

#define IWARP_STATE_TCP		0	/* ULP on, not switched */
#define IWARP_STATE_STARTING	1
#define IWARP_STATE_RUN		2
#define IWARP_STATE_DEAD	3	/* failed or closed: see error */

struct iwarp_info {
	__u32 state;		/* IWARP_STATE_* */
	__u32 error;		/* positive errno, or 0 */
	__u32 passive;		/* accepted from a listener with the ULP */
	__u32 mpa_rev;		/* negotiated */
	__u32 crc;		/* MPA CRC on */
	__u32 rbuf_size;	/* receive / send buffer, bytes */
	__u32 sbuf_size;
	__u32 readable;		/* received, not yet read */
	__aligned_u64 tx_bytes;	/* stream bytes sent over iWARP */
	__aligned_u64 rx_bytes;	/* ... received */
	__aligned_u64 iowrite_bytes;	/* sent by IWARP_IOWRITE */
	__aligned_u64 ioread_bytes;	/* read by IWARP_IOREAD */
	__u32 iomap_size;	/* IWARP_IOMAP_SIZE: entries we offer */
	__u32 peer_iomap_size;	/* entries the peer offers (IWARP_IOMAP) */
	__aligned_u64 zc_bytes;	/* sent from IWARP_MREG memory (MSG_ZEROCOPY) */
	__u32 mreg_count;	/* IWARP_MREG registrations */
	__u32 zc_pending;	/* MSG_ZEROCOPY calls not yet notified */
	__aligned_u64 zc_rx_bytes;	/* received in place (IWARP_RECV_ZC) */
	__aligned_u64 sbuf_replaced;	/* send buffer pages replaced because
					 * the stack still held them */
	__aligned_u64 rbuf_held;	/* received bytes held in skbs until
					 * read, not copied into rbuf */
	__aligned_u64 rbuf_settled;	/* ... of which were copied into rbuf
					 * after all (MSG_PEEK, limits) */
};

/* ---------------------------------------------------------------------- */
/* ioctl numbers                                                          */

#define KIWARP_IOC_MAGIC	0xA7

#define KIWARP_IOC_QUERY	_IOR(KIWARP_IOC_MAGIC, 0x00, struct kiwarp_query)
#define KIWARP_IOC_ALLOC_PD	_IOWR(KIWARP_IOC_MAGIC, 0x01, struct kiwarp_handle)
#define KIWARP_IOC_DEALLOC_PD	_IOW(KIWARP_IOC_MAGIC, 0x02, struct kiwarp_handle)
#define KIWARP_IOC_REG_MR	_IOWR(KIWARP_IOC_MAGIC, 0x03, struct kiwarp_reg_mr)
#define KIWARP_IOC_DEREG_MR	_IOW(KIWARP_IOC_MAGIC, 0x04, struct kiwarp_handle)
#define KIWARP_IOC_CREATE_CQ	_IOWR(KIWARP_IOC_MAGIC, 0x05, struct kiwarp_create_cq)
#define KIWARP_IOC_DESTROY_CQ	_IOW(KIWARP_IOC_MAGIC, 0x06, struct kiwarp_handle)
#define KIWARP_IOC_ARM_CQ	_IOW(KIWARP_IOC_MAGIC, 0x07, struct kiwarp_arm_cq)
#define KIWARP_IOC_CREATE_QP	_IOWR(KIWARP_IOC_MAGIC, 0x08, struct kiwarp_create_qp)
#define KIWARP_IOC_DESTROY_QP	_IOW(KIWARP_IOC_MAGIC, 0x09, struct kiwarp_handle)
#define KIWARP_IOC_CONNECT	_IOWR(KIWARP_IOC_MAGIC, 0x0a, struct kiwarp_connect)
#define KIWARP_IOC_ACCEPT	_IOWR(KIWARP_IOC_MAGIC, 0x0b, struct kiwarp_accept)
#define KIWARP_IOC_ACCEPT_REPLY	_IOWR(KIWARP_IOC_MAGIC, 0x0c, struct kiwarp_accept_reply)
#define KIWARP_IOC_LISTEN	_IOWR(KIWARP_IOC_MAGIC, 0x0d, struct kiwarp_listen)
#define KIWARP_IOC_DESTROY_LISTEN _IOW(KIWARP_IOC_MAGIC, 0x0e, struct kiwarp_handle)
#define KIWARP_IOC_QP_DOORBELL	_IOW(KIWARP_IOC_MAGIC, 0x0f, struct kiwarp_handle)
#define KIWARP_IOC_QUERY_QP	_IOWR(KIWARP_IOC_MAGIC, 0x10, struct kiwarp_query_qp)
#define KIWARP_IOC_MODIFY_QP	_IOW(KIWARP_IOC_MAGIC, 0x11, struct kiwarp_modify_qp)

#endif /* _UAPI_LINUX_KIWARP_H */
