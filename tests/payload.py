"""A hostile pickle: unpickling it creates a marker file, so a test can tell whether it ran."""
import pickle
from pathlib import Path

import torch


class Payload:
    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")  # runs on unpickling: creates the marker


def plant(path: Path, marker: Path, as_torch_file: bool = True) -> Path:
    """Write the payload to `path`: inside a torch zip file (as `torch.save` writes one), or as a
    bare pickle (as the Planetoid raw files are)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if as_torch_file:
        torch.save({"model": Payload(marker)}, path)
    else:
        path.write_bytes(pickle.dumps(Payload(marker)))
    return path
