/* SPDX-License-Identifier: MIT */
/*
 * spillway-bench metrics: how long a Prometheus scrape of GET /metrics
 * takes with many sessions attached (issue 12's goal: under 1 ms with 64
 * sessions), against a fetch of the status document from the same daemon
 * in the same run (the same figures as JSON), alternating scrape and
 * fetch. Each time is a scraper's: connect, request, the whole answer read.
 *
 *   spillway-bench metrics [--json] [--sessions N] [--rounds N]
 *
 * It starts its own spillwayd (metrics.listen on a unix socket in the
 * daemon's directory) and attaches N sessions, each with two resident
 * tensors it pins and unpins once, so every per-session series has a
 * value.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <spillway/spillway.h>

#include "bench.h"
#include "util/localdaemon.h"

#define MAX_SESSIONS 256
#define REGION (2u << 20)
#define PAGE (256u << 10)

static const char bench_config[] =
	"{\n"
	"  \"socket\": { \"dir\": \"@DIR@\", \"mode\": \"0600\" },\n"
	"  \"pool\": { \"max_bytes\": \"1GiB\", \"session_max_bytes\": \"64MiB\", \"require_locked\": false },\n"
	"  \"limits\": { \"sessions_per_uid\": 512 },\n"
	"  \"metrics\": { \"listen\": \"@DIR@/metrics.sock\" },\n"
	"  \"log\": { \"level\": \"warn\" }\n"
	"}\n";

/* One GET /metrics over the unix socket at path: the answer's bytes (all
 * of it, headers too), or a negative errno. */
static long scrape(const char *path)
{
	static const char req[] = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
	static char buf[1 << 16];
	char status[12] = "";
	long total = 0;
	ssize_t n;
	int fd = unix_connect(path);

	if (fd < 0)
		return fd;
	if (write(fd, req, sizeof(req) - 1) != (ssize_t)sizeof(req) - 1) {
		close(fd);
		return -EIO;
	}
	/* Connection: close, so the answer ends where the stream does. */
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		if (total < (long)sizeof(status))
			memcpy(status + total, buf, (size_t)n < sizeof(status) - (size_t)total ? (size_t)n
											   : sizeof(status) - (size_t)total);
		total += n;
	}
	close(fd);
	if (n < 0)
		return -errno;
	return total >= 12 && !memcmp(status, "HTTP/1.1 200", 12) ? total : -EPROTO;
}

/* One session with two tensors, each page pinned and unpinned once. */
static int attach_one(const char *control, unsigned i, spw_client **ret)
{
	char name[64];
	struct spw_attach_opts a = { .size = sizeof(a), .session = name, .region_bytes = REGION, .page_size = PAGE };
	spw_client *c;
	uint32_t t;
	int r;

	snprintf(name, sizeof(name), "bench/metrics-%u", i);
	if ((r = spw_client_new(NULL, &c)) < 0)
		return r;
	if ((r = spw_client_connect(c, control)) < 0 || (r = spw_client_attach(c, &a)) < 0)
		goto fail;
	for (unsigned k = 0; k < 2; k++) {
		char tn[16];

		snprintf(tn, sizeof(tn), "w%u", k);
		if ((r = spw_tensor_register(c, tn, 2 * PAGE, SPW_TENSOR_RESIDENT, &t, NULL)) < 0)
			goto fail;
		for (uint32_t p = 0; p < 2; p++)
			if ((r = spw_pin(c, t, p, NULL)) < 0 || (r = spw_unpin(c, t, p, SPW_DIRTY)) < 0)
				goto fail;
	}
	*ret = c;
	return 0;
fail:
	fprintf(stderr, "spillway-bench metrics: session %s: %s\n", name, spw_client_last_error(c));
	spw_client_free(c);
	return r;
}

static const char usage[] =
	"usage: spillway-bench metrics [--json] [--sessions N] [--rounds N]\n"
	"  --sessions N  sessions attached while scraping (default 64, at most 256)\n"
	"  --rounds N    scrapes, each followed by a status fetch (default 200)\n";

int bench_metrics(int argc, char **argv)
{
	struct local_daemon d = { .pid = -1 };
	unsigned nsess = 64, rounds = 200, attached = 0;
	spw_client *c[MAX_SESSIONS];
	double *scr = NULL, *sta = NULL, scrape_p50, scrape_p99, status_p50;
	char path[400];
	long bytes = 0;
	bool json = false;
	int r, rc = 1;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = true;
		else if (!strcmp(argv[i], "--sessions") && i + 1 < argc)
			nsess = (unsigned)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = (unsigned)strtoul(argv[++i], NULL, 10);
		else
			return bench_usage(usage, argv[i]);
	}
	if (nsess == 0 || nsess > MAX_SESSIONS || rounds == 0 || rounds > 1000000)
		return bench_usage(usage, NULL);
	scr = calloc(rounds, sizeof(*scr));
	sta = calloc(rounds, sizeof(*sta));
	local_daemon_locate();
	if (!scr || !sta || (r = local_daemon_start(&d, bench_config)) < 0) {
		fprintf(stderr, "spillway-bench metrics: cannot start spillwayd\n");
		goto out;
	}
	snprintf(path, sizeof(path), "%s/metrics.sock", d.dir);
	for (; attached < nsess; attached++)
		if (attach_one(d.control, attached, &c[attached]) < 0)
			goto out;
	/* One untimed round: first-touch costs are not a scrape's. */
	if ((bytes = scrape(path)) < 0) {
		fprintf(stderr, "spillway-bench metrics: GET /metrics at %s: %s\n", path, strerror((int)-bytes));
		goto out;
	}
	for (unsigned i = 0; i < rounds; i++) {
		uint64_t t0 = now_ns(), t1, t2;
		long b = scrape(path);
		char *doc = NULL;

		t1 = now_ns();
		r = spw_status_fetch(d.status, &doc);
		t2 = now_ns();
		free(doc);
		if (b < 0 || r < 0) {
			fprintf(stderr, "spillway-bench metrics: round %u: %s\n", i, strerror(b < 0 ? (int)-b : -r));
			goto out;
		}
		bytes = b;
		scr[i] = (double)(t1 - t0) / 1e6;
		sta[i] = (double)(t2 - t1) / 1e6;
	}
	scrape_p99 = bench_percentile(scr, rounds, 99.0);
	scrape_p50 = bench_median(scr, rounds);
	status_p50 = bench_median(sta, rounds);
	if (json)
		printf("{\"bench\":\"metrics\",\"sessions\":%u,\"rounds\":%u,\"scrape_bytes\":%ld,\"scrape_ms\":%.4f,"
		       "\"scrape_p99_ms\":%.4f,\"status_ms\":%.4f,\"ratio_vs_status\":%.3f,\"goal_ms\":1.0}\n",
		       nsess, rounds, bytes, scrape_p50, scrape_p99, status_p50, scrape_p50 / status_p50);
	else
		printf("GET /metrics with %u sessions: %.3f ms (p99 %.3f ms, %ld bytes); status document %.3f ms\n",
		       nsess, scrape_p50, scrape_p99, bytes, status_p50);
	rc = 0;
out:
	while (attached > 0)
		spw_client_free(c[--attached]);
	if (d.pid > 0 && local_daemon_stop(&d) != 0 && rc == 0)
		rc = 1;
	free(scr);
	free(sta);
	return rc;
}
