/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "config.h"
#include "notify.h"

#if SPW_HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

int notify_raw_send(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t salen;
	size_t n;
	ssize_t w;
	int fd, r;

	if (!path || !*path)
		return 0;
	n = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || n >= sizeof(sa.sun_path))
		return -EINVAL;
	memcpy(sa.sun_path, path, n);
	if (path[0] == '@')
		sa.sun_path[0] = '\0'; /* abstract namespace */
	salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '@' ? 0 : 1));
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	w = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
	r = w < 0 ? -errno : 1;
	close(fd);
	return r;
}

int notify_send(const char *state)
{
#if SPW_HAVE_LIBSYSTEMD
	return sd_notify(0, state);
#else
	return notify_raw_send(state);
#endif
}

uint64_t notify_watchdog_usec(void)
{
	const char *us = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
	unsigned long long v;
	char *end;

	if (!us || !*us)
		return 0;
	if (pid && *pid) {
		errno = 0;
		v = strtoull(pid, &end, 10);
		if (errno || *end || v != (unsigned long long)getpid())
			return 0;
	}
	errno = 0;
	v = strtoull(us, &end, 10);
	if (errno || *end || v == 0)
		return 0;
	return v;
}
