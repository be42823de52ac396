/* SPDX-License-Identifier: MIT */
/*
 * spillwayctl top: the status document every second, drawn with plain ANSI
 * escapes (no curses: the view is one screen of text redrawn in place).
 *
 * On a terminal it takes the alternate screen, hides the cursor and puts
 * the terminal in non-canonical mode for single keys; every exit path
 * (q, SIGINT, SIGTERM, SIGHUP, an error, exit()) goes through restore(),
 * which is idempotent. Not on a terminal, it prints a plain table per
 * refresh, which is what scripts and tests read (--iterations N).
 *
 * Rates (MB/s) are deltas between two documents over the time between
 * them; the first frame shows the daemon's averages since attach.
 */
#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "ctl-top.h"
#include "util/bytes.h"
#include "util/clock.h"

enum sort_key { SORT_NAME, SORT_REGION, SORT_READ, SORT_WRITE, SORT_HIT, SORT__N };
static const char *const sort_names[SORT__N] = { "name", "region", "read", "write", "hit%" };

struct row {
	char name[128];
	char state[16];
	double region, resident, inslot, disk, pinned;
	double step, step_s;        /* the optimizer's committed step, time between commits */
	double adam_s;              /* its kernels' CPU time in the last step */
	double read_bytes, write_bytes, read_rate, write_rate;
	double hits, misses, hit;   /* hit: -1 when no PIN needed a page yet */
};

struct prev {
	char name[128];
	double read_bytes, write_bytes;
};

static struct {
	bool tty, raw;
	struct termios saved;
	volatile sig_atomic_t signal;
	volatile sig_atomic_t resized;
	enum sort_key sort;
	struct prev *prev;
	size_t nprev;
	uint64_t prev_ns;
} top;

static void restore(void)
{
	if (!top.raw)
		return;
	top.raw = false;
	/* cursor back, alternate screen left, keys as before */
	fputs("\033[?25h\033[?1049l", stdout);
	fflush(stdout);
	tcsetattr(STDIN_FILENO, TCSAFLUSH, &top.saved);
}

static void on_signal(int sig)
{
	if (sig == SIGWINCH)
		top.resized = 1;
	else
		top.signal = sig;
}

static int enter_raw(void)
{
	struct termios t;

	if (tcgetattr(STDIN_FILENO, &top.saved) < 0)
		return -errno;
	t = top.saved;
	/* Single keys, no echo; ISIG stays so Ctrl-C is a SIGINT. */
	t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
	t.c_cc[VMIN] = 0;
	t.c_cc[VTIME] = 0;
	if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &t) < 0)
		return -errno;
	top.raw = true;
	atexit(restore);
	fputs("\033[?1049h\033[?25l", stdout);
	return 0;
}

