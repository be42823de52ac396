/* SPDX-License-Identifier: MIT */
/*
 * spillway-bench resume: how long a trainer killed with SIGKILL takes to
 * be training again.
 *
 *   spillway-bench resume [--json] [--sizes MiB,MiB] [--trials N] [--socket PATH]
 *
 * For each size of optimizer state (default: the demo's 26 MiB and 1 GiB),
 * a child process trains two steps on a persistent session and is killed.
 * Then, alternating A and B in the same run:
 *   A  reattach: a new client takes the orphaned session over, adopts its
 *      tensors, reads the master weights back (the device parameters) and
 *      runs one step;
 *   B  reload: what a restart from a checkpoint file does instead: read
 *      p, m and v from a file (written once beforehand, in the page cache
 *      as a fresh checkpoint would be), build a fresh optimizer from them
 *      and run one step.
 * Fields: reattach_s (kill to state in hand), first_step_s (kill to the
 * first step done), reload_s and reload_first_step_s for B, speedup
 * (reload_first_step_s / first_step_s).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include <spillway/spillway.h>

#include "bench.h"
#include "util/localdaemon.h"

#define TENSORS 8
#define PAGE (4u << 20)
#define SESSION "bench/resume"

static const char bench_config[] =
	"{\n"
	"  \"socket\": { \"dir\": \"@DIR@\", \"mode\": \"0600\" },\n"
	"  \"pool\": { \"max_bytes\": \"4GiB\", \"session_max_bytes\": \"2GiB\", \"require_locked\": false },\n"
	"  \"log\": { \"level\": \"error\" }\n"
	"}\n";

static const struct spw_param_group group = {
	.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
};

struct model {
	uint64_t count;          /* elements per tensor */
	float *dev[TENSORS];     /* the "device" parameters (host backend) */
	float *grad;             /* one synthetic gradient for every tensor */
	uint32_t id[TENSORS];
};

static uint64_t region_for(const struct model *m)
{
	/* p, m, v and (overlapped mode on a persistent session) the undo
	 * copy of p, resident in whole pages, plus staging, the journal and
	 * slack. */
	return ((uint64_t)TENSORS * 4 * ((m->count * 4 + PAGE - 1) / PAGE) + 32) * PAGE;
}

static int attach(const char *sock, bool persistent, uint64_t region, spw_client **ret)
{
	struct spw_attach_opts a = { .size = sizeof(a), .session = SESSION, .region_bytes = region,
				     .page_size = PAGE, .persistent = persistent, .lease_s = 600 };
	spw_client *c;
	int r;

	if ((r = spw_client_new(NULL, &c)) < 0)
		return r;
	if ((r = spw_client_connect(c, sock)) < 0 || (r = spw_client_attach(c, &a)) < 0) {
		fprintf(stderr, "spillway-bench resume: %s\n", spw_client_last_error(c));
		spw_client_free(c);
		return r;
	}
	*ret = c;
	return 0;
}

static int optimizer(spw_client *c, struct model *m, spw_optimizer **ret)
{
	struct spw_optimizer_opts oo = { .size = sizeof(oo), .mode = SPW_OPT_OVERLAPPED, .tier = SPW_TENSOR_RESIDENT,
					 .groups = &group, .ngroups = 1, .device = "host" };
	char name[32];
	int r;

	if ((r = spw_optimizer_new(c, &oo, ret)) < 0) {
		fprintf(stderr, "spillway-bench resume: %s\n", spw_client_last_error(c));
		return r;
	}
	for (int i = 0; i < TENSORS; i++) {
		snprintf(name, sizeof(name), "layer%d.weight", i);
		if ((r = spw_optimizer_add(*ret, name, 0, m->count, m->dev[i], m->dev[i], SPW_TYPE_F32, &m->id[i])) < 0) {
			fprintf(stderr, "spillway-bench resume: %s\n", spw_optimizer_last_error(*ret));
			return r;
		}
	}
	return 0;
}

/* The end of a run: its optimizer, then its session. */
static void run_end(spw_optimizer *o, spw_client *c)
{
	spw_optimizer_free(o);
	if (c)
		spw_client_detach(c);
	spw_client_free(c);
}

static int one_step(spw_optimizer *o, struct model *m, uint64_t step)
{
	int r = spw_optimizer_begin(o, step, NULL, 0.0f);

	for (int i = 0; i < TENSORS && r == 0; i++)
		r = spw_optimizer_grad_ready(o, m->id[i], SPW_ALL_CHUNKS, m->grad, m->count * 4, SPW_TYPE_F32, NULL);
	if (r == 0)
		r = spw_optimizer_end(o, NULL);
	if (r == 0)
		r = spw_optimizer_sync(o);
	if (r < 0)
		fprintf(stderr, "spillway-bench resume: step %ju: %s\n", (uintmax_t)step, spw_optimizer_last_error(o));
	return r;
}

