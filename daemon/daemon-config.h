/* SPDX-License-Identifier: MIT */
/*
 * config.h: spillwayd's configuration (JSON; every key in README.md, Configuration). Every key is
 * validated when the file is read: unknown keys, wrong types and values the
 * daemon could never honour are refused with a message naming the key, the
 * value and the reason.
 */
#ifndef SPW_DAEMON_DAEMON_CONFIG_H
#define SPW_DAEMON_DAEMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum config_hugepages {
	CONFIG_HUGEPAGES_AUTO = 0,
	CONFIG_HUGEPAGES_ALWAYS,
	CONFIG_HUGEPAGES_NEVER,
};

/* checkpoint.priority: whether a checkpoint's copy gives the disk to
 * sessions that wait on it (low) or takes its full share (normal, the
 * default). */
enum config_priority {
	CONFIG_PRIORITY_LOW = 0,
	CONFIG_PRIORITY_NORMAL,
};

#define CONFIG_NUMA_AUTO       (-2)
#define CONFIG_MAX_SWAP_DIRS   16
#define CONFIG_MAX_FILE_BYTES  (1024 * 1024)
#define CONFIG_DEFAULT_POLL_US 50u
#define CONFIG_DEFAULT_COMMIT_WAIT_S 120u
#define CONFIG_DEFAULT_MAX_TENSORS 65536u
#define CONFIG_DEFAULT_MAX_GARBAGE 1000u
#define CONFIG_DEFAULT_SWAP_SESSION_BYTES (4ull << 30)
#define CONFIG_DEFAULT_SESSIONS_PER_UID 64u
#define CONFIG_DEFAULT_CONNECTIONS_PER_UID 256u
#define CONFIG_DEFAULT_HELLO_TIMEOUT_MS 10000u
#define CONFIG_DEFAULT_RING_OPS_PER_S 1000000u
#define CONFIG_DEFAULT_LEASE_MAX_S (7u * 24u * 3600u)
/* checkpoint.cow_bytes: a checkpoint's side buffers for pages the trainer
 * changes before the copy reaches them; the most allowed. */
#define CONFIG_DEFAULT_CHECKPOINT_COW_BYTES (256ull << 20)
#define CONFIG_MAX_CHECKPOINT_COW_BYTES (1ull << 40)

struct config_swap_dir {
	char *path;
	uint64_t max_bytes;
};

struct config {
	char *origin; /* the file it came from, or "built-in defaults" */

	char *socket_dir;
	unsigned socket_mode;
	char *socket_group; /* NULL: leave the group alone */
	gid_t socket_gid;

	uint64_t pool_max_bytes;
	uint64_t pool_session_max_bytes;
	bool pool_require_locked;
	int pool_hugepages;  /* enum config_hugepages */
	int pool_numa_node;  /* CONFIG_NUMA_AUTO or a node number */
	char *pool_gpu;      /* PCI address "0000:3b:00.0" or NULL */

	uint32_t session_page_size;
	uint32_t session_ring_entries;
	uint32_t session_max_tensors;
	uint32_t session_max_garbage;

	uint32_t ring_poll_us;
	int log_level;

	/* NVMe tier. dirs, queue_depth and sqpoll are read at start (a reload
	 * keeps them); prefetch_window and session_bytes apply to new sessions. */
	struct config_swap_dir swap_dirs[CONFIG_MAX_SWAP_DIRS];
	size_t n_swap_dirs;
	uint32_t swap_queue_depth;
	bool swap_sqpoll;
	uint32_t swap_prefetch_window;
	uint64_t swap_session_bytes; /* a session's swap when its attach names none */

	/* Fair shares per uid (limits.*); 0 bytes: no cap of its own. */
	uint32_t limits_sessions_per_uid;
	uint32_t limits_connections_per_uid;
	uint64_t limits_region_bytes_per_uid;
	uint64_t limits_swap_bytes_per_uid;
	uint32_t limits_hello_timeout_ms; /* 0: no deadline */
	uint32_t limits_ring_ops_per_s;   /* per session; 0: no limit */
	uint32_t limits_lease_max_s;      /* the longest lease a persistent session may ask */

	/* Prometheus endpoint (metrics-server.c): NULL is off. Read at start. */
	char *metrics_listen;
	bool metrics_allow_remote;

	/* persist.state_dir: where persistent sessions are checkpointed at
	 * shutdown and restored from at start; NULL is off. Read at start. */
	char *persist_state_dir;
	/* persist.flush_interval_s: seconds between flushes of each persistent
	 * session into persist.state_dir (state.c); 0 (the default) is off. */
	uint32_t persist_flush_interval_s;
	/* persist.commit_wait_s: at SIGTERM, how long a persistent session
	 * inside a step's updates is served on for its commit point, the
	 * point its save is taken at (state.c); past it, not saved. */
	uint32_t persist_commit_wait_s;

	/* checkpoint.cow_bytes: side-buffer bytes a checkpoint's copy-on-write
	 * may hold at once (0: every change of a page not yet copied waits
	 * for the copier). Read when a checkpoint starts. */
	uint64_t checkpoint_cow_bytes;
	/* checkpoint.priority (enum config_priority): read when a checkpoint
	 * starts. */
	int checkpoint_priority;
};

/*
 * Reads and validates the configuration. path NULL means SPW_DEFAULT_CONFIG
 * when that file exists, else the built-in defaults. On failure returns a
 * negative errno and writes a sentence for a person into err; *ret is left
 * untouched.
 */
int config_load(const char *path, struct config **ret, char *err, size_t errlen);

/* The same from a JSON string; origin names it in messages. */
int config_parse(const char *json, size_t len, const char *origin, struct config **ret,
		 char *err, size_t errlen);

struct config *config_free(struct config *c);

const char *config_hugepages_name(int v);
const char *config_priority_name(int v);

/* Parses "4MiB", "64GiB", "1048576" (binary units, B/K/KiB/M/MiB/G/GiB/T/TiB).
 * Returns 0 or -EINVAL (not a size) / -ERANGE (overflows). */
int config_parse_size(const char *s, uint64_t *ret);

#endif
