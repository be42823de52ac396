/* SPDX-License-Identifier: MIT */
/* config-values.c: one JSON value into one config field, or a refusal. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config-private.h"
#include "log.h"
#include "util/json.h"

int cfg_fail(struct perr *e, const char *fmt, ...)
{
	va_list ap;
	int n;

	n = snprintf(e->buf, e->len, "%s: ", e->origin);
	if (n < 0 || (size_t)n >= e->len)
		return -EINVAL;
	va_start(ap, fmt);
	vsnprintf(e->buf + n, e->len - (size_t)n, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* A short, printable rendering of a JSON value for messages. */
const char *cfg_describe(const cJSON *v, char *buf, size_t len)
{
	if (cJSON_IsString(v)) {
		size_t o = 0;
		const char *s = v->valuestring;

		buf[o++] = '"';
		for (; *s && o + 5 < len && o < 64; s++)
			buf[o++] = isprint((unsigned char)*s) ? *s : '?';
		if (*s)
			o += (size_t)snprintf(buf + o, len - o, "...");
		snprintf(buf + o, len - o, "\"");
	} else if (cJSON_IsNumber(v)) {
		snprintf(buf, len, "%.17g", v->valuedouble);
	} else if (cJSON_IsBool(v)) {
		snprintf(buf, len, "%s", cJSON_IsTrue(v) ? "true" : "false");
	} else if (cJSON_IsNull(v)) {
		snprintf(buf, len, "null");
	} else if (cJSON_IsArray(v)) {
		snprintf(buf, len, "an array");
	} else if (cJSON_IsObject(v)) {
		snprintf(buf, len, "an object");
	} else {
		snprintf(buf, len, "an invalid value");
	}
	return buf;
}

int config_parse_size(const char *s, uint64_t *ret)
{
	static const struct {
		const char *suffix;
		unsigned shift;
	} units[] = {
		{ "", 0 },   { "B", 0 },    { "K", 10 },   { "KiB", 10 }, { "M", 20 },
		{ "MiB", 20 }, { "G", 30 }, { "GiB", 30 }, { "T", 40 },   { "TiB", 40 },
	};
	uint64_t v = 0;
	const char *p = s;

	if (!s || !isdigit((unsigned char)*p))
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	while (*p == ' ')
		p++;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(p, units[i].suffix))
			continue;
		if (units[i].shift && v > (UINT64_MAX >> units[i].shift))
			return -ERANGE;
		*ret = v << units[i].shift;
		return 0;
	}
	return -EINVAL;
}

int cfg_size(struct perr *e, const cJSON *v, const char *key, uint64_t min, uint64_t *ret)
{
	char d[96], m[32];
	uint64_t x = 0;
	int r;

	if (cJSON_IsString(v)) {
		r = config_parse_size(v->valuestring, &x);
		if (r == -ERANGE)
			return cfg_fail(e, "%s: %s does not fit in 64 bits", key, cfg_describe(v, d, sizeof(d)));
		if (r < 0)
			return cfg_fail(e, "%s: %s is not a size (write a byte count or a string like \"4MiB\", \"64GiB\")",
				    key, cfg_describe(v, d, sizeof(d)));
	} else if (cJSON_IsNumber(v)) {
		if (json_uint(v, JSON_UINT_MAX, &x) < 0)
			return cfg_fail(e, "%s: %s is not a whole, non-negative number of bytes up to 2^53",
				    key, cfg_describe(v, d, sizeof(d)));
	} else {
		return cfg_fail(e, "%s: %s has the wrong type; expected a size (a byte count or a string like \"4MiB\")",
			    key, cfg_describe(v, d, sizeof(d)));
	}
	if (x < min)
		return cfg_fail(e, "%s: %s is too small; the least allowed is %s", key, cfg_describe(v, d, sizeof(d)),
			    format_bytes(min, m, sizeof(m)));
	*ret = x;
	return 0;
}

int cfg_uint(struct perr *e, const cJSON *v, const char *key, uint64_t min, uint64_t max, uint64_t *ret)
{
	char d[96];
	uint64_t x = 0;

	if (!cJSON_IsNumber(v))
		return cfg_fail(e, "%s: %s has the wrong type; expected an integer", key, cfg_describe(v, d, sizeof(d)));
	if (json_uint(v, max, &x) < 0 || x < min)
		return cfg_fail(e, "%s: %s is out of range; expected an integer from %llu to %llu", key,
			    cfg_describe(v, d, sizeof(d)), (unsigned long long)min, (unsigned long long)max);
	*ret = x;
	return 0;
}

/* cfg_uint() into a 32-bit field (max fits in one). */
int cfg_u32(struct perr *e, const cJSON *v, const char *key, uint32_t min, uint32_t max, uint32_t *ret)
{
	uint64_t x = 0;
	int r = cfg_uint(e, v, key, min, max, &x);

	if (r == 0)
		*ret = (uint32_t)x;
	return r;
}

int cfg_bool(struct perr *e, const cJSON *v, const char *key, bool *ret)
{
	char d[96];

	if (!cJSON_IsBool(v))
		return cfg_fail(e, "%s: %s has the wrong type; expected true or false", key, cfg_describe(v, d, sizeof(d)));
	*ret = cJSON_IsTrue(v);
	return 0;
}

int cfg_string(struct perr *e, const cJSON *v, const char *key, const char **ret)
{
	char d[96];

	if (!cJSON_IsString(v))
		return cfg_fail(e, "%s: %s has the wrong type; expected a string", key, cfg_describe(v, d, sizeof(d)));
	*ret = v->valuestring;
	return 0;
}

int cfg_set_str(char **dst, const char *s)
{
	char *n = strdup(s);

	if (!n)
		return -ENOMEM;
	free(*dst);
	*dst = n;
	return 0;
}

int cfg_path(struct perr *e, const cJSON *v, const char *key, size_t maxlen, const char **ret)
{
	char d[96];
	const char *s = NULL;
	int r = cfg_string(e, v, key, &s);

	if (r < 0)
		return r;
	if (s[0] != '/')
		return cfg_fail(e, "%s: %s is not an absolute path", key, cfg_describe(v, d, sizeof(d)));
	if (strlen(s) > maxlen)
		return cfg_fail(e, "%s: %s is longer than %zu bytes", key, cfg_describe(v, d, sizeof(d)), maxlen);
	*ret = s;
	return 0;
}

int cfg_choice(struct perr *e, const cJSON *v, const char *key, const char *(*name)(int), int lo, int hi,
	       int *ret)
{
	char d[96], list[160];
	const char *s = NULL;
	size_t o = 0;
	int r = cfg_string(e, v, key, &s);

	if (r < 0)
		return r;
	for (int i = lo; i <= hi; i++) {
		if (!strcmp(s, name(i))) {
			*ret = i;
			return 0;
		}
	}
	list[0] = '\0';
	for (int i = lo; i <= hi && o < sizeof(list); i++)
		o += (size_t)snprintf(list + o, sizeof(list) - o, "%s\"%s\"", i > lo ? ", " : "", name(i));
	return cfg_fail(e, "%s: %s is not one of %s", key, cfg_describe(v, d, sizeof(d)), list);
}
