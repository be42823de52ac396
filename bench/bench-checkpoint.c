/* SPDX-License-Identifier: MIT */
/*
 * spillway-bench checkpoint: what a checkpoint of optimizer state on the
 * NVMe tier costs, against copying the same bytes.
 *
 *   spillway-bench checkpoint [--json] [--sizes MiB,MiB] [--trials N] [--dir DIR]
 *                             [--restart-mib MiB] [--spare F] [--compute-ms MS]
 *                             [--priority low|normal]
 *
 * For each size of fp32 AdamW state (p, m, v; default 1 GiB and 4 GiB), a
 * trainer thread trains a persistent session on the NVMe tier (swap files
 * in DIR, default /var/tmp; a region of an eighth of the state). Then,
 * alternating A, B and C in each trial:
 *   A  spillwayctl's call (spw_client_checkpoint, a second client) while
 *      the trainer trains: checkpoint_s is the daemon's copy (the reply's
 *      seconds; the wait for the commit point is commit_wait_s), and each
 *      trainer step that overlapped it and took longer than 1.5 times the
 *      median step before it is held up: stall_steps of them, stall_s
 *      their time beyond that median;
 *   B  cp -r of the checkpoint's directory on the same filesystem, then
 *      sync (its files dropped from the page cache first, as the swap
 *      pages A reads are not in it): cp_s; then twice more, the source
 *      now read once (on a virtual disk the first read of freshly written
 *      blocks can be several times slower than the next, while the swap
 *      pages A reads are read every step): alone, cp_warm_s, and while
 *      the trainer trains as it did during A, cp_loaded_s;
 *   C  torch.save of an AdamW state_dict of the same sizes (and the
 *      parameters) into DIR, then fsync, by /usr/bin/python3:
 *      torch_save_s; when python3 has no torch, null and torch_save says
 *      why.
 * The trainer is paused during C and all of B but cp_loaded_s. Ratios
 * are medians of the trials' ratios: ratio_vs_cp = A / B (cp_s),
 * ratio_vs_cp_warm and ratio_vs_cp_loaded the same against the other two
 * copies, ratio_vs_torch_save = A / C. ratio_vs_cp_loaded is the like for
 * like: the same disk, the same trainer, the same state of the source.
 *
 * Then restart_s (--restart-mib, default 1024; 0 skips): a spillwayd with
 * persist.state_dir, a persistent session of that much state with its
 * trainer attached after two steps; SIGTERM to the daemon (it saves the
 * session and exits: stop_s), a new daemon (start_s: up and listening),
 * the trainer attaching again until the restore let it, adopting, the
 * master weights read back (reattach_s) and one step (restart_s, all from
 * the SIGTERM).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <spillway/spillway.h>

#include "bench.h"
#include "util/localdaemon.h"

#define TENSORS 8
#define PAGE (1u << 20)
#define SESSION "bench/checkpoint"
#define MAX_STEPS 4096
#define WARM 3

static const struct spw_param_group group = {
	.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
};

struct trainer {
	const char *sock;
	uint64_t count;            /* elements per tensor */
	float *dev[TENSORS], *grad;
	uint32_t id[TENSORS];
	spw_client *c;
	spw_optimizer *o;
	uint64_t step;             /* the last step done */
	pthread_t th;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool run, quit, idle;
	int err;
	unsigned n;                /* steps timed */
	uint64_t t0[MAX_STEPS], t1[MAX_STEPS];
};

/* --spare: swap the session has beyond its tensors, as a fraction of the
 * state. Pages on disk at the commit point that the trainer rewrites
 * before the copy has them are written there (their old homes kept for
 * the copy); past it, such a write-back waits for the copier. */
static double spare_frac = 0.125;

static uint64_t spare_swap(uint64_t state)
{
	return (uint64_t)((double)state * spare_frac);
}

static uint64_t state_bytes(const struct trainer *t)
{
	return t->count * 12 * TENSORS;
}

