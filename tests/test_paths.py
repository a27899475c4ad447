"""Where outputs go, and the check a long run makes before it writes there."""

import importlib.util
import os

from minirlhf import paths
from minirlhf.paths import folder_problem, kind_of


def load_paths_with(env_value):
    """Import a fresh copy of minirlhf/paths.py with MINIRLHF_OUTPUTS set to ``env_value``."""
    saved = os.environ.get("MINIRLHF_OUTPUTS")
    os.environ["MINIRLHF_OUTPUTS"] = env_value
    try:
        spec = importlib.util.spec_from_file_location("fresh_paths", paths.__file__)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        if saved is None:
            os.environ.pop("MINIRLHF_OUTPUTS")
        else:
            os.environ["MINIRLHF_OUTPUTS"] = saved


def test_an_empty_outputs_variable_is_unset_not_the_current_folder(tmp_path):
    assert load_paths_with("").OUTPUTS == paths.ROOT / "outputs"
    assert load_paths_with(str(tmp_path)).OUTPUTS == tmp_path


def test_folder_problem_names_what_is_in_the_way(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "out" / "results.json").mkdir(parents=True)
    os.mkfifo(tmp_path / "pipe")
    assert folder_problem(tmp_path / "new" / "deeper") == ""
    assert folder_problem(tmp_path / "out", ("a.png",)) == ""
    assert folder_problem(tmp_path / "file") == f"{tmp_path / 'file'} is a regular file, not a folder"
    assert folder_problem(tmp_path / "file" / "sub") == (
        f"{tmp_path / 'file' / 'sub'} cannot be made: {tmp_path / 'file'} is a regular file, not a folder")
    assert folder_problem(tmp_path / "out", ("results.json",)) == (
        f"{tmp_path / 'out' / 'results.json'} is a folder, where the output file should go")
    assert folder_problem(tmp_path / "pipe") == f"{tmp_path / 'pipe'} is a named pipe (FIFO), not a folder"
    assert kind_of(tmp_path / "nothing") == "nothing"
