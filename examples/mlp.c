/* SPDX-License-Identifier: MIT */
/*
 * examples/mlp.c: see mlp.h. Loops are ordered so the innermost one walks
 * contiguous memory without a reduction, which the compiler vectorises
 * without reassociating sums (results stay bit-identical across runs).
 * Only forward's dot products reduce, in plain index order.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"

#define MAX_LAYERS (MLP_MAX_HIDDEN_LAYERS + 1)

struct mlp {
	struct mlp_config cfg;
	int nlayers;
	int dim[MAX_LAYERS + 1];        /* dim[0] = n_in ... dim[nlayers] = n_out */
	/* Tensors in backward order: layer l (1-based) is at
	 * 2*(nlayers-l) (weight) and 2*(nlayers-l)+1 (bias). */
	struct mlp_tensor t[2 * MAX_LAYERS];
	char names[2 * MAX_LAYERS][24];
	/* act[l]: the input of layer l+1, [batch][dim[l]]; act[0] is x.
	 * Hidden activations are tanh outputs, kept for tanh' = 1 - a^2. */
	float *act[MAX_LAYERS];
	float *probs;                   /* softmax of the logits, [batch][n_out] */
	float *dz, *dz_prev;            /* backward scratch, [batch][max dim] */
	int32_t *labels;
	int batch;                      /* of the last forward; 0: none */
	float *mem;                     /* every float array above, one block */
};

/* splitmix64: tiny, well mixed, and the same everywhere. */
static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static double uniform(uint64_t *s)
{
	return (double)(splitmix(s) >> 11) * 0x1.0p-53;
}

