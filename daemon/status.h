/* SPDX-License-Identifier: MIT */
/*
 * status.h: the status plane (status.c): status.sock serves one JSON
 * document per connection.
 */
#ifndef SPW_DAEMON_STATUS_H
#define SPW_DAEMON_STATUS_H

#include <sys/types.h>

struct daemon;

int status_listen(struct daemon *d);
/* The status document as seen by uid; the caller frees it. */
char *status_render(struct daemon *d, uid_t uid);
/* The swap directories' figures (statvfs, and a scan for swap files) are
 * cached and refreshed by a timer, never per request: this asks for a
 * refresh on the next loop iteration (swap files were created or
 * removed). status_stop() closes the timer at shutdown. */
void status_refresh_soon(struct daemon *d);
void status_stop(struct daemon *d);

#endif
