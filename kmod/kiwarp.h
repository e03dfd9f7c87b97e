/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kiwarp internal declarations shared by the module's files.
 *
 * Objects and their owners:
 *   main.c   module init/exit, the misc device
 *   dev.c    struct kw_ctx (one per open file): ioctl dispatch, mmap, poll,
 *            read (CQ events), release
 *   mem.c    protection domains, memory regions (pinning, STag table)
 *   cq.c     completion queues (mmap'd CQE ring, arming, events)
 *   umem.c   ring memory shared with user space (charged while mapped)
 *   qp.c     queue pairs: rings, WR processing, state machine (qp.h)
 *   cm.c     connection management: socket takeover, MPA exchange, listen
 *   rx.c     receive path: TCP read_sock actor -> sans-I/O parser -> placement
 *   tx.c     transmit path: FPDUs from pinned pages by reference
 *   es.c     extended sockets: IWARP_MODE on a TCP socket (TCP ULP)
 *   rsock.c  rsockets' stream protocol, sans-I/O (rsock.h)
 *   mpa.c ddp.c rdmap.c   sans-I/O protocol core (iwarp.h)
 */
#ifndef KW_KIWARP_H
#define KW_KIWARP_H

#include <linux/types.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/xarray.h>
#include <linux/rhashtable.h>
#include <linux/kref.h>
#include <linux/wait.h>
#include <linux/kfifo.h>
#include <linux/mm_types.h>
#include <linux/refcount.h>
#include <linux/bitops.h>
#include <linux/workqueue.h>

#include "../uapi/linux/kiwarp.h"
#include "kcompat.h"
#include "iwarp.h"

#define KW_MAX_PD	1024
#define KW_MAX_MR	65536
#define KW_MAX_CQ	1024
#define KW_MAX_QP	1024
#define KW_MAX_QP_WR	4096
#define KW_MAX_CQE	65536
#define KW_MAX_IRD	128	/* power of two */
#define KW_MAX_ORD	128	/* power of two */
#define KW_MAX_MR_SIZE	(1ULL << 32)	/* TOs within one MR fit u32 math */

/*
 * Transmit batches (tx.c): at most this many FPDUs, started while the
 * batch holds fewer than KW_TX_BATCH_BYTES, go to TCP in one call.
 */
#define KW_TX_BATCH_FPDUS	64
#define KW_TX_BATCH_BYTES	(64 * 1024)
#define KW_TX_BVEC_MIN		256	/* tx_bvec entries, at least */
#define KW_TX_BUDGET		64	/* batches per high-priority run (tx.c) */

/* mmap offset encoding: ((kind << 32) | handle) << PAGE_SHIFT */
enum kw_mmap_kind {
	KW_MMAP_CQ = 1,
	KW_MMAP_SQ = 2,
	KW_MMAP_RQ = 3,
};
#define KW_MMAP_OFFSET(kind, handle) \
	((((u64)(kind) << 32) | (u64)(handle)) << PAGE_SHIFT)

struct kw_paths;

/* One per open /dev/kiwarp file. */
struct kw_ctx {
	/*
	 * lock protects: membership of the object tables below and the
	 * cross-object use counts (kw_pd.users, kw_cq.users). Never held
	 * across a blocking network operation (MPA exchange, accept).
	 * mmap() takes it under mmap_lock: never fault user memory
	 * (copy_{to,from}_user, pin_user_pages) while holding it.
	 */
	struct mutex lock;
	struct xarray pds;	/* handle -> struct kw_pd */
	struct xarray mrs;	/* handle -> struct kw_mr */
	struct xarray cqs;	/* handle -> struct kw_cq */
	struct xarray qps;	/* handle -> struct kw_qp (qp.c) */
	struct xarray listeners;	/* handle -> struct kw_listener (cm.c) */

	/* CQ event channel: handles of CQs that fired while armed. */
	spinlock_t ev_lock;	/* protects ev_fifo */
	DECLARE_KFIFO(ev_fifo, u32, 1024);
	/* CQ handles currently in ev_fifo (each at most once), under ev_lock */
	unsigned long ev_pending[BITS_TO_LONGS(KW_MAX_CQ + 1)];
	wait_queue_head_t ev_wait;	/* poll()/read() sleepers */

	bool dying;		/* release() started */
	/*
	 * The QPs' path hints (tx.c): set once, when the first QP takes a
	 * socket, freed with the context. one_qp: an extended socket's
	 * context, which has nothing to share and no table.
	 */
	struct kw_paths *paths;
	bool one_qp;
	/* the CPU the owner last called in on (kw_ctx_note_cpu()) */
	int home_cpu;
};

/*
 * Note the caller's CPU as the context's home: a Read Response goes out
 * from there when the Read Request reached us in another task's time
 * (kw_qp_kick_tx_peer()). Any task, lockless: a stale value only picks a
 * worse CPU.
 */
static inline void kw_ctx_note_cpu(struct kw_ctx *ctx)
{
	int cpu = raw_smp_processor_id();

	if (READ_ONCE(ctx->home_cpu) != cpu)
		WRITE_ONCE(ctx->home_cpu, cpu);
}

struct kw_pd {
	u32 handle;
	u32 id;			/* device-wide unique, used in STag checks */
	u32 users;		/* MRs + QPs, under ctx->lock */
	struct kw_ctx *ctx;
};

/*
 * A charge of pages kiwarp holds for user space (pinned MR pages, ring and
 * extended-socket buffers) against RLIMIT_MEMLOCK. The limit is checked
 * against the total of the caller's account (kw_account_uid(): its uid,
 * the creator of its user namespace, or the container root made it for),
 * so neither fork, nor fds handed on by processes that exited, nor the
 * uids of a user namespace multiply it; the pages also show in VmPin of the charging task's mm (pinned_vm).
 * With CAP_IPC_LOCK there is no limit and the account is not charged.
 */
struct kw_memlock {
	kuid_t uid;			/* the account charged, if limited */
	bool limited;
	struct mm_struct *mm;		/* mmgrab()'ed */
	unsigned long npages;
};

/*
 * A registered memory region. Looked up by STag from any context (softirq
 * receive, tx worker, ioctl) under RCU with kw_mr_get(); the reference keeps
 * the pages pinned. Deregistration removes the STag from the table, then
 * drops the table's reference; pages are unpinned at the last put.
 */
struct kw_mr {
	struct kref ref;
	struct rcu_head rcu;
	struct rhash_head stag_node;	/* in the STag table (mem.c) */
	u32 handle;
	u32 stag;			/* its key: never changes */
	u32 pd_id;
	u32 access;		/* KIWARP_ACCESS_* */
	bool valid;		/* READ_ONCE/WRITE_ONCE: cleared by invalidate */
	bool dereg;		/* DEREG_MR checking wr_refs (kw_mr_dereg) */
	u64 addr;		/* base TO == user VA */
	u64 len;
	unsigned int page_off;	/* addr & ~PAGE_MASK */
	unsigned long npages;
	struct page **pages;
	struct kw_memlock memlock;	/* of the pinned pages; none with umem */
	struct kw_umem *umem;	/* kernel memory (kw_mr_reg_kernel): its
				 * reference keeps the pages and their charge */
	atomic_t wr_refs;	/* in-flight WRs using it: dereg -EBUSY */
	atomic_t active;	/* accesses in progress (kw_mr_access_begin) */
	struct kw_ctx *ctx;	/* only while in ctx->mrs (not after dereg) */
	struct kw_pd *pd;	/* only while in ctx->mrs; pd->users counts it */
	struct work_struct release_work;	/* last put: unpin (may sleep) */
	/*
	 * A remote-write window (kw_mr_window_*), for kernel MRs whose
	 * owner advertises parts of them: win packs offset << 32 | length,
	 * read in the receive path; win_on is set once, before the MR can
	 * be reached by a peer, and never cleared.
	 */
	bool win_on;
	atomic64_t win;
	/*
	 * A kernel MR whose owner never rewrites a byte of it that an skb
	 * may still hold (es.c's send buffer): Sends and Writes from it
	 * above copy_max go to TCP by page reference and complete once TCP
	 * has them (tx.c, tx_byref). The owner replaces pages that are
	 * still held instead of writing into them (kw_mr_replace_chunk),
	 * only while no WR uses them. Set before the MR's first use.
	 */
	bool tx_guarded;
};

/*
 * A completion queue. CQEs are produced from softirq (receive path) and
 * process context (tx worker, flush).
 */
struct kw_cq {
	struct kref ref;	/* the table's + one per bound QP */
	u32 handle;
	u32 users;		/* QPs bound, under ctx->lock */
	spinlock_t lock;	/* protects kprod, ring writes, armed */
	u32 entries;		/* power of two */
	u32 kprod;		/* the kernel's own producer index */
	u8 armed;		/* 0, or 1 + KIWARP_ARM_* */
	bool overflow;		/* sticky: every later post fails */
	struct kw_umem *umem;	/* header page + ring */
	void *mem;		/* its kernel address */
	size_t mem_size;	/* == mmap_size */
	u32 *prod, *cons;	/* in mem */
	struct kiwarp_cqe *ring;	/* in mem */
	struct kw_ctx *ctx;
	/* kernel consumer (es.c): called after each post with the CQE,
	 * cq->lock held, any context; set before the CQ's QP is connected */
	void (*notify)(void *arg, const struct kiwarp_cqe *cqe);
	void *notify_arg;
};

/* ---- dev.c */
int kw_dev_init(void);
void kw_dev_exit(void);
struct kw_ctx *kw_ctx_alloc(void);	/* ERR_PTR; in current's memcg */
void kw_ctx_free(struct kw_ctx *ctx);	/* process context, no locks */
void kw_paths_alloc(struct kw_ctx *ctx);	/* tx.c */
void kw_paths_free(struct kw_paths *t);

/* ---- mem.c */
int kw_pd_alloc(struct kw_ctx *ctx, struct kiwarp_handle *arg);
int kw_pd_dealloc(struct kw_ctx *ctx, struct kiwarp_handle *arg);
struct kw_pd *kw_pd_lookup(struct kw_ctx *ctx, u32 handle); /* ctx->lock held */
int kw_mr_reg(struct kw_ctx *ctx, struct kiwarp_reg_mr *arg);
int kw_mr_reg_at(struct kw_ctx *ctx, struct kiwarp_reg_mr *arg, u64 to);
int kw_mr_dereg(struct kw_ctx *ctx, struct kiwarp_handle *arg);
/*
 * Register pages [pg, pg + npages) of kernel memory u as an MR of PD
 * pd_handle whose TOs start at to (page aligned): for kernel consumers
 * (es.c). arg->pd and arg->access are used; handle and stag are returned
 * in it.
 */
int kw_mr_reg_kernel(struct kw_ctx *ctx, struct kw_umem *u, unsigned long pg,
		     unsigned long npages, u64 to, struct kiwarp_reg_mr *arg);
void kw_mr_destroy_all(struct kw_ctx *ctx);
void kw_pd_destroy_all(struct kw_ctx *ctx);
/* Lookup by STag from any context; NULL if unknown. */
struct kw_mr *kw_mr_get(u32 stag);
void kw_mr_put(struct kw_mr *mr);
/* Put and clear every non-NULL reference in mrs[0..n). */
static inline void kw_mr_put_array(struct kw_mr **mrs, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++) {
		if (mrs[i])
			kw_mr_put(mrs[i]);
		mrs[i] = NULL;
	}
}
/*
 * Bracket one bounded access to mr's memory on the peer's behalf (placement,
 * Read Response payload), with bottom halves disabled: begin fails once mr
 * is invalidated or deregistered, and revocation waits for the accesses in
 * progress.
 */
