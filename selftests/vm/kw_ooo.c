// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * kw_ooo: RDMA Writes reordered on purpose, over a veth pair between two
 * network namespaces whose sending end swaps packets (netem "delay 100ms
 * reorder 100% gap 2": every second packet goes at once, the others 100 ms
 * later). With markers on and the patched kernel's hook (patches/), the
 * receiver places the Writes whose segments come first out of order
 * (architecture.md section 3, "Out-of-order placement").
 *
 * The Writes come in pairs to the same 1 KiB of the target: the second of
 * each pair must be what stays, whichever of the two arrived first - also
 * when the second was placed early and the first then placed in order
 * over it (the first must not have the last word). Halfway through, a
 * small Write shifts which of a pair is delayed, so both orders happen.
 * A final Send says "done"; the receiver then checks every byte and that
 * QUERY_QP's rx_bytes + ooo_bytes is exactly what was sent. With the hook
 * (tcp_hooks=1) some bytes must have been placed out of order, or the test
 * proved nothing. On a stock kernel the same traffic is received in order
 * and must give the same bytes.
 *
 * Root only (namespaces, netem); run by selftests/vm/run.sh.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "kiwarp.h"
#include "kw_vmtest.h"
#include "../unit/harness.h"

#define NS_A	"kwooo-a"
#define NS_B	"kwooo-b"
#define ADDR_B	"10.79.0.2"
#define CHUNK	1024		/* one FPDU, one segment at MTU 1500 */
#define PAIRS	24
#define BUF	(PAIRS * CHUNK)

struct pdata {
	uint64_t addr;
	uint32_t stag;
};

struct verdict {
	long long ofo;		/* segments TCP queued out of order (B) */
	int ok;			/* 1: every byte right */
	int step;		/* where the server stopped, if not */
	uint64_t rx, ooo, want;
	uint32_t qflags;
	char why[160];
};

static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	rc = system(cmd);
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void link_down(void)
{
	sh("ip netns del " NS_A " 2>/dev/null; ip netns del " NS_B " 2>/dev/null");
}

static int link_up(void)
{
	link_down();
	sh("modprobe -q veth 2>/dev/null; modprobe -q sch_netem 2>/dev/null");
	return sh("ip netns add " NS_A " && ip netns add " NS_B " && "
		  "ip link add kwooo0 netns " NS_A " type veth peer name kwooo1 netns " NS_B " && "
		  "ip -n " NS_A " link set lo up && ip -n " NS_B " link set lo up && "
		  "ip -n " NS_A " addr add 10.79.0.1/24 dev kwooo0 && "
		  "ip -n " NS_B " addr add " ADDR_B "/24 dev kwooo1 && "
		  "ip -n " NS_A " link set kwooo0 mtu 1500 up && "
		  "ip -n " NS_B " link set kwooo1 mtu 1500 up && "
		  "tc -n " NS_A " qdisc add dev kwooo0 root netem delay 100ms reorder 100%% gap 2");
}

/* Byte j of Write number w. */
static uint8_t pat(unsigned w, unsigned j)
{
	return (uint8_t)(w * 37 + j * 13 + (j >> 8) + 1);
}

/* TcpExt's TCPOFOQueue in the caller's network namespace. */
static long long ofo_queued(void)
{
	char hdr[4096], val[4096], *h, *v, *hs, *vs;
	long long n = -1;
	FILE *f = fopen("/proc/self/net/netstat", "r");

	if (!f)
		return -1;
	while (fgets(hdr, sizeof(hdr), f) && fgets(val, sizeof(val), f)) {
		if (strncmp(hdr, "TcpExt:", 7))
			continue;
		h = strtok_r(hdr, " \n", &hs);
		v = strtok_r(val, " \n", &vs);
		while (h && v) {
			if (!strcmp(h, "TCPOFOQueue"))
				n = atoll(v);
			h = strtok_r(NULL, " \n", &hs);
			v = strtok_r(NULL, " \n", &vs);
		}
	}
	fclose(f);
	return n;
}

struct side {
	struct kw_device *dev;
	struct kw_pd *pd;
	struct kw_cq *cq;
	struct kw_qp *qp;
	struct kw_mr *mr;
	uint8_t *buf;
};

static int side_open(struct side *s, size_t len)
{
	struct kw_qp_init_attr qa = { .sq_entries = 64, .rq_entries = 8,
				      .max_sge = 1 };
	int ret;

	s->buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s->buf == MAP_FAILED)
		return -ENOMEM;
	memset(s->buf, 0, len);
	if ((ret = kw_open(&s->dev)) || (ret = kw_alloc_pd(s->dev, &s->pd)) ||
	    (ret = kw_create_cq(s->dev, 128, &s->cq)))
		return ret;
	qa.send_cq = qa.recv_cq = s->cq;
	if ((ret = kw_create_qp(s->pd, &qa, &s->qp)))
		return ret;
	return kw_reg_mr(s->pd, s->buf, len, KIWARP_ACCESS_ALL, &s->mr);
}

