/* SPDX-License-Identifier: MIT */
/*
 * metrics.listen and metrics.allow_remote (daemon/config.c): off by
 * default, loopback and unix paths taken, anything else refused with a
 * message naming the key unless allow_remote says so, wrong types and
 * malformed addresses refused with the value.
 */
#include <errno.h>
#include <string.h>

#include "daemon-config.h"
#include "test.h"

#define BASE "{\"socket\": {\"dir\": \"/tmp/spw-mc\"}, "

static struct config *ok(const char *json)
{
	struct config *c = NULL;
	char err[1024];

	if (config_parse(json, strlen(json), "test.json", &c, err, sizeof(err)) < 0)
		TEST_FAIL("%s refused: %s", json, err);
	return c;
}

static void bad(const char *json, const char *needle1, const char *needle2)
{
	struct config *c = NULL;
	char err[1024] = "";

	ASSERT_EQ(config_parse(json, strlen(json), "test.json", &c, err, sizeof(err)), -EINVAL);
	ASSERT_TRUE(c == NULL);
	ASSERT_CONTAINS(err, needle1);
	if (needle2)
		ASSERT_CONTAINS(err, needle2);
}

int main(void)
{
	struct config *c;

	c = ok(BASE "\"log\": {\"level\": \"info\"}}");
	ASSERT_TRUE(c->metrics_listen == NULL && !c->metrics_allow_remote);
	config_free(c);

	c = ok(BASE "\"metrics\": {\"listen\": \"127.0.0.1:9464\"}}");
	ASSERT_STREQ(c->metrics_listen, "127.0.0.1:9464");
	config_free(c);
	c = ok(BASE "\"metrics\": {\"listen\": \"[::1]:9464\"}}");
	config_free(c);
	c = ok(BASE "\"metrics\": {\"listen\": \"/run/spillway/metrics.sock\"}}");
	ASSERT_STREQ(c->metrics_listen, "/run/spillway/metrics.sock");
	config_free(c);
	c = ok(BASE "\"metrics\": {\"listen\": null}}");
	ASSERT_TRUE(c->metrics_listen == NULL);
	config_free(c);
	/* allow_remote before or after listen: the check sees both. */
	c = ok(BASE "\"metrics\": {\"allow_remote\": true, \"listen\": \"0.0.0.0:9464\"}}");
	ASSERT_TRUE(c->metrics_allow_remote);
	config_free(c);
	c = ok(BASE "\"metrics\": {\"listen\": \"[::]:9464\", \"allow_remote\": true}}");
	config_free(c);

	bad(BASE "\"metrics\": {\"listen\": \"0.0.0.0:9464\"}}", "metrics.allow_remote", "0.0.0.0:9464");
	bad(BASE "\"metrics\": {\"listen\": \"10.0.0.5:9464\", \"allow_remote\": false}}", "metrics.allow_remote",
	    "not a loopback");
	bad(BASE "\"metrics\": {\"listen\": \"[::]:9464\"}}", "metrics.allow_remote", NULL);
	bad(BASE "\"metrics\": {\"listen\": \"127.0.0.1\"}}", "metrics.listen", "127.0.0.1");
	bad(BASE "\"metrics\": {\"listen\": \"127.0.0.1:99999\"}}", "metrics.listen", "port");
	bad(BASE "\"metrics\": {\"listen\": \"prometheus.example:9464\"}}", "metrics.listen", "not looked up");
	bad(BASE "\"metrics\": {\"listen\": 9464}}", "metrics.listen", "wrong type");
	bad(BASE "\"metrics\": {\"allow_remote\": \"yes\"}}", "metrics.allow_remote", "true or false");
	bad(BASE "\"metrics\": {\"port\": 9464}}", "metrics.port", "listen, allow_remote");
	bad(BASE "\"metrics\": {\"listen\": \"127.0.0.1:1\", \"listen\": \"127.0.0.1:2\"}}", "metrics.listen",
	    "twice");
	bad(BASE "\"metrics\": true}", "metrics", "expected an object");
	bad(BASE "\"metricz\": {}}", "metricz", "metrics");
	printf("ok\n");
	return 0;
}
