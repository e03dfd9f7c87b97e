// SPDX-License-Identifier: GPL-2.0
/*
 * Completion queues.
 *
 * A CQ is a ring of struct kiwarp_cqe in ring memory (umem.c) that user
 * space maps read/write. Layout (reported through struct kiwarp_create_cq):
 *
 *   offset 0          u32 prod    written by the kernel (store-release)
 *   offset 64         u32 cons    written by user space
 *   offset PAGE_SIZE  ring        entries * 32 bytes
 *
 * prod and cons sit on separate cache lines. The kernel keeps its own
 * producer index (kprod) and only ever reads cons, which it does not trust:
 * a consumer index claiming more free space than possible is treated as a
 * full ring. Nothing user space writes into the mapping can make the kernel
 * write outside the ring.
 *
 * The ring is charged to RLIMIT_MEMLOCK of the task that creates it (its
 * account's total, kw_memlock_charge; not the device's opener, which may
 * have exited and passed its fd on), like the pinned memory of MRs, and
 * to the creator's memory cgroup, for as long as it exists: a mapping
 * outlives DESTROY_CQ and keeps the charge.
 *
 * Lifetime: the context's table holds one reference, every QP bound to the
 * CQ one more (taken at CREATE_QP, dropped when the QP is freed), so a QP
 * never posts into a freed CQ. DESTROY_CQ is refused while QPs are bound
 * (cq->users, under ctx->lock). A CQ that overran stays in error: every
 * later post fails, so each bound QP goes to ERROR at its next completion.
 *
 * Events: an armed CQ that receives a matching completion disarms and queues
 * its handle on ctx->ev_fifo, once (ctx->ev_pending), and wakes poll()/read()
 * on the context file (dev.c).
 */
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/vmalloc.h>
#include <linux/log2.h>
#include <linux/cache.h>

#include "kiwarp.h"

#define CQ_PROD_OFF	KW_RING_PROD_OFF
#define CQ_CONS_OFF	KW_RING_CONS_OFF
#define CQ_RING_OFF	KW_RING_ENTRIES_OFF

/* cq->armed values */
#define CQ_DISARMED	0
#define CQ_ARMED(flags)	(1 + (flags))

struct kw_cq *kw_cq_lookup(struct kw_ctx *ctx, u32 handle)
{
	lockdep_assert_held(&ctx->lock);
	return xa_load(&ctx->cqs, handle);
}

/* Remove handle from the event fifo if it is queued there. */
static void cq_purge_event(struct kw_ctx *ctx, u32 handle)
{
	unsigned int n;
	u32 h;

	spin_lock_irq(&ctx->ev_lock);
	if (__test_and_clear_bit(handle, ctx->ev_pending)) {
		/* Rotate the fifo once, dropping handle. */
		for (n = kfifo_len(&ctx->ev_fifo); n; n--) {
			if (!kfifo_get(&ctx->ev_fifo, &h))
				break;
			if (h != handle)
				kfifo_put(&ctx->ev_fifo, h);
		}
	}
	spin_unlock_irq(&ctx->ev_lock);
}

static void cq_free(struct kref *ref)
{
	struct kw_cq *cq = container_of(ref, struct kw_cq, ref);

	/* A mapping still holds the ring (and its charge) until munmap. */
	kw_umem_put(cq->umem);
	kfree(cq);
}

void kw_cq_get(struct kw_cq *cq)
{
	kref_get(&cq->ref);
}

void kw_cq_put(struct kw_cq *cq)
{
	kref_put(&cq->ref, cq_free);
}

