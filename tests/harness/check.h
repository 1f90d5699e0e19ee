/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The tests' one family of checks, for C and for CUDA C++ host code.
 *
 * Every check comes in two flavours:
 *   CHECK...    prints and counts a failure and goes on, so one run lists
 *               every broken expectation of a table or a sweep;
 *   REQUIRE...  prints and counts a failure and returns 1 from the calling
 *               function (a case, or a helper returning 0 or 1), for a
 *               step that what follows depends on: going on would only
 *               fail again for the same reason, or crash.
 * A failure prints file:line, the expression, the values and, where it is
 * not empty, gpunvme_last_error():
 *
 *   CHECK(cond)  CHECK(cond, fmt, ...)   the message is optional
 *   CHECK_EQ(a, b)        integers, compared as uint64_t (so -1 == ~0ull)
 *   CHECK_STR(a, b)       C strings; a NULL a fails
 *   CHECK_OK(expr)        expr == 0; else rc and strerror(-rc) (or the NVMe status)
 *   CHECK_ST(cqe, st)     a completion's NVMe status: SCT, SC and DNR (CRD, M ignored)
 *   CHECK_SC(cqe, st)     SCT and SC only, where the contract leaves DNR open
 *   CHECK_LAST_ERROR(s)   gpunvme_last_error() contains s
 *   CHECK_CUDA(expr)      a cudaError_t is cudaSuccess (CUDA sources only)
 *   REQUIRE, REQUIRE_EQ, REQUIRE_STR, REQUIRE_OK, REQUIRE_ST, REQUIRE_SC,
 *   REQUIRE_CUDA          the same, returning 1 on failure
 *   FAIL(fmt, ...)        a failure without a condition; returns 1
 *
 * Cases: `TEST_CASE(name) { ...; return 0; }` at the start of a line
 * registers a case, and main() is `return check_main(argc, argv);`: it runs
 * the case argv[1] names, or all of them; --list prints their names, an
 * unknown name fails with the list of valid ones. tests/CMakeLists.txt
 * (gpunvme_test_cases) reads the TEST_CASE lines at configure time and
 * makes one ctest test per case, so writing a case registers it. A case
 * returns 0 (pass), TEST_SKIP or anything else (fail); one that returns 0
 * after a failed CHECK fails too. A program without cases ends with
 * `return check_finish("name");`.
 */
#ifndef GPUNVME_TEST_CHECK_H
#define GPUNVME_TEST_CHECK_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpunvme/gpunvme.h" /* gpunvme_last_error */
#include "gpunvme/spec/nvme.h"    /* struct gpunvme_cqe, gpunvme_status_str */

