/* SPDX-License-Identifier: MIT */
/*
 * safemem.h: the daemon's CPU access to memory a client shares with it.
 *
 * A client holds the memfd of its region and can punch holes in it
 * (fallocate PUNCH_HOLE, MADV_REMOVE); no seal forbids that. On hugetlb
 * pages a later CPU touch of the hole by the daemon finds no page to fault
 * in and the kernel sends SIGBUS, which would end every session at once.
 * So every daemon load or store to client-shared memory goes through these
 * calls: each runs with a guard armed on its thread for exactly the range
 * it touches, and a SIGBUS inside that range unwinds to the call, which
 * returns -EFAULT. A SIGBUS anywhere else is not ours: the previous
 * disposition runs (the default kills the process, as before).
 *
 * On ordinary shmem, zero-filling needs no store at all: safemem_punch()
 * hands the pages back and the next touch (client, daemon or DMA) finds
 * zeros. Not on hugetlb: a punched hugepage goes back to the pool, another
 * process may take it, and the next touch is the very SIGBUS (and the
 * punch works in whole hugepages only); zero those with safemem_zero().
 * Punching a whole hugetlb region at release is right: nothing touches it
 * again.
 */
#ifndef SPW_DAEMON_SAFEMEM_H
#define SPW_DAEMON_SAFEMEM_H

#include <stddef.h>
#include <stdint.h>

/* Installs the SIGBUS handler (once per process; later calls do nothing;
 * every accessor below calls it first). Returns 0 or -errno from
 * sigaction, which the accessors then return too. */
int safemem_init(void);

/* Copies n bytes between private memory and client-shared memory (either
 * side may be the shared one; both are guarded). Returns 0, or -EFAULT when
 * a page of either range could not be faulted in (the copy is then
 * partial), or the error of safemem_init(). */
int safemem_copy(void *dst, const void *src, size_t n);

/* Stores n zero bytes at p, guarded. 0, -EFAULT or safemem_init()'s error. */
int safemem_zero(void *p, size_t n);

/* CRC-32C of n bytes at p, guarded; *crc in, result out (crc32c()'s
 * chaining). 0, -EFAULT or safemem_init()'s error. */
int safemem_crc32c(uint32_t *crc, const void *p, size_t n);

/* Reads every page of [p, p+n) once, guarded: 0 when all of it can be
 * touched, -EFAULT when some page cannot (a hugetlb hole with no free
 * hugepage behind it). */
int safemem_probe(const void *p, size_t n);

/* Frees the pages of [off, off+len) of a memfd (shmem or hugetlb): the
 * range reads as zeros afterwards in every mapping of it, the client's
 * included, and no longer holds memory. len 0 means to the end of the
 * file. Returns 0 or -errno from fallocate/fstat. */
int safemem_punch(int fd, uint64_t off, uint64_t len);

#endif