static int attach(struct trainer *t, bool quiet)
{
	uint64_t state = state_bytes(t);
	struct spw_attach_opts a = {
		.size = sizeof(a), .session = SESSION, .page_size = PAGE, .persistent = 1, .lease_s = 600,
		/* An eighth of the state pinned: the rest lives in the swap files. */
		.region_bytes = ((state / 8 > (64u << 20) ? state / 8 : (64u << 20)) + PAGE - 1) / PAGE * PAGE,
		/* p, m, v, and the undo copy of p a persistent overlapped
		 * optimizer keeps (client/journal.c): 16 bytes a parameter. */
		.swap_bytes = (state * 4 / 3 + spare_swap(state) + (64u << 20)) / PAGE * PAGE, .flags = SPW_ATTACH_SWAP_BYTES,
	};
	/* A checkpoint's copy holds the trainer's ring for as long as it runs. */
	struct spw_client_opts co = { .size = sizeof(co), .reply_timeout_ms = 600000 };
	int r;

	if ((r = spw_client_new(&co, &t->c)) < 0)
		return r;
	if ((r = spw_client_connect(t->c, t->sock)) < 0 || (r = spw_client_attach(t->c, &a)) < 0) {
		if (!quiet || r != -EAGAIN)
			fprintf(stderr, "spillway-bench checkpoint: %s\n", spw_client_last_error(t->c));
		spw_client_free(t->c);
		t->c = NULL;
	}
	return r;
}

static int optimizer(struct trainer *t)
{
	struct spw_optimizer_opts oo = { .size = sizeof(oo), .mode = SPW_OPT_OVERLAPPED, .tier = SPW_TENSOR_SWAPPABLE,
					 .groups = &group, .ngroups = 1, .device = "host", .window = 4,
					 .wait_timeout_ms = 600000 };
	char name[32];
	int r;

	if ((r = spw_optimizer_new(t->c, &oo, &t->o)) < 0) {
		fprintf(stderr, "spillway-bench checkpoint: %s\n", spw_client_last_error(t->c));
		return r;
	}
	for (int i = 0; i < TENSORS; i++) {
		snprintf(name, sizeof(name), "layer%d.weight", i);
		if ((r = spw_optimizer_add(t->o, name, 0, t->count, t->dev[i], t->dev[i], SPW_TYPE_F32, &t->id[i])) < 0) {
			fprintf(stderr, "spillway-bench checkpoint: %s\n", spw_optimizer_last_error(t->o));
			return r;
		}
	}
	return 0;
}

/* --compute-ms: what a step spends in forward and backward before its
 * gradients, the trainer's thread asleep as while a GPU computes (the
 * daemon's write-behind and read-ahead go on meanwhile). 0: none, a
 * trainer bound by its disk alone, the worst case for a copy that shares
 * that disk. */
static unsigned compute_ms;

/* --priority: the daemon's checkpoint.priority, normal (the default) or
 * low (the copy gives the disk to a trainer waiting on it). */
static const char *priority = "normal";

static int one_step(struct trainer *t)
{
	int r;

	if (compute_ms)
		usleep(compute_ms * 1000u);
	r = spw_optimizer_begin(t->o, t->step + 1, NULL, 0.0f);

	for (int i = 0; i < TENSORS && r == 0; i++)
		r = spw_optimizer_grad_ready(t->o, t->id[i], SPW_ALL_CHUNKS, t->grad, t->count * 4, SPW_TYPE_F32, NULL);
	if (r == 0)
		r = spw_optimizer_end(t->o, NULL);
	if (r == 0)
		r = spw_optimizer_sync(t->o);
	if (r < 0)
		fprintf(stderr, "spillway-bench checkpoint: step %ju: %s\n", (uintmax_t)t->step + 1,
			spw_optimizer_last_error(t->o));
	else
		t->step++;
	return r;
}

