"""Each package's public surface, pinned: ``__all__`` is sorted, every name in
it is defined in the package, and it is exactly the list below, so adding or
removing a public name is a decision made here, never an accident."""

from __future__ import annotations

import importlib
import inspect

import pytest

EXPECTED: dict[str, list[str]] = {
    "runtime": [
        "BLOB_CHUNK_SIZE",
        "DEFAULT_HTTP",
        "DEFAULT_HTTP_PORT",
        "DEFAULT_HUB_URL",
        "DEFAULT_LOG_LEVEL",
        "DEFAULT_MAIL_DOMAIN",
        "DEFAULT_MAX_BODY",
        "DEFAULT_NATS_PORT",
        "DEFAULT_NATS_URL",
        "DEFAULT_REDELIVER_AFTER",
        "DEFAULT_SUBJECT_PREFIX",
        "FORMAT_VERSION",
        "HUB_URL_ENV",
        "INLINE_BODY_LIMIT",
        "LOG_LEVEL_ENV",
        "LOOPBACK",
        "REDELIVER_AFTER_ENV",
        "SUPPORTED_FORMATS",
        "Ack",
        "AckResult",
        "Actor",
        "ActorError",
        "ActorRef",
        "ActorStopped",
        "ApprovalRequested",
        "AskTimeout",
        "Backoff",
        "BlobChunk",
        "BlobGet",
        "Broadcast",
        "Challenge",
        "ChildRunStarted",
        "Claim",
        "DeploymentStatus",
        "DispatchOutcome",
        "DispatchProcessed",
        "EnvelopeQuarantined",
        "Event",
        "EventsAck",
        "Fenced",
        "FailpointError",
        "Flag",
        "Frame",
        "FrameDecodeError",
        "FrameDecoder",
        "Hello",
        "HostPort",
        "HubBoot",
        "HubKey",
        "InvalidSources",
        "MailInbound",
        "MailSent",
        "MailboxFull",
        "MailrunError",
        "Message",
        "MintChild",
        "Minted",
        "NoResponders",
        "Ping",
        "Pong",
        "Reason",
        "RecordDecodeError",
        "Refused",
        "RequestTimeout",
        "RestartPolicy",
        "RestoreRecord",
        "RunCancelled",
        "RunCompleted",
        "RunEvents",
        "RunFailed",
        "RunSnapshot",
        "RunStarted",
        "RunStates",
        "RunStatus",
        "SidecarExit",
        "SignatureError",
        "StateGet",
        "Sources",
        "Subjects",
        "Subscription",
        "Supervisor",
        "Transport",
        "TransportClosed",
        "TransportError",
        "Wakeup",
        "Welcome",
        "accepts_trigger",
        "afailpoint",
        "anchor_is_live",
        "b64url",
        "backoff",
        "cancel_on_signals",
        "check_layout",
        "decode_restore_record",
        "encode",
        "failpoint",
        "generate_keypair",
        "hello_message",
        "holds_items",
        "is_id",
        "is_live",
        "is_terminal",
        "new_id",
        "open_nats",
        "parse_host_port",
        "public_key_of",
        "read_restore_record",
        "record_path",
        "sign",
        "unb64url",
        "unwrap_group",
        "unwrapping_groups",
        "verify",
        "write_atomic",
        "write_restore_record",
    ],
    "runtime.testing": [
        "CRASH_EXIT_CODE",
        "FAILPOINTS_ENV",
        "MemoryBus",
        "MemoryTransport",
        "configure_failpoints",
        "failpoint_spent",
    ],
    "hub": [
        "Accepted",
        "Acceptor",
        "ApprovalStatus",
        "DispatchStatus",
        "HubConfig",
        "HubError",
        "HubHandle",
        "MigrationError",
        "Rejected",
        "Store",
        "StoreUnavailable",
        "Trigger",
        "accept_triggers",
        "create_app",
        "create_deployment",
        "delete_deployment",
        "pending_migrations",
        "serve_hub",
    ],
    "hub.store": [
        "DEFAULT_BUSY_TIMEOUT",
        "DEFAULT_ENTRYPOINT",
        "LATEST",
        "QUARANTINE_SOURCE",
        "Accepted",
        "Acceptor",
        "ApprovalStatus",
        "Created",
        "DeploymentView",
        "DispatchStatus",
        "DispatchView",
        "Outcome",
        "Receipt",
        "RefusedByRun",
        "Rejected",
        "RunView",
        "Store",
        "Trigger",
        "accept_triggers",
        "body_digest",
        "count_by_status",
        "create_deployment",
        "delete_deployment",
        "get_deployment",
        "get_dispatch",
        "get_run",
        "list_deployments",
        "list_runs",
        "pending_migrations",
        "read_version",
        "resolve_deployment",
    ],
    "hub.wire": ["DispatchConfig", "HealthConfig", "Wire", "WireConfig", "run_wire"],
    "hub.api": ["ApiSettings", "HttpLimits", "HttpServer", "bind_socket", "create_app"],
    "hub.cli": ["hub_cmd", "main"],
    "hub.up": [
        "Backoff",
        "Child",
        "ChildSpec",
        "UpConfig",
        "find_nats_server",
        "free_port",
        "hub_url",
        "run_up",
    ],
    "sidecar": [
        "ApprovalDecision",
        "BlobError",
        "Context",
        "DeploymentGone",
        "DigestMismatch",
        "EntrypointError",
        "FencedOut",
        "HandlerTimeout",
        "HomeLocked",
        "HubRefused",
        "HubUnavailable",
        "Inbox",
        "InboxConflict",
        "InboxError",
        "InboxSchemaTooNew",
        "Item",
        "JoinTokenError",
        "Mail",
        "OwnerConflict",
        "RestoreRecordMissing",
        "RunAlreadyEnded",
        "RunStateUnreadable",
        "RunsConfig",
        "Sidecar",
        "SidecarError",
        "Signal",
        "StateNotSerializable",
        "WorkflowLoadError",
        "load_workflow",
    ],
}


def ruff_order(name: str) -> tuple[int, str]:
    """The order ruff (RUF022) keeps ``__all__`` in: CONSTANTS, Classes, the rest."""
    if name.isupper() and len(name) > 1:
        return (0, name)
    return (1, name) if name[:1].isupper() else (2, name)


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_all_is_sorted(package: str) -> None:
    names = importlib.import_module(package).__all__
    assert names == sorted(names, key=ruff_order)


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_every_exported_name_is_defined_in_the_package(package: str) -> None:
    module = importlib.import_module(package)
    star: dict[str, object] = {}
    exec(f"from {package} import *", star)
    for name in module.__all__:
        assert name in star, f"{package}.{name} is not importable"
        value = getattr(module, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            root = package.partition(".")[0]
            assert value.__module__.partition(".")[0] == root, f"{package}.{name} is borrowed"


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_the_public_surface_is_exactly_the_expected_one(package: str) -> None:
    names = set(importlib.import_module(package).__all__)
    expected = set(EXPECTED[package])
    assert names - expected == set(), "exported, but not expected: add it here if meant"
    assert expected - names == set(), "expected, but no longer exported"
