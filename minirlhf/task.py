"""The arithmetic world: prompts, tokens, the verifier, and the kinds of wrong answer.

A prompt is the sum of two integers from 0 to 99; the completion is the answer and a `;`::

    prompt      23+45=          completion   68;
    prompt       7+5=           completion   12;
    prompt      99+99=          completion   198;

Every character is a token of the 13-token vocabulary ``0123456789+=;``. The model always
sees a prompt left-padded with `;` to 6 characters (``;;7+5=``), so the first answer token
sits at position 6 for every prompt, and the longest completion (``198;``) has 4 tokens:
a context of 10 tokens holds everything. Why 0..99: the sums need one, two or three digits
and half of them carry, which is hard enough that a small model trained briefly gets about
a third right, and the completion never needs more than 4 tokens.

The completion is read up to and including its first `;`. The answer must be 1 to 3 digits
with no leading zero (``0;`` is fine, ``07;`` is not); anything else is *malformed*.

A wrong answer is a *near-miss* when it lies within 10 of the true sum (for 68: 58 to 78): the
ones digit alone wrong (``61;``, ``67;``), the tens digit alone off by one (``58;``, ``78;``),
or both digits changed (``59;``, ``71;``), the slip of someone who has the size of the answer
right; *other wrong* when it is any other number; *malformed*
when it does not parse.
"""

from __future__ import annotations

import torch

__all__ = [
    "VOCAB",
    "SEMI",
    "PROMPT_LEN",
    "COMPLETION_LEN",
    "CONTEXT_LEN",
    "MAX_OPERAND",
    "N_EVAL",
    "EVAL_SEED",
    "KINDS",
    "encode",
    "decode",
    "format_prompt",
    "format_answer",
    "encode_prompts",
    "all_pairs",
    "eval_pairs",
    "train_pairs",
    "sample_pairs",
    "parse_completion",
    "verify",
    "answer_kind",
    "is_near_miss",
    "correct_completions",
    "wrong_answers",
    "WRONG_KINDS",
    "decode_completions",
    "batch_verify",
    "batch_kinds",
    "answer_offsets",
    "kind_transitions",
    "encode_answers",
    "near_miss_mask",
    "random_wrong_numbers",
    "near_misses",
    "MAX_SUM",
    "NEAR_MISS_WINDOW",
]

VOCAB = "0123456789+=;"
STOI = {ch: i for i, ch in enumerate(VOCAB)}
SEMI = STOI[";"]  # `;` ends an answer and also pads prompts on the left
PROMPT_LEN = 6  # "99+99=" is the longest prompt
COMPLETION_LEN = 4  # "198;" is the longest completion
CONTEXT_LEN = PROMPT_LEN + COMPLETION_LEN
MAX_OPERAND = 99
MAX_ANSWER_DIGITS = 3
NEAR_MISS_WINDOW = 10  # a wrong answer this close to the truth is a near-miss
N_EVAL = 400
EVAL_SEED = 2024
KINDS = ("correct", "near_miss", "other_wrong", "malformed")


# ----------------------------------------------------------------------------- tokens


def encode(text: str) -> list[int]:
    """Return the token ids of ``text`` (raises ValueError on a character outside VOCAB).

    Defined in chapter 3.
    """
    try:
        return [STOI[ch] for ch in text]
    except KeyError as err:
        raise ValueError(f"text holds {err.args[0]!r}, which is not in the vocabulary {VOCAB!r}") from None


def decode(ids) -> str:
    """Return the text of a sequence of token ids (a list or a 1-D tensor).

    Defined in chapter 3.
    """
    return "".join(VOCAB[int(i)] for i in ids)


def format_prompt(a: int, b: int) -> str:
    """Return the prompt text for a + b, e.g. ``'23+45='``.

    Defined in chapter 3.
    """
    return f"{a}+{b}="


def format_answer(n: int) -> str:
    """Return the completion text of the answer n, e.g. ``'68;'``.

    Defined in chapter 3.
    """
    return f"{n};"


def encode_prompts(pairs: torch.Tensor) -> torch.Tensor:
    """Return the prompts of ``pairs`` (N, 2) as token ids (N, 6), left-padded with `;`.

    Defined in chapter 3.
    """
    rows = [encode(format_prompt(a, b).rjust(PROMPT_LEN, ";")) for a, b in pairs.tolist()]
    return torch.tensor(rows, dtype=torch.long).reshape(-1, PROMPT_LEN)


def correct_completions(pairs: torch.Tensor) -> torch.Tensor:
    """Return the correct completions of ``pairs`` (N, 2) as token ids (N, 4), `;`-padded.

    Defined in chapter 3.
    """
    return encode_answers(pairs.sum(1))


