// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * kw_peerfuzz: a hostile-peer mutation campaign against kiwarp (in the VM,
 * kiwarp.ko loaded).
 *
 * Every connection pairs a kiwarp QP (libkiwarp, MRs with guard bytes
 * around them, posted receives, a few Sends and an RDMA Write of its own)
 * with a raw TCP peer that speaks MPA/DDP/RDMAP through the user-space
 * build of the protocol core. The peer does the MPA exchange (sometimes
 * mutated), then sends a stream of valid RDMAP messages (Send, Send with
 * SE/Invalidate, Write, Read Request, Terminate) and mutates it at the
 * frame level: bit flips, MPA length, CRC, STag/TO/MSN/QN/MO, opcode and
 * version bits, Read Request fields, truncation, duplicated/dropped/
 * swapped FPDUs, garbage, slow drip, RST or half-close mid-frame. A Read
 * Request at the end ("ping") shows that kiwarp processed everything.
 *
 * The oracle, per connection:
 *  - everything the peer sent before the first mutated byte is delivered
 *    exactly (receive completions: length, data, flags; Writes; Read
 *    Responses); an unmutated connection must end clean, a mutated one
 *    with kiwarp's Terminate, a close/reset, or a stream kiwarp accepted;
 *  - kiwarp's own traffic parses cleanly at the peer and is intact;
 *  - bytes outside what the peer may write (guards, read-only MR, gaps
 *    between receive buffers) never change;
 *  - the Terminate the peer receives is the one kiwarp reports sending;
 *  - the QP reaches ERROR within a bound after the peer goes away and
 *    every posted WR completes exactly once;
 *  - at the end, pinned pages are back to the baseline.
 * Deterministic per --seed (timing aside); a watchdog fails a hang.
 *
 *   kw_peerfuzz [--seed S] [--conns N] [--seconds T] [--jobs J] [-v]
 *               [--first I]
 * Connection i is generated from (S, i) alone: --first I --conns I+1
 * replays connection I of a run.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kiwarp.h"
#include "kw_vmtest.h"
#include "iwarp.h"
#include "kw_rawpeer.h"

/* ------------------------------------------------------------ options */

static uint64_t opt_seed = 1;
static long opt_conns = 200;
static double opt_seconds = 1e9;
static int opt_jobs = 4;
static int opt_verbose;

/* ------------------------------------------------------------ random */

struct rng {
	uint64_t s;
};

