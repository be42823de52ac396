/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the config parser (daemon/config.c over json-strict.c and
 * cJSON) on any bytes. Besides not crashing or leaking: a result is
 * either a config and no error, or an error sentence naming the origin
 * and no config; and nothing json_strict_check() refuses is accepted.
 */
#include <errno.h>
#include <string.h>

#include "daemon-config.h"
#include "fuzz.h"
#include "json-strict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct config *c = NULL;
	char err[1024];
	int r;

	if (size > CONFIG_MAX_FILE_BYTES)
		return 0;
	err[0] = '\0';
	r = config_parse((const char *)data, size, "fuzz.json", &c, err, sizeof(err));
	if (r == 0) {
		FUZZ_CHECK(c != NULL);
		FUZZ_CHECK(json_strict_check((const char *)data, size, NULL, NULL) == 0);
		FUZZ_CHECK(c->socket_dir != NULL);
		FUZZ_CHECK(c->pool_session_max_bytes <= c->pool_max_bytes);
		config_free(c);
	} else {
		FUZZ_CHECK(c == NULL);
		FUZZ_CHECK(r == -EINVAL || r == -ENOMEM);
		FUZZ_CHECK(!strncmp(err, "fuzz.json: ", 11));
		FUZZ_CHECK(memchr(err, '\0', sizeof(err)) != NULL);
	}
	return 0;
}
