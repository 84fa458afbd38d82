"""Every test that reads the benchmark data asks for it through ``testkit.paths.require_data``
(or the ``data_dir`` fixture), so that on a clone without ``../shared/data`` it is skipped and
named, and under ``CI`` it fails, instead of ending in a FileNotFoundError."""

from __future__ import annotations

import re
from pathlib import Path

from testkit.paths import REPO

#: Ways to reach the data other than ``require_data()``: the folder's path spelt out, or a
#: module-level constant holding it.
_DIRECT = re.compile(r"\bDATA_DIR\b(?!_ENV)|\"shared\"\s*/\s*\"data\"|shared/data[\"']")


def test_the_data_is_reached_only_through_require_data() -> None:
    offenders = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        if (
            path.name == "paths.py"
            and path.parent.name == "testkit"
            or path.name == Path(__file__).name
        ):
            continue  # where require_data itself lives, and this file's own examples
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if _DIRECT.search(code) and not code.lstrip().startswith(('"""', "'''")):
                offenders.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert offenders == [], "read the data through testkit.paths.require_data():\n" + "\n".join(
        offenders
    )


def test_the_check_finds_a_direct_read(tmp_path) -> None:
    assert _DIRECT.search("load_dataset('math500', data_dir=DATA_DIR)")
    assert _DIRECT.search('root = REPO.parent / "shared" / "data"')
    assert not _DIRECT.search("os.environ[DATA_DIR_ENV] = str(d)")
    assert not _DIRECT.search("data_dir=require_data()")
