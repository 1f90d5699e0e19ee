/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme ls / stat / extents / cat: files of an ext4 or XFS file system read
 * without mounting it, through the on-disk decoders of src/fs. The source is
 * a namespace opened through the user-space driver (URI, --nsid; emu:IMAGE
 * makes an image file a namespace, so this path runs everywhere) or, for
 * convenience, an image file read directly (--image FILE). `extents
 * --fiemap FILE` asks the kernel instead, for a file on a mounted file
 * system.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpunvme/extents.h"
#include "util.h"

enum { FS_LS, FS_STAT, FS_EXTENTS, FS_CAT };

struct fs_opts {
	int cmd;
	const char *uri;     /* device URI, or NULL with --image */
	const char *image;   /* --image FILE */
	const char *path;    /* path inside the file system */
	const char *fiemap;  /* extents --fiemap FILE */
	struct cli_volume_opts vol; /* --nsid, --partition, --offset */
	bool json, longfmt;
};

static void help(int cmd)
{
	static const char *const use[] = {
		"usage: gpunvme ls URI [PATH] [--nsid N] [--partition N | --offset BYTES] [-l] [--json]\n"
		"       gpunvme ls --image FILE [PATH] [options]\n"
		"\n"
		"List a directory (default /) of the ext4 or XFS file system on a namespace,\n"
		"without mounting it. Entries are sorted by name; '.' and '..' are left out.\n"
		"A PATH naming a file lists that file.\n",
		"usage: gpunvme stat URI PATH [--nsid N] [--partition N | --offset BYTES] [--json]\n"
		"       gpunvme stat --image FILE PATH [options]\n"
		"\n"
		"Inode of PATH: number, type, mode, links, owner, size, bytes allocated, mtime.\n"
		"A symbolic link is shown itself (as stat(1) without -L), with its target.\n",
		"usage: gpunvme extents URI PATH [--nsid N] [--partition N | --offset BYTES] [--json]\n"
		"       gpunvme extents --image FILE PATH [options]\n"
		"       gpunvme extents --fiemap FILE [--json]\n"
		"\n"
		"Where the bytes of a regular file live on the device: for every extent its\n"
		"logical byte offset in the file, its physical byte offset on the device\n"
		"(the namespace, partition offset included), the LBA (physical / LBA size),\n"
		"the length and whether it is unwritten (allocated, reads as zeroes).\n"
		"Holes are the gaps between extents. --fiemap asks the kernel (FS_IOC_FIEMAP)\n"
		"about a file on a mounted file system; it must live on an NVMe namespace.\n",
		"usage: gpunvme cat URI PATH [--nsid N] [--partition N | --offset BYTES]\n"
		"       gpunvme cat --image FILE PATH [options]\n"
		"\n"
		"The bytes of a regular file to stdout (holes and unwritten ranges read as\n"
		"zeroes). Symbolic links are followed, inside the file system.\n",
	};
	printf("%s", use[cmd]);
	printf("\n"
	       CLI_VOLUME_HELP
	       "      --image FILE     read an image file (or block device) directly instead\n"
	       "                       of a namespace through the driver; no URI then\n"
	       "%s%s"
	       "  -h, --help           this text\n"
	       "\n"
	       "URI: as for the other commands; emu:/path/disk.img serves an image file as a\n"
	       "namespace of the embedded emulator (the full driver path).\n"
	       "\n"
	       "example: gpunvme %s emu:/tmp/ext4.img %s\n",
	       cmd == FS_LS ? "  -l, --long           mode, links, owner, size, mtime, inode\n" : "",
	       cmd != FS_CAT ? "  -j, --json           JSON output\n" : "",
	       cmd == FS_LS ? "ls" : cmd == FS_STAT ? "stat" : cmd == FS_EXTENTS ? "extents" : "cat",
	       cmd == FS_LS ? "/dir -l" : "/dir/file");
}

