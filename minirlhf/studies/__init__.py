"""Analyses that one chapter runs to make a point, kept apart from the engine they study.

==================  ==========================================================================
``estimators``      the k1, k2 and k3 KL estimators on two Gaussians, against the closed form (ch. 1)
``variance``        how noisy one token's gradient is under a batch baseline or a value head (ch. 6)
==================  ==========================================================================
"""
