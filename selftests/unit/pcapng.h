/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Tiny pcapng reader for the golden-vector test and the fuzz corpus
 * generator: Section Header, Interface Description and Enhanced Packet
 * blocks, Ethernet/IPv4/TCP, each TCP direction reassembled by sequence
 * number into one contiguous byte stream.
 */
#ifndef KW_PCAPNG_H
#define KW_PCAPNG_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

#define PC_MAX_FLOWS 64	/* kiwarp-terminates.pcapng has 36 */
#define PC_MAX_STREAM (4u << 20)

struct pc_flow {
	uint32_t saddr, daddr;
	uint16_t sport, dport;
	uint32_t isn;		/* sequence number of stream byte 0 */
	int have_isn;
	uint8_t *data;
	uint32_t len;		/* contiguous bytes from isn */
	uint32_t max_end;	/* highest byte seen (holes if > len) */
};

struct pc_capture {
	struct pc_flow flow[PC_MAX_FLOWS];
	int nflows;
	int packets;
};

static uint32_t pc_le32(const uint8_t *p)
{
	return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t pc_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3];
}

static uint16_t pc_be16(const uint8_t *p)
{
	return p[0] << 8 | p[1];
}

static struct pc_flow *pc_flow_get(struct pc_capture *c, uint32_t sa,
				   uint16_t sp, uint32_t da, uint16_t dp)
{
	int i;

	for (i = 0; i < c->nflows; i++) {
		struct pc_flow *f = &c->flow[i];

		if (f->saddr == sa && f->sport == sp && f->daddr == da &&
		    f->dport == dp)
			return f;
	}
	if (c->nflows == PC_MAX_FLOWS)
		return NULL;
	c->flow[c->nflows] = (struct pc_flow){ .saddr = sa, .daddr = da,
		.sport = sp, .dport = dp };
	c->flow[c->nflows].data = calloc(1, PC_MAX_STREAM);
	if (!c->flow[c->nflows].data)
		return NULL;
	return &c->flow[c->nflows++];
}

/* One Ethernet frame. Returns 0, or -1 on a malformed frame. */
static int pc_packet(struct pc_capture *c, const uint8_t *p, uint32_t n)
{
	uint32_t ihl, tot, thl, seq, plen, off;
	const uint8_t *ip, *tcp;
	struct pc_flow *f;
	uint8_t flags;

	if (n < 14 || pc_be16(p + 12) != 0x0800)
		return 0;		/* not IPv4: ignore */
	ip = p + 14;
	n -= 14;
	if (n < 20 || (ip[0] >> 4) != 4)
		return -1;
	ihl = (ip[0] & 15) * 4;
	tot = pc_be16(ip + 2);
	if (ihl < 20 || tot > n || tot < ihl)
		return -1;
	if (ip[9] != 6)
		return 0;		/* not TCP */
	tcp = ip + ihl;
	if (tot - ihl < 20)
		return -1;
	thl = (tcp[12] >> 4) * 4;
	if (thl < 20 || thl > tot - ihl)
		return -1;
	plen = tot - ihl - thl;
	seq = pc_be32(tcp + 4);
	flags = tcp[13];
	f = pc_flow_get(c, pc_be32(ip + 12), pc_be16(tcp), pc_be32(ip + 16),
			pc_be16(tcp + 2));
	if (!f)
		return -1;
	if (flags & 0x02) {		/* SYN */
		f->isn = seq + 1;
		f->have_isn = 1;
		return 0;
	}
	if (!plen)
		return 0;
	if (!f->have_isn) {		/* capture started mid-stream */
		f->isn = seq;
		f->have_isn = 1;
	}
	off = seq - f->isn;
	if (off >= PC_MAX_STREAM || plen > PC_MAX_STREAM - off)
		return -1;
	memcpy(f->data + off, tcp + thl, plen);
	if (off + plen > f->max_end)
		f->max_end = off + plen;
	if (off <= f->len && off + plen > f->len)
		f->len = off + plen;
	return 0;
}

/* Parse a whole pcapng file. Returns packets read, or -1. */
static int pc_load(const char *path, struct pc_capture *c)
{
	FILE *fp = fopen(path, "rb");
	uint8_t *buf;
	long sz;
	uint32_t pos = 0, linktype = 1;

	memset(c, 0, sizeof(*c));
	if (!fp)
		return -1;
	fseek(fp, 0, SEEK_END);
	sz = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	buf = malloc(sz > 0 ? sz : 1);
	if (!buf || fread(buf, 1, sz, fp) != (size_t)sz) {
		fclose(fp);
		free(buf);
		return -1;
	}
	fclose(fp);
	while (pos + 12 <= (uint32_t)sz) {
		uint32_t type = pc_le32(buf + pos);
		uint32_t blen = pc_le32(buf + pos + 4);
		const uint8_t *b = buf + pos + 8;

		if (blen < 12 || blen % 4 || pos + blen > (uint32_t)sz)
			goto bad;
		if (type == 0x0a0d0d0a) {
			/* byte-order magic: only little-endian files */
			if (pc_le32(b) != 0x1a2b3c4d)
				goto bad;
		} else if (type == 1) {
			linktype = b[0] | b[1] << 8;
		} else if (type == 6) {
			uint32_t caplen = pc_le32(b + 12);

			if (20 + caplen > blen - 12)
				goto bad;
			if (linktype != 1)
				goto bad;
			if (pc_packet(c, b + 20, caplen))
				goto bad;
			c->packets++;
		}
		pos += blen;
	}
	free(buf);
	return c->packets;
bad:
	free(buf);
	return -1;
}

static void pc_free(struct pc_capture *c)
{
	int i;

	for (i = 0; i < c->nflows; i++)
		free(c->flow[i].data);
	c->nflows = 0;
}

#endif /* KW_PCAPNG_H */
