/* SPDX-License-Identifier: MIT */
/*
 * spillway-bench swap: the NVMe tier's streaming speed against fio on the
 * same directory, in the same run.
 *
 *   spillway-bench swap [--json] [--quick] [--dir PATH] [--gib N] [--pairs N]
 *                       [--window N] [--sessions N]
 *
 * It starts its own spillwayd (as bench ring does) with one swap directory
 * under --dir (default /var/tmp, the real disk), and for each page size
 * (1 MiB, 4 MiB) runs pairs of:
 *
 *   spillway  a swappable tensor 4x larger than the session's region:
 *             write pass (PIN, fill, UNPIN dirty; timed until the last
 *             dirty page is on disk), then read pass (PIN, check, UNPIN),
 *             with --window PINs in flight ahead of the client;
 *   fio       ioengine io_uring, direct=1, the same directory, block size =
 *             page size, iodepth = the daemon's queue depth, the same bytes:
 *             a sequential write, then a sequential read.
 *
 * With --sessions N, N processes each stream 1/N of the bytes, and every
 * session starts its write pass with the others and its read pass with
 * the others too (after all have flushed): a session reading while the
 * others still write would share the disk with writes, not with its
 * peers. Fairness is the smallest session's share over the largest's
 * while all of them stream steadily: the pages each moved between the
 * moment the last got past its first quarter and the moment the first got
 * to its last (window_fairness). Each session's rate over
 * its own pass (read_fairness_own_pass) also counts what happens once
 * the first has finished: a session whose last pages were still in its
 * region (a read pass finds a quarter of them there, each session a
 * different number) finishes early, and this disk holds every request in
 * flight for 0.3-1.4 s now and then after a write pass (seen in the
 * daemon's ring: all 32 reads complete together), so who was still
 * reading at that moment decided that figure, not the daemon's turns.
 *
 * The disk is shared and drifts, so the two alternate (spillway first in
 * odd pairs, fio first in even ones) and each ratio is the median of the
 * pairs' ratios. Speeds are bytes that reached or left the disk (the
 * daemon's own counters) per second of wall time; both sides use O_DIRECT,
 * so the page cache flatters neither.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>
#include <spillway/spillway.h>

#include "bench.h"
#include "util/command.h"
#include "util/json.h"
#include "util/localdaemon.h"

#define DEPTH 32u
#define UD_UNPIN (1ull << 63)

struct opts {
	bool json, quick;
	const char *dir;
	double gib;      /* tensor size per pass */
	int pairs;
	unsigned window; /* PINs in flight */
	int sessions;    /* sessions streaming at once, each its share of the bytes */
};

struct pass {
	double write_gbs, read_gbs;
	double bytes, cpu_s; /* for the daemon's CPU per GB */
	/* With several sessions: the smallest share over the largest while
	 * all stream; and the slowest rate over the fastest, each over its
	 * own pass. */
	double write_fairness, read_fairness;
	double write_fairness_own, read_fairness_own;
};

/* One session's pass, as a child reports it: its bytes and when (the
 * monotonic clock, shared by every process) each phase began and ended. */
struct share {
	int r;
	double write_bytes, read_bytes, cpu_s;
	uint64_t w0, w1, r0, r1;
};

/* ---- the daemon's status ---- */

/* The number at a dotted path, or -1 where there is none. */
static double jnum(const cJSON *o, const char *path)
{
	const cJSON *v = json_path(o, path);

	return cJSON_IsNumber(v) ? v->valuedouble : -1.0;
}

/* The session's tier counters: key under sessions[name].tier. */
static int tier_figures(const char *status, const char *session, double *cpu_s, double *read_bytes,
			double *write_bytes, double *unwritten)
{
	cJSON *doc = NULL;
	const cJSON *s;
	int r = bench_status_doc(status, &doc);

	if (r < 0)
		return r;
	*cpu_s = jnum(doc, "cpu_s");
	s = bench_status_session(doc, session);
	if (s) {
		*read_bytes = jnum(s, "tier.read_bytes");
		*write_bytes = jnum(s, "tier.write_bytes");
		*unwritten = jnum(s, "tier.pages.dirty") + jnum(s, "tier.pages.writing");
	}
	r = s ? 0 : -ENOENT;
	cJSON_Delete(doc);
	return r;
}

