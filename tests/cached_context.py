"""TinyGPT's key-value cache for the tests' stand-in models, whose logits are a rule of the
tokens: the cache keeps the tokens themselves, one position at a time, in the shape TinyGPT's
blocks keep keys and values (B, heads, positions, size), so that the engine may gather it by row
and feed one new token at a time, as it does with a TinyGPT."""

import torch


def context(idx: torch.Tensor, cache: list | None) -> tuple[torch.Tensor, int]:
    """Return ``(tokens, start)``: every token of each row so far (B, S + L), the cached ones
    first, and how many of them were cached; ``idx`` (B, L) is added to ``cache`` (a list of one
    dict, TinyGPT's form for a model of one block; None keeps nothing)."""
    start = cache[0]["k"].shape[2] if cache and "k" in cache[0] else 0
    if cache is None:
        return idx, 0
    new = idx.double()[:, None, :, None]  # (B, 1, L, 1)
    for name in ("k", "v"):
        cache[0][name] = new if start == 0 else torch.cat([cache[0][name], new], dim=2)
    return cache[0]["k"][:, 0, :, 0].long(), start
