/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>

#include "noisy.h"
#include "spw-proto.h"
#include "spw-ring.h"
#include "util/clock.h"
#include "util/unixsock.h"

#define KiB 1024u
#define MiB (1024u * 1024u)
#define PAGE (64u * KiB)
#define REPLY_MS 2000
#define MAX_SESSIONS 16 /* per hostile life; their mappings live until the SIGKILL */

#define BUMP(nc, field)                                                       \
	do {                                                                  \
		if (nc)                                                       \
			__atomic_fetch_add(&(nc)->field, 1, __ATOMIC_RELAXED); \
	} while (0)

struct noisy_counters *noisy_counters_new(void)
{
	void *p = mmap(NULL, sizeof(struct noisy_counters), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* splitmix64: every choice of a life follows from its seed. */
static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void fill_random(uint64_t *s, void *buf, size_t n)
{
	uint8_t *b = buf;

	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = rnd(s);
		memcpy(b + i, &v, n - i < 8 ? n - i : 8);
	}
}

/* ---- the wire, tolerant of every failure ---- */

static int wire_send(int fd, const char *json)
{
	return spw_proto_send(fd, json, (uint32_t)strlen(json), NULL, 0);
}

/* One reply within REPLY_MS, parsed; descriptors into fds (up to *nfds).
 * NULL on EOF, timeout or a reply that is not JSON. */
static cJSON *wire_recv(int fd, int *fds, unsigned *nfds)
{
	struct timeval tv = { .tv_sec = REPLY_MS / 1000, .tv_usec = (REPLY_MS % 1000) * 1000 };
	char *buf = malloc(SPW_PROTO_MAX_FRAME + 1);
	cJSON *r = NULL;

	if (!buf)
		return NULL;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (spw_proto_recv(fd, buf, SPW_PROTO_MAX_FRAME + 1, fds, nfds) > 0)
		r = cJSON_Parse(buf);
	free(buf);
	return r;
}

/* 0 for an ok reply, -errno from an error reply, -EPROTO for none. */
static int reply_errno(const cJSON *r)
{
	const cJSON *t = cJSON_GetObjectItem(r, "type"), *e = cJSON_GetObjectItem(r, "errno");

	if (!r || !cJSON_IsString(t))
		return -EPROTO;
	if (!strcmp(t->valuestring, "error"))
		return cJSON_IsNumber(e) && e->valuedouble > 0 ? -(int)e->valuedouble : -EPROTO;
	return cJSON_IsTrue(cJSON_GetObjectItem(r, "ok")) ? 0 : -EPROTO;
}

static double num(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItem(o, key);

	return cJSON_IsNumber(v) ? v->valuedouble : -1.0;
}

/* A request and its reply's errno; *out gets a number from the reply. */
static int wire_call(int fd, const char *json, const char *key, double *out)
{
	cJSON *r;
	int e;

	if (wire_send(fd, json) < 0)
		return -EPIPE;
	r = wire_recv(fd, NULL, NULL);
	e = reply_errno(r);
	if (e == 0 && key && out)
		*out = num(r, key);
	cJSON_Delete(r);
	return e;
}

static int wire_hello(int fd)
{
	char m[160];

	snprintf(m, sizeof(m), "{\"type\":\"hello\",\"magic\":%u,\"major\":%d,\"minor\":%d,\"features\":%u}",
		 SPW_PROTO_MAGIC, SPW_PROTO_MAJOR, SPW_PROTO_MINOR, SPW_FEAT_RING_POLL | SPW_FEAT_SWAP);
	return wire_call(fd, m, NULL, NULL);
}

struct nsession {
	int ctl, fds[SPW_ATTACH_NFDS];
	uint8_t *region, *rings;
	size_t region_bytes;
	struct spw_ring_layout l;
	struct spw_ring_hdr *sqh, *cqh;
	struct spw_sqe *sqes;
	struct spw_cqe *cqes;
	uint32_t sq_tail, cq_head, slots;
	uint32_t tensor[4], pages[4];
	unsigned ntensors;
	bool dead;
};

/* Connects, says hello, attaches and maps. swap_bytes 0 leaves the key out
 * (the daemon's default). Returns 0 or a negative errno; on failure
 * nothing stays open. */
static int nsession_attach(const char *control, const char *name, uint64_t region, uint64_t swap_bytes,
			   struct nsession *s)
{
	char m[320];
	unsigned nfds = SPW_ATTACH_NFDS;
	struct stat st;
	cJSON *r;
	int e;

