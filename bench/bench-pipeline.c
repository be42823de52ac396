/* SPDX-License-Identifier: MIT */
/*
 * spillway-bench pipeline: one training step's offload work overlapped
 * with the device's compute, against the same work run serially and in
 * DeepSpeed's order, and against the ideal bound, all in one run.
 *
 *   spillway-bench pipeline [--json] [--mode overlapped|exact]
 *                           [--tier resident|nvme] [--socket PATH]
 *                           [--layers L] [--params N] [--fwd-ms F] [--bwd-ms B]
 *                           [--steps S] [--threads T] [--device host|cuda]
 *                           [--trace] [--state-dtype fp32|bf16|int8]
 *                           [--grad-store fp32|bf16|ref] [--master-dtype fp32|bf16]
 *
 * The device is the host backend, or with --device cuda (a build with
 * CUDA, on a GPU host) the GPU: gradients and parameters then live in
 * device memory and the copies are real DMA. Either way the compute is a
 * stand-in: the trainer thread sleeps fwd-ms per layer for forward and
 * bwd-ms for backward, using no CPU, as a GPU would. Each layer is one
 * tensor of N parameters, bf16 on the device, bf16 gradients.
 *
 *   step_s             a step with spillway, steady state (mean of S steps)
 *   serial_s           backward, then the copies out, then Adam on one
 *                      thread, then the copies back: nothing overlapped
 *   after_backward_s   DeepSpeed's schedule: all gradients out after
 *                      backward, then Adam on the pool, then all params back
 *   bound_s            max(compute, transfers, Adam, disk) from each
 *                      part's own time measured alone
 *   state_dtype        the moments' type (spw_optimizer_opts.state_dtype)
 *   grad_store         the type of exact mode's gradient store (fp32, or
 *                      bf16: SPW_GRAD_STORE_BF16, exact for these bf16
 *                      gradients and half the store's bytes; or ref:
 *                      SPW_GRAD_BY_REFERENCE, no store, the updates read
 *                      the trainer's gradients where grad_ready found
 *                      them, as a CPU trainer's OffloadAdamW does)
 *   master_dtype       the master weights' type (fp32, or bf16:
 *                      SPW_MASTER_BF16, rounded stochastically, 2 bytes)
 *   state_bytes        master weights and moments: 12 bytes per parameter
 *                      with fp32 moments, 8 with bf16, 4 + 2 * (1 + 1/64)
 *                      with int8 (four chunks' codes a page, an fp32 scale
 *                      per 256 elements in the optimizer's scale pages);
 *                      2 bytes less with bf16 master weights
 *   disk_bytes_per_step  the session's tier reads + writes (the daemon's
 *                      status, sessions[].tier) over the measured steps,
 *                      per step; 0 on the resident tier. On the NVMe tier
 *                      the region is a quarter of the fp32 state for
 *                      every state dtype.
 *
 * With --trace, a second session runs the same step with the timeline on
 * (SPILLWAY_TRACE, client/trace.c, written to a temporary file and removed),
 * the two taking single steps in turn, the first of each pair alternating:
 *
 *   step_s             the mean step with the timeline off, as above
 *   trace_step_s       the mean step with the timeline on
 *   trace_overhead     the median of the pairs' ratios, on / off
 *   trace_bytes        the size of the trace the traced session wrote
 *
 * With --persistent, the second session is a persistent one instead (the
 * step marks of docs/persistent.md), the same way:
 *   persistent_step_s     the mean step of the persistent session
 *   persistent_overhead   the median of the pairs' ratios, persistent / plain
 *   extra_bytes_per_step  bytes the persistent session's optimizer moved
 *                         (gradients out, parameters in) per step beyond the
 *                         plain one's
 *   persistent_kernel_ratio  the persistent session's pool time in the
 *                         kernels (the journal's copies included) over the
 *                         plain one's, for the same steps
 *   extra_disk_bytes_per_step  the persistent session's tier reads + writes
 *                         per step beyond the plain one's (the undo copies
 *                         of overlapped mode's weights on the NVMe tier)
 *
 * The disk part (nvme tier) is the steady step time of the same pipeline
 * with the compute set to zero: everything but the disk overlaps, so it is
 * what the tier itself allows (an upper estimate of the disk's own time). Without --socket it
 * starts its own spillwayd on a temporary directory, with the NVMe tier's
 * swap files there.
 */
#include <errno.h>
#include <math.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include <spillway/spillway.h>

#include "config.h"

#include "bench.h"
#include "util/localdaemon.h"
#include "kernels.h"
#include "pool.h"

