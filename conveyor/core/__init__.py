"""The bottom of the import order, under every stage: the one error type for bad input
(`errors.py`), how a setting is declared and checked (`fields.py`), the device resolver
(`device.py`), and file safety: no write through a planted link (`links.py`), no read of
anything but a regular file (`regular.py`), sweeping what killed processes left (`leftovers.py`),
which file a tensor is mapped from (`file_maps.py`).
Imports nothing of ours."""
from conveyor.core.errors import ConveyorError
from conveyor.core.names import require_own_name

require_own_name(__name__, "conveyor.core")

__all__ = ["ConveyorError"]
