# SPDX-License-Identifier: MIT
"""OffloadAdamW.attach_ddp: DistributedDataParallel's averaged gradients."""


def attach(opt, ddp_model):
    raise NotImplementedError("OffloadAdamW.attach_ddp is not implemented yet; pass "
                              "data_parallel_group='world' and train the module without DDP")
