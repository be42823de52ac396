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
 * spw_optimizer_param_view_dlpack exports a view as a DLPack tensor
 * (torch.utils.dlpack.from_dlpack and the like) whose deleter is plain C:
 * a framework frees it from any thread, even after its interpreter is
 * gone, which a deleter that calls back into Python could not survive.
 * Each view is counted: the optimizer holds it, and each export. At
 * spw_optimizer_free a view still exported becomes private anonymous memory
 * with the last values, in place (mremap over the range, so no address
 * ever shows anything else), and lives until the last export's deleter
 * unmaps it; one not exported is unmapped at once.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "optimizer-private.h"

/* One view: the range, and who holds it (the optimizer until it is
 * freed, and each DLPack export until its deleter). Under view_lock: a
 * deleter may run on any thread. */
struct spw__view {
	void *ptr;
	size_t len;
	unsigned refs;
};

static pthread_mutex_t view_lock = PTHREAD_MUTEX_INITIALIZER;

/* Drops one reference; the last unmaps. */
static void view_put(struct spw__view *v)
{
	bool last;

	pthread_mutex_lock(&view_lock);
	last = --v->refs == 0;
	pthread_mutex_unlock(&view_lock);
	if (last) {
		munmap(v->ptr, v->len);
		free(v);
	}
}

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
	if (o->master16)
		return "the master weights are bf16 (SPW_MASTER_BF16), two chunks a page, and a view shows fp32 ones: "
		       "keep the trainer's own parameters (each update's copy-out writes them)";
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
		int slot = spw_pin(o->c, t->id[R_P], role_page(o, R_P, t, k), &p);

		if (slot < 0) {
			r = spw__opt_error(o, slot, "param_view %s: pinning page %u: %s", t->name, k,
					   spw_client_last_error(o->c));
			break;
		}
		if (mmap(base + (size_t)k * o->page_size, o->page_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
			 o->c->region_fd, (off_t)slot * o->page_size) == MAP_FAILED)
			r = spw__opt_error(o, -errno, "param_view %s: mapping page %u (slot %d): %s", t->name, k, slot,
					   strerror(errno));
		if (spw_unpin(o->c, t->id[R_P], role_page(o, R_P, t, k), SPW_CLEAN) < 0 && r >= 0)
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
	void *base = NULL;
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
		*ptr = t->view->ptr;
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
	if (!(t->view = calloc(1, sizeof(*t->view)))) {
		munmap(base, len);
		return spw__opt_error(o, -ENOMEM, "param_view %s: out of memory", t->name);
	}
	*t->view = (struct spw__view){ .ptr = base, .len = len, .refs = 1 };
	t->dev = NULL;
	*ptr = base;
	if (bytes)
		*bytes = len;
	return 0;
}

/* DLPack's ABI (dlpack.h, stable since 0.5): the structs a consumer reads. */
struct dl_tensor {
	void *data;
	int32_t device_type, device_id;         /* DLDevice: kDLCPU = 1 */
	int32_t ndim;
	uint8_t code, bits;                     /* DLDataType: kDLFloat = 2 */
	uint16_t lanes;
	int64_t *shape, *strides;               /* strides NULL: compact */
	uint64_t byte_offset;
};

struct dl_managed {
	struct dl_tensor t;
	void *manager_ctx;
	void (*deleter)(struct dl_managed *self);
};

struct dl_export {
	struct dl_managed m;
	int64_t shape[1];
};

static void dl_delete(struct dl_managed *self)
{
	struct spw__view *v = self->manager_ctx;

	free(self);
	view_put(v);
}

SPW_EXPORT int spw_optimizer_param_view_dlpack(spw_optimizer *o, uint32_t tensor, void **ret_managed)
{
	struct dl_export *x;
	void *ptr;
	int r;

	if (!o)
		return -EINVAL;
	if (!ret_managed)
		return spw__opt_error(o, -EINVAL, "param_view_dlpack: ret_managed is NULL");
	if ((r = spw_optimizer_param_view(o, tensor, &ptr, NULL)) < 0)
		return r;
	if (!(x = calloc(1, sizeof(*x))))
		return spw__opt_error(o, -ENOMEM, "param_view_dlpack: out of memory");
	x->shape[0] = (int64_t)o->tensors[tensor].count;
	x->m.t = (struct dl_tensor){ .data = ptr, .device_type = 1, .ndim = 1, .code = 2, .bits = 32, .lanes = 1,
				     .shape = x->shape };
	x->m.manager_ctx = o->tensors[tensor].view;
	x->m.deleter = dl_delete;
	pthread_mutex_lock(&view_lock);
	o->tensors[tensor].view->refs++;
	pthread_mutex_unlock(&view_lock);
	*ret_managed = &x->m;
	return 0;
}

/*
 * Turns a view into private memory holding its values, at the same
 * address: a copy made beside it, moved over it with mremap (atomic for
 * the range). When that cannot be had, the range is made inaccessible:
 * a fault is loud, stale or foreign data would not be.
 */
static void detach_view(struct spw__view *v)
{
	void *copy = mmap(NULL, v->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (copy != MAP_FAILED) {
		memcpy(copy, v->ptr, v->len);
		if (mremap(copy, v->len, v->len, MREMAP_MAYMOVE | MREMAP_FIXED, v->ptr) != MAP_FAILED)
			return;
		munmap(copy, v->len);
	}
	mprotect(v->ptr, v->len, PROT_NONE);
}

void spw__opt_views_detach(spw_optimizer *o)
{
	for (uint32_t i = 0; i < o->ntensors; i++) {
		struct spw__view *v = o->tensors[i].view;
		bool exported;

		if (!v)
			continue;
		pthread_mutex_lock(&view_lock);
		exported = v->refs > 1;
		pthread_mutex_unlock(&view_lock);
		/* Only an export can still touch it: no new one is made now. */
		if (exported)
			detach_view(v);
		view_put(v);
		o->tensors[i].view = NULL;
	}
}
