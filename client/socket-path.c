/* SPDX-License-Identifier: MIT */
/*
 * socket-path.c: where spillwayd's sockets are (spw_socket_path):
 * $SPILLWAY_SOCKET, else $XDG_RUNTIME_DIR/spillway when it exists, else
 * /run/spillway.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "client-private.h"

static int socket_dir(char *buf, size_t len)
{
	const char *env = getenv("SPILLWAY_SOCKET");
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	struct stat st;
	int n;

	if (env && *env) {
		const char *slash = strrchr(env, '/');

		if (!slash)
			n = snprintf(buf, len, ".");
		else if (slash == env)
			n = snprintf(buf, len, "/");
		else
			n = snprintf(buf, len, "%.*s", (int)(slash - env), env);
	} else {
		n = -1;
		if (xdg && *xdg) {
			n = snprintf(buf, len, "%s/spillway", xdg);
			if (n >= 0 && (size_t)n < len && (stat(buf, &st) < 0 || !S_ISDIR(st.st_mode)))
				n = -1;
		}
		if (n < 0)
			n = snprintf(buf, len, "/run/spillway");
	}
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	return n;
}

SPW_EXPORT int spw_socket_path(enum spw_socket_kind kind, char *buf, size_t len)
{
	const char *env = getenv("SPILLWAY_SOCKET");
	char dir[PATH_MAX];
	int n;

	if (!buf || (kind != SPW_SOCKET_CONTROL && kind != SPW_SOCKET_STATUS))
		return -EINVAL;
	if (kind == SPW_SOCKET_CONTROL && env && *env) {
		n = snprintf(buf, len, "%s", env);
	} else {
		n = socket_dir(dir, sizeof(dir));
		if (n < 0)
			return n;
		n = snprintf(buf, len, "%s/%s", dir, kind == SPW_SOCKET_CONTROL ? "control.sock" : "status.sock");
	}
	if (n < 0 || (size_t)n >= len || (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return -ENAMETOOLONG;
	return n;
}
