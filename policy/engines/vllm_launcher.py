"""rlid's launcher of a vLLM server (policy/engines/vllm_server.cc runs it with the
engine venv's interpreter): runs `python -m vllm.entrypoints.openai.api_server ARGS`
and makes sure nothing of it outlives rlid.

rlid starts this process in its own process group with PR_SET_PDEATHSIG. That
signal reaches only this process, not the engine processes vLLM spawns, so this
launcher turns it into SIGTERM and then stops the whole group: vLLM's server
first (it shuts its engine processes down on SIGTERM), then, after 10 s,
SIGKILL to whatever is left of the group. The same happens when rlid stops
the server. The server's exit code is this process's.
"""
import ctypes
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1


def main() -> int:
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # rlid dies -> SIGTERM here
    if os.getppid() != parent:  # rlid died before the prctl took effect
        return 1
    server = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", *sys.argv[1:]])

    def stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            pass
        os.killpg(0, signal.SIGKILL)  # the engine processes, and this launcher

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return server.wait()


if __name__ == "__main__":
    sys.exit(main())
