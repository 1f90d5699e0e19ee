// SPDX-License-Identifier: BSD-2-Clause
/*
 * gpunvme_volume_open (volume.h): the one place a URI becomes files.
 *   whole_disk     emu:IMG, the file system at byte 0: a file's bytes, one
 *                  controller, no array
 *   partition      an MBR image: partition 1 found and read (its offset
 *                  is the file system's), partition 2 refused naming it
 *   offset         an explicit offset past the end: -ERANGE, said so
 *   namespace      nsid 2 of a one-namespace controller: the active ones
 *                  named; nsid 0 refused before anything opens
 *   bad_uri        an emulator spec that does not parse, a missing image
 *   image_file     a plain image without a controller: files readable,
 *                  the loader refuses it naming emu:PATH
 *   no_fs          o.fs = false: the device alone
 *   md_array       a committed mdadm RAID0 fixture: the array, its members'
 *                  controllers, and a file read across members
 *   make_room      a loader opened on the volume leaves the file system's
 *                  reader its queue pair when the controller has another
 *                  (the reader still reads: load --verify at Tier 1 over
 *                  NVMe/TCP needed that), and takes it only when there is
 *                  none (the reader then reads again once it is given back)
 * Images are made here with mkfs.ext4 -d (skipped without it); the md case
 * needs the zstd command.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpunvme/extents.h"
#include "gpunvme/loader.h"
#include "gpunvme/volume.h"

#include "../harness/check.h"

static char work[512];
static const char *md_fixtures;

static const char CONTENT[] = "the volume opens files in one place\n";

/* A directory with one file, made into an ext4 image of mb MiB. */
static int make_ext4(const char *img, unsigned mb)
{
	char dir[700], path[800], cmd[2048];
	/* a tree per image: ctest runs the cases at once */
	snprintf(dir, sizeof(dir), "%s.tree", img);
	mkdir(dir, 0755);
	snprintf(path, sizeof(path), "%s/hello.txt", dir);
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	fputs(CONTENT, f);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "rm -f '%s' && truncate -s %uM '%s' && mkfs.ext4 -q -F -d '%s' '%s' >/dev/null 2>&1",
		 img, mb, img, dir, img);
	return system(cmd) == 0 ? 0 : -1;
}

static int setup(void)
{
	if (system("command -v mkfs.ext4 >/dev/null 2>&1") != 0) {
		fprintf(stderr, "test_volume: no mkfs.ext4: skipped\n");
		return TEST_SKIP;
	}
	return 0;
}

/* Read /hello.txt through the volume's file system and compare. */
static int check_hello(struct gpunvme_volume *v)
{
	struct gpunvme_fs *fs = gpunvme_volume_fs(v);
	REQUIRE(fs != NULL);
	uint64_t ino;
	REQUIRE_OK(gpunvme_fs_lookup(fs, "/hello.txt", &ino));
	struct gpunvme_extent *ext = NULL;
	size_t n = 0;
	REQUIRE_OK(gpunvme_fs_extents(fs, ino, &ext, &n));
	REQUIRE(n >= 1);
	/* extents are device byte addresses (partition offset included) */
	char buf[4096];
	struct gpunvme_blkdev *dev = gpunvme_volume_blkdev(v);
	REQUIRE_OK(dev->read(dev->ctx, ext[0].physical, buf, sizeof(buf)));
	free(ext);
	REQUIRE(memcmp(buf, CONTENT, sizeof(CONTENT) - 1) == 0);
	return 0;
}

TEST_CASE(whole_disk)
{
	int rc = setup();
	if (rc)
		return rc;
	char img[600], uri[700];
	snprintf(img, sizeof(img), "%s/whole.img", work);
	REQUIRE(make_ext4(img, 8) == 0);
	snprintf(uri, sizeof(uri), "emu:%s", img);
	struct gpunvme_volume *v;
	REQUIRE_OK(gpunvme_volume_open(uri, NULL, NULL, &v));
	CHECK_EQ(gpunvme_volume_nctrl(v), 1);
	CHECK(gpunvme_volume_ctrl(v, 0) != NULL);
	CHECK(gpunvme_volume_ctrl(v, 1) == NULL);
	CHECK(gpunvme_volume_md(v) == NULL);
	CHECK_EQ(gpunvme_volume_fs_offset(v), 0);
	CHECK_EQ(gpunvme_volume_nsid(v), 1);
	rc = check_hello(v);
	gpunvme_volume_close(v);
	return rc;
}