	memset(s, 0, sizeof(*s));
	for (int i = 0; i < SPW_ATTACH_NFDS; i++)
		s->fds[i] = -1;
	s->ctl = unix_connect(control);
	if (s->ctl < 0)
		return s->ctl;
	if ((e = wire_hello(s->ctl)) < 0)
		goto fail;
	if (swap_bytes)
		snprintf(m, sizeof(m), "{\"type\":\"attach\",\"session\":\"%s\",\"region_bytes\":%llu,\"page_size\":%u,"
			 "\"swap_bytes\":%llu}", name, (unsigned long long)region, PAGE, (unsigned long long)swap_bytes);
	else
		snprintf(m, sizeof(m), "{\"type\":\"attach\",\"session\":\"%s\",\"region_bytes\":%llu,\"page_size\":%u}",
			 name, (unsigned long long)region, PAGE);
	if (wire_send(s->ctl, m) < 0) {
		e = -EPIPE;
		goto fail;
	}
	r = wire_recv(s->ctl, s->fds, &nfds);
	e = reply_errno(r);
	if (e == 0 && (nfds != SPW_ATTACH_NFDS ||
		       spw_ring_layout((uint32_t)num(r, "sq_entries"), (uint32_t)num(r, "cq_entries"), &s->l) < 0))
		e = -EPROTO;
	s->region_bytes = (size_t)num(r, "region_bytes");
	s->slots = (uint32_t)num(r, "slots");
	cJSON_Delete(r);
	if (e < 0)
		goto fail;
	/* Sizes from fstat, never from the wire. */
	if (fstat(s->fds[SPW_ATTACH_FD_REGION], &st) < 0 || (size_t)st.st_size != s->region_bytes ||
	    fstat(s->fds[SPW_ATTACH_FD_RINGS], &st) < 0 || (size_t)st.st_size != s->l.bytes) {
		e = -EPROTO;
		goto fail;
	}
	s->region = mmap(NULL, s->region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fds[SPW_ATTACH_FD_REGION], 0);
	s->rings = mmap(NULL, s->l.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fds[SPW_ATTACH_FD_RINGS], 0);
	if (s->region == MAP_FAILED || s->rings == MAP_FAILED) {
		e = -ENOMEM;
		goto fail;
	}
	s->sqh = (struct spw_ring_hdr *)(s->rings + s->l.sq_hdr_off);
	s->cqh = (struct spw_ring_hdr *)(s->rings + s->l.cq_hdr_off);
	s->sqes = (struct spw_sqe *)(s->rings + s->l.sqes_off);
	s->cqes = (struct spw_cqe *)(s->rings + s->l.cqes_off);
	s->sq_tail = __atomic_load_n(&s->sqh->tail, __ATOMIC_ACQUIRE);
	s->cq_head = __atomic_load_n(&s->cqh->head, __ATOMIC_ACQUIRE);
	return 0;
fail:
	if (s->region && s->region != MAP_FAILED)
		munmap(s->region, s->region_bytes);
	if (s->rings && s->rings != MAP_FAILED)
		munmap(s->rings, s->l.bytes);
	for (int i = 0; i < SPW_ATTACH_NFDS; i++)
		if (s->fds[i] >= 0)
			close(s->fds[i]);
	close(s->ctl);
	memset(s, 0, sizeof(*s));
	s->dead = true;
	return e;
}

static void nsession_close(struct nsession *s)
{
	munmap(s->region, s->region_bytes);
	munmap(s->rings, s->l.bytes);
	for (int i = 0; i < SPW_ATTACH_NFDS; i++)
		close(s->fds[i]);
	close(s->ctl);
	memset(s, 0, sizeof(*s));
	s->dead = true;
}

static int nsession_register(struct nsession *s, const char *name, uint64_t bytes, bool swappable, uint32_t *id)
{
	char m[400];
	double t = -1;
	int e;

	snprintf(m, sizeof(m), "{\"type\":\"register\",\"name\":\"%s\",\"bytes\":%llu,\"kind\":\"%s\"}", name,
		 (unsigned long long)bytes, swappable ? "swappable" : "resident");
	e = wire_call(s->ctl, m, "tensor", &t);
	if (e == 0)
		*id = (uint32_t)t;
	return e;
}

/* The producer's side of the SQ (spw-ring.h): tail, full fence, doorbell
 * when the daemon sleeps. */
static void ring_push(struct nsession *s, const struct spw_sqe *e)
{
	s->sqes[s->sq_tail & (s->l.sq_entries - 1)] = *e;
	s->sq_tail++;
	__atomic_store_n(&s->sqh->tail, s->sq_tail, __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&s->sqh->flags, __ATOMIC_RELAXED) & SPW_RING_NEED_WAKEUP) {
		uint64_t one = 1;
		(void)!write(s->fds[SPW_ATTACH_FD_SQ_EVT], &one, sizeof(one));
	}
}

