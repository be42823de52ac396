/* SPDX-License-Identifier: MIT */
/*
 * metrics.listen through a real spillwayd: a scrape over TCP loopback
 * checked line by line against the text format 0.0.4 (every sample after
 * its family's TYPE, families contiguous, names and label names valid,
 * label values escaped, values floats, no series twice), a session's
 * figures in it, promtool's verdict when promtool is installed, and the
 * hostile side: 404/405/400/431/505, pipelining, a slowloris connection
 * and a flood of idle ones closed by the deadline while scrapes go on,
 * descriptors back to where they were, and a clean shutdown with a
 * connection open. Then the same endpoint on a unix socket.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "config.h"
#include "harness.h"
#include "raw.h"
#include "test.h"

#define MiB (1024u * 1024u)

static struct spw_test_daemon d;
static int port;

/* The port the daemon listens on: metrics.listen asks for port 0 (the
 * kernel picks a free one, no race with other tests), and the status
 * document's config.metrics_listen says which it got. */
static int listening_port(void)
{
	cJSON *st = raw_status(d.status);
	const cJSON *l = cJSON_GetObjectItem(cJSON_GetObjectItem(st, "config"), "metrics_listen");
	const char *colon;
	int p;

	ASSERT_TRUE(cJSON_IsString(l));
	ASSERT_TRUE(!strncmp(l->valuestring, "127.0.0.1:", 10));
	colon = strrchr(l->valuestring, ':');
	p = atoi(colon + 1);
	ASSERT_TRUE(p > 0 && p < 65536);
	cJSON_Delete(st);
	return p;
}

static int tcp_connect(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ASSERT_TRUE(fd >= 0);
	ASSERT_EQ(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* Everything the peer sends until it closes (or timeout_ms passes: NULL). */
static char *read_all(int fd, int timeout_ms, size_t *len)
{
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap + 1);

	ASSERT_TRUE(buf != NULL);
	for (int waited = 0; waited < timeout_ms;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, 50) == 0) {
			waited += 50;
			continue;
		}
		if (n == cap) {
			cap *= 2;
			buf = realloc(buf, cap + 1);
			ASSERT_TRUE(buf != NULL);
		}
		r = recv(fd, buf + n, cap - n, 0);
		if (r <= 0) {
			buf[n] = '\0';
			*len = n;
			return buf;
		}
		n += (size_t)r;
	}
	free(buf);
	return NULL;
}

/* Sends req (n bytes) on a fresh connection; returns the whole answer. */
static char *exchange_on(int fd, const char *req, size_t n, size_t *len)
{
	char *a;

	ASSERT_EQ(send(fd, req, n, MSG_NOSIGNAL), (ssize_t)n);
	/* 30 s: behind the flood below a scrape is served only after two
	 * rounds of 5 s connection deadlines (10 s); the rest is room for a
	 * loaded machine. */
	a = read_all(fd, 30000, len);
	ASSERT_TRUE(a != NULL);
	close(fd);
	return a;
}

static char *exchange(const char *req, size_t n, size_t *len)
{
	return exchange_on(tcp_connect(), req, n, len);
}

static int status_code(const char *answer)
{
	int code = 0;

	ASSERT_EQ(sscanf(answer, "HTTP/1.1 %d ", &code), 1);
	return code;
}

/* GET /metrics; asserts 200 and the headers; returns the body. */
static char *scrape_on(int fd)
{
	static const char req[] = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: text/plain\r\n\r\n";
	size_t len = 0, clen = 0;
	char *a = exchange_on(fd, req, sizeof(req) - 1, &len), *body, *cl;

	ASSERT_EQ(status_code(a), 200);
	body = strstr(a, "\r\n\r\n");
	ASSERT_TRUE(body != NULL);
	body[2] = '\0'; /* the headers, each ending in CRLF */
	ASSERT_CONTAINS(a, "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n");
	ASSERT_CONTAINS(a, "\r\nConnection: close\r\n");
	cl = strstr(a, "\r\nContent-Length: ");
	ASSERT_TRUE(cl != NULL);
	clen = strtoul(cl + 18, NULL, 10);
	body += 4;
	ASSERT_UEQ(clen, strlen(body));
	memmove(a, body, clen + 1);
	return a;
}

