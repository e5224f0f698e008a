package kvcheckpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairnhq/cairn/pkg/identity"
)

// Bucket is the default name of the checkpoint bucket.
const Bucket = "cairn-runs"

// EpochKey is the bucket stream's metadata key holding the epoch.
const EpochKey = "cairn.epoch"

// Store reads and writes checkpoint records in a KV bucket. Every write is a compare-and-set,
// and every write stores the record in the current Schema with updated_at set, and
// progressed_at when it is progress (Progressed).
type Store struct {
	nc     *nats.Conn
	kv     jetstream.KeyValue
	stream jetstream.Stream // the bucket's stream: reads that keep the message's headers (history.go)
	bucket string
	epoch  string
	now    func() time.Time
	api    string           // the JetStream API's subject prefix, "$JS.API." unless a domain or prefix says
	steps  []string         // the pipeline every record must have (WithPipeline); nil: any
	signer *identity.Signer // nil: records are written unsigned
	ring   *identity.Ring   // nil: records read are not checked (sign.go)
	roles  Roles
	mover  Mover // nil: a write over MaxSize only gives up diagnostics (Fit); see Moving

	// Shared by the stores As makes of this one.
	conflicts *atomic.Int64
	written   *written
}

// Option changes how a Store behaves.
type Option func(*Store)

// WithClock sets the clock of updated_at, progressed_at and approval.since (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(s *Store) {
		if now != nil {
			s.now = now
		}
	}
}

// WithPipeline makes every record read from the bucket have exactly these steps, in order
// (the pipeline definition the reader runs): any other is ErrCorrupt and ErrInvariant.
func WithPipeline(steps []string) Option {
	return func(s *Store) { s.steps = slices.Clone(steps) }
}

// Mover stores an inline output's bytes as an object of the artifact store (the same bytes,
// digest and size, under the step that made it) and returns its pointer. Storing the same
// bytes again returns the same pointer.
type Mover func(ctx context.Context, runID, step string, inline []byte) (*Output, error)

// Moving is s, its writes moving the verified steps' inline outputs to the artifact store
// with m when a record would exceed MaxSize (the budget's promise counts them as movable: see
// budget.go). Every store that writes records whose steps keep outputs inline needs one.
func (s *Store) Moving(m Mover) *Store {
	c := s.As(s.signer)
	c.mover = m
	return c
}

// Moves reports whether the store's writes move inline outputs for room (Moving).
func (s *Store) Moves() bool { return s.mover != nil }

// Open looks up the bucket and its epoch. The bucket must exist (cairn init creates it).
func Open(ctx context.Context, js jetstream.JetStream, bucket string, opts ...Option) (*Store, error) {
	if bucket == "" {
		bucket = Bucket
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("looking up bucket %q: %w", bucket, err)
	}
	stream, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("looking up bucket %q's stream: %w", bucket, err)
	}
	epoch := stream.CachedInfo().Config.Metadata[EpochKey]
	if epoch == "" {
		return nil, fmt.Errorf("bucket %q: %w", bucket, ErrNoEpoch)
	}
	s := &Store{nc: js.Conn(), kv: kv, stream: stream, bucket: bucket, epoch: epoch, now: time.Now, api: apiPrefix(js.Options()), roles: DefaultRoles,
		conflicts: &atomic.Int64{}, written: &written{}}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Epoch is the bucket's epoch, which every record carries.
func (s *Store) Epoch() string { return s.epoch }

// Conflicts counts the compare-and-set writes this store saw refused because another writer
// had changed the record first.
func (s *Store) Conflicts() int64 { return s.conflicts.Load() }

// KV is the underlying bucket, for watchers.
func (s *Store) KV() jetstream.KeyValue { return s.kv }

// Create writes the first record of a run; ErrExists when the run has one already.
func (s *Store) Create(ctx context.Context, r *Record) (uint64, error) {
	s.stamp(nil, r, 0)
	r.Epoch = s.epoch
	b, size, err := encodeSized(r, s.signer)
	if err != nil {
		return 0, err
	}
	rev, err := s.kv.Create(ctx, r.RunID, b)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("creating checkpoint %q: %w", r.RunID, ErrExists)
	}
	if err != nil {
		return 0, fmt.Errorf("creating checkpoint %q: %w", r.RunID, err)
	}
	s.written.put(r.RunID, rev, r, size)
	return rev, nil
}

// Load returns the latest record and its revision. A record whose sum does not match is
// ErrCorrupt, one of another epoch ErrForeignEpoch, one of a later schema ErrNewerSchema;
// none is ever written back.
func (s *Store) Load(ctx context.Context, runID string) (*Record, uint64, error) {
	r, rev, _, err := s.load(ctx, runID)
	return r, rev, err
}

