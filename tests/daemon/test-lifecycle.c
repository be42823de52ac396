/* SPDX-License-Identifier: MIT */
/*
 * The daemon's life: sd_notify READY/STATUS/WATCHDOG/STOPPING, a client
 * SIGKILLed mid-session has its region released at once (seen in status),
 * an idle daemon with attached sessions uses (next to) no CPU, SIGHUP
 * reloads what it can and survives a bad file, user mode without root or
 * config (sockets under $XDG_RUNTIME_DIR/spillway, mlock refusal naming
 * LimitMEMLOCK), and SIGTERM/SIGINT shut down cleanly with exit 0 (under
 * ASan that includes "no leaks").
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "config.h"
#include "harness.h"
#include "raw.h"
#include "test.h"

#define MiB (1024u * 1024u)

static double status_num(struct spw_test_daemon *d, const char *path)
{
	cJSON *st = raw_status(d->status);
	double v = raw_num(st, path);

	cJSON_Delete(st);
	return v;
}

static void test_killed_client(struct spw_test_daemon *d)
{
	int p[2], st;
	char c;
	pid_t pid;
	cJSON *s;
	bool released = false;

	ASSERT_EQ(pipe(p), 0);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		struct raw_session v;
		int t;

		close(p[0]);
		ASSERT_OK(raw_attach(d->control, "victim/0", 8 * MiB, 1 * MiB, &v));
		t = raw_register(&v, "w", 4 * MiB, NULL);
		ASSERT_GE(t, 0);
		ASSERT_GE(raw_op(&v, SPW_OP_PIN, 0, (uint32_t)t, 2), 0);
		ASSERT_EQ(write(p[1], "k", 1), 1);
		for (;;)
			pause();
	}
	close(p[1]);
	ASSERT_EQ(read(p[0], &c, 1), 1);
	close(p[0]);
	s = raw_status(d->status);
	ASSERT_TRUE(raw_status_session(s, "victim/0") != NULL);
	ASSERT_EQ(raw_num(raw_status_session(s, "victim/0"), "pages_pinned"), 1);
	ASSERT_EQ(raw_num(s, "pool.used_bytes"), 8.0 * MiB);
	cJSON_Delete(s);

	ASSERT_EQ(kill(pid, SIGKILL), 0);
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	for (int waited = 0; waited < 3000 && !released; waited += 10) {
		s = raw_status(d->status);
		released = raw_status_session(s, "victim/0") == NULL && raw_num(s, "pool.used_bytes") == 0 &&
			   raw_num(s, "pool.locked_bytes") == 0;
		cJSON_Delete(s);
		if (!released)
			usleep(10000);
	}
	ASSERT_TRUE(released);
	/* The name is free again. */
	{
		struct raw_session again;
		ASSERT_OK(raw_attach(d->control, "victim/0", 1 * MiB, 0, &again));
		raw_session_close(&again);
	}
}

/* A client that asks for a region and leaves before it is ready: the
 * region work finishes on the threadpool and is released, not leaked. */
static void test_leave_while_attaching(struct spw_test_daemon *d)
{
	bool released = false;

	for (int i = 0; i < 4; i++) {
		int fd = raw_connect_hello(d->control);
		ASSERT_OK(raw_send(fd, "{\"type\":\"attach\",\"session\":\"leaver/0\",\"region_bytes\":67108864}"));
		if (i % 2)
			usleep(1000);
		close(fd);
	}
	for (int waited = 0; waited < 5000 && !released; waited += 10) {
		cJSON *s = raw_status(d->status);
		released = cJSON_GetArraySize(cJSON_GetObjectItem(s, "sessions")) == 0 && raw_num(s, "pool.used_bytes") == 0;
		cJSON_Delete(s);
		if (!released)
			usleep(10000);
	}
	ASSERT_TRUE(released);
}

static void test_idle_cpu(struct spw_test_daemon *d, struct raw_session *s)
{
	double a, b;

	ASSERT_OK(raw_attach(d->control, "idle/0", 4 * MiB, 0, s));
	for (int i = 0; i < 1000; i++)
		ASSERT_EQ(raw_op(s, SPW_OP_NOP, 0, 0, 0), 0);
	usleep(100000); /* well past ring.poll_us: the daemon should be asleep */
	a = status_num(d, "cpu_s");
	usleep(1000000);
	b = status_num(d, "cpu_s");
	printf("idle daemon, one attached session: %.4f s CPU in 1 s\n", b - a);
	/* A polling loop would burn ~1 s; an idle one next to nothing. */
	ASSERT_TRUE(b - a < 0.05);
	/* And it wakes up for the next entry. */
	ASSERT_EQ(raw_op(s, SPW_OP_NOP, 0, 0, 0), 0);
}

