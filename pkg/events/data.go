package events

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cairnhq/cairn/pkg/identity"
)

// DateLayout is the layout of a run's date.
const DateLayout = "2006-01-02"

// StartCommand is the data of [TypeRunStart].
type StartCommand struct {
	RequestID string `json:"request_id,omitempty"`
	RunID     string `json:"run_id,omitempty"`
	Warehouse string `json:"warehouse"`
	Date      string `json:"date"`
	Shadow    bool   `json:"shadow,omitempty"`
}

// Validate checks the command: warehouse required and a valid id, date
// required as 2006-01-02, run_id a valid id when present, request_id free of
// white space when present. The error names the first bad field and wraps
// [ErrInvalid].
func (c *StartCommand) Validate() error {
	if c.Warehouse == "" {
		return fmt.Errorf("%w: start: warehouse is required", ErrInvalid)
	}
	if err := ValidID("warehouse", c.Warehouse); err != nil {
		return fmt.Errorf("%w: start: %w", ErrInvalid, err)
	}
	if c.Date == "" {
		return fmt.Errorf("%w: start: date is required", ErrInvalid)
	}
	if _, err := time.Parse(DateLayout, c.Date); err != nil {
		return fmt.Errorf("%w: start: date %q is not a date like %s", ErrInvalid, c.Date, DateLayout)
	}
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

// RunIDOrDefault returns RunID or, when it is empty, run-<date>-<warehouse>.
func (c StartCommand) RunIDOrDefault() string {
	if c.RunID != "" {
		return c.RunID
	}
	return "run-" + c.Date + "-" + c.Warehouse
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
