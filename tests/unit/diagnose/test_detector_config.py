"""Detector configs from TOML: typed values, defaults kept, one-line errors naming file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.analyzer.core import AnalyzerCore
from diag.diagnose.detector_config import load_detector_config, parse_detector_config
from diag.diagnose.detectors.checkpoint import CheckpointConfig
from diag.diagnose.detectors.node import NodeConfig
from diag.diagnose.triage import triage
from diag.errors import ConfigError, InputError
from diag.store.run_store import RunStore
from tests.fakes.scenarios import Scenario


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "detectors.toml"
    path.write_text(text)
    return path


def test_tables_set_fields_and_keep_the_other_defaults(tmp_path: Path) -> None:
    path = _file(tmp_path, "[node]\nmin_ratio = 1.1\nwindow = 12\n\n[checkpoint]\nwarning = 1\n")
    cfg = load_detector_config(path)
    assert cfg == {
        "node": NodeConfig(min_ratio=1.1, window=12),
        "checkpoint": CheckpointConfig(warning=1.0),
    }
    checkpoint = cfg["checkpoint"]
    assert isinstance(checkpoint, CheckpointConfig)
    assert isinstance(checkpoint.warning, float)  # an integer for a float field becomes a float


def test_an_empty_file_is_every_default(tmp_path: Path) -> None:
    assert load_detector_config(_file(tmp_path, "")) == {}
    assert parse_detector_config({"node": {}}, where="x") == {"node": NodeConfig()}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[nodes]\nmin_ratio = 1.1\n", ["unknown detector [nodes]", "known: checkpoint"]),
        ("[node]\nmin_rati = 1.1\n", ["unknown key 'min_rati' in [node]", "min_ratio"]),
        ('[node]\nmin_ratio = "1.1"\n', ["[node] min_ratio = '1.1'", "expected float, got str"]),
        ("[node]\nwindow = 10.5\n", ["[node] window = 10.5", "expected int, got float"]),
        ("[node]\nwindow = true\n", ["[node] window = True", "expected int, got bool"]),
        ("[node]\nmin_ratio = false\n", ["expected float, got bool"]),
        ("min_ratio = 1.1\n", ["min_ratio = 1.1 is outside any table", "e.g. [node]"]),
        ("[node.x]\nwindow = 1\n", ["unknown key 'x' in [node]"]),
    ],
)
def test_bad_settings_are_one_line_config_errors(
    tmp_path: Path, text: str, words: list[str]
) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_detector_config(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    for w in words:
        assert w in message


def test_unreadable_files_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"cannot read detector config .*missing\.toml"):
        load_detector_config(tmp_path / "missing.toml")
    with pytest.raises(InputError, match=r"detectors\.toml is not valid TOML"):
        load_detector_config(_file(tmp_path, "[node\nmin_ratio = 1.1\n"))


def test_triage_and_live_triage_use_the_configs(tmp_path: Path) -> None:
    store = Scenario(slow_ranks=(2,), onset_step=50, severity=0.2).write(tmp_path / "run")
    strict = parse_detector_config({"node": {"min_ratio": 2.0}}, where="x")
    assert [f.id for f in triage(store).findings] == ["node-rank2"]
    assert triage(store, strict).findings == ()
    core = AnalyzerCore(RunStore.open(tmp_path / "run"), detectors=strict)
    try:
        assert core.triage().findings == ()
    finally:
        core.close()
