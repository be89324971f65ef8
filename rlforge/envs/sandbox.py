"""``run_python``: model-written Python in a separate, limited interpreter process (the ``python`` tool).

What is isolated (Linux; best effort):

- *process*: a fresh ``sys.executable -I -X utf8`` (no ``PYTHON*`` variables, no user site, no current directory
  on ``sys.path``), in its own session, with an empty environment (``PATH`` only) and a new temporary working
  directory that is deleted afterwards; stdin is empty.
- *time and memory*: a wall-clock timeout (the process group is killed), ``RLIMIT_CPU``, ``RLIMIT_AS`` (address
  space), ``RLIMIT_FSIZE`` (no file, stdout included, grows past a few times ``max_output``), no core dumps.
- *network, processes, signals*: before the code runs, an audit hook (``sys.addaudithook``; it cannot be removed
  from Python) refuses every ``socket.*`` event (creating sockets, DNS), starting processes (``subprocess``,
  ``os.system``/``exec``/``fork``/``spawn``/``posix_spawn``, ``pty``), ``os.kill``, loading libraries with
  ``ctypes``, raising the limits again (``resource.setrlimit``/``prlimit``), sub-interpreters and walking the
  heap (``gc.get_objects``). ``import socket``/``subprocess``/``ctypes`` still work (numpy and sympy import them);
  using them does not.

What is NOT isolated: the file system (the code can read and write whatever your user can, outside its working
directory too), CPU and memory bandwidth shared with the training run, and anything reachable through a bug in
CPython or an extension module. This is a guard against a policy's accidents, not a security boundary against
a determined adversary: run untrusted workloads in a container or VM (for instance as Monarch env actors).

The limits are applied by the child itself, first thing, rather than in ``preexec_fn``: ``preexec_fn`` is not
safe in a process with threads, and the ``LocalEnvRunner`` steps environments in threads.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

_BOOTSTRAP = r"""
def _sandbox():
    import ast, linecache, resource, sys, traceback
    cpu, memory, fsize = (int(a) for a in sys.argv[1:4])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    if memory > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    with open("main.py", encoding="utf-8") as f:
        source = f.read()
    linecache.cache["<code>"] = (len(source), None, source.splitlines(True), "<code>")
    try:
        tree = ast.parse(source, "<code>")
    except SyntaxError as err:
        sys.stderr.write("".join(traceback.format_exception_only(type(err), err)))
        sys.exit(1)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):  # like a REPL, the last expression's value is shown
        last = ast.Expression(tree.body.pop().value)
    blocked = (
        "socket.", "subprocess.", "os.system", "os.exec", "os.fork", "os.spawn", "os.posix_spawn", "pty.",
        "os.kill", "signal.pthread_kill", "ctypes.", "resource.setrlimit", "resource.prlimit",
        "cpython.PyInterpreterState_New", "gc.get_",
    )
    blocked_imports = {"_posixsubprocess", "_xxsubinterpreters"}
    # Imported before the hook so that libraries importing them (numpy, sympy) still import; the calls that
    # matter stay blocked (ctypes.dlopen/dlsym, subprocess.Popen), and the raw fork_exec is made unreachable.
    import ctypes, subprocess  # noqa: E401, F401
    del subprocess._fork_exec, sys.modules["_posixsubprocess"]

    def hook(event, args):
        if event.startswith(blocked) or (event == "import" and args and args[0] in blocked_imports):
            what = f"import {args[0]}" if event == "import" else event
            raise PermissionError(f"{what} is not allowed in this sandbox (no network, processes or signals)")

    sys.addaudithook(hook)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        exec(compile(tree, "<code>", "exec"), namespace)
        if last is not None:
            value = eval(compile(last, "<code>", "eval"), namespace)
            if value is not None:
                print(repr(value))
    except SystemExit:
        raise
    except BaseException as err:
        traceback.print_exception(type(err), err, err.__traceback__.tb_next)  # without the sandbox's own frame
        sys.exit(1)


_sandbox()
"""


def _read(path: Path, limit: int) -> tuple[str, int]:
    """The first ``limit`` characters of a file and how many characters were left out (counted in bytes)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        text = f.read(4 * limit).decode("utf-8", errors="replace")
    return text[:limit], max(0, size - len(text[:limit].encode("utf-8", errors="replace")))


def run_python(
    code: str, timeout_s: float = 10.0, cpu_s: int = 10, memory_mb: int = 1024, max_output: int = 4000
) -> str:
    """Runs ``code`` in a sandboxed interpreter and returns what it printed (stdout, then stderr).

    Args:
        code: The program; when its last statement is an expression, its ``repr`` is printed (as in a REPL).
        timeout_s: Wall-clock limit; past it the process group is killed.
        cpu_s: CPU-time limit (``RLIMIT_CPU``).
        memory_mb: Address-space limit (``RLIMIT_AS``), in MiB; 0 for none.
        max_output: Characters kept of stdout and of stderr each; the rest is cut with a note.

    Returns:
        The output, with a final ``error: ...`` line when the code timed out or was killed by a limit.
    """
    if not isinstance(code, str):
        return f"error: code must be a string, got {type(code).__name__}"
    with tempfile.TemporaryDirectory(prefix="rlforge-python-") as tmp:
        work = Path(tmp)
        (work / "main.py").write_text(code, encoding="utf-8")
        out_path, err_path = work / ".stdout", work / ".stderr"
        command = [sys.executable, "-I", "-X", "utf8", "-c", _BOOTSTRAP]
        command += [str(max(1, int(cpu_s))), str(int(memory_mb) * 2**20), str(8 * max_output + 65536)]
        env = {"PATH": os.defpath, "HOME": tmp, "LC_ALL": "C.UTF-8", "OMP_NUM_THREADS": "1"}
        env.update(OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(
                command, cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
            )
            try:
                proc.wait(timeout=timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        parts = []
        for path in (out_path, err_path):
            text, cut = _read(path, max_output)
            parts.append(text + (f"\n[... {cut} more bytes cut]" if cut else ""))
    output = "".join(part if part.endswith("\n") or not part else part + "\n" for part in parts)
    if timed_out:
        output += f"error: timed out after {timeout_s:g} s\n"
    elif proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        why = {"SIGXCPU": " (CPU time limit)", "SIGKILL": " (CPU time or memory limit)"}.get(name, "")
        output += f"error: killed by {name}{why}\n"
    return output.rstrip("\n")
