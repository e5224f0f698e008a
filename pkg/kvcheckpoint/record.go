package kvcheckpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/cairnhq/cairn/pkg/identity"
)

// Schema is the version of the record layout this package writes. It reads every earlier
// one and upgrades it in memory (see upgrade.go); a later one is ErrNewerSchema.
const Schema = 6

// Status is a run's status.
type Status string

// Run statuses (DESIGN.md, "The checkpoint record").
const (
	Running         Status = "running"
	WaitingApproval Status = "waiting_approval"
	Finishing       Status = "finishing"
	HandedOver      Status = "handed_over"
	Done            Status = "done"
	Undoing         Status = "undoing"
	Undone          Status = "undone"
	Cancelled       Status = "cancelled"
)

// StepStatus is one step's status.
type StepStatus string

// Step statuses.
const (
	Pending    StepStatus = "pending"
	InProgress StepStatus = "in_progress"
	Verified   StepStatus = "verified"
	Failed     StepStatus = "failed"
)

// Record is the checkpoint of one run: one KV entry, JSON, every field always present.
type Record struct {
	Schema            int              `json:"schema"`
	RunID             string           `json:"run_id"`
	Params            Params           `json:"params"`
	CreatedAt         string           `json:"created_at"`
	UpdatedAt         string           `json:"updated_at"` // schema 2: the last write, by the writer's clock
	Epoch             string           `json:"epoch"`
	Status            Status           `json:"status"`
	Pipeline          []string         `json:"pipeline"`
	Prev              uint64           `json:"prev"`          // schema 6: the revision this record was written over (0: the run's first); see history.go
	After             Graph            `json:"after"`         // schema 5; null: each step waits for the one before it
	ProgressedAt      string           `json:"progressed_at"` // schema 4: the run's last progress, by the writer's clock
	Steps             map[string]*Step `json:"steps"`
	SourceFingerprint *string          `json:"source_fingerprint"`
	Snapshot          *Output          `json:"snapshot"` // schema 5; earlier schemas named it for the night
	Lease             *Lease           `json:"lease"`
	NextAction        string           `json:"next_action"`
	Restarts          int              `json:"restarts"`
	Generation        int              `json:"generation"`
	Requests          []string         `json:"requests"`
	Approval          *Approval        `json:"approval"`
	Handover          *string          `json:"handover"`
	Undo              *Undo            `json:"undo"`
	Commands          []Command        `json:"commands"`      // schema 3
	Progress          *Progress        `json:"progress"`      // schema 4; null until an attempt of the current step counts it
	Sig               *identity.Sig    `json:"sig,omitempty"` // the writer's signature of sum (sign.go); absent when unsigned
	Sum               string           `json:"sum"`
}

// Step is one step's progress.
type Step struct {
	Status           StepStatus `json:"status"`
	Attempts         int        `json:"attempts"`
	StartedAt        *string    `json:"started_at"`
	FinishedAt       *string    `json:"finished_at"`
	Output           *Output    `json:"output"`
	InputFingerprint *string    `json:"input_fingerprint"`
	Versions         Versions   `json:"versions"`
	Token            *uint64    `json:"token"`
	Effects          *Effects   `json:"effects"`
	Parked           []Parked   `json:"parked"`
	ParkedCount      int        `json:"parked_count"`
	ParkedArtifact   *Output    `json:"parked_artifact"`
	LastError        *string    `json:"last_error"`
}

// Output points at a step's output: inline (≤ 1 KiB) or an object in the artifact store.
type Output struct {
	Object string          `json:"object,omitempty"`
	Inline json.RawMessage `json:"inline,omitempty"`
	Digest string          `json:"digest"`
	Size   int64           `json:"size"`
}

// Versions are the versions of what produced a step's output.
type Versions struct {
	Code   *string `json:"code"`
	Prompt *string `json:"prompt"`
	Schema *string `json:"schema"`
	Model  *string `json:"model"`
}

// Effects counts a step's outside effects.
type Effects struct {
	Keys        int `json:"keys"`
	IntentsOpen int `json:"intents_open"`
}

// Progress is the loop guard's count for the run's current step: what the step had made
// durable (answers memoised, keys written, items parked, messages queued, as the step counts
// it) when its latest attempt began, and how many attempts in a row ended with no more.
type Progress struct {
	Step       string `json:"step"`
	Count      int    `json:"count"`
	NoProgress int    `json:"no_progress"`
}

