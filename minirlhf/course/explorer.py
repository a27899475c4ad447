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

**Recorded once, shown in both.** The book renders the outputs recorded in ``solutions/``,
which are executed as JupyterLab runs them. So while the notebook generator records them
(:func:`minirlhf.course.frontend.recording_book_forms`), every figure and explorer also
carries its book form (the static HTML above) in the output's metadata under
:data:`BOOK_KEY`, which JupyterLab and nbval ignore; while the book is built,
:func:`book_notebook` reads each notebook and puts that form in place of the live one. A
learner's run makes neither the precomputed frames nor the phone renderings: it never shows
them.

``draw`` receives the grid values as keyword arguments and must return a new Figure; the
explorer renders it to PNG and closes it. One or two grids are supported (two grids make
``len(a) * len(b)`` frames, so keep them small).

**Sharp and readable on every screen.** Every figure is rendered at :data:`DPI` (200) pixels
per inch and shown at :data:`CSS_PPI` (100) CSS pixels per inch, so it is twice as sharp as
the screen needs on a high-DPI display, and scaled down to the column when it is wider. A
figure drawn for a phone can come with it: ``show_figure(..., narrow=...)``, or a ``draw``
that takes ``narrow=True``, gives a second rendering that the book shows below
:data:`PHONE_MEDIA` (a ``<picture>`` with a ``<source media=...>``). Each image carries its
drawn width and its smallest font as ``data-`` attributes, so the browser test can check the
size that text really reaches a reader's eye at each width.
"""

from __future__ import annotations

import base64
import hashlib
import html
import inspect
import io
import json
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from .frontend import building_book, recording_book_forms

__all__ = [
    "explore",
    "explorer_html",
    "live_explorer",
    "figure_png",
    "render",
    "Rendered",
    "show_figure",
    "DPI",
    "CSS_PPI",
    "PHONE_MEDIA",
    "BOOK_KEY",
    "book_notebook",
]

BOOK_KEY = "minirlhf/book"  # an output's metadata key for the form the book shows
DPI = 200  # pixels per inch of every rendered figure: twice what it is shown at
CSS_PPI = 100  # CSS pixels per inch of figure: a 6.5 in wide figure is shown 650 px wide at most
PHONE_MEDIA = "(max-width: 576px)"  # below this width the book shows a figure's narrow variant


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
        texts = tuple(v if isinstance(v, str) else fmt.format(v) if isinstance(fmt, str) else fmt(v) for v in values)
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


@dataclass(frozen=True)
class Rendered:
    """A figure rendered to PNG, with the size it is drawn for and its smallest text."""

    png: bytes
    width_in: float
    height_in: float
    min_font_pt: float  # the smallest visible text (tick labels, legends, titles), in points

    @property
    def css_width(self) -> int:
        return round(self.width_in * CSS_PPI)

    @property
    def css_height(self) -> int:
        return round(self.height_in * CSS_PPI)

    def b64(self) -> str:
        return base64.b64encode(self.png).decode("ascii")


def _smallest_font(fig) -> float:
    """Return the smallest font size (points) of the visible, non-empty text of a drawn figure."""
    from matplotlib.text import Text

    sizes = [
        t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and t.get_alpha() != 0
    ]
    return float(min(sizes)) if sizes else float("inf")


def render(fig, dpi: int = DPI) -> Rendered:
    """Return ``fig`` rendered (PNG bytes without timestamp or software tag, so reproducible),
    its size in inches and its smallest font, and close the figure."""
    import matplotlib.pyplot as plt
    from PIL import Image

    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
        width, height = fig.get_size_inches()
        smallest = _smallest_font(fig)  # after savefig: the ticks shown are the ticks drawn
    finally:
        plt.close(fig)
    # A palette of 256 colors (no dithering) keeps lines and text crisp and makes the file
    # about a third of the size: it matters for the book's slider pages, which hold many frames.
    image = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    small = image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    out = io.BytesIO()
    small.save(out, format="PNG", optimize=True)
    return Rendered(out.getvalue(), float(width), float(height), smallest)


def figure_png(fig, dpi: int = DPI) -> bytes:
    """Return ``fig`` rendered as PNG bytes (no timestamp or software tag, so the bytes are
    reproducible), and close the figure."""
    return render(fig, dpi).png


def _img_attrs(wide: Rendered, narrow: Rendered | None) -> str:
    """The <img> attributes every figure carries: its CSS size and what the browser test reads."""
    attrs = (
        f'width="{wide.css_width}" height="{wide.css_height}" '
        f'data-width-in="{wide.width_in:g}" data-min-font-pt="{wide.min_font_pt:g}"'
    )
    if narrow is not None:
        attrs += f' data-narrow-width-in="{narrow.width_in:g}" data-narrow-min-font-pt="{narrow.min_font_pt:g}"'
    return attrs


def _picture(uid: str | None, wide: Rendered, narrow: Rendered | None, alt: str) -> str:
    """Return a <picture>: the narrow rendering below PHONE_MEDIA when there is one, else the wide."""
    ids = (f' id="{uid}-src"', f' id="{uid}-img"') if uid else ("", "")
    source = ""
    if narrow is not None:
        source = (
            f'<source{ids[0]} media="{PHONE_MEDIA}" srcset="data:image/png;base64,{narrow.b64()}" '
            f'width="{narrow.css_width}" height="{narrow.css_height}">'
        )
    return (
        f'<picture>{source}<img{ids[1]} src="data:image/png;base64,{wide.b64()}" '
        f'alt="{html.escape(alt)}" {_img_attrs(wide, narrow)} '
        f'style="max-width:100%;height:auto;display:block"></picture>'
    )


def _takes_narrow(draw: Callable) -> bool:
    try:
        return "narrow" in inspect.signature(draw).parameters
    except (TypeError, ValueError):
        return False


def _alt_text(alt, params: dict, texts: dict) -> str:
    if callable(alt):
        return str(alt(**params))
    if alt is None:
        return "Figure at " + ", ".join(f"{k} = {v}" for k, v in texts.items())
    return str(alt).format(**texts)


def _draw_rendered(draw: Callable, params: dict, dpi: int, narrow: bool = False) -> Rendered:
    fig = draw(**params, narrow=True) if narrow else draw(**params)
    if not hasattr(fig, "savefig"):
        raise TypeError(f"draw must return a matplotlib Figure, got {type(fig).__name__}")
    return render(fig, dpi)


def _grid_points(axes: list[_Axis]):
    """Yield (flat index, params, value texts) over the grid, last axis fastest."""
    shape = [len(a.values) for a in axes]
    for flat, idx in enumerate(np.ndindex(*shape)):
        params = {a.name: a.values[i] for a, i in zip(axes, idx)}
        texts = {a.name: a.texts[i] for a, i in zip(axes, idx)}
        yield flat, params, texts


def explorer_html(
    draw: Callable,
    grids: Mapping[str, Sequence],
    *,
    default: Mapping | None = None,
    labels: Mapping[str, str] | None = None,
    fmt="{:g}",
    alt=None,
    key: str = "",
    dpi: int = DPI,
    caption: str | None = None,
) -> str:
    """Return the book's self-contained HTML: range sliders, value labels, the default frame
    as an ``<img>`` with alt text, and inline JavaScript that swaps frames (one per grid point)."""
    axes = _axes(grids, default, labels, fmt)
    narrow = _takes_narrow(draw)  # a draw that can lay itself out for a phone
    wide_frames, narrow_frames, alts = [], [], []
    for _, params, texts in _grid_points(axes):
        wide_frames.append(_draw_rendered(draw, params, dpi))
        if narrow:
            narrow_frames.append(_draw_rendered(draw, params, dpi, narrow=True))
        alts.append(_alt_text(alt, params, texts))
    frames = [r.b64() for r in wide_frames]
    small = [r.b64() for r in narrow_frames]
    shape = [len(a.values) for a in axes]
    start = int(np.ravel_multi_index([a.start for a in axes], shape))

    digest = hashlib.sha1(key.encode())
    for a in axes:
        digest.update(json.dumps([a.name, a.label, list(a.texts)]).encode())
    for f in frames + small:
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
        "small": ["" if i == start else f for i, f in enumerate(small)],
        "alts": alts,
    }
    script = (
        "(function(){"
        f"var uid={json.dumps(uid)},d={json.dumps(data, separators=(',', ':'))};"
        "var img=document.getElementById(uid+'-img'),first=img.getAttribute('src');"
        "var src=document.getElementById(uid+'-src'),firstSmall=src?src.getAttribute('srcset'):'';"
        "var inputs=d.shape.map(function(_,k){return document.getElementById(uid+'-'+k);});"
        "function show(){var flat=0;inputs.forEach(function(el,k){"
        "var i=parseInt(el.value,10);flat=flat*d.shape[k]+i;var t=d.texts[k][i];"
        "document.getElementById(uid+'-'+k+'-value').textContent=t;el.setAttribute('aria-valuetext',t);});"
        "img.src=d.frames[flat]?'data:image/png;base64,'+d.frames[flat]:first;img.alt=d.alts[flat];"
        "if(src){src.srcset=d.small[flat]?'data:image/png;base64,'+d.small[flat]:firstSmall;}}"
        "inputs.forEach(function(el){el.addEventListener('input',show);});"
        "})();"
    )
    # One <img> for every frame: its data- attributes hold the smallest font over all frames.
    shown = wide_frames[start]
    tiny = min(r.min_font_pt for r in wide_frames)
    wide_meta = Rendered(shown.png, shown.width_in, shown.height_in, tiny)
    narrow_meta = None
    if narrow:
        first_small = narrow_frames[start]
        narrow_meta = Rendered(
            first_small.png, first_small.width_in, first_small.height_in, min(r.min_font_pt for r in narrow_frames)
        )
    figure = _picture(uid, wide_meta, narrow_meta, alts[start])
    cap = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
    return (
        f'<figure class="mr-explorer" id="{uid}" style="margin:0.5em 0 1em 0">'
        + "".join(controls)
        + figure
        + cap
        + f"<script>{script}</script></figure>"
    )


class _LiveExplorer:
    """The JupyterLab explorer: sliders plus an Output widget, with a stable plain-text repr."""

    def __init__(self, draw, axes: list[_Axis], alt, dpi: int, continuous_update: bool):
        import ipywidgets as widgets

        self._draw, self._axes, self._alt, self._dpi = draw, axes, alt, dpi
        self._cache: dict[tuple, Rendered] = {}
        self.sliders = []
        for a in axes:
            common = {
                "options": list(zip(a.texts, range(len(a.values)))),
                "value": a.start,
                "description": a.label,
                "style": {"description_width": "initial"},
            }
            self.sliders.append(
                widgets.ToggleButtons(**common)
                if all(isinstance(v, str) for v in a.values)
                else widgets.SelectionSlider(
                    **common, continuous_update=continuous_update, layout=widgets.Layout(width="28em")
                )
            )
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
                self._cache[idx] = _draw_rendered(self._draw, params, self._dpi)
            self.status.value = ""
        # Set the Output widget's state directly (no display messages): the figure never leaks
        # into the cell's own outputs, whatever front end runs the notebook.
        self.output.outputs = (
            {
                "output_type": "display_data",
                "data": {"image/png": self._cache[idx].b64(), "text/plain": _alt_text(self._alt, params, texts)},
                "metadata": {"image/png": {"width": self._cache[idx].css_width}},
            },
        )

    def describe(self) -> str:
        """Return a one-line text form: what the sliders move over (stable, for nbval)."""
        parts = [f"{a.name} ({len(a.values)} values, {a.texts[0]} to {a.texts[-1]})" for a in self._axes]
        return "Live explorer over " + " and ".join(parts) + "."

    def _repr_mimebundle_(self, **kwargs):
        bundle = self.widget._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = self.describe()
        return bundle


def live_explorer(
    draw: Callable,
    grids: Mapping[str, Sequence],
    *,
    default: Mapping | None = None,
    labels: Mapping[str, str] | None = None,
    fmt="{:g}",
    alt=None,
    dpi: int = DPI,
    continuous_update: bool = True,
) -> _LiveExplorer:
    """Return the JupyterLab explorer (display it to show it): one ipywidgets slider per grid
    and the figure, redrawn when a slider moves."""
    return _LiveExplorer(draw, _axes(grids, default, labels, fmt), alt, dpi, continuous_update)


class _StaticExplorer:
    def __init__(self, page: str, summary: str):
        self.page, self.summary = page, summary

    def _repr_mimebundle_(self, **kwargs):
        return {"text/html": self.page, "text/plain": self.summary}


class _LiveWithBook:
    """The live explorer, carrying the book's static form in its output's metadata."""

    def __init__(self, live: _LiveExplorer, book: _StaticExplorer):
        self.live, self.book = live, book

    def _repr_mimebundle_(self, **kwargs):
        return self.live._repr_mimebundle_(**kwargs), {BOOK_KEY: self.book._repr_mimebundle_()}


def explore(
    draw: Callable,
    grids: Mapping[str, Sequence],
    *,
    default: Mapping | None = None,
    labels: Mapping[str, str] | None = None,
    fmt="{:g}",
    alt=None,
    key: str = "",
    dpi: int = DPI,
    continuous_update: bool = True,
    caption: str | None = None,
    book_grids: Mapping[str, Sequence] | None = None,
) -> None:
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
    caption : str, optional
        What to see in the figure; the book prints it under the frames.
    book_grids : mapping, optional
        The grids of the book's precomputed frames, when they differ from the live ones
        (default: ``grids``).

    A ``draw`` that takes a ``narrow`` keyword is also drawn with ``narrow=True`` for the book's
    phone layout.
    """
    from IPython.display import display

    book_grids = grids if book_grids is None else book_grids

    def live():
        return live_explorer(
            draw, grids, default=default, labels=labels, fmt=fmt, alt=alt, dpi=dpi, continuous_update=continuous_update
        )

    if not (building_book() or recording_book_forms()):
        display(live())  # a learner's run: the book's frames would never be seen
        return
    axes = _axes(book_grids, default, labels, fmt)
    page = explorer_html(
        draw, book_grids, default=default, labels=labels, fmt=fmt, alt=alt, key=key, dpi=dpi, caption=caption
    )
    n = int(np.prod([len(a.values) for a in axes]))
    summary = f"Explorer with {n} precomputed frames over " + ", ".join(a.name for a in axes) + "."
    static = _StaticExplorer(page, summary)
    display(static if building_book() else _LiveWithBook(live(), static))


