/* SPDX-License-Identifier: MIT */
/*
 * metrics-text.h: the Prometheus text exposition format, version 0.0.4,
 * written into a growing buffer. Pure code: metrics.c feeds it the
 * daemon's figures, the unit test feeds it hostile label values.
 *
 * A family is "# HELP name text" and "# TYPE name type" followed by all of
 * its samples, contiguous. Label values are escaped as the format says
 * (backslash, double quote, newline); HELP text likewise (backslash,
 * newline). Names are the caller's constants and are not checked here.
 */
#ifndef SPW_DAEMON_METRICS_TEXT_H
#define SPW_DAEMON_METRICS_TEXT_H

#include <stdbool.h>
#include <stddef.h>

struct mtext {
	char *buf;
	size_t len, cap;
	bool failed;            /* an allocation failed: the text is incomplete */
};

/* "# HELP" and "# TYPE" lines; type is "gauge", "counter", "summary",
 * "histogram" or "untyped". */
void mtext_family(struct mtext *t, const char *name, const char *type, const char *help);

/* One sample: name{k1="v1",...} value. The labels are NULL-terminated
 * pairs of const char * (key, value). Values print exactly when they are
 * whole numbers (counters up to 2^53), else with 15 significant digits,
 * or 17 when 15 do not read back as the same double;
 * NaN and infinities as the format spells them. */
void mtext_sample(struct mtext *t, const char *name, double value, ...) __attribute__((sentinel));

/* Hands the text over (NUL-terminated; the caller frees it), or NULL when
 * an allocation failed; t is empty afterwards either way. */
char *mtext_take(struct mtext *t, size_t *len);

#endif