#if SPW_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static const char bench_config[] =
	"{\n"
	"  \"socket\": { \"dir\": \"@DIR@\", \"mode\": \"0600\" },\n"
	"  \"pool\": { \"max_bytes\": \"2GiB\", \"session_max_bytes\": \"1GiB\", \"require_locked\": false },\n"
	"  \"swap\": { \"dirs\": [ { \"path\": \"@DIR@\", \"max_bytes\": \"4GiB\" } ] },\n"
	"  \"log\": { \"level\": \"warn\" }\n"
	"}\n";

struct cfg {
	enum spw_optimizer_mode mode;
	bool nvme;
	int layers, steps;
	uint64_t params;
	double fwd_ms, bwd_ms;
	unsigned threads;
	bool cuda;
	enum spw_state_dtype sd; /* --state-dtype */
	enum spw_grad_store gs;  /* --grad-store */
	bool master16;           /* --master-dtype bf16 */
};

/* Zeroed buffers on the device under test: plain host memory for the
 * host backend, device memory for cuda. */
static void *dev_alloc(const struct cfg *c, size_t n)
{
#if SPW_HAVE_CUDA
	if (c->cuda) {
		void *p = NULL;

		if (cudaMalloc(&p, n) != cudaSuccess)
			return NULL;
		if (cudaMemset(p, 0, n) != cudaSuccess) {
			cudaFree(p);
			return NULL;
		}
		return p;
	}
#endif
	return calloc(1, n);
}

static void dev_free(const struct cfg *c, void *p)
{
#if SPW_HAVE_CUDA
	if (c->cuda) {
		if (p)
			cudaFree(p);
		return;
	}
#endif
	free(p);
}

/* Copies n bytes host -> device (to_dev) or device -> host; returns 0 or -EIO. */
static int dev_copy(const struct cfg *c, void *dst, const void *src, size_t n, bool to_dev)
{
#if SPW_HAVE_CUDA
	if (c->cuda)
		return cudaMemcpy(dst, src, n, to_dev ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost) ==
		       cudaSuccess ? 0 : -EIO;
#endif
	memcpy(dst, src, n);
	return 0;
}

