/* SPDX-License-Identifier: MIT */
/*
 * spillway-bench ring: data-plane round trip through the shared-memory
 * rings, against a request/reply over a unix socket pair measured in the
 * same run (alternating, round by round), and the daemon's CPU use while a
 * session sits idle.
 *
 *   spillway-bench ring [--json] [--socket PATH] [--rounds N] [--ops N]
 *
 * Without --socket it starts its own spillwayd on a temporary directory:
 * $SPILLWAYD, else ../daemon/spillwayd next to this binary in the build
 * tree, else spillwayd from PATH.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "bench.h"
#include "util/json.h"
#include "util/localdaemon.h"

#define MSG_BYTES 32

/* No ring-op limit: this measures the ring itself. */
static const char bench_config[] =
	"{\n"
	"  \"socket\": { \"dir\": \"@DIR@\", \"mode\": \"0600\" },\n"
	"  \"pool\": { \"max_bytes\": \"256MiB\", \"session_max_bytes\": \"64MiB\", \"require_locked\": false },\n"
	"  \"limits\": { \"ring_ops_per_s\": 0 },\n"
	"  \"log\": { \"level\": \"warn\" }\n"
	"}\n";

/* ---- the baseline: a thread echoing fixed-size messages ---- */

static int full_io(int fd, void *buf, size_t n, int writing)
{
	size_t done = 0;

	while (done < n) {
		ssize_t r = writing ? write(fd, (char *)buf + done, n - done) : read(fd, (char *)buf + done, n - done);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		done += (size_t)r;
	}
	return 0;
}

static void *echo_main(void *arg)
{
	int fd = *(int *)arg;
	char buf[MSG_BYTES];

	while (full_io(fd, buf, sizeof(buf), 0) == 0 && full_io(fd, buf, sizeof(buf), 1) == 0)
		;
	return NULL;
}

static int socket_round_trip(int fd)
{
	char buf[MSG_BYTES] = "spillway-bench ring request";

	if (full_io(fd, buf, sizeof(buf), 1) < 0 || full_io(fd, buf, sizeof(buf), 0) < 0)
		return -EPIPE;
	return 0;
}

/* ---- the ring ---- */

enum op { OP_NOP, OP_PIN_UNPIN, OP__N };
static const char *const op_name[OP__N] = { "nop", "pin_unpin" };

static int ring_op(spw_client *c, enum op op, uint32_t tensor)
{
	int r;

	if (op == OP_NOP)
		return spw_nop(c);
	r = spw_pin(c, tensor, 0, NULL);
	if (r < 0)
		return r;
	return spw_unpin(c, tensor, 0, SPW_CLEAN);
}

struct samples {
	double *v;
	size_t n, cap;
	double total_ns;
};

static int push(struct samples *s, double ns)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 4096;
		double *v = realloc(s->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = ns / 1000.0;
	s->total_ns += ns;
	return 0;
}

static int status_cpu_s(const char *status_path, double *out)
{
	cJSON *doc = NULL;
	const cJSON *v;
	int r = bench_status_doc(status_path, &doc);

	if (r < 0)
		return r;
	v = json_path(doc, "cpu_s");
	r = cJSON_IsNumber(v) ? 0 : -EPROTO;
	if (r == 0)
		*out = v->valuedouble;
	cJSON_Delete(doc);
	return r;
}

static const char usage[] =
	"usage: spillway-bench ring [--json] [--socket PATH] [--rounds N] [--ops N]\n"
	"  --socket PATH  use the spillwayd listening at PATH (status.sock beside it)\n"
	"  --rounds N     rounds, each running every op on the ring, then on the socket (default 20)\n"
	"  --ops N        round trips per op per round (default 2000)\n";

