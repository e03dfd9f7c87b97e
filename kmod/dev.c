// SPDX-License-Identifier: GPL-2.0
/*
 * /dev/kiwarp: one struct kw_ctx per open file.
 *
 * The file is the root of every object's lifetime: release() tears down
 * listeners, QPs, CQs, MRs and PDs in dependency order. Mappings of rings
 * hold a reference to the file, so release() never runs while a ring is
 * mapped, and no ioctl is running either (the syscall holds the file).
 *
 * Lock order (outermost first):
 *   mmap_lock  ->  ctx->lock  ->  cq->lock  ->  ctx->ev_lock
 * mmap() is called with mmap_lock held and takes ctx->lock, so nothing may
 * fault user memory (copy_{to,from}_user, pin_user_pages) under ctx->lock.
 * The ioctl dispatcher copies arguments in and out outside of any lock.
 */
#include <linux/module.h>
#include <linux/miscdevice.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <linux/poll.h>
#include <linux/uaccess.h>
#include <linux/nospec.h>

#include "kiwarp.h"

/* Every command's argument; the dispatcher copies _IOC_SIZE(cmd) bytes. */
union kw_ioctl_arg {
	struct kiwarp_query query;
	struct kiwarp_handle handle;
	struct kiwarp_reg_mr reg_mr;
	struct kiwarp_create_cq create_cq;
	struct kiwarp_arm_cq arm_cq;
	struct kiwarp_create_qp create_qp;
	struct kiwarp_connect connect;
	struct kiwarp_accept accept;
	struct kiwarp_accept_reply accept_reply;
	struct kiwarp_listen listen;
	struct kiwarp_query_qp query_qp;
	struct kiwarp_modify_qp modify_qp;
};

/*
 * The full command word for each command number: rejects wrong sizes and
 * directions as well as unknown numbers.
 */
static const unsigned int ioctl_cmds[] = {
	[_IOC_NR(KIWARP_IOC_QUERY)] = KIWARP_IOC_QUERY,
	[_IOC_NR(KIWARP_IOC_ALLOC_PD)] = KIWARP_IOC_ALLOC_PD,
	[_IOC_NR(KIWARP_IOC_DEALLOC_PD)] = KIWARP_IOC_DEALLOC_PD,
	[_IOC_NR(KIWARP_IOC_REG_MR)] = KIWARP_IOC_REG_MR,
	[_IOC_NR(KIWARP_IOC_DEREG_MR)] = KIWARP_IOC_DEREG_MR,
	[_IOC_NR(KIWARP_IOC_CREATE_CQ)] = KIWARP_IOC_CREATE_CQ,
	[_IOC_NR(KIWARP_IOC_DESTROY_CQ)] = KIWARP_IOC_DESTROY_CQ,
	[_IOC_NR(KIWARP_IOC_ARM_CQ)] = KIWARP_IOC_ARM_CQ,
	[_IOC_NR(KIWARP_IOC_CREATE_QP)] = KIWARP_IOC_CREATE_QP,
	[_IOC_NR(KIWARP_IOC_DESTROY_QP)] = KIWARP_IOC_DESTROY_QP,
	[_IOC_NR(KIWARP_IOC_CONNECT)] = KIWARP_IOC_CONNECT,
	[_IOC_NR(KIWARP_IOC_ACCEPT)] = KIWARP_IOC_ACCEPT,
	[_IOC_NR(KIWARP_IOC_ACCEPT_REPLY)] = KIWARP_IOC_ACCEPT_REPLY,
	[_IOC_NR(KIWARP_IOC_LISTEN)] = KIWARP_IOC_LISTEN,
	[_IOC_NR(KIWARP_IOC_DESTROY_LISTEN)] = KIWARP_IOC_DESTROY_LISTEN,
	[_IOC_NR(KIWARP_IOC_QP_DOORBELL)] = KIWARP_IOC_QP_DOORBELL,
	[_IOC_NR(KIWARP_IOC_QUERY_QP)] = KIWARP_IOC_QUERY_QP,
	[_IOC_NR(KIWARP_IOC_MODIFY_QP)] = KIWARP_IOC_MODIFY_QP,
};

