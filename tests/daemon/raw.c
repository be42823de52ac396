/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/time.h>
#include <time.h>

#include "harness.h"
#include "raw.h"
#include "util/json.h"
#include "util/names.h"
#include "test.h"

int raw_send(int fd, const char *json)
{
	return spw_proto_send(fd, json, (uint32_t)strlen(json), NULL, 0);
}

cJSON *raw_recv(int fd, int *fds, unsigned *nfds, int *err)
{
	/* Per thread: test-attach-progress reads status beside an attach. */
	static _Thread_local char buf[SPW_PROTO_MAX_FRAME + 1];
	struct timeval tv = { .tv_sec = 5 };
	int r;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	r = spw_proto_recv(fd, buf, sizeof(buf), fds, nfds);
	if (err)
		*err = r;
	if (r <= 0)
		return NULL;
	return cJSON_Parse(buf);
}

cJSON *raw_request(int fd, const char *json)
{
	int fds[SPW_PROTO_MAX_FDS];
	unsigned n = SPW_PROTO_MAX_FDS;
	cJSON *r;

	if (raw_send(fd, json) < 0)
		return NULL;
	r = raw_recv(fd, fds, &n, NULL);
	for (unsigned i = 0; i < n; i++)
		close(fds[i]);
	return r;
}

int raw_reply_errno(const cJSON *reply)
{
	const cJSON *t = cJSON_GetObjectItem(reply, "type");
	const cJSON *e = cJSON_GetObjectItem(reply, "errno");

	if (!reply || !cJSON_IsString(t))
		return -EPROTO;
	if (!strcmp(t->valuestring, "error"))
		return cJSON_IsNumber(e) ? -(int)e->valuedouble : -EPROTO;
	return cJSON_IsTrue(cJSON_GetObjectItem(reply, "ok")) ? 0 : -EPROTO;
}

const char *raw_reply_message(const cJSON *reply)
{
	const cJSON *m = cJSON_GetObjectItem(reply, "message");

	return cJSON_IsString(m) ? m->valuestring : "";
}

uint32_t raw_hello_features = SPW_FEAT_RING_POLL;

int raw_connect_hello(const char *control)
{
	char hello[128];
	cJSON *r;
	int fd = spw_test_connect(control);

	ASSERT_OK(fd);
	snprintf(hello, sizeof(hello), "{\"type\":\"hello\",\"magic\":%u,\"major\":%d,\"minor\":%d,\"features\":%u}",
		 SPW_PROTO_MAGIC, SPW_PROTO_MAJOR, SPW_PROTO_MINOR, raw_hello_features);
	r = raw_request(fd, hello);
	ASSERT_TRUE(r != NULL);
	ASSERT_EQ(raw_reply_errno(r), 0);
	ASSERT_STREQ(cJSON_GetObjectItem(r, "type")->valuestring, "hello");
	ASSERT_EQ(raw_num(r, "major"), SPW_PROTO_MAJOR);
	/* Granted: what was asked for, within what this daemon offers. */
	ASSERT_EQ(raw_num(r, "features"), raw_hello_features & SPW_FEAT_RING_POLL);
	cJSON_Delete(r);
	return fd;
}

bool raw_wait_eof(int fd, int timeout_ms)
{
	char buf[4096];

	for (int waited = 0; waited < timeout_ms; waited += 10) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 10) == 1) {
			ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (n == 0 || (n < 0 && errno == ECONNRESET))
				return true;
		}
	}
	return false;
}

static int attach(const char *control, const char *name, uint64_t bytes, uint32_t page_size, bool persistent,
		  struct raw_session *s);

int raw_attach(const char *control, const char *name, uint64_t bytes, uint32_t page_size, struct raw_session *s)
{
	return attach(control, name, bytes, page_size, false, s);
}

int raw_attach_persistent(const char *control, const char *name, uint64_t bytes, uint32_t page_size,
			  struct raw_session *s)
{
	return attach(control, name, bytes, page_size, true, s);
}

static int attach(const char *control, const char *name, uint64_t bytes, uint32_t page_size, bool persistent,
		  struct raw_session *s)
{
	char req[512];
	unsigned nfds = SPW_ATTACH_NFDS;
	struct stat st;
	cJSON *r;
	int e;

