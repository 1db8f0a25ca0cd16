"""What every management entity type provides to the agent."""

from __future__ import annotations

from typing import Any

from wire.management import bad_request
from router.schema import SCHEMA_PREFIX

TYPE_PREFIX = SCHEMA_PREFIX
CONFIGURATION = TYPE_PREFIX + "configurationEntity"
OPERATIONAL = TYPE_PREFIX + "operationalEntity"
ENTITY = TYPE_PREFIX + "entity"


class EntityAdapter:
    """One entity type: its attribute names (Dispatch 1.19 spelling, in schema order), the operations
    it allows, and its rows read from the live router. Subclasses override ``rows`` and, where the
    type allows them, ``create``/``update``/``delete``."""

    short: str = ""                     # e.g. "router.link"
    attributes: tuple[str, ...] = ()    # every row carries these keys (None where not applicable)
    operations: tuple[str, ...] = ("READ",)
    configuration: bool = False
    aliases: tuple[str, ...] = ()
    description: str = ""
    #: attribute -> AMQP management type name for GET-SCHEMA (default "string")
    types: dict[str, str] = {}
    #: attribute -> default value GET-SCHEMA shows (qdstat --vhostgroups reads them)
    defaults: dict[str, object] = {}

    def __init__(self, agent):
        self.agent = agent

    @property
    def type(self) -> str:
        return TYPE_PREFIX + self.short

    @property
    def router(self):
        return self.agent.router

    @property
    def control(self):
        """The router's management façade (router/control.py): every change goes through it."""
        return self.agent.router.control

    def base_types(self) -> list[str]:
        return [CONFIGURATION if self.configuration else OPERATIONAL, ENTITY]

    def attribute_type(self, name: str) -> str:
        return self.types.get(name, "string")

    def attribute_schema(self, name: str) -> dict:
        """One attribute of GET-SCHEMA's ``attributes`` map: its type, and its default where it has one."""
        out = {"type": self.attribute_type(name)}
        if name in self.defaults:
            out["default"] = self.defaults[name]
        return out

    def row(self, name: Any, identity: Any, values: dict) -> dict:
        """A complete row: every attribute present, base attributes filled in."""
        out = {a: None for a in self.attributes}
        out.update(values)
        out["name"] = name
        out["identity"] = identity
        out["type"] = self.type
        return out

    def rows(self) -> list[dict]:
        return []

    def untyped_rows(self) -> list[dict]:
        """The rows a QUERY without an entity type lists (the same unless a type is named differently
        there, as Dispatch's router is)."""
        return self.rows()

    def create(self, attrs: dict) -> dict:
        raise bad_request(f"operation CREATE is not allowed on type {self.type}")

    def update(self, row: dict, attrs: dict) -> dict:
        raise bad_request(f"operation UPDATE is not allowed on type {self.type}")

    def delete(self, row: dict) -> None:
        raise bad_request(f"operation DELETE is not allowed on type {self.type}")


def require_str(attrs: dict, key: str, choices: tuple[str, ...] | None = None) -> str | None:
    """attrs[key] as a string (or None), 400 naming the attribute when it is anything else."""
    value = attrs.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise bad_request(f"attribute '{key}' must be a string, not {type(value).__name__}")
    if choices is not None and value not in choices:
        raise bad_request(f"attribute '{key}' must be one of {', '.join(choices)}; got '{value}'")
    return value
