#!/usr/bin/env python3
# SPDX-License-Identifier: (GPL-2.0 OR MIT)
"""Generate lib/man/man3/*.3 from the specification below.

Run from lib/man: ./gen-man.py. The output is committed; edit here, not there.
"""
import os

DATE = "2026-11-21"
HDR = '.TH {name} 3 {date} "libkiwarp 1.0" "libkiwarp Manual"\n'

COMMON_ERR = [("EINVAL", "An argument was NULL or out of range, or a reserved field was not zero.")]

P = {}  # name -> dict


def page(name, brief, synopsis, desc, ret, errors, see, extra_names=()):
    P[name] = dict(brief=brief, synopsis=synopsis, desc=desc, ret=ret,
                   errors=errors, see=see)


RET_ZERO = "Returns 0 on success or a negative errno value on failure; \\fIerrno\\fR is not changed."

page("kw_open", "open the kiwarp device",
     ["int kw_open(struct kw_device **devp);"],
     """Opens \\fI/dev/kiwarp\\fR, creating a new context, queries the device limits
and checks that the kernel ABI version equals \\fBKIWARP_ABI_VERSION\\fR.
On success \\fI*devp\\fR points to the new device handle; on failure it is set to NULL.
.PP
Every object created on the device (protection domains, memory regions,
completion queues, queue pairs, listeners) belongs to this context and is
destroyed by the kernel when the context is closed with \\fBkw_close\\fR(3)
or the process exits.""",
     RET_ZERO,
     [("EINVAL", "\\fIdevp\\fR is NULL."),
      ("ENOENT", "The device node does not exist (module not loaded)."),
      ("EACCES", "No permission to open the device node."),
      ("EPROTONOSUPPORT", "The kernel speaks a different ABI version."),
      ("ENOMEM", "Out of memory.")],
     ["kw_open_path", "kw_close", "kw_query", "kw_device_fd"])

page("kw_open_path", "open a kiwarp device node by path",
     ["int kw_open_path(const char *path, struct kw_device **devp);"],
     """Like \\fBkw_open\\fR(3), but opens the character device at \\fIpath\\fR
instead of \\fI/dev/kiwarp\\fR (for example inside a container or a test
environment).""",
     RET_ZERO,
     [("EINVAL", "\\fIpath\\fR or \\fIdevp\\fR is NULL."),
      ("ENOENT", "\\fIpath\\fR does not exist."),
      ("ENOTTY", "\\fIpath\\fR is not a kiwarp device."),
      ("EPROTONOSUPPORT", "The kernel speaks a different ABI version."),
      ("ENOMEM", "Out of memory.")],
     ["kw_open", "kw_close"])

page("kw_close", "close a kiwarp device",
     ["int kw_close(struct kw_device *dev);"],
     """Closes the device file descriptor and frees \\fIdev\\fR. The kernel
destroys every object of the context: connections are closed, outstanding
work is flushed and registered memory is unpinned. The library does not
unmap rings or free the user-space structures of objects that were not
destroyed first; destroy them before closing to avoid leaks.""",
     RET_ZERO,
     [("EINVAL", "\\fIdev\\fR is NULL."), ("EIO", "\\fBclose\\fR(2) failed.")],
     ["kw_open", "kw_destroy_qp", "kw_destroy_cq"])

page("kw_device_fd", "get the file descriptor of a kiwarp device",
     ["int kw_device_fd(const struct kw_device *dev);"],
     """Returns the file descriptor of the device context. It becomes readable
(\\fBPOLLIN\\fR) when an armed completion queue fires (see
\\fBkw_req_notify_cq\\fR(3)); applications may add it to their own
\\fBpoll\\fR(2) or \\fBepoll\\fR(7) loop and call \\fBkw_wait_cq\\fR(3) with a
zero timeout when it is readable. Do not close it.""",
     "Returns the file descriptor (non-negative) or \\-EINVAL.",
     [("EINVAL", "\\fIdev\\fR is NULL.")],
     ["kw_open", "kw_wait_cq"])

page("kw_query", "query device limits and features",
     ["int kw_query(struct kw_device *dev, struct kiwarp_query *attr);"],
     """Fills \\fI*attr\\fR with the device limits (\\fImax_qp\\fR, \\fImax_cqe\\fR,
\\fImax_sge\\fR, \\fImax_ird\\fR, \\fImax_ord\\fR, \\fImax_private_data\\fR, ...)
and the feature bitmask \\fIfeatures\\fR (\\fBKIWARP_FEAT_*\\fR). Test feature
bits before using an extension, for example \\fBKIWARP_FEAT_CRC\\fR before
requesting MPA CRC or \\fBKIWARP_FEAT_KERNEL_CM\\fR before
\\fBkw_connect_addr\\fR(3) and \\fBkw_listen\\fR(3).""",
     RET_ZERO, COMMON_ERR, ["kw_open", "kw_create_qp"])

