/* SPDX-License-Identifier: MIT */
/*
 * client/checkpoint.c: spw_client_checkpoint(), spw_client_restore() and
 * spw_client_flush(), control requests whose answer comes when the daemon's copy is done
 * (their own timeout, not the client's reply_timeout_ms).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "client-private.h"
#include "opts.h"
#include "util/crc32c.h"
#include "util/json.h"

/* dir made absolute (the daemon has another working directory). */
static int absolute(spw_client *c, const char *verb, const char *dir, char *buf, size_t len)
{
	char cwd[PATH_MAX];

	if (!dir || !dir[0])
		return spw__error(c, -EINVAL, "%s: no directory given", verb);
	if (dir[0] == '/') {
		if (strlen(dir) >= len)
			return spw__error(c, -ENAMETOOLONG, "%s: the path %s is too long", verb, dir);
		snprintf(buf, len, "%s", dir);
		return 0;
	}
	if (!getcwd(cwd, sizeof(cwd)))
		return spw__error(c, -errno, "%s: the current directory: %s", verb, spw_strerror(-errno));
	if ((size_t)snprintf(buf, len, "%s/%s", cwd, dir) >= len)
		return spw__error(c, -ENAMETOOLONG, "%s: the path %s/%s is too long", verb, cwd, dir);
	return 0;
}

static uint64_t num(const cJSON *o, const char *key)
{
	uint64_t v = 0;

	json_uint(cJSON_GetObjectItemCaseSensitive(o, key), JSON_UINT_MAX, &v);
	return v;
}

static double real(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(v) && v->valuedouble >= 0 ? v->valuedouble : 0.0;
}

static int call(spw_client *c, const char *type, const char *session, const char *dir, uint32_t lease_s,
		const char *meta_json, struct spw_checkpoint_result *out)
{
	/* dir NULL: a flush of session into the daemon's persist.state_dir. */
	bool flush = !dir;
	struct spw_checkpoint_result res = { .size = sizeof(res) };
	char path[PATH_MAX], why[256];
	cJSON *req, *reply = NULL, *meta = NULL;
	int r;

	if (!c)
		return -EINVAL;
	if (out && spw__struct_size_check(out, SPW__CHECKPOINT_RESULT_SIZE_VER0, "struct spw_checkpoint_result", why,
					  sizeof(why)) < 0)
		return spw__error(c, -EINVAL, "%s", why);
	if (!spw_proto_session_name_valid(session))
		return spw__error(c, -EINVAL, "%s: '%s' is not a session name", type, session ? session : "(null)");
	r = flush ? 0 : absolute(c, type, dir, path, sizeof(path));
	if (r < 0)
		return r;
	if (meta_json) {
		/* Leaves room in the frame for the rest of the request. */
		if (strlen(meta_json) > SPW_PROTO_MAX_FRAME - PATH_MAX - 1024)
			return spw__error(c, -E2BIG, "%s: meta_json is %zu bytes; a control frame takes at most %u "
					  "(leave out what the checkpoint's tensors already say)", type,
					  strlen(meta_json), SPW_PROTO_MAX_FRAME - PATH_MAX - 1024);
		meta = cJSON_Parse(meta_json);
		if (!cJSON_IsObject(meta)) {
			cJSON_Delete(meta);
			return spw__error(c, -EINVAL, "%s: meta_json is not the text of a JSON object", type);
		}
	}
	req = cJSON_CreateObject();
	if (!req || !cJSON_AddStringToObject(req, "type", type) || !cJSON_AddStringToObject(req, "session", session) ||
	    (flush ? !cJSON_AddBoolToObject(req, "flush", 1) : !cJSON_AddStringToObject(req, "dir", path)) ||
	    (lease_s && !cJSON_AddNumberToObject(req, "lease_s", lease_s)) ||
	    (meta && !cJSON_AddItemToObject(req, "meta", meta))) {
		if (!req || !cJSON_GetObjectItemCaseSensitive(req, "meta"))
			cJSON_Delete(meta);
		cJSON_Delete(req);
		return spw__error(c, -ENOMEM, "%s: out of memory", type);
	}
	r = spw__request(c, req, type, &reply, SPW_CHECKPOINT_TIMEOUT_MS);
	if (r < 0)
		return r;
	res.committed_step = num(reply, "committed_step");
	res.bytes = num(reply, "bytes");
	res.bytes_total = num(reply, "bytes_total");
	res.copied_bytes = num(reply, "copied_bytes");
	res.tensors = (uint32_t)num(reply, "tensors");
	res.lease_s = (uint32_t)num(reply, "lease_s");
	res.seconds = real(reply, "seconds");
	res.wait_seconds = real(reply, "wait_seconds");
	res.stall_seconds = real(reply, "stall_seconds");
	res.steps_during_copy = num(reply, "steps_during_copy");
	res.cow_bytes = num(reply, "cow_bytes");
	res.cow_waits = num(reply, "cow_waits");
	res.cow_peak_bytes = num(reply, "cow_peak_bytes");
	res.direct_bytes = num(reply, "direct_bytes");
	res.buffered_bytes = num(reply, "buffered_bytes");
	res.cow_moved_bytes = num(reply, "cow_moved_bytes");
	res.yields = num(reply, "yields");
	res.yield_seconds = real(reply, "yield_seconds");
	res.cow_from_reads_bytes = num(reply, "cow_from_reads_bytes");
	res.swap_read_bytes = num(reply, "swap_read_bytes");
	cJSON_Delete(reply);
	c->errmsg[0] = '\0';
	if (out)
		spw__info_out(out, &res, sizeof(res), SPW__CHECKPOINT_RESULT_SIZE_VER0, "struct spw_checkpoint_result",
			      NULL, 0);
	return 0;
}

SPW_EXPORT int spw_client_checkpoint(spw_client *c, const char *session, const char *dir,
				     struct spw_checkpoint_result *out)
{
	return call(c, SPW_MSG_CHECKPOINT, session, dir, 0, NULL, out);
}

SPW_EXPORT int spw_client_checkpoint_meta(spw_client *c, const char *session, const char *dir,
					  const char *meta_json, struct spw_checkpoint_result *out)
{
	return call(c, SPW_MSG_CHECKPOINT, session, dir, 0, meta_json, out);
}

SPW_EXPORT uint32_t spw_crc32c(uint32_t crc, const void *buf, size_t len)
{
	return buf || !len ? crc32c(crc, buf, len) : crc;
}

SPW_EXPORT int spw_client_restore(spw_client *c, const char *session, const char *dir, uint32_t lease_s,
				  struct spw_checkpoint_result *out)
{
	return call(c, SPW_MSG_RESTORE, session, dir, lease_s, NULL, out);
}

SPW_EXPORT int spw_client_flush(spw_client *c, const char *session, struct spw_checkpoint_result *out)
{
	return call(c, SPW_MSG_CHECKPOINT, session, NULL, 0, NULL, out);
}
