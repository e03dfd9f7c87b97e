// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * Unit tests for libkiwarp that need no kernel: ring arithmetic, WQE
 * construction, CQ polling and argument validation, using fake in-memory
 * rings (kw__test_init_qp/cq, hidden symbols reached through libkiwarp.a).
 * Output is TAP, followed by "N passed, N failed".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kw_internal.h"

static int npass, nfail, ntest;

#define CHECK(cond, ...) do {						\
	ntest++;							\
	if (cond) {							\
		npass++;						\
		printf("ok %d - ", ntest);				\
	} else {							\
		nfail++;						\
		printf("not ok %d - ", ntest);				\
	}								\
	printf(__VA_ARGS__);						\
	printf("\n");							\
	if (!(cond))							\
		printf("#   failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
} while (0)

#define SQ_N 8
#define RQ_N 4
#define CQ_N 8

struct fake {
	uint32_t sq_prod, sq_cons, rq_prod, rq_cons;
	struct kiwarp_wqe sq[SQ_N];
	struct kiwarp_wqe rq[RQ_N];
	struct kw_qp qp;
};

static void fake_qp(struct fake *f, uint32_t start, uint32_t max_sge)
{
	memset(f, 0xa5, sizeof(*f));	/* garbage: WQEs must be fully written */
	f->sq_prod = f->sq_cons = start;
	f->rq_prod = f->rq_cons = start;
	kw__test_init_qp(&f->qp, max_sge, &f->sq_prod, &f->sq_cons, f->sq,
			 SQ_N, &f->rq_prod, &f->rq_cons, f->rq, RQ_N);
}

static int all_zero(const void *p, size_t len)
{
	const unsigned char *b = p;

	while (len--)
		if (*b++)
			return 0;
	return 1;
}

static struct kiwarp_sge sges[KIWARP_MAX_SGE + 1];

static void init_sges(void)
{
	for (int i = 0; i <= KIWARP_MAX_SGE; i++) {
		sges[i].addr = 0x1000ULL * (i + 1) + 0x100000000ULL;
		sges[i].length = 100 + i;
		sges[i].lkey = 0xabc00 + i;
	}
}

static int sge_match(const struct kiwarp_wqe *w, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (memcmp(&w->sge[i], &sges[i], sizeof(sges[i])))
			return 0;
	return all_zero(&w->sge[n], (KIWARP_MAX_SGE - n) * sizeof(w->sge[0]));
}

static void test_sq_space(void)
{
	struct fake f;
	struct kw_send_wr wr[SQ_N + 1];
	int ret;

	fake_qp(&f, 0, 2);
	memset(wr, 0, sizeof(wr));
	for (int i = 0; i <= SQ_N; i++) {
		wr[i].opcode = KIWARP_WR_SEND;
		wr[i].wr_id = i;
	}
	CHECK(kw_sq_space(&f.qp) == SQ_N, "empty SQ has %d free slots", SQ_N);
	CHECK(kw_post_send(&f.qp, wr, 0) == 0 && f.sq_prod == 0 &&
	      f.qp.doorbells == 0, "posting 0 WRs is a no-op without doorbell");
	ret = kw_post_send(&f.qp, wr, SQ_N + 1);
	CHECK(ret == -ENOMEM, "n > ring size: -ENOMEM (got %d)", ret);
	ret = kw_post_send(&f.qp, wr, 5);
	CHECK(ret == 5 && f.sq_prod == 5 && f.qp.doorbells == 1,
	      "post 5: returns 5, prod 5, one doorbell");
	ret = kw_post_send(&f.qp, wr, 4);
	CHECK(ret == -EAGAIN && f.sq_prod == 5 && f.qp.doorbells == 1,
	      "post 4 with 3 free: -EAGAIN, ring untouched (got %d)", ret);
	ret = kw_post_send(&f.qp, wr, 3);
	CHECK(ret == 3 && f.sq_prod == 8 && kw_sq_space(&f.qp) == 0,
	      "fill to exactly full");
	ret = kw_post_send(&f.qp, wr, 1);
	CHECK(ret == -EAGAIN, "full SQ: -EAGAIN");
	f.sq_cons = 2;	/* "kernel" consumed two */
	CHECK(kw_sq_space(&f.qp) == 2, "after cons += 2: 2 free");
	ret = kw_post_send(&f.qp, &wr[8], 1);
	CHECK(ret == 1 && f.sq[0].wr_id == 8 && f.sq_prod == 9,
	      "slot reuse: index 8 lands in slot 0");
}

