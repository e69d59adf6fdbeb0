"""Infrastructure: processes, sandbox, fork server, spare workers, pool, device locks, service, memory."""
