"""The router's AMQP management agent (``$management``) and its entity types."""

from router.management.agent import ManagementAgent

__all__ = ["ManagementAgent"]
