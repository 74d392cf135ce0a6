"""The rollout's progress on the console while `pulumi up` runs (the state and its text: ``progress.py``).

On a terminal: a live table (rich), redrawn twice a second from the engine's first event on (what comes before,
the lab's own set-up, prints as usual), left on screen when the run ends. Anywhere else
(CI, a pipe, a log file): one line per change, no cursor codes. Pulumi's own output goes to a log file, whose
path is printed first; ``verbose`` shows it on the console as well (then the progress comes as lines).
While a host converges, its state says what the converge is doing (``converging › draining``): read every second
from the directory the converges write it to (``rollout/phases.py``), which the engine cannot see inside one step.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO

from pulumi.automation import EngineEvent
from rich.console import Console
from rich.live import Live
from rich.text import Text

from vllm_fleet.rollout.phases import read_activities
from vllm_fleet.rollout.progress import Progress, change_lines, render


class RolloutWatch:
    """``on_event`` and ``on_output`` for ``deploy.up``; use it as a context manager around the run."""

    def __init__(
        self,
        console: Console,
        log_path: Path,
        *,
        verbose: bool = False,
        clock: Callable[[], float] = time.time,
        phase_dir: Path | None = None,
        poll_s: float = 1.0,
    ) -> None:
        self.console, self.log_path, self.verbose, self.clock = console, log_path, verbose, clock
        self.phase_dir, self.poll_s = phase_dir, poll_s
        """Where the converges write what they are doing (``rollout/phases.py``), read every ``poll_s``."""
        self.progress = Progress()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self._log: IO[str] | None = None
        self._live: Live | None = None
        self._tty = console.is_terminal and not verbose

    def __enter__(self) -> RolloutWatch:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # 0600, like the run's other private files: Pulumi's output carries commands' error tails.
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # a log left by an earlier run keeps no wider mode
        self._log = os.fdopen(fd, "w", encoding="utf-8")
        self._say(f"pulumi's own output: {self.log_path}")
        if self.phase_dir is not None:
            self._poller = threading.Thread(target=self._poll, name="rollout-phases", daemon=True)
            self._poller.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._poller is not None:
            self._poller.join()
        self.finish(stopped=exc is not None)
        if self._live is not None:
            self._live.stop()  # the last table stays on screen
        if self._log is not None:
            self._log.close()

    def on_event(self, event: EngineEvent) -> None:
        """The engine's events (called from the Automation API's reader thread)."""
        with self._lock:
            changed = self.progress.apply(event)
            lines = [] if self._tty else change_lines(self.progress, changed, self.clock())
        if self._tty and self._live is None:
            self._live = Live(console=self.console, get_renderable=self._table, refresh_per_second=2)
            self._live.start()
        for line in lines:
            self._say(line)

    def on_output(self, line: str) -> None:
        """Pulumi's own output: to the log file (and the console when verbose)."""
        text = line.rstrip("\n")
        if self._log is not None:
            self._log.write(text + "\n")
            self._log.flush()
        if self.verbose:
            self._say(text)

    def finish(self, *, stopped: bool) -> None:
        """The run ended (``stopped``: it failed); without the engine's summary, hosts never started are untouched."""
        with self._lock:
            now = self.clock()
            changed = self.progress.finish(now, stopped=stopped)
            lines = [] if self._tty else change_lines(self.progress, changed, now)
        for line in lines:
            self._say(line)

    def poll_phases(self) -> None:
        """Read the converges' activities once (the poller does, every ``poll_s``)."""
        if self.phase_dir is None:
            return
        found = read_activities(self.phase_dir)
        with self._lock:
            changed = self.progress.note_activities(found)
            lines = [] if self._tty else change_lines(self.progress, changed, self.clock())
        for line in lines:
            self._say(line)

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll_phases()

    def _table(self) -> Text:
        with self._lock:
            if not self.progress.hosts:
                return Text("")
            return Text("\n".join(render(self.progress, self.clock())))

    def _say(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)
