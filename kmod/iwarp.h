/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * iWARP wire formats and the sans-I/O protocol core API.
 *
 * The core never touches a socket, a page or a lock. It turns work into
 * bytes (tx: header/trailer bytes around payload ranges the caller owns) and
 * bytes into decisions (rx: a resumable parser over the TCP byte stream that
 * validates every header and tells the caller where payload goes). The same
 * code is driven by the kernel glue (kmod/rx.c, kmod/tx.c), by the user-space
 * unit tests and by the fuzzers.
 *
 * Layers, one file each:
 *   mpa.c    RFC 5044 + RFC 6581: Request/Reply frames, negotiation, FPDU
 *            framing (length, pad, CRC32c), MULPDU.
 *   ddp.c    RFC 5041: DDP header codec, tagged/untagged placement checks,
 *            segmentation, the receive parser (kw_rx_*).
 *   rdmap.c  RFC 5040: opcodes, Read Request and Terminate codecs, Terminate
 *            codes for every failed check.
 *
 * Error convention: functions return 0 or a negative errno; receive-side
 * protocol violations are reported as a struct kw_term (the Terminate the
 * caller must send).
 */
#ifndef KW_IWARP_H
#define KW_IWARP_H

#include "kw_compat.h"

/* ------------------------------------------------------------------ MPA */

#define KW_MPA_KEY_LEN		16
#define KW_MPA_KEY_REQ		"MPA ID Req Frame"
#define KW_MPA_KEY_REP		"MPA ID Rep Frame"
#define KW_MPA_HDR_LEN		20	/* key + flags + rev + pd_len */
#define KW_MPA_MAX_PD		512	/* RFC 5044 section 7.1 */
#define KW_MPA_V2_PD_LEN	4	/* RFC 6581 IRD/ORD prefix */

/* Request/Reply flags byte */
#define KW_MPA_FLAG_MARKERS	0x80
#define KW_MPA_FLAG_CRC		0x40
#define KW_MPA_FLAG_REJECT	0x20
#define KW_MPA_FLAG_ENHANCED	0x10	/* RFC 6581: IRD/ORD data present */
#define KW_MPA_FLAG_RESERVED	0x0f

/* RFC 6581 IRD/ORD words (host order after be16_to_cpu) */
#define KW_MPA_V2_P2P		0x8000	/* in IRD: peer-to-peer model */
#define KW_MPA_V2_RTR_SEND	0x4000	/* in IRD: zero-length Send RTR */
#define KW_MPA_V2_RTR_WRITE	0x8000	/* in ORD: zero-length Write RTR */
#define KW_MPA_V2_RTR_READ	0x4000	/* in ORD: zero-length Read RTR */
#define KW_MPA_V2_MASK		0x3fff	/* IRD/ORD value */

/* RTR type bit mask, struct kw_mpa_frame.rtr */
#define KW_RTR_SEND		0x1
#define KW_RTR_WRITE		0x2
#define KW_RTR_READ		0x4
#define KW_RTR_ALL		(KW_RTR_SEND | KW_RTR_WRITE | KW_RTR_READ)

/* RFC 5044 section 4.5: a sender never shrinks MULPDU below 128 octets */
#define KW_MPA_MULPDU_MIN	128

/* A decoded (or to-be-encoded) MPA Request or Reply, host order. */
struct kw_mpa_frame {
	bool reply;		/* Rep key instead of Req key */
	u8 rev;			/* 1 or 2 */
	bool markers, crc, reject;
	bool enhanced;		/* rev 2 with the IRD/ORD prefix */
	bool p2p;		/* enhanced only */
	u8 rtr;			/* KW_RTR_* mask; enhanced+p2p only */
	u16 ird, ord;		/* enhanced only, <= KW_MPA_V2_MASK */
	u16 pd_len;		/* total private data on the wire */
	const u8 *ulp_pd;	/* ULP private data (after the v2 prefix) */
	u16 ulp_pd_len;
};

