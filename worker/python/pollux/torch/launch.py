"""Start one training process per GPU of this task, in the job's process group.

    python3 -m pollux.torch.launch [--nproc N] [--rendezvous-timeout S] SCRIPT [ARGS...]

Use it as the task's command (like ``torchrun``). It reads the job's
placement and this group's rank from ``NOMAD_META_pollux_*``
(``pollux.rendezvous``), counts the GPUs Nomad allocated to the task
(NVIDIA_VISIBLE_DEVICES; where no device plugin variable says, as with
Nomad's example file device, the group's entry in ``pollux_placement``;
``--nproc`` overrides), finds the rank-0 group's address (its own ``pollux``
port if it is rank 0, else the Consul rendezvous key), and starts the
processes with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, GROUP_RANK, POLLUX_NUM_NODES, POLLUX_NUM_RESTARTS (and
CUDA_VISIBLE_DEVICES, one allocated GPU each, where GPUs are real).

The processes are forked from the launcher after it imported the
``--preload`` modules (default torch, so that it is imported once, not once
per process; where torch is missing, or with ``--preload ""``, each is a new
interpreter).

SIGTERM and SIGINT are forwarded to every process (the library then saves a
checkpoint and exits). When a process fails, the others are stopped (SIGTERM,
then SIGKILL after --grace seconds) and the launcher exits with the failed
process's status (128 + signal for a signal), so Nomad sees the failure.
Exit status 2: bad input (the message names it); 3: rendezvous failed.
"""

import argparse
import atexit
import importlib
import os
import runpy
import signal
import socket
import subprocess
import sys
import time
import traceback

from pollux import checkpoint, rendezvous
from pollux.consul import Consul

_STARTED = time.time()  # when this launcher started (the children log restart timings with it)

EXIT_USAGE = 2
EXIT_RENDEZVOUS = 3


