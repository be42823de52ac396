/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "daemon-config.h"
#include "json-strict.h"
#include "log.h"
#include "metrics-addr.h"
#include "spw-proto.h"
#include "spw-ring.h"
#include "util/json.h"

/* The longest socket file name the daemon appends to socket.dir. */
#define SOCKET_SUFFIX "/control.sock"

struct perr {
	char *buf;
	size_t len;
	const char *origin;
};

static int fail(struct perr *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct perr *e, const char *fmt, ...)
{
	va_list ap;
	int n;

	n = snprintf(e->buf, e->len, "%s: ", e->origin);
	if (n < 0 || (size_t)n >= e->len)
		return -EINVAL;
	va_start(ap, fmt);
	vsnprintf(e->buf + n, e->len - (size_t)n, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* A short, printable rendering of a JSON value for messages. */
static const char *describe(const cJSON *v, char *buf, size_t len)
{
	if (cJSON_IsString(v)) {
		size_t o = 0;
		const char *s = v->valuestring;

		buf[o++] = '"';
		for (; *s && o + 5 < len && o < 64; s++)
			buf[o++] = isprint((unsigned char)*s) ? *s : '?';
		if (*s)
			o += (size_t)snprintf(buf + o, len - o, "...");
		snprintf(buf + o, len - o, "\"");
	} else if (cJSON_IsNumber(v)) {
		snprintf(buf, len, "%.17g", v->valuedouble);
	} else if (cJSON_IsBool(v)) {
		snprintf(buf, len, "%s", cJSON_IsTrue(v) ? "true" : "false");
	} else if (cJSON_IsNull(v)) {
		snprintf(buf, len, "null");
	} else if (cJSON_IsArray(v)) {
		snprintf(buf, len, "an array");
	} else if (cJSON_IsObject(v)) {
		snprintf(buf, len, "an object");
	} else {
		snprintf(buf, len, "an invalid value");
	}
	return buf;
}

int config_parse_size(const char *s, uint64_t *ret)
{
	static const struct {
		const char *suffix;
		unsigned shift;
	} units[] = {
		{ "", 0 },   { "B", 0 },    { "K", 10 },   { "KiB", 10 }, { "M", 20 },
		{ "MiB", 20 }, { "G", 30 }, { "GiB", 30 }, { "T", 40 },   { "TiB", 40 },
	};
	uint64_t v = 0;
	const char *p = s;

	if (!s || !isdigit((unsigned char)*p))
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	while (*p == ' ')
		p++;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(p, units[i].suffix))
			continue;
		if (units[i].shift && v > (UINT64_MAX >> units[i].shift))
			return -ERANGE;
		*ret = v << units[i].shift;
		return 0;
	}
	return -EINVAL;
}

static int get_size(struct perr *e, const cJSON *v, const char *key, uint64_t min, uint64_t *ret)
{
	char d[96], m[32];
	uint64_t x = 0;
	int r;

	if (cJSON_IsString(v)) {
		r = config_parse_size(v->valuestring, &x);
		if (r == -ERANGE)
			return fail(e, "%s: %s does not fit in 64 bits", key, describe(v, d, sizeof(d)));
		if (r < 0)
			return fail(e, "%s: %s is not a size (write a byte count or a string like \"4MiB\", \"64GiB\")",
				    key, describe(v, d, sizeof(d)));
	} else if (cJSON_IsNumber(v)) {
		if (json_uint(v, JSON_UINT_MAX, &x) < 0)
			return fail(e, "%s: %s is not a whole, non-negative number of bytes up to 2^53",
				    key, describe(v, d, sizeof(d)));
	} else {
		return fail(e, "%s: %s has the wrong type; expected a size (a byte count or a string like \"4MiB\")",
			    key, describe(v, d, sizeof(d)));
	}
	if (x < min)
		return fail(e, "%s: %s is too small; the least allowed is %s", key, describe(v, d, sizeof(d)),
			    format_bytes(min, m, sizeof(m)));
	*ret = x;
	return 0;
}

static int get_uint(struct perr *e, const cJSON *v, const char *key, uint64_t min, uint64_t max, uint64_t *ret)
{
	char d[96];
	uint64_t x = 0;

	if (!cJSON_IsNumber(v))
		return fail(e, "%s: %s has the wrong type; expected an integer", key, describe(v, d, sizeof(d)));
	if (json_uint(v, max, &x) < 0 || x < min)
		return fail(e, "%s: %s is out of range; expected an integer from %llu to %llu", key,
			    describe(v, d, sizeof(d)), (unsigned long long)min, (unsigned long long)max);
	*ret = x;
	return 0;
}