/* What one side wants; input to negotiation. */
struct kw_mpa_cfg {
	u8 rev;			/* highest revision to use: 1 or 2 */
	bool crc;		/* ask for / require CRC */
	bool p2p;		/* rev 2: peer-to-peer with RTR */
	u8 rtr;			/* initiator: RTR types offered (KW_RTR_*);
				 * responder: types acceptable (0: any) */
	u16 ird, ord;
	u16 ird_max;		/* initiator: the IRD it can raise to when the
				 * responder's ORD asks (RFC 6581 9.1) */
	bool markers;		/* M: this side wants markers in the FPDUs
				 * it receives (RFC 5044 section 7.1.1) */
};

/* peer_ird/peer_ord of a peer whose frame was not enhanced (no IRD/ORD) */
#define KW_MPA_IRD_ORD_UNKNOWN	0xffff

/* Negotiated result for one connection. */
struct kw_mpa_result {
	u8 rev;
	bool crc;
	bool p2p;
	u8 rtr;			/* the single RTR type in use, or 0 */
	u16 ird, ord;		/* this side's IRD/ORD after negotiation */
	u16 peer_ird, peer_ord;	/* the values the peer sent in its enhanced
				 * frame, else KW_MPA_IRD_ORD_UNKNOWN */
	bool markers_rx;	/* the peer puts markers in its FPDUs */
	bool markers_tx;	/* we put markers in ours (the peer's M) */
	u8 term;		/* initiator, on -EPROTO: the LLP error code
				 * (KW_TERM_LLP_*) of the Terminate to send
				 * before closing; 0: none */
};

/*
 * Encode a Request/Reply frame (header + v2 prefix + ULP private data) into
 * out. Returns the frame length or -EINVAL (bad field) / -EMSGSIZE (private
 * data would exceed 512 bytes or out is too small).
 */
int kw_mpa_encode(const struct kw_mpa_frame *f, const u8 *ulp_pd,
		  u16 ulp_pd_len, u8 *out, size_t out_len);

/*
 * Decode the fixed 20-byte header. expect_reply selects the key. Fills
 * rev/flags/pd_len. Returns 0, or -EPROTO (wrong key, reserved flag bits
 * set, unknown revision, Enhanced without rev 2), -EMSGSIZE (pd_len > 512).
 */
int kw_mpa_decode_hdr(const u8 hdr[KW_MPA_HDR_LEN], bool expect_reply,
		      struct kw_mpa_frame *f);

/*
 * Decode the private data that followed the header (pd points at pd_len
 * bytes, which stay owned by the caller). For enhanced frames parses the
 * IRD/ORD prefix (-EPROTO if pd_len < 4) and sets ulp_pd/ulp_pd_len to the
 * rest.
 */
int kw_mpa_decode_pd(struct kw_mpa_frame *f, const u8 *pd);

/*
 * Responder: given the decoded Request and local config, build the Reply
 * (into *reply, ulp_pd is set by the caller) and the result. Returns 0, or
 * -ECONNREFUSED when the Request cannot be served (markers required) — the
 * caller then sends the Reply with reject set, which this function has
 * filled in. An enhanced Request always gets an enhanced Reply, and a P2P
 * one a P2P Reply with at least one RTR type (RFC 6581 sections 9.2, 10).
 */
int kw_mpa_negotiate_responder(const struct kw_mpa_frame *req,
			       const struct kw_mpa_cfg *local,
			       struct kw_mpa_frame *reply,
			       struct kw_mpa_result *res);

/* Initiator: build the Request frame from the local config. */
void kw_mpa_make_request(const struct kw_mpa_cfg *local,
			 struct kw_mpa_frame *req);

/*
 * Initiator: check the Reply against what was requested and compute the
 * result. -ECONNREFUSED if the Reply has the reject flag, -EPROTO if it is
 * unusable (higher revision, markers, P2P not asked for or not answered, no
 * RTR type in common, an ORD above the IRD we can have); then res->term
 * names the LLP Terminate to send before closing (RFC 6581 section 8) and
 * res->crc how to frame it. res->peer_ird/peer_ord are set in every case.
 */
