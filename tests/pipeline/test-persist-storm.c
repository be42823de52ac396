/* SPDX-License-Identifier: MIT */
/*
 * test-persist-storm: a training run on a persistent session, killed with
 * SIGKILL at random instants again and again (issue 10). Each kill is
 * followed by a new trainer that takes the session over and continues;
 * the final master weights and moments must equal an uninterrupted run's
 * bit for bit. Every kill resumes, those inside a step's updates too (the
 * tile journal, client/journal.c): no trainer may be refused. Random
 * kills land inside updates only now and then, so every fifth trainer
 * of the storm kills itself inside one (SPILLWAY_TEST_KILL_AT_TILE) and
 * the next must say "resumed N mid-update". At the end no session, pool
 * byte or swap file is left.
 *
 *   test-persist-storm MODE TIER ACCUM FP16 KILLS [TILE]
 *
 * With TILE, one kill instead of the storm, at a known place: the library
 * kills the trainer half way through its TILE-th journal unit update (4096 elements)
 * (SPILLWAY_TEST_KILL_AT_TILE); the next trainer must resume it.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "harness.h"
#include "child-io.h"
#include "session-figure.h"
#include "test.h"

#define STEPS "200"
#define PAUSE_US "3000"

static struct spw_test_daemon d;
static const char *mode, *tier, *accum, *fp16;
static const char *kill_tile; /* SPILLWAY_TEST_KILL_AT_TILE for the next spawn, or NULL */

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static pid_t spawn(const char *session, const char *persistent, const char *out, int *out_fd)
{
	char kill_at[64], delay[64], threads[32];
	struct trainer_args a = { .socket = d.control, .session = session, .mode = mode, .tier = tier, .accum = accum,
				  .fp16 = fp16, .steps = STEPS, .pause_us = PAUSE_US, .persistent = persistent,
				  .out = out };
	int n = 0;

	if (kill_tile) {
		snprintf(kill_at, sizeof(kill_at), "SPILLWAY_TEST_KILL_AT_TILE=%s", kill_tile);
		a.env[n++] = kill_at;
	}
	/* Tile updates take longer, so that a fair share of the random kills
	 * lands inside them (a few percent otherwise, in exact mode; one
	 * step's updates follow accum backwards). */
	snprintf(delay, sizeof(delay), "SPILLWAY_TEST_TILE_DELAY_US=%d", 60 * atoi(accum));
	a.env[n++] = delay;
	/* Each trainer of the storm has 1 to 3 pool threads: one taking over
	 * a journal of another size resumes as well. */
	snprintf(threads, sizeof(threads), "PERSIST_THREADS=%d", 1 + rand() % 3);
	a.env[n++] = threads;
	return trainer_spawn(&a, out_fd);
}

/* The first line a trainer printed (its "resumed N" when it took a
 * session over), read before it is killed; reap() counts it. */
static char first_line[256];

static void read_first_line(int fd)
{
	size_t n = 0;

	while (n + 1 < sizeof(first_line) && read(fd, first_line + n, 1) == 1 && first_line[n] != '\n')
		n++;
	first_line[n] = '\0';
}

/* Waits for pid; returns its exit status, or -1 when a signal ended it.
 * Counts a "resumed N" line it printed, and in mid_count those of a
 * session left inside a step's updates. */
static int mid_count;
static bool last_mid; /* the trainer reaped last said "mid-update" */

static int reap(pid_t pid, int fd, int *resumed)
{
	char buf[4096];
	int st = child_reap(pid, fd, buf, sizeof(buf));

	*resumed += strstr(buf, "resumed ") != NULL || strstr(first_line, "resumed ") != NULL;
	last_mid = strstr(buf, " mid-update") != NULL || strstr(first_line, " mid-update") != NULL;
	mid_count += last_mid;
	first_line[0] = '\0';
	return st;
}

static void drop(const char *session)
{
	spw_client *c;

	ASSERT_OK(spw_client_new(NULL, &c));
	ASSERT_OK(spw_client_connect(c, d.control));
	ASSERT_OK(spw_client_drop(c, session));
	spw_client_free(c);
}

static int swap_files(void)
{
	DIR *dd = opendir(d.dir);
	struct dirent *e;
	int n = 0;

	ASSERT_TRUE(dd != NULL);
	while ((e = readdir(dd)))
		n += strstr(e->d_name, ".swap") != NULL;
	closedir(dd);
	return n;
}