static int parse(int argc, char **argv, struct fs_opts *o)
{
	static const struct option lo[] = {
		CLI_VOLUME_LONGOPTS,
		{"image", required_argument, NULL, 'I'},
		{"fiemap", required_argument, NULL, 'F'},
		{"long", no_argument, NULL, 'l'},
		{"json", no_argument, NULL, 'j'},
		{"output-format", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0, 0, 0, 0},
	};
	int c, rc;
	while ((c = cli_getopt(argc, argv, "n:ljo:h", lo)) != -1) {
		if (cli_volume_opt(c, optarg, &o->vol, &rc)) {
			if (rc)
				return rc;
			continue;
		}
		switch (c) {
		case 'I': o->image = optarg; break;
		case 'F':
			if (o->cmd != FS_EXTENTS)
				return cli_usage_err("--fiemap belongs to 'extents'");
			o->fiemap = optarg;
			break;
		case 'l':
			if (o->cmd != FS_LS)
				return cli_usage_err("-l belongs to 'ls'");
			o->longfmt = true;
			break;
		case 'j':
			if (o->cmd == FS_CAT)
				return cli_usage_err("cat writes the file's bytes; it has no --json");
			o->json = true;
			break;
		case 'o':
			if (o->cmd == FS_CAT)
				return cli_usage_err("cat writes the file's bytes; it has no --output-format");
			if (!strcmp(optarg, "json"))
				o->json = true;
			else if (!strcmp(optarg, "normal"))
				o->json = false;
			else
				return cli_usage_err("--output-format '%s': expected normal or json", optarg);
			break;
		case 'h': help(o->cmd); return -1;
		default: return EXIT_USAGE;
		}
	}
	int npos = argc - optind;
	char **pos = argv + optind;
	if (o->fiemap) {
		if (o->image || npos)
			return cli_usage_err("--fiemap FILE takes no URI, PATH or --image");
		return 0;
	}
	if (!o->image) {
		if (npos < 1)
			return cli_usage_err("missing device URI (e.g. emu:/path/disk.img) or --image FILE");
		o->uri = pos[0];
		pos++;
		npos--;
		struct stat st;
		/* the common slip: an image path where the URI goes */
		if (!strchr(o->uri, ':') && stat(o->uri, &st) == 0)
			return cli_usage_err("'%s' is a file, not a device URI: use --image %s, or emu:%s to go "
					     "through the driver", o->uri, o->uri, o->uri);
		if ((rc = cli_check_uri(o->uri)))
			return rc;
	}
	if ((rc = cli_volume_check(&o->vol)))
		return rc;
	if (npos > 1)
		return cli_usage_err("unexpected argument '%s' (one PATH)", pos[1]);
	if (npos == 1)
		o->path = pos[0];
	else if (o->cmd == FS_LS)
		o->path = "/";
	else
		return cli_usage_err("missing PATH (a file in the file system, e.g. /dir/file)");
	return 0;
}

static const char *type_name(uint32_t mode)
{
	switch (mode & 0170000) {
	case 0100000: return "file";
	case 0040000: return "directory";
	case 0120000: return "symlink";
	case 0020000: return "char";
	case 0060000: return "block";
	case 0010000: return "fifo";
	case 0140000: return "socket";
	default: return "unknown";
	}
}

static void mode_str(uint32_t mode, char out[11])
{
	static const char types[] = "?pc?d?b?-?l?s???";
	out[0] = types[(mode >> 12) & 15];
	const char *rwx = "rwxrwxrwx";
	for (int i = 0; i < 9; i++)
		out[1 + i] = (mode & (0400u >> i)) ? rwx[i] : '-';
	if (mode & 04000)
		out[3] = (mode & 0100) ? 's' : 'S';
	if (mode & 02000)
		out[6] = (mode & 010) ? 's' : 'S';
	if (mode & 01000)
		out[9] = (mode & 01) ? 't' : 'T';
	out[10] = 0;
}