int kw_cq_create(struct kw_ctx *ctx, struct kiwarp_create_cq *arg)
{
	struct kw_cq *cq;
	u32 entries;
	size_t size;
	int ret;

	BUILD_BUG_ON(CQ_CONS_OFF + sizeof(u32) > CQ_RING_OFF);

	if (arg->reserved)
		return -EINVAL;
	if (!arg->entries || arg->entries > KW_MAX_CQE)
		return -EINVAL;
	entries = roundup_pow_of_two(arg->entries);
	size = PAGE_ALIGN(CQ_RING_OFF +
			  (size_t)entries * sizeof(struct kiwarp_cqe));

	cq = kzalloc(sizeof(*cq), GFP_KERNEL_ACCOUNT);
	if (!cq)
		return -ENOMEM;
	kref_init(&cq->ref);
	spin_lock_init(&cq->lock);
	cq->entries = entries;
	cq->ctx = ctx;
	cq->mem_size = size;

	/* zeroed: prod == cons == 0 */
	cq->umem = kw_umem_alloc(size, &cq->mem);
	if (IS_ERR(cq->umem)) {
		ret = PTR_ERR(cq->umem);
		cq->umem = NULL;
		goto err_put;
	}
	cq->prod = cq->mem + CQ_PROD_OFF;
	cq->cons = cq->mem + CQ_CONS_OFF;
	cq->ring = cq->mem + CQ_RING_OFF;

	/* Destroy takes ctx->lock: cq is not freed until it is dropped. */
	mutex_lock(&ctx->lock);
	ret = xa_alloc(&ctx->cqs, &cq->handle, cq, XA_LIMIT(1, KW_MAX_CQ),
		       GFP_KERNEL_ACCOUNT);
	if (ret) {
		mutex_unlock(&ctx->lock);
		ret = ret == -EBUSY ? -ENOSPC : ret;
		goto err_put;
	}
	arg->handle = cq->handle;
	arg->mmap_offset = KW_MMAP_OFFSET(KW_MMAP_CQ, cq->handle);
	mutex_unlock(&ctx->lock);

	arg->ring_entries = entries;
	arg->prod_off = CQ_PROD_OFF;
	arg->cons_off = CQ_CONS_OFF;
	arg->ring_off = CQ_RING_OFF;
	arg->mmap_size = size;
	return 0;

err_put:
	kw_cq_put(cq);
	return ret;
}

int kw_cq_destroy(struct kw_ctx *ctx, struct kiwarp_handle *arg)
{
	struct kw_cq *cq;
	int ret = 0;

	if (arg->reserved)
		return -EINVAL;

	mutex_lock(&ctx->lock);
	cq = kw_cq_lookup(ctx, arg->handle);
	if (!cq)
		ret = -EINVAL;
	else if (cq->users)
		ret = -EBUSY;
	else
		xa_erase(&ctx->cqs, cq->handle);
	mutex_unlock(&ctx->lock);
	if (ret)
		return ret;

	/* No QP is bound (users == 0): nobody posts to cq any more. */
	cq_purge_event(ctx, cq->handle);
	kw_cq_put(cq);
	return 0;
}

void kw_cq_destroy_all(struct kw_ctx *ctx)
{
	struct kw_cq *cq;
	unsigned long idx;

	mutex_lock(&ctx->lock);
	xa_for_each(&ctx->cqs, idx, cq) {
		xa_erase(&ctx->cqs, idx);
		WARN_ON_ONCE(cq->users);
		cq_purge_event(ctx, cq->handle);
		kw_cq_put(cq);
	}
	mutex_unlock(&ctx->lock);
}

int kw_cq_arm(struct kw_ctx *ctx, struct kiwarp_arm_cq *arg)
{
	unsigned long flags;
	struct kw_cq *cq;
	int ret = 0;

	if (arg->flags != KIWARP_ARM_NEXT && arg->flags != KIWARP_ARM_SOLICITED)
		return -EINVAL;

	mutex_lock(&ctx->lock);
	cq = kw_cq_lookup(ctx, arg->cq);
	if (cq) {
		spin_lock_irqsave(&cq->lock, flags);
		/* A pending NEXT request is not narrowed by SOLICITED. */
		if (cq->armed != CQ_ARMED(KIWARP_ARM_NEXT))
			cq->armed = CQ_ARMED(arg->flags);
		spin_unlock_irqrestore(&cq->lock, flags);
	} else {
		ret = -EINVAL;
	}
	mutex_unlock(&ctx->lock);
	return ret;
}

