// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * rdmacm-scale: connection setup rate over rdma_cm (upstream siw in the
 * benchmark), the counterpart of kiwarp-scale -t setup. Bench-only: built
 * with the tools, not installed.
 *
 *   server: rdmacm-scale -s [-p PORT] [-q]
 *   client: rdmacm-scale -c ADDR [-p PORT] -t setup -N COUNT [--json]
 *
 * The client makes COUNT connections one after the other, each with its
 * own QP (PD and CQ shared), and times each from before its cm_id is
 * created to RDMA_CM_EVENT_ESTABLISHED (the server has accepted by then);
 * teardown is outside the time. The server accepts COUNT (told in the
 * private data of the first) and exits; 60 s without an event is an error.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

#include "perf-util.h"

#define DEFAULT_PORT	18700
#define TIMEOUT_MS	60000

static int json;

static void die(const char *what, int err)
{
	fprintf(stderr, "rdmacm-scale: %s: %s\n", what,
		err ? strerror(err) : "error");
	if (json)
		printf("{\"tool\":\"rdmacm-scale\",\"status\":\"error\","
		       "\"message\":\"%s\"}\n", what);
	exit(1);
}

/* The next event on ch, which must be of type want. */
static struct rdma_cm_event *wait_event(struct rdma_event_channel *ch,
					enum rdma_cm_event_type want)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	if (poll(&pfd, 1, TIMEOUT_MS) <= 0)
		die("no rdma_cm event within 60 s", ETIMEDOUT);
	if (rdma_get_cm_event(ch, &ev))
		die("rdma_get_cm_event", errno);
	if (ev->event != want) {
		fprintf(stderr, "rdmacm-scale: event %s (status %d), wanted %s\n",
			rdma_event_str(ev->event), ev->status,
			rdma_event_str(want));
		die("unexpected rdma_cm event", EPROTO);
	}
	return ev;
}

static void qp_attr(struct ibv_qp_init_attr *a, struct ibv_cq *cq)
{
	memset(a, 0, sizeof(*a));
	a->send_cq = a->recv_cq = cq;
	a->qp_type = IBV_QPT_RC;
	a->cap.max_send_wr = a->cap.max_recv_wr = 4;
	a->cap.max_send_sge = a->cap.max_recv_sge = 1;
}

static int server(int port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct pollfd pfd;
	struct rdma_cm_id *ls;
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq = NULL;
	uint32_t n = 0, gone = 0, reqs = 0;

	if (!ch || rdma_create_id(ch, &ls, NULL, RDMA_PS_TCP))
		die("rdma_create_id", errno);
	sin.sin_port = htons((uint16_t)port);
	if (rdma_bind_addr(ls, (struct sockaddr *)&sin) || rdma_listen(ls, 1024))
		die("rdma_bind_addr/rdma_listen", errno);
	pfd = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
	/* requests, establishments and the client's disconnects interleave */
	while (!n || gone < n) {
		struct rdma_cm_event *ev;
		struct rdma_cm_id *id;

		if (poll(&pfd, 1, TIMEOUT_MS) <= 0)
			die("no rdma_cm event within 60 s", ETIMEDOUT);
		if (rdma_get_cm_event(ch, &ev))
			die("rdma_get_cm_event", errno);
		id = ev->id;
		switch (ev->event) {
		case RDMA_CM_EVENT_CONNECT_REQUEST: {
			struct rdma_conn_param cp = { .responder_resources = 1,
						      .initiator_depth = 1 };
			struct ibv_qp_init_attr a;

			if (!reqs++) {
				if (ev->param.conn.private_data_len < sizeof(n))
					die("first private data", EPROTO);
				memcpy(&n, ev->param.conn.private_data, sizeof(n));
				if (!n || n > 100000)
					die("connection count", EPROTO);
				pd = ibv_alloc_pd(id->verbs);
				cq = ibv_create_cq(id->verbs, 64, NULL, NULL, 0);
				if (!pd || !cq)
					die("PD/CQ", errno);
			}
			rdma_ack_cm_event(ev);
			qp_attr(&a, cq);
			if (rdma_create_qp(id, pd, &a) || rdma_accept(id, &cp))
				die("rdma_create_qp/rdma_accept", errno);
			break;
		}
		case RDMA_CM_EVENT_ESTABLISHED:
			rdma_ack_cm_event(ev);
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			rdma_ack_cm_event(ev);
			rdma_destroy_qp(id);
			rdma_destroy_id(id);
			gone++;
			break;
		default:
			fprintf(stderr, "rdmacm-scale: event %s (status %d)\n",
				rdma_event_str(ev->event), ev->status);
			die("unexpected rdma_cm event", EPROTO);
		}
	}
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	rdma_destroy_id(ls);
	rdma_destroy_event_channel(ch);
	return 0;
}

