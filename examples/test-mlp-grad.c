/* SPDX-License-Identifier: MIT */
/*
 * examples/test-mlp-grad.c: the example MLP's backward against finite
 * differences, the order and timing of its gradient callbacks, its
 * determinism, and the reference AdamW against the formula in double.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"

#define CHECK(cond, ...)                                                        \
	do {                                                                    \
		if (!(cond)) {                                                  \
			fprintf(stderr, "%s:%d: %s failed: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                           \
			fputc('\n', stderr);                                    \
			exit(1);                                                \
		}                                                               \
	} while (0)

static const struct mlp_config tiny = { .n_in = 5, .n_hidden = 7, .n_hidden_layers = 2,
					.n_out = 4, .max_batch = 3 };

static float loss_of(struct mlp *m, const float *x, const int32_t *y, int batch)
{
	float loss;

	CHECK(mlp_forward(m, x, y, batch, &loss, NULL) == 0, "forward");
	return loss;
}

/* Central differences in fp32 with a step large enough that rounding in
 * the loss (~1e-7) stays far below the truncation error (~h^2). */
static void test_finite_differences(void)
{
	const float h = 1e-2f;
	struct mlp_task *task;
	struct mlp *m;
	const struct mlp_tensor *t;
	float x[3 * 5], *saved;
	int32_t y[3];
	int n, i, checked = 0;
	size_t k;
	double worst = 0.0;

	CHECK(mlp_create(&tiny, 11, &m) == 0, "create");
	CHECK(mlp_task_create(tiny.n_in, tiny.n_out, 5, &task) == 0, "task");
	mlp_task_batch(task, 0, 3, x, y);
	/* Scale the inputs down so the tanh units sit in their curved middle,
	 * not saturated, where a wrong derivative would hide. */
	for (i = 0; i < 15; i++)
		x[i] *= 0.3f;
	t = mlp_tensors(m, &n);
	loss_of(m, x, y, 3);
	CHECK(mlp_backward(m, NULL, NULL) == 0, "backward");
	saved = malloc(mlp_param_count(m) * sizeof(float));
	CHECK(saved, "oom");
	for (i = 0, k = 0; i < n; i++) {
		memcpy(saved + k, t[i].grad, t[i].count * sizeof(float));
		k += t[i].count;
	}

	for (i = 0, k = 0; i < n; i++) {
		size_t j;

		for (j = 0; j < t[i].count; j++, k++) {
			float p0 = t[i].param[j], lp, lm;
			double fd, g = saved[k], err;

			t[i].param[j] = p0 + h;
			lp = loss_of(m, x, y, 3);
			t[i].param[j] = p0 - h;
			lm = loss_of(m, x, y, 3);
			t[i].param[j] = p0;
			fd = ((double)lp - (double)lm) / (2.0 * (double)h);
			err = fabs(fd - g) / (1e-2 + fabs(g));
			if (err > worst)
				worst = err;
			CHECK(fabs(fd - g) <= 5e-4 + 2e-2 * fabs(g),
			      "%s[%zu]: backward %.7g, finite difference %.7g", t[i].name, j, g, fd);
			checked++;
		}
	}
	printf("finite differences: %d parameters, worst relative error %.2e\n", checked, worst);
	CHECK(checked == (int)mlp_param_count(m), "counted %d", checked);
	free(saved);
	mlp_task_free(task);
	mlp_free(m);
}

struct order {
	int calls;
	int stop_at;
	float *copies[2 * MLP_MAX_HIDDEN_LAYERS + 2];
};

static int on_grad(const struct mlp_tensor *t, int index, void *arg)
{
	struct order *o = arg;

	CHECK(index == o->calls, "callback %d for tensor %d (%s)", o->calls, index, t->name);
	o->copies[index] = malloc(t->count * sizeof(float));
	CHECK(o->copies[index], "oom");
	memcpy(o->copies[index], t->grad, t->count * sizeof(float));
	o->calls++;
	return o->calls == o->stop_at ? -ECANCELED : 0;
}

