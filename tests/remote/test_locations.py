"""Locations of remote items: a list, a function of the index, a lazily expanded template;
nothing leaves its base."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from torch_threadloader.remote import LocationError, make_locations, redact_url
from torch_threadloader.remote.locations import template_base


class CountingColumn(Sequence[int]):
    """A column of ``n`` rows, value ``i`` at row ``i``, counting the rows read."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.reads: list[int] = []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):  # type: ignore[override]
        self.reads.append(i)
        return i


def test_a_list_is_used_as_it_is():
    locs = make_locations(["http://h/a", "http://h/b/../c"])
    assert len(locs) == 2
    assert [locs[0], locs[1], locs[-1]] == ["http://h/a", "http://h/b/../c", "http://h/b/../c"]


def test_a_function_of_the_index_needs_its_length():
    locs = make_locations(lambda i: f"http://h/{i}", length=3)
    assert [locs[i] for i in range(3)] == ["http://h/0", "http://h/1", "http://h/2"]
    with pytest.raises(TypeError, match="length is required"):
        make_locations(lambda i: "x")


def test_a_template_row_takes_one_value_of_each_column():
    locs = make_locations("s3://b/{split}/{id:06d}.jpg", columns={"split": ["train", "val"], "id": [7, 8]})
    assert len(locs) == 2
    assert locs[1] == "s3://b/val/000008.jpg"
    assert locs.base == "s3://b/"


def test_a_ten_million_row_template_builds_only_the_rows_asked_for():
    column = CountingColumn(10_000_000)
    locs = make_locations("http://h/data/{id}.bin", columns={"id": column})
    assert len(locs) == 10_000_000
    assert column.reads == []
    assert locs[9_999_999] == "http://h/data/9999999.bin"
    assert locs[5] == "http://h/data/5.bin"
    assert column.reads == [9_999_999, 5]


@pytest.mark.parametrize(
    "value",
    [
        "../secret",
        "a/../../secret",
        "%2e%2e/secret",
        "%2E%2E%2Fsecret",
        "%252e%252e/secret",
        "/etc/passwd",
        "a//b",
        "..\\secret",
        "./x",
        "http://evil/x",
        "..;/secret",
        "..%3b/secret",
        ".. /secret",
        "a/..;x/../../secret",
    ],
)
def test_a_template_value_that_leaves_the_base_is_refused_naming_the_item(value):
    locs = make_locations("http://h/data/{name}", columns={"name": ["ok", value]})
    assert locs[0] == "http://h/data/ok"
    with pytest.raises(LocationError, match=r"item 1: .* leaves its base 'http://h/data/'"):
        locs[1]


def test_a_base_confines_a_list_and_joins_relative_locations():
    locs = make_locations(["x/1.bin", "http://h/data/2.bin", "http://other/3.bin", "../4.bin"], base="http://h/data")
    assert locs[0] == "http://h/data/x/1.bin"
    assert locs[1] == "http://h/data/2.bin"
    with pytest.raises(LocationError, match=r"item 2: .* outside the base"):
        locs[2]
    with pytest.raises(LocationError, match="item 3"):
        locs[3]


def test_bad_arguments_name_what_is_wrong():
    with pytest.raises(ValueError, match="one length"):
        make_locations("h/{a}/{b}", columns={"a": [1, 2], "b": [1]})
    with pytest.raises(ValueError, match="no column: \\['b'\\]"):
        make_locations("h/{a}/{b}", columns={"a": [1]})
    with pytest.raises(ValueError, match="not in the template"):
        make_locations("h/{a}", columns={"a": [1], "c": [2]})
    with pytest.raises(TypeError, match="columns is required"):
        make_locations("h/{a}")
    with pytest.raises(TypeError, match="single string"):
        make_locations("http://h/one")
    with pytest.raises(ValueError, match="length=3 but the locations list has 2"):
        make_locations(["a", "b"], length=3)
    with pytest.raises(TypeError, match="locations must be"):
        make_locations(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="every field must be named"):
        make_locations("h/{}", columns={"": [1]})


def test_an_index_out_of_range_or_not_an_int_is_refused():
    locs = make_locations(["a", "b"])
    with pytest.raises(IndexError, match="item 2 is out of range: the dataset has 2 items"):
        locs[2]
    with pytest.raises(TypeError, match="integer"):
        locs["0"]  # type: ignore[index]
    bad = make_locations(lambda i: 5, length=1)  # type: ignore[arg-type,return-value]
    with pytest.raises(LocationError, match=r"item 0: .* int, not str"):
        bad[0]


def test_template_base_is_the_text_before_the_first_field_up_to_a_slash():
    assert template_base("s3://b/train/{id}.jpg") == "s3://b/train/"
    assert template_base("s3://b/tr{a}/x") == "s3://b/"
    assert template_base("{path}") == ""
    assert template_base("http://cdn.example.com{path}") == "http://cdn.example.com/"
    assert template_base("http://h:{port}/x/{p}") == "http://h:"
    assert template_base("http://{host}/x") == "http://"


@pytest.mark.parametrize("value", ["@evil.example/x", ".evil.example/x", ":8080@evil.example/x", "img/1.jpg"])
def test_a_field_glued_to_the_host_cannot_change_the_host(value):
    locs = make_locations("http://cdn.example.com{path}", columns={"path": ["/img/1.jpg", value]})
    assert locs[0] == "http://cdn.example.com/img/1.jpg"
    with pytest.raises(LocationError, match=r"item 1: .* outside the base 'http://cdn.example.com/'"):
        locs[1]


def test_a_port_field_takes_a_number_only():
    locs = make_locations("http://h:{port}/data/{p}", columns={"port": [80, "80@evil.example", "x"], "p": ["a"] * 3})
    assert locs[0] == "http://h:80/data/a"
    for i in (1, 2):
        with pytest.raises(LocationError, match=rf"item {i}: .* no port number"):
            locs[i]


def test_a_row_the_template_cannot_format_is_refused_naming_the_item():
    locs = make_locations("s3://b/{id:06d}.bin", columns={"id": [5, "7"]})
    assert locs[0] == "s3://b/000005.bin"
    with pytest.raises(LocationError, match=r"item 1: the template's fields cannot take \{'id': '7'\}"):
        locs[1]


def test_location_errors_and_repr_show_credentials_redacted():
    locs = make_locations(["../x", "http://evil/y"], base="http://alice:hunter2@h/data?token=s3cret")
    for i in (0, 1):
        with pytest.raises(LocationError) as info:
            locs[i]
        assert "hunter2" not in str(info.value) and "alice" not in str(info.value)
    template = make_locations("http://alice:hunter2@h/data/{p}", columns={"p": ["../x"]})
    with pytest.raises(LocationError) as info:
        template[0]
    assert "hunter2" not in str(info.value) and "item 0" in str(info.value)
    assert "hunter2" not in repr(template) and "hunter2" not in repr(locs)


def test_redact_url_hides_credentials_and_secret_query_values():
    shown = redact_url("https://user:pw@h.example/p?X-Amz-Signature=abc&part=1&token=t0k")
    assert "pw" not in shown and "abc" not in shown and "t0k" not in shown and "user" not in shown
    assert "part=1" in shown and "h.example/p" in shown
    assert redact_url("/local/path") == "/local/path"
    assert redact_url("http://h/a/..%3b/b?x=1") == "http://h/a/..%3b/b?x=1"  # nothing to redact: unchanged
