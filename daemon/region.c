/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include "config.h"
#include "daemon-config.h"
#include "log.h"
#include "region.h"
#include "safemem.h"

#if SPW_HAVE_NUMA
#include <numa.h>
#include <numaif.h>
#endif

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

uint64_t region_hugetlb_size(uint64_t *free_pages)
{
	char line[128];
	unsigned long long v, size_kb = 0, nfree = 0;
	FILE *f = fopen("/proc/meminfo", "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "HugePages_Free: %llu", &v) == 1)
			nfree = v;
		else if (sscanf(line, "Hugepagesize: %llu kB", &v) == 1)
			size_kb = v;
	}
	fclose(f);
	if (free_pages)
		*free_pages = nfree;
	return (uint64_t)size_kb * 1024;
}

int region_pci_numa_node(const char *bdf)
{
	char path[128];
	int node = -1;
	FILE *f;

	if (!bdf)
		return -1;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", bdf);
	f = fopen(path, "re");
	if (!f)
		return -1;
	if (fscanf(f, "%d", &node) != 1)
		node = -1;
	fclose(f);
	return node < 0 ? -1 : node;
}

/* mlock through the system call itself: sanitizer runtimes intercept the
 * libc wrappers and turn them into no-ops that report success, which would
 * make status claim memory is locked when it is not. */
static int lock_range(void *p, size_t bytes)
{
	return syscall(SYS_mlock, p, bytes) < 0 ? -errno : 0;
}

static void unlock_range(void *p, size_t bytes)
{
	syscall(SYS_munlock, p, bytes);
}

static void prefault(uint8_t *p, size_t bytes)
{
	long pg = sysconf(_SC_PAGESIZE);

	if (madvise(p, bytes, MADV_POPULATE_WRITE) == 0)
		return;
	/* Kernels before 5.14: touch one byte a page. The region is fresh and
	 * zero, and no client has it yet, so writing zero changes nothing. */
	for (size_t o = 0; o < bytes; o += (size_t)pg)
		((volatile uint8_t *)p)[o] = 0;
}

uint64_t region_ready_bytes(const struct region_opts *o)
{
	/* Relaxed: a figure for people, it orders nothing. */
	return __atomic_load_n(&o->ready_bytes, __ATOMIC_RELAXED);
}

static void ready(struct region_opts *o, uint64_t bytes)
{
	__atomic_store_n(&o->ready_bytes, bytes, __ATOMIC_RELAXED);
	if (o->progress)
		o->progress(o->progress_arg, bytes, o->bytes);
}

/* A hugetlb mapping splits only at hugepage boundaries, so a step there
 * is a whole number of hugepages. */
static size_t ready_step(const struct region_opts *o, const struct region *r, uint64_t hp)
{
	uint64_t step = o->step ? o->step : REGION_READY_STEP;

	if (r->hugepages && hp)
		step = (step + hp - 1) / hp * hp;
	return (size_t)step;
}

/* mlock, one step at a time. On failure nothing stays locked. */
static int lock_steps(struct region_opts *o, struct region *r, size_t step)
{
	for (size_t off = 0; off < r->bytes; off += step) {
		size_t n = r->bytes - off < step ? r->bytes - off : step;
		int e = lock_range(r->base + off, n);

		if (e < 0) {
			if (off)
				unlock_range(r->base, off);
			ready(o, 0);
			return e;
		}
		ready(o, off + n);
	}
	return 0;
}

static void prefault_steps(struct region_opts *o, struct region *r, size_t step)
{
	for (size_t off = 0; off < r->bytes; off += step) {
		size_t n = r->bytes - off < step ? r->bytes - off : step;

		prefault(r->base + off, n);
		ready(o, off + n);
	}
}

static int bind_node(struct region *r, int node, char *err, size_t errlen)
{
#if SPW_HAVE_NUMA
	if (node < 0 || numa_available() < 0)
		return 0;
	if (node > numa_max_node()) {
		snprintf(err, errlen, "NUMA node %d does not exist (highest is %d); fix pool.numa_node", node,
			 numa_max_node());
		return -EINVAL;
	}
	/* Before the first touch, so every page is allocated on that node. */
	numa_tonode_memory(r->base, r->bytes, node);
#else
	(void)r;
	(void)node;
	(void)err;
	(void)errlen;
#endif
	return 0;
}

static int first_page_node(void *addr)
{
#if SPW_HAVE_NUMA
	int node = -1;

	if (numa_available() < 0)
		return -1;
	if (get_mempolicy(&node, NULL, 0, addr, MPOL_F_NODE | MPOL_F_ADDR) < 0)
		return -1;
	return node;
#else
	(void)addr;
	return -1;
#endif
}

static int lock_hint(const char *name, uint64_t bytes, int e, char *err, size_t errlen)
{
	struct rlimit rl = { 0 };
	char a[32], b[32];

	getrlimit(RLIMIT_MEMLOCK, &rl);
	if (rl.rlim_cur == RLIM_INFINITY)
		snprintf(b, sizeof(b), "unlimited");
	else
		format_bytes(rl.rlim_cur, b, sizeof(b));
	snprintf(err, errlen,
		 "attach %s: cannot lock %s of pinned memory (%s; RLIMIT_MEMLOCK is %s): set LimitMEMLOCK=infinity "
		 "in spillwayd.service (or raise ulimit -l), or set pool.require_locked to false",
		 name, format_bytes(bytes, a, sizeof(a)), strerror(e), b);
	return -e;
}

