"""The heap trimming of long-running services (workloadmap/trimming.py), in fresh interpreters: a
heap a burst fragmented is handed back once, live growth is not trimmed, the thread starts once."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from workloadmap import trimming

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(trimming.free_heap() is None, reason="not glibc: nothing to trim with")


def run(code: str) -> dict:
    """`code`'s last line's JSON, run in a fresh interpreter (a heap of its own)."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout.splitlines()[-1])


PRELUDE = """
    import json, random
    from workloadmap import trimming

    def rss():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 >> 20

    def burst(mib, keep_every):
        # what a backlog's fetches leave: values of a few KiB, one in `keep_every` kept (a
        # fragmented heap), `mib` MiB in all
        kept, freed, rnd, size = [], [], random.Random(7), 0
        for n in range(10 ** 7):
            if size >= mib << 20:
                break
            value = bytes(rnd.randint(600, 4000))
            size += len(value)
            (kept if n % keep_every == 0 else freed).append(value)
        return kept, freed
"""


def test_a_freed_burst_is_handed_back_once():
    result = run(PRELUDE + """
    looks = trimming.Trimming()
    kept, freed = burst(256, 50)
    before = rss()
    del freed
    freed_rss = rss()
    first = looks.look()
    trimmed_rss = rss()
    print(json.dumps({"before": before, "freed": freed_rss, "first": first, "trimmed": trimmed_rss,
                      "second": looks.look(), "trims": looks.trims}))
    """)
    assert result["freed"] > result["before"] - 64, result   # freeing alone gave back little
    assert result["first"] and result["trims"] == 1, result
    assert result["trimmed"] < result["freed"] - 128, result   # most of the 256 MiB went back
    assert not result["second"], result   # nothing freed since: not trimmed again


def test_live_growth_is_not_trimmed():
    result = run(PRELUDE + """
    looks = trimming.Trimming()
    kept, freed = burst(128, 1)   # every value kept: growth of the live set
    print(json.dumps({"look": looks.look(), "trims": looks.trims}))
    """)
    assert result == {"look": False, "trims": 0}


def test_small_frees_wait_for_enough():
    result = run(PRELUDE + """
    looks = trimming.Trimming(grown=64 << 20)
    kept, freed = burst(16, 50)
    del freed
    print(json.dumps({"look": looks.look()}))
    """)
    assert result == {"look": False}


def test_one_thread_per_process():
    result = run("""
    import json, threading
    from workloadmap import trimming
    first, second = trimming.trim_heap_in_the_background(), trimming.trim_heap_in_the_background()
    print(json.dumps({"same": first is second, "alive": first.is_alive(), "daemon": first.daemon,
                      "named": [t.name for t in threading.enumerate()].count("heap-trimming")}))
    """)
    assert result == {"same": True, "alive": True, "daemon": True, "named": 1}
