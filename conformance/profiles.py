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


PROFILES: dict[str, Profile] = {
    "acp-sdk-2.4.0": Profile(
        "acp-sdk-2.4.0",
        "newest published rules (TypeScript SDK 2.4.0 schemas): per-kind ID spaces, "
        "interleaving allowed, the prompt response carries the user messageId",
        id_space="per-kind", interleave_allowed=True, response_message_id=True,
        schema_subdir="upstream-sdk-2.4.0/v2"),
    "acp-repo-2026-08-22": Profile(
        "acp-repo-2026-08-22",
        "repository snapshot of 2026-08-22 (v1 1.21.0, v2 2.0.0-alpha.3): one ID space, "
        "a changed ID means a new message, the prompt response is {}",
        id_space="global", interleave_allowed=False, response_message_id=False,
        schema_subdir="v2"),
}
DEFAULT_PROFILE = "acp-sdk-2.4.0"


def get(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown profile {name!r} (known: {', '.join(PROFILES)})") from None
