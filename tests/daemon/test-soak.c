/* SPDX-License-Identifier: MIT */
/*
 * test-soak: nothing a client does can hurt the daemon or another tenant.
 *
 * One real spillwayd; for SPW_SOAK_SECONDS (default 20) at once:
 *
 *   two trainers   processes training the example MLP through the C
 *                  optimizer API on the swappable tier, in a region under a
 *                  quarter of their state (so every step pages through the
 *                  NVMe tier), one in overlapped mode with a clip
 *                  coefficient, one in exact mode clipping every step; round
 *                  after round, each round's final parameters and moments
 *                  must be the bits of a reference computed in the trainer's
 *                  own memory with kernels/ directly (no daemon), as
 *                  tests/pipeline's three-way comparison does;
 *   a hostile      tenant (noisy.c) respawned by a parent, each life ending
 *                  in its own kill -9: garbage frames, ring entries and
 *                  SQ/CQ indices rewritten while the daemon reads them,
 *                  holes punched in its region and rings memfds, idle
 *                  connections that never say hello.
 *
 * The hostile tenant's 2 and 4 MiB regions are hugetlb-backed where the
 * host has free hugepages (pool.hugepages "auto"): there its punched holes
 * also reach the daemon's SIGBUS path (issue 9, item 1); elsewhere they
 * are ordinary shmem pages.
 *
 * Then, every check made and each failure named before the test fails:
 * the daemon alive and answering status and hello, both trainers
 * bit-identical in every round, and nothing left behind: zero sessions,
 * pool.used_bytes and locked_bytes 0, the daemon's descriptors back to
 * their count before the storm, no session swap file in the swap dir, and
 * a clean SIGTERM exit. The daemon's log goes to a file whose tail is
 * printed at the end.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <spillway/spillway.h>

#include "harness.h"
#include "kernels.h"
#include "mlp.h"
#include "noisy.h"
#include "raw.h"
#include "test.h"
#include "util/clock.h"

#define PAGE (64u << 10)
#define CHUNK (PAGE / 4) /* fp32 elements per chunk: one page of state */
#define BATCH 16
#define STEPS 3
#define MAXT (2 * (MLP_MAX_HIDDEN_LAYERS + 1))
#define NTRAINERS 2

static const char config[] =
	"{\n"
	"  \"socket\": { \"dir\": \"@DIR@\", \"mode\": \"0600\" },\n"
	"  \"pool\": { \"max_bytes\": \"512MiB\", \"session_max_bytes\": \"64MiB\", \"require_locked\": false },\n"
	"  \"session\": { \"max_garbage\": 20 },\n"
	"  \"swap\": { \"dirs\": [ { \"path\": \"@DIR@\", \"max_bytes\": \"2GiB\" } ], \"session_bytes\": \"32MiB\" },\n"
	"  \"log\": { \"level\": \"info\" }\n"
	"}\n";

static const struct spw_param_group group = {
	.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
};

/* ---- a trainer ---- */

struct trainer_cfg {
	int index;
	enum spw_optimizer_mode mode;
	float clip_coef; /* overlapped */
	float max_norm;  /* exact */
};

/* What a run leaves: every tensor's master weights and moments. */
struct state {
	int n;
	float *p[MAXT], *m[MAXT], *v[MAXT];
};

static struct mlp *model(const struct trainer_cfg *tc)
{
	struct mlp_config cfg = { .n_in = 64, .n_hidden = 512, .n_hidden_layers = 2, .n_out = 10,
				  .max_batch = BATCH };
	struct mlp *m;

	ASSERT_OK(mlp_create(&cfg, 7 + (uint64_t)tc->index, &m));
	return m;
}

static void state_alloc(struct state *s, const struct mlp_tensor *t, int n)
{
	memset(s, 0, sizeof(*s));
	s->n = n;
	for (int i = 0; i < n; i++) {
		s->p[i] = calloc(t[i].count, 4);
		s->m[i] = calloc(t[i].count, 4);
		s->v[i] = calloc(t[i].count, 4);
		ASSERT_TRUE(s->p[i] && s->m[i] && s->v[i]);
	}
}

static void state_free(struct state *s)
{
	for (int i = 0; i < s->n; i++) {
		free(s->p[i]);
		free(s->m[i]);
		free(s->v[i]);
	}
}

/* The reference: the same steps with AdamW from kernels/ on this process's
 * memory. The exact mode's norm is the pipeline's: square sums per chunk,
 * chunks in (tensor, chunk) order, the clip coefficient rounded to float. */
