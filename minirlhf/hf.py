"""Our models as Hugging Face ``transformers`` models, exactly, and back.

Needs the optional extra: ``pip install -e ".[trl]"`` (``transformers``, ``trl`` and
``accelerate`` at the versions the book was checked against). The core book does not.

:class:`~minirlhf.model.TinyGPT` is GPT-2 in miniature: pre-norm blocks, learned positions,
exact GELU, LayerNorm with eps 1e-5. So the policy becomes a ``GPT2LMHeadModel`` and the
reward model a ``GPT2ForSequenceClassification`` with one label, weight for weight:

================================  ======================================================
ours                              GPT-2 (``transformers/models/gpt2/modeling_gpt2.py``)
================================  ======================================================
``tok_emb``, ``pos_emb``          ``transformer.wte``, ``transformer.wpe``
``blocks[i].ln1``, ``ln2``        ``transformer.h[i].ln_1``, ``ln_2``
``blocks[i].attn.qkv``, ``proj``  ``transformer.h[i].attn.c_attn``, ``c_proj`` (Conv1D:
                                  the weight transposed; q, k, v in the same order)
``blocks[i].mlp[0]``, ``[2]``     ``transformer.h[i].mlp.c_fc``, ``c_proj`` (transposed)
``ln_f``                          ``transformer.ln_f``
``head``                          ``lm_head`` (policy) or ``score`` (reward model)
================================  ======================================================

**The one difference: the bias of the head.** Our head is ``nn.Linear`` with a bias; GPT-2's
``lm_head`` and ``score`` have none. The bias moves into ``ln_f``'s bias: the head reads
``W (gamma * x_hat + beta) + b``, and with ``beta' = beta + d`` where ``W d = b`` it reads the
same without ``b``. Such a ``d`` exists when ``W`` (13 x 64, or 1 x 64 for the reward model)
has full row rank, which a trained head has; :func:`policy_to_hf` takes the least-norm ``d``
(the pseudo-inverse) and checks that it reproduces ``b``. Converting back needs no such step:
the head gets a zero bias.

**Tokens.** :func:`tokenizer` knows the 13 characters, with the same ids, and a 14th token,
``<pad>`` (id 13), for padding. Our `;` cannot be the pad: it is a real token, which pads our
prompts on the left and ends every answer, and a trainer masks its pad token out of
attention. The policy keeps 13 rows and never generates ``<pad>``. The reward model gets a
14th embedding row for it, all zeros, so that ``transformers`` can read a right-padded batch
natively: ``GPT2ForSequenceClassification`` reads the score at the last token that is not the
pad, and :func:`rm_inputs` cuts each answer after its first `;`, so that token is where our
:func:`~minirlhf.model.reward_scores` reads it. The row's values never reach a score:
attention is causal, and the pad comes after the token read.

**Dtype.** A conversion keeps the model's dtype (:attr:`GPTConfig.dtype
<minirlhf.model.GPTConfig>`, float64 in the book): a float64 TinyGPT becomes a float64 GPT-2
and back, weight for weight with no rounding. The ``GPT2Config`` names the dtype too, so
``save_pretrained`` writes it into ``config.json`` and ``from_pretrained`` (with its default
``dtype="auto"``) loads the folder in float64 again.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from . import task
from .model import DTYPES, GPTConfig, TinyGPT, completion_mask, dtype_of

__all__ = [
    "PAD_TOKEN",
    "PAD_ID",
    "gpt2_config",
    "tokenizer",
    "policy_to_hf",
    "rm_to_hf",
    "hf_to_policy",
    "hf_to_rm",
    "rm_inputs",
    "hf_reward_scores",
    "hf_completion_logits",
]

PAD_TOKEN = "<pad>"
PAD_ID = len(task.VOCAB)  # 13: after the 13 characters


def _transformers():
    try:
        import transformers
    except ImportError:
        raise ImportError('minirlhf.hf needs the optional extra: pip install -e ".[trl]"') from None
    return transformers


def gpt2_config(cfg: GPTConfig | None = None, reward_model: bool = False):
    """Return the ``GPT2Config`` of a :class:`~minirlhf.model.TinyGPT` of shape ``cfg``.

    No dropout, exact GELU, untied input and output embeddings (ours are two matrices). The
    reward model's config has one label, a 14-row embedding for ``<pad>`` and ``pad_token_id``
    13; the policy's has neither pad nor end-of-text token: it always writes 4 tokens. Its
    ``dtype`` is ``cfg.dtype``, which ``save_pretrained`` writes and ``from_pretrained`` reads.
    """
    cfg = cfg or GPTConfig()
    config = _transformers().GPT2Config(
        vocab_size=cfg.vocab_size + (1 if reward_model else 0),
        n_positions=cfg.block_size,
        n_embd=cfg.n_embd,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        n_inner=4 * cfg.n_embd,
        activation_function="gelu",
        layer_norm_epsilon=1e-5,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=PAD_ID if reward_model else None,
        dtype=cfg.dtype,
    )
    if reward_model:
        config.num_labels = 1
    return config


def tokenizer():
    """Return a ``PreTrainedTokenizerFast`` for the 13 characters, plus ``<pad>`` (id 13).

    One token per character, ids as :data:`minirlhf.task.VOCAB`; left padding (prompts are
    padded on the left for generation). ``<pad>`` is also the end-of-text token: TRL's
    trainers need one (GRPO and RLOO compare every completion token with it), and the policy,
    with 13 outputs, can never write it, so generation always writes 4 tokens. TRL's PPO
    trainer is told that `;` ends an answer by its own ``stop_token_id``.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {ch: i for i, ch in enumerate(task.VOCAB)}
    vocab[PAD_TOKEN] = PAD_ID
    tok = Tokenizer(models.WordLevel(vocab, unk_token=PAD_TOKEN))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = _transformers().PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD_TOKEN,
        eos_token=PAD_TOKEN,
        padding_side="left",
        model_max_length=task.CONTEXT_LEN,
    )
    return fast


