// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * kiwarp-rping: the rping "ping/pong" test over libkiwarp, wire compatible
 * with rdma-core's rping (librdmacm/examples) on any iWARP stack.
 *
 * Per ping (the same messages, in the same order, as rping):
 *   client -> server  Send {addr, rkey, size} of its source buffer (16 bytes,
 *                     big-endian u64 + u32 + u32)
 *   server            RDMA Read of that buffer into its own buffer
 *   server -> client  Send (16 bytes, "go ahead")
 *   client -> server  Send {addr, rkey, size} of its sink buffer
 *   server            RDMA Write of strlen(data) + 1 bytes into the sink
 *   server -> client  Send (16 bytes, "go ahead")
 *   client            with -V: sink == source, byte for byte
 * The data is "rdma-ping-<n>: " followed by a rotating A..z pattern and a
 * final NUL, as rping builds it. Connection: MPA rev 2, IRD = ORD = 1
 * (what rping asks rdma_cm for), no private data.
 *
 * This is an independent implementation of the message sequence; it shares
 * no code with rping.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kiwarp.h"

#define PING_FMT	"rdma-ping-%d: "
/*
 * rping's minimum, as Debian's rping computes it: sizeof the unexpanded
 * stringified "INT_MAX" + sizeof(PING_FMT) = 8 + 15 = 23 ("valid range is
 * 23 to 65536"). A ping number too long for the buffer is cut by
 * snprintf, as in rping.
 */
#define MIN_SIZE	((int)sizeof("INT_MAX") + (int)sizeof(PING_FMT))
#define MAX_SIZE	(64 * 1024 - 1)

struct info {
	uint64_t buf;	/* big-endian */
	uint32_t rkey;
	uint32_t size;
} __attribute__((packed));

static int debug, verbose, validate, count, size = 64, server = -1;
static int persistent;
static const char *addr_str;
static int port = 7174;
static int mpa_rev = 2, crc, markers;
/* server: the listener's context; QPs must live in the same one */
static struct kw_device *srv_dev;

#define DBG(...) do { if (debug) printf(__VA_ARGS__); } while (0)

struct ctx {
	struct kw_device *dev;
	struct kw_pd *pd;
	struct kw_cq *cq;
	struct kw_qp *qp;
	struct info recv_buf, send_buf;
	struct kw_mr *recv_mr, *send_mr, *rdma_mr, *start_mr;
	char *rdma_buf, *start_buf;
	int disconnected;
};

static int setup(struct ctx *c)
{
	struct kw_qp_init_attr qa = { 0 };
	int ret;

	if (srv_dev)
		c->dev = srv_dev;
	ret = srv_dev ? 0 : kw_open(&c->dev);
	if (ret) {
		fprintf(stderr, "kw_open: %s (is kiwarp.ko loaded?)\n", strerror(-ret));
		return ret;
	}
	if ((ret = kw_alloc_pd(c->dev, &c->pd)) ||
	    (ret = kw_create_cq(c->dev, 32, &c->cq)))
		return ret;
	DBG("created pd %p\ncreated cq %p\n", (void *)c->pd, (void *)c->cq);
	qa.send_cq = c->cq;
	qa.recv_cq = c->cq;
	qa.sq_entries = 16;
	qa.rq_entries = 2;
	qa.max_sge = 1;
	ret = kw_create_qp(c->pd, &qa, &c->qp);
	if (ret)
		return ret;
	DBG("created qp %p\n", (void *)c->qp);
	c->rdma_buf = calloc(1, size);
	if (!server)
		c->start_buf = calloc(1, size);
	if (!c->rdma_buf || (!server && !c->start_buf))
		return -ENOMEM;
	if ((ret = kw_reg_mr(c->pd, &c->recv_buf, sizeof(c->recv_buf),
			     KIWARP_ACCESS_LOCAL_WRITE, &c->recv_mr)) ||
	    (ret = kw_reg_mr(c->pd, &c->send_buf, sizeof(c->send_buf), 0,
			     &c->send_mr)) ||
	    (ret = kw_reg_mr(c->pd, c->rdma_buf, size, KIWARP_ACCESS_ALL,
			     &c->rdma_mr)))
		return ret;
	if (!server && (ret = kw_reg_mr(c->pd, c->start_buf, size,
					KIWARP_ACCESS_ALL, &c->start_mr)))
		return ret;
	DBG("allocated & registered buffers...\n");
	return 0;
}

