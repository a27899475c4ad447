"""A tiny causal transformer, and the batched operations RLHF needs from a language model.

The network is GPT in miniature (pre-norm, 2 layers, width 64, 4 heads, about 100K
parameters) over the 13-token vocabulary of :mod:`minirlhf.task`. With ``scalar_head=True``
the same body ends in one number per position instead of 13 logits: the reward model.

Every sequence is a prompt of 6 tokens followed by a completion of 4 (see
:mod:`minirlhf.task`), so shapes are fixed: prompts (B, 6), completions (B, 4). Everything
here works on a whole batch of prompts at once; only the 4 completion positions are looped
over, never the prompts. Generation keeps each block's keys and values (a key-value cache),
so the prompt is read once and every new token costs one position instead of the whole
sequence again: three times less work for a 6-token prompt and 4 new tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .task import COMPLETION_LEN, CONTEXT_LEN, PROMPT_LEN, SEMI, VOCAB

__all__ = [
    "weights_digest",
    "GPTConfig",
    "TinyGPT",
    "make_generator",
    "completion_mask",
    "generate",
    "completion_logits",
    "logprobs_from_logits",
    "dtype_of",
    "DTYPES",
    "entropy_from_logits",
    "completion_logprobs",
    "reward_scores",
    "score_positions",
    "exact_kl",
    "n_params",
]


@dataclass
class GPTConfig:
    """Shape of the network. The defaults are the book's policy and reward model.

    Defined in chapter 3.
    """

    vocab_size: int = len(VOCAB)  # 13 characters
    block_size: int = CONTEXT_LEN  # 10 tokens: a 6-token prompt and a 4-token completion
    n_layer: int = 2  # transformer blocks
    n_head: int = 4  # attention heads per block
    n_embd: int = 64  # width of the residual stream
    dtype: str = "float64"  # of every weight, and so of every number the engine computes (chapter 3)

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {self.dtype!r}")

    @property
    def torch_dtype(self) -> torch.dtype:
        """The weights' dtype as a ``torch.dtype``."""
        return DTYPES[self.dtype]


# float64 by default: float32 CPU kernels round differently on different CPUs (vector width,
# BLAS code path, vectorized exp and log), and training turns a one-ulp difference into a
# different third printed digit. In float64 the same differences stay below 1e-12.
DTYPES = {"float64": torch.float64, "float32": torch.float32}


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        dt = {"dtype": cfg.torch_dtype}
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, **dt)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, **dt)

    def forward(self, x, cache: dict | None = None, last: int | None = None):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)  # 3 x (B, T, C)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        if cache is not None:  # generation: keep keys and values, so each new token costs one position
            if "k" in cache:
                if T != 1:
                    raise ValueError("after the prompt, feed the cache one token at a time")
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)  # (B, nh, S, hs)
            cache["k"], cache["v"] = k, v
        # A single new token may look at every cached position; a longer input is masked causally.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)  # (B, nh, T, hs)
        if last is not None:  # only the last positions go on (every position was a key above)
            y, T = y[:, :, T - last :], last  # (B, nh, last, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        dt = {"dtype": cfg.torch_dtype}
        self.ln1 = nn.LayerNorm(cfg.n_embd, **dt)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd, **dt)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.n_embd, 4 * cfg.n_embd, **dt), nn.GELU(), nn.Linear(4 * cfg.n_embd, cfg.n_embd, **dt)
        )

    def forward(self, x, cache: dict | None = None, last: int | None = None):
        # pre-norm: normalise, transform, add back (with ``last``, to the last positions only)
        x = (x if last is None else x[:, -last:]) + self.attn(self.ln1(x), cache, last)
        x = x + self.mlp(self.ln2(x))
        return x