def encode_answers(numbers) -> torch.Tensor:
    """Return completions ``'n;'`` for each number as token ids (N, 4), padded with `;`.

    Defined in chapter 3.
    """
    rows = [encode(format_answer(int(n)).ljust(COMPLETION_LEN, ";")) for n in numbers]
    return torch.tensor(rows, dtype=torch.long).reshape(-1, COMPLETION_LEN)


# ----------------------------------------------------------------------------- prompts


def all_pairs() -> torch.Tensor:
    """Return every (a, b) with 0 <= a, b <= 99, as a (10000, 2) long tensor."""
    r = torch.arange(MAX_OPERAND + 1)
    return torch.cartesian_prod(r, r)


def _eval_index() -> torch.Tensor:
    g = torch.Generator().manual_seed(EVAL_SEED)
    return torch.randperm(len(all_pairs()), generator=g)[:N_EVAL]


def eval_pairs() -> torch.Tensor:
    """Return the fixed eval set: 400 distinct (a, b) pairs, the same on every call (400, 2).

    Defined in chapter 3.
    """
    return all_pairs()[_eval_index()]


def train_pairs() -> torch.Tensor:
    """Return every pair that is not in the eval set (9600, 2): training never sees eval prompts.

    Defined in chapter 3.
    """
    keep = torch.ones(len(all_pairs()), dtype=torch.bool)
    keep[_eval_index()] = False
    return all_pairs()[keep]


def sample_pairs(n: int, generator: torch.Generator, pool: torch.Tensor | None = None) -> torch.Tensor:
    """Return ``n`` pairs drawn uniformly with replacement from ``pool`` (default: the training pairs).

    Defined in chapter 3.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    pool = train_pairs() if pool is None else pool
    return pool[torch.randint(len(pool), (n,), generator=generator)]


# ----------------------------------------------------------------------------- parsing


def parse_completion(text: str) -> int | None:
    """Return the answer a completion states, or None when it is malformed.

    The completion is read up to its first `;`. Malformed: no `;`, nothing before it, a
    character that is not a digit, a leading zero (``'07;'``), more than 3 digits.

    Defined in chapter 3.
    """
    if ";" not in text:
        return None
    answer = text[: text.index(";")]
    if not answer or not answer.isdigit() or len(answer) > MAX_ANSWER_DIGITS:
        return None
    if len(answer) > 1 and answer[0] == "0":
        return None
    return int(answer)


def verify(a: int, b: int, completion: str) -> float:
    """Return 1.0 when the completion states a + b (parsed as above), else 0.0.

    Defined in chapter 3.
    """
    return 1.0 if parse_completion(completion) == a + b else 0.0


def is_near_miss(truth: int, answer: int) -> bool:
    """Return True when ``answer`` is wrong but within 10 of ``truth`` (``NEAR_MISS_WINDOW``).

    For 68 that is 58..67 and 69..78: the ones digit alone wrong (68 -> 67), the tens digit
    alone off by one, as in a slipped carry (68 -> 78), or both digits changed (68 -> 71).

    Defined in chapter 3.
    """
    return answer != truth and abs(answer - truth) <= NEAR_MISS_WINDOW


def answer_kind(a: int, b: int, completion: str) -> str:
    """Return the kind of a completion: 'correct', 'near_miss', 'other_wrong' or 'malformed'.

    Defined in chapter 3.
    """
    answer = parse_completion(completion)
    if answer is None:
        return "malformed"
    if answer == a + b:
        return "correct"
    return "near_miss" if is_near_miss(a + b, answer) else "other_wrong"


def decode_completions(completions: torch.Tensor) -> list[str]:
    """Return the text of each completion (N, 4) up to and including its first `;`.

    Defined in chapter 3.
    """
    texts = []
    for row in completions.tolist():
        text = "".join(VOCAB[i] for i in row)
        texts.append(text[: text.index(";") + 1] if ";" in text else text)
    return texts


def batch_verify(pairs: torch.Tensor, completions: torch.Tensor) -> torch.Tensor:
    """Return the verifier's reward for each (pair, completion), a float tensor (N,) of 0s and 1s.

    Defined in chapter 3.
    """
    texts = decode_completions(completions)
    return torch.tensor([verify(a, b, t) for (a, b), t in zip(pairs.tolist(), texts)])


def answer_offsets(pairs: torch.Tensor, completions: torch.Tensor) -> torch.Tensor:
    """Return answer - truth for each completion (N,) as floats, NaN where it is malformed."""
    answers = [parse_completion(t) for t in decode_completions(completions)]
    return torch.tensor([float("nan") if n is None else float(n - a - b) for n, (a, b) in zip(answers, pairs.tolist())])


def batch_kinds(pairs: torch.Tensor, completions: torch.Tensor) -> list[str]:
    """Return the kind of each completion (see :func:`answer_kind`), a list of N strings.

    Defined in chapter 3.
    """
    texts = decode_completions(completions)
    return [answer_kind(a, b, t) for (a, b), t in zip(pairs.tolist(), texts)]


def kind_transitions(before: list[str], after: list[str]) -> dict:
    """Return ``{kind_before: {kind_after: fraction}}``: where each kind of answer went.

    ``before`` and ``after`` are the kinds of the same prompts' answers at two times (see
    :func:`batch_kinds`); each row sums to 1 (kinds that never occur before are left out).
    """
    if len(before) != len(after):
        raise ValueError(f"before has {len(before)} kinds but after has {len(after)}")
    out = {}
    for k in KINDS:
        went = [b for a, b in zip(before, after) if a == k]
        if went:
            out[k] = {j: went.count(j) / len(went) for j in KINDS}
    return out


# ----------------------------------------------------------------------------- wrong answers

WRONG_KINDS = ("random", "ones_off_by_one", "tens_off_by_one", "wrong_length", "near_miss")
MAX_SUM = 2 * MAX_OPERAND


def near_miss_mask(truth: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
    """Return, elementwise, whether ``answer`` is a near-miss of ``truth`` (bool tensor)."""
    return (answer != truth) & ((answer - truth).abs() <= NEAR_MISS_WINDOW)


def random_wrong_numbers(truth: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Return, per truth, a number in 0..198 more than 10 away from it: garbage, never a near-miss."""
    out = torch.randint(MAX_SUM + 1, truth.shape, generator=generator)
    bad = (out == truth) | near_miss_mask(truth, out)
    while bad.any():  # redraw the few that hit the truth or a near-miss
        out[bad] = torch.randint(MAX_SUM + 1, (int(bad.sum()),), generator=generator)
        bad = (out == truth) | near_miss_mask(truth, out)
    return out