static double num(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static double num0(const cJSON *o, const char *key)
{
	double v = num(o, key);

	return isnan(v) ? 0 : v;
}

/* A string of the document, control bytes made '?' in place: names and
 * paths reach the terminal, and an escape sequence in one must not. */
static const char *str(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	if (!cJSON_IsString(v))
		return "-";
	for (char *p = v->valuestring; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	return v->valuestring;
}

static const struct prev *prev_find(const char *name)
{
	for (size_t i = 0; i < top.nprev; i++)
		if (!strcmp(top.prev[i].name, name))
			return &top.prev[i];
	return NULL;
}

static void row_from(const cJSON *s, struct row *r, double dt)
{
	const cJSON *tier = cJSON_GetObjectItemCaseSensitive(s, "tier");
	const cJSON *pages = tier ? cJSON_GetObjectItemCaseSensitive(tier, "pages") : NULL;
	const struct prev *p;

	memset(r, 0, sizeof(*r));
	snprintf(r->name, sizeof(r->name), "%s", str(s, "name"));
	snprintf(r->state, sizeof(r->state), "%s", str(s, "state"));
	r->region = num0(s, "region_bytes");
	r->step = num0(s, "committed_step");
	r->step_s = num0(s, "step_s");
	r->adam_s = num0(s, "adam_s");
	r->pinned = num0(s, "pages_pinned");
	r->resident = num0(pages, "resident");
	r->inslot = num0(pages, "clean") + num0(pages, "dirty") + num0(pages, "writing") + num0(pages, "reading");
	r->disk = num0(pages, "disk");
	r->read_bytes = num0(tier, "read_bytes");
	r->write_bytes = num0(tier, "write_bytes");
	p = prev_find(r->name);
	if (p && dt > 0) {
		r->read_rate = (r->read_bytes - p->read_bytes) / 1e6 / dt;
		r->write_rate = (r->write_bytes - p->write_bytes) / 1e6 / dt;
	} else {
		r->read_rate = num0(tier, "read_mb_per_s");
		r->write_rate = num0(tier, "write_mb_per_s");
	}
	r->hits = num0(tier, "prefetch_hits");
	r->misses = num0(tier, "misses");
	r->hit = r->hits + r->misses > 0 ? 100.0 * r->hits / (r->hits + r->misses) : -1;
}

static int cmp_rows(const void *a, const void *b)
{
	const struct row *x = a, *y = b;
	double dx = 0, dy = 0;

	switch (top.sort) {
	case SORT_NAME:
		return strcmp(x->name, y->name);
	case SORT_REGION:
		dx = x->region, dy = y->region;
		break;
	case SORT_READ:
		dx = x->read_rate, dy = y->read_rate;
		break;
	case SORT_WRITE:
		dx = x->write_rate, dy = y->write_rate;
		break;
	case SORT_HIT:
		dx = x->hit, dy = y->hit;
		break;
	case SORT__N:
		break;
	}
	/* figures: largest first, ties by name */
	return dx < dy ? 1 : dx > dy ? -1 : strcmp(x->name, y->name);
}

/* "[#####.....]" of width w for part of whole. */
static const char *bar(double part, double whole, int w, char *buf)
{
	int n = whole > 0 ? (int)lround(part / whole * w) : 0;

	n = n < 0 ? 0 : n > w ? w : n;
	buf[0] = '[';
	for (int i = 0; i < w; i++)
		buf[1 + i] = i < n ? '#' : '.';
	buf[w + 1] = ']';
	buf[w + 2] = '\0';
	return buf;
}

static const char *bytes(double v, char *buf, size_t len)
{
	if (isnan(v) || v < 0)
		snprintf(buf, len, "-");
	else
		format_bytes((uint64_t)v, buf, len);
	return buf;
}

/* Lines end with "erase to end of line" on a terminal, so a shorter
 * frame leaves nothing of the one before. */
static void line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void line(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputs(top.tty ? "\033[K\n" : "\n", stdout);
}

static void draw(const cJSON *doc, double dt, int rows_max)
{
	const cJSON *pool = cJSON_GetObjectItemCaseSensitive(doc, "pool");
	const cJSON *swap = cJSON_GetObjectItemCaseSensitive(doc, "swap");
	const cJSON *dirs = swap ? cJSON_GetObjectItemCaseSensitive(swap, "dirs") : NULL;
	const cJSON *sessions = cJSON_GetObjectItemCaseSensitive(doc, "sessions");
	const cJSON *others = cJSON_GetObjectItemCaseSensitive(doc, "others");
	const cJSON *d, *s;
	char a[32], b[32], c[32], br[64];
	struct row *rows;
	int n = cJSON_IsArray(sessions) ? cJSON_GetArraySize(sessions) : 0, i = 0, shown;
	struct prev *np;
	time_t now = time(NULL);
	struct tm tm;

	localtime_r(&now, &tm);
	strftime(c, sizeof(c), "%H:%M:%S", &tm);
	line("spillwayd %s  pid %.0f  up %.0fs  cpu %.1fs  %s  sort: %s%s", str(doc, "version"), num0(doc, "pid"),
	     num0(doc, "uptime_s"), num0(doc, "cpu_s"), c, sort_names[top.sort],
	     top.tty ? "  (s: sort, q: quit)" : "");
	line("pool  %s %s of %s used, %s locked", bar(num0(pool, "used_bytes"), num0(pool, "max_bytes"), 30, br),
	     bytes(num(pool, "used_bytes"), a, sizeof(a)), bytes(num(pool, "max_bytes"), b, sizeof(b)),
	     bytes(num(pool, "locked_bytes"), c, sizeof(c)));
	cJSON_ArrayForEach(d, dirs) {
		double used = num0(d, "used_bytes"), max = num0(d, "max_bytes"), fr = num(d, "free_bytes");
		double cap = max > 0 ? max : used + (isnan(fr) ? 0 : fr);

		line("swap  %s %s of %s used, %s free  %s", bar(used, cap, 30, br), bytes(used, a, sizeof(a)),
		     bytes(cap, b, sizeof(b)), bytes(fr, c, sizeof(c)), str(d, "path"));
	}
	line("%s", "");
	rows = calloc((size_t)n + 1, sizeof(*rows));
	np = calloc((size_t)n + 1, sizeof(*np));
	if (!rows || !np) {
		free(rows);
		free(np);
		line("out of memory");
		return;
	}
	cJSON_ArrayForEach(s, sessions) {
		row_from(s, &rows[i], dt);
		snprintf(np[i].name, sizeof(np[i].name), "%s", rows[i].name);
		np[i].read_bytes = rows[i].read_bytes;
		np[i].write_bytes = rows[i].write_bytes;
		i++;
	}
	free(top.prev);
	top.prev = np;
	top.nprev = (size_t)n;
	qsort(rows, (size_t)n, sizeof(*rows), cmp_rows);
	line("%-24s %-9s %7s %8s %8s %10s %7s %7s %7s %7s %9s %9s %6s", "SESSION", "STATE", "STEP", "STEP MS",
	     "ADAM MS", "REGION", "RESID", "INSLOT", "DISK", "PINNED", "READ MB/s", "WRITE MB/s", "PF HIT");
	shown = rows_max > 0 && n > rows_max ? rows_max : n;
	for (i = 0; i < shown; i++) {
		char hit[16], ms[16], adam[16];

		if (rows[i].hit < 0)
			snprintf(hit, sizeof(hit), "-");
		else
			snprintf(hit, sizeof(hit), "%.0f%%", rows[i].hit);
		/* No step time before two commits. */
		if (rows[i].step_s > 0)
			snprintf(ms, sizeof(ms), "%.1f", rows[i].step_s * 1e3);
		else
			snprintf(ms, sizeof(ms), "-");
		if (rows[i].adam_s > 0)
			snprintf(adam, sizeof(adam), "%.1f", rows[i].adam_s * 1e3);
		else
			snprintf(adam, sizeof(adam), "-");
		line("%-24.24s %-9.9s %7.0f %8s %8s %10s %7.0f %7.0f %7.0f %7.0f %9.1f %10.1f %6s", rows[i].name,
		     rows[i].state, rows[i].step, ms, adam, bytes(rows[i].region, a, sizeof(a)), rows[i].resident,
		     rows[i].inslot, rows[i].disk, rows[i].pinned, rows[i].read_rate, rows[i].write_rate, hit);
	}
	if (shown < n)
		line("... %d more (a taller terminal shows them)", n - shown);
	if (n == 0)
		line("no sessions");
	if (num0(others, "sessions") > 0)
		line("sessions of other users: %.0f, holding %s", num0(others, "sessions"),
		     bytes(num(others, "region_bytes"), a, sizeof(a)));
	free(rows);
}

/* Waits up to ms for a key (terminal) or a signal; handles the key. */
static bool wait_key(int ms)
{
	struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
	uint64_t end = now_ns() + (uint64_t)ms * 1000000ull;

	for (;;) {
		int64_t left = (int64_t)(end - now_ns()) / 1000000;
		char k;

		if (top.signal || top.resized)
			return true;
		if (left <= 0)
			return false;
		if (!top.tty) {
			poll(NULL, 0, (int)left);
			continue;
		}
		if (poll(&p, 1, (int)left) <= 0)
			continue;
		if (read(STDIN_FILENO, &k, 1) != 1) {
			if (errno != EINTR && errno != EAGAIN)
				return false;
			continue;
		}
		if (k == 'q' || k == 'Q') {
			top.signal = -1;
			return true;
		}
		if (k == 's' || k == '>') {
			top.sort = (top.sort + 1) % SORT__N;
			return true;
		}
		if (k == '<') {
			top.sort = (top.sort + SORT__N - 1) % SORT__N;
			return true;
		}
	}
}

int ctl_top_main(const char *path, const char *iterations_arg, const char *sort)
{
	struct sigaction sa = { .sa_handler = on_signal };
	long iterations = 0;
	char *end;
	int rc = 0, sig;

	if (iterations_arg) {
		errno = 0;
		iterations = strtol(iterations_arg, &end, 10);
		if (errno || *end || iterations < 0 || end == iterations_arg) {
			fprintf(stderr, "spillwayctl top: --iterations %s is not a count\n", iterations_arg);
			return 2;
		}
	}
	if (sort) {
		top.sort = SORT__N;
		for (int i = 0; i < SORT__N; i++)
			if (!strcmp(sort, sort_names[i]) || (i == SORT_HIT && !strcmp(sort, "hit")))
				top.sort = i;
		if (top.sort == SORT__N) {
			fprintf(stderr, "spillwayctl top: --sort %s: use name, region, read, write or hit%%\n", sort);
			return 2;
		}
	}

	/* No SA_RESTART: a signal ends the wait in poll(). */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGWINCH, &sa, NULL);
	top.tty = isatty(STDOUT_FILENO) && isatty(STDIN_FILENO);
	if (top.tty && enter_raw() < 0)
		top.tty = false;

	for (long it = 0; !top.signal && (iterations == 0 || it < iterations); it++) {
		char *json = NULL;
		int r = spw_status_fetch(path, &json);
		uint64_t now = now_ns();
		double dt = top.prev_ns ? (double)(now - top.prev_ns) / 1e9 : 0;
		struct winsize ws = { 0 };
		cJSON *doc = NULL;

		if (top.tty) {
			ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws);
			fputs("\033[H", stdout);
		}
		if (r == 0)
			doc = cJSON_Parse(json);
		free(json);
		if (r < 0 || !cJSON_IsObject(doc)) {
			/* Said where the person looks; the view stays up and
			 * tries again, since a restarting daemon comes back. */
			line("no spillwayd answering at %s (%s); retrying every second%s", path,
			     r < 0 ? spw_strerror(r) : "not a status document", top.tty ? "  (q: quit)" : "");
			top.nprev = 0;
			top.prev_ns = 0;
			rc = 1;
		} else {
			draw(doc, dt, ws.ws_row > 8 ? ws.ws_row - 7 : 0);
			top.prev_ns = now;
			rc = 0;
		}
		cJSON_Delete(doc);
		if (top.tty)
			fputs("\033[J", stdout);
		else
			line("%s", "");
		fflush(stdout);
		if (iterations && it + 1 >= iterations)
			break;
		/* A key or a resize redraws at once (rates then cover the
		 * shorter interval). */
		wait_key(1000);
		top.resized = 0;
	}
	sig = top.signal;
	restore();
	free(top.prev);
	top.prev = NULL;
	if (sig > 0) {
		/* Die of the signal as the shell expects, terminal restored. */
		signal(sig, SIG_DFL);
		raise(sig);
		return 128 + sig;
	}
	/* q: the person is done, whatever the last refresh found. */
	return sig < 0 ? 0 : rc;
}