class TinyGPT(nn.Module):
    """A causal transformer. ``forward(idx)`` returns (B, T, 13) next-token logits, or with
    ``scalar_head=True`` (B, T) scalars (a score after each prefix, for the reward model).

    ``forward(idx, cache)`` with a list of one dict per block (empty at first) also keeps each
    block's keys and values, so that generation can feed one new token at a time.

    ``forward(idx, last=n)`` returns the outputs of the last ``n`` positions only (B, n, 13),
    the same numbers as ``forward(idx)[:, -n:]`` up to float rounding (bit for bit when the
    batch is not tiny), for less work: every block but the last computes every position, since
    each is a key of the attention after it, but the last block's projection and MLP, the final
    norm and the head compute only those ``n``. The log-probs of a completion need 4 of 9.

    Defined in chapter 3.
    """

    def __init__(self, cfg: GPTConfig | None = None, scalar_head: bool = False):
        super().__init__()
        self.cfg = cfg = cfg or GPTConfig()
        self.scalar_head = scalar_head
        dt = {"dtype": cfg.torch_dtype}
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd, **dt)
        self.pos_emb = nn.Embedding(cfg.block_size, cfg.n_embd, **dt)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, **dt)
        # PyTorch's default initialisation; at this width it learns faster than GPT-2's std 0.02.
        self.head = nn.Linear(cfg.n_embd, 1 if scalar_head else cfg.vocab_size, **dt)

    def forward(self, idx: torch.Tensor, cache: list | None = None, last: int | None = None) -> torch.Tensor:
        B, T = idx.shape
        if last is not None and not (isinstance(last, int) and 1 <= last <= T):
            raise ValueError(f"last must be an int from 1 to {T} (the positions of idx), got {last!r}")
        start = cache[0]["k"].shape[2] if cache and "k" in cache[0] else 0  # positions already seen
        if start + T > self.cfg.block_size:
            raise ValueError(f"idx has {start + T} positions but the context holds {self.cfg.block_size}")
        pos = torch.arange(start, start + T, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)  # (B, T, C)
        for i, block in enumerate(self.blocks):
            x = block(x, None if cache is None else cache[i], last if i == len(self.blocks) - 1 else None)
        out = self.head(self.ln_f(x))  # (B, T, 13) or (B, T, 1)
        return out.squeeze(-1) if self.scalar_head else out


def n_params(model: nn.Module) -> int:
    """Return the number of parameters of ``model``.

    Defined in chapter 3.
    """
    return sum(p.numel() for p in model.parameters())


def dtype_of(model: nn.Module) -> torch.dtype:
    """Return the dtype of ``model``'s weights: every float tensor made for it follows it."""
    return next(model.parameters()).dtype


def make_generator(seed: int) -> torch.Generator:
    """Return a CPU ``torch.Generator`` seeded with ``seed`` (all sampling takes one).

    Defined in chapter 3.
    """
    return torch.Generator().manual_seed(int(seed))


# ----------------------------------------------------------------------------- completions


def completion_mask(completions: torch.Tensor) -> torch.Tensor:
    """Return a float mask (B, 4): 1 on the tokens up to and including the first `;`, else 0.

    A completion without any `;` keeps all 4 tokens (it is malformed, and is judged whole).
    It is float32, whatever the model's dtype: 0 and 1 are exact in any float, and a product
    with a float64 tensor is float64 (torch promotes), so no number is rounded by it.

    Defined in chapter 3.
    """
    is_end = (completions == SEMI).long()  # (B, 4)
    ends_before = torch.cumsum(is_end, dim=1) - is_end  # number of `;` strictly before t
    return (ends_before == 0).float()


def _check_prompts(prompts: torch.Tensor) -> None:
    if prompts.dim() != 2 or prompts.shape[1] != PROMPT_LEN:
        raise ValueError(f"prompts must have shape (B, {PROMPT_LEN}), got {tuple(prompts.shape)}")


