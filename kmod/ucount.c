// SPDX-License-Identifier: GPL-2.0
/*
 * Per-account counts with a limit: kernel sockets made for a user (cm.c,
 * bounded by its RLIMIT_NOFILE), background IWARP_MODE switches (es.c) and
 * pages held for user space (mem.c, bounded by RLIMIT_MEMLOCK). One
 * xarray entry per account with a non-zero count, under a mutex.
 */
#include <linux/cred.h>
#include <linux/user_namespace.h>

#include "kiwarp.h"

/*
 * The account a caller's charges go to: its uid, or, in a user namespace,
 * the uid that created the outermost one below the initial namespace.
 * The uids mapped into a namespace (a user's subordinate uids,
 * /etc/subuid) count as that user's: each is a kuid of its own, and a
 * user with 65536 of them would otherwise have 65536 times every limit.
 */
kuid_t kw_account_uid(void)
{
	const struct user_namespace *ns = current_user_ns();
	kuid_t uid = current_uid();

	for (; ns != &init_user_ns; ns = ns->parent)
		uid = ns->owner;
	return uid;
}

int kw_ucount_add(struct kw_ucount *uc, kuid_t uid, unsigned long n,
		  unsigned long limit)
{
	unsigned long cur;
	void *old;
	int ret;

	if (!n)
		return 0;
	limit = min(limit, (unsigned long)LONG_MAX);	/* xa_mk_value() */
	mutex_lock(&uc->lock);
	old = xa_load(&uc->xa, __kuid_val(uid));
	cur = old ? xa_to_value(old) : 0;
	if (n > limit || cur > limit - n)
		ret = -EMFILE;
	else
		ret = xa_err(xa_store(&uc->xa, __kuid_val(uid),
				      xa_mk_value(cur + n), GFP_KERNEL_ACCOUNT));
	mutex_unlock(&uc->lock);
	return ret;
}

void kw_ucount_sub(struct kw_ucount *uc, kuid_t uid, unsigned long n)
{
	unsigned long cur;
	void *old;

	if (!n)
		return;
	mutex_lock(&uc->lock);
	old = xa_load(&uc->xa, __kuid_val(uid));
	cur = old ? xa_to_value(old) : 0;
	if (WARN_ON_ONCE(cur < n) || cur == n)
		xa_erase(&uc->xa, __kuid_val(uid));
	else	/* replaces an existing entry: allocates nothing */
		xa_store(&uc->xa, __kuid_val(uid), xa_mk_value(cur - n),
			 GFP_KERNEL);
	mutex_unlock(&uc->lock);
}

void kw_ucount_destroy(struct kw_ucount *uc)
{
	WARN_ON(!xa_empty(&uc->xa));
	xa_destroy(&uc->xa);
}
