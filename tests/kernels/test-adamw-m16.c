/* SPDX-License-Identifier: MIT */
/*
 * tests/kernels/test-adamw-m16.c: AdamW with bf16 moments (adamw_m16,
 * SPW_STATE_BF16). Every variant (and the avx512 table without native bf16
 * conversions, where the CPU runs it) against a scalar reference written
 * here, for every grad x copy dtype, every length 0..2100, starts that are
 * not vector-aligned and several hyperparameter sets: bit-identical params,
 * moments and copies, nothing written outside the span. A second check ties
 * it to the fp32 kernel: the same update on the widened moments gives the
 * same params and copies, and moments equal to its moments rounded to bf16.
 */
#include <stdlib.h>

#include "kt.h"

#define MAXN 2100
#define PAD 24

static float ld(const void *g, enum spw_dtype t, size_t i)
{
	if (t == SPW_DTYPE_F32)
		return ((const float *)g)[i];
	if (t == SPW_DTYPE_BF16)
		return u2f((uint32_t)((const uint16_t *)g)[i] << 16);
	return (float)((const _Float16 *)g)[i];
}

/* bf16 by hand: round to nearest even on the bits, nan kept quiet. */
static uint16_t ref_bf16(float f)
{
	uint32_t u = f2u(f), lsb = (u >> 16) & 1;

	if (isnan(f))
		return (uint16_t)((u >> 16) | 0x40);
	return (uint16_t)((u + 0x7fff + lsb) >> 16);
}

static void ref_adamw_m16(const struct spw_adamw_consts *k, float *p, uint16_t *m, uint16_t *v,
			  const void *g, enum spw_dtype gt, void *c, enum spw_dtype ct, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float gi = ld(g, gt, i) * k->grad_scale;
		float m0 = u2f((uint32_t)m[i] << 16), v0 = u2f((uint32_t)v[i] << 16);
		float pd = p[i] * k->decay;
		float mi = m0 + k->one_minus_beta1 * (gi - m0);
		float t = k->one_minus_beta2 * gi;
		float vi = v0 * k->beta2 + t * gi;
		float den = sqrtf(vi) * k->inv_bc2_sqrt + k->eps;

		p[i] = pd + k->neg_step_size * (mi / den);
		m[i] = ref_bf16(mi);
		v[i] = ref_bf16(vi);
		if (ct == SPW_DTYPE_F32)
			((float *)c)[i] = p[i];
		else if (ct == SPW_DTYPE_BF16)
			((uint16_t *)c)[i] = ref_bf16(p[i]);
		else if (ct == SPW_DTYPE_F16)
			((uint16_t *)c)[i] = spw_f32_to_f16(p[i]);
	}
}

struct bufs {
	float p[MAXN + PAD];
	uint16_t m[MAXN + PAD], v[MAXN + PAD];
	union { float f[MAXN + PAD]; uint16_t h[2 * (MAXN + PAD)]; } g, c;
};

static struct bufs src, want, got;
static float gsrc[MAXN + PAD];

static void fill(uint64_t *s)
{
	for (size_t i = 0; i < MAXN + PAD; i++) {
		float g = kt_uniform(s, -2.0f, 2.0f), m = kt_uniform(s, -0.1f, 0.1f);
		float v = kt_uniform(s, 0.0f, 0.01f);
		uint64_t r = kt_rand(s) % 500;

		/* zeros, subnormals (whose bf16 rounding the native
		 * instruction would flush), tiny moments, huge, inf, nan */
		if (r == 0)
			g = 0.0f;
		else if (r == 1)
			g = u2f((uint32_t)(kt_rand(s) & 0x807fffff));
		else if (r == 2)
			g = 6e4f;
		else if (r == 3)
			g = -INFINITY;
		else if (r == 4)
			g = NAN;
		else if (r == 5) {
			g = 1e-25f;
			m = 1e-38f;
			v = 1e-39f;
		} else if (r == 6) {
			g = 0.0f;
			v = u2f(0x00010000u);
		}
		src.p[i] = kt_uniform(s, -1.0f, 1.0f);
		src.m[i] = ref_bf16(m);
		src.v[i] = ref_bf16(v);
		gsrc[i] = g;
	}
}

static void grads_as(enum spw_dtype t, struct bufs *b)
{
	for (size_t i = 0; i < MAXN + PAD; i++) {
		if (t == SPW_DTYPE_F32)
			b->g.f[i] = gsrc[i];
		else
			b->g.h[i] = t == SPW_DTYPE_BF16 ? ref_bf16(gsrc[i]) : spw_f32_to_f16(gsrc[i]);
	}
}

static bool same_bf16(uint16_t a, uint16_t b)
{
	return kt_same16(a, b, 0x7f80);
}

