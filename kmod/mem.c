// SPDX-License-Identifier: GPL-2.0
/*
 * Protection domains and memory regions.
 *
 * PDs are per-context objects with a device-wide unique id (from an IDA),
 * which is what the protocol core compares when a tagged access names an
 * STag: an MR and a QP match when their PD ids are equal.
 *
 * MRs pin user memory for their whole life. An MR is reachable two ways:
 *  - by handle, in ctx->mrs (ioctl only, under ctx->lock);
 *  - by STag, in the device-wide kw_stags hash table, from any context
 *    (softirq receive, tx worker, ioctl) with kw_mr_get(), which takes a
 *    kref under RCU. The STag table holds one reference.
 * Deregistration erases both entries and drops the table's reference. The
 * last kw_mr_put() may run in softirq, but unpinning dirties pages (which
 * locks them, so may sleep): it is deferred to kw_mem_wq. The struct itself
 * is freed after an RCU grace period because kw_mr_get() may still be
 * looking at it.
 *
 * Revocation (RFC 5042 section 5): holding a reference keeps the pages, not
 * the right to touch them. Every access on behalf of the peer, or into a
 * buffer the peer fills (placement in rx.c, Read Response payload in tx.c),
 * is bracketed by kw_mr_access_begin()/end(), which fails once the MR is
 * invalid. An access is one copy of at most one FPDU with bottom halves
 * disabled (never preempted, never across a socket wait), so revocation
 * (deregistration, Local Invalidate, Send with Invalidate) clears valid and
 * then spins until the accesses in progress on other CPUs are done: when
 * it returns, nothing reads or writes the memory any more on the peer's
 * behalf (RFC 5042 section 6.2.2).
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/highmem.h>
#include <linux/idr.h>
#include <linux/overflow.h>
#include <linux/random.h>
#include <linux/jhash.h>
#include <linux/rcupdate.h>
#include <linux/capability.h>
#include <linux/backing-dev.h>
#include <linux/pagemap.h>

#include "kiwarp.h"

/*
 * STag -> struct kw_mr, device-wide. Writers (process context only) take
 * its bucket locks inside rhashtable; readers use RCU (kw_mr_get). A hash
 * table rather than an xarray: STags are random 32-bit values, so every
 * xarray lookup descended six levels, twice per message (the sender's
 * lkey, the receiver's STag; tools/dev/insncount.md counted ~260
 * instructions each).
 */
/*
 * Mixed with the table's secret seed: a user who keeps only the MRs whose
 * STags share some bits must not be able to build long chains (a plain
 * XOR would keep equal low bits equal, whatever the seed).
 */
static u32 stag_hash(const void *data, u32 len, u32 seed)
{
	return jhash_1word(*(const u32 *)data, seed);
}

static int stag_cmp(struct rhashtable_compare_arg *arg, const void *obj)
{
	const struct kw_mr *mr = obj;

	return mr->stag != *(const u32 *)arg->key;
}

static const struct rhashtable_params kw_stag_params = {
	.key_len = sizeof(u32),
	.key_offset = offsetof(struct kw_mr, stag),
	.head_offset = offsetof(struct kw_mr, stag_node),
	.hashfn = stag_hash,
	.obj_cmpfn = stag_cmp,
	.automatic_shrinking = true,
};
static struct rhashtable kw_stags;
/* Device-wide unique PD ids; internally locked. */
static DEFINE_IDA(kw_pd_ida);
/* Deferred MR release (unpin may sleep; the last put may be in softirq). */
static struct workqueue_struct *kw_mem_wq;

/* Pages pinned per pin_user_pages_fast() call (one page of page pointers). */
#define PIN_CHUNK	(PAGE_SIZE / sizeof(struct page *))
/* Attempts at drawing an unused random STag before giving up. */
#define STAG_TRIES	16

/* ------------------------------------------------------------ accounting */

/* Pages held for user space per account (kw_account_uid()), in pages. */
static struct kw_ucount kw_memlock_users = KW_UCOUNT_INIT(kw_memlock_users);

int kw_memlock_charge(struct kw_memlock *ml, unsigned long npages)
{
	int ret;

	if (!current->mm)
		return -EFAULT;
	ml->limited = !capable(CAP_IPC_LOCK);
	if (ml->limited) {
		ml->uid = kw_account_uid();
		ret = kw_ucount_add(&kw_memlock_users, ml->uid, npages,
				    rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT);
		if (ret)
			return ret == -EMFILE ? -ENOMEM : ret;
	}
	ml->mm = current->mm;
	mmgrab(ml->mm);
	ml->npages = npages;
	atomic64_add(npages, &ml->mm->pinned_vm);
	return 0;
}

