/* SPDX-License-Identifier: MIT */
/*
 * spillway-bench NAME ... --plot OUT.png: the bench runs as with --json,
 * its lines pass through to stdout as they come and are kept; then
 * bench/plot.py (under /usr/bin/python3, or $SPILLWAY_PYTHON) draws them
 * into OUT.png. The script is asked first whether it can draw NAME here
 * (known bench, matplotlib importable), so a long run never ends in a
 * missing package. It is found through $SPILLWAY_BENCH_PLOT, beside this
 * executable (a build tree, where meson copies it) or where meson installs
 * it (<datadir>/spillway/plot.py).
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "bench.h"

/* Runs python with args (NULL-terminated, args[0] ignored) and returns its
 * exit status, or 1 when it could not run. */
static int run_python(const char *python, char **args)
{
	int st = 0;
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		args[0] = (char *)python;
		execv(python, args);
		fprintf(stderr, "spillway-bench: cannot run %s: %s (install python3, or set SPILLWAY_PYTHON)\n", python,
			strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return 1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

/* Writes all of buf to fd; returns 0 or -errno. */
static int write_all(int fd, const char *buf, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, buf, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		buf += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Runs fn in a child with its stdout into a pipe; copies what comes to
 * our stdout and to keep_fd. Returns the child's exit status. */
static int run_teed(bench_fn fn, int argc, char **argv, int keep_fd)
{
	char buf[4096];
	int p[2], st = 0, failed = 0;
	pid_t pid;

	fflush(stdout);
	if (pipe(p) < 0)
		return 1;
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return 1;
	}
	if (pid == 0) {
		close(p[0]);
		if (dup2(p[1], STDOUT_FILENO) < 0)
			_exit(1);
		close(p[1]);
		exit(fn(argc, argv)); /* exit: stdio flushes into the pipe */
	}
	close(p[1]);
	for (;;) {
		ssize_t n = read(p[0], buf, sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (write_all(STDOUT_FILENO, buf, (size_t)n) < 0 || write_all(keep_fd, buf, (size_t)n) < 0)
			failed = 1;
	}
	close(p[0]);
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return 1;
	if (failed) {
		fprintf(stderr, "spillway-bench: could not keep the bench's output: %s\n", strerror(errno));
		return 1;
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

int bench_plotted(const char *name, bench_fn fn, int argc, char **argv, const char *out)
{
	char dir[PATH_MAX], script[PATH_MAX + 16], tmp[] = "/tmp/spw-bench-plot-XXXXXX";
	const char *python = getenv("SPILLWAY_PYTHON"), *s = getenv("SPILLWAY_BENCH_PLOT");
	char **args = NULL;
	bool json = false;
	int n = 0, fd = -1, r = 1;

	bench_exe_dir(dir, sizeof(dir));
	if (!s || !*s) {
		snprintf(script, sizeof(script), "%s/plot.py", dir);
		s = dir[0] && access(script, R_OK) == 0 ? script : SPW_BENCH_PLOT_SCRIPT;
	}
	if (access(s, R_OK) < 0) {
		fprintf(stderr, "spillway-bench --plot: %s: %s (set SPILLWAY_BENCH_PLOT to bench/plot.py)\n", s,
			strerror(errno));
		return 1;
	}
	if (!python || !*python)
		python = "/usr/bin/python3";
	{
		char *can[] = { NULL, (char *)s, "--can", (char *)name, NULL };

		if ((r = run_python(python, can)) != 0)
			return 2;
	}
	/* The bench's own arguments, less --plot OUT, with --json. */
	args = calloc((size_t)argc + 2, sizeof(*args));
	if (!args)
		return 1;
	for (int i = 0; i < argc; i++) {
		if (i > 0 && !strcmp(argv[i], "--plot")) {
			i++;
			continue;
		}
		json |= i > 0 && !strcmp(argv[i], "--json");
		args[n++] = argv[i];
	}
	if (!json)
		args[n++] = "--json";
	fd = mkstemp(tmp);
	if (fd < 0) {
		fprintf(stderr, "spillway-bench --plot: %s: %s\n", tmp, strerror(errno));
		free(args);
		return 1;
	}
	r = run_teed(fn, n, args, fd);
	close(fd);
	if (r == 0) {
		char *draw[] = { NULL, (char *)s, "--out", (char *)out, tmp, NULL };

		r = run_python(python, draw);
	}
	unlink(tmp);
	free(args);
	return r;
}
