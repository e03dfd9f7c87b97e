/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Portability shim for the sans-I/O protocol core (iwarp.h, mpa.c, ddp.c,
 * rdmap.c): the same sources build in Kbuild and as plain user-space C for
 * unit tests and fuzzers. Only this file knows which side it is on.
 */
#ifndef KW_COMPAT_H
#define KW_COMPAT_H

#ifdef __KERNEL__
#include <linux/types.h>
#include <linux/errno.h>
#include <linux/string.h>
#include <linux/kernel.h>
#include <linux/crc32c.h>
#include <asm/byteorder.h>
#ifdef KW_HAVE_LINUX_UNALIGNED_H	/* 6.12: moved out of asm/ (kcompat.h) */
#include <linux/unaligned.h>
#else
#include <asm/unaligned.h>
#endif

/* Raw CRC32c update (no pre/post inversion), like lib/crc32c. */
static inline u32 kw_crc32c(u32 crc, const void *p, size_t len)
{
	return crc32c(crc, p, len);
}
#else /* user space */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <errno.h>
#include <endian.h>

#include <linux/types.h>	/* __be16 etc., as the uapi header uses them */

typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int16_t s16;
typedef int32_t s32;

#define cpu_to_be16(x) htobe16(x)
#define cpu_to_be32(x) htobe32(x)
#define cpu_to_be64(x) htobe64(x)
#define be16_to_cpu(x) be16toh(x)
#define be32_to_cpu(x) be32toh(x)
#define be64_to_cpu(x) be64toh(x)
#define cpu_to_le32(x) htole32(x)
#define le32_to_cpu(x) le32toh(x)

static inline u16 get_unaligned_be16(const void *p)
{ u16 v; memcpy(&v, p, 2); return be16toh(v); }
static inline u32 get_unaligned_be32(const void *p)
{ u32 v; memcpy(&v, p, 4); return be32toh(v); }
static inline u64 get_unaligned_be64(const void *p)
{ u64 v; memcpy(&v, p, 8); return be64toh(v); }
static inline u32 get_unaligned_le32(const void *p)
{ u32 v; memcpy(&v, p, 4); return le32toh(v); }
static inline u64 get_unaligned_le64(const void *p)
{ u64 v; memcpy(&v, p, 8); return le64toh(v); }
static inline void put_unaligned_be16(u16 v, void *p)
{ v = htobe16(v); memcpy(p, &v, 2); }
static inline void put_unaligned_be32(u32 v, void *p)
{ v = htobe32(v); memcpy(p, &v, 4); }
static inline void put_unaligned_be64(u64 v, void *p)
{ v = htobe64(v); memcpy(p, &v, 8); }
static inline void put_unaligned_le32(u32 v, void *p)
{ v = htole32(v); memcpy(p, &v, 4); }
static inline void put_unaligned_le64(u64 v, void *p)
{ v = htole64(v); memcpy(p, &v, 8); }

#ifndef min
#define min(a, b) ((a) < (b) ? (a) : (b))
#define max(a, b) ((a) > (b) ? (a) : (b))
#endif
#define min_t(t, a, b) ((t)(a) < (t)(b) ? (t)(a) : (t)(b))
#define max_t(t, a, b) ((t)(a) > (t)(b) ? (t)(a) : (t)(b))

/* Raw CRC32c update (no pre/post inversion); selftests/unit/crc32c_sw.c */
u32 kw_crc32c(u32 crc, const void *p, size_t len);
#endif /* __KERNEL__ */

#endif /* KW_COMPAT_H */
