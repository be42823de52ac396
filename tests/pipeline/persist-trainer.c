/* SPDX-License-Identifier: MIT */
/*
 * persist-trainer: the deterministic trainer test-persist-storm kills. It
 * trains the example MLP through spillway on a persistent session (or a
 * plain one, for the reference run); the data of step N is a function of
 * N. Started again after a SIGKILL, it takes the session over, restores
 * its "device" weights from the master weights the session kept and
 * continues from spw_optimizer_resumed_step() + 1. At the end it writes
 * every tensor's master weights and moments to OUT.
 *
 *   persist-trainer SOCKET SESSION overlapped|exact resident|swappable
 *                   ACCUM FP16(0|1) STEPS PAUSE_US PERSISTENT(0|1) OUT
 *
 * PERSIST_STATE_DTYPE=bf16|int8 in the environment sets the optimizer's
 * state_dtype (fp32 without it); PERSIST_MASTER_DTYPE=bf16 bf16 master
 * weights.
 *
 * With PERSIST_CHECKPOINT_AT=K and PERSIST_CHECKPOINT_DIR=DIR in the
 * environment, after step K a second client (on its own thread) asks the
 * daemon for a checkpoint of the session into DIR while training goes
 * on; "checkpoint S T B SECONDS STEPS COW WAITS STALL" (the step it
 * holds, its tensors and bytes, the copy's seconds, the steps committed
 * while it copied, the bytes saved aside, the pages that waited for the
 * copy, the ring's stall) is printed when it is done.
 *
 * With PERSIST_FLUSH_AT=K, after step K the session is flushed into the
 * daemon's persist.state_dir (spw_client_flush from a second client;
 * "flushed S" printed).
 *
 * With PERSIST_RECONNECT_MS=MS, a daemon that goes away (a restart) is
 * waited for in this process: spw_client_reconnect() for up to MS, a new
 * optimizer on the session taken over, and the run goes on from the
 * daemon's last commit ("went away: ERROR" and "reconnected S" printed).
 *
 * With PERSIST_LOAD_AT=W and PERSIST_LOAD_FILE=PATH, after step W the
 * trainer loads a state into the optimizer as load_state_dict would: it
 * reads every tensor's master weights and moments, makes another state of
 * them (weights halved, moments scaled), saves that to PATH (the
 * checkpoint it loads) and writes it with spw_optimizer_write, then goes
 * on with step W + 1 ("loaded W" printed). Started with nothing resumed
 * while PATH exists, it does what a trainer's restart code does: it
 * loads PATH again in full and goes on from W + 1 ("reloaded W"; and
 * "released write S" when spillwayd released the session because the
 * trainer before died inside spw_optimizer_write with step S open).
 * SPILLWAY_TEST_KILL_AT_WRITE_PAGE=K kills it in the K-th page written.
 *
 * A trainer that took over a session left inside a step's updates prints
 * "resumed N mid-update". With SPILLWAY_TEST_KILL_AT_TILE=K in the
 * environment the library kills it inside its K-th tile update;
 * PERSIST_THREADS=T gives its pool T threads instead of 2.
 *
 * Exit status: 0 done, 3 the session was refused (-ESTALE), 1 anything
 * else.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <spillway/spillway.h>

#include "kernels.h"
#include "handover.h"
#include "mlp.h"

#define MAXT (2 * (MLP_MAX_HIDDEN_LAYERS + 1))
#define BATCH 16
#define PAGE (64u * 1024u)

struct trainer {
	struct handover hv;     /* first: give() casts back */
	spw_optimizer *opt;
	uint32_t id[MAXT];
	uint16_t *h[MAXT];
	bool fp16;
	float scale;
};

static int hand_over(struct handover *hv, const struct mlp_tensor *t, int i)
{
	struct trainer *tr = (struct trainer *)hv;

	if (!tr->fp16)
		return spw_optimizer_grad_ready(tr->opt, tr->id[i], SPW_ALL_CHUNKS, t->grad, t->count * 4, SPW_TYPE_F32,
						NULL);
	/* What an fp16 device hands over: gradient * loss scale, overflowing
	 * to inf as it would there. */
	for (size_t k = 0; k < t->count; k++)
		tr->h[i][k] = spw_f32_to_f16(t->grad[k] * tr->scale);
	return spw_optimizer_grad_ready(tr->opt, tr->id[i], SPW_ALL_CHUNKS, tr->h[i], t->count * 2, SPW_TYPE_F16,
					NULL);
}

