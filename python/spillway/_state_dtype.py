"""The optimizer state dtype option (spw_optimizer_opts.state_dtype): what
Optimizer and OffloadAdamW accept, checked in one place. docs/pipeline.md,
State dtypes, says what each does to accuracy and bytes."""

from . import _lib as L

# name -> enum spw_state_dtype
STATE_DTYPES = {"fp32": L.STATE_F32, "bf16": L.STATE_BF16, "int8": L.STATE_INT8}


# Chunks (page_size / 4 elements) a moment page holds (client/optimizer-private.h).
_PER_PAGE = {"fp32": 1, "bf16": 2}


def _moment_pages(numel, psz, chunks, state_dtype):
    """Pages of one moment tensor: int8 codes are numel bytes (their
    scales live in the optimizer's scale pages, scale_pages())."""
    if state_dtype == "int8":
        return -(-numel // psz)
    return -(-chunks // _PER_PAGE[state_dtype])


def pages(numel, psz, k, state_dtype):
    """Pages one tensor of numel elements takes with k roles (master, the
    two moments, and in exact mode the gradient store): the moments' pages
    shared by 1, 2 or (int8 codes) 4 chunks."""
    chunks = -(-numel * 4 // psz)
    return chunks * (k - 2) + 2 * _moment_pages(numel, psz, chunks, state_dtype)


def scale_pages(numels, psz, state_dtype):
    """The optimizer's int8 scale pages for tensors of these sizes: 128
    chunks' scales a page (client/optimizer-private.h, role_at)."""
    if state_dtype != "int8":
        return 0
    chunks = sum(-(-n * 4 // psz) for n in numels)
    return -(-chunks // 128)


def state_pages(numels, psz, k, state_dtype):
    """Pages of every tensor's state (pages()) and the scale pages."""
    return sum(pages(n, psz, k, state_dtype) for n in numels) + scale_pages(numels, psz, state_dtype)


def check(state_dtype):
    """The enum value of state_dtype; ValueError for an unknown one."""
    if state_dtype not in STATE_DTYPES:
        raise ValueError("state_dtype must be 'fp32', 'bf16' or 'int8', not %r" % (state_dtype,))
    return STATE_DTYPES[state_dtype]
