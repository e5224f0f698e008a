package kvcheckpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cairnhq/cairn/pkg/events"
)

// The record's budget. A record is at most MaxSize bytes whatever the size of the run: what a
// step writes inline (an output, its listed parked items) goes in only while the record keeps
// room for everything that may still be written to it. [Room] measures that room on the
// record's actual encoding, against a projection of the record at its fullest:
//
//   - every step not yet verified committed, its outputs as objects (pointers of the longest
//     names the artifact store gives), with long timestamps, versions, tokens and counts;
//   - the current step failed with a last_error of MaxLastError bytes, and the run handed
//     over (the note's id, the handover's next action);
//   - a lease, a snapshot pointer, an approval and an undo in progress, where the record has
//     none yet, and sixteen command ids as long as RequestKey's digest of a long one;
//   - the commands waiting now (a further one is refused by [Record.Wait] when it would leave
//     the current step no room, so a waiting command never crowds out a failure);
//   - a margin (slack) for what a projection cannot know, such as a parking step's
//     parked_artifact.
//
// A commit keeps a snapshot inline only while Room stays ≥ 0. [StepRoom] is the same
// projection for one step alone, the diagnostics of the verified
// steps given up as [Fit] would and their inline outputs counted as objects: a step checks it
// before any outside effect and hands the run over rather than do what its commit could not
// record. [CommandRoom] counts the inline outputs as objects too. An inline output is room
// lent, not spent: a write that would exceed MaxSize first moves the verified steps' inline
// outputs to the artifact store, the largest first, while it is over (a Store Moving them: a
// pointer of the same digest takes the output's place, nothing is lost), then gives up
// diagnostics ([Fit]): last_error texts, then parked lists that an artifact holds in full.
// So outputs stay inline, and a run's transitions store nothing but their commits, until
// the one write that needs their room (measured: `cairn bench transitions`, ten steps of
// 200-byte outputs, went from 1.8 artifact messages a transition to none), and that write,
// a failure's or a commit's, still fits.

// MaxKeptError bounds the last_error a verified step keeps, in bytes: the note of an earlier
// failure, kept short.
const MaxKeptError = 160

// MaxNextAction bounds the next_action a step sets, in bytes.
const MaxNextAction = 256

// NextActionRoom is the longest next_action the budget keeps room for in run runID's record:
// MaxNextAction, or a handover's, which names the run three times.
func NextActionRoom(runID string) int { return max(MaxNextAction, 96+3*len(runID)) }

// MaxCodeVersion bounds a step's versions.code in bytes (the runner refuses a longer one).
const MaxCodeVersion = 24

// Figures of the projection: the longest values the commits, failures and other writers'
// bookkeeping put in a record (tests hold them to the writers' real values).
const (
	stampLen       = 35 // RFC 3339 with nanoseconds and a zone offset
	codeLen        = MaxCodeVersion
	versionLen     = 16
	fingerprint    = len("sha256:") + 64
	digestLen      = len("SHA-256=") + 44
	objectNameLen  = 2 + 64 // <run>/<step>/<sha256 hex>, without the run and the step
	ownerLen       = 96
	inboxLen       = 64
	writeIDLen     = 2 + 22
	requestLen     = len("sha256:") + 32    // a long request id as RequestKey keeps it
	handoverTail   = len(":handover:") + 24 // <run>:handover:<step>:<token or reason>
	planByLen      = events.MaxName         // approve's by, as the supervisor bounds it
	approvalSigLen = 86                     // an approver's ed25519 signature, unpadded base64
	scopeLen       = 96
	bigCount       = 9_999_999
	bigToken       = 999_999_999_999
	bigSize        = 999_999_999_999
	maxRequests    = 16
	slack          = 192
)

// Size is the length of r as a Store stores it, signed (with room for the longest
// signature), even over MaxSize. The length is known without the sum, which has a fixed
// length, or the stored bytes: the canonical form, which is the stored one but for the sum
// and the embedded values (storedLen). A record the straight writer does not take is
// measured by encoding it (sizeEncoded).
func Size(r *Record) (int, error) {
	c := getCanonical()
	defer putCanonical(c)
	if c.canonicalRecord(r) {
		return c.storedLen(sumLen) + signatureRoom, nil
	}
	return sizeEncoded(r)
}

