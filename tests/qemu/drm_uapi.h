/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The DRM UAPI the kmod guest programs use to make a vgem dumb buffer into a
 * dma-buf (kmod_test.c, kmod_fuzz.c). Debian 12's linux-libc-dev ships no
 * drm/ headers, so the structures are spelled out with the layouts of the
 * kernel's include/uapi/drm/drm.h and drm_mode.h.
 */
#ifndef GPUNVME_TEST_DRM_UAPI_H
#define GPUNVME_TEST_DRM_UAPI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>

struct t_drm_version {
	int major, minor, patch;
	size_t name_len;
	char *name;
	size_t date_len;
	char *date;
	size_t desc_len;
	char *desc;
};
struct t_drm_create_dumb {
	uint32_t height, width, bpp, flags, handle, pitch;
	uint64_t size;
};
struct t_drm_prime_handle {
	uint32_t handle, flags;
	int32_t fd;
};
#define T_DRM_IOCTL_VERSION _IOWR('d', 0x00, struct t_drm_version)
#define T_DRM_IOCTL_PRIME_HANDLE_TO_FD _IOWR('d', 0x2d, struct t_drm_prime_handle)
#define T_DRM_IOCTL_MODE_CREATE_DUMB _IOWR('d', 0xB2, struct t_drm_create_dumb)

#endif
