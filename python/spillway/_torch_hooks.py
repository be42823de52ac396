# SPDX-License-Identifier: MIT
"""The autograd hooks OffloadAdamW puts on each parameter: held weakly, so
a hook never keeps an optimizer or a parameter alive."""
from . import SpillwayError
from ._torch_persist import hook_failed


def remove_hooks(e):
    for h in e.hooks:
        h.remove()
    e.hooks = []
    e.acc = None


def make_accumulated_hook(opt_ref, entry_ref):
    def hook(grad_inputs, grad_outputs):
        opt, e = opt_ref(), entry_ref()
        if opt is None or e is None or getattr(opt, "_gone", None) is not None:
            return  # the daemon went away this step: step() reconnects
        try:
            opt._on_accumulated(e)
        except SpillwayError as err:
            if not hook_failed(opt, err):
                raise
    return hook


def make_average_hook(opt_ref, entry_ref):
    def hook(grad):
        opt, e = opt_ref(), entry_ref()
        if opt is None or e is None or opt.data_parallel_group in (None, False):
            return None
        return opt._on_grad(e, grad)
    return hook
