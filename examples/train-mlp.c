/* SPDX-License-Identifier: MIT */
/*
 * examples/train-mlp.c: trains the example MLP with spillway as its
 * optimizer: master weights and Adam moments live in spillwayd (resident
 * or on the NVMe tier), gradients stream out during backward, AdamW runs
 * on CPU threads, updated weights stream back. On the host backend the
 * model's own arrays are the "device" buffers.
 *
 *   train-mlp [--steps N] [--batch B] [--hidden H] [--layers L] [--lr X]
 *             [--mode overlapped|exact] [--tier resident|swappable]
 *             [--region-bytes N] [--page-size N] [--accum N] [--socket PATH]
 *             [--every K] [--check F] [--session NAME] [--persistent]
 *             [--losses FILE]
 *
 * --persistent keeps the state in spillwayd when the trainer dies: started
 * again with the same --session, it takes the session over, restores the
 * model from the master weights and goes on after the last committed step
 * (docs/persistent.md). --losses writes "step loss" lines (a resumed run
 * keeps the lines up to its committed step and appends).
 *
 * With --tier swappable and a daemon without the NVMe tier, it says so and
 * falls back to resident. --check F exits 1 unless the loss of the last 10
 * steps is at most that of the first 10 divided by F.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "mlp.h"

#define MAXT (2 * (MLP_MAX_HIDDEN_LAYERS + 1))

struct trainer {
	spw_optimizer *opt;
	uint32_t id[MAXT];
	const struct mlp_tensor *pend[2];
	int pend_index[2], npend;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int flush(struct trainer *tr)
{
	int r = 0;

	for (int i = 0; i < tr->npend && r == 0; i++)
		r = spw_optimizer_grad_ready(tr->opt, tr->id[tr->pend_index[i]], SPW_ALL_CHUNKS,
					     tr->pend[i]->grad, tr->pend[i]->count * sizeof(float),
					     SPW_TYPE_F32, NULL);
	tr->npend = 0;
	return r;
}

/* Backward still reads a layer's weights after reporting its gradients,
 * and the optimizer may update them right after grad_ready: a layer is
 * handed over once the layer below reports (as torch's post-accumulate-grad
 * hooks fire after the weights' last use). */
static int on_grad(const struct mlp_tensor *t, int index, void *arg)
{
	struct trainer *tr = arg;
	int r = 0;

	if (index % 2 == 0)
		r = flush(tr);
	tr->pend[tr->npend] = t;
	tr->pend_index[tr->npend++] = index;
	return r;
}

/* The daemon's side of the offload, from its status socket: what the NVMe
 * tier read and wrote for this session and whether its prefetcher had the
 * pages ready (prefetch hits) or a PIN had to wait for the disk (misses). */
struct tier_figures {
	double read_bytes, write_bytes, prefetch_hits, misses, evictions;
	bool valid;
};

static double tier_num(const cJSON *tier, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(tier, key);

	return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

static void tier_read(const char *status_path, const char *session, struct tier_figures *f)
{
	const cJSON *s, *sessions;
	char *json = NULL;
	cJSON *doc;

	f->valid = false;
	if (spw_status_fetch(status_path, &json) < 0)
		return;
	doc = cJSON_Parse(json);
	free(json);
	sessions = cJSON_GetObjectItemCaseSensitive(doc, "sessions");
	cJSON_ArrayForEach(s, sessions) {
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(s, "name");
		const cJSON *tier = cJSON_GetObjectItemCaseSensitive(s, "tier");

		if (!cJSON_IsString(name) || strcmp(name->valuestring, session) || !cJSON_IsObject(tier))
			continue;
		f->read_bytes = tier_num(tier, "read_bytes");
		f->write_bytes = tier_num(tier, "write_bytes");
		f->prefetch_hits = tier_num(tier, "prefetch_hits");
		f->misses = tier_num(tier, "misses");
		f->evictions = tier_num(tier, "evictions");
		f->valid = true;
	}
	cJSON_Delete(doc);
}

/* status.sock lives beside the control socket the trainer used: the one
 * given with --socket, else the library's default ($SPILLWAY_SOCKET, ...). */
static int status_path_for(const char *control, char *buf, size_t len)
{
	const char *slash = control ? strrchr(control, '/') : NULL;

	if (!control)
		return spw_socket_path(SPW_SOCKET_STATUS, buf, len);
	if (slash)
		snprintf(buf, len, "%.*s/status.sock", (int)(slash - control), control);
	else
		snprintf(buf, len, "status.sock");
	return 0;
}

/* The loss file of a run that resumes after step keep: its lines up to
 * that step, then appended to. */
static FILE *losses_open(const char *path, uint64_t keep)
{
	FILE *f = fopen(path, keep ? "r+" : "w");
	char line[128];
	long end = 0;

	if (!f)
		return NULL;
	for (uint64_t n = 0; keep && n < keep && fgets(line, sizeof(line), f); n++)
		end = ftell(f);
	if (fseek(f, end, SEEK_SET) < 0 || ftruncate(fileno(f), end) < 0) {
		fclose(f);
		return NULL;
	}
	return f;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: train-mlp [--steps N] [--batch B] [--hidden H] [--layers L] [--lr X]\n"
		   "                 [--mode overlapped|exact] [--tier resident|swappable]\n"
		   "                 [--region-bytes N] [--page-size N] [--accum N] [--socket PATH]\n"
		   "                 [--every K] [--check F] [--session NAME] [--persistent]\n"
		   "                 [--losses FILE]\n");
}

