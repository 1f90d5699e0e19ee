/* SPDX-License-Identifier: BSD-2-Clause */
/* The thread's last error message (gpunvme_last_error in gpunvme.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "gpunvme/gpunvme.h"

static _Thread_local char last_error[512];

const char *gpunvme_last_error(void)
{
	return last_error;
}

int gpunvme_set_error(int rc, const char *fmt, ...)
{
	/* formatted aside first: callers may wrap the last message in a new
	 * one (an argument pointing into last_error) */
	char tmp[sizeof(last_error)];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	memcpy(last_error, tmp, sizeof(tmp));
	return rc;
}
