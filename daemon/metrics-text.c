/* SPDX-License-Identifier: MIT */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics-text.h"

static bool reserve(struct mtext *t, size_t more)
{
	size_t cap;
	char *n;

	if (t->failed)
		return false;
	if (t->len + more + 1 <= t->cap)
		return true;
	cap = t->cap ? t->cap : 4096;
	while (cap < t->len + more + 1)
		cap *= 2;
	n = realloc(t->buf, cap);
	if (!n) {
		t->failed = true;
		return false;
	}
	t->buf = n;
	t->cap = cap;
	return true;
}

static void put(struct mtext *t, const char *s, size_t n)
{
	if (!reserve(t, n))
		return;
	memcpy(t->buf + t->len, s, n);
	t->len += n;
	t->buf[t->len] = '\0';
}

static void puts_(struct mtext *t, const char *s)
{
	put(t, s, strlen(s));
}

/* Escapes '\\' and '\n' always, '"' in label values (quote true). */
static void put_escaped(struct mtext *t, const char *s, bool quote)
{
	const char *run = s;

	for (; *s; s++) {
		const char *e = *s == '\\' ? "\\\\" : *s == '\n' ? "\\n" : quote && *s == '"' ? "\\\"" : NULL;

		if (!e)
			continue;
		put(t, run, (size_t)(s - run));
		puts_(t, e);
		run = s + 1;
	}
	put(t, run, (size_t)(s - run));
}

void mtext_family(struct mtext *t, const char *name, const char *type, const char *help)
{
	puts_(t, "# HELP ");
	puts_(t, name);
	puts_(t, " ");
	put_escaped(t, help, false);
	puts_(t, "\n# TYPE ");
	puts_(t, name);
	puts_(t, " ");
	puts_(t, type);
	puts_(t, "\n");
}

static void put_value(struct mtext *t, double v)
{
	char num[40];

	if (isnan(v))
		snprintf(num, sizeof(num), "NaN");
	else if (isinf(v))
		snprintf(num, sizeof(num), v > 0 ? "+Inf" : "-Inf");
	else if (v == floor(v) && fabs(v) <= 9007199254740992.0)
		snprintf(num, sizeof(num), "%.0f", v);
	else if (snprintf(num, sizeof(num), "%.15g", v) > 0 && strtod(num, NULL) != v)
		snprintf(num, sizeof(num), "%.17g", v); /* the shortest of the two that reads back exactly */
	puts_(t, num);
}

void mtext_sample(struct mtext *t, const char *name, double value, ...)
{
	va_list ap;
	const char *k;
	bool first = true;

	puts_(t, name);
	va_start(ap, value);
	while ((k = va_arg(ap, const char *))) {
		const char *v = va_arg(ap, const char *);

		puts_(t, first ? "{" : ",");
		puts_(t, k);
		puts_(t, "=\"");
		put_escaped(t, v ? v : "", true);
		puts_(t, "\"");
		first = false;
	}
	va_end(ap);
	if (!first)
		puts_(t, "}");
	puts_(t, " ");
	put_value(t, value);
	puts_(t, "\n");
}

char *mtext_take(struct mtext *t, size_t *len)
{
	char *s = t->failed ? NULL : t->buf;

	if (t->failed)
		free(t->buf);
	else if (!s)
		s = calloc(1, 1);
	if (len)
		*len = s ? t->len : 0;
	*t = (struct mtext){ 0 };
	return s;
}
