"""Hostile bodies at every HTTP decoder: each is a typed 4xx with the standard
error body (never a 500, never a traceback), and nothing is stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..harness import SOURCE, Api, api, assert_error

pytestmark = pytest.mark.anyio

JSON = {"content-type": "application/json"}
DEEP = 30_000  # within the approval route's 64 KiB; far past msgspec's depth limit
# Every route that decodes a body, a string field of it, and the reason its
# wrong shapes get.
DECODERS = [
    ("/mail", "to", "invalid_mail"),
    ("/workflows/deployments", "name", "invalid_deployment"),
    ("/approvals/apr_1", "decision", "invalid_request"),
]


async def stored_nothing(hub: Api) -> None:
    assert await hub.count("SELECT COUNT(*) FROM deployment") == 1  # the one "flow"
    assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 0


@pytest.mark.parametrize(("path", "field", "invalid"), DECODERS)
async def test_any_bytes_are_a_typed_4xx(
    tmp_path: Path, path: str, field: str, invalid: str
) -> None:
    async with api(tmp_path) as hub:
        await hub.deploy("flow")
        key = f'"{field}"'.encode()
        malformed: list[bytes] = [
            b'{"a":' + b"[" * DEEP + b"1" + b"]" * DEEP + b"}",  # an unknown field, deep
            b"{" + key + b': "a@b", "x": ' + b"{" * DEEP,
            b"{" + key + b': "\xff\xfe"}',  # not UTF-8
            b"{" + key + b': "\\ud800"}',  # a lone surrogate
            b"\x00\x01\x02",
            b"",
            b"{" + key + b': "a@b"',  # cut short
        ]
        assert len(malformed[0]) < 64 * 1024
        for body in malformed:
            r = await hub.client.post(path, content=body, headers=JSON)
            assert_error(r, 400, "malformed_json")
        wrong_shape: list[bytes] = [
            b"[" * DEEP,  # not an object: refused at the first byte
            b"[]",
            b"1e999999",
            b'{"to": 1e999999, "name": 1e999999, "decision": 1e999999}',
            b'{"to": ' + b"9" * 60_000 + b"}",
            b'{"to": ["a@b"], "name": {"x": 1}, "decision": null, "subject": 5}',
            b'{"name": "x", "files": {"flow.py": 1}, "to": "a@b", "body": [], "decision": 7}',
        ]
        for body in wrong_shape:
            r = await hub.client.post(path, content=body, headers=JSON)
            assert_error(r, 422, invalid)
        await stored_nothing(hub)


async def test_header_fields_with_a_line_break_are_refused(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        await hub.deploy("flow")
        to = "flow@mailrun.local"
        for field, value in [
            ("from", "a@b.c\r\nBcc: victim@x.org"),
            ("from", "a@b.c\n"),
            ("subject", "hi\r\nX-Injected: 1"),
            ("subject", "hi\nthere"),
            ("subject", "hi\rthere"),
            ("message_id", "<m1@x>\r\nX: y"),
            ("message_id", "m\x00"),
            ("to", f"{to}\nBcc: victim@x.org"),
            ("to", f"{to}\r\n"),
        ]:
            mail: dict[str, Any] = {"to": to, "subject": "s", field: value}
            assert_error(await hub.client.post("/mail", json=mail), 422, "invalid_mail")

        for spec, reason in [
            ({"name": "flow2\n", "source": SOURCE}, "invalid_name"),
            ({"name": "x\r\ny", "source": SOURCE}, "invalid_name"),
            ({"name": "ok", "source": SOURCE, "entrypoint": "flow:main\n"}, "invalid_deployment"),
            ({"name": "ok", "source": SOURCE, "entrypoint": "flow\n:main"}, "invalid_deployment"),
        ]:
            r = await hub.client.post("/workflows/deployments", json=spec)
            assert_error(r, 422, reason)
        r = await hub.client.post("/approvals/apr_1", json={"decision": "yes\r\nno"})
        assert_error(r, 422, "invalid_request")
        await stored_nothing(hub)


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        ({"x" * 300 + ".py": SOURCE, "flow.py": SOURCE}, "longer than 255 bytes"),
        ({"flow.py": SOURCE, "flow.py/x.py": SOURCE}, "'flow.py' is both a file and a directory"),
        ({"flow.py": SOURCE, "pkg/a.py": "", "pkg": ""}, "'pkg' is both a file and a directory"),
        ({"flow.py": SOURCE, "../x.py": ""}, "must be relative"),
        ({"flow.py": SOURCE, "/etc/x.py": ""}, "must be relative"),
        ({"flow.py": SOURCE, "a//b.py": ""}, "empty components"),
        ({"flow.py": SOURCE, "a/./b.py": ""}, "must be relative"),
        ({"flow.py": SOURCE, "dir/": ""}, "empty components"),
        ({"flow.py": SOURCE, "": ""}, "must be relative"),
        ({"flow.py": SOURCE, "a\\b.py": ""}, "control character or a backslash"),
        ({"flow.py": SOURCE, "a\nb.py": ""}, "control character or a backslash"),
        ({"flow.py": SOURCE, "nul\x00.py": ""}, "control character or a backslash"),
        ({"flow.py": SOURCE, "/".join(["d" * 200] * 6) + ".py": ""}, "longer than 1024 bytes"),
        ({"flow.py": SOURCE, "\u00e9" * 128 + ".py": ""}, "longer than 255 bytes"),
        ({f"m{i}.py": "" for i in range(1001)} | {"flow.py": SOURCE}, "more than 1000"),
        ({}, "no file"),
    ],
)
async def test_a_layout_no_sidecar_can_write_is_refused(
    tmp_path: Path, files: dict[str, str], problem: str
) -> None:
    async with api(tmp_path) as hub:
        r = await hub.client.post("/workflows/deployments", json={"name": "x", "files": files})
        assert_error(r, 422, "invalid_deployment")
        assert problem in r.json()["detail"]
        assert await hub.count("SELECT COUNT(*) FROM deployment") == 0


async def test_the_entrypoint_module_is_checked_like_any_file(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        long_module = "m" * 300
        r = await hub.client.post(
            "/workflows/deployments",
            json={"name": "x", "source": SOURCE, "entrypoint": f"{long_module}:main"},
        )
        assert_error(r, 422, "invalid_deployment")
        r = await hub.client.post(
            "/workflows/deployments",
            json={"name": "x", "source": SOURCE, "entrypoint": "a." * 200 + "m:main"},
        )
        assert_error(r, 422, "invalid_deployment")
        dep = await hub.deploy("y", source=SOURCE, entrypoint="pkg.sub.flow:main")
        assert dep["entrypoint"] == "pkg.sub.flow:main"


async def test_query_parameters_are_decoded_as_carefully(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        # "²" passes str.isdigit and fails int(); so do 4301 digits and more.
        for limit in ("\u00b2", "1\u00b2", "-1", "1e3", " 1", "9" * 5000):
            r = await hub.client.get("/runs", params={"limit": limit})
            assert_error(r, 422, "invalid_request")


async def test_a_bug_is_a_json_500_without_a_traceback(tmp_path: Path) -> None:
    def broken() -> dict[str, Any]:
        raise RuntimeError("secret internals /srv/hub.db")

    async with api(tmp_path, health_extra=broken) as hub:
        r = await hub.client.get("/healthz")
        assert_error(r, 500, "internal_error")
        assert "secret" not in r.text and "Traceback" not in r.text
        assert (await hub.client.get("/workflows/deployments")).status_code == 200