/* get_uint() into a 32-bit field (max fits in one). */
static int get_u32(struct perr *e, const cJSON *v, const char *key, uint32_t min, uint32_t max, uint32_t *ret)
{
	uint64_t x = 0;
	int r = get_uint(e, v, key, min, max, &x);

	if (r == 0)
		*ret = (uint32_t)x;
	return r;
}

static int get_bool(struct perr *e, const cJSON *v, const char *key, bool *ret)
{
	char d[96];

	if (!cJSON_IsBool(v))
		return fail(e, "%s: %s has the wrong type; expected true or false", key, describe(v, d, sizeof(d)));
	*ret = cJSON_IsTrue(v);
	return 0;
}

static int get_string(struct perr *e, const cJSON *v, const char *key, const char **ret)
{
	char d[96];

	if (!cJSON_IsString(v))
		return fail(e, "%s: %s has the wrong type; expected a string", key, describe(v, d, sizeof(d)));
	*ret = v->valuestring;
	return 0;
}

static int set_str(char **dst, const char *s)
{
	char *n = strdup(s);

	if (!n)
		return -ENOMEM;
	free(*dst);
	*dst = n;
	return 0;
}

static int path_ok(struct perr *e, const cJSON *v, const char *key, size_t maxlen, const char **ret)
{
	char d[96];
	const char *s = NULL;
	int r = get_string(e, v, key, &s);

	if (r < 0)
		return r;
	if (s[0] != '/')
		return fail(e, "%s: %s is not an absolute path", key, describe(v, d, sizeof(d)));
	if (strlen(s) > maxlen)
		return fail(e, "%s: %s is longer than %zu bytes", key, describe(v, d, sizeof(d)), maxlen);
	*ret = s;
	return 0;
}

/* --- one function per key ----------------------------------------------- */

typedef int (*key_fn)(struct perr *e, struct config *c, const cJSON *v, const char *key);

static int k_socket_dir(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	const char *s = NULL;
	size_t max = sizeof(((struct sockaddr_un *)0)->sun_path) - sizeof(SOCKET_SUFFIX);
	int r = path_ok(e, v, key, max, &s);

	return r < 0 ? r : set_str(&c->socket_dir, s);
}

static int k_socket_mode(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	char d[96];
	const char *s = NULL;
	unsigned long m;
	char *end;

	if (!cJSON_IsString(v))
		return fail(e, "%s: %s has the wrong type; expected an octal string like \"0660\"", key,
			    describe(v, d, sizeof(d)));
	s = v->valuestring;
	errno = 0;
	m = strtoul(s, &end, 8);
	if (!*s || *end || errno || strlen(s) > 4 || m > 0777 || strspn(s, "01234567") != strlen(s))
		return fail(e, "%s: %s is not an octal file mode from \"0000\" to \"0777\"", key, describe(v, d, sizeof(d)));
	if ((m & 0600) != 0600)
		return fail(e, "%s: %s denies the owner read/write; the daemon's own clients (root) and its owner need \"06..\"",
			    key, describe(v, d, sizeof(d)));
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
		return fail(e, "%s: %s has the wrong type; expected a group name or null", key, describe(v, d, sizeof(d)));
	errno = 0;
	g = getgrnam(v->valuestring);
	if (!g)
		return fail(e, "%s: group %s does not exist; create it (systemd-sysusers, or groupadd --system %s) or set null",
			    key, describe(v, d, sizeof(d)), v->valuestring);
	c->socket_gid = g->gr_gid;
	return set_str(&c->socket_group, v->valuestring);
}

static int k_pool_max_bytes(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	char d[96], m[32];
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	uint64_t x = 0, phys = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
	int r = get_size(e, v, key, SPW_PAGE_SIZE_MIN, &x);

	if (r < 0)
		return r;
	if (phys && x > phys)
		return fail(e, "%s: %s is more than this host's memory (%s); pinned memory cannot exceed it", key,
			    describe(v, d, sizeof(d)), format_bytes(phys, m, sizeof(m)));
	c->pool_max_bytes = x;
	return 0;
}

static int k_pool_session_max_bytes(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return get_size(e, v, key, SPW_PAGE_SIZE_MIN, &c->pool_session_max_bytes);
}

static int k_pool_require_locked(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return get_bool(e, v, key, &c->pool_require_locked);
}

