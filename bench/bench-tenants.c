/* SPDX-License-Identifier: MIT */
/*
 * spillway-bench tenants: what other tenants do to one session's step.
 *
 *   spillway-bench tenants [--json] [--noisy N] [--pairs P] [--phase-s T]
 *                          [--tensors T] [--tier resident|nvme]
 *                          [--layers L] [--params N]
 *
 * A bystander trains through the optimizer API (host device, no compute
 * stand-in: a step is the optimizer's own work and its traffic with the
 * daemon) on its own spillwayd. N noisy tenants (tests/daemon/noisy.c)
 * hammer the same daemon: a hostile one (garbage frames, rewritten rings,
 * punched memfds, idle connections, a kill -9 loop), one registering T
 * small tensors and unregistering them over and over, and N - 2 ring
 * hammers (NOP/PIN/UNPIN as fast as they reap).
 *
 * The same run alternates: bystander steps for T seconds with the noisy
 * tenants stopped (SIGSTOP: their sessions stay, idle), T seconds with
 * them running, P times. Where the machine has two cores or more, the bystander and the
 * daemon run on the first and the noisy tenants on the second
 * (sched_setaffinity), so their own CPU does not count against the
 * bystander: what is left is what the daemon does for them on the
 * bystander's core, and everything it shares between tenants.
 *
 *   bystander_step_s_alone   median step, noisy tenants stopped
 *   bystander_step_s_noisy   median step, noisy tenants running
 *   bystander_slowdown       noisy / alone (goal: at most 1.1)
 *   pair_slowdowns           the same per pair, in order
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <spillway/spillway.h>

#include "bench.h"
#include "noisy.h"
#include "util/localdaemon.h"

int bench_tenants(int argc, char **argv);

#define MAX_NOISY 16
#define MAX_PAIRS 64
#define MAX_STEPS 4096 /* per phase */

static const char bench_config[] =
	"{\n"
	"  \"socket\": { \"dir\": \"@DIR@\", \"mode\": \"0600\" },\n"
	"  \"pool\": { \"max_bytes\": \"2GiB\", \"session_max_bytes\": \"1GiB\", \"require_locked\": false },\n"
	"  \"session\": { \"max_garbage\": 20 },\n"
	"  \"swap\": { \"dirs\": [ { \"path\": \"@DIR@\", \"max_bytes\": \"16GiB\" } ], \"session_bytes\": \"256MiB\" },\n"
	"  \"log\": { \"level\": \"error\" }\n"
	"}\n";

static const char usage[] =
	"usage: spillway-bench tenants [--json] [--noisy N] [--pairs P] [--phase-s S] [--tensors T]\n"
	"         [--tier resident|nvme] [--layers L] [--params N]\n"
	"  N noisy tenants (2..16, default 4): one hostile, one registering T small tensors\n"
	"  (default 20000), the rest ring hammers; P alone/noisy pairs (default 4) of S\n"
	"  seconds of bystander steps each (default 2, at least 10 steps).\n";

struct cfg {
	int noisy, pairs, layers;
	double phase_s;
	unsigned tensors;
	uint64_t params;
	bool nvme;
};

struct bystander {
	spw_client *c;
	spw_optimizer *o;
	uint32_t *id;
	float **grad, **dev;
	uint64_t step;
};

/* Steps for phase_s seconds (at least 10, at most MAX_STEPS; 0: steps
 * steps); their times into times, their count into *n. */
static int bystander_steps(const struct cfg *c, struct bystander *b, double phase_s, int steps, double *times, int *n)
{
	uint64_t end = now_ns() + (uint64_t)(phase_s * 1e9);
	int r;

	if (phase_s > 0)
		steps = MAX_STEPS;
	for (int s = 0; s < steps; s++) {
		struct spw_step_result res = { .size = sizeof(res) };
		uint64_t t0 = now_ns();

		if ((r = spw_optimizer_begin(b->o, ++b->step, NULL, 0.0f)) < 0)
			return r;
		for (int l = 0; l < c->layers; l++)
			if ((r = spw_optimizer_wait_params(b->o, b->id[l], NULL)) < 0)
				return r;
		for (int l = c->layers - 1; l >= 0; l--)
			if ((r = spw_optimizer_grad_ready(b->o, b->id[l], SPW_ALL_CHUNKS, b->grad[l], c->params * 4,
							  SPW_TYPE_F32, NULL)) < 0)
				return r;
		if ((r = spw_optimizer_end(b->o, &res)) < 0)
			return r;
		if (times)
			times[s] = (double)(now_ns() - t0) * 1e-9;
		if (n)
			*n = s + 1;
		if (phase_s > 0 && s >= 9 && now_ns() >= end)
			break;
	}
	return 0;
}

