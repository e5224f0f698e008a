package supervisor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
)

// NaturalKey is what a run is about: its pipeline and its input. Two runs with one natural
// key would do the same work twice, so a start whose natural key another run id holds is
// refused; `cairn rerun` is how a run goes again. A shadow run has a natural key of its own.
func NaturalKey(d pipeline.Definition, p kc.Params) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pipeline=%s", d.Name)
	for _, k := range inputOrder(d, p) {
		fmt.Fprintf(&b, " %s=%s", k, memberText(p, k))
	}
	fmt.Fprintf(&b, " shadow=%t", p.Shadow)
	return b.String()
}

// inputOrder is the members of p in the pipeline's declared order, then the others sorted.
func inputOrder(d pipeline.Definition, p kc.Params) []string {
	var out []string
	for _, k := range d.Input {
		if _, ok := p.Input[k]; ok {
			out = append(out, k)
		}
	}
	for _, k := range p.Names() {
		if !slices.Contains(d.Input, k) {
			out = append(out, k)
		}
	}
	return out
}

// memberText is a member's value as the natural key spells it: a string as it is, any
// other value as its compact JSON.
func memberText(p kc.Params, k string) string {
	if s := p.String(k); s != "" || string(p.Input[k]) == `""` {
		return s
	}
	var c bytes.Buffer
	if json.Compact(&c, p.Input[k]) != nil {
		return string(p.Input[k])
	}
	return c.String()
}

// NaturalKeyEntry is a natural key's key in the cairn-natural-keys bucket: the hex sha256 of
// the natural key (a valid KV key whatever the input).
func NaturalKeyEntry(natural string) string {
	sum := sha256.Sum256([]byte(natural))
	return hex.EncodeToString(sum[:])
}

// Claim is the value of a natural key's entry: the run that holds the input.
type Claim struct {
	RunID      string `json:"run_id"`
	NaturalKey string `json:"natural_key"`
	ClaimedAt  string `json:"claimed_at"`
}

// claimInput claims the natural key of params for runID with Create, before the run's record
// is created, and returns the run id that holds it: runID, or the run that has this input
// already. A claim naming runID itself is a retry of the same start (a crash between the
// claim and the record): it proceeds. A claim stands for another run id while that run's
// record is missing (its start is under way) or has this input; a claim whose run exists
// with other input was left by a start refused for its parameters, and is taken over; so is
// the claim of a run undone in full, whose effects are all reversed: its input may be run again.
func (s *Supervisor) claimInput(ctx context.Context, runID string, params kc.Params) (holder string, rev uint64, err error) {
	natural := NaturalKey(s.cfg.Pipeline, params)
	key := NaturalKeyEntry(natural)
	value, err := json.Marshal(Claim{RunID: runID, NaturalKey: natural, ClaimedAt: s.stamp()})
	if err != nil {
		return "", 0, err
	}
	kv := s.cfg.NaturalKeys
	for {
		rev, err := kv.Create(ctx, key, value)
		if err == nil {
			return s.earlierHolder(ctx, runID, natural, key, rev)
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return "", 0, fmt.Errorf("claiming %q for run %s: %w", natural, runID, err)
		}
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // released in between
		}
		if err != nil {
			return "", 0, fmt.Errorf("reading the claim on %q: %w", natural, err)
		}
		var c Claim
		if err := json.Unmarshal(e.Value(), &c); err != nil || c.RunID == "" {
			return "", 0, fmt.Errorf("the claim on %q (entry %s of %s) is unreadable: %q", natural, key, kv.Bucket(), e.Value())
		}
		if c.RunID == runID {
			return runID, e.Revision(), nil
		}
		rec, _, err := s.cfg.Store.Load(ctx, c.RunID)
		if err != nil || (holds(rec) && NaturalKey(s.cfg.Pipeline, rec.Params) == natural) {
			// Missing: its start is under way. Not trusted: it exists. Either way it holds.
			return c.RunID, e.Revision(), nil
		}
		rev, err = kv.Update(ctx, key, value, e.Revision())
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // changed in between: read it again
		}
		if err != nil {
			return "", 0, fmt.Errorf("taking over the stale claim on %q: %w", natural, err)
		}
		return runID, rev, nil
	}
}

// holds reports whether a run keeps its input from another run id: every run but one undone
// in full (a scoped undo leaves the rest of the run standing, and the run's status with it).
func holds(r *kc.Record) bool { return r.Status != kc.Undone }

// earlierHolder: a claim just made is runID's unless a run of an earlier release, which
// claimed nothing, has the same input; then the claim is handed to that run.
func (s *Supervisor) earlierHolder(ctx context.Context, runID, natural, key string, rev uint64) (string, uint64, error) {
	s.mu.Lock()
	var other string
	for id, w := range s.runs {
		if id != runID && holds(w.rec) && NaturalKey(s.cfg.Pipeline, w.rec.Params) == natural && (other == "" || id < other) {
			other = id
		}
	}
	s.mu.Unlock()
	if other == "" {
		return runID, rev, nil
	}
	value, err := json.Marshal(Claim{RunID: other, NaturalKey: natural, ClaimedAt: s.stamp()})
	if err != nil {
		return "", 0, err
	}
	rev, err = s.cfg.NaturalKeys.Update(ctx, key, value, rev)
	if err != nil {
		return "", 0, fmt.Errorf("handing the claim on %q to run %s: %w", natural, other, err)
	}
	return other, rev, nil
}

// releaseInput gives up runID's claim made at rev, for a start refused after it claimed (its
// run id turned out to exist with other input). A crash before the release leaves a claim
// that the next start of that input takes over.
func (s *Supervisor) releaseInput(ctx context.Context, params kc.Params, rev uint64) error {
	key := NaturalKeyEntry(NaturalKey(s.cfg.Pipeline, params))
	err := s.cfg.NaturalKeys.Delete(ctx, key, jetstream.LastRevision(rev))
	if err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return fmt.Errorf("releasing the claim on %q: %w", NaturalKey(s.cfg.Pipeline, params), err)
	}
	return nil
}

// describeInput is the input of a run in a sentence.
func describeInput(d pipeline.Definition, p kc.Params) string {
	var parts []string
	for _, k := range inputOrder(d, p) {
		parts = append(parts, k+" "+memberText(p, k))
	}
	s := strings.Join(parts, ", ")
	if p.Shadow {
		s += ", shadow"
	}
	return s
}
