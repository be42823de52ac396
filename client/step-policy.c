/* SPDX-License-Identifier: MIT */
/*
 * client/step-policy.c: the step's pure numerics (step-policy.h).
 */
#include <math.h>

#include "step-policy.h"

struct spw__loss_scale spw__loss_scale_next(struct spw__loss_scale s, bool overflow,
					    uint32_t growth_interval)
{
	if (overflow) {
		s.scale *= 0.5f;
		s.good_steps = 0;
	} else if (++s.good_steps >= growth_interval) {
		s.scale *= 2.0f;
		s.good_steps = 0;
	}
	return s;
}

double spw__grad_norm(double sumsq, float loss_scale)
{
	return sqrt(sumsq) / (double)loss_scale;
}

float spw__clip_coef(double norm, float max_norm)
{
	double c;

	if (!(max_norm > 0.0f))
		return 1.0f;
	c = (double)max_norm / (norm + 1e-6);
	return c < 1.0 ? (float)c : 1.0f;
}
