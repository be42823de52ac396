/* SPDX-License-Identifier: MIT */
/*
 * spillwayctl: the operator's view of spillwayd.
 *
 *   spillwayctl [--socket-dir DIR | --status PATH] status [--json]
 *   spillwayctl [--socket-dir DIR | --status PATH] top [--iterations N] (ctl-top.c)
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>
#include "util/bytes.h"
#include "ctl-progress.h"
#include "ctl-top.h"
#include "ctl-trace.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: spillwayctl [OPTIONS] COMMAND\n"
		"\n"
		"commands:\n"
		"  status          sessions, pool and daemon figures as a table\n"
		"  status --json   the daemon's status document as it sent it\n"
		"  top             a live view, refreshed every second; keys: s or > next sort\n"
		"                  key, < previous, q quit; off a terminal, a plain table a refresh\n"
		"  drop SESSION    end an orphaned persistent session now (its owner or root):\n"
		"                  its memory, tensors and swap are released\n"
		"  checkpoint SESSION DIR\n"
		"                  write the persistent session's state at its next commit point\n"
		"                  into DIR (new; its parent yours); its trainer trains on meanwhile;\n"
		"                  on a terminal a line shows the bytes copied so far\n"
		"  flush SESSION   save the persistent session at its next commit point into the\n"
		"                  daemon's persist.state_dir: what a crash of the daemon keeps\n"
		"  restore SESSION DIR\n"
		"                  a new orphaned persistent session from the checkpoint in DIR:\n"
		"                  the trainer's next persistent attach of SESSION resumes it\n"
		"  trace SESSION [--seconds N] [-o FILE]\n"
		"                  the daemon's disk reads and writes of SESSION for N s (10) as\n"
		"                  Chrome trace JSON (Perfetto), to FILE or stdout\n"
		"\n"
		"options:\n"
		"  --socket-dir DIR   the daemon whose sockets live in DIR (DIR/status.sock)\n"
		"  --status PATH      the daemon's status socket\n"
		"  --json             status: print JSON instead of a table\n"
		"  --iterations N     top: stop after N refreshes (0: until q or a signal)\n"
		"  --sort KEY         top: name, region, read, write or hit%% (default name)\n"
		"  -h, --help         this text\n"
		"  --version          print the version\n"
		"\n"
		"Without --socket-dir or --status, the socket is found like the library finds it:\n"
		"the directory of $SPILLWAY_SOCKET, $XDG_RUNTIME_DIR/spillway, or /run/spillway.\n");
}

/* "1.5 GiB": sizes for people. */
static const cJSON *get(const cJSON *o, const char *key)
{
	return cJSON_GetObjectItemCaseSensitive(o, key);
}

/* Each formatter writes "-" for a missing or mistyped key: the document
 * may come from an older or newer daemon. */
static void fmt_bytes(const cJSON *o, const char *key, char *buf, size_t len)
{
	const cJSON *v = get(o, key);

	if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 1.8e19)
		format_bytes((uint64_t)v->valuedouble, buf, len);
	else
		snprintf(buf, len, "-");
}

static void fmt_num(const cJSON *o, const char *key, char *buf, size_t len)
{
	const cJSON *v = get(o, key);

	if (cJSON_IsNumber(v))
		snprintf(buf, len, "%.0f", v->valuedouble);
	else if (cJSON_IsString(v))
		snprintf(buf, len, "%s", v->valuestring);
	else
		snprintf(buf, len, "-");
}

static void fmt_bool(const cJSON *o, const char *key, char *buf, size_t len)
{
	const cJSON *v = get(o, key);

	if (cJSON_IsBool(v))
		snprintf(buf, len, "%s", cJSON_IsTrue(v) ? "yes" : "no");
	else if (cJSON_IsNumber(v))
		snprintf(buf, len, "%s", v->valuedouble != 0 ? "yes" : "no");
	else
		snprintf(buf, len, "-");
}