static void time_str(int64_t sec, char *buf, size_t len)
{
	time_t t = (time_t)sec;
	struct tm tm;
	if (!gmtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "%" PRId64, sec);
}

/* Names are bytes: print them as they are, but never raw control bytes
 * (a hostile image must not drive the terminal). */
static void put_name(FILE *f, const char *name, size_t len)
{
	cli_put_name(f, name, len);
}

/* ---- ls ------------------------------------------------------------------ */

struct ent {
	char *name;
	size_t len;
	uint64_t ino;
	int ftype;
};

struct ents {
	struct ent *v;
	size_t n, cap;
	int err;
};

static int collect_cb(void *arg, const char *name, size_t namelen, uint64_t ino, int ftype)
{
	struct ents *e = arg;
	if ((namelen == 1 && name[0] == '.') || (namelen == 2 && name[0] == '.' && name[1] == '.'))
		return 0;
	if (e->n == e->cap) {
		size_t cap = e->cap ? e->cap * 2 : 64;
		struct ent *v = realloc(e->v, cap * sizeof(*v));
		if (!v)
			return e->err = -ENOMEM;
		e->v = v;
		e->cap = cap;
	}
	char *s = malloc(namelen + 1);
	if (!s)
		return e->err = -ENOMEM;
	memcpy(s, name, namelen);
	s[namelen] = 0;
	e->v[e->n++] = (struct ent){ s, namelen, ino, ftype };
	return 0;
}

static int cmp_ent(const void *a, const void *b)
{
	const struct ent *x = a, *y = b;
	size_t m = x->len < y->len ? x->len : y->len;
	int c = memcmp(x->name, y->name, m);
	return c ? c : (x->len > y->len) - (x->len < y->len);
}

static void json_stat(struct cli_json *j, const struct gpunvme_stat *st)
{
	char ts[32];
	cj_u64(j, "ino", st->ino);
	cj_str(j, "type", type_name(st->mode));
	cj_u64(j, "mode", st->mode & 07777);
	cj_u64(j, "nlink", st->nlink);
	cj_u64(j, "uid", st->uid);
	cj_u64(j, "gid", st->gid);
	cj_u64(j, "size", st->size);
	cj_u64(j, "allocated", st->blocks);
	cj_i64(j, "mtime", st->mtime_sec);
	cj_u64(j, "mtime_nsec", st->mtime_nsec);
	time_str(st->mtime_sec, ts, sizeof(ts));
	cj_str(j, "mtime_utc", ts);
}

/* A link's target for display: "" when it cannot be read (the listing goes
 * on; the reason is in the error text), control bytes shown escaped. */
static const char *link_target(struct cli_fs *h, const struct gpunvme_stat *st, char *buf, size_t len)
{
	if ((st->mode & 0170000) != 0120000 || gpunvme_fs_readlink(h->fs, st->ino, buf, len) < 0)
		buf[0] = 0;
	return buf;
}

static void long_line(const struct gpunvme_stat *st, const char *name, size_t len, const char *target)
{
	char m[11], ts[32];
	mode_str(st->mode, m);
	time_str(st->mtime_sec, ts, sizeof(ts));
	printf("%s %3u %5u %5u %12" PRIu64 " %s %10" PRIu64 " ", m, st->nlink, st->uid, st->gid, st->size, ts,
	       st->ino);
	put_name(stdout, name, len);
	if (target && *target) {
		printf(" -> ");
		put_name(stdout, target, strlen(target));
	}
	printf("\n");
}