void kw_memlock_uncharge(struct kw_memlock *ml)
{
	might_sleep();
	if (!ml->mm)
		return;
	atomic64_sub(ml->npages, &ml->mm->pinned_vm);
	mmdrop(ml->mm);
	if (ml->limited)
		kw_ucount_sub(&kw_memlock_users, ml->uid, ml->npages);
	memset(ml, 0, sizeof(*ml));
}

/* -------------------------------------------------------------------- PD */

int kw_pd_alloc(struct kw_ctx *ctx, struct kiwarp_handle *arg)
{
	struct kw_pd *pd;
	int ret;

	if (arg->reserved)
		return -EINVAL;

	pd = kzalloc(sizeof(*pd), GFP_KERNEL_ACCOUNT);
	if (!pd)
		return -ENOMEM;
	pd->ctx = ctx;

	ret = ida_alloc_min(&kw_pd_ida, 1, GFP_KERNEL);
	if (ret < 0)
		goto err_free;
	pd->id = ret;

	/* DEALLOC_PD takes ctx->lock: pd lives until it is dropped. */
	mutex_lock(&ctx->lock);
	ret = xa_alloc(&ctx->pds, &pd->handle, pd, XA_LIMIT(1, KW_MAX_PD),
		       GFP_KERNEL_ACCOUNT);
	if (!ret)
		arg->handle = pd->handle;
	mutex_unlock(&ctx->lock);
	if (ret) {
		ret = ret == -EBUSY ? -ENOSPC : ret;
		goto err_ida;
	}
	return 0;

err_ida:
	ida_free(&kw_pd_ida, pd->id);
err_free:
	kfree(pd);
	return ret == -EBUSY ? -ENOSPC : ret;
}

struct kw_pd *kw_pd_lookup(struct kw_ctx *ctx, u32 handle)
{
	lockdep_assert_held(&ctx->lock);
	return xa_load(&ctx->pds, handle);
}

static void pd_free(struct kw_pd *pd)
{
	ida_free(&kw_pd_ida, pd->id);
	kfree(pd);
}

int kw_pd_dealloc(struct kw_ctx *ctx, struct kiwarp_handle *arg)
{
	struct kw_pd *pd;
	int ret = 0;

	if (arg->reserved)
		return -EINVAL;

	mutex_lock(&ctx->lock);
	pd = kw_pd_lookup(ctx, arg->handle);
	if (!pd)
		ret = -EINVAL;
	else if (pd->users)
		ret = -EBUSY;
	else
		xa_erase(&ctx->pds, pd->handle);
	mutex_unlock(&ctx->lock);

	if (!ret)
		pd_free(pd);
	return ret;
}

void kw_pd_destroy_all(struct kw_ctx *ctx)
{
	struct kw_pd *pd;
	unsigned long idx;

	mutex_lock(&ctx->lock);
	xa_for_each(&ctx->pds, idx, pd) {
		xa_erase(&ctx->pds, idx);
		WARN_ON_ONCE(pd->users);
		pd_free(pd);
	}
	mutex_unlock(&ctx->lock);
}

/* -------------------------------------------------------------------- MR */

static bool mr_writable(const struct kw_mr *mr)
{
	return mr->access & KIWARP_ACCESS_LOCAL_WRITE;
}

static void mr_release_work(struct work_struct *work)
{
	struct kw_mr *mr = container_of(work, struct kw_mr, release_work);

	if (mr->umem) {
		kvfree(mr->pages);
		kw_umem_put(mr->umem);
		kfree_rcu(mr, rcu);
		return;
	}
	unpin_user_pages_dirty_lock(mr->pages, mr->npages, mr_writable(mr));
	kvfree(mr->pages);
	kw_memlock_uncharge(&mr->memlock);
	/* kw_mr_get() may still be inspecting mr under RCU. */
	kfree_rcu(mr, rcu);
}

static void mr_release(struct kref *ref)
{
	struct kw_mr *mr = container_of(ref, struct kw_mr, ref);

	/* Any context: defer the unpin, which may sleep. */
	queue_work(kw_mem_wq, &mr->release_work);
}

