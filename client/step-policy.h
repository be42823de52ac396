/* SPDX-License-Identifier: MIT */
/*
 * client/step-policy.h: the numbers a step decides, as pure functions of
 * their inputs (no optimizer, no I/O, no state of their own). step.c
 * applies them; tests/pipeline/test-step-policy.c checks them alone.
 */
#ifndef SPW_CLIENT_STEP_POLICY_H
#define SPW_CLIENT_STEP_POLICY_H

#include <stdbool.h>
#include <stdint.h>

/* A dynamic loss scale and the good steps counted towards its growth. */
struct spw__loss_scale {
	float scale;
	uint32_t good_steps;    /* steps without overflow since the scale last changed */
};

/*
 * The dynamic loss scale after a step. A step whose gradients overflowed
 * (and was skipped) halves the scale and restarts the count; the
 * growth_interval-th good step in a row doubles it and restarts the count;
 * any other good step only counts. Halving and doubling are exact; there
 * is no floor or ceiling.
 */
struct spw__loss_scale spw__loss_scale_next(struct spw__loss_scale s, bool overflow,
					    uint32_t growth_interval);

/* The global gradient norm: sqrt(sumsq) of the gradients as handed over
 * (scaled), divided by the loss scale. */
double spw__grad_norm(double sumsq, float loss_scale);

/*
 * The factor global-norm clipping multiplies the gradients by, as torch's
 * clip_grad_norm_ computes it: max_norm / (norm + 1e-6) where that is
 * below 1, else 1. Without a limit (max_norm 0) it is 1.
 */
float spw__clip_coef(double norm, float max_norm);

#endif
