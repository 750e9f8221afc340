"""Stop sequences applied by the gateway, for upstreams that cannot apply them (a Responses
server, Codex). Pure and synchronous.

The answer ends just before the first stop sequence met; the sequence is not sent (the scanner
says which it was, `matched`: the Messages face answers with it). Text that could be the start
of a sequence is held back until the next delta says whether it is, so a sequence split across
deltas is still found, and no text after it is ever released.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["StopScanner"]


class StopScanner:
    def __init__(self, sequences: list[str]) -> None:
        self._sequences = [s for s in sequences if s]
        self._firsts = frozenset(s[0] for s in self._sequences)
        self._held = ""
        self.stopped = False
        self.matched: str | None = None  # the sequence met, once `stopped`

    def passes(self, text: str) -> bool:
        """Whether `text` goes through unchanged: nothing is held and no sequence can start in
        it (the common delta; then `feed` need not be called)."""
        if self._held or self.stopped:
            return False
        firsts = self._firsts
        return not any(first in text for first in firsts)

    def passing(self, texts: Sequence[str], end: int) -> int:
        """How many of `texts[:end]`, from the first, `passes` says yes to (it changes no
        state)."""
        if self._held or self.stopped:
            return 0
        firsts = self._firsts
        for index in range(end):
            text = texts[index]
            if any(first in text for first in firsts):
                return index
        return end

    def feed(self, text: str) -> str:
        """The text to release now; sets `stopped` when a sequence was met (nothing after it
        is released, now or later)."""
        if self.stopped:
            return ""
        buffer = self._held + text
        found = [(at, sequence) for sequence in self._sequences if (at := buffer.find(sequence)) >= 0]
        if found:
            cut, self.matched = min(
                found, key=lambda hit: hit[0]
            )  # the first met; of those, the first listed
            self.stopped = True
            self._held = ""
            return buffer[:cut]
        keep = self._partial_suffix(buffer)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep]

    def finish(self) -> str:
        """The end of the answer: what was held was no sequence after all."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _partial_suffix(self, text: str) -> int:
        """The length of the longest end of `text` that a sequence starts with (shorter than
        the sequence: a whole one was looked for already)."""
        longest = 0
        for sequence in self._sequences:
            for size in range(min(len(sequence) - 1, len(text)), longest, -1):
                if sequence.startswith(text[len(text) - size :]):
                    longest = size
                    break
        return longest