static void fmt_str(const cJSON *o, const char *key, char *buf, size_t len)
{
	const cJSON *v = get(o, key);

	snprintf(buf, len, "%s", cJSON_IsString(v) ? v->valuestring : "-");
}

static void fmt_duration(const cJSON *o, const char *key, char *buf, size_t len)
{
	const cJSON *v = get(o, key);
	unsigned long long s;

	if (!cJSON_IsNumber(v) || v->valuedouble < 0) {
		snprintf(buf, len, "-");
		return;
	}
	s = (unsigned long long)v->valuedouble;
	if (s >= 86400)
		snprintf(buf, len, "%llud %02lluh", s / 86400, s / 3600 % 24);
	else if (s >= 3600)
		snprintf(buf, len, "%lluh %02llum", s / 3600, s / 60 % 60);
	else if (s >= 60)
		snprintf(buf, len, "%llum %02llus", s / 60, s % 60);
	else
		snprintf(buf, len, "%llus", s);
}

#define CELL 48

typedef void (*fmt_fn)(const cJSON *o, const char *key, char *buf, size_t len);

/* Prints one line of figures from o: spec lists its keys, space separated,
 * each after a letter for how to show it (s string, n number, b bytes,
 * y yes/no), e.g. "s:path b:used_bytes"; fmt has one %s for each, at most
 * six. Keeps each line's words and its figures side by side. */
static void print_fields(const cJSON *o, const char *spec, const char *fmt)
{
	char cell[6][CELL] = { { 0 } }, key[64];
	int n = 0;

	for (const char *p = spec; *p && n < 6;) {
		fmt_fn f = p[0] == 'b' ? fmt_bytes : p[0] == 'n' ? fmt_num : p[0] == 'y' ? fmt_bool : fmt_str;
		size_t len = strcspn(p + 2, " ");

		snprintf(key, sizeof(key), "%.*s", (int)len, p + 2);
		f(o, key, cell[n++], CELL);
		p += 2 + len;
		p += *p == ' ';
	}
	printf(fmt, cell[0], cell[1], cell[2], cell[3], cell[4], cell[5]);
}

enum col { C_NAME, C_UID, C_PID, C_STATE, C_STEP, C_REGION, C_PAGE, C_SLOTS, C_USED, C_TENSORS,
	   C_PINNED, C_LOCKED, C_HUGE, C_NUMA, C_OPS, C_ERRORS, C__N };

static const char *const col_title[C__N] = {
	"SESSION", "UID", "PID", "STATE", "STEP", "REGION", "PAGE", "SLOTS", "USED", "TENSORS",
	"PINNED", "LOCKED", "HUGE", "NUMA", "OPS", "ERRORS",
};

static void session_row(const cJSON *s, char row[C__N][CELL])
{
	const cJSON *ring = get(s, "ring");

	fmt_str(s, "name", row[C_NAME], CELL);
	fmt_num(s, "uid", row[C_UID], CELL);
	fmt_num(s, "pid", row[C_PID], CELL);
	fmt_str(s, "state", row[C_STATE], CELL);
	if (!strcmp(row[C_STATE], "orphaned")) {
		/* How long until the daemon lets it go. */
		char age[16], left[16];

		fmt_duration(s, "orphaned_s", age, sizeof(age));
		fmt_duration(s, "lease_left_s", left, sizeof(left));
		snprintf(row[C_STATE], CELL, "orphaned %.10s ago, %.10s left", age, left);
	}
	if (cJSON_IsTrue(get(s, "damaged"))) {
		/* Back from a crash with pages whose CRC failed: the status
		 * document's bad_pages names them. */
		char state[CELL];

		snprintf(state, sizeof(state), "%s", row[C_STATE]);
		snprintf(row[C_STATE], CELL, "DAMAGED (%.0f bad pages), %.20s",
			 cJSON_IsNumber(get(s, "bad_pages_total")) ? get(s, "bad_pages_total")->valuedouble : 0.0, state);
	}
	fmt_num(s, "committed_step", row[C_STEP], CELL);
	fmt_bytes(s, "region_bytes", row[C_REGION], CELL);
	fmt_bytes(s, "page_size", row[C_PAGE], CELL);
	fmt_num(s, "slots", row[C_SLOTS], CELL);
	fmt_num(s, "slots_used", row[C_USED], CELL);
	fmt_num(s, "tensors", row[C_TENSORS], CELL);
	fmt_num(s, "pages_pinned", row[C_PINNED], CELL);
	fmt_bool(s, "locked", row[C_LOCKED], CELL);
	fmt_bool(s, "hugepages", row[C_HUGE], CELL);
	fmt_num(s, "numa_node", row[C_NUMA], CELL);
	fmt_num(ring, "ops", row[C_OPS], CELL);
	fmt_num(ring, "errors", row[C_ERRORS], CELL);
}