def _say(msg):
    print("pollux.launch: " + msg, file=sys.stderr, flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _is_loopback(addr: str) -> bool:
    return addr == "localhost" or addr.startswith("127.") or addr == "::1"


def plan(environ, nproc=None, timeout=300.0, consul=None):
    """Work out this group's processes: returns (group, master_addr,
    master_port). Publishes or waits for the rendezvous entry as needed.
    Raises ValueError for bad input, RendezvousError for rendezvous failures."""
    group = rendezvous.group_from_env(environ, nproc)
    if group.num_groups <= 1:
        # One group: the processes meet on this node.
        if environ.get("NOMAD_HOST_PORT_pollux"):
            addr, port = rendezvous.listen_address(environ)
        else:
            addr, port = "127.0.0.1", _free_port()
        return group, addr, port
    if not group.round:
        raise ValueError("%splacement names %d groups but %sround is missing: cannot tell this allocation's round"
                         % (rendezvous.META, group.num_groups, rendezvous.META))
    key = rendezvous.rendezvous_key(environ)
    consul = consul or Consul()
    if group.rank == 0:
        addr, port = rendezvous.listen_address(environ)
        rendezvous.publish(consul, key, group, addr, port, environ.get("NOMAD_ALLOC_ID", ""))
        _say("published %s:%d for round %d at %s" % (addr, port, group.round, key))
        return group, addr, port
    _say("waiting for the rank-0 group's address for round %d at %s (timeout %.0fs)" % (group.round, key, timeout))
    entry = rendezvous.wait(consul, key, group, timeout)
    return group, entry["host"], entry["port"]


def child_env(environ, group, addr, port, local_rank, restarts):
    e = dict(environ)
    e.update({
        "RANK": str(group.offset + local_rank),
        "LOCAL_RANK": str(local_rank),
        "WORLD_SIZE": str(group.world_size),
        "LOCAL_WORLD_SIZE": str(group.local_size),
        "GROUP_RANK": str(group.rank),
        "MASTER_ADDR": addr,
        "MASTER_PORT": str(port),
        "POLLUX_NUM_NODES": str(group.num_groups),
        "POLLUX_NUM_RESTARTS": str(restarts),
        "POLLUX_LAUNCHER_START": "%.6f" % _STARTED,
    })
    gpus = environ.get("NVIDIA_VISIBLE_DEVICES", "")
    ids = [x.strip() for x in gpus.split(",") if x.strip()]
    if ids and gpus.strip().lower() not in ("all", "none", "void") and local_rank < len(ids):
        e["CUDA_VISIBLE_DEVICES"] = ids[local_rank]
    if _is_loopback(addr) and "GLOO_SOCKET_IFNAME" not in e:
        e["GLOO_SOCKET_IFNAME"] = "lo"  # keep gloo's own connections on loopback too
    # The children import pollux from where this launcher was imported.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    e["PYTHONPATH"] = root + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


def _restarts() -> int:
    """Restarts so far: one more than the newest checkpoint's count."""
    try:
        path = checkpoint.latest()
        if path:
            return int(checkpoint.read_meta(path).get("restarts", 0)) + 1
    except (OSError, ValueError, TypeError):
        pass
    return 0


def _status(code: int) -> int:
    return 128 - code if code < 0 else code


class _Forked:
    """A process forked from the launcher, with the part of Popen's
    interface that supervise uses."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, sig):
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self):
        self.send_signal(signal.SIGKILL)


def _fork(script: str, args, env) -> _Forked:
    """Run script in a forked child: it inherits the modules the launcher
    preloaded (importing torch takes seconds, once per process otherwise)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return _Forked(pid)
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [script] + list(args)
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as e:
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                print(e.code, file=sys.stderr)
                code = 1
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - report it as python would, then exit
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def preload(modules) -> bool:
    """Import modules (comma-separated names) into the launcher before
    forking; False if one is missing (then the children are started as new
    interpreters)."""
    for name in [m.strip() for m in modules.split(",") if m.strip()]:
        try:
            importlib.import_module(name)
        except ImportError as e:
            _say("not preloading %s (%s): starting each process as a new interpreter" % (name, e))
            return False
    return True


def supervise(procs, grace: float) -> int:
    """Wait for the processes, forwarding SIGTERM/SIGINT; return the exit status."""
    stopping = {"sig": None, "at": None}

    def forward(sig, _frame):
        stopping["sig"] = sig
        stopping["at"] = stopping["at"] or time.monotonic()
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(sig)
                except OSError:
                    pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    failed = None
    while True:
        alive = [p for p in procs if p.poll() is None]
        if failed is None:
            for p in procs:
                if p.returncode is not None and p.returncode != 0:
                    failed = p
                    if alive:
                        _say("process %d (pid %d) exited with %d; stopping the others" %
                             (procs.index(p), p.pid, _status(p.returncode)))
                        for q in alive:
                            q.send_signal(signal.SIGTERM)
                        stopping["at"] = stopping["at"] or time.monotonic()
                    break
        if not alive:
            break
        if stopping["at"] is not None and time.monotonic() - stopping["at"] > grace:
            for q in alive:
                q.kill()
        time.sleep(0.05)
    if failed is not None:
        return _status(failed.returncode)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m pollux.torch.launch",
                                 description="Start one training process per GPU of this Nomad task.")
    ap.add_argument("--nproc", type=int, default=None, help="processes to start (default: the GPUs Nomad allocated)")
    ap.add_argument("--rendezvous-timeout", type=float,
                    default=float(os.environ.get("POLLUX_RENDEZVOUS_TIMEOUT", "300")),
                    help="seconds to wait for the rank-0 group (default POLLUX_RENDEZVOUS_TIMEOUT or 300)")
    ap.add_argument("--grace", type=float, default=30.0,
                    help="seconds between SIGTERM and SIGKILL when stopping the processes (default 30)")
    ap.add_argument("--preload", default="torch",
                    help="modules to import once in the launcher, whose processes are then forked from it "
                         "(default torch; \"\" starts each process as a new interpreter)")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    if a.nproc is not None and a.nproc < 1:
        _say("--nproc: must be at least 1, got %d" % a.nproc)
        return EXIT_USAGE
    if not os.path.isfile(a.script):
        _say("script %r: no such file" % a.script)
        return EXIT_USAGE
    environ = dict(os.environ)
    try:
        group, addr, port = plan(environ, a.nproc, a.rendezvous_timeout)
    except ValueError as e:
        _say(str(e))
        return EXIT_USAGE
    except rendezvous.RendezvousError as e:
        _say(str(e))
        return EXIT_RENDEZVOUS
    restarts = _restarts()
    _say("group %d of %d, ranks %d-%d of %d, master %s:%d, round %d" % (
        group.rank, group.num_groups, group.offset, group.offset + group.local_size - 1,
        group.world_size, addr, port, group.round))
    fork = bool(a.preload.strip()) and preload(a.preload)
    procs = []
    for i in range(group.local_size):
        env = child_env(environ, group, addr, port, i, restarts)
        if fork:
            procs.append(_fork(a.script, a.args, env))
        else:
            procs.append(subprocess.Popen([sys.executable, a.script] + a.args, env=env))
    return supervise(procs, a.grace)


if __name__ == "__main__":
    sys.exit(main())