static char *scrape(void)
{
	return scrape_on(tcp_connect());
}

static bool name_ok(const char *s, size_t n, bool colon)
{
	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');

		if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
			return false;
	}
	return true;
}

struct family {
	char name[128];
	char type[32];
};

/* The text format, line by line. Returns the number of samples. */
static unsigned check_format(const char *text)
{
	struct family fam[256];
	unsigned nfam = 0, samples = 0;
	int cur = -1;
	char **series = NULL;
	const char *line = text;

	ASSERT_TRUE(strlen(text) > 0 && text[strlen(text) - 1] == '\n');
	while (*line) {
		const char *end = strchr(line, '\n'), *p, *sp;
		char name[128], *series_key;
		size_t n;
		int f = -1;

		ASSERT_TRUE(end != NULL);
		if (!strncmp(line, "# HELP ", 7) || !strncmp(line, "# TYPE ", 7)) {
			bool type = line[2] == 'T';

			p = line + 7;
			sp = memchr(p, ' ', (size_t)(end - p));
			ASSERT_TRUE(sp != NULL);
			n = (size_t)(sp - p);
			ASSERT_TRUE(n < sizeof(name) && name_ok(p, n, true));
			memcpy(name, p, n);
			name[n] = '\0';
			for (unsigned i = 0; i < nfam; i++)
				if (!strcmp(fam[i].name, name))
					f = (int)i;
			if (type) {
				char t[32];

				ASSERT_TRUE(f < 0 || !fam[f].type[0]); /* one TYPE per family */
				n = (size_t)(end - sp - 1);
				ASSERT_TRUE(n < sizeof(t));
				memcpy(t, sp + 1, n);
				t[n] = '\0';
				ASSERT_TRUE(!strcmp(t, "counter") || !strcmp(t, "gauge") || !strcmp(t, "summary") ||
					    !strcmp(t, "histogram") || !strcmp(t, "untyped"));
				if (f < 0) {
					ASSERT_LT(nfam, 256);
					f = (int)nfam++;
					snprintf(fam[f].name, sizeof(fam[f].name), "%s", name);
				}
				snprintf(fam[f].type, sizeof(fam[f].type), "%s", t);
				/* A family's samples come after its TYPE, and a
				 * family does not come back after another's. */
				ASSERT_TRUE(f != cur);
				cur = f;
			} else {
				/* HELP text: escapes are \\ and \n only. */
				for (p = sp + 1; p < end; p++)
					if (*p == '\\')
						ASSERT_TRUE(*++p == '\\' || *p == 'n');
			}
			line = end + 1;
			continue;
		}
		ASSERT_TRUE(line[0] != '#' && line[0] != ' ' && line != end);
		/* name */
		for (p = line; p < end && *p != '{' && *p != ' '; p++)
			;
		n = (size_t)(p - line);
		ASSERT_TRUE(n < sizeof(name) && name_ok(line, n, true));
		memcpy(name, line, n);
		name[n] = '\0';
		ASSERT_TRUE(cur >= 0);
		if (strcmp(name, fam[cur].name)) {
			/* summary and histogram samples carry a suffix */
			size_t fl = strlen(fam[cur].name);
			const char *suf = name + fl;

			if (strncmp(name, fam[cur].name, fl))
				TEST_FAIL("sample %s has no TYPE line before it (current family %s)", name, fam[cur].name);
			ASSERT_TRUE((!strcmp(fam[cur].type, "summary") && (!strcmp(suf, "_sum") || !strcmp(suf, "_count"))) ||
				    (!strcmp(fam[cur].type, "histogram") &&
				     (!strcmp(suf, "_sum") || !strcmp(suf, "_count") || !strcmp(suf, "_bucket"))));
		}
		/* labels */
		if (*p == '{') {
			p++;
			while (*p != '}') {
				const char *ln = p;

				while (p < end && *p != '=')
					p++;
				ASSERT_TRUE(name_ok(ln, (size_t)(p - ln), false));
				ASSERT_TRUE(p[0] == '=' && p[1] == '"');
				for (p += 2; p < end && *p != '"'; p++)
					if (*p == '\\')
						ASSERT_TRUE(*++p == '\\' || *p == '"' || *p == 'n');
				ASSERT_TRUE(*p == '"');
				p++;
				ASSERT_TRUE(*p == ',' || *p == '}');
				if (*p == ',')
					p++;
			}
			p++;
		}
		/* value */
		ASSERT_TRUE(*p == ' ');
		{
			char *vend;
			double v = strtod(p + 1, &vend);

			if (vend != end)
				TEST_FAIL("value of %.*s does not parse as a float", (int)(end - line), line);
			if (!strcmp(fam[cur].type, "counter"))
				ASSERT_TRUE(v >= 0 && !isnan(v));
		}
		/* no series twice */
		series_key = strndup(line, (size_t)(p - line));
		for (unsigned i = 0; i < samples; i++)
			if (!strcmp(series[i], series_key))
				TEST_FAIL("series %s appears twice", series_key);
		series = realloc(series, (samples + 1) * sizeof(*series));
		ASSERT_TRUE(series != NULL);
		series[samples++] = series_key;
		line = end + 1;
	}
	for (unsigned i = 0; i < samples; i++)
		free(series[i]);
	free(series);
	return samples;
}

