"""The figure every chart of a sweep shares: its size, title and footer (the subtitle
wrapped to the figure's width), gamma ticks, and the legend placed inside the axes or beside
them before the PNG is written.

Uses matplotlib's object API (Figure, no pyplot), so it changes no global backend state.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

LEGEND_INSIDE = 8  # legend entries that fit inside the axes; more go beside them
GAMMA_AXIS = "gamma (draft tokens per round; adaptive policies: their gamma setting)"
FOOTER_CHARS = 130  # of the 7.5-point subtitle, what an 8.5-inch figure holds on one line
MAX_TICKS = 16  # more gamma ticks than this run into each other: matplotlib picks integers


def footer_lines(subtitle: str, width: int = FOOTER_CHARS) -> list[str]:
    """The subtitle's " · "-separated parts on as few lines as fit `width` characters each
    (a long one ran off the figure's left edge)."""
    lines: list[str] = []
    for part in subtitle.split(" · "):
        if lines and len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += " · " + part
        else:
            lines.append(part)
    return lines


def new_figure(title: str, subtitle: str, xlabel: str, ylabel: str):
    fig = Figure(figsize=(8.5, 5.2), dpi=120)
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=13, loc="left")
    if subtitle:
        fig.text(
            0.99,
            0.01,
            "\n".join(footer_lines(subtitle)),
            ha="right",
            va="bottom",
            fontsize=7.5,
            color="0.4",
            gid="footer",
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def gamma_axis(ax, gammas: list[int]) -> None:
    """A tick at each gamma swept, or at integers matplotlib spaces out when there are many."""
    from matplotlib.ticker import MaxNLocator

    if len(gammas) > MAX_TICKS:
        ax.xaxis.set_major_locator(MaxNLocator(nbins=MAX_TICKS, integer=True))
    elif gammas:
        ax.set_xticks(gammas)


def finish(fig, ax, path: Path, beside: bool = False) -> Path:
    """Legend, layout, PNG. The legend goes beside the axes (on a wider figure) when it has
    more than LEGEND_INSIDE entries or `beside` says so (bars fill the axes: any place
    inside hides some)."""
    handles, _ = ax.get_legend_handles_labels()
    if handles and (beside or len(handles) > LEGEND_INSIDE):
        width, height = fig.get_size_inches()
        fig.set_size_inches(width + 3.6, height)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), framealpha=0.85)
    elif handles:
        ax.legend(fontsize=8, loc="best", framealpha=0.85)
    else:
        ax.text(
            0.5, 0.5, "nothing to show in these results", ha="center", va="center", transform=ax.transAxes, color="0.4"
        )
    footer = max((t.get_text().count("\n") + 1 for t in fig.texts if t.get_gid() == "footer"), default=1)
    fig.tight_layout(rect=(0, 0.03 * footer, 1, 1))
    fig.savefig(path)
    return path


def draw_curves(ax, data: dict[str, list[tuple[int, float]]]) -> None:
    for label, points in data.items():
        xs, ys = zip(*points)
        ax.plot(xs, ys, marker="o", label=label)
