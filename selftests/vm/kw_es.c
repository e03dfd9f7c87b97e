// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Extended sockets (issue 9): a connected TCP socket switched to
 * IWARP_MODE keeps its fd and its byte-stream semantics, and its bytes go
 * over iWARP (rsockets' stream protocol) -- kiwarp on both ends here.
 * Every test compares bytes, errno values and IWARP_INFO counters.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <linux/kiwarp.h>

#include "kw_vmtest.h"
#include "../unit/harness.h"

#ifndef TCP_ULP
#define TCP_ULP 31
#endif

static int ulp(int fd)
{
	return setsockopt(fd, IPPROTO_TCP, TCP_ULP, KIWARP_ULP_NAME,
			  sizeof(KIWARP_ULP_NAME) - 1) ? -errno : 0;
}

static int set_mode(int fd, int mode)
{
	return setsockopt(fd, SOL_IWARP, IWARP_MODE, &mode, sizeof(mode)) ?
	       -errno : 0;
}

static int info(int fd, struct iwarp_info *i)
{
	socklen_t len = sizeof(*i);

	memset(i, 0, sizeof(*i));
	return getsockopt(fd, SOL_IWARP, IWARP_INFO, i, &len) ? -errno : 0;
}

struct sw {
	int fd, mode, ret;
	pthread_t t;
};

static void *switch_thread(void *arg)
{
	struct sw *s = arg;

	s->ret = set_mode(s->fd, s->mode);
	return NULL;
}

/* Switch both ends of a connection at once: 0 or the first error. */
static int switch_both(int c, int s, int cmode, int smode, int *rc, int *rs)
{
	struct sw a = { .fd = s, .mode = smode };
	int r;

	pthread_create(&a.t, NULL, switch_thread, &a);
	r = set_mode(c, cmode);
	pthread_join(a.t, NULL);
	if (rc)
		*rc = r;
	if (rs)
		*rs = a.ret;
	return r ? r : a.ret;
}

static int io_pair(int *c, int *s, int csize, int ssize);

/* A connected pair with the ULP on both, switched (client ACTIVE). */
static int es_pair(int *c, int *s)
{
	return io_pair(c, s, 0, 0);
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	size_t i;

	for (i = 0; i < n; i++) {
		seed = seed * 1103515245 + 12345;
		p[i] = seed >> 16;
	}
}

struct xfer {
	int fd;
	const uint8_t *buf;
	size_t len, chunk;
	int ret;
	pthread_t t;
};

static void *writer(void *arg)
{
	struct xfer *x = arg;
	size_t off = 0;

	while (off < x->len) {
		size_t n = x->len - off < x->chunk ? x->len - off : x->chunk;
		ssize_t w = send(x->fd, x->buf + off, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			x->ret = w < 0 ? -errno : -EPIPE;
			return NULL;
		}
		off += w;
	}
	return NULL;
}

/* Send len bytes from c in chunks while s reads them in other chunks;
 * the bytes must arrive intact and in order. */
static int stream(int c, int s, size_t len, size_t wchunk, size_t rchunk)
{
	uint8_t *src = malloc(len), *dst = malloc(len);
	struct xfer x = { .fd = c, .buf = src, .len = len, .chunk = wchunk };
	size_t got = 0;
	int ret = 0;

	fill(src, len, len ^ wchunk);
	memset(dst, 0, len);
	pthread_create(&x.t, NULL, writer, &x);
	while (got < len) {
		size_t n = len - got < rchunk ? len - got : rchunk;
		int r = readn(s, dst + got, n, 10000);

		if (r) {
			ret = r;
			break;
		}
		got += n;
	}
	pthread_join(x.t, NULL);
	if (!ret)
		ret = x.ret;
	if (!ret && memcmp(src, dst, len))
		ret = -EILSEQ;
	free(src);
	free(dst);
	return ret;
}

TEST(switch_and_info)
{
	struct iwarp_info ic, is;
	int c, s, on;
	socklen_t len = sizeof(on);

	ASSERT_EQ(tcp_pair(&c, &s), 0);
	/* no ULP: SOL_IWARP is not this socket's level */
	on = IWARP_MODE_AUTO;
	EXPECT_EQ(setsockopt(c, SOL_IWARP, IWARP_MODE, &on, sizeof(on)), -1);
	ASSERT_EQ(ulp(c), 0);
	ASSERT_EQ(ulp(s), 0);
	EXPECT_EQ(ulp(c), -EEXIST);
	ASSERT_EQ(info(c, &ic), 0);
	EXPECT_EQ(ic.state, IWARP_STATE_TCP);
	/* still plain TCP */
	ASSERT_EQ(writen(c, "tcp", 3), 0);
	{
		char b[3];

		ASSERT_EQ(readn(s, b, 3, 2000), 0);
		EXPECT_MEMEQ(b, "tcp", 3);
	}
	EXPECT_EQ(set_mode(c, 0), -EINVAL);
	EXPECT_EQ(set_mode(c, 4), -EINVAL);
	ASSERT_EQ(switch_both(c, s, IWARP_MODE_ACTIVE, IWARP_MODE_PASSIVE,
			      NULL, NULL), 0);
	ASSERT_EQ(getsockopt(c, SOL_IWARP, IWARP_MODE, &on, &len), 0);
	EXPECT_EQ(on, 1);
	EXPECT_EQ(set_mode(c, IWARP_MODE_ACTIVE), -EISCONN);
	ASSERT_EQ(info(c, &ic), 0);
	ASSERT_EQ(info(s, &is), 0);
	EXPECT_EQ(ic.state, IWARP_STATE_RUN);
	EXPECT_EQ(is.state, IWARP_STATE_RUN);
	EXPECT_EQ(ic.mpa_rev, 2);
	EXPECT_EQ(ic.crc, 1);		/* RFC 5044: CRC by default */
	EXPECT_GE(ic.rbuf_size, 16384);
	ASSERT_EQ(writen(c, "hello, iwarp", 12), 0);
	{
		char b[12];

		ASSERT_EQ(readn(s, b, 12, 5000), 0);
		EXPECT_MEMEQ(b, "hello, iwarp", 12);
	}
	ASSERT_EQ(info(c, &ic), 0);
	ASSERT_EQ(info(s, &is), 0);
	EXPECT_EQ(ic.tx_bytes, 12);
	EXPECT_EQ(is.rx_bytes, 12);
	/* no TCP-level zerocopy receive under the stream */
	close(c);
	close(s);
}

TEST(bytes_both_ways_many_sizes)
{
	static const size_t sizes[] = { 1, 2, 63, 4096, 65535, 65536, 65537,
					300000, 1 << 20, 3 << 20 };
	int c, s;
	size_t i;

	ASSERT_EQ(es_pair(&c, &s), 0);
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t wc = 1 + (sizes[i] * 7919) % 200000;
		size_t rc = 1 + (sizes[i] * 104729) % 150000;

		/* odd sizes, but at most ~512 calls a stream (debug kernel) */
		wc = wc < sizes[i] / 512 ? sizes[i] / 512 + 1 : wc;
		rc = rc < sizes[i] / 512 ? sizes[i] / 512 + 1 : rc;

		note("%zu bytes, writes of %zu, reads of %zu", sizes[i], wc, rc);
		EXPECT_EQ(stream(c, s, sizes[i], wc, rc), 0);
		EXPECT_EQ(stream(s, c, sizes[i], rc, wc), 0);
	}
	close(c);
	close(s);
}

/* A reader that does not read stops the writer (flow control), and
 * nothing is lost when it reads again. */
TEST(slow_reader_flow_control)
{
	size_t len = 2 << 20, got = 0;
	uint8_t *src = malloc(len), *dst = malloc(len);
	struct iwarp_info i;
	int c, s, fl;
	ssize_t w, total = 0;

	ASSERT_EQ(es_pair(&c, &s), 0);
	fill(src, len, 7);
	fl = fcntl(c, F_GETFL);
	ASSERT_EQ(fcntl(c, F_SETFL, fl | O_NONBLOCK), 0);
	/* non-blocking: takes what fits, then EAGAIN */
	for (;;) {
		w = send(c, src + total, len - total, 0);
		if (w < 0)
			break;
		total += w;
	}
	EXPECT_EQ(errno, EAGAIN);
	ASSERT_EQ(info(s, &i), 0);
	note("writer stopped after %zd bytes (rbuf %u, sbuf %u)", total,
	     i.rbuf_size, i.sbuf_size);
	EXPECT_GT(total, 0);
	EXPECT_LE((size_t)total, (size_t)i.rbuf_size + i.sbuf_size);
	ASSERT_EQ(fcntl(c, F_SETFL, fl), 0);
	{
		struct xfer x = { .fd = c, .buf = src + total,
				  .len = len - total, .chunk = 100000 };

		pthread_create(&x.t, NULL, writer, &x);
		while (got < len) {
			size_t n = len - got < 77777 ? len - got : 77777;

			if (readn(s, dst + got, n, 10000))
				break;
			got += n;
		}
		pthread_join(x.t, NULL);
		EXPECT_EQ(x.ret, 0);
	}
	EXPECT_EQ(got, len);
	EXPECT_MEMEQ(src, dst, len);
	/* read() took the bytes from the skbs that brought them */
	ASSERT_EQ(info(s, &i), 0);
	note("%llu bytes read from held skbs, %llu of them copied into rbuf",
	     (unsigned long long)i.rbuf_held,
	     (unsigned long long)i.rbuf_settled);
	EXPECT_GT(i.rbuf_held, len / 2);
	EXPECT_LE(i.rbuf_settled, i.rbuf_held);
	close(c);
	close(s);
	free(src);
	free(dst);
}

/*
 * Wait up to secs for at least n readable bytes on fd (polling takes the
 * DATA messages that announce them); *i is IWARP_INFO at the end.
 * 0, or -errno of IWARP_INFO.
 */
static int wait_readable(int fd, size_t n, double secs, struct iwarp_info *i)
{
	double end = now() + secs;
	int r;

	do {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		poll(&p, 1, 100);
		r = info(fd, i);
	} while (!r && i->readable < n && now() < end);
	return r;
}

/* memory.stat's "sock" (bytes) of the cgroup at path, or -1 */
static long long cg_sock(const char *path)
{
	char f[192], name[64];
	long long v, r = -1;
	FILE *fp;

	snprintf(f, sizeof(f), "%s/memory.stat", path);
	fp = fopen(f, "r");
	if (!fp)
		return -1;
	while (fscanf(fp, "%63s %lld", name, &v) == 2)
		if (!strcmp(name, "sock"))
			r = v;
	fclose(fp);
	return r;
}

/*
 * Bytes a peer sent that wait in the skbs that brought them (rxhold.c)
 * are charged to the receiving socket's memory cgroup, as TCP charges
 * its receive queue, and the charge goes back as the reader takes them:
 * otherwise every socket could pin up to twice its rbuf that no limit
 * counts.
 */
TEST(held_bytes_are_charged_to_the_memory_cgroup)
{
	char cg[96];
	size_t len = 1 << 20;	/* fits rbuf; its clones fit the limit */
	uint8_t *src = malloc(len), *dst = malloc(len);
	long long sock0, sock1, sock2, held;
	struct iwarp_info i;
	double end;
	FILE *f;
	int c, s, v = 1 << 20;

	/* a memory cgroup of our own, before the sockets exist */
	f = fopen("/sys/fs/cgroup/cgroup.subtree_control", "w");
	if (f) {
		fputs("+memory", f);
		fclose(f);
	}
	snprintf(cg, sizeof(cg), "/sys/fs/cgroup/kw_es_held.%d", getpid());
	ASSERT_EQ(mkdir(cg, 0755), 0);
	{
		char p[128];

		snprintf(p, sizeof(p), "%s/cgroup.procs", cg);
		f = fopen(p, "w");
		ASSERT_NE(f, NULL);
		fprintf(f, "%d\n", getpid());
		ASSERT_EQ(fclose(f), 0);
	}
	/* rbuf 2 MiB: SO_RCVBUF 1 MiB, which the kernel doubles (FORCE:
	 * above rmem_max) */
	ASSERT_EQ(tcp_pair(&c, &s), 0);
	ASSERT_EQ(setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v)), 0);
	ASSERT_EQ(ulp(c), 0);
	ASSERT_EQ(ulp(s), 0);
	ASSERT_EQ(switch_both(c, s, IWARP_MODE_ACTIVE, IWARP_MODE_PASSIVE,
			      NULL, NULL), 0);
	sock0 = cg_sock(cg);
	ASSERT_GE(sock0, 0);

	/* 1 MiB arrives; nobody reads */
	fill(src, len, 19);
	ASSERT_EQ(writen(c, src, len), 0);
	ASSERT_EQ(wait_readable(s, len, 20, &i), 0);
	ASSERT_EQ(i.rbuf_size, 2u << 20);
	ASSERT_EQ(i.readable, len);
	held = (long long)(i.rbuf_held - i.rbuf_settled);
	EXPECT_GE(held, (long long)len * 3 / 4);
	/* (the clones' truesize exceeds the bytes they hold; the stat is
	 * flushed every 2 s at the latest) */
	end = now() + 5;
	while ((sock1 = cg_sock(cg)) - sock0 < held && now() < end)
		usleep(100000);
	note("%lld of %zu bytes held in skbs (%llu settled); cgroup's sock %lld -> %lld",
	     held, len, (unsigned long long)i.rbuf_settled, sock0, sock1);
	EXPECT_GE(sock1 - sock0, held);

	/* the reader takes it all: the charge goes back */
	ASSERT_EQ(readn(s, dst, len, 20000), 0);
	EXPECT_MEMEQ(src, dst, len);
	end = now() + 5;
	while ((sock2 = cg_sock(cg)) - sock0 > held / 8 && now() < end)
		usleep(100000);
	note("after reading it all: sock %lld", sock2);
	EXPECT_LE(sock2 - sock0, held / 8);

	/* held again, and closed unread: the charge goes back too */
	ASSERT_EQ(writen(c, src, len / 2), 0);
	ASSERT_EQ(wait_readable(s, len / 2, 20, &i), 0);
	EXPECT_GE((long long)(i.rbuf_held - i.rbuf_settled), held + held / 4);
	close(c);
	close(s);
	end = now() + 5;
	while ((sock2 = cg_sock(cg)) - sock0 > held / 8 && now() < end)
		usleep(100000);
	note("closed with %u bytes unread: sock %lld", i.readable, sock2);
	EXPECT_LE(sock2 - sock0, held / 8);
	f = fopen("/sys/fs/cgroup/cgroup.procs", "w");
	if (f) {
		fprintf(f, "%d\n", getpid());
		fclose(f);
	}
	rmdir(cg);
	free(src);
	free(dst);
}

/*
 * A read into a buffer that faults part way: what recv() returns is what
 * it took from the stream, and the next read goes on from there. Whether
 * the bytes were still held in skbs (rxhold.c) or in rbuf, nothing is
 * lost, doubled or stale.
 */
