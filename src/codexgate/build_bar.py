"""The embedded model's one-time build as a progress bar on the terminal (rich), for `serve`
run by a person: shown only when stderr is a terminal (elsewhere the log's lines every 10% are
the progress). While the bar is up, the process's log lines print above it instead of through
it: every handler writing to stderr is pointed at rich's proxy of stderr, and back after."""

from __future__ import annotations

import logging
import sys
from typing import IO, Any

from rich.console import Console
from rich.file_proxy import FileProxy
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn, TimeElapsedColumn

from codexgate.backends.llama_build import BuildProgress

__all__ = ["BuildBar", "build_bar_for_terminal"]


def build_bar_for_terminal() -> BuildBar | None:
    """A bar when stderr is a terminal, else None."""
    return BuildBar() if sys.stderr.isatty() else None


class BuildBar:
    """`update(progress)` as the build goes, `update(None)` when it is over (done or not)."""

    def __init__(self, console: Console | None = None) -> None:
        self._console = console or Console(stderr=True)
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._moved: list[tuple[logging.StreamHandler[Any], IO[str]]] = []
        self._stderr: Any = sys.stderr  # what rich's proxy replaces while the bar is up

    def update(self, progress: BuildProgress | None) -> None:
        if progress is None or progress.phase == "done":
            self._stop()
            return
        try:
            self._show(progress)
        except Exception:
            self._stop()  # the terminal is gone, most likely: no bar, the log still says it
            raise

    def _show(self, progress: BuildProgress) -> None:
        description = f"embedded model, built once for this user: {progress.phase}"
        if self._progress is None:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                TimeElapsedColumn(),
                console=self._console,
                transient=True,
            )
            self._stderr = sys.stderr
            self._progress.start()
            self._task = self._progress.add_task(description, total=100)
            self._move_log_handlers()
        assert self._task is not None
        self._progress.update(self._task, completed=progress.percent, description=description)

    def _move_log_handlers(self) -> None:
        """Log lines go through rich's stderr proxy (installed by start()) while the bar is up."""
        original = sys.__stderr__
        if original is None:
            return
        loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
        for logger in loggers:
            for handler in getattr(logger, "handlers", ()):
                if isinstance(handler, logging.StreamHandler) and handler.stream is original:
                    self._moved.append((handler, original))
                    handler.setStream(sys.stderr)

    def _stop(self) -> None:
        if self._progress is None:
            return
        for handler, stream in self._moved:
            handler.setStream(stream)
        self._moved.clear()
        progress, self._progress = self._progress, None
        try:
            progress.stop()
        finally:
            if isinstance(sys.stderr, FileProxy):  # left in place by a stop that failed
                sys.stderr = self._stderr
