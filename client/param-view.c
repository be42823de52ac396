/* SPDX-License-Identifier: MIT */
/*
 * client/param-view.c: spw_optimizer_param_view, a resident tensor's fp32
 * master weights as one contiguous mapping the trainer uses as its
 * parameter, so that a CPU trainer keeps one copy of them, not two.
 *
 * A resident page keeps its slot for the tensor's life (daemon/pager.h:
 * RESIDENT), so the view maps each master page's slot of the region memfd
 * (MAP_SHARED | MAP_FIXED) into one reserved range, page k at k *
 * page_size: chunk k holds elements [k * chunk_elems, ...) and fills page
 * k, so the range is the tensor's elements in order. Adam writes the
 * slots through the client's own mapping of the region; the view sees the
 * same memory, so the copy-out to the device buffer is dropped (t->dev
 * becomes NULL, which set_copy in step.c reads as "no copy").
 *
 * At spw_optimizer_free each view becomes private anonymous memory with
 * the last values, in place (mremap over the range, so no address ever
 * shows anything else), and belongs to the caller: tensors built on it
 * stay valid after the slots go back to the daemon.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "optimizer-private.h"

/* Why t cannot have a view, or NULL when it can. */
static const char *view_refusal(const spw_optimizer *o, const struct tensor *t)
{
	long sys = sysconf(_SC_PAGESIZE);

	if (o->tier != SPW_TENSOR_RESIDENT)
		return "the master pages of the swappable tier move between slots and disk; only resident "
		       "(cpu tier) tensors have a view";
	if (strcmp(spw__device_name(o->dev), "host") != 0)
		return "the parameters are on a GPU: the master copy in host memory is a second copy anyway";
	if (t->frozen)
		return "a frozen tensor takes no updates: keep the trainer's own copy";
	if (!t->view && (!t->dev || t->ptype != SPW_DTYPE_F32))
		return "only an fp32 tensor added with a device buffer (spw_optimizer_add, SPW_TYPE_F32) can "
		       "use its master weights as its parameters";
	if (sys <= 0 || o->page_size % (size_t)sys != 0 || o->c->region_fd < 0)
		return "the session's page size is not a multiple of the system page size";
	return NULL;
}

/* Maps t's master pages into one range: *ret, or -errno (message set). */
static int map_view(spw_optimizer *o, struct tensor *t, size_t len, void **ret)
{
	unsigned char *base;
	int r = 0;

	base = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED)
		return spw__opt_error(o, -errno, "param_view %s: reserving %zu bytes of address space: %s", t->name,
				      len, strerror(errno));
	/* The engine owns the ring: park it for the pins that tell us the
	 * slots (resident pages answer at once and never move). */
	spw__opt_ring_acquire(o);
	for (uint32_t k = 0; k < t->nchunks && r >= 0; k++) {
		void *p;
		int slot = spw_pin(o->c, t->id[R_P], role_page(o, R_P, k), &p);

		if (slot < 0) {
			r = spw__opt_error(o, slot, "param_view %s: pinning page %u: %s", t->name, k,
					   spw_client_last_error(o->c));
			break;
		}
		if (mmap(base + (size_t)k * o->page_size, o->page_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
			 o->c->region_fd, (off_t)slot * o->page_size) == MAP_FAILED)
			r = spw__opt_error(o, -errno, "param_view %s: mapping page %u (slot %d): %s", t->name, k, slot,
					   strerror(errno));
		if (spw_unpin(o->c, t->id[R_P], role_page(o, R_P, k), SPW_CLEAN) < 0 && r >= 0)
			r = spw__opt_error(o, -EIO, "param_view %s: unpinning page %u: %s", t->name, k,
					   spw_client_last_error(o->c));
	}
	spw__opt_ring_release(o);
	if (r < 0) {
		munmap(base, len);
		return r;
	}
	*ret = base;
	return 0;
}

SPW_EXPORT int spw_optimizer_param_view(spw_optimizer *o, uint32_t tensor, void **ptr, size_t *bytes)
{
	struct tensor *t;
	const char *why;
	size_t len;
	void *base;
	int r;

	if (!o)
		return -EINVAL;
	if ((r = spw__opt_broken(o)) < 0)
		return r;
	if (tensor >= o->ntensors || !ptr)
		return spw__opt_error(o, -EINVAL, "param_view: no tensor %u (the optimizer has %u) or ptr is NULL",
				      tensor, o->ntensors);
	t = &o->tensors[tensor];
	if ((why = view_refusal(o, t)))
		return spw__opt_error(o, -EOPNOTSUPP, "param_view %s: %s", t->name, why);
	len = (size_t)t->nchunks * o->page_size;
	if (t->view) {
		*ptr = t->view;
		if (bytes)
			*bytes = len;
		return 0;
	}
	if (o->in_step)
		return spw__opt_error(o, -EBUSY, "param_view %s: a step is open (take the view between steps)",
				      t->name);
	/* No copy-out may be queued into the old buffer once the trainer
	 * has switched to the view. */
	pthread_mutex_lock(&o->lock);
	WAIT_UNTIL(o, t->pending == 0, "param_view %s: its updates", t->name);
	r = spw__opt_broken_locked(o);
	pthread_mutex_unlock(&o->lock);
	if (r < 0)
		return r;
	if ((r = map_view(o, t, len, &base)) < 0)
		return r;
	t->view = base;
	t->dev = NULL;
	*ptr = base;
	if (bytes)
		*bytes = len;
	return 0;
}

/*
 * Turns a view into private memory holding its values, at the same
 * address: a copy made beside it, moved over it with mremap (atomic for
 * the range). When that cannot be had, the range is made inaccessible:
 * a fault is loud, stale or foreign data would not be.
 */
static void detach_view(spw_optimizer *o, struct tensor *t)
{
	size_t len = (size_t)t->nchunks * o->page_size;
	void *copy = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (copy != MAP_FAILED) {
		memcpy(copy, t->view, len);
		if (mremap(copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, t->view) != MAP_FAILED)
			return;
		munmap(copy, len);
	}
	mprotect(t->view, len, PROT_NONE);
}

void spw__opt_views_detach(spw_optimizer *o)
{
	for (uint32_t i = 0; i < o->ntensors; i++)
		if (o->tensors[i].view) {
			detach_view(o, &o->tensors[i]);
			o->tensors[i].view = NULL;
		}
}
