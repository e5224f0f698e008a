// Command compensator runs Cairn's compensator service against the NATS server named by CAIRN_NATS_URL.
package main

import "github.com/cairnhq/cairn/internal/service"

func main() { service.Main("compensator") }
