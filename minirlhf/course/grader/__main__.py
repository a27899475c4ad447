"""``python -m minirlhf.course.grader NOTEBOOK ...``: run the grader's command line."""

import sys

from .cli import main

sys.exit(main())
