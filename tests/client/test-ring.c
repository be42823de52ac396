/* SPDX-License-Identifier: MIT */
/*
 * test-ring: libspillway against a fake daemon thread in this process, so
 * that the client's side of the wire can be driven into corners a real
 * daemon never reaches: indices that wrap past UINT32_MAX, full rings, a
 * daemon that sleeps or polls, attach replies that break the protocol,
 * completions for nothing, and a daemon that hangs up mid-wait.
 *
 * The fake speaks the real wire (proto/), so it doubles as a small,
 * readable model of what spillwayd does on the other end.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "spw-proto.h"
#include "spw-ring.h"
#include "test.h"

enum fake_attach {
	ATTACH_OK,
	ATTACH_THREE_FDS,     /* one descriptor short */
	ATTACH_SHORT_REGION,  /* memfd smaller than region_bytes */
	ATTACH_UNSEALED,      /* region can still shrink */
	ATTACH_BAD_GEOMETRY,  /* rings_bytes disagrees with the layout */
	ATTACH_REFUSE,        /* {"type":"error"} with a sentence */
};

struct fake {
	char dir[64], path[100];
	int lfd, conn;
	pthread_t thread;

	/* Set before start. */
	enum fake_attach attach;
	uint32_t sq_entries, cq_entries, start_index;
	bool sleeper;           /* always sleep on the SQ eventfd (NEED_WAKEUP set) */
	int delay_ms;           /* wait this long before completing each entry */
	bool hangup_after_attach;    /* close the connection delay_ms after attach, serve nothing */
	bool bogus_completion;  /* post a completion for an unknown operation */
	bool free_rings;        /* delay_ms after attach: punch the rings memfd, hang up 300 ms later */
	bool hangup_first;      /* free_rings: hang up first, as spillwayd does */
	bool wait_sleep;        /* post each completion only once the client sleeps for it (NEED_WAKEUP) */

	/* Shared with the test while running. */
	atomic_bool stall;      /* leave the SQ alone */
	atomic_bool quit;
	atomic_uint sq_rings;   /* doorbells the client rang */
	atomic_uint cq_rings;   /* doorbells we rang */
	atomic_uint served;
	atomic_bool punched;    /* free_rings: the rings are gone */

	void *rings;
	struct spw_ring_layout l;
	int region_fd, rings_fd, sq_evt, cq_evt;
	uint64_t region_bytes;
	uint32_t page_size;
};

