/* SPDX-License-Identifier: MIT */
/*
 * spillway/optimizer.h: libspillway's optimizer, the offload pipeline
 * (docs/pipeline.md): AdamW whose master weights and moments live in
 * spillway, fed with gradients during backward. Included by
 * <spillway/spillway.h>, whose conventions (errors, sized structs, threads)
 * hold here too; including this header alone works as well.
 */
#ifndef SPILLWAY_OPTIMIZER_H
#define SPILLWAY_OPTIMIZER_H

#include <spillway/spillway.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * An AdamW optimizer whose fp32 master weights and moments live in
 * spillway (resident or on the NVMe tier) while the low-precision
 * parameters live on the device. Per step the trainer hands each gradient
 * over as soon as backward produces it; the library copies it into the
 * session's pinned region, runs the fused AdamW kernels on a CPU thread
 * pool, and copies the updated parameters back, overlapped with the
 * device's compute.
 *
 *   spw_optimizer *o;
 *   struct spw_param_group g = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f,
 *                                .eps = 1e-8f, .weight_decay = 0.01f };
 *   struct spw_optimizer_opts oo = { .size = sizeof(oo), .groups = &g, .ngroups = 1 };
 *   spw_optimizer_new(client, &oo, &o);
 *   spw_optimizer_add(o, "fc1.weight", 0, n, init_fp32, dev_params, SPW_TYPE_BF16, &id);
 *   for (step = 1; ...; step++) {
 *           spw_optimizer_begin(o, step, NULL, 0.0f);
 *           forward: spw_optimizer_wait_params(o, id, stream) before using a tensor
 *           backward: spw_optimizer_grad_ready(o, id, SPW_ALL_CHUNKS, grad, bytes,
 *                                              SPW_TYPE_BF16, stream) as each is final
 *           spw_optimizer_end(o, &result);
 *   }
 *
 * The optimizer takes over its client: from spw_optimizer_new() until
 * spw_optimizer_free() the caller must make no call on that client except
 * spw_client_last_error() and spw_client_info(), because the optimizer's
 * own thread owns the client's data-plane ring.
 *
 * Threads: spw_optimizer_grad_ready() may be called from the trainer's
 * backward thread while another thread calls spw_optimizer_wait_params();
 * all the other calls on one optimizer must not overlap each other. Inside,
 * one engine thread talks to the daemon (it alone touches the ring), the
 * thread pool runs the kernels, and the device backend's copy streams move
 * the bytes.
 *
 * Errors: as for the client (negative errno), with a sentence in
 * spw_optimizer_last_error(). Once the daemon goes away or a transfer
 * fails, the optimizer is broken: every call returns that error (within
 * about a second for calls that wait) and it must be freed. A daemon that
 * stops answering (stopped, its disk stuck) breaks it the same way after
 * opts.wait_timeout_ms without progress, with -ETIMEDOUT.
 */
typedef struct spw_optimizer spw_optimizer;

/* Element types of gradients and device parameters. */
enum spw_type {
	SPW_TYPE_F32 = 0,
	SPW_TYPE_BF16 = 1,
	SPW_TYPE_F16 = 2,
};

enum spw_optimizer_mode {
	/* Adam on a chunk starts as soon as its gradient is on the host; the
	 * gradients are scaled by a clip coefficient fixed in advance
	 * (opts.clip_coef). Never skips a step. */
	SPW_OPT_OVERLAPPED = 0,
	/* Gradients stream out during backward and their norms are summed on
	 * arrival; Adam starts once the global norm is known (clipping to
	 * max_norm, skipping steps whose gradients hold inf or nan), chunk by
	 * chunk in the order the next forward needs them. */
	SPW_OPT_EXACT = 1,
};

/*
 * The type the moments (exp_avg, exp_avg_sq) are stored in.
 *
 * SPW_STATE_F32: 4 + 4 bytes per parameter, torch.optim.AdamW's bits.
 * SPW_STATE_BF16: 2 + 2 bytes per parameter. Each update widens the stored
 * moments to fp32 (exactly), computes the new moments and the parameter in
 * fp32 as SPW_STATE_F32 does, and stores the moments rounded to the
 * nearest bf16 (ties to even): the same bits on every CPU variant, thread
 * count and chunking, but not torch's bits (about 3 significant digits
 * kept per moment per step).
 * SPW_STATE_INT8: 1 + 1 bytes per parameter and 4 bytes of scales per 256
 * parameters each (four chunks' codes a page in the tier, the scales in
 * the optimizer's scale pages). Moments in blocks of 256 with one fp32 scale per
 * block, exp_avg coded in 8 signed bits, exp_avg_sq in 8 unsigned ones,
 * both denser near zero (docs/pipeline.md, State dtypes); the update
 * decodes, computes in fp32 as above and encodes again, with the same
 * bits everywhere. Lossy: about 2 significant digits per moment.
 */
