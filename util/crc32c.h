/* SPDX-License-Identifier: MIT */
/* util/crc32c.h: CRC-32C (Castagnoli), the checksum kept for every page written
 * to a swap file. Uses SSE4.2's crc32 instruction when the CPU has it. */
#ifndef SPW_UTIL_CRC32C_H
#define SPW_UTIL_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* crc32c(0, buf, len) gives the standard CRC-32C of buf; pass a previous
 * result as crc to continue over more bytes. */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

#endif
