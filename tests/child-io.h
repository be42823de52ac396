/* SPDX-License-Identifier: MIT */
/*
 * tests/child-io.h: what the tests that run a trainer in a child process
 * (persist-trainer: restart, reconnect, crash, checkpoint, the storms)
 * need: starting it, reading back its output, exit status and the state
 * file it wrote; and removing a checkpoint directory.
 */
#ifndef SPW_TESTS_CHILD_IO_H
#define SPW_TESTS_CHILD_IO_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

/* persist-trainer's command line (tests/pipeline/persist-trainer.c says
 * what each means); a NULL field takes the value in brackets. */
struct trainer_args {
	const char *socket, *session;
	const char *mode;       /* [exact] */
	const char *tier;
	const char *accum;      /* [1] */
	const char *fp16;       /* [0] */
	const char *steps;
	const char *pause_us;   /* [0] between steps */
	const char *persistent; /* "1" or "0" */
	const char *out;        /* where it writes its final state */
	const char *env[8];     /* "NAME=value" set in the child only; NULL ends the list */
	int stderr_too;         /* its stderr into the pipe as well */
};

/* Starts $PERSIST_TRAINER with a; what it prints comes on *fd (read it
 * with child_reap()). */
static inline pid_t trainer_spawn(const struct trainer_args *a, int *fd)
{
	const char *exe = getenv("PERSIST_TRAINER");
	int pfd[2];
	pid_t pid;

	ASSERT_TRUE(exe != NULL);
	ASSERT_OK(pipe(pfd));
	pid = fork();
	ASSERT_TRUE(pid >= 0);
	if (pid == 0) {
		dup2(pfd[1], 1);
		if (a->stderr_too)
			dup2(pfd[1], 2);
		close(pfd[0]);
		close(pfd[1]);
		for (int i = 0; i < 8 && a->env[i]; i++)
			putenv((char *)a->env[i]);
		execl(exe, exe, a->socket, a->session, a->mode ? a->mode : "exact", a->tier, a->accum ? a->accum : "1",
		      a->fp16 ? a->fp16 : "0", a->steps, a->pause_us ? a->pause_us : "0", a->persistent, a->out,
		      (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	*fd = pfd[0];
	return pid;
}

/* Reads what the child printed on fd (until it closes) into buf, closes
 * fd and waits for the child: its exit status, -1 when a signal ended it. */
static inline int child_reap(pid_t pid, int fd, char *buf, size_t len)
{
	size_t got = 0;
	ssize_t n;
	int st;

	while (got + 1 < len && (n = read(fd, buf + got, len - 1 - got)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
	close(fd);
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The whole file at path, malloc'd (never empty) with a NUL after it, so
 * text can be read as a string; its length in *n. */
static inline void *file_load(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	void *buf;
	long len;

	ASSERT_TRUE(f != NULL);
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	fseek(f, 0, SEEK_SET);
	ASSERT_TRUE(len > 0);
	buf = malloc((size_t)len + 1);
	ASSERT_TRUE(buf != NULL);
	ASSERT_EQ(fread(buf, 1, (size_t)len, f), (size_t)len);
	fclose(f);
	((char *)buf)[len] = '\0';
	*n = (size_t)len;
	return buf;
}

/* The daemon config the persist-trainer tests share: 64 MiB sessions, a
 * swap directory in the daemon's own dir, persist.state_dir at state
 * (with flush_interval_s 1 when periodic). Returns buf. */
static inline const char *persist_config(char *buf, size_t len, const char *state, int periodic)
{
	snprintf(buf, len,
		 "{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0600\"},"
		 " \"pool\": {\"max_bytes\": \"256MiB\", \"session_max_bytes\": \"64MiB\", \"require_locked\": false},"
		 " \"swap\": {\"dirs\": [{\"path\": \"@DIR@\", \"max_bytes\": \"1GiB\"}], \"session_bytes\": \"64MiB\"},"
		 " \"persist\": {\"state_dir\": \"%s\"%s}, \"log\": {\"level\": \"warn\"}}",
		 state, periodic ? ", \"flush_interval_s\": 1" : "");
	return buf;
}

/* Two trainers' state files (persist-trainer's: fp32 p, m and v of each
 * tensor in order) hold the same bits; otherwise the test fails naming
 * the first element that differs. what: the second run ("across the
 * restart"). */
static inline void state_files_same(const char *ref, const char *run, const char *what)
{
	size_t na, nb;
	float *a = file_load(ref, &na), *b = file_load(run, &nb);

	ASSERT_EQ(na, nb);
	for (size_t i = 0; i < na / 4; i++)
		if (memcmp(&a[i], &b[i], 4))
			TEST_FAIL("element %zu of the state (p, m, v of each tensor in order) differs: %.9g uninterrupted, "
				  "%.9g %s", i, (double)a[i], (double)b[i], what);
	free(a);
	free(b);
}

/* Removes dir and the files in it (a checkpoint: no subdirectories).
 * rmdir's result; 0 when dir is not there. */
static inline int dir_remove(const char *dir)
{
	char a[1024];
	struct dirent *e;
	DIR *dd = opendir(dir);

	if (!dd)
		return 0;
	while ((e = readdir(dd))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(a, sizeof(a), "%s/%s", dir, e->d_name);
		unlink(a);
	}
	closedir(dd);
	return rmdir(dir);
}

#endif
