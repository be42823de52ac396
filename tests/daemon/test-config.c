/* SPDX-License-Identifier: MIT */
/*
 * Config validation: every refusal names the key, the value and why. The
 * parser is linked in directly; the last cases run spillwayd --check-config
 * to prove the binary refuses (exit 1) and accepts (exit 0) the same way.
 */
#include <errno.h>
#include <string.h>

#include "daemon-config.h"
#include "harness.h"
#include "log.h"
#include "test.h"

struct bad {
	const char *json;
	const char *needle1;
	const char *needle2;
};

static const struct bad bad[] = {
	{ "{", "not valid JSON", "line 1" },
	{ "[]", "top level", "an array" },
	{ "{\"foo\": 1}", "unknown key foo", "socket, pool" },
	{ "{\"pool\": {\"max_byte\": 1}}", "unknown key pool.max_byte", "max_bytes" },
	{ "{\"pool\": 3}", "pool", "expected an object" },
	{ "{\"pool\": {}, \"pool\": {}}", "pool appears twice", "" },
	{ "{\"pool\": {\"max_bytes\": \"1GiB\", \"max_bytes\": \"2GiB\"}}", "pool.max_bytes appears twice", "" },
	/* socket */
	{ "{\"socket\": {\"dir\": \"run/x\"}}", "socket.dir", "\"run/x\" is not an absolute path" },
	{ "{\"socket\": {\"dir\": 5}}", "socket.dir", "wrong type" },
	{ "{\"socket\": {\"dir\": \"/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}}",
	  "socket.dir", "longer than" },
	{ "{\"socket\": {\"mode\": \"999\"}}", "socket.mode", "\"999\" is not an octal file mode" },
	{ "{\"socket\": {\"mode\": \"1777\"}}", "socket.mode", "\"1777\" is not an octal file mode" },
	{ "{\"socket\": {\"mode\": \"0066\"}}", "socket.mode", "denies the owner" },
	{ "{\"socket\": {\"mode\": 660}}", "socket.mode", "octal string" },
	{ "{\"socket\": {\"group\": \"no-such-group-spw\"}}", "socket.group", "does not exist" },
	{ "{\"socket\": {\"group\": 7}}", "socket.group", "wrong type" },
	/* pool */
	{ "{\"pool\": {\"max_bytes\": \"12XB\"}}", "pool.max_bytes", "\"12XB\" is not a size" },
	{ "{\"pool\": {\"max_bytes\": -1}}", "pool.max_bytes", "-1 is not a whole" },
	{ "{\"pool\": {\"max_bytes\": 1e300}}", "pool.max_bytes", "e+300 is not a whole" },
	{ "{\"pool\": {\"max_bytes\": 1048576.5}}", "pool.max_bytes", "not a whole" },
	{ "{\"pool\": {\"max_bytes\": \"99999999999999999999\"}}", "pool.max_bytes", "does not fit in 64 bits" },
	{ "{\"pool\": {\"max_bytes\": \"1024\"}}", "pool.max_bytes", "too small" },
	{ "{\"pool\": {\"max_bytes\": \"1000TiB\"}}", "pool.max_bytes", "more than this host's memory" },
	{ "{\"pool\": {\"max_bytes\": true}}", "pool.max_bytes", "wrong type" },
	{ "{\"pool\": {\"max_bytes\": \"1GiB\", \"session_max_bytes\": \"2GiB\"}}", "pool.session_max_bytes (2.0 GiB)",
	  "exceeds pool.max_bytes (1.0 GiB)" },
	{ "{\"pool\": {\"session_max_bytes\": \"4KiB\"}}", "pool.session_max_bytes", "too small" },
	{ "{\"pool\": {\"require_locked\": \"yes\"}}", "pool.require_locked", "\"yes\" has the wrong type" },
	{ "{\"pool\": {\"hugepages\": \"sometimes\"}}", "pool.hugepages", "\"sometimes\" is not one of" },
	{ "{\"pool\": {\"numa_node\": \"near\"}}", "pool.numa_node", "\"near\" has the wrong type" },
	{ "{\"pool\": {\"numa_node\": -1}}", "pool.numa_node", "out of range" },
	{ "{\"pool\": {\"numa_node\": 999}}", "pool.numa_node", "does not exist" },
	{ "{\"pool\": {\"gpu\": \"gpu0\"}}", "pool.gpu", "\"gpu0\" is not a PCI address" },
	{ "{\"pool\": {\"gpu\": \"0000:3b:00.9\"}}", "pool.gpu", "not a PCI address" },
	{ "{\"pool\": {\"gpu\": 5}}", "pool.gpu", "wrong type" },
	/* session */
	{ "{\"session\": {\"page_size\": \"3MiB\"}}", "session.page_size", "\"3MiB\" is not a power of two" },
	{ "{\"session\": {\"page_size\": \"32KiB\"}}", "session.page_size", "not a power of two from 64 KiB" },
	{ "{\"session\": {\"page_size\": \"128MiB\"}}", "session.page_size", "to 64 MiB" },
	{ "{\"session\": {\"ring_entries\": 100}}", "session.ring_entries", "100 is not a power of two" },
	{ "{\"session\": {\"ring_entries\": 4}}", "session.ring_entries", "out of range" },
	{ "{\"session\": {\"ring_entries\": 8192}}", "session.ring_entries", "out of range" },
	{ "{\"session\": {\"ring_entries\": \"256\"}}", "session.ring_entries", "wrong type" },
	{ "{\"session\": {\"max_tensors\": 0}}", "session.max_tensors", "0 is out of range" },
	{ "{\"session\": {\"max_garbage\": 0}}", "session.max_garbage", "0 is out of range" },
	{ "{\"pool\": {\"max_bytes\": \"1GiB\", \"session_max_bytes\": \"1MiB\"}, \"session\": {\"page_size\": \"4MiB\"}}",
	  "session.page_size (4.0 MiB)", "no session could hold one page" },
	/* ring, log */
	{ "{\"ring\": {\"poll_us\": 2000000}}", "ring.poll_us", "2000000 is out of range" },
	{ "{\"ring\": {\"poll_us\": -5}}", "ring.poll_us", "out of range" },
	{ "{\"ring\": {\"poll_us\": \"50\"}}", "ring.poll_us", "wrong type" },
	{ "{\"ring\": {\"spin\": 1}}", "unknown key ring.spin", "poll_us" },
	{ "{\"log\": {\"level\": \"verbose\"}}", "log.level", "\"verbose\" is not one of" },
	{ "{\"log\": {\"level\": 3}}", "log.level", "wrong type" },
	/* swap (the NVMe tier) */
	{ "{\"swap\": {\"dirs\": \"/mnt\"}}", "swap.dirs", "expected an array" },
	{ "{\"swap\": {\"dirs\": [3]}}", "swap.dirs[0]", "wrong type" },
	{ "{\"swap\": {\"dirs\": [{\"path\": \"nvme\", \"max_bytes\": \"1GiB\"}]}}", "swap.dirs[0].path",
	  "not an absolute path" },
	{ "{\"swap\": {\"dirs\": [{\"path\": \"/mnt/a\"}]}}", "swap.dirs[0]", "missing \"max_bytes\"" },
	{ "{\"swap\": {\"dirs\": [{\"path\": \"/mnt/a\", \"max_bytes\": \"1GiB\", \"fast\": true}]}}",
	  "unknown key swap.dirs[0].fast", "path, max_bytes" },
	{ "{\"swap\": {\"dirs\": [{\"path\": \"/mnt/a\", \"max_bytes\": \"1GiB\"}, {\"path\": \"/mnt/a\", \"max_bytes\": \"1GiB\"}]}}",
	  "swap.dirs[1].path", "listed twice" },
	{ "{\"swap\": {\"dirs\": [{\"path\": \"/mnt/a\", \"max_bytes\": \"12 parsecs\"}]}}", "swap.dirs[0].max_bytes",
	  "not a size" },
	{ "{\"swap\": {\"queue_depth\": 0}}", "swap.queue_depth", "0 is out of range" },
	{ "{\"swap\": {\"queue_depth\": 5000}}", "swap.queue_depth", "out of range" },
	{ "{\"swap\": {\"sqpoll\": \"yes\"}}", "swap.sqpoll", "wrong type" },
	{ "{\"swap\": {\"prefetch_window\": -1}}", "swap.prefetch_window", "out of range" },
	{ "{\"swap\": {\"depth\": 1}}", "unknown key swap.depth", "queue_depth" },
	{ "{\"swap\": {\"session_bytes\": \"2048TiB\"}}", "swap.session_bytes", "more than 1 PiB" },
	{ "{\"swap\": {\"session_bytes\": true}}", "swap.session_bytes", "wrong type" },
	{ "{\"swap\": {\"session_bytes\": \"lots\"}}", "swap.session_bytes", "not a size" },
	{ "{\"swap\": {\"size\": 1}}", "unknown key swap.size", "session_bytes" },
	/* persist */
	{ "{\"persist\": {\"state_dir\": \"var/lib/x\"}}", "persist.state_dir", "not an absolute path" },
	{ "{\"persist\": {\"state_dir\": 1}}", "persist.state_dir", "wrong type" },
	{ "{\"persist\": {\"dir\": \"/x\"}}", "unknown key persist.dir", "state_dir" },
	{ "{\"persist\": {\"flush_interval_s\": -1}}", "persist.flush_interval_s", "from 0 to 604800" },
	{ "{\"persist\": {\"flush_interval_s\": 604801}}", "persist.flush_interval_s", "out of range" },
	{ "{\"persist\": {\"flush_interval_s\": \"60\"}}", "persist.flush_interval_s", "wrong type" },
	{ "{\"persist\": {\"flush_interval_s\": 60}}", "persist.flush_interval_s (60 s)", "persist.state_dir, which is not set" },
	{ "{\"persist\": {\"commit_wait_s\": 86401}}", "persist.commit_wait_s", "out of range" },
	{ "{\"persist\": {\"commit_wait_s\": true}}", "persist.commit_wait_s", "wrong type" },
	{ "{\"checkpoint\": {\"cow_bytes\": \"2TiB\"}}", "checkpoint.cow_bytes", "more than 1 TiB" },
	{ "{\"checkpoint\": {\"cow_bytes\": -1}}", "checkpoint.cow_bytes", "non-negative" },
	{ "{\"checkpoint\": {\"cow_bytes\": \"lots\"}}", "checkpoint.cow_bytes", "not a size" },
	{ "{\"checkpoint\": {\"budget\": 1}}", "unknown key checkpoint.budget", "cow_bytes" },
	{ "{\"checkpoint\": {\"priority\": \"high\"}}", "checkpoint.priority", "\"high\" is not one of" },
	{ "{\"checkpoint\": {\"priority\": 1}}", "checkpoint.priority", "wrong type" },
	/* Strict JSON (issue 9, item 8): what cJSON would let through. */
	{ "{\"log\": {\"level\": \"info\"}} {\"log\": {}}", "trailing data after the JSON value", "line 1, column 28" },
	{ "{\"log\": {\"level\": \"info\"}}x", "trailing data", "column 27" },
	{ "{}\n\n  ]", "trailing data", "line 3, column 3" },
	{ "{\"ring\": {\"poll_us\": 010}}", "a number with a leading zero", "column 23" },
	{ "{\"ring\": {\"poll_us\": -00}}", "leading zero", "line 1" },
	{ "{\"ring\": {\"poll_us\": 1.}}", "no digits after the decimal point", "" },
	{ "{\"ring\": {\"poll_us\": +1}}", "not a JSON value", "" },
	{ "{\"socket\": {\"dir\": \"/tmp/a\nb\"}}", "a raw control character in a string", "line 1, column 27" },
	{ "{\"socket\": {\"dir\": \"/tmp/a\tb\"}}", "raw control character", "" },
	{ "{\"socket\": {\"dir\": \"/tmp/\x1b[31m\"}}", "raw control character", "" },
	{ "{\"socket\": {\"dir\": \"/tmp/\xff\"}}", "invalid UTF-8", "" },
	{ "{\"socket\": {\"dir\": \"/tmp/\xc3\"}}", "a cut multibyte character", "" },
	{ "{\"socket\": {\"dir\": \"/tmp/\xc0\xaf\"}}", "invalid UTF-8", "" },
	{ "{\"socket\": {\"dir\": \"/tmp/\xed\xa0\x80\"}}", "surrogate", "" },
	{ "{\"socket\": {\"dir\": \"/tmp/\\x\"}}", "an unknown escape", "" },
	{ "{\"socket\": {\"dir\": \"/tmp/\\u12\"}}", "four hex digits", "" },
	{ "{\"log\": {\"level\": \"info\",}}", "object key that is not a string", "" },
	{ "{\"log\" {}}", "missing ':'", "" },
	{ "{\"log\": {\"level\": \"info\"}", "without its closing '}'", "" },
};