int kw_mpa_negotiate_initiator(const struct kw_mpa_cfg *local,
			       const struct kw_mpa_frame *reply,
			       struct kw_mpa_result *res);

/*
 * Largest ULPDU (DDP header + payload) per FPDU for an effective MSS,
 * RFC 5044 section 4.5 (with markers in the FPDUs when markers is set),
 * never below KW_MPA_MULPDU_MIN.
 */
u32 kw_mpa_mulpdu(u32 emss, bool markers);

/*
 * MPA markers (RFC 5044 section 5). With markers negotiated for a
 * direction (the M bit of the receiving side's Request or Reply), the
 * sender puts a 4-byte marker at every stream position that is a multiple
 * of KW_MPA_MARKER_SPACING, counting from the first octet after its own
 * Request or Reply (so the first FPDU opens with one). A marker goes in
 * front of the FPDU byte that would have been at that position, belongs
 * to that FPDU (a marker at an FPDU's start leads it) and is covered by
 * its CRC. Its low 16 bits, FPDUPTR, are the number of octets from the
 * FPDU's ULPDU Length field to the marker: 0 for a marker that leads an
 * FPDU (directly in front of that field, RFC 5044 Figure 5), and counted
 * from the length field, not from the leading marker, for the FPDU's
 * later markers. The reserved high 16 bits are zero on transmit and
 * ignored on receive. The positions are stream offsets modulo 2^32 (512
 * divides 2^32).
 */
#define KW_MPA_MARKER_SPACING	512
#define KW_MPA_MARKER_LEN	4

/* Octets from stream position pos up to the next marker position (0: a
 * marker is due at pos). */
static inline u32 kw_mpa_marker_gap(u32 pos)
{
	return -pos & (KW_MPA_MARKER_SPACING - 1);
}

/*
 * Octets that len octets of FPDUs take on the wire when they start at
 * stream position pos, markers included: one marker in front of every
 * octet that falls on a marker position (len 0: none).
 */
static inline u32 kw_mpa_wire_len(u32 pos, u32 len)
{
	u32 gap = kw_mpa_marker_gap(pos);

	if (gap >= len)
		return len;
	/* markers in front of content octets gap, gap + 508, gap + 2 * 508, ... */
	return len + KW_MPA_MARKER_LEN *
	       ((len - 1 - gap) / (KW_MPA_MARKER_SPACING - KW_MPA_MARKER_LEN) + 1);
}

/* At most this many marker bytes among len octets, wherever they start. */
#define KW_MPA_MARKERS_MAX(len)	(KW_MPA_MARKER_LEN * \
	((len) / (KW_MPA_MARKER_SPACING - KW_MPA_MARKER_LEN) + 1))

/*
 * The marker at stream position pos of the FPDU whose ULPDU Length field
 * is at hdr_pos (a marker that leads the FPDU: pos == hdr_pos - 4, and
 * FPDUPTR 0).
 */
static inline void kw_mpa_marker_encode(u32 pos, u32 hdr_pos, u8 out[4])
{
	put_unaligned_be16(0, out);
	put_unaligned_be16(pos + KW_MPA_MARKER_LEN == hdr_pos ? 0 :
			   (u16)(pos - hdr_pos), out + 2);
}

/* Bytes of pad after a ULPDU of ulpdu_len so that 2 + len + pad is 4-aligned */
static inline u32 kw_mpa_pad(u32 ulpdu_len)
{
	return (4 - ((ulpdu_len + 2) & 3)) & 3;
}

/* Bytes on the wire of the FPDU whose length field is ulpdu_len:
 * length, ULPDU, pad and CRC field (RFC 5044 section 4.1). */
static inline u32 kw_mpa_fpdu_len(u32 ulpdu_len)
{
	return 2 + ulpdu_len + kw_mpa_pad(ulpdu_len) + 4;
}

/* The longest FPDU there is: a 16-bit ULPDU length of 65535, whose pad
 * is 3 (kw_mpa_pad()), without markers. */
#define KW_MPA_FPDU_MAX	(2 + 65535 + 3 + 4)

