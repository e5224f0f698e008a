package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// The default timings: CAIRN_HEARTBEAT, CAIRN_LEASE, CAIRN_TAKEOVER_GAP.
const (
	DefaultHeartbeat   = 5 * time.Second
	DefaultLease       = 15 * time.Second
	DefaultTakeoverGap = 500 * time.Millisecond
)

// Prefix begins the owner inboxes of space sp's services: an owner of service s answers on
// Prefix(sp) + s + "." + a nuid, under the space's root, so that only the pipeline's own
// NATS users may subscribe there (assets.Permissions): cairn.owner. for the night,
// cairn.<name>.owner. for pipeline <name> ("owner" is a reserved pipeline name).
func Prefix(sp assets.Space) string { return sp.Root() + "owner." }

// LegacyPrefix is the owner prefix every pipeline shared before owner inboxes moved under
// the pipeline's root: a lease taken by an earlier release and still in flight names it,
// and is accepted in any space (the night's prefix is still this one). Under the permissions
// of this release another pipeline's user can no longer answer there: asking such an inbox
// gets a timeout, which proves nothing, and the lease then expires as any other.
const LegacyPrefix = "cairn.owner."

// ErrForeignInbox: a lease names an owner inbox of another shape than the one Cairn
// writes (NewOwner): its record is forged or corrupt, and the inbox is never asked.
var ErrForeignInbox = errors.New("foreign owner inbox")

// NewOwner is the identity a worker of service in space sp takes leases under: the name
// <service>/<host>/<pid>-<6 of a nuid> and the inbox Prefix(sp)<service>.<nuid> it answers
// on. It is the one writer of the shape CheckInbox accepts.
func NewOwner(sp assets.Space, service string) kc.Owner {
	host, _ := os.Hostname()
	return kc.Owner{
		Name:  service + "/" + cmp.Or(host, "host") + "/" + strconv.Itoa(os.Getpid()) + "-" + nuid.Next()[:6],
		Inbox: Prefix(sp) + service + "." + nuid.Next(),
	}
}

// Answer answers "alive" on o's inbox until stop is called: a process that takes leases
// answers from before its first take, so its leases are never taken over while it lives.
func Answer(nc *nats.Conn, o kc.Owner) (stop func(), err error) {
	sub, err := nc.Subscribe(o.Inbox, func(m *nats.Msg) { _ = m.Respond([]byte("alive")) })
	if err != nil {
		return nil, fmt.Errorf("answering on %s: %w", o.Inbox, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// CheckInbox returns nil when l, a lease on a run of space sp, names an owner inbox of the
// one shape NewOwner writes: under sp's owner prefix (or LegacyPrefix) and the service
// l.Owner names, ending in a nuid. Any other (a subject of a stream, a KV key, a wildcard,
// another service's or another pipeline's inbox) wraps ErrForeignInbox: the lease is a
// forged or corrupt record's, and its inbox is never asked.
func CheckInbox(sp assets.Space, l kc.Lease) error {
	service, _, _ := strings.Cut(l.Owner, "/")
	if ValidService(service) {
		for _, prefix := range []string{Prefix(sp), LegacyPrefix} {
			if id, ok := strings.CutPrefix(l.OwnerInbox, prefix+service+"."); ok && isNUID(id) {
				return nil
			}
		}
	}
	return fmt.Errorf("lease of %q (token %d) names owner inbox %q, not %s<service>.<nuid> of its owner's service: %w",
		cut(l.Owner, 128), l.Token, cut(l.OwnerInbox, 256), Prefix(sp), ErrForeignInbox)
}

// ValidService: a service name fit for one subject token of an owner inbox, as step names are.
func ValidService(s string) bool {
	return len(s) > 0 && len(s) <= 64 && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	})
}

// isNUID: 22 base-62 characters, as nuid.Next gives.
func isNUID(s string) bool {
	return len(s) == 22 && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	})
}

// OwnerGone asks a lease owner's inbox twice, gap apart: two "no responders" answers, with
// the asker connected throughout, prove the owner gone. A timeout proves nothing. An inbox
// CheckInbox refuses (for space sp) is never asked: it proves nothing either.
func OwnerGone(ctx context.Context, nc *nats.Conn, sp assets.Space, l kc.Lease, gap time.Duration) bool {
	if CheckInbox(sp, l) != nil {
		return false
	}
	inbox := l.OwnerInbox
	ask := func() bool {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := nc.RequestWithContext(rctx, inbox, nil)
		return errors.Is(err, nats.ErrNoResponders)
	}
	reconnects := nc.Stats().Reconnects
	if !ask() {
		return false
	}
	t := time.NewTimer(gap)
	select {
	case <-ctx.Done():
		t.Stop()
		return false
	case <-t.C:
	}
	return ask() && nc.IsConnected() && nc.Stats().Reconnects == reconnects
}

