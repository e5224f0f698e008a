package handover

import (
	"fmt"

	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
)

// Note is what a person reads in cairn-handovers.
type Note struct {
	ID         string `json:"id"`
	RunID      string `json:"run_id"`
	Step       string `json:"step"`
	Error      string `json:"error"`
	Done       Done   `json:"done"`
	NextAction string `json:"next_action"`
	At         string `json:"at"`
}

// Done says what the run had done when it stopped.
type Done struct {
	Keys     int        `json:"keys"`     // keys written that stand (rows of the outside systems)
	Messages int        `json:"messages"` // messages queued
	Steps    []StepDone `json:"steps"`    // by step (steps that did nothing left out), the stopped step read back
}

// MaxStanding is how many standing keys a handover note lists per step; Where says how to
// list the rest.
const MaxStanding = 20

// StepDone is what one step had done when the run stopped.
type StepDone struct {
	Step     string `json:"step"`
	Keys     int    `json:"keys"`
	Messages int    `json:"messages"`
	// ReadBack: the step's keys and messages were read back from the outside systems when
	// the run stopped (the stopped step's own writes); otherwise they are the record's (a
	// verified step's effects).
	ReadBack bool `json:"read_back"`
	// Counted is the loop guard's last count of what the stopped step had made durable,
	// when nothing was read back.
	Counted  int      `json:"counted,omitempty"`
	Standing []string `json:"standing,omitempty"` // the first MaxStanding keys and messages that stand
	Where    string   `json:"where,omitempty"`    // where to list them all
	Next     string   `json:"next,omitempty"`     // the first item the step had not done
}

// ReadBack is what the stopped step's own writes read back from where it keeps them (the
// runner's Progress of the step).
type ReadBack struct {
	Keys, Messages int
	Standing       []string
	Where, Next    string
}

// DoneOf is what the run had done: every verified step's keys (a message step's as
// messages), as the record says, and the stopped step's own, read back as p says (nil: the
// record's knowledge only, as the supervisor has).
func DoneOf(rec *kc.Record, def pipeline.Definition, stopped string, p *ReadBack) Done {
	done := Done{}
	if rec == nil {
		return done
	}
	for _, name := range rec.Pipeline {
		s := rec.Step(name)
		d := StepDone{Step: name}
		switch {
		case name == stopped && p != nil:
			d.Keys, d.Messages, d.ReadBack, d.Where, d.Next = p.Keys, p.Messages, true, p.Where, p.Next
			d.Standing = p.Standing[:min(len(p.Standing), MaxStanding)]
		case s.Effects != nil:
			if st, ok := def.Step(name); ok && st.Kind == pipeline.OutsideMessage {
				d.Messages = s.Effects.Keys
			} else {
				d.Keys = s.Effects.Keys
			}
		case name == stopped && rec.Progress != nil && rec.Progress.Step == name:
			d.Counted = rec.Progress.Count
		}
		if d.Keys == 0 && d.Messages == 0 && d.Counted == 0 && name != stopped {
			continue
		}
		done.Keys += d.Keys
		done.Messages += d.Messages
		done.Steps = append(done.Steps, d)
	}
	return done
}

// ID is the id of run's note about step for why (see the package doc).
func ID(runID, step, why string) string { return runID + ":handover:" + step + ":" + why }

// resumeOrUndo is the next action of a run a person may resume or undo.
const resumeOrUndo = "a person decides: cairn resume %[1]s, cairn resume %[1]s --after-fix, or cairn undo %[1]s"

// ResumeOrUndo is the next action of a stopped run a person may resume or undo; runArg is
// how the cairn command names the run (assets.Space.RunArg), cut to the record's room.
func ResumeOrUndo(runID, runArg string) string {
	return kc.CutText(fmt.Sprintf(resumeOrUndo, runArg), kc.NextActionRoom(runID))
}

// Untrusted is the note of a run whose record cannot be trusted (it fails a reader's
// checks): it was not resumed and nothing was written; a person inspects the checkpoint.
// Runner and supervisor write the same id, so the run is noted once (Noted).
func Untrusted(sp assets.Space, runID, step string, cause error, at string) Note {
	return Note{
		ID: runID + ":handover:record", RunID: runID, Step: step, Error: cut(cause.Error(), kc.MaxLastError),
		NextAction: "inspect the checkpoint (nats kv get " + sp.Bucket(assets.BucketRuns) + " " + runID + "); it was not resumed and nothing was written",
		At:         at,
	}
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
