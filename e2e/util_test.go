package e2e

import (
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func natsMsg(m jetstream.Msg) *nats.Msg {
	return &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