bool kw_mr_access_begin(struct kw_mr *mr);
void kw_mr_access_end(struct kw_mr *mr);
/* Fill the core's view of mr (validity, bounds, access, PD). */
void kw_mr_view(struct kw_mr *mr, struct kw_mr_view *v);
/*
 * Remote Writes to mr may land only in a ring interval of it (struct
 * kw_mr_view's window). kw_mr_window_set() sets it to [off, off + len)
 * modulo mr's length; kw_mr_window_move() takes the first take bytes off
 * its start and adds give bytes at its end. Any context, atomic with each
 * other: a segment is checked against the window before or after.
 */
void kw_mr_window_set(struct kw_mr *mr, u32 off, u32 len);
void kw_mr_window_move(struct kw_mr *mr, u32 take, u32 give);
/* Copy to/from the pinned pages at byte offset off from mr->addr. The
 * caller has checked bounds. Safe in softirq (kmap_local_page). */
void kw_mr_copy_to(struct kw_mr *mr, u64 off, const void *src, size_t len);
void kw_mr_copy_from(struct kw_mr *mr, u64 off, void *dst, size_t len);
/* Page and in-page offset holding byte off; *avail = bytes to page end. */
struct page *kw_mr_page(struct kw_mr *mr, u64 off, unsigned int *pg_off,
			unsigned int *avail);