static void test_sq_wrap(void)
{
	struct fake f;
	struct kw_send_wr wr[6];
	uint32_t start = 0xfffffffdU;
	int ret, ok = 1;

	fake_qp(&f, start, 1);
	memset(wr, 0, sizeof(wr));
	for (int i = 0; i < 6; i++) {
		wr[i].opcode = KIWARP_WR_SEND;
		wr[i].wr_id = 100 + i;
	}
	CHECK(kw_sq_space(&f.qp) == SQ_N, "empty SQ at 0x%x", start);
	ret = kw_post_send(&f.qp, wr, 6);
	CHECK(ret == 6 && f.sq_prod == 3, "post 6 across 2^32: prod wraps to 3");
	for (uint32_t i = 0; i < 6; i++)
		if (f.sq[(start + i) & (SQ_N - 1)].wr_id != 100 + i)
			ok = 0;
	CHECK(ok, "WQEs in slots (start + i) & mask across the wrap");
	CHECK(kw_sq_space(&f.qp) == 2, "space 2 with prod < cons numerically");
	f.sq_cons = 1;	/* consumed 4, cons wrapped too */
	CHECK(kw_sq_space(&f.qp) == 6, "space 6 after cons wraps");
	ret = kw_post_send(&f.qp, wr, 6);
	CHECK(ret == 6 && f.sq_prod == 9 && kw_sq_space(&f.qp) == 0,
	      "refill after wrap");
	ret = kw_post_send(&f.qp, wr, 1);
	CHECK(ret == -EAGAIN, "full after wrap: -EAGAIN");
	f.sq_cons = f.sq_prod + 5;	/* bogus: kernel "consumed" unposted WRs */
	CHECK(kw_sq_space(&f.qp) == 0 && kw_post_send(&f.qp, wr, 1) == -EAGAIN,
	      "cons ahead of prod: no space, nothing overwritten");
}