/* One CQE within ms, successful. */
static int wait_cqe(struct side *s, int ms, struct kiwarp_cqe *e)
{
	double end = now() + ms / 1000.0;

	while (now() < end) {
		int n = kw_poll_cq(s->cq, 1, e);

		if (n < 0)
			return n;
		if (n == 1)
			return e->status == KIWARP_WC_SUCCESS ? 0 : -EIO;
		kw_wait_cq(s->cq, 20);
	}
	return -ETIMEDOUT;
}

/* Write numbers in sending order: 2k and 2k + 1 go to chunk k; a small
 * Write (number 1000) in the middle shifts the parity of the packets. */
static uint64_t writes_total(void)
{
	return 2ULL * PAIRS * CHUNK + 200;
}

static void server(int wfd, int crc)
{
	struct kw_conn_param cp = { .mpa_rev = 2, .ird = 8, .ord = 8,
				    .timeout_ms = 20000, .flags = KIWARP_CONN_MARKERS |
					     (crc ? KIWARP_CONN_CRC : KIWARP_CONN_NO_CRC) };
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(18600) };
	static struct kw_conn_request req;
	struct verdict v = { .want = writes_total() + 64 };
	struct kw_listener *l = NULL;
	struct kiwarp_query_qp q = { 0 };
	struct kiwarp_cqe e;
	struct side s = { 0 };
	struct pdata pd;
	uint8_t *done;
	unsigned k, j;
	int ret;

	v.step = 1;
	if (kw_enter_netns(NS_B) || side_open(&s, BUF + 4096))
		goto out;
	v.step = 2;
	inet_pton(AF_INET, ADDR_B, &sin.sin_addr);
	if (kw_listen(s.dev, (void *)&sin, sizeof(sin), 4, &l))
		goto out;
	/* the client may connect now */
	if (write(wfd, &v, sizeof(v)) != sizeof(v))
		goto out;
	/* the receive for "done", before the connection */
	done = s.buf + BUF;
	{
		struct kiwarp_sge sge = { .addr = (uintptr_t)done, .length = 64,
					  .lkey = s.mr->stag };
		struct kw_recv_wr rwr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 };

		if ((ret = kw_post_recv(s.qp, &rwr, 1)) != 1) {
			snprintf(v.why, sizeof(v.why), "post receive: %d", ret);
			goto out;
		}
	}
	v.step = 3;
	if ((ret = kw_accept(s.qp, -1, l, 30000, &req))) {
		snprintf(v.why, sizeof(v.why), "accept: %d", ret);
		goto out;
	}
	pd = (struct pdata){ (uintptr_t)s.buf, s.mr->stag };
	v.step = 4;
	if (kw_accept_reply(s.qp, KIWARP_REPLY_ACCEPT, &cp, &pd, sizeof(pd), NULL))
		goto out;
	v.step = 5;
	if (wait_cqe(&s, 60000, &e))
		goto out;
	v.step = 6;
	v.ofo = ofo_queued();
	for (k = 0; k < PAIRS; k++) {
		const uint8_t *p = s.buf + k * CHUNK;

		for (j = 0; j < CHUNK; j++) {
			if (p[j] != pat(2 * k + 1, j)) {
				snprintf(v.why, sizeof(v.why),
					 "chunk %u byte %u: %#x, want %#x (Write %u's), first Write's %#x",
					 k, j, p[j], pat(2 * k + 1, j), 2 * k + 1,
					 pat(2 * k, j));
				goto query;
			}
		}
	}
	v.ok = 1;
query:
	if (!kw_query_qp(s.qp, &q)) {
		v.rx = q.rx_bytes;
		v.ooo = q.ooo_bytes;
		v.qflags = q.flags;
	}
out:
	if (!v.ok)
		note("server: stopped at step %d: %s (errno %d)", v.step, v.why,
		     errno);
	if (write(wfd, &v, sizeof(v)) != sizeof(v))
		_exit(3);
	_exit(0);
}

