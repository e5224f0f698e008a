-- The database roles of Cairn's services, one per service that uses a database, as the
-- NATS users of nats/accounts.conf are one per service. Run once per PostgreSQL server by
-- a role with CREATEROLE (the superuser): psql -f roles.sql; apply.sh runs it with
-- passwords.sql and the grants, as deploy/'s init step does. Give each a password of your
-- own (passwords.sql, or psql: \password post_ledger) and put it in that service's DSN only:
--
--   post-ledger   CAIRN_LEDGER_DSN=postgres://post_ledger:PASSWORD@HOST/ledger
--   update-stock  CAIRN_ERP_DSN=postgres://update_stock:PASSWORD@HOST/erp
--   match         CAIRN_ERP_DSN=postgres://match:PASSWORD@HOST/erp
--   compare       CAIRN_ERP_DSN=postgres://compare:PASSWORD@HOST/erp
--   compensator   both, as compensator
--   reader        cairn diff, cairn status (SELECT only)
--   ledger-api    CAIRN_LEDGER_DSN=postgres://ledger_api:PASSWORD@HOST/ledger
--
-- fetch, extract, debit-notes, report, outbox-sender and the supervisor open no database
-- and need no role. The tables belong to the role that created them (cairn init --tables,
-- or cairn gen, as the owner); then ledger.sql and erp.sql grant each role its tables.
DO $$
DECLARE
  r text;
BEGIN
  FOREACH r IN ARRAY ARRAY['post_ledger', 'update_stock', 'match', 'compare', 'compensator', 'reader', 'ledger_api'] LOOP
    BEGIN
      EXECUTE format('CREATE ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT', r);
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
      NULL; -- there already
    END;
  END LOOP;
END
$$;
