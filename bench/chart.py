"""The bench's results as an SVG bar chart, drawn with the standard library alone.

One bar per ratio, a tick at its target (the bar is green when it reaches it, red when not),
and a grey tick at llama-server's figure when llama-server ran: where localserve stands, at a glance.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

ROW_HEIGHT = 34
LABEL_WIDTH = 330
BAR_WIDTH = 420
RIGHT_MARGIN = 170


@dataclass
class Bar:
    label: str
    ratio: float
    target: float | None
    note: str = ""                      # e.g. the acceptance rate
    llama_server: float | None = None


def write_svg(path: Path, title: str, bars: list[Bar]) -> Path:
    marks = [b.target or 0 for b in bars] + [b.llama_server or 0 for b in bars] + [1.0]
    # the axis ends at twice the largest target or figure to compare with: a bar past it is cut (and says so)
    top = min(max([b.ratio for b in bars] + marks), 2 * max(marks))
    scale = BAR_WIDTH / (top * 1.1)
    width = LABEL_WIDTH + BAR_WIDTH + RIGHT_MARGIN
    height = 60 + ROW_HEIGHT * len(bars) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="13">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="24" font-size="15" font-weight="bold">{escape(title)}</text>']
    x0 = LABEL_WIDTH
    for i, bar in enumerate(bars):
        y = 44 + i * ROW_HEIGHT
        met = bar.target is None or bar.ratio >= bar.target
        colour = "#3a9a4a" if met else "#c8453a"
        out.append(f'<text x="10" y="{y + 17}">{escape(bar.label)}</text>')
        shown = min(bar.ratio, top * 1.1)
        out.append(f'<rect x="{x0}" y="{y + 4}" width="{max(1.0, shown * scale):.1f}" height="18" fill="{colour}"/>')
        text = ("» " if shown < bar.ratio else "") + f"{bar.ratio:.2f}x" + (f"  {bar.note}" if bar.note else "")
        out.append(f'<text x="{x0 + shown * scale + 6:.1f}" y="{y + 18}">{escape(text)}</text>')
        if bar.target is not None:
            tx = x0 + bar.target * scale
            out.append(f'<line x1="{tx:.1f}" y1="{y}" x2="{tx:.1f}" y2="{y + 26}" stroke="black" stroke-width="2"/>')
        if bar.llama_server is not None:
            lx = x0 + bar.llama_server * scale
            out.append(f'<line x1="{lx:.1f}" y1="{y}" x2="{lx:.1f}" y2="{y + 26}" stroke="#888" '
                       f'stroke-width="3" stroke-dasharray="3,2"/>')
    one = x0 + scale
    out.append(f'<line x1="{one:.1f}" y1="40" x2="{one:.1f}" y2="{height - 26}" stroke="#bbb" stroke-dasharray="2,3"/>')
    legend_y = height - 10
    out.append(f'<text x="10" y="{legend_y}" fill="#444">bar: localserve (x the reference); black tick: target; '
               f'grey dashed tick: llama-server; dotted line: 1x</text>')
    out.append("</svg>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n")
    return path
