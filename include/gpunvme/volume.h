/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A volume: what a URI names, opened in one place. Controller or md array,
 * namespace, partition, file system: every reader (the CLI's commands, the
 * loader, the layer stream, Python's Volume) opens its data through this,
 * so an array, a partition and a TCP namespace behave the same everywhere.
 *
 *   struct gpunvme_volume_opts o;
 *   gpunvme_volume_opts_init(&o);
 *   o.partition = 2;
 *   struct gpunvme_volume *v;
 *   if (gpunvme_volume_open("emu:disk.img", &o, &v) == 0) {
 *           struct gpunvme_fs *fs = gpunvme_volume_fs(v);
 *           ...
 *           gpunvme_volume_close(v);
 *   }
 */
#ifndef GPUNVME_VOLUME_H
#define GPUNVME_VOLUME_H

#include <stdbool.h>
#include <stdint.h>

#include "gpunvme/extents.h"
#include "gpunvme/gpunvme.h"
#include "gpunvme/md.h"

#ifdef __cplusplus
extern "C" {
#endif

/* offset: the file system's byte offset on the device is found (at byte 0,
 * or through the partition table) */
#define GPUNVME_VOLUME_LOCATE UINT64_MAX

struct gpunvme_volume_opts {
	const struct gpunvme_opts *ctrl; /* for every controller opened; NULL: defaults */
	uint32_t nsid;                   /* namespace (of every member of an array); default 1 */
	/* where the file system starts: GPUNVME_VOLUME_LOCATE (default), or
	 * a byte offset on the namespace or array */
	uint64_t offset;
	/* with GPUNVME_VOLUME_LOCATE: partition number (1-based); 0 = the one
	 * partition, or the whole device, that holds a file system */
	uint32_t partition;
	/* open the file system on the device (default true); false: the
	 * device alone (raw reads, a partition table listing) */
	bool fs;
};

void gpunvme_volume_opts_init(struct gpunvme_volume_opts *o);

struct gpunvme_volume;

/*
 * Open uri ("emu:...", "vfio:...", "tcp://...", "md:A;B;...", ...) as a
 * volume. path_image, when not NULL, is a plain image file read with pread
 * instead (uri is then only used in messages; no controller is opened).
 * Returns 0 or a negative errno; gpunvme_last_error() names the step that
 * failed (controller, namespace N, md array, offset, partition N at byte B,
 * file system) and what to do.
 */
int gpunvme_volume_open(const char *uri, const char *path_image, const struct gpunvme_volume_opts *o,
			struct gpunvme_volume **out);
void gpunvme_volume_close(struct gpunvme_volume *v);

/* The block device the file system is on: the namespace, the array, or the
 * image file. Never NULL. */
struct gpunvme_blkdev *gpunvme_volume_blkdev(struct gpunvme_volume *v);
/* The file system; NULL when opened with o.fs = false. */
struct gpunvme_fs *gpunvme_volume_fs(struct gpunvme_volume *v);
/* Byte offset of the file system on the device (0 without one). */
uint64_t gpunvme_volume_fs_offset(const struct gpunvme_volume *v);
/* The md array, or NULL for a single namespace or an image file. */
struct gpunvme_md_volume *gpunvme_volume_md(struct gpunvme_volume *v);
/* Number of distinct controllers (0 for an image file), and controller i:
 * for an array, its members' controllers in member order of first use. */
size_t gpunvme_volume_nctrl(const struct gpunvme_volume *v);
struct gpunvme_ctrl *gpunvme_volume_ctrl(struct gpunvme_volume *v, size_t i);
/* The namespace id given at open. */
uint32_t gpunvme_volume_nsid(const struct gpunvme_volume *v);
/* Before a reader that takes its own queue pairs (the loader, the layer
 * stream): the file system's reader gives its queue pairs back, but only
 * when a controller of the volume has none left free. Otherwise it keeps
 * them, so that it can still read (e.g. load --verify) while a GPU tier
 * holds every queue it was given. It takes them again when next used. */
void gpunvme_volume_make_room(struct gpunvme_volume *v);

#ifdef __cplusplus
}
#endif

#endif