@torch.no_grad()
def generate(
    model: TinyGPT,
    prompts: torch.Tensor,
    temperature: float = 1.0,
    greedy: bool = False,
    generator: torch.Generator | None = None,
    return_logits: bool = False,
):
    """Return completions (B, 4) of token ids, sampled at ``temperature`` or greedy.

    Always 4 tokens are drawn; what follows the first `;` is ignored by every consumer
    through :func:`completion_mask`. With ``return_logits=True``, return (completions,
    logits (B, 4, 13)): the logits that predicted each token (equal to what
    :func:`completion_logits` recomputes, up to float rounding). The prompt is read once and
    each new token costs one position, thanks to the key-value cache.

    Defined in chapter 3.
    """
    _check_prompts(prompts)
    if not greedy and not temperature > 0:
        raise ValueError(f"temperature must be > 0 when sampling, got {temperature}")
    cache = [{} for _ in model.blocks]
    logits = model(prompts, cache, last=1)[:, -1, :]  # (B, 13): the first answer token's distribution
    tokens, all_logits = [], []
    for t in range(COMPLETION_LEN):
        all_logits.append(logits)
        if greedy:
            nxt = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
        else:
            probs = F.softmax(logits / temperature, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
        tokens.append(nxt)
        if t < COMPLETION_LEN - 1:
            logits = model(nxt, cache)[:, -1, :]  # (B, 13), one new position
    completions = torch.cat(tokens, dim=1)  # (B, 4)
    if return_logits:
        return completions, torch.stack(all_logits, dim=1)  # (B, 4, 13)
    return completions


def completion_logits(model: TinyGPT, prompts: torch.Tensor, completions: torch.Tensor) -> torch.Tensor:
    """Return the logits (B, 4, 13) that predicted each completion token, in one forward pass."""
    _check_prompts(prompts)
    x = torch.cat([prompts, completions], dim=1)[:, :-1]  # (B, 9): the last token predicts nothing
    return model(x, last=COMPLETION_LEN)  # (B, 4, 13): positions 5..8 predict tokens 6..9


def logprobs_from_logits(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Return log p(token) under softmax(logits / temperature), shape of ``tokens``."""
    logp = F.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Return the entropy (nats) of softmax(logits / temperature) at each position."""
    logp = F.log_softmax(logits / temperature, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def completion_logprobs(
    model: TinyGPT, prompts: torch.Tensor, completions: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Return the per-token log-probs (B, 4) of the given completions under ``model``.

    Positions after the first `;` get numbers too; multiply by :func:`completion_mask`.

    Defined in chapter 3.
    """
    return logprobs_from_logits(completion_logits(model, prompts, completions), completions, temperature)


def exact_kl(logits_p: torch.Tensor, logits_q: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Return KL(p || q) in nats at each position, summed over the whole vocabulary."""
    logp = F.log_softmax(logits_p / temperature, dim=-1)
    logq = F.log_softmax(logits_q / temperature, dim=-1)
    return (logp.exp() * (logp - logq)).sum(-1)


# ----------------------------------------------------------------------------- reward model


def score_positions(completions: torch.Tensor) -> torch.Tensor:
    """Return, per completion, the index in the full sequence where the RM is read (B,).

    That is the first `;` of the completion, or its last token when it has none.
    """
    n_tokens = completion_mask(completions).sum(1).long()  # (B,) tokens up to the first `;`
    return PROMPT_LEN + n_tokens - 1


def reward_scores(rm: TinyGPT, prompts: torch.Tensor, completions: torch.Tensor) -> torch.Tensor:
    """Return the reward model's scalar score (B,) for each prompt + completion."""
    if not rm.scalar_head:
        raise ValueError("rm must be built with scalar_head=True")
    _check_prompts(prompts)
    x = torch.cat([prompts, completions], dim=1)  # (B, 10)
    scores = rm(x)  # (B, 10): a score after every prefix
    return scores.gather(1, score_positions(completions).unsqueeze(1)).squeeze(1)


def weights_digest(model: TinyGPT) -> str:
    """Return a short digest of ``model``'s weights (names, shapes, dtypes and every bit of the
    values): two models share it only if they compute the same function. DPO keys its cache of
    the reference's log-probs on it, and the chapters their stored runs."""
    import hashlib

    h = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        h.update(f"{name} {tuple(tensor.shape)} {tensor.dtype}".encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]