#define KW_FEATURES	(KIWARP_FEAT_MPA_REV1 | KIWARP_FEAT_MPA_REV2 | \
			 KIWARP_FEAT_CRC | KIWARP_FEAT_RTR_SEND | \
			 KIWARP_FEAT_RTR_WRITE | KIWARP_FEAT_RTR_READ | \
			 KIWARP_FEAT_SOCKET_CONVERT | KIWARP_FEAT_KERNEL_CM | \
			 KIWARP_FEAT_ZCOPY_TX | KIWARP_FEAT_DIRECT_RX | \
			 KIWARP_FEAT_MARKERS)

static int dev_query(struct kiwarp_query *q)
{
	/* Output only; the dispatcher zeroed every field, reserved ones too. */
	q->abi_version = KIWARP_ABI_VERSION;
	q->page_size = PAGE_SIZE;
	q->features = KW_FEATURES |
		      (kw_tcp_hooks() ? KIWARP_FEAT_TCP_HOOKS : 0);
	q->max_mr_size = KW_MAX_MR_SIZE;
	q->max_qp = KW_MAX_QP;
	q->max_cq = KW_MAX_CQ;
	q->max_mr = KW_MAX_MR;
	q->max_pd = KW_MAX_PD;
	q->max_qp_wr = KW_MAX_QP_WR;
	q->max_cqe = KW_MAX_CQE;
	q->max_sge = KIWARP_MAX_SGE;
	q->max_ird = KW_MAX_IRD;
	q->max_ord = KW_MAX_ORD;
	q->max_private_data = KIWARP_MAX_PRIVATE_DATA;
	q->max_inline = 0;
	return 0;
}

/* Every command but the doorbell, which dev_ioctl() takes itself. */
static long dev_dispatch(struct kw_ctx *ctx, unsigned int cmd,
			 union kw_ioctl_arg *a)
{
	switch (cmd) {
	case KIWARP_IOC_QUERY:
		return dev_query(&a->query);
	case KIWARP_IOC_ALLOC_PD:
		return kw_pd_alloc(ctx, &a->handle);
	case KIWARP_IOC_DEALLOC_PD:
		return kw_pd_dealloc(ctx, &a->handle);
	case KIWARP_IOC_REG_MR:
		return kw_mr_reg(ctx, &a->reg_mr);
	case KIWARP_IOC_DEREG_MR:
		return kw_mr_dereg(ctx, &a->handle);
	case KIWARP_IOC_CREATE_CQ:
		return kw_cq_create(ctx, &a->create_cq);
	case KIWARP_IOC_DESTROY_CQ:
		return kw_cq_destroy(ctx, &a->handle);
	case KIWARP_IOC_ARM_CQ:
		return kw_cq_arm(ctx, &a->arm_cq);
	case KIWARP_IOC_CREATE_QP:
		return kw_qp_create(ctx, &a->create_qp);
	case KIWARP_IOC_DESTROY_QP:
		return kw_qp_destroy(ctx, &a->handle);
	case KIWARP_IOC_CONNECT:
		return kw_cm_connect(ctx, &a->connect);
	case KIWARP_IOC_ACCEPT:
		return kw_cm_accept(ctx, &a->accept);
	case KIWARP_IOC_ACCEPT_REPLY:
		return kw_cm_accept_reply(ctx, &a->accept_reply);
	case KIWARP_IOC_LISTEN:
		return kw_cm_listen(ctx, &a->listen);
	case KIWARP_IOC_DESTROY_LISTEN:
		return kw_cm_listen_destroy(ctx, &a->handle);
	case KIWARP_IOC_QUERY_QP:
		return kw_qp_query(ctx, &a->query_qp);
	case KIWARP_IOC_MODIFY_QP:
		return kw_qp_modify(ctx, &a->modify_qp);
	}
	return -ENOTTY;
}

/*
 * Whether the (out) argument goes back to user space after ret. A rejected
 * CONNECT still returns the peer's private data length and parameters.
 */
static bool dev_copy_out(unsigned int cmd, long ret)
{
	if (!(_IOC_DIR(cmd) & _IOC_READ))
		return false;
	return !ret || (cmd == KIWARP_IOC_CONNECT && ret == -ECONNREFUSED);
}

