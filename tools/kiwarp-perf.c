// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * kiwarp-perf: perftest-style benchmark over libkiwarp.
 *
 *   server: kiwarp-perf -s [-p PORT]
 *   client: kiwarp-perf -c HOST [-p PORT] [-t send|write|read] [-m lat|bw]
 *                       [-S SIZE | -a] [-n ITERS] [-w WINDOW] [-C] [-r REV]
 *                       [--p2p] [--verify] [--json] [-q]
 *
 * The TCP connection is made with ordinary sockets and then converted into
 * an iWARP stream with kw_connect()/kw_accept()+kw_accept_reply(). Buffer
 * information and the test configuration travel in the MPA private data:
 * the initiator's Request carries its config and buffer, the responder's
 * Reply carries the responder's buffer. The server adopts the client's
 * configuration.
 *
 * Control messages are zero-filled Sends whose *length* is their type, so
 * they never need to be parsed out of a buffer that a later message may
 * already be overwriting.
 *
 * Exit codes: 0 ok, 1 transfer or verification failure, 2 usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <kiwarp.h>

#include "perf-util.h"

#define DEFAULT_PORT	18515
#define SQ_DEPTH	256
#define RQ_DEPTH	128
#define CQ_DEPTH	512
#define CREDIT_BATCH	32
#define PD_MAGIC	0x4b575046U	/* "KWPF" */
#define PD_VERSION	1
#define IDLE_TIMEOUT_MS	30000
#define CLOSE_TIMEOUT_MS 3000
/* Per-receive-WR buffers for --verify of Sends up to this total size. */
#define RECV_SLOTS_MAX	(128u << 20)

/* Control message types, encoded as the Send length. */
#define CTRL_CREDIT	8	/* server -> client: CREDIT_BATCH more recvs */
#define CTRL_DONE	9	/* client -> server: size finished */
#define CTRL_ACK_OK	10	/* server -> client: verified / ok */
#define CTRL_ACK_BAD	11	/* server -> client: verification failed */
#define CTRL_BUF	64

enum test { T_SEND, T_WRITE, T_READ };
enum mode { M_LAT, M_BW };

/* MPA private data, network byte order. */
struct pdata {
	uint32_t magic;
	uint8_t version;
	uint8_t test;
	uint8_t mode;
	uint8_t flags;
#define PDF_VERIFY	1
#define PDF_SWEEP	2
	uint32_t max_size;
	uint32_t iters;
	uint32_t window;
	uint32_t rkey;
	uint64_t addr;
	uint64_t len;
} __attribute__((packed));

struct opts {
	int server;
	const char *host;
	int port;
	enum test test;
	enum mode mode;
	uint32_t size;
	int sweep;
	uint32_t iters;
	uint32_t window;
	int crc, p2p, quiet, verify, json, markers;
	int mpa_rev;
	long copy_max;		/* --copy-max; -1: the kernel's default */
	long spin;		/* --spin; -1 (default): the bw client never sleeps */
};

struct ctx {
	struct opts o;
	struct kw_device *dev;
	struct kw_pd *pd;
	struct kw_cq *scq, *rcq;
	struct kw_qp *qp;
	uint8_t *sbuf, *rbuf, *recvbuf, *ctrl;
	/*
	 * Receive buffers: recv_slots buffers of recv_slot_len bytes. With
	 * --verify of Sends on the server there is one per receive WR
	 * (recv WR n uses slot n % RQ_DEPTH, so a message cannot be
	 * overwritten by a later one - e.g. the DONE - while it is checked);
	 * otherwise one shared buffer.
	 */
	uint32_t recv_slots, recv_slot_len, recv_next;
	uint8_t *last_recv;	/* buffer of the last receive completion */
	struct kw_mr *smr, *rmr, *recvmr, *ctrlmr;
	uint64_t raddr;
	uint32_t rkey;
	uint64_t rlen;
	struct kiwarp_conn_param neg;
	uint32_t mulpdu;
	/* flow control state (send bw) */
	int64_t credits;	/* client */
	uint32_t uncredited;	/* server */
	uint64_t sends_out;	/* signaled send WRs not yet completed */
};

static int quiet, json_out;

/*
 * Print the error and exit. With --json a machine-readable line goes to
 * stdout too: {"status":"error","exit":N,"message":"..."}.
 */
static void die(int code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "kiwarp-perf: %s\n", msg);
	if (json_out) {
		printf("{\"status\":\"error\",\"exit\":%d,\"message\":\"", code);
		for (const char *p = msg; *p; p++)
			if (*p == '"' || *p == '\\')
				printf("\\%c", *p);
			else if ((unsigned char)*p >= 0x20)
				putchar(*p);
		printf("\"}\n");
		fflush(stdout);
	}
	exit(code);
}

static void usage(void)
{
	fprintf(stderr,
"usage: kiwarp-perf -s [-p PORT]\n"
"       kiwarp-perf -c HOST [options]\n"
"  -s            server (adopts the client's test configuration)\n"
"  -c HOST       client, connect to HOST\n"
"  -p PORT       TCP port (default %d)\n"
"  -t TEST       send | write | read (default write)\n"
"  -m MODE       lat | bw (default bw)\n"
"  -S SIZE       message size in bytes (default 65536 bw, 2 lat; K/M suffix)\n"
"  -a            sweep sizes 1, 2, 4 ... SIZE (default SIZE 8M with -a)\n"
"  -n ITERS      iterations per size (default 5000 bw, 1000 lat)\n"
"  -w WINDOW     outstanding work requests in bw mode (default 64)\n"
"  -C            use MPA CRC (kiwarp's default; without -C this tool\n"
"                declines it, as siw does by default)\n"
"  -r REV        MPA revision 1 or 2 (default 2)\n"
"  --p2p         MPA rev 2 peer-to-peer mode (RTR)\n"
"  --markers     MPA markers (RFC 5044 section 5) in both directions: the\n"
"                server answers a client that asks with markers too\n"
"  --verify      fill buffers with a pattern and check it after transfer\n"
"  --json        one JSON object per size on stdout\n"
"  --copy-max N  this side's QP copies Sends/Writes of up to N bytes and\n"
"                completes them when TCP has them (default: the kernel's)\n"
"  --spin N      bw client: after N empty polls with nothing to post, sleep\n"
"                until a completion (kw_wait_cq); -1 (default): never sleep\n"
"  -q            quiet: results only\n", DEFAULT_PORT);
	exit(2);
}