// OutputSize is the length of o as a record stores it (a step's output, a snapshot): what a
// record's size changes by when one output takes the place of another.
func OutputSize(o *Output) int {
	c := getCanonical()
	defer putCanonical(c)
	c.out, c.verbatim = c.out[:0], c.verbatim[:0]
	if c.output(o) {
		return c.writtenLen()
	}
	b, _ := json.Marshal(o)
	return len(b)
}

// sumLen is the length of a record's sum: "sha256:" and 64 hex digits.
const sumLen = len("sha256:") + 64

// sizeEncoded is Size by Encode.
func sizeEncoded(r *Record) (int, error) {
	sum, sig := r.Sum, r.Sig
	defer func() { r.Sum, r.Sig = sum, sig }()
	b, err := Encode(r)
	if err == nil {
		return len(b) + signatureRoom, nil
	}
	var big *tooLarge
	if asTooLarge(err, &big) {
		return big.size + signatureRoom, nil
	}
	return 0, err
}

// Room is how many bytes r can still take in while every step not yet verified can commit
// with its outputs as objects and the current step can fail and be handed over, within
// MaxSize. Negative: r is already too full for that.
func Room(r *Record) int {
	p := projection(r)
	ahead := make([]string, 0, len(p.Pipeline))
	for _, s := range p.Pipeline {
		if p.Step(s).Status != Verified {
			ahead = append(ahead, s)
		}
	}
	return room(p, ahead, true) - slack
}

// CommandRoom is what is left once the current step commits, or fails and is handed over,
// with what writers other than the steps may still add (an approval, an undo, more command
// ids): the room a command's effect must leave. Unlike Room it does not count the steps after
// the current one: each of them checks its own room (StepRoom) before any outside effect, so
// a rerun or a resume --after-fix of a whole run is not refused for what they may write. The
// verified steps' inline outputs count as objects, as StepRoom's.
func CommandRoom(r *Record) int {
	p := projection(r)
	lent(p)
	var ahead []string
	if c := p.Current(); c != "" && p.Index(c) >= 0 {
		ahead = []string{c}
	}
	return room(p, ahead, true) - slack
}

// StepRoom is what is left once step commits with its outputs as objects, fails and is
// handed over: the step's own writes, the steps after it and other writers not counted, the
// verified steps' diagnostics given up (as Fit would) and their inline outputs moved out (as
// a Store Moving them does). A step checks it before any outside
// effect: negative means the record could not take what the step would write.
func StepRoom(r *Record, step string) int {
	return StepRoomSized(r, step, 0)
}

// StepRoomSized is StepRoom of a record whose Size is known (a Store's LoadAt gives it for
// a record this store wrote), without encoding the record again; size 0 is unknown.
func StepRoomSized(r *Record, step string, size int) int {
	if n, ok := stepRoomBySize(r, step, size); ok {
		return n
	}
	return stepRoomProjected(r, step)
}

// stepRoomProjected is StepRoom on the projected record (projection, then room).
func stepRoomProjected(r *Record, step string) int {
	p := projection(r)
	for _, s := range p.Pipeline {
		if st := p.Step(s); st.Status == Verified {
			st.LastError = nil
			if st.ParkedArtifact != nil {
				st.Parked = []Parked{}
			}
		}
	}
	lent(p)
	if p.Index(step) < 0 {
		return room(p, nil, false)
	}
	return room(p, []string{step}, false)
}