void kw_mr_put(struct kw_mr *mr)
{
	kref_put(&mr->ref, mr_release);
}

/* Process context, no locks: the last put unpins and uncharges at once. */
static void mr_release_now(struct kref *ref)
{
	struct kw_mr *mr = container_of(ref, struct kw_mr, ref);

	might_sleep();
	mr_release_work(&mr->release_work);
}

struct kw_mr *kw_mr_get(u32 stag)
{
	struct kw_mr *mr;

	rcu_read_lock();
	mr = rhashtable_lookup(&kw_stags, &stag, kw_stag_params);
	if (mr && !kref_get_unless_zero(&mr->ref))
		mr = NULL;
	rcu_read_unlock();
	return mr;
}

/*
 * A writable long-term pin of page-cache pages of a file system that writes
 * back is refused (as upstream GUP does since 6.5): the file system cannot
 * track the writes we would make to them. Checked on the pinned pages, so
 * it cannot be raced with mmap(). Anonymous memory, private copies and
 * shmem/ramfs (no writeback) are fine.
 */
static bool mr_pages_ok(struct kw_mr *mr, unsigned long n)
{
	unsigned long i;

	if (!mr_writable(mr))
		return true;
	for (i = 0; i < n; i++) {
		struct folio *folio = page_folio(mr->pages[i]);
		struct address_space *mapping;

		if (folio_test_anon(folio))
			continue;
		mapping = folio_mapping(folio);
		if (mapping && mapping->host && mapping_can_writeback(mapping))
			return false;
	}
	return true;
}

/*
 * Since 6.5 GUP itself refuses a writable long-term pin of such page cache,
 * with -EFAULT. Whether that is why the pin at addr failed decides only the
 * error code, the same on every kernel (-EOPNOTSUPP): the pages that a
 * successful pin returns are what mr_pages_ok() checks.
 */
static bool mr_writeback_vma(unsigned long addr)
{
	struct mm_struct *mm = current->mm;
	struct vm_area_struct *vma;
	bool ret = false;

	mmap_read_lock(mm);
	vma = vma_lookup(mm, addr);
	if (vma && vma->vm_file && (vma->vm_flags & VM_SHARED) &&
	    mapping_can_writeback(vma->vm_file->f_mapping))
		ret = true;
	mmap_read_unlock(mm);
	return ret;
}

/* Pin every page of [mr->addr, +len) into mr->pages. */
static int mr_pin(struct kw_mr *mr)
{
	unsigned int gup_flags = FOLL_LONGTERM;
	unsigned long start = mr->addr & PAGE_MASK;
	unsigned long pinned = 0;
	int ret;

	if (mr_writable(mr))
		gup_flags |= FOLL_WRITE;

	while (pinned < mr->npages) {
		int n = min_t(unsigned long, mr->npages - pinned, PIN_CHUNK);

		if (fatal_signal_pending(current)) {
			ret = -EINTR;
			goto err_unpin;
		}
		/* May pin fewer pages than asked: loop on what is left. */
		ret = pin_user_pages_fast(start + (pinned << PAGE_SHIFT), n,
					  gup_flags, mr->pages + pinned);
		if (ret <= 0) {
			ret = ret ?: -EFAULT;
			if (ret == -EFAULT && mr_writable(mr) &&
			    mr_writeback_vma(start + (pinned << PAGE_SHIFT)))
				ret = -EOPNOTSUPP;
			goto err_unpin;
		}
		pinned += ret;
	}
	if (!mr_pages_ok(mr, pinned)) {
		ret = -EOPNOTSUPP;
		goto err_unpin;
	}
	return 0;

err_unpin:
	unpin_user_pages(mr->pages, pinned);
	return ret;
}

/* Insert mr into the STag table under a fresh random non-zero STag. */
static int mr_assign_stag(struct kw_mr *mr)
{
	int tries, ret = -EEXIST;

	for (tries = 0; tries < STAG_TRIES && ret == -EEXIST; tries++) {
		u32 stag = get_random_u32();

		if (!stag)
			continue;
		mr->stag = stag;
		ret = rhashtable_lookup_insert_fast(&kw_stags, &mr->stag_node,
						    kw_stag_params);
	}
	if (ret == -EEXIST)
		return -ENOSPC;
	/* the table could not grow in time (-EBUSY): out of memory */
	return ret ? -ENOMEM : 0;
}