enum spw_state_dtype {
	SPW_STATE_F32 = 0,
	SPW_STATE_BF16 = 1,
	SPW_STATE_INT8 = 2,
};

/*
 * Where SPW_OPT_EXACT keeps the gradients between their hand-over and the
 * updates at spw_optimizer_end().
 *
 * SPW_GRAD_STORE: copied into an fp32 gradient store in the tier (4 bytes
 * per parameter, what a torch .grad takes again) through staging pages.
 * SPW_GRAD_BY_REFERENCE: not copied. spw_optimizer_grad_ready() keeps the
 * address of the caller's gradient and sums its squares there (for the
 * norm); the updates read it there after spw_optimizer_end(). The caller
 * leaves every gradient handed over in a step where it is, unchanged,
 * until the step's updates are done (spw_optimizer_sync(), or
 * spw_optimizer_wait_params() of its tensor, returns), not only until
 * spw_optimizer_end(). Same bits as SPW_GRAD_STORE: the same kernels
 * read the same values. On a GPU, whose memory the kernels cannot read,
 * each gradient is copied into a staging page for its norm and again,
 * just before its update, into another (a second window of staging
 * pages): the copy engine moves it twice where the store would have the
 * tier write and read it once each, which on the NVMe tier is the disk.
 * Only where it holds: exact mode, accumulation 1 (accumulating needs a
 * store) and a session that is not persistent (a trainer killed inside
 * the updates leaves its gradients with it, and the step could not be
 * finished at takeover); spw_optimizer_new() refuses it elsewhere with
 * -EINVAL, naming why. Either tier, any device.
 * SPW_GRAD_STORE_BF16: a gradient store in bf16, 2 bytes per parameter
 * (half the store's memory, and its disk traffic on the NVMe tier). Each
 * gradient handed over is stored rounded to the nearest bf16 (ties to
 * even); with accumulation each micro-batch's sum is (the stored bf16
 * widened, the gradient added in fp32, rounded again). Exact, the same
 * bits as SPW_GRAD_STORE, where the gradients are bf16 and accumulation
 * is 1 (a bf16 value is stored as it is): bf16 training's usual case.
 * Otherwise lossy, as bf16 is (about 3 significant digits per gradient,
 * and per partial sum). The norm and the update read the stored values.
 * Also for the gradients overlapped mode stores when accumulating; no
 * effect where nothing is stored.
 */
enum spw_grad_store {
	SPW_GRAD_STORE = 0,
	SPW_GRAD_BY_REFERENCE = 1,
	SPW_GRAD_STORE_BF16 = 2,
};

/*
 * The type the master weights (SPW_STATE_PARAM) are kept in, in the tier
 * and on disk.
 *
 * SPW_MASTER_F32: 4 bytes per parameter; every state_dtype's updates are
 * computed from and stored to them exactly (torch's bits with
 * SPW_STATE_F32).
 * SPW_MASTER_BF16: 2 bytes per parameter (with SPW_STATE_INT8, 4 bytes of
 * state per parameter in all instead of 6). Each update widens the stored
 * weight to fp32 (exactly), computes the moments and the new weight in
 * fp32 as SPW_MASTER_F32 does, and stores the weight rounded to bf16
 * *stochastically*: up with probability (the 16 bits dropped) / 65536, so
 * the rounding is unbiased and updates far below a bf16 ulp still move the
 * weights on average (rounding to nearest would drop every update smaller
 * than half an ulp: the known failure of pure-bf16 training). The random
 * bits are a function of the tensor's place in the optimizer, its step and
 * the element (kernels/sr.h): the same bits on every CPU variant, thread
 * count, chunking and tier, and a resumed run equals one that never
 * stopped. The device copy is the stored bf16 weight (widened for an fp32
 * device tensor). Lossy: 8 significant bits per weight; for people who
 * accept it (docs/pipeline.md, "bf16 master weights"). Not with a
 * parameter view (spw_optimizer_param_view: it shows fp32 weights).
 */
enum spw_master_dtype {
	SPW_MASTER_F32 = 0,
	SPW_MASTER_BF16 = 1,
};

/* torch.optim.AdamW's per-group hyperparameters. */
struct spw_param_group {
	float lr, beta1, beta2, eps, weight_decay;
};