static int k_pool_hugepages(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	char d[96];
	const char *s = NULL;
	int r = get_string(e, v, key, &s);

	if (r < 0)
		return r;
	for (int i = CONFIG_HUGEPAGES_AUTO; i <= CONFIG_HUGEPAGES_NEVER; i++) {
		if (!strcmp(s, config_hugepages_name(i))) {
			c->pool_hugepages = i;
			return 0;
		}
	}
	return fail(e, "%s: %s is not one of \"auto\", \"always\", \"never\"", key, describe(v, d, sizeof(d)));
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
		return fail(e, "%s: %s has the wrong type; expected \"auto\" or a node number", key, describe(v, d, sizeof(d)));
	r = get_uint(e, v, key, 0, 1023, &n);
	if (r < 0)
		return r;
	snprintf(path, sizeof(path), "/sys/devices/system/node/node%llu", (unsigned long long)n);
	if (access("/sys/devices/system/node", F_OK) == 0 && access(path, F_OK) < 0)
		return fail(e, "%s: NUMA node %s does not exist on this host (see /sys/devices/system/node); use \"auto\"",
			    key, describe(v, d, sizeof(d)));
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
		return fail(e, "%s: %s has the wrong type; expected a PCI address string like \"0000:3b:00.0\" or null",
			    key, describe(v, d, sizeof(d)));
	if (!pci_address_valid(v->valuestring))
		return fail(e, "%s: %s is not a PCI address like \"0000:3b:00.0\" (see lspci -D)", key,
			    describe(v, d, sizeof(d)));
	snprintf(full, sizeof(full), "%s%s", strlen(v->valuestring) == 7 ? "0000:" : "", v->valuestring);
	for (char *p = full; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	return set_str(&c->pool_gpu, full);
}

static int k_session_page_size(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	char d[96];
	uint64_t x = 0;
	int r = get_size(e, v, key, 0, &x);

	if (r < 0)
		return r;
	if (!spw_proto_page_size_valid(x))
		return fail(e, "%s: %s is not a power of two from 64 KiB to 64 MiB", key, describe(v, d, sizeof(d)));
	c->session_page_size = (uint32_t)x;
	return 0;
}

static int k_session_ring_entries(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	char d[96];
	uint64_t x = 0;
	int r = get_uint(e, v, key, SPW_RING_ENTRIES_MIN, SPW_RING_ENTRIES_MAX, &x);

	if (r < 0)
		return r;
	if (x & (x - 1))
		return fail(e, "%s: %s is not a power of two (%u..%u)", key, describe(v, d, sizeof(d)),
			    SPW_RING_ENTRIES_MIN, SPW_RING_ENTRIES_MAX);
	c->session_ring_entries = (uint32_t)x;
	return 0;
}

static int k_session_max_tensors(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return get_u32(e, v, key, 1, 1u << 20, &c->session_max_tensors);
}

static int k_session_max_garbage(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return get_u32(e, v, key, 1, 1000000000, &c->session_max_garbage);
}

static int k_ring_poll_us(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return get_u32(e, v, key, 0, 1000000, &c->ring_poll_us);
}

static int k_log_level(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	char d[96];
	const char *s = NULL;
	int r = get_string(e, v, key, &s);

	if (r < 0)
		return r;
	r = log_level_from_string(s);
	if (r < 0)
		return fail(e, "%s: %s is not one of \"error\", \"warn\", \"info\", \"debug\"", key, describe(v, d, sizeof(d)));
	c->log_level = r;
	return 0;
}

static int k_swap_dirs(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	char d[96], k[64];
	const cJSON *item;
	size_t i = 0;
	int r;

	if (!cJSON_IsArray(v))
		return fail(e, "%s: %s has the wrong type; expected an array of {\"path\", \"max_bytes\"}", key,
			    describe(v, d, sizeof(d)));
	if (cJSON_GetArraySize(v) > CONFIG_MAX_SWAP_DIRS)
		return fail(e, "%s: %d directories is more than the %d allowed", key, cJSON_GetArraySize(v),
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
			return fail(e, "%s[%zu]: %s has the wrong type; expected {\"path\": ..., \"max_bytes\": ...}", key, i,
				    describe(item, d, sizeof(d)));
		c->n_swap_dirs = i + 1;
		cJSON_ArrayForEach(f, item) {
			const char *s = NULL;

			snprintf(k, sizeof(k), "%s[%zu].%s", key, i, f->string);
			if (!strcmp(f->string, "path")) {
				if (have_path)
					return fail(e, "%s appears twice", k);
				r = path_ok(e, f, k, 4000, &s);
				if (r < 0)
					return r;
				r = set_str(&sd->path, s);
				if (r < 0)
					return r;
				have_path = true;
			} else if (!strcmp(f->string, "max_bytes")) {
				if (have_max)
					return fail(e, "%s appears twice", k);
				r = get_size(e, f, k, SPW_PAGE_SIZE_MIN, &sd->max_bytes);
				if (r < 0)
					return r;
				have_max = true;
			} else {
				return fail(e, "unknown key %s (a swap directory takes: path, max_bytes)", k);
			}
		}
		if (!have_path || !have_max)
			return fail(e, "%s[%zu]: missing \"%s\"", key, i, have_path ? "max_bytes" : "path");
		for (size_t j = 0; j < i; j++)
			if (!strcmp(c->swap_dirs[j].path, sd->path))
				return fail(e, "%s[%zu].path: \"%s\" is listed twice", key, i, sd->path);
		i++;
	}
	return 0;
}

static int k_swap_queue_depth(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return get_u32(e, v, key, 1, 4096, &c->swap_queue_depth);
}

static int k_swap_sqpoll(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return get_bool(e, v, key, &c->swap_sqpoll);
}

static int k_swap_prefetch_window(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return get_u32(e, v, key, 0, 65536, &c->swap_prefetch_window);
}

static int k_swap_session_bytes(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	/* 2^50: far beyond any drive, and page counts stay well inside 32 bits
	 * at the smallest page size once divided across the directories. */
	char d[96];
	uint64_t x = 0;
	int r = get_size(e, v, key, 0, &x);

	if (r < 0)
		return r;
	if (x > (1ull << 50))
		return fail(e, "%s: %s is more than 1 PiB; no session can use that much swap", key,
			    describe(v, d, sizeof(d)));
	c->swap_session_bytes = x;
	return 0;
}

/* limits.*: one function per key, as for every other section. */
#define LIMIT_UINT(fn, field, lo, hi) \
	static int fn(struct perr *e, struct config *c, const cJSON *v, const char *key) \
	{ \
		uint64_t x = 0; \
		int r = get_uint(e, v, key, lo, hi, &x); \
		if (r == 0) \
			c->field = (uint32_t)x; \
		return r; \
	}
#define LIMIT_SIZE(fn, field) \
	static int fn(struct perr *e, struct config *c, const cJSON *v, const char *key) \
	{ \
		return get_size(e, v, key, 0, &c->field); \
	}
LIMIT_UINT(k_limits_sessions, limits_sessions_per_uid, 1, 1000000)
LIMIT_UINT(k_limits_connections, limits_connections_per_uid, 1, 1000000)
LIMIT_UINT(k_limits_hello_timeout, limits_hello_timeout_ms, 0, 3600000)
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
		return fail(e, "%s: %s has the wrong type; expected \"ADDRESS:PORT\", a unix socket path or null", key,
			    describe(v, d, sizeof(d)));
	if (metrics_addr_parse(v->valuestring, &a, why, sizeof(why)) < 0)
		return fail(e, "%s: %s %s", key, describe(v, d, sizeof(d)), why);
	return set_str(&c->metrics_listen, v->valuestring);
}