static int bystander_open(const struct cfg *c, const char *control, struct bystander *b)
{
	static const struct spw_param_group g = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
						  .weight_decay = 0.01f };
	double state = 12.0 * (double)c->params * c->layers;
	struct spw_attach_opts a = { .size = sizeof(a), .session = "bench/bystander",
				     .page_size = 1u << 20 };
	struct spw_optimizer_opts oo = { .size = sizeof(oo), .groups = &g, .ngroups = 1, .device = "host",
					 .mode = SPW_OPT_OVERLAPPED, .threads = 1, .window = 4,
					 .tier = c->nvme ? SPW_TENSOR_SWAPPABLE : SPW_TENSOR_RESIDENT };
	float *init = calloc(c->params, sizeof(float));
	int r = -ENOMEM;

	/* As bench pipeline: resident holds all the state and staging; the
	 * NVMe tier a quarter of it. */
	a.region_bytes = c->nvme ? (uint64_t)(state / 4) : (uint64_t)(state * 1.5) + (64u << 20);
	b->id = calloc((size_t)c->layers, sizeof(*b->id));
	b->grad = calloc((size_t)c->layers, sizeof(*b->grad));
	b->dev = calloc((size_t)c->layers, sizeof(*b->dev));
	if (!init || !b->id || !b->grad || !b->dev)
		goto out;
	if ((r = spw_client_new(NULL, &b->c)) < 0)
		goto out;
	if ((r = spw_client_connect(b->c, control)) < 0 || (r = spw_client_attach(b->c, &a)) < 0 ||
	    (r = spw_optimizer_new(b->c, &oo, &b->o)) < 0) {
		fprintf(stderr, "spillway-bench tenants: bystander: %s\n", spw_client_last_error(b->c));
		goto out;
	}
	for (int l = c->layers - 1; l >= 0; l--) {
		char name[32];

		b->grad[l] = malloc(c->params * 4);
		b->dev[l] = calloc(c->params, 4);
		r = -ENOMEM;
		if (!b->grad[l] || !b->dev[l])
			goto out;
		for (uint64_t i = 0; i < c->params; i++)
			b->grad[l][i] = (float)((int)(i % 97) - 48) * 1e-4f;
		snprintf(name, sizeof(name), "layer%d", l);
		if ((r = spw_optimizer_add(b->o, name, 0, c->params, init, b->dev[l], SPW_TYPE_F32, &b->id[l])) < 0) {
			fprintf(stderr, "spillway-bench tenants: bystander: %s\n", spw_optimizer_last_error(b->o));
			goto out;
		}
	}
	r = 0;
out:
	free(init);
	return r;
}

static void bystander_close(const struct cfg *c, struct bystander *b)
{
	spw_optimizer_free(b->o);
	if (b->c)
		spw_client_detach(b->c);
	spw_client_free(b->c);
	for (int l = 0; b->grad && l < c->layers; l++) {
		free(b->grad[l]);
		free(b->dev[l]);
	}
	free(b->id);
	free(b->grad);
	free(b->dev);
}

/* The CPUs this process may use; *a and *b the first two (b = a when
 * there is one). */
static int two_cpus(int *a, int *b)
{
	cpu_set_t set;
	int n = 0;

	*a = *b = -1;
	if (sched_getaffinity(0, sizeof(set), &set) < 0)
		return 0;
	for (int i = 0; i < CPU_SETSIZE; i++) {
		if (!CPU_ISSET(i, &set))
			continue;
		if (n == 0)
			*a = i;
		else if (n == 1)
			*b = i;
		n++;
	}
	if (n < 2)
		*b = *a;
	return n;
}

static void pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

/* Forks noisy tenant i into process group *pgid (the first one founds
 * it), pinned to cpu. */
