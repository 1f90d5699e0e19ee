/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The fabrics controller (NVMe-oF 1.1): tcp:// URIs, the host's identity,
 * the admin queue's association (Connect, then CC.EN by Property Set,
 * §3.5 / NVMe 1.4 §7.6.1), keep-alive (NVMe 1.4 §5.25, §7.12: KATO), and
 * the discovery log page (NVMe-oF 1.1 §5.3).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "gpunvme/fabrics.h"
#include "gpunvme/gpunvme.h"
#include "nvmf/nvmf.h"
#include "nvmf/pdu.h"

/* ---- URI ------------------------------------------------------------------------------- */

static int hexval(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* 32 hex digits, dashes anywhere (a UUID or a machine-id). */
static int parse_uuid(const char *s, size_t n, uint8_t out[16])
{
	uint32_t k = 0;
	for (size_t i = 0; i < n && s[i] && s[i] != '\n'; i++) {
		if (s[i] == '-')
			continue;
		int v = hexval((unsigned char)s[i]);
		if (v < 0 || k >= 32)
			return -EINVAL;
		out[k / 2] = (uint8_t)(k & 1 ? (out[k / 2] | v) : (v << 4));
		k++;
	}
	return k == 32 ? 0 : -EINVAL;
}

static void uuid_str(const uint8_t u[16], char out[37])
{
	snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
		 u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

static int read_line(const char *path, char *buf, size_t n)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -ENOENT;
	char *r = fgets(buf, (int)n, f);
	fclose(f);
	if (!r)
		return -EIO;
	buf[strcspn(buf, "\r\n")] = 0;
	return buf[0] ? 0 : -EIO;
}

static bool nqn_ok(const char *s)
{
	/* NVMe 1.4 §7.9: "nqn." form, at most 223 bytes, printable */
	size_t n = strlen(s);
	if (n < 5 || n > NVMF_NQN_MAX || strncmp(s, "nqn.", 4))
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
			return false;
	return true;
}

static int opt_u32(const char *uri, const char *k, const char *v, uint32_t lo, uint32_t hi, uint32_t *out)
{
	char *end;
	unsigned long x = strtoul(v, &end, 10);
	if (!*v || *end || x < lo || x > hi)
		return gpunvme_set_error(-EINVAL, "%s: option %s=%s: expected a number %u..%u", uri, k, v, lo, hi);
	*out = (uint32_t)x;
	return 0;
}

int nvmf_parse_uri(const char *uri, bool need_nqn, struct nvmf_params *p)
{
	memset(p, 0, sizeof(*p));
	p->timeout_ms = 5000;
	p->kato_ms = 5000; /* Linux's default keep-alive (NVME_DEFAULT_KATO) */
	const char *u = uri;
	if (strncmp(u, "tcp://", 6))
		return gpunvme_set_error(-EINVAL, "%s: expected tcp://HOST:PORT/SUBNQN", uri);
	u += 6;
	const char *hs = u, *he;
	if (*u == '[') {
		hs = u + 1;
		he = strchr(hs, ']');
		if (!he)
			return gpunvme_set_error(-EINVAL, "%s: unterminated [IPv6 address]", uri);
		u = he + 1;
	} else {
		he = u + strcspn(u, ":/?");
		u = he;
	}
	if (he == hs || (size_t)(he - hs) >= sizeof(p->host))
		return gpunvme_set_error(-EINVAL, "%s: missing host (tcp://HOST:PORT/SUBNQN)", uri);
	memcpy(p->host, hs, (size_t)(he - hs));
	if (*u == ':') {
		u++;
		size_t n = strcspn(u, "/?");
		char port[8] = { 0 };
		if (n == 0 || n >= sizeof(port))
			return gpunvme_set_error(-EINVAL, "%s: bad port", uri);
		memcpy(port, u, n);
		uint32_t pv = 0;
		if (opt_u32(uri, "port", port, 1, 65535, &pv))
			return -EINVAL;
		snprintf(p->port, sizeof(p->port), "%u", pv);
		u += n;
	} else {
		snprintf(p->port, sizeof(p->port), "4420"); /* the IANA NVMe/TCP port */
	}
	if (*u == '/') {
		u++;
		size_t n = strcspn(u, "?");
		if (n > NVMF_NQN_MAX)
			return gpunvme_set_error(-EINVAL, "%s: subsystem NQN longer than %u bytes", uri, NVMF_NQN_MAX);
		memcpy(p->subnqn, u, n);
		u += n;
	}
	if (p->subnqn[0] && !nqn_ok(p->subnqn))
		return gpunvme_set_error(-EINVAL, "%s: '%s' is not an NQN (nqn.yyyy-mm.reverse.domain:name)", uri, p->subnqn);
	if (!p->subnqn[0]) {
		if (need_nqn)
			return gpunvme_set_error(-EINVAL, "%s: no subsystem NQN (tcp://HOST:PORT/SUBNQN; list them with: "
							  "gpunvme discover tcp://%s:%s)", uri, p->host, p->port);
		snprintf(p->subnqn, sizeof(p->subnqn), "%s", NVMF_DISC_NQN);
	}
	bool have_id = false;
	if (*u == '?') {
		u++;
		while (*u) {
			size_t n = strcspn(u, "&");
			char kv[300];
			if (n >= sizeof(kv))
				return gpunvme_set_error(-EINVAL, "%s: option too long", uri);
			memcpy(kv, u, n);
			kv[n] = 0;
			u += n + (u[n] == '&');
			char *v = strchr(kv, '=');
			if (!v)
				return gpunvme_set_error(-EINVAL, "%s: option '%s' without =VALUE", uri, kv);
			*v++ = 0;
			uint32_t x = 0;
			int rc = 0;
			if (!strcmp(kv, "hostnqn")) {
				if (!nqn_ok(v))
					return gpunvme_set_error(-EINVAL, "%s: hostnqn '%s' is not an NQN of at most %u bytes", uri, v,
								 NVMF_NQN_MAX);
				memcpy(p->hostnqn, v, strlen(v) + 1); /* nqn_ok: at most 223 bytes */
			} else if (!strcmp(kv, "hostid")) {
				if (parse_uuid(v, strlen(v), p->hostid))
					return gpunvme_set_error(-EINVAL, "%s: hostid '%s' is not a UUID", uri, v);
				have_id = true;
			} else if (!strcmp(kv, "hdgst") || !strcmp(kv, "ddgst")) {
				if ((rc = opt_u32(uri, kv, v, 0, 1, &x)))
					return rc;
				if (kv[0] == 'h')
					p->hdgst = x;
				else
					p->ddgst = x;
			} else if (!strcmp(kv, "kato")) {
				if ((rc = opt_u32(uri, kv, v, 0, 3600000, &p->kato_ms)))
					return rc;
			} else if (!strcmp(kv, "timeout")) {
				if ((rc = opt_u32(uri, kv, v, 10, 600000, &p->timeout_ms)))
					return rc;
			} else if (!strcmp(kv, "nr_io_queues")) {
				if ((rc = opt_u32(uri, kv, v, 1, 65535, &p->nr_io_queues)))
					return rc;
			} else if (!strcmp(kv, "queue_size")) {
				if ((rc = opt_u32(uri, kv, v, 2, 1024, &p->queue_size)))
					return rc;
			} else {
				return gpunvme_set_error(-EINVAL, "%s: unknown option '%s' (known: hostnqn, hostid, hdgst, ddgst, "
								  "kato, timeout, nr_io_queues, queue_size)", uri, kv);
			}
		}
	}
	/* the host's identity: what nvme-cli uses, so that a target's
	 * allowed_hosts list written for the kernel host admits us too */
	char line[300];
	if (!have_id && read_line("/etc/nvme/hostid", line, sizeof(line)) == 0 &&
	    parse_uuid(line, strlen(line), p->hostid) == 0)
		have_id = true;
	if (!have_id && read_line("/etc/machine-id", line, sizeof(line)) == 0 &&
	    parse_uuid(line, strlen(line), p->hostid) == 0) {
		p->hostid[6] = (uint8_t)((p->hostid[6] & 0x0f) | 0x40); /* as a version 4 UUID */
		p->hostid[8] = (uint8_t)((p->hostid[8] & 0x3f) | 0x80);
		have_id = true;
	}
	if (!have_id) {
		/* no identity on this machine: a random one for this process,
		 * never the all-zero ID every such host would share */
		FILE *f = fopen("/dev/urandom", "r");
		if (!f || fread(p->hostid, 1, 16, f) != 16) {
			if (f)
				fclose(f);
			return gpunvme_set_error(-EIO, "%s: no host ID (no /etc/nvme/hostid, /etc/machine-id or "
							"/dev/urandom); give hostid=UUID", uri);
		}
		fclose(f);
		p->hostid[6] = (uint8_t)((p->hostid[6] & 0x0f) | 0x40);
		p->hostid[8] = (uint8_t)((p->hostid[8] & 0x3f) | 0x80);
	}
	if (!p->hostnqn[0]) {
		if (read_line("/etc/nvme/hostnqn", line, sizeof(line)) == 0 && nqn_ok(line)) {
			memcpy(p->hostnqn, line, strlen(line) + 1); /* nqn_ok: at most 223 bytes */
		} else {
			char s[37];
			uuid_str(p->hostid, s);
			/* NVMe 1.4 §7.9: the UUID-based NQN form */
			snprintf(p->hostnqn, sizeof(p->hostnqn), "nqn.2014-08.org.nvmexpress:uuid:%s", s);
		}
	}
	int n = snprintf(p->uri, sizeof(p->uri), "tcp://%s%s%s:%s/%s", strchr(p->host, ':') ? "[" : "", p->host,
			 strchr(p->host, ':') ? "]" : "", p->port, p->subnqn);
	if (n < 0 || (size_t)n >= sizeof(p->uri))
		p->uri[sizeof(p->uri) - 1] = 0;
	return 0;
}

/* ---- properties --------------------------------------------------------------------------- */

static int prop_get(struct nvmf_ctrl *fc, uint32_t off, uint32_t size, uint64_t *val)
{
	struct gpunvme_sqe cmd = { .opc = 0x7f };
	uint8_t *b = (uint8_t *)&cmd;
	b[4] = 0x04;                      /* FCTYPE Property Get */
	b[40] = size == 8 ? 1 : 0;        /* ATTRIB: size 4 or 8 bytes */
	nvmf_put32(b + 44, off);
	struct gpunvme_cqe e = { 0 };
	int rc = nvmf_queue_exec(fc->admin, &cmd, NULL, 0, NVMF_DIR_NONE, &e, fc->p.timeout_ms);
	if (rc)
		return rc;
	*val = (uint64_t)e.dw0 | (size == 8 ? (uint64_t)e.dw1 << 32 : 0);
	return 0;
}

static int prop_set(struct nvmf_ctrl *fc, uint32_t off, uint32_t size, uint64_t val)
{
	struct gpunvme_sqe cmd = { .opc = 0x7f };
	uint8_t *b = (uint8_t *)&cmd;
	b[4] = 0x00;                      /* FCTYPE Property Set */
	b[40] = size == 8 ? 1 : 0;
	nvmf_put32(b + 44, off);
	nvmf_put32(b + 48, (uint32_t)val);
	nvmf_put32(b + 52, (uint32_t)(val >> 32));
	return nvmf_queue_exec(fc->admin, &cmd, NULL, 0, NVMF_DIR_NONE, NULL, fc->p.timeout_ms);
}

int nvmf_prop_get(struct nvmf_ctrl *fc, uint32_t off, uint32_t size, uint64_t *val)
{
	pthread_mutex_lock(&fc->ka_lock);
	int rc = prop_get(fc, off, size, val);
	pthread_mutex_unlock(&fc->ka_lock);
	return rc;
}

int nvmf_prop_set(struct nvmf_ctrl *fc, uint32_t off, uint32_t size, uint64_t val)
{
	pthread_mutex_lock(&fc->ka_lock);
	int rc = prop_set(fc, off, size, val);
	pthread_mutex_unlock(&fc->ka_lock);
	return rc;
}

static void sleep_ms(uint32_t ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
	nanosleep(&ts, NULL);
}

/* CC.EN = 1, CSTS.RDY within CAP.TO (500 ms units, NVMe 1.4 §3.1.1). */
static int enable(struct nvmf_ctrl *fc)
{
	int rc;
	uint64_t v;
	if ((rc = prop_get(fc, GPUNVME_REG_CAP, 8, &fc->cap)))
		return rc;
	if ((rc = prop_get(fc, GPUNVME_REG_VS, 4, &v)))
		return rc;
	fc->vs = (uint32_t)v;
	/* MPS 4 KiB: fabrics ignore it for data (SGLs), but CC must hold a
	 * valid value; 64-byte SQEs, 16-byte CQEs */
	fc->cc = GPUNVME_CC_EN | (6u << GPUNVME_CC_IOSQES_SHIFT) | (4u << GPUNVME_CC_IOCQES_SHIFT);
	if ((rc = prop_set(fc, GPUNVME_REG_CC, 4, fc->cc)))
		return rc;
	uint64_t to_ms = (uint64_t)(gpunvme_cap_to(fc->cap) ? gpunvme_cap_to(fc->cap) : 1) * 500;
	uint64_t deadline = gpunvme_now_ns() + to_ms * 1000000ull;
	for (;;) {
		if ((rc = prop_get(fc, GPUNVME_REG_CSTS, 4, &v)))
			return rc;
		if (v & GPUNVME_CSTS_CFS)
			return gpunvme_set_error(-EIO, "%s: controller fatal status (CSTS.CFS) while enabling", fc->p.uri);
		if (v & GPUNVME_CSTS_RDY)
			return 0;
		if (gpunvme_now_ns() > deadline)
			return gpunvme_set_error(-ETIMEDOUT, "%s: CSTS.RDY not set within CAP.TO (%llu ms)", fc->p.uri,
						 (unsigned long long)to_ms);
		sleep_ms(1);
	}
}

/* ---- keep-alive -------------------------------------------------------------------------------- */

static void *ka_main(void *arg)
{
	struct nvmf_ctrl *fc = arg;
	pthread_mutex_lock(&fc->ka_lock);
	while (!fc->ka_stop) {
		/* every KATO / 2: a late keep-alive still arrives before
		 * the controller's timer (KATO plus its own slack) fires */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)(fc->kato_ms / 2) * 1000000ull;
		ts.tv_sec += (time_t)(ns / 1000000000ull);
		ts.tv_nsec = (long)(ns % 1000000000ull);
		pthread_cond_timedwait(&fc->ka_cond, &fc->ka_lock, &ts);
		if (fc->ka_stop)
			break;
		if (nvmf_queue_dead(fc->admin))
			continue;
		struct gpunvme_sqe cmd = { .opc = GPUNVME_ADM_KEEP_ALIVE };
		int rc = nvmf_queue_exec(fc->admin, &cmd, NULL, 0, NVMF_DIR_NONE, NULL, fc->kato_ms);
		if (rc)
			fc->ka_err = rc;
	}
	pthread_mutex_unlock(&fc->ka_lock);
	return NULL;
}