page("kw_alloc_pd", "allocate a protection domain",
     ["int kw_alloc_pd(struct kw_device *dev, struct kw_pd **pdp);"],
     """Allocates a protection domain. Memory regions and queue pairs are created
in a PD; a queue pair can only use STags of its own PD.""",
     RET_ZERO,
     COMMON_ERR + [("ENOMEM", "Out of memory or the per-context PD limit was reached.")],
     ["kw_dealloc_pd", "kw_reg_mr", "kw_create_qp"])

page("kw_dealloc_pd", "free a protection domain",
     ["int kw_dealloc_pd(struct kw_pd *pd);"],
     """Frees \\fIpd\\fR. On failure the PD is left intact and may be used or
freed again later.""",
     RET_ZERO,
     COMMON_ERR + [("EBUSY", "Memory regions or queue pairs still use the PD.")],
     ["kw_alloc_pd"])

page("kw_reg_mr", "register a memory region",
     ["int kw_reg_mr(struct kw_pd *pd, void *addr, size_t length,",
      "              uint32_t access, struct kw_mr **mrp);"],
     """Pins \\fIlength\\fR bytes at \\fIaddr\\fR and returns a memory region whose
\\fIstag\\fR member is both the local key (used in \\fBstruct kiwarp_sge\\fR
\\fIlkey\\fR) and the remote key advertised to the peer. Tagged offsets are
virtual addresses: the peer addresses byte \\fIaddr\\fR+\\fIn\\fR with
TO = \\fIaddr\\fR+\\fIn\\fR. The \\fIaddr\\fR, \\fIlength\\fR and \\fIaccess\\fR
members of the returned \\fBstruct kw_mr\\fR echo the arguments.
.PP
\\fIaccess\\fR is a mask of \\fBKIWARP_ACCESS_LOCAL_WRITE\\fR,
\\fBKIWARP_ACCESS_REMOTE_WRITE\\fR and \\fBKIWARP_ACCESS_REMOTE_READ\\fR;
remote write requires local write. Pinned memory is charged to
\\fBRLIMIT_MEMLOCK\\fR unless the caller has \\fBCAP_IPC_LOCK\\fR.""",
     RET_ZERO,
     [("EINVAL", "NULL argument, zero length, a range that wraps, unknown access bits, or remote write without local write."),
      ("ENOMEM", "Out of memory, or \\fBRLIMIT_MEMLOCK\\fR exceeded."),
      ("EFAULT", "The range is not mapped.")],
     ["kw_dereg_mr", "kw_alloc_pd", "kw_post_send"])

page("kw_dereg_mr", "deregister a memory region",
     ["int kw_dereg_mr(struct kw_mr *mr);"],
     """Invalidates the STag of \\fImr\\fR, unpins its memory and frees \\fImr\\fR.
On failure \\fImr\\fR is left intact.""",
     RET_ZERO,
     COMMON_ERR + [("EBUSY", "A work request in flight still references the region; retry after its completion.")],
     ["kw_reg_mr"])

page("kw_create_cq", "create a completion queue",
     ["int kw_create_cq(struct kw_device *dev, uint32_t entries, struct kw_cq **cqp);"],
     """Creates a completion queue holding at least \\fIentries\\fR completions and
maps its ring into the process. The ring geometry (producer and consumer
index offsets, entry offset, size) is taken from the kernel's answer and
validated; the library never assumes a layout. Completions are read with
\\fBkw_poll_cq\\fR(3).
.PP
Size the CQ for every work request that can complete on it: a CQ overrun
moves every QP bound to the CQ to the ERROR state.""",
     RET_ZERO,
     [("EINVAL", "NULL argument or \\fIentries\\fR is 0 or above the device limit."),
      ("ENOMEM", "Out of memory, or \\fBRLIMIT_MEMLOCK\\fR exceeded."),
      ("EPROTO", "The kernel reported an inconsistent ring geometry.")],
     ["kw_destroy_cq", "kw_poll_cq", "kw_wait_cq", "kw_req_notify_cq"])

page("kw_destroy_cq", "destroy a completion queue",
     ["int kw_destroy_cq(struct kw_cq *cq);"],
     """Destroys \\fIcq\\fR, unmaps its ring and frees it. On failure \\fIcq\\fR is
left intact.""",
     RET_ZERO,
     COMMON_ERR + [("EBUSY", "A queue pair still uses the CQ.")],
     ["kw_create_cq"])