static int k_metrics_allow_remote(struct perr *e, struct config *c, const cJSON *v, const char *key)
{
	return get_bool(e, v, key, &c->metrics_allow_remote);
}

struct key {
	const char *name;
	key_fn fn;
};

struct section {
	const char *name;
	const struct key *keys;
	size_t n;
};

#define KEYS(...) (const struct key[]){ __VA_ARGS__ }, sizeof((const struct key[]){ __VA_ARGS__ }) / sizeof(struct key)

static const struct section sections[] = {
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
			 { "hello_timeout_ms", k_limits_hello_timeout }) },
	{ "metrics", KEYS({ "listen", k_metrics_listen }, { "allow_remote", k_metrics_allow_remote }) },
};

static void list_keys(const struct section *s, char *buf, size_t len)
{
	size_t o = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < s->n && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", s->keys[i].name);
}

static int parse_section(struct perr *e, struct config *c, const struct section *s, const cJSON *obj,
			 bool *seen_session_max)
{
	char d[96], known[256], key[128];
	const cJSON *v;

	if (!cJSON_IsObject(obj))
		return fail(e, "%s: %s has the wrong type; expected an object", s->name, describe(obj, d, sizeof(d)));
	cJSON_ArrayForEach(v, obj) {
		const struct key *k = NULL;
		int r;

		snprintf(key, sizeof(key), "%s.%s", s->name, v->string);
		for (size_t i = 0; i < s->n; i++)
			if (!strcmp(v->string, s->keys[i].name))
				k = &s->keys[i];
		if (!k) {
			list_keys(s, known, sizeof(known));
			return fail(e, "unknown key %s (%s takes: %s)", key, s->name, known);
		}
		for (const cJSON *w = obj->child; w != v; w = w->next)
			if (!strcmp(w->string, v->string))
				return fail(e, "%s appears twice", key);
		r = k->fn(e, c, v, key);
		if (r < 0)
			return r;
		if (k->fn == k_pool_session_max_bytes)
			*seen_session_max = true;
	}
	return 0;
}

