// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * tcp-perf: plain-TCP baseline for kiwarp-perf (same options, same JSON).
 *
 *   server: tcp-perf -s [-p PORT]
 *   client: tcp-perf -c HOST [-p PORT] [-t send|write|read] [-m lat|bw]
 *                    [-S SIZE] [-n ITERS] [--verify] [--json] [-q]
 *
 * What each test moves over one TCP connection (TCP_NODELAY):
 *   send/write bw   client write()s ITERS messages of SIZE bytes, the server
 *                   read()s them all and answers one byte; time = first
 *                   write .. answer (like kiwarp-perf: post .. completion).
 *   read bw         client sends one byte, the server write()s ITERS x SIZE
 *                   bytes; time = request .. last byte received.
 *   send/write lat  ping-pong of SIZE bytes; reported time = round trip / 2
 *                   (like kiwarp-perf and ib_send_lat/ib_write_lat).
 *   read lat        16-byte request, SIZE-byte answer; reported time = the
 *                   full round trip (like an RDMA Read, ib_read_lat).
 * send and write are the same thing over TCP; both names exist so the
 * benchmark can pair every kiwarp run with a baseline.
 *
 * --verify (bw): every message carries the same pattern; the receiving
 * side reads each message into one buffer and checks the last one (as
 * kiwarp-perf checks its target buffer once), so the check adds no pass
 * over the data while the clock runs. The server reports its result in
 * the answer byte.
 *
 * Both sides busy-poll the socket (MSG_DONTWAIT) unless --block is given.
 * The server handles one connection and exits. Exit: 0 ok, 1 error, 2 usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "perf-util.h"

#define DEFAULT_PORT	18516
#define MAGIC		0x54435046U	/* "TCPF" */

enum test { T_SEND, T_WRITE, T_READ };
enum mode { M_LAT, M_BW };

struct hdr {
	uint32_t magic, test, mode, size, iters, verify;
} __attribute__((packed));

enum { ANS_DONE, ANS_VERIFIED, ANS_BAD };	/* bw answer byte */

static int json;
/*
 * Busy-poll (MSG_DONTWAIT + spin) by default, as kiwarp-perf and perftest
 * poll their CQs: otherwise every message costs a sleep/wakeup, which
 * under TCG is dominated by vCPU halt/IPI emulation. --block: blocking I/O.
 */
static int dflags = MSG_DONTWAIT;

static void die(const char *what)
{
	fprintf(stderr, "tcp-perf: %s: %s\n", what, errno ? strerror(errno) : "error");
	if (json)
		printf("{\"status\":\"error\",\"exit\":1,\"message\":\"%s\"}\n", what);
	exit(1);
}

static void usage(void)
{
	fprintf(stderr,
"usage: tcp-perf -s [-p PORT]\n"
"       tcp-perf -c HOST [-p PORT] [-t send|write|read] [-m lat|bw] [-S SIZE]\n"
"                [-n ITERS] [--verify] [--json] [--block] [-q]\n"
"  --verify  bw: check the data of the last message (see the file header)\n"
"  --block   blocking socket I/O (default: busy-poll with MSG_DONTWAIT)\n");
	exit(2);
}

static void xwrite(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, dflags | MSG_NOSIGNAL);

		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			die("write");
		p += n;
		len -= (size_t)n;
	}
}

static void xread(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = recv(fd, p, len, dflags);

		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n == 0) {
			errno = 0;
			die("connection closed by peer");
		}
		if (n < 0)
			die("read");
		p += n;
		len -= (size_t)n;
	}
}

/*
 * Read total bytes of messages of buflen bytes, each into buf: at the end
 * buf holds the last message whole.
 */
static void sink(int fd, char *buf, size_t buflen, uint64_t total)
{
	size_t off = 0;

	while (total) {
		size_t want = buflen - off;
		ssize_t n;

		if (want > total)
			want = (size_t)total;
		n = recv(fd, buf + off, want, dflags);

		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n == 0) {
			errno = 0;
			die("connection closed by peer");
		}
		if (n < 0)
			die("read");
		total -= (uint64_t)n;
		off = (off + (size_t)n) % buflen;
	}
}

static uint8_t pat(size_t i)
{
	return (uint8_t)(i * 7 + (i >> 9) + 1);
}

