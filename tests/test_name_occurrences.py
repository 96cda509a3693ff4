"""pybytes.name_occurrences with many names (one pass over the identifiers) keeps exactly the
occurrences that ident_at accepts of the per-name substring search, in a window of the whole data."""
from archaudit.python import pybytes
from archaudit.python.pybytes import ident_at, name_occurrences

DATA = (b"def f1():\n    return f10 + xf1 + 9f1 + f1_ + obj.f1 + 'pkg.f1' + f\"{f1}\"\n"
        b"f12 = f1(f2)\n# f1 in a comment\n")


def test_many_names_path_equals_the_substring_search_filtered_by_ident_at(monkeypatch):
    names = [b"f1", b"f2", b"f10", b"f12", b"xf1"]
    substring = name_occurrences(DATA, names)  # 5 names: the substring search
    accepted = [(p, n) for p, n in substring if ident_at(DATA, p, n, 0, len(DATA))]
    assert len(substring) > len(accepted)  # substrings inside longer identifiers are found, then rejected
    monkeypatch.setattr(pybytes, "MANY_NAMES", 2)
    assert name_occurrences(DATA, names) == accepted
