/* SPDX-License-Identifier: MIT */
/*
 * notify.h: the systemd notification protocol (sd_notify). With libsystemd
 * the library sends; without it, notify_raw_send() speaks the documented
 * protocol itself: one datagram of "KEY=value\n..." to $NOTIFY_SOCKET.
 */
#ifndef SPW_DAEMON_NOTIFY_H
#define SPW_DAEMON_NOTIFY_H

#include <stdint.h>

/* Sends state ("READY=1\nSTATUS=..."). Returns 1 when sent, 0 when not
 * running under a service manager, or a negative errno. */
int notify_send(const char *state);

/* The self-contained implementation, used when libsystemd is absent. */
int notify_raw_send(const char *state);

/* The watchdog interval in microseconds when the service manager asked for
 * keep-alives (WATCHDOG_USEC, and WATCHDOG_PID is ours or unset), else 0. */
uint64_t notify_watchdog_usec(void);

#endif
