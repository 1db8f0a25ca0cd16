"""tools/demoshow.Workspace: a demo prints the configurations it ran, or names them when kept."""

from __future__ import annotations

import os

from tools.demoshow import Workspace


def _workspace(keep=None):
    said, echoed = [], []
    return Workspace(keep, lambda who, text: said.append((who, text)), echoed.append), said, echoed


def test_without_keep_the_config_is_printed_whole_and_the_directory_goes():
    ws, said, echoed = _workspace()
    with ws as path:
        conf = os.path.join(path, "router.conf")
        with open(conf, "w") as fh:
            fh.write("router {\n    mode: standalone\n}\n")
        ws.show_config("router.daemon", conf, 4242)
    assert not os.path.exists(path)
    assert echoed == ["--- router.conf (tdrouterd -c router.conf; port 0 lets the kernel choose, it chose 4242) "
                      "---\nrouter {\n    mode: standalone\n}\n--- end of router.conf ---"]
    assert said == []


def test_with_keep_the_config_is_named_and_the_directory_stays(tmp_path):
    keep = tmp_path / "demo"
    ws, said, echoed = _workspace(str(keep))
    with ws as path:
        conf = os.path.join(path, "broker.xml")
        with open(conf, "w") as fh:
            fh.write("<configuration/>")
        ws.show_config("broker.daemon", conf, 5672)
    assert os.path.isfile(keep / "broker.xml") and echoed == []
    assert said[0] == ("tdbroker", f"runs {conf} (again: tdbroker -c {conf})")
    assert said[-1][0] == "kept" and str(keep) in said[-1][1]


def test_keep_must_be_new_or_empty(tmp_path):
    assert Workspace.check_keep(None) is None
    assert Workspace.check_keep(str(tmp_path / "new")) is None
    assert Workspace.check_keep(str(tmp_path)) is None  # empty
    (tmp_path / "journal").mkdir()
    assert "not empty" in Workspace.check_keep(str(tmp_path))
    (tmp_path / "file").write_text("x")
    assert "not a directory" in Workspace.check_keep(str(tmp_path / "file"))