page("kw_req_notify_cq", "arm a completion queue",
     ["int kw_req_notify_cq(struct kw_cq *cq, int solicited_only);"],
     """Requests one event on the device file descriptor at the next completion
(or, if \\fIsolicited_only\\fR is non-zero, at the next solicited or error
completion) on \\fIcq\\fR. Completions already in the ring do not raise an
event: poll the ring again after arming. \\fBkw_wait_cq\\fR(3) does all of
this.""",
     RET_ZERO, COMMON_ERR, ["kw_wait_cq", "kw_device_fd", "kw_poll_cq"])

page("kw_wait_cq", "wait for completions",
     ["int kw_wait_cq(struct kw_cq *cq, int timeout_ms);"],
     """Returns at once if \\fIcq\\fR holds completions. Otherwise arms the CQ,
checks the ring again (closing the race with a completion that arrived
before the arm), then waits with \\fBpoll\\fR(2) on the device file
descriptor and reads the event channel: \\fBread\\fR(2) on the device
returns the __u32 handles of the CQs that fired. Events read for other CQs
of the same device are remembered and reported by their own
\\fBkw_wait_cq\\fR call.
.PP
\\fItimeout_ms\\fR is in milliseconds; 0 does not block and a negative value
waits forever. Call \\fBkw_poll_cq\\fR(3) afterwards to reap the completions.""",
     "Returns 1 if completions are (or may be) available, 0 on timeout, or a negative errno value.",
     COMMON_ERR + [("EINTR", "A signal interrupted the wait."),
                   ("EIO", "The device file descriptor reported an error.")],
     ["kw_poll_cq", "kw_req_notify_cq", "kw_device_fd"])

page("kw_poll_cq", "reap completions",
     ["static inline int kw_poll_cq(struct kw_cq *cq, unsigned n,",
      "                             struct kiwarp_cqe *out);",
      "static inline unsigned kw_cq_ready(const struct kw_cq *cq);"],
     """\\fBkw_poll_cq\\fR copies up to \\fIn\\fR completions, oldest first, from the
mmap'd ring of \\fIcq\\fR into \\fIout\\fR and releases their slots to the
kernel. It does not enter the kernel. Each \\fBstruct kiwarp_cqe\\fR has the
\\fIwr_id\\fR of the work request, its \\fIopcode\\fR (\\fBKIWARP_WR_*\\fR), a
\\fIstatus\\fR (\\fBKIWARP_WC_*\\fR, see \\fBkw_wc_status_str\\fR(3)),
\\fIbyte_len\\fR for receives and RDMA Reads, the \\fIqp\\fR handle,
\\fIinv_stag\\fR with \\fBKIWARP_WC_WITH_INV\\fR, and for error statuses the
Terminate that caused it in \\fIterm\\fR (see \\fBkw_term_str\\fR(3)).
.PP
The producer index is read with acquire semantics (pairing with the
kernel's release store) and the consumer index is published with release
semantics after the entries were copied.
.PP
\\fBkw_cq_ready\\fR returns the number of completions waiting.
.PP
One thread at a time may poll a given CQ.
.SS Busy polling
Polling an empty CQ costs a load and a compare: an application may spin
on \\fBkw_poll_cq\\fR and fall back to \\fBkw_wait_cq\\fR(3) after a number of
empty polls. The kernel's socket busy polling (\\fBSO_BUSY_POLL\\fR,
\\fInet.core.busy_read\\fR) has no effect on a QP: kiwarp receives in the
softirq that delivers each TCP segment, not from \\fBrecv\\fR(2) on its
socket. See Documentation/performance.md ("Busy polling") for the
interplay with \\fInapi_defer_hard_irqs\\fR.""",
     "\\fBkw_poll_cq\\fR returns the number of completions copied (0 if none) or \\-EINVAL.",
     [("EINVAL", "\\fIcq\\fR is NULL, or \\fIout\\fR is NULL with \\fIn\\fR > 0.")],
     ["kw_wait_cq", "kw_create_cq", "kw_post_send", "kw_post_recv"])