static void msleep(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void reply_json(struct fake *f, cJSON *o, const int *fds, unsigned nfds)
{
	char *s = cJSON_PrintUnformatted(o);

	ASSERT_TRUE(s != NULL);
	ASSERT_OK(spw_proto_send(f->conn, s, (uint32_t)strlen(s), fds, nfds));
	free(s);
	cJSON_Delete(o);
}

static void do_attach(struct fake *f, const cJSON *req)
{
	cJSON *o;
	int fds[4];
	uint64_t memfd_bytes;

	f->region_bytes = (uint64_t)cJSON_GetObjectItem(req, "region_bytes")->valuedouble;
	f->page_size = (uint32_t)cJSON_GetObjectItem(req, "page_size")->valuedouble;
	if (f->attach == ATTACH_REFUSE) {
		o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "type", "error");
		cJSON_AddNumberToObject(o, "errno", ENOMEM);
		cJSON_AddStringToObject(o, "message",
					"attach job/0: region 2.0 GiB would exceed pool.max_bytes 1.0 GiB (1.0 GiB in use)");
		reply_json(f, o, NULL, 0);
		return;
	}
	ASSERT_OK(spw_ring_layout(f->sq_entries, f->cq_entries, &f->l));

	/* The region: a sealed memfd, as spillwayd makes it. */
	f->region_fd = memfd_create("fake-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ASSERT_GE(f->region_fd, 0);
	memfd_bytes = f->attach == ATTACH_SHORT_REGION ? f->region_bytes / 2 : f->region_bytes;
	ASSERT_OK(ftruncate(f->region_fd, (off_t)memfd_bytes));
	if (f->attach != ATTACH_UNSEALED)
		ASSERT_OK(fcntl(f->region_fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL));

	f->rings_fd = memfd_create("fake-rings", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ASSERT_GE(f->rings_fd, 0);
	ASSERT_OK(ftruncate(f->rings_fd, (off_t)f->l.bytes));
	ASSERT_OK(fcntl(f->rings_fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL));
	f->rings = mmap(NULL, f->l.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f->rings_fd, 0);
	ASSERT_TRUE(f->rings != MAP_FAILED);
	{
		struct spw_ring_hdr *sq = (void *)((char *)f->rings + f->l.sq_hdr_off);
		struct spw_ring_hdr *cq = (void *)((char *)f->rings + f->l.cq_hdr_off);

		/* Start near the top of uint32_t so a test can run the
		 * indices through the wrap. */
		sq->head = sq->tail = f->start_index;
		cq->head = cq->tail = f->start_index;
		sq->ring_entries = f->sq_entries;
		cq->ring_entries = f->cq_entries;
		sq->flags = f->sleeper ? SPW_RING_NEED_WAKEUP : 0;
	}
	f->sq_evt = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	f->cq_evt = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ASSERT_GE(f->sq_evt, 0);
	ASSERT_GE(f->cq_evt, 0);

	o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "type", "attach");
	cJSON_AddBoolToObject(o, "ok", 1);
	cJSON_AddItemToObject(o, "session", cJSON_Duplicate(cJSON_GetObjectItem(req, "session"), 1));
	cJSON_AddNumberToObject(o, "region_bytes", (double)f->region_bytes);
	cJSON_AddNumberToObject(o, "page_size", f->page_size);
	cJSON_AddNumberToObject(o, "slots", (double)(f->region_bytes / f->page_size));
	cJSON_AddNumberToObject(o, "sq_entries", f->sq_entries);
	cJSON_AddNumberToObject(o, "cq_entries", f->cq_entries);
	cJSON_AddNumberToObject(o, "rings_bytes",
				(double)(f->attach == ATTACH_BAD_GEOMETRY ? f->l.bytes * 2 : f->l.bytes));
	cJSON_AddBoolToObject(o, "locked", 0);
	cJSON_AddBoolToObject(o, "hugepages", 0);
	cJSON_AddNumberToObject(o, "numa_node", -1);
	fds[0] = f->region_fd;
	fds[1] = f->rings_fd;
	fds[2] = f->sq_evt;
	fds[3] = f->cq_evt;
	reply_json(f, o, fds, f->attach == ATTACH_THREE_FDS ? 3 : 4);
}

/* One control request; returns false when the client went away. */
static bool serve_control(struct fake *f)
{
	static char buf[SPW_PROTO_MAX_FRAME + 1];
	cJSON *req, *o;
	const char *type;
	int n = spw_proto_recv(f->conn, buf, sizeof(buf), NULL, NULL);

	if (n <= 0)
		return false;
	req = cJSON_Parse(buf);
	ASSERT_TRUE(req != NULL);
	type = cJSON_GetObjectItem(req, "type")->valuestring;
	if (!strcmp(type, "hello")) {
		o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "type", "hello");
		cJSON_AddBoolToObject(o, "ok", 1);
		cJSON_AddNumberToObject(o, "magic", SPW_PROTO_MAGIC);
		cJSON_AddNumberToObject(o, "major", SPW_PROTO_MAJOR);
		cJSON_AddNumberToObject(o, "minor", SPW_PROTO_MINOR);
		cJSON_AddNumberToObject(o, "features", SPW_FEAT_RING_POLL);
		reply_json(f, o, NULL, 0);
	} else if (!strcmp(type, "attach")) {
		do_attach(f, req);
	} else {
		o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "type", type);
		cJSON_AddBoolToObject(o, "ok", 1);
		reply_json(f, o, NULL, 0);
	}
	cJSON_Delete(req);
	return true;
}

#define HDR(f, off) ((struct spw_ring_hdr *)((char *)(f)->rings + (f)->l.off))

/* Posts one completion the way the daemon must: entry, release the tail,
 * full fence, then ring only if the client said it sleeps. */
