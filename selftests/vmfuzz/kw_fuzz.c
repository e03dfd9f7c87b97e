// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * kw_fuzz: structure-aware fuzzer for /dev/kiwarp (ioctl, mmap'd rings,
 * sockets). Runs inside the VM with kiwarp.ko loaded, as uid 65534 after
 * setup, with RLIMIT_MEMLOCK at 8 MiB so the limit paths are taken.
 *
 * It keeps a table of live objects (device fds and their dups, PDs, MRs,
 * CQs, QPs, listeners, ring mappings, sockets) shared by --threads worker
 * threads. Each operation mostly picks a valid handle, sometimes a
 * destroyed or a random one, and boundary arguments (0, 1, max, max + 1,
 * huge, bad pointers, read-only / PROT_NONE / file-backed / page-crossing
 * buffers). Ring entries and producer/consumer indices are written straight
 * through the mappings (valid WRs naming live MRs, garbage, rewinds, wraps)
 * and doorbells rung; QPs are connected kiwarp to kiwarp over loopback
 * (socket conversion and kernel CM) so that data really moves; odd sockets
 * (UDP, UNIX, listening, unconnected, closed peer, already taken) are handed
 * in, and the old fd of a taken socket is used. Threads destroy, ring,
 * map, unmap and close concurrently; fork() children use inherited fds and
 * are killed with SIGKILL at a random point.
 *
 * The kernel side is judged by vm-run's log scan (KASAN, lockdep, WARN...).
 * This program fails on: an errno outside the class expected for the
 * operation, a mapping that should have been refused, a crash of the
 * fuzzer, an operation hanging longer than --hang seconds (watchdog), and
 * after the run pinned memory not given back (VmPin, and as root the
 * system-wide nr_foll_pin_* counters). On a failure it prints the last
 * operations, so a finding can be replayed: `--threads 1 --seed S --ops N`
 * repeats one thread's operation sequence exactly.
 *
 * Output is TAP; the last lines are
 *   # kw_fuzz: ops=<N> seed=<S> threads=<K> errors_by_errno=EINVAL:n,...
 *   # <passed> passed, <failed> failed
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/kiwarp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../vm/kw_vmtest.h"

#ifndef TCP_ULP
#define TCP_ULP 31
#endif
#ifndef MAP_HUGETLB
#define MAP_HUGETLB 0x40000
#endif

#define ARRAY_SIZE(a)	(sizeof(a) / sizeof((a)[0]))
#define KW_MMAP_CQ	1ULL	/* kmod/kiwarp.h: mmap offset kinds */
#define KW_MMAP_SQ	2ULL
#define KW_MMAP_RQ	3ULL

/* ------------------------------------------------------------ settings */

static uint64_t cfg_seed;
static long cfg_ops = -1;
static long cfg_seconds = -1;
static int cfg_threads = 3;
static int cfg_hang = 90;	/* seconds one op may take under TCG */
static int cfg_verbose;
static int cfg_drop = 1;
static int cfg_fork = 1;
static long cfg_memlock = 8L << 20;
static const char *cfg_dev = "/dev/kiwarp";
static const char *cfg_only, *cfg_skip;	/* comma-separated op names */

static long page_sz;
static double t_start;
static atomic_long ops_done;
static atomic_int stop_flag;
static atomic_int wd_done;	/* every worker joined: the watchdog may end */
static atomic_long unexpected;
static atomic_long pairs_up;	/* kiwarp<->kiwarp connections in RTS */
static int in_child;		/* a fork()ed child: no stdio, no table lock */

/* async-signal-safe formatted output (also used by fork children) */
static void say(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(buf) - 1)
		n = sizeof(buf) - 1;
	if (n > 0 && write(1, buf, n) < 0)
		return;
}

/* ------------------------------------------------------------- random */

struct rng {
	uint64_t s;
};

static uint64_t rnd(struct rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint32_t rn(struct rng *r, uint32_t n)
{
	return n ? rnd(r) % n : 0;
}

static int chance(struct rng *r, int pct)
{
	return rn(r, 100) < (uint32_t)pct;
}

static const uint32_t u32_vals[] = {
	0, 1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 63, 64, 127, 128, 129, 255, 256,
	511, 512, 513, 1023, 1024, 1025, 4095, 4096, 4097, 65535, 65536, 65537,
	0x7fffffff, 0x80000000, 0x80000001, 0xfffffffe, 0xffffffff,
};

static uint32_t gen_u32(struct rng *r)
{
	switch (rn(r, 4)) {
	case 0:
	case 1:
		return u32_vals[rn(r, ARRAY_SIZE(u32_vals))];
	case 2:
		return rn(r, 64);
	}
	return (uint32_t)rnd(r);
}

static const uint64_t u64_vals[] = {
	0, 1, 4095, 4096, 4097, 0x7fffffffULL, 0xffffffffULL, 0x100000000ULL,
	0x100000001ULL, 0x7ffffffff000ULL, 0x7fffffffffffULL, 0x800000000000ULL,
	0xffff800000000000ULL, 0xffffffff80000000ULL, 0x7fffffffffffffffULL,
	0x8000000000000000ULL, 0xfffffffffffff000ULL, 0xffffffffffffffffULL,
};

static uint64_t gen_u64(struct rng *r)
{
	if (chance(r, 60))
		return u64_vals[rn(r, ARRAY_SIZE(u64_vals))] + (chance(r, 20) ?
			(uint64_t)(int)rn(r, 9) - 4 : 0);
	return rnd(r);
}

/* --------------------------------------------------------- op log ring */

#define LOG_N	128
#define LOG_LEN	200
static char oplog[LOG_N][LOG_LEN];
static atomic_ulong oplog_seq;

struct th {
	int id;
	struct rng r;
	long n;			/* ops done by this thread */
	char desc[LOG_LEN];	/* current op */
	double started;		/* watchdog: 0 when idle */
	sigjmp_buf jb;		/* guarded user accesses to mappings */
	uint8_t *edge;		/* 3 pages: rw, PROT_NONE, read-only */
	volatile int guard;
	pthread_t pt;
};

static struct th *ths;
static __thread struct th *cur_th;

static void log_op(struct th *t, const char *fmt, ...)
{
	unsigned long i = atomic_fetch_add(&oplog_seq, 1) % LOG_N;
	va_list ap;
	int n;

	n = snprintf(oplog[i], LOG_LEN, "t%d #%ld ", t->id, t->n);
	va_start(ap, fmt);
	if (n > 0 && n < LOG_LEN)
		vsnprintf(oplog[i] + n, LOG_LEN - n, fmt, ap);
	va_end(ap);
	if (cfg_verbose && !in_child)
		say("# %s\n", oplog[i]);
}

static void dump_oplog(const char *why)
{
	unsigned long end = atomic_load(&oplog_seq), i;

	say("# ---- %s: last operations (oldest first), seed=%llu ----\n", why,
	    (unsigned long long)cfg_seed);
	for (i = end > 64 ? end - 64 : 0; i < end; i++)
		say("#   %s\n", oplog[i % LOG_N]);
	if (ths && !in_child) {
		int k;

		for (k = 0; k < cfg_threads; k++)
			if (ths[k].started)
				say("#   in progress t%d #%ld (%.1fs): %s\n", k,
				    ths[k].n, now() - ths[k].started,
				    ths[k].desc);
	}
	say("# ----\n");
}

/* Describe the current op before issuing it (for the watchdog). */
static void begin(struct th *t, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(t->desc, sizeof(t->desc), fmt, ap);
	va_end(ap);
	t->started = now();
}

/* ------------------------------------------------------ errno counting */

#define MAX_ERRNO 140
static atomic_long err_count[MAX_ERRNO + 1];
typedef unsigned __int128 emask;
#define E(x)	((emask)1 << (x))
/* An fd closed or reused by another thread meanwhile: always acceptable. */
#define E_FD	(E(EBADF) | E(ENOTTY) | E(ENODEV) | E(ENOTSOCK))
#define E_BASE	(E(EINVAL) | E(EFAULT) | E_FD)
#define E_NET	(E(EBUSY) | E(ENOTCONN) | E(ETIMEDOUT) | E(ECONNREFUSED) | \
		 E(ECONNRESET) | E(ECONNABORTED) | E(EPROTO) | E(EMSGSIZE) | \
		 E(ENOMEM) | E(EMFILE) | E(EPERM) | E(EINTR) | E(EAGAIN) | \
		 E(EPIPE) | E(EIO) | E(EAFNOSUPPORT) | E(EADDRNOTAVAIL) | \
		 E(ENETUNREACH) | E(EHOSTUNREACH) | E(ENOSPC) | E(EOPNOTSUPP))

static const char *ename(int e)
{
	static const struct { int e; const char *n; } t[] = {
		{ 0, "OK" }, { EPERM, "EPERM" }, { ENOENT, "ENOENT" },
		{ EINTR, "EINTR" }, { EIO, "EIO" }, { EBADF, "EBADF" },
		{ EAGAIN, "EAGAIN" }, { ENOMEM, "ENOMEM" },
		{ EACCES, "EACCES" }, { EFAULT, "EFAULT" }, { EBUSY, "EBUSY" },
		{ EEXIST, "EEXIST" }, { ENODEV, "ENODEV" },
		{ EINVAL, "EINVAL" }, { EMFILE, "EMFILE" },
		{ ENOTTY, "ENOTTY" }, { ENOSPC, "ENOSPC" }, { EPIPE, "EPIPE" },
		{ EOVERFLOW, "EOVERFLOW" }, { EPROTO, "EPROTO" },
		{ ENOTSOCK, "ENOTSOCK" }, { EMSGSIZE, "EMSGSIZE" },
		{ EOPNOTSUPP, "EOPNOTSUPP" }, { EAFNOSUPPORT, "EAFNOSUPPORT" },
		{ EADDRINUSE, "EADDRINUSE" },
		{ EADDRNOTAVAIL, "EADDRNOTAVAIL" },
		{ ECONNABORTED, "ECONNABORTED" }, { ECONNRESET, "ECONNRESET" },
		{ EISCONN, "EISCONN" }, { ENOTCONN, "ENOTCONN" },
		{ ETIMEDOUT, "ETIMEDOUT" }, { ECONNREFUSED, "ECONNREFUSED" },
		{ EINPROGRESS, "EINPROGRESS" }, { EALREADY, "EALREADY" },
		{ ENOPROTOOPT, "ENOPROTOOPT" }, { ESPIPE, "ESPIPE" },
		{ EDESTADDRREQ, "EDESTADDRREQ" }, { ENOSYS, "ENOSYS" },
	};
	static char buf[16][16];
	static atomic_uint k;
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(t); i++)
		if (t[i].e == e)
			return t[i].n;
	i = atomic_fetch_add(&k, 1) % 16;
	snprintf(buf[i], sizeof(buf[i]), "E%d", e);
	return buf[i];
}

/*
 * Account the result ret (0 or -errno) of the current op, log it and
 * flag an errno outside allowed.
 */
static int judge(struct th *t, long ret, emask allowed)
{
	int e = ret < 0 ? (int)-ret : 0;

	t->started = 0;
	t->n++;
	atomic_fetch_add(&ops_done, 1);
	if (e <= MAX_ERRNO)
		atomic_fetch_add(&err_count[e], 1);
	log_op(t, "%s = %s", t->desc, ret < 0 ? ename(e) : "0");
	if (e && allowed != ~(emask)0 && (e > 127 || !(allowed & E(e)))) {
		atomic_fetch_add(&unexpected, 1);
		say("# UNEXPECTED %s from t%d #%ld: %s (seed %llu)\n", ename(e),
		    t->id, t->n - 1, t->desc, (unsigned long long)cfg_seed);
		if (atomic_load(&unexpected) <= 3)
			dump_oplog("unexpected errno");
	}
	return ret;
}

/* A result that is a bug in itself (e.g. a mapping that must fail). */
static void finding(struct th *t, const char *what)
{
	atomic_fetch_add(&unexpected, 1);
	say("# FINDING t%d #%ld: %s: %s (seed %llu)\n", t->id, t->n, what,
	    t->desc, (unsigned long long)cfg_seed);
	if (atomic_load(&unexpected) <= 3)
		dump_oplog(what);
}

static long xioctl(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) ? -errno : 0;
}

