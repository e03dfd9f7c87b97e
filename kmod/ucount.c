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
 * The account a caller's charges go to:
 * - in the initial user namespace, its uid;
 * - in a user namespace that a user made (directly, or nested in one it
 *   made), that user: the uids mapped into it (its subordinate uids,
 *   /etc/subuid) are each a kuid of their own, and counted apart a user
 *   with 65536 of them would have 65536 times every limit;
 * - in one that root made (a container runtime: LXD, runc with user
 *   namespaces, systemd-nspawn -U...), the container, named by the kuid
 *   its uid 0 maps to: charging root would let one container use up
 *   every other container's limits. Without a uid 0 mapped there, the
 *   caller's own uid (root chose that mapping).
 * The namespaces stay alive meanwhile: current's creds hold the innermost,
 * and each holds its parent.
 */
kuid_t kw_account_uid(void)
{
	struct user_namespace *ns = current_user_ns(), *outer = NULL;
	kuid_t root;

	for (; ns != &init_user_ns; ns = ns->parent)
		outer = ns;
	if (!outer)
		return current_uid();
	if (!uid_eq(outer->owner, GLOBAL_ROOT_UID))
		return outer->owner;
	root = make_kuid(outer, 0);
	return uid_valid(root) ? root : current_uid();
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
