/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/* Helpers shared by kiwarp-perf and its plain-TCP twin tcp-perf. */
#ifndef KW_PERF_UTIL_H
#define KW_PERF_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static inline double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/*
 * CPU cost of the timed part of a bandwidth run (make bench): the busy
 * time of each CPU (user, nice, system, irq, softirq, steal) from
 * /proc/stat, so that process start-up and connection setup are left out.
 * cpu_busy() fills up to PERF_MAX_CPUS counters and returns how many, 0 if
 * /proc/stat cannot be read; cpu_busy_json() prints the seconds spent
 * between two such readings as a JSON member, or nothing.
 */
#define PERF_MAX_CPUS 64

struct cpu_busy {
	int n;
	unsigned long long busy[PERF_MAX_CPUS];	/* clock ticks */
};

static inline int cpu_busy(struct cpu_busy *cb)
{
	unsigned long long u, ni, sy, id, io, irq, sirq, st;
	char line[512];
	FILE *f = fopen("/proc/stat", "r");
	int cpu;

	cb->n = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f) && cb->n < PERF_MAX_CPUS) {
		if (strncmp(line, "cpu", 3) || line[3] < '0' || line[3] > '9')
			continue;
		if (sscanf(line, "cpu%d %llu %llu %llu %llu %llu %llu %llu %llu",
			   &cpu, &u, &ni, &sy, &id, &io, &irq, &sirq, &st) != 9 ||
		    cpu != cb->n)
			break;
		cb->busy[cb->n++] = u + ni + sy + irq + sirq + st;
	}
	fclose(f);
	return cb->n;
}

static inline void cpu_busy_json(const struct cpu_busy *a,
				 const struct cpu_busy *b)
{
	double hz = (double)sysconf(_SC_CLK_TCK);

	if (!a->n || a->n != b->n || hz <= 0)
		return;
	printf("\"cpu_busy_s\":[");
	for (int i = 0; i < a->n; i++)
		printf("%s%.2f", i ? "," : "", (b->busy[i] - a->busy[i]) / hz);
	printf("],");
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
