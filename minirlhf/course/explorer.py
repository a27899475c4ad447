"""Sliders over a figure: live in JupyterLab, precomputed frames in the rendered book.

One call, two front ends::

    from minirlhf.course.explorer import explore

    def draw(beta):                       # params -> matplotlib Figure
        fig, ax = plt.subplots()
        ...
        return fig

    explore(draw, {"beta": [0.0, 0.1, 0.2, 0.5]}, default={"beta": 0.1},
            labels={"beta": "β"}, alt="Penalty against beta, at beta = {beta}")

* In JupyterLab it shows one ipywidgets slider per grid (toggle buttons for a grid of
  words) and redraws the figure whenever a slider moves (frames are cached, so going back is
  instant). A slow ``draw`` (one that trains, say) may print or show a progress bar: that
  appears under the sliders while it works, with a status line, and the figure replaces it.
* While the book is built (:func:`minirlhf.course.frontend.building_book`) there is no
  kernel behind the page, so it draws every grid point once, up front, and emits a single
  self-contained ``text/html`` output: ``<input type="range">`` sliders with a label showing
  the current value, an ``<img>`` with alt text showing the default frame, and a few lines of
  inline JavaScript that swap in the frame of the chosen grid point. No external scripts;
  without JavaScript the default frame is still there. Element ids come from a hash of the
  content, so the same call gives byte-identical HTML every time.

``draw`` receives the grid values as keyword arguments and must return a new Figure; the
explorer renders it to PNG and closes it. One or two grids are supported (two grids make
``len(a) * len(b)`` frames, so keep them small).
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from .frontend import building_book

__all__ = ["explore", "explorer_html", "live_explorer", "figure_png", "show_figure"]

DPI = 100  # frames are many: keep figures about 8 x 3.5 inches so a frame stays near 40 kB


@dataclass(frozen=True)
class _Axis:
    """One slider: a parameter name, its grid values, their labels and the start index."""

    name: str
    label: str
    values: tuple
    texts: tuple
    start: int


def _axes(grids, default, labels, fmt) -> list[_Axis]:
    """Validate the grids and return one _Axis per parameter, in the order given."""
    if not isinstance(grids, Mapping) or not 1 <= len(grids) <= 2:
        raise ValueError("grids must be a dict of one or two {name: values} entries")
    default = dict(default or {})
    labels = dict(labels or {})
    unknown = set(default) - set(grids)
    if unknown:
        raise ValueError(f"default names a parameter that has no grid: {sorted(unknown)}")
    axes = []
    for name, values in grids.items():
        if not str(name).isidentifier():
            raise ValueError(f"grids: parameter name {name!r} is not a Python identifier")
        if isinstance(values, np.ndarray):
            values = tuple(values.tolist())
        else:
            values = tuple(v.item() if isinstance(v, np.generic) else v for v in values)
        if not values:
            raise ValueError(f"grids: the grid for {name!r} is empty")
        texts = tuple(v if isinstance(v, str) else fmt.format(v) if isinstance(fmt, str) else fmt(v)
                      for v in values)
        if len(set(texts)) != len(texts):
            raise ValueError(f"grids: two values of {name!r} print the same with fmt; use a finer fmt")
        start = 0
        if name in default:
            start = _index_of(values, default[name], name)
        axes.append(_Axis(name, labels.get(name, name), values, texts, start))
    return axes


def _index_of(values: tuple, wanted, name: str) -> int:
    for i, v in enumerate(values):
        try:
            if v == wanted or (np.isscalar(v) and np.isclose(float(v), float(wanted), rtol=0, atol=1e-12)):
                return i
        except (TypeError, ValueError):
            continue
    raise ValueError(f"default: {name}={wanted!r} is not one of the grid values {list(values)}")


def figure_png(fig, dpi: int = DPI) -> bytes:
    """Return ``fig`` rendered as PNG bytes (no timestamp or software tag, so the bytes are
    reproducible), and close the figure."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    finally:
        plt.close(fig)
    return buf.getvalue()


def _alt_text(alt, params: dict, texts: dict) -> str:
    if callable(alt):
        return str(alt(**params))
    if alt is None:
        return "Figure at " + ", ".join(f"{k} = {v}" for k, v in texts.items())
    return str(alt).format(**texts)


def _draw_png(draw: Callable, params: dict, dpi: int) -> bytes:
    fig = draw(**params)
    if not hasattr(fig, "savefig"):
        raise TypeError(f"draw must return a matplotlib Figure, got {type(fig).__name__}")
    return figure_png(fig, dpi)


def _grid_points(axes: list[_Axis]):
    """Yield (flat index, params, value texts) over the grid, last axis fastest."""
    shape = [len(a.values) for a in axes]
    for flat, idx in enumerate(np.ndindex(*shape)):
        params = {a.name: a.values[i] for a, i in zip(axes, idx)}
        texts = {a.name: a.texts[i] for a, i in zip(axes, idx)}
        yield flat, params, texts


