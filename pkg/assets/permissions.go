package assets

import "slices"

// Permissions is what a pipeline's services may do on NATS, as subjects for a NATS user's
// permissions (publish and subscribe allow lists, with allow_responses for the owner
// inboxes' answers): the JetStream API of its own streams, buckets and consumers, and its
// own space's subjects, so that its services read and write nothing of another pipeline.
// Creating, changing or deleting a stream, a bucket or a durable is admin's (Init).
//
// The services' connection must take its replies under Inbox (nats.CustomInboxPrefix), for
// another pipeline's services cannot subscribe there; so must its owner inboxes be, under
// the space's root (<root>owner.<service>.<nuid>, package lease). Shared by every pipeline:
// the JetStream account information ($JS.API.INFO) alone.
type Permissions struct {
	Publish []string `json:"publish"`
	// PublishDeny are the durables' create and delete subjects, which the short-lived
	// consumers' allowances would otherwise cover: no service replaces or removes a durable.
	PublishDeny []string `json:"publish_deny"`
	Subscribe   []string `json:"subscribe"`
}

// Inbox is the reply prefix of the space's services: _INBOX.cairn.<name> (_INBOX.cairn for
// the default space).
func (s Space) Inbox() string {
	if s.name == "" {
		return "_INBOX.cairn"
	}
	return "_INBOX.cairn." + s.name
}

// Permissions is c's pipeline's services' permissions.
func (c Config) Permissions() Permissions {
	c = c.withDefaults()
	sp := c.Space
	var streams []string
	for _, s := range c.Streams() {
		streams = append(streams, s.Name)
	}
	for _, b := range c.Buckets() {
		streams = append(streams, "KV_"+b.Bucket)
	}
	obj := c.ObjectStore().Bucket
	streams = append(streams, "OBJ_"+obj)

	queues := []string{sp.Stream(StreamRuns), sp.Stream(StreamSteps)}
	pub := []string{"$JS.API.INFO", sp.Root() + ">"}
	for _, s := range streams {
		pub = append(pub,
			"$JS.API.STREAM.INFO."+s,
			"$JS.API.STREAM.MSG.GET."+s,
			"$JS.API.DIRECT.GET."+s, "$JS.API.DIRECT.GET."+s+".>",
			"$JS.API.CONSUMER.INFO."+s+".*",
			"$JS.API.CONSUMER.LIST."+s, "$JS.API.CONSUMER.NAMES."+s,
			"$JS.API.CONSUMER.MSG.NEXT."+s+".*",
			"$JS.ACK."+s+".>", "$JS.FC."+s+".>",
		)
		// The short-lived consumers that read a stream's history or watch a bucket; the work
		// queues are read by their durables alone.
		if !slices.Contains(queues, s) {
			pub = append(pub, "$JS.API.CONSUMER.CREATE."+s, "$JS.API.CONSUMER.CREATE."+s+".>", "$JS.API.CONSUMER.DELETE."+s+".*")
		}
	}
	var deny []string
	for _, d := range c.Consumers() {
		if !slices.Contains(queues, d.Stream) {
			n := d.Stream + "." + d.Config.Durable
			deny = append(deny, "$JS.API.CONSUMER.CREATE."+n, "$JS.API.CONSUMER.CREATE."+n+".>", "$JS.API.CONSUMER.DELETE."+n)
		}
	}
	// The supervisor removes a work queue's message once it is rejected or handed over.
	for _, s := range queues {
		pub = append(pub, "$JS.API.STREAM.MSG.DELETE."+s)
	}
	for _, b := range c.Buckets() {
		pub = append(pub, "$KV."+b.Bucket+".>")
	}
	pub = append(pub, "$O."+obj+".>")
	sub := []string{
		sp.Inbox() + ".>", sp.Root() + "owner.*.*",
		sp.MaxDeliveries(StreamSteps), sp.MaxDeliveries(StreamRuns),
	}
	slices.Sort(pub)
	return Permissions{Publish: slices.Compact(pub), PublishDeny: deny, Subscribe: sub}
}
