// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * A plain TCP program: the server greets, then the client sends a 1 MiB
 * buffer 16 times; the server checks each and answers "ok". iowrite.c is
 * the same program with one-sided writes (diff -u stream.c iowrite.c).
 *
 *   stream -l PORT      server
 *   stream HOST PORT    client
 */
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SIZE	(1 << 20)
#define ROUNDS	16

static int all(int fd, void *p, size_t n, int rd)
{
	char *b = p;

	while (n) {
		ssize_t r = rd ? read(fd, b, n) : write(fd, b, n);

		if (r <= 0)
			return -1;
		b += r;
		n -= r;
	}
	return 0;
}

static void pattern(unsigned char *b, int round)
{
	for (size_t i = 0; i < SIZE; i++)
		b[i] = (unsigned char)(i * 31 + round);
}

static int serve(int fd)
{
	unsigned char *buf = malloc(SIZE), *want = malloc(SIZE);

	if (all(fd, "hi", 2, 0))
		return 1;
	for (int round = 0; round < ROUNDS; round++) {
		if (all(fd, buf, SIZE, 1))
			return 1;
		pattern(want, round);
		if (memcmp(buf, want, SIZE) || all(fd, "ok", 2, 0))
			return 1;
	}
	return 0;
}

static int send_all(int fd)
{
	unsigned char *buf = malloc(SIZE);
	char ok[2];

	if (all(fd, ok, 2, 1))	/* the greeting */
		return 1;
	for (int round = 0; round < ROUNDS; round++) {
		pattern(buf, round);
		if (all(fd, buf, SIZE, 0) || all(fd, ok, 2, 1))
			return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai;
	int fd, one = 1, ret;

	if (argc != 3)
		return fprintf(stderr, "usage: %s -l PORT | HOST PORT\n", argv[0]), 2;
	if (!strcmp(argv[1], "-l")) {
		struct sockaddr_in a = { .sin_family = AF_INET,
					 .sin_port = htons(atoi(argv[2])) };
		int l = socket(AF_INET, SOCK_STREAM, 0);

		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(l, (void *)&a, sizeof(a)) || listen(l, 1) ||
		    (fd = accept(l, NULL, NULL)) < 0)
			return perror("server"), 1;
		ret = serve(fd);
	} else {
		if (getaddrinfo(argv[1], argv[2], &hints, &ai))
			return fprintf(stderr, "%s: unknown host\n", argv[1]), 1;
		fd = socket(ai->ai_family, SOCK_STREAM, 0);
		if (connect(fd, ai->ai_addr, ai->ai_addrlen))
			return perror("connect"), 1;
		ret = send_all(fd);
	}
	printf("%s: %s, %d x %d bytes\n", argv[0], ret ? "FAILED" : "ok",
	       ROUNDS, SIZE);
	close(fd);
	return ret;
}