struct spw_optimizer_opts {
	size_t size;                        /* sizeof(struct spw_optimizer_opts) */
	enum spw_optimizer_mode mode;
	enum spw_tensor_kind tier;          /* where master weights and moments live */
	const struct spw_param_group *groups; /* copied; at least one */
	uint32_t ngroups;                   /* 1 to 65536 (one per tensor is fine) */
	/* Micro-batches per step: with N > 1 each chunk's gradient is handed
	 * over N times per step, accumulated into fp32 pages in spillway, and
	 * Adam runs after the last. 0 means 1. */
	uint32_t accumulation;
	/* SPW_OPT_OVERLAPPED: every gradient is multiplied by this before
	 * Adam (a clip coefficient fixed before the step); 0 means 1. */
	float clip_coef;
	/* SPW_OPT_EXACT: global-norm clipping to max_norm as
	 * torch.nn.utils.clip_grad_norm_ (coef = max_norm / (norm + 1e-6),
	 * at most 1); 0 disables clipping. */
	float max_norm;
	/* SPW_OPT_EXACT: keep a dynamic loss scale as torch's GradScaler
	 * (halve on inf/nan and skip the step; double after growth_interval
	 * clean steps), used when spw_optimizer_begin() gets loss_scale 0.
	 * init_loss_scale 0 means 65536, growth_interval 0 means 2000. */
	int dynamic_loss_scale;
	float init_loss_scale;
	uint32_t growth_interval;
	/* Chunks in flight at once (each pins 3 or 4 pages and uses 2
	 * staging pages); 0 means 4. Bounds the pinned memory. */
	uint32_t window;
	/* CPU threads for Adam; 0 means one per core of the NUMA node. */
	uint32_t threads;
	/* Device backend: "host", "cuda", "cuda:N", or NULL for
	 * $SPILLWAY_DEVICE, else cuda when a GPU is present, else host.
	 * The cuda backend is the plugin libspillway-cuda.so, loaded from
	 * beside libspillway.so (or $SPILLWAY_CUDA_PLUGIN) when cuda is
	 * asked for or probed; without it, automatic choice is host. */
	const char *device;
	/* Added after the first version (a caller whose struct ends before
	 * it gets the default): milliseconds any call may wait without the pipeline making
	 * progress (a gradient copied, a page pinned, an update done) before
	 * it fails with -ETIMEDOUT, naming what it waited for and the
	 * daemon's pid, and leaves the optimizer broken. A daemon that is
	 * stopped (SIGSTOP) or whose disk hangs otherwise blocks the trainer
	 * for ever; one that dies is noticed at once regardless. 0 means
	 * 60000. */
	uint32_t wait_timeout_ms;
	/* Ignored: the tail padding of the struct's earlier versions, which
	 * their callers need not have zeroed. */
	uint32_t reserved;
	/* Added later still (a caller whose struct ends before it gets
	 * SPW_STATE_F32): the type exp_avg and exp_avg_sq are kept in, in
	 * the tier and on disk (docs/pipeline.md, State dtypes). Master
	 * weights are master_dtype's, whatever this says. */
	enum spw_state_dtype state_dtype;
	/* Ignored: the tail padding of the struct's version that ends at
	 * state_dtype. */
	uint32_t reserved2;
	/* Added after state_dtype (a caller whose struct ends before it gets
	 * SPW_GRAD_STORE): where exact mode keeps a step's gradients until
	 * the norm is known (docs/pipeline.md, Gradients by reference). */
	enum spw_grad_store grad_store;
	/* Added after grad_store (a caller whose struct ends before it gets
	 * SPW_MASTER_F32): the type the master weights are kept in. */
	enum spw_master_dtype master_dtype;
};

/*
 * Creates an optimizer over the attached session of c (see above for what
 * that means for c): starts its threads, opens the device backend, and
 * registers a resident staging tensor of 2 * window pages.
 *
 * Returns 0 and sets *ret. Returns -EINVAL for bad options (no groups, a
 * hyperparameter out of range, an unknown mode, tier or device name, an
 * opts->size below the struct's first version); -E2BIG for an opts->size
 * as spw_client_new() refuses;
 * -ENOTCONN when c has no session attached; -ENODEV when the device
 * backend asked for cannot be used (no GPU, or the cuda plugin or the CUDA
 * runtime it needs is missing or of another build: the last-error
 * sentence names the file tried and the fix); -ENOSPC when the region lacks slots for the staging
 * pages or, on the NVMe tier, for one chunk in flight (its pages of state, two staging pages and a
 * persistent session's update journal: the last-error sentence names the region, the figure
 * needed and region_bytes; spw_optimizer_add*() refuses the same way a tensor whose chunks
 * outgrow it); -ENOMEM; or a registration error as spw_tensor_register().
 */
