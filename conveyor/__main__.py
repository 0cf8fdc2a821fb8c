"""`python -m conveyor ...`: the `conveyor` command, where its script is not on PATH (or under
`torchrun -m conveyor`)."""
from conveyor.cli import main

if __name__ == "__main__":
    main()
