"""The source shown in chapter 5 is the package's own, in the two forms a notebook stores."""

import inspect
import json
from pathlib import Path

import pytest

from minirlhf import ppo
from minirlhf.course.source import PAGE_WIDTH, Source, shown_in, source_text

ROOT = Path(__file__).resolve().parents[1]


def test_source_is_the_functions_own_text():
    shown = Source(ppo.rollout)
    assert repr(shown) == inspect.getsource(ppo.rollout).rstrip("\n")
    assert shown._repr_markdown_() == f"```python\n{repr(shown)}\n```"
    assert repr(shown).startswith("@torch.no_grad()\ndef rollout(")


def test_a_method_is_dedented():
    class Box:
        def size(self):
            return 1

    assert source_text(Box.size).startswith("def size(self):")


def _shown_sources(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            md = "".join(out.get("data", {}).get("text/markdown", ""))
            if md.startswith("```python\n"):
                yield md, "".join(out["data"]["text/plain"])


CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.py"))


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_the_chapters_shown_source_is_the_current_source(chapter):
    path = ROOT / "solutions" / f"{chapter.stem}.ipynb"
    shown = list(_shown_sources(path))
    stages = shown_in(chapter)  # in the chapter's order, read from its Source(...) cells
    assert len(shown) == len(stages)
    for (md, plain), stage in zip(shown, stages):
        assert plain == source_text(stage), f"{stage.__name__}: the stored page shows old source"
        assert md == f"```python\n{source_text(stage)}\n```"


def test_chapter_5_shows_its_stages_and_every_shown_line_fits_the_page():
    shown = {obj for chapter in CHAPTERS for obj in shown_in(chapter)}
    assert {
        ppo.ppo_train,
        ppo.Rollout,
        ppo.rollout,
        ppo.score_and_advantages,
        ppo.ppo_update,
        ppo.batch_metrics,
    } <= shown
    for obj in shown:
        long = [line for line in inspect.getsource(obj).splitlines() if len(line) > PAGE_WIDTH]
        assert not long, f"{obj.__qualname__}: {len(long)} line(s) over {PAGE_WIDTH} characters: {long[:2]}"


def test_every_shown_function_sits_under_the_banner_that_says_so():
    for obj in {inspect.unwrap(obj) for chapter in CHAPTERS for obj in shown_in(chapter)}:
        lines = Path(inspect.getsourcefile(obj)).read_text(encoding="utf-8").splitlines()
        above = lines[: inspect.getsourcelines(obj)[1]]
        headers = [line for line in above if line.startswith("# ----")]
        assert headers and "SHOWN VERBATIM IN CHAPTER" in headers[-1], (
            f"{obj.__qualname__} is shown in a chapter, but the section above it does not say so"
        )