/* Callbacks come last layer first, weight before bias, each with its final
 * gradient; a non-zero return stops backward. */
static void test_callbacks(void)
{
	static const char *const names[] = { "fc3.weight", "fc3.bias", "fc2.weight",
					     "fc2.bias", "fc1.weight", "fc1.bias" };
	struct order o = { 0 };
	struct mlp_task *task;
	struct mlp *m;
	const struct mlp_tensor *t;
	float x[3 * 5], loss;
	int32_t y[3], bad[3] = { 0, 4, 1 };
	int n, i;

	CHECK(mlp_create(&tiny, 3, &m) == 0, "create");
	CHECK(mlp_backward(m, NULL, NULL) == -EINVAL, "backward before forward");
	CHECK(mlp_task_create(tiny.n_in, tiny.n_out, 3, &task) == 0, "task");
	mlp_task_batch(task, 7, 3, x, y);
	t = mlp_tensors(m, &n);
	CHECK(n == 6, "%d tensors", n);
	for (i = 0; i < n; i++)
		CHECK(strcmp(t[i].name, names[i]) == 0, "tensor %d is %s", i, t[i].name);
	CHECK(t[0].rows == 4 && t[0].cols == 7 && t[0].count == 28, "fc3.weight shape");
	CHECK(t[5].count == 7, "fc1.bias count");

	CHECK(mlp_forward(m, x, bad, 3, &loss, NULL) == -EINVAL, "label out of range");
	CHECK(mlp_forward(m, x, y, 4, &loss, NULL) == -EINVAL, "batch over max");
	CHECK(mlp_forward(m, x, y, 0, &loss, NULL) == -EINVAL, "empty batch");

	CHECK(mlp_forward(m, x, y, 3, &loss, NULL) == 0, "forward");
	CHECK(mlp_backward(m, on_grad, &o) == 0, "backward");
	CHECK(o.calls == n, "%d callbacks", o.calls);
	for (i = 0; i < n; i++) {
		CHECK(memcmp(o.copies[i], t[i].grad, t[i].count * sizeof(float)) == 0,
		      "%s changed after its callback", t[i].name);
		free(o.copies[i]);
	}

	o = (struct order){ .stop_at = 3 };
	CHECK(mlp_backward(m, on_grad, &o) == -ECANCELED, "stop");
	CHECK(o.calls == 3, "%d callbacks after stop", o.calls);
	for (i = 0; i < 3; i++)
		free(o.copies[i]);
	mlp_task_free(task);
	mlp_free(m);
}

/* A few training steps, returning a copy of every parameter. */
static float *train(uint64_t seed, int steps)
{
	const struct mlp_config cfg = { .n_in = 16, .n_hidden = 32, .n_hidden_layers = 2,
					.n_out = 5, .max_batch = 8 };
	const struct mlp_adamw hp = { 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f };
	struct mlp_task *task;
	struct mlp *m;
	const struct mlp_tensor *t;
	float x[8 * 16], loss, *out, *mv[2 * 3][2];
	int32_t y[8];
	int n, i, s;
	size_t k;

	CHECK(mlp_create(&cfg, seed, &m) == 0, "create");
	CHECK(mlp_task_create(cfg.n_in, cfg.n_out, seed, &task) == 0, "task");
	t = mlp_tensors(m, &n);
	for (i = 0; i < n; i++) {
		mv[i][0] = calloc(t[i].count, sizeof(float));
		mv[i][1] = calloc(t[i].count, sizeof(float));
		CHECK(mv[i][0] && mv[i][1], "oom");
	}
	for (s = 1; s <= steps; s++) {
		mlp_task_batch(task, (uint64_t)s, 8, x, y);
		CHECK(mlp_forward(m, x, y, 8, &loss, NULL) == 0, "forward");
		CHECK(mlp_backward(m, NULL, NULL) == 0, "backward");
		for (i = 0; i < n; i++)
			CHECK(mlp_adamw_step(&hp, (uint64_t)s, t[i].param, t[i].grad, mv[i][0],
					     mv[i][1], t[i].count) == 0, "adamw");
	}
	out = malloc(mlp_param_count(m) * sizeof(float));
	CHECK(out, "oom");
	for (i = 0, k = 0; i < n; i++) {
		memcpy(out + k, t[i].param, t[i].count * sizeof(float));
		k += t[i].count;
		free(mv[i][0]);
		free(mv[i][1]);
	}
	mlp_task_free(task);
	mlp_free(m);
	return out;
}

