/* SPDX-License-Identifier: MIT */
/*
 * fuzz-pager: the pager (daemon/pager*.c) under any sequence of the ring's
 * operations, on a small region of its own, with the daemon's io_uring on
 * real swap files in a temporary directory under /var/tmp (O_DIRECT needs
 * a real file system).
 *
 *   byte 0   bits 0-1: slots (2, 3, 4, 8); bits 2-3: read-ahead window
 *            (0, 1, 2, 4); bits 4-6: injected faults (none; read eio on
 *            the 2nd, flip on every one, short transfers, eio on every
 *            one; one write eio or enospc, retried); bit 7: max_pending 2
 *            (else 16)
 *   byte 1   swap pages (0-39; 0: resident tensors only); bit 7 of
 *            byte 1 also picks a ring of depth 4 (else 8)
 *   then     3 bytes per operation: op, a, b
 *
 * Operations: register (resident or swappable, 1-12 pages), unregister,
 * PIN, PIN for overwrite, UNPIN dirty/clean, UNPIN of a page made a copy
 * of another (SPW_UNPIN_COPY_OF: the two may trade disk homes), PREFETCH, STEP, FLUSH, reap
 * (the ring drained), write a pinned page, and PIN/UNPIN/PREFETCH with
 * ids that are wrong. Completions come only when the ring is reaped (the
 * reap op and the end), so what an input does is decided by the input,
 * up to the order in which the kernel finishes requests in flight
 * together.
 *
 * A model of the client side (pins held and pending per page, what each
 * page holds) checks every answer:
 *
 *   - after each operation pager_check() (indexes against a full scan,
 *     every slot accounted once, claims and swap pages add up) and the
 *     stats the daemon reports (pending, claimed slots, pinned pages)
 *     equal the model's;
 *   - -ENOMEM exactly when the page holds no pin and every slot is
 *     claimed; -EBUSY only at max_pending; -EINVAL/-ENOENT only for bad
 *     ids; an UNPIN without a pin is -EINVAL, with one it is 0;
 *   - a delivered PIN's slot holds the page's data (zeros when never
 *     written), through evictions and read-ahead; read faults may fail a
 *     PIN (-EIO, -EBADMSG) but never hand out wrong data; a failed write
 *     is retried and loses nothing (a FLUSH still succeeds); without
 *     faults no completion fails;
 *   - each completion comes once, for a pending operation; with the ring
 *     idle nothing is pending (an accepted PIN always completes);
 *   - at the end: after unpinning, FLUSH and unregistering everything the
 *     pager holds no page, slot, claim or swap page, and freeing it leaves
 *     no swap file behind; LeakSanitizer sees the rest.
 */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "fuzz.h"
#include "pager.h"
#include "uring.h"

#define PAGE 4096u
#define MAX_SLOTS 8u
#define MAX_T 6u
#define MAX_PAGES 12u
#define MAX_UD 4096u

struct mpage {
	uint32_t held, pending, pending_ow; /* delivered pins; pending ones (of which for overwrite) */
	uint32_t slot;
	uint64_t version;                   /* what the page holds: 0 zeros */
	bool unknown;                       /* written, then unpinned clean: undefined */
	bool modified, overwritten;         /* since the page was last unpinned by every holder */
};

struct mtensor {
	bool used, dying, swappable;
	uint32_t id, npages;
	struct mpage pages[MAX_PAGES];
};

struct pend {
	bool live, flush, overwrite;
	unsigned t;
	uint32_t page;
};

static struct {
	char dir[64];
	uint8_t *region;
	struct uring *u;
	struct pager *p;
	uint32_t nslots, max_pending;
	bool faults;
	uint64_t next_ud, next_version;
	uint32_t npending;
	struct mtensor t[MAX_T];
	struct pend pend[MAX_UD];
} m;

static void fill(uint8_t *dst, uint64_t version)
{
	uint64_t x = version * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < PAGE; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(dst + i, &x, 8);
	}
}