/* ---- spillway ---- */

/* A stamp per 4 KiB block: cheap to write and to check, and enough to
 * catch a page read back from the wrong place. */
static void stamp(uint8_t *p, uint32_t bytes, uint64_t page)
{
	for (uint32_t o = 0; o < bytes; o += 4096) {
		uint64_t v = page << 20 | o >> 12;
		memcpy(p + o, &v, sizeof(v));
	}
}

static bool stamped(const uint8_t *p, uint32_t bytes, uint64_t page)
{
	for (uint32_t o = 0; o < bytes; o += 4096) {
		uint64_t v = page << 20 | o >> 12;
		if (memcmp(p + o, &v, sizeof(v)))
			return false;
	}
	return true;
}

/* One streaming pass: window PINs ahead, each page filled (or checked) as
 * its PIN completes and unpinned at once; done_at[k] the time the k-th
 * page's PIN completed. */
static int stream(spw_client *c, uint32_t t, uint32_t npages, uint32_t page_size, unsigned window, bool writing,
		  uint64_t *done_at)
{
	struct spw_completion cq[64];
	uint32_t next = 0, done = 0, pins = 0, unpins = 0;
	int r, got;

	while (done < npages || unpins) {
		while (pins < window && next < npages) {
			r = spw_submit_pin(c, t, next, next);
			if (r == -EBUSY)
				break;
			if (r < 0)
				return r;
			next++;
			pins++;
		}
		got = spw_reap(c, cq, 64, -1);
		if (got < 0)
			return got;
		for (int i = 0; i < got; i++) {
			uint64_t ud = cq[i].user_data;
			uint8_t *p;

			if (cq[i].res < 0) {
				fprintf(stderr, "bench swap: %s of page %llu: %s\n", ud & UD_UNPIN ? "unpin" : "pin",
					(unsigned long long)(ud & ~UD_UNPIN), spw_strerror(cq[i].res));
				return cq[i].res;
			}
			if (ud & UD_UNPIN) {
				unpins--;
				continue;
			}
			pins--;
			done_at[done] = now_ns();
			p = spw_slot_ptr(c, (uint32_t)cq[i].res);
			if (writing) {
				stamp(p, page_size, ud);
			} else if (!stamped(p, page_size, ud)) {
				fprintf(stderr, "bench swap: page %llu read back wrong\n", (unsigned long long)ud);
				return -EBADMSG;
			}
			r = spw_submit_unpin(c, t, (uint32_t)ud, writing ? SPW_DIRTY : SPW_CLEAN, ud | UD_UNPIN);
			if (r < 0)
				return r;
			unpins++;
			done++;
		}
	}
	return 0;
}

/* Tells ready, then waits for go's byte: every session starts a pass
 * together. A session that failed tells ready without waiting, so that
 * the others are not held up by it. */
static int barrier(int ready, int go, bool wait)
{
	char b = 0;

	if (ready < 0)
		return 0;
	if (write(ready, &b, 1) != 1 || (wait && read(go, &b, 1) != 1))
		return -EPIPE;
	return 0;
}

/* One session's write then read pass over `total` bytes; with ready >= 0
 * each pass starts with the other sessions' (barrier()). */