/* The consumer's side of the CQ: one completion within timeout_ms, or
 * -ETIMEDOUT. */
static int ring_reap(struct nsession *s, struct spw_cqe *c, int timeout_ms)
{
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000u;

	for (int spins = 0;; spins++) {
		if (__atomic_load_n(&s->cqh->tail, __ATOMIC_ACQUIRE) != s->cq_head) {
			*c = s->cqes[s->cq_head & (s->l.cq_entries - 1)];
			s->cq_head++;
			__atomic_store_n(&s->cqh->head, s->cq_head, __ATOMIC_RELEASE);
			__atomic_store_n(&s->cqh->flags, 0, __ATOMIC_RELAXED);
			return 0;
		}
		if (spins < 1000)
			continue;
		if (now_ns() >= deadline)
			return -ETIMEDOUT;
		__atomic_store_n(&s->cqh->flags, SPW_RING_NEED_WAKEUP, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (__atomic_load_n(&s->cqh->tail, __ATOMIC_ACQUIRE) == s->cq_head) {
			struct pollfd p = { .fd = s->fds[SPW_ATTACH_FD_CQ_EVT], .events = POLLIN };
			uint64_t v;

			uint64_t left = (deadline - now_ns()) / 1000000u;

			if (poll(&p, 1, left < 10 ? (int)left : 10) == 1)
				(void)!read(p.fd, &v, sizeof(v));
		}
	}
}

/* ---- the hostile tenant ---- */

struct life {
	const char *control, *status;
	uint64_t seed, end_ns;
	struct noisy_counters *nc;
	struct nsession s[MAX_SESSIONS];
	unsigned nsessions;
	struct nsession *current; /* what the scribbler rewrites (atomic) */
};

/* Garbage of one of many kinds on fd; some kinds make the daemon hang up,
 * some leave half a frame pending on purpose. */
static void send_garbage(int fd, uint64_t *rs, struct noisy_counters *nc)
{
	static const char *const msgs[] = {
		"{\"type\":\"attach\",\"session\":\"h/0\",\"region_bytes\":1048576}",
		"{\"type\":\"register\",\"name\":\"t\",\"bytes\":65536,\"kind\":\"swappable\"}",
		"{\"type\":\"hello\",\"magic\":1498894419,\"major\":1,\"minor\":0,\"features\":7}",
		"{\"type\":\"unregister\",\"tensor\":0}",
		"{\"type\":\"detach\"}",
		"{\"type\":\"attach\",\"session\":{\"a\":[1,2,{}]},\"region_bytes\":[],\"page_size\":null}",
		"{\"type\":\"register\",\"name\":\"line\\n<3>forged log line\",\"bytes\":1}",
		"{\"type\":\"register\",\"name\":\"\xff\xfe\xc3\",\"bytes\":1}",
		"{\"type\":\"attach\",\"session\":\"h/1\",\"region_bytes\":18446744073709551615}",
		"{\"type\":\"hello\",\"magic\":1498894419,\"major\":1,\"minor\":0}{\"trailing\":1}",
	};
	struct spw_proto_frame_hdr h = { 0 };
	char buf[1024];
	uint64_t r = rnd(rs);
	size_t n = 0;

	BUMP(nc, garbage_frames);
	switch (r % 9) {
	case 0: /* bytes with no framing at all */
		n = 1 + (r >> 8) % 256;
		fill_random(rs, buf, n);
		break;
	case 1: /* a length over the maximum, or reserved flags, or zero */
		h.len = (r >> 8) % 3 == 0 ? SPW_PROTO_MAX_FRAME + 1 + (uint32_t)(r >> 20) % 4096 : (r >> 8) % 3 == 1 ? 8 : 0;
		h.flags = (r >> 8) % 3 == 1 ? (uint32_t)(r >> 32) | 1u : 0;
		memcpy(buf, &h, sizeof(h));
		n = sizeof(h);
		break;
	case 2: /* well framed binary junk */
		h.len = 1 + (uint32_t)(r >> 8) % 512;
		memcpy(buf, &h, sizeof(h));
		fill_random(rs, buf + sizeof(h), h.len);
		n = sizeof(h) + h.len;
		break;
	case 3: /* a request with some bytes flipped */
	case 4: {
		const char *m = msgs[(r >> 8) % (sizeof(msgs) / sizeof(msgs[0]))];

		h.len = (uint32_t)strlen(m);
		memcpy(buf, &h, sizeof(h));
		memcpy(buf + sizeof(h), m, h.len);
		for (unsigned k = 0; k < (r >> 16) % 4; k++)
			buf[sizeof(h) + rnd(rs) % h.len] = (char)rnd(rs);
		n = sizeof(h) + h.len;
		break;
	}
	case 5: /* half a header */
		n = 1 + (r >> 8) % 7;
		memset(buf, 0x11, n);
		break;
	case 6: /* a big frame announced, a few bytes of it sent: held open */
		h.len = SPW_PROTO_MAX_FRAME;
		memcpy(buf, &h, sizeof(h));
		memcpy(buf + sizeof(h), "{\"type\":", 8);
		n = sizeof(h) + 8;
		break;
	case 7: { /* descriptors riding on a request */
		const char *m = "{\"type\":\"shout\"}";
		int p[2];

		if (pipe(p) == 0) {
			int sent[3] = { p[0], p[1], p[1] };
			(void)spw_proto_send(fd, m, (uint32_t)strlen(m), sent, 3);
			close(p[0]);
			close(p[1]);
		}
		return;
	}
	default: /* deep nesting */
		h.len = 1000;
		memcpy(buf, &h, sizeof(h));
		memset(buf + sizeof(h), '[', 1000);
		n = sizeof(h) + 1000;
		break;
	}
	(void)!send(fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* The second thread: rewrites the current session's ring entries, indices
 * and flags while the daemon reads them, and rings its doorbell. */
static void *scribbler(void *arg)
{
	struct life *L = arg;
	uint64_t rs = L->seed ^ 0x5c81b1e5ull;

	for (unsigned i = 0;; i++) {
		struct nsession *s = __atomic_load_n(&L->current, __ATOMIC_ACQUIRE);
		uint64_t r = rnd(&rs), one = 1;

		if (!s || s->dead) {
			usleep(1000);
			continue;
		}
		/* Mostly what the daemon must answer entry by entry (garbage
		 * entries, a tail a few entries on), now and then an index that
		 * ends the session (a tail far ahead, a CQ head moved anywhere,
		 * the daemon's own indices overwritten). */
		if ((r >> 58) != 0) {
			fill_random(&rs, &s->sqes[(r >> 8) & (s->l.sq_entries - 1)], sizeof(struct spw_sqe));
			if ((r >> 4) % 4 == 0)
				__atomic_store_n(&s->sqh->tail,
						 __atomic_load_n(&s->sqh->head, __ATOMIC_RELAXED) + (uint32_t)(r >> 16) % 8,
						 __ATOMIC_RELEASE);
			if ((r >> 6) % 8 == 0)
				__atomic_store_n((r >> 7) % 2 ? &s->sqh->flags : &s->cqh->flags, (uint32_t)(r >> 32),
						 __ATOMIC_RELAXED);
		} else {
			switch (r % 4) {
			case 0:
				__atomic_store_n(&s->sqh->tail, (uint32_t)(r >> 20), __ATOMIC_RELEASE);
				break;
			case 1:
				__atomic_store_n(&s->cqh->head, (uint32_t)(r >> 20), __ATOMIC_RELEASE);
				break;
			case 2:
				__atomic_store_n(&s->sqh->head, (uint32_t)(r >> 20), __ATOMIC_RELAXED);
				break;
			default:
				__atomic_store_n(&s->cqh->tail, (uint32_t)(r >> 20), __ATOMIC_RELAXED);
				__atomic_store_n(&s->cqh->ring_entries, (uint32_t)(r >> 8), __ATOMIC_RELAXED);
				break;
			}
		}
		(void)!write(s->fds[SPW_ATTACH_FD_SQ_EVT], &one, sizeof(one));
		BUMP(L->nc, scribbles);
		if (i % 8 == 0)
			usleep(200);
	}
	return NULL;
}

static struct nsession *hostile_session(struct life *L)
{
	char name[64];
	struct nsession *s;
	uint64_t r = rnd(&L->seed);

	if (L->nsessions >= MAX_SESSIONS)
		return NULL;
	s = &L->s[L->nsessions];
	snprintf(name, sizeof(name), "hostile/%d-%u", (int)getpid(), L->nsessions);
	/* Sometimes its own swap size, sometimes the daemon's default. */
	if (nsession_attach(L->control, name, (1 + r % 4) * MiB, (r >> 8) % 2 ? 8 * MiB : 0, s) < 0)
		return NULL;
	L->nsessions++;
	BUMP(L->nc, attaches);
	if (nsession_register(s, "h.resident", 4 * PAGE, false, &s->tensor[s->ntensors]) == 0)
		s->pages[s->ntensors++] = 4;
	if (nsession_register(s, "h.swappable", 24 * PAGE, true, &s->tensor[s->ntensors]) == 0)
		s->pages[s->ntensors++] = 24;
	__atomic_store_n(&L->current, s, __ATOMIC_RELEASE);
	return s;
}

/* A burst of plausible ops through the ring the scribbler is rewriting;
 * completions are reaped when they come, not waited for long. */
static void hostile_ops(struct life *L, struct nsession *s)
{
	static const uint8_t ops[] = { SPW_OP_PIN, SPW_OP_UNPIN, SPW_OP_PREFETCH, SPW_OP_FLUSH, SPW_OP_STEP, SPW_OP_NOP };
	struct spw_cqe c;

	for (int i = 0; i < 16 && s->ntensors; i++) {
		uint64_t r = rnd(&L->seed);
		unsigned t = (unsigned)(r % s->ntensors);
		struct spw_sqe e = { .opcode = ops[(r >> 8) % sizeof(ops)], .tensor = s->tensor[t],
				     .page = (uint32_t)(r >> 16) % (s->pages[t] + 1), .user_data = r };

		if (e.opcode == SPW_OP_UNPIN)
			e.flags = (r >> 40) % 2 ? SPW_UNPIN_DIRTY : SPW_UNPIN_CLEAN;
		if (e.opcode == SPW_OP_PIN && (r >> 44) % 2)
			memset(s->region + (size_t)((r >> 48) % s->slots) * PAGE, (int)r, PAGE);
		ring_push(s, &e);
	}
	while (ring_reap(s, &c, 1) == 0)
		;
}

/* Holes in the memory the daemon shares with us, by every route. */
static void hostile_punch(struct life *L, struct nsession *s)
{
	uint64_t r = rnd(&L->seed);
	off_t off = (off_t)((r >> 8) % s->slots) * PAGE;
	size_t len = (size_t)(1 + (r >> 24) % 4) * PAGE;

	if (r % 4 == 0) {
		/* The rings: headers and entries vanish under the daemon. */
		(void)!fallocate(s->fds[SPW_ATTACH_FD_RINGS], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
				 (off_t)s->l.bytes);
	} else if (r % 4 == 1) {
		(void)!madvise(s->region + off, len < s->region_bytes - (size_t)off ? len : s->region_bytes - (size_t)off,
			       MADV_REMOVE);
	} else {
		(void)!fallocate(s->fds[SPW_ATTACH_FD_REGION], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off,
				 (off_t)len);
	}
	/* Seals and sizes it must not be able to change; errors expected. */
	(void)!ftruncate(s->fds[SPW_ATTACH_FD_REGION], (off_t)s->region_bytes / 2);
	(void)!fcntl(s->fds[SPW_ATTACH_FD_REGION], F_ADD_SEALS, F_SEAL_WRITE);
	BUMP(L->nc, punches);
}

/* Requests on the session's own connection, valid and not, replies
 * sometimes read and sometimes left for the daemon to hold. */
static void hostile_requests(struct life *L, struct nsession *s)
{
	char m[256];
	uint64_t r = rnd(&L->seed);

	switch (r % 5) {
	case 0:
		snprintf(m, sizeof(m), "{\"type\":\"register\",\"name\":\"x%llu\",\"bytes\":%llu,\"kind\":\"%s\"}",
			 (unsigned long long)(r >> 40), (unsigned long long)((r >> 8) % (4 * MiB)) + 1,
			 (r >> 4) % 2 ? "swappable" : "resident");
		break;
	case 1:
		snprintf(m, sizeof(m), "{\"type\":\"unregister\",\"tensor\":%u}", (unsigned)(r >> 8) % 8);
		break;
	case 2:
		snprintf(m, sizeof(m), "{\"type\":\"detach\"}");
		s->dead = true;
		break;
	default:
		send_garbage(s->ctl, &L->seed, L->nc);
		return;
	}
	if (wire_send(s->ctl, m) < 0) {
		s->dead = true;
		return;
	}
	if ((r >> 32) % 2) {
		cJSON_Delete(wire_recv(s->ctl, NULL, NULL));
	}
}

static void die(int sig)
{
	(void)sig;
	kill(getpid(), SIGKILL);
}

void noisy_hostile_life(const char *control, const char *status, uint64_t seed, unsigned life_ms,
			struct noisy_counters *nc)
{
	static struct life L;
	struct itimerval at = { .it_value = { .tv_sec = life_ms / 1000, .tv_usec = (life_ms % 1000) * 1000 } };
	pthread_t th;
	int idle[8], nidle = 0;

	/* Die with the parent: a hostile life never outlives its test. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	signal(SIGPIPE, SIG_IGN);
	/* The end of the life comes where it falls, in the middle of a
	 * request, a frame or a burst, whatever it is waiting for. */
	signal(SIGALRM, die);
	setitimer(ITIMER_REAL, &at, NULL);
	memset(&L, 0, sizeof(L));
	L.control = control;
	L.status = status;
	L.seed = seed;
	L.nc = nc;
	L.end_ns = now_ns() + (uint64_t)life_ms * 1000000u;
	BUMP(nc, lives);

	/* Connections that never say hello: some silent, some with half a
	 * frame, some with a hello and nothing after it. */
	for (unsigned n = 1 + (unsigned)(rnd(&L.seed) % 6); nidle < (int)n; nidle++) {
		idle[nidle] = unix_connect(control);
		if (idle[nidle] < 0)
			break;
		BUMP(nc, idle_conns);
		if (nidle % 3 == 1)
			(void)!send(idle[nidle], "\x40\x00\x00", 3, MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	pthread_create(&th, NULL, scribbler, &L);

	while (now_ns() < L.end_ns) {
		struct nsession *s = __atomic_load_n(&L.current, __ATOMIC_ACQUIRE);
		uint64_t r = rnd(&L.seed);

		/* The daemon may have ended the session (and hung up). */
		if (s && !s->dead && poll(&(struct pollfd){ .fd = s->ctl, .events = POLLRDHUP }, 1, 0) == 1)
			s->dead = true;
		if (!s || s->dead) {
			s = hostile_session(&L);
			if (!s) {
				usleep(2000);
				continue;
			}
		}
		switch (r % 10) {
		case 0:
		case 1: /* garbage on connections of its own */
			for (unsigned k = 0; k < 1 + (r >> 40) % 4; k++) {
				int fd = unix_connect(control);
				uint64_t how = rnd(&L.seed);

				if (fd < 0)
					break;
				if (how % 2)
					(void)wire_hello(fd);
				send_garbage(fd, &L.seed, nc);
				if ((how >> 8) % 4)
					close(fd);
				else if (nidle < 8)
					idle[nidle++] = fd; /* and kept, unread */
				else
					close(fd);
			}
			break;
		case 2:
		case 3:
		case 4:
			hostile_ops(&L, s);
			break;
		case 5:
		case 6:
			hostile_punch(&L, s);
			break;
		case 7:
			hostile_requests(&L, s);
			break;
		case 8: { /* a status reader that hangs up at once */
			int fd = unix_connect(status);

			if (fd >= 0)
				close(fd);
			break;
		}
		default:
			usleep(500);
			break;
		}
	}
	/* kill -9, with everything open: sessions, half frames, mappings. */
	kill(getpid(), SIGKILL);
	for (;;)
		pause();
}

uint64_t noisy_hostile_loop(const char *control, const char *status, uint64_t seed, uint64_t deadline_ns,
			    struct noisy_counters *nc)
{
	uint64_t lives = 0;

	while (!deadline_ns || now_ns() < deadline_ns) {
		uint64_t r = rnd(&seed), t0;
		unsigned life_ms = 20 + (unsigned)(r % 380);
		int st;
		pid_t pid = fork();

		if (pid < 0) {
			usleep(10000);
			continue;
		}
		if (pid == 0)
			noisy_hostile_life(control, status, r, life_ms, nc);
		lives++;
		/* A life stuck in a blocking call (a daemon whose backlog is
		 * full) is killed from here a little after its time. */
		t0 = now_ns();
		while (waitpid(pid, &st, WNOHANG) == 0) {
			if (now_ns() - t0 > (uint64_t)(life_ms + 3000) * 1000000u) {
				kill(pid, SIGKILL);
				waitpid(pid, &st, 0);
				break;
			}
			usleep(2000);
		}
		if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
			BUMP(nc, kills);
	}
	return lives;
}

/* ---- the storm and the hammer ---- */

int64_t noisy_storm(const char *control, const char *session, unsigned ntensors, uint64_t deadline_ns,
		    struct noisy_counters *nc)
{
	struct nsession s;
	uint32_t *ids = calloc(ntensors, sizeof(*ids));
	int64_t done = 0;
	int r;

	if (!ids)
		return -ENOMEM;
	signal(SIGPIPE, SIG_IGN);
	r = nsession_attach(control, session, 1 * MiB, (uint64_t)ntensors * PAGE, &s);
	if (r < 0) {
		free(ids);
		return r;
	}
	while (!deadline_ns || now_ns() < deadline_ns) {
		unsigned n = 0;
		char name[64];

		for (; n < ntensors && (!deadline_ns || now_ns() < deadline_ns); n++) {
			snprintf(name, sizeof(name), "storm.layer%u.weight", n);
			if (nsession_register(&s, name, 4 * KiB, true, &ids[n]) < 0)
				break;
			done++;
			BUMP(nc, registers);
		}
		for (unsigned i = 0; i < n; i++) {
			snprintf(name, sizeof(name), "{\"type\":\"unregister\",\"tensor\":%u}", ids[i]);
			if (wire_call(s.ctl, name, NULL, NULL) == -EPROTO)
				goto out; /* the daemon hung up */
		}
		if (n == 0)
			break;
	}
out:
	nsession_close(&s);
	free(ids);
	return done;
}

int64_t noisy_hammer(const char *control, const char *session, uint64_t deadline_ns, struct noisy_counters *nc)
{
	struct nsession s;
	uint32_t t;
	int64_t done = 0;
	int r;

	signal(SIGPIPE, SIG_IGN);
	r = nsession_attach(control, session, 2 * MiB, 0, &s);
	if (r < 0)
		return r;
	if ((r = nsession_register(&s, "hammer", 16 * PAGE, false, &t)) < 0) {
		nsession_close(&s);
		return r;
	}
	while (!deadline_ns || now_ns() < deadline_ns) {
		uint32_t n = s.l.sq_entries / 2;
		struct spw_cqe c;

		for (uint32_t i = 0; i < n; i++) {
			static const uint8_t ops[] = { SPW_OP_PIN, SPW_OP_UNPIN, SPW_OP_NOP };
			struct spw_sqe e = { .opcode = ops[i % 3], .tensor = t, .page = (i / 3) % 16, .user_data = i };

			if (e.opcode == SPW_OP_UNPIN)
				e.flags = SPW_UNPIN_DIRTY;
			ring_push(&s, &e);
		}
		for (uint32_t i = 0; i < n; i++) {
			if (ring_reap(&s, &c, 5000) < 0)
				goto out;
			done++;
			BUMP(nc, ring_ops);
		}
	}
out:
	nsession_close(&s);
	return done;
}
