# SPDX-License-Identifier: MIT
"""Portable checkpoints, from the command line (no daemon needed):

    python -m spillway.checkpoint to-torch DIR OUT.pt
    python -m spillway.checkpoint from-torch IN.pt DIR [--like CKPT]

to-torch: a spillway checkpoint directory (every page's CRC-32C checked)
into a torch file holding a torch.optim.AdamW state_dict and the fp32
master weights; from-torch: such a file back into a checkpoint that
`spillwayctl restore` and spillway.restore() take. The layout of the
file is spillway._portable's docstring (and docs/persistent.md,
"Portable checkpoints").

This module is also what `spillway.checkpoint` names once it is imported
(import spillway.checkpoint, or python -m): it is callable, and a call is
the package's function spillway.checkpoint(session, dir) of old, so
importing it breaks nobody's spillway.checkpoint(...).
"""
import sys
import types

from . import _checkpoint
from ._portable import CheckpointError, from_torch, read_checkpoint, to_torch  # noqa: F401

USAGE = """usage: python -m spillway.checkpoint to-torch DIR OUT.pt
       python -m spillway.checkpoint from-torch IN.pt DIR [--like CKPT]

to-torch    the checkpoint in DIR (spillwayctl checkpoint, OffloadAdamW.save_checkpoint)
            to OUT.pt: {"optimizer": AdamW state_dict, "params": {name: fp32 master},
            "spillway": the session's geometry and layout}
from-torch  IN.pt (as to-torch writes it) to a new checkpoint directory DIR,
            in the settings it recorded;
            --like CKPT: laid out as the spillway checkpoint CKPT (the same
            model, the OffloadAdamW settings wanted: another state_dtype, say)
            is; IN.pt may then be torch's own {"optimizer": AdamW state_dict,
            "params": {name: tensor}}
"""


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    like = None
    if len(argv) == 5 and argv[0] == "from-torch" and argv[3] == "--like":
        like = argv.pop(4)
        argv.pop(3)
    if len(argv) != 3 or argv[0] not in ("to-torch", "from-torch"):
        sys.stderr.write(USAGE)
        return 2
    verb, src, dst = argv
    try:
        if verb == "to-torch":
            doc = to_torch(src, dst)
            n = len(doc["optimizer"]["state"])
            print("%s: step %d, %d parameters (%d with state), state dtype %s -> %s (hyperparameters: %s)"
                  % (src, doc["spillway"]["manifest"]["committed_step"], len(doc["params"]), n,
                     doc["spillway"]["layout"]["state_dtype"], dst, doc["spillway"]["hyperparameters"]))
        else:
            man = from_torch(src, dst, like=like)
            print("%s -> %s: step %d, %d tensors, state dtype %s" % (
                src, dst, man["committed_step"], len(man["tensors"]),
                "of " + like if like else "as recorded"))
    except (CheckpointError, OSError) as e:
        sys.stderr.write("spillway.checkpoint %s: %s\n" % (verb, e))
        return 1
    return 0


class _CallableModule(types.ModuleType):
    """spillway.checkpoint stays the function it was when this module
    replaces it as the package's attribute."""

    def __call__(self, session_name, dir, socket=None, meta=None):
        return _checkpoint.checkpoint(session_name, dir, socket=socket, meta=meta)


sys.modules[__name__].__class__ = _CallableModule
__doc__ = __doc__ + "\nCalled: " + (_checkpoint.checkpoint.__doc__ or "")

if __name__ == "__main__":
    sys.exit(main())