// stepRoomBySize is StepRoom without the projected record: the record's own size plus what
// the projection changes, field by field. Every field of the canonical form is written
// whatever its value (only an output's inline and object are left out when empty, and
// those are measured as whole outputs), so the size of the projection is the record's with
// each changed field's written length replaced by its projected one; the fields are the
// ones projectFullest (others false) and StepRoom's giving up of diagnostics change, and the
// steps' projected values are made by the same project and grow. ok false when the record
// takes the general path (canonicalRecord gives up): StepRoom then projects. A test holds
// it to stepRoomProjected exactly.
func stepRoomBySize(r *Record, step string, size int) (int, bool) {
	c := getCanonical()
	defer putCanonical(c)
	n := size
	if n <= 0 {
		if !c.canonicalRecord(r) {
			return 0, false
		}
		n = c.storedLen(sumLen) + signatureRoom
	}
	longest := len("undo")
	for _, s := range r.Pipeline {
		longest = max(longest, len(s))
	}
	in := r.Index(step) >= 0
	current := step
	if !in {
		current = ""
		if len(r.Pipeline) > 0 {
			current = r.Pipeline[len(r.Pipeline)-1]
		}
	}
	for i, name := range r.Pipeline {
		if slices.Index(r.Pipeline[:i], name) >= 0 {
			continue // one step, changed once
		}
		s := r.Step(name)
		lend := s.Status == Verified && movable(r.RunID, name, s.Output)
		if name != current && (s.Status != Verified || s.LastError == nil && s.ParkedArtifact == nil && !lend) {
			continue // unchanged (when in, current is step)
		}
		if name != current && s.LastError == nil && s.ParkedArtifact == nil {
			// A verified step whose inline output alone is lent: the pointer's length for the
			// output's, the rest unchanged.
			n += pointerLen(r.RunID, name) - c.outputLen(s.Output)
			continue
		}
		old, p := *s, *s
		if s.Status == Verified {
			p.LastError = nil
			if p.ParkedArtifact != nil {
				p.Parked = []Parked{}
			}
			if movable(r.RunID, name, p.Output) {
				p.Output = objectPointer(r.RunID, len(name))
			}
		}
		if in && name == step {
			project(r, &p, name)
		}
		lastError := c.strPtrLen(p.LastError)
		if name == current { // grow's padding, measured without making it
			lastError = c.grownLen(p.LastError, MaxLastError)
		}
		n += lastError - c.strPtrLen(old.LastError)
		if p.Output != old.Output {
			n += c.outputLen(p.Output) - c.outputLen(old.Output)
		}
		old.Output, p.Output, old.LastError, p.LastError = nil, nil, nil, nil
		n += c.stepLen(&p) - c.stepLen(&old)
	}
	// The record's own fields, as projectFullest sets them.
	n += c.stringLen(string(WaitingApproval)) - c.stringLen(string(r.Status))
	n += c.grownLen(r.Handover, len(r.RunID)+handoverTail) - c.strPtrLen(r.Handover)
	n += c.grownLen(&r.NextAction, NextActionRoom(r.RunID)) - c.stringLen(r.NextAction)
	n += intLen(max(r.Restarts, bigCount)) - intLen(r.Restarts)
	n += intLen(max(r.Generation, bigCount)) - intLen(r.Generation)
	if r.SourceFingerprint == nil {
		n += c.grownLen(nil, fingerprint) - len("null")
	}
	if r.Snapshot == nil {
		n += c.outputLen(objectPointer(r.RunID, longest)) - len("null")
	}
	n += c.leaseLen(projectLease(r.Lease, longest)) - c.leaseLen(r.Lease)
	n += c.progressLen(&Progress{Step: strings.Repeat("s", longest), Count: bigCount, NoProgress: bigCount}) - c.progressLen(r.Progress)
	return MaxSize - n, true
}

// The written lengths of one field's value, on c's buffers (which they reset).

func (c *canonical) reset() { c.out, c.verbatim = c.out[:0], c.verbatim[:0] }

func (c *canonical) stepLen(s *Step) int {
	c.reset()
	c.step(s)
	return c.writtenLen()
}

func (c *canonical) outputLen(o *Output) int {
	c.reset()
	c.output(o)
	return c.writtenLen()
}

func (c *canonical) stringLen(s string) int {
	c.reset()
	c.string(s)
	return len(c.out)
}

// grownLen is strPtrLen(grow(s, n)): grow pads with x, written as it is.
func (c *canonical) grownLen(s *string, n int) int {
	if s == nil {
		return len(`""`) + n
	}
	return c.stringLen(*s) + max(n-len(*s), 0)
}

func (c *canonical) strPtrLen(s *string) int {
	c.reset()
	c.strPtr(s)
	return len(c.out)
}

