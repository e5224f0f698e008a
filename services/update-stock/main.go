// Command update-stock runs Cairn's update-stock service against the NATS server named by CAIRN_NATS_URL.
package main

import "github.com/cairnhq/cairn/internal/service"

func main() { service.Main("update-stock") }
