"""An env that breaks the protocol in the way argv[1] names (tests of rlid's client).
Speaks raw JSON lines (no helper) so that every mistake is possible."""
import json, sys, time

mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
HELLO = {"protocol": 1, "name": "hostile", "summary": "misbehaves", "instructions": "Pick one.",
         "step_limit": 3, "deterministic": True, "capabilities": ["close"]}


def menu():
    items = [{"action": 0, "command": "go left", "realisations": ["left"]},
             {"action": 1, "command": "go right", "realisations": ["right"]}]
    if mode == "dup_actions":
        items[1]["action"] = 0
    if mode == "shared_realisation":
        items[1]["realisations"] = ["left"]
    if mode == "multiline_command":
        items[0]["command"] = "go\nleft"
    if mode == "short_afterstate":  # a summary, not the observation the step leads to
        items[0]["afterstate"] = "went left"
        items[1]["afterstate"] = "went right"
    return items


def reply(req):
    op = req["op"]
    if op == "hello":
        if mode == "strict_v1" and req.get("protocol") != 1:  # an old helper's check
            return {"error": "ValueError: this helper speaks protocol 1, rlid asked for %s"
                             % req.get("protocol")}
        h = dict(HELLO)
        if mode == "v2_terminal":  # a version-2 env that still says version 1's "terminal"
            h["protocol"] = 2
        if mode == "bad_protocol":
            h["protocol"] = 99
        if mode == "no_step_limit":
            del h["step_limit"]
        if mode == "exit_on_hello":
            sys.stderr.write("hostile: giving up at hello\n")
            sys.stderr.flush()
            sys.exit(7)
        return h
    if op == "reset":
        if mode == "error_on_reset":
            return {"error": "cannot make seed %d" % req["seed"]}
        if mode == "coded_error_on_reset":
            return {"error": {"code": "validation_error", "message": "seed %d is out of range" % req["seed"]}}
        if mode == "crash_on_reset":
            sys.stderr.write("hostile: crashing at reset\n")
            sys.stderr.flush()
            sys.exit(5)
        if mode == "wrong_type":
            return {"handle": 1, "observation": 42, "menu": menu()}
        if mode == "no_menu":
            return {"handle": 1, "observation": "start"}
        return {"handle": req["seed"] + 1, "observation": "start %d" % req["seed"], "menu": menu()}
    if op == "step":
        if mode == "nan_reward":
            return {"reward": "NaN", "terminal": True, "observation": "end"}
        if mode == "error_on_right" and req["action"] == 1:
            return {"error": "cannot go right"}
        if mode == "hang_on_step":
            time.sleep(3600)
        if mode == "print_on_step":
            print("debugging output on stdout", flush=True)
        if mode == "wrong_id":
            return {"id": 123456, "reward": 0.0, "terminal": True, "observation": "end"}
        return {"reward": 1.0, "terminal": True, "success": True, "observation": "end"}
    if op == "close":
        return {}
    return {"error": "unknown op " + op}


for line in sys.stdin:
    req = json.loads(line)
    r = reply(req)
    r.setdefault("id", req["id"])
    sys.stdout.write(json.dumps(r) + "\n")
    sys.stdout.flush()