static void teardown(struct ctx *c)
{
	if (c->qp)
		kw_destroy_qp(c->qp);
	if (c->start_mr)
		kw_dereg_mr(c->start_mr);
	if (c->rdma_mr)
		kw_dereg_mr(c->rdma_mr);
	if (c->send_mr)
		kw_dereg_mr(c->send_mr);
	if (c->recv_mr)
		kw_dereg_mr(c->recv_mr);
	if (c->cq)
		kw_destroy_cq(c->cq);
	if (c->pd)
		kw_dealloc_pd(c->pd);
	if (c->dev && c->dev != srv_dev)
		kw_close(c->dev);
	free(c->rdma_buf);
	free(c->start_buf);
	memset(c, 0, sizeof(*c));
}

static int post_recv(struct ctx *c)
{
	struct kiwarp_sge sge = { (uintptr_t)&c->recv_buf, sizeof(c->recv_buf),
				  c->recv_mr->stag };
	struct kw_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 };
	int ret = kw_post_recv(c->qp, &wr, 1);

	return ret == 1 ? 0 : (ret < 0 ? ret : -EAGAIN);
}

static int post(struct ctx *c, uint8_t opcode, void *buf, uint32_t len,
		uint32_t lkey, uint64_t raddr, uint32_t rkey)
{
	struct kiwarp_sge sge = { (uintptr_t)buf, len, lkey };
	struct kw_send_wr wr = { .wr_id = 2 + opcode, .opcode = opcode,
				 .flags = KW_SEND_SIGNALED, .num_sge = 1,
				 .sg_list = &sge, .remote_addr = raddr,
				 .rkey = rkey };
	int ret = kw_post_send(c->qp, &wr, 1);

	return ret == 1 ? 0 : (ret < 0 ? ret : -EAGAIN);
}

/*
 * Wait for the next completion of the given opcode (KIWARP_WR_RECV, _SEND,
 * _RDMA_READ, _RDMA_WRITE); other successful completions are consumed.
 * Returns 0, 1 if the connection went away (flush), or -1 on error.
 */
static int wait_for(struct ctx *c, int opcode, struct kiwarp_cqe *out)
{
	struct kiwarp_cqe e;
	int n;

	for (;;) {
		n = kw_poll_cq(c->cq, 1, &e);
		if (n < 0)
			return -1;
		if (!n) {
			kw_req_notify_cq(c->cq, 0);
			if (kw_cq_ready(c->cq))
				continue;
			kw_wait_cq(c->cq, 1000);
			continue;
		}
		if (e.status == KIWARP_WC_WR_FLUSH_ERR) {
			c->disconnected = 1;
			DBG("%s flushed\n", kw_wr_opcode_str(e.opcode));
			return 1;
		}
		if (e.status) {
			fprintf(stderr, "cq completion failed status %d (%s)",
				e.status, kw_wc_status_str(e.status));
			if (e.term.valid)
				fprintf(stderr, ", terminate %s",
					kw_term_str(e.term.layer, e.term.etype,
						    e.term.ecode));
			fprintf(stderr, "\n");
			return -1;
		}
		switch (e.opcode) {
		case KIWARP_WR_SEND:
			DBG("send completion\n");
			break;
		case KIWARP_WR_RDMA_WRITE:
			DBG("rdma write completion\n");
			break;
		case KIWARP_WR_RDMA_READ:
			DBG("rdma read completion\n");
			break;
		case KIWARP_WR_RECV:
			DBG("recv completion\n");
			if (e.byte_len != sizeof(struct info)) {
				fprintf(stderr, "Received bogus data, size %u\n",
					e.byte_len);
				return -1;
			}
			break;
		}
		if (e.opcode == opcode) {
			if (out)
				*out = e;
			return 0;
		}
	}
}

/*
 * After a failure: the QP's state, its byte counts and any Terminate, so a
 * failed run says whether kiwarp or its peer ended the connection.
 */
static void report_qp(struct ctx *c)
{
	const struct kiwarp_term_info *t;
	struct kiwarp_query_qp q;
	int i;

	if (!c->qp || kw_query_qp(c->qp, &q))
		return;
	fprintf(stderr, "qp: state %s, payload tx %llu rx %llu\n",
		kw_qp_state_str(q.state), (unsigned long long)q.tx_bytes,
		(unsigned long long)q.rx_bytes);
	for (i = 0; i < 2; i++) {
		t = i ? &q.term_rcvd : &q.term_sent;
		if (t->valid)
			fprintf(stderr, "qp: Terminate %s: %s\n",
				i ? "received" : "sent",
				kw_term_str(t->layer, t->etype, t->ecode));
	}
}

