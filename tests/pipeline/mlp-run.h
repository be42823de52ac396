/* SPDX-License-Identifier: MIT */
/*
 * mlp-run.h: the example MLP trained through spillway, for tests that
 * compare it with a plain loop over kernels/ (test-state-dtype,
 * test-master-dtype). Include pipeline-fixture.h, mlp-fixture.h and
 * test.h first.
 */
#ifndef SPW_TEST_MLP_RUN_H
#define SPW_TEST_MLP_RUN_H

#include <errno.h>

/* A run's end: every tensor's master weights and moments (fp32; smaller
 * dtypes widened or decoded), and the loss on the held-out batches. */
struct mlp_run {
	struct mlp_state st;
	double eval_loss;
};

/* steps steps of the MLP with optimizer oo (host device) on session
 * name, a region of region bytes; the device copy of the weights must
 * equal the master weights read back. Returns 0 or -EOPNOTSUPP (no NVMe
 * tier). */
static inline int mlp_run_spillway(const struct spw_test_daemon *d, const char *name, uint64_t region,
				   const struct spw_optimizer_opts *oo, int steps, struct mlp_run *o)
{
	spw_client *cl = connect_client(d, name, region);
	struct mlp *m = mlp_model();
	struct mlp_task *task;
	const struct mlp_tensor *t;
	spw_optimizer *opt;
	uint32_t id[MAXT];
	float x[BATCH * 64], loss;
	int32_t y[BATCH];
	int n, r = 0;

	ASSERT_OK(spw_optimizer_new(cl, oo, &opt));
	ASSERT_OK(mlp_task_create(64, 10, 3, &task));
	t = mlp_tensors(m, &n);
	mlp_state_alloc(&o->st, t, n);
	for (int i = 0; i < n && r == 0; i++) {
		r = spw_optimizer_add(opt, t[i].name, 0, t[i].count, t[i].param, t[i].param, SPW_TYPE_F32, &id[i]);
		if (r == -EOPNOTSUPP)
			break;
		ASSERT_OK(r);
	}
	for (int step = 1; step <= steps && r == 0; step++) {
		ASSERT_OK(spw_optimizer_begin(opt, (uint64_t)step, NULL, 0.0f));
		for (int i = 0; i < n; i++)
			ASSERT_OK(spw_optimizer_wait_params(opt, id[i], NULL));
		mlp_task_batch(task, (uint64_t)step - 1, BATCH, x, y);
		ASSERT_OK(mlp_forward(m, x, y, BATCH, &loss, NULL));
		ASSERT_OK(mlp_backward(m, NULL, NULL));
		for (int i = 0; i < n; i++)
			ASSERT_OK(spw_optimizer_grad_ready(opt, id[i], SPW_ALL_CHUNKS, t[i].grad, t[i].count * 4,
							   SPW_TYPE_F32, NULL));
		ASSERT_OK(spw_optimizer_end(opt, NULL));
	}
	if (r == 0) {
		ASSERT_OK(spw_optimizer_sync(opt));
		for (int i = 0; i < n; i++) {
			ASSERT_OK(spw_optimizer_read(opt, id[i], SPW_STATE_PARAM, o->st.p[i]));
			ASSERT_OK(spw_optimizer_read(opt, id[i], SPW_STATE_EXP_AVG, o->st.m[i]));
			ASSERT_OK(spw_optimizer_read(opt, id[i], SPW_STATE_EXP_AVG_SQ, o->st.v[i]));
			/* The device copy is the stored weight. */
			ASSERT_EQ(memcmp(o->st.p[i], t[i].param, t[i].count * 4), 0);
		}
		o->eval_loss = mlp_eval_loss(m, task);
	}
	spw_optimizer_free(opt);
	ASSERT_OK(spw_client_detach(cl));
	spw_client_free(cl);
	mlp_task_free(task);
	mlp_free(m);
	return r;
}

/* The held-out loss of the untrained MLP (training must bring it down). */
static inline double mlp_untrained_loss(void)
{
	struct mlp *m = mlp_model();
	struct mlp_task *task;
	double l;

	ASSERT_OK(mlp_task_create(64, 10, 3, &task));
	l = mlp_eval_loss(m, task);
	mlp_task_free(task);
	mlp_free(m);
	return l;
}

/* Fails the test unless a and b hold the same bits in every tensor's
 * weights and moments. */
static inline void mlp_runs_same(const struct mlp_run *a, const struct mlp_run *b, const char *what)
{
	struct mlp *m = mlp_model();
	const struct mlp_tensor *t;
	int n;

	t = mlp_tensors(m, &n);
	for (int i = 0; i < n; i++) {
		size_t bytes = t[i].count * 4;

		if (memcmp(a->st.p[i], b->st.p[i], bytes) || memcmp(a->st.m[i], b->st.m[i], bytes) ||
		    memcmp(a->st.v[i], b->st.v[i], bytes))
			TEST_FAIL("%s: tensor %s differs from the plain run over kernels/", what, t[i].name);
	}
	mlp_free(m);
}

#endif