def _check_tinygpt(model, name: str, scalar_head: bool) -> None:
    if not isinstance(model, TinyGPT):
        raise TypeError(f"{name} must be a TinyGPT, got {type(model).__name__}")
    if model.scalar_head != scalar_head:
        kind = "a reward model (scalar_head=True)" if scalar_head else "a policy (scalar_head=False)"
        raise ValueError(f"{name} must be {kind}")


def _tinygpt_config(model: TinyGPT) -> GPTConfig:
    # The weights' dtype decides (a TinyGPT cast after it was built keeps its cfg.dtype).
    return replace(model.cfg, dtype=_dtype_name(dtype_of(model)))


def _fold_bias(weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    # d with weight @ d = bias, the least-norm solution, in float64.
    w, b = weight.double(), bias.double()
    d = torch.linalg.pinv(w) @ b
    err = (w @ d - b).abs().max().item()
    if err > 1e-6 * max(1.0, b.abs().max().item()):
        raise ValueError(f"the head's bias cannot move into ln_f (rank-deficient head: residual {err:.2e})")
    return d.to(weight.dtype)


@torch.no_grad()
def _copy_body(src: TinyGPT, body) -> None:
    """Copy our embeddings, blocks and ln_f into a GPT2Model ``body`` (ln_f's bias unfolded)."""
    n = src.tok_emb.weight.shape[0]
    body.wte.weight.zero_()
    body.wte.weight[:n] = src.tok_emb.weight
    body.wpe.weight.copy_(src.pos_emb.weight)
    for ours, theirs in zip(src.blocks, body.h):
        theirs.ln_1.load_state_dict(ours.ln1.state_dict())
        theirs.ln_2.load_state_dict(ours.ln2.state_dict())
        theirs.attn.c_attn.weight.copy_(ours.attn.qkv.weight.T)
        theirs.attn.c_attn.bias.copy_(ours.attn.qkv.bias)
        theirs.attn.c_proj.weight.copy_(ours.attn.proj.weight.T)
        theirs.attn.c_proj.bias.copy_(ours.attn.proj.bias)
        theirs.mlp.c_fc.weight.copy_(ours.mlp[0].weight.T)
        theirs.mlp.c_fc.bias.copy_(ours.mlp[0].bias)
        theirs.mlp.c_proj.weight.copy_(ours.mlp[2].weight.T)
        theirs.mlp.c_proj.bias.copy_(ours.mlp[2].bias)
    body.ln_f.weight.copy_(src.ln_f.weight)
    body.ln_f.bias.copy_(src.ln_f.bias + _fold_bias(src.head.weight, src.head.bias))


@torch.no_grad()
def _copy_back(body, head_weight: torch.Tensor, dst: TinyGPT) -> TinyGPT:
    n = dst.tok_emb.weight.shape[0]
    dst.tok_emb.weight.copy_(body.wte.weight[:n])
    dst.pos_emb.weight.copy_(body.wpe.weight)
    for ours, theirs in zip(dst.blocks, body.h):
        ours.ln1.load_state_dict(theirs.ln_1.state_dict())
        ours.ln2.load_state_dict(theirs.ln_2.state_dict())
        ours.attn.qkv.weight.copy_(theirs.attn.c_attn.weight.T)
        ours.attn.qkv.bias.copy_(theirs.attn.c_attn.bias)
        ours.attn.proj.weight.copy_(theirs.attn.c_proj.weight.T)
        ours.attn.proj.bias.copy_(theirs.attn.c_proj.bias)
        ours.mlp[0].weight.copy_(theirs.mlp.c_fc.weight.T)
        ours.mlp[0].bias.copy_(theirs.mlp.c_fc.bias)
        ours.mlp[2].weight.copy_(theirs.mlp.c_proj.weight.T)
        ours.mlp[2].bias.copy_(theirs.mlp.c_proj.bias)
    dst.ln_f.load_state_dict(body.ln_f.state_dict())
    dst.head.weight.copy_(head_weight)
    dst.head.bias.zero_()
    return dst.eval()


def _dtype_name(dtype: torch.dtype) -> str:
    names = {v: k for k, v in DTYPES.items()}
    if dtype not in names:
        raise ValueError(f"a TinyGPT holds one of {tuple(DTYPES)}, got a model in {dtype}")
    return names[dtype]


def _ours_config(model) -> GPTConfig:
    # The dtype is the weights' own (a model cast after loading keeps a stale config.dtype).
    config = model.config
    return GPTConfig(
        vocab_size=len(task.VOCAB),
        block_size=config.n_positions,
        n_layer=config.n_layer,
        n_head=config.n_head,
        n_embd=config.n_embd,
        dtype=_dtype_name(model.dtype),
    )


def _new_hf(cls, cfg: GPTConfig, reward_model: bool):
    # The constructor builds float32 whatever the config says; the weights are overwritten next,
    # so casting the fresh model first rounds nothing.
    return cls(gpt2_config(cfg, reward_model)).to(cfg.torch_dtype)


def policy_to_hf(policy: TinyGPT):
    """Return ``policy`` as a ``GPT2LMHeadModel`` in eval mode, in its dtype: the same logits,
    the same answers."""
    _check_tinygpt(policy, "policy", scalar_head=False)
    model = _new_hf(_transformers().GPT2LMHeadModel, _tinygpt_config(policy), reward_model=False)
    _copy_body(policy, model.transformer)
    with torch.no_grad():
        model.lm_head.weight.copy_(policy.head.weight)
    return model.eval()


def rm_to_hf(rm: TinyGPT):
    """Return the reward model ``rm`` as a ``GPT2ForSequenceClassification`` (one label) in eval
    mode, in its dtype.

    Fed :func:`rm_inputs`, it scores as :func:`minirlhf.model.reward_scores` does.
    """
    _check_tinygpt(rm, "rm", scalar_head=True)
    model = _new_hf(_transformers().GPT2ForSequenceClassification, _tinygpt_config(rm), reward_model=True)
    _copy_body(rm, model.transformer)
    with torch.no_grad():
        model.score.weight.copy_(rm.head.weight)
    return model.eval()


def _check_gpt2(model, name: str, attr: str):
    if not hasattr(model, "transformer") or not hasattr(model, attr):
        raise TypeError(
            f"{name} must be a GPT-2 model with a {attr!r} head (as made by this module), got {type(model).__name__}"
        )


def hf_to_policy(model) -> TinyGPT:
    """Return a ``GPT2LMHeadModel`` made by :func:`policy_to_hf` (and trained, perhaps) as a
    TinyGPT in the model's dtype."""
    _check_gpt2(model, "model", "lm_head")
    dst = TinyGPT(_ours_config(model))
    return _copy_back(model.transformer, model.lm_head.weight, dst)


def hf_to_rm(model) -> TinyGPT:
    """Return a ``GPT2ForSequenceClassification`` made by :func:`rm_to_hf` as a scalar-head
    TinyGPT in the model's dtype."""
    _check_gpt2(model, "model", "score")
    dst = TinyGPT(_ours_config(model), scalar_head=True)
    return _copy_back(model.transformer, model.score.weight, dst)


def rm_inputs(prompts: torch.Tensor, completions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (input_ids (B, 10), attention_mask (B, 10)) for the converted reward model.

    Each prompt and its completion cut after the first `;`, then right-padded with ``<pad>``,
    so that the last token that is not a pad is the one our reward model reads.
    """
    keep = torch.cat([torch.ones_like(prompts), completion_mask(completions).long()], dim=1)  # (B, 10)
    ids = torch.cat([prompts, completions], dim=1).masked_fill(keep == 0, PAD_ID)
    return ids, keep


@torch.no_grad()
def hf_reward_scores(model, prompts: torch.Tensor, completions: torch.Tensor) -> torch.Tensor:
    """Return the converted reward model's scores (B,), read natively by ``transformers``."""
    ids, mask = rm_inputs(prompts, completions)
    return model(input_ids=ids, attention_mask=mask).logits[:, 0]


@torch.no_grad()
def hf_completion_logits(model, prompts: torch.Tensor, completions: torch.Tensor) -> torch.Tensor:
    """Return the converted policy's logits (B, 4, 13) that predicted each completion token."""
    x = torch.cat([prompts, completions], dim=1)[:, :-1]
    return model(input_ids=x).logits[:, task.PROMPT_LEN - 1 :, :]