static int set_defaults(struct perr *e, struct config *c)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	uint64_t phys = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 8ull << 30;
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	char dir[256];

	if (geteuid() == 0) {
		c->socket_dir = strdup("/run/spillway");
	} else if (xdg && xdg[0] == '/' && strlen(xdg) < 80) {
		snprintf(dir, sizeof(dir), "%s/spillway", xdg);
		c->socket_dir = strdup(dir);
	}
	if (geteuid() == 0 && !c->socket_dir)
		return -ENOMEM;
	c->socket_mode = 0660;
	c->pool_max_bytes = (phys / 2) & ~((uint64_t)SPW_PAGE_SIZE_MAX - 1);
	if (c->pool_max_bytes < SPW_PAGE_SIZE_MAX)
		c->pool_max_bytes = (phys / 2) & ~((uint64_t)SPW_PAGE_SIZE_MIN - 1);
	c->pool_session_max_bytes = c->pool_max_bytes;
	c->pool_require_locked = true;
	c->pool_hugepages = CONFIG_HUGEPAGES_AUTO;
	c->pool_numa_node = CONFIG_NUMA_AUTO;
	c->session_page_size = SPW_PAGE_SIZE_DEFAULT;
	c->session_ring_entries = SPW_RING_ENTRIES_DEFAULT;
	c->session_max_tensors = CONFIG_DEFAULT_MAX_TENSORS;
	c->session_max_garbage = CONFIG_DEFAULT_MAX_GARBAGE;
	c->ring_poll_us = CONFIG_DEFAULT_POLL_US;
	c->log_level = LOG_LVL_INFO;
	c->swap_queue_depth = 32;
	c->swap_sqpoll = false;
	c->swap_prefetch_window = 8;
	c->swap_session_bytes = CONFIG_DEFAULT_SWAP_SESSION_BYTES;
	c->limits_sessions_per_uid = CONFIG_DEFAULT_SESSIONS_PER_UID;
	c->limits_connections_per_uid = CONFIG_DEFAULT_CONNECTIONS_PER_UID;
	c->limits_hello_timeout_ms = CONFIG_DEFAULT_HELLO_TIMEOUT_MS;
	(void)e;
	return 0;
}

static int check_whole(struct perr *e, struct config *c, bool seen_session_max)
{
	char a[32], b[32];

	if (!seen_session_max)
		c->pool_session_max_bytes = c->pool_max_bytes;
	if (c->pool_session_max_bytes > c->pool_max_bytes)
		return fail(e, "pool.session_max_bytes (%s) exceeds pool.max_bytes (%s); no session could ever use it all",
			    format_bytes(c->pool_session_max_bytes, a, sizeof(a)),
			    format_bytes(c->pool_max_bytes, b, sizeof(b)));
	if (c->session_page_size > c->pool_session_max_bytes)
		return fail(e, "session.page_size (%s) exceeds pool.session_max_bytes (%s); no session could hold one page",
			    format_bytes(c->session_page_size, a, sizeof(a)),
			    format_bytes(c->pool_session_max_bytes, b, sizeof(b)));
	if (c->metrics_listen) {
		struct metrics_addr m;

		if (metrics_addr_parse(c->metrics_listen, &m, a, sizeof(a)) == 0 && !m.loopback && !c->metrics_allow_remote)
			return fail(e, "metrics.listen: \"%s\" is not a loopback address; the metrics name every session "
				       "to whoever connects: set metrics.allow_remote: true to serve it anyway, or listen "
				       "on 127.0.0.1", c->metrics_listen);
	}
	if (!c->socket_dir)
		return fail(e, "socket.dir is not set and $XDG_RUNTIME_DIR is unset or unusable; set socket.dir "
			       "or run with XDG_RUNTIME_DIR");
	return 0;
}

