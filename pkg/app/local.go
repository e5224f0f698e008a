package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/assets"
	"github.com/cairnhq/cairn/pkg/events"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
)

// Local is a job hosted whole in this process on a NATS server of its own (RunLocal): for
// a test, an example, a job's first steps, or a small job that needs no more.
type Local struct {
	name  string
	s     *served
	js    jetstream.JetStream
	stop  context.CancelFunc
	done  chan error
	once  sync.Once
	err   error
	clean func()
}

// RunLocal hosts job whole in this process until Close: an embedded nats-server with
// JetStream on a free loopback port, storing under dir/nats; the job's assets and its
// services' signing keys (dir/keys) made (Init); every service running (Run). Started
// again on the same dir (after Close, or after the process was killed), it finds the job's
// runs and resumes the ones that were interrupted; a second RunLocal on a dir in use is
// refused. options change the Config it runs, given the job's (its Lease, Faults, Outbox,
// Systems...); they must leave JS and KeysDir as they are.
func RunLocal(ctx context.Context, dir string, job Job, options ...func(*Config)) (*Local, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	sp, err := assets.SpaceOf(job.Name)
	if err != nil {
		return nil, err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	s, err := serve(job.Name+"-local", job.Name+" local", "127.0.0.1", -1, dir, sp)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("running %s locally: %w", job.Name, err)
	}
	l := &Local{name: job.Name, s: s, js: s.js, done: make(chan error, 1)}
	c := Config{JS: l.js, Job: job, KeysDir: filepath.Join(dir, "keys")}
	for _, o := range options {
		o(&c)
	}
	if err := Init(ctx, c); err != nil {
		s.close()
		unlock()
		return nil, fmt.Errorf("running %s locally: %w", job.Name, err)
	}
	running, stop := context.WithCancel(context.WithoutCancel(ctx))
	l.stop = stop
	go func() { l.done <- Run(running, c) }()
	l.clean = unlock
	return l, nil
}

// Close stops the job's services, waiting for the step in hand (Config.StopGrace), and
// shuts the server down. It returns the services' error, if one stopped by itself.
func (l *Local) Close() error {
	l.once.Do(func() {
		l.stop()
		l.err = <-l.done
		l.s.close()
		l.clean()
	})
	return l.err
}

// JS is the connection's JetStream, for what RunLocal does not say (Command, a KV read).
func (l *Local) JS() jetstream.JetStream { return l.js }

// URL is the server's, for `nats` and the `cairn` CLI (CAIRN_NATS_URL).
func (l *Local) URL() string { return l.s.srv.ClientURL() }

// Start starts run runID on input, the job's input (a struct or a map whose members are the
// job's Input), and waits for the supervisor's answer, as Start does.
func (l *Local) Start(ctx context.Context, runID string, input any) error {
	b, err := json.Marshal(input)
	if err != nil {
		return fmt.Errorf("start %s: %w", runID, err)
	}
	var members map[string]any
	if err := json.Unmarshal(b, &members); err != nil {
		return fmt.Errorf("start %s: the input is no JSON object of members (%s): %w", runID, b, err)
	}
	return Start(ctx, l.js, l.name, runID, members)
}

// Wait waits until run runID has ended (done, handed over, undone or cancelled) and returns
// its record, as Wait does.
func (l *Local) Wait(ctx context.Context, runID string) (*kc.Record, error) {
	return Wait(ctx, l.js, l.name, runID)
}

// ErrNotDone is Output's error for a run that ended otherwise than done.
var ErrNotDone = errors.New("the run did not end done")

// Output waits until run runID has ended and decodes step's verified output into v (its
// digest checked): ErrNotDone, naming the run's status and its next action, when the run
// ended otherwise.
func (l *Local) Output(ctx context.Context, runID, step string, v any) error {
	rec, err := l.Wait(ctx, runID)
	if err != nil {
		return err
	}
	if rec.Status != kc.Done {
		return fmt.Errorf("%w: run %s is %s: %s", ErrNotDone, runID, rec.Status, rec.NextAction)
	}
	s, ok := rec.Steps[step]
	if !ok || s.Output == nil {
		return fmt.Errorf("run %s has no output of step %q", runID, step)
	}
	sp, _ := assets.SpaceOf(l.name)
	store, err := artifacts.Open(ctx, l.js, sp.Bucket(assets.ObjectArtifacts))
	if err != nil {
		return err
	}
	b, err := store.Load(ctx, s.Output)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Undo asks for an undo of run runID, of the effects whose attributes match every pair of
// where (nil: the whole run), as `cairn undo --attr` does, under requestID (the same id again
// is the same undo), and waits until the compensator has finished it: the record it left
// (its Undo says how many effects it reversed; a whole run ends undone). The job needs the
// reversals of its systems (Job.Systems).
func (l *Local) Undo(ctx context.Context, runID, requestID string, where map[string]string) (*kc.Record, error) {
	var scope *events.UndoScope
	if len(where) > 0 {
		scope = &events.UndoScope{Where: where}
	}
	if err := Command(ctx, l.js, l.name, runID, events.VerbUndo, requestID, events.Command{Scope: scope}); err != nil {
		return nil, err
	}
	return waitUntil(ctx, l.js, l.name, runID, "to finish undo "+requestID, func(r *kc.Record) bool {
		return r.Undo != nil && r.Undo.RequestID == kc.RequestKey(requestID) && r.Status != kc.Undoing
	})
}