class _StaticFigure:
    def __init__(self, wide: Rendered, narrow: Rendered | None, alt: str, caption: str | None):
        self.wide, self.narrow, self.alt, self.caption = wide, narrow, alt, caption

    def _book(self) -> dict:
        cap = f"<figcaption>{html.escape(self.caption)}</figcaption>" if self.caption else ""
        page = (
            f'<figure class="mr-figure" style="margin:0.5em 0 1em 0">'
            f"{_picture(None, self.wide, self.narrow, self.alt)}{cap}</figure>"
        )
        return {"text/html": page, "text/plain": self.alt}

    def _repr_mimebundle_(self, **kwargs):
        if not building_book():
            # JupyterLab shows the PNG at its CSS size (sharp on a high-DPI screen); the alt
            # text is the plain-text form (and what nbval compares). While the solutions are
            # recorded, the book's form rides along in the metadata.
            metadata = {"image/png": {"width": self.wide.css_width}}
            if recording_book_forms():
                metadata[BOOK_KEY] = self._book()
            return {"image/png": self.wide.b64(), "text/plain": self.alt}, metadata
        return self._book()


def show_figure(fig, alt: str, caption: str | None = None, dpi: int = DPI, narrow=None) -> None:
    """Show a static figure with alt text and a caption, close it; returns None.

    ``fig`` is a Figure, or a function ``draw(narrow=False) -> Figure``. The book also shows a
    narrow rendering on a phone: ``draw(narrow=True)``, or the Figure given as ``narrow``.
    """
    import matplotlib.pyplot as plt
    from IPython.display import display

    small = None
    for_book = building_book() or recording_book_forms()  # only the book shows the narrow one
    if callable(fig) and not hasattr(fig, "savefig"):
        draw, fig = fig, fig(narrow=False)
        if for_book:
            small = render(draw(narrow=True), dpi)
    elif narrow is not None and for_book:
        small = render(narrow, dpi)
    elif narrow is not None:
        plt.close(narrow)
    wide = render(fig, dpi)  # renders and closes the figure, also when alt is missing
    if not alt:
        raise ValueError("alt must describe the figure for readers who cannot see it")
    display(_StaticFigure(wide, small, alt, caption))


def book_notebook(text: str, **kwargs):
    """Return the notebook in ``text`` as the book shows it: every output that carries a
    book form (:data:`BOOK_KEY` in its metadata) has it as its data instead.

    The book's reader for ``.ipynb`` files (``nb_custom_formats`` in ``_config.yml``)."""
    import nbformat

    nb = nbformat.reads(text, as_version=4)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            book = out.get("metadata", {}).pop(BOOK_KEY, None)
            if book is not None:
                out["data"] = book
                out["metadata"] = {}
    return nb
