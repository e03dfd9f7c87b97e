/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * Minimal kselftest-style harness: TEST(name) { ... } registers a case,
 * each case runs in a forked child (a crash fails only that case), results
 * are printed as TAP, and the binary exits nonzero if any case failed.
 * The last line is "# N passed, N failed" for the Makefile to add up.
 */
#ifndef KW_HARNESS_H
#define KW_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

struct kwt_case {
	const char *name;
	void (*fn)(int *kwt_fail);
};

#define KWT_MAX 512
static struct kwt_case kwt_cases[KWT_MAX];
static int kwt_ncases;

#define TEST(name)							\
	static void kwt_##name(int *kwt_fail);				\
	__attribute__((constructor)) static void kwt_reg_##name(void)	\
	{								\
		if (kwt_ncases < KWT_MAX)				\
			kwt_cases[kwt_ncases++] =			\
				(struct kwt_case){ #name, kwt_##name };	\
	}								\
	static void kwt_##name(int *kwt_fail)

#define KWT_CHECK(cond, fatal, fmt, ...)				\
	do {								\
		if (!(cond)) {						\
			printf("# %s:%d: " fmt "\n", __FILE__,		\
			       __LINE__, __VA_ARGS__);			\
			*kwt_fail = 1;					\
			if (fatal)					\
				return;					\
		}							\
	} while (0)

/*
 * Integers and pointers compare as long long; a floating operand would be
 * truncated (a time of 0.3 s "< 0.25" as 0 < 0), so it does not compile:
 * the _F macros compare doubles.
 */
#define KWT_IS_FP(x) _Generic((x), float: 1, double: 1, long double: 1, \
			      default: 0)
#define KWT_CMP(a, op, b, fatal)					\
	do {								\
		_Static_assert(!KWT_IS_FP(a) && !KWT_IS_FP(b),		\
			       "floating operand: use the _F macros");	\
		long long kwt_a = (long long)(a);			\
		long long kwt_b = (long long)(b);			\
		KWT_CHECK(kwt_a op kwt_b, fatal,			\
			  "%s " #op " %s failed: %lld vs %lld (0x%llx vs 0x%llx)", \
			  #a, #b, kwt_a, kwt_b,				\
			  (unsigned long long)kwt_a,			\
			  (unsigned long long)kwt_b);			\
	} while (0)

#define KWT_FCMP(a, op, b, fatal)					\
	do {								\
		double kwt_fa = (a), kwt_fb = (b);			\
		KWT_CHECK(kwt_fa op kwt_fb, fatal,			\
			  "%s " #op " %s failed: %g vs %g", #a, #b,	\
			  kwt_fa, kwt_fb);				\
	} while (0)

#define ASSERT_LT_F(a, b)	KWT_FCMP(a, <, b, 1)
#define ASSERT_GE_F(a, b)	KWT_FCMP(a, >=, b, 1)
#define EXPECT_LT_F(a, b)	KWT_FCMP(a, <, b, 0)
#define EXPECT_LE_F(a, b)	KWT_FCMP(a, <=, b, 0)
#define EXPECT_GT_F(a, b)	KWT_FCMP(a, >, b, 0)
#define EXPECT_GE_F(a, b)	KWT_FCMP(a, >=, b, 0)

#define ASSERT_EQ(a, b)	KWT_CMP(a, ==, b, 1)
#define ASSERT_NE(a, b)	KWT_CMP(a, !=, b, 1)
#define ASSERT_LT(a, b)	KWT_CMP(a, <, b, 1)
#define ASSERT_LE(a, b)	KWT_CMP(a, <=, b, 1)
#define ASSERT_GT(a, b)	KWT_CMP(a, >, b, 1)
#define ASSERT_GE(a, b)	KWT_CMP(a, >=, b, 1)
#define ASSERT_TRUE(c)	KWT_CHECK((c), 1, "%s is false", #c)
#define ASSERT_FALSE(c)	KWT_CHECK(!(c), 1, "%s is true", #c)
#define EXPECT_EQ(a, b)	KWT_CMP(a, ==, b, 0)
#define EXPECT_NE(a, b)	KWT_CMP(a, !=, b, 0)
#define EXPECT_LE(a, b)	KWT_CMP(a, <=, b, 0)
#define EXPECT_LT(a, b)	KWT_CMP(a, <, b, 0)
#define EXPECT_GT(a, b)	KWT_CMP(a, >, b, 0)
#define EXPECT_GE(a, b)	KWT_CMP(a, >=, b, 0)
#define EXPECT_TRUE(c)	KWT_CHECK((c), 0, "%s is false", #c)
#define EXPECT_FALSE(c)	KWT_CHECK(!(c), 0, "%s is true", #c)
/* Where two buffers differ: the first and last differing offsets and how
 * many bytes differ, for a mismatch's message. */
