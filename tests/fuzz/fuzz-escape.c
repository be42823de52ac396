/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: escape_text() (daemon/escape.c), the gate between client
 * text and the log. The first byte picks the buffer size; whatever the
 * rest is, the output is NUL-terminated inside the buffer, has no control
 * byte, is strict UTF-8 (json_strict_check accepts it as a JSON string
 * once quoted, its own escapes made inert), has every '"' escaped, and
 * short input comes back whole.
 */
#include <string.h>

#include "escape.h"
#include "fuzz.h"
#include "json-strict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t len, n, o;
	char *out, *quoted;

	if (size < 1)
		return 0;
	len = 8 + data[0];
	data++, size--;
	out = malloc(len);
	quoted = malloc(len + 2);
	FUZZ_CHECK(out && quoted);
	escape_text((const char *)data, size, out, len);
	n = strnlen(out, len);
	FUZZ_CHECK(n < len);
	for (o = 0; o < n; o++)
		FUZZ_CHECK((unsigned char)out[o] >= 0x20 && (unsigned char)out[o] != 0x7f);
	/* A '"' only ever right after the backslash that escapes it (the
	 * backslash itself escaped when it was the client's). */
	for (o = 0; o < n; o++) {
		if (out[o] == '\\') {
			FUZZ_CHECK(o + 1 < n && strchr("\\\"nrtx", out[o + 1]));
			o++;
		} else {
			FUZZ_CHECK(out[o] != '"');
		}
	}
	quoted[0] = '"';
	for (o = 0; o < n; o++)
		quoted[o + 1] = out[o] == '\\' || out[o] == '"' ? '/' : out[o];
	quoted[n + 1] = '"';
	FUZZ_CHECK(json_strict_check(quoted, n + 2, NULL, NULL) == 0);
	/* Input without anything to escape and short enough comes back as is. */
	if (size < len / 4 && memchr(data, 0, size) == NULL)
		FUZZ_CHECK(n >= size);
	free(quoted);
	free(out);
	return 0;
}
