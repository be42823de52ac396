/* SPDX-License-Identifier: MIT */
/*
 * client/step-settings.c: what a trainer changes between (or within) steps
 * without touching the state: a group's hyperparameters, the clip limit,
 * the open step's loss scale, and a tensor's step lag when state is
 * restored. Each is a few fields of the trainer's; none waits.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include "optimizer-private.h"

SPW_EXPORT int spw_optimizer_set_lag(spw_optimizer *o, uint32_t tensor, uint64_t lag)
{
	if (!o)
		return -EINVAL;
	if (o->in_step)
		return spw__opt_error(o, -EBUSY, "set_lag: a step is open (call spw_optimizer_end first)");
	if (tensor >= o->ntensors || o->tensors[tensor].frozen)
		return spw__opt_error(o, -EINVAL, "set_lag: no trainable tensor %u", tensor);
	o->tensors[tensor].lag = lag;
	return 0;
}

SPW_EXPORT int spw_optimizer_set_group(spw_optimizer *o, uint32_t group, const struct spw_param_group *g)
{
	if (!o)
		return -EINVAL;
	if (group >= o->ngroups || !g || !spw__group_ok(g))
		return spw__opt_error(o, -EINVAL, "set_group: no group %u (of %u), or a hyperparameter "
				      "out of range", group, o->ngroups);
	o->groups[group] = *g;
	/* Exact mode prepares the updates at end: the open step takes it. */
	if (o->in_step && o->mode == SPW_OPT_EXACT)
		o->lrs[group] = g->lr;
	return 0;
}

SPW_EXPORT int spw_optimizer_set_clip(spw_optimizer *o, float max_norm)
{
	if (!o)
		return -EINVAL;
	if (o->mode != SPW_OPT_EXACT || !isfinite(max_norm) || max_norm < 0.0f)
		return spw__opt_error(o, -EINVAL, "set_clip: max_norm %g: clipping by the global norm "
				      "takes SPW_OPT_EXACT and a finite max_norm >= 0", (double)max_norm);
	o->max_norm = max_norm;
	return 0;
}

SPW_EXPORT int spw_optimizer_set_loss_scale(spw_optimizer *o, float loss_scale)
{
	if (!o)
		return -EINVAL;
	if (o->mode != SPW_OPT_EXACT || !isfinite(loss_scale) || loss_scale <= 0.0f)
		return spw__opt_error(o, -EINVAL, "set_loss_scale %g: takes SPW_OPT_EXACT and a finite "
				      "scale > 0", (double)loss_scale);
	if (!o->in_step)
		return spw__opt_error(o, -EPROTO, "set_loss_scale: no step is open (call "
				      "spw_optimizer_begin first)");
	o->loss_scale = loss_scale;
	return 0;
}
