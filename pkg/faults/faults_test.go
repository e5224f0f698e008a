package faults_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cairnhq/cairn/pkg/faults"
	"github.com/cairnhq/cairn/pkg/retry"
)

// waitTimeout bounds every wait on a goroutine; it is a deadline, never a pause.
const waitTimeout = 10 * time.Second

func parse(t *testing.T, spec string) (*faults.Set, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := faults.Parse(spec, dir)
	if err != nil {
		t.Fatalf("Parse(%q): %v", spec, err)
	}
	return s, dir
}

func TestParseEveryPoint(t *testing.T) {
	t.Parallel()
	points := []string{
		faults.BeforeCommit, faults.AfterCommit, faults.BeforeWrite,
		faults.AfterWrite, faults.LostReply, faults.BeforeNextPublish,
	}
	for _, p := range points {
		s, _ := parse(t, "step-a."+p+"=error:permanent")
		err := s.Hit(context.Background(), "step-a", p, 0)
		if !errors.Is(err, faults.ErrPermanent) {
			t.Errorf("point %s: Hit = %v, want ErrPermanent", p, err)
		}
	}
}

func TestParseListAndBlanks(t *testing.T) {
	t.Parallel()
	s, _ := parse(t, " a.before-commit=error:temporary , ,b.after-commit=stall ")
	if err := s.Hit(context.Background(), "a", faults.BeforeCommit, 0); !errors.Is(err, faults.ErrTemporary) {
		t.Errorf("first rule: Hit = %v, want ErrTemporary", err)
	}
	if !s.Stalls("b", faults.AfterCommit, 0) {
		t.Error("second rule: Stalls = false, want true")
	}
}

func TestParseEmpty(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"", " ", ",,"} {
		s, _ := parse(t, spec)
		if !s.Empty() {
			t.Errorf("Parse(%q).Empty() = false", spec)
		}
		if err := s.Hit(context.Background(), "a", faults.BeforeCommit, 0); err != nil {
			t.Errorf("Parse(%q).Hit = %v", spec, err)
		}
	}
	var nilSet *faults.Set
	if !nilSet.Empty() || nilSet.Stalls("a", faults.BeforeCommit, 0) {
		t.Error("a nil Set is not empty")
	}
	if err := nilSet.Hit(context.Background(), "a", faults.BeforeCommit, 0); err != nil {
		t.Errorf("nil Set Hit = %v", err)
	}
	var zero faults.Set
	if !zero.Empty() {
		t.Error("the zero Set is not empty")
	}
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, rule, why string
	}{
		{"unknown point", "fetch.before-lunch=exit", "before-lunch"},
		{"index zero", "fetch.before-write.0=exit", "write index"},
		{"index negative", "fetch.before-write.-2=exit", "write index"},
		{"index not a number", "fetch.before-write.x=exit", "write index"},
		{"bad class", "fetch.before-write=error:sometimes", "error class"},
		{"no class", "fetch.before-write=error", "error class"},
		{"missing equals", "fetch.before-write", "want <step>"},
		{"no point", "fetch=exit", "before '='"},
		{"too many parts", "fetch.before-write.1.2=exit", "before '='"},
		{"unknown action", "fetch.before-write=explode", "unknown action"},
		{"bad stall", "fetch.before-write=stall:soon", "stall duration"},
		{"zero stall", "fetch.before-write=stall:0s", "must be positive"},
		{"negative stall", "fetch.before-write=stall:-1s", "must be positive"},
		{"exit with an argument", "fetch.before-write=exit:foo", "no argument"},
		{"empty step", ".before-write=exit", "step name is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A good rule first: the bad one must still be named.
			_, err := faults.Parse("ok.before-commit=exit,"+tt.rule, t.TempDir())
			if err == nil {
				t.Fatalf("Parse(%q) = nil error", tt.rule)
			}
			if !strings.Contains(err.Error(), `"`+tt.rule+`"`) {
				t.Errorf("error %q does not name the rule %q", err, tt.rule)
			}
			if !strings.Contains(err.Error(), tt.why) {
				t.Errorf("error %q does not say %q", err, tt.why)
			}
		})
	}
}