/* The owner of a tx_guarded kernel MR over chunks replaces the chunk at
 * page idx by head (see kw_mr); the old head, or NULL if out of it. */
struct page *kw_mr_replace_chunk(struct kw_mr *mr, unsigned long idx,
				 struct page *head);
/*
 * Invalidate stag (local LOCAL_INV, or remote Send with Invalidate) and wait
 * for accesses in progress; bottom halves disabled. Fails with -ENOENT
 * (unknown), -EACCES (other PD), -EINVAL (already invalid).
 */
int kw_mr_invalidate(u32 stag, u32 pd_id);
/* Charge npages to current (process context). -ENOMEM past the limit,
 * -EFAULT without an mm (a kernel thread). */
int kw_memlock_charge(struct kw_memlock *ml, unsigned long npages);
/* Give back what kw_memlock_charge took (process context: a mutex). */
void kw_memlock_uncharge(struct kw_memlock *ml);
/* Wait until every deregistered MR's pages are unpinned (process ctx). */
void kw_mem_flush(void);
int kw_mem_init(void);
void kw_mem_exit(void);

/*
 * Layout of every ring (CQ, SQ, RQ): the producer and consumer indices on
 * separate cache lines of the first page, the entries from the second.
 */
#define KW_RING_PROD_OFF	0
#define KW_RING_CONS_OFF	64
#define KW_RING_ENTRIES_OFF	PAGE_SIZE

