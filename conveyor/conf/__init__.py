"""conveyor's Hydra config groups (YAML); a package so that the wheel carries them as conveyor.conf."""
from conveyor.core.names import require_own_name

require_own_name(__name__, "conveyor.conf")