/*
 * FPDU CRC: crc = kw_mpa_crc_init(); crc = kw_mpa_crc_update(crc, ...) over
 * the 2-byte length, the ULPDU and the pad; kw_mpa_crc_put(crc, out) writes
 * the 4 trailer bytes exactly as they appear on the wire.
 */
static inline u32 kw_mpa_crc_init(void) { return ~0U; }
static inline u32 kw_mpa_crc_update(u32 crc, const void *p, size_t len)
{
	return kw_crc32c(crc, p, len);
}
void kw_mpa_crc_put(u32 crc, u8 out[4]);
bool kw_mpa_crc_check(u32 crc, const u8 wire[4]);

/* -------------------------------------------------------------- DDP/RDMAP */

/* DDP control byte */
#define KW_DDP_FLAG_TAGGED	0x80
#define KW_DDP_FLAG_LAST	0x40
#define KW_DDP_RSVD_MASK	0x3c
#define KW_DDP_VERSION_MASK	0x03
#define KW_DDP_VERSION		1
/* RDMAP control byte */
#define KW_RDMAP_VERSION_SHIFT	6
#define KW_RDMAP_VERSION	1
#define KW_RDMAP_RSVD_MASK	0x30
#define KW_RDMAP_OPCODE_MASK	0x0f

#define KW_DDP_TAGGED_HDR_LEN	14	/* ctrl, rdmap ctrl, STag, TO */
#define KW_DDP_UNTAGGED_HDR_LEN	18	/* ctrl, rdmap ctrl, inv STag, QN, MSN, MO */
#define KW_READ_REQ_LEN		28	/* RDMA Read Request payload */

enum kw_rdmap_opcode {
	KW_OP_WRITE = 0,
	KW_OP_READ_REQ = 1,
	KW_OP_READ_RESP = 2,
	KW_OP_SEND = 3,
	KW_OP_SEND_INV = 4,
	KW_OP_SEND_SE = 5,
	KW_OP_SEND_SE_INV = 6,
	KW_OP_TERMINATE = 7,
	KW_OP_MAX = 8
};

/* Untagged queue numbers, RFC 5040 section 5.1 */
#define KW_QN_SEND	0
#define KW_QN_READ_REQ	1
#define KW_QN_TERMINATE	2

/* A decoded DDP segment header, host order. */
struct kw_ddp_hdr {
	bool tagged;
	bool last;
	u8 opcode;		/* enum kw_rdmap_opcode */
	u32 stag;		/* tagged: sink STag */
	u64 to;			/* tagged: tagged offset of the first byte */
	u32 inv_stag;		/* untagged Send with Invalidate */
	u32 qn, msn, mo;	/* untagged */
	u32 hdr_len;		/* 14 or 18 */
};

/* RDMA Read Request payload, host order */
struct kw_read_req {
	u32 sink_stag;
	u64 sink_to;
	u32 size;
	u32 src_stag;
	u64 src_to;
};

/* ------------------------------------------------------------- Terminate */

enum kw_term_layer {
	KW_TERM_LAYER_RDMAP = 0,
	KW_TERM_LAYER_DDP = 1,
	KW_TERM_LAYER_LLP = 2,
};

/* RDMAP error types and codes, RFC 5040 section 7 / 8.2 */
#define KW_TERM_RDMAP_ETYPE_CATASTROPHIC	0x0
#define KW_TERM_RDMAP_ETYPE_REMOTE_PROT		0x1
#define KW_TERM_RDMAP_ETYPE_REMOTE_OP		0x2
/* remote protection error codes */
#define KW_TERM_RDMAP_INV_STAG			0x00
#define KW_TERM_RDMAP_BASE_BOUNDS		0x01
#define KW_TERM_RDMAP_ACCESS			0x02
#define KW_TERM_RDMAP_STAG_NOT_ASSOC		0x03
#define KW_TERM_RDMAP_TO_WRAP			0x04
#define KW_TERM_RDMAP_STAG_CANT_INV		0x09
#define KW_TERM_RDMAP_UNSPECIFIED		0xff
/* remote operation error codes */
#define KW_TERM_RDMAP_INV_VERSION		0x05
#define KW_TERM_RDMAP_UNEXP_OPCODE		0x06
#define KW_TERM_RDMAP_CATASTROPHIC_STREAM	0x07
#define KW_TERM_RDMAP_CATASTROPHIC_GLOBAL	0x08
/* (0x09 STag cannot be invalidated, 0xff unspecified: one code space) */

