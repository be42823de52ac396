/* SPDX-License-Identifier: MIT */
/*
 * config-keys.c: one function per key (README.md, Configuration, says what
 * each means) and the table of sections. Cross-key checks live in
 * config.c's check_whole().
 */
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/un.h>

#include "config-private.h"
#include "log.h"
#include "metrics-addr.h"
#include "spw-proto.h"
#include "spw-ring.h"

/* The longest socket file name the daemon appends to socket.dir. */
#define SOCKET_SUFFIX "/control.sock"

#define KEYS(...) (const struct key[]){ __VA_ARGS__ }, sizeof((const struct key[]){ __VA_ARGS__ }) / sizeof(struct key)

static int k_socket_dir(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	const char *s = NULL;
	size_t max = sizeof(((struct sockaddr_un *)0)->sun_path) - sizeof(SOCKET_SUFFIX);
	int r = cfg_path(e, v, key, max, &s);

	return r < 0 ? r : cfg_set_str(&c->socket_dir, s);
}

static int k_socket_mode(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	char d[96];
	const char *s = NULL;
	unsigned long m;
	char *end;

	if (!cJSON_IsString(v))
		return cfg_fail(e, "%s: %s has the wrong type; expected an octal string like \"0660\"", key,
			    cfg_describe(v, d, sizeof(d)));
	s = v->valuestring;
	errno = 0;
	m = strtoul(s, &end, 8);
	if (!*s || *end || errno || strlen(s) > 4 || m > 0777 || strspn(s, "01234567") != strlen(s))
		return cfg_fail(e, "%s: %s is not an octal file mode from \"0000\" to \"0777\"", key, cfg_describe(v, d, sizeof(d)));
	if ((m & 0600) != 0600)
		return cfg_fail(e, "%s: %s denies the owner read/write; the daemon's own clients (root) and its owner need \"06..\"",
			    key, cfg_describe(v, d, sizeof(d)));
	c->socket_mode = (unsigned)m;
	return 0;
}

static int k_socket_group(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	char d[96];
	struct group *g;

	if (cJSON_IsNull(v)) {
		free(c->socket_group);
		c->socket_group = NULL;
		return 0;
	}
	if (!cJSON_IsString(v))
		return cfg_fail(e, "%s: %s has the wrong type; expected a group name or null", key, cfg_describe(v, d, sizeof(d)));
	errno = 0;
	g = getgrnam(v->valuestring);
	if (!g)
		return cfg_fail(e, "%s: group %s does not exist; create it (systemd-sysusers, or groupadd --system %s) or set null",
			    key, cfg_describe(v, d, sizeof(d)), v->valuestring);
	c->socket_gid = g->gr_gid;
	return cfg_set_str(&c->socket_group, v->valuestring);
}

static int k_pool_max_bytes(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	char d[96], m[32];
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	uint64_t x = 0, phys = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
	int r = cfg_size(e, v, key, SPW_PAGE_SIZE_MIN, &x);

	if (r < 0)
		return r;
	if (phys && x > phys)
		return cfg_fail(e, "%s: %s is more than this host's memory (%s); pinned memory cannot exceed it", key,
			    cfg_describe(v, d, sizeof(d)), format_bytes(phys, m, sizeof(m)));
	c->pool_max_bytes = x;
	return 0;
}

static int k_pool_session_max_bytes(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return cfg_size(e, v, key, SPW_PAGE_SIZE_MIN, &c->pool_session_max_bytes);
}

static int k_pool_require_locked(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return cfg_bool(e, v, key, &c->pool_require_locked);
}

static int k_pool_hugepages(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return cfg_choice(e, v, key, config_hugepages_name, CONFIG_HUGEPAGES_AUTO, CONFIG_HUGEPAGES_NEVER,
			  &c->pool_hugepages);
}

static int k_pool_numa_node(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	char d[96], path[64];
	uint64_t n = 0;
	int r;

	if (cJSON_IsString(v) && !strcmp(v->valuestring, "auto")) {
		c->pool_numa_node = CONFIG_NUMA_AUTO;
		return 0;
	}
	if (!cJSON_IsNumber(v))
		return cfg_fail(e, "%s: %s has the wrong type; expected \"auto\" or a node number", key, cfg_describe(v, d, sizeof(d)));
	r = cfg_uint(e, v, key, 0, 1023, &n);
	if (r < 0)
		return r;
	snprintf(path, sizeof(path), "/sys/devices/system/node/node%llu", (unsigned long long)n);
	if (access("/sys/devices/system/node", F_OK) == 0 && access(path, F_OK) < 0)
		return cfg_fail(e, "%s: NUMA node %s does not exist on this host (see /sys/devices/system/node); use \"auto\"",
			    key, cfg_describe(v, d, sizeof(d)));
	c->pool_numa_node = (int)n;
	return 0;
}

