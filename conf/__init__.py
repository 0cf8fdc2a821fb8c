"""conveyor's Hydra config groups (YAML); a package so that the wheel carries them as conveyor.conf."""