static void info(const char *fmt, ...)
{
	va_list ap;

	if (quiet)
		return;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

static uint8_t pattern(uint64_t i)
{
	return (uint8_t)(i * 131 + 7);
}

static void fill_pattern(uint8_t *p, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		p[i] = pattern(i);
}

static int check_pattern(const uint8_t *p, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++) {
		if (p[i] != pattern(i)) {
			fprintf(stderr, "kiwarp-perf: verify: byte %llu is 0x%02x, "
				"expected 0x%02x\n", (unsigned long long)i, p[i],
				pattern(i));
			return -1;
		}
	}
	return 0;
}

/* check_pattern() of bytes [from, len) only. */
static int check_pattern_from(const uint8_t *p, uint64_t from, uint64_t len)
{
	for (uint64_t i = from; i < len; i++) {
		if (p[i] != pattern(i)) {
			fprintf(stderr, "kiwarp-perf: verify: byte %llu is 0x%02x, "
				"expected 0x%02x\n", (unsigned long long)i, p[i],
				pattern(i));
			return -1;
		}
	}
	return 0;
}

static uint64_t htonll(uint64_t v)
{
	return ((uint64_t)htonl((uint32_t)v) << 32) | htonl((uint32_t)(v >> 32));
}
#define ntohll htonll

static const char *test_name(int t)
{
	return t == T_SEND ? "send" : t == T_WRITE ? "write" : "read";
}

/* ------------------------------------------------------------------ */
/* Failure reporting                                                  */

static void report_term(const char *what, const struct kiwarp_term_info *t)
{
	if (!t->valid)
		return;
	fprintf(stderr, "kiwarp-perf:   Terminate %s: layer %u type 0x%x code 0x%02x: %s\n",
		what, t->layer, t->etype, t->ecode,
		kw_term_str(t->layer, t->etype, t->ecode));
}

static void fail_cqe(struct ctx *c, const struct kiwarp_cqe *e)
{
	struct kiwarp_query_qp q;

	fprintf(stderr, "kiwarp-perf: %s completion wr_id %llu failed: %s (%u)\n",
		kw_wr_opcode_str(e->opcode), (unsigned long long)e->wr_id,
		kw_wc_status_str(e->status), e->status);
	report_term("in CQE", &e->term);
	if (kw_query_qp(c->qp, &q) == 0) {
		fprintf(stderr, "kiwarp-perf:   QP state %s\n",
			kw_qp_state_str(q.state));
		report_term("sent", &q.term_sent);
		report_term("received", &q.term_rcvd);
	}
	if (e->term.valid)
		die(1, "%s completion failed: %s; Terminate: %s",
		    kw_wr_opcode_str(e->opcode), kw_wc_status_str(e->status),
		    kw_term_str(e->term.layer, e->term.etype, e->term.ecode));
	die(1, "%s completion failed: %s", kw_wr_opcode_str(e->opcode),
	    kw_wc_status_str(e->status));
}

static void fail_errno(int err, const char *what)
{
	die(1, "%s: %s", what, strerror(-err));
}

/* ------------------------------------------------------------------ */
/* Work requests                                                      */

static void post_recvs(struct ctx *c, unsigned n)
{
	struct kiwarp_sge sge[16];
	struct kw_recv_wr wr[16];
	double t0 = 0;
	int ret;

	while (n) {
		unsigned k = n > 16 ? 16 : n;

		for (unsigned i = 0; i < k; i++) {
			uint32_t slot = (c->recv_next + i) % c->recv_slots;

			sge[i].addr = (uintptr_t)c->recvbuf +
				      (uint64_t)slot * c->recv_slot_len;
			sge[i].length = c->recv_slot_len;
			sge[i].lkey = c->recvmr->stag;
			memset(&wr[i], 0, sizeof(wr[i]));
			wr[i].wr_id = 0x5245435600000000ULL | slot;
			wr[i].sg_list = &sge[i];
			wr[i].num_sge = 1;
		}
		ret = kw_post_recv(c->qp, wr, k);
		if (ret == -EAGAIN) {
			/*
			 * Only reposts after a receive completion get here,
			 * so the ring has room: the kernel posts the RECV CQE
			 * just before it advances RQ cons. Wait for cons.
			 */
			if (!t0)
				t0 = now_us();
			else if (now_us() - t0 > IDLE_TIMEOUT_MS * 1e3)
				fail_errno(ret, "kw_post_recv");
			sched_yield();
			continue;
		}
		if (ret < 0)
			fail_errno(ret, "kw_post_recv");
		c->recv_next = (c->recv_next + k) % c->recv_slots;
		n -= k;
		t0 = 0;
	}
}

static void drain_send_cq(struct ctx *c)
{
	struct kiwarp_cqe e[32];
	int n;

	while ((n = kw_poll_cq(c->scq, 32, e)) > 0) {
		for (int i = 0; i < n; i++) {
			if (e[i].status != KIWARP_WC_SUCCESS)
				fail_cqe(c, &e[i]);
			c->sends_out--;
		}
	}
}

/* Post one signaled send WR, waiting for SQ space if needed. */
static void post_one(struct ctx *c, const struct kw_send_wr *wr)
{
	double t0 = 0;
	int ret;

	for (;;) {
		ret = kw_post_send(c->qp, wr, 1);
		if (ret == 1)
			break;
		if (ret != -EAGAIN)
			fail_errno(ret, "kw_post_send");
		drain_send_cq(c);
		if (!t0)
			t0 = now_us();
		else if (now_us() - t0 > IDLE_TIMEOUT_MS * 1e3)
			die(1, "timeout waiting for send queue space");
	}
	c->sends_out++;
}

