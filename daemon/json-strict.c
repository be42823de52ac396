/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "json-strict.h"

struct scan {
	const unsigned char *p;
	size_t len, i;
	const char *why;
};

static bool bad(struct scan *s, const char *why)
{
	if (!s->why)
		s->why = why;
	return false;
}

static void ws(struct scan *s)
{
	while (s->i < s->len && (s->p[s->i] == ' ' || s->p[s->i] == '\t' || s->p[s->i] == '\n' || s->p[s->i] == '\r'))
		s->i++;
}

static bool digit(const struct scan *s)
{
	return s->i < s->len && s->p[s->i] >= '0' && s->p[s->i] <= '9';
}

static bool number(struct scan *s)
{
	if (s->i < s->len && s->p[s->i] == '-')
		s->i++;
	if (!digit(s))
		return bad(s, "a number without digits");
	if (s->p[s->i] == '0') {
		s->i++;
		if (digit(s))
			return bad(s, "a number with a leading zero");
	} else {
		while (digit(s))
			s->i++;
	}
	if (s->i < s->len && s->p[s->i] == '.') {
		s->i++;
		if (!digit(s))
			return bad(s, "a number with no digits after the decimal point");
		while (digit(s))
			s->i++;
	}
	if (s->i < s->len && (s->p[s->i] == 'e' || s->p[s->i] == 'E')) {
		s->i++;
		if (s->i < s->len && (s->p[s->i] == '+' || s->p[s->i] == '-'))
			s->i++;
		if (!digit(s))
			return bad(s, "a number with no digits in its exponent");
		while (digit(s))
			s->i++;
	}
	return true;
}

static int hexval(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* One UTF-8 sequence starting at s->i (a byte >= 0x80): shortest form,
 * no surrogates, at most U+10FFFF (RFC 3629). */
static bool utf8(struct scan *s)
{
	unsigned char c = s->p[s->i];
	unsigned n;
	uint32_t cp, min;

	if (c >= 0xc2 && c <= 0xdf) {
		n = 1, cp = c & 0x1f, min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 2, cp = c & 0x0f, min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 3, cp = c & 0x07, min = 0x10000;
	} else {
		return bad(s, "invalid UTF-8 in a string");
	}
	for (unsigned k = 1; k <= n; k++) {
		if (s->i + k >= s->len || (s->p[s->i + k] & 0xc0) != 0x80)
			return bad(s, "invalid UTF-8 in a string (a cut multibyte character)");
		cp = (cp << 6) | (s->p[s->i + k] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return bad(s, "invalid UTF-8 in a string (overlong, surrogate or beyond U+10FFFF)");
	s->i += n + 1;
	return true;
}

static bool string(struct scan *s)
{
	s->i++; /* the opening quote */
	while (s->i < s->len) {
		unsigned char c = s->p[s->i];

		if (c == '"') {
			s->i++;
			return true;
		}
		if (c < 0x20)
			return bad(s, "a raw control character in a string (write it as an escape such as \\n or \\u0001)");
		if (c >= 0x80) {
			if (!utf8(s))
				return false;
			continue;
		}
		if (c != '\\') {
			s->i++;
			continue;
		}
		if (++s->i >= s->len)
			break;
		c = s->p[s->i];
		if (c == 'u') {
			for (int k = 1; k <= 4; k++)
				if (s->i + k >= s->len || hexval(s->p[s->i + k]) < 0)
					return bad(s, "a \\u escape without four hex digits");
			s->i += 5;
		} else if (c && strchr("\"\\/bfnrt", c)) {
			s->i++;
		} else {
			return bad(s, "an unknown escape in a string");
		}
	}
	return bad(s, "a string without its closing quote");
}

static bool literal(struct scan *s, const char *word)
{
	size_t n = strlen(word);

	if (s->len - s->i < n || memcmp(s->p + s->i, word, n))
		return bad(s, "an unexpected character (not a JSON value)");
	s->i += n;
	return true;
}

static bool value(struct scan *s, unsigned depth)
{
	char close;

	ws(s);
	if (s->i >= s->len)
		return bad(s, "a missing value");
	switch (s->p[s->i]) {
	case '"':
		return string(s);
	case 't':
		return literal(s, "true");
	case 'f':
		return literal(s, "false");
	case 'n':
		return literal(s, "null");
	case '{':
	case '[':
		break;
	default:
		if (s->p[s->i] == '-' || (s->p[s->i] >= '0' && s->p[s->i] <= '9'))
			return number(s);
		return bad(s, "an unexpected character (not a JSON value)");
	}
	close = s->p[s->i] == '{' ? '}' : ']';
	if (depth >= JSON_STRICT_MAX_DEPTH)
		return bad(s, "arrays and objects nested too deep");
	s->i++;
	ws(s);
	if (s->i < s->len && s->p[s->i] == close) {
		s->i++;
		return true;
	}
	for (;;) {
		if (close == '}') {
			ws(s);
			if (s->i >= s->len || s->p[s->i] != '"')
				return bad(s, "an object key that is not a string");
			if (!string(s))
				return false;
			ws(s);
			if (s->i >= s->len || s->p[s->i] != ':')
				return bad(s, "a missing ':' after an object key");
			s->i++;
		}
		if (!value(s, depth + 1))
			return false;
		ws(s);
		if (s->i >= s->len)
			return bad(s, close == '}' ? "an object without its closing '}'" : "an array without its closing ']'");
		if (s->p[s->i] == close) {
			s->i++;
			return true;
		}
		if (s->p[s->i] != ',')
			return bad(s, "a missing ',' between elements");
		s->i++;
	}
}

int json_strict_check(const char *buf, size_t len, size_t *off, const char **why)
{
	struct scan s = { .p = (const unsigned char *)buf, .len = len };

	if (value(&s, 0)) {
		ws(&s);
		if (s.i == len)
			return 0;
		s.why = "trailing data after the JSON value";
	}
	if (off)
		*off = s.i;
	if (why)
		*why = s.why;
	return -EINVAL;
}

void json_strict_position(const char *buf, size_t len, size_t off, unsigned *line, unsigned *col)
{
	unsigned l = 1, c = 1;

	for (size_t i = 0; i < off && i < len; i++, c++)
		if (buf[i] == '\n') {
			l++;
			c = 0;
		}
	*line = l;
	*col = c;
}