TEST(read_that_faults_midway_loses_nothing)
{
	size_t len = 100000, got = 0, head = 777;	/* < rbuf: no reader needed */
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t settled;
	uint8_t *src = malloc(len), *dst = malloc(len), *m;
	struct iwarp_info i;
	ssize_t r;
	int c, s;

	ASSERT_EQ(es_pair(&c, &s), 0);
	fill(src, len, 11);
	ASSERT_EQ(writen(c, src, len), 0);
	ASSERT_EQ(wait_readable(s, 3 * (size_t)pg, 10, &i), 0);
	ASSERT_GE(i.readable, 3 * (size_t)pg);
	/* part of the first piece */
	ASSERT_EQ(readn(s, dst, head, 5000), 0);
	got = head;
	m = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(m, MAP_FAILED);
	ASSERT_EQ(mprotect(m + pg, pg, PROT_NONE), 0);
	ASSERT_EQ(info(s, &i), 0);
	settled = i.rbuf_settled;
	/* 1000 bytes fit before the hole, 4000 more are asked for */
	r = recv(s, m + pg - 1000, 5000, MSG_DONTWAIT);
	note("faulting read: %zd (errno %d)", r, r < 0 ? errno : 0);
	if (r < 0) {
		EXPECT_EQ(errno, EFAULT);
	} else {
		EXPECT_GT(r, 0);
		EXPECT_LE(r, 1000);
		memcpy(dst + got, m + pg - 1000, r);
		got += r;
	}
	/* nothing taken without being returned */
	r = recv(s, m + pg - 1000, 1000, MSG_DONTWAIT);
	EXPECT_EQ(r, 1000);
	EXPECT_MEMEQ(m + pg - 1000, src + got, 1000);
	memcpy(dst + got, m + pg - 1000, 1000);
	got += 1000;
	/* ... and all of it from held skbs, the faulted piece included */
	ASSERT_EQ(info(s, &i), 0);
	EXPECT_EQ(i.rbuf_settled, settled);
	ASSERT_EQ(readn(s, dst + got, len - got, 10000), 0);
	EXPECT_MEMEQ(src, dst, len);
	ASSERT_EQ(info(s, &i), 0);
	EXPECT_GT(i.rbuf_held, len / 2);
	munmap(m, 2 * pg);
	close(c);
	close(s);
	free(src);
	free(dst);
}

TEST(nonblocking_read_peek_fionread)
{
	char b[8];
	int c, s, n = -1;

	ASSERT_EQ(es_pair(&c, &s), 0);
	EXPECT_EQ(recv(s, b, sizeof(b), MSG_DONTWAIT), -1);
	EXPECT_EQ(errno, EAGAIN);
	ASSERT_EQ(writen(c, "abcdef", 6), 0);
	{
		struct pollfd p = { .fd = s, .events = POLLIN };

		ASSERT_EQ(poll(&p, 1, 5000), 1);
		EXPECT_TRUE(p.revents & POLLIN);
	}
	EXPECT_EQ(ioctl(s, FIONREAD, &n), 0);
	EXPECT_EQ(n, 6);
	EXPECT_EQ(recv(s, b, 3, MSG_PEEK), 3);
	EXPECT_MEMEQ(b, "abc", 3);
	EXPECT_EQ(recv(s, b, 4, 0), 4);
	EXPECT_MEMEQ(b, "abcd", 4);
	EXPECT_EQ(recv(s, b, sizeof(b), MSG_WAITALL | MSG_DONTWAIT), 2);
	EXPECT_MEMEQ(b, "ef", 2);
	close(c);
	close(s);
}

TEST(rcvtimeo_and_waitall)
{
	struct timeval tv = { .tv_sec = 0, .tv_usec = 300000 };
	char b[10];
	double t0;
	int c, s;

	ASSERT_EQ(es_pair(&c, &s), 0);
	ASSERT_EQ(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	t0 = now();
	EXPECT_EQ(recv(s, b, sizeof(b), 0), -1);
	EXPECT_EQ(errno, EAGAIN);
	EXPECT_GE_F(now() - t0, 0.25);
	tv.tv_sec = 5;
	ASSERT_EQ(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	ASSERT_EQ(writen(c, "12345", 5), 0);
	ASSERT_EQ(writen(c, "67890", 5), 0);
	EXPECT_EQ(recv(s, b, 10, MSG_WAITALL), 10);
	EXPECT_MEMEQ(b, "1234567890", 10);
	close(c);
	close(s);
}

/* Wait until exactly n bytes are readable on fd, whatever poll says. */
static int readable_is(int fd, uint32_t n)
{
	struct iwarp_info i;
	int r = wait_readable(fd, n, 10, &i);

	if (r)
		return r;
	return i.readable == n ? 0 : i.readable < n ? -ETIMEDOUT : -EOVERFLOW;
}

static int rcvlowat(int fd, int val)
{
	return setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &val, sizeof(val)) ?
	       -errno : 0;
}

struct poller {
	int fd, ret;
	double took;
	pthread_t t;
};

static void *poll_thread(void *arg)
{
	struct poller *p = arg;
	struct pollfd pf = { .fd = p->fd, .events = POLLIN };
	double t0 = now();

	p->ret = poll(&pf, 1, 8000);
	p->took = now() - t0;
	return NULL;
}

/*
 * SO_RCVLOWAT on an IWARP_MODE socket is the reader's (recv and poll wait
 * for that many bytes, as on TCP) but never TCP's: TCP wakes the kiwarp
 * receive only once that many bytes are queued, so a mark set before the
 * switch, or after it, must stall neither the MPA exchange nor a small
 * FPDU. (Before the fix the switch timed out.)
 */
TEST(rcvlowat_is_the_readers_not_the_receives)
{
	struct timeval tv = { .tv_sec = 2, .tv_usec = 0 };
	struct pollfd p;
	struct poller pl;
	struct iwarp_info in;
	uint8_t src[4096], dst[4096], *big, *got;
	socklen_t len = sizeof(int);
	int c, s, v = 0;
	size_t half;
	double t0;

	ASSERT_EQ(tcp_pair(&c, &s), 0);
	ASSERT_EQ(ulp(c), 0);
	ASSERT_EQ(ulp(s), 0);
	ASSERT_EQ(rcvlowat(c, 4096), 0);
	ASSERT_EQ(rcvlowat(s, 4096), 0);
	ASSERT_EQ(switch_both(c, s, IWARP_MODE_ACTIVE, IWARP_MODE_PASSIVE,
			      NULL, NULL), 0);
	/* TCP's mark, which getsockopt reads, stays 1 (documented) */
	ASSERT_EQ(getsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &v, &len), 0);
	EXPECT_EQ(v, 1);

	/* one byte is received at once, but not readable for poll or recv */
	fill(src, sizeof(src), 4096);
	ASSERT_EQ(writen(c, src, 1), 0);
	ASSERT_EQ(readable_is(s, 1), 0);
	p = (struct pollfd){ .fd = s, .events = POLLIN };
	EXPECT_EQ(poll(&p, 1, 200), 0);
	ASSERT_EQ(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	ASSERT_EQ(writen(c, src + 1, 99), 0);
	ASSERT_EQ(readable_is(s, 100), 0);
	/* a blocking read waits for the mark, its timeout ends it short */
	t0 = now();
	EXPECT_EQ(recv(s, dst, 50, MSG_PEEK), 50);	/* min(mark, len) */
	EXPECT_LT_F(now() - t0, 1.0);
	EXPECT_EQ(recv(s, dst, sizeof(dst), 0), 100);
	EXPECT_GE_F(now() - t0, 1.9);
	EXPECT_MEMEQ(dst, src, 100);
	/* ... or gets it all once the mark is reached */
	ASSERT_EQ(writen(c, src, 4000), 0);
	ASSERT_EQ(readable_is(s, 4000), 0);
	EXPECT_EQ(poll(&p, 1, 200), 0);
	ASSERT_EQ(writen(c, src + 4000, 96), 0);
	EXPECT_EQ(poll(&p, 1, 5000), 1);
	memset(dst, 0, sizeof(dst));
	EXPECT_EQ(recv(s, dst, sizeof(dst), 0), 4096);
	EXPECT_MEMEQ(dst, src, 4096);

	/* set after the switch: the same (a 5-byte message is far less
	 * than 4096 on the wire too); lowering it wakes a poller */
	ASSERT_EQ(rcvlowat(s, 4096), 0);
	v = 0;
	ASSERT_EQ(getsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &v, &len), 0);
	EXPECT_EQ(v, 1);
	ASSERT_EQ(writen(c, src, 5), 0);
	ASSERT_EQ(readable_is(s, 5), 0);
	pl = (struct poller){ .fd = s };
	pthread_create(&pl.t, NULL, poll_thread, &pl);
	usleep(200000);
	ASSERT_EQ(rcvlowat(s, 5), 0);
	pthread_join(pl.t, NULL);
	EXPECT_EQ(pl.ret, 1);
	EXPECT_LT_F(pl.took, 4.0);
	EXPECT_EQ(recv(s, dst, sizeof(dst), MSG_DONTWAIT), 5);
	EXPECT_MEMEQ(dst, src, 5);

	/* a mark beyond what the buffer holds counts as half of it */
	ASSERT_EQ(info(s, &in), 0);
	half = in.rbuf_size / 2;
	ASSERT_GT(half, 0);
	big = malloc(half);
	got = malloc(half);
	ASSERT_TRUE(big && got);
	fill(big, half, half);
	ASSERT_EQ(rcvlowat(s, -1), 0);	/* INT_MAX */
	{
		struct xfer x = { .fd = c, .buf = big, .len = half,
				  .chunk = 65536 };

		pthread_create(&x.t, NULL, writer, &x);
		EXPECT_EQ(poll(&p, 1, 10000), 1);
		EXPECT_EQ(readn(s, got, half, 10000), 0);
		pthread_join(x.t, NULL);
		EXPECT_EQ(x.ret, 0);
	}
	EXPECT_MEMEQ(got, big, half);
	free(big);
	free(got);
	close(c);
	close(s);
}

TEST(epoll_edge_triggered)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLET }, out;
	int c, s, ep, n, i;
	char b[64];

	ASSERT_EQ(es_pair(&c, &s), 0);
	ep = epoll_create1(0);
	ev.data.fd = s;
	ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev), 0);
	n = epoll_wait(ep, &out, 1, 2000);
	ASSERT_EQ(n, 1);
	EXPECT_TRUE(out.events & EPOLLOUT);
	EXPECT_FALSE(out.events & EPOLLIN);
	for (i = 0; i < 20; i++) {
		ASSERT_EQ(writen(c, "x", 1), 0);
		n = epoll_wait(ep, &out, 1, 5000);
		ASSERT_EQ(n, 1);
		EXPECT_TRUE(out.events & EPOLLIN);
		EXPECT_EQ(recv(s, b, sizeof(b), MSG_DONTWAIT), 1);
	}
	close(ep);
	close(c);
	close(s);
}

TEST(shutdown_write_is_eof_then_other_direction)
{
	char b[16];
	int c, s;
	struct pollfd p;

	ASSERT_EQ(es_pair(&c, &s), 0);
	ASSERT_EQ(writen(c, "last", 4), 0);
	ASSERT_EQ(shutdown(c, SHUT_WR), 0);
	ASSERT_EQ(readn(s, b, 4, 5000), 0);
	EXPECT_MEMEQ(b, "last", 4);
	p = (struct pollfd){ .fd = s, .events = POLLIN | POLLRDHUP };
	ASSERT_EQ(poll(&p, 1, 5000), 1);
	EXPECT_TRUE(p.revents & POLLRDHUP);
	EXPECT_EQ(recv(s, b, sizeof(b), 0), 0);		/* EOF */
	EXPECT_EQ(send(c, "x", 1, MSG_NOSIGNAL), -1);	/* we shut it */
	EXPECT_EQ(errno, EPIPE);
	/* the other direction still works */
	ASSERT_EQ(writen(s, "reply", 5), 0);
	ASSERT_EQ(readn(c, b, 5, 5000), 0);
	EXPECT_MEMEQ(b, "reply", 5);
	close(s);
	EXPECT_EQ(readn(c, b, 1, 5000), -ECONNRESET);	/* EOF */
	close(c);
}

TEST(peer_close_gives_eof_and_epipe)
{
	char b[4];
	int c, s, r;

	ASSERT_EQ(es_pair(&c, &s), 0);
	ASSERT_EQ(writen(c, "bye!", 4), 0);
	close(c);
	ASSERT_EQ(readn(s, b, 4, 5000), 0);		/* data before EOF */
	EXPECT_MEMEQ(b, "bye!", 4);
	EXPECT_EQ(recv(s, b, 4, 0), 0);
	signal(SIGPIPE, SIG_IGN);
	r = send(s, "x", 1, 0);
	EXPECT_EQ(r, -1);
	EXPECT_TRUE(errno == EPIPE || errno == ECONNRESET);
	close(s);
}

/* An unmodified reader that forks: the fd is still a socket. */
TEST(fork_inherits_the_stream)
{
	char b[6];
	int c, s, st;
	pid_t pid;

	ASSERT_EQ(es_pair(&c, &s), 0);
	pid = fork();
	if (pid == 0) {
		_exit(writen(c, "child!", 6) ? 1 : 0);
	}
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	ASSERT_EQ(readn(s, b, 6, 5000), 0);
	EXPECT_MEMEQ(b, "child!", 6);
	close(c);
	close(s);
}

/*
 * A listener with the ULP (*l, checked by check(*l) before anything
 * connects: 0 to go on), a client *c connected to it and the connection
 * *s it accepted: 0 or -errno.
 */
static int ulp_listener_pair(int *l, int *c, int *s, int (*check)(int))
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int r;

	*c = *s = -1;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	*l = socket(AF_INET, SOCK_STREAM, 0);
	if (*l < 0 || bind(*l, (void *)&a, len) || listen(*l, 4) ||
	    getsockname(*l, (void *)&a, &len))
		return -errno;
	r = ulp(*l);
	if (!r && check)
		r = check(*l);
	if (r)
		return r;
	*c = socket(AF_INET, SOCK_STREAM, 0);
	if (*c < 0 || connect(*c, (void *)&a, len))
		return -errno;
	*s = accept(*l, NULL, NULL);
	return *s < 0 ? -errno : 0;
}

/* Switch c and s (both AUTO), then a few bytes from s to c. */
static int auto_switch_and_hello(int c, int s)
{
	char b[2];
	int r = switch_both(c, s, IWARP_MODE_AUTO, IWARP_MODE_AUTO, NULL,
			    NULL);

	if (!r)
		r = writen(s, "ok", 2);
	if (!r)
		r = readn(c, b, 2, 5000);
	return r ? r : memcmp(b, "ok", 2) ? -EILSEQ : 0;
}

/* Accepted from a listener with the ULP: AUTO makes it the responder. */
TEST(listener_ulp_auto_roles)
{
	struct iwarp_info i;
	int l, c, s;

	ASSERT_EQ(ulp_listener_pair(&l, &c, &s, NULL), 0);
	ASSERT_EQ(info(s, &i), 0);
	EXPECT_EQ(i.passive, 1);
	ASSERT_EQ(ulp(c), 0);
	EXPECT_EQ(auto_switch_and_hello(c, s), 0);
	close(c);
	close(s);
	close(l);
}

static int set_crc(int fd, int v)
{
	return setsockopt(fd, SOL_IWARP, IWARP_CRC, &v, sizeof(v)) ? -errno : 0;
}

static int get_crc(int fd)
{
	socklen_t len = sizeof(int);
	int v = -1;

	return getsockopt(fd, SOL_IWARP, IWARP_CRC, &v, &len) ? -errno : v;
}

static int listener_refuses_crc(int l)
{
	return set_crc(l, 0) == -EINVAL ? 0 : -EPROTO;
}

/*
 * IWARP_CRC: 1 by default (RFC 5044), 0 declines CRC; CRC is on when
 * either end asks (RFC 5044 7.1.2), so it is off only if both decline.
 * Only 0 and 1, only before the switch, not on a listener (accepted
 * sockets set their own). The bytes arrive intact either way.
 */