/* The NVMe tier: the daemon's swap directories and disk ring, then one line
 * per session that has swap, so an operator sees where pages live and
 * whether the prefetcher keeps up (misses) without reading JSON. */
static void print_tier(const cJSON *doc)
{
	const cJSON *swap = get(doc, "swap"), *dirs = get(swap, "dirs"), *uring = get(swap, "uring");
	const cJSON *sessions = get(doc, "sessions"), *s;
	bool header = false;

	if (cJSON_IsArray(dirs) && cJSON_GetArraySize(dirs) > 0) {
		const cJSON *dir;

		printf("\nswap dirs:\n");
		cJSON_ArrayForEach(dir, dirs) {
			print_fields(dir, "s:path b:used_bytes b:max_bytes b:free_bytes",
				     "  %s: %s used of %s, %s free on the filesystem\n");
		}
	}
	if (cJSON_IsObject(uring)) {
		print_fields(uring, "n:queue_depth n:inflight b:read_bytes b:write_bytes n:errors",
			     "io_uring: depth %s, %s in flight, %s read, %s written, %s errors\n");
	}
	if (!cJSON_IsArray(sessions))
		return;
	cJSON_ArrayForEach(s, sessions) {
		const cJSON *t = get(s, "tier"), *pages = get(t, "pages");
		char name[CELL], disk[CELL], st[8][CELL], rd[CELL], wr[CELL], hit[CELL], miss[CELL], ev[CELL], err[CELL];
		static const char *const states[8] = { "zero", "disk", "reading", "clean", "dirty", "writing", "failed", "resident" };

		if (!cJSON_IsObject(t) || !cJSON_IsNumber(get(t, "swap_bytes")) || get(t, "swap_bytes")->valuedouble <= 0)
			continue;
		if (!header) {
			printf("\nNVMe tier by session (pages: zero/disk/reading/clean/dirty/writing/failed/resident):\n");
			header = true;
		}
		fmt_str(s, "name", name, CELL);
		fmt_bytes(t, "bytes_on_disk", disk, CELL);
		for (int i = 0; i < 8; i++)
			fmt_num(pages, states[i], st[i], CELL);
		fmt_num(t, "read_mb_per_s", rd, CELL);
		fmt_num(t, "write_mb_per_s", wr, CELL);
		fmt_num(t, "prefetch_hits", hit, CELL);
		fmt_num(t, "misses", miss, CELL);
		fmt_num(t, "evictions", ev, CELL);
		fmt_num(t, "errors", err, CELL);
		printf("  %s: %s on disk; pages %s/%s/%s/%s/%s/%s/%s/%s; read %s MB/s, write %s MB/s;"
		       " prefetch hits %s, misses %s, evictions %s, errors %s\n",
		       name, disk, st[0], st[1], st[2], st[3], st[4], st[5], st[6], st[7], rd, wr, hit, miss, ev, err);
	}
}