static void send_ctrl(struct ctx *c, uint32_t type)
{
	struct kiwarp_sge sge = {
		.addr = (uintptr_t)c->ctrl, .length = type,
		.lkey = c->ctrlmr->stag,
	};
	struct kw_send_wr wr = {
		.wr_id = 0x4354524c00000000ULL | type,
		.opcode = KIWARP_WR_SEND, .flags = KW_SEND_SIGNALED,
		.num_sge = 1, .sg_list = &sge,
	};

	post_one(c, &wr);
}

/*
 * Wait for one CQE on cq: busy-poll for a while, then sleep in
 * kw_wait_cq(). Fails the run after IDLE_TIMEOUT_MS without progress.
 */
static void wait_cqe(struct ctx *c, struct kw_cq *cq, struct kiwarp_cqe *e)
{
	/* No clock read while spinning: under TCG with an HPET clocksource
	 * each read is an emulated device access that slows both vCPUs. */
	double start = 0;
	unsigned spins = 0;
	int ret;

	for (;;) {
		ret = kw_poll_cq(cq, 1, e);
		if (ret == 1) {
			if (e->status != KIWARP_WC_SUCCESS)
				fail_cqe(c, e);
			return;
		}
		if (ret < 0)
			fail_errno(ret, "kw_poll_cq");
		if (cq != c->scq)
			drain_send_cq(c);
		if (++spins < 100000)
			continue;
		ret = kw_wait_cq(cq, 100);
		if (ret < 0 && ret != -EINTR)
			fail_errno(ret, "kw_wait_cq");
		if (!start)
			start = now_us();
		else if (now_us() - start > IDLE_TIMEOUT_MS * 1e3)
			die(1, "timeout waiting for a completion");
	}
}

/*
 * Wait for one receive completion; its data is at c->last_recv until the
 * caller reposts the receive with post_recvs(c, 1).
 */
static uint32_t wait_recv_hold(struct ctx *c)
{
	struct kiwarp_cqe e;

	wait_cqe(c, c->rcq, &e);
	c->last_recv = c->recvbuf + (uint64_t)(uint32_t)(e.wr_id & 0xffffffffu) %
		       c->recv_slots * c->recv_slot_len;
	return e.byte_len;
}

/* Wait for one receive completion and repost its buffer. */
static uint32_t wait_recv(struct ctx *c)
{
	uint32_t len = wait_recv_hold(c);

	post_recvs(c, 1);
	return len;
}

static void expect_ctrl(struct ctx *c, uint32_t type)
{
	uint32_t len = wait_recv(c);

	if (len != type)
		die(1, "protocol error: expected control message %u, got %u bytes",
		    type, len);
}

/* Client: wait for the server's ACK; a CREDIT may precede it. */
static int wait_ack(struct ctx *c)
{
	for (;;) {
		uint32_t len = wait_recv(c);

		if (len == CTRL_CREDIT) {
			c->credits += CREDIT_BATCH;
			continue;
		}
		if (len == CTRL_ACK_OK)
			return 0;
		if (len == CTRL_ACK_BAD)
			return -1;
		die(1, "protocol error: unexpected %u-byte message", len);
	}
}

static void fill_wr(struct ctx *c, struct kw_send_wr *wr,
		    struct kiwarp_sge *sge, uint32_t size, uint64_t id)
{
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = id;
	wr->flags = KW_SEND_SIGNALED;
	wr->num_sge = 1;
	wr->sg_list = sge;
	switch (c->o.test) {
	case T_SEND:
		wr->opcode = KIWARP_WR_SEND;
		sge->addr = (uintptr_t)c->sbuf;
		sge->lkey = c->smr->stag;
		break;
	case T_WRITE:
		wr->opcode = KIWARP_WR_RDMA_WRITE;
		wr->remote_addr = c->raddr;
		wr->rkey = c->rkey;
		sge->addr = (uintptr_t)c->sbuf;
		sge->lkey = c->smr->stag;
		break;
	case T_READ:
		wr->opcode = KIWARP_WR_RDMA_READ;
		wr->remote_addr = c->raddr;
		wr->rkey = c->rkey;
		sge->addr = (uintptr_t)c->rbuf;
		sge->lkey = c->rmr->stag;
		break;
	}
	sge->length = size;
}

/* ------------------------------------------------------------------ */
/* Results                                                            */

static void print_header(struct ctx *c)
{
	const struct opts *o = &c->o;

	if (o->json)
		return;
	printf("---------------------------------------------------------------------------------------\n");
	printf(" kiwarp %s %s test\n", test_name(o->test),
	       o->mode == M_BW ? "bandwidth" : "latency");
	printf(" CRC: %s | MPA revision: %u | P2P: %s | MULPDU: %u | IRD/ORD: %u/%u\n",
	       (c->neg.flags & KIWARP_CONN_CRC) ? "on" : "off", c->neg.mpa_rev,
	       (c->neg.flags & KIWARP_CONN_P2P) ? "on" : "off", c->mulpdu,
	       c->neg.ird, c->neg.ord);
	printf(" Window: %u | Iterations: %u | Verify: %s\n",
	       o->mode == M_BW ? o->window : 1, o->iters,
	       o->verify ? "on" : "off");
	printf("---------------------------------------------------------------------------------------\n");
	if (o->mode == M_BW)
		printf(" %-10s %-12s %-22s %-18s\n", "#bytes", "#iterations",
		       "BW average[MB/sec]", "MsgRate[Mpps]");
	else
		printf(" %-10s %-12s %-10s %-12s %-10s %-10s\n", "#bytes",
		       "#iterations", "t_min[us]", "t_typical[us]",
		       "t_avg[us]", "t_max[us]");
}

static void json_common(struct ctx *c, uint32_t size)
{
	printf("{\"test\":\"%s\",\"mode\":\"%s\",\"size\":%u,\"iters\":%u,"
	       "\"crc\":%s,\"mpa_rev\":%u,\"p2p\":%s,\"mulpdu\":%u,",
	       test_name(c->o.test), c->o.mode == M_BW ? "bw" : "lat", size,
	       c->o.iters, (c->neg.flags & KIWARP_CONN_CRC) ? "true" : "false",
	       c->neg.mpa_rev, (c->neg.flags & KIWARP_CONN_P2P) ? "true" : "false",
	       c->mulpdu);
}

