/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * md: URIs: "md:MEMBER;MEMBER;..." -> controllers, namespace readers and
 * the assembled array (include/gpunvme/md.h, gpunvme_md_open).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "gpunvme/md.h"

#define MEMBER_MAX 4096

int gpunvme_md_uri(const char *uri)
{
	return uri && !strncmp(uri, "md:", 3);
}

/* One member "URI[#N]": the controller URI into buf and the namespace. */
static int member_split(const char *m, size_t len, char *buf, size_t cap, uint32_t *nsid, uint32_t def_nsid)
{
	const char *hash = memchr(m, '#', len);
	size_t ul = hash ? (size_t)(hash - m) : len;
	*nsid = def_nsid;
	if (hash) {
		size_t nl = len - ul - 1;
		uint64_t v = 0;
		if (nl == 0 || nl > 10)
			return gpunvme_set_error(-EINVAL, "md member '%.*s': '#' is not followed by a namespace number", (int)len, m);
		for (size_t i = 0; i < nl; i++) {
			char ch = hash[1 + i];
			if (ch < '0' || ch > '9')
				return gpunvme_set_error(-EINVAL, "md member '%.*s': '%.*s' is not a namespace number", (int)len,
							 m, (int)nl, hash + 1);
			v = v * 10 + (uint64_t)(ch - '0');
		}
		if (v == 0 || v > 0xfffffffeu)
			return gpunvme_set_error(-EINVAL, "md member '%.*s': '%.*s' is not a namespace number", (int)len, m,
						 (int)nl, hash + 1);
		*nsid = (uint32_t)v;
	}
	if (ul == 0)
		return gpunvme_set_error(-EINVAL, "md member '%.*s' has no device URI before '#'", (int)len, m);
	if (ul >= cap)
		return gpunvme_set_error(-EINVAL, "md member URI too long (%zu bytes)", ul);
	if (ul >= 3 && !strncmp(m, "md:", 3))
		return gpunvme_set_error(-EINVAL, "md member '%.*s' is itself an md array (nested arrays are not supported)",
					 (int)ul, m);
	memcpy(buf, m, ul);
	buf[ul] = 0;
	return 0;
}

/* Calls fn for every member: (index, member text, controller URI, nsid). */
static int each_member(const char *uri, uint32_t def_nsid,
		       int (*fn)(void *arg, size_t i, const char *m, size_t len, const char *curi, uint32_t nsid), void *arg)
{
	if (!gpunvme_md_uri(uri))
		return gpunvme_set_error(-EINVAL, "'%s' is not an md: URI", uri ? uri : "(null)");
	const char *p = uri + 3;
	if (!*p)
		return gpunvme_set_error(-EINVAL, "missing members after 'md:' (e.g. 'md:emu:/a.img;emu:/b.img')");
	char *buf = malloc(MEMBER_MAX);
	if (!buf)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	int rc = 0;
	for (size_t i = 0;; i++) {
		const char *semi = strchr(p, ';');
		size_t len = semi ? (size_t)(semi - p) : strlen(p);
		uint32_t ns;
		if (len == 0) {
			rc = gpunvme_set_error(-EINVAL, "empty member in '%s' (members are separated by one ';')", uri);
			break;
		}
		if (i >= GPUNVME_MD_MAX_MEMBERS) {
			rc = gpunvme_set_error(-EINVAL, "more than %d md members", GPUNVME_MD_MAX_MEMBERS);
			break;
		}
		if ((rc = member_split(p, len, buf, MEMBER_MAX, &ns, def_nsid)))
			break;
		/* the member's own grammar, before anything is opened */
		if ((rc = gpunvme_uri_check(buf)))
			break;
		if (fn && (rc = fn(arg, i, p, len, buf, ns)))
			break;
		if (!semi)
			break;
		p = semi + 1;
	}
	free(buf);
	return rc;
}

int gpunvme_md_uri_check(const char *uri)
{
	return each_member(uri, 1, NULL, NULL);
}

struct open_ctx {
	struct gpunvme_md_volume *v;
	const struct gpunvme_opts *opts;
	uint32_t def_nsid;
	const char *uri;
};