static int associate(struct nvmf_ctrl *fc, uint32_t admin_depth)
{
	int rc;
	if (fc->admin)
		rc = nvmf_queue_reconnect(fc->admin, 0xffff);
	else
		rc = nvmf_queue_open(&fc->p, 0, admin_depth, 0xffff, fc->kato_ms, 0, &fc->admin, &fc->cntlid);
	if (rc)
		return rc;
	return enable(fc);
}

int nvmf_ctrl_connect(struct nvmf_ctrl *fc, const struct nvmf_params *p, uint32_t admin_depth)
{
	memset(fc, 0, sizeof(*fc));
	fc->p = *p;
	/* the discovery controller needs no keep-alive unless asked for one
	 * (NVMe-oF 1.1 §5.3: KATO may be 0 on a discovery association) */
	fc->kato_ms = p->kato_ms;
	pthread_mutex_init(&fc->ka_lock, NULL);
	pthread_cond_init(&fc->ka_cond, NULL);
	if (admin_depth < 2)
		admin_depth = 2;
	if (admin_depth > 32) /* Linux's nvmet caps the admin queue at 32 entries */
		admin_depth = 32;
	int rc = associate(fc, admin_depth);
	if (rc) {
		char msg[512];
		snprintf(msg, sizeof(msg), "%s", gpunvme_last_error());
		nvmf_queue_close(fc->admin);
		fc->admin = NULL;
		pthread_mutex_destroy(&fc->ka_lock);
		pthread_cond_destroy(&fc->ka_cond);
		return gpunvme_set_error(rc, "%s", msg);
	}
	if (fc->kato_ms && pthread_create(&fc->ka_thread, NULL, ka_main, fc) == 0)
		fc->ka_running = true;
	return 0;
}

