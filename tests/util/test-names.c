/* SPDX-License-Identifier: MIT */
/* util/names.h: the one name rule, tensor name lists, swap file names. */
#include "test.h"
#include "util/names.h"

int main(void)
{
	static const char *const good[] = { "job/0", "a.b-c_d/17", "torch/123.1", "0:layers.0.weight",
					    "spw.opt.w.exp_avg", "x", "a.b", "w[3]+k@host", "~" };
	static const char *const bad[] = { "", "/abs", ".hidden", "a/../b", "a..b", "..", "sp ace",
					   "quo\"te", "back\\slash", "tab\there", "nl\n", "del\x7f",
					   "high\xc3\xa9" };
	char buf[300], name[96];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		if (!name_valid(good[i], 64))
			TEST_FAIL("'%s' should be a name", good[i]);
		ASSERT_TRUE(name_list_valid(good[i], 64));
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (name_valid(bad[i], 64))
			TEST_FAIL("'%s' should not be a name", bad[i]);
	}
	ASSERT_TRUE(!name_valid(NULL, 64));

	/* max counts bytes: 128 pass, 129 do not. */
	memset(buf, 'a', 129);
	buf[129] = '\0';
	ASSERT_TRUE(!name_valid(buf, 128));
	buf[128] = '\0';
	ASSERT_TRUE(name_valid(buf, 128));

	/* Lists: names joined by single spaces, max counting the spaces. */
	ASSERT_TRUE(name_list_valid("layer.0.weight exp_avg", 256));
	ASSERT_TRUE(name_list_valid("a b c", 5));
	ASSERT_TRUE(!name_list_valid("a b c", 4));
	ASSERT_TRUE(!name_list_valid("a  b", 256));
	ASSERT_TRUE(!name_list_valid(" a", 256));
	ASSERT_TRUE(!name_list_valid("a ", 256));
	ASSERT_TRUE(!name_list_valid("a .b", 256));
	ASSERT_TRUE(!name_list_valid("tab\there", 256));
	ASSERT_TRUE(!name_list_valid("", 256));
	ASSERT_TRUE(!name_list_valid(NULL, 256));

	/* Swap files: the session's odd bytes become '_', a leading '.'
	 * too, 64 bytes of it at most; and the match takes only those. */
	ASSERT_STREQ(swapfile_name(name, sizeof(name), "job/0", 0xdeadbeef), "spillway-job_0-deadbeef.swap");
	ASSERT_STREQ(swapfile_name(name, sizeof(name), "../.job/0:x", 1), "spillway-_._.job_0_x-00000001.swap");
	ASSERT_STREQ(swapfile_name(name, sizeof(name), "a.b", 2), "spillway-a.b-00000002.swap");
	memset(buf, 'z', 200);
	buf[200] = '\0';
	swapfile_name(name, sizeof(name), buf, 3);
	ASSERT_EQ(strlen(name), strlen("spillway-") + 64 + strlen("-00000003.swap"));
	ASSERT_TRUE(swapfile_name_match(name));
	ASSERT_TRUE(swapfile_name_match("spillway-job_0-deadbeef.swap"));
	ASSERT_TRUE(swapfile_name_match("spillway-.swap"));
	ASSERT_TRUE(!swapfile_name_match("spillway-job_0-deadbeef.swap.tmp"));
	ASSERT_TRUE(!swapfile_name_match("other-job.swap"));
	ASSERT_TRUE(!swapfile_name_match("spillway.swap"));
	ASSERT_TRUE(!swapfile_name_match("spillway-"));
	ASSERT_TRUE(!swapfile_name_match(""));
	return 0;
}