static void run_reference(const struct trainer_cfg *tc, struct state *out)
{
	const struct spw_kernels *k = spw_kernels();
	struct mlp *m = model(tc);
	struct mlp_task *task;
	const struct mlp_tensor *t;
	float x[BATCH * 64], loss;
	int32_t y[BATCH];
	int n;

	ASSERT_OK(mlp_task_create(64, 10, 3, &task));
	t = mlp_tensors(m, &n);
	state_alloc(out, t, n);
	for (int step = 1; step <= STEPS; step++) {
		float coef = tc->mode == SPW_OPT_OVERLAPPED ? tc->clip_coef : 1.0f;

		mlp_task_batch(task, (uint64_t)step - 1, BATCH, x, y);
		ASSERT_OK(mlp_forward(m, x, y, BATCH, &loss, NULL));
		ASSERT_OK(mlp_backward(m, NULL, NULL));
		if (tc->mode == SPW_OPT_EXACT) {
			double total = 0.0, c;

			for (int i = 0; i < n; i++)
				for (size_t o = 0; o < t[i].count; o += CHUNK)
					total += k->sumsq[SPW_DTYPE_F32](t[i].grad + o,
									 t[i].count - o < CHUNK ? t[i].count - o : CHUNK);
			c = (double)tc->max_norm / (sqrt(total) + 1e-6);
			coef = c < 1.0 ? (float)c : 1.0f;
		}
		for (int i = 0; i < n; i++) {
			struct spw_adamw_hparams hp = { .lr = group.lr, .beta1 = group.beta1, .beta2 = group.beta2,
							.eps = group.eps, .weight_decay = group.weight_decay,
							.grad_scale = coef, .step = (uint64_t)step };
			struct spw_adamw_consts kc;

			ASSERT_OK(spw_adamw_prepare(&hp, &kc));
			k->adamw[SPW_DTYPE_F32][SPW_DTYPE_NONE](&kc, t[i].param, out->m[i], out->v[i], t[i].grad, NULL,
								t[i].count);
		}
	}
	for (int i = 0; i < n; i++)
		memcpy(out->p[i], t[i].param, t[i].count * 4);
	mlp_task_free(task);
	mlp_free(m);
}

/* Backward reports a layer's gradients before it is done reading that
 * layer's weights, so a layer is handed over when the next layer's weight
 * gradient arrives, and the last one after backward (as test-pipeline). */
struct hand {
	spw_optimizer *opt;
	uint32_t id[MAXT];
	const struct mlp_tensor *pend[2];
	int pend_index[2], npend;
};

static int flush(struct hand *h)
{
	int r = 0;

	for (int i = 0; i < h->npend && r == 0; i++)
		r = spw_optimizer_grad_ready(h->opt, h->id[h->pend_index[i]], SPW_ALL_CHUNKS, h->pend[i]->grad,
					     h->pend[i]->count * 4, SPW_TYPE_F32, NULL);
	h->npend = 0;
	return r;
}

static int on_grad(const struct mlp_tensor *t, int index, void *arg)
{
	struct hand *h = arg;
	int r = index % 2 == 0 ? flush(h) : 0;

	h->pend[h->npend] = t;
	h->pend_index[h->npend++] = index;
	return r;
}

#define TRY(what, expr)                                                                             \
	do {                                                                                        \
		int r_ = (expr);                                                                    \
		if (r_ < 0)                                                                         \
			TEST_FAIL("trainer %d round %d: %s: %s (%s)", tc->index, round, what,       \
				  spw_strerror(r_), h.opt ? spw_optimizer_last_error(h.opt)          \
							: spw_client_last_error(c));                \
	} while (0)