#ifdef __cplusplus
extern "C" {
#endif

#define TEST_SKIP 77           /* exit code and case result: cannot run here */
#define CHECK_PRINT_MAX 50     /* failures printed; later ones are only counted */
#define CHECK_MAX_CASES 256
#define CHECK_ST_MASK 0x47ffu  /* status bits CHECK_ST compares: DNR, SCT, SC */

/* Process-wide state. Weak definitions so that every translation unit
 * including this header shares one copy without a library to link: checks
 * made in a helper file count towards the case that called it. */
struct check_state {
	unsigned checks, failures, printed;
	int verbose; /* also print "PASS message" for passing checks with a message */
};
struct check_case {
	const char *name;
	int (*fn)(void);
};
__attribute__((weak)) struct check_state check_g;
__attribute__((weak)) struct check_case check_cases[CHECK_MAX_CASES];
__attribute__((weak)) unsigned check_ncases;
/* Run after every case: the register-level harness closes the controllers a
 * failed REQUIRE left open (harness.c sets it). */
__attribute__((weak)) void (*check_after_case)(void);

static inline unsigned check_failures(void)
{
	return check_g.failures;
}

static inline unsigned check_count(void)
{
	return check_g.checks;
}

/* Print the head of a failure and say whether its text should follow. */
static inline int check_fail_head(const char *file, int line, const char *expr)
{
	check_g.failures++;
	if (check_g.printed >= CHECK_PRINT_MAX) {
		if (check_g.printed++ == CHECK_PRINT_MAX)
			fprintf(stderr, "(more failures: counted, not printed)\n");
		return 0;
	}
	check_g.printed++;
	fprintf(stderr, "%s:%d: FAIL: %s", file, line, expr);
	return 1;
}

/* The end of a failure: the library's last error where there is one, as
 * the failure of a library call often says why only there. */
static inline void check_fail_tail(void)
{
	const char *le = gpunvme_last_error();
	if (le && le[0])
		fprintf(stderr, " [last error: %s]", le);
	fputc('\n', stderr);
}

static inline void check_fail(const char *file, int line, const char *expr)
{
	if (check_fail_head(file, line, expr))
		check_fail_tail();
}

__attribute__((format(printf, 4, 5))) static inline void check_failf(const char *file, int line, const char *expr,
								      const char *fmt, ...)
{
	if (!check_fail_head(file, line, expr))
		return;
	va_list ap;
	fputs(expr[0] ? ": " : "", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	check_fail_tail();
}

__attribute__((format(printf, 1, 2))) static inline void check_passf(const char *fmt, ...)
{
	va_list ap;
	fputs("PASS ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
}

/* Signed where the top bit is set: an errno compared as uint64_t reads
 * better as -22 than as 18446744073709551594. */
static inline void check_fail_eq(const char *file, int line, const char *ea, const char *eb, uint64_t a, uint64_t b)
{
	char expr[512];
	snprintf(expr, sizeof(expr), "%s == %s", ea, eb);
	if (a >> 63 || b >> 63)
		check_failf(file, line, expr, "got 0x%llx (%lld), expected 0x%llx (%lld)", (unsigned long long)a,
			    (long long)a, (unsigned long long)b, (long long)b);
	else
		check_failf(file, line, expr, "got 0x%llx (%llu), expected 0x%llx (%llu)", (unsigned long long)a,
			    (unsigned long long)a, (unsigned long long)b, (unsigned long long)b);
}

static inline void check_fail_rc(const char *file, int line, const char *expr, int rc)
{
	const char *why = rc == -ETIMEDOUT ? "timed out" : rc < 0 ? strerror(-rc) : "not an errno";
	if (rc > 0 && rc <= 0x7fff)
		check_failf(file, line, expr, "returned %d (NVMe status: %s)", rc, gpunvme_status_str((uint16_t)rc));
	else
		check_failf(file, line, expr, "returned %d (%s)", rc, why);
}

static inline void check_fail_st(const char *file, int line, const char *expr, uint16_t got, uint16_t want)
{
	char g[96], w[96]; /* gpunvme_status_str's buffer is reused by the next call */
	snprintf(g, sizeof(g), "%s", gpunvme_status_str(got));
	snprintf(w, sizeof(w), "%s", gpunvme_status_str(want));
	check_failf(file, line, expr, "status 0x%04x [%s], expected 0x%04x [%s]", got, g, want, w);
}

/* ---- the macros: each check is one statement; `onfail` is what a failure
 * does after printing: nothing (CHECK) or return 1 (REQUIRE) ------------- */
#define CHECK_CONTINUE_ (void)0
#define CHECK_RETURN_ return 1

/* CHECK(cond) or CHECK(cond, fmt, ...): choose by argument count, which
 * needs no GNU extension and works in C11 and C++ alike (up to 30 message
 * arguments). */
#define CHECK_CAT_(a, b) a##b
#define CHECK_CAT(a, b) CHECK_CAT_(a, b)
#define CHECK_NTH_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17, _18, _19, _20, \
		   _21, _22, _23, _24, _25, _26, _27, _28, _29, _30, _31, _32, N, ...)                         \
	N
#define CHECK_ARITY_(...)                                                                                    \
	CHECK_NTH_(__VA_ARGS__, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, \
		   M, M, M, M, 1, _)
#define CHECK_COND_(onfail, ...) CHECK_CAT(CHECK_COND_, CHECK_ARITY_(__VA_ARGS__))(onfail, __VA_ARGS__)
#define CHECK_COND_1(onfail, cond)                                     \
	do {                                                           \
		check_g.checks++;                                      \
		if (!(cond)) {                                         \
			check_fail(__FILE__, __LINE__, #cond);         \
			onfail;                                        \
		}                                                      \
	} while (0)
#define CHECK_COND_M(onfail, cond, ...)                                \
	do {                                                           \
		check_g.checks++;                                      \
		if (!(cond)) {                                         \
			check_failf(__FILE__, __LINE__, #cond, __VA_ARGS__); \
			onfail;                                        \
		} else if (check_g.verbose) {                          \
			check_passf(__VA_ARGS__);                      \
		}                                                      \
	} while (0)

#define CHECK_EQ_(onfail, a, b)                                                        \
	do {                                                                           \
		uint64_t check_a_ = (uint64_t)(a), check_b_ = (uint64_t)(b);           \
		check_g.checks++;                                                      \
		if (check_a_ != check_b_) {                                            \
			check_fail_eq(__FILE__, __LINE__, #a, #b, check_a_, check_b_); \
			onfail;                                                        \
		}                                                                      \
	} while (0)

#define CHECK_STR_(onfail, a, b)                                                                          \
	do {                                                                                              \
		const char *check_a_ = (a), *check_b_ = (b);                                              \
		check_g.checks++;                                                                         \
		if (!check_a_ || strcmp(check_a_, check_b_) != 0) {                                       \
			check_failf(__FILE__, __LINE__, #a " == " #b, "\"%s\", expected \"%s\"",          \
				    check_a_ ? check_a_ : "(null)", check_b_);                            \
			onfail;                                                                           \
		}                                                                                         \
	} while (0)

#define CHECK_OK_(onfail, expr)                                         \
	do {                                                            \
		int check_rc_ = (expr);                                 \
		check_g.checks++;                                       \
		if (check_rc_ != 0) {                                   \
			check_fail_rc(__FILE__, __LINE__, #expr, check_rc_); \
			onfail;                                         \
		}                                                       \
	} while (0)

#define CHECK_ST_(onfail, cqe, exp, mask)                                                          \
	do {                                                                                       \
		uint16_t check_g_ = (uint16_t)(gpunvme_cqe_status((cqe).status) & (mask));        \
		uint16_t check_e_ = (uint16_t)(exp);                                               \
		check_g.checks++;                                                                  \
		if (check_g_ != (check_e_ & (mask))) {                                             \
			check_fail_st(__FILE__, __LINE__, #cqe, check_g_, check_e_);               \
			onfail;                                                                    \
		}                                                                                  \
	} while (0)

#define CHECK_LAST_ERROR_(onfail, sub)                                                                  \
	do {                                                                                            \
		const char *check_m_ = gpunvme_last_error();                                            \
		check_g.checks++;                                                                       \
		if (!check_m_ || !strstr(check_m_, (sub))) {                                            \
			check_failf(__FILE__, __LINE__, "gpunvme_last_error()", "\"%s\" lacks \"%s\"",  \
				    check_m_ ? check_m_ : "(null)", (sub));                             \
			onfail;                                                                         \
		}                                                                                       \
	} while (0)

#define CHECK(...) CHECK_COND_(CHECK_CONTINUE_, __VA_ARGS__)
#define CHECK_EQ(a, b) CHECK_EQ_(CHECK_CONTINUE_, a, b)
#define CHECK_STR(a, b) CHECK_STR_(CHECK_CONTINUE_, a, b)
#define CHECK_OK(expr) CHECK_OK_(CHECK_CONTINUE_, expr)
#define CHECK_ST(cqe, exp) CHECK_ST_(CHECK_CONTINUE_, cqe, exp, CHECK_ST_MASK)
#define CHECK_SC(cqe, exp) CHECK_ST_(CHECK_CONTINUE_, cqe, exp, 0x7ffu)
#define CHECK_LAST_ERROR(sub) CHECK_LAST_ERROR_(CHECK_CONTINUE_, sub)

#define REQUIRE(...) CHECK_COND_(CHECK_RETURN_, __VA_ARGS__)
#define REQUIRE_EQ(a, b) CHECK_EQ_(CHECK_RETURN_, a, b)
#define REQUIRE_STR(a, b) CHECK_STR_(CHECK_RETURN_, a, b)
#define REQUIRE_OK(expr) CHECK_OK_(CHECK_RETURN_, expr)
#define REQUIRE_ST(cqe, exp) CHECK_ST_(CHECK_RETURN_, cqe, exp, CHECK_ST_MASK)
#define REQUIRE_SC(cqe, exp) CHECK_ST_(CHECK_RETURN_, cqe, exp, 0x7ffu)

#define FAIL(...)                                                  \
	do {                                                       \
		check_failf(__FILE__, __LINE__, "", __VA_ARGS__);  \
		return 1;                                          \
	} while (0)

#if defined(__CUDACC__)
#define CHECK_CUDA_(onfail, expr)                                                                   \
	do {                                                                                        \
		cudaError_t check_e_ = (expr);                                                      \
		check_g.checks++;                                                                   \
		if (check_e_ != cudaSuccess) {                                                      \
			check_failf(__FILE__, __LINE__, #expr, "%s", cudaGetErrorString(check_e_)); \
			onfail;                                                                     \
		}                                                                                   \
	} while (0)
#define CHECK_CUDA(expr) CHECK_CUDA_(CHECK_CONTINUE_, expr)
#define REQUIRE_CUDA(expr) CHECK_CUDA_(CHECK_RETURN_, expr)
#endif

/* ---- cases --------------------------------------------------------------- */

static inline void check_register(const char *name, int (*fn)(void))
{
	if (check_ncases == CHECK_MAX_CASES) {
		fprintf(stderr, "check.h: more than %d cases\n", CHECK_MAX_CASES);
		exit(2);
	}
	check_cases[check_ncases].name = name;
	check_cases[check_ncases].fn = fn;
	check_ncases++;
}

#define TEST_CASE(name)                                                                                    \
	static int name(void);                                                                             \
	__attribute__((constructor)) static void check_reg_##name(void) { check_register(#name, name); } \
	static int name(void)

static inline uint64_t check_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static inline int check_run(unsigned i)
{
	printf("=== %s\n", check_cases[i].name);
	fflush(stdout);
	uint64_t t0 = check_now_ms();
	unsigned f0 = check_g.failures;
	int rc = check_cases[i].fn();
	if (check_after_case)
		check_after_case();
	if (rc == 0 && check_g.failures != f0)
		rc = 1; /* a CHECK failed and the case went on */
	const char *what = rc == 0 ? "PASS" : rc == TEST_SKIP ? "SKIP" : "FAIL";
	printf("--- %s %s (%llu ms)\n", what, check_cases[i].name, (unsigned long long)(check_now_ms() - t0));
	fflush(stdout);
	return rc == 0 ? 0 : rc == TEST_SKIP ? TEST_SKIP : 1;
}

/* check_main with a reason to skip every case (a GPU test on a machine
 * without a GPU): the case name is still checked first, so a misspelt name
 * fails everywhere, not only where the cases can run. */
static inline int check_main_skip(int argc, char **argv, const char *skip)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 1 && strcmp(argv[1], "--list") == 0) {
		for (unsigned i = 0; i < check_ncases; i++)
			printf("%s\n", check_cases[i].name);
		return 0;
	}
	unsigned one = check_ncases;
	if (argc > 1) {
		for (unsigned i = 0; i < check_ncases; i++)
			if (strcmp(check_cases[i].name, argv[1]) == 0)
				one = i;
		if (one == check_ncases) {
			fprintf(stderr, "%s: unknown case '%s'; the cases are:", argv[0], argv[1]);
			for (unsigned i = 0; i < check_ncases; i++)
				fprintf(stderr, " %s", check_cases[i].name);
			fputc('\n', stderr);
			return 2;
		}
	}
	if (skip) {
		printf("SKIP: %s\n", skip);
		return TEST_SKIP;
	}
	if (one < check_ncases)
		return check_run(one);
	unsigned failed = 0, skipped = 0;
	for (unsigned i = 0; i < check_ncases; i++) {
		int rc = check_run(i);
		if (rc == TEST_SKIP)
			skipped++;
		else if (rc != 0)
			failed++;
	}
	printf("%u cases, %u failed, %u skipped\n", check_ncases, failed, skipped);
	return failed ? 1 : 0;
}

static inline int check_main(int argc, char **argv)
{
	return check_main_skip(argc, argv, NULL);
}

/* The summary line of a program without cases, and its exit code. */
static inline int check_finish(const char *name)
{
	printf("%s: %u checks, %u failed\n", name, check_g.checks, check_g.failures);
	return check_g.failures ? 1 : 0;
}

#ifdef __cplusplus
}
#endif

#endif
