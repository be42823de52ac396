/* SPDX-License-Identifier: MIT */
/*
 * test-version: one version number. meson's project version (argv[1]),
 * the header's SPW_VERSION_STRING and SPW_VERSION_MAJOR/MINOR/PATCH, the
 * loaded library's spw_version(), the pkg-config file's Version (argv[2])
 * and the newest block of libspillway.map (argv[3], SPILLWAY_<major>.<minor>)
 * all agree, and spw_version is bound to that block in the library.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spillway/spillway.h>

#include "test.h"

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	size_t n;

	if (!f)
		TEST_FAIL("cannot open %s", path);
	buf = calloc(1, 1 << 16);
	ASSERT_TRUE(buf != NULL);
	n = fread(buf, 1, (1 << 16) - 1, f);
	ASSERT_TRUE(n > 0 && n < (1 << 16) - 1);
	fclose(f);
	return buf;
}

/* The pc file's "Version: x.y.z" line. */
static void pc_version(const char *path, char *out, size_t len)
{
	char *text = slurp(path), *line;

	line = strstr(text, "\nVersion:");
	if (!line)
		TEST_FAIL("%s has no Version line", path);
	line += strlen("\nVersion:");
	line += strspn(line, " \t");
	snprintf(out, len, "%.*s", (int)strcspn(line, " \t\n"), line);
	free(text);
}

/* The name of the last block opened in the map, comments skipped. */
static void newest_node(const char *path, char *out, size_t len)
{
	char *text = slurp(path), *p = text, *end;

	out[0] = '\0';
	while (*p) {
		if (p[0] == '/' && p[1] == '*') {
			end = strstr(p + 2, "*/");
			ASSERT_TRUE(end != NULL);
			p = end + 2;
			continue;
		}
		if (!strncmp(p, "SPILLWAY_", 9)) {
			size_t n = strspn(p, "SPILLWAY_0123456789.");
			const char *q = p + n;

			q += strspn(q, " \t\n");
			if (*q == '{')
				snprintf(out, len, "%.*s", (int)n, p);
			p += n;
			continue;
		}
		p++;
	}
	free(text);
	if (!out[0])
		TEST_FAIL("%s opens no SPILLWAY_ block", path);
}

int main(int argc, char **argv)
{
	char pc[64], node[64], want_node[64], parts[64];
	const char *(*versioned)(void);

	ASSERT_EQ(argc, 4);
	fprintf(stderr, "meson %s, header %s, library %s\n", argv[1], SPW_VERSION_STRING, spw_version());
	ASSERT_STREQ(SPW_VERSION_STRING, argv[1]);
	snprintf(parts, sizeof(parts), "%d.%d.%d", SPW_VERSION_MAJOR, SPW_VERSION_MINOR,
		 SPW_VERSION_PATCH);
	ASSERT_STREQ(parts, argv[1]);
	ASSERT_STREQ(spw_version(), argv[1]);

	pc_version(argv[2], pc, sizeof(pc));
	fprintf(stderr, "pkg-config %s\n", pc);
	ASSERT_STREQ(pc, argv[1]);

	newest_node(argv[3], node, sizeof(node));
	snprintf(want_node, sizeof(want_node), "SPILLWAY_%d.%d", SPW_VERSION_MAJOR, SPW_VERSION_MINOR);
	fprintf(stderr, "newest map block %s\n", node);
	ASSERT_STREQ(node, want_node);

	/* The library binds spw_version to that block. */
	versioned = (const char *(*)(void))dlvsym(RTLD_DEFAULT, "spw_version", want_node);
	if (!versioned)
		TEST_FAIL("spw_version@%s is not in the loaded libspillway: %s", want_node, dlerror());
	ASSERT_STREQ(versioned(), argv[1]);
	printf("ok\n");
	return 0;
}
