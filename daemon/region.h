/* SPDX-License-Identifier: MIT */
/*
 * region.h: a session's pinned host memory. One memfd, sealed against
 * resizing (so no client can make the daemon's mapping fault with SIGBUS by
 * truncating it), hugetlb-backed when the host has hugetlb pages reserved,
 * bound to a NUMA node, mlocked and prefaulted.
 */
#ifndef SPW_DAEMON_REGION_H
#define SPW_DAEMON_REGION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct region_opts {
	const char *name;      /* for the memfd name and messages */
	uint64_t bytes;        /* a multiple of page_size */
	uint32_t page_size;
	int hugepages;         /* enum config_hugepages */
	int numa_node;         /* -1: no binding */
	bool require_locked;
	uint64_t step;         /* locked/prefaulted this much at a time; 0: REGION_READY_STEP */
	/* Optional: called on the creating thread after each step of
	 * locking (or prefaulting) with the bytes ready so far and the total. */
	void (*progress)(void *arg, uint64_t ready, uint64_t total);
	void *progress_arg;
	/* Written by region_create() as it goes: bytes locked so far (or
	 * prefaulted, for a region that stays unlocked); read it with
	 * region_ready_bytes(), from any thread. */
	uint64_t ready_bytes;
};

/* The step in which a region is locked or prefaulted (hugetlb regions: at
 * least one hugepage), so that progress shows on a large region. */
#define REGION_READY_STEP (64ull << 20)

struct region {
	int fd;
	uint8_t *base;
	size_t bytes;
	bool locked;
	bool hugepages;
	int numa_node; /* where the first page landed, -1 unknown */
};

/* Creates a region, recording its progress in o->ready_bytes (and
 * through o->progress). Returns 0 or a negative errno and a sentence in err. */
int region_create(struct region_opts *o, struct region **ret, char *err, size_t errlen);

/* o->ready_bytes, read atomically: what status shows while a session
 * attaches (the creating thread may be writing it). */
uint64_t region_ready_bytes(const struct region_opts *o);
struct region *region_free(struct region *r);

/* Hugetlb page size in bytes and the number free (/proc/meminfo); 0 when none. */
uint64_t region_hugetlb_size(uint64_t *free_pages);

/* The NUMA node of a PCI device from sysfs, -1 when unknown. */
int region_pci_numa_node(const char *bdf);

#endif