	memset(s, 0, sizeof(*s));
	for (int i = 0; i < SPW_ATTACH_NFDS; i++)
		s->fds[i] = -1;
	s->ctl = raw_connect_hello(control);
	if (page_size)
		snprintf(req, sizeof(req),
			 "{\"type\":\"attach\",\"session\":\"%s\",\"region_bytes\":%llu,\"page_size\":%u%s}", name,
			 (unsigned long long)bytes, page_size, persistent ? ",\"persistent\":true" : "");
	else
		snprintf(req, sizeof(req), "{\"type\":\"attach\",\"session\":\"%s\",\"region_bytes\":%llu%s}", name,
			 (unsigned long long)bytes, persistent ? ",\"persistent\":true" : "");
	ASSERT_OK(raw_send(s->ctl, req));
	r = raw_recv(s->ctl, s->fds, &nfds, NULL);
	ASSERT_TRUE(r != NULL);
	e = raw_reply_errno(r);
	if (e < 0) {
		snprintf(s->message, sizeof(s->message), "%s", raw_reply_message(r));
		ASSERT_EQ(nfds, 0);
		cJSON_Delete(r);
		close(s->ctl);
		s->ctl = -1;
		return e;
	}
	ASSERT_EQ(nfds, SPW_ATTACH_NFDS);
	ASSERT_STREQ(cJSON_GetObjectItem(r, "session")->valuestring, name);
	s->region_bytes = (size_t)raw_num(r, "region_bytes");
	s->page_size = (uint32_t)raw_num(r, "page_size");
	s->slots = (uint32_t)raw_num(r, "slots");
	ASSERT_UEQ((uint64_t)s->slots * s->page_size, s->region_bytes);
	ASSERT_OK(spw_ring_layout((uint32_t)raw_num(r, "sq_entries"), (uint32_t)raw_num(r, "cq_entries"), &s->l));
	ASSERT_UEQ(s->l.bytes, (uint64_t)raw_num(r, "rings_bytes"));
	cJSON_Delete(r);

	/* fstat before mmap: never trust a size from the wire. */
	ASSERT_EQ(fstat(s->fds[SPW_ATTACH_FD_REGION], &st), 0);
	ASSERT_UEQ((uint64_t)st.st_size, s->region_bytes);
	ASSERT_EQ(fstat(s->fds[SPW_ATTACH_FD_RINGS], &st), 0);
	ASSERT_UEQ((uint64_t)st.st_size, s->l.bytes);
	s->region = mmap(NULL, s->region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fds[SPW_ATTACH_FD_REGION], 0);
	ASSERT_TRUE(s->region != MAP_FAILED);
	s->rings_bytes = s->l.bytes;
	s->rings = mmap(NULL, s->rings_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fds[SPW_ATTACH_FD_RINGS], 0);
	ASSERT_TRUE(s->rings != MAP_FAILED);
	s->sqh = (struct spw_ring_hdr *)(s->rings + s->l.sq_hdr_off);
	s->cqh = (struct spw_ring_hdr *)(s->rings + s->l.cq_hdr_off);
	s->sqes = (struct spw_sqe *)(s->rings + s->l.sqes_off);
	s->cqes = (struct spw_cqe *)(s->rings + s->l.cqes_off);
	s->sq_tail = __atomic_load_n(&s->sqh->tail, __ATOMIC_ACQUIRE);
	s->cq_head = __atomic_load_n(&s->cqh->head, __ATOMIC_ACQUIRE);
	return 0;
}

void raw_session_close(struct raw_session *s)
{
	if (s->region && s->region != MAP_FAILED)
		munmap(s->region, s->region_bytes);
	if (s->rings && s->rings != MAP_FAILED)
		munmap(s->rings, s->rings_bytes);
	for (int i = 0; i < SPW_ATTACH_NFDS; i++)
		if (s->fds[i] >= 0)
			close(s->fds[i]);
	if (s->ctl >= 0)
		close(s->ctl);
	memset(s, 0, sizeof(*s));
	s->ctl = -1;
	for (int i = 0; i < SPW_ATTACH_NFDS; i++)
		s->fds[i] = -1;
}

int raw_register(struct raw_session *s, const char *name, uint64_t bytes, uint32_t *pages)
{
	return raw_register_kind(s, name, bytes, "resident", pages);
}

