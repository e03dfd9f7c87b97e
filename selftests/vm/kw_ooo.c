// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * kw_ooo: RDMA Writes reordered on purpose, over a veth pair between two
 * network namespaces whose sending end swaps packets (netem "delay 100ms
 * reorder 100% gap 2": every second packet goes at once, the others 100 ms
 * later). With the patched kernel's hook (patches/) and markers on, the
 * receiver places the Writes whose segments come first out of order
 * (architecture.md section 3, "Out-of-order placement"); in aligned mode
 * (kiwarp.ko's ooo_aligned) also without markers, with CRC, taking a
 * segment's first bytes for an FPDU. At the end, the attacker's case of
 * aligned mode: an FPDU's image inside a payload.
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
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "kiwarp.h"
#include "kw_vmtest.h"
#include "iwarp.h"
#include "kw_rawpeer.h"
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

/* tools/netpair, found from this binary (selftests/vm/kw_ooo) */
static const char *netpair(void)
{
	static char path[512];
	ssize_t n;
	char *dir;

	if (path[0])
		return path;
	n = readlink("/proc/self/exe", path, sizeof(path) - 32);
	if (n <= 0)
		return strcpy(path, "tools/netpair");	/* from the top */
	path[n] = 0;
	dir = strrchr(path, '/');
	strcpy(dir ? dir + 1 : path, "../../tools/netpair");
	return path;
}

static void link_down(void)
{
	sh("%s down kwooo", netpair());
}

/* NS_A: kwooo0 10.79.0.1, NS_B: kwooo1 ADDR_B; A's end swaps packets */
static int link_up(void)
{
	return sh("%s up kwooo 10.79.0 1500 && "
		  "%s netem kwooo a delay 100ms reorder 100%% gap 2",
		  netpair(), netpair());
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

static void server(int wfd, uint32_t flags)
{
	struct kw_conn_param cp = { .mpa_rev = 2, .ird = 8, .ord = 8,
				    .timeout_ms = 20000, .flags = flags };
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

static void client(uint32_t flags)
{
	struct kw_conn_param cp = { .mpa_rev = 2, .ird = 8, .ord = 8,
				    .timeout_ms = 20000, .flags = flags };
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

static void aligned_off(void);

/* kiwarp.ko's ooo_aligned (read as each QP starts); false if absent. Off
 * again when the program ends, however it ends (an ASSERT). */
static bool set_aligned(bool on)
{
	FILE *f = fopen("/sys/module/kiwarp/parameters/ooo_aligned", "w");
	static bool registered;
	bool ok;

	if (!f)
		return false;
	if (on && !registered)
		registered = !atexit(aligned_off);
	ok = fputs(on ? "Y" : "N", f) >= 0;
	return !fclose(f) && ok;
}

static void aligned_off(void)
{
	set_aligned(false);
}

/*
 * markers: both directions. Without them, in aligned mode (ooo_aligned)
 * with CRC the receiver takes a segment's first bytes for an FPDU's (RFC
 * 5044 section 8: kiwarp cuts FPDUs to segments); otherwise nothing is
 * locatable.
 */
static void run(int *kwt_fail, bool markers, bool crc, bool aligned)
{
	uint32_t flags = (markers ? KIWARP_CONN_MARKERS : 0) |
			 (crc ? KIWARP_CONN_CRC : KIWARP_CONN_NO_CRC);
	bool ahead = kw_tcp_hooks_param() == 1 &&
		     (markers || (crc && aligned));
	struct verdict v = { 0 };
	int p[2], st;
	pid_t ps, pc;

	ASSERT_TRUE(set_aligned(aligned));
	ASSERT_EQ(link_up(), 0);
	ASSERT_EQ(pipe(p), 0);
	ps = fork();
	if (!ps) {
		close(p[0]);
		server(p[1], flags);
	}
	close(p[1]);
	/* the server listens */
	ASSERT_EQ(read(p[0], &v, sizeof(v)), (ssize_t)sizeof(v));
	ASSERT_EQ(v.step, 2);
	pc = fork();
	if (!pc)
		client(flags);
	EXPECT_EQ(read(p[0], &v, sizeof(v)), (ssize_t)sizeof(v));
	waitpid(pc, &st, 0);
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	note("client exit %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	waitpid(ps, &st, 0);
	close(p[0]);
	link_down();
	set_aligned(false);
	note("markers %d crc %d aligned %d: server: step %d, %s; %lld segments queued out of order; placed %llu in order + %llu out of order (want %llu), QP flags %#x, tcp_hooks %d",
	     markers, crc, aligned, v.step, v.ok ? "bytes right" : v.why, v.ofo,
	     (unsigned long long)v.rx, (unsigned long long)v.ooo,
	     (unsigned long long)v.want, v.qflags, kw_tcp_hooks_param());
	EXPECT_EQ(v.ok, 1);
	/*
	 * netem reordered (a fresh namespace: its counters start at 0). How
	 * many of the 2 x PAIRS segments TCP queues out of order varies with
	 * timing, 10-17 in 20 runs on 6.1: PAIRS / 2 failed one of them.
	 */
	EXPECT_GE(v.ofo, PAIRS / 4);
	EXPECT_EQ(v.rx + v.ooo, v.want);
	EXPECT_EQ(!!(v.qflags & KIWARP_QPQ_OOO), ahead);
	if (ahead)
		EXPECT_GT(v.ooo, 0);
	else
		EXPECT_EQ(v.ooo, 0);
}

/*
 * Without the hook every variant below is the in-order path of the first
 * two with other flags: those run only where the hook is (make check's
 * patched tier), which keeps the stock kernels' suites short.
 */
static bool hook_only(void)
{
	if (kw_tcp_hooks_param() == 1)
		return false;
	note("in order only on this kernel (no tcp_set_ofo_hook): as crc0/crc1");
	return true;
}

TEST(reordered_overlapping_writes_crc0) { run(kwt_fail, true, false, false); }
TEST(reordered_overlapping_writes_crc1) { run(kwt_fail, true, true, false); }
/* aligned mode: FPDUs at segment starts, confirmed by their CRC */
TEST(reordered_overlapping_writes_aligned)
{
	if (!hook_only())
		run(kwt_fail, false, true, true);
}
/* the same without aligned mode (the default): in order only */
TEST(reordered_overlapping_writes_crc_only)
{
	if (!hook_only())
		run(kwt_fail, false, true, false);
}
/* neither markers nor CRC: nothing locatable, whatever the mode */
TEST(reordered_overlapping_writes_unlocatable)
{
	if (!hook_only())
		run(kwt_fail, false, false, true);
}

/*
 * The attacker's case for aligned mode: a peer relays bytes it does not
 * control, and they carry the image of an FPDU (a tagged Write with its
 * CRC) inside the payload of one of its Writes. The raw peer below sends
 * each such Write as two segments, cut where the image starts; netem
 * sends one of each pair 100 ms late. When the second half comes first,
 * aligned mode takes it for an FPDU and places it: bytes no message of
 * the stream wrote. The in-order stream then passes that position without
 * an FPDU starting there, and the QP must fail (Terminate: RDMAP, local
 * catastrophic). Without the hook, or without aligned mode, nothing is
 * placed ahead: every byte is the outer Writes', the image's target stays
 * untouched and the QP stays up.
 */
#define IMG_LEN		256	/* the image's payload */
#define IMG_AT		64	/* where the image starts in the payload */
#define OUTER_LEN	600
#define ROUNDS		12	/* at most */
#define W1		0		/* the outer Writes' target */
#define W2		16384		/* the image's target */
#define W3		24576		/* the small Writes' */

struct img_end {
	struct side s;
	int sock;
	int ret;
};

static void *img_accept(void *arg)
{
	struct img_end *k = arg;
	struct kw_conn_param p = { .mpa_rev = 2, .ird = 4, .ord = 4,
				   .flags = KIWARP_CONN_CRC };
	static struct kw_conn_request req;
	static struct kw_conn_result res;

	k->ret = kw_accept(k->s.qp, k->sock, NULL, 10000, &req);
	if (!k->ret)
		k->ret = kw_accept_reply(k->s.qp, KIWARP_REPLY_ACCEPT, &p, NULL,
					 0, &res);
	return NULL;
}

/* kiwarp's socket in NS_B, accepted from the raw peer's in NS_A */
static int img_sockets(int *raw, int *ks)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(18601) };
	int self = open("/proc/self/ns/net", O_RDONLY), l = -1, ret = -1;

	inet_pton(AF_INET, ADDR_B, &sin.sin_addr);
	*raw = *ks = -1;
	if (self < 0 || kw_enter_netns(NS_B))
		goto out;
	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &(int){ 1 }, sizeof(int)) ||
	    bind(l, (void *)&sin, sizeof(sin)) || listen(l, 1) ||
	    kw_enter_netns(NS_A))
		goto out;
	*raw = socket(AF_INET, SOCK_STREAM, 0);
	if (*raw < 0 || connect(*raw, (void *)&sin, sizeof(sin))) {
		if (*raw >= 0)
			close(*raw);
		*raw = -1;
		goto out;
	}
	/* each write() one segment */
	setsockopt(*raw, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int));
	*ks = accept(l, NULL, NULL);
	ret = *ks < 0 ? -1 : 0;
out:
	if (l >= 0)
		close(l);
	if (self >= 0) {
		if (setns(self, CLONE_NEWNET))
			ret = -1;
		close(self);
	}
	return ret;
}