static void one_session(const struct local_daemon *d, const struct opts *o, uint32_t page_size, const char *name,
			uint64_t total, int ready, int go, uint64_t *done_at, struct share *out)
{
	struct spw_attach_opts ao = { .size = sizeof(ao), .session = name, .page_size = page_size,
				      .region_bytes = total / 4, .swap_bytes = total, .flags = SPW_ATTACH_SWAP_BYTES };
	double cpu0, cpu1, rd0, rd1, wr0, wr1, left;
	spw_client *c = NULL;
	uint32_t t, npages;
	unsigned window = o->window;
	int r, barriers = 0;

	if ((r = spw_client_new(NULL, &c)) < 0 || (r = spw_client_connect(c, d->control)) < 0 ||
	    (r = spw_client_attach(c, &ao)) < 0 ||
	    (r = spw_tensor_register(c, "stream", total, SPW_TENSOR_SWAPPABLE, &t, &npages)) < 0) {
		fprintf(stderr, "bench swap: %s\n", c ? spw_client_last_error(c) : spw_strerror(r));
		goto out;
	}
	barriers++;
	if ((r = barrier(ready, go, true)) < 0)
		goto out;
	if ((r = tier_figures(d->status, name, &cpu0, &rd0, &wr0, &left)) < 0)
		goto out;
	/* More PINs in flight than half the slots would only fail with
	 * -ENOMEM (smaller regions with several sessions). */
	if (window > ao.region_bytes / page_size / 2)
		window = (unsigned)(ao.region_bytes / page_size / 2);
	out->w0 = now_ns();
	r = stream(c, t, npages, page_size, window, true, done_at);
	if (r < 0)
		goto out;
	/* The write pass ends when the last dirty page is on the disk, not
	 * when the client let go of it: a quarter of the data is still in
	 * the region at that point. */
	do {
		if ((r = tier_figures(d->status, name, &cpu1, &rd1, &wr1, &left)) < 0)
			goto out;
		if (left > 0)
			usleep(500);
	} while (left > 0);
	out->w1 = now_ns();
	/* The reads start together too: a session reading while the others
	 * still write would share the disk with writes, not with its peers. */
	barriers++;
	if ((r = barrier(ready, go, true)) < 0)
		goto out;
	out->r0 = now_ns();
	r = stream(c, t, npages, page_size, window, false, done_at + npages);
	if (r < 0)
		goto out;
	out->r1 = now_ns();
	if ((r = tier_figures(d->status, name, &cpu1, &rd1, &wr1, &left)) < 0)
		goto out;
	out->write_bytes = wr1 - wr0;
	out->read_bytes = rd1 - rd0;
	out->cpu_s = cpu1 - cpu0;
	r = spw_client_detach(c);
out:
	while (barriers++ < 2)
		barrier(ready, go, false);
	spw_client_free(c);
	out->r = r;
}

static double min_over_max(const double *x, int n)
{
	double lo = x[0], hi = x[0];

	for (int i = 1; i < n; i++) {
		lo = x[i] < lo ? x[i] : lo;
		hi = x[i] > hi ? x[i] : hi;
	}
	return hi > 0 ? lo / hi : 0;
}

/* The smallest session's share over the largest's while all n stream
 * steadily: the pages each completed (done_at[i * stride + k], npages
 * each) between the moment the last of them got past its first quarter
 * and the moment the first of them got to its last. The quarters are
 * the region's pages: at the start of a write pass they are free slots
 * (a PIN needs no disk), at the end of a read pass some are still there
 * from the write pass (each session a different number). */
static double window_fairness(const uint64_t *done_at, size_t stride, uint32_t npages, int n)
{
	uint32_t q = npages / 4;
	uint64_t a = 0, b = UINT64_MAX;
	double got[64] = { 0 };

	if (npages == 0)
		return 0;
	for (int i = 0; i < n; i++) {
		const uint64_t *t = done_at + (size_t)i * stride;

		a = t[q] > a ? t[q] : a;
		b = t[npages - 1 - q] < b ? t[npages - 1 - q] : b;
	}
	if (b <= a)
		return 0;
	for (int i = 0; i < n; i++)
		for (uint32_t k = 0; k < npages; k++)
			got[i] += done_at[(size_t)i * stride + k] >= a && done_at[(size_t)i * stride + k] <= b;
	return min_over_max(got, n);
}

/* o->sessions sessions (one process each) stream their share of the
 * bytes at once; rates are everything moved over the time from the first
 * start to the last end. */
