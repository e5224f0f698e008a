package assets

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Permissions is what a pipeline's services may do on NATS, as subjects for a NATS user's
// permissions (publish and subscribe allow lists, with allow_responses for the owner
// inboxes' answers): the JetStream API of its own streams, buckets and consumers, and its
// own space's subjects, so that its services read and write nothing of another pipeline.
// Creating, changing or deleting a stream, a bucket or a durable is admin's (Init), and so
// is writing the keys bucket (the services' public keys, the approvers, the seal).
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
	// Every bucket but the keys: the public keys, the approvers and the seal are admin's to
	// write (Init, cairn approver add), as the night's cairn-keys is in accounts.conf; a
	// service only reads them.
	for _, b := range c.Buckets() {
		if b.Bucket != sp.Bucket(BucketKeys) {
			pub = append(pub, "$KV."+b.Bucket+".>")
		}
	}
	pub = append(pub, "$O."+obj+".>")
	sub := []string{
		sp.Inbox() + ".>", sp.Root() + "owner.*.*",
		sp.MaxDeliveries(StreamSteps), sp.MaxDeliveries(StreamRuns),
	}
	slices.Sort(pub)
	return Permissions{Publish: slices.Compact(pub), PublishDeny: deny, Subscribe: sub}
}

// ServiceInbox is the reply prefix of one service of the space that connects as a NATS user
// of its own (ServicePermissions): <Inbox>.<service>, so that no other service of the
// pipeline can read its replies (its records, its pulled messages, its acks). It is under
// Inbox, so a service connected as the pipeline's one user (Permissions) may take it too.
func (s Space) ServiceInbox(service string) string { return s.Inbox() + "." + service }

// Use is what a service does with a bucket (Access.Buckets): any of UseRead, UseWrite and
// UseList together.
type Use uint8

const (
	// UseRead reads a key, and a key's history by revision.
	UseRead Use = 1 << iota
	// UseWrite creates, updates, puts and deletes keys.
	UseWrite
	// UseList lists or watches the keys, through a short-lived ordered consumer of its own.
	UseList
)

// Durable names a durable consumer of a space: its stream (a Stream constant) and its name.
type Durable struct{ Stream, Name string }

// Access is what one service of a pipeline does on NATS, in the names of the pipeline's
// assets (Stream and Bucket constants, step names); ServicePermissions makes it a NATS
// user's permissions. Every service may besides look up every asset of its space (the check
// at its start), read and compare-and-set the runs' records, read the registered keys,
// record on the timeline and on the refused input, and read and write the artifact store
// (a record's room lent to its outputs moves them there, whoever writes the record).
type Access struct {
	// Service names the service: its replies come under Space.ServiceInbox(Service), and it
	// answers on its owner inbox <root>owner.<Service>.* when Answers.
	Service string
	// Consumes is the durable it pulls from and acks; zero: none.
	Consumes Durable
	// Steps are the steps whose events it publishes; "*" alone: every step's.
	Steps []string
	// Commands are the verbs of the run commands it publishes (<root>runs.<run_id>.<verb>).
	Commands []string
	// Buckets are the buckets it uses besides the runs' and the keys', by Bucket constant.
	Buckets map[string]Use
	// LimitKeys are the keys of the space's limits bucket it books a rate limit's calls
	// under (read, compare-and-set, read back); "*": any key.
	LimitKeys []string
	// Queues are the kinds of the outbox messages it queues (<root>outbox.<run_id>.<kind>);
	// "*": any kind. A queuer may read a queued message back by its sequence.
	Queues []string
	// ReadsOutbox: it reads a run's queued messages, through short-lived consumers.
	ReadsOutbox bool
	// Saga are the steps whose saga records it writes and reads back.
	Saga []string
	// ReadsSaga: it reads every step's saga records.
	ReadsSaga bool
	// ReadsAudit: it reads the runs' timelines.
	ReadsAudit bool
	// Sweeps are the work queues (Stream constants) it sweeps: it reads their messages by
	// sequence, removes them, and lists their consumers (never changes them).
	Sweeps []string
	// Advisories are the work queues whose durables' max-deliveries advisories it takes.
	Advisories []string
	// AsksOwners: it asks lease owners whether they are alive (the fast takeover), on any
	// service's owner inbox.
	AsksOwners bool
	// Answers: it answers "alive" on its own owner inbox (a service that takes leases, or
	// whose runner answers while it runs).
	Answers bool
}