static long dev_ioctl(struct file *file, unsigned int cmd, unsigned long uarg)
{
	struct kw_ctx *ctx = file->private_data;
	void __user *up = (void __user *)uarg;
	/* only its first size bytes are used: cleared below */
	union kw_ioctl_arg arg __uninitialized;
	unsigned int nr = _IOC_NR(cmd);
	size_t size = _IOC_SIZE(cmd);
	long ret;

	if (_IOC_TYPE(cmd) != KIWARP_IOC_MAGIC || nr >= ARRAY_SIZE(ioctl_cmds))
		return -ENOTTY;
	nr = array_index_nospec(nr, ARRAY_SIZE(ioctl_cmds));
	if (ioctl_cmds[nr] != cmd)
		return -ENOTTY;
	if (WARN_ON_ONCE(size > sizeof(arg)))
		return -ENOTTY;
	kw_ctx_note_cpu(ctx);

	if (cmd == KIWARP_IOC_QP_DOORBELL) {
		/* the hot command: a fixed-size copy in, nothing out */
		struct kiwarp_handle h;

		if (copy_from_user(&h, up, sizeof(h)))
			return -EFAULT;
		return kw_qp_doorbell(ctx, &h);
	}

	/*
	 * Only the command's own member (size bytes: the command word was
	 * matched exactly) is used and copied back; clearing just that
	 * spares the doorbell, the hot command, a clear of the whole union.
	 */
	memset(&arg, 0, size);
	if ((_IOC_DIR(cmd) & _IOC_WRITE) && copy_from_user(&arg, up, size))
		return -EFAULT;

	ret = dev_dispatch(ctx, cmd, &arg);

	if (dev_copy_out(cmd, ret) && copy_to_user(up, &arg, size))
		return -EFAULT;
	return ret;
}

static int dev_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct kw_ctx *ctx = file->private_data;
	u32 kind = upper_32_bits((u64)vma->vm_pgoff);
	u32 handle = lower_32_bits((u64)vma->vm_pgoff);
	struct kw_cq *cq;
	int ret;

	switch (kind) {
	case KW_MMAP_CQ:
		mutex_lock(&ctx->lock);
		cq = kw_cq_lookup(ctx, handle);
		ret = cq ? kw_cq_mmap(cq, vma) : -EINVAL;
		mutex_unlock(&ctx->lock);
		return ret;
	case KW_MMAP_SQ:
	case KW_MMAP_RQ:
		return kw_qp_mmap(ctx, handle, kind, vma);
	}
	return -EINVAL;
}

static __poll_t dev_poll(struct file *file, struct poll_table_struct *wait)
{
	struct kw_ctx *ctx = file->private_data;

	kw_ctx_note_cpu(ctx);
	poll_wait(file, &ctx->ev_wait, wait);
	return kfifo_is_empty(&ctx->ev_fifo) ? 0 : EPOLLIN | EPOLLRDNORM;
}

/* Events moved per ev_lock hold; bounds the stack buffer in dev_read(). */
#define READ_BATCH	64

/* Pop up to max pending CQ handles into buf. */
static size_t dev_pop_events(struct kw_ctx *ctx, u32 *buf, size_t max)
{
	size_t n = 0;

	spin_lock_irq(&ctx->ev_lock);
	while (n < max && kfifo_get(&ctx->ev_fifo, &buf[n])) {
		if (!WARN_ON_ONCE(buf[n] > KW_MAX_CQ))
			__clear_bit(buf[n], ctx->ev_pending);
		n++;
	}
	spin_unlock_irq(&ctx->ev_lock);
	return n;
}