SPW_EXPORT int spw_optimizer_new(spw_client *c, const struct spw_optimizer_opts *opts,
				 spw_optimizer **ret);

/*
 * Persistent sessions (spw_attach_opts.persistent, docs/persistent.md).
 * The optimizer marks each step for the daemon: a step is committed once
 * all its updates are in the session's state. On a session taken over
 * from a trainer that died (spw_session_info.reattached),
 * spw_optimizer_new() and spw_optimizer_add*() adopt the session's tensors
 * with their master weights and moments instead of writing init, and the
 * first spw_optimizer_begin() checks the layout (modes, groups, every
 * tensor's name, size, group and type) against the one left, refusing
 * with -ESTALE and the first difference. spw_optimizer_new() refuses with
 * -ESTALE a session whose trainer died inside a step's updates and whose
 * update journal cannot put it right (docs/persistent.md). Read the master weights back with
 * spw_optimizer_read(SPW_STATE_PARAM) to restore the device parameters.
 *
 * Returns the committed step the adopted state holds (0 when the
 * optimizer started fresh): continue with begin(step + 1), or with the
 * same number when that step was skipped (spw_session_info.skipped).
 */
SPW_EXPORT uint64_t spw_optimizer_resumed_step(const spw_optimizer *o);

/*
 * Whether the checkpoint in dir (spw_client_checkpoint) would load into
 * this optimizer's persistent session, found out before the caller
 * releases anything to restore it: its manifest, the page size, the
 * layout record (the same model and settings: every tensor's name, size
 * and group, mode, tier, state dtype; the first difference named), each
 * data file's size and every page's CRC-32C. Reads the whole checkpoint
 * once; touches neither the session nor the optimizer's state. 0, or
 * -EINVAL (not a checkpoint, or of another page size), -ESTALE (another
 * layout), -EBADMSG (a page's CRC: tensor, page and file named), -errno
 * of a read, with the sentence in spw_optimizer_last_error().
 */
SPW_EXPORT int spw_optimizer_checkpoint_check(spw_optimizer *o, const char *dir);

/*
 * Waits for work in flight, unregisters the optimizer's tensors (when the
 * daemon is still there), stops the threads and frees. The client is the
 * caller's again afterwards. Accepts NULL; returns NULL.
 */
SPW_EXPORT spw_optimizer *spw_optimizer_free(spw_optimizer *o);

/* The sentence describing the last failure on o; "" when none; a static
 * message when o is NULL. Valid until the next call on o. */
SPW_EXPORT const char *spw_optimizer_last_error(const spw_optimizer *o);

/*
 * Adds a parameter tensor of count elements to param group group:
 * registers its fp32 master weights, exp_avg and exp_avg_sq (and an fp32
 * gradient buffer in exact mode, unless SPW_GRAD_BY_REFERENCE, or with
 * accumulation) in the session's
 * tier, cut into chunks of page_size / 4 elements (chunk k of each lives
 * in page k), and writes init (count fp32 values) as the master weights.
 * dev_params is the device buffer of count elements of param_type that
 * every step's updated parameters are copied into. Call before the first
 * step; for the best first step, in the order backward produces the
 * gradients. Stores the tensor's index (0, 1, ...) in *ret_tensor.
 *
 * Returns 0. Returns -EINVAL for a bad name (printable ASCII, 1..200
 * bytes), group, count (0), type or NULL pointer; -EBUSY once a step has
 * begun; -EEXIST for a name in use; -ENOSPC when a resident tensor does
 * not fit the region; -EOPNOTSUPP when the daemon refuses swappable
 * tensors (no NVMe tier); -ENOMEM; or the broken optimizer's error.
 */
SPW_EXPORT int spw_optimizer_add(spw_optimizer *o, const char *name, uint32_t group,
				 uint64_t count, const float *init, void *dev_params,
				 enum spw_type param_type, uint32_t *ret_tensor);

/*
 * Adds a trainable tensor as spw_optimizer_add() does, but with no device
 * buffer: its parameters live in spillway between uses (parameter
 * offload), and the trainer copies them to a device buffer of its own
 * with spw_params_fetch() before each use. Returns as spw_optimizer_add().
 */
SPW_EXPORT int spw_optimizer_add_offloaded(spw_optimizer *o, const char *name, uint32_t group,
					   uint64_t count, const float *init, uint32_t *ret_tensor);

