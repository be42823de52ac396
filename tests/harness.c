/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "harness.h"

const char spw_test_default_config[] =
	"{\n"
	"  \"socket\": { \"dir\": \"@DIR@\", \"mode\": \"0666\" },\n"
	"  \"pool\": { \"max_bytes\": \"1GiB\", \"session_max_bytes\": \"256MiB\", \"require_locked\": false },\n"
	"  \"log\": { \"level\": \"debug\" }\n"
	"}\n";

static int write_config(struct spw_test_daemon *d, const char *json)
{
	FILE *f;
	const char *p;

	snprintf(d->config, sizeof(d->config), "%s/spillwayd.json", d->dir);
	f = fopen(d->config, "we");
	if (!f)
		return -errno;
	for (p = json; *p;) {
		if (!strncmp(p, "@DIR@", 5)) {
			fputs(d->dir, f);
			p += 5;
		} else {
			fputc(*p++, f);
		}
	}
	return fclose(f) == 0 ? 0 : -errno;
}

static int prepare(struct spw_test_daemon *d, const char *json)
{
	const char *tmp = getenv("TMPDIR");

	memset(d, 0, sizeof(*d));
	d->pid = -1;
	snprintf(d->dir, sizeof(d->dir), "%s/spw-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(d->dir))
		return -errno;
	chmod(d->dir, 0755);
	snprintf(d->control, sizeof(d->control), "%s/control.sock", d->dir);
	snprintf(d->status, sizeof(d->status), "%s/status.sock", d->dir);
	return write_config(d, json ? json : spw_test_default_config);
}

static pid_t spawn(struct spw_test_daemon *d, const char *const *extra)
{
	const char *bin = getenv("SPILLWAYD");
	const char *argv[16] = { 0 };
	pid_t pid, parent = getpid();
	int n = 0;

	if (!bin || !*bin)
		bin = "spillwayd";
	argv[n++] = bin;
	argv[n++] = "--config";
	argv[n++] = d->config;
	for (; extra && *extra && n < 15; extra++)
		argv[n++] = *extra;
	pid = fork();
	if (pid == 0) {
		/* A test that fails aborts; its daemon must not live on holding
		 * the test's stdout/stderr, or meson waits for the timeout. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(127);
		execvp(bin, (char *const *)argv);
		fprintf(stderr, "harness: exec %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	return pid;
}

static int wait_status(pid_t pid, int timeout_ms)
{
	int st;

	for (int waited = 0; waited <= timeout_ms; waited += 10) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (r < 0)
			return -errno;
		usleep(10000);
	}
	return -ETIMEDOUT;
}

int spw_test_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

static bool status_answers(const char *path)
{
	char buf[4096];
	ssize_t n;
	int fd = spw_test_connect(path);
	struct timeval tv = { .tv_sec = 2 };

	if (fd < 0)
		return false;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	n = read(fd, buf, sizeof(buf));
	close(fd);
	return n > 0;
}

int spw_test_daemon_start(struct spw_test_daemon *d, const char *config_json)
{
	int r = prepare(d, config_json);

	if (r < 0)
		return r;
	d->pid = spawn(d, NULL);
	if (d->pid < 0)
		return -errno;
	for (int waited = 0; waited < 10000; waited += 10) {
		int fd = spw_test_connect(d->control);
		if (fd >= 0) {
			close(fd);
			/* The kernel accepts on a listening socket before the
			 * daemon's loop runs; a status document comes only from
			 * the loop, so after one the start-up (stale swap files
			 * removed, warnings logged) is over. */
			if (status_answers(d->status))
				return 0;
		}
		if (waitpid(d->pid, NULL, WNOHANG) == d->pid) {
			d->pid = -1;
			return -ECHILD;
		}
		usleep(10000);
	}
	spw_test_daemon_kill(d);
	return -ETIMEDOUT;
}

int spw_test_daemon_run_to_exit(struct spw_test_daemon *d, const char *config_json,
				const char *const *extra_args)
{
	int r = prepare(d, config_json);

	if (r < 0)
		return r;
	d->pid = spawn(d, extra_args);
	if (d->pid < 0)
		return -errno;
	r = wait_status(d->pid, 10000);
	if (r == -ETIMEDOUT)
		spw_test_daemon_kill(d);
	d->pid = -1;
	spw_test_daemon_cleanup(d);
	return r;
}

int spw_test_daemon_stop(struct spw_test_daemon *d)
{
	int r;

	if (d->pid <= 0)
		return -ECHILD;
	kill(d->pid, SIGTERM);
	r = wait_status(d->pid, 10000);
	if (r == -ETIMEDOUT)
		spw_test_daemon_kill(d);
	d->pid = -1;
	spw_test_daemon_cleanup(d);
	return r;
}

void spw_test_daemon_kill(struct spw_test_daemon *d)
{
	if (d->pid > 0) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
	}
	d->pid = -1;
}

void spw_test_daemon_cleanup(struct spw_test_daemon *d)
{
	char cmd[400];

	if (!d->dir[0])
		return;
	/* The directory holds only what the daemon and this harness made. */
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "harness: could not remove %s\n", d->dir);
	d->dir[0] = '\0';
}