/* ---- umem.c */
struct kw_umem;
/* Zeroed ring memory of size bytes charged to current (kw_memlock_charge);
 * ERR_PTR on failure. */
struct kw_umem *kw_umem_alloc(size_t size, void **vaddr);
struct kw_umem *kw_umem_alloc_chunks(size_t size, unsigned int order);
void kw_umem_put(struct kw_umem *u);	/* NULL is fine; process context */
void kw_umem_get(struct kw_umem *u);
unsigned long kw_umem_npages(const struct kw_umem *u);
struct page *kw_umem_page(const struct kw_umem *u, unsigned long i);
struct page *kw_umem_replace_chunk(struct kw_umem *u, unsigned long i,
				   struct page *head);
unsigned long kw_umem_chunk_pages(const struct kw_umem *u);
int kw_umem_mmap(struct kw_umem *u, struct vm_area_struct *vma);

/* ---- cq.c */
void kw_cq_get(struct kw_cq *cq);
void kw_cq_put(struct kw_cq *cq);
int kw_cq_create(struct kw_ctx *ctx, struct kiwarp_create_cq *arg);
int kw_cq_destroy(struct kw_ctx *ctx, struct kiwarp_handle *arg);
int kw_cq_arm(struct kw_ctx *ctx, struct kiwarp_arm_cq *arg);
struct kw_cq *kw_cq_lookup(struct kw_ctx *ctx, u32 handle); /* ctx->lock held */
int kw_cq_mmap(struct kw_cq *cq, struct vm_area_struct *vma);
void kw_cq_destroy_all(struct kw_ctx *ctx);
/*
 * Append one CQE; any context. Returns 0, or -ENOSPC if the ring is full
 * (the CQE is dropped, cq->overflow set; the caller moves the QP to ERROR).
 * Wakes the event channel if armed (solicited: only for solicited or error).
 */
