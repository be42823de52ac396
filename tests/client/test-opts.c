/* SPDX-License-Identifier: MIT */
/*
 * test-opts: client/opts.c, the one way sized public structs are read and
 * written, on a struct with two versions (v1, and v2 with a field more):
 * an old caller's struct is read with the new field at its default and
 * filled no further than its size; a too-small size is refused; a newer
 * caller's struct is taken only when what this library does not know is
 * zero; a garbage size is refused before anything is read or written.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "opts.h"
#include "test.h"

struct v1 {
	size_t size;
	uint32_t a, b;
};

struct v2 {
	size_t size;
	uint32_t a, b;
	uint64_t c;     /* added in v2, after v1's last byte */
};

/* A caller's struct with guard bytes after it. */
struct guarded {
	struct v1 s;
	unsigned char guard[16];
};

struct bigger {
	struct v2 s;
	uint64_t unknown[2];    /* a field of a v3 this library does not know */
	unsigned char guard[16];
};

#define V1_SIZE sizeof(struct v1)

static void test_in(void)
{
	struct v1 old = { .size = sizeof(old), .a = 1, .b = 2 };
	struct bigger newer;
	struct v2 got;
	char why[256];

	/* The first version's struct: the added field reads as zero. */
	memset(&got, 0xAA, sizeof(got));
	ASSERT_OK(spw__opts_in(&got, sizeof(got), &old, V1_SIZE, "struct v", why, sizeof(why)));
	ASSERT_UEQ(got.a, 1);
	ASSERT_UEQ(got.b, 2);
	ASSERT_UEQ(got.c, 0);
	ASSERT_UEQ(got.size, sizeof(got));

	/* Below the first version. */
	old.size = V1_SIZE - 1;
	ASSERT_EQ(spw__opts_in(&got, sizeof(got), &old, V1_SIZE, "struct v", why, sizeof(why)), -EINVAL);
	ASSERT_CONTAINS(why, "struct v: size 15 is smaller than its first version (16 bytes)");
	ASSERT_CONTAINS(why, "set .size = sizeof(struct v)");
	old.size = 0;
	ASSERT_EQ(spw__opts_in(&got, sizeof(got), &old, V1_SIZE, "struct v", NULL, 0), -EINVAL);

	/* A newer caller: zero past our struct is fine, anything else not. */
	memset(&newer, 0, sizeof(newer));
	newer.s = (struct v2){ .size = offsetof(struct bigger, guard), .a = 5, .c = 7 };
	memset(newer.guard, 0xEE, sizeof(newer.guard)); /* past its size: never read as the struct */
	ASSERT_OK(spw__opts_in(&got, sizeof(got), &newer, V1_SIZE, "struct v", why, sizeof(why)));
	ASSERT_UEQ(got.a, 5);
	ASSERT_UEQ(got.c, 7);
	newer.unknown[1] = 1;
	ASSERT_EQ(spw__opts_in(&got, sizeof(got), &newer, V1_SIZE, "struct v", why, sizeof(why)), -E2BIG);
	ASSERT_CONTAINS(why, "struct v: the caller's struct has 40 bytes, this libspillway knows 24");
	ASSERT_CONTAINS(why, "byte 32");

	/* A garbage size is refused without reading that far. */
	newer.s.size = (size_t)1 << 40;
	ASSERT_EQ(spw__opts_in(&got, sizeof(got), &newer, V1_SIZE, "struct v", why, sizeof(why)), -E2BIG);
	ASSERT_CONTAINS(why, "is no struct's size");
}

static void test_out(void)
{
	struct v2 all = { .size = sizeof(all), .a = 11, .b = 12, .c = 13 };
	struct guarded old;
	struct bigger newer;
	char why[256];

	/* An old caller's struct is filled as far as its size and no further. */
	memset(&old, 0xCC, sizeof(old));
	old.s.size = sizeof(old.s);
	ASSERT_OK(spw__info_out(&old, &all, sizeof(all), V1_SIZE, "struct v", why, sizeof(why)));
	ASSERT_UEQ(old.s.a, 11);
	ASSERT_UEQ(old.s.b, 12);
	ASSERT_UEQ(old.s.size, V1_SIZE);
	for (size_t i = 0; i < sizeof(old.guard); i++)
		ASSERT_UEQ(old.guard[i], 0xCC);

	/* A newer caller's: ours filled, its unknown field zeroed, size says
	 * how much this library filled, nothing past its size touched. */
	memset(&newer, 0xCC, sizeof(newer));
	newer.s.size = offsetof(struct bigger, guard);
	ASSERT_OK(spw__info_out(&newer, &all, sizeof(all), V1_SIZE, "struct v", why, sizeof(why)));
	ASSERT_UEQ(newer.s.c, 13);
	ASSERT_UEQ(newer.s.size, sizeof(struct v2));
	ASSERT_UEQ(newer.unknown[0], 0);
	ASSERT_UEQ(newer.unknown[1], 0);
	for (size_t i = 0; i < sizeof(newer.guard); i++)
		ASSERT_UEQ(newer.guard[i], 0xCC);

	/* Refusals leave the caller's struct alone. */
	memset(&old, 0xCC, sizeof(old));
	old.s.size = 8;
	ASSERT_EQ(spw__info_out(&old, &all, sizeof(all), V1_SIZE, "struct v", why, sizeof(why)), -EINVAL);
	ASSERT_UEQ(old.s.a, 0xCCCCCCCCu);
	ASSERT_UEQ(old.s.size, 8);
	old.s.size = 5000;
	ASSERT_EQ(spw__info_out(&old, &all, sizeof(all), V1_SIZE, "struct v", why, sizeof(why)), -E2BIG);
	ASSERT_UEQ(old.s.a, 0xCCCCCCCCu);

	/* The check alone answers as the copies do. */
	ASSERT_EQ(spw__struct_size_check(&old, V1_SIZE, "struct v", why, sizeof(why)), -E2BIG);
	old.s.size = 8;
	ASSERT_EQ(spw__struct_size_check(&old, V1_SIZE, "struct v", why, sizeof(why)), -EINVAL);
	ASSERT_CONTAINS(why, "struct v: size 8 is smaller");
	old.s.size = V1_SIZE;
	ASSERT_OK(spw__struct_size_check(&old, V1_SIZE, "struct v", why, sizeof(why)));
}

int main(void)
{
	test_in();
	test_out();
	printf("ok\n");
	return 0;
}