/* One round through the daemon: attach, train, read back, detach. */
static void run_spillway(const struct spw_test_daemon *d, const struct trainer_cfg *tc, int round, struct state *out)
{
	char session[64];
	struct spw_attach_opts a = { .size = sizeof(a), .session = session, .region_bytes = 12 * PAGE,
				     .page_size = PAGE };
	struct spw_optimizer_opts oo = {
		.size = sizeof(oo), .mode = tc->mode, .tier = SPW_TENSOR_SWAPPABLE, .groups = &group, .ngroups = 1,
		.accumulation = 1, .clip_coef = tc->clip_coef, .max_norm = tc->max_norm, .threads = 1,
		.device = "host",
	};
	struct hand h = { 0 };
	struct mlp *m = model(tc);
	struct mlp_task *task;
	const struct mlp_tensor *t;
	spw_client *c = NULL;
	float x[BATCH * 64], loss;
	int32_t y[BATCH];
	int n;

	snprintf(session, sizeof(session), "soak/trainer-%d", tc->index);
	ASSERT_OK(mlp_task_create(64, 10, 3, &task));
	t = mlp_tensors(m, &n);
	state_alloc(out, t, n);
	ASSERT_OK(spw_client_new(NULL, &c));
	TRY("connect", spw_client_connect(c, d->control));
	TRY("attach", spw_client_attach(c, &a));
	TRY("optimizer", spw_optimizer_new(c, &oo, &h.opt));
	/* The model's own arrays are the "device" buffers (host backend). */
	for (int i = 0; i < n; i++)
		TRY("add", spw_optimizer_add(h.opt, t[i].name, 0, t[i].count, t[i].param, t[i].param, SPW_TYPE_F32,
					     &h.id[i]));
	for (int step = 1; step <= STEPS; step++) {
		struct spw_step_result res = { .size = sizeof(res) };

		TRY("begin", spw_optimizer_begin(h.opt, (uint64_t)step, NULL, 0.0f));
		for (int i = 0; i < n; i++)
			TRY("wait_params", spw_optimizer_wait_params(h.opt, h.id[i], NULL));
		mlp_task_batch(task, (uint64_t)step - 1, BATCH, x, y);
		ASSERT_OK(mlp_forward(m, x, y, BATCH, &loss, NULL));
		TRY("backward", mlp_backward(m, on_grad, &h));
		TRY("grad_ready", flush(&h));
		TRY("sync_grads", spw_optimizer_sync_grads(h.opt));
		TRY("end", spw_optimizer_end(h.opt, &res));
		ASSERT_EQ(res.skipped, 0);
	}
	TRY("sync", spw_optimizer_sync(h.opt));
	for (int i = 0; i < n; i++) {
		TRY("read", spw_optimizer_read(h.opt, h.id[i], SPW_STATE_PARAM, out->p[i]));
		TRY("read", spw_optimizer_read(h.opt, h.id[i], SPW_STATE_EXP_AVG, out->m[i]));
		TRY("read", spw_optimizer_read(h.opt, h.id[i], SPW_STATE_EXP_AVG_SQ, out->v[i]));
	}
	spw_optimizer_free(h.opt);
	h.opt = NULL;
	TRY("detach", spw_client_detach(c));
	spw_client_free(c);
	mlp_task_free(task);
	mlp_free(m);
}

/* The trainer process: its reference once, then rounds until the
 * deadline, each compared bit for bit. Exits 0 when all were equal. */
static void trainer_main(const struct spw_test_daemon *d, const struct trainer_cfg *tc, uint64_t deadline_ns)
{
	struct state ref, got;
	struct mlp *m = model(tc);
	const struct mlp_tensor *t;
	int n, round = 0;

	t = mlp_tensors(m, &n);
	run_reference(tc, &ref);
	do {
		round++;
		run_spillway(d, tc, round, &got);
		for (int i = 0; i < n; i++) {
			size_t bytes = t[i].count * 4;

			if (memcmp(ref.p[i], got.p[i], bytes) || memcmp(ref.m[i], got.m[i], bytes) ||
			    memcmp(ref.v[i], got.v[i], bytes))
				TEST_FAIL("trainer %d round %d: tensor %s differs from the reference computed without "
					  "the daemon", tc->index, round, t[i].name);
		}
		state_free(&got);
	} while (now_ns() < deadline_ns);
	fprintf(stderr, "trainer %d (%s): %d rounds of %d steps, each bit-identical to the reference\n", tc->index,
		tc->mode == SPW_OPT_EXACT ? "exact, clipped" : "overlapped", round, STEPS);
	state_free(&ref);
	mlp_free(m);
	exit(0);
}

/* ---- the checks ---- */

static struct spw_test_daemon d;
static int failures;

#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "SOAK FAILED: " __VA_ARGS__);      \
			fputc('\n', stderr);                               \
			failures++;                                        \
		}                                                          \
	} while (0)

/* The status document, or NULL when the daemon does not answer (no
 * assertion: the caller says what that means). */
static cJSON *try_status(void)
{
	int fd = spw_test_connect(d.status);
	cJSON *r;

	if (fd < 0)
		return NULL;
	r = raw_recv(fd, NULL, NULL, NULL);
	close(fd);
	return r;
}

struct leftovers {
	int sessions, others, fds, swap_files;
	double used, locked;
};

static bool measure(struct leftovers *l)
{
	cJSON *st = try_status();

	if (!st) {
		/* No answer: nothing here may pass for "nothing left". */
		*l = (struct leftovers){ .sessions = -1, .others = -1, .fds = -1, .swap_files = -1, .used = -1,
					 .locked = -1 };
		return false;
	}
	l->sessions = cJSON_GetArraySize(cJSON_GetObjectItem(st, "sessions"));
	l->others = (int)raw_num(st, "others.sessions");
	l->used = raw_num(st, "pool.used_bytes");
	l->locked = raw_num(st, "pool.locked_bytes");
	cJSON_Delete(st);
	l->fds = raw_count_fds(d.pid);
	l->swap_files = raw_swap_files(d.dir);
	return true;
}

