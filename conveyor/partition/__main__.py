"""`python -m conveyor.partition` was the offline partitioning command; it is now `conveyor
partition ...` (or `python -m conveyor partition ...`): composing the run's config is the entry
point's job, and the partition stage knows nothing of the entry points above it."""
import sys

if __name__ == "__main__":
    args = " ".join(sys.argv[1:]) or "data=NAME num_parts=K"
    print(f"conveyor: error: offline partitioning is `conveyor partition {args}` (or `python -m conveyor "
          f"partition ...`); python -m conveyor.partition no longer runs it.", file=sys.stderr)
    sys.exit(2)
