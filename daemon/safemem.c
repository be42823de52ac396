/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>

#include "util/crc32c.h"
#include "safemem.h"

/* One guard per thread: the threadpool may touch regions too (zero-fill
 * off the loop), and a fault on one thread must unwind that thread only. */
struct guard {
	uintptr_t lo[2], hi[2];
	sigjmp_buf jb;
};

static __thread struct guard *volatile current;
static struct sigaction previous;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int init_error;

static bool guarded(const struct guard *g, uintptr_t a)
{
	for (int i = 0; i < 2; i++)
		if (a >= g->lo[i] && a < g->hi[i])
			return true;
	return false;
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	struct guard *g = current;

	if (g && guarded(g, (uintptr_t)si->si_addr)) {
		current = NULL;
		siglongjmp(g->jb, 1);
	}
	/* Not a fault of a guarded access: whoever handled SIGBUS before us
	 * decides, and with the default the faulting instruction runs again
	 * under it and the process ends as it would have without us. */
	if (previous.sa_flags & SA_SIGINFO) {
		previous.sa_sigaction(sig, si, uc);
		return;
	}
	if (previous.sa_handler == SIG_IGN || previous.sa_handler == SIG_DFL) {
		sigaction(SIGBUS, &previous, NULL);
		return;
	}
	previous.sa_handler(sig);
}

static void install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	init_error = sigaction(SIGBUS, &sa, &previous) < 0 ? -errno : 0;
}

int safemem_init(void)
{
	pthread_once(&once, install);
	return init_error;
}

static void arm(struct guard *g, const void *a, size_t an, const void *b, size_t bn)
{
	g->lo[0] = (uintptr_t)a;
	g->hi[0] = (uintptr_t)a + an;
	g->lo[1] = (uintptr_t)b;
	g->hi[1] = (uintptr_t)b + bn;
}

/* The sigsetjmp must sit in the frame that stays live while the access
 * runs, so each accessor expands it in its own frame (a macro, not a
 * function); what the access writes goes through volatile-qualified state
 * so nothing is kept in registers across the jump. Returns from the
 * accessor with -EFAULT when the access faults. */
#define GUARDED(a, an, b, bn, access)                   \
	do {                                            \
		struct guard g_;                        \
		if (safemem_init() < 0)                 \
			return init_error;              \
		arm(&g_, (a), (an), (b), (bn));         \
		if (sigsetjmp(g_.jb, 1))                \
			return -EFAULT;                 \
		current = &g_;                          \
		access;                                 \
		current = NULL;                         \
	} while (0)

int safemem_copy(void *dst, const void *src, size_t n)
{
	if (n)
		GUARDED(dst, n, src, n, memcpy(dst, src, n));
	return safemem_init();
}

int safemem_zero(void *p, size_t n)
{
	if (n)
		GUARDED(p, n, NULL, 0, memset(p, 0, n));
	return safemem_init();
}

int safemem_crc32c(uint32_t *crc, const void *p, size_t n)
{
	volatile uint32_t c = *crc;

	GUARDED(p, n, NULL, 0, c = crc32c(c, p, n));
	*crc = c;
	return 0;
}

int safemem_probe(const void *p, size_t n)
{
	const volatile uint8_t *b = p;

	GUARDED(p, n, NULL, 0, {
		for (size_t o = 0; o < n; o += 4096)
			(void)b[o];
		if (n)
			(void)b[n - 1];
	});
	return 0;
}

int safemem_punch(int fd, uint64_t off, uint64_t len)
{
	if (len == 0) {
		struct stat st;

		if (fstat(fd, &st) < 0)
			return -errno;
		if ((uint64_t)st.st_size <= off)
			return 0;
		len = (uint64_t)st.st_size - off;
	}
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) < 0)
		return -errno;
	return 0;
}