int bench_ring(int argc, char **argv)
{
	struct spw_attach_opts ao = { .size = sizeof(ao), .session = "bench/ring", .region_bytes = 16u << 20,
				      .page_size = 1u << 20 };
	struct samples ring[OP__N] = { 0 }, sock[OP__N] = { 0 };
	struct local_daemon d = { .pid = -1 };
	struct bench_progress pg = { 0 };
	const char *socket_path = NULL;
	char status_path[320];
	int json = 0, rounds = 20, ops = 2000, sp[2] = { -1, -1 }, rc = 1, r;
	bool started = false;
	pthread_t echo;
	spw_client *c = NULL;
	uint32_t tensor;
	double cpu0, cpu1, t0, t1;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--socket") && i + 1 < argc)
			socket_path = argv[++i];
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--ops") && i + 1 < argc)
			ops = atoi(argv[++i]);
		else
			return bench_usage(usage, argv[i]);
	}
	if (rounds < 1 || ops < 1) {
		return bench_usage(usage, NULL);
	}

	if (socket_path) {
		const char *slash = strrchr(socket_path, '/');

		snprintf(status_path, sizeof(status_path), "%.*s/status.sock",
			 slash ? (int)(slash - socket_path) : 1, slash ? socket_path : ".");
	} else {
		local_daemon_locate();
		r = local_daemon_start(&d, bench_config);
		if (r < 0) {
			fprintf(stderr, "bench ring: could not start spillwayd (%s): %s; set SPILLWAYD or pass --socket\n",
				getenv("SPILLWAYD") ? getenv("SPILLWAYD") : "spillwayd from PATH", spw_strerror(r));
			return 1;
		}
		started = true;
		socket_path = d.control;
		snprintf(status_path, sizeof(status_path), "%s", d.status);
	}

	if (spw_client_new(NULL, &c) < 0 || spw_client_connect(c, socket_path) < 0 ||
	    spw_client_attach(c, &ao) < 0 ||
	    spw_tensor_register(c, "bench", ao.page_size, SPW_TENSOR_RESIDENT, &tensor, NULL) < 0) {
		fprintf(stderr, "bench ring: %s\n", c ? spw_client_last_error(c) : "out of memory");
		goto out;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0 ||
	    pthread_create(&echo, NULL, echo_main, &sp[1]) != 0) {
		perror("bench ring: socket baseline");
		goto out;
	}

	/* Warm both paths (page tables, caches, the daemon's poll state). */
	for (int i = 0; i < 1000; i++) {
		if (ring_op(c, OP_NOP, tensor) < 0 || ring_op(c, OP_PIN_UNPIN, tensor) < 0 || socket_round_trip(sp[0]) < 0) {
			fprintf(stderr, "bench ring: warm-up: %s\n", spw_client_last_error(c));
			goto out_echo;
		}
	}

	/* Alternate A (ring) and B (socket) per op, round by round, so drift
	 * during the run lands on both sides alike. */
	bench_progress_init(&pg, "ring", (unsigned)rounds);
	for (int round = 0; round < rounds; round++) {
		bench_progress_step(&pg, "round");
		for (int op = 0; op < OP__N; op++) {
			for (int i = 0; i < ops; i++) {
				uint64_t a = now_ns();

				r = ring_op(c, (enum op)op, tensor);
				if (r < 0 || push(&ring[op], (double)(now_ns() - a)) < 0) {
					fprintf(stderr, "bench ring: %s: %s\n", op_name[op], spw_client_last_error(c));
					goto out_echo;
				}
			}
			for (int i = 0; i < ops; i++) {
				uint64_t a = now_ns();

				if (socket_round_trip(sp[0]) < 0 || push(&sock[op], (double)(now_ns() - a)) < 0) {
					fprintf(stderr, "bench ring: socket baseline failed\n");
					goto out_echo;
				}
			}
		}
	}
	bench_progress_end(&pg);

	for (int op = 0; op < OP__N; op++) {
		double ops_s = (double)ring[op].n / (ring[op].total_ns * 1e-9);
		double p50 = bench_percentile(ring[op].v, ring[op].n, 50.0);
		double p99 = bench_percentile(ring[op].v, ring[op].n, 99.0);
		double s50 = bench_percentile(sock[op].v, sock[op].n, 50.0);

		if (json)
			printf("{\"bench\":\"ring\",\"op\":\"%s\",\"round_trips\":%d,\"samples\":%zu,\"p50_us\":%.3f,"
			       "\"p99_us\":%.3f,\"ops_per_s\":%.0f,\"socket_p50_us\":%.3f,\"ratio_vs_socket\":%.2f}\n",
			       op_name[op], op == OP_PIN_UNPIN ? 2 : 1, ring[op].n, p50, p99, ops_s, s50, s50 / p50);
		else
			printf("%-10s ring p50 %7.3f us  p99 %7.3f us  %9.0f ops/s | socket p50 %7.3f us | %.2fx\n",
			       op_name[op], p50, p99, ops_s, s50, s50 / p50);
	}
	fflush(stdout);

	/* Idle: the session stays attached, the daemon's poll window should
	 * expire and it should sleep on the eventfd. */
	sleep(2);
	t0 = (double)now_ns() * 1e-9;
	if (status_cpu_s(status_path, &cpu0) < 0) {
		fprintf(stderr, "bench ring: status from %s has no cpu_s\n", status_path);
		goto out_echo;
	}
	sleep(2);
	t1 = (double)now_ns() * 1e-9;
	if (status_cpu_s(status_path, &cpu1) < 0) {
		fprintf(stderr, "bench ring: status from %s has no cpu_s\n", status_path);
		goto out_echo;
	}
	if (json)
		printf("{\"bench\":\"ring\",\"idle_daemon_cpu_pct\":%.2f,\"idle_window_s\":%.2f}\n",
		       100.0 * (cpu1 - cpu0) / (t1 - t0), t1 - t0);
	else
		printf("idle daemon cpu: %.2f%% over %.1f s\n", 100.0 * (cpu1 - cpu0) / (t1 - t0), t1 - t0);
	rc = 0;

out_echo:
	bench_progress_end(&pg);
	/* Closing our end makes the echo thread's read fail and return. */
	shutdown(sp[0], SHUT_RDWR);
	pthread_join(echo, NULL);
out:
	if (sp[0] >= 0)
		close(sp[0]);
	if (sp[1] >= 0)
		close(sp[1]);
	if (c && rc == 0)
		spw_client_detach(c);
	c = spw_client_free(c);
	for (int op = 0; op < OP__N; op++) {
		free(ring[op].v);
		free(sock[op].v);
	}
	if (started && local_daemon_stop(&d) != 0)
		fprintf(stderr, "bench ring: spillwayd did not exit cleanly\n");
	return rc;
}