static void sleep_ms(double ms)
{
	struct timespec ts = { .tv_sec = (time_t)(ms / 1e3), .tv_nsec = (long)(ms * 1e6) % 1000000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static double secs(uint64_t t0)
{
	return (double)(now_ns() - t0) * 1e-9;
}


/* The parts on their own: transfers, Adam on the pool and on one thread. */
struct parts {
	double compute, d2h, h2d, adam_pool, adam_one, disk;
};

static int measure_parts(const struct cfg *c, struct parts *p)
{
	size_t n = c->params * (size_t)c->layers;
	float *w = calloc(n, 4), *m = calloc(n, 4), *v = calloc(n, 4);
	uint16_t *g = dev_alloc(c, n * 2), *gh = calloc(n, 2), *out = calloc(n, 2), *dev = dev_alloc(c, n * 2);
	struct spw_adamw_hparams hp = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
					.weight_decay = 0.01f, .grad_scale = 1.0f, .step = 1 };
	struct spw__pool_opts po = { .threads = c->threads, .numa_node = -1 };
	struct spw__pool_kcall kc = { .op = SPW_POOL_ADAMW };
	struct spw__pool *pool = NULL;
	uint64_t t0;
	int r = -ENOMEM;

	if (!w || !m || !v || !g || !gh || !out || !dev)
		goto out;
	if ((r = spw__pool_new(&po, &pool)) < 0)
		goto out;
	spw_adamw_prepare(&hp, &kc.consts);
	kc.n = n;
	kc.src = gh;
	kc.src_dtype = SPW_DTYPE_BF16;
	kc.param = w;
	kc.exp_avg = m;
	kc.exp_avg_sq = v;
	kc.state_dtype = c->sd == SPW_STATE_BF16 ? SPW_DTYPE_BF16 : SPW_DTYPE_F32;
	/* int8: codes in m and v, their block scales after them (the
	 * buffers hold 4 bytes an element). */
	kc.q8 = c->sd == SPW_STATE_INT8;
	kc.m_scale = (float *)((unsigned char *)m + n);
	kc.v_scale = (float *)((unsigned char *)v + n);
	kc.copy = out;
	kc.copy_dtype = SPW_DTYPE_BF16;
	/* bf16 master weights: w's zeros read as bf16 zeros. */
	kc.p16 = c->master16;
	kc.sr_key = 1;
	/* Twice each, keeping the second: the first touches fresh memory. */
	for (int i = 0; i < 2; i++) {
		t0 = now_ns();
		if ((r = dev_copy(c, gh, g, n * 2, false)) < 0)
			goto out;
		p->d2h = secs(t0);
		t0 = now_ns();
		spw__pool_kernel_submit(pool, &kc);
		spw__pool_wait(pool, &kc.call);
		p->adam_pool = secs(t0);
		t0 = now_ns();
		if (kc.q8)
			spw_kernels()->adamw_q8[SPW_DTYPE_BF16][SPW_DTYPE_BF16](&kc.consts, w, (int8_t *)m, kc.m_scale,
										(uint8_t *)v, kc.v_scale, gh, out, n);
		else if (c->sd == SPW_STATE_BF16)
			spw_kernels()->adamw_m16[SPW_DTYPE_BF16][SPW_DTYPE_BF16](&kc.consts, w, (uint16_t *)m,
										 (uint16_t *)v, gh, out, n);
		else
			spw_kernels()->adamw[SPW_DTYPE_BF16][SPW_DTYPE_BF16](&kc.consts, w, m, v, gh, out, n);
		p->adam_one = secs(t0);
		t0 = now_ns();
		if ((r = dev_copy(c, dev, out, n * 2, true)) < 0)
			goto out;
		p->h2d = secs(t0);
	}
	/* The compute stand-in as it really runs: nanosleep overshoots a
	 * little per call, and that belongs to the compute part. */
	t0 = now_ns();
	for (int s = 0; s < 3; s++)
		for (int l = 0; l < 2 * c->layers; l++)
			sleep_ms(l < c->layers ? c->fwd_ms : c->bwd_ms);
	p->compute = secs(t0) / 3;
	r = 0;
out:
	spw__pool_free(pool);
	free(w);
	free(m);
	free(v);
	dev_free(c, g);
	free(gh);
	free(out);
	dev_free(c, dev);
	return r;
}

struct run {
	spw_client *c;
	spw_optimizer *o;
	uint32_t *id;
	uint16_t **grad;        /* shared by every run: read only */
	uint16_t **dev;         /* this run's parameters on the device */
	uint64_t next;          /* the next step's number */
};

/* Runs steps steps from rn->next on; *per_step is their mean time. */
static int run_steps(const struct cfg *c, struct run *rn, int steps, double *per_step, struct bench_progress *pg)
{
	uint64_t t0 = now_ns();
	int r;

	for (int i = 0; i < steps; i++, rn->next++) {
		struct spw_step_result res = { .size = sizeof(res) };

		if ((r = spw_optimizer_begin(rn->o, rn->next, NULL, 0.0f)) < 0)
			goto fail;
		/* Forward: each layer waits for its updated parameters. */
		for (int l = 0; l < c->layers; l++) {
			if ((r = spw_optimizer_wait_params(rn->o, rn->id[l], NULL)) < 0)
				goto fail;
			sleep_ms(c->fwd_ms);
		}
		/* Backward, last layer first; a layer's gradient is handed over
		 * once the device is done with that layer. */
		for (int l = c->layers - 1; l >= 0; l--) {
			sleep_ms(c->bwd_ms);
			if ((r = spw_optimizer_grad_ready(rn->o, rn->id[l], SPW_ALL_CHUNKS, rn->grad[l],
							  c->params * 2, SPW_TYPE_BF16, NULL)) < 0)
				goto fail;
		}
		if ((r = spw_optimizer_end(rn->o, &res)) < 0)
			goto fail;
		bench_progress_step(pg, "step");
	}
	*per_step = secs(t0) / steps;
	return 0;
fail:
	bench_progress_end(pg);
	fprintf(stderr, "spillway-bench pipeline: step %ju: %s\n", (uintmax_t)rn->next, spw_optimizer_last_error(rn->o));
	return r;
}

/* Attaches session name, builds its optimizer and adds the layers, with
 * device parameters of its own and the shared gradients. Prints why it
 * failed and returns -1, or 0. */
static int run_open(const struct cfg *c, const char *socket_path, struct spw_attach_opts *a,
		    const struct spw_optimizer_opts *oo, uint16_t **grad, const float *init, struct run *rn)
{
	int r;

	rn->next = 1;
	rn->grad = grad;
	rn->id = calloc((size_t)c->layers, sizeof(*rn->id));
	rn->dev = calloc((size_t)c->layers, sizeof(*rn->dev));
	if (!rn->id || !rn->dev) {
		fprintf(stderr, "spillway-bench pipeline: out of memory\n");
		return -1;
	}
	if ((r = spw_client_new(NULL, &rn->c)) < 0 || (r = spw_client_connect(rn->c, socket_path)) < 0 ||
	    (r = spw_client_attach(rn->c, a)) < 0 || (r = spw_optimizer_new(rn->c, oo, &rn->o)) < 0) {
		fprintf(stderr, "spillway-bench pipeline: %s: %s\n", a->session,
			rn->c ? spw_client_last_error(rn->c) : spw_strerror(r));
		return -1;
	}
	for (int l = 0; l < c->layers; l++) {
		uint16_t *h = calloc(c->params, 2);

		rn->dev[l] = dev_alloc(c, c->params * 2);
		r = h && rn->dev[l] ? dev_copy(c, rn->dev[l], h, c->params * 2, true) : -ENOMEM;
		free(h);
		if (r < 0) {
			fprintf(stderr, "spillway-bench pipeline: no memory for layer %d on the %s device\n", l,
				oo->device);
			return -1;
		}
	}
	/* Added last layer first: the order backward produces them. */
	for (int l = c->layers - 1; l >= 0; l--) {
		char name[32];

		snprintf(name, sizeof(name), "layer%d", l);
		if (spw_optimizer_add(rn->o, name, 0, c->params, init, rn->dev[l], SPW_TYPE_BF16, &rn->id[l]) < 0) {
			fprintf(stderr, "spillway-bench pipeline: %s\n", spw_optimizer_last_error(rn->o));
			return -1;
		}
	}
	return 0;
}

static void run_close(const struct cfg *c, struct run *rn)
{
	spw_optimizer_free(rn->o);
	rn->o = NULL;
	if (rn->c)
		spw_client_detach(rn->c);
	spw_client_free(rn->c);
	rn->c = NULL;
	for (int l = 0; rn->dev && l < c->layers; l++)
		dev_free(c, rn->dev[l]);
	free(rn->id);
	free(rn->dev);
	rn->id = NULL;
	rn->dev = NULL;
}

/* The gradients every run hands over: small and varied, so Adam's
 * arithmetic is ordinary. Returns NULL when the device is out of memory. */
static uint16_t **grads_new(const struct cfg *c)
{
	uint16_t **g = calloc((size_t)c->layers, sizeof(*g)), *h = calloc(c->params, 2);
	int l;

	if (!g || !h)
		goto fail;
	for (uint64_t i = 0; i < c->params; i++)
		h[i] = spw_f32_to_bf16((float)((int)(i % 97) - 48) * 1e-4f);
	for (l = 0; l < c->layers; l++)
		if (!(g[l] = dev_alloc(c, c->params * 2)) || dev_copy(c, g[l], h, c->params * 2, true) < 0)
			goto fail;
	free(h);
	return g;
fail:
	for (l = 0; g && l < c->layers; l++)
		dev_free(c, g[l]);
	free(g);
	free(h);
	return NULL;
}

/*
 * Tracing off (rn) and on (tr), one step each in turn, the first of each
 * pair alternating; *off and *on are mean steps, *ratio the median of the
 * pairs' on/off ratios.
 */
static int run_pairs(const struct cfg *c, struct run *rn, struct run *tr, double *off, double *on, double *ratio,
		     struct bench_progress *pg)
{
	double *ratios = calloc((size_t)c->steps, sizeof(*ratios)), a, b;
	int r = -ENOMEM;

	if (!ratios)
		return r;
	*off = *on = 0;
	for (int i = 0; i < c->steps; i++) {
		if (i % 2 == 0)
			r = run_steps(c, rn, 1, &a, pg) < 0 ? -1 : run_steps(c, tr, 1, &b, pg);
		else
			r = run_steps(c, tr, 1, &b, pg) < 0 ? -1 : run_steps(c, rn, 1, &a, pg);
		if (r < 0)
			goto out;
		*off += a / c->steps;
		*on += b / c->steps;
		ratios[i] = b / a;
	}
	*ratio = bench_median(ratios, (size_t)c->steps);
	r = 0;
out:
	free(ratios);
	return r;
}

/* The session's tier reads + writes so far, from the daemon's status. */
static int tier_bytes(const char *status, const char *session, double *ret)
{
	cJSON *doc = NULL;
	const cJSON *s, *t, *rb, *wb;
	int r = bench_status_doc(status, &doc);

	if (r < 0)
		return r;
	s = bench_status_session(doc, session);
	t = cJSON_GetObjectItemCaseSensitive(s, "tier");
	rb = cJSON_GetObjectItemCaseSensitive(t, "read_bytes");
	wb = cJSON_GetObjectItemCaseSensitive(t, "write_bytes");
	/* A resident session has no tier: no disk bytes. */
	*ret = (cJSON_IsNumber(rb) ? rb->valuedouble : 0) + (cJSON_IsNumber(wb) ? wb->valuedouble : 0);
	cJSON_Delete(doc);
	return s ? 0 : -ENOENT;
}

static const char *const sd_name[] = { "fp32", "bf16", "int8" };
/* By enum spw_grad_store. */
static const char *const gs_name[] = { "fp32", "ref", "bf16" };

static const char usage[] =
	"usage: spillway-bench pipeline [--json] [--mode overlapped|exact] [--tier resident|nvme]\n"
	"         [--socket PATH] [--layers L] [--params N] [--fwd-ms F] [--bwd-ms B]\n"
	"         [--steps S] [--threads T] [--device host|cuda] [--trace | --persistent]\n"
	"         [--state-dtype fp32|bf16|int8] [--grad-store fp32|bf16|ref] [--master-dtype fp32|bf16]\n";

int bench_pipeline(int argc, char **argv)
{
	struct cfg c = { .layers = 8, .params = 1u << 20, .steps = 10, .threads = 0, .fwd_ms = -1,
			 .bwd_ms = -1 };
	struct local_daemon d = { .pid = -1 };
	struct spw_param_group g = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
				     .weight_decay = 0.01f };
	struct spw_optimizer_opts oo = { .size = sizeof(oo), .groups = &g, .ngroups = 1, .device = "host" };
	struct spw_attach_opts a = { .size = sizeof(a), .session = "bench/pipeline" };
	struct run rn = { 0 }, tr = { 0 };
	struct parts p = { 0 };
	struct bench_progress pg;
	const char *socket_path = NULL;
	char trace_dir[] = "/tmp/spw-bench-trace-XXXXXX", trace_path[sizeof(trace_dir) + 16] = "";
	char *env_trace = NULL;
	double step_s = 0, trace_step_s = 0, trace_overhead = 0, serial_s, after_s, bound_s, transfers,
	       state_bytes, pbytes, mbytes, paged;
	long long trace_bytes = -1;
	uint16_t **grad = NULL;
	float *init = NULL;
	bool json = false, own = false, trace = false, persist = false;
	double extra_bytes = 0, disk0 = -1, disk1 = 0, disk_per_step = -1, pdisk0 = -1, pdisk1 = 0, extra_disk = 0;
	double kernel_ratio = 0;
	const char *tr_session = "bench/pipeline-persistent";
	char status_path[sizeof(d.status) + 16];
	const char *rn_session = a.session;
	int r, ret = 1;

	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(argv[i], "--json") || !strcmp(argv[i], "--trace") || !strcmp(argv[i], "--persistent")) {
			json |= !strcmp(argv[i], "--json");
			trace |= !strcmp(argv[i], "--trace");
			persist |= !strcmp(argv[i], "--persistent");
			continue;
		}
		if (!v || !strcmp(argv[i], "--help"))
			return bench_usage(usage, argv[i]);
		if (!strcmp(argv[i], "--mode") && (!strcmp(v, "overlapped") || !strcmp(v, "exact")))
			c.mode = !strcmp(v, "exact") ? SPW_OPT_EXACT : SPW_OPT_OVERLAPPED;
		else if (!strcmp(argv[i], "--tier") && (!strcmp(v, "resident") || !strcmp(v, "nvme")))
			c.nvme = !strcmp(v, "nvme");
		else if (!strcmp(argv[i], "--socket"))
			socket_path = v;
		else if (!strcmp(argv[i], "--layers"))
			c.layers = atoi(v);
		else if (!strcmp(argv[i], "--params"))
			c.params = strtoull(v, NULL, 0);
		else if (!strcmp(argv[i], "--fwd-ms"))
			c.fwd_ms = atof(v);
		else if (!strcmp(argv[i], "--bwd-ms"))
			c.bwd_ms = atof(v);
		else if (!strcmp(argv[i], "--steps"))
			c.steps = atoi(v);
		else if (!strcmp(argv[i], "--threads"))
			c.threads = (unsigned)atoi(v);
		else if (!strcmp(argv[i], "--device") && (!strcmp(v, "host") || !strcmp(v, "cuda")))
			c.cuda = !strcmp(v, "cuda");
		else if (!strcmp(argv[i], "--state-dtype") && (!strcmp(v, "fp32") || !strcmp(v, "bf16") ||
								!strcmp(v, "int8")))
			c.sd = !strcmp(v, "int8") ? SPW_STATE_INT8 : !strcmp(v, "bf16") ? SPW_STATE_BF16 : SPW_STATE_F32;
		else if (!strcmp(argv[i], "--grad-store") && (!strcmp(v, "fp32") || !strcmp(v, "bf16") ||
							      !strcmp(v, "ref"))) {
			c.gs = !strcmp(v, "ref")    ? SPW_GRAD_BY_REFERENCE
			       : !strcmp(v, "bf16") ? SPW_GRAD_STORE_BF16
						    : SPW_GRAD_STORE;
		}
		else if (!strcmp(argv[i], "--master-dtype") && (!strcmp(v, "fp32") || !strcmp(v, "bf16")))
			c.master16 = !strcmp(v, "bf16");
		else {
			return bench_usage(usage, NULL);
		}
		i++;
	}
	if (c.layers < 1 || c.layers > 1024 || c.params < 1024 || c.steps < 1 || (trace && persist)) {
		return bench_usage(usage, NULL);
	}
	if (c.cuda && !SPW_HAVE_CUDA) {
		fprintf(stderr, "spillway-bench pipeline: --device cuda needs a build with CUDA (meson setup -Dcuda=enabled)\n");
		return 2;
	}
	oo.device = c.cuda ? "cuda" : "host";
