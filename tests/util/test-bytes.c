/* SPDX-License-Identifier: MIT */
/* util/bytes.h: the exact text for each unit and at its edges. */
#include "test.h"
#include "util/bytes.h"

static void expect(uint64_t v, const char *text, const char *exact)
{
	char buf[64], small[8];

	ASSERT_TRUE(format_bytes(v, buf, sizeof(buf)) == buf);
	ASSERT_STREQ(buf, text);
	ASSERT_TRUE(format_bytes_exact(v, buf, sizeof(buf)) == buf);
	ASSERT_STREQ(buf, exact);
	/* A short buffer truncates, never overflows (ASan would say). */
	format_bytes_exact(v, small, sizeof(small));
	ASSERT_TRUE(strlen(small) < sizeof(small));
}

int main(void)
{
	expect(0, "0 B", "0 B");
	expect(1023, "1023 B", "1023 B");
	expect(1024, "1.0 KiB", "1.0 KiB (1024 bytes)");
	expect(1536, "1.5 KiB", "1.5 KiB (1536 bytes)");
	expect(4u << 20, "4.0 MiB", "4.0 MiB (4194304 bytes)");
	expect(5ull << 29, "2.5 GiB", "2.5 GiB (2684354560 bytes)");
	expect(3ull << 40, "3.0 TiB", "3.0 TiB (3298534883328 bytes)");
	expect(1ull << 50, "1.0 PiB", "1.0 PiB (1125899906842624 bytes)");
	/* The largest unit does not run past EiB. */
	expect(UINT64_MAX, "16.0 EiB", "16.0 EiB (18446744073709551615 bytes)");
	return 0;
}
