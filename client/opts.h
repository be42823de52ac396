/* SPDX-License-Identifier: MIT */
/*
 * client/opts.h: the one way libspillway reads and writes the public
 * structs that begin with `size_t size` (spillway.h), so they can grow
 * without breaking callers built against an older or newer header:
 *
 * - in (option structs the caller fills): any size from the struct's first
 *   version up is taken. Bytes the caller's size does not cover read as
 *   zero, which every field documents as its default. A caller's struct
 *   larger than this library's is taken only when the bytes past ours are
 *   zero: the caller asked for something this library does not know
 *   (the kernel's copy_struct_from_user rule).
 * - out (info, result and stats structs the library fills): any size from
 *   the first version up; the library writes only the bytes the caller's
 *   size covers, zeroes the caller's bytes past its own struct, and sets
 *   size to the bytes it filled (the smaller of the two sizes).
 *
 * Either way a size below the first version is -EINVAL, and one above
 * SPW__STRUCT_SIZE_MAX (no struct of ours will ever be that large; such a
 * size is garbage, and reading or zeroing that far could fault) -E2BIG.
 */
#ifndef SPW_CLIENT_OPTS_H
#define SPW_CLIENT_OPTS_H

#include <stddef.h>

#include <spillway/spillway.h>

#define SPW__STRUCT_SIZE_MAX 4096u

/*
 * The size of each struct's first version. A field added later goes after
 * the struct's last byte (never into its tail padding, which an older
 * caller need not have zeroed), and the struct's constant here stays what
 * it was: offsetof(struct ..., the first added field) once there is one.
 */
#define SPW__CLIENT_OPTS_SIZE_VER0 offsetof(struct spw_client_opts, trace_path)
#define SPW__ATTACH_OPTS_SIZE_VER0 offsetof(struct spw_attach_opts, swap_bytes)
#define SPW__SESSION_INFO_SIZE_VER0 offsetof(struct spw_session_info, swap_bytes)
/* wait_timeout_ms came after the first version (spillway.h). */
#define SPW__OPTIMIZER_OPTS_SIZE_VER0 offsetof(struct spw_optimizer_opts, wait_timeout_ms)
#define SPW__STEP_RESULT_SIZE_VER0 sizeof(struct spw_step_result)
/* bytes_total and the copy-on-write figures came after the first version. */
#define SPW__CHECKPOINT_RESULT_SIZE_VER0 offsetof(struct spw_checkpoint_result, bytes_total)
/* The fetch counters came after the first version (spillway.h). */
#define SPW__OPTIMIZER_STATS_SIZE_VER0 offsetof(struct spw_optimizer_stats, fetches)

/*
 * Copies the caller's option struct src (size from src's own size field)
 * into dst, this library's struct of full bytes, which is zeroed first.
 * dst's size is set to full. name ("struct spw_attach_opts") goes into
 * the sentence left in why on failure.
 *
 * Returns 0; -EINVAL when src's size is below min; -E2BIG when it is
 * above SPW__STRUCT_SIZE_MAX, or above full with a nonzero byte past full.
 */
int spw__opts_in(void *dst, size_t full, const void *src, size_t min, const char *name,
		 char *why, size_t whylen);

/*
 * Checks the size field of a caller's struct s as both functions here do
 * (same returns and sentence), without copying: for a call that must
 * refuse a bad struct before it does any work and fills it at the end.
 */
int spw__struct_size_check(const void *s, size_t min, const char *name, char *why, size_t whylen);

/*
 * Copies src, this library's struct of full bytes, into the caller's dst
 * as far as dst's size field allows (see the top of this file), and sets
 * dst's size to the bytes filled. Fails as spw__opts_in(), without
 * touching dst.
 */
int spw__info_out(void *dst, const void *src, size_t full, size_t min, const char *name,
		  char *why, size_t whylen);

#endif
