/* SPDX-License-Identifier: MIT */
/*
 * escape_text(): client text made one line of valid UTF-8 without control
 * characters, cut only between whole characters or escapes.
 */
#include <string.h>

#include "escape.h"
#include "test.h"

static void same(const char *in, const char *want)
{
	char buf[256];

	ASSERT_STREQ(escape_text(in, strlen(in), buf, sizeof(buf)), want);
}

/* Every output is printable ASCII or valid UTF-8 of U+00A0 and up. */
static void clean(const char *out)
{
	for (const unsigned char *p = (const unsigned char *)out; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			TEST_FAIL("control byte 0x%02x in \"%s\"", *p, out);
}

int main(void)
{
	char buf[256], small[12];

	same("job/0", "job/0");
	same("a\nspillwayd: error: forged", "a\\nspillwayd: error: forged");
	same("x\n<3>forged", "x\\n<3>forged");
	same("tab\there\r", "tab\\there\\r");
	same("say \"hi\" \\ bye", "say \\\"hi\\\" \\\\ bye");
	same("\x1b[31mred", "\\x1b[31mred");
	same("del\x7f", "del\\x7f");
	same("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
	same("bad \xff\xfe", "bad \\xff\\xfe");
	same("cut \xe2\x82", "cut \\xe2\\x82");
	same("overlong \xc0\xaf", "overlong \\xc0\\xaf");
	same("surrogate \xed\xa0\x80", "surrogate \\xed\\xa0\\x80");
	same("c1 \xc2\x85", "c1 \\xc2\\x85");
	same("", "");
	ASSERT_STREQ(escape_text(NULL, 5, buf, sizeof(buf)), "(null)");
	/* n bounds the input even without a NUL. */
	ASSERT_STREQ(escape_text("abcdef", 3, buf, sizeof(buf)), "abc");
	/* A cut input (the client's %.32s) never yields half a character. */
	ASSERT_STREQ(escape_text("\xc3\xa9\xc3\xa9", 3, buf, sizeof(buf)), "\xc3\xa9\\xc3");

	/* Too long for the buffer: whole units, then "...". */
	ASSERT_STREQ(escape_text("abcdefghijklmnop", 16, small, sizeof(small)), "abcdefgh...");
	ASSERT_STREQ(escape_text("abcdef\n\n\n", 9, small, sizeof(small)), "abcdef\\n...");
	ASSERT_STREQ(escape_text("abcd\xff\xff", 6, small, sizeof(small)), "abcd\\xff...");
	ASSERT_STREQ(escape_text("abcdefg\xe2\x82\xac", 10, small, sizeof(small)), "abcdefg\xe2\x82\xac");
	ASSERT_STREQ(escape_text("abcdef\xe2\x82\xacxyz", 12, small, sizeof(small)), "abcdef...");
	ASSERT_STREQ(escape_text("abcdefghijk", 11, small, sizeof(small)), "abcdefghijk");
	ASSERT_STREQ(escape_text("abcdefghijkl", 12, small, sizeof(small)), "abcdefgh...");

	/* Every byte value, alone and in pairs, comes out clean and fits. */
	for (int a = 0; a < 256; a++)
		for (int b = 1; b < 256; b++) {
			char in[3] = { (char)a, (char)b, 0 }, out[ESCAPE_BUF(2)];

			clean(escape_text(in, 2, out, sizeof(out)));
			ASSERT_TRUE(strstr(out, "...") == NULL);
		}
	return 0;
}