/* Strict JSON still takes every valid spelling. */
static void test_strict_accepts(void)
{
	static const char *const ok[] = {
		" \t\r\n{\"log\": {\"level\": \"info\"}}\n\n",
		"{\"socket\": {\"dir\": \"/tmp/caf\xc3\xa9-\\u00e9\\/\\\"q\\\"\"}}",
		"{\"ring\": {\"poll_us\": 0}, \"pool\": {\"max_bytes\": 1.073741824e9, \"numa_node\": 0}}",
		"{\"swap\": {\"dirs\": [], \"prefetch_window\": 1E1}}",
	};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct config *c = NULL;
		char err[1024] = "";

		if (config_parse(ok[i], strlen(ok[i]), "ok.json", &c, err, sizeof(err)) < 0)
			TEST_FAIL("config %s refused: %s", ok[i], err);
		config_free(c);
	}
}

static void test_refusals(void)
{
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct config *c = NULL;
		char err[1024] = "";
		int r = config_parse(bad[i].json, strlen(bad[i].json), "test.json", &c, err, sizeof(err));

		if (r != -EINVAL || c)
			TEST_FAIL("config %s was accepted (r=%d)", bad[i].json, r);
		ASSERT_CONTAINS(err, "test.json: ");
		ASSERT_CONTAINS(err, bad[i].needle1);
		ASSERT_CONTAINS(err, bad[i].needle2);
	}
}