/*
 * Adds a frozen tensor: count parameters (init, of init_type) kept in
 * spillway in the optimizer's tier with no optimizer state, never
 * updated, taking no gradients; the trainer fetches them with
 * spw_params_fetch(). They are stored as fp32 (exact for bf16 and fp16,
 * so a fetch in init_type returns init bit for bit). Call before the
 * first step. Returns 0, -EINVAL for a bad name, count, type or NULL
 * pointer, and otherwise as spw_optimizer_add().
 */
SPW_EXPORT int spw_optimizer_add_frozen(spw_optimizer *o, const char *name, uint64_t count,
					const void *init, enum spw_type init_type, uint32_t *ret_tensor);

/*
 * Parameter offload. spw_params_fetch() queues the copy of tensor's
 * current parameters, cast to type (round to nearest even), into dst, a
 * device buffer of bytes = count * size of type, and returns without
 * waiting for it: the fp32 master weights of a trainable tensor (every
 * update whose gradient was handed over before the call included: the
 * calling thread waits for those updates to be computed), or a frozen
 * tensor's values. stream, when not NULL, is the stream whose queued work
 * may still use dst: the copy waits for it on the device. Make the
 * consumer wait with spw_optimizer_wait_params(o, tensor, stream) before
 * using dst. Fetches also record their order each step (from one
 * spw_optimizer_begin() to the next); with the swappable tier, each fetch
 * asks the daemon to prefetch the pages of the tensors that came next last
 * step.
 *
 * spw_params_release() hands dst back: it waits until the fetch's copy
 * is done, so nothing writes dst afterwards. spillway keeps the master.
 * A tensor is fetched at most once until released.
 *
 * fetch returns 0, -EINVAL for an unknown tensor, a NULL dst or a bad
 * type, -EMSGSIZE when bytes does not match, -EALREADY when the tensor is
 * fetched and not released, a device error when stream cannot be used,
 * -ENOMEM, or the broken optimizer's error. release returns 0, -EINVAL
 * for an unknown tensor, -EPROTO when it is not fetched, or the broken
 * optimizer's error.
 */
SPW_EXPORT int spw_params_fetch(spw_optimizer *o, uint32_t tensor, void *dst, size_t bytes,
				enum spw_type type, void *stream);
SPW_EXPORT int spw_params_release(spw_optimizer *o, uint32_t tensor);

/* Chunks of a tensor (0 for an unknown index). */
SPW_EXPORT uint32_t spw_optimizer_chunks(const spw_optimizer *o, uint32_t tensor);

/*
 * Begins step number step (1 for the first update; torch's state['step']).
 * lrs, when not NULL, holds one learning rate per group for this step
 * (NULL: the groups' own). loss_scale divides every gradient (the fp16 loss
 * scale); 0 means 1, or the dynamic scale when that is on. May be called
 * while the previous step's updates are still being applied.
 *
 * Returns 0. Returns -EINVAL for step 0, a bad lr or loss scale; -EBUSY
 * when a step is open (end it first); or the broken optimizer's error.
 */
SPW_EXPORT int spw_optimizer_begin(spw_optimizer *o, uint64_t step, const float *lrs,
				   float loss_scale);

#define SPW_ALL_CHUNKS UINT32_MAX

/*
 * Hands over the gradient of one chunk of a tensor (chunk < chunks) or of
 * all of it (SPW_ALL_CHUNKS): grad points to that span's elements on the
 * device (bytes = elements * size of type). stream is the device stream
 * that produced it, or NULL when the gradient is complete at the call: a
 * cudaStream_t on the cuda backend (the copy waits on the device, not the
 * host, for the work queued on it so far); on the host backend a stream
 * that is not the backend's own is ignored and the gradient must be
 * complete at the call. The library reads the gradient asynchronously: leave it
 * unchanged until spw_optimizer_sync_grads() or spw_optimizer_end()
 * returns (with SPW_GRAD_BY_REFERENCE: until the step's updates are done,
 * see there). Waits while every staging page is busy, which throttles a
 * backward that outruns the CPUs. With accumulation N, each chunk is
 * handed over N times per step, once per micro-batch.
 *
 * Returns 0. Returns -EINVAL for an unknown or frozen tensor or chunk, a
 * NULL grad or a type other than the three; a device error when stream
 * cannot be used; -EMSGSIZE when bytes does not match the
 * span; -EALREADY when the chunk was handed over as often as this step
 * takes; -EPROTO when no step is open (call spw_optimizer_begin()); or the
 * broken optimizer's error.
 */
SPW_EXPORT int spw_optimizer_grad_ready(spw_optimizer *o, uint32_t tensor, uint32_t chunk,
					const void *grad, size_t bytes, enum spw_type type,
					void *stream);

