/* SPDX-License-Identifier: MIT */
/*
 * util/fdio.h: a whole transfer even when the kernel takes it in pieces
 * (a pipe holds 64 KiB: a 1 MiB write goes in many short writes while a
 * child drains it), offsets honoured, the end of a file an error (-EIO),
 * a bad descriptor its errno.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "util/fdio.h"

#define BIG (1u << 20)

int main(void)
{
	char path[] = "/tmp/spw-fdio-XXXXXX", back[4096];
	unsigned char *buf = malloc(BIG), *got = malloc(BIG);
	int p[2], fd, st;
	pid_t pid;

	ASSERT_TRUE(buf && got);
	for (unsigned i = 0; i < BIG; i++)
		buf[i] = (unsigned char)(i * 7 + i / 4096);

	/* A pipe: the child reads slowly, in small pieces, so the writer's
	 * transfers come back short; the child checks every byte. */
	ASSERT_OK(pipe(p));
	pid = fork();
	ASSERT_TRUE(pid >= 0);
	if (pid == 0) {
		size_t have = 0;
		ssize_t n;

		close(p[1]);
		while (have < BIG && (n = read(p[0], got + have, 1000)) > 0)
			have += (size_t)n;
		_exit(have == BIG && !memcmp(got, buf, BIG) ? 0 : 1);
	}
	close(p[0]);
	ASSERT_EQ(fd_write_all(p[1], buf, BIG), 0);
	close(p[1]);
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);

	/* A file: pwrite at an offset, pread it back, then past the end. */
	fd = mkstemp(path);
	ASSERT_GE(fd, 0);
	unlink(path);
	ASSERT_EQ(fd_pwrite_all(fd, buf, BIG, 8192), 0);
	ASSERT_EQ(fd_pread_all(fd, got, BIG, 8192), 0);
	ASSERT_EQ(memcmp(got, buf, BIG), 0);
	ASSERT_EQ(fd_pread_all(fd, back, sizeof(back), 0), 0); /* the hole before: zeros */
	for (size_t i = 0; i < sizeof(back); i++)
		ASSERT_EQ(back[i], 0);
	ASSERT_EQ(fd_pread_all(fd, back, sizeof(back), 8192 + BIG - 100), -EIO);
	close(fd);
	ASSERT_EQ(fd_pwrite_all(fd, buf, 10, 0), -EBADF);
	ASSERT_EQ(fd_write_all(fd, buf, 10), -EBADF);
	free(buf);
	free(got);
	return 0;
}
