/* SPDX-License-Identifier: MIT */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "daemon-config.h"
#include "daemon.h"
#include "log.h"
#include "spw-proto.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: spillwayd [--config PATH] [--check-config]\n"
		"\n"
		"Pinned host memory and NVMe swap for GPU training, one daemon per node.\n"
		"\n"
		"  -c, --config PATH   read PATH instead of %s\n"
		"      --check-config  validate the configuration, print a summary, exit\n"
		"  -V, --version       print the version and exit\n"
		"  -h, --help          this text\n"
		"\n"
		"Without a config file the built-in defaults apply; as a non-root user the\n"
		"sockets go to $XDG_RUNTIME_DIR/spillway. Keys: README.md (Configuration) in the source tree.\n",
		SPW_DEFAULT_CONFIG);
}

static void summary(const struct config *c)
{
	char a[32], b[32];

	printf("%s: configuration is valid\n", c->origin);
	printf("  socket.dir %s, socket.mode %04o, socket.group %s\n", c->socket_dir, c->socket_mode,
	       c->socket_group ? c->socket_group : "(unchanged)");
	printf("  pool.max_bytes %s, pool.session_max_bytes %s, pool.require_locked %s, pool.hugepages %s\n",
	       format_bytes(c->pool_max_bytes, a, sizeof(a)), format_bytes(c->pool_session_max_bytes, b, sizeof(b)),
	       c->pool_require_locked ? "true" : "false", config_hugepages_name(c->pool_hugepages));
	printf("  session.page_size %u, session.ring_entries %u, ring.poll_us %u, log.level %s\n", c->session_page_size,
	       c->session_ring_entries, c->ring_poll_us, log_level_name(c->log_level));
	for (size_t i = 0; i < c->n_swap_dirs; i++)
		printf("  swap.dirs[%zu] %s, max_bytes %s\n", i, c->swap_dirs[i].path,
		       format_bytes(c->swap_dirs[i].max_bytes, a, sizeof(a)));
	printf("  swap.queue_depth %u, swap.sqpoll %s, swap.prefetch_window %u, swap.session_bytes %s%s\n",
	       c->swap_queue_depth, c->swap_sqpoll ? "true" : "false", c->swap_prefetch_window,
	       format_bytes(c->swap_session_bytes, b, sizeof(b)),
	       c->n_swap_dirs ? "" : " (no swap.dirs: resident tensors only)");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "check-config", no_argument, NULL, 'k' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *path = NULL;
	bool check = false;
	struct config *cfg = NULL;
	char err[1024];
	int o;

	while ((o = getopt_long(argc, argv, "c:Vh", opts, NULL)) != -1) {
		switch (o) {
		case 'c':
			path = optarg;
			break;
		case 'k':
			check = true;
			break;
		case 'V':
			printf("spillwayd %s (protocol %d.%d)\n", SPW_VERSION, SPW_PROTO_MAJOR, SPW_PROTO_MINOR);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "spillwayd: unexpected argument \"%s\"\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (config_load(path, &cfg, err, sizeof(err)) < 0) {
		fprintf(stderr, "spillwayd: %s\n", err);
		return 1;
	}
	if (check) {
		summary(cfg);
		config_free(cfg);
		return 0;
	}
	return daemon_run(cfg, path);
}