// ServicePermissions is the permissions of the NATS user of one service of c's pipeline:
// what a says, on c's assets, and nothing more. Creating, changing or deleting a stream, a
// bucket or a durable stays admin's, and so does pulling from another service's durable.
// An Access naming what c does not have (a step, a stream, a bucket, a durable) is an error
// naming it.
func (c Config) ServicePermissions(a Access) (Permissions, error) {
	c = c.withDefaults()
	if err := c.checkAccess(a); err != nil {
		return Permissions{}, fmt.Errorf("the permissions of service %q of %s: %w", a.Service, c.Space, err)
	}
	sp := c.Space
	pub := []string{"$JS.API.INFO", sp.Root() + "audit.*", sp.Rejected()}
	for _, s := range c.streamNames() {
		pub = append(pub, "$JS.API.STREAM.INFO."+s, "$JS.API.CONSUMER.INFO."+s+".*")
	}
	buckets := map[string]Use{BucketRuns: UseRead | UseWrite, BucketKeys: UseRead}
	for b, u := range a.Buckets {
		buckets[b] |= u
	}
	for _, b := range slices.Sorted(maps.Keys(buckets)) {
		pub = append(pub, bucketSubjects(sp.Bucket(b), buckets[b])...)
	}
	if len(a.LimitKeys) > 0 {
		b := sp.Bucket(BucketLimits)
		pub = append(pub, "$JS.API.DIRECT.GET.KV_"+b, "$JS.API.STREAM.MSG.GET.KV_"+b)
		for _, k := range a.LimitKeys {
			pub = append(pub, "$JS.API.DIRECT.GET.KV_"+b+".$KV."+b+"."+k, "$KV."+b+"."+k)
		}
	}
	obj := c.ObjectStore().Bucket
	pub = append(pub, "$O."+obj+".>")
	pub = append(pub, readSubjects("OBJ_"+obj, ">", true)...)
	if d := a.Consumes; d.Name != "" {
		s := sp.Stream(d.Stream)
		pub = append(pub, "$JS.API.CONSUMER.MSG.NEXT."+s+"."+d.Name, "$JS.ACK."+s+"."+d.Name+".>")
	}
	for _, step := range a.Steps {
		pub = append(pub, sp.StepPrefix()+step+".*")
	}
	for _, verb := range a.Commands {
		pub = append(pub, sp.RunsPrefix()+"*."+verb)
	}
	for _, kind := range a.Queues {
		pub = append(pub, sp.Root()+"outbox.*."+kind)
	}
	if len(a.Queues) > 0 {
		pub = append(pub, "$JS.API.STREAM.MSG.GET."+sp.Stream(StreamOutbox))
	}
	if a.ReadsOutbox {
		pub = append(pub, readSubjects(sp.Stream(StreamOutbox), ">", false)...)
	}
	saga := sp.Stream(StreamSaga)
	for _, step := range a.Saga {
		pub = append(pub, sp.Root()+"saga.*."+step)
		if !a.ReadsSaga {
			pub = append(pub, readSubjects(saga, "*."+sp.Root()+"saga.*."+step, false)...)
		}
	}
	if a.ReadsSaga {
		pub = append(pub, readSubjects(saga, ">", false)...)
	}
	if a.ReadsAudit {
		pub = append(pub, readSubjects(sp.Stream(StreamAudit), ">", false)...)
	}
	for _, q := range a.Sweeps {
		s := sp.Stream(q)
		pub = append(pub, "$JS.API.STREAM.MSG.GET."+s, "$JS.API.STREAM.MSG.DELETE."+s, "$JS.API.CONSUMER.LIST."+s, "$JS.API.CONSUMER.NAMES."+s)
	}
	if a.AsksOwners {
		pub = append(pub, sp.Root()+"owner.*.*")
	}
	sub := []string{sp.ServiceInbox(a.Service) + ".>"}
	if a.Answers {
		sub = append(sub, sp.Root()+"owner."+a.Service+".*")
	}
	for _, q := range a.Advisories {
		sub = append(sub, sp.MaxDeliveries(q))
	}
	slices.Sort(pub)
	pub = slices.Compact(pub)
	return Permissions{Publish: pub, PublishDeny: c.durablesDenied(a.Consumes, pub), Subscribe: sub}, nil
}

// streamNames are the names of the space's streams, its buckets' and its object store's.
func (c Config) streamNames() []string {
	var out []string
	for _, s := range c.Streams() {
		out = append(out, s.Name)
	}
	for _, b := range c.Buckets() {
		out = append(out, "KV_"+b.Bucket)
	}
	return append(out, "OBJ_"+c.ObjectStore().Bucket)
}

// bucketSubjects are the subjects of use u of bucket b.
func bucketSubjects(b string, u Use) []string {
	var out []string
	if u&UseRead != 0 {
		out = append(out, "$JS.API.DIRECT.GET.KV_"+b, "$JS.API.DIRECT.GET.KV_"+b+".>", "$JS.API.STREAM.MSG.GET.KV_"+b)
	}
	if u&UseWrite != 0 {
		out = append(out, "$KV."+b+".>")
	}
	if u&UseList != 0 {
		out = append(out, readSubjects("KV_"+b, ">", false)...)
	}
	return out
}