static void post(struct fake *f, uint64_t user_data, int32_t res)
{
	struct spw_ring_hdr *cq = HDR(f, cq_hdr_off);
	struct spw_cqe *cqes = (void *)((char *)f->rings + f->l.cqes_off);
	uint32_t tail = cq->tail; /* ours alone */
	uint64_t one = 1;

	ASSERT_LT(tail - __atomic_load_n(&cq->head, __ATOMIC_ACQUIRE), f->cq_entries);
	cqes[tail & (f->cq_entries - 1)] = (struct spw_cqe){ .user_data = user_data, .res = res };
	__atomic_store_n(&cq->tail, tail + 1, __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&cq->flags, __ATOMIC_RELAXED) & SPW_RING_NEED_WAKEUP) {
		/* Count first: the write lets the test thread run on. */
		atomic_fetch_add(&f->cq_rings, 1);
		ASSERT_EQ(write(f->cq_evt, &one, sizeof(one)), 8);
	}
}

/* Consumes what the SQ holds; returns how many entries. */
static unsigned serve_sq(struct fake *f)
{
	struct spw_ring_hdr *sq = HDR(f, sq_hdr_off);
	struct spw_sqe *sqes = (void *)((char *)f->rings + f->l.sqes_off);
	uint32_t head = sq->head, tail = __atomic_load_n(&sq->tail, __ATOMIC_ACQUIRE);
	unsigned n = 0;

	ASSERT_LE(tail - head, f->sq_entries);
	for (; head != tail; head++, n++) {
		struct spw_sqe e = sqes[head & (f->sq_entries - 1)];
		int32_t res = 0;

		/* Hand the slot back before completing, as a daemon that
		 * copies entries out first would. */
		__atomic_store_n(&sq->head, head + 1, __ATOMIC_RELEASE);
		ASSERT_OK(spw_sqe_check(&e));
		if (f->delay_ms)
			msleep(f->delay_ms);
		if (f->wait_sleep) {
			/* However long the delay, a loaded machine may not have
			 * run the client to its sleep yet: wait for it (bounded). */
			struct spw_ring_hdr *cq = HDR(f, cq_hdr_off);

			for (int w = 0; w < 5000 && !(__atomic_load_n(&cq->flags, __ATOMIC_ACQUIRE) & SPW_RING_NEED_WAKEUP);
			     w++)
				msleep(1);
		}
		if (e.opcode == SPW_OP_PIN)
			res = (int32_t)(e.page % (uint32_t)(f->region_bytes / f->page_size));
		post(f, f->bogus_completion ? e.user_data ^ 0xdead0000ull : e.user_data, res);
		atomic_fetch_add(&f->served, 1);
	}
	return n;
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t sl = sizeof(sa);
	bool attached = false;

	f->conn = accept4(f->lfd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC);
	ASSERT_GE(f->conn, 0);
	while (!atomic_load(&f->quit)) {
		struct pollfd p[2] = { { .fd = f->conn, .events = POLLIN }, { .fd = -1, .events = POLLIN } };

		if (attached && f->hangup_after_attach) {
			msleep(f->delay_ms);
			break;
		}
		if (attached && f->free_rings) {
			/* What a daemon does when it ends a session or exits:
			 * the rings' pages go, and the connection (spillwayd
			 * hangs up first, older ones after). */
			msleep(f->delay_ms);
			if (f->hangup_first)
				ASSERT_OK(shutdown(f->conn, SHUT_RDWR));
			ASSERT_OK(fallocate(f->rings_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
					    (off_t)f->l.bytes));
			atomic_store(&f->punched, true);
			msleep(300);
			break;
		}
		if (attached && !atomic_load(&f->stall)) {
			struct spw_ring_hdr *sq = HDR(f, sq_hdr_off);

			if (serve_sq(f))
				continue;
			if (f->sleeper) {
				/* The daemon's half of the doorbell protocol:
				 * flag, fence, look again, then sleep. */
				__atomic_store_n(&sq->flags, SPW_RING_NEED_WAKEUP, __ATOMIC_RELAXED);
				__atomic_thread_fence(__ATOMIC_SEQ_CST);
				if (serve_sq(f))
					continue;
				p[1].fd = f->sq_evt;
			}
		}
		if (poll(p, 2, attached && !f->sleeper ? 0 : 5) > 0) {
			if (p[0].revents && !serve_control(f))
				break;
			attached = attached || f->rings;
			if (p[1].revents & POLLIN) {
				uint64_t v;
				ASSERT_EQ(read(f->sq_evt, &v, sizeof(v)), 8);
				atomic_fetch_add(&f->sq_rings, (unsigned)v);
			}
		}
	}
	close(f->conn);
	return NULL;
}