static uint64_t rnd64(struct rng *r)
{
	/* splitmix64: tiny, good enough, fully determined by the seed */
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint32_t rn(struct rng *r, uint32_t n)
{
	return n ? (uint32_t)(rnd64(r) % n) : 0;
}

static bool chance(struct rng *r, unsigned pct)
{
	return rn(r, 100) < pct;
}

static uint32_t rrange(struct rng *r, uint32_t lo, uint32_t hi)
{
	return lo + rn(r, hi - lo + 1);
}

/* ------------------------------------------------------------ statistics */

enum mut_kind {
	MUT_NONE, MUT_BITFLIP, MUT_LEN, MUT_CRC, MUT_STAG, MUT_TO, MUT_MSN,
	MUT_QN, MUT_MO, MUT_OPCODE, MUT_VERSION, MUT_RSVD, MUT_RREQ,
	MUT_TRUNC, MUT_DUP, MUT_DROP, MUT_SWAP, MUT_GARBAGE, MUT_RST,
	MUT_HALFCLOSE, MUT_OVERSIZE, MUT_NOBUF, MUT_SPLIT, MUT_MERGE,
	MUT_DRIP,
	/* MPA exchange */
	MUT_MPA_KEY, MUT_MPA_RSVD, MUT_MPA_REV, MUT_MPA_PDLEN_BIG,
	MUT_MPA_PDLEN_SHORT, MUT_MPA_ENH_REV1, MUT_MPA_ENH_SHORT,
	MUT_MPA_MARKERS, MUT_MPA_IRDORD, MUT_MPA_PD, MUT_MPA_CRC,
	MUT_MPA_TRUNC, MUT_MPA_GARBAGE, MUT_MPA_REPKEY, MUT_MPA_REV1,
	MUT_NKINDS
};

static const char *const mut_name[MUT_NKINDS] = {
	"none", "bitflip", "mpa-length", "crc", "stag", "to", "msn", "qn",
	"mo", "opcode", "version", "reserved-bits", "read-request",
	"truncate", "duplicate", "drop", "swap", "garbage", "rst-mid-frame",
	"half-close", "oversize-send", "send-no-buffer", "split (benign)",
	"merge (benign)", "slow-drip (benign)",
	"mpa-key", "mpa-reserved", "mpa-revision", "mpa-pd-len>512",
	"mpa-pd-len-short", "mpa-enhanced-rev1", "mpa-enhanced-short-pd",
	"mpa-markers", "mpa-ird/ord", "mpa-private-data", "mpa-crc-flag",
	"mpa-truncated", "mpa-garbage", "mpa-reply-key", "mpa-rev1",
};

/*
 * benign: a valid stream (or valid MPA variation) delivered differently.
 * Reserved MPA flag bits, and S in a rev 1 Request (a reserved bit there),
 * are "not checked on reception" (RFC 5044 section 7.1.1).
 */
static bool mut_benign(int k)
{
	return k == MUT_NONE || k == MUT_SPLIT || k == MUT_MERGE ||
	       k == MUT_DRIP || k == MUT_MPA_IRDORD || k == MUT_MPA_PD ||
	       k == MUT_MPA_CRC || k == MUT_MPA_REV1 || k == MUT_MPA_RSVD ||
	       k == MUT_MPA_ENH_REV1 || k == MUT_MPA_MARKERS;
}

enum outcome {
	OUT_CLEAN,		/* unmutated, everything verified */
	OUT_ACCEPTED,		/* mutated, yet a valid stream: ping answered */
	OUT_TERM,		/* kiwarp's Terminate received */
	OUT_EOF,		/* kiwarp closed without a Terminate */
	OUT_RESET,		/* kiwarp reset the connection */
	OUT_SILENT,		/* kiwarp waited for more bytes; peer closed */
	OUT_PEER_RST,		/* the peer reset mid-frame */
	OUT_PEER_TERM,		/* the peer's own Terminate ended it */
	OUT_MPA_FAIL,		/* kiwarp refused the MPA exchange */
	OUT_PEER_FIN,		/* no ping: the peer half-closed, kiwarp
				 * closed in turn */
	OUT_NKINDS
};

static const char *const out_name[OUT_NKINDS] = {
	"clean", "accepted (mutation was valid)", "terminate from kiwarp",
	"closed by kiwarp (no terminate)", "reset by kiwarp",
	"silent, closed by peer", "peer reset mid-frame",
	"peer's terminate", "mpa exchange refused",
	"peer half-closed, kiwarp closed",
};

struct stats {
	long conns, failed, frames, bytes, ops, verified_ops;
	long mut[MUT_NKINDS];
	long out[OUT_NKINDS];
	long mo[MUT_NKINDS][OUT_NKINDS];	/* outcome per mutation */
	long term[3][4][256];	/* kiwarp's Terminate: layer, etype, ecode */
	long wc[16];		/* completion statuses */
};

static struct stats gstats;
static pthread_mutex_t gstats_lock = PTHREAD_MUTEX_INITIALIZER;
static long next_conn;
static double t_start, t_last_progress;
static volatile int stop_all;

/* ------------------------------------------------------------ I/O */

static void rst_close(int fd)
{
	struct linger lg = { 1, 0 };

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

/* ------------------------------------------------------------ connection */

#define ARENA		(256 * 1024)
#define MAX_OPS		12
#define MAX_RECV	12
#define MAX_READS	8
#define KW_IRD		8
#define KW_SENDS	3
#define WIRE_MAX	(512 * 1024)
#define MAX_FPDUS	4096
#define SINK_SEND_MAX	4096

enum { MR_RW, MR_RO, MR_WO, MR_INV, MR_RECV, MR_SINK, NMR };

static const uint32_t mr_access[NMR] = {
	[MR_RW] = KIWARP_ACCESS_ALL,
	[MR_RO] = KIWARP_ACCESS_REMOTE_READ,
	[MR_WO] = KIWARP_ACCESS_LOCAL_WRITE | KIWARP_ACCESS_REMOTE_WRITE,
	[MR_INV] = KIWARP_ACCESS_LOCAL_WRITE | KIWARP_ACCESS_REMOTE_WRITE,
	[MR_RECV] = KIWARP_ACCESS_LOCAL_WRITE,
	[MR_SINK] = KIWARP_ACCESS_LOCAL_WRITE,	/* kiwarp's RDMA Read sink */
};

enum op_type { OP_SEND, OP_WRITE, OP_READ, OP_TERM, OP_RRESP };

struct op {
	int type;
	uint8_t opcode;
	uint32_t len;
	uint32_t off_start, off_end;	/* in the unmutated wire */
	/* Send */
	int recv;			/* receive WR it lands in */
	uint32_t inv_stag;
	uint32_t data_off;		/* in conn.pay */
	/* Write: arena offset; Read: source arena offset */
	uint32_t arena_off;
	/* Read */
	int read_slot;
	/* Terminate */
	struct kw_term term;
};

struct recv_wr {
	struct kiwarp_sge sge[3];
	int nsge;
	uint32_t cap;
	int completions;
	struct kiwarp_cqe cqe;
};

struct read_slot {
	uint32_t sink_stag;
	uint64_t sink_to;
	uint32_t size;
	uint32_t got;			/* bytes placed */
	bool done;
	bool verify;
	bool stray;			/* bytes outside [sink_to, +size) */
	uint8_t *want;			/* expected bytes (copy) */
	uint8_t *buf;
};

struct fpdu {
	uint32_t off, len, hdr_len;
	int op;
	bool tagged;
};

struct worker;

struct conn {
	long idx;
	struct worker *w;
	struct rng r;
	char why[256];			/* first failure */
	bool failed;

	/* kiwarp side */
	struct kw_cq *cq;
	struct kw_qp *qp;
	struct kw_mr *mr[NMR];
	uint32_t mr_off[NMR], mr_len[NMR];
	int ksock, raw;
	struct recv_wr rw[MAX_RECV];
	int nrecv;
	bool recv_posted;
	bool qp_was_rts;
	int nksend;			/* kiwarp's SQ WRs */
	int kread;			/* its RDMA Read WR, or -1 */
	uint32_t kord;			/* kiwarp's negotiated ORD */
	bool kreq_seen;			/* its Read Request reached us */
	struct kw_read_req kreq;
	uint32_t ksend_off[KW_SENDS + 2], ksend_len[KW_SENDS + 2];
	uint8_t ksend_op[KW_SENDS + 2];
	int ksend_compl[KW_SENDS + 2];
	struct kiwarp_cqe ksend_cqe[KW_SENDS + 2];

	/* model of the arena */
	uint8_t *exp;			/* expected contents */
	uint8_t *care;			/* 1: must equal exp at the end */

	/* negotiated */
	struct kw_mpa_result mres;
	int mpa_mut;
	bool crc;

	/* the peer's stream */
	struct op ops[MAX_OPS + 4];
	int nops;
	struct fpdu fp[MAX_FPDUS];
	int nfp;
	uint8_t *wire;
	uint32_t wlen;
	uint8_t *pay;			/* message payloads */
	uint8_t *tmp;			/* 2 * WIRE_MAX, for mutate() */
	uint32_t paylen;
	int mut;			/* frame-level mutation */
	uint32_t first_mut;		/* offset of the first mutated byte */
	uint32_t cut;			/* stream ends here (trunc/RST/half) */
	bool inv_done;
	bool has_ping, has_term;
	struct read_slot rs[MAX_READS + 1];
	int nreads;

	/* what the peer saw */
	bool got_term;
	struct kw_term term;
	bool sink_err;
	int sink_send_seen;
	uint32_t sink_send_len[KW_SENDS + 2];
	uint8_t sink_send[KW_SENDS + 2][SINK_SEND_MAX];
	uint8_t sink_wbuf[SINK_SEND_MAX];
	uint32_t sink_wgot;
	bool sink_write_seen;
	struct kw_rx_buf sbuf;
	int outcome;
	bool write_failed;
	long frames;
};

struct worker {
	int id;
	pthread_t th;
	struct kw_device *dev;
	struct kw_pd *pd;
	int lfd;
	struct sockaddr_in addr;
	uint8_t *arena;
	struct conn c;
	struct stats st;
};

static void cfail(struct conn *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void cfail(struct conn *c, const char *fmt, ...)
{
	va_list ap;

	if (c->failed)
		return;
	c->failed = true;
	va_start(ap, fmt);
	vsnprintf(c->why, sizeof(c->why), fmt, ap);
	va_end(ap);
}

static uint8_t pattern(long conn, uint32_t i)
{
	return (uint8_t)((i * 131u) ^ (i >> 8) ^ (conn * 29u) ^ 0x5a);
}

static uint64_t mr_base(struct conn *c, int m)
{
	return (uintptr_t)c->w->arena + c->mr_off[m];
}

/* ------------------------------------------------- the peer's receiver */

static int s_lookup(void *ctx, u32 stag, u8 op, struct kw_mr_view *v)
{
	struct conn *c = ctx;
	int i;

	if (op == KW_OP_READ_RESP) {
		/* the whole TO space: a mutated Read Request may move the
		 * sink; s_place() tells the bytes we asked for from others */
		for (i = 0; i < c->nreads; i++) {
			struct read_slot *s = &c->rs[i];

			if (s->sink_stag == stag) {
				*v = (struct kw_mr_view){
					.cookie = s, .stag = stag,
					.access = 7, .valid = true, .base = 0,
					.len = ~0ULL };
				return 0;
			}
		}
	} else if (op == KW_OP_WRITE && stag == 0x77000) {
		*v = (struct kw_mr_view){ .cookie = c->sink_wbuf, .stag = stag,
					  .access = 7,
					  .valid = true, .base = 0,
					  .len = SINK_SEND_MAX };
		return 0;
	}
	/* a mutated Read Request may legitimately name any sink */
	*v = (struct kw_mr_view){ .cookie = NULL, .stag = stag,
				  .access = 7, .valid = true,
				  .base = 0, .len = ~0ULL };
	return 0;
}

static int s_getbuf(void *ctx, u32 msn, const struct kw_rx_buf **b)
{
	struct conn *c = ctx;

	if (msn < 1 || msn > KW_SENDS)
		return -ENOENT;
	c->sbuf = (struct kw_rx_buf){ .num_sge = 1, .total = SINK_SEND_MAX };
	c->sbuf.sge[0].mr = (struct kw_mr_view){
		.cookie = c->sink_send[msn - 1], .access = 7,
		.valid = true, .len = SINK_SEND_MAX };
	c->sbuf.sge[0].len = SINK_SEND_MAX;
	*b = &c->sbuf;
	return 0;
}

static void s_place(void *ctx, void *cookie, u64 off, const void *src, u32 len)
{
	struct conn *c = ctx;
	int i;

	if (!cookie)
		return;
	for (i = 0; i < c->nreads; i++) {
		struct read_slot *s = &c->rs[i];

		if (cookie != s)
			continue;
		if (off < s->sink_to || off + len > s->sink_to + s->size ||
		    off + len < off) {
			s->stray = true;	/* outside the sink we named */
			return;
		}
		memcpy(s->buf + (off - s->sink_to), src, len);
		s->got += len;
		return;
	}
	if (cookie == c->sink_wbuf) {
		memcpy(c->sink_wbuf + off, src, len);
		c->sink_wgot += len;
		return;
	}
	memcpy((uint8_t *)cookie + off, src, len);
}

static int s_done(void *ctx, const struct kw_ddp_hdr *h, const u8 *payload,
		  u32 placed, struct kw_term *t)
{
	struct conn *c = ctx;
	int i;

	(void)t;
	if (h->opcode == KW_OP_TERMINATE) {
		if (!c->got_term && !kw_term_decode(payload, placed, &c->term))
			c->got_term = true;
		else if (!c->got_term)
			cfail(c, "kiwarp sent a Terminate that does not decode");
		return 0;
	}
	if (h->opcode == KW_OP_READ_RESP && h->last) {
		for (i = 0; i < c->nreads; i++)
			if (c->rs[i].sink_stag == h->stag)
				c->rs[i].done = true;
	}
	if (h->opcode == KW_OP_READ_REQ && payload && placed == KW_READ_REQ_LEN &&
	    !c->kreq_seen) {
		kw_read_req_decode(payload, &c->kreq);
		c->kreq_seen = true;
	}
	if (h->opcode == KW_OP_WRITE && h->last && h->stag == 0x77000)
		c->sink_write_seen = true;
	if (!h->tagged && h->qn == KW_QN_SEND && h->last &&
	    h->msn >= 1 && h->msn <= KW_SENDS) {
		c->sink_send_len[h->msn - 1] = h->mo + placed;
		c->sink_send_seen++;
	}
	return 0;
}

static const struct kw_rx_ops sink_ops = {
	.lookup_stag = s_lookup, .get_rx_buf = s_getbuf, .place = s_place,
	.segment_done = s_done,
};

/* ------------------------------------------------- kiwarp side setup */

static int layout_and_register(struct conn *c)
{
	static const uint32_t base_len[NMR] = {
		[MR_RW] = 16384, [MR_RO] = 8192, [MR_WO] = 4096,
		[MR_INV] = 2048, [MR_RECV] = 0, [MR_SINK] = 6000,
	};
	uint8_t *a = c->w->arena;
	uint32_t cur = rrange(&c->r, 1, 600), i;
	int m, j, s, ret;

	for (i = 0; i < ARENA; i++)
		a[i] = pattern(c->idx, i);
	memcpy(c->exp, a, ARENA);
	memset(c->care, 1, ARENA);

	/* receive buffers first: they size the receive MR */
	c->nrecv = rrange(&c->r, 1, MAX_RECV);
	for (m = 0; m < NMR; m++) {
		c->mr_off[m] = cur;
		if (m == MR_RECV) {
			uint32_t p = cur + rn(&c->r, 64);

			for (j = 0; j < c->nrecv; j++) {
				struct recv_wr *w = &c->rw[j];

				memset(w, 0, sizeof(*w));
				w->nsge = rrange(&c->r, 1, 3);
				for (s = 0; s < w->nsge; s++) {
					uint32_t l = chance(&c->r, 10) ?
						rrange(&c->r, 1, 16) :
						rrange(&c->r, 16, 1200);

					p += rn(&c->r, 64);
					w->sge[s].addr = (uintptr_t)a + p;
					w->sge[s].length = l;
					w->cap += l;
					/* kiwarp may write these */
					memset(c->care + p, 0, l);
					p += l;
				}
			}
			c->mr_len[m] = p - cur + rn(&c->r, 64) + 1;
		} else {
			c->mr_len[m] = base_len[m] + rn(&c->r, 3000);
		}
		cur += c->mr_len[m] + rrange(&c->r, 1, 300);
	}
	if (cur > ARENA)
		return -ENOSPC;
	for (m = 0; m < NMR; m++) {
		ret = kw_reg_mr(c->w->pd, a + c->mr_off[m], c->mr_len[m],
				mr_access[m], &c->mr[m]);
		if (ret)
			return ret;
	}
	for (j = 0; j < c->nrecv; j++)
		for (s = 0; s < c->rw[j].nsge; s++)
			c->rw[j].sge[s].lkey = c->mr[MR_RECV]->stag;
	return 0;
}

static int post_recvs(struct conn *c)
{
	struct kw_recv_wr wr[MAX_RECV];
	int j, ret;

	for (j = 0; j < c->nrecv; j++)
		wr[j] = (struct kw_recv_wr){ .wr_id = 0x1000 + j,
					     .sg_list = c->rw[j].sge,
					     .num_sge = c->rw[j].nsge };
	ret = kw_post_recv(c->qp, wr, c->nrecv);
	c->recv_posted = ret == c->nrecv;
	return ret == c->nrecv ? 0 : (ret < 0 ? ret : -EIO);
}

/* kiwarp's own traffic: Sends and an RDMA Write from the read-only MR */
static int post_ksends(struct conn *c)
{
	struct kw_send_wr wr[KW_SENDS + 2];
	struct kiwarp_sge sge[KW_SENDS + 2];
	int n = rn(&c->r, KW_SENDS + 1), i, ret;
	bool wr_write = chance(&c->r, 40);
	bool wr_read = c->kord && chance(&c->r, 40);

	c->kread = -1;
	for (i = 0; i < n + wr_write; i++) {
		uint32_t len = rn(&c->r, 3000);
		uint32_t off = rn(&c->r, c->mr_len[MR_RO] - len);

		c->ksend_off[i] = c->mr_off[MR_RO] + off;
		c->ksend_len[i] = len;
		sge[i] = (struct kiwarp_sge){ mr_base(c, MR_RO) + off, len,
					      c->mr[MR_RO]->stag };
		wr[i] = (struct kw_send_wr){
			.wr_id = 0x2000 + i, .flags = KW_SEND_SIGNALED,
			.num_sge = 1, .sg_list = &sge[i],
			.opcode = i < n ? KIWARP_WR_SEND : KIWARP_WR_RDMA_WRITE };
		if (i == n) {
			wr[i].rkey = 0x77000;
			wr[i].remote_addr = 0;
		}
		c->ksend_op[i] = wr[i].opcode;
	}
	c->nksend = n + wr_write;
	if (wr_read) {
		/* an RDMA Read of the peer: it answers (maybe mutated) */
		uint32_t len = chance(&c->r, 5) ? 0 : rrange(&c->r, 1, 4096);
		uint32_t off = rn(&c->r, c->mr_len[MR_SINK] - len + 1);

		i = c->kread = c->nksend++;
		c->ksend_off[i] = c->mr_off[MR_SINK] + off;
		c->ksend_len[i] = len;
		c->ksend_op[i] = KIWARP_WR_RDMA_READ;
		sge[i] = (struct kiwarp_sge){ mr_base(c, MR_SINK) + off, len,
					      c->mr[MR_SINK]->stag };
		wr[i] = (struct kw_send_wr){
			.wr_id = 0x2000 + i, .flags = KW_SEND_SIGNALED,
			.num_sge = 1, .sg_list = &sge[i],
			.opcode = KIWARP_WR_RDMA_READ,
			.rkey = 0x88000 + rn(&c->r, 0x1000),
			.remote_addr = rnd64(&c->r) >> 16 };
		/* kiwarp writes there */
		memset(c->care + c->ksend_off[i], 0, len);
	}
	if (!c->nksend)
		return 0;
	ret = kw_post_send(c->qp, wr, c->nksend);
	return ret == c->nksend ? 0 : (ret < 0 ? ret : -EIO);
}

/* ------------------------------------------------- MPA exchange */

static int pick_mpa_mut(struct rng *r)
{
	static const int kinds[] = {
		MUT_MPA_KEY, MUT_MPA_RSVD, MUT_MPA_REV, MUT_MPA_PDLEN_BIG,
		MUT_MPA_PDLEN_SHORT, MUT_MPA_ENH_REV1, MUT_MPA_ENH_SHORT,
		MUT_MPA_MARKERS, MUT_MPA_IRDORD, MUT_MPA_PD, MUT_MPA_CRC,
		MUT_MPA_TRUNC, MUT_MPA_GARBAGE, MUT_MPA_REPKEY, MUT_MPA_REV1,
	};
	int k;

	if (!chance(r, 18))
		return MUT_NONE;
	k = kinds[rn(r, sizeof(kinds) / sizeof(kinds[0]))];
	/* the one that costs an ACCEPT timeout: rarely */
	if (k == MUT_MPA_PDLEN_SHORT && !chance(r, 15))
		k = MUT_MPA_PD;
	return k;
}

/*
 * Raw initiator side of the MPA exchange; kiwarp's ACCEPT runs in this
 * thread after the Request is queued on its socket. Returns 0 when both
 * ends are in RTS, 1 when kiwarp (rightly) refused, <0 on a harness error.
 */
static int mpa_exchange(struct conn *c)
{
	struct kw_mpa_cfg cfg = { .rev = 2, .crc = chance(&c->r, 60),
				  .ird = 4, .ord = MAX_READS };
	struct kw_conn_param kp = { .mpa_rev = 2, .ird = KW_IRD,
				    .ord = rn(&c->r, 3) };
	struct kw_conn_request req;
	struct kw_conn_result res;
	struct kw_mpa_frame f, rep;
	uint8_t buf[KW_MPA_HDR_LEN + 1024], hdr[KW_MPA_HDR_LEN], pd[600];
	int len, ret, k = c->mpa_mut, timeout = 3000;
	uint16_t pdl = 0;
	bool must_fail = !mut_benign(k);

	/* mostly explicit; sometimes the default (CRC) */
	kp.flags |= chance(&c->r, 40) ? KIWARP_CONN_CRC :
		    chance(&c->r, 80) ? KIWARP_CONN_NO_CRC : 0;
	if (k == MUT_MPA_REV1)
		cfg.rev = 1;
	if (k == MUT_MPA_IRDORD) {
		cfg.ird = chance(&c->r, 50) ? 0 : rn(&c->r, KW_MPA_V2_MASK + 1);
		cfg.ord = chance(&c->r, 50) ? 0 : rn(&c->r, KW_MPA_V2_MASK + 1);
	}
	if (k == MUT_MPA_CRC)
		cfg.crc = !cfg.crc;
	if (k == MUT_MPA_PD)
		pdl = rn(&c->r, KW_MPA_MAX_PD - KW_MPA_V2_PD_LEN + 1);
	for (len = 0; len < pdl; len++)
		pd[len] = rnd64(&c->r);
	kw_mpa_make_request(&cfg, &f);
	len = kw_mpa_encode(&f, pd, pdl, buf, sizeof(buf));
	if (len < 0)
		return -100;
	switch (k) {
	case MUT_MPA_KEY:
		buf[rn(&c->r, KW_MPA_KEY_LEN)] ^= 1 << rn(&c->r, 8);
		break;
	case MUT_MPA_REPKEY:
		memcpy(buf, KW_MPA_KEY_REP, KW_MPA_KEY_LEN);
		break;
	case MUT_MPA_RSVD:
		buf[16] |= 1 << rn(&c->r, 4);
		break;
	case MUT_MPA_REV:
		buf[17] = chance(&c->r, 50) ? 0 : rrange(&c->r, 3, 255);
		break;
	case MUT_MPA_PDLEN_BIG:
		put_unaligned_be16(rrange(&c->r, KW_MPA_MAX_PD + 1, 0xffff),
				   buf + 18);
		break;
	case MUT_MPA_PDLEN_SHORT:
		/* announce more than follows: ACCEPT must time out */
		put_unaligned_be16(get_unaligned_be16(buf + 18) + 1 +
				   rn(&c->r, 100), buf + 18);
		timeout = 300;
		break;
	case MUT_MPA_ENH_REV1:
		buf[17] = 1;
		break;
	case MUT_MPA_ENH_SHORT:
		/* Enhanced with fewer than 4 bytes of private data */
		put_unaligned_be16(rn(&c->r, KW_MPA_V2_PD_LEN), buf + 18);
		len = KW_MPA_HDR_LEN + get_unaligned_be16(buf + 18);
		break;
	case MUT_MPA_MARKERS:
		/* markers wanted in kiwarp's FPDUs (RFC 5044 section 5):
		 * our parser removes them (c->mres.markers_rx) */
		buf[16] |= KW_MPA_FLAG_MARKERS;
		cfg.markers = true;
		break;
	case MUT_MPA_TRUNC:
		len = rn(&c->r, len);
		break;
	case MUT_MPA_GARBAGE:
		len = rrange(&c->r, KW_MPA_HDR_LEN, 64);
		for (ret = 0; ret < len; ret++)
			buf[ret] = rnd64(&c->r);
		break;
	}
	if (len && writen(c->raw, buf, len))
		return -101;
	if (k == MUT_MPA_TRUNC) {
		/* the peer goes away mid-Request */
		if (chance(&c->r, 50))
			shutdown(c->raw, SHUT_WR);
		else {
			rst_close(c->raw);
			c->raw = -1;
		}
	}
	ret = kw_accept(c->qp, c->ksock, NULL, timeout, &req);
	if (!ret) {
		if (must_fail && k != MUT_MPA_GARBAGE)
			cfail(c, "ACCEPT took a %s Request", mut_name[k]);
		if (req.param.flags & KIWARP_CONN_CRC)
			kp.flags = (kp.flags & ~KIWARP_CONN_NO_CRC) |
				   KIWARP_CONN_CRC;
		kp.mpa_rev = req.param.mpa_rev;
		ret = kw_accept_reply(c->qp, KIWARP_REPLY_ACCEPT, &kp, NULL,
				      0, &res);
		c->kord = ret ? 0 : res.param.ord;
	}
	if (ret) {
		if (!must_fail)
			cfail(c, "MPA exchange (%s) failed: %d", mut_name[k],
			      ret);
		return 1;
	}
	/* our side: the Reply must be well formed and consistent */
	if (readn(c->raw, hdr, sizeof(hdr), 5000) ||
	    kw_mpa_decode_hdr(hdr, true, &rep) ||
	    readn(c->raw, pd, rep.pd_len, 5000) || kw_mpa_decode_pd(&rep, pd) ||
	    kw_mpa_negotiate_initiator(&cfg, &rep, &c->mres)) {
		if (must_fail)
			return 1;	/* e.g. garbage that parsed as a Request */
		cfail(c, "bad MPA Reply from kiwarp (%s)", mut_name[k]);
		return 1;
	}
	if (must_fail) {
		/* garbage that happens to be a valid Request is fine */
		if (k != MUT_MPA_GARBAGE)
			cfail(c, "kiwarp completed a %s exchange", mut_name[k]);
		return 1;
	}
	c->crc = c->mres.crc;
	/* rev 1 carries no IRD/ORD, and an ORD of 0x3FFF asks for no
	 * negotiation (RFC 6581 section 9.1): kiwarp serves KW_IRD */
	if (c->mres.rev == 1 || cfg.ord == KW_MPA_V2_MASK)
		c->mres.ord = KW_IRD;
	return 0;
}

/* ------------------------------------------------- the peer's stream */

static void add_op_send(struct conn *c, int recv)
{
	struct op *o = &c->ops[c->nops++];
	uint32_t cap = c->rw[recv].cap;
	int v = rn(&c->r, 10);

	o->type = OP_SEND;
	o->recv = recv;
	o->opcode = KW_OP_SEND;
	if (v == 1)
		o->opcode = KW_OP_SEND_SE;
	if ((v == 2 || v == 3) && !c->inv_done) {
		o->opcode = v == 2 ? KW_OP_SEND_INV : KW_OP_SEND_SE_INV;
		o->inv_stag = c->mr[MR_INV]->stag;
		c->inv_done = true;
	}
	if (chance(&c->r, 10))
		o->len = 0;
	else if (chance(&c->r, 20))
		o->len = cap;
	else
		o->len = rn(&c->r, cap + 1);
	o->data_off = c->paylen;
	c->paylen += o->len;
}

static void add_op_write(struct conn *c)
{
	struct op *o = &c->ops[c->nops++];
	int m = rn(&c->r, 3) == 0 ? MR_WO : MR_RW;
	uint32_t len;

	if (!c->inv_done && chance(&c->r, 20))
		m = MR_INV;
	len = chance(&c->r, 10) ? 0 : rrange(&c->r, 1, c->mr_len[m] < 6000 ?
					      c->mr_len[m] : 6000);
	o->type = OP_WRITE;
	o->opcode = KW_OP_WRITE;
	o->len = len;
	o->arena_off = c->mr_off[m] + rn(&c->r, c->mr_len[m] - len + 1);
	o->data_off = c->paylen;
	c->paylen += len;
}

static void add_op_read(struct conn *c, bool ping)
{
	struct op *o = &c->ops[c->nops++];
	int m = chance(&c->r, 50) ? MR_RO : MR_RW;
	struct read_slot *s = &c->rs[c->nreads];
	uint32_t size = ping ? 8 : rrange(&c->r, chance(&c->r, 5) ? 0 : 1,
					  8192);

	if (size > c->mr_len[m])
		size = c->mr_len[m];
	o->type = OP_READ;
	o->opcode = KW_OP_READ_REQ;
	o->read_slot = c->nreads++;
	o->len = size;
	o->arena_off = c->mr_off[m] + rn(&c->r, c->mr_len[m] - size + 1);
	s->sink_stag = 0x51000 + o->read_slot * 0x100 + rn(&c->r, 0x100);
	s->sink_to = chance(&c->r, 50) ? 0 : rnd64(&c->r) >> 20;
	s->size = size;
	s->got = 0;
	s->done = false;
	s->stray = false;
}

static void add_op_term(struct conn *c)
{
	struct op *o = &c->ops[c->nops++];

	o->type = OP_TERM;
	o->opcode = KW_OP_TERMINATE;
	o->term = (struct kw_term){ .layer = rn(&c->r, 3),
				    .etype = rn(&c->r, 3),
				    .ecode = rn(&c->r, 8) };
}

/*
 * Walk the stream in order: Writes before the first mutated byte change the
 * model; a Read Response carries the source as of its Request, unless a
 * later Write may overlap it before kiwarp fetches the data (RDMAP does
 * not order the two), or a mutated Write may land anywhere writable.
 */
static void model_stream(struct conn *c, bool clean)
{
	int i, j;

	for (i = 0; i < c->nops; i++) {
		struct op *o = &c->ops[i];
		struct read_slot *s;

		if (o->type == OP_WRITE && o->off_end <= c->first_mut)
			memcpy(c->exp + o->arena_off, c->pay + o->data_off,
			       o->len);
		if (o->type != OP_READ)
			continue;
		s = &c->rs[o->read_slot];
		memcpy(s->want, c->exp + o->arena_off, o->len);
		s->verify = o->arena_off >= c->mr_off[MR_RO] &&
			    o->arena_off < c->mr_off[MR_RO] + c->mr_len[MR_RO];
		if (s->verify || !clean)
			continue;
		s->verify = true;
		for (j = i + 1; j < c->nops; j++) {
			struct op *q = &c->ops[j];

			if (q->type == OP_WRITE &&
			    q->arena_off < o->arena_off + o->len &&
			    o->arena_off < q->arena_off + q->len)
				s->verify = false;
		}
	}
}

static int gen_ops(struct conn *c)
{
	int n = rrange(&c->r, 1, MAX_OPS - 2), i, sends = 0;
	uint32_t reads_ok = c->mres.ord < MAX_READS ? c->mres.ord : MAX_READS;

	c->nops = c->nreads = 0;
	c->paylen = 0;
	c->inv_done = false;
	for (i = 0; i < n; i++) {
		int v = rn(&c->r, 10);

		if (v < 4 && sends < c->nrecv)
			add_op_send(c, sends++);
		else if (v < 8)
			add_op_write(c);
		else if ((uint32_t)c->nreads + 1 < reads_ok)
			add_op_read(c, false);
		else
			add_op_write(c);
	}
	/* answer kiwarp's RDMA Read somewhere in the stream */
	if (c->kreq_seen) {
		struct op *o;
		int at = rn(&c->r, c->nops + 1);

		memmove(&c->ops[at + 1], &c->ops[at],
			(c->nops - at) * sizeof(c->ops[0]));
		c->nops++;
		o = &c->ops[at];
		*o = (struct op){ .type = OP_RRESP, .opcode = KW_OP_READ_RESP,
				  .len = c->kreq.size, .data_off = c->paylen };
		c->paylen += o->len;
	}
	/* end: a Terminate of our own, a ping Read, or just a close */
	c->has_term = c->has_ping = false;
	if (chance(&c->r, 8)) {
		add_op_term(c);
		c->has_term = true;
	} else if ((uint32_t)c->nreads < reads_ok) {
		add_op_read(c, true);
		c->has_ping = true;
	}
	return 0;
}

/* Segment every op into FPDUs in c->wire; also generates the payloads. */
static int build_wire(struct conn *c)
{
	uint32_t i;
	int k;

	for (i = 0; i < c->paylen; i++)
		c->pay[i] = rnd64(&c->r);
	c->wlen = 0;
	c->nfp = 0;
	for (k = 0; k < c->nops; k++) {
		struct op *o = &c->ops[k];
		struct kw_tx_msg m = { .opcode = o->opcode, .crc = c->crc,
				       .len = o->len };
		static const uint32_t mul[] = { 64, 128, 256, 1000, 1448, 4096,
						9000 };
		uint8_t inl[KW_TERM_MAX_LEN];
		const uint8_t *src = c->pay + o->data_off;
		struct kw_tx_fpdu f;
		uint32_t off = 0;

		m.mulpdu = mul[rn(&c->r, sizeof(mul) / sizeof(mul[0]))];
		/* a Read Request or Terminate is one FPDU with its body */
		if (o->type == OP_READ || o->type == OP_TERM)
			m.mulpdu = 1448;
		switch (o->type) {
		case OP_SEND:
			m.qn = KW_QN_SEND;
			m.msn = o->recv + 1;
			m.inv_stag = o->inv_stag;
			break;
		case OP_WRITE:
			m.stag = (o->arena_off >= c->mr_off[MR_INV] &&
				  o->arena_off < c->mr_off[MR_INV] +
						 c->mr_len[MR_INV]) ?
				 c->mr[MR_INV]->stag :
				 (o->arena_off >= c->mr_off[MR_WO] &&
				  o->arena_off < c->mr_off[MR_WO] +
						 c->mr_len[MR_WO]) ?
				 c->mr[MR_WO]->stag : c->mr[MR_RW]->stag;
			m.to = (uintptr_t)c->w->arena + o->arena_off;
			break;
		case OP_READ: {
			struct read_slot *s = &c->rs[o->read_slot];
			struct kw_read_req rr = {
				.sink_stag = s->sink_stag, .sink_to = s->sink_to,
				.size = s->size,
				.src_stag = o->arena_off >= c->mr_off[MR_RO] &&
					    o->arena_off < c->mr_off[MR_RO] +
							   c->mr_len[MR_RO] ?
					    c->mr[MR_RO]->stag :
					    c->mr[MR_RW]->stag,
				.src_to = (uintptr_t)c->w->arena +
					  o->arena_off };

			kw_read_req_encode(&rr, inl);
			m.qn = KW_QN_READ_REQ;
			m.msn = o->read_slot + 1;
			m.inline_data = inl;
			m.inline_len = KW_READ_REQ_LEN;
			m.len = 0;
			break;
		}
		case OP_RRESP:
			m.stag = c->kreq.sink_stag;
			m.to = c->kreq.sink_to;
			break;
		case OP_TERM: {
			int tl = kw_term_encode(&o->term, NULL, 0, inl);

			if (tl < 0)
				return -1;
			m.qn = KW_QN_TERMINATE;
			m.msn = 1;
			m.inline_data = inl;
			m.inline_len = tl;
			m.len = 0;
			break;
		}
		}
		o->off_start = c->wlen;
		do {
			uint32_t crc;
			struct fpdu *p = &c->fp[c->nfp];

			if (c->nfp >= MAX_FPDUS || kw_tx_fpdu_next(&m, &off, &f))
				return -1;
			crc = kw_mpa_crc_update(kw_mpa_crc_init(), f.hdr,
						f.hdr_len);
			crc = kw_mpa_crc_update(crc, src + f.payload_off,
						f.payload_len);
			kw_tx_fpdu_seal(&m, &f, crc);
			if (c->wlen + f.hdr_len + f.payload_len +
			    f.trailer_len > WIRE_MAX)
				return -1;
			p->off = c->wlen;
			p->hdr_len = f.hdr_len;
			p->op = k;
			p->tagged = o->type == OP_WRITE ||
				    o->type == OP_RRESP;
			memcpy(c->wire + c->wlen, f.hdr, f.hdr_len);
			c->wlen += f.hdr_len;
			memcpy(c->wire + c->wlen, src + f.payload_off,
			       f.payload_len);
			c->wlen += f.payload_len;
			memcpy(c->wire + c->wlen, f.trailer, f.trailer_len);
			c->wlen += f.trailer_len;
			p->len = c->wlen - p->off;
			c->nfp++;
		} while (!f.last);
		o->off_end = c->wlen;
	}
	return 0;
}

static void fix_crc(struct conn *c, struct fpdu *p)
{
	uint32_t crc;

	if (!c->crc || p->len < 4)
		return;
	crc = kw_mpa_crc_update(kw_mpa_crc_init(), c->wire + p->off,
				p->len - 4);
	kw_mpa_crc_put(crc, c->wire + p->off + p->len - 4);
}

static uint32_t evil32(struct conn *c, uint32_t v)
{
	switch (rn(&c->r, 7)) {
	case 0: return 0;
	case 1: return 0xffffffff;
	case 2: return v + 1;
	case 3: return v - 1;
	case 4: return v ^ (1u << rn(&c->r, 32));
	case 5: return c->mr[rn(&c->r, NMR)]->stag;
	default: return rnd64(&c->r);
	}
}

static uint64_t evil_to(struct conn *c, uint64_t v)
{
	int m = rn(&c->r, NMR);

	switch (rn(&c->r, 8)) {
	case 0: return 0;
	case 1: return ~0ULL - rn(&c->r, 64);
	case 2: return mr_base(c, m) - rrange(&c->r, 1, 64);
	case 3: return mr_base(c, m) + c->mr_len[m] - rn(&c->r, 64);
	case 4: return v + c->mr_len[MR_RW];
	case 5: return v ^ (1ULL << rn(&c->r, 64));
	case 6: return mr_base(c, m) + rn(&c->r, c->mr_len[m]);
	default: return rnd64(&c->r);
	}
}

static int pick_frame_mut(struct conn *c)
{
	static const struct { int kind, weight; } w[] = {
		{ MUT_NONE, 20 }, { MUT_BITFLIP, 10 }, { MUT_LEN, 6 },
		{ MUT_CRC, 4 }, { MUT_STAG, 8 }, { MUT_TO, 8 }, { MUT_MSN, 6 },
		{ MUT_QN, 4 }, { MUT_MO, 5 }, { MUT_OPCODE, 6 },
		{ MUT_VERSION, 3 }, { MUT_RSVD, 2 }, { MUT_RREQ, 6 },
		{ MUT_TRUNC, 4 }, { MUT_DUP, 3 }, { MUT_DROP, 3 },
		{ MUT_SWAP, 3 }, { MUT_GARBAGE, 3 }, { MUT_RST, 4 },
		{ MUT_HALFCLOSE, 3 }, { MUT_OVERSIZE, 3 }, { MUT_NOBUF, 2 },
		{ MUT_SPLIT, 4 }, { MUT_MERGE, 3 }, { MUT_DRIP, 2 },
	};
	unsigned tot = 0, i, x;

	for (i = 0; i < sizeof(w) / sizeof(w[0]); i++)
		tot += w[i].weight;
	x = rn(&c->r, tot);
	for (i = 0; x >= (unsigned)w[i].weight; i++)
		x -= w[i].weight;
	return w[i].kind;
}

/* The first FPDU of a random op of the given type (-1: none). */
static int fpdu_of_type(struct conn *c, int type)
{
	int cand[MAX_FPDUS], n = 0, i;

	for (i = 0; i < c->nfp; i++)
		if (type == -1 || c->ops[c->fp[i].op].type == type ||
		    (type == -2 && c->fp[i].tagged))
			cand[n++] = i;
	return n ? cand[rn(&c->r, n)] : -1;
}

/*
 * Mutate the stream. Sets c->mut (MUT_NONE if the chosen kind does not
 * apply to this stream), c->first_mut and c->cut. Structural mutations
 * rebuild the wire.
 */
static void mutate(struct conn *c)
{
	int k = pick_frame_mut(c), i;
	struct fpdu *p;
	uint8_t *b;
	bool recrc = chance(&c->r, 75);

	c->first_mut = UINT32_MAX;
	c->cut = c->wlen;
	/* a Send beyond the posted receives, or beyond its buffer: done in
	 * the generator, see gen_mutated_ops() */
	if (k == MUT_OVERSIZE || k == MUT_NOBUF)
		k = MUT_BITFLIP;
	i = -1;
	switch (k) {
	case MUT_STAG:
		/* a Write's STag, or the STag a Send with Invalidate names */
		i = fpdu_of_type(c, chance(&c->r, 25) ? OP_SEND : -2);
		break;
	case MUT_TO:
		i = fpdu_of_type(c, -2);	/* Write or Read Response */
		break;
	case MUT_MSN:
	case MUT_QN:
	case MUT_MO:
		i = fpdu_of_type(c, OP_SEND);
		if (i < 0 || chance(&c->r, 30))
			i = fpdu_of_type(c, OP_READ);
		break;
	case MUT_RREQ:
		i = fpdu_of_type(c, OP_READ);
		break;
	default:
		i = fpdu_of_type(c, -1);
	}
	if (i < 0 && k != MUT_SPLIT && k != MUT_MERGE && k != MUT_DRIP &&
	    k != MUT_NONE) {
		k = MUT_BITFLIP;
		i = fpdu_of_type(c, -1);
	}
	c->mut = k;
	if (i < 0)
		return;
	p = &c->fp[i];
	b = c->wire + p->off;
	switch (k) {
	case MUT_NONE:
	case MUT_SPLIT:
	case MUT_MERGE:
	case MUT_DRIP:
		return;
	case MUT_BITFLIP: {
		uint32_t at = chance(&c->r, 70) ?
			rn(&c->r, p->hdr_len) : rn(&c->r, p->len);

		b[at] ^= 1 << rn(&c->r, 8);
		if (recrc && at < p->len - 4)
			fix_crc(c, p);
		break;
	}
	case MUT_LEN: {
		uint16_t l = get_unaligned_be16(b);

		switch (rn(&c->r, 5)) {
		case 0: l = 0; break;
		case 1: l = 0xffff; break;
		case 2: l += rrange(&c->r, 1, 8); break;
		case 3: l -= rrange(&c->r, 1, 8); break;
		default: l = rnd64(&c->r);
		}
		put_unaligned_be16(l, b);
		if (recrc)
			fix_crc(c, p);
		break;
	}
	case MUT_CRC:
		if (c->crc)
			b[p->len - 1 - rn(&c->r, 4)] ^= 1 << rn(&c->r, 8);
		else
			b[p->len - 1] ^= 1 << rn(&c->r, 8);
		break;
	case MUT_STAG:
		put_unaligned_be32(evil32(c, get_unaligned_be32(b + 4)), b + 4);
		fix_crc(c, p);
		break;
	case MUT_TO:
		put_unaligned_be64(evil_to(c, get_unaligned_be64(b + 8)),
				   b + 8);
		fix_crc(c, p);
		break;
	case MUT_MSN:
		put_unaligned_be32(evil32(c, get_unaligned_be32(b + 12)) %
				   (chance(&c->r, 60) ? 24 : 0xffffffff),
				   b + 12);
		fix_crc(c, p);
		break;
	case MUT_QN:
		put_unaligned_be32(chance(&c->r, 70) ? rn(&c->r, 4) :
				   evil32(c, 0), b + 8);
		fix_crc(c, p);
		break;
	case MUT_MO:
		put_unaligned_be32(evil32(c, get_unaligned_be32(b + 16)),
				   b + 16);
		fix_crc(c, p);
		break;
	case MUT_OPCODE:
		if (chance(&c->r, 30))
			b[2] ^= KW_DDP_FLAG_TAGGED;
		else
			b[3] = (b[3] & ~KW_RDMAP_OPCODE_MASK) | rn(&c->r, 16);
		fix_crc(c, p);
		break;
	case MUT_VERSION:
		if (chance(&c->r, 50))
			b[2] = (b[2] & ~KW_DDP_VERSION_MASK) | rn(&c->r, 4);
		else
			b[3] = (b[3] & 0x3f) | rn(&c->r, 4) << 6;
		fix_crc(c, p);
		break;
	case MUT_RSVD:
		if (chance(&c->r, 50))
			b[2] |= 1 << rrange(&c->r, 2, 5);
		else
			b[3] |= 1 << rrange(&c->r, 4, 5);
		fix_crc(c, p);
		break;
	case MUT_RREQ: {
		uint8_t *rr = b + 2 + KW_DDP_UNTAGGED_HDR_LEN;

		if (p->hdr_len < 2 + KW_DDP_UNTAGGED_HDR_LEN + KW_READ_REQ_LEN)
			break;
		switch (rn(&c->r, 5)) {
		case 0:	/* sink STag: any value is the peer's business */
			put_unaligned_be32(evil32(c, 0), rr);
			break;
		case 1:
			put_unaligned_be32(chance(&c->r, 50) ? 0xffffffff :
					   evil32(c, get_unaligned_be32(rr + 12)),
					   rr + 12);
			break;
		case 2:
			put_unaligned_be32(evil32(c, get_unaligned_be32(rr + 16)),
					   rr + 16);
			break;
		default:
			put_unaligned_be64(evil_to(c, get_unaligned_be64(rr + 20)),
					   rr + 20);
		}
		fix_crc(c, p);
		break;
	}
	case MUT_TRUNC:
	case MUT_RST:
	case MUT_HALFCLOSE:
		c->cut = p->off + rn(&c->r, p->len);
		c->first_mut = c->cut;
		return;
	case MUT_DUP:
	case MUT_DROP:
	case MUT_SWAP:
	case MUT_GARBAGE: {
		uint8_t *tmp = c->tmp;
		uint32_t n = p->off, gl = rrange(&c->r, 1, 64), j;

		memcpy(tmp, c->wire, p->off);
		if (k == MUT_DUP) {
			memcpy(tmp + n, b, p->len);
			n += p->len;
			memcpy(tmp + n, b, p->len);
			n += p->len;
		} else if (k == MUT_SWAP && i + 1 < c->nfp) {
			struct fpdu *q = &c->fp[i + 1];

			memcpy(tmp + n, c->wire + q->off, q->len);
			n += q->len;
			memcpy(tmp + n, b, p->len);
			n += p->len;
			i++;
		} else if (k == MUT_GARBAGE) {
			for (j = 0; j < gl; j++)
				tmp[n++] = rnd64(&c->r);
			memcpy(tmp + n, b, p->len);
			n += p->len;
		}
		/* (DROP, or SWAP of the last FPDU: it goes missing) */
		memcpy(tmp + n, c->wire + c->fp[i].off + c->fp[i].len,
		       c->wlen - c->fp[i].off - c->fp[i].len);
		n += c->wlen - c->fp[i].off - c->fp[i].len;
		memcpy(c->wire, tmp, n);
		c->wlen = n;
		c->cut = n;
		break;
	}
	}
	c->first_mut = p->off;
}

/*
 * Generator-level mutations: a Send longer than its receive buffer, or a
 * Send for which no receive is posted. Returns true if one was applied.
 */
static bool gen_mutated_ops(struct conn *c, int kind)
{
	int i;

	if (kind == MUT_OVERSIZE) {
		for (i = 0; i < c->nops; i++) {
			struct op *o = &c->ops[i];

			if (o->type != OP_SEND)
				continue;
			o->len = c->rw[o->recv].cap + rrange(&c->r, 1, 200);
			/* the payload must exist: append it */
			o->data_off = c->paylen;
			c->paylen += o->len;
			return true;
		}
	} else if (kind == MUT_NOBUF && c->nops < MAX_OPS) {
		struct op *o;
		int sends = 0;

		for (i = 0; i < c->nops; i++)
			sends += c->ops[i].type == OP_SEND;
		if (sends < c->nrecv)
			return false;
		/* one Send more than there are receives, at the end */
		o = &c->ops[c->nops];
		if (c->has_ping || c->has_term)
			o = &c->ops[c->nops - 1],
			c->ops[c->nops] = *o;
		*o = (struct op){ .type = OP_SEND, .opcode = KW_OP_SEND,
				  .recv = sends, .len = rn(&c->r, 100),
				  .data_off = c->paylen };
		c->paylen += o->len;
		c->nops++;
		return true;
	}
	return false;
}

/* ------------------------------------------------- running a connection */

/* Feed what kiwarp sent to the peer's parser; returns false at EOF. */
static int peer_read(struct conn *c, struct kw_rx *rx, int ms)
{
	static __thread uint8_t b[65536];
	struct pollfd pfd = { .fd = c->raw, .events = POLLIN };
	ssize_t n;

	if (poll(&pfd, 1, ms) != 1)
		return -ETIMEDOUT;
	n = read(c->raw, b, sizeof(b));
	if (n == 0)
		return -EPIPE;
	if (n < 0)
		return -errno;
	if (!kw_rx_failed(rx) && kw_rx_input(rx, b, n) != (size_t)n)
		c->sink_err = true;
	return 0;
}

static bool reads_done(struct conn *c)
{
	int i;

	for (i = 0; i < c->nreads; i++)
		if (!c->rs[i].done)
			return false;
	return true;
}

/* Write the stream per the schedule; returns -errno if kiwarp hung up. */
static int peer_write(struct conn *c, struct kw_rx *rx)
{
	uint32_t pos = 0, end = c->cut;
	int ret = 0, drip = 0;

	while (pos < end && !ret) {
		uint32_t n;

		switch (c->mut) {
		case MUT_MERGE:
			n = end - pos;
			break;
		case MUT_SPLIT:
			n = rrange(&c->r, 1, 40);
			break;
		case MUT_DRIP:
			n = rrange(&c->r, 1, 4);
			if (drip++ < 48)
				usleep(1000);
			else
				n = end - pos;
			break;
		default:
			n = rrange(&c->r, 1, 3000);
		}
		if (n > end - pos)
			n = end - pos;
		ret = writen(c->raw, c->wire + pos, n);
		pos += n;
		/* keep kiwarp's responses flowing while we write */
		while (peer_read(c, rx, 0) == 0)
			;
	}
	return ret;
}

static const char *wc_name(int s)
{
	return kw_wc_status_str(s);
}

static void check_completions(struct conn *c, double bound)
{
	struct kiwarp_cqe cqe[64];
	int want = (c->recv_posted ? c->nrecv : 0) + c->nksend, got = 0, i, n;
	double end = now() + bound;

	for (i = 0; i < c->nrecv; i++)
		c->rw[i].completions = 0;
	for (i = 0; i < c->nksend; i++)
		c->ksend_compl[i] = 0;
	for (;;) {
		n = kw_poll_cq(c->cq, 64, cqe);
		for (i = 0; i < n; i++) {
			uint64_t id = cqe[i].wr_id;

			got++;
			c->w->st.wc[cqe[i].status & 15]++;
			if (id >= 0x1000 && id < 0x1000u + c->nrecv) {
				struct recv_wr *w = &c->rw[id - 0x1000];

				w->completions++;
				w->cqe = cqe[i];
			} else if (id >= 0x2000 && id < 0x2000u + c->nksend) {
				c->ksend_compl[id - 0x2000]++;
				c->ksend_cqe[id - 0x2000] = cqe[i];
			} else {
				cfail(c, "completion for unknown wr_id 0x%" PRIx64,
				      id);
			}
		}
		if (got >= want || now() > end)
			break;
		if (!n)
			usleep(1000);
	}
	if (got != want) {
		cfail(c, "%d completions for %d posted WRs", got, want);
	}
	for (i = 0; i < c->nrecv && c->recv_posted; i++)
		if (c->rw[i].completions != 1)
			cfail(c, "receive %d completed %d times", i,
			      c->rw[i].completions);
	for (i = 0; i < c->nksend; i++)
		if (c->ksend_compl[i] != 1)
			cfail(c, "send WR %d completed %d times", i,
			      c->ksend_compl[i]);
}

/* Bytes delivered by a receive completion, gathered from its SGEs. */
static void gather(struct recv_wr *w, uint8_t *out,
		   uint32_t len)
{
	uint32_t got = 0;
	int s;

	for (s = 0; s < w->nsge && got < len; s++) {
		uint32_t l = w->sge[s].length;

		if (l > len - got)
			l = len - got;
		memcpy(out + got, (void *)(uintptr_t)w->sge[s].addr, l);
		got += l;
	}
}

static void verify_ops(struct conn *c, bool clean)
{
	static __thread uint8_t tmp[4 * 1200];
	int i;

	for (i = 0; i < c->nops; i++) {
		struct op *o = &c->ops[i];
		bool before = o->off_end <= c->first_mut &&
			      o->off_end <= c->cut;

		if (!before)
			continue;
		c->w->st.verified_ops++;
		if (o->type == OP_SEND) {
			struct recv_wr *w = &c->rw[o->recv];
			bool inv = o->opcode == KW_OP_SEND_INV ||
				   o->opcode == KW_OP_SEND_SE_INV;

			if (w->completions != 1)
				continue;	/* reported already */
			if (w->cqe.status != KIWARP_WC_SUCCESS) {
				cfail(c, "op %d: receive %d status %s (sent before any mutation)",
				      i, o->recv, wc_name(w->cqe.status));
				continue;
			}
			if (w->cqe.byte_len != o->len) {
				cfail(c, "op %d: receive byte_len %u, sent %u",
				      i, w->cqe.byte_len, o->len);
				continue;
			}
			gather(w, tmp, o->len);
			if (memcmp(tmp, c->pay + o->data_off, o->len))
				cfail(c, "op %d: received data differs", i);
			if (!!(w->cqe.flags & KIWARP_WC_WITH_INV) != inv ||
			    (inv && w->cqe.inv_stag != o->inv_stag))
				cfail(c, "op %d: invalidate flags 0x%x stag 0x%x",
				      i, w->cqe.flags, w->cqe.inv_stag);
			if (!!(w->cqe.flags & KIWARP_WC_SOLICITED) !=
			    (o->opcode == KW_OP_SEND_SE ||
			     o->opcode == KW_OP_SEND_SE_INV))
				cfail(c, "op %d: solicited flag 0x%x", i,
				      w->cqe.flags);
			/* placed bytes are now known */
		} else if (o->type == OP_READ) {
			struct read_slot *s = &c->rs[o->read_slot];

			/* a later error may drop a queued response */
			if ((!s->done && !clean) || !s->verify)
				continue;
			if (!s->done || s->got != s->size || s->stray)
				cfail(c, "op %d: Read Response %u of %u bytes",
				      i, s->got, s->size);
			else if (memcmp(s->buf, s->want, s->size))
				cfail(c, "op %d: Read Response data differs", i);
		}
	}
}

/* Nothing outside what the peer may write changed; Writes landed. */
static void verify_arena(struct conn *c, bool clean)
{
	const uint8_t *a = c->w->arena;
	uint32_t i;
	int m;

	if (!clean) {
		/* a mutated STag/TO may redirect a Write anywhere the
		 * peer is allowed to write */
		for (m = 0; m < NMR; m++)
			if (mr_access[m] & KIWARP_ACCESS_REMOTE_WRITE)
				memset(c->care + c->mr_off[m], 0, c->mr_len[m]);
	}
	for (i = 0; i < ARENA; i++) {
		if (c->care[i] && a[i] != c->exp[i]) {
			const char *where = "a guard byte";

			for (m = 0; m < NMR; m++)
				if (i >= c->mr_off[m] &&
				    i < c->mr_off[m] + c->mr_len[m])
					where = m == MR_RO ? "the read-only MR" :
						m == MR_RECV ? "a receive-MR gap" :
						"a remote-writable MR";
			cfail(c, "arena byte %u (%s) is 0x%02x, want 0x%02x",
			      i, where, a[i], c->exp[i]);
			return;
		}
	}
}

/*
 * kiwarp's RDMA Read: if our (unmutated) Read Response went out before any
 * mutation, the WR succeeded with exactly those bytes. (Bytes of the sink
 * MR outside the requested range are guard bytes: verify_arena().)
 */
static void verify_kread(struct conn *c, int i)
{
	const uint8_t *sink = c->w->arena + c->ksend_off[i];
	struct kiwarp_cqe *e = &c->ksend_cqe[i];
	int k;

	if (c->ksend_compl[i] != 1)
		return;
	if (!c->kreq_seen) {
		if (c->mut == MUT_NONE && c->mpa_mut == MUT_NONE)
			cfail(c, "kiwarp's Read Request never arrived");
		return;
	}
	if (c->kreq.size != c->ksend_len[i])
		cfail(c, "kiwarp's Read Request asks %u bytes, WR has %u",
		      c->kreq.size, c->ksend_len[i]);
	for (k = 0; k < c->nops; k++) {
		struct op *o = &c->ops[k];

		if (o->type != OP_RRESP || o->off_end > c->first_mut ||
		    o->off_end > c->cut)
			continue;
		if (e->status != KIWARP_WC_SUCCESS)
			cfail(c, "RDMA Read answered before any mutation: status %s",
			      wc_name(e->status));
		else if (e->byte_len != o->len ||
			 memcmp(sink, c->pay + o->data_off, o->len))
			cfail(c, "RDMA Read: %u bytes, data %s", e->byte_len,
			      memcmp(sink, c->pay + o->data_off, o->len) ?
			      "differs" : "ok");
	}
}

static void verify_ksends(struct conn *c, bool clean)
{
	int i, n = 0;

	for (i = 0; i < c->nksend; i++) {
		const uint8_t *src = c->w->arena + c->ksend_off[i];

		if (c->ksend_op[i] == KIWARP_WR_RDMA_READ) {
			verify_kread(c, i);
			continue;
		}
		if (c->ksend_op[i] == KIWARP_WR_SEND) {
			n++;
			if (c->sink_send_seen < n)
				goto missing;
			if (c->sink_send_len[n - 1] != c->ksend_len[i] ||
			    memcmp(c->sink_send[n - 1], src, c->ksend_len[i]))
				cfail(c, "kiwarp Send %d arrived corrupted", i);
		} else {
			if (!c->sink_write_seen ||
			    c->sink_wgot != c->ksend_len[i])
				goto missing;
			if (memcmp(c->sink_wbuf, src, c->ksend_len[i]))
				cfail(c, "kiwarp RDMA Write arrived corrupted");
		}
		continue;
missing:
		if (clean)
			cfail(c, "kiwarp WR %d (%s) did not arrive, status %s",
			      i, kw_wr_opcode_str(c->ksend_op[i]),
			      wc_name(c->ksend_cqe[i].status));
	}
}

static int wait_qp_error(struct conn *c, struct kiwarp_query_qp *q)
{
	double end = now() + 10;

	for (;;) {
		memset(q, 0, sizeof(*q));
		if (kw_query_qp(c->qp, q))
			return -1;
		if (q->state == KIWARP_QPS_ERROR)
			return 0;
		if (now() > end)
			return -ETIMEDOUT;
		usleep(1000);
	}
}

static void run_conn(struct conn *c)
{
	struct worker *w = c->w;
	struct kw_qp_init_attr qa = { 0 };
	struct kiwarp_query_qp q;
	struct kw_rx rx;
	bool clean, mpa_ok = false, peer_closed = false;
	int ret, i, m, tmut = MUT_NONE;
	int ksock;

	c->failed = false;
	c->why[0] = 0;
	c->raw = c->ksock = -1;
	c->qp = NULL;
	c->cq = NULL;
	memset(c->mr, 0, sizeof(c->mr));
	c->nksend = 0;
	c->recv_posted = false;
	c->qp_was_rts = false;
	c->got_term = c->sink_err = c->write_failed = false;
	c->sink_send_seen = 0;
	c->sink_wgot = 0;
	c->sink_write_seen = false;
	c->kreq_seen = false;
	c->kread = -1;
	c->kord = 0;
	c->nops = c->nreads = c->nfp = 0;
	c->first_mut = UINT32_MAX;
	c->cut = 0;
	c->mut = MUT_NONE;
	c->outcome = OUT_CLEAN;

	/* kiwarp side: CQ, QP, MRs */
	if ((ret = kw_create_cq(w->dev, 64, &c->cq))) {
		cfail(c, "create_cq %d", ret);
		goto out;
	}
	qa.send_cq = qa.recv_cq = c->cq;
	qa.sq_entries = 8;
	qa.rq_entries = 16;
	qa.max_sge = 3;
	if ((ret = kw_create_qp(w->pd, &qa, &c->qp))) {
		cfail(c, "create_qp %d", ret);
		goto out;
	}
	if ((ret = layout_and_register(c))) {
		cfail(c, "layout/reg_mr %d", ret);
		goto out;
	}

	/* TCP: the raw peer connects to the worker's listener */
	c->raw = socket(AF_INET, SOCK_STREAM, 0);
	if (c->raw < 0 ||
	    connect(c->raw, (void *)&w->addr, sizeof(w->addr))) {
		cfail(c, "connect: %s", strerror(errno));
		goto out;
	}
	ksock = accept(w->lfd, NULL, NULL);
	if (ksock < 0) {
		cfail(c, "accept: %s", strerror(errno));
		goto out;
	}
	c->ksock = ksock;
	i = 1;
	setsockopt(c->raw, IPPROTO_TCP, TCP_NODELAY, &i, sizeof(i));
	{
		struct timeval tv = { 5, 0 };

		setsockopt(c->raw, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	}

	/* receives may be posted before the connection exists */
	if (chance(&c->r, 50) && (ret = post_recvs(c))) {
		cfail(c, "post_recv (idle) %d", ret);
		goto out;
	}

	c->mpa_mut = pick_mpa_mut(&c->r);
	if (c->mpa_mut != MUT_NONE)
		w->st.mut[c->mpa_mut]++;
	ret = mpa_exchange(c);
	if (ret < 0) {
		cfail(c, "MPA harness error %d", ret);
		goto out;
	}
	if (ret > 0) {
		c->outcome = OUT_MPA_FAIL;
		/* kiwarp refused: our socket ends, its QP is in ERROR */
		if (c->raw >= 0) {
			close(c->raw);
			c->raw = -1;
		}
		goto teardown;
	}
	mpa_ok = true;
	c->qp_was_rts = true;
	/* kiwarp, the responder, transmits once our first FPDU came in (RFC
	 * 5044 section 7.1.2): an unmutated zero-length Write */
	if (rp_send_rtr(&(struct rp){ c->raw, c->crc }, KW_OP_WRITE)) {
		cfail(c, "first FPDU not sent");
		goto out;
	}
	if (!c->recv_posted && (ret = post_recvs(c))) {
		cfail(c, "post_recv %d", ret);
		goto out;
	}
	if ((ret = post_ksends(c))) {
		cfail(c, "post_send %d", ret);
		goto out;
	}

	kw_rx_init(&rx, &sink_ops, c, c->crc, 0);
	if (c->mres.markers_rx)
		kw_rx_set_markers(&rx);
	if (c->kread >= 0) {
		/* kiwarp's Read Request comes after its Sends */
		double end = now() + 10;

		while (!c->kreq_seen && !c->sink_err && now() < end &&
		       peer_read(c, &rx, 100) != -EPIPE)
			;
		if (!c->kreq_seen)
			cfail(c, "kiwarp's Read Request did not arrive");
	}

	/* the stream */
	gen_ops(c);
	tmut = pick_frame_mut(c);
	if ((tmut == MUT_OVERSIZE || tmut == MUT_NOBUF) &&
	    gen_mutated_ops(c, tmut)) {
		if (build_wire(c)) {
			cfail(c, "build_wire");
			goto out;
		}
		c->mut = tmut;
		c->cut = c->wlen;
		/* the mutated Send's first byte */
		for (i = 0; i < c->nops; i++) {
			struct op *o = &c->ops[i];

			if (o->type == OP_SEND &&
			    (o->recv >= c->nrecv ||
			     o->len > c->rw[o->recv].cap)) {
				c->first_mut = o->off_start;
				break;
			}
		}
	} else {
		if (build_wire(c)) {
			cfail(c, "build_wire");
			goto out;
		}
		mutate(c);
	}
	w->st.mut[c->mut]++;
	w->st.ops += c->nops;
	w->st.frames += c->nfp;
	w->st.bytes += c->wlen;
	clean = mut_benign(c->mpa_mut) && mut_benign(c->mut);
	model_stream(c, clean);

	ret = peer_write(c, &rx);
	if (ret) {
		c->write_failed = true;
		if (ret == -EAGAIN)
			cfail(c, "kiwarp stopped reading for 5 s without closing");
		else if (clean)
			cfail(c, "peer write failed on a valid stream: %d", ret);
	}
	if (c->mut == MUT_RST) {
		rst_close(c->raw);
		c->raw = -1;
		c->outcome = OUT_PEER_RST;
		peer_closed = true;
	} else {
		bool eof = false, reset = false, idle = false;
		double end = now() + (clean ? 15 : 1.5);

		if (c->mut == MUT_HALFCLOSE || c->mut == MUT_TRUNC ||
		    (!c->has_ping && !c->has_term))
			shutdown(c->raw, SHUT_WR);
		for (;;) {
			if (c->got_term || c->has_term || !c->has_ping ||
			    c->mut == MUT_HALFCLOSE || c->mut == MUT_TRUNC) {
				/* kiwarp has to close: read to the end */
			} else if (reads_done(c) &&
				   (!clean || c->sink_send_seen +
				    c->sink_write_seen >=
				    c->nksend - (c->kread >= 0))) {
				break;
			}
			ret = peer_read(c, &rx, 100);
			if (ret == -EPIPE) {
				eof = true;
				break;
			}
			if (ret == -ECONNRESET) {
				reset = true;
				break;
			}
			if (ret == -ETIMEDOUT && now() > end) {
				idle = true;
				break;
			}
			if (ret == 0)
				end = now() + (clean ? 15 : 1.5);
		}
		if (c->got_term)
			c->outcome = OUT_TERM;
		else if (c->has_term && (eof || reset))
			c->outcome = OUT_PEER_TERM;
		else if (eof && !c->has_ping && clean)
			c->outcome = OUT_CLEAN;	/* we closed first */
		else if (eof && !c->has_ping && c->mut != MUT_HALFCLOSE &&
			 c->mut != MUT_TRUNC)
			c->outcome = OUT_PEER_FIN;
		else if (eof)
			c->outcome = OUT_EOF;
		else if (reset)
			c->outcome = OUT_RESET;
		else if (idle)
			c->outcome = OUT_SILENT;
		else
			c->outcome = clean ? OUT_CLEAN : OUT_ACCEPTED;
		if (clean && c->outcome != OUT_CLEAN &&
		    !(c->has_term && c->outcome == OUT_PEER_TERM))
			cfail(c, "valid stream ended %s", out_name[c->outcome]);
		if (c->sink_err)
			cfail(c, "kiwarp's stream does not parse (state %d, term %u/%u/0x%x)",
			      rx.state, rx.term.layer, rx.term.etype,
			      rx.term.ecode);
		if (c->got_term)
			w->st.term[c->term.layer & 3][c->term.etype & 3]
				  [c->term.ecode]++;
		if (c->got_term && clean)
			cfail(c, "kiwarp terminated a valid stream: %s",
			      kw_term_str(c->term.layer, c->term.etype,
					  c->term.ecode));
		/* the peer goes away: kiwarp must end up in ERROR */
		if (chance(&c->r, 50))
			rst_close(c->raw);
		else
			close(c->raw);
		c->raw = -1;
		peer_closed = true;
	}
	(void)peer_closed;

teardown:
	if (!mpa_ok) {
		/* an ACCEPT that failed before taking the socket leaves the
		 * QP IDLE (reusable); move it to ERROR like an application
		 * giving up would, so that posted receives are flushed */
		memset(&q, 0, sizeof(q));
		if (!kw_query_qp(c->qp, &q) && q.state == KIWARP_QPS_IDLE)
			kw_modify_qp(c->qp, KIWARP_MODIFY_ERROR);
		else if (q.state != KIWARP_QPS_ERROR)
			cfail(c, "QP in state %u after a failed MPA exchange",
			      q.state);
	}
	if ((ret = wait_qp_error(c, &q)))
		cfail(c, "QP not in ERROR after the peer closed: state %u (%d)",
		      q.state, ret);
	if (mpa_ok && c->got_term &&
	    (!q.term_sent.valid || q.term_sent.layer != c->term.layer ||
	     q.term_sent.etype != c->term.etype ||
	     q.term_sent.ecode != c->term.ecode))
		cfail(c, "peer got Terminate %u/%u/0x%x, kiwarp reports %u:%u/%u/0x%x",
		      c->term.layer, c->term.etype, c->term.ecode,
		      q.term_sent.valid, q.term_sent.layer, q.term_sent.etype,
		      q.term_sent.ecode);
	if (mpa_ok && c->has_term && c->ops[c->nops - 1].off_end <= c->first_mut &&
	    c->ops[c->nops - 1].off_end <= c->cut) {
		struct kw_term *t = &c->ops[c->nops - 1].term;

		if (!q.term_rcvd.valid || q.term_rcvd.layer != t->layer ||
		    q.term_rcvd.etype != t->etype ||
		    q.term_rcvd.ecode != t->ecode)
			cfail(c, "sent Terminate %u/%u/0x%x, kiwarp recorded %u:%u/%u/0x%x",
			      t->layer, t->etype, t->ecode, q.term_rcvd.valid,
			      q.term_rcvd.layer, q.term_rcvd.etype,
			      q.term_rcvd.ecode);
	}
	/* the QP is in ERROR: what is left is flushed at once */
	check_completions(c, mpa_ok ? 10 : 0.5);
	if (mpa_ok) {
		/* our own Terminate ends the stream: kiwarp drops the Read
		 * Responses and Sends it had not sent yet */
		clean = mut_benign(c->mpa_mut) && mut_benign(c->mut);
		verify_ops(c, clean && !c->has_term);
		verify_ksends(c, clean && !c->has_term);
		/* receive buffers that completed with verified data */
		verify_arena(c, clean);
	} else {
		verify_arena(c, true);
	}

out:
	if (c->raw >= 0)
		rst_close(c->raw);
	if (c->qp) {
		struct kiwarp_cqe extra;

		kw_destroy_qp(c->qp);
		if (c->cq && kw_poll_cq(c->cq, 1, &extra) > 0)
			cfail(c, "completion after drain (wr_id 0x%" PRIx64 ")",
			      (uint64_t)extra.wr_id);
	}
	for (m = 0; m < NMR; m++)
		if (c->mr[m])
			kw_dereg_mr(c->mr[m]);
	if (c->cq)
		kw_destroy_cq(c->cq);
	if (c->ksock >= 0)
		close(c->ksock);
	c->qp = NULL;
	c->cq = NULL;
	w->st.out[c->outcome]++;
	w->st.mo[c->mpa_mut != MUT_NONE ? c->mpa_mut : c->mut][c->outcome]++;
	w->st.conns++;
	if (c->failed) {
		w->st.failed++;
		printf("# conn %ld FAILED (mpa %s, frame %s, outcome %s): %s\n",
		       c->idx, mut_name[c->mpa_mut], mut_name[c->mut],
		       out_name[c->outcome], c->why);
		fflush(stdout);
	} else if (opt_verbose) {
		printf("# conn %ld ok: mpa %s, frame %s, %d ops, %d fpdus, %d recvs%s, %s\n",
		       c->idx, mut_name[c->mpa_mut], mut_name[c->mut], c->nops,
		       c->nfp, c->nrecv, c->recv_posted ? " posted" : "",
		       out_name[c->outcome]);
	}
}

/* ------------------------------------------------- workers */

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct conn *c = &w->c;
	int i;

	c->w = w;
	c->exp = malloc(ARENA);
	c->care = malloc(ARENA);
	c->wire = malloc(WIRE_MAX);
	c->pay = malloc(WIRE_MAX);
	c->tmp = malloc(2 * WIRE_MAX);
	for (i = 0; i <= MAX_READS; i++) {
		c->rs[i].want = malloc(8192);
		c->rs[i].buf = malloc(8192);
	}
	for (;;) {
		long idx;

		pthread_mutex_lock(&gstats_lock);
		idx = next_conn < opt_conns && !stop_all &&
		      now() - t_start < opt_seconds ? next_conn++ : -1;
		pthread_mutex_unlock(&gstats_lock);
		if (idx < 0)
			break;
		c->idx = idx;
		c->r.s = opt_seed * 0x2545f4914f6cdd1dULL + idx;
		rnd64(&c->r);
		run_conn(c);
		pthread_mutex_lock(&gstats_lock);
		t_last_progress = now();
		pthread_mutex_unlock(&gstats_lock);
	}
	return NULL;
}

static int worker_init(struct worker *w)
{
	socklen_t len = sizeof(w->addr);
	int ret;

	if ((ret = kw_open(&w->dev)) || (ret = kw_alloc_pd(w->dev, &w->pd)))
		return ret;
	w->arena = mmap(NULL, ARENA, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (w->arena == MAP_FAILED)
		return -errno;
	w->addr = (struct sockaddr_in){ .sin_family = AF_INET,
					.sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	w->lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (w->lfd < 0 || bind(w->lfd, (void *)&w->addr, sizeof(w->addr)) ||
	    listen(w->lfd, 4) ||
	    getsockname(w->lfd, (void *)&w->addr, &len))
		return -errno;
	return 0;
}

static void worker_fini(struct worker *w)
{
	close(w->lfd);
	kw_dealloc_pd(w->pd);
	kw_close(w->dev);
	munmap(w->arena, ARENA);
}

static long pins(void)
{
	FILE *f;
	char k[64];
	long v, a = 0, r = 0;
	int fd = open("/proc/sys/vm/stat_refresh", O_WRONLY);

	if (fd >= 0) {
		/* fold the per-CPU deltas for an exact count */
		if (write(fd, "1", 1) < 0)
			(void)0;
		close(fd);
	}
	f = fopen("/proc/vmstat", "r");
	if (!f)
		return -1;
	while (fscanf(f, "%63s %ld", k, &v) == 2) {
		if (!strcmp(k, "nr_foll_pin_acquired"))
			a = v;
		else if (!strcmp(k, "nr_foll_pin_released"))
			r = v;
	}
	fclose(f);
	return a - r;
}

static void merge(struct stats *d, const struct stats *s)
{
	int i, j, k;

	d->conns += s->conns;
	d->failed += s->failed;
	d->frames += s->frames;
	d->bytes += s->bytes;
	d->ops += s->ops;
	d->verified_ops += s->verified_ops;
	for (i = 0; i < MUT_NKINDS; i++)
		d->mut[i] += s->mut[i];
	for (i = 0; i < OUT_NKINDS; i++)
		d->out[i] += s->out[i];
	for (i = 0; i < MUT_NKINDS; i++)
		for (j = 0; j < OUT_NKINDS; j++)
			d->mo[i][j] += s->mo[i][j];
	for (i = 0; i < 16; i++)
		d->wc[i] += s->wc[i];
	for (i = 0; i < 3; i++)
		for (j = 0; j < 4; j++)
			for (k = 0; k < 256; k++)
				d->term[i][j][k] += s->term[i][j][k];
}

static void *watchdog(void *arg)
{
	(void)arg;
	for (;;) {
		double idle;

		sleep(5);
		pthread_mutex_lock(&gstats_lock);
		idle = now() - t_last_progress;
		pthread_mutex_unlock(&gstats_lock);
		if (idle > 120) {
			printf("not ok 1 - kw_peerfuzz: no connection finished for %.0f s (hang)\n",
			       idle);
			printf("# 0 passed, 1 failed\n");
			fflush(stdout);
			_exit(1);
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	static struct worker wk[16];
	struct stats *s = &gstats;
	pthread_t wd;
	long pin0, pin1;
	double dt;
	int i, j, k, ret;
	bool ok;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			opt_seed = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--conns") && i + 1 < argc)
			opt_conns = strtol(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			opt_seconds = strtod(argv[++i], NULL);
		else if (!strcmp(argv[i], "--first") && i + 1 < argc)
			next_conn = strtol(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--jobs") && i + 1 < argc)
			opt_jobs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-v"))
			opt_verbose = 1;
		else {
			fprintf(stderr, "usage: %s [--seed S] [--conns N] [--seconds T] [--jobs J] [--first I] [-v]\n",
				argv[0]);
			return 2;
		}
	}
	if (opt_jobs < 1 || opt_jobs > 16)
		opt_jobs = 1;
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("TAP version 13\n1..1\n");
	printf("# kw_peerfuzz: seed %" PRIu64 ", %ld connections, %d jobs, bound %.0f s\n",
	       opt_seed, opt_conns, opt_jobs, opt_seconds);
	pin0 = pins();
	for (i = 0; i < opt_jobs; i++) {
		wk[i].id = i;
		if ((ret = worker_init(&wk[i]))) {
			printf("not ok 1 - kw_peerfuzz: setup failed: %d\n", ret);
			printf("# 0 passed, 1 failed\n");
			return 1;
		}
	}
	t_start = t_last_progress = now();
	pthread_create(&wd, NULL, watchdog, NULL);
	for (i = 0; i < opt_jobs; i++)
		pthread_create(&wk[i].th, NULL, worker_main, &wk[i]);
	for (i = 0; i < opt_jobs; i++) {
		pthread_join(wk[i].th, NULL);
		merge(s, &wk[i].st);
		worker_fini(&wk[i]);
	}
	dt = now() - t_start;
	pin1 = pins();

	printf("# connections %ld in %.1f s (%.1f/s), failed %ld\n", s->conns,
	       dt, s->conns / (dt > 0 ? dt : 1), s->failed);
	printf("# peer: %ld messages, %ld FPDUs, %ld bytes; %ld messages verified before a mutation\n",
	       s->ops, s->frames, s->bytes, s->verified_ops);
	printf("# mutations (connections; outcomes as clean/accepted/term/eof/reset/silent/peer-rst/peer-term/mpa-refused/peer-fin):\n");
	for (i = 0; i < MUT_NKINDS; i++) {
		if (!s->mut[i])
			continue;
		printf("#   %-24s %6ld  ", mut_name[i], s->mut[i]);
		for (j = 0; j < OUT_NKINDS; j++)
			printf("%s%ld", j ? "/" : "", s->mo[i][j]);
		printf("\n");
	}
	printf("# outcomes:\n");
	for (i = 0; i < OUT_NKINDS; i++)
		if (s->out[i])
			printf("#   %-32s %ld\n", out_name[i], s->out[i]);
	printf("# Terminates from kiwarp (layer/etype/ecode):\n");
	for (i = 0; i < 3; i++)
		for (j = 0; j < 4; j++)
			for (k = 0; k < 256; k++)
				if (s->term[i][j][k])
					printf("#   %u/%u/0x%02x %-40s %ld\n", i, j,
					       k, kw_term_str(i, j, k),
					       s->term[i][j][k]);
	printf("# completions:");
	for (i = 0; i < 16; i++)
		if (s->wc[i])
			printf(" %s %ld;", wc_name(i), s->wc[i]);
	printf("\n# pinned pages: %ld before, %ld after\n", pin0, pin1);

	ok = !s->failed && s->conns > 0 && pin0 == pin1 &&
	     (next_conn == opt_conns || dt >= opt_seconds);
	printf("%s 1 - kw_peerfuzz: %ld connections, %ld failed, pins %s\n",
	       ok ? "ok" : "not ok", s->conns, s->failed,
	       pin0 == pin1 ? "back to baseline" : "LEAKED");
	printf("# %d passed, %d failed\n", ok, !ok);
	return ok ? 0 : 1;
}