static bool holds(const uint8_t *src, uint64_t version)
{
	static uint8_t want[PAGE];

	if (version == 0) {
		for (size_t i = 0; i < PAGE; i++)
			if (src[i])
				return false;
		return true;
	}
	fill(want, version);
	return memcmp(src, want, PAGE) == 0;
}

static uint8_t *slot_at(uint32_t slot)
{
	FUZZ_CHECK(slot < m.nslots);
	return m.region + (size_t)slot * PAGE;
}

/* A PIN's slot reached the client: the slot holds the page's data, unless
 * a PIN for overwrite (no read) is part of the same wait. */
static void delivered(unsigned t, uint32_t page, uint32_t slot, bool overwrite)
{
	struct mpage *pg = &m.t[t].pages[page];

	if (pg->held)
		FUZZ_CHECK(pg->slot == slot); /* a pinned page never moves */
	pg->held++;
	pg->slot = slot;
	if (overwrite) {
		/* The client rewrites the whole page, as the contract says. */
		pg->version = ++m.next_version;
		fill(slot_at(slot), pg->version);
		pg->unknown = false;
		pg->overwritten = true;
	} else if (!pg->unknown && !pg->pending_ow && !pg->overwritten) {
		FUZZ_CHECK(holds(slot_at(slot), pg->version));
	}
}

static void on_complete(void *ctx, uint64_t ud, int32_t res)
{
	struct pend *e;

	(void)ctx;
	FUZZ_CHECK(ud < MAX_UD);
	e = &m.pend[ud];
	FUZZ_CHECK(e->live); /* once, and only for what is pending */
	e->live = false;
	m.npending--;
	if (e->flush) {
		FUZZ_CHECK(res == 0); /* a single failed write is retried */
		return;
	}
	{
		struct mpage *pg = &m.t[e->t].pages[e->page];

		FUZZ_CHECK(pg->pending > 0);
		pg->pending--;
		if (e->overwrite)
			pg->pending_ow--;
		if (res >= 0) {
			delivered(e->t, e->page, (uint32_t)res, e->overwrite);
		} else {
			/* Only a read can fail, and only when made to. A PIN
			 * for overwrite reads nothing itself, but one that
			 * joins a read in flight (a read-ahead, another PIN)
			 * shares its fate. */
			FUZZ_CHECK(m.faults && (res == -EIO || res == -EBADMSG));
		}
	}
}

static void on_removed(void *ctx, uint32_t id)
{
	(void)ctx;
	for (unsigned i = 0; i < MAX_T; i++) {
		if (m.t[i].used && m.t[i].id == id) {
			FUZZ_CHECK(m.t[i].dying);
			m.t[i].used = false;
			return;
		}
	}
	FUZZ_CHECK(!"tensor_removed for a tensor that was not dying");
}

static uint64_t ud_new(void)
{
	uint64_t ud = m.next_ud++ % MAX_UD;

	FUZZ_CHECK(!m.pend[ud].live);
	return ud;
}

static uint32_t claims(void)
{
	uint32_t n = 0;

	for (unsigned i = 0; i < MAX_T; i++)
		for (uint32_t k = 0; m.t[i].used && k < m.t[i].npages; k++)
			n += !m.t[i].swappable || m.t[i].pages[k].held + m.t[i].pages[k].pending > 0;
	return n;
}

static void check(void)
{
	struct pager_stats st;
	uint64_t pinned = 0;

	FUZZ_CHECK(pager_check(m.p) == 0);
	pager_stats(m.p, &st);
	for (unsigned i = 0; i < MAX_T; i++)
		for (uint32_t k = 0; m.t[i].used && k < m.t[i].npages; k++)
			pinned += m.t[i].pages[k].held > 0;
	FUZZ_CHECK(st.pending == m.npending);
	FUZZ_CHECK(st.slots_claimed == claims());
	FUZZ_CHECK(st.pages_pinned == pinned);
	FUZZ_CHECK(st.slots_claimed <= m.nslots);
}

/* Waits for the ring to go idle. Then nothing may be pending: an accepted
 * PIN always completes, and a FLUSH too. */