/* Waits until every gradient handed over so far has been copied to the
 * host, so the trainer may reuse its buffers (between micro-batches).
 * Returns 0 or the broken optimizer's error. */
SPW_EXPORT int spw_optimizer_sync_grads(spw_optimizer *o);

/*
 * Says tensor has no gradient this step: it is skipped at
 * spw_optimizer_end() as torch.optim skips a parameter whose .grad is
 * None: no update, no weight decay, no moment decay, nothing in the
 * norm, and its bias-correction step does not advance (see
 * spw_optimizer_set_lag()). In SPW_OPT_EXACT mode it also takes back
 * whatever was handed over for the tensor this step (waiting for those
 * gradients' copies), so that a changed gradient can be handed over
 * again: a later spw_optimizer_grad_ready() on the tensor lifts the mark,
 * and its chunks then take a full set of gradients again. Overlapped
 * mode cannot take an applied gradient back.
 *
 * Returns 0. Returns -EINVAL for an unknown or frozen tensor; -EPROTO
 * when no step is open; -EALREADY in SPW_OPT_OVERLAPPED mode when a chunk
 * of the tensor was already updated this step; or the broken
 * optimizer's error.
 */
SPW_EXPORT int spw_optimizer_grad_none(spw_optimizer *o, uint32_t tensor);

/*
 * Sets how many steps tensor has sat out: its updates use
 * step - lag for the bias correction, as torch counts steps per
 * parameter (torch's state['step'] = step - 1 - lag before an update).
 * spw_optimizer_end() adds one for every tensor marked by
 * spw_optimizer_grad_none() in a step that updated something; this call
 * is for restoring saved state. Not while a step is open.
 *
 * Returns 0. Returns -EINVAL for an unknown or frozen tensor; -EBUSY
 * while a step is open. (spw_optimizer_begin() refuses a step number that
 * is not above every tensor's lag with -EINVAL.)
 */
SPW_EXPORT int spw_optimizer_set_lag(spw_optimizer *o, uint32_t tensor, uint64_t lag);

/*
 * Sets param group group's hyperparameters (copied) for the steps begun
 * from now, and in SPW_OPT_EXACT mode for the open step as well, whose
 * updates are prepared at spw_optimizer_end(). Costs nothing:
 * the moments stay where they are (a schedule of betas or weight decay,
 * as torch's OneCycleLR with cycle_momentum).
 *
 * Returns 0, or -EINVAL for an unknown group, a NULL g or a
 * hyperparameter out of range.
 */
SPW_EXPORT int spw_optimizer_set_group(spw_optimizer *o, uint32_t group,
				       const struct spw_param_group *g);

/*
 * SPW_OPT_EXACT: sets max_norm (as in the options; 0 disables clipping)
 * for the steps ended from now, the open one included.
 * Returns 0, or -EINVAL in overlapped mode or for a max_norm that is not
 * finite and >= 0.
 */
SPW_EXPORT int spw_optimizer_set_clip(spw_optimizer *o, float max_norm);

/*
 * SPW_OPT_EXACT: sets the open step's loss scale (as spw_optimizer_begin()'s
 * loss_scale), which divides its gradients when the step ends: a loss
 * scaler that fixes its scale only at step time (torch's GradScaler)
 * hands it over here. Returns 0; -EINVAL in overlapped mode
 * or for a scale that is not finite and > 0; -EPROTO when no step is open.
 */
SPW_EXPORT int spw_optimizer_set_loss_scale(spw_optimizer *o, float loss_scale);

struct spw_step_result {
	size_t size;            /* set by the caller: sizeof(struct spw_step_result) */
	double grad_norm;       /* global L2 norm of the unscaled gradients */
	float clip_coef;        /* the coefficient applied (1: none) */
	float loss_scale;       /* the scale this step used */
	float next_loss_scale;  /* the dynamic scale for the next step (else loss_scale) */
	int skipped;            /* exact mode: inf/nan found, nothing updated */
	int nonfinite;          /* some gradient held inf or nan */
	uint32_t reserved;
};

/*
 * Ends the step: waits until every gradient has arrived and been reduced
 * (overlapped mode: and run through Adam), fills *res (may be NULL), and
 * in exact mode starts the updates, which go on in the background;
 * spw_optimizer_wait_params() tells when a tensor's are on the device.
 *
 * Returns 0. Returns -EPROTO when no step is open; -ENODATA when a chunk
 * got fewer gradients than the step takes (the last-error message names
 * it; the step stays open); -EINVAL when res->size is smaller than the
 * struct's first version, -E2BIG when it is over 4096; or the
 * broken optimizer's error.
 */
