// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * es-peer: the other end of rdma-core's rstream (librdmacm/examples), as
 * an ordinary TCP socket switched to IWARP_MODE (kiwarp extended sockets).
 * It runs rstream's "custom" test with -T v: a 16-byte sync each way
 * (client first), then ITERS rounds of COUNT transfers of SIZE bytes from
 * the client and COUNT back from the server; the bytes of each direction
 * follow one running counter (mod 256) and are checked on receipt.
 *
 *   es-peer (--client ADDR | --server ADDR) --port P --size S
 *           [--count C] [--iters I] [--plain] [--nonblock] [--zc-recv]
 *
 * --plain skips the switch (the peer is `rstream -T s`, plain sockets).
 * --zc-recv receives each transfer into registered memory with
 * IWARP_RECV_ZC (the peer's Writes land in it, past the bytes already
 * due through the receive buffer, 128 KiB): at least one byte must.
 * Exit 0 when every byte was right; prints "es-peer: ok ..." with the
 * IWARP_INFO counters that show the bytes went over iWARP.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/kiwarp.h>

#ifndef TCP_ULP
#define TCP_ULP 31
#endif

static uint8_t tx_data, rx_data;
static long long rx_total;
static int nonblock, zc_recv;

/*
 * IWARP_RECV_ZC of the whole transfer: *limit becomes the bytes to recv()
 * before the rest lands in place (size when it was refused: EAGAIN).
 */
static int zc_post(int fd, uint8_t *buf, size_t size, size_t *limit)
{
	struct iwarp_recv_zc r = { .addr = (uintptr_t)buf, .len = size };
	socklen_t l = sizeof(r);

	*limit = size;
	if (getsockopt(fd, SOL_IWARP, IWARP_RECV_ZC, &r, &l))
		return errno == EAGAIN ? 0 : -1;
	*limit = r.pre;
	return 1;
}

/* ... and its result, once the bytes before it were read */
static int zc_wait(int fd, size_t want)
{
	struct iwarp_recv_zc_done d;
	socklen_t l = sizeof(d);
	int i;

	for (i = 0; i < 300; i++) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (!getsockopt(fd, SOL_IWARP, IWARP_RECV_ZC_DONE, &d, &l))
			break;
		if (errno != EAGAIN) {
			perror("es-peer: IWARP_RECV_ZC_DONE");
			return -1;
		}
		poll(&p, 1, 100);
	}
	if (i == 300 || d.error || d.bytes != want) {
		fprintf(stderr, "es-peer: zero-copy receive: %llu of %zu bytes, "
			"error %u\n", i == 300 ? 0ULL :
			(unsigned long long)d.bytes, want, i == 300 ? ETIMEDOUT :
			d.error);
		return -1;
	}
	return 0;
}