/* The value of the sample whose name and labels are exactly series. */
static double value_of(const char *text, const char *series)
{
	size_t n = strlen(series);

	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (!strncmp(l, series, n) && l[n] == ' ')
			return strtod(l + n + 1, NULL);
	TEST_FAIL("no sample %s in the scrape", series);
	return NAN;
}

static void promtool_check(const char *text)
{
	char path[320], cmd[800];
	FILE *f;
	int r;

	if (system("command -v promtool >/dev/null 2>&1") != 0) {
		fprintf(stderr, "promtool not installed (Debian: prometheus); its check is skipped\n");
		return;
	}
	snprintf(path, sizeof(path), "%s/scrape.txt", d.dir);
	f = fopen(path, "we");
	ASSERT_TRUE(f != NULL);
	fputs(text, f);
	fclose(f);
	/* Lint problems (names, units) print but only an unparsable text
	 * fails: promtool exits 1 for both, so its output is checked too. */
	snprintf(cmd, sizeof(cmd), "promtool check metrics < '%s' > '%s.out' 2>&1", path, path);
	r = system(cmd);
	snprintf(cmd, sizeof(cmd), "cat '%s.out' >&2; ! grep -qiE 'error|parse' '%s.out'", path, path);
	ASSERT_EQ(system(cmd), 0);
	fprintf(stderr, "promtool check metrics: exit %d\n", WEXITSTATUS(r));
}

/* The same text through prometheus_client's parser (metrics-parse.py). */
static void python_check(const char *text, const char *dir)
{
	char path[320], cmd[1200];
	FILE *f;
	int r;

	snprintf(path, sizeof(path), "%s/scrape-py.txt", d.dir);
	f = fopen(path, "we");
	ASSERT_TRUE(f != NULL);
	fputs(text, f);
	fclose(f);
	/* dir holds a quote and a backslash: pass it through the
	 * environment, not the shell's quoting. */
	setenv("SPW_TEST_SWAPDIR", dir, 1);
	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 '%s' '%s' job/metrics-0 \"$SPW_TEST_SWAPDIR\" >&2", METRICS_PARSE_PY,
		 path);
	r = system(cmd);
	ASSERT_TRUE(WIFEXITED(r));
	if (WEXITSTATUS(r) != 77)
		ASSERT_EQ(WEXITSTATUS(r), 0);
}