SPW_EXPORT int spw_optimizer_end(spw_optimizer *o, struct spw_step_result *res);

/*
 * Makes stream wait until tensor's updated parameters from every step
 * ended so far, and the copy of its last spw_params_fetch(), have reached
 * the device. With stream NULL the calling thread waits for the copies.
 * With a stream (a cudaStream_t), the calling thread waits only until the
 * copies are queued (the CPU work before them is done) and the stream,
 * not the host, waits for the copies themselves: work queued on it after
 * this call sees the parameters. On the host backend a stream that is not
 * the backend's own counts as NULL. Returns 0, -EINVAL for an unknown
 * tensor, a device error when the stream cannot be used, or the broken
 * optimizer's error.
 */
SPW_EXPORT int spw_optimizer_wait_params(spw_optimizer *o, uint32_t tensor, void *stream);

/*
 * A CPU trainer's parameters in the region itself: sets *ptr to one
 * contiguous mapping of tensor's fp32 master weights (count elements in
 * order, in *bytes, when not NULL, of address space: count * 4 rounded up
 * to the page size). The trainer uses it as its parameter from then on
 * instead of the buffer it gave spw_optimizer_add(): the updates are
 * written there by Adam and no longer copied to that buffer (overlapped
 * mode: as soon as a chunk's update is done, which is why grad_ready
 * comes once backward no longer reads the tensor), and
 * spw_optimizer_wait_params() waits for them on the host. A write into
 * the view is a write of the master weights (taken by the next update).
 * Asking again returns the same mapping.
 *
 * For the host device and the resident tier (SPW_TENSOR_RESIDENT), whose
 * pages never move, and a tensor added with spw_optimizer_add() and
 * SPW_TYPE_F32; not while a step is open. The mapping is valid while the
 * optimizer lives, and after spw_optimizer_free() while a DLPack export of
 * it (below) lives: free turns an exported view into private memory with
 * the last values at the same address, which the last export's deleter
 * unmaps; a view not exported is unmapped by free.
 *
 * Returns 0; -EOPNOTSUPP, with the reason in the last error, for the
 * swappable tier, a GPU device, a frozen, offloaded or non-fp32 tensor
 * (keep using your own buffer: nothing changed); -EINVAL for an unknown
 * tensor or a NULL ptr; -EBUSY while a step is open; the mmap's error;
 * or the broken optimizer's.
 */
SPW_EXPORT int spw_optimizer_param_view(spw_optimizer *o, uint32_t tensor, void **ptr, size_t *bytes);

/*
 * The same view as a DLPack tensor: *ret_managed is a DLManagedTensor * (1-D,
 * count fp32 elements, kDLCPU) for torch.utils.dlpack.from_dlpack() and
 * the like, which call its deleter once done with it. The deleter is
 * plain C (no callback into the caller's interpreter: it may run from any
 * thread, also after the interpreter has finished) and keeps the mapping
 * alive until then, also past spw_optimizer_free(), holding the last
 * values. Returns as spw_optimizer_param_view(), or -ENOMEM.
 */
SPW_EXPORT int spw_optimizer_param_view_dlpack(spw_optimizer *o, uint32_t tensor, void **ret_managed);

/* Waits until all work of every ended step is done, and on a persistent
 * session until the daemon has those steps as committed (a trainer killed
 * after it resumes after its last ended step). Returns 0 or the broken
 * optimizer's error. */
SPW_EXPORT int spw_optimizer_sync(spw_optimizer *o);

enum spw_optimizer_state {
	SPW_STATE_PARAM = 0,    /* master weights (read and written as fp32) */
	SPW_STATE_EXP_AVG = 1,
	SPW_STATE_EXP_AVG_SQ = 2,
};

/*
 * Copies a tensor's fp32 state (count elements) into out, after
 * spw_optimizer_sync(); for checkpoints and tests. With SPW_STATE_BF16 the
 * moments (and SPW_MASTER_BF16's master weights) are widened to fp32,
 * which is exact; with SPW_STATE_INT8 they
 * are decoded (the values the next update starts from). Returns 0, -EINVAL for
 * an unknown tensor or state (a frozen tensor has only SPW_STATE_PARAM), -EBUSY while a step is open, or the pin's
 * error.
 */
SPW_EXPORT int spw_optimizer_read(spw_optimizer *o, uint32_t tensor,
				  enum spw_optimizer_state which, float *out);

