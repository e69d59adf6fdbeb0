"""A run's record: one SQLite file per run folder (`RUN/bench.sqlite`), written as work finishes.

Each finished attempt and baseline is committed on its own, so a killed run loses only what was in
flight; `--resume` re-runs exactly what has no row. Tables (`SCHEMA` below, columns in docs/bench.md):
`meta` (schema version, kind, the settings a resume must agree with), `sessions` (one per invocation,
its config and environment), `tasks` (the selection), `attempts` (one per scored solution; `result`
is the EvalResult as JSON), `baselines` (what `cuda-agent baseline` measured or took from the
environment's store). `verdict` is one of VERDICTS; `baselines.status` one of BASELINE_STATUS.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

SCHEMA_VERSION = 1
DB_NAME = "bench.sqlite"

VERDICTS = ("correct", "incorrect", "compile_error", "task_error", "out_of_memory", "missing", "malformed",
            "episode_failed", "internal_error")
BASELINE_STATUS = ("measured", "stored", "broken", "out_of_memory")

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY, started REAL NOT NULL, finished REAL, status TEXT NOT NULL,
    argv TEXT, config TEXT, environment TEXT);
CREATE TABLE IF NOT EXISTS tasks (
    key TEXT PRIMARY KEY, grp TEXT NOT NULL, number INTEGER NOT NULL, name TEXT, digest TEXT, origin TEXT);
CREATE TABLE IF NOT EXISTS attempts (
    task_key TEXT NOT NULL REFERENCES tasks(key), attempt INTEGER NOT NULL, session_id INTEGER,
    source TEXT, verdict TEXT NOT NULL, compiled INTEGER, correct INTEGER,
    error_phase TEXT, error_rule TEXT, error_message TEXT,
    kernel_ms REAL, eager_ms REAL, compile_ms REAL, speedup_vs_eager REAL, speedup_vs_compile REAL,
    reward REAL, baseline_source TEXT, device TEXT, protocol TEXT,
    solution_path TEXT, solution_digest TEXT, trajectory_path TEXT, trajectory_id TEXT,
    turns INTEGER, stop_reason TEXT, seconds REAL, finished REAL, result TEXT,
    PRIMARY KEY (task_key, attempt));
CREATE TABLE IF NOT EXISTS baselines (
    task_key TEXT PRIMARY KEY REFERENCES tasks(key), session_id INTEGER, status TEXT NOT NULL,
    device TEXT, torch TEXT, eager_ms REAL, compile_ms REAL, compile_error TEXT, error TEXT,
    store_key TEXT, oom_retries INTEGER, seconds REAL, finished REAL, entry TEXT, steps TEXT);
"""
ADDED_COLUMNS = {"baselines": {"steps": "TEXT"}}   # columns added since schema 1: records made before get them


class RunConflict(RuntimeError):
    """The folder holds another run, or a run whose settings differ from a resume's."""


@dataclass
class Attempt:
    task_key: str
    attempt: int
    verdict: str
    source: str = ""
    session_id: int | None = None
    compiled: bool = False
    correct: bool = False
    error_phase: str | None = None
    error_rule: str | None = None
    error_message: str | None = None
    kernel_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    reward: float | None = None
    baseline_source: str | None = None
    device: str | None = None
    protocol: str | None = None
    solution_path: str | None = None
    solution_digest: str | None = None
    trajectory_path: str | None = None
    trajectory_id: str | None = None
    turns: int | None = None
    stop_reason: str | None = None
    seconds: float | None = None
    finished: float | None = None
    result: str | None = None          # EvalResult JSON


@dataclass
class BaselineRecord:
    task_key: str
    status: str
    session_id: int | None = None
    device: str | None = None
    torch: str | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    compile_error: str | None = None
    error: str | None = None
    store_key: str | None = None
    oom_retries: int = 0
    seconds: float | None = None
    finished: float | None = None
    entry: str | None = None           # BaselineEntry JSON
    steps: str | None = None           # JSON: seconds of start, compile, timing, wait (BaselineRun.steps)


def _columns(cls) -> list[str]:
    return [f.name for f in fields(cls)]


