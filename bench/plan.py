"""What bench/run.py runs: the sizes of a full and a quick run, and the shapes of the answers."""

from __future__ import annotations

from dataclasses import dataclass

from workload import Scenario

MB = 1024 * 1024


@dataclass(frozen=True)
class Plan:
    quick: bool
    c1_requests: int
    c1_streamed: int
    c64_streams: int
    c64_seconds: float
    paced_seconds: float
    mem_streams: int
    mem_chunks: int
    big_requests: int
    server_streams: int

    @classmethod
    def make(cls, quick: bool) -> Plan:
        if quick:
            return cls(True, 100, 40, 600, 8.0, 3.0, 500, 30, 12, 300)
        return cls(False, 300, 200, 3000, 25.0, 8.0, 500, 100, 50, 1000)


TYPICAL = Scenario("text", 100, 4, 0)  # a 100-delta answer, sent back to back ("burst")
STREAMED = Scenario("text", 50, 4, 1, 5)  # 5 ms "prefill", then 50 deltas 1 ms apart, as a model streams
PACED = Scenario("text", 100, 4, 10)  # 100 deltas, one every 10 ms
BIG = Scenario("tool", 100, 4, 1, 5)  # after a 1 MB history: prefill, 100 deltas 1 ms apart, a shell call