TEST(crc_option)
{
	static const int decline[][2] = { { 0, 0 }, { 0, 1 }, { 1, 0 } };
	struct iwarp_info ic, is;
	int c, s, l, v, k;

	ASSERT_EQ(tcp_pair(&c, &s), 0);
	EXPECT_LT(get_crc(c), 0);	/* no ULP: not a level of TCP's */
	ASSERT_EQ(ulp(c), 0);
	EXPECT_EQ(get_crc(c), 1);
	EXPECT_EQ(set_crc(c, 2), -EINVAL);
	EXPECT_EQ(set_crc(c, -1), -EINVAL);
	v = 0;
	EXPECT_EQ(setsockopt(c, SOL_IWARP, IWARP_CRC, &v, 2), -1);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(get_crc(c), 1);
	close(c);
	close(s);

	for (k = 0; k < 3; k++) {
		int want = !(decline[k][0] == 0 && decline[k][1] == 0);

		note("client IWARP_CRC %d, server %d", decline[k][0], decline[k][1]);
		ASSERT_EQ(tcp_pair(&c, &s), 0);
		ASSERT_EQ(ulp(c), 0);
		ASSERT_EQ(ulp(s), 0);
		ASSERT_EQ(set_crc(c, decline[k][0]), 0);
		ASSERT_EQ(set_crc(s, decline[k][1]), 0);
		EXPECT_EQ(get_crc(c), decline[k][0]);
		ASSERT_EQ(switch_both(c, s, IWARP_MODE_ACTIVE,
				      IWARP_MODE_PASSIVE, NULL, NULL), 0);
		ASSERT_EQ(info(c, &ic), 0);
		ASSERT_EQ(info(s, &is), 0);
		EXPECT_EQ(ic.crc, want);
		EXPECT_EQ(is.crc, want);
		EXPECT_EQ(set_crc(c, 1), -EISCONN);
		EXPECT_EQ(get_crc(c), decline[k][0]);
		EXPECT_EQ(stream(c, s, 200000, 65536, 30000), 0);
		EXPECT_EQ(stream(s, c, 70000, 4096, 65536), 0);
		close(c);
		close(s);
	}

	/* a listener refuses it; an accepted connection takes it */
	ASSERT_EQ(ulp_listener_pair(&l, &c, &s, listener_refuses_crc), 0);
	EXPECT_EQ(get_crc(s), 1);
	ASSERT_EQ(set_crc(s, 0), 0);
	ASSERT_EQ(ulp(c), 0);
	ASSERT_EQ(set_crc(c, 0), 0);
	EXPECT_EQ(auto_switch_and_hello(c, s), 0);
	ASSERT_EQ(info(s, &is), 0);
	EXPECT_EQ(is.crc, 0);
	close(c);
	close(s);
	close(l);
}

struct echo {
	int fd, n, ret;
	pthread_t t;
};

static void *echo_thread(void *arg)
{
	struct echo *e = arg;
	char b[64];
	int i;

	for (i = 0; i < e->n && !e->ret; i++) {
		e->ret = readn(e->fd, b, sizeof(b), 5000);
		if (!e->ret)
			e->ret = writen(e->fd, b, sizeof(b));
	}
	return NULL;
}

/* tcpi_data_segs_out (segments that carried data, not pure ACKs): at
 * byte 156 of the kernel's struct tcp_info (uapi), past the end of
 * glibc's older copy of the struct */
static uint32_t segs_out(int fd)
{
	uint8_t ti[256];
	socklen_t len = sizeof(ti);
	uint32_t v = 0;

	if (!getsockopt(fd, IPPROTO_TCP, TCP_INFO, ti, &len) && len >= 160)
		memcpy(&v, ti + 156, sizeof(v));
	return v;
}

/*
 * A small write is an RDMA Write and the Send that announces it: both go
 * in one TCP segment (tx.c tx_coalesce()), and in a ping-pong the answer
 * carries the acknowledgment, as with plain TCP. They went in a segment
 * each, and the second small segment in a row made the receiver
 * acknowledge at once (three segments a write).
 * Counted: segments that carry data, so a slow guest's delayed-ACK timer
 * cannot fail the test.
 */
TEST(small_writes_one_segment_each)
{
	enum { N = 200 };
	struct echo e = { .n = N };
	uint32_t c0, s0, c1, s1;
	char b[64], r[64];
	int c, s, i;

	ASSERT_EQ(es_pair(&c, &s), 0);
	e.fd = s;
	memset(b, 0x5a, sizeof(b));
	/* warm up: the connection enters TCP's ping-pong mode */
	ASSERT_EQ(writen(c, b, 1), 0);
	ASSERT_EQ(readn(s, r, 1, 5000), 0);
	ASSERT_EQ(writen(s, r, 1), 0);
	ASSERT_EQ(readn(c, r, 1, 5000), 0);
	c0 = segs_out(c);
	s0 = segs_out(s);
	ASSERT_GT(c0, 0);
	ASSERT_EQ(pthread_create(&e.t, NULL, echo_thread, &e), 0);
	for (i = 0; i < N; i++) {
		b[0] = i;
		ASSERT_EQ(writen(c, b, sizeof(b)), 0);
		ASSERT_EQ(readn(c, r, sizeof(r), 5000), 0);
		ASSERT_EQ(memcmp(b, r, sizeof(b)), 0);
	}
	pthread_join(e.t, NULL);
	EXPECT_EQ(e.ret, 0);
	c1 = segs_out(c);
	s1 = segs_out(s);
	note("%d ping-pongs: %u segments out of the client, %u of the server",
	     N, c1 - c0, s1 - s0);
	/* one a write, plus credit messages */
	EXPECT_LE(c1 - c0, N + N / 4);
	EXPECT_LE(s1 - s0, N + N / 4);
	close(c);
	close(s);
}

/* Only one side switches and the peer sends plain bytes: the switching
 * side fails with an error in bounded time, the peer sees it closed. */
TEST(peer_stays_plain_tcp)
{
	char junk[64], b[256];
	double t0;
	int c, s, r;

	memset(junk, 'A', sizeof(junk));
	ASSERT_EQ(tcp_pair(&c, &s), 0);
	ASSERT_EQ(ulp(c), 0);
	ASSERT_EQ(writen(s, junk, sizeof(junk)), 0);
	t0 = now();
	r = set_mode(c, IWARP_MODE_ACTIVE);
	note("switch against a plain TCP peer: %d (%s) after %.2f s", r,
	     strerror(-r), now() - t0);
	EXPECT_NE(r, 0);
	EXPECT_LT_F(now() - t0, 12.0);
	/* the peer gets EOF or a reset after whatever we sent */
	for (;;) {
		ssize_t n = read(s, b, sizeof(b));

		if (n <= 0) {
			EXPECT_TRUE(n == 0 || errno == ECONNRESET);
			break;
		}
	}
	EXPECT_EQ(send(c, "x", 1, MSG_NOSIGNAL), -1);
	close(c);
	close(s);
}

/* A responder whose peer never speaks: ETIMEDOUT, not a hang. */
TEST(responder_times_out)
{
	double t0;
	int c, s, r;

	ASSERT_EQ(tcp_pair(&c, &s), 0);
	ASSERT_EQ(ulp(s), 0);
	t0 = now();
	r = set_mode(s, IWARP_MODE_PASSIVE);
	EXPECT_EQ(r, -ETIMEDOUT);
	EXPECT_LT_F(now() - t0, 12.0);
	close(c);
	close(s);
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) ? -errno : 0;
}

static int so_error(int fd)
{
	int e = -1;
	socklen_t l = sizeof(e);

	return getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l) ? -errno : e;
}

/*
 * A non-blocking IWARP_MODE returns EINPROGRESS at once; reads say EAGAIN
 * until the stream is up; poll() reports POLLOUT when it is; then bytes
 * flow as usual and SO_ERROR is 0.
 */
TEST(nonblocking_switch_completes_through_poll)
{
	struct pollfd p[2];
	struct iwarp_info ic, is;
	char b[8];
	int c, s, r;

	ASSERT_EQ(tcp_pair(&c, &s), 0);
	ASSERT_EQ(ulp(c), 0);
	ASSERT_EQ(ulp(s), 0);
	ASSERT_EQ(set_nonblock(c), 0);
	ASSERT_EQ(set_nonblock(s), 0);
	EXPECT_EQ(set_mode(c, IWARP_MODE_ACTIVE), -EINPROGRESS);
	/* again while under way: already (or busy, or done by now) */
	r = set_mode(c, IWARP_MODE_ACTIVE);
	EXPECT_TRUE(r == -EALREADY || r == -EAGAIN || r == -EISCONN);
	EXPECT_EQ(read(c, b, sizeof(b)), -1);
	EXPECT_EQ(errno, EAGAIN);
	EXPECT_EQ(set_mode(s, IWARP_MODE_PASSIVE), -EINPROGRESS);
	p[0] = (struct pollfd){ .fd = c, .events = POLLOUT };
	p[1] = (struct pollfd){ .fd = s, .events = POLLOUT };
	ASSERT_EQ(poll(&p[0], 1, 15000), 1);
	ASSERT_EQ(poll(&p[1], 1, 15000), 1);
	EXPECT_TRUE(p[0].revents & POLLOUT);
	EXPECT_FALSE(p[0].revents & POLLERR);
	EXPECT_TRUE(p[1].revents & POLLOUT);
	EXPECT_EQ(so_error(c), 0);
	EXPECT_EQ(so_error(s), 0);
	ASSERT_EQ(info(c, &ic), 0);
	ASSERT_EQ(info(s, &is), 0);
	EXPECT_EQ(ic.state, IWARP_STATE_RUN);
	EXPECT_EQ(is.state, IWARP_STATE_RUN);
	EXPECT_EQ(set_mode(c, IWARP_MODE_ACTIVE), -EISCONN);
	EXPECT_EQ(read(c, b, sizeof(b)), -1);
	EXPECT_EQ(errno, EAGAIN);
	/* stream() wants blocking writes */
	ASSERT_EQ(fcntl(c, F_SETFL, fcntl(c, F_GETFL) & ~O_NONBLOCK), 0);
	ASSERT_EQ(fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK), 0);
	ASSERT_EQ(stream(c, s, 200000, 4000, 3000), 0);
	ASSERT_EQ(stream(s, c, 200000, 5000, 7000), 0);
	ASSERT_EQ(info(c, &ic), 0);
	EXPECT_EQ(ic.tx_bytes, 200000);
	EXPECT_EQ(ic.rx_bytes, 200000);
	close(c);
	close(s);
}

/*
 * A non-blocking switch whose peer never answers: nothing is reported
 * while it waits, and close() ends it at once (not after the MPA timeout).
 */
TEST(nonblocking_switch_silent_peer_then_close)
{
	struct pollfd p;
	struct iwarp_info i;
	double t0;
	int c, s;

	ASSERT_EQ(tcp_pair(&c, &s), 0);
	ASSERT_EQ(ulp(s), 0);
	ASSERT_EQ(set_nonblock(s), 0);
	EXPECT_EQ(set_mode(s, IWARP_MODE_PASSIVE), -EINPROGRESS);
	p = (struct pollfd){ .fd = s, .events = POLLIN | POLLOUT };
	EXPECT_EQ(poll(&p, 1, 500), 0);
	ASSERT_EQ(info(s, &i), 0);
	EXPECT_EQ(i.state, IWARP_STATE_STARTING);
	t0 = now();
	close(s);
	note("close() during a background switch took %.2f s", now() - t0);
	EXPECT_LT_F(now() - t0, 3.0);
	close(c);
}

/*
 * A non-blocking switch that fails (the peer sends bytes that are not an
 * MPA frame): POLLERR, SO_ERROR says why, IWARP_INFO says DEAD.
 */
TEST(nonblocking_switch_failure_is_reported)
{
	char junk[64];
	struct pollfd p;
	struct iwarp_info i;
	int c, s, e;

	memset(junk, 'A', sizeof(junk));
	ASSERT_EQ(tcp_pair(&c, &s), 0);
	ASSERT_EQ(ulp(c), 0);
	ASSERT_EQ(set_nonblock(c), 0);
	EXPECT_EQ(set_mode(c, IWARP_MODE_ACTIVE), -EINPROGRESS);
	ASSERT_EQ(writen(s, junk, sizeof(junk)), 0);
	p = (struct pollfd){ .fd = c, .events = POLLOUT };
	ASSERT_EQ(poll(&p, 1, 15000), 1);
	EXPECT_TRUE(p.revents & POLLERR);
	e = so_error(c);
	note("SO_ERROR after the failed switch: %d (%s)", e, strerror(e));
	EXPECT_GT(e, 0);
	ASSERT_EQ(info(c, &i), 0);
	EXPECT_EQ(i.state, IWARP_STATE_DEAD);
	EXPECT_EQ(send(c, "x", 1, MSG_NOSIGNAL), -1);
	close(c);
	close(s);
}

/*
 * A background switch cannot be held forever: the peer sends half an MPA
 * header and stops, and the switching side sets SO_RCVTIMEO to 0 (wait
 * forever) and SO_SNDTIMEO too, after the switch started. The deadline
 * (module parameter es_switch_deadline_ms, 2 s here) still ends it.
 */
TEST(nonblocking_switch_deadline_beats_socket_timeouts)
{
	static const char *param = "/sys/module/kiwarp/parameters/es_switch_deadline_ms";
	struct timeval never = { 0, 0 };
	char old[32] = "30000";
	struct pollfd p;
	double t0, took;
	FILE *f;
	int c, s;

	f = fopen(param, "r");
	ASSERT_TRUE(f != NULL);
	if (!fgets(old, sizeof(old), f))
		strcpy(old, "30000");
	fclose(f);
	f = fopen(param, "w");
	ASSERT_TRUE(f != NULL);
	fputs("2000", f);
	fclose(f);
	ASSERT_EQ(tcp_pair(&c, &s), 0);
	ASSERT_EQ(ulp(s), 0);
	ASSERT_EQ(set_nonblock(s), 0);
	t0 = now();
	EXPECT_EQ(set_mode(s, IWARP_MODE_PASSIVE), -EINPROGRESS);
	usleep(500 * 1000);	/* after the exchange set its own timeouts */
	ASSERT_EQ(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &never, sizeof(never)), 0);
	ASSERT_EQ(setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &never, sizeof(never)), 0);
	ASSERT_EQ(writen(c, "MPA ID Req", 10), 0);	/* half a header */
	p = (struct pollfd){ .fd = s, .events = POLLOUT };
	ASSERT_EQ(poll(&p, 1, 30000), 1);
	took = now() - t0;
	note("switch ended after %.2f s, SO_ERROR %d", took, so_error(s));
	EXPECT_TRUE(p.revents & POLLERR);
	EXPECT_LT_F(took, 8.0);
	EXPECT_GT_F(took, 1.5);
	f = fopen(param, "w");
	if (f) {
		fputs(old, f);
		fclose(f);
	}
	close(c);
	close(s);
}

/* close() with unread data resets the connection, as TCP does. */
TEST(close_with_unread_data_resets)
{
	char b[4];
	int c, s;
	ssize_t r;

	ASSERT_EQ(es_pair(&c, &s), 0);
	ASSERT_EQ(writen(c, "unread", 6), 0);
	usleep(200000);
	close(s);
	usleep(200000);
	r = recv(c, b, sizeof(b), 0);
	EXPECT_TRUE(r == 0 || (r < 0 && errno == ECONNRESET));
	r = send(c, "x", 1, MSG_NOSIGNAL);
	EXPECT_EQ(r, -1);
	close(c);
}

/* Memory for the buffers is charged to RLIMIT_MEMLOCK and given back. */
TEST(memlock_charged_and_returned)
{
	struct rlimit rl = { 64 << 10, 64 << 10 };
	int c, s, r;

	ASSERT_EQ(tcp_pair(&c, &s), 0);
	ASSERT_EQ(ulp(c), 0);
	ASSERT_EQ(ulp(s), 0);
	ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
	/* as nobody, CAP_IPC_LOCK does not lift the limit */
	ASSERT_EQ(setuid(65534), 0);
	r = set_mode(c, IWARP_MODE_ACTIVE);
	EXPECT_EQ(r, -ENOMEM);
	close(c);
	close(s);
}

TEST(many_pairs_open_and_close)
{
	int c[8], s[8], i;

	for (i = 0; i < 8; i++)
		ASSERT_EQ(es_pair(&c[i], &s[i]), 0);
	for (i = 0; i < 8; i++) {
		char b[1];

		ASSERT_EQ(writen(c[i], "z", 1), 0);
		ASSERT_EQ(readn(s[i], b, 1, 5000), 0);
	}
	for (i = 0; i < 8; i++) {
		close(c[i]);
		close(s[i]);
	}
}