def explorer_html(draw: Callable, grids: Mapping[str, Sequence], *, default: Mapping | None = None,
                  labels: Mapping[str, str] | None = None, fmt="{:g}", alt=None, key: str = "",
                  dpi: int = DPI) -> str:
    """Return the book's self-contained HTML: range sliders, value labels, the default frame
    as an ``<img>`` with alt text, and inline JavaScript that swaps frames (one per grid point)."""
    axes = _axes(grids, default, labels, fmt)
    frames, alts = [], []
    for _, params, texts in _grid_points(axes):
        frames.append(base64.b64encode(_draw_png(draw, params, dpi)).decode("ascii"))
        alts.append(_alt_text(alt, params, texts))
    shape = [len(a.values) for a in axes]
    start = int(np.ravel_multi_index([a.start for a in axes], shape))

    digest = hashlib.sha1(key.encode())
    for a in axes:
        digest.update(json.dumps([a.name, a.label, list(a.texts)]).encode())
    for f in frames:
        digest.update(f.encode())
    uid = "mrx-" + digest.hexdigest()[:12]

    controls = []
    for k, a in enumerate(axes):
        sid = f"{uid}-{k}"
        controls.append(
            f'<div class="mr-explorer-control" style="display:flex;align-items:center;gap:0.6em;margin:0.2em 0">'
            f'<label for="{sid}" style="min-width:4em;font-weight:600">{html.escape(a.label)}</label>'
            f'<input type="range" id="{sid}" min="0" max="{len(a.values) - 1}" step="1" value="{a.start}" '
            f'aria-valuetext="{html.escape(a.texts[a.start])}" style="flex:1;max-width:24em">'
            f'<output id="{sid}-value" for="{sid}" style="min-width:4em;font-family:monospace">'
            f"{html.escape(a.texts[a.start])}</output></div>"
        )
    # The default frame is already in the <img>; the array keeps an empty slot for it.
    data = {
        "shape": shape,
        "texts": [list(a.texts) for a in axes],
        "frames": ["" if i == start else f for i, f in enumerate(frames)],
        "alts": alts,
    }
    script = (
        "(function(){"
        f"var uid={json.dumps(uid)},d={json.dumps(data, separators=(',', ':'))};"
        "var img=document.getElementById(uid+'-img'),first=img.getAttribute('src');"
        "var inputs=d.shape.map(function(_,k){return document.getElementById(uid+'-'+k);});"
        "function show(){var flat=0;inputs.forEach(function(el,k){"
        "var i=parseInt(el.value,10);flat=flat*d.shape[k]+i;var t=d.texts[k][i];"
        "document.getElementById(uid+'-'+k+'-value').textContent=t;el.setAttribute('aria-valuetext',t);});"
        "img.src=d.frames[flat]?'data:image/png;base64,'+d.frames[flat]:first;img.alt=d.alts[flat];}"
        "inputs.forEach(function(el){el.addEventListener('input',show);});"
        "})();"
    )
    return (
        f'<div class="mr-explorer" id="{uid}" style="margin:0.5em 0 1em 0">'
        + "".join(controls)
        + f'<img id="{uid}-img" src="data:image/png;base64,{frames[start]}" alt="{html.escape(alts[start])}" '
        f'style="max-width:100%;height:auto;display:block">'
        + f"<script>{script}</script></div>"
    )


class _LiveExplorer:
    """The JupyterLab explorer: sliders plus an Output widget, with a stable plain-text repr."""

    def __init__(self, draw, axes: list[_Axis], alt, dpi: int, continuous_update: bool):
        import ipywidgets as widgets

        self._draw, self._axes, self._alt, self._dpi = draw, axes, alt, dpi
        self._cache: dict[tuple, bytes] = {}
        self.sliders = []
        for a in axes:
            common = {"options": list(zip(a.texts, range(len(a.values)))), "value": a.start,
                      "description": a.label, "style": {"description_width": "initial"}}
            self.sliders.append(
                widgets.ToggleButtons(**common) if all(isinstance(v, str) for v in a.values) else
                widgets.SelectionSlider(**common, continuous_update=continuous_update,
                                        layout=widgets.Layout(width="28em")))
        self.status = widgets.Label()
        self.output = widgets.Output()
        self.widget = widgets.VBox([*self.sliders, self.status, self.output])
        for s in self.sliders:
            s.observe(self._redraw, names="value")
        self._redraw()

    def _redraw(self, change=None) -> None:
        idx = tuple(s.value for s in self.sliders)
        texts = {a.name: a.texts[i] for a, i in zip(self._axes, idx)}
        params = {a.name: a.values[i] for a, i in zip(self._axes, idx)}
        if idx not in self._cache:
            shown = ", ".join(f"{a.label} = {texts[a.name]}" for a in self._axes)
            self.status.value = f"working on {shown} ..."
            self.output.outputs = ()  # make room: a progress bar shows here, not below the old figure
            with self.output:  # whatever draw prints or shows (a progress bar) appears here meanwhile
                self._cache[idx] = _draw_png(self._draw, params, self._dpi)
            self.status.value = ""
        # Set the Output widget's state directly (no display messages): the figure never leaks
        # into the cell's own outputs, whatever front end runs the notebook.
        self.output.outputs = ({
            "output_type": "display_data",
            "data": {"image/png": base64.b64encode(self._cache[idx]).decode("ascii"),
                     "text/plain": _alt_text(self._alt, params, texts)},
            "metadata": {},
        },)

    def describe(self) -> str:
        """Return a one-line text form: what the sliders move over (stable, for nbval)."""
        parts = [f"{a.name} ({len(a.values)} values, {a.texts[0]} to {a.texts[-1]})" for a in self._axes]
        return "Live explorer over " + " and ".join(parts) + "."

    def _repr_mimebundle_(self, **kwargs):
        bundle = self.widget._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = self.describe()
        return bundle