static pid_t spawn_noisy(int i, const struct cfg *c, const struct local_daemon *d, int cpu, pid_t *pgid,
			 struct noisy_counters *nc)
{
	pid_t pid = fork();

	if (pid == 0) {
		char name[64];

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		setpgid(0, *pgid);
		pin(cpu);
		/* Their errors are theirs: the bench measures the bystander. */
		if (!freopen("/dev/null", "w", stderr))
			_exit(1);
		if (i == 0)
			noisy_hostile_loop(d->control, d->status, 0x7e4a47ull, 0, nc);
		snprintf(name, sizeof(name), "bench/noisy-%d", i);
		if (i == 1)
			noisy_storm(d->control, name, c->tensors, 0, nc);
		else
			noisy_hammer(d->control, name, 0, nc);
		/* A tenant whose session ended just waits to be killed. */
		for (;;)
			pause();
	}
	if (pid > 0) {
		setpgid(pid, *pgid ? *pgid : pid);
		if (!*pgid)
			*pgid = pid;
	}
	return pid;
}

static int parse(int argc, char **argv, struct cfg *c, bool *json)
{
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(argv[i], "--json")) {
			*json = true;
			continue;
		}
		if (!v || !strcmp(argv[i], "--help"))
			return bench_usage(usage, argv[i]);
		if (!strcmp(argv[i], "--noisy"))
			c->noisy = atoi(v);
		else if (!strcmp(argv[i], "--pairs"))
			c->pairs = atoi(v);
		else if (!strcmp(argv[i], "--phase-s"))
			c->phase_s = atof(v);
		else if (!strcmp(argv[i], "--tensors"))
			c->tensors = (unsigned)strtoul(v, NULL, 0);
		else if (!strcmp(argv[i], "--layers"))
			c->layers = atoi(v);
		else if (!strcmp(argv[i], "--params"))
			c->params = strtoull(v, NULL, 0);
		else if (!strcmp(argv[i], "--tier") && (!strcmp(v, "resident") || !strcmp(v, "nvme")))
			c->nvme = !strcmp(v, "nvme");
		else
			return bench_usage(usage, NULL);
		i++;
	}
	if (c->noisy < 2 || c->noisy > MAX_NOISY || c->pairs < 1 || c->pairs > MAX_PAIRS || !(c->phase_s > 0) ||
	    c->tensors < 1 || c->tensors > (1u << 20) || c->layers < 1 || c->layers > 1024 || c->params < 1024)
		return bench_usage(usage, NULL);
	return -1;
}

