// SPDX-License-Identifier: GPL-2.0
/*
 * kiwarp: software iWARP (RDMAP/DDP/MPA over the in-kernel TCP socket).
 *
 * Module init/exit. Subsystems come up in dependency order and go down in
 * reverse:
 *   kw_tcp_hooks_init  the patched kernel's TCP hook, if it has one
 *   kw_mem_init   STag table, PD ids, the MR release workqueue
 *   kw_qp_init    QP/CM infrastructure (workqueues, ...)
 *   kw_dev_init   /dev/kiwarp: from here on user space can create objects
 *   kw_es_init    the "kiwarp" TCP ULP (extended sockets)
 *
 * Unloading is refused while objects exist: every object belongs to an open
 * file, and dev_fops.owner = THIS_MODULE pins the module while any file is
 * open (mapped rings hold their file); a socket with the ULP holds a
 * reference too (its ULP ops and its proto_ops table). Asynchronous work never outlives the
 * files: release() flushes what it queued, and kw_qp_exit() and
 * kw_mem_exit() drain their workqueues before the module text goes away.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/init.h>
#include <net/tcp.h>

#include "kiwarp.h"

#define KW_VERSION	"0.1.0"

static int __init kw_init(void)
{
	int ret;

	kw_tcp_hooks_init();
	ret = kw_mem_init();
	if (ret)
		goto err_hooks;

	ret = kw_qp_init();
	if (ret)
		goto err_mem_exit;

	ret = kw_dev_init();
	if (ret)
		goto err_qp_exit;

	ret = kw_es_init();
	if (ret)
		goto err_dev_exit;

	pr_info("software iWARP " KW_VERSION " (ABI %d) loaded\n",
		KIWARP_ABI_VERSION);
	return 0;

err_dev_exit:
	kw_dev_exit();
err_qp_exit:
	kw_qp_exit();
err_mem_exit:
	kw_mem_exit();
err_hooks:
	kw_tcp_hooks_exit();
	return ret;
}

static void __exit kw_exit(void)
{
	kw_es_exit();
	kw_dev_exit();
	kw_qp_exit();
	kw_tx_exit();		/* no QP left to schedule its reclaim */
	kw_mem_exit();
	kw_tcp_hooks_exit();
}

module_init(kw_init);
module_exit(kw_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Software iWARP (RDMAP/DDP/MPA over kernel TCP)");
MODULE_AUTHOR("kiwarp developers");
MODULE_VERSION(KW_VERSION);
MODULE_ALIAS_TCP_ULP("kiwarp");