static void reap(void)
{
	for (int i = 0; i < 1000 && uring_busy(m.u); i++) {
		int r = uring_wait(m.u, 100);

		/* libFuzzer's -timeout alarm interrupts the poll now and then. */
		FUZZ_CHECK(r >= 0 || r == -EINTR);
		pager_room_kick();
	}
	FUZZ_CHECK(uring_busy(m.u) == 0);
	FUZZ_CHECK(m.npending == 0);
}

/* The model's tensor for id a (any byte), or NULL. */
static struct mtensor *pick(uint8_t a, unsigned *idx)
{
	unsigned i = a % MAX_T;

	*idx = i;
	return m.t[i].used ? &m.t[i] : NULL;
}

static void do_register(uint8_t a, uint8_t b)
{
	uint32_t npages = a % MAX_PAGES + 1, id = 0, n = 0;
	bool swappable = !(b & 1);
	uint64_t bytes = (uint64_t)npages * PAGE - (b >> 1) % PAGE;
	char name[16], err[512];
	unsigned i;
	int r;

	for (i = 0; i < MAX_T && m.t[i].used; i++)
		;
	if (i == MAX_T)
		return;
	snprintf(name, sizeof(name), "t%u", i);
	r = pager_tensor_add(m.p, name, bytes, swappable, &id, &n, err, sizeof(err));
	if (r < 0) {
		FUZZ_CHECK(swappable ? r == -ENOSPC : r == -ENOMEM || r == -EBUSY);
		FUZZ_CHECK(err[0] != '\0');
		if (!swappable && r == -ENOMEM)
			FUZZ_CHECK(claims() + npages > m.nslots);
		return;
	}
	FUZZ_CHECK(r == 0 && n == npages);
	for (unsigned k = 0; k < MAX_T; k++)
		FUZZ_CHECK(!m.t[k].used || m.t[k].id != id); /* ids are unique among live tensors */
	memset(&m.t[i], 0, sizeof(m.t[i]));
	m.t[i] = (struct mtensor){ .used = true, .swappable = swappable, .id = id, .npages = npages };
	if (!swappable) {
		FUZZ_CHECK(claims() <= m.nslots);
		/* A resident page starts as zeros in its slot. */
		for (uint32_t k = 0; k < npages; k++) {
			int s = pager_pin(m.p, id, k, ud_new());

			FUZZ_CHECK(s >= 0 && s < (int)m.nslots && holds(slot_at((uint32_t)s), 0));
			FUZZ_CHECK(pager_unpin(m.p, id, k, false) == 0);
		}
	}
}

static void do_unregister(uint8_t a)
{
	unsigned i;
	struct mtensor *t = pick(a, &i);
	bool pinned = false;
	int r;

	if (!t)
		return;
	for (uint32_t k = 0; k < t->npages; k++)
		pinned |= t->pages[k].held + t->pages[k].pending > 0;
	r = pager_tensor_remove(m.p, t->id);
	if (t->dying) {
		FUZZ_CHECK(r == -ENOENT);
		return;
	}
	if (pinned) {
		FUZZ_CHECK(r == -EBUSY);
		return;
	}
	FUZZ_CHECK(r == 0 || r == PAGER_PENDING);
	if (r == 0)
		t->used = false;
	else
		t->dying = true;
}