static int mr_validate(const struct kiwarp_reg_mr *arg)
{
	u64 end;

	if (arg->reserved || arg->access & ~KIWARP_ACCESS_ALL)
		return -EINVAL;
	if ((arg->access & KIWARP_ACCESS_REMOTE_WRITE) &&
	    !(arg->access & KIWARP_ACCESS_LOCAL_WRITE))
		return -EINVAL;
	if (!arg->length || arg->length > KW_MAX_MR_SIZE)
		return -EINVAL;
	if (check_add_overflow(arg->addr, arg->length, &end) ||
	    end > TASK_SIZE_MAX)
		return -EINVAL;
	return 0;
}

/* A new MR, not yet published: access rights and TO range. */
static struct kw_mr *mr_new(u32 access, u64 addr, u64 len)
{
	struct kw_mr *mr = kzalloc(sizeof(*mr), GFP_KERNEL_ACCOUNT);

	if (!mr)
		return NULL;
	kref_init(&mr->ref);
	atomic_set(&mr->wr_refs, 0);
	INIT_WORK(&mr->release_work, mr_release_work);
	mr->access = access;
	mr->addr = addr;
	mr->len = len;
	return mr;
}

/*
 * Enter an initialised mr in ctx's table and the STag table (which makes
 * it reachable by the peer), charging its PD. On failure nothing is
 * published and mr is still the caller's.
 */
static int mr_publish(struct kw_ctx *ctx, struct kw_mr *mr,
		      struct kiwarp_reg_mr *arg)
{
	struct kw_pd *pd;
	int ret;

	mutex_lock(&ctx->lock);
	pd = kw_pd_lookup(ctx, arg->pd);
	if (!pd) {
		ret = -EINVAL;
		goto out_unlock;
	}
	mr->pd = pd;
	mr->pd_id = pd->id;
	mr->ctx = ctx;
	WRITE_ONCE(mr->valid, true);
	ret = xa_alloc(&ctx->mrs, &mr->handle, mr, XA_LIMIT(1, KW_MAX_MR),
		       GFP_KERNEL_ACCOUNT);
	if (ret) {
		ret = ret == -EBUSY ? -ENOSPC : ret;
		goto out_unlock;
	}
	/* Publishes mr to kw_mr_get(): everything above is initialised. */
	ret = mr_assign_stag(mr);
	if (ret) {
		xa_erase(&ctx->mrs, mr->handle);
		goto out_unlock;
	}
	pd->users++;
	arg->handle = mr->handle;
	arg->stag = mr->stag;
out_unlock:
	mutex_unlock(&ctx->lock);
	return ret;
}

static int mr_reg_user(struct kw_ctx *ctx, struct kiwarp_reg_mr *arg, u64 to);

int kw_mr_reg(struct kw_ctx *ctx, struct kiwarp_reg_mr *arg)
{
	return mr_reg_user(ctx, arg, arg->addr);
}

/*
 * For the kernel's own use: the same registration, but addressed by the
 * peer (and by local SGEs) from TO to rather than from the user address,
 * so that a peer given its STag does not learn where the memory is.
 */
int kw_mr_reg_at(struct kw_ctx *ctx, struct kiwarp_reg_mr *arg, u64 to)
{
	u64 end;

	if (check_add_overflow(to, arg->length, &end))
		return -EINVAL;
	return mr_reg_user(ctx, arg, to);
}

static int mr_reg_user(struct kw_ctx *ctx, struct kiwarp_reg_mr *arg, u64 to)
{
	struct kw_mr *mr;
	int ret;

	ret = mr_validate(arg);
	if (ret)
		return ret;
	if (!current->mm)
		return -EFAULT;

	mr = mr_new(arg->access, arg->addr, arg->length);
	if (!mr)
		return -ENOMEM;
	mr->page_off = arg->addr & ~PAGE_MASK;
	mr->npages = ((arg->addr + arg->length - 1) >> PAGE_SHIFT) -
		     (arg->addr >> PAGE_SHIFT) + 1;
	/* Pages are pinned in the caller's mm, charged to the caller. */
	ret = kw_memlock_charge(&mr->memlock, mr->npages);
	if (ret)
		goto err_free;

	mr->pages = kvmalloc_array(mr->npages, sizeof(*mr->pages),
				   GFP_KERNEL_ACCOUNT);
	if (!mr->pages) {
		ret = -ENOMEM;
		goto err_unaccount;
	}

	/*
	 * Pin without ctx->lock: faulting takes mmap_lock, and mmap() takes
	 * ctx->lock under mmap_lock.
	 */
	ret = mr_pin(mr);
	if (ret)
		goto err_free_pages;
	mr->addr = to;		/* the TO base, from now on */

	ret = mr_publish(ctx, mr, arg);
	if (ret)
		goto err_unpin;
	return 0;

err_unpin:
	unpin_user_pages(mr->pages, mr->npages);
err_free_pages:
	kvfree(mr->pages);
err_unaccount:
	kw_memlock_uncharge(&mr->memlock);
err_free:
	kfree(mr);
	return ret;
}