static void print_bw(struct ctx *c, uint32_t size, double usec, int verified,
		     const struct cpu_busy *cb0, const struct cpu_busy *cb1)
{
	double bytes = (double)size * c->o.iters;
	double mbps = usec > 0 ? bytes / usec : 0;	/* B/us == MB/s */
	double mpps = usec > 0 ? c->o.iters / usec : 0;

	if (c->o.json) {
		json_common(c, size);
		printf("\"bw_MBps\":%.2f,\"msg_rate_Mpps\":%.6f,\"usec\":%.1f,",
		       mbps, mpps, usec);
		cpu_busy_json(cb0, cb1);
		printf("\"verify\":\"%s\",\"status\":\"ok\"}\n",
		       verified ? "ok" : "off");
	} else {
		printf(" %-10u %-12u %-22.2f %-18.6f\n", size, c->o.iters, mbps,
		       mpps);
	}
	fflush(stdout);
}

static void print_lat(struct ctx *c, uint32_t size, double *t, uint32_t n,
		      int verified)
{
	double sum = 0;

	qsort(t, n, sizeof(*t), cmp_double);
	for (uint32_t i = 0; i < n; i++)
		sum += t[i];
	if (c->o.json) {
		json_common(c, size);
		printf("\"t_min_us\":%.3f,\"t_typical_us\":%.3f,\"t_avg_us\":%.3f,"
		       "\"t_p99_us\":%.3f,\"t_max_us\":%.3f,\"verify\":\"%s\","
		       "\"status\":\"ok\"}\n",
		       t[0], t[n / 2], sum / n, t[(uint64_t)n * 99 / 100],
		       t[n - 1], verified ? "ok" : "off");
	} else {
		printf(" %-10u %-12u %-10.2f %-12.2f   %-10.2f %-10.2f\n", size, n,
		       t[0], t[n / 2], sum / n, t[n - 1]);
	}
	fflush(stdout);
}

/* ------------------------------------------------------------------ */
/* Client side of one size                                            */

/*
 * --spin: nothing to post and nothing completed for a while, so sleep
 * until a completion, as a blocking send() waits for room. A Send client
 * waits for credits on the receive CQ too: the events of both CQs wake
 * the device fd, and the short timeout bounds a wait on the wrong one.
 */
static void bw_sleep(struct ctx *c)
{
	int ret;

	if (c->o.test == T_SEND) {
		ret = kw_req_notify_cq(c->rcq, 0);
		if (ret)
			fail_errno(ret, "kw_req_notify_cq");
	}
	ret = kw_wait_cq(c->scq, c->o.test == T_SEND ? 1 : 100);
	if (ret < 0 && ret != -EINTR)
		fail_errno(ret, "kw_wait_cq");
}

static void client_bw(struct ctx *c, uint32_t size)
{
	struct kw_send_wr wr[16];
	struct kiwarp_sge sge[16];
	struct kiwarp_cqe e[64];
	struct cpu_busy cb0, cb1;
	uint32_t iters = c->o.iters, window = c->o.window;
	uint64_t posted = 0, done = 0;
	double t0, t1, last = 0, slept = 0;
	unsigned idle = 0;	/* spins without progress: see wait_cqe() */
	int verified = 0, n, ns, nr, ret;

	if (c->o.test == T_READ) {
		if (c->neg.ord && window > c->neg.ord)
			window = c->neg.ord;
		memset(c->rbuf, 0, size);
	}
	cpu_busy(&cb0);
	t0 = now_us();
	while (done < iters) {
		unsigned k = 0;

		while (posted + k < iters && posted + k - done < window &&
		       k < 16 && (c->o.test != T_SEND || c->credits > 0)) {
			fill_wr(c, &wr[k], &sge[k], size, posted + k);
			if (c->o.test == T_SEND)
				c->credits--;
			k++;
		}
		if (k) {
			ret = kw_post_send(c->qp, wr, k);
			if (ret == -EAGAIN) {
				if (c->o.test == T_SEND)
					c->credits += k;
			} else if (ret < 0) {
				fail_errno(ret, "kw_post_send");
			} else {
				posted += k;
			}
		}
		ns = n = kw_poll_cq(c->scq, 64, e);
		for (int i = 0; i < n; i++) {
			if (e[i].status != KIWARP_WC_SUCCESS)
				fail_cqe(c, &e[i]);
			if ((e[i].wr_id >> 32) == 0)
				done++;		/* data WR, not a control send */
			else
				c->sends_out--;
		}
		nr = 0;
		if (c->o.test == T_SEND) {
			nr = n = kw_poll_cq(c->rcq, 64, e);
			for (int i = 0; i < n; i++) {
				if (e[i].status != KIWARP_WC_SUCCESS)
					fail_cqe(c, &e[i]);
				if (e[i].byte_len != CTRL_CREDIT)
					die(1, "protocol error: %u-byte message",
					    e[i].byte_len);
				c->credits += CREDIT_BATCH;
			}
			if (n > 0)
				post_recvs(c, (unsigned)n);
		}
		if (ns > 0 || nr > 0 || k) {
			idle = 0;
			slept = 0;
		} else if (c->o.spin >= 0 && ++idle > (unsigned)c->o.spin) {
			if (!slept)
				slept = now_us();
			else if (now_us() - slept > IDLE_TIMEOUT_MS * 1e3)
				die(1, "timeout: %llu of %u operations completed",
				    (unsigned long long)done, iters);
			bw_sleep(c);
		} else if (c->o.spin < 0 && ++idle == 4096) {
			last = now_us();	/* idle since about now */
		} else if (idle % 4096 == 0 &&
			   now_us() - last > IDLE_TIMEOUT_MS * 1e3) {
			die(1, "timeout: %llu of %u operations completed",
			    (unsigned long long)done, iters);
		}
	}
	t1 = now_us();
	cpu_busy(&cb1);
	if (c->o.test == T_READ && c->o.verify) {
		if (check_pattern(c->rbuf, size))
			die(1, "verification failed (RDMA Read, size %u)", size);
		verified = 1;
	}
	send_ctrl(c, CTRL_DONE);
	if (wait_ack(c))
		die(1, "verification failed on the server (size %u)", size);
	if (c->o.verify)
		verified = 1;
	print_bw(c, size, t1 - t0, verified, &cb0, &cb1);
}