// SetIntentsOpen writes a count of open intents (saga intents without an outcome) into the
// step's effects, keeping what else they say, when counted; no effects and nothing open
// stays null.
func (s *Step) SetIntentsOpen(open int, counted bool) {
	if !counted || (s.Effects == nil && open == 0) {
		return
	}
	e := Effects{}
	if s.Effects != nil {
		e = *s.Effects
	}
	e.IntentsOpen = open
	s.Effects = &e
}

// Parked is one item a step set aside, with the reason.
type Parked struct {
	Item   string `json:"item"`
	Reason string `json:"reason"`
}

// MaxParkedListed is how many parked items the record lists; the rest are counted.
const MaxParkedListed = 20

// MaxLastError bounds last_error in bytes.
const MaxLastError = 512

// Lease says who holds the run's current step.
type Lease struct {
	Owner      string `json:"owner"`
	OwnerInbox string `json:"owner_inbox"`
	Token      uint64 `json:"token"`
	Step       string `json:"step"`
	WriteID    string `json:"write_id"`
}

// Approval is a step's wait for a person.
type Approval struct {
	Step       string  `json:"step"`
	PlanDigest string  `json:"plan_digest"`
	Since      string  `json:"since"` // schema 4: when the wait began, by the writer's clock
	By         *string `json:"by"`
	At         *string `json:"at"`
	// Sig (schema 6) is approver By's signature of the plan (identity.ApprovalMessage), as
	// the approve carried it: a reader checks it again, so no writer of the record can
	// approve (sign.go). Null while the plan waits, and where approvers are not checked.
	Sig *string `json:"sig"`
}

// Undo is the progress of a compensation.
type Undo struct {
	RequestID      string          `json:"request_id"`
	Scope          json.RawMessage `json:"scope"`
	Cursor         int             `json:"cursor"`
	Reversed       int             `json:"reversed"`
	Total          int             `json:"total"`
	PreviousStatus Status          `json:"previous_status"`
}

// Command is a run command accepted but not yet carried out: it waits for the run's lease.
// Once it is here its message is settled; the record, not the delivery, keeps it until
// whoever next finds the run free carries it out, or a handover names it.
type Command struct {
	Verb      string          `json:"verb"`
	RequestID string          `json:"request_id"` // as RequestKey stores it
	By        string          `json:"by"`         // who asked (the command's source), ≤ 64 bytes
	At        string          `json:"at"`         // when it was accepted
	Args      json.RawMessage `json:"args"`       // the command's own data, opaque; null when none
}

// MaxCommands bounds the commands a record keeps waiting; a further one is refused.
const MaxCommands = 4

// maxCommandArgs bounds a waiting command's data in bytes.
const maxCommandArgs = 256

// New returns the record of a run that has just been started: every step pending.
func New(runID string, p Params, pipeline []string, createdAt string) *Record {
	r := &Record{
		Schema:       Schema,
		RunID:        runID,
		Params:       p.Clone(),
		CreatedAt:    createdAt,
		UpdatedAt:    createdAt,
		ProgressedAt: createdAt,
		Status:       Running,
		Pipeline:     slices.Clone(pipeline),
		Steps:        make(map[string]*Step, len(pipeline)),
		Requests:     []string{},
		Commands:     []Command{},
	}
	for _, s := range pipeline {
		r.Steps[s] = NewStep()
	}
	return r
}

// NewStep returns a pending step.
func NewStep() *Step {
	return &Step{Status: Pending, Parked: []Parked{}}
}

// Clone returns a deep copy.
func (r *Record) Clone() *Record {
	c := *r
	c.Pipeline = slices.Clone(r.Pipeline)
	c.After = r.After.clone()
	if r.Steps != nil {
		c.Steps = make(map[string]*Step, len(r.Steps))
		for name, s := range r.Steps {
			c.Steps[name] = s.clone()
		}
	}
	c.Params = r.Params.Clone()
	c.SourceFingerprint = clonePtr(r.SourceFingerprint)
	c.Snapshot = r.Snapshot.clone()
	c.Lease = clonePtr(r.Lease)
	c.Requests = slices.Clone(r.Requests)
	if a := r.Approval; a != nil {
		c.Approval = &Approval{Step: a.Step, PlanDigest: a.PlanDigest, Since: a.Since, By: clonePtr(a.By), At: clonePtr(a.At), Sig: clonePtr(a.Sig)}
	}
	c.Handover = clonePtr(r.Handover)
	c.Progress = clonePtr(r.Progress)
	c.Sig = clonePtr(r.Sig)
	if u := r.Undo; u != nil {
		cu := *u
		cu.Scope = slices.Clone(u.Scope)
		c.Undo = &cu
	}
	if r.Commands != nil {
		c.Commands = make([]Command, len(r.Commands))
		for i, cmd := range r.Commands {
			cmd.Args = slices.Clone(cmd.Args)
			c.Commands[i] = cmd
		}
	}
	return &c
}

