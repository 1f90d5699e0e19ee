/* SPDX-License-Identifier: BSD-2-Clause */
/* gpunvme command: shared helpers (errors, numbers, options, URIs, JSON). */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gpunvme/emu.h"
#include "gpunvme/part.h"
#include "util.h"

const char *cli_cmd;

static void vprefix(const char *fmt, va_list ap)
{
	char msg[1024];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	/* one line: fold any newline a library message might carry */
	for (char *p = msg; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	if (cli_cmd)
		fprintf(stderr, "gpunvme: %s: %s\n", cli_cmd, msg);
	else
		fprintf(stderr, "gpunvme: %s\n", msg);
}

int cli_err(int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vprefix(fmt, ap);
	va_end(ap);
	return code;
}

int cli_usage_err(const char *fmt, ...)
{
	char msg[900];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (cli_cmd)
		return cli_err(EXIT_USAGE, "%s (see 'gpunvme %s --help')", msg, cli_cmd);
	return cli_err(EXIT_USAGE, "%s (see 'gpunvme --help')", msg);
}

int cli_lib_err(int rc, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	const char *le = gpunvme_last_error();
	if (le && *le)
		return cli_err(EXIT_RUNTIME, "%s: %s", msg, le);
	return cli_err(EXIT_RUNTIME, "%s: %s", msg, strerror(rc < 0 ? -rc : rc));
}

/* ---- numbers ----------------------------------------------------------- */

int cli_parse_u64(const char *s, bool size_suffix, uint64_t *out)
{
	if (!s || !*s)
		return -EINVAL;
	const char *p = s;
	unsigned base = 10;
	if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
		base = 16;
		p += 2;
		if (!isxdigit((unsigned char)*p))
			return -EINVAL;
	} else if (!isdigit((unsigned char)*p)) {
		return -EINVAL;  /* signs, spaces, empty */
	}
	uint64_t v = 0;
	bool range = false;
	for (; *p; p++) {
		unsigned d;
		if (isdigit((unsigned char)*p))
			d = (unsigned)(*p - '0');
		else if (base == 16 && isxdigit((unsigned char)*p))
			d = (unsigned)(tolower((unsigned char)*p) - 'a' + 10);
		else
			break;
		if (v > (UINT64_MAX - d) / base)
			range = true;
		else
			v = v * base + d;
	}
	unsigned shift = 0;
	if (*p && size_suffix) {
		switch (*p) {
		case 'k': case 'K': shift = 10; break;
		case 'm': case 'M': shift = 20; break;
		case 'g': case 'G': shift = 30; break;
		case 't': case 'T': shift = 40; break;
		default: return -EINVAL;
		}
		p++;
		if (p[0] == 'i' && p[1] == 'B')
			p += 2;
		else if (p[0] == 'B')
			p++;
	}
	if (*p)
		return -EINVAL;
	if (range || (shift && v > (UINT64_MAX >> shift)))
		return -ERANGE;
	*out = v << shift;
	return 0;
}

int cli_opt_u64(const char *opt, const char *val, bool size_suffix, uint64_t min, uint64_t max,
		uint64_t *out)
{
	uint64_t v;
	int rc = cli_parse_u64(val, size_suffix, &v);
	const char *what = size_suffix ? "a number (decimal, 0x hex, K/M/G suffix)"
				       : "a number (decimal or 0x hex)";
	if (rc == -ERANGE)
		return cli_usage_err("%s '%s': value too large (at most %" PRIu64 ")", opt, val, max);
	if (rc)
		return cli_usage_err("%s '%s': not %s", opt, val, what);
	if (v < min || v > max) {
		if (v == 0 && min > 0)
			return cli_usage_err("%s '%s': must be at least %" PRIu64, opt, val, min);
		return cli_usage_err("%s '%s': out of range (%" PRIu64 "..%" PRIu64 ")", opt, val, min,
				     max);
	}
	*out = v;
	return 0;
}

int cli_opt_u32(const char *opt, const char *val, bool size_suffix, uint32_t min, uint32_t max,
		uint32_t *out)
{
	uint64_t v = 0; /* gcc 13 -O3 cannot see that rc == 0 sets it */
	int rc = cli_opt_u64(opt, val, size_suffix, min, max, &v);
	if (rc)
		return rc;
	*out = (uint32_t)v;
	return 0;
}