/* One MBR primary partition of sectors [first, first + count). */
static int write_mbr(const char *img, uint32_t first, uint32_t count)
{
	unsigned char mbr[512];
	memset(mbr, 0, sizeof(mbr));
	unsigned char *e = mbr + 446;
	e[4] = 0x83; /* Linux */
	for (int i = 0; i < 4; i++) {
		e[8 + i] = (unsigned char)(first >> (8 * i));
		e[12 + i] = (unsigned char)(count >> (8 * i));
	}
	mbr[510] = 0x55;
	mbr[511] = 0xaa;
	FILE *f = fopen(img, "r+b");
	if (!f)
		return -1;
	size_t w = fwrite(mbr, 1, sizeof(mbr), f);
	fclose(f);
	return w == sizeof(mbr) ? 0 : -1;
}

TEST_CASE(partition)
{
	int rc = setup();
	if (rc)
		return rc;
	char fsimg[600], img[600], uri[700], cmd[4096];
	snprintf(fsimg, sizeof(fsimg), "%s/part-fs.img", work);
	snprintf(img, sizeof(img), "%s/part.img", work);
	REQUIRE(make_ext4(fsimg, 8) == 0);
	/* the file system at 1 MiB (sector 2048) of a 12 MiB disk */
	snprintf(cmd, sizeof(cmd), "rm -f '%s' && truncate -s 12M '%s' && dd if='%s' of='%s' bs=1M seek=1 conv=notrunc "
		 "status=none", img, img, fsimg, img);
	REQUIRE(system(cmd) == 0);
	REQUIRE(write_mbr(img, 2048, 8 * 2048) == 0);
	snprintf(uri, sizeof(uri), "emu:%s", img);
	struct gpunvme_volume_opts o;
	gpunvme_volume_opts_init(&o);
	struct gpunvme_volume *v;
	/* partition 0: the one partition holding a file system */
	REQUIRE_OK(gpunvme_volume_open(uri, NULL, &o, &v));
	CHECK_EQ(gpunvme_volume_fs_offset(v), 1u << 20);
	rc = check_hello(v);
	gpunvme_volume_close(v);
	if (rc)
		return rc;
	o.partition = 1;
	REQUIRE_OK(gpunvme_volume_open(uri, NULL, &o, &v));
	CHECK_EQ(gpunvme_volume_fs_offset(v), 1u << 20);
	gpunvme_volume_close(v);
	o.partition = 2;
	rc = gpunvme_volume_open(uri, NULL, &o, &v);
	CHECK(rc < 0);
	CHECK(v == NULL);
	CHECK_LAST_ERROR("partition 2");
	return 0;
}

TEST_CASE(offset)
{
	int rc = setup();
	if (rc)
		return rc;
	char img[600], uri[700];
	snprintf(img, sizeof(img), "%s/off.img", work);
	REQUIRE(make_ext4(img, 8) == 0);
	snprintf(uri, sizeof(uri), "emu:%s", img);
	struct gpunvme_volume_opts o;
	gpunvme_volume_opts_init(&o);
	o.offset = 1ull << 30;
	struct gpunvme_volume *v;
	CHECK_EQ(gpunvme_volume_open(uri, NULL, &o, &v), -ERANGE);
	CHECK_LAST_ERROR("past the end of the device");
	/* an offset inside the device where no file system starts */
	o.offset = 4096;
	CHECK(gpunvme_volume_open(uri, NULL, &o, &v) < 0);
	CHECK(*gpunvme_last_error() != 0);
	o.offset = 0;
	REQUIRE_OK(gpunvme_volume_open(uri, NULL, &o, &v));
	rc = check_hello(v);
	gpunvme_volume_close(v);
	return rc;
}

