// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * kiwarp-scale: many connections at once (make bench, "Scale").
 *
 *   server: kiwarp-scale -s [-p PORT] [-T kiwarp|kiwarp-sock|tcp] [-q]
 *   client: kiwarp-scale -c HOST [-p PORT] -t bw|setup|mem -N COUNT
 *                        [-T kiwarp|kiwarp-sock|tcp] [--bytes B] [--size S]
 *                        [--verify] [--json]
 *
 * bw     N connections up first, then B bytes in total (default 128 MiB)
 *        as S-byte messages (default 64 KiB) spread evenly over them: RDMA
 *        Writes into the peer's region for the connection, or write()s on
 *        N TCP sockets. One thread, one CQ (epoll for TCP); each QP keeps
 *        up to max(1, min(16, 256 / N)) Writes in flight. Time: first post
 *        to last completion (TCP: to the last of the server's one-byte
 *        answers). --verify: RDMA Read back each region (TCP: the server
 *        checks each socket's last message) and compare.
 * setup  N connections one after the other, each up to RTS on both sides
 *        (TCP: connect, one byte each way); timed from before the QP is
 *        created to the MPA Reply, teardown outside the time.
 * mem    N idle connections; kernel memory (/proc/meminfo, client and
 *        server in one machine) before and after, per connection.
 *
 * kiwarp connections are MPA revision 2 without CRC (KIWARP_CONN_NO_CRC).
 * -T kiwarp: the kernel connects (kw_connect_addr / kw_listen); kiwarp-sock:
 * the application connects and accepts TCP sockets and converts them
 * (kw_connect / kw_accept with the socket); tcp: plain TCP.
 *
 * The client tells the server the test in the MPA private data (TCP: the
 * first bytes of each stream). The server serves one client run and exits;
 * 60 s without a new connection or progress is an error. Exit: 0 ok, 1
 * error, 2 usage.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kiwarp.h"
#include "perf-util.h"

#define DEFAULT_PORT	18600
#define MAGIC		0x4b575343U	/* "KWSC" */
#define IDLE_S		60.0
#define MAX_CONNS	4096

enum test { T_BW, T_SETUP, T_MEM };
enum transport { X_KIWARP, X_KIWARP_SOCK, X_TCP };

static const char *const test_names[] = { "bw", "setup", "mem" };
static const char *const xport_names[] = { "kiwarp", "kiwarp-sock", "tcp" };

/* What the client asks for: MPA private data, or a TCP stream's start. */
struct hello {
	uint32_t magic, test, conns, size;
	uint64_t msgs;		/* bw: messages per connection */
	uint32_t verify, index;	/* index: this connection's number */
} __attribute__((packed));

/* The server's answer (kiwarp): where this connection's region is. */
struct region {
	uint64_t addr;
	uint32_t stag, len;
} __attribute__((packed));

static int json;
static long copy_max = -1;	/* --copy-max; -1: the kernel's default */
static enum transport xport = X_KIWARP;

static void die(const char *what, int err)
{
	fprintf(stderr, "kiwarp-scale: %s: %s\n", what,
		err ? strerror(err < 0 ? -err : err) : "error");
	if (json)
		printf("{\"tool\":\"kiwarp-scale\",\"status\":\"error\","
		       "\"message\":\"%s\"}\n", what);
	exit(1);
}

static double now_s(void)
{
	return now_us() / 1e6;
}

static uint8_t pat(uint64_t i)
{
	return (uint8_t)(i * 13 + (i >> 11) + 5);
}

static void raise_nofile(void)
{
	struct rlimit r;

	if (!getrlimit(RLIMIT_NOFILE, &r) && r.rlim_cur < r.rlim_max) {
		r.rlim_cur = r.rlim_max;
		setrlimit(RLIMIT_NOFILE, &r);
	}
}

static void sa_any(struct sockaddr_in *sin, int port)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons((uint16_t)port);
	sin->sin_addr.s_addr = htonl(INADDR_ANY);
}

