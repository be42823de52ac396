/* SPDX-License-Identifier: MIT */
/*
 * tests/kernels/test-adamw.c: every variant against a straightforward scalar
 * reference written here, for every grad x copy dtype, every length 0..4099,
 * starts that are not vector-aligned, several hyperparameter sets. Expected:
 * bit-identical params, moments and copies (nans compared as nans).
 * Also sumsq, nonfinite, acc, scale and the casts on random spans.
 */
#include <float.h>
#include <stdlib.h>

#include "kt.h"

#define MAXN 4099
#define PAD 24

static float ld(const void *g, enum spw_dtype t, size_t i)
{
	if (t == SPW_DTYPE_F32)
		return ((const float *)g)[i];
	if (t == SPW_DTYPE_BF16)
		return u2f((uint32_t)((const uint16_t *)g)[i] << 16);
	return (float)((const _Float16 *)g)[i];
}

/* torch.optim.AdamW, one element at a time, in the order kernels.h states. */
static void ref_adamw(const struct spw_adamw_consts *k, float *p, float *m, float *v,
		      const void *g, enum spw_dtype gt, void *c, enum spw_dtype ct, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float gi = ld(g, gt, i) * k->grad_scale;
		float pd = p[i] * k->decay;
		float mi = m[i] + k->one_minus_beta1 * (gi - m[i]);
		float t = k->one_minus_beta2 * gi;
		float vi = v[i] * k->beta2 + t * gi;
		float den = sqrtf(vi) * k->inv_bc2_sqrt + k->eps;
		float q = mi / den;

		p[i] = pd + k->neg_step_size * q;
		m[i] = mi;
		v[i] = vi;
		if (ct == SPW_DTYPE_F32)
			((float *)c)[i] = p[i];
		else if (ct == SPW_DTYPE_BF16)
			((uint16_t *)c)[i] = spw_f32_to_bf16(p[i]);
		else if (ct == SPW_DTYPE_F16)
			((uint16_t *)c)[i] = spw_f32_to_f16(p[i]);
	}
}

struct bufs {
	float p[MAXN + PAD], m[MAXN + PAD], v[MAXN + PAD];
	union { float f[MAXN + PAD]; uint16_t h[2 * (MAXN + PAD)]; } g;
	/* Aligned, so that offset 0 takes the kernels' streamed copy-out and
	 * offsets 1 and 2 their plain stores. */
	_Alignas(64) union { float f[MAXN + PAD]; uint16_t h[2 * (MAXN + PAD)]; } c;
};

static struct bufs src, want, got;

static void fill(uint64_t *s)
{
	for (size_t i = 0; i < MAXN + PAD; i++) {
		float g = kt_uniform(s, -2.0f, 2.0f);
		uint64_t r = kt_rand(s) % 1000;

		/* a sprinkling of zeros, subnormals, huge values, inf and nan */
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
		src.p[i] = kt_uniform(s, -1.0f, 1.0f);
		src.m[i] = kt_uniform(s, -0.1f, 0.1f);
		src.v[i] = kt_uniform(s, 0.0f, 0.01f);
		src.g.f[i] = g;
	}
}

static void grads_as(enum spw_dtype t, struct bufs *b)
{
	if (t == SPW_DTYPE_F32) {
		memcpy(b->g.f, src.g.f, sizeof(b->g.f));
		return;
	}
	for (size_t i = 0; i < MAXN + PAD; i++)
		b->g.h[i] = t == SPW_DTYPE_BF16 ? spw_f32_to_bf16(src.g.f[i]) : spw_f32_to_f16(src.g.f[i]);
}

static const char *tn(enum spw_dtype t)
{
	static const char *const n[] = { "f32", "bf16", "f16", "none" };
	return n[t];
}

/*
 * The update is elementwise, so the reference runs once over the whole
 * buffer and each length/offset case is checked against its slice: the
 * kernel sees p, m, v at offset op and g, copy at their own offsets, with g
 * shifted so element i still meets the inputs of reference element op + i.
 */
