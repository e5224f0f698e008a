package runner

import (
	"context"
	"log/slog"

	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/pipeline"
)

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

// Done is what the run had done: every verified step's keys (a message step's as messages),
// as the record says, and the stopped step's own, read back as p says (nil: the record's
// knowledge only).
func Done(rec *kc.Record, def pipeline.Definition, stopped string, p *Progress) HandoverDone {
	done := HandoverDone{}
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

// stepProgress is what the attempt's step made durable, for its handover note: the loop
// guard's count if it counted, else counted now (a handover is rare); nil when the step
// has no counter or the count failed.
func (r *Runner) stepProgress(ctx context.Context, a *Attempt) *Progress {
	if a.progress != nil {
		return a.progress
	}
	pc, ok := r.counter()
	if !ok {
		return nil
	}
	p, err := r.count(ctx, pc, a)
	if err != nil {
		a.log.Warn("the handover note could not read back the step's writes", slog.Any("error", err))
		return nil
	}
	return &p
}