#if SPW_HAVE_CUDA
	if (c.cuda) {
		int ndev = 0;
		cudaError_t e = cudaGetDeviceCount(&ndev);

		if (e != cudaSuccess || ndev == 0) {
			fprintf(stderr, "spillway-bench pipeline: --device cuda: no GPU here (%s); use --device host\n",
				e != cudaSuccess ? cudaGetErrorString(e) : "no devices");
			return 1;
		}
	}
#endif
	/* Compute the largest part: the NVMe tier moves every state page
	 * through the disk each step, so it gets more. */
	if (c.fwd_ms < 0)
		c.fwd_ms = c.nvme ? 16.0 : 2.0;
	if (c.bwd_ms < 0)
		c.bwd_ms = 2.0 * c.fwd_ms;

	if ((r = measure_parts(&c, &p)) < 0) {
		fprintf(stderr, "spillway-bench pipeline: %s\n", spw_strerror(r));
		return 1;
	}

	if (!socket_path) {
		local_daemon_locate();
		if ((r = local_daemon_start(&d, bench_config)) < 0) {
			fprintf(stderr, "spillway-bench pipeline: cannot start spillwayd: %s\n", spw_strerror(r));
			return 1;
		}
		own = true;
		socket_path = d.control;
	}
	/* Bytes per parameter of the weights and of each moment (int8: its
	 * code and its share of a block's scale). */
	pbytes = c.master16 ? 2.0 : 4.0;
	mbytes = c.sd == SPW_STATE_INT8 ? 1.0 + 1.0 / 64.0 : c.sd == SPW_STATE_BF16 ? 2.0 : 4.0;
	state_bytes = (pbytes + 2.0 * mbytes) * (double)c.params * c.layers;
	/* Smaller pages on the NVMe tier, so a region of a quarter of the
	 * state still holds a window of several chunks. */
	a.page_size = c.nvme ? 1u << 20 : 4u << 20;
	/* Resident: all the state, the gradient store and staging. NVMe: a
	 * region well under a third of the state, the same whatever the
	 * state dtype (a quarter of fp32 state), so the dtypes are compared
	 * at one pinned-memory budget. */
	/* Resident: every role of every layer in whole pages (a small
	 * dtype's tensor still takes one). */
	paged = (ceil(pbytes * (double)c.params / a.page_size) + 2.0 * ceil(mbytes * (double)c.params / a.page_size)) *
		a.page_size * c.layers;
	a.region_bytes = c.nvme ? (uint64_t)(12.0 * (double)c.params * c.layers / 4) : (uint64_t)(paged * 1.5) + (64u << 20);
	/* The NVMe tier's swap: the state twice over, named so that the
	 * traced session (--trace) finds room beside the first one. */
	if (c.nvme) {
		a.swap_bytes = ((uint64_t)(2 * state_bytes) + (64u << 20)) & ~(uint64_t)((1u << 20) - 1);
		a.flags |= SPW_ATTACH_SWAP_BYTES;
	}
	oo.mode = c.mode;
	oo.tier = c.nvme ? SPW_TENSOR_SWAPPABLE : SPW_TENSOR_RESIDENT;
	oo.threads = c.threads;
	oo.window = 4;
	oo.state_dtype = c.sd;
	oo.grad_store = c.gs;
	oo.master_dtype = c.master16 ? SPW_MASTER_BF16 : SPW_MASTER_F32;
	if (own)
		snprintf(status_path, sizeof(status_path), "%s", d.status);
	else /* the status socket beside the control socket */
		snprintf(status_path, sizeof(status_path), "%.*s/status.sock",
			 (int)(strrchr(socket_path, '/') ? strrchr(socket_path, '/') - socket_path : 1),
			 strrchr(socket_path, '/') ? socket_path : ".");
	init = calloc(c.params, sizeof(float));
	grad = grads_new(&c);
	if (!init || !grad) {
		fprintf(stderr, "spillway-bench pipeline: no memory for the gradients on the %s device\n", oo.device);
		goto out;
	}
	/* The timeline is read from the environment when an optimizer is
	 * built: off for this one whatever the caller's environment says, on
	 * for the traced one. */
	if (trace) {
		const char *e = getenv("SPILLWAY_TRACE");

		if (e && !(env_trace = strdup(e)))
			goto out;
		unsetenv("SPILLWAY_TRACE");
	}
	if (run_open(&c, socket_path, &a, &oo, grad, init, &rn) < 0)
		goto out;
	if (trace) {
		if (!mkdtemp(trace_dir)) {
			fprintf(stderr, "spillway-bench pipeline: %s: %s\n", trace_dir, strerror(errno));
			goto out;
		}
		snprintf(trace_path, sizeof(trace_path), "%s/trace.json", trace_dir);
		setenv("SPILLWAY_TRACE", trace_path, 1);
		a.session = "bench/pipeline-trace";
		r = run_open(&c, socket_path, &a, &oo, grad, init, &tr);
		unsetenv("SPILLWAY_TRACE");
		if (r < 0)
			goto out;
	}
	if (persist) {
		a.session = tr_session;
		a.persistent = 1;
		if (run_open(&c, socket_path, &a, &oo, grad, init, &tr) < 0)
			goto out;
	}
	bench_progress_init(&pg, "pipeline",
			    (unsigned)((trace || persist ? 2 : 1) * (2 + c.steps) + (c.nvme ? 3 : 0)));
	/* Warm-up steps learn the order and touch every page; then measure. */
	if ((r = run_steps(&c, &rn, 2, &step_s, &pg)) < 0 ||
	    ((trace || persist) && (r = run_steps(&c, &tr, 2, &step_s, &pg)) < 0))
		goto step_failed;
	/* Whatever the warm-up left to write counts against the measured
	 * steps, as the next step's write-back would in a long run. */
	if (spw_optimizer_sync(rn.o) < 0 || tier_bytes(status_path, rn_session, &disk0) < 0)
		disk0 = -1;
	if (persist && (spw_optimizer_sync(tr.o) < 0 || tier_bytes(status_path, tr_session, &pdisk0) < 0))
		pdisk0 = -1;
	if (trace || persist)
		r = run_pairs(&c, &rn, &tr, &step_s, &trace_step_s, &trace_overhead, &pg);
	else
		r = run_steps(&c, &rn, c.steps, &step_s, &pg);
	if (r < 0)
		goto step_failed;
	if (disk0 >= 0 && spw_optimizer_sync(rn.o) >= 0 && tier_bytes(status_path, rn_session, &disk1) >= 0)
		disk_per_step = (disk1 - disk0) / c.steps;
	if (persist && disk_per_step >= 0 && pdisk0 >= 0 && spw_optimizer_sync(tr.o) >= 0 &&
	    tier_bytes(status_path, tr_session, &pdisk1) >= 0)
		extra_disk = (pdisk1 - pdisk0) / c.steps - disk_per_step;
	if (persist) {
		/* Both ran the same steps so far: what the marks cost in bytes. */
		struct spw_optimizer_stats sa = { .size = sizeof(sa) }, sb = { .size = sizeof(sb) };

		if (spw_optimizer_sync(rn.o) < 0 || spw_optimizer_sync(tr.o) < 0 || spw_optimizer_stats(rn.o, &sa) < 0 ||
		    spw_optimizer_stats(tr.o, &sb) < 0)
			goto step_failed;
		extra_bytes = ((double)(sb.bytes_d2h + sb.bytes_h2d + sb.bytes_fetched) -
			       (double)(sa.bytes_d2h + sa.bytes_h2d + sa.bytes_fetched)) / (2 + c.steps);
		/* The pool's time in the kernels, the journal's copies
		 * included: what the guarantee costs in CPU, hidden or not. */
		kernel_ratio = sa.adam_s > 0 ? sb.adam_s / sa.adam_s : 0;
	}
	/* The NVMe tier's own time: the same steps with no compute at all,
	 * so the disk (the slowest part left) sets the pace. */
	if (c.nvme) {
		struct cfg z = c;

		z.fwd_ms = z.bwd_ms = 0.0;
		if ((r = run_steps(&z, &rn, 3, &p.disk, &pg)) < 0)
			goto step_failed;
	}
	bench_progress_end(&pg);
	if (trace) {
		struct stat st;

		/* The traced optimizer writes its timeline when freed. */
		run_close(&c, &tr);
		if (stat(trace_path, &st) == 0)
			trace_bytes = (long long)st.st_size;
	}

	transfers = p.d2h + p.h2d;
	serial_s = p.compute + p.d2h + p.adam_one + p.h2d + p.disk;
	after_s = p.compute + p.d2h + p.adam_pool + p.h2d + p.disk;
	bound_s = p.compute;
	if (transfers > bound_s)
		bound_s = transfers;
	if (p.adam_pool > bound_s)
		bound_s = p.adam_pool;
	if (p.disk > bound_s)
		bound_s = p.disk;
	if (json) {
		printf("{\"bench\":\"pipeline\",\"device\":\"%s\",\"mode\":\"%s\",\"tier\":\"%s\",\"layers\":%d,\"params\":%ju,"
		       "\"state_bytes\":%.0f,\"region_bytes\":%ju,\"compute_s\":%.6f,\"transfers_s\":%.6f,"
		       "\"adam_s\":%.6f,\"disk_s\":%.6f,\"step_s\":%.6f,\"serial_s\":%.6f,"
		       "\"after_backward_s\":%.6f,\"bound_s\":%.6f,\"overlap_efficiency\":%.3f,"
		       "\"speedup_vs_after_backward\":%.3f,\"speedup_vs_serial\":%.3f,\"state_dtype\":\"%s\","
		       "\"grad_store\":\"%s\",\"master_dtype\":\"%s\",\"disk_bytes_per_step\":%.0f",
		       oo.device, c.mode == SPW_OPT_EXACT ? "exact" : "overlapped", c.nvme ? "nvme" : "resident",
		       c.layers, (uintmax_t)c.params, state_bytes, (uintmax_t)a.region_bytes, p.compute, transfers,
		       p.adam_pool, p.disk, step_s, serial_s, after_s, bound_s, bound_s / step_s,
		       after_s / step_s, serial_s / step_s, sd_name[c.sd], gs_name[c.gs],
		       c.master16 ? "bf16" : "fp32", disk_per_step);
		if (trace)
			printf(",\"trace_step_s\":%.6f,\"trace_overhead\":%.4f,\"trace_bytes\":%lld", trace_step_s,
			       trace_overhead, trace_bytes);
		if (persist)
			printf(",\"persistent_step_s\":%.6f,\"persistent_overhead\":%.4f,\"extra_bytes_per_step\":%.0f,"
			       "\"extra_disk_bytes_per_step\":%.0f,\"persistent_kernel_ratio\":%.4f", trace_step_s,
			       trace_overhead, extra_bytes, extra_disk, kernel_ratio);
		printf("}\n");
	} else {
		printf("pipeline (%s, %s): %d layers x %ju params; compute %.1f ms, transfers %.1f ms, "
		       "Adam %.1f ms, disk %.1f ms\n  step %.1f ms, serial %.1f ms, after-backward %.1f ms, "
		       "bound %.1f ms: overlap efficiency %.2f, %.2fx faster than after-backward\n",
		       c.mode == SPW_OPT_EXACT ? "exact" : "overlapped", c.nvme ? "nvme" : "resident", c.layers,
		       (uintmax_t)c.params, p.compute * 1e3, transfers * 1e3, p.adam_pool * 1e3, p.disk * 1e3,
		       step_s * 1e3, serial_s * 1e3, after_s * 1e3, bound_s * 1e3, bound_s / step_s,
		       after_s / step_s);
		printf("  %s moments; disk %.1f MB per step\n", sd_name[c.sd],
		       disk_per_step / 1e6);
		if (trace)
			printf("  with the timeline on: step %.1f ms, overhead x%.4f (median of %d pairs), "
			       "trace %lld bytes\n", trace_step_s * 1e3, trace_overhead, c.steps, trace_bytes);
		if (persist)
			printf("  on a persistent session: step %.1f ms, overhead x%.4f (median of %d pairs), "
			       "%.0f extra bytes moved per step, %.0f extra disk bytes per step\n", trace_step_s * 1e3,
			       trace_overhead, c.steps, extra_bytes, extra_disk);
	}
	ret = 0;
	goto out;
step_failed:
	bench_progress_end(&pg);
out:
	run_close(&c, &tr);
	run_close(&c, &rn);
	if (trace_path[0]) {
		unlink(trace_path);
		rmdir(trace_dir);
	}
	if (env_trace) {
		setenv("SPILLWAY_TRACE", env_trace, 1);
		free(env_trace);
	}
	for (int l = 0; grad && l < c.layers; l++)
		dev_free(&c, grad[l]);
	free(grad);
	free(init);
	if (own)
		local_daemon_stop(&d);
	return ret;
}
