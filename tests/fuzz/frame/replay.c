/* SPDX-License-Identifier: MIT */
/*
 * replay: runs LLVMFuzzerTestOneInput over every file of the corpus
 * directories (or files) named on the command line, in name order, so a
 * build without libFuzzer (gcc, ASan+UBSan) still runs every committed
 * input as an ordinary test. Fails on an empty corpus: a test that ran
 * nothing must not pass.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rbe");
	uint8_t *data = NULL;
	long n;

	if (!f) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (fseek(f, 0, SEEK_END) < 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) < 0 ||
	    !(data = malloc((size_t)n + 1)) || fread(data, 1, (size_t)n, f) != (size_t)n) {
		fprintf(stderr, "replay: %s: cannot read it\n", path);
		fclose(f);
		free(data);
		return -1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(data, (size_t)n);
	free(data);
	return 0;
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
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			if (run_file(argv[i]) < 0)
				return 1;
			runs++;
			continue;
		}
		n = scandir(argv[i], &list, NULL, by_name);
		if (n < 0) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
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
	if (runs == 0) {
		fprintf(stderr, "replay: no inputs found in the corpus given\n");
		return 1;
	}
	printf("replay: %d inputs, every invariant held\n", runs);
	return 0;
}