/*
 * close() with by-reference Writes still waiting for their ACK (a 20 ms
 * delay on lo): it returns once they are out, not after its 5 s limit
 * (close() once slept uninterruptibly, and nothing woke it), and the peer
 * reads every byte, then the end of the stream.
 */
struct drain {
	int fd;
	uint8_t *buf;
	size_t len, got;
	ssize_t last;
	pthread_t t;
};

static void *drainer(void *arg)
{
	struct drain *d = arg;

	for (;;) {
		d->last = read(d->fd, d->buf + d->got, d->len - d->got);
		if (d->last <= 0 || d->got + d->last == d->len) {
			if (d->last > 0) {
				d->got += d->last;
				d->last = read(d->fd, d->buf, 1); /* the end */
			}
			return NULL;
		}
		d->got += d->last;
	}
}

TEST(close_with_writes_in_flight)
{
	size_t len = 1 << 20;
	uint8_t *src = malloc(len), *dst = malloc(len);
	struct drain d = { .buf = dst, .len = len };
	double t0, dt;
	int c, s;

	ASSERT_EQ(system("tc qdisc add dev lo root netem delay 20ms"), 0);
	ASSERT_EQ(es_pair(&c, &s), 0);
	fill(src, len, 99);
	d.fd = s;
	pthread_create(&d.t, NULL, drainer, &d);
	EXPECT_EQ(writen(c, src, len), 0);
	t0 = now();
	close(c);		/* the last Writes are still in flight */
	dt = now() - t0;
	pthread_join(d.t, NULL);
	note("close() with writes in flight took %.2f s; peer read %zu of %zu, then %zd",
	     dt, d.got, len, d.last);
	EXPECT_EQ(system("tc qdisc del dev lo root"), 0);
	EXPECT_LT_F(dt, 4.0);
	EXPECT_EQ(d.got, len);
	EXPECT_EQ(d.last, 0);
	EXPECT_MEMEQ(src, dst, len);
	close(s);
	free(src);
	free(dst);
}

/* Two readers: a peek that waits for more must not return bytes the
 * other reader took meanwhile (nor anything never sent). */
static void *late_reader(void *arg)
{
	char b[64];
	int fd = *(int *)arg;

	usleep(200000);
	(void)!recv(fd, b, sizeof(b), 0);
	return NULL;
}

TEST(peek_waitall_with_a_second_reader)
{
	char b[100];
	pthread_t t;
	int c, s;
	ssize_t r;

	ASSERT_EQ(es_pair(&c, &s), 0);
	memset(b, 0, sizeof(b));
	ASSERT_EQ(writen(c, "0123456789abcdefghij0123456789abcdefghij0123456789", 50), 0);
	usleep(200000);
	pthread_create(&t, NULL, late_reader, &s);
	/* wants 100, 50 are there; the other reader takes them */
	{
		struct timeval tv = { .tv_sec = 2 };

		setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	r = recv(s, b, sizeof(b), MSG_PEEK | MSG_WAITALL);
	pthread_join(t, NULL);
	note("peek returned %zd", r);
	EXPECT_LE(r, 50);
	if (r > 0)
		EXPECT_MEMEQ(b, "0123456789abcdefghij0123456789abcdefghij0123456789", r);
	close(c);
	close(s);
}

/* ------------------------------------------------ one-sided writes */

static int set_iomap_size(int fd, int v)
{
	return setsockopt(fd, SOL_IWARP, IWARP_IOMAP_SIZE, &v, sizeof(v)) ?
	       -errno : 0;
}

static int iomap_opt(int fd, int opt, const void *buf, uint64_t len,
		     uint64_t off, uint32_t prot)
{
	struct iwarp_iomap io = {
		.addr = (uintptr_t)buf, .len = len, .offset = off,
		.prot = prot,
	};

	return setsockopt(fd, SOL_IWARP, opt, &io, sizeof(io)) ? -errno : 0;
}

static int riomap_(int fd, const void *buf, uint64_t len, uint64_t off)
{
	return iomap_opt(fd, IWARP_IOMAP, buf, len, off, PROT_WRITE);
}

static int riounmap_(int fd, const void *buf, uint64_t len)
{
	return iomap_opt(fd, IWARP_IOUNMAP, buf, len, 0, 0);
}

/* sendmsg() with an IWARP_IOWRITE control message: bytes or -errno. */
static ssize_t riowrite_(int fd, const void *buf, size_t n, uint64_t off,
			 int flags)
{
	union {
		char b[CMSG_SPACE(sizeof(uint64_t))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = n };
	struct msghdr m = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = ctl.b, .msg_controllen = sizeof(ctl.b),
	};
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	ssize_t r;

	memset(&ctl, 0, sizeof(ctl));
	c->cmsg_level = SOL_IWARP;
	c->cmsg_type = IWARP_IOWRITE;
	c->cmsg_len = CMSG_LEN(sizeof(off));
	memcpy(CMSG_DATA(c), &off, sizeof(off));
	r = sendmsg(fd, &m, flags | MSG_NOSIGNAL);
	return r < 0 ? -errno : r;
}

/* All n bytes at off, blocking: 0 or -errno (-EMSGSIZE: a short write). */
static int riowrite_all(int fd, const uint8_t *buf, size_t n, uint64_t off)
{
	ssize_t r = riowrite_(fd, buf, n, off, 0);

	return r < 0 ? (int)r : (size_t)r == n ? 0 : -EMSGSIZE;
}

/* A switched pair whose ends offer csize and ssize iomap entries. */
static int io_pair(int *c, int *s, int csize, int ssize)
{
	int r = tcp_pair(c, s);

	if (!r)
		r = ulp(*c);
	if (!r)
		r = ulp(*s);
	if (!r && csize)
		r = set_iomap_size(*c, csize);
	if (!r && ssize)
		r = set_iomap_size(*s, ssize);
	if (!r)
		r = switch_both(*c, *s, IWARP_MODE_ACTIVE, IWARP_MODE_PASSIVE,
				NULL, NULL);
	return r;
}

/* A few stream bytes from a to b: a's earlier riomap()s have reached b
 * when b reads them (the stream is ordered behind the announcements). */
static int sync_pair(int a, int b)
{
	char x[4];
	int r = writen(a, "sync", 4);

	if (!r)
		r = readn(b, x, 4, 5000);
	return r ? r : memcmp(x, "sync", 4) ? -EILSEQ : 0;
}

static void *map_anon(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/*
 * rsockets' riomap()/riowrite() between two extended sockets: the bytes
 * land in the mapped memory at their offsets (across two adjacent
 * mappings, short at the end of the last), nothing of them goes through
 * the stream, and the stream stays ordered behind them.
 */
TEST(iomap_one_sided_writes)
{
	const size_t n1 = 256 << 10, n2 = 8 << 10;
	const uint64_t base = 1ULL << 40;
	uint8_t *m1 = map_anon(n1), *m2 = map_anon(n2);
	uint8_t *src = malloc(n1 + n2), *want = calloc(1, n1 + n2);
	struct iwarp_info ic, is;
	uint64_t sent = 0;
	char done[4];
	int c, s;
	ssize_t r;

	ASSERT_TRUE(m1 && m2 && src && want);
	fill(src, n1 + n2, 7);
	ASSERT_EQ(io_pair(&c, &s, 3, 2), 0);
	ASSERT_EQ(info(c, &ic), 0);
	ASSERT_EQ(info(s, &is), 0);
	EXPECT_EQ(ic.iomap_size, 3);
	EXPECT_EQ(ic.peer_iomap_size, 2);
	EXPECT_EQ(is.iomap_size, 2);
	EXPECT_EQ(is.peer_iomap_size, 3);

	/* s maps two regions, adjacent in offsets, far apart in memory */
	ASSERT_EQ(riomap_(s, m1, n1, base), 0);
	ASSERT_EQ(riomap_(s, m2, n2, base + n1), 0);
	ASSERT_EQ(sync_pair(s, c), 0);

	/* one byte at the start, a long run inside, one across the two */
	ASSERT_EQ(riowrite_all(c, src, 1, base), 0);
	ASSERT_EQ(riowrite_all(c, src + 7, 100000, base + 7), 0);
	ASSERT_EQ(riowrite_all(c, src + n1 - 5000, 10000, base + n1 - 5000), 0);
	sent = 1 + 100000 + 10000;
	memcpy(want, src, 1);
	memcpy(want + 7, src + 7, 100000);
	memcpy(want + n1 - 5000, src + n1 - 5000, 10000);
	/* short at the end of the mappings; nothing where none is */
	r = riowrite_(c, src + n1 + n2 - 100, 10000, base + n1 + n2 - 100, 0);
	EXPECT_EQ(r, 100);
	if (r == 100) {
		memcpy(want + n1 + n2 - 100, src + n1 + n2 - 100, 100);
		sent += 100;
	}
	EXPECT_EQ(riowrite_(c, src, 10, base + n1 + n2, 0), -EINVAL);
	EXPECT_EQ(riowrite_(c, src, 10, base - 1, 0), -EINVAL);
	EXPECT_EQ(riowrite_(c, src, 10, 0, 0), -EINVAL);
	EXPECT_EQ(riowrite_(c, src, 10, ~0ULL - 4, 0), -EINVAL);

	/* the stream, behind them: when s reads it, the bytes are there */
	ASSERT_EQ(writen(c, "done", 4), 0);
	ASSERT_EQ(readn(s, done, 4, 5000), 0);
	EXPECT_MEMEQ(m1, want, n1);
	EXPECT_MEMEQ(m2, want + n1, n2);
	ASSERT_EQ(info(c, &ic), 0);
	EXPECT_EQ(ic.iowrite_bytes, sent);
	EXPECT_EQ(ic.tx_bytes, 4);	/* "done" ("sync" was s's) */
	ASSERT_EQ(info(s, &is), 0);
	EXPECT_EQ(is.rx_bytes, 4);

	/* and the other way, non-blocking, 1 MiB through a 256 KiB map */
	{
		uint8_t *dst = map_anon(n1);
		size_t k, total = 0;

		ASSERT_TRUE(dst != NULL);
		ASSERT_EQ(riomap_(c, dst, n1, 0), 0);
		ASSERT_EQ(sync_pair(c, s), 0);
		for (k = 0; k < 4; k++) {
			size_t off = 0;

			while (off < n1) {
				r = riowrite_(s, src + off, n1 - off, off,
					      MSG_DONTWAIT);
				if (r == -EAGAIN) {
					struct pollfd p = { .fd = s, .events = POLLOUT };

					poll(&p, 1, 1000);
					continue;
				}
				ASSERT_GT(r, 0);
				off += r;
				total += r;
			}
		}
		ASSERT_EQ(writen(s, "done", 4), 0);
		ASSERT_EQ(readn(c, done, 4, 5000), 0);
		EXPECT_MEMEQ(dst, src, n1);
		ASSERT_EQ(info(s, &is), 0);
		EXPECT_EQ(is.iowrite_bytes, total);
	}
	close(c);
	close(s);
}

static int listener_refuses_iomap_size(int l)
{
	return set_iomap_size(l, 1) == -EINVAL ? 0 : -EPROTO;
}

/* Every bad argument is EINVAL (or what rsockets says), and changes
 * nothing: a table of the peer is used only when offered, up to its
 * size, and an unmap frees an entry for the next map. */
TEST(iomap_bad_arguments)
{
	uint8_t *m = map_anon(1 << 20), b[64] = { 0 };
	struct iwarp_iomap io = { .prot = PROT_WRITE };
	socklen_t len;
	int c, s, l, v;

	ASSERT_TRUE(m != NULL);
	ASSERT_EQ(tcp_pair(&c, &s), 0);
	EXPECT_EQ(set_iomap_size(c, 1), -ENOPROTOOPT);	/* no ULP */
	ASSERT_EQ(ulp(c), 0);
	EXPECT_EQ(set_iomap_size(c, -1), -EINVAL);
	EXPECT_EQ(set_iomap_size(c, IWARP_IOMAP_MAX + 1), -EINVAL);
	v = 5;
	EXPECT_EQ(setsockopt(c, SOL_IWARP, IWARP_IOMAP_SIZE, &v, 2), -1);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(set_iomap_size(c, IWARP_IOMAP_MAX), 0);
	len = sizeof(v);
	ASSERT_EQ(getsockopt(c, SOL_IWARP, IWARP_IOMAP_SIZE, &v, &len), 0);
	EXPECT_EQ(v, IWARP_IOMAP_MAX);
	/* not switched yet: nothing to map into */
	EXPECT_EQ(riomap_(c, m, 4096, 0), -ENOTCONN);
	EXPECT_EQ(riowrite_(c, b, 1, 0, 0), -ENOTCONN);
	close(c);
	close(s);
	ASSERT_EQ(ulp_listener_pair(&l, &c, &s, listener_refuses_iomap_size), 0);
	close(l);
	close(c);
	close(s);

	/* c offers 2 entries, s none */
	ASSERT_EQ(io_pair(&c, &s, 2, 0), 0);
	EXPECT_EQ(set_iomap_size(c, 1), -EISCONN);
	EXPECT_EQ(riomap_(c, m, 4096, 0), -ENOMEM);	/* s offered none */
	EXPECT_EQ(riomap_(s, m, 0, 0), -EINVAL);
	EXPECT_EQ(riomap_(s, m, 1ULL << 32, 0), -EINVAL);
	EXPECT_EQ(riomap_(s, m, 4096, ~0ULL - 100), -EINVAL);
	EXPECT_EQ(iomap_opt(s, IWARP_IOMAP, m, 4096, 0, PROT_EXEC), -EINVAL);
	EXPECT_EQ(iomap_opt(s, IWARP_IOMAP, m, 4096, 0, PROT_WRITE | 8), -EINVAL);
	EXPECT_EQ(iomap_opt(s, IWARP_IOMAP, m, 4096, 0, 0), -EINVAL);
	io.addr = (uintptr_t)m;
	io.len = 4096;
	io.reserved = 1;
	EXPECT_EQ(setsockopt(s, SOL_IWARP, IWARP_IOMAP, &io, sizeof(io)), -1);
	EXPECT_EQ(errno, EINVAL);
	io.reserved = 0;
	EXPECT_EQ(setsockopt(s, SOL_IWARP, IWARP_IOMAP, &io, sizeof(io) - 1), -1);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(setsockopt(s, SOL_IWARP, IWARP_IOMAP, NULL, sizeof(io)), -1);
	EXPECT_EQ(errno, EFAULT);
	/* memory that is not there, or kernel memory */
	EXPECT_EQ(riomap_(s, (void *)4096, 4096, 0), -EFAULT);
	EXPECT_EQ(riomap_(s, (void *)0xffff888000000000ULL, 4096, 0), -EINVAL);
	/* the table fills up at 2; an unmap frees an entry */
	EXPECT_EQ(riomap_(s, m, 4096, 0), 0);
	EXPECT_EQ(riomap_(s, m + 4096, 4096, 4096), 0);
	EXPECT_EQ(riomap_(s, m + 8192, 4096, 8192), -ENOMEM);
	EXPECT_EQ(riounmap_(s, m, 4095), -EINVAL);
	EXPECT_EQ(riounmap_(s, m + 1, 4096), -EINVAL);
	EXPECT_EQ(iomap_opt(s, IWARP_IOUNMAP, m, 4096, 1, 0), -EINVAL);
	EXPECT_EQ(riounmap_(s, m, 4096), 0);
	EXPECT_EQ(riounmap_(s, m, 4096), -EINVAL);	/* gone */
	EXPECT_EQ(riomap_(s, m + 8192, 4096, 8192), 0);
	EXPECT_EQ(sync_pair(s, c), 0);
	/* c: the first entry was unmapped before or after it was sent; the
	 * other two are there */
	EXPECT_EQ(riowrite_all(c, b, 64, 4096), 0);
	EXPECT_EQ(riowrite_all(c, b, 64, 8192), 0);

	/* malformed control messages */
	{
		union {
			char b[2 * CMSG_SPACE(sizeof(uint64_t))];
			struct cmsghdr align;
		} ctl;
		struct iovec iov = { .iov_base = b, .iov_len = 1 };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
				     .msg_control = ctl.b };
		struct cmsghdr *h;
		uint64_t off = 4096;
		int k;

		for (k = 0; k < 4; k++) {
			memset(&ctl, 0, sizeof(ctl));
			mh.msg_controllen = CMSG_SPACE(sizeof(off));
			h = CMSG_FIRSTHDR(&mh);
			h->cmsg_level = SOL_IWARP;
			h->cmsg_type = IWARP_IOWRITE;
			h->cmsg_len = CMSG_LEN(sizeof(off));
			memcpy(CMSG_DATA(h), &off, sizeof(off));
			if (k == 0)
				h->cmsg_type = IWARP_IOWRITE + 1;
			else if (k == 1)
				h->cmsg_len = CMSG_LEN(sizeof(uint32_t));
			else if (k == 2) {	/* two of them */
				mh.msg_controllen = sizeof(ctl.b);
				h = CMSG_NXTHDR(&mh, h);
				h->cmsg_level = SOL_IWARP;
				h->cmsg_type = IWARP_IOWRITE;
				h->cmsg_len = CMSG_LEN(sizeof(off));
				memcpy(CMSG_DATA(h), &off, sizeof(off));
			} else {
				/* another level's, which TCP ignores too: a
				 * stream write */
				h->cmsg_level = IPPROTO_TCP;
				h->cmsg_type = 0x7777;
			}
			{
				ssize_t r = sendmsg(c, &mh, MSG_NOSIGNAL);
				int e = r < 0 ? errno : 0;

				note("control message case %d: %zd, errno %d",
				     k, r, e);
				EXPECT_EQ(r, k == 3 ? 1 : -1);
				EXPECT_EQ(e, k == 3 ? 0 : EINVAL);
			}
		}
		EXPECT_EQ(readn(s, b, 1, 5000), 0);	/* case 3's byte */
	}
	EXPECT_EQ(riounmap_(s, m + 4096, 4096), 0);
	EXPECT_EQ(riounmap_(s, m + 8192, 4096), 0);
	close(c);
	close(s);
}

/* Pinned while mapped, charged to RLIMIT_MEMLOCK, and returned by
 * riounmap() and by close(). */
TEST(iomap_pins_and_memlock)
{
	const size_t n = 1 << 20;
	uint8_t *m = map_anon(n);
	struct rlimit rl;
	long base, kb;
	int c, s, i;

	ASSERT_TRUE(m != NULL);
	ASSERT_EQ(io_pair(&c, &s, 2, 2), 0);
	base = kw_vm_pin_kb();
	ASSERT_GE(base, 0);
	ASSERT_EQ(riomap_(s, m, n, 0), 0);
	EXPECT_EQ(kw_vm_pin_kb(), base + 1024);
	ASSERT_EQ(riounmap_(s, m, n), 0);
	EXPECT_EQ(kw_vm_pin_kb(), base);
	ASSERT_EQ(riomap_(s, m, n, 0), 0);
	ASSERT_EQ(riomap_(c, m, n, 0), 0);
	EXPECT_EQ(kw_vm_pin_kb(), base + 2048);
	close(c);
	close(s);
	/* the socket's own buffers too; the last unpin may be deferred */
	for (i = 0; i < 50 && (kb = kw_vm_pin_kb()) > 0; i++)
		usleep(20000);
	EXPECT_EQ(kb, 0);

	/*
	 * as a user of our own, past the limit: ENOMEM, and nothing stays
	 * charged. The limit bounds what that user holds: root
	 * (CAP_IPC_LOCK) charged it nothing for the sockets' own buffers,
	 * and no earlier test left anything on it (nobody's might).
	 */
	ASSERT_EQ(io_pair(&c, &s, 2, 2), 0);
	base = kw_vm_pin_kb();
	rl.rlim_cur = rl.rlim_max = 512 << 10;
	ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
	ASSERT_EQ(setuid(60101), 0);
	EXPECT_EQ(riomap_(s, m, n, 0), -ENOMEM);
	EXPECT_EQ(kw_vm_pin_kb(), base);
	EXPECT_EQ(riomap_(s, m, 256 << 10, 0), 0);
	EXPECT_EQ(kw_vm_pin_kb(), base + 256);
	close(c);
	close(s);
}

/* The stream ended by a protocol error: fd turns readable, and a read
 * fails with a reset (or EPROTO), not EOF. */
static void expect_reset(int *kwt_fail, int fd, const char *who)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char b[16];
	ssize_t r;
	int e;

	EXPECT_EQ(poll(&p, 1, 5000), 1);
	r = recv(fd, b, sizeof(b), MSG_DONTWAIT);
	e = errno;
	note("%s: recv %zd, errno %d", who, r, e);
	EXPECT_EQ(r, -1);
	EXPECT_TRUE(e == ECONNRESET || e == EPROTO);
}