/* Called with ctx->lock held (dev.c), which keeps cq alive. */
int kw_cq_mmap(struct kw_cq *cq, struct vm_area_struct *vma)
{
	return kw_umem_mmap(cq->umem, vma);
}

/* Queue cq's handle on the context's event channel (cq->lock held). */
static void cq_signal(struct kw_cq *cq)
{
	struct kw_ctx *ctx = cq->ctx;

	spin_lock(&ctx->ev_lock);
	if (!__test_and_set_bit(cq->handle, ctx->ev_pending) &&
	    !kfifo_put(&ctx->ev_fifo, cq->handle))
		/* Cannot happen: the fifo holds every CQ handle once. */
		__clear_bit(cq->handle, ctx->ev_pending);
	spin_unlock(&ctx->ev_lock);
	wake_up_interruptible(&ctx->ev_wait);
}

int kw_cq_post(struct kw_cq *cq, const struct kiwarp_cqe *cqe, bool solicited)
{
	unsigned long flags;
	u32 used;
	bool fire;

	spin_lock_irqsave(&cq->lock, flags);

	/*
	 * Never trust cons: a bogus value just reads as a full ring. The
	 * acquire pairs with user space's store-release of cons, so it is
	 * done reading a slot before we overwrite it.
	 */
	used = cq->kprod - smp_load_acquire(cq->cons);
	if (used >= cq->entries || cq->overflow) {
		cq->overflow = true;
		spin_unlock_irqrestore(&cq->lock, flags);
		return -ENOSPC;
	}

	/* a struct copy, not a call to the kernel's byte-wise memcpy */
	cq->ring[cq->kprod & (cq->entries - 1)] = *cqe;
	/*
	 * Publish the CQE: pairs with the load-acquire of prod in the
	 * library's kw_poll_cq(), which then reads the entry.
	 */
	smp_store_release(cq->prod, ++cq->kprod);

	fire = cq->armed == CQ_ARMED(KIWARP_ARM_NEXT) ||
	       (cq->armed == CQ_ARMED(KIWARP_ARM_SOLICITED) &&
		(solicited || cqe->status != KIWARP_WC_SUCCESS));
	if (fire) {
		cq->armed = CQ_DISARMED;
		cq_signal(cq);
	}
	if (cq->notify)
		cq->notify(cq->notify_arg, cqe);

	spin_unlock_irqrestore(&cq->lock, flags);
	return 0;
}

void kw_cq_set_notify(struct kw_cq *cq,
		      void (*fn)(void *arg, const struct kiwarp_cqe *cqe),
		      void *arg)
{
	unsigned long flags;

	spin_lock_irqsave(&cq->lock, flags);
	cq->notify = fn;
	cq->notify_arg = arg;
	spin_unlock_irqrestore(&cq->lock, flags);
}

int kw_cq_poll_kernel(struct kw_cq *cq, struct kiwarp_cqe *cqe)
{
	unsigned long flags;
	u32 prod, cons;
	int ret = 0;

	/*
	 * Under cq->lock: a CQE is taken only once kw_cq_post() is done with
	 * it, notify included (es.c moves its receive window there before
	 * the consumer may act on the completion).
	 */
	spin_lock_irqsave(&cq->lock, flags);
	prod = smp_load_acquire(cq->prod);
	cons = *cq->cons;
	if (prod != cons) {
		*cqe = cq->ring[cons & (cq->entries - 1)];
		/* the slot is free again: pairs with kw_cq_post()'s acquire */
		smp_store_release(cq->cons, cons + 1);
		ret = 1;
	}
	spin_unlock_irqrestore(&cq->lock, flags);
	return ret;
}