/* Fail with the Terminate details if the QP left RTS. */
static void check_qp_alive(struct ctx *c)
{
	struct kiwarp_query_qp q;

	if (kw_query_qp(c->qp, &q) || q.state == KIWARP_QPS_RTS)
		return;
	fprintf(stderr, "kiwarp-perf: QP left RTS: state %s\n",
		kw_qp_state_str(q.state));
	report_term("sent", &q.term_sent);
	report_term("received", &q.term_rcvd);
	die(1, "QP left RTS (state %s)", kw_qp_state_str(q.state));
}

static uint8_t seqbyte(uint32_t i)
{
	return (uint8_t)(i % 255 + 1);
}

static void wait_byte(struct ctx *c, volatile uint8_t *p, uint8_t v)
{
	double t0 = 0;
	unsigned spins = 0;

	while (*p != v) {
		if (++spins % 4096 == 0)
			drain_send_cq(c);
		/* rarely: a clock read can cost more than a round trip
		 * under TCG (see wait_cqe()) */
		if (spins % (1U << 20) == 0) {
			check_qp_alive(c);
			if (!t0)
				t0 = now_us();
			else if (now_us() - t0 > IDLE_TIMEOUT_MS * 1e3)
				die(1, "timeout waiting for RDMA Write data");
		}
	}
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
}

static void client_lat(struct ctx *c, uint32_t size)
{
	uint32_t iters = c->o.iters;
	double *t = calloc(iters, sizeof(*t));
	struct kw_send_wr wr;
	struct kiwarp_sge sge;
	struct kiwarp_cqe e;
	int verified = 0;

	if (!t)
		die(1, "out of memory");
	memset(c->rbuf, 0, size);
	for (uint32_t i = 0; i < iters; i++) {
		double t0 = now_us();

		fill_wr(c, &wr, &sge, size, i);
		switch (c->o.test) {
		case T_SEND:
			post_one(c, &wr);
			{
				uint32_t len = wait_recv(c);

				if (len != size)
					die(1, "pong of %u bytes, expected %u",
					    len, size);
			}
			t[i] = (now_us() - t0) / 2;
			break;
		case T_WRITE:
			c->sbuf[size - 1] = seqbyte(i);
			post_one(c, &wr);
			wait_byte(c, &c->rbuf[size - 1], seqbyte(i));
			t[i] = (now_us() - t0) / 2;
			break;
		case T_READ:
			post_one(c, &wr);
			for (;;) {
				wait_cqe(c, c->scq, &e);
				c->sends_out--;
				if ((e.wr_id >> 32) == 0)
					break;	/* the Read, not a control send */
			}
			t[i] = now_us() - t0;
			break;
		}
		drain_send_cq(c);
	}
	if (c->o.verify) {
		if (c->o.test == T_READ && check_pattern(c->rbuf, size))
			die(1, "verification failed (RDMA Read, size %u)", size);
		if (c->o.test == T_WRITE && check_pattern(c->rbuf, size - 1))
			die(1, "verification failed (RDMA Write, size %u)", size);
		verified = 1;
	}
	send_ctrl(c, CTRL_DONE);
	if (wait_ack(c))
		die(1, "verification failed on the server (size %u)", size);
	print_lat(c, size, t, iters, verified);
	free(t);
}

/* ------------------------------------------------------------------ */
/* Server side of one size                                            */

static void server_size(struct ctx *c, uint32_t size)
{
	int bad = 0;

	if (c->o.test == T_SEND) {
		struct kw_send_wr wr;
		struct kiwarp_sge sge;

		for (uint32_t i = 0; i < c->o.iters; i++) {
			uint32_t len = wait_recv_hold(c);

			if (len != size)
				die(1, "received %u bytes, expected %u", len, size);
			/*
			 * With one receive slot per RQ entry the buffer is not
			 * reused before its WR is reposted RQ_DEPTH receives
			 * later; with a shared buffer (huge sizes) a control
			 * message may overwrite its first CTRL_BUF bytes.
			 */
			/*
			 * Bandwidth runs check the last message only (as
			 * tcp-perf does): a check of every message would run
			 * inside the measured time, which the sender's side
			 * of the comparison does not pay.
			 */
			if (c->o.verify && !bad &&
			    (c->o.mode == M_LAT || i + 1 == c->o.iters) &&
			    (c->recv_slots > 1 ?
			     check_pattern(c->last_recv, size) :
			     size > CTRL_BUF &&
			     check_pattern_from(c->last_recv, CTRL_BUF, size)))
				bad = 1;
			post_recvs(c, 1);
			if (c->o.mode == M_LAT) {
				fill_wr(c, &wr, &sge, size, i);
				post_one(c, &wr);
			} else if (++c->uncredited == CREDIT_BATCH) {
				send_ctrl(c, CTRL_CREDIT);
				c->uncredited = 0;
			}
			drain_send_cq(c);
		}
		expect_ctrl(c, CTRL_DONE);
	} else if (c->o.test == T_WRITE && c->o.mode == M_LAT) {
		struct kw_send_wr wr;
		struct kiwarp_sge sge;

		for (uint32_t i = 0; i < c->o.iters; i++) {
			wait_byte(c, &c->rbuf[size - 1], seqbyte(i));
			c->sbuf[size - 1] = seqbyte(i);
			fill_wr(c, &wr, &sge, size, i);
			post_one(c, &wr);
			drain_send_cq(c);
		}
		expect_ctrl(c, CTRL_DONE);
		if (c->o.verify && check_pattern(c->rbuf, size - 1))
			bad = 1;
	} else {
		/* write bw, read bw/lat: the server only waits. */
		expect_ctrl(c, CTRL_DONE);
		if (c->o.verify && c->o.test == T_WRITE &&
		    check_pattern(c->rbuf, size))
			bad = 1;
	}
	if (c->o.test == T_WRITE)
		memset(c->rbuf, 0, size);	/* no stale data for the next size */
	send_ctrl(c, bad ? CTRL_ACK_BAD : CTRL_ACK_OK);
	drain_send_cq(c);
	if (!bad && c->o.verify)
		info("size %u: verified ok\n", size);
	if (bad)
		die(1, "verification failed (size %u)", size);
}