static void fake_start(struct fake *f)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (!f->sq_entries)
		f->sq_entries = 8;
	if (!f->cq_entries)
		f->cq_entries = 16;
	f->region_fd = f->rings_fd = f->sq_evt = f->cq_evt = -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/spw-fake-XXXXXX");
	ASSERT_TRUE(mkdtemp(f->dir) != NULL);
	snprintf(f->path, sizeof(f->path), "%s/control.sock", f->dir);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->path);
	f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT_GE(f->lfd, 0);
	ASSERT_OK(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)));
	ASSERT_OK(listen(f->lfd, 4));
	ASSERT_EQ(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
	atomic_store(&f->quit, true);
	pthread_join(f->thread, NULL);
	if (f->rings)
		munmap(f->rings, f->l.bytes);
	for (int *fd = &f->region_fd; fd <= &f->cq_evt; fd++)
		if (*fd >= 0)
			close(*fd);
	close(f->lfd);
	unlink(f->path);
	rmdir(f->dir);
}

/* A connected, attached client on f. */
static spw_client *attach(struct fake *f, uint32_t spin_us)
{
	struct spw_client_opts o = { .size = sizeof(o), .spin_us = spin_us, .reply_timeout_ms = 5000 };
	struct spw_attach_opts a = { .size = sizeof(a), .session = "job/0", .region_bytes = 4u << 20,
				     .page_size = 1u << 20 };
	spw_client *c = NULL;

	ASSERT_OK(spw_client_new(&o, &c));
	ASSERT_OK(spw_client_connect(c, f->path));
	ASSERT_OK(spw_client_attach(c, &a));
	return c;
}

static void test_attach_and_info(void)
{
	struct fake f = { 0 };
	struct spw_session_info info = { .size = sizeof(info) };
	spw_client *c;

	fake_start(&f);
	c = attach(&f, 0);
	ASSERT_OK(spw_client_info(c, &info));
	ASSERT_UEQ(info.region_bytes, 4u << 20);
	ASSERT_UEQ(info.page_size, 1u << 20);
	ASSERT_UEQ(info.slots, 4);
	ASSERT_UEQ(info.sq_entries, 8);
	ASSERT_UEQ(info.cq_entries, 16);
	ASSERT_EQ(info.numa_node, -1);
	/* Slot pointers are region base + slot * page_size, and only in range. */
	ASSERT_TRUE((char *)spw_slot_ptr(c, 3) - (char *)spw_slot_ptr(c, 0) == 3 << 20);
	ASSERT_TRUE(spw_slot_ptr(c, 4) == NULL);
	ASSERT_OK(spw_nop(c));
	/* This daemon grants no SPW_FEAT_UNPIN_COPY: an unpin as a copy is
	 * refused here, naming the way that works, and nothing is queued. */
	ASSERT_EQ(spw_submit_unpin_copy(c, 1, 0, 0, 0, 7), -EOPNOTSUPP);
	ASSERT_CONTAINS(spw_client_last_error(c), "unpin dirty instead");
	ASSERT_OK(spw_nop(c));
	ASSERT_OK(spw_client_detach(c));
	ASSERT_EQ(spw_nop(c), -ENOTCONN);
	c = spw_client_free(c);
	ASSERT_TRUE(c == NULL);
	fake_stop(&f);
}

/* Head and tail are free-running uint32_t: start them 20 below the wrap
 * and push hundreds of entries through an 8-entry SQ. */
static void test_wraparound(void)
{
	struct fake f = { .start_index = UINT32_MAX - 20 };
	struct spw_completion comp[16];
	spw_client *c;
	void *p;

	fake_start(&f);
	c = attach(&f, 0);
	for (int i = 0; i < 300; i++)
		ASSERT_OK(spw_nop(c));
	for (uint32_t page = 0; page < 40; page++) {
		ASSERT_EQ(spw_pin(c, 1, page, &p), (int)(page % 4));
		ASSERT_TRUE(p == spw_slot_ptr(c, page % 4));
	}
	/* Async batches of a full SQ: user_data comes back untouched. */
	for (int round = 0; round < 50; round++) {
		uint64_t seen = 0;
		int got = 0;

		for (uint64_t i = 0; i < 8; i++)
			ASSERT_OK(spw_submit_nop(c, 0x1000 + i));
		while (got < 8) {
			int n = spw_reap(c, comp, 16, 2000);
			ASSERT_GT(n, 0);
			for (int i = 0; i < n; i++) {
				ASSERT_EQ(comp[i].res, 0);
				ASSERT_TRUE(comp[i].user_data >= 0x1000 && comp[i].user_data < 0x1008);
				seen |= 1ull << (comp[i].user_data - 0x1000);
			}
			got += n;
		}
		ASSERT_UEQ(seen, 0xff);
	}
	/* The indices really crossed zero. */
	ASSERT_LT(HDR(&f, sq_hdr_off)->tail, 2000);
	c = spw_client_free(c);
	fake_stop(&f);
}