/* limits.*: fair shares per uid, validated like every other key. */
static const struct bad bad_limits[] = {
	{ "{\"limits\": {\"sessions_per_uid\": 0}}", "limits.sessions_per_uid", "0 is out of range" },
	{ "{\"limits\": {\"sessions_per_uid\": \"4\"}}", "limits.sessions_per_uid", "wrong type" },
	{ "{\"limits\": {\"connections_per_uid\": 0}}", "limits.connections_per_uid", "out of range" },
	{ "{\"limits\": {\"connections_per_uid\": 2000000}}", "limits.connections_per_uid", "out of range" },
	{ "{\"limits\": {\"region_bytes_per_uid\": \"lots\"}}", "limits.region_bytes_per_uid", "not a size" },
	{ "{\"limits\": {\"swap_bytes_per_uid\": -1}}", "limits.swap_bytes_per_uid", "not a whole" },
	{ "{\"limits\": {\"hello_timeout_ms\": 3600001}}", "limits.hello_timeout_ms", "out of range" },
	{ "{\"limits\": {\"hello_timeout\": 5}}", "unknown key limits.hello_timeout", "hello_timeout_ms" },
	{ "{\"limits\": 5}", "limits", "expected an object" },
};

static void test_limits(void)
{
	static const char good[] = "{\"limits\": {\"sessions_per_uid\": 3, \"connections_per_uid\": 7, "
				   "\"region_bytes_per_uid\": \"2GiB\", \"swap_bytes_per_uid\": \"1TiB\", "
				   "\"hello_timeout_ms\": 0}}";
	struct config *c = NULL;
	char err[1024] = "";

	for (size_t i = 0; i < sizeof(bad_limits) / sizeof(bad_limits[0]); i++) {
		int r = config_parse(bad_limits[i].json, strlen(bad_limits[i].json), "test.json", &c, err, sizeof(err));

		if (r != -EINVAL || c)
			TEST_FAIL("config %s was accepted (r=%d)", bad_limits[i].json, r);
		ASSERT_CONTAINS(err, bad_limits[i].needle1);
		ASSERT_CONTAINS(err, bad_limits[i].needle2);
	}
	ASSERT_OK(config_parse("{}", 2, "empty", &c, err, sizeof(err)));
	ASSERT_UEQ(c->limits_sessions_per_uid, CONFIG_DEFAULT_SESSIONS_PER_UID);
	ASSERT_UEQ(c->limits_connections_per_uid, CONFIG_DEFAULT_CONNECTIONS_PER_UID);
	ASSERT_UEQ(c->limits_region_bytes_per_uid, 0);
	ASSERT_UEQ(c->limits_swap_bytes_per_uid, 0);
	ASSERT_UEQ(c->limits_hello_timeout_ms, 10000);
	c = config_free(c);
	ASSERT_OK(config_parse(good, strlen(good), "good", &c, err, sizeof(err)));
	ASSERT_UEQ(c->limits_sessions_per_uid, 3);
	ASSERT_UEQ(c->limits_connections_per_uid, 7);
	ASSERT_UEQ(c->limits_region_bytes_per_uid, 2ull << 30);
	ASSERT_UEQ(c->limits_swap_bytes_per_uid, 1ull << 40);
	ASSERT_UEQ(c->limits_hello_timeout_ms, 0);
	config_free(c);
}

