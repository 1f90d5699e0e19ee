/* SPDX-License-Identifier: BSD-2-Clause */
/* Namespace backing stores: RAM, file (shared mapping) and null. */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "emu/emu_internal.h"

/* An image file copied into anonymous memory: the namespace is then RAM
 * (fast, pinnable, never written back). Whole file, whole blocks only. */
static int ns_snapshot(struct emu_ns *ns, const struct gpunvme_emu_ns_config *cfg)
{
	int fd = open(cfg->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	uint64_t size = cfg->size ? cfg->size : (uint64_t)st.st_size;
	if (size == 0 || (size & ((1ull << ns->lba_shift) - 1)) || size < (uint64_t)st.st_size) {
		close(fd);
		return -EINVAL;
	}
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		close(fd);
		return -ENOMEM;
	}
	int rc = gpunvme_pread_all(fd, p, (size_t)st.st_size, 0);
	close(fd);
	if (rc) {
		munmap(p, size);
		return rc;
	}
	ns->backing = GPUNVME_EMU_BACK_RAM;
	ns->data = p;
	ns->map_len = size;
	ns->nlbas = size >> ns->lba_shift;
	return 0;
}

int emu_ns_open(struct emu_ns *ns, uint32_t nsid, const struct gpunvme_emu_ns_config *cfg)
{
	memset(ns, 0, sizeof(*ns));
	ns->fd = -1;
	ns->read_fd = -1;
	ns->nsid = nsid;
	ns->backing = cfg->backing;
	if (cfg->lba_shift != 9 && cfg->lba_shift != 12)
		return -EINVAL;
	ns->lba_shift = cfg->lba_shift;
	uint64_t size = cfg->size;

	switch (cfg->backing) {
	case GPUNVME_EMU_BACK_NULL:
	case GPUNVME_EMU_BACK_RAM:
		if (size == 0 || (size & ((1ull << ns->lba_shift) - 1)))
			return -EINVAL;
		if (cfg->backing == GPUNVME_EMU_BACK_RAM) {
			/* MAP_NORESERVE: pages appear (zeroed) when first touched,
			 * so a large namespace costs only what is written. */
			void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
			if (p == MAP_FAILED)
				return -ENOMEM;
			ns->data = p;
			ns->map_len = size;
		}
		break;
	case GPUNVME_EMU_BACK_FILE: {
		if (cfg->snapshot)
			return ns_snapshot(ns, cfg);
		/* An image that cannot be written (mode 0444 for its user, a
		 * read-only mount, an immutable file: EACCES, EROFS, EPERM) is
		 * still readable: serve it write-protected rather than refuse
		 * ls/cat/load of a downloaded image. Writes then fail with a
		 * status (io_write_protected), never a signal on the mapping. */
		bool ro = cfg->read_only;
		int fd = ro ? -1 : open(cfg->path, O_RDWR | O_CLOEXEC | (size ? O_CREAT : 0), 0644);
		if (fd < 0 && (ro || errno == EACCES || errno == EROFS || errno == EPERM)) {
			int werr = errno;
			fd = open(cfg->path, O_RDONLY | O_CLOEXEC);
			if (fd < 0)
				return -(ro || errno == ENOENT ? errno : werr);
			ro = true;
		}
		if (fd < 0)
			return -errno;
		struct stat st;
		if (fstat(fd, &st) < 0) {
			int rc = -errno;
			close(fd);
			return rc;
		}
		if (!S_ISREG(st.st_mode)) {
			close(fd);
			return -EINVAL;
		}
		if (size == 0) {
			size = (uint64_t)st.st_size;
		} else if (ro && (uint64_t)st.st_size < size) {
			close(fd); /* growing it would be a write */
			return -EROFS;
		} else if ((uint64_t)st.st_size < size && ftruncate(fd, (off_t)size) < 0) {
			int rc = -errno;
			close(fd);
			return rc;
		}
		/* A partial last block cannot be addressed: refuse rather than
		 * silently hide the tail of the image. */
		if (size == 0 || (size & ((1ull << ns->lba_shift) - 1))) {
			close(fd);
			return -EINVAL;
		}
		void *p = mmap(NULL, size, ro ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED) {
			int rc = -errno;
			close(fd);
			return rc;
		}
		ns->read_only = ro;
		ns->fd = fd;
		const char *how = getenv("GPUNVME_EMU_FILE_READ");
		ns->read_fd = how && !strcmp(how, "map") ? -1 : fd;
		ns->data = p;
		ns->map_len = size;
		break;
	}
	default:
		return -EINVAL;
	}
	ns->nlbas = size >> ns->lba_shift;
	return 0;
}

void emu_ns_close(struct emu_ns *ns)
{
	if (ns->data) {
		if (ns->backing == GPUNVME_EMU_BACK_FILE)
			msync(ns->data, ns->map_len, MS_SYNC);
		munmap(ns->data, ns->map_len);
	}
	if (ns->fd >= 0)
		close(ns->fd);
	ns->data = NULL;
	ns->fd = -1;
	ns->read_fd = -1;
}

/* Make [off, off + len) durable (Flush, §6.8). Only file namespaces have
 * anything to do: RAM has no stable storage to reach. */
int emu_ns_flush(struct emu_ns *ns, uint64_t off, uint64_t len)
{
	if (ns->backing != GPUNVME_EMU_BACK_FILE)
		return 0;
	if (len == 0) {
		off = 0;
		len = ns->map_len;
	}
	/* msync wants a page-aligned start */
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t start = off & ~(pg - 1);
	return msync(ns->data + start, len + (off - start), MS_SYNC) ? -errno : 0;
}

/* Deallocate (Dataset Management AD). Identify Namespace DLFEAT promises
 * that deallocated blocks read as zeroes, so the data must go. */
void emu_ns_deallocate(struct emu_ns *ns, uint64_t off, uint64_t len)
{
	if (!ns->data || len == 0)
		return;
	if (ns->backing == GPUNVME_EMU_BACK_FILE &&
	    fallocate(ns->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) == 0)
		return; /* the shared mapping now reads zeroes there */
	/* RAM: whole pages go back to the kernel (they read as zeroes after
	 * MADV_DONTNEED on a private anonymous mapping); edges are cleared. */
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t a = (off + pg - 1) & ~(pg - 1), b = (off + len) & ~(pg - 1);
	if (ns->backing == GPUNVME_EMU_BACK_RAM && b > a && !__atomic_load_n(&ns->exported, __ATOMIC_RELAXED) &&
	    madvise(ns->data + a, b - a, MADV_DONTNEED) == 0) {
		memset(ns->data + off, 0, a - off);
		memset(ns->data + b, 0, off + len - b);
		return;
	}
	memset(ns->data + off, 0, len);
}

int gpunvme_emu_ns_memory(struct gpunvme_emu *emu, uint32_t nsid, void **p, size_t *len)
{
	struct emu_ns *ns = emu ? emu_ns_get(emu, nsid) : NULL;
	if (!ns || !p || !len)
		return -EINVAL;
	if (!ns->data)
		return -ENODATA; /* null backing: nothing to hand out */
	__atomic_store_n(&ns->exported, true, __ATOMIC_RELAXED);
	*p = ns->data;
	*len = ns->map_len;
	return 0;
}

int gpunvme_emu_ns_backing(struct gpunvme_emu *emu, uint32_t nsid)
{
	struct emu_ns *ns = emu ? emu_ns_get(emu, nsid) : NULL;
	return ns ? (int)ns->backing : -EINVAL;
}
