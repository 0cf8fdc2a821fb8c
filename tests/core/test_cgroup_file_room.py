"""A memory cgroup's room counts the clean pages of the files it has read (a mapped graph's
features and CSC) as room: they are dropped under pressure and read again, not a need."""
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO, memory_cgroup

LIMIT = 512 << 20
FILE = 128 << 20

# Inside the cgroup: read the file twice (the second read makes its pages active), then print the
# room and the cgroup's counters.
READ_TWICE = """
import sys
from pathlib import Path
from conveyor.core.memory import cgroup_room
for _ in range(2):
    with open(sys.argv[1], "rb", buffering=0) as f:
        while f.read(1 << 20):
            pass
stat = dict(line.split() for line in Path(sys.argv[2], "memory.stat").read_text().splitlines())
usage = int(Path(sys.argv[2], "memory.usage_in_bytes").read_text())
print(cgroup_room(), usage, stat["total_active_file"], stat["total_inactive_file"], stat["total_rss"])
"""



def test_the_files_pages_a_cgroup_read_are_room_active_or_not(tmp_path):
    data = tmp_path / "x.bin"
    data.write_bytes(os.urandom(1 << 20) * (FILE >> 20))
    fd = os.open(data, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # out of the page cache: the cgroup's read charges it
    os.close(fd)
    folder = memory_cgroup(LIMIT)
    if folder is None:
        pytest.skip("needs root and a cgroup v1 memory controller")
    try:
        inside = subprocess.run(["sh", "-c", f"echo $$ > {folder}/cgroup.procs && exec {sys.executable} -c "
                                 f"'{READ_TWICE}' {data} {folder}"], capture_output=True, text=True, timeout=120,
                                cwd=REPO)
    finally:
        folder.rmdir()
    assert inside.returncode == 0, inside.stderr[-2000:]
    room, usage, active, inactive, rss = map(int, inside.stdout.split())
    assert active > FILE // 4  # read twice: much of the file is on the active list
    assert usage > FILE // 2  # and charged to the cgroup
    # Every clean file page is room: the limit less what is not a file's (the interpreter's own).
    assert abs(room - (LIMIT - usage + active + inactive)) < 8 << 20  # counters read a moment apart
    assert room > LIMIT - rss - (64 << 20) > LIMIT - usage + inactive  # more than inactive pages alone
