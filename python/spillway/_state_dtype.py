"""The optimizer state dtype option (spw_optimizer_opts.state_dtype): what
Optimizer and OffloadAdamW accept, checked in one place. docs/pipeline.md,
State dtypes, says what each does to accuracy and bytes."""

import os

from . import _lib as L

# name -> enum spw_state_dtype
STATE_DTYPES = {"fp32": L.STATE_F32, "bf16": L.STATE_BF16, "int8": L.STATE_INT8}

# name -> enum spw_grad_store (spw_optimizer_opts.grad_store): the type of
# the gradient store exact mode keeps a step's gradients in. bf16 halves
# it, and is exact for bf16 gradients (a bf16 model's); docs/pipeline.md.
GRAD_STORE_DTYPES = {"fp32": L.GRAD_STORE, "bf16": L.GRAD_STORE_BF16}


# name -> enum spw_master_dtype (spw_optimizer_opts.master_dtype): the
# type of the master weights in the tiers; bf16 rounds each update
# stochastically (docs/pipeline.md, bf16 master weights).
MASTER_DTYPES = {"fp32": L.MASTER_F32, "bf16": L.MASTER_BF16}


def check_master(name):
    """The enum value of a master_dtype name, or ValueError."""
    if name not in MASTER_DTYPES:
        raise ValueError("master_dtype must be 'fp32' or 'bf16', not %r" % (name,))
    return MASTER_DTYPES[name]


def check_grad_store(name):
    """The enum value of a grad_store_dtype name, or ValueError."""
    if name not in GRAD_STORE_DTYPES:
        raise ValueError("grad_store_dtype must be 'fp32' or 'bf16', not %r" % (name,))
    return GRAD_STORE_DTYPES[name]


# Chunks (page_size / 4 elements) a moment page holds (client/optimizer-private.h).
_PER_PAGE = {"fp32": 1, "bf16": 2}


def _moment_pages(numel, psz, chunks, state_dtype):
    """Pages of one moment tensor: int8 codes are numel bytes (their
    scales live in the optimizer's scale pages, scale_pages())."""
    if state_dtype == "int8":
        return -(-numel // psz)
    return -(-chunks // _PER_PAGE[state_dtype])


def pages(numel, psz, k, state_dtype, master_dtype="fp32"):
    """Pages one tensor of numel elements takes with k roles (master, the
    two moments, and in exact mode the gradient store): the moments' pages
    shared by 1, 2 or (int8 codes) 4 chunks, bf16 master weights' by 2."""
    chunks = -(-numel * 4 // psz)
    master = chunks if master_dtype == "fp32" else -(-chunks // 2)
    return master + chunks * (k - 3) + 2 * _moment_pages(numel, psz, chunks, state_dtype)


def scale_pages(numels, psz, state_dtype):
    """The optimizer's int8 scale pages for tensors of these sizes: 128
    chunks' scales a page (client/optimizer-private.h, role_at)."""
    if state_dtype != "int8":
        return 0
    chunks = sum(-(-n * 4 // psz) for n in numels)
    return -(-chunks // 128)


def state_pages(numels, psz, k, state_dtype, master_dtype="fp32"):
    """Pages of every tensor's state (pages()) and the scale pages."""
    return (sum(pages(n, psz, k, state_dtype, master_dtype) for n in numels)
            + scale_pages(numels, psz, state_dtype))


# Page sizes OffloadAdamW chooses from (powers of two), and the share of the
# cpu tier's state that rounding each tensor up to whole pages may waste.
PAGE_MIN, PAGE_MAX, CPU_WASTE = 64 << 10, 4 << 20, 0.02


def page_size(numels, k, state_dtype, tier, master_dtype="fp32"):
    """The page size for tensors of numels elements with k roles. Larger
    pages mean fewer chunks (jobs, pins) per step; each tensor's last page
    is partly empty. The nvme tier keeps to about 4096 pages. The cpu
    tier's pages are memory the trainer's host holds: the largest size
    whose rounding wastes at most CPU_WASTE of the state (the bench's 162M
    GPT: 128 KiB, 1.9% or 37 MB over p, m and v, where 4096 pages would take
    512 KiB in overlapped and 1 MiB in exact mode, wasting 9% and 18%).
    Smaller pages cost speed: each chunk is a job of a few ring operations
    (measured there: 64 KiB pages, 10k jobs a step, made the step 1.65x
    slower than 256 KiB pages, for 0.015x torch's memory)."""
    env = os.environ.get("SPILLWAY_PAGE_SIZE")  # a fixed choice (benchmarks, tuning)
    if env:
        return int(env)
    total = sum(numels) * 4
    psz = PAGE_MIN
    if tier != "cpu":
        while psz < PAGE_MAX and total * k / psz > 4096:
            psz *= 2
        return psz
    exact = total * k
    while psz < PAGE_MAX:
        wider = 2 * psz
        if sum(pages(n, wider, k, state_dtype, master_dtype) for n in numels) * wider - exact > CPU_WASTE * exact:
            break
        psz = wider
    return psz


def check(state_dtype):
    """The enum value of state_dtype; ValueError for an unknown one."""
    if state_dtype not in STATE_DTYPES:
        raise ValueError("state_dtype must be 'fp32', 'bf16' or 'int8', not %r" % (state_dtype,))
    return STATE_DTYPES[state_dtype]
