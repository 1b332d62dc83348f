"""v2 rule profiles: which snapshot of the upstream rules grades v2 traffic.

v1 rules are the same in every profile (catalogue, Appendix F).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    id_space: str  # "global": one ID space for all kinds; "per-kind": one per kind (v2)
    interleave_allowed: bool  # v2: chunks of different messages may interleave
    response_message_id: bool  # v2: session/prompt response must carry the user messageId
    schema_subdir: str  # where this profile's official v2 schema sits under --schema-dir
    spec_source: str = ""  # the published text its rules were read from, as reports name it
    schema_versions: str = ""  # the schema versions of that source
    # The v2 draft rules read after the mirror (catalogue Appendix I): MID-V2-11 (a replayed
    # user message keeps its prompt-response ID) and MID-V2-12 (chunk replay starts from an
    # upsert of the same ID).
    replay_rules: bool = False
    # SDK 2.4.0's inter-session messages (session_message, session_message_chunk) are a
    # message kind of their own ("session"); without them they are unknown update kinds.
    session_messages: bool = False
    draft_revision: str = ""  # the v2 draft text the profile's newest rules follow
    # Catalogue Appendix K (profile acp-schema-1.21): the agent ends a requested replay with
    # a replay_complete update, which closes the replay window (MID-V2-13, MID-V2-14);
    # without it replay_complete is an unknown update kind, kept and never a failure.
    replay_marker: bool = False
    # ... and session/prompt carries an idempotencyKey that the driver sends (MID-V2-15).
    idempotency_keys: bool = False


PROFILES: dict[str, Profile] = {
    "acp-sdk-2.4.0": Profile(
        "acp-sdk-2.4.0",
        "newest published rules (TypeScript SDK 2.4.0 schemas): per-kind ID spaces, "
        "interleaving allowed, the prompt response carries the user messageId",
        id_space="per-kind", interleave_allowed=True, response_message_id=True,
        schema_subdir="upstream-sdk-2.4.0/v2",
        spec_source="npm @agentclientprotocol/sdk 2.4.0 (the schemas it bundles)",
        schema_versions="v1 1.25.0 or later, v2 draft",
        replay_rules=True, session_messages=True,
        draft_revision="v2 draft session-setup.mdx at upstream 3ab2fb4e (read 2026-12-01); "
                       "official TCK v2 suite pinned to spec 9af0e9f7, schema 2.0.0-alpha.5"),
    "acp-repo-2026-08-22": Profile(
        "acp-repo-2026-08-22",
        "repository snapshot of 2026-08-22 (v1 1.21.0, v2 2.0.0-alpha.3): one ID space, "
        "a changed ID means a new message, the prompt response is {}",
        id_space="global", interleave_allowed=False, response_message_id=False,
        schema_subdir="v2",
        spec_source="github.com/agentclientprotocol/agent-client-protocol at "
                    "b7f0005493b98de32fabee3e9540e2b64da68535 (2026-08-22)",
        schema_versions="v1 1.21.0, v2 2.0.0-alpha.3"),
    "acp-schema-1.21": Profile(
        "acp-schema-1.21",
        "Rust schema crate 1.21 (v2 Preview): everything acp-sdk-2.4.0 grades, plus the "
        "replay_complete marker and session/prompt idempotency keys",
        id_space="per-kind", interleave_allowed=True, response_message_id=True,
        # no JSON schema of the 1.21 crate is published beside the SDK's; the SDK 2.4.0 v2
        # schema accepts both additions (open PromptRequest, custom-or-future SessionUpdate)
        schema_subdir="upstream-sdk-2.4.0/v2",
        spec_source="crates.io agent-client-protocol-schema 1.21.x (v2 module) with "
                    "agent-client-protocol 5.5.x, which calls v2 \"Preview\"; RFDs "
                    "rfds/v2/session-replay-complete and rfds/v2/idempotency-keys",
        schema_versions="v1 1.25.0 or later, v2 Preview",
        replay_rules=True, session_messages=True, replay_marker=True, idempotency_keys=True,
        draft_revision="catalogue Appendix K, read 2026-12-03: agent-client-protocol-schema "
                       "1.18 to 1.21, agent-client-protocol 5.5, RFD pages under rfds/v2/"),
}
DEFAULT_PROFILE = "acp-sdk-2.4.0"


def get(name: str) -> Profile:
    profile = PROFILES.get(name) if isinstance(name, str) else None  # (a file may hold any)
    if profile is None:
        raise KeyError(f"unknown profile {name!r} (known: {', '.join(PROFILES)})")
    return profile