static int set_nb(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* ------------------------------------------------------- object table */

enum otype { O_FREE, O_DEV, O_PD, O_MR, O_CQ, O_QP, O_LST, O_MAP, O_SOCK,
	     O_NTYPES };
static const char *const oname[] = { "free", "dev", "pd", "mr", "cq", "qp",
				     "lst", "map", "sock" };
/* live objects per type: keeps fds, memory and run time bounded */
static const int ocap[O_NTYPES] = {
	[O_DEV] = 5, [O_PD] = 12, [O_MR] = 40, [O_CQ] = 24, [O_QP] = 24,
	[O_LST] = 6, [O_MAP] = 48, [O_SOCK] = 48,
};

enum sock_kind { SK_UDP, SK_UNIX, SK_UNIX_DGRAM, SK_TCP_LISTEN, SK_TCP_NEW,
		 SK_TCP_CONN, SK_TCP6_CONN, SK_TCP_PEERCLOSED, SK_TCP_ULP,
		 SK_PIPE, SK_TCP_TO_KW, SK_NKINDS };
static const char *const skname[] = { "udp", "unix", "unix-dgram",
	"tcp-listen", "tcp-new", "tcp-conn", "tcp6-conn", "tcp-peerclosed",
	"tcp-ulp", "pipe", "tcp-to-kwlisten" };

struct ringgeo {
	uint32_t entries, prod_off, cons_off, ring_off;
	uint64_t off, size;
};

struct obj {
	int type;
	int live;		/* 0: destroyed, kept as a stale handle */
	unsigned gen;		/* bumped on reuse of the slot */
	int destroying;		/* DESTROY calls on its handle in flight */
	int ctx;		/* owning context id (dev: its own) */
	int fd;			/* dev, sock */
	uint32_t handle;	/* kiwarp handle */
	uint32_t stag;		/* mr */
	uint32_t access;	/* mr */
	uint64_t addr, len;	/* mr region, map range */
	struct ringgeo g[2];	/* cq: [0]; qp: sq [0], rq [1] */
	uint32_t max_sge;	/* qp */
	int connected;		/* qp: went to RTS once (or tried) */
	int kind;		/* map: 1 cq 2 sq 3 rq; sock: enum sock_kind */
	int ro;			/* map: mapped read-only */
	int taken;		/* sock: handed to kiwarp */
	int port;		/* lst: bound port (network order) */
};

#define MAX_OBJ	512
static struct obj objs[MAX_OBJ];
static pthread_mutex_t tbl = PTHREAD_MUTEX_INITIALIZER;
static int next_ctx = 1;
/*
 * Contexts whose objects may have changed behind the table's back (a fork
 * child used them): the table is no ground truth for them any more.
 */
#define MAX_CTX 65536
static uint8_t ctx_taint[MAX_CTX];
static int nlive[O_NTYPES];

static void lock_tbl(void)
{
	if (!in_child)
		pthread_mutex_lock(&tbl);
}

static void unlock_tbl(void)
{
	if (!in_child)
		pthread_mutex_unlock(&tbl);
}

/* Under tbl: a slot for a new object, or -1 if the type is at its cap. */
static int slot_new(struct th *t, int type)
{
	int i, dead = -1, n = 0;
	unsigned gen;

	if (nlive[type] >= ocap[type])
		return -1;
	for (i = 0; i < MAX_OBJ; i++) {
		if (objs[i].type == O_FREE)
			goto found;
		if (!objs[i].live && rn(&t->r, ++n) == 0)
			dead = i;
	}
	if (dead < 0)
		return -1;
	i = dead;
	/* a dead socket slot still holds the fd of a given-away socket */
	if (objs[i].type == O_SOCK && objs[i].fd >= 0)
		close(objs[i].fd);
found:
	gen = objs[i].gen;
	memset(&objs[i], 0, sizeof(objs[i]));
	objs[i].gen = gen + 1;
	objs[i].type = type;
	objs[i].live = 1;
	objs[i].fd = -1;
	nlive[type]++;
	return i;
}

static void obj_kill(int i)
{
	if (objs[i].live) {
		objs[i].live = 0;
		nlive[objs[i].type]--;
	}
}

/*
 * Under tbl: pick an object of type (of context ctx if ctx > 0): mostly
 * a live one, with stale_pct percent a dead one. Returns the slot or -1.
 */
static int pick(struct th *t, int type, int ctx, int stale_pct)
{
	int i, n = 0, got = -1, want_live = !chance(&t->r, stale_pct);

	for (i = 0; i < MAX_OBJ; i++) {
		if (objs[i].type != type || objs[i].live != want_live)
			continue;
		if (ctx > 0 && objs[i].ctx != ctx)
			continue;
		if (rn(&t->r, ++n) == 0)
			got = i;
	}
	if (got < 0 && !want_live)
		return pick(t, type, ctx, 0);
	return got;
}

/* Under tbl: the context of a live device fd, or -1. */
static int fd_ctx(int fd)
{
	int i;

	for (i = 0; i < MAX_OBJ; i++)
		if (objs[i].type == O_DEV && objs[i].live && objs[i].fd == fd)
			return objs[i].ctx;
	return -1;
}

/* Under tbl: a live device fd of context ctx (any dup of it), or -1. */
static int ctx_fd(struct th *t, int ctx)
{
	int i, n = 0, fd = -1;

	for (i = 0; i < MAX_OBJ; i++)
		if (objs[i].type == O_DEV && objs[i].live &&
		    objs[i].ctx == ctx && rn(&t->r, ++n) == 0)
			fd = objs[i].fd;
	return fd;
}

/*
 * The fd to issue an op on an object of context ctx: mostly the right one,
 * sometimes another context's, a closed one or garbage.
 */
static int op_fd(struct th *t, int ctx)
{
	int i, fd;

	if (chance(&t->r, 94) && (fd = ctx_fd(t, ctx)) >= 0)
		return fd;
	if (chance(&t->r, 70)) {
		i = pick(t, O_DEV, 0, 15);
		if (i >= 0)
			return objs[i].fd;
	}
	return chance(&t->r, 50) ? -1 : (int)rn(&t->r, 1024);
}

/* Under tbl: a handle of type for context ctx: valid, stale or random. */
static uint32_t pick_handle(struct th *t, int type, int ctx, int *slot)
{
	int i;

	*slot = -1;
	if (chance(&t->r, 92)) {
		i = pick(t, type, chance(&t->r, 95) ? ctx : 0, 10);
		if (i >= 0) {
			*slot = i;
			return objs[i].handle;
		}
	}
	return gen_u32(&t->r);
}

/* Under tbl: a random context with a live fd (pick a live dev). */
static int pick_ctx(struct th *t, int *fd)
{
	int i = pick(t, O_DEV, 0, 0);

	if (i < 0)
		return -1;
	*fd = objs[i].fd;
	return objs[i].ctx;
}

/*
 * A context's fd and a handle of type in it (live, stale or made up:
 * pick_handle()), with the fd of the handle's own context when it names a
 * live object. 0 if there is no context at all.
 */
static int pick_target(struct th *t, int type, int *fd, uint32_t *handle)
{
	int ctx, slot;

	lock_tbl();
	ctx = pick_ctx(t, fd);
	if (ctx >= 0) {
		*handle = pick_handle(t, type, ctx, &slot);
		if (slot >= 0)
			*fd = op_fd(t, objs[slot].ctx);
	}
	unlock_tbl();
	return ctx >= 0;
}

/* Under tbl: every object of a context that has no open fd is dead. */
static void ctx_gone_check(int ctx)
{
	int i;

	for (i = 0; i < MAX_OBJ; i++)
		if (objs[i].type == O_DEV && objs[i].live && objs[i].ctx == ctx)
			return;
	for (i = 0; i < MAX_OBJ; i++)
		if (objs[i].ctx == ctx && objs[i].type != O_MAP &&
		    objs[i].type != O_SOCK)
			obj_kill(i);
}

/* ------------------------------------------------------------- buffers */

/*
 * Memory that MRs are registered on. Set up before the run; some of it is
 * remapped, protected and zapped while registered (op_buf_churn).
 */
enum buf_kind { B_ANON, B_ANON_BIG, B_RO, B_NONE, B_MEMFD, B_SHM_FILE,
		B_PRIVATE_FILE, B_ROFILE, B_HOLE, B_STACK, B_KINDS };
static const char *const bname[] = { "anon", "anon-2M", "ro", "prot-none",
	"memfd", "shm-file", "private-file", "ro-file", "hole", "stack" };

struct buf {
	int kind;
	uint8_t *p;
	size_t len;
};

#define NBUF 14
static struct buf bufs[NBUF];
static int nbufs;

static void *map_file(const char *path, size_t len, int prot, int flags)
{
	int fd = open(path, O_RDWR | O_CREAT, 0600);
	void *p;

	if (fd < 0)
		return MAP_FAILED;
	if (ftruncate(fd, len)) {
		close(fd);
		return MAP_FAILED;
	}
	p = mmap(NULL, len, prot, flags, fd, 0);
	close(fd);
	return p;
}

static void add_buf(int kind, void *p, size_t len)
{
	if (p == MAP_FAILED || nbufs >= NBUF)
		return;
	bufs[nbufs].kind = kind;
	bufs[nbufs].p = p;
	bufs[nbufs].len = len;
	nbufs++;
}

static void bufs_init(void)
{
	static uint8_t stackish[3 * 4096] __attribute__((aligned(4096)));
	const int rw = PROT_READ | PROT_WRITE;
	void *p;
	int i, fd;

	for (i = 0; i < 4; i++) {
		p = mmap(NULL, 256 << 10, rw, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p != MAP_FAILED)
			memset(p, 0x11 * (i + 1), 256 << 10);
		add_buf(B_ANON, p, 256 << 10);
	}
	/* 2 MiB, hugepage-aligned, THP if the kernel gives one */
	p = mmap(NULL, 4 << 20, rw, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p != MAP_FAILED) {
		uint8_t *a = (uint8_t *)(((uintptr_t)p + (2 << 20) - 1) &
					 ~(uintptr_t)((2 << 20) - 1));

		madvise(a, 2 << 20, MADV_HUGEPAGE);
		memset(a, 0x5a, 2 << 20);
		add_buf(B_ANON_BIG, a, 2 << 20);
	}
	p = mmap(NULL, 64 << 10, rw, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p != MAP_FAILED) {
		memset(p, 0x77, 64 << 10);
		mprotect(p, 64 << 10, PROT_READ);
	}
	add_buf(B_RO, p, 64 << 10);
	add_buf(B_NONE, mmap(NULL, 64 << 10, PROT_NONE,
			     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), 64 << 10);
	fd = memfd_create("kw_fuzz", 0);
	if (fd >= 0) {
		if (!ftruncate(fd, 128 << 10))
			add_buf(B_MEMFD, mmap(NULL, 128 << 10, rw, MAP_SHARED,
					      fd, 0), 128 << 10);
		close(fd);
	}
	add_buf(B_SHM_FILE, map_file("/dev/shm/kw_fuzz.shm", 128 << 10, rw,
				     MAP_SHARED), 128 << 10);
	unlink("/dev/shm/kw_fuzz.shm");
	add_buf(B_PRIVATE_FILE, map_file("/tmp/kw_fuzz.priv", 64 << 10, rw,
					 MAP_PRIVATE), 64 << 10);
	unlink("/tmp/kw_fuzz.priv");
	/* page cache of the (read-only 9p) root: must not be written */
	fd = open("/proc/self/exe", O_RDONLY);
	if (fd >= 0) {
		add_buf(B_ROFILE, mmap(NULL, 16 << 10, PROT_READ, MAP_SHARED,
				       fd, 0), 16 << 10);
		close(fd);
	}
	p = mmap(NULL, 64 << 10, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p != MAP_FAILED) {
		munmap(p, 64 << 10);
		add_buf(B_HOLE, p, 64 << 10);
	}
	add_buf(B_STACK, stackish, sizeof(stackish));
}

/* An (addr, len) for REG_MR: mostly inside a buffer, sometimes not. */
static void gen_region(struct th *t, __u64 *addr, __u64 *len)
{
	struct buf *b = &bufs[rn(&t->r, nbufs)];
	uint64_t off, l;

	if (chance(&t->r, 5)) {
		*addr = gen_u64(&t->r);
		*len = chance(&t->r, 50) ? gen_u64(&t->r) : gen_u32(&t->r);
		return;
	}
	switch (rn(&t->r, 6)) {
	case 0:
		off = 0;
		break;
	case 1:	/* cross a page end */
		off = (rn(&t->r, b->len / page_sz) + 1) * page_sz -
		      rn(&t->r, 64) - 1;
		break;
	case 2:	/* misaligned */
		off = rn(&t->r, 4096) | 1;
		break;
	default:
		off = rn(&t->r, b->len);
	}
	if (off >= b->len)
		off = 0;
	switch (rn(&t->r, 8)) {
	case 0:
		l = 1;
		break;
	case 1:
		l = b->len - off;
		break;
	case 2:	/* past the end of the buffer */
		l = b->len - off + 1 + rn(&t->r, 2 * page_sz);
		break;
	case 3:
		l = chance(&t->r, 50) ? 0 : gen_u64(&t->r);
		break;
	default:
		l = 1 + rn(&t->r, b->len - off);
	}
	*addr = (uintptr_t)b->p + off;
	*len = l;
}

/* ------------------------------------------------------ guarded access */

/*
 * Ring mappings may be unmapped, moved, zapped or made read-only by another
 * thread at any time: user-space accesses to them run under a guard that
 * turns SIGSEGV/SIGBUS into a return. Anywhere else the signal is a crash
 * of the fuzzer (a failure).
 */
/*
 * After a crash: the mappings within 64 MiB of addr, from /proc/self/maps
 * (what was there: a ring, a buffer, a thread's stack, a hole).
 * open/read/write only: called from the fault handler.
 */
static void dump_maps_near(uintptr_t addr)
{
	static char buf[1 << 16];
	char *line, *end;
	ssize_t n, got = 0;
	int fd = open("/proc/self/maps", O_RDONLY);

	if (fd < 0)
		return;
	while (got < (ssize_t)sizeof(buf) - 1 &&
	       (n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
		got += n;
	close(fd);
	buf[got] = 0;
	say("# mappings near %#lx:\n", (unsigned long)addr);
	for (line = buf; line && *line; line = end) {
		unsigned long lo = 0, hi = 0;
		char *p = line;

		end = strchr(line, '\n');
		if (end)
			*end++ = 0;
		for (; *p && *p != '-'; p++)
			lo = lo * 16 + (*p <= '9' ? *p - '0' : (*p | 0x20) - 'a' + 10);
		for (p += !!*p; *p && *p != ' '; p++)
			hi = hi * 16 + (*p <= '9' ? *p - '0' : (*p | 0x20) - 'a' + 10);
		if (hi + (64UL << 20) > addr && lo < addr + (64UL << 20))
			say("#   %s\n", line);
	}
}

static void fault_handler(int sig, siginfo_t *si, void *uc)
{
	struct th *t = cur_th;

	(void)uc;
	if (t && t->guard) {
		t->guard = 0;
		siglongjmp(t->jb, sig);
	}
	say("not ok - kw_fuzz crashed: signal %d at %p%s\n", sig, si->si_addr,
	    in_child ? " (fork child)" : "");
	dump_maps_near((uintptr_t)si->si_addr);
	dump_oplog("fuzzer crash");
	_exit(4);
}

static uint32_t ld(volatile uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void st(volatile uint32_t *p, uint32_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* -------------------------------------------------------------- ops */

/*
 * A kiwarp ioctl whose argument sometimes lives at an odd place: crossing
 * into a PROT_NONE page (copy-in fails), on a read-only page (the command
 * runs, copy-out fails: what it created is unknown to user space and must
 * still be torn down at close), or at a misaligned address (must work).
 */
static long kioctl(struct th *t, int fd, unsigned long cmd, void *arg)
{
	size_t size = _IOC_SIZE(cmd), l = strlen(t->desc);
	uint8_t *p;
	long ret;

	if (!t->edge || in_child || !chance(&t->r, 6))
		return xioctl(fd, cmd, arg);
	switch (rn(&t->r, 3)) {
	case 0:	/* crosses into the PROT_NONE page */
		p = t->edge + page_sz - 1 - rn(&t->r, size ? size - 1 : 1);
		memcpy(p, arg, t->edge + page_sz - p);
		snprintf(t->desc + l, sizeof(t->desc) - l, " [arg crosses]");
		return xioctl(fd, cmd, p);
	case 1:	/* read-only */
		p = t->edge + 2 * page_sz;
		if (mprotect(p, page_sz, PROT_READ | PROT_WRITE))
			return xioctl(fd, cmd, arg);
		memcpy(p, arg, size);
		mprotect(p, page_sz, PROT_READ);
		snprintf(t->desc + l, sizeof(t->desc) - l, " [arg ro]");
		return xioctl(fd, cmd, p);
	}
	p = t->edge + 1 + 2 * rn(&t->r, 64);	/* odd address */
	memcpy(p, arg, size);
	snprintf(t->desc + l, sizeof(t->desc) - l, " [arg misaligned]");
	ret = xioctl(fd, cmd, p);
	memcpy(arg, p, size);
	return ret;
}

static void op_open(struct th *t)
{
	int fd, i, flags = O_RDWR | (chance(&t->r, 20) ? O_NONBLOCK : 0);

	if (chance(&t->r, 3))
		flags = chance(&t->r, 50) ? O_RDONLY : O_WRONLY;
	begin(t, "open(%s, %#x)", cfg_dev, flags);
	fd = open(cfg_dev, flags | O_CLOEXEC);
	judge(t, fd < 0 ? -errno : 0, E(EMFILE) | E(ENOMEM));
	if (fd < 0)
		return;
	lock_tbl();
	i = slot_new(t, O_DEV);
	if (i < 0) {
		unlock_tbl();
		close(fd);
		return;
	}
	objs[i].fd = fd;
	objs[i].ctx = next_ctx++;
	unlock_tbl();
}

static void op_dup(struct th *t)
{
	int i, fd, nfd;

	lock_tbl();
	i = pick(t, O_DEV, 0, 0);
	if (i < 0 || nlive[O_DEV] >= ocap[O_DEV]) {
		unlock_tbl();
		return;
	}
	fd = objs[i].fd;
	begin(t, "dup(dev fd %d ctx %d)", fd, objs[i].ctx);
	nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	judge(t, nfd < 0 ? -errno : 0, E(EBADF) | E(EMFILE));
	if (nfd >= 0) {
		int ctx = objs[i].ctx;

		i = slot_new(t, O_DEV);
		if (i < 0) {
			close(nfd);
		} else {
			objs[i].fd = nfd;
			objs[i].ctx = ctx;
		}
	}
	unlock_tbl();
}

/* Closing a device fd while other threads may be in ioctls on it. */
static void op_close_dev(struct th *t)
{
	int i, fd, ctx;

	lock_tbl();
	if (nlive[O_DEV] <= 1) {
		unlock_tbl();
		return;
	}
	i = pick(t, O_DEV, 0, 0);
	if (i < 0) {
		unlock_tbl();
		return;
	}
	fd = objs[i].fd;
	ctx = objs[i].ctx;
	obj_kill(i);
	ctx_gone_check(ctx);
	unlock_tbl();
	begin(t, "close(dev fd %d ctx %d)", fd, ctx);
	judge(t, close(fd) ? -errno : 0, 0);
}

static void op_query(struct th *t)
{
	struct kiwarp_query q;
	void *arg = &q;
	int fd, ctx;

	lock_tbl();
	ctx = pick_ctx(t, &fd);
	unlock_tbl();
	if (ctx < 0)
		return;
	if (chance(&t->r, 10))
		arg = chance(&t->r, 50) ? NULL : (void *)(bufs[0].p - 8);
	if (chance(&t->r, 5)) {	/* unknown commands, wrong sizes/dirs */
		unsigned long cmd = _IOC(rn(&t->r, 4), KIWARP_IOC_MAGIC,
					 rn(&t->r, 0x20), rn(&t->r, 300));

		if (chance(&t->r, 30))
			cmd = (unsigned long)rnd(&t->r);
		begin(t, "ioctl(fd %d, cmd %#lx)", fd, cmd);
		judge(t, xioctl(fd, cmd, &q), E_BASE);
		return;
	}
	begin(t, "QUERY(fd %d, %p)", fd, arg);
	judge(t, xioctl(fd, KIWARP_IOC_QUERY, arg), E_BASE);
}

static void op_alloc_pd(struct th *t)
{
	struct kiwarp_handle h = { 0 };
	int fd, ctx, i;
	long ret;

	lock_tbl();
	ctx = pick_ctx(t, &fd);
	unlock_tbl();
	if (ctx < 0)
		return;
	if (chance(&t->r, 3))
		h.reserved = gen_u32(&t->r);
	begin(t, "ALLOC_PD(fd %d ctx %d, reserved %u)", fd, ctx, h.reserved);
	ret = judge(t, kioctl(t, fd, KIWARP_IOC_ALLOC_PD, &h),
		    E_BASE | E(ENOSPC) | E(ENOMEM));
	if (ret)
		return;
	lock_tbl();
	i = slot_new(t, O_PD);
	if (i >= 0) {
		objs[i].ctx = ctx;
		objs[i].handle = h.handle;
	}
	unlock_tbl();
}

/* DEALLOC_PD, DEREG_MR, DESTROY_CQ, DESTROY_QP, DESTROY_LISTEN */
static void op_destroy(struct th *t, int type)
{
	static const unsigned long cmd[O_NTYPES] = {
		[O_PD] = KIWARP_IOC_DEALLOC_PD, [O_MR] = KIWARP_IOC_DEREG_MR,
		[O_CQ] = KIWARP_IOC_DESTROY_CQ, [O_QP] = KIWARP_IOC_DESTROY_QP,
		[O_LST] = KIWARP_IOC_DESTROY_LISTEN,
	};
	struct kiwarp_handle h = { 0 };
	int fd, ctx, slot, i;
	long ret;

	lock_tbl();
	ctx = pick_ctx(t, &fd);
	if (ctx < 0) {
		unlock_tbl();
		return;
	}
	h.handle = pick_handle(t, type, ctx, &slot);
	if (slot >= 0) {
		ctx = objs[slot].ctx;
		fd = op_fd(t, ctx);
	}
	/*
	 * Once the kernel has destroyed it, the handle may name a new object
	 * (handles are reused at once) before the table below says so: checks
	 * that trust an entry (op_mmap's ring geometry) skip entries whose
	 * handle is being destroyed.
	 */
	ctx = fd_ctx(fd);
	for (i = 0; i < MAX_OBJ; i++)
		if (objs[i].type == type && objs[i].live &&
		    objs[i].ctx == ctx && objs[i].handle == h.handle)
			objs[i].destroying++;
	unlock_tbl();
	if (chance(&t->r, 2))
		h.reserved = 1;
	begin(t, "DESTROY_%s(fd %d, handle %u)", oname[type], fd, h.handle);
	ret = judge(t, kioctl(t, fd, cmd[type], &h), E_BASE | E(EBUSY));
	/*
	 * Whatever the handle was picked as (live, stale, random, another
	 * context's), on success the object it named in fd's context is gone.
	 */
	lock_tbl();
	for (slot = 0; slot < MAX_OBJ; slot++)
		if (objs[slot].type == type && objs[slot].ctx == ctx &&
		    objs[slot].handle == h.handle) {
			if (objs[slot].destroying)
				objs[slot].destroying--;
			if (!ret && objs[slot].live)
				obj_kill(slot);
		}
	unlock_tbl();
}

static void op_reg_mr(struct th *t)
{
	struct kiwarp_reg_mr m = { 0 };
	int fd, ctx, slot, i;
	long ret;

	lock_tbl();
	ctx = pick_ctx(t, &fd);
	if (ctx < 0) {
		unlock_tbl();
		return;
	}
	m.pd = pick_handle(t, O_PD, ctx, &slot);
	unlock_tbl();
	gen_region(t, &m.addr, &m.length);
	m.access = chance(&t->r, 90) ? rn(&t->r, 8) : gen_u32(&t->r);
	if (chance(&t->r, 60))
		m.access = KIWARP_ACCESS_ALL;
	if (chance(&t->r, 3))
		m.reserved = gen_u64(&t->r);
	if (chance(&t->r, 3))
		m.handle = gen_u32(&t->r);	/* out fields are ignored */
	begin(t, "REG_MR(fd %d, pd %u, addr %#llx, len %#llx, access %#x)", fd,
	      m.pd, (unsigned long long)m.addr, (unsigned long long)m.length,
	      m.access);
	ret = judge(t, kioctl(t, fd, KIWARP_IOC_REG_MR, &m),
		    E_BASE | E(ENOMEM) | E(ENOSPC) | E(EOPNOTSUPP) | E(EINTR) |
		    E(EAGAIN) | E(EPERM));
	if (ret)
		return;
	lock_tbl();
	i = slot_new(t, O_MR);
	if (i >= 0) {
		objs[i].ctx = ctx;
		objs[i].handle = m.handle;
		objs[i].stag = m.stag;
		objs[i].addr = m.addr;
		objs[i].len = m.length;
		objs[i].access = m.access;
	}
	unlock_tbl();
	if (i < 0) {	/* table full: give it back */
		struct kiwarp_handle h = { .handle = m.handle };

		begin(t, "DEREG_MR(fd %d, handle %u) table full", fd, m.handle);
		judge(t, xioctl(fd, KIWARP_IOC_DEREG_MR, &h), E_BASE | E(EBUSY));
	}
}

static void op_create_cq(struct th *t)
{
	struct kiwarp_create_cq c = { 0 };
	int fd, ctx, i;
	long ret;

	lock_tbl();
	ctx = pick_ctx(t, &fd);
	unlock_tbl();
	if (ctx < 0)
		return;
	c.entries = chance(&t->r, 70) ? 1 + rn(&t->r, 256) : gen_u32(&t->r);
	if (chance(&t->r, 3))
		c.entries = 65536;	/* 2 MiB ring: the memlock path */
	if (chance(&t->r, 3))
		c.reserved = gen_u64(&t->r);
	begin(t, "CREATE_CQ(fd %d, entries %u)", fd, c.entries);
	ret = judge(t, kioctl(t, fd, KIWARP_IOC_CREATE_CQ, &c),
		    E_BASE | E(ENOMEM) | E(ENOSPC));
	if (ret)
		return;
	if (c.ring_entries < c.entries || (c.ring_entries & (c.ring_entries - 1)))
		finding(t, "CQ ring_entries not a power of two >= entries");
	lock_tbl();
	i = slot_new(t, O_CQ);
	if (i >= 0) {
		objs[i].ctx = ctx;
		objs[i].handle = c.handle;
		objs[i].g[0] = (struct ringgeo){ c.ring_entries, c.prod_off,
						 c.cons_off, c.ring_off,
						 c.mmap_offset, c.mmap_size };
	}
	unlock_tbl();
	if (i < 0) {
		struct kiwarp_handle h = { .handle = c.handle };

		begin(t, "DESTROY_CQ(fd %d, handle %u) table full", fd, c.handle);
		judge(t, xioctl(fd, KIWARP_IOC_DESTROY_CQ, &h), E_BASE | E(EBUSY));
	}
}

static void op_arm_cq(struct th *t)
{
	struct kiwarp_arm_cq a = { 0 };
	int fd;

	if (!pick_target(t, O_CQ, &fd, &a.cq))
		return;
	a.flags = chance(&t->r, 90) ? rn(&t->r, 2) : gen_u32(&t->r);
	begin(t, "ARM_CQ(fd %d, cq %u, flags %u)", fd, a.cq, a.flags);
	judge(t, kioctl(t, fd, KIWARP_IOC_ARM_CQ, &a), E_BASE);
}

static void op_create_qp(struct th *t)
{
	struct kiwarp_create_qp c = { 0 };
	int fd, ctx, s, i;
	long ret;

	lock_tbl();
	ctx = pick_ctx(t, &fd);
	if (ctx < 0) {
		unlock_tbl();
		return;
	}
	c.pd = pick_handle(t, O_PD, ctx, &s);
	c.send_cq = pick_handle(t, O_CQ, ctx, &s);
	c.recv_cq = chance(&t->r, 30) ? c.send_cq : pick_handle(t, O_CQ, ctx, &s);
	unlock_tbl();
	c.sq_entries = chance(&t->r, 80) ? 1 + rn(&t->r, 64) : gen_u32(&t->r);
	c.rq_entries = chance(&t->r, 80) ? 1 + rn(&t->r, 64) : gen_u32(&t->r);
	c.max_sge = chance(&t->r, 90) ? rn(&t->r, KIWARP_MAX_SGE + 1) :
		    gen_u32(&t->r);
	/*
	 * half with a copy_max of their own: by reference whatever the
	 * stack does with the pages (a default QP copies once told so, and
	 * its context's other QPs to the same peer with it)
	 */
	c.flags = chance(&t->r, 95) ? rn(&t->r, 4) : gen_u32(&t->r);
	if (c.flags & KIWARP_QP_COPY_MAX)
		c.copy_max = chance(&t->r, 90) ? rn(&t->r, 3) * 4096 :
			     gen_u32(&t->r);
	else if (chance(&t->r, 2))
		c.copy_max = gen_u32(&t->r) | 1;
	if (chance(&t->r, 2))
		c.reserved = 1;
	if (chance(&t->r, 2))
		c.sq.prod_off = 1;
	begin(t, "CREATE_QP(fd %d, pd %u, scq %u, rcq %u, sq %u, rq %u, sge %u, flags %#x, copy_max %u)",
	      fd, c.pd, c.send_cq, c.recv_cq, c.sq_entries, c.rq_entries,
	      c.max_sge, c.flags, c.copy_max);
	ret = judge(t, kioctl(t, fd, KIWARP_IOC_CREATE_QP, &c),
		    E_BASE | E(ENOMEM) | E(ENOSPC) | E(EBUSY));
	if (!ret && c.copy_max && !(c.flags & KIWARP_QP_COPY_MAX))
		finding(t, "CREATE_QP took a copy_max without its flag");
	if (ret)
		return;
	lock_tbl();
	i = slot_new(t, O_QP);
	if (i >= 0) {
		objs[i].ctx = ctx;
		objs[i].handle = c.handle;
		objs[i].max_sge = c.max_sge ? c.max_sge : 1;
		objs[i].g[0] = (struct ringgeo){ c.sq.ring_entries, c.sq.prod_off,
			c.sq.cons_off, c.sq.ring_off, c.sq.mmap_offset,
			c.sq.mmap_size };
		objs[i].g[1] = (struct ringgeo){ c.rq.ring_entries, c.rq.prod_off,
			c.rq.cons_off, c.rq.ring_off, c.rq.mmap_offset,
			c.rq.mmap_size };
	}
	unlock_tbl();
	if (i < 0) {
		struct kiwarp_handle h = { .handle = c.handle };

		begin(t, "DESTROY_QP(fd %d, handle %u) table full", fd, c.handle);
		judge(t, xioctl(fd, KIWARP_IOC_DESTROY_QP, &h), E_BASE | E(EBUSY));
	}
}

static void op_query_modify_qp(struct th *t)
{
	int fd;
	uint32_t qp;

	if (!pick_target(t, O_QP, &fd, &qp))
		return;
	if (chance(&t->r, 60)) {
		struct kiwarp_query_qp q = { .qp = qp };

		/* out-only fields must be 0 on input */
		if (chance(&t->r, 3)) {
			switch (rn(&t->r, 3)) {
			case 0:
				q.flags = gen_u32(&t->r) | 1;
				break;
			case 1:
				q.ooo_bytes = 1;
				break;
			default:
				q.peer_ird = 1;
				break;
			}
		}
		begin(t, "QUERY_QP(fd %d, qp %u)", fd, qp);
		judge(t, kioctl(t, fd, KIWARP_IOC_QUERY_QP, &q), E_BASE);
		if (q.state > KIWARP_QPS_ERROR)
			finding(t, "QUERY_QP state out of range");
	} else {
		struct kiwarp_modify_qp m = { .qp = qp };

		m.action = chance(&t->r, 90) ? 1 + rn(&t->r, 2) : gen_u32(&t->r);
		begin(t, "MODIFY_QP(fd %d, qp %u, action %u)", fd, qp, m.action);
		judge(t, kioctl(t, fd, KIWARP_IOC_MODIFY_QP, &m), E_BASE);
	}
}

static void op_doorbell(struct th *t)
{
	struct kiwarp_handle h = { 0 };
	int fd;

	if (!pick_target(t, O_QP, &fd, &h.handle))
		return;
	if (chance(&t->r, 2))
		h.reserved = gen_u32(&t->r);
	begin(t, "DOORBELL(fd %d, qp %u)", fd, h.handle);
	judge(t, kioctl(t, fd, KIWARP_IOC_QP_DOORBELL, &h), E_BASE);
}

/* read()/poll() of the event channel: never blocks. */
/*
 * Close an op's own dup of a table fd, watched: when another thread closed
 * the table's number meanwhile, this drops the last reference and runs the
 * file's release (a context's teardown, a socket's close).
 */
static void close_dup(struct th *t, int tfd, int fd)
{
	begin(t, "close(dup %d of fd %d)", fd, tfd);
	judge(t, close(fd) ? -errno : 0, 0);
}

static void op_events(struct th *t)
{
	uint32_t ev[8];
	struct pollfd p;
	int fd, tfd, ctx;
	size_t n;
	long ret;

	lock_tbl();
	ctx = pick_ctx(t, &tfd);
	/* our own number: the table's may be closed and reused meanwhile
	 * by a blocking fd (see op_sock_oldfd) */
	fd = ctx >= 0 ? fcntl(tfd, F_DUPFD_CLOEXEC, 0) : -1;
	unlock_tbl();
	if (fd < 0)
		return;
	p.fd = fd;
	p.events = POLLIN;
	begin(t, "poll(dev fd %d, dup %d)", tfd, fd);
	ret = poll(&p, 1, 0);
	judge(t, ret < 0 ? -errno : 0, E(EINTR));
	if (ret <= 0 || !(p.revents & POLLIN)) {
		close_dup(t, tfd, fd);
		return;
	}
	n = chance(&t->r, 90) ? 4 * (1 + rn(&t->r, 8)) : rn(&t->r, 40);
	begin(t, "read(dev fd %d, dup %d, %zu)", tfd, fd, n);
	/*
	 * POLLIN said there is an event, but another thread may take it
	 * first: never block (O_NONBLOCK is shared by the dups, fine).
	 */
	set_nb(fd);
	ret = read(fd, chance(&t->r, 5) ? NULL : ev, n);
	judge(t, ret < 0 ? -errno : 0, E(EAGAIN) | E(EINVAL) | E(EFAULT) |
	      E(EINTR) | E_FD);
	close_dup(t, tfd, fd);
}

/* -------------------------------------------------------------- mmap */

/*
 * Whether addr lies in a mapping of /dev/kiwarp (and, if exec, one that is
 * executable), from /proc/self/maps. Another thread may have replaced the
 * mapping meanwhile: a finding about a ring mapping is confirmed here.
 */
static int maps_kiwarp(uint64_t addr, int exec)
{
	char line[512], perm[8], path[256];
	unsigned long lo, hi;
	int ret = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		path[0] = 0;
		if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %255s", &lo, &hi, perm,
			   path) < 3)
			continue;
		if (addr < lo || addr >= hi)
			continue;
		ret = strstr(path, "kiwarp") && (!exec || perm[2] == 'x');
		break;
	}
	fclose(f);
	return ret;
}


static void op_mmap(struct th *t)
{
	int fd, ctx, slot, i, kind, prot, flags;
	struct ringgeo g = { 0 };
	unsigned gen = 0;
	uint64_t off, size;
	void *p;
	long ret;

	lock_tbl();
	ctx = pick_ctx(t, &fd);
	if (ctx < 0) {
		unlock_tbl();
		return;
	}
	if (chance(&t->r, 40)) {
		kind = 1;
		pick_handle(t, O_CQ, ctx, &slot);
		if (slot >= 0)
			g = objs[slot].g[0];
	} else {
		kind = 2 + rn(&t->r, 2);
		pick_handle(t, O_QP, ctx, &slot);
		if (slot >= 0)
			g = objs[slot].g[kind - 2];
	}
	if (slot >= 0) {
		ctx = objs[slot].ctx;
		fd = op_fd(t, ctx);
		gen = objs[slot].gen;
	}
	unlock_tbl();
	off = g.off;
	size = g.size;
	if (!size || chance(&t->r, 8)) {
		off = ((uint64_t)(chance(&t->r, 80) ? rn(&t->r, 5) : gen_u32(&t->r))
		       << 32 | gen_u32(&t->r)) * page_sz;
		size = page_sz * (1 + rn(&t->r, 4));
	}
	switch (rn(&t->r, 30)) {
	case 0:
		size += page_sz;	/* too big: must fail */
		break;
	case 1:
		size = size > (uint64_t)page_sz ? size - page_sz : size;
		break;
	case 2:
		off += page_sz * (chance(&t->r, 50) ? 1 : -1);
		break;
	case 3:
		off += 1 + rn(&t->r, page_sz - 1);
		break;
	}
	prot = PROT_READ | PROT_WRITE;
	flags = MAP_SHARED;
	if (chance(&t->r, 3))
		prot |= PROT_EXEC;
	else if (chance(&t->r, 3))
		prot = PROT_READ;
	if (chance(&t->r, 3))
		flags = MAP_PRIVATE;
	if (chance(&t->r, 2))
		flags |= MAP_POPULATE;
	begin(t, "mmap(fd %d, kind %d, off %#llx, size %#llx, prot %d, flags %#x)",
	      fd, kind, (unsigned long long)off, (unsigned long long)size, prot,
	      flags);
	p = mmap(NULL, size, prot, flags, fd, off);
	ret = p == MAP_FAILED ? -errno : 0;
	if (!ret) {
		size_t l = strlen(t->desc);

		snprintf(t->desc + l, sizeof(t->desc) - l, " -> %p", p);
	}
	/*
	 * EBUSY: fd was closed meanwhile and its number reused by a socket
	 * that kiwarp took (its mmap fails with -EBUSY, uapi: SOCKETS).
	 */
	judge(t, ret, E(EINVAL) | E(EPERM) | E(EACCES) | E(ENOMEM) |
	      E(EOVERFLOW) | E(EAGAIN) | E(EBUSY) | E_FD);
	if (ret)
		return;
	if (slot >= 0 && off == g.off &&
	    (size != g.size || (prot & PROT_EXEC) || !(flags & MAP_SHARED))) {
		/* only a finding if fd is still the object's context */
		lock_tbl();
		if (objs[slot].live && objs[slot].gen == gen &&
		    !objs[slot].destroying &&
		    fd_ctx(fd) == ctx && !ctx_taint[ctx % MAX_CTX] &&
		    maps_kiwarp((uintptr_t)p, 0))
		{
			char why[96];

			snprintf(why, sizeof(why), "%s (ring %#llx bytes, %u entries)",
				 size != g.size ? "ring mapped with wrong size" :
				 (prot & PROT_EXEC) ? "ring mapped executable" :
				 "ring mapped private",
				 (unsigned long long)g.size, g.entries);
			finding(t, why);
		}
		unlock_tbl();
	}
	lock_tbl();
	i = slot_new(t, O_MAP);
	if (i >= 0) {
		objs[i].addr = (uintptr_t)p;
		objs[i].len = size;
		objs[i].kind = kind;
		objs[i].ro = !(prot & PROT_WRITE);
		objs[i].ctx = ctx;
		/* the geometry applies only to a mapping of the whole ring */
		objs[i].g[0] = g;
		if (off != g.off || size != g.size)
			objs[i].g[0].entries = 0;
	}
	unlock_tbl();
	if (i < 0)
		munmap(p, size);
}

/*
 * Unmapping a ring replaces it with an inaccessible anonymous mapping (the
 * ring VMA is closed all the same) that stays reserved for the next
 * QUARANTINE unmaps: a thread still holding the old address then faults
 * (caught by the guard) instead of scribbling over whatever mmap() would
 * put there next, e.g. a new thread's stack.
 */
#define QUARANTINE 64
#define ARENA_LEN (4 << 20)
static void *arena;	/* mremap target */
static struct { uint64_t addr, len; } quar[QUARANTINE];
static unsigned quar_n;
static pthread_mutex_t quar_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * Replace the ring mapping at addr by a PROT_NONE placeholder, in one
 * step, and keep that for a while (QUARANTINE), so that a stale table
 * entry never names a newer mapping. hole: the ring was moved away
 * already, so another thread may have been given the range meanwhile (a
 * new ring, or the top of a new thread's stack): only an empty range is
 * taken then (MAP_FIXED_NOREPLACE), never someone else's.
 */
static long retire_(uint64_t addr, uint64_t len, int hole)
{
	unsigned i;
	void *p;

	p = mmap((void *)addr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS |
		 (hole ? MAP_FIXED_NOREPLACE : MAP_FIXED) | MAP_NORESERVE,
		 -1, 0);
	if (p == MAP_FAILED)
		return hole && errno == EEXIST ? 0 : -errno;
	if (p != (void *)addr) {	/* a kernel without NOREPLACE: a hint */
		munmap(p, len);
		return 0;
	}
	pthread_mutex_lock(&quar_lock);
	i = quar_n++ % QUARANTINE;
	if (quar[i].len)
		munmap((void *)quar[i].addr, quar[i].len);
	quar[i].addr = addr;
	quar[i].len = len;
	pthread_mutex_unlock(&quar_lock);
	return 0;
}

static long retire(uint64_t addr, uint64_t len)
{
	return retire_(addr, len, 0);
}

/* munmap, partial munmap, mremap, mprotect, madvise of a ring mapping */
static void op_unmap(struct th *t)
{
	struct obj m;
	int i, how, moved;
	long ret = 0;
	void *p;

	lock_tbl();
	i = pick(t, O_MAP, 0, 0);
	if (i < 0) {
		unlock_tbl();
		return;
	}
	m = objs[i];
	how = rn(&t->r, 10);
	if (how <= 4) {	/* gone for good */
		obj_kill(i);
		objs[i].type = O_FREE;
	}
	unlock_tbl();
	switch (how) {
	case 0:
	case 1:
	case 2:
		begin(t, "munmap(%#llx, %#llx)", (unsigned long long)m.addr,
		      (unsigned long long)m.len);
		ret = retire(m.addr, m.len);
		break;
	case 3:	/* split the VMA: first page, then the rest */
		begin(t, "munmap(%#llx, 1 page) then rest",
		      (unsigned long long)m.addr);
		ret = retire(m.addr, page_sz);
		retire(m.addr, m.len);
		break;
	case 4:	/* move it (VM_DONTEXPAND: growing must fail) */
		begin(t, "mremap(%#llx, %#llx, grow %d)",
		      (unsigned long long)m.addr, (unsigned long long)m.len,
		      how);
		p = mremap((void *)m.addr, m.len, m.len + page_sz,
			   MREMAP_MAYMOVE);
		moved = p != MAP_FAILED;
		if (p != MAP_FAILED) {
			if (maps_kiwarp((uintptr_t)p, 0))
				finding(t, "ring mapping could be grown");
			munmap(p, m.len + page_sz);
		}
		/* into a reserved arena, so nothing of ours is replaced */
		pthread_mutex_lock(&quar_lock);
		p = m.len <= ARENA_LEN ? mremap((void *)m.addr, m.len, m.len,
			MREMAP_MAYMOVE | MREMAP_FIXED, arena) : MAP_FAILED;
		ret = p == MAP_FAILED ? -errno : 0;
		moved |= p != MAP_FAILED;
		mmap(arena, ARENA_LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS |
		     MAP_FIXED | MAP_NORESERVE, -1, 0);
		pthread_mutex_unlock(&quar_lock);
		/* the ring left a hole at m.addr (or was grown away above) */
		retire_(m.addr, m.len, moved);
		break;
	case 5:
		begin(t, "mprotect(%#llx, EXEC)", (unsigned long long)m.addr);
		ret = mprotect((void *)m.addr, m.len,
			       PROT_READ | PROT_WRITE | PROT_EXEC) ? -errno : 0;
		if (!ret && maps_kiwarp(m.addr, 1))
			finding(t, "ring mapping made executable");
		break;
	case 6:
		begin(t, "mprotect(%#llx, READ)", (unsigned long long)m.addr);
		ret = mprotect((void *)m.addr, m.len, PROT_READ) ? -errno : 0;
		lock_tbl();
		if (!ret && objs[i].gen == m.gen)
			objs[i].ro = 1;
		unlock_tbl();
		break;
	case 7:
		begin(t, "madvise(%#llx, DONTNEED)", (unsigned long long)m.addr);
		ret = madvise((void *)m.addr, m.len, MADV_DONTNEED) ? -errno : 0;
		break;
	default:	/* mremap in place, same size: a no-op move */
		begin(t, "mremap(%#llx, same)", (unsigned long long)m.addr);
		p = mremap((void *)m.addr, m.len, m.len, 0);
		ret = p == MAP_FAILED ? -errno : 0;
	}
	judge(t, ret, E(EINVAL) | E(EFAULT) | E(ENOMEM) | E(EACCES) | E(EPERM) |
	      E(EAGAIN));
}

/* ------------------------------------------------------- ring writes */

/* Under tbl: a random live MR's (addr, len, stag), with skewed variants. */
static void gen_sge(struct th *t, struct kiwarp_sge *s)
{
	int i = pick(t, O_MR, 0, 5);
	uint64_t off, l;

	if (i < 0 || chance(&t->r, 4)) {
		s->addr = gen_u64(&t->r);
		s->length = gen_u32(&t->r);
		s->lkey = chance(&t->r, 50) && i >= 0 ? objs[i].stag :
			  (uint32_t)rnd(&t->r);
		return;
	}
	s->lkey = objs[i].stag;
	off = rn(&t->r, objs[i].len);
	l = chance(&t->r, 80) ? 1 + rn(&t->r, 4096) : objs[i].len;
	if (chance(&t->r, 85) && l > objs[i].len - off)
		l = objs[i].len - off;
	if (chance(&t->r, 5))
		l = 0;
	if (l > 0xffffffffULL)
		l = 0xffffffffULL;
	s->addr = objs[i].addr + off;
	s->length = l;
}

static void gen_wqe(struct th *t, struct kiwarp_wqe *w, int rq, uint32_t max_sge)
{
	static const uint8_t ops[] = {
		KIWARP_WR_SEND, KIWARP_WR_SEND, KIWARP_WR_SEND,
		KIWARP_WR_SEND_SE, KIWARP_WR_SEND_INV, KIWARP_WR_SEND_SE_INV,
		KIWARP_WR_RDMA_WRITE, KIWARP_WR_RDMA_WRITE,
		KIWARP_WR_RDMA_WRITE, KIWARP_WR_RDMA_READ, KIWARP_WR_RDMA_READ,
		KIWARP_WR_LOCAL_INV,
	};
	unsigned i, n;
	int m;

	memset(w, 0, sizeof(*w));
	if (chance(&t->r, 4)) {	/* garbage */
		uint64_t *q = (uint64_t *)w;

		for (i = 0; i < sizeof(*w) / 8; i++)
			q[i] = rnd(&t->r);
		return;
	}
	w->wr_id = rnd(&t->r);
	w->opcode = rq ? KIWARP_WR_RECV : ops[rn(&t->r, ARRAY_SIZE(ops))];
	if (chance(&t->r, 3))
		w->opcode = rn(&t->r, 256);
	w->flags = (chance(&t->r, 90) ? KIWARP_WR_SIGNALED : 0) |
		   (chance(&t->r, 10) ? KIWARP_WR_FENCE : 0);
	if (chance(&t->r, 2))
		w->flags = rn(&t->r, 256);
	n = w->opcode == KIWARP_WR_RDMA_READ ? 1 : rn(&t->r, max_sge + 1);
	if (w->opcode == KIWARP_WR_LOCAL_INV)
		n = 0;
	if (chance(&t->r, 3))
		n = rn(&t->r, 256);
	w->num_sge = n;
	lock_tbl();
	for (i = 0; i < n && i < KIWARP_MAX_SGE; i++)
		gen_sge(t, &w->sge[i]);
	m = pick(t, O_MR, 0, 5);
	if (m >= 0 && chance(&t->r, 92)) {
		w->rkey = objs[m].stag;
		w->remote_addr = objs[m].addr + rn(&t->r, objs[m].len);
		if (chance(&t->r, 50))
			w->remote_addr = objs[m].addr;
		w->inv_stag = objs[m].stag;
	} else {
		w->rkey = (uint32_t)rnd(&t->r);
		w->remote_addr = gen_u64(&t->r);
		w->inv_stag = (uint32_t)rnd(&t->r);
	}
	unlock_tbl();
	if (chance(&t->r, 2))
		w->reserved0 = 1;
	if (chance(&t->r, 2))
		w->reserved1 = gen_u32(&t->r);
}

/* What op_ring does to a mapping, prepared outside the guard. */
struct ringjob {
	struct obj m;
	int mode;
	uint32_t nw;
	uint32_t v[4];		/* random values drawn beforehand */
	struct kiwarp_wqe w[8];
};

/* Runs under the guard: touches only the mapping, takes no lock. */
static void ring_access(struct th *t, void *arg)
{
	struct ringjob *j = arg;
	const struct ringgeo *g = &j->m.g[0];
	uint8_t *base = (uint8_t *)j->m.addr;
	volatile uint32_t *prod = (volatile uint32_t *)(base + g->prod_off);
	volatile uint32_t *cons = (volatile uint32_t *)(base + g->cons_off);
	uint32_t p = ld(prod), c = ld(cons), n, k, used;

	(void)t;
	if (j->m.kind == 1) {	/* CQ: consume */
		n = p - c;
		if (j->mode < 85)
			st(cons, n > g->entries ? p : c + n);
		else if (j->mode < 95)
			st(cons, j->v[0]);
		else
			st(prod, j->v[0]);	/* kernel-owned */
		return;
	}
	if (j->mode < 75) {	/* valid entries */
		used = p - c;
		n = used > g->entries ? 0 : g->entries - used;
		k = j->nw < n ? j->nw : n;
		if (!k || j->m.ro)
			return;
		for (n = 0; n < k; n++)
			memcpy(base + g->ring_off + ((p + n) & (g->entries - 1)) *
			       sizeof(j->w[0]), &j->w[n], sizeof(j->w[0]));
		st(prod, p + k);
	} else if (j->mode < 88) {	/* bad producer index */
		static const int32_t d[] = { -1, -2, 1, 0x7fffffff,
					     (int32_t)0x80000000 };

		switch (j->v[0] % 5) {
		case 0:
			st(prod, p + d[j->v[1] % ARRAY_SIZE(d)]);
			break;
		case 1:
			st(prod, c + g->entries + (j->v[1] & 1));
			break;
		case 2:
			st(prod, c - 1);
			break;
		case 3:
			st(prod, p - j->v[1] % (g->entries + 1));
			break;
		default:
			st(prod, j->v[2]);
		}
	} else if (j->mode < 93) {	/* kernel-owned consumer index */
		st(cons, (j->v[0] & 1) ? p : j->v[2]);
	} else {	/* rewrite a slot the kernel may be reading */
		memcpy(base + g->ring_off + ((c + (j->v[0] & 3)) &
		       (g->entries - 1)) * sizeof(j->w[0]), &j->w[0],
		       sizeof(j->w[0]));
	}
}

/*
 * Run fn with SIGSEGV/SIGBUS turned into -EFAULT: mappings may be
 * unmapped, zapped or made read-only by another thread at any time.
 */
static int guarded(struct th *t, void (*fn)(struct th *, void *), void *arg)
{
	if (sigsetjmp(t->jb, 1))
		return -EFAULT;
	t->guard = 1;
	fn(t, arg);
	t->guard = 0;
	return 0;
}

/*
 * Produce entries on an SQ/RQ mapping (or consume a CQ) straight through
 * the shared memory, then (usually) ring the doorbell of its QP.
 */
static void op_ring(struct th *t)
{
	struct ringjob j;
	struct obj q = { 0 };
	uint32_t max_sge = KIWARP_MAX_SGE, n;
	int i, qi, fd = -1;

	lock_tbl();
	i = pick(t, O_MAP, 0, 0);
	if (i < 0 || !objs[i].g[0].entries) {
		unlock_tbl();
		return;
	}
	j.m = objs[i];
	/* the CQ or QP whose ring this is (to ring its doorbell) */
	for (qi = 0; qi < MAX_OBJ; qi++)
		if (objs[qi].type == (j.m.kind == 1 ? O_CQ : O_QP) &&
		    objs[qi].ctx == j.m.ctx &&
		    objs[qi].g[j.m.kind == 3].off == j.m.g[0].off)
			break;
	if (qi < MAX_OBJ) {
		q = objs[qi];
		fd = op_fd(t, q.ctx);
		if (q.type == O_QP)
			max_sge = q.max_sge;
	} else {
		qi = -1;
	}
	unlock_tbl();
	j.mode = rn(&t->r, 100);
	for (n = 0; n < ARRAY_SIZE(j.v); n++)
		j.v[n] = gen_u32(&t->r);
	j.nw = j.m.kind == 1 ? 0 : j.mode < 75 ? 1 + rn(&t->r, 8) : 1;
	for (n = 0; n < j.nw; n++)
		gen_wqe(t, &j.w[n], j.m.kind == 3, max_sge);
	begin(t, "ring(%s map %#llx, mode %d, n %u)", j.m.kind == 1 ? "cq" :
	      j.m.kind == 2 ? "sq" : "rq", (unsigned long long)j.m.addr,
	      j.mode, j.nw);
	judge(t, guarded(t, ring_access, &j), E(EFAULT));
	if (qi < 0 || j.m.kind == 1 || chance(&t->r, 25))
		return;
	{
		struct kiwarp_handle h = { .handle = q.handle };

		begin(t, "DOORBELL(fd %d, qp %u) after ring", fd, q.handle);
		judge(t, kioctl(t, fd, KIWARP_IOC_QP_DOORBELL, &h), E_BASE);
	}
}

/* ------------------------------------------------------------ sockets */

/*
 * A connected TCP pair over loopback (v6: ::1), close-on-exec and
 * TCP_NODELAY (kw_vmtest.h's tcp_pair() is neither). 0 or -errno.
 */
static int fuzz_tcp_pair(int v6, int *a, int *b)
{
	struct sockaddr_in6 s6 = { .sin6_family = AF_INET6 };
	struct sockaddr_in s4 = { .sin_family = AF_INET };
	struct sockaddr *sa = v6 ? (void *)&s6 : (void *)&s4;
	socklen_t len = v6 ? sizeof(s6) : sizeof(s4);
	int l, e, one = 1;

	s4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	s6.sin6_addr = in6addr_loopback;
	*a = *b = -1;
	l = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0)
		return -errno;
	if (bind(l, sa, len) || listen(l, 1) || getsockname(l, sa, &len))
		goto err;
	*a = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (*a < 0 || connect(*a, sa, len))
		goto err;
	*b = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	if (*b < 0)
		goto err;
	close(l);
	setsockopt(*a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(*b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return 0;
err:
	e = -errno;
	close(l);
	if (*a >= 0)
		close(*a);
	*a = -1;
	return e;
}

static int add_sock(struct th *t, int fd, int kind)
{
	int i;

	if (fd < 0)
		return -1;
	lock_tbl();
	i = slot_new(t, O_SOCK);
	if (i < 0 && (i = pick(t, O_SOCK, 0, 0)) >= 0) {
		/* table full: the new socket replaces (closes) an old one */
		close(objs[i].fd);
		objs[i].taken = 0;
	}
	if (i >= 0) {
		objs[i].fd = fd;
		objs[i].kind = kind;
	}
	unlock_tbl();
	if (i < 0)
		close(fd);
	return i;
}

/* An odd (or a plain connected) socket for the table. */
static void op_sock_new(struct th *t)
{
	int kind = rn(&t->r, SK_NKINDS), fd = -1, fd2 = -1, pfd[2];
	struct sockaddr_in sin = { .sin_family = AF_INET };
	long ret = 0;

	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	begin(t, "socket(%s)", skname[kind]);
	switch (kind) {
	case SK_UDP:
		fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fd >= 0)
			connect(fd, (void *)&sin, sizeof(sin));
		break;
	case SK_UNIX:
	case SK_UNIX_DGRAM:
		if (!socketpair(AF_UNIX, (kind == SK_UNIX ? SOCK_STREAM :
			    SOCK_DGRAM) | SOCK_CLOEXEC, 0, pfd)) {
			fd = pfd[0];
			fd2 = pfd[1];
		}
		break;
	case SK_TCP_LISTEN:
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd >= 0 && (bind(fd, (void *)&sin, sizeof(sin)) ||
				listen(fd, 4)))
			ret = -errno;
		break;
	case SK_TCP_NEW:
		fd = socket(chance(&t->r, 50) ? AF_INET : AF_INET6,
			    SOCK_STREAM | SOCK_CLOEXEC, 0);
		break;
	case SK_TCP_CONN:
	case SK_TCP6_CONN:
	case SK_TCP_PEERCLOSED:
	case SK_TCP_ULP:
		ret = fuzz_tcp_pair(kind == SK_TCP6_CONN, &fd, &fd2);
		if (ret)
			break;
		if (kind == SK_TCP_PEERCLOSED) {
			if (chance(&t->r, 50)) {	/* RST */
				struct linger lg = { 1, 0 };

				setsockopt(fd2, SOL_SOCKET, SO_LINGER, &lg,
					   sizeof(lg));
			}
			close(fd2);
			fd2 = -1;
		} else if (kind == SK_TCP_ULP) {
			/* kTLS if the kernel has it (ENOENT otherwise) */
			setsockopt(fd, IPPROTO_TCP, TCP_ULP, "tls", 4);
		}
		break;
	case SK_PIPE:
		if (!pipe2(pfd, O_CLOEXEC)) {
			fd = pfd[0];
			fd2 = pfd[1];
		}
		break;
	case SK_TCP_TO_KW: {	/* connect to a kiwarp listener, send nothing */
		int i;

		lock_tbl();
		i = pick(t, O_LST, 0, 0);
		if (i >= 0)
			sin.sin_port = objs[i].port;
		unlock_tbl();
		if (i < 0) {
			t->started = 0;	/* no listener: nothing to do */
			return;
		}
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd >= 0) {
			/* nobody may ACCEPT: once the listener's backlog is
			 * full its SYNs are dropped and a blocking connect
			 * retries for minutes */
			struct timeval tv = { .tv_sec = 2 };

			setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv,
				   sizeof(tv));
			if (connect(fd, (void *)&sin, sizeof(sin)))
				ret = -errno;
		}
		break;
	}
	}
	if (!ret && fd < 0)
		ret = -errno;
	judge(t, ret, E(EMFILE) | E(ENFILE) | E(ENOMEM) | E(ECONNREFUSED) |
	      E(EADDRINUSE) | E(EAFNOSUPPORT) | E(EADDRNOTAVAIL) |
	      E(ETIMEDOUT) | E(ENOBUFS) | E(EINPROGRESS) |
	      /* the kiwarp listener was destroyed mid-handshake */
	      E(ECONNRESET));
	add_sock(t, fd, kind);
	add_sock(t, fd2, kind);
}

