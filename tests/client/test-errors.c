/* SPDX-License-Identifier: MIT */
/*
 * test-errors: the errors spillway.h documents for the client calls
 * (connect, attach, detach, info, register, unregister, status, socket
 * paths, struct sizes), each provoked and compared with the header's
 * word. The daemon's refusals come from a real spillwayd; the protocol
 * failures a real daemon never commits (another major version, garbage,
 * silence, a hangup) from a scripted one-shot server in a thread.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "harness.h"
#include "spw-proto.h"
#include "test.h"

#define MiB (1024u * 1024u)

static struct spw_test_daemon d;

enum script { SAY_MAJOR, SAY_GARBAGE, SAY_NOTHING, HANG_UP };

struct server {
	char path[108];   /* a unix socket address's */
	int lfd;
	enum script script;
	pthread_t thread;
};

/* Serves one connection as scripted, then closes it. */
static void *serve(void *arg)
{
	struct server *s = arg;
	char buf[4096], text[256];
	int fd = accept(s->lfd, NULL, NULL);

	ASSERT_GE(fd, 0);
	if (s->script != HANG_UP && spw_proto_recv(fd, buf, sizeof(buf), NULL, NULL) > 0) {
		if (s->script == SAY_MAJOR) {
			snprintf(text, sizeof(text), "{\"type\":\"hello\",\"ok\":true,\"magic\":%u,"
				 "\"major\":%d,\"minor\":0,\"features\":0}", SPW_PROTO_MAGIC,
				 SPW_PROTO_MAJOR + 1);
			spw_proto_send(fd, text, (uint32_t)strlen(text), NULL, 0);
		} else if (s->script == SAY_GARBAGE) {
			spw_proto_send(fd, "not json", 8, NULL, 0);
		} else {
			/* Silent until the client gives up and closes. */
			while (read(fd, buf, sizeof(buf)) > 0)
				;
		}
	}
	close(fd);
	return NULL;
}

static void server_start(struct server *s, enum script script)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	snprintf(s->path, sizeof(s->path), "%.80s/fake.sock", d.dir);
	unlink(s->path);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", s->path);
	s->script = script;
	s->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT_GE(s->lfd, 0);
	ASSERT_OK(bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)));
	ASSERT_OK(listen(s->lfd, 1));
	ASSERT_EQ(pthread_create(&s->thread, NULL, serve, s), 0);
}

static void server_stop(struct server *s)
{
	pthread_join(s->thread, NULL);
	close(s->lfd);
	unlink(s->path);
}

/* connect() against a scripted server; returns its result. */
static int connect_scripted(enum script script, uint32_t timeout_ms, char *msg, size_t len)
{
	struct spw_client_opts o = { .size = sizeof(o), .reply_timeout_ms = timeout_ms };
	struct server s;
	spw_client *c = NULL;
	int r;

	server_start(&s, script);
	ASSERT_OK(spw_client_new(&o, &c));
	r = spw_client_connect(c, s.path);
	snprintf(msg, len, "%s", spw_client_last_error(c));
	c = spw_client_free(c); /* closes: the silent server's read ends */
	server_stop(&s);
	return r;
}

/* A socket file nobody listens on: bound, then its socket closed. */
static void stale_socket(char *path, size_t len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	snprintf(path, len, "%.80s/stale.sock", d.dir);
	unlink(path);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	ASSERT_GE(fd, 0);
	ASSERT_OK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)));
	close(fd);
}

static void test_connect(void)
{
	char msg[512], stale[108], longpath[200];
	spw_client *c = NULL;

	ASSERT_EQ(spw_client_connect(NULL, d.control), -EINVAL);
	ASSERT_OK(spw_client_new(NULL, &c));
	memset(longpath, 'x', sizeof(longpath) - 1);
	longpath[0] = '/';
	longpath[sizeof(longpath) - 1] = '\0';
	ASSERT_EQ(spw_client_connect(c, longpath), -ENAMETOOLONG);
	stale_socket(stale, sizeof(stale));
	ASSERT_EQ(spw_client_connect(c, stale), -ECONNREFUSED);
	ASSERT_CONTAINS(spw_client_last_error(c), stale);
	ASSERT_CONTAINS(spw_client_last_error(c), "start it with");
	ASSERT_OK(spw_client_connect(c, d.control));
	ASSERT_EQ(spw_client_connect(c, d.control), -EISCONN);
	c = spw_client_free(c);

	ASSERT_EQ(connect_scripted(SAY_MAJOR, 0, msg, sizeof(msg)), -EPROTONOSUPPORT);
	ASSERT_CONTAINS(msg, "install matching versions");
	ASSERT_EQ(connect_scripted(SAY_GARBAGE, 0, msg, sizeof(msg)), -EPROTO);
	ASSERT_EQ(connect_scripted(SAY_NOTHING, 200, msg, sizeof(msg)), -ETIMEDOUT);
	ASSERT_CONTAINS(msg, "did not answer within 200 ms");
	ASSERT_EQ(connect_scripted(HANG_UP, 0, msg, sizeof(msg)), -ECONNRESET);
	ASSERT_CONTAINS(msg, "closed the connection");
}

