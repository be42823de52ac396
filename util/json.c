/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util/json.h"

int json_uint(const cJSON *v, uint64_t max, uint64_t *ret)
{
	double d;

	if (!cJSON_IsNumber(v))
		return -EINVAL;
	if (max > JSON_UINT_MAX)
		max = JSON_UINT_MAX;
	d = v->valuedouble;
	/* !(d >= 0) also refuses NaN. */
	if (!(d >= 0) || !isfinite(d) || floor(d) != d || d > (double)max)
		return -ERANGE;
	*ret = (uint64_t)d;
	return 0;
}

const cJSON *json_path(const cJSON *o, const char *path)
{
	char key[64];

	while (o && *path) {
		size_t n = strcspn(path, ".");

		if (n >= sizeof(key))
			return NULL;
		memcpy(key, path, n);
		key[n] = '\0';
		o = cJSON_GetObjectItemCaseSensitive(o, key);
		path += n + (path[n] == '.');
	}
	return o;
}
