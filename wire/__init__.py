"""Wire-level pieces of the router: AMQP 1.0 byte codec and the raw proton engine layer."""