static void check(const struct spw_kernels *k, const char *name, const struct spw_adamw_consts *kc,
		  size_t stride)
{
	for (int gt = 0; gt < SPW_DTYPE_COUNT; gt++) {
		grads_as(gt, &want);
		grads_as(gt, &got);
		for (int ct = 0; ct <= SPW_DTYPE_NONE; ct++) {
			size_t cs = spw_dtype_size(ct), gs = spw_dtype_size(gt);

			memcpy(want.p, src.p, sizeof(src.p));
			memcpy(want.m, src.m, sizeof(src.m));
			memcpy(want.v, src.v, sizeof(src.v));
			ref_adamw_m16(kc, want.p, want.m, want.v, want.g.f, gt, want.c.f, ct, MAXN + PAD);

			for (size_t n = 0; n <= MAXN; n += n < 300 ? 1 : stride) {
				size_t op = n % 7, og = (n / 7) % 5, oc = (n / 35) % 3;
				unsigned char *gg = (unsigned char *)got.g.f + og * gs;
				unsigned char *cg = (unsigned char *)got.c.f + oc * cs;

				memcpy(got.p, src.p, (n + PAD) * 4);
				memcpy(got.m, src.m, (n + PAD) * 2);
				memcpy(got.v, src.v, (n + PAD) * 2);
				memcpy(gg, (unsigned char *)want.g.f + op * gs, n * gs);
				memset(got.c.f, 0x5a, (n + PAD) * 4);
				k->adamw_m16[gt][ct](kc, got.p + op, got.m + op, got.v + op, gg,
						     ct == SPW_DTYPE_NONE ? NULL : cg, n);
				for (size_t i = 0; i < n + PAD; i++) {
					bool in = i >= op && i < op + n;
					float wp = in ? want.p[i] : src.p[i];
					uint16_t wm = in ? want.m[i] : src.m[i], wv = in ? want.v[i] : src.v[i];

					if (!kt_same(got.p[i], wp) || !same_bf16(got.m[i], wm) || !same_bf16(got.v[i], wv))
						TEST_FAIL("%s adamw_m16 g=%d c=%d n=%zu i=%zu: p %a/%a m %04x/%04x v %04x/%04x",
							  name, gt, ct, n, i, got.p[i], wp, got.m[i], wm, got.v[i], wv);
				}
				for (size_t i = 0; ct != SPW_DTYPE_NONE && i < (n + PAD) * 4 / cs; i++) {
					bool in = i >= oc && i < oc + n, ok;

					if (ct == SPW_DTYPE_F32)
						ok = in ? kt_same(got.c.f[i], want.c.f[op + i - oc]) : f2u(got.c.f[i]) == 0x5a5a5a5au;
					else
						ok = in ? kt_same16(got.c.h[i], want.c.h[op + i - oc],
								    ct == SPW_DTYPE_BF16 ? 0x7f80 : 0x7c00)
							: got.c.h[i] == 0x5a5a;
					if (!ok)
						TEST_FAIL("%s adamw_m16 copy c=%d g=%d n=%zu i=%zu", name, ct, gt, n, i);
				}
			}
		}
	}
}

/* bf16 moments are fp32 moments rounded once per step: the fp32 kernel on
 * the widened moments gives the same params and copy, and its moments
 * rounded are ours. */
static void check_against_f32(const struct spw_kernels *k, const char *name, const struct spw_adamw_consts *kc)
{
	static float p32[MAXN], m32[MAXN], v32[MAXN], p16[MAXN];
	static uint16_t m16[MAXN], v16[MAXN], c32[MAXN], c16[MAXN];

	for (size_t i = 0; i < MAXN; i++) {
		p32[i] = p16[i] = src.p[i];
		m16[i] = src.m[i];
		v16[i] = src.v[i];
		m32[i] = u2f((uint32_t)src.m[i] << 16);
		v32[i] = u2f((uint32_t)src.v[i] << 16);
	}
	k->adamw[SPW_DTYPE_F32][SPW_DTYPE_BF16](kc, p32, m32, v32, gsrc, c32, MAXN);
	k->adamw_m16[SPW_DTYPE_F32][SPW_DTYPE_BF16](kc, p16, m16, v16, gsrc, c16, MAXN);
	for (size_t i = 0; i < MAXN; i++)
		if (!kt_same(p32[i], p16[i]) || c32[i] != c16[i] || !same_bf16(ref_bf16(m32[i]), m16[i]) ||
		    !same_bf16(ref_bf16(v32[i]), v16[i]))
			TEST_FAIL("%s: bf16-moment update at %zu is not the fp32 one rounded", name, i);
}

int main(void)
{
	static const struct spw_adamw_hparams hps[] = {
		{ .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
		  .grad_scale = 1.0f, .step = 1 },
		{ .lr = 3e-4f, .beta1 = 0.95f, .beta2 = 0.98f, .eps = 1e-6f, .weight_decay = 0.1f,
		  .grad_scale = 0.37f, .step = 1000 },
		{ .lr = 1e-2f, .beta1 = 0.0f, .beta2 = 0.5f, .eps = 0.0f, .weight_decay = 0.0f,
		  .grad_scale = 1.0f / 65536.0f, .step = 7 },
	};
	uint64_t seed = 7;
	int variants = 0;

	fill(&seed);
	KT_FOR_EACH_VARIANT(k) {
		variants++;
		for (size_t h = 0; h < sizeof(hps) / sizeof(hps[0]); h++) {
			struct spw_adamw_consts kc;

			ASSERT_OK(spw_adamw_prepare(&hps[h], &kc));
			check(k, k->name, &kc, h ? 97 : 1);
			check_against_f32(k, k->name, &kc);
			/* The avx512 table without AVX512_BF16 instructions too. */
			if (!strcmp(k->name, "avx512") && k != &spw__kernels_avx512) {
				check(&spw__kernels_avx512, "avx512 (integer bf16)", &kc, h ? 97 : 1);
				check_against_f32(&spw__kernels_avx512, "avx512 (integer bf16)", &kc);
			}
		}
		fprintf(stderr, "%s: bf16-moment AdamW bit-identical to the reference\n", k->name);
	}
	ASSERT_GE(variants, 1);
	return 0;
}
