/* SPDX-License-Identifier: MIT */
#include <stdio.h>

#include "util/bytes.h"

const char *format_bytes(uint64_t v, char *buf, size_t len)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double x = (double)v;
	int u = -1;

	if (v < 1024) {
		snprintf(buf, len, "%llu B", (unsigned long long)v);
		return buf;
	}
	while (x >= 1024.0 && u < 5) {
		x /= 1024.0;
		u++;
	}
	snprintf(buf, len, "%.1f %s", x, units[u]);
	return buf;
}

const char *format_bytes_exact(uint64_t v, char *buf, size_t len)
{
	char short_form[32];

	if (v < 1024)
		return format_bytes(v, buf, len);
	snprintf(buf, len, "%s (%llu bytes)", format_bytes(v, short_form, sizeof(short_form)),
		 (unsigned long long)v);
	return buf;
}