static int print_table(const cJSON *doc)
{
	const cJSON *proto = get(doc, "proto"), *config = get(doc, "config"), *pool = get(doc, "pool");
	const cJSON *sessions = get(doc, "sessions"), *others = get(doc, "others"), *s;
	char a[CELL], b[CELL], c[CELL], d[CELL], e[CELL];
	char (*rows)[C__N][CELL];
	int width[C__N], n = 0, i;

	fmt_str(doc, "version", a, CELL);
	fmt_num(proto, "major", b, CELL);
	fmt_num(proto, "minor", c, CELL);
	fmt_num(doc, "pid", d, CELL);
	fmt_duration(doc, "uptime_s", e, CELL);
	printf("spillwayd %s (protocol %s.%s), pid %s, up %s", a, b, c, d, e);
	s = get(doc, "cpu_s");
	if (cJSON_IsNumber(s))
		printf(", cpu %.2f s", s->valuedouble);
	printf("\n");

	print_fields(config, "s:socket_dir b:page_size n:ring_entries n:poll_us",
		     "config:   sockets in %s, page %s, ring %s entries, poll %s us\n");
	print_fields(pool, "b:used_bytes b:max_bytes b:free_bytes b:locked_bytes b:session_max_bytes",
		     "pool:     %s used of %s, %s free, %s locked; at most %s per session\n");
	print_fields(pool, "y:locked y:hugepages n:numa_node", "          mlocked %s, hugepages %s, numa node %s\n");

	printf("\n");
	if (cJSON_IsArray(sessions))
		n = cJSON_GetArraySize(sessions);
	rows = calloc((size_t)n + 1, sizeof(*rows));
	if (!rows) {
		fprintf(stderr, "spillwayctl: out of memory\n");
		return 1;
	}
	for (i = 0; i < C__N; i++)
		snprintf(rows[0][i], CELL, "%s", col_title[i]);
	i = 1;
	cJSON_ArrayForEach(s, sessions)
		session_row(s, rows[i++]);
	for (int col = 0; col < C__N; col++) {
		width[col] = 0;
		for (i = 0; i <= n; i++) {
			int w = (int)strlen(rows[i][col]);
			width[col] = w > width[col] ? w : width[col];
		}
	}
	if (n == 0) {
		printf("no sessions\n");
	} else {
		for (i = 0; i <= n; i++) {
			for (int col = 0; col < C__N; col++) {
				/* Names and states read left to right, figures
				 * line up on their last digit. */
				bool left = col == C_NAME || col == C_STATE;
				printf(col == C__N - 1 ? (left ? "%-*s" : "%*s") : (left ? "%-*s  " : "%*s  "),
				       width[col], rows[i][col]);
			}
			printf("\n");
		}
	}
	free(rows);

	if (cJSON_IsObject(others)) {
		print_fields(others, "n:sessions b:region_bytes", "\nsessions of other users: %s, holding %s\n");
	}
	print_tier(doc);
	return 0;
}

/* A client connected to the control socket in dir (NULL: the default),
 * for the commands that change something (the status socket only reads).
 * Returns 0, 2 for a path too long (said), or -errno with *c set when a
 * client was made (its last error says why). */
static int control_client(const char *dir, spw_client **c)
{
	char path[4096];
	int r;

	*c = NULL;
	if (dir && (size_t)snprintf(path, sizeof(path), "%s/control.sock", dir) >= sizeof(path)) {
		fprintf(stderr, "spillwayctl: --socket-dir %s: path too long\n", dir);
		return 2;
	}
	r = spw_client_new(NULL, c);
	if (r == 0)
		r = spw_client_connect(*c, dir ? path : NULL);
	return r;
}

/* Ends an orphaned session. */
static int drop_session(const char *dir, const char *name)
{
	spw_client *c;
	int r = control_client(dir, &c);

	if (r == 2)
		return 2;
	if (r == 0)
		r = spw_client_drop(c, name);
	if (r < 0)
		fprintf(stderr, "spillwayctl drop %s: %s\n", name, c ? spw_client_last_error(c) : spw_strerror(r));
	else
		printf("dropped %s: its memory, tensors and swap are released\n", name);
	spw_client_free(c);
	return r < 0;
}