void nvmf_ctrl_set_identify(struct nvmf_ctrl *fc, const struct gpunvme_id_ctrl *id)
{
	/* IOCCSZ (bytes 1795:1792) counts 16-byte units of the whole capsule,
	 * the 64-byte SQE included (NVMe 1.4 Figure 247) */
	uint32_t ioccsz = nvmf_get32(id->nvmof);
	fc->ioccsz = ioccsz > 4 ? (ioccsz - 4) * 16 : 0;
}

void nvmf_ctrl_disconnect(struct nvmf_ctrl *fc)
{
	if (!fc->admin)
		return;
	if (fc->ka_running) {
		pthread_mutex_lock(&fc->ka_lock);
		fc->ka_stop = true;
		pthread_cond_signal(&fc->ka_cond);
		pthread_mutex_unlock(&fc->ka_lock);
		pthread_join(fc->ka_thread, NULL);
		fc->ka_running = false;
	}
	if (!nvmf_queue_dead(fc->admin)) {
		/* NVMe 1.4 §7.6.2 normal shutdown, bounded by 2 s: the
		 * association ends when the admin connection closes anyway */
		if (prop_set(fc, GPUNVME_REG_CC, 4, (fc->cc & ~GPUNVME_CC_SHN_MASK) |
							    (GPUNVME_CC_SHN_NORMAL << GPUNVME_CC_SHN_SHIFT)) == 0) {
			uint64_t deadline = gpunvme_now_ns() + 2000000000ull;
			uint64_t v;
			while (gpunvme_now_ns() < deadline && prop_get(fc, GPUNVME_REG_CSTS, 4, &v) == 0 &&
			       gpunvme_csts_shst((uint32_t)v) != GPUNVME_SHST_COMPLETE)
				sleep_ms(1);
		}
	}
	nvmf_queue_close(fc->admin);
	fc->admin = NULL;
	pthread_mutex_destroy(&fc->ka_lock);
	pthread_cond_destroy(&fc->ka_cond);
}

