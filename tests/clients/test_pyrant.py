"""pyrant (a pure-Python Tokyo Tyrant client with table-database support, from PyPI) against
kura serve on a table database (`PATH.kt`).

pyrant 0.6.5 predates Python 3: scripts/client-tests.sh fetches it from PyPI and runs the
standard 2to3 conversion (without its dict fixer: pyrant defines iterkeys / iteritems itself)
plus a few byte-string fixes in its frame packing (see `port_pyrant` there); the protocol and
table code are the library's own, its queries (`Tyrant.query`: filter, exclude, order_by,
slices, count, hint, columns, delete, union / intersect / minus) included: misc search and
metasearch.
"""
import pytest

pyrant = pytest.importorskip("pyrant")

table = pytest.mark.parametrize("server", ["t.kt"], indirect=True)


@pytest.fixture
def t(server):
    host, port = server
    return pyrant.Tyrant(host=host, port=port)


@table
def test_it_sees_a_table(t):
    assert t.db_type == "table"
    assert t.table_enabled


@table
def test_records_are_dicts_of_columns(t):
    t["alice"] = {"name": "Alice", "age": "30"}  # misc put [pk, n1, v1, …]
    assert t["alice"] == {"name": "Alice", "age": "30"}  # get: the NUL-separated form
    t.concat("alice", "name\x00Zed\x00city\x00Oslo")  # putcat adds the new columns only
    assert t["alice"] == {"name": "Alice", "age": "30", "city": "Oslo"}
    t["alice"] = {"name": "Al"}  # put replaces the record
    assert t["alice"] == {"name": "Al"}
    t["ü"] = {"näme": "Zoë"}
    assert t["ü"] == {"näme": "Zoë"}
    assert "alice" in t and "nobody" not in t
    assert t.get("nobody") is None
    with pytest.raises(KeyError):
        t["nobody"]
    del t["alice"]
    assert "alice" not in t
    with pytest.raises(KeyError):
        del t["alice"]


@table
def test_update_lists_and_iteration(t):
    t.update({"a": {"x": "1"}, "b": {"y": "2"}})
    t.multi_set({"c": {"z": "3"}, "d": {"w": "4", "v": "5"}})
    assert len(t) == 4
    assert sorted(t.keys()) == ["a", "b", "c", "d"]
    assert dict(t.items()) == {
        "a": {"x": "1"},
        "b": {"y": "2"},
        "c": {"z": "3"},
        "d": {"w": "4", "v": "5"},
    }
    assert dict(t.multi_get(["a", "d", "missing"])) == {
        "a": {"x": "1"},
        "d": {"w": "4", "v": "5"},
    }
    t.multi_del(["a", "b"])
    assert sorted(t.keys()) == ["c", "d"]


@table
def test_genuid_and_indexes(t):
    first, second = int(t.generate_key()), int(t.generate_key())
    assert 0 < first < second
    p = t.proto
    assert p.add_index("name")
    assert not p.add_index("name", keep=True)  # already indexed
    assert p.add_index("age", "decimal")
    assert p.add_index("tags", "token")
    assert p.add_index("text", "q-gram")
    assert p.optimize_index("name")
    assert p.drop_index("age")
    assert not p.drop_index("age")  # no index left to drop
    t["r"] = {"name": "x", "tags": "a b", "text": "hello"}
    assert t["r"]["tags"] == "a b"


def fill(t):
    t.update(
        {
            "a": {"name": "Foo", "price": "1", "tags": "red green", "text": "hello big world"},
            "b": {"name": "Bar", "price": "2", "tags": "green", "text": "small world"},
            "c": {"name": "Foo", "price": "3", "tags": "blue", "text": "hello there"},
            "d": {"name": "Baz", "price": "10", "tags": "red", "text": "goodbye"},
        }
    )


@table
def test_queries(t):
    fill(t)
    q = t.query
    assert sorted(k for k, _ in q.filter(name="Foo")) == ["a", "c"]
    assert sorted(k for k, _ in q.filter(price__gt=1)) == ["b", "c", "d"]
    assert sorted(k for k, _ in q.filter(price__between=[2, 3])) == ["b", "c"]
    assert sorted(k for k, _ in q.filter(name__startswith="Ba")) == ["b", "d"]
    assert sorted(k for k, _ in q.filter(name__endswith="z")) == ["d"]
    assert sorted(k for k, _ in q.filter(name__contains="a")) == ["b", "d"]
    assert sorted(k for k, _ in q.filter(name__in=["Bar", "Baz"])) == ["b", "d"]
    assert sorted(k for k, _ in q.filter(name__matches="^F.o$")) == ["a", "c"]
    assert sorted(k for k, _ in q.filter(tags__like="red")) == ["a", "d"]
    assert sorted(k for k, _ in q.filter(text__search="hello world")) == ["a"]
    assert sorted(k for k, _ in q.exclude(name="Foo")) == ["b", "d"]
    assert sorted(k for k, _ in q.filter(name="Foo", price__gte=2)) == ["c"]
    # Order (numeric and lexical, both directions) and slices (setlimit).
    by_price = q.order_by("-price", numeric=True)
    assert [k for k, _ in by_price] == ["d", "c", "b", "a"]
    assert [k for k, _ in by_price[1:3]] == ["c", "b"]
    assert [k for k, _ in q.order_by("price")] == ["a", "d", "b", "c"]
    first = q.filter(name="Foo").order_by("price", numeric=True)[0]
    assert first == ("a", {"name": "Foo", "price": "1", "tags": "red green", "text": "hello big world"})
    assert q.filter(name="Foo").count() == 2
    assert len(q.filter(price__lt=3)) == 2
    assert "[[HINT]]" in q.filter(name="Foo").hint()  # the raw element: pyrant keeps it
    assert sorted(q.filter(name="Foo").values("price")) == ["1", "3"]
    assert sorted(d["price"] for d in q.filter(name="Foo").columns("price")) == ["1", "3"]
    # Metasearch: union, intersection, difference.
    foo, cheap = q.filter(name="Foo"), q.filter(price__lt=3)
    assert sorted(k for k, _ in foo | cheap) == ["a", "b", "c"]
    assert sorted(k for k, _ in foo & cheap) == ["a"]
    assert sorted(k for k, _ in foo.minus(cheap)) == ["c"]
    # delete: misc search … out.
    q.filter(name="Foo").delete()
    assert sorted(t.keys()) == ["b", "d"]


@table
def test_queries_use_indexes(t):
    p = t.proto
    assert p.add_index("name")
    assert p.add_index("price", "decimal")
    fill(t)
    q = t.query.filter(name="Foo", price__gt=1)
    assert [k for k, _ in q] == ["c"]
    assert "name" in q.hint()
