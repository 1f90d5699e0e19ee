/* SPDX-License-Identifier: BSD-2-Clause */
/* Whole reads from a file at an offset (base.h). */
#include <errno.h>
#include <unistd.h>

#include "base/base.h"

int gpunvme_pread_all(int fd, void *buf, size_t len, uint64_t off)
{
	unsigned char *p = buf;
	while (len) {
		/* off_t is 64-bit here (_FILE_OFFSET_BITS or LP64) */
		ssize_t r = pread(fd, p, len, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EIO; /* the file is shorter than the caller's view of it */
		p += r;
		len -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}
