"""Property-based: corrupted copies of a real export never crash with anything but a clear input error."""
import sqlite3
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nsysanalyze
from conftest import shared_trace
from nsysanalyze.errors import InputError

PAGE = 4096


@pytest.fixture(scope="module")
def source():
    return shared_trace("h200/resnet18-baseline-nvtx.sqlite")


corruption = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0.0, 1.0), st.binary(max_size=0)),
    st.tuples(st.just("page"), st.floats(0.0, 1.0), st.binary(min_size=1, max_size=PAGE)),
    st.tuples(st.just("bytes"), st.floats(0.0, 1.0), st.binary(min_size=1, max_size=64)),
)


def corrupt(data: bytes, how) -> bytes:
    kind, where, payload = how
    if kind == "truncate":
        return data[: int(where * len(data))]
    start = int(where * (len(data) - 1))
    if kind == "page":
        start -= start % PAGE
    return data[:start] + payload + data[start + len(payload):]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(corruption, min_size=1, max_size=3))
def test_corrupted_exports_give_input_errors(source, tmp_path, hows):
    data = source.read_bytes()
    for how in hows:
        data = corrupt(data, how)
    path = tmp_path / "corrupt.sqlite"
    path.write_bytes(data)
    began = time.monotonic()
    try:
        with nsysanalyze.open(path) as a:
            a.to_dict()
    except (InputError, sqlite3.DatabaseError):
        pass
    assert time.monotonic() - began < 60
