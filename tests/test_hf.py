"""The conversion to Hugging Face models is exact: logits, scores, answers, the dtype, and a
round trip through a folder, on the book's trained policy and reward model and the 400 eval
prompts."""

import json
import os

import pytest
import torch

from minirlhf import task
from minirlhf.evaluation import EvalSet
from minirlhf.model import GPTConfig, TinyGPT, completion_logits, dtype_of, generate, reward_scores
from minirlhf.store import load_rm, load_sft

if os.environ.get("MINIRLHF_REQUIRE_TRL") != "1":
    pytest.importorskip("transformers", reason='the TRL bridge needs pip install -e ".[trl]"')
from minirlhf import hf  # noqa: E402

# Both sides compute in float64 and differ only in the order of their operations (GPT-2's
# attention and Conv1D against ours): about 1e-14 apart.
TOL = 1e-10


@pytest.fixture(scope="module")
def models():
    policy, _ = load_sft(progress=False)
    rm, _ = load_rm(progress=False)
    return policy, rm, hf.policy_to_hf(policy), hf.rm_to_hf(rm), EvalSet()


@pytest.fixture(scope="module")
def answers(models):
    policy, _, _, _, ev = models
    g = torch.Generator().manual_seed(3)
    return {
        "greedy": generate(policy, ev.prompts, greedy=True),
        "sampled": generate(policy, ev.prompts, 1.0, generator=g),
        "right": task.correct_completions(ev.pairs),
        "near-miss": task.wrong_answers(ev.pairs, "near_miss", g),
        "random wrong": task.wrong_answers(ev.pairs, "random", g),
    }


@pytest.mark.parametrize("kind", ["greedy", "sampled", "right", "near-miss", "random wrong"])
def test_policy_logits_match(models, answers, kind):
    policy, _, hp, _, ev = models
    ours = completion_logits(policy, ev.prompts, answers[kind])
    theirs = hf.hf_completion_logits(hp, ev.prompts, answers[kind])
    assert theirs.shape == ours.shape == (400, 4, 13)
    assert (ours - theirs).abs().max().item() < TOL


def test_policy_logits_match_at_every_position(models):
    policy, _, hp, _, ev = models
    x = torch.cat([ev.prompts, task.correct_completions(ev.pairs)], dim=1)
    with torch.no_grad():
        assert (policy(x) - hp(input_ids=x).logits).abs().max().item() < TOL


@pytest.mark.parametrize("kind", ["greedy", "sampled", "right", "near-miss", "random wrong"])
def test_rm_scores_match(models, answers, kind):
    _, rm, _, hr, ev = models
    ours = reward_scores(rm, ev.prompts, answers[kind])
    theirs = hf.hf_reward_scores(hr, ev.prompts, answers[kind])
    assert theirs.shape == ours.shape == (400,)
    assert (ours - theirs).abs().max().item() < TOL


def test_rm_reads_at_the_first_end_mark(models):
    # "12;;" and "12;7" are the same answer to our RM; the converted one agrees.
    _, rm, _, hr, ev = models
    prompts = ev.prompts[:1].repeat(2, 1)
    a = torch.tensor([task.encode("12;;"), task.encode("12;7")])
    ids, mask = hf.rm_inputs(prompts, a)
    assert torch.equal(ids[0], ids[1]) and ids[0, -1].item() == hf.PAD_ID
    assert mask[0].tolist() == [1] * 9 + [0]
    scores = hf.hf_reward_scores(hr, prompts, a)
    assert abs(scores[0].item() - reward_scores(rm, prompts[:1], a[:1]).item()) < TOL
    assert scores[0].item() == scores[1].item()


def test_greedy_generations_identical(models):
    policy, _, hp, _, ev = models
    ours = generate(policy, ev.prompts, greedy=True)
    out = hp.generate(
        input_ids=ev.prompts, attention_mask=torch.ones_like(ev.prompts), max_new_tokens=4, do_sample=False
    )
    assert torch.equal(out[:, task.PROMPT_LEN :], ours)


def test_converting_back_is_exact(models, answers):
    policy, rm, hp, hr, ev = models
    back, rm_back = hf.hf_to_policy(hp), hf.hf_to_rm(hr)
    assert isinstance(back, TinyGPT) and rm_back.scalar_head
    c = answers["sampled"]
    assert (completion_logits(back, ev.prompts, c) - completion_logits(policy, ev.prompts, c)).abs().max() < TOL
    assert (reward_scores(rm_back, ev.prompts, c) - reward_scores(rm, ev.prompts, c)).abs().max() < TOL
    # Back and forth again changes nothing: the head's bias is already in ln_f.
    again = hf.policy_to_hf(back)
    for (n1, p1), (n2, p2) in zip(hp.named_parameters(), again.named_parameters()):
        assert n1 == n2 and torch.equal(p1, p2), n1