static int spillway_pass(const struct local_daemon *d, const struct opts *o, uint32_t page_size, int round,
			 struct pass *out)
{
	int n = o->sessions, ready[2], go[2], r = 0;
	uint64_t total = (uint64_t)(o->gib * (1ull << 30)) / page_size / (uint64_t)n * page_size;
	uint32_t npages = (uint32_t)(total / page_size);
	size_t stride = 2 * (size_t)npages, times_bytes = (size_t)n * stride * sizeof(uint64_t);
	/* Every session's page times, where the parent reads them after. */
	uint64_t *done_at = mmap(NULL, times_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct share sh[64];
	double wr[64], rr[64], wb = 0, rb = 0, cpu = 0;
	uint64_t w0 = UINT64_MAX, w1 = 0, r0 = UINT64_MAX, r1 = 0;
	pid_t pid[64];
	int res[64][2];

	if (done_at == MAP_FAILED)
		return -ENOMEM;
	if (n == 1) {
		char name[64];

		snprintf(name, sizeof(name), "bench/swap-%u-%d", page_size >> 20, round);
		memset(&sh[0], 0, sizeof(sh[0]));
		one_session(d, o, page_size, name, total, -1, -1, done_at, &sh[0]);
		if (sh[0].r < 0)
			r = sh[0].r;
	} else {
		if (pipe(ready) < 0 || pipe(go) < 0) {
			munmap(done_at, times_bytes);
			return -errno;
		}
		fflush(stdout);
		for (int i = 0; i < n; i++) {
			if (pipe(res[i]) < 0) {
				munmap(done_at, times_bytes);
				return -errno;
			}
			pid[i] = fork();
			if (pid[i] == 0) {
				char name[64];
				struct share me = { 0 };

				snprintf(name, sizeof(name), "bench/swap-%u-%d-%d", page_size >> 20, round, i);
				one_session(d, o, page_size, name, total, ready[1], go[0], done_at + (size_t)i * stride, &me);
				_exit(write(res[i][1], &me, sizeof(me)) == sizeof(me) ? 0 : 1);
			}
			close(res[i][1]);
		}
		/* Two starts: the write passes, then the read passes. */
		for (int pass = 0; pass < 2; pass++) {
			for (int i = 0; i < n; i++) {
				char b;

				if (read(ready[0], &b, 1) != 1)
					r = -EPIPE;
			}
			for (int i = 0; i < n; i++)
				if (write(go[1], "g", 1) != 1)
					r = -EPIPE;
		}
		for (int i = 0; i < n; i++) {
			if (read(res[i][0], &sh[i], sizeof(sh[i])) != sizeof(sh[i]))
				sh[i].r = -EPIPE;
			close(res[i][0]);
			waitpid(pid[i], NULL, 0);
			if (sh[i].r < 0)
				r = sh[i].r;
		}
		close(ready[0]), close(ready[1]), close(go[0]), close(go[1]);
	}
	if (r < 0) {
		munmap(done_at, times_bytes);
		return r;
	}
	for (int i = 0; i < n; i++) {
		w0 = sh[i].w0 < w0 ? sh[i].w0 : w0;
		w1 = sh[i].w1 > w1 ? sh[i].w1 : w1;
		r0 = sh[i].r0 < r0 ? sh[i].r0 : r0;
		r1 = sh[i].r1 > r1 ? sh[i].r1 : r1;
		wb += sh[i].write_bytes;
		rb += sh[i].read_bytes;
		cpu += sh[i].cpu_s;
		wr[i] = sh[i].write_bytes / (double)(sh[i].w1 - sh[i].w0);
		rr[i] = sh[i].read_bytes / (double)(sh[i].r1 - sh[i].r0);
	}
	out->write_fairness = window_fairness(done_at, stride, npages, n);
	out->read_fairness = window_fairness(done_at + npages, stride, npages, n);
	munmap(done_at, times_bytes);
	out->write_gbs = wb / (double)(w1 - w0);
	out->read_gbs = rb / (double)(r1 - r0);
	out->bytes = wb + rb;
	/* Each session's figure includes the daemon's CPU for everyone. */
	out->cpu_s = cpu / n;
	out->write_fairness_own = min_over_max(wr, n);
	out->read_fairness_own = min_over_max(rr, n);
	if (!o->json)
		printf("  spillway %u MiB pages, %d session%s: write %.2f GB/s (%.0f MiB), read %.2f GB/s (%.0f MiB)%s\n",
		       page_size >> 20, n, n == 1 ? "" : "s", out->write_gbs, wb / (1 << 20), out->read_gbs,
		       rb / (1 << 20), n == 1 ? "" : "; slowest/fastest session");
	return 0;
}

/* ---- fio ---- */

/* fio over `jobs` jobs, each `bytes` in a file of its own in dir (fio
 * names them): all their bytes over the longest job's time (as the
 * sessions' aggregate is counted), and the slowest job's rate over the
 * fastest's (the drive's own fairness, to hold the sessions' against). */
static int fio_run(const char *dir, const char *rw, uint32_t bs, uint64_t bytes, int jobs, double *gbs,
		   double *fairness)
{
	char cmd[PATH_MAX + 512], buf[1 << 18];
	bool w = !strcmp(rw, "write");
	double bw[64] = { 0 }, io = 0, ms = 0;
	cJSON *doc, *all;
	int st, n;

	snprintf(cmd, sizeof(cmd),
		 "fio --name=spw --ioengine=io_uring --direct=1 --rw=%s --bs=%u --iodepth=%u --size=%llu "
		 "--directory=%s --numjobs=%d --output-format=json 2>/dev/null",
		 rw, bs, DEPTH, (unsigned long long)bytes, dir, jobs);
	st = command_output(cmd, buf, sizeof(buf));
	if (st < 0)
		return st;
	if (st != 0) {
		fprintf(stderr, "bench swap: fio failed (%s); is fio installed?\n", cmd);
		return -EIO;
	}
	/* fio may print notes before the JSON. */
	doc = cJSON_Parse(strchr(buf, '{') ? strchr(buf, '{') : buf);
	all = doc ? cJSON_GetObjectItemCaseSensitive(doc, "jobs") : NULL;
	n = cJSON_GetArraySize(all);
	if (n != jobs || n > 64) {
		cJSON_Delete(doc);
		return -EPROTO;
	}
	for (int i = 0; i < n; i++) {
		const cJSON *job = cJSON_GetArrayItem(all, i);
		double t = jnum(job, w ? "write.runtime" : "read.runtime");

		bw[i] = jnum(job, w ? "write.bw_bytes" : "read.bw_bytes");
		io += jnum(job, w ? "write.io_bytes" : "read.io_bytes");
		ms = t > ms ? t : ms;
	}
	*gbs = ms > 0 ? io / (ms / 1e3) / 1e9 : 0;
	*fairness = min_over_max(bw, n);
	cJSON_Delete(doc);
	return 0;
}

static int fio_pass(const char *dir, const struct opts *o, uint32_t page_size, struct pass *out)
{
	uint64_t each = (uint64_t)(o->gib * (1ull << 30)) / page_size / (uint64_t)o->sessions * page_size;
	char file[PATH_MAX];
	int r;

	r = fio_run(dir, "write", page_size, each, o->sessions, &out->write_gbs, &out->write_fairness);
	if (r == 0)
		r = fio_run(dir, "read", page_size, each, o->sessions, &out->read_gbs, &out->read_fairness);
	for (int i = 0; i < o->sessions; i++) {
		snprintf(file, sizeof(file), "%s/spw.%d.0", dir, i);
		unlink(file);
	}
	if (r == 0 && !o->json)
		printf("  fio      %u MiB blocks: write %.2f GB/s, read %.2f GB/s\n", page_size >> 20, out->write_gbs,
		       out->read_gbs);
	return r;
}

/* ---- driver ---- */


static const char usage[] =
	"usage: spillway-bench swap [--json] [--quick] [--dir PATH] [--gib N] [--pairs N] [--window N] [--sessions N]\n"
	"  --dir PATH   where the swap files and fio's file go (default /var/tmp)\n"
	"  --gib N      tensor size per pass in GiB, region a quarter of it (default 2, times N\n"
	"               with --sessions N up to 8; --quick 0.5)\n"
	"  --pairs N    spillway/fio pairs per page size (default 3; --quick 1)\n"
	"  --window N   PINs the client keeps in flight (default 32)\n"
	"  --sessions N sessions streaming at once, each 1/N of the bytes, against fio with\n"
	"               N jobs (default 1; 1..64): aggregate rates, the smallest session's share\n"
	"               over the largest's while all stream (fairness) and the slowest session's\n"
	"               rate over the fastest's, each over its own pass (fairness_own_pass)\n";

int bench_swap(int argc, char **argv)
{
	static const uint32_t page_sizes[] = { 1u << 20, 4u << 20 };
	struct opts o = { .dir = "/var/tmp", .gib = 0, .pairs = 0, .window = 32, .sessions = 1 };
	struct local_daemon d = { .pid = -1 };
	struct bench_progress pg = { 0 };
	char dir[PATH_MAX], cfg[PATH_MAX + 1024];
	int rc = 1, r;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			o.json = true;
		else if (!strcmp(argv[i], "--quick"))
			o.quick = true;
		else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
			o.dir = argv[++i];
		else if (!strcmp(argv[i], "--gib") && i + 1 < argc)
			o.gib = atof(argv[++i]);
		else if (!strcmp(argv[i], "--pairs") && i + 1 < argc)
			o.pairs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--window") && i + 1 < argc)
			o.window = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--sessions") && i + 1 < argc)
			o.sessions = atoi(argv[++i]);
		else
			return bench_usage(usage, argv[i]);
	}
	/* Several sessions: 2 GiB each, so that the time all of them stream
	 * holds enough pages to tell their shares apart from the kernel's
	 * bursts (it completes a file's merged writes ten or so at a time). */
	if (o.gib <= 0)
		o.gib = o.quick ? 0.5 : 2.0 * (o.sessions > 1 ? (o.sessions < 8 ? o.sessions : 8) : 1);
	if (o.pairs <= 0)
		o.pairs = o.quick ? 1 : 3;
	if (o.window == 0 || o.window > 256 || o.pairs > 64 || o.gib < 0.0625 || o.gib > 64 || o.sessions < 1 ||
	    o.sessions > 64) {
		fprintf(stderr, "bench swap: --window 1..256, --pairs 1..64, --gib 0.0625..64, --sessions 1..64\n");
		return 2;
	}
	snprintf(dir, sizeof(dir), "%s/spw-bench-swap-XXXXXX", o.dir);
	if (!mkdtemp(dir)) {
		fprintf(stderr, "bench swap: cannot create a directory in %s: %s\n", o.dir, strerror(errno));
		return 1;
	}
	/* The region is a quarter of the tensor; the pool must hold it. */
	snprintf(cfg, sizeof(cfg),
		 "{\"socket\": {\"dir\": \"@DIR@\", \"mode\": \"0600\"},"
		 " \"pool\": {\"max_bytes\": \"%lluMiB\", \"session_max_bytes\": \"%lluMiB\", \"require_locked\": false},"
		 " \"swap\": {\"dirs\": [{\"path\": \"%s\", \"max_bytes\": \"1TiB\"}], \"queue_depth\": %u,"
		 "   \"session_bytes\": \"%lluMiB\"},"
		 " \"log\": {\"level\": \"warn\"}}",
		 (unsigned long long)(o.gib * 256 + 64), (unsigned long long)(o.gib * 256 + 64), dir, DEPTH,
		 (unsigned long long)(o.gib * 1024 + 64));
	local_daemon_locate();
	r = local_daemon_start(&d, cfg);
	if (r < 0) {
		fprintf(stderr, "bench swap: could not start spillwayd (%s): %s; set SPILLWAYD\n",
			getenv("SPILLWAYD") ? getenv("SPILLWAYD") : "spillwayd from PATH", spw_strerror(r));
		rmdir(dir);
		return 1;
	}
	if (!o.json)
		printf("swap: %.2f GiB per pass, region %.2f GiB, %d pairs, window %u, queue depth %u, dir %s\n", o.gib,
		       o.gib / 4, o.pairs, o.window, DEPTH, dir);
	bench_progress_init(&pg, "swap", (unsigned)(o.pairs * (int)(sizeof(page_sizes) / sizeof(page_sizes[0]))));
	for (size_t k = 0; k < sizeof(page_sizes) / sizeof(page_sizes[0]); k++) {
		double sw[64], sr[64], fw[64], fr[64], wr[64], rr[64], wf[64], rf[64], wfo[64], rfo[64], fwf[64], frf[64];
		double cpu = 0, gb = 0;

		for (int i = 0; i < o.pairs; i++) {
			struct pass s = { 0 }, f = { 0 };

			/* Alternate who goes first, so a drifting disk weighs on both. */
			if (i % 2 == 0)
				r = spillway_pass(&d, &o, page_sizes[k], i, &s) < 0 ? -1 : fio_pass(dir, &o, page_sizes[k], &f);
			else
				r = fio_pass(dir, &o, page_sizes[k], &f) < 0 ? -1 : spillway_pass(&d, &o, page_sizes[k], i, &s);
			if (r < 0)
				goto out;
			sw[i] = s.write_gbs;
			sr[i] = s.read_gbs;
			fw[i] = f.write_gbs;
			fr[i] = f.read_gbs;
			wr[i] = f.write_gbs > 0 ? s.write_gbs / f.write_gbs : 0;
			rr[i] = f.read_gbs > 0 ? s.read_gbs / f.read_gbs : 0;
			wf[i] = s.write_fairness;
			rf[i] = s.read_fairness;
			wfo[i] = s.write_fairness_own;
			rfo[i] = s.read_fairness_own;
			fwf[i] = f.write_fairness;
			frf[i] = f.read_fairness;
			cpu += s.cpu_s;
			gb += s.bytes / 1e9;
			bench_progress_step(&pg, "spillway/fio pair");
		}
		bench_progress_end(&pg);
		if (o.json)
			printf("{\"bench\":\"swap\",\"page_bytes\":%u,\"gbytes_per_pass\":%.3f,\"sessions\":%d,\"pairs\":%d,"
			       "\"window\":%u,\"queue_depth\":%u,\"write_fairness\":%.3f,\"read_fairness\":%.3f,"
			       "\"write_fairness_own_pass\":%.3f,\"read_fairness_own_pass\":%.3f,"
			       "\"write_gbytes_per_s\":%.3f,\"read_gbytes_per_s\":%.3f,"
			       "\"fio_write_gbytes_per_s\":%.3f,\"fio_read_gbytes_per_s\":%.3f,\"write_ratio\":%.3f,"
			       "\"read_ratio\":%.3f,\"fio_write_fairness\":%.3f,\"fio_read_fairness\":%.3f,"
			       "\"daemon_cpu_s_per_gbyte\":%.4f}\n",
			       page_sizes[k], o.gib * 1.073741824, o.sessions, o.pairs, o.window, DEPTH,
			       o.sessions > 1 ? bench_median(wf, (size_t)o.pairs) : 1.0,
			       o.sessions > 1 ? bench_median(rf, (size_t)o.pairs) : 1.0,
			       o.sessions > 1 ? bench_median(wfo, (size_t)o.pairs) : 1.0,
			       o.sessions > 1 ? bench_median(rfo, (size_t)o.pairs) : 1.0, bench_median(sw, (size_t)o.pairs),
			       bench_median(sr, (size_t)o.pairs), bench_median(fw, (size_t)o.pairs),
			       bench_median(fr, (size_t)o.pairs), bench_median(wr, (size_t)o.pairs),
			       bench_median(rr, (size_t)o.pairs), bench_median(fwf, (size_t)o.pairs),
			       bench_median(frf, (size_t)o.pairs), gb > 0 ? cpu / gb : 0);
		else
			printf("%u MiB pages: spillway/fio write %.2f, read %.2f (medians of %d pairs); daemon %.3f CPU s "
			       "per GB\n",
			       page_sizes[k] >> 20, bench_median(wr, (size_t)o.pairs), bench_median(rr, (size_t)o.pairs),
			       o.pairs, gb > 0 ? cpu / gb : 0);
		fflush(stdout);
	}
	rc = 0;
out:
	bench_progress_end(&pg);
	if (local_daemon_stop(&d) != 0) {
		fprintf(stderr, "bench swap: spillwayd did not stop cleanly\n");
		rc = 1;
	}
	if (rmdir(dir) < 0)
		fprintf(stderr, "bench swap: %s not empty after the run: %s\n", dir, strerror(errno));
	return rc;
}
