"""One package per producer whose webhooks the inbox accepts (docs/subsystems/inbox.md,
"Integrations"). Each holds what is specific to its producer, and nothing else does: the
envelope its bodies carry, the handler that applies its events, a sample event for
``send_test_webhook``, and its payload fixtures. ``WEBHOOK_INTEGRATIONS`` in the settings
registers each one under the name a source's ``handler`` uses."""
