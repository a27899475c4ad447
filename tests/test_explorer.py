"""The explorer: a self-contained, deterministic HTML slider in the book, a live widget in
JupyterLab, and figures that are always closed."""

import base64
import html
import json
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from minirlhf.course import explorer  # noqa: E402


def draw_line(slope, offset=0.0):
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [offset, offset + slope])
    ax.set_ylim(-3, 3)
    ax.set_title(f"slope {slope}, offset {offset}")
    return fig


def frames_of(page: str) -> dict:
    """Return the data object of the explorer's inline script."""
    match = re.search(r"d=(\{.*?\});var img", page)
    assert match, "no frame data in the script"
    return json.loads(match.group(1))


@pytest.fixture(autouse=True)
def no_open_figures():
    plt.close("all")
    yield
    assert plt.get_fignums() == [], "the explorer left figures open"


def test_book_html_has_one_frame_per_grid_point_and_shows_the_default():
    page = explorer.explorer_html(
        draw_line, {"slope": [-1, 0, 1, 2]}, default={"slope": 1}, alt="line with slope {slope}"
    )
    data = frames_of(page)
    assert data["shape"] == [4] and len(data["frames"]) == 4 and len(data["alts"]) == 4
    # The default frame lives in the <img> itself; its slot in the array is empty.
    assert [f == "" for f in data["frames"]] == [False, False, True, False]
    img = re.search(r'<img id="([^"]+)" src="data:image/png;base64,([^"]+)" alt="([^"]+)"', page)
    assert img and base64.b64decode(img.group(2)) == explorer.figure_png(draw_line(1))
    assert html.unescape(img.group(3)) == "line with slope 1"
    assert data["alts"][0] == "line with slope -1"
    # The frames differ: each grid point was really drawn.
    assert len({*data["frames"], img.group(2)} - {""}) == 4
    # One range input per grid, with its label and a value shown next to it.
    assert page.count('type="range"') == 1
    assert re.search(r'<input type="range" id="[^"]+" min="0" max="3" step="1" value="2"', page)
    assert re.search(r'<output id="[^"]+" for="[^"]+"[^>]*>1</output>', page)
    assert '<label for="' in page


def test_book_html_is_self_contained_and_deterministic():
    grids = {"slope": [0.5, 1.5], "offset": [-1.0, 0.0, 1.0]}
    first = explorer.explorer_html(draw_line, grids, default={"offset": 0.0})
    second = explorer.explorer_html(draw_line, grids, default={"offset": 0.0})
    assert first == second
    assert "<script src" not in first and "require" not in first
    assert "http://" not in first and "https://" not in first
    assert first.count('type="range"') == 2 and len(frames_of(first)["frames"]) == 6
    ids = re.findall(r'\sid="([^"]+)"', first)
    assert len(ids) == len(set(ids))
    # A different key gives different ids for an otherwise identical explorer.
    other = explorer.explorer_html(draw_line, grids, default={"offset": 0.0}, key="second")
    assert set(ids).isdisjoint(re.findall(r'\sid="([^"]+)"', other))


def test_two_grids_are_laid_out_last_axis_fastest():
    grids = {"slope": [0.5, 1.5], "offset": [-1.0, 0.0, 1.0]}
    page = explorer.explorer_html(
        draw_line, grids, default={"slope": 1.5, "offset": 1.0}, alt="slope {slope}, offset {offset}"
    )
    data = frames_of(page)
    assert data["shape"] == [2, 3] and data["frames"][5] == ""  # default (1, 2) -> 1 * 3 + 2
    assert data["alts"][1] == "slope 0.5, offset 0" and data["alts"][3] == "slope 1.5, offset -1"
    want = base64.b64encode(explorer.figure_png(draw_line(0.5, 1.0))).decode()
    assert data["frames"][2] == want


def test_png_frames_carry_no_timestamp_or_software_tag():
    png = explorer.figure_png(draw_line(1))
    assert png.startswith(b"\x89PNG") and b"Software" not in png and b"matplotlib" not in png.lower()
    assert png == explorer.figure_png(draw_line(1))


@pytest.mark.parametrize(
    "kwargs, word",
    [
        (dict(grids={}), "grids"),
        (dict(grids={"a": [1], "b": [1], "c": [1]}), "grids"),
        (dict(grids={"slope": []}), "slope"),
        (dict(grids={"slope": [1, 2]}, default={"slope": 3}), "default"),
        (dict(grids={"slope": [1, 2]}, default={"offset": 0}), "default"),
        (dict(grids={"not a name": [1]}), "grids"),
        (dict(grids={"slope": [0.1, 0.11]}, fmt="{:.1f}"), "fmt"),
    ],
)
def test_bad_grids_are_rejected_by_name(kwargs, word):
    with pytest.raises(ValueError, match=word):
        explorer.explorer_html(draw_line, **kwargs)