/* ------------------------------------------------------------------ */
/* Setup                                                              */

static void *alloc_buf(size_t len)
{
	void *p = NULL;
	long pg = sysconf(_SC_PAGESIZE);

	if (posix_memalign(&p, pg > 0 ? (size_t)pg : 4096, len ? len : 1))
		die(1, "out of memory (%zu bytes)", len);
	memset(p, 0, len);
	return p;
}

static void reg(struct ctx *c, void *buf, size_t len, uint32_t access,
		struct kw_mr **mr)
{
	int ret = kw_reg_mr(c->pd, buf, len, access, mr);

	if (ret)
		die(1, "kw_reg_mr(%zu bytes): %s%s", len, strerror(-ret),
		    ret == -ENOMEM ? " (check ulimit -l)" : "");
}

static void setup_device(struct ctx *c)
{
	struct kw_qp_init_attr attr;
	int ret;

	ret = kw_open(&c->dev);
	if (ret)
		die(1, "kw_open(/dev/kiwarp): %s", strerror(-ret));
	if ((ret = kw_alloc_pd(c->dev, &c->pd)) ||
	    (ret = kw_create_cq(c->dev, CQ_DEPTH, &c->scq)) ||
	    (ret = kw_create_cq(c->dev, CQ_DEPTH, &c->rcq)))
		die(1, "resource setup: %s", strerror(-ret));
	memset(&attr, 0, sizeof(attr));
	attr.send_cq = c->scq;
	attr.recv_cq = c->rcq;
	attr.sq_entries = SQ_DEPTH;
	attr.rq_entries = RQ_DEPTH;
	attr.max_sge = 1;
	if (c->o.copy_max >= 0) {
		attr.flags = KW_QP_INIT_COPY_MAX;
		attr.copy_max = (uint32_t)c->o.copy_max;
	}
	ret = kw_create_qp(c->pd, &attr, &c->qp);
	if (ret)
		die(1, "kw_create_qp: %s", strerror(-ret));
}

static void setup_buffers(struct ctx *c, uint32_t max_size)
{
	size_t len = max_size < CTRL_BUF ? CTRL_BUF : max_size;

	c->sbuf = alloc_buf(len);
	c->rbuf = alloc_buf(len);
	c->recv_slot_len = (uint32_t)len;
	c->recv_slots = 1;
	if (c->o.server && c->o.verify && c->o.test == T_SEND &&
	    (uint64_t)len * RQ_DEPTH <= RECV_SLOTS_MAX)
		c->recv_slots = RQ_DEPTH;
	c->recvbuf = alloc_buf((size_t)len * c->recv_slots);
	c->ctrl = alloc_buf(CTRL_BUF);
	reg(c, c->sbuf, len, KIWARP_ACCESS_LOCAL_WRITE, &c->smr);
	reg(c, c->rbuf, len, KIWARP_ACCESS_ALL, &c->rmr);
	reg(c, c->recvbuf, (size_t)len * c->recv_slots,
	    KIWARP_ACCESS_LOCAL_WRITE, &c->recvmr);
	reg(c, c->ctrl, CTRL_BUF, KIWARP_ACCESS_LOCAL_WRITE, &c->ctrlmr);
	if (c->o.verify) {
		fill_pattern(c->sbuf, len);
		if (c->o.test == T_READ)
			fill_pattern(c->rbuf, len);	/* server side source */
	}
}

static void make_param(struct ctx *c, struct kw_conn_param *p)
{
	struct kiwarp_query q;
	uint32_t rd = 16;

	memset(p, 0, sizeof(*p));
	if (kw_query(c->dev, &q) == 0) {
		if (q.max_ird && q.max_ird < rd)
			rd = q.max_ird;
		if (c->o.crc && !(q.features & KIWARP_FEAT_CRC))
			die(1, "device does not support MPA CRC");
		if (c->o.mpa_rev == 2 && !(q.features & KIWARP_FEAT_MPA_REV2))
			die(1, "device does not support MPA revision 2");
	}
	p->mpa_rev = (uint8_t)c->o.mpa_rev;
	p->flags = c->o.crc ? KIWARP_CONN_CRC : KIWARP_CONN_NO_CRC;
	if (c->o.markers)
		p->flags |= KIWARP_CONN_MARKERS;
	if (c->o.p2p) {
		p->flags |= KIWARP_CONN_P2P;
		p->rtr = KIWARP_RTR_WRITE;
		if (kw_query(c->dev, &q) == 0 && !(q.features & KIWARP_FEAT_RTR_WRITE))
			p->rtr = (q.features & KIWARP_FEAT_RTR_READ) ?
				 KIWARP_RTR_READ : KIWARP_RTR_SEND;
	}
	p->ird = rd;
	p->ord = rd;
}

static void pdata_fill(struct ctx *c, struct pdata *d, uint32_t max_size)
{
	memset(d, 0, sizeof(*d));
	d->magic = htonl(PD_MAGIC);
	d->version = PD_VERSION;
	d->test = (uint8_t)c->o.test;
	d->mode = (uint8_t)c->o.mode;
	d->flags = (c->o.verify ? PDF_VERIFY : 0) | (c->o.sweep ? PDF_SWEEP : 0);
	d->max_size = htonl(max_size);
	d->iters = htonl(c->o.iters);
	d->window = htonl(c->o.window);
	d->rkey = htonl(c->rmr->stag);
	d->addr = htonll((uintptr_t)c->rbuf);
	d->len = htonll(c->rmr->length);
}

static int pdata_parse(const uint8_t *buf, uint32_t len, struct pdata *d)
{
	if (len < sizeof(*d))
		return -1;
	memcpy(d, buf, sizeof(*d));
	if (ntohl(d->magic) != PD_MAGIC || d->version != PD_VERSION)
		return -1;
	d->max_size = ntohl(d->max_size);
	d->iters = ntohl(d->iters);
	d->window = ntohl(d->window);
	d->rkey = ntohl(d->rkey);
	d->addr = ntohll(d->addr);
	d->len = ntohll(d->len);
	return 0;
}

