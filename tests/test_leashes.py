"""The places of the KL leash as one table, in the estimators' shape: each is one module, found
by the package; the config, the estimators and the update read it; a stored run is keyed on the
leash it uses, not on the others."""

import inspect

import pytest
import torch

from minirlhf import estimators, leashes, task
from minirlhf.course import runs
from minirlhf.model import GPTConfig, TinyGPT, make_generator
from minirlhf.ppo import PPOConfig, ppo_update, rollout, score_and_advantages


@pytest.mark.parametrize("name", leashes.names())
def test_every_leash_is_complete_and_states_its_losss_signature(name):
    leash = leashes.get(name)
    assert leash.name == name and leash.help.strip() and callable(leash.apply)
    assert leashes.module_of(name).LEASH is leash and leash.module == leashes.module_of(name).__name__
    params = tuple(inspect.signature(leash.fn).parameters)
    assert params[: len(leash.signature)] == leash.signature, (name, params, leash.signature)


def test_the_table_decides_what_the_config_accepts():
    assert leashes.names()[0] == "reward"  # chapter 5's first
    with pytest.raises(ValueError, match=r"kl_placement must be one of \('reward', .*got 'nowhere'"):
        PPOConfig(kl_placement="nowhere")
    in_reward = [name for name in leashes.names() if leashes.get(name).in_reward]
    assert in_reward == ["reward"]
    for name in estimators.names():
        if not estimators.get(name).leash_in_advantages:
            with pytest.raises(ValueError, match="puts no leash in the advantages"):
                PPOConfig(advantages=name, group_size=8, kl_placement="reward")


def test_the_loss_is_looked_up_at_each_call(monkeypatch):
    """A copy planted in the leash's module (chapter 10) is the loss the update calls."""
    cfg = PPOConfig(batch_size=4, updates_per_batch=1, kl_placement="loss")
    torch.manual_seed(0)
    policy = TinyGPT(GPTConfig()).double().train()
    batch = rollout(policy, policy, task.train_pairs(), cfg, make_generator(0))
    scores = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    _, adv = score_and_advantages(batch, lambda *a: scores, 0.1, cfg)
    seen = []
    module = leashes.module_of("loss")
    original = module.grpo_token_loss
    monkeypatch.setattr(module, "grpo_token_loss", lambda *a: seen.append(len(a)) or original(*a))
    ppo_update(policy, torch.optim.Adam(policy.parameters()), batch, adv, 0.1, cfg)
    assert seen == [len(leashes.get("loss").signature)]


def test_a_stored_run_is_keyed_on_its_own_leash_only(tmp_path, monkeypatch):
    """Editing one leash's module changes the key of the runs that name it, not the others'."""
    settings = {name: {"ppo": {"advantages": "batch", "kl_placement": name}} for name in ("reward", "loss")}
    before = {name: runs.runs_code(s) for name, s in settings.items()}
    module = leashes.module_of("loss")
    source = inspect.getsource(module) + "\n\ndef _edited():\n    return 1\n"
    edited = tmp_path / "loss.py"
    edited.write_text(source)
    monkeypatch.setattr(module, "__file__", str(edited))
    after = {name: runs.runs_code(s) for name, s in settings.items()}
    assert after["reward"] == before["reward"] and after["loss"] != before["loss"]