static void check_adamw(const struct spw_kernels *k, const struct spw_adamw_consts *kc,
			size_t maxn, size_t stride)
{
	for (int gt = 0; gt < SPW_DTYPE_COUNT; gt++) {
		grads_as(gt, &want);
		grads_as(gt, &got);
		for (int ct = 0; ct <= SPW_DTYPE_NONE; ct++) {
			size_t cs = spw_dtype_size(ct), gs = spw_dtype_size(gt);

			memcpy(want.p, src.p, sizeof(src.p));
			memcpy(want.m, src.m, sizeof(src.m));
			memcpy(want.v, src.v, sizeof(src.v));
			ref_adamw(kc, want.p, want.m, want.v, want.g.f, gt, want.c.f, ct, MAXN + PAD);

			for (size_t n = 0; n <= maxn; n += n < 300 ? 1 : stride) {
				/* Start offsets differ per array and per length, so
				 * every vector alignment mix turns up. */
				size_t op = n % 7, og = (n / 7) % 5, oc = (n / 35) % 3;
				unsigned char *gg = (unsigned char *)got.g.f + og * gs;
				unsigned char *cg = (unsigned char *)got.c.f + oc * cs;

				memcpy(got.p, src.p, (n + PAD) * 4);
				memcpy(got.m, src.m, (n + PAD) * 4);
				memcpy(got.v, src.v, (n + PAD) * 4);
				memcpy(gg, (unsigned char *)want.g.f + op * gs, n * gs);
				memset(got.c.f, 0x5a, (n + PAD) * 4);
				k->adamw[gt][ct](kc, got.p + op, got.m + op, got.v + op, gg,
						 ct == SPW_DTYPE_NONE ? NULL : cg, n);
				/* Whole buffers: also catches writes outside the span. */
				for (size_t i = 0; i < n + PAD; i++) {
					bool in = i >= op && i < op + n;
					float wp = in ? want.p[i] : src.p[i], wm = in ? want.m[i] : src.m[i];
					float wv = in ? want.v[i] : src.v[i];

					if (!kt_same(got.p[i], wp) || !kt_same(got.m[i], wm) || !kt_same(got.v[i], wv))
						TEST_FAIL("%s adamw g=%s c=%s n=%zu i=%zu: p %a/%a m %a/%a v %a/%a",
							  k->name, tn(gt), tn(ct), n, i, got.p[i], wp,
							  got.m[i], wm, got.v[i], wv);
				}
				for (size_t i = 0; i < (n + PAD) * 4 / (cs ? cs : 4); i++) {
					bool in = i >= oc && i < oc + n, ok;

					if (ct == SPW_DTYPE_NONE)
						break;
					if (ct == SPW_DTYPE_F32)
						ok = in ? kt_same(got.c.f[i], want.c.f[op + i - oc]) : f2u(got.c.f[i]) == 0x5a5a5a5au;
					else
						ok = in ? kt_same16(got.c.h[i], want.c.h[op + i - oc],
								    ct == SPW_DTYPE_BF16 ? 0x7f80 : 0x7c00)
							: got.c.h[i] == 0x5a5a;
					if (!ok)
						TEST_FAIL("%s copy %s g=%s n=%zu i=%zu", k->name, tn(ct), tn(gt), n, i);
				}
			}
		}
	}
}

/* The documented order: element i into lane i % 32, lanes folded pairwise. */
static double ref_sumsq(const void *x, enum spw_dtype t, size_t n)
{
	double l[32] = { 0 };

	for (size_t i = 0; i < n; i++) {
		double d = ld(x, t, i);
		l[i % 32] += d * d;
	}
	for (size_t w = 16; w; w /= 2)
		for (size_t j = 0; j < w; j++)
			l[j] += l[j + w];
	return l[0];
}