static void test_opcodes(void)
{
	struct fake f;
	struct kw_send_wr wr;
	const struct kiwarp_wqe *w;
	int ret;

	fake_qp(&f, 0, KIWARP_MAX_SGE);

	/* Plain Send with all SGEs, signaled + fence. */
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 0x1122334455667788ULL;
	wr.opcode = KIWARP_WR_SEND;
	wr.flags = KW_SEND_SIGNALED | KW_SEND_FENCE;
	wr.num_sge = KIWARP_MAX_SGE;
	wr.sg_list = sges;
	wr.inv_stag = 0xdead;		/* must be ignored */
	wr.remote_addr = 0xbeef;	/* must be ignored */
	wr.rkey = 0xfeed;		/* must be ignored */
	ret = kw_post_send(&f.qp, &wr, 1);
	w = &f.sq[0];
	CHECK(ret == 1 && w->wr_id == wr.wr_id && w->opcode == KIWARP_WR_SEND &&
	      w->flags == (KIWARP_WR_SIGNALED | KIWARP_WR_FENCE) &&
	      w->num_sge == KIWARP_MAX_SGE && sge_match(w, KIWARP_MAX_SGE) &&
	      w->inv_stag == 0 && w->remote_addr == 0 && w->rkey == 0 &&
	      w->reserved0 == 0 && w->reserved1 == 0,
	      "SEND: wr_id, flags, %d SGEs, unused fields zero", KIWARP_MAX_SGE);

	wr.opcode = KIWARP_WR_SEND_SE;
	wr.flags = 0;
	wr.num_sge = 1;
	ret = kw_post_send(&f.qp, &wr, 1);
	w = &f.sq[1];
	CHECK(ret == 1 && w->opcode == KIWARP_WR_SEND_SE && w->flags == 0 &&
	      w->num_sge == 1 && sge_match(w, 1) && w->inv_stag == 0,
	      "SEND_SE: opcode, 1 SGE, rest of SGE array zero");

	wr.opcode = KIWARP_WR_SEND_INV;
	wr.inv_stag = 0x12345678;
	ret = kw_post_send(&f.qp, &wr, 1);
	w = &f.sq[2];
	CHECK(ret == 1 && w->opcode == KIWARP_WR_SEND_INV &&
	      w->inv_stag == 0x12345678 && w->rkey == 0 && w->remote_addr == 0,
	      "SEND_INV: inv_stag set");

	wr.opcode = KIWARP_WR_SEND_SE_INV;
	wr.inv_stag = 0x87654321;
	ret = kw_post_send(&f.qp, &wr, 1);
	w = &f.sq[3];
	CHECK(ret == 1 && w->opcode == KIWARP_WR_SEND_SE_INV &&
	      w->inv_stag == 0x87654321, "SEND_SE_INV: inv_stag set");

	wr.opcode = KIWARP_WR_RDMA_WRITE;
	wr.num_sge = 3;
	wr.remote_addr = 0x7fff00001000ULL;
	wr.rkey = 0xcafe;
	ret = kw_post_send(&f.qp, &wr, 1);
	w = &f.sq[4];
	CHECK(ret == 1 && w->opcode == KIWARP_WR_RDMA_WRITE &&
	      w->remote_addr == 0x7fff00001000ULL && w->rkey == 0xcafe &&
	      w->inv_stag == 0 && w->num_sge == 3 && sge_match(w, 3),
	      "RDMA_WRITE: remote_addr, rkey, 3 SGEs, no inv_stag");

	wr.opcode = KIWARP_WR_RDMA_READ;
	wr.num_sge = 1;
	wr.flags = KW_SEND_SIGNALED;
	ret = kw_post_send(&f.qp, &wr, 1);
	w = &f.sq[5];
	CHECK(ret == 1 && w->opcode == KIWARP_WR_RDMA_READ &&
	      w->remote_addr == 0x7fff00001000ULL && w->rkey == 0xcafe &&
	      w->num_sge == 1 && sge_match(w, 1) &&
	      w->flags == KIWARP_WR_SIGNALED,
	      "RDMA_READ: remote_addr, rkey, one sink SGE");

	wr.opcode = KIWARP_WR_LOCAL_INV;
	wr.num_sge = 0;
	wr.sg_list = NULL;
	wr.inv_stag = 0x55aa;
	ret = kw_post_send(&f.qp, &wr, 1);
	w = &f.sq[6];
	CHECK(ret == 1 && w->opcode == KIWARP_WR_LOCAL_INV &&
	      w->inv_stag == 0x55aa && w->num_sge == 0 && sge_match(w, 0) &&
	      w->remote_addr == 0 && w->rkey == 0,
	      "LOCAL_INV: inv_stag, no SGE, no remote fields");
	CHECK(f.sq_prod == 7 && f.qp.doorbells == 7,
	      "one doorbell per post call");
}