// GoneReason is the last_error and audit detail of a lease released because its owner is gone.
func GoneReason(l kc.Lease) string { return "owner " + l.Owner + " gone (no responders)" }

// ExpiredReason is the last_error and audit detail of a lease released because it expired.
func ExpiredReason(l kc.Lease, lease time.Duration) string {
	return fmt.Sprintf("lease of %s expired (not renewed for %s)", l.Owner, lease)
}

// Takeover releases the leases of owners gone or expired, for one process: a worker's fast
// takeover, the compensator's, the supervisor's.
type Takeover struct {
	JS     jetstream.JetStream
	Space  assets.Space
	Store  *kc.Store
	Source string        // the events' source: /cairn/<service>
	Gap    time.Duration // CAIRN_TAKEOVER_GAP
	Now    func() time.Time
	// Publish publishes a step's event with Msg-Id <run>:<step>:ready:<rev> (stepevent.Publish).
	Publish func(ctx context.Context, runID, step string, generation int, rev uint64) error
}

// OwnerGone asks l's owner whether it is alive (the package's OwnerGone, Gap apart).
func (t *Takeover) OwnerGone(ctx context.Context, l kc.Lease) bool {
	return OwnerGone(ctx, t.JS.Conn(), t.Space, l, t.Gap)
}

// ReleaseGone is the fast takeover: when l's owner is proven gone, l is released (Release)
// with GoneReason. released says whether this call released it.
func (t *Takeover) ReleaseGone(ctx context.Context, runID string, l kc.Lease) (released bool, err error) {
	if !t.OwnerGone(ctx, l) {
		return false, nil
	}
	return t.Release(ctx, runID, l, GoneReason(l))
}

// Release releases a lease whose owner is gone or expired, by compare-and-set on that very
// lease (a renewal in between keeps it), audits it as reassigned, and publishes the step's
// event again with the release's revision as Msg-Id. The step stays in_progress, so its
// next taker knows it restarts. released says whether this call released the lease.
func (t *Takeover) Release(ctx context.Context, runID string, l kc.Lease, why string) (released bool, err error) {
	rec, rev, err := t.Store.Mutate(ctx, runID, func(n *kc.Record) error {
		if n.Lease == nil || *n.Lease != l {
			return kc.ErrSkip
		}
		n.Lease = nil
		if n.Index(l.Step) >= 0 { // an undo's lease has no step of the pipeline
			n.Step(l.Step).SetLastError(why)
		}
		return nil
	})
	if errors.Is(err, kc.ErrSkip) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	a := events.Audit{RunID: runID, Step: l.Step, Event: "reassigned", Token: l.Token, Owner: l.Owner, Detail: why}
	e, err := events.New(events.AuditStepID(runID, l.Step, "reassigned", rev), events.TypeAudit, t.Source, runID, t.Now(), a)
	if err == nil {
		if m, err := events.Encode(t.Space.Audit(runID), e); err == nil {
			_, _ = t.JS.PublishMsg(ctx, m)
		}
	}
	if rec.Status != kc.Running {
		return true, nil
	}
	return true, t.Publish(ctx, runID, l.Step, rec.Generation, rev)
}

// Mark is what every write of a lease's holder changes: its token and write_id; "" for no
// lease. A lease is judged by how long its mark has stood unchanged.
func Mark(l *kc.Lease) string {
	if l == nil {
		return ""
	}
	return fmt.Sprintf("%d/%s", l.Token, l.WriteID)
}

// Expiry judges a lease by the clock of the one who watches it (the supervisor), from how
// long its Mark has stood unchanged.
type Expiry struct {
	Heartbeat time.Duration // CAIRN_HEARTBEAT: how often holders renew
	Lease     time.Duration // CAIRN_LEASE
}

// Expired: the lease has not been renewed for a whole lease.
func (e Expiry) Expired(unchanged time.Duration) bool { return unchanged >= e.Lease }

// Overdue: the lease has missed two renewals but has not expired: its owner is asked (once)
// whether it is alive.
func (e Expiry) Overdue(unchanged time.Duration) bool {
	return unchanged >= 2*e.Heartbeat && unchanged < e.Lease
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
