/* SPDX-License-Identifier: MIT */
/*
 * tests/pipeline/mlp-fixture.h: the small MLP the pipeline tests train
 * (examples/mlp.h) and the state a run leaves, with the chunk and tile
 * sizes the reference runs need to sum the norm as the pipeline does.
 * Include after pipeline-fixture.h (PAGE).
 */
#ifndef SPW_TEST_MLP_FIXTURE_H
#define SPW_TEST_MLP_FIXTURE_H

#include <stdlib.h>
#include <string.h>

#include "mlp.h"
#include "kernels.h"

#define CHUNK (PAGE / 4) /* fp32 elements of one page */
#define TILE 16384u      /* the pool's tile: the norm is summed per tile */
#define BATCH 16
#define MAXT (2 * (MLP_MAX_HIDDEN_LAYERS + 1))

/* Every tensor's master weights and moments after a run, as fp32. */
struct mlp_state {
	int n;
	float *p[MAXT], *m[MAXT], *v[MAXT];
};

/* 64 -> 512 -> 512 -> 10, the same weights every time (seed 7). */
static inline struct mlp *mlp_model(void)
{
	struct mlp_config mc = { .n_in = 64, .n_hidden = 512, .n_hidden_layers = 2, .n_out = 10,
				 .max_batch = BATCH };
	struct mlp *m;

	ASSERT_OK(mlp_create(&mc, 7, &m));
	return m;
}

static inline void mlp_state_alloc(struct mlp_state *o, const struct mlp_tensor *t, int n)
{
	memset(o, 0, sizeof(*o));
	o->n = n;
	for (int i = 0; i < n; i++) {
		o->p[i] = calloc(t[i].count, 4);
		o->m[i] = calloc(t[i].count, 4);
		o->v[i] = calloc(t[i].count, 4);
		ASSERT_TRUE(o->p[i] && o->m[i] && o->v[i]);
	}
}

static inline void mlp_state_free(struct mlp_state *o)
{
	for (int i = 0; i < o->n; i++) {
		free(o->p[i]);
		free(o->m[i]);
		free(o->v[i]);
	}
}

/* The norm as the pipeline sums it: square sums per tile of each chunk,
 * chunks in (tensor, chunk) order. */
static inline void add_sumsq(const struct spw_kernels *k, const float *g, size_t count, double *total)
{
	for (size_t c = 0; c < count; c += CHUNK) {
		size_t n = count - c < CHUNK ? count - c : CHUNK;
		double s = 0.0;

		for (size_t b = 0; b < n; b += TILE)
			s += k->sumsq[SPW_DTYPE_F32](g + c + b, n - b < TILE ? n - b : TILE);
		*total += s;
	}
}

/* Mean loss over 16 batches of task the training never sees. */
static inline double mlp_eval_loss(struct mlp *m, const struct mlp_task *task)
{
	float x[BATCH * 64], loss;
	int32_t y[BATCH];
	double sum = 0.0;

	for (int b = 0; b < 16; b++) {
		mlp_task_batch(task, 1000000u + (uint64_t)b, BATCH, x, y);
		ASSERT_OK(mlp_forward(m, x, y, BATCH, &loss, NULL));
		sum += loss;
	}
	return sum / 16.0;
}

#endif
