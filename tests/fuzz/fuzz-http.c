/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: http_parse() (daemon/http.c), the first code that sees a
 * metrics scraper's bytes. The first byte picks a split point; whatever
 * the rest is: the parser never reads past len (ASan), a complete request
 * has a "GET"-like token method, a path starting with '/' and a length
 * within the bytes and the limit, and feeding the bytes in two pieces
 * gives the same verdict as feeding them whole (a verdict other than
 * NEED_MORE for the first piece is final).
 */
#include <string.h>

#include "fuzz.h"
#include "http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_request r, r2;
	enum http_verdict v, v1;
	size_t split;

	if (size < 1)
		return 0;
	split = data[0];
	data++, size--;
	if (split > size)
		split = size;
	v = http_parse((const char *)data, size, HTTP_MAX_REQUEST, &r);
	FUZZ_CHECK(v >= HTTP_BAD_VERSION && v <= HTTP_COMPLETE);
	if (v == HTTP_COMPLETE) {
		FUZZ_CHECK(r.length >= 16 && r.length <= size && r.length <= HTTP_MAX_REQUEST);
		FUZZ_CHECK(r.path[0] == '/' && strlen(r.path) < sizeof(r.path));
		FUZZ_CHECK(r.method[0] && strlen(r.method) < sizeof(r.method));
		FUZZ_CHECK(memcmp(data + r.length - 4, "\r\n\r\n", 4) == 0);
		for (size_t i = 0; i < r.length; i++)
			FUZZ_CHECK(data[i] != 0);
	}
	if (size >= HTTP_MAX_REQUEST)
		FUZZ_CHECK(v != HTTP_NEED_MORE);
	v1 = http_parse((const char *)data, split, HTTP_MAX_REQUEST, &r2);
	if (v1 != HTTP_NEED_MORE)
		FUZZ_CHECK(v1 == v);
	return 0;
}