/* DDP error types and codes, RFC 5041 section 7 */
#define KW_TERM_DDP_ETYPE_CATASTROPHIC		0x0
#define KW_TERM_DDP_ETYPE_TAGGED		0x1
#define KW_TERM_DDP_ETYPE_UNTAGGED		0x2
#define KW_TERM_DDP_ETYPE_RSVD			0x3
/* tagged buffer errors */
#define KW_TERM_DDP_T_INV_STAG			0x00
#define KW_TERM_DDP_T_BASE_BOUNDS		0x01
#define KW_TERM_DDP_T_STAG_NOT_ASSOC		0x02
#define KW_TERM_DDP_T_TO_WRAP			0x03
#define KW_TERM_DDP_T_INV_VERSION		0x04
/* untagged buffer errors */
#define KW_TERM_DDP_U_INV_QN			0x01
#define KW_TERM_DDP_U_INV_MSN_NOBUF		0x02
#define KW_TERM_DDP_U_INV_MSN_RANGE		0x03
#define KW_TERM_DDP_U_INV_MO			0x04
#define KW_TERM_DDP_U_MSG_TOO_LONG		0x05
#define KW_TERM_DDP_U_INV_VERSION		0x06

/* LLP (MPA) error codes, RFC 5044 section 8 + RFC 6581 section 8 (etype 0) */
#define KW_TERM_LLP_ETYPE_MPA			0x0
#define KW_TERM_LLP_STREAM_LOST			0x01	/* never sendable */
#define KW_TERM_LLP_CRC				0x02
#define KW_TERM_LLP_MARKER			0x03	/* marker/FPDU start */
#define KW_TERM_LLP_INV_REQ_RESP		0x04	/* unexpected Req/Rep */
#define KW_TERM_LLP_LOCAL_CATASTROPHIC		0x05	/* RFC 6581 */
#define KW_TERM_LLP_INSUFFICIENT_IRD		0x06	/* RFC 6581 */
#define KW_TERM_LLP_NO_MATCHING_RTR		0x07	/* RFC 6581 */

struct kw_term {
	u8 layer, etype, ecode;
	/* hdrct flags: which parts of the offending FPDU the Terminate carries */
	bool has_len;		/* M: DDP segment length is valid */
	bool has_ddp_hdr;	/* D: DDP header included */
	bool has_rdmap_hdr;	/* R: RDMA Read Request header included */
};

/* Longest Terminate payload: control + len + DDP hdr + Read Request hdr */
#define KW_TERM_MAX_LEN		(4 + 4 + KW_DDP_UNTAGGED_HDR_LEN + KW_READ_REQ_LEN)

/*
 * Encode the Terminate payload (the bytes after the untagged DDP header of a
 * QN 2 message): control word, then, per the hdrct flags, the offending
 * segment's length and headers (copied from bad_fpdu/bad_fpdu_len, the
 * bytes of that FPDU starting at its MPA length field). Returns its length,
 * or -EINVAL if the flags are inconsistent (D without M, R without D) or
 * bad_fpdu is too short for them.
 */
int kw_term_encode(const struct kw_term *t, const u8 *bad_fpdu,
		   u32 bad_fpdu_len, u8 out[KW_TERM_MAX_LEN]);
/*
 * Decode a received Terminate payload (-EPROTO if malformed). Also accepts
 * the control word layout Linux siw sends when it sets M/D/R (see
 * kw_term_siw_layout()).
 */
int kw_term_decode(const u8 *payload, u32 len, struct kw_term *t);
/* True if a Terminate control word is in siw's little-endian bit-field
 * layout (Layer/EType nibbles swapped, M/D/R in byte 2 bits 0..2). */
