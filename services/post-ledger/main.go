// Command post-ledger runs Cairn's post-ledger service against the NATS server named by CAIRN_NATS_URL.
package main

import "github.com/cairnhq/cairn/internal/service"

func main() { service.Main("post-ledger") }
