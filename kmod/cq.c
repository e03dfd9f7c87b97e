// SPDX-License-Identifier: GPL-2.0
/*
 * Completion queues.
 *
 * A CQ is a ring of struct kiwarp_cqe in vmalloc_user() memory that user
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
 * The mapping is charged to the opener's RLIMIT_MEMLOCK (ctx->mm pinned_vm),
 * like the pinned memory of MRs.
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

#define CQ_PROD_OFF	0
#define CQ_CONS_OFF	64
#define CQ_RING_OFF	PAGE_SIZE

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

static void cq_free(struct kw_ctx *ctx, struct kw_cq *cq)
{
	/*
	 * Pages still mapped by user space stay alive through the mapping's
	 * page references; vfree() only drops ours.
	 */
	vfree(cq->mem);
	kw_unaccount_pinned(ctx->mm, cq->mem_size >> PAGE_SHIFT);
	kfree(cq);
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
	spin_lock_init(&cq->lock);
	cq->entries = entries;
	cq->ctx = ctx;
	cq->mem_size = size;

	ret = kw_account_pinned(ctx->mm, size >> PAGE_SHIFT);
	if (ret)
		goto err_free_cq;

	cq->mem = vmalloc_user(size);	/* zeroed: prod == cons == 0 */
	if (!cq->mem) {
		ret = -ENOMEM;
		goto err_unaccount;
	}
	cq->prod = cq->mem + CQ_PROD_OFF;
	cq->cons = cq->mem + CQ_CONS_OFF;
	cq->ring = cq->mem + CQ_RING_OFF;

	mutex_lock(&ctx->lock);
	ret = xa_alloc(&ctx->cqs, &cq->handle, cq, XA_LIMIT(1, KW_MAX_CQ),
		       GFP_KERNEL);
	mutex_unlock(&ctx->lock);
	if (ret) {
		ret = ret == -EBUSY ? -ENOSPC : ret;
		goto err_vfree;
	}

	arg->handle = cq->handle;
	arg->ring_entries = entries;
	arg->prod_off = CQ_PROD_OFF;
	arg->cons_off = CQ_CONS_OFF;
	arg->ring_off = CQ_RING_OFF;
	arg->mmap_offset = KW_MMAP_OFFSET(KW_MMAP_CQ, cq->handle);
	arg->mmap_size = size;
	return 0;

err_vfree:
	vfree(cq->mem);
err_unaccount:
	kw_unaccount_pinned(ctx->mm, size >> PAGE_SHIFT);
err_free_cq:
	kfree(cq);
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
	cq_free(ctx, cq);
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
		cq_free(ctx, cq);
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
	if (vma->vm_end - vma->vm_start != cq->mem_size)
		return -EINVAL;
	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	if (vma->vm_flags & VM_EXEC)
		return -EPERM;

	vma->vm_flags &= ~VM_MAYEXEC;
	vma->vm_flags |= VM_DONTEXPAND | VM_DONTDUMP;
	return remap_vmalloc_range(vma, cq->mem, 0);
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
	if (used >= cq->entries) {
		cq->overflow = true;
		spin_unlock_irqrestore(&cq->lock, flags);
		return -ENOSPC;
	}

	memcpy(&cq->ring[cq->kprod & (cq->entries - 1)], cqe, sizeof(*cqe));
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

	spin_unlock_irqrestore(&cq->lock, flags);
	return 0;
}