/*
 * Kernel memory is neither pinned nor charged again: the umem reference
 * keeps its pages, and their memlock and memcg charge, for the MR's life.
 */
int kw_mr_reg_kernel(struct kw_ctx *ctx, struct kw_umem *u, unsigned long pg,
		     unsigned long npages, u64 to, struct kiwarp_reg_mr *arg)
{
	struct kw_mr *mr;
	unsigned long i;
	int ret;

	if (!npages || pg + npages < pg || pg + npages > kw_umem_npages(u) ||
	    (to & ~PAGE_MASK) || arg->access & ~KIWARP_ACCESS_ALL)
		return -EINVAL;
	mr = mr_new(arg->access, to, (u64)npages << PAGE_SHIFT);
	if (!mr)
		return -ENOMEM;
	mr->npages = npages;
	mr->pages = kvmalloc_array(npages, sizeof(*mr->pages),
				   GFP_KERNEL_ACCOUNT);
	if (!mr->pages) {
		kfree(mr);
		return -ENOMEM;
	}
	for (i = 0; i < npages; i++)
		mr->pages[i] = kw_umem_page(u, pg + i);
	kw_umem_get(u);
	mr->umem = u;
	ret = mr_publish(ctx, mr, arg);
	if (ret) {
		kvfree(mr->pages);
		kw_umem_put(u);
		kfree(mr);
	}
	return ret;
}

bool kw_mr_access_begin(struct kw_mr *mr)
{
	lockdep_assert_once(in_softirq() || irqs_disabled());
	atomic_inc(&mr->active);
	/* Pairs with the xchg() in mr_revoke() and kw_mr_invalidate(). */
	smp_mb__after_atomic();
	if (likely(READ_ONCE(mr->valid)))
		return true;
	kw_mr_access_end(mr);
	return false;
}

void kw_mr_access_end(struct kw_mr *mr)
{
	atomic_dec(&mr->active);
}

/*
 * After valid was cleared: wait for the accesses that began before. They
 * run on other CPUs (ours has bottom halves off or cannot be inside one),
 * each a bounded copy, so spinning is short.
 */
static void mr_wait_idle(struct kw_mr *mr)
{
	while (atomic_read(&mr->active))
		cpu_relax();
}

/* No access starts after this returns, and none is still running. */
static void mr_revoke(struct kw_mr *mr)
{
	xchg(&mr->valid, false);	/* full barrier, pairs with begin */
	local_bh_disable();
	mr_wait_idle(mr);
	local_bh_enable();
}

/* Unlink mr from both tables and drop the table's reference. */
static void mr_unlink(struct kw_ctx *ctx, struct kw_mr *mr)
{
	lockdep_assert_held(&ctx->lock);
	rhashtable_remove_fast(&kw_stags, &mr->stag_node, kw_stag_params);
	xa_erase(&ctx->mrs, mr->handle);
	/*
	 * mr->pd and mr->ctx dangle from here on: holders of a reference
	 * use mr->pd_id and never follow them.
	 */
	mr->pd->users--;
	kw_mr_put(mr);
}