/* Warm-up: one session through every path that may open a descriptor
 * for the daemon's life (io_uring registration, swap dir, threadpool),
 * so the baseline counts those and the storm's leaks alone show. */
static void warm_up(void)
{
	struct raw_session s;
	char req[160];
	cJSON *r;

	ASSERT_OK(raw_attach(d.control, "soak/warm-up", 16 * PAGE, PAGE, &s));
	snprintf(req, sizeof(req), "{\"type\":\"register\",\"name\":\"w\",\"bytes\":%u,\"kind\":\"swappable\"}", 64 * PAGE);
	r = raw_request(s.ctl, req);
	ASSERT_EQ(raw_reply_errno(r), 0);
	cJSON_Delete(r);
	for (uint32_t p = 0; p < 64; p++) {
		ASSERT_GE(raw_op(&s, SPW_OP_PIN, 0, 0, p), 0);
		ASSERT_EQ(raw_op(&s, SPW_OP_UNPIN, SPW_UNPIN_DIRTY, 0, p), 0);
	}
	ASSERT_EQ(raw_op(&s, SPW_OP_FLUSH, 0, 0, 0), 0);
	r = raw_request(s.ctl, "{\"type\":\"detach\"}");
	ASSERT_EQ(raw_reply_errno(r), 0);
	cJSON_Delete(r);
	raw_session_close(&s);
}

/* Polls for up to 15 s until nothing is left (the daemon notices a dead
 * client's EOF in its own time); *l gets what was seen last. */
static void settle(struct leftovers *l, int baseline_fds)
{
	for (int i = 0; i < 300; i++) {
		if (measure(l) && l->sessions == 0 && l->others == 0 && l->used == 0 && l->locked == 0 &&
		    l->fds == baseline_fds && l->swap_files == 0)
			return;
		usleep(50000);
	}
	measure(l);
}

static void print_log_tail(const char *path, int lines)
{
	char buf[1024];
	long total = 0, from;
	FILE *f = fopen(path, "re");

	if (!f)
		return;
	while (fgets(buf, sizeof(buf), f))
		total++;
	rewind(f);
	from = total - lines;
	fprintf(stderr, "--- daemon log: %ld lines, the last %d ---\n", total, lines);
	for (long i = 0; fgets(buf, sizeof(buf), f); i++)
		if (i >= from)
			fputs(buf, stderr);
	fprintf(stderr, "--- end of daemon log ---\n");
	fclose(f);
}

static pid_t fork_child(void)
{
	pid_t pid = fork();

	ASSERT_GE(pid, 0);
	if (pid == 0) {
		signal(SIGABRT, SIG_DFL); /* a child's failure is its own: raw_guard's kill is the parent's */
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* and none outlives a test that failed */
	}
	return pid;
}

