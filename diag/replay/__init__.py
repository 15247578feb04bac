"""Replay: turn a finding's suspects and the run's recorded shapes and sizes into probe runs on the
suspect and a healthy peer (:mod:`.plan` chooses, :mod:`.replay` runs and judges)."""
