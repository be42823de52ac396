/* SPDX-License-Identifier: MIT */
/*
 * kernels/dispatch.c: picks a variant once per process from the CPU's
 * features (first entry of the table the CPU runs wins, as PipeWire's
 * volume-ops.c does), or the one SPILLWAY_KERNELS names.
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

struct variant {
	const char *name;
	const struct spw_kernels *table;
	const char *needs;              /* for error messages */
	bool (*supported)(void);
};

static bool have_avx512(void)
{
	/* __builtin_cpu_supports also checks that the OS saves the zmm state. */
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512vl");
}

static bool have_avx2(void)
{
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
	       __builtin_cpu_supports("f16c");
}

static bool have_c(void)
{
	return true;
}

/* The avx512 table with native AVX512_BF16 conversions (adamw-avx512.c). */
extern const struct spw_kernels spw__kernels_avx512bf16;

static const struct variant variants[] = {
	{ "avx512", &spw__kernels_avx512, "AVX-512F, AVX-512BW and AVX-512VL", have_avx512 },
	{ "avx2", &spw__kernels_avx2, "AVX2, FMA and F16C", have_avx2 },
	{ "c", &spw__kernels_c, "nothing", have_c },
};

const char *const spw_kernels_all[] = { "avx512", "avx2", "c", NULL };
_Static_assert(sizeof(spw_kernels_all) / sizeof(spw_kernels_all[0]) ==
		       sizeof(variants) / sizeof(variants[0]) + 1,
	       "spw_kernels_all lists every variant");

static const struct spw_kernels *table_of(const struct variant *v)
{
	if (v->table == &spw__kernels_avx512 && __builtin_cpu_supports("avx512bf16"))
		return &spw__kernels_avx512bf16;
	return v->table;
}

static const struct variant *find(const char *name)
{
	for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++)
		if (!strcmp(variants[i].name, name))
			return &variants[i];
	return NULL;
}

int spw_kernels_variant(const char *name, const struct spw_kernels **ret)
{
	const struct variant *v = name ? find(name) : NULL;

	if (!v)
		return -EINVAL;
	if (!v->supported())
		return -ENOTSUP;
	*ret = table_of(v);
	return 0;
}

/* Written once by init (or select); readers only need the pointer itself. */
static _Atomic(const struct spw_kernels *) chosen;
static atomic_int init_result = 1; /* 1: not yet */

static const struct spw_kernels *best(void)
{
	for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++)
		if (variants[i].supported())
			return table_of(&variants[i]);
	return &spw__kernels_c;
}

static int choose(char *err, size_t errlen)
{
	const char *env = getenv("SPILLWAY_KERNELS");
	const struct spw_kernels *t = NULL;
	const struct variant *v;
	char runs[64] = "";
	int r;

	if (!env || !*env) {
		atomic_store(&chosen, best());
		return 0;
	}
	r = spw_kernels_variant(env, &t);
	if (r == 0) {
		atomic_store(&chosen, t);
		return 0;
	}
	for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++)
		if (variants[i].supported()) {
			strncat(runs, runs[0] ? ", " : "", sizeof(runs) - strlen(runs) - 1);
			strncat(runs, variants[i].name, sizeof(runs) - strlen(runs) - 1);
		}
	v = find(env);
	if (err && errlen) {
		if (!v)
			snprintf(err, errlen,
				 "SPILLWAY_KERNELS=%s names no kernel variant (use one of: %s, or unset it)",
				 env, runs);
		else
			snprintf(err, errlen,
				 "SPILLWAY_KERNELS=%s: this CPU lacks %s (it runs: %s; unset the variable to choose automatically)",
				 env, v->needs, runs);
	}
	/* Refused: run correct but slow code until the caller reports it. */
	atomic_store(&chosen, &spw__kernels_c);
	return r;
}

int spw_kernels_init(char *err, size_t errlen)
{
	int r = atomic_load(&init_result);

	if (r != 1) {
		if (r < 0 && err && errlen)
			choose(err, errlen); /* same environment, same message */
		return r;
	}
	r = choose(err, errlen);
	atomic_store(&init_result, r);
	return r;
}

const struct spw_kernels *spw_kernels(void)
{
	const struct spw_kernels *t = atomic_load_explicit(&chosen, memory_order_acquire);

	if (t)
		return t;
	spw_kernels_init(NULL, 0);
	return atomic_load(&chosen);
}

const char *spw_kernels_name(void)
{
	return spw_kernels()->name;
}

int spw_kernels_select(const char *name)
{
	const struct spw_kernels *t = NULL;
	int r = spw_kernels_variant(name, &t);

	if (r < 0)
		return r;
	atomic_store(&init_result, 0);
	atomic_store(&chosen, t);
	return 0;
}

int spw_adamw_prepare(const struct spw_adamw_hparams *hp, struct spw_adamw_consts *ret)
{
	double bc1, bc2;

	if (!hp || !ret || hp->step == 0)
		return -EINVAL;
	if (!(hp->beta1 >= 0.0f && hp->beta1 < 1.0f) || !(hp->beta2 >= 0.0f && hp->beta2 < 1.0f))
		return -EINVAL;
	if (!(hp->lr >= 0.0f && isfinite(hp->lr)) || !(hp->eps >= 0.0f && isfinite(hp->eps)) ||
	    !(hp->weight_decay >= 0.0f && isfinite(hp->weight_decay)) ||
	    !(hp->grad_scale >= 0.0f && isfinite(hp->grad_scale)))
		return -EINVAL;
	/* As torch does it in Python floats (double), each rounded once to float. */
	bc1 = 1.0 - pow((double)hp->beta1, (double)hp->step);
	bc2 = 1.0 - pow((double)hp->beta2, (double)hp->step);
	if (bc1 <= 0.0 || bc2 <= 0.0)
		return -EINVAL; /* beta == 0 is fine; this only guards pow underflow oddities */
	*ret = (struct spw_adamw_consts){
		.grad_scale = hp->grad_scale,
		.beta1 = hp->beta1,
		.one_minus_beta1 = (float)(1.0 - (double)hp->beta1),
		.beta2 = hp->beta2,
		.one_minus_beta2 = (float)(1.0 - (double)hp->beta2),
		.decay = (float)(1.0 - (double)hp->lr * (double)hp->weight_decay),
		.neg_step_size = (float)(-((double)hp->lr / bc1)),
		.inv_bc2_sqrt = (float)(1.0 / sqrt(bc2)),
		.eps = hp->eps,
	};
	return 0;
}
