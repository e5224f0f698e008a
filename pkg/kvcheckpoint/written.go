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
}

type writtenRecord struct {
	rev  uint64
	rec  *Record
	size int // rec's Size as written (0: unknown)
}

// put remembers rec (a copy) as the run's record at rev, of Size size (0: unknown).
func (w *written) put(runID string, rev uint64, rec *Record, size int) {
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
		w.m[runID] = writtenRecord{rev: rev, rec: c, size: size}
	}
}

// take returns and forgets the run's record at rev and its size, if that is the one
// remembered.
func (w *written) take(runID string, rev uint64) (*Record, int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[runID]
	if !ok || e.rev != rev {
		return nil, 0, false
	}
	delete(w.m, runID)
	return e.rec, e.size, true
}

// LoadAt returns the run's record at revision rev without reading it when this store wrote
// that revision itself: a step that a commit of this process scheduled (its event names
// the revision). Otherwise it loads the latest record, as Load. remembered says which; size
// is a remembered record's Size as written (0 otherwise), which StepRoomSized measures its
// room with, without encoding it again (the record's as returned, before any change to it).
//
// A remembered record may be older than the latest, when another process wrote after it.
// Every write is a compare-and-set, so a write based on it is refused and re-reads; use it
// only where that is so (a step's first read: a lease take, a lease-free commit).
func (s *Store) LoadAt(ctx context.Context, runID string, rev uint64) (rec *Record, at uint64, remembered bool, size int, err error) {
	if rev != 0 {
		if r, n, ok := s.written.take(runID, rev); ok {
			return r, rev, true, n, nil
		}
	}
	rec, at, err = s.Load(ctx, runID)
	return rec, at, false, 0, err
}
