/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The layer loader on an md RAID0 of several emulated controllers (CPU
 * tier): a file scattered over the array with holes and unwritten extents,
 * random byte ranges loaded (each member on its own controller and queues,
 * the members on threads of their own) and compared with the bytes taken
 * from the members' memory; every member must have read; a member whose
 * controller fails a read fails the load with the NVMe status.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpunvme/loader.h"
#include "md_layout.h"

static int one(const char *const *uris, uint32_t n, uint32_t chunk_kib, uint64_t fsize, uint64_t seed)
{
	struct md_layout A;
	if (mdl_setup(&A, uris, n, chunk_kib, fsize, seed))
		return 1;
	struct gpunvme_loader_opts o;
	gpunvme_loader_opts_init(&o);
	o.queues = 2;
	o.depth = 32;
	o.timeout_ms = 10000;
	struct gpunvme_layer_loader *l = NULL;
	int rc = gpunvme_layer_loader_init_md(A.c, A.nsid, A.md, A.L.ext, A.L.n, A.L.size, &o, &l);
	if (rc) {
		fprintf(stderr, "init_md: %d %s\n", rc, gpunvme_last_error());
		return 1;
	}
	uint8_t *buf = malloc(A.L.size + 16);
	int fails = 0;
	uint64_t s = seed;
	for (int r = 0; r < 40 && !fails; r++) {
		uint64_t off = rng(&s) % A.L.size, len = rng(&s) % (A.L.size - off + 1);
		uint8_t *dst = r % 2 ? buf + r % 8 : gpunvme_layer_loader_alloc(l, off, len);
		if (!dst) {
			fprintf(stderr, "alloc: %s\n", gpunvme_last_error());
			return 1;
		}
		memset(dst, 0xa5, len);
		uint16_t st = 0;
		if ((rc = gpunvme_load_layer(l, off, len, dst, &st))) {
			fprintf(stderr, "load %llu+%llu: %d %s\n", (unsigned long long)off, (unsigned long long)len, rc,
				gpunvme_last_error());
			return 1;
		}
		if (memcmp(dst, A.L.ref + off, len)) {
			fprintf(stderr, "FAIL: load %llu+%llu differs\n", (unsigned long long)off, (unsigned long long)len);
			fails++;
		}
		if (r % 2 == 0)
			gpunvme_layer_loader_free(l, dst);
	}
	/* many ranges in one call (gpunvme_load_layers): each member reads
	 * its chunks of all of them; every byte, and 16 guard bytes either
	 * side of each range untouched; a bad range among them names itself */
	{
		enum { NS = 40, G = 16 };
		struct gpunvme_load_span sp[NS];
		uint8_t *mem[NS];
		for (int i = 0; i < NS; i++) {
			uint64_t off = rng(&s) % A.L.size, len = rng(&s) % (A.L.size - off + 1) / (i % 4 ? 8 : 1);
			mem[i] = i % 2 ? malloc(len + 2 * G + 8) : gpunvme_layer_loader_alloc(l, off, len + 2 * G);
			if (!mem[i]) {
				fprintf(stderr, "alloc: %s\n", gpunvme_last_error());
				return 1;
			}
			uint8_t *base = mem[i] + (i % 2 ? i % 8 : 0);
			memset(base, 0x5a, len + 2 * G);
			sp[i] = (struct gpunvme_load_span){ off, len, base + G };
		}
		if ((rc = gpunvme_load_layers(l, sp, NS, NULL))) {
			fprintf(stderr, "FAIL: %d ranges at once: %d %s\n", NS, rc, gpunvme_last_error());
			fails++;
		}
		for (int i = 0; i < NS && !rc; i++) {
			const uint8_t *d = (const uint8_t *)sp[i].dst;
			bool guards = true;
			for (int g = 0; g < G; g++)
				guards &= d[-1 - g] == 0x5a && d[sp[i].len + g] == 0x5a;
			if (memcmp(d, A.L.ref + sp[i].off, sp[i].len) || !guards) {
				fprintf(stderr, "FAIL: range %d (%llu+%llu) of %d at once: %s\n", i,
					(unsigned long long)sp[i].off, (unsigned long long)sp[i].len, NS,
					guards ? "bytes differ" : "guard bytes overwritten");
				fails++;
			}
		}
		sp[7].off = A.L.size;
		sp[7].len = 1;
		if (gpunvme_load_layers(l, sp, NS, NULL) != -ERANGE || !strstr(gpunvme_last_error(), "range 7 of 40")) {
			fprintf(stderr, "FAIL: a range past the end among %d: %s\n", NS, gpunvme_last_error());
			fails++;
		}
		for (int i = 0; i < NS; i++) {
			if (i % 2)
				free(mem[i]);
			else
				gpunvme_layer_loader_free(l, mem[i]);
		}
	}
	/* the whole file, every member reading its share */
	memset(buf, 0, A.L.size);
	if (gpunvme_load_layer(l, 0, A.L.size, buf, NULL) || memcmp(buf, A.L.ref, A.L.size)) {
		fprintf(stderr, "FAIL: whole file: %s\n", gpunvme_last_error());
		fails++;
	}
	for (uint32_t k = 0; k < n; k++) {
		struct gpunvme_loader_stats ms;
		if (gpunvme_layer_loader_member_stats(l, k, &ms) || ms.commands == 0) {
			fprintf(stderr, "FAIL: member %u read nothing\n", k);
			fails++;
		}
	}
	struct gpunvme_loader_stats ms;
	if (gpunvme_layer_loader_member_stats(l, n, &ms) != -ERANGE) {
		fprintf(stderr, "FAIL: member %u stats should be -ERANGE\n", n);
		fails++;
	}
	if (gpunvme_load_layer(l, A.L.size, 1, buf, NULL) != -ERANGE) {
		fprintf(stderr, "FAIL: load past the end should be -ERANGE\n");
		fails++;
	}
	/* another file on the array: the loader retargeted reads it through
	 * every member, then the first one again */
	struct layout B;
	make_layout(&B, A.array, A.size, fsize / 3 + 777, seed + 100);
	if (gpunvme_layer_loader_retarget(l, B.ext, B.n, B.size)) {
		fprintf(stderr, "FAIL: retarget: %s\n", gpunvme_last_error());
		return 1;
	}
	memset(buf, 0, B.size);
	if (gpunvme_load_layer(l, 0, B.size, buf, NULL) || memcmp(buf, B.ref, B.size)) {
		fprintf(stderr, "FAIL: the retargeted file: %s\n", gpunvme_last_error());
		fails++;
	}
	if (gpunvme_load_layer(l, B.size, 1, buf, NULL) != -ERANGE) {
		fprintf(stderr, "FAIL: past the retargeted file's end should be -ERANGE\n");
		fails++;
	}
	if (gpunvme_layer_loader_retarget(l, A.L.ext, A.L.n, A.L.size)) {
		fprintf(stderr, "FAIL: retarget back: %s\n", gpunvme_last_error());
		return 1;
	}
	memset(buf, 0, A.L.size);
	if (gpunvme_load_layer(l, 0, A.L.size, buf, NULL) || memcmp(buf, A.L.ref, A.L.size)) {
		fprintf(stderr, "FAIL: the first file again: %s\n", gpunvme_last_error());
		fails++;
	}
	free(B.ref);
	gpunvme_layer_loader_destroy(l);
	free(buf);
	mdl_teardown(&A);
	printf("%u members, %u KiB chunks, %llu-byte file: %s\n", n, chunk_kib, (unsigned long long)fsize,
	       fails ? "FAIL" : "ok");
	return fails != 0;
}

int main(void)
{
	static const char *const two[] = { "emu:ram:8M?lbads=9&workers=1", "emu:ram:8M?lbads=9&workers=1" };
	/* members of different sizes: two strip zones */
	static const char *const three[] = { "emu:ram:8M?lbads=9&workers=1", "emu:ram:12M?lbads=12&workers=1",
					     "emu:ram:8M?lbads=9&workers=1" };
	static const char *const four[] = { "emu:ram:6M?workers=1", "emu:ram:6M?workers=1", "emu:ram:6M?workers=1",
					    "emu:ram:6M?workers=1" };
	int rc = 0;
	rc |= one(two, 2, 64, 5 * 1024 * 1024 + 321, 11);
	rc |= one(three, 3, 16, 9 * 1024 * 1024 + 4097, 12);
	rc |= one(four, 4, 512, 12 * 1024 * 1024 + 1, 13);
	return rc;
}