static void test_rejects(void)
{
	struct fake f;
	struct kw_send_wr wr[2];
	struct kw_recv_wr rwr;
	int ret;

	fake_qp(&f, 0, 2);
	memset(wr, 0, sizeof(wr));
	wr[0].opcode = KIWARP_WR_SEND;
	wr[0].num_sge = 3;
	wr[0].sg_list = sges;
	ret = kw_post_send(&f.qp, wr, 1);
	CHECK(ret == -EINVAL && f.sq_prod == 0 && f.qp.doorbells == 0,
	      "num_sge 3 > QP max_sge 2: -EINVAL, nothing posted");

	fake_qp(&f, 0, KIWARP_MAX_SGE);
	memset(wr, 0, sizeof(wr));
	wr[0].opcode = KIWARP_WR_SEND;
	wr[0].num_sge = KIWARP_MAX_SGE + 1;
	wr[0].sg_list = sges;
	CHECK(kw_post_send(&f.qp, wr, 1) == -EINVAL,
	      "num_sge > KIWARP_MAX_SGE: -EINVAL");

	wr[0].num_sge = 1;
	wr[0].sg_list = NULL;
	CHECK(kw_post_send(&f.qp, wr, 1) == -EINVAL,
	      "num_sge 1 with NULL sg_list: -EINVAL");

	wr[0].sg_list = sges;
	wr[0].opcode = KIWARP_WR_RDMA_READ;
	wr[0].num_sge = 2;
	CHECK(kw_post_send(&f.qp, wr, 1) == -EINVAL,
	      "RDMA_READ with 2 SGEs: -EINVAL");

	wr[0].opcode = KIWARP_WR_LOCAL_INV;
	wr[0].num_sge = 1;
	CHECK(kw_post_send(&f.qp, wr, 1) == -EINVAL,
	      "LOCAL_INV with an SGE: -EINVAL");

	wr[0].opcode = KIWARP_WR_RECV;
	wr[0].num_sge = 1;
	CHECK(kw_post_send(&f.qp, wr, 1) == -EINVAL,
	      "RECV opcode on the send queue: -EINVAL");

	wr[0].opcode = 99;
	CHECK(kw_post_send(&f.qp, wr, 1) == -EINVAL, "unknown opcode: -EINVAL");

	wr[0].opcode = KIWARP_WR_SEND;
	wr[0].flags = 0x80;
	CHECK(kw_post_send(&f.qp, wr, 1) == -EINVAL, "unknown flag: -EINVAL");

	/* All or nothing: the second WR is bad, the first is not posted. */
	wr[0].flags = 0;
	wr[1] = wr[0];
	wr[1].num_sge = KIWARP_MAX_SGE + 1;
	ret = kw_post_send(&f.qp, wr, 2);
	CHECK(ret == -EINVAL && f.sq_prod == 0 && f.qp.doorbells == 0,
	      "batch with a bad 2nd WR: nothing posted");
	CHECK(kw_post_send(NULL, wr, 1) == -EINVAL &&
	      kw_post_send(&f.qp, NULL, 1) == -EINVAL,
	      "NULL qp / NULL wr: -EINVAL");

	memset(&rwr, 0, sizeof(rwr));
	rwr.num_sge = KIWARP_MAX_SGE + 1;
	rwr.sg_list = sges;
	CHECK(kw_post_recv(&f.qp, &rwr, 1) == -EINVAL && f.rq_prod == 0,
	      "recv num_sge > max: -EINVAL");
}

static void test_recv(void)
{
	struct fake f;
	struct kw_recv_wr rwr[RQ_N + 1];
	int ret, ok = 1;

	fake_qp(&f, 0xfffffffeU, 2);
	memset(rwr, 0, sizeof(rwr));
	for (int i = 0; i <= RQ_N; i++) {
		rwr[i].wr_id = 500 + i;
		rwr[i].num_sge = i & 1 ? 2 : 0;
		rwr[i].sg_list = sges;
	}
	ret = kw_post_recv(&f.qp, rwr, RQ_N + 1);
	CHECK(ret == -ENOMEM, "recv n > ring: -ENOMEM");
	ret = kw_post_recv(&f.qp, rwr, RQ_N);
	CHECK(ret == RQ_N && f.rq_prod == 2 && f.qp.doorbells == 0,
	      "post %d recvs across 2^32, no doorbell (the kernel pulls)",
	      RQ_N);
	for (uint32_t i = 0; i < RQ_N; i++) {
		const struct kiwarp_wqe *w = &f.rq[(0xfffffffeU + i) & (RQ_N - 1)];

		if (w->wr_id != 500 + i || w->opcode != KIWARP_WR_RECV ||
		    w->flags != 0 || w->num_sge != rwr[i].num_sge ||
		    !sge_match(w, w->num_sge) || w->inv_stag || w->rkey ||
		    w->remote_addr)
			ok = 0;
	}
	CHECK(ok, "recv WQEs: opcode RECV, flags 0, SGEs copied, rest zero");
	CHECK(kw_post_recv(&f.qp, rwr, 1) == -EAGAIN, "full RQ: -EAGAIN");
	CHECK(f.sq_prod == 0xfffffffeU, "recv posting leaves the SQ alone");
}

