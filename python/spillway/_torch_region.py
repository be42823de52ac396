# SPDX-License-Identifier: MIT
"""The region OffloadAdamW asks spillwayd for (spillway.torch): what the
pipeline needs, and on the nvme tier read-ahead beyond it when the daemon's
caps allow."""

import errno

from . import Session, SpillwayError, _torch_persist as _persist

# Read-ahead on the NVMe tier: overlapped mode updates during backward, so
# the disk would sit idle through forward unless the region can take what
# backward reads first. Half the state, at most 1 GiB (spillway-bench torch,
# 162M GPT, overlapped nvme: 32 MiB of region 1.01-1.10x torch's step, 1 GiB
# 0.80-0.86x, for 0.90x torch's memory instead of 0.60x).
READAHEAD_MAX = 1 << 30


def readahead_bytes(state, psz):
    """The region to ask for on the nvme tier: half of the state's bytes,
    at most READAHEAD_MAX, in whole pages."""
    return min(state // 2, READAHEAD_MAX) // psz * psz


def open_session(opt, region, minimum, psz, swap):
    """opt's session, with region bytes if the daemon's caps allow them,
    else with the minimum the pipeline needs: read-ahead is worth having,
    not worth failing for."""
    def attach(r):
        return Session(opt._session_name, region_bytes=r, page_size=psz, socket=opt._socket,
                       reply_timeout_ms=opt._timeout_ms(), swap_bytes=swap, **_persist.session_args(opt))
    if region > minimum:
        try:
            return attach(region)
        except SpillwayError as e:
            if e.errno not in (errno.EDQUOT, errno.ENOSPC, errno.ENOMEM):
                raise
    return attach(minimum)
