/* SPDX-License-Identifier: MIT */
/*
 * tests/pipeline/handover.h: handing the example MLP's gradients to the
 * optimizer as backward finishes them, one layer at a time. The MLP still
 * reads a layer's weights after reporting its gradients (to propagate to
 * the layer below), and in overlapped mode the optimizer may write the
 * updated weights at once after grad_ready, so a layer is handed over when
 * the next layer's gradients arrive, as torch's post-accumulate-grad hooks
 * would, and the last one after backward (handover_flush).
 *
 * A trainer embeds struct handover first and sets give, which hands one
 * tensor over (its own types, loss scale, ...).
 */
#ifndef SPW_TEST_HANDOVER_H
#define SPW_TEST_HANDOVER_H

#include "mlp.h"

struct handover {
	int (*give)(struct handover *h, const struct mlp_tensor *t, int index);
	const struct mlp_tensor *pend[2];
	int pend_index[2], npend;
};

/* Hands over the layer whose gradients came last. */
static inline int handover_flush(struct handover *h)
{
	int r = 0;

	for (int i = 0; i < h->npend && r == 0; i++)
		r = h->give(h, h->pend[i], h->pend_index[i]);
	h->npend = 0;
	return r;
}

/* mlp_backward's callback; arg is the struct handover. */
static inline int handover_on_grad(const struct mlp_tensor *t, int index, void *arg)
{
	struct handover *h = arg;
	int r = 0;

	if (index % 2 == 0) /* a weight: the layer above is done with */
		r = handover_flush(h);
	h->pend[h->npend] = t;
	h->pend_index[h->npend++] = index;
	return r;
}

#endif
