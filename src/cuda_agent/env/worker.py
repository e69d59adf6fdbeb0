"""Worker processes: `python -m cuda_agent.env.worker judge|candidate`.

- The judge loads the task, builds the reference `Model`, draws the input sets and computes the
  reference outputs; it later compares candidate outputs and times eager / torch.compile.
- The candidate builds and loads the solution, runs it on the same input sets (drawn again from
  the same seeds, from task code with the `Model` class removed) and times it. It never holds the
  reference model or its outputs; its outputs travel to the judge as files.

Each evaluation gets a fresh pair, so a crash, a hung kernel or a corrupted CUDA context dies
with its process. Both speak the JSON-lines protocol in protocol.py.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import torch

from cuda_agent.env import timing  # captures clocks and sync before candidate code can patch them
from cuda_agent.env.protocol import ChildChannel


def _device(backend: str) -> torch.device:
    return torch.device("cuda", 0) if backend == "cuda" else torch.device("cpu")


def draw_inputs(module, seed: int, device: torch.device) -> list:
    """The task's `get_inputs()` under a fixed seed, created directly on the device."""
    torch.manual_seed(seed)
    with torch.device(device):
        inputs = module.get_inputs()
    if not isinstance(inputs, (list, tuple)):
        raise TypeError(f"get_inputs() must return a list, got {type(inputs).__name__}")
    return list(timing.to_device(inputs, device))


# Reference outputs stay on the device up to this size: KernelBench's level-1 tasks have outputs of
# several GB each, and five of them would not fit beside the model. Beyond it they move to host RAM.
KEEP_OUTPUT_BYTES_ON_DEVICE = 4 << 30


def draw_init_inputs(module) -> list:
    init = module.get_init_inputs()
    if not isinstance(init, (list, tuple)):
        raise TypeError(f"get_init_inputs() must return a list, got {type(init).__name__}")
    return list(init)


def _short_traceback(exc: BaseException, limit_frames: int = 4) -> str:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    head, frames = tb[0], tb[1:-1]
    text = "".join([head, *frames[-limit_frames:], tb[-1]]) if len(tb) > 1 else "".join(tb)
    return text.strip()[-3000:]


# ---------------------------------------------------------------------------------------------
# judge


def run_judge(chan: ChildChannel) -> None:
    from cuda_agent.env.guard import tensors_in
    from cuda_agent.env.verify import compare_outputs
    from cuda_agent.tasks.task import load_task_module

    job = chan.receive()
    backend, cfg, job_dir = job["backend"], job["config"], Path(job["job_dir"])
    device = _device(backend)
    seeds = cfg["seeds"]
    try:
        module = load_task_module(job["task_code"], "reference_task", filename=f"<task {job['task_name']}>")
        for name in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(module, name):
                raise AttributeError(f"the task defines no `{name}`")
        init_inputs = draw_init_inputs(module)
        torch.manual_seed(cfg["seed"])
        model = module.Model(*init_inputs).to(device).eval()
        torch.save({"init_inputs": init_inputs, "state_dict": model.state_dict()}, job_dir / "reference_init.pt")
        outputs, output_bytes = [], 0
        with torch.no_grad():
            for seed in seeds:
                out = model(*draw_inputs(module, seed, device))
                output_bytes += sum(t.nbytes for t in tensors_in(out))
                if output_bytes > KEEP_OUTPUT_BYTES_ON_DEVICE:
                    out = timing.to_device(out, torch.device("cpu"))
                outputs.append(out)
        timing.device_synchronize(device)
    except Exception as exc:  # the task itself is broken
        chan.send(ok=False, message=f"{type(exc).__name__}: {exc}\n{_short_traceback(exc)}")
        return
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    chan.send(ok=True, device=name)

    while True:
        cmd = chan.receive()
        if cmd["cmd"] == "compare":
            if "seed" in cmd:  # an output of a timed call: the reference for the same draw, computed now
                with torch.no_grad():
                    reference_out = model(*draw_inputs(module, cmd["seed"], device))
            else:
                reference_out = outputs[cmd["trial"]]
            where = next(iter(t.device for t in tensors_in(reference_out)), device)
            try:
                candidate_out = torch.load(cmd["path"], map_location=where, weights_only=True)
            except Exception as exc:
                chan.send(ok=False, max_abs_error=float("inf"), message=f"candidate output unreadable: {exc}")
                continue
            result = compare_outputs(reference_out, candidate_out, cfg["atol"], cfg["rtol"])
            del candidate_out, reference_out
            chan.send(ok=result.ok, max_abs_error=result.max_abs_error, message=result.message,
                      fp32_relative_error=result.fp32_relative_error)
        elif cmd["cmd"] == "baselines":
            draw = lambda n: draw_inputs(module, cfg["timing_seed"] + n, device)  # noqa: E731
            chan.send(**_time_baselines(model, draw, device, cfg, cmd["compile"]))
        else:
            return