int nvmf_ctrl_admin(struct nvmf_ctrl *fc, struct gpunvme_sqe *cmd, void *buf, uint32_t len, int dir,
		    struct gpunvme_cqe *cqe, uint32_t timeout_ms)
{
	pthread_mutex_lock(&fc->ka_lock);
	int rc = 0;
	if (nvmf_queue_dead(fc->admin)) {
		/* the association is gone (target restarted, link dropped):
		 * a new one, with a new controller ID */
		rc = associate(fc, nvmf_queue_depth(fc->admin));
		if (rc)
			rc = gpunvme_set_error(rc, "%s: admin connection lost and reconnecting failed: %s", fc->p.uri,
					       gpunvme_last_error());
	}
	if (!rc)
		rc = nvmf_queue_exec(fc->admin, cmd, buf, len, dir, cqe, timeout_ms);
	pthread_mutex_unlock(&fc->ka_lock);
	return rc;
}

/* ---- discovery --------------------------------------------------------------------------------------- */

static void copy_field(char *dst, const uint8_t *src, size_t n)
{
	while (n > 0 && (src[n - 1] == ' ' || src[n - 1] == 0))
		n--;
	memcpy(dst, src, n);
	dst[n] = 0;
}

static int disc_log(struct nvmf_ctrl *fc, uint8_t *buf, uint32_t len)
{
	struct gpunvme_sqe cmd = { .opc = GPUNVME_ADM_GET_LOG_PAGE };
	uint32_t numd = len / 4 - 1;
	cmd.cdw[0] = 0x70 | ((numd & 0xffff) << 16); /* LID 70h: discovery */
	cmd.cdw[1] = numd >> 16;
	return nvmf_ctrl_admin(fc, &cmd, buf, len, NVMF_DIR_C2H, NULL, fc->p.timeout_ms);
}