static int do_ls(const struct fs_opts *o, struct cli_fs *h)
{
	uint64_t ino;
	struct gpunvme_stat st;
	int rc;
	/* as ls(1): a link named on the command line is followed, except with
	 * -l (and --json), which show the link itself */
	if ((rc = gpunvme_fs_lookup_nofollow(h->fs, o->path, &ino)))
		return cli_lib_err(rc, "lookup");
	if ((rc = gpunvme_fs_stat(h->fs, ino, &st)))
		return cli_lib_err(rc, "stat %s", o->path);
	if ((st.mode & 0170000) == 0120000 && !o->longfmt && !o->json) {
		if ((rc = gpunvme_fs_lookup(h->fs, o->path, &ino)))
			return cli_lib_err(rc, "lookup");
		if ((rc = gpunvme_fs_stat(h->fs, ino, &st)))
			return cli_lib_err(rc, "stat %s", o->path);
	}
	struct ents e = {0};
	if ((st.mode & 0170000) == 0040000) {
		rc = gpunvme_fs_readdir(h->fs, ino, collect_cb, &e);
		if (rc < 0 || e.err) {
			rc = cli_lib_err(e.err ? e.err : rc, "reading directory %s", o->path);
			goto out;
		}
		qsort(e.v, e.n, sizeof(*e.v), cmp_ent);
	} else {
		collect_cb(&e, o->path, strlen(o->path), ino, 0);
		if (e.err) {
			rc = cli_lib_err(e.err, "ls");
			goto out;
		}
	}
	struct cli_json j;
	if (o->json) {
		cj_init(&j, stdout);
		cj_obj_begin(&j, NULL);
		cj_str(&j, "fs", gpunvme_fs_type(h->fs));
		cj_str(&j, "path", o->path);
		cj_arr_begin(&j, "entries");
	}
	rc = 0;
	for (size_t i = 0; i < e.n; i++) {
		struct gpunvme_stat es;
		bool need_stat = o->longfmt || o->json;
		if (need_stat && (rc = gpunvme_fs_stat(h->fs, e.v[i].ino, &es))) {
			rc = cli_lib_err(rc, "stat of %s entry '%s' (inode %" PRIu64 ")", o->path, e.v[i].name,
					 e.v[i].ino);
			goto out;
		}
		char tgt[4096] = "";
		if (need_stat)
			link_target(h, &es, tgt, sizeof(tgt));
		if (o->json) {
			cj_obj_begin(&j, NULL);
			cj_str(&j, "name", e.v[i].name);
			json_stat(&j, &es);
			if (*tgt)
				cj_str(&j, "target", tgt);
			cj_obj_end(&j);
		} else if (o->longfmt) {
			long_line(&es, e.v[i].name, e.v[i].len, tgt);
		} else {
			put_name(stdout, e.v[i].name, e.v[i].len);
			printf("\n");
		}
	}
	if (o->json) {
		cj_arr_end(&j);
		cj_obj_end(&j);
		cj_finish(&j);
	}
out:
	for (size_t i = 0; i < e.n; i++)
		free(e.v[i].name);
	free(e.v);
	return rc;
}

/* ---- stat ------------------------------------------------------------------ */

static int do_stat(const struct fs_opts *o, struct cli_fs *h)
{
	uint64_t ino;
	struct gpunvme_stat st;
	int rc;
	/* the link itself, as stat(1) without -L; its target is shown */
	if ((rc = gpunvme_fs_lookup_nofollow(h->fs, o->path, &ino)))
		return cli_lib_err(rc, "lookup");
	if ((rc = gpunvme_fs_stat(h->fs, ino, &st)))
		return cli_lib_err(rc, "stat %s", o->path);
	char tgt[4096] = "";
	if ((st.mode & 0170000) == 0120000) {
		int64_t r = gpunvme_fs_readlink(h->fs, ino, tgt, sizeof(tgt));
		if (r < 0)
			return cli_lib_err((int)r, "reading symbolic link %s", o->path);
	}
	if (o->json) {
		struct cli_json j;
		cj_init(&j, stdout);
		cj_obj_begin(&j, NULL);
		cj_str(&j, "fs", gpunvme_fs_type(h->fs));
		cj_u64(&j, "block_size", gpunvme_fs_block_size(h->fs));
		cj_str(&j, "path", o->path);
		json_stat(&j, &st);
		if (*tgt)
			cj_str(&j, "target", tgt);
		cj_obj_end(&j);
		cj_finish(&j);
		return 0;
	}
	char m[11], ts[32];
	mode_str(st.mode, m);
	time_str(st.mtime_sec, ts, sizeof(ts));
	printf("  Path: ");
	put_name(stdout, o->path, strlen(o->path));
	if (*tgt) {
		printf(" -> ");
		put_name(stdout, tgt, strlen(tgt));
	}
	printf("\n"
	       "    FS: %s, block size %u\n"
	       " Inode: %" PRIu64 "\n"
	       "  Type: %s\n"
	       "  Mode: %04o (%s)\n"
	       " Links: %u\n"
	       "   Uid: %u  Gid: %u\n"
	       "  Size: %" PRIu64 "\n"
	       " Alloc: %" PRIu64 " bytes\n"
	       " Mtime: %s.%09u UTC\n",
	       gpunvme_fs_type(h->fs), gpunvme_fs_block_size(h->fs), st.ino, type_name(st.mode), st.mode & 07777, m,
	       st.nlink, st.uid, st.gid, st.size, st.blocks, ts, st.mtime_nsec);
	return 0;
}

