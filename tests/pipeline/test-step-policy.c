/* SPDX-License-Identifier: MIT */
/*
 * tests/pipeline/test-step-policy.c: the step's pure numerics
 * (client/step-policy.c) alone, no daemon: the dynamic loss scale halves
 * on every overflow and doubles only after growth_interval good steps in
 * a row; the clip coefficient is torch's clip_grad_norm_ factor; the norm
 * takes the loss scale out.
 */
#include <math.h>

#include "test.h"
#include "step-policy.h"

static struct spw__loss_scale ls(float scale, uint32_t good)
{
	return (struct spw__loss_scale){ .scale = scale, .good_steps = good };
}

#define ASSERT_SCALE(s, want_scale, want_good)                                                  \
	do {                                                                                    \
		struct spw__loss_scale s_ = (s);                                                \
		if (s_.scale != (want_scale) || s_.good_steps != (want_good))                   \
			TEST_FAIL("%s: scale %.9g after %u good steps, want %.9g after %u", #s, \
				  (double)s_.scale, s_.good_steps, (double)(want_scale),        \
				  (unsigned)(want_good));                                       \
	} while (0)

static void loss_scale(void)
{
	struct spw__loss_scale s;

	/* An overflow halves the scale and forgets the good steps so far. */
	ASSERT_SCALE(spw__loss_scale_next(ls(65536.0f, 0), true, 3), 32768.0f, 0);
	ASSERT_SCALE(spw__loss_scale_next(ls(65536.0f, 2), true, 3), 32768.0f, 0);
	ASSERT_SCALE(spw__loss_scale_next(ls(3.0f, 1), true, 3), 1.5f, 0);

	/* Good steps only count until the interval's last, which doubles. */
	s = ls(1024.0f, 0);
	s = spw__loss_scale_next(s, false, 3);
	ASSERT_SCALE(s, 1024.0f, 1);
	s = spw__loss_scale_next(s, false, 3);
	ASSERT_SCALE(s, 1024.0f, 2);
	s = spw__loss_scale_next(s, false, 3);
	ASSERT_SCALE(s, 2048.0f, 0);

	/* An overflow in the middle of a run: a whole interval again. */
	s = spw__loss_scale_next(s, false, 3);
	s = spw__loss_scale_next(s, false, 3);
	ASSERT_SCALE(s, 2048.0f, 2);
	s = spw__loss_scale_next(s, true, 3);
	ASSERT_SCALE(s, 1024.0f, 0);
	s = spw__loss_scale_next(s, false, 3);
	s = spw__loss_scale_next(s, false, 3);
	ASSERT_SCALE(s, 1024.0f, 2);
	s = spw__loss_scale_next(s, false, 3);
	ASSERT_SCALE(s, 2048.0f, 0);

	/* Interval 1: every good step doubles. */
	s = ls(1.0f, 0);
	for (int i = 1; i <= 10; i++) {
		s = spw__loss_scale_next(s, false, 1);
		ASSERT_SCALE(s, ldexpf(1.0f, i), 0);
	}

	/* The default interval: the 1999th good step keeps, the 2000th doubles. */
	s = ls(65536.0f, 0);
	for (uint32_t i = 1; i < 2000; i++)
		s = spw__loss_scale_next(s, false, 2000);
	ASSERT_SCALE(s, 65536.0f, 1999);
	s = spw__loss_scale_next(s, false, 2000);
	ASSERT_SCALE(s, 131072.0f, 0);

	/* Overflows in a row halve each time, exactly (the scale stays a
	 * power of two), as exact mode's test with a 2^20 start relies on. */
	s = ls(ldexpf(1.0f, 20), 7);
	for (int i = 19; i >= -20; i--) {
		s = spw__loss_scale_next(s, true, 2000);
		ASSERT_SCALE(s, ldexpf(1.0f, i), 0);
	}
}

static void clip_coef(void)
{
	float c;

	/* No limit: never clips, whatever the norm. */
	ASSERT_TRUE(spw__clip_coef(0.0, 0.0f) == 1.0f);
	ASSERT_TRUE(spw__clip_coef(1e30, 0.0f) == 1.0f);

	/* Under the limit (or a zero gradient): 1. */
	ASSERT_TRUE(spw__clip_coef(0.5, 1.0f) == 1.0f);
	ASSERT_TRUE(spw__clip_coef(0.0, 1.0f) == 1.0f);
	ASSERT_TRUE(spw__clip_coef(0.999, 1.0f) == 1.0f);

	/* Over it: max_norm / (norm + 1e-6), in double, then to float. */
	c = spw__clip_coef(4.0, 1.0f);
	ASSERT_TRUE(c == (float)(1.0 / (4.0 + 1e-6)));
	ASSERT_TRUE(c < 0.25f && c > 0.2499999f);
	c = spw__clip_coef(10.0, 2.0f);
	ASSERT_TRUE(c == (float)(2.0 / (10.0 + 1e-6)));
	ASSERT_TRUE(fabsf(c - 0.2f) < 1e-6f);

	/* At the limit the 1e-6 clips by a hair, as torch does. */
	c = spw__clip_coef(1.0, 1.0f);
	ASSERT_TRUE(c < 1.0f && c > 0.99999f);

	/* The clipped gradient's norm is the limit (to float precision). */
	for (double norm = 1.5; norm < 1e6; norm *= 7.3) {
		c = spw__clip_coef(norm, 1.25f);
		if (fabs((double)c * norm - 1.25) > 1e-5)
			TEST_FAIL("norm %g clipped to %g, not 1.25", norm, (double)c * norm);
	}
}

static void grad_norm(void)
{
	ASSERT_TRUE(spw__grad_norm(0.0, 1.0f) == 0.0);
	ASSERT_TRUE(spw__grad_norm(25.0, 1.0f) == 5.0);
	ASSERT_TRUE(spw__grad_norm(16.0, 4.0f) == 1.0);
	/* Gradients scaled by 65536: sumsq (65536 * 3)^2 is a norm of 3. */
	ASSERT_TRUE(spw__grad_norm(65536.0 * 65536.0 * 9.0, 65536.0f) == 3.0);
	/* An overflow stays visible in the norm. */
	ASSERT_TRUE(isinf(spw__grad_norm(INFINITY, 1024.0f)));
	ASSERT_TRUE(isnan(spw__grad_norm(NAN, 1024.0f)));
}

int main(void)
{
	loss_scale();
	clip_coef();
	grad_norm();
	fprintf(stderr, "loss scale, clip coefficient and norm: ok\n");
	return 0;
}