static void do_pin(uint8_t a, uint8_t b, bool overwrite)
{
	unsigned i;
	struct mtensor *t = pick(a, &i);
	struct mpage *pg;
	uint32_t page;
	uint64_t ud;
	bool enomem;
	int r;

	if (!t)
		return;
	page = b % (t->npages + 1); /* one past the end now and then */
	ud = ud_new();
	r = overwrite ? pager_pin_overwrite(m.p, t->id, page, ud) : pager_pin(m.p, t->id, page, ud);
	if (t->dying || page >= t->npages) {
		FUZZ_CHECK(r == -EINVAL || r == -ENOENT);
		return;
	}
	pg = &t->pages[page];
	enomem = t->swappable && pg->held + pg->pending == 0 && claims() >= m.nslots;
	if (r == -ENOMEM) {
		FUZZ_CHECK(enomem);
		return;
	}
	FUZZ_CHECK(!enomem);
	if (r == -EBUSY) {
		FUZZ_CHECK(m.npending >= m.max_pending);
		return;
	}
	if (r == PAGER_PENDING) {
		FUZZ_CHECK(t->swappable);
		m.pend[ud] = (struct pend){ .live = true, .overwrite = overwrite, .t = i, .page = page };
		m.npending++;
		pg->pending++;
		pg->pending_ow += overwrite;
		return;
	}
	FUZZ_CHECK(r >= 0 && r < (int)m.nslots);
	delivered(i, page, (uint32_t)r, overwrite);
}

static void do_unpin(uint8_t a, uint8_t b, bool dirty)
{
	unsigned i;
	struct mtensor *t = pick(a, &i);
	struct mpage *pg;
	uint32_t page;
	int r;

	if (!t)
		return;
	page = b % (t->npages + 1);
	r = pager_unpin(m.p, t->id, page, dirty);
	if (t->dying || page >= t->npages) {
		FUZZ_CHECK(r == -EINVAL || r == -ENOENT);
		return;
	}
	pg = &t->pages[page];
	if (!pg->held) {
		FUZZ_CHECK(r == -EINVAL); /* a pending PIN is no pin to release */
		return;
	}
	FUZZ_CHECK(r == 0);
	if (pg->modified && !dirty && !pg->overwritten && t->swappable)
		pg->unknown = true; /* the client wrote and said clean: its loss */
	if (--pg->held == 0)
		pg->modified = pg->overwritten = false;
}

/* The client copies a pinned page it has not changed (src) into another
 * it holds (dst) and unpins dst as a copy of src: whether or not the two
 * trade disk homes, dst holds src's data from now on and src keeps its
 * own, through evictions and reads. Bad ids, a page that is not pinned
 * and a page named as its own copy are refused. */
static void do_unpin_copy(uint8_t a, uint8_t b)
{
	unsigned i, k;
	struct mtensor *t = pick(a, &i), *ts = pick((uint8_t)(a >> 3), &k);
	struct mpage *pg, *src;
	uint32_t page, spage;
	int r;

	if (!t || !ts)
		return;
	page = b % (t->npages + 1);
	spage = (uint32_t)(b >> 4) % (ts->npages + 1);
	if (t->dying || ts->dying || page >= t->npages || spage >= ts->npages || (t == ts && page == spage)) {
		r = pager_unpin_copy(m.p, t->id, page, ts->id, spage);
		FUZZ_CHECK(r == -EINVAL || r == -ENOENT);
		return;
	}
	pg = &t->pages[page];
	src = &ts->pages[spage];
	if (!pg->held) {
		FUZZ_CHECK(pager_unpin_copy(m.p, t->id, page, ts->id, spage) == -EINVAL);
		return;
	}
	if (!src->held || src->modified || src->unknown)
		return; /* what its disk copy holds is not the model's to say */
	memcpy(slot_at(pg->slot), slot_at(src->slot), PAGE);
	r = pager_unpin_copy(m.p, t->id, page, ts->id, spage);
	FUZZ_CHECK(r == 0 || r == 1);
	FUZZ_CHECK(r == 0 || (t->swappable && ts->swappable));
	pg->version = src->version;
	pg->unknown = false;
	if (--pg->held == 0)
		pg->modified = pg->overwritten = false;
}

static void do_write(uint8_t a, uint8_t b)
{
	unsigned i;
	struct mtensor *t = pick(a, &i);
	struct mpage *pg;

	if (!t || t->dying)
		return;
	pg = &t->pages[b % t->npages];
	if (!pg->held)
		return;
	pg->version = ++m.next_version;
	fill(slot_at(pg->slot), pg->version);
	pg->modified = true;
	pg->unknown = false;
}