page("kw_create_qp", "create a queue pair",
     ["struct kw_qp_init_attr {",
      "    struct kw_cq *send_cq, *recv_cq;",
      "    uint32_t sq_entries, rq_entries;",
      "    uint32_t max_sge;",
      "    uint32_t sig_all;",
      "};",
      "",
      "int kw_create_qp(struct kw_pd *pd, const struct kw_qp_init_attr *attr,",
      "                 struct kw_qp **qpp);"],
     """Creates a queue pair in \\fIpd\\fR whose send completions go to
\\fIsend_cq\\fR and receive completions to \\fIrecv_cq\\fR (both of the same
device). The send and receive rings hold at least \\fIsq_entries\\fR and
\\fIrq_entries\\fR work requests; each work request has at most
\\fImax_sge\\fR (1 to \\fBKIWARP_MAX_SGE\\fR; 0 means 1) scatter/gather
entries. With \\fIsig_all\\fR every send work request produces a
completion. The QP starts in \\fBKIWARP_QPS_IDLE\\fR; connect it with
\\fBkw_connect\\fR(3) or \\fBkw_accept\\fR(3). Receives may be posted before
the connection is established (and must be, for the first incoming Send).""",
     RET_ZERO,
     [("EINVAL", "NULL argument, missing CQ, CQs of another device, \\fIsq_entries\\fR 0, or \\fImax_sge\\fR above \\fBKIWARP_MAX_SGE\\fR."),
      ("ENOMEM", "Out of memory or a device limit was reached."),
      ("EPROTO", "The kernel reported an inconsistent ring geometry.")],
     ["kw_destroy_qp", "kw_connect", "kw_accept", "kw_post_send", "kw_post_recv"])

page("kw_destroy_qp", "destroy a queue pair",
     ["int kw_destroy_qp(struct kw_qp *qp);"],
     """Closes the connection of \\fIqp\\fR (abortively if work requests are in
flight), flushes it, unmaps its rings and frees it. On failure \\fIqp\\fR is
left intact.""",
     RET_ZERO, COMMON_ERR, ["kw_create_qp", "kw_modify_qp"])

page("kw_query_qp", "query queue pair state",
     ["int kw_query_qp(struct kw_qp *qp, struct kiwarp_query_qp *attr);"],
     """Fills \\fI*attr\\fR with the QP state (\\fBKIWARP_QPS_*\\fR, see
\\fBkw_qp_state_str\\fR(3)), the negotiated connection parameters (MPA
revision, CRC, P2P, IRD/ORD), \\fImulpdu\\fR (payload bytes per FPDU), the
payload byte counters and the last Terminate sent and received
(\\fIterm_sent\\fR, \\fIterm_rcvd\\fR; see \\fBkw_term_str\\fR(3)),
\\fIcopy_max\\fR, and in \\fIflags\\fR \\fBKIWARP_QPQ_TX_COPIED\\fR when lately
the stack copied pages that this QP, or another QP of the same
\\fBkw_open\\fR(3) to the same peer address (and bound device) in the same
network namespace, sent by reference (a peer on this host): a QP
created without \\fBKW_QP_INIT_COPY_MAX\\fR then copies its large Sends and
Writes too.
.PP
On a kernel with kiwarp's TCP patch (\\fBKIWARP_FEAT_TCP_HOOKS\\fR) a QP whose
peer sends markers (or CRC, with the module parameter \\fBooo_aligned\\fR)
places RDMA Writes and Read Responses as their segments
arrive, out of order (\\fBKIWARP_QPQ_OOO\\fR in \\fIflags\\fR):
\\fIrx_bytes\\fR counts the payload bytes placed in order, \\fIooo_bytes\\fR
those the in-order pass found placed already; together, every payload
byte received.""",
     RET_ZERO, COMMON_ERR, ["kw_modify_qp", "kw_qp_state_str", "kw_term_str"])

page("kw_modify_qp", "move a queue pair to ERROR or close it",
     ["int kw_modify_qp(struct kw_qp *qp, uint32_t action);"],
     """\\fBKIWARP_MODIFY_ERROR\\fR moves \\fIqp\\fR to ERROR: every outstanding work
request completes with \\fBKIWARP_WC_WR_FLUSH_ERR\\fR.
\\fBKIWARP_MODIFY_CLOSE\\fR starts an orderly close (state
\\fBKIWARP_QPS_CLOSING\\fR): once the send queue has drained and the RDMA
Read Responses the peer is owed have gone out, kiwarp closes the stream and
the QP ends in ERROR.
.PP
The peer may close first. A TCP FIN that arrives between messages is a
half-close (RFC 5041 section 6.2.1): the QP moves to
\\fBKIWARP_QPS_CLOSING\\fR by itself, the posted receives complete with
\\fBKIWARP_WC_WR_FLUSH_ERR\\fR (that is how the ULP learns of it), and so
do RDMA Reads still waiting for a Response and any posted later; Sends,
Writes and the Read Responses owed still go out, and then the QP closes as
above. Unlike other flushes these come while the QP is still in
\\fBKIWARP_QPS_CLOSING\\fR, not ERROR: Sends posted then complete normally
once sent. A FIN in the middle of a message ends the stream: ERROR.""",
     RET_ZERO, COMMON_ERR, ["kw_query_qp", "kw_destroy_qp"])