def live_explorer(draw: Callable, grids: Mapping[str, Sequence], *, default: Mapping | None = None,
                  labels: Mapping[str, str] | None = None, fmt="{:g}", alt=None, dpi: int = DPI,
                  continuous_update: bool = True) -> _LiveExplorer:
    """Return the JupyterLab explorer (display it to show it): one ipywidgets slider per grid
    and the figure, redrawn when a slider moves."""
    return _LiveExplorer(draw, _axes(grids, default, labels, fmt), alt, dpi, continuous_update)


class _StaticExplorer:
    def __init__(self, page: str, summary: str):
        self.page, self.summary = page, summary

    def _repr_mimebundle_(self, **kwargs):
        return {"text/html": self.page, "text/plain": self.summary}


def explore(draw: Callable, grids: Mapping[str, Sequence], *, default: Mapping | None = None,
            labels: Mapping[str, str] | None = None, fmt="{:g}", alt=None, key: str = "",
            dpi: int = DPI, continuous_update: bool = True) -> None:
    """Show ``draw(**params)`` behind one slider per grid (one or two grids); returns None.

    Parameters
    ----------
    draw : callable
        ``draw(**params) -> matplotlib.figure.Figure``; called once per grid point shown.
    grids : dict
        ``{name: values}``, one or two entries; each slider steps through its values.
    default : dict, optional
        Starting value per parameter (must be one of its grid values); the first by default.
    labels : dict, optional
        Slider label per parameter (for example ``{"beta": "β"}``); the name by default.
    fmt : str or callable
        How a value is printed next to its slider, ``"{:g}"`` by default.
    alt : str or callable, optional
        Alt text of each frame: a template formatted with the printed values
        (``"KL penalty at beta = {beta}"``) or a function of the parameters.
    key : str
        Extra text mixed into the element ids, for two otherwise identical explorers on a page.
    dpi : int
        Resolution of the frames.
    continuous_update : bool
        Live mode only: redraw while dragging (True) or on release (False, for slow draws).
    """
    from IPython.display import display

    if building_book():
        axes = _axes(grids, default, labels, fmt)
        page = explorer_html(draw, grids, default=default, labels=labels, fmt=fmt, alt=alt, key=key, dpi=dpi)
        n = int(np.prod([len(a.values) for a in axes]))
        summary = f"Explorer with {n} precomputed frames over " + ", ".join(a.name for a in axes) + "."
        display(_StaticExplorer(page, summary))
    else:
        display(live_explorer(draw, grids, default=default, labels=labels, fmt=fmt, alt=alt, dpi=dpi,
                              continuous_update=continuous_update))


class _StaticFigure:
    def __init__(self, png: bytes, alt: str, caption: str | None):
        self.png, self.alt, self.caption = png, alt, caption

    def _repr_mimebundle_(self, **kwargs):
        b64 = base64.b64encode(self.png).decode("ascii")
        if not building_book():
            # JupyterLab shows the PNG; the alt text is the plain-text form (and what nbval compares).
            return {"image/png": b64, "text/plain": self.alt}
        cap = f"<figcaption>{html.escape(self.caption)}</figcaption>" if self.caption else ""
        page = (f'<figure class="mr-figure" style="margin:0.5em 0 1em 0">'
                f'<img src="data:image/png;base64,{b64}" alt="{html.escape(self.alt)}" '
                f'style="max-width:100%;height:auto;display:block">{cap}</figure>')
        return {"text/html": page, "text/plain": self.alt}


def show_figure(fig, alt: str, caption: str | None = None, dpi: int = DPI) -> None:
    """Show a static figure with alt text (and a caption in the book), close it; returns None."""
    from IPython.display import display

    png = figure_png(fig, dpi)  # renders and closes the figure, also when alt is missing
    if not alt:
        raise ValueError("alt must describe the figure for readers who cannot see it")
    display(_StaticFigure(png, alt, caption))
