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
};

struct region {
	int fd;
	uint8_t *base;
	size_t bytes;
	bool locked;
	bool hugepages;
	int numa_node; /* where the first page landed, -1 unknown */
};

/* Creates a region. Returns 0 or a negative errno and a sentence in err. */
int region_create(const struct region_opts *o, struct region **ret, char *err, size_t errlen);
struct region *region_free(struct region *r);

/* Hugetlb page size in bytes and the number free (/proc/meminfo); 0 when none. */
uint64_t region_hugetlb_size(uint64_t *free_pages);

/* The NUMA node of a PCI device from sysfs, -1 when unknown. */
int region_pci_numa_node(const char *bdf);

#endif
