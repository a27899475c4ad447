"""Progress output takes the form that suits where it goes, and only when the caller asks."""

import io

from minirlhf import progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


def run_bar(stream, enabled=True, steps=50):
    bar = progress.progress_bar(total=steps, desc="SFT", enabled=enabled, stream=stream)
    for i in range(steps):
        bar.update(1)
        bar.set_postfix_str(f"loss {1 / (i + 1):.2f}")
    bar.close()
    return stream.getvalue()


def test_a_log_file_gets_one_line_per_stage():
    text = run_bar(io.StringIO())
    lines = text.splitlines()
    assert len(lines) == 1 and "\r" not in text
    assert lines[0].startswith("SFT: 50/50 steps in ") and lines[0].endswith(" s (loss 0.02)")


def test_a_terminal_gets_a_bar_that_redraws_in_place():
    text = run_bar(Terminal())
    assert "\r" in text and "SFT" in text


def test_nothing_when_the_caller_says_no():
    assert run_bar(io.StringIO(), enabled=False) == ""
    assert run_bar(Terminal(), enabled=False) == ""


def test_status_lines_go_to_standard_output(capsys):
    progress.status("sft_policy: loaded sft_policy.pt")
    progress.status("not shown", enabled=False)
    assert capsys.readouterr() == ("sft_policy: loaded sft_policy.pt\n", "")


def test_outside_a_kernel_this_is_not_a_notebook():
    assert not progress.in_notebook()


def test_a_command_line_run_logged_to_a_file_has_no_bar_refreshes(tmp_path):
    import os
    import subprocess
    import sys

    code = (
        "from minirlhf.sft import SFTConfig, train_sft\ntrain_sft(SFTConfig(steps=30, batch_size=8), progress=True)\n"
    )
    log = tmp_path / "log"
    with log.open("w") as f:
        subprocess.run(
            [sys.executable, "-c", code],
            stdout=f,
            stderr=subprocess.STDOUT,
            check=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("SFT: 30/30 steps in "), lines