static inline void kwt_memdiff(const void *a, const void *b, size_t n,
			       char *out, size_t outlen)
{
	const unsigned char *x = a, *y = b;
	size_t i, first = 0, last = 0, count = 0;

	for (i = 0; i < n; i++) {
		if (x[i] == y[i])
			continue;
		if (!count++)
			first = i;
		last = i;
	}
	snprintf(out, outlen, "%zu differ, first at %zu (0x%02x vs 0x%02x), last at %zu",
		 count, first, count ? x[first] : 0, count ? y[first] : 0,
		 last);
}

#define KWT_MEMEQ(a, b, n, fatal)					\
	do {								\
		size_t kwt_n = (n);					\
		char kwt_d[128];					\
									\
		if (!memcmp((a), (b), kwt_n))				\
			break;						\
		kwt_memdiff((a), (b), kwt_n, kwt_d, sizeof(kwt_d));	\
		KWT_CHECK(0, fatal, "%s != %s (%zu bytes): %s",	\
			  #a, #b, kwt_n, kwt_d);			\
	} while (0)
#define ASSERT_MEMEQ(a, b, n)	KWT_MEMEQ(a, b, n, 1)
#define EXPECT_MEMEQ(a, b, n)	KWT_MEMEQ(a, b, n, 0)

int main(int argc, char **argv)
{
	int i, passed = 0, failed = 0;

	/*
	 * Optional arguments: run only the tests whose name contains one of
	 * them; an argument starting with '!' instead drops the tests whose
	 * name contains the rest of it ("!_rev1").
	 */
	if (argc > 1) {
		int n = 0, j, incl = 0;

		for (j = 1; j < argc; j++)
			incl += argv[j][0] != '!';
		for (i = 0; i < kwt_ncases; i++) {
			int in = !incl, out = 0;

			for (j = 1; j < argc; j++) {
				if (argv[j][0] == '!')
					out |= !!strstr(kwt_cases[i].name,
							argv[j] + 1);
				else
					in |= !!strstr(kwt_cases[i].name,
						       argv[j]);
			}
			if (in && !out)
				kwt_cases[n++] = kwt_cases[i];
		}
		kwt_ncases = n;
		if (!n) {	/* a filter that selects nothing is a mistake */
			printf("TAP version 13\n1..1\nnot ok 1 - %s: no test "
			       "matches the arguments\n# 0 passed, 1 failed\n",
			       argv[0]);
			return 1;
		}
	}
	printf("TAP version 13\n1..%d\n", kwt_ncases);
	for (i = 0; i < kwt_ncases; i++) {
		struct timespec t0, t1;
		int status = 0, ok;
		pid_t pid;

		fflush(stdout);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		pid = fork();
		if (pid == 0) {
			int fail = 0;

			kwt_cases[i].fn(&fail);
			fflush(stdout);
			_exit(fail ? 1 : 0);
		}
		if (pid < 0 || waitpid(pid, &status, 0) < 0)
			ok = 0;
		else if (WIFSIGNALED(status)) {
			printf("# %s: killed by signal %d\n",
			       kwt_cases[i].name, WTERMSIG(status));
			ok = 0;
		} else
			ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
		/* what each test costs (make check's time budget) */
		clock_gettime(CLOCK_MONOTONIC, &t1);
		printf("# %s: %.1f s\n", kwt_cases[i].name,
		       (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
		printf("%s %d - %s: %s\n", ok ? "ok" : "not ok", i + 1,
		       argv[0], kwt_cases[i].name);
		if (ok)
			passed++;
		else
			failed++;
	}
	printf("# %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}

#endif /* KW_HARNESS_H */
