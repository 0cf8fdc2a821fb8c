"""The one exception type for bad user input.

It subclasses ValueError (docs/design.md promises a ValueError for bad seeds) and carries a message
written for the person at the keyboard: what is wrong and how to fix it. `launch.py` prints it as
one paragraph and exits non-zero instead of showing a traceback.
"""


class ConveyorError(ValueError):
    """Bad input, a missing dataset or an invalid configuration; the message says the fix."""