static void test_new_sizes(void)
{
	struct {
		struct spw_client_opts o;
		uint64_t newer;
	} big = { .o = { .size = sizeof(big) } };
	spw_client *c = NULL, *untouched = (spw_client *)&big;

	/* The first version's size, and a newer caller's with nothing set
	 * past our struct, are taken; a set unknown field or a garbage size
	 * are not, and *ret stays untouched. */
	ASSERT_OK(spw_client_new(&(struct spw_client_opts){ .size = 16 }, &c));
	c = spw_client_free(c);
	ASSERT_OK(spw_client_new(&big.o, &c));
	c = spw_client_free(c);
	big.newer = 1;
	c = untouched;
	ASSERT_EQ(spw_client_new(&big.o, &c), -E2BIG);
	ASSERT_TRUE(c == untouched);
	ASSERT_EQ(spw_client_new(&(struct spw_client_opts){ .size = 1u << 20 }, &c), -E2BIG);
	ASSERT_EQ(spw_client_new(&(struct spw_client_opts){ .size = 8 }, &c), -EINVAL);
	ASSERT_EQ(spw_client_new(NULL, NULL), -EINVAL);
	ASSERT_TRUE(c == untouched);
	ASSERT_CONTAINS(spw_strerror(-E2BIG), "does not know");
	ASSERT_CONTAINS(spw_strerror(-EBADMSG), "load the last checkpoint");
}

static void test_attach(void)
{
	struct spw_attach_opts a = { .size = sizeof(a), .session = "err/attach", .region_bytes = 4 * MiB };
	struct {
		struct spw_attach_opts a;
		uint64_t newer;
	} big = { .a = a, .newer = 3 };
	spw_client *c = NULL, *other = NULL;

	ASSERT_EQ(spw_client_attach(NULL, &a), -EINVAL);
	ASSERT_OK(spw_client_new(NULL, &c));
	ASSERT_EQ(spw_client_attach(c, &a), -ENOTCONN);
	ASSERT_OK(spw_client_connect(c, d.control));
	ASSERT_EQ(spw_client_attach(c, NULL), -EINVAL);
	ASSERT_EQ(spw_client_attach(c, &(struct spw_attach_opts){ .size = 8 }), -EINVAL);
	ASSERT_CONTAINS(spw_client_last_error(c), "struct spw_attach_opts: size 8");
	big.a.size = sizeof(big);
	ASSERT_EQ(spw_client_attach(c, &big.a), -E2BIG);
	ASSERT_CONTAINS(spw_client_last_error(c), "struct spw_attach_opts: the caller's struct has");
	ASSERT_EQ(spw_client_attach(c, &(struct spw_attach_opts){ .size = sizeof(a), .session = "err/x",
								     .region_bytes = 4 * MiB, .page_size = 3000 }),
		  -EINVAL);
	ASSERT_EQ(spw_client_attach(c, &(struct spw_attach_opts){ .size = sizeof(a), .session = "err/x" }),
		  -EINVAL);
	big.newer = 0;
	ASSERT_OK(spw_client_attach(c, &big.a)); /* a newer caller with nothing unknown set */
	ASSERT_EQ(spw_client_attach(c, &a), -EALREADY);

	/* The daemon's refusal: another client holds the session. */
	ASSERT_OK(spw_client_new(NULL, &other));
	ASSERT_OK(spw_client_connect(other, d.control));
	ASSERT_EQ(spw_client_attach(other, &a), -EBUSY);
	other = spw_client_free(other);

	ASSERT_OK(spw_client_detach(c));
	ASSERT_EQ(spw_client_detach(c), -ENOTCONN);
	ASSERT_EQ(spw_client_detach(NULL), -EINVAL);
	c = spw_client_free(c);
}