struct ckpt_job {
	const char *socket, *session, *dir;
	pthread_t thread;
	struct spw_checkpoint_result res;
	int r;
	char err[512];
};

static void *ckpt_thread(void *arg)
{
	struct ckpt_job *j = arg;
	spw_client *c = NULL;

	j->res.size = sizeof(j->res);
	j->r = spw_client_new(NULL, &c);
	if (j->r == 0)
		j->r = spw_client_connect(c, j->socket);
	if (j->r == 0)
		j->r = spw_client_checkpoint(c, j->session, j->dir, &j->res);
	snprintf(j->err, sizeof(j->err), "%s", c ? spw_client_last_error(c) : "out of memory");
	spw_client_free(c);
	return NULL;
}

/* Exits at once, as a killed trainer would: nothing freed, and no leak
 * report (LeakSanitizer runs at exit(), not _exit()). */
static int fail(const char *what, const char *why)
{
	fprintf(stderr, "persist-trainer: %s: %s\n", what, why);
	_exit(1);
}

/* The optimizer on c's session, its tensors added (adopted after a
 * takeover) and the device weights restored from the master weights the
 * session kept: the next step to run. */
static uint64_t setup(struct trainer *tr, spw_client *c, const struct spw_optimizer_opts *oo,
		      const struct mlp_tensor *t, int n)
{
	struct spw_session_info info = { .size = sizeof(info) };
	uint64_t step;
	int r = spw_optimizer_new(c, oo, &tr->opt);

	if (r == -ESTALE) {
		fprintf(stderr, "persist-trainer: %s\n", spw_client_last_error(c));
		_exit(3);
	}
	if (r < 0)
		fail("optimizer", spw_client_last_error(c));
	for (int i = 0; i < n; i++) {
		if (spw_optimizer_add(tr->opt, t[i].name, 0, t[i].count, t[i].param, t[i].param, SPW_TYPE_F32,
				      &tr->id[i]) < 0)
			fail("add", spw_optimizer_last_error(tr->opt));
		if (!tr->h[i] && !(tr->h[i] = malloc(t[i].count * 2)))
			fail("add", "out of memory");
	}
	step = spw_optimizer_resumed_step(tr->opt) + 1;
	if (step > 1) {
		/* The device weights are the trainer's to restore: the master
		 * weights the session kept, cast as the copy-out would (fp32). */
		for (int i = 0; i < n; i++)
			if (spw_optimizer_read(tr->opt, tr->id[i], SPW_STATE_PARAM, t[i].param) < 0)
				fail("read", spw_optimizer_last_error(tr->opt));
		spw_client_info(c, &info);
		if (tr->fp16)
			tr->scale = info.loss_scale;
	}
	return step;
}

/* Writes PATH's state (p, m, v of each tensor in order) into the
 * optimizer, and its weights into the trainer's "device" weights. */
static void load_file(struct trainer *tr, const struct mlp_tensor *t, int n, const char *path)
{
	FILE *f = fopen(path, "rb");

	if (!f)
		fail("load", "cannot open PERSIST_LOAD_FILE");
	for (int i = 0; i < n; i++) {
		float *buf = malloc(t[i].count * 4);

		for (int w = SPW_STATE_PARAM; w <= SPW_STATE_EXP_AVG_SQ; w++) {
			if (!buf || fread(buf, 4, t[i].count, f) != t[i].count)
				fail("load", "short PERSIST_LOAD_FILE");
			if (spw_optimizer_write(tr->opt, tr->id[i], (enum spw_optimizer_state)w, buf) < 0)
				fail("write", spw_optimizer_last_error(tr->opt));
			if (w == SPW_STATE_PARAM)
				memcpy(t[i].param, buf, t[i].count * 4);
		}
		free(buf);
	}
	fclose(f);
}