static int client(const char *host, int port, uint32_t n)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq = NULL;
	double busy = 0;
	uint32_t i;

	if (!ch)
		die("rdma_create_event_channel", errno);
	sin.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, host, &sin.sin_addr) != 1)
		die("address (IPv4 expected)", EINVAL);
	for (i = 0; i < n; i++) {
		struct rdma_conn_param cp = { .responder_resources = 1,
					      .initiator_depth = 1,
					      .private_data = &n,
					      .private_data_len = sizeof(n) };
		struct ibv_qp_init_attr a;
		struct rdma_cm_id *id;
		double t0 = now_us();

		if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
		    rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 2000))
			die("rdma_create_id/rdma_resolve_addr", errno);
		rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
		if (rdma_resolve_route(id, 2000))
			die("rdma_resolve_route", errno);
		rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
		if (!pd) {
			pd = ibv_alloc_pd(id->verbs);
			cq = ibv_create_cq(id->verbs, 64, NULL, NULL, 0);
			if (!pd || !cq)
				die("PD/CQ", errno);
		}
		qp_attr(&a, cq);
		if (rdma_create_qp(id, pd, &a) || rdma_connect(id, &cp))
			die("rdma_create_qp/rdma_connect", errno);
		rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_ESTABLISHED));
		busy += now_us() - t0;
		rdma_disconnect(id);
		rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_DISCONNECTED));
		rdma_destroy_qp(id);
		rdma_destroy_id(id);
	}
	if (json)
		printf("{\"tool\":\"rdmacm-scale\",\"test\":\"setup\",\"transport\":\"siw\","
		       "\"conns\":%u,\"usec\":%.1f,\"conns_per_s\":%.2f,"
		       "\"includes_teardown\":false,\"status\":\"ok\"}\n",
		       n, busy, n / (busy / 1e6));
	else
		printf(" rdma_cm setup: %u connections, %.1f per second\n", n,
		       n / (busy / 1e6));
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	rdma_destroy_event_channel(ch);
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: rdmacm-scale -s [-p PORT] [-q]\n"
		"       rdmacm-scale -c ADDR [-p PORT] -t setup -N COUNT [--json]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "json", no_argument, NULL, 'J' },
		{ NULL, 0, NULL, 0 },
	};
	const char *host = NULL;
	int srv = 0, port = DEFAULT_PORT, opt;
	long n = 0;

	while ((opt = getopt_long(argc, argv, "sc:p:t:N:q", lopts, NULL)) != -1) {
		switch (opt) {
		case 's': srv = 1; break;
		case 'c': host = optarg; break;
		case 'p':
			port = atoi(optarg);
			if (port <= 0 || port > 65535)
				usage();
			break;
		case 't':
			if (strcmp(optarg, "setup"))
				usage();
			break;
		case 'N':
			n = strtol(optarg, NULL, 10);
			if (n <= 0 || n > 100000)
				usage();
			break;
		case 'J': json = 1; break;
		case 'q': break;
		default: usage();
		}
	}
	if (optind != argc || srv == !!host || (!srv && !n))
		usage();
	return srv ? server(port) : client(host, port, (uint32_t)n);
}