/*
 * Copies count fp32 values from in into a tensor's state, which = SPW_STATE_PARAM
 * (master weights), SPW_STATE_EXP_AVG or SPW_STATE_EXP_AVG_SQ; for
 * load_state_dict and restarts. Not while a step is open; waits for the
 * work of ended steps first (as spw_optimizer_sync()). Works on either
 * tier (the pages are handed back dirty).
 *
 * It does not touch the device parameters (nor a buffer filled by
 * spw_params_fetch()): they are the caller's, who copies the same values
 * there (cast to the parameters' type). Offloaded tensors' next fetch
 * returns the written master weights.
 *
 * Master weights: with SPW_MASTER_BF16 each value is stored rounded to
 * the nearest bf16 (ties to even), as a read after the write returns it.
 * Moments: with SPW_STATE_BF16 each value is stored rounded to the
 * nearest bf16 (ties to even; a nan stays a nan), with SPW_STATE_INT8
 * coded in blocks of 256 as an update would store them, so a read after a
 * write returns the rounded values. A chunk's moments start as zeros at its first update, unless
 * one of them was written before: then the written values are kept, and
 * the moment not written (if any) reads as zeros. Write both for a
 * resumed run.
 *
 * Step count: the optimizer keeps none of its own; the bias correction
 * comes from the step number passed to spw_optimizer_begin(). A run
 * resumed from state saved after step s (torch's state['step'] = s)
 * begins its first step with s + 1. (The dynamic loss scale of
 * SPW_OPT_EXACT is not part of the state: it restarts at init_loss_scale.)
 *
 * Returns 0. Returns -EINVAL for an unknown tensor or state (a frozen
 * tensor has only SPW_STATE_PARAM) or a NULL in; -EBUSY while a step is
 * open; the pin's error (the state may then be partly written: write it
 * again); or the broken optimizer's error.
 *
 * On a persistent session a trainer killed inside a write, or after one
 * before the next step's first update, leaves a state partly overwritten:
 * the next persistent attach releases it and starts a fresh session
 * (spw_session_info.released_write_step names the step; nothing is
 * resumed): write the state again in full, and begin with its step + 1.
 */
SPW_EXPORT int spw_optimizer_write(spw_optimizer *o, uint32_t tensor,
				   enum spw_optimizer_state which, const float *in);

struct spw_optimizer_stats {
	size_t size;            /* set by the caller */
	uint64_t steps;         /* steps ended */
	uint64_t bytes_d2h;     /* gradient bytes copied to the host */
	uint64_t bytes_h2d;     /* parameter bytes copied to the device */
	uint64_t chunks;        /* Adam updates run (one per chunk per step) */
	double adam_s;          /* thread-pool seconds spent in kernels, summed over chunks */
	double pin_wait_s;      /* seconds from pin requests to the last pin of a chunk, summed */
	uint64_t pins;          /* pages pinned */
	uint64_t fast_pins;     /* pinned within 200 us (the page was in memory) */
	uint64_t prefetches;    /* PREFETCH hints the daemon accepted */
	int hints;              /* 1 when the daemon takes PREFETCH/STEP hints */
	uint32_t reserved;
	/* Added after the struct's first version, which ends at reserved
	 * above: a caller with the shorter struct (the Python binding's)
	 * gets the fields above. */
	uint64_t fetches;       /* spw_params_fetch() calls */
	uint64_t bytes_fetched; /* parameter bytes copied to the device by fetches */
	uint64_t fetch_prefetches; /* PREFETCH hints from the fetch order the daemon accepted
				    * (also counted in prefetches) */
};

/* Fills *st with counters since creation (as many fields as st->size
 * covers; see the conventions at the top). Returns 0, -EINVAL when o or st
 * is NULL or st->size is smaller than the struct's first version, or
 * -E2BIG when st->size is over 4096. */
SPW_EXPORT int spw_optimizer_stats(spw_optimizer *o, struct spw_optimizer_stats *st);

/* Tracing: with spw_client_opts.trace_path set, or SPILLWAY_TRACE=path.json
 * in the environment when spw_optimizer_new() runs, the optimizer records
 * a timeline (steps, gradient copies, pin waits, kernels, parameter
 * copies, the daemon's disk I/O for the session; counters of jobs in
 * flight, pins in flight and region slots in use) as Chrome trace-event
 * JSON: what happened since the start of the last SPILLWAY_TRACE_STEPS
 * steps (default 20), within the last SPILLWAY_TRACE_EVENTS events
 * (default 200000, the memory bound), written to path at
 * spw_optimizer_free() and by this call (through path.tmp, renamed).
 * Returns 0, -EINVAL when o is NULL, -ENODATA when tracing is off, or the
 * write's -errno. */
SPW_EXPORT int spw_trace_flush(spw_optimizer *o);

#ifdef __cplusplus
}
#endif

#endif