/* Standard normal (Box-Muller, one value per call for simplicity). */
static double normal(uint64_t *s)
{
	double u1 = 1.0 - uniform(s), u2 = uniform(s);

	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

static struct mlp_tensor *weight(struct mlp *m, int l)
{
	return &m->t[2 * (m->nlayers - l)];
}

static struct mlp_tensor *bias(struct mlp *m, int l)
{
	return &m->t[2 * (m->nlayers - l) + 1];
}

int mlp_create(const struct mlp_config *cfg, uint64_t seed, struct mlp **ret)
{
	struct mlp *m;
	size_t total = 0, off = 0, maxd = 0;
	uint64_t rng = seed;
	int l, i;

	if (!cfg || !ret || cfg->n_in <= 0 || cfg->n_hidden <= 0 || cfg->n_out <= 1 ||
	    cfg->n_hidden_layers < 1 || cfg->n_hidden_layers > MLP_MAX_HIDDEN_LAYERS ||
	    cfg->max_batch <= 0 || cfg->n_in > (1 << 20) || cfg->n_hidden > (1 << 16) ||
	    cfg->n_out > (1 << 20) || cfg->max_batch > (1 << 20))
		return -EINVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->cfg = *cfg;
	m->nlayers = cfg->n_hidden_layers + 1;
	m->dim[0] = cfg->n_in;
	for (l = 1; l < m->nlayers; l++)
		m->dim[l] = cfg->n_hidden;
	m->dim[m->nlayers] = cfg->n_out;

	for (l = 0; l <= m->nlayers; l++)
		if ((size_t)m->dim[l] > maxd)
			maxd = (size_t)m->dim[l];
	for (l = 1; l <= m->nlayers; l++)
		total += 2 * ((size_t)m->dim[l] * (size_t)m->dim[l - 1] + (size_t)m->dim[l]);
	for (l = 0; l < m->nlayers; l++)
		total += (size_t)cfg->max_batch * (size_t)m->dim[l];
	total += (size_t)cfg->max_batch * (size_t)cfg->n_out;
	total += 2 * (size_t)cfg->max_batch * maxd;

	m->mem = calloc(total, sizeof(float));
	m->labels = calloc((size_t)cfg->max_batch, sizeof(int32_t));
	if (!m->mem || !m->labels) {
		mlp_free(m);
		return -ENOMEM;
	}
	for (l = 1; l <= m->nlayers; l++) {
		struct mlp_tensor *w = weight(m, l), *b = bias(m, l);
		int k = (int)(w - m->t);

		snprintf(m->names[k], sizeof(m->names[k]), "fc%d.weight", l);
		snprintf(m->names[k + 1], sizeof(m->names[k + 1]), "fc%d.bias", l);
		*w = (struct mlp_tensor){ .name = m->names[k], .rows = m->dim[l],
					  .cols = m->dim[l - 1],
					  .count = (size_t)m->dim[l] * (size_t)m->dim[l - 1] };
		*b = (struct mlp_tensor){ .name = m->names[k + 1], .rows = m->dim[l], .cols = 1,
					  .count = (size_t)m->dim[l] };
		w->param = m->mem + off;
		off += w->count;
		w->grad = m->mem + off;
		off += w->count;
		b->param = m->mem + off;
		off += b->count;
		b->grad = m->mem + off;
		off += b->count;
	}
	for (l = 0; l < m->nlayers; l++) {
		m->act[l] = m->mem + off;
		off += (size_t)cfg->max_batch * (size_t)m->dim[l];
	}
	m->probs = m->mem + off;
	off += (size_t)cfg->max_batch * (size_t)cfg->n_out;
	m->dz = m->mem + off;
	off += (size_t)cfg->max_batch * maxd;
	m->dz_prev = m->mem + off;

	/* torch.nn.Linear's default: kaiming_uniform(a=sqrt(5)) for the
	 * weight, which is uniform(+-1/sqrt(fan_in)), and the same bound for
	 * the bias. Layer by layer, weight then bias, in index order. */
	for (l = 1; l <= m->nlayers; l++) {
		double bound = 1.0 / sqrt((double)m->dim[l - 1]);
		struct mlp_tensor *w = weight(m, l), *b = bias(m, l);

		for (i = 0; i < (int)w->count; i++)
			w->param[i] = (float)((2.0 * uniform(&rng) - 1.0) * bound);
		for (i = 0; i < (int)b->count; i++)
			b->param[i] = (float)((2.0 * uniform(&rng) - 1.0) * bound);
	}
	*ret = m;
	return 0;
}

struct mlp *mlp_free(struct mlp *m)
{
	if (m) {
		free(m->mem);
		free(m->labels);
		free(m);
	}
	return NULL;
}

const struct mlp_tensor *mlp_tensors(const struct mlp *m, int *n)
{
	if (n)
		*n = 2 * m->nlayers;
	return m->t;
}

size_t mlp_param_count(const struct mlp *m)
{
	size_t n = 0;
	int i;

	for (i = 0; i < 2 * m->nlayers; i++)
		n += m->t[i].count;
	return n;
}

/* out[b][o] = bias[o] + sum_i W[o][i] * in[b][i], i in order. */
static void linear(const float *in, int batch, int din, const float *W, const float *bvec,
		   int dout, float *out)
{
	int b, o, i;

	for (b = 0; b < batch; b++) {
		const float *x = in + (size_t)b * din;
		float *y = out + (size_t)b * dout;

		for (o = 0; o < dout; o++) {
			const float *w = W + (size_t)o * din;
			float acc = 0.0f;

			for (i = 0; i < din; i++)
				acc += w[i] * x[i];
			y[o] = acc + bvec[o];
		}
	}
}

int mlp_forward(struct mlp *m, const float *x, const int32_t *labels, int batch, float *loss,
		int *ncorrect)
{
	const int L = m->nlayers, nout = m->cfg.n_out;
	double sum = 0.0;
	int l, b, o, correct = 0;

	m->batch = 0;
	if (batch <= 0 || batch > m->cfg.max_batch || !x || !labels)
		return -EINVAL;
	for (b = 0; b < batch; b++)
		if (labels[b] < 0 || labels[b] >= nout)
			return -EINVAL;
	memcpy(m->labels, labels, (size_t)batch * sizeof(*labels));
	memcpy(m->act[0], x, (size_t)batch * (size_t)m->dim[0] * sizeof(float));

	for (l = 1; l < L; l++) {
		float *a = m->act[l];
		size_t n = (size_t)batch * (size_t)m->dim[l];
		size_t k;

		linear(m->act[l - 1], batch, m->dim[l - 1], weight(m, l)->param,
		       bias(m, l)->param, m->dim[l], a);
		for (k = 0; k < n; k++)
			a[k] = tanhf(a[k]);
	}
	linear(m->act[L - 1], batch, m->dim[L - 1], weight(m, L)->param, bias(m, L)->param,
	       nout, m->probs);

	/* Softmax cross-entropy per row, shifted by the row max so exp never
	 * overflows; the loss is -log p[y] = log(sum exp(z - max)) - (z[y] - max). */
	for (b = 0; b < batch; b++) {
		float *z = m->probs + (size_t)b * nout;
		float zmax = z[0], s = 0.0f, zy;
		int arg = 0;

		for (o = 1; o < nout; o++) {
			if (z[o] > zmax) {
				zmax = z[o];
				arg = o;
			}
		}
		correct += arg == labels[b];
		zy = z[labels[b]] - zmax;
		for (o = 0; o < nout; o++) {
			z[o] = expf(z[o] - zmax);
			s += z[o];
		}
		sum += (double)(logf(s) - zy);
		for (o = 0; o < nout; o++)
			z[o] /= s;
	}
	*loss = (float)(sum / batch);
	if (ncorrect)
		*ncorrect = correct;
	m->batch = batch;
	return 0;
}

int mlp_backward(struct mlp *m, mlp_grad_fn fn, void *arg)
{
	const int L = m->nlayers, batch = m->batch;
	const float inv = 1.0f / (float)batch;
	float *dz = m->dz, *dzp = m->dz_prev, *tmp;
	int l, b, o, i, r;

	if (batch == 0)
		return -EINVAL;
	/* d(mean loss)/d(logits) = (softmax - onehot) / batch. */
	for (b = 0; b < batch; b++) {
		const float *p = m->probs + (size_t)b * m->dim[L];
		float *d = dz + (size_t)b * m->dim[L];

		for (o = 0; o < m->dim[L]; o++)
			d[o] = p[o] * inv;
		d[m->labels[b]] -= inv;
	}

	for (l = L; l >= 1; l--) {
		struct mlp_tensor *w = weight(m, l), *bs = bias(m, l);
		const int din = m->dim[l - 1], dout = m->dim[l];
		const float *a = m->act[l - 1];

		/* dW[o][:] = sum_b dz[b][o] * a[b][:], b in order. */
		memset(w->grad, 0, w->count * sizeof(float));
		memset(bs->grad, 0, bs->count * sizeof(float));
		for (b = 0; b < batch; b++) {
			const float *d = dz + (size_t)b * dout, *ab = a + (size_t)b * din;

			for (o = 0; o < dout; o++) {
				float *g = w->grad + (size_t)o * din;
				const float s = d[o];

				for (i = 0; i < din; i++)
					g[i] += s * ab[i];
				bs->grad[o] += s;
			}
		}
		/* Both are final: hand them out before the rest of backward. */
		if (fn && (r = fn(w, (int)(w - m->t), arg)) != 0)
			return r;
		if (fn && (r = fn(bs, (int)(bs - m->t), arg)) != 0)
			return r;
		if (l == 1)
			break;

		/* da[b][:] = sum_o dz[b][o] * W[o][:], then through tanh. */
		for (b = 0; b < batch; b++) {
			const float *d = dz + (size_t)b * dout, *ab = a + (size_t)b * din;
			float *da = dzp + (size_t)b * din;

			memset(da, 0, (size_t)din * sizeof(float));
			for (o = 0; o < dout; o++) {
				const float *wr = w->param + (size_t)o * din;
				const float s = d[o];

				for (i = 0; i < din; i++)
					da[i] += s * wr[i];
			}
			for (i = 0; i < din; i++)
				da[i] *= 1.0f - ab[i] * ab[i];
		}
		tmp = dz;
		dz = dzp;
		dzp = tmp;
	}
	return 0;
}

/* ---- the synthetic task ---- */

#define CLUSTERS_PER_CLASS 4

struct mlp_task {
	int n_in, n_classes;
	uint64_t seed;
	float noise;
	float *centres;         /* [n_classes * CLUSTERS_PER_CLASS][n_in] */
};

int mlp_task_create(int n_in, int n_classes, uint64_t seed, struct mlp_task **ret)
{
	struct mlp_task *t;
	uint64_t rng = seed ^ 0x7461736b7461736bull;    /* not the model's stream */
	size_t i, n;

	if (!ret || n_in <= 0 || n_classes <= 1 || n_in > (1 << 20) || n_classes > (1 << 16))
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	n = (size_t)n_classes * CLUSTERS_PER_CLASS * (size_t)n_in;
	t->centres = malloc(n * sizeof(float));
	if (!t->centres) {
		free(t);
		return -ENOMEM;
	}
	t->n_in = n_in;
	t->n_classes = n_classes;
	t->seed = seed;
	/* Centres ~ N(0, 1) per coordinate sit about sqrt(2 n_in) apart;
	 * noise of that order per sample makes neighbours overlap a little,
	 * so the loss falls steadily without reaching zero at once. */
	t->noise = 0.9f;
	for (i = 0; i < n; i++)
		t->centres[i] = (float)normal(&rng);
	*ret = t;
	return 0;
}

struct mlp_task *mlp_task_free(struct mlp_task *t)
{
	if (t) {
		free(t->centres);
		free(t);
	}
	return NULL;
}

void mlp_task_batch(const struct mlp_task *t, uint64_t index, int batch, float *x, int32_t *y)
{
	/* A stream of its own per batch: batch k is the same whichever
	 * batches were drawn before it. */
	uint64_t rng = t->seed * 0x9e3779b97f4a7c15ull ^ (index + 1) * 0xd1b54a32d192ed03ull;
	int b, i;

	for (b = 0; b < batch; b++) {
		int cls = (int)(splitmix(&rng) % (uint64_t)t->n_classes);
		int cl = (int)(splitmix(&rng) % CLUSTERS_PER_CLASS);
		const float *c = t->centres + ((size_t)cls * CLUSTERS_PER_CLASS + (size_t)cl) *
						      (size_t)t->n_in;
		float *row = x + (size_t)b * t->n_in;

		y[b] = cls;
		for (i = 0; i < t->n_in; i++)
			row[i] = c[i] + t->noise * (float)normal(&rng);
	}
}

/* ---- reference AdamW ---- */

int mlp_adamw_step(const struct mlp_adamw *hp, uint64_t step, float *param, const float *grad,
		   float *exp_avg, float *exp_avg_sq, size_t n)
{
	float beta1, beta2, omb1, omb2, decay, neg_step, bc2_sqrt, eps;
	double bc1, bc2;
	size_t i;

	if (!hp || step == 0 || !(hp->beta1 >= 0.0f && hp->beta1 < 1.0f) ||
	    !(hp->beta2 >= 0.0f && hp->beta2 < 1.0f) || !(hp->lr >= 0.0f && isfinite(hp->lr)) ||
	    !(hp->eps >= 0.0f && isfinite(hp->eps)) ||
	    !(hp->weight_decay >= 0.0f && isfinite(hp->weight_decay)))
		return -EINVAL;
	/* Python computes these in double (torch's scalars are Python floats);
	 * each reaches the fp32 tensor math rounded once to float. */
	bc1 = 1.0 - pow((double)hp->beta1, (double)step);
	bc2 = 1.0 - pow((double)hp->beta2, (double)step);
	if (bc1 <= 0.0 || bc2 <= 0.0)
		return -EINVAL;
	beta1 = hp->beta1;
	beta2 = hp->beta2;
	omb1 = (float)(1.0 - (double)hp->beta1);
	omb2 = (float)(1.0 - (double)hp->beta2);
	decay = (float)(1.0 - (double)hp->lr * (double)hp->weight_decay);
	neg_step = (float)(-((double)hp->lr / bc1));
	bc2_sqrt = (float)sqrt(bc2);
	eps = hp->eps;
	(void)beta1;    /* torch 2.x's lerp form uses only 1 - beta1 */

	for (i = 0; i < n; i++) {
		/* One fp32 operation each, in torch's order; none may be
		 * fused into an FMA (examples/meson.build passes
		 * -ffp-contract=off, as kernels/ does). */
		float g = grad[i];
		float p = param[i] * decay;
		float m = exp_avg[i] + omb1 * (g - exp_avg[i]);
		float v = exp_avg_sq[i] * beta2 + (omb2 * g) * g;
		float denom = sqrtf(v) / bc2_sqrt + eps;

		p = p + neg_step * (m / denom);
		param[i] = p;
		exp_avg[i] = m;
		exp_avg_sq[i] = v;
	}
	return 0;
}

int mlp_parse_u64(const char *s, uint64_t *out)
{
	char *end;

	errno = 0;
	*out = strtoull(s, &end, 0);
	return errno || end == s || *end ? -EINVAL : 0;
}

int mlp_parse_float(const char *s, float *out)
{
	char *end;

	errno = 0;
	*out = strtof(s, &end);
	return errno || end == s || *end ? -EINVAL : 0;
}

int mlp_option_start(const char *a, const char *v, void (*usage)(FILE *f))
{
	if (!strcmp(a, "--help")) {
		usage(stdout);
		return 0;
	}
	if (!v) {
		usage(stderr);
		return 2;
	}
	return -1;
}

void mlp_loss_ends_add(struct mlp_loss_ends *e, uint64_t step, uint64_t steps, float loss)
{
	if (step <= 10)
		e->first += loss / 10.0f;
	if (step > steps - 10)
		e->last += loss / 10.0f;
}

int mlp_loss_ends_check(const struct mlp_loss_ends *e, float check, const char *prog)
{
	if (check <= 0.0f || e->last <= e->first / check)
		return 0;
	fprintf(stderr, "%s: loss fell by %.2fx, less than %.2fx\n", prog, (double)(e->first / e->last),
		(double)check);
	return 1;
}