static void test_cq(void)
{
	uint32_t prod, cons;
	struct kiwarp_cqe ring[CQ_N], out[CQ_N * 2];
	struct kw_cq cq;
	int ret, ok;

	memset(ring, 0, sizeof(ring));
	prod = cons = 0xfffffffaU;
	kw__test_init_cq(&cq, &prod, &cons, ring, CQ_N);
	CHECK(kw_poll_cq(&cq, 4, out) == 0 && cons == 0xfffffffaU,
	      "empty CQ polls 0, cons unchanged");
	for (uint32_t i = 0; i < 7; i++) {
		struct kiwarp_cqe *c = &ring[(prod + i) & (CQ_N - 1)];

		c->wr_id = 1000 + i;
		c->opcode = KIWARP_WR_RECV;
		c->byte_len = i;
		c->qp = 7;
	}
	__atomic_store_n(&prod, prod + 7, __ATOMIC_RELEASE);
	CHECK(kw_cq_ready(&cq) == 7 && prod == 1, "7 ready across 2^32");
	ret = kw_poll_cq(&cq, 3, out);
	CHECK(ret == 3 && out[0].wr_id == 1000 && out[2].wr_id == 1002 &&
	      cons == 0xfffffffdU, "poll 3: oldest first, cons advanced by 3");
	ret = kw_poll_cq(&cq, 16, out);
	ok = ret == 4;
	for (int i = 0; ok && i < 4; i++)
		ok = out[i].wr_id == 1003U + i && out[i].byte_len == 3U + i;
	CHECK(ok && cons == 1 && cq.ring.head == 1,
	      "poll 16 returns the remaining 4, cons wraps to 1");
	CHECK(kw_poll_cq(&cq, 0, NULL) == 0, "poll n=0 with NULL out: 0");
	CHECK(kw_poll_cq(&cq, 1, NULL) == -EINVAL, "poll n=1 NULL out: -EINVAL");
	/* A corrupt producer (more than the ring) never reads beyond it. */
	prod = cons + 1000;
	ret = kw_poll_cq(&cq, CQ_N * 2, out);
	CHECK(ret == CQ_N, "bogus prod clamps to ring size (got %d)", ret);
}

/* Threaded: a fake "kernel" produces CQEs while we consume them. */
#define STREAM_N 2000000U
static uint32_t t_prod, t_cons;
static struct kiwarp_cqe t_ring[CQ_N];

static void *producer(void *arg)
{
	uint32_t p = *(uint32_t *)arg;

	for (uint32_t i = 0; i < STREAM_N; i++) {
		/* Wait for space: acquire pairs with the consumer's release. */
		while ((uint32_t)(p - __atomic_load_n(&t_cons, __ATOMIC_ACQUIRE)) >= CQ_N)
			;
		t_ring[p & (CQ_N - 1)].wr_id = i;
		t_ring[p & (CQ_N - 1)].byte_len = i ^ 0x5a5a5a5a;
		p++;
		__atomic_store_n(&t_prod, p, __ATOMIC_RELEASE);
	}
	return NULL;
}

static void test_cq_threaded(void)
{
	struct kw_cq cq;
	struct kiwarp_cqe out[5];
	pthread_t th;
	uint32_t start = 0xffff0000U, next = 0;
	int ok = 1, ret;

	t_prod = t_cons = start;
	kw__test_init_cq(&cq, &t_prod, &t_cons, t_ring, CQ_N);
	pthread_create(&th, NULL, producer, &start);
	while (next < STREAM_N && ok) {
		ret = kw_poll_cq(&cq, 5, out);
		for (int i = 0; i < ret; i++, next++)
			if (out[i].wr_id != next ||
			    out[i].byte_len != (next ^ 0x5a5a5a5a))
				ok = 0;
	}
	pthread_join(th, NULL);
	CHECK(ok && next == STREAM_N && t_cons == start + STREAM_N,
	      "%u CQEs streamed through an %d-entry ring across 2^32, in order",
	      STREAM_N, CQ_N);
}