static void format_send(struct ctx *c, char *buf, struct kw_mr *mr)
{
	c->send_buf.buf = htobe64((uint64_t)(uintptr_t)buf);
	c->send_buf.rkey = htobe32(mr->stag);
	c->send_buf.size = htobe32(size);
	DBG("RDMA addr %" PRIx64 " rkey %x len %d\n", (uint64_t)(uintptr_t)buf,
	    mr->stag, size);
}

static int send_info(struct ctx *c)
{
	return post(c, KIWARP_WR_SEND, &c->send_buf, sizeof(c->send_buf),
		    c->send_mr->stag, 0, 0);
}

static int resolve(struct sockaddr_storage *ss, socklen_t *len)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
	char p[16];
	int ret;

	snprintf(p, sizeof(p), "%d", port);
	ret = getaddrinfo(addr_str ? addr_str : "0.0.0.0", p, &hints, &res);
	if (ret) {
		printf("getaddrinfo failed (%s) - invalid hostname or IP address\n",
		       gai_strerror(ret));
		return -1;
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

static int test_server(struct ctx *c)
{
	struct kiwarp_cqe e;
	uint64_t raddr;
	uint32_t rkey, rlen;
	int ret;

	for (;;) {
		/* Wait for the client's source advertisement. */
		ret = wait_for(c, KIWARP_WR_RECV, &e);
		if (ret)
			return ret > 0 ? 0 : -1;
		rkey = be32toh(c->recv_buf.rkey);
		raddr = be64toh(c->recv_buf.buf);
		rlen = be32toh(c->recv_buf.size);
		DBG("Received rkey %x addr %" PRIx64 " len %u from peer\n", rkey,
		    raddr, rlen);
		if (post_recv(c))
			return -1;
		if (rlen > (uint32_t)size) {
			fprintf(stderr, "peer size %u exceeds -S %d\n", rlen, size);
			return -1;
		}
		DBG("server received sink adv\n");
		ret = post(c, KIWARP_WR_RDMA_READ, c->rdma_buf, rlen,
			   c->rdma_mr->stag, raddr, rkey);
		if (ret) {
			fprintf(stderr, "post send error %d\n", ret);
			return -1;
		}
		DBG("server posted rdma read req \n");
		ret = wait_for(c, KIWARP_WR_RDMA_READ, NULL);
		if (ret)
			return ret > 0 ? 0 : -1;
		DBG("server received read complete\n");
		if (verbose)
			printf("server ping data: %s\n", c->rdma_buf);
		/* go ahead */
		if (send_info(c))
			return -1;
		DBG("server posted go ahead\n");

		/* Wait for the client's sink advertisement. */
		ret = wait_for(c, KIWARP_WR_RECV, &e);
		if (ret)
			return ret > 0 ? 0 : -1;
		rkey = be32toh(c->recv_buf.rkey);
		raddr = be64toh(c->recv_buf.buf);
		rlen = be32toh(c->recv_buf.size);
		DBG("Received rkey %x addr %" PRIx64 " len %u from peer\n", rkey,
		    raddr, rlen);
		if (post_recv(c))
			return -1;
		DBG("server received sink adv\n");
		rlen = strnlen(c->rdma_buf, size - 1) + 1;
		DBG("rdma write from lkey %x laddr %" PRIx64 " len %u\n",
		    c->rdma_mr->stag, (uint64_t)(uintptr_t)c->rdma_buf, rlen);
		ret = post(c, KIWARP_WR_RDMA_WRITE, c->rdma_buf, rlen,
			   c->rdma_mr->stag, raddr, rkey);
		if (ret) {
			fprintf(stderr, "post send error %d\n", ret);
			return -1;
		}
		ret = wait_for(c, KIWARP_WR_RDMA_WRITE, NULL);
		if (ret)
			return ret > 0 ? 0 : -1;
		DBG("server rdma write complete \n");
		if (send_info(c))
			return -1;
		DBG("server posted go ahead\n");
	}
}


/*
 * Client step: advertise buf to the server, wait for its "go ahead" (the
 * stage we wait in is named like rping's), repost the receive.
 */
static int advertise(struct ctx *c, char *buf, struct kw_mr *mr,
		     const char *stage)
{
	int ret;

	format_send(c, buf, mr);
	if (send_info(c)) {
		fprintf(stderr, "post send error\n");
		return -1;
	}
	ret = wait_for(c, KIWARP_WR_RECV, NULL);
	if (ret) {
		fprintf(stderr, "wait for %s: %s\n", stage,
			ret > 0 ? "disconnected" : "error");
		return -1;
	}
	return post_recv(c);
}

static int test_client(struct ctx *c)
{
	int ping, start = 65, cc, i;
	unsigned char ch;

	for (ping = 0; !count || ping < count; ping++) {
		cc = snprintf(c->start_buf, size, PING_FMT, ping);
		for (i = cc, ch = start; i < size; i++) {
			c->start_buf[i] = ch++;
			if (ch > 122)
				ch = 65;
		}
		if (++start > 122)
			start = 65;
		c->start_buf[size - 1] = 0;

		/* source buffer: the server RDMA-Reads it */
		if (advertise(c, c->start_buf, c->start_mr, "RDMA_WRITE_ADV"))
			return -1;
		/* sink buffer: the server RDMA-Writes it back */
		if (advertise(c, c->rdma_buf, c->rdma_mr,
			      "RDMA_WRITE_COMPLETE"))
			return -1;
		if (validate && memcmp(c->start_buf, c->rdma_buf, size)) {
			fprintf(stderr, "data mismatch!\n");
			return -1;
		}
		if (verbose)
			printf("ping data: %s\n", c->rdma_buf);
		fflush(stdout);
	}
	return 0;
}

static struct kw_conn_param conn_param(void)
{
	struct kw_conn_param p = { 0 };

	p.mpa_rev = mpa_rev;
	p.flags = (crc ? KIWARP_CONN_CRC : KIWARP_CONN_NO_CRC) |
		  (markers ? KIWARP_CONN_MARKERS : 0);
	p.ird = 1;
	p.ord = 1;
	return p;
}

static int run_client(void)
{
	struct sockaddr_storage ss;
	struct kw_conn_param p = conn_param();
	struct kw_conn_result res;
	struct ctx c = { 0 };
	socklen_t len;
	int ret;

	if (resolve(&ss, &len))
		return EINVAL;
	ret = setup(&c);
	if (ret) {
		fprintf(stderr, "setup failed: %s\n", strerror(-ret));
		goto out;
	}
	ret = post_recv(&c);
	if (ret)
		goto out;
	ret = kw_connect_addr(c.qp, (struct sockaddr *)&ss, len, &p, NULL, 0,
			      &res);
	if (ret) {
		fprintf(stderr, "connect error %d (%s)\n", ret, strerror(-ret));
		goto out;
	}
	DBG("rdma_connect successful (MPA rev %u, CRC %s, IRD %u ORD %u)\n",
	    res.param.mpa_rev, res.param.flags & KIWARP_CONN_CRC ? "on" : "off",
	    res.param.ird, res.param.ord);
	ret = test_client(&c);
	if (ret) {
		fprintf(stderr, "rping client failed: %d\n", ret);
		report_qp(&c);
	}
	kw_modify_qp(c.qp, KIWARP_MODIFY_CLOSE);
	/* let the close reach the peer before the QP is torn down */
	usleep(50000);
out:
	teardown(&c);
	return ret ? 1 : 0;
}

static int serve_one(struct kw_listener *l)
{
	struct kw_conn_param p = conn_param();
	struct kw_conn_request req;
	struct kw_conn_result res;
	struct ctx c = { 0 };
	int ret;

	ret = setup(&c);
	if (ret) {
		fprintf(stderr, "setup_qp failed: %s\n", strerror(-ret));
		goto out;
	}
	ret = post_recv(&c);
	if (ret)
		goto out;
	ret = kw_accept(c.qp, -1, l, 0, &req);
	if (ret) {
		fprintf(stderr, "accept error %d (%s)\n", ret, strerror(-ret));
		goto out;
	}
	DBG("accepting client connection request\n");
	p.mpa_rev = req.param.mpa_rev;
	ret = kw_accept_reply(c.qp, KIWARP_REPLY_ACCEPT, &p, NULL, 0, &res);
	if (ret) {
		fprintf(stderr, "connect error %d (%s)\n", ret, strerror(-ret));
		goto out;
	}
	ret = test_server(&c);
	if (c.disconnected)
		fprintf(stderr, "server DISCONNECT EVENT...\n");
	if (ret) {
		fprintf(stderr, "rping server failed: %d\n", ret);
		report_qp(&c);
	}
	kw_modify_qp(c.qp, KIWARP_MODIFY_CLOSE);
out:
	teardown(&c);
	return ret ? 1 : 0;
}

static int run_server(void)
{
	struct sockaddr_storage ss;
	struct kw_device *dev;
	struct kw_listener *l;
	socklen_t len;
	int ret;

	if (resolve(&ss, &len))
		return EINVAL;
	ret = kw_open(&dev);
	if (ret) {
		fprintf(stderr, "kw_open: %s (is kiwarp.ko loaded?)\n",
			strerror(-ret));
		return 1;
	}
	srv_dev = dev;
	ret = kw_listen(dev, (struct sockaddr *)&ss, len, 3, &l);
	if (ret) {
		fprintf(stderr, "rdma_bind_addr: %s\n", strerror(-ret));
		kw_close(dev);
		return 1;
	}
	DBG("rdma_bind_addr successful\nrdma_listen\n");
	do {
		ret = serve_one(l);
	} while (persistent);
	kw_destroy_listener(l);
	kw_close(dev);
	return ret;
}

static void usage(const char *name)
{
	const char *b = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;

	printf("%s -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n", b);
	printf("%s -c [-vVd] [-S size] [-C count] -a addr [-p port]\n", b);
	printf("\t-c\t\tclient side\n");
	printf("\t-s\t\tserver side\n");
	printf("\t-v\t\tdisplay ping data to stdout\n");
	printf("\t-V\t\tvalidate ping data\n");
	printf("\t-d\t\tdebug printfs\n");
	printf("\t-S size \tping data size\n");
	printf("\t-C count\tping count times\n");
	printf("\t-a addr\t\taddress\n");
	printf("\t-p port\t\tport\n");
	printf("\t-P\t\tpersistent server mode (one connection at a time)\n");
	printf("\t-R rev\t\tMPA revision 1 or 2 (kiwarp only; default 2)\n");
	printf("\t-K\t\tuse MPA CRC (kiwarp only; without -K this tool declines\n\t\t\tit, like rping over siw by default)\n");
	printf("\t-M\t\task the peer for MPA markers (kiwarp only; siw refuses)\n");
}

int main(int argc, char **argv)
{
	int op, ret = 0;

	opterr = 0;
	while ((op = getopt(argc, argv, "a:I:Pp:C:S:t:scvVdqR:KM")) != -1) {
		switch (op) {
		case 'a': addr_str = optarg; break;
		case 'I': break;	/* source address: kernel's choice */
		case 'P': persistent = 1; break;
		case 'p': port = atoi(optarg); DBG("port %d\n", port); break;
		case 's': server = 1; DBG("server\n"); break;
		case 'c': server = 0; DBG("client\n"); break;
		case 'S':
			size = atoi(optarg);
			if (size < MIN_SIZE || size > MAX_SIZE) {
				fprintf(stderr, "Invalid size %d (valid range is %d to %d)\n",
					size, MIN_SIZE, MAX_SIZE + 1);
				ret = EINVAL;
			} else {
				DBG("size %d\n", size);
			}
			break;
		case 'C':
			count = atoi(optarg);
			if (count < 0) {
				fprintf(stderr, "Invalid count %d\n", count);
				ret = EINVAL;
			} else {
				DBG("count %d\n", count);
			}
			break;
		case 'v': verbose++; DBG("verbose\n"); break;
		case 'V': validate++; DBG("validate data\n"); break;
		case 'd': debug++; break;
		case 'q': break;	/* QPs are always self-managed here */
		case 't': break;	/* type of service: not applicable */
		case 'R': mpa_rev = atoi(optarg); break;
		case 'K': crc = 1; break;
		case 'M': markers = 1; break;
		default:
			usage("kiwarp-rping");
			return EINVAL;
		}
	}
	if (ret)
		return ret;
	if (server == -1 || (mpa_rev != 1 && mpa_rev != 2)) {
		usage("kiwarp-rping");
		return EINVAL;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	return server ? run_server() : run_client();
}