func (c *canonical) leaseLen(l *Lease) int {
	c.reset()
	c.lease(l)
	return len(c.out)
}

func (c *canonical) progressLen(g *Progress) int {
	c.reset()
	c.progress(g)
	return len(c.out)
}

func intLen(n int) int {
	var b [24]byte
	return len(strconv.AppendInt(b[:0], int64(n), 10))
}

// projection is a copy of r for a projection to change, cheaper than Clone: the record and
// its steps are copied one level deep, for a projection replaces their fields and never
// writes through them (grow, Ptr and objectPointer make new values); the requests are
// clipped, so that appending copies them; the approval, whose by and at are replaced, is
// copied.
func projection(r *Record) *Record {
	p := *r
	if r.Steps != nil {
		p.Steps = make(map[string]*Step, len(r.Steps))
		for name, s := range r.Steps {
			if s != nil {
				c := *s
				s = &c
			}
			p.Steps[name] = s
		}
	}
	p.Requests = slices.Clip(r.Requests)
	if r.Approval != nil {
		a := *r.Approval
		p.Approval = &a
	}
	return &p
}

// room projects p (a copy: it is changed) as the package doc says, ahead being the steps
// still to commit, the first of them the one that fails; others adds what writers other than
// the steps may add later (an approval, an undo, more command ids). It is what is left of
// MaxSize then.
func room(p *Record, ahead []string, others bool) int {
	projectFullest(p, ahead, others)
	n, err := Size(p)
	if err != nil {
		return -MaxSize
	}
	return MaxSize - n
}

// projectFullest makes p the record room measures.
func projectFullest(p *Record, ahead []string, others bool) {
	longest := len("undo")
	for _, s := range p.Pipeline {
		longest = max(longest, len(s))
	}
	for _, s := range ahead {
		project(p, p.Step(s), s)
	}
	current := ""
	if len(ahead) > 0 {
		current = ahead[0]
	} else if len(p.Pipeline) > 0 {
		current = p.Pipeline[len(p.Pipeline)-1] // a finished run may still be handed over
	}
	if current != "" {
		p.Step(current).LastError = grow(p.Step(current).LastError, MaxLastError)
	}
	p.Status = WaitingApproval // the longest status
	p.Handover = grow(p.Handover, len(p.RunID)+handoverTail)
	p.NextAction = growString(p.NextAction, NextActionRoom(p.RunID))
	p.Restarts, p.Generation = max(p.Restarts, bigCount), max(p.Generation, bigCount)
	if p.SourceFingerprint == nil {
		p.SourceFingerprint = grow(nil, fingerprint)
	}
	if p.Snapshot == nil {
		p.Snapshot = objectPointer(p.RunID, longest)
	}
	p.Lease = projectLease(p.Lease, longest)
	// The loop guard's count, written when a step restarts or fails.
	p.Progress = &Progress{Step: strings.Repeat("s", longest), Count: bigCount, NoProgress: bigCount}
	if others {
		for len(p.Requests) < maxRequests {
			p.Requests = append(p.Requests, strings.Repeat("r", requestLen))
		}
		if p.Approval == nil {
			p.Approval = &Approval{Step: strings.Repeat("s", longest), PlanDigest: strings.Repeat("d", digestLen), Since: growString("", stampLen), By: grow(nil, planByLen), At: grow(nil, stampLen), Sig: grow(nil, approvalSigLen)}
		} else { // a waiting approval is yet to be given: who, when, and the approver's signature
			p.Approval.By, p.Approval.At, p.Approval.Sig = grow(p.Approval.By, planByLen), grow(p.Approval.At, stampLen), grow(p.Approval.Sig, approvalSigLen)
		}
		if p.Undo == nil {
			p.Undo = &Undo{RequestID: strings.Repeat("r", requestLen), Scope: []byte(`"` + strings.Repeat("s", scopeLen) + `"`), Cursor: bigCount, Reversed: bigCount, Total: bigCount, PreviousStatus: WaitingApproval}
		}
	}
}