static void test_geometry(void)
{
	size_t w = sizeof(struct kiwarp_wqe), c = sizeof(struct kiwarp_cqe);

	CHECK(kw__ring_geometry_ok(64, 0, 64, 4096, 4096 + 64 * w, w),
	      "geometry: header page + ring accepted");
	CHECK(!kw__ring_geometry_ok(48, 0, 64, 4096, 1 << 20, w),
	      "geometry: non power-of-two entries rejected");
	CHECK(!kw__ring_geometry_ok(0, 0, 64, 4096, 1 << 20, w),
	      "geometry: zero entries rejected");
	CHECK(!kw__ring_geometry_ok(64, 0, 64, 4096, 4096 + 64 * w - 1, w),
	      "geometry: ring past mapping end rejected");
	CHECK(!kw__ring_geometry_ok(64, 2, 64, 4096, 1 << 20, w),
	      "geometry: misaligned prod rejected");
	CHECK(!kw__ring_geometry_ok(64, 0, 0, 4096, 1 << 20, w),
	      "geometry: prod == cons rejected");
	CHECK(!kw__ring_geometry_ok(64, 4096 + 8, 0, 4096, 1 << 20, c),
	      "geometry: index inside the ring rejected");
	CHECK(!kw__ring_geometry_ok(0x80000000U, 0, 64, 128, 1ULL << 37, w),
	      "geometry: huge ring larger than mapping rejected");
}

static void test_strings(void)
{
	CHECK(!strcmp(kw_term_str(0, 2, 6),
		      "RDMAP remote operation error: unexpected opcode"),
	      "term 0/2/0x06: %s", kw_term_str(0, 2, 6));
	CHECK(!strcmp(kw_term_str(1, 2, 2),
		      "DDP untagged buffer error: invalid MSN, no buffer available"),
	      "term 1/2/0x02: %s", kw_term_str(1, 2, 2));
	CHECK(!strcmp(kw_term_str(2, 0, 2), "MPA error: CRC error"),
	      "term 2/0/0x02: %s", kw_term_str(2, 0, 2));
	CHECK(!strcmp(kw_term_str(0, 0, 0x42), "RDMAP local catastrophic error"),
	      "term 0/0/any: local catastrophic");
	CHECK(!strcmp(kw_term_str(1, 1, 0x77), "DDP tagged buffer error"),
	      "term unknown code falls back to type");
	CHECK(!strcmp(kw_term_str(9, 9, 9), "unknown Terminate layer"),
	      "term unknown layer");
	CHECK(!strcmp(kw_wc_status_str(KIWARP_WC_WR_FLUSH_ERR),
		      "work request flushed") &&
	      !strcmp(kw_wc_status_str(200), "unknown status"),
	      "wc status strings");
	CHECK(!strcmp(kw_qp_state_str(KIWARP_QPS_RTS), "RTS") &&
	      !strcmp(kw_qp_state_str(77), "UNKNOWN") &&
	      !strcmp(kw_wr_opcode_str(KIWARP_WR_RDMA_READ), "RDMA_READ"),
	      "qp state / opcode strings");
}