bool kw_term_siw_layout(const u8 ctrl[4]);

/* --------------------------------------------------------------- transmit */

/* One RDMAP message to segment into FPDUs. */
struct kw_tx_msg {
	u8 opcode;		/* enum kw_rdmap_opcode */
	bool crc;		/* negotiated MPA CRC */
	u32 mulpdu;		/* from kw_mpa_mulpdu() */
	u32 len;		/* payload bytes (0 allowed) */
	u32 stag;		/* tagged: sink STag */
	u64 to;			/* tagged: sink TO of payload byte 0 */
	u32 inv_stag;		/* Send with Invalidate */
	u32 qn, msn;		/* untagged */
	/* For READ_REQ and TERMINATE the "payload" is this inline block,
	 * which is carried in kw_tx_fpdu.hdr, never by reference. */
	const u8 *inline_data;
	u32 inline_len;
};

#define KW_TX_HDR_MAX	(2 + KW_DDP_UNTAGGED_HDR_LEN + KW_TERM_MAX_LEN)

/*
 * Read Response FPDUs are copied, whole, into batches of at most this many
 * bytes (their payload is cut so that one fits) that TCP takes a batch at
 * a time (kmod/tx.c): up to that much copied before a deregistration
 * returned may still go out after it.
 */
#define KW_TX_RESP_BATCH	32768

/* One FPDU: hdr bytes, then payload [payload_off, +payload_len) of the
 * message (caller's memory), then trailer bytes (pad, CRC). */
struct kw_tx_fpdu {
	u8 hdr[KW_TX_HDR_MAX];
	u32 hdr_len;
	u32 payload_off;
	u32 payload_len;
	u8 trailer[3 + 4];
	u32 trailer_len;
	bool last;
};

/*
 * Build the FPDU that starts at payload offset *off of msg and advance *off.
 * The message is fully segmented when kw_tx_fpdu.last is set (a zero-length
 * message is exactly one FPDU). The trailer's CRC is not yet valid: if
 * msg->crc, the caller computes crc over hdr and the payload bytes with
 * kw_mpa_crc_update() and calls kw_tx_fpdu_seal(). Returns 0 or -EINVAL.
 */
int kw_tx_fpdu_next(const struct kw_tx_msg *msg, u32 *off,
		    struct kw_tx_fpdu *f);
/* Finish the trailer: CRC over the pad bytes, then write it. crc is the
 * running CRC after hdr + payload (ignored without CRC). */
void kw_tx_fpdu_seal(const struct kw_tx_msg *msg, struct kw_tx_fpdu *f,
		     u32 crc);

/* Bytes the whole message occupies on the wire (mod 2^32). */
u32 kw_tx_msg_wire_len(const struct kw_tx_msg *msg);

/* Encode a Read Request payload (28 bytes). */
void kw_read_req_encode(const struct kw_read_req *r, u8 out[KW_READ_REQ_LEN]);
void kw_read_req_decode(const u8 in[KW_READ_REQ_LEN], struct kw_read_req *r);

/* ---------------------------------------------------------------- receive */

/* Memory access rights as seen by the core (== KIWARP_ACCESS_*). */
#define KW_ACC_LOCAL_WRITE	(1U << 0)
#define KW_ACC_REMOTE_WRITE	(1U << 1)
#define KW_ACC_REMOTE_READ	(1U << 2)

/* A memory region as the glue shows it to the core. */
struct kw_mr_view {
	void *cookie;		/* glue's MR; passed back to place() */
	u32 stag;
	u32 pd;			/* PD id; must match kw_rx.pd */
	u32 access;		/* KW_ACC_* */
	bool valid;		/* not invalidated */
	u64 base;		/* first valid TO */
	u64 len;
	/*
	 * windowed: remote Writes may only land in the ring interval of
	 * win_len bytes starting win_off bytes after base (modulo len), the
	 * part of a receive ring its owner has advertised and not yet seen
	 * filled (es.c); elsewhere is a base or bounds violation.
	 */
	bool windowed;
	u32 win_off, win_len;
};

