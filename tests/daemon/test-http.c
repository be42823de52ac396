/* SPDX-License-Identifier: MIT */
/*
 * The metrics endpoint's pure parts: the HTTP request reader (daemon/http.c)
 * with well-formed and hostile input fed whole and a byte at a time, the
 * exposition writer's escaping (daemon/metrics-text.c) and the address
 * parser behind metrics.listen (daemon/metrics-addr.h).
 */
#include <arpa/inet.h>
#include <math.h>
#include <string.h>

#include "http.h"
#include "metrics-addr.h"
#include "metrics-text.h"
#include "test.h"

/* The verdict on the whole of s (n bytes), and the same verdict when the
 * bytes arrive one at a time: every proper prefix of a complete request
 * must say NEED_MORE, and a refusal must come no later than the bad byte. */
static enum http_verdict parse_n(const char *s, size_t n, size_t max, struct http_request *req)
{
	enum http_verdict whole = http_parse(s, n, max, req), v = HTTP_NEED_MORE;
	struct http_request tmp;
	size_t i;

	for (i = 1; i <= n; i++) {
		v = http_parse(s, i, max, &tmp);
		if (v != HTTP_NEED_MORE)
			break;
	}
	if (whole == HTTP_COMPLETE) {
		ASSERT_EQ(v, HTTP_COMPLETE);
		ASSERT_UEQ(i, req->length); /* complete exactly at the blank line */
	} else if (whole != HTTP_NEED_MORE) {
		ASSERT_EQ(v, whole);
	}
	return whole;
}

static enum http_verdict parse(const char *s, struct http_request *req)
{
	return parse_n(s, strlen(s), HTTP_MAX_REQUEST, req);
}

static void test_good(void)
{
	struct http_request r;
	const char *prom = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9464\r\nUser-Agent: Prometheus/2.42.0\r\n"
			   "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n"
			   "Accept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n";

	ASSERT_EQ(parse(prom, &r), HTTP_COMPLETE);
	ASSERT_STREQ(r.method, "GET");
	ASSERT_STREQ(r.path, "/metrics");
	ASSERT_EQ(r.minor, 1);
	ASSERT_UEQ(r.length, strlen(prom));

	ASSERT_EQ(parse("GET /metrics?name[]=x HTTP/1.0\r\n\r\n", &r), HTTP_COMPLETE);
	ASSERT_STREQ(r.path, "/metrics");
	ASSERT_EQ(r.minor, 0);
	ASSERT_EQ(parse("POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", &r), HTTP_COMPLETE);
	ASSERT_STREQ(r.method, "POST"); /* the server answers 405 */
	ASSERT_STREQ(r.path, "/x");
	ASSERT_UEQ(r.length, strlen("POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\n"));
	/* Values may hold tabs, spaces and UTF-8; empty values are fine. */
	ASSERT_EQ(parse("GET / HTTP/1.1\r\nX-A:\t v\xc3\xa9 \r\nX-B:\r\n\r\n", &r), HTTP_COMPLETE);
	/* Pipelined requests: the first is complete; the rest is not read. */
	ASSERT_EQ(parse("GET /metrics HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n", &r), HTTP_COMPLETE);
	ASSERT_UEQ(r.length, strlen("GET /metrics HTTP/1.1\r\n\r\n"));
	/* ...garbage after it likewise. */
	ASSERT_EQ(parse("GET /metrics HTTP/1.1\r\n\r\n\x01\x02\xff garbage", &r), HTTP_COMPLETE);
}

static void test_partial(void)
{
	struct http_request r;

	ASSERT_EQ(http_parse("", 0, HTTP_MAX_REQUEST, &r), HTTP_NEED_MORE);
	ASSERT_EQ(parse("G", &r), HTTP_NEED_MORE);
	ASSERT_EQ(parse("GET /metrics HTTP/1.", &r), HTTP_NEED_MORE);
	ASSERT_EQ(parse("GET /metrics HTTP/1.1\r", &r), HTTP_NEED_MORE);
	ASSERT_EQ(parse("GET /metrics HTTP/1.1\r\nHost: x", &r), HTTP_NEED_MORE);
	ASSERT_EQ(parse("GET /metrics HTTP/1.1\r\nHost: x\r\n", &r), HTTP_NEED_MORE);
	ASSERT_EQ(parse("GET /metrics HTTP/1.1\r\nHost: x\r\n\r", &r), HTTP_NEED_MORE);
}

