/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>

#include "util/command.h"

int command_output(const char *cmd, char *buf, size_t len)
{
	char sink[4096];
	size_t got = 0;
	FILE *p = popen(cmd, "r");
	int st;

	if (!p)
		return -errno;
	for (;;) {
		bool full = got + 1 >= len;
		size_t n = full ? fread(sink, 1, sizeof(sink), p) : fread(buf + got, 1, len - 1 - got, p);

		if (n == 0)
			break;
		if (!full)
			got += n;
	}
	if (len)
		buf[got] = '\0';
	st = pclose(p);
	return st < 0 ? -errno : st;
}
