"""The source shown in chapter 5 is the package's own, in the two forms a notebook stores."""

import inspect
import json
from pathlib import Path

import pytest

from minirlhf import ppo
from minirlhf.course.source import Source, source_text

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


@pytest.mark.parametrize("name", ["05_two_arm_experiment"])
def test_the_chapters_shown_stages_are_the_current_source(name):
    path = ROOT / "solutions" / f"{name}.ipynb"
    shown = list(_shown_sources(path))
    stages = [ppo.ppo_train, ppo.Rollout, ppo.rollout, ppo.score_and_advantages,
              ppo.ppo_update, ppo.batch_metrics]  # in the chapter's order
    assert len(shown) == len(stages)
    for (md, plain), stage in zip(shown, stages):
        assert plain == source_text(stage), f"{stage.__name__}: the stored page shows old source"
        assert md == f"```python\n{source_text(stage)}\n```"
