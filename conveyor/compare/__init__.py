"""The comparison with PyG (`mode=compare`): conveyor beside a plain PyG reference on the same data,
config and seeds. Above the trainer: it runs `conveyor.trainer.run.train` and its own reference."""
from conveyor.core.names import require_own_name

require_own_name(__name__, "conveyor.compare")