static int try_create(const struct region_opts *o, bool huge, struct region *r, char *err, size_t errlen)
{
	char a[32], name[64];
	unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING | (huge ? MFD_HUGETLB : 0);
	void *p;
	int e;

	snprintf(name, sizeof(name), "spillway-region:%s", o->name);
	r->fd = memfd_create(name, flags);
	if (r->fd < 0) {
		e = errno;
		snprintf(err, errlen, "attach %s: memfd_create failed: %s", o->name, strerror(e));
		return -e;
	}
	if (ftruncate(r->fd, (off_t)o->bytes) < 0) {
		e = errno;
		snprintf(err, errlen, "attach %s: cannot size region to %s: %s", o->name,
			 format_bytes(o->bytes, a, sizeof(a)), strerror(e));
		return -e;
	}
	/* Sealed before any client sees it: the size is fixed for good. */
	if (fcntl(r->fd, F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) < 0) {
		e = errno;
		snprintf(err, errlen, "attach %s: cannot seal region memfd: %s", o->name, strerror(e));
		return -e;
	}
	p = mmap(NULL, o->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
	if (p == MAP_FAILED) {
		e = errno;
		snprintf(err, errlen, "attach %s: cannot map %s%s: %s", o->name, format_bytes(o->bytes, a, sizeof(a)),
			 huge ? " of hugetlb pages" : "", strerror(e));
		return -e;
	}
	r->base = p;
	r->bytes = o->bytes;
	r->hugepages = huge;
	return 0;
}

static void undo(struct region *r)
{
	if (r->base)
		munmap(r->base, r->bytes);
	if (r->fd >= 0)
		close(r->fd);
	r->base = NULL;
	r->fd = -1;
}

int region_create(struct region_opts *o, struct region **ret, char *err, size_t errlen)
{
	struct region *r;
	uint64_t hp, hfree = 0;
	bool huge = false;
	int e;

	r = calloc(1, sizeof(*r));
	if (!r) {
		snprintf(err, errlen, "attach %s: out of memory", o->name);
		return -ENOMEM;
	}
	r->fd = -1;
	r->numa_node = -1;

	hp = region_hugetlb_size(&hfree);
	if (o->hugepages != CONFIG_HUGEPAGES_NEVER && hp && o->bytes % hp == 0 && hfree * hp >= o->bytes)
		huge = true;
	if (o->hugepages == CONFIG_HUGEPAGES_ALWAYS && !huge) {
		char a[32], b[32];
		snprintf(err, errlen,
			 "attach %s: pool.hugepages is \"always\" but %llu hugetlb pages of %s are free and the region "
			 "needs %s (a multiple of the hugepage size); reserve more in /proc/sys/vm/nr_hugepages or set "
			 "pool.hugepages to \"auto\"",
			 o->name, (unsigned long long)hfree, format_bytes(hp, a, sizeof(a)),
			 format_bytes(o->bytes, b, sizeof(b)));
		e = -ENOMEM;
		goto fail;
	}
	e = try_create(o, huge, r, err, errlen);
	if (e < 0 && huge && o->hugepages == CONFIG_HUGEPAGES_AUTO) {
		/* Another process took the hugetlb pages between the count and
		 * the reservation mmap makes: fall back to ordinary pages. */
		log_info("attach %s: hugetlb pages unavailable (%s); using ordinary pages", o->name, err);
		undo(r);
		huge = false;
		e = try_create(o, false, r, err, errlen);
	}
	if (e < 0)
		goto fail;
	if (!huge)
		madvise(r->base, r->bytes, MADV_HUGEPAGE); /* best effort: THP for shmem may be off */
	e = bind_node(r, o->numa_node, err, errlen);
	if (e < 0)
		goto fail;
	ready(o, 0);
	e = lock_steps(o, r, ready_step(o, r, hp));
	if (e == 0) {
		r->locked = true;
	} else {
		int er = -e;

		if (o->require_locked) {
			e = lock_hint(o->name, o->bytes, er, err, errlen);
			goto fail;
		}
		log_warn("attach %s: region not locked (%s); pool.require_locked is false, so going on unlocked",
			 o->name, strerror(er));
		prefault_steps(o, r, ready_step(o, r, hp));
	}
	r->numa_node = first_page_node(r->base);
	*ret = r;
	return 0;
fail:
	undo(r);
	free(r);
	return e;
}

struct region *region_free(struct region *r)
{
	if (!r)
		return NULL;
	if (r->base) {
		if (r->locked)
			unlock_range(r->base, r->bytes);
		munmap(r->base, r->bytes);
	}
	if (r->fd >= 0) {
		/* The client may keep its copy of the memfd past detach, and
		 * with it every page, locked or not, while the pool counts them
		 * free. Punching the whole file frees them (and wipes the data)
		 * whoever still holds it. */
		int e = safemem_punch(r->fd, 0, r->bytes);

		if (e < 0)
			log_warn("region %zu bytes: cannot free its pages (fallocate PUNCH_HOLE: %s); a client that keeps "
				 "the memfd keeps them", r->bytes, strerror(-e));
		close(r->fd);
	}
	free(r);
	return NULL;
}
