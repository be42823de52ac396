"""The optimizer state dtype option (spw_optimizer_opts.state_dtype): what
Optimizer and OffloadAdamW accept, checked in one place. docs/pipeline.md,
State dtypes, says what each does to accuracy and bytes."""

from . import _lib as L

# name -> enum spw_state_dtype
STATE_DTYPES = {"fp32": L.STATE_F32, "bf16": L.STATE_BF16, "int8": L.STATE_INT8}


def check(state_dtype):
    """The enum value of state_dtype; ValueError for an unknown one."""
    if state_dtype not in STATE_DTYPES:
        raise ValueError("state_dtype must be 'fp32', 'bf16' or 'int8', not %r" % (state_dtype,))
    return STATE_DTYPES[state_dtype]
