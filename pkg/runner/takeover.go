package runner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// OwnerPrefix begins every owner inbox: an owner of service s answers on
// OwnerPrefix + s + "." + a nuid, the subjects s's NATS user alone may subscribe to.
const OwnerPrefix = "cairn.owner."

// NewOwner is the identity a worker of service takes leases under: the name
// <service>/<host>/<pid>-<6 of a nuid> and the inbox cairn.owner.<service>.<nuid> it answers
// on. It is the one writer of the shape CheckOwnerInbox accepts.
func NewOwner(service string) kc.Owner {
	host, _ := os.Hostname()
	return kc.Owner{
		Name:  service + "/" + cmp.Or(host, "host") + "/" + strconv.Itoa(os.Getpid()) + "-" + nuid.Next()[:6],
		Inbox: ownerInbox(service, nuid.Next()),
	}
}

func ownerInbox(service, id string) string { return OwnerPrefix + service + "." + id }

// CheckOwnerInbox returns nil when l's owner inbox has the one shape NewOwner writes: an
// inbox under the owner prefix of the service l.Owner names, ending in a nuid. Any other
// (a subject of a stream, a KV key, a wildcard, another service's inbox) wraps
// ErrForeignInbox: the lease is a forged or corrupt record's, and its inbox is never asked.
func CheckOwnerInbox(l kc.Lease) error {
	service, _, _ := strings.Cut(l.Owner, "/")
	id, ok := strings.CutPrefix(l.OwnerInbox, OwnerPrefix+service+".")
	if !ownerService(service) || !ok || l.OwnerInbox != ownerInbox(service, id) || !isNUID(id) {
		return fmt.Errorf("lease of %q (token %d) names owner inbox %q, not %s<service>.<nuid> of its owner's service: %w",
			cut(l.Owner, 128), l.Token, cut(l.OwnerInbox, 256), OwnerPrefix, ErrForeignInbox)
	}
	return nil
}

// ownerService: a service name fit for one subject token, as step names are.
func ownerService(s string) bool {
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
// CheckOwnerInbox refuses is never asked: it proves nothing either.
func OwnerGone(ctx context.Context, nc *nats.Conn, l kc.Lease, gap time.Duration) bool {
	if CheckOwnerInbox(l) != nil {
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

// ownerGone: a lease with a foreign owner inbox is left to the supervisor, which hands the
// run over naming it; this worker asks nothing.
func (r *Runner) ownerGone(ctx context.Context, runID string, l *kc.Lease) bool {
	if err := CheckOwnerInbox(*l); err != nil {
		r.log.Warn("lease left to the supervisor", slog.String("run_id", runID), slog.Any("error", err))
		return false
	}
	return OwnerGone(ctx, r.cfg.JS.Conn(), *l, r.cfg.TakeoverGap)
}

func (r *Runner) releaseGone(ctx context.Context, runID string, l kc.Lease) {
	released, err := ReleaseLease(ctx, r.cfg.JS, r.cfg.Space, r.cfg.Store, "/cairn/"+r.cfg.Service, runID, l, "owner "+l.Owner+" gone (no responders)", r.cfg.Now)
	if err != nil {
		r.log.Warn("releasing a dead owner's lease", slog.String("run_id", runID), slog.Any("error", err))
	}
	if released {
		r.m.Reassignments.WithLabelValues(l.Step, "owner_gone").Inc()
		r.log.Info("released a dead owner's lease", slog.String("run_id", runID), slog.String("dead_owner", l.Owner), slog.Uint64("token", l.Token))
	}
}

// ReleaseLease releases a lease whose owner is gone or expired, by compare-and-set on that
// very lease (a renewal in between keeps it), audits it as reassigned, and publishes the
// step's event again with the release's revision as Msg-Id. The step stays in_progress, so
// its next taker knows it restarts. released says whether this call released the lease.
func ReleaseLease(ctx context.Context, js jetstream.JetStream, sp assets.Space, store *kc.Store, source, runID string, l kc.Lease, why string, now func() time.Time) (released bool, err error) {
	rec, rev, err := store.Mutate(ctx, runID, func(n *kc.Record) error {
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
	e, err := events.New(events.AuditStepID(runID, l.Step, "reassigned", rev), events.TypeAudit, source, runID, now(), a)
	if err == nil {
		if m, err := events.Encode(sp.Audit(runID), e); err == nil {
			_, _ = js.PublishMsg(ctx, m)
		}
	}
	if rec.Status != kc.Running {
		return true, nil
	}
	return true, PublishStep(ctx, js, sp, source, runID, l.Step, rec.Generation, rev, now())
}
