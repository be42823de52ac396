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

/* Process CPU time (user + system) in seconds, for this process. */
double bench_cpu_s(void);

#endif