CONN_PARAM = """.PP
\\fIparam\\fR may be NULL (MPA revision 2, CRC, no P2P). Its members:
\\fIflags\\fR (\\fBKIWARP_CONN_NO_CRC\\fR, \\fBKIWARP_CONN_CRC\\fR,
\\fBKIWARP_CONN_P2P\\fR, \\fBKIWARP_CONN_MARKERS\\fR), \\fImpa_rev\\fR
(1 or 2; 0 selects 2), \\fIrtr\\fR (\\fBKIWARP_RTR_*\\fR, only with P2P),
\\fIird\\fR and \\fIord\\fR (RDMA Reads served and issued), \\fItimeout_ms\\fR
(0: kernel default, 10 s). P2P and RTR need revision 2.
.PP
MPA CRC is on unless \\fBKIWARP_CONN_NO_CRC\\fR declines it (RFC 5044
section 4.4: CRC is the default), and even then it is on when the peer's
MPA frame asks for it; \\fBKIWARP_CONN_CRC\\fR states the default
explicitly, and both together are \\-EINVAL. In \\fIresult\\fR,
\\fBKIWARP_CONN_CRC\\fR says whether the connection runs with CRC.
.PP
\\fBKIWARP_CONN_MARKERS\\fR asks the peer to put MPA markers (RFC 5044
section 5) in the FPDUs it sends (M in the Request or Reply); a peer that
asks for them gets them, and each direction is negotiated on its own. In
\\fIresult\\fR, \\fBKIWARP_CONN_MARKERS\\fR says the peer's FPDUs carry
markers and \\fBKIWARP_CONN_MARKERS_TX\\fR that ours do (an FPDU with
markers is always copied: \\fIcopy_max\\fR does not apply); in the
request \\fBkw_accept\\fR(3) returns, \\fBKIWARP_CONN_MARKERS_TX\\fR says
the initiator asks for them. Upstream siw
cannot send markers: it rejects a Request that asks for them
(\\-ECONNREFUSED) and fails the connection on such a Reply.
\\fBkw_query_qp\\fR(3) also reports the IRD and ORD the peer sent
(\\fIpeer_ird\\fR, \\fIpeer_ord\\fR; RFC 6581 section 9.1)."""

page("kw_connect", "connect a queue pair as MPA initiator",
     ["struct kw_conn_result {",
      "    struct kiwarp_conn_param param;",
      "    uint32_t pdata_len;",
      "    uint8_t pdata[KIWARP_MAX_PRIVATE_DATA];",
      "};",
      "",
      "int kw_connect(struct kw_qp *qp, int sockfd,",
      "               const struct kw_conn_param *param,",
      "               const void *pdata, size_t pdata_len,",
      "               struct kw_conn_result *result);"],
     """Turns the connected TCP socket \\fIsockfd\\fR into the iWARP stream of
\\fIqp\\fR: sends the MPA Request carrying \\fIpdata_len\\fR (at most
\\fBKIWARP_MAX_PRIVATE_DATA\\fR) bytes of private data, waits for the Reply,
and moves the QP to RTS. If \\fIresult\\fR is not NULL it receives the
negotiated parameters and the responder's private data (also when the
responder rejected the connection).
""" + CONN_PARAM + """
.PP
Nothing else may be read from or written to \\fIsockfd\\fR afterwards.""",
     RET_ZERO,
     [("EINVAL", "Bad argument or parameter combination."),
      ("EBADF", "\\fIsockfd\\fR is negative or not a connected TCP socket."),
      ("ECONNREFUSED", """The responder rejected the connection. The QP is in ERROR; \\fIsockfd\\fR
is the application's again, connected and open (RFC 5044 section 7.1.2:
the ULP may close it or use it for something else), its reply private
data in \\fIresult\\fR."""),
      ("ETIMEDOUT", "No MPA Reply within the timeout."),
      ("EPROTO", "Malformed MPA Reply or parameters that cannot be negotiated."),
      ("EINTR", "A signal interrupted the call.")],
     ["kw_connect_addr", "kw_accept", "kw_query_qp"])

page("kw_connect_addr", "connect a queue pair to an address",
     ["int kw_connect_addr(struct kw_qp *qp, const struct sockaddr *addr,",
      "                    socklen_t addrlen, const struct kw_conn_param *param,",
      "                    const void *pdata, size_t pdata_len,",
      "                    struct kw_conn_result *result);"],
     """Like \\fBkw_connect\\fR(3), but the kernel makes the TCP connection to
\\fIaddr\\fR (\\fBAF_INET\\fR or \\fBAF_INET6\\fR) itself. Requires
\\fBKIWARP_FEAT_KERNEL_CM\\fR.""",
     RET_ZERO,
     [("EINVAL", "Bad argument."),
      ("EAFNOSUPPORT", "\\fIaddr\\fR is neither IPv4 nor IPv6."),
      ("ECONNREFUSED", "The TCP connection or the MPA exchange was refused."),
      ("ETIMEDOUT", "Timeout."),
      ("EPROTO", "Malformed MPA Reply.")],
     ["kw_connect", "kw_listen"])