static int pci_address_valid(const char *s)
{
	/* [DDDD:]BB:DD.F, hex digits; the function is 0-7. */
	size_t n = strlen(s), i = 0;
	const char *pat = n == 12 ? "xxxx:xx:xx.f" : n == 7 ? "xx:xx.f" : NULL;

	if (!pat)
		return 0;
	for (; i < n; i++) {
		if (pat[i] == 'x' && !isxdigit((unsigned char)s[i]))
			return 0;
		if (pat[i] == 'f' && (s[i] < '0' || s[i] > '7'))
			return 0;
		if ((pat[i] == ':' || pat[i] == '.') && s[i] != pat[i])
			return 0;
	}
	return 1;
}

static int k_pool_gpu(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	char d[96], full[16];

	if (cJSON_IsNull(v)) {
		free(c->pool_gpu);
		c->pool_gpu = NULL;
		return 0;
	}
	if (!cJSON_IsString(v))
		return cfg_fail(e, "%s: %s has the wrong type; expected a PCI address string like \"0000:3b:00.0\" or null",
			    key, cfg_describe(v, d, sizeof(d)));
	if (!pci_address_valid(v->valuestring))
		return cfg_fail(e, "%s: %s is not a PCI address like \"0000:3b:00.0\" (see lspci -D)", key,
			    cfg_describe(v, d, sizeof(d)));
	snprintf(full, sizeof(full), "%s%s", strlen(v->valuestring) == 7 ? "0000:" : "", v->valuestring);
	for (char *p = full; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	return cfg_set_str(&c->pool_gpu, full);
}

static int k_session_page_size(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	char d[96];
	uint64_t x = 0;
	int r = cfg_size(e, v, key, 0, &x);

	if (r < 0)
		return r;
	if (!spw_proto_page_size_valid(x))
		return cfg_fail(e, "%s: %s is not a power of two from 64 KiB to 64 MiB", key, cfg_describe(v, d, sizeof(d)));
	c->session_page_size = (uint32_t)x;
	return 0;
}

static int k_session_ring_entries(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	char d[96];
	uint64_t x = 0;
	int r = cfg_uint(e, v, key, SPW_RING_ENTRIES_MIN, SPW_RING_ENTRIES_MAX, &x);

	if (r < 0)
		return r;
	if (x & (x - 1))
		return cfg_fail(e, "%s: %s is not a power of two (%u..%u)", key, cfg_describe(v, d, sizeof(d)),
			    SPW_RING_ENTRIES_MIN, SPW_RING_ENTRIES_MAX);
	c->session_ring_entries = (uint32_t)x;
	return 0;
}

static int k_session_max_tensors(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return cfg_u32(e, v, key, 1, 1u << 20, &c->session_max_tensors);
}

static int k_session_max_garbage(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return cfg_u32(e, v, key, 1, 1000000000, &c->session_max_garbage);
}

static int k_ring_poll_us(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return cfg_u32(e, v, key, 0, 1000000, &c->ring_poll_us);
}

static int k_log_level(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return cfg_choice(e, v, key, log_level_name, LOG_LVL_ERROR, LOG_LVL_DEBUG, &c->log_level);
}

static int k_swap_dirs(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	char d[96], k[64];
	const cJSON *item;
	size_t i = 0;
	int r;

	if (!cJSON_IsArray(v))
		return cfg_fail(e, "%s: %s has the wrong type; expected an array of {\"path\", \"max_bytes\"}", key,
			    cfg_describe(v, d, sizeof(d)));
	if (cJSON_GetArraySize(v) > CONFIG_MAX_SWAP_DIRS)
		return cfg_fail(e, "%s: %d directories is more than the %d allowed", key, cJSON_GetArraySize(v),
			    CONFIG_MAX_SWAP_DIRS);
	for (size_t j = 0; j < c->n_swap_dirs; j++) {
		free(c->swap_dirs[j].path);
		c->swap_dirs[j].path = NULL;
	}
	c->n_swap_dirs = 0;
	cJSON_ArrayForEach(item, v) {
		struct config_swap_dir *sd = &c->swap_dirs[i];
		const cJSON *f;
		bool have_path = false, have_max = false;

		if (!cJSON_IsObject(item))
			return cfg_fail(e, "%s[%zu]: %s has the wrong type; expected {\"path\": ..., \"max_bytes\": ...}", key, i,
				    cfg_describe(item, d, sizeof(d)));
		c->n_swap_dirs = i + 1;
		cJSON_ArrayForEach(f, item) {
			const char *s = NULL;

			snprintf(k, sizeof(k), "%s[%zu].%s", key, i, f->string);
			if (!strcmp(f->string, "path")) {
				if (have_path)
					return cfg_fail(e, "%s appears twice", k);
				r = cfg_path(e, f, k, 4000, &s);
				if (r < 0)
					return r;
				r = cfg_set_str(&sd->path, s);
				if (r < 0)
					return r;
				have_path = true;
			} else if (!strcmp(f->string, "max_bytes")) {
				if (have_max)
					return cfg_fail(e, "%s appears twice", k);
				r = cfg_size(e, f, k, SPW_PAGE_SIZE_MIN, &sd->max_bytes);
				if (r < 0)
					return r;
				have_max = true;
			} else {
				return cfg_fail(e, "unknown key %s (a swap directory takes: path, max_bytes)", k);
			}
		}
		if (!have_path || !have_max)
			return cfg_fail(e, "%s[%zu]: missing \"%s\"", key, i, have_path ? "max_bytes" : "path");
		for (size_t j = 0; j < i; j++)
			if (!strcmp(c->swap_dirs[j].path, sd->path))
				return cfg_fail(e, "%s[%zu].path: \"%s\" is listed twice", key, i, sd->path);
		i++;
	}
	return 0;
}

static int k_swap_queue_depth(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return cfg_u32(e, v, key, 1, 4096, &c->swap_queue_depth);
}

static int k_swap_sqpoll(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return cfg_bool(e, v, key, &c->swap_sqpoll);
}

static int k_swap_prefetch_window(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return cfg_u32(e, v, key, 0, 65536, &c->swap_prefetch_window);
}

static int k_swap_session_bytes(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	/* 2^50: far beyond any drive, and page counts stay well inside 32 bits
	 * at the smallest page size once divided across the directories. */
	char d[96];
	uint64_t x = 0;
	int r = cfg_size(e, v, key, 0, &x);

	if (r < 0)
		return r;
	if (x > (1ull << 50))
		return cfg_fail(e, "%s: %s is more than 1 PiB; no session can use that much swap", key,
			    cfg_describe(v, d, sizeof(d)));
	c->swap_session_bytes = x;
	return 0;
}

/* limits.*: one function per key, as for every other section. */
#define LIMIT_UINT(fn, field, lo, hi) \
	static int fn(struct perr *e, struct config *c, const cJSON *v, const char *key) \
	{ \
		uint64_t x = 0; \
		int r = cfg_uint(e, v, key, lo, hi, &x); \
		if (r == 0) \
			c->field = (uint32_t)x; \
		return r; \
	}
#define LIMIT_SIZE(fn, field) \
	static int fn(struct perr *e, struct config *c, const cJSON *v, const char *key) \
	{ \
		return cfg_size(e, v, key, 0, &c->field); \
	}
LIMIT_UINT(k_limits_sessions, limits_sessions_per_uid, 1, 1000000)
LIMIT_UINT(k_limits_connections, limits_connections_per_uid, 1, 1000000)
LIMIT_UINT(k_limits_hello_timeout, limits_hello_timeout_ms, 0, 3600000)
LIMIT_UINT(k_limits_ring_ops, limits_ring_ops_per_s, 0, 1000000000)
LIMIT_UINT(k_limits_lease_max, limits_lease_max_s, 1, CONFIG_DEFAULT_LEASE_MAX_S)
LIMIT_SIZE(k_limits_region_bytes, limits_region_bytes_per_uid)
LIMIT_SIZE(k_limits_swap_bytes, limits_swap_bytes_per_uid)

static int k_metrics_listen(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	char d[96], why[160];
	struct metrics_addr a;

	if (cJSON_IsNull(v)) {
		free(c->metrics_listen);
		c->metrics_listen = NULL;
		return 0;
	}
	if (!cJSON_IsString(v))
		return cfg_fail(e, "%s: %s has the wrong type; expected \"ADDRESS:PORT\", a unix socket path or null", key,
			    cfg_describe(v, d, sizeof(d)));
	if (metrics_addr_parse(v->valuestring, &a, why, sizeof(why)) < 0)
		return cfg_fail(e, "%s: %s %s", key, cfg_describe(v, d, sizeof(d)), why);
	return cfg_set_str(&c->metrics_listen, v->valuestring);
}

static int k_metrics_allow_remote(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return cfg_bool(e, v, key, &c->metrics_allow_remote);
}

static int k_persist_state_dir(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	const char *s = NULL;
	int r;

	if (cJSON_IsNull(v)) {
		free(c->persist_state_dir);
		c->persist_state_dir = NULL;
		return 0;
	}
	/* Room for a session's directory name and its .tmp-PID suffix. */
	r = cfg_path(e, v, key, 4096 - SPW_PROTO_MAX_SESSION_NAME - 32, &s);
	return r < 0 ? r : cfg_set_str(&c->persist_state_dir, s);
}

/* persist.flush_interval_s: a flush (a save into persist.state_dir at a
 * commit point) of every persistent session that committed since its last
 * one; 0 is off. At most a week. */
LIMIT_UINT(k_persist_flush_interval, persist_flush_interval_s, 0, 7u * 24u * 3600u)

/* persist.commit_wait_s: a step of a big model on NVMe takes minutes, and
 * a session not at a commit point when SIGTERM comes is saved only once
 * its trainer reaches one. At most a day; 0 saves only what is at one. */
LIMIT_UINT(k_persist_commit_wait, persist_commit_wait_s, 0, 24u * 3600u)
static int k_checkpoint_cow_bytes(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	char d[96];
	uint64_t x = 0;
	int r = cfg_size(e, v, key, 0, &x);

	if (r < 0)
		return r;
	/* Memory the daemon allocates for a client's session: bounded. */
	if (x > CONFIG_MAX_CHECKPOINT_COW_BYTES)
		return cfg_fail(e, "%s: %s is more than 1 TiB; the side buffers are daemon memory (0 makes every change "
			    "of a page not yet copied wait for the copy)", key, cfg_describe(v, d, sizeof(d)));
	c->checkpoint_cow_bytes = x;
	return 0;
}

static int k_checkpoint_priority(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return cfg_choice(e, v, key, config_priority_name, CONFIG_PRIORITY_LOW, CONFIG_PRIORITY_NORMAL,
			  &c->checkpoint_priority);
}

const struct section cfg_sections[] = {
	{ "socket", KEYS({ "dir", k_socket_dir }, { "mode", k_socket_mode }, { "group", k_socket_group }) },
	{ "pool", KEYS({ "max_bytes", k_pool_max_bytes }, { "session_max_bytes", k_pool_session_max_bytes },
		       { "require_locked", k_pool_require_locked }, { "hugepages", k_pool_hugepages },
		       { "numa_node", k_pool_numa_node }, { "gpu", k_pool_gpu }) },
	{ "session", KEYS({ "page_size", k_session_page_size }, { "ring_entries", k_session_ring_entries },
			  { "max_tensors", k_session_max_tensors }, { "max_garbage", k_session_max_garbage }) },
	{ "ring", KEYS({ "poll_us", k_ring_poll_us }) },
	{ "log", KEYS({ "level", k_log_level }) },
	{ "swap", KEYS({ "dirs", k_swap_dirs }, { "queue_depth", k_swap_queue_depth }, { "sqpoll", k_swap_sqpoll },
		       { "prefetch_window", k_swap_prefetch_window }, { "session_bytes", k_swap_session_bytes }) },
	{ "limits", KEYS({ "sessions_per_uid", k_limits_sessions }, { "connections_per_uid", k_limits_connections },
			 { "region_bytes_per_uid", k_limits_region_bytes }, { "swap_bytes_per_uid", k_limits_swap_bytes },
			 { "hello_timeout_ms", k_limits_hello_timeout }, { "ring_ops_per_s", k_limits_ring_ops },
			 { "lease_max_s", k_limits_lease_max }) },
	{ "metrics", KEYS({ "listen", k_metrics_listen }, { "allow_remote", k_metrics_allow_remote }) },
	{ "persist", KEYS({ "state_dir", k_persist_state_dir }, { "flush_interval_s", k_persist_flush_interval },
			 { "commit_wait_s", k_persist_commit_wait }) },
	{ "checkpoint", KEYS({ "cow_bytes", k_checkpoint_cow_bytes }, { "priority", k_checkpoint_priority }) },
};

const size_t cfg_nsections = sizeof(cfg_sections) / sizeof(cfg_sections[0]);
