/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Minimal check macros shared by the unit tests: a failed check prints the
 * location and keeps going, so one run lists every broken expectation; the
 * test exits 1 if any failed (ctest convention in tests/CMakeLists.txt).
 */
#ifndef GPUNVME_TEST_UNIT_H
#define GPUNVME_TEST_UNIT_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int unit_failures;
static int unit_checks;

#define CHECK(cond)                                                          \
	do {                                                                 \
		unit_checks++;                                               \
		if (!(cond)) {                                               \
			unit_failures++;                                     \
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, \
				__LINE__, #cond);                            \
		}                                                            \
	} while (0)

#define CHECK_EQ(a, b)                                                       \
	do {                                                                 \
		uint64_t va_ = (uint64_t)(a), vb_ = (uint64_t)(b);           \
		unit_checks++;                                               \
		if (va_ != vb_) {                                            \
			unit_failures++;                                     \
			fprintf(stderr,                                      \
				"%s:%d: %s == %s failed: 0x%" PRIx64         \
				" != 0x%" PRIx64 "\n",                       \
				__FILE__, __LINE__, #a, #b, va_, vb_);       \
		}                                                            \
	} while (0)

#define CHECK_STR(a, b)                                                      \
	do {                                                                 \
		const char *sa_ = (a), *sb_ = (b);                           \
		unit_checks++;                                               \
		if (!sa_ || strcmp(sa_, sb_) != 0) {                         \
			unit_failures++;                                     \
			fprintf(stderr, "%s:%d: %s: \"%s\" != \"%s\"\n",     \
				__FILE__, __LINE__, #a, sa_ ? sa_ : "(null)", \
				sb_);                                        \
		}                                                            \
	} while (0)

static inline int unit_finish(const char *name)
{
	printf("%s: %d checks, %d failed\n", name, unit_checks, unit_failures);
	return unit_failures ? 1 : 0;
}

#endif
