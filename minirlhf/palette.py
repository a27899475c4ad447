"""The colors of every figure: the Okabe-Ito palette, safe for the common kinds of color blindness.

Okabe and Ito, "Color Universal Design" (2008). Figures that compare the two arms of the
experiment use :data:`ARM_COLORS`, so an arm has the same color in every chapter.
"""

__all__ = ["PALETTE", "BLUE", "ORANGE", "GREEN", "PINK", "YELLOW", "SKY", "DARK_YELLOW", "BLACK", "GRAY", "ARM_COLORS"]

BLUE = "#0072B2"
ORANGE = "#D55E00"  # vermillion
GREEN = "#009E73"  # bluish green
PINK = "#CC79A7"  # reddish purple
YELLOW = "#E69F00"  # orange
SKY = "#56B4E9"  # sky blue
DARK_YELLOW = "#8C6D00"  # a darker shade of yellow, legible as text on white
BLACK = "#000000"
GRAY = "#7F7F7F"  # a neutral gray, for a control that is not a method

PALETTE = (BLUE, ORANGE, GREEN, PINK, YELLOW, SKY, DARK_YELLOW, BLACK, GRAY)  # in the order arms take them
ARM_COLORS = {"rm": ORANGE, "verifier": BLUE}
