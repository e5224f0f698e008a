-- Run in the ledger database (psql -d ledger -f ledger.sql) as the owner of its tables,
-- after they exist (cairn init --tables) and after roles.sql. Only post-ledger, the
-- compensator and ledger-api (the ledger over HTTP) write the ledger: they insert entries
-- (a write never changes or deletes one) and hold the fences; ledger-api also keeps its
-- idempotency keys (claimed, answered, dropped when released or expired) and the highest
-- token it has seen per run; reader reads.
DO $$
BEGIN
  EXECUTE format('REVOKE ALL ON DATABASE %I FROM PUBLIC', current_database());
  EXECUTE format('GRANT CONNECT ON DATABASE %I TO post_ledger, compensator, ledger_api, reader', current_database());
END
$$;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO post_ledger, compensator, ledger_api, reader;
GRANT SELECT, INSERT ON ledger_entries, shadow_ledger_entries TO post_ledger, compensator;
GRANT SELECT, INSERT, UPDATE ON fences, shadow_fences TO post_ledger, compensator;
GRANT SELECT ON ledger_entries, shadow_ledger_entries, fences, shadow_fences TO reader;
GRANT SELECT, INSERT ON ledger_entries, shadow_ledger_entries TO ledger_api;
GRANT SELECT, INSERT, UPDATE ON fences, shadow_fences TO ledger_api;
GRANT SELECT, INSERT, UPDATE, DELETE ON http_idempotency_keys TO ledger_api;
GRANT SELECT, INSERT, UPDATE ON http_fence_tokens TO ledger_api;
