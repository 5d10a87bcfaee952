"""The `tpu_dist` backend's error types (part of the `torchtpu.errors` tree: both derive from
`TorchTPUError`), so a caller tells a desync from a lost peer by type."""

from __future__ import annotations

import torch.distributed as dist

from torchtpu.errors import TorchTPUError


class CollectiveMismatchError(TorchTPUError):
    """Ranks of one group called different collectives (op, shapes, dtypes or reduce op) at the
    same sequence number: `op` and `seq` of this rank's call, `rank` (this rank's number in
    the group), `mismatched` ({group rank: what that rank called})."""

    kind = "collective_mismatch"

    def __init__(self, message: str, op: str, rank: int, seq: int, mismatched: dict[int, str]):
        super().__init__(message)
        self.op, self.rank, self.seq, self.mismatched = op, rank, seq, dict(mismatched)


class CollectiveError(TorchTPUError, dist.DistBackendError):
    """A collective that failed in its transport: a peer that died or did not arrive within the
    process group's timeout. Also torch's `DistBackendError`, what torch's own backends raise
    for this. `op`, `seq`, `rank` as above."""

    kind = "collective_failed"

    def __init__(self, message: str, op: str, rank: int, seq: int):
        super().__init__(message)
        self.op, self.rank, self.seq = op, rank, seq