/* The SQ holds sq_entries; at most cq_entries may be in flight. Past
 * either, submission fails with -EBUSY and nothing is lost. */
static void test_full_ring(void)
{
	struct fake f = { 0 };
	struct spw_completion comp[32];
	spw_client *c;
	int got = 0;

	atomic_store(&f.stall, true);
	fake_start(&f);
	c = attach(&f, 0);
	for (int i = 0; i < 8; i++)
		ASSERT_OK(spw_submit_nop(c, (uint64_t)i));
	ASSERT_EQ(spw_submit_nop(c, 99), -EBUSY);
	ASSERT_CONTAINS(spw_client_last_error(c), "submission ring full");
	ASSERT_EQ(spw_reap(c, comp, 32, 0), 0); /* nothing yet, no wait */
	ASSERT_EQ(spw_reap(c, comp, 32, 20), -ETIMEDOUT);

	/* Let the daemon take all 8 but do not reap: the SQ is empty again,
	 * and 8 more fit before the 16-entry CQ could overflow. */
	atomic_store(&f.stall, false);
	while (atomic_load(&f.served) < 8)
		msleep(1);
	for (int i = 8; i < 16; i++)
		ASSERT_OK(spw_submit_nop(c, (uint64_t)i));
	ASSERT_EQ(spw_submit_nop(c, 99), -EBUSY);
	ASSERT_CONTAINS(spw_client_last_error(c), "completion ring full");
	while (got < 16) {
		int n = spw_reap(c, comp + got, (unsigned)(32 - got), 2000);
		ASSERT_GT(n, 0);
		got += n;
	}
	for (int i = 0; i < 16; i++)
		ASSERT_UEQ(comp[i].user_data, (uint64_t)i); /* this fake completes in order */
	ASSERT_OK(spw_submit_nop(c, 100));
	c = spw_client_free(c);
	fake_stop(&f);
}

/* A sync call parks other completions for spw_reap, in order. */
static void test_sync_keeps_async(void)
{
	struct fake f = { 0 };
	struct spw_completion comp[8];
	spw_client *c;

	fake_start(&f);
	c = attach(&f, 0);
	ASSERT_OK(spw_submit_nop(c, 7));
	ASSERT_OK(spw_submit_pin(c, 3, 2, 8));
	ASSERT_EQ(spw_pin(c, 1, 1, NULL), 1);
	ASSERT_EQ(spw_reap(c, comp, 8, 1000), 2);
	ASSERT_UEQ(comp[0].user_data, 7);
	ASSERT_EQ(comp[0].res, 0);
	ASSERT_UEQ(comp[1].user_data, 8);
	ASSERT_EQ(comp[1].res, 2);
	ASSERT_EQ(spw_submit_unpin(c, 1, 1, 0x80, 9), -EINVAL);
	c = spw_client_free(c);
	fake_stop(&f);
}

/* Doorbells, SQ direction: a daemon that sleeps with NEED_WAKEUP set gets
 * rung; one that polls (flag clear) never does. */
static void test_sq_doorbell(void)
{
	struct fake sleeper = { .sleeper = true }, poller = { 0 };
	spw_client *c;

	fake_start(&sleeper);
	c = attach(&sleeper, 0);
	for (int i = 0; i < 100; i++)
		ASSERT_OK(spw_nop(c)); /* would hang if the client missed the flag */
	ASSERT_GE(atomic_load(&sleeper.sq_rings), 1);
	ASSERT_LE(atomic_load(&sleeper.sq_rings), 100);
	c = spw_client_free(c);
	fake_stop(&sleeper);

	fake_start(&poller);
	c = attach(&poller, 0);
	for (int i = 0; i < 100; i++)
		ASSERT_OK(spw_nop(c));
	ASSERT_EQ(atomic_load(&poller.sq_rings), 0);
	c = spw_client_free(c);
	fake_stop(&poller);
}

