"""trainer.strategy.host_mmap_threshold_mib: freed host tensors above the threshold leave the RSS at once."""

import subprocess
import sys

import pytest

from lit_rlhf.distributed.host_memory import check_mmap_threshold, libc
from lit_rlhf.errors import ConfigError

# Frees 48 tensors of 8 MiB, each followed in memory by a live one of 512 KiB (so glibc cannot give them back by
# shrinking its heap's top), and prints how many MiB of RSS the free returned. glibc's dynamic threshold has first
# been raised past 8 MiB by freeing one such tensor, as a run's first steps do.
FRAGMENTED_FREE = """
import sys, torch
from pathlib import Path
from lit_rlhf.distributed.host_memory import set_host_mmap_threshold
def rss():
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024
if sys.argv[1] != "default":
    set_host_mmap_threshold(int(sys.argv[1]))
warm = torch.ones(2**21)  # 8 MiB, freed
del warm
tensors, pinned = [], []
for _ in range(48):
    tensors.append(torch.ones(2**21))
    pinned.append(torch.ones(2**17))  # 512 KiB: heap memory whatever the threshold
before = rss()
del tensors
print(round(before - rss()))
"""


def returned_mib(threshold: str) -> int:
    result = subprocess.run([sys.executable, "-c", FRAGMENTED_FREE, threshold], capture_output=True, text=True,
                            check=True)
    return int(result.stdout.split()[-1])


@pytest.mark.integration
@pytest.mark.skipif(libc() is None, reason="glibc's allocator only")
def test_freed_tensors_leave_the_rss_with_a_threshold_below_their_size():
    assert returned_mib("default") < 100  # of 384 MiB freed: glibc keeps them for reuse
    assert returned_mib("1") > 350  # each was mapped on its own and is unmapped when freed


@pytest.mark.parametrize("value", [0, 33, -1, 1.5, True, "1"])
def test_a_threshold_outside_1_to_32_mib_is_one_line(value):
    with pytest.raises(ConfigError, match=r"host_mmap_threshold_mib=.* must be a whole number of MiB from 1 to 32"):
        check_mmap_threshold(value)


def test_null_keeps_glibcs_default():
    assert check_mmap_threshold(None) is None
