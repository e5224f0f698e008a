package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/faults"
)

// ErrNoMemo: the runner was given no memo bucket (Config.Memo), so a step cannot memoise.
var ErrNoMemo = errors.New("the runner has no memo bucket (Config.Memo)")

// memoEvent is the timeline's event of a memoised call made (Attempt.Memo): it is recorded
// before the call, so a paid call is counted even when the process dies during it.
const memoEvent = "memo.called"

// memoKey is what an attempt knows of one key it gave Memo: its number among the attempt's
// keys (its fault points') and the calls made for it (the timeline's try).
type memoKey struct{ n, tries int }

// Memo returns the answer saved under key for this run, or makes call, saves its answer
// under key and returns it: a call answered once is never made again in the run, by this
// attempt or any later one (a restart, a takeover). The answer is saved in the memo bucket
// as <run_id>.<key> (key: letters, digits, '-', '_', '=' and '.' separated tokens), word for
// word. Each call is recorded on the timeline (memoEvent, item key, the attempt's try of
// the key) before it is made, after a slot of the step's declared rate limit (Config.Limit),
// if it has one. The attempt's Memo calls are its item loop's fault points:
// faults.BeforeWrite before a call is made and faults.AfterWrite once an answer is saved
// or found, numbered from 1 by the attempt's keys in the order first asked (a retry of a key
// keeps its number). An
// error of call is returned as it is and saves nothing (wrap it with Temporary for one
// worth retrying; Attempt.Retry retries in the attempt). When two attempts raced past the
// read, the first answer saved stands and is returned to both.
func (a *Attempt) Memo(ctx context.Context, key string, call func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	kv := a.r.cfg.Memo
	if kv == nil {
		return nil, ErrNoMemo
	}
	full := a.RunID + "." + key
	a.memoMu.Lock()
	if a.memoKeys == nil {
		a.memoKeys = map[string]*memoKey{}
	}
	mk := a.memoKeys[key]
	if mk == nil {
		mk = &memoKey{n: len(a.memoKeys) + 1}
		a.memoKeys[key] = mk
	}
	n := mk.n
	a.memoMu.Unlock()
	if e, err := kv.Get(ctx, full); err == nil {
		return e.Value(), a.Fault(ctx, faults.AfterWrite, n)
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, Temporary(fmt.Errorf("reading memo %q: %w", full, err))
	}
	a.memoMu.Lock()
	try := mk.tries
	mk.tries++
	a.memoMu.Unlock()
	if err := a.Fault(ctx, faults.BeforeWrite, n); err != nil {
		return nil, err
	}
	if l := a.r.cfg.Limit; l != nil {
		if _, err := l.Wait(ctx); err != nil {
			return nil, Temporary(fmt.Errorf("waiting for the rate limit of %s: %w", a.Step, err))
		}
	}
	if err := a.AuditNow(ctx, memoEvent, key, try, nil); err != nil {
		return nil, Temporary(err)
	}
	answer, err := call(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := kv.Create(ctx, full, answer); err == nil {
		return answer, a.Fault(ctx, faults.AfterWrite, n)
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return nil, Temporary(fmt.Errorf("saving memo %q: %w", full, err))
	}
	e, err := kv.Get(ctx, full)
	if err != nil {
		return nil, Temporary(fmt.Errorf("reading memo %q: %w", full, err))
	}
	if !bytes.Equal(e.Value(), answer) {
		a.log.Warn("another attempt memoised a different answer first; it stands", slog.String("memo", full))
	}
	return e.Value(), a.Fault(ctx, faults.AfterWrite, n)
}

// Hold holds the step's declared rate limit (Config.Limit) for d, for every instance at
// once: what an outside system's Retry-After asks (ratelimit.Limiter.Hold). With no limit
// declared it does nothing.
func (a *Attempt) Hold(ctx context.Context, d time.Duration) error {
	if l := a.r.cfg.Limit; l != nil {
		return l.Hold(ctx, d)
	}
	return nil
}

// Memoised counts the answers memoised for this run whose keys (as given to Memo) start with
// prefix: "" counts all, "classify" or "classify." every key of the tokens classify.…, and
// "classify.inv-" every key classify.inv-… . The bucket is asked only for the keys of
// prefix's whole tokens; a last partial token is compared as a string. A step's progress
// (ProgressCounter) when its work is memoised calls.
func (a *Attempt) Memoised(ctx context.Context, prefix string) (int, error) {
	kv := a.r.cfg.Memo
	if kv == nil {
		return 0, ErrNoMemo
	}
	whole, _ := cutLastToken(prefix)
	filter := a.RunID + ".>"
	if whole != "" {
		filter = a.RunID + "." + whole + ".>"
	}
	l, err := kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return 0, fmt.Errorf("listing memo keys %s: %w", filter, err)
	}
	defer func() { _ = l.Stop() }()
	n := 0
	for k := range l.Keys() {
		if strings.HasPrefix(k, a.RunID+"."+prefix) {
			n++
		}
	}
	return n, nil
}

// cutLastToken splits prefix into its whole dot-separated tokens and what follows the last
// dot: "a.b.c" is "a.b" and "c", "a.b." is "a.b" and "", "abc" is "" and "abc".
func cutLastToken(prefix string) (whole, partial string) {
	i := strings.LastIndexByte(prefix, '.')
	if i < 0 {
		return "", prefix
	}
	return prefix[:i], prefix[i+1:]
}