/* Steps while t->run, timing each. */
static void *train(void *arg)
{
	struct trainer *t = arg;

	pthread_mutex_lock(&t->lock);
	for (;;) {
		uint64_t a, b;
		int r;

		while (!t->run && !t->quit) {
			t->idle = true;
			pthread_cond_broadcast(&t->cond);
			pthread_cond_wait(&t->cond, &t->lock);
		}
		t->idle = false;
		if (t->quit || t->err)
			break;
		pthread_mutex_unlock(&t->lock);
		a = now_ns();
		r = one_step(t);
		b = now_ns();
		pthread_mutex_lock(&t->lock);
		if (r < 0)
			t->err = r;
		if (t->n < MAX_STEPS) {
			t->t0[t->n] = a;
			t->t1[t->n] = b;
			t->n++;
		}
		pthread_cond_broadcast(&t->cond);
	}
	t->idle = true;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

static void model_init(struct trainer *t, double mib)
{
	t->count = (uint64_t)(mib * 1048576.0 / 12.0 / TENSORS);
	t->grad = malloc(t->count * 4);
	for (int i = 0; i < TENSORS; i++)
		t->dev[i] = malloc(t->count * 4);
	for (uint64_t k = 0; t->grad && k < t->count; k++)
		t->grad[k] = (float)((k % 7) + 1) * 1e-3f;
	for (int i = 0; i < TENSORS && t->dev[i]; i++)
		for (uint64_t k = 0; k < t->count; k++)
			t->dev[i][k] = (float)(k % 13) * 0.01f;
}

static void model_free(struct trainer *t)
{
	free(t->grad);
	for (int i = 0; i < TENSORS; i++)
		free(t->dev[i]);
}

/* Sets run and waits for want more steps (run) or for the thread to be
 * between steps (!run). */
static int trainer_go(struct trainer *t, bool run, unsigned want)
{
	int r;

	pthread_mutex_lock(&t->lock);
	t->run = run;
	pthread_cond_broadcast(&t->cond);
	want += t->n;
	while (!t->err && (run ? t->n < want : !t->idle))
		pthread_cond_wait(&t->cond, &t->lock);
	r = t->err;
	pthread_mutex_unlock(&t->lock);
	return r;
}

static int run_cmd(const char *cmd)
{
	int st = system(cmd);

	return st == 0 ? 0 : -EIO;
}

/* Drops the directory's files from the page cache (synced first). */
static void uncache_dir(const char *path)
{
	DIR *dir = opendir(path);
	struct dirent *e;
	char f[1024];

	while (dir && (e = readdir(dir))) {
		int fd;

		if (e->d_name[0] == '.')
			continue;
		snprintf(f, sizeof(f), "%s/%s", path, e->d_name);
		if ((fd = open(f, O_RDONLY)) >= 0) {
			fdatasync(fd);
			posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
			close(fd);
		}
	}
	if (dir)
		closedir(dir);
}

static const char torch_save_py[] =
	"import os, sys, time\n"
	"try:\n"
	"    import torch\n"
	"except ImportError:\n"
	"    print('skip'); sys.exit(0)\n"
	"n, k, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]\n"
	"torch.set_num_threads(1)\n"
	"ps = [torch.nn.Parameter(torch.full((n,), 0.01)) for _ in range(k)]\n"
	"opt = torch.optim.AdamW(ps, lr=1e-3)\n"
	"for p in ps:\n"
	"    p.grad = torch.full_like(p, 1e-3)\n"
	"opt.step()\n"
	"for p in ps:\n"
	"    p.grad = None\n"
	"sd = {'model': {'layer%d.weight' % i: p.detach() for i, p in enumerate(ps)}, 'optimizer': opt.state_dict()}\n"
	"t = time.monotonic()\n"
	"with open(path, 'wb') as f:\n"
	"    torch.save(sd, f)\n"
	"    f.flush()\n"
	"    os.fsync(f.fileno())\n"
	"print('%.6f' % (time.monotonic() - t))\n";

/* C: seconds, 0 when python3 has no torch, -1 on failure. */
static double torch_save(const struct trainer *t, const char *dir)
{
	char script[512], out[256], cmd[2048], line[64] = "";
	double s = -1.0;
	FILE *f;

	snprintf(script, sizeof(script), "%s/torch_save.py", dir);
	snprintf(out, sizeof(out), "%s/state.pt", dir);
	f = fopen(script, "w");
	if (!f || fputs(torch_save_py, f) < 0) {
		if (f)
			fclose(f);
		return -1.0;
	}
	fclose(f);
	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 '%s' %ju %d '%s'", script, (uintmax_t)t->count, TENSORS, out);
	f = popen(cmd, "r");
	if (f && fgets(line, sizeof(line), f))
		s = !strncmp(line, "skip", 4) ? 0.0 : strtod(line, NULL);
	if (f && pclose(f) != 0)
		s = -1.0;
	unlink(out);
	unlink(script);
	return s;
}

/* cp -r of src to dst (removed first), then sync: seconds in *s. */
static int timed_cp(const char *src, const char *dst, double *s)
{
	char cmd[1200];
	uint64_t a;
	int r;

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dst);
	run_cmd(cmd);
	snprintf(cmd, sizeof(cmd), "cp -r '%s' '%s' && sync", src, dst);
	a = now_ns();
	r = run_cmd(cmd);
	*s = (double)(now_ns() - a) * 1e-9;
	if (r < 0)
		fprintf(stderr, "spillway-bench checkpoint: cp -r %s %s failed\n", src, dst);
	return r;
}