static void test_determinism(void)
{
	const size_t n = 16 * 32 + 32 + 32 * 32 + 32 + 32 * 5 + 5;
	float *a = train(42, 5), *b = train(42, 5), *c = train(43, 5);

	CHECK(memcmp(a, b, n * sizeof(float)) == 0, "same seed, different parameters");
	CHECK(memcmp(a, c, n * sizeof(float)) != 0, "different seeds, same parameters");
	free(a);
	free(b);
	free(c);
}

/* The reference AdamW against the formula evaluated in double: equal to
 * within fp32 rounding over many steps, and on the first step a move of
 * lr * g / (|g| + eps) (plus decay): bias correction makes m/sqrt(v) = g/|g|. */
static void test_adamw(void)
{
	enum { N = 64, STEPS = 50 };
	const struct mlp_adamw hp = { 3e-3f, 0.9f, 0.95f, 1e-6f, 0.1f };
	float p[N], g[N] = { 0 }, m[N] = { 0 }, v[N] = { 0 };
	double pd[N], md[N] = { 0 }, vd[N] = { 0 }, p0[N];
	uint64_t rng = 1;
	int i, s;

	for (i = 0; i < N; i++) {
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = (float)((double)(rng >> 40) / (double)(1ull << 24) - 0.5);
		pd[i] = p0[i] = p[i];
	}
	CHECK(mlp_adamw_step(&hp, 0, p, g, m, v, N) == -EINVAL, "step 0");
	CHECK(mlp_adamw_step(&(struct mlp_adamw){ 1e-3f, 1.0f, 0.9f, 1e-8f, 0 }, 1, p, g, m, v,
			     N) == -EINVAL, "beta1 = 1");

	for (s = 1; s <= STEPS; s++) {
		double bc1 = 1.0 - pow(0.9f, s), bc2 = 1.0 - pow(0.95f, s);

		for (i = 0; i < N; i++) {
			rng = rng * 6364136223846793005ull + 1442695040888963407ull;
			g[i] = (float)((double)(rng >> 40) / (double)(1ull << 24) - 0.5) * 0.1f;
		}
		CHECK(mlp_adamw_step(&hp, (uint64_t)s, p, g, m, v, N) == 0, "adamw");
		for (i = 0; i < N; i++) {
			double b1 = (double)hp.beta1, b2 = (double)hp.beta2, lr = (double)hp.lr;
			double gi = g[i];

			pd[i] -= lr * (double)hp.weight_decay * pd[i];
			md[i] = b1 * md[i] + (1.0 - b1) * gi;
			vd[i] = b2 * vd[i] + (1.0 - b2) * gi * gi;
			pd[i] -= lr * (md[i] / bc1) / (sqrt(vd[i] / bc2) + (double)hp.eps);
			CHECK(fabs((double)p[i] - pd[i]) <= 1e-5 * (1.0 + fabs(pd[i])),
			      "step %d elem %d: %.9g vs %.9g", s, i, (double)p[i], pd[i]);
			if (s == 1) {
				double want = p0[i] * (1.0 - lr * (double)hp.weight_decay) -
					      lr * gi / (fabs(gi) + (double)hp.eps);

				CHECK(fabs(want - (double)p[i]) <= 1e-6, "first step elem %d: "
				      "%.9g vs %.9g", i, (double)p[i], want);
			}
		}
	}
	printf("adamw: %d steps of %d elements within 1e-5 of the formula in double\n", STEPS,
	       N);
}

int main(void)
{
	test_finite_differences();
	test_callbacks();
	test_determinism();
	test_adamw();
	return 0;
}
