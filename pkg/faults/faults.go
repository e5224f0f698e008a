package faults

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cairnhq/cairn/pkg/retry"
)

// Points a fault can fire at.
const (
	BeforeCommit      = "before-commit"
	AfterCommit       = "after-commit"
	BeforeWrite       = "before-write"
	AfterWrite        = "after-write"
	LostReply         = "lost-reply"
	BeforeNextPublish = "before-next-publish"
	// AfterRecord: the supervisor or the compensator wrote a command into the record (applied
	// it, or recorded that it waits) and has not yet done what follows: the step event, the ack.
	AfterRecord   = "after-record"
	BeforeDeliver = "before-deliver" // the outbox sender, before it hands a message over
	AfterDeliver  = "after-deliver"  // the outbox sender, handed over, not yet marked sent
)

var points = []string{BeforeCommit, AfterCommit, BeforeWrite, AfterWrite, LostReply, BeforeNextPublish, AfterRecord, BeforeDeliver, AfterDeliver}

// Error classes an error action returns.
var (
	// ErrTemporary is an injected fault of the temporary class: it says "injected", and it
	// is retry.ErrTemporary too, as every temporary error is.
	ErrTemporary = retry.Temporary(errors.New("injected temporary fault"))
	ErrPermanent = errors.New("injected permanent fault")
	ErrUnknown   = errors.New("injected unknown fault")
)

// ExitCode is the code of the exit action.
const ExitCode = 3

// Fault is one parsed rule.
type Fault struct {
	Spec   string // the rule as written
	Step   string
	Point  string
	N      int // 0 = every write
	Action string
	Class  error
	Stall  time.Duration // 0 = until the process is signalled
	Once   bool
}

// Set is the parsed CAIRN_FAULTS. The zero Set injects nothing.
type Set struct {
	faults    []Fault
	markerDir string
	exit      func(code int)
}

// Parse reads a CAIRN_FAULTS value; markerDir is where @once markers go ($CAIRN_DATA_DIR/faults).
func Parse(spec, markerDir string) (*Set, error) {
	s := &Set{markerDir: markerDir, exit: os.Exit}
	for _, rule := range strings.Split(spec, ",") {
		rule = strings.TrimSpace(rule)
		if rule == "" {
			continue
		}
		f, err := parseRule(rule)
		if err != nil {
			return nil, fmt.Errorf("CAIRN_FAULTS rule %q: %w", rule, err)
		}
		s.faults = append(s.faults, f)
	}
	return s, nil
}

func parseRule(rule string) (Fault, error) {
	f := Fault{Spec: rule}
	where, action, ok := strings.Cut(rule, "=")
	if !ok {
		return f, errors.New("want <step>.<point>[.<n>]=<action>")
	}
	if a, found := strings.CutSuffix(action, "@once"); found {
		f.Once, action = true, a
	}
	parts := strings.Split(where, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return f, errors.New("want <step>.<point>[.<n>] before '='")
	}
	f.Step, f.Point = parts[0], parts[1]
	if f.Step == "" {
		return f, errors.New("the step name is empty")
	}
	if !slices.Contains(points, f.Point) {
		return f, fmt.Errorf("unknown point %q (one of %s)", f.Point, strings.Join(points, ", "))
	}
	if len(parts) == 3 {
		n, err := strconv.Atoi(parts[2])
		if err != nil || n < 1 {
			return f, fmt.Errorf("write index %q is not a number ≥ 1", parts[2])
		}
		f.N = n
	}
	kind, arg, _ := strings.Cut(action, ":")
	f.Action = kind
	switch kind {
	case "exit":
		if arg != "" {
			return f, fmt.Errorf("exit takes no argument, not %q", arg)
		}
	case "error":
		switch arg {
		case "temporary":
			f.Class = ErrTemporary
		case "permanent":
			f.Class = ErrPermanent
		case "unknown":
			f.Class = ErrUnknown
		default:
			return f, fmt.Errorf("error class %q is not temporary, permanent or unknown", arg)
		}
	case "panic":
		if arg != "" {
			return f, fmt.Errorf("panic takes no argument, not %q", arg)
		}
	case "stall":
		if arg != "" {
			d, err := time.ParseDuration(arg)
			if err != nil {
				return f, fmt.Errorf("stall duration %q: %w", arg, err)
			}
			if d <= 0 {
				return f, fmt.Errorf("stall duration %q must be positive (leave it out to stall until stopped)", arg)
			}
			f.Stall = d
		}
	default:
		return f, fmt.Errorf("unknown action %q (exit, error:<class>, stall[:duration], panic)", kind)
	}
	return f, nil
}

// Empty reports whether no fault is set.
func (s *Set) Empty() bool { return s == nil || len(s.faults) == 0 }

// Hit fires the faults set for step at point and write n (0 for points without an index).
// exit and panic never return; stall blocks until its duration passes or ctx ends and then returns
// nil; error returns the class's error.
func (s *Set) Hit(ctx context.Context, step, point string, n int) error {
	if s.Empty() {
		return nil
	}
	for _, f := range s.faults {
		if f.Step != step || f.Point != point || (f.N != 0 && f.N != n) {
			continue
		}
		if f.Once {
			fresh, err := s.claim(f)
			if err != nil {
				return err
			}
			if !fresh {
				continue
			}
		}
		switch f.Action {
		case "exit":
			s.exit(ExitCode)
		case "error":
			return fmt.Errorf("%s at %s.%s.%d: %w", f.Spec, step, point, n, f.Class)
		case "panic":
			panic(fmt.Sprintf("%s at %s.%s.%d: injected panic", f.Spec, step, point, n))
		case "stall":
			var done <-chan time.Time
			if f.Stall > 0 {
				t := time.NewTimer(f.Stall)
				defer t.Stop()
				done = t.C
			}
			select {
			case <-ctx.Done():
			case <-done:
			}
		}
	}
	return nil
}

// Stalls reports whether a stall fault is set for step at point and write n, so a caller can
// suspend its heartbeat first.
func (s *Set) Stalls(step, point string, n int) bool {
	if s.Empty() {
		return false
	}
	for _, f := range s.faults {
		if f.Step == step && f.Point == point && (f.N == 0 || f.N == n) && f.Action == "stall" {
			if f.Once && Fired(s.markerDir, f.Spec) {
				continue
			}
			return true
		}
	}
	return false
}

// claim creates the @once marker; false when it exists already.
func (s *Set) claim(f Fault) (bool, error) {
	if err := os.MkdirAll(s.markerDir, 0o755); err != nil {
		return false, fmt.Errorf("fault marker folder: %w", err)
	}
	fh, err := os.OpenFile(MarkerPath(s.markerDir, f.Spec), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if errors.Is(err, os.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("fault marker: %w", err)
	}
	_, werr := fh.WriteString(f.Spec + "\n")
	if err := errors.Join(werr, fh.Sync(), fh.Close()); err != nil {
		return false, fmt.Errorf("fault marker: %w", err)
	}
	return true, nil
}

// MarkerPath is the @once marker of a rule.
func MarkerPath(dir, spec string) string {
	h := sha256.Sum256([]byte(spec))
	return filepath.Join(dir, hex.EncodeToString(h[:8])+".fired")
}

// Fired reports whether the @once rule spec has fired (its marker exists).
func Fired(dir, spec string) bool {
	_, err := os.Stat(MarkerPath(dir, spec))
	return err == nil
}