// project turns s into step name's fullest commit: outputs as objects, long values.
func project(r *Record, s *Step, name string) {
	s.Status = InProgress // the longest step status
	s.Attempts = max(s.Attempts, 99)
	s.StartedAt = grow(s.StartedAt, stampLen)
	s.FinishedAt = grow(s.FinishedAt, stampLen)
	if s.Output == nil || len(s.Output.Inline) > 0 {
		s.Output = objectPointer(r.RunID, len(name))
	}
	s.InputFingerprint = grow(s.InputFingerprint, fingerprint)
	s.Versions.Code = grow(s.Versions.Code, codeLen)
	for _, v := range []**string{&s.Versions.Prompt, &s.Versions.Schema, &s.Versions.Model} {
		if *v != nil {
			*v = grow(*v, versionLen)
		}
	}
	s.Token = Ptr(max(derefOr(s.Token), bigToken))
	s.Effects = &Effects{Keys: bigCount, IntentsOpen: bigCount}
	s.ParkedCount = max(s.ParkedCount, bigCount)
}

func projectLease(l *Lease, longest int) *Lease {
	p := &Lease{Token: bigToken}
	if l != nil {
		p = clonePtr(l)
		p.Token = max(p.Token, bigToken)
	}
	p.Owner = growString(p.Owner, ownerLen)
	p.OwnerInbox = growString(p.OwnerInbox, inboxLen)
	p.Step = growString(p.Step, longest)
	p.WriteID = growString(p.WriteID, writeIDLen)
	return p
}

func objectPointer(runID string, stepLen int) *Output {
	return &Output{Object: runID + strings.Repeat("o", stepLen+objectNameLen), Digest: strings.Repeat("d", digestLen), Size: bigSize}
}

// grow returns a string of at least n bytes: s's, padded.
func grow(s *string, n int) *string {
	v := ""
	if s != nil {
		v = *s
	}
	return Ptr(growString(v, n))
}

func growString(s string, n int) string {
	if len(s) >= n {
		return s
	}
	return s + strings.Repeat("x", n-len(s))
}