static void test_bad(void)
{
	static const struct {
		const char *s;
		size_t n; /* 0: strlen */
		enum http_verdict v;
	} cases[] = {
		{ "\r\nGET / HTTP/1.1\r\n\r\n", 0, HTTP_BAD },         /* leading empty line */
		{ " GET / HTTP/1.1\r\n\r\n", 0, HTTP_BAD },
		{ "GET  / HTTP/1.1\r\n\r\n", 0, HTTP_BAD },             /* two spaces */
		{ "GET metrics HTTP/1.1\r\n\r\n", 0, HTTP_BAD },        /* not origin-form */
		{ "GET http://x/metrics HTTP/1.1\r\n\r\n", 0, HTTP_BAD },
		{ "GET * HTTP/1.1\r\n\r\n", 0, HTTP_BAD },
		{ "GET /metrics HTTP/1.1\n\n", 0, HTTP_BAD },           /* no CR */
		{ "GET /metrics HTTP/1.1\r\r\n\r\n", 0, HTTP_BAD },
		{ "GET /metrics HTTP/1.1\r\nHost: x\n\r\n", 0, HTTP_BAD },
		{ "GET /metrics HTTP/1.1\r\nHost: x\r\n\rX", 0, HTTP_BAD },
		{ "GET /metrics HTTP/1.1\r\nHost x\r\n\r\n", 0, HTTP_BAD },  /* no colon */
		{ "GET /metrics HTTP/1.1\r\n: x\r\n\r\n", 0, HTTP_BAD },     /* empty name */
		{ "GET /metrics HTTP/1.1\r\nHo st: x\r\n\r\n", 0, HTTP_BAD },
		{ "GET /metrics HTTP/1.1\r\nHost : x\r\n\r\n", 0, HTTP_BAD },
		{ "GET /metrics HTTP/1.1\r\nA: b\r\n c\r\n\r\n", 0, HTTP_BAD }, /* obs-fold */
		{ "GET /metrics HTTP/1.1\r\nA: b\x7f\r\n\r\n", 0, HTTP_BAD },
		{ "GET /metrics HTTP/1.1\r\nA: b\x1b[2J\r\n\r\n", 0, HTTP_BAD },
		{ "GET /met\x01rics HTTP/1.1\r\n\r\n", 0, HTTP_BAD },
		{ "GET /met\xc3\xa9 HTTP/1.1\r\n\r\n", 0, HTTP_BAD },    /* raw UTF-8 in a target */
		{ "GET /metrics HTTP/1.x\r\n\r\n", 0, HTTP_BAD },
		{ "GET /metrics HTTP/1.11\r\n\r\n", 0, HTTP_BAD },
		{ "GET /metrics HTTP/1.1 \r\n\r\n", 0, HTTP_BAD },
		{ "GET /metrics http/1.1\r\n\r\n", 0, HTTP_BAD },
		{ "GET /metrics\r\n\r\n", 0, HTTP_BAD },                 /* HTTP/0.9 */
		{ "GET /metrics HTTP/2.0\r\n\r\n", 0, HTTP_BAD_VERSION },
		{ "GET /metrics HTTP/3\r\n\r\n", 0, HTTP_BAD_VERSION },
		{ "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 0, HTTP_BAD },     /* the h2 preface */
		{ "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11, HTTP_BAD }, /* a TLS ClientHello */
		{ "GET /metrics HTTP/1.1\r\nA: b\0c\r\n\r\n", 33, HTTP_BAD },
		{ "GET\0/metrics HTTP/1.1\r\n\r\n", 25, HTTP_BAD },
		{ "GET /metrics\0HTTP/1.1\r\n\r\n", 25, HTTP_BAD },
		{ "\0\0\0\0", 4, HTTP_BAD },
		{ "VERYLONGMETHODNAMEXX / HTTP/1.1\r\n\r\n", 0, HTTP_BAD },
	};
	struct http_request r;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t n = cases[i].n ? cases[i].n : strlen(cases[i].s);
		enum http_verdict v = parse_n(cases[i].s, n, HTTP_MAX_REQUEST, &r);

		if (v != cases[i].v)
			TEST_FAIL("case %zu: verdict %d, expected %d", i, v, cases[i].v);
	}
}

static void test_limits(void)
{
	struct http_request r;
	size_t n = HTTP_MAX_REQUEST * 2;
	char *big = malloc(n + 1);
	size_t o;

	ASSERT_TRUE(big != NULL);
	/* One huge header: 431 once the limit is reached, not before. */
	o = (size_t)snprintf(big, n, "GET /metrics HTTP/1.1\r\nX-Big: ");
	memset(big + o, 'a', n - o);
	ASSERT_EQ(http_parse(big, HTTP_MAX_REQUEST - 1, HTTP_MAX_REQUEST, &r), HTTP_NEED_MORE);
	ASSERT_EQ(http_parse(big, HTTP_MAX_REQUEST, HTTP_MAX_REQUEST, &r), HTTP_TOO_LARGE);
	ASSERT_EQ(http_parse(big, n, HTTP_MAX_REQUEST, &r), HTTP_TOO_LARGE);
	/* Many small headers add up the same way. */
	o = (size_t)snprintf(big, n, "GET /metrics HTTP/1.1\r\n");
	while (o + 8 < n)
		o += (size_t)snprintf(big + o, n - o, "A: b\r\n");
	ASSERT_EQ(http_parse(big, o, HTTP_MAX_REQUEST, &r), HTTP_TOO_LARGE);
	/* A request that ends exactly at the limit is complete; one byte
	 * over is not. */
	o = (size_t)snprintf(big, n, "GET /metrics HTTP/1.1\r\nX: ");
	memset(big + o, 'a', HTTP_MAX_REQUEST - o - 4);
	memcpy(big + HTTP_MAX_REQUEST - 4, "\r\n\r\n", 4);
	ASSERT_EQ(http_parse(big, HTTP_MAX_REQUEST, HTTP_MAX_REQUEST, &r), HTTP_COMPLETE);
	ASSERT_UEQ(r.length, HTTP_MAX_REQUEST);
	ASSERT_EQ(http_parse(big, HTTP_MAX_REQUEST, HTTP_MAX_REQUEST - 1, &r), HTTP_TOO_LARGE);
	/* A target longer than the path buffer is refused, not cut. */
	o = (size_t)snprintf(big, n, "GET /");
	memset(big + o, 'p', 300);
	snprintf(big + o + 300, n - o - 300, " HTTP/1.1\r\n\r\n");
	ASSERT_EQ(http_parse(big, strlen(big), HTTP_MAX_REQUEST, &r), HTTP_BAD);
	/* ...unless the excess is a query, which is dropped. */
	o = (size_t)snprintf(big, n, "GET /metrics?");
	memset(big + o, 'q', 3000);
	snprintf(big + o + 3000, n - o - 3000, " HTTP/1.1\r\n\r\n");
	ASSERT_EQ(http_parse(big, strlen(big), HTTP_MAX_REQUEST, &r), HTTP_COMPLETE);
	ASSERT_STREQ(r.path, "/metrics");
	free(big);
}

/* Every byte value at every position of a valid request: the parser never
 * reads past len (ASan) and never calls a request with a control byte in
 * it complete. */
static void test_every_byte(void)
{
	const char *good = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
	size_t n = strlen(good);
	char buf[64];
	struct http_request r;

	for (size_t pos = 0; pos < n; pos++) {
		for (int c = 0; c < 256; c++) {
			enum http_verdict v;

			memcpy(buf, good, n);
			buf[pos] = (char)c;
			v = http_parse(buf, n, HTTP_MAX_REQUEST, &r);
			if ((c < 0x20 && c != '\t' && c != '\r' && c != '\n') || c == 0x7f)
				ASSERT_TRUE(v == HTTP_BAD || v == HTTP_BAD_VERSION);
			if (v == HTTP_COMPLETE)
				ASSERT_UEQ(r.length, n);
		}
	}
}

static void test_text(void)
{
	struct mtext t = { 0 };
	size_t len = 0;
	char *s;

	mtext_family(&t, "spillway_x_total", "counter", "Help with a \\ backslash\nand a newline \"quoted\".");
	mtext_sample(&t, "spillway_x_total", 3, "session", "a\"b\\c\nd", "op", "pin", NULL);
	mtext_sample(&t, "spillway_x_total", 0.25, NULL);
	mtext_sample(&t, "spillway_x_total", 9007199254740992.0, "k", "", NULL);
	mtext_sample(&t, "spillway_x_total", NAN, NULL);
	mtext_sample(&t, "spillway_x_total", INFINITY, NULL);
	mtext_sample(&t, "spillway_x_total", -INFINITY, NULL);
	mtext_sample(&t, "spillway_x_total", 1e300, NULL);
	mtext_sample(&t, "spillway_x_total", 0.1 + 0.2 - 0.2, NULL); /* not 0.1: needs 17 digits */
	s = mtext_take(&t, &len);
	ASSERT_TRUE(s != NULL);
	ASSERT_UEQ(len, strlen(s));
	ASSERT_STREQ(s, "# HELP spillway_x_total Help with a \\\\ backslash\\nand a newline \"quoted\".\n"
			"# TYPE spillway_x_total counter\n"
			"spillway_x_total{session=\"a\\\"b\\\\c\\nd\",op=\"pin\"} 3\n"
			"spillway_x_total 0.25\n"
			"spillway_x_total{k=\"\"} 9007199254740992\n"
			"spillway_x_total NaN\n"
			"spillway_x_total +Inf\n"
			"spillway_x_total -Inf\n"
			"spillway_x_total 1e+300\n"
			"spillway_x_total 0.10000000000000003\n");
	free(s);
	ASSERT_TRUE(t.buf == NULL && t.len == 0);
	s = mtext_take(&t, &len); /* empty text: an empty string, not NULL */
	ASSERT_STREQ(s, "");
	free(s);
}

static void test_addr(void)
{
	struct metrics_addr a;
	char why[160];
	static const char *const bad[] = {
		"", "9464", ":9464", "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1",
		"127.0.0.1:94a", "::1:9464", "[::1:9464", "[]:9464", "[127.0.0.1]:9464", "example.com:9464",
		"256.0.0.1:9464", "127.0.0.1: 9464", "relative/path.sock",
		"/a/very/long/path/that/does/not/fit/in/a/sockaddr_un/because/it/is/more/than/one/hundred/and/eight/bytes.sock",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (metrics_addr_parse(bad[i], &a, why, sizeof(why)) != -EINVAL)
			TEST_FAIL("\"%s\" was taken", bad[i]);
	ASSERT_EQ(metrics_addr_parse("[::1:9464", &a, why, sizeof(why)), -EINVAL);
	ASSERT_TRUE(why[0] != '\0');

	ASSERT_OK(metrics_addr_parse("127.0.0.1:9464", &a, why, sizeof(why)));
	ASSERT_TRUE(!a.is_unix && a.loopback && a.sa.ss_family == AF_INET);
	ASSERT_EQ(ntohs(((struct sockaddr_in *)&a.sa)->sin_port), 9464);
	ASSERT_OK(metrics_addr_parse("127.8.9.10:1", &a, why, sizeof(why)));
	/* Port 0: the kernel picks one when the daemon listens. */
	ASSERT_OK(metrics_addr_parse("127.0.0.1:0", &a, why, sizeof(why)));
	ASSERT_EQ(ntohs(((struct sockaddr_in *)&a.sa)->sin_port), 0);
	ASSERT_TRUE(a.loopback);
	ASSERT_OK(metrics_addr_parse("localhost:65535", &a, why, sizeof(why)));
	ASSERT_TRUE(a.loopback && a.sa.ss_family == AF_INET);
	ASSERT_OK(metrics_addr_parse("[::1]:9464", &a, why, sizeof(why)));
	ASSERT_TRUE(a.loopback && a.sa.ss_family == AF_INET6);
	ASSERT_OK(metrics_addr_parse("[::ffff:127.0.0.1]:9464", &a, why, sizeof(why)));
	ASSERT_TRUE(a.loopback);
	ASSERT_OK(metrics_addr_parse("0.0.0.0:9464", &a, why, sizeof(why)));
	ASSERT_TRUE(!a.loopback);
	ASSERT_OK(metrics_addr_parse("10.1.2.3:9464", &a, why, sizeof(why)));
	ASSERT_TRUE(!a.loopback);
	ASSERT_OK(metrics_addr_parse("[::]:9464", &a, why, sizeof(why)));
	ASSERT_TRUE(!a.loopback);
	ASSERT_OK(metrics_addr_parse("[::ffff:10.0.0.1]:9464", &a, why, sizeof(why)));
	ASSERT_TRUE(!a.loopback);
	ASSERT_OK(metrics_addr_parse("/run/spillway/metrics.sock", &a, why, sizeof(why)));
	ASSERT_TRUE(a.is_unix && a.loopback);
	ASSERT_STREQ(a.path, "/run/spillway/metrics.sock");
}

int main(void)
{
	test_good();
	test_partial();
	test_bad();
	test_limits();
	test_every_byte();
	test_text();
	test_addr();
	printf("ok\n");
	return 0;
}
