"""``klear-lab dashboard --help`` says where it serves: ``--host HOST`` and ``--port PORT`` had no help at all."""

from __future__ import annotations

import pytest

from klear_lab.cli import build_parser


def test_dashboard_help_gives_the_host_and_port_defaults(capsys):
    pytest.importorskip("klear_lab.cli_sweep")  # the sweep subsystem adds the command
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["dashboard", "--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps at the terminal's width
    assert "--host HOST address to serve on (default: 127.0.0.1" in text
    assert "--port PORT port to serve on (default: 8080)" in text