func TestHitMatchesOnlyItsPlace(t *testing.T) {
	t.Parallel()
	s, _ := parse(t, "post-ledger.before-write.24=error:temporary,fetch.after-commit=error:unknown")
	ctx := context.Background()
	misses := []struct {
		step, point string
		n           int
	}{
		{"post-ledger", faults.BeforeWrite, 23},
		{"post-ledger", faults.BeforeWrite, 25},
		{"post-ledger", faults.BeforeWrite, 0},
		{"post-ledger", faults.AfterWrite, 24},
		{"extract", faults.BeforeWrite, 24},
		{"fetch", faults.BeforeCommit, 0},
	}
	for _, m := range misses {
		if err := s.Hit(ctx, m.step, m.point, m.n); err != nil {
			t.Errorf("Hit(%s, %s, %d) = %v, want nil", m.step, m.point, m.n, err)
		}
	}
	err := s.Hit(ctx, "post-ledger", faults.BeforeWrite, 24)
	if !errors.Is(err, faults.ErrTemporary) {
		t.Fatalf("Hit at the rule's place = %v, want ErrTemporary", err)
	}
	if errors.Is(err, faults.ErrPermanent) || errors.Is(err, faults.ErrUnknown) {
		t.Errorf("Hit = %v matches another class too", err)
	}
	if !strings.Contains(err.Error(), "post-ledger.before-write.24=error:temporary") {
		t.Errorf("error %q does not name the rule", err)
	}
	// Without @once, the fault fires every time.
	if err := s.Hit(ctx, "post-ledger", faults.BeforeWrite, 24); !errors.Is(err, faults.ErrTemporary) {
		t.Errorf("second Hit = %v, want ErrTemporary again", err)
	}
	// No index: every write, and the index-less points.
	for _, n := range []int{0, 1, 7} {
		if err := s.Hit(ctx, "fetch", faults.AfterCommit, n); !errors.Is(err, faults.ErrUnknown) {
			t.Errorf("Hit(fetch, after-commit, %d) = %v, want ErrUnknown", n, err)
		}
	}
}

