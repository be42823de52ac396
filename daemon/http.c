/* SPDX-License-Identifier: MIT */
/*
 * A GET-only HTTP/1.x request reader (RFC 9112's request-line and
 * field-line grammar, minus everything a metrics scrape never sends). It
 * re-reads the buffer from the start on every call: the buffer is at most
 * 8 KiB and a scrape arrives in one segment, so keeping state between
 * calls would buy nothing and cost a second place for bugs.
 */
#include <stdbool.h>
#include <string.h>

#include "http.h"

/* RFC 9110 tchar: the bytes of a method or a header name. */
static bool tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

enum crlf { CRLF_OK, CRLF_MORE, CRLF_BAD };

/* The CRLF that ends a line, at b[*i] (advanced past what it read). */
static enum crlf crlf(const unsigned char *b, size_t lim, size_t *i)
{
	for (const char *want = "\r\n"; *want; want++) {
		if (*i == lim)
			return CRLF_MORE;
		if (b[(*i)++] != (unsigned char)*want)
			return CRLF_BAD;
	}
	return CRLF_OK;
}

enum http_verdict http_parse(const char *buf, size_t len, size_t max, struct http_request *req)
{
	static const char version[] = "HTTP/1.";
	const unsigned char *b = (const unsigned char *)buf;
	size_t lim = len < max ? len : max, i = 0, n = 0;
	enum crlf r = CRLF_MORE;
	bool query = false;

	memset(req, 0, sizeof(*req));
	/* method SP */
	while (i < lim && tchar(b[i])) {
		if (n + 1 >= sizeof(req->method))
			return HTTP_BAD;
		req->method[n++] = (char)b[i++];
	}
	if (i == lim)
		goto more;
	if (n == 0 || b[i] != ' ')
		return HTTP_BAD;
	i++;
	/* origin-form target SP: "/path[?query]", visible ASCII only. The
	 * query is dropped: /metrics?x=1 is /metrics. */
	n = 0;
	while (i < lim && b[i] > 0x20 && b[i] < 0x7f) {
		if (n == 0 && !query && b[i] != '/')
			return HTTP_BAD;
		if (b[i] == '?')
			query = true;
		if (!query) {
			if (n + 1 >= sizeof(req->path))
				return HTTP_BAD;
			req->path[n++] = (char)b[i];
		}
		i++;
	}
	if (i == lim)
		goto more;
	if (n == 0 || b[i] != ' ')
		return HTTP_BAD;
	i++;
	/* "HTTP/1.<digit>" CRLF: another major version is 505, not 400. */
	for (size_t k = 0; k < sizeof(version) - 1; k++, i++) {
		if (i == lim)
			goto more;
		if (b[i] != (unsigned char)version[k])
			return k == 5 && b[i] >= '0' && b[i] <= '9' ? HTTP_BAD_VERSION : HTTP_BAD;
	}
	if (i == lim)
		goto more;
	if (b[i] < '0' || b[i] > '9')
		return HTTP_BAD;
	req->minor = b[i] == '0' ? 0 : 1;
	i++;
	if ((r = crlf(b, lim, &i)) != CRLF_OK)
		goto stop;
	/* field-name ":" value CRLF ... CRLF. A line starting with a space
	 * (obsolete folding) or a bare LF fails the tchar test. */
	for (;;) {
		if (i == lim)
			goto more;
		if (b[i] == '\r') {
			if (++i == lim)
				goto more;
			if (b[i++] != '\n')
				return HTTP_BAD;
			req->length = i;
			return HTTP_COMPLETE;
		}
		n = 0;
		while (i < lim && tchar(b[i]))
			i++, n++;
		if (i == lim)
			goto more;
		if (n == 0 || b[i] != ':')
			return HTTP_BAD;
		i++;
		/* Values: visible ASCII, space, tab and bytes >= 0x80; no NUL,
		 * no other control, no DEL. */
		while (i < lim && (b[i] == '\t' || (b[i] >= 0x20 && b[i] != 0x7f)))
			i++;
		if ((r = crlf(b, lim, &i)) != CRLF_OK)
			goto stop;
	}
stop:
	if (r == CRLF_BAD)
		return HTTP_BAD;
more:
	return len >= max ? HTTP_TOO_LARGE : HTTP_NEED_MORE;
}

const char *http_reason(int code)
{
	switch (code) {
	case 200:
		return "OK";
	case 400:
		return "Bad Request";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 408:
		return "Request Timeout";
	case 431:
		return "Request Header Fields Too Large";
	case 500:
		return "Internal Server Error";
	case 505:
		return "HTTP Version Not Supported";
	}
	return "Unknown";
}