func (s *Step) clone() *Step {
	if s == nil {
		return nil
	}
	c := *s
	c.StartedAt = clonePtr(s.StartedAt)
	c.FinishedAt = clonePtr(s.FinishedAt)
	c.Output = s.Output.clone()
	c.InputFingerprint = clonePtr(s.InputFingerprint)
	c.Versions = Versions{Code: clonePtr(s.Versions.Code), Prompt: clonePtr(s.Versions.Prompt), Schema: clonePtr(s.Versions.Schema), Model: clonePtr(s.Versions.Model)}
	c.Token = clonePtr(s.Token)
	c.Effects = clonePtr(s.Effects)
	c.Parked = slices.Clone(s.Parked)
	c.ParkedArtifact = s.ParkedArtifact.clone()
	c.LastError = clonePtr(s.LastError)
	return &c
}

func (o *Output) clone() *Output {
	if o == nil {
		return nil
	}
	c := *o
	c.Inline = slices.Clone(o.Inline)
	return &c
}

// clonePtr copies what p points at (a struct of values only, or a value).
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// Step returns the named step; it panics on a name outside the pipeline, a programming error.
func (r *Record) Step(name string) *Step {
	s, ok := r.Steps[name]
	if !ok {
		panic("kvcheckpoint: no step " + name + " in run " + r.RunID)
	}
	return s
}

// Index is the position of step in the pipeline, or -1.
func (r *Record) Index(step string) int { return slices.Index(r.Pipeline, step) }

// Next is the step the run waits on once step is verified: the first step in the
// pipeline's order, other than step, that is not verified; "" when step is the last one
// left. For steps run one after another it is the step after step.
func (r *Record) Next(step string) string {
	for _, s := range r.Pipeline {
		if s != step && r.Step(s).Status != Verified {
			return s
		}
	}
	return ""
}

// Deps are the steps step waits for: its After, or else the step before it.
func (r *Record) Deps(step string) []string {
	if r.After != nil {
		return r.After[step]
	}
	if i := r.Index(step); i > 0 {
		return r.Pipeline[i-1 : i]
	}
	return nil
}

// EarlierVerified reports whether every step that step waits for, directly or through
// others, is verified: whether step may run. For steps run one after another, every step
// before it.
func (r *Record) EarlierVerified(step string) bool {
	i := r.Index(step)
	return i >= 0 && r.mayRun()[i]
}

// mayRun says, for each step in the pipeline's order, whether everything it waits for,
// directly or through others, is verified. One pass: the order lists every step after the
// steps it waits for (the invariants hold a graph to it), so a step's answer is its waits'
// statuses and their own answers.
func (r *Record) mayRun() []bool {
	ok := make([]bool, len(r.Pipeline))
	all := true // linear: every step before this one verified
	for i, s := range r.Pipeline {
		if r.After == nil {
			ok[i] = all
			all = all && r.Step(s).Status == Verified
			continue
		}
		ok[i] = true
		for _, dep := range r.After[s] {
			j := r.Index(dep)
			if j < 0 || j >= i || !ok[j] || r.Step(dep).Status != Verified {
				ok[i] = false
				break
			}
		}
	}
	return ok
}

// Ready are the steps that may run now, in the pipeline's order: not verified, and
// everything they wait for verified. For steps run one after another, Current alone.
func (r *Record) Ready() []string {
	var out []string
	for i, ok := range r.mayRun() {
		if s := r.Pipeline[i]; ok && r.Step(s).Status != Verified {
			out = append(out, s)
		}
	}
	return out
}

// Unblocked are the steps step's verification lets run: those that wait for step, are not
// verified, and wait for nothing else unverified. For steps run one after another, the
// step after it.
func (r *Record) Unblocked(step string) []string {
	var out []string
	for _, s := range r.Ready() {
		if slices.Contains(r.Deps(s), step) {
			out = append(out, s)
		}
	}
	return out
}

// Dependents are the steps that wait for step directly.
func (r *Record) Dependents(step string) []string {
	var out []string
	for _, s := range r.Pipeline {
		if slices.Contains(r.Deps(s), step) {
			out = append(out, s)
		}
	}
	return out
}

// Descendants are the steps that wait for step, directly or through others, in the
// pipeline's order. For steps run one after another, every step after it.
func (r *Record) Descendants(step string) []string {
	below := map[string]bool{step: true}
	var out []string
	for _, s := range r.Pipeline {
		if slices.ContainsFunc(r.Deps(s), func(d string) bool { return below[d] }) {
			below[s] = true
			out = append(out, s)
		}
	}
	return out
}