static void gen_param(struct th *t, struct kiwarp_conn_param *p)
{
	memset(p, 0, sizeof(*p));
	p->mpa_rev = chance(&t->r, 95) ? 1 + rn(&t->r, 2) : rn(&t->r, 256);
	p->flags = rn(&t->r, 4);
	if (chance(&t->r, 3))
		p->flags = gen_u32(&t->r);
	if (p->mpa_rev != 2 && chance(&t->r, 90))
		p->flags &= ~KIWARP_CONN_P2P;
	p->rtr = (p->flags & KIWARP_CONN_P2P) ? rn(&t->r, 4) : 0;
	if (chance(&t->r, 2))
		p->rtr = rn(&t->r, 256);
	p->ird = chance(&t->r, 80) ? rn(&t->r, 17) : gen_u32(&t->r) % 300;
	p->ord = chance(&t->r, 80) ? rn(&t->r, 17) : gen_u32(&t->r) % 300;
	if (chance(&t->r, 2))
		p->reserved0 = 1;
}

static uint8_t pdata[1024];

static uint32_t gen_pdlen(struct th *t)
{
	if (chance(&t->r, 70))
		return rn(&t->r, 64);
	return chance(&t->r, 80) ? 500 + rn(&t->r, 20) : gen_u32(&t->r);
}