const char *cli_human_bytes(uint64_t b, char *buf, size_t len)
{
	static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	unsigned u = 0;
	double v = (double)b;
	while (v >= 1024.0 && u < 6) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", b);
	else if (v == (double)(uint64_t)v)
		snprintf(buf, len, "%" PRIu64 " %s", (uint64_t)v, unit[u]);
	else
		snprintf(buf, len, "%.2f %s", v, unit[u]);
	return buf;
}

/* ---- options ------------------------------------------------------------- */

int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts)
{
	char so[128];
	snprintf(so, sizeof(so), ":%s", shortopts);  /* ':' -> missing values reported as ':' */
	opterr = 0;
	int idx = -1;
	int c = getopt_long(argc, argv, so, longopts, &idx);
	if (c != '?' && c != ':')
		return c;
	const char *arg = (optind > 0 && optind <= argc) ? argv[optind - 1] : NULL;
	if (c == ':') {
		if (arg && arg[0] == '-' && arg[1] == '-')
			cli_usage_err("option '%s' needs a value", arg);
		else
			cli_usage_err("option '-%c' needs a value", optopt);
		return -2;
	}
	if (arg && arg[0] == '-' && arg[1] == '-') {
		const char *eq = strchr(arg, '=');
		size_t n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
		for (const struct option *o = longopts; o && o->name; o++)
			if (eq && strlen(o->name) == n && !strncmp(o->name, arg + 2, n)) {
				cli_usage_err("option '--%s' takes no value", o->name);
				return -2;
			}
		cli_usage_err("unknown option '%.*s'", (int)(n + 2), arg);
	} else if (optopt) {
		cli_usage_err("unknown option '-%c'", optopt);
	} else {
		cli_usage_err("unknown option '%s'", arg ? arg : "?");
	}
	return -2;
}

const char *cli_one_uri(int argc, char **argv)
{
	if (optind >= argc) {
		cli_usage_err("missing device URI (e.g. emu:ram:64M, vfio:0000:01:00.0)");
		return NULL;
	}
	if (optind + 1 < argc) {
		cli_usage_err("unexpected argument '%s' (only one device URI)", argv[optind + 1]);
		return NULL;
	}
	return argv[optind];
}

int cli_uri_model_path(int argc, char **argv, const struct cli_volume_opts *v, const char **uri, const char **path)
{
	int npos = argc - optind, rc;
	if (npos < 1)
		return cli_usage_err("missing device URI (e.g. emu:/path/disk.img)");
	if (npos < 2)
		return cli_usage_err("missing PATH (the model file or directory in the file system, e.g. /models/m.safetensors)");
	if (npos > 2)
		return cli_usage_err("unexpected argument '%s'", argv[optind + 2]);
	if ((rc = cli_volume_check(v)))
		return rc;
	*uri = argv[optind];
	*path = argv[optind + 1];
	struct stat sb;
	if (!strchr(*uri, ':') && stat(*uri, &sb) == 0)
		return cli_usage_err("'%s' is a file, not a device URI: use emu:%s", *uri, *uri);
	return cli_check_uri(*uri);
}

/* ---- URIs ------------------------------------------------------------------ */

bool cli_is_md(const char *uri)
{
	return uri && !strncmp(uri, "md:", 3);
}

int cli_check_uri(const char *uri)
{
	/* the library's grammar (gpunvme_uri_check); a typo is a usage error */
	if (gpunvme_uri_check(uri))
		return cli_usage_err("%s", gpunvme_last_error());
	return 0;
}

int cli_open(const char *uri, const struct gpunvme_opts *opts, struct gpunvme_ctrl **out)
{
	int rc = cli_check_uri(uri);
	if (rc)
		return rc;
	if (cli_is_md(uri))
		return cli_err(EXIT_USAGE, "'%s' is an md array: this command takes one controller (ls, stat, extents, "
					   "cat and load read arrays)",
			       uri);
	rc = gpunvme_open(uri, opts, out);
	if (rc < 0 || !*out)
		return cli_lib_err(rc ? rc : -EIO, "cannot open '%s'", uri);
	return 0;
}