/*
 * A peer that writes into a mapping after riounmap() (rsockets does not
 * tell it): the write meets an invalid STag, the connection ends with a
 * Terminate, and both ends see an error, not a hang.
 */
TEST(iomap_write_after_unmap_ends_the_stream)
{
	uint8_t *m = map_anon(65536), b[4096];
	int c, s;

	ASSERT_TRUE(m != NULL);
	memset(b, 'x', sizeof(b));
	ASSERT_EQ(io_pair(&c, &s, 1, 1), 0);
	ASSERT_EQ(riomap_(s, m, 65536, 0), 0);
	ASSERT_EQ(riomap_(c, m + 32768, 4096, 0), 0);
	ASSERT_EQ(sync_pair(s, c), 0);
	ASSERT_EQ(riowrite_all(c, b, sizeof(b), 0), 0);
	ASSERT_EQ(sync_pair(c, s), 0);
	EXPECT_EQ(m[4095], 'x');
	ASSERT_EQ(riounmap_(s, m, 65536), 0);
	memset(m, 0, 65536);
	/* c still has the entry: its write goes out, and is refused */
	EXPECT_EQ(riowrite_(c, b, sizeof(b), 0, 0), (ssize_t)sizeof(b));
	expect_reset(kwt_fail, s, "the unmapping side");
	expect_reset(kwt_fail, c, "the writer");
	EXPECT_EQ(m[0], 0);	/* nothing landed after the unmap */
	/* the stream is gone: no new mapping, but an unmap still works */
	EXPECT_EQ(riomap_(c, m + 40960, 4096, 4096), -ECONNRESET);
	EXPECT_EQ(riounmap_(c, m + 32768, 4096), 0);
	close(c);
	close(s);
}

/* getsockopt(IWARP_IOREAD): bytes read, or -errno. */
static long rioread_(int fd, void *buf, uint64_t len, uint64_t off)
{
	struct iwarp_ioread r = { .addr = (uintptr_t)buf, .len = len,
				  .offset = off };
	socklen_t l = sizeof(r);

	if (getsockopt(fd, SOL_IWARP, IWARP_IOREAD, &r, &l))
		return -errno;
	return (long)r.done;
}

/*
 * RDMA Read of a region the peer exposes (riomap() with PROT_READ, a
 * kiwarp extension): the bytes come straight into the caller's memory,
 * at most IWARP_IOREAD_MAX and no further than the mapping per call; a
 * write-only mapping is not readable (the connection ends); bad
 * arguments are refused.
 */
TEST(ioread_of_a_mapping)
{
	const size_t n = 6 << 20;
	uint8_t *m = map_anon(n), *dst = map_anon(n), *ro;
	struct iwarp_ioread r = { 0 };
	struct iwarp_info ic;
	socklen_t l;
	size_t got = 0;
	long k;
	int c, s;

	ASSERT_TRUE(m && dst);
	fill(m, n, 99);
	ASSERT_EQ(io_pair(&c, &s, 2, 2), 0);
	ASSERT_EQ(iomap_opt(s, IWARP_IOMAP, m, n, 1 << 20, PROT_READ | PROT_WRITE), 0);
	/* read-only memory, mapped read-only */
	ro = mmap(NULL, 65536, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_TRUE(ro != MAP_FAILED);
	ASSERT_EQ(iomap_opt(s, IWARP_IOMAP, ro, 65536, 0, PROT_READ), 0);
	ASSERT_EQ(sync_pair(s, c), 0);

	/* not mapped, past it, bad arguments */
	EXPECT_EQ(rioread_(c, dst, 10, 65536), -EINVAL);
	EXPECT_EQ(rioread_(c, dst, 10, (1 << 20) + n), -EINVAL);
	EXPECT_EQ(rioread_(c, dst, 0, 1 << 20), -EINVAL);
	EXPECT_EQ(rioread_(c, dst, 10, ~0ULL - 3), -EINVAL);
	EXPECT_EQ(rioread_(c, (void *)4096, 10, 1 << 20), -EFAULT);
	l = sizeof(r) - 1;
	EXPECT_EQ(getsockopt(c, SOL_IWARP, IWARP_IOREAD, &r, &l), -1);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(rioread_(s, dst, 10, 0), -EINVAL);	/* c mapped nothing */

	/* the whole mapping, 4 MiB a call at most */
	while (got < n) {
		k = rioread_(c, dst + got, n - got, (1 << 20) + got);
		ASSERT_GT(k, 0);
		EXPECT_LE(k, IWARP_IOREAD_MAX);
		got += k;
	}
	EXPECT_MEMEQ(dst, m, n);
	/* a short one at the end, and the read-only mapping */
	EXPECT_EQ(rioread_(c, dst, 100, (1 << 20) + n - 10), 10);
	EXPECT_EQ(rioread_(c, dst, 65536, 0), 65536);
	EXPECT_EQ(dst[0], 0);
	ASSERT_EQ(info(c, &ic), 0);
	EXPECT_EQ(ic.ioread_bytes, n + 10 + 65536);
	/* the stream still works both ways */
	EXPECT_EQ(sync_pair(c, s), 0);
	EXPECT_EQ(sync_pair(s, c), 0);
	/* not once this side is done sending */
	ASSERT_EQ(shutdown(c, SHUT_WR), 0);
	EXPECT_EQ(rioread_(c, dst, 100, 1 << 20), -EPIPE);
	close(c);
	close(s);

	/* rsockets maps for writes only: reading such a mapping ends it */
	ASSERT_EQ(io_pair(&c, &s, 1, 1), 0);
	ASSERT_EQ(riomap_(s, m, 65536, 0), 0);
	ASSERT_EQ(sync_pair(s, c), 0);
	k = rioread_(c, dst, 100, 0);
	note("read of a write-only mapping: %ld", k);
	EXPECT_TRUE(k == -ECONNRESET || k == -EIO);
	EXPECT_EQ(rioread_(c, dst, 100, 0), -ECONNRESET);
	close(c);
	close(s);
}

/* riomap() right after a non-blocking switch began (kiwarp-run's and
 * raccept()'s background switch): it waits for the switch, as rsockets'
 * riomap() never says EAGAIN, and the mapping works. */
TEST(iomap_during_a_background_switch)
{
	uint8_t *m = map_anon(65536), b[512];
	int c, s, mode = IWARP_MODE_PASSIVE, fl;

	ASSERT_TRUE(m != NULL);
	memset(b, 'z', sizeof(b));
	ASSERT_EQ(tcp_pair(&c, &s), 0);
	ASSERT_EQ(ulp(c), 0);
	ASSERT_EQ(ulp(s), 0);
	ASSERT_EQ(set_iomap_size(c, 1), 0);
	ASSERT_EQ(set_iomap_size(s, 1), 0);
	fl = fcntl(s, F_GETFL);
	ASSERT_EQ(fcntl(s, F_SETFL, fl | O_NONBLOCK), 0);
	EXPECT_EQ(setsockopt(s, SOL_IWARP, IWARP_MODE, &mode, sizeof(mode)), -1);
	EXPECT_EQ(errno, EINPROGRESS);
	{
		struct sw a = { .fd = c, .mode = IWARP_MODE_ACTIVE };

		pthread_create(&a.t, NULL, switch_thread, &a);
		/* s is still switching: this waits for it */
		EXPECT_EQ(riomap_(s, m, 65536, 0), 0);
		pthread_join(a.t, NULL);
		ASSERT_EQ(a.ret, 0);
	}
	ASSERT_EQ(fcntl(s, F_SETFL, fl), 0);
	ASSERT_EQ(sync_pair(s, c), 0);
	ASSERT_EQ(riowrite_all(c, b, sizeof(b), 100), 0);
	ASSERT_EQ(sync_pair(c, s), 0);
	EXPECT_MEMEQ(m + 100, b, sizeof(b));
	close(c);
	close(s);
}

/* ------------------------------------------- zero-copy sends (IWARP_MREG) */

#include <linux/errqueue.h>

#ifndef SO_EE_ORIGIN_ZEROCOPY
#define SO_EE_ORIGIN_ZEROCOPY 5
#endif

static int mreg_opt(int fd, int opt, const void *buf, uint64_t len,
		    uint32_t flags)
{
	struct iwarp_mreg r = {
		.addr = (uintptr_t)buf, .len = len, .flags = flags,
	};

	return setsockopt(fd, SOL_IWARP, opt, &r, sizeof(r)) ? -errno : 0;
}

static int zerocopy_on(int fd)
{
	int one = 1;

	return setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) ?
	       -errno : 0;
}

/*
 * The notifications on fd's error queue, marked in seen[] (ids below
 * nids; each must come once, with SO_EE_CODE_ZEROCOPY_COPIED where
 * copied[] says so), until all nids are there or ms pass: the count of ids
 * seen, or a negative errno for a malformed or repeated one. A call sent
 * from a registration may say COPIED too: over loopback the stack copies
 * by-reference pages and the QP copies instead (KIWARP_QPQ_TX_COPIED), as
 * Linux's own MSG_ZEROCOPY says COPIED there.
 */
static int zc_collect(int fd, uint8_t *seen, uint32_t nids,
		      const uint8_t *copied, int ms)
{
	uint32_t got = 0, i;

	for (i = 0; i < nids; i++)
		got += seen[i];
	while (got < nids) {
		char cbuf[256];
		struct msghdr m = { .msg_control = cbuf,
				    .msg_controllen = sizeof(cbuf) };
		struct cmsghdr *cm;
		struct pollfd p = { .fd = fd, .events = 0 };

		if (recvmsg(fd, &m, MSG_ERRQUEUE) < 0) {
			if (errno != EAGAIN)
				return -errno;
			if (poll(&p, 1, ms) <= 0)
				break;
			if (!(p.revents & POLLERR))
				return -EPROTO;
			continue;
		}
		for (cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
			struct sock_extended_err *e = (void *)CMSG_DATA(cm);

			if (!((cm->cmsg_level == SOL_IP &&
			       cm->cmsg_type == IP_RECVERR) ||
			      (cm->cmsg_level == SOL_IPV6 &&
			       cm->cmsg_type == IPV6_RECVERR)))
				return -EPROTO;
			if (e->ee_origin != SO_EE_ORIGIN_ZEROCOPY ||
			    e->ee_errno || e->ee_info > e->ee_data ||
			    e->ee_data >= nids)
				return -EPROTO;
			for (i = e->ee_info; i <= e->ee_data; i++) {
				if (seen[i] || (copied[i] &&
				    e->ee_code != SO_EE_CODE_ZEROCOPY_COPIED))
					return -EILSEQ;
				seen[i] = 1;
				got++;
			}
		}
	}
	return got;
}

struct reader {
	int fd;
	uint8_t *buf;
	size_t len;
	int ret;
	pthread_t t;
};

static void *reader_thread(void *arg)
{
	struct reader *r = arg;

	r->ret = readn(r->fd, r->buf, r->len, 20000);
	return NULL;
}

/*
 * MSG_ZEROCOPY from a registration: the bytes arrive intact, each call
 * is notified once (ids from 0, merged into ranges), the counters say
 * the bytes went from the registered pages; bytes outside a registration
 * are copied and notified as such; without SO_ZEROCOPY the flag is
 * ignored, as Linux does. The pins go when the registration does.
 */