static void write_config(struct spw_test_daemon *d, const char *fmt_with_dir)
{
	FILE *f = fopen(d->config, "we");

	ASSERT_TRUE(f != NULL);
	fprintf(f, fmt_with_dir, d->dir);
	ASSERT_EQ(fclose(f), 0);
}

static void test_reload(struct spw_test_daemon *d)
{
	bool seen = false;

	ASSERT_EQ(status_num(d, "config.poll_us"), 50);
	write_config(d, "{\"socket\": {\"dir\": \"%s\", \"mode\": \"0666\"},"
			" \"pool\": {\"max_bytes\": \"512MiB\", \"session_max_bytes\": \"128MiB\", \"require_locked\": false},"
			" \"ring\": {\"poll_us\": 7}, \"log\": {\"level\": \"warn\"}}");
	ASSERT_EQ(kill(d->pid, SIGHUP), 0);
	for (int waited = 0; waited < 3000 && !seen; waited += 10) {
		seen = status_num(d, "config.poll_us") == 7;
		if (!seen)
			usleep(10000);
	}
	ASSERT_TRUE(seen);
	ASSERT_EQ(status_num(d, "pool.max_bytes"), 512.0 * MiB);
	ASSERT_EQ(status_num(d, "pool.session_max_bytes"), 128.0 * MiB);

	/* A broken file is refused and the running configuration stays. */
	write_config(d, "{\"socket\": {\"dir\": \"%s\"}, \"ring\": {\"poll_us\": \"fast\"}}");
	ASSERT_EQ(kill(d->pid, SIGHUP), 0);
	usleep(200000);
	ASSERT_EQ(status_num(d, "config.poll_us"), 7);

	/* socket.dir cannot move while running: the sockets stay put. The
	 * reload shows in poll_us going back to its default (a fixed sleep
	 * before looking is not enough on a loaded machine). */
	write_config(d, "{\"socket\": {\"dir\": \"/tmp\"}, \"pool\": {\"max_bytes\": \"1GiB\", \"session_max_bytes\": \"256MiB\","
			" \"require_locked\": false}, \"log\": {\"level\": \"debug\"}}");
	ASSERT_EQ(kill(d->pid, SIGHUP), 0);
	seen = false;
	for (int waited = 0; waited < 3000 && !seen; waited += 10) {
		seen = status_num(d, "config.poll_us") == 50;
		if (!seen)
			usleep(10000);
	}
	ASSERT_TRUE(seen);
	{
		cJSON *st = raw_status(d->status);
		ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetObjectItem(st, "config"), "socket_dir")->valuestring, d->dir);
		ASSERT_EQ(raw_num(st, "config.poll_us"), 50);
		cJSON_Delete(st);
	}
}

static void test_main_daemon(void)
{
	struct spw_test_daemon d;
	struct raw_session idle;
	char path[128];
	pid_t reader;
	int nfd;

	nfd = raw_notify_listen(path, sizeof(path), &reader);
	setenv("NOTIFY_SOCKET", path, 1);
	setenv("WATCHDOG_USEC", "200000", 1);
	raw_guard(&d);
	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	ASSERT_TRUE(raw_notify_wait(nfd, "READY=1", 5000));
	ASSERT_TRUE(raw_notify_wait(nfd, "WATCHDOG=1", 5000));

	test_killed_client(&d);
	test_leave_while_attaching(&d);
	test_idle_cpu(&d, &idle);
	test_reload(&d);

	/* SIGTERM with a session still attached: detach it, exit 0. */
	{
		pid_t pid = d.pid;
		ASSERT_EQ(spw_test_daemon_stop(&d), 0);
		ASSERT_TRUE(kill(pid, 0) < 0);
	}
	ASSERT_TRUE(raw_wait_eof(idle.ctl, 1000));
	raw_session_close(&idle);
	ASSERT_TRUE(raw_notify_wait(nfd, "STOPPING=1", 2000));
	kill(reader, SIGKILL);
	waitpid(reader, NULL, 0);
	close(nfd);
	unlink(path);
}

static void test_sigint(void)
{
	struct spw_test_daemon d;
	struct raw_session s;
	int st = -1;

	raw_guard(&d);
	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	ASSERT_OK(raw_attach(d.control, "int/0", 1 * MiB, 0, &s));
	ASSERT_EQ(kill(d.pid, SIGINT), 0);
	ASSERT_EQ(waitpid(d.pid, &st, 0), d.pid);
	ASSERT_TRUE(WIFEXITED(st));
	ASSERT_EQ(WEXITSTATUS(st), 0);
	d.pid = -1;
	/* The daemon removed its sockets. */
	ASSERT_TRUE(access(d.control, F_OK) < 0);
	ASSERT_TRUE(access(d.status, F_OK) < 0);
	spw_test_daemon_cleanup(&d);
	raw_session_close(&s);
}