int bench_tenants(int argc, char **argv)
{
	struct cfg c = { .noisy = 4, .pairs = 4, .phase_s = 2.0, .tensors = 20000, .layers = 8, .params = 256u << 10 };
	struct local_daemon d = { .pid = -1 };
	struct bystander b = { 0 };
	struct bench_progress pg = { 0 };
	struct noisy_counters *nc = noisy_counters_new();
	double *alone = NULL, *noisy = NULL, pair_slow[MAX_PAIRS], a_med, n_med;
	int na = 0, nn = 0, steps_alone = 0, steps_noisy = 0;
	pid_t kids[MAX_NOISY], pgid = 0;
	int cpu_a, cpu_b, ncpus, r, ret = 1, nkids = 0;
	bool json = false, pinned;

	if ((r = parse(argc, argv, &c, &json)) >= 0)
		return r;
	if (!nc)
		return 1;
	ncpus = two_cpus(&cpu_a, &cpu_b);
	pinned = ncpus >= 2;
	/* The daemon inherits the first core from here. */
	if (pinned)
		pin(cpu_a);
	local_daemon_locate();
	if ((r = local_daemon_start(&d, bench_config)) < 0) {
		fprintf(stderr, "spillway-bench tenants: cannot start spillwayd: %s\n", spw_strerror(r));
		return 1;
	}
	alone = calloc((size_t)c.pairs * MAX_STEPS, sizeof(double));
	noisy = calloc((size_t)c.pairs * MAX_STEPS, sizeof(double));
	if (!alone || !noisy || bystander_open(&c, d.control, &b) < 0)
		goto out;
	for (int i = 0; i < c.noisy; i++) {
		kids[nkids] = spawn_noisy(i, &c, &d, pinned ? cpu_b : -1, &pgid, nc);
		if (kids[nkids] > 0)
			nkids++;
	}
	/* Warm-up: the bystander touches every page; the noisy tenants get
	 * their sessions and the storm its first thousands of tensors. */
	if ((r = bystander_steps(&c, &b, 0, 3, NULL, NULL)) < 0)
		goto fail;
	usleep(1000000);
	bench_progress_init(&pg, "tenants", (unsigned)(2 * c.pairs));
	for (int p = 0; p < c.pairs; p++) {
		double *pa = alone + na, *pn = noisy + nn, ma, mn;
		int ka = 0, kn = 0;

		kill(-pgid, SIGSTOP);
		usleep(200000); /* what they had queued drains */
		if ((r = bystander_steps(&c, &b, c.phase_s, 0, pa, &ka)) < 0)
			goto fail;
		bench_progress_step(&pg, "phase (alone, noisy)");
		kill(-pgid, SIGCONT);
		usleep(200000);
		if ((r = bystander_steps(&c, &b, c.phase_s, 0, pn, &kn)) < 0)
			goto fail;
		bench_progress_step(&pg, "phase (alone, noisy)");
		/* The pair's medians (sorting its part in place), then on. */
		ma = bench_median(pa, (size_t)ka);
		mn = bench_median(pn, (size_t)kn);
		pair_slow[p] = mn / ma;
		na += ka;
		nn += kn;
	}
	bench_progress_end(&pg);
	a_med = bench_median(alone, (size_t)na);
	n_med = bench_median(noisy, (size_t)nn);
	steps_alone = na;
	steps_noisy = nn;
	if (json) {
		printf("{\"bench\":\"tenants\",\"tier\":\"%s\",\"layers\":%d,\"params\":%ju,\"noisy_sessions\":%d,"
		       "\"pairs\":%d,\"phase_s\":%.1f,\"steps_alone\":%d,\"steps_noisy\":%d,\"cores\":%d,\"pinned\":%s,\"bystander_step_s_alone\":%.6f,"
		       "\"bystander_step_s_noisy\":%.6f,\"bystander_slowdown\":%.3f,\"pair_slowdowns\":[",
		       c.nvme ? "nvme" : "resident", c.layers, (uintmax_t)c.params, c.noisy, c.pairs, c.phase_s, steps_alone, steps_noisy, ncpus,
		       pinned ? "true" : "false", a_med, n_med, n_med / a_med);
		for (int p = 0; p < c.pairs; p++)
			printf("%s%.3f", p ? "," : "", pair_slow[p]);
		printf("],\"hostile_lives\":%ju,\"storm_tensors_registered\":%ju,\"hammer_ring_ops\":%ju}\n",
		       (uintmax_t)nc->lives, (uintmax_t)nc->registers, (uintmax_t)nc->ring_ops);
	} else {
		printf("tenants (%s, %d layers x %ju params): bystander step %.2f ms alone, %.2f ms with %d noisy "
		       "tenants: slowdown %.3f (%d pairs of %.1f s; %s)\n  noisy: %ju hostile lives, %ju tensors "
		       "registered, %ju ring ops\n",
		       c.nvme ? "nvme" : "resident", c.layers, (uintmax_t)c.params, a_med * 1e3, n_med * 1e3, c.noisy,
		       n_med / a_med, c.pairs, c.phase_s, pinned ? "noisy tenants on their own core" : "one core: not pinned",
		       (uintmax_t)nc->lives, (uintmax_t)nc->registers, (uintmax_t)nc->ring_ops);
	}
	ret = 0;
	goto out;
fail:
	bench_progress_end(&pg);
	fprintf(stderr, "spillway-bench tenants: bystander step: %s: %s\n", spw_strerror(r),
		spw_optimizer_last_error(b.o));
out:
	if (pgid) {
		kill(-pgid, SIGKILL);
		kill(-pgid, SIGCONT);
	}
	for (int i = 0; i < nkids; i++)
		waitpid(kids[i], NULL, 0);
	bystander_close(&c, &b);
	free(alone);
	free(noisy);
	local_daemon_stop(&d);
	return ret;
}