int main(int argc, char **argv)
{
	uint64_t steps = 100, batch = 32, hidden = 1024, layers = 3, region = 0, page = 1 << 20,
		 accum = 1, every = 10;
	struct spw_param_group g = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
				     .weight_decay = 0.01f };
	struct spw_optimizer_opts oo = { .size = sizeof(oo), .groups = &g, .ngroups = 1 };
	struct mlp_config cfg = { .n_in = 64, .n_out = 10 };
	const char *socket = NULL, *tier = "resident", *session = "demo/train-mlp", *losses_path = NULL;
	bool persistent = false;
	uint64_t first = 1;
	FILE *losses = NULL;
	float check = 0.0f, loss;
	struct mlp_loss_ends ends = { 0 };
	struct trainer tr = { 0 };
	struct spw_optimizer_stats st0 = { .size = sizeof(st0) }, st = { .size = sizeof(st) };
	const struct mlp_tensor *t;
	struct mlp_task *task = NULL;
	struct mlp *m = NULL;
	spw_client *c = NULL;
	float *x = NULL;
	int32_t *y = NULL;
	double t_start, t_total = 0.0, state_bytes;
	struct tier_figures tf0 = { 0 }, tf = { 0 }, prev = { 0 };
	char status_path[512] = "";
	int i, n, r, ret = 1, correct;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if ((r = mlp_option_start(a, v, usage)) >= 0)
			return r;
		r = 0;
		if (!strcmp(a, "--steps"))
			r = mlp_parse_u64(v, &steps);
		else if (!strcmp(a, "--batch"))
			r = mlp_parse_u64(v, &batch);
		else if (!strcmp(a, "--hidden"))
			r = mlp_parse_u64(v, &hidden);
		else if (!strcmp(a, "--layers"))
			r = mlp_parse_u64(v, &layers);
		else if (!strcmp(a, "--region-bytes"))
			r = mlp_parse_u64(v, &region);
		else if (!strcmp(a, "--page-size"))
			r = mlp_parse_u64(v, &page);
		else if (!strcmp(a, "--accum"))
			r = mlp_parse_u64(v, &accum);
		else if (!strcmp(a, "--every"))
			r = mlp_parse_u64(v, &every);
		else if (!strcmp(a, "--lr"))
			r = mlp_parse_float(v, &g.lr);
		else if (!strcmp(a, "--check"))
			r = mlp_parse_float(v, &check);
		else if (!strcmp(a, "--socket"))
			socket = v;
		else if (!strcmp(a, "--session"))
			session = v;
		else if (!strcmp(a, "--losses"))
			losses_path = v;
		else if (!strcmp(a, "--persistent") && (persistent = true))
			i--; /* takes no value */
		else if (!strcmp(a, "--mode") && (!strcmp(v, "overlapped") || !strcmp(v, "exact")))
			oo.mode = !strcmp(v, "exact") ? SPW_OPT_EXACT : SPW_OPT_OVERLAPPED;
		else if (!strcmp(a, "--tier") && (!strcmp(v, "resident") || !strcmp(v, "swappable")))
			tier = v;
		else
			r = -EINVAL;
		if (r < 0 || batch == 0 || batch > 65536 || layers == 0 || layers > MLP_MAX_HIDDEN_LAYERS ||
		    hidden == 0 || hidden > 65536 || accum == 0 || steps == 0) {
			fprintf(stderr, "train-mlp: bad option %s %s\n", a, v);
			usage(stderr);
			return 2;
		}
		i++;
	}
	cfg.n_hidden = (int)hidden;
	cfg.n_hidden_layers = (int)layers;
	cfg.max_batch = (int)batch;
	oo.accumulation = (uint32_t)accum;
	oo.tier = !strcmp(tier, "swappable") ? SPW_TENSOR_SWAPPABLE : SPW_TENSOR_RESIDENT;
	if ((r = mlp_create(&cfg, 1, &m)) < 0 || (r = mlp_task_create(cfg.n_in, cfg.n_out, 1, &task)) < 0) {
		fprintf(stderr, "train-mlp: cannot build the model: %s\n", strerror(-r));
		goto out;
	}
	t = mlp_tensors(m, &n);
	state_bytes = 12.0 * (double)mlp_param_count(m);
	if (!region)
		region = (uint64_t)(state_bytes * 1.5) + 16 * page;
	x = malloc(batch * (size_t)cfg.n_in * sizeof(float));
	y = malloc(batch * sizeof(int32_t));
	if (!x || !y)
		goto out;

	{
		struct spw_attach_opts a = { .size = sizeof(a), .session = session, .region_bytes = region,
					     .page_size = (uint32_t)page, .persistent = persistent };

		if ((r = spw_client_new(NULL, &c)) < 0 || (r = spw_client_connect(c, socket)) < 0 ||
		    (r = spw_client_attach(c, &a)) < 0 || (r = spw_optimizer_new(c, &oo, &tr.opt)) < 0) {
			fprintf(stderr, "train-mlp: %s\n", c ? spw_client_last_error(c) : spw_strerror(r));
			ret = r == -ESTALE ? 3 : 1;
			goto out;
		}
	}
	for (i = 0; i < n; i++) {
		r = spw_optimizer_add(tr.opt, t[i].name, 0, t[i].count, t[i].param, t[i].param, SPW_TYPE_F32,
				      &tr.id[i]);
		if (r == -EOPNOTSUPP && oo.tier == SPW_TENSOR_SWAPPABLE && i == 0) {
			/* Only the first tensor can meet this: nothing to undo. */
			printf("note: the daemon refuses swappable tensors (%s); falling back to resident\n",
			       spw_optimizer_last_error(tr.opt));
			tier = "resident (fallback)";
			spw_optimizer_free(tr.opt);
			oo.tier = SPW_TENSOR_RESIDENT;
			if ((r = spw_optimizer_new(c, &oo, &tr.opt)) < 0) {
				fprintf(stderr, "train-mlp: %s\n", spw_client_last_error(c));
				goto out;
			}
			i = -1;
			continue;
		}
		if (r < 0) {
			fprintf(stderr, "train-mlp: %s\n", spw_optimizer_last_error(tr.opt));
			goto out;
		}
	}
	printf("model: %d-%d x%d-%d, %zu parameters in %d tensors; optimizer state %.1f MiB on tier %s, "
	       "region %.1f MiB (%.0f%% of the state), pages %ju KiB, mode %s, accumulation %ju\n",
	       cfg.n_in, cfg.n_hidden, cfg.n_hidden_layers, cfg.n_out, mlp_param_count(m), n,
	       state_bytes / 1048576.0, tier, (double)region / 1048576.0, 100.0 * (double)region / state_bytes,
	       (uintmax_t)(page >> 10), oo.mode == SPW_OPT_EXACT ? "exact" : "overlapped", (uintmax_t)accum);

	first = spw_optimizer_resumed_step(tr.opt) + 1;
	if (first > 1) {
		/* The model is the trainer's to restore: the master weights of
		 * the last committed step, as the copy-out would have left it. */
		for (i = 0; i < n; i++)
			if ((r = spw_optimizer_read(tr.opt, tr.id[i], SPW_STATE_PARAM, t[i].param)) < 0)
				goto fail;
		printf("resumed: session %s held the state after step %ju; going on with step %ju\n", session,
		       (uintmax_t)(first - 1), (uintmax_t)first);
	}
	if (losses_path && !(losses = losses_open(losses_path, first - 1))) {
		fprintf(stderr, "train-mlp: %s: %s\n", losses_path, strerror(errno));
		goto out;
	}
	if (status_path_for(socket, status_path, sizeof(status_path)) == 0)
		tier_read(status_path, session, &tf0);
	tf = tf0;
	prev = tf0;

	for (uint64_t step = first; step <= steps; step++) {
		struct spw_step_result res = { .size = sizeof(res) };
		double t0 = now_s(), dt;

		spw_optimizer_stats(tr.opt, &st0);
		if ((r = spw_optimizer_begin(tr.opt, step, NULL, 0.0f)) < 0)
			goto fail;
		for (uint64_t mb = 0; mb < accum; mb++) {
			for (i = 0; i < n; i++)
				if ((r = spw_optimizer_wait_params(tr.opt, tr.id[i], NULL)) < 0)
					goto fail;
			mlp_task_batch(task, (step - 1) * accum + mb, (int)batch, x, y);
			if ((r = mlp_forward(m, x, y, (int)batch, &loss, &correct)) < 0 ||
			    (r = mlp_backward(m, on_grad, &tr)) < 0 || (r = flush(&tr)) < 0 ||
			    (r = spw_optimizer_sync_grads(tr.opt)) < 0)
				goto fail;
		}
		if ((r = spw_optimizer_end(tr.opt, &res)) < 0)
			goto fail;
		dt = now_s() - t0;
		t_total += dt;
		spw_optimizer_stats(tr.opt, &st);
		mlp_loss_ends_add(&ends, step, steps, loss);
		if (losses) {
			fprintf(losses, "%ju %.9g\n", (uintmax_t)step, (double)loss);
			fflush(losses);
		}
		if (every && (step % every == 0 || step == 1))
			printf("step %4ju  loss %.4f  acc %.3f  %6.1f ms  grad-norm %.3f  moved %.1f MiB  "
			       "adam %.1f ms  pins %ju (%ju fast)  prefetch %ju\n",
			       (uintmax_t)step, (double)loss, (double)correct / (double)batch, dt * 1e3,
			       res.grad_norm,
			       (double)(st.bytes_d2h + st.bytes_h2d - st0.bytes_d2h - st0.bytes_h2d) / 1048576.0,
			       (st.adam_s - st0.adam_s) * 1e3, (uintmax_t)(st.pins - st0.pins),
			       (uintmax_t)(st.fast_pins - st0.fast_pins), (uintmax_t)(st.prefetches - st0.prefetches));
		/* Outside the timed step: one status round trip to the daemon. */
		if (every && (step % every == 0 || step == 1) && status_path[0]) {
			tier_read(status_path, session, &tf);
			if (tf.valid && (tf.read_bytes + tf.write_bytes > 0 || tf.prefetch_hits + tf.misses > 0)) {
				printf("          daemon: disk read %.1f MiB, written %.1f MiB, prefetch hits %.0f, "
				       "misses %.0f, evictions %.0f (since the last line)\n",
				       (tf.read_bytes - prev.read_bytes) / 1048576.0,
				       (tf.write_bytes - prev.write_bytes) / 1048576.0, tf.prefetch_hits - prev.prefetch_hits,
				       tf.misses - prev.misses, tf.evictions - prev.evictions);
				prev = tf;
			}
		}
	}
	if ((r = spw_optimizer_sync(tr.opt)) < 0)
		goto fail;
	t_start = (double)(steps - first + 1);
	/* A resumed run saw only its own steps: no first-10 loss of its own. */
	if (first > 1)
		printf("summary: steps %ju-%ju here (1-%ju before the kill), %.1f ms per step, loss %.4f (last 10), ",
		       (uintmax_t)first, (uintmax_t)steps, (uintmax_t)(first - 1), t_total / t_start * 1e3,
		       (double)ends.last);
	else
		printf("summary: %ju steps, %.1f ms per step, loss %.4f -> %.4f (first/last 10), ", (uintmax_t)steps,
		       t_total / t_start * 1e3, (double)ends.first, (double)ends.last);
	printf("moved %.1f MiB, adam %.2f s, pins %ju (%ju fast, %.0f%%), prefetch hints %ju%s\n",
	       (double)(st.bytes_d2h + st.bytes_h2d) / 1048576.0, st.adam_s, (uintmax_t)st.pins,
	       (uintmax_t)st.fast_pins, st.pins ? 100.0 * (double)st.fast_pins / (double)st.pins : 0.0,
	       (uintmax_t)st.prefetches, st.hints ? "" : " (the daemon takes no hints)");
	if (status_path[0]) {
		tier_read(status_path, session, &tf);
		if (tf.valid && tf.prefetch_hits + tf.misses > 0)
			printf("daemon:  NVMe tier read %.1f MiB, wrote %.1f MiB; prefetch hits %.0f, misses %.0f "
			       "(%.0f%% of disk-backed pins found their page ready), evictions %.0f\n",
			       (tf.read_bytes - tf0.read_bytes) / 1048576.0, (tf.write_bytes - tf0.write_bytes) / 1048576.0,
			       tf.prefetch_hits - tf0.prefetch_hits, tf.misses - tf0.misses,
			       100.0 * (tf.prefetch_hits - tf0.prefetch_hits) /
				       (tf.prefetch_hits - tf0.prefetch_hits + tf.misses - tf0.misses),
			       tf.evictions - tf0.evictions);
	}
	/* A resumed run saw only its own steps: the check is the whole run's. */
	ret = steps >= 20 && first == 1 ? mlp_loss_ends_check(&ends, check, "train-mlp") : 0;
	goto out;
fail:
	fprintf(stderr, "train-mlp: %s\n", spw_optimizer_last_error(tr.opt));
out:
	if (losses)
		fclose(losses);
	spw_optimizer_free(tr.opt);
	/* A state left mid-update stays where it is, for the operator. */
	if (c && ret != 3)
		spw_client_detach(c);
	spw_client_free(c);
	free(x);
	free(y);
	mlp_task_free(task);
	mlp_free(m);
	return ret;
}