func TestOnceFiresOnce(t *testing.T) {
	t.Parallel()
	const rule = "extract.after-write.2=error:permanent@once"
	s, dir := parse(t, rule)
	ctx := context.Background()
	if faults.Fired(dir, rule) {
		t.Fatal("Fired before the first Hit")
	}
	if err := s.Hit(ctx, "extract", faults.AfterWrite, 1); err != nil {
		t.Fatalf("Hit at another index = %v", err)
	}
	if faults.Fired(dir, rule) {
		t.Fatal("a Hit at another index claimed the marker")
	}
	if err := s.Hit(ctx, "extract", faults.AfterWrite, 2); !errors.Is(err, faults.ErrPermanent) {
		t.Fatalf("first Hit = %v, want ErrPermanent", err)
	}
	if _, err := os.Stat(faults.MarkerPath(dir, rule)); err != nil {
		t.Fatalf("marker after the first Hit: %v", err)
	}
	if !faults.Fired(dir, rule) {
		t.Fatal("Fired = false after the first Hit")
	}
	if err := s.Hit(ctx, "extract", faults.AfterWrite, 2); err != nil {
		t.Fatalf("second Hit = %v, want nil", err)
	}
	// A new process (a new Set on the same folder) does not fire it either.
	again, err := faults.Parse(rule, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Hit(ctx, "extract", faults.AfterWrite, 2); err != nil {
		t.Fatalf("Hit after restart = %v, want nil", err)
	}
}

func TestOnceMarkerFolderIsCreated(t *testing.T) {
	t.Parallel()
	const rule = "a.before-commit=error:temporary@once"
	dir := t.TempDir() + "/data/faults"
	s, err := faults.Parse(rule, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Hit(context.Background(), "a", faults.BeforeCommit, 0); !errors.Is(err, faults.ErrTemporary) {
		t.Fatalf("Hit = %v", err)
	}
	if !faults.Fired(dir, rule) {
		t.Fatal("no marker in a folder that did not exist")
	}
}

func TestMarkerPathPerRule(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := faults.MarkerPath(dir, "a.before-commit=exit@once")
	b := faults.MarkerPath(dir, "b.before-commit=exit@once")
	if a == b {
		t.Fatalf("two rules share the marker %s", a)
	}
	if a != faults.MarkerPath(dir, "a.before-commit=exit@once") {
		t.Fatal("MarkerPath is not stable")
	}
	if !strings.HasPrefix(a, dir) {
		t.Fatalf("marker %s is not under %s", a, dir)
	}
}

// hitAsync runs Hit in a goroutine and returns the channel its result arrives on.
func hitAsync(ctx context.Context, s *faults.Set, step, point string, n int) <-chan error {
	done := make(chan error, 1)
	go func() { done <- s.Hit(ctx, step, point, n) }()
	return done
}

func TestStallUntilCancelled(t *testing.T) {
	t.Parallel()
	s, _ := parse(t, "extract.lost-reply=stall")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := hitAsync(ctx, s, "extract", faults.LostReply, 0)
	select {
	case err := <-done:
		t.Fatalf("Hit returned %v before its context ended", err)
	default:
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stall Hit = %v, want nil", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("stall did not end when its context was cancelled")
	}
}

func TestStallForDuration(t *testing.T) {
	t.Parallel()
	s, _ := parse(t, "extract.lost-reply=stall:10ms")
	done := hitAsync(context.Background(), s, "extract", faults.LostReply, 0)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stall Hit = %v, want nil", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("stall:10ms did not return")
	}
}

func TestStalls(t *testing.T) {
	t.Parallel()
	const once = "extract.after-write.2=stall@once"
	s, dir := parse(t, "fetch.before-commit=error:temporary,post-ledger.lost-reply=stall:1s,"+once)
	tests := []struct {
		step, point string
		n           int
		want        bool
	}{
		{"fetch", faults.BeforeCommit, 0, false}, // an error, not a stall
		{"post-ledger", faults.LostReply, 0, true},
		{"post-ledger", faults.LostReply, 9, true}, // no index: every write
		{"post-ledger", faults.AfterWrite, 0, false},
		{"extract", faults.AfterWrite, 2, true},
		{"extract", faults.AfterWrite, 1, false},
		{"extract", faults.AfterWrite, 3, false},
		{"nobody", faults.LostReply, 0, false},
	}
	for _, tt := range tests {
		if got := s.Stalls(tt.step, tt.point, tt.n); got != tt.want {
			t.Errorf("Stalls(%s, %s, %d) = %v, want %v", tt.step, tt.point, tt.n, got, tt.want)
		}
	}

	// Once the @once stall has fired, it no longer stalls.
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the stall returns at once: only the marker matters here
	if err := s.Hit(ctx, "extract", faults.AfterWrite, 2); err != nil {
		t.Fatalf("Hit = %v", err)
	}
	if !faults.Fired(dir, once) {
		t.Fatal("the @once stall left no marker")
	}
	if s.Stalls("extract", faults.AfterWrite, 2) {
		t.Error("Stalls = true for a @once stall that has fired")
	}
}

// An injected temporary fault is of the one temporary class (retry.ErrTemporary) and still
// says it was injected; the other classes are not temporary.
func TestInjectedTemporaryIsRetryTemporary(t *testing.T) {
	t.Parallel()
	s, _ := parse(t, "a.before-write=error:temporary,b.before-write=error:permanent,c.before-write=error:unknown")
	err := s.Hit(context.Background(), "a", faults.BeforeWrite, 3)
	if !errors.Is(err, retry.ErrTemporary) || !errors.Is(err, faults.ErrTemporary) {
		t.Errorf("Hit = %v, want both faults.ErrTemporary and retry.ErrTemporary", err)
	}
	if want := "a.before-write=error:temporary at a.before-write.3: injected temporary fault"; err.Error() != want {
		t.Errorf("Hit = %q, want %q", err, want)
	}
	for _, step := range []string{"b", "c"} {
		if err := s.Hit(context.Background(), step, faults.BeforeWrite, 3); err == nil || errors.Is(err, retry.ErrTemporary) {
			t.Errorf("Hit(%s) = %v, want an error that is not temporary", step, err)
		}
	}
}