/* checkpoint / restore SESSION DIR, flush SESSION, through the control
 * socket. */
static int checkpoint_cmd(const char *dir, const char *cmd, const char *name, const char *where)
{
	struct spw_checkpoint_result res = { .size = sizeof(res) };
	bool restore = !strcmp(cmd, "restore");
	struct ctl_progress *bar = NULL;
	char a[32], status[4096];
	spw_client *c;
	int r = control_client(dir, &c);

	if (r == 2)
		return 2;
	/* The answer comes at the end: on a terminal, a line says how far. */
	if (r == 0 && (dir ? (size_t)snprintf(status, sizeof(status), "%s/status.sock", dir) < sizeof(status)
			   : spw_socket_path(SPW_SOCKET_STATUS, status, sizeof(status)) == 0))
		bar = ctl_progress_start(status, name, cmd);
	if (r == 0)
		r = restore ? spw_client_restore(c, name, where, 0, &res)
		    : where ? spw_client_checkpoint(c, name, where, &res)
			    : spw_client_flush(c, name, &res);
	ctl_progress_stop(bar, res.bytes, r == 0 ? res.bytes_total : 0);
	if (r < 0) {
		fprintf(stderr, "spillwayctl %s %s: %s\n", cmd, name, c ? spw_client_last_error(c) : spw_strerror(r));
	} else {
		format_bytes(res.bytes, a, sizeof(a));
		if (!where)
			printf("flushed %s at step %llu: %u tensors, %s in %.2f s into persist.state_dir; a crash of "
			       "spillwayd now loses only the steps after it\n", name,
			       (unsigned long long)res.committed_step, res.tensors, a, res.seconds);
		else if (restore)
			printf("restored %s at step %llu: %u tensors, %s in %.2f s, every page checked; orphaned for %u s: "
			       "a persistent attach of %s resumes it\n", name, (unsigned long long)res.committed_step,
			       res.tensors, a, res.seconds, res.lease_s, name);
		else
			printf("checkpoint of %s at step %llu: %u tensors, %s in %.2f s (%.0f MB/s) to %s, after %.2f s "
			       "for the commit point; the trainer committed %llu step%s meanwhile and stalled %.3f s; the "
			       "copy gave the disk to waiting sessions %llu times (%.2f s)\n",
			       name, (unsigned long long)res.committed_step, res.tensors, a, res.seconds,
			       res.seconds > 0 ? (double)res.bytes / res.seconds / 1e6 : 0.0, where, res.wait_seconds,
			       (unsigned long long)res.steps_during_copy, res.steps_during_copy == 1 ? "" : "s",
			       res.stall_seconds, (unsigned long long)res.yields, res.yield_seconds);
	}
	spw_client_free(c);
	return r < 0;
}