/* How many members name controller URI `curi` (count_ctx.want). */
struct count_ctx {
	const char *want;
	uint32_t n;
};

static int count_member(void *arg, size_t i, const char *m, size_t len, const char *curi, uint32_t ns)
{
	(void)i, (void)m, (void)len, (void)ns;
	struct count_ctx *k = arg;
	k->n += !strcmp(curi, k->want);
	return 0;
}

static int open_member(void *arg, size_t i, const char *m, size_t len, const char *curi, uint32_t ns)
{
	struct open_ctx *o = arg;
	struct gpunvme_md_volume *v = o->v;
	char why[256];
	if (!(v->name[i] = strndup(m, len)))
		return gpunvme_set_error(-ENOMEM, "out of memory");
	v->n = i + 1;
	v->nsid[i] = ns;
	/* the same controller URI again: namespaces of one controller */
	for (size_t k = 0; k < i && !v->c[i]; k++) {
		const char *on = v->name[k];
		const char *oh = strchr(on, '#');
		size_t ol = oh ? (size_t)(oh - on) : strlen(on);
		if (ol == strlen(curi) && !strncmp(on, curi, ol)) {
			if (v->nsid[k] == ns)
				return gpunvme_set_error(-EINVAL, "md members '%s' and '%s' are the same namespace", on,
							 v->name[i]);
			v->c[i] = v->c[k];
		}
	}
	int rc;
	if (!v->c[i]) {
		/* every member's loader takes its own queue pairs: a controller
		 * serving k members is asked for k times the per-member count */
		struct count_ctx k = { curi, 0 };
		if ((rc = each_member(o->uri, o->def_nsid, count_member, &k)))
			return rc;
		struct gpunvme_opts co;
		if (o->opts)
			co = *o->opts;
		else
			gpunvme_opts_init(&co);
		uint64_t q = (uint64_t)co.nr_io_queues * (k.n ? k.n : 1);
		co.nr_io_queues = q > 65535 ? 65535 : (uint32_t)q; /* Number of Queues: 16 bits, 0's based */
		if ((rc = gpunvme_open(curi, &co, &v->c[i]))) {
			snprintf(why, sizeof(why), "%s", gpunvme_last_error());
			return gpunvme_set_error(rc, "md member '%s': %s", v->name[i], why);
		}
		v->owned[v->nowned++] = v->c[i];
	}
	if ((rc = gpunvme_blkdev_open_ns(v->c[i], ns, &v->dev[i]))) {
		snprintf(why, sizeof(why), "%s", gpunvme_last_error());
		return gpunvme_set_error(rc, "md member '%s': namespace %u: %s", v->name[i], ns, why);
	}
	return 0;
}

int gpunvme_md_open(const char *uri, const struct gpunvme_opts *opts, uint32_t nsid, struct gpunvme_md_volume **out)
{
	if (!out)
		return gpunvme_set_error(-EINVAL, "md_open: bad arguments");
	int rc = gpunvme_md_uri_check(uri);
	if (rc)
		return rc;
	struct gpunvme_md_volume *v = calloc(1, sizeof(*v));
	if (!v)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	struct open_ctx o = { v, opts, nsid ? nsid : 1, uri };
	if (!(rc = each_member(uri, o.def_nsid, open_member, &o)) &&
	    !(rc = gpunvme_md_assemble(v->dev, (const char *const *)v->name, v->n, &v->md))) {
		gpunvme_md_blkdev(v->md, &v->array);
		*out = v;
		return 0;
	}
	gpunvme_md_volume_close(v);
	return rc;
}

void gpunvme_md_volume_close(struct gpunvme_md_volume *v)
{
	if (!v)
		return;
	gpunvme_md_close(v->md);
	for (size_t i = 0; i < v->n; i++) {
		if (v->dev[i].close)
			gpunvme_blkdev_close(&v->dev[i]);
		free(v->name[i]);
	}
	for (size_t i = 0; i < v->nowned; i++)
		gpunvme_close(v->owned[i]);
	free(v);
}
