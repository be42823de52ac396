/* SPDX-License-Identifier: MIT */
/*
 * http.h: the least HTTP/1.x a metrics endpoint needs, as pure code (bytes
 * in, a verdict out; no sockets, no allocation), so a fuzzer and the unit
 * test can drive it with anything.
 *
 * Only a request line and headers are read; a body is never wanted (the
 * server answers GET and closes the connection, so whatever follows the
 * headers, a body or pipelined requests, is ignored). The parser is strict
 * where leniency has bitten HTTP servers before: CRLF line ends only, no
 * NUL or other control bytes, no obsolete line folding, a bounded size.
 *
 * Why not libmicrohttpd: driving it from the libuv loop means its
 * external-select mode (fd sets or epoll handed over each iteration, its
 * own timeouts merged with the loop's), and it brings a whole HTTP server
 * (POST processors, chunked bodies, TLS hooks) for one GET. This reader is
 * small enough to read in one sitting, has no state between calls, and is
 * a fuzz target (tests/fuzz/fuzz-http.c).
 */
#ifndef SPW_DAEMON_HTTP_H
#define SPW_DAEMON_HTTP_H

#include <stddef.h>

/* Request line plus headers, at most: far above what Prometheus or curl
 * send (a few hundred bytes), far below what costs the daemon anything. */
#define HTTP_MAX_REQUEST 8192

enum http_verdict {
	HTTP_NEED_MORE = 0,   /* valid so far; read more bytes */
	HTTP_COMPLETE = 1,    /* request line and headers read */
	HTTP_BAD = -1,        /* not HTTP/1.x as this parser takes it: 400 */
	HTTP_TOO_LARGE = -2,  /* no end of headers within max bytes: 431 */
	HTTP_BAD_VERSION = -3 /* HTTP/2 and the like: 505 */
};

struct http_request {
	char method[16];      /* as sent, e.g. "GET" */
	char path[256];       /* the target up to any '?' */
	int minor;            /* HTTP/1.<minor>: 0 or 1 */
	size_t length;        /* bytes of request line and headers (HTTP_COMPLETE) */
};

/*
 * Looks at buf[0..len) (everything read from the connection so far) and
 * says whether it holds a complete request line and header block, needs
 * more, or can never become one. max caps the request's size (at most
 * HTTP_MAX_REQUEST is sensible). req is filled on HTTP_COMPLETE; its
 * content is unspecified otherwise. A request line or header that can no
 * longer be valid is refused as soon as its bad byte arrives, so garbage
 * costs one read, not a timeout.
 */
enum http_verdict http_parse(const char *buf, size_t len, size_t max, struct http_request *req);

/* The reason phrase for a status code this server sends ("Not Found"). */
const char *http_reason(int code);

#endif