int cli_ns(struct gpunvme_ctrl *c, uint32_t nsid, struct gpunvme_ns_info *ni)
{
	/* the library's message names the active namespaces */
	if (gpunvme_ns_info(c, nsid, ni))
		return cli_err(EXIT_RUNTIME, "--nsid %u: %s", nsid, gpunvme_last_error());
	return 0;
}

int cli_check_range(const struct gpunvme_ns_info *ni, uint64_t slba, uint64_t nlb)
{
	char h[32];
	if (nlb == 0)
		return cli_usage_err("--nlb must be at least 1");
	if (slba >= ni->nsze || nlb > ni->nsze - slba)
		/* start and count, not an end LBA: slba + nlb may not fit 64 bits */
		return cli_err(EXIT_USAGE, "%" PRIu64 " blocks at LBA %" PRIu64 " run past the end of namespace "
				     "%u, which holds %" PRIu64 " blocks of %u bytes (%s; last LBA %" PRIu64
				     ")",
				     nlb, slba, ni->nsid,
				     ni->nsze, ni->lba_size,
				     cli_human_bytes(ni->nsze * (uint64_t)ni->lba_size, h, sizeof(h)),
				     ni->nsze ? ni->nsze - 1 : 0);
	return 0;
}

uint64_t cli_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int cli_write_err(int err, const char *what)
{
	if (err == -EPIPE)
		return EXIT_PIPE;
	return cli_err(EXIT_RUNTIME, "writing %s: %s", what, strerror(-err));
}

ssize_t cli_write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	size_t done = 0;
	while (done < len) {
		ssize_t n = write(fd, p + done, len - done);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		done += (size_t)n;
	}
	return (ssize_t)done;
}

