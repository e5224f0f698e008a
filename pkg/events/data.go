package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/cairnhq/cairn/pkg/identity"
)

// DateLayout is the layout of a run's date.
const DateLayout = "2006-01-02"

// StartCommand is the data of [TypeRunStart]: the framework's members (request_id, run_id,
// shadow) and the pipeline's own, its input, carried as given in Params and validated by
// the pipeline (pipeline.Definition.CheckInput). In JSON one flat object:
// {"run_id": "...", "date": "2026-10-13", "source": "mailbox-ap"}.
type StartCommand struct {
	RequestID string
	RunID     string
	Shadow    bool
	Params    map[string]json.RawMessage
}

// The framework's members of a start.
const (
	startRequestID = "request_id"
	startRunID     = "run_id"
	startShadow    = "shadow"
)

// UnmarshalJSON reads the flat object: request_id and run_id strings, shadow a boolean,
// every other member the pipeline's.
func (c *StartCommand) UnmarshalJSON(b []byte) error {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil {
		return err
	}
	if members == nil {
		return errors.New("a start is a JSON object")
	}
	var out StartCommand
	for name, v := range members {
		var err error
		switch name {
		case startRequestID:
			err = json.Unmarshal(v, &out.RequestID)
		case startRunID:
			err = json.Unmarshal(v, &out.RunID)
		case startShadow:
			err = json.Unmarshal(v, &out.Shadow)
		default:
			if out.Params == nil {
				out.Params = map[string]json.RawMessage{}
			}
			out.Params[name] = v
			continue
		}
		if err != nil {
			return fmt.Errorf("start: %s: %w", name, err)
		}
	}
	*c = out
	return nil
}

// MarshalJSON writes the flat object.
func (c StartCommand) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(c.Params)+3)
	for k, v := range c.Params {
		if k == startRequestID || k == startRunID || k == startShadow {
			return nil, fmt.Errorf("%w: start: the pipeline's input names %q, a member of the framework's", ErrInvalid, k)
		}
		m[k] = v
	}
	if c.RequestID != "" {
		m[startRequestID] = c.RequestID
	}
	if c.RunID != "" {
		m[startRunID] = c.RunID
	}
	if c.Shadow {
		m[startShadow] = true
	}
	return json.Marshal(m)
}

// Validate checks the framework's members: run_id a valid id when present, request_id
// free of white space when present; the pipeline checks its own. The error names the bad
// field and wraps [ErrInvalid].
func (c *StartCommand) Validate() error {
	if c.RunID != "" {
		if err := ValidID("run_id", c.RunID); err != nil {
			return fmt.Errorf("%w: start: %w", ErrInvalid, err)
		}
	}
	if c.RequestID != "" {
		if err := checkAttr("request_id", c.RequestID); err != nil {
			return fmt.Errorf("%w: start: %w", ErrInvalid, err)
		}
	}
	return nil
}

// Command is the data of resume, approve, reject, cancel, rerun and undo.
type Command struct {
	RequestID string        `json:"request_id,omitempty"`
	From      string        `json:"from,omitempty"`      // rerun --from STEP
	AfterFix  bool          `json:"after_fix,omitempty"` // resume --after-fix
	By        string        `json:"by,omitempty"`        // approve: who
	Sig       *identity.Sig `json:"sig,omitempty"`       // approve: by's signature of ApprovalMessage (approve.go)
	Scope     *UndoScope    `json:"scope,omitempty"`     // undo: what; nil or empty is the whole run
}

// UndoScope narrows an undo to the effects whose attributes (saga.Record.Attrs) match every
// pair of Where and, when Step is set, to that step's. Its JSON is
// {"where": {"<attribute>": "<value>", ...}, "step": "<step>"}; any other member with a
// string value is the shorthand of one attribute, so {"region": "north"} is where
// region=north.
type UndoScope struct {
	Where map[string]string `json:"where,omitempty"`
	Step  string            `json:"step,omitempty"`
}

// Empty reports whether the scope selects the whole run.
func (s UndoScope) Empty() bool { return len(s.Where) == 0 && s.Step == "" }

// UnmarshalJSON reads the scope and its shorthand members; a member that is neither
// "where", "step" nor a string is refused, naming it.
func (s *UndoScope) UnmarshalJSON(b []byte) error {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil {
		return fmt.Errorf("scope: %w", err)
	}
	var out UndoScope
	for name, v := range members {
		switch name {
		case "where":
			if err := json.Unmarshal(v, &out.Where); err != nil {
				return fmt.Errorf("scope.where is not an object of strings: %w", err)
			}
		case "step":
			if err := json.Unmarshal(v, &out.Step); err != nil {
				return fmt.Errorf("scope.step is not a string: %w", err)
			}
		default:
			var value string
			if err := json.Unmarshal(v, &value); err != nil {
				return fmt.Errorf("scope: member %q is neither where, step nor an attribute's string value", name)
			}
			if out.Where == nil {
				out.Where = map[string]string{}
			}
			out.Where[name] = value
		}
	}
	*s = out
	return nil
}

// Validate checks the ids a command carries (from, scope.step, scope.where's
// attributes and values) and its request_id. Whether a field makes sense for the verb
// is the receiver's business. Errors wrap [ErrInvalid].
func (c *Command) Validate() error {
	if c.RequestID != "" {
		if err := checkAttr("request_id", c.RequestID); err != nil {
			return fmt.Errorf("%w: command: %w", ErrInvalid, err)
		}
	}
	ids := []struct{ field, value string }{{"from", c.From}}
	if c.Scope != nil {
		ids = append(ids, struct{ field, value string }{"scope.step", c.Scope.Step})
		// Every attribute and value is an id, none empty: an empty value would select
		// the effects that lack the attribute.
		for _, k := range slices.Sorted(maps.Keys(c.Scope.Where)) {
			if err := ValidID("scope.where attribute", k); err != nil {
				return fmt.Errorf("%w: command: %w", ErrInvalid, err)
			}
			if err := ValidID("scope.where."+k, c.Scope.Where[k]); err != nil {
				return fmt.Errorf("%w: command: %w", ErrInvalid, err)
			}
		}
	}
	for _, id := range ids {
		if id.value == "" {
			continue
		}
		if err := ValidID(id.field, id.value); err != nil {
			return fmt.Errorf("%w: command: %w", ErrInvalid, err)
		}
	}
	return nil
}

// StepReady is the data of [TypeStepReady]: run the step of the run, for
// the run's generation (a stale generation's event is acked and dropped).
type StepReady struct {
	RunID      string `json:"run_id"`
	Step       string `json:"step"`
	Generation int    `json:"generation"`
	// Vouched is the revision of the commit that scheduled the step, when the attempt that
	// made it vouches that the run's source is unchanged since it was read (the runner's
	// drift rule); 0 from any other publisher, such as the supervisor.
	Vouched uint64 `json:"vouched,omitempty"`
}

// Audit is the data of [TypeAudit], one line of a run's timeline.
type Audit struct {
	RunID  string            `json:"run_id"`
	Step   string            `json:"step,omitempty"`
	Event  string            `json:"event"` // e.g. step.started, step.verified, extractor.called, fenced
	Token  uint64            `json:"token,omitempty"`
	Item   string            `json:"item,omitempty"`
	Owner  string            `json:"owner,omitempty"`
	Detail string            `json:"detail,omitempty"`
	Attrs  map[string]string `json:"attrs,omitempty"`
}
