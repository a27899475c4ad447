"""Runs laid out as chapter 10 stores them (``{"correct": {arm: {seed: log}}, bug: {seed: log}}``),
made up so that each bug's run separates from the correct one on the panels of :data:`SEP` and
on no other: the unit tests read chapter 10's answer keys from these, never from the chapter's
real runs, which only the chapter makes (nbval checks its answers on them)."""

from minirlhf.studies import silent_bugs as sb

# The panels that separate each bug's run, in these made-up runs.
SEP = {
    "no-mask": ("val/completion_length", "objective/entropy"),
    "pad-is-end": ("val/completion_length",),
    "kl-no-grad": ("kl", "objective/kl", "accuracy"),
    "k1-loss": ("objective/entropy",),
    "ratio-to-reference": ("kl",),
    "no-temperature": ("policy/approxkl_avg", "accuracy"),
    "dpo-rejected-flipped": ("logps/rejected", "rewards/accuracies"),
}


def log(trainer: str, seed: int, moved=(), by: float = 1.0) -> dict:
    """One made-up log: every panel of the trainer's dashboard flat at 1 + seed / 100 (an
    evaluated panel starts at 0), ``by`` added on the panels ``moved``."""
    out = {}
    for metric in sb.DASHBOARD[trainer]:
        value = 1.0 + seed / 100 + (by * (1 + seed / 10) if metric in moved else 0.0)
        out[metric] = [0.0, value, value] if metric in ("accuracy", "kl") else [value, value]
    return out


def runs(sep=None, seeds=(0, 1, 2)) -> dict:
    """Made-up runs of every bug and of each bug's arm, for ``seeds``; ``sep`` (default
    :data:`SEP`) names the panels each bug moves."""
    sep = SEP if sep is None else sep
    out = {"correct": {}}
    for name, bug in sb.BUGS.items():
        trainer = sb._trainer(bug.arm)
        out["correct"][bug.arm] = {str(s): log(trainer, s) for s in seeds}
        out[name] = {str(s): log(trainer, s, sep.get(name, ())) for s in seeds}
    return out