/* A QP of context ctx in IDLE (as far as we know), or -1. */
static int pick_idle_qp(struct th *t, int ctx)
{
	int i, n = 0, got = -1;

	for (i = 0; i < MAX_OBJ; i++)
		if (objs[i].type == O_QP && objs[i].live &&
		    !objs[i].connected && (ctx <= 0 || objs[i].ctx == ctx) &&
		    rn(&t->r, ++n) == 0)
			got = i;
	return got;
}

/* CONNECT or ACCEPT with a random socket from the table (or -1/garbage). */
static void op_sock_give(struct th *t)
{
	int fd, ctx, qs, ss = -1, sockfd, i, lport = 0;
	uint32_t qp;
	long ret;

	lock_tbl();
	ctx = pick_ctx(t, &fd);
	if (ctx < 0) {
		unlock_tbl();
		return;
	}
	qp = pick_handle(t, O_QP, ctx, &qs);
	if (qs >= 0) {
		fd = op_fd(t, objs[qs].ctx);
		objs[qs].connected = 1;
	}
	if (chance(&t->r, 90)) {
		ss = pick(t, O_SOCK, 0, 10);
		sockfd = ss >= 0 ? objs[ss].fd : -1;
	} else {
		sockfd = chance(&t->r, 50) ? fd : (int)gen_u32(&t->r);
	}
	if (ss >= 0)
		objs[ss].taken = 1;
	if ((i = pick(t, O_LST, 0, 0)) >= 0 && chance(&t->r, 70))
		lport = objs[i].port;
	unlock_tbl();
	if (chance(&t->r, 50)) {
		struct kiwarp_connect c = { .qp = qp, .sockfd = sockfd };

		gen_param(t, &c.param);
		c.timeout_ms = 1 + rn(&t->r, chance(&t->r, 90) ? 50 : 300);
		c.private_data_len = gen_pdlen(t);
		c.private_data = (uintptr_t)(chance(&t->r, 95) ? pdata :
					     (void *)gen_u64(&t->r));
		c.peer_private_data = chance(&t->r, 50) ? (uintptr_t)pdata + 512 :
				      chance(&t->r, 50) ? 0 : gen_u64(&t->r);
		if (chance(&t->r, 2))
			c.reserved = 1;
		if (sockfd == -1 && chance(&t->r, 70)) {	/* by address */
			uint32_t lo = htonl(INADDR_LOOPBACK);

			c.addr.family = AF_INET;
			memcpy(c.addr.addr, &lo, 4);
			c.addr.port = lport ? lport : htons(rn(&t->r, 65536));
			if (chance(&t->r, 10)) {
				c.addr.family = rn(&t->r, 64);
				c.addr.scope_id = gen_u32(&t->r);
			}
		}
		begin(t, "CONNECT(fd %d, qp %u, sockfd %d %s, rev %u flags %#x rtr %u ird %u ord %u, pd %u, tmo %u)",
		      fd, qp, sockfd, ss >= 0 ? skname[objs[ss].kind] : "-",
		      c.param.mpa_rev, c.param.flags, c.param.rtr, c.param.ird,
		      c.param.ord, c.private_data_len, c.timeout_ms);
		ret = kioctl(t, fd, KIWARP_IOC_CONNECT, &c);
	} else {
		struct kiwarp_accept a = { .qp = qp, .sockfd = sockfd };

		a.timeout_ms = 1 + rn(&t->r, chance(&t->r, 90) ? 50 : 300);
		a.peer_private_data = chance(&t->r, 80) ? (uintptr_t)pdata + 512 :
				      gen_u64(&t->r);
		if (chance(&t->r, 3))
			a.listen_handle = gen_u32(&t->r);
		begin(t, "ACCEPT(fd %d, qp %u, sockfd %d %s, tmo %u)", fd, qp,
		      sockfd, ss >= 0 ? skname[objs[ss].kind] : "-",
		      a.timeout_ms);
		ret = kioctl(t, fd, KIWARP_IOC_ACCEPT, &a);
	}
	judge(t, ret, E_BASE | E_NET);
}