func (s *Store) load(ctx context.Context, runID string) (*Record, uint64, []byte, error) {
	m, err := s.stream.GetLastMsgForSubject(ctx, s.subject(runID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil, fmt.Errorf("loading checkpoint %q: %w", runID, ErrNotFound)
	}
	if err != nil {
		return nil, 0, nil, fmt.Errorf("loading checkpoint %q: %w", runID, err)
	}
	if op := m.Header.Get("KV-Operation"); op != "" {
		return nil, 0, nil, fmt.Errorf("loading checkpoint %q: %w", runID, ErrNotFound)
	}
	st := revision{value: m.Data, rev: m.Sequence}
	st.over, st.known = over(m.Header)
	r, err := s.decodeStoredMsg(ctx, runID, st)
	return r, st.rev, st.value, err
}

// DecodeEntry decodes the value of key at revision rev as the store reads it: its sum, its
// invariants (Record.Check, with the store's pipeline), its epoch, its signature (Check) and
// its history (history.go: the entry's stored header is read once more, as a watcher's
// entry has none; a watch loop that sees every revision uses DecodeWatched instead).
func (s *Store) DecodeEntry(ctx context.Context, key string, b []byte, rev uint64) (*Record, error) {
	r, schema, err := s.decodeValue(key, b)
	if err != nil {
		return nil, err
	}
	st := revision{value: b, rev: rev}
	if s.ring != nil {
		if st, err = s.storedAt(ctx, key, rev); err != nil {
			return nil, err
		}
	}
	return s.checked(ctx, r, schema, st)
}

// decodeStoredMsg decodes and checks a record as stored.
func (s *Store) decodeStoredMsg(ctx context.Context, runID string, st revision) (*Record, error) {
	r, schema, err := s.decodeValue(runID, st.value)
	if err != nil {
		return nil, err
	}
	return s.checked(ctx, r, schema, st)
}

// decodeValue decodes b as the record of runID: its sum, its invariants, its epoch.
func (s *Store) decodeValue(runID string, b []byte) (*Record, int, error) {
	r, schema, err := decodeStored(b)
	if err == nil {
		err = r.Check(runID, s.steps)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("loading checkpoint %q: %w", runID, err)
	}
	if r.Epoch != s.epoch {
		return nil, 0, fmt.Errorf("loading checkpoint %q: epoch %q, bucket's %q: %w", runID, r.Epoch, s.epoch, ErrForeignEpoch)
	}
	return r, schema, nil
}

// checked is r, once its signature (Check) and history (checkHistory) hold.
func (s *Store) checked(ctx context.Context, r *Record, schema int, st revision) (*Record, error) {
	if err := s.Check(ctx, r, st.rev); err != nil {
		return nil, fmt.Errorf("loading checkpoint %q: %w", r.RunID, err)
	}
	if err := s.checkHistory(r, schema, st); err != nil {
		return nil, fmt.Errorf("loading checkpoint %q: %w", r.RunID, err)
	}
	if err := s.checkApproval(ctx, r, schema); err != nil {
		return nil, fmt.Errorf("loading checkpoint %q: %w", r.RunID, err)
	}
	return r, nil
}

// LoadAuthoritative reads the record from the stream leader (never a direct get that a
// replica may answer stale).
func (s *Store) LoadAuthoritative(ctx context.Context, runID string) (*Record, uint64, error) {
	last, err := s.leaderGet(ctx, msgGet{LastBySubject: s.subject(runID)})
	if err != nil {
		return nil, 0, fmt.Errorf("reading checkpoint %q from the leader: %w", runID, err)
	}
	if last == nil || last.op != "" {
		return nil, 0, fmt.Errorf("reading checkpoint %q from the leader: %w", runID, ErrNotFound)
	}
	r, err := s.decodeStoredMsg(ctx, runID, *last)
	return r, last.rev, err
}

// Mutate applies fn to the latest record and writes it by compare-and-set, re-reading and
// re-applying on a conflict. It is for writers that hold no lease (supervisor, commands):
// fn must copy the lease unchanged and write its own fields as absolute values. fn returning
// ErrSkip writes nothing and Mutate returns the record read with ErrSkip.
func (s *Store) Mutate(ctx context.Context, runID string, fn func(r *Record) error) (*Record, uint64, error) {
	return s.MutateFrom(ctx, nil, 0, runID, fn)
}

// MutateFrom is Mutate starting from a record already read at rev (nil: read it first), so a
// writer that has just read the record pays no second read when nothing changed in between.
func (s *Store) MutateFrom(ctx context.Context, cur *Record, rev uint64, runID string, fn func(r *Record) error) (*Record, uint64, error) {
	for {
		if cur == nil {
			var err error
			cur, rev, _, err = s.load(ctx, runID)
			if err != nil {
				return nil, 0, err
			}
		}
		next := cur.Clone()
		if err := fn(next); err != nil {
			return cur, rev, err
		}
		s.stamp(cur, next, rev)
		b, size, err := s.encodeFit(ctx, next)
		if err != nil {
			return nil, 0, err
		}
		wctx, cancel := context.WithTimeout(ctx, writeTimeout)
		newRev, err := s.kv.Update(wctx, runID, b, rev)
		cancel()
		if err == nil {
			s.written.put(runID, newRev, next, size)
			return next, newRev, nil
		}
		if !s.retryable(err) {
			return nil, 0, fmt.Errorf("writing checkpoint %q: %w", runID, err)
		}
		if landed, r, lrev, _ := s.since(ctx, runID, rev, b); landed {
			return r, lrev, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		cur = nil
	}
}

// since re-reads after an ambiguous or refused write made on revision after: it reports
// whether the bytes written are among the key's revisions since (the write landed, though
// others may have written after it) and returns the latest record.
func (s *Store) since(ctx context.Context, runID string, after uint64, written []byte) (landed bool, latest *Record, rev uint64, err error) {
	hist, err := s.revisions(ctx, runID, after)
	if err != nil {
		return false, nil, 0, fmt.Errorf("re-reading checkpoint %q: %w", runID, err)
	}
	for _, e := range hist {
		if bytes.Equal(e.value, written) && e.op == "" {
			landed = true
		}
	}
	if len(hist) == 0 {
		last, err := s.leaderGet(ctx, msgGet{LastBySubject: s.subject(runID)})
		if err != nil {
			return false, nil, 0, fmt.Errorf("re-reading checkpoint %q: %w", runID, err)
		}
		if last == nil {
			return false, nil, 0, fmt.Errorf("re-reading checkpoint %q: %w", runID, ErrNotFound)
		}
		hist = append(hist, *last)
	}
	last := hist[len(hist)-1]
	if last.op != "" {
		return landed, nil, 0, fmt.Errorf("re-reading checkpoint %q: %w", runID, ErrNotFound)
	}
	latest, err = s.decodeStoredMsg(ctx, runID, last)
	return landed, latest, last.rev, err
}

// revisionsLimit bounds how many of a key's revisions since a write a re-read goes through:
// more than the bucket keeps of one key.
const revisionsLimit = 256

// revision is one stored revision of a key: op is "" for a put, else KV-Operation's DEL or
// PURGE.
type revision struct {
	rev   uint64
	op    string
	value []byte
	over  uint64 // the revision the server checked it was written over (history.go)
	known bool   // over is known: the write was a compare-and-set (a watcher's memory counts too)
}

// revisions returns runID's revisions after revision after, oldest first, each read from the
// stream's leader by STREAM.MSG.GET with next_by_subj: what a service's user may do
// (deploy/nats/accounts.conf), where a History needs a consumer, and never from a replica
// that may lag behind the write being looked for.
func (s *Store) revisions(ctx context.Context, runID string, after uint64) ([]revision, error) {
	var out []revision
	for seq := after + 1; len(out) < revisionsLimit; {
		r, err := s.leaderGet(ctx, msgGet{Seq: seq, NextBySubject: s.subject(runID)})
		if err != nil || r == nil {
			return out, err
		}
		out = append(out, *r)
		seq = r.rev + 1
	}
	return out, nil
}

// subject is runID's subject in the bucket's stream.
func (s *Store) subject(runID string) string { return "$KV." + s.bucket + "." + runID }

// msgGet is a STREAM.MSG.GET request.
type msgGet struct {
	Seq           uint64 `json:"seq,omitempty"`
	NextBySubject string `json:"next_by_subj,omitempty"`
	LastBySubject string `json:"last_by_subj,omitempty"`
}

// errNoMessage is the JetStream API's error code for "no message found".
const errNoMessage = 10037

// leaderGet asks the stream's leader for one message; nil when there is none.
func (s *Store) leaderGet(ctx context.Context, req msgGet) (*revision, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	m, err := s.nc.RequestWithContext(rctx, s.api+"STREAM.MSG.GET.KV_"+s.bucket, body)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Seq    uint64 `json:"seq"`
			Header []byte `json:"hdrs"`
			Data   []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, fmt.Errorf("reading a stream message: %w", err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == errNoMessage:
		return nil, nil
	case resp.Error != nil:
		return nil, fmt.Errorf("reading a stream message: %s (%d)", resp.Error.Description, resp.Error.ErrCode)
	case resp.Message == nil:
		return nil, errors.New("reading a stream message: an answer without a message")
	}
	r := &revision{rev: resp.Message.Seq, value: resp.Message.Data}
	if len(resp.Message.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Header)
		if err != nil {
			return nil, fmt.Errorf("reading a stream message's headers: %w", err)
		}
		r.op = h.Get("KV-Operation")
		r.over, r.known = over(h)
	}
	return r, nil
}

// apiPrefix is the subject prefix of o's JetStream API.
func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return "$JS.API."
}

// retryable: a lost compare-and-set (counted) or an answer that never came; both mean re-read.
func (s *Store) retryable(err error) bool {
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		s.conflicts.Add(1)
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse)
}

// writeTimeout bounds one compare-and-set so that a lost reply turns into a re-read.
const writeTimeout = 5 * time.Second