static void do_prefetch(uint8_t a, uint8_t b)
{
	unsigned i;
	struct mtensor *t = pick(a, &i);
	uint32_t page;
	int r;

	if (!t)
		return;
	page = b % (t->npages + 1);
	r = pager_prefetch(m.p, t->id, page);
	if (t->dying || page >= t->npages)
		FUZZ_CHECK(r == -EINVAL || r == -ENOENT);
	else
		FUZZ_CHECK(r == 0);
}

static void do_flush(void)
{
	uint64_t ud = ud_new();
	int r = pager_flush(m.p, ud);

	if (r == PAGER_PENDING) {
		m.pend[ud] = (struct pend){ .live = true, .flush = true };
		m.npending++;
		return;
	}
	FUZZ_CHECK(r == 0 || (r == -EBUSY && m.npending >= m.max_pending));
}

/* Ids no tensor has (or a page far past the end): refused, nothing else. */
static void do_bad_ids(uint8_t a, uint8_t b)
{
	uint32_t id = 1000u + a, page = 100000u + b;
	unsigned i;
	struct mtensor *t = pick(a, &i);

	FUZZ_CHECK(pager_pin(m.p, id, b, ud_new()) < 0);
	FUZZ_CHECK(pager_unpin(m.p, id, b, true) < 0);
	FUZZ_CHECK(pager_prefetch(m.p, id, b) < 0);
	if (t && !t->dying) {
		FUZZ_CHECK(pager_pin(m.p, t->id, page, ud_new()) < 0);
		FUZZ_CHECK(pager_unpin(m.p, t->id, page, false) < 0);
	}
}

/* Unpins everything, flushes, reads back what is known, unregisters every
 * tensor: then the pager must hold nothing. */
static void finish(void)
{
	struct pager_stats st;
	unsigned checked = 0;

	reap();
	for (unsigned i = 0; i < MAX_T; i++) {
		struct mtensor *t = &m.t[i];

		for (uint32_t k = 0; t->used && !t->dying && k < t->npages; k++)
			while (t->pages[k].held)
				do_unpin((uint8_t)i, (uint8_t)k, true);
	}
	check();
	do_flush();
	reap();
	check();
	for (unsigned i = 0; i < MAX_T && checked < 16; i++) {
		struct mtensor *t = &m.t[i];

		for (uint32_t k = 0; t->used && !t->dying && k < t->npages && checked < 16; k++) {
			if (t->pages[k].unknown)
				continue;
			do_pin((uint8_t)i, (uint8_t)k, false);
			reap();
			if (t->pages[k].held) {
				checked++;
				do_unpin((uint8_t)i, (uint8_t)k, false);
			} else {
				FUZZ_CHECK(m.faults || claims() >= m.nslots);
			}
		}
	}
	for (unsigned i = 0; i < MAX_T; i++)
		if (m.t[i].used)
			do_unregister((uint8_t)i);
	reap();
	for (unsigned i = 0; i < MAX_T; i++)
		FUZZ_CHECK(!m.t[i].used); /* a dying tensor's tensor_removed came */
	check();
	pager_stats(m.p, &st);
	if (getenv("FUZZ_PAGER_VERBOSE"))
		fprintf(stderr, "pins %llu (hits %llu, prefetched %llu, misses %llu), reads %llu, writes %llu, evictions "
			"%llu, prefetches %llu, errors %llu, steps %llu\n", (unsigned long long)st.pins,
			(unsigned long long)st.pin_hits, (unsigned long long)st.prefetch_hits, (unsigned long long)st.misses,
			(unsigned long long)st.reads, (unsigned long long)st.writes, (unsigned long long)st.evictions,
			(unsigned long long)st.prefetches, (unsigned long long)st.errors, (unsigned long long)st.steps);
	FUZZ_CHECK(st.tensors == 0 && st.pages == 0 && st.slots_free == m.nslots && st.slots_claimed == 0);
	FUZZ_CHECK(st.swap_assigned_bytes == 0 && st.reads_inflight == 0 && st.writes_inflight == 0);
}