/* ---- extents ------------------------------------------------------------------ */

/* An md array's extents cut per member: which member (its URI, as given)
 * holds each piece, at which byte and LBA of that member's namespace. */
static void print_member_pieces(const struct fs_opts *o, struct cli_json *j, const struct gpunvme_md_volume *v,
				const struct gpunvme_md_extent *p, size_t np)
{
	if (o->json) {
		cj_arr_begin(j, "member_extents");
		for (size_t i = 0; i < np; i++) {
			uint32_t lba = v->dev[p[i].member].lba_size ? v->dev[p[i].member].lba_size : 512;
			cj_obj_begin(j, NULL);
			cj_u64(j, "logical", p[i].logical);
			cj_u64(j, "member", p[i].member);
			cj_str(j, "uri", v->name[p[i].member]);
			cj_u64(j, "nsid", v->nsid[p[i].member]);
			cj_u64(j, "physical", p[i].physical);
			cj_u64(j, "lba", p[i].physical / lba);
			cj_u64(j, "length", p[i].length);
			cj_bool(j, "unwritten", p[i].flags & GPUNVME_EXTENT_UNWRITTEN);
			cj_obj_end(j);
		}
		cj_arr_end(j);
		return;
	}
	printf("per member (md %zu members):\n%16s %6s %16s %14s %14s  %s\n", v->n, "logical", "member", "physical",
	       "lba", "length", "flags");
	for (size_t i = 0; i < np; i++) {
		uint32_t lba = v->dev[p[i].member].lba_size ? v->dev[p[i].member].lba_size : 512;
		printf("%16" PRIu64 " %6u %16" PRIu64 " %14" PRIu64 " %14" PRIu64 "  %s\n", p[i].logical, p[i].member,
		       p[i].physical, p[i].physical / lba, p[i].length,
		       (p[i].flags & GPUNVME_EXTENT_UNWRITTEN) ? "unwritten" : "-");
	}
	for (size_t k = 0; k < v->n; k++)
		printf("member %zu: %s (namespace %u)\n", k, v->name[k], v->nsid[k]);
}

