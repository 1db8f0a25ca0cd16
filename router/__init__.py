"""trio-dispatch: an AMQP 1.0 message router in the style of Apache Qpid Dispatch Router."""
