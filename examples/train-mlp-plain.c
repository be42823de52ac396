/* SPDX-License-Identifier: MIT */
/*
 * examples/train-mlp-plain.c: trains the example MLP with the reference
 * in-memory AdamW and no spillway at all. It is the baseline an offloaded
 * run of the same model must equal bit for bit, so it prints a checksum of
 * the final parameters.
 *
 *   train-mlp-plain [--steps N] [--batch B] [--seed S] [--lr X]
 *                   [--every K] [--check F]
 *
 * --check F exits 1 unless the mean loss of the last 10 steps is at most
 * the mean of the first 10 divided by F (the test uses it).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"

struct adam_state {
	float *m, *v;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: train-mlp-plain [--steps N] [--batch B] [--seed S] [--lr X] "
		   "[--every K] [--check F]\n");
}

/* FNV-1a over the parameters' bytes: equal runs print equal checksums. */
static uint64_t checksum(const struct mlp_tensor *t, int n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	int i;

	for (i = 0; i < n; i++) {
		const unsigned char *p = (const unsigned char *)t[i].param;
		size_t k;

		for (k = 0; k < t[i].count * sizeof(float); k++)
			h = (h ^ p[k]) * 0x100000001b3ull;
	}
	return h;
}

int main(int argc, char **argv)
{
	uint64_t steps = 200, batch = 32, seed = 1, every = 10, step;
	struct mlp_adamw hp = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
				.weight_decay = 0.01f };
	struct mlp_config cfg = { .n_in = 64, .n_hidden = 256, .n_hidden_layers = 2,
				  .n_out = 10 };
	float check = 0.0f, loss;
	struct mlp_loss_ends ends = { 0 };
	const struct mlp_tensor *t;
	struct adam_state *st = NULL;
	struct mlp_task *task = NULL;
	struct mlp *m = NULL;
	int32_t *y = NULL;
	float *x = NULL;
	int i, n = 0, r, correct, total_correct;
	int ret = 1;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if ((r = mlp_option_start(a, v, usage)) >= 0)
			return r;
		if (!strcmp(a, "--steps"))
			r = mlp_parse_u64(v, &steps);
		else if (!strcmp(a, "--batch"))
			r = mlp_parse_u64(v, &batch);
		else if (!strcmp(a, "--seed"))
			r = mlp_parse_u64(v, &seed);
		else if (!strcmp(a, "--every"))
			r = mlp_parse_u64(v, &every);
		else if (!strcmp(a, "--lr"))
			r = mlp_parse_float(v, &hp.lr);
		else if (!strcmp(a, "--check"))
			r = mlp_parse_float(v, &check);
		else
			r = -EINVAL;
		if (r < 0) {
			fprintf(stderr, "train-mlp-plain: bad option %s %s\n", a, v);
			usage(stderr);
			return 2;
		}
		i++;
	}
	if (batch == 0 || batch > 65536 || steps == 0 || (check > 0.0f && steps < 20)) {
		fprintf(stderr, "train-mlp-plain: need 1 <= batch <= 65536, steps >= 1 "
			"(>= 20 with --check)\n");
		return 2;
	}

	cfg.max_batch = (int)batch;
	if ((r = mlp_create(&cfg, seed, &m)) < 0 ||
	    (r = mlp_task_create(cfg.n_in, cfg.n_out, seed, &task)) < 0) {
		fprintf(stderr, "train-mlp-plain: cannot build the model: %s\n", strerror(-r));
		goto out;
	}
	t = mlp_tensors(m, &n);
	st = calloc((size_t)n, sizeof(*st));
	x = malloc(batch * (size_t)cfg.n_in * sizeof(float));
	y = malloc(batch * sizeof(int32_t));
	if (!st || !x || !y)
		goto oom;
	for (i = 0; i < n; i++) {
		st[i].m = calloc(t[i].count, sizeof(float));
		st[i].v = calloc(t[i].count, sizeof(float));
		if (!st[i].m || !st[i].v)
			goto oom;
	}
	printf("model: %d-%d", cfg.n_in, cfg.n_hidden);
	for (i = 1; i < cfg.n_hidden_layers; i++)
		printf("-%d", cfg.n_hidden);
	printf("-%d, %zu parameters in %d tensors; batch %ju, lr %g\n", cfg.n_out,
	       mlp_param_count(m), n, (uintmax_t)batch, (double)hp.lr);

	for (step = 1; step <= steps; step++) {
		mlp_task_batch(task, step - 1, (int)batch, x, y);
		if ((r = mlp_forward(m, x, y, (int)batch, &loss, &correct)) < 0 ||
		    (r = mlp_backward(m, NULL, NULL)) < 0) {
			fprintf(stderr, "train-mlp-plain: step %ju: %s\n", (uintmax_t)step,
				strerror(-r));
			goto out;
		}
		for (i = 0; i < n; i++)
			mlp_adamw_step(&hp, step, t[i].param, t[i].grad, st[i].m, st[i].v,
				       t[i].count);
		mlp_loss_ends_add(&ends, step, steps, loss);
		if (every && (step % every == 0 || step == 1))
			printf("step %4ju  loss %.4f  acc %.3f\n", (uintmax_t)step, (double)loss,
			       (double)correct / (double)batch);
	}

	/* Held-out batches: indices far past any training batch. */
	total_correct = 0;
	for (i = 0; i < 8; i++) {
		mlp_task_batch(task, (1ull << 40) + (uint64_t)i, (int)batch, x, y);
		mlp_forward(m, x, y, (int)batch, &loss, &correct);
		total_correct += correct;
	}
	printf("held-out accuracy %.3f\n", (double)total_correct / (8.0 * (double)batch));
	printf("checksum %016jx\n", (uintmax_t)checksum(t, n));

	if (check > 0.0f)
		printf("loss: first 10 steps %.4f, last 10 steps %.4f (want <= %.4f)\n",
		       (double)ends.first, (double)ends.last, (double)(ends.first / check));
	ret = mlp_loss_ends_check(&ends, check, "train-mlp-plain");
	goto out;

oom:
	fprintf(stderr, "train-mlp-plain: out of memory\n");
out:
	if (st)
		for (i = 0; i < n; i++) {
			free(st[i].m);
			free(st[i].v);
		}
	free(st);
	free(x);
	free(y);
	mlp_task_free(task);
	mlp_free(m);
	return ret;
}