/* Raw MPA rev 2 initiator with CRC, no markers; kiwarp accepts. */
static int img_connect(struct img_end *k, int raw)
{
	struct kw_mpa_cfg cfg = { .rev = 2, .crc = true, .ird = 4, .ord = 4 };
	struct kw_mpa_frame req, rep;
	struct kw_mpa_result res;
	uint8_t buf[KW_MPA_HDR_LEN + KW_MPA_MAX_PD];
	pthread_t t;
	int len;

	pthread_create(&t, NULL, img_accept, k);
	kw_mpa_make_request(&cfg, &req);
	len = kw_mpa_encode(&req, NULL, 0, buf, sizeof(buf));
	if (len < 0 || writen(raw, buf, len) ||
	    rp_read_frame(raw, true, &rep, buf) ||
	    kw_mpa_negotiate_initiator(&cfg, &rep, &res) || !res.crc) {
		pthread_join(t, NULL);
		return -1;
	}
	pthread_join(t, NULL);
	return k->ret;
}

/* One outer Write of OUTER_LEN bytes to W1 + r * 1024 that carries, at
 * IMG_AT, the image of a Write of IMG_LEN bytes to W2 + r * IMG_LEN; sent
 * as two segments, the second starting with the image. */
static int img_round(const struct rp *p, struct side *s, unsigned r)
{
	static uint8_t img[1024], payload[OUTER_LEN], wire[2048];
	uint64_t base = (uintptr_t)s->buf;
	struct kw_tx_msg mi = { .opcode = KW_OP_WRITE, .len = IMG_LEN,
				.stag = s->mr->stag,
				.to = base + W2 + r * IMG_LEN };
	struct kw_tx_msg mo = { .opcode = KW_OP_WRITE, .len = OUTER_LEN,
				.stag = s->mr->stag, .to = base + W1 + r * 1024 };
	uint8_t *end;
	size_t cut, ilen;

	memset(payload, 0xa0 + r, sizeof(payload));
	memset(img + 512, 0xe0 + r, IMG_LEN);
	end = rp_build(p, &mi, img + 512, img);
	if (!end)
		return -1;
	ilen = end - img;
	if (IMG_AT + ilen > OUTER_LEN)
		return -1;
	memcpy(payload + IMG_AT, img, ilen);
	end = rp_build(p, &mo, payload, wire);
	if (!end)
		return -1;
	/* the outer FPDU: length, tagged DDP/RDMAP header, payload */
	cut = 2 + KW_DDP_TAGGED_HDR_LEN + IMG_AT;
	if (writen(p->fd, wire, cut))
		return -1;
	usleep(20000);
	if (writen(p->fd, wire + cut, end - wire - cut))
		return -1;
	usleep(20000);
	return 0;
}

