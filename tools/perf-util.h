/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/* Helpers shared by kiwarp-perf and its plain-TCP twin tcp-perf. */
#ifndef KW_PERF_UTIL_H
#define KW_PERF_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static inline double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* qsort() comparator for latency samples */
static inline int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* "64", "4k", "1M", "1g" -> bytes; 0 if malformed, zero or above max */
static inline uint32_t parse_size(const char *s, unsigned long long max)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 0);

	if (*end == 'k' || *end == 'K')
		v <<= 10, end++;
	else if (*end == 'm' || *end == 'M')
		v <<= 20, end++;
	else if (*end == 'g' || *end == 'G')
		v <<= 30, end++;
	if (*end || !v || v > max)
		return 0;
	return (uint32_t)v;
}

#endif /* KW_PERF_UTIL_H */