static void sa_host(struct sockaddr_in *sin, const char *host, int port)
{
	sa_any(sin, port);
	if (inet_pton(AF_INET, host, &sin->sin_addr) != 1)
		die("address (IPv4 expected)", EINVAL);
}

static void xwrite(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("write", errno);
		p += n;
		len -= (size_t)n;
	}
}

static int xread_timeout(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (poll(&pfd, 1, (int)(IDLE_S * 1000)) <= 0)
			return -ETIMEDOUT;
		n = read(fd, p, len);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			return n ? -errno : -ECONNRESET;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int tcp_connect(const struct sockaddr_in *sin)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (fd < 0)
		die("socket", errno);
	if (connect(fd, (const struct sockaddr *)sin, sizeof(*sin)))
		die("connect", errno);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static int tcp_listen(int port)
{
	struct sockaddr_in sin;
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (fd < 0)
		die("socket", errno);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	sa_any(&sin, port);
	if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) || listen(fd, 1024))
		die("bind/listen", errno);
	return fd;
}

static int tcp_accept(int ls)
{
	struct pollfd pfd = { .fd = ls, .events = POLLIN };
	int fd, one = 1;

	if (poll(&pfd, 1, (int)(IDLE_S * 1000)) <= 0)
		die("no connection within 60 s", ETIMEDOUT);
	fd = accept(ls, NULL, NULL);
	if (fd < 0)
		die("accept", errno);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* ---------------------------------------------------------------- kiwarp */

struct kctx {
	struct kw_device *dev;
	struct kw_pd *pd;
	struct kw_cq *cq;
	struct kw_mr *mr;
	uint8_t *buf;
	size_t len;
};

/* PD, CQ and a registered buffer on dev (opened here if NULL) */
static void kctx_init(struct kctx *k, struct kw_device *dev, size_t len,
		      unsigned cqe)
{
	int ret = 0;

	k->dev = dev;
	if (!dev)
		ret = kw_open(&k->dev);
	if (!ret)
		ret = kw_alloc_pd(k->dev, &k->pd);
	if (!ret)
		ret = kw_create_cq(k->dev, cqe, &k->cq);
	if (ret)
		die("open device, PD, CQ", ret);
	k->len = len;
	k->buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (k->buf == MAP_FAILED)
		die("mmap", errno);
	ret = kw_reg_mr(k->pd, k->buf, len, KIWARP_ACCESS_ALL, &k->mr);
	if (ret)
		die("reg MR", ret);
}

static struct kw_qp *kqp(struct kctx *k, unsigned sq)
{
	struct kw_qp_init_attr a = { .send_cq = k->cq, .recv_cq = k->cq,
				     .sq_entries = sq, .rq_entries = 1,
				     .max_sge = 1 };
	struct kw_qp *qp;
	int ret;

	if (copy_max >= 0) {
		a.flags = KW_QP_INIT_COPY_MAX;
		a.copy_max = (uint32_t)copy_max;
	}
	ret = kw_create_qp(k->pd, &a, &qp);
	if (ret)
		die("create QP", ret);
	return qp;
}

/*
 * MPA revision 2 without CRC on both ends, as kiwarp-perf runs without -C
 * and siw by default: the comparison is with plain TCP. CRC is kiwarp's
 * default, so it is declined explicitly.
 */
static const struct kw_conn_param cparam = { .mpa_rev = 2, .ird = 16,
					     .ord = 16, .timeout_ms = 30000,
					     .flags = KIWARP_CONN_NO_CRC };

/* Client: connect qp, saying h; the server's region comes back. */
static void kconnect(struct kw_qp *qp, const struct sockaddr_in *sin,
		     const struct hello *h, struct region *r)
{
	static struct kw_conn_result res;
	int ret;

	if (xport == X_KIWARP) {
		ret = kw_connect_addr(qp, (const struct sockaddr *)sin,
				      sizeof(*sin), &cparam, h, sizeof(*h),
				      &res);
	} else {
		int fd = tcp_connect(sin);

		ret = kw_connect(qp, fd, &cparam, h, sizeof(*h), &res);
		close(fd);	/* kiwarp holds the socket now */
	}
	if (ret)
		die("connect", ret);
	if (res.pdata_len != sizeof(*r))
		die("server's private data", EPROTO);
	memcpy(r, res.pdata, sizeof(*r));
}

/* Server: accept one connection on qp; returns what the client said. */
static void kaccept(struct kw_qp *qp, struct kw_listener *l, int ls,
		    struct hello *h, const struct region *r)
{
	static struct kw_conn_request req;
	static struct kw_conn_result res;
	int fd = -1, ret;

	if (xport == X_KIWARP_SOCK)
		fd = tcp_accept(ls);
	ret = kw_accept(qp, fd, l, (int)(IDLE_S * 1000), &req);
	if (fd >= 0)
		close(fd);
	if (ret)
		die("accept", ret);
	if (req.pdata_len != sizeof(*h))
		die("client's private data", EPROTO);
	memcpy(h, req.pdata, sizeof(*h));
	if (h->magic != MAGIC || h->test > T_MEM || !h->conns ||
	    h->conns > MAX_CONNS)
		die("bad hello", EPROTO);
	ret = kw_accept_reply(qp, KIWARP_REPLY_ACCEPT, &cparam, r, sizeof(*r),
			      &res);
	if (ret)
		die("accept reply", ret);
}

static unsigned qp_state(struct kw_qp *qp)
{
	struct kiwarp_query_qp q;

	return kw_query_qp(qp, &q) ? KIWARP_QPS_ERROR : q.state;
}

static int kserver(int port)
{
	static struct kctx k0, k;
	struct kw_listener *l = NULL;
	struct kw_device *dev;
	struct kw_qp **qps, *qp;
	struct hello h;
	struct region r = { 0 };
	int ls = -1, ret;
	unsigned i, n;

	ret = kw_open(&dev);
	if (ret)
		die("open device", ret);
	if (xport == X_KIWARP) {
		struct sockaddr_in sin;

		sa_any(&sin, port);
		ret = kw_listen(dev, (struct sockaddr *)&sin, sizeof(sin), 1024,
				&l);
		if (ret)
			die("listen", ret);
	} else {
		ls = tcp_listen(port);
	}
	/* a first, stub connection says how many follow, of what size */
	kctx_init(&k0, dev, 4096, 16);
	qp = kqp(&k0, 4);
	kaccept(qp, l, ls, &h, &r);
	kw_destroy_qp(qp);
	n = h.conns;
	/* then every connection gets its own region of one MR */
	kctx_init(&k, dev, (size_t)n * h.size, n + 16);
	qps = calloc(n, sizeof(*qps));
	if (!qps)
		die("calloc", ENOMEM);
	for (i = 0; i < n; i++) {
		r.addr = (uintptr_t)k.buf + (uint64_t)i * h.size;
		r.stag = k.mr->stag;
		r.len = h.size;
		qps[i] = kqp(&k, 4);
		kaccept(qps[i], l, ls, &h, &r);
		if (h.index != i)
			die("connection out of order", EPROTO);
		if (h.test == T_SETUP) {	/* nothing to keep */
			kw_destroy_qp(qps[i]);
			qps[i] = NULL;
		}
	}
	/* wait for the client to go (its connections close) */
	if (h.test != T_SETUP) {
		double end = now_s() + 600;

		for (i = 0; i < n && now_s() < end; ) {
			if (qp_state(qps[i]) == KIWARP_QPS_ERROR)
				i++;
			else
				usleep(20000);
		}
		if (i < n)
			die("client connections still up after 600 s", ETIMEDOUT);
		for (i = 0; i < n; i++)
			kw_destroy_qp(qps[i]);
	}
	if (l)
		kw_destroy_listener(l);
	if (ls >= 0)
		close(ls);
	return 0;
}

static void read_meminfo(long *v)
{
	static const char *const keys[] = { "MemFree:", "Slab:", "SUnreclaim:",
		"VmallocUsed:", "PageTables:", "KernelStack:", "Percpu:" };
	char line[256];
	FILE *f;

	if ((f = fopen("/proc/sys/vm/stat_refresh", "w"))) {
		fputs("1\n", f);
		fclose(f);
	}
	f = fopen("/proc/meminfo", "r");
	if (!f)
		die("/proc/meminfo", errno);
	memset(v, 0, 7 * sizeof(*v));
	while (fgets(line, sizeof(line), f))
		for (unsigned i = 0; i < 7; i++)
			if (!strncmp(line, keys[i], strlen(keys[i])))
				v[i] = strtol(line + strlen(keys[i]), NULL, 10);
	fclose(f);
}

static void print_mem(unsigned n, const long *a, const long *b)
{
	double d[7];

	for (unsigned i = 0; i < 7; i++)
		d[i] = (double)(b[i] - a[i]) / n;
	d[0] = -d[0];	/* MemFree falls */
	if (json)
		printf("{\"tool\":\"kiwarp-scale\",\"test\":\"mem\",\"transport\":\"%s\","
		       "\"qps\":%u,\"kernel_kB_per_qp\":%.2f,\"slab_kB_per_qp\":%.2f,"
		       "\"unreclaimable_slab_kB_per_qp\":%.2f,\"vmalloc_kB_per_qp\":%.2f,"
		       "\"pagetables_kB_per_qp\":%.2f,\"kernelstack_kB_per_qp\":%.2f,"
		       "\"percpu_kB_per_qp\":%.2f,\"memfree_drop_kB_per_qp\":%.2f,"
		       "\"both_ends\":true,\"status\":\"ok\"}\n",
		       xport_names[xport], n, d[1] + d[3] + d[4] + d[5] + d[6],
		       d[1], d[2], d[3], d[4], d[5], d[6], d[0]);
	else
		printf(" %s mem: %u idle connections: %.2f kB kernel (slab %.2f, "
		       "vmalloc %.2f) per connection, both ends\n",
		       xport_names[xport], n, d[1] + d[3] + d[4] + d[5] + d[6],
		       d[1], d[3]);
}

static void print_rate(const char *test, unsigned n, double secs)
{
	if (json)
		printf("{\"tool\":\"kiwarp-scale\",\"test\":\"%s\",\"transport\":\"%s\","
		       "\"conns\":%u,\"usec\":%.1f,\"conns_per_s\":%.2f,"
		       "\"includes_teardown\":false,\"status\":\"ok\"}\n",
		       test, xport_names[xport], n, secs * 1e6, n / secs);
	else
		printf(" %s setup: %u connections, %.1f per second\n",
		       xport_names[xport], n, n / secs);
}

static void print_bw(unsigned n, uint32_t size, uint64_t bytes, double secs,
		     const char *verify)
{
	if (json)
		printf("{\"tool\":\"kiwarp-scale\",\"test\":\"bw\",\"transport\":\"%s\","
		       "\"qps\":%u,\"size\":%u,\"bytes\":%llu,\"usec\":%.1f,"
		       "\"bw_MBps\":%.2f,\"verify\":\"%s\",\"status\":\"ok\"}\n",
		       xport_names[xport], n, size, (unsigned long long)bytes,
		       secs * 1e6, bytes / secs / 1e6, verify);
	else
		printf(" %s bw: %u connections, %u-byte messages: %.2f MB/s\n",
		       xport_names[xport], n, size, bytes / secs / 1e6);
}

static int kclient(const char *host, int port, enum test t, unsigned n,
		   uint32_t size, uint64_t bytes, int verify)
{
	unsigned win = n >= 256 ? 1 : (256 / n > 16 ? 16 : 256 / n);
	struct hello h = { MAGIC, t, n, size, 0, verify, 0 };
	struct kw_qp **qps = calloc(n, sizeof(*qps));
	struct region *rg = calloc(n, sizeof(*rg));
	struct sockaddr_in sin;
	struct kctx k = { 0 };
	struct kw_qp *stub;
	long m0[7], m1[7];
	double t0, busy = 0;
	unsigned i;

	if (!qps || !rg)
		die("calloc", ENOMEM);
	sa_host(&sin, host, port);
	if (t != T_BW)
		size = 4096;
	h.size = size;
	h.msgs = t == T_BW ? (bytes / size / n ? bytes / size / n : 1) : 0;
	kctx_init(&k, NULL, size, n * (win + 1) + 16);
	/* the stub connection tells the server the sizes (see kserver) */
	stub = kqp(&k, 4);
	kconnect(stub, &sin, &h, &rg[0]);
	kw_destroy_qp(stub);
	if (t == T_MEM) {
		usleep(500000);	/* the server registers its MR meanwhile */
		read_meminfo(m0);
	}
	for (i = 0; i < n; i++) {
		t0 = now_s();
		qps[i] = kqp(&k, t == T_BW ? 32 : 4);
		h.index = i;
		kconnect(qps[i], &sin, &h, &rg[i]);
		busy += now_s() - t0;
		if (t == T_SETUP) {
			kw_destroy_qp(qps[i]);
			qps[i] = NULL;
		}
	}
	if (t == T_SETUP) {
		print_rate("setup", n, busy);
		return 0;
	}
	if (t == T_MEM) {
		sleep(1);
		read_meminfo(m1);
		print_mem(n, m0, m1);
		goto out;
	}

	/* bw: h.msgs Writes per QP, win in flight on each */
	{
		uint64_t *left = calloc(n, sizeof(*left));
		unsigned *inflight = calloc(n, sizeof(*inflight));
		uint64_t done = 0, total = (uint64_t)n * h.msgs;
		struct kiwarp_sge sge = { (uintptr_t)k.buf, size, k.mr->stag };
		const char *vres = "off";
		double last = now_s();

		if (!left || !inflight)
			die("calloc", ENOMEM);
		for (i = 0; i < size; i++)
			k.buf[i] = pat(i);
		for (i = 0; i < n; i++)
			left[i] = h.msgs;
		t0 = now_s();
		while (done < total) {
			struct kiwarp_cqe e[64];
			int got;

			for (i = 0; i < n; i++) {
				while (left[i] && inflight[i] < win) {
					struct kw_send_wr wr = {
						.wr_id = i,
						.opcode = KIWARP_WR_RDMA_WRITE,
						.flags = KW_SEND_SIGNALED,
						.num_sge = 1, .sg_list = &sge,
						.remote_addr = rg[i].addr,
						.rkey = rg[i].stag,
					};
					int ret = kw_post_send(qps[i], &wr, 1);

					if (ret != 1)
						die("post Write", ret < 0 ? ret : EIO);
					left[i]--;
					inflight[i]++;
				}
			}
			got = kw_poll_cq(k.cq, 64, e);
			if (got < 0)
				die("poll CQ", got);
			for (int j = 0; j < got; j++) {
				if (e[j].status != KIWARP_WC_SUCCESS)
					die(kw_wc_status_str(e[j].status), EIO);
				inflight[e[j].wr_id]--;
				done++;
			}
			if (got) {
				last = now_s();
			} else if (now_s() - last > IDLE_S) {
				die("no completion for 60 s", ETIMEDOUT);
			}
		}
		busy = now_s() - t0;
		if (verify) {
			/* Read each region back over its own QP */
			uint8_t *chk;
			struct kw_mr *cmr;
			int ret;

			chk = mmap(NULL, size, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (chk == MAP_FAILED)
				die("mmap", errno);
			ret = kw_reg_mr(k.pd, chk, size,
					KIWARP_ACCESS_LOCAL_WRITE, &cmr);
			if (ret)
				die("reg MR", ret);
			vres = "ok";
			for (i = 0; i < n; i++) {
				struct kiwarp_sge rs = { (uintptr_t)chk, size,
							 cmr->stag };
				struct kw_send_wr wr = {
					.wr_id = i, .opcode = KIWARP_WR_RDMA_READ,
					.flags = KW_SEND_SIGNALED, .num_sge = 1,
					.sg_list = &rs, .remote_addr = rg[i].addr,
					.rkey = rg[i].stag,
				};
				struct kiwarp_cqe e;
				double end = now_s() + IDLE_S;
				int got = 0;

				memset(chk, 0, size);
				if (kw_post_send(qps[i], &wr, 1) != 1)
					die("post Read", EIO);
				while (!got && now_s() < end) {
					got = kw_poll_cq(k.cq, 1, &e);
					if (got < 0)
						die("poll CQ", got);
				}
				if (!got || e.status != KIWARP_WC_SUCCESS)
					die("verify Read", EIO);
				if (memcmp(chk, k.buf, size)) {
					vres = "bad";
					break;
				}
			}
			kw_dereg_mr(cmr);
			munmap(chk, size);
			if (strcmp(vres, "ok"))
				die("verification failed", EIO);
		}
		print_bw(n, size, total * size, busy, vres);
		free(left);
		free(inflight);
	}
out:
	for (i = 0; i < n; i++)
		if (qps[i])
			kw_destroy_qp(qps[i]);
	free(qps);
	free(rg);
	return 0;
}

/* ------------------------------------------------------------------ TCP */

static int tserver(int port)
{
	int ls = tcp_listen(port), *fds = NULL, ep;
	struct hello h = { 0 };
	uint64_t *left = NULL;
	uint8_t **last = NULL;
	unsigned i, n = 1, open_;
	size_t bufsz = 1 << 20;
	uint8_t *buf = malloc(bufsz);

	if (!buf)
		die("malloc", ENOMEM);
	for (i = 0; i < n; i++) {
		int fd = tcp_accept(ls), ret;

		ret = xread_timeout(fd, &h, sizeof(h));
		if (ret || h.magic != MAGIC || h.test > T_MEM || !h.conns ||
		    h.conns > MAX_CONNS || h.index != i)
			die("bad hello", ret ? ret : EPROTO);
		if (!i) {
			n = h.conns;
			fds = calloc(n, sizeof(*fds));
			left = calloc(n, sizeof(*left));
			last = calloc(n, sizeof(*last));
			if (!fds || !left || !last)
				die("calloc", ENOMEM);
		}
		fds[i] = fd;
		left[i] = h.msgs * h.size;
		if (h.test == T_SETUP) {
			xwrite(fd, "", 1);
			close(fd);
			fds[i] = -1;
		}
	}
	close(ls);
	if (h.test == T_SETUP)
		return 0;
	ep = epoll_create1(0);
	if (ep < 0)
		die("epoll", errno);
	for (i = 0; i < n; i++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.u32 = i };

		if (h.test == T_BW && h.verify) {
			last[i] = malloc(h.size);
			if (!last[i])
				die("malloc", ENOMEM);
		}
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev))
			die("epoll_ctl", errno);
	}
	/* bw: read everything, answer one byte; mem: wait for the close */
	for (open_ = n; open_; ) {
		struct epoll_event ev[64];
		int got = epoll_wait(ep, ev, 64, (int)(IDLE_S * 1000));

		if (got <= 0)
			die("no progress for 60 s", got ? errno : ETIMEDOUT);
		for (int j = 0; j < got; j++) {
			unsigned c = ev[j].data.u32;
			uint64_t pos = h.msgs * h.size - left[c];
			size_t want = bufsz;
			ssize_t r;

			if (h.test == T_BW && left[c] < want)
				want = left[c] ? left[c] : 1;
			if (last[c]) {	/* into the message's place */
				size_t off = pos % h.size;

				want = h.size - off < want ? h.size - off : want;
				r = read(fds[c], last[c] + off, want);
			} else {
				r = read(fds[c], buf, want);
			}
			if (r < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (r <= 0 || h.test != T_BW) {
				/* the client went away (mem), or EOF early */
				if (h.test == T_BW && left[c])
					die("stream ended early", ECONNRESET);
				epoll_ctl(ep, EPOLL_CTL_DEL, fds[c], NULL);
				close(fds[c]);
				open_--;
				continue;
			}
			left[c] -= (uint64_t)r;
			if (!left[c]) {
				char ok = 1;

				for (uint32_t b = 0; last[c] && b < h.size; b++)
					if (last[c][b] != pat(b))
						ok = 2;
				xwrite(fds[c], &ok, 1);
				epoll_ctl(ep, EPOLL_CTL_DEL, fds[c], NULL);
				close(fds[c]);
				open_--;
			}
		}
	}
	return 0;
}

