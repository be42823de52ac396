/* SPDX-License-Identifier: MIT */
/* util/json.h: which JSON values json_uint() takes, and what it says of
 * the rest. */
#include <errno.h>

#include "test.h"
#include "util/json.h"

/* json_uint() of the value text parses to. */
static int parse_uint(const char *text, uint64_t max, uint64_t *out)
{
	cJSON *v = cJSON_Parse(text);
	int r;

	ASSERT_TRUE(v != NULL);
	r = json_uint(v, max, out);
	cJSON_Delete(v);
	return r;
}

int main(void)
{
	uint64_t x = 0;

	ASSERT_EQ(parse_uint("0", 10, &x), 0);
	ASSERT_UEQ(x, 0);
	ASSERT_EQ(parse_uint("10", 10, &x), 0);
	ASSERT_UEQ(x, 10);
	ASSERT_EQ(parse_uint("1e3", 1000, &x), 0);
	ASSERT_UEQ(x, 1000);
	ASSERT_EQ(parse_uint("9007199254740992", UINT64_MAX, &x), 0);
	ASSERT_UEQ(x, 9007199254740992ull);

	/* Out of range or not whole: -ERANGE, *ret untouched. */
	x = 77;
	ASSERT_EQ(parse_uint("11", 10, &x), -ERANGE);
	ASSERT_EQ(parse_uint("-1", 10, &x), -ERANGE);
	ASSERT_EQ(parse_uint("1.5", 10, &x), -ERANGE);
	ASSERT_EQ(parse_uint("1e300", UINT64_MAX, &x), -ERANGE);
	/* Above 2^53 a double may already be rounded: refused whatever max. */
	ASSERT_EQ(parse_uint("9007199254740994", UINT64_MAX, &x), -ERANGE);
	ASSERT_UEQ(x, 77);

	/* Not a number: -EINVAL. */
	ASSERT_EQ(parse_uint("\"5\"", 10, &x), -EINVAL);
	ASSERT_EQ(parse_uint("true", 10, &x), -EINVAL);
	ASSERT_EQ(parse_uint("null", 10, &x), -EINVAL);
	ASSERT_EQ(parse_uint("[1]", 10, &x), -EINVAL);
	ASSERT_EQ(json_uint(NULL, 10, &x), -EINVAL);
	ASSERT_UEQ(x, 77);

	/* Dotted paths. */
	{
		cJSON *doc = cJSON_Parse("{\"a\":{\"b\":{\"c\":7},\"B\":1},\"x\":2}");
		const cJSON *v;

		ASSERT_TRUE(doc != NULL);
		v = json_path(doc, "a.b.c");
		ASSERT_TRUE(cJSON_IsNumber(v) && v->valuedouble == 7);
		v = json_path(doc, "x");
		ASSERT_TRUE(cJSON_IsNumber(v) && v->valuedouble == 2);
		ASSERT_TRUE(json_path(doc, "a.B") == cJSON_GetObjectItemCaseSensitive(json_path(doc, "a"), "B"));
		ASSERT_TRUE(json_path(doc, "a.b") == cJSON_GetObjectItemCaseSensitive(json_path(doc, "a"), "b"));
		ASSERT_TRUE(json_path(doc, "A.b.c") == NULL);
		ASSERT_TRUE(json_path(doc, "a.b.c.d") == NULL);
		ASSERT_TRUE(json_path(doc, "a.q") == NULL);
		ASSERT_TRUE(json_path(NULL, "a") == NULL);
		ASSERT_TRUE(json_path(doc, "") == doc);
		cJSON_Delete(doc);
	}
	return 0;
}
