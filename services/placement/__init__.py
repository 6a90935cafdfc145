"""placement: pending pods + node inventory -> decisions, reservations, binds; plus the outbox relay."""