/* Syscalls on the old fd of a socket (taken by kiwarp or not). */
static void op_sock_oldfd(struct th *t)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	char buf[256];
	int i, fd, tfd, how, v = 1, pfd[2];
	socklen_t sl = sizeof(v);
	long ret = 0;

	lock_tbl();
	i = pick(t, O_SOCK, 0, 0);
	if (i < 0 || (!objs[i].taken && chance(&t->r, 70))) {
		unlock_tbl();
		return;
	}
	fd = objs[i].fd;
	how = rn(&t->r, 17);
	if (how == 16) {	/* close the old fd: kiwarp keeps its ref */
		/*
		 * Closed with the table locked, once: a second close of the
		 * number by a thread that picked the same socket could hit a
		 * dev fd that took the number meanwhile, behind the table's
		 * back (its objects then looked like another context's: a
		 * false "ring mapped with wrong size" on 6.12).
		 */
		obj_kill(i);
		objs[i].type = O_FREE;
		begin(t, "oldfd(fd %d, how %d)", fd, how);
		ret = close(fd);
		unlock_tbl();
		judge(t, ret < 0 ? -errno : 0, ~(emask)0);
		return;
	}
	/*
	 * Our own number for the socket: once the table is unlocked another
	 * thread may close objs[i].fd and the number name a new, blocking
	 * fd (a pipe, a dev fd), on which a read would wait forever (the
	 * likely cause of a CI hang on 6.1, a worker stuck past the run).
	 */
	tfd = fd;
	fd = fcntl(tfd, F_DUPFD_CLOEXEC, 0);
	unlock_tbl();
	if (fd < 0)
		return;
	set_nb(fd);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sin.sin_port = htons(1 + rn(&t->r, 65535));
	memset(buf, 0xa5, sizeof(buf));
	begin(t, "oldfd(fd %d, dup %d, how %d)", tfd, fd, how);
	switch (how) {
	case 0:
		ret = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		break;
	case 1:
		ret = send(fd, buf, rn(&t->r, sizeof(buf)),
			   MSG_DONTWAIT | MSG_NOSIGNAL);
		break;
	case 2:
		sin.sin_family = AF_UNSPEC;
		ret = connect(fd, (void *)&sin, sizeof(sin));
		break;
	case 3:
		ret = connect(fd, (void *)&sin, sizeof(sin));
		break;
	case 4:
		ret = listen(fd, rn(&t->r, 8));
		break;
	case 5:
		ret = shutdown(fd, rn(&t->r, 3));
		break;
	case 6:
		ret = setsockopt(fd, IPPROTO_TCP, TCP_ULP, "tls", 4);
		break;
	case 7:
		v = rn(&t->r, 1 << 20);
		ret = setsockopt(fd, SOL_SOCKET, chance(&t->r, 50) ? SO_RCVBUF :
				 SO_SNDBUF, &v, sizeof(v));
		break;
	case 8:
		ret = getsockopt(fd, IPPROTO_TCP, TCP_INFO, buf, &sl);
		break;
	case 9: {
		struct pollfd p = { .fd = fd, .events = POLLIN | POLLOUT };

		ret = poll(&p, 1, 0);
		break;
	}
	case 10:
		ret = read(fd, buf, sizeof(buf));
		break;
	case 11:
		ret = write(fd, buf, 1 + rn(&t->r, sizeof(buf) - 1));
		break;
	case 12:
		if (pipe2(pfd, O_NONBLOCK | O_CLOEXEC)) {
			ret = -1;
			break;
		}
		ret = splice(fd, NULL, pfd[1], NULL, 4096, SPLICE_F_NONBLOCK);
		close(pfd[0]);
		close(pfd[1]);
		break;
	case 13: {
		int mfd = memfd_create("kw_fuzz_sf", 0);

		if (mfd < 0 || ftruncate(mfd, 8192)) {
			ret = -1;
		} else {
			ret = sendfile(fd, mfd, NULL, 8192);
		}
		if (mfd >= 0)
			close(mfd);
		break;
	}
	case 14:
		ret = ioctl(fd, FIONREAD, &v);
		break;
	case 15:
		v = 1;
		ret = setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v));
		break;
	}
	/* plain socket API: any errno is its business, only count it */
	judge(t, ret < 0 ? -errno : 0, ~(emask)0);
	close_dup(t, tfd, fd);
}

