/* SPDX-License-Identifier: MIT */
/*
 * The self-contained sd_notify protocol (used when libsystemd is absent):
 * one datagram to $NOTIFY_SOCKET, path or abstract; silence without it;
 * WATCHDOG_USEC honoured only for our pid.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "notify.h"
#include "test.h"

static int bind_dgram(const char *path, bool abstract)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t len;
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	ASSERT_OK(fd);
	strcpy(sa.sun_path, path);
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path) + (abstract ? 0 : 1));
	if (abstract)
		sa.sun_path[0] = '\0';
	ASSERT_EQ(bind(fd, (struct sockaddr *)&sa, len), 0);
	return fd;
}

static void expect(int fd, const char *want)
{
	char buf[256];
	ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);

	ASSERT_GT(n, 0);
	buf[n] = '\0';
	ASSERT_STREQ(buf, want);
}

int main(void)
{
	char path[128], abs[64], pid[32];
	int fd;

	unsetenv("NOTIFY_SOCKET");
	ASSERT_EQ(notify_raw_send("READY=1"), 0);

	snprintf(path, sizeof(path), "/tmp/spw-notify-%d.sock", (int)getpid());
	unlink(path);
	fd = bind_dgram(path, false);
	setenv("NOTIFY_SOCKET", path, 1);
	ASSERT_EQ(notify_raw_send("READY=1\nSTATUS=ok"), 1);
	expect(fd, "READY=1\nSTATUS=ok");
	close(fd);
	unlink(path);

	snprintf(abs, sizeof(abs), "@spw-notify-%d", (int)getpid());
	fd = bind_dgram(abs, true);
	setenv("NOTIFY_SOCKET", abs, 1);
	ASSERT_EQ(notify_raw_send("WATCHDOG=1"), 1);
	expect(fd, "WATCHDOG=1");
	close(fd);

	setenv("NOTIFY_SOCKET", "relative/path", 1);
	ASSERT_EQ(notify_raw_send("READY=1"), -EINVAL);
	unsetenv("NOTIFY_SOCKET");

	unsetenv("WATCHDOG_PID");
	unsetenv("WATCHDOG_USEC");
	ASSERT_UEQ(notify_watchdog_usec(), 0);
	setenv("WATCHDOG_USEC", "2000000", 1);
	ASSERT_UEQ(notify_watchdog_usec(), 2000000);
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	setenv("WATCHDOG_PID", pid, 1);
	ASSERT_UEQ(notify_watchdog_usec(), 2000000);
	setenv("WATCHDOG_PID", "1", 1);
	ASSERT_UEQ(notify_watchdog_usec(), 0);
	unsetenv("WATCHDOG_PID");
	setenv("WATCHDOG_USEC", "soon", 1);
	ASSERT_UEQ(notify_watchdog_usec(), 0);
	return 0;
}
