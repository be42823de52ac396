/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "bench.h"

struct bench {
	const char *name;
	bench_fn run;
	const char *what;
};

int bench_tenants(int argc, char **argv); /* bench-tenants.c (belongs in bench.h) */

/* Each benchmark file adds its line here. */
static const struct bench benches[] = {
	{ "ring", bench_ring, "data-plane round trip vs a unix socket" },
	{ "adam", bench_adam, "fused CPU AdamW vs roofline, unfused and scalar" },
	{ "pipeline", bench_pipeline, "offload pipeline step vs serial, after-backward and the bound" },
	{ "swap", bench_swap, "NVMe tier streaming through spillwayd vs fio on the same directory" },
	{ "tenants", bench_tenants, "one session's step alone vs beside hostile and busy tenants" },
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double bench_percentile(double *v, size_t n, double p)
{
	double pos;
	size_t lo;

	if (n == 0)
		return 0.0;
	qsort(v, n, sizeof(*v), cmp_double);
	pos = p / 100.0 * (double)(n - 1);
	lo = (size_t)pos;
	if (lo + 1 >= n)
		return v[n - 1];
	return v[lo] + (v[lo + 1] - v[lo]) * (pos - (double)lo);
}

double bench_median(double *v, size_t n)
{
	return bench_percentile(v, n, 50.0);
}

double bench_cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

int bench_usage(const char *usage, const char *arg)
{
	bool help = arg && !strcmp(arg, "--help");

	fputs(usage, help ? stdout : stderr);
	return help ? 0 : 2;
}

int bench_status_doc(const char *status_path, cJSON **ret)
{
	char *json = NULL;
	int r = spw_status_fetch(status_path, &json);

	if (r < 0)
		return r;
	*ret = cJSON_Parse(json);
	free(json);
	return *ret ? 0 : -EPROTO;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: spillway-bench <name> [--json] [options]\n\nbenchmarks:\n");
	for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++)
		fprintf(f, "  %-10s %s\n", benches[i].name, benches[i].what);
	fprintf(f, "\n'spillway-bench <name> --help' lists a benchmark's options.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++)
		if (!strcmp(argv[1], benches[i].name))
			return benches[i].run(argc - 1, argv + 1);
	fprintf(stderr, "spillway-bench: no benchmark named '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
