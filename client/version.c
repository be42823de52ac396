/* SPDX-License-Identifier: MIT */
/* client/version.c: the version of the library that is loaded, as opposed
 * to SPW_VERSION_STRING, the version of the header a caller compiled. */
#include "client-private.h"

SPW_EXPORT const char *spw_version(void)
{
	return SPW_VERSION_STRING;
}