/* read(): a sequence of __u32 CQ handles whose CQs fired while armed. */
static ssize_t dev_read(struct file *file, char __user *ubuf, size_t count,
			loff_t *ppos)
{
	struct kw_ctx *ctx = file->private_data;
	u32 buf[READ_BATCH];
	size_t want = count / sizeof(u32), done = 0, n;
	int ret;

	if (count % sizeof(u32))
		return -EINVAL;
	if (!want)
		return 0;
	kw_ctx_note_cpu(ctx);

	while (!done) {
		if (kfifo_is_empty(&ctx->ev_fifo)) {
			if (file->f_flags & O_NONBLOCK)
				return -EAGAIN;
			ret = wait_event_interruptible(ctx->ev_wait,
						       !kfifo_is_empty(&ctx->ev_fifo));
			if (ret)
				return ret;
		}
		/* Another reader may have raced us: loop if n == 0. */
		while (done < want) {
			n = dev_pop_events(ctx, buf,
					   min_t(size_t, want - done,
						 READ_BATCH));
			if (!n)
				break;
			if (copy_to_user(ubuf + done * sizeof(u32), buf,
					 n * sizeof(u32)))
				return done ? done * sizeof(u32) : -EFAULT;
			done += n;
		}
	}
	return done * sizeof(u32);
}

/*
 * A context: the root of a set of objects. One per open /dev/kiwarp file,
 * and one per extended socket (es.c). Kernel ring memory is charged to the
 * task that creates each ring (cq.c, kw_memlock_charge), not to the opener.
 */
struct kw_ctx *kw_ctx_alloc(void)
{
	struct kw_ctx *ctx;

	if (!current->mm)
		return ERR_PTR(-EINVAL);

	ctx = kzalloc(sizeof(*ctx), GFP_KERNEL_ACCOUNT);
	if (!ctx)
		return ERR_PTR(-ENOMEM);

	mutex_init(&ctx->lock);
	xa_init_flags(&ctx->pds, XA_FLAGS_ALLOC1);
	xa_init_flags(&ctx->mrs, XA_FLAGS_ALLOC1);
	xa_init_flags(&ctx->cqs, XA_FLAGS_ALLOC1);
	xa_init_flags(&ctx->qps, XA_FLAGS_ALLOC1);
	xa_init_flags(&ctx->listeners, XA_FLAGS_ALLOC1);
	spin_lock_init(&ctx->ev_lock);
	INIT_KFIFO(ctx->ev_fifo);
	init_waitqueue_head(&ctx->ev_wait);
	ctx->home_cpu = raw_smp_processor_id();
	return ctx;
}

/* Tear down everything in ctx and free it; process context, no locks. */
void kw_ctx_free(struct kw_ctx *ctx)
{
	WRITE_ONCE(ctx->dying, true);

	/* Dependency order: users before what they use. */
	kw_cm_listen_destroy_all(ctx);
	kw_qp_destroy_all(ctx);
	kw_cq_destroy_all(ctx);
	kw_mr_destroy_all(ctx);
	kw_pd_destroy_all(ctx);
	/* Unpin now, so memlock is given back once close() returns. */
	kw_mem_flush();

	xa_destroy(&ctx->listeners);
	xa_destroy(&ctx->qps);
	xa_destroy(&ctx->cqs);
	xa_destroy(&ctx->mrs);
	xa_destroy(&ctx->pds);
	kw_paths_free(ctx->paths);	/* after the QPs (tx.c) */
	mutex_destroy(&ctx->lock);
	kfree(ctx);
}

static int dev_open(struct inode *inode, struct file *file)
{
	struct kw_ctx *ctx = kw_ctx_alloc();

	if (IS_ERR(ctx))
		return PTR_ERR(ctx);
	file->private_data = ctx;
	return stream_open(inode, file);
}

static int dev_release(struct inode *inode, struct file *file)
{
	kw_ctx_free(file->private_data);
	return 0;
}

static const struct file_operations dev_fops = {
	.owner = THIS_MODULE,
	.open = dev_open,
	.release = dev_release,
	.unlocked_ioctl = dev_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = dev_mmap,
	.poll = dev_poll,
	.read = dev_read,
	/* not seekable: dev_open's stream_open() makes lseek fail (ESPIPE) */
};

static const struct attribute_group *dev_groups[] = {
	&kw_es_attr_group,
	NULL,
};

static struct miscdevice dev_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = KIWARP_DEVICE_NAME,
	.fops = &dev_fops,
	.mode = 0666,	/* unprivileged use, bounded by RLIMIT_MEMLOCK */
	.groups = dev_groups,
};

int kw_dev_init(void)
{
	return misc_register(&dev_misc);
}

void kw_dev_exit(void)
{
	misc_deregister(&dev_misc);
}
