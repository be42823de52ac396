/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>

#include "util/fdio.h"
#include "util/localdaemon.h"
#include "util/unixsock.h"

#define WAIT_MS 10000

const char local_daemon_default_config[] =
	"{\n"
	"  \"socket\": { \"dir\": \"@DIR@\", \"mode\": \"0666\" },\n"
	"  \"pool\": { \"max_bytes\": \"1GiB\", \"session_max_bytes\": \"256MiB\", \"require_locked\": false },\n"
	"  \"log\": { \"level\": \"debug\" }\n"
	"}\n";

static int write_config(struct local_daemon *d, const char *json)
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

/* Whether files in dir can be opened O_DIRECT (configs put swap in @DIR@:
 * ramfs, and tmpfs before Linux 6.6, refuse it). */
static bool takes_direct(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r;

	if (fd < 0)
		return true; /* not this question's to answer */
	r = fd_dir_takes_direct(fd);
	close(fd);
	return r != 0;
}

/* The temporary directory: under $TMPDIR, else /tmp, else /var/tmp, the
 * first whose filesystem takes O_DIRECT (the first of them when none does,
 * and the daemon says why swap cannot work there). */
static int make_dir(struct local_daemon *d)
{
	const char *tmp = getenv("TMPDIR"), *bases[] = { tmp && *tmp ? tmp : "/tmp", "/tmp", "/var/tmp" };

	for (unsigned i = 0; i < sizeof(bases) / sizeof(bases[0]); i++) {
		if (i && !strcmp(bases[i], bases[i - 1]))
			continue; /* no TMPDIR: /tmp was the first */
		snprintf(d->dir, sizeof(d->dir), "%s/spw-test-XXXXXX", bases[i]);
		if (!mkdtemp(d->dir))
			continue;
		if (takes_direct(d->dir))
			return 0;
		rmdir(d->dir);
	}
	snprintf(d->dir, sizeof(d->dir), "%s/spw-test-XXXXXX", bases[0]);
	return mkdtemp(d->dir) ? 0 : -errno;
}

static int prepare(struct local_daemon *d, const char *json)
{
	int r;

	memset(d, 0, sizeof(*d));
	d->pid = -1;
	if ((r = make_dir(d)) < 0)
		return r;
	chmod(d->dir, 0755);
	snprintf(d->control, sizeof(d->control), "%s/control.sock", d->dir);
	snprintf(d->status, sizeof(d->status), "%s/status.sock", d->dir);
	return write_config(d, json ? json : local_daemon_default_config);
}

static pid_t spawn(struct local_daemon *d, const char *const *extra)
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
		fprintf(stderr, "local daemon: exec %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	return pid;
}

/* prepare() and spawn(): 0 with d->pid set, or a negative errno. */
static int launch(struct local_daemon *d, const char *json, const char *const *extra)
{
	int r = prepare(d, json);

	if (r < 0)
		return r;
	d->pid = spawn(d, extra);
	return d->pid < 0 ? -errno : 0;
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

/* Waits for the daemon to exit (killing it after WAIT_MS), then removes
 * its directory; returns what wait_status() did. */
static int reap(struct local_daemon *d)
{
	int r = wait_status(d->pid, WAIT_MS);

	if (r == -ETIMEDOUT)
		local_daemon_kill(d);
	d->pid = -1;
	local_daemon_cleanup(d);
	return r;
}

/* True once a status document (any bytes) comes from path within 2 s. */
static bool status_answers(const char *path)
{
	struct timeval tv = { .tv_sec = 2 };
	char buf[4096];
	ssize_t n;
	int fd = unix_connect(path);

	if (fd < 0)
		return false;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	n = read(fd, buf, sizeof(buf));
	close(fd);
	return n > 0;
}

int local_daemon_start(struct local_daemon *d, const char *config_json)
{
	int r = launch(d, config_json, NULL);

	if (r < 0)
		return r;
	for (int waited = 0; waited < WAIT_MS; waited += 10) {
		int fd = unix_connect(d->control);
		if (fd >= 0) {
			close(fd);
			/* A listening socket accepts before the daemon's loop
			 * runs; only the loop writes a status document, so one
			 * means start-up (stale swap files removed, warnings
			 * logged) is over. */
			if (status_answers(d->status))
				return 0;
		}
		if (waitpid(d->pid, NULL, WNOHANG) == d->pid) {
			d->pid = -1;
			return -ECHILD;
		}
		usleep(10000);
	}
	local_daemon_kill(d);
	return -ETIMEDOUT;
}

int local_daemon_run_to_exit(struct local_daemon *d, const char *config_json, const char *const *extra_args)
{
	int r = launch(d, config_json, extra_args);

	return r < 0 ? r : reap(d);
}

int local_daemon_stop(struct local_daemon *d)
{
	if (d->pid <= 0)
		return -ECHILD;
	kill(d->pid, SIGTERM);
	return reap(d);
}

void local_daemon_kill(struct local_daemon *d)
{
	if (d->pid > 0) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
	}
	d->pid = -1;
}

void local_daemon_cleanup(struct local_daemon *d)
{
	char cmd[400];

	if (!d->dir[0])
		return;
	/* The directory holds only what the daemon and this code made. */
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "local daemon: could not remove %s\n", d->dir);
	d->dir[0] = '\0';
}

void local_daemon_locate(void)
{
	static const char *const beside[] = { "../daemon/spillwayd", "../../daemon/spillwayd",
					      "../sbin/spillwayd" };
	char exe[PATH_MAX], path[PATH_MAX + 32];
	ssize_t n;
	char *slash;

	if (getenv("SPILLWAYD"))
		return;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return;
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (!slash)
		return;
	*slash = '\0';
	for (size_t i = 0; i < sizeof(beside) / sizeof(beside[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", exe, beside[i]);
		if (access(path, X_OK) == 0) {
			setenv("SPILLWAYD", path, 1);
			return;
		}
	}
}
