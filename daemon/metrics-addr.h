/* SPDX-License-Identifier: MIT */
/*
 * metrics-addr.h: what metrics.listen names. "127.0.0.1:9464",
 * "[::1]:9464", "localhost:9464" (IPv4 loopback) or an absolute unix socket
 * path; port 0 asks the kernel for a free one. Literal addresses only: a host name would make a config check
 * depend on DNS. Pure code, shared by config.c (validation) and
 * metrics-server.c (binding); inline here so that every program that
 * compiles config.c from source (the fuzz targets) gets it too.
 */
#ifndef SPW_DAEMON_METRICS_ADDR_H
#define SPW_DAEMON_METRICS_ADDR_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

struct metrics_addr {
	bool is_unix;
	char path[108];                /* is_unix: the socket's path */
	struct sockaddr_storage sa;    /* otherwise: AF_INET or AF_INET6 with the port */
	bool loopback;                 /* unix sockets count as local */
};

static inline int metrics_addr_fail(char *why, size_t len, const char *msg)
{
	snprintf(why, len, "%s", msg);
	return -EINVAL;
}

/* Parses s into *a. Returns 0, or -EINVAL with the reason (a phrase to put
 * after the key and value) in why. */
static inline int metrics_addr_parse(const char *s, struct metrics_addr *a, char *why, size_t whylen)
{
	char host[64];
	const char *colon, *h = s;
	size_t hlen;
	unsigned long port;
	char *end;

	memset(a, 0, sizeof(*a));
	if (s[0] == '/') {
		if (strlen(s) >= sizeof(((struct sockaddr_un *)0)->sun_path))
			return metrics_addr_fail(why, whylen, "is longer than a unix socket path may be (107 bytes)");
		a->is_unix = true;
		a->loopback = true;
		snprintf(a->path, sizeof(a->path), "%s", s);
		return 0;
	}
	colon = strrchr(s, ':');
	if (!colon)
		return metrics_addr_fail(why, whylen, "is neither ADDRESS:PORT (\"127.0.0.1:9464\", \"[::1]:9464\") nor an "
					 "absolute unix socket path");
	hlen = (size_t)(colon - s);
	if (hlen >= 2 && s[0] == '[' && s[hlen - 1] == ']') {
		h = s + 1;
		hlen -= 2;
	} else if (memchr(s, ':', hlen)) {
		return metrics_addr_fail(why, whylen, "has an IPv6 address without brackets; write \"[::1]:9464\"");
	}
	if (hlen == 0 || hlen >= sizeof(host))
		return metrics_addr_fail(why, whylen, "has no address before the port (\"127.0.0.1:9464\")");
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	/* Port 0: the kernel picks a free one; the log and the status
	 * document's config.metrics_listen say which. */
	if (!colon[1] || *end || errno || port > 65535 || colon[1] < '0' || colon[1] > '9')
		return metrics_addr_fail(why, whylen, "has no port from 0 to 65535 after the last ':'");
	if (!strcmp(host, "localhost"))
		snprintf(host, sizeof(host), "127.0.0.1");
	if (h == s) {
		struct sockaddr_in *in = (struct sockaddr_in *)&a->sa;

		if (inet_pton(AF_INET, host, &in->sin_addr) != 1)
			return metrics_addr_fail(why, whylen, "does not start with an IPv4 address, [IPv6 address] or localhost "
						 "(host names are not looked up)");
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)port);
		a->loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a->sa;

		if (inet_pton(AF_INET6, host, &in6->sin6_addr) != 1)
			return metrics_addr_fail(why, whylen, "has no IPv6 address inside the brackets");
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		a->loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) ||
			      (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127);
	}
	return 0;
}

#endif