def test_explore_in_book_mode_displays_one_html_output(monkeypatch):
    shown = []
    monkeypatch.setenv("MINIRLHF_BUILDING_BOOK", "1")
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    assert explorer.explore(draw_line, {"slope": [0, 1]}) is None
    (obj,) = shown
    bundle = obj._repr_mimebundle_()
    assert set(bundle) == {"text/html", "text/plain"}
    assert bundle["text/html"].startswith('<figure class="mr-explorer"')
    assert bundle["text/plain"] == "Explorer with 2 precomputed frames over slope."


def test_live_explorer_redraws_when_the_slider_moves(monkeypatch):
    monkeypatch.delenv("MINIRLHF_BUILDING_BOOK", raising=False)
    live = explorer.live_explorer(draw_line, {"slope": [0, 1, 2]}, default={"slope": 1}, alt="slope {slope}")
    bundle = live._repr_mimebundle_()
    assert bundle["text/plain"] == "Live explorer over slope (3 values, 0 to 2)."
    assert "application/vnd.jupyter.widget-view+json" in bundle
    (slider,) = live.sliders
    before = live.output.outputs[0]["data"]
    assert before["text/plain"] == "slope 1"
    slider.value = 2  # the option's index
    after = live.output.outputs[0]["data"]
    assert after["text/plain"] == "slope 2" and after["image/png"] != before["image/png"]
    assert base64.b64decode(after["image/png"]) == explorer.figure_png(draw_line(2))


def test_show_figure_gives_alt_text_in_both_modes(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    monkeypatch.delenv("MINIRLHF_BUILDING_BOOK", raising=False)
    monkeypatch.setenv("MINIRLHF_RECORDING", "1")
    explorer.show_figure(draw_line(1), alt="a rising line")
    data, metadata = shown[0]._repr_mimebundle_()
    assert set(data) == {"image/png", "text/plain"}
    assert metadata["image/png"] == {"width": 300}  # draw_line is 3 inches wide: 300 CSS px
    # The book's form rides along in the metadata, which JupyterLab and nbval ignore.
    assert set(metadata) == {"image/png", explorer.BOOK_KEY}
    assert 'alt="a rising line"' in metadata[explorer.BOOK_KEY]["text/html"]
    monkeypatch.setenv("MINIRLHF_BUILDING_BOOK", "1")
    explorer.show_figure(draw_line(1), alt="a rising line", caption="A <caption>")
    page = shown[1]._repr_mimebundle_()["text/html"]
    assert 'alt="a rising line"' in page and "<figcaption>A &lt;caption&gt;</figcaption>" in page
    with pytest.raises(ValueError, match="alt"):
        explorer.show_figure(draw_line(1), alt="")


def test_live_explorer_uses_buttons_for_words_and_says_when_it_works(monkeypatch):
    import ipywidgets as widgets

    monkeypatch.delenv("MINIRLHF_BUILDING_BOOK", raising=False)
    statuses, calls = [], []

    def draw(arm, slope):
        calls.append((arm, slope))
        statuses.append(live.status.value if calls[1:] else "")  # what the reader sees meanwhile
        return draw_line(slope)

    live = explorer.live_explorer(draw, {"arm": ["rm", "verifier"], "slope": [0, 1]}, labels={"slope": "s"})
    buttons, slider = live.sliders
    assert isinstance(buttons, widgets.ToggleButtons) and isinstance(slider, widgets.SelectionSlider)
    buttons.value = 1
    assert calls == [("rm", 0), ("verifier", 0)] and statuses[-1] == "working on arm = verifier, s = 0 ..."
    assert live.status.value == ""  # cleared once the figure is there
    buttons.value = 0  # drawn before: from the cache, no new call
    assert len(calls) == 2


def _fig(width, height, fontsize):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height))
    ax.plot([0, 1], [0, 1], label="a line")
    ax.tick_params(labelsize=fontsize + 2)
    ax.legend(fontsize=fontsize)
    return fig


def test_figures_are_rendered_twice_as_sharp_with_their_css_size_and_smallest_font():
    r = explorer.render(_fig(6.0, 3.0, 7))
    assert (r.css_width, r.css_height) == (600, 300) and r.min_font_pt == 7
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(r.png))
    assert image.size == (1200, 600)  # 2 x the CSS size
    assert image.mode == "P"  # a 256-color palette: a third of the bytes, same crisp lines
    assert explorer.render(_fig(6.0, 3.0, 7)).png == r.png  # and reproducible