def _time_baselines(model, draw, device, cfg, with_compile: bool) -> dict:
    kwargs = dict(warmup=cfg["warmup"], iters=cfg["iters"], flush_l2=cfg["flush_l2"], budget_s=cfg["profile_budget_s"])
    result = {"eager": timing.time_callable(model, draw, device, **kwargs).timing.__dict__}
    if with_compile:
        try:
            compiled = torch.compile(model)
            result["compile"] = timing.time_callable(compiled, draw, device, **kwargs).timing.__dict__
        except Exception as exc:  # torch.compile can't handle every model; report, don't fail
            result["compile_error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
    return result


# ---------------------------------------------------------------------------------------------
# candidate


def load_candidate(solution_dir: Path, build, prebuilt: dict[str, str] | None = None, fast_build: bool = True):
    """Load the solution: its prebuilt workspace extension (`prebuilt`: module name -> .so, built by
    the harness), then `model_new.py`, whose load_inline/load calls go through `build`.
    Returns (ModelNew class, builder)."""
    from cuda_agent.env.compiler import BuildError, load_module
    from cuda_agent.env.inline import InlineBuilder
    from cuda_agent.tasks.task import load_task_module

    builder = InlineBuilder(build)
    if fast_build:
        builder.install()
    else:  # torch's own loader in a fresh build folder, as other harnesses do (for comparisons)
        os.environ["TORCH_EXTENSIONS_DIR"] = str(solution_dir.parent / "torch_extensions")
        builder.install_counting_only()
    for name, so_path in (prebuilt or {}).items():
        sys.modules[name] = builder.add(name, load_module(name, Path(so_path)))  # `import name`: the counting proxy
    sys.path.insert(0, str(solution_dir))
    entry = solution_dir / "model_new.py"
    try:
        module = load_task_module(entry.read_text(), "model_new", filename=str(entry))
    except ModuleNotFoundError as exc:
        if exc.name == "cuda_extension":  # the workspace form without any kernels yet
            raise BuildError("model_new.py imports cuda_extension, but kernels/ holds no .cu or .cpp files "
                             "to build it from: write your kernels and binding there first") from None
        raise
    if not hasattr(module, "ModelNew"):
        raise AttributeError("model_new.py defines no `ModelNew` class")
    return module.ModelNew, builder


def remote_build(chan: ChildChannel):
    """A `build` for InlineBuilder that asks the harness to compile: the candidate never writes the
    shared build cache, so it cannot plant a module that another evaluation would load."""
    from cuda_agent.env.compiler import BuildError

    def build(name: str, files: dict[str, str], **flags) -> Path:
        chan.send(request="build", name=name, files=files, **flags)
        reply = chan.receive()
        if not reply.get("ok"):
            raise BuildError(reply.get("message", "the build failed"))
        return Path(reply["path"])
    return build


def run_candidate(chan: ChildChannel) -> None:
    from cuda_agent.env.compiler import BuildError
    from cuda_agent.env.guard import COUNTER, Rejected, check_output, checked_forward
    from cuda_agent.tasks.task import load_task_module

    job = chan.receive()
    backend, cfg, job_dir = job["backend"], job["config"], Path(job["job_dir"])
    device = _device(backend)
    seeds = cfg["seeds"]

    # ---- compile (the harness builds; this process loads)
    try:
        ModelNew, builder = load_candidate(Path(job["solution_dir"]), remote_build(chan), job.get("prebuilt"),
                                           cfg["fast_build"])
    except BuildError as exc:
        chan.send(ok=False, phase="compile", message=exc.summary)
        return
    except SyntaxError as exc:
        chan.send(ok=False, phase="compile", message=f"SyntaxError in {Path(exc.filename or 'model_new.py').name} "
                                                     f"line {exc.lineno}: {exc.msg}\n    {(exc.text or '').strip()}")
        return
    except Exception as exc:
        chan.send(ok=False, phase="compile", message=_short_traceback(exc))
        return
    if _PREIMPORT is not None:  # part of getting ready to run: never on the verify phase's clock
        _PREIMPORT.join()
    chan.send(ok=True, phase="compile", extensions=builder.built)

    # ---- verify: construct with the reference's weights, run each input set
    cmd = chan.receive()
    if cmd.get("cmd") != "verify":
        return
    try:
        task_module = load_task_module(job["task_inputs_code"], "task_inputs", filename="<task inputs>")
        init = torch.load(job_dir / "reference_init.pt", map_location="cpu", weights_only=False)
        torch.manual_seed(cfg["seed"])
        model = ModelNew(*init["init_inputs"])
        weights = "seed"
        if init["state_dict"]:
            try:
                model.load_state_dict(init["state_dict"])
                weights = "state_dict"
            except (RuntimeError, KeyError):
                pass  # parameter names differ: identical seeding made the weights match instead
        else:
            weights = "none"
        model = model.to(device).eval()
        calls_per_forward = None
        with torch.no_grad():
            for trial, seed in enumerate(seeds):
                inputs = draw_inputs(task_module, seed, device)
                out, calls_per_forward = checked_forward(model, timing.clone_args(inputs), inputs, device,
                                                         guard=cfg["guard"])
                del inputs
                # copied on the current stream, with no device-wide sync first: work hidden on a
                # side stream is not finished here and shows up as a wrong output
                path = job_dir / f"candidate_{trial}.pt"
                torch.save(timing.to_device(out, torch.device("cpu")), path)
                del out
                chan.send(ok=True, phase="verify", trial=trial, path=str(path), weights=weights)
                if chan.receive().get("cmd") != "continue":
                    return
    except Rejected as exc:
        chan.send(ok=False, phase="verify", message=str(exc), rule=exc.rule)
        return
    except Exception as exc:
        chan.send(ok=False, phase="verify", message=_short_traceback(exc))
        return

    # ---- profile, then re-check the output of the last timed call
    cmd = chan.receive()
    if cmd.get("cmd") != "profile":
        return
    try:
        # every call, timed or not, gets inputs from a seed of its own that verification never
        # used: nothing can be memoised, and any output can be checked against the same draw
        def draw(n):
            return draw_inputs(task_module, cfg["timing_seed"] + n, device)

        spot_outputs = []  # outputs of the secret guarded calls, compared by the judge afterwards

        def spot_check(args, n):
            out, _ = checked_forward(model, args, draw(n), device, guard=cfg["guard"])
            path = job_dir / f"candidate_spot_{len(spot_outputs)}.pt"
            torch.save(timing.to_device(out, torch.device("cpu")), path)
            spot_outputs.append([cfg["timing_seed"] + n, str(path)])

        calls_before = COUNTER.calls
        run = timing.time_callable(model, draw, device, warmup=cfg["warmup"], iters=cmd["iters"],
                                   flush_l2=cfg["flush_l2"], budget_s=cfg["profile_budget_s"],
                                   spot_check=spot_check if cfg["guard"] else None,
                                   spot_checks=max(2, cmd["iters"] // 10))
        timed_calls = COUNTER.calls - calls_before
        if cfg["guard"] and timed_calls != calls_per_forward * run.calls:
            raise Rejected("behaviour-changed", f"forward called the extension {timed_calls / run.calls:g} times per "
                                                f"call while timed but {calls_per_forward} times while verified")
        check_output(run.last_output, [], device)
        last_path = job_dir / "candidate_last_timed.pt"
        torch.save(timing.to_device(run.last_output, torch.device("cpu")), last_path)
        # one more guarded call after timing, on yet another draw
        inputs = draw(run.calls)
        with torch.no_grad():
            out, _ = checked_forward(model, timing.clone_args(inputs), inputs, device, guard=cfg["guard"])
        recheck_path = job_dir / "candidate_recheck.pt"
        torch.save(timing.to_device(out, torch.device("cpu")), recheck_path)
    except Rejected as exc:
        chan.send(ok=False, phase="profile", message=str(exc), rule=exc.rule)
        return
    except Exception as exc:
        chan.send(ok=False, phase="profile", message=_short_traceback(exc))
        return
    chan.send(ok=True, phase="profile", timing=run.timing.__dict__,
              rechecks=[[cfg["timing_seed"] + run.last_draw, str(last_path)],
                        [cfg["timing_seed"] + run.calls, str(recheck_path)], *spot_outputs])
    chan.receive()


_PREIMPORT = None  # the background import of torch._dynamo (candidate only)


def _preimport_dynamo() -> None:
    try:
        import torch._dynamo  # noqa: F401
    except Exception:  # the guard imports it again on first use and reports any error there
        pass


def main() -> None:
    import faulthandler

    faulthandler.enable()  # a crashing kernel leaves the Python stack that called it in the log
    role = sys.argv[1]
    chan = ChildChannel()
    from torch.utils._python_dispatch import TorchDispatchMode

    if role == "candidate" and not hasattr(TorchDispatchMode, "_should_skip_dynamo"):
        # On a torch where the guard cannot opt out of it, its first dispatch-mode call imports
        # torch._dynamo (~5 s on the GPU hosts): import it in the background, off the verify clock.
        global _PREIMPORT
        import threading

        _PREIMPORT = threading.Thread(target=_preimport_dynamo, name="preimport-dynamo", daemon=True)
        _PREIMPORT.start()
    if os.environ.get("CUDA_AGENT_WORKER_BACKEND") == "cuda" and torch.cuda.is_available():
        torch.empty(1, device="cuda")  # create the context now, while no job waits for us
    chan.send(ready=True, pid=os.getpid())
    try:
        (run_judge if role == "judge" else run_candidate)(chan)
    except EOFError:
        pass
    # Skip interpreter teardown: candidate extensions and threads may hang or crash in it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