/* Doorbells, CQ direction: a completion that comes long after the spin
 * ends finds NEED_WAKEUP set, and the eventfd wakes the client. With the
 * spin long enough, the client never needs waking. ("Long after" and
 * "long enough" are made sure of, not timed: the slow fake posts only
 * once the client sleeps, and the spin is a minute.) */
static void test_cq_doorbell(void)
{
	struct fake slow = { .delay_ms = 30, .wait_sleep = true };
	spw_client *c;
	double t;

	fake_start(&slow);
	c = attach(&slow, 10); /* 10 us spin, then sleep */
	t = now_s();
	for (int i = 0; i < 5; i++)
		ASSERT_OK(spw_nop(c));
	ASSERT_GE((now_s() - t) * 1000, 150);
	ASSERT_EQ(atomic_load(&slow.cq_rings), 5);
	/* Awake again: the flag was cleared. */
	ASSERT_EQ(HDR(&slow, cq_hdr_off)->flags & SPW_RING_NEED_WAKEUP, 0);
	c = spw_client_free(c);
	fake_stop(&slow);

	struct fake fast = { 0 };
	fake_start(&fast);
	c = attach(&fast, 60000000); /* a minute's spin covers every round trip, however loaded the machine */
	for (int i = 0; i < 100; i++)
		ASSERT_OK(spw_nop(c));
	ASSERT_EQ(atomic_load(&fast.cq_rings), 0);
	c = spw_client_free(c);
	fake_stop(&fast);
}

/* Everything a daemon sends at attach is checked; a bad reply is an error
 * with a sentence, never a crash, and leaves *nothing* mapped or open. */