int kw_mr_dereg(struct kw_ctx *ctx, struct kiwarp_handle *arg)
{
	struct kw_mr *mr;
	int ret = 0;

	if (arg->reserved)
		return -EINVAL;

	mutex_lock(&ctx->lock);
	mr = xa_load(&ctx->mrs, arg->handle);
	if (!mr) {
		ret = -EINVAL;
	} else {
		/*
		 * A WR increments wr_refs, then checks dereg (qp.c
		 * wr_resolve_sges()); we set dereg, then check wr_refs. With a
		 * full barrier on both sides at least one sees the other:
		 * the WR fails, or DEREG_MR returns -EBUSY.
		 */
		WRITE_ONCE(mr->dereg, true);
		smp_mb();
		if (atomic_read(&mr->wr_refs)) {
			WRITE_ONCE(mr->dereg, false);
			ret = -EBUSY;
		}
	}
	if (!ret) {
		kref_get(&mr->ref);	/* ours, for the wait below */
		mr_unlink(ctx, mr);
	}
	mutex_unlock(&ctx->lock);
	if (ret)
		return ret;
	mr_revoke(mr);
	/*
	 * Usually the last reference: then the pages are unpinned and
	 * RLIMIT_MEMLOCK uncharged before DEREG_MR returns, so registering
	 * again right away is not refused for memory just given back.
	 */
	kref_put(&mr->ref, mr_release_now);
	return 0;
}

void kw_mr_destroy_all(struct kw_ctx *ctx)
{
	struct kw_mr *mr;
	unsigned long idx;

	/* QPs are destroyed and flushed by now: wr_refs no longer matter. */
	mutex_lock(&ctx->lock);
	xa_for_each(&ctx->mrs, idx, mr)
		mr_unlink(ctx, mr);
	mutex_unlock(&ctx->lock);
}

void kw_mem_flush(void)
{
	flush_workqueue(kw_mem_wq);
}

void kw_mr_view(struct kw_mr *mr, struct kw_mr_view *v)
{
	/* KW_ACC_* (core) and KIWARP_ACCESS_* (ABI) are the same bits. */
	BUILD_BUG_ON((KW_ACC_LOCAL_WRITE ^ KIWARP_ACCESS_LOCAL_WRITE) |
		     (KW_ACC_REMOTE_WRITE ^ KIWARP_ACCESS_REMOTE_WRITE) |
		     (KW_ACC_REMOTE_READ ^ KIWARP_ACCESS_REMOTE_READ));

	v->cookie = mr;
	v->stag = mr->stag;
	v->pd = mr->pd_id;
	v->access = mr->access;
	v->valid = READ_ONCE(mr->valid);
	v->base = mr->addr;
	v->len = mr->len;
	v->windowed = smp_load_acquire(&mr->win_on);
	v->win_off = 0;
	v->win_len = 0;
	if (v->windowed) {
		u64 w = atomic64_read(&mr->win);

		v->win_off = upper_32_bits(w);
		v->win_len = lower_32_bits(w);
	}
}

void kw_mr_window_set(struct kw_mr *mr, u32 off, u32 len)
{
	atomic64_set(&mr->win, (u64)off << 32 | len);
	/* pairs with kw_mr_view(): a windowed view sees a window */
	if (!READ_ONCE(mr->win_on))
		smp_store_release(&mr->win_on, true);
}

void kw_mr_window_move(struct kw_mr *mr, u32 take, u32 give)
{
	/* windowed MRs are small kernel buffers: u32 arithmetic */
	u32 size = min_t(u64, mr->len, SZ_1G);
	s64 old = atomic64_read(&mr->win);
	u32 off, len, t;

	do {
		off = upper_32_bits(old);
		len = lower_32_bits(old);
		t = min(take, len);
		off = (off + t) % size;	/* both below 2^30 */
		len = min_t(u64, (u64)len - t + give, size);
	} while (!atomic64_try_cmpxchg(&mr->win, &old, (u64)off << 32 | len));
}

/* Locate byte off of mr: page index and offset within that page. */
static void mr_locate(const struct kw_mr *mr, u64 off, unsigned long *idx,
		      unsigned int *pg_off)
{
	u64 abs = mr->page_off + off;

	*idx = abs >> PAGE_SHIFT;
	*pg_off = abs & ~PAGE_MASK;
}

/*
 * The last byte of each copy is stored after all the others. The receive
 * path places a message's segments in order, so a message's last byte
 * becomes visible after the rest of it: an application that polls the
 * last byte of its buffer for a peer's RDMA Write (riostream; the tail
 * flag of MPI eager protocols) then finds the whole message, as with an
 * RNIC that writes in order. The RFCs promise no order within a message
 * (DDP may place segments in any order, RFC 5041), and memcpy() keeps
 * none: x86-64's, from Linux 6.2 on CPUs without FSRM, copies backward
 * when the source's low address byte is below the destination's
 * (selftests/vm/kw_rdma write_last_byte_placed_last). Out-of-order
 * placement (tcp_hooks) makes no such promise either. The cost is one
 * byte stored apart and a write barrier per copy.
 */