static void after_connect(struct ctx *c, const struct kiwarp_conn_param *neg)
{
	struct kiwarp_query_qp q = { 0 };

	c->neg = *neg;
	if (kw_query_qp(c->qp, &q) == 0) {
		c->mulpdu = q.mulpdu;
		if (q.param.mpa_rev)
			c->neg = q.param;
	}
	info("connected: MPA rev %u, CRC %s, markers %s, MULPDU %u%s\n",
	     c->neg.mpa_rev, (c->neg.flags & KIWARP_CONN_CRC) ? "on" : "off",
	     (c->neg.flags & KIWARP_CONN_MARKERS) ? "on" : "off",
	     c->mulpdu, (q.flags & KIWARP_QPQ_OOO) ?
	     ", out-of-order placement" : "");
}

static int tcp_listen_accept(int port)
{
	struct sockaddr_in6 a;
	int one = 1, ls, fd;

	ls = socket(AF_INET6, SOCK_STREAM, 0);
	if (ls < 0)
		die(1, "socket: %s", strerror(errno));
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(&a, 0, sizeof(a));
	a.sin6_family = AF_INET6;
	a.sin6_port = htons((uint16_t)port);
	a.sin6_addr = in6addr_any;
	if (bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 1))
		die(1, "bind/listen port %d: %s", port, strerror(errno));
	info("waiting for a client on port %d\n", port);
	fd = accept(ls, NULL, NULL);
	if (fd < 0)
		die(1, "accept: %s", strerror(errno));
	close(ls);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static int tcp_connect(const char *host, int port)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res, *ai;
	char portstr[16];
	int fd = -1, one = 1, ret;

	snprintf(portstr, sizeof(portstr), "%d", port);
	ret = getaddrinfo(host, portstr, &hints, &res);
	if (ret)
		die(1, "%s: %s", host, gai_strerror(ret));
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
		if (fd < 0)
			continue;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		die(1, "connect %s:%d: %s", host, port, strerror(errno));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static uint32_t first_size(struct ctx *c)
{
	return c->o.sweep ? 1 : c->o.size;
}

static int run_server(struct ctx *c)
{
	struct kw_conn_request req;
	struct kw_conn_result res;
	struct kw_conn_param param;
	struct pdata peer, mine;
	int fd, ret;

	fd = tcp_listen_accept(c->o.port);
	setup_device(c);
	ret = kw_accept(c->qp, fd, NULL, 0, &req);
	if (ret)
		die(1, "kw_accept: %s", strerror(-ret));
	make_param(c, &param);
	if (pdata_parse(req.pdata, req.pdata_len, &peer)) {
		kw_accept_reply(c->qp, KIWARP_REPLY_REJECT, &param, NULL, 0, NULL);
		die(1, "client private data not understood (not kiwarp-perf?)");
	}
	c->o.test = peer.test;
	c->o.mode = peer.mode;
	c->o.verify = !!(peer.flags & PDF_VERIFY);
	c->o.sweep = !!(peer.flags & PDF_SWEEP);
	c->o.size = peer.max_size;
	c->o.iters = peer.iters;
	c->o.window = peer.window;
	if (c->o.test > T_READ || c->o.mode > M_BW || !c->o.size || !c->o.iters)
		die(1, "bad configuration from client");
	/* Answer with the client's own MPA choices where we can. */
	param.mpa_rev = req.param.mpa_rev ? req.param.mpa_rev : param.mpa_rev;
	param.flags = (req.param.flags & KIWARP_CONN_P2P) |
		      ((req.param.flags & KIWARP_CONN_CRC) ? KIWARP_CONN_CRC :
						       KIWARP_CONN_NO_CRC);
	param.rtr = (param.flags & KIWARP_CONN_P2P) ? req.param.rtr : 0;
	/* a client that asks for markers gets them, and we ask too */
	if (req.param.flags & KIWARP_CONN_MARKERS_TX)
		param.flags |= KIWARP_CONN_MARKERS;
	setup_buffers(c, c->o.size);
	post_recvs(c, RQ_DEPTH);
	pdata_fill(c, &mine, c->o.size);
	ret = kw_accept_reply(c->qp, KIWARP_REPLY_ACCEPT, &param, &mine,
			      sizeof(mine), &res);
	if (ret)
		die(1, "kw_accept_reply: %s", strerror(-ret));
	/*
	 * fd stays open until exit: the ABI does not say whether the kernel
	 * holds its own reference on the converted socket.
	 */
	c->raddr = peer.addr;
	c->rkey = peer.rkey;
	c->rlen = peer.len;
	after_connect(c, &res.param);
	info("server: %s %s, size %s%u, %u iterations%s\n", test_name(c->o.test),
	     c->o.mode == M_BW ? "bw" : "lat", c->o.sweep ? "1.." : "",
	     c->o.size, c->o.iters, c->o.verify ? ", verify" : "");
	for (uint32_t s = first_size(c); s && s <= c->o.size; s *= 2) {
		server_size(c, s);
		if (!c->o.sweep)
			break;
	}
	drain_send_cq(c);
	{
		struct kiwarp_query_qp q = { 0 };

		if (!kw_query_qp(c->qp, &q) && (q.flags & KIWARP_QPQ_OOO))
			info("server: placed %llu bytes in order, %llu out of order\n",
			     (unsigned long long)q.rx_bytes,
			     (unsigned long long)q.ooo_bytes);
	}
	return 0;
}