static void check_helpers(const struct spw_kernels *k, uint64_t *s)
{
	static float a[MAXN + PAD], b[MAXN + PAD], f[MAXN + PAD];
	static uint16_t h[3][MAXN + PAD];

	for (size_t i = 0; i < MAXN + PAD; i++) {
		f[i] = kt_uniform(s, -3.0f, 3.0f) * (kt_rand(s) % 4 ? 1.0f : 1e-30f);
		h[SPW_DTYPE_BF16][i] = spw_f32_to_bf16(f[i]);
		h[SPW_DTYPE_F16][i] = spw_f32_to_f16(f[i]);
	}
	for (size_t n = 0; n <= MAXN; n += (n < 300 ? 1 : 37)) {
		size_t o = n % 5;

		for (int t = 0; t < SPW_DTYPE_COUNT; t++) {
			const void *x = t == SPW_DTYPE_F32 ? (const void *)(f + o) : (const void *)(h[t] + o);
			double got_ss = k->sumsq[t](x, n), want_ss = ref_sumsq(x, t, n);
			long double exact = 0;

			if (memcmp(&got_ss, &want_ss, sizeof(double)))
				TEST_FAIL("%s sumsq %s n=%zu: %a want %a", k->name, tn(t), n, got_ss, want_ss);
			for (size_t i = 0; i < n; i++)
				exact += (long double)ld(x, t, i) * ld(x, t, i);
			ASSERT_TRUE(fabsl(got_ss - exact) <= 1e-13L * exact);
			ASSERT_TRUE(!k->nonfinite[t](x, n));

			/* acc: a += g */
			for (size_t i = 0; i < n + PAD; i++)
				a[i] = b[i] = f[(i * 7) % (MAXN + PAD)];
			k->acc[t](a + o, x, n);
			for (size_t i = 0; i < n; i++)
				b[o + i] += ld(x, t, i);
			ASSERT_EQ(memcmp(a, b, (n + PAD) * 4), 0);

			/* casts from t to every dtype */
			for (int d = 0; d < SPW_DTYPE_COUNT; d++) {
				static float o16[2][MAXN + PAD];
				size_t ds = spw_dtype_size(d);

				memset(o16, 0, sizeof(o16));
				k->cast[d][t]((char *)o16[0] + ds, x, n);
				spw__kernels_c.cast[d][t]((char *)o16[1] + ds, x, n);
				if (memcmp(o16[0], o16[1], sizeof(o16[0])))
					TEST_FAIL("%s cast %s->%s n=%zu differs from c", k->name, tn(t), tn(d), n);
			}
		}
		/* scale */
		memcpy(a, f, sizeof(a));
		memcpy(b, f, sizeof(b));
		k->scale_f32(a + o, 0.3f, n);
		for (size_t i = 0; i < n; i++)
			b[o + i] *= 0.3f;
		ASSERT_EQ(memcmp(a, b, sizeof(a)), 0);
	}
	/* nonfinite: one inf or nan at every position of short spans, and far in. */
	for (size_t n = 1; n <= 300; n++)
		for (size_t pos = 0; pos < n; pos += (n < 80 ? 1 : 13))
			for (int t = 0; t < SPW_DTYPE_COUNT; t++)
				for (int kind = 0; kind < 2; kind++) {
					size_t o = n % 3;
					float saved = f[o + pos];
					uint16_t hs = h[t == SPW_DTYPE_F32 ? 1 : t][o + pos];
					const void *x;

					if (t == SPW_DTYPE_F32) {
						f[o + pos] = kind ? NAN : -INFINITY;
						x = f + o;
					} else {
						h[t][o + pos] = t == SPW_DTYPE_BF16 ? (kind ? 0x7fc1 : 0xff80)
										    : (kind ? 0x7e01 : 0xfc00);
						x = h[t] + o;
					}
					if (!k->nonfinite[t](x, n))
						TEST_FAIL("%s nonfinite %s n=%zu pos=%zu missed", k->name, tn(t), n, pos);
					if (isfinite(k->sumsq[t](x, n)))
						TEST_FAIL("%s sumsq %s finite with inf/nan", k->name, tn(t));
					if (t == SPW_DTYPE_F32)
						f[o + pos] = saved;
					else
						h[t][o + pos] = hs;
				}
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
	uint64_t seed = 42;
	int variants = 0;

	fill(&seed);
	KT_FOR_EACH_VARIANT(k) {
		variants++;
		for (size_t h = 0; h < sizeof(hps) / sizeof(hps[0]); h++) {
			struct spw_adamw_consts kc;

			ASSERT_OK(spw_adamw_prepare(&hps[h], &kc));
			/* every length for the first set, a sample for the others */
			check_adamw(k, &kc, MAXN, h ? 97 : 1);
		}
		check_helpers(k, &seed);
		fprintf(stderr, "%s: bit-identical to the reference\n", k->name);
	}
	ASSERT_GE(variants, 1);
	return 0;
}