int kw_cq_post(struct kw_cq *cq, const struct kiwarp_cqe *cqe, bool solicited);
/* Kernel consumers: a callback per CQE, and taking CQEs (1 or 0 if none)
 * from a CQ no user space maps; one consumer at a time. */
void kw_cq_set_notify(struct kw_cq *cq,
		      void (*fn)(void *arg, const struct kiwarp_cqe *cqe),
		      void *arg);
int kw_cq_poll_kernel(struct kw_cq *cq, struct kiwarp_cqe *cqe);

/* ---- qp.c / cm.c (see qp.h) */
struct kw_qp;
int kw_qp_create(struct kw_ctx *ctx, struct kiwarp_create_qp *arg);
int kw_qp_destroy(struct kw_ctx *ctx, struct kiwarp_handle *arg);
int kw_qp_doorbell(struct kw_ctx *ctx, struct kiwarp_handle *arg);
int kw_qp_query(struct kw_ctx *ctx, struct kiwarp_query_qp *arg);
int kw_qp_modify(struct kw_ctx *ctx, struct kiwarp_modify_qp *arg);
int kw_qp_mmap(struct kw_ctx *ctx, u32 handle, enum kw_mmap_kind kind,
	       struct vm_area_struct *vma);
void kw_qp_destroy_all(struct kw_ctx *ctx);
int kw_cm_connect(struct kw_ctx *ctx, struct kiwarp_connect *arg);
void kw_cm_result_param(const struct kw_mpa_result *r,
			struct kiwarp_conn_param *p);
int kw_cm_accept(struct kw_ctx *ctx, struct kiwarp_accept *arg);
int kw_cm_accept_reply(struct kw_ctx *ctx, struct kiwarp_accept_reply *arg);
int kw_cm_listen(struct kw_ctx *ctx, struct kiwarp_listen *arg);
int kw_cm_listen_destroy(struct kw_ctx *ctx, struct kiwarp_handle *arg);
void kw_cm_listen_destroy_all(struct kw_ctx *ctx);
int kw_qp_init(void);
void kw_qp_exit(void);
void kw_tx_exit(void);

/* ---- rx.c: the patched kernel's TCP hook (patches/), looked up at load;
 * the module parameter tcp_hooks=0 leaves it unused */
void kw_tcp_hooks_init(void);
void kw_tcp_hooks_exit(void);
bool kw_tcp_hooks(void);

/* ---- ucount.c: per-account counts with a limit */
struct kw_ucount {
	struct mutex lock;
	struct xarray xa;	/* uid -> xa_mk_value(count), non-zero only */
};
#define KW_UCOUNT_INIT(name) {						\
	.lock = __MUTEX_INITIALIZER((name).lock),			\
	.xa = XARRAY_INIT((name).xa, 0),				\
}
/* The account of the caller's charges: its uid, or for the uids of a user
 * namespace its creator (or, root's, the container's uid 0). Process
 * context. */
kuid_t kw_account_uid(void);
/* Add n to uid's count: 0, -EMFILE past limit, or -ENOMEM. Process
 * context (a mutex), as kw_ucount_sub. */
int kw_ucount_add(struct kw_ucount *uc, kuid_t uid, unsigned long n,
		  unsigned long limit);
void kw_ucount_sub(struct kw_ucount *uc, kuid_t uid, unsigned long n);
static inline int kw_ucount_charge(struct kw_ucount *uc, kuid_t uid,
				   unsigned long limit)
{
	return kw_ucount_add(uc, uid, 1, limit);
}
static inline void kw_ucount_uncharge(struct kw_ucount *uc, kuid_t uid)
{
	kw_ucount_sub(uc, uid, 1);
}
/* Module exit: every charge was given back. */
void kw_ucount_destroy(struct kw_ucount *uc);

/* ---- es.c: extended sockets (the "kiwarp" TCP ULP) */
int kw_es_init(void);
void kw_es_exit(void);
struct attribute_group;
extern const struct attribute_group kw_es_attr_group;

/* Zero-check helper for reserved ABI fields. */
static inline bool kw_mem_is_zero(const void *p, size_t len)
{
	const u8 *b = p;

	while (len--)
		if (*b++)
			return false;
	return true;
}

#endif /* KW_KIWARP_H */