static void print_extents(const struct fs_opts *o, const char *what, const char *fstype, const char *disk,
			  uint32_t block_size, uint64_t size, uint32_t lba_size, const struct gpunvme_extent *x,
			  size_t n, const struct gpunvme_md_volume *v, const struct gpunvme_md_extent *pieces, size_t np)
{
	if (o->json) {
		struct cli_json j;
		cj_init(&j, stdout);
		cj_obj_begin(&j, NULL);
		cj_str(&j, "path", what);
		if (fstype)
			cj_str(&j, "fs", fstype);
		if (disk)
			cj_str(&j, "device", disk);
		if (block_size)
			cj_u64(&j, "block_size", block_size);
		cj_u64(&j, "size", size);
		cj_u64(&j, "lba_size", lba_size);
		cj_arr_begin(&j, "extents");
		for (size_t i = 0; i < n; i++) {
			cj_obj_begin(&j, NULL);
			cj_u64(&j, "logical", x[i].logical);
			cj_u64(&j, "physical", x[i].physical);
			cj_u64(&j, "lba", x[i].physical / lba_size);
			/* a file system block smaller than the LBA can start
			 * inside one: the LBA alone would round it down */
			cj_u64(&j, "lba_offset", x[i].physical % lba_size);
			cj_u64(&j, "length", x[i].length);
			cj_bool(&j, "unwritten", x[i].flags & GPUNVME_EXTENT_UNWRITTEN);
			cj_obj_end(&j);
		}
		cj_arr_end(&j);
		if (v)
			print_member_pieces(o, &j, v, pieces, np);
		cj_obj_end(&j);
		cj_finish(&j);
		return;
	}
	printf("%s: ", disk ? "device" : "fs");
	if (disk)
		printf("%s", disk);
	else
		printf("%s, block size %u", fstype, block_size);
	printf(", LBA size %u, file size %" PRIu64 ", %zu extent%s\n", lba_size, size, n, n == 1 ? "" : "s");
	printf("%16s %16s %14s %14s  %s\n", "logical", "physical", "lba", "length", "flags");
	bool inside = false;
	for (size_t i = 0; i < n; i++) {
		/* LBA+BYTES where an extent starts inside an LBA (a file system
		 * block smaller than the LBA), never a rounded-down LBA alone */
		char lba[48];
		uint64_t rem = x[i].physical % lba_size;
		if (rem)
			snprintf(lba, sizeof(lba), "%" PRIu64 "+%" PRIu64, x[i].physical / lba_size, rem);
		else
			snprintf(lba, sizeof(lba), "%" PRIu64, x[i].physical / lba_size);
		inside |= rem != 0;
		printf("%16" PRIu64 " %16" PRIu64 " %14s %14" PRIu64 "  %s\n", x[i].logical, x[i].physical, lba,
		       x[i].length, (x[i].flags & GPUNVME_EXTENT_UNWRITTEN) ? "unwritten" : "-");
	}
	if (inside)
		printf("(LBA+N: the extent starts N bytes into that LBA: the file system block is smaller than the LBA)\n");
	if (v)
		print_member_pieces(o, NULL, v, pieces, np);
}

static int do_extents(const struct fs_opts *o, struct cli_fs *h)
{
	uint64_t ino;
	struct gpunvme_stat st;
	int rc;
	if ((rc = gpunvme_fs_lookup(h->fs, o->path, &ino)))
		return cli_lib_err(rc, "lookup");
	if ((rc = gpunvme_fs_stat(h->fs, ino, &st)))
		return cli_lib_err(rc, "stat %s", o->path);
	if ((st.mode & 0170000) != 0100000)
		return cli_err(EXIT_RUNTIME, "%s: a %s has no file extents (regular files only)", o->path,
			       type_name(st.mode));
	struct gpunvme_extent *x = NULL;
	size_t n = 0;
	if ((rc = gpunvme_fs_extents(h->fs, ino, &x, &n)))
		return cli_lib_err(rc, "extents of %s", o->path);
	struct gpunvme_md_extent *pieces = NULL;
	size_t np = 0;
	if (h->md && (rc = gpunvme_md_split_extents(h->md->md, x, n, &pieces, &np))) {
		free(x);
		return cli_lib_err(rc, "extents of %s on the md members", o->path);
	}
	print_extents(o, o->path, gpunvme_fs_type(h->fs), NULL, gpunvme_fs_block_size(h->fs), st.size,
		      h->dev->lba_size, x, n, h->md, pieces, np);
	free(pieces);
	free(x);
	return 0;
}

