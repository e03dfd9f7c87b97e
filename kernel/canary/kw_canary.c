// SPDX-License-Identifier: GPL-2.0
/*
 * kernel/canary - positive control for the debug kernel tier: provokes the
 * bugs the tier must catch, so that "no reports" from a kiwarp run means
 * something.  Not part of kiwarp.  Usage (in the debug VM):
 *   insmod kw_canary.ko bug=uaf|oob|leak|sleep|lockorder
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/mutex.h>
#include <linux/delay.h>

static char *bug = "";
module_param(bug, charp, 0444);

static void *leaked;
static DEFINE_SPINLOCK(lock_a);
static DEFINE_MUTEX(mutex_b);
static DEFINE_MUTEX(mutex_c);

static int __init canary_init(void)
{
	volatile char *p;

	if (!strcmp(bug, "uaf")) {
		p = kmalloc(64, GFP_KERNEL);
		kfree((void *)p);
		pr_info("kw_canary: uaf read %d\n", p[8]);
	} else if (!strcmp(bug, "oob")) {
		p = kmalloc(64, GFP_KERNEL);
		pr_info("kw_canary: oob read %d\n", p[64]);
		kfree((void *)p);
	} else if (!strcmp(bug, "leak")) {
		leaked = kmalloc(512, GFP_KERNEL);
		leaked = NULL;	/* lose the only reference */
	} else if (!strcmp(bug, "sleep")) {
		spin_lock(&lock_a);
		msleep(1);
		spin_unlock(&lock_a);
	} else if (!strcmp(bug, "lockorder")) {
		mutex_lock(&mutex_b);
		mutex_lock(&mutex_c);
		mutex_unlock(&mutex_c);
		mutex_unlock(&mutex_b);
		mutex_lock(&mutex_c);
		mutex_lock(&mutex_b);
		mutex_unlock(&mutex_b);
		mutex_unlock(&mutex_c);
	}
	return 0;
}

static void __exit canary_exit(void)
{
}

module_init(canary_init);
module_exit(canary_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("debug kernel tier positive control");