TEST(zerocopy_sends_from_a_registration)
{
	const size_t n = 1 << 20;
	uint8_t *buf = map_anon(n), *dst = malloc(n), *plain = malloc(4096);
	uint8_t seen[16] = { 0 }, copied[16] = { 0 };
	struct iwarp_info ic;
	struct pollfd p;
	long base;
	size_t off = 0;
	int c, s, k;

	ASSERT_TRUE(buf && dst && plain);
	fill(buf, n, 99);
	fill(plain, 4096, 98);
	ASSERT_EQ(es_pair(&c, &s), 0);
	base = kw_vm_pin_kb();
	ASSERT_EQ(mreg_opt(c, IWARP_MREG, buf, n, 0), 0);
	EXPECT_EQ(kw_vm_pin_kb(), base + 1024);
	ASSERT_EQ(zerocopy_on(c), 0);
	/* nothing sent yet: an empty error queue */
	EXPECT_EQ(recv(c, dst, 1, MSG_ERRQUEUE | MSG_DONTWAIT), -1);
	EXPECT_EQ(errno, EAGAIN);

	/* ids 0..7: 1 MiB in calls of 100 B to 512 KiB, all registered */
	{
		const size_t sizes[8] = { 100, 4096, 65536, 1000, 131072,
					  200000, 524288, 0 };
		struct reader rd = { .fd = s, .buf = dst, .len = n };
		size_t sum = 0;

		for (k = 0; k < 7; k++)
			sum += sizes[k];
		pthread_create(&rd.t, NULL, reader_thread, &rd);
		for (k = 0; k < 8; k++) {
			size_t want = k < 7 ? sizes[k] : n - sum;

			/* blocking: all of it, in one call (one id) */
			EXPECT_EQ(send(c, buf + off, want, MSG_ZEROCOPY),
				  (ssize_t)want);
			off += want;
		}
		pthread_join(rd.t, NULL);
		ASSERT_EQ(rd.ret, 0);
	}
	EXPECT_MEMEQ(dst, buf, n);
	EXPECT_EQ(zc_collect(c, seen, 8, copied, 10000), 8);
	ASSERT_EQ(info(c, &ic), 0);
	EXPECT_EQ(ic.zc_bytes, n);
	EXPECT_EQ(ic.tx_bytes, n);
	EXPECT_EQ(ic.mreg_count, 1);
	EXPECT_EQ(ic.zc_pending, 0);

	/* id 8: not registered, copied, notified at once; POLLERR says so */
	ASSERT_EQ(send(c, plain, 4096, MSG_ZEROCOPY), 4096);
	copied[8] = 1;
	p = (struct pollfd){ .fd = c, .events = POLLIN };
	EXPECT_EQ(poll(&p, 1, 5000), 1);
	EXPECT_TRUE(p.revents & POLLERR);
	EXPECT_EQ(zc_collect(c, seen, 9, copied, 5000), 9);
	/* id 9: one iovec half inside the registration is copied too */
	{
		struct iovec v[2] = { { buf, 10 }, { plain, 10 } };
		struct msghdr m = { .msg_iov = v, .msg_iovlen = 2 };

		ASSERT_EQ(sendmsg(c, &m, MSG_ZEROCOPY), 20);
		copied[9] = 1;
		EXPECT_EQ(zc_collect(c, seen, 10, copied, 5000), 10);
	}
	/* without SO_ZEROCOPY the flag means nothing: no id, no note */
	{
		int zero = 0;

		ASSERT_EQ(setsockopt(c, SOL_SOCKET, SO_ZEROCOPY, &zero,
				     sizeof(zero)), 0);
		ASSERT_EQ(send(c, buf, 4096, MSG_ZEROCOPY), 4096);
		ASSERT_EQ(zerocopy_on(c), 0);
		ASSERT_EQ(send(c, buf, 4096, MSG_ZEROCOPY), 4096);
		EXPECT_EQ(zc_collect(c, seen, 11, copied, 5000), 11);
	}
	ASSERT_EQ(readn(s, dst, 4096 + 20 + 4096 + 4096, 5000), 0);
	EXPECT_MEMEQ(dst, plain, 4096);
	EXPECT_MEMEQ(dst + 4096, buf, 10);
	EXPECT_MEMEQ(dst + 4106, plain, 10);
	EXPECT_MEMEQ(dst + 4116, buf, 4096);
	EXPECT_MEMEQ(dst + 8212, buf, 4096);
	ASSERT_EQ(info(c, &ic), 0);
	EXPECT_EQ(ic.zc_bytes, n + 4096);

	/* every send is notified: the registration goes, its pins too */
	EXPECT_EQ(mreg_opt(c, IWARP_MDEREG, buf, n, 0), 0);
	EXPECT_EQ(kw_vm_pin_kb(), base);
	ASSERT_EQ(info(c, &ic), 0);
	EXPECT_EQ(ic.mreg_count, 0);
	/* and a zero-copy send now copies */
	ASSERT_EQ(send(c, buf, 100, MSG_ZEROCOPY), 100);
	copied[11] = 1;
	EXPECT_EQ(zc_collect(c, seen, 12, copied, 5000), 12);
	close(c);
	close(s);
}

/* Bad arguments: EINVAL, ENOSPC past IWARP_MREG_MAX, EFAULT, ENOTCONN,
 * ENOMEM past RLIMIT_MEMLOCK as nobody; nothing stays pinned. */
