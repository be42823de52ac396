/* SPDX-License-Identifier: MIT */
/*
 * config.c: the config document: strict JSON, its sections (config-keys.c),
 * the defaults, the checks across keys, loading a file, freeing.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "config.h"
#include "config-private.h"
#include "json-strict.h"
#include "log.h"
#include "metrics-addr.h"
#include "spw-proto.h"
#include "spw-ring.h"

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
		return cfg_fail(e, "%s: %s has the wrong type; expected an object", s->name, cfg_describe(obj, d, sizeof(d)));
	cJSON_ArrayForEach(v, obj) {
		const struct key *k = NULL;
		int r;

		snprintf(key, sizeof(key), "%s.%s", s->name, v->string);
		for (size_t i = 0; i < s->n; i++)
			if (!strcmp(v->string, s->keys[i].name))
				k = &s->keys[i];
		if (!k) {
			list_keys(s, known, sizeof(known));
			return cfg_fail(e, "unknown key %s (%s takes: %s)", key, s->name, known);
		}
		for (const cJSON *w = obj->child; w != v; w = w->next)
			if (!strcmp(w->string, v->string))
				return cfg_fail(e, "%s appears twice", key);
		r = k->fn(e, c, v, key);
		if (r < 0)
			return r;
		if (!strcmp(key, "pool.session_max_bytes"))
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
	c->persist_commit_wait_s = CONFIG_DEFAULT_COMMIT_WAIT_S;
	c->log_level = LOG_LVL_INFO;
	c->swap_queue_depth = 32;
	c->swap_sqpoll = false;
	c->swap_prefetch_window = 8;
	c->swap_session_bytes = CONFIG_DEFAULT_SWAP_SESSION_BYTES;
	c->limits_sessions_per_uid = CONFIG_DEFAULT_SESSIONS_PER_UID;
	c->limits_connections_per_uid = CONFIG_DEFAULT_CONNECTIONS_PER_UID;
	c->limits_hello_timeout_ms = CONFIG_DEFAULT_HELLO_TIMEOUT_MS;
	c->limits_ring_ops_per_s = CONFIG_DEFAULT_RING_OPS_PER_S;
	c->limits_lease_max_s = CONFIG_DEFAULT_LEASE_MAX_S;
	c->checkpoint_cow_bytes = CONFIG_DEFAULT_CHECKPOINT_COW_BYTES;
	c->checkpoint_priority = CONFIG_PRIORITY_NORMAL;
	(void)e;
	return 0;
}

static int check_whole(struct perr *e, struct config *c, bool seen_session_max)
{
	char a[32], b[32];

	if (!seen_session_max)
		c->pool_session_max_bytes = c->pool_max_bytes;
	if (c->pool_session_max_bytes > c->pool_max_bytes)
		return cfg_fail(e, "pool.session_max_bytes (%s) exceeds pool.max_bytes (%s); no session could ever use it all",
			    format_bytes(c->pool_session_max_bytes, a, sizeof(a)),
			    format_bytes(c->pool_max_bytes, b, sizeof(b)));
	if (c->session_page_size > c->pool_session_max_bytes)
		return cfg_fail(e, "session.page_size (%s) exceeds pool.session_max_bytes (%s); no session could hold one page",
			    format_bytes(c->session_page_size, a, sizeof(a)),
			    format_bytes(c->pool_session_max_bytes, b, sizeof(b)));
	if (c->metrics_listen) {
		struct metrics_addr m;
		char why[160];

		if (metrics_addr_parse(c->metrics_listen, &m, why, sizeof(why)) == 0 && !m.loopback && !c->metrics_allow_remote)
			return cfg_fail(e, "metrics.listen: \"%s\" is not a loopback address; the metrics name every session "
				       "to whoever connects: set metrics.allow_remote: true to serve it anyway, or listen "
				       "on 127.0.0.1", c->metrics_listen);
	}
	if (c->persist_flush_interval_s && !c->persist_state_dir)
		return cfg_fail(e, "persist.flush_interval_s (%u s) flushes into persist.state_dir, which is not set; set "
			       "it (e.g. \"/var/lib/spillway/state\") or remove flush_interval_s",
			       c->persist_flush_interval_s);
	if (!c->socket_dir)
		return cfg_fail(e, "socket.dir is not set and $XDG_RUNTIME_DIR is unset or unusable; set socket.dir "
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
			r = cfg_fail(&e, "not valid JSON (line %u, column %u): %s", line, col, why);
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
			r = cfg_fail(&e, "not valid JSON (line %u, column %u)", line, col);
			goto out;
		}
		if (!cJSON_IsObject(root)) {
			r = cfg_fail(&e, "the top level is %s; expected an object", cfg_describe(root, d, sizeof(d)));
			goto out;
		}
		cJSON_ArrayForEach(sec, root) {
			const struct section *s = NULL;

			for (size_t i = 0; i < cfg_nsections; i++)
				if (!strcmp(sec->string, cfg_sections[i].name))
					s = &cfg_sections[i];
			if (!s) {
				r = cfg_fail(&e, "unknown key %s (the top level takes: socket, pool, session, ring, log, swap, limits, metrics)",
					 sec->string);
				goto out;
			}
			for (const cJSON *w = root->child; w != sec; w = w->next)
				if (!strcmp(w->string, sec->string)) {
					r = cfg_fail(&e, "%s appears twice", sec->string);
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
	free(c->persist_state_dir);
	free(c);
	return NULL;
}

const char *config_priority_name(int v)
{
	switch (v) {
	case CONFIG_PRIORITY_LOW:
		return "low";
	case CONFIG_PRIORITY_NORMAL:
		return "normal";
	}
	return "unknown";
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
