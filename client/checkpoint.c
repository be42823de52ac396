/* SPDX-License-Identifier: MIT */
/*
 * client/checkpoint.c: spw_client_checkpoint() and spw_client_restore(),
 * two control requests whose answer comes when the daemon's copy is done
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
		struct spw_checkpoint_result *out)
{
	struct spw_checkpoint_result res = { .size = sizeof(res) };
	char path[PATH_MAX], why[256];
	cJSON *req, *reply = NULL;
	int r;

	if (!c)
		return -EINVAL;
	if (out && spw__struct_size_check(out, SPW__CHECKPOINT_RESULT_SIZE_VER0, "struct spw_checkpoint_result", why,
					  sizeof(why)) < 0)
		return spw__error(c, -EINVAL, "%s", why);
	if (!spw_proto_session_name_valid(session))
		return spw__error(c, -EINVAL, "%s: '%s' is not a session name", type, session ? session : "(null)");
	r = absolute(c, type, dir, path, sizeof(path));
	if (r < 0)
		return r;
	req = cJSON_CreateObject();
	if (!req || !cJSON_AddStringToObject(req, "type", type) || !cJSON_AddStringToObject(req, "session", session) ||
	    !cJSON_AddStringToObject(req, "dir", path) ||
	    (lease_s && !cJSON_AddNumberToObject(req, "lease_s", lease_s))) {
		cJSON_Delete(req);
		return spw__error(c, -ENOMEM, "%s: out of memory", type);
	}
	r = spw__request(c, req, type, &reply, SPW_CHECKPOINT_TIMEOUT_MS);
	if (r < 0)
		return r;
	res.committed_step = num(reply, "committed_step");
	res.bytes = num(reply, "bytes");
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
	return call(c, SPW_MSG_CHECKPOINT, session, dir, 0, out);
}

SPW_EXPORT int spw_client_restore(spw_client *c, const char *session, const char *dir, uint32_t lease_s,
				  struct spw_checkpoint_result *out)
{
	return call(c, SPW_MSG_RESTORE, session, dir, lease_s, out);
}