page("kw_listen", "create a kernel listening socket",
     ["int kw_listen(struct kw_device *dev, const struct sockaddr *addr,",
      "              socklen_t addrlen, int backlog, struct kw_listener **lp);",
      "int kw_listener_port(const struct kw_listener *l);"],
     """\\fBkw_listen\\fR creates a kernel TCP listening socket bound to \\fIaddr\\fR
(port 0 picks a free port) with the given \\fIbacklog\\fR (0 selects 16).
Incoming connections are taken with \\fBkw_accept\\fR(3). Requires
\\fBKIWARP_FEAT_KERNEL_CM\\fR.
.PP
\\fBkw_listener_port\\fR returns the bound port in host byte order.""",
     "\\fBkw_listen\\fR returns 0 or a negative errno value. \\fBkw_listener_port\\fR returns the port or \\-EINVAL.",
     COMMON_ERR + [("EADDRINUSE", "The address is in use."),
                   ("EAFNOSUPPORT", "\\fIaddr\\fR is neither IPv4 nor IPv6.")],
     ["kw_destroy_listener", "kw_accept"])

page("kw_listener_port", "get the port of a kernel listener",
     ["int kw_listener_port(const struct kw_listener *l);"],
     """Returns the TCP port \\fIl\\fR is bound to, in host byte order (useful after
listening on port 0).""",
     "Returns the port or \\-EINVAL.",
     [("EINVAL", "\\fIl\\fR is NULL.")],
     ["kw_listen"])

page("kw_destroy_listener", "close a kernel listener",
     ["int kw_destroy_listener(struct kw_listener *l);"],
     """Closes the listening socket and frees \\fIl\\fR. Connections already
accepted are not affected.""",
     RET_ZERO, COMMON_ERR, ["kw_listen"])

page("kw_accept", "receive an MPA connection request",
     ["struct kw_conn_request {",
      "    struct kiwarp_conn_param param;",
      "    uint32_t pdata_len;",
      "    uint8_t pdata[KIWARP_MAX_PRIVATE_DATA];",
      "    struct sockaddr_storage peer_addr;",
      "    socklen_t peer_addrlen;",
      "};",
      "",
      "int kw_accept(struct kw_qp *qp, int sockfd, struct kw_listener *l,",
      "              int timeout_ms, struct kw_conn_request *req);"],
     """MPA responder, step 1. Takes exactly one of: the connected TCP socket
\\fIsockfd\\fR (then \\fIl\\fR is NULL), or the next connection of listener
\\fIl\\fR (then \\fIsockfd\\fR is \\-1). Reads the MPA Request and, if
\\fIreq\\fR is not NULL, returns its private data, the parameters the
initiator asked for and the peer address. \\fItimeout_ms\\fR bounds the wait
for a connection on a listener (0: none); the MPA Request itself must arrive
within 10 s. The QP waits in \\fBKIWARP_QPS_MPA_REQ_RCVD\\fR until
\\fBkw_accept_reply\\fR(3). Post receives before accepting.""",
     RET_ZERO,
     [("EINVAL", "Bad argument, both or neither of \\fIsockfd\\fR and \\fIl\\fR given."),
      ("EBADF", "\\fIsockfd\\fR is not a connected TCP socket."),
      ("ETIMEDOUT", "No connection or no MPA Request in time."),
      ("EPROTO", "Malformed MPA Request."),
      ("EINTR", "A signal interrupted the call.")],
     ["kw_accept_reply", "kw_listen", "kw_connect"])