void kw_mr_copy_to(struct kw_mr *mr, u64 off, const void *src, size_t len)
{
	unsigned int pg_off;
	unsigned long idx;

	mr_locate(mr, off, &idx, &pg_off);
	while (len) {
		size_t n = min_t(size_t, len, PAGE_SIZE - pg_off);
		struct page *page = mr->pages[idx];
		u8 *p = kmap_local_page(page);

		if (n == len) {
			memcpy(p + pg_off, src, n - 1);
			smp_wmb();	/* the rest before the last byte */
			WRITE_ONCE(p[pg_off + n - 1], ((const u8 *)src)[n - 1]);
		} else {
			memcpy(p + pg_off, src, n);
		}
		kunmap_local(p);
		flush_dcache_page(page);
		src += n;
		len -= n;
		pg_off = 0;
		idx++;
	}
}

void kw_mr_copy_from(struct kw_mr *mr, u64 off, void *dst, size_t len)
{
	unsigned int pg_off;
	unsigned long idx;

	mr_locate(mr, off, &idx, &pg_off);
	while (len) {
		size_t n = min_t(size_t, len, PAGE_SIZE - pg_off);
		void *p = kmap_local_page(mr->pages[idx]);

		memcpy(dst, p + pg_off, n);
		kunmap_local(p);
		dst += n;
		len -= n;
		pg_off = 0;
		idx++;
	}
}

struct page *kw_mr_page(struct kw_mr *mr, u64 off, unsigned int *pg_off,
			unsigned int *avail)
{
	unsigned long idx;

	mr_locate(mr, off, &idx, pg_off);
	*avail = PAGE_SIZE - *pg_off;
	return READ_ONCE(mr->pages[idx]);	/* kw_mr_replace_chunk() */
}

/*
 * The send buffer's owner (es.c) replaces a chunk that an skb still holds,
 * while no WR uses it, in the MR's umem and in the MR (whose page idx must
 * be the umem's: registered from its first page): transmits of other WRs
 * read other slots meanwhile. Returns the old chunk's head, whose
 * reference the caller owns now, or NULL with nothing changed.
 */
struct page *kw_mr_replace_chunk(struct kw_mr *mr, unsigned long idx,
				 struct page *head)
{
	unsigned long j, n;
	struct page *old;

	if (WARN_ON_ONCE(!mr->tx_guarded || !mr->umem || idx >= mr->npages ||
			 mr->pages[idx] != kw_umem_page(mr->umem, idx)))
		return NULL;
	n = kw_umem_chunk_pages(mr->umem);
	if (WARN_ON_ONCE(n > mr->npages - idx))
		return NULL;
	old = kw_umem_replace_chunk(mr->umem, idx, head);
	if (!old)
		return NULL;
	for (j = 0; j < n; j++)
		WRITE_ONCE(mr->pages[idx + j], head + j);
	return old;
}

int kw_mr_invalidate(u32 stag, u32 pd_id)
{
	struct kw_mr *mr;
	int ret = 0;

	mr = kw_mr_get(stag);
	if (!mr)
		return -ENOENT;
	if (mr->pd_id != pd_id)
		ret = -EACCES;
	else if (!xchg(&mr->valid, false))	/* exactly one winner */
		ret = -EINVAL;
	else
		mr_wait_idle(mr);	/* callers run with bottom halves off */
	kw_mr_put(mr);
	return ret;
}

/* ------------------------------------------------------------ module */

int kw_mem_init(void)
{
	int ret = rhashtable_init(&kw_stags, &kw_stag_params);

	if (ret)
		return ret;
	kw_mem_wq = alloc_workqueue("kiwarp_mr", WQ_UNBOUND, 0);
	if (!kw_mem_wq) {
		rhashtable_destroy(&kw_stags);
		return -ENOMEM;
	}
	return 0;
}

void kw_mem_exit(void)
{
	/*
	 * Runs every pending MR release (none can be queued any more: no
	 * files are open and the QP layer has exited).
	 */
	destroy_workqueue(kw_mem_wq);
	kw_ucount_destroy(&kw_memlock_users);
	WARN_ON(atomic_read(&kw_stags.nelems));
	rhashtable_destroy(&kw_stags);
	ida_destroy(&kw_pd_ida);
}