class RunStore:
    """The SQLite record of one run folder. Used from one thread (the run's event loop)."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / DB_NAME
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")   # readers (a report) never block the run
        self.db.executescript(SCHEMA)
        for table, columns in ADDED_COLUMNS.items():
            have = {row[1] for row in self.db.execute(f"PRAGMA table_info({table})")}
            for name, kind in columns.items():
                if name not in have:
                    self.db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
        self.db.commit()

    @classmethod
    def existing(cls, run_dir: Path) -> "RunStore":
        if not (Path(run_dir) / DB_NAME).is_file():
            raise FileNotFoundError(f"{run_dir} holds no run ({DB_NAME} missing)")
        return cls(run_dir)

    def close(self) -> None:
        self.db.close()

    # -- what the run is -------------------------------------------------------------------------

    def meta(self, key: str, default=None):
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row["value"]) if row else default

    def set_meta(self, key: str, value) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))
        self.db.commit()

    def claim(self, kind: str, settings: dict, resume: bool) -> None:
        """Make this folder the record of a `kind` run with `settings`, or check that a resume agrees
        with the run it continues (the settings that decide what a result means)."""
        existing = self.meta("kind")
        if existing is None:
            self.set_meta("schema_version", SCHEMA_VERSION)
            self.set_meta("kind", kind)
            self.set_meta("settings", settings)
            self.set_meta("created", time.time())
            return
        if not resume:
            raise RunConflict(f"{self.run_dir} already holds a {existing} run: pass --resume to continue it, "
                              "or choose another --out")
        if existing != kind:
            raise RunConflict(f"{self.run_dir} holds a {existing} run, not a {kind} run")
        recorded = self.meta("settings", {})
        differ = sorted(k for k in set(recorded) | set(settings) if recorded.get(k) != settings.get(k))
        if differ:
            shown = "; ".join(f"{k}: run has {recorded.get(k)!r}, now {settings.get(k)!r}" for k in differ)
            raise RunConflict(f"--resume with different settings ({shown}); use the run's settings or a new --out")

    def begin_session(self, argv: list[str], config: dict, environment: dict) -> int:
        cursor = self.db.execute(
            "INSERT INTO sessions (started, status, argv, config, environment) VALUES (?, 'running', ?, ?, ?)",
            (time.time(), json.dumps(argv), json.dumps(config), json.dumps(environment)))
        self.db.commit()
        return cursor.lastrowid

    def end_session(self, session_id: int, status: str) -> None:
        self.db.execute("UPDATE sessions SET finished = ?, status = ? WHERE id = ?", (time.time(), status, session_id))
        self.db.commit()

    def sessions(self) -> list[dict]:
        rows = self.db.execute("SELECT * FROM sessions ORDER BY id").fetchall()
        return [{**dict(r), "argv": json.loads(r["argv"] or "[]"), "config": json.loads(r["config"] or "{}"),
                 "environment": json.loads(r["environment"] or "{}")} for r in rows]

    # -- tasks, attempts, baselines ----------------------------------------------------------------

    def add_tasks(self, tasks) -> None:
        self.db.executemany("INSERT OR REPLACE INTO tasks VALUES (?, ?, ?, ?, ?, ?)",
                            [(t.key, t.group, t.number, t.task.name, t.task.digest, t.task.origin) for t in tasks])
        self.db.commit()

    def tasks(self) -> list[dict]:
        return [dict(r) for r in self.db.execute("SELECT * FROM tasks ORDER BY grp, number")]

    def record_attempt(self, attempt: Attempt) -> None:
        attempt.finished = attempt.finished or time.time()
        self._insert("attempts", asdict(attempt))

    def attempts(self) -> list[Attempt]:
        rows = self.db.execute("SELECT * FROM attempts ORDER BY task_key, attempt").fetchall()
        return [Attempt(**{k: _from_sql(r[k], k) for k in _columns(Attempt)}) for r in rows]

    def recorded_attempts(self, retry: tuple[str, ...] = ()) -> dict[tuple[str, int], str]:
        """(task, attempt) -> source of every recorded attempt whose verdict is not in `retry`: what a
        resume does not run again."""
        return {(r["task_key"], r["attempt"]): r["source"]
                for r in self.db.execute("SELECT task_key, attempt, source, verdict FROM attempts")
                if r["verdict"] not in retry}

    def forget_attempts(self, keys: list[tuple[str, int]]) -> None:
        self.db.executemany("DELETE FROM attempts WHERE task_key = ? AND attempt = ?", keys)
        self.db.commit()

    def record_baseline(self, record: BaselineRecord) -> None:
        record.finished = record.finished or time.time()
        self._insert("baselines", asdict(record))

    def baselines(self) -> list[BaselineRecord]:
        rows = self.db.execute("SELECT * FROM baselines ORDER BY task_key").fetchall()
        return [BaselineRecord(**{k: r[k] for k in _columns(BaselineRecord)}) for r in rows]

    def _insert(self, table: str, values: dict) -> None:
        names = list(values)
        row = [int(v) if isinstance(v, bool) else v for v in values.values()]
        self.db.execute(f"INSERT OR REPLACE INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                        row)
        self.db.commit()


def _from_sql(value, name: str):
    if name in ("compiled", "correct"):
        return bool(value)
    return value