static int tclient(const char *host, int port, enum test t, unsigned n,
		   uint32_t size, uint64_t bytes, int verify)
{
	struct hello h = { MAGIC, t, n, size, 0, verify, 0 };
	int *fds = calloc(n, sizeof(*fds)), ep;
	uint64_t *left = calloc(n, sizeof(*left));
	uint8_t *buf = malloc(size);
	struct sockaddr_in sin;
	long m0[7], m1[7];
	double t0, busy = 0;
	unsigned i, open_;
	int bad = 0;

	if (!fds || !left || !buf)
		die("calloc", ENOMEM);
	for (i = 0; i < size; i++)
		buf[i] = pat(i);
	sa_host(&sin, host, port);
	h.msgs = t == T_BW ? (bytes / size / n ? bytes / size / n : 1) : 0;
	if (t == T_MEM)
		read_meminfo(m0);
	for (i = 0; i < n; i++) {
		char c;

		t0 = now_s();
		fds[i] = tcp_connect(&sin);
		h.index = i;
		xwrite(fds[i], &h, sizeof(h));
		if (t == T_SETUP) {
			if (xread_timeout(fds[i], &c, 1))
				die("setup answer", EPROTO);
			busy += now_s() - t0;
			close(fds[i]);
		}
	}
	if (t == T_SETUP) {
		print_rate("setup", n, busy);
		return 0;
	}
	if (t == T_MEM) {
		sleep(1);
		read_meminfo(m1);
		print_mem(n, m0, m1);
		for (i = 0; i < n; i++)
			close(fds[i]);
		return 0;
	}
	ep = epoll_create1(0);
	if (ep < 0)
		die("epoll", errno);
	for (i = 0; i < n; i++) {
		struct epoll_event ev = { .events = EPOLLOUT, .data.u32 = i };

		fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
		left[i] = h.msgs * size;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev))
			die("epoll_ctl", errno);
	}
	t0 = now_s();
	for (open_ = n; open_; ) {
		struct epoll_event ev[64];
		int got = epoll_wait(ep, ev, 64, (int)(IDLE_S * 1000));

		if (got <= 0)
			die("no progress for 60 s", got ? errno : ETIMEDOUT);
		for (int j = 0; j < got; j++) {
			unsigned c = ev[j].data.u32;
			uint64_t pos = h.msgs * size - left[c];
			size_t off = pos % size, want = size - off;
			ssize_t r;

			if (left[c]) {
				r = write(fds[c], buf + off, want);
				if (r < 0 && (errno == EAGAIN || errno == EINTR))
					continue;
				if (r <= 0)
					die("write", errno);
				left[c] -= (uint64_t)r;
				if (!left[c]) {
					struct epoll_event in = {
						.events = EPOLLIN, .data.u32 = c };

					epoll_ctl(ep, EPOLL_CTL_MOD, fds[c], &in);
				}
			} else {
				char a = 0;

				r = read(fds[c], &a, 1);
				if (r < 0 && (errno == EAGAIN || errno == EINTR))
					continue;
				if (r != 1)
					die("answer", r < 0 ? errno : ECONNRESET);
				if (a != 1)
					bad = 1;
				epoll_ctl(ep, EPOLL_CTL_DEL, fds[c], NULL);
				close(fds[c]);
				open_--;
			}
		}
	}
	busy = now_s() - t0;
	if (verify && bad)
		die("verification failed", EIO);
	print_bw(n, size, (uint64_t)n * h.msgs * size, busy,
		 verify ? "ok" : "off");
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
"usage: kiwarp-scale -s [-p PORT] [-T kiwarp|kiwarp-sock|tcp] [-q]\n"
"       kiwarp-scale -c HOST [-p PORT] -t bw|setup|mem -N COUNT\n"
"                    [-T kiwarp|kiwarp-sock|tcp] [--bytes B] [--size S]\n"
"                    [--verify] [--json] [--copy-max N]\n"
"  --copy-max N  this side's QPs copy Writes of up to N bytes (default:\n"
"                the kernel's, which also copies while a local peer's\n"
"                stack copies anyway)\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "json", no_argument, NULL, 'J' },
		{ "verify", no_argument, NULL, 'V' },
		{ "bytes", required_argument, NULL, 'B' },
		{ "size", required_argument, NULL, 'S' },
		{ "copy-max", required_argument, NULL, 'X' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *host = NULL;
	int srv = 0, port = DEFAULT_PORT, verify = 0, opt, t = -1;
	uint64_t bytes = 128ULL << 20;
	uint32_t size = 65536;
	long n = 0;

	while ((opt = getopt_long(argc, argv, "sc:p:t:T:N:qh", lopts, NULL)) != -1) {
		switch (opt) {
		case 's': srv = 1; break;
		case 'c': host = optarg; break;
		case 'p':
			port = atoi(optarg);
			if (port <= 0 || port > 65535)
				usage();
			break;
		case 't':
			for (t = 0; t < 3 && strcmp(optarg, test_names[t]); t++)
				;
			if (t == 3)
				usage();
			break;
		case 'T':
			if (!strcmp(optarg, "kiwarp")) xport = X_KIWARP;
			else if (!strcmp(optarg, "kiwarp-sock")) xport = X_KIWARP_SOCK;
			else if (!strcmp(optarg, "tcp")) xport = X_TCP;
			else usage();
			break;
		case 'N':
			n = strtol(optarg, NULL, 10);
			if (n <= 0 || n > MAX_CONNS)
				usage();
			break;
		case 'B':
			bytes = strtoull(optarg, NULL, 10);
			if (!bytes)
				usage();
			break;
		case 'S':
			size = parse_size(optarg, 1U << 24);
			if (!size)
				usage();
			break;
		case 'X':
			copy_max = (long)parse_size(optarg, UINT32_MAX);
			if (!copy_max && strcmp(optarg, "0"))
				usage();
			break;
		case 'V': verify = 1; break;
		case 'J': json = 1; break;
		case 'q': break;
		default: usage();
		}
	}
	if (optind != argc || srv == !!host || (!srv && (t < 0 || !n)))
		usage();
	raise_nofile();
	if (srv)
		return xport == X_TCP ? tserver(port) : kserver(port);
	if (xport == X_TCP)
		return tclient(host, port, t, (unsigned)n, size, bytes, verify);
	return kclient(host, port, t, (unsigned)n, size, bytes, verify);
}