// AllVerified reports whether every step is verified.
func (r *Record) AllVerified() bool {
	for _, s := range r.Pipeline {
		if r.Step(s).Status != Verified {
			return false
		}
	}
	return true
}

// Current is the first step that is not verified, or "". Steps that run side by side may
// have others running beside it (Ready).
func (r *Record) Current() string {
	for _, s := range r.Pipeline {
		if r.Step(s).Status != Verified {
			return s
		}
	}
	return ""
}

// Graph is what each step of a pipeline waits for, by step (pipeline.Definition.Graph).
type Graph map[string][]string

func (g Graph) clone() Graph {
	if g == nil {
		return nil
	}
	c := make(Graph, len(g))
	for k, v := range g {
		c[k] = slices.Clone(v)
	}
	return c
}

// maxRequestKey is the longest request id the record keeps as it is.
const maxRequestKey = 64

// RequestKey is how the record keeps a request id: as it is up to 64 bytes, a longer one by
// its digest, so that a long id never fills the record. RequestKey(RequestKey(id)) ==
// RequestKey(id).
func RequestKey(id string) string {
	if len(id) <= maxRequestKey {
		return id
	}
	h := sha256.Sum256([]byte(id))
	return "sha256:" + hex.EncodeToString(h[:16])
}

// AddRequest records a command id, keeping the last 16, and ends its wait if it waited.
func (r *Record) AddRequest(id string) {
	id = RequestKey(id)
	r.DropCommand(id)
	r.Requests = append(r.Requests, id)
	if n := len(r.Requests); n > 16 {
		r.Requests = slices.Clone(r.Requests[n-16:])
	}
}

// HasRequest reports whether the command id was already applied.
func (r *Record) HasRequest(id string) bool {
	return slices.Contains(r.Requests, RequestKey(id)) || slices.Contains(r.Requests, id)
}

// Wait records a command that cannot be carried out yet. It reports false, changing
// nothing, when the same request waits already; ErrTooManyCommands when MaxCommands wait.
// by is cut to 64 bytes; args over 256 bytes are ErrTooManyCommands too (a command's data
// is a few ids).
func (r *Record) Wait(c Command) (bool, error) {
	c.RequestID = RequestKey(c.RequestID)
	if r.Waiting(c.RequestID) != nil {
		return false, nil
	}
	if len(r.Commands) >= MaxCommands {
		return false, fmt.Errorf("%w: %d commands wait already (at most %d)", ErrTooManyCommands, len(r.Commands), MaxCommands)
	}
	if len(c.Args) > maxCommandArgs {
		return false, fmt.Errorf("%w: the command's data is %d bytes (at most %d)", ErrTooManyCommands, len(c.Args), maxCommandArgs)
	}
	if len(c.Args) == 0 {
		c.Args = nil
	}
	c.By = strings.ToValidUTF8(cutBytes(c.By, 64), "")
	r.Commands = append(r.Commands, c)
	if StepRoom(r, r.current()) < 0 {
		// The record keeps room for its current step to commit, fail and be handed over
		// (budget.go); a waiting command may not take it.
		r.Commands = r.Commands[:len(r.Commands)-1]
		return false, fmt.Errorf("%w: the record has no room for another one", ErrTooManyCommands)
	}
	return true, nil
}

// current is the first step not verified, or the last step of a finished run.
func (r *Record) current() string {
	for _, s := range r.Pipeline {
		if r.Step(s).Status != Verified {
			return s
		}
	}
	if len(r.Pipeline) == 0 {
		return ""
	}
	return r.Pipeline[len(r.Pipeline)-1]
}

// Waiting returns the waiting command of request id, or nil.
func (r *Record) Waiting(id string) *Command {
	id = RequestKey(id)
	for i := range r.Commands {
		if r.Commands[i].RequestID == id {
			return &r.Commands[i]
		}
	}
	return nil
}

// DropCommand ends the wait of request id (carried out, refused, or named by a handover);
// it reports whether it waited.
func (r *Record) DropCommand(id string) bool {
	id = RequestKey(id)
	n := len(r.Commands)
	r.Commands = slices.DeleteFunc(r.Commands, func(c Command) bool { return c.RequestID == id })
	return len(r.Commands) != n
}

func cutBytes(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// SetLastError sets a step's last_error, cut to MaxLastError bytes.
func (s *Step) SetLastError(msg string) {
	if len(msg) > MaxLastError {
		msg = msg[:MaxLastError]
	}
	s.LastError = &msg
}

// Ptr returns a pointer to v, for the record's nullable fields.
func Ptr[T any](v T) *T { return &v }