/* The trainer that dies: two steps on a persistent session, then it says
 * so on fd and waits for its SIGKILL. */
static void doomed_trainer(const char *sock, struct model *m, int fd)
{
	spw_client *c;
	spw_optimizer *o;

	if (attach(sock, true, region_for(m), &c) < 0 || optimizer(c, m, &o) < 0 || one_step(o, m, 1) < 0 ||
	    one_step(o, m, 2) < 0)
		_exit(1);
	/* sync: step 2 is committed (one_step synced already). */
	if (write(fd, "k", 1) != 1)
		_exit(1);
	pause();
	_exit(0);
}

/* Kills a doomed trainer after its two steps; returns the instant of the
 * kill, or 0 on failure. */
static uint64_t kill_trainer(const char *sock, struct model *m)
{
	int pfd[2];
	uint64_t t;
	pid_t pid;
	char ok;

	if (pipe(pfd) < 0)
		return 0;
	pid = fork();
	if (pid == 0) {
		close(pfd[0]);
		doomed_trainer(sock, m, pfd[1]);
	}
	close(pfd[1]);
	if (pid < 0 || read(pfd[0], &ok, 1) != 1) {
		close(pfd[0]);
		return 0;
	}
	close(pfd[0]);
	kill(pid, SIGKILL);
	t = now_ns();
	waitpid(pid, NULL, 0);
	return t;
}

/* A: the replacement takes the orphan over. */
static int run_reattach(const char *sock, struct model *m, double *reattach_s, double *first_s)
{
	uint64_t t0 = kill_trainer(sock, m);
	spw_optimizer *o = NULL;
	spw_client *c = NULL;
	int r;

	if (!t0)
		return -ECHILD;
	/* The kill reached the daemon once it answers an attach as a
	 * takeover: the dead client's hang-up is seen at once. */
	for (int tries = 0; (r = attach(sock, true, region_for(m), &c)) == -EAGAIN && tries < 500; tries++)
		usleep(1000);
	if (r == 0)
		r = optimizer(c, m, &o);
	if (r == 0 && spw_optimizer_resumed_step(o) != 2)
		r = -ESTALE;
	for (int i = 0; i < TENSORS && r == 0; i++)
		r = spw_optimizer_read(o, m->id[i], SPW_STATE_PARAM, m->dev[i]);
	*reattach_s = (double)(now_ns() - t0) * 1e-9;
	if (r == 0)
		r = one_step(o, m, 3);
	*first_s = (double)(now_ns() - t0) * 1e-9;
	run_end(o, c);
	return r;
}

/* B: a restart from a checkpoint file of the same state. */
static int run_reload(const char *sock, struct model *m, const char *file, double *reload_s, double *first_s)
{
	uint64_t t0 = kill_trainer(sock, m), bytes = m->count * 4;
	spw_optimizer *o = NULL;
	spw_client *c = NULL;
	float *buf = malloc(bytes * 3 * TENSORS);
	int r = buf ? 0 : -ENOMEM, fd;

	if (!t0) {
		free(buf);
		return -ECHILD;
	}
	/* The orphan is not this run's: drop it, as the restart would. */
	if ((r = spw_client_new(NULL, &c)) == 0 && (r = spw_client_connect(c, sock)) == 0)
		r = spw_client_drop(c, SESSION);
	spw_client_free(c);
	c = NULL;
	fd = open(file, O_RDONLY);
	if (r == 0 && (fd < 0 || read(fd, buf, bytes * 3 * TENSORS) != (ssize_t)(bytes * 3 * TENSORS)))
		r = -EIO;
	if (fd >= 0)
		close(fd);
	for (int i = 0; i < TENSORS && r == 0; i++)
		memcpy(m->dev[i], buf + (size_t)i * 3 * m->count, bytes);
	if (r == 0)
		r = attach(sock, false, region_for(m), &c);
	if (r == 0)
		r = optimizer(c, m, &o);
	for (int i = 0; i < TENSORS && r == 0; i++) {
		r = spw_optimizer_write(o, m->id[i], SPW_STATE_EXP_AVG, buf + ((size_t)i * 3 + 1) * m->count);
		if (r == 0)
			r = spw_optimizer_write(o, m->id[i], SPW_STATE_EXP_AVG_SQ, buf + ((size_t)i * 3 + 2) * m->count);
	}
	*reload_s = (double)(now_ns() - t0) * 1e-9;
	/* The checkpoint holds the state after step 2, like the orphan. */
	if (r == 0)
		r = one_step(o, m, 3);
	*first_s = (double)(now_ns() - t0) * 1e-9;
	run_end(o, c);
	free(buf);
	return r;
}