static pid_t spawn_as_nobody(const char *dir, const char *config, const char *control)
{
	static struct spw_test_daemon um;
	const char *bin = getenv("SPILLWAYD");
	pid_t pid;
	int up = 0;

	ASSERT_TRUE(bin != NULL);
	pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		struct rlimit rl = { .rlim_cur = 1 * MiB, .rlim_max = 1 * MiB };
		setrlimit(RLIMIT_MEMLOCK, &rl);
		if (setgid(65534) < 0 || setuid(65534) < 0)
			_exit(99);
		setenv("XDG_RUNTIME_DIR", dir, 1);
		if (config)
			execl(bin, bin, "--config", config, (char *)NULL);
		else
			execl(bin, bin, (char *)NULL);
		_exit(127);
	}
	um.pid = pid;
	raw_guard(&um);
	for (int waited = 0; waited < 10000 && !up; waited += 10) {
		int fd = spw_test_connect(control);
		if (fd >= 0) {
			close(fd);
			up = 1;
		} else {
			usleep(10000);
		}
	}
	ASSERT_TRUE(up);
	return pid;
}

static void stop(pid_t pid)
{
	int st = -1;

	ASSERT_EQ(kill(pid, SIGTERM), 0);
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	ASSERT_TRUE(WIFEXITED(st));
	ASSERT_EQ(WEXITSTATUS(st), 0);
}

static void test_user_mode(void)
{
	char dir[] = "/tmp/spw-xdg-XXXXXX", control[160], status[160], config[160];
	struct raw_session s;
	pid_t pid;
	cJSON *j;
	FILE *f;

	if (access(SPW_DEFAULT_CONFIG, F_OK) == 0) {
		printf("user mode: skipped, %s exists\n", SPW_DEFAULT_CONFIG);
		return;
	}
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	ASSERT_EQ(chown(dir, 65534, 65534), 0);
	ASSERT_EQ(chmod(dir, 0755), 0);
	snprintf(control, sizeof(control), "%s/spillway/control.sock", dir);
	snprintf(status, sizeof(status), "%s/spillway/status.sock", dir);

	/* No root, no config: sockets under $XDG_RUNTIME_DIR/spillway. With
	 * pool.require_locked true (the default) and a 1 MiB RLIMIT_MEMLOCK,
	 * an 8 MiB region cannot be locked: the refusal says how to fix it. */
	pid = spawn_as_nobody(dir, NULL, control);
	ASSERT_EQ(raw_attach(control, "user/0", 8 * MiB, 0, &s) < 0, 1);
	ASSERT_CONTAINS(s.message, "LimitMEMLOCK");
	ASSERT_CONTAINS(s.message, "pool.require_locked");
	j = raw_status(status);
	ASSERT_EQ(raw_num(j, "pool.used_bytes"), 0);
	ASSERT_CONTAINS(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "config"), "socket_dir")->valuestring, dir);
	cJSON_Delete(j);
	stop(pid);

	/* pool.require_locked false: the attach goes through and status says
	 * the region is not locked. */
	snprintf(config, sizeof(config), "%s/spillwayd.json", dir);
	f = fopen(config, "we");
	ASSERT_TRUE(f != NULL);
	fprintf(f, "{\"socket\": {\"mode\": \"0666\"}, \"pool\": {\"max_bytes\": \"64MiB\", \"require_locked\": false}}");
	ASSERT_EQ(fclose(f), 0);
	pid = spawn_as_nobody(dir, config, control);
	ASSERT_OK(raw_attach(control, "user/1", 8 * MiB, 0, &s));
	j = raw_status(status);
	ASSERT_TRUE(cJSON_IsFalse(cJSON_GetObjectItem(raw_status_session(j, "user/1"), "locked")));
	/* unlocked, but prefaulted: the attach progress ends at the region */
	ASSERT_EQ(raw_num(raw_status_session(j, "user/1"), "region_ready_bytes"), 8.0 * MiB);
	ASSERT_TRUE(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "pool"), "locked")));
	ASSERT_EQ(raw_num(j, "pool.used_bytes"), 8.0 * MiB);
	ASSERT_EQ(raw_num(j, "pool.locked_bytes"), 0);
	cJSON_Delete(j);
	raw_session_close(&s);
	stop(pid);
	{
		char cmd[200];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		ASSERT_EQ(system(cmd), 0);
	}
}

int main(void)
{
	test_main_daemon();
	test_sigint();
	if (geteuid() == 0)
		test_user_mode();
	return 0;
}