int raw_register_kind(struct raw_session *s, const char *name, uint64_t bytes, const char *kind, uint32_t *pages)
{
	char req[512];
	cJSON *r;
	int e;

	snprintf(req, sizeof(req), "{\"type\":\"register\",\"name\":\"%s\",\"bytes\":%llu,\"kind\":\"%s\"}", name,
		 (unsigned long long)bytes, kind);
	r = raw_request(s->ctl, req);
	ASSERT_TRUE(r != NULL);
	e = raw_reply_errno(r);
	if (e == 0) {
		e = (int)raw_num(r, "tensor");
		if (pages)
			*pages = (uint32_t)raw_num(r, "pages");
	} else {
		snprintf(s->message, sizeof(s->message), "%s", raw_reply_message(r));
	}
	cJSON_Delete(r);
	return e;
}

void raw_publish(struct raw_session *s)
{
	/* Release: the entries are written before the tail that publishes them. */
	__atomic_store_n(&s->sqh->tail, s->sq_tail, __ATOMIC_RELEASE);
	/* Full fence: the tail store before the flag load; pairs with the
	 * daemon's fence between setting NEED_WAKEUP and re-reading the tail. */
	atomic_thread_fence(memory_order_seq_cst);
	if (__atomic_load_n(&s->sqh->flags, __ATOMIC_RELAXED) & SPW_RING_NEED_WAKEUP) {
		uint64_t one = 1;
		ASSERT_EQ(write(s->fds[SPW_ATTACH_FD_SQ_EVT], &one, sizeof(one)), (ssize_t)sizeof(one));
	}
}

void raw_submit(struct raw_session *s, const struct spw_sqe *sqe)
{
	s->sqes[s->sq_tail & (s->l.sq_entries - 1)] = *sqe;
	s->sq_tail++;
	raw_publish(s);
}

int raw_reap(struct raw_session *s, struct spw_cqe *cqe, int timeout_ms)
{
	uint64_t deadline = 0;

	for (int spins = 0;; spins++) {
		/* Acquire: the entry is complete before the tail that shows it. */
		uint32_t tail = __atomic_load_n(&s->cqh->tail, __ATOMIC_ACQUIRE);
		struct timespec ts;
		uint64_t now;

		/* More than a ring's worth: the daemon ended the session and
		 * freed the rings' pages under us (they read as zeros). The
		 * second look catches a free between the tail and the entry. */
		if (tail - s->cq_head > s->l.cq_entries)
			return -EPIPE;
		if (tail != s->cq_head) {
			*cqe = s->cqes[s->cq_head & (s->l.cq_entries - 1)];
			if (__atomic_load_n(&s->cqh->tail, __ATOMIC_ACQUIRE) - s->cq_head > s->l.cq_entries)
				return -EPIPE;
			s->cq_head++;
			/* Release: done reading the entry before handing it back. */
			__atomic_store_n(&s->cqh->head, s->cq_head, __ATOMIC_RELEASE);
			__atomic_store_n(&s->cqh->flags, 0, __ATOMIC_RELAXED);
			return 0;
		}
		if (spins < 2000)
			continue;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
		if (!deadline)
			deadline = now + (uint64_t)timeout_ms;
		if (now >= deadline)
			return -ETIMEDOUT;
		__atomic_store_n(&s->cqh->flags, SPW_RING_NEED_WAKEUP, __ATOMIC_RELAXED);
		/* Full fence: the flag before the tail re-check (the daemon's
		 * side is the fence between its tail store and flag load). */
		atomic_thread_fence(memory_order_seq_cst);
		if (__atomic_load_n(&s->cqh->tail, __ATOMIC_ACQUIRE) == s->cq_head) {
			struct pollfd p = { .fd = s->fds[SPW_ATTACH_FD_CQ_EVT], .events = POLLIN };
			uint64_t v;

			if (poll(&p, 1, (int)(deadline - now)) == 1)
				(void)!read(p.fd, &v, sizeof(v));
		}
	}
}

int32_t raw_op(struct raw_session *s, uint8_t op, uint8_t flags, uint32_t tensor, uint32_t page)
{
	static uint64_t ud = 1000;
	struct spw_sqe sqe = { .opcode = op, .flags = flags, .tensor = tensor, .page = page, .user_data = ++ud };
	struct spw_cqe cqe;

	raw_submit(s, &sqe);
	ASSERT_OK(raw_reap(s, &cqe, 5000));
	ASSERT_UEQ(cqe.user_data, ud);
	ASSERT_EQ(cqe.flags, 0);
	return cqe.res;
}

