/* SPDX-License-Identifier: MIT */
/*
 * tests/kernels/test-reference.c: three AdamW steps against values computed
 * independently in double precision from the formula in the
 * torch.optim.AdamW documentation (decoupled decay, then
 * m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t),
 * p -= lr * m_hat / (sqrt(v_hat) + eps)). They were obtained with this
 * Python 3 script (Python floats are IEEE doubles; inputs are first rounded
 * to fp32, as the kernel sees them):
 *
 *   import struct, math
 *   def f32(x): return struct.unpack('f', struct.pack('f', x))[0]
 *   lr, b1, b2, eps, wd, gs = map(f32, (1e-3, 0.9, 0.999, 1e-8, 0.01, 0.5))
 *   p = [f32(x) for x in (0.5, -1.25, 3.0, 1e-3)]; m = [0.0]*4; v = [0.0]*4
 *   G = [[f32(x) for x in r] for r in GRADS]
 *   for t in (1, 2, 3):
 *       for i in range(4):
 *           g = G[t-1][i] * gs
 *           p[i] = p[i] * (1 - lr*wd)
 *           m[i] = b1*m[i] + (1-b1)*g;  v[i] = b2*v[i] + (1-b2)*g*g
 *           mh = m[i]/(1-b1**t);  vh = v[i]/(1-b2**t)
 *           p[i] = p[i] - lr*mh/(math.sqrt(vh)+eps)
 *       print(t, p, m, v)
 *
 * grad_scale 0.5 stands for a loss scale of 2. The fp32 kernel rounds at
 * every operation, so it agrees within a few fp32 ulps: moments within
 * 4 ulp, params within 4 ulp of (|p| + lr), the size of what changes.
 */
#include <float.h>

#include "kt.h"

static const float GRADS[3][4] = {
	{ 0.1f, -0.2f, 1e-4f, 5.0f },
	{ 0.12f, 0.3f, -1e-4f, 4.0f },
	{ -0.05f, 0.25f, 2e-4f, -3.0f },
};

static const double WANT_P[3][4] = {
	{ 0.4989950001523768, -1.2489875000521882, 2.9989701999117697, -9.99600072615521e-09 },
	{ 0.4979893972188359, -1.2492227120097208, 2.9989928312794585, -0.0009881358404345828 },
	{ 0.4974426778118713, -1.2497316949332602, 2.998464669608381, -0.0014084931553419485 },
};
static const double WANT_M[3][4] = {
	{ 0.005000001266598719, -0.010000002533197438, 5.000001065782241e-06, 0.2500000596046448 },
	{ 0.01050000231713052, 0.0060000021308662214, -5.000002257875388e-07, 0.4250000953674302 },
	{ 0.006950001201778544, 0.01790000475496064, 9.550001940276632e-06, 0.23250003993510843 },
};
static const double WANT_V[3][4] = {
	{ 2.4999678879966684e-06, 9.999871551986674e-06, 2.499967687182825e-12, 0.006249919533729553 },
	{ 6.097421442792522e-06, 3.248958391872181e-05, 4.997435438864559e-12, 0.010243618196247972 },
	{ 6.716316071850779e-06, 4.8081893587417476e-05, 1.4992308816496993e-11, 0.012483345742076884 },
};

static void near(const char *what, const char *var, int t, int i, double got, double want, double scale)
{
	double tol = 4 * FLT_EPSILON * scale;

	if (!(fabs(got - want) <= tol))
		TEST_FAIL("%s: %s step %d [%d] = %.17g, want %.17g (off by %.3g, allowed %.3g)", var,
			  what, t, i, got, want, fabs(got - want), tol);
}

int main(void)
{
	int variants = 0;

	KT_FOR_EACH_VARIANT(k) {
		float p[4] = { 0.5f, -1.25f, 3.0f, 1e-3f }, m[4] = { 0 }, v[4] = { 0 };
		uint16_t copy[4];

		variants++;
		for (int t = 1; t <= 3; t++) {
			struct spw_adamw_hparams hp = {
				.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
				.weight_decay = 0.01f, .grad_scale = 0.5f, .step = (uint64_t)t,
			};
			struct spw_adamw_consts kc;
			float before[4];

			memcpy(before, p, sizeof(p));
			ASSERT_OK(spw_adamw_prepare(&hp, &kc));
			k->adamw[SPW_DTYPE_F32][SPW_DTYPE_BF16](&kc, p, m, v, GRADS[t - 1], copy, 4);
			for (int i = 0; i < 4; i++) {
				near("p", k->name, t, i, p[i], WANT_P[t - 1][i], fabs(before[i]) + 1e-3);
				near("m", k->name, t, i, m[i], WANT_M[t - 1][i], fabs(WANT_M[t - 1][i]));
				near("v", k->name, t, i, v[i], WANT_V[t - 1][i], fabs(WANT_V[t - 1][i]));
				ASSERT_UEQ(copy[i], spw_f32_to_bf16(p[i]));
			}
		}
		fprintf(stderr, "%s: matches the double-precision AdamW steps\n", k->name);
	}
	ASSERT_GE(variants, 1);

	/* Hyperparameters torch would refuse or that make no sense. */
	{
		struct spw_adamw_hparams hp = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f,
						.eps = 1e-8f, .grad_scale = 1.0f, .step = 0 };
		struct spw_adamw_consts kc;

		ASSERT_EQ(spw_adamw_prepare(&hp, &kc), -EINVAL);
		hp.step = 1;
		hp.beta1 = 1.0f;
		ASSERT_EQ(spw_adamw_prepare(&hp, &kc), -EINVAL);
		hp.beta1 = 0.9f;
		hp.lr = NAN;
		ASSERT_EQ(spw_adamw_prepare(&hp, &kc), -EINVAL);
		hp.lr = 1e-3f;
		ASSERT_OK(spw_adamw_prepare(&hp, &kc));
	}
	/* Forcing variants: unknown names and ones the CPU lacks are refused. */
	ASSERT_EQ(spw_kernels_select("sse9"), -EINVAL);
	for (const char *const *n = spw_kernels_all; *n; n++) {
		const struct spw_kernels *t;
		int r = spw_kernels_variant(*n, &t);

		ASSERT_TRUE(r == 0 || r == -ENOTSUP);
		ASSERT_EQ(spw_kernels_select(*n), r);
		if (r == 0)
			ASSERT_STREQ(spw_kernels_name(), *n);
	}
	ASSERT_OK(spw_kernels_select("c"));
	ASSERT_STREQ(spw_kernels()->name, "c");
	return 0;
}
