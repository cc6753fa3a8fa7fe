"""open_store(url): each accepted form opens the right store; everything else is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from stores import (
    InvalidStoreURL,
    PostgresStore,
    SQLiteStore,
    StoreError,
    TetherError,
    open_store,
)
from stores.testing import make_row

pytestmark = pytest.mark.anyio


def test_sqlite_relative_and_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = open_store("sqlite:///data/run.db")
    assert isinstance(relative, SQLiteStore) and relative.path == "data/run.db"
    absolute = open_store(f"sqlite:///{tmp_path}/abs.db")  # sqlite:////tmp/... : four slashes
    assert isinstance(absolute, SQLiteStore) and absolute.path == f"{tmp_path}/abs.db"
    assert open_store("SQLITE:////x/y.db").path == "/x/y.db"  # type: ignore[union-attr]
    assert not (tmp_path / "data").exists()  # constructed, not set up: nothing opened yet


async def test_the_store_is_returned_not_set_up_and_works_once_set_up(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/t.db", synchronous="NORMAL")
    assert not (tmp_path / "t.db").exists()
    async with store:
        await store.append(make_row("r", 0))
        assert [row.seq for row in await store.history("r")] == [0]
    assert (tmp_path / "t.db").exists()


@pytest.mark.parametrize(
    ("url", "names"),
    [
        ("sqlite://host/x.db", "not a host"),
        ("sqlite:///x.db?synchronous=OFF", "synchronous"),
        ("sqlite:///", "names no file"),
        ("sqlite:///dir/", "names no file"),
        ("mysql://u@h/db", "'mysql'"),
        ("redis://localhost", "'redis'"),
        ("tether.db", "no scheme"),
        ("", "non-empty"),
        ("postgresql://u@h:5432/db?application_name=x", "'application_name'"),
        ("host=h connect_timeout=3", "'connect_timeout'"),
        ("host=h dbname", "after 'dbname'"),
        ("host='h", "no closing quote"),
        ("host=h port=notaport dbname=x", "port 'notaport' is not a port number"),
        ("postgresql://u@h/db?port=notaport", "port 'notaport' is not a port number"),
        ("host=h port=70000", "port '70000' is not a port number"),
        ("host=a,b port=5432,x", "port '5432,x' is not a port number"),
        ("sqlite:///a\x00b.db", "NUL byte"),
        ("postgresql://u@h/d\x00b", "NUL byte"),
        ("postgresql://u@h/d%00b", "NUL byte"),
        ("postgresql://u@h/db?sslmode=a%00", "NUL byte"),
        ("host=h dbname=a\x00b", "NUL byte"),
        ("postgresql://u@h/db?schema=a&schema=b", "schema= is given twice"),
        ("host=h schema=a dbname=x schema=b", "schema= is given twice"),
    ],
)
def test_bad_urls_are_refused_by_name(url: str, names: str) -> None:
    with pytest.raises(InvalidStoreURL, match=names) as info:
        open_store(url)
    assert isinstance(info.value, StoreError) and isinstance(info.value, TetherError)
    assert isinstance(info.value, ValueError)


def test_errors_never_quote_a_password() -> None:
    for url in (
        "postgresql://u:s3cret@h:notaport/db",
        "host=h s3cret",
        "password=s3cret bogus=1",
        "postgresql://u:s3cret\x00@h/db",
        "password=s3cret\x00 host=h",
    ):
        with pytest.raises(InvalidStoreURL) as info:
            open_store(url)
        assert "s3cret" not in str(info.value), str(info.value)


def test_several_hosts_take_a_port_each_and_an_empty_port_is_the_default() -> None:
    store = open_store("host=a,b port=5432,6432 dbname=x")
    assert isinstance(store, PostgresStore)
    assert store.dsn == "postgresql://?host=a%2Cb&port=5432%2C6432&dbname=x"
    assert open_store("host=a port='' dbname=x").dsn == "postgresql://?host=a&port=&dbname=x"  # type: ignore[union-attr]


def test_postgres_url_forms() -> None:
    store = open_store("postgresql://alice@db.example:6432/prod?schema=runs&sslmode=disable")
    assert isinstance(store, PostgresStore)
    assert store.schema == "runs"
    assert store.dsn == "postgresql://alice@db.example:6432/prod?sslmode=disable"
    other = open_store("postgres://alice@db.example/prod")
    assert isinstance(other, PostgresStore) and other.schema == "tether"
    assert other.dsn == "postgres://alice@db.example/prod"
    with pytest.raises(InvalidStoreURL, match="twice"):
        open_store("postgresql://h/db?schema=a", schema="b")


def test_a_libpq_keyword_string_is_read_exactly() -> None:
    store = open_store("host=127.0.0.1 port = 5432 dbname=test user=postgres password='a b\\'c' schema=s1")
    assert isinstance(store, PostgresStore) and store.schema == "s1"
    assert store.dsn == ("postgresql://?host=127.0.0.1&port=5432&dbname=test&user=postgres&password=a+b%27c")


@pytest.mark.postgres
@pytest.mark.parametrize("form", ["uri", "keywords"])
async def test_both_postgres_forms_reach_the_database(pg_schema: object, form: str) -> None:
    dsn, schema = pg_schema.dsn, pg_schema.schema  # type: ignore[attr-defined]
    if form == "uri":
        url = f"{dsn}?schema={schema}"
    else:
        from urllib.parse import urlsplit

        parts = urlsplit(dsn)
        url = (
            f"host={parts.hostname} port={parts.port or 5432} dbname={parts.path.lstrip('/')} "
            f"user={parts.username} schema={schema}"
        )
    store = open_store(url)
    assert isinstance(store, PostgresStore)
    async with store:
        await store.append(make_row("r", 0))
        assert [row.seq for row in await store.history("r")] == [0]
