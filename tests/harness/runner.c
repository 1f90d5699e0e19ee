/* SPDX-License-Identifier: BSD-2-Clause */
/* Case registry and main loop shared by the test programs. Exit codes follow
 * ctest's conventions here: 0 pass, 1 fail, 77 skip. */
#include "harness.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define H_MAX_CASES 256

static struct {
	const char *name;
	h_case_fn fn;
} h_cases[H_MAX_CASES];
static unsigned h_ncases;

void h_register(const char *name, h_case_fn fn)
{
	if (h_ncases == H_MAX_CASES) {
		fprintf(stderr, "harness: too many cases\n");
		abort();
	}
	h_cases[h_ncases].name = name;
	h_cases[h_ncases].fn = fn;
	h_ncases++;
}

void h_report(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s:%d: FAIL: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

const char *h_status_text(uint16_t st, char *buf, size_t len)
{
	snprintf(buf, len, "%s", gpunvme_status_str(st));
	return buf;
}

const char *h_rc_text(int rc)
{
	if (rc > 0)
		return "NVMe status";
	if (rc == -ETIMEDOUT)
		return "timed out";
	return strerror(-rc);
}

static int h_run(unsigned i)
{
	printf("=== %s\n", h_cases[i].name);
	fflush(stdout);
	uint64_t t0 = h_now_ms();
	int rc = h_cases[i].fn();
	h_close_all(); /* a failing check returns early, leaving controllers open */
	const char *what = rc == 0 ? "PASS" : rc == H_SKIP ? "SKIP" : "FAIL";
	printf("--- %s %s (%llu ms)\n", what, h_cases[i].name, (unsigned long long)(h_now_ms() - t0));
	fflush(stdout);
	return rc == 0 ? 0 : rc == H_SKIP ? H_SKIP : 1;
}

int h_main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 1 && strcmp(argv[1], "--list") == 0) {
		for (unsigned i = 0; i < h_ncases; i++)
			printf("%s\n", h_cases[i].name);
		return 0;
	}
	if (argc > 1) {
		for (unsigned i = 0; i < h_ncases; i++)
			if (strcmp(h_cases[i].name, argv[1]) == 0)
				return h_run(i);
		fprintf(stderr, "unknown case '%s'\n", argv[1]);
		return 1;
	}
	unsigned failed = 0, skipped = 0;
	for (unsigned i = 0; i < h_ncases; i++) {
		int rc = h_run(i);
		if (rc == H_SKIP)
			skipped++;
		else if (rc != 0)
			failed++;
	}
	printf("%u cases, %u failed, %u skipped\n", h_ncases, failed, skipped);
	return failed ? 1 : 0;
}
