/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Shared helpers of the gpunvme command: error reporting with the exit code
 * conventions, number parsing, option parsing around getopt_long, URI
 * checks, opening a controller, and a small streaming JSON writer.
 *
 * Exit codes: 0 success, 1 runtime error (the device, the library, a file),
 * 2 usage error (bad option, bad value, bad URI syntax).
 */
#ifndef GPUNVME_CLI_UTIL_H
#define GPUNVME_CLI_UTIL_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "gpunvme/extents.h"
#include "gpunvme/gpunvme.h"
#include "gpunvme/md.h"
#include "gpunvme/volume.h"

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2
/* The reader of our stdout went away (EPIPE; SIGPIPE is ignored so that a
 * controller is always shut down cleanly): stop quietly with the status a
 * shell shows for a tool that SIGPIPE ended, 128 + 13, as coreutils' do. */
#define EXIT_PIPE 141

/* The subcommand being run ("gpunvme: <cmd>: ..."); NULL at top level. */
extern const char *cli_cmd;

/* One line on stderr: "gpunvme: <cmd>: <message>". Returns code. */
int cli_err(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Usage error: the line above plus a hint to --help; returns EXIT_USAGE. */
int cli_usage_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A library call failed with rc: "<what>: <gpunvme_last_error() or strerror>". */
int cli_lib_err(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- numbers ----------------------------------------------------------- */

/* Parse an unsigned number: decimal or 0x hex; with sizes, an optional
 * K/M/G/T suffix (powers of 1024, "KiB"/"K"/"k" all accepted). Rejects
 * junk, signs, empty strings and overflow. 0 or -EINVAL / -ERANGE. */
int cli_parse_u64(const char *s, bool size_suffix, uint64_t *out);

/* Parse an option value into *out within [min, max]; prints a usage error
 * naming the option on failure and returns EXIT_USAGE, else 0. */
int cli_opt_u64(const char *opt, const char *val, bool size_suffix, uint64_t min, uint64_t max,
		uint64_t *out);
int cli_opt_u32(const char *opt, const char *val, bool size_suffix, uint32_t min, uint32_t max,
		uint32_t *out);

/* "64 MiB", "512 B", "1.5 GiB" */
const char *cli_human_bytes(uint64_t bytes, char *buf, size_t len);

/* ---- option parsing ---------------------------------------------------- */

/* getopt_long with opterr off: on an unknown option or a missing argument
 * prints one usage line and returns -2 (caller returns EXIT_USAGE).
 * main() resets getopt (optind = 0) before each subcommand. */
int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts);

/* After options: exactly one positional URI expected (returns it), or a
 * usage error is printed and NULL returned. */
const char *cli_one_uri(int argc, char **argv);

/* After options: URI and PATH (a model in the volume's file system), the
 * volume options v checked, the URI's syntax too (commands load and
 * experts). 0, or a usage error printed and EXIT_USAGE. */
struct cli_volume_opts;
int cli_uri_model_path(int argc, char **argv, const struct cli_volume_opts *v, const char **uri, const char **path);

/* ---- controllers -------------------------------------------------------- */

/* 1 when uri names an md array ("md:...") */
bool cli_is_md(const char *uri);

/* Checks the URI's syntax (scheme, emulator spec, PCI address) without
 * touching any device. 0, or a usage error printed and EXIT_USAGE. */
int cli_check_uri(const char *uri);

/* cli_check_uri, then gpunvme_open. 0, or the error printed and the exit
 * code returned. opts may be NULL. */
int cli_open(const char *uri, const struct gpunvme_opts *opts, struct gpunvme_ctrl **out);

/* Namespace info for nsid with a clear error naming the active namespaces
 * when nsid is not one of them. 0 or an exit code (message printed). */
int cli_ns(struct gpunvme_ctrl *c, uint32_t nsid, struct gpunvme_ns_info *ni);

/* Refuses an LBA range that does not fit the namespace (before any I/O),
 * naming the namespace size. 0 or EXIT_USAGE. */
int cli_check_range(const struct gpunvme_ns_info *ni, uint64_t slba, uint64_t nlb);

/* An ext4/XFS file system at byte `offset` of an image file (image set) or
 * of namespace nsid of the controller at uri (opened with opts, may be
 * NULL): `ls`, `stat`, `extents`, `cat` and `load` all start here. 0 or an
 * exit code (message printed, nothing left open). */
/* A volume opened for a command (gpunvme_volume_open, volume.h) and the
 * parts the commands use, borrowed from it. */
struct cli_fs {
	struct gpunvme_volume *vol;
	struct gpunvme_ctrl *c;     /* NULL for an image; an md array: member 0's */
	struct gpunvme_blkdev *dev; /* namespace, array or image */
	struct gpunvme_fs *fs;
	struct gpunvme_md_volume *md; /* an md array ("md:URI;URI..."), else NULL */
};
/*
 * Where a command's files are: the volume options every file command takes
 * (ls, stat, extents, cat, load), parsed in one place. Without --offset or
 * --partition the file system is found at byte 0 or in the one partition
 * holding one.
 */
struct cli_volume_opts {
	uint32_t nsid;      /* --nsid N (default 1) */
	uint32_t partition; /* --partition N, 0 = automatic */
	uint64_t offset;    /* --offset BYTES, with have_offset */
	bool have_offset;
};
#define CLI_OPT_OFFSET 0x300
#define CLI_OPT_PARTITION 0x301
#define CLI_VOLUME_LONGOPTS                                                   \
	{ "nsid", required_argument, NULL, 'n' },                             \
	{ "namespace-id", required_argument, NULL, 'n' },                     \
	{ "offset", required_argument, NULL, CLI_OPT_OFFSET },                \
	{ "partition", required_argument, NULL, CLI_OPT_PARTITION }
#define CLI_VOLUME_HELP                                                                     \
	"  -n, --nsid N         namespace (default 1)\n"                                    \
	"      --partition N    the file system in partition N of the GPT or MBR table\n"   \
	"                       (numbered as Linux does: MBR logical partitions from 5)\n" \
	"      --offset BYTES   byte offset of the file system on the namespace or image\n" \
	"                       (K/M/G suffixes). Without either: byte 0 when a file\n"     \
	"                       system starts there, else the one partition holding one\n"
void cli_volume_opts_init(struct cli_volume_opts *v);
/* Option c (from cli_getopt) if it is a volume option: true, and *rc is 0
 * or the usage error's exit code. */
bool cli_volume_opt(int c, const char *arg, struct cli_volume_opts *v, int *rc);
/* After parsing: options that contradict each other (a usage error). */
int cli_volume_check(const struct cli_volume_opts *v);
/* The volume at uri (or the image file) as v says. */
int cli_fs_open(struct cli_fs *h, const char *uri, const struct gpunvme_opts *opts, const char *image,
		const struct cli_volume_opts *v);
void cli_fs_close(struct cli_fs *h);

/* ---- time ---------------------------------------------------------------- */
uint64_t cli_now_ns(void);

/* ---- files ---------------------------------------------------------------- */
/* Write / read all of len bytes (retrying on EINTR and short transfers).
 * Returns bytes moved (read: less than len only at EOF) or -errno. */
ssize_t cli_write_all(int fd, const void *buf, size_t len);
/* A failed write of output `what`: EXIT_PIPE without a message for EPIPE,
 * else the error line and EXIT_RUNTIME. err is -errno. */
int cli_write_err(int err, const char *what);
ssize_t cli_read_full(int fd, void *buf, size_t len);

/* ---- JSON ------------------------------------------------------------------ */

/* A streaming writer with indentation. Keys are ignored inside arrays.
 * Strings are escaped and always valid JSON: one that is not UTF-8 is
 * written as cli_put_name's text and, in an object, followed by
 * "<key>_hex" with its bytes. 64-bit integers are written as numbers. */
struct cli_json {
	FILE *f;
	int depth;
	bool first[32];
	bool in_array[32];
};

/* Length of the valid UTF-8 sequence at p (1..4), 0 if the bytes there are
 * not UTF-8 (RFC 3629). */
size_t cli_utf8_seq(const char *p, size_t n);
/* A name from a file system or a model file, for a terminal: UTF-8 as it
 * is; control bytes and bytes that are not UTF-8 as \xHH; a backslash as
 * \\ (so the escapes are unambiguous). JSON output decodes to the same text
 * for names that are not valid UTF-8. Returns the characters printed (for
 * padding a column). */
size_t cli_put_name(FILE *f, const char *s, size_t n);

void cj_init(struct cli_json *j, FILE *f);
void cj_obj_begin(struct cli_json *j, const char *key);
void cj_obj_end(struct cli_json *j);
void cj_arr_begin(struct cli_json *j, const char *key);
void cj_arr_end(struct cli_json *j);
void cj_str(struct cli_json *j, const char *key, const char *v);
/* String from a fixed-width, space-padded, not NUL-terminated field. */
void cj_strn(struct cli_json *j, const char *key, const char *v, size_t n);
void cj_u64(struct cli_json *j, const char *key, uint64_t v);
void cj_i64(struct cli_json *j, const char *key, int64_t v);
void cj_dbl(struct cli_json *j, const char *key, double v);
void cj_bool(struct cli_json *j, const char *key, bool v);
void cj_null(struct cli_json *j, const char *key);
/* "0x%0*llx" as a string (register values, ids) */
void cj_hex(struct cli_json *j, const char *key, uint64_t v, int width);
/* Ends the document with a newline. */
void cj_finish(struct cli_json *j);

/* Copy a space-padded fixed field into a NUL-terminated, right-trimmed string
 * (out has n + 1 bytes). Non-printable bytes become '.'. */
void cli_fixed_str(char *out, const char *in, size_t n);

/* ---- subcommands ------------------------------------------------------------ */
int cmd_list(int argc, char **argv);
int cmd_id_ctrl(int argc, char **argv);
int cmd_id_ns(int argc, char **argv);
int cmd_show_regs(int argc, char **argv);
int cmd_read(int argc, char **argv);
int cmd_write(int argc, char **argv);
int cmd_perf(int argc, char **argv);

#endif
