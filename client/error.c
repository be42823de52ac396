/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "client-private.h"

SPW_EXPORT const char *spw_strerror(int err)
{
	if (err < 0)
		err = -err;
	/* The errors this library gives a spillway-specific meaning read
	 * better in those words than in libc's; the rest fall through to
	 * strerror's table, whose strings are static for known values. */
	switch (err) {
	case 0:
		return "Success";
	case ECONNRESET:
		return "Connection to spillwayd lost (the daemon exited or ended the session)";
	case ENOTCONN:
		return "Not connected to spillwayd or no session attached";
	case EPROTO:
		return "spillwayd sent something the protocol does not allow";
	case EPROTONOSUPPORT:
		return "spillwayd speaks an incompatible protocol version";
	case EBUSY:
		return "Resource busy (ring full, or the session is attached elsewhere)";
	case EBADMSG:
		/* What a PIN of a page that failed its CRC-32C answers: the
		 * daemon's log has the file and offset, the trainer needs the
		 * way on. */
		return "Checksum mismatch: the page's bytes on disk are not what spillwayd wrote, so it did not hand "
		       "them out (its log names the file); load the last checkpoint";
	case ETIMEDOUT:
		return "spillwayd did not answer in time";
	case E2BIG:
		/* Not an argument list here: a sized struct (spillway.h). */
		return "Struct size too large (a field this libspillway does not know is set, or the size is not set)";
	default:
		break;
	}
	/* strerror() is not required to be thread-safe for unknown values,
	 * but glibc returns static strings for every errno it knows, and
	 * anything larger is not an errno we produce. */
	if (err > 0 && err < 4096)
		return strerror(err);
	return "Unknown error";
}

SPW_EXPORT const char *spw_client_last_error(const spw_client *c)
{
	if (!c)
		return "no client (NULL)";
	return c->errmsg;
}

int spw__error(spw_client *c, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->errmsg, sizeof(c->errmsg), fmt, ap);
	va_end(ap);
	return err;
}

int spw__dead(spw_client *c, int err)
{
	c->dead = true;
	c->dead_err = err;
	return err;
}