const char *gpunvme_nvmf_trtype_str(uint8_t trtype)
{
	switch (trtype) {
	case 1: return "rdma";
	case 2: return "fc";
	case 3: return "tcp";
	case 254: return "loop";
	default: return "unknown";
	}
}

const char *gpunvme_nvmf_subtype_str(uint8_t subtype)
{
	switch (subtype) {
	case 1: return "referral";
	case 2: return "nvm";
	case 3: return "discovery";
	default: return "unknown";
	}
}

int gpunvme_discover(const char *uri, const struct gpunvme_opts *opts, struct gpunvme_disc_entry **entries,
		     uint32_t *n)
{
	if (!uri || !entries || !n)
		return gpunvme_set_error(-EINVAL, "discover: bad arguments");
	*entries = NULL;
	*n = 0;
	struct nvmf_params p;
	int rc = nvmf_parse_uri(uri, false, &p);
	if (rc)
		return rc;
	snprintf(p.subnqn, sizeof(p.subnqn), "%s", NVMF_DISC_NQN);
	if (opts && opts->admin_timeout_ms && !strstr(uri, "timeout="))
		p.timeout_ms = opts->admin_timeout_ms;
	if (!strstr(uri, "kato="))
		p.kato_ms = 0;
	int un = snprintf(p.uri, sizeof(p.uri), "tcp://%s:%s/%s", p.host, p.port, p.subnqn);
	if (un < 0 || (size_t)un >= sizeof(p.uri))
		return gpunvme_set_error(-EINVAL, "%s: host name too long", uri);
	struct nvmf_ctrl fc;
	if ((rc = nvmf_ctrl_connect(&fc, &p, 32)))
		return rc;
	uint8_t *buf = NULL;
	/* NVMe-oF 1.1 §5.3: read the header, then the whole page, and retry
	 * when the generation counter moved in between */
	for (int tries = 0; tries < 3; tries++) {
		uint8_t hdr[1024];
		if ((rc = disc_log(&fc, hdr, sizeof(hdr))))
			break;
		uint64_t gen, numrec;
		memcpy(&gen, hdr, 8);
		memcpy(&numrec, hdr + 8, 8);
		if (numrec > 1024) {
			rc = gpunvme_set_error(-E2BIG, "%s: discovery log has %llu entries (at most 1024 read)", p.uri,
					       (unsigned long long)numrec);
			break;
		}
		uint32_t len = 1024 + (uint32_t)numrec * 1024;
		free(buf);
		buf = malloc(len);
		if (!buf) {
			rc = gpunvme_set_error(-ENOMEM, "out of memory");
			break;
		}
		if ((rc = disc_log(&fc, buf, len)))
			break;
		uint64_t gen2;
		memcpy(&gen2, buf, 8);
		if (gen2 != gen) {
			rc = gpunvme_set_error(-EAGAIN, "%s: discovery log changed while read 3 times", p.uri);
			continue;
		}
		struct gpunvme_disc_entry *e = calloc(numrec ? numrec : 1, sizeof(*e));
		if (!e) {
			rc = gpunvme_set_error(-ENOMEM, "out of memory");
			break;
		}
		for (uint32_t i = 0; i < numrec; i++) {
			const uint8_t *r = buf + 1024 + (size_t)i * 1024;
			e[i].trtype = r[0];
			e[i].adrfam = r[1];
			e[i].subtype = r[2];
			e[i].treq = r[3];
			e[i].portid = nvmf_get16(r + 4);
			e[i].cntlid = nvmf_get16(r + 6);
			e[i].asqsz = nvmf_get16(r + 8);
			copy_field(e[i].trsvcid, r + 32, 32);
			copy_field(e[i].subnqn, r + 256, 256);
			copy_field(e[i].traddr, r + 512, 256);
		}
		*entries = e;
		*n = (uint32_t)numrec;
		rc = 0;
		break;
	}
	free(buf);
	nvmf_ctrl_disconnect(&fc);
	return rc;
}
