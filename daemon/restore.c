/* SPDX-License-Identifier: MIT */
/*
 * Restores: a checkpoint directory (checkpoint.c) read into a new
 * persistent session, left orphaned so that the trainer's next persistent
 * attach of its name takes it over as after a kill. The session is built
 * as an attach would build it (session_attach(), its region on the
 * threadpool), with the asking client as its owner only until the region
 * is ready; its tensors are registered as the manifest lists them, and a
 * threadpool thread reads every data file, checks every page's CRC-32C
 * and puts resident pages in their slots and swappable ones in their swap
 * homes. Any failure frees the session: nothing is left behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <uv.h>

#include "checkpoint.h"
#include "control-conn.h"
#include "control.h"
#include "util/crc32c.h"
#include "util/fdio.h"
#include "daemon.h"
#include "dataplane.h"
#include "log.h"
#include "pager.h"
#include "persist.h"
#include "region.h"
#include "restore-links.h"
#include "safemem.h"
#include "session.h"
#include "status.h"
#include "util/json.h"

struct r_tensor {
	char *name;
	char *file;
	uint64_t bytes;
	bool swappable;
	uint32_t npages;
	uint32_t *crc;
	uint64_t first;         /* its first page in restore.pages */
	struct rs_refs refs;    /* a version 3 save: its pages left in linked swap files */
};

struct r_page {
	uint8_t *dst;           /* resident: its slot */
	int fd;                 /* swappable: its swap home (O_DIRECT) */
	uint64_t off;
	const char *path;
	uint32_t pcrc;          /* of the page_size bytes written there */
};

struct restore {
	struct session *s;
	struct client *c;
	char *path;
	int dir;
	uid_t owner;            /* the directory's: the data files must be its too */
	uint64_t t0;
	uint64_t step;
	uint64_t opened;        /* past step: an orphan saved inside that step's updates */
	bool opened_by_write;   /* and spw_optimizer_write opened it (session.h write_step) */
	uint32_t scale_bits, good_steps, page_size, lease_s;
	uint64_t region_bytes, swap_bytes;
	struct r_tensor *t;
	uint32_t nt;
	struct r_page *pages;
	struct rs_links links;  /* a version 3 save's (none before rs_links_parse) */
	uint64_t npages, bytes; /* bytes: loaded so far (atomic while loading) */
	uint64_t linked_bytes;  /* of those, left in the links, not read */
	uint64_t total;         /* the tensors' bytes */
	int err;
	char msg[1024];
	uv_work_t work;
	/* A restore at start from persist.state_dir (no client): its entry
	 * there goes once the session is back. */
	bool startup;
	int state_fd;
	char *state_name;
	/* startup: pages whose CRC failed (the record's file changed or
	 * rotted since the flush), by index into t; zeros were put there. */
	struct bad_page *bad;
	uint32_t nbad, bad_cap;
};

/* More bad pages than this and the session is not restored at all. */
#define RESTORE_BAD_MAX (1u << 20)

static struct restore *rs_free(struct restore *rs)
{
	if (!rs)
		return NULL;
	if (rs->c) {
		rs->c->waitp = NULL;
		rs->c->waiting = false;
	}
	for (uint32_t i = 0; rs->t && i < rs->nt; i++) {
		free(rs->t[i].name);
		free(rs->t[i].file);
		free(rs->t[i].crc);
		rs_refs_free(&rs->t[i].refs);
	}
	free(rs->t);
	free(rs->pages);
	free(rs->bad);
	if (rs->dir >= 0)
		close(rs->dir);
	if (rs->state_name)
		close(rs->state_fd);
	free(rs->state_name);
	free(rs->path);
	free(rs);
	return NULL;
}

/* Answers the error (to whoever asked, if still there), frees the
 * session being built and rs. */