static void test_hostile(void)
{
	size_t len = 0, n;
	char *a, *big;
	int slow, flood[40], fds0;

	a = exchange("GET /other HTTP/1.1\r\n\r\n", 23, &len);
	ASSERT_EQ(status_code(a), 404);
	free(a);
	a = exchange("POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi", 48, &len);
	ASSERT_EQ(status_code(a), 405);
	ASSERT_CONTAINS(a, "\r\nAllow: GET\r\n");
	free(a);
	a = exchange("HEAD /metrics HTTP/1.1\r\n\r\n", 26, &len);
	ASSERT_EQ(status_code(a), 405);
	free(a);
	a = exchange("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11, &len); /* TLS */
	ASSERT_EQ(status_code(a), 400);
	free(a);
	a = exchange("GET /metrics HTTP/1.1\r\nA: \0\r\n\r\n", 31, &len);
	ASSERT_EQ(status_code(a), 400);
	free(a);
	a = exchange("GET /metrics HTTP/1.1\n\n", 23, &len);
	ASSERT_EQ(status_code(a), 400);
	free(a);
	a = exchange("GET /metrics HTTP/2.0\r\n\r\n", 25, &len);
	ASSERT_EQ(status_code(a), 505);
	free(a);
	/* Huge headers: 431 after 8 KiB, the rest never read. */
	n = 64 * 1024;
	big = malloc(n);
	ASSERT_TRUE(big != NULL);
	memset(big, 'a', n);
	memcpy(big, "GET /metrics HTTP/1.1\r\nX-Big: ", 30);
	a = exchange(big, n, &len);
	ASSERT_EQ(status_code(a), 431);
	free(a);
	free(big);
	/* Pipelining: one answer, then the connection closes. */
	a = exchange("GET /metrics HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n", 50, &len);
	ASSERT_EQ(status_code(a), 200);
	ASSERT_TRUE(strstr(a + 1, "HTTP/1.1") == NULL);
	free(a);

	/* Slowloris and a flood of idle connections (more than the server
	 * takes at once): scrapes still get through (after the deadline has
	 * closed enough of them), and every one of them is closed. */
	fds0 = raw_count_fds(d.pid);
	slow = tcp_connect();
	ASSERT_EQ(send(slow, "GET /metrics HTTP/1.1\r\nHost: x", 30, MSG_NOSIGNAL), 30);
	for (int i = 0; i < 40; i++)
		flood[i] = tcp_connect();
	free(scrape());
	ASSERT_TRUE(raw_wait_eof(slow, 30000));
	for (int i = 0; i < 40; i++) {
		ASSERT_TRUE(raw_wait_eof(flood[i], 30000));
		close(flood[i]);
	}
	close(slow);
	free(scrape());
	for (int waited = 0; raw_count_fds(d.pid) > fds0 && waited < 5000; waited += 10)
		usleep(10000);
	ASSERT_LE(raw_count_fds(d.pid), fds0);
}

/* Real disk traffic, then its latency histogram: a swappable tensor of
 * twice the free slots, every page written (evictions write back), then
 * every page read again. Which pages the pager keeps is its policy's
 * business (it may keep the first ones, depending on when write-back
 * finished); what the traffic forces is not: 24 dirty pages through 12
 * slots make 12 evictions, each a completed write, and 24 pages read
 * through 12 slots find at most 12 still there. Every request lands in
 * exactly one bucket: the buckets only grow with le and +Inf equals the
 * count. */
static void swap_latency(struct raw_session *s)
{
	static const char *const le[] = { "0.0001", "0.0005", "0.001", "0.005", "0.01", "0.05", "0.25", "1", "+Inf" };
	char series[512], *text;
	uint32_t pages = 0;
	int tid;

	tid = raw_register_kind(s, "sw", 24 * MiB, "swappable", &pages);
	ASSERT_GE(tid, 0);
	ASSERT_EQ(pages, 24u);
	for (uint32_t p = 0; p < pages; p++) {
		ASSERT_GE(raw_op(s, SPW_OP_PIN, 0, (uint32_t)tid, p), 0);
		ASSERT_EQ(raw_op(s, SPW_OP_UNPIN, SPW_UNPIN_DIRTY, (uint32_t)tid, p), 0);
	}
	for (uint32_t p = 0; p < pages; p++) {
		ASSERT_GE(raw_op(s, SPW_OP_PIN, 0, (uint32_t)tid, p), 0);
		ASSERT_EQ(raw_op(s, SPW_OP_UNPIN, 0, (uint32_t)tid, p), 0);
	}
	text = scrape();
	for (int w = 0; w < 2; w++) {
		const char *op = w ? "write" : "read";
		double prev = 0, v, count;

		snprintf(series, sizeof(series), "spillway_swap_io_seconds_count{session=\"job/metrics-0\",op=\"%s\"}", op);
		count = value_of(text, series);
		ASSERT_GE(count, 12);
		for (size_t i = 0; i < sizeof(le) / sizeof(le[0]); i++) {
			snprintf(series, sizeof(series),
				 "spillway_swap_io_seconds_bucket{session=\"job/metrics-0\",op=\"%s\",le=\"%s\"}", op, le[i]);
			v = value_of(text, series);
			ASSERT_GE(v, prev);
			prev = v;
		}
		ASSERT_TRUE(prev == count);
	}
	free(text);
}

int main(void)
{
	char cfg[2048], dir[128], esc[256], series[512], *text;
	struct raw_session s;
	uint32_t pages = 0;
	unsigned pins = 0;
	int tid, fd;
	struct stat st;

	if (access("/var/tmp", W_OK) < 0)
		SKIP("/var/tmp is not writable (the swap directory lives there)");
	/* A swap directory whose name needs escaping in a label value. */
	snprintf(dir, sizeof(dir), "/var/tmp/spw-metrics-\"q\\b-XXXXXX");
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	{
		size_t o = 0;

		for (const char *p = dir; *p; p++) {
			if (*p == '"' || *p == '\\')
				esc[o++] = '\\';
			esc[o++] = *p;
		}
		esc[o] = '\0';
	}
	snprintf(cfg, sizeof(cfg),
		 "{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0666\"},"
		 " \"pool\": {\"max_bytes\": \"1GiB\", \"session_max_bytes\": \"256MiB\", \"require_locked\": false},"
		 " \"swap\": {\"dirs\": [{\"path\": \"%s\", \"max_bytes\": \"64MiB\"}], \"session_bytes\": \"32MiB\"},"
		 " \"metrics\": {\"listen\": \"127.0.0.1:0\"}, \"log\": {\"level\": \"debug\"}}",
		 esc);
	ASSERT_OK(spw_test_daemon_start(&d, cfg));
	raw_guard(&d);
	port = listening_port();

	/* A session with some traffic. */
	ASSERT_OK(raw_attach(d.control, "job/metrics-0", 16 * MiB, 1 * MiB, &s));
	tid = raw_register(&s, "w", 4 * MiB, &pages);
	ASSERT_GE(tid, 0);
	for (uint32_t p = 0; p < pages; p++, pins++) {
		ASSERT_GE(raw_op(&s, SPW_OP_PIN, 0, (uint32_t)tid, p), 0);
		ASSERT_EQ(raw_op(&s, SPW_OP_UNPIN, SPW_UNPIN_DIRTY, (uint32_t)tid, p), 0);
	}
	ASSERT_EQ(raw_op(&s, SPW_OP_STEP, 0, 0, 0), 0);

	text = scrape();
	fprintf(stderr, "--- scrape (%zu bytes), first lines:\n%.1500s\n---\n", strlen(text), text);
	ASSERT_GT(check_format(text), 40);
	snprintf(series, sizeof(series), "spillway_build_info{version=\"%s\"}", SPW_VERSION);
	ASSERT_TRUE(value_of(text, series) == 1);
	ASSERT_TRUE(value_of(text, "spillway_sessions{state=\"attached\"}") == 1);
	ASSERT_TRUE(value_of(text, "spillway_pool_bytes{state=\"used\"}") == 16 * MiB);
	snprintf(series, sizeof(series), "spillway_session_region_bytes{session=\"job/metrics-0\",uid=\"%u\"}",
		 (unsigned)getuid());
	ASSERT_TRUE(value_of(text, series) == 16 * MiB);
	/* All of it holds memory: "w" is whole pages (test-tails has the tails). */
	ASSERT_TRUE(value_of(text, "spillway_session_region_resident_bytes{session=\"job/metrics-0\"}") == 16 * MiB);
	ASSERT_TRUE(value_of(text, "spillway_ring_ops_total{session=\"job/metrics-0\",op=\"pin\"}") == pins);
	ASSERT_TRUE(value_of(text, "spillway_ring_ops_total{session=\"job/metrics-0\",op=\"unpin\"}") == pins);
	ASSERT_TRUE(value_of(text, "spillway_ring_ops_total{session=\"job/metrics-0\",op=\"step\"}") == 1);
	ASSERT_TRUE(value_of(text, "spillway_pins_total{session=\"job/metrics-0\"}") == pins);
	ASSERT_TRUE(value_of(text, "spillway_tier_pages{session=\"job/metrics-0\",state=\"resident\"}") == pages);
	ASSERT_TRUE(value_of(text, "spillway_errors_total{session=\"job/metrics-0\",kind=\"ring\"}") == 0);
	ASSERT_TRUE(value_of(text, "spillway_session_swap_bytes{session=\"job/metrics-0\"}") == 32 * MiB);
	/* The directory's name, escaped as the format says. */
	{
		char lv[300];
		size_t o = 0;

		for (const char *p = dir; *p; p++) {
			if (*p == '"' || *p == '\\')
				lv[o++] = '\\';
			lv[o++] = *p;
		}
		lv[o] = '\0';
		snprintf(series, sizeof(series), "spillway_swap_dir_max_bytes{dir=\"%s\"}", lv);
		ASSERT_TRUE(value_of(text, series) == 64 * MiB);
	}
	promtool_check(text);
	python_check(text, dir);
	free(text);

	swap_latency(&s);
	test_hostile();

	/* The session's series end with it. */
	raw_session_close(&s);
	for (int waited = 0; waited < 5000; waited += 10) {
		text = scrape();
		if (!strstr(text, "job/metrics-0"))
			break;
		free(text);
		text = NULL;
		usleep(10000);
	}
	ASSERT_TRUE(text != NULL);
	ASSERT_TRUE(value_of(text, "spillway_sessions{state=\"attached\"}") == 0);
	free(text);

	/* SIGTERM with a connection half-way through a request: exit 0
	 * (every handle closed; a leak fails uv_loop_close). */
	fd = tcp_connect();
	ASSERT_EQ(send(fd, "GET /", 5, MSG_NOSIGNAL), 5);
	usleep(100000);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	close(fd);

	/* A unix socket: mode from socket.mode, removed at exit. */
	ASSERT_OK(spw_test_daemon_start(&d, "{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0660\"},"
					    " \"pool\": {\"max_bytes\": \"1GiB\", \"require_locked\": false},"
					    " \"metrics\": {\"listen\": \"@DIR@/metrics.sock\"}}"));
	{
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		char path[sizeof(sa.sun_path)];

		ASSERT_LT(snprintf(path, sizeof(path), "%s/metrics.sock", d.dir), (int)sizeof(path));
		ASSERT_EQ(lstat(path, &st), 0);
		ASSERT_TRUE(S_ISSOCK(st.st_mode));
		ASSERT_EQ(st.st_mode & 0777, 0660);
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		ASSERT_EQ(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
		text = scrape_on(fd);
		check_format(text);
		ASSERT_TRUE(value_of(text, "spillway_sessions{state=\"attached\"}") == 0);
		free(text);
		/* The directory goes with spw_test_daemon_stop(), so this
		 * stops the daemon by hand (one SIGTERM: a second one during
		 * shutdown finds the default action), then looks. */
		{
			int wst = 0;

			ASSERT_EQ(kill(d.pid, SIGTERM), 0);
			ASSERT_EQ(waitpid(d.pid, &wst, 0), d.pid);
			ASSERT_TRUE(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
			d.pid = -1;
		}
		ASSERT_TRUE(lstat(path, &st) < 0 && errno == ENOENT);
		spw_test_daemon_cleanup(&d);
	}
	ASSERT_EQ(rmdir(dir), 0);
	printf("ok\n");
	return 0;
}