/* After step W: another state made of the optimizer's (weights halved,
 * moments scaled), saved to path, then loaded. */
static void save_and_load(struct trainer *tr, const struct mlp_tensor *t, int n, const char *path)
{
	static const float k[3] = { 0.5f, 0.5f, 0.25f };
	FILE *f = fopen(path, "wb");

	if (!f)
		fail("load", "cannot create PERSIST_LOAD_FILE");
	for (int i = 0; i < n; i++) {
		float *buf = malloc(t[i].count * 4);

		for (int w = SPW_STATE_PARAM; w <= SPW_STATE_EXP_AVG_SQ; w++) {
			if (!buf || spw_optimizer_read(tr->opt, tr->id[i], (enum spw_optimizer_state)w, buf) < 0)
				fail("read", buf ? spw_optimizer_last_error(tr->opt) : "out of memory");
			for (size_t e = 0; e < t[i].count; e++)
				buf[e] *= k[w];
			if (fwrite(buf, 4, t[i].count, f) != t[i].count)
				fail("load", "cannot write PERSIST_LOAD_FILE");
		}
		free(buf);
	}
	if (fclose(f) != 0)
		fail("load", "cannot write PERSIST_LOAD_FILE");
	load_file(tr, t, n, path);
}

/* PERSIST_RECONNECT_MS set: the daemon went away (a restart) in step's
 * call what; the session is taken over again in this process, and the
 * step to go on with is returned (the daemon's last commit + 1). */
static uint64_t reconnect(struct trainer *tr, spw_client *c, const struct spw_optimizer_opts *oo,
			  const struct mlp_tensor *t, int n, const char *what)
{
	const char *ms = getenv("PERSIST_RECONNECT_MS");
	/* A broken optimizer answers every call with its error: -ECONNRESET
	 * is the daemon gone, the one a trainer reconnects after. */
	int err = spw_optimizer_sync(tr->opt);
	uint64_t step;

	if (!ms || err != -ECONNRESET)
		fail(what, spw_optimizer_last_error(tr->opt));
	printf("went away: %s\n", spw_optimizer_last_error(tr->opt));
	tr->opt = spw_optimizer_free(tr->opt);
	tr->hv.npend = 0; /* what a broken backward left unhanded */
	if (spw_client_reconnect(c, (uint32_t)strtoul(ms, NULL, 10)) < 0)
		fail("reconnect", spw_client_last_error(c));
	step = setup(tr, c, oo, t, n);
	printf("reconnected %llu\n", (unsigned long long)step - 1);
	fflush(stdout);
	return step;
}

