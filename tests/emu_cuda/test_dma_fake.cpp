/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * test_dma_client.cpp's cases, and those only the stand-in process
 * (fake_edma.c) can play: a process that stops answering, one that exits
 * between requests. The real process (test_dma_e2e) runs the others.
 */
#include "test_dma_client.cpp"

/* A process that stops answering: the wait ends at the set-up timeout with
 * that reason, and every later request fails at once with it (a late
 * answer could no longer be told from the next request's). */
TEST_CASE(silent)
{
	struct edma *d = fresh("0000:05:00.0", NULL, NULL, "2", NULL);
	REQUIRE(d);
	char why[200];
	REQUIRE_OK(edma_map(d, alloc_at(0), 4096, why, sizeof(why)));
	REQUIRE_OK(edma_map(d, alloc_at(1), 4096, why, sizeof(why))); /* request 2: never answered */
	CHECK_EQ(edma_mapped(d, alloc_at(0), 4096, why, sizeof(why)), 1);
	const uint64_t t0 = check_now_ms();
	CHECK_EQ(edma_mapped(d, alloc_at(1), 4096, why, sizeof(why)), 0);
	const uint64_t waited = check_now_ms() - t0;
	CHECK(strstr(why, "did not answer"), "why: '%s'", why);
	CHECK(waited >= EDMA_CTL_MS - 50 && waited < EDMA_CTL_MS + 2000, "waited %llu ms for a silent process",
	      (unsigned long long)waited);
	const uint64_t t1 = check_now_ms();
	unsigned first = 0;
	CHECK_EQ(edma_open(d, 1, &first, why, sizeof(why)), (uint64_t)-ETIMEDOUT);
	CHECK(strstr(why, "did not answer"), "why: '%s'", why);
	CHECK_EQ(edma_map(d, alloc_at(2), 4096, why, sizeof(why)), (uint64_t)-ETIMEDOUT);
	CHECK(check_now_ms() - t1 < 50, "later requests waited again");
	return 0;
}

/* A process that exits: the maps on their way fail with that reason, and
 * so does everything after. */
TEST_CASE(gone)
{
	struct edma *d = fresh("0000:06:00.0", NULL, NULL, NULL, "2");
	REQUIRE(d);
	char why[200];
	REQUIRE_OK(edma_map(d, alloc_at(0), 4096, why, sizeof(why)));
	int rc = edma_map(d, alloc_at(1), 4096, why, sizeof(why)); /* request 2: it exits */
	CHECK(rc == 0 || rc == -EPIPE, "map to an exiting process: %d", rc);
	CHECK_EQ(edma_mapped(d, alloc_at(0), 4096, why, sizeof(why)), 1);
	CHECK_EQ(edma_mapped(d, alloc_at(1), 4096, why, sizeof(why)), 0);
	CHECK(strstr(why, "is gone") || rc == -EPIPE, "why: '%s'", why);
	unsigned first = 0;
	CHECK(edma_open(d, 1, &first, why, sizeof(why)) < 0);
	CHECK(strstr(why, "is gone"), "why: '%s'", why);
	return 0;
}