static int do_fiemap(const struct fs_opts *o)
{
	struct gpunvme_extent *x = NULL;
	size_t n = 0;
	char disk[64] = "";
	int rc = gpunvme_fiemap(o->fiemap, &x, &n, disk, sizeof(disk));
	if (rc)
		return cli_lib_err(rc, "fiemap");
	/* LBAs in the disk's logical block size, as the driver will see it */
	uint32_t lba = 512;
	const char *sys = getenv("GPUNVME_SYSFS");
	char p[256], buf[32];
	snprintf(p, sizeof(p), "%s/block/%s/queue/logical_block_size", sys && *sys ? sys : "/sys", disk);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t r = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (r > 0) {
			buf[r] = 0;
			unsigned long v = strtoul(buf, NULL, 10);
			if (v >= 512 && v <= 65536 && !(v & (v - 1)))
				lba = (uint32_t)v;
		}
	}
	uint64_t size = 0;
	fd = open(o->fiemap, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		off_t end = lseek(fd, 0, SEEK_END);
		size = end > 0 ? (uint64_t)end : 0;
		close(fd);
	}
	print_extents(o, o->fiemap, NULL, disk, 0, size, lba, x, n, NULL, NULL, 0);
	free(x);
	return 0;
}

/* ---- cat ------------------------------------------------------------------------ */

#define CAT_CHUNK (1u << 20)

static int do_cat(const struct fs_opts *o, struct cli_fs *h)
{
	uint64_t ino;
	struct gpunvme_stat st;
	int rc;
	if ((rc = gpunvme_fs_lookup(h->fs, o->path, &ino)))
		return cli_lib_err(rc, "lookup");
	if ((rc = gpunvme_fs_stat(h->fs, ino, &st)))
		return cli_lib_err(rc, "stat %s", o->path);
	uint32_t t = st.mode & 0170000;
	if (t != 0100000)
		return cli_err(EXIT_RUNTIME, "%s: is a %s, not a file", o->path, type_name(st.mode));
	uint8_t *buf = malloc(CAT_CHUNK);
	if (!buf)
		return cli_err(EXIT_RUNTIME, "out of memory");
	uint64_t off = 0;
	rc = 0;
	while (off < st.size) {
		int64_t r = gpunvme_fs_pread(h->fs, ino, buf, CAT_CHUNK, off);
		if (r < 0) {
			rc = cli_lib_err((int)r, "reading %s at byte %" PRIu64, o->path, off);
			break;
		}
		if (r == 0) {
			rc = cli_err(EXIT_RUNTIME, "%s: short read at byte %" PRIu64 " of %" PRIu64, o->path, off,
				     st.size);
			break;
		}
		ssize_t w = cli_write_all(STDOUT_FILENO, buf, (size_t)r);
		if (w < 0) {
			rc = cli_write_err((int)w, "to stdout");
			break;
		}
		off += (uint64_t)r;
	}
	free(buf);
	return rc;
}

static int run(int cmd, int argc, char **argv)
{
	struct fs_opts o = { .cmd = cmd };
	cli_volume_opts_init(&o.vol);
	int rc = parse(argc, argv, &o);
	if (rc)
		return rc < 0 ? 0 : rc;
	if (o.fiemap)
		return do_fiemap(&o);
	struct cli_fs h;
	if ((rc = cli_fs_open(&h, o.uri, NULL, o.image, &o.vol)))
		return rc;
	switch (cmd) {
	case FS_LS: rc = do_ls(&o, &h); break;
	case FS_STAT: rc = do_stat(&o, &h); break;
	case FS_EXTENTS: rc = do_extents(&o, &h); break;
	default: rc = do_cat(&o, &h); break;
	}
	cli_fs_close(&h);
	return rc;
}

int cmd_ls(int argc, char **argv) { return run(FS_LS, argc, argv); }
int cmd_stat(int argc, char **argv) { return run(FS_STAT, argc, argv); }
int cmd_extents(int argc, char **argv) { return run(FS_EXTENTS, argc, argv); }
int cmd_cat(int argc, char **argv) { return run(FS_CAT, argc, argv); }
