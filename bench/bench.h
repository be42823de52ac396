/* SPDX-License-Identifier: MIT */
/*
 * bench/bench.h: shared helpers for spillway-bench subcommands.
 *
 * A benchmark prints one JSON object per result line on stdout (with
 * --json) and human text otherwise. Every figure is compared against a
 * baseline measured in the same run, alternating A and B, because the
 * machines we run on drift by tens of percent between runs.
 */
#ifndef SPW_BENCH_H
#define SPW_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* now_ns(): the benchmarks' clock, the one the library's stage timings use. */
#include "util/clock.h"

/* A subcommand: argv[0] is its name; returns a process exit code. */
typedef int (*bench_fn)(int argc, char **argv);

int bench_adam(int argc, char **argv);
int bench_ring(int argc, char **argv);
int bench_swap(int argc, char **argv);
int bench_pipeline(int argc, char **argv);
int bench_tenants(int argc, char **argv);
int bench_resume(int argc, char **argv);
int bench_metrics(int argc, char **argv);
int bench_checkpoint(int argc, char **argv);

/* Runs bench name (fn) as with --json, its lines passed through to stdout,
 * then bench/plot.py on them, drawing out (a PNG). Returns an exit code:
 * the bench's when it failed, 2 when the script cannot draw name here
 * (it says why), else the script's. bench-plot.c. */
int bench_plotted(const char *name, bench_fn fn, int argc, char **argv, const char *out);

/* The directory this executable is in, or "" when /proc/self/exe is unreadable. */
void bench_exe_dir(char *dir, size_t size);

/* Sorts v in place and returns its median / p-th percentile (0..100). */
double bench_median(double *v, size_t n);
double bench_percentile(double *v, size_t n, double p);

/* What a subcommand returns when it cannot run as asked: for arg
 * "--help", usage printed to stdout and 0; otherwise (arg may be NULL)
 * usage printed to stderr and 2. */
int bench_usage(const char *usage, const char *arg);

/* The daemon's status document from status_path, parsed; the caller
 * cJSON_Delete()s it. Returns 0 or a negative errno (-EPROTO when it is
 * not JSON). */
struct cJSON;
int bench_status_doc(const char *status_path, struct cJSON **ret);
/* The session's object in a status document, or NULL. */
const struct cJSON *bench_status_session(const struct cJSON *doc, const char *session);

/*
 * Progress for a person waiting at a terminal: "pipeline: step 12/40" on
 * stderr, redrawn in place at most ten times a second and always at the
 * last one, and only when stderr is a terminal, so neither --json output
 * on stdout nor a log file ever holds it. bench_progress_end() clears the
 * line; every call accepts NULL and an unused (off) progress.
 */
struct bench_progress {
	const char *name;
	bool on;
	unsigned done, total;
	uint64_t drawn_ns;
};

void bench_progress_init(struct bench_progress *p, const char *name, unsigned total);
void bench_progress_step(struct bench_progress *p, const char *what);
void bench_progress_end(struct bench_progress *p);

/* Process CPU time (user + system) in seconds, for this process. */
double bench_cpu_s(void);

#endif