int main(int argc, char **argv)
{
	struct mlp_config cfg = { .n_in = 64, .n_hidden = 384, .n_hidden_layers = 2, .n_out = 10, .max_batch = BATCH };
	struct spw_param_group g = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f };
	struct spw_optimizer_opts oo = { .size = sizeof(oo), .groups = &g, .ngroups = 1, .threads = 2, .device = "host" };
	struct spw_session_info info = { .size = sizeof(info) };
	struct trainer tr = { .hv.give = hand_over };
	const struct mlp_tensor *t;
	struct mlp_task *task;
	struct mlp *m;
	spw_client *c = NULL;
	uint64_t accum, steps, pause_us, step, ckpt_at = 0, flush_at = 0, load_at = 0;
	const char *load_path = getenv("PERSIST_LOAD_FILE");
	struct ckpt_job ck = { 0 };
	bool ck_started = false;
	float x[BATCH * 64], loss;
	int32_t y[BATCH];
	bool persistent;
	FILE *out;
	int n, r;

	if (argc != 11)
		return fail("usage", "SOCKET SESSION MODE TIER ACCUM FP16 STEPS PAUSE_US PERSISTENT OUT");
	oo.mode = !strcmp(argv[3], "exact") ? SPW_OPT_EXACT : SPW_OPT_OVERLAPPED;
	oo.tier = !strcmp(argv[4], "swappable") ? SPW_TENSOR_SWAPPABLE : SPW_TENSOR_RESIDENT;
	if (getenv("PERSIST_STATE_DTYPE"))
		oo.state_dtype = !strcmp(getenv("PERSIST_STATE_DTYPE"), "int8") ? SPW_STATE_INT8
				 : !strcmp(getenv("PERSIST_STATE_DTYPE"), "bf16") ? SPW_STATE_BF16 : SPW_STATE_F32;
	if (getenv("PERSIST_MASTER_DTYPE") && !strcmp(getenv("PERSIST_MASTER_DTYPE"), "bf16"))
		oo.master_dtype = SPW_MASTER_BF16;
	accum = strtoull(argv[5], NULL, 10);
	tr.fp16 = atoi(argv[6]) != 0;
	steps = strtoull(argv[7], NULL, 10);
	pause_us = strtoull(argv[8], NULL, 10);
	persistent = atoi(argv[9]) != 0;
	if (getenv("PERSIST_CHECKPOINT_AT") && getenv("PERSIST_CHECKPOINT_DIR")) {
		ckpt_at = strtoull(getenv("PERSIST_CHECKPOINT_AT"), NULL, 10);
		ck = (struct ckpt_job){ .socket = argv[1], .session = argv[2], .dir = getenv("PERSIST_CHECKPOINT_DIR") };
	}
	if (getenv("PERSIST_LOAD_AT") && load_path)
		load_at = strtoull(getenv("PERSIST_LOAD_AT"), NULL, 10);
	if (getenv("PERSIST_FLUSH_AT"))
		flush_at = strtoull(getenv("PERSIST_FLUSH_AT"), NULL, 10);
	/* PERSIST_THREADS: the pool's threads (2 by default); a trainer
	 * taking over from one with another count must resume as well. */
	if (getenv("PERSIST_THREADS"))
		oo.threads = (uint32_t)atoi(getenv("PERSIST_THREADS"));
	oo.accumulation = (uint32_t)accum;
	oo.dynamic_loss_scale = tr.fp16;
	oo.init_loss_scale = 1024.0f;
	oo.max_norm = oo.mode == SPW_OPT_EXACT ? 1.0f : 0.0f;
	tr.scale = tr.fp16 ? oo.init_loss_scale : 1.0f;

	if (mlp_create(&cfg, 5, &m) < 0 || mlp_task_create(64, 10, 9, &task) < 0)
		return fail("model", "cannot build");
	t = mlp_tensors(m, &n);
	{
		/* Resident: the whole state fits; swappable: a region that
		 * holds under half of it beside the optimizer's resident pages
		 * (staging, journal), so pages go to disk and come back every
		 * step. */
		struct spw_attach_opts a = { .size = sizeof(a), .session = argv[2], .page_size = PAGE,
					     .region_bytes = oo.tier == SPW_TENSOR_RESIDENT ? 16u << 20 : 3u << 20,
					     .persistent = persistent, .lease_s = 120 };

		if (spw_client_new(NULL, &c) < 0 || spw_client_connect(c, argv[1]) < 0)
			return fail("connect", c ? spw_client_last_error(c) : "out of memory");
		/* A session whose dead client's requests are still completing
		 * answers EAGAIN for a moment. */
		for (int tries = 0; (r = spw_client_attach(c, &a)) == -EAGAIN && tries < 250; tries++)
			usleep(20 * 1000);
		if (r < 0)
			return fail("attach", spw_client_last_error(c));
		/* Whether the trainer before died inside a step's updates: the
		 * harness counts such resumes. */
		spw_client_info(c, &info);
	}
	step = setup(&tr, c, &oo, t, n);
	if (step > 1) {
		printf("resumed %llu%s\n", (unsigned long long)step - 1, info.step_open ? " mid-update" : "");
		fflush(stdout);
	}
	if (info.released_write_step) {
		printf("released write %llu\n", (unsigned long long)info.released_write_step);
		fflush(stdout);
	}
	if (step == 1 && load_at && access(load_path, F_OK) == 0) {
		/* Nothing resumed, and the run had loaded a checkpoint: the
		 * restart code loads it again. */
		load_file(&tr, t, n, load_path);
		step = load_at + 1;
		printf("reloaded %llu\n", (unsigned long long)load_at);
		fflush(stdout);
	}
