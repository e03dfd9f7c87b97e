/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Kernel compatibility: the one place that knows kernel interfaces changed
 * between 6.1 (the oldest kernel kiwarp supports) and the newest one it is
 * tested on. The rest of the module uses the kw_ names below and carries
 * no version checks.
 *
 * The KW_HAVE_* macros come from kmod/Kbuild, which looks for each
 * interface in the target kernel's headers (distribution kernels backport,
 * so a version number would lie). Each shim names the kernel that needs it.
 * The unaligned-access header, needed by the sans-I/O core too, is chosen
 * in kw_compat.h.
 */
#ifndef KW_KCOMPAT_H
#define KW_KCOMPAT_H

#include <linux/mm.h>
#include <linux/net.h>
#include <linux/socket.h>
#include <linux/uio.h>

/* After 6.12 (7.2 has it): inet_recv_error() lost its addr_len. */
#ifdef KW_HAVE_RECV_ERROR_NO_ADDRLEN
#define kw_inet_recv_error(sk, msg, len) inet_recv_error(sk, msg, len)
#else
#define kw_inet_recv_error(sk, msg, len) ({				\
	int __addr_len = 0;						\
	inet_recv_error(sk, msg, len, &__addr_len);			\
})
#endif

/* 6.4: iov_iter's iovec array is __iov, read with iter_iov(). */
#ifndef KW_HAVE_ITER_IOV
static inline const struct iovec *iter_iov(const struct iov_iter *iter)
{
	return iter->iov;
}
#endif

/* 6.3: vma->vm_flags is read-only; vm_flags_set()/vm_flags_clear(). */
#ifndef KW_HAVE_VM_FLAGS_SET
static inline void vm_flags_set(struct vm_area_struct *vma, vm_flags_t flags)
{
	vma->vm_flags |= flags;
}

static inline void vm_flags_clear(struct vm_area_struct *vma, vm_flags_t flags)
{
	vma->vm_flags &= ~flags;
}
#endif

/* 6.10: proto_ops.accept takes a struct proto_accept_arg. */
#ifdef KW_HAVE_PROTO_ACCEPT_ARG
#define KW_ACCEPT_ARGS	struct proto_accept_arg *arg
#define KW_ACCEPT_PASS	arg
#else
#define KW_ACCEPT_ARGS	int flags, bool kern
#define KW_ACCEPT_PASS	flags, kern
#endif

/*
 * 7.0: kernel_bind(), kernel_connect() and proto_ops.bind/connect take a
 * struct sockaddr_unsized *, a sockaddr whose length travels separately.
 */
#ifdef KW_HAVE_SOCKADDR_UNSIZED
typedef struct sockaddr_unsized kw_sockaddr_arg;
#else
typedef struct sockaddr kw_sockaddr_arg;
#endif

/*
 * 6.5: proto_ops.sendpage and kernel_sendpage() are gone; pages are
 * spliced into the socket by sendmsg(MSG_SPLICE_PAGES) over a bvec
 * iterator instead (tx.c has one path per kernel interface). The two
 * coexist in 6.5 only as a transition; kiwarp uses MSG_SPLICE_PAGES
 * whenever the kernel has it.
 */
#if defined(KW_HAVE_MSG_SPLICE_PAGES)
#define KW_TX_SPLICE	1
#elif !defined(KW_HAVE_SENDPAGE_OP)
#error "kernel has neither MSG_SPLICE_PAGES nor proto_ops.sendpage"
#endif

/*
 * 6.10 (page_frag_cache_drain): release a page_frag_cache's page (tx.c's
 * header/trailer fragments); before it, drain by hand.
 */
#include <linux/skbuff.h>
#ifdef KW_HAVE_PAGE_FRAG_CACHE_DRAIN
#define kw_page_frag_cache_drain page_frag_cache_drain
#else
static inline void kw_page_frag_cache_drain(struct page_frag_cache *nc)
{
	if (nc->va)
		__page_frag_cache_drain(virt_to_head_page(nc->va),
					nc->pagecnt_bias);
	nc->va = NULL;
}
#endif

/*
 * 6.17 (WQ_PERCPU): a per-CPU workqueue says so; without either flag
 * alloc_workqueue() warns (the default is to become unbound).
 */
#ifndef KW_HAVE_WQ_PERCPU
#define WQ_PERCPU	0
#endif

/*
 * After 6.12 (7.2 has it): the established-socket lookups lost their
 * hashinfo argument. Before, TCP's is the namespace's (6.1 added per-netns
 * tables). Used as the argument list's head: KW_TCP_EHASH(net) saddr, ...
 */
#ifdef KW_HAVE_LOOKUP_HASHINFO
#define KW_TCP_EHASH(net)	(net)->ipv4.tcp_death_row.hashinfo,
#else
#define KW_TCP_EHASH(net)
#endif

#endif /* KW_KCOMPAT_H */