TEST(zerocopy_registration_bad_arguments)
{
	const size_t n = 64 << 10;
	uint8_t *m = map_anon(n);
	struct iwarp_mreg r = { 0 };
	struct rlimit rl;
	long base;
	int c, s, i;

	ASSERT_TRUE(m != NULL);
	/* not switched: ENOTCONN; no ULP: ENOPROTOOPT */
	ASSERT_EQ(tcp_pair(&c, &s), 0);
	EXPECT_EQ(mreg_opt(c, IWARP_MREG, m, n, 0), -ENOPROTOOPT);
	ASSERT_EQ(ulp(c), 0);
	EXPECT_EQ(mreg_opt(c, IWARP_MREG, m, n, 0), -ENOTCONN);
	close(c);
	close(s);

	ASSERT_EQ(es_pair(&c, &s), 0);
	base = kw_vm_pin_kb();
	EXPECT_EQ(mreg_opt(c, IWARP_MREG, m, 0, 0), -EINVAL);
	EXPECT_EQ(mreg_opt(c, IWARP_MREG, m, n, 1), -EINVAL);
	EXPECT_EQ(mreg_opt(c, IWARP_MREG, (void *)~0UL, n, 0), -EINVAL);
	EXPECT_EQ(mreg_opt(c, IWARP_MREG, NULL, n, 0), -EFAULT);
	r.addr = (uintptr_t)m;
	r.len = n;
	r.reserved = 1;
	EXPECT_EQ(setsockopt(c, SOL_IWARP, IWARP_MREG, &r, sizeof(r)), -1);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(setsockopt(c, SOL_IWARP, IWARP_MREG, &r, sizeof(r) - 1), -1);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(kw_vm_pin_kb(), base);
	/* IWARP_MREG_MAX of them (the same pages), then ENOSPC */
	for (i = 0; i < IWARP_MREG_MAX; i++)
		ASSERT_EQ(mreg_opt(c, IWARP_MREG, m, 4096, 0), 0);
	EXPECT_EQ(mreg_opt(c, IWARP_MREG, m, 4096, 0), -ENOSPC);
	EXPECT_EQ(kw_vm_pin_kb(), base + 4 * IWARP_MREG_MAX);
	/* deregistration: exactly addr and len */
	EXPECT_EQ(mreg_opt(c, IWARP_MDEREG, m, 4095, 0), -EINVAL);
	EXPECT_EQ(mreg_opt(c, IWARP_MDEREG, m + 1, 4096, 0), -EINVAL);
	EXPECT_EQ(mreg_opt(c, IWARP_MDEREG, m, 4096, 1), -EINVAL);
	EXPECT_EQ(mreg_opt(c, IWARP_MDEREG, m, 4096, 0), 0);
	EXPECT_EQ(kw_vm_pin_kb(), base + 4 * (IWARP_MREG_MAX - 1));
	/* a read-only mapping is a fine source */
	{
		void *ro = mmap(NULL, 4096, PROT_READ,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		ASSERT_TRUE(ro != MAP_FAILED);
		EXPECT_EQ(mreg_opt(c, IWARP_MREG, ro, 4096, 0), 0);
	}
	close(c);
	close(s);
	for (i = 0; i < 50 && kw_vm_pin_kb() > 0; i++)
		usleep(20000);
	EXPECT_EQ(kw_vm_pin_kb(), 0);

	/* as a user of our own, past the limit: ENOMEM, nothing charged
	 * (the limit is that user's: root's buffers are not in it) */
	ASSERT_EQ(es_pair(&c, &s), 0);
	base = kw_vm_pin_kb();
	rl.rlim_cur = rl.rlim_max = 32 << 10;
	ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
	ASSERT_EQ(setuid(60102), 0);
	EXPECT_EQ(mreg_opt(c, IWARP_MREG, m, n, 0), -ENOMEM);
	EXPECT_EQ(kw_vm_pin_kb(), base);
	EXPECT_EQ(mreg_opt(c, IWARP_MREG, m, 32 << 10, 0), 0);
	close(c);
	close(s);
}

struct zc_sender {
	int fd;
	uint8_t *buf;
	size_t len, chunk;
	uint32_t calls;
	int ret;
	pthread_t t;
};

static void *zc_send_thread(void *arg)
{
	struct zc_sender *z = arg;
	size_t off = 0;

	while (off < z->len) {
		size_t k = z->len - off < z->chunk ? z->len - off : z->chunk;
		ssize_t w = send(z->fd, z->buf + off, k,
				 MSG_ZEROCOPY | MSG_NOSIGNAL);

		if (w <= 0) {
			z->ret = w < 0 ? -errno : -EPIPE;
			return NULL;
		}
		z->calls++;
		off += w;
	}
	return NULL;
}

/*
 * Two threads send zero-copy from registrations of their own, a third
 * keeps registering and deregistering a third region (EBUSY never lets it
 * pull pages from under a send), while the peer reads: every byte of
 * each sender arrives (their bytes differ, interleaved by call), every
 * call is notified exactly once.
 */
TEST(zerocopy_two_senders_and_churn)
{
	const size_t n = 2 << 20;
	uint8_t *a = map_anon(n), *b = map_anon(n), *x = map_anon(65536);
	uint8_t *dst = malloc(2 * n), *seen = calloc(1, 4096);
	uint8_t *copied = calloc(1, 4096);
	struct zc_sender za = { .buf = a, .len = n, .chunk = 48 << 10 };
	struct zc_sender zb = { .buf = b, .len = n, .chunk = 20000 };
	size_t i, na = 0, nb = 0;
	int c, s, churn = 0;

	ASSERT_TRUE(a && b && x && dst && seen && copied);
	memset(a, 0xaa, n);
	memset(b, 0x55, n);
	ASSERT_EQ(es_pair(&c, &s), 0);
	ASSERT_EQ(zerocopy_on(c), 0);
	ASSERT_EQ(mreg_opt(c, IWARP_MREG, a, n, 0), 0);
	ASSERT_EQ(mreg_opt(c, IWARP_MREG, b, n, 0), 0);
	za.fd = zb.fd = c;
	pthread_create(&za.t, NULL, zc_send_thread, &za);
	pthread_create(&zb.t, NULL, zc_send_thread, &zb);
	for (i = 0; i < 2 * n;) {
		ssize_t r = recv(s, dst + i, 2 * n - i, MSG_DONTWAIT);

		if (r > 0) {
			i += r;
		} else {
			ASSERT_TRUE(r < 0 && errno == EAGAIN);
			EXPECT_EQ(mreg_opt(c, IWARP_MREG, x, 65536, 0), 0);
			EXPECT_EQ(mreg_opt(c, IWARP_MDEREG, x, 65536, 0), 0);
			churn++;
			usleep(1000);
		}
	}
	pthread_join(za.t, NULL);
	pthread_join(zb.t, NULL);
	ASSERT_EQ(za.ret, 0);
	ASSERT_EQ(zb.ret, 0);
	for (i = 0; i < 2 * n; i++) {
		na += dst[i] == 0xaa;
		nb += dst[i] == 0x55;
	}
	EXPECT_EQ(na, n);
	EXPECT_EQ(nb, n);
	ASSERT_LT(za.calls + zb.calls, 4096);
	EXPECT_EQ(zc_collect(c, seen, za.calls + zb.calls, copied, 10000),
		  (int)(za.calls + zb.calls));
	/* all done: both registrations can go */
	EXPECT_EQ(mreg_opt(c, IWARP_MDEREG, a, n, 0), 0);
	EXPECT_EQ(mreg_opt(c, IWARP_MDEREG, b, n, 0), 0);
	printf("# %u + %u calls, %d register/deregister rounds\n",
	       za.calls, zb.calls, churn);
	close(c);
	close(s);
}

/* ------------------------------------------------------ the ES-API */

#include <kiwarp/exs.h>

static int dequeue_all(exs_qhandle_t q, exs_event_t *ev, int want, int ms)
{
	struct timespec t = { .tv_sec = ms / 1000,
			      .tv_nsec = (ms % 1000) * 1000000L };
	int got = 0;

	while (got < want) {
		int n = exs_qdequeue(q, ev + got, want - got, &t);

		if (n < 0)
			return -errno;
		if (!n)
			break;
		got += n;
	}
	return got;
}

static const exs_event_t *find_ctx(const exs_event_t *ev, int n, void *ctx)
{
	int i;

	for (i = 0; i < n; i++)
		if (ev[i].exs_evt_context == ctx)
			return &ev[i];
	return NULL;
}

/*
 * exs_send()/exs_recv() on an IWARP_MODE stream: events with the posted
 * contexts and byte counts, the queue's fd readable when they are there,
 * sends from exs_mregister()ed memory zero-copy (the socket's zc_bytes),
 * MSG_WAITALL filling the buffer, a plain receive taking what is there.
 */
TEST(exs_api_on_an_iwarp_stream)
{
	const size_t n = 1 << 20, part = 256 << 10;
	uint8_t *buf = map_anon(n), *dst = malloc(n), small[100];
	exs_event_t ev[8];
	const exs_event_t *e;
	struct iwarp_info ic;
	struct pollfd p;
	exs_qhandle_t q;
	exs_mhandle_t mh;
	long base;
	int c, s, k;

	ASSERT_TRUE(buf && dst);
	fill(buf, n, 5);
	memset(dst, 0, n);
	ASSERT_EQ(es_pair(&c, &s), 0);
	ASSERT_EQ(exs_init(EXS_VERSION), 0);
	q = exs_qcreate(8);
	ASSERT_GE(q, 0);
	ASSERT_GE(exs_qfd(q), 0);
	mh = exs_mregister(buf, n, 0);
	ASSERT_GE(mh, 0);
	base = kw_vm_pin_kb();

	/* nothing posted: nothing to dequeue, at once */
	{
		struct timespec zero = { 0, 0 };

		EXPECT_EQ(exs_qdequeue(q, ev, 8, &zero), 0);
	}
	ASSERT_EQ(exs_recv(s, dst, n, MSG_WAITALL, EXS_MHANDLE_INVALID, q,
			   (void *)100), 0);
	for (k = 0; k < 4; k++)
		ASSERT_EQ(exs_send(c, buf + k * part, part, 0, mh, q,
				   (void *)(uintptr_t)(k + 1)), 0);
	/* IWARP_MREG'd at the first send: its pages are pinned once more */
	EXPECT_EQ(kw_vm_pin_kb(), base + 1024);
	p = (struct pollfd){ .fd = exs_qfd(q), .events = POLLIN };
	EXPECT_EQ(poll(&p, 1, 10000), 1);
	ASSERT_EQ(dequeue_all(q, ev, 5, 20000), 5);
	/* one socket's sends end in the order posted */
	{
		int next = 1;

		for (k = 0; k < 5; k++)
			if (ev[k].exs_evt_fd == c &&
			    ev[k].exs_evt_context == (void *)(uintptr_t)next)
				next++;
		EXPECT_EQ(next, 5);
	}
	for (k = 0; k < 4; k++) {
		e = find_ctx(ev, 5, (void *)(uintptr_t)(k + 1));
		ASSERT_TRUE(e != NULL);
		EXPECT_EQ(e->exs_evt_type, EXS_EVT_SEND);
		EXPECT_EQ(e->exs_evt_errno, 0);
		EXPECT_EQ(e->exs_evt_fd, c);
		EXPECT_EQ(e->exs_evt_nbytes, part);
		EXPECT_TRUE(e->exs_evt_buf == buf + k * part);
	}
	e = find_ctx(ev, 5, (void *)100);
	ASSERT_TRUE(e != NULL);
	EXPECT_EQ(e->exs_evt_type, EXS_EVT_RECV);
	EXPECT_EQ(e->exs_evt_errno, 0);
	EXPECT_EQ(e->exs_evt_nbytes, n);
	EXPECT_MEMEQ(dst, buf, n);
	ASSERT_EQ(info(c, &ic), 0);
	EXPECT_EQ(ic.zc_bytes, n);	/* straight from the pages */
	EXPECT_EQ(ic.mreg_count, 1);
	/* a send's event came with the kernel's notification, not before */
	EXPECT_EQ(ic.zc_pending, 0);
	{
		char cb[256];
		struct msghdr m = { .msg_control = cb,
				    .msg_controllen = sizeof(cb) };

		EXPECT_EQ(recvmsg(c, &m, MSG_ERRQUEUE | MSG_DONTWAIT), -1);
		EXPECT_EQ(errno, EAGAIN);
	}

	/* a receive without MSG_WAITALL ends with what there is */
	ASSERT_EQ(exs_recv(s, dst, n, 0, EXS_MHANDLE_INVALID, q, (void *)7), 0);
	ASSERT_EQ(writen(c, "hello", 5), 0);
	ASSERT_EQ(dequeue_all(q, ev, 1, 10000), 1);
	EXPECT_EQ(ev[0].exs_evt_nbytes, 5);
	EXPECT_MEMEQ(dst, "hello", 5);
	/* a send of unregistered memory is copied, in order with the rest */
	fill(small, sizeof(small), 6);
	ASSERT_EQ(exs_send(c, small, sizeof(small), 0, EXS_MHANDLE_INVALID,
			   q, (void *)8), 0);
	ASSERT_EQ(exs_send(c, buf, 1000, 0, mh, q, (void *)9), 0);
	ASSERT_EQ(exs_recv(s, dst, 1100, MSG_WAITALL, EXS_MHANDLE_INVALID, q,
			   (void *)10), 0);
	ASSERT_EQ(dequeue_all(q, ev, 3, 10000), 3);
	EXPECT_MEMEQ(dst, small, sizeof(small));
	EXPECT_MEMEQ(dst + 100, buf, 1000);
	ASSERT_EQ(info(c, &ic), 0);
	EXPECT_EQ(ic.zc_bytes, n + 1000);

	/* done with it: the socket's registration goes with it */
	EXPECT_EQ(exs_mderegister(mh), 0);
	EXPECT_EQ(kw_vm_pin_kb(), base);
	ASSERT_EQ(info(c, &ic), 0);
	EXPECT_EQ(ic.mreg_count, 0);
	EXPECT_EQ(exs_qdelete(q), 0);
	close(c);
	close(s);
}

/*
 * exs_recv(MSG_WAITALL) of exs_mregister()ed memory: the peer's Writes
 * land in the buffer itself (the socket's zc_rx_bytes), past the bytes
 * already due through the stream's receive buffer, which a receive takes
 * first; receives of other kinds in between copy; every byte in order.
 * A queue deleted under a receive the peer was given resets the stream,
 * and nothing stays pinned.
 */
TEST(exs_api_zero_copy_receive)
{
	static const size_t sz[] = { 65537, 1 << 20, 3000, (2 << 20) + 123,
				     70000 };
	const size_t big = 4 << 20;
	size_t total = 0, off = 0, zc_min = 0;
	uint8_t *rb = map_anon(big), *src;
	struct xfer x = { .chunk = 100000 };
	exs_event_t ev[2];
	struct iwarp_info is;
	exs_qhandle_t q;
	exs_mhandle_t mh;
	long base;
	int c, s, k;

	ASSERT_TRUE(rb != NULL);
	for (k = 0; k < 5; k++)
		total += sz[k];
	src = malloc(total);
	ASSERT_TRUE(src != NULL);
	fill(src, total, 77);
	ASSERT_EQ(es_pair(&c, &s), 0);
	ASSERT_EQ(exs_init(EXS_VERSION), 0);
	q = exs_qcreate(4);
	ASSERT_GE(q, 0);
	base = kw_vm_pin_kb();
	mh = exs_mregister(rb, big, 0);
	ASSERT_GE(mh, 0);
	x.fd = c;
	x.buf = src;
	x.len = total;
	ASSERT_EQ(pthread_create(&x.t, NULL, writer, &x), 0);
	for (k = 0; k < 5; k++) {
		/* the 3000 bytes go to unregistered memory; the last 70000
		 * without MSG_WAITALL: both copy */
		int reg = k != 2, all = k != 4;
		uint8_t *dst = reg ? rb + 4096 * k : malloc(sz[k]);
		size_t got = 0;

		ASSERT_TRUE(dst != NULL);
		memset(dst, 0, sz[k]);
		while (got < sz[k]) {
			ASSERT_EQ(exs_recv(s, dst + got, sz[k] - got,
					   all ? MSG_WAITALL : 0,
					   reg ? mh : EXS_MHANDLE_INVALID, q,
					   (void *)(uintptr_t)(k + 1)), 0);
			ASSERT_EQ(dequeue_all(q, ev, 1, 20000), 1);
			EXPECT_EQ(ev[0].exs_evt_errno, 0);
			EXPECT_TRUE(ev[0].exs_evt_context ==
				    (void *)(uintptr_t)(k + 1));
			ASSERT_GT(ev[0].exs_evt_nbytes, 0);
			if (all)
				EXPECT_EQ(ev[0].exs_evt_nbytes, sz[k]);
			got += ev[0].exs_evt_nbytes;
		}
		if (memcmp(dst, src + off, sz[k]))
			note("receive %d: bytes differ", k);
		EXPECT_MEMEQ(dst, src + off, sz[k]);
		off += sz[k];
		if (!reg)
			free(dst);
	}
	pthread_join(x.t, NULL);
	EXPECT_EQ(x.ret, 0);
	/* all but what was already due through rbuf (128 KiB) each time */
	zc_min = sz[0] + sz[1] + sz[3] - 3 * 131072;
	ASSERT_EQ(info(s, &is), 0);
	note("%llu of %zu bytes in place", (unsigned long long)is.zc_rx_bytes,
	     total);
	EXPECT_GE(is.zc_rx_bytes, zc_min);
	EXPECT_LE(is.zc_rx_bytes, sz[0] + sz[1] + sz[3]);
	/* the targets' registrations went as they filled */
	EXPECT_EQ(exs_mderegister(mh), 0);
	EXPECT_EQ(kw_vm_pin_kb(), base);

	/* deleted under one the peer was given */
	zc_min = is.zc_rx_bytes;
	mh = exs_mregister(rb, big, 0);
	ASSERT_GE(mh, 0);
	ASSERT_EQ(exs_recv(s, rb, 1 << 20, MSG_WAITALL, mh, q, NULL), 0);
	x.len = 300000;
	x.ret = 0;
	ASSERT_EQ(pthread_create(&x.t, NULL, writer, &x), 0);
	/* the queue's progress reads the bytes before the target and has
	 * it advertised; the writer fills part of it */
	for (k = 0; k < 50; k++) {
		EXPECT_EQ(dequeue_all(q, ev, 1, 100), 0);
		ASSERT_EQ(info(s, &is), 0);
		if (is.zc_rx_bytes > zc_min + 10000)
			break;
	}
	note("%llu bytes in place before the delete",
	     (unsigned long long)(is.zc_rx_bytes - zc_min));
	EXPECT_LT(k, 50);
	EXPECT_EQ(exs_qdelete(q), 0);
	{
		char b[4096];
		ssize_t r;

		do {
			r = recv(s, b, sizeof(b), 0);
		} while (r > 0);
		EXPECT_EQ(r, -1);
		EXPECT_EQ(errno, ECANCELED);
	}
	pthread_join(x.t, NULL);	/* its stream was reset */
	EXPECT_EQ(exs_mderegister(mh), 0);
	EXPECT_EQ(kw_vm_pin_kb(), base);
	close(c);
	close(s);
	free(src);
	munmap(rb, big);
}

/* The same calls on plain TCP sockets (no ULP): copies, same events;
 * the end of the stream and a reset end pending operations. */
TEST(exs_api_on_plain_tcp_and_the_end_of_streams)
{
	uint8_t out[3000], in[3000];
	exs_event_t ev[4];
	exs_qhandle_t q;
	exs_mhandle_t mh;
	int c, s;

	fill(out, sizeof(out), 3);
	ASSERT_EQ(tcp_pair(&c, &s), 0);
	ASSERT_EQ(exs_init(EXS_VERSION), 0);
	q = exs_qcreate(4);
	ASSERT_GE(q, 0);
	mh = exs_mregister(out, sizeof(out), 0);
	ASSERT_GE(mh, 0);
	ASSERT_EQ(exs_recv(s, in, sizeof(in), MSG_WAITALL, EXS_MHANDLE_INVALID,
			   q, (void *)1), 0);
	ASSERT_EQ(exs_send(c, out, sizeof(out), 0, mh, q, (void *)2), 0);
	ASSERT_EQ(dequeue_all(q, ev, 2, 10000), 2);
	EXPECT_MEMEQ(in, out, sizeof(out));
	ASSERT_TRUE(find_ctx(ev, 2, (void *)1) != NULL);
	EXPECT_EQ(find_ctx(ev, 2, (void *)1)->exs_evt_nbytes, sizeof(out));

	/* the peer closes: a pending receive ends with 0 bytes */
	ASSERT_EQ(exs_recv(s, in, sizeof(in), 0, EXS_MHANDLE_INVALID, q,
			   (void *)3), 0);
	close(c);
	ASSERT_EQ(dequeue_all(q, ev, 1, 10000), 1);
	EXPECT_EQ(ev[0].exs_evt_nbytes, 0);
	EXPECT_EQ(ev[0].exs_evt_errno, 0);
	close(s);

	/* a reset stream: the send that finds it ends with the error */
	ASSERT_EQ(es_pair(&c, &s), 0);
	{
		struct linger l = { .l_onoff = 1, .l_linger = 0 };

		ASSERT_EQ(setsockopt(s, SOL_SOCKET, SO_LINGER, &l, sizeof(l)), 0);
		close(s);
	}
	usleep(200000);
	ASSERT_EQ(exs_send(c, out, sizeof(out), 0, mh, q, (void *)4), 0);
	ASSERT_EQ(dequeue_all(q, ev, 1, 10000), 1);
	EXPECT_TRUE(ev[0].exs_evt_errno == EPIPE ||
		    ev[0].exs_evt_errno == ECONNRESET);
	EXPECT_EQ(exs_mderegister(mh), 0);
	EXPECT_EQ(exs_qdelete(q), 0);
	close(c);
}

/* open descriptors of this process */
static int count_fds(void)
{
	int fd, n = 0;

	for (fd = 0; fd < 1024; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

static int listener(struct sockaddr_in *a)
{
	socklen_t alen = sizeof(*a);
	int l = socket(AF_INET, SOCK_STREAM, 0);

	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (l < 0 || bind(l, (struct sockaddr *)a, sizeof(*a)) ||
	    listen(l, 8) || getsockname(l, (struct sockaddr *)a, &alen))
		return -1;
	return l;
}

struct late_conn {
	pthread_t t;
	struct sockaddr_in a;
	int fd;
};

/* connect to a after 300 ms, while the test waits in exs_qdequeue() */
static void *late_connect(void *arg)
{
	struct late_conn *lc = arg;

	usleep(300 * 1000);
	lc->fd = socket(AF_INET, SOCK_STREAM, 0);
	if (lc->fd >= 0 &&
	    connect(lc->fd, (struct sockaddr *)&lc->a, sizeof(lc->a))) {
		close(lc->fd);
		lc->fd = -1;
	}
	return NULL;
}

/*
 * exs_accept() and exs_connect(): an accept posted before anybody
 * connects ends with the accepted socket; a connect ends when the
 * connection is up, a send posted behind it goes after it and a receive
 * posted before it is up waits for it; both sockets are blocking again
 * once nothing is pending (the library sets O_NONBLOCK meanwhile). A
 * refused connect is its event's ECONNREFUSED, and the operations posted
 * behind it end after it with the same error; a connection that comes
 * while the caller sleeps in exs_qdequeue() wakes it; misuse is the call's
 * errno; a deleted queue closes the sockets it accepted for events nobody
 * dequeued.
 */
TEST(exs_api_accept_and_connect)
{
	uint8_t out[5000], in[5000], back[100], got[100];
	struct sockaddr_in a;
	struct late_conn lc = { .fd = -1 };
	exs_event_t ev[4];
	const exs_event_t *e;
	exs_qhandle_t q;
	struct pollfd pl;
	int l, c, s, c2, pfd[2], nfds;

	fill(out, sizeof(out), 11);
	fill(back, sizeof(back), 12);
	ASSERT_EQ(exs_init(EXS_VERSION), 0);
	q = exs_qcreate(8);
	ASSERT_GE(q, 0);
	l = listener(&a);
	ASSERT_GE(l, 0);
	ASSERT_EQ(exs_accept(l, q, (void *)1), 0);
	EXPECT_TRUE(fcntl(l, F_GETFL) & O_NONBLOCK);	/* while pending */
	c = socket(AF_INET, SOCK_STREAM, 0);
	ASSERT_GE(c, 0);
	ASSERT_EQ(exs_connect(c, (struct sockaddr *)&a, sizeof(a), q,
			      (void *)2), 0);
	ASSERT_EQ(exs_recv(c, got, sizeof(got), MSG_WAITALL,
			   EXS_MHANDLE_INVALID, q, (void *)4), 0);
	ASSERT_EQ(exs_send(c, out, sizeof(out), 0, EXS_MHANDLE_INVALID, q,
			   (void *)3), 0);
	ASSERT_EQ(dequeue_all(q, ev, 3, 10000), 3);
	e = find_ctx(ev, 3, (void *)1);
	ASSERT_TRUE(e != NULL);
	EXPECT_EQ(e->exs_evt_type, EXS_EVT_ACCEPT);
	EXPECT_EQ(e->exs_evt_errno, 0);
	s = e->exs_evt_fd;
	ASSERT_GE(s, 0);
	EXPECT_NE(s, l);
	e = find_ctx(ev, 3, (void *)2);
	ASSERT_TRUE(e != NULL);
	EXPECT_EQ(e->exs_evt_type, EXS_EVT_CONNECT);
	EXPECT_EQ(e->exs_evt_errno, 0);
	EXPECT_EQ(e->exs_evt_fd, c);
	e = find_ctx(ev, 3, (void *)3);
	ASSERT_TRUE(e != NULL);
	EXPECT_EQ(e->exs_evt_type, EXS_EVT_SEND);
	EXPECT_EQ(e->exs_evt_nbytes, sizeof(out));
	/* the connect's event before the send's: one direction, in order */
	EXPECT_TRUE(find_ctx(ev, 3, (void *)2) < find_ctx(ev, 3, (void *)3));
	EXPECT_FALSE(fcntl(l, F_GETFL) & O_NONBLOCK);
	EXPECT_FALSE(fcntl(s, F_GETFL) & O_NONBLOCK);
	ASSERT_EQ(recv(s, in, sizeof(in), MSG_WAITALL), (ssize_t)sizeof(in));
	EXPECT_MEMEQ(in, out, sizeof(out));
	/* the receive posted while connecting */
	ASSERT_EQ(send(s, back, sizeof(back), 0), (ssize_t)sizeof(back));
	ASSERT_EQ(dequeue_all(q, ev, 1, 10000), 1);
	EXPECT_EQ(ev[0].exs_evt_context, (void *)4);
	EXPECT_EQ(ev[0].exs_evt_nbytes, sizeof(back));
	EXPECT_MEMEQ(got, back, sizeof(back));
	EXPECT_FALSE(fcntl(c, F_GETFL) & O_NONBLOCK);

	/* misuse: the call says it */
	EXPECT_EQ(exs_accept(c, q, NULL), -1);		/* not a listener */
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(exs_connect(s, (struct sockaddr *)&a, sizeof(a), q, NULL), -1);
	EXPECT_EQ(errno, EISCONN);
	EXPECT_EQ(exs_connect(c, NULL, sizeof(a), q, NULL), -1);
	EXPECT_EQ(errno, EFAULT);
	EXPECT_EQ(exs_connect(l, (struct sockaddr *)&a, sizeof(a), q, NULL), -1);
	EXPECT_EQ(errno, EINVAL);			/* a listener */
	ASSERT_EQ(pipe(pfd), 0);
	EXPECT_EQ(exs_accept(pfd[0], q, NULL), -1);
	EXPECT_EQ(errno, ENOTSOCK);
	EXPECT_EQ(exs_accept(l, q + 1, NULL), -1);	/* no such queue */
	EXPECT_EQ(errno, EINVAL);
	close(pfd[0]);
	close(pfd[1]);
	close(s);
	close(c);

	/* a connection while the caller sleeps: the sleeper gets it */
	ASSERT_EQ(exs_accept(l, q, (void *)8), 0);
	lc.a = a;
	ASSERT_EQ(pthread_create(&lc.t, NULL, late_connect, &lc), 0);
	ASSERT_EQ(dequeue_all(q, ev, 1, 20000), 1);
	pthread_join(lc.t, NULL);
	ASSERT_GE(lc.fd, 0);
	EXPECT_EQ(ev[0].exs_evt_type, EXS_EVT_ACCEPT);
	EXPECT_EQ(ev[0].exs_evt_context, (void *)8);
	ASSERT_GE(ev[0].exs_evt_fd, 0);
	close(ev[0].exs_evt_fd);
	close(lc.fd);

	/* an accepted socket nobody dequeued goes with its queue */
	ASSERT_EQ(exs_accept(l, q, (void *)5), 0);
	c = socket(AF_INET, SOCK_STREAM, 0);
	ASSERT_GE(c, 0);
	ASSERT_EQ(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
	pl = (struct pollfd){ .fd = l, .events = POLLIN };
	ASSERT_EQ(poll(&pl, 1, 10000), 1);	/* queued at the listener */
	nfds = count_fds();
	/* posting progresses the listener: the first accept ends */
	ASSERT_EQ(exs_accept(l, q, (void *)6), 0);
	EXPECT_EQ(count_fds(), nfds + 1);
	ASSERT_EQ(exs_qdelete(q), 0);
	/* the accepted socket, and the queue's epoll fd and eventfd */
	EXPECT_EQ(count_fds(), nfds + 1 - 3);
	EXPECT_FALSE(fcntl(l, F_GETFL) & O_NONBLOCK);	/* abandoned: blocking */
	close(c);

	/*
	 * nobody listens any more: the event says ECONNREFUSED, first,
	 * and the send and receive behind it end with it
	 */
	close(l);
	q = exs_qcreate(4);
	ASSERT_GE(q, 0);
	c2 = socket(AF_INET, SOCK_STREAM, 0);
	ASSERT_GE(c2, 0);
	ASSERT_EQ(exs_connect(c2, (struct sockaddr *)&a, sizeof(a), q,
			      (void *)7), 0);
	ASSERT_EQ(exs_send(c2, out, sizeof(out), 0, EXS_MHANDLE_INVALID, q,
			   (void *)9), 0);
	ASSERT_EQ(exs_recv(c2, in, sizeof(in), 0, EXS_MHANDLE_INVALID, q,
			   (void *)10), 0);
	ASSERT_EQ(dequeue_all(q, ev, 3, 10000), 3);
	EXPECT_EQ(ev[0].exs_evt_type, EXS_EVT_CONNECT);
	EXPECT_EQ(ev[0].exs_evt_errno, ECONNREFUSED);
	EXPECT_EQ(ev[0].exs_evt_fd, c2);
	EXPECT_EQ(ev[1].exs_evt_errno, ECONNREFUSED);
	EXPECT_EQ(ev[2].exs_evt_errno, ECONNREFUSED);
	EXPECT_EQ(ev[1].exs_evt_nbytes + ev[2].exs_evt_nbytes, 0);
	EXPECT_FALSE(fcntl(c2, F_GETFL) & O_NONBLOCK);
	close(c2);
	EXPECT_EQ(exs_qdelete(q), 0);
}

/* Every misuse is a clear errno, and a full queue says EAGAIN. */
TEST(exs_api_bad_arguments)
{
	uint8_t b[64];
	struct timespec bad = { 0, 1000000000L }, zero = { 0, 0 };
	exs_event_t ev[2];
	exs_qhandle_t q, q2;
	exs_mhandle_t mh;
	int c, s, pfd[2];

	EXPECT_EQ(exs_init(2), -1);
	EXPECT_EQ(errno, EINVAL);
	ASSERT_EQ(exs_init(EXS_VERSION), 0);
	EXPECT_EQ(exs_qcreate(0), -1);
	EXPECT_EQ(exs_qcreate(EXS_QDEPTH_MAX + 1), -1);
	EXPECT_EQ(exs_mregister(NULL, 10, 0), -1);
	EXPECT_EQ(exs_mregister(b, 0, 0), -1);
	EXPECT_EQ(exs_mregister(b, 10, 1), -1);
	EXPECT_EQ(exs_mregister((void *)~0UL, 10, 0), -1);
	EXPECT_EQ(exs_mderegister(-1), -1);
	EXPECT_EQ(exs_mderegister(4096), -1);
	EXPECT_EQ(exs_qdelete(-1), -1);
	EXPECT_EQ(exs_qfd(1023), -1);
	q = exs_qcreate(2);
	q2 = exs_qcreate(2);
	ASSERT_GE(q, 0);
	ASSERT_GE(q2, 0);
	mh = exs_mregister(b, 32, 0);
	ASSERT_GE(mh, 0);
	ASSERT_EQ(tcp_pair(&c, &s), 0);
	ASSERT_EQ(pipe(pfd), 0);

	EXPECT_EQ(exs_send(c, b, 0, 0, EXS_MHANDLE_INVALID, q, NULL), -1);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(exs_send(c, b, 8, MSG_OOB, EXS_MHANDLE_INVALID, q, NULL), -1);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(exs_recv(c, b, 8, MSG_PEEK, EXS_MHANDLE_INVALID, q, NULL), -1);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(exs_send(c, b, 8, 0, EXS_MHANDLE_INVALID, 999, NULL), -1);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(exs_send(c, b, 8, 0, 77, q, NULL), -1);
	EXPECT_EQ(errno, EINVAL);
	/* not inside the registration (b + 32 .. b + 40) */
	EXPECT_EQ(exs_send(c, b + 30, 8, 0, mh, q, NULL), -1);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(exs_send(pfd[1], b, 8, 0, EXS_MHANDLE_INVALID, q, NULL), -1);
	EXPECT_EQ(errno, ENOTSOCK);
	EXPECT_EQ(exs_send(9999, b, 8, 0, EXS_MHANDLE_INVALID, q, NULL), -1);
	EXPECT_EQ(errno, EBADF);
	EXPECT_EQ(exs_qdequeue(q, ev, 0, &zero), -1);
	EXPECT_EQ(errno, EINVAL);
	EXPECT_EQ(exs_qdequeue(q, ev, 2, &bad), -1);
	EXPECT_EQ(errno, EINVAL);

	/* depth 2: two pending receives fill it */
	ASSERT_EQ(exs_recv(s, b, 8, 0, mh, q, (void *)1), 0);
	ASSERT_EQ(exs_recv(s, b + 8, 8, 0, EXS_MHANDLE_INVALID, q, (void *)2), 0);
	EXPECT_EQ(exs_recv(s, b, 8, 0, EXS_MHANDLE_INVALID, q, NULL), -1);
	EXPECT_EQ(errno, EAGAIN);
	/* s's operations are on q: not on another queue meanwhile */
	EXPECT_EQ(exs_recv(s, b, 8, 0, EXS_MHANDLE_INVALID, q2, NULL), -1);
	EXPECT_EQ(errno, EINVAL);
	/* mh is in use by a pending receive */
	EXPECT_EQ(exs_mderegister(mh), -1);
	EXPECT_EQ(errno, EBUSY);
	EXPECT_EQ(exs_qdequeue(q, ev, 2, &zero), 0);
	/* the queue goes with them; then mh is free */
	EXPECT_EQ(exs_qdelete(q), 0);
	EXPECT_EQ(exs_mderegister(mh), 0);
	EXPECT_EQ(exs_recv(s, b, 8, 0, EXS_MHANDLE_INVALID, q2, NULL), 0);
	EXPECT_EQ(exs_qdelete(q2), 0);
	close(c);
	close(s);
	close(pfd[0]);
	close(pfd[1]);
}

/*
 * Notifications that find no room on the error queue (SO_RCVBUF; codes
 * alternate so that none merges) wait in the kernel, in order; once 64
 * calls wait, MSG_ZEROCOPY says ENOBUFS (as Linux's optmem limit). After
 * the queue is read, every id comes exactly once, with its code.
 */
TEST(zerocopy_notifications_wait_for_room)
{
	uint8_t *buf = map_anon(65536), plain[100], sink[65536];
	uint8_t seen[256] = { 0 }, copied[256] = { 0 };
	struct iwarp_info ic;
	int c, s, small = 4096, k, ids = 0;
	ssize_t r = 0;

	ASSERT_TRUE(buf != NULL);
	memset(plain, 'p', sizeof(plain));
	ASSERT_EQ(tcp_pair(&c, &s), 0);
	ASSERT_EQ(ulp(c), 0);
	ASSERT_EQ(ulp(s), 0);
	ASSERT_EQ(setsockopt(c, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	/* (with MPA CRC the receive path raises SO_RCVBUF: rx.c) */
	ASSERT_EQ(set_crc(c, 0), 0);
	ASSERT_EQ(set_crc(s, 0), 0);
	ASSERT_EQ(switch_both(c, s, IWARP_MODE_ACTIVE, IWARP_MODE_PASSIVE,
			      NULL, NULL), 0);
	ASSERT_EQ(mreg_opt(c, IWARP_MREG, buf, 65536, 0), 0);
	ASSERT_EQ(zerocopy_on(c), 0);
	for (k = 0; k < 200; k++) {
		int cp = k & 1;

		r = send(c, cp ? plain : buf, 100, MSG_ZEROCOPY | MSG_DONTWAIT);
		if (r < 0)
			break;
		ASSERT_EQ(r, 100);
		copied[ids++] = cp;
		if (ids % 16 == 0)
			ASSERT_EQ(readn(s, sink, 1600, 5000), 0);
	}
	EXPECT_EQ(r, -1);
	EXPECT_EQ(errno, ENOBUFS);
	ASSERT_EQ(info(c, &ic), 0);
	printf("# ENOBUFS after %d calls, %u waiting\n", ids, ic.zc_pending);
	EXPECT_GT(ic.zc_pending, 0);
	EXPECT_LT(ids, 200);
	EXPECT_EQ(zc_collect(c, seen, ids, copied, 10000), ids);
	ASSERT_EQ(info(c, &ic), 0);
	EXPECT_EQ(ic.zc_pending, 0);
	/* and it sends again */
	EXPECT_EQ(send(c, buf, 100, MSG_ZEROCOPY | MSG_DONTWAIT), 100);
	close(c);
	close(s);
}

/* exs_qdelete() of a queue another thread waits on without a timeout:
 * the waiter returns (EINVAL), it does not sleep on. */
struct qwaiter {
	exs_qhandle_t q;
	int ret, err;
	pthread_t t;
};

static void *qwait_thread(void *arg)
{
	struct qwaiter *w = arg;
	exs_event_t ev;

	w->ret = exs_qdequeue(w->q, &ev, 1, NULL);
	w->err = errno;
	return NULL;
}

TEST(exs_api_delete_wakes_waiters_and_errors_stick)
{
	struct qwaiter w = { 0 };
	uint8_t b[4096];
	exs_event_t ev[4];
	double t0;
	int c, s;

	ASSERT_EQ(exs_init(EXS_VERSION), 0);
	w.q = exs_qcreate(3);	/* not a power of two */
	ASSERT_GE(w.q, 0);
	pthread_create(&w.t, NULL, qwait_thread, &w);
	usleep(200000);
	t0 = now();
	EXPECT_EQ(exs_qdelete(w.q), 0);
	pthread_join(w.t, NULL);
	EXPECT_EQ(w.ret, -1);
	EXPECT_EQ(w.err, EINVAL);
	EXPECT_LT_F(now() - t0, 2.0);
	/* the handle is dead, and does not name the next queue */
	{
		exs_qhandle_t q2 = exs_qcreate(3);

		ASSERT_GE(q2, 0);
		EXPECT_NE(q2, w.q);
		EXPECT_EQ(exs_qfd(w.q), -1);
		EXPECT_EQ(exs_qdelete(q2), 0);
	}

	/* a reset stream: the failing send, and every later one, fail */
	ASSERT_EQ(es_pair(&c, &s), 0);
	w.q = exs_qcreate(3);
	ASSERT_GE(w.q, 0);
	{
		struct linger l = { .l_onoff = 1, .l_linger = 0 };

		ASSERT_EQ(setsockopt(s, SOL_SOCKET, SO_LINGER, &l, sizeof(l)), 0);
		close(s);
	}
	/* the reset takes a moment to reach c: send until it shows */
	{
		int k, got = 0, err = 0;

		for (k = 0; k < 50 && !err; k++) {
			ASSERT_EQ(exs_send(c, b, sizeof(b), 0,
					   EXS_MHANDLE_INVALID, w.q, NULL), 0);
			ASSERT_EQ(dequeue_all(w.q, ev, 1, 5000), 1);
			got++;
			err = ev[0].exs_evt_errno;
			usleep(20000);
		}
		EXPECT_TRUE(err == EPIPE || err == ECONNRESET);
		/* later sends fail with the same error, at once */
		ASSERT_EQ(exs_send(c, b, 10, 0, EXS_MHANDLE_INVALID, w.q,
				   NULL), 0);
		ASSERT_EQ(dequeue_all(w.q, ev, 1, 5000), 1);
		EXPECT_EQ(ev[0].exs_evt_errno, err);
		EXPECT_EQ(ev[0].exs_evt_nbytes, 0);
		/* a receive: the error, not an end of stream */
		ASSERT_EQ(exs_recv(c, b, 10, 0, EXS_MHANDLE_INVALID, w.q,
				   NULL), 0);
		ASSERT_EQ(dequeue_all(w.q, ev, 1, 5000), 1);
		EXPECT_NE(ev[0].exs_evt_errno, 0);
		ASSERT_EQ(exs_recv(c, b, 10, 0, EXS_MHANDLE_INVALID, w.q,
				   NULL), 0);
		ASSERT_EQ(dequeue_all(w.q, ev, 1, 5000), 1);
		EXPECT_NE(ev[0].exs_evt_errno, 0);
		printf("# reset seen after %d sends: %s\n", got, strerror(err));
	}
	EXPECT_EQ(exs_qdelete(w.q), 0);
	close(c);
}