int main(int argc, char **argv)
{
	char ref_out[512], storm_out[512];
	long ref_ms;
	int kills_wanted, kills = 0, resumed = 0, stale = 0, fd, st, ignored = 0, self_kills = 0;
	int self_kills_resumed = 0; /* those the next trainer resumed "mid-update" */
	bool after_self_kill = false;
	char tile[32];
	unsigned seed;
	pid_t pid;

	if (argc != 6 && argc != 7)
		TEST_FAIL("usage: test-persist-storm MODE TIER ACCUM FP16 KILLS [TILE]");
	mode = argv[1];
	tier = argv[2];
	accum = argv[3];
	fp16 = argv[4];
	kills_wanted = atoi(argv[5]);
	setvbuf(stdout, NULL, _IOLBF, 0); /* the counts reach the log before a failed assertion */
	if (!getenv("SPILLWAYD"))
		SKIP("spillwayd is not built yet");
	ASSERT_OK(spw_test_daemon_start(&d,
		"{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0600\"},"
		" \"pool\": {\"max_bytes\": \"256MiB\", \"session_max_bytes\": \"64MiB\", \"require_locked\": false},"
		" \"swap\": {\"dirs\": [{\"path\": \"@DIR@\", \"max_bytes\": \"1GiB\"}], \"session_bytes\": \"64MiB\"},"
		" \"log\": {\"level\": \"warn\"}}"));
	snprintf(ref_out, sizeof(ref_out), "%s/ref.bin", d.dir);
	snprintf(storm_out, sizeof(storm_out), "%s/storm.bin", d.dir);
	seed = (unsigned)time(NULL) ^ (unsigned)getpid();
	printf("# seed %u (%s, %s, accumulation %s, fp16 %s)\n", seed, mode, tier, accum, fp16);
	srand(seed);

	ref_ms = now_ms();
	pid = spawn("storm/ref", "0", ref_out, &fd);
	ASSERT_EQ(reap(pid, fd, &ignored), 0);
	/* Kills come within a twentieth of a whole run's time, so most land
	 * before the run could end and each lets it get a few steps on. */
	ref_ms = now_ms() - ref_ms;

	if (argc == 7) {
		/* One kill, inside the TILE-th unit update: the trainer dies
		 * by its own SIGKILL, the next one resumes mid-update. */
		kill_tile = argv[6];
		pid = spawn("storm/run", "1", storm_out, &fd);
		ASSERT_EQ(reap(pid, fd, &resumed), -1);
		kill_tile = NULL;
		/* On the NVMe tier the overlapped mode's undo copies took over
		 * p's disk copies rather than be written (pager-copy.c), and
		 * the resume below reads them from there. Not with bf16 master
		 * weights (PERSIST_MASTER_DTYPE): two chunks share a page of
		 * them, so no undo page is a whole copy of p's; written back. */
		if (!strcmp(mode, "overlapped") && !strcmp(tier, "swappable")) {
			double taken = session_figure(d.status, "storm/run", "tier.disk_copies_taken");
			const char *md = getenv("PERSIST_MASTER_DTYPE");

			printf("# undo pages that took over p's disk copy: %.0f\n", taken);
			if (md && !strcmp(md, "bf16"))
				ASSERT_TRUE(taken == 0);
			else
				ASSERT_TRUE(taken > 0);
		}
		kills = kills_wanted = 1;
		pid = spawn("storm/run", "1", storm_out, &fd);
		ASSERT_EQ(reap(pid, fd, &resumed), 0);
		ASSERT_EQ(resumed, 1);
		ASSERT_EQ(mid_count, 1);
	}
	for (; argc == 6;) {
		/* Every fifth trainer dies inside a unit update of its own, after
		 * 100 to 400 of them (a step has about 50: it committed a step
		 * or more first, so the next one resumes one). */
		bool self_kill = kills < kills_wanted && kills % 5 == 4;

		if (self_kill) {
			snprintf(tile, sizeof(tile), "%d", 100 + rand() % 300);
			kill_tile = tile;
		}
		pid = spawn("storm/run", "1", storm_out, &fd);
		kill_tile = NULL;
		if (after_self_kill)
			/* Its "resumed N mid-update" comes before a kill. */
			read_first_line(fd);
		if (kills < kills_wanted && !self_kill) {
			/* Anywhere: mid-attach, mid-backward, mid-Adam, between
			 * steps, while the daemon writes pages back. */
			usleep((useconds_t)(rand() % (ref_ms * 1000 / 20 + 1)));
			kill(pid, SIGKILL);
		}
		st = reap(pid, fd, &resumed);
		self_kills_resumed += after_self_kill && last_mid;
		after_self_kill = false;
		if (st == 0)
			break;
		if (st == 3) {
			/* Refused: the state mixes two steps. Counted, the
			 * run started over, and failed below. */
			stale++;
			drop("storm/run");
			continue;
		}
		ASSERT_EQ(st, -1); /* killed; anything else is a trainer failure */
		kills++;
		self_kills += self_kill;
		after_self_kill = self_kill;
	}
	printf("# %d kills (%d inside an update by the trainer itself): %d resumed, %d of them inside a step's "
	       "updates; %d refused\n", kills, self_kills, resumed, mid_count, stale);
	/* The run may end before every kill came (a lucky draw of long
	 * delays); most must have. */
	ASSERT_TRUE(kills >= kills_wanted / 2);
	ASSERT_TRUE(resumed > 0);
	/* Every kill resumes, inside updates too. */
	ASSERT_EQ(stale, 0);
	/* Each self-kill inside an update was resumed as such (before the
	 * journal each was refused); random kills add what they hit. */
	ASSERT_TRUE(self_kills > 0 || kills_wanted < 5);
	ASSERT_EQ(self_kills_resumed, self_kills);

	state_files_same(ref_out, storm_out, "after the kills");

	/* Nothing left behind: the last trainer detached. */
	ASSERT_EQ(status_figure(d.status, "sessions"), 0.0);
	ASSERT_EQ(status_figure(d.status, "pool.used_bytes"), 0.0);
	ASSERT_EQ(status_figure(d.status, "pool.locked_bytes"), 0.0);
	ASSERT_EQ(swap_files(), 0);
	ASSERT_EQ(spw_test_daemon_stop(&d), 0);
	printf("ok\n");
	return 0;
}
