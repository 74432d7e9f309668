"""`audit prove-inclusion LOG --index N`, as the README writes it, and the older `LOG N`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsteer.audit.cli import main
from specsteer.core.cli import EXIT_OK, EXIT_USAGE
from tests.audit.helpers import BuiltLog, build_log


@pytest.fixture
def built(tmp_path: Path) -> BuiltLog:
    return build_log(tmp_path, sessions=1)


def proof(capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    return json.loads(capsys.readouterr().out)


def test_the_index_option_and_the_bare_index_prove_the_same_record(
    built: BuiltLog, capsys: pytest.CaptureFixture[str]
) -> None:
    log, key = str(built.directory), ["--key", str(built.pub)]
    assert main(["prove-inclusion", log, "--index", "3", "--json", *key]) == EXIT_OK
    by_option = proof(capsys)
    assert main(["prove-inclusion", log, "3", "--json", *key]) == EXIT_OK
    assert proof(capsys) == by_option
    assert by_option["index"] == 3 and "record 3" in str(by_option["record"])
    assert main(["prove-inclusion", "--index", "2", log, "2", "--json", *key]) == EXIT_OK  # the same index twice
    assert proof(capsys)["index"] == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "prove-inclusion needs the record's index: --index N"),
        (["3", "--index", "2"], "prove-inclusion got two record indexes: --index 2 and 3"),
        (["--index", "-1"], "argument --index: must be at least 0: -1"),
    ],
)
def test_a_missing_or_doubled_index_is_a_usage_error(
    built: BuiltLog, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["prove-inclusion", str(built.directory), *argv])
    assert exc.value.code == EXIT_USAGE
    assert message in capsys.readouterr().err