func derefOr[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// Fit makes r at most MaxSize by giving up diagnostics, and only them, in this order: it cuts
// the verified steps' last_error texts, then drops them (their failures are on the audit
// timeline), then empties the parked lists that a parked_artifact holds in full, and only
// then cuts the last_error of the steps not verified, the failure being recorded. It is what lets a write that records a failure or a
// handover always fit; every write of a Store applies it before refusing a record as
// ErrTooLarge. It returns ErrTooLarge when r is still too large.
func Fit(r *Record) error {
	n, err := Size(r)
	if err != nil || n <= MaxSize {
		return err
	}
	var verified, others []string
	for _, s := range r.Pipeline {
		if r.Step(s).Status == Verified {
			verified = append(verified, s)
		} else {
			others = append(others, s)
		}
	}
	var cuts []func() bool
	cutAll := func(steps []string, limit int) {
		for _, name := range steps {
			cuts = append(cuts, func() bool { return cutError(r.Step(name), limit) })
		}
	}
	cutAll(verified, MaxKeptError)
	cutAll(verified, 48)
	for _, name := range verified {
		cuts = append(cuts, func() bool {
			s := r.Step(name)
			if s.LastError == nil {
				return false
			}
			s.LastError = nil // the audit timeline keeps the failure
			return true
		})
	}
	for _, name := range r.Pipeline {
		cuts = append(cuts, func() bool {
			s := r.Step(name)
			if s.ParkedArtifact == nil || len(s.Parked) == 0 {
				return false
			}
			s.Parked = []Parked{}
			return true
		})
	}
	cutAll(others, MaxKeptError) // the failing steps' own errors, last
	cutAll(others, 48)
	for _, cut := range cuts {
		if !cut() {
			continue
		}
		if n, err = Size(r); err != nil || n <= MaxSize {
			return err
		}
	}
	return fmt.Errorf("checkpoint %q is %d bytes with its diagnostics cut: %w", r.RunID, n, ErrTooLarge)
}

// cutError cuts s's last_error to limit bytes, on a character boundary, marking the cut.
func cutError(s *Step, limit int) bool {
	if s.LastError == nil || len(*s.LastError) <= limit {
		return false
	}
	s.LastError = Ptr(CutText(*s.LastError, limit))
	return true
}

// CutText cuts text to at most limit bytes on a character boundary, ending in "…" when it
// cut anything.
func CutText(text string, limit int) string {
	if len(text) <= limit {
		return text
	}
	const ellipsis = "…"
	n := max(limit-len(ellipsis), 0)
	for n > 0 && !utf8Start(text[n]) {
		n--
	}
	return text[:n] + ellipsis
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// encodeFit encodes r for a write: as Encode, but a record over MaxSize first has its
// verified steps' inline outputs moved to the artifact store, the largest first, while it
// is over (when the store has a mover: nothing is lost, a pointer takes an output's place),
// and then gives up its diagnostics (Fit).
// It returns r's Size as encodeSized does.
func (s *Store) encodeFit(ctx context.Context, r *Record) ([]byte, int, error) {
	b, size, err := encodeSized(r, s.signer)
	var big *tooLarge
	if err == nil || !asTooLarge(err, &big) {
		return b, size, err
	}
	if s.mover != nil {
		if err := moveOut(ctx, r, s.mover); err != nil {
			return nil, 0, err
		}
	}
	if ferr := Fit(r); ferr != nil {
		return nil, 0, ferr
	}
	return encodeSized(r, s.signer)
}

// moveOut moves r's verified steps' inline outputs to the artifact store with m, the
// largest first (the earliest of equal ones), until r is at most MaxSize or none is inline.
func moveOut(ctx context.Context, r *Record, m Mover) error {
	for {
		if n, err := Size(r); err != nil || n <= MaxSize {
			return err
		}
		var name string
		var best *Output
		for _, s := range r.Pipeline {
			st := r.Step(s)
			if st.Status == Verified && movable(r.RunID, s, st.Output) && (best == nil || len(st.Output.Inline) > len(best.Inline)) {
				name, best = s, st.Output
			}
		}
		if best == nil {
			return nil
		}
		o, err := m(ctx, r.RunID, name, best.Inline)
		if err != nil {
			return fmt.Errorf("moving step %s's inline output of %q to the artifact store for room: %w", name, r.RunID, err)
		}
		if o == nil || o.Object == "" || o.Digest != best.Digest {
			return fmt.Errorf("moving step %s's inline output of %q: the artifact store gave back no object of digest %s", name, r.RunID, best.Digest)
		}
		r.Step(name).Output = o
	}
}

// lent turns p's verified steps' inline outputs into the pointers a move would give them
// (of the longest names): the room they take is lent, for a write that needs it moves them.
func lent(p *Record) {
	for _, s := range p.Pipeline {
		if st := p.Step(s); st.Status == Verified && movable(p.RunID, s, st.Output) {
			st.Output = objectPointer(p.RunID, len(s))
		}
	}
}

// pointerLen is the written length of objectPointer(runID, len(step)), without making it:
// {"digest":"…","object":"…","size":…} of its digest, name and size.
func pointerLen(runID, step string) int {
	return len(`{"digest":"","object":"","size":}`) + digestLen + len(runID) + len(step) + objectNameLen + intLen(bigSize)
}

// movable: an inline output longer than the pointer a move would give it, which a write may
// move to the artifact store for room; a shorter one stays, as moving it would give nothing
// back. The two differ by the inline value and its size's digits against the object's name
// (objectPointer's, the longest the artifact store gives) and the longest size: the digest
// and the keys are as long in both. The comparison needs no encoding: the projections and
// moveOut only need to agree on it, and a pointer never takes more than the projection says.
func movable(runID, step string, o *Output) bool {
	return o != nil && len(o.Inline) > 0 &&
		len(o.Inline)+intLen(int(o.Size)) > len(`""`)+len(runID)+len(step)+objectNameLen+intLen(bigSize)
}

// tooLarge is the error Encode returns for a record over MaxSize, with its size.
type tooLarge struct {
	runID string
	size  int
}

func (e *tooLarge) Error() string {
	return fmt.Sprintf("checkpoint %q is %d bytes: %v", e.runID, e.size, ErrTooLarge)
}

func (e *tooLarge) Unwrap() error { return ErrTooLarge }

func asTooLarge(err error, target **tooLarge) bool { return errors.As(err, target) }
