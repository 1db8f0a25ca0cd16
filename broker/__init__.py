"""tdbroker: the store-and-forward AMQP broker that attaches to the router mesh as a peer."""
