"""Checks shared by the tests that run the CLI as a real process."""

from __future__ import annotations

import subprocess


def one_line_error(result: subprocess.CompletedProcess, code: int) -> str:
    """The run ended with `code` and said exactly one `omg-ledger: error:` line, no traceback."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("omg-ledger: error: "), result.stderr
    return lines[0]


class PausedCommand:
    """The command line run by ``script`` (``python -c``) as a real process that says
    ``word`` on a pipe where it pauses, then waits on another until told to go on:
    ``script`` reads those two pipes' descriptors from argv[1] and argv[2]."""

    def __init__(self, script: str, word: bytes, *args: str, new_session: bool = False) -> None:
        import os
        import sys

        said, says = os.pipe()
        resume, self._told = os.pipe()
        self._word = word
        self.proc = subprocess.Popen([sys.executable, "-c", script, str(says), str(resume), *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     pass_fds=[says, resume], start_new_session=new_session)
        os.close(says)
        os.close(resume)
        self._said = os.fdopen(said, "rb")

    def paused(self) -> None:
        assert self._said.readline() == self._word + b"\n", self.proc.communicate(timeout=60)

    def resume(self) -> None:
        import os

        os.write(self._told, b"x")

    def finish(self) -> tuple[int, str, str]:
        import os

        try:
            out, err = self.proc.communicate(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._said.close()
            os.close(self._told)
        return self.proc.returncode, out, err