struct trial {
	double ck, wait, stall, cp, cp_warm, cp_loaded, ts, step;
	unsigned stall_steps;
	uint64_t kernel;
	uint64_t direct; /* written from memory with O_DIRECT */
	uint64_t moved, waits; /* copy-on-write: pages moved to spare swap, pages that waited for the copy */
	uint64_t yields;       /* times the copy held back for a trainer waiting on the disk */
	uint64_t saved;        /* copy-on-write: bytes the loop saved aside before the trainer changed them */
	uint64_t from_reads;   /* of which saved as the trainer's reads brought them in */
	uint64_t swap_read;    /* what the copy read from swap itself */
	double ring_held;      /* the session's ring held: the plan, PINs waiting for the copy */
	double yield_s;
};

/* A, B and C once. */
static int one_trial(struct trainer *t, const char *dir, unsigned k, struct trial *tr)
{
	struct spw_checkpoint_result res = { .size = sizeof(res) };
	char ck[512], cp[512], cmd[1200];
	double durs[MAX_STEPS], base;
	unsigned from, to, nb = 0;
	spw_client *c = NULL;
	uint64_t a = 0, b = 0;
	int r;

	snprintf(ck, sizeof(ck), "%s/ckpt-%u", dir, k);
	snprintf(cp, sizeof(cp), "%s/cp-%u", dir, k);
	if ((r = trainer_go(t, true, WARM)) < 0)
		return r;
	pthread_mutex_lock(&t->lock);
	from = t->n;
	for (unsigned i = from - (WARM - 1); i < from; i++) /* the first warm step waited for the resume */
		durs[nb++] = (double)(t->t1[i] - t->t0[i]) * 1e-9;
	pthread_mutex_unlock(&t->lock);
	base = bench_median(durs, nb);
	if ((r = spw_client_new(NULL, &c)) == 0 && (r = spw_client_connect(c, t->sock)) == 0) {
		a = now_ns();
		r = spw_client_checkpoint(c, SESSION, ck, &res);
		b = now_ns();
		if (r < 0)
			fprintf(stderr, "spillway-bench checkpoint: %s\n", spw_client_last_error(c));
	}
	spw_client_free(c);
	if (r < 0)
		return r;
	/* The step the copy held up ends after it: wait for one more. */
	if ((r = trainer_go(t, true, 2)) < 0 || (r = trainer_go(t, false, 0)) < 0)
		return r;
	tr->ck = res.seconds;
	tr->wait = res.wait_seconds;
	tr->kernel = res.copied_bytes;
	tr->direct = res.direct_bytes;
	tr->moved = res.cow_moved_bytes;
	tr->waits = res.cow_waits;
	tr->saved = res.cow_bytes;
	tr->from_reads = res.cow_from_reads_bytes;
	tr->swap_read = res.swap_read_bytes;
	tr->ring_held = res.stall_seconds;
	tr->yields = res.yields;
	tr->yield_s = res.yield_seconds;
	tr->step = base;
	tr->stall = 0.0;
	tr->stall_steps = 0;
	pthread_mutex_lock(&t->lock);
	to = t->n;
	for (unsigned i = from; i < to; i++) {
		double d = (double)(t->t1[i] - t->t0[i]) * 1e-9;

		if (t->t0[i] < b && t->t1[i] > a && d > 1.5 * base) {
			tr->stall += d - base;
			tr->stall_steps++;
		}
	}
	pthread_mutex_unlock(&t->lock);
	/* B: cp of the same bytes, from disk, alone. */
	uncache_dir(ck);
	if ((r = timed_cp(ck, cp, &tr->cp)) == 0) {
		/* B2 and B3: again, the source now read once as the swap pages A
		 * read had been (they are read every step), alone and then while
		 * the trainer trains, as A ran. */
		uncache_dir(ck);
		r = timed_cp(ck, cp, &tr->cp_warm);
		uncache_dir(ck);
		if (r == 0 && (r = trainer_go(t, true, 0)) == 0) {
			r = timed_cp(ck, cp, &tr->cp_loaded);
			int q = trainer_go(t, false, 0);

			r = r < 0 ? r : q;
		}
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", ck, cp);
	run_cmd(cmd);
	if (r < 0)
		return r;
	/* C: torch.save of the same state. */
	tr->ts = torch_save(t, dir);
	return tr->ts < 0 ? -EIO : 0;
}

static const char config_fmt[] =
	"{\n"
	"  \"socket\": { \"dir\": \"@DIR@\", \"mode\": \"0600\" },\n"
	"  \"pool\": { \"max_bytes\": \"%juMiB\", \"session_max_bytes\": \"%juMiB\", \"require_locked\": false },\n"
	"  \"swap\": { \"dirs\": [ { \"path\": \"%s\", \"max_bytes\": \"%juMiB\" } ] },\n"
	"  %s\n"
	"  \"checkpoint\": { \"priority\": \"%s\" },\n"
	"  \"log\": { \"level\": \"error\" }\n"
	"}\n";

static int daemon_start(struct local_daemon *d, const char *swapdir, double mib, const char *state_dir)
{
	char cfg[2048], persist[600] = "";
	uintmax_t region = (uintmax_t)(mib / 8 > 64 ? mib / 8 : 64) + 64;

	if (state_dir)
		snprintf(persist, sizeof(persist), "\"persist\": { \"state_dir\": \"%s\" },", state_dir);
	snprintf(cfg, sizeof(cfg), config_fmt, region * 2, region, swapdir, (uintmax_t)(mib * (1.5 + spare_frac)) + 256, persist,
		 priority);
	return local_daemon_start(d, cfg);
}

/* Figures of one size; prints its line. */
static int bench_size(const char *dir, double mib, unsigned trials, bool json)
{
	struct trainer t = { 0 };
	struct trial tr[16];
	struct local_daemon d;
	double ck[16], wait[16], stall[16], cp[16], cpw[16], cpl[16], ts[16], rc[16], rcw[16], rcl[16], rt[16],
		step[16];
	unsigned stall_steps = 0;
	bool torch = true;
	char swapdir[512];
	int r;

	snprintf(swapdir, sizeof(swapdir), "%s/swap", dir);
	if (mkdir(swapdir, 0700) < 0 && errno != EEXIST)
		return -errno;
	if ((r = daemon_start(&d, swapdir, mib, NULL)) < 0) {
		fprintf(stderr, "spillway-bench checkpoint: cannot start spillwayd: %s\n", spw_strerror(r));
		return r;
	}
	model_init(&t, mib);
	t.sock = d.control;
	pthread_mutex_init(&t.lock, NULL);
	pthread_cond_init(&t.cond, NULL);
	r = t.grad && t.dev[TENSORS - 1] ? 0 : -ENOMEM;
	if (r == 0 && (r = attach(&t, false)) == 0 && (r = optimizer(&t)) == 0)
		r = -pthread_create(&t.th, NULL, train, &t);
	for (unsigned k = 0; k < trials && r == 0; k++) {
		r = one_trial(&t, dir, k, &tr[k]);
		if (r < 0)
			break;
		ck[k] = tr[k].ck;
		wait[k] = tr[k].wait;
		stall[k] = tr[k].stall;
		step[k] = tr[k].step;
		cp[k] = tr[k].cp;
		ts[k] = tr[k].ts;
		cpw[k] = tr[k].cp_warm;
		cpl[k] = tr[k].cp_loaded;
		rc[k] = tr[k].ck / tr[k].cp;
		rcw[k] = tr[k].ck / tr[k].cp_warm;
		rcl[k] = tr[k].ck / tr[k].cp_loaded;
		rt[k] = tr[k].ts > 0 ? tr[k].ck / tr[k].ts : 0.0;
		torch &= tr[k].ts > 0;
		if (tr[k].stall_steps > stall_steps)
			stall_steps = tr[k].stall_steps;
	}
	if (t.o) {
		pthread_mutex_lock(&t.lock);
		t.quit = true;
		pthread_cond_broadcast(&t.cond);
		pthread_mutex_unlock(&t.lock);
		pthread_join(t.th, NULL);
	}
	if (r == 0) {
		uint64_t kernel = tr[0].kernel;
		double c = bench_median(ck, trials), w = bench_median(wait, trials), s = bench_median(stall, trials),
		       p = bench_median(cp, trials), q = bench_median(ts, trials), x = bench_median(rc, trials),
		       y = bench_median(rt, trials), st = bench_median(step, trials);

		if (json) {
			printf("{\"bench\":\"checkpoint\",\"tier\":\"nvme\",\"state_mib\":%.0f,\"spare_swap_mib\":%.0f,"
			       "\"compute_ms\":%u,\"priority\":\"%s\",\"yields\":%ju,\"yield_s\":%.3f,\"trials\":%u,"
			       "\"step_s\":%.4f,\"checkpoint_s\":%.4f,\"commit_wait_s\":%.4f,"
			       "\"copied_in_kernel_bytes\":%ju,\"direct_bytes\":%ju,\"cow_moved_bytes\":%ju,\"cow_waits\":%ju,"
			       "\"cow_saved_bytes\":%ju,\"cow_from_reads_bytes\":%ju,\"swap_read_bytes\":%ju,\"ring_held_s\":%.3f,"
			       "\"stall_s\":%.4f,\"stall_steps\":%u,\"cp_s\":%.4f,", mib, mib * spare_frac, compute_ms, priority,
			       (uintmax_t)tr[0].yields, tr[0].yield_s, trials,
			       st, c, w, (uintmax_t)kernel, (uintmax_t)tr[0].direct, (uintmax_t)tr[0].moved,
			       (uintmax_t)tr[0].waits, (uintmax_t)tr[0].saved, (uintmax_t)tr[0].from_reads, (uintmax_t)tr[0].swap_read, tr[0].ring_held, s,
			       stall_steps, p);
			if (torch)
				printf("\"torch_save_s\":%.4f,\"torch_save\":\"ran\",", q);
			else
				printf("\"torch_save_s\":null,\"torch_save\":\"skipped: /usr/bin/python3 has no torch\",");
			printf("\"cp_warm_s\":%.4f,\"cp_loaded_s\":%.4f,\"ratio_vs_cp\":%.3f,\"ratio_vs_cp_warm\":%.3f,"
			       "\"ratio_vs_cp_loaded\":%.3f,", bench_median(cpw, trials), bench_median(cpl, trials), x,
			       bench_median(rcw, trials), bench_median(rcl, trials));
			if (torch)
				printf("\"ratio_vs_torch_save\":%.3f}\n", y);
			else
				printf("\"ratio_vs_torch_save\":null}\n");
		} else {
			printf("checkpoint, %.0f MiB of state on the NVMe tier: %.3f s (cp %.3f s, x%.2f; again %.3f s "
			       "alone, %.3f s while training, x%.2f; torch.save %s), the trainer held up %u step(s) for "
			       "%.3f s (its step: %.3f s)\n", mib, c, p, x, bench_median(cpw, trials),
			       bench_median(cpl, trials), bench_median(rcl, trials), torch ? "ran" : "skipped",
			       stall_steps, s, st);
		}
	}
	spw_optimizer_free(t.o);
	if (t.c)
		spw_client_detach(t.c);
	spw_client_free(t.c);
	model_free(&t);
	local_daemon_stop(&d);
	return r;
}

/* restart_s: SIGTERM with the state attached, a new daemon, reattach, one step. */
static int bench_restart(const char *dir, double mib, bool json)
{
	struct trainer t = { 0 };
	struct local_daemon d;
	char swapdir[512], state[512], cmd[1200];
	double stop_s = 0, start_s = 0, reattach_s = 0, first_s = 0;
	uint64_t t0;
	int r;

	snprintf(swapdir, sizeof(swapdir), "%s/swap", dir);
	snprintf(state, sizeof(state), "%s/state", dir);
	if ((mkdir(swapdir, 0700) < 0 && errno != EEXIST) || (mkdir(state, 0700) < 0 && errno != EEXIST))
		return -errno;
	model_init(&t, mib);
	if (!t.grad || !t.dev[TENSORS - 1]) {
		model_free(&t);
		return -ENOMEM;
	}
	if ((r = daemon_start(&d, swapdir, mib, state)) < 0) {
		fprintf(stderr, "spillway-bench checkpoint: cannot start spillwayd: %s\n", spw_strerror(r));
		model_free(&t);
		return r;
	}
	t.sock = d.control;
	if ((r = attach(&t, false)) == 0 && (r = optimizer(&t)) == 0 && (r = one_step(&t)) == 0)
		r = one_step(&t);
	if (r < 0) {
		local_daemon_stop(&d);
		goto out;
	}
	t0 = now_ns();
	r = local_daemon_stop(&d);
	stop_s = (double)(now_ns() - t0) * 1e-9;
	/* The trainer's connection is dead: its optimizer and client go. */
	spw_optimizer_free(t.o);
	spw_client_free(t.c);
	t.o = NULL;
	t.c = NULL;
	if (r != 0) {
		fprintf(stderr, "spillway-bench checkpoint: spillwayd exited with %d at SIGTERM\n", r);
		r = -EIO;
		goto out;
	}
	if ((r = daemon_start(&d, swapdir, mib, state)) < 0)
		goto out;
	start_s = (double)(now_ns() - t0) * 1e-9;
	t.sock = d.control;
	for (int tries = 0; (r = attach(&t, true)) == -EAGAIN && tries < 60000; tries++)
		usleep(1000);
	if (r == 0)
		r = optimizer(&t);
	if (r == 0 && spw_optimizer_resumed_step(t.o) != 2) {
		fprintf(stderr, "spillway-bench checkpoint: the restarted daemon resumed step %ju, not 2\n",
			(uintmax_t)spw_optimizer_resumed_step(t.o));
		r = -ESTALE;
	}
	for (int i = 0; i < TENSORS && r == 0; i++)
		r = spw_optimizer_read(t.o, t.id[i], SPW_STATE_PARAM, t.dev[i]);
	reattach_s = (double)(now_ns() - t0) * 1e-9;
	if (r == 0)
		r = one_step(&t);
	first_s = (double)(now_ns() - t0) * 1e-9;
	spw_optimizer_free(t.o);
	if (t.c)
		spw_client_detach(t.c);
	spw_client_free(t.c);
	local_daemon_stop(&d);
	if (r == 0) {
		if (json)
			printf("{\"bench\":\"checkpoint\",\"restart_mib\":%.0f,\"stop_s\":%.4f,\"start_s\":%.4f,"
			       "\"reattach_s\":%.4f,\"restart_s\":%.4f}\n", mib, stop_s, start_s, reattach_s, first_s);
		else
			printf("restart with %.0f MiB of persistent state: SIGTERM to exit %.3f s, daemon up %.3f s, "
			       "reattached %.3f s, first step %.3f s\n", mib, stop_s, start_s, reattach_s, first_s);
	}
out:
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", state);
	run_cmd(cmd);
	model_free(&t);
	return r;
}

static const char usage[] =
	"usage: spillway-bench checkpoint [--json] [--sizes MiB,MiB] [--trials N] [--dir DIR] [--restart-mib MiB]\n"
	"         [--spare F] [--compute-ms MS] [--priority low|normal]\n"
	"  --spare F: the session's swap beyond its tensors, F times the state (default 0.125): where the\n"
	"  trainer's rewrites of pages the copy has not read yet go instead of waiting for it\n"
	"  --compute-ms MS: each step sleeps MS first, as a trainer whose GPU computes forward and\n"
	"  backward (default 0: a trainer bound by its disk alone)\n"
	"  --priority P: the daemon's checkpoint.priority (default normal: the copy's full window always;\n"
	"  low: one request in flight while the trainer waits on the disk)\n";

int bench_checkpoint(int argc, char **argv)
{
	const char *sizes = "1024,4096", *base = "/var/tmp";
	double restart_mib = 1024;
	unsigned trials = 2;
	bool json = false;
	char dir[512], cmd[600];
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
		else if (!strcmp(argv[i], "--trials") && atoi(v) > 0 && atoi(v) <= 16)
			trials = (unsigned)atoi(v);
		else if (!strcmp(argv[i], "--spare") && atof(v) >= 0 && atof(v) <= 4)
			spare_frac = atof(v);
		else if (!strcmp(argv[i], "--compute-ms") && atoi(v) >= 0 && atoi(v) <= 600000)
			compute_ms = (unsigned)atoi(v);
		else if (!strcmp(argv[i], "--priority") && v && (!strcmp(v, "low") || !strcmp(v, "normal")))
			priority = v;
		else if (!strcmp(argv[i], "--dir"))
			base = v;
		else if (!strcmp(argv[i], "--restart-mib"))
			restart_mib = strtod(v, NULL);
		else
			return bench_usage(usage, argv[i]);
		i++;
	}
	snprintf(dir, sizeof(dir), "%s/spillway-bench-checkpoint.XXXXXX", base);
	if (!mkdtemp(dir)) {
		fprintf(stderr, "spillway-bench checkpoint: %s: %s\n", dir, strerror(errno));
		return 1;
	}
	local_daemon_locate();
	for (const char *p = sizes; *p && r == 0;) {
		r = bench_size(dir, strtod(p, NULL), trials, json);
		p = strchr(p, ',');
		p = p ? p + 1 : "";
	}
	if (r == 0 && restart_mib > 0)
		r = bench_restart(dir, restart_mib, json);
	if (r < 0)
		fprintf(stderr, "spillway-bench checkpoint: %s\n", spw_strerror(r));
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	run_cmd(cmd);
	return r < 0;
}
