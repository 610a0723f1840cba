"""Atomic checkpoint writes: Lightning's checkpoint IO that never leaves a truncated checkpoint behind.

``python -m infgrpo.fit`` puts :class:`AtomicCheckpointIO` in place of Lightning's plain ``TorchCheckpointIO``; the
write itself is :func:`~infgrpo.runtime.atomic_save.atomic_torch_save`.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.plugins.io import TorchCheckpointIO

from infgrpo.runtime.atomic_save import atomic_torch_save


def is_local(path: Any) -> bool:
    """Whether ``path`` is on the local filesystem (a plain path or ``file://``), not e.g. ``s3://``."""
    text = str(path)
    return "://" not in text or text.startswith("file://")


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint IO whose saves are atomic on a local filesystem.

    Remote paths (``s3://``, ``gs://``, ...) go through Lightning's own fsspec writer, as before.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        """Writes ``checkpoint`` to ``path``: atomically when local, else with Lightning's fsspec writer."""
        if storage_options is not None or not is_local(path):
            super().save_checkpoint(checkpoint, path, storage_options)  # raises on storage_options, as Lightning
            return
        atomic_torch_save(checkpoint, str(path).removeprefix("file://"))
