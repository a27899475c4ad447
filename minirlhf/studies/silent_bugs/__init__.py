"""Silent bugs: runs that train without an error and are quietly wrong, and how they show.

Each :class:`Bug` is one function of the engine, copied with one line changed, the way such
bugs are shipped; :func:`planted` swaps the copy in for the length of a run, so a buggy run is
the engine's own ``ppo_train`` (or ``train_dpo``) with that one function replaced. Chapter 10
reads the runs through the names this package gathers from its modules, one job each:

==============  ================================================================================
``copies``      the copies and :data:`BUGS`; :func:`planted`, :func:`one_line_diff`
``checks``      checks before training, a few forward and backward passes that catch every bug
``dashboard``   the metrics a run shows by trainer (:data:`DASHBOARD`), their x axis, the figure
``tells``       which metrics tell a buggy run from the correct one (:func:`paired_difference`),
                and from when (:func:`first_departure`); what a DPO run learns to write
``runs``        one run with a bug planted, every bug's runs (:func:`study`), a fix's runs
                (:func:`band_check`)
==============  ================================================================================

A function that another one calls is looked up in its own module: to replace, say,
:func:`run_bug` for :func:`study`, patch ``minirlhf.studies.silent_bugs.runs``, not the package.
"""

from __future__ import annotations

from .checks import (
    CHECKS,
    check_dpo_gradient,
    check_leash_gradient,
    check_logprobs,
    check_mask,
    check_ratio,
    run_checks,
)
from .copies import (
    BUGS,
    Bug,
    completion_mask_missing,
    completion_mask_pad_is_end,
    dpo_loss_rejected_flipped,
    grpo_token_loss_ratio_to_reference,
    k3_loss_term_k1,
    k3_loss_term_no_grad,
    logprobs_from_logits_no_temperature,
    one_line_diff,
    planted,
)
from .dashboard import DASHBOARD, KEPT, X_LABEL, curve_x, plot_dashboard
from .dashboard import _trainer as _trainer  # the trainer of an arm, keying its dashboard: chapter 10 reads it
from .runs import band_check, run_bug, study
from .tells import (
    first_departure,
    paired_difference,
    point_differences,
    separating,
    tell_table,
    tell_value,
    what_it_writes,
)

__all__ = [
    "Bug",
    "BUGS",
    "planted",
    "one_line_diff",
    "run_bug",
    "tell_value",
    "paired_difference",
    "separating",
    "tell_table",
    "CHECKS",
    "run_checks",
    "check_mask",
    "check_logprobs",
    "check_ratio",
    "check_leash_gradient",
    "check_dpo_gradient",
    "DASHBOARD",
    "KEPT",
    "X_LABEL",
    "curve_x",
    "study",
    "plot_dashboard",
    "band_check",
    "point_differences",
    "first_departure",
    "what_it_writes",
    # the copies, which chapter 10's exercises name as the slips of each fix
    "k3_loss_term_no_grad",
    "k3_loss_term_k1",
    "completion_mask_missing",
    "completion_mask_pad_is_end",
    "grpo_token_loss_ratio_to_reference",
    "logprobs_from_logits_no_temperature",
    "dpo_loss_rejected_flipped",
]
