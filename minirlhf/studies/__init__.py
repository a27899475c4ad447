"""Analyses that one chapter runs to make a point, kept apart from the engine they study.

==================  ==========================================================================
``estimators``      the k1, k2 and k3 KL estimators on two Gaussians, against the closed form (ch. 1)
``double_count``    exact expected gradients of the KL placements, and of the KL counted twice (ch. 2)
``rm_blind_spot``   the reward model's pair accuracy by which digits a near-miss changes (ch. 4)
``robustness``      partial-SFT starts made by one stopping rule; the prompt's share of a reward's variance (ch. 6)
``variance``        how noisy one token's gradient is under a batch baseline or a value head (ch. 7)
==================  ==========================================================================
"""
