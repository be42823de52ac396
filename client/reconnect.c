/* SPDX-License-Identifier: MIT */
/*
 * client/reconnect.c: spw_client_reconnect(), the way back to a
 * persistent session after spillwayd went away under the client (a
 * restart: the daemon saved the session at a commit point and restores
 * it as an orphan at its next start, docs/persistent.md). The client
 * forgets the dead connection and its mappings, dials the same control
 * socket again until one answers or the wait is over, and attaches the
 * same session with the same options, which takes the orphan over.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client-private.h"

/* How long to sleep between tries: a daemon restarting takes a moment. */
#define RETRY_MS 50u

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The errors that mean "not yet": no daemon listening (yet), one going
 * away, a session still being restored or still held by the connection
 * the daemon has not yet seen close. */
static bool worth_retrying(int r)
{
	return r == -ENOENT || r == -ECONNREFUSED || r == -ECONNRESET || r == -EAGAIN || r == -EBUSY ||
	       r == -ETIMEDOUT;
}

SPW_EXPORT int spw_client_reconnect(spw_client *c, uint32_t wait_ms)
{
	char path[sizeof(c->socket_path)], last[SPW__ERRMSG_MAX], name[sizeof(c->session)];
	uint64_t deadline;
	struct spw_attach_opts a;
	int r, tries = 0;

	if (!c)
		return -EINVAL;
	if (!c->again.size)
		return spw__error(c, -EINVAL, "reconnect: this client has attached no persistent session it did not "
				  "detach (only a persistent session outlives its connection)");
	if (c->optimizers)
		return spw__error(c, -EBUSY, "reconnect %s: %u optimizer%s still use%s the old connection's memory; "
				  "spw_optimizer_free() first, then reconnect, then spw_optimizer_new() again",
				  c->session, c->optimizers, c->optimizers == 1 ? "" : "s", c->optimizers == 1 ? "s" : "");
	a = c->again;
	snprintf(name, sizeof(name), "%s", c->session);
	a.session = name; /* attach writes c->session from it */
	snprintf(path, sizeof(path), "%s", c->socket_path);
	/* The old session's memory and rings belong to a connection that
	 * is gone (or is given up now: a live one ends as a hang-up, which
	 * orphans the session for the attach below to take over). */
	spw__release_session(c);
	if (c->ctl >= 0)
		close(c->ctl);
	c->ctl = -1;
	c->dead = false;
	deadline = now_ms() + wait_ms;
	for (;;) {
		tries++;
		r = spw_client_connect(c, path);
		if (r == 0) {
			r = spw_client_attach(c, &a);
			if (r < 0) {
				/* A refused attach leaves the connection usable,
				 * but the next try dials anew all the same. */
				if (c->ctl >= 0)
					close(c->ctl);
				c->ctl = -1;
				c->dead = false;
			}
		}
		if (r == 0 || !worth_retrying(r) || now_ms() >= deadline)
			break;
		usleep(RETRY_MS * 1000u);
	}
	c->again = a;
	c->again.session = c->session;
	if (r < 0) {
		snprintf(last, sizeof(last), "%s", spw_client_last_error(c));
		return spw__error(c, r, "reconnect %s: %s (%d tr%s in %u ms)", a.session, last, tries,
				  tries == 1 ? "y" : "ies", wait_ms);
	}
	if (!c->persist.reattached) {
		/* A new, empty session of the name: the old one did not
		 * survive (a daemon without persist.state_dir, a kill -9,
		 * its lease ended). It is not worth keeping. */
		uint64_t w = c->persist.released_write_step;

		spw_client_detach(c);
		c->again.size = 0;
		if (w)
			return spw__error(c, -ENOENT, "reconnect %s: spillwayd went away while spw_optimizer_write "
					  "(load_state_dict) overwrote the session's state (step %llu open), so the state "
					  "it kept was partly overwritten and has been released; start again from a "
					  "checkpoint", c->session, (unsigned long long)w);
		return spw__error(c, -ENOENT, "reconnect %s: spillwayd at %s no longer holds the session's state (a "
				  "restart without persist.state_dir, a kill of the daemon before any flush, or its "
				  "lease ended); start again from a checkpoint", c->session, path);
	}
	c->errmsg[0] = '\0';
	return 0;
}
