// Command ledger-api serves the ledger over HTTP (internal/ledgerapi) on CAIRN_LEDGER_API_ADDR,
// over the database of CAIRN_LEDGER_DSN.
package main

import "github.com/cairnhq/cairn/internal/service"

func main() { service.LedgerAPIMain() }