def near_misses(truth: int) -> list[int]:
    """Return every near-miss of ``truth`` in increasing order (for 68: 58..67 and 69..78).

    Defined in chapter 3.
    """
    low = max(0, truth - NEAR_MISS_WINDOW)
    return [n for n in range(low, truth + NEAR_MISS_WINDOW + 1) if n != truth]


def _pick(options: list[int], g: torch.Generator) -> int:
    return options[int(torch.randint(len(options), (1,), generator=g))]


def _wrong_answer(truth: int, kind: str, g: torch.Generator) -> int:
    if kind == "near_miss":
        return _pick(near_misses(truth), g)
    if kind == "ones_off_by_one":
        return _pick([n for n in (truth - 1, truth + 1) if n // 10 == truth // 10 and n >= 0], g)
    if kind == "tens_off_by_one":
        return _pick([n for n in (truth - 10, truth + 10) if 0 <= n <= MAX_SUM], g)
    if kind == "wrong_length":
        s = str(truth)
        if len(s) > 1 and (len(s) == MAX_ANSWER_DIGITS or int(torch.randint(2, (1,), generator=g)) == 0):
            return int(s[:-1])  # drop the last digit: 168 -> 16, 68 -> 6
        if truth == 0:
            return 10 * _pick(list(range(1, 10)), g)  # "00" is not a number: 0 -> 10, 20, ...
        return int(s + str(int(torch.randint(10, (1,), generator=g))))  # append one: 68 -> 683
    raise ValueError(f"kind must be one of {WRONG_KINDS}, got {kind!r}")


def wrong_answers(pairs: torch.Tensor, kind: str, generator: torch.Generator) -> torch.Tensor:
    """Return one wrong answer of ``kind`` per pair, as completions (N, 4).

    Kinds: 'random' (garbage: a number in 0..198 more than 10 away from the truth; the reward
    model's training negatives), 'near_miss' (uniform over :func:`near_misses`),
    'ones_off_by_one' (68 -> 67 or 69, the tens digit unchanged), 'tens_off_by_one' (68 -> 58
    or 78), 'wrong_length' (68 -> 6 or 68x, 168 -> 16).
    """
    if kind not in WRONG_KINDS:
        raise ValueError(f"kind must be one of {WRONG_KINDS}, got {kind!r}")
    if kind == "random":
        return encode_answers(random_wrong_numbers(pairs.sum(1), generator).tolist())
    return encode_answers([_wrong_answer(int(a + b), kind, generator) for a, b in pairs.tolist()])
