"""Advantage estimators as one table: the config's checks, the rollout's extras and the
advantages all come from it, and a new estimator is one module."""

import inspect
import sys
import textwrap

import pytest
import torch

from minirlhf import estimators, task
from minirlhf.model import GPTConfig, TinyGPT, make_generator
from minirlhf.ppo import PPOConfig, rollout, score_and_advantages


@pytest.mark.parametrize("name", estimators.names())
def test_every_estimator_is_complete_and_its_settings_run(name):
    est = estimators.get(name)
    assert est.name == name and est.help.strip() and callable(est.fn) and callable(est.apply)
    assert estimators.module_of(name).ESTIMATOR is est
    cfg = PPOConfig(
        batch_size=8,
        group_size=4 if est.min_group > 1 else 1,
        advantages=name,
        kl_placement="reward" if est.leash_in_advantages else "loss",
    )
    est.check(cfg)


@pytest.mark.parametrize("name", estimators.names())
def test_each_estimator_states_its_functions_signature(name):
    """The contract a learner's advantage_fn must meet is written in the table, and true."""
    est = estimators.get(name)
    params = tuple(inspect.signature(est.fn).parameters)
    assert params[: len(est.signature)] == est.signature, (name, params, est.signature)
    assert est.per_group == (est.apply is estimators.copied_to_tokens)


def test_the_table_decides_what_the_config_accepts():
    assert estimators.names()[0] == "batch" and len(set(estimators.names())) == len(estimators.names())
    with pytest.raises(ValueError, match=r"advantages must be one of \('batch', .*got 'nope'"):
        PPOConfig(advantages="nope")
    for name in estimators.names():
        est = estimators.get(name)
        if est.min_group > 1:
            with pytest.raises(ValueError, match=f"needs group_size >= {est.min_group}"):
                PPOConfig(advantages=name, kl_placement="loss")
        if not est.leash_in_advantages:
            with pytest.raises(ValueError, match="puts no leash in the advantages"):
                PPOConfig(advantages=name, group_size=8, kl_placement="reward")


def test_a_new_estimator_is_one_module(tmp_path, monkeypatch):
    """A module dropped into the package adds a name, its rollout extras and its advantages;
    nothing else changes."""
    (tmp_path / "toy_greedy.py").write_text(
        textwrap.dedent("""
        import torch
        from minirlhf.estimators import Estimator

        def toy(rewards, baseline):
            return rewards - baseline

        def advantages(fn, batch, rewards, reward_fn, beta, cfg):
            return fn(rewards, batch.extras["half"])[:, None] * batch.mask

        def extras(policy, prompts, cfg):
            return {"half": torch.full((prompts.shape[0],), 0.5, dtype=torch.float64)}

        ESTIMATOR = Estimator(
            "toy-greedy", toy, advantages, ("rewards", "baseline"), "a test: r minus one half", extras=extras
        )
    """)
    )
    monkeypatch.setattr(estimators, "__path__", [*estimators.__path__, str(tmp_path)])
    monkeypatch.setattr(estimators._TABLE, "_table", {})
    monkeypatch.setattr(estimators._TABLE, "_modules", {})
    monkeypatch.delitem(sys.modules, "minirlhf.estimators.toy_greedy", raising=False)
    assert "toy-greedy" in estimators.names() and estimators.names()[0] == "batch"
    cfg = PPOConfig(batch_size=4, advantages="toy-greedy", kl_placement="loss")
    torch.manual_seed(0)
    policy = TinyGPT(GPTConfig()).double().eval()
    batch = rollout(policy, policy, task.train_pairs(), cfg, make_generator(0))
    assert set(batch.extras) == {"half"}
    scores = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    _, adv = score_and_advantages(batch, lambda *a: scores, 0.1, cfg)
    assert torch.equal(adv, (scores - 0.5)[:, None] * batch.mask)
    _, mine = score_and_advantages(batch, lambda *a: scores, 0.1, cfg, advantage_fn=lambda r, b: 2 * (r - b))
    assert torch.equal(mine, 2 * adv)  # advantage_fn replaces the estimator's function, same signature


def test_chapter_5s_rollout_has_no_extras_and_the_estimators_module_imports_nothing_heavy():
    cfg = PPOConfig(batch_size=4)
    torch.manual_seed(0)
    policy = TinyGPT(GPTConfig()).double().eval()
    assert rollout(policy, policy, task.train_pairs(), cfg, make_generator(0)).extras == {}
    from minirlhf.store import package_modules

    # the table's modules are found, not imported
    assert set(package_modules(estimators)) == {"minirlhf.estimators", "minirlhf.leashes", "minirlhf.registry"}
