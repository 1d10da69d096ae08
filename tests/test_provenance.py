"""Which code a record names: the commit, or the commit marked dirty with a hash of the differences."""

from __future__ import annotations

import shutil

import pytest
import testkit

from workbench import provenance

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.fixture
def checkout(tmp_path):
    root = tmp_path / "repo"
    (root / "kernels").mkdir(parents=True)
    (root / "reports").mkdir()
    (root / "kernels" / "op.py").write_text("X = 1\n")
    (root / "reports" / "r.json").write_text("{}\n")
    testkit.git(root, "init", "-q")
    testkit.git(root, "add", "-A")
    testkit.git(root, "commit", "-qm", "first")
    return root


def _head(root):
    return testkit.git(root, "rev-parse", "--short", "HEAD").strip()


def test_a_clean_checkout_names_its_commit(checkout):
    assert provenance.version_of(checkout) == _head(checkout)
    assert not provenance.is_dirty(provenance.version_of(checkout))


def test_changed_code_is_marked_dirty_with_a_hash_of_the_changes(checkout):
    (checkout / "kernels" / "op.py").write_text("X = 2\n")
    version = provenance.version_of(checkout)
    assert version.startswith(_head(checkout) + "-dirty+")
    assert provenance.is_dirty(version)
    # The same change hashes the same; another change hashes differently.
    assert provenance.version_of(checkout) == version
    (checkout / "kernels" / "op.py").write_text("X = 3\n")
    assert provenance.version_of(checkout) != version


def test_an_untracked_code_file_or_a_deleted_one_makes_the_tree_dirty(checkout):
    (checkout / "kernels" / "new.py").write_text("Y = 1\n")
    assert provenance.changed_files(checkout) == ["kernels/new.py"]
    (checkout / "kernels" / "new.py").unlink()
    (checkout / "kernels" / "op.py").unlink()
    assert provenance.changed_files(checkout) == ["kernels/op.py"]
    assert provenance.is_dirty(provenance.version_of(checkout))


def test_reports_written_into_the_tree_leave_it_clean(checkout):
    (checkout / "reports" / "r.json").write_text('{"new": 1}\n')
    (checkout / "reports" / "other.csv").write_text("a\n")
    assert provenance.version_of(checkout) == _head(checkout)


def test_outside_a_checkout_the_version_is_empty(tmp_path):
    assert provenance.version_of(tmp_path) == ""


def test_records_and_the_environment_name_this_process_code_version():
    from workbench.measure import measure
    from workbench.reports.environment import environment

    rec = measure("scalar_ops", "materialized", device="cpu", dtype="fp32", problem={"numel": 8}, rep_ms=1, warmup_ms=0)
    assert rec.commit == provenance.code_version()
    assert environment("cpu")["git_commit"] in (provenance.code_version(), "(not a git checkout)")


def test_the_report_headline_says_which_code_it_measured():
    from workbench.reports.suite import code_line

    clean = {"records": [{"commit": "abc1234"}, {"commit": "abc1234"}]}
    assert code_line(clean) == "Code: commit abc1234, every record."
    dirty = {"records": [{"commit": "abc1234-dirty+0011aabb"}]}
    assert "DIRTY TREE (abc1234-dirty+0011aabb)" in code_line(dirty)
    mixed = {"records": [{"commit": "abc1234"}, {"commit": "def5678"}]}
    assert "2 code versions (abc1234, def5678)" in code_line(mixed)
    assert code_line({"records": [], "environment": {"git_commit": "(not a git checkout)"}}).endswith("no commit.")


def test_a_history_less_copy_names_the_claimed_commit_only_when_its_code_hashes_to_it(checkout, tmp_path):
    """The GPU machine's copy: the tree of one commit over an older .git. A claim made at the
    clean checkout names the commit there; a copy whose code differs keeps its dirty mark."""
    first = _head(checkout)
    (checkout / "kernels" / "op.py").write_text("X = 2\n")
    testkit.git(checkout, "commit", "-qam", "second")
    claim = provenance.claim(checkout)
    second, claimed_hash = claim.split(":")
    assert second == _head(checkout) != first
    # The copy: the second commit's files over the first commit's history.
    copy = tmp_path / "copy"
    shutil.copytree(checkout, copy)
    testkit.git(copy, "reset", "-q", "--soft", first)
    assert provenance.version_of(copy, claimed="").startswith(first + "-dirty+")
    assert provenance.version_of(copy, claimed=claim) == second
    # Code that is neither: the claim does not match, the dirty mark stays.
    (copy / "kernels" / "op.py").write_text("X = 3\n")
    assert provenance.version_of(copy, claimed=claim).startswith(first + "-dirty+")
    # A report written into the copy changes nothing; claiming a dirty tree is refused.
    (copy / "kernels" / "op.py").write_text("X = 2\n")
    (copy / "reports" / "r.json").write_text('{"new": 1}\n')
    assert provenance.version_of(copy, claimed=claim) == second
    with pytest.raises(ValueError, match="commit it before claiming it"):
        provenance.claim(copy)


def _notebook(cells, outputs=()):
    import json

    nb = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": f"c{i}",
                "metadata": {},
                "outputs": list(outputs),
                "source": src,
            }
            for i, src in enumerate(cells)
        ],
        "metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(nb, indent=1) + "\n"


def test_a_notebook_run_and_saved_is_not_code_that_changed_but_an_edited_cell_is(checkout):
    (path,) = testkit.commit_notebooks(checkout, {"n.ipynb": _notebook(["x = 1", "print(x)"])})
    head = _head(checkout)
    # Run and saved: outputs, counts and metadata written, the cells' sources as they were.
    ran = _notebook(["x = 1", "print(x)"], outputs=[{"name": "stdout", "output_type": "stream", "text": "1\n"}])
    ran = ran.replace('"execution_count": null', '"execution_count": 3').replace(
        '"metadata": {}', '"metadata": {"a": 1}'
    )
    path.write_text(ran)
    assert provenance.changed_files(checkout) == []
    assert provenance.version_of(checkout) == head
    # A cell edited: the notebook is code that changed; the hash follows the cells, not the outputs.
    path.write_text(_notebook(["x = 2", "print(x)"]))
    edited = provenance.version_of(checkout)
    assert provenance.changed_files(checkout) == ["notebooks/n.ipynb"] and edited.startswith(head + "-dirty+")
    path.write_text(
        _notebook(["x = 2", "print(x)"], outputs=[{"name": "stdout", "output_type": "stream", "text": "2\n"}])
    )
    assert provenance.version_of(checkout) == edited