def test_the_dtype_is_kept(models):
    # The book's models are float64, and so are their conversions, each way.
    policy, rm, hp, hr, _ = models
    assert dtype_of(policy) == dtype_of(rm) == torch.float64
    for model in (hp, hr):
        assert {p.dtype for p in model.parameters()} == {torch.float64}
        assert model.config.dtype == torch.float64
    for back in (hf.hf_to_policy(hp), hf.hf_to_rm(hr)):
        assert back.cfg.dtype == "float64" and dtype_of(back) == torch.float64
    # A float32 TinyGPT stays float32: the conversion follows the weights.
    small = TinyGPT(GPTConfig(dtype="float32"))
    h32 = hf.policy_to_hf(small)
    assert {p.dtype for p in h32.parameters()} == {torch.float32} and h32.config.dtype == torch.float32
    assert hf.hf_to_policy(h32).cfg.dtype == "float32"
    # A model cast after it was built is converted in its weights' dtype, not its config's.
    cast = TinyGPT(GPTConfig(dtype="float32")).double()
    assert hf.policy_to_hf(cast).dtype == torch.float64
    assert hf.hf_to_policy(hf.policy_to_hf(small).double()).cfg.dtype == "float64"


def test_save_and_load_round_trip(models, answers, tmp_path):
    transformers = pytest.importorskip("transformers")
    _, _, hp, hr, ev = models
    tok = hf.tokenizer()
    for name, model in (("policy", hp), ("rm", hr)):
        model.save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
        # config.json names the dtype, so from_pretrained (dtype "auto") loads float64 again
        assert json.loads((tmp_path / name / "config.json").read_text())["dtype"] == "float64"
    hp2 = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "policy", local_files_only=True)
    hr2 = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "rm", local_files_only=True)
    tok2 = transformers.AutoTokenizer.from_pretrained(tmp_path / "rm", local_files_only=True)
    assert hp2.dtype == hr2.dtype == torch.float64
    c = answers["sampled"]
    assert torch.equal(hf.hf_completion_logits(hp2, ev.prompts, c), hf.hf_completion_logits(hp, ev.prompts, c))
    assert torch.equal(hf.hf_reward_scores(hr2, ev.prompts, c), hf.hf_reward_scores(hr, ev.prompts, c))
    assert tok2.pad_token == "<pad>" and tok2.pad_token_id == hf.PAD_ID == 13
    assert tok2.padding_side == "left"


def test_tokenizer_ids_are_ours():
    tok = hf.tokenizer()
    text = ";;7+5=12;"
    assert tok(text)["input_ids"] == task.encode(text)
    assert tok.decode(task.encode("99+99=198;")) == "99+99=198;"
    assert tok.decode([1, 2, 12, hf.PAD_ID], skip_special_tokens=True) == "12;"
    assert len(tok) == 14 and tok.eos_token_id == hf.PAD_ID and tok.bos_token is None
    batch = tok(["7+5=", "23+45="], padding=True, return_tensors="pt")
    assert batch["input_ids"][0].tolist() == [hf.PAD_ID, hf.PAD_ID] + task.encode("7+5=")
    assert batch["attention_mask"][0].tolist() == [0, 0, 1, 1, 1, 1]


def test_wrong_inputs_named():
    policy = TinyGPT()
    rm = TinyGPT(scalar_head=True)
    with pytest.raises(ValueError, match="policy must be a policy"):
        hf.policy_to_hf(rm)
    with pytest.raises(ValueError, match="rm must be a reward model"):
        hf.rm_to_hf(policy)
    with pytest.raises(TypeError, match="policy must be a TinyGPT"):
        hf.policy_to_hf("gpt2")
    with pytest.raises(TypeError, match="'lm_head' head"):
        hf.hf_to_policy(hf.rm_to_hf(rm))


def test_rank_deficient_head_is_refused():
    policy = TinyGPT()
    with torch.no_grad():
        policy.head.weight.zero_()
        policy.head.bias.fill_(1.0)
    with pytest.raises(ValueError, match="rank-deficient"):
        hf.policy_to_hf(policy)
