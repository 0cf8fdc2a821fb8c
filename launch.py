"""`python launch.py model=sage data=products ...` from a checkout: the `conveyor` command
(conveyor/cli.py), which an installed wheel provides."""
from conveyor.cli import main

if __name__ == "__main__":
    main()