int main(int argc, char **argv)
{
	/* One command line for every command; a command refuses the options
	 * of another. */
	static const struct option longopts[] = {
		{ "socket-dir", required_argument, NULL, 'd' },
		{ "status", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "iterations", required_argument, NULL, 'n' },
		{ "sort", required_argument, NULL, 'k' },
		{ "seconds", required_argument, NULL, 'S' },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	const char *dir = NULL, *status = NULL, *cmd, *iterations = NULL, *sort = NULL, *seconds = NULL, *output = NULL;
	char path[4096];
	char *json = NULL;
	bool as_json = false, top;
	cJSON *doc;
	int opt, r;

	while ((opt = getopt_long(argc, argv, "ho:", longopts, NULL)) != -1) {
		switch (opt) {
		case 'S':
			seconds = optarg;
			break;
		case 'o':
			output = optarg;
			break;
		case 'd':
			dir = optarg;
			break;
		case 's':
			status = optarg;
			break;
		case 'j':
			as_json = true;
			break;
		case 'n':
			iterations = optarg;
			break;
		case 'k':
			sort = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("spillwayctl %s\n", SPW_VERSION_STRING);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	cmd = argv[optind++];
	top = !strcmp(cmd, "top");
	if (!strcmp(cmd, "trace")) {
		if (optind + 1 != argc || status || as_json || iterations || sort) {
			fprintf(stderr, "spillwayctl trace: give one SESSION, and no option but --socket-dir, --seconds, -o\n");
			return 2;
		}
		return ctl_trace_main(dir, argv[optind], seconds, output);
	}
	if (seconds || output) {
		fprintf(stderr, "spillwayctl %s: --seconds and -o are options of 'trace'\n", cmd);
		return 2;
	}
	if (!strcmp(cmd, "drop")) {
		if (optind + 1 != argc || status || as_json || iterations || sort) {
			fprintf(stderr, "spillwayctl drop: give one SESSION, and no option but --socket-dir\n");
			return 2;
		}
		return drop_session(dir, argv[optind]);
	}
	if (!strcmp(cmd, "flush")) {
		if (optind + 1 != argc || status || as_json || iterations || sort) {
			fprintf(stderr, "spillwayctl flush: give one SESSION, and no option but --socket-dir\n");
			return 2;
		}
		return checkpoint_cmd(dir, cmd, argv[optind], NULL);
	}
	if (!strcmp(cmd, "checkpoint") || !strcmp(cmd, "restore")) {
		if (optind + 2 != argc || status || as_json || iterations || sort) {
			fprintf(stderr, "spillwayctl %s: give SESSION and DIR, and no option but --socket-dir\n", cmd);
			return 2;
		}
		return checkpoint_cmd(dir, cmd, argv[optind], argv[optind + 1]);
	}
	if (strcmp(cmd, "status") != 0 && !top) {
		fprintf(stderr, "spillwayctl: unknown command '%s'\n", cmd);
		usage(stderr);
		return 2;
	}
	/* getopt_long permutes, so "status --json" was already consumed. */
	if (optind < argc) {
		fprintf(stderr, "spillwayctl: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (top ? as_json : iterations || sort) {
		fprintf(stderr, "spillwayctl %s: %s is an option of '%s'\n", cmd,
			top ? "--json" : iterations ? "--iterations" : "--sort", top ? "status" : "top");
		return 2;
	}
	if (dir && status) {
		fprintf(stderr, "spillwayctl: give --socket-dir or --status, not both\n");
		return 2;
	}
	if (dir) {
		if ((size_t)snprintf(path, sizeof(path), "%s/status.sock", dir) >= sizeof(path)) {
			fprintf(stderr, "spillwayctl: --socket-dir %s: path too long\n", dir);
			return 2;
		}
	} else if (status) {
		snprintf(path, sizeof(path), "%s", status);
	} else if ((r = spw_socket_path(SPW_SOCKET_STATUS, path, sizeof(path))) < 0) {
		fprintf(stderr, "spillwayctl: cannot build the status socket path: %s\n", spw_strerror(r));
		return 1;
	}
	if (top)
		return ctl_top_main(path, iterations, sort);

	r = spw_status_fetch(path, &json);
	if (r == -ENOENT || r == -ECONNREFUSED) {
		fprintf(stderr,
			"spillwayctl: no spillwayd answering at %s (%s); is it running? "
			"('systemctl status spillwayd', or pass --socket-dir DIR)\n",
			path, spw_strerror(r));
		return 1;
	}
	if (r < 0) {
		fprintf(stderr, "spillwayctl: status from %s: %s\n", path, spw_strerror(r));
		return 1;
	}
	doc = cJSON_Parse(json);
	if (!doc || !cJSON_IsObject(doc)) {
		fprintf(stderr, "spillwayctl: the status document from %s is not a JSON object\n", path);
		cJSON_Delete(doc);
		free(json);
		return 1;
	}
	if (as_json) {
		printf("%s\n", json);
		r = 0;
	} else {
		r = print_table(doc);
	}
	cJSON_Delete(doc);
	free(json);
	return r;
}
