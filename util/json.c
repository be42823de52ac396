/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <math.h>

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