static void test_swap_dir_count(void)
{
	char json[4096];
	size_t o = 0;
	struct config *c = NULL;
	char err[1024];

	o += (size_t)snprintf(json + o, sizeof(json) - o, "{\"swap\": {\"dirs\": [");
	for (int i = 0; i < CONFIG_MAX_SWAP_DIRS + 1; i++)
		o += (size_t)snprintf(json + o, sizeof(json) - o, "%s{\"path\": \"/mnt/d%d\", \"max_bytes\": \"1GiB\"}",
				      i ? "," : "", i);
	snprintf(json + o, sizeof(json) - o, "]}}");
	ASSERT_EQ(config_parse(json, strlen(json), "test.json", &c, err, sizeof(err)), -EINVAL);
	ASSERT_CONTAINS(err, "swap.dirs: 17 directories");
}

static void test_defaults_and_good(void)
{
	static const char good[] =
		"{\"socket\": {\"dir\": \"/tmp/x\", \"mode\": \"0660\", \"group\": null},"
		" \"pool\": {\"max_bytes\": \"1GiB\", \"session_max_bytes\": 268435456, \"require_locked\": false,"
		"          \"hugepages\": \"never\", \"numa_node\": 0, \"gpu\": \"3B:00.0\"},"
		" \"session\": {\"page_size\": \"1MiB\", \"ring_entries\": 64, \"max_tensors\": 10, \"max_garbage\": 5},"
		" \"ring\": {\"poll_us\": 0}, \"log\": {\"level\": \"debug\"},"
		" \"swap\": {\"dirs\": [{\"path\": \"/var/lib/spillway\", \"max_bytes\": \"64GiB\"}], \"queue_depth\": 64,"
		"          \"sqpoll\": true, \"prefetch_window\": 4, \"session_bytes\": \"16GiB\"},"
		" \"persist\": {\"state_dir\": \"/var/lib/spillway/state\", \"flush_interval_s\": 300,"
		"          \"commit_wait_s\": 900},"
		" \"checkpoint\": {\"cow_bytes\": 0, \"priority\": \"low\"}}";
	struct config *c = NULL;
	char err[1024] = "";

	ASSERT_OK(config_parse("{}", 2, "empty", &c, err, sizeof(err)));
	ASSERT_EQ(c->session_page_size, 4u << 20);
	ASSERT_EQ(c->session_ring_entries, 256);
	ASSERT_EQ(c->ring_poll_us, CONFIG_DEFAULT_POLL_US);
	ASSERT_EQ(c->session_max_garbage, 1000);
	ASSERT_TRUE(c->pool_require_locked);
	ASSERT_EQ(c->pool_hugepages, CONFIG_HUGEPAGES_AUTO);
	ASSERT_EQ(c->pool_numa_node, CONFIG_NUMA_AUTO);
	ASSERT_UEQ(c->pool_session_max_bytes, c->pool_max_bytes);
	ASSERT_EQ(c->socket_mode, 0660);
	ASSERT_EQ(c->swap_queue_depth, 32);
	ASSERT_UEQ(c->swap_session_bytes, 4ull << 30);
	ASSERT_TRUE(c->persist_state_dir == NULL);
	ASSERT_EQ(c->persist_flush_interval_s, 0u);
	ASSERT_EQ(c->persist_commit_wait_s, CONFIG_DEFAULT_COMMIT_WAIT_S);
	ASSERT_UEQ(c->checkpoint_cow_bytes, 256ull << 20);
	ASSERT_EQ(c->checkpoint_priority, CONFIG_PRIORITY_NORMAL);
	c = config_free(c);

	ASSERT_OK(config_parse(good, strlen(good), "good", &c, err, sizeof(err)));
	ASSERT_STREQ(c->socket_dir, "/tmp/x");
	ASSERT_UEQ(c->pool_max_bytes, 1ull << 30);
	ASSERT_UEQ(c->pool_session_max_bytes, 256ull << 20);
	ASSERT_TRUE(!c->pool_require_locked);
	ASSERT_EQ(c->pool_hugepages, CONFIG_HUGEPAGES_NEVER);
	ASSERT_EQ(c->pool_numa_node, 0);
	ASSERT_STREQ(c->pool_gpu, "0000:3b:00.0");
	ASSERT_EQ(c->session_page_size, 1u << 20);
	ASSERT_EQ(c->session_ring_entries, 64);
	ASSERT_EQ(c->session_max_tensors, 10);
	ASSERT_EQ(c->session_max_garbage, 5);
	ASSERT_EQ(c->ring_poll_us, 0);
	ASSERT_EQ(c->log_level, LOG_LVL_DEBUG);
	ASSERT_EQ(c->n_swap_dirs, 1);
	ASSERT_STREQ(c->swap_dirs[0].path, "/var/lib/spillway");
	ASSERT_TRUE(c->swap_sqpoll);
	ASSERT_UEQ(c->swap_session_bytes, 16ull << 30);
	ASSERT_STREQ(c->persist_state_dir, "/var/lib/spillway/state");
	ASSERT_EQ(c->persist_flush_interval_s, 300u);
	ASSERT_EQ(c->persist_commit_wait_s, 900u);
	ASSERT_UEQ(c->checkpoint_cow_bytes, 0);
	ASSERT_EQ(c->checkpoint_priority, CONFIG_PRIORITY_LOW);
	config_free(c);
	config_free(NULL);
}

