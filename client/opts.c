/* SPDX-License-Identifier: MIT */
/* client/opts.c: sized public structs in and out (opts.h says the rules). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "opts.h"

/* Checks a caller's size against [min, SPW__STRUCT_SIZE_MAX]. */
static int check_size(size_t size, size_t min, const char *name, char *why, size_t whylen)
{
	if (size < min) {
		if (why && whylen)
			snprintf(why, whylen, "%s: size %zu is smaller than its first version (%zu "
				 "bytes); set .size = sizeof(%s)", name, size, min, name);
		return -EINVAL;
	}
	if (size > SPW__STRUCT_SIZE_MAX) {
		if (why && whylen)
			snprintf(why, whylen, "%s: size %zu is no struct's size (over %u bytes); "
				 "set .size = sizeof(%s)", name, size, SPW__STRUCT_SIZE_MAX, name);
		return -E2BIG;
	}
	return 0;
}

int spw__struct_size_check(const void *s, size_t min, const char *name, char *why, size_t whylen)
{
	size_t size;

	memcpy(&size, s, sizeof(size));
	return check_size(size, min, name, why, whylen);
}

int spw__opts_in(void *dst, size_t full, const void *src, size_t min, const char *name,
		 char *why, size_t whylen)
{
	const unsigned char *tail = src;
	size_t size, i;
	int r;

	memcpy(&size, src, sizeof(size));
	if ((r = check_size(size, min, name, why, whylen)) < 0)
		return r;
	for (i = full; i < size; i++) {
		if (tail[i]) {
			if (why && whylen)
				snprintf(why, whylen, "%s: the caller's struct has %zu bytes, this "
					 "libspillway knows %zu, and byte %zu past them is set (an "
					 "option this library lacks: upgrade libspillway, or leave it "
					 "zero)", name, size, full, i);
			return -E2BIG;
		}
	}
	memset(dst, 0, full);
	memcpy(dst, src, size < full ? size : full);
	memcpy(dst, &full, sizeof(full));
	return 0;
}

int spw__info_out(void *dst, const void *src, size_t full, size_t min, const char *name,
		  char *why, size_t whylen)
{
	size_t size, n;
	int r;

	memcpy(&size, dst, sizeof(size));
	if ((r = check_size(size, min, name, why, whylen)) < 0)
		return r;
	n = size < full ? size : full;
	memcpy(dst, src, n);
	if (size > full)
		memset((unsigned char *)dst + full, 0, size - full);
	memcpy(dst, &n, sizeof(n));
	return 0;
}