static void pat_fill(char *buf, size_t len)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (char)pat(i);
}

/* 0 if buf holds the pattern, else 1 (and says where it does not). */
static int pat_check(const char *buf, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if ((uint8_t)buf[i] != pat(i)) {
			fprintf(stderr, "tcp-perf: verify: byte %zu is 0x%02x, "
				"expected 0x%02x\n", i, (uint8_t)buf[i], pat(i));
			return 1;
		}
	}
	return 0;
}

static void nodelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static const char *tname(uint32_t t)
{
	return t == T_SEND ? "send" : t == T_WRITE ? "write" : "read";
}

static int server(int port)
{
	struct sockaddr_in6 a;
	struct hdr h;
	int one = 1, ls, fd;
	char *buf;
	char c = 0;

	ls = socket(AF_INET6, SOCK_STREAM, 0);
	if (ls < 0)
		die("socket");
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(&a, 0, sizeof(a));
	a.sin6_family = AF_INET6;
	a.sin6_port = htons((uint16_t)port);
	a.sin6_addr = in6addr_any;
	if (bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 1))
		die("bind/listen");
	fd = accept(ls, NULL, NULL);
	if (fd < 0)
		die("accept");
	close(ls);
	nodelay(fd);
	xread(fd, &h, sizeof(h));
	h.magic = ntohl(h.magic);
	h.test = ntohl(h.test);
	h.mode = ntohl(h.mode);
	h.size = ntohl(h.size);
	h.iters = ntohl(h.iters);
	h.verify = ntohl(h.verify);
	if (h.magic != MAGIC || h.test > T_READ || h.mode > M_BW || !h.size ||
	    !h.iters) {
		errno = 0;
		die("bad header from client");
	}
	buf = calloc(1, h.size);
	if (!buf)
		die("malloc");
	if (h.mode == M_BW && h.test != T_READ) {
		sink(fd, buf, h.size, (uint64_t)h.size * h.iters);
		c = !h.verify ? ANS_DONE : pat_check(buf, h.size) ? ANS_BAD :
		    ANS_VERIFIED;
		xwrite(fd, &c, 1);
	} else if (h.mode == M_BW) {
		pat_fill(buf, h.size);
		xread(fd, &c, 1);
		for (uint32_t i = 0; i < h.iters; i++)
			xwrite(fd, buf, h.size);
	} else {
		size_t req = h.test == T_READ ? 16 : h.size;

		for (uint32_t i = 0; i < h.iters; i++) {
			xread(fd, buf, req);
			xwrite(fd, buf, h.size);
		}
	}
	/* wait for the client to close first (no RST on unread data) */
	(void)!recv(fd, &c, 1, 0);
	close(fd);
	return 0;
}

static int connect_to(const char *host, int port)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res, *ai;
	char ps[16];
	int fd = -1;

	snprintf(ps, sizeof(ps), "%d", port);
	if (getaddrinfo(host, ps, &hints, &res)) {
		errno = 0;
		die("getaddrinfo");
	}
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
		die("connect");
	nodelay(fd);
	return fd;
}