static void test_sizes(void)
{
	uint64_t v = 0;

	ASSERT_OK(config_parse_size("4MiB", &v));
	ASSERT_UEQ(v, 4u << 20);
	ASSERT_OK(config_parse_size("64GiB", &v));
	ASSERT_UEQ(v, 64ull << 30);
	ASSERT_OK(config_parse_size("1 G", &v));
	ASSERT_UEQ(v, 1ull << 30);
	ASSERT_OK(config_parse_size("12345", &v));
	ASSERT_UEQ(v, 12345);
	ASSERT_OK(config_parse_size("2TiB", &v));
	ASSERT_UEQ(v, 2ull << 40);
	ASSERT_EQ(config_parse_size("4mib", &v), -EINVAL);
	ASSERT_EQ(config_parse_size("", &v), -EINVAL);
	ASSERT_EQ(config_parse_size("MiB", &v), -EINVAL);
	ASSERT_EQ(config_parse_size("-4MiB", &v), -EINVAL);
	ASSERT_EQ(config_parse_size("17179869184TiB", &v), -ERANGE);
	ASSERT_EQ(config_parse_size("18446744073709551616", &v), -ERANGE);
}

/* The config meson installs is valid here, but for its group, which only
 * sysusers.d creates. */
static void test_shipped(void)
{
	struct config *c = NULL;
	char err[1024] = "";
	int r = config_load(SPW_SHIPPED_CONFIG, &c, err, sizeof(err));

	if (r < 0) {
		ASSERT_CONTAINS(err, "socket.group: group \"spillway\" does not exist");
		return;
	}
	ASSERT_STREQ(c->socket_dir, "/run/spillway");
	ASSERT_STREQ(c->socket_group, "spillway");
	config_free(c);
}

static void test_binary(void)
{
	struct spw_test_daemon d;
	const char *check[] = { "--check-config", NULL };
	const char *junk[] = { "--no-such-option", NULL };

	ASSERT_EQ(spw_test_daemon_run_to_exit(&d, NULL, check), 0);
	ASSERT_EQ(spw_test_daemon_run_to_exit(&d, "{\"pool\": {\"max_byte\": 1}}", check), 1);
	ASSERT_EQ(spw_test_daemon_run_to_exit(&d, "{\"log\": {\"level\": \"loud\"}}", check), 1);
	/* Without --check-config a bad file must stop the daemon before it listens. */
	ASSERT_EQ(spw_test_daemon_run_to_exit(&d, "{\"socket\": {\"dir\": \"@DIR@\"}, \"ring\": {\"poll_us\": -1}}", NULL), 1);
	ASSERT_EQ(spw_test_daemon_run_to_exit(&d, NULL, junk), 2);
}

int main(void)
{
	test_refusals();
	test_strict_accepts();
	test_limits();
	test_swap_dir_count();
	test_defaults_and_good();
	test_sizes();
	test_shipped();
	test_binary();
	return 0;
}