again:
	while (step <= steps) {
		struct spw_step_result res = { .size = sizeof(res) };
		const char *what = NULL;

		if (spw_optimizer_begin(tr.opt, step, NULL, 0.0f) < 0)
			what = "begin";
		for (uint64_t mb = 0; !what && mb < accum; mb++) {
			for (int i = 0; !what && i < n; i++)
				if (spw_optimizer_wait_params(tr.opt, tr.id[i], NULL) < 0)
					what = "wait";
			mlp_task_batch(task, (step - 1) * accum + mb, BATCH, x, y);
			if (!what && (mlp_forward(m, x, y, BATCH, &loss, NULL) < 0 ||
				      mlp_backward(m, handover_on_grad, &tr.hv) < 0 || handover_flush(&tr.hv) < 0 ||
				      spw_optimizer_sync_grads(tr.opt) < 0))
				what = "step";
		}
		if (!what && spw_optimizer_end(tr.opt, &res) < 0)
			what = "end";
		if (what) {
			step = reconnect(&tr, c, &oo, t, n, what);
			continue;
		}
		tr.scale = res.next_loss_scale;
		if (step == load_at) {
			save_and_load(&tr, t, n, load_path);
			printf("loaded %llu\n", (unsigned long long)step);
			fflush(stdout);
		}
		if (step == flush_at) {
			/* From a client of its own: the trainer's engine
			 * watches the trainer's client's socket. */
			struct spw_checkpoint_result fr = { .size = sizeof(fr) };
			spw_client *fc = NULL;

			if (spw_optimizer_sync(tr.opt) < 0 || spw_client_new(NULL, &fc) < 0 ||
			    spw_client_connect(fc, argv[1]) < 0 || spw_client_flush(fc, argv[2], &fr) < 0)
				return fail("flush", fc ? spw_client_last_error(fc) : spw_optimizer_last_error(tr.opt));
			spw_client_free(fc);
			printf("flushed %llu\n", (unsigned long long)fr.committed_step);
			fflush(stdout);
		}
		if (step == ckpt_at) {
			if (pthread_create(&ck.thread, NULL, ckpt_thread, &ck) != 0)
				return fail("checkpoint", "cannot start a thread");
			ck_started = true;
		}
		if (pause_us)
			usleep((useconds_t)pause_us); /* the data loader's turn */
		step++;
	}
	if (ck_started) {
		pthread_join(ck.thread, NULL);
		if (ck.r < 0)
			return fail("checkpoint", ck.err);
		printf("checkpoint %llu %u %llu %.3f %llu %llu %llu %.6f\n", (unsigned long long)ck.res.committed_step,
		       ck.res.tensors, (unsigned long long)ck.res.bytes, ck.res.seconds,
		       (unsigned long long)ck.res.steps_during_copy, (unsigned long long)ck.res.cow_bytes,
		       (unsigned long long)ck.res.cow_waits, ck.res.stall_seconds);
		fflush(stdout);
	}
	/* The last step's commit; a restart before it redoes what the
	 * daemon did not commit. */
	if (spw_optimizer_sync(tr.opt) < 0) {
		step = reconnect(&tr, c, &oo, t, n, "sync");
		goto again;
	}
	if (!(out = fopen(argv[10], "wb")))
		return fail("sync", spw_optimizer_last_error(tr.opt));
	for (int i = 0; i < n; i++) {
		float *buf = malloc(t[i].count * 4);

		for (int w = SPW_STATE_PARAM; w <= SPW_STATE_EXP_AVG_SQ && buf; w++) {
			if (spw_optimizer_read(tr.opt, tr.id[i], (enum spw_optimizer_state)w, buf) < 0)
				return fail("read", spw_optimizer_last_error(tr.opt));
			fwrite(buf, 4, t[i].count, out);
		}
		free(buf);
		free(tr.h[i]);
	}
	fclose(out);
	spw_optimizer_free(tr.opt);
	spw_client_detach(c);
	spw_client_free(c);
	mlp_task_free(task);
	mlp_free(m);
	return 0;
}
