/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "util/names.h"

static bool name_byte_ok(char c)
{
	return c >= 0x21 && c <= 0x7e && c != '"' && c != '\\';
}

/* Length of the name at the start of s (up to a space or the end), or 0
 * when it breaks the rule. */
static size_t name_len(const char *s)
{
	size_t n = 0;

	if (s[0] == '.' || s[0] == '/')
		return 0;
	for (; s[n] && s[n] != ' '; n++) {
		if (!name_byte_ok(s[n]))
			return 0;
		if (s[n] == '.' && s[n + 1] == '.')
			return 0;
	}
	return n;
}

bool name_valid(const char *name, size_t max)
{
	size_t n;

	if (!name)
		return false;
	n = name_len(name);
	return n > 0 && n <= max && name[n] == '\0';
}

bool name_list_valid(const char *s, size_t max)
{
	size_t total = 0;

	if (!s)
		return false;
	for (;;) {
		size_t n = name_len(s + total);

		if (n == 0)
			return false;
		total += n;
		if (total > max)
			return false;
		if (s[total] == '\0')
			return true;
		total++; /* the one space */
	}
}

const char *swapfile_name(char *buf, size_t len, const char *session, uint32_t tag)
{
	char safe[65];
	size_t i = 0;

	for (; session[i] && i < sizeof(safe) - 1; i++) {
		char c = session[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			  c == '-' || c == '_' || (c == '.' && i > 0);
		safe[i] = ok ? c : '_';
	}
	safe[i] = '\0';
	snprintf(buf, len, SWAPFILE_PREFIX "%s-%08x" SWAPFILE_SUFFIX, safe, tag);
	return buf;
}

bool swapfile_name_match(const char *name)
{
	size_t n = strlen(name), np = strlen(SWAPFILE_PREFIX), ns = strlen(SWAPFILE_SUFFIX);

	return n >= np + ns && !strncmp(name, SWAPFILE_PREFIX, np) && !strcmp(name + n - ns, SWAPFILE_SUFFIX);
}

int swapfile_scan(const char *dir, uint64_t *count, uint64_t *bytes)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	*count = *bytes = 0;
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		struct stat st;

		if (!swapfile_name_match(de->d_name))
			continue;
		(*count)++;
		/* Allocated blocks, not st_size: what the drive really gives up. */
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
			*bytes += (uint64_t)st.st_blocks * 512;
	}
	closedir(d);
	return 0;
}
