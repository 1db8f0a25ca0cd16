"""The router's :class:`router.policy.Policy` from its configuration: the ``policy`` section, ``vhost``
sections, and the JSON vhost files of ``policyDir``.

A policyDir file (``*.json``, read in name order at start-up, as Dispatch's ``policy_local.py`` reads them) is
a JSON list of ``["vhost", {attributes}]`` pairs, the attributes as in a ``vhost`` section with ``groups`` a
JSON map::

    [
        ["vhost", {"hostname": "example.com", "maxConnections": 50, "allowUnknownUser": true,
                   "groups": {"$default": {"remoteHosts": "*", "sources": "public.*", "targets": "public.*"}}}]
    ]

Every problem is an error naming the file and the line of the vhost it is in, as for qdrouterd.conf.
"""

from __future__ import annotations

import json
import os
import re

from router.config import ConfigError, RouterConfig, validate_entity
from router.policy import DEFAULT_VHOST, Policy, PolicyError, vhost_from_attrs

#: A policyDir file larger than this is refused (a vhost file is a few kB; this is not a data store).
MAX_POLICY_FILE_BYTES = 16 * 1024 * 1024


def _line_of(text: str, hostname: str) -> int:
    """The line of ``"hostname": "<hostname>"`` in *text* (1 when it cannot be found)."""
    m = re.search(r'"(?:hostname|id)"\s*:\s*' + re.escape(json.dumps(hostname)), text)
    return text.count("\n", 0, m.start()) + 1 if m else 1


def read_policy_file(path: str) -> list[tuple[dict, int]]:
    """The vhost attribute maps of one policyDir file, each with its line; ConfigError for anything else."""
    try:
        if os.path.getsize(path) > MAX_POLICY_FILE_BYTES:
            raise ConfigError(path, 0, f"policy file is larger than {MAX_POLICY_FILE_BYTES} bytes")
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError(path, 0, f"cannot read policy file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(path, 0, f"policy file is not UTF-8: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(path, getattr(exc, "lineno", 0), f"policy file is not valid JSON: {exc}") from None
    except RecursionError:
        raise ConfigError(path, 1, "policy file is nested too deeply") from None
    if not isinstance(data, list):
        raise ConfigError(path, 1, 'policy file must be a JSON list of ["vhost", {...}] entries')
    out = []
    for n, entry in enumerate(data):
        if not (isinstance(entry, list) and len(entry) == 2 and entry[0] == "vhost" and isinstance(entry[1], dict)):
            raise ConfigError(path, 1, f'entry {n} is not ["vhost", {{attributes}}]')
        attrs = entry[1]
        host = attrs.get("hostname", attrs.get("id"))
        out.append((attrs, _line_of(text, host) if isinstance(host, str) else 1))
    return out


def policy_from_config(cfg: RouterConfig) -> Policy:
    """The Policy the configuration describes (disabled when vhost policy is not enabled)."""
    p = cfg.policies[0] if cfg.policies else None
    policy = Policy(
        enabled=bool(p and p["enableVhostPolicy"]),
        name_patterns=bool(p and p["enableVhostNamePatterns"]),
        default_vhost=p["defaultVhost"] if p is not None and p["defaultVhost"] is not None else DEFAULT_VHOST,
        max_message_size=int(p["maxMessageSize"] or 0) if p is not None else 0)
    for e in cfg.vhosts:
        try:
            policy.add_vhost(vhost_from_attrs(e.attrs))
        except PolicyError as exc:
            raise ConfigError(e.path, e.attr_lines.get("hostname", e.line), f"vhost: {exc}") from None
    directory = p["policyDir"] if p is not None else None
    if directory:
        if not os.path.isdir(directory):
            raise ConfigError(p.path, p.attr_lines.get("policyDir", p.line),
                              f"policy: policyDir {directory!r} is not a directory")
        for name in sorted(os.listdir(directory)):
            if not name.endswith(".json"):
                continue
            path = os.path.join(directory, name)
            for attrs, line in read_policy_file(path):
                try:
                    entity = validate_entity("vhost", attrs, path, line)
                    policy.add_vhost(vhost_from_attrs(entity.attrs))
                except PolicyError as exc:
                    raise ConfigError(path, line, f"vhost: {exc}") from None
    return policy



def check_listener_vhosts(cfg: RouterConfig, policy: Policy) -> None:
    """A listener's ``policyVhost`` must name a vhost, and vhost policy must be on (else it is ignored)."""
    for e in cfg.listeners:
        name = e.get("policyVhost")
        if not name:
            continue
        line = e.attr_lines.get("policyVhost", e.line)
        if not policy.enabled:
            raise ConfigError(e.path, line, "listener: policyVhost would not be enforced without "
                                            "'policy { enableVhostPolicy: true }'")
        if name not in policy.vhosts:
            raise ConfigError(e.path, line, f"listener: policyVhost {name!r} names no vhost")