static void test_bad_attach(void)
{
	static const struct {
		enum fake_attach mode;
		int err;
		const char *says;
	} cases[] = {
		{ ATTACH_THREE_FDS, -EPROTO, "passed 3 descriptors" },
		{ ATTACH_SHORT_REGION, -EPROTO, "region memfd from spillwayd holds" },
		{ ATTACH_UNSEALED, -EPROTO, "not sealed" },
		{ ATTACH_BAD_GEOMETRY, -EPROTO, "does not match the layout" },
		{ ATTACH_REFUSE, -ENOMEM, "region 2.0 GiB would exceed pool.max_bytes" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct fake f = { .attach = cases[i].mode };
		struct spw_attach_opts a = { .size = sizeof(a), .session = "job/0", .region_bytes = 4u << 20,
					     .page_size = 1u << 20 };
		spw_client *c = NULL;

		fake_start(&f);
		ASSERT_OK(spw_client_new(NULL, &c));
		ASSERT_OK(spw_client_connect(c, f.path));
		ASSERT_EQ(spw_client_attach(c, &a), cases[i].err);
		ASSERT_CONTAINS(spw_client_last_error(c), cases[i].says);
		ASSERT_TRUE(spw_slot_ptr(c, 0) == NULL);
		c = spw_client_free(c);
		fake_stop(&f);
	}
}

/* The daemon posts a completion for an operation that is not in flight. */
static void test_bogus_completion(void)
{
	struct fake f = { .bogus_completion = true };
	spw_client *c;

	fake_start(&f);
	c = attach(&f, 0);
	ASSERT_EQ(spw_nop(c), -EPROTO);
	ASSERT_CONTAINS(spw_client_last_error(c), "for no operation in flight");
	ASSERT_EQ(spw_submit_nop(c, 1), -EPROTO); /* the session stays unusable */
	c = spw_client_free(c);
	fake_stop(&f);
}

/* The daemon frees the rings (ending the session, or exiting) and hangs
 * up: the client's next operation finds indices that cannot be and says
 * the daemon is gone (-ECONNRESET, what a trainer reconnects after), not
 * that it broke the protocol. spillwayd hangs up first, and the client,
 * finding the hang-up too, says the daemon closed the connection (what a
 * restart's trainer is told); an older daemon hung up a moment after. */
static void rings_freed(bool hangup_first, const char *says)
{
	struct fake f = { .free_rings = true, .hangup_first = hangup_first, .start_index = 1000, .delay_ms = 100 };
	spw_client *c;

	fake_start(&f);
	c = attach(&f, 0);
	/* The fake punches its rings 100 ms after the attach (or later, on a
	 * loaded machine: wait for it). */
	for (int w = 0; w < 5000 && !atomic_load(&f.punched); w++)
		msleep(1);
	ASSERT_TRUE(atomic_load(&f.punched));
	ASSERT_EQ(spw_nop(c), -ECONNRESET);
	ASSERT_CONTAINS(spw_client_last_error(c), says);
	ASSERT_EQ(spw_submit_nop(c, 1), -ECONNRESET); /* and stays so */
	c = spw_client_free(c);
	fake_stop(&f);
}

/* The daemon hangs up while the client sleeps in spw_reap without a
 * timeout: the wait ends with -ECONNRESET at once, not never. */
static void test_hangup_while_waiting(void)
{
	struct fake f = { .hangup_after_attach = true, .delay_ms = 200 };
	struct spw_completion comp;
	spw_client *c;
	double t;

	fake_start(&f);
	c = attach(&f, 0);
	t = now_s();
	ASSERT_EQ(spw_reap(c, &comp, 1, -1), -ECONNRESET);
	/* Ended by the hang-up 200 ms in, not never; the bound only keeps a
	 * hang from passing (a loaded machine may take its time). */
	ASSERT_LT((now_s() - t) * 1000, 10000); /* ms: the macros compare integers */
	ASSERT_CONTAINS(spw_client_last_error(c), "closed the connection");
	t = now_s();
	ASSERT_EQ(spw_nop(c), -ECONNRESET);
	ASSERT_EQ(spw_tensor_register(c, "w", 1, SPW_TENSOR_RESIDENT, &(uint32_t){ 0 }, NULL), -ECONNRESET);
	/* At once: not after the 5 s reply timeout. */
	ASSERT_LT((now_s() - t) * 1000, 2500);
	c = spw_client_free(c);
	fake_stop(&f);
}

static void test_no_daemon(void)
{
	spw_client *c = NULL, *untouched = (spw_client *)0x1;
	char path[200];

	ASSERT_EQ(spw_client_new(&(struct spw_client_opts){ .size = 1 }, &untouched), -EINVAL);
	ASSERT_TRUE(untouched == (spw_client *)0x1); /* constructors leave *ret alone on failure */
	ASSERT_OK(spw_client_new(NULL, &c));
	ASSERT_EQ(spw_client_connect(c, "/nonexistent/spillway/control.sock"), -ENOENT);
	ASSERT_CONTAINS(spw_client_last_error(c), "/nonexistent/spillway/control.sock");
	ASSERT_CONTAINS(spw_client_last_error(c), "start it with");
	ASSERT_EQ(spw_nop(c), -ENOTCONN);
	c = spw_client_free(c);

	setenv("SPILLWAY_SOCKET", "/somewhere/else/ctl.sock", 1);
	ASSERT_GT(spw_socket_path(SPW_SOCKET_CONTROL, path, sizeof(path)), 0);
	ASSERT_STREQ(path, "/somewhere/else/ctl.sock");
	ASSERT_GT(spw_socket_path(SPW_SOCKET_STATUS, path, sizeof(path)), 0);
	ASSERT_STREQ(path, "/somewhere/else/status.sock");
	unsetenv("SPILLWAY_SOCKET");
	setenv("XDG_RUNTIME_DIR", "/nonexistent-xdg", 1);
	ASSERT_GT(spw_socket_path(SPW_SOCKET_CONTROL, path, sizeof(path)), 0);
	ASSERT_STREQ(path, "/run/spillway/control.sock");
	ASSERT_EQ(spw_socket_path(SPW_SOCKET_CONTROL, path, 8), -ENAMETOOLONG);
	ASSERT_STREQ(spw_strerror(-ECONNRESET), spw_strerror(ECONNRESET));
}

int main(void)
{
	test_no_daemon();
	test_attach_and_info();
	test_wraparound();
	test_full_ring();
	test_sync_keeps_async();
	test_sq_doorbell();
	test_cq_doorbell();
	test_bad_attach();
	test_bogus_completion();
	rings_freed(false, "its rings were freed");
	rings_freed(true, "spillwayd closed the connection");
	test_hangup_while_waiting();
	printf("ok\n");
	return 0;
}
