"""The tiny transformer: shapes, causality, masks, log-probs, generation and the RM read-out."""

import math

import pytest
import torch

from minirlhf import task
from minirlhf.model import (
    GPTConfig,
    TinyGPT,
    completion_logits,
    completion_logprobs,
    completion_mask,
    entropy_from_logits,
    exact_kl,
    generate,
    logprobs_from_logits,
    make_generator,
    n_params,
    reward_scores,
    score_positions,
)


def comps(*texts):
    return torch.stack([torch.tensor(task.encode(t)) for t in texts])


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return TinyGPT().eval()


@pytest.fixture(scope="module")
def prompts():
    return task.encode_prompts(task.eval_pairs()[:16])


def test_size_and_shapes(model):
    assert 90_000 < n_params(model) < 110_000
    x = torch.zeros(3, 10, dtype=torch.long)
    assert model(x).shape == (3, 10, 13)
    rm = TinyGPT(GPTConfig(), scalar_head=True)
    assert rm(x).shape == (3, 10)
    with pytest.raises(ValueError, match="context"):
        model(torch.zeros(1, 11, dtype=torch.long))


def test_causal(model):
    x = torch.randint(13, (2, 10), generator=make_generator(1))
    y = x.clone()
    y[:, 7:] = (y[:, 7:] + 1) % 13  # change the future
    assert torch.allclose(model(x)[:, :7], model(y)[:, :7], atol=1e-6)


def test_last_positions_only(model):
    # forward(x, last=n) computes the last block's projection and MLP, the final norm and the
    # head for the last n positions only: the same numbers as the full pass's last n, bit for
    # bit at the batch sizes the runs use (64 rollouts, 128 DPO rows, 400 eval prompts), to
    # float rounding in a tiny batch, where the matrix library takes another path; and the
    # gradients reach the earlier positions through the attention's keys and values.
    for batch in (64, 128, 400):
        x = torch.randint(13, (batch, 9), generator=make_generator(batch))
        for n in (1, 4, 9):
            assert torch.equal(model(x, last=n), model(x)[:, -n:]), (batch, n)
    x = torch.randint(13, (3, 9), generator=make_generator(3))
    torch.testing.assert_close(model(x, last=4), model(x)[:, -4:], rtol=0, atol=1e-14)
    rm = TinyGPT(GPTConfig(), scalar_head=True)
    assert rm(x, last=2).shape == (3, 2)
    grads = []
    for last in (4, None):
        model.zero_grad()
        out = model(x, last=last)
        out[:, -4:].pow(2).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    model.zero_grad()
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
    for bad in (0, 10, 2.0, -1):
        with pytest.raises(ValueError, match="last must be an int from 1 to 9"):
            model(x, last=bad)


def test_completion_mask_by_hand():
    mask = completion_mask(comps("68;;", "198;", "7;12", "1234", ";;;;"))
    assert mask.tolist() == [
        [1, 1, 1, 0],
        [1, 1, 1, 1],
        [1, 1, 0, 0],
        [1, 1, 1, 1],  # no `;`: the whole malformed completion counts
        [1, 0, 0, 0],
    ]


def test_score_positions_by_hand():
    # prompt positions 0..5; the completion starts at 6
    assert score_positions(comps("68;;", "198;", "7;12", "1234")).tolist() == [8, 9, 7, 9]


def test_logprobs_match_a_manual_softmax(model, prompts):
    c = comps(*["68;;"] * len(prompts))
    lp = completion_logprobs(model, prompts, c, temperature=0.7)
    x = torch.cat([prompts, c], 1)
    logits = model(x)[:, 5:9] / 0.7
    manual = torch.log_softmax(logits, -1).gather(-1, c.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(lp, manual, atol=1e-6)
    assert (lp <= 0).all()


def test_entropy_and_kl_by_hand():
    uniform = torch.zeros(1, 13)
    assert math.isclose(entropy_from_logits(uniform).item(), math.log(13), rel_tol=1e-6)
    # two tokens, p = (0.5, 0.5) vs q = (0.2, 0.8): KL = 0.5 ln(0.5/0.2) + 0.5 ln(0.5/0.8) = 0.2231
    p = torch.log(torch.tensor([[0.5, 0.5]]))
    q = torch.log(torch.tensor([[0.2, 0.8]]))
    assert math.isclose(exact_kl(p, q).item(), 0.22314, abs_tol=1e-4)
    assert exact_kl(p, p).abs().item() < 1e-7
    assert math.isclose(logprobs_from_logits(q, torch.tensor([1])).item(), math.log(0.8), rel_tol=1e-6)


def test_generate_greedy_and_seeded(model, prompts):
    a = generate(model, prompts, greedy=True)
    b = generate(model, prompts, greedy=True)
    assert a.shape == (16, 4) and torch.equal(a, b)
    s1 = generate(model, prompts, 0.7, generator=make_generator(5))
    s2 = generate(model, prompts, 0.7, generator=make_generator(5))
    assert torch.equal(s1, s2)
    c, logits = generate(model, prompts, 0.7, generator=make_generator(5), return_logits=True)
    assert torch.equal(c, s1) and torch.allclose(logits, completion_logits(model, prompts, c), atol=1e-5)
    with pytest.raises(ValueError, match="temperature"):
        generate(model, prompts, temperature=0.0)
    with pytest.raises(ValueError, match="prompts"):
        generate(model, prompts[:, :5])


def test_cached_generation_matches_full_recompute(model, prompts):
    # Greedy decoding by hand: run the whole sequence again for every new token.
    x = prompts
    for _ in range(4):
        x = torch.cat([x, model(x)[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(generate(model, prompts, greedy=True), x[:, 6:])
    with pytest.raises(ValueError, match="one token at a time"):
        cache = [{} for _ in model.blocks]
        model(prompts, cache)
        model(prompts[:, :2], cache)


def test_generate_batches_independently(model, prompts):
    # A prompt's greedy answer does not depend on which other prompts share the batch.
    full = generate(model, prompts, greedy=True)
    assert torch.equal(generate(model, prompts[3:5], greedy=True), full[3:5])


def test_reward_scores_read_at_first_semicolon():
    torch.manual_seed(0)
    rm = TinyGPT(GPTConfig(), scalar_head=True).eval()
    p = task.encode_prompts(torch.tensor([[23, 45], [23, 45]]))
    s = reward_scores(rm, p, comps("68;1", "68;9"))  # differ only after the `;`
    assert torch.allclose(s[0], s[1])
    full = rm(torch.cat([p, comps("68;1", "68;9")], 1))
    assert torch.allclose(s, full[:, 8])
    with pytest.raises(ValueError, match="scalar_head"):
        reward_scores(TinyGPT(), p, comps("68;1", "68;9"))
