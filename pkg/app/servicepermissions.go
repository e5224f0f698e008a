package app

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/outbox"
	"github.com/cairnhq/cairn/pkg/pipeline"
)

// ErrNoService: a pipeline has no service of that name.
var ErrNoService = errors.New("no such service")

// ServicePermissions is the permissions of the NATS user that one service of the
// registered pipeline connects as (`cairn permissions --pipeline NAME --service SERVICE`):
// a step, Supervisor, OutboxSender or Compensator. The service must run alone on its
// connection (Run with its name) and take its replies under its own inbox,
// nats.CustomInboxPrefix(space.ServiceInbox(service)); the pipeline's one user
// (assets.Config.Permissions) takes that inbox too, so a service so connected runs under
// either.
//
// What each may do besides what every service does (assets.Access):
//   - a step pulls from its own durable alone and publishes the events of its own step (again,
//     after a dead owner's lease is released) and of the steps that wait for it, never of
//     another; it writes handover notes, and queues notices of its handovers (and of its
//     approval waits, when it takes the lease). It uses the memo bucket only when it memoises
//     (a model call, or Memo declared), the limits bucket under its rate limit's key only when
//     it declares one (RateLimit), the saga of its own step only when it writes outside
//     (Writes), and queues messages of any kind only when it is an outside message. A step no
//     other step waits for settles the run: it reads the run's queued messages and their marks.
//   - the supervisor pulls from control, publishes every step's events and the undo
//     commands, watches the records, claims the inputs (the natural keys), sweeps the work
//     queues and takes their max-deliveries advisories, reads the timelines, the saga and the
//     outbox, queues messages again on a resume and writes their marks.
//   - the outbox sender pulls from its durable, reads the outbox and writes the marks.
//   - the compensator pulls from its durable, reads the saga, queues withdrawals and
//     writes the marks, and books the rate limits of the steps whose writes it reverses.
//
// A service the pipeline does not have is an error (ErrNoService) naming its services.
func (r Registration) ServicePermissions(service string) (assets.Permissions, error) {
	c, err := r.Assets()
	if err != nil {
		return assets.Permissions{}, err
	}
	a, err := r.access(service)
	if err != nil {
		return assets.Permissions{}, err
	}
	return c.ServicePermissions(a)
}

// ServicePermissions is the permissions of service of c's pipeline, as its registration
// gives them once Init has run (Registration.ServicePermissions): for a host that prints or
// checks its own users without reading NATS.
func (c Config) ServicePermissions(service string) (assets.Permissions, error) {
	c = c.withJob()
	return c.registration().ServicePermissions(service)
}

// services are the services the registered pipeline may run: its steps, the supervisor, the
// outbox sender and the compensator (whether the last two run is the host's Config: the
// registration does not say).
func (r Registration) services() []string {
	return append(r.Definition().Names(), Supervisor, OutboxSender, Compensator)
}

// access is what service does on NATS.
func (r Registration) access(service string) (assets.Access, error) {
	d := r.Definition()
	a := assets.Access{Service: service}
	switch service {
	case Supervisor:
		a.Consumes = assets.Durable{Stream: assets.StreamRuns, Name: assets.ConsumerControl}
		a.Steps, a.Commands, a.Queues = []string{"*"}, []string{"undo"}, []string{"*"}
		a.Buckets = map[string]assets.Use{
			assets.BucketRuns:        assets.UseList,
			assets.BucketHandovers:   assets.UseRead | assets.UseWrite,
			assets.BucketNaturalKeys: assets.UseRead | assets.UseWrite,
			assets.BucketOutbox:      assets.UseRead | assets.UseWrite,
		}
		a.ReadsOutbox, a.ReadsSaga, a.ReadsAudit, a.AsksOwners = true, true, true, true
		a.Sweeps = []string{assets.StreamRuns, assets.StreamSteps}
		a.Advisories = []string{assets.StreamSteps, assets.StreamRuns}
		return a, nil
	case OutboxSender:
		a.Consumes = assets.Durable{Stream: assets.StreamOutbox, Name: assets.ConsumerOutbox}
		a.Buckets = map[string]assets.Use{assets.BucketOutbox: assets.UseRead | assets.UseWrite}
		a.ReadsOutbox = true
		return a, nil
	case Compensator:
		a.Consumes = assets.Durable{Stream: assets.StreamRuns, Name: assets.ConsumerCompensator}
		a.Queues = []string{"*"}
		a.Buckets = map[string]assets.Use{
			assets.BucketHandovers: assets.UseRead | assets.UseWrite,
			assets.BucketOutbox:    assets.UseRead | assets.UseWrite,
		}
		a.ReadsOutbox, a.ReadsSaga, a.AsksOwners, a.Answers = true, true, true, true
		for _, s := range d.Steps {
			if s.ReversibleWrites() && s.RateLimit != "" {
				key, err := r.limitKey(s)
				if err != nil {
					return a, err
				}
				a.LimitKeys = append(a.LimitKeys, key)
			}
		}
		slices.Sort(a.LimitKeys)
		a.LimitKeys = slices.Compact(a.LimitKeys)
		return a, nil
	}
	s, ok := d.Step(service)
	if !ok {
		return a, fmt.Errorf("%w %q in pipeline %q (%v)", ErrNoService, service, r.Name, r.services())
	}
	a.Consumes = assets.Durable{Stream: assets.StreamSteps, Name: s.Name}
	a.Steps = append([]string{s.Name}, followers(d, s.Name)...)
	a.Buckets = map[string]assets.Use{assets.BucketHandovers: assets.UseRead | assets.UseWrite}
	a.Answers = true
	a.Queues = []string{outbox.KindHandover}
	if s.Leased {
		a.Queues = append(a.Queues, outbox.KindApproval)
		a.AsksOwners = true
	}
	if s.Kind == pipeline.OutsideMessage {
		a.Queues = []string{"*"}
	}
	if s.Kind == pipeline.ModelCall || s.Memo != "" {
		a.Buckets[assets.BucketMemo] = assets.UseRead | assets.UseWrite | assets.UseList
	}
	if s.RateLimit != "" {
		key, err := r.limitKey(s)
		if err != nil {
			return a, err
		}
		a.LimitKeys = []string{key}
	}
	if s.Writes() {
		a.Saga = []string{s.Name}
	}
	if len(followers(d, s.Name)) == 0 {
		a.ReadsOutbox = true
		a.Buckets[assets.BucketOutbox] = assets.UseRead
	}
	return a, nil
}

// followers are the steps that wait for step directly: the ones whose events it publishes
// once it is verified.
func followers(d pipeline.Definition, step string) []string {
	var out []string
	for _, s := range d.Names() {
		if slices.Contains(d.Waits(s), step) {
			out = append(out, s)
		}
	}
	return out
}

// limitKey is the key of the limits bucket step s's rate limit is booked under: the key
// its Init registered (Config.Limits), any key of the space's limits bucket when none was
// registered, an error when the registered limit is kept in another bucket.
func (r Registration) limitKey(s pipeline.Step) (string, error) {
	l, ok := r.Settings.SharedLimits[s.RateLimit]
	if !ok {
		return "*", nil
	}
	sp, err := r.Space()
	if err != nil {
		return "", err
	}
	if own := sp.Bucket(assets.BucketLimits); l.Bucket != own {
		return "", fmt.Errorf("step %q: its rate limit %s is kept in bucket %q, not the pipeline's own %q: its NATS user may not use another's", s.Name, s.RateLimit, l.Bucket, own)
	}
	return l.Key, nil
}
