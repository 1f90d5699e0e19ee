/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Partition tables (GPT, MBR) on a block source, and where on it the ext4 or
 * XFS file system starts, so that a whole disk with a table needs neither
 * a mount nor a hand-computed --offset.
 *
 * Every on-disk number is bounds-checked: a hostile table gives an error,
 * never a crash, a huge allocation or an endless EBR walk.
 */
#ifndef GPUNVME_PART_H
#define GPUNVME_PART_H

#include <stddef.h>
#include <stdint.h>

#include "gpunvme/extents.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gpunvme_partition {
	uint32_t number;        /* 1-based, as Linux numbers them (GPT entry index + 1; MBR 1-4 primary, 5.. logical) */
	uint64_t offset, size;  /* bytes on the device */
	char type[48];          /* "gpt:<lower-case GUID>" or "mbr:0x83" */
	char name[72];          /* GPT partition name as UTF-8 (from UTF-16LE), "" for MBR */
};

/* Read the partition table of dev: GPT (UEFI 2.x §5.3: primary header at
 * LBA 1, header and entry-array CRC32 checked; when the primary is corrupt
 * the backup header at the last LBA is used and gpunvme_last_error() holds
 * a note saying so), protective MBR, or MBR (4 primary entries; an extended
 * partition 0x05/0x0f/0x85 followed through its EBR chain, bounded). LBAs
 * are dev->lba_size bytes (512 or 4096: GPT on a 4 KiB-LBA namespace has its
 * header at byte 4096). *scheme gets "gpt", "mbr" or "none" (n = 0, not an
 * error). *parts is malloc'ed (free() it; NULL when n = 0). */
int gpunvme_part_list(const struct gpunvme_blkdev *dev, struct gpunvme_partition **parts, size_t *n,
		      const char **scheme);

/* Where the file system is. partno 0 = automatic: the whole device when a
 * file system starts at byte 0; else, with a partition table, the one
 * partition holding an ext4/XFS file system (several: -EINVAL naming them
 * and --partition N; none: -EINVAL naming the scheme and the partitions
 * found and suggesting --offset). partno N: that partition (-ENOENT naming
 * the partitions the table has). */
int gpunvme_fs_locate(const struct gpunvme_blkdev *dev, uint32_t partno, uint64_t *offset);

#ifdef __cplusplus
}
#endif

#endif