static void test_info(void)
{
	struct spw_attach_opts a = { .size = sizeof(a), .session = "err/info", .region_bytes = 8 * MiB };
	struct {
		struct spw_session_info info;
		uint64_t newer[2];
		unsigned char guard[16];
	} buf;
	spw_client *c = NULL;

	ASSERT_OK(spw_client_new(NULL, &c));
	buf.info.size = sizeof(buf.info);
	ASSERT_EQ(spw_client_info(c, &buf.info), -ENOTCONN);
	ASSERT_OK(spw_client_connect(c, d.control));
	ASSERT_OK(spw_client_attach(c, &a));
	ASSERT_EQ(spw_client_info(NULL, &buf.info), -EINVAL);
	ASSERT_EQ(spw_client_info(c, NULL), -EINVAL);

	/* The first version's size: filled up to it, not a byte past. */
	memset(&buf, 0xCC, sizeof(buf));
	buf.info.size = sizeof(buf.info);
	ASSERT_OK(spw_client_info(c, &buf.info));
	ASSERT_UEQ(buf.info.region_bytes, 8 * MiB);
	ASSERT_UEQ(buf.info.slots, 2);
	ASSERT_UEQ(buf.newer[0], 0xCCCCCCCCCCCCCCCCull);

	/* A newer caller's: its unknown fields zeroed, size says what was
	 * filled, the guard after it untouched. */
	memset(&buf, 0xCC, sizeof(buf));
	buf.info.size = offsetof(__typeof__(buf), guard);
	ASSERT_OK(spw_client_info(c, &buf.info));
	ASSERT_UEQ(buf.info.size, sizeof(buf.info));
	ASSERT_UEQ(buf.info.page_size, 4 * MiB);
	ASSERT_UEQ(buf.newer[0], 0);
	ASSERT_UEQ(buf.newer[1], 0);
	for (size_t i = 0; i < sizeof(buf.guard); i++)
		ASSERT_UEQ(buf.guard[i], 0xCC);

	/* A caller of the first version (before swap_bytes): filled that far,
	 * nothing after it written. */
	memset(&buf, 0xCC, sizeof(buf));
	buf.info.size = offsetof(struct spw_session_info, swap_bytes);
	ASSERT_OK(spw_client_info(c, &buf.info));
	ASSERT_UEQ(buf.info.page_size, 4 * MiB);
	ASSERT_UEQ(buf.info.swap_bytes, 0xCCCCCCCCCCCCCCCCull);

	memset(&buf, 0xCC, sizeof(buf));
	buf.info.size = offsetof(struct spw_session_info, swap_bytes) - 8;
	ASSERT_EQ(spw_client_info(c, &buf.info), -EINVAL);
	ASSERT_UEQ(buf.info.region_bytes, 0xCCCCCCCCCCCCCCCCull);
	buf.info.size = 1u << 16;
	ASSERT_EQ(spw_client_info(c, &buf.info), -E2BIG);
	c = spw_client_free(c);
}

static void test_tensors(void)
{
	struct spw_attach_opts a = { .size = sizeof(a), .session = "err/tensors", .region_bytes = 8 * MiB };
	spw_client *c = NULL;
	uint32_t t, t2;

	ASSERT_OK(spw_client_new(NULL, &c));
	ASSERT_EQ(spw_tensor_register(NULL, "w", 1, SPW_TENSOR_RESIDENT, &t, NULL), -EINVAL);
	ASSERT_EQ(spw_tensor_register(c, "w", 1, SPW_TENSOR_RESIDENT, &t, NULL), -ENOTCONN);
	ASSERT_EQ(spw_tensor_unregister(c, 0), -ENOTCONN);
	ASSERT_OK(spw_client_connect(c, d.control));
	ASSERT_EQ(spw_tensor_register(c, "w", 1, SPW_TENSOR_RESIDENT, &t, NULL), -ENOTCONN);
	ASSERT_OK(spw_client_attach(c, &a));

	ASSERT_EQ(spw_tensor_register(c, "w", 1, SPW_TENSOR_RESIDENT, NULL, NULL), -EINVAL);
	ASSERT_EQ(spw_tensor_register(c, "", 1, SPW_TENSOR_RESIDENT, &t, NULL), -EINVAL);
	ASSERT_EQ(spw_tensor_register(c, "w", 0, SPW_TENSOR_RESIDENT, &t, NULL), -EINVAL);
	ASSERT_EQ(spw_tensor_register(c, "w", 1, (enum spw_tensor_kind)7, &t, NULL), -EINVAL);
	ASSERT_OK(spw_tensor_register(c, "w", 1, SPW_TENSOR_RESIDENT, &t, NULL));
	ASSERT_EQ(spw_tensor_register(c, "w", 1, SPW_TENSOR_RESIDENT, &t2, NULL), -EEXIST);
	/* This daemon has no NVMe tier. */
	ASSERT_EQ(spw_tensor_register(c, "s", 1, SPW_TENSOR_SWAPPABLE, &t2, NULL), -EOPNOTSUPP);

	ASSERT_EQ(spw_tensor_unregister(NULL, t), -EINVAL);
	ASSERT_EQ(spw_tensor_unregister(c, t + 100), -ENOENT);
	ASSERT_GE(spw_pin(c, t, 0, NULL), 0);
	ASSERT_EQ(spw_tensor_unregister(c, t), -EBUSY);
	ASSERT_OK(spw_unpin(c, t, 0, SPW_CLEAN));
	ASSERT_OK(spw_tensor_unregister(c, t));
	c = spw_client_free(c);
}