static int run_client(struct ctx *c)
{
	struct kw_conn_result res;
	struct kw_conn_param param;
	struct pdata mine, peer;
	int fd, ret;

	fd = tcp_connect(c->o.host, c->o.port);
	setup_device(c);
	setup_buffers(c, c->o.size);
	post_recvs(c, RQ_DEPTH);
	make_param(c, &param);
	pdata_fill(c, &mine, c->o.size);
	ret = kw_connect(c->qp, fd, &param, &mine, sizeof(mine), &res);
	if (ret == -ECONNREFUSED)
		die(1, "server rejected the connection");
	if (ret)
		die(1, "kw_connect: %s", strerror(-ret));
	/* fd stays open until exit (see run_server). */
	if (pdata_parse(res.pdata, res.pdata_len, &peer))
		die(1, "server private data not understood");
	if (peer.len < c->o.size)
		die(1, "server buffer too small (%llu bytes)",
		    (unsigned long long)peer.len);
	c->raddr = peer.addr;
	c->rkey = peer.rkey;
	c->rlen = peer.len;
	c->credits = RQ_DEPTH - 1;	/* one recv kept for DONE */
	after_connect(c, &res.param);
	print_header(c);
	for (uint32_t s = first_size(c); s && s <= c->o.size; s *= 2) {
		if (c->o.mode == M_BW)
			client_bw(c, s);
		else
			client_lat(c, s);
		if (!c->o.sweep)
			break;
	}
	return 0;
}

/*
 * Orderly end of a successful run: wait for our own Sends (the last
 * control message) to complete, then close the QP and wait until the
 * kernel has drained it. Exiting with the QP still in RTS/CLOSING and
 * work queued makes the kernel reset the connection (abortive close),
 * which can drop a message the peer is still waiting for.
 */
static void finish(struct ctx *c)
{
	struct kiwarp_query_qp q;
	struct kiwarp_cqe e[32];
	double t0 = now_us();
	int n;

	while (c->sends_out > 0 && now_us() - t0 < CLOSE_TIMEOUT_MS * 1e3) {
		n = kw_poll_cq(c->scq, 32, e);
		if (n < 0)
			break;
		for (int i = 0; i < n; i++) {
			/* The exchange is complete: a flush here (peer
			 * already gone) is not a failure. */
			if (e[i].status != KIWARP_WC_SUCCESS &&
			    e[i].status != KIWARP_WC_WR_FLUSH_ERR)
				fail_cqe(c, &e[i]);
			c->sends_out--;
		}
		if (!n)
			kw_wait_cq(c->scq, 10);
	}
	kw_modify_qp(c->qp, KIWARP_MODIFY_CLOSE);
	t0 = now_us();
	while (kw_query_qp(c->qp, &q) == 0 &&
	       (q.state == KIWARP_QPS_RTS || q.state == KIWARP_QPS_CLOSING) &&
	       now_us() - t0 < CLOSE_TIMEOUT_MS * 1e3)
		usleep(1000);
}

/* A size option: bytes, or usage() if malformed or out of range. */
static uint32_t size_arg(const char *s)
{
	uint32_t v = parse_size(s, 0x80000000ULL);

	if (!v)
		usage();
	return v;
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "p2p", no_argument, NULL, 'P' },
		{ "verify", no_argument, NULL, 'V' },
		{ "json", no_argument, NULL, 'J' },
		{ "copy-max", required_argument, NULL, 'X' },
		{ "spin", required_argument, NULL, 'Y' },
		{ "markers", no_argument, NULL, 'M' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct ctx c;
	int opt, ret, iters_set = 0, size_set = 0;
	long v;

	memset(&c, 0, sizeof(c));
	c.o.port = DEFAULT_PORT;
	c.o.test = T_WRITE;
	c.o.mode = M_BW;
	c.o.window = 64;
	c.o.mpa_rev = 2;
	c.o.copy_max = -1;
	c.o.spin = -1;
	while ((opt = getopt_long(argc, argv, "sc:p:t:m:S:an:w:Cr:qh", lopts,
				  NULL)) != -1) {
		switch (opt) {
		case 's': c.o.server = 1; break;
		case 'c': c.o.host = optarg; break;
		case 'p':
			v = strtol(optarg, NULL, 10);
			if (v <= 0 || v > 65535)
				usage();
			c.o.port = (int)v;
			break;
		case 't':
			if (!strcmp(optarg, "send")) c.o.test = T_SEND;
			else if (!strcmp(optarg, "write")) c.o.test = T_WRITE;
			else if (!strcmp(optarg, "read")) c.o.test = T_READ;
			else usage();
			break;
		case 'm':
			if (!strcmp(optarg, "lat")) c.o.mode = M_LAT;
			else if (!strcmp(optarg, "bw")) c.o.mode = M_BW;
			else usage();
			break;
		case 'S': c.o.size = size_arg(optarg); size_set = 1; break;
		case 'a': c.o.sweep = 1; break;
		case 'n':
			v = strtol(optarg, NULL, 10);
			if (v <= 0 || v > 100000000)
				usage();
			c.o.iters = (uint32_t)v;
			iters_set = 1;
			break;
		case 'w':
			v = strtol(optarg, NULL, 10);
			if (v <= 0 || v > SQ_DEPTH / 2)
				usage();
			c.o.window = (uint32_t)v;
			break;
		case 'C': c.o.crc = 1; break;
		case 'r':
			v = strtol(optarg, NULL, 10);
			if (v != 1 && v != 2)
				usage();
			c.o.mpa_rev = (int)v;
			break;
		case 'P': c.o.p2p = 1; break;
		case 'M': c.o.markers = 1; break;
		case 'V': c.o.verify = 1; break;
		case 'J': c.o.json = 1; break;
		case 'X':
			c.o.copy_max = parse_size(optarg, UINT32_MAX);
			if (!c.o.copy_max && strcmp(optarg, "0"))
				usage();
			break;
		case 'Y': {
			char *end;

			v = strtol(optarg, &end, 10);
			if (end == optarg || *end || v < -1 || v > 100000000)
				usage();
			c.o.spin = v;
			break;
		}
		case 'q': c.o.quiet = 1; break;
		default: usage();
		}
	}
	if (optind != argc || c.o.server == !!c.o.host)
		usage();
	if (c.o.p2p && c.o.mpa_rev != 2)
		die(2, "--p2p needs MPA revision 2");
	if (!size_set)
		c.o.size = c.o.sweep ? 8u << 20 : (c.o.mode == M_BW ? 65536 : 2);
	if (!iters_set)
		c.o.iters = c.o.mode == M_BW ? 5000 : 1000;
	quiet = c.o.quiet || c.o.json;
	json_out = c.o.json;
	ret = c.o.server ? run_server(&c) : run_client(&c);
	finish(&c);
	return ret;
}