static void test_args(void)
{
	struct kw_device *dev = (void *)1;
	struct kw_pd pd = { 0 }, *pdp = (void *)1;
	struct kw_cq cq = { 0 }, *cqp = (void *)1;
	struct kw_mr *mrp = (void *)1;
	struct kw_qp *qpp = (void *)1;
	struct kw_qp_init_attr attr;
	char buf[64];
	int ret;

	errno = 4242;
	ret = kw_open_path("/nonexistent/kiwarp", &dev);
	CHECK(ret == -ENOENT && dev == NULL && errno == 4242,
	      "open missing device: -ENOENT, *devp NULL, errno preserved");
	errno = 4242;
	ret = kw_open_path("/dev/null", &dev);
	CHECK(ret == -ENOTTY && dev == NULL && errno == 4242,
	      "open /dev/null: QUERY ioctl -ENOTTY, errno preserved (got %d)",
	      ret);
	CHECK(kw_open(NULL) == -EINVAL && kw_close(NULL) == -EINVAL &&
	      kw_query(NULL, NULL) == -EINVAL && kw_device_fd(NULL) == -EINVAL,
	      "NULL device arguments: -EINVAL");
	CHECK(kw_alloc_pd(NULL, &pdp) == -EINVAL && kw_dealloc_pd(NULL) == -EINVAL,
	      "NULL pd arguments: -EINVAL");
	CHECK(kw_reg_mr(&pd, buf, 0, 0, &mrp) == -EINVAL && mrp == NULL,
	      "reg_mr length 0: -EINVAL, *mrp NULL");
	CHECK(kw_reg_mr(&pd, NULL, 64, 0, &mrp) == -EINVAL,
	      "reg_mr NULL addr: -EINVAL");
	CHECK(kw_reg_mr(&pd, buf, 64, 0x100, &mrp) == -EINVAL,
	      "reg_mr unknown access bit: -EINVAL");
	CHECK(kw_reg_mr(&pd, buf, 64, KIWARP_ACCESS_REMOTE_WRITE, &mrp) == -EINVAL,
	      "reg_mr remote write without local write: -EINVAL");
	CHECK(kw_reg_mr(&pd, (void *)~(uintptr_t)0x0f, 64,
			KIWARP_ACCESS_LOCAL_WRITE, &mrp) == -EINVAL,
	      "reg_mr wrapping range: -EINVAL");
	CHECK(kw_create_cq(NULL, 1, &cqp) == -EINVAL && cqp == (void *)1,
	      "create_cq NULL device: -EINVAL");
	memset(&attr, 0, sizeof(attr));
	attr.send_cq = attr.recv_cq = &cq;
	attr.sq_entries = attr.rq_entries = 16;
	attr.max_sge = KIWARP_MAX_SGE + 1;
	CHECK(kw_create_qp(&pd, &attr, &qpp) == -EINVAL && qpp == NULL,
	      "create_qp max_sge > KIWARP_MAX_SGE: -EINVAL");
	attr.max_sge = 1;
	attr.recv_cq = NULL;
	CHECK(kw_create_qp(&pd, &attr, &qpp) == -EINVAL,
	      "create_qp without recv_cq: -EINVAL");
	attr.recv_cq = &cq;
	attr.sq_entries = 0;
	CHECK(kw_create_qp(&pd, &attr, &qpp) == -EINVAL,
	      "create_qp sq_entries 0: -EINVAL");
	{
		struct fake f;

		fake_qp(&f, 0, 1);
		CHECK(kw_modify_qp(&f.qp, 99) == -EINVAL &&
		      kw_connect(&f.qp, -1, NULL, NULL, 0, NULL) == -EBADF &&
		      kw_accept(&f.qp, -1, NULL, 0, NULL) == -EINVAL &&
		      kw_accept_reply(&f.qp, 5, NULL, NULL, 0, NULL) == -EINVAL,
		      "QP control calls reject bad arguments");
	}
	CHECK(kw_listen(NULL, NULL, 0, 1, NULL) == -EINVAL &&
	      kw_listener_port(NULL) == -EINVAL &&
	      kw_destroy_listener(NULL) == -EINVAL,
	      "listener NULL arguments: -EINVAL");
}

int main(void)
{
	init_sges();
	test_sq_space();
	test_sq_wrap();
	test_opcodes();
	test_rejects();
	test_recv();
	test_cq();
	test_cq_threaded();
	test_geometry();
	test_strings();
	test_args();
	printf("1..%d\n", ntest);
	printf("%d passed, %d failed\n", npass, nfail);
	return nfail ? 1 : 0;
}
