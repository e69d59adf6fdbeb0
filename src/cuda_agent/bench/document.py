"""A small document model the report is built in once and written twice: Markdown (figures as PNG
files beside it) and a self-contained HTML page (figures embedded, no outside resources)."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Link:
    text: str
    href: str


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Paragraph:
    text: str


@dataclass
class Table:
    headers: list[str]
    rows: list[list]                 # cells: str, Link, or None (empty)


@dataclass
class Figure:
    name: str                        # file name stem
    png: bytes
    caption: str


@dataclass
class Document:
    title: str
    blocks: list = field(default_factory=list)

    def add(self, *blocks) -> None:
        self.blocks.extend(blocks)


def _md_cell(cell) -> str:
    if cell is None:
        return ""
    if isinstance(cell, Link):
        return f"[{cell.text}]({cell.href})"
    return str(cell).replace("|", "\\|").replace("\n", " ")


def write_markdown(doc: Document, path: Path, figures_dir: Path) -> None:
    lines = [f"# {doc.title}", ""]
    figures_dir.mkdir(parents=True, exist_ok=True)
    for block in doc.blocks:
        if isinstance(block, Heading):
            lines += ["#" * block.level + " " + block.text, ""]
        elif isinstance(block, Paragraph):
            lines += [block.text, ""]
        elif isinstance(block, Table):
            lines.append("| " + " | ".join(block.headers) + " |")
            lines.append("|" + "---|" * len(block.headers))
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows]
            lines.append("")
        elif isinstance(block, Figure):
            (figures_dir / f"{block.name}.png").write_bytes(block.png)
            rel = (figures_dir / f"{block.name}.png").relative_to(path.parent).as_posix()
            lines += [f"![{block.caption}]({rel})", "", f"*{block.caption}*", ""]
    path.write_text("\n".join(lines))


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.6em 0 1.4em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
figure { margin: 1em 0; } figcaption { font-style: italic; color: #555; }
img { max-width: 100%; }
"""


def _html_cell(cell) -> str:
    if cell is None:
        return ""
    if isinstance(cell, Link):
        return f'<a href="{html.escape(cell.href, quote=True)}">{html.escape(cell.text)}</a>'
    return html.escape(str(cell))


def write_html(doc: Document, path: Path) -> None:
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{html.escape(doc.title)}</title><style>{_STYLE}</style></head><body>",
           f"<h1>{html.escape(doc.title)}</h1>"]
    for block in doc.blocks:
        if isinstance(block, Heading):
            out.append(f"<h{block.level}>{html.escape(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            out.append(f"<p>{html.escape(block.text)}</p>")
        elif isinstance(block, Table):
            out.append("<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in block.headers)
                       + "</tr></thead><tbody>")
            out += ["<tr>" + "".join(f"<td>{_html_cell(c)}</td>" for c in row) + "</tr>" for row in block.rows]
            out.append("</tbody></table>")
        elif isinstance(block, Figure):
            data = base64.b64encode(block.png).decode()
            out.append(f'<figure><img alt="{html.escape(block.caption, quote=True)}" '
                       f'src="data:image/png;base64,{data}"><figcaption>{html.escape(block.caption)}</figcaption></figure>')
    out.append("</body></html>")
    path.write_text("\n".join(out))