ssize_t cli_read_full(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;
	size_t done = 0;
	while (done < len) {
		ssize_t n = read(fd, p + done, len - done);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

void cli_fixed_str(char *out, const char *in, size_t n)
{
	size_t i;
	for (i = 0; i < n && in[i]; i++)
		out[i] = isprint((unsigned char)in[i]) ? in[i] : '.';
	while (i > 0 && out[i - 1] == ' ')
		i--;
	out[i] = 0;
}

/* ---- JSON ------------------------------------------------------------------ */

void cj_init(struct cli_json *j, FILE *f)
{
	memset(j, 0, sizeof(*j));
	j->f = f;
	j->first[0] = true;
}

static void cj_indent(struct cli_json *j)
{
	for (int i = 0; i < j->depth; i++)
		fputs("  ", j->f);
}

size_t cli_utf8_seq(const char *p, size_t n)
{
	const unsigned char *s = (const unsigned char *)p;
	uint32_t cp, min;
	size_t len;
	if (n == 0)
		return 0;
	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2, cp = s[0] & 0x1fu, min = 0x80;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, cp = s[0] & 0x0fu, min = 0x800;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, cp = s[0] & 0x07u, min = 0x10000;
	else
		return 0; /* continuation byte, 0xc0/0xc1 (overlong) or past U+10FFFF */
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3fu);
	}
	/* RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF */
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

static bool utf8_valid(const char *s, size_t n)
{
	for (size_t i = 0, k; i < n; i += k)
		if ((k = cli_utf8_seq(s + i, n - i)) == 0)
			return false;
	return true;
}

/* How cli_put_name shows the bytes at s[i]: *k of them as they are, or
 * (returns true) the one byte s[i] as \xHH. */
static bool name_byte_escaped(const char *s, size_t i, size_t n, size_t *k)
{
	unsigned char ch = (unsigned char)s[i];
	*k = cli_utf8_seq(s + i, n - i);
	if (*k == 0 || ch < 0x20 || ch == 0x7f) {
		*k = 1;
		return true;
	}
	return false;
}

size_t cli_put_name(FILE *f, const char *s, size_t n)
{
	size_t cols = 0;
	for (size_t i = 0, k = 1; i < n; i += k) {
		if (name_byte_escaped(s, i, n, &k)) {
			fprintf(f, "\\x%02x", (unsigned char)s[i]);
			cols += 4;
		} else if (s[i] == '\\') {
			fputs("\\\\", f); /* so that \xHH above is unambiguous */
			cols += 2;
		} else {
			fwrite(s + i, 1, k, f);
			cols++;
		}
	}
	return cols;
}

/*
 * A JSON string is Unicode: valid UTF-8 goes out as it is (control bytes
 * as \u00XX). A string with bytes that are not UTF-8 (file and tensor
 * names are bytes) cannot be: it is written as the text cli_put_name
 * prints (each such byte and each control byte as \xHH, each backslash
 * doubled), so its decoded value is exactly what `ls` shows, and cj_str
 * adds the bytes themselves in hex (a valid name can read the same).
 */
static void cj_escape(FILE *f, const char *s, size_t n)
{
	n = strnlen(s, n);
	bool raw = !utf8_valid(s, n);
	fputc('"', f);
	for (size_t i = 0, k = 1; i < n; i += k) {
		unsigned char ch = (unsigned char)s[i];
		if (raw && name_byte_escaped(s, i, n, &k)) {
			fprintf(f, "\\\\x%02x", ch);
			continue;
		}
		if (k > 1) { /* a whole valid multi-byte sequence */
			fwrite(s + i, 1, k, f);
			continue;
		}
		switch (ch) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs(raw ? "\\\\\\\\" : "\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\t': fputs("\\t", f); break;
		case '\r': fputs("\\r", f); break;
		default:
			if (ch < 0x20 || ch == 0x7f)
				fprintf(f, "\\u%04x", ch);
			else
				fputc(ch, f);
		}
	}
	fputc('"', f);
}

/* separator, indentation and the key */
static void cj_key(struct cli_json *j, const char *key)
{
	if (j->depth == 0) {
		j->first[0] = false;
		return;
	}
	if (!j->first[j->depth])
		fputc(',', j->f);
	fputc('\n', j->f);
	j->first[j->depth] = false;
	cj_indent(j);
	if (!j->in_array[j->depth] && key) {
		cj_escape(j->f, key, SIZE_MAX);
		fputs(": ", j->f);
	}
}

static void cj_open(struct cli_json *j, const char *key, char ch, bool arr)
{
	cj_key(j, key);
	fputc(ch, j->f);
	if (j->depth < 31)
		j->depth++;
	j->first[j->depth] = true;
	j->in_array[j->depth] = arr;
}

static void cj_close(struct cli_json *j, char ch)
{
	bool empty = j->first[j->depth];
	if (j->depth > 0)
		j->depth--;
	if (!empty) {
		fputc('\n', j->f);
		cj_indent(j);
	}
	fputc(ch, j->f);
}

void cj_obj_begin(struct cli_json *j, const char *key) { cj_open(j, key, '{', false); }
void cj_obj_end(struct cli_json *j) { cj_close(j, '}'); }
void cj_arr_begin(struct cli_json *j, const char *key) { cj_open(j, key, '[', true); }
void cj_arr_end(struct cli_json *j) { cj_close(j, ']'); }

void cj_str(struct cli_json *j, const char *key, const char *v)
{
	v = v ? v : "";
	cj_key(j, key);
	cj_escape(j->f, v, SIZE_MAX);
	size_t n = strlen(v);
	if (!key || j->depth == 0 || j->in_array[j->depth] || utf8_valid(v, n))
		return;
	/* the escaped text of a name that is not UTF-8 can equal a valid
	 * name ("caf\xe9" typed with a backslash): the bytes settle it */
	char k2[128];
	snprintf(k2, sizeof(k2), "%s_hex", key);
	cj_key(j, k2);
	fputc('"', j->f);
	for (size_t i = 0; i < n; i++)
		fprintf(j->f, "%02x", (unsigned char)v[i]);
	fputc('"', j->f);
}

void cj_strn(struct cli_json *j, const char *key, const char *v, size_t n)
{
	char buf[1024];
	if (n >= sizeof(buf))
		n = sizeof(buf) - 1;
	cli_fixed_str(buf, v, n);
	cj_str(j, key, buf);
}

void cj_u64(struct cli_json *j, const char *key, uint64_t v)
{
	cj_key(j, key);
	fprintf(j->f, "%" PRIu64, v);
}

void cj_i64(struct cli_json *j, const char *key, int64_t v)
{
	cj_key(j, key);
	fprintf(j->f, "%" PRId64, v);
}

void cj_dbl(struct cli_json *j, const char *key, double v)
{
	cj_key(j, key);
	if (v != v || v > 1e300 || v < -1e300)
		fputs("null", j->f);
	else
		fprintf(j->f, "%.3f", v);
}

void cj_bool(struct cli_json *j, const char *key, bool v)
{
	cj_key(j, key);
	fputs(v ? "true" : "false", j->f);
}

void cj_null(struct cli_json *j, const char *key)
{
	cj_key(j, key);
	fputs("null", j->f);
}

void cj_hex(struct cli_json *j, const char *key, uint64_t v, int width)
{
	char buf[32];
	snprintf(buf, sizeof(buf), "0x%0*" PRIx64, width, v);
	cj_str(j, key, buf);
}

void cj_finish(struct cli_json *j)
{
	fputc('\n', j->f);
	fflush(j->f);
}

/* ---- file systems ------------------------------------------------------------ */

void cli_fs_close(struct cli_fs *h)
{
	gpunvme_volume_close(h->vol);
	memset(h, 0, sizeof(*h));
}

void cli_volume_opts_init(struct cli_volume_opts *v)
{
	memset(v, 0, sizeof(*v));
	v->nsid = 1;
}

bool cli_volume_opt(int c, const char *arg, struct cli_volume_opts *v, int *rc)
{
	switch (c) {
	case 'n':
		*rc = cli_opt_u32("--nsid", arg, false, 1, 0xfffffffe, &v->nsid);
		return true;
	case CLI_OPT_OFFSET:
		*rc = cli_opt_u64("--offset", arg, true, 0, UINT64_MAX - 1, &v->offset);
		v->have_offset = true;
		return true;
	case CLI_OPT_PARTITION:
		*rc = cli_opt_u32("--partition", arg, false, 1, 1u << 20, &v->partition);
		return true;
	default:
		return false;
	}
}

int cli_volume_check(const struct cli_volume_opts *v)
{
	if (v->have_offset && v->partition)
		return cli_usage_err("--offset and --partition both say where the file system is: give one");
	return 0;
}

int cli_fs_open(struct cli_fs *h, const char *uri, const struct gpunvme_opts *opts, const char *image,
		const struct cli_volume_opts *v)
{
	const uint32_t nsid = v->nsid, partno = v->partition;
	const uint64_t offset = v->have_offset ? v->offset : GPUNVME_VOLUME_LOCATE;
	memset(h, 0, sizeof(*h));
	/* the grammar first: a typo is a usage error (exit 2), not a failure
	 * to open */
	int rc = image ? 0 : cli_check_uri(uri);
	if (rc)
		return rc;
	struct gpunvme_volume_opts o;
	gpunvme_volume_opts_init(&o);
	o.ctrl = opts;
	o.nsid = nsid;
	o.offset = offset;
	o.partition = partno;
	if ((rc = gpunvme_volume_open(uri, image, &o, &h->vol))) {
		/* an offset past the end is the user's number: a usage error */
		if (rc == -ERANGE && v->have_offset)
			return cli_err(EXIT_USAGE, "--%s", gpunvme_last_error());
		if (partno && strstr(gpunvme_last_error(), "choose another partition"))
			return cli_err(EXIT_RUNTIME, "%s with --partition N", gpunvme_last_error());
		return cli_err(EXIT_RUNTIME, "%s", *gpunvme_last_error() ? gpunvme_last_error() : strerror(-rc));
	}
	/* the table was read from its backup: worth knowing, not fatal */
	if (!strncmp(gpunvme_last_error(), "note: ", 6))
		fprintf(stderr, "gpunvme: %s\n", gpunvme_last_error());
	h->dev = gpunvme_volume_blkdev(h->vol);
	h->fs = gpunvme_volume_fs(h->vol);
	h->md = gpunvme_volume_md(h->vol);
	h->c = h->md ? h->md->c[0] : gpunvme_volume_ctrl(h->vol, 0);
	return 0;
}
