"""Running one scenario in a fresh child process: wall time, peak RSS, output."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Sample:
    wall: float  # seconds, fork to reap
    rss_mb: float  # the child's peak resident set (ru_maxrss), MiB
    cpu: float  # the child's user + system CPU seconds: barely moved by other load on the machine
    rc: int
    stdout: bytes
    stderr: str


# A child's ru_maxrss includes the RSS of the process it was forked from (Linux keeps the
# high-water mark across fork and exec), and this suite's own process holds homes and
# SQLAlchemy. So every scenario is forked by a tiny launcher (`python -S`, ~10 MiB) that
# times it and reaps it with wait4; its report comes back on a file.
_LAUNCHER = r"""
import json, os, sys, time
argv = json.loads(sys.argv[1])
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"cannot run {argv[0]}: {exc}\n")
    os._exit(127)
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(sys.argv[2], "w") as f:
    json.dump({"wall": wall, "status": status, "maxrss": usage.ru_maxrss,
               "cpu": usage.ru_utime + usage.ru_stime}, f)
"""


def run_child(argv: list[str], *, cwd: Path | None = None, env: dict | None = None,
              timeout: float = 3600.0) -> Sample:
    """Run ``argv`` in a fresh process; its wall time, CPU time and peak RSS, from wait4."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r", suffix=".json") as report:
        proc = subprocess.Popen([sys.executable, "-S", "-c", _LAUNCHER, json.dumps(argv), report.name],
                                cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True)
        timer = threading.Timer(timeout, lambda: _kill_group(proc.pid))
        timer.start()
        try:
            proc.wait()
        finally:
            timer.cancel()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read().decode("utf-8", "replace")
        try:
            result = json.loads(Path(report.name).read_text())
        except ValueError:
            return Sample(0.0, 0.0, 0.0, proc.returncode or 1, stdout, stderr + "\n(launcher failed)")
        # ru_maxrss is KiB on Linux, bytes on macOS.
        rss = result["maxrss"] / (1024 * 1024) if sys.platform == "darwin" else result["maxrss"] / 1024
        rc = os.waitstatus_to_exitcode(result["status"])
        return Sample(result["wall"], rss, result["cpu"], rc, stdout, stderr)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def machine() -> dict:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        cpu = platform.processor() or "unknown"
    try:
        nproc = len(os.sched_getaffinity(0))
    except AttributeError:
        nproc = os.cpu_count() or 0
    memory = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    memory = round(int(line.split()[1]) / 1024 / 1024, 1)
                    break
    except OSError:
        pass
    return {
        "nproc": nproc,
        "cpu": cpu,
        "memory_gib": memory,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "os": f"{platform.system()} {platform.release()}",
        "sqlite": __import__("sqlite3").sqlite_version,
    }
