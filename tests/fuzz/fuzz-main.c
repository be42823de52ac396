/* SPDX-License-Identifier: MIT */
/*
 * The replay driver: runs every file of the corpus directories (or files)
 * named on the command line through LLVMFuzzerTestOneInput, in name order,
 * so the committed corpus is an ordinary test in every build (gcc, ASan,
 * no libFuzzer). Each input gets a buffer of exactly its size, so a read
 * past the end is caught by ASan as libFuzzer would catch it. An empty
 * corpus is a failure: a test that runs nothing proves nothing.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path)
{
	struct stat st;
	uint8_t *buf;
	size_t got = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &st) < 0) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return -1;
	}
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!buf)
		return -1;
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	if (got != (size_t)st.st_size) {
		fprintf(stderr, "%s: short read\n", path);
		free(buf);
		return -1;
	}
	fprintf(stderr, "replay %s (%zu bytes)\n", path, got);
	LLVMFuzzerTestOneInput(buf, got);
	free(buf);
	return 1;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv)
{
	int runs = 0;

	for (int i = 1; i < argc; i++) {
		struct dirent **list;
		struct stat st;
		int n;

		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			if (run_file(argv[i]) < 0)
				return 1;
			runs++;
			continue;
		}
		n = scandir(argv[i], &list, NULL, by_name);
		if (n < 0)
			return 1;
		for (int k = 0; k < n; k++) {
			char path[4096];

			if (list[k]->d_name[0] != '.') {
				snprintf(path, sizeof(path), "%s/%s", argv[i], list[k]->d_name);
				if (run_file(path) < 0)
					return 1;
				runs++;
			}
			free(list[k]);
		}
		free(list);
	}
	fprintf(stderr, "%d inputs replayed\n", runs);
	return runs > 0 ? 0 : 1;
}