static void client(int crc)
{
	struct kw_conn_param cp = { .mpa_rev = 2, .ird = 8, .ord = 8,
				    .timeout_ms = 20000, .flags = KIWARP_CONN_MARKERS |
					     (crc ? KIWARP_CONN_CRC : KIWARP_CONN_NO_CRC) };
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(18600) };
	static struct kw_conn_result res;
	struct kiwarp_cqe e;
	struct side s = { 0 };
	struct pdata pd;
	unsigned i, j;
	int ret;

	if (kw_enter_netns(NS_A) || side_open(&s, 2 * PAIRS * CHUNK + 4096))
		_exit(10);
	inet_pton(AF_INET, ADDR_B, &sin.sin_addr);
	ret = kw_connect_addr(s.qp, (void *)&sin, sizeof(sin), &cp, NULL, 0, &res);
	if (ret || res.pdata_len != sizeof(pd)) {
		note("client: connect %d, private data %u bytes", ret,
		     res.pdata_len);
		_exit(11);
	}
	memcpy(&pd, res.pdata, sizeof(pd));
	for (i = 0; i < 2 * PAIRS; i++) {
		uint8_t *src = s.buf + i * CHUNK;
		struct kiwarp_sge sge = { .addr = (uintptr_t)src, .length = CHUNK,
					  .lkey = s.mr->stag };
		struct kw_send_wr wr = {
			.wr_id = i, .opcode = KIWARP_WR_RDMA_WRITE,
			.flags = KW_SEND_SIGNALED, .num_sge = 1, .sg_list = &sge,
			.remote_addr = pd.addr + (i / 2) * CHUNK, .rkey = pd.stag,
		};

		for (j = 0; j < CHUNK; j++)
			src[j] = pat(i, j);
		if (i == PAIRS) {
			/* one more packet: the other member of each pair is
			 * delayed from here on (to the spare area) */
			struct kiwarp_sge sm = { .addr = (uintptr_t)s.buf, .length = 200,
						 .lkey = s.mr->stag };
			struct kw_send_wr w2 = {
				.wr_id = 1000, .opcode = KIWARP_WR_RDMA_WRITE,
				.flags = KW_SEND_SIGNALED, .num_sge = 1, .sg_list = &sm,
				.remote_addr = pd.addr + BUF + 1024, .rkey = pd.stag,
			};

			if (kw_post_send(s.qp, &w2, 1) != 1 ||
			    wait_cqe(&s, 30000, &e))
				_exit(12);
			usleep(3000);
		}
		if (kw_post_send(s.qp, &wr, 1) != 1 || wait_cqe(&s, 30000, &e))
			_exit(13);
		usleep(3000);	/* a segment of its own */
	}
	{
		struct kiwarp_sge sge = { .addr = (uintptr_t)s.buf, .length = 64,
					  .lkey = s.mr->stag };
		struct kw_send_wr wr = { .wr_id = 2000, .opcode = KIWARP_WR_SEND,
					 .flags = KW_SEND_SIGNALED, .num_sge = 1,
					 .sg_list = &sge };

		if (kw_post_send(s.qp, &wr, 1) != 1 || wait_cqe(&s, 30000, &e))
			_exit(14);
	}
	sleep(2);	/* the server checks before we go */
	_exit(0);
}

static void run(int *kwt_fail, int crc)
{
	struct verdict v = { 0 };
	int p[2], st;
	pid_t ps, pc;

	ASSERT_EQ(link_up(), 0);
	ASSERT_EQ(pipe(p), 0);
	ps = fork();
	if (!ps) {
		close(p[0]);
		server(p[1], crc);
	}
	close(p[1]);
	/* the server listens */
	ASSERT_EQ(read(p[0], &v, sizeof(v)), (ssize_t)sizeof(v));
	ASSERT_EQ(v.step, 2);
	pc = fork();
	if (!pc)
		client(crc);
	EXPECT_EQ(read(p[0], &v, sizeof(v)), (ssize_t)sizeof(v));
	waitpid(pc, &st, 0);
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	note("client exit %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	waitpid(ps, &st, 0);
	close(p[0]);
	link_down();
	note("server: step %d, %s; %lld segments queued out of order; placed %llu in order + %llu out of order (want %llu), QP flags %#x, tcp_hooks %d",
	     v.step, v.ok ? "bytes right" : v.why, v.ofo,
	     (unsigned long long)v.rx, (unsigned long long)v.ooo,
	     (unsigned long long)v.want, v.qflags, kw_tcp_hooks_param());
	EXPECT_EQ(v.ok, 1);
	/* netem reordered (a fresh namespace: its counters start at 0) */
	EXPECT_GE(v.ofo, PAIRS / 2);
	EXPECT_EQ(v.rx + v.ooo, v.want);
	EXPECT_EQ(!!(v.qflags & KIWARP_QPQ_OOO), kw_tcp_hooks_param() == 1);
	if (kw_tcp_hooks_param() == 1)
		EXPECT_GT(v.ooo, 0);
	else
		EXPECT_EQ(v.ooo, 0);
}

TEST(reordered_overlapping_writes_crc0) { run(kwt_fail, 0); }
TEST(reordered_overlapping_writes_crc1) { run(kwt_fail, 1); }
