"""Start broker JVMs in their own session and stop them by pid, safely across processes.

A pid recorded in ``cluster.json`` may be read by another process hours later, when the broker
is long gone and the number reused by something else. Every broker therefore carries a marker
(``-Dclustermq.node=<node dir>``) on its command line, and a pid is only signalled when
``/proc/<pid>/cmdline`` still carries it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from clustermq.devtools.localcluster.harness_paths import jdk_tool

MARKER_PROPERTY = "clustermq.node"

# Children started by this process, with their argument lists, so they can be reaped (a killed
# child stays a zombie, and looks alive to kill(pid, 0), until its parent waits for it).
_children: dict[int, tuple[subprocess.Popen[bytes], tuple[str, ...]]] = {}


def marker_arg(node_dir: Path) -> str:
    """The JVM argument that identifies the broker of ``node_dir``."""
    return f"-D{MARKER_PROPERTY}={node_dir}"


def launch(cmd: list[str], cwd: Path, log_path: Path, env: dict[str, str] | None = None) -> int:
    """Start ``cmd`` in a new session with stdout/stderr appended to ``log_path``; return its pid.

    A new session keeps the broker out of the caller's process group, so Ctrl-C in a terminal or
    pytest's own signal handling does not kill brokers behind the harness's back.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    _children[proc.pid] = (proc, tuple(cmd))
    return proc.pid


def is_running(pid: int | None, marker: str) -> bool:
    """True when ``pid`` is a live (not zombie) broker whose command line carries ``marker``.

    A child of this process is judged by ``poll()`` alone: its pid cannot be reused before we
    reap it, and right after ``Popen`` returns the kernel may still be building the new image,
    when ``/proc/<pid>/cmdline`` reads empty (the close-on-exec pipe that ends ``Popen``'s wait
    closes before the argument area is mapped). On a loaded machine that made a healthy broker
    look "exited during start-up". Other pids are checked by marker, and
    an empty command line (an exec in progress) is read again before it counts as foreign.
    """
    if not pid:
        return False
    child = _children.get(pid)
    if child is not None:
        proc, args = child
        if proc.poll() is None:
            return marker in args
        _children.pop(pid, None)
        return False
    for _ in range(20):
        cmdline = _cmdline(pid)
        if cmdline is None:
            return False
        if cmdline:
            return marker.encode() in cmdline
        time.sleep(0.05)
    return False


def _cmdline(pid: int) -> list[bytes] | None:
    """The argument list of a live, non-zombie ``pid``; None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        # The state follows the parenthesised command name, which may itself contain ')'.
        state = stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3]
        if state in (b"Z", b"X"):
            return None
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except (FileNotFoundError, ProcessLookupError, ValueError, PermissionError):
        # PermissionError: another user's process, certainly not one of ours
        return None
    return [part for part in raw.split(b"\x00") if part]


def wait_exit(pid: int, marker: str, timeout: float) -> bool:
    """Poll until the process is gone; return False if it is still running at the deadline."""
    deadline = time.monotonic() + timeout
    while is_running(pid, marker):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def send_signal(pid: int | None, marker: str, sig: int) -> bool:
    """Signal the process if it is still ours; return whether a signal was sent."""
    if pid is None or not is_running(pid, marker):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def stop(pid: int | None, marker: str, grace: float = 30.0) -> None:
    """SIGTERM, wait up to ``grace`` seconds for a clean shutdown, then SIGKILL.

    A clean shutdown lets KahaDB close its journal; SIGKILL is the fallback so ``down`` always
    ends with no broker left. Does nothing when the process is already gone.
    """
    if pid is None or not send_signal(pid, marker, signal.SIGTERM):
        return
    if wait_exit(pid, marker, grace):
        return
    send_signal(pid, marker, signal.SIGKILL)
    if not wait_exit(pid, marker, 10.0):
        raise RuntimeError(f"process {pid} survived SIGKILL")


def java_executable() -> str:
    """``$JAVA_HOME/bin/java`` when set, else ``java`` from PATH."""
    found = jdk_tool("java")
    if found is None:
        raise RuntimeError("no 'java' on PATH and JAVA_HOME is not set: ActiveMQ needs Java 11+")
    return found


#: a broker node's garbage-collector log, in its node directory
GC_LOG = "gc.log"


def broker_jvm(heap_min: str, heap_max: str, flags: Sequence[str], node_dir: Path,
               properties: Mapping[str, object]) -> list[str]:
    """The start of a broker node's command line: java, its heap, the flavor's JVM flags, its
    garbage-collector log, the marker by which the node's pid is later recognised
    (:func:`marker_arg`) and the node's system properties (where its configuration, data and
    logs live).

    The GC log (``gc.log`` beside ``broker.log``, each pause with its wall-clock time) is there
    for the node that stops answering for a while: it tells a collector's pause from a stall
    elsewhere."""
    gc_log = f"-Xlog:gc:file={node_dir / GC_LOG}:time,uptime"
    return [java_executable(), f"-Xms{heap_min}", f"-Xmx{heap_max}", *flags, gc_log,
            marker_arg(node_dir), *system_properties(properties)]


def system_properties(properties: Mapping[str, object]) -> list[str]:
    """``-Dkey=value`` arguments, one per property (never split or quoted: they go to exec)."""
    return [f"-D{key}={value}" for key, value in properties.items()]