static int xfer(int fd, uint8_t *buf, size_t size, int out)
{
	size_t off = 0, i, limit = size;
	int zc = 0;

	if (out)
		for (i = 0; i < size; i++)
			buf[i] = tx_data++;
	if (!out && zc_recv && (zc = zc_post(fd, buf, size, &limit)) < 0) {
		perror("es-peer: IWARP_RECV_ZC");
		return -1;
	}
	while (off < limit) {
		ssize_t n;

		if (nonblock) {
			struct pollfd p = { .fd = fd,
					    .events = out ? POLLOUT : POLLIN };

			if (poll(&p, 1, 30000) != 1) {
				fprintf(stderr, "es-peer: poll timed out\n");
				return -1;
			}
		}
		n = out ? send(fd, buf + off, size - off, MSG_NOSIGNAL) :
			  recv(fd, buf + off, limit - off, 0);
		if (n > 0) {
			off += n;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		fprintf(stderr, "es-peer: %s after %zu of %zu bytes: %s\n",
			out ? "send" : "recv", off, size,
			n ? strerror(errno) : "end of stream");
		return -1;
	}
	if (zc && zc_wait(fd, size - limit))
		return -1;
	if (!out)
		for (i = 0; i < size; i++, rx_total++)
			if (buf[i] != rx_data++) {
				fprintf(stderr, "es-peer: byte %lld is %u, not %u\n",
					rx_total, buf[i], (uint8_t)(rx_data - 1));
				return -1;
			}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "client", 1, 0, 'c' }, { "server", 1, 0, 's' },
		{ "port", 1, 0, 'p' }, { "size", 1, 0, 'S' },
		{ "count", 1, 0, 'C' }, { "iters", 1, 0, 'I' },
		{ "plain", 0, 0, 'P' }, { "nonblock", 0, 0, 'n' },
		{ "zc-recv", 0, 0, 'z' }, { 0, 0, 0, 0 }
	};
	struct sockaddr_in a = { .sin_family = AF_INET };
	const char *addr = NULL;
	int client = 0, plain = 0, port = 7471, size = 64, count = 1;
	int iters = 1, op, fd, one = 1, i, t, buf_sz = 1 << 18;
	struct iwarp_info info;
	socklen_t len;
	uint8_t *buf;

	while ((op = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (op) {
		case 'c': client = 1; addr = optarg; break;
		case 's': client = 0; addr = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 'S': size = atoi(optarg); break;
		case 'C': count = atoi(optarg); break;
		case 'I': iters = atoi(optarg); break;
		case 'P': plain = 1; break;
		case 'n': nonblock = 1; break;
		case 'z': zc_recv = 1; break;
		default: return 2;
		}
	}
	if (!addr || size < 16 || count < 1 || iters < 1 ||
	    (zc_recv && (plain || nonblock)))
		return 2;
	buf = mmap(NULL, size, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		return 1;
	a.sin_port = htons(port);
	if (inet_pton(AF_INET, addr, &a.sin_addr) != 1)
		return 2;
	if (client) {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(fd, (void *)&a, sizeof(a))) {
			perror("es-peer: connect");
			return 1;
		}
	} else {
		int l = socket(AF_INET, SOCK_STREAM, 0);

		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(l, (void *)&a, sizeof(a)) || listen(l, 1)) {
			perror("es-peer: listen");
			return 1;
		}
		/* the connection accepted from it wears the ULP: passive */
		if (!plain && setsockopt(l, IPPROTO_TCP, TCP_ULP,
					 KIWARP_ULP_NAME, 6)) {
			perror("es-peer: TCP_ULP on the listener");
			return 1;
		}
		printf("es-peer: listening on %s:%d\n", addr, port);
		fflush(stdout);
		fd = accept(l, NULL, NULL);
		close(l);
		if (fd < 0) {
			perror("es-peer: accept");
			return 1;
		}
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf_sz, sizeof(buf_sz));
	if (!zc_recv)	/* (zero copy: the default 128 KiB) */
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf_sz, sizeof(buf_sz));
	if (!plain) {
		int mode = IWARP_MODE_AUTO;

		if (client && setsockopt(fd, IPPROTO_TCP, TCP_ULP,
					 KIWARP_ULP_NAME, 6)) {
			perror("es-peer: TCP_ULP");
			return 1;
		}
		if (setsockopt(fd, SOL_IWARP, IWARP_MODE, &mode, sizeof(mode))) {
			perror("es-peer: IWARP_MODE");
			return 1;
		}
	}
	if (zc_recv) {
		struct iwarp_mreg r = { .addr = (uintptr_t)buf, .len = size };

		if (setsockopt(fd, SOL_IWARP, IWARP_MREG, &r, sizeof(r))) {
			perror("es-peer: IWARP_MREG");
			return 1;
		}
	}
	if (nonblock)
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	/* rstream's sync_test, then run_test */
	if (xfer(fd, buf, 16, client) || xfer(fd, buf, 16, !client))
		return 1;
	for (i = 0; i < iters; i++) {
		for (t = 0; t < count; t++)
			if (xfer(fd, buf, size, client))
				return 1;
		for (t = 0; t < count; t++)
			if (xfer(fd, buf, size, !client))
				return 1;
	}
	memset(&info, 0, sizeof(info));
	len = sizeof(info);
	if (!plain && getsockopt(fd, SOL_IWARP, IWARP_INFO, &info, &len)) {
		perror("es-peer: IWARP_INFO");
		return 1;
	}
	printf("es-peer: ok: %s, %d x %d x %d bytes each way, %lld bytes "
	       "verified; iWARP state %u, MPA rev %u, CRC %u, tx %llu rx %llu"
	       " (in place %llu)\n",
	       client ? "client" : "server", iters, count, size,
	       rx_total, info.state, info.mpa_rev, info.crc,
	       (unsigned long long)info.tx_bytes,
	       (unsigned long long)info.rx_bytes,
	       (unsigned long long)info.zc_rx_bytes);
	if (zc_recv && !info.zc_rx_bytes) {
		fprintf(stderr, "es-peer: nothing was received in place\n");
		return 1;
	}
	if (!plain && (info.state != IWARP_STATE_RUN ||
		       info.rx_bytes != (unsigned long long)rx_total ||
		       info.tx_bytes != (unsigned long long)rx_total)) {
		fprintf(stderr, "es-peer: the bytes did not all go over iWARP\n");
		return 1;
	}
	shutdown(fd, SHUT_RDWR);
	close(fd);
	munmap(buf, size);
	return 0;
}
