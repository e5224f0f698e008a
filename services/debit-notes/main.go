// Command debit-notes runs Cairn's debit-notes service against the NATS server named by CAIRN_NATS_URL.
package main

import "github.com/cairnhq/cairn/internal/service"

func main() { service.Main("debit-notes") }
