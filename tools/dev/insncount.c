// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * insncount - a QEMU TCG plugin that counts the guest's kernel
 * instructions per translation block, for comparing the path length of
 * two builds without timing noise (tools/dev/insncount.md).
 *
 * Every kernel-address block (the guest's upper half) gets an execution
 * counter, bumped inline. Each time a vCPU executes the block that starts
 * at mark= (a kernel function the guest calls on purpose, e.g. ksys_sync
 * for sync(1)), the counters are written to out=PREFIX.N (N = 0, 1, ...)
 * as "vaddr instructions executions" lines: cumulative snapshots,
 * subtracted by insncount.py. User-mode instructions go in one counter
 * (vaddr 0). The counters are bumped without atomics, so concurrent vCPUs
 * may lose a few increments: read differences above a fraction of a
 * percent only.
 *
 * Built against QEMU's plugin API version 1 (QEMU 4.2 .. 8.x): the few
 * declarations it needs are below, so no QEMU headers are required.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
typedef struct {
	const char *target_name;
	struct {
		int min, cur;
	} version;
	bool system_emulation;
	union {
		struct {
			int smp_vcpus, max_vcpus;
		} system;
	};
} qemu_info_t;

enum { PLUGIN_CB_NO_REGS = 0 };
enum { PLUGIN_INLINE_ADD_U64 = 0 };

typedef void (*tb_trans_cb)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*vcpu_udata_cb)(unsigned int vcpu, void *udata);
typedef void (*udata_cb)(qemu_plugin_id_t id, void *udata);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id,
					   tb_trans_cb cb);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb,
					  vcpu_udata_cb cb, int flags,
					  void *udata);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb,
					      int op, void *ptr,
					      uint64_t imm);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, udata_cb cb,
				    void *udata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);

EXPORT int qemu_plugin_version = 1;

#define KERNEL_HALF	0xffff800000000000ULL

struct block {
	uint64_t vaddr;		/* 0: the slot is free */
	uint64_t insns;		/* per execution */
	uint64_t execs;
};

static struct block *table;
static size_t table_size = 1 << 20;	/* slots, a power of two */
static size_t table_used;
static uint64_t user_insns;
static uint64_t mark;
static const char *out = "insncount";
static unsigned int snapshots;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* The slot of (vaddr, insns): a block retranslated with another length
 * gets a slot of its own. Caller holds lock. */
static struct block *slot(uint64_t vaddr, uint64_t insns)
{
	size_t i = (size_t)((vaddr ^ insns * 0x9e3779b97f4a7c15ULL) *
			    0x9e3779b97f4a7c15ULL >> 20) & (table_size - 1);

	for (;; i = (i + 1) & (table_size - 1)) {
		struct block *b = &table[i];

		if (b->vaddr == vaddr && b->insns == insns)
			return b;
		if (!b->vaddr) {
			if (table_used + 1 >= table_size / 2)
				return NULL;	/* full: stop counting new ones */
			table_used++;
			b->vaddr = vaddr;
			b->insns = insns;
			return b;
		}
	}
}

static void snapshot(void)
{
	char path[4096];
	FILE *f;
	size_t i;

	pthread_mutex_lock(&lock);
	snprintf(path, sizeof(path), "%s.%u", out, snapshots++);
	f = fopen(path, "w");
	if (f) {
		fprintf(f, "0 1 %" PRIu64 "\n", user_insns);
		for (i = 0; i < table_size; i++)
			if (table[i].vaddr && table[i].execs)
				fprintf(f, "%" PRIx64 " %" PRIu64 " %" PRIu64 "\n",
					table[i].vaddr, table[i].insns,
					table[i].execs);
		fclose(f);
	}
	pthread_mutex_unlock(&lock);
}

static void mark_exec(unsigned int vcpu, void *udata)
{
	(void)vcpu;
	(void)udata;
	snapshot();
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	uint64_t vaddr = qemu_plugin_tb_vaddr(tb);
	uint64_t n = qemu_plugin_tb_n_insns(tb);
	struct block *b;

	(void)id;
	if (vaddr < KERNEL_HALF) {
		qemu_plugin_register_vcpu_tb_exec_inline(tb,
				PLUGIN_INLINE_ADD_U64, &user_insns, n);
		return;
	}
	pthread_mutex_lock(&lock);
	b = slot(vaddr, n);
	pthread_mutex_unlock(&lock);
	if (b)
		qemu_plugin_register_vcpu_tb_exec_inline(tb,
				PLUGIN_INLINE_ADD_U64, &b->execs, 1);
	if (mark && vaddr == mark)
		qemu_plugin_register_vcpu_tb_exec_cb(tb, mark_exec,
						     PLUGIN_CB_NO_REGS, NULL);
}

static void at_exit(qemu_plugin_id_t id, void *udata)
{
	(void)id;
	(void)udata;
	snapshot();
}

EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
			       int argc, char **argv)
{
	int i;

	if (!info->system_emulation)
		return -1;
	for (i = 0; i < argc; i++) {
		if (!strncmp(argv[i], "mark=", 5))
			mark = strtoull(argv[i] + 5, NULL, 16);
		else if (!strncmp(argv[i], "out=", 4))
			out = argv[i] + 4;
		else {
			fprintf(stderr, "insncount: unknown argument %s\n",
				argv[i]);
			return -1;
		}
	}
	table = calloc(table_size, sizeof(*table));
	if (!table)
		return -1;
	qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
	qemu_plugin_register_atexit_cb(id, at_exit, NULL);
	return 0;
}
