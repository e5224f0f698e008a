package assets

import (
	"fmt"
	"slices"
)

// A pipeline's name becomes a token of the NATS account's names: the second token of its
// subjects (cairn.<name>.>), a word of its buckets (cairn-<name>-runs), its reply prefix
// (_INBOX.cairn.<name>), the name of its NATS user (`cairn permissions`) and the first word
// of its services' users (<name>-<service>). Each of those is already taken by something
// else for some names, and a pipeline so named would receive or answer what is not its own (a
// pipeline called cli took the operator's CLI's replies). reservedNames is the one list of
// them: SpaceOf refuses each, so app.Init, every registration read back (Registration.Space,
// cairn init's check of the registered pipelines) and cairn dev do. Tests beside each owner
// (internal/service, cmd/cairn) check that every service name and connection name they use
// is here.
var reservedNames = []struct{ name, why string }{
	// The default space's own words: its subjects cairn.<word>.> and buckets cairn-<word>.
	{"runs", "the default space's run commands (cairn.runs.>) and bucket cairn-runs"},
	{"step", "the default space's step events (cairn.step.>)"},
	{"saga", "the default space's saga (cairn.saga.>)"},
	{"outbox", "the default space's outbox (cairn.outbox.>, cairn-outbox-sent) and the first word of the outbox-sender's user"},
	{"audit", "the default space's timeline (cairn.audit.>)"},
	{"rejected", "the default space's refusals (cairn.rejected)"},
	{"memo", "the default space's bucket cairn-memo"},
	{"handovers", "the default space's bucket cairn-handovers"},
	{"natural", "the default space's bucket cairn-natural-keys"},
	{"limits", "the default space's bucket cairn-limits"},
	{"artifacts", "the default space's object store cairn-artifacts"},
	{"keys", "the default space's bucket cairn-keys"},
	{"pipelines", "the registry of pipelines, cairn-pipelines"},
	{"epoch", "the runs bucket's epoch, cairn.epoch"},
	{"owner", "the night's owner inboxes (cairn.owner.<service>.<nuid>)"},
	// The reference night's services: each connects with its replies under
	// _INBOX.cairn.<service> as the NATS user <service> (deploy/nats/accounts.conf); a
	// hyphenated one's first word would make a hosted service's user <name>-<service> its own.
	{"fetch", "a service of the night (replies under _INBOX.cairn.fetch, NATS user fetch)"},
	{"extract", "a service of the night (replies under _INBOX.cairn.extract, NATS user extract)"},
	{"match", "a service of the night (replies under _INBOX.cairn.match, NATS user match)"},
	{"compare", "a service of the night (replies under _INBOX.cairn.compare, NATS user compare)"},
	{"report", "a service of the night (replies under _INBOX.cairn.report, NATS user report)"},
	{"supervisor", "a service of every pipeline (the night's replies under _INBOX.cairn.supervisor, NATS user supervisor)"},
	{"compensator", "a service of every pipeline (the night's replies under _INBOX.cairn.compensator, NATS user compensator)"},
	{"post", "the first word of a hyphenated service of the night (post-…): a hosted pipeline post's service would be that service's NATS user"},
	{"update", "the first word of a hyphenated service of the night (update-…): a hosted pipeline update's service would be that service's NATS user"},
	{"debit", "the first word of the night's service debit-notes (a hosted pipeline debit's service notes would be the NATS user debit-notes)"},
	// The operator's tools: cairn's commands connect with their replies under
	// _INBOX.cairn.<connection>.
	{"cli", "the reply prefix of the operator's CLI (_INBOX.cairn.cli)"},
	{"init", "the reply prefix of cairn init (_INBOX.cairn.init)"},
	{"dev", "the reply prefix of cairn dev (_INBOX.cairn.dev)"},
	{"faultmap", "the reply prefix of cairn faultmap (_INBOX.cairn.faultmap)"},
	// Users and names of the deployment.
	{"admin", "the NATS user that owns the assets (deploy/nats/accounts.conf)"},
	{"sys", "the NATS system account's user (deploy/nats/accounts.conf)"},
	{"cairn", "the framework's own prefix (cairn.>, cairn-*, _INBOX.cairn)"},
	{"default", "the reference night's space, the default space"},
	{"night", "the reference night"},
}

// Reserved lists the names no pipeline may take (SpaceOf refuses them), sorted.
func Reserved() []string {
	out := make([]string, 0, len(reservedNames))
	for _, r := range reservedNames {
		out = append(out, r.name)
	}
	slices.Sort(out)
	return out
}

// reservedError is the refusal of name, naming what it clashes with; nil if it is free.
func reservedError(name string) error {
	for _, r := range reservedNames {
		if r.name == name {
			return fmt.Errorf("pipeline name %q is reserved: it is %s; a pipeline so named would meet it (%w; reserved: %v)", name, r.why, ErrReservedName, Reserved())
		}
	}
	return nil
}