TEST_CASE(namespace)
{
	int rc = setup();
	if (rc)
		return rc;
	char img[600], uri[700];
	snprintf(img, sizeof(img), "%s/ns.img", work);
	REQUIRE(make_ext4(img, 8) == 0);
	snprintf(uri, sizeof(uri), "emu:%s", img);
	struct gpunvme_volume_opts o;
	gpunvme_volume_opts_init(&o);
	o.nsid = 2;
	struct gpunvme_volume *v;
	CHECK(gpunvme_volume_open(uri, NULL, &o, &v) < 0);
	CHECK_LAST_ERROR("namespace 2");
	CHECK_LAST_ERROR("1"); /* the active one named */
	o.nsid = 0;
	CHECK_EQ(gpunvme_volume_open(uri, NULL, &o, &v), -EINVAL);
	CHECK_LAST_ERROR("namespace id 0");
	return 0;
}

TEST_CASE(bad_uri)
{
	int rc = setup();
	if (rc)
		return rc;
	struct gpunvme_volume *v = (struct gpunvme_volume *)1;
	CHECK(gpunvme_volume_open("emu:ram:nonsense", NULL, NULL, &v) < 0);
	CHECK(v == NULL);
	CHECK_LAST_ERROR("cannot open 'emu:ram:nonsense'");
	char img[600];
	snprintf(img, sizeof(img), "%s/does-not-exist.img", work);
	CHECK(gpunvme_volume_open("image", img, NULL, &v) < 0);
	CHECK_LAST_ERROR("cannot open image");
	CHECK_EQ(gpunvme_volume_open(NULL, NULL, NULL, &v), -EINVAL);
	return 0;
}

TEST_CASE(image_file)
{
	int rc = setup();
	if (rc)
		return rc;
	char img[600];
	snprintf(img, sizeof(img), "%s/plain.img", work);
	REQUIRE(make_ext4(img, 8) == 0);
	struct gpunvme_volume *v;
	REQUIRE_OK(gpunvme_volume_open(NULL, img, NULL, &v));
	CHECK_EQ(gpunvme_volume_nctrl(v), 0);
	CHECK(gpunvme_volume_ctrl(v, 0) == NULL);
	rc = check_hello(v);
	struct gpunvme_extent e = { 0, 0, 4096, 0 };
	struct gpunvme_layer_loader *l = NULL;
	CHECK_EQ(gpunvme_layer_loader_init_volume(v, &e, 1, 4096, NULL, &l), -EOPNOTSUPP);
	CHECK_LAST_ERROR("emu:PATH");
	gpunvme_volume_close(v);
	return rc;
}

TEST_CASE(no_fs)
{
	int rc = setup();
	if (rc)
		return rc;
	struct gpunvme_volume_opts o;
	gpunvme_volume_opts_init(&o);
	o.fs = false;
	struct gpunvme_volume *v;
	/* an empty RAM namespace: no file system, and none asked for */
	REQUIRE_OK(gpunvme_volume_open("emu:ram:4M", NULL, &o, &v));
	CHECK(gpunvme_volume_fs(v) == NULL);
	CHECK_EQ(gpunvme_volume_blkdev(v)->size, 4u << 20);
	gpunvme_volume_close(v);
	/* with one asked for, the failure names the device */
	gpunvme_volume_opts_init(&o);
	CHECK(gpunvme_volume_open("emu:ram:4M", NULL, &o, &v) < 0);
	CHECK_LAST_ERROR("emu:ram:4M");
	return 0;
}

