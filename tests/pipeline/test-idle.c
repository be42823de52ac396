/* SPDX-License-Identifier: MIT */
/*
 * tests/pipeline/test-idle.c: the threading policy (docs/pipeline.md) seen
 * from a trainer. An optimizer between steps costs no CPU (pool workers,
 * engine and copy streams all asleep), and a trainer that says it computes
 * on every core ($SPILLWAY_TRAINER_THREADS) gets a one-worker pool.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

#include "pipeline-fixture.h"

#define N (4 * (PAGE / 4) + 77)

static const struct spw_param_group group = {
	.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
};

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static int threads_now(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	ASSERT_TRUE(d != NULL);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

/* Two steps of a small model, then 300 ms idle; returns the CPU seconds
 * the idle time cost and sets *started to the threads the optimizer made. */
static double idle_cost(spw_client *c, enum spw_optimizer_mode mode, int *started)
{
	static float init[N], dev[N], g[N];
	struct spw_optimizer_opts oo = { .size = sizeof(oo), .mode = mode, .groups = &group, .ngroups = 1,
					 .device = "host" };
	struct spw_step_result res = { .size = sizeof(res) };
	spw_optimizer *o;
	uint32_t id;
	int before = threads_now();
	double t0, t1;

	for (size_t i = 0; i < N; i++)
		g[i] = (float)((int)(i % 13) - 6) * 1e-3f;
	ASSERT_OK(spw_optimizer_new(c, &oo, &o));
	*started = threads_now() - before;
	ASSERT_OK(spw_optimizer_add(o, "w", 0, N, init, dev, SPW_TYPE_F32, &id));
	for (uint64_t s = 1; s <= 2; s++) {
		ASSERT_OK(spw_optimizer_begin(o, s, NULL, 0.0f));
		ASSERT_OK(spw_optimizer_grad_ready(o, id, SPW_ALL_CHUNKS, g, sizeof(g), SPW_TYPE_F32, NULL));
		ASSERT_OK(spw_optimizer_end(o, &res));
		ASSERT_OK(spw_optimizer_sync(o));
	}
	ASSERT_TRUE(dev[0] != 0.0f); /* the steps did run */
	usleep(20000);
	t0 = cpu_s();
	usleep(300000);
	t1 = cpu_s();
	spw_optimizer_free(o);
	return t1 - t0;
}

int main(void)
{
	struct spw_test_daemon d;
	spw_client *c;
	int started;
	double cost;

	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	c = connect_client(&d, "idle/0", 16u << 20);
	for (int mode = 0; mode < 2; mode++) {
		enum spw_optimizer_mode m = mode ? SPW_OPT_EXACT : SPW_OPT_OVERLAPPED;

		/* Between steps nothing polls: the engine sleeps in poll(), the
		 * workers on a futex, the copy streams on condition variables. */
		unsetenv("SPILLWAY_TRAINER_THREADS");
		cost = idle_cost(c, m, &started);
		fprintf(stderr, "%s: %d threads started; %.1f ms CPU in 300 ms idle\n",
			mode ? "exact" : "overlapped", started, cost * 1e3);
		ASSERT_TRUE(cost < 0.03);

		/* A trainer on every core: one worker (+ engine + 2 copy streams). */
		setenv("SPILLWAY_TRAINER_THREADS", "4096", 1);
		cost = idle_cost(c, m, &started);
		ASSERT_EQ(started, 4);
		ASSERT_TRUE(cost < 0.03);
	}
	unsetenv("SPILLWAY_TRAINER_THREADS");
	spw_client_detach(c);
	spw_client_free(c);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	return 0;
}