def test_the_book_shows_a_narrow_rendering_on_a_phone(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    monkeypatch.setenv("MINIRLHF_BUILDING_BOOK", "1")

    def draw(narrow=False):
        return _fig(3.5, 4.0, 9) if narrow else _fig(6.5, 3.0, 8)

    explorer.show_figure(draw, alt="a line", caption="What to see.")
    page = shown[0]._repr_mimebundle_()["text/html"]
    assert '<source media="(max-width: 576px)"' in page and 'width="350" height="400"' in page
    assert 'width="650" height="300"' in page
    assert 'data-min-font-pt="8" data-narrow-width-in="3.5" data-narrow-min-font-pt="9"' in page
    # In JupyterLab the wide one is shown, and while the solutions are recorded both are kept
    # for the book.
    monkeypatch.delenv("MINIRLHF_BUILDING_BOOK")
    monkeypatch.setenv("MINIRLHF_RECORDING", "1")
    explorer.show_figure(draw, alt="a line", caption="What to see.")
    data, metadata = shown[1]._repr_mimebundle_()
    assert set(data) == {"image/png", "text/plain"} and metadata[explorer.BOOK_KEY]["text/html"] == page


def test_the_book_reads_each_output_in_its_book_form(monkeypatch):
    import nbformat

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    monkeypatch.delenv("MINIRLHF_BUILDING_BOOK", raising=False)
    monkeypatch.setenv("MINIRLHF_RECORDING", "1")
    explorer.show_figure(draw_line(1), alt="a rising line", caption="Up.")
    explorer.explore(draw_line, {"slope": [0, 1, 2]}, default={"slope": 1}, alt="slope {slope}")
    outputs = []
    for obj in shown:
        data, metadata = obj._repr_mimebundle_()
        outputs.append(nbformat.v4.new_output("display_data", data=data, metadata=metadata))
    assert "application/vnd.jupyter.widget-view+json" in outputs[1]["data"]  # live sliders in JupyterLab
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell("draw()", outputs=outputs))
    book = explorer.book_notebook(nbformat.writes(nb))
    figure, sliders = book.cells[0].outputs
    assert "<figcaption>Up.</figcaption>" in figure["data"]["text/html"] and not figure["metadata"]
    assert '<input type="range"' in sliders["data"]["text/html"]
    assert "application/vnd.jupyter.widget-view+json" not in sliders["data"]


def test_an_explorer_whose_draw_takes_narrow_swaps_both_renderings():
    def draw(slope, narrow=False):
        fig = _fig(3.5 if narrow else 6.0, 3.0, 9 if narrow else 7)
        fig.axes[0].plot([0, 1], [0, slope])
        return fig

    page = explorer.explorer_html(draw, {"slope": [0, 1, 2]}, default={"slope": 1}, caption="Slopes.")
    assert page.count("<source") == 1 and "srcset" in page and "firstSmall" in page
    assert 'data-min-font-pt="7"' in page and 'data-narrow-min-font-pt="9"' in page
    assert "<figcaption>Slopes.</figcaption>" in page


def test_a_learners_run_makes_no_book_forms(monkeypatch):
    """In JupyterLab (nbval and the grader alike) the explorer draws only the frame it shows,
    and a figure is not drawn a second time for the phone: the book's forms are made only
    while the notebook generator records the solutions."""
    shown, calls = [], []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    monkeypatch.delenv("MINIRLHF_BUILDING_BOOK", raising=False)
    monkeypatch.delenv("MINIRLHF_RECORDING", raising=False)

    def draw(slope, narrow=False):
        calls.append((slope, narrow))
        return draw_line(slope)

    explorer.explore(draw, {"slope": [0, 1, 2]}, default={"slope": 1}, alt="slope {slope}")
    assert calls == [(1, False)]  # the default frame only
    bundle = shown[0]._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle and explorer.BOOK_KEY not in str(bundle)
    calls.clear()
    explorer.show_figure(lambda narrow=False: draw(1, narrow), alt="a rising line")
    assert calls == [(1, False)]
    data, metadata = shown[1]._repr_mimebundle_()
    assert set(data) == {"image/png", "text/plain"} and explorer.BOOK_KEY not in metadata
    # The recording makes all of them: every frame, wide and narrow, and the phone figure.
    monkeypatch.setenv("MINIRLHF_RECORDING", "1")
    calls.clear()
    explorer.explore(draw, {"slope": [0, 1, 2]}, default={"slope": 1}, alt="slope {slope}")
    assert sorted(set(calls)) == [(s, n) for s in (0, 1, 2) for n in (False, True)]
    assert explorer.BOOK_KEY in shown[2]._repr_mimebundle_()[1]
