/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "bench.h"
#include "util/localdaemon.h"

static int bench_torch(int argc, char **argv);

struct bench {
	const char *name;
	bench_fn run;
	const char *what;
};

/* Each benchmark file adds its line here. */
static const struct bench benches[] = {
	{ "ring", bench_ring, "data-plane round trip vs a unix socket" },
	{ "adam", bench_adam, "fused CPU AdamW vs roofline, unfused and scalar" },
	{ "pipeline", bench_pipeline, "offload pipeline step vs serial, after-backward and the bound" },
	{ "swap", bench_swap, "NVMe tier streaming through spillwayd vs fio on the same directory" },
	{ "torch", bench_torch, "a GPT step with torch.optim.AdamW vs OffloadAdamW (bench/torch_step.py)" },
	{ "resume", bench_resume, "a killed trainer back at work: reattach vs reload from a file" },
	{ "checkpoint", bench_checkpoint, "a checkpoint on the NVMe tier vs cp and torch.save; a daemon restart" },
	{ "tenants", bench_tenants, "one session's step alone vs beside hostile and busy tenants" },
	{ "metrics", bench_metrics, "GET /metrics with 64 sessions vs a status fetch" },
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

void bench_progress_init(struct bench_progress *p, const char *name, unsigned total)
{
	*p = (struct bench_progress){ .name = name, .total = total, .on = isatty(STDERR_FILENO) == 1 };
}

void bench_progress_step(struct bench_progress *p, const char *what)
{
	uint64_t now;

	if (!p || !p->on)
		return;
	p->done++;
	now = now_ns();
	if (p->done < p->total && now - p->drawn_ns < 100000000u)
		return;
	p->drawn_ns = now;
	fprintf(stderr, "\r\033[K%s: %s %u/%u", p->name, what, p->done, p->total);
	fflush(stderr);
}

void bench_progress_end(struct bench_progress *p)
{
	if (!p || !p->on || !p->drawn_ns)
		return;
	fputs("\r\033[K", stderr);
	fflush(stderr);
	p->drawn_ns = 0;
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

const cJSON *bench_status_session(const cJSON *doc, const char *session)
{
	const cJSON *s;

	cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(doc, "sessions")) {
		const cJSON *n = cJSON_GetObjectItemCaseSensitive(s, "name");

		if (cJSON_IsString(n) && !strcmp(n->valuestring, session))
			return s;
	}
	return NULL;
}

void bench_exe_dir(char *dir, size_t size)
{
	ssize_t n = readlink("/proc/self/exe", dir, size - 1);
	char *slash;

	if (n <= 0) {
		dir[0] = '\0';
		return;
	}
	dir[n] = '\0';
	slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	else
		dir[0] = '\0';
}

/*
 * torch: bench/torch_step.py under Debian's /usr/bin/python3 (its torch;
 * $SPILLWAY_PYTHON names another interpreter, e.g. a venv with torch 2.x).
 * The script is found through $SPILLWAY_BENCH_TORCH, beside this executable
 * (a build tree, where meson copies it) or where meson installs it. In a
 * build tree the package of that build (../python) goes first on
 * PYTHONPATH and $SPILLWAYD names the daemon built with it, so the bench
 * measures this build and not an installed one.
 */
static int bench_torch(int argc, char **argv)
{
	char dir[PATH_MAX], script[PATH_MAX + 32], pkg[PATH_MAX + 32], path[2 * PATH_MAX + 64];
	const char *python = getenv("SPILLWAY_PYTHON"), *s = getenv("SPILLWAY_BENCH_TORCH");
	char **args;

	bench_exe_dir(dir, sizeof(dir));
	if (!s || !*s) {
		snprintf(script, sizeof(script), "%s/torch_step.py", dir);
		s = dir[0] && access(script, R_OK) == 0 ? script : SPW_BENCH_TORCH_SCRIPT;
	}
	if (access(s, R_OK) < 0) {
		fprintf(stderr, "spillway-bench torch: %s: %s (set SPILLWAY_BENCH_TORCH to bench/torch_step.py)\n",
			s, strerror(errno));
		return 1;
	}
	snprintf(pkg, sizeof(pkg), "%s/../python/spillway/_paths.py", dir);
	if (dir[0] && access(pkg, R_OK) == 0) {
		const char *old = getenv("PYTHONPATH");

		snprintf(path, sizeof(path), "%s/../python%s%s", dir, old && *old ? ":" : "", old ? old : "");
		setenv("PYTHONPATH", path, 1);
	}
	local_daemon_locate();
	/* A sanitized build's library needs its runtimes loaded first in
	 * python, which is not built with them. */
	if (SPW_BENCH_PRELOAD[0] && !getenv("LD_PRELOAD")) {
		setenv("LD_PRELOAD", SPW_BENCH_PRELOAD, 1);
		if (!getenv("ASAN_OPTIONS"))
			setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
	}
	if (!python || !*python)
		python = "/usr/bin/python3";
	args = calloc((size_t)argc + 2, sizeof(*args));
	if (!args)
		return 1;
	args[0] = (char *)python;
	args[1] = (char *)s;
	for (int i = 1; i < argc; i++)
		args[i + 1] = argv[i];
	fflush(stdout);
	execv(python, args);
	fprintf(stderr, "spillway-bench torch: cannot run %s: %s (install python3-torch, or set SPILLWAY_PYTHON)\n",
		python, strerror(errno));
	free(args);
	return 1;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: spillway-bench <name> [--json] [--plot out.png] [options]\n\nbenchmarks:\n");
	for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++)
		fprintf(f, "  %-10s %s\n", benches[i].name, benches[i].what);
	fprintf(f, "\n'spillway-bench <name> --help' lists a benchmark's options. --plot out.png draws the\n"
		   "JSON lines of pipeline, adam or swap with bench/plot.py (python3-matplotlib).\n");
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++) {
		const char *plot = NULL;

		if (strcmp(argv[1], benches[i].name))
			continue;
		for (int a = 2; a < argc; a++)
			if (!strcmp(argv[a], "--plot")) {
				if (a + 1 >= argc || !argv[a + 1][0]) {
					fprintf(stderr, "spillway-bench: --plot needs a file name (--plot out.png)\n");
					return 2;
				}
				plot = argv[a + 1];
			}
		if (plot)
			return bench_plotted(benches[i].name, benches[i].run, argc - 1, argv + 1, plot);
		return benches[i].run(argc - 1, argv + 1);
	}
	fprintf(stderr, "spillway-bench: no benchmark named '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
