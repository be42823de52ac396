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

#endif