/* LISTEN on loopback / any / odd addresses. */
static void op_listen(struct th *t)
{
	struct kiwarp_listen l = { 0 };
	int fd, ctx, i;
	long ret;

	lock_tbl();
	ctx = pick_ctx(t, &fd);
	if (ctx >= 0 && chance(&t->r, 20) && (i = pick(t, O_LST, 0, 0)) >= 0)
		l.addr.port = objs[i].port;	/* EADDRINUSE */
	unlock_tbl();
	if (ctx < 0)
		return;
	l.addr.family = chance(&t->r, 90) ? (chance(&t->r, 70) ? AF_INET :
						AF_INET6) : gen_u32(&t->r) & 0xffff;
	if (l.addr.family == AF_INET) {
		uint32_t a = chance(&t->r, 80) ? htonl(INADDR_LOOPBACK) :
			     chance(&t->r, 50) ? 0 : (uint32_t)rnd(&t->r);

		memcpy(l.addr.addr, &a, 4);
	} else if (l.addr.family == AF_INET6) {
		l.addr.addr[15] = chance(&t->r, 80);
		l.addr.scope_id = chance(&t->r, 95) ? 0 : gen_u32(&t->r);
	}
	if (chance(&t->r, 5))
		l.addr.port = htons(chance(&t->r, 50) ? 80 : gen_u32(&t->r));
	l.backlog = chance(&t->r, 80) ? rn(&t->r, 16) : gen_u32(&t->r);
	if (chance(&t->r, 2))
		l.reserved1 = 1;
	begin(t, "LISTEN(fd %d, family %u, port %u, backlog %u)", fd,
	      l.addr.family, ntohs(l.addr.port), l.backlog);
	ret = judge(t, kioctl(t, fd, KIWARP_IOC_LISTEN, &l),
		    E_BASE | E(EADDRINUSE) | E(EADDRNOTAVAIL) |
		    E(EAFNOSUPPORT) | E(ENOMEM) | E(ENOSPC) | E(EMFILE) |
		    E(EPERM) | E(EACCES));
	if (ret)
		return;
	lock_tbl();
	i = slot_new(t, O_LST);
	if (i >= 0) {
		objs[i].ctx = ctx;
		objs[i].handle = l.handle;
		objs[i].port = l.port;
	}
	unlock_tbl();
	if (i < 0) {
		struct kiwarp_handle h = { .handle = l.handle };

		begin(t, "DESTROY_LISTEN(fd %d, %u) table full", fd, l.handle);
		judge(t, xioctl(fd, KIWARP_IOC_DESTROY_LISTEN, &h), E_BASE);
	}
}

/* ACCEPT on a listener (mostly times out: nobody connects). */
static void op_accept_listen(struct th *t)
{
	struct kiwarp_accept a = { .sockfd = -1 };
	int fd, ctx, s, q;

	lock_tbl();
	ctx = pick_ctx(t, &fd);
	if (ctx < 0) {
		unlock_tbl();
		return;
	}
	a.listen_handle = pick_handle(t, O_LST, ctx, &s);
	if (s >= 0)
		ctx = objs[s].ctx;
	fd = op_fd(t, ctx);
	q = pick_idle_qp(t, ctx);
	a.qp = q >= 0 ? objs[q].handle : gen_u32(&t->r);
	if (q >= 0)
		objs[q].connected = 1;
	unlock_tbl();
	a.timeout_ms = 1 + rn(&t->r, 50);
	a.peer_private_data = (uintptr_t)pdata + 512;
	begin(t, "ACCEPT(fd %d, qp %u, listen %u, tmo %u)", fd, a.qp,
	      a.listen_handle, a.timeout_ms);
	judge(t, kioctl(t, fd, KIWARP_IOC_ACCEPT, &a), E_BASE | E_NET);
}

/*
 * kiwarp to kiwarp over loopback: two idle QPs (maybe of two contexts),
 * either converting a TCP pair (CONNECT/ACCEPT with sockfd) or through a
 * kernel listener (LISTEN, CONNECT by address, ACCEPT on the listener).
 * The responder runs on a helper thread.
 */
struct resp {
	struct th *t;
	int fd, sockfd, reject, pdlen;
	uint32_t qp, lst;
	struct kiwarp_conn_param param;
	long ret_acc, ret_rep;
};

static void *responder(void *arg)
{
	struct resp *r = arg;
	struct kiwarp_accept a = { .qp = r->qp, .sockfd = r->sockfd };
	struct kiwarp_accept_reply ar = { .qp = r->qp };
	static __thread uint8_t ppd[512];

	a.listen_handle = r->sockfd < 0 ? r->lst : 0;
	a.timeout_ms = 3000;
	a.peer_private_data = (uintptr_t)ppd;
	r->ret_acc = xioctl(r->fd, KIWARP_IOC_ACCEPT, &a);
	if (r->ret_acc)
		return NULL;
	ar.action = r->reject;
	ar.param = r->param;
	ar.private_data_len = r->pdlen;
	ar.private_data = (uintptr_t)pdata;
	r->ret_rep = xioctl(r->fd, KIWARP_IOC_ACCEPT_REPLY, &ar);
	return NULL;
}

static void op_pair_connect(struct th *t)
{
	struct kiwarp_connect c = { .sockfd = -1 };
	struct resp r = { .t = t, .sockfd = -1 };
	int qa, qb, fa = -1, fb = -1, sa = -1, sb = -1, l, kcm;
	struct kiwarp_listen ls = { 0 };
	pthread_t pt;
	long ret;

	kcm = chance(&t->r, 25);
	lock_tbl();
	qa = pick_idle_qp(t, 0);
	qb = qa >= 0 ? pick_idle_qp(t, 0) : -1;
	if (qa < 0 || qb < 0 || qa == qb) {
		unlock_tbl();
		return;
	}
	objs[qa].connected = objs[qb].connected = 1;
	fa = ctx_fd(t, objs[qa].ctx);
	fb = ctx_fd(t, objs[qb].ctx);
	c.qp = objs[qa].handle;
	r.qp = objs[qb].handle;
	unlock_tbl();
	if (fa < 0 || fb < 0)
		return;
	r.fd = fb;
	if (kcm) {
		uint32_t lo = htonl(INADDR_LOOPBACK);

		ls.addr.family = AF_INET;
		memcpy(ls.addr.addr, &lo, 4);
		ls.backlog = 4;
		begin(t, "LISTEN(fd %d) for pair", fb);
		if (judge(t, xioctl(fb, KIWARP_IOC_LISTEN, &ls),
			  E_BASE | E(ENOMEM) | E(EMFILE) | E(ENOSPC)))
			return;
		lock_tbl();
		l = slot_new(t, O_LST);
		if (l >= 0) {
			objs[l].ctx = objs[qb].ctx;
			objs[l].handle = ls.handle;
			objs[l].port = ls.port;
		}
		unlock_tbl();
		r.lst = ls.handle;
		c.addr = ls.addr;
		c.addr.port = ls.port;
	} else {
		begin(t, "tcp_pair for pair");
		if (judge(t, fuzz_tcp_pair(chance(&t->r, 20), &sa, &sb),
			  E(EMFILE) | E(ENFILE) | E(ENOMEM)))
			return;
		c.sockfd = sa;
		r.sockfd = sb;
	}
	gen_param(t, &c.param);
	if (chance(&t->r, 80)) {	/* mostly parameters that work */
		c.param.reserved0 = 0;
		c.param.flags &= KIWARP_CONN_CRC | KIWARP_CONN_P2P;
		c.param.mpa_rev = (c.param.flags & KIWARP_CONN_P2P) ? 2 :
				  1 + rn(&t->r, 2);
		c.param.rtr &= 3;
		c.param.ird &= 15;
		c.param.ord &= 15;
	}
	r.param = c.param;
	r.param.rtr = c.param.rtr;
	r.reject = chance(&t->r, 10) ? KIWARP_REPLY_REJECT :
		   chance(&t->r, 2) ? (int)gen_u32(&t->r) : KIWARP_REPLY_ACCEPT;
	r.pdlen = chance(&t->r, 90) ? rn(&t->r, 100) : gen_pdlen(t);
	c.timeout_ms = 3000;
	c.private_data_len = chance(&t->r, 90) ? rn(&t->r, 100) : gen_pdlen(t);
	c.private_data = (uintptr_t)pdata;
	c.peer_private_data = (uintptr_t)pdata + 512;
	if (pthread_create(&pt, NULL, responder, &r)) {
		close(sa);
		close(sb);
		return;
	}
	begin(t, "PAIR(%s, fd %d qp %u <-> fd %d qp %u, rev %u flags %#x rtr %u ird %u ord %u, reject %d)",
	      kcm ? "kernel-cm" : "sockets", fa, c.qp, fb, r.qp, c.param.mpa_rev,
	      c.param.flags, c.param.rtr, c.param.ird, c.param.ord, r.reject);
	ret = xioctl(fa, KIWARP_IOC_CONNECT, &c);
	if (ret && r.sockfd >= 0)	/* unblock a responder waiting for MPA */
		shutdown(sb, SHUT_RDWR);
	pthread_join(pt, NULL);
	judge(t, ret, E_BASE | E_NET);
	begin(t, "PAIR responder accept");
	judge(t, r.ret_acc, E_BASE | E_NET);
	begin(t, "PAIR responder reply");
	judge(t, r.ret_rep, E_BASE | E_NET);
	if (!ret && !r.ret_acc && !r.ret_rep)
		atomic_fetch_add(&pairs_up, 1);
	/* the retained fds stay in the table for op_sock_oldfd */
	if (sa >= 0 && add_sock(t, sa, SK_TCP_CONN) >= 0) {
		lock_tbl();
		for (l = 0; l < MAX_OBJ; l++)
			if (objs[l].type == O_SOCK && objs[l].fd == sa)
				objs[l].taken = 1;
		unlock_tbl();
	}
	if (sb >= 0 && add_sock(t, sb, SK_TCP_CONN) >= 0) {
		lock_tbl();
		for (l = 0; l < MAX_OBJ; l++)
			if (objs[l].type == O_SOCK && objs[l].fd == sb)
				objs[l].taken = 1;
		unlock_tbl();
	}
}

/*
 * A raw TCP peer speaking just enough MPA (a Request) for ACCEPT to take
 * the socket, then garbage on the stream: the receive parser's error
 * paths from the fuzzer's side (kw_hostile does this in depth).
 */
static void op_raw_peer(struct th *t)
{
	struct kiwarp_accept a = { 0 };
	struct kiwarp_accept_reply ar = { 0 };
	uint8_t req[20 + 64], junk[512];
	int q, fd, sa, sb, n;
	unsigned i;
	long ret;

	lock_tbl();
	q = pick_idle_qp(t, 0);
	if (q < 0) {
		unlock_tbl();
		return;
	}
	objs[q].connected = 1;
	fd = ctx_fd(t, objs[q].ctx);
	a.qp = ar.qp = objs[q].handle;
	unlock_tbl();
	begin(t, "tcp_pair for raw peer");
	if (fd < 0 || judge(t, fuzz_tcp_pair(0, &sa, &sb), E(EMFILE) | E(ENFILE)))
		return;
	memcpy(req, "MPA ID Req Frame", 16);
	req[16] = chance(&t->r, 50) ? 0x40 : 0;	/* CRC */
	req[17] = 1;				/* rev 1: no IRD/ORD field */
	n = chance(&t->r, 90) ? 0 : rn(&t->r, 64);
	req[18] = 0;
	req[19] = n;
	memset(req + 20, 0x42, n);
	if (chance(&t->r, 10))
		req[rn(&t->r, 20)] ^= 1 << rn(&t->r, 8);
	if (send(sa, req, 20 + n, MSG_NOSIGNAL) < 0) {
		close(sa);
		close(sb);
		return;
	}
	a.sockfd = sb;
	a.timeout_ms = 500;
	begin(t, "ACCEPT(fd %d, qp %u, raw peer sock %d)", fd, a.qp, sb);
	ret = judge(t, kioctl(t, fd, KIWARP_IOC_ACCEPT, &a), E_BASE | E_NET);
	if (!ret) {
		ar.param.mpa_rev = 1;
		ar.param.flags = req[16] ? KIWARP_CONN_CRC : 0;
		begin(t, "ACCEPT_REPLY(fd %d, qp %u, raw peer)", fd, a.qp);
		ret = judge(t, kioctl(t, fd, KIWARP_IOC_ACCEPT_REPLY, &ar),
			    E_BASE | E_NET);
	}
	if (!ret) {
		/* drain the reply, then send garbage FPDUs */
		set_nb(sa);
		while (recv(sa, junk, sizeof(junk), 0) > 0)
			;
		for (i = 0; i < sizeof(junk); i++)
			junk[i] = rnd(&t->r);
		if (chance(&t->r, 50)) {	/* plausible ULPDU length */
			junk[0] = 0;
			junk[1] = 14 + rn(&t->r, 64);
			junk[2] = chance(&t->r, 50) ? 0x80 : 0x41;
		}
		begin(t, "raw peer send junk");
		send(sa, junk, 1 + rn(&t->r, sizeof(junk)),
		     MSG_NOSIGNAL | MSG_DONTWAIT);
		t->started = 0;
	}
	close(sa);	/* the QP sees a reset or FIN: error path */
	add_sock(t, sb, SK_TCP_CONN);
}

/* ------------------------------------------------- targeted races */

struct racer {
	struct th *t;
	int fd, kind;
	uint32_t qp;
	volatile uint32_t *prod;
	uint8_t *ring;
	uint32_t entries;
	atomic_int *go;
	uint64_t seed;
	struct kiwarp_wqe w;
	struct th me;		/* the producer's own guard */
};

static void *race_doorbell(void *arg)
{
	struct racer *r = arg;
	struct kiwarp_handle h = { .handle = r->qp };
	int i;

	for (i = 0; i < 200 && atomic_load(r->go); i++)
		ioctl(r->fd, KIWARP_IOC_QP_DOORBELL, &h);
	return NULL;
}

static void race_write(struct th *t, void *arg)
{
	struct racer *r = arg;
	uint32_t p = ld(r->prod);

	memcpy(r->ring + (p & (r->entries - 1)) * sizeof(r->w), &r->w,
	       sizeof(r->w));
	st(r->prod, p + 1);
	(void)t;
}

