/* SPDX-License-Identifier: MIT */
/*
 * tests/kernels/test-dispatch-env.c: SPILLWAY_KERNELS, as set by meson for
 * each run of this test (argv[1] says what to expect: "ok", "EINVAL" or
 * "ENOTSUP-or-ok", the last for avx512, which some CPUs run).
 */
#include <stdlib.h>

#include "kt.h"

int main(int argc, char **argv)
{
	const char *env = getenv("SPILLWAY_KERNELS");
	char err[256] = "";
	int r;

	ASSERT_TRUE(argc == 2 && env);
	r = spw_kernels_init(err, sizeof(err));
	if (!strcmp(argv[1], "ok")) {
		ASSERT_EQ(r, 0);
		ASSERT_STREQ(spw_kernels_name(), env);
	} else if (!strcmp(argv[1], "EINVAL")) {
		ASSERT_EQ(r, -EINVAL);
		ASSERT_CONTAINS(err, "SPILLWAY_KERNELS=");
		ASSERT_CONTAINS(err, "names no kernel variant");
		ASSERT_STREQ(spw_kernels_name(), "c"); /* still usable */
		ASSERT_EQ(spw_kernels_init(NULL, 0), -EINVAL); /* and stays refused */
	} else {
		if (r == 0) {
			ASSERT_STREQ(spw_kernels_name(), env);
		} else {
			ASSERT_EQ(r, -ENOTSUP);
			ASSERT_CONTAINS(err, "this CPU lacks");
		}
	}
	fprintf(stderr, "SPILLWAY_KERNELS=%s: %d %s\n", env, r, err);
	return 0;
}
