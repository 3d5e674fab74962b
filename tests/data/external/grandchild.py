"""A child process that leaves trouble behind, for tests of core/subprocess:
  grandchild.py setsid_stderr PIDFILE  starts a grandchild that leaves the process
                                        group (setsid) and writes to the inherited
                                        stderr every 20 ms for 30 s
  grandchild.py group_sleeper PIDFILE   starts a grandchild that stays in the
                                        process group and sleeps 30 s, holding no pipe
  grandchild.py flood N                 writes N lines to stderr ("flood i")
Then, with "serve" as the next argument, it answers rlid's env protocol (a
one-step env) until stdin ends; otherwise it exits at once. A grandchild's pid
is written to PIDFILE (atomically) before the child goes on.
No grandchild lives longer than 30 s, so a failing test leaves nothing for long."""
import json, os, sys, time

mode = sys.argv[1]


def write_pid(path, pid):
    with open(path + ".tmp", "w") as f:
        f.write(str(pid))
    os.rename(path + ".tmp", path)


def detach_stdio(keep_stderr):
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1) if keep_stderr else (0, 1, 2):
        os.dup2(null, fd)


def start_grandchild(pidfile, leave_group):
    pid = os.fork()
    if pid == 0:
        if leave_group:
            os.setsid()
        detach_stdio(keep_stderr=leave_group)
        end = time.time() + 30
        while time.time() < end:
            if leave_group:
                try:
                    os.write(2, b"grandchild: still here\n")
                except OSError:
                    os._exit(0)
            time.sleep(0.02)
        os._exit(0)
    write_pid(pidfile, pid)


if mode == "setsid_stderr":
    start_grandchild(sys.argv[2], leave_group=True)
elif mode == "group_sleeper":
    start_grandchild(sys.argv[2], leave_group=False)
elif mode == "flood":
    out = sys.stderr
    for i in range(int(sys.argv[2])):
        out.write("flood %d\n" % i)
    out.flush()

if "serve" not in sys.argv[2:]:
    sys.exit(0)

HELLO = {"protocol": 1, "name": "grandchild", "summary": "leaves a process behind",
         "instructions": "Pick one.", "step_limit": 1, "deterministic": True}
MENU = [{"action": 0, "command": "stop"}, {"action": 1, "command": "go"}]
for line in sys.stdin:
    req = json.loads(line)
    op = req["op"]
    if op == "hello":
        r = dict(HELLO)
    elif op == "reset":
        r = {"handle": req["seed"], "observation": "seed %d" % req["seed"], "menu": MENU}
    elif op == "step":
        r = {"reward": 1.0, "terminal": True, "success": True, "observation": "done"}
    else:
        r = {"error": "unknown op " + op}
    r["id"] = req["id"]
    sys.stdout.write(json.dumps(r) + "\n")
    sys.stdout.flush()
