"""Entry point of a workspace's protected commands: `python -m cuda_agent.agent.workspace_cli verify`.

The workspace's `compile`, `verify` and `profile` scripts only exec this module, so what the
commands do is decided by the installed package, not by anything the agent can edit. Prints a
short summary for the model; exit status 0 on success, 1 on failure, 2 on misuse. A command on files
unchanged since a command that answers it is answered from that one's record in `.cuda_agent/`
(run_records.py), and says so. `profile --ncu` adds Nsight Compute's digest of the kernels
(agent/ncu_section.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cuda_agent.agent.run_records import RunRecords
from cuda_agent.agent.workspace import COMMANDS, META_FILE, RECORDS_FILE, Workspace, WorkspaceError


def find_root(start: Path) -> Path:
    for folder in (start, *start.parents):
        if (folder / META_FILE).is_file():
            return folder
    raise WorkspaceError(f"no cuda-agent workspace at or above {start}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="workspace_cli", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=COMMANDS)
    parser.add_argument("--workspace", type=Path, default=None, help="workspace folder (default: find from cwd)")
    parser.add_argument("--ncu", action="store_true",
                        help="profile only: add Nsight Compute's digest of your kernels (GPU, where ncu is installed)")
    parser.add_argument("--unscored", action="store_true",
                        help="profile: time the candidate even when its outputs are wrong (no reward)")
    args = parser.parse_args(argv)
    if args.ncu and args.command != "profile":
        parser.error("--ncu goes with profile")
    if args.unscored and args.command != "profile":
        parser.error("--unscored is profile's only")
    try:
        ws = Workspace.open(find_root((args.workspace or Path.cwd()).resolve()))
    except WorkspaceError as exc:
        print(f"{args.command}: {exc}", file=sys.stderr)
        return 2
    ws.records = RunRecords(ws.root / RECORDS_FILE)   # each script is a process: its records are on disk
    outcome = ws.run(args.command, unscored=args.unscored)
    ws.record(outcome)
    print(outcome.text)
    if args.ncu:
        from cuda_agent.agent.ncu_section import ncu_section

        print(ncu_section(ws, outcome))
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
