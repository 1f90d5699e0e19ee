// SPDX-License-Identifier: BSD-2-Clause
/*
 * The volume: URI -> controller or md array -> namespace -> partition ->
 * file system, in one place (volume.h). The CLI and Python used to do this
 * each on their own, and the layer stream took a bare controller, which is
 * how an md array came to be read from its first member only (issue 30).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpunvme/part.h"
#include "gpunvme/volume.h"
#include "base/base.h"

struct gpunvme_volume {
	struct gpunvme_ctrl *c;         /* a single controller (not an array's) */
	struct gpunvme_md_volume *md;   /* an array: owns its controllers and readers */
	struct gpunvme_blkdev dev;      /* namespace or image reader (not for an array) */
	bool have_dev;
	struct gpunvme_fs *fs;
	uint64_t fs_off;
	uint32_t nsid;
};

void gpunvme_volume_opts_init(struct gpunvme_volume_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->nsid = 1;
	o->offset = GPUNVME_VOLUME_LOCATE;
	o->fs = true;
}

/* The library's last message, kept before the next call overwrites it. */
static void last_error_copy(char *buf, size_t len)
{
	snprintf(buf, len, "%s", gpunvme_last_error());
}

static int open_device(struct gpunvme_volume *v, const char *uri, const char *image,
		       const struct gpunvme_volume_opts *o)
{
	char lib[512];
	int rc;
	if (image) {
		if ((rc = gpunvme_blkdev_open_file(image, &v->dev))) {
			last_error_copy(lib, sizeof(lib));
			return gpunvme_set_error(rc, "cannot open image %s: %s", image, lib[0] ? lib : strerror(-rc));
		}
		v->have_dev = true;
		return 0;
	}
	if (gpunvme_md_uri(uri)) {
		/* every member's controller, namespace reader and superblock */
		if ((rc = gpunvme_md_open(uri, o->ctrl, o->nsid, &v->md))) {
			last_error_copy(lib, sizeof(lib));
			return gpunvme_set_error(rc, "md array: %s", lib[0] ? lib : strerror(-rc));
		}
		return 0;
	}
	if ((rc = gpunvme_open(uri, o->ctrl, &v->c)) || !v->c) {
		rc = rc ? rc : -EIO;
		last_error_copy(lib, sizeof(lib));
		return gpunvme_set_error(rc, "cannot open '%s': %s", uri, lib[0] ? lib : strerror(-rc));
	}
	struct gpunvme_ns_info ni;
	if ((rc = gpunvme_ns_info(v->c, o->nsid, &ni)))
		return rc; /* its message names the active namespaces */
	if ((rc = gpunvme_blkdev_open_ns(v->c, o->nsid, &v->dev))) {
		last_error_copy(lib, sizeof(lib));
		return gpunvme_set_error(rc, "namespace %u: %s", o->nsid, lib[0] ? lib : strerror(-rc));
	}
	v->have_dev = true;
	return 0;
}

static int open_fs(struct gpunvme_volume *v, const char *name, const struct gpunvme_volume_opts *o)
{
	struct gpunvme_blkdev *dev = gpunvme_volume_blkdev(v);
	char lib[512];
	uint64_t at = o->offset;
	int rc;
	if (at == GPUNVME_VOLUME_LOCATE) {
		if ((rc = gpunvme_fs_locate(dev, o->partition, &at))) {
			last_error_copy(lib, sizeof(lib));
			return gpunvme_set_error(rc, "%s: %s", name, lib[0] ? lib : strerror(-rc));
		}
	} else if (at >= dev->size) {
		return gpunvme_set_error(-ERANGE, "offset %" PRIu64 " is past the end of the device (%" PRIu64 " bytes)",
					 at, dev->size);
	}
	/* a table read from its backup is worth knowing: keep the note for
	 * the caller to show (gpunvme_fs_open may overwrite it) */
	char note[256] = "";
	if (!strncmp(gpunvme_last_error(), "note: ", 6))
		last_error_copy(note, sizeof(note));
	if ((rc = gpunvme_fs_open(dev, at, &v->fs))) {
		last_error_copy(lib, sizeof(lib));
		/* the partition asked for is where the user must look: name it
		 * and where it starts, not only the device */
		if (o->partition && o->offset == GPUNVME_VOLUME_LOCATE)
			return gpunvme_set_error(rc, "%s: partition %" PRIu32 " (at byte %" PRIu64 "): %s; choose another "
						     "partition",
						 name, o->partition, at, lib[0] ? lib : strerror(-rc));
		return gpunvme_set_error(rc, "%s: %s", name, lib[0] ? lib : strerror(-rc));
	}
	v->fs_off = at;
	if (note[0])
		gpunvme_set_error(0, "%s", note);
	return 0;
}

