/* SPDX-License-Identifier: MIT */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "escape.h"

/* Length of the valid UTF-8 character at p (n bytes left) worth keeping
 * as is, or 0: shortest form, no surrogates, at most U+10FFFF, and not a
 * C1 control (U+0080..U+009F, which some terminals obey). */
static size_t utf8_len(const unsigned char *p, size_t n)
{
	size_t k;
	uint32_t cp, min;

	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		k = 2, cp = p[0] & 0x1f, min = 0xa0;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		k = 3, cp = p[0] & 0x0f, min = 0x800;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		k = 4, cp = p[0] & 0x07, min = 0x10000;
	else
		return 0;
	if (k > n)
		return 0;
	for (size_t i = 1; i < k; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return k;
}

/* The escape of the character at s[i] in unit (up to 5 bytes); returns
 * its length and sets *used to the input bytes it stands for. */
static size_t next_unit(const char *s, size_t i, size_t n, char *unit, size_t *used)
{
	const unsigned char *p = (const unsigned char *)s;

	*used = 1;
	if (p[i] == '\\' || p[i] == '"') {
		unit[0] = '\\', unit[1] = (char)p[i];
		return 2;
	}
	if (p[i] == '\n' || p[i] == '\r' || p[i] == '\t') {
		unit[0] = '\\', unit[1] = p[i] == '\n' ? 'n' : p[i] == '\r' ? 'r' : 't';
		return 2;
	}
	if (p[i] >= 0x20 && p[i] < 0x7f) {
		unit[0] = (char)p[i];
		return 1;
	}
	if (p[i] >= 0x80) {
		size_t k = utf8_len(p + i, strnlen(s + i, n - i));

		if (k) {
			memcpy(unit, p + i, k);
			*used = k;
			return k;
		}
	}
	snprintf(unit, 8, "\\x%02x", p[i]);
	return 4;
}

/* Bytes the escape of s[i..n) takes. */
static size_t rest_len(const char *s, size_t i, size_t n)
{
	size_t total = 0, used;
	char unit[8];

	while (i < n && s[i]) {
		total += next_unit(s, i, n, unit, &used);
		i += used;
	}
	return total;
}

const char *escape_text(const char *s, size_t n, char *buf, size_t len)
{
	size_t o = 0, i = 0;
	bool fits = false;

	if (!s) {
		snprintf(buf, len, "(null)");
		return buf;
	}
	while (i < n && s[i]) {
		char unit[8];
		size_t used, ulen = next_unit(s, i, n, unit, &used);

		/* Unless all the rest fits, keep room for "..." and the NUL:
		 * a cut lands between whole units. */
		if (!fits && o + ulen + 4 > len) {
			fits = o + rest_len(s, i, n) + 1 <= len;
			if (!fits) {
				memcpy(buf + o, "...", 3);
				o += 3;
				break;
			}
		}
		memcpy(buf + o, unit, ulen);
		o += ulen;
		i += used;
	}
	buf[o] = '\0';
	return buf;
}
