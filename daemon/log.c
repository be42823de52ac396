/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static int current_level = LOG_LVL_INFO;

static const char *const level_names[] = {
	[LOG_LVL_ERROR] = "error",
	[LOG_LVL_WARN] = "warn",
	[LOG_LVL_INFO] = "info",
	[LOG_LVL_DEBUG] = "debug",
};

/* syslog priorities: err, warning, info, debug */
static const int level_prio[] = { 3, 4, 6, 7 };

void log_set_level(int level)
{
	if (level >= LOG_LVL_ERROR && level <= LOG_LVL_DEBUG)
		current_level = level;
}

int log_get_level(void)
{
	return current_level;
}

int log_level_from_string(const char *s)
{
	for (int i = LOG_LVL_ERROR; i <= LOG_LVL_DEBUG; i++)
		if (s && !strcmp(s, level_names[i]))
			return i;
	return -EINVAL;
}

const char *log_level_name(int level)
{
	if (level < LOG_LVL_ERROR || level > LOG_LVL_DEBUG)
		return "unknown";
	return level_names[level];
}

void log_msg(int level, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	if (level > current_level)
		return;
	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	/* One write per line keeps lines whole when stderr is shared. */
	if (getenv("JOURNAL_STREAM"))
		fprintf(stderr, "<%d>%s\n", level_prio[level], line);
	else
		fprintf(stderr, "spillwayd: %s: %s\n", level_names[level], line);
}
