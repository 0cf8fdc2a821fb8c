"""`python launch.py model=sage data=products ...`: compose the Hydra config, hand it to the trainer.

Bad input (unknown names, a missing dataset, invalid keys) ends in one paragraph on stderr and
exit code 2, not a traceback; `python launch.py --help` lists the groups and keys.
"""
import sys

import hydra
from omegaconf import DictConfig

from partition import ConveyorError


@hydra.main(config_path="conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    from trainer import run

    try:
        run(cfg)
    except ConveyorError as error:
        print(f"conveyor: error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
