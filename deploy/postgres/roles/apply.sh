#!/bin/sh
# The database step of the deployment's init (docker-compose.yml's db-roles, the Kubernetes
# Job cairn-init), after `cairn init --tables` made the tables as their owner: as that owner,
# the service roles (roles.sql), their passwords (passwords.sql, from POSTGRES_PASSWORD_<ROLE>
# of the environment) and each database's grants (ledger.sql, erp.sql). Every step is safe
# to run again.
#
#   POSTGRES_HOST   host:port of the server
#   POSTGRES_OWNER  the owner of the tables (default cairn), with CREATEROLE
#   PGPASSWORD      the owner's password (psql reads it from the environment)
set -eu
cd "$(dirname "$0")"
owner="${POSTGRES_OWNER:-cairn}"
psql -v ON_ERROR_STOP=1 -d "postgresql://$owner@$POSTGRES_HOST/ledger" -f roles.sql -f passwords.sql -f ledger.sql
psql -v ON_ERROR_STOP=1 -d "postgresql://$owner@$POSTGRES_HOST/erp" -f erp.sql
echo "the service roles exist, with their passwords and grants"