int config_parse(const char *json, size_t len, const char *origin, struct config **ret, char *err, size_t errlen)
{
	struct perr e = { .buf = err, .len = errlen, .origin = origin };
	struct config *c = NULL;
	cJSON *root = NULL;
	const char *end = NULL;
	bool seen_session_max = false;
	char d[96];
	int r;

	c = calloc(1, sizeof(*c));
	if (!c) {
		r = -ENOMEM;
		goto out;
	}
	c->origin = strdup(origin);
	r = c->origin ? set_defaults(&e, c) : -ENOMEM;
	if (r < 0)
		goto out;
	if (json) {
		const cJSON *sec;
		const char *why = NULL;
		size_t at = 0;

		/* cJSON ignores trailing data and takes leading zeros and raw
		 * control characters; refuse what is not JSON before it looks. */
		if (json_strict_check(json, len, &at, &why) < 0) {
			unsigned line, col;

			json_strict_position(json, len, at, &line, &col);
			r = fail(&e, "not valid JSON (line %u, column %u): %s", line, col, why);
			goto out;
		}
		root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
		if (!root) {
			size_t off = end && end >= json ? (size_t)(end - json) : 0;
			unsigned line = 1, col = 1;

			for (size_t i = 0; i < off && i < len; i++, col++)
				if (json[i] == '\n') {
					line++;
					col = 0;
				}
			r = fail(&e, "not valid JSON (line %u, column %u)", line, col);
			goto out;
		}
		if (!cJSON_IsObject(root)) {
			r = fail(&e, "the top level is %s; expected an object", describe(root, d, sizeof(d)));
			goto out;
		}
		cJSON_ArrayForEach(sec, root) {
			const struct section *s = NULL;

			for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++)
				if (!strcmp(sec->string, sections[i].name))
					s = &sections[i];
			if (!s) {
				r = fail(&e, "unknown key %s (the top level takes: socket, pool, session, ring, log, swap, limits, metrics)",
					 sec->string);
				goto out;
			}
			for (const cJSON *w = root->child; w != sec; w = w->next)
				if (!strcmp(w->string, sec->string)) {
					r = fail(&e, "%s appears twice", sec->string);
					goto out;
				}
			r = parse_section(&e, c, s, sec, &seen_session_max);
			if (r < 0)
				goto out;
		}
	}
	r = check_whole(&e, c, seen_session_max);
	if (r < 0)
		goto out;
	*ret = c;
	c = NULL;
out:
	if (r == -ENOMEM)
		snprintf(err, errlen, "%s: out of memory", origin);
	cJSON_Delete(root);
	config_free(c);
	return r;
}

int config_load(const char *path, struct config **ret, char *err, size_t errlen)
{
	const char *p = path ? path : SPW_DEFAULT_CONFIG;
	char *buf = NULL;
	struct stat st;
	size_t got = 0;
	int fd, r;

	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		if (!path && r == -ENOENT)
			return config_parse(NULL, 0, "built-in defaults", ret, err, errlen);
		snprintf(err, errlen, "%s: cannot open: %s", p, strerror(-r));
		return r;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > CONFIG_MAX_FILE_BYTES) {
		r = -EINVAL;
		snprintf(err, errlen, "%s: not a regular file of at most %d bytes", p, CONFIG_MAX_FILE_BYTES);
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		r = -ENOMEM;
		snprintf(err, errlen, "%s: out of memory", p);
		goto out;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n < 0 ? -errno : -EIO;
			snprintf(err, errlen, "%s: read failed: %s", p, strerror(-r));
			goto out;
		}
		got += (size_t)n;
	}
	buf[got] = '\0';
	r = config_parse(buf, got, p, ret, err, errlen);
out:
	free(buf);
	close(fd);
	return r;
}

struct config *config_free(struct config *c)
{
	if (!c)
		return NULL;
	for (size_t i = 0; i < CONFIG_MAX_SWAP_DIRS; i++)
		free(c->swap_dirs[i].path);
	free(c->origin);
	free(c->socket_dir);
	free(c->socket_group);
	free(c->pool_gpu);
	free(c->metrics_listen);
	free(c);
	return NULL;
}

const char *config_hugepages_name(int v)
{
	switch (v) {
	case CONFIG_HUGEPAGES_AUTO:
		return "auto";
	case CONFIG_HUGEPAGES_ALWAYS:
		return "always";
	case CONFIG_HUGEPAGES_NEVER:
		return "never";
	}
	return "unknown";
}