page("kw_accept_reply", "accept or reject an MPA connection request",
     ["int kw_accept_reply(struct kw_qp *qp, uint32_t action,",
      "                    const struct kw_conn_param *param,",
      "                    const void *pdata, size_t pdata_len,",
      "                    struct kw_conn_result *result);"],
     """MPA responder, step 2. With \\fBKIWARP_REPLY_ACCEPT\\fR sends the MPA Reply
carrying \\fIpdata\\fR and moves \\fIqp\\fR to RTS; \\fIresult\\fR (if not NULL)
receives the negotiated parameters (its \\fIpdata_len\\fR is 0: the
initiator's private data came with \\fBkw_accept\\fR(3)). With
\\fBKIWARP_REPLY_REJECT\\fR sends a Reply with the Reject flag and moves the
QP to ERROR. A socket passed to \\fBkw_accept\\fR(3) as a file descriptor
is the application's again, connected and open (RFC 5044 section 7.1.2);
one kiwarp accepted from a listener is closed.
""" + CONN_PARAM.replace("timeout_ms\\fR\n(0: kernel default, 10 s)", "timeout_ms\\fR\n(ignored here)") + """
.PP
An initiator that asks for peer-to-peer mode gets it even when \\fIparam\\fR
does not set \\fBKIWARP_CONN_P2P\\fR (RFC 6581 section 9.2): the Reply
allows one RTR type, \\fIrtr\\fR's if given. Once accepted, the QP sends
nothing, work posted meanwhile included, until the initiator's first
message (the RTR in peer-to-peer mode) has arrived (RFC 5044 section
7.1.2): without peer-to-peer mode the initiator speaks first.""",
     RET_ZERO,
     [("EINVAL", "Bad argument, or the QP is not in \\fBKIWARP_QPS_MPA_REQ_RCVD\\fR."),
      ("EPROTO", "The requested parameters cannot be negotiated.")],
     ["kw_accept", "kw_connect"])

page("kw_post_send", "post work requests to the send queue",
     ["struct kw_send_wr {",
      "    uint64_t wr_id;",
      "    uint8_t opcode;      /* KIWARP_WR_* */",
      "    uint8_t flags;       /* KW_SEND_SIGNALED, KW_SEND_FENCE */",
      "    uint16_t num_sge;",
      "    uint32_t inv_stag;",
      "    const struct kiwarp_sge *sg_list;",
      "    uint64_t remote_addr;",
      "    uint32_t rkey;",
      "    uint32_t reserved;",
      "};",
      "",
      "int kw_post_send(struct kw_qp *qp, const struct kw_send_wr *wr, unsigned n);",
      "static inline unsigned kw_sq_space(const struct kw_qp *qp);"],
     """Writes the \\fIn\\fR work requests of the array \\fIwr\\fR into the send
ring of \\fIqp\\fR, publishes them by storing the producer index with
release semantics (pairing with the kernel's acquire load) and rings the
doorbell (one \\fBioctl\\fR(2) per call, whatever \\fIn\\fR). Posting is all
or nothing: every request is validated and ring space for all of them is
checked before the ring is touched.
.PP
Opcodes: \\fBKIWARP_WR_SEND\\fR, \\fBKIWARP_WR_SEND_SE\\fR (solicited event),
\\fBKIWARP_WR_SEND_INV\\fR and \\fBKIWARP_WR_SEND_SE_INV\\fR (the peer
invalidates \\fIinv_stag\\fR), \\fBKIWARP_WR_RDMA_WRITE\\fR and
\\fBKIWARP_WR_RDMA_READ\\fR (remote buffer \\fIremote_addr\\fR / \\fIrkey\\fR; a
Read has at most one local sink SGE), and \\fBKIWARP_WR_LOCAL_INV\\fR
(invalidate \\fIinv_stag\\fR locally, no SGE). Up to the QP's \\fImax_sge\\fR
entries of \\fIsg_list\\fR are gathered (scattered for a Read).
\\fBKW_SEND_SIGNALED\\fR requests a completion on success (always produced on
error or with \\fIsig_all\\fR); \\fBKW_SEND_FENCE\\fR waits for prior RDMA
Reads.
.PP
\\fBkw_sq_space\\fR returns the number of free send ring slots. One thread at
a time may post to a given QP's send queue.""",
     """Returns \\fIn\\fR on success or a negative errno value. If only the
doorbell fails, the work requests are already published; the next
doorbell hands them to the kernel, or they are flushed with the QP.""",
     [("EINVAL", "NULL argument, unknown opcode or flag, \\fInum_sge\\fR above the QP limit, an SGE list missing, more than one SGE for a Read, or an SGE for Local Invalidate."),
      ("EAGAIN", "Not enough free slots right now: reap completions and retry."),
      ("ENOMEM", "\\fIn\\fR exceeds the ring size; it can never fit.")],
     ["kw_post_recv", "kw_poll_cq", "kw_create_qp", "kw_reg_mr"])

page("kw_post_recv", "post receive buffers",
     ["struct kw_recv_wr {",
      "    uint64_t wr_id;",
      "    const struct kiwarp_sge *sg_list;",
      "    uint32_t num_sge;",
      "    uint32_t reserved;",
      "};",
      "",
      "int kw_post_recv(struct kw_qp *qp, const struct kw_recv_wr *wr, unsigned n);",
      "static inline unsigned kw_rq_space(const struct kw_qp *qp);"],
     """Writes \\fIn\\fR receive work requests into the receive ring of \\fIqp\\fR,
publishes them with a release store of the producer index and rings the
doorbell so the kernel notices them. Incoming Sends are placed in the
buffers in order; a receive completes with \\fIbyte_len\\fR set. A Send
arriving with no receive posted is a protocol error (Terminate, QP to
ERROR), so keep the receive queue stocked. All or nothing, like
\\fBkw_post_send\\fR(3).
.PP
\\fBkw_rq_space\\fR returns the number of free receive ring slots.""",
     "Returns \\fIn\\fR on success or a negative errno value.",
     [("EINVAL", "NULL argument, \\fInum_sge\\fR above the QP limit or a missing SGE list."),
      ("EAGAIN", "Not enough free slots right now."),
      ("ENOMEM", "\\fIn\\fR exceeds the ring size.")],
     ["kw_post_send", "kw_poll_cq"])