static void rs_fail(struct restore *rs, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void rs_fail(struct restore *rs, int err, const char *fmt, ...)
{
	struct client *c = rs->c;
	struct session *s = rs->s;
	char msg[1200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (s) {
		struct daemon *d = s->d;

		s->restore = NULL;
		if (s->owner)
			control_client_set_session(s->owner, NULL);
		s->owner = NULL;
		session_free(s);
		daemon_update_status(d);
	}
	if (c) {
		rs->c = NULL;
		c->waitp = NULL;
		c->waiting = false;
		control_reply_error(c, err, "%s", msg);
	} else {
		log_warn("%s", msg);
	}
	rs_free(rs);
}

static int get_uint(const cJSON *o, const char *key, uint64_t max, uint64_t *v)
{
	return json_uint(cJSON_GetObjectItemCaseSensitive(o, key), max, v) < 0 ? -EINVAL : 0;
}

static const char *get_str(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A data file's name: one plain component. */
static bool file_name_ok(const char *f)
{
	return f && f[0] && f[0] != '.' && strlen(f) < 128 && !strchr(f, '/') && strcmp(f, CHECKPOINT_MANIFEST);
}

/* The manifest into rs: every field checked, sizes summed without
 * overflow. Returns 0 or -errno with a sentence in err. */
static int parse_manifest(struct restore *rs, const cJSON *m, uid_t uid, bool need_uid, char *err, size_t errlen)
{
	const cJSON *ts, *o;
	const char *fmt = get_str(m, "format");
	uint64_t v, ver, muid, bytes, pages = 0, most;
	int r;

	if (!fmt || strcmp(fmt, CHECKPOINT_FORMAT) || get_uint(m, "version", UINT32_MAX, &ver) < 0) {
		snprintf(err, errlen, "%s is not a spillway checkpoint manifest", CHECKPOINT_MANIFEST);
		return -EINVAL;
	}
	if (ver == CHECKPOINT_VERSION_LINKED && !rs->startup) {
		snprintf(err, errlen, "this is a stopping spillwayd's save from its persist.state_dir (format version %d: "
			 "it links the session's swap files), not a checkpoint: only spillwayd restores it, from its state "
			 "directory at start; take a checkpoint of the session once it is back", CHECKPOINT_VERSION_LINKED);
		return -EPROTONOSUPPORT;
	}
	if (ver != CHECKPOINT_VERSION && ver != CHECKPOINT_VERSION_OPEN && ver != CHECKPOINT_VERSION_LINKED) {
		snprintf(err, errlen, "the checkpoint is of format version %" PRIu64 "; this spillwayd reads versions %d "
			 "and %d", ver, CHECKPOINT_VERSION, CHECKPOINT_VERSION_OPEN);
		return -EPROTONOSUPPORT;
	}
	if (get_uint(m, "uid", UINT32_MAX, &muid) < 0 || (need_uid && muid != uid)) {
		snprintf(err, errlen, "the checkpoint was taken by another user; only its owner or root may restore it");
		return -EPERM;
	}
	if (get_uint(m, "committed_step", JSON_UINT_MAX, &rs->step) < 0 || rs->step == 0 ||
	    get_uint(m, "scale_bits", UINT32_MAX, &v) < 0 || (rs->scale_bits = (uint32_t)v, 0) ||
	    get_uint(m, "good_steps", UINT32_MAX, &v) < 0 || (rs->good_steps = (uint32_t)v, 0) ||
	    get_uint(m, "page_size", UINT32_MAX, &v) < 0 || !spw_proto_page_size_valid(v) ||
	    (rs->page_size = (uint32_t)v, 0) || get_uint(m, "region_bytes", 1ull << 50, &rs->region_bytes) < 0 ||
	    rs->region_bytes == 0 || rs->region_bytes % rs->page_size ||
	    get_uint(m, "swap_bytes", 1ull << 50, &rs->swap_bytes) < 0) {
		snprintf(err, errlen, "%s: committed_step, scale_bits, good_steps, page_size, region_bytes or swap_bytes "
			 "is missing or out of range", CHECKPOINT_MANIFEST);
		return -EINVAL;
	}
	/* Version 2: the save of an orphan whose client died inside a step's
	 * updates; it comes back with that step open, as it was. */
	rs->opened = rs->step;
	if ((ver == CHECKPOINT_VERSION_OPEN ||
	     (ver == CHECKPOINT_VERSION_LINKED && cJSON_GetObjectItemCaseSensitive(m, "opened_step"))) &&
	    (get_uint(m, "opened_step", JSON_UINT_MAX, &rs->opened) < 0 || rs->opened <= rs->step)) {
		snprintf(err, errlen, "%s: version %d names no opened_step past its committed_step", CHECKPOINT_MANIFEST,
			 CHECKPOINT_VERSION_OPEN);
		return -EINVAL;
	}
	{
		const cJSON *w = cJSON_GetObjectItemCaseSensitive(m, "opened_by_write");

		if (w && (!cJSON_IsBool(w) || rs->opened == rs->step)) {
			snprintf(err, errlen, "%s: opened_by_write is not true or false, or not in a save inside a step",
				 CHECKPOINT_MANIFEST);
			return -EINVAL;
		}
		rs->opened_by_write = w && cJSON_IsTrue(w);
	}
	if (ver == CHECKPOINT_VERSION_LINKED && rs_links_parse(&rs->links, m, err, errlen) < 0)
		return -EINVAL;
	ts = cJSON_GetObjectItemCaseSensitive(m, "tensors");
	if (!cJSON_IsArray(ts) || cJSON_GetArraySize(ts) == 0 || cJSON_GetArraySize(ts) > 1 << 20) {
		snprintf(err, errlen, "%s: \"tensors\" is not a list of tensors", CHECKPOINT_MANIFEST);
		return -EINVAL;
	}
	rs->t = calloc((size_t)cJSON_GetArraySize(ts), sizeof(*rs->t));
	if (!rs->t) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	cJSON_ArrayForEach(o, ts) {
		struct r_tensor *t = &rs->t[rs->nt];
		const char *name = get_str(o, "name"), *kind = get_str(o, "kind"), *file = get_str(o, "file");
		const cJSON *crcs = cJSON_GetObjectItemCaseSensitive(o, "crc32c"), *c;
		uint32_t k = 0;

		if (!name || !spw_proto_tensor_name_valid(name) || !kind ||
		    (strcmp(kind, "resident") && strcmp(kind, "swappable")) || !file_name_ok(file) ||
		    get_uint(o, "bytes", 1ull << 50, &bytes) < 0 || bytes == 0 || !cJSON_IsArray(crcs)) {
			snprintf(err, errlen, "%s: tensor %u has no valid name, kind, file, bytes or crc32c",
				 CHECKPOINT_MANIFEST, rs->nt);
			return -EINVAL;
		}
		/* No more pages than the region and the swap hold together:
		 * every count below fits, and the allocations stay small. */
		most = (rs->region_bytes + rs->swap_bytes) / rs->page_size;
		v = (bytes + rs->page_size - 1) / rs->page_size;
		if (v > most || pages + v > most) {
			snprintf(err, errlen, "%s: tensor %s needs %" PRIu64 " pages; the session's region and swap hold "
				 "%" PRIu64, CHECKPOINT_MANIFEST, name, pages + v, most);
			return -EINVAL;
		}
		t->bytes = bytes;
		rs->total += bytes;
		t->npages = (uint32_t)v;
		t->swappable = !strcmp(kind, "swappable");
		t->first = pages;
		pages += t->npages;
		if (!(t->name = strdup(name)) || !(t->file = strdup(file)) ||
		    !(t->crc = calloc(t->npages, sizeof(*t->crc)))) {
			rs->nt++;
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		rs->nt++;
		if ((uint64_t)cJSON_GetArraySize(crcs) != t->npages) {
			snprintf(err, errlen, "%s: tensor %s has %d CRCs for its %u pages", CHECKPOINT_MANIFEST, name,
				 cJSON_GetArraySize(crcs), t->npages);
			return -EINVAL;
		}
		cJSON_ArrayForEach(c, crcs) {
			if (json_uint(c, UINT32_MAX, &v) < 0) {
				snprintf(err, errlen, "%s: tensor %s: CRC %u is not a 32-bit number", CHECKPOINT_MANIFEST,
					 name, k);
				return -EINVAL;
			}
			t->crc[k++] = (uint32_t)v;
		}
		if ((r = rs_refs_parse(&rs->links, o, t->swappable, t->npages, rs->page_size, &t->refs, err, errlen)) < 0)
			return r;
	}
	rs->npages = pages;
	return 0;
}

/* Page k of t was left in a linked swap file (a version 3 save): the
 * session reads it from there, nothing is loaded. */
static bool kept_in_link(const struct r_tensor *t, uint32_t k)
{
	return t->refs.link && t->refs.link[k] != RS_NO_LINK;
}

static int wfail(struct restore *rs, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int wfail(struct restore *rs, int err, const char *fmt, ...)
{
	va_list ap;

	if (rs->err)
		return rs->err;
	va_start(ap, fmt);
	vsnprintf(rs->msg, sizeof(rs->msg), fmt, ap);
	va_end(ap);
	rs->err = err < 0 ? err : -err;
	return rs->err;
}

static int load_tensor(struct restore *rs, struct r_tensor *t, uint8_t *buf)
{
	int fd = openat(rs->dir, t->file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	int r = 0;

	if (fd < 0)
		return wfail(rs, errno, "tensor %s: %s/%s: %s", t->name, rs->path, t->file, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != rs->owner ||
	    (uint64_t)st.st_size != t->bytes) {
		close(fd);
		return wfail(rs, EINVAL, "tensor %s: %s/%s is not a file of %" PRIu64 " bytes owned by uid %u", t->name,
			     rs->path, t->file, t->bytes, (unsigned)rs->owner);
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	for (uint32_t i = 0; r == 0 && i < t->npages; i++) {
		struct r_page *pg = &rs->pages[t->first + i];
		uint64_t at = (uint64_t)i * rs->page_size;
		size_t len = t->bytes - at < rs->page_size ? (size_t)(t->bytes - at) : rs->page_size;
		uint32_t crc;

		if (kept_in_link(t, i)) {
			/* Left where it is, in a linked swap file, and not
			 * read now: the pager checks its CRC-32C (its own, of
			 * the whole page) at its first read, as it checks
			 * every read, and never hands out a page that fails.
			 * A save of any size is back at once. */
			if (!rs_links_holds(&rs->links, t->refs.link[i], t->refs.off[i], rs->page_size)) {
				close(fd);
				return wfail(rs, EINVAL, "tensor %s page %u: %s/" CHECKPOINT_LINK_FMT " is shorter than its "
					     "page at %" PRIu64 ": the save is damaged", t->name, i, rs->path,
					     t->refs.link[i], t->refs.off[i]);
			}
			__atomic_add_fetch(&rs->bytes, len, __ATOMIC_RELAXED);
			__atomic_add_fetch(&rs->linked_bytes, len, __ATOMIC_RELAXED);
			continue;
		}
		if ((r = fd_pread_all(fd, buf, len, at)) < 0) {
			close(fd);
			return wfail(rs, r, "reading %s/%s: %s", rs->path, t->file,
				     r == -EIO ? "short file" : strerror(-r));
		}
		crc = crc32c(0, buf, len);
		if (crc != t->crc[i] && rs->startup && rs->nbad < RESTORE_BAD_MAX) {
			/* After a crash: the session comes back marked
			 * damaged, this page never handed out (zeros kept). */
			if (rs->nbad == rs->bad_cap) {
				uint32_t cap = rs->bad_cap ? 2 * rs->bad_cap : 16;
				struct bad_page *b = realloc(rs->bad, cap * sizeof(*b));

				if (!b) {
					close(fd);
					return wfail(rs, ENOMEM, "out of memory for the list of damaged pages");
				}
				rs->bad = b;
				rs->bad_cap = cap;
			}
			rs->bad[rs->nbad++] = (struct bad_page){ .tensor = (uint32_t)(t - rs->t), .page = i };
			memset(buf, 0, len);
			crc = t->crc[i];
		}
		if (crc != t->crc[i]) {
			close(fd);
			return wfail(rs, EBADMSG, "tensor %s page %u (file %s/%s, bytes %" PRIu64 "..%" PRIu64 "): its "
				     "CRC-32C is 0x%08x, the manifest says 0x%08x: the checkpoint is damaged", t->name, i,
				     rs->path, t->file, at, at + len - 1, crc, t->crc[i]);
		}
		if (!t->swappable) {
			/* No client maps the region yet; safemem all the same. */
			if (safemem_copy(pg->dst, buf, len) < 0)
				r = wfail(rs, EFAULT, "tensor %s page %u: the region could not be written", t->name, i);
			__atomic_add_fetch(&rs->bytes, len, __ATOMIC_RELAXED); /* status reads it */
			continue;
		}
		memset(buf + len, 0, rs->page_size - len);
		pg->pcrc = crc32c(0, buf, rs->page_size);
		if ((r = fd_pwrite_all(pg->fd, buf, rs->page_size, pg->off)) < 0) {
			r = wfail(rs, r, "tensor %s page %u: writing swap file %s: %s", t->name, i, pg->path,
				  r == -EIO ? "short write" : strerror(-r));
			break;
		}
		__atomic_add_fetch(&rs->bytes, len, __ATOMIC_RELAXED);
	}
	close(fd);
	return r;
}

/* On a threadpool thread: touches rs, the data files, the region's
 * slots and the swap homes rs names; nothing else of the session. */
static void rs_work(uv_work_t *w)
{
	struct restore *rs = w->data;
	uint8_t *buf = aligned_alloc(4096, rs->page_size);

	if (!buf) {
		wfail(rs, ENOMEM, "out of memory for a page buffer");
		return;
	}
	for (uint32_t i = 0; i < rs->nt; i++)
		if (load_tensor(rs, &rs->t[i], buf) < 0)
			break;
	free(buf);
}

static void rs_done(uv_work_t *w, int status)
{
	struct restore *rs = w->data;
	struct session *s = rs->s;
	double secs = (double)(uv_hrtime() - rs->t0) / 1e9;
	struct client *c;
	cJSON *o;
	char a[32], b[32];

	if (status < 0 && !rs->err)
		wfail(rs, status, "the load could not run: %s", uv_strerror(status));
	if (rs->err) {
		rs_fail(rs, -rs->err, "restore %s from %s: %s; nothing was kept", s->name, rs->path, rs->msg);
		return;
	}
	for (uint32_t i = 0; i < rs->nt; i++) {
		const struct r_tensor *t = &rs->t[i];
		uint32_t id = session_tensor_find(s, t->name);

		for (uint32_t k = 0; t->swappable && k < t->npages; k++) {
			if (!kept_in_link(t, k))
				pager_page_loaded(s->pager, id, k, rs->pages[t->first + k].pcrc);
			else if (pager_page_backed(s->pager, id, k, (unsigned)rs->links.back[t->refs.link[k]],
						     t->refs.off[k], t->crc[k]) < 0)
				wfail(rs, EINVAL, "tensor %s page %u: its place in link %u was refused", t->name, k,
				      t->refs.link[k]);
		}
	}
	if (rs->err) {
		rs_fail(rs, -rs->err, "restore %s from %s: %s; nothing was kept", s->name, rs->path, rs->msg);
		return;
	}
	for (uint32_t i = 0; i < rs->nbad; i++) {
		const struct r_tensor *t = &rs->t[rs->bad[i].tensor];

		if (i < 8)
			log_warn("restore %s: tensor %s page %u (file %s/%s) failed its CRC-32C check: it is never handed "
				 "out", s->name, t->name, rs->bad[i].page, rs->path, t->file);
		rs->bad[i].tensor = session_tensor_find(s, t->name);
	}
	if (rs->nbad) {
		log_warn("restore %s: %u damaged page%s; the session is marked damaged and no optimizer adopts it: load "
			 "the last checkpoint (spillwayctl drop %s, then spillwayctl restore)", s->name, rs->nbad,
			 rs->nbad == 1 ? "" : "s", s->name);
		s->bad = rs->bad;
		s->nbad = rs->nbad;
		rs->bad = NULL;
	}
	s->committed_step = rs->step;
	s->opened_step = rs->opened;
	s->write_step = rs->opened_by_write ? rs->opened : 0;
	s->scale_bits = rs->scale_bits;
	s->good_steps = rs->good_steps;
	s->restore = NULL;
	rs->s = NULL;
	/* A restore from persist.state_dir keeps its entry: it is the
	 * session's last save, what a crash before the next one restores;
	 * it goes when the session ends (state_forget). */
	if (!persist_restored(s)) {
		rs->s = s;
		rs_fail(rs, ENOMEM, "restore %s: out of memory for its lease", s->name);
		return;
	}
	if (rs->linked_bytes)
		log_info("restore %s: %u tensors from %s in %.3f s: %s read, their CRC-32C checked; %s left in the "
			 "save's links, checked at each page's first read", s->name, rs->nt, rs->path, secs,
			 format_bytes(rs->bytes - rs->linked_bytes, a, sizeof(a)),
			 format_bytes(rs->linked_bytes, b, sizeof(b)));
	else
		log_info("restore %s: %u tensors, %s from %s in %.3f s (%.0f MB/s), every page's CRC-32C checked",
			 s->name, rs->nt, format_bytes(rs->bytes, a, sizeof(a)), rs->path, secs,
			 secs > 0 ? (double)rs->bytes / secs / 1e6 : 0.0);
	daemon_update_status(s->d);
	c = rs->c;
	if (c) {
		rs->c = NULL;
		c->waitp = NULL;
		c->waiting = false;
		o = control_reply(SPW_MSG_RESTORE);
		cJSON_AddStringToObject(o, "session", s->name);
		cJSON_AddStringToObject(o, "dir", rs->path);
		cJSON_AddNumberToObject(o, "committed_step", (double)rs->step);
		cJSON_AddNumberToObject(o, "tensors", rs->nt);
		cJSON_AddNumberToObject(o, "bytes", (double)rs->bytes);
		cJSON_AddNumberToObject(o, "bytes_total", (double)rs->total);
		cJSON_AddNumberToObject(o, "seconds", secs);
		cJSON_AddNumberToObject(o, "lease_s", s->lease_s);
		control_send_json(c, o, NULL, 0);
	}
	rs_free(rs);
}

void restore_attached(struct session *s, int r)
{
	struct restore *rs = s->restore;
	struct client *c = s->owner;
	char err[768];

	if (c) {
		c->attaching = false;
		control_client_set_session(c, NULL);
		rs->c = c;
		c->waiting = true;
		c->waitp = &rs->c;
		control_client_watch(c);
	}
	if ((!c && !rs->startup) || r < 0) {
		rs_fail(rs, r < 0 ? -r : ECANCELED, "restore %s: %s", s->name,
			r < 0 ? s->work_err : "the client that asked left");
		return;
	}
	/* Nobody holds it while it loads; the next attach takes it over. */
	s->owner = NULL;
	dataplane_stop(s);
	/* A stopping daemon's save: its linked swap files become the
	 * pager's backing files, the pages left there read from them. */
	if ((r = rs_links_attach(&rs->links, rs->dir, rs->path, rs->owner, s->pager, err, sizeof(err))) < 0) {
		rs_fail(rs, -r, "restore %s: %s", s->name, err);
		return;
	}
	for (uint32_t i = 0; i < rs->nt; i++) {
		struct r_tensor *t = &rs->t[i];
		uint32_t id, npages;

		r = session_register(s, t->name, t->bytes, t->swappable, false, &id, &npages, err, sizeof(err));
		if (r < 0) {
			rs_fail(rs, -r, "restore %s: %s", s->name, err);
			return;
		}
		if (npages != t->npages) {
			rs_fail(rs, EINVAL, "restore %s: tensor %s has %u pages here, %u in the manifest", s->name,
				t->name, npages, t->npages);
			return;
		}
		for (uint32_t k = 0; k < npages; k++) {
			struct r_page *pg = &rs->pages[t->first + k];
			struct pager_src src;

			if (t->swappable)
				r = pager_page_home(s->pager, id, k, &pg->fd, &pg->off, &pg->path);
			else if ((r = pager_page_source(s->pager, id, k, &src)) == 0)
				pg->dst = s->region->base + (size_t)src.slot * s->page_size;
			if (r < 0) {
				rs_fail(rs, EIO, "restore %s: tensor %s page %u has no place", s->name, t->name, k);
				return;
			}
		}
	}
	rs->work.data = rs;
	r = uv_queue_work(&s->d->loop, &rs->work, rs_work, rs_done);
	if (r < 0)
		rs_fail(rs, ENOMEM, "restore %s: cannot queue the load: %s", s->name, uv_strerror(r));
}

void restore_request(struct client *c, const cJSON *msg)
{
	const char *name = get_str(msg, "session"), *dir = get_str(msg, "dir");
	struct daemon *d = c->d;
	uint64_t lease_s = PERSIST_LEASE_DEFAULT_S, swap;
	struct restore *rs;
	struct stat st;
	char err[768];
	cJSON *m;
	bool any_swappable = false;
	int r;

	if (!name || !dir || !spw_proto_session_name_valid(name) || dir[0] != '/' || strlen(dir) >= PATH_MAX ||
	    (cJSON_GetObjectItemCaseSensitive(msg, "lease_s") &&
	     (get_uint(msg, "lease_s", PERSIST_LEASE_MAX_S, &lease_s) < 0 || lease_s == 0))) {
		control_reply_error(c, EINVAL, "restore: \"session\" (a session name), \"dir\" (an absolute path) are "
			    "required; \"lease_s\" is 1 to %u", PERSIST_LEASE_MAX_S);
		return;
	}
	if (d->stopping) {
		control_reply_error(c, ESHUTDOWN, "restore %s: spillwayd is shutting down", name);
		return;
	}
	/* limits.lease_max_s as at attach: a lease asked for must fit, the
	 * default is cut to it. */
	if (cJSON_GetObjectItemCaseSensitive(msg, "lease_s") && lease_s > d->cfg->limits_lease_max_s) {
		control_reply_error(c, EDQUOT, "restore %s: lease_s %llu exceeds limits.lease_max_s (%u s) in %s", name,
			    (unsigned long long)lease_s, d->cfg->limits_lease_max_s, d->cfg->origin);
		return;
	}
	if (lease_s > d->cfg->limits_lease_max_s)
		lease_s = d->cfg->limits_lease_max_s;
	if (c->session) {
		control_reply_error(c, EISCONN, "restore %s: this connection is attached to session %s; restore from "
			    "another connection", name, c->session->name);
		return;
	}
	if (session_find(d, name)) {
		control_reply_error(c, EEXIST, "restore %s: a session of that name exists; restore under another name "
			    "or drop it first", name);
		return;
	}
	rs = calloc(1, sizeof(*rs));
	if (!rs || !(rs->path = strdup(dir))) {
		free(rs);
		control_reply_error(c, ENOMEM, "restore %s: out of memory", name);
		return;
	}
	rs->t0 = uv_hrtime();
	rs->lease_s = (uint32_t)lease_s;
	rs->c = c; /* for the refusals below; the attach owns c after them */
	rs->dir = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rs->dir < 0 || fstat(rs->dir, &st) < 0) {
		r = errno;
		rs_fail(rs, r, "restore %s: %s: %s", name, dir, strerror(r));
		return;
	}
	/* Checked on the descriptor every later read goes through. A
	 * directory the daemon made (it runs unprivileged) is restored for
	 * the uid its manifest names. */
	if (c->uid != 0 && st.st_uid != c->uid && st.st_uid != geteuid()) {
		rs_fail(rs, EPERM, "restore %s: %s is owned by uid %u; only its owner or root may restore it", name, dir,
			(unsigned)st.st_uid);
		return;
	}
	rs->owner = st.st_uid;
	m = rs_manifest_read(rs->dir, err, sizeof(err));
	r = m ? parse_manifest(rs, m, c->uid, c->uid != 0 && st.st_uid != c->uid, err, sizeof(err)) : -EINVAL;
	cJSON_Delete(m);
	if (r == 0 && !(rs->pages = calloc(rs->npages ? rs->npages : 1, sizeof(*rs->pages)))) {
		snprintf(err, sizeof(err), "out of memory");
		r = -ENOMEM;
	}
	if (r < 0) {
		rs_fail(rs, -r, "restore %s from %s: %s", name, dir, err);
		return;
	}
	for (uint32_t i = 0; i < rs->nt; i++)
		any_swappable |= rs->t[i].swappable;
	if (any_swappable && !d->nswap_dirs) {
		rs_fail(rs, EOPNOTSUPP, "restore %s: the checkpoint holds swappable tensors and this spillwayd has no swap "
			"directories (swap.dirs in %s)", name, d->cfg->origin);
		return;
	}
	r = session_admit(d, name, rs->region_bytes, err, sizeof(err));
	if (r < 0) {
		rs_fail(rs, -r, "restore %s", err);
		return;
	}
	swap = d->nswap_dirs ? rs->swap_bytes : 0;
	if (control_uid_limits(c, name, rs->region_bytes, rs->page_size, true, &swap) < 0) {
		rs->c = NULL;
		rs_free(rs); /* it replied */
		return;
	}
	r = session_attach(d, c, name, rs->region_bytes, rs->page_size, swap, err, sizeof(err));
	if (r < 0) {
		rs_fail(rs, -r, "restore %s", err);
		return;
	}
	rs->c = NULL;
	rs->s = c->session;
	rs->s->uid = c->uid;
	rs->s->pid = c->pid;
	rs->s->persistent = true;
	rs->s->lease_s = rs->lease_s;
	rs->s->restore = rs;
	c->attaching = true;
	control_client_watch(c);
}

int restore_from_state(struct daemon *d, int state_fd, const char *state_path, const char *name)
{
	struct restore *rs = calloc(1, sizeof(*rs));
	const char *sname = NULL;
	struct session *s;
	uint64_t uid = 0, lease = PERSIST_LEASE_DEFAULT_S;
	struct stat st;
	char err[768];
	cJSON *m = NULL;
	int r = -ENOMEM;

	if (!rs)
		goto fail;
	rs->dir = -1;
	rs->startup = true;
	rs->t0 = uv_hrtime();
	if (asprintf(&rs->path, "%s/%s", state_path, name) < 0) {
		rs->path = NULL;
		snprintf(err, sizeof(err), "out of memory");
		goto fail;
	}
	rs->state_fd = fcntl(state_fd, F_DUPFD_CLOEXEC, 0);
	if (rs->state_fd < 0 || !(rs->state_name = strdup(name))) {
		if (rs->state_fd >= 0)
			close(rs->state_fd);
		snprintf(err, sizeof(err), "out of memory");
		goto fail;
	}
	rs->dir = openat(state_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (rs->dir < 0 || fstat(rs->dir, &st) < 0) {
		r = -errno;
		snprintf(err, sizeof(err), "%s", strerror(-r));
		goto fail;
	}
	rs->owner = st.st_uid;
	m = rs_manifest_read(rs->dir, err, sizeof(err));
	r = m ? parse_manifest(rs, m, 0, false, err, sizeof(err)) : -EINVAL;
	if (r == 0) {
		sname = get_str(m, "session");
		get_uint(m, "uid", UINT32_MAX, &uid);
		if (cJSON_GetObjectItemCaseSensitive(m, "lease_s") &&
		    (get_uint(m, "lease_s", PERSIST_LEASE_MAX_S, &lease) < 0 || lease == 0))
			lease = PERSIST_LEASE_DEFAULT_S;
		if (lease > d->cfg->limits_lease_max_s)
			lease = d->cfg->limits_lease_max_s;
		if (!sname || !spw_proto_session_name_valid(sname)) {
			snprintf(err, sizeof(err), "%s names no valid session", CHECKPOINT_MANIFEST);
			r = -EINVAL;
		}
	}
	if (r == 0 && !(rs->pages = calloc(rs->npages ? rs->npages : 1, sizeof(*rs->pages)))) {
		snprintf(err, sizeof(err), "out of memory");
		r = -ENOMEM;
	}
	if (r == 0 && session_find(d, sname)) {
		snprintf(err, sizeof(err), "a session named %s exists already", sname);
		r = -EEXIST;
	}
	for (uint32_t i = 0; r == 0 && i < rs->nt; i++) {
		if (rs->t[i].swappable && !d->nswap_dirs) {
			snprintf(err, sizeof(err), "it holds swappable tensors and swap.dirs is empty");
			r = -EOPNOTSUPP;
		}
	}
	if (r == 0)
		r = session_admit(d, sname, rs->region_bytes, err, sizeof(err));
	if (r == 0)
		r = session_attach(d, NULL, sname, rs->region_bytes, rs->page_size, d->nswap_dirs ? rs->swap_bytes : 0,
				   err, sizeof(err));
	if (r < 0)
		goto fail;
	s = session_find(d, sname);
	s->uid = (uid_t)uid;
	s->persistent = true;
	s->lease_s = (uint32_t)lease;
	s->restore = rs;
	rs->s = s;
	rs->lease_s = (uint32_t)lease;
	log_info("persist.state_dir: restoring session %s (uid %u) from %s", sname, (unsigned)uid, rs->path);
	cJSON_Delete(m);
	return 0;
fail:
	log_error("persist.state_dir: %s/%s not restored: %s; it stays there", state_path, name,
		  r == -ENOMEM && !rs ? "out of memory" : err);
	cJSON_Delete(m);
	rs_free(rs);
	return r;
}

void restore_progress(const struct session *s, uint64_t *done, uint64_t *total)
{
	const struct restore *rs = s->restore;

	*done = rs ? __atomic_load_n(&rs->bytes, __ATOMIC_RELAXED) : 0;
	*total = rs ? rs->total : 0;
}