/* A Write of len (< 512) bytes of fill, in one segment. */
static int img_write(const struct rp *p, struct side *s, uint64_t at,
		     uint32_t len, uint8_t fill)
{
	static uint8_t b[512], wire[1024];
	struct kw_tx_msg m = { .opcode = KW_OP_WRITE, .len = len,
			       .stag = s->mr->stag,
			       .to = (uintptr_t)s->buf + at };
	uint8_t *end;

	memset(b, fill, len);
	end = rp_build(p, &m, b, wire);
	return end ? writen(p->fd, wire, end - wire) : -1;
}

/* Bytes of the images placed so far (their target was all 0). */
static unsigned img_placed(const struct side *s)
{
	unsigned j, n = 0;

	for (j = 0; j < ROUNDS * IMG_LEN; j++)
		n += s->buf[W2 + j] != 0;
	return n;
}

static void image_case(int *kwt_fail, bool aligned)
{
	bool expect = kw_tcp_hooks_param() == 1 && aligned;
	struct img_end k = { 0 };
	struct kiwarp_query_qp q;
	struct rp_sink sink = { 0 };
	struct kw_rx rx;
	struct rp p;
	int raw, ret;
	unsigned r, j, w2 = 0, rounds = 0;

	ASSERT_EQ(side_open(&k.s, 65536), 0);
	ASSERT_EQ(img_sockets(&raw, &k.sock), 0);
	ASSERT_EQ(img_connect(&k, raw), 0);
	p = (struct rp){ raw, true };
	/*
	 * Round 0 is never placed ahead (the responder waits for its first
	 * FPDU in order); a round whose image half comes first is. Every
	 * third round one segment more shifts which half is late (a
	 * retransmission may shift it too); in aligned mode the rounds stop
	 * once an image was placed (its Terminate follows).
	 */
	for (r = 0; r < ROUNDS && !(expect && img_placed(&k.s)); r++) {
		if (r % 3 == 2)
			ASSERT_EQ(img_write(&p, &k.s, W3 + 1024 + r * 16, 8, 0x33), 0);
		ASSERT_EQ(img_round(&p, &k.s, r), 0);
		rounds++;
	}
	usleep(400000);		/* netem's late halves are in */
	w2 = img_placed(&k.s);
	if (expect) {
		kw_rx_init(&rx, &rp_sink_ops, &sink, true, 0);
		rp_read(&p, &rx, &sink, 10, NULL);
		ret = qp_wait_error(k.s.qp, &q, 5);
		note("aligned mode: %u rounds, %u bytes of the images placed; QP %s, Terminate sent %d/%d/%d",
		     rounds, w2, kw_qp_state_str(q.state), q.term_sent.layer,
		     q.term_sent.etype, q.term_sent.ecode);
		/* the reordering happened and was taken for an FPDU */
		EXPECT_GT(w2, 0);
		EXPECT_EQ(ret, 0);
		EXPECT_TRUE(q.term_sent.valid);
		EXPECT_EQ(q.term_sent.layer, KW_TERM_LAYER_RDMAP);
		EXPECT_EQ(q.term_sent.etype, KW_TERM_RDMAP_ETYPE_CATASTROPHIC);
		EXPECT_EQ(q.term_sent.ecode, 0);
		EXPECT_TRUE(sink.got_term);
		EXPECT_EQ(sink.term.layer, KW_TERM_LAYER_RDMAP);
		EXPECT_EQ(sink.term.etype, KW_TERM_RDMAP_ETYPE_CATASTROPHIC);
	} else {
		/* a last Write: everything before it was taken in order */
		ASSERT_EQ(img_write(&p, &k.s, W3, 200, 0x44), 0);
		usleep(300000);
		memset(&q, 0, sizeof(q));
		EXPECT_EQ(kw_query_qp(k.s.qp, &q), 0);
		note("%u rounds, %u bytes of the images placed, QP %s, %llu bytes placed ahead",
		     rounds, w2, kw_qp_state_str(q.state),
		     (unsigned long long)q.ooo_bytes);
		EXPECT_EQ(q.state, KIWARP_QPS_RTS);
		EXPECT_EQ(w2, 0);
		EXPECT_EQ(q.ooo_bytes, 0);
		/* the outer Writes' bytes around the images, and the last */
		for (r = 0, j = 0; r < rounds; r++)
			j += k.s.buf[W1 + r * 1024] != 0xa0 + r ||
			     k.s.buf[W1 + r * 1024 + OUTER_LEN - 1] != 0xa0 + r;
		EXPECT_EQ(j, 0);
		EXPECT_EQ(k.s.buf[W3 + 199], 0x44);
	}
	close(raw);
	close(k.sock);
	kw_destroy_qp(k.s.qp);
	kw_dereg_mr(k.s.mr);
	kw_destroy_cq(k.s.cq);
	kw_dealloc_pd(k.s.pd);
	kw_close(k.s.dev);
	munmap(k.s.buf, 65536);
}

static void image(int *kwt_fail, bool aligned)
{
	ASSERT_TRUE(set_aligned(aligned));
	ASSERT_EQ(link_up(), 0);
	image_case(kwt_fail, aligned);
	link_down();
	set_aligned(false);
}

/* aligned mode: the image is placed, then detected (QP fails) */
TEST(fpdu_image_in_payload_aligned)
{
	if (!hook_only())
		image(kwt_fail, true);
}

/* in order (the default, or no hook): the image is payload. With the
 * hook and aligned mode off, no hook is attached without markers
 * (reordered_overlapping_writes_crc_only), so this is the same path. */
TEST(fpdu_image_in_payload_default)
{
	if (kw_tcp_hooks_param() == 1)
		note("the hook is not attached without markers: as on a stock kernel");
	else
		image(kwt_fail, false);
}