TEST_CASE(md_array)
{
	int rc = setup();
	if (rc)
		return rc;
	if (!md_fixtures || system("command -v zstd >/dev/null 2>&1") != 0) {
		fprintf(stderr, "test_volume: no md fixtures or zstd: skipped\n");
		return TEST_SKIP;
	}
	/* a 3-member RAID0 (mdadm 1.2, 64 KiB chunks) with an ext4 on it */
	const char *fx = "r0-v12-c64-ext4";
	char uri[4096] = "md:";
	for (int i = 0; i < 3; i++) {
		char cmd[2048], img[700];
		snprintf(img, sizeof(img), "%s/%s.m%d.img", work, fx, i);
		snprintf(cmd, sizeof(cmd), "zstd -q -d -f '%s/%s.m%d.img.zst' -o '%s'", md_fixtures, fx, i, img);
		REQUIRE(system(cmd) == 0);
		size_t l = strlen(uri);
		snprintf(uri + l, sizeof(uri) - l, "%semu:%s", i ? ";" : "", img);
	}
	struct gpunvme_volume *v;
	REQUIRE_OK(gpunvme_volume_open(uri, NULL, NULL, &v));
	struct gpunvme_md_volume *md = gpunvme_volume_md(v);
	REQUIRE(md != NULL);
	CHECK_EQ(md->n, 3);
	CHECK_EQ(gpunvme_volume_nctrl(v), 3);
	CHECK(gpunvme_volume_blkdev(v) == &md->array);
	/* /big.txt spans chunks on every member: its size is the manifest's */
	uint64_t ino;
	REQUIRE_OK(gpunvme_fs_lookup(gpunvme_volume_fs(v), "/big.txt", &ino));
	struct gpunvme_stat st;
	REQUIRE_OK(gpunvme_fs_stat(gpunvme_volume_fs(v), ino, &st));
	CHECK(st.size > 3u * 65536u);
	gpunvme_volume_close(v);
	return 0;
}

/* A CPU-tier loader on hello.txt's extents, the controller granting nq
 * I/O queue pairs. */
static int open_loader(unsigned nq, struct gpunvme_volume **v, struct gpunvme_layer_loader **l)
{
	char img[600], uri[700];
	snprintf(img, sizeof(img), "%s/room%u.img", work, nq);
	REQUIRE(make_ext4(img, 8) == 0);
	snprintf(uri, sizeof(uri), "emu:%s", img);
	struct gpunvme_opts co;
	gpunvme_opts_init(&co);
	co.nr_io_queues = nq;
	struct gpunvme_volume_opts vo;
	gpunvme_volume_opts_init(&vo);
	vo.ctrl = &co;
	REQUIRE_OK(gpunvme_volume_open(uri, NULL, &vo, v));
	struct gpunvme_fs *fs = gpunvme_volume_fs(*v);
	uint64_t ino;
	REQUIRE_OK(gpunvme_fs_lookup(fs, "/hello.txt", &ino));
	struct gpunvme_extent *ext = NULL;
	size_t n = 0;
	REQUIRE_OK(gpunvme_fs_extents(fs, ino, &ext, &n));
	struct gpunvme_loader_opts lo;
	gpunvme_loader_opts_init(&lo);
	lo.tier = GPUNVME_TIER_CPU;
	int rc = gpunvme_layer_loader_init_volume(*v, ext, n, sizeof(CONTENT) - 1, &lo, l);
	free(ext);
	REQUIRE_OK(rc);
	return 0;
}

TEST_CASE(make_room)
{
	int rc = setup();
	if (rc)
		return rc;
	struct gpunvme_volume *v;
	struct gpunvme_layer_loader *l;
	/* two granted: the loader takes the free one, the reader keeps its own */
	REQUIRE_OK(open_loader(2, &v, &l));
	CHECK_EQ(gpunvme_io_queues_free(gpunvme_volume_ctrl(v, 0)), 0);
	rc = check_hello(v);
	gpunvme_layer_loader_destroy(l);
	gpunvme_volume_close(v);
	REQUIRE_OK(rc);
	/* one granted: the reader gives it to the loader, reads again once
	 * the loader hands its queues back */
	REQUIRE_OK(open_loader(1, &v, &l));
	CHECK_EQ(gpunvme_io_queues_free(gpunvme_volume_ctrl(v, 0)), 0);
	char buf[512];
	struct gpunvme_blkdev *dev = gpunvme_volume_blkdev(v);
	/* a window the file system never read (the reader caches those) */
	CHECK_EQ(dev->read(dev->ctx, 6u << 20, buf, sizeof(buf)), -EBUSY);
	REQUIRE_OK(gpunvme_layer_loader_release_queues(l));
	rc = check_hello(v);
	gpunvme_layer_loader_destroy(l);
	gpunvme_volume_close(v);
	return rc;
}

int main(int argc, char **argv)
{
	const char *w = getenv("TEST_VOLUME_WORK");
	snprintf(work, sizeof(work), "%s", w ? w : "/tmp/test_volume");
	mkdir(work, 0755);
	md_fixtures = getenv("TEST_VOLUME_MD_FIXTURES");
	return check_main(argc, argv);
}
