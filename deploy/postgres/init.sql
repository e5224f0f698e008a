-- Run once by the postgres image on an empty volume (docker-compose.yml): the ERP database
-- beside the ledger (POSTGRES_DB). Cairn's services create their tables at start.
CREATE DATABASE erp OWNER cairn;
