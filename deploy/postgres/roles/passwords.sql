-- Gives each role of roles.sql its password, taken from psql's environment, never from a
-- file: POSTGRES_PASSWORD_<ROLE> (deploy/.env for compose, the cairn-passwords Secret on
-- Kubernetes). Run after roles.sql by psql 15 or later (\getenv), as apply.sh does: a
-- variable that is not set leaves its :'name' unexpanded, a syntax error that stops psql
-- (ON_ERROR_STOP) before any later grant.
\set ON_ERROR_STOP on
\getenv post_ledger POSTGRES_PASSWORD_POST_LEDGER
\getenv update_stock POSTGRES_PASSWORD_UPDATE_STOCK
\getenv match POSTGRES_PASSWORD_MATCH
\getenv compare POSTGRES_PASSWORD_COMPARE
\getenv compensator POSTGRES_PASSWORD_COMPENSATOR
\getenv reader POSTGRES_PASSWORD_READER
\getenv ledger_api POSTGRES_PASSWORD_LEDGER_API
ALTER ROLE post_ledger PASSWORD :'post_ledger';
ALTER ROLE update_stock PASSWORD :'update_stock';
ALTER ROLE match PASSWORD :'match';
ALTER ROLE compare PASSWORD :'compare';
ALTER ROLE compensator PASSWORD :'compensator';
ALTER ROLE reader PASSWORD :'reader';
ALTER ROLE ledger_api PASSWORD :'ledger_api';