/* Produces SQ entries as fast as it can, with its own guard. */
static void *race_producer(void *arg)
{
	struct racer *r = arg;
	struct th *me = &r->me;
	int i;

	me->id = r->t->id + 1000;
	me->r.s = r->seed;
	cur_th = me;
	for (i = 0; i < 200 && atomic_load(r->go); i++) {
		gen_wqe(me, &r->w, 0, KIWARP_MAX_SGE);
		if (guarded(me, race_write, r))
			break;
	}
	return NULL;
}

/*
 * The issue 6 row 3 pattern, on purpose: doorbells and SQ production on
 * one QP while this thread destroys the QP and then its CQs.
 */
static void op_race_destroy(struct th *t)
{
	struct kiwarp_handle h = { 0 };
	struct racer r[2];
	atomic_int go = 1;
	pthread_t pt[2];
	int i, m, fd, ok[2], cqslot[2] = { -1, -1 };
	uint32_t cqs[2] = { 0, 0 }, cqgen[2] = { 0, 0 };
	void *map;
	struct obj q;

	lock_tbl();
	i = pick(t, O_QP, 0, 0);
	if (i < 0) {
		unlock_tbl();
		return;
	}
	q = objs[i];
	fd = ctx_fd(t, q.ctx);
	/* its CQs: any live CQ of the context may be one of them */
	for (m = 0; m < 2; m++) {
		cqslot[m] = pick(t, O_CQ, q.ctx, 0);
		if (cqslot[m] >= 0) {
			cqs[m] = objs[cqslot[m]].handle;
			cqgen[m] = objs[cqslot[m]].gen;
		}
	}
	unlock_tbl();
	if (fd < 0)
		return;
	begin(t, "race: mmap sq of qp %u", q.handle);
	map = mmap(NULL, q.g[0].size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		   q.g[0].off);
	/* EACCES: the context's fd may be open read-only */
	judge(t, map == MAP_FAILED ? -errno : 0, E(EINVAL) | E(ENOMEM) | E_FD |
	      E(EAGAIN) | E(EACCES));
	if (map == MAP_FAILED)
		return;
	for (m = 0; m < 2; m++) {
		r[m] = (struct racer){ t, fd, m, q.handle,
			(volatile uint32_t *)((uint8_t *)map + q.g[0].prod_off),
			(uint8_t *)map + q.g[0].ring_off, q.g[0].entries, &go,
			rnd(&t->r), { 0 }, { 0 } };
		ok[m] = !pthread_create(&pt[m], NULL, m ? race_producer :
					race_doorbell, &r[m]);
	}
	for (m = rn(&t->r, 50); m > 0; m--)
		sched_yield();
	h.handle = q.handle;
	begin(t, "race: DESTROY_QP(fd %d, %u) under doorbells", fd, q.handle);
	if (!judge(t, xioctl(fd, KIWARP_IOC_DESTROY_QP, &h), E_BASE)) {
		lock_tbl();
		if (objs[i].gen == q.gen)
			obj_kill(i);
		unlock_tbl();
	}
	for (m = 0; m < 2; m++) {
		if (!cqs[m])
			continue;
		h.handle = cqs[m];
		begin(t, "race: DESTROY_CQ(fd %d, %u)", fd, cqs[m]);
		if (judge(t, xioctl(fd, KIWARP_IOC_DESTROY_CQ, &h),
			  E_BASE | E(EBUSY)))
			continue;
		/*
		 * Gone: out of the table too, or a CQ created later with the
		 * same handle (and another size) would be judged by this
		 * one's geometry ("ring mapped with wrong size", a rehearsal
		 * of make check on 6.1).
		 */
		lock_tbl();
		if (objs[cqslot[m]].gen == cqgen[m])
			obj_kill(cqslot[m]);
		unlock_tbl();
	}
	atomic_store(&go, 0);
	for (m = 0; m < 2; m++)
		if (ok[m])
			pthread_join(pt[m], NULL);
	munmap(map, q.g[0].size);
}

/* Private contexts' fds start here; the table's stay far below (ocap). */
#define PRIVATE_FD_MIN 512

/* ACCEPT without timeout on a listener; the QP is destroyed meanwhile. */
struct acc_race {
	int fd;
	struct kiwarp_accept a;
	long ret;
};

static void *acc_waiter(void *arg)
{
	struct acc_race *r = arg;

	r->ret = xioctl(r->fd, KIWARP_IOC_ACCEPT, &r->a);
	return NULL;
}

/*
 * Issue 6 row 7: DESTROY_QP must end an ACCEPT blocked (timeout_ms = 0)
 * on a listener; if it does not, the watchdog reports the hang.
 */
static void op_race_accept(struct th *t)
{
	struct acc_race r = { .a = { .sockfd = -1 } };
	struct kiwarp_create_qp cq = { .sq_entries = 4, .rq_entries = 4 };
	struct kiwarp_create_cq cc = { .entries = 8 };
	struct kiwarp_listen l = { .backlog = 2 };
	struct kiwarp_handle h = { 0 };
	uint32_t lo = htonl(INADDR_LOOPBACK);
	struct timespec ts;
	pthread_t pt;
	int n;

	/*
	 * A private context: no other thread can destroy the QP and have
	 * its handle reused under the blocked ACCEPT. Its fd is moved above
	 * the numbers the table's fds take: an operation another thread
	 * picked from the table before its fd was closed (op_race_close(),
	 * a closing context) may still run on that number, and reached this
	 * context when open() reused it (a debug-tier run saw CREATE_QP fail
	 * with EINVAL here, its CQ destroyed from outside).
	 */
	begin(t, "race_accept: private context");
	n = open(cfg_dev, O_RDWR | O_CLOEXEC);
	r.fd = n < 0 ? n : fcntl(n, F_DUPFD_CLOEXEC, PRIVATE_FD_MIN);
	if (n >= 0)
		close(n);
	if (judge(t, r.fd < 0 ? -errno : 0, E(EMFILE) | E(ENOMEM)))
		return;
	l.addr.family = AF_INET;
	memcpy(l.addr.addr, &lo, 4);
	begin(t, "race_accept: PD, CQ, QP, LISTEN");
	if (judge(t, xioctl(r.fd, KIWARP_IOC_ALLOC_PD, &h) ?:
		  xioctl(r.fd, KIWARP_IOC_CREATE_CQ, &cc) ?:
		  xioctl(r.fd, KIWARP_IOC_LISTEN, &l),
		  E(ENOMEM) | E(ENOSPC) | E(EMFILE)))
		goto out;
	cq.pd = h.handle;
	cq.send_cq = cq.recv_cq = cc.handle;
	begin(t, "race_accept: CREATE_QP");
	if (judge(t, xioctl(r.fd, KIWARP_IOC_CREATE_QP, &cq), E(ENOMEM)))
		goto out;
	r.a.qp = h.handle = cq.handle;
	r.a.listen_handle = l.handle;
	if (pthread_create(&pt, NULL, acc_waiter, &r))
		goto out;
	for (n = rn(&t->r, 30); n > 0; n--)
		sched_yield();
	if (chance(&t->r, 50))
		usleep(rn(&t->r, 20000));
	begin(t, "race: DESTROY_QP(fd %d, %u) during ACCEPT(listen %u, no timeout)",
	      r.fd, h.handle, r.a.listen_handle);
	judge(t, xioctl(r.fd, KIWARP_IOC_DESTROY_QP, &h), 0);
	/*
	 * The ACCEPT fails with -EINVAL once it wakes (uapi: SOCKETS), but
	 * waiting for a connection it wakes only for one, a signal, or the
	 * listener's destruction: destroy that (the watchdog covers the join).
	 */
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 200 * 1000 * 1000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	if (pthread_timedjoin_np(pt, NULL, &ts)) {
		h.handle = l.handle;
		begin(t, "race: DESTROY_LISTEN(fd %d, %u) under a blocked ACCEPT",
		      r.fd, l.handle);
		judge(t, xioctl(r.fd, KIWARP_IOC_DESTROY_LISTEN, &h), 0);
		begin(t, "race: join ACCEPT(listen %u, no timeout) after DESTROY_LISTEN",
		      l.handle);
		pthread_join(pt, NULL);
		judge(t, 0, 0);
	}
	begin(t, "race: ACCEPT(qp %u, no timeout) result", r.a.qp);
	judge(t, r.ret, E(EINVAL) | E(EINTR) | E(ECONNABORTED));
out:
	close(r.fd);
}

/* Close a device fd while a helper thread is in ioctls on it. */
static void *close_racer(void *arg)
{
	struct racer *r = arg;
	struct kiwarp_create_cq c = { .entries = 4 };
	struct kiwarp_query_qp qq = { .qp = r->qp };
	struct kiwarp_handle h = { .handle = r->qp };
	int i;

	for (i = 0; i < 100 && atomic_load(r->go); i++) {
		switch (i % 3) {
		case 0:
			ioctl(r->fd, KIWARP_IOC_QP_DOORBELL, &h);
			break;
		case 1:
			qq.qp = r->qp;
			ioctl(r->fd, KIWARP_IOC_QUERY_QP, &qq);
			break;
		default:
			c.handle = 0;
			if (!ioctl(r->fd, KIWARP_IOC_CREATE_CQ, &c)) {
				h.handle = c.handle;
				ioctl(r->fd, KIWARP_IOC_DESTROY_CQ, &h);
				h.handle = r->qp;
			}
		}
	}
	return NULL;
}

static void op_race_close(struct th *t)
{
	struct racer r = { 0 };
	atomic_int go = 1;
	pthread_t pt;
	int i, fd, dfd, ctx, m;

	lock_tbl();
	i = pick(t, O_DEV, 0, 0);
	if (i < 0 || nlive[O_DEV] >= ocap[O_DEV]) {
		unlock_tbl();
		return;
	}
	fd = objs[i].fd;
	ctx = objs[i].ctx;
	m = pick(t, O_QP, ctx, 0);
	r.qp = m >= 0 ? objs[m].handle : 1;
	/* a dup, so that the context itself survives (usually) */
	dfd = chance(&t->r, 70) ? fcntl(fd, F_DUPFD_CLOEXEC, 3) : fd;
	if (dfd == fd) {
		obj_kill(i);
		ctx_gone_check(ctx);
	}
	unlock_tbl();
	if (dfd < 0)
		return;
	r.fd = dfd;
	r.go = &go;
	if (pthread_create(&pt, NULL, close_racer, &r)) {
		if (dfd != fd)
			close(dfd);
		return;
	}
	for (m = rn(&t->r, 20); m > 0; m--)
		sched_yield();
	begin(t, "race: close(dev fd %d%s) during ioctls", dfd,
	      dfd == fd ? ", last" : ", dup");
	judge(t, close(dfd) ? -errno : 0, 0);
	atomic_store(&go, 0);
	pthread_join(pt, NULL);
}

/* ------------------------------------------------------------- fork */

static void run_ops(struct th *t, long n);

/*
 * fork() with the table locked (so the child's copy is consistent); the
 * child runs ops on the inherited fds and mappings until it is killed at a
 * random point, sometimes blocked in an ACCEPT without timeout.
 */
static void op_fork(struct th *t)
{
	int status, i, fd;
	uint32_t delay = rn(&t->r, 50000);
	uint64_t cseed = rnd(&t->r);
	pid_t pid;

	if (!cfg_fork)
		return;
	begin(t, "fork (child killed after %u us)", delay);
	lock_tbl();
	for (i = 0; i < MAX_OBJ; i++)
		if (objs[i].type == O_DEV && objs[i].live)
			ctx_taint[objs[i].ctx % MAX_CTX] = 1;
	pid = fork();
	if (pid == 0) {
		in_child = 1;
		alarm(30);
		t->r.s = cseed;
		signal(SIGALRM, SIG_DFL);
		if (chance(&t->r, 25) && !unshare(CLONE_NEWUSER | CLONE_NEWNET)) {
			/*
			 * Issue 6 row 4: a listener made through an inherited
			 * fd in a namespace that dies with this child.
			 */
			struct kiwarp_listen l = { .backlog = 4 };

			l.addr.family = chance(&t->r, 50) ? AF_INET : AF_INET6;
			i = pick(t, O_DEV, 0, 0);
			if (i >= 0)
				ioctl(objs[i].fd, KIWARP_IOC_LISTEN, &l);
			_exit(0);
		}
		if (chance(&t->r, 20)) {
			struct kiwarp_accept a = { .sockfd = -1 };

			i = pick(t, O_LST, 0, 0);
			if (i >= 0 && (fd = ctx_fd(t, objs[i].ctx)) >= 0) {
				a.listen_handle = objs[i].handle;
				i = pick_idle_qp(t, objs[i].ctx);
				a.qp = i >= 0 ? objs[i].handle : 1;
				/* no timeout: blocks until SIGKILL */
				ioctl(fd, KIWARP_IOC_ACCEPT, &a);
			}
		}
		run_ops(t, 1000000);
		_exit(0);
	}
	unlock_tbl();
	if (pid < 0) {
		judge(t, -errno, E(EAGAIN) | E(ENOMEM));
		return;
	}
	usleep(delay);
	kill(pid, SIGKILL);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 4)
		finding(t, "fork child crashed");
	judge(t, 0, 0);
}