/* The checkpoint B reloads: the state after two steps, written once. */
static int write_checkpoint(const char *sock, struct model *m, const char *file)
{
	spw_optimizer *o = NULL;
	spw_client *c = NULL;
	uint64_t bytes = m->count * 4;
	float *buf = malloc(bytes);
	int r = buf ? attach(sock, false, region_for(m), &c) : -ENOMEM, fd = -1;

	if (r == 0)
		r = optimizer(c, m, &o);
	if (r == 0)
		r = one_step(o, m, 1);
	if (r == 0)
		r = one_step(o, m, 2);
	if (r == 0 && (fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0600)) < 0)
		r = -errno;
	for (int i = 0; i < TENSORS && r == 0; i++)
		for (int w = SPW_STATE_PARAM; w <= SPW_STATE_EXP_AVG_SQ && r == 0; w++) {
			r = spw_optimizer_read(o, m->id[i], (enum spw_optimizer_state)w, buf);
			if (r == 0 && write(fd, buf, bytes) != (ssize_t)bytes)
				r = -EIO;
		}
	if (fd >= 0)
		close(fd);
	run_end(o, c);
	free(buf);
	return r;
}

static const char usage[] =
	"usage: spillway-bench resume [--json] [--sizes MiB,MiB] [--trials N] [--socket PATH]\n";

int bench_resume(int argc, char **argv)
{
	const char *sizes = "26,1024", *socket_path = NULL;
	struct local_daemon d;
	bool json = false, own = false;
	unsigned trials = 3;
	char file[512];
	int r = 0;

	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(argv[i], "--json")) {
			json = true;
			continue;
		}
		if (!v || !strcmp(argv[i], "--help"))
			return bench_usage(usage, argv[i]);
		if (!strcmp(argv[i], "--sizes"))
			sizes = v;
		else if (!strcmp(argv[i], "--trials") && atoi(v) > 0)
			trials = (unsigned)atoi(v);
		else if (!strcmp(argv[i], "--socket"))
			socket_path = v;
		else
			return bench_usage(usage, argv[i]);
		i++;
	}
	if (!socket_path) {
		local_daemon_locate();
		if ((r = local_daemon_start(&d, bench_config)) < 0) {
			fprintf(stderr, "spillway-bench resume: cannot start spillwayd: %s\n", spw_strerror(r));
			return 1;
		}
		own = true;
		socket_path = d.control;
	}
	snprintf(file, sizeof(file), "/var/tmp/spillway-bench-resume.%d", (int)getpid());
	for (const char *p = sizes; *p && r == 0;) {
		double mib = strtod(p, NULL), ra[16], rf[16], la[16], lf[16];
		struct model m = { .count = (uint64_t)(mib * 1048576.0 / 12.0 / TENSORS) };

		m.grad = malloc(m.count * 4);
		for (int i = 0; i < TENSORS; i++)
			m.dev[i] = malloc(m.count * 4);
		for (uint64_t k = 0; m.grad && k < m.count; k++)
			m.grad[k] = (float)((k % 7) + 1) * 1e-3f;
		for (int i = 0; i < TENSORS && m.dev[i]; i++)
			for (uint64_t k = 0; k < m.count; k++)
				m.dev[i][k] = (float)(k % 13) * 0.01f;
		r = write_checkpoint(socket_path, &m, file);
		for (unsigned t = 0; t < trials && t < 16 && r == 0; t++) {
			r = run_reattach(socket_path, &m, &ra[t], &rf[t]);
			if (r == 0)
				r = run_reload(socket_path, &m, file, &la[t], &lf[t]);
		}
		if (r == 0) {
			double a = bench_median(ra, trials), f = bench_median(rf, trials), la_m = bench_median(la, trials),
			       lf_m = bench_median(lf, trials);

			if (json)
				printf("{\"bench\":\"resume\",\"state_mib\":%.0f,\"params\":%ju,\"trials\":%u,"
				       "\"reattach_s\":%.4f,\"first_step_s\":%.4f,\"reload_s\":%.4f,"
				       "\"reload_first_step_s\":%.4f,\"speedup\":%.2f}\n",
				       mib, (uintmax_t)(m.count * TENSORS), trials, a, f, la_m, lf_m, lf_m / f);
			else
				printf("resume, %.0f MiB of state: reattach %.3f s, first step %.3f s after the kill; "
				       "reload from a file %.3f s, first step %.3f s (%.1fx)\n",
				       mib, a, f, la_m, lf_m, lf_m / f);
		}
		unlink(file);
		free(m.grad);
		for (int i = 0; i < TENSORS; i++)
			free(m.dev[i]);
		p = strchr(p, ',');
		p = p ? p + 1 : "";
	}
	if (r < 0)
		fprintf(stderr, "spillway-bench resume: %s\n", spw_strerror(r));
	if (own)
		local_daemon_stop(&d);
	return r < 0;
}
