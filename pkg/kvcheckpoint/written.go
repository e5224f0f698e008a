package kvcheckpoint

import (
	"context"
	"sync"
)

// maxWritten bounds how many runs' last records a store remembers.
const maxWritten = 4096

// written remembers the record this store last wrote for each run, so that a step that
// this process's own commit scheduled need not read it back (LoadAt).
type written struct {
	mu sync.Mutex
	m  map[string]writtenRecord
	// commits is, per run, the revision of the last commit this process goes on from
	// itself (MarkCommit).
	commits map[string]uint64
}

type writtenRecord struct {
	rev uint64
	rec *Record
}

// put remembers rec (a copy) as the run's record at rev.
func (w *written) put(runID string, rev uint64, rec *Record) {
	c := rec.Clone()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]writtenRecord{}
	}
	if len(w.m) >= maxWritten {
		for k := range w.m { // forget one at random
			delete(w.m, k)
			break
		}
	}
	if old, ok := w.m[runID]; !ok || old.rev < rev {
		w.m[runID] = writtenRecord{rev: rev, rec: c}
	}
}

// take returns and forgets the run's record at rev, if that is the one remembered.
func (w *written) take(runID string, rev uint64) (*Record, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[runID]
	if !ok || e.rev != rev {
		return nil, false
	}
	delete(w.m, runID)
	return e.rec, true
}

// LoadAt returns the run's record at revision rev without reading it when this store wrote
// that revision itself: a step that a commit of this process scheduled (its event names
// the revision). Otherwise it loads the latest record, as Load. remembered says which.
//
// A remembered record may be older than the latest, when another process wrote after it.
// Every write is a compare-and-set, so a write based on it is refused and re-reads; use it
// only where that is so (a step's first read: a lease take, a lease-free commit).
func (s *Store) LoadAt(ctx context.Context, runID string, rev uint64) (rec *Record, at uint64, remembered bool, err error) {
	if rev != 0 {
		if r, ok := s.written.take(runID, rev); ok {
			return r, rev, true, nil
		}
	}
	rec, at, err = s.Load(ctx, runID)
	return rec, at, false, err
}

// MarkCommit says that revision rev of the run, which this store wrote, is a commit that
// this process goes on from itself: the step it scheduled runs here, without a break (the
// runner's drift rule). A later mark of the run replaces it.
func (s *Store) MarkCommit(runID string, rev uint64) {
	w := &s.written
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.commits == nil {
		w.commits = map[string]uint64{}
	}
	if _, ok := w.commits[runID]; !ok && len(w.commits) >= maxWritten {
		for k := range w.commits { // forget one at random: its next step counts as a break
			delete(w.commits, k)
			break
		}
	}
	w.commits[runID] = rev
}

// CommittedHere reports whether revision rev of the run is the last commit marked by
// MarkCommit in this store: a record read at that revision has not changed since this
// process committed it.
func (s *Store) CommittedHere(runID string, rev uint64) bool {
	w := &s.written
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.commits[runID]
	return ok && rev != 0 && at == rev
}