static unsigned files_in(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	unsigned n = 0;

	FUZZ_CHECK(d != NULL);
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

static void cleanup(void)
{
	if (m.region)
		munmap(m.region, (size_t)MAX_SLOTS * PAGE);
	if (m.dir[0])
		rmdir(m.dir);
}

static const char *const fault_specs[8] = {
	NULL, "read:eio@2", "read:flip@1+", "read:short@1+,write:short@1+", "read:eio@1+",
	/* One failed write each: retried after 50 ms, and the data kept. */
	"write:eio@2", "write:enospc@1,read:flip@3", NULL,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint32_t slots[4] = { 2, 3, 4, 8 };
	static const unsigned windows[4] = { 0, 1, 2, 4 };
	struct swap_dir sd = { 0 };
	const char *faults;
	char err[640];

	if (size < 2 || size > 3 * 512 + 2)
		return 0;
	if (!m.region) {
		snprintf(m.dir, sizeof(m.dir), "/var/tmp/spw-fuzz-pager-XXXXXX");
		FUZZ_CHECK(mkdtemp(m.dir) != NULL);
		m.region = mmap(NULL, (size_t)MAX_SLOTS * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		FUZZ_CHECK(m.region != MAP_FAILED);
		atexit(cleanup);
	}
	{
		uint8_t *region = m.region;
		char dir[64];

		memcpy(dir, m.dir, sizeof(dir));
		memset(&m, 0, sizeof(m));
		m.region = region;
		memcpy(m.dir, dir, sizeof(dir));
	}
	/* Whatever the last input left in the region: a fresh pager must not
	 * care (ZERO pages are zero-filled). */
	memset(m.region, 0xa5, (size_t)MAX_SLOTS * PAGE);
	m.nslots = slots[data[0] & 3];
	m.max_pending = data[0] & 0x80 ? 2 : 16;
	faults = fault_specs[(data[0] >> 4) & 7];
	m.faults = faults != NULL;
	if (faults)
		setenv("SPILLWAY_FAULTS", faults, 1);
	else
		unsetenv("SPILLWAY_FAULTS");
	FUZZ_CHECK(uring_new(data[1] & 0x80 ? 4 : 8, false, 8, 4, &m.u) == 0);
	unsetenv("SPILLWAY_FAULTS");
	sd.path = m.dir;
	{
		struct pager_config c = {
			.session = "fuzz/0", .region = m.region, .page_size = PAGE, .nslots = m.nslots,
			.uring = m.u, .dirs = &sd, .ndirs = 1, .swap_bytes = (uint64_t)(data[1] & 0x7f) % 40 * PAGE,
			.prefetch_window = windows[(data[0] >> 2) & 3], .queue_depth = data[1] & 0x80 ? 4 : 8,
			.max_pending = m.max_pending, .complete = on_complete, .tensor_removed = on_removed,
		};

		FUZZ_CHECK(pager_new(&c, err, sizeof(err), &m.p) == 0);
	}
	check();
	for (size_t off = 2; off + 3 <= size; off += 3) {
		uint8_t op = data[off], a = data[off + 1], b = data[off + 2];

		switch (op % 14) {
		case 0: do_register(a, b); break;
		case 1: do_unregister(a); break;
		case 2: do_pin(a, b, false); break;
		case 3: do_pin(a, b, true); break;
		case 4: do_unpin(a, b, true); break;
		case 5: do_unpin(a, b, false); break;
		case 6: do_prefetch(a, b); break;
		case 7: pager_step(m.p); break;
		case 8: do_flush(); break;
		case 9: reap(); break;
		case 10: do_write(a, b); break;
		case 11: do_bad_ids(a, b); break;
		case 12: do_unpin_copy(a, b); break;
		default: do_pin(a, b, false); break; /* PINs are most of what a ring carries */
		}
		check();
	}
	finish();
	m.p = pager_free(m.p);
	FUZZ_CHECK(uring_busy(m.u) == 0);
	m.u = uring_free(m.u);
	FUZZ_CHECK(files_in(m.dir) == 0); /* every swap file removed */
	return 0;
}
