// SPDX-License-Identifier: GPL-2.0
/*
 * Kernel memory shared with user space: the CQ, SQ and RQ rings.
 *
 * A ring is a set of zeroed pages allocated with __GFP_ACCOUNT (charged to
 * the memory cgroup of the task that creates the ring), mapped contiguously
 * into the kernel with vmap() and into user space with vm_map_pages_zero().
 * It is charged to RLIMIT_MEMLOCK of the creating task's account (and shows
 * in its VmPin; kw_memlock_charge) from allocation until the pages are
 * freed.
 *
 * Lifetime: the owning object (CQ or QP) holds one reference, every VMA
 * that maps the ring holds one (vm_ops open/close; a split, a move or a
 * fork adds one through open). Destroying the object while user space
 * still maps its ring therefore keeps the pages, and their charge, until
 * the last munmap. The last put runs in process context (vunmap sleeps).
 *
 * Extended sockets (es.c) keep their buffers in such memory too. Their
 * send buffer has no mapping at all (kw_umem_alloc_chunks): TCP takes its
 * pages by reference, and es.c replaces a chunk that an skb still holds
 * rather than rewrite it (kw_umem_replace_chunk). The page count and its
 * memlock charge stay the same; each chunk's memcg charge goes with the
 * chunk, whoever frees it last.
 */
#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>

#include "kiwarp.h"

struct kw_umem {
	refcount_t ref;
	void *vaddr;		/* vmap() of pages */
	struct page **pages;
	unsigned long npages;
	unsigned int order;	/* of its chunks; > 0: kw_umem_alloc_chunks */
	struct kw_memlock memlock;	/* charged for npages */
};

/* Our reference to each chunk (a page, at order 0): an skb may hold one
 * of an extended socket's send buffer still, and frees it. */
static void umem_free_pages(struct page **pages, unsigned long n,
			    unsigned int order)
{
	unsigned long i;

	for (i = 0; i < n; i += 1UL << order)
		put_page(pages[i]);
	kvfree(pages);
}

/* size bytes in zeroed chunks of 2^order pages (compound if order > 0),
 * mapped into the kernel if map */
static struct kw_umem *umem_alloc(size_t size, unsigned int order, bool map)
{
	unsigned long i, j, npages = PAGE_ALIGN(size) >> PAGE_SHIFT;
	gfp_t gfp = GFP_KERNEL_ACCOUNT | __GFP_ZERO | (order ? __GFP_COMP : 0);
	struct kw_umem *u;
	int ret;

	if (!npages || npages & ((1UL << order) - 1))
		return ERR_PTR(-EINVAL);
	u = kzalloc(sizeof(*u), GFP_KERNEL_ACCOUNT);
	if (!u)
		return ERR_PTR(-ENOMEM);
	ret = kw_memlock_charge(&u->memlock, npages);
	if (ret)
		goto err_free;
	ret = -ENOMEM;
	u->pages = kvcalloc(npages, sizeof(*u->pages), GFP_KERNEL_ACCOUNT);
	if (!u->pages)
		goto err_unaccount;
	for (i = 0; i < npages; i += 1UL << order) {
		struct page *head = alloc_pages(gfp, order);

		if (!head)
			goto err_pages;
		/* a compound page's struct pages are consecutive */
		for (j = 0; j < 1UL << order; j++)
			u->pages[i + j] = head + j;
	}
	if (map) {
		u->vaddr = vmap(u->pages, npages, VM_MAP, PAGE_KERNEL);
		if (!u->vaddr)
			goto err_pages;
	}
	u->npages = npages;
	u->order = order;
	refcount_set(&u->ref, 1);
	return u;

err_pages:
	umem_free_pages(u->pages, i, order);
err_unaccount:
	kw_memlock_uncharge(&u->memlock);
err_free:
	kfree(u);
	return ERR_PTR(ret);
}

struct kw_umem *kw_umem_alloc(size_t size, void **vaddr)
{
	struct kw_umem *u = umem_alloc(size, 0, true);

	if (!IS_ERR(u))
		*vaddr = u->vaddr;
	return u;
}

/*
 * size bytes (a multiple of the chunk) in zeroed compound chunks of
 * 2^order pages, charged as kw_umem_alloc's, with no kernel mapping and
 * never mapped to user space: the owner may replace a chunk
 * (kw_umem_replace_chunk). Compound, so that a receiver on this host
 * cannot map a page it got in an skb into its address space
 * (TCP_ZEROCOPY_RECEIVE takes only order-0 pages) and keep it.
 */
struct kw_umem *kw_umem_alloc_chunks(size_t size, unsigned int order)
{
	if (!order)
		return ERR_PTR(-EINVAL);
	return umem_alloc(size, order, false);
}

void kw_umem_put(struct kw_umem *u)
{
	might_sleep();
	if (!u || !refcount_dec_and_test(&u->ref))
		return;
	if (u->vaddr)
		vunmap(u->vaddr);
	umem_free_pages(u->pages, u->npages, u->order);
	kw_memlock_uncharge(&u->memlock);
	kfree(u);
}

void kw_umem_get(struct kw_umem *u)
{
	refcount_inc(&u->ref);
}

unsigned long kw_umem_npages(const struct kw_umem *u)
{
	return u->npages;
}

struct page *kw_umem_page(const struct kw_umem *u, unsigned long i)
{
	return u->pages[i];
}

/* Pages per chunk: 1 unless kw_umem_alloc_chunks. */
unsigned long kw_umem_chunk_pages(const struct kw_umem *u)
{
	return 1UL << u->order;
}

/*
 * Put the chunk head (of u's order) in place of the one at page i of u
 * (kw_umem_alloc_chunks) and return the head it replaces: the caller owns
 * that reference now. NULL, nothing replaced, if i is not a chunk of u.
 * Under the owner's lock (es.c: es->lock).
 */
struct page *kw_umem_replace_chunk(struct kw_umem *u, unsigned long i,
				   struct page *head)
{
	struct page *old;
	unsigned long j;

	if (WARN_ON_ONCE(!u->order || i >= u->npages ||
			 i & ((1UL << u->order) - 1)))
		return NULL;
	old = u->pages[i];
	for (j = 0; j < 1UL << u->order; j++)
		u->pages[i + j] = head + j;
	return old;
}

static void umem_vm_open(struct vm_area_struct *vma)
{
	struct kw_umem *u = vma->vm_private_data;

	refcount_inc(&u->ref);
}

static void umem_vm_close(struct vm_area_struct *vma)
{
	kw_umem_put(vma->vm_private_data);
}

static const struct vm_operations_struct umem_vm_ops = {
	.open = umem_vm_open,
	.close = umem_vm_close,
};

/*
 * Map all of u into vma: shared, never executable, never grown, not in
 * core dumps. The VMA must cover exactly the ring.
 */
int kw_umem_mmap(struct kw_umem *u, struct vm_area_struct *vma)
{
	int ret;

	if (vma_pages(vma) != u->npages || !u->vaddr)
		return -EINVAL;
	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	if (vma->vm_flags & VM_EXEC)
		return -EPERM;
	vm_flags_clear(vma, VM_MAYEXEC);
	vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	ret = vm_map_pages_zero(vma, u->pages, u->npages);
	if (ret)
		return ret;
	vma->vm_private_data = u;
	vma->vm_ops = &umem_vm_ops;
	refcount_inc(&u->ref);	/* the mapping's, dropped by close */
	return 0;
}
