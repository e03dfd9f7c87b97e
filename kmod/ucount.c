// SPDX-License-Identifier: GPL-2.0
/*
 * Per-user counts with a limit: kernel sockets made for a user (cm.c,
 * bounded by its RLIMIT_NOFILE) and background IWARP_MODE switches (es.c).
 * One xarray entry per user with a non-zero count, under a mutex.
 */
#include "kiwarp.h"

int kw_ucount_charge(struct kw_ucount *uc, kuid_t uid, unsigned long limit)
{
	unsigned long n;
	void *old;
	int ret;

	mutex_lock(&uc->lock);
	old = xa_load(&uc->xa, __kuid_val(uid));
	n = old ? xa_to_value(old) : 0;
	if (n >= limit)
		ret = -EMFILE;
	else
		ret = xa_err(xa_store(&uc->xa, __kuid_val(uid),
				      xa_mk_value(n + 1), GFP_KERNEL_ACCOUNT));
	mutex_unlock(&uc->lock);
	return ret;
}

void kw_ucount_uncharge(struct kw_ucount *uc, kuid_t uid)
{
	unsigned long n;
	void *old;

	mutex_lock(&uc->lock);
	old = xa_load(&uc->xa, __kuid_val(uid));
	n = old ? xa_to_value(old) : 0;
	if (WARN_ON_ONCE(!n) || n == 1)
		xa_erase(&uc->xa, __kuid_val(uid));
	else	/* replaces an existing entry: allocates nothing */
		xa_store(&uc->xa, __kuid_val(uid), xa_mk_value(n - 1),
			 GFP_KERNEL);
	mutex_unlock(&uc->lock);
}

void kw_ucount_destroy(struct kw_ucount *uc)
{
	WARN_ON(!xa_empty(&uc->xa));
	xa_destroy(&uc->xa);
}