static int client(const char *host, int port, uint32_t test, uint32_t mode,
		  uint32_t size, uint32_t iters, int verify, int quiet)
{
	struct hdr h = { htonl(MAGIC), htonl(test), htonl(mode), htonl(size),
			 htonl(iters), htonl(verify) };
	const char *vres = "off";
	int fd = connect_to(host, port);
	char *buf = calloc(1, size);
	char c = 0;
	double t0, t1;

	if (!buf)
		die("malloc");
	pat_fill(buf, size);
	xwrite(fd, &h, sizeof(h));
	if (mode == M_BW) {
		struct cpu_busy cb0, cb1;
		double mbps;

		cpu_busy(&cb0);
		t0 = now_us();
		if (test != T_READ) {
			for (uint32_t i = 0; i < iters; i++)
				xwrite(fd, buf, size);
			xread(fd, &c, 1);
		} else {
			xwrite(fd, &c, 1);
			memset(buf, 0, size);
			sink(fd, buf, size, (uint64_t)size * iters);
		}
		t1 = now_us();
		cpu_busy(&cb1);
		if (verify) {
			int bad = test == T_READ ? pat_check(buf, size) :
				  c != ANS_VERIFIED;

			vres = bad ? "bad" : "ok";
			if (bad) {
				errno = 0;
				die("verification failed");
			}
		}
		mbps = (double)size * iters / (t1 - t0);
		if (json) {
			printf("{\"test\":\"%s\",\"mode\":\"bw\",\"size\":%u,\"iters\":%u,"
			       "\"transport\":\"tcp\",\"bw_MBps\":%.2f,\"usec\":%.1f,",
			       tname(test), size, iters, mbps, t1 - t0);
			cpu_busy_json(&cb0, &cb1);
			printf("\"verify\":\"%s\",\"status\":\"ok\"}\n", vres);
		}
		else
			printf(" tcp %s bw: %u x %u bytes: %.2f MB/s\n", tname(test),
			       iters, size, mbps);
	} else {
		double *t = calloc(iters, sizeof(*t)), sum = 0;
		size_t req = test == T_READ ? 16 : size;

		if (!t)
			die("malloc");
		for (uint32_t i = 0; i < iters; i++) {
			t0 = now_us();
			xwrite(fd, buf, req);
			xread(fd, buf, size);
			t[i] = now_us() - t0;
			if (test != T_READ)
				t[i] /= 2;
			sum += t[i];
		}
		qsort(t, iters, sizeof(*t), cmp_double);
		if (json)
			printf("{\"test\":\"%s\",\"mode\":\"lat\",\"size\":%u,\"iters\":%u,"
			       "\"transport\":\"tcp\",\"t_min_us\":%.3f,"
			       "\"t_typical_us\":%.3f,\"t_avg_us\":%.3f,\"t_max_us\":%.3f,"
			       "\"status\":\"ok\"}\n", tname(test), size, iters, t[0],
			       t[iters / 2], sum / iters, t[iters - 1]);
		else
			printf(" tcp %s lat: %u x %u bytes: typical %.2f us, min %.2f, "
			       "avg %.2f, max %.2f\n", tname(test), iters, size,
			       t[iters / 2], t[0], sum / iters, t[iters - 1]);
		free(t);
	}
	(void)quiet;
	fflush(stdout);
	close(fd);
	free(buf);
	return 0;
}

/* A size option: bytes, or usage() if malformed or out of range. */
static uint32_t size_arg(const char *s)
{
	uint32_t v = parse_size(s, 0x40000000ULL);

	if (!v)
		usage();
	return v;
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "json", no_argument, NULL, 'J' },
		{ "block", no_argument, NULL, 'B' },
		{ "verify", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *host = NULL;
	int srv = 0, port = DEFAULT_PORT, quiet = 0, opt, size_set = 0;
	int verify = 0;
	uint32_t test = T_WRITE, mode = M_BW, size = 65536, iters = 0;
	long v;

	while ((opt = getopt_long(argc, argv, "sc:p:t:m:S:n:qh", lopts, NULL)) != -1) {
		switch (opt) {
		case 's': srv = 1; break;
		case 'c': host = optarg; break;
		case 'p':
			v = strtol(optarg, NULL, 10);
			if (v <= 0 || v > 65535)
				usage();
			port = (int)v;
			break;
		case 't':
			if (!strcmp(optarg, "send")) test = T_SEND;
			else if (!strcmp(optarg, "write")) test = T_WRITE;
			else if (!strcmp(optarg, "read")) test = T_READ;
			else usage();
			break;
		case 'm':
			if (!strcmp(optarg, "lat")) mode = M_LAT;
			else if (!strcmp(optarg, "bw")) mode = M_BW;
			else usage();
			break;
		case 'S': size = size_arg(optarg); size_set = 1; break;
		case 'n':
			v = strtol(optarg, NULL, 10);
			if (v <= 0 || v > 100000000)
				usage();
			iters = (uint32_t)v;
			break;
		case 'J': json = 1; break;
		case 'B': dflags = 0; break;
		case 'V': verify = 1; break;
		case 'q': quiet = 1; break;
		default: usage();
		}
	}
	if (optind != argc || srv == !!host)
		usage();
	if (!size_set && mode == M_LAT)
		size = 2;
	if (!iters)
		iters = mode == M_BW ? 5000 : 1000;
	if (srv)
		return server(port);
	return client(host, port, test, mode, size, iters, verify, quiet);
}