// readSubjects are the subjects of reading stream s through short-lived consumers of its
// own, created on consumer subjects matching filter (">": any name and filter; else
// "<name>.<filter>"), and by sequence; direct: by direct get too.
func readSubjects(s, filter string, direct bool) []string {
	out := []string{
		"$JS.API.STREAM.MSG.GET." + s,
		"$JS.API.CONSUMER.CREATE." + s + "." + filter,
		"$JS.API.CONSUMER.MSG.NEXT." + s + ".*",
		"$JS.API.CONSUMER.DELETE." + s + ".*",
		"$JS.FC." + s + ".>",
	}
	if filter == ">" {
		out = append(out, "$JS.API.CONSUMER.CREATE."+s)
	}
	if direct {
		out = append(out, "$JS.API.DIRECT.GET."+s, "$JS.API.DIRECT.GET."+s+".>")
	}
	return out
}

// durablesDenied are the subjects of the space's durables that an allow list pub would
// let a service reach through its wildcards: creating (so replacing) or deleting any
// durable, and pulling from one that is not own.
func (c Config) durablesDenied(own Durable, pub []string) []string {
	var deny []string
	for _, d := range c.Consumers() {
		n := d.Stream + "." + d.Config.Durable
		subjects := []string{"$JS.API.CONSUMER.CREATE." + n, "$JS.API.CONSUMER.CREATE." + n + ".>", "$JS.API.CONSUMER.DELETE." + n}
		if d.Stream != c.Space.Stream(own.Stream) || d.Config.Durable != own.Name {
			subjects = append(subjects, "$JS.API.CONSUMER.MSG.NEXT."+n)
		}
		for _, s := range subjects {
			if slices.ContainsFunc(pub, func(p string) bool { return subjectsMeet(p, s) }) {
				deny = append(deny, s)
			}
		}
	}
	return deny
}

// subjectsMeet reports whether some subject matches both a and b, each a subject or a
// pattern with * and >.
func subjectsMeet(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(at) && i < len(bt); i++ {
		switch {
		case at[i] == ">" || bt[i] == ">":
			return true
		case at[i] != "*" && bt[i] != "*" && at[i] != bt[i]:
			return false
		}
	}
	return len(at) == len(bt)
}

// checkAccess refuses an Access that names what c does not have, one sentence per name.
func (c Config) checkAccess(a Access) error {
	var errs []error
	if a.Service == "" || strings.ContainsAny(a.Service, ".*> \t\r\n") {
		errs = append(errs, fmt.Errorf("service name %q must be one subject token (no '.', '*', '>' or space)", a.Service))
	}
	streams := func(what string, names []string) {
		for _, n := range names {
			if !slices.ContainsFunc(c.Streams(), func(s jetstream.StreamConfig) bool { return s.Name == c.Space.Stream(n) }) {
				errs = append(errs, fmt.Errorf("%s names stream %q, which is not one of the space's streams (a Stream constant)", what, n))
			}
		}
	}
	streams("Sweeps", a.Sweeps)
	streams("Advisories", a.Advisories)
	if d := a.Consumes; d.Name != "" && !slices.ContainsFunc(c.Consumers(), func(k Consumer) bool {
		return k.Stream == c.Space.Stream(d.Stream) && k.Config.Durable == d.Name
	}) {
		errs = append(errs, fmt.Errorf("Consumes names durable %q on %q, which the space does not have", d.Name, d.Stream))
	}
	for _, step := range append(slices.Clone(a.Steps), a.Saga...) {
		if step != "*" && !slices.Contains(c.Steps, step) {
			errs = append(errs, fmt.Errorf("step %q is not a step of the pipeline %v", step, c.Steps))
		}
	}
	for _, b := range slices.Sorted(maps.Keys(a.Buckets)) {
		if !slices.ContainsFunc(c.Buckets(), func(k jetstream.KeyValueConfig) bool { return k.Bucket == c.Space.Bucket(b) }) {
			errs = append(errs, fmt.Errorf("bucket %q is not one of the space's buckets (a Bucket constant)", b))
		}
	}
	for _, k := range append(slices.Clone(a.LimitKeys), a.Queues...) {
		if k == "" || (k != "*" && strings.ContainsAny(k, ".*> \t\r\n")) {
			errs = append(errs, fmt.Errorf("limit key or message kind %q must be one subject token or *", k))
		}
	}
	return errors.Join(errs...)
}
