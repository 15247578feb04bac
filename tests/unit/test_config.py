"""load_config: defaults, then the TOML file, then DIAG_* variables, then overrides; unknown
keys and wrong types are one-line errors naming where they came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.config import DaemonConfig, HookConfig, load_config
from diag.errors import ConfigError, InputError


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "diag.toml"
    path.write_text(text)
    return path


def test_layers_later_wins(tmp_path: Path) -> None:
    path = _toml(tmp_path, '[daemon]\nflush_interval_s = 2\ngpu_backend = "fake"\nfake_gpus = 2\n')
    env = {"DIAG_DAEMON_FAKE_GPUS": "4", "DIAG_HOOK_JOB_ID": "not mine"}
    cfg = load_config("daemon", file=path, env=env, overrides={"job_id": "j1", "host": None})
    assert cfg == DaemonConfig(flush_interval_s=2.0, gpu_backend="fake", fake_gpus=4, job_id="j1")
    assert isinstance(cfg.flush_interval_s, float)
    assert load_config("hook", env={}) == HookConfig()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[daemon]\nfake_gpu = 2\n", ["unknown key 'fake_gpu' in [daemon]", "fake_gpus"]),
        ('[daemon]\nfake_gpus = "2"\n', ["[daemon] fake_gpus = '2': expected int, got str"]),
        ("[deamon]\nfake_gpus = 2\n", ["unknown section(s) ['deamon']"]),
        ("daemon = 3\n", ["daemon = 3 is not a table"]),
    ],
)
def test_bad_files_are_one_line_errors_naming_the_file(
    tmp_path: Path, text: str, words: list[str]
) -> None:
    path = _toml(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config("daemon", file=path, env={})
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    for w in words:
        assert w in message


def test_unreadable_or_invalid_files_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"cannot read config file .*missing\.toml"):
        load_config("hook", file=tmp_path / "missing.toml", env={})
    with pytest.raises(InputError, match=r"diag\.toml is not valid TOML"):
        load_config("hook", file=_toml(tmp_path, "[hook\n"), env={})
    # an integer past Python's 4,300-digit limit: tomllib's own ValueError (found by fuzzing)
    with pytest.raises(InputError, match=r"diag\.toml is not valid TOML: Exceeds the limit"):
        load_config("hook", file=_toml(tmp_path, "[hook]\nhang_min_s = " + "9" * 5000), env={})


def test_environment_strings_are_coerced_and_checked() -> None:
    cfg = load_config("hook", env={"DIAG_HOOK_NUMERICS": "off", "DIAG_HOOK_HANG_MIN_S": "5"})
    assert cfg.numerics is False and cfg.hang_min_s == 5.0
    with pytest.raises(ConfigError, match=r"HookConfig\.hang_min_s: 'soon' is not a valid float"):
        load_config("hook", env={"DIAG_HOOK_HANG_MIN_S": "soon"})
    with pytest.raises(ConfigError, match="unknown setting 'hang_mins'"):
        load_config("hook", env={"DIAG_HOOK_HANG_MINS": "5"})