int gpunvme_volume_open(const char *uri, const char *path_image, const struct gpunvme_volume_opts *opts,
			struct gpunvme_volume **out)
{
	struct gpunvme_volume_opts def;
	if (!opts) {
		gpunvme_volume_opts_init(&def);
		opts = &def;
	}
	if (!out || (!uri && !path_image))
		return gpunvme_set_error(-EINVAL, "volume open: a URI or an image path is required");
	*out = NULL;
	if (opts->nsid == 0 || opts->nsid == 0xffffffffu)
		return gpunvme_set_error(-EINVAL, "namespace id %u is not a namespace (1 is the first)", opts->nsid);
	struct gpunvme_volume *v = calloc(1, sizeof(*v));
	if (!v)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	v->nsid = opts->nsid;
	gpunvme_set_error(0, "%s", ""); /* a note left by the partition table is ours alone */
	int rc = open_device(v, uri, path_image, opts);
	if (!rc && opts->fs)
		rc = open_fs(v, path_image ? path_image : uri, opts);
	if (rc) {
		/* closing must not replace the message that says what failed */
		char msg[512];
		last_error_copy(msg, sizeof(msg));
		gpunvme_volume_close(v);
		gpunvme_set_error(rc, "%s", msg);
		return rc;
	}
	*out = v;
	return 0;
}

void gpunvme_volume_close(struct gpunvme_volume *v)
{
	if (!v)
		return;
	gpunvme_fs_close(v->fs);
	if (v->md) {
		gpunvme_md_volume_close(v->md);
	} else {
		if (v->have_dev)
			gpunvme_blkdev_close(&v->dev);
		if (v->c)
			gpunvme_close(v->c);
	}
	free(v);
}

struct gpunvme_blkdev *gpunvme_volume_blkdev(struct gpunvme_volume *v)
{
	return v->md ? &v->md->array : &v->dev;
}

void gpunvme_volume_make_room(struct gpunvme_volume *v)
{
	for (size_t i = 0; i < gpunvme_volume_nctrl(v); i++)
		if (gpunvme_io_queues_free(gpunvme_volume_ctrl(v, i)) == 0) {
			gpunvme_blkdev_release(gpunvme_volume_blkdev(v));
			return;
		}
}

struct gpunvme_fs *gpunvme_volume_fs(struct gpunvme_volume *v)
{
	return v->fs;
}

uint64_t gpunvme_volume_fs_offset(const struct gpunvme_volume *v)
{
	return v->fs_off;
}

struct gpunvme_md_volume *gpunvme_volume_md(struct gpunvme_volume *v)
{
	return v->md;
}

size_t gpunvme_volume_nctrl(const struct gpunvme_volume *v)
{
	return v->md ? v->md->nowned : v->c ? 1 : 0;
}

struct gpunvme_ctrl *gpunvme_volume_ctrl(struct gpunvme_volume *v, size_t i)
{
	if (v->md)
		return i < v->md->nowned ? v->md->owned[i] : NULL;
	return i == 0 ? v->c : NULL;
}

uint32_t gpunvme_volume_nsid(const struct gpunvme_volume *v)
{
	return v->nsid;
}
