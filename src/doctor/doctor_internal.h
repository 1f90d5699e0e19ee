/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Internals of the doctor (src/doctor): reading files under a root.
 */
#ifndef GPUNVME_DOCTOR_INTERNAL_H
#define GPUNVME_DOCTOR_INTERNAL_H

#include <dirent.h>
#include <stddef.h>
#include <sys/types.h>

#include "gpunvme/doctor.h"

struct dr_ctx {
	char root[256]; /* "" for the live machine */
};

/* root + printf(fmt): 0 or -ENAMETOOLONG */
int dr_path(const struct dr_ctx *c, char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
ssize_t dr_read_bytes(const char *path, void *buf, size_t len);
int dr_read_line(const char *path, char *buf, size_t len);
/* Append "; text" to a why string (bounded). */
void dr_why(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void dr_copy(char *dst, size_t len, const char *src);
/* opendir, traced */
DIR *dr_opendir(const char *path);
int dr_read_dev(const struct dr_ctx *c, const char *bdf, struct gpunvme_doctor_dev *d);

#endif