/* Remap/protect/zap a registered buffer (pins must hold the old pages). */
static void op_buf_churn(struct th *t)
{
	struct buf *b = &bufs[rn(&t->r, nbufs)];
	long ret = 0;
	void *p;

	if (b->kind != B_ANON && b->kind != B_MEMFD && b->kind != B_ANON_BIG)
		return;
	switch (rn(&t->r, 3)) {
	case 0:
		begin(t, "madvise(buf %s, DONTNEED)", bname[b->kind]);
		ret = madvise(b->p, b->len, MADV_DONTNEED);
		break;
	case 1:
		begin(t, "mmap FIXED over buf %s", bname[b->kind]);
		if (b->kind == B_MEMFD)
			return;
		p = mmap(b->p, b->len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		ret = p == MAP_FAILED ? -1 : 0;
		break;
	default:
		begin(t, "mprotect(buf %s, none then rw)", bname[b->kind]);
		ret = mprotect(b->p, b->len, PROT_NONE);
		sched_yield();
		ret |= mprotect(b->p, b->len, PROT_READ | PROT_WRITE);
	}
	judge(t, ret ? -errno : 0, E(ENOMEM) | E(EAGAIN));
}

/* ------------------------------------------------------- op dispatch */

struct opdef {
	const char *name;
	void (*fn)(struct th *t);
	int weight;
};

static void op_dealloc_pd(struct th *t) { op_destroy(t, O_PD); }
static void op_dereg_mr(struct th *t) { op_destroy(t, O_MR); }
static void op_destroy_cq(struct th *t) { op_destroy(t, O_CQ); }
static void op_destroy_qp(struct th *t) { op_destroy(t, O_QP); }
static void op_destroy_lst(struct th *t) { op_destroy(t, O_LST); }

static struct opdef opdefs[] = {
	{ "open", op_open, 6 },
	{ "dup", op_dup, 2 },
	{ "close_dev", op_close_dev, 2 },
	{ "query", op_query, 6 },
	{ "alloc_pd", op_alloc_pd, 8 },
	{ "dealloc_pd", op_dealloc_pd, 4 },
	{ "reg_mr", op_reg_mr, 16 },
	{ "dereg_mr", op_dereg_mr, 10 },
	{ "create_cq", op_create_cq, 12 },
	{ "destroy_cq", op_destroy_cq, 6 },
	{ "arm_cq", op_arm_cq, 6 },
	{ "create_qp", op_create_qp, 16 },
	{ "destroy_qp", op_destroy_qp, 6 },
	{ "query_modify_qp", op_query_modify_qp, 10 },
	{ "doorbell", op_doorbell, 16 },
	{ "events", op_events, 4 },
	{ "mmap", op_mmap, 20 },
	{ "unmap", op_unmap, 6 },
	{ "ring", op_ring, 60 },
	{ "sock_new", op_sock_new, 6 },
	{ "sock_give", op_sock_give, 4 },
	{ "sock_oldfd", op_sock_oldfd, 8 },
	{ "listen", op_listen, 2 },
	{ "destroy_listen", op_destroy_lst, 2 },
	{ "accept_listen", op_accept_listen, 2 },
	{ "pair_connect", op_pair_connect, 10 },
	{ "raw_peer", op_raw_peer, 2 },
	{ "race_destroy", op_race_destroy, 2 },
	{ "race_close", op_race_close, 2 },
	{ "race_accept", op_race_accept, 2 },
	{ "fork", op_fork, 1 },
	{ "buf_churn", op_buf_churn, 2 },
};

static int op_total_weight;

/* Whether name is an element of the comma-separated list. */
static int in_list(const char *list, const char *name)
{
	size_t n = strlen(name);
	const char *p = list;

	while ((p = strstr(p, name))) {
		if ((p == list || p[-1] == ',') && (p[n] == ',' || !p[n]))
			return 1;
		p += n;
	}
	return 0;
}
static atomic_long op_count[64];
static _Atomic double op_secs[64];

static int time_up(void)
{
	if (atomic_load(&stop_flag))
		return 1;
	if (cfg_ops >= 0 && atomic_load(&ops_done) >= cfg_ops)
		return 1;
	if (cfg_seconds >= 0 && now() - t_start >= cfg_seconds)
		return 1;
	return 0;
}

static void run_ops(struct th *t, long n)
{
	long i;
	int w, k;

	for (i = 0; i < n && (in_child || !time_up()); i++) {
		w = rn(&t->r, op_total_weight);
		for (k = 0; w >= opdefs[k].weight; k++)
			w -= opdefs[k].weight;
		if (in_child && opdefs[k].fn == op_fork)
			continue;
		{
			double t0 = now(), d;

			opdefs[k].fn(t);
			d = now() - t0;
			atomic_fetch_add(&op_count[k], 1);
			/* not atomic as a sum; statistics only */
			op_secs[k] = op_secs[k] + d;
		}
	}
}

static void *worker(void *arg)
{
	struct th *t = arg;

	cur_th = t;
	run_ops(t, cfg_ops >= 0 ? cfg_ops : 1L << 60);
	return NULL;
}

/* -------------------------------------------------------- watchdog */

static void *watchdog(void *arg)
{
	double last = now();
	int k;

	(void)arg;
	/*
	 * Until every worker is joined, not only until the run's time is up:
	 * a worker stuck in an op after thread 0 ended must still be named
	 * (it was not, and the global alarm fired without saying which op).
	 */
	while (!atomic_load(&wd_done)) {
		sleep(1);
		for (k = 0; k < cfg_threads; k++) {
			double s = ths[k].started;

			if (s && now() - s > cfg_hang) {
				say("not ok - kw_fuzz: op hung > %d s: t%d #%ld: %s (seed %llu)\n",
				    cfg_hang, k, ths[k].n, ths[k].desc,
				    (unsigned long long)cfg_seed);
				dump_oplog("hang");
				_exit(3);
			}
		}
		if (now() - last >= 10 && !atomic_load(&stop_flag)) {
			last = now();
			say("# progress: %.0fs ops=%ld (%.0f/s) unexpected=%ld live: dev %d pd %d mr %d cq %d qp %d lst %d map %d sock %d\n",
			    now() - t_start, atomic_load(&ops_done),
			    atomic_load(&ops_done) / (now() - t_start),
			    atomic_load(&unexpected), nlive[O_DEV],
			    nlive[O_PD], nlive[O_MR], nlive[O_CQ],
			    nlive[O_QP], nlive[O_LST], nlive[O_MAP],
			    nlive[O_SOCK]);
		}
	}
	return NULL;
}

static const char *phase = "setup";

static void alarm_handler(int sig)
{
	(void)sig;
	int k;

	for (k = 0; ths && k < cfg_threads; k++)
		if (ths[k].started)
			break;
	if (ths && k < cfg_threads)
		say("not ok - kw_fuzz: global watchdog fired in phase %s (seed %llu), t%d in %s for %.0f s\n",
		    phase, (unsigned long long)cfg_seed, k, ths[k].desc,
		    now() - ths[k].started);
	else
		say("not ok - kw_fuzz: global watchdog fired in phase %s (seed %llu), no op in progress\n",
		    phase, (unsigned long long)cfg_seed);
	dump_oplog("SIGALRM");
	_exit(3);
}

/* ------------------------------------------------ privileged monitor */

/*
 * As root, a helper forked before dropping privileges reads the
 * system-wide pinned page count (nr_foll_pin_acquired - released, after
 * folding per-CPU deltas, which needs root) at start and when asked after
 * the run.
 */
static int mon_req = -1, mon_rsp = -1;

static long sys_pins(void)
{
	char line[256];
	long a = -1, r = -1;
	FILE *f;
	int fd = open("/proc/sys/vm/stat_refresh", O_WRONLY);

	if (fd >= 0) {
		if (write(fd, "1\n", 2) < 0)
			a = -1;
		close(fd);
	}
	f = fopen("/proc/vmstat", "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		sscanf(line, "nr_foll_pin_acquired %ld", &a);
		sscanf(line, "nr_foll_pin_released %ld", &r);
	}
	fclose(f);
	return a < 0 || r < 0 ? -1 : a - r;
}

static void monitor_start(void)
{
	int req[2], rsp[2];
	long base, v = 0;
	char c;
	pid_t pid;
	int i;

	if (pipe(req) || pipe(rsp))
		return;
	pid = fork();
	if (pid < 0)
		return;
	if (pid == 0) {
		close(req[1]);
		close(rsp[0]);
		base = sys_pins();
		if (write(rsp[1], &base, sizeof(base)) < 0)
			_exit(1);
		if (read(req[0], &c, 1) != 1)
			_exit(0);
		/* releases after the last close are synchronous, but allow
		 * deferred work (workqueues, socket teardown) to finish */
		for (i = 0; i < 50; i++) {
			v = sys_pins();
			if (v == base)
				break;
			usleep(200000);
		}
		if (write(rsp[1], &v, sizeof(v)) < 0)
			_exit(1);
		_exit(0);
	}
	close(req[0]);
	close(rsp[1]);
	mon_req = req[1];
	mon_rsp = rsp[0];
}

/* ----------------------------------------------------------- main */

static void usage(const char *p)
{
	fprintf(stderr,
		"usage: %s [--seed S] [--ops N] [--seconds T] [--threads K]\n"
		"          [--hang SEC] [--memlock BYTES] [--no-drop] [--no-fork]\n"
		"          [--dev PATH] [--only OP,..] [--skip OP,..] [-v]\n"
		"Defaults: --seconds 60 (or $KIWARP_FUZZ_SECONDS), --threads 3,\n"
		"seed from the clock (or $KIWARP_FUZZ_SEED). Replay: --threads 1.\n", p);
	exit(2);
}

int main(int argc, char **argv)
{
	struct sigaction sa = { 0 };
	struct rlimit rl;
	pthread_t wd;
	long base_pins = -1, after_pins = -1, pin_kb = -1;
	int i, k, failed = 0, passed = 0, nfd;
	char errs[2048];
	size_t off;

	cfg_seed = getenv("KIWARP_FUZZ_SEED") ? strtoull(getenv("KIWARP_FUZZ_SEED"),
			NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
	if (getenv("KIWARP_FUZZ_SECONDS"))
		cfg_seconds = atol(getenv("KIWARP_FUZZ_SECONDS"));
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (a[0] != '-')
			continue;	/* run.sh passes its test filters on */
		if (!strcmp(a, "-v")) {
			cfg_verbose = 1;
			continue;
		}
		if (!strcmp(a, "--no-drop")) {
			cfg_drop = 0;
			continue;
		}
		if (!strcmp(a, "--no-fork")) {
			cfg_fork = 0;
			continue;
		}
		if (!v)
			usage(argv[0]);
		i++;
		if (!strcmp(a, "--seed"))
			cfg_seed = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--ops"))
			cfg_ops = atol(v);
		else if (!strcmp(a, "--seconds"))
			cfg_seconds = atol(v);
		else if (!strcmp(a, "--threads"))
			cfg_threads = atoi(v);
		else if (!strcmp(a, "--hang"))
			cfg_hang = atoi(v);
		else if (!strcmp(a, "--memlock"))
			cfg_memlock = atol(v);
		else if (!strcmp(a, "--dev"))
			cfg_dev = v;
		else if (!strcmp(a, "--only"))
			cfg_only = v;
		else if (!strcmp(a, "--skip"))
			cfg_skip = v;
		else
			usage(argv[0]);
	}
	if (cfg_ops < 0 && cfg_seconds < 0)
		cfg_seconds = 60;
	if (cfg_threads < 1 || cfg_threads > 64)
		usage(argv[0]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	page_sz = sysconf(_SC_PAGESIZE);
	for (k = 0; k < (int)ARRAY_SIZE(opdefs); k++) {
		if ((cfg_only && !in_list(cfg_only, opdefs[k].name)) ||
		    (cfg_skip && in_list(cfg_skip, opdefs[k].name)))
			opdefs[k].weight = 0;
		op_total_weight += opdefs[k].weight;
	}
	if (!op_total_weight)
		usage(argv[0]);
	for (i = 0; i < (int)sizeof(pdata); i++)
		pdata[i] = i * 7;

	say("TAP version 13\n1..3\n");
	say("# kw_fuzz: seed=%llu threads=%d ops=%ld seconds=%ld memlock=%ld\n",
	    (unsigned long long)cfg_seed, cfg_threads, cfg_ops, cfg_seconds,
	    cfg_memlock);

	sa.sa_sigaction = fault_handler;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigaction(SIGSEGV, &sa, NULL);
	sigaction(SIGBUS, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, alarm_handler);

	/* setup as root: the monitor, then drop to nobody */
	if (geteuid() == 0) {
		monitor_start();
		if (mon_rsp >= 0 && read(mon_rsp, &base_pins,
					 sizeof(base_pins)) != sizeof(base_pins))
			base_pins = -1;
	}
	if (geteuid() == 0) {
		int a, b;

		/* a TCP_ULP "tls" as root loads the module for later tries */
		if (!fuzz_tcp_pair(0, &a, &b)) {
			setsockopt(a, IPPROTO_TCP, TCP_ULP, "tls", 4);
			close(a);
			close(b);
		}
	}
	rl.rlim_cur = rl.rlim_max = cfg_memlock;
	if (setrlimit(RLIMIT_MEMLOCK, &rl))
		say("# setrlimit(MEMLOCK): %s\n", strerror(errno));
	if (geteuid() == 0 && cfg_drop) {
		if (setgroups(0, NULL) || setgid(65534) || setuid(65534)) {
			say("not ok 1 - kw_fuzz: drop to uid 65534: %s\n",
			    strerror(errno));
			return 1;
		}
	}
	say("# running as uid %d, RLIMIT_MEMLOCK %ld\n", (int)getuid(),
	    cfg_memlock);
	bufs_init();
	arena = mmap(NULL, ARENA_LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS |
		     MAP_NORESERVE, -1, 0);

	/* initial objects: two contexts */
	ths = calloc(cfg_threads, sizeof(*ths));
	if (!ths)
		return 1;
	for (k = 0; k < cfg_threads; k++) {
		ths[k].edge = mmap(NULL, 3 * page_sz, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (ths[k].edge == MAP_FAILED)
			ths[k].edge = NULL;
		else
			mprotect(ths[k].edge + page_sz, page_sz, PROT_NONE);
		ths[k].id = k;
		ths[k].r.s = cfg_seed * 0x100000001b3ULL + k * 0x9e3779b97f4a7c15ULL;
	}
	cur_th = &ths[0];
	op_open(&ths[0]);
	op_open(&ths[0]);
	if (!nlive[O_DEV]) {
		say("not ok 1 - kw_fuzz: cannot open %s: %s\n", cfg_dev,
		    strerror(errno));
		say("# 0 passed, 1 failed\n");
		return 1;
	}

	t_start = now();
	phase = "run";
	if (cfg_seconds >= 0)
		alarm(cfg_seconds + 2 * cfg_hang + 120);
	pthread_create(&wd, NULL, watchdog, NULL);
	for (k = 1; k < cfg_threads; k++)
		pthread_create(&ths[k].pt, NULL, worker, &ths[k]);
	worker(&ths[0]);
	atomic_store(&stop_flag, 1);
	for (k = 1; k < cfg_threads; k++)
		pthread_join(ths[k].pt, NULL);
	atomic_store(&wd_done, 1);
	pthread_join(wd, NULL);
	double secs = now() - t_start;

	/* cleanup: close everything, then check that nothing stayed pinned */
	phase = "cleanup";
	alarm(cfg_hang + 120);
	for (i = 0; i < MAX_OBJ; i++) {
		struct obj *o = &objs[i];

		if (o->type == O_MAP && o->live)
			munmap((void *)o->addr, o->len);
		if ((o->type == O_DEV && o->live) ||
		    (o->type == O_SOCK && o->fd >= 0))
			close(o->fd);
	}
	/* anything else (race helpers' leftovers, children's fds) */
	nfd = (int)sysconf(_SC_OPEN_MAX);
	for (i = 3; i < nfd && i < 4096; i++)
		if (i != mon_req && i != mon_rsp)
			close(i);
	/* mremap'd ring copies live 64 GiB above their origin: gone too */
	for (i = 0; i < 200; i++) {
		pin_kb = kw_vm_pin_kb();
		if (pin_kb <= 0)
			break;
		usleep(50000);
	}
	if (mon_req >= 0 && write(mon_req, "c", 1) == 1 &&
	    read(mon_rsp, &after_pins, sizeof(after_pins)) != sizeof(after_pins))
		after_pins = -1;
	alarm(0);

	if (atomic_load(&unexpected)) {
		say("not ok 1 - kw_fuzz: run: %ld unexpected results (see FINDING/UNEXPECTED above)\n",
		    atomic_load(&unexpected));
		failed++;
	} else {
		say("ok 1 - kw_fuzz: run: %ld ops in %.0fs (%.0f/s), no crash, hang or unexpected errno\n",
		    atomic_load(&ops_done), secs, atomic_load(&ops_done) / secs);
		passed++;
	}
	if (pin_kb != 0) {
		say("not ok 2 - kw_fuzz: VmPin %ld kB after closing everything\n",
		    pin_kb);
		failed++;
	} else {
		say("ok 2 - kw_fuzz: VmPin 0 kB after closing everything\n");
		passed++;
	}
	if (base_pins < 0 || mon_req < 0) {
		say("ok 3 - kw_fuzz: system pinned pages # SKIP not root\n");
		passed++;
	} else if (after_pins != base_pins) {
		say("not ok 3 - kw_fuzz: nr_foll_pin acquired-released %ld, before %ld\n",
		    after_pins, base_pins);
		failed++;
	} else {
		say("ok 3 - kw_fuzz: nr_foll_pin acquired-released back to %ld\n",
		    base_pins);
		passed++;
	}
	off = 0;
	errs[0] = 0;
	for (i = 1; i <= MAX_ERRNO; i++) {
		long n = atomic_load(&err_count[i]);

		if (n && off < sizeof(errs) - 40)
			off += snprintf(errs + off, sizeof(errs) - off, "%s%s:%ld",
					off ? "," : "", ename(i), n);
	}
	say("# kiwarp<->kiwarp connections established: %ld\n",
	    atomic_load(&pairs_up));
	say("# per op: name calls seconds\n");
	for (k = 0; k < (int)ARRAY_SIZE(opdefs); k++)
		say("#   %-16s %7ld %7.1f\n", opdefs[k].name,
		    atomic_load(&op_count[k]), (double)op_secs[k]);
	say("# kw_fuzz: ops=%ld seed=%llu threads=%d errors_by_errno=%s\n",
	    atomic_load(&ops_done), (unsigned long long)cfg_seed, cfg_threads,
	    off ? errs : "none");
	say("# %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
