/* SPDX-License-Identifier: MIT */
/*
 * examples/mlp.h: a small, real model for the example trainers: a
 * multi-layer perceptron (tanh hidden layers, softmax cross-entropy) in
 * plain fp32 C, a synthetic classification task to train it on, and a
 * reference in-memory AdamW.
 *
 * Everything is deterministic: the same seeds give bit-identical
 * parameters, batches, losses and gradients on the same build (one thread,
 * a fixed order of every sum).
 *
 * Parameters are separate flat arrays per layer in torch's layout
 * (fcN.weight is [out][in] row-major, fcN.bias is [out]), so a trainer can
 * hand each tensor to the offload pipeline as it is. Backward reports each
 * tensor's gradient through a callback the moment it is final, last layer
 * first, which is what lets the pipeline stream gradients out while
 * backward is still running.
 */
#ifndef SPW_EXAMPLES_MLP_H
#define SPW_EXAMPLES_MLP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MLP_MAX_HIDDEN_LAYERS 8

struct mlp_config {
	int n_in;               /* input features, e.g. 64 */
	int n_hidden;           /* width of every hidden layer, e.g. 256 */
	int n_hidden_layers;    /* 1 .. MLP_MAX_HIDDEN_LAYERS, e.g. 2 */
	int n_out;              /* classes, e.g. 10 */
	int max_batch;          /* the largest batch forward will be given */
};

/* One parameter tensor and its gradient (same shape, same count). */
struct mlp_tensor {
	const char *name;       /* "fc3.weight", "fc3.bias", ... */
	float *param;
	float *grad;            /* written by mlp_backward */
	size_t count;
	int rows, cols;         /* weight: [rows][cols]; bias: rows x 1 */
};

struct mlp;

/*
 * Builds a model with torch's default Linear initialisation
 * (uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases) from
 * seed. Returns 0, -EINVAL for an impossible config, -ENOMEM.
 */
int mlp_create(const struct mlp_config *cfg, uint64_t seed, struct mlp **ret);

/* Frees m (NULL is fine); returns NULL. */
struct mlp *mlp_free(struct mlp *m);

/*
 * The parameter tensors in the order backward finishes their gradients:
 * last layer first, each layer's weight before its bias. *n gets the count
 * (2 per layer). The array lives as long as m.
 */
const struct mlp_tensor *mlp_tensors(const struct mlp *m, int *n);

/* Total parameters. */
size_t mlp_param_count(const struct mlp *m);

/*
 * Forward pass on batch rows of x ([batch][n_in]) with labels in
 * [0, n_out): writes the mean cross-entropy to *loss and, when ncorrect
 * is not NULL, how many rows the model classifies right. Keeps what
 * backward needs. Returns 0, or -EINVAL (batch out of range, bad label).
 */
int mlp_forward(struct mlp *m, const float *x, const int32_t *labels, int batch, float *loss,
		int *ncorrect);

/*
 * Called by mlp_backward once t->grad is final; index is t's position in
 * mlp_tensors(). A non-zero return stops backward, which returns it.
 */
typedef int (*mlp_grad_fn)(const struct mlp_tensor *t, int index, void *arg);

/*
 * Gradients of the last forward's mean loss, written (not accumulated)
 * into every tensor's grad, reporting each through fn (may be NULL).
 * Returns 0, -EINVAL when there was no forward, or fn's non-zero return.
 */
int mlp_backward(struct mlp *m, mlp_grad_fn fn, void *arg);

/*
 * The synthetic task: n_classes classes, each the union of a few Gaussian
 * clusters in n_in dimensions (so no linear model separates them), centres
 * drawn from seed. Batches are a pure function of (seed, index).
 */
struct mlp_task;

int mlp_task_create(int n_in, int n_classes, uint64_t seed, struct mlp_task **ret);
struct mlp_task *mlp_task_free(struct mlp_task *t);
/* Fills x ([batch][n_in]) and y ([batch]) with batch number index. */
void mlp_task_batch(const struct mlp_task *t, uint64_t index, int batch, float *x, int32_t *y);

/*
 * Reference AdamW, in memory, exactly as torch.optim.AdamW (torch 2.x,
 * _single_tensor_adamw, foreach=False) and in the same operation order and
 * rounding as kernels/kernels.h documents, so the real kernels must match
 * it bit for bit:
 *
 *   p = p * (1 - lr*wd)                 decay rounded to float once
 *   m = m + (1-b1) * (g - m)            exp_avg.lerp_(grad, 1 - beta1)
 *   v = v * b2 + ((1-b2) * g) * g
 *   p = p + (-lr/(1-b1^t)) * (m / (sqrt(v) / sqrt(1-b2^t) + eps))
 *
 * Bias corrections in double, each constant rounded to float once.
 * step is t, 1 for the first update. Returns 0, or -EINVAL when step is 0
 * or a hyperparameter is out of range.
 */
struct mlp_adamw {
	float lr, beta1, beta2, eps, weight_decay;
};

int mlp_adamw_step(const struct mlp_adamw *hp, uint64_t step, float *param, const float *grad,
		   float *exp_avg, float *exp_avg_sq, size_t n);

/*
 * What the example trainers (train-mlp, train-mlp-plain) share.
 */

/* A whole string as a number: 0, or -EINVAL (nothing, trailing text, out
 * of range). */
int mlp_parse_u64(const char *s, uint64_t *out);
int mlp_parse_float(const char *s, float *out);

/* The start of reading option a with value v (NULL when a is last):
 * "--help" prints usage to stdout and returns 0, a missing value prints it
 * to stderr and returns 2 (the exit codes); otherwise -1: go on. */
int mlp_option_start(const char *a, const char *v, void (*usage)(FILE *f));

/* The mean loss of the first 10 and of the last 10 of steps steps. */
struct mlp_loss_ends {
	float first, last;
};

void mlp_loss_ends_add(struct mlp_loss_ends *e, uint64_t step, uint64_t steps, float loss);

/* --check F: 0 when the loss fell at least F times (last <= first / F) or
 * check is 0; else says so on stderr, as prog, and returns 1. */
int mlp_loss_ends_check(const struct mlp_loss_ends *e, float check, const char *prog);

#endif
