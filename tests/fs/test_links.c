/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Symbolic links followed inside the file system (gpunvme_fs_lookup,
 * gpunvme_fs_lookup_nofollow, gpunvme_fs_readlink) on images the real tools
 * make from a host tree: mkfs.ext4 -d (fast and slow links) and mkfs.xfs -p
 * from a protofile (local and extent-format links, v5 and v4). The tree is a
 * Hugging Face cache layout plus relative, absolute, ".."-climbing, looping,
 * chained and dangling links; every result is checked against what the
 * host's own kernel resolves in the source tree (realpath/stat), so the
 * expectations are path_resolution(7), not this decoder's idea of it.
 *
 * Skipped (77) without mkfs.ext4 / mkfs.xfs.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness/check.h"
#include "gpunvme/extents.h"
#include "gpunvme/gpunvme.h"

static char g_dir[256], g_src[300];

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

static void put(const char *rel, const char *text)
{
	char p[1024];
	snprintf(p, sizeof(p), "%s/%s", g_src, rel);
	FILE *f = fopen(p, "w");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static void lnk(const char *rel, const char *target)
{
	char p[1024];
	snprintf(p, sizeof(p), "%s/%s", g_src, rel);
	if (symlink(target, p))
		perror(p);
}

static char g_long[800];   /* a target too long for the inode: ext4 slow, XFS extent format */

static int build_tree(void)
{
	snprintf(g_dir, sizeof(g_dir), "/tmp/gpunvme-links-%d", (int)getpid());
	snprintf(g_src, sizeof(g_src), "%s/src", g_dir);
	if (sh("rm -rf '%s' && mkdir -p '%s'/hub/models--x/snapshots/abc '%s'/hub/models--x/blobs "
	       "'%s'/hub/models--x/refs '%s'/d1/d2 '%s'/chain",
	       g_dir, g_src, g_src, g_src, g_src, g_src))
		return 1;
	put("hub/models--x/blobs/5f1e0c", "the model's bytes\n");
	put("hub/models--x/blobs/9a7b31", "{\"config\": 1}\n");
	put("hub/models--x/refs/main", "abc");
	put("file.txt", "plain\n");
	/* the Hugging Face cache: snapshot entries are relative links to blobs */
	lnk("hub/models--x/snapshots/abc/model.safetensors", "../../blobs/5f1e0c");
	lnk("hub/models--x/snapshots/abc/config.json", "../../blobs/9a7b31");
	lnk("hub/current", "models--x/snapshots/abc");                  /* to a directory */
	lnk("abs", "/hub/models--x/blobs/5f1e0c");                        /* absolute: this fs's root */
	lnk("absdir", "/hub/models--x");
	lnk("d1/d2/up", "../..");                                         /* ".." in a target */
	lnk("d1/snap", "../hub/models--x/snapshots");                     /* then ".." after it */
	lnk("above", "../../../../file.txt");                             /* ".." above the root */
	lnk("dotty", "./d1/./d2/../../file.txt");
	lnk("tiny", "file.txt");                                          /* ext4 fast */
	/* a 700+ byte relative target: "./" repeated, then the blob */
	size_t k = 0;
	while (k < 700)
		k += (size_t)snprintf(g_long + k, sizeof(g_long) - k, "./");
	snprintf(g_long + k, sizeof(g_long) - k, "hub/models--x/blobs/5f1e0c");
	lnk("long", g_long);
	lnk("loop_a", "loop_b");
	lnk("loop_b", "loop_a");
	lnk("self", "self");
	lnk("dangling", "no/such/file");
	lnk("dangdir", "d1/nothing");
	/* chain/c0 -> c1 -> ... -> c40 -> ../file.txt: 41 links from c0 (one
	 * too many), 40 from c1 (the most allowed) */
	for (int i = 0; i <= 40; i++) {
		char n[64], t[64];
		snprintf(n, sizeof(n), "chain/c%d", i);
		if (i < 40)
			snprintf(t, sizeof(t), "c%d", i + 1);
		else
			snprintf(t, sizeof(t), "../file.txt");
		lnk(n, t);
	}
	return 0;
}

static void proto_dir(FILE *pf, const char *host, int depth)
{
	char cmd[1024];
	if ((size_t)snprintf(cmd, sizeof(cmd), "ls -A '%s'", host) >= sizeof(cmd))
		return; /* a path this long is not one the test builds */
	FILE *ls = popen(cmd, "r");
	char name[512];
	while (ls && fgets(name, sizeof(name), ls)) {
		name[strcspn(name, "\n")] = 0;
		char p[1024];
		struct stat st;
		if ((size_t)snprintf(p, sizeof(p), "%s/%s", host, name) >= sizeof(p) || lstat(p, &st))
			continue;
		fprintf(pf, "%*s", depth, "");
		if (S_ISDIR(st.st_mode)) {
			fprintf(pf, "%s d--755 0 0\n", name);
			proto_dir(pf, p, depth + 1);
			fprintf(pf, "%*s$\n", depth, "");
		} else if (S_ISLNK(st.st_mode)) {
			char t[1024] = { 0 };
			if (readlink(p, t, sizeof(t) - 1) < 0)
				t[0] = 0;
			fprintf(pf, "%s l--777 0 0 %s\n", name, t);
		} else {
			fprintf(pf, "%s ---644 0 0 %s\n", name, p);
		}
	}
	if (ls)
		pclose(ls);
}

static int make_image(const char *kind, char *img, size_t len)
{
	snprintf(img, len, "%s/%s.img", g_dir, kind);
	if (!strncmp(kind, "ext4", 4)) {
		const char *opt = !strcmp(kind, "ext4-1k") ? "-b 1024" : "";
		return sh("truncate -s 32M '%s' && mkfs.ext4 -q -F %s -d '%s' '%s' >/dev/null 2>&1", img, opt, g_src, img);
	}
	char proto[512];
	snprintf(proto, sizeof(proto), "%s/%s.proto", g_dir, kind);
	FILE *pf = fopen(proto, "w");
	if (!pf)
		return 1;
	fprintf(pf, "/dev/null\n0 0\nd--755 0 0\n");
	proto_dir(pf, g_src, 1);
	fprintf(pf, "$\n");
	fclose(pf);
	const char *opt = !strcmp(kind, "xfs-v4") ? "-m crc=0,reflink=0,finobt=0 -b size=1024" : "";
	return sh("truncate -s 300M '%s' && TEST_DIR=1 TEST_DEV=1 QA_CHECK_FS=1 mkfs.xfs -f -q %s -p '%s' '%s' "
		  ">/dev/null 2>&1",
		  img, opt, proto, img);
}

/* What the host kernel resolves for a path in the source tree: the file's
 * bytes (or "" with errno) through the same links. */
static int host_read(const char *rel, char *buf, size_t len)
{
	char p[1024];
	snprintf(p, sizeof(p), "%s/%s", g_src, rel);
	FILE *f = fopen(p, "r");
	if (!f)
		return -errno;
	size_t n = fread(buf, 1, len - 1, f);
	buf[n] = 0;
	fclose(f);
	return 0;
}

static int fs_read_all(struct gpunvme_fs *fs, uint64_t ino, char *buf, size_t len)
{
	int64_t r = gpunvme_fs_pread(fs, ino, buf, len - 1, 0);
	if (r < 0)
		return (int)r;
	buf[r] = 0;
	return 0;
}

static struct gpunvme_blkdev g_dev;

static int run_kind(const char *kind)
{
	if (system(!strncmp(kind, "ext4", 4) ? "command -v mkfs.ext4 >/dev/null 2>&1"
					       : "command -v mkfs.xfs >/dev/null 2>&1"))
		return TEST_SKIP;
	if (build_tree())
		FAIL("cannot build the source tree in %s", g_dir);
	char img[512];
	if (make_image(kind, img, sizeof(img))) {
		if (!strcmp(kind, "xfs-v4")) {
			printf("mkfs.xfs refuses v4 here: skipped\n");
			sh("rm -rf '%s'", g_dir);
			return TEST_SKIP;
		}
		FAIL("mkfs for %s failed", kind);
	}
	REQUIRE_OK(gpunvme_blkdev_open_file(img, &g_dev));
	struct gpunvme_fs *fs = NULL;
	REQUIRE_OK(gpunvme_fs_open(&g_dev, 0, &fs));

	/* every path that resolves on the host resolves to the same bytes */
	/* {path in the image, the same file for the host where the path
	 * leaves the source tree (absolute targets, ".." above the root)} */
	static const char *const good[][2] = {
		{ "hub/models--x/snapshots/abc/model.safetensors", NULL },
		{ "/hub/models--x/snapshots/abc/config.json", NULL },
		{ "hub/current/model.safetensors", NULL },
		/* ".." after a link goes to the target's parent (snapshots) */
		{ "/hub/current/../../blobs/9a7b31", NULL },
		{ "abs", "hub/models--x/blobs/5f1e0c" },
		{ "absdir/blobs/5f1e0c", "hub/models--x/blobs/5f1e0c" },
		{ "absdir/snapshots/abc/model.safetensors", "hub/models--x/blobs/5f1e0c" },
		{ "d1/d2/up/file.txt", NULL },
		{ "d1/d2/up/d1/d2/up/hub/current/config.json", NULL },
		{ "d1/snap/abc/model.safetensors", NULL },
		{ "d1/snap/../refs/main", NULL },
		{ "above", "file.txt" },
		{ "/../../file.txt", "file.txt" },
		{ "dotty", NULL },
		{ "tiny", NULL },
		{ "long", NULL },
		{ "chain/c1", NULL },
		{ "hub/models--x/snapshots/abc/./../abc/model.safetensors", NULL },
	};
	/* mkfs.xfs 6.1 -p writes a v5 extent-format symlink without its
	 * xfs_dsymlink_hdr (xfs_repair -n: "bad symlink header"), so that image
	 * has no valid long link: the decoder must refuse it, not misread it */
	bool v5_mkfs_bug = !strcmp(kind, "xfs");
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		char want[256], got[256];
		const char *path = good[i][0];
		const char *rel = good[i][1] ? good[i][1] : path[0] == '/' ? path + 1 : path;
		uint64_t ino = 0;
		if (v5_mkfs_bug && !strcmp(path, "long")) {
			CHECK_EQ(gpunvme_fs_lookup(fs, path, &ino), -EUCLEAN);
			CHECK_LAST_ERROR("bad symlink block header");
			continue;
		}
		if (host_read(rel, want, sizeof(want))) {
			CHECK(0, "%s: the host cannot resolve %s either (test tree broken)", path, rel);
			continue;
		}
		int rc = gpunvme_fs_lookup(fs, path, &ino);
		CHECK(rc == 0, "%s %s: lookup: %d", kind, path, rc);
		if (rc)
			continue;
		CHECK(fs_read_all(fs, ino, got, sizeof(got)) == 0, "%s %s: read", kind, path);
		CHECK_STR(got, want);
	}

	/* a link to a directory lists as the directory */
	uint64_t a = 0, b = 0;
	CHECK_OK(gpunvme_fs_lookup(fs, "/hub/current", &a));
	CHECK_OK(gpunvme_fs_lookup(fs, "/hub/models--x/snapshots/abc", &b));
	CHECK_EQ(a, b);
	CHECK_OK(gpunvme_fs_lookup(fs, "/hub/current/", &a));
	CHECK_EQ(a, b);
	CHECK_OK(gpunvme_fs_lookup(fs, "/d1/d2/up", &a));
	CHECK_OK(gpunvme_fs_lookup(fs, "/", &b));
	CHECK_EQ(a, b);
	CHECK_OK(gpunvme_fs_lookup(fs, "/..", &a));
	CHECK_EQ(a, b);

	/* nofollow: the last component is the link itself */
	struct gpunvme_stat st;
	CHECK_OK(gpunvme_fs_lookup_nofollow(fs, "/hub/current/model.safetensors", &a));
	CHECK_OK(gpunvme_fs_stat(fs, a, &st));
	CHECK_EQ(st.mode & 0170000, 0120000);
	char t[4096];
	CHECK_EQ(gpunvme_fs_readlink(fs, a, t, sizeof(t)), strlen("../../blobs/5f1e0c"));
	CHECK_STR(t, "../../blobs/5f1e0c");
	/* a trailing slash follows even then */
	CHECK_OK(gpunvme_fs_lookup_nofollow(fs, "/hub/current/", &a));
	CHECK_OK(gpunvme_fs_stat(fs, a, &st));
	CHECK_EQ(st.mode & 0170000, 0040000);
	/* dangling and looping links are still there to stat */
	CHECK_OK(gpunvme_fs_lookup_nofollow(fs, "/self", &a));
	CHECK_OK(gpunvme_fs_lookup_nofollow(fs, "/dangling", &a));
	CHECK_EQ(gpunvme_fs_readlink(fs, a, t, sizeof(t)), 12);
	CHECK_STR(t, "no/such/file");

	/* readlink: slow / extent-format target, errors */
	CHECK_OK(gpunvme_fs_lookup_nofollow(fs, "/long", &a));
	if (!v5_mkfs_bug) {
		CHECK_EQ(gpunvme_fs_readlink(fs, a, t, sizeof(t)), strlen(g_long));
		CHECK_STR(t, g_long);
		CHECK_EQ(gpunvme_fs_readlink(fs, a, t, strlen(g_long) + 1), strlen(g_long));
	}
	CHECK_EQ(gpunvme_fs_readlink(fs, a, t, strlen(g_long)), -ENAMETOOLONG);
	CHECK_OK(gpunvme_fs_lookup_nofollow(fs, "/tiny", &a));
	CHECK_EQ(gpunvme_fs_readlink(fs, a, t, sizeof(t)), 8);
	CHECK_STR(t, "file.txt");
	CHECK_OK(gpunvme_fs_lookup(fs, "/file.txt", &a));
	CHECK_EQ(gpunvme_fs_readlink(fs, a, t, sizeof(t)), -EINVAL);
	CHECK_LAST_ERROR("not a symbolic link");

	/* loops: -ELOOP naming the path and saying it is a loop */
	CHECK_EQ(gpunvme_fs_lookup(fs, "/loop_a", &a), -ELOOP);
	CHECK_LAST_ERROR("/loop_a: a symlink loop");
	CHECK_EQ(gpunvme_fs_lookup(fs, "/self", &a), -ELOOP);
	CHECK_LAST_ERROR("symlink loop");
	CHECK_EQ(gpunvme_fs_lookup(fs, "/loop_b/x", &a), -ELOOP);
	CHECK_EQ(gpunvme_fs_lookup(fs, "/chain/c0", &a), -ELOOP); /* 41 links */
	CHECK_LAST_ERROR("more than 40");
	/* dangling: -ENOENT naming the link and its target */
	CHECK_EQ(gpunvme_fs_lookup(fs, "/dangling", &a), -ENOENT);
	CHECK_LAST_ERROR("dangling symbolic link \"dangling\" -> \"no/such/file\"");
	CHECK_EQ(gpunvme_fs_lookup(fs, "/dangdir/x", &a), -ENOENT);
	CHECK_LAST_ERROR("\"dangdir\" -> \"d1/nothing\"");
	/* a missing name after a good link is not the link's fault */
	CHECK_EQ(gpunvme_fs_lookup(fs, "/hub/current/nope", &a), -ENOENT);
	CHECK(!strstr(gpunvme_last_error(), "dangling"), "%s", gpunvme_last_error());
	/* files are not directories, through links too */
	CHECK_EQ(gpunvme_fs_lookup(fs, "/abs/x", &a), -ENOTDIR);
	CHECK_EQ(gpunvme_fs_lookup(fs, "/tiny/", &a), -ENOTDIR);
	CHECK_EQ(gpunvme_fs_lookup(fs, "/file.txt/..", &a), -ENOTDIR);

	gpunvme_fs_close(fs);
	gpunvme_blkdev_close(&g_dev);
	if (!check_failures())
		sh("rm -rf '%s'", g_dir);
	return 0;
}

TEST_CASE(ext4) { return run_kind("ext4"); }
TEST_CASE(ext4_1k) { return run_kind("ext4-1k"); }
TEST_CASE(xfs) { return run_kind("xfs"); }
TEST_CASE(xfs_v4) { return run_kind("xfs-v4"); }

int main(int argc, char **argv)
{
	return check_main(argc, argv);
}