/* A posted receive buffer (untagged QN 0), as a scatter list of MR pieces. */
#define KW_RX_MAX_SGE	6
struct kw_rx_buf {
	u32 num_sge;
	struct {
		struct kw_mr_view mr;	/* the core checks valid, LOCAL_WRITE
					 * and addr/len within mr for every
					 * SGE a segment touches */
		u64 addr;		/* TO within mr */
		u32 len;
	} sge[KW_RX_MAX_SGE];
	u32 total;		/* sum of sge[].len */
};

/* Why the parser stopped on an event, see kw_rx_input(). */
struct kw_rx_ops {
	/*
	 * Tagged sink lookup (Write, Read Response). Fill *mr and return 0,
	 * or -ENOENT if the STag is unknown. Called in the receive path: must
	 * not sleep. For a Read Response the glue also checks that the STag
	 * is the one of the outstanding Read (else it returns -ENOENT).
	 */
	int (*lookup_stag)(void *ctx, u32 stag, u8 opcode,
			   struct kw_mr_view *mr);
	/*
	 * Untagged QN 0: the posted receive buffer for message msn (the glue
	 * keeps it for the whole message). -ENOENT if none is posted;
	 * -EFAULT if the one posted is unusable (the local side's fault:
	 * RDMAP local catastrophic error instead of "no buffer").
	 */
	int (*get_rx_buf)(void *ctx, u32 msn, const struct kw_rx_buf **buf);
	/* Copy len payload bytes to byte `off` of MR `cookie` (off relative
	 * to mr->base). Must not fail: the core has checked the bounds. */
	void (*place)(void *ctx, void *cookie, u64 off, const void *src,
		      u32 len);
	/*
	 * A DDP segment is complete and (with CRC) verified. payload holds the
	 * inline payload for READ_REQ (28 bytes) and TERMINATE, else NULL.
	 * placed is the payload length. Returns 0 or a Terminate in *term
	 * with -EPROTO (e.g. Read Request beyond IRD, unexpected response).
	 */
	int (*segment_done)(void *ctx, const struct kw_ddp_hdr *h,
			    const u8 *payload, u32 placed,
			    struct kw_term *term);
};

enum kw_rx_state {
	KW_RX_HDR,		/* collecting MPA length + DDP/RDMAP header */
	KW_RX_INLINE,		/* collecting Read Request / Terminate body */
	KW_RX_DATA,		/* placing payload */
	KW_RX_TRAILER,		/* pad + CRC */
	KW_RX_ERROR,		/* stopped; term holds the Terminate to send */
};

struct kw_rx {
	/* configuration, set by kw_rx_init() */
	const struct kw_rx_ops *ops;
	void *ctx;
	bool crc;
	u32 pd;

	/* parser state */
	enum kw_rx_state state;
	u8 hdr[2 + KW_DDP_UNTAGGED_HDR_LEN];
	u32 hdr_got;
	u8 inl[KW_TERM_MAX_LEN + 64];
	u32 inl_got, inl_need;
	u16 ulpdu_len;
	u32 data_left;		/* payload bytes still to place */
	u32 data_done;		/* payload bytes placed in this segment */
	bool discard;		/* CRC on and the header failed: skip the
				 * FPDU, then report term if the CRC is
				 * good (else an MPA CRC error) */
	bool verified;		/* the caller checked this FPDU's CRC
				 * before feeding it (kw_rx_verified()) */
	u8 trailer[7];
	u32 trailer_got, trailer_need;
	u32 crc_acc;		/* CRC of the FPDU so far, in wire order */
	struct kw_ddp_hdr h;

	/* stream position of the next byte (0: the first after the MPA
	 * frames), and of the current FPDU's ULPDU Length field (past a
	 * marker that leads the FPDU, once that is in); markers:
	 * kw_rx_set_markers() */
	bool markers;
	bool fpdu_open;		/* the current FPDU's first byte was seen */
	u32 mpos, fpdu_pos;
	u8 mk[KW_MPA_MARKER_LEN];
	u32 mk_got;

