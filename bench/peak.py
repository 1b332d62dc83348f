"""Run a Python command line in this process, then report its peak memory.

    python -m bench.peak -m conformance check FILE
    python -m bench.peak -c "code" ARG...

The peak is the process's own high-water resident set (``VmHWM``), written to
stderr as ``PEAK_RSS_KB <n>``. The resource usage a parent gets from wait4()
is no good here: on Linux a child's ``ru_maxrss`` starts at what the parent had
when it forked, so a benchmark that wrote a large file would be measured, not
the command.
"""

from __future__ import annotations

import os
import runpy
import sys

MARK = "PEAK_RSS_KB"


def peak_kb() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource  # not Linux: the best there is (kilobytes on Linux, bytes on macOS)

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss // 1024 if sys.platform == "darwin" else rss


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 2 or args[0] not in ("-m", "-c"):
        sys.exit("usage: python -m bench.peak (-m MODULE | -c CODE) [ARG...]")
    try:
        if args[0] == "-m":
            sys.argv = [args[1], *args[2:]]
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c", *args[2:]]
            code = compile(args[1], "<string>", "exec")
            exec(code, {"__name__": "__main__"})  # noqa: S102 - it runs what python -c would
    finally:
        sys.stdout.flush()
        os.write(2, f"\n{MARK} {peak_kb()}\n".encode())


if __name__ == "__main__":
    main()
