"""Write a slim Ray wheel: Ray core only, small enough to carry to a machine without internet.

    python benchmarks/slim_ray_wheel.py ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl -o .ray/ [--strip]

The project uses Ray core (actors, remote functions, GPU placement: env/infra/service.py), so the
slim wheel drops the Java jars (ray/jars), the dashboard's web client (ray/dashboard/client/build)
and the libraries built on core (`DROPPED`: rllib, tune, train, serve, data, llm, air, workflow),
and the console scripts that start them. The wheel is unpacked and packed again with the `wheel`
tool (`wheel unpack` / `wheel pack`: RECORD rewritten with each kept file's hash, file modes kept, so
raylet and gcs_server stay executable) and written under the input's file name: same version, same
tags. `--strip` also removes the symbol tables of its native code (`strip --strip-unneeded`: about 4.5
MB less for Ray 2.60; what runs is unchanged, a native crash's backtrace shows addresses instead of
names). Prints the sizes before and after.
"""

from __future__ import annotations

import argparse
import configparser
import importlib.util
import io
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# paths inside the wheel; what `import ray` and `ray.init()` need is outside all of them
DROPPED = ("ray/jars", "ray/dashboard/client/build", "ray/rllib", "ray/tune", "ray/train", "ray/serve",
           "ray/data", "ray/llm", "ray/air", "ray/workflow")


def _wheel(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "wheel", *args], check=True, stdout=subprocess.DEVNULL)


def _drop_scripts(entry_points: Path, dropped_modules: list[str]) -> list[str]:
    """Remove the entry points whose module was dropped (pip would write launchers that cannot start)."""
    if not entry_points.exists():
        return []
    parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    parser.optionxform = str   # entry point names are case-sensitive
    parser.read(entry_points)
    removed = []
    for section in parser.sections():
        for name, target in list(parser.items(section)):
            module = target.split(":")[0].strip()
            if any(module == m or module.startswith(m + ".") for m in dropped_modules):
                parser.remove_option(section, name)
                removed.append(name)
    out = io.StringIO()
    parser.write(out)
    entry_points.write_text(out.getvalue())
    return removed


def _strip_native(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as f:
                if f.read(4) != b"\x7fELF":
                    continue
            mode = path.stat().st_mode
            subprocess.run(["strip", "--strip-unneeded", str(path)], check=True)
            path.chmod(mode)   # raylet and gcs_server must stay executable


def slim(wheel: Path, out_dir: Path, dropped: tuple[str, ...] = DROPPED, strip: bool = False) -> Path:
    """The slim copy of `wheel` in `out_dir`, under the same file name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / wheel.name
    if target.resolve() == wheel.resolve():
        raise SystemExit(f"{wheel}: the output directory must differ from the input's")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        _wheel("unpack", "-d", str(tmp / "unpacked"), str(wheel))
        [root] = (tmp / "unpacked").iterdir()
        for rel in dropped:
            path = root / rel
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        if strip:
            _strip_native(root)
        [dist_info] = root.glob("*.dist-info")
        modules = [rel.replace("/", ".") for rel in dropped]
        _drop_scripts(dist_info / "entry_points.txt", modules)
        (dist_info / "RECORD").unlink()   # `wheel pack` writes it from the files present
        packed = tmp / "packed"
        packed.mkdir()
        _wheel("pack", "-d", str(packed), str(root))
        [built] = packed.glob("*.whl")
        # `wheel pack` names the file from the WHEEL tags; Ray's file name carries the manylinux tag
        shutil.move(str(built), target)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path, help="a Ray wheel (any Python version and platform)")
    parser.add_argument("-o", "--out-dir", type=Path, required=True, help="where the slim wheel goes")
    parser.add_argument("--strip", action="store_true", help="remove the native code's symbol tables")
    args = parser.parse_args()
    if importlib.util.find_spec("wheel") is None:
        raise SystemExit("slim_ray_wheel.py needs the `wheel` package: pip install wheel")
    before = args.wheel.stat().st_size
    target = slim(args.wheel, args.out_dir, strip=args.strip)
    after = target.stat().st_size
    print(f"{args.wheel.name}: {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB ({target})")


if __name__ == "__main__":
    main()