cJSON *raw_status(const char *status_path)
{
	int fd = spw_test_connect(status_path);
	cJSON *r;

	ASSERT_OK(fd);
	r = raw_recv(fd, NULL, NULL, NULL);
	close(fd);
	ASSERT_TRUE(r != NULL);
	return r;
}

const cJSON *raw_status_session(const cJSON *st, const char *name)
{
	const cJSON *s;

	cJSON_ArrayForEach(s, cJSON_GetObjectItem(st, "sessions")) {
		const cJSON *n = cJSON_GetObjectItem(s, "name");
		if (cJSON_IsString(n) && !strcmp(n->valuestring, name))
			return s;
	}
	return NULL;
}

void raw_start_logged(struct spw_test_daemon *d, const char *config, const char *logpath, const char *faults)
{
	int saved, fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);

	ASSERT_GE(fd, 0);
	saved = dup(2);
	ASSERT_GE(saved, 0);
	ASSERT_GE(dup2(fd, 2), 0);
	if (faults)
		setenv("SPILLWAY_FAULTS", faults, 1);
	ASSERT_OK(spw_test_daemon_start(d, config));
	unsetenv("SPILLWAY_FAULTS");
	dup2(saved, 2);
	close(saved);
	close(fd);
	raw_guard(d);
}

char *raw_read_file(const char *path)
{
	static char buf[1 << 20];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	ASSERT_GE(fd, 0);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	ASSERT_GE(n, 0);
	buf[n] = '\0';
	return buf;
}

int raw_swap_files(const char *dir)
{
	uint64_t n, bytes;
	int r = swapfile_scan(dir, &n, &bytes);

	return r < 0 ? r : (int)n;
}

double raw_num(const cJSON *o, const char *path)
{
	const cJSON *v = json_path(o, path);

	return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static struct spw_test_daemon *guarded;

static void on_abort(int sig)
{
	if (guarded && guarded->pid > 0)
		kill(guarded->pid, SIGKILL);
	signal(sig, SIG_DFL);
	raise(sig);
}

void raw_guard(struct spw_test_daemon *d)
{
	guarded = d;
	signal(SIGABRT, on_abort);
}

int raw_count_fds(pid_t pid)
{
	char path[64];
	struct dirent *e;
	int n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d)
		return -errno;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

/* The service manager's side: a child drains $NOTIFY_SOCKET into a pipe as
 * systemd would (promptly: the datagram queue is short and sd_notify
 * blocks when it is full), and the test reads the pipe. */
int raw_notify_listen(char *path, size_t len, pid_t *reader)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0), p[2];

	ASSERT_OK(fd);
	snprintf(path, len, "/tmp/spw-notify-%d.sock", (int)getpid());
	unlink(path);
	strcpy(sa.sun_path, path);
	ASSERT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
	*reader = fork();
	ASSERT_GE(*reader, 0);
	if (*reader == 0) {
		char buf[512];

		/* Never outlive the test (an abort would leave meson's pipe open). */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(p[0]);
		for (;;) {
			ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
			if (n > 0) {
				buf[n++] = '\n';
				if (write(p[1], buf, (size_t)n) < 0)
					_exit(0);
			}
		}
	}
	close(p[1]);
	close(fd);
	return p[0];
}

/* Waits up to timeout_ms for a notification containing needle. */
bool raw_notify_wait(int fd, const char *needle, int timeout_ms)
{
	static char seen[65536];
	static size_t len;

	for (int waited = 0; waited < timeout_ms; waited += 10) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 10) == 1) {
			ssize_t n = read(fd, seen + len, sizeof(seen) - 1 - len);
			if (n > 0)
				len += (size_t)n;
			seen[len] = '\0';
			if (len > sizeof(seen) / 2) { /* keep the tail */
				memmove(seen, seen + len - 1024, 1024);
				len = 1024;
			}
		}
		if (strstr(seen, needle)) {
			/* consume it: later waits look for newer messages */
			len = 0;
			seen[0] = '\0';
			return true;
		}
	}
	return false;
}

double raw_cpu_seconds(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long ut = 0, st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	ASSERT_TRUE(f != NULL);
	ASSERT_TRUE(fgets(buf, sizeof(buf), f) != NULL);
	fclose(f);
	p = strrchr(buf, ')');
	ASSERT_TRUE(p != NULL);
	/* fields 14 and 15 (utime, stime), counted after the ")" of field 2 */
	ASSERT_EQ(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st), 2);
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}