page("kw_wc_status_str", "describe a completion status",
     ["const char *kw_wc_status_str(unsigned status);"],
     """Returns a static string naming the \\fBKIWARP_WC_*\\fR completion status
\\fIstatus\\fR, for example "work request flushed".""",
     "A pointer to a static string; \"unknown status\" for unknown values. Never NULL.",
     [], ["kw_poll_cq", "kw_term_str", "kw_wr_opcode_str"])

page("kw_wr_opcode_str", "name a work request opcode",
     ["const char *kw_wr_opcode_str(unsigned opcode);"],
     """Returns a static string naming the \\fBKIWARP_WR_*\\fR opcode, as found in
\\fBstruct kiwarp_cqe\\fR \\fIopcode\\fR, for example "RDMA_WRITE".""",
     "A pointer to a static string; \"UNKNOWN\" for unknown values. Never NULL.",
     [], ["kw_poll_cq", "kw_wc_status_str"])

page("kw_qp_state_str", "name a queue pair state",
     ["const char *kw_qp_state_str(unsigned state);"],
     """Returns a static string naming the \\fBKIWARP_QPS_*\\fR state, for example
"RTS".""",
     "A pointer to a static string; \"UNKNOWN\" for unknown values. Never NULL.",
     [], ["kw_query_qp"])

page("kw_term_str", "describe an iWARP Terminate error",
     ["const char *kw_term_str(unsigned layer, unsigned etype, unsigned ecode);"],
     """Returns a static description of the Terminate error identified by
\\fIlayer\\fR (\\fBKIWARP_TERM_LAYER_RDMAP\\fR, \\fB_DDP\\fR, \\fB_LLP\\fR), error
type \\fIetype\\fR and error code \\fIecode\\fR, following RFC 5040 section 7.2
(RDMAP), RFC 5041 section 7.2 (DDP), RFC 5044 section 8 and RFC 6581 (MPA),
as registered in the IANA RDDP registries. For example layer 0, type 0x2,
code 0x06 is "RDMAP remote operation error: unexpected opcode". Unknown
codes fall back to the name of the error type.""",
     "A pointer to a static string; never NULL.",
     [], ["kw_poll_cq", "kw_query_qp", "kw_wc_status_str"])

# inline helpers documented on their own pages
for name, target in (("kw_cq_ready", "kw_poll_cq"), ("kw_sq_space", "kw_post_send"),
                     ("kw_rq_space", "kw_post_recv")):
    P[name] = dict(so=target)


def esc_syn(line):
    return line.replace("\\", "\\e").replace("-", "\\-")


def render(name, d):
    out = [HDR.format(name=name.upper(), date=DATE)]
    aliases = [n for n, v in P.items() if v.get("so") == name]
    out.append(".SH NAME\n%s \\- %s\n" % (", ".join([name] + aliases), d["brief"]))
    out.append(".SH SYNOPSIS\n.nf\n.B #include <kiwarp.h>\n.PP\n")
    for line in d["synopsis"]:
        out.append((esc_syn(line) if line else "") + "\n")
    out.append(".fi\n.PP\nLink with \\fI\\-lkiwarp\\fR.\n")
    out.append(".SH DESCRIPTION\n%s\n" % d["desc"])
    out.append(".SH RETURN VALUE\n%s\n" % d["ret"])
    if d["errors"]:
        out.append(".SH ERRORS\nErrors are returned as negative values, e.g. \\-EINVAL.\n")
        for e, text in d["errors"]:
            out.append(".TP\n.B %s\n%s\n" % (e, text))
    see = sorted(set(d["see"]) - {name})
    out.append(".SH SEE ALSO\n" + ",\n".join(".BR %s (3)" % s for s in see) + "\n")
    return "".join(out)


def main():
    os.makedirs("man3", exist_ok=True)
    for name, d in P.items():
        path = os.path.join("man3", name + ".3")
        with open(path, "w") as f:
            if "so" in d:
                f.write(".so man3/%s.3\n" % d["so"])
            else:
                f.write(render(name, d))


main()