static void test_status_and_paths(void)
{
	char longpath[200], stale[108], buf[8], *json = NULL;
	struct server s;

	ASSERT_EQ(spw_status_fetch(d.status, NULL), -EINVAL);
	memset(longpath, 'x', sizeof(longpath) - 1);
	longpath[0] = '/';
	longpath[sizeof(longpath) - 1] = '\0';
	ASSERT_EQ(spw_status_fetch(longpath, &json), -ENAMETOOLONG);
	ASSERT_EQ(spw_status_fetch("/nonexistent/status.sock", &json), -ENOENT);
	stale_socket(stale, sizeof(stale));
	ASSERT_EQ(spw_status_fetch(stale, &json), -ECONNREFUSED);
	/* A server that closes without a document. */
	server_start(&s, HANG_UP);
	ASSERT_EQ(spw_status_fetch(s.path, &json), -EPROTO);
	server_stop(&s);
	ASSERT_TRUE(json == NULL);

	ASSERT_EQ(spw_socket_path((enum spw_socket_kind)9, buf, sizeof(buf)), -EINVAL);
	ASSERT_EQ(spw_socket_path(SPW_SOCKET_STATUS, NULL, 100), -EINVAL);
	ASSERT_EQ(spw_socket_path(SPW_SOCKET_STATUS, buf, sizeof(buf)), -ENAMETOOLONG);
}

/*
 * The optimizer's device choice, errors as documented; and libspillway.so
 * finds the cuda plugin beside itself with no SPILLWAY_CUDA_PLUGIN (the
 * layout the build tree and the install share): asking for cuda here gets
 * past loading the plugin to asking the CUDA runtime.
 */
static void test_device_choice(void)
{
	struct spw_attach_opts a = { .size = sizeof(a), .session = "err/device", .region_bytes = 16 * MiB };
	struct spw_param_group g = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f };
	struct spw_optimizer_opts oo = { .size = sizeof(oo), .groups = &g, .ngroups = 1 };
	spw_optimizer *o = NULL;
	spw_client *c = NULL;
	int r;

	unsetenv("SPILLWAY_CUDA_PLUGIN");
	unsetenv("SPILLWAY_DEVICE");
	ASSERT_OK(spw_client_new(NULL, &c));
	ASSERT_OK(spw_client_connect(c, d.control));
	ASSERT_OK(spw_client_attach(c, &a));
	ASSERT_EQ(spw_optimizer_new(c, NULL, &o), -EINVAL);
	oo.device = "tpu";
	ASSERT_EQ(spw_optimizer_new(c, &oo, &o), -EINVAL);
	ASSERT_CONTAINS(spw_client_last_error(c), "unknown device backend");
	oo.device = "cuda";
	r = spw_optimizer_new(c, &oo, &o);
	fprintf(stderr, "device cuda: %d %s\n", r, r < 0 ? spw_client_last_error(c) : "");
	if (r == 0) {
		o = spw_optimizer_free(o); /* a GPU: the plugin was found and works */
	} else {
		ASSERT_EQ(r, -ENODEV);
		if (SPW_HAVE_CUDA)
			ASSERT_CONTAINS(spw_client_last_error(c), "no CUDA device (");
		else
			ASSERT_CONTAINS(spw_client_last_error(c), "client/libspillway-cuda.so");
	}
	c = spw_client_free(c);
}

int main(void)
{
	test_new_sizes();
	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd is not built yet");
	ASSERT_OK(spw_test_daemon_start(&d, NULL));
	ASSERT_LT(strlen(d.dir), 80); /* the sockets made in it fit an address */
	test_connect();
	test_attach();
	test_info();
	test_tensors();
	test_status_and_paths();
	test_device_choice();
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	printf("ok\n");
	return 0;
}