int main(void)
{
	const struct trainer_cfg tcs[NTRAINERS] = {
		{ .index = 0, .mode = SPW_OPT_OVERLAPPED, .clip_coef = 0.5f },
		{ .index = 1, .mode = SPW_OPT_EXACT, .max_norm = 0.05f },
	};
	const char *secs_env = getenv("SPW_SOAK_SECONDS");
	int secs = secs_env ? atoi(secs_env) : 20, baseline_fds, st, saved_err, logfd, status_ok = 0, status_tries = 0;
	char logpath[] = "/tmp/spw-soak-log-XXXXXX";
	struct noisy_counters *nc = noisy_counters_new();
	pid_t trainers[NTRAINERS], hostile;
	struct leftovers l = { 0 };
	uint64_t deadline;
	bool alive;

	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd was not built ($SPILLWAYD unset)");
	if (secs < 1)
		secs = 1;
	ASSERT_TRUE(nc != NULL);
	signal(SIGPIPE, SIG_IGN);

	/* The daemon's log to a file: a storm writes thousands of lines. */
	logfd = mkstemp(logpath);
	ASSERT_GE(logfd, 0);
	saved_err = dup(2);
	ASSERT_EQ(dup2(logfd, 2), 2);
	st = spw_test_daemon_start(&d, config);
	dup2(saved_err, 2);
	close(saved_err);
	close(logfd);
	ASSERT_OK(st);
	raw_guard(&d);

	warm_up();
	/* The warm-up's region is released off the daemon's loop, shortly
	 * after its detach reply: the baseline is the count once it is
	 * steady (unchanged over 5 samples 50 ms apart, within 5 s). */
	ASSERT_TRUE(measure(&l));
	for (int same = 0, i = 0; same < 5 && i < 100; i++) {
		int before = l.fds;

		usleep(50000);
		ASSERT_TRUE(measure(&l));
		same = l.fds == before ? same + 1 : 0;
	}
	ASSERT_EQ(l.sessions, 0);
	baseline_fds = l.fds;
	ASSERT_GT(baseline_fds, 0);

	deadline = now_ns() + (uint64_t)secs * 1000000000u;
	hostile = fork_child();
	if (hostile == 0) {
		uint64_t lives = noisy_hostile_loop(d.control, d.status, 0x50a4ull ^ (uint64_t)getpid(), deadline, nc);
		fprintf(stderr, "hostile: %ju lives\n", (uintmax_t)lives);
		_exit(0);
	}
	for (int i = 0; i < NTRAINERS; i++) {
		trainers[i] = fork_child();
		if (trainers[i] == 0)
			trainer_main(&d, &tcs[i], deadline);
	}
	/* Meanwhile: status must keep answering under the storm. */
	while (now_ns() < deadline) {
		cJSON *s = try_status();

		status_tries++;
		status_ok += s != NULL;
		cJSON_Delete(s);
		usleep(500000);
	}

	for (int i = 0; i < NTRAINERS; i++) {
		ASSERT_EQ(waitpid(trainers[i], &st, 0), trainers[i]);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "bystander trainer %d did not end bit-identical (%s %d; its message is above)", i,
		      WIFEXITED(st) ? "exit status" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	}
	ASSERT_EQ(waitpid(hostile, &st, 0), hostile);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the hostile respawner failed (status 0x%x)", st);

	/* The storm was what it claims to be. */
	fprintf(stderr,
		"storm: %ju lives (%ju ended by their own kill -9), %ju sessions, %ju garbage frames, %ju idle "
		"connections, %ju ring rewrites, %ju holes punched; status answered %d of %d times during it\n",
		(uintmax_t)nc->lives, (uintmax_t)nc->kills, (uintmax_t)nc->attaches, (uintmax_t)nc->garbage_frames,
		(uintmax_t)nc->idle_conns, (uintmax_t)nc->scribbles, (uintmax_t)nc->punches, status_ok, status_tries);
	CHECK(nc->lives >= 10 && nc->kills >= nc->lives / 2, "too few hostile lives (%ju, %ju killed)",
	      (uintmax_t)nc->lives, (uintmax_t)nc->kills);
	CHECK(nc->attaches > 0 && nc->garbage_frames > 0 && nc->scribbles > 0 && nc->punches > 0 && nc->idle_conns > 0,
	      "the hostile tenant never got to do all it should (see the counts above)");

	/* The daemon: alive, answering, and holding nothing for anyone. */
	alive = kill(d.pid, 0) == 0 && waitpid(d.pid, &st, WNOHANG) == 0;
	CHECK(alive, "spillwayd died during the storm (its log's tail is below)");
	if (alive) {
		cJSON *s = try_status();

		CHECK(s && raw_num(s, "pid") == d.pid, "spillwayd does not answer status after the storm");
		cJSON_Delete(s);
		settle(&l, baseline_fds);
		CHECK(l.sessions == 0 && l.others == 0, "%d sessions (and %d of other uids) left after every client is "
		      "gone", l.sessions, l.others);
		CHECK(l.used == 0, "pool.used_bytes is %.0f after every client is gone, not 0", l.used);
		CHECK(l.locked == 0, "pool.locked_bytes is %.0f after every client is gone, not 0", l.locked);
		CHECK(l.fds == baseline_fds, "spillwayd holds %d descriptors, %d before the storm", l.fds, baseline_fds);
		CHECK(l.swap_files == 0, "%d session swap files left in %s", l.swap_files, d.dir);
		if (!failures) {
			/* A new client is served as before. */
			int fd = raw_connect_hello(d.control);
			close(fd);
		}
		st = spw_test_daemon_stop(&d);
		CHECK(st == 0, "spillwayd's exit after SIGTERM: %d, not a clean 0", st);
	} else {
		spw_test_daemon_cleanup(&d);
	}
	print_log_tail(logpath, failures ? 60 : 8);
	unlink(logpath);
	munmap(nc, sizeof(*nc));
	if (failures)
		TEST_FAIL("%d soak checks failed (each is named above)", failures);
	fprintf(stderr, "soak: %d s, daemon alive, bystanders bit-identical, nothing leaked\n", secs);
	return 0;
}