	/* current placement target */
	struct kw_mr_view mr;		/* tagged */
	const struct kw_rx_buf *buf;	/* untagged QN 0 */
	u64 place_off;			/* tagged: offset in mr */

	/* untagged reassembly: next MSN expected per queue (start at 1) */
	u32 msn[3];

	/* the offending FPDU's first bytes, for the Terminate */
	struct kw_term term;
	u8 bad[2 + KW_DDP_UNTAGGED_HDR_LEN + KW_READ_REQ_LEN];
	u32 bad_len;

	/* statistics */
	u64 fpdus, payload_bytes, markers_seen;
};

void kw_rx_init(struct kw_rx *rx, const struct kw_rx_ops *ops, void *ctx,
		bool crc, u32 pd);

/*
 * Feed len stream bytes. Returns the number of bytes consumed (== len unless
 * the parser entered KW_RX_ERROR, in which case rx->term says which
 * Terminate to send and rx->bad/bad_len hold the offending FPDU's headers).
 */
size_t kw_rx_input(struct kw_rx *rx, const u8 *p, size_t len);

static inline bool kw_rx_failed(const struct kw_rx *rx)
{
	return rx->state == KW_RX_ERROR;
}

/*
 * Remove markers from the stream from here on (the first byte after the
 * peer's Request or Reply is position 0): check each (FPDUPTR), fold it
 * into its FPDU's CRC, and feed the parser the rest.
 */
void kw_rx_set_markers(struct kw_rx *rx);

/* The caller found a bad marker in the FPDU ahead (checked with its CRC):
 * the parser fails with the marker Terminate, before placing any of it. */
void kw_rx_marker_failed(struct kw_rx *rx);

/*
 * Is the parser between FPDUs (the next byte starts an FPDU: its MPA
 * length field, or with markers possibly a marker that leads it)?
 */
static inline bool kw_rx_at_fpdu(const struct kw_rx *rx)
{
	return rx->state == KW_RX_HDR && !rx->hdr_got && !rx->fpdu_open;
}

/* Between messages: between FPDUs, and the last one (if any) had L. */
static inline bool kw_rx_between_messages(const struct kw_rx *rx)
{
	return kw_rx_at_fpdu(rx) && (!rx->fpdus || rx->h.last);
}

/*
 * RFC 5044 section 6: "An MPA receiver MUST first verify the FPDU before
 * passing the ULPDU to DDP". A caller that holds a whole FPDU before
 * feeding it (the kernel leaves it in the socket's skbs) checks its CRC
 * in place and says so here, at an FPDU boundary: the parser then acts on
 * the header at once, places as it goes and skips its own CRC check for
 * that one FPDU. Without this call a CRC parser never places a byte of an
 * FPDU whose header failed before its CRC is known, but must place the
 * payload as it streams in (that is what a caller without the whole FPDU
 * at hand gets).
 */
void kw_rx_verified(struct kw_rx *rx);
/* The caller's check of the FPDU at hand failed: MPA CRC error (2/0/2). */
void kw_rx_crc_failed(struct kw_rx *rx);

/* Is (opcode, tagged) a legal combination? (RFC 5040 table 3) */
bool kw_rdmap_opcode_valid(u8 opcode, bool tagged);

/* Decode a DDP/RDMAP header from p (hdr_len bytes available, at least 2 to
 * tell tagged from untagged). -EAGAIN if more bytes are needed, -EPROTO with
 * *term filled on a version/opcode violation. Reserved bits are ignored:
 * RFC 5041 section 4.1 and RFC 5040 section 4.1 say they are not checked
 * on receive. */
int kw_ddp_hdr_decode(const u8 *p, u32 avail, struct kw_ddp_hdr *h,
		      struct kw_term *term);
/* Encode h into out; returns h->hdr_len. */
u32 kw_ddp_hdr_encode(const struct kw_ddp_hdr *h, u8 *out);

#endif /* KW_IWARP_H */
